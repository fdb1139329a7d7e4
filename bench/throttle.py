"""Block devices of a set bandwidth for the benchmarks: files as loop devices (direct I/O), held
to MB/s each way by a blkio cgroup (v1 or v2's io.max), for the processes put in it.

    with Throttled(work, ["d0", "d1"], size_mib, mbs) as t:
        t.paths            # symlinks to the loop devices, one directory each
        t.join(pid)        # the daemon's I/O held too
        t.wrap(args)       # a command run inside the cgroup (fio)

The cgroup bounds what reaches the devices past the page cache: reads, and O_DIRECT writes;
buffered writes are bounded where the kernel charges their writeback to the cgroup (v2)."""
import contextlib
import os
import subprocess


class Throttled:
    made = 0

    def __init__(self, work, names, size_mib, mbs):
        Throttled.made += 1
        self.loops, self.paths = [], []
        self.cgroup = None
        bps = int(mbs * 1e6)
        os.makedirs(work, exist_ok=True)
        try:
            for name in names:
                back = os.path.join(work, f"{name}.img")
                with open(back, "wb") as f:
                    f.truncate(size_mib << 20)
                loop = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", back], check=True, capture_output=True, text=True).stdout.strip()
                self.loops.append(loop)
                d = os.path.join(work, f"dev-{name}")
                os.makedirs(d)
                os.symlink(loop, os.path.join(d, name))
                self.paths.append(os.path.join(d, name))
            v1 = "/sys/fs/cgroup/blkio"
            if os.path.isdir(v1):
                self.cgroup = os.path.join(v1, f"oxzfs-bench-{os.getpid()}-{Throttled.made}")
                os.makedirs(self.cgroup)
                for loop in self.loops:
                    rdev = os.stat(loop).st_rdev
                    for knob in ("read_bps_device", "write_bps_device"):
                        with open(os.path.join(self.cgroup, f"blkio.throttle.{knob}"), "w") as f:
                            f.write(f"{os.major(rdev)}:{os.minor(rdev)} {bps}\n")
            else:
                self.cgroup = os.path.join("/sys/fs/cgroup", f"oxzfs-bench-{os.getpid()}-{Throttled.made}")
                os.makedirs(self.cgroup)
                for loop in self.loops:
                    rdev = os.stat(loop).st_rdev
                    with open(os.path.join(self.cgroup, "io.max"), "w") as f:
                        f.write(f"{os.major(rdev)}:{os.minor(rdev)} rbps={bps} wbps={bps}\n")
        except BaseException:
            self.close()
            raise

    def join(self, pid):
        with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def wrap(self, args):
        return ["sh", "-c", f'echo $$ > {self.cgroup}/cgroup.procs && exec "$@"', "sh", *args]

    def close(self):
        if self.cgroup:
            # What is still in it (the daemon) goes back to the parent group first.
            with contextlib.suppress(OSError):
                with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
                    pids = f.read().split()
                for pid in pids:
                    with open(os.path.join(os.path.dirname(self.cgroup), "cgroup.procs"), "w") as f:
                        f.write(pid)
        for loop in self.loops:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        self.loops = []
        if self.cgroup:
            with contextlib.suppress(OSError):
                os.rmdir(self.cgroup)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
