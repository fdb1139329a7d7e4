#!/usr/bin/env python3
"""What bench/run.py's create, stat, delete and 4K write+fsync rows cost in FUSE requests: the
requests each operation sends, by opcode, and how long each kind takes (the fuse tracepoints).

    sudo python3 bench/fuse_ops.py [--targets oxzfs,zfs-fuse] [--n 2000] [--pin same|other]

Per target (set up as bench/run.py does, one sparse file of 2 GiB): create N files of 100 bytes
in directories of 500 (Python open/write/close, as run.py), export and import (the page cache
dropped), then os.stat each of them, then unlink them (run.py's create, stat and delete rows),
then min(N, 1000) 4 KiB writes each followed by fsync in one file. Each phase is traced with
fuse:fuse_request_send and fuse:fuse_request_end (Linux 6.16 and later; /sys/kernel/tracing),
kept to the mount's connection, and reported as: the rate, requests per operation by opcode,
per opcode the mean, median and 99th percentile time from send to answer (us) and what the
answers slower than 100 us add per operation, and the time per operation spent outside any
request (the caller's own work, and its wake-up after each answer; asynchronous requests such
as RELEASE overlap it). Tracing costs a little: the rates are a bit below run.py's.

--pin same puts the daemon's threads and this process on CPU 0, --pin other the daemon on CPU 0
and this process on CPU 1: the two ends of where the scheduler may place a caller and the
thread that answers it (on a virtual machine a wake-up across CPUs can cost more than the
request). OXZFS_BIN picks the oxzfs binary, as for run.py. Needs root.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

TRACING = "/sys/kernel/tracing"
EVENT = re.compile(r" (\d+\.\d+): fuse_request_(send|end): connection (\d+) req (\d+)(?: opcode \d+ \((\w+)\))?")


def tracefs(path, value):
    with open(os.path.join(TRACING, path), "w") as f:
        f.write(value)


class Trace:
    """The fuse events of connection `conn` while the block runs: `latencies` maps an opcode to
    the send-to-answer times (us) of its requests."""

    def __init__(self, mnt):
        self.conn = os.minor(os.stat(mnt).st_dev)

    def __enter__(self):
        tracefs("trace", "")
        tracefs("buffer_size_kb", "65536")
        tracefs("events/fuse/enable", "1")
        tracefs("tracing_on", "1")
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.start
        tracefs("tracing_on", "0")
        tracefs("events/fuse/enable", "0")
        with open(os.path.join(TRACING, "trace")) as f:
            text = f.read()
        tracefs("trace", "")
        sent, self.latencies = {}, collections.defaultdict(list)
        for m in EVENT.finditer(text):
            if int(m[3]) != self.conn:
                continue
            t, req = float(m[1]), m[4]
            if m[2] == "send":
                sent[req] = (t, m[5])
            elif req in sent:
                t0, op = sent.pop(req)
                self.latencies[op].append((t - t0) * 1e6)

    def report(self, name, n):
        lines = [f"{name}: {n / self.wall:.0f} ops/s, {self.wall / n * 1e6:.1f} us per op",
                 "  opcode        per op   mean    p50    p99  >100us adds (us/op)"]
        inside = 0.0
        for op, v in sorted(self.latencies.items(), key=lambda kv: -sum(kv[1])):
            v.sort()
            inside += sum(v) / n
            if len(v) < n / 100:
                continue
            slow = sum(x for x in v if x > 100) / n
            lines.append(f"  {op.removeprefix('FUSE_'):12} {len(v) / n:6.2f} {sum(v) / len(v):6.1f} {v[len(v) // 2]:6.1f} "
                         f"{v[int(len(v) * 0.99)]:6.1f}  {slow:6.1f}")
        lines.append(f"  in requests {inside:.1f} us/op, outside them {self.wall / n * 1e6 - inside:.1f} us/op")
        return "\n".join(lines)


def daemon_pid(t):
    pattern = f"{t.bin} daemon run" if isinstance(t, run.Oxzfs) else "zfs-fuse --pidfile"
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return int(out[0])


def pin(t, how):
    if how:
        subprocess.run(["taskset", "-a", "-p", "-c", "0", str(daemon_pid(t))], check=True, capture_output=True)
        os.sched_setaffinity(0, {0 if how == "same" else 1})


def measure(t, n, how):
    pin(t, how)
    tree = os.path.join(t.mnt, "tree")
    os.mkdir(tree)
    with Trace(t.mnt) as create:
        run.create_tree(tree, n)
    t.remount()
    pin(t, how)
    tree = os.path.join(t.mnt, "tree")
    with Trace(t.mnt) as stat:
        run.stat_tree(tree, n)
    with Trace(t.mnt) as delete:
        for i in range(n):
            os.unlink(os.path.join(tree, f"d{i // 500}", f"f{i}"))
    nsync = min(n, 1000)
    with Trace(t.mnt) as fsync:
        run._fsync_writes(os.path.join(t.mnt, "sync"), nsync)
    return "\n".join([create.report("create", n), stat.report("stat (after export and import)", n),
                      delete.report("delete (after stat)", n), fsync.report("4K write+fsync (one file, in place)", nsync)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default="oxzfs,zfs-fuse")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--pin", choices=("same", "other"))
    ap.add_argument("--work", default="/var/tmp/oxzfs-bench")
    ap.add_argument("--fuse-io-uring", type=int, choices=(0, 1), help="as for run.py")
    a = ap.parse_args()
    run.Oxzfs.fuse_io_uring = a.fuse_io_uring
    for name in a.targets.split(","):
        t = run.TARGETS[name](a.work, 2048)
        try:
            with run.kernel_uring(True if a.fuse_io_uring == 1 and name == "oxzfs" else None):
                t.setup()
                print(f"== {name}" + (f" (pinned: {a.pin} CPU)" if a.pin else "")
                      + (f" (fuse_io_uring={a.fuse_io_uring})" if name == "oxzfs" and a.fuse_io_uring is not None else ""))
                print(measure(t, a.n, a.pin))
        finally:
            os.sched_setaffinity(0, range(os.cpu_count()))
            t.teardown()


if __name__ == "__main__":
    main()
