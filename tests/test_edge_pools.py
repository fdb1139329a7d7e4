"""Pools at the edges of what zpool accepts: two pools of one name, repeated export/import with
writes in between, uneven devices, the minimum device size with ashift=13, and wrong command lines
for every verb (usage or OpenZFS's message, a non-zero exit, never a panic or a hang)."""
import os
import subprocess

import pytest

from test_write import ZDB, make_devs, new_pool, zdb_check


def test_import_by_id_refuses_a_name_already_imported(oxzfs):
    """Importing by numeric id a pool whose name an imported pool already has is refused (OpenZFS:
    'pool already exists'); it used to replace the imported pool in the daemon's table, dropping its
    mounts. By name, the refusal carries OpenZFS's hint."""
    base = os.path.join(oxzfs.base, "dupname")
    va, vb = os.path.join(base, "a"), os.path.join(base, "b")
    alt_a, alt_b = os.path.join(base, "alt-a"), os.path.join(base, "alt-b")
    da, db = make_devs(va, 1), make_devs(vb, 1)
    assert oxzfs.zpool("create", "-R", alt_a, "twin", *da).returncode == 0
    with open(os.path.join(alt_a, "twin", "first"), "w") as f:
        f.write("first pool")
    guid_a = oxzfs.zpool("get", "-H", "-o", "value", "guid", "twin").stdout.strip()
    assert oxzfs.export("twin").returncode == 0
    assert oxzfs.zpool("create", "-R", alt_b, "twin", *db).returncode == 0
    oxzfs.imported.append("twin")
    r = oxzfs.zpool("import", "-d", va, "-R", alt_a, "twin")
    assert r.returncode == 1, repr(r)
    assert r.stderr.splitlines() == ["cannot import 'twin': a pool with that name already exists",
                                     "use the form 'zpool import <pool | id> <newpool>' to give it a new name"], repr(r)
    r = oxzfs.zpool("import", "-d", va, "-R", alt_a, guid_a)
    assert r.returncode == 1 and r.stderr.strip() == "cannot import 'twin': pool already exists", repr(r)
    # The imported pool is still the second one, mounted and writable.
    r = oxzfs.zpool("get", "-H", "-o", "value", "guid", "twin")
    assert r.stdout.strip() != guid_a, repr(r)
    with open(os.path.join(alt_b, "twin", "second"), "w") as f:
        f.write("second pool")
    assert oxzfs.export("twin").returncode == 0
    zdb_check(vb, "twin")
    zdb_check(va, "twin")


