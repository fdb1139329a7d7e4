"""Pool properties of the write path and statfs, judged by OpenZFS's own tools:

- `cachefile`: the file OpenZFS's zdb reads with `-U FILE -C` (and opens the pool from, without
  -e), rewritten on create/set/add/import, the entry gone on export and the file with its last
  pool; `zpool import -c FILE` imports from it; oxzfs's decoder prints it as zdb does.
- `ashift`: `zpool create -o ashift=12` leaves ashift=12 in the MOS pool_props ZAP (zdb -dddd).
- statfs of a mount: what zfs_statvfs reports from `zfs get -p available,referenced,recordsize`
  and the objset's object count (zdb -d's "N objects")."""
import os
import re
import shutil
import subprocess

import oracle_pools
from test_write import make_devs, new_pool, zdb_check

ZDB = oracle_pools.ZDB
M = 1 << 20


def zdb_cachefile(path):
    """OpenZFS's `zdb -U PATH -C`: the cache file's pools as text, and {pool: {key: value}}."""
    r = subprocess.run([ZDB, "-U", path, "-C"], capture_output=True, text=True, errors="replace", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    pools, cur = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"^(\S+):$", line)
        if m:
            cur = pools.setdefault(m.group(1), {})
            continue
        m = re.match(r"^    (\S+): (.*)$", line)
        if m and cur is not None:
            cur[m.group(1)] = m.group(2).strip("'")
    return r.stdout, pools


def paths_in(text):
    return sorted(re.findall(r"^\s+path: '([^']+)'$", text, re.M))


def get1(oxzfs, prop, pool):
    r = oxzfs.zpool("get", "-H", "-o", "value,source", prop, pool)
    assert r.returncode == 0, repr(r)
    return tuple(r.stdout.rstrip("\n").split("\t"))


def test_create_ashift_is_kept_in_pool_props(oxzfs):
    vdir, _, _ = new_pool(oxzfs, "pash12", "ash12", 1, "-o", "ashift=12")
    new_pool(oxzfs, "pashdef", "ashdef", 1)
    assert get1(oxzfs, "ashift", "pash12") == ("12", "local")
    assert get1(oxzfs, "ashift", "pashdef") == ("0", "default")
    r = oxzfs.zpool("set", "ashift=9", "pash12")
    assert r.returncode != 0 and "readonly" in r.stderr, repr(r)
    assert oxzfs.export("pash12").returncode == 0 and oxzfs.export("pashdef").returncode == 0
    text = zdb_check(vdir, "pash12")
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddd", "pash12"], capture_output=True, text=True, errors="replace",
                       timeout=600)
    assert r.returncode == 0, r.stderr
    # The MOS object of type "Pool properties" lists ashift = 12; the vdev's ashift too.
    props = r.stdout[r.stdout.index("Pool properties"):]
    assert re.search(r"^\t\tashift = 12\s*$", props[:2000], re.M), props[:2000]
    assert "ashift: 12" in r.stdout and "No leaks" in text


