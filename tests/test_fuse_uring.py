"""FUSE over io_uring (the fuse_io_uring tunable): with the fuse module's enable_uring on, a
writable mount is served through the ring — the daemon holds one io_uring per possible CPU —
and creates, writes, 1 MiB reads and writes, reads, stat, readdir, rename, unlink, fsync and
xattrs give what a model of the changes says, before and after an export and import; the pool
is clean for OpenZFS's zdb. With enable_uring off the same choice falls back to /dev/fuse with
one line in the daemon's log, and the mount works; with the tunable at 0 (asked for by name, not
left to the default) the mount stays on /dev/fuse though the kernel offers the ring. The tests
set the module parameter and give its value back (other tests' daemons leave the tunable at its
default, 0, and are not affected)."""
import contextlib
import hashlib
import os
import random
import subprocess

import pytest

from conftest import fresh_daemon
from test_write import make_devs, zdb_check
import manifest

ENABLE = "/sys/module/fuse/parameters/enable_uring"


@contextlib.contextmanager
def enable_uring(value):
    if not os.path.exists(ENABLE):
        # (fuse built as a module and not loaded yet on a machine that has mounted nothing)
        subprocess.run(["modprobe", "fuse"], capture_output=True)
    if not os.path.exists(ENABLE):
        pytest.fail(f"{ENABLE} is missing: the kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING)")
    before = open(ENABLE).read().strip()
    with open(ENABLE, "w") as f:
        f.write(value)
    try:
        yield
    finally:
        with open(ENABLE, "w") as f:
            f.write(before)


def daemon(oxzfs_bin, work_dir, tag):
    """A daemon of its own started with OXZFS_FUSE_IO_URING=1 (the tunable's environment name)."""
    return fresh_daemon(oxzfs_bin, work_dir, tag, {"OXZFS_FUSE_IO_URING": "1"})


def new_pool(ox, pool, mib):
    """A pool of one MIB MiB file device under the daemon's base: (vdev dir, altroot, root)."""
    vdir, alt = os.path.join(ox.base, "vdevs"), os.path.join(ox.base, "alt")
    r = ox.zpool("create", "-R", alt, pool, *make_devs(vdir, 1, mib))
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    return vdir, alt, os.path.join(alt, pool)