def test_export_import_cycles_with_writes(oxzfs):
    """Writes, overwrites, truncates, deletes and xattrs between export/import cycles: every
    exported state is zdb-clean and reads back."""
    vdir = os.path.join(oxzfs.base, "cycles", "vdevs")
    alt = os.path.join(oxzfs.base, "cycles", "alt")
    devs = make_devs(vdir, 3, 128)
    r = oxzfs.zpool("create", "-o", "ashift=12", "-O", "compression=lz4", "-R", alt, "cyc", "raidz1", *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("cyc")
    root = os.path.join(alt, "cyc")
    want = {}
    for i in range(1, 6):
        data = os.urandom(70000 * i)
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(data)
        os.setxattr(os.path.join(root, f"f{i}"), "user.k", b"v" * (i * 300))
        want[f"f{i}"] = data
        if i > 1:
            os.truncate(os.path.join(root, f"f{i - 1}"), 5000)
            want[f"f{i - 1}"] = want[f"f{i - 1}"][:5000]
        if i > 2:
            os.unlink(os.path.join(root, f"f{i - 2}"))
            del want[f"f{i - 2}"]
        assert oxzfs.export("cyc").returncode == 0
        zdb_check(vdir, "cyc")
        r = oxzfs.zpool("import", "-d", vdir, "-R", alt, "cyc")
        assert r.returncode == 0, repr(r)
        oxzfs.imported.append("cyc")
        assert sorted(os.listdir(root)) == sorted(want), (i, os.listdir(root))
        for name, data in want.items():
            with open(os.path.join(root, name), "rb") as f:
                assert f.read() == data, (i, name)
    assert oxzfs.export("cyc").returncode == 0


def test_uneven_devices_and_minimum_size_with_ashift13(oxzfs):
    """A stripe of 64, 128 and 300 MiB devices and a single 64 MiB (minimum) device at ashift=13,
    each filled to ENOSPC, emptied and zdb-clean; 63 MiB is refused as OpenZFS refuses it."""
    base = os.path.join(oxzfs.base, "uneven")
    vdir = os.path.join(base, "vdevs")
    os.makedirs(vdir, exist_ok=True)
    sizes = {"u0": 64, "u1": 128, "u2": 300, "m0": 64, "small": 63}
    for n, mib in sizes.items():
        with open(os.path.join(vdir, n), "wb") as f:
            f.truncate(mib << 20)
    r = oxzfs.zpool("create", "-R", base, "toosmall", os.path.join(vdir, "small"))
    assert r.returncode == 1 and "less than the minimum size (64M)" in r.stderr, repr(r)
    for pool, args in (("uneven", ["u0", "u1", "u2"]), ("minimum", ["-o", "ashift=13", "m0"])):
        spec = [os.path.join(vdir, a) if a[0] in "um" else a for a in args]
        r = oxzfs.zpool("create", "-R", base, pool, *spec)
        assert r.returncode == 0, repr(r)
        oxzfs.imported.append(pool)
        root = os.path.join(base, pool)
        n = 0
        with pytest.raises(OSError) as ei:
            while n < 4096:
                with open(os.path.join(root, f"f{n}"), "wb") as f:
                    f.write(os.urandom(1 << 20))
                n += 1
        assert ei.value.errno == 28 and n > 0, (pool, n, ei.value)
        for k in range(n):
            os.unlink(os.path.join(root, f"f{k}"))
        with open(os.path.join(root, "after"), "wb") as f:
            f.write(os.urandom(1 << 20))
        vdevs = [os.path.join(vdir, a) for a in args if a[0] in "um"]
        assert oxzfs.export(pool).returncode == 0
        only = os.path.join(base, pool + "-devs")
        os.makedirs(only, exist_ok=True)
        for v in vdevs:
            os.link(v, os.path.join(only, os.path.basename(v)))
        zdb_check(only, pool)


ZPOOL_VERBS = ["create", "destroy", "import", "export", "list", "status", "get", "set", "add", "iostat", "history",
               "scrub", "remove", "attach", "detach", "replace", "online", "offline", "clear", "upgrade", "labelclear",
               "split", "reguid", "initialize", "trim", "checkpoint", "wait", "sync", "events"]
ZFS_VERBS = ["create", "destroy", "snapshot", "rollback", "clone", "promote", "rename", "list", "set", "get",
             "inherit", "mount", "unmount", "share", "send", "receive", "diff", "hold", "release", "userspace",
             "groupspace", "projectspace", "project", "upgrade", "bookmark", "allow"]


@pytest.mark.parametrize("tool,verbs", [("zpool", ZPOOL_VERBS), ("zfs", ZFS_VERBS)])
def test_every_verb_with_wrong_arguments(tool, verbs, oxzfs):
    """Missing, unknown and invalid arguments: a non-zero exit with a message (2 with a usage for
    an unknown option), never a panic or a hang (the runner asserts both)."""
    for verb in verbs:
        for args in ([], ["-Q"], ["nosuchpool/nosuch", "extra", "args", "x=y"], ["-o", "bogus=1", "p"], ["", ""]):
            r = oxzfs.run(tool, verb, *args, timeout=60)
            if args == [] and (tool, verb) in (("zpool", "list"), ("zpool", "status"), ("zpool", "history"), ("zpool", "upgrade"),
                                               ("zpool", "sync"), ("zfs", "list"), ("zfs", "mount")):
                assert r.returncode == 0, repr(r)  # list (or sync) everything (there is nothing)
                continue
            assert r.returncode != 0 and r.stderr.strip(), repr(r)
            if args == ["-Q"]:
                assert r.returncode == 2 and "usage" in r.stderr, repr(r)


def test_directory_outgrows_the_embedded_zap_pointer_table(oxzfs):
    """48000 entries with 255-byte names need more than the 1024 leaves a 16K fat ZAP's embedded
    pointer table names: the table moves to its own block (zt_numblks 1, zt_shift 11) as
    zap_grow_ptrtbl moves it. The sync used to fail on an assertion, suspending the pool."""
    import re
    pool = "fatdir"
    vdir, alt = os.path.join(oxzfs.base, "fatdir", "vdevs"), os.path.join(oxzfs.base, "fatdir", "alt")
    devs = make_devs(vdir, 1, 512)
    assert oxzfs.zpool("create", "-R", alt, pool, *devs).returncode == 0
    oxzfs.imported.append(pool)
    d = os.path.join(alt, pool, "dir")
    os.mkdir(d)
    names = [f"{k:06d}".ljust(255, "n") for k in range(60000)]
    for n in names:
        os.close(os.open(os.path.join(d, n), os.O_CREAT | os.O_WRONLY, 0o644))
    for n in names[::5]:
        os.unlink(os.path.join(d, n))
    want = sorted(set(names) - set(names[::5]))
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddd", f"{pool}/"], capture_output=True, text=True, errors="replace")
    assert r.returncode == 0, r.stderr
    sections = [sec for sec in r.stdout.split("Fat ZAP stats:")[1:] if re.search(r"ZAP entries: %d\n" % len(want), sec)]
    assert len(sections) == 1, r.stdout[-3000:]
    numblks, shift = (int(re.search(k + r": (\d+)", sections[0]).group(1)) for k in ("zt_numblks", "zt_shift"))
    assert numblks >= 1 and shift >= 11, sections[0][:600]
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    assert sorted(os.listdir(d)) == want
    for n in want[::97]:
        assert os.path.exists(os.path.join(d, n))
    assert oxzfs.export(pool).returncode == 0


def test_zfs_destroy_refusals_and_small_blocks_check(oxzfs):
    """zfs destroy of the pool's root file system, and of a file system with children without
    -r, are refused with OpenZFS's messages (they used to fail unmounting, 'busy'); -r on the pool
    takes every descendant and leaves the root. special_small_blocks must be 0 or a power of 2."""
    base = os.path.join(oxzfs.base, "destroy")
    vdir = os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1)
    assert oxzfs.zpool("create", "-R", base, "dz", *devs).returncode == 0
    oxzfs.imported.append("dz")
    r = oxzfs.zfs("create", "-o", "special_small_blocks=3000", "dz/x")
    assert r.returncode == 1 and r.stderr == ("cannot create 'dz/x': invalid 'special_small_blocks=3000' property: "
                                              "must be zero or a power of 2 from 512B to 16M\n"), repr(r)
    for ds in ("dz/x", "dz/x/y", "dz/x/z"):
        assert oxzfs.zfs("create", ds).returncode == 0
    r = oxzfs.zfs("destroy", "dz")
    assert r.returncode == 1 and r.stderr == ("cannot destroy 'dz': operation does not apply to pools\n"
                                              "use 'zfs destroy -r dz' to destroy all datasets in the pool\n"
                                              "use 'zpool destroy dz' to destroy the pool itself\n"), repr(r)
    r = oxzfs.zfs("destroy", "dz/x")
    assert r.returncode == 1 and r.stderr.splitlines()[:2] == [
        "cannot destroy 'dz/x': filesystem has children", "use '-r' to destroy the following datasets:"], repr(r)
    assert sorted(r.stderr.splitlines()[2:]) == ["dz/x/y", "dz/x/z"], repr(r)
    assert oxzfs.zfs("list", "-H", "-o", "name").stdout.split() == ["dz", "dz/x", "dz/x/y", "dz/x/z"]
    r = oxzfs.zfs("destroy", "-r", "dz")
    assert r.returncode == 0, repr(r)
    assert oxzfs.zfs("list", "-H", "-o", "name").stdout.split() == ["dz"]
    assert oxzfs.export("dz").returncode == 0
    zdb_check(vdir, "dz")


