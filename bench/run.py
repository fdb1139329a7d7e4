#!/usr/bin/env python3
"""The benchmark driver: the same workloads, in one run, on oxzfs (FUSE), zfs-fuse, and kernel ext4
and btrfs (each over a loop device), printed as a table of figures and of oxzfs's ratios.

    sudo python3 bench/run.py [--targets oxzfs,zfs-fuse,ext4,btrfs] [--quick] [--out FILE]

Every target gets the same sparse backing files under --work (default /var/tmp/oxzfs-bench), one
device of --size-mib. Between writing and reading, each file system is unmounted (oxzfs and
zfs-fuse: pool export and import) and the page cache dropped, so reads come from the device.
Workloads:
  seq-write   1 MiB writes of a file, then fsync                         MB/s
  seq-read    the same file read back in 1 MiB reads                     MB/s
  rand-read   4 KiB reads at random offsets of that file                  IOPS
  fsync-write 4 KiB writes, each followed by fsync                        ops/s
  raw-disk fsync-write  the same by fio, on a file in the directory of the target's device
              file (the disk under the pools' vdev files), right after fsync-write  ops/s
  raw-disk fdatasync-overwrite  fio again, writing in place in a file written before, each
              write followed by fdatasync: the disk's floor for a log that writes where its
              file already has blocks                                      ops/s
  create/stat/delete  N small files (N = 10000, 2000 with --quick)        ops/s each
  walk        os.walk + lstat of the tree of small files                  entries/s
  create/fsync-write, 4 procs  the same by 4 processes at once, each in its own directory
              or file (what serving FUSE from several threads and group commit are for)  ops/s
Needs root (loop devices, mounts). oxzfs is target/release/oxzfs (built if missing); fio is
installed with apt-get if missing. Below the table, oxzfs's fsync-write as a fraction of the raw
disk's (the fio row of the oxzfs column). With --out FILE.md, the figures also go to FILE.json and
a plot of oxzfs's ratios and the raw figures to FILE.png (matplotlib: installed with pip, or as
Debian's python3-matplotlib, if missing), linked from the report.
"""
import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))


def sh(*cmd, check=True, **kw):
    return subprocess.run([str(c) for c in cmd], check=check, capture_output=True, text=True, **kw)


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


class Target:
    name = "?"

    def __init__(self, work, size_mib):
        self.work = os.path.join(work, self.name)
        self.size = size_mib << 20
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.dev = os.path.join(self.work, "dev0")
        with open(self.dev, "wb") as f:
            f.truncate(self.size)
        self.mnt = os.path.join(self.work, "mnt")
        os.makedirs(self.mnt)

    def remount(self):
        self.unmount()
        drop_caches()
        self.mount()


class Kernel(Target):
    fs = "ext4"

    def setup(self):
        self.loop = sh("losetup", "--find", "--show", self.dev).stdout.strip()
        mk = ["mkfs.ext4", "-q", "-F"] if self.fs == "ext4" else ["mkfs.btrfs", "-q", "-f"]
        sh(*mk, self.loop)
        self.mount()

    def mount(self):
        sh("mount", self.loop, self.mnt)

    def unmount(self):
        sh("umount", self.mnt)

    def teardown(self):
        sh("umount", self.mnt, check=False)
        sh("losetup", "-d", getattr(self, "loop", ""), check=False)


class Ext4(Kernel):
    name = "ext4"
    fs = "ext4"


class Btrfs(Kernel):
    name = "btrfs"
    fs = "btrfs"


ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


@contextlib.contextmanager
def kernel_uring(on):
    """The fuse module's enable_uring set to ON (None: left alone) while the block runs, then
    given back its value (the kernel offers FUSE over io_uring to mounts made while it is Y)."""
    if on is None or not os.path.exists(ENABLE_URING):
        yield
        return
    before = open(ENABLE_URING).read().strip()
    with open(ENABLE_URING, "w") as f:
        f.write("Y" if on else "N")
    try:
        yield
    finally:
        with open(ENABLE_URING, "w") as f:
            f.write(before)


