#!/usr/bin/env python3
"""The SLOG experiment (seed-002): does a separate log device speed up small synchronous writes?

    sudo python3 bench/slog.py [--files 300] [--delay-ms 8] [--targets oxzfs,zfs-fuse] [--out FILE]

Workload: --files files of 4 KiB, each one opened (created), written (4096 bytes), fsync'd and
closed, one after the other; the figure is the wall-clock seconds of the whole loop.

Pool: a mirror of two emulated disks with --delay-ms of latency per read and per write request
(8 ms: a hard disk), (a) without a log device and (b) with `log DEV` at pool creation, DEV an
emulated disk without delay (an SSD-like log device). Each of the four runs (oxzfs, zfs-fuse) x
(no log, log) gets fresh disks and a fresh pool.

An emulated disk is a sparse file under --work served by nbdkit through its delay filter
(`rdelay=Nms wdelay=Nms`; flushes are not delayed) and exposed as a plain file by nbdfuse
(`nbdfuse MNT/disk --command nbdkit -s --filter=delay file BACK ...`). The Debian packages
nbdkit and nbdfuse (in Debian 12 nbdfuse ships in libnbd-bin) are installed with apt-get if
missing.

oxzfs is target/release/oxzfs (or $OXZFS_BIN; built with `cargo build --release` if missing),
its daemon run in the foreground (`oxzfs daemon run`) with a private socket; zfs-fuse's daemon is
started as the system tests do (tests/tools/oracle_pools.py: under its lock, stopped at the end
only if started here). Needs root (FUSE mounts, apt-get).

If the oxzfs daemon is killed from outside during a run (a shared machine), that run is made
again from scratch, up to --retries times, and the report says so.

Everything made here goes at exit, on error and on Ctrl-C/SIGTERM too: pools destroyed, the
oxzfs daemon stopped, the zfs-fuse daemon stopped if started here, nbdfuse mounts unmounted,
nbdfuse/nbdkit processes ended (only those started here), the scratch directory (a new one
below --work, default /var/tmp) removed.
"""
import argparse
import contextlib
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))

PREFIX = "benchslog"
DISK_MIB = 512


def log(msg):
    sys.stderr.write(f"[slog] {msg}\n")
    sys.stderr.flush()


def sh(*cmd, check=True, timeout=300, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr.strip() or r.stdout.strip()}")
    return r


# ---------------------------------------------------------------------------------------------
# packages

