#!/usr/bin/env python3
"""How much does FUSE over io_uring save per request on this machine, against the classic
/dev/fuse read/write transport? Measured with the same file system and the same workloads on both.

    sudo python3 bench/fuse_uring.py [--rounds 5] [--out FILE.md]

Why: oxzfs spends most of a metadata operation's time in FUSE round trips (25-60 us each on a
2-core VM; a Python open(O_CREAT)+write+close is 6-7 of them). The kernel (>= 6.14) can carry FUSE
requests over io_uring instead (module parameter fuse.enable_uring, off by default); no released
Rust FUSE crate speaks it, libfuse >= 3.18 does. Before writing a transport of our own, this
measures what it would buy, with libfuse's example file system standing in for ours.

What it does, end to end (as root):
  1. Builds libfuse (tag --tag, default fuse-3.18.2) under /var/tmp/libfuse-src from the git
     mirror --mirror (git archive; meson + ninja, io_uring enabled), unless already built there.
     Nothing is installed system-wide; the example runs with LD_LIBRARY_PATH.
  2. Mounts example/passthrough_hp over a directory on the local disk (/var/tmp/fuse-uring-bench/src;
     with --backing tmpfs, a tmpfs mounted there, to take the disk out of the numbers) with --nocache (entry and attribute timeouts 0, no writeback cache: every stat, lookup and
     write reaches the daemon), --nopassthrough (reads and writes go through FUSE, as in oxzfs,
     not through the kernel's backing-file passthrough) and --nosplice (plain buffers, as in
     oxzfs). The classic run mounts with fuse.enable_uring=N and no io_uring option; the uring run
     sets fuse.enable_uring=Y and adds -o io_uring (libfuse's default queue depth 8, one queue per
     core). The parameter is set back to N after every uring mount and on any exit.
  3. Checks which transport is really in use: the daemon must hold anon_inode:[io_uring] fds on
     the uring run and none on the classic run, and the daemon's read-type system calls
     (/proc/PID/io syscr) are counted per operation: the classic transport reads every request from
     /dev/fuse (about one read per request), io_uring reads none. A uring run showing reads per
     request, or a classic run showing none, aborts the benchmark.
  4. Workloads, each with 1 process and with 4 processes (the work split evenly, each process in
     its own directory / on its own file), classic and uring rounds alternated (--rounds each):
       create   2000 files: Python open(name, "wb"), write 100 bytes, close (as bench/run.py);
                each worker chdir()s into its own directory and uses bare names
       stat     os.stat of those 2000 files (timeouts 0: each stat goes to the daemon)
       fsync    500 x (4 KiB os.pwrite + os.fsync) on one file per process
       statone  10000 x os.stat of one file: the purest round trip there is
     Time is wall-clock from releasing the (already started) worker processes to the last one's
     end, divided by the total number of operations: us/op (with 4 processes, that is the
     reciprocal of throughput).
  5. One more mount per transport with the kernel's fuse tracepoints (fuse_request_send /
     fuse_request_end, a private tracefs instance filtered on this mount's connection) during one
     single-process pass of the workloads: requests per operation of each workload and the mean
     send->end latency per opcode on each transport.
Prints a markdown report (and writes it to --out, with the raw numbers in the .json beside it).
The machine's load averages before and after are part of the report: the numbers are noisy.
"""
import argparse
import atexit
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

URING_PARAM = "/sys/module/fuse/parameters/enable_uring"
SRC_TREE = "/var/tmp/libfuse-src"
BUILD = os.path.join(SRC_TREE, "build")
WORK = "/var/tmp/fuse-uring-bench"
TRACEFS = "/sys/kernel/tracing"
INSTANCE = os.path.join(TRACEFS, "instances", "fuse_uring_bench")

WORKLOADS = [("create", 2000), ("stat", 2000), ("fsync", 500), ("statone", 10000)]
TRACE_WORKLOADS = [("create", 1000), ("stat", 1000), ("fsync", 300), ("statone", 3000)]

