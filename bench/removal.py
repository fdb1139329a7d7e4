#!/usr/bin/env python3
"""Device removal's evacuation rate against the disk's own sequential bandwidth (issue 14's
target: at least 80% of the slower device's sequential bandwidth on file vdevs).

    sudo python3 bench/removal.py [--gib 1] [--rounds 2] [--work /var/tmp] [--out FILE.md]

A pool of one sparse file vdev (ashift=12, compression off) gets --gib GiB of incompressible
files (16 MiB each, 1 MiB records), synced; a second file vdev in the same directory is added;
the pool is exported and imported and the page cache dropped (the copy reads from the disk);
then `zpool remove -w` of the first vdev is timed: the evacuation rate is the bytes allocated
on it (zpool list -v) over the seconds the command took. In the same run and directory, fio
measures the disk: a sequential write of a file of the same size (1 MiB writes, fsync at the
end) and, after dropping the page cache, its sequential read. Each round repeats all three;
the table has every round and the ratios of the best evacuation rate to the slower of fio's
read and write, and to what a copy within one disk can reach (1 / (1/read + 1/write): every
byte is read and written on the same disk).

With --rate MBS the two vdevs are two independent emulated disks of that bandwidth instead
(nbdkit's rate filter through nbdfuse, as bench/slog.py makes them): the copy reads one and
writes the other, as between two real disks, where files in one directory share one disk's
bandwidth. fio then measures each device file itself before the pool is made on it (a
sequential write of the destination, a sequential read of the source).

With --throttle MBS the two vdevs are two loop devices held to MBS each way by a blkio cgroup
(bench/throttle.py), the daemon and fio (direct I/O, on the devices themselves) in it.

oxzfs is target/release/oxzfs (or $OXZFS_BIN), its daemon started with a private socket and
stopped at the end; the scratch directory below --work goes.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from run import drop_caches  # noqa: E402
from slog import EmuDisk  # noqa: E402
from throttle import Throttled  # noqa: E402
from scan import daemon_pid  # noqa: E402


def fio(directory, name, rw, size_mib, thr=None):
    """fio's bandwidth in MB/s (10^6 bytes) of a sequential `rw` of a file of size_mib MiB
    (`name` in `directory`, or the path `name` when directory is None); with `thr` (a
    Throttled), with direct I/O inside its cgroup."""
    where = [f"--filename={name}"] if directory is None else [f"--directory={directory}", f"--filename={name}"]
    args = ["fio", "--name=seq", *where, f"--rw={rw}", "--bs=1M",
            f"--size={size_mib}M", "--ioengine=psync", "--output-format=json"]
    if rw == "write":
        args.append("--end_fsync=1")
    if thr:
        args = thr.wrap(args + ["--direct=1"])
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    job = json.loads(r.stdout)["jobs"][0]
    side = job["write"] if rw == "write" else job["read"]
    return side["bw_bytes"] / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", default="/var/tmp")
    ap.add_argument("--rate", type=float, help="vdevs on two emulated disks of this many MB/s each")
    ap.add_argument("--throttle", type=float, help="vdevs on two loop devices held to this many MB/s each way")
    ap.add_argument("--out")
    a = ap.parse_args()
    if not shutil.which("fio"):
        subprocess.run(["apt-get", "install", "-y", "fio"], check=True, capture_output=True)
    binary = os.environ.get("OXZFS_BIN", os.path.join(REPO, "target", "release", "oxzfs"))
    work = tempfile.mkdtemp(prefix="benchremoval-", dir=a.work)
    env = dict(os.environ, OXZFS_SOCKET=os.path.join(work, "sock"))
    size_mib = int(a.gib * 1024)
    files = max(1, size_mib // 16)

    def ox(*args, check=True):
        r = subprocess.run([binary, *map(str, args)], env=env, capture_output=True, text=True, timeout=3600)
        if check and r.returncode:
            raise RuntimeError(f"oxzfs {' '.join(map(str, args))}: {r.stderr.strip()}")
        return r.stdout

    rounds = []
    all_emus = []
    try:
        ox("daemon", "start")
        for rnd in range(a.rounds):
            vdir = os.path.join(work, "vdevs")
            alt = os.path.join(work, "alt")
            os.makedirs(vdir, exist_ok=True)
            dev_mib = max(4 << 10, int(a.gib * 3) << 10)
            emus = [EmuDisk(work, f"emu{rnd}-{i}", dev_mib, 0, a.rate) for i in range(2)] if a.rate else []
            all_emus += emus
            thr = Throttled(os.path.join(work, f"thr{rnd}"), ["d0", "d1"], dev_mib, a.throttle) if a.throttle else None
            if thr:
                all_emus.append(thr)
                thr.join(daemon_pid(binary))
            devs = [e.path for e in emus] or (thr.paths if thr else [os.path.join(vdir, f"d{i}") for i in range(2)])
            fixed = bool(emus) or thr is not None
            if fixed:
                # The devices themselves, before the pool: the destination written, the source read.
                w = fio(None, devs[1], "write", size_mib, thr)
                fio(None, devs[0], "write", size_mib, thr)
                drop_caches()
                r = fio(None, devs[0], "read", size_mib, thr)
            for d in devs[len(emus):] if thr is None else []:
                with open(d, "wb") as f:
                    f.truncate(dev_mib << 20)
            pool = "benchrm"
            ox("zpool", "create", "-o", "ashift=12", "-O", "compression=off", "-O", "recordsize=1M", "-R", alt, pool, devs[0])
            root = os.path.join(alt, pool)
            chunk = os.urandom(1 << 20)
            for i in range(files):
                with open(os.path.join(root, f"f{i:04d}"), "wb") as f:
                    for j in range(16):
                        # Each MiB different (no dedup or compression could shrink it).
                        f.write(chunk[j:] + chunk[:j] + i.to_bytes(4, "little"))
            ox("zpool", "sync", pool)
            ox("zpool", "add", pool, devs[1])
            ox("zpool", "export", pool)
            dirs = [a for d in sorted({os.path.dirname(d) for d in devs}) for a in ("-d", d)]
            ox("zpool", "import", *dirs, "-R", alt, pool)
            listing = ox("zpool", "list", "-Hpv", "-o", "name,alloc", pool)
            alloc = next(int(ln.split()[1]) for ln in listing.splitlines() if ln.split() and ln.split()[0] == devs[0])
            drop_caches()
            t = time.time()
            ox("zpool", "remove", "-w", pool, devs[0])
            took = time.time() - t
            status = ox("zpool", "status", pool)
            ox("zpool", "export", pool)
            for e in emus:
                e.close()
            if thr:
                thr.close()
            shutil.rmtree(vdir)
            if not fixed:
                # The disk, in the same directory, by fio.
                fdir = os.path.join(work, "fio")
                os.makedirs(fdir, exist_ok=True)
                drop_caches()
                w = fio(fdir, "seq", "write", size_mib)
                drop_caches()
                r = fio(fdir, "seq", "read", size_mib)
                shutil.rmtree(fdir)
            evac = alloc / took / 1e6
            line = next((ln.strip() for ln in status.splitlines() if ln.startswith("remove:")), "")
            rounds.append({"alloc": alloc, "seconds": took, "evac_mbs": evac, "fio_write_mbs": w, "fio_read_mbs": r, "status": line})
            print(f"round {rnd + 1}: evacuated {alloc / 1e6:.0f} MB in {took:.2f} s = {evac:.0f} MB/s; "
                  f"fio write {w:.0f} MB/s, read {r:.0f} MB/s", flush=True)
    finally:
        ox("daemon", "stop", check=False)
        for e in all_emus:
            e.close()
        shutil.rmtree(work, ignore_errors=True)
    best = max(rounds, key=lambda x: x["evac_mbs"])
    slower = min(best["fio_write_mbs"], best["fio_read_mbs"])
    one_disk = 1 / (1 / best["fio_write_mbs"] + 1 / best["fio_read_mbs"])
    text = [f"| round | evacuated | seconds | evacuation MB/s | fio seq write MB/s | fio seq read MB/s |", "|---|---|---|---|---|---|"]
    for i, x in enumerate(rounds):
        text.append(f"| {i + 1} | {x['alloc'] / 1e6:.0f} MB | {x['seconds']:.2f} | {x['evac_mbs']:.0f} | {x['fio_write_mbs']:.0f} | {x['fio_read_mbs']:.0f} |")
    text.append("")
    if a.rate:
        text.append(f"Best evacuation: {best['evac_mbs']:.0f} MB/s = {100 * best['evac_mbs'] / slower:.0f}% of the slower of the "
                    f"source's read and the destination's write by fio ({slower:.0f} MB/s; two emulated disks of "
                    f"--rate {a.rate:g} MB/s).")
    else:
        text.append(f"Best evacuation: {best['evac_mbs']:.0f} MB/s = {100 * best['evac_mbs'] / slower:.0f}% of the slower of fio's "
                    f"read and write ({slower:.0f} MB/s), {100 * best['evac_mbs'] / one_disk:.0f}% of a copy within one disk "
                    f"(1/(1/read + 1/write) = {one_disk:.0f} MB/s).")
    print("\n".join(text))
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"# Device removal: evacuation rate, {datetime.date.today()}\n\n")
            rate = (f" --rate {a.rate:g}" if a.rate else "") + (f" --throttle {a.throttle:g}" if a.throttle else "")
            f.write(f"Machine: {os.cpu_count()} CPUs, {platform.machine()}. Command: `sudo python3 bench/removal.py "
                    f"--gib {a.gib} --rounds {a.rounds}{rate}`.\n\n")
            f.write("\n".join(text) + "\n")
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(rounds, f, indent=1)


if __name__ == "__main__":
    main()
