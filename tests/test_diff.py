"""`zfs diff`: the changes between two snapshots, or a snapshot and the file system now, in
OpenZFS's format (libzfs_diff.c).

The oracle is a model: each test makes known changes (edits, removals, renames, hard links,
new files and directories, a file removed and made again) and expects exactly the lines
OpenZFS's rules give for them: `M` for the directories whose entries changed and the files
written, `-` and `+`, `R old -> new`, `M path (+1)` for a file that gained a link; nothing for
files left alone. The second test diffs snapshots zfs-fuse made of changes zfs-fuse wrote
(legacy znodes on a version-23 pool).
"""
import os
import subprocess

from conftest import zfs_fuse_new_pool
from test_snapshots import pool_with_fs
from test_write import make_devs


def lines(r):
    assert r.returncode == 0, f"{r.stdout}{r.stderr}"
    return sorted(r.stdout.splitlines())


def changes(root):
    """The changes both tests make under ROOT after the first snapshot; returns what zfs diff
    must print for them, paths relative to ROOT (sorted lines, mountpoint left out)."""
    with open(os.path.join(root, "b"), "a") as f:
        f.write("more")
    os.unlink(os.path.join(root, "c"))
    os.rename(os.path.join(root, "d", "a"), os.path.join(root, "d", "a renamed"))
    os.link(os.path.join(root, "keep"), os.path.join(root, "keep2"))
    with open(os.path.join(root, "new"), "w") as f:
        f.write("new")
    os.mkdir(os.path.join(root, "e"))
    os.unlink(os.path.join(root, "again"))
    with open(os.path.join(root, "again"), "w") as f:
        f.write("again, another file")
    with open(os.path.join(root, "d", "deep", "f"), "w") as f:
        f.write("rewritten")
    # A whole dnode block's worth of files gone (on a pool without hole_birth the emptied
    # block becomes a hole of no birth, which the traversal must still visit).
    for i in range(64):
        os.unlink(os.path.join(root, "many", f"m{i}"))
    os.rmdir(os.path.join(root, "many"))
    # A file whose parent pointer names a directory that no longer holds it: ln makes the
    # root its parent, rm leaves it so; OpenZFS then finds no path for it in the later tree
    # and reports it removed from its earlier path (libzfs_diff's ENOENT side).
    os.link(os.path.join(root, "d", "deep", "g"), os.path.join(root, "g-link"))
    os.unlink(os.path.join(root, "g-link"))
    # A name that is not UTF-8.
    with open(os.path.join(root.encode(), b"caf\xe9"), "w") as f:
        f.write("latin-1 name")
    return sorted(["+\t/again", "+\t/e", "+\t/new", "-\t/again", "-\t/c", "M\t/", "M\t/b", "M\t/d", "M\t/d/deep/f",
                   "M\t/keep\t(+1)", "R\t/d/a -> /d/a\\0040renamed", "-\t/many", "+\t/caf\\0351", "-\t/d/deep/g"]
                  + [f"-\t/many/m{i}" for i in range(64)])


def populate(root):
    os.makedirs(os.path.join(root, "d", "deep"))
    for name in ("b", "c", "keep", "again", "untouched", "d/a", "d/deep/f", "d/deep/g"):
        with open(os.path.join(root, name), "w") as f:
            f.write(name)
    os.mkdir(os.path.join(root, "many"))
    for i in range(64):
        with open(os.path.join(root, "many", f"m{i}"), "w") as f:
            f.write(str(i))


def rooted(mnt, want):
    """WANT's paths under mountpoint MNT."""
    out = []
    for ln in want:
        kind, rest = ln.split("\t", 1)
        rest = rest.replace(" -> /", f" -> {mnt}/")
        out.append(f"{kind}\t{mnt}{rest}")
    return sorted(out)


