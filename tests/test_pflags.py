"""File flags and project ids, as `lsattr`, `chattr` and `zfs project` see them: the ioctls
FS_IOC_GETFLAGS / FS_IOC_SETFLAGS and FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR, and the rules an
immutable, append-only or no-unlink file imposes.

The oracles: OpenZFS's zdb shows each object's flags (`pflags`) where OpenZFS keeps them, and
the project accounting it dumps must charge each object to the project set on it; zfs-fuse,
which knows the flags but no ioctl for them, must refuse what the flags oxzfs set forbid.
The rules themselves are those of a Linux OpenZFS mount: ZFS's own (zfs_write, zfs_setattr,
zfs_zaccess_delete) and the kernel's for S_IMMUTABLE and S_APPEND inodes (may_open,
may_delete, notify_change), which a FUSE mount does not get from the kernel.
"""
import errno
import fcntl
import os
import re
import struct
import subprocess
import sys

from conftest import zfs_fuse_imported
from test_snapshots import pool_with_fs
from test_write import zdb_check, zdb_cmd

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR = 0x801C581F, 0x401C5820
FS_IMMUTABLE_FL, FS_APPEND_FL, FS_NODUMP_FL, FS_PROJINHERIT_FL = 0x10, 0x20, 0x40, 0x20000000
FS_XFLAG_PROJINHERIT = 0x200
# zfs_znode.h
ZFS_IMMUTABLE, ZFS_APPENDONLY, ZFS_NODUMP = 0x1000000000, 0x4000000000, 0x8000000000
ZFS_PROJINHERIT, ZFS_PROJID = 0x400000000000, 0x800000000000


def _fd(path):
    return os.open(path, os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0))


def getflags(path):
    fd = _fd(path)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 4))[0]
    finally:
        os.close(fd)


def setflags(path, flags):
    fd = _fd(path)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


def getproj(path):
    """(xflags, project id) of PATH."""
    fd = _fd(path)
    try:
        x = fcntl.ioctl(fd, FS_IOC_FSGETXATTR, b"\0" * 28)
    finally:
        os.close(fd)
    return struct.unpack("I", x[:4])[0], struct.unpack("I", x[12:16])[0]


def setproj(path, projid, inherit):
    fd = _fd(path)
    try:
        xflags = struct.unpack("I", fcntl.ioctl(fd, FS_IOC_FSGETXATTR, b"\0" * 28)[:4])[0]
        xflags = (xflags | FS_XFLAG_PROJINHERIT) if inherit else (xflags & ~FS_XFLAG_PROJINHERIT)
        fcntl.ioctl(fd, FS_IOC_FSSETXATTR, struct.pack("IIII", xflags, 0, 0, projid) + b"\0" * 12)
    finally:
        os.close(fd)


def fails(fn, *a):
    """The errno FN(*A) fails with, or None."""
    try:
        fn(*a)
        return None
    except OSError as e:
        return e.errno


def write_at(path, flags, data=b"x", offset=None):
    fd = os.open(path, flags)
    try:
        if offset is not None:
            os.pwrite(fd, data, offset)
        else:
            os.write(fd, data)
    finally:
        os.close(fd)


def as_user(uid, code):
    """The exit status and stderr of Python CODE run as UID (a non-root owner)."""
    r = subprocess.run([sys.executable, "-c", f"import os, fcntl, struct; os.setgid({uid}); os.setuid({uid}); {code}"],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stderr


def zdb_objects(vdir, ds):
    """{path: {"pflags": int, "dsize": int, "uid": int}} and the project ZAP's content
    {hex id: bytes} from `zdb -P -ddddd DS` of the exported pool in VDIR."""
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdir, "-P", "-ddddd", ds], capture_output=True, text=True, errors="replace",
                       timeout=300, env=env)
    assert r.returncode == 0, f"zdb -ddddd {ds}:\n{(r.stdout + r.stderr)[-3000:]}"
    header = re.compile(r"^\s+(-?\d+)\s+\d+\s+\d+\s+\d+\s+(\d+)\s+\d+\s+\d+\s+[\d.]+\s+(.+?)\s*$")
    objs, cur, projects = {}, None, {}
    for line in r.stdout.splitlines():
        m = header.match(line)
        if m:
            cur = {"obj": m.group(1), "dsize": int(m.group(2))}
            continue
        if cur is None:
            continue
        if cur["obj"] == "-3":
            e = re.match(r"^\t\t([0-9a-f]+) = (\d+)\s*$", line)
            if e:
                projects[e.group(1)] = int(e.group(2))
            continue
        f = re.match(r"^\t(path|pflags|uid)\s+(\S+)\s*$", line)
        if f:
            key, val = f.group(1), f.group(2)
            cur[key] = val if key == "path" else int(val, 16) if key == "pflags" else int(val)
            if key == "path":
                objs[val] = cur
    return objs, projects


