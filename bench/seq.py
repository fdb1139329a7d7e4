#!/usr/bin/env python3
"""bench/run.py's sequential rows alone, for comparing oxzfs binaries alternated in the same minutes.

    sudo python3 bench/seq.py --bins OLD,NEW [--rounds 4] [--mib 128] [--zfs-fuse]

Each round runs every binary in turn (then zfs-fuse with --zfs-fuse) on a fresh one-file pool
(run.py's target: default properties, a sparse file of --size-mib): MIB MiB in 1 MiB writes and
fsync (seq-write), export, page cache dropped, import, the file read back in 1 MiB reads
(seq-read). The order of the binaries flips every round (A B, B A, ...). Printed per run: the
rates in MB/s and the daemon's CPU per MiB (from /proc/PID/stat; the mount helper's and the
kernel's FUSE work on the caller's side are not in it); at the end, medians per binary.
"""
import argparse
import os
import statistics
import sys
import time

import run as bench_run
import profile as bench_profile


def minflt(pid):
    """The process's minor page faults so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def one(target, mib, cpu_of, flt_of):
    out = {}
    block = os.urandom(1 << 20)
    big = os.path.join(target.mnt, "big")
    c0, f0 = cpu_of(), flt_of()
    start = time.perf_counter()
    with open(big, "wb") as f:
        for _ in range(mib):
            f.write(block)
        f.flush()
        t_fsync = time.perf_counter()
        os.fsync(f.fileno())
    out["fsync s"] = time.perf_counter() - t_fsync
    out["write"] = (mib << 20) / (time.perf_counter() - start) / 1e6
    out["write cpu"] = 1e6 * (cpu_of() - c0) / mib
    out["write faults"] = (flt_of() - f0) / mib
    target.remount()
    c0, f0 = cpu_of(), flt_of()
    start = time.perf_counter()
    with open(big, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    out["read"] = (mib << 20) / (time.perf_counter() - start) / 1e6
    out["read cpu"] = 1e6 * (cpu_of() - c0) / mib
    out["read faults"] = (flt_of() - f0) / mib
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bins", required=True, help="oxzfs binaries, comma-separated")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--zfs-fuse", action="store_true")
    ap.add_argument("--work", default="/var/tmp/oxzfs-seq")
    a = ap.parse_args()
    bins = a.bins.split(",")
    results = {b: [] for b in bins}
    if a.zfs_fuse:
        results["zfs-fuse"] = []
    for r in range(a.rounds):
        order = bins if r % 2 == 0 else bins[::-1]
        for name in order + (["zfs-fuse"] if a.zfs_fuse else []):
            if name == "zfs-fuse":
                t = bench_run.ZfsFuse(a.work, a.size_mib)
            else:
                os.environ["OXZFS_BIN"] = name
                t = bench_run.Oxzfs(a.work, a.size_mib)
            try:
                t.setup()
                if name == "zfs-fuse":
                    cpu_of = flt_of = lambda: 0
                else:
                    pid = bench_profile.daemon_pid(t.work)
                    cpu_of = lambda: bench_profile.cpu_seconds(pid)
                    flt_of = lambda: minflt(pid)
                res = one(t, a.mib, cpu_of, flt_of)
            finally:
                t.teardown()
            results[name].append(res)
            print(f"round {r} {os.path.basename(name):>16}: write {res['write']:7.1f} MB/s ({res['write cpu']:5.0f} us/MiB, {res['write faults']:4.0f} faults/MiB,"
                  f" fsync {res['fsync s']:.2f} s)  read {res['read']:7.1f} MB/s ({res['read cpu']:5.0f} us/MiB, {res['read faults']:4.0f} faults/MiB)", flush=True)
    print("\nmedians:")
    for name, rs in results.items():
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        print(f"{os.path.basename(name):>16}: write {med['write']:7.1f} MB/s ({med['write cpu']:5.0f} us/MiB, {med['write faults']:4.0f} faults/MiB)"
              f"  read {med['read']:7.1f} MB/s ({med['read cpu']:5.0f} us/MiB, {med['read faults']:4.0f} faults/MiB)")


if __name__ == "__main__":
    sys.exit(main())
