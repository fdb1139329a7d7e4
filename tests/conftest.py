"""System-test harness: oracle pools made at test time, and the oxzfs binary run in isolation.

Fixtures (all pools are made once per work dir and reused; see tests/tools/oracle_pools.py):
  oxzfs_bin        path of the oxzfs binary: $OXZFS_BIN, else target/{release,debug}/oxzfs
  work_dir         $OXZFS_TEST_DIR or /var/tmp/oxzfs-test
  zfs_fuse_pools   {pool: dir} pools written by zfs-fuse, with manifests and OpenZFS zdb -bb output
  ztest_pools      {pool: dir} pools written by OpenZFS ztest, with zdb -bb output
  shared_fixtures  {name: (fixture dir, decompressed vdev dir)} from ../shared/fixtures (optional)
  oxzfs            per test module: an Oxzfs runner with its own socket and daemon, torn down after
A missing tool fails the test with what to install; only the optional shared fixtures may skip.
"""
import contextlib
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


class Result:
    def __init__(self, args, cp):
        self.args, self.returncode, self.stdout, self.stderr = args, cp.returncode, cp.stdout, cp.stderr

    @property
    def out(self):
        return self.stdout

    def __repr__(self):
        return (f"$ oxzfs {' '.join(self.args)}\n[exit {self.returncode}]\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")


class Oxzfs:
    """Runs the oxzfs binary with an isolated daemon socket; every call is checked for panics."""

    def __init__(self, binary, base):
        self.binary = binary
        self.base = base
        self.socket = os.path.join(base, "oxzfs.sock")
        self.env = dict(os.environ, OXZFS_SOCKET=self.socket, RUST_BACKTRACE="1")
        self.daemon_proc = None
        self.imported = []

    def run(self, *args, check=False, timeout=600, input=None):
        args = [str(a) for a in args]
        try:
            cp = subprocess.run([self.binary] + args, env=self.env, capture_output=True, text=True,
                                errors="replace", timeout=timeout, input=input,
                                stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"oxzfs {' '.join(args)} did not finish in {timeout}s")
        r = Result(args, cp)
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

    def stop_daemon(self):
        with contextlib.suppress(Exception):
            self.run("daemon", "stop", timeout=60)
        p = self.daemon_proc
        if p is not None and p.poll() is None:
            # a daemon that stays in the foreground is our child: end it by its own pid
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


@pytest.fixture(scope="module")
def oxzfs(request, oxzfs_bin, work_dir):
    base = os.path.join(work_dir, "run", request.module.__name__.rsplit(".", 1)[-1])
    unmount_below(base)
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    ox = Oxzfs(oxzfs_bin, base)
    ox.start_daemon()
    try:
        yield ox
    finally:
        ox.teardown()


# ------------------------------------------------------------------------------------------- checks

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
