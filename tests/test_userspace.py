"""User, group and project space accounting: what `zfs userspace`, `groupspace` and
`projectspace` read.

The oracle is OpenZFS's zdb: `zdb -P -dddd` prints every object of a file system with its
on-disk size and, for the file system's own objects, their owner, group and project, and it
dumps the accounting ZAPs (objects -1, -2, -3) oxzfs keeps at each sync. Each user's figure
must be what OpenZFS charges: 512 bytes plus the object's size for every object it owns (and,
with userobj_accounting, one object). zfs-fuse is the second oracle on a version-23 pool: it
reads the accounting oxzfs kept, keeps it while it writes, and oxzfs goes on from its figures.
"""
import os
import re
import subprocess

from conftest import zfs_fuse_imported
from test_snapshots import pool_with_fs
from test_write import zdb_check, zdb_cmd

HEADER = re.compile(r"^\s+(-?\d+)\s+\d+\s+\d+\s+\d+\s+(\d+)\s+\d+\s+\d+\s+[\d.]+\s+(.+?)\s*$")


def zdb_accounting(vdir, ds):
    """(expected, kept) from `zdb -P -dddd DS` of the exported pool in VDIR: each a dict
    {"user"|"group"|"project": {hex id or "obj-"+hex id: value}}. Expected is summed over the
    objects zdb prints an owner for; kept is the accounting ZAPs' content."""
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdir, "-P", "-dddd", ds], capture_output=True, text=True, errors="replace",
                       timeout=300, env=env)
    assert r.returncode == 0, f"zdb -dddd {ds}:\n{(r.stdout + r.stderr)[-3000:]}"
    kinds = {"-1": "user", "-2": "group", "-3": "project"}
    objects, kept = [], {"user": {}, "group": {}, "project": {}}
    cur = None
    for line in r.stdout.splitlines():
        m = HEADER.match(line)
        if m:
            cur = {"obj": m.group(1), "dsize": int(m.group(2)), "type": m.group(3)}
            objects.append(cur)
            continue
        if cur is None:
            continue
        if cur["obj"] in kinds:
            e = re.match(r"^\t\t(\S+) = (\d+)\s*$", line)
            if e:
                kept[kinds[cur["obj"]]][e.group(1)] = int(e.group(2))
            continue
        f = re.match(r"^\t(uid|gid|projid)\s+(\d+)\s*$", line)
        if f:
            cur[f.group(1)] = int(f.group(2))
    expected = {"user": {}, "group": {}, "project": {}}
    for o in objects:
        if "uid" not in o:
            continue
        for kind, key in (("user", "uid"), ("group", "gid"), ("project", "projid")):
            hexid = format(o.get(key, 0), "x")
            expected[kind][hexid] = expected[kind].get(hexid, 0) + 512 + o["dsize"]
            expected[kind]["obj-" + hexid] = expected[kind].get("obj-" + hexid, 0) + 1
    return expected, kept


def space_only(d):
    """The byte figures of an accounting dict (the obj- counts left out)."""
    return {k: v for k, v in d.items() if not k.startswith("obj-")}


def listed(r):
    """{id: used} from `zfs userspace -Hpn -o name,used` output."""
    rows = [ln.split("\t") for ln in r.stdout.splitlines()]
    assert r.returncode == 0 and all(len(x) == 2 for x in rows), f"{r.stdout}{r.stderr}"
    return {format(int(n), "x"): int(u) for n, u in rows}


def import_rw(oxzfs, vdir, pool, alt):
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)


def write(path, n, uid=None, gid=None):
    with open(path, "wb") as f:
        f.write(os.urandom(n))
    if uid is not None:
        os.chown(path, uid, gid)


