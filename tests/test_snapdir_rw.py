"""`.zfs/snapshot` on a read-write mount: snapshots taken while mounted appear, their files keep
the content of the moment (the model) while the live file system changes, nothing in them can
be changed (EROFS), and a destroyed snapshot goes away; zdb is clean after."""
import errno
import os
import time

import pytest

from test_write import new_pool, zdb_check


def tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def test_snapdir_on_rw_mount(oxzfs):
    pool = "sdrw"
    vdir, alt, root = new_pool(oxzfs, pool, "sdrw", 1, size_mib=256)
    assert oxzfs.zfs("create", f"{pool}/fs").returncode == 0
    fs = os.path.join(root, "fs")
    models = {}
    for rnd, name in enumerate(["first", "second", "third"]):
        os.makedirs(os.path.join(fs, f"d{rnd}"), exist_ok=True)
        for i in range(5):
            with open(os.path.join(fs, f"d{rnd}", f"f{i}"), "wb") as f:
                f.write(os.urandom(1000 * (i + 1) + rnd))
        with open(os.path.join(fs, "common"), "wb") as f:
            f.write(os.urandom(70000))
        r = oxzfs.zfs("snapshot", f"{pool}/fs@{name}")
        assert r.returncode == 0, repr(r)
        models[name] = tree(fs)
    # The live file system moves on.
    os.unlink(os.path.join(fs, "common"))
    with open(os.path.join(fs, "d0", "f0"), "r+b") as f:
        f.write(b"changed")
    snapdir = os.path.join(fs, ".zfs", "snapshot")
    assert sorted(os.listdir(snapdir)) == sorted(models)
    assert ".zfs" not in os.listdir(fs)  # snapdir=hidden, as by default
    for name, model in models.items():
        assert tree(os.path.join(snapdir, name)) == model, name
    # Read-only, whatever the permissions say.
    for op in (lambda: open(os.path.join(snapdir, "first", "common"), "r+b"),
               lambda: open(os.path.join(snapdir, "first", "new"), "wb"),
               lambda: os.mkdir(os.path.join(snapdir, "first", "dd")),
               lambda: os.unlink(os.path.join(snapdir, "first", "common"))):
        with pytest.raises(OSError) as e:
            op()
        assert e.value.errno == errno.EROFS
    # Destroyed: gone from the listing at once, from lookups once the kernel's entry expires.
    assert oxzfs.zfs("destroy", f"{pool}/fs@second").returncode == 0
    assert sorted(os.listdir(snapdir)) == ["first", "third"]
    time.sleep(1.5)
    assert not os.path.exists(os.path.join(snapdir, "second"))
    assert tree(os.path.join(snapdir, "third")) == models["third"]
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_snapdir_visible_on_rw_mount(oxzfs):
    """snapdir=visible on a read-write mount: `.zfs` is listed in the root (readdirplus gives
    it the control directory's attributes) and leads to the snapshots, whose files read back;
    elsewhere it stays out of listings. The listing runs on a thread, so that a mount that
    stops answering fails the test instead of stalling the run."""
    import threading
    pool = "sdvis"
    vdir, alt, root = new_pool(oxzfs, pool, "sdvis", 1, size_mib=256)
    assert oxzfs.zfs("create", "-o", "snapdir=visible", f"{pool}/fs").returncode == 0
    fs = os.path.join(root, "fs")
    os.mkdir(os.path.join(fs, "d"))
    with open(os.path.join(fs, "d", "f"), "wb") as f:
        f.write(b"snap me")
    assert oxzfs.zfs("snapshot", f"{pool}/fs@s1").returncode == 0
    out = {}

    def walk():
        out["root"] = sorted(e.name for e in os.scandir(fs))
        out["zfs"] = os.lstat(os.path.join(fs, ".zfs"))
        out["snaps"] = sorted(os.listdir(os.path.join(fs, ".zfs", "snapshot")))
        out["sub"] = sorted(os.listdir(os.path.join(fs, "d")))
        with open(os.path.join(fs, ".zfs", "snapshot", "s1", "d", "f"), "rb") as f:
            out["data"] = f.read()

    t = threading.Thread(target=walk, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "listing the root of a snapdir=visible mount did not finish in 60 s"
    assert out["root"] == [".zfs", "d"], out
    assert (out["zfs"].st_mode & 0o170000, out["zfs"].st_mode & 0o777) == (0o040000, 0o555), out
    assert out["snaps"] == ["s1"] and out["sub"] == ["f"] and out["data"] == b"snap me", out
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