def rings(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[io_uring]"
    return n


def possible_cpus():
    last = max(int(r.split("-")[-1]) for r in open("/sys/devices/system/cpu/possible").read().strip().split(","))
    return last + 1


def sha(b):
    return hashlib.sha256(b).hexdigest()


def workload(root):
    """Changes under ROOT, each checked as it is made; returns the model: {path: (data, xattrs)}
    for files and the set of directories."""
    rng = random.Random(15)
    files, dirs = {}, {"."}
    for d in ("a", "a/b", "c"):
        os.mkdir(os.path.join(root, d))
        dirs.add(d)
    for i in range(40):
        rel = f"{['a', 'a/b', 'c'][i % 3]}/f{i}"
        data = rng.randbytes(rng.randrange(0, 9000))
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        files[rel] = [data, {}]
    big = rng.randbytes(1 << 20)
    with open(os.path.join(root, "c/big"), "wb", buffering=0) as f:
        assert f.write(big) == 1 << 20
        os.fsync(f.fileno())
    files["c/big"] = [big, {}]
    # Overwrite the middle of a file and grow another, fsyncing each.
    p = os.path.join(root, "a/f0")
    with open(p, "r+b") as f:
        f.write(b"\0" * 5000)
        f.seek(100)
        f.write(b"middle")
        os.fsync(f.fileno())
    files["a/f0"][0] = b"\0" * 100 + b"middle" + b"\0" * 4894
    with open(os.path.join(root, "a/b/f1"), "ab") as f:
        f.write(b"tail")
        os.fsync(f.fileno())
    files["a/b/f1"][0] += b"tail"
    for i in range(3, 40, 7):
        src = f"{['a', 'a/b', 'c'][i % 3]}/f{i}"
        dst = f"c/renamed{i}"
        os.rename(os.path.join(root, src), os.path.join(root, dst))
        files[dst] = files.pop(src)
    for i in range(5, 40, 9):
        rel = f"{['a', 'a/b', 'c'][i % 3]}/f{i}"
        if rel in files:
            os.unlink(os.path.join(root, rel))
            del files[rel]
    for k, rel in enumerate(sorted(files)[:6]):
        v = rng.randbytes(20 + k)
        os.setxattr(os.path.join(root, rel), f"user.k{k}", v)
        files[rel][1][f"user.k{k}"] = v
    first = sorted(files)[0]
    os.removexattr(os.path.join(root, first), "user.k0")
    del files[first][1]["user.k0"]
    check(root, files, dirs)
    return files, dirs


def check(root, files, dirs):
    """Reads, stat and readdir against the model, then the manifest."""
    for rel, (data, xattrs) in files.items():
        p = os.path.join(root, rel)
        assert os.stat(p).st_size == len(data), rel
        with open(p, "rb", buffering=0) as f:
            got = f.read(1 << 20) if len(data) == 1 << 20 else f.read()
        assert got == data, f"{rel}: content differs from what was written"
        assert {n: os.getxattr(p, n) for n in os.listxattr(p) if n.startswith("user.")} == xattrs, rel
    for d in dirs:
        want = sorted([os.path.basename(r) for r in files if os.path.dirname(r) == ("" if d == "." else d)]
                      + [os.path.basename(x) for x in dirs if x != "." and os.path.dirname(x) == ("" if d == "." else d)])
        assert sorted(os.listdir(os.path.join(root, d))) == want, d
    got = {e["path"]: e for e in manifest.manifest(root)}
    assert set(got) == set(files) | dirs
    for rel, (data, xattrs) in files.items():
        e = got[rel]
        assert (e["type"], e["size"], e["sha256"], e.get("xattrs", {})) == \
            ("file", len(data), sha(data), {n: sha(v) for n, v in xattrs.items()}), rel
    for d in dirs:
        assert got[d]["type"] == "dir", d


def test_mount_served_through_io_uring_matches_the_model(oxzfs_bin, work_dir):
    with enable_uring("Y"):
        ox = daemon(oxzfs_bin, work_dir, "fuse_uring_on")
        try:
            vdir, alt, root = new_pool(ox, "uring", 256)
            files, dirs = workload(root)
            pid = ox.server_pid()
            assert rings(pid) == possible_cpus(), f"want one io_uring per CPU in the daemon:\n{ox.daemon_log_tail()}"
            assert "FUSE over io_uring in use" in ox.daemon_log_tail(200)
            assert ox.export("uring").returncode == 0
            assert rings(pid) == 0, "the rings outlived the mount"
            r = ox.zpool("import", "-d", vdir, "-R", alt, "uring")
            assert r.returncode == 0, repr(r)
            ox.imported.append("uring")
            check(root, files, dirs)
            assert rings(pid) == possible_cpus()
            assert ox.export("uring").returncode == 0
        finally:
            ox.teardown()
    zdb_check(vdir, "uring")


def test_without_the_kernel_switch_the_mount_falls_back_to_dev_fuse(oxzfs_bin, work_dir):
    with enable_uring("N"):
        ox = daemon(oxzfs_bin, work_dir, "fuse_uring_off")
        try:
            vdir, alt, root = new_pool(ox, "nouring", 128)
            with open(os.path.join(root, "f"), "wb") as f:
                f.write(b"x" * 70000)
                os.fsync(f.fileno())
            os.rename(os.path.join(root, "f"), os.path.join(root, "g"))
            assert os.listdir(root) == ["g"]
            assert open(os.path.join(root, "g"), "rb").read() == b"x" * 70000
            assert rings(ox.server_pid()) == 0
            log = ox.daemon_log_tail(200)
            assert log.count("FUSE over io_uring: not offered by the kernel") == 1, log
            assert "FUSE over io_uring in use" not in log
            assert ox.export("nouring").returncode == 0
        finally:
            ox.teardown()


def test_the_tunable_at_0_keeps_dev_fuse_where_the_kernel_offers_the_ring(oxzfs_bin, work_dir):
    """The off side asked for by name (whatever the tunable's default): enable_uring Y, the
    daemon started with fuse_io_uring=0, the mount is served through /dev/fuse, silently."""
    with enable_uring("Y"):
        ox = fresh_daemon(oxzfs_bin, work_dir, "fuse_uring_zero", {"OXZFS_FUSE_IO_URING": "0"})
        try:
            vdir, alt, root = new_pool(ox, "zerouring", 128)
            with open(os.path.join(root, "f"), "wb") as f:
                f.write(b"y" * 70000)
                os.fsync(f.fileno())
            assert open(os.path.join(root, "f"), "rb").read() == b"y" * 70000
            assert rings(ox.server_pid()) == 0, "fuse_io_uring=0 must leave the mount on /dev/fuse"
            log = ox.daemon_log_tail(200)
            assert "FUSE over io_uring" not in log, log
            assert ox.export("zerouring").returncode == 0
        finally:
            ox.teardown()
