"""`zpool reguid POOL`: a new pool guid in every label and in the MOS config, and in the
uberblock's guid sum. OpenZFS's zdb is the oracle: zdb -l finds the new guid in each device's
labels, and zdb's import of the exported pool (which refuses a guid sum that does not match the
vdev tree) verifies every block. The pool is then imported by its new guid, and a degraded
pool is refused with OpenZFS's message."""
import hashlib
import os
import re
import subprocess

from test_write import make_devs, zdb_check, zdb_cmd

USAGE = "usage:\n\treguid <pool>\n"


def label_guids(dev):
    head, env = zdb_cmd()
    out = subprocess.run(head + ["-l", dev], capture_output=True, text=True, env=env).stdout
    return set(re.findall(r"^\s*pool_guid: (\d+)$", out, re.M))


def test_reguid(oxzfs):
    pool = "rguid"
    vdir = os.path.join(oxzfs.base, pool)
    d0, d1, c0 = make_devs(vdir, 3, 128)
    # The mountpoint inside the devices' directory: the reopen's look at that directory must
    # not stat it (its FUSE requests would wait for the pool the reopen holds).
    mnt = os.path.join(vdir, "mnt")
    r = oxzfs.zpool("create", "-m", mnt, pool, "mirror", d0, d1, "cache", c0)
    assert r.returncode == 0, r
    oxzfs.imported.append(pool)
    data = os.urandom(3 << 20)
    with open(os.path.join(mnt, "before"), "wb") as f:
        f.write(data)
    old = oxzfs.zpool("get", "-H", "-o", "value", "guid", pool).stdout.strip()
    r = oxzfs.zpool("reguid", pool)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    new = oxzfs.zpool("get", "-H", "-o", "value", "guid", pool).stdout.strip()
    assert new.isdigit() and new != old, (old, new)
    hist = oxzfs.zpool("history", "-i", pool).stdout
    assert f"guid change old={old} new={new}" in hist and "zpool reguid rguid" in hist, hist
    with open(os.path.join(mnt, "after"), "wb") as f:
        f.write(data[::-1])
    # Degraded: refused, nothing changed.
    assert oxzfs.zpool("offline", pool, d1).returncode == 0
    r = oxzfs.zpool("reguid", pool)
    assert (r.returncode, r.stderr) == (1, f"cannot reguid '{pool}': one or more devices is currently unavailable\n"), r
    assert oxzfs.zpool("online", pool, d1).returncode == 0
    assert oxzfs.zpool("get", "-H", "-o", "value", "guid", pool).stdout.strip() == new
    assert oxzfs.export(pool).returncode == 0
    for d in (d0, d1):
        assert label_guids(d) == {new}, (d, label_guids(d))
    zdb_check(vdir, pool)
    r = oxzfs.zpool("import", "-d", vdir, new)
    assert r.returncode == 0, r
    with open(os.path.join(mnt, "before"), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
    with open(os.path.join(mnt, "after"), "rb") as f:
        assert f.read() == data[::-1]
    for args, out in (((), (2, "missing pool name\n" + USAGE)),
                      ((pool, pool), (2, "too many arguments\n" + USAGE)),
                      (("-x", pool), (2, "invalid option 'x'\n" + USAGE)),
                      (("nosuchpool",), (1, "cannot open 'nosuchpool': no such pool\n"))):
        r = oxzfs.zpool("reguid", *args)
        assert (r.returncode, r.stderr) == out, (args, r)
    assert oxzfs.export(pool).returncode == 0
