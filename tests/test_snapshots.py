"""Snapshots on a live pool: `zfs snapshot` and writes to file systems that have snapshots.

A random workload (tests/tools/workload.py) runs against a model on a file system; snapshots are
taken between rounds, each with a copy of the model at that moment. Then, after export:
OpenZFS's zdb -bcc finds no leaks and no errors (its traversal walks every snapshot and its leak
check counts what the deadlists keep), the space figures obey OpenZFS's identities and agree with
zdb's own decoding of the deadlists, and on re-import every snapshot still equals the model taken
with it while the head equals the latest model. Version-23 pools take the old deadlist format
(one bpobj per dataset), as zfs-fuse writes them; `snapshot_rounds` leaves such a pool exported
with its models, so a crossing with zfs-fuse can import the same files and compare.
"""
import copy
import os
import random
import re
import subprocess
import time

import pytest

from conftest import assert_manifest, copy_vdevs, diff_manifests
from test_write import _strip_xattrs, make_devs, zdb_check, zdb_cmd
import manifest as manifest_mod
import oracle_pools
import workload

# (id, vdev layout builder, device count, ashift, version)
LAYOUTS = [
    ("stripe-a9", lambda d: d, 1, 9, 5000),
    ("raidz1-a12", lambda d: ["raidz1"] + d, 3, 12, 5000),
    ("mirror-a12-v23", lambda d: ["mirror"] + d, 2, 12, 23),
    ("raidz2-a9-v23", lambda d: ["raidz2"] + d, 4, 9, 23),
]


def new_rng(seed):
    rng = random.Random(seed)
    rng.seed_value = seed
    return rng


def steps(root, model, rng, n):
    start = getattr(model, "ops_done", 0)
    for i in range(start, start + n):
        workload.step(root, model, rng, i)
    model.ops_done = start + n


def space(oxzfs, pool):
    """{name: {column: int}} of `zfs list -Hp -t all -o space,refer,...`."""
    cols = ["name", "used", "usedsnap", "usedds", "usedchild", "usedrefreserv", "refer"]
    r = oxzfs.zfs("list", "-Hp", "-r", "-t", "all", "-o", ",".join(cols), pool)
    assert r.returncode == 0, repr(r)
    out = {}
    for line in r.stdout.splitlines():
        f = line.split("\t")
        out[f[0]] = {c: (int(v) if v.isdigit() else None) for c, v in zip(cols[1:], f[1:])}
    return out


def check_space_identities(sp, fs, clone=False):
    """OpenZFS's space identities for file system FS and its snapshots (a clone's dataset uses
    less than it references: the origin's blocks are the origin's)."""
    head = sp[fs]
    parts = head["usedsnap"] + head["usedds"] + head["usedchild"] + head["usedrefreserv"]
    assert head["used"] == parts, f"{fs}: used {head['used']} != usedsnap+usedds+usedchild+usedrefreserv {parts}"
    if clone:
        assert head["usedds"] <= head["refer"], f"{fs}: usedbydataset {head['usedds']} > referenced {head['refer']}"
    else:
        assert head["usedds"] == head["refer"], f"{fs}: usedbydataset {head['usedds']} != referenced {head['refer']}"
    snaps = {n: v for n, v in sp.items() if n.startswith(fs + "@")}
    # A snapshot's used is what only it holds: together never more than usedbysnapshots.
    total_unique = sum(v["used"] for v in snaps.values())
    assert total_unique <= head["usedsnap"], f"{fs}: snapshots' used {total_unique} > usedbysnapshots {head['usedsnap']}"
    return snaps


NICE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def nicenum(s):
    m = re.fullmatch(r"([\d.]+)([KMG]?)", s)
    assert m, s
    return float(m.group(1)) * NICE[m.group(2)]


