"""System-test harness: oracle pools made at test time, and the oxzfs binary run in isolation.

Fixtures (all pools are made once per work dir and reused; see tests/tools/oracle_pools.py):
  oxzfs_bin        path of the oxzfs binary: $OXZFS_BIN, else target/{release,debug}/oxzfs
  work_dir         $OXZFS_TEST_DIR or /var/tmp/oxzfs-test
  zfs_fuse_pools   {pool: dir} pools written by zfs-fuse, with manifests and OpenZFS zdb -bb output
  ztest_pools      {pool: dir} pools written by OpenZFS ztest, with zdb -bb output
  shared_fixtures  {name: (fixture dir, decompressed vdev dir)} from ../shared/fixtures (optional)
  oxzfs            per test module: an Oxzfs runner with its own socket and daemon, torn down after
A missing tool fails the test with what to install; only the optional shared fixtures may skip.

Daemons: every Oxzfs kills, at teardown, whatever `oxzfs daemon run` process still serves its socket
(found through /proc, since `daemon start` only launches it); Oxzfs runners never torn down are torn
down when the session ends, and the run fails if any daemon serving a socket below the work dir is
still alive then, naming it. The suite runs on every core with pytest-xdist (`-n auto --dist
loadfile`, scripts/test.sh): one module stays in one worker with its daemon and run dir, zfs-fuse is
used only under its system-wide lock (oracle_pools.ZfsFuse), oracle pools are made under a file lock.
"""
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
sys.path.insert(0, os.path.join(TESTS, "tools"))

import manifest as manifest_mod  # noqa: E402
import oracle_pools  # noqa: E402
import zdbparse  # noqa: E402

PANIC_MARKERS = ("panicked at", "RUST_BACKTRACE")


