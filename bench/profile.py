#!/usr/bin/env python3
"""Where oxzfs's daemon spends its CPU on one workload: perf, folded stacks and a flame graph.

    sudo python3 bench/profile.py create|stat|delete|read-all|seq-write|seq-read|rand-read|fsync-write [--n N] [--out DIR]

Makes a one-file pool (2 GiB sparse file) with a private daemon, runs the set-up the workload
needs (files to stat or read, or the big file seq-read and rand-read read, written and then
exported, imported and the page cache dropped),
then records the daemon alone while the workload runs:

    perf record -p DAEMON --call-graph dwarf,16384 -F 1999

and writes to DIR (default /var/tmp/oxzfs-profile-WORKLOAD):
  perf.data     for `perf report -i DIR/perf.data` (try `--no-children --sort sym`)
  folded.txt    one line per distinct stack, "frame;frame;... count" (the flame graph format)
  report.txt    the workload's rate and the daemon's CPU per operation (from /proc/PID/stat, so
                a loaded machine inflates the rate's spread but hardly the CPU figure), then the
                FUSE handlers' shares of the samples and, under each, its heaviest callees
  flame.svg     when inferno is installed (`cargo install inferno`: inferno-flamegraph)

Recipe for a change that should make a path cheaper: profile the old and the new binary
(OXZFS_BIN=... for each) on the same workload, compare the CPU per operation in report.txt and
the handler shares, and keep the flame graphs side by side. Rates belong in bench/run.py's
ratios against the other file systems, measured on a quiet machine.
Needs root (FUSE), perf (Debian: linux-perf).
"""
import argparse
import collections
import os
import random
import re
import shutil
import subprocess
import sys
import time