def zdb_deadlists(vdir, pool):
    """{dataset name: deadlist bytes} as OpenZFS's zdb -dddd decodes each deadlist; checks on the
    way that the empty_bpobj feature counts exactly the deadlist entries naming the pool's empty
    bpobj (zdb itself does not)."""
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdir, "-dddd", pool], capture_output=True, text=True, errors="replace",
                       timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = {}
    cur = None
    m = re.search(r"^\s+empty_bpobj = (\d+)\s*$", r.stdout, re.M)
    empty = m.group(1) if m else None
    m = re.search(r"^\s+com\.delphix:empty_bpobj = (\d+)\s*$", r.stdout, re.M)
    refcount = int(m.group(1)) if m else 0
    users = len(re.findall(rf"^mintxg \d+ -> obj {empty}$", r.stdout, re.M)) if empty else 0
    assert users == refcount, f"empty_bpobj refcount {refcount} but {users} deadlist entries name object {empty}"
    for line in r.stdout.splitlines():
        m = re.match(r"Dataset (\S+) \[", line)
        if m:
            cur = m.group(1)
            continue
        m = re.match(r"\s+Deadlist: (\S+) \(", line) or re.match(r"\s+old-format deadlist: object \d+, \d+ blkptrs, (\S+)", line)
        if m and cur is not None and cur not in out:
            out[cur] = nicenum(m.group(1))
    return out


def snapshot_rounds(oxzfs, pool, fs, root, rng, rounds, ops=90):
    """ROUNDS rounds of OPS workload steps on the mounted FS, a snapshot after each but the last:
    (model, {snapshot name: model at the snapshot})."""
    model = workload.Model()
    model.xattr_max = 40000
    snaps = {}
    for i in range(rounds):
        steps(root, model, rng, ops)
        if i == rounds - 1:
            break
        name = f"s{len(snaps) + 1}"
        r = oxzfs.zfs("snapshot", f"{fs}@{name}")
        assert r.returncode == 0, repr(r)
        snaps[name] = copy.deepcopy(model)
        verify_head(root, model, f"after snapshot {name}")
    return model, snaps


def pool_with_fs(oxzfs, tag, pool, ndevs, size_mib, layout, *create_args):
    """A new pool of NDEVS files (LAYOUT builds the vdev arguments) with file system POOL/fs:
    (vdev dir, altroot, fs name, fs mountpoint)."""
    base = os.path.join(oxzfs.base, tag)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, ndevs, size_mib)
    r = oxzfs.zpool("create", *create_args, "-R", alt, pool, *layout(devs))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    fs = f"{pool}/fs"
    assert oxzfs.zfs("create", fs).returncode == 0
    return vdir, alt, fs, os.path.join(alt, fs)


def snapshot_between(oxzfs, fs, root, model, rng, snaps, name, before, after):
    """BEFORE workload steps, snapshot NAME (its model kept in SNAPS), AFTER more steps."""
    steps(root, model, rng, before)
    r = oxzfs.zfs("snapshot", f"{fs}@{name}")
    assert r.returncode == 0, repr(r)
    snaps[name] = copy.deepcopy(model)
    steps(root, model, rng, after)


def verify_head(root, model, ctx):
    diffs = workload.verify(root, model)
    assert not diffs, f"{ctx}: the head differs from the model:\n" + "\n".join(diffs[:10])


def verify_snapshots(root, model, snaps, ctx):
    """The head and every snapshot (under .zfs/snapshot: read-only mounts) against their models."""
    verify_head(root, model, ctx)
    for name, m in snaps.items():
        sroot = os.path.join(root, ".zfs", "snapshot", name)
        assert os.path.isdir(sroot), f"{ctx}: {sroot} missing"
        diffs = workload.verify(sroot, m)
        assert not diffs, f"{ctx}: snapshot {name} changed since it was taken:\n" + "\n".join(diffs[:10])


def check_exported(oxzfs, vdir, pool, fs, sp):
    """zdb clean, and usedbysnapshots equal to the sum of the deadlists zdb decodes (nicenum
    precision: 3 significant digits each)."""
    zdb_check(vdir, pool)
    dl = zdb_deadlists(vdir, pool)
    names = [fs] + [n for n in sp if n.startswith(fs + "@")]
    missing = [n for n in names if n not in dl]
    assert not missing, f"zdb shows no deadlist for {missing}: {dl}"
    total = sum(dl[n] for n in names)
    want = sp[fs]["usedsnap"]
    assert abs(total - want) <= 0.01 * want + 1024 * len(names), \
        f"{fs}: usedbysnapshots {want} but zdb's deadlists hold {total:.0f} ({dl})"