def test_diff_between_snapshots_and_now(oxzfs):
    pool = "zdiff"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "zdiff", pool, 1, 256, lambda d: d)
    populate(root)
    assert oxzfs.zfs("snapshot", f"{fs}@s1").returncode == 0
    want = rooted(root, changes(root))
    assert oxzfs.zfs("snapshot", f"{fs}@s2").returncode == 0
    assert lines(oxzfs.zfs("diff", f"{fs}@s1", f"{fs}@s2")) == want
    assert lines(oxzfs.zfs("diff", f"{fs}@s1", "@s2")) == want
    # Nothing changed since s2: nothing to print; then a change not yet synced shows at once.
    assert lines(oxzfs.zfs("diff", f"{fs}@s2")) == []
    with open(os.path.join(root, "untouched"), "a") as f:
        f.write("now touched")
    assert lines(oxzfs.zfs("diff", f"{fs}@s2", fs)) == rooted(root, ["M\t/untouched"])
    # -F: the type; -H: a rename's two paths split by a tab; -t: the ctime first; -h: the
    # path as it is.
    r = oxzfs.zfs("diff", "-FH", f"{fs}@s1", f"{fs}@s2")
    got = lines(r)
    assert f"R\tF\t{root}/d/a\t{root}/d/a\\0040renamed" in got and f"+\t/\t{root}/e" in got, got
    r = oxzfs.zfs("diff", "-t", f"{fs}@s1", f"{fs}@s2")
    assert all(len(ln.split("\t")[0]) == 20 and ln.split("\t")[0][10] == "." for ln in r.stdout.splitlines()), r.stdout
    assert f"R\t{root}/d/a -> {root}/d/a renamed" in lines(oxzfs.zfs("diff", "-h", f"{fs}@s1", f"{fs}@s2"))
    for args, msg, code in (
        ((f"{fs}@s2", f"{fs}@s1"), "Unable to obtain diffs: \n   Not an earlier snapshot from the same fs\n", 1),
        ((fs,), f"Badly formed snapshot name {fs}: invalid dataset name\n", 1),
        ((f"{fs}@nosuch",), "Unable to obtain diffs: No such file or directory\n", 1),
        ((f"{pool}/nosuch@s1",), f"cannot open '{pool}/nosuch': dataset does not exist\n", 1),
        ((), None, 2),
    ):
        r = oxzfs.zfs("diff", *args)
        assert r.returncode == code and (msg is None or r.stderr == msg), repr(r)
    # A clone against its origin: the clone's changes, under the clone's mountpoint; a file
    # system that is not a clone of it is refused.
    clone = f"{pool}/clone"
    assert oxzfs.zfs("clone", f"{fs}@s1", clone).returncode == 0
    croot = os.path.join(alt, clone)
    with open(os.path.join(croot, "b"), "a") as f:
        f.write("in the clone")
    assert lines(oxzfs.zfs("diff", f"{fs}@s1", clone)) == rooted(croot, ["M\t/b"])
    assert oxzfs.zfs("create", f"{pool}/other").returncode == 0
    r = oxzfs.zfs("diff", f"{fs}@s1", f"{pool}/other")
    assert (r.returncode, r.stderr) == (1, "Not an earlier snapshot from the same fs: invalid dataset name\n"), repr(r)
    assert oxzfs.zfs("unmount", fs).returncode == 0
    r = oxzfs.zfs("diff", f"{fs}@s1")
    assert (r.returncode, r.stderr) == (1, "Cannot diff an unmounted snapshot: operation not applicable to datasets of this type\n"), repr(r)


def zf(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    assert r.returncode == 0, f"zfs-fuse {' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r


def test_diff_of_zfs_fuse_snapshots(oxzfs, work_dir):
    """Snapshots zfs-fuse made of changes zfs-fuse wrote (version 23, znodes without SA)."""
    pool = "zfdiff"
    base = os.path.join(oxzfs.base, pool)
    vdir = os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1, 256)
    zalt, alt = os.path.join(base, "zfs-fuse-alt"), os.path.join(base, "alt")
    fs = f"{pool}/fs"
    with zfs_fuse_new_pool(work_dir, zalt, pool, devs):
        zf("zfs", "create", fs)
        zroot = os.path.join(zalt, fs)
        populate(zroot)
        zf("zfs", "snapshot", f"{fs}@s1")
        want = changes(zroot)
        zf("zfs", "snapshot", f"{fs}@s2")
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, fs)
    assert lines(oxzfs.zfs("diff", f"{fs}@s1", f"{fs}@s2")) == rooted(root, want)
    assert oxzfs.export(pool).returncode == 0