class Oxzfs(Target):
    name = "oxzfs"
    # The fuse_io_uring tunable the daemon starts with (None: its default); --fuse-io-uring.
    fuse_io_uring = None

    def setup(self):
        self.bin = os.environ.get("OXZFS_BIN") or os.path.join(REPO, "target", "release", "oxzfs")
        if not os.access(self.bin, os.X_OK):
            sh("cargo", "build", "--release", "-q", "-p", "oxzfs-cli", cwd=REPO)
        self.env = dict(os.environ, OXZFS_SOCKET=os.path.join(self.work, "sock"))
        opts = [] if self.fuse_io_uring is None else ["-o", f"fuse_io_uring={self.fuse_io_uring}"]
        subprocess.run([self.bin, "daemon", "start", *opts], env=self.env, check=True, capture_output=True)
        self.ox("zpool", "create", "-f", "-R", self.alt(), "bench", self.dev)
        self.mnt = os.path.join(self.alt(), "bench")

    def alt(self):
        return os.path.join(self.work, "alt")

    def ox(self, *a, check=True):
        r = subprocess.run([self.bin, *a], env=self.env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"oxzfs {' '.join(a)}: {r.stderr}")
        return r

    def mount(self):
        self.ox("zpool", "import", "-d", self.work, "-R", self.alt(), "bench")

    def unmount(self):
        self.ox("zpool", "export", "bench")

    def teardown(self):
        self.ox("zpool", "export", "-f", "bench", check=False)
        self.ox("daemon", "stop", check=False)


class ZfsFuse(Target):
    name = "zfs-fuse"

    def setup(self):
        import oracle_pools
        self.zf = oracle_pools.ZfsFuse(self.work)
        self.zf.__enter__()
        sh("zpool", "create", "-f", "-R", self.alt(), "zbench", self.dev)
        self.find_mnt()

    def find_mnt(self):
        # zfs-fuse mounts the pool's root file system at the altroot itself
        self.mnt = sh("zfs", "get", "-H", "-o", "value", "mountpoint", "zbench").stdout.strip()

    def alt(self):
        return os.path.join(self.work, "alt")

    def mount(self):
        sh("zpool", "import", "-d", self.work, "-R", self.alt(), "zbench")
        self.find_mnt()

    def unmount(self):
        sh("zpool", "export", "zbench")

    def teardown(self):
        sh("zpool", "export", "-f", "zbench", check=False)
        self.zf.__exit__(None, None, None)


TARGETS = {"oxzfs": Oxzfs, "zfs-fuse": ZfsFuse, "ext4": Ext4, "btrfs": Btrfs}


RAW = "raw-disk fsync-write 4K ops/s (fio)"
# The same disk's rate for 4 KiB writes each made durable in place (fdatasync) in a file already
# written once: no block allocation or extent conversion for the host's journal to commit, only
# the data and the disk's cache flush. A pool's intent log writes where its vdev file already
# holds data (the log's next blocks have their holes filled ahead), so this is its floor.
RAW_OVER = "raw-disk fdatasync-overwrite 4K ops/s (fio)"
RAWS = (RAW, RAW_OVER)


def apt_install(pkg):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(["apt-get", "install", "-y", "-qq", pkg], env=env, capture_output=True).returncode != 0:
        sh("apt-get", "update", "-qq", env=env)
        sh("apt-get", "install", "-y", "-qq", pkg, env=env)


def ensure_fio():
    if shutil.which("fio") is None:
        apt_install("fio")


def plot(results, names, path, title):
    """A PNG of the run: per workload, oxzfs's figure as a multiple of each other target's (log
    scale, 1 marked), beside the raw figures. matplotlib (python3-matplotlib) is installed if
    missing."""
    try:
        import matplotlib
    except ImportError:
        # pip for this interpreter; else Debian's package, for the system's python3
        if subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], capture_output=True).returncode != 0:
            apt_install("python3-matplotlib")
            sys.path.append("/usr/lib/python3/dist-packages")
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in next(iter(results.values())) if r not in RAWS]
    refs = [n for n in names if n != "oxzfs" and n in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 0.45 * len(rows) + 2.5))
    h = 0.8 / max(1, len(refs))
    for i, ref in enumerate(refs):
        vals = [results["oxzfs"][r] / results[ref][r] if results[ref][r] else 1 for r in rows]
        ys = [y + i * h for y in range(len(rows))]
        # bars from 1: to the right where oxzfs is ahead, to the left where it is behind
        ax1.barh(ys, [v - 1 for v in vals], left=1, height=h, label=f"oxzfs / {ref}")
        for y, v in zip(ys, vals):
            ax1.text(v, y, f" {v:.2f}x ", va="center", ha="left" if v >= 1 else "right", fontsize="x-small")
    ax1.axvline(1, color="black", linewidth=0.8)
    ax1.set_xscale("log")
    ax1.set_yticks([y + h * (len(refs) - 1) / 2 for y in range(len(rows))])
    ax1.set_yticklabels(rows)
    ax1.invert_yaxis()
    ax1.set_xlabel("oxzfs as a multiple of the other (higher is better for oxzfs)")
    ax1.legend(fontsize="small")
    h2 = 0.8 / max(1, len(names))
    for i, n in enumerate(x for x in names if x in results):
        ax2.barh([y + i * h2 for y in range(len(rows))], [results[n][r] for r in rows], height=h2, label=n)
    ax2.set_xscale("log")
    ax2.set_yticks([y + h2 * (len(names) - 1) / 2 for y in range(len(rows))])
    ax2.set_yticklabels(rows)
    ax2.invert_yaxis()
    ax2.set_xlabel("figure (units in the workload's name; higher is better)")
    ax2.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fio_fsync_rate(directory, n, overwrite=False):
    """N writes of 4 KiB, each followed by fsync, by fio on a new file in DIRECTORY (the one the
    target's device file lives in): the raw disk's fsync rate, in ops/s. OVERWRITE: the file is
    written whole first (and synced), then each write is followed by fdatasync (RAW_OVER)."""
    ensure_fio()
    path = os.path.join(directory, "fio-fsync.dat")
    try:
        sync = ["--fsync=1"]
        if overwrite:
            with open(path, "wb") as f:
                f.write(os.urandom(n * 4096))
                os.fsync(f.fileno())
            sync = ["--fdatasync=1", "--overwrite=1"]
        r = sh("fio", "--name=raw-fsync", f"--filename={path}", "--rw=write", "--bs=4k", f"--size={n * 4096}",
               "--ioengine=sync", *sync, "--output-format=json")
        return json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]["write"]["iops"]
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _create_files(d, n):
    os.makedirs(d)
    for i in range(n):
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(b"x" * 100)