# stripe-a9 (version 5000) and mirror-a12-v23 cover both deadlist formats by default; the raidz
# layouts repeat the same checks on other vdevs in the nightly run.
@pytest.mark.parametrize("lid,layout,n,ashift,version",
                         [pytest.param(*x, marks=[pytest.mark.nightly] if x[0].startswith("raidz") else []) for x in LAYOUTS],
                         ids=[x[0] for x in LAYOUTS])
def test_writes_after_snapshots(lid, layout, n, ashift, version, oxzfs):
    """Three snapshots between rounds of overwrites, truncates and deletes; zdb clean; each
    snapshot equals its model and the head the last one, across export/import; then writes go on
    after a re-import and a fourth snapshot, and the pool is checked again."""
    pool = "sn" + lid.replace("-", "")
    vdir, alt, fs, root = pool_with_fs(oxzfs, lid, pool, n, 192, layout, "-o", f"ashift={ashift}", "-o", f"version={version}")
    rng = new_rng(sum(map(ord, lid)))
    model, snaps = snapshot_rounds(oxzfs, pool, fs, root, rng, 4)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    sp = space(oxzfs, pool)
    assert sorted(n for n in sp if "@" in n) == sorted(f"{fs}@{s}" for s in snaps), sp
    check_space_identities(sp, fs)
    verify_snapshots(root, model, snaps, "read-only re-import")
    assert oxzfs.export(pool).returncode == 0
    check_exported(oxzfs, vdir, pool, fs, sp)
    # Read-write again: more changes, one more snapshot, the older ones untouched.
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    snapshot_between(oxzfs, fs, root, model, rng, snaps, "s4", 60, 60)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    sp = space(oxzfs, pool)
    check_space_identities(sp, fs)
    verify_snapshots(root, model, snaps, "after a second read-write import")
    assert oxzfs.export(pool).returncode == 0
    check_exported(oxzfs, vdir, pool, fs, sp)


def test_snapshot_space_follows_openzfs(oxzfs):
    """Exact figures of one scripted case: a 1M file of eight 128K records, snapshot, two
    records rewritten (the snapshot alone holds the old ones), snapshot, the file truncated to
    one record (six records held by both snapshots, two more by the second only)."""
    pool = "snspace"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "space", pool, 1, 128, lambda d: d, "-o", "ashift=9", "-O", "compression=off")
    rec = 128 << 10
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(os.urandom(8 * rec))
    assert oxzfs.zfs("snapshot", f"{fs}@a").returncode == 0
    with open(os.path.join(root, "f"), "r+b") as f:
        f.seek(2 * rec)
        f.write(os.urandom(2 * rec))
    assert oxzfs.zfs("snapshot", f"{fs}@b").returncode == 0
    os.truncate(os.path.join(root, "f"), rec)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    sp = space(oxzfs, pool)
    a, b, head = sp[f"{fs}@a"], sp[f"{fs}@b"], sp[fs]
    # Data records only: a holds records 2-3 alone, b records 2-3 (new) alone after the
    # truncate, both hold records 1 and 4-7; metadata adds a little to each.
    assert 2 * rec <= a["used"] < 2 * rec + (64 << 10), sp
    assert 2 * rec <= b["used"] < 2 * rec + (64 << 10), sp
    shared = head["usedsnap"] - a["used"] - b["used"]
    assert 5 * rec <= shared < 5 * rec + (64 << 10), sp
    assert a["refer"] >= 8 * rec and b["refer"] >= 8 * rec and rec <= head["refer"] < 2 * rec, sp
    check_space_identities(sp, fs)
    with open(os.path.join(root, ".zfs", "snapshot", "a", "f"), "rb") as f:
        assert len(f.read()) == 8 * rec
    assert os.path.getsize(os.path.join(root, "f")) == rec
    assert oxzfs.export(pool).returncode == 0
    check_exported(oxzfs, vdir, pool, fs, sp)