def test_accounting_matches_every_object(oxzfs):
    """A pool with userobj_accounting and project_quota enabled: space and object counts per
    user, group and project equal zdb's objects after creates, chowns, hard links, truncates,
    overwrites, removals and a snapshot; `zfs userspace` shows them, and the snapshot keeps its
    own figures."""
    pool = "uacct"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "uacct", pool, 1, 256, lambda d: d,
                                       "-o", "feature@userobj_accounting=enabled", "-o", "feature@project_quota=enabled")
    write(os.path.join(root, "root-file"), 100000)
    write(os.path.join(root, "a"), 5000, 1000, 100)
    os.mkdir(os.path.join(root, "d"))
    os.chown(os.path.join(root, "d"), 1001, 1001)
    for i in range(40):
        write(os.path.join(root, "d", f"f{i}"), 1000 * i, 1001 + i % 3, 100 + i % 2)
    os.link(os.path.join(root, "a"), os.path.join(root, "a-link"))
    os.symlink("a", os.path.join(root, "sym"))
    os.lchown(os.path.join(root, "sym"), 1002, 1002)
    assert oxzfs.zfs("snapshot", f"{fs}@s").returncode == 0
    # Move charges: chown, growth, truncation, removal.
    os.chown(os.path.join(root, "d", "f7"), 1000, 100)
    with open(os.path.join(root, "a"), "ab") as f:
        f.write(os.urandom(300000))
    os.truncate(os.path.join(root, "d", "f30"), 10)
    for i in range(0, 40, 4):
        os.unlink(os.path.join(root, "d", f"f{i}"))
    ours = listed(oxzfs.zfs("userspace", "-Hpn", "-o", "name,used", f"{fs}@s"))
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    want, kept = zdb_accounting(vdir, fs)
    assert kept == want, f"kept {kept}\nzdb's objects give {want}"
    assert set(want["user"]) >= {"0", "3e8", "3e9", "3ea", "3eb", "obj-3e8"}
    assert want["project"].keys() == {"0", "obj-0"}
    snap_want, snap_kept = zdb_accounting(vdir, f"{fs}@s")
    assert snap_kept == snap_want and ours == space_only(snap_want["user"]), (ours, snap_want)
    assert snap_want != want
    # zfs userspace and groupspace after the import: every owner and group with its figure and
    # object count (a new file system counts its objects and projects from its first object,
    # as dmu_objset_create_impl marks it); projectspace lists project 0 with everything.
    import_rw(oxzfs, vdir, pool, alt)
    assert listed(oxzfs.zfs("userspace", "-Hpn", "-o", "name,used", fs)) == space_only(want["user"])
    assert listed(oxzfs.zfs("groupspace", "-Hpn", "-o", "name,used", fs)) == space_only(want["group"])
    r = oxzfs.zfs("userspace", "-n", fs)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and re.fullmatch(r"TYPE +NAME +USED +QUOTA +OBJUSED +OBJQUOTA", lines[0]), repr(r)
    assert [ln.split()[2] for ln in lines[1:]] == sorted((str(int(k, 16)) for k in space_only(want["user"])), key=int), repr(r)
    assert [ln.split()[-3:] for ln in lines[1:]] == [["none", str(want["user"]["obj-" + format(int(ln.split()[2]), "x")]), "none"]
                                                    for ln in lines[1:]], repr(r)
    r = oxzfs.zfs("projectspace", "-Hp", "-o", "name,used,objused", fs)
    assert (r.returncode, r.stdout) == (0, f"0\t{want['project']['0']}\t{want['project']['obj-0']}\n"), repr(r)
    # Sorted as us_compare sorts: names as strings, ids without a name as numbers after them.
    import pwd

    def name_of(uid):
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return None
    ids = [int(k, 16) for k in space_only(want["user"])]
    named = sorted((name_of(i), i) for i in ids if name_of(i))
    want_order = [n for n, _ in named] + [str(i) for i in sorted(i for i in ids if not name_of(i))]
    r = oxzfs.zfs("userspace", "-H", "-o", "name", fs)
    assert r.returncode == 0 and r.stdout.split() == want_order, (r.stdout, want_order)
    # SMB types only: the rows read set the header's widths, none prints (no SIDs here).
    header = oxzfs.zfs("userspace", fs).stdout.splitlines()[0]
    r = oxzfs.zfs("userspace", "-t", "smbuser", fs)
    assert r.returncode == 0 and r.stdout.splitlines() == [header], repr(r)
    r = oxzfs.zfs("userspace", "-Hp", "-S", "used", "-o", "used", os.path.join(root, "d"))
    assert r.returncode == 0 and [int(x) for x in r.stdout.split()] == sorted(space_only(want["user"]).values(), reverse=True), repr(r)
    for args, msg in ((("-o", "bogus", fs), "invalid type 'bogus' for -o option\n"),
                      (("-t", "posixfoo", fs), "invalid type 'posixfoo' for -t option\n"),
                      ((f"{pool}/nosuch",), f"cannot open '{pool}/nosuch': dataset does not exist\n")):
        r = oxzfs.zfs("userspace", *args)
        assert r.returncode != 0 and r.stderr == msg, repr(r)
    assert oxzfs.export(pool).returncode == 0


def zfs_fuse_figures(kind, ds, ids):
    """{hex id: used} as zfs-fuse reads them (`zfs get userused@ID`: its `zfs userspace` needs
    a Python 2 helper this machine does not have), for the hex IDS."""
    props = [f"{kind}used@{int(i, 16)}" for i in ids]
    r = subprocess.run(["zfs", "get", "-Hp", "-o", "property,value", ",".join(props), ds], capture_output=True, text=True)
    rows = [ln.split("\t") for ln in r.stdout.splitlines()]
    assert r.returncode == 0 and len(rows) == len(props), f"zfs-fuse zfs get:\n{r.stdout}{r.stderr}"
    return {format(int(p.split("@")[1]), "x"): int(v) for p, v in rows if int(v) != 0}


