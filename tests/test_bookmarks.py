"""Bookmarks: `zfs bookmark`, `zfs list -t bookmark`, `zfs get` of one, `zfs destroy fs#bm`, and
the incremental send from a bookmark once its snapshot is gone.

Oracles: OpenZFS's zdb decodes each bookmark we wrote (its dump of the file system lists name,
guid and creation txg, which must be what `zfs get` says) and finds no leak; libzpool's zhack
counts the bookmarks feature as OpenZFS counts it (one per file system with bookmarks);
zstream reads the stream sent from a bookmark, whose base guid is the bookmark's; and the
stream, received on top of a full stream of the bookmarked snapshot, gives the sender's files.
"""
import os
import re
import subprocess

from conftest import diff_manifests
from test_removal import feature_refcount
from test_snapshots import pool_with_fs
from test_write import zdb_check, zdb_cmd
import manifest as manifest_mod
import oracle_pools

BOOKMARK_USAGE = "usage:\n\tbookmark <snapshot|bookmark> <newbookmark>\n"


def zdb_bookmarks(vdir, fs):
    """{name: (guid, creation txg)} of the bookmarks OpenZFS's zdb -dddd shows for FS."""
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdir, "-dddd", fs], capture_output=True, text=True, errors="replace",
                       timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {m.group(1): (int(m.group(2), 16), int(m.group(3)))
            for m in re.finditer(r"^\t#(\S+): \{guid: ([0-9a-f]+) creation_txg: (\d+) ", r.stdout, re.M)}


def props(oxzfs, name, *ps):
    r = oxzfs.zfs("get", "-Hp", "-o", "value", ",".join(ps), name)
    assert r.returncode == 0, repr(r)
    return r.stdout.split()


def write(root, name, size):
    with open(os.path.join(root, name), "wb") as f:
        f.write(os.urandom(size))


def test_bookmarks_and_send_from_one(oxzfs, work_dir):
    pool = "bmk"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "bmk", pool, 1, 256, lambda d: d)
    write(root, "one", 300000)
    assert oxzfs.zfs("snapshot", f"{fs}@a").returncode == 0
    # Full names, a short source, a short bookmark, a copy of a bookmark.
    for src, new in ((f"{fs}@a", f"{fs}#a"), ("@a", f"{fs}#short"), (f"{fs}#a", "#copy")):
        r = oxzfs.zfs("bookmark", src, new)
        assert (r.returncode, r.stderr) == (0, ""), repr(r)
    cases = [
        ((f"{fs}@a", f"{fs}#a"), 1, f"cannot create bookmark '{fs}#a': bookmark exists\n"),
        ((f"{fs}@a", f"{pool}#x"), 1, f"cannot create bookmark '{pool}#x': source is not an ancestor of the new bookmark's dataset\n"),
        ((f"{fs}@nosuch", f"{fs}#x"), 2, f"cannot open '{fs}@nosuch': dataset does not exist\n" + BOOKMARK_USAGE),
        ((fs, f"{fs}#x"), 2, f"invalid source name '{fs}': must contain a '@' or '#'\n" + BOOKMARK_USAGE),
        ((f"{fs}@a", f"{fs}@x"), 2, f"invalid bookmark name '{fs}@x': must contain a '#'\n" + BOOKMARK_USAGE),
        (("@a", "#x"), 2, "either source or bookmark must be specified as full dataset paths\n" + BOOKMARK_USAGE),
        ((f"{fs}@a",), 2, "missing bookmark argument\n" + BOOKMARK_USAGE),
    ]
    for args, code, msg in cases:
        r = oxzfs.zfs("bookmark", *args)
        assert (r.returncode, r.stderr) == (code, msg), repr(r)
    # Names are matched exactly, as OpenZFS matches them in a case-sensitive file system
    # (the ZAPs fold case only for hashing): fs@A and fs#A are others than fs@a and fs#a.
    assert oxzfs.zfs("snapshot", f"{fs}@A").returncode == 0
    assert oxzfs.zfs("bookmark", f"{fs}@A", f"{fs}#A").returncode == 0
    assert props(oxzfs, f"{fs}#A", "guid") == props(oxzfs, f"{fs}@A", "guid") != props(oxzfs, f"{fs}#a", "guid")
    r = oxzfs.zfs("destroy", "-n", f"{fs}#A")
    assert (r.returncode, r.stderr) == (255, "dryrun is not supported with bookmark\n"), repr(r)
    r = oxzfs.zfs("destroy", "-nv", f"{fs}@A")
    assert r.returncode == 0 and r.stdout.startswith(f"would destroy {fs}@A\nwould reclaim "), repr(r)
    for victim in (f"{fs}#A", f"{fs}@A"):
        assert oxzfs.zfs("destroy", victim).returncode == 0
    guid, txg = props(oxzfs, f"{fs}@a", "guid", "createtxg")
    for b in ("a", "short", "copy"):
        assert props(oxzfs, f"{fs}#{b}", "type", "guid", "createtxg") == ["bookmark", guid, txg]
    r = oxzfs.zfs("list", "-H", "-o", "name,type", "-t", "all", "-r", pool)
    assert r.stdout.splitlines() == [f"{pool}\tfilesystem", f"{fs}\tfilesystem", f"{fs}@a\tsnapshot",
                                     f"{fs}#a\tbookmark", f"{fs}#copy\tbookmark", f"{fs}#short\tbookmark"], repr(r)
    r = oxzfs.zfs("list", "-H", "-o", "name", "-t", "bookmark", fs)
    assert r.stdout.split() == [f"{fs}#a", f"{fs}#copy", f"{fs}#short"], repr(r)
    # Named without -r, a file system brings its bookmarks only when they are all asked for.
    r = oxzfs.zfs("list", "-H", "-o", "name", "-t", "all", fs)
    assert r.stdout.split() == [fs], repr(r)
    r = oxzfs.zfs("get", "-H", "-o", "name", "type", fs)
    assert r.stdout.split() == [fs], repr(r)

    base = os.path.join(oxzfs.base, "bmk")
    full, incr = os.path.join(base, "full.zs"), os.path.join(base, "incr.zs")
    with open(full, "wb") as f:
        assert subprocess.run([oxzfs.binary, "zfs", "send", f"{fs}@a"], stdout=f, env=oxzfs.env).returncode == 0
    write(root, "two", 200000)
    os.unlink(os.path.join(root, "one"))
    assert oxzfs.zfs("snapshot", f"{fs}@b").returncode == 0
    r = oxzfs.zfs("destroy", f"{fs}@a")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zfs("destroy", f"{fs}#short")
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    r = oxzfs.zfs("destroy", f"{fs}#short")
    assert (r.returncode, r.stderr) == (1, f"bookmark '{fs}#short' does not exist.\n"), repr(r)
    with open(incr, "wb") as f:
        r = subprocess.run([oxzfs.binary, "zfs", "send", "-i", "#a", f"{fs}@b"], stdout=f, stderr=subprocess.PIPE,
                           env=oxzfs.env)
        assert r.returncode == 0, r.stderr
    r = subprocess.run([os.path.join(oracle_pools.OPENZFS_BIN, "zstream"), "dump", incr], capture_output=True, text=True)
    assert r.returncode == 0 and f"fromguid = {int(guid):x}" in r.stdout and "END" in r.stdout, r.stdout[-2000:] + r.stderr
    for s in (full, incr):
        with open(s, "rb") as f:
            r = subprocess.run([oxzfs.binary, "zfs", "receive", f"{pool}/copy"], stdin=f, capture_output=True,
                               text=True, env=oxzfs.env)
        assert r.returncode == 0, r.stderr
    want = manifest_mod.manifest(root)
    got = manifest_mod.manifest(os.path.join(alt, pool, "copy"))
    d = diff_manifests(got, want)
    assert not d, f"the stream sent from the bookmark gives other files:\n{d}"
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert zdb_bookmarks(vdir, fs) == {"a": (int(guid), int(txg)), "copy": (int(guid), int(txg))}
    assert feature_refcount(vdir, pool, "com.delphix:bookmarks") == 1

    # A file system's destroy takes its bookmarks; the feature's count goes with the last.
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert oxzfs.zfs("destroy", "-r", fs).returncode == 0
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@bookmarks", pool)
    assert r.stdout.strip() == "enabled", repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert feature_refcount(vdir, pool, "com.delphix:bookmarks") == 0