def test_snapshot_grammar_and_refusals(oxzfs):
    """OpenZFS's messages and exit codes; -r takes the descendants in one txg, -o user
    properties; a failed multi-snapshot command makes none."""
    pool = "sngram"
    base = os.path.join(oxzfs.base, "gram")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 1, 128)
    assert oxzfs.zpool("create", "-R", alt, pool, *devs).returncode == 0
    oxzfs.imported.append(pool)
    for d in ("a", "a/b", "a/b/c", "z"):
        assert oxzfs.zfs("create", f"{pool}/{d}").returncode == 0
    r = oxzfs.zfs("snapshot")
    assert r.returncode == 2 and "missing snapshot argument" in r.stderr, repr(r)
    r = oxzfs.zfs("snapshot", f"{pool}/a")
    assert r.returncode == 2 and "usage:" in r.stderr, repr(r)
    r = oxzfs.zfs("snapshot", f"{pool}/nope@x")
    assert r.returncode == 2 and f"cannot open '{pool}/nope': dataset does not exist" in r.stderr, repr(r)
    r = oxzfs.zfs("snapshot", f"{pool}/a@b%d")
    assert r.returncode == 1 and f"cannot create snapshot '{pool}/a@b%d': invalid character '%' in name" in r.stderr, repr(r)
    r = oxzfs.zfs("snapshot", f"{pool}/a@x@y")
    assert r.returncode == 1 and "multiple '@' and/or '#' delimiters in name" in r.stderr, repr(r)
    r = oxzfs.zfs("snapshot", "-o", "user:note=hello", f"{pool}/z@one")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zfs("snapshot", f"{pool}/z@one")
    assert r.returncode == 1 and f"cannot create snapshot '{pool}/z@one': dataset already exists" in r.stderr, repr(r)
    # One existing name among several: nothing is made.
    r = oxzfs.zfs("snapshot", f"{pool}/a@two", f"{pool}/z@one")
    assert r.returncode == 1 and "no snapshots were created" in r.stderr, repr(r)
    r = oxzfs.zfs("list", "-H", "-t", "snapshot", "-o", "name", "-r", pool)
    assert r.stdout.split() == [f"{pool}/z@one"], repr(r)
    r = oxzfs.zfs("snapshot", "-r", f"{pool}/a@rec")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zfs("list", "-Hp", "-t", "snapshot", "-o", "name,createtxg", "-r", pool)
    rows = dict(line.split("\t") for line in r.stdout.splitlines())
    assert sorted(rows) == sorted([f"{pool}/a@rec", f"{pool}/a/b@rec", f"{pool}/a/b/c@rec", f"{pool}/z@one"]), rows
    assert len({rows[f"{pool}/a@rec"], rows[f"{pool}/a/b@rec"], rows[f"{pool}/a/b/c@rec"]}) == 1, rows
    r = oxzfs.zpool("history", pool)
    assert f"zfs snapshot -r {pool}/a@rec" in r.stdout, r.stdout
    # A file system with snapshots has children for zfs destroy; -r takes them all.
    r = oxzfs.zfs("destroy", f"{pool}/z")
    assert r.returncode == 1 and f"cannot destroy '{pool}/z': filesystem has children" in r.stderr, repr(r)
    assert f"{pool}/z@one" in r.stderr, repr(r)
    r = oxzfs.zfs("destroy", "-r", f"{pool}/a")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zfs("list", "-H", "-t", "all", "-o", "name", "-r", pool)
    assert r.stdout.split() == [pool, f"{pool}/z", f"{pool}/z@one"], repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_fixture_v23_pool_written_after_its_snapshot(oxzfs, shared_fixtures):
    """The shared fixture written by zfs-fuse (version 23, an old-format deadlist, one snapshot):
    imported read-write, written, snapshotted again; zdb clean, @s1 still equals zfs-fuse's own
    manifest of it, @s2 and the head equal what was there."""
    if "basic" not in shared_fixtures:
        pytest.skip("shared fixture 'basic' not present")
    fdir, src = shared_fixtures["basic"]
    vdir = copy_vdevs(src, os.path.join(oxzfs.base, "basic", "vdevs"))
    alt = os.path.join(oxzfs.base, "basic", "alt")
    pool = "tank-basic"
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    mp = oxzfs.zfs("get", "-H", "-o", "value", "mountpoint", pool).stdout.strip()
    assert os.path.isdir(mp), mp
    before = manifest_mod.manifest(mp)
    files = sorted(e["path"] for e in before if e["type"] == "file" and e.get("nlink") == 1 and e["size"] > 0)
    assert len(files) > 4
    # Overwrite part of one file, delete two, and run a workload in a new directory.
    victim, gone = files[0], files[1:3]
    with open(os.path.join(mp, victim), "r+b") as f:
        f.write(os.urandom(min(4096, os.path.getsize(os.path.join(mp, victim)))))
    for g in gone:
        os.unlink(os.path.join(mp, g))
    os.mkdir(os.path.join(mp, "wl"))
    model = workload.Model()
    model.xattr_max = 40000
    steps(os.path.join(mp, "wl"), model, new_rng(7), 50)
    at_s2 = manifest_mod.manifest(mp)
    assert oxzfs.zfs("snapshot", f"{pool}@s2").returncode == 0
    snap_model = copy.deepcopy(model)
    steps(os.path.join(mp, "wl"), model, new_rng(8), 30)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    assert_manifest(os.path.join(mp, ".zfs", "snapshot", "s1"), os.path.join(fdir, "tank-basic@s1.manifest.jsonl"))
    s2 = os.path.join(mp, ".zfs", "snapshot", "s2")
    d = diff_manifests(manifest_mod.manifest(s2), at_s2)
    assert not d, f"@s2 differs from the head when it was taken:\n{d}"
    diffs = workload.verify(os.path.join(s2, "wl"), snap_model)
    assert not diffs, "\n".join(diffs[:10])
    diffs = workload.verify(os.path.join(mp, "wl"), model)
    assert not diffs, "\n".join(diffs[:10])
    sp = space(oxzfs, pool)
    check_space_identities(sp, pool)
    assert oxzfs.export(pool).returncode == 0
    check_exported(oxzfs, vdir, pool, pool, sp)


