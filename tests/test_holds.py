"""User holds (`zfs hold`, `zfs release`, `zfs holds`) and deferred destroy (`zfs destroy -d`).

The oracle is zfs-fuse (pool version 23 has holds, version 18 on): it imports a pool oxzfs held
and marked, counts the same holds and deferred destroys (`zfs get userrefs,defer_destroy`),
refuses to destroy what we held, and destroys a snapshot oxzfs marked when zfs-fuse releases its
last hold; oxzfs then reads zfs-fuse's own hold, and its release and a clone's destroy take the
last snapshots. OpenZFS's zdb checks every pool for leaks; the messages are OpenZFS's.
"""
import os
import re
import subprocess

from conftest import zfs_fuse_imported
from test_snapshots import pool_with_fs
from test_write import zdb_check


def marks(get, names):
    """{snapshot: (userrefs, defer_destroy)} through GET (a `zfs get` runner)."""
    r = get("get", "-H", "-o", "name,property,value", "userrefs,defer_destroy", *names)
    assert r.returncode == 0, f"zfs get:\n{r.stdout}{r.stderr}"
    out = {}
    for line in r.stdout.splitlines():
        n, p, v = line.split("\t")
        out.setdefault(n, {})[p] = v
    return {n: (int(v["userrefs"]), v["defer_destroy"]) for n, v in out.items()}


def snapshots(run, pool):
    r = run("list", "-H", "-o", "name", "-t", "snapshot", "-r", pool)
    assert r.returncode == 0, f"zfs list:\n{r.stdout}{r.stderr}"
    return sorted(r.stdout.split())


def zfs_fuse(*a):
    return subprocess.run(["zfs", *a], capture_output=True, text=True)