def apt_install(*pkgs):
    """apt-get install as root (no sudo: a root shell may have none); update the lists only if
    the first attempt fails."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-qq", *pkgs]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        sh("apt-get", "update", "-qq", env=env, timeout=600)
        sh(*cmd, env=env, timeout=600)


def apt_has_candidate(pkg):
    r = subprocess.run(["apt-cache", "policy", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "Candidate:" in r.stdout and "Candidate: (none)" not in r.stdout


def delay_filter_present():
    r = subprocess.run(["nbdkit", "--dump-config"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("filterdir="):
            return os.path.exists(os.path.join(line.split("=", 1)[1], "nbdkit-delay-filter.so"))
    return False


def ensure_tools():
    if shutil.which("nbdkit") is None or not delay_filter_present():
        log("installing nbdkit")
        apt_install("nbdkit")
    if shutil.which("nbdfuse") is None:
        # Debian 13 and later have a package nbdfuse; Debian 12 ships the program in libnbd-bin
        pkg = "nbdfuse" if apt_has_candidate("nbdfuse") else "libnbd-bin"
        log(f"installing {pkg} (nbdfuse)")
        apt_install(pkg)
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        apt_install("fuse3")
    for tool in ("nbdkit", "nbdfuse"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} still missing after apt-get install")
    if not delay_filter_present():
        raise RuntimeError("nbdkit's delay filter (nbdkit-delay-filter.so) is missing")


# ---------------------------------------------------------------------------------------------
# processes and mounts made here, undone in reverse order

def mounts_under(root):
    """Mount points at or below root, deepest first."""
    out = []
    root = os.path.realpath(root)
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].replace("\\040", " ")
            if mp == root or mp.startswith(root + "/"):
                out.append(mp)
    return sorted(out, key=len, reverse=True)


def unmount_all(root):
    for mp in mounts_under(root):
        log(f"left mounted: {mp}: unmounting")
        fuse_unmount(mp) or fuse_unmount(mp, lazy=True)


def fuse_unmount(mp, lazy=False):
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    args = ["-u", "-z", mp] if lazy else ["-u", mp]
    r = subprocess.run([tool, *args], capture_output=True, text=True) if tool else None
    if r is None or r.returncode != 0:
        r = subprocess.run(["umount", *(["-l"] if lazy else []), mp], capture_output=True, text=True)
    return r.returncode == 0


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def end_process(proc, name, grace=10.0):
    """Wait for a process started here to exit, then SIGTERM, then SIGKILL it (and only it)."""
    if proc.poll() is not None:
        return
    try:
        proc.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    log(f"{name} (pid {proc.pid}) still running: SIGTERM")
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log(f"{name} (pid {proc.pid}) still running: SIGKILL")
        proc.kill()
        proc.wait()


class EmuDisk:
    """A sparse file served by nbdkit (delay filter) and shown as a plain file by nbdfuse."""

    def __init__(self, root, name, size_mib, delay_ms, rate_mbs=None):
        """delay_ms per request (nbdkit's delay filter); rate_mbs: the device's bandwidth in MB/s
        (10^6 bytes; nbdkit's rate filter), unlimited when None."""
        self.dir = os.path.join(root, name)
        self.mnt = os.path.join(self.dir, "mnt")
        self.path = os.path.join(self.mnt, "disk")
        os.makedirs(self.mnt)
        back = os.path.join(self.dir, "back.img")
        with open(back, "wb") as f:
            f.truncate(size_mib << 20)
        pidfile = os.path.join(self.dir, "nbdfuse.pid")
        self.logf = open(os.path.join(self.dir, "log"), "w")
        d = f"{int(delay_ms)}ms"
        filters = ["--filter=delay"] + (["--filter=rate"] if rate_mbs else [])
        params = [f"rdelay={d}", f"wdelay={d}"] + ([f"rate={int(rate_mbs * 8)}M"] if rate_mbs else [])
        self.proc = subprocess.Popen(
            ["nbdfuse", "-P", pidfile, self.path, "--command", "nbdkit", "-s", *filters, "file", back, *params],
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.nbdkit = []
        deadline = time.time() + 20
        while not (os.path.exists(pidfile) and os.path.exists(self.path)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"nbdfuse exited {self.proc.returncode}: {self.read_log()}")
            if time.time() > deadline:
                raise RuntimeError(f"nbdfuse did not come up in 20 s: {self.read_log()}")
            time.sleep(0.05)
        self.nbdkit = children(self.proc.pid)

    def read_log(self):
        self.logf.flush()
        with open(os.path.join(self.dir, "log")) as f:
            return f.read().strip()

    def close(self):
        if os.path.ismount(self.mnt) and not fuse_unmount(self.mnt):
            time.sleep(1)
            if not fuse_unmount(self.mnt):
                log(f"{self.mnt} busy: lazy unmount")
                fuse_unmount(self.mnt, lazy=True)
        end_process(self.proc, "nbdfuse")
        # nbdkit -s ends when nbdfuse closes its socket; make sure of it (only nbdkit children of our nbdfuse)
        for pid in self.nbdkit:
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if not f.read().startswith(b"nbdkit"):
                        continue
                for _ in range(50):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                log(f"nbdkit (pid {pid}) still running: SIGTERM")
                os.kill(pid, signal.SIGTERM)
        self.logf.close()


# ---------------------------------------------------------------------------------------------
# the two implementations

class Oxzfs:
    name = "oxzfs"

    def __init__(self, work, stack):
        self.work = work
        self.bin = os.environ.get("OXZFS_BIN") or os.path.join(REPO, "target", "release", "oxzfs")
        if not os.access(self.bin, os.X_OK):
            log("building oxzfs (cargo build --release)")
            sh("cargo", "build", "--release", "-q", "-p", "oxzfs-cli", cwd=REPO, timeout=3600)
        os.makedirs(work, exist_ok=True)
        self.env = dict(os.environ, OXZFS_SOCKET=os.path.join(work, "oxzfs.sock"))
        self.logf = open(os.path.join(work, "oxzfs-daemon.log"), "w")
        # in the foreground, so the process is ours to wait for (daemon start would detach it)
        self.proc = subprocess.Popen([self.bin, "daemon", "run"], env=self.env, cwd="/", stdin=subprocess.DEVNULL,
                                     stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(self.stop)
        deadline = time.time() + 20
        while self.ox("daemon", "status", check=False).returncode != 0:
            if self.proc.poll() is not None:
                raise RuntimeError(f"oxzfs daemon exited {self.proc.returncode}; see {self.logf.name}")
            if time.time() > deadline:
                raise RuntimeError("oxzfs daemon did not answer within 20 s")
            time.sleep(0.05)

    def ox(self, *a, check=True, timeout=600):
        r = subprocess.run([self.bin, *a], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"oxzfs {' '.join(a)}: {r.stderr.strip()}")
        return r

    def check_alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"the oxzfs daemon exited ({self.proc.returncode}): {self.log_tail()}")

    def log_tail(self, n=15):
        self.logf.flush()
        with open(self.logf.name, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-n:])

    def create(self, pool, alt, vdevs):
        # `zpool create` would start a daemon of its own on our socket if ours were gone
        self.check_alive()
        self.ox("zpool", "create", "-f", "-R", alt, pool, *vdevs)
        return os.path.join(alt, pool)

    def destroy(self, pool):
        if self.ox("zpool", "destroy", "-f", pool, check=False).returncode != 0:
            self.ox("zpool", "export", "-f", pool, check=False)

    def stop(self):
        # also when ours has died: then any daemon answering on our private socket was started on
        # it by one of our commands, and is ours to stop too
        with contextlib.suppress(Exception):
            self.ox("daemon", "stop", check=False, timeout=60)
        end_process(self.proc, "oxzfs daemon")
        if self.proc.returncode not in (0, None):
            log(f"oxzfs daemon exited {self.proc.returncode}; its log ends:\n{self.log_tail()}")
        self.logf.close()


class ZfsFuse:
    name = "zfs-fuse"

    def __init__(self, work, stack):
        import oracle_pools
        os.makedirs(work, exist_ok=True)
        log("starting zfs-fuse (or using the running daemon) under its lock")
        zf = oracle_pools.ZfsFuse(work)
        stack.enter_context(zf)

    def create(self, pool, alt, vdevs):
        sh("zpool", "create", "-f", "-R", alt, pool, *vdevs)
        # zfs-fuse mounts the pool's root file system at the altroot itself
        return sh("zfs", "get", "-H", "-o", "value", "mountpoint", pool).stdout.strip()

    def destroy(self, pool):
        if sh("zpool", "destroy", "-f", pool, check=False).returncode != 0:
            sh("zpool", "export", "-f", pool, check=False)


IMPLS = {"oxzfs": Oxzfs, "zfs-fuse": ZfsFuse}


# ---------------------------------------------------------------------------------------------

def workload(mnt, nfiles):
    d = os.path.join(mnt, "slog")
    os.mkdir(d)
    data = [os.urandom(4096) for _ in range(nfiles)]
    start = time.perf_counter()
    for i in range(nfiles):
        fd = os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            if os.write(fd, data[i]) != 4096:
                raise RuntimeError("short write")
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def one_run(impl, work, tag, with_log, a):
    """Fresh disks and a fresh pool; returns the workload's seconds. Undoes all it made."""
    root = os.path.join(work, f"{impl.name}-{tag}")
    os.makedirs(root)
    pool = f"{PREFIX}-{'ox' if impl.name == 'oxzfs' else 'zf'}-{tag}"
    alt = os.path.join(root, "alt")
    os.makedirs(alt)
    with contextlib.ExitStack() as stack:
        disks = []
        for name, delay in [("d0", a.delay_ms), ("d1", a.delay_ms)] + ([("log0", 0)] if with_log else []):
            disk = EmuDisk(root, name, DISK_MIB, delay)
            stack.callback(disk.close)
            disks.append(disk)
        vdevs = ["mirror", disks[0].path, disks[1].path] + (["log", disks[2].path] if with_log else [])
        log(f"{impl.name}: zpool create {pool} {' '.join(v.replace(root + '/', '') for v in vdevs)}")
        # undone in reverse: the pool destroyed, then whatever is still mounted below alt (a
        # daemon that died leaves its FUSE mount behind), then the disks
        stack.callback(unmount_all, alt)
        mnt = impl.create(pool, alt, vdevs)
        stack.callback(impl.destroy, pool)
        if not os.path.isdir(mnt):
            raise RuntimeError(f"{impl.name}: pool {pool} is not mounted at {mnt}")
        secs = workload(mnt, a.files)
        log(f"{impl.name} {tag}: {a.files} files in {secs:.2f} s ({secs / a.files * 1000:.1f} ms each)")
        return secs


def report(a, argv, res, names, errors, notes):
    def cell(n, k):
        return f"{res[(n, k)]:.2f}" if (n, k) in res else "error"

    def ratio(x, y):
        return f"{res[x] / res[y]:.2f}" if x in res and y in res and res[y] else "-"

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    lines = [f"# SLOG experiment (seed-002), {datetime.date.today().isoformat()}", "",
             f"Machine: {os.cpu_count()} CPUs, {mem} GiB, Linux {platform.release()}.",
             f"Command: `sudo python3 bench/slog.py {' '.join(argv)}`", "",
             f"{a.files} files of 4 KiB, each created, written, fsync'd and closed in turn, on a pool that is a "
             f"mirror of two emulated disks with {a.delay_ms} ms per request (nbdkit delay filter through "
             "nbdfuse), without and with an undelayed emulated log device (`log DEV`). Seconds for the "
             "whole loop: lower is better.", "",
             "| implementation | no log (s) | log (s) | speedup no-log/log |",
             "|---|---|---|---|"]
    for n in names:
        lines.append(f"| {n} | {cell(n, 'nolog')} | {cell(n, 'log')} | {ratio((n, 'nolog'), (n, 'log'))} |")
    if "oxzfs" in names and "zfs-fuse" in names:
        lines.append(f"| oxzfs/zfs-fuse (time) | {ratio(('oxzfs', 'nolog'), ('zfs-fuse', 'nolog'))} | "
                     f"{ratio(('oxzfs', 'log'), ('zfs-fuse', 'log'))} | |")
    lines.append("")
    per = [f"{n} {k}: {res[(n, k)] / a.files * 1000:.1f} ms" for n in names for k in ("nolog", "log") if (n, k) in res]
    if per:
        lines.append("Per file: " + ", ".join(per) + ".")
    for note in notes:
        lines.append(f"\n{note}.")
    for k, e in errors.items():
        lines.append(f"\n{k}: failed: {e}")
    return "\n".join(lines) + "\n"


class Interrupted(BaseException):
    pass


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=300, help="files written and fsync'd per run (default 300)")
    ap.add_argument("--delay-ms", type=int, default=8, help="latency per request of the mirror's disks (default 8)")
    ap.add_argument("--targets", default="oxzfs,zfs-fuse")
    ap.add_argument("--retries", type=int, default=2,
                    help="runs again (fresh daemon, disks, pool) when the oxzfs daemon is killed from "
                         "outside (default 2)")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp, removed at exit)")
    ap.add_argument("--out", help="also write the report to this file")
    a = ap.parse_args(argv)
    names = [x for x in a.targets.split(",") if x]
    for n in names:
        if n not in IMPLS:
            ap.error(f"unknown target {n} (known: {', '.join(IMPLS)})")
    if os.geteuid() != 0:
        sys.exit("slog.py: run as root (FUSE mounts, apt-get): sudo python3 bench/slog.py")

    def on_signal(signum, _frame):
        # once: a second Ctrl-C must not break off the cleanup the first one starts
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    ensure_tools()
    if a.work:
        os.makedirs(a.work, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f"{PREFIX}-", dir=a.work)
    else:
        work = tempfile.mkdtemp(prefix=f"{PREFIX}-", dir="/var/tmp")
    res, errors, notes = {}, {}, []
    try:
        for n in names:
            with contextlib.ExitStack() as outer:
                impl, starts = None, 0
                for tag, with_log in (("nolog", False), ("log", True)):
                    for attempt in range(1, a.retries + 2):
                        if impl is None:
                            stack = outer.enter_context(contextlib.ExitStack())
                            starts += 1
                            try:
                                impl = IMPLS[n](os.path.join(work, f"{n}-daemon{starts}"), stack)
                            except Exception as e:
                                errors[f"{n} {tag}"] = f"{type(e).__name__}: {e}"
                                log(f"{n}: {errors[f'{n} {tag}']}")
                                break
                        try:
                            res[(n, tag)] = one_run(impl, work, f"{tag}{attempt}", with_log, a)
                            break
                        except Exception as e:  # a run that fails is reported, the others still run
                            err = f"{type(e).__name__}: {e}"
                            log(f"{n} {tag}: {err}")
                            rc = impl.proc.poll() if isinstance(impl, Oxzfs) else None
                            killed = rc is not None and rc < 0
                            if rc is not None:
                                stack.close()  # a new daemon for what is left
                                impl = None
                            if killed and attempt <= a.retries:
                                # on a shared machine something else may kill it: again, and say so
                                notes.append(f"{n} {tag}: the oxzfs daemon was killed by signal {-rc} "
                                             f"during attempt {attempt} (not by this script); run again")
                                continue
                            errors[f"{n} {tag}"] = err
                            break
    except Interrupted as e:
        log(f"interrupted ({e}): cleaned up")
        raise
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        unmount_all(work)
        shutil.rmtree(work, ignore_errors=True)
    text = report(a, argv, res, names, errors, notes)
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
    return 0 if not errors else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Interrupted:
        sys.exit(130)
