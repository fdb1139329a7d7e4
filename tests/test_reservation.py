"""reservation and refreservation (with quota and refquota): `zfs set`/`zfs create -o` refuse
what OpenZFS refuses with its messages, `zfs list -p` shows what OpenZFS would compute from the
DSL phys that OpenZFS's own zdb decodes, writes through the mount stop with ENOSPC before they
eat another dataset's reservation, and zdb -bcc stays clean."""
import errno
import os
import re
import subprocess

import oracle_pools
from test_write import new_pool, zdb_check

ZDB = oracle_pools.ZDB
M = 1 << 20
HDR = re.compile(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S.*)$")
KV = re.compile(r"^\t\t(\S+) = (.*)$")


def mos_objects(vdir, pool):
    """{object: (type, {field: value})} of the MOS, as `zdb -P -dddd` prints them."""
    r = subprocess.run([ZDB, "-P", "-e", "-p", vdir, "-dddd", pool], capture_output=True, text=True,
                       errors="replace", timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    objs, cur, in_mos = {}, None, False
    for line in r.stdout.splitlines():
        if line.startswith("Dataset "):
            in_mos = line.startswith("Dataset mos ")
            continue
        if not in_mos:
            continue
        m = HDR.match(line)
        if m and not line.strip().split()[0].isalpha():
            cur = int(m.group(1))
            objs[cur] = (m.group(2).strip(), {})
            continue
        m = KV.match(line)
        if m and cur is not None:
            objs[cur][1][m.group(1)] = m.group(2).strip()
    return objs


def dsl_state(vdir, pool):
    """{dataset name: dict of the dir's and head dataset's numbers and local space props}."""
    objs = mos_objects(vdir, pool)
    num = lambda d, k: int(d.get(k, "0").split()[0])
    dirs = {o: f for o, (t, f) in objs.items() if t == "DSL directory"}
    child_maps = {}
    for o, f in dirs.items():
        zap = objs.get(num(f, "child_dir_zapobj"), ("", {}))[1]
        child_maps[o] = {k: int(v.split()[0]) for k, v in zap.items()}
    root = next(o for o, f in dirs.items() if num(f, "parent_dir_obj") == 0)
    out = {}

    def walk(o, name):
        f = dirs[o]
        ds = objs[num(f, "head_dataset_obj")][1] if num(f, "head_dataset_obj") in objs else {}
        props = objs.get(num(f, "props_zapobj"), ("", {}))[1]
        out[name] = {
            "used": num(f, "used_bytes"), "reserved": num(f, "reserved"), "quota": num(f, "quota"),
            "head": num(f, "used_breakdown[HEAD]"), "child": num(f, "used_breakdown[CHILD]"),
            "child_rsrv": num(f, "used_breakdown[CHILD_RSRV]"), "refrsrv": num(f, "used_breakdown[REFRSRV]"),
            "snap": num(f, "used_breakdown[SNAP]"),
            "referenced": num(ds, "used_bytes"), "unique": num(ds, "unique"),
            "refreservation": num(props, "refreservation"), "reservation_prop": num(props, "reservation"),
            "refquota": num(props, "refquota"), "quota_prop": num(props, "quota"),
            "children": [], "dir": o,
        }
        for leaf, c in child_maps.get(o, {}).items():
            if c in dirs:
                out[name]["children"].append(f"{name}/{leaf}")
                walk(c, f"{name}/{leaf}")

    walk(root, pool)
    return out


def check_accounting(state):
    """OpenZFS's invariants of the dsl_dir space accounting."""
    for name, d in state.items():
        assert d["used"] == d["head"] + d["snap"] + d["child"] + d["child_rsrv"] + d["refrsrv"], (name, d)
        assert d["refrsrv"] == max(0, d["refreservation"] - d["unique"]), (name, d)
        assert (d["reserved"], d["quota"]) == (d["reservation_prop"], d["quota_prop"]), (name, d)
        kids = [state[c] for c in d["children"]]
        assert d["child"] == sum(k["used"] for k in kids), (name, d, kids)
        assert d["child_rsrv"] == sum(max(0, k["reserved"] - k["used"]) for k in kids), (name, d, kids)
        if not name.split("/")[-1].startswith("$"):
            assert d["head"] == d["referenced"], (name, d)


def zfs_list(ox, pool):
    r = ox.zfs("list", "-Hp", "-o", "name,used,avail,refer,usedbyrefreservation,reservation,refreservation",
               "-r", pool)
    assert r.returncode == 0, repr(r)
    rows = {}
    for line in r.stdout.splitlines():
        n, *vals = line.split("\t")
        rows[n] = dict(zip(["used", "avail", "refer", "usedbyrefreservation", "reservation", "refreservation"],
                           [int(v) for v in vals]))
    return rows


def expected_list(state, pool, root_avail):
    """What OpenZFS's `zfs list -p` shows for the datasets of a two-level tree, from the phys."""
    out = {}
    for name, d in state.items():
        if "$" in name:
            continue
        avail = root_avail
        if name != pool:
            # dsl_dir_space_available, then dsl_dataset_space.
            avail += max(0, d["reserved"] - d["used"])
            if d["quota"]:
                avail = min(avail, max(0, d["quota"] - d["used"]))
            avail += max(0, d["refreservation"] - d["unique"])
            if d["refquota"]:
                avail = min(avail, max(0, d["refquota"] - d["referenced"]))
        out[name] = {"used": d["used"], "avail": avail, "refer": d["referenced"],
                     "usedbyrefreservation": d["refrsrv"], "reservation": d["reserved"],
                     "refreservation": d["refreservation"]}
    return out


def fill(path, limit):
    n = 0
    err = None
    with open(path, "wb") as f:
        try:
            while n < limit:
                f.write(os.urandom(M))
                n += M
            os.fsync(f.fileno())
        except OSError as e:
            err = e
    return n, err


def test_reservations_account_refuse_and_protect(oxzfs):
    pool = "rsv"
    vdir, alt, _ = new_pool(oxzfs, pool, pool, 1, "-O", "compression=off", size_mib=512)
    assert oxzfs.zfs("create", "-o", "reservation=100M", f"{pool}/a").returncode == 0
    assert oxzfs.zfs("create", "-o", "refreservation=50M", f"{pool}/b").returncode == 0
    assert oxzfs.zfs("create", f"{pool}/c").returncode == 0
    # Refusals, with libzfs's words.
    for args, msg in [
        (("set", "reservation=2G", f"{pool}/c"),
         f"cannot set property for '{pool}/c': size is greater than available space"),
        (("set", "refreservation=2G", f"{pool}/c"),
         f"cannot set property for '{pool}/c': size is greater than available space"),
        (("set", "quota=10M", f"{pool}/a"),
         f"cannot set property for '{pool}/a': size is less than current used or reserved space"),
        (("set", "refquota=10M", f"{pool}/b"),
         f"cannot set property for '{pool}/b': size is less than current used or reserved space"),
        (("create", "-o", "reservation=2G", f"{pool}/d"), f"cannot create '{pool}/d': out of space"),
    ]:
        r = oxzfs.zfs(*args)
        assert r.returncode == 1 and r.stderr.strip() == msg, repr(r)
    assert oxzfs.zfs("list", f"{pool}/d").returncode == 1, "a refused create must leave nothing behind"
    r = oxzfs.zfs("inherit", "reservation", f"{pool}/a")
    assert r.returncode == 1 and r.stderr.startswith("'reservation' property cannot be inherited\n"), repr(r)
    # A reservation inside the quota and a refquota above the refreservation are fine.
    assert oxzfs.zfs("set", "quota=200M", f"{pool}/a").returncode == 0
    assert oxzfs.zfs("set", "refquota=80M", f"{pool}/b").returncode == 0

    def compare():
        """Export, judge with zdb, and compare `zfs list` of the same bytes (a read-only
        import writes nothing) with what OpenZFS computes from the phys zdb decodes."""
        assert oxzfs.export(pool).returncode == 0
        zdb_check(vdir, pool)
        state = dsl_state(vdir, pool)
        check_accounting(state)
        r = oxzfs.import_ro(vdir, pool, alt)
        assert r.returncode == 0, repr(r)
        listed = zfs_list(oxzfs, pool)
        want = expected_list(state, pool, listed[pool]["avail"])
        assert {k: v for k, v in listed.items() if k in want} == want
        assert oxzfs.export(pool).returncode == 0
        r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        oxzfs.imported.append(pool)
        return listed

    listed = compare()
    assert listed[f"{pool}/a"]["reservation"] == 100 * M
    assert listed[f"{pool}/b"]["usedbyrefreservation"] > 49 * M
    assert listed[pool]["used"] > 150 * M, "reservations count as used in the parent"
    # Writes: c stops short of the others' reservations; a and b still get theirs.
    root = os.path.join(alt, pool)
    c_avail = listed[f"{pool}/c"]["avail"]
    n, err = fill(os.path.join(root, "c", "big"), 1024 * M)
    assert err is not None and err.errno == errno.ENOSPC, (n, err)
    assert c_avail - 24 * M <= n <= c_avail, (n, c_avail)
    n, err = fill(os.path.join(root, "a", "big"), 1024 * M)
    assert err is not None and err.errno in (errno.ENOSPC, errno.EDQUOT), (n, err)
    assert n >= 95 * M, f"a got only {n >> 20} MiB of its 100 MiB reservation"
    n, err = fill(os.path.join(root, "b", "big"), 1024 * M)
    assert err is not None and err.errno in (errno.ENOSPC, errno.EDQUOT), (n, err)
    assert n >= 45 * M, f"b got only {n >> 20} MiB of its 50 MiB refreservation"
    listed = compare()
    assert listed[f"{pool}/b"]["usedbyrefreservation"] < 5 * M
    # Lowering and removing: the space comes back.
    assert oxzfs.zfs("set", "refreservation=none", f"{pool}/b").returncode == 0
    assert oxzfs.zfs("set", "reservation=none", f"{pool}/a").returncode == 0
    os.unlink(os.path.join(root, "c", "big"))
    assert oxzfs.zfs("destroy", f"{pool}/b").returncode == 0
    assert oxzfs.zfs("set", "reservation=60M", f"{pool}/c").returncode == 0
    assert oxzfs.zfs("set", "refreservation=20M", f"{pool}/a").returncode == 0
    listed = compare()
    assert listed[f"{pool}/c"]["reservation"] == 60 * M
    assert oxzfs.zfs("destroy", f"{pool}/c").returncode == 0
    assert oxzfs.zfs("destroy", f"{pool}/a").returncode == 0
    compare()