def test_flags_rules_and_projects(oxzfs):
    """chattr's flags and project ids through the ioctls, the rules they impose as a Linux
    OpenZFS mount imposes them, and what zdb finds: the flags where OpenZFS keeps them, and
    each object charged to the project set on it."""
    pool = "pflags"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "pflags", pool, 1, 256, lambda d: d,
                                       "-o", "feature@project_quota=enabled")
    p = lambda *n: os.path.join(root, *n)  # noqa: E731
    for name in ("imm", "app", "dump", "plain"):
        with open(p(name), "wb") as f:
            f.write(b"0123456789")
    os.mkdir(p("adir"))
    os.mkdir(p("idir"))
    with open(p("adir", "old"), "wb") as f:
        f.write(b"old")
    assert getflags(p("imm")) == 0

    setflags(p("imm"), FS_IMMUTABLE_FL)
    setflags(p("app"), FS_APPEND_FL)
    setflags(p("dump"), FS_NODUMP_FL)
    setflags(p("adir"), FS_APPEND_FL)
    setflags(p("idir"), FS_IMMUTABLE_FL)
    assert [getflags(p(n)) for n in ("imm", "app", "dump", "adir", "idir", "plain")] == \
        [FS_IMMUTABLE_FL, FS_APPEND_FL, FS_NODUMP_FL, FS_APPEND_FL, FS_IMMUTABLE_FL, 0]
    # Flags ZFS does not keep: EOPNOTSUPP (zpl_ioctl_setflags).
    assert fails(setflags, p("plain"), 0x1) == errno.EOPNOTSUPP  # FS_SECRM_FL

    # Immutable: no write, no change of any attribute, no removal, rename, link or xattr.
    assert fails(write_at, p("imm"), os.O_WRONLY | os.O_APPEND) == errno.EPERM
    assert fails(os.truncate, p("imm"), 0) == errno.EPERM
    assert fails(os.chmod, p("imm"), 0o600) == errno.EPERM
    assert fails(os.utime, p("imm"), None) == errno.EPERM
    assert fails(os.unlink, p("imm")) == errno.EPERM
    assert fails(os.rename, p("imm"), p("moved")) == errno.EPERM
    assert fails(os.link, p("imm"), p("imm-link")) == errno.EPERM
    assert fails(os.setxattr, p("imm"), "user.k", b"v") == errno.EPERM
    with open(p("imm"), "rb") as f:
        assert f.read() == b"0123456789"
    # Not even the set-ID bits a change of owner takes away.
    with open(p("suid"), "wb") as f:
        f.write(b"#!/bin/sh\n")
    os.chmod(p("suid"), 0o4755)
    setflags(p("suid"), FS_IMMUTABLE_FL)
    assert fails(os.chown, p("suid"), -1, -1) == errno.EPERM
    assert os.stat(p("suid")).st_mode & 0o7777 == 0o4755
    setflags(p("suid"), 0)
    # Append-only: appends only (O_APPEND), times to now but no other change, no removal.
    write_at(p("app"), os.O_WRONLY | os.O_APPEND, b"+more")
    assert fails(write_at, p("app"), os.O_WRONLY) == errno.EPERM
    assert fails(write_at, p("app"), os.O_RDWR | os.O_TRUNC) == errno.EPERM
    assert fails(os.truncate, p("app"), 3) == errno.EPERM
    assert fails(os.chmod, p("app"), 0o600) == errno.EPERM
    assert fails(os.utime, p("app"), (1, 1)) == errno.EPERM
    os.utime(p("app"), None)
    assert fails(os.unlink, p("app")) == errno.EPERM
    assert fails(os.rename, p("plain"), p("app")) == errno.EPERM
    with open(p("app"), "rb") as f:
        assert f.read() == b"0123456789+more"
    # An append-only directory takes new names and keeps its old ones; an immutable one takes
    # none.
    with open(p("adir", "new"), "wb") as f:
        f.write(b"new")
    assert fails(os.unlink, p("adir", "old")) == errno.EPERM
    assert fails(os.rename, p("adir", "old"), p("old")) == errno.EPERM
    assert fails(os.mkdir, p("idir", "sub")) == errno.EPERM
    assert fails(os.rename, p("plain"), p("idir", "plain")) == errno.EPERM
    # Only root changes immutable and append-only; an owner may change nodump; others nothing.
    os.chown(p("plain"), 1000, 1000)
    code, err = as_user(1000, f"fd = os.open({p('plain')!r}, os.O_RDONLY); "
                              f"fcntl.ioctl(fd, {FS_IOC_SETFLAGS}, struct.pack('i', {FS_NODUMP_FL}))")
    assert code == 0, err
    code, err = as_user(1000, f"fd = os.open({p('plain')!r}, os.O_RDONLY); "
                              f"fcntl.ioctl(fd, {FS_IOC_SETFLAGS}, struct.pack('i', {FS_NODUMP_FL | FS_IMMUTABLE_FL}))")
    assert code != 0 and "Operation not permitted" in err, err
    assert getflags(p("plain")) == FS_NODUMP_FL
    # Cleared, everything works again.
    setflags(p("app"), 0)
    os.truncate(p("app"), 3)

    # Projects: a directory set to pass its project on gives it to what is made in it.
    os.mkdir(p("proj"))
    setproj(p("proj"), 42, True)
    with open(p("proj", "a"), "wb") as f:
        f.write(os.urandom(20000))
    os.mkdir(p("proj", "sub"))
    with open(p("proj", "sub", "b"), "wb") as f:
        f.write(os.urandom(5000))
    assert getproj(p("proj", "sub", "b")) == (FS_XFLAG_PROJINHERIT, 42)
    assert getflags(p("proj")) == FS_PROJINHERIT_FL
    # A file made before the project was set gets one of its own; into the project's
    # directory only what is of its project goes (EXDEV, as across file systems).
    setproj(p("dump"), 7, False)
    assert getproj(p("dump")) == (0x80, 7)  # FS_XFLAG_NODUMP kept
    assert fails(os.link, p("dump"), p("proj", "dump")) == errno.EXDEV
    assert fails(os.rename, p("dump"), p("proj", "dump")) == errno.EXDEV
    assert fails(setproj, p("proj"), 0xFFFFFFFF, True) == errno.EINVAL
    # A project quota holds once the project's synced figure reaches it (the file system, made
    # on a pool with project_quota, keeps its projects complete from the start).
    assert oxzfs.zfs("set", "projectquota@42=20K", fs).returncode == 0
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert fails(write_at, p("proj", "c"), os.O_WRONLY | os.O_CREAT) == errno.EDQUOT
    write_at(p("c"), os.O_WRONLY | os.O_CREAT)
    r = oxzfs.zfs("projectspace", "-Hp", "-o", "name,quota", fs)
    assert r.returncode == 0 and "42\t20480" in r.stdout.splitlines(), repr(r)

    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    objs, projects = zdb_objects(vdir, fs)
    flags = {path: o["pflags"] for path, o in objs.items()}
    assert flags["/imm"] & ZFS_IMMUTABLE and not flags["/imm"] & (ZFS_APPENDONLY | ZFS_NODUMP)
    assert not flags["/app"] & (ZFS_APPENDONLY | ZFS_IMMUTABLE)
    assert flags["/adir"] & ZFS_APPENDONLY and flags["/idir"] & ZFS_IMMUTABLE
    assert flags["/dump"] & ZFS_NODUMP and flags["/plain"] & ZFS_NODUMP
    for path in ("/proj", "/proj/a", "/proj/sub", "/proj/sub/b"):
        assert flags[path] & (ZFS_PROJINHERIT | ZFS_PROJID) == ZFS_PROJINHERIT | ZFS_PROJID, (path, hex(flags[path]))
    assert flags["/dump"] & (ZFS_PROJINHERIT | ZFS_PROJID) == ZFS_PROJID
    # Every file system object charged to its project (512 bytes and its size each).
    want = {}
    for path, o in objs.items():
        if "uid" not in o:
            continue
        proj = 42 if path == "/proj" or path.startswith("/proj/") else 7 if path == "/dump" else 0
        want[format(proj, "x")] = want.get(format(proj, "x"), 0) + 512 + o["dsize"]
    assert {k: v for k, v in projects.items()} == want, (projects, want)