@pytest.mark.parametrize("version", [5000, 23])
def test_destroy_snapshots(version, oxzfs):
    """Five snapshots between workload rounds, destroyed one by one in a random order: after each
    the others still equal their models, the head its own; OpenZFS's identities hold, with one
    snapshot left its used is all of usedbysnapshots, with none usedbysnapshots is 0; zdb finds
    the pool clean (every block only the destroyed snapshot held is freed, nothing more)."""
    pool = f"sndes{version}"
    vdir, alt, fs, root = pool_with_fs(oxzfs, f"destroy{version}", pool, 2, 512, lambda d: ["mirror"] + d,
                                       "-o", "ashift=12", "-o", f"version={version}")
    rng = new_rng(version)
    model, snaps = snapshot_rounds(oxzfs, pool, fs, root, rng, 6, ops=70)
    r = oxzfs.zfs("destroy", f"{fs}@nope")
    assert r.returncode == 1 and "could not find any snapshots to destroy" in r.stderr, repr(r)
    order = list(snaps)
    rng.shuffle(order)
    for i, name in enumerate(order):
        r = oxzfs.zfs("destroy", f"{fs}@{name}")
        assert r.returncode == 0, repr(r)
        del snaps[name]
        steps(root, model, rng, 15)
        assert oxzfs.export(pool).returncode == 0
        r = oxzfs.import_ro(vdir, pool, alt)
        assert r.returncode == 0, repr(r)
        sp = space(oxzfs, pool)
        left = check_space_identities(sp, fs)
        assert sorted(left) == sorted(f"{fs}@{s}" for s in snaps), (left, snaps.keys())
        if len(left) == 1:
            (only,) = left.values()
            assert only["used"] == sp[fs]["usedsnap"], sp
        if not left:
            assert sp[fs]["usedsnap"] == 0, sp
        verify_snapshots(root, model, snaps, f"after destroying {order[:i + 1]}")
        assert oxzfs.export(pool).returncode == 0
        check_exported(oxzfs, vdir, pool, fs, sp)
        r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        oxzfs.imported.append(pool)
    assert oxzfs.export(pool).returncode == 0


