"""Writes into case-insensitive and normalized file systems of other ZFS implementations.

A directory of such a file system (casesensitivity=insensitive or mixed, normalization=form*)
is a ZAP whose names are hashed in their normalized form: the upper-cased name for case
folding. A fat ZAP (thousands of entries, or a name of 50 bytes or more) stores those hashes,
and the other implementation finds an entry by them. zfs-fuse makes such file systems (pool
version 23); oxzfs fills a directory of each past the micro ZAP and makes new directories in
them, names beyond ASCII among them; zfs-fuse then finds every file under its own name and
under the name in upper case (or in another normalization form), and reads it. oxzfs refuses
a second name of one normalized form, as OpenZFS's case-insensitive lookups see one name.
(test_names.py: lookups, removals and renames under another case, and the properties.)
"""
import os
import subprocess

import pytest

from conftest import zfs_fuse_imported, zfs_fuse_new_pool
from test_write import make_devs, zdb_check


def zf(*a):
    r = subprocess.run(list(a), capture_output=True, text=True)
    assert r.returncode == 0, f"zfs-fuse {' '.join(a)}:\n{r.stdout}{r.stderr}"
    return r


def names(n, prefix):
    # 60 bytes: longer than a micro ZAP entry holds, so the directory is a fat ZAP at once.
    return [f"{prefix}-{i:05d}-".ljust(60, "x") for i in range(n)]


@pytest.mark.parametrize("props", [("casesensitivity=insensitive",), ("casesensitivity=mixed", "normalization=formD")],
                         ids=["insensitive", "mixed-formD"])
def test_normalized_directories_cross_with_zfs_fuse(props, oxzfs, work_dir):
    tag = props[0].split("=")[1]
    pool = f"norm{tag[:3]}"
    base = os.path.join(oxzfs.base, pool)
    vdir = os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1, 256)
    zalt, alt = os.path.join(base, "zfs-fuse-alt"), os.path.join(base, "alt")
    fs = f"{pool}/ci"
    with zfs_fuse_new_pool(work_dir, zalt, pool, devs):
        args = [x for p in props for x in ("-o", p)]
        zf("zfs", "create", *args, fs)
        d = os.path.join(zalt, fs, "d")
        os.mkdir(d)
        for n in names(20, "zf"):
            with open(os.path.join(d, n), "w") as f:
                f.write(n)

    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, fs)
    ours = names(1500, "ox")
    for n in ours:
        with open(os.path.join(root, "d", n), "w") as f:
            f.write(n)
    os.mkdir(os.path.join(root, "sub"))
    for n in names(300, "sub"):
        with open(os.path.join(root, "sub", n), "w") as f:
            f.write(n)
    # Case-insensitive: one normalized form, one name (mixed: names differing in case are two,
    # as OpenZFS's case-sensitive lookups there find them).
    if tag == "insensitive":
        with pytest.raises(FileExistsError):
            os.open(os.path.join(root, "d", ours[0].upper()), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    else:
        with open(os.path.join(root, "d", ours[0].upper()), "w") as f:
            f.write(ours[0].upper())
        ours.insert(1, ours[0].upper())
    # Names beyond ASCII, hashed by their normalized forms as u8_textprep makes them.
    beyond = ["caf\u00e9", "\u00dcnic\u00f8de-".ljust(60, "x")]
    for n in beyond:
        with open(os.path.join(root, "d", n), "w") as f:
            f.write(n)
    ours[1:1] = beyond
    os.rename(os.path.join(root, "d", ours[-1]), os.path.join(root, "d", "renamed-" + ours[-1]))
    ours[-1] = "renamed-" + ours[-1]
    os.unlink(os.path.join(root, "d", ours[-2]))
    del ours[-2]
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)

    with zfs_fuse_imported(work_dir, vdir, zalt, pool):
        zroot = os.path.join(zalt, fs)
        want = sorted(names(20, "zf") + ours)
        assert sorted(os.listdir(os.path.join(zroot, "d"))) == want
        # Every name found by its hash (of the upper-cased name, in both file systems), as
        # written and, where the file system is case-insensitive, in upper case.
        insensitive = tag == "insensitive"
        for n in want[::7] + ours[-3:]:
            for spelled in (n, n.upper()) if insensitive else (n,):
                with open(os.path.join(zroot, "d", spelled)) as f:
                    assert f.read() == n.removeprefix("renamed-"), spelled
        for n in beyond:
            # Found by the hash of the normalized form (zfs-fuse's lookups in a mixed file
            # system match the name exactly, zfs_dirent_lock's MT_EXACT of its day; OpenZFS
            # 2.x's and oxzfs's match the normalized form, which test_names.py checks).
            spelled = n.upper() if insensitive else n
            with open(os.path.join(zroot, "d", spelled)) as f:
                assert f.read() == n, spelled
        for n in names(300, "sub")[::11]:
            with open(os.path.join(zroot, "sub", n.upper() if insensitive else n)) as f:
                assert f.read() == n
        if insensitive:
            # zfs-fuse refuses a second name of one form in the directory oxzfs made.
            with pytest.raises(FileExistsError):
                os.open(os.path.join(zroot, "sub", names(1, "sub")[0].upper()), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with open(os.path.join(zroot, "sub", "by-zfs-fuse"), "w") as f:
            f.write("z")
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    with open(os.path.join(root, "sub", "by-zfs-fuse")) as f:
        assert f.read() == "z"
    assert len(os.listdir(os.path.join(root, "sub"))) == 301
    assert oxzfs.export(pool).returncode == 0
