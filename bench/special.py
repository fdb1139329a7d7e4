#!/usr/bin/env python3
"""The special vdev experiment (seed 000): how much faster are a walk and a full read of small
files when their metadata and blocks live on a fast special vdev in front of a slow disk?

    sudo python3 bench/special.py [--files 5000] [--min-kib 2] [--max-kib 32] [--delay-ms 8]

Two pools, each with its data on one emulated disk of --delay-ms latency per request (nbdkit's
delay filter through nbdfuse, as bench/slog.py makes it): one with a special vdev on a plain file
(an SSD) and `special_small_blocks` covering every file (so metadata and the files' blocks go
there), one without. The same tree of --files files of --min-kib to --max-kib KiB (100 per
directory, the same seed) is written to each and synced; then, after an export and import (a cold
ARC) and with the kernel's page cache dropped, the seconds of (a) a walk of the tree with an lstat
of every entry (`find`), (b) a read of every file, after another export and import. The issue's
targets: the walk at least 7x and the read at least 10x faster with the special vdev.

oxzfs is target/release/oxzfs (or $OXZFS_BIN), its daemon started with a private socket and
stopped at the end; the emulated disks are unmounted and their nbdfuse/nbdkit processes ended;
the scratch directory below --work goes.
"""
import argparse
import os
import random
import shutil
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
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--min-kib", type=int, default=2)
    ap.add_argument("--max-kib", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=8)
    ap.add_argument("--work", default="/var/tmp")
    a = ap.parse_args()
    binary = os.environ.get("OXZFS_BIN", os.path.join(REPO, "target", "release", "oxzfs"))
    slog.ensure_tools()
    work = tempfile.mkdtemp(prefix="benchspecial-", dir=a.work)
    env = dict(os.environ, OXZFS_SOCKET=os.path.join(work, "sock"))

    def ox(*args, check=True):
        r = subprocess.run([binary, *map(str, args)], env=env, capture_output=True, text=True, timeout=1800)
        if check and r.returncode:
            raise RuntimeError(f"oxzfs {' '.join(map(str, args))}: {r.stderr.strip()}")
        return r.stdout

    disks = []
    results = {}
    try:
        ox("daemon", "start")
        for name, special in (("withspecial", True), ("plain", False)):
            disk = slog.EmuDisk(work, f"d-{name}", 1024, a.delay_ms)
            disks.append(disk)
            alt = os.path.join(work, f"alt-{name}")
            layout = [disk.path]
            opts = ["-O", "compression=off"]
            if special:
                sdir = os.path.join(work, f"ssd-{name}")
                os.makedirs(sdir)
                ssd = os.path.join(sdir, "special0")
                with open(ssd, "wb") as f:
                    f.truncate(1 << 30)
                layout += ["special", ssd]
                opts += ["-O", f"special_small_blocks={a.max_kib}K"]
            ox("zpool", "create", *opts, "-R", alt, name, *layout)
            root = os.path.join(alt, name)
            rng = random.Random(0)
            for i in range(a.files):
                d = os.path.join(root, f"dir{i // 100:03d}")
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
                    f.write(rng.randbytes(rng.randint(a.min_kib, a.max_kib) << 10))
            t = time.time()
            ox("zpool", "sync", name)
            sync_s = time.time() - t
            dirs = [os.path.dirname(disk.path)] + ([sdir] if special else [])

            def reimport():
                ox("zpool", "export", name)
                ox("zpool", "import", *[x for d in dirs for x in ("-d", d)], "-R", alt, name)
                drop_page_cache()

            reimport()
            t = time.time()
            n = 0
            for top, ds, fs in os.walk(root):
                for e in ds + fs:
                    os.lstat(os.path.join(top, e))
                    n += 1
            walk_s = time.time() - t
            reimport()
            t = time.time()
            for top, _, fs in os.walk(root):
                for e in fs:
                    with open(os.path.join(top, e), "rb") as f:
                        f.read()
            read_s = time.time() - t
            ox("zpool", "export", name)
            results[name] = (sync_s, walk_s, read_s, n)
        (s1, w1, r1, n), (s2, w2, r2, _) = results["withspecial"], results["plain"]
        print(f"{a.files} files of {a.min_kib}-{a.max_kib} KiB ({n} entries), data disk {a.delay_ms:g} ms per request")
        print(f"{'':28}{'special vdev':>14}{'no special':>14}{'ratio':>8}")
        print(f"{'sync after writing (s)':28}{s1:14.2f}{s2:14.2f}{s2 / max(s1, 1e-6):7.1f}x")
        print(f"{'walk + lstat, cold (s)':28}{w1:14.2f}{w2:14.2f}{w2 / max(w1, 1e-6):7.1f}x")
        print(f"{'read every file, cold (s)':28}{r1:14.2f}{r2:14.2f}{r2 / max(r1, 1e-6):7.1f}x")
    finally:
        for name in ("withspecial", "plain"):
            ox("zpool", "export", "-f", name, check=False)
        ox("daemon", "stop", check=False)
        for d in disks:
            d.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