def test_cachefile_follows_the_pools(oxzfs):
    base = os.path.join(oxzfs.base, "cache")
    os.makedirs(base, exist_ok=True)
    cf, copy, other = (os.path.join(base, n) for n in ("a.cache", "copy.cache", "b.cache"))
    v1, alt1, _ = new_pool(oxzfs, "pcf1", "cf1", 1, "-o", f"cachefile={cf}")
    v2, _, _ = new_pool(oxzfs, "pcf2", "cf2", 1, "-o", f"cachefile={cf}")
    new_pool(oxzfs, "pcf3", "cf3", 1)
    assert get1(oxzfs, "cachefile", "pcf1") == (cf, "local")
    # -R implies cachefile=none, as zpool create -R does in OpenZFS.
    assert get1(oxzfs, "cachefile", "pcf3") == ("none", "local")
    # fnvlist_pack's native encoding, little-endian, as OpenZFS writes it on x86.
    with open(cf, "rb") as f:
        assert f.read(4) == b"\x00\x01\x00\x00"
    text, pools = zdb_cachefile(cf)
    assert sorted(pools) == ["pcf1", "pcf2"]
    for p in ("pcf1", "pcf2"):
        assert pools[p]["pool_guid"] == get1(oxzfs, "guid", p)[0] and pools[p]["state"] == "0"
        assert pools[p]["name"] == p
    assert paths_in(text) == sorted(os.path.join(d, "d0") for d in (v1, v2))
    # Our decoder prints the file as OpenZFS's zdb does.
    ours = oxzfs.zdb("-U", cf, "-C")
    assert ours.returncode == 0 and ours.stdout == text, repr(ours)

    # A config change rewrites it: comment, a new vdev.
    assert oxzfs.zpool("set", "comment=cached", "pcf1").returncode == 0
    extra = make_devs(os.path.join(oxzfs.base, "cf1x"), 1, 128)[0]
    assert oxzfs.zpool("add", "pcf1", extra).returncode == 0
    text, pools = zdb_cachefile(cf)
    assert pools["pcf1"]["comment"] == "cached" and pools["pcf1"]["vdev_children"] == "2"
    assert extra in paths_in(text)

    # none: out of the file, which keeps the other pool.
    assert oxzfs.zpool("set", "cachefile=none", "pcf2").returncode == 0
    assert get1(oxzfs, "cachefile", "pcf2") == ("none", "local")
    assert sorted(zdb_cachefile(cf)[1]) == ["pcf1"]

    # OpenZFS's zdb opens the (active) pool from the file alone: no -e, no device search.
    r = subprocess.run([ZDB, "-U", cf, "-C", "pcf1"], capture_output=True, text=True, errors="replace", timeout=600)
    assert r.returncode == 0 and "MOS Configuration:" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.search(r"^\s+comment: 'cached'$", r.stdout, re.M) and extra in r.stdout, r.stdout

    # Export: the last pool leaves and the file goes; a copy still imports with -c.
    shutil.copy(cf, copy)
    assert oxzfs.export("pcf1").returncode == 0
    assert not os.path.exists(cf)
    r = oxzfs.zpool("import", "-c", copy, "-R", alt1, "pcf1")
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("pcf1")
    assert get1(oxzfs, "cachefile", "pcf1") == ("none", "local")
    assert oxzfs.zpool("import", "-c", copy, "-d", v1, "pcf1").returncode == 2

    # import -o cachefile=: written at import.
    assert oxzfs.export("pcf2").returncode == 0
    r = oxzfs.zpool("import", "-d", v2, "-o", f"cachefile={other}", "pcf2")
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("pcf2")
    assert sorted(zdb_cachefile(other)[1]) == ["pcf2"]
    assert oxzfs.zpool("set", "cachefile=", "pcf2").returncode == 0
    assert get1(oxzfs, "cachefile", "pcf2") == ("-", "default") and not os.path.exists(other)

    # libzfs's checks of the value.
    for bad, msg in [("rel.cache", "property 'cachefile' must be empty, an absolute path, or 'none'"),
                     (base + "/", f"'{base}/' is not a valid file"),
                     ("/no/such/dir/x.cache", "'/no/such/dir' is not a valid directory")]:
        r = oxzfs.zpool("set", f"cachefile={bad}", "pcf3")
        assert r.returncode == 1 and r.stderr == f"cannot set property for 'pcf3': {msg}\n", repr(r)
    r = oxzfs.zpool("import", "-c", os.path.join(base, "missing.cache"), "pcf9")
    assert r.returncode == 1 and "failed to open cache file" in r.stderr, repr(r)
    for p in ("pcf1", "pcf2", "pcf3"):
        assert oxzfs.export(p).returncode == 0
    zdb_check(v1, "pcf1")


def statfs_and_props(oxzfs, ds, mnt):
    """(os.statvfs, {available, referenced, recordsize}) read with no txg synced in between."""
    for _ in range(20):
        a = oxzfs.zfs("get", "-Hp", "-o", "property,value", "available,referenced,recordsize", ds)
        st = os.statvfs(mnt)
        b = oxzfs.zfs("get", "-Hp", "-o", "property,value", "available,referenced,recordsize", ds)
        assert a.returncode == 0, repr(a)
        if a.stdout == b.stdout:
            return st, {k: int(v) for k, v in (ln.split("\t") for ln in a.stdout.splitlines())}
    raise AssertionError(f"zfs get {ds} kept changing")


