"""`zpool labelclear [-f] <vdev>`: OpenZFS's zdb -l is the oracle (it finds the four labels of
a pool device before, none after), and neither oxzfs's nor zfs-fuse's import finds the pool
again. A device of an imported pool, or of an exported one without -f, is left as it was,
with OpenZFS's messages."""
import os
import subprocess

from test_write import make_devs, zdb_cmd


def zdb_labels(dev):
    """How many of DEV's four labels OpenZFS's zdb -l unpacks."""
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-l", dev], capture_output=True, text=True, env=env)
    text = r.stdout + r.stderr
    return 4 - text.count("failed to unpack label")


def test_labelclear(oxzfs):
    base = os.path.join(oxzfs.base, "lclear")
    vdir = os.path.join(base, "vdevs")
    d0, c0 = make_devs(vdir, 2, 128)
    alt = os.path.join(base, "alt")
    r = oxzfs.zpool("create", "-R", alt, "lclear", d0, "cache", c0)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("lclear")
    assert zdb_labels(d0) == 4 and zdb_labels(c0) == 4
    for args, msg in (((d0,), f'{d0} is a member (ACTIVE) of pool "lclear"\n'),
                      (("-f", d0), f'{d0} is a member (ACTIVE) of pool "lclear". Offline the disk first to clear its label.\n')):
        r = oxzfs.zpool("labelclear", *args)
        assert (r.returncode, r.stderr) == (1, msg), repr(r)
    assert oxzfs.export("lclear").returncode == 0
    r = oxzfs.zpool("labelclear", d0)
    assert (r.returncode, r.stderr) == (1, f'use \'-f\' to override the following error:\n{d0} is a member of exported pool "lclear"\n'), repr(r)
    assert zdb_labels(d0) == 4
    for dev in (d0, c0):
        r = oxzfs.zpool("labelclear", "-f", dev)
        assert (r.returncode, r.stderr) == (0, ""), repr(r)
        assert zdb_labels(dev) == 0
    r = oxzfs.zpool("import", "-d", vdir)
    assert "lclear" not in r.stdout, repr(r)
    r = oxzfs.zpool("labelclear", d0)
    assert (r.returncode, r.stderr) == (1, f"failed to read label from {d0}\n"), repr(r)
    r = oxzfs.zpool("labelclear", os.path.join(base, "nosuch"))
    assert (r.returncode, r.stderr) == (1, f"failed to open {os.path.join(base, 'nosuch')}: No such file or directory\n"), repr(r)
    # The device is whole again for a new pool.
    r = oxzfs.zpool("create", "-R", alt, "lclear2", d0)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("lclear2")
    assert oxzfs.export("lclear2").returncode == 0