def create_tree(tree, n):
    """The create row: N files of 100 bytes under TREE, made in order, 500 to a directory."""
    for i in range(n):
        d = os.path.join(tree, f"d{i // 500}")
        if i % 500 == 0:
            os.mkdir(d)
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(b"x" * 100)


def stat_tree(tree, n):
    """The stat row: os.stat of each file create_tree made, in the order it made them."""
    for i in range(n):
        os.stat(os.path.join(tree, f"d{i // 500}", f"f{i}"))


def _fsync_writes(path, n):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    small = os.urandom(4096)
    for i in range(n):
        os.pwrite(fd, small, i * 4096)
        os.fsync(fd)
    os.close(fd)


def sequential(t, big, out):
    """The seq-write row (BIG bytes in 1 MiB writes to t.mnt/big, then fsync) and, after a
    remount (page cache dropped), the seq-read row (the file read back in 1 MiB reads), in OUT."""
    block = os.urandom(1 << 20)
    start = time.perf_counter()
    with open(os.path.join(t.mnt, "big"), "wb") as f:
        for _ in range(big >> 20):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    out["seq-write MB/s"] = big / (time.perf_counter() - start) / 1e6
    t.remount()
    start = time.perf_counter()
    with open(os.path.join(t.mnt, "big"), "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    out["seq-read MB/s"] = big / (time.perf_counter() - start) / 1e6


def parallel_rate(fn, args_of, procs, total):
    """TOTAL operations split over PROCS processes started together (fn(*args_of(k), total //
    procs) in process k): operations per second from the first start to the last end."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    ps = [ctx.Process(target=fn, args=(*args_of(k), total // procs)) for k in range(procs)]
    start = time.perf_counter()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    if any(p.exitcode != 0 for p in ps):
        raise RuntimeError(f"{fn.__name__}: a process failed")
    return (total // procs) * procs / (time.perf_counter() - start)


def workloads(t, quick):
    out = {}
    big = (128 if quick else 512) << 20
    sequential(t, big, out)
    t.remount()
    path = os.path.join(t.mnt, "big")
    rng = random.Random(1)
    n = 2000 if quick else 10000
    fd = os.open(path, os.O_RDONLY)
    start = time.perf_counter()
    for _ in range(n):
        os.pread(fd, 4096, rng.randrange(big >> 12) << 12)
    out["rand-read 4K IOPS"] = n / (time.perf_counter() - start)
    os.close(fd)
    fd = os.open(os.path.join(t.mnt, "sync"), os.O_CREAT | os.O_WRONLY, 0o644)
    # As many as fio makes below (50 took 10 ms, too short to read a rate from).
    n = 250 if quick else 1000
    small = os.urandom(4096)
    start = time.perf_counter()
    for i in range(n):
        os.pwrite(fd, small, i * 4096)
        os.fsync(fd)
    out["fsync-write 4K ops/s"] = n / (time.perf_counter() - start)
    os.close(fd)
    out[RAW] = fio_fsync_rate(t.work, 250 if quick else 1000)
    out[RAW_OVER] = fio_fsync_rate(t.work, 250 if quick else 1000, overwrite=True)
    nfiles = 2000 if quick else 10000
    tree = os.path.join(t.mnt, "tree")
    os.mkdir(tree)
    start = time.perf_counter()
    create_tree(tree, nfiles)
    out["create ops/s"] = nfiles / (time.perf_counter() - start)
    t.remount()
    tree = os.path.join(t.mnt, "tree")
    start = time.perf_counter()
    stat_tree(tree, nfiles)
    out["stat ops/s"] = nfiles / (time.perf_counter() - start)
    t.remount()
    tree = os.path.join(t.mnt, "tree")
    start = time.perf_counter()
    count = 0
    for d, dirs, files in os.walk(tree):
        for x in dirs + files:
            os.lstat(os.path.join(d, x))
            count += 1
    out["walk entries/s"] = count / (time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(nfiles):
        os.unlink(os.path.join(tree, f"d{i // 500}", f"f{i}"))
    out["delete ops/s"] = nfiles / (time.perf_counter() - start)
    out["create 4 procs ops/s"] = parallel_rate(_create_files, lambda k: (os.path.join(t.mnt, f"par{k}"),), 4, nfiles)
    out["fsync-write 4K 4 procs ops/s"] = parallel_rate(_fsync_writes, lambda k: (os.path.join(t.mnt, f"psync{k}"),), 4,
                                                        200 if quick else 800)
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="oxzfs,zfs-fuse,ext4,btrfs")
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--work", default="/var/tmp/oxzfs-bench")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--fuse-io-uring", type=int, choices=(0, 1),
                    help="start oxzfs's daemon with -o fuse_io_uring=N; 1 also sets the fuse module's "
                         "enable_uring to Y for the run (given back after)")
    a = ap.parse_args(argv[1:])
    Oxzfs.fuse_io_uring = a.fuse_io_uring
    names = [x for x in a.targets.split(",") if x]
    results, errors = {}, {}
    for name in names:
        t = TARGETS[name](a.work, a.size_mib)
        try:
            with kernel_uring(True if a.fuse_io_uring == 1 and name == "oxzfs" else None):
                t.setup()
                results[name] = workloads(t, a.quick)
        except Exception as e:  # a target that fails is reported, the others still run
            errors[name] = f"{type(e).__name__}: {e}"
        finally:
            try:
                t.teardown()
            except Exception:
                pass
    rows = list(next(iter(results.values())).keys()) if results else []
    refs = [n for n in names if n != "oxzfs" and n in results]
    head = "| workload | " + " | ".join(names) + " | " + " | ".join(f"oxzfs/{r}" for r in refs) + " |"
    lines = [head, "|" + "---|" * (1 + len(names) + len(refs))]
    for row in rows:
        cells = [f"{results[n][row]:.1f}" if n in results else "error" for n in names]
        # the raw disk's row is the same disk under every target: no ratio
        ratios = [f"{results['oxzfs'][row] / results[r][row]:.2f}"
                  if "oxzfs" in results and results[r][row] and row not in RAWS else "-" for r in refs]
        lines.append(f"| {row} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    report = [f"# Benchmarks, {datetime.date.today().isoformat()}", "",
              f"Machine: {os.cpu_count()} CPUs, {mem} GiB, Linux {platform.release()}.",
              f"Command: `sudo python3 bench/run.py {' '.join(argv[1:])}`", "",
              "Higher is better everywhere. Each file system sits on one sparse file of "
              f"{a.size_mib} MiB on the same disk (kernel file systems through a loop device).", ""] + lines
    ox = results.get("oxzfs", {})
    if ox.get(RAW):
        report += ["", f"oxzfs 4K write+fsync: {ox['fsync-write 4K ops/s']:.1f} ops/s, "
                   f"{ox['fsync-write 4K ops/s'] / ox[RAW]:.3f} of the raw disk's {ox[RAW]:.1f} (fio, a new file)"
                   + (f", {ox['fsync-write 4K ops/s'] / ox[RAW_OVER]:.3f} of its {ox[RAW_OVER]:.1f} writing in place (fio, fdatasync)."
                      if ox.get(RAW_OVER) else ".")]
    for n, e in errors.items():
        report.append(f"\n{n}: failed: {e}")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        base = os.path.splitext(a.out)[0]
        # The figures, to plot again or compare later, and the plot beside the table.
        with open(base + ".json", "w") as f:
            json.dump({"argv": argv[1:], "results": results, "errors": errors}, f, indent=1)
        if "oxzfs" in results and len(results) > 1:
            plot(results, names, base + ".png", f"bench/run.py {' '.join(argv[1:])}, {datetime.date.today().isoformat()}")
            report += ["", f"![oxzfs against the others]({os.path.basename(base)}.png)"]
    text = "\n".join(report) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