def expected(p):
    """zfs_statvfs from dmu_objset_space's numbers."""
    bs = p["recordsize"]
    refd = -(-p["referenced"] // bs) * bs
    return {"bsize": bs, "blocks": (refd + p["available"]) // bs, "bfree": p["available"] // bs,
            "ffree_max": p["available"] >> 9}


def check_statfs(oxzfs, datasets, root):
    """Every dataset's statfs against zfs_statvfs over its zfs get; {dataset: used objects}."""
    used_objs = {}
    for ds in datasets:
        mnt = os.path.join(root, ds.split("/", 1)[1]) if "/" in ds else root
        st, p = statfs_and_props(oxzfs, ds, mnt)
        e = expected(p)
        got = {"bsize": st.f_bsize, "blocks": st.f_blocks, "bfree": st.f_bfree}
        assert got == {k: e[k] for k in got}, (ds, got, e, p)
        assert st.f_frsize == st.f_bsize and st.f_bavail == st.f_bfree and st.f_namemax == 255, (ds, st)
        used = st.f_files - st.f_ffree
        assert st.f_ffree == min((1 << 48) - used, e["ffree_max"]), (ds, st)
        used_objs[ds] = used
    return used_objs


def test_statfs_reports_the_datasets_space(oxzfs):
    pool = "pstatfs"
    vdir, alt, root = new_pool(oxzfs, pool, "statfs", 1, size_mib=256)
    sets = {"q": ["quota=40M"], "rq": ["refquota=24M"], "res": ["reservation=60M"], "big": ["recordsize=1M"],
            "rres": ["refreservation=20M"]}
    for name, props in sets.items():
        args = [a for p in props for a in ("-o", p)]
        assert oxzfs.zfs("create", *args, f"{pool}/{name}").returncode == 0
    for name, mib in (("q", 6), ("rq", 3), ("big", 2)):
        with open(os.path.join(root, name, "data"), "wb") as f:
            f.write(os.urandom(mib * M))
            f.flush()
            os.fsync(f.fileno())
    # The files and their blocks on disk (fsync alone may only write the intent log).
    assert oxzfs.zpool("sync", pool).returncode == 0
    datasets = [pool] + [f"{pool}/{n}" for n in sets]
    used_objs = check_statfs(oxzfs, datasets, root)
    # Quotas shrink what df sees: the refquota'd dataset cannot show more than 24M.
    st, _ = statfs_and_props(oxzfs, f"{pool}/rq", os.path.join(root, "rq"))
    assert st.f_blocks * st.f_bsize <= 24 * M + 128 * 1024
    assert oxzfs.export(pool).returncode == 0
    # The used object counts are the objsets' fill counts, which zdb -d prints.
    text = zdb_check(vdir, pool)
    zdb_objs = {m.group(1): int(m.group(2)) for m in
                re.finditer(r"^Dataset (\S+) \[ZPL\], ID \d+, cr_txg \d+, \S+, (\d+) objects", text, re.M)}
    assert zdb_objs == used_objs, (zdb_objs, used_objs)
    # A read-only import's mounts report the same.
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    assert check_statfs(oxzfs, datasets, root) == used_objs
    assert oxzfs.export(pool).returncode == 0


def test_import_under_a_new_name(oxzfs):
    """`zpool import POOL NEWNAME`: the pool is imported as NEWNAME, its labels and MOS config
    take the new name at the first sync (OpenZFS's zdb finds it by that name, clean), and the
    old name is gone; a new name already taken or invalid is refused with libzfs's message."""
    vdir, alt, root = new_pool(oxzfs, "rnold", "rename", 1)
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(b"renamed pool content\n")
    assert oxzfs.export("rnold").returncode == 0
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, "rnold", "9bad")
    assert (r.returncode, r.stderr) == (1, "cannot import '9bad': name must begin with a letter\n"), repr(r)
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, "rnold", "rnnew")
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("rnnew")
    r = oxzfs.zpool("list", "-H", "-o", "name")
    assert "rnnew" in r.stdout.split() and "rnold" not in r.stdout.split(), r.stdout
    with open(os.path.join(alt, "rnnew", "f"), "rb") as f:
        assert f.read() == b"renamed pool content\n"
    vdir2, _, _ = new_pool(oxzfs, "rnother", "rename2", 1)
    assert oxzfs.export("rnother").returncode == 0
    r = oxzfs.zpool("import", "-d", vdir2, "rnother", "rnnew")
    assert (r.returncode, r.stderr) == (1, "cannot import 'rnother' as 'rnnew': pool already exists\n"), repr(r)
    assert oxzfs.export("rnnew").returncode == 0
    labels = subprocess.run([oracle_pools.ZDB, "-l", os.path.join(vdir, "d0")], capture_output=True, text=True).stdout
    assert "name: 'rnnew'" in labels and "rnold" not in labels, labels
    zdb_check(vdir, "rnnew")
    r = oxzfs.zpool("import", "-d", vdir)
    assert "pool: rnnew" in r.stdout and "rnold" not in r.stdout, r.stdout


def test_daemon_start_imports_the_cachefile_pools(oxzfs):
    """`daemon start -c FILE` imports the pools FILE lists, as zfs-import-cache does at boot:
    a pool imported with cachefile=FILE when the daemon stopped is back after the restart
    (not mounted, as `zpool import -aN`; `zfs mount -a` mounts it, without the altroot of
    before); once exported it is out of FILE and a restart leaves it alone."""
    base = os.path.join(oxzfs.base, "autoimport")
    os.makedirs(base, exist_ok=True)
    cf = os.path.join(base, "auto.cache")
    mnt = os.path.join(base, "mnt")
    vdir, alt, root = new_pool(oxzfs, "pauto", "auto", 1, "-o", f"cachefile={cf}", "-m", mnt)
    with open(os.path.join(alt + mnt, "f"), "wb") as f:
        f.write(b"back after a restart\n")
    assert sorted(zdb_cachefile(cf)[1]) == ["pauto"]
    oxzfs.stop_daemon()
    r = oxzfs.run("daemon", "start", "-c", cf)
    assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("list", "-H", "-o", "name")
    assert r.stdout.split() == ["pauto"], repr(r)
    assert get1(oxzfs, "cachefile", "pauto") == (cf, "local")
    assert not os.path.ismount(mnt)
    assert oxzfs.zfs("mount", "-a").returncode == 0
    with open(os.path.join(mnt, "f"), "rb") as f:
        assert f.read() == b"back after a restart\n"
    assert oxzfs.export("pauto").returncode == 0
    assert not os.path.exists(cf), "the last pool left the cache file"
    oxzfs.stop_daemon()
    r = oxzfs.run("daemon", "start", "-c", cf)
    assert r.returncode == 0, repr(r)
    assert oxzfs.zpool("list", "-H", "-o", "name").stdout.split() == [], "an exported pool stays exported"
    zdb_check(vdir, "pauto")