def test_holds_cross_with_zfs_fuse(oxzfs, work_dir):
    pool = "hold23"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "hold23", pool, 1, 256, lambda d: d, "-o", "version=23")
    child = f"{fs}/child"
    assert oxzfs.zfs("create", child).returncode == 0
    for s in ("a", "b", "c"):
        with open(os.path.join(root, s), "wb") as f:
            f.write(os.urandom(200000))
        assert oxzfs.zfs("snapshot", "-r", f"{fs}@{s}").returncode == 0
    clone = f"{pool}/clone"
    assert oxzfs.zfs("clone", f"{fs}@c", clone).returncode == 0
    for args in (("hold", "-r", "t1", f"{fs}@a"), ("hold", "t2", f"{fs}@a", f"{fs}@b")):
        r = oxzfs.zfs(*args)
        assert (r.returncode, r.stderr) == (0, ""), repr(r)
    # Refusals, in OpenZFS's words; nothing changes.
    cases = [
        (("hold", "t2", f"{fs}@b"), 1, f"cannot hold snapshot '{fs}@b': tag already exists on this dataset\n"),
        (("hold", "t3", f"{fs}@nosuch"), 1, f"cannot hold snapshot '{fs}@nosuch': dataset does not exist\n"),
        (("hold", "t3", fs), 1, f"'{fs}' is not a snapshot\n"),
        (("hold", ".t", f"{fs}@a"), 2, "tag may not start with '.'\nusage:\n\thold [-r] <tag> <snapshot> ...\n"),
        (("release", "t9", f"{fs}@a"), 1, f"cannot release hold from snapshot '{fs}@a': no such tag on this dataset\n"),
        (("destroy", f"{fs}@a"), 1, f"cannot destroy snapshot {fs}@a: dataset is busy\n"),
        (("destroy", "-r", fs), 1, f"cannot destroy snapshot {child}@a: dataset is busy\n"),
        (("holds", fs), 1, f"'{fs}' is not a snapshot\nno datasets available\n"),
    ]
    for args, code, msg in cases:
        r = oxzfs.zfs(*args)
        assert (r.returncode, r.stderr) == (code, msg), repr(r)
    # A recursive release takes the tag where it is and leaves the snapshots without it.
    assert oxzfs.zfs("hold", "t4", f"{fs}@a").returncode == 0
    r = oxzfs.zfs("release", "-r", "t4", f"{fs}@a")
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    r = oxzfs.zfs("release", "-r", "t4", f"{fs}@a")
    assert (r.returncode, r.stderr) == (1, f"cannot release hold from snapshot '{fs}@a': no such tag on this dataset\n"), repr(r)
    # holds: the header's columns as wide as the longest name and tag; -H -p tab-separated
    # with the time in seconds; -r takes the snapshot of that name below.
    r = oxzfs.zfs("holds", f"{fs}@a", f"{fs}@c")
    lines = r.stdout.splitlines()
    w = len(f"{fs}@a")
    assert r.returncode == 0 and lines[0] == f"{'NAME':<{w}}  TAG  TIMESTAMP", repr(r)
    assert [ln[:w + 6] for ln in lines[1:]] == [f"{fs}@a  t1  ", f"{fs}@a  t2  "], repr(r)
    assert all(re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d \d{4}", ln[w + 6:]) for ln in lines[1:]), repr(r)
    r = oxzfs.zfs("holds", "-rHp", f"{fs}@a")
    rows = [ln.split("\t") for ln in r.stdout.splitlines()]
    assert [x[:2] for x in rows] == [[f"{fs}@a", "t1"], [f"{fs}@a", "t2"], [f"{child}@a", "t1"]], repr(r)
    assert all(x[2].isdigit() for x in rows), repr(r)
    # Deferred destroys: b (held) and c (a clone's origin) are marked; a snapshot nothing keeps
    # goes at once.
    for s in ("b", "c"):
        r = oxzfs.zfs("destroy", "-d", f"{fs}@{s}")
        assert (r.returncode, r.stderr) == (0, ""), repr(r)
    assert oxzfs.zfs("destroy", "-d", f"{child}@b").returncode == 0
    want = {f"{fs}@a": (2, "off"), f"{fs}@b": (1, "on"), f"{fs}@c": (0, "on"), f"{child}@a": (1, "off"),
            f"{child}@c": (0, "off")}
    assert marks(oxzfs.zfs, list(want)) == want
    assert snapshots(oxzfs.zfs, pool) == sorted(want)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)

    zalt = os.path.join(oxzfs.base, "hold23", "zfs-fuse-alt")
    with zfs_fuse_imported(work_dir, vdir, zalt, pool):
        assert marks(zfs_fuse, list(want)) == want, "zfs-fuse counts our holds and marks otherwise"
        r = zfs_fuse("destroy", f"{fs}@a")
        assert r.returncode != 0 and "busy" in r.stderr, f"zfs-fuse destroyed a held snapshot:\n{r.stderr}"
        # zfs-fuse's release of our last hold on b takes b, which we marked.
        r = zfs_fuse("release", "t2", f"{fs}@b")
        assert r.returncode == 0, f"zfs-fuse release:\n{r.stderr}"
        r = zfs_fuse("hold", "zf", f"{child}@c")
        assert r.returncode == 0, f"zfs-fuse hold:\n{r.stderr}"
        assert snapshots(zfs_fuse, pool) == sorted(set(want) - {f"{fs}@b"})
    zdb_check(vdir, pool)

    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    r = oxzfs.zfs("holds", "-H", f"{child}@c")
    assert [ln.split("\t")[:2] for ln in r.stdout.splitlines()] == [[f"{child}@c", "zf"]], repr(r)
    for args in (("release", "-r", "t1", f"{fs}@a"), ("release", "t2", f"{fs}@a"), ("release", "zf", f"{child}@c")):
        r = oxzfs.zfs(*args)
        assert (r.returncode, r.stderr) == (0, ""), repr(r)
    assert marks(oxzfs.zfs, [f"{fs}@a", f"{child}@a"]) == {f"{fs}@a": (0, "off"), f"{child}@a": (0, "off")}
    # The clone's destroy takes its origin, marked for deferred destroy.
    assert oxzfs.zfs("destroy", clone).returncode == 0
    assert snapshots(oxzfs.zfs, pool) == sorted([f"{fs}@a", f"{child}@a", f"{child}@c"])
    r = oxzfs.zfs("destroy", "-r", fs)
    assert r.returncode == 0, repr(r)
    assert snapshots(oxzfs.zfs, pool) == []
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_holds_v5000_and_read_only(oxzfs):
    """On a version-5000 pool: hold, deferred destroy, release; zdb clean with a hold in place;
    a read-only import lists the holds and refuses hold and release."""
    pool = "hold5k"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "hold5k", pool, 1, 256, lambda d: d)
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(os.urandom(300000))
    assert oxzfs.zfs("snapshot", f"{fs}@s").returncode == 0
    os.unlink(os.path.join(root, "f"))
    assert oxzfs.zfs("hold", "keep", f"{fs}@s").returncode == 0
    assert oxzfs.zfs("destroy", "-d", f"{fs}@s").returncode == 0
    assert marks(oxzfs.zfs, [f"{fs}@s"]) == {f"{fs}@s": (1, "on")}
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    r = oxzfs.zfs("holds", "-H", f"{fs}@s")
    assert r.stdout.split("\t")[:2] == [f"{fs}@s", "keep"], repr(r)
    for verb in ("hold", "release"):
        r = oxzfs.zfs(verb, "keep", f"{fs}@s")
        assert r.returncode == 1 and f"cannot {verb} '{fs}': pool is read-only\n" == r.stderr, repr(r)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    used = lambda: int(oxzfs.zfs("get", "-Hp", "-o", "value", "usedbysnapshots", fs).stdout)  # noqa: E731
    assert used() > 250000
    assert oxzfs.zfs("release", "keep", f"{fs}@s").returncode == 0
    assert snapshots(oxzfs.zfs, pool) == [] and used() == 0
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