def test_flags_cross_zfs_fuse(oxzfs, work_dir):
    """Version 23: flags oxzfs sets are where zfs-fuse looks for them: it refuses to write to
    or remove the immutable file, and lets the append-only one grow only at its end."""
    pool = "pflags23"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "pflags23", pool, 1, 128, lambda d: d, "-o", "version=23")
    for name in ("imm", "app", "plain"):
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"0123456789")
    setflags(os.path.join(root, "imm"), FS_IMMUTABLE_FL)
    setflags(os.path.join(root, "app"), FS_APPEND_FL)
    assert oxzfs.export(pool).returncode == 0
    zf_alt = os.path.join(oxzfs.base, "pflags23-zf")
    with zfs_fuse_imported(work_dir, vdir, zf_alt, pool):
        zroot = os.path.join(zf_alt, fs)
        assert fails(write_at, os.path.join(zroot, "imm"), os.O_WRONLY, b"x", 0) == errno.EPERM
        assert fails(os.unlink, os.path.join(zroot, "imm")) == errno.EPERM
        assert fails(write_at, os.path.join(zroot, "app"), os.O_WRONLY, b"x", 0) == errno.EPERM
        write_at(os.path.join(zroot, "plain"), os.O_WRONLY, b"x", 0)
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert getflags(os.path.join(root, "imm")) == FS_IMMUTABLE_FL
    with open(os.path.join(root, "plain"), "rb") as f:
        assert f.read() == b"x123456789"


