#!/usr/bin/env python3
"""Cold 4 KiB random reads on oxzfs binaries (and zfs-fuse) side by side, in alternated rounds,
against the raw disk's floor.

    sudo python3 bench/randread.py --bins OLD,NEW [--zfs-fuse] [--rounds 6] [--n 2000]

bench/run.py's rand-read row, repeated: every target holds a file of --file-mib (128 MiB, as
--quick's, written in 1 MiB writes: 128 KiB records) in a pool of its own (one sparse file of
--size-mib); each round exports every pool, drops the page cache, imports them again, then reads
--n 4 KiB blocks at random 4 KiB offsets of each file (the same offsets for all, a new seed per
round), targets in an order that alternates. The raw floor ("raw") reads a laid-out file of the
same size on the same disk as an ideal cache would: the 128 KiB record around the offset on its
first touch in the round (a cold buffered read), the 4 KiB alone after that (the page cache).

Printed per target, medians over the rounds: reads per second, µs per read on a record's first
touch (cold: the record comes from the disk) and after it (warm: the ARC, or zfs-fuse's), and
the daemon's CPU per read (from /proc/PID/stat: robust to the machine's load).
"""
import argparse
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import fsync as bench_fsync  # noqa: E402  (a daemon and pool per binary)
import run as bench_run  # noqa: E402  (drop_caches, the zfs-fuse target)

_spec = importlib.util.spec_from_file_location("oxzfs_profile", os.path.join(BENCH, "profile.py"))
oxzfs_profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oxzfs_profile)

RECORD = 128 << 10


class Ox:
    """An oxzfs binary's daemon and pool (bench/fsync.py's), its file in the pool's root."""

    def __init__(self, binary, work, k, size):
        self.p = bench_fsync.Pool(binary, work, k, size)
        self.name = f"{k}:{os.path.basename(binary)}"
        self.path = os.path.join(os.path.dirname(self.p.path), "big")
        self.pid = oxzfs_profile.daemon_pid(self.p.dir)

    def ox(self, *a):
        r = subprocess.run([self.p.bin, *a], env=self.p.env, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"oxzfs {' '.join(a)}: {r.stderr.strip()}")

    def unmount(self):
        self.ox("zpool", "export", self.p.name)

    def mount(self):
        self.ox("zpool", "import", "-d", self.p.dir, "-R", os.path.join(self.p.dir, "alt"), self.p.name)

    def close(self):
        self.p.close()


class Zf:
    name = "zfs-fuse"

    def __init__(self, work, size_mib):
        self.t = bench_run.ZfsFuse(work, size_mib)
        self.t.setup()
        self.path = os.path.join(self.t.mnt, "big")
        r = subprocess.run(["pgrep", "-x", "zfs-fuse"], capture_output=True, text=True)
        self.pid = r.stdout.split()[0] if r.stdout.split() else None

    def unmount(self):
        self.t.unmount()

    def mount(self):
        self.t.mount()
        self.path = os.path.join(self.t.mnt, "big")

    def close(self):
        self.t.teardown()


class Raw:
    name = "raw"
    pid = None

    def __init__(self, work, size):
        self.path = os.path.join(work, "raw.dat")

    def unmount(self):
        pass

    def mount(self):
        pass

    def close(self):
        os.unlink(self.path)


def write_file(path, size):
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def read_round(t, offsets):
    """(seconds, cold µs list, warm µs list, daemon CPU seconds) of the reads at OFFSETS."""
    seen = set()
    cold, warm = [], []
    fd = os.open(t.path, os.O_RDONLY)
    c0 = oxzfs_profile.cpu_seconds(t.pid) if t.pid else 0
    start = time.perf_counter()
    for off in offsets:
        rec = off // RECORD
        first = rec not in seen
        seen.add(rec)
        t0 = time.perf_counter()
        if isinstance(t, Raw) and first:
            os.pread(fd, RECORD, rec * RECORD)
        else:
            os.pread(fd, 4096, off)
        (cold if first else warm).append((time.perf_counter() - t0) * 1e6)
    elapsed = time.perf_counter() - start
    cpu = oxzfs_profile.cpu_seconds(t.pid) - c0 if t.pid else 0
    os.close(fd)
    return elapsed, cold, warm, cpu


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", default="", help="comma-separated oxzfs binaries")
    ap.add_argument("--zfs-fuse", action="store_true", help="zfs-fuse as a target too")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--file-mib", type=int, default=128)
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--work", default="/var/tmp/oxzfs-randread-bench")
    a = ap.parse_args(argv[1:])
    os.makedirs(a.work, exist_ok=True)
    size = a.file_mib << 20
    targets = []
    try:
        targets.append(Raw(a.work, size))
        for k, b in enumerate(filter(None, a.bins.split(","))):
            targets.append(Ox(b, a.work, k, a.size_mib << 20))
        if a.zfs_fuse:
            targets.append(Zf(os.path.join(a.work, "zf"), a.size_mib))
        for t in targets:
            write_file(t.path, size)
        res = {t.name: {"rate": [], "cold": [], "warm": [], "cpu": []} for t in targets}
        for r in range(a.rounds):
            for t in targets:
                t.unmount()
            bench_run.drop_caches()
            for t in targets:
                t.mount()
            rng = random.Random(r)
            offsets = [rng.randrange(size >> 12) << 12 for _ in range(a.n)]
            for t in targets if r % 2 == 0 else targets[::-1]:
                elapsed, cold, warm, cpu = read_round(t, offsets)
                res[t.name]["rate"].append(a.n / elapsed)
                res[t.name]["cold"].append(statistics.median(cold))
                res[t.name]["warm"].append(statistics.median(warm) if warm else 0)
                res[t.name]["cpu"].append(cpu / a.n * 1e6)
        print(f"{a.rounds} rounds of {a.n} cold 4 KiB random reads of a {a.file_mib} MiB file, targets alternated\n")
        print("| target | reads/s | cold read µs | warm read µs | daemon CPU µs/read | per round reads/s |")
        print("|---|---|---|---|---|---|")
        for t in targets:
            x = res[t.name]
            cpu = f"{statistics.median(x['cpu']):.0f}" if t.pid else "-"
            rounds = " ".join(f"{v:.0f}" for v in x["rate"])
            print(f"| {t.name} | {statistics.median(x['rate']):.0f} | {statistics.median(x['cold']):.0f} | {statistics.median(x['warm']):.1f} | {cpu} | {rounds} |")
    finally:
        for t in targets:
            try:
                t.close()
            except Exception as e:  # noqa: BLE001  (the others are closed all the same)
                print(f"{t.name}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