import run as bench_run  # bench/run.py: the create row's files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ("create", "stat", "delete", "read-all", "seq-write", "seq-read", "rand-read", "fsync-write")
# rand-read's file: bench/run.py --quick's (128 MiB in 128 KiB records), read cold in 4 KiB reads.
RAND_READ_MIB = 128
# Frames that only carry a call along (closures, unwinding guards, the dispatch): left out of
# the per-handler breakdown so that what it shows is work.
PASS_THROUGH = re.compile(r"catch_unwind|::inline\b|\{\{closure\}\}|call_once|AssertUnwindSafe|read_op|::change$|dispatch")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", choices=WORKLOADS)
    ap.add_argument("--n", type=int, default=0, help="operations (files, or MiB for seq-write and seq-read)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is missing: apt-get install linux-perf")
    binary = os.environ.get("OXZFS_BIN", os.path.join(REPO, "target", "release", "oxzfs"))
    out = a.out or f"/var/tmp/oxzfs-profile-{a.workload}"
    n = a.n or {"create": 6000, "stat": 10000, "delete": 6000, "read-all": 3000, "seq-write": 512, "seq-read": 512, "rand-read": 2000, "fsync-write": 2000}[a.workload]
    work = os.path.join(out, "pool")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, OXZFS_SOCKET=os.path.join(work, "sock"))

    def ox(*args, check=True):
        r = subprocess.run([binary, *args], env=env, capture_output=True, text=True)
        if check and r.returncode:
            sys.exit(f"oxzfs {' '.join(args)}: {r.stderr.strip()}")

    dev = os.path.join(work, "d0")
    with open(dev, "wb") as f:
        f.truncate(2 << 30)
    alt = os.path.join(work, "alt")
    mnt = os.path.join(alt, "prof")
    tree = os.path.join(mnt, "tree")
    ox("daemon", "start")
    try:
        ox("zpool", "create", "-f", "-R", alt, "prof", dev)
        os.mkdir(tree)
        if a.workload in ("stat", "delete", "read-all", "seq-read", "rand-read"):
            rng = random.Random(0)
            for i in range(n if a.workload in ("stat", "delete", "read-all") else 0):
                d = os.path.join(tree, f"d{i // 100}")
                if i % 100 == 0:
                    os.mkdir(d)
                with open(os.path.join(d, f"f{i}"), "wb") as f:
                    f.write(rng.randbytes(rng.randint(2, 32) << 10) if a.workload == "read-all" else b"x" * 100)
            if a.workload == "seq-read":
                write_big(os.path.join(tree, "big"), n)
            if a.workload == "rand-read":
                write_big(os.path.join(tree, "big"), RAND_READ_MIB)
            ox("zpool", "export", "prof")
            subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"])
            ox("zpool", "import", "-d", work, "-R", alt, "prof")
            if a.workload == "delete":
                # bench/run.py's delete row follows its walk: the names are known to the kernel
                for top, dirs, files in os.walk(tree):
                    for e in dirs + files:
                        os.lstat(os.path.join(top, e))
        pid = daemon_pid(work)
        perf = subprocess.Popen(["perf", "record", "-p", pid, "--call-graph", "dwarf,16384", "-F", "1999", "-o", os.path.join(out, "perf.data")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        run(a.workload, tree, n)
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
        perf.send_signal(2)
        perf.wait()
    finally:
        ox("zpool", "export", "prof", check=False)
        ox("daemon", "stop", check=False)
    unit = "MiB" if a.workload.startswith("seq-") else "op"
    lines = [f"{a.workload}: {n} {unit}s in {elapsed:.2f} s ({n / elapsed:.0f} {unit}/s), daemon CPU {1e6 * cpu / n:.0f} us per {unit}"]
    stacks = folded_stacks(os.path.join(out, "perf.data"))
    with open(os.path.join(out, "folded.txt"), "w") as f:
        for st, c in sorted(stacks.items()):
            f.write(f"{st} {c}\n")
    lines += handler_breakdown(stacks)
    with open(os.path.join(out, "report.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if shutil.which("inferno-flamegraph"):
        with open(os.path.join(out, "folded.txt")) as i, open(os.path.join(out, "flame.svg"), "w") as o:
            subprocess.run(["inferno-flamegraph", "--title", f"oxzfs daemon: {a.workload}"], stdin=i, stdout=o, check=False)
    else:
        lines.append("(no flame.svg: cargo install inferno)")
    shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines[:40]))
    print(f"\nwritten to {out}")


def daemon_pid(work):
    """The daemon serving OXZFS_SOCKET=WORK/sock (other daemons on the machine are not ours)."""
    sock = os.path.join(work, "sock").encode()
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if b"OXZFS_SOCKET=" + sock + b"\0" in f.read() + b"\0":
                    with open(f"/proc/{p}/cmdline", "rb") as c:
                        if b"daemon" in c.read():
                            return p
        except OSError:
            continue
    sys.exit("the daemon's process was not found")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(workload, tree, n):
    if workload == "create":
        bench_run.create_tree(tree, n)
    elif workload == "stat":
        for i in range(n):
            os.stat(os.path.join(tree, f"d{i // 100}", f"f{i}"))
    elif workload == "delete":
        for i in range(n):
            os.unlink(os.path.join(tree, f"d{i // 100}", f"f{i}"))
    elif workload == "read-all":
        for top, _, files in os.walk(tree):
            for e in files:
                with open(os.path.join(top, e), "rb") as f:
                    f.read()
    elif workload == "seq-write":
        write_big(os.path.join(tree, "big"), n)
    elif workload == "seq-read":
        with open(os.path.join(tree, "big"), "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
    elif workload == "rand-read":
        # bench/run.py's rand-read row: N 4 KiB reads at random 4 KiB offsets of the cold file.
        rng = random.Random(1)
        fd = os.open(os.path.join(tree, "big"), os.O_RDONLY)
        for _ in range(n):
            os.pread(fd, 4096, rng.randrange(RAND_READ_MIB << 8) << 12)
        os.close(fd)
    else:
        fd = os.open(os.path.join(tree, "sync"), os.O_CREAT | os.O_WRONLY, 0o644)
        small = os.urandom(4096)
        for i in range(n):
            os.pwrite(fd, small, i * 4096)
            os.fsync(fd)
        os.close(fd)


def write_big(path, mib):
    """MIB MiB of one random 1 MiB block in 1 MiB writes, then fsync (bench/run.py's seq-write)."""
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def folded_stacks(data):
    """perf script's samples as folded stacks (root first), counted."""
    r = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True)
    stacks = collections.Counter()
    cur = []
    for line in r.stdout.splitlines() + [""]:
        if not line.strip():
            if cur:
                stacks[";".join(reversed(cur))] += 1
                cur = []
        elif line[0] in " \t":
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                sym = re.sub(r"\+0x[0-9a-f]+$", "", parts[1].rsplit(" (", 1)[0]).replace(";", ":")
                cur.append(sym)
    return stacks


def handler_breakdown(stacks):
    """Each FUSE handler's share of the samples (and the transport's), with its top callees."""
    total = sum(stacks.values()) or 1
    handlers = collections.Counter()
    callees = collections.defaultdict(collections.Counter)
    for st, c in stacks.items():
        frames = [f for f in st.split(";") if not PASS_THROUGH.search(f)]
        idx = next((i for i, f in enumerate(frames) if "as fuser::Filesystem>::" in f or "fuser::Filesystem::" in f or "Channel::receive" in f), None)
        if idx is None:
            handlers["(other threads: txg sync, workers)"] += c
            continue
        name = re.sub(r"^.*(Filesystem>?::)", "", frames[idx]) if "receive" not in frames[idx] else "receive a request (/dev/fuse read)"
        handlers[name] += c
        seen = set()
        for f in frames[idx + 1: idx + 4]:
            if f not in seen:
                seen.add(f)
                callees[name][f] += c
    out = ["", "share of the daemon's samples, by FUSE handler (and its heaviest callees within 3 frames):"]
    for name, c in handlers.most_common():
        out.append(f"{100 * c / total:5.1f}%  {name}")
        for f, k in callees[name].most_common(4):
            out.append(f"          {100 * k / total:5.1f}%  {f[:110]}")
    return out


if __name__ == "__main__":
    main()