def test_accounting_crosses_zfs_fuse(oxzfs, work_dir):
    """Version 23: zfs-fuse's `zfs userspace` reads the figures oxzfs kept for a file system
    oxzfs made and wrote, keeps them right while it writes, and oxzfs goes on from its figures;
    zdb's objects agree at every step."""
    pool = "uacct23"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "uacct23", pool, 1, 256, lambda d: d, "-o", "version=23")
    write(os.path.join(root, "a"), 70000, 1000, 100)
    write(os.path.join(root, "b"), 3000, 1001, 100)
    os.mkdir(os.path.join(root, "d"))
    for i in range(10):
        write(os.path.join(root, "d", f"f{i}"), 20000 * i, 1002, 1002)
    assert oxzfs.export(pool).returncode == 0
    want, kept = zdb_accounting(vdir, fs)
    assert space_only(kept["user"]) == space_only(want["user"]) and space_only(kept["group"]) == space_only(want["group"])
    zf_alt = os.path.join(oxzfs.base, "uacct23-zf")
    with zfs_fuse_imported(work_dir, vdir, zf_alt, pool):
        zroot = os.path.join(zf_alt, fs)
        assert zfs_fuse_figures("user", fs, space_only(want["user"])) == space_only(want["user"])
        assert zfs_fuse_figures("group", fs, space_only(want["group"])) == space_only(want["group"])
        write(os.path.join(zroot, "zf"), 50000, 1003, 1003)
        os.unlink(os.path.join(zroot, "b"))
        os.chown(os.path.join(zroot, "d", "f3"), 1000, 100)
        with open(os.path.join(zroot, "a"), "ab") as f:
            f.write(os.urandom(100000))
        subprocess.run(["zpool", "sync", pool], capture_output=True)
    want, kept = zdb_accounting(vdir, fs)
    assert space_only(kept["user"]) == space_only(want["user"]), "after zfs-fuse's writes"
    import_rw(oxzfs, vdir, pool, alt)
    write(os.path.join(root, "c"), 9000, 1004, 1004)
    os.unlink(os.path.join(root, "zf"))
    os.chown(os.path.join(root, "d", "f5"), 1003, 1003)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    want, kept = zdb_accounting(vdir, fs)
    assert space_only(kept["user"]) == space_only(want["user"]) and space_only(kept["group"]) == space_only(want["group"])
    with zfs_fuse_imported(work_dir, vdir, zf_alt, pool):
        ids = set(space_only(want["user"])) | {"3e9", "3eb"}  # and two owners with nothing left
        assert zfs_fuse_figures("user", fs, ids) == space_only(want["user"])
        assert zfs_fuse_figures("group", fs, space_only(want["group"])) == space_only(want["group"])


def append(path, n):
    """Append N random bytes to PATH: None, or the errno the write failed with."""
    try:
        with open(path, "ab") as f:
            f.write(os.urandom(n))
        return None
    except OSError as e:
        return e.errno


def quotas(get, ds, props):
    r = get("get", "-Hp", "-o", "property,value,source", ",".join(props), ds)
    assert r.returncode == 0, f"{r.stdout}{r.stderr}"
    return {p: (v, s) for p, v, s in (ln.split("\t") for ln in r.stdout.splitlines())}