@pytest.mark.parametrize("version", [5000, 23])
def test_clones_written_and_destroyed(version, oxzfs):
    """zfs clone of a snapshot in the middle of a file system's history; the clone and the file
    system are both written (the clone's deadlist keeps what it frees of the origin's blocks),
    the clone is snapshotted; zdb clean and every dataset and snapshot equal to its model across
    export/import; the origin refuses to go while the clone lives; clone snapshot, clone and
    origin destroyed, zdb clean again."""
    pool = f"sncl{version}"
    vdir, alt, fs, root = pool_with_fs(oxzfs, f"clone{version}", pool, 3, 384, lambda d: ["raidz1"] + d,
                                       "-o", "ashift=9", "-o", f"version={version}")
    cl = f"{pool}/cl"
    croot = os.path.join(alt, cl)
    rng = new_rng(version + 1)
    model, snaps = snapshot_rounds(oxzfs, pool, fs, root, rng, 3, ops=70)
    r = oxzfs.zfs("clone", f"{fs}@s1", cl)
    assert r.returncode == 0, repr(r)
    cmodel = copy.deepcopy(snaps["s1"])
    verify_head(croot, cmodel, "a new clone")
    r = oxzfs.zfs("get", "-H", "-o", "value", "origin", cl, fs)
    assert r.stdout.split() == [f"{fs}@s1", "-"], repr(r)
    steps(croot, cmodel, rng, 70)
    assert oxzfs.zfs("snapshot", f"{cl}@c1").returncode == 0
    csnaps = {"c1": copy.deepcopy(cmodel)}
    steps(croot, cmodel, rng, 50)
    steps(root, model, rng, 50)
    r = oxzfs.zfs("destroy", f"{fs}@s1")
    assert r.returncode == 1 and "snapshot has dependent clones" in r.stderr, repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    verify_snapshots(root, model, snaps, "origin file system")
    verify_snapshots(croot, cmodel, csnaps, "clone")
    sp = space(oxzfs, pool)
    check_space_identities(sp, fs)
    check_space_identities(sp, cl, clone=True)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    for victim in (f"{cl}@c1", cl, f"{fs}@s1"):
        r = oxzfs.zfs("destroy", victim)
        assert r.returncode == 0, repr(r)
    del snaps["s1"]
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    verify_snapshots(root, model, snaps, "after the clone and its origin went")
    sp = space(oxzfs, pool)
    assert sorted(sp) == sorted([pool, fs] + [f"{fs}@{s}" for s in snaps]), sp
    check_space_identities(sp, fs)
    assert oxzfs.export(pool).returncode == 0


@pytest.mark.parametrize("version", [5000, 23])
def test_rollback(version, oxzfs):
    """zfs rollback: refused past newer snapshots (naming them), with -r the newer ones go; the
    head equals the snapshot's model again, takes more writes and snapshots, and the pool stays
    clean for zdb with its space identities."""
    pool = f"snrb{version}"
    vdir, alt, fs, root = pool_with_fs(oxzfs, f"rollback{version}", pool, 2, 384, lambda d: ["mirror"] + d,
                                       "-o", "ashift=12", "-o", f"version={version}")
    rng = new_rng(version + 2)
    model, snaps = snapshot_rounds(oxzfs, pool, fs, root, rng, 4, ops=60)
    r = oxzfs.zfs("rollback", f"{fs}@s2")
    assert r.returncode == 1, repr(r)
    assert f"cannot rollback to '{fs}@s2': more recent snapshots or bookmarks exist" in r.stderr, repr(r)
    assert f"{fs}@s3" in r.stderr, repr(r)
    r = oxzfs.zfs("rollback", f"{fs}@s3")
    assert r.returncode == 0, repr(r)
    model = copy.deepcopy(snaps["s3"])
    verify_head(root, model, "after rollback to the latest snapshot")
    steps(root, model, rng, 40)
    r = oxzfs.zfs("rollback", "-r", f"{fs}@s2")
    assert r.returncode == 0, repr(r)
    del snaps["s3"]
    model = copy.deepcopy(snaps["s2"])
    verify_head(root, model, "after rollback -r")
    snapshot_between(oxzfs, fs, root, model, rng, snaps, "s3b", 40, 30)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    verify_snapshots(root, model, snaps, "re-imported after rollbacks")
    sp = space(oxzfs, pool)
    assert sorted(n for n in sp if "@" in n) == sorted(f"{fs}@{s}" for s in snaps), sp
    check_space_identities(sp, fs)
    assert oxzfs.export(pool).returncode == 0
    check_exported(oxzfs, vdir, pool, fs, sp)