def find_oxzfs():
    env = os.environ.get("OXZFS_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    for prof in ("release", "debug"):
        p = os.path.join(REPO, "target", prof, "oxzfs")
        if os.access(p, os.X_OK):
            return p
    return None


def pytest_addoption(parser):
    parser.addoption("--nightly", action="store_true", default=False,
                     help="also run the tests marked nightly (as OXZFS_NIGHTLY=1 does)")


def nightly(config):
    return config.getoption("--nightly") or os.environ.get("OXZFS_NIGHTLY", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Tests marked nightly run only in the nightly run; the default run leaves them out."""
    if nightly(config):
        return
    keep = [i for i in items if i.get_closest_marker("nightly") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("nightly")])
        items[:] = keep


@pytest.fixture(scope="session")
def oxzfs_bin():
    p = find_oxzfs()
    if not p:
        pytest.fail("no oxzfs binary: build it with `cargo build -p oxzfs-cli` or set OXZFS_BIN "
                    "(scripts/test.sh does both)")
    return p


@pytest.fixture(scope="session")
def work_dir():
    d = oracle_pools.workdir()
    os.makedirs(d, exist_ok=True)
    return d


def _oracle(fn, *a):
    try:
        return fn(*a)
    except oracle_pools.MissingTool as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def zfs_fuse_pools(work_dir):
    return _oracle(oracle_pools.zfs_fuse_pools, work_dir)


@pytest.fixture(scope="session")
def ztest_pools(work_dir):
    return _oracle(oracle_pools.ztest_pools, work_dir)


def shared_fixtures_dir():
    return os.environ.get("OXZFS_SHARED_FIXTURES", os.path.join(REPO, "..", "shared", "fixtures"))


@pytest.fixture(scope="session")
def shared_fixtures(work_dir):
    src = os.path.abspath(shared_fixtures_dir())
    if not os.path.isdir(src):
        pytest.skip(f"optional shared fixtures not present at {src} (set OXZFS_SHARED_FIXTURES to use them)")
    return _oracle(oracle_pools.shared_fixtures, src, work_dir)


def pool_info(pool_dir):
    with open(os.path.join(pool_dir, "info.json")) as f:
        return json.load(f)


def copy_vdevs(src_vdev_dir, dst_dir):
    """A private, sparse copy of a pool's device files, so damage and bugs never reach the cache."""
    if os.path.exists(dst_dir):
        shutil.rmtree(dst_dir)
    os.makedirs(dst_dir)
    for name in sorted(os.listdir(src_vdev_dir)):
        subprocess.run(["cp", "--sparse=always", os.path.join(src_vdev_dir, name), os.path.join(dst_dir, name)],
                       check=True)
    return dst_dir


def mounts_below(prefix):
    """Mount points below PREFIX, deepest first (from /proc/self/mounts)."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].replace("\\040", " ")
            if mp == prefix or mp.startswith(prefix.rstrip("/") + "/"):
                out.append(mp)
    return sorted(out, key=len, reverse=True)


def unmount_below(prefix):
    for mp in mounts_below(prefix):
        if shutil.which("fusermount3"):
            r = subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True)
            if r.returncode == 0:
                continue
        subprocess.run(["umount", "-l", mp], capture_output=True)


def daemon_processes(prefix):
    """{pid: socket} of the live `oxzfs daemon run` processes whose OXZFS_SOCKET is PREFIX or below it."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv[1:3] != [b"daemon", b"run"] or not os.path.basename(argv[0]).startswith(b"oxzfs"):
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        sock = env.get(b"OXZFS_SOCKET", b"").decode(errors="replace")
        if sock == prefix or sock.startswith(prefix.rstrip("/") + "/"):
            out[int(d)] = sock
    return out


def process_gone(pid):
    """True once every thread of PID has exited (a zombie waiting for its parent counts as gone).
    The main thread alone is not enough: killed, it turns zombie at once while a thread still in
    an uninterruptible write or flush goes on holding the process's files (its listening socket
    among them) until that call returns."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return False
        except (OSError, IndexError):
            continue
    return True


def socket_answers(path):
    """True if something accepts connections on the Unix socket PATH."""
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


def kill_processes(pids, sig=signal.SIGKILL, wait=30):
    """Send SIG to every pid and wait up to WAIT seconds for them to go; returns those still alive."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.time() + wait
    alive = [p for p in pids if not process_gone(p)]
    while alive and time.time() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if not process_gone(p)]
    return alive


# Oxzfs runners of this process not yet torn down (torn down at the latest when the session ends).
_LIVE = []


class Result:
    def __init__(self, args, cp):
        self.args, self.returncode, self.stdout, self.stderr = args, cp.returncode, cp.stdout, cp.stderr

    @property
    def out(self):
        return self.stdout

    note = ""

    def __repr__(self):
        return (f"$ oxzfs {' '.join(self.args)}\n[exit {self.returncode}]\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}" + (f"--- daemon log (last lines)\n{self.note}" if self.note else ""))


class Oxzfs:
    """Runs the oxzfs binary with an isolated daemon socket; every call is checked for panics."""

    def __init__(self, binary, base):
        self.binary = binary
        self.base = base
        self.socket = os.path.join(base, "oxzfs.sock")
        if len(self.socket.encode()) > 100:
            # A unix socket's path has room for 107 bytes: a deep work directory gets one
            # under /tmp, named after it (the daemon's log sits beside the socket).
            tag = hashlib.sha256(base.encode()).hexdigest()[:16]
            os.makedirs("/tmp/oxzfs-sockets", exist_ok=True)
            self.socket = f"/tmp/oxzfs-sockets/{tag}.sock"
        self.env = dict(os.environ, OXZFS_SOCKET=self.socket, RUST_BACKTRACE="1")
        self.daemon_proc = None
        self.imported = []
        _LIVE.append(self)

    def run(self, *args, check=False, timeout=600, input=None):
        args = [str(a) for a in args]
        try:
            cp = subprocess.run([self.binary] + args, env=self.env, capture_output=True, text=True,
                                errors="replace", timeout=timeout, input=input,
                                stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"oxzfs {' '.join(args)} did not finish in {timeout}s")
        r = Result(args, cp)
        if "cannot reach the oxzfs daemon" in r.stderr:
            r.note = self.daemon_log_tail()
        assert not any(m in r.stderr for m in ("panicked at",)), f"oxzfs panicked:\n{r!r}"
        assert r.returncode >= 0, f"oxzfs killed by signal {-r.returncode}:\n{r!r}"
        assert r.returncode != 101, f"oxzfs exited 101 (a Rust panic):\n{r!r}"
        if check:
            assert r.returncode == 0, f"oxzfs failed:\n{r!r}"
        return r

    def zpool(self, *a, **kw):
        return self.run("zpool", *a, **kw)

    def zfs(self, *a, **kw):
        return self.run("zfs", *a, **kw)

    def zdb(self, *a, **kw):
        return self.run("zdb", *a, **kw)

    # ---- daemon
    def daemon_alive(self):
        return self.run("daemon", "status", timeout=30).returncode == 0

    def start_daemon(self):
        os.makedirs(self.base, exist_ok=True)
        with open(os.path.join(self.base, "daemon.log"), "ab") as logf:
            self.daemon_proc = subprocess.Popen([self.binary, "daemon", "start"], env=self.env,
                                                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.daemon_alive():
                return
            rc = self.daemon_proc.poll()
            if rc not in (None, 0):
                break
            time.sleep(0.2)
        log = open(os.path.join(self.base, "daemon.log"), errors="replace").read()
        pytest.fail(f"oxzfs daemon did not come up on {self.socket}:\n{log}")

    def server_pid(self):
        """The pid of the `oxzfs daemon run` process serving this runner's socket (`daemon start`
        launches it and exits at once)."""
        pids = sorted(daemon_processes(self.socket))
        assert len(pids) == 1, f"want one oxzfs daemon serving {self.socket}, found pids {pids}"
        return pids[0]

    def daemon_log_tail(self, lines=40):
        """The last lines of the daemon logs of this runner (the launcher's and the daemon's own)."""
        out = []
        for path in (os.path.join(self.base, "daemon.log"), self.socket + ".log"):
            with contextlib.suppress(OSError):
                tail = open(path, errors="replace").read().splitlines()[-lines:]
                out.append(f"[{os.path.basename(path)}]\n" + "\n".join(tail) + "\n")
        return "".join(out)

    def kill9(self):
        """kill -9 the process serving the pools; returns once it is gone and its socket refuses
        connections (fails if it is not)."""
        pid = self.server_pid()
        left = kill_processes([pid], signal.SIGKILL, wait=30)
        assert not left, f"oxzfs daemon pid {pid} ({self.socket}) still alive 30 s after SIGKILL"
        deadline = time.time() + 30
        while socket_answers(self.socket):
            assert time.time() < deadline, f"{self.socket} still accepts connections 30 s after its daemon (pid {pid}) was killed"
            time.sleep(0.1)
        with contextlib.suppress(Exception):
            self.daemon_proc.wait(10)
        return pid

    def kill_daemons(self, grace=10):
        """End every daemon still serving this runner's socket: SIGTERM, then SIGKILL after GRACE s."""
        pids = list(daemon_processes(self.socket))
        if pids:
            pids = kill_processes(pids, signal.SIGTERM, wait=grace)
        if pids:
            kill_processes(pids, signal.SIGKILL, wait=30)

    def stop_daemon(self):
        with contextlib.suppress(Exception):
            self.run("daemon", "stop", timeout=60)
        p = self.daemon_proc
        if p is not None and p.poll() is None:
            # a launcher that stays in the foreground is our child: end it by its own pid
            deadline = time.time() + 10
            while p.poll() is None and time.time() < deadline:
                time.sleep(0.2)
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)
            if p.poll() is None:
                p.kill()
                p.wait()
        self.kill_daemons()

    # ---- pools
    def import_ro(self, vdev_dirs, pool, altroot, force=False, nomount=False):
        args = ["zpool", "import"]
        for d in ([vdev_dirs] if isinstance(vdev_dirs, str) else vdev_dirs):
            args += ["-d", d]
        args += ["-o", "readonly=on", "-R", altroot]
        if force:
            args.append("-f")
        if nomount:
            args.append("-N")
        r = self.run(*args, pool)
        if r.returncode == 0:
            self.imported.append(pool)
        return r

    def export(self, pool):
        r = self.zpool("export", pool)
        if r.returncode == 0 and pool in self.imported:
            self.imported.remove(pool)
        return r

    def teardown(self):
        for pool in list(self.imported):
            with contextlib.suppress(Exception):
                self.export(pool)
        self.stop_daemon()
        unmount_below(self.base)
        with contextlib.suppress(ValueError):
            _LIVE.remove(self)


@pytest.fixture(scope="session", autouse=True)
def _daemons_ended():
    """At the end of the session (of each xdist worker), tear down every Oxzfs runner a test left."""
    yield
    for ox in list(_LIVE):
        ox.teardown()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Fail the run if an `oxzfs daemon` the suite started is still alive: by now every runner
    has been torn down (in xdist, every worker has finished), so any daemon serving a socket below
    the work dir leaked. It is named, then killed so that it holds no vdev files or mounts."""
    if hasattr(session.config, "workerinput"):
        return  # the controller checks once all workers are done
    left = daemon_processes(oracle_pools.workdir())
    if not left:
        return
    names = []
    for pid, sock in sorted(left.items()):
        cmd = "oxzfs daemon run"
        with contextlib.suppress(OSError):
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        names.append(f"pid {pid}: {cmd} (OXZFS_SOCKET={sock})")
    kill_processes(list(left), signal.SIGKILL)
    sys.stderr.write("\nleftover oxzfs daemons after the test session (now killed):\n  "
                     + "\n  ".join(names) + "\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def fresh_daemon(oxzfs_bin, work_dir, tag, env=None):
    """A daemon of its own over an emptied WORK_DIR/run/TAG, with ENV added to its environment:
    its runner (tear it down)."""
    base = os.path.join(work_dir, "run", tag)
    unmount_below(base)
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    ox = Oxzfs(oxzfs_bin, base)
    ox.env.update(env or {})
    ox.start_daemon()
    return ox


@pytest.fixture(scope="module")
def oxzfs(request, oxzfs_bin, work_dir):
    ox = fresh_daemon(oxzfs_bin, work_dir, request.module.__name__.rsplit(".", 1)[-1])
    try:
        yield ox
    finally:
        ox.teardown()


# ------------------------------------------------------------------------------------------- checks

@contextlib.contextmanager
def _zfs_fuse_pool(work_dir, pool, argv, what):
    """zfs-fuse running (its lock held) with POOL brought in by the `zpool` command ARGV (WHAT
    names it in a failure); the pool is exported when the body is done (forcibly if the body
    failed)."""
    try:
        zf = oracle_pools.ZfsFuse(work_dir)
        zf.__enter__()
    except oracle_pools.MissingTool as e:
        pytest.fail(str(e), pytrace=False)
    try:
        r = subprocess.run(argv, capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse cannot {what} {pool}:\n{r.stdout}{r.stderr}"
        yield
        r = subprocess.run(["zpool", "export", pool], capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse export failed:\n{r.stdout}{r.stderr}"
    finally:
        subprocess.run(["zpool", "export", "-f", pool], capture_output=True)
        zf.__exit__(None, None, None)


@contextlib.contextmanager
def zfs_fuse_imported(work_dir, vdir, altroot, pool):
    """POOL imported by zfs-fuse from VDIR under ALTROOT: yields its root mountpoint, and
    exports it when the body is done (forcibly if the body failed)."""
    with _zfs_fuse_pool(work_dir, pool, ["zpool", "import", "-d", vdir, "-R", altroot, pool], "import"):
        yield os.path.join(altroot, pool)


@contextlib.contextmanager
def zfs_fuse_new_pool(work_dir, zalt, pool, devs):
    """A new pool POOL that zfs-fuse makes of DEVS (its root file system mounted at /POOL under
    the altroot ZALT): the body writes through zfs-fuse; exported when it is done."""
    os.makedirs(zalt, exist_ok=True)
    with _zfs_fuse_pool(work_dir, pool, ["zpool", "create", "-f", "-R", zalt, "-m", "/" + pool, pool, *devs], "create"):
        yield


def diff_manifests(got, want, limit=8):
    """A short human-readable difference of two manifests (lists of dicts), or '' if equal."""
    g = {e["path"]: e for e in got}
    w = {e["path"]: e for e in want}
    lines = []
    for p in sorted(set(g) | set(w)):
        if g.get(p) != w.get(p):
            if p not in g:
                lines.append(f"missing  {p}: want {w[p]}")
            elif p not in w:
                lines.append(f"extra    {p}: got {g[p]}")
            else:
                keys = sorted(k for k in set(g[p]) | set(w[p]) if g[p].get(k) != w[p].get(k))
                lines.append(f"differs  {p}: " + ", ".join(f"{k}: got {g[p].get(k)!r} want {w[p].get(k)!r}"
                                                           for k in keys))
    more = f"\n... and {len(lines) - limit} more" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def assert_manifest(root, expected_file, exclude=()):
    assert os.path.isdir(root), f"{root} is not a directory (not mounted?)"
    want = manifest_mod.load(expected_file)
    got = manifest_mod.manifest(root, exclude)
    d = diff_manifests(got, want)
    assert not d, f"{root} differs from {os.path.basename(expected_file)}:\n{d}"


def parse_zdb(text):
    return zdbparse.parse(text)


def listed_pools(text):
    """Pool names in `zpool import` (search) output: lines '   pool: NAME'."""
    names = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("pool: "):
            names.append(s[len("pool: "):].strip())
    return names


def status_rows(text):
    """{device name: (state, read, write, cksum)} from `zpool status` config rows."""
    rows = {}
    in_cfg = False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("NAME") and "STATE" in s:
            in_cfg = True
            continue
        if in_cfg:
            if not s or s.startswith("errors:"):
                in_cfg = False
                continue
            parts = s.split()
            if len(parts) >= 5:
                rows[parts[0]] = (parts[1], parts[2], parts[3], parts[4])
            elif len(parts) >= 2:
                rows[parts[0]] = (parts[1], None, None, None)
    return rows


def count(v):
    """zpool status error counters may be abbreviated (1.2K)."""
    if v is None:
        return 0
    mult = {"K": 1000, "M": 10 ** 6, "G": 10 ** 9}
    if v[-1:] in mult:
        return int(float(v[:-1]) * mult[v[-1]])
    return int(v)