def test_user_quotas(oxzfs):
    """userquota@ and groupquota@: kept in the file system's quota ZAPs (zdb shows them where
    OpenZFS keeps them), shown by zfs get and zfs userspace, and enforced as zfs_write,
    zfs_create and zfs_setattr do: once the synced figure reaches the quota, writes (for the
    file's owner or group), changes of owner to that user and creates by it fail with EDQUOT
    (an existing name's EEXIST first); `none` lifts it."""
    import errno
    pool = "uquota"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "uquota", pool, 1, 256, lambda d: d)
    r = oxzfs.zfs("set", "userquota@1000=1M", "groupquota@2000=10M", fs)
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    got = quotas(oxzfs.zfs, fs, ["userquota@1000", "groupquota@2000", "userused@1000", "userquota@1001", "userobjused@1000"])
    assert got == {"userquota@1000": ("1048576", "local"), "groupquota@2000": ("10485760", "local"),
                   "userused@1000": ("0", "local"), "userquota@1001": ("0", "local"), "userobjused@1000": ("-", "-")}, got
    f = os.path.join(root, "f")
    write(f, 2 << 20, 1000, 100)
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert append(f, 100) == errno.EDQUOT
    write(os.path.join(root, "g"), 10)
    try:
        os.chown(os.path.join(root, "g"), 1000, 100)
        raise AssertionError("chown to a user over quota succeeded")
    except OSError as e:
        assert e.errno == errno.EDQUOT
    os.chown(os.path.join(root, "g"), 1001, 2000)  # another user, a group under its quota
    r = oxzfs.zfs("userspace", "-n", fs)
    row = [ln.split() for ln in r.stdout.splitlines() if ln.split()[2:3] == ["1000"]]
    assert r.returncode == 0 and row and row[0][4] == "1M", repr(r)
    for args, msg in ((("userused@1000=5",), f"cannot set property for '{fs}': 'userused@1000' is readonly\n"),
                      (("userquota@no-such-user=5",), f"cannot set property for '{fs}': 'userquota@no-such-user' has an invalid user/group name\n"),
                      (("userquota@1000=abc",), f"cannot set property for '{fs}': bad numeric value 'abc'\n"),
                      (("projectquota@5=1M",), f"cannot set property for '{fs}': pool and or dataset must be upgraded to set this property or value\n")):
        r = oxzfs.zfs("set", *args, fs)
        assert (r.returncode, r.stderr) == (1, msg), repr(r)
    # A group at its quota: writes to its files fail too; a user with a quota and nothing
    # used has a row of 0 bytes used.
    assert oxzfs.zfs("set", "groupquota@2000=100K", "userquota@3000=5M", fs).returncode == 0
    h = os.path.join(root, "h")
    write(h, 300000, 1001, 2000)
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert append(h, 10) == errno.EDQUOT
    r = oxzfs.zfs("userspace", "-Hpn", "-o", "name,used,quota,objused", fs)
    assert "3000\t0\t5242880\t-" in r.stdout.splitlines(), repr(r)
    # A create by a user at its quota (root here: a quota of what it uses now), after an
    # existing name's EEXIST.
    root_used = quotas(oxzfs.zfs, fs, ["userused@0"])["userused@0"][0]
    assert oxzfs.zfs("set", f"userquota@0={root_used}", fs).returncode == 0
    try:
        os.open(os.path.join(root, "g"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        raise AssertionError("an exclusive create of an existing name succeeded")
    except OSError as e:
        assert e.errno == errno.EEXIST
    try:
        os.close(os.open(os.path.join(root, "new-by-root"), os.O_CREAT | os.O_WRONLY))
        raise AssertionError("a create by a user over quota succeeded")
    except OSError as e:
        assert e.errno == errno.EDQUOT
    assert oxzfs.zfs("set", "userquota@0=none", "groupquota@2000=none", fs).returncode == 0
    assert oxzfs.zfs("set", "userquota@1000=none", fs).returncode == 0
    assert append(f, 100) is None
    assert quotas(oxzfs.zfs, fs, ["userquota@1000"]) == {"userquota@1000": ("0", "local")}
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    head, env = zdb_cmd()
    text = subprocess.run(head + ["-e", "-p", vdir, "-dddd", fs], capture_output=True, text=True, env=env).stdout
    assert re.search(r"\tuserquota@ = \d+", text) and re.search(r"\tgroupquota@ = \d+", text), text[-3000:]
    assert re.search(r"ZFS user/group/project quota\n(?:.*\n){0,6}?\t\tbb8 = 5242880", text), text[-3000:]


def test_user_quotas_cross_zfs_fuse(oxzfs, work_dir):
    """Version 23: zfs-fuse reads and enforces a quota oxzfs set, and oxzfs reads and enforces
    one zfs-fuse set."""
    import errno
    pool = "uquota23"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "uquota23", pool, 1, 256, lambda d: d, "-o", "version=23")
    assert oxzfs.zfs("set", "userquota@1000=1M", fs).returncode == 0
    write(os.path.join(root, "f"), 2 << 20, 1000, 100)
    assert oxzfs.export(pool).returncode == 0
    zf_alt = os.path.join(oxzfs.base, "uquota23-zf")
    zfs_fuse = lambda *a: subprocess.run(["zfs", *a], capture_output=True, text=True)  # noqa: E731
    with zfs_fuse_imported(work_dir, vdir, zf_alt, pool):
        assert quotas(zfs_fuse, fs, ["userquota@1000"]) == {"userquota@1000": ("1048576", "local")}
        assert append(os.path.join(zf_alt, fs, "f"), 100) == errno.EDQUOT
        for a in ("userquota@1001=2M", "userquota@1000=none"):
            r = zfs_fuse("set", a, fs)
            assert r.returncode == 0, f"{r.stdout}{r.stderr}"
    import_rw(oxzfs, vdir, pool, alt)
    assert quotas(oxzfs.zfs, fs, ["userquota@1000", "userquota@1001"]) == {"userquota@1000": ("0", "local"), "userquota@1001": ("2097152", "local")}
    assert append(os.path.join(root, "f"), 100) is None
    write(os.path.join(root, "g"), 3 << 20, 1001, 100)
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert append(os.path.join(root, "g"), 100) == errno.EDQUOT
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
