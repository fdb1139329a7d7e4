#!/usr/bin/env python3
"""4 KiB write+fsync on oxzfs binaries side by side, against the raw disk, in alternated chunks.

    sudo python3 bench/fsync.py --bins OLD,NEW [--chunks 40] [--ops 30] [--work DIR]

On a shared machine the disk's own fsync rate moves by an order of magnitude within seconds, so a
single run per binary (bench/run.py's 50-op row) says little. Here every binary gets its own
daemon and pool (one sparse file of --size-mib, like bench/run.py's), and a laid-out raw file sits
beside them; then, chunk after chunk, each of them takes --ops writes of 4 KiB each followed by
fsync (the same Python loop for all), in an order that alternates. Printed: per target the median
µs per write+fsync over the chunks, and per binary the median of raw µs / its µs chunk by chunk,
over all chunks and over the third where the raw disk was fastest (the quietest).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def sh(*cmd, env=None):
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, env=env)


class Pool:
    def __init__(self, binary, work, k, size):
        self.bin = binary
        self.dir = os.path.join(work, f"p{k}")
        os.makedirs(self.dir, exist_ok=True)
        self.env = dict(os.environ, OXZFS_SOCKET=os.path.join(self.dir, "sock"))
        dev = os.path.join(self.dir, "dev0")
        with open(dev, "wb") as f:
            f.truncate(size)
        sh(binary, "daemon", "start", env=self.env)
        sh(binary, "zpool", "create", "-f", "-R", os.path.join(self.dir, "alt"), f"fsb{k}", dev, env=self.env)
        self.name = f"fsb{k}"
        self.path = os.path.join(self.dir, "alt", self.name, "f")

    def close(self):
        subprocess.run([self.bin, "zpool", "export", self.name], env=self.env, capture_output=True)
        subprocess.run([self.bin, "daemon", "stop"], env=self.env, capture_output=True)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", required=True, help="comma-separated oxzfs binaries")
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--ops", type=int, default=30)
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--work", default="/var/tmp/oxzfs-fsync-bench")
    a = ap.parse_args(argv[1:])
    bins = a.bins.split(",")
    os.makedirs(a.work, exist_ok=True)
    pools = []
    try:
        for k, b in enumerate(bins):
            pools.append(Pool(b, a.work, k, a.size_mib << 20))
        raw = os.path.join(a.work, "raw.dat")
        fds = {"raw": os.open(raw, os.O_CREAT | os.O_RDWR, 0o644)}
        os.pwrite(fds["raw"], b"\0" * (16 << 20), 0)
        os.fsync(fds["raw"])
        names = ["raw"] + [f"{k}:{os.path.basename(b)}" for k, b in enumerate(bins)]
        for n, p in zip(names[1:], pools):
            fds[n] = os.open(p.path, os.O_CREAT | os.O_WRONLY, 0o644)
        small = os.urandom(4096)
        pos = dict.fromkeys(names, 0)
        us = {n: [] for n in names}
        for c in range(a.chunks):
            for n in names if c % 2 == 0 else names[::-1]:
                fd = fds[n]
                t = time.perf_counter()
                for _ in range(a.ops):
                    os.pwrite(fd, small, (pos[n] % 4096) * 4096)
                    pos[n] += 1
                    os.fsync(fd)
                us[n].append((time.perf_counter() - t) / a.ops * 1e6)
        for fd in fds.values():
            os.close(fd)
        os.unlink(raw)
        quiet = sorted(range(a.chunks), key=lambda i: us["raw"][i])[: max(1, a.chunks // 3)]
        print(f"{a.chunks} chunks of {a.ops} write+fsync, alternated\n")
        print("| target | median µs/op | raw/target (all chunks) | raw/target (quietest third) |")
        print("|---|---|---|---|")
        for n in names:
            r = [us["raw"][i] / us[n][i] for i in range(a.chunks)]
            rq = [r[i] for i in quiet]
            print(f"| {n} | {statistics.median(us[n]):.0f} | {statistics.median(r):.3f} | {statistics.median(rq):.3f} |")
    finally:
        for p in pools:
            p.close()


if __name__ == "__main__":
    main(sys.argv)
