#!/usr/bin/env python3
"""The L2ARC experiment: is the first read after an import served by a persistent cache device?

    sudo python3 bench/l2arc.py [--files 48] [--file-kib 1024] [--delay-ms 8] [--arc-mib 16] [--cache-mib N]
    sudo python3 bench/l2arc.py --target      # the issue's experiment: 4096 files of 64 KiB, ARC 64 MiB,
                                              # a 1.25 GiB cache device, every L2ARC tunable at its default
    sudo python3 bench/l2arc.py --feed-cost   # foreground reads with and without a cache device fed

Pool: one emulated disk with --delay-ms of latency per request (8 ms: a hard disk; nbdkit's delay
filter through nbdfuse, as bench/slog.py makes it) and a cache device on a plain file (an SSD).
The ARC is capped at --arc-mib; a cache device under 1 GiB gets l2arc_rebuild_blocks_min_l2size=0
so that it keeps its log blocks (OpenZFS's default keeps none below 1 GiB).

Workload: --files files of --file-mib MiB written, synced, then read until the feed has put them
on the cache device; the pool is exported and imported, and the figure is the wall-clock seconds
of one read of every file (a) with the cache device, (b) after `zpool remove` of it and another
export and import. arcstats' l2_hits of each read are printed too.

--feed-cost: on undelayed files (no emulated disk), the ARC capped as above, --rounds rounds on
one pool, each a read of every file while the feed writes them to an empty cache device (removed,
wiped and added again before it) and a read with no cache device, page cache dropped before
each: the seconds of each, and the median of the rounds' ratios (the issue's target: the feed
slows foreground reads by at most 10%).

oxzfs is target/release/oxzfs (or $OXZFS_BIN), its daemon started with a private socket and
stopped at the end; the emulated disk is unmounted and its nbdfuse/nbdkit processes ended; the
scratch directory below --work goes.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import slog  # noqa: E402  (EmuDisk, the nbdkit/nbdfuse setup)
from run import drop_caches as drop_page_cache  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=48)
    ap.add_argument("--file-kib", type=int, default=1024)
    ap.add_argument("--delay-ms", type=float, default=8)
    ap.add_argument("--arc-mib", type=int, default=16)
    ap.add_argument("--cache-mib", type=int, default=0, help="cache device size (default: twice the files, at least 256)")
    ap.add_argument("--target", action="store_true", help="the issue's experiment (overrides the sizes)")
    ap.add_argument("--feed-cost", action="store_true", help="measure the feed's cost to foreground reads instead")
    ap.add_argument("--rounds", type=int, default=7, help="--feed-cost: rounds, each a read with the feed and one without")
    ap.add_argument("--work", default="/var/tmp")
    a = ap.parse_args()
    if a.target:
        # (a 1 GiB file leaves under 1 GiB after its labels: l2arc_rebuild_blocks_min_l2size would
        # keep its log blocks off)
        a.files, a.file_kib, a.arc_mib, a.cache_mib = 4096, 64, 64, 1280
    total_mib = max(1, a.files * a.file_kib >> 10)
    cache_mib = a.cache_mib or max(256, 2 * total_mib)
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

    slow = []  # per read: (files over 4 ms, seconds they took, the slowest)

    def read_all():
        t = time.time()
        over = []
        for i in range(a.files):
            t1 = time.time()
            with open(os.path.join(root, f"f{i}"), "rb") as f:
                while f.read(1 << 20):
                    pass
            if time.time() - t1 > 0.004:
                over.append(time.time() - t1)
        slow.append((len(over), sum(over), max(over, default=0)))
        return time.time() - t


    def reimport(*dirs):
        ox("zpool", "export", "bl2")
        ox("zpool", "import", *[x for d in dirs for x in ("-d", d)], "-R", alt, "bl2")

    try:
        with open(cache, "wb") as f:
            f.truncate(cache_mib << 20)
        tunables = ["-o", f"zfs_arc_max={a.arc_mib}M"]
        if cache_mib < 1024:
            tunables += ["-o", "l2arc_rebuild_blocks_min_l2size=0"]
        ox("daemon", "start", *tunables)
        if a.feed_cost:
            data = os.path.join(work, "data")
            os.makedirs(data)
            with open(os.path.join(data, "d0"), "wb") as f:
                f.truncate(max(512, 4 * total_mib) << 20)
            ox("zpool", "create", "-R", alt, "bl2", os.path.join(data, "d0"), "cache", cache)
            for i in range(a.files):
                with open(os.path.join(root, f"f{i}"), "wb") as f:
                    f.write(os.urandom(a.file_kib << 10))
            ox("zpool", "sync", "bl2")
            # Rounds alternate the two conditions on the same pool, so that the machine's
            # drift (other work, the host's caches) falls on both alike. A round with the feed
            # starts from an empty cache device (removed, wiped, added again): every block of
            # the read comes from the pool while the feed writes it out; the ARC is smaller
            # than the working set, so no read starts warm.
            times = {"with the feed": [], "without a cache device": []}
            ratios = []
            fed = 0
            ox("zpool", "remove", "bl2", cache)
            for _ in range(a.rounds):
                with open(cache, "wb") as f:
                    f.truncate(cache_mib << 20)
                ox("zpool", "add", "bl2", "cache", cache)
                w0 = json.loads(ox("arcstats", "-j"))["l2_write_bytes"]
                drop_page_cache()
                with_feed = read_all()
                fed += json.loads(ox("arcstats", "-j"))["l2_write_bytes"] - w0
                ox("zpool", "remove", "bl2", cache)
                drop_page_cache()
                without = read_all()
                times["with the feed"].append(with_feed)
                times["without a cache device"].append(without)
                ratios.append(with_feed / max(without, 1e-6))
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{a.files} files of {a.file_kib} KiB on an undelayed file, ARC {a.arc_mib} MiB, {a.rounds} rounds alternated")
            for k, v in times.items():
                print(f"{k:>24}: " + "  ".join(f"{x:5.2f}" for x in v) + f"   (median {med[k]:.2f} s)")
            print(f"bytes the feed wrote, per round: {fed // max(a.rounds, 1)}")
            print("per-round ratios: " + "  ".join(f"{r:.2f}" for r in ratios))
            print(f"foreground reads with the feed take {statistics.median(ratios):.2f}x the time (median of the rounds)")
            return
        disk = slog.EmuDisk(work, "d0", max(256, 4 * total_mib), a.delay_ms)
        ox("zpool", "create", "-R", alt, "bl2", disk.path, "cache", cache)
        for i in range(a.files):
            with open(os.path.join(root, f"f{i}"), "wb") as f:
                f.write(os.urandom(a.file_kib << 10))
        ox("zpool", "sync", "bl2")
        want = a.files * a.file_kib << 10
        deadline = time.time() + 600
        passes = 0
        # Read the working set (at least twice) until the feed has put most of it on the cache.
        warm = []
        while passes < 2 or (json.loads(ox("arcstats", "-j"))["l2_size"] < want * 3 // 4 and time.time() < deadline):
            drop_page_cache()
            b = json.loads(ox("arcstats", "-j"))
            secs = read_all()
            e = json.loads(ox("arcstats", "-j"))
            passes += 1
            time.sleep(1)
            warm.append((secs, json.loads(ox("arcstats", "-j"))["l2_size"], {k: e[k] - b[k] for k in ("demand_data_misses", "l2_hits", "l2_misses")}))
        disk_dir = os.path.dirname(disk.path)
        l2_size = json.loads(ox("arcstats", "-j"))["l2_size"]
        reimport(disk_dir, cache_dir)
        time.sleep(2)  # the rebuild runs in the background
        drop_page_cache()
        h = l2_hits()
        before = json.loads(ox("arcstats", "-j"))
        rebuilt = (before["l2_rebuild_success"], before["l2_rebuild_bufs"], before["l2_rebuild_bufs_precached"])
        with_cache = read_all()
        hits = l2_hits() - h
        after = json.loads(ox("arcstats", "-j"))
        went_to_disk = {k: after[k] - before[k] for k in ("l2_misses", "l2_cksum_bad", "demand_data_misses", "demand_metadata_misses", "prefetch_data_misses", "prefetch_metadata_misses")}
        ox("zpool", "remove", "bl2", cache)
        reimport(disk_dir)
        drop_page_cache()
        without = read_all()
        ox("zpool", "export", "bl2")
        print(f"{a.files} files of {a.file_kib} KiB, data disk {a.delay_ms:g} ms, ARC {a.arc_mib} MiB, cache device {cache_mib} MiB")
        print(f"warm-up: {passes} reads of the working set, {l2_size >> 20} MiB on the cache device before the export")
        for i, (secs, size, d) in enumerate(warm):
            print(f"  read {i + 1}: {secs:6.2f} s ({', '.join(f'{k} {v}' for k, v in d.items())}), then {size >> 20} MiB on the cache device")
        print(f"rebuild when the timed read began: {rebuilt[0]} done, {rebuilt[1]} log entries read ({rebuilt[2]} already restored)")
        print(f"first read after import, with the cache device:    {with_cache:7.2f} s  (l2_hits {hits}; "
              f"{slow[-2][0]} files took over 4 ms, {slow[-2][1]:.2f} s together, the slowest {slow[-2][2] * 1000:.0f} ms)")
        print(f"first read after import, without the cache device: {without:7.2f} s")
        print("  with the cache device, reads the ARC and the cache device missed: " + ", ".join(f"{k} {v}" for k, v in went_to_disk.items()))
        print(f"ratio: {without / max(with_cache, 1e-6):.1f}x")
    finally:
        ox("zpool", "export", "-f", "bl2", check=False)
        ox("daemon", "stop", check=False)
        if disk is not None:
            disk.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