def test_bookmark_refused_on_version_23(oxzfs):
    pool = "bmk23"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "bmk23", pool, 1, 128, lambda d: d, "-o", "version=23")
    assert oxzfs.zfs("snapshot", f"{fs}@a").returncode == 0
    r = oxzfs.zfs("bookmark", f"{fs}@a", f"{fs}#a")
    assert (r.returncode, r.stderr) == (1, f"cannot create bookmark '{fs}#a': bookmark feature not enabled\n"), repr(r)
    assert oxzfs.export(pool).returncode == 0


def test_rollback_past_a_bookmark(oxzfs):
    """A bookmark newer than the snapshot rolled back to names a state the file system will
    not have: refused, naming it, as OpenZFS does; -r destroys it first."""
    pool = "bmkrb"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "bmkrb", pool, 1, 128, lambda d: d)
    write(root, "one", 100000)
    assert oxzfs.zfs("snapshot", f"{fs}@a").returncode == 0
    write(root, "two", 100000)
    assert oxzfs.zfs("snapshot", f"{fs}@b").returncode == 0
    assert oxzfs.zfs("bookmark", f"{fs}@b", f"{fs}#b").returncode == 0
    assert oxzfs.zfs("bookmark", f"{fs}@a", f"{fs}#a").returncode == 0
    assert oxzfs.zfs("destroy", f"{fs}@b").returncode == 0
    r = oxzfs.zfs("rollback", f"{fs}@a")
    assert (r.returncode, r.stderr) == (1, f"cannot rollback to '{fs}@a': more recent snapshots or bookmarks exist\n"
                                           f"use '-r' to force deletion of the following snapshots and bookmarks:\n{fs}#b\n"), repr(r)
    r = oxzfs.zfs("rollback", "-r", f"{fs}@a")
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    assert sorted(os.listdir(root)) == ["one"]
    r = oxzfs.zfs("list", "-H", "-o", "name", "-t", "bookmark", fs)
    assert r.stdout.split() == [f"{fs}#a"], repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
