#!/usr/bin/env python3
"""Replication streams: `zfs send` and `zfs receive` on oxzfs and zfs-fuse, with tar on ext4 beside
them (the same bytes copied out and in by a kernel file system), in one run.

    sudo python3 bench/sendrecv.py [--file-mib 512] [--targets oxzfs,zfs-fuse,ext4] [--rounds 2]

Per target (one sparse file of 2 GiB on the same disk, as bench/run.py sets them up): a file of
FILE_MIB random MiB and a tree of small files (tests/tools/populate.py, profile small), a snapshot,
then per round, caches dropped before each step:
  send     the pool exported and imported again (its ARC and the page cache cold), then
           `zfs send pool@s | cat > /dev/null` (ext4: remounted, `tar -cf - . | cat`)  MB/s of stream
  receive  `zfs receive pool/copy < stream` from a file on the same disk, then destroyed (ext4:
           `tar -xf` into a new directory, then removed)                           MB/s of stream
Rates are the stream's (or tar archive's) bytes over the wall time; the report gives the best
round of each and the ratios oxzfs/zfs-fuse and oxzfs/ext4. Needs root.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "tools"))
import populate as populate_mod  # noqa: E402
import run  # noqa: E402


def fill(mnt, mib):
    populate_mod.populate(os.path.join(mnt, "tree"), 1, "small")
    block = os.urandom(1 << 20)
    with open(os.path.join(mnt, "big"), "wb") as f:
        for _ in range(mib):
            f.write(block)


def timed(cmd, env=None, stdin=None, stdout=None):
    run.drop_caches()
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdin=stdin, stdout=stdout, check=True)
    return time.perf_counter() - start


def timed_to_null(cmd, env=None):
    """CMD's output read through a pipe and dropped (tar writing to /dev/null itself would skip
    reading the files)."""
    start = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE)
    while p.stdout.read(1 << 20):
        pass
    if p.wait() != 0:
        raise RuntimeError(f"{cmd}: exit {p.returncode}")
    return time.perf_counter() - start


def measure(name, t, rounds, stream):
    """(send MB/s, receive MB/s) of target T, best of ROUNDS; STREAM: where the stream is kept."""
    sends, recvs = [], []
    if name == "ext4":
        fill(t.mnt, t.file_mib)
        for _ in range(rounds):
            with open(stream, "wb") as f:
                subprocess.run(["tar", "-C", t.mnt, "-cf", "-", "."], stdout=f, check=True)
            size = os.path.getsize(stream)
            t.remount()
            sends.append(size / timed_to_null(["tar", "-C", t.mnt, "-cf", "-", "."]) / 1e6)
            dst = os.path.join(t.mnt, "..", "copy")
            shutil.rmtree(dst, ignore_errors=True)
            os.makedirs(dst)
            with open(stream, "rb") as f:
                recvs.append(size / timed(["tar", "-C", dst, "-xf", "-"], stdin=f) / 1e6)
            shutil.rmtree(dst, ignore_errors=True)
        return max(sends), max(recvs)
    if name == "oxzfs":
        zfs, env, pool = [t.bin, "zfs"], t.env, "bench"
    else:
        zfs, env, pool = ["zfs"], None, "zbench"
    fill(t.mnt, t.file_mib)
    subprocess.run([*zfs, "snapshot", f"{pool}@s"], env=env, check=True)
    with open(stream, "wb") as f:
        subprocess.run([*zfs, "send", f"{pool}@s"], env=env, stdout=f, check=True)
    size = os.path.getsize(stream)
    for _ in range(rounds):
        t.remount()
        sends.append(size / timed_to_null([*zfs, "send", f"{pool}@s"], env=env) / 1e6)
        with open(stream, "rb") as f:
            recvs.append(size / timed([*zfs, "receive", *RECV_ARGS.get(name, []), f"{pool}/copy"], env=env, stdin=f) / 1e6)
        subprocess.run([*zfs, "destroy", "-r", f"{pool}/copy"], env=env, check=False, capture_output=True)
        subprocess.run([*zfs, "destroy", f"{pool}/copy@s"], env=env, check=False, capture_output=True)
        subprocess.run([*zfs, "destroy", f"{pool}/copy"], env=env, check=False, capture_output=True)
    return max(sends), max(recvs)


# Extra `zfs receive` arguments per target (--recv-args-oxzfs).
RECV_ARGS = {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default="oxzfs,zfs-fuse,ext4")
    ap.add_argument("--file-mib", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", default="/var/tmp/oxzfs-bench")
    ap.add_argument("--recv-args-oxzfs", default="", help="e.g. '-o compression=off'")
    a = ap.parse_args()
    if a.recv_args_oxzfs:
        RECV_ARGS["oxzfs"] = a.recv_args_oxzfs.split()
    results = {}
    for name in a.targets.split(","):
        t = run.TARGETS[name](a.work, 2048)
        t.file_mib = a.file_mib
        stream = os.path.join(a.work, f"{name}.stream")
        try:
            t.setup()
            results[name] = measure(name, t, a.rounds, stream)
        finally:
            t.teardown()
            if os.path.exists(stream):
                os.unlink(stream)
    print(f"| workload ({a.file_mib} MiB file + small tree) | " + " | ".join(results) + " | oxzfs/zfs-fuse | oxzfs/ext4 |")
    print("|---|" + "---|" * (len(results) + 2))
    for i, row in enumerate(("send MB/s", "receive MB/s")):
        vals = {k: v[i] for k, v in results.items()}
        ratio = lambda other: f"{vals['oxzfs'] / vals[other]:.2f}" if "oxzfs" in vals and other in vals else "-"
        print(f"| {row} | " + " | ".join(f"{v:.1f}" for v in vals.values()) + f" | {ratio('zfs-fuse')} | {ratio('ext4')} |")


if __name__ == "__main__":
    main()
