#!/usr/bin/env python3
"""Scrub and resilver rates on file vdevs, against fio on the same files, in one run.

    sudo python3 bench/scan.py [--data-mib 1024] [--runs 3] [--work /var/tmp] [--bin A --bin B ...]

The pool: one file vdev (twice --data-mib, sparse) holding --data-mib of incompressible data, half
of it a file written front to back, half a file written whole and then rewritten in eight txgs of
a random eighth of its 128K records each (so the blocks of that file lie on the disk in an order
the walk does not visit them in: what the sorted scan is for). Then, for each binary (--bin, repeatable; default target/release/oxzfs), in
turns (old, new, old, new, ... so the shared machine's noise falls on both alike):

  scrub      the pool exported, the page cache dropped, imported, `zpool scrub -w`: allocated
             bytes / wall time, against fio reading the vdev file front to back (1 MiB reads, as
             many bytes as the pool has allocated, page cache dropped first)
  resilver   a second file attached as a mirror side (`zpool attach -w`) after the page cache is
             dropped: bytes written to the new side (the allocated bytes) / wall time, against
             fio writing --data-mib to a new file in the same directory (1 MiB writes, fsync at
             the end); the side is detached again afterwards
  rebuild    `zpool replace -s -w` of the vdev by the blank file, then back (two samples per run;
             sequential reconstruction: every allocated range copied in metaslab order, no block
             tree, no checksums), the scrub that follows it turned off
             (zfs_rebuild_scrub_enabled=0): allocated bytes / wall time, against the same fio
             write; binaries without -s show "-"

  order      (--trace) one more scrub per binary under strace (pread64 of the daemon): how many
             reads of the vdev file, their mean size, the share that start where the one before
             ended, and the distance the reads jump in all (what a disk head would travel) —
             how sequential the scrub's reads are, whatever the storage below the file does
             with random reads

With --rate MBS the pool's device and the new side are two emulated disks of that bandwidth each
(nbdkit's rate filter through nbdfuse, as bench/slog.py and bench/removal.py make them), so the
devices, not the host's page cache and CPU, bound the copy: fio then reads the pool's device and
writes the new one itself, before the pool is made (the new side is blanked by zeroing its labels
between runs).

With --throttle MBS the two files are block devices instead (loop devices with direct I/O) whose
bandwidth a blkio cgroup holds to MBS each way, the daemon and fio in that cgroup: a device-bound
copy, as on disks, with fio (direct I/O) on the devices themselves. The cgroup bounds what reaches
the devices past the page cache (reads, O_DIRECT writes); the few writes of a resilver that are
not aligned for O_DIRECT go through the page cache unbounded.

Targets (issue 13): scrub >= 80% of fio's sequential read, resilver >= 80% of fio's sequential
write. Needs root (drop_caches). fio is installed with apt-get if missing. With --out FILE.md, the
table also goes to FILE.md.
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import drop_caches  # noqa: E402
from slog import EmuDisk  # noqa: E402
from throttle import Throttled  # noqa: E402

REC = 128 << 10
ROUNDS = 8


def ensure_fio():
    if shutil.which("fio") is None:
        subprocess.run(["apt-get", "install", "-y", "fio"], check=True, capture_output=True)


def fio(name, rw, path, size, direct=False, cgroup=None):
    """fio's bandwidth in bytes/s for a sequential RW (read|write) of SIZE bytes of PATH (the
    command wrapped by CGROUP, to run in a cgroup, when given)."""
    drop_caches()
    args = ["fio", f"--name={name}", f"--filename={path}", f"--rw={rw}", "--bs=1M", f"--size={size}",
            "--ioengine=psync", "--output-format=json"]
    if rw == "write":
        args.append("--end_fsync=1")
    if direct:
        args.append("--direct=1")
    if cgroup:
        args = cgroup(args)
    r = subprocess.run(args, check=True, capture_output=True, text=True)
    job = json.loads(r.stdout)["jobs"][0]
    return job["read" if rw == "read" else "write"]["bw_bytes"]


PREAD = re.compile(r"pread64\((\d+), .*, (\d+), (\d+)\) = (\d+)")


def read_order(trace):
    """(reads, mean size, sequential share, jump distance) of the fd read most in TRACE."""
    by_fd = {}
    with open(trace) as f:
        for ln in f:
            m = PREAD.search(ln)
            if m and int(m.group(4)) > 0:
                by_fd.setdefault(int(m.group(1)), []).append((int(m.group(3)), int(m.group(4))))
    if not by_fd:
        return (0, 0, 0.0, 0)
    reads = max(by_fd.values(), key=lambda r: sum(n for _, n in r))
    seq, jump, end = 0, 0, None
    for off, n in reads:
        if end is not None:
            seq += off == end
            jump += abs(off - end)
        end = off + n
    return (len(reads), sum(n for _, n in reads) // len(reads), seq / max(1, len(reads) - 1), jump)


def daemon_pid(path):
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:3] == [path.encode(), b"daemon", b"run"]:
                        return int(p)
            except OSError:
                pass
    raise RuntimeError(f"no daemon of {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp")
    ap.add_argument("--bin", action="append", help="oxzfs binaries to compare (label=path or path)")
    ap.add_argument("--out")
    ap.add_argument("--tunable", action="append", default=[], help="NAME=VALUE set in each daemon before the runs (repeatable)")
    ap.add_argument("--trace", action="store_true", help="also trace one scrub per binary (strace) for its read order")
    ap.add_argument("--rate", type=float, help="the vdev and the new side on two emulated disks of this many MB/s each")
    ap.add_argument("--throttle", type=float, help="the vdev and the new side on two loop devices held to this many MB/s each way")
    a = ap.parse_args()
    ensure_fio()
    bins = []
    for b in a.bin or [os.environ.get("OXZFS_BIN", os.path.join(REPO, "target", "release", "oxzfs"))]:
        label, _, path = b.rpartition("=")
        bins.append((label or os.path.basename(os.path.dirname(os.path.dirname(path))) or path, path))
    work = tempfile.mkdtemp(prefix="benchscan-", dir=a.work)
    vdir, sdir = os.path.join(work, "vdevs"), os.path.join(work, "side")
    os.makedirs(vdir)
    os.makedirs(sdir)
    dev0, dev1 = os.path.join(vdir, "d0"), os.path.join(sdir, "d1")
    emus = []
    if a.rate:
        emus = [EmuDisk(work, f"emu{i}", a.data_mib * 2 + 64, 0, a.rate) for i in range(2)]
        dev0, dev1 = emus[0].path, emus[1].path
        vdir = os.path.dirname(dev0)
    thr = None
    if a.throttle:
        thr = Throttled(work, ["d0", "d1"], a.data_mib * 2 + 64, a.throttle)
        dev0, dev1 = thr.paths
        vdir = os.path.dirname(dev0)
    loops = thr.loops if thr else []
    cgroup = thr.wrap if thr else None
    fixed = bool(emus or loops)
    alt = os.path.join(work, "alt")
    root = os.path.join(alt, "bscan")
    env = dict(os.environ, OXZFS_SOCKET=os.path.join(work, "sock"))
    cur = {"bin": bins[0][1]}

    def ox(*args, check=True):
        r = subprocess.run([cur["bin"], *map(str, args)], env=env, capture_output=True, text=True, timeout=3600)
        if check and r.returncode:
            raise RuntimeError(f"oxzfs {' '.join(map(str, args))}: {r.stderr.strip()}")
        return r.stdout

    def use(path):
        ox("daemon", "stop", check=False)
        cur["bin"] = path
        ox("daemon", "start")
        if thr:
            thr.join(daemon_pid(path))
        for t in a.tunable:
            ox("tunable", t)

    def allocated():
        out = ox("zpool", "list", "-Hp", "-o", "allocated", "bscan")
        return int(out.split()[0])

    rows = {label: {"scrub": [], "resilver": [], "rebuild": []} for label, _ in bins}
    try:
        size = a.data_mib << 21

        def blank(d):
            if fixed:
                # A device cannot be truncated: its labels zeroed (the front 4 MiB, the back 512K).
                with open(d, "r+b") as f:
                    n = f.seek(0, os.SEEK_END)
                    f.seek(0)
                    f.write(bytes(4 << 20))
                    f.seek(n - (512 << 10))
                    f.write(bytes(512 << 10))
            else:
                with open(d, "wb") as f:
                    f.truncate(size)
        seq_read, seq_write = [], []
        if fixed:
            # The devices themselves, while they hold nothing: write the new side, read the other.
            direct = bool(loops)
            for _ in range(a.runs):
                seq_write.append(fio("seqwrite", "write", dev1, a.data_mib << 20, direct, cgroup))
                fio("seqwrite", "write", dev0, a.data_mib << 20, direct, cgroup)
                seq_read.append(fio("seqread", "read", dev0, a.data_mib << 20, direct, cgroup))
        for d in (dev0, dev1):
            blank(d)
        use(bins[0][1])
        ox("zpool", "create", "-O", "compression=off", "-R", alt, "bscan", dev0)
        half = (a.data_mib << 20) // 2
        rng = random.Random(13)
        with open(os.path.join(root, "seq"), "wb") as f:
            for _ in range(half // (1 << 20)):
                f.write(rng.randbytes(1 << 20))
        # The records of a txg are written in blkid order, whatever order they came in: the
        # file is written whole, then rewritten in eight rounds of a random eighth of its
        # records each, a txg apiece, so that its records end up spread over the disk.
        recs = list(range(half // REC))
        fd = os.open(os.path.join(root, "shuffled"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for i in recs:
                os.pwrite(fd, rng.randbytes(REC), i * REC)
            ox("zpool", "sync", "bscan")
            rng.shuffle(recs)
            for r in range(ROUNDS):
                for i in sorted(recs[r::ROUNDS]):
                    os.pwrite(fd, rng.randbytes(REC), i * REC)
                os.fsync(fd)
                ox("zpool", "sync", "bscan")
        finally:
            os.close(fd)
        ox("zpool", "sync", "bscan")
        alloc = allocated()
        ox("zpool", "export", "bscan")
        for run in range(a.runs):
            for label, path in bins:
                use(path)
                if not fixed:
                    seq_read.append(fio("seqread", "read", dev0, alloc))
                drop_caches()
                ox("zpool", "import", "-d", vdir, "-R", alt, "bscan")
                t = time.time()
                ox("zpool", "scrub", "-w", "bscan")
                rows[label]["scrub"].append(alloc / (time.time() - t))
                if not fixed:
                    newf = os.path.join(sdir, "fio-new")
                    seq_write.append(fio("seqwrite", "write", newf, a.data_mib << 20))
                    os.unlink(newf)
                drop_caches()
                t = time.time()
                ox("zpool", "attach", "-w", "bscan", dev0, dev1)
                rows[label]["resilver"].append(alloc / (time.time() - t))
                ox("zpool", "detach", "bscan", dev1)
                blank(dev1)
                if subprocess.run([cur["bin"], "tunable", "zfs_rebuild_scrub_enabled=0"], env=env, capture_output=True).returncode == 0:
                    # replace -s onto the blank side and back: two samples, the pool on dev0 again.
                    for old, new in ((dev0, dev1), (dev1, dev0)):
                        drop_caches()
                        t = time.time()
                        ox("zpool", "replace", "-s", "-w", "bscan", old, new)
                        rows[label]["rebuild"].append(alloc / (time.time() - t))
                        ox("zpool", "status", "bscan")  # the replaced side detached (and its labels cleared)
                    blank(dev1)
                ox("zpool", "export", "bscan")
        order = {}
        if a.trace:
            for label, path in bins:
                use(path)
                drop_caches()
                ox("zpool", "import", "-d", vdir, "-R", alt, "bscan")
                trace = os.path.join(work, "trace")
                st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=pread64", "-o", trace, "-p", str(daemon_pid(path))])
                time.sleep(1)
                ox("zpool", "scrub", "-w", "bscan")
                st.terminate()
                st.wait()
                order[label] = read_order(trace)
                ox("zpool", "export", "bscan")
        mib = lambda x: f"{x / (1 << 20):7.1f}"  # noqa: E731
        spread = lambda v: f"{mib(statistics.median(v))} MiB/s ({'-'.join(mib(x).strip() for x in (min(v), max(v)))})"  # noqa: E731
        rd, wr = statistics.median(seq_read), statistics.median(seq_write)
        where = (f"two emulated disks of {a.rate:g} MB/s (fio on the devices themselves)" if emus else
                 f"two loop devices held to {a.throttle:g} MB/s each way by a blkio cgroup (fio, direct I/O, on the devices themselves)" if loops else "file vdevs")
        lines = [
            f"devices: {where}",
            f"pool: one vdev, {alloc >> 20} MiB allocated (half written in order, half rewritten in {ROUNDS} txgs of random 128K records), "
            f"{a.runs} runs per binary, alternating",
            "",
            f"fio sequential read of the pool's device:  {spread(seq_read)}",
            f"fio sequential write of {'the new device' if fixed else 'a new file'}:    {spread(seq_write)}",
            "",
            "| binary | scrub MiB/s (min-max) | scrub / fio read | resilver MiB/s (min-max) | resilver / fio write | rebuild (replace -s) MiB/s (min-max) | rebuild / fio write |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, _ in bins:
            s, r, b = rows[label]["scrub"], rows[label]["resilver"], rows[label]["rebuild"]
            reb = f"{spread(b)} | {statistics.median(b) / wr:.0%}" if b else "- | -"
            lines.append(f"| {label} | {spread(s)} | {statistics.median(s) / rd:.0%} | {spread(r)} | {statistics.median(r) / wr:.0%} | {reb} |")
        if order:
            lines += ["", "read order of one scrub (strace, the vdev file's pread64s):", "",
                      "| binary | reads | mean size | start where the last ended | jumps in all |", "|---|---|---|---|---|"]
            for label, (n, size, seq, jump) in order.items():
                lines.append(f"| {label} | {n} | {size >> 10} KiB | {seq:.0%} | {jump / (1 << 30):.1f} GiB |")
        text = "\n".join(lines)
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text + "\n")
    finally:
        ox("zpool", "export", "-f", "bscan", check=False)
        ox("daemon", "stop", check=False)
        for e in emus:
            e.close()
        if thr:
            thr.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
