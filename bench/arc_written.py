#!/usr/bin/env python3
"""What the ARC holds of a file just written, on oxzfs binaries side by side.

    sudo python3 bench/arc_written.py --bins OLD,NEW [--mib 256] [--vocab 20,5000] [--work DIR]

Every binary gets its own daemon and pool (one sparse file of --size-mib, compression=lz4).
For each vocabulary size, a file of --mib MiB of text (words of 3-9 letters drawn from that
many, the same seeded text for every binary: few words compress well, many hardly) is written
and fsynced, the pool synced, and `oxzfs arcstats -j` read: the ARC's size, its compressed and
uncompressed sizes and the decompressed copies beside compressed blocks (overhead_size), in MiB,
with the write rate. Each vocabulary gets a fresh pool.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time


def sh(*cmd, env=None):
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, env=env)


def text_mib(vocab, seed=1):
    """One MiB of text from `vocab` seeded words."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9))) for _ in range(vocab)]
    out = bytearray()
    while len(out) < 1 << 20:
        out += rnd.choice(words) + b" "
    return bytes(out[: 1 << 20])


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", required=True, help="comma-separated oxzfs binaries")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--vocab", default="20,5000", help="comma-separated vocabulary sizes")
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--work", default="/var/tmp/oxzfs-arc-written")
    a = ap.parse_args(argv[1:])
    print(f"{a.mib} MiB written (compression=lz4), fsynced and synced; arcstats in MiB\n")
    print("| binary | vocabulary | write MiB/s | size | compressed_size | uncompressed_size | overhead_size |")
    print("|---|---|---|---|---|---|---|")
    for k, b in enumerate(a.bins.split(",")):
        d = os.path.join(a.work, f"p{k}")
        os.makedirs(d, exist_ok=True)
        env = dict(os.environ, OXZFS_SOCKET=os.path.join(d, "sock"))
        dev = os.path.join(d, "dev0")
        name = f"arcw{k}"
        sh(b, "daemon", "start", env=env)
        try:
            for vocab in [int(v) for v in a.vocab.split(",")]:
                # A fresh pool each time: the export before it took the last one's blocks out
                # of the ARC.
                with open(dev, "wb") as f:
                    f.truncate(a.size_mib << 20)
                sh(b, "zpool", "create", "-f", "-O", "compression=lz4", "-R", os.path.join(d, "alt"), name, dev, env=env)
                chunk = text_mib(vocab)
                path = os.path.join(d, "alt", name, f"f{vocab}")
                t = time.perf_counter()
                with open(path, "wb") as f:
                    for i in range(a.mib):
                        f.write(i.to_bytes(4, "little") + chunk[4:])
                    os.fsync(f.fileno())
                el = time.perf_counter() - t
                sh(b, "zpool", "sync", name, env=env)
                s = json.loads(sh(b, "arcstats", "-j", env=env).stdout)
                row = [s.get(x, 0) >> 20 for x in ("size", "compressed_size", "uncompressed_size", "overhead_size")]
                print(f"| {os.path.basename(b)} | {vocab} | {a.mib / el:.0f} | " + " | ".join(map(str, row)) + " |", flush=True)
                sh(b, "zpool", "export", name, env=env)
        finally:
            subprocess.run([b, "zpool", "export", name], env=env, capture_output=True)
            subprocess.run([b, "daemon", "stop"], env=env, capture_output=True)
            os.unlink(dev)


if __name__ == "__main__":
    main(sys.argv)
