#!/usr/bin/env python3
"""oxzfs with FUSE over io_uring against oxzfs on /dev/fuse, in alternation on one pool, so that a
busy machine's drift falls on both alike.

    sudo python3 bench/fuse_uring_ab.py [--rounds 6] [--n 2000] [--big-mib 256]

One oxzfs target set up as bench/run.py does (a sparse file of 2 GiB). Each round exports the pool,
imports it once with the transport off and once on (the daemon restarted with -o fuse_io_uring=0
or 1; the fuse module's enable_uring set to Y for the run and given back), and measures, in
that order: seq-write (a file of --big-mib in 1 MiB writes, then fsync), seq-read (the same file
after an export and import, 1 MiB reads), 4K write+fsync (50), create (--n files of 100 bytes,
500 to a directory), stat (of those, after an export and import), create with 4 processes and
4K write+fsync with 4 processes (--seq-only: the first two alone). The medians per transport are printed with
their spread (lowest and highest round), the ratio on / off, and in how many rounds the ring did at least as
well as /dev/fuse in the same round; every round's figures before them. OXZFS_BIN picks the binary, as for
run.py.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


def measure(t, n, big_mib, seq_only=False):
    out = {}
    run.sequential(t, big_mib << 20, out)
    if seq_only:
        return out
    start = time.perf_counter()
    run._fsync_writes(os.path.join(t.mnt, "sync"), 50)
    out["fsync-write 4K ops/s"] = 50 / (time.perf_counter() - start)
    tree = os.path.join(t.mnt, "tree")
    os.mkdir(tree)
    start = time.perf_counter()
    run.create_tree(tree, n)
    out["create ops/s"] = n / (time.perf_counter() - start)
    t.remount()
    start = time.perf_counter()
    run.stat_tree(os.path.join(t.mnt, "tree"), n)
    out["stat ops/s"] = n / (time.perf_counter() - start)
    out["create 4 procs ops/s"] = run.parallel_rate(run._create_files, lambda k: (os.path.join(t.mnt, f"par{k}"),), 4, n)
    out["fsync-write 4K 4 procs ops/s"] = run.parallel_rate(run._fsync_writes, lambda k: (os.path.join(t.mnt, f"psync{k}"),), 4, 200)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--big-mib", type=int, default=256)
    ap.add_argument("--work", default="/var/tmp/oxzfs-bench")
    ap.add_argument("--seq-only", action="store_true", help="only seq-write and seq-read")
    a = ap.parse_args()
    rows = {0: [], 1: []}
    with run.kernel_uring(True):
        for r in range(a.rounds):
            for mode in (0, 1) if r % 2 == 0 else (1, 0):
                run.Oxzfs.fuse_io_uring = mode
                t = run.Oxzfs(a.work, 2048)
                try:
                    t.setup()
                    rows[mode].append(measure(t, a.n, a.big_mib, a.seq_only))
                finally:
                    t.teardown()
                print(f"round {r + 1} fuse_io_uring={mode}: " + ", ".join(f"{k} {v:.0f}" for k, v in rows[mode][-1].items()), flush=True)
    print("\n| workload | /dev/fuse median [lowest-highest] | io_uring median [lowest-highest] | io_uring / dev-fuse | rounds the ring kept up |\n|---|---|---|---|---|")
    for k in rows[0][0]:
        offs = [x[k] for x in rows[0]]
        ons = [x[k] for x in rows[1]]
        off, on = statistics.median(offs), statistics.median(ons)
        ahead = sum(1 for a, b in zip(offs, ons) if b >= a)
        print(f"| {k} | {off:.0f} [{min(offs):.0f}-{max(offs):.0f}] | {on:.0f} [{min(ons):.0f}-{max(ons):.0f}] | {on / off:.2f} | {ahead}/{len(ons)} |")


if __name__ == "__main__":
    main()
