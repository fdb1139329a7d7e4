"""ZPL version 5 (system-attribute znodes) as oxzfs writes it on version-5000 pools, judged by
OpenZFS 2.1's zdb: the pool is clean (`zdb -bcc`: no leaks, no errors, the large_dnode refcount
verified) and zdb's own decoding of every znode's system attributes (mode, size, links, parent,
owner, times, symlink targets short and spilled, xattrs in the SA and in xattr directories)
gives back what the files have; oxzfs reads it all back after export and import. Version-23
pools keep ZPL version 4 znodes."""
import os
import stat
import subprocess
import time

from conftest import diff_manifests
import manifest as manifest_mod
import oracle_pools
import zdbparse
from test_write import new_pool, zdb_check

ZDB = oracle_pools.ZDB

# (dataset suffix, properties): xattr=on (directory xattrs), xattr=sa, xattr=sa with 1K dnodes.
DATASETS = [("on", []), ("sa", ["-o", "xattr=sa"]), ("sadn", ["-o", "xattr=sa", "-o", "dnodesize=auto"])]
TARGETS = {"short": "f1", "long": "t/" + "x" * 700}
XATTRS = {"user.small": b"tiny", "user.mid": b"m" * 1000, "user.big": b"B" * 40000}


def fill(root):
    """Every kind of entry, with owners, modes, times and xattrs set."""
    os.makedirs(os.path.join(root, "d1/d2"))
    with open(os.path.join(root, "f1"), "wb") as f:
        f.write(b"hello world\n" * 1000)
    with open(os.path.join(root, "d1/f2"), "wb") as f:
        f.write(os.urandom(300000))
    open(os.path.join(root, "empty"), "wb").close()
    os.link(os.path.join(root, "f1"), os.path.join(root, "d1/d2/hard"))
    for name, target in TARGETS.items():  # the long one spills: SYMLINK does not fit the bonus
        os.symlink(target, os.path.join(root, name))
    os.mknod(os.path.join(root, "fifo"), 0o640 | stat.S_IFIFO)
    os.mknod(os.path.join(root, "cdev"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(os.path.join(root, "f1"), 0o751)
    os.chown(os.path.join(root, "d1/f2"), 1234, 567)
    os.utime(os.path.join(root, "empty"), (1500000000, 1600000000))
    for n, v in XATTRS.items():
        os.setxattr(os.path.join(root, "f1"), n, v)
        os.setxattr(os.path.join(root, "d1"), n, v)
    os.setxattr(os.path.join(root, "empty"), "user.gone", b"x")
    os.removexattr(os.path.join(root, "empty"), "user.gone")


def lstat_all(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            out[os.path.relpath(p, root)] = os.lstat(p)
    return out


def zdb_dataset(vdir, pool, ds):
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddd", f"{pool}/{ds}" if ds else f"{pool}/"],
                       capture_output=True, text=True, errors="replace", timeout=600)
    assert r.returncode == 0, f"zdb -dddd {pool}/{ds} exited {r.returncode}:\n{r.stderr[-3000:]}"
    return r.stdout


def check_znodes(text, want, ds, sa_xattrs, dnsize):
    """zdb's decoding of the dataset's znodes equals the files' lstat results."""
    assert "VERSION = 5" in text, f"{ds}: the master node does not say ZPL version 5"
    paths = zdbparse.zpl_paths(text)
    zn = zdbparse.znodes(text)
    root = next(int(ln.split("=")[1]) for ln in text.splitlines() if ln.strip().startswith("ROOT = "))
    assert zn[root]["bonus"] == "System attributes", f"{ds}: root znode bonus {zn[root].get('bonus')}"
    for p, st in want.items():
        obj = paths.get(p)
        assert obj is not None, f"{ds}: zdb finds no {p}"
        z = zn[obj]
        ctx = f"{ds}/{p} (object {obj})"
        assert z.get("bonus") == "System attributes", f"{ctx}: bonus {z.get('bonus')}"
        assert z["dnsize"] == dnsize, f"{ctx}: dnode size {z['dnsize']}, want {dnsize}"
        parent = root if "/" not in p else paths[p.rsplit("/", 1)[0]]
        got = {k: z.get(k) for k in ("mode", "size", "links", "uid", "gid", "parent", "mtime", "atime", "ctime")}
        exp = {"mode": f"{st.st_mode:o}", "size": str(st.st_size), "links": str(st.st_nlink), "uid": str(st.st_uid),
               "gid": str(st.st_gid), "parent": str(parent) if st.st_nlink == 1 or stat.S_ISDIR(st.st_mode) else got["parent"],
               "mtime": time.ctime(st.st_mtime), "atime": time.ctime(st.st_atime), "ctime": time.ctime(st.st_ctime)}
        assert got == exp, f"{ctx}: zdb decodes {got}, the file has {exp}"
        assert int(z["pflags"], 16) & 0x40800000000 == 0x40800000000, f"{ctx}: pflags {z['pflags']}"
        if stat.S_ISLNK(st.st_mode):
            full = TARGETS[p]
            assert z.get("target") == full, f"{ctx}: zdb reads target {z.get('target')!r}"
        if stat.S_ISCHR(st.st_mode):
            assert int(z["rdev"], 16) == (os.major(st.st_rdev) << 32 | os.minor(st.st_rdev)), f"{ctx}: rdev {z.get('rdev')}"
    for p in ("f1", "d1"):
        z = zn[paths[p]]
        ctx = f"{ds}/{p}"
        if sa_xattrs:
            # Small values in the DXATTR nvlist; the 40K one (over 32K) in the xattr directory.
            assert set(z["sa_xattrs"]) == {"user.small", "user.mid"}, f"{ctx}: SA xattrs {sorted(z['sa_xattrs'])}"
            assert z["sa_xattrs"]["user.small"] == "tiny" and z["sa_xattrs"]["user.mid"] == "m" * 1000
            want_dir = {"user.big"}
        else:
            assert not z["sa_xattrs"], f"{ctx}: SA xattrs with xattr=on"
            want_dir = set(XATTRS)
        xd = int(z.get("xattr", "0"))
        assert xd in zn, f"{ctx}: xattr directory {z.get('xattr')} not found"
        assert int(zn[xd]["pflags"], 16) & 1, f"{ctx}: xattr directory without ZFS_XATTR"
        # zfs_get_xattrdir makes it S_IFDIR | S_ISVTX | 0777.
        assert zn[xd]["mode"] == "41777", f"{ctx}: xattr directory mode {zn[xd]['mode']}"
        names = {ln.split(" = ")[0].strip() for ln in section(text, xd) if "(type: Regular File)" in ln}
        assert names == want_dir, f"{ctx}: xattr directory holds {sorted(names)}"
    e = zn[paths["empty"]]
    assert not e["sa_xattrs"] and ("xattr" in e) != sa_xattrs, f"{ds}/empty: {e}"


def section(text, obj):
    """The lines of object OBJ's block in zdb -dddd output."""
    out, on = [], False
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.strip().startswith("Object  lvl") and i + 1 < len(lines):
            f = lines[i + 1].split()
            on = bool(f) and f[0] == str(obj)
            continue
        if on:
            out.append(ln)
    return out


ROOTS = {}


def test_zpl5_system_attributes_decode_in_zdb_and_read_back(oxzfs):
    pool = "wzpl5"
    vdir, alt, root = new_pool(oxzfs, pool, "zpl5", 1, "-o", "ashift=9", size_mib=256)
    want, mans = {}, {}
    for ds, props in DATASETS:
        r = oxzfs.zfs("create", *props, f"{pool}/{ds}")
        assert r.returncode == 0, repr(r)
        ROOTS[ds] = os.path.join(root, ds)
        fill(ROOTS[ds])
        mans[ds] = manifest_mod.manifest(ROOTS[ds])
        # The live mount reads back what was written.
        for p in ("f1", "d1"):
            for n, v in XATTRS.items():
                assert os.getxattr(os.path.join(ROOTS[ds], p), n) == v, f"{ds}/{p} {n}"
        assert all(os.readlink(os.path.join(ROOTS[ds], n)) == t for n, t in TARGETS.items())
        want[ds] = lstat_all(ROOTS[ds])  # after the reads above (relatime may move atime)
    # dnodesize needs large_dnode; the property reads back.
    r = oxzfs.zfs("get", "-H", "-o", "value", "xattr,dnodesize", f"{pool}/sadn")
    assert r.out.split() == ["sa", "auto"], repr(r)
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert "Verified large_dnode feature refcount of 1 is correct" in text, \
        "zdb did not verify the large_dnode refcount (one dataset uses 1K dnodes):\n" + \
        "\n".join(ln for ln in text.splitlines() if "refcount" in ln)
    for ds, props in DATASETS:
        text = zdb_dataset(vdir, pool, ds)
        check_znodes(text, {p: want[ds][p] for p in want[ds]}, ds, "xattr=sa" in props, "1K" if "dnodesize=auto" in props else "512")
    # oxzfs reads the pool back: content, owners, modes, links, xattrs.
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    for ds, _ in DATASETS:
        got = manifest_mod.manifest(ROOTS[ds])
        d = diff_manifests(got, mans[ds])
        assert not d, f"{pool}/{ds} after export/import differs:\n{d}"
        for p in ("f1", "d1"):
            for n, v in XATTRS.items():
                assert os.getxattr(os.path.join(ROOTS[ds], p), n) == v, f"{ds}/{p} {n} after import"
        assert all(os.readlink(os.path.join(ROOTS[ds], n)) == t for n, t in TARGETS.items())
    assert oxzfs.export(pool).returncode == 0


def test_v23_pool_keeps_zpl4_and_refuses_dnodesize(oxzfs):
    pool = "wzpl4"
    vdir, alt, root = new_pool(oxzfs, pool, "zpl4", 1, "-o", "version=23", size_mib=128)
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(b"x" * 100)
    os.symlink("y" * 40, os.path.join(root, "l"))
    r = oxzfs.zfs("set", "dnodesize=auto", pool)
    assert r.returncode != 0 and "must be upgraded" in r.stderr, repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    text = zdb_dataset(vdir, pool, "")
    assert "VERSION = 4" in text and "SA_ATTRS" not in text, "a version-23 pool must get ZPL version 4"
    zn = zdbparse.znodes(text)
    paths = zdbparse.zpl_paths(text)
    assert zn[paths["f"]]["bonus"] == "ZFS znode" and zn[paths["f"]]["size"] == "100"