_daemon = None  # the Popen of the mounted daemon, for the clean-up


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def set_uring(on):
    with open(URING_PARAM, "w") as f:
        f.write("Y" if on else "N")


def uring_param():
    with open(URING_PARAM) as f:
        return f.read().strip()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---------------------------------------------------------------------------------------------
# libfuse


def build_libfuse(mirror, tag):
    exe = os.path.join(BUILD, "example", "passthrough_hp")
    cfg = os.path.join(BUILD, "fuse_config.h")
    if os.path.exists(exe) and os.path.exists(cfg) and "HAVE_URING" in open(cfg).read():
        return exe
    for pkg, probe in [("meson", "meson"), ("ninja-build", "ninja"), ("pkg-config", "pkg-config"),
                       ("gcc", "gcc"), ("g++", "g++")]:
        if not shutil.which(probe):
            subprocess.run(["apt-get", "install", "-y", pkg], check=True)
    for pkg in ["liburing-dev", "libnuma-dev"]:
        if subprocess.run(["dpkg", "-s", pkg], capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "install", "-y", pkg], check=True)
    shutil.rmtree(SRC_TREE, ignore_errors=True)
    os.makedirs(SRC_TREE)
    archive = subprocess.Popen(["git", "-C", mirror, "archive", tag], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", SRC_TREE], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        sys.exit(f"git archive {tag} failed in {mirror}")
    subprocess.run(["meson", "setup", "build", "-Denable-io-uring=true", "-Dutils=false",
                    "-Dtests=false"], cwd=SRC_TREE, check=True)
    subprocess.run(["ninja", "-C", "build"], cwd=SRC_TREE, check=True)
    if "HAVE_URING" not in open(cfg).read():
        sys.exit("libfuse was configured without io_uring (liburing with SQE128 and libnuma needed)")
    return exe


def libfuse_version(mirror, tag):
    try:
        commit = sh("git", "-C", mirror, "rev-parse", tag + "^{commit}").strip()
    except subprocess.CalledProcessError:
        commit = "?"
    return tag, commit


# ---------------------------------------------------------------------------------------------
# mounting


class Mount:
    def __init__(self, exe, transport, tag, pin=None):
        self.exe, self.transport, self.pin = exe, transport, pin
        self.src = os.path.join(WORK, "src")
        self.mnt = os.path.join(WORK, "mnt")
        self.log = os.path.join(WORK, f"daemon-{transport}-{tag}.log")

    def __enter__(self):
        global _daemon
        os.makedirs(self.src, exist_ok=True)
        for name in os.listdir(self.src):  # empty, but keep the directory (it may be a tmpfs)
            path = os.path.join(self.src, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        os.makedirs(self.mnt, exist_ok=True)
        if os.path.ismount(self.mnt):
            sys.exit(f"{self.mnt} is already mounted")
        set_uring(self.transport == "uring")
        cmd = [self.exe, "--foreground", "--nocache", "--nopassthrough", "--nosplice"]
        if self.transport == "uring":
            cmd += ["-o", "io_uring"]
        cmd += [self.src, self.mnt]
        if self.pin is not None:
            cmd = ["taskset", "-c", str(self.pin)] + cmd
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(BUILD, "lib"))
        self.proc = _daemon = subprocess.Popen(cmd, env=env, stdout=open(self.log, "w"),
                                               stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                self.__exit__()
                sys.exit(f"mount failed, see {self.log}")
            time.sleep(0.05)
        # INIT (and with it the io_uring registration) is answered by the time the mount is
        # visible; one stat makes sure the rings are up before anything is checked.
        os.stat(self.mnt)
        st = os.stat(self.mnt)
        self.connection = (os.major(st.st_dev) << 20) | os.minor(st.st_dev)  # the kernel's dev_t
        self.check_fds()
        return self

    def check_fds(self):
        fds = []
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            try:
                fds.append(os.readlink(f"/proc/{self.proc.pid}/fd/{fd}"))
            except OSError:
                pass
        rings = sum(1 for t in fds if "io_uring" in t)
        if self.transport == "uring" and rings == 0:
            raise SystemExit(f"uring mount has no io_uring fd (fell back to /dev/fuse?): {fds}")
        if self.transport == "classic" and rings:
            raise SystemExit(f"classic mount holds io_uring fds: {fds}")
        self.rings = rings

    def syscr(self):
        with open(f"/proc/{self.proc.pid}/io") as f:
            for line in f:
                if line.startswith("syscr:"):
                    return int(line.split()[1])
        return 0

    def __exit__(self, *exc):
        global _daemon
        try:
            if os.path.ismount(self.mnt):
                subprocess.run(["fusermount3", "-u", self.mnt], check=False)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait(timeout=10)
        finally:
            _daemon = None
            set_uring(False)


def cleanup():
    mnt = os.path.join(WORK, "mnt")
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", mnt], check=False)
    if _daemon is not None and _daemon.poll() is None:
        _daemon.terminate()
        _daemon.wait()
    src = os.path.join(WORK, "src")
    if os.path.ismount(src):
        subprocess.run(["umount", src], check=False)
    try:
        set_uring(False)
    except OSError:
        pass
    if os.path.isdir(INSTANCE):
        try:
            with open(os.path.join(INSTANCE, "events", "fuse", "enable"), "w") as f:
                f.write("0")
            os.rmdir(INSTANCE)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# workloads (run in forked worker processes)


def work(kind, base, wid, n):
    # Each worker runs in its own directory and uses names relative to it: with timeouts 0 a
    # longer path would cost a LOOKUP and a GETATTR more per component, per operation.
    os.chdir(os.path.join(base, f"w{wid}"))
    d = ""
    if kind == "create":
        for i in range(n):
            with open(os.path.join(d, f"f{i}"), "wb") as f:
                f.write(b"x" * 100)
    elif kind == "stat":
        for i in range(n):
            os.stat(os.path.join(d, f"f{i}"))
    elif kind == "fsync":
        fd = os.open(os.path.join(d, "sync"), os.O_WRONLY)
        buf = b"y" * 4096
        for i in range(n):
            os.pwrite(fd, buf, i * 4096)
            os.fsync(fd)
        os.close(fd)
    elif kind == "statone":
        p = os.path.join(d, "one")
        for _ in range(n):
            os.stat(p)


def prepare(kind, base, nproc):
    """Directories and files a workload needs, made before the clock starts."""
    for w in range(nproc):
        d = os.path.join(base, f"w{w}")
        os.makedirs(d, exist_ok=True)
        if kind == "fsync":
            os.close(os.open(os.path.join(d, "sync"), os.O_CREAT | os.O_WRONLY, 0o644))
        if kind == "statone":
            with open(os.path.join(d, "one"), "wb") as f:
                f.write(b"z")


PIN = None  # --pin: the CPU the workers (and the daemon) are bound to


def _worker(kind, base, wid, n, ready, go):
    if PIN is not None:
        os.sched_setaffinity(0, {PIN})
    ready.release()
    go.wait()
    work(kind, base, wid, n)


def timed(kind, base, nproc, total):
    """Wall-clock seconds for TOTAL operations of KIND split over NPROC forked processes."""
    ctx = mp.get_context("fork")
    ready, go = ctx.Semaphore(0), ctx.Event()
    per = total // nproc
    procs = [ctx.Process(target=_worker, args=(kind, base, w, per, ready, go)) for w in range(nproc)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    t0 = time.perf_counter()
    go.set()
    for p in procs:
        p.join()
    t = time.perf_counter() - t0
    if any(p.exitcode for p in procs):
        raise SystemExit(f"{kind} worker failed")
    return t, per * nproc


def run_round(m, nprocs):
    """All workloads at each process count on mount M: {(kind, nproc): (us/op, syscr/op)}."""
    out = {}
    for nproc in nprocs:
        for kind, total in WORKLOADS:
            src_kind = "create" if kind == "stat" else kind
            base = os.path.join(m.mnt, f"{src_kind}-p{nproc}")
            if kind != "stat":
                prepare(kind, base, nproc)
            r0 = m.syscr()
            t, ops = timed(kind, base, nproc, total)
            r1 = m.syscr()
            out[(kind, nproc)] = (t / ops * 1e6, (r1 - r0) / ops)
    return out


# ---------------------------------------------------------------------------------------------
# tracing


def tw(path, value):
    with open(path, "w") as f:
        f.write(value)


def trace_pass(m):
    """One single-process pass of the workloads under the fuse tracepoints, in a private tracefs
    instance filtered on M's connection. Returns the trace text."""
    if not os.path.isdir(os.path.join(TRACEFS, "events")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=True)
    if not os.path.isdir(INSTANCE):
        os.mkdir(INSTANCE)
    tw(os.path.join(INSTANCE, "buffer_size_kb"), "32768")
    tw(os.path.join(INSTANCE, "trace"), "")
    for ev in ("fuse_request_send", "fuse_request_end"):
        tw(os.path.join(INSTANCE, "events", "fuse", ev, "filter"), f"connection == {m.connection}")
        tw(os.path.join(INSTANCE, "events", "fuse", ev, "enable"), "1")
    tw(os.path.join(INSTANCE, "tracing_on"), "1")
    try:
        for kind, total in TRACE_WORKLOADS:
            src_kind = "create" if kind == "stat" else kind
            base = os.path.join(m.mnt, f"trace-{src_kind}")
            if kind != "stat":
                prepare(kind, base, 1)
            tw(os.path.join(INSTANCE, "trace_marker"), f"BEGIN {kind} {total}")
            timed(kind, base, 1, total)
            tw(os.path.join(INSTANCE, "trace_marker"), f"END {kind}")
    finally:
        tw(os.path.join(INSTANCE, "tracing_on"), "0")
        tw(os.path.join(INSTANCE, "events", "fuse", "enable"), "0")
    with open(os.path.join(INSTANCE, "trace")) as f:
        text = f.read()
    tw(os.path.join(INSTANCE, "trace"), "")
    return text


LINE = re.compile(r"\s(\d+\.\d+): (fuse_request_send|fuse_request_end|tracing_mark_write): (.*)")


def parse_trace(text):
    """{opcode: [latencies us]} over the whole pass, and {workload: {opcode: count}}."""
    pending, lat, per_wl = {}, {}, {}
    current = None
    lost = "LOST" in text
    for line in text.splitlines():
        mm = LINE.search(line)
        if not mm:
            continue
        ts, ev, rest = float(mm.group(1)), mm.group(2), mm.group(3)
        if ev == "tracing_mark_write":
            w = rest.split()
            current = w[1] if w[0] == "BEGIN" else None
            if current:
                per_wl[current] = {"_ops": int(w[2])}
        elif ev == "fuse_request_send":
            r = re.search(r"req (\d+) opcode \d+ \((\w+)\)", rest)
            pending[r.group(1)] = (ts, r.group(2))
            if current:
                per_wl[current][r.group(2)] = per_wl[current].get(r.group(2), 0) + 1
        else:
            r = re.search(r"req (\d+)", rest)
            s = pending.pop(r.group(1), None)
            if s:
                lat.setdefault(s[1], []).append((ts - s[0]) * 1e6)
    return lat, per_wl, lost


# ---------------------------------------------------------------------------------------------
# report


def fmt_cell(v):
    return f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"


def report(meta, rounds, traces, nprocs):
    out = []
    out.append(f"libfuse {meta['tag']} ({meta['commit'][:12]}), passthrough_hp --nocache "
               f"--nopassthrough --nosplice, source dir on "
               + ("the local disk (ext4)" if meta["backing"] == "disk" else "a tmpfs")
               + (f"; daemon and workers bound to CPU {meta['pin']}" if meta.get("pin") is not None
                  else ""))
    out.append(f"kernel {meta['kernel']}, {meta['cpus']} CPUs; load average before: "
               f"{meta['load_before']}, after: {meta['load_after']}")
    out.append(f"{len(rounds['classic'])} rounds per transport, alternated classic/uring; "
               f"us per operation, median (min-max); lower is better")
    out.append("")
    out.append("| workload | procs | classic us/op | uring us/op | uring - classic | change | "
               "daemon reads/op classic, uring |")
    out.append("|---|---|---|---|---|---|---|")
    for kind, total in WORKLOADS:
        for nproc in nprocs:
            c = [r[(kind, nproc)][0] for r in rounds["classic"]]
            u = [r[(kind, nproc)][0] for r in rounds["uring"]]
            cr = statistics.median(r[(kind, nproc)][1] for r in rounds["classic"])
            ur = statistics.median(r[(kind, nproc)][1] for r in rounds["uring"])
            d = statistics.median(u) - statistics.median(c)
            out.append(f"| {kind} x{total} | {nproc} | {fmt_cell(c)} | {fmt_cell(u)} | {d:+.1f} | "
                       f"{d / statistics.median(c) * 100:+.1f}% | {cr:.2f}, {ur:.2f} |")
    if traces:
        out.append("")
        out.append("Requests per operation (fuse_request_send events between trace markers, "
                   "single process):")
        out.append("")
        out.append("| workload | transport | requests/op | by opcode (per op) |")
        out.append("|---|---|---|---|")
        for kind, _ in TRACE_WORKLOADS:
            for t in ("classic", "uring"):
                wl = traces[t]["per_wl"].get(kind, {})
                ops = wl.get("_ops", 1)
                reqs = {k: v for k, v in wl.items() if k != "_ops"}
                by = ", ".join(f"{k.replace('FUSE_', '')} {v / ops:.2f}"
                               for k, v in sorted(reqs.items(), key=lambda kv: -kv[1]))
                out.append(f"| {kind} | {t} | {sum(reqs.values()) / ops:.2f} | {by} |")
        out.append("")
        out.append("Mean latency per request, fuse_request_send -> fuse_request_end (us, tracing "
                   "on; single process, all workloads):")
        out.append("")
        out.append("| opcode | classic n | classic mean | classic median | uring n | uring mean | "
                   "uring median | change of mean |")
        out.append("|---|---|---|---|---|---|---|---|")
        ops = sorted(set(traces["classic"]["lat"]) | set(traces["uring"]["lat"]),
                     key=lambda o: -len(traces["classic"]["lat"].get(o, [])))
        for op in ops:
            c = traces["classic"]["lat"].get(op, [])
            u = traces["uring"]["lat"].get(op, [])

            def s(v):
                return (f"{len(v)} | {statistics.mean(v):.1f} | {statistics.median(v):.1f}"
                        if v else "0 | - | -")
            ch = (f"{(statistics.mean(u) - statistics.mean(c)):+.1f} "
                  f"({(statistics.mean(u) / statistics.mean(c) - 1) * 100:+.1f}%)" if c and u else "-")
            out.append(f"| {op.replace('FUSE_', '')} | {s(c)} | {s(u)} | {ch} |")
        for t in ("classic", "uring"):
            if traces[t]["lost"]:
                out.append(f"\nWARNING: the {t} trace lost events.")
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--rounds", type=int, default=5, help="rounds per transport")
    ap.add_argument("--mirror", default="/work/.mirror/libfuse+libfuse/repo")
    ap.add_argument("--tag", default="fuse-3.18.2")
    ap.add_argument("--nprocs", default="1,4")
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--backing", choices=["disk", "tmpfs"], default="disk",
                    help="what the passthrough directory lives on: the local disk (default), or a "
                    "tmpfs, to take the backing file system's own cost and noise out of the rows")
    ap.add_argument("--pin", type=int, help="bind the daemon and the workers to this one CPU (a "
                    "diagnostic: takes the cross-CPU wake-up out of the classic transport; libfuse's "
                    "io_uring threads bind themselves to their queue's CPU whatever this says)")
    ap.add_argument("--only", help="comma-separated subset of the workloads")
    ap.add_argument("--out", help="write the report to this .md (raw numbers to .json beside it)")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("needs root (mounts, module parameter, tracefs)")
    if not os.path.exists(URING_PARAM):
        sys.exit(f"{URING_PARAM} missing: this kernel has no FUSE over io_uring")
    nprocs = [int(x) for x in a.nprocs.split(",")]
    global PIN, WORKLOADS, TRACE_WORKLOADS
    PIN = a.pin
    if a.only:
        keep = a.only.split(",")
        if "stat" in keep and "create" not in keep:
            keep.append("create")  # stat reads the files create made
        WORKLOADS = [w for w in WORKLOADS if w[0] in keep]
        TRACE_WORKLOADS = [w for w in TRACE_WORKLOADS if w[0] in keep]
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    exe = build_libfuse(a.mirror, a.tag)
    tag, commit = libfuse_version(a.mirror, a.tag)
    os.makedirs(os.path.join(WORK, "src"), exist_ok=True)
    if a.backing == "tmpfs" and not os.path.ismount(os.path.join(WORK, "src")):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "fuse-uring-bench",
                        os.path.join(WORK, "src")], check=True)
    meta = dict(tag=tag, commit=commit, kernel=platform.release(), cpus=os.cpu_count(),
                backing=a.backing, pin=a.pin,
                load_before=loadavg(), started=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    rounds = {"classic": [], "uring": []}
    loads = []
    for i in range(a.rounds):
        for transport in ("classic", "uring"):
            with Mount(exe, transport, f"r{i}", a.pin) as m:
                r = run_round(m, nprocs)
                m.check_fds()
            for (kind, nproc), (us, reads) in r.items():
                # the transport check: classic reads each request from /dev/fuse, io_uring never
                if transport == "uring" and reads > 0.5:
                    sys.exit(f"uring round {i}: {reads:.2f} daemon reads per {kind} op: /dev/fuse?")
                if transport == "classic" and reads < 0.5:
                    sys.exit(f"classic round {i}: {reads:.2f} daemon reads per {kind} op?")
            rounds[transport].append(r)
            loads.append(loadavg())
            print(f"round {i} {transport}: " + ", ".join(
                f"{k}/{p} {v[0]:.1f}us" for (k, p), v in r.items()) + f"  [load {loads[-1]}]",
                file=sys.stderr, flush=True)
    traces = {}
    if not a.no_trace:
        for transport in ("classic", "uring"):
            with Mount(exe, transport, "trace", a.pin) as m:
                lat, per_wl, lost = parse_trace(trace_pass(m))
            traces[transport] = dict(lat=lat, per_wl=per_wl, lost=lost)
    meta["load_after"] = loadavg()
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    text = report(meta, rounds, traces, nprocs)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
        raw = dict(meta=meta, loads=loads,
                   rounds={t: [{f"{k}/{p}": v for (k, p), v in r.items()} for r in rs]
                           for t, rs in rounds.items()},
                   traces={t: dict(per_wl=v["per_wl"], lost=v["lost"],
                                   lat={op: dict(n=len(x), mean=statistics.mean(x),
                                                 median=statistics.median(x))
                                        for op, x in v["lat"].items()})
                           for t, v in traces.items()})
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