def test_pool_name_length_limit(oxzfs):
    """pool_namecheck: a pool name leaves room for '/$ORIGIN@$ORIGIN' in 256 bytes, so 240 bytes
    is too long and 239 is accepted."""
    base = os.path.join(oxzfs.base, "longname")
    devs = make_devs(os.path.join(base, "vdevs"), 1, 64)
    r = oxzfs.zpool("create", "-n", "p" * 240, *devs)
    assert r.returncode == 1 and r.stderr.strip() == f"cannot create '{'p' * 240}': name is too long", repr(r)
    r = oxzfs.zpool("create", "-n", "p" * 239, *devs)
    assert r.returncode == 0, repr(r)


def test_forced_export_while_a_file_is_held_open(oxzfs):
    """`zpool export` of a mount a process holds a file open on is refused (busy); `zpool
    export -f` detaches it and aborts its FUSE connection at once (the holder's next write
    fails with ENOTCONN), instead of waiting for the holder to close; what was written before
    is in the pool when it is imported again."""
    import errno
    pool = "heldopen"
    vdir, alt, root = new_pool(oxzfs, pool, "heldopen", 1, size_mib=128)
    fd = os.open(os.path.join(root, "held"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"kept")
        os.fsync(fd)
        r = oxzfs.zpool("export", pool)
        assert (r.returncode, r.stderr) == (1, f"cannot unmount '{root}': pool or dataset is busy\ncannot export '{pool}': pool is busy\n"), repr(r)
        r = oxzfs.run("zpool", "export", "-f", pool, timeout=60)
        assert (r.returncode, r.stderr) == (0, ""), repr(r)
        oxzfs.imported.remove(pool)
        try:
            os.write(fd, b"late")
            raise AssertionError("a write through an aborted mount succeeded")
        except OSError as e:
            assert e.errno == errno.ENOTCONN
    finally:
        os.close(fd)
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    with open(os.path.join(root, "held"), "rb") as f:
        assert f.read() == b"kept"
    assert oxzfs.export(pool).returncode == 0
