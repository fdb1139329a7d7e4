#!/usr/bin/env python3
"""The L2ARC experiment: is the first read after an import served by a persistent cache device?

    sudo python3 bench/l2arc.py [--files 48] [--file-mib 1] [--delay-ms 8] [--arc-mib 16]

Pool: one emulated disk with --delay-ms of latency per request (8 ms: a hard disk; nbdkit's delay
filter through nbdfuse, as bench/slog.py makes it) and a cache device on a plain file (an SSD).
The ARC is capped at --arc-mib; l2arc_rebuild_blocks_min_l2size is 0 so that the small cache
device keeps its log blocks (OpenZFS's default keeps none below 1 GiB).

Workload: --files files of --file-mib MiB written, synced, then read until the feed has put them
on the cache device; the pool is exported and imported, and the figure is the wall-clock seconds
of one read of every file (a) with the cache device, (b) after `zpool remove` of it and another
export and import. arcstats' l2_hits of each read are printed too.

oxzfs is target/release/oxzfs (or $OXZFS_BIN), its daemon started with a private socket and
stopped at the end; the emulated disk is unmounted and its nbdfuse/nbdkit processes ended; the
scratch directory below --work goes.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import slog  # noqa: E402  (EmuDisk, the nbdkit/nbdfuse setup)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=48)
    ap.add_argument("--file-mib", type=int, default=1)
    ap.add_argument("--delay-ms", type=float, default=8)
    ap.add_argument("--arc-mib", type=int, default=16)
    ap.add_argument("--work", default="/var/tmp")
    a = ap.parse_args()
    binary = os.environ.get("OXZFS_BIN", os.path.join(REPO, "target", "release", "oxzfs"))
    slog.ensure_tools()
    work = tempfile.mkdtemp(prefix="benchl2arc-", dir=a.work)
    env = dict(os.environ, OXZFS_SOCKET=os.path.join(work, "sock"))

    def ox(*args, check=True):
        r = subprocess.run([binary, *map(str, args)], env=env, capture_output=True, text=True, timeout=600)
        if check and r.returncode:
            raise RuntimeError(f"oxzfs {' '.join(map(str, args))}: {r.stderr.strip()}")
        return r.stdout

    def l2_hits():
        return json.loads(ox("arcstats", "-j"))["l2_hits"]

    disk = None
    alt = os.path.join(work, "alt")
    root = os.path.join(alt, "bl2")
    cache_dir = os.path.join(work, "cache")
    os.makedirs(cache_dir)
    cache = os.path.join(cache_dir, "cache0")

    def read_all():
        t = time.time()
        for i in range(a.files):
            with open(os.path.join(root, f"f{i}"), "rb") as f:
                while f.read(1 << 20):
                    pass
        return time.time() - t

    def reimport(*dirs):
        ox("zpool", "export", "bl2")
        ox("zpool", "import", *[x for d in dirs for x in ("-d", d)], "-R", alt, "bl2")

    try:
        disk = slog.EmuDisk(work, "d0", max(256, 4 * a.files * a.file_mib), a.delay_ms)
        with open(cache, "wb") as f:
            f.truncate(max(256, 2 * a.files * a.file_mib) << 20)
        ox("daemon", "start", "-o", f"zfs_arc_max={a.arc_mib}M", "-o", "l2arc_rebuild_blocks_min_l2size=0")
        ox("zpool", "create", "-R", alt, "bl2", disk.path, "cache", cache)
        for i in range(a.files):
            with open(os.path.join(root, f"f{i}"), "wb") as f:
                f.write(os.urandom(a.file_mib << 20))
        ox("zpool", "sync", "bl2")
        want = a.files * a.file_mib << 20
        deadline = time.time() + 120
        while json.loads(ox("arcstats", "-j"))["l2_size"] < want * 3 // 4 and time.time() < deadline:
            read_all()
            time.sleep(1)
        disk_dir = os.path.dirname(disk.path)
        reimport(disk_dir, cache_dir)
        time.sleep(2)  # the rebuild runs in the background
        h = l2_hits()
        with_cache = read_all()
        hits = l2_hits() - h
        ox("zpool", "remove", "bl2", cache)
        reimport(disk_dir)
        without = read_all()
        ox("zpool", "export", "bl2")
        print(f"{a.files} files of {a.file_mib} MiB, data disk {a.delay_ms:g} ms, ARC {a.arc_mib} MiB")
        print(f"first read after import, with the cache device:    {with_cache:7.2f} s  (l2_hits {hits})")
        print(f"first read after import, without the cache device: {without:7.2f} s")
        print(f"ratio: {without / max(with_cache, 1e-6):.1f}x")
    finally:
        ox("zpool", "export", "-f", "bl2", check=False)
        ox("daemon", "stop", check=False)
        if disk is not None:
            disk.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