def test_zfs_project_command(oxzfs):
    """`zfs project` sets, lists, checks and clears project ids and the inherit flag through
    the ioctls, in zfs_project.c's formats; what it sets is what the ioctls then read, and new
    files in a marked directory take its project."""
    pool = "zproj"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "zproj", pool, 1, 128, lambda d: d, "-o", "feature@project_quota=enabled")
    d = os.path.join(root, "d")
    os.makedirs(os.path.join(d, "sub"))
    for f in ("f", os.path.join("sub", "g")):
        open(os.path.join(d, f), "w").close()
    r = oxzfs.zfs("project", "-p", "42", "-rs", d)
    assert r.returncode == 0, repr(r)
    r = oxzfs.zfs("project", "-r", d)
    assert r.returncode == 0, repr(r)
    want = sorted(f"   42 P {os.path.join(d, p) if p else d}" for p in ("", "f", "sub", "sub/g"))
    assert sorted(r.stdout.splitlines()) == want, repr(r)
    open(os.path.join(d, "sub", "new"), "w").close()
    assert getproj(os.path.join(d, "sub", "new")) == (FS_XFLAG_PROJINHERIT, 42)
    setproj(os.path.join(d, "f"), 7, True)
    r = oxzfs.zfs("project", "-c", "-r", d)
    assert r.stdout.splitlines() == [f"{os.path.join(d, 'f')} - project ID is not set properly (7/42)"], repr(r)
    r = oxzfs.zfs("project", "-C", "-k", "-r", d)
    assert r.returncode == 0, repr(r)
    assert getproj(os.path.join(d, "sub")) == (0, 42) and getproj(os.path.join(d, "f")) == (0, 7)
    r = oxzfs.zfs("project", "-C", "-r", d)
    assert r.returncode == 0 and all(getproj(os.path.join(d, p)) == (0, 0) for p in ("", "f", "sub", "sub/g", "sub/new")), repr(r)