def zfs_fuse_turn(vdir, zalt, pool, fs, zroot, ours):
    """zfs-fuse's part of the crossing: import, compare the head and each snapshot with OURS,
    snapshot @zf, write, destroy @s1, export. (manifest at @zf, manifest at the end)."""
    def z(*a):
        r = subprocess.run(list(a), capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse {' '.join(a)}:\n{r.stdout}{r.stderr}"
    z("zpool", "import", "-d", vdir, "-R", zalt, pool)
    for n, want in ours.items():
        # zfs-fuse has no .zfs directory: a snapshot is seen through a clone of it.
        if n:
            z("zfs", "clone", f"{fs}@{n}", f"{pool}/view-{n}")
        where = os.path.join(zalt, pool, f"view-{n}") if n else zroot
        d = diff_manifests(_strip_xattrs(manifest_mod.manifest(where)), want)
        assert not d, f"zfs-fuse sees {n or 'the head'} differently:\n{d}"
        if n:
            # zfs-fuse may call the mount busy for a moment after the walk: try again.
            for _ in range(40):
                r = subprocess.run(["zfs", "destroy", "-f", f"{pool}/view-{n}"], capture_output=True, text=True)
                if r.returncode == 0:
                    break
                time.sleep(0.5)
            assert r.returncode == 0, f"zfs-fuse zfs destroy {pool}/view-{n}:\n{r.stdout}{r.stderr}"
    z("zfs", "snapshot", f"{fs}@zf")
    at_zf = _strip_xattrs(manifest_mod.manifest(zroot))
    with open(os.path.join(zroot, "by-zfs-fuse"), "wb") as f:
        f.write(os.urandom(400000))
    z("zfs", "destroy", f"{fs}@s1")
    after = _strip_xattrs(manifest_mod.manifest(zroot))
    z("zpool", "export", pool)
    return at_zf, after


def test_v23_snapshots_cross_with_zfs_fuse(oxzfs, work_dir):
    """Snapshots oxzfs took on a version-23 pool (old-format deadlists): zfs-fuse imports it, sees
    the head and each snapshot as oxzfs does, snapshots, writes and destroys one of ours; oxzfs
    imports what zfs-fuse left, reads it alike, writes and snapshots again; zdb clean each time."""
    pool = "sncross23"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "cross23", pool, 2, 256, lambda d: ["mirror"] + d, "-o", "version=23")
    model, snaps = snapshot_rounds(oxzfs, pool, fs, root, new_rng(23), 3, ops=60)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    ours = {n: _strip_xattrs(manifest_mod.manifest(os.path.join(root, ".zfs", "snapshot", n))) for n in snaps}
    ours[""] = _strip_xattrs(manifest_mod.manifest(root))
    assert oxzfs.export(pool).returncode == 0
    zalt = os.path.join(oxzfs.base, "cross23", "zfs-fuse-alt")
    zroot = os.path.join(zalt, fs)
    # ZfsFuse fails the test naming what to install when zfs-fuse is missing (MissingTool).
    with oracle_pools.ZfsFuse(work_dir):
        try:
            at_zf, after = zfs_fuse_turn(vdir, zalt, pool, fs, zroot, ours)
        finally:
            subprocess.run(["zpool", "export", "-f", pool], capture_output=True)
    zdb_check(vdir, pool)
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert not diff_manifests(_strip_xattrs(manifest_mod.manifest(root)), after)
    with open(os.path.join(root, "by-oxzfs"), "wb") as f:
        f.write(os.urandom(300000))
    os.unlink(os.path.join(root, "by-zfs-fuse"))
    assert oxzfs.zfs("snapshot", f"{fs}@ox").returncode == 0
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    for n, want in (("s2", ours["s2"]), ("zf", at_zf)):
        d = diff_manifests(_strip_xattrs(manifest_mod.manifest(os.path.join(root, ".zfs", "snapshot", n))), want)
        assert not d, f"@{n} differs after the crossing:\n{d}"
    sp = space(oxzfs, pool)
    assert sorted(n for n in sp if "@" in n) == [f"{fs}@ox", f"{fs}@s2", f"{fs}@zf"], sp
    check_space_identities(sp, fs)
    assert oxzfs.export(pool).returncode == 0
