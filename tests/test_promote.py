"""`zfs promote`: a clone takes its origin's snapshots and place.

The oracle for the accounting is zfs-fuse: on two copies of one version-23 pool (made by oxzfs,
with snapshots, a clone and writes on both sides), oxzfs promotes on one copy and zfs-fuse on the
other. Promote moves no block, so every dataset's origin and space figures must come out equal,
to the byte; and zfs-fuse, importing the copy oxzfs promoted, must list it exactly as the copy it
promoted itself. On version 5000 (new-format deadlists, dd_clones) the checks are OpenZFS's zdb
(no leak, the deadlists it decodes adding up to usedbysnapshots) and the end of the life cycle:
after the promote the old origin is destroyed as a clone, and the pool comes back to where it was.
Every dataset and snapshot is compared with the workload model taken with it throughout.
"""
import copy
import os
import re
import subprocess

import pytest

from conftest import copy_vdevs
from test_bookmarks import zdb_bookmarks
from test_snapshots import (check_exported, check_space_identities, new_rng, pool_with_fs, snapshot_rounds, space,
                            steps, verify_head, verify_snapshots)
from test_write import zdb_check, zdb_cmd
import oracle_pools

PROPS = ["origin", "used", "usedbysnapshots", "usedbydataset", "usedbychildren", "usedbyrefreservation", "referenced"]


def listing(run, pool):
    """`zfs get -Hp -r -o name,property,value PROPS POOL` through RUN (zfs-fuse's zfs list has no
    -p), as {name: (value of each of PROPS)}: snapshots included, as zfs get -r lists them
    (bookmarks, which it lists too, left out)."""
    r = run("get", "-Hp", "-r", "-o", "name,property,value", ",".join(PROPS), pool)
    assert r.returncode == 0, f"zfs get:\n{r.stdout}{r.stderr}"
    vals = {}
    for line in r.stdout.splitlines():
        name, prop, value = line.split("\t")
        vals.setdefault(name, {})[prop] = value
    return {n: tuple(v.get(p, "-") for p in PROPS) for n, v in vals.items() if "#" not in n}


def zfs_fuse(*a):
    return subprocess.run(["zfs", *a], capture_output=True, text=True)


def clone_history(oxzfs, pool, version, layout, ndevs, tag):
    """POOL with file system fs (snapshots s1, s2 between rounds of the workload), a clone cl of
    fs@s1 written and snapshotted (c1), then both written again: (vdir, alt, fs, cl, models)
    where models = {dataset or snapshot name: model}."""
    vdir, alt, fs, root = pool_with_fs(oxzfs, tag, pool, ndevs, 384, layout, "-o", "ashift=9", "-o",
                                       f"version={version}")
    cl = f"{pool}/cl"
    rng = new_rng(version + 7)
    model, snaps = snapshot_rounds(oxzfs, pool, fs, root, rng, 3, ops=60)
    r = oxzfs.zfs("clone", f"{fs}@s1", cl)
    assert r.returncode == 0, repr(r)
    croot = os.path.join(alt, cl)
    cmodel = copy.deepcopy(snaps["s1"])
    steps(croot, cmodel, rng, 60)
    assert oxzfs.zfs("snapshot", f"{cl}@c1").returncode == 0, "clone snapshot"
    models = {f"{fs}@{n}": m for n, m in snaps.items()}
    models[f"{cl}@c1"] = copy.deepcopy(cmodel)
    steps(croot, cmodel, rng, 40)
    steps(root, model, rng, 40)
    models[fs], models[cl] = model, cmodel
    return vdir, alt, fs, cl, models


def check_dir_clones(vdir, pool):
    """Every DSL directory's clones ZAP (dd_clones), as OpenZFS's zdb decodes the MOS, lists
    exactly the head datasets of the directories whose origin is one of its snapshots (OpenZFS
    removes an entry with VERIFY0 when it destroys or promotes a clone: a missing one stops it)."""
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdir, "-dddd", pool], capture_output=True, text=True,
                       errors="replace", timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    mos = next((sec for sec in re.split(r"\n(?=Dataset )", r.stdout) if sec.startswith("Dataset mos [META]")), None)
    assert mos, r.stdout[:500]
    objs = {}
    for block in re.split(r"\n(?=\s+Object\s+lvl)", mos):
        m = re.search(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+(.+?)\s*$", block, re.M)
        if not m:
            continue
        fields = dict(re.findall(r"^\t\t(\w+) = (\d+)\s*$", block, re.M))
        entries = re.findall(r"^\t\t([0-9a-f]+) = (\d+)\s*$", block, re.M)
        objs[int(m.group(1))] = (m.group(2), fields, entries)
    dirs = {o: f for o, (t, f, _) in objs.items() if t == "DSL directory"}
    ds_dir = {o: int(f["dir_obj"]) for o, (t, f, _) in objs.items() if t == "DSL dataset" and "dir_obj" in f}
    assert dirs and ds_dir, r.stdout[:2000]
    for d, f in dirs.items():
        want = sorted(int(e["head_dataset_obj"]) for e in dirs.values()
                      if int(e["origin_obj"]) and ds_dir.get(int(e["origin_obj"])) == d)
        clones = int(f["clones"])
        if clones == 0:
            assert not want, f"DSL dir {d} has clones {want} but no dd_clones"
            continue
        got = sorted(int(v) for _, v in objs[clones][2])
        assert got == want, f"DSL dir {d}: dd_clones {clones} lists {got}, its clones are {want}"


def verify_all(alt, models, ctx):
    """Each file system's head and snapshots (under .zfs/snapshot) equal to their models."""
    for name, m in models.items():
        if "@" not in name:
            root = os.path.join(alt, name)
            snaps = {k.split("@")[1]: v for k, v in models.items() if k.startswith(name + "@")}
            verify_snapshots(root, m, snaps, f"{ctx}: {name}")


def test_promote_v23_equals_zfs_fuse(oxzfs, work_dir):
    """Version 23 (old-format deadlists): a clone cl of fs@s1 and a clone cc of cl@c1. cc is
    promoted twice: first as a clone of a clone (it takes cl@c1; cl becomes its clone, and cc a
    clone of fs@s1), then as a plain clone (it takes fs@s1). oxzfs and zfs-fuse, each on a copy
    of the same pool, leave every dataset with the same origin and the same space figures;
    zfs-fuse lists oxzfs's copy as its own; every head and snapshot reads as its model under its
    new parent; zdb clean; the demoted file systems then go (destroy of clones) and the pool
    stays clean."""
    pool = "prom23"
    vdir, alt, fs, cl, models = clone_history(oxzfs, pool, 23, lambda d: ["mirror"] + d, 2, "prom23")
    cc = f"{pool}/cc"
    r = oxzfs.zfs("clone", f"{cl}@c1", cc)
    assert r.returncode == 0, repr(r)
    models[cc] = copy.deepcopy(models[f"{cl}@c1"])
    steps(os.path.join(alt, cc), models[cc], new_rng(2323), 40)
    assert oxzfs.export(pool).returncode == 0
    base = os.path.join(oxzfs.base, "prom23")
    ours_dir = copy_vdevs(vdir, os.path.join(base, "ours"))
    theirs_dir = copy_vdevs(vdir, os.path.join(base, "theirs"))

    r = oxzfs.zpool("import", "-d", ours_dir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    ours = []
    for _ in range(2):
        r = oxzfs.zfs("promote", cc)
        assert r.returncode == 0 and r.stderr == "", repr(r)
        ours.append(listing(oxzfs.zfs, pool))
    moved = {{f"{fs}@s1": f"{cc}@s1", f"{cl}@c1": f"{cc}@c1"}.get(k, k): v for k, v in models.items()}
    verify_all(alt, moved, "after oxzfs's promotes")
    assert oxzfs.export(pool).returncode == 0
    zdb_check(ours_dir, pool)

    zalt = os.path.join(base, "zfs-fuse-alt")
    theirs = []
    with oracle_pools.ZfsFuse(work_dir):
        try:
            for d in (theirs_dir, ours_dir):
                r = subprocess.run(["zpool", "import", "-d", d, "-R", zalt, pool], capture_output=True, text=True)
                assert r.returncode == 0, f"zfs-fuse import of {d}:\n{r.stdout}{r.stderr}"
                if d == theirs_dir:
                    for _ in range(2):
                        r = zfs_fuse("promote", cc)
                        assert r.returncode == 0, f"zfs-fuse promote:\n{r.stdout}{r.stderr}"
                        theirs.append(listing(zfs_fuse, pool))
                else:
                    seen = listing(zfs_fuse, pool)
                r = subprocess.run(["zpool", "export", pool], capture_output=True, text=True)
                assert r.returncode == 0, f"zfs-fuse export:\n{r.stdout}{r.stderr}"
        finally:
            subprocess.run(["zpool", "export", "-f", pool], capture_output=True)
    # The pool's own root dataset holds the MOS's changes of each side's promote txg: compare
    # the datasets below it.
    below = lambda lst: {k: v for k, v in lst.items() if k != pool}  # noqa: E731
    for i, what in enumerate(("the first promote (clone of a clone)", "the second promote")):
        assert below(ours[i]) == below(theirs[i]), \
            f"after {what}, oxzfs's figures differ from zfs-fuse's:\n ours   {ours[i]}\n theirs {theirs[i]}"
    mine = below(ours[1])
    assert [mine[n][0] for n in (fs, cl, cc)] == [f"{cc}@s1", f"{cc}@c1", "-"], mine
    # zfs-fuse's import mounts the heads and writes to them as it does (1-2 KiB each, synced
    # sooner or later): of a head, its origin and snapshot space must be ours to the byte, and
    # its used, usedbydataset and referenced within 16 KiB; a snapshot cannot change at all.
    assert sorted(below(seen)) == sorted(mine), seen
    for name, row in mine.items():
        got = seen[name]
        if "@" in name:
            assert got == row, f"zfs-fuse reads {name} of our promote as {got}, we {row}"
            continue
        assert got[:1] + got[2:3] + got[4:6] == row[:1] + row[2:3] + row[4:6], f"zfs-fuse reads {name} as {got}, we {row}"
        for i in (1, 3, 6):
            assert abs(int(got[i]) - int(row[i])) <= 16384, f"zfs-fuse reads {name}'s {PROPS[i]} as {got[i]}, we {row[i]}"

    r = oxzfs.zpool("import", "-d", ours_dir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    for victim in (f"{fs}@s2", fs, cl):
        r = oxzfs.zfs("destroy", victim)
        assert r.returncode == 0, repr(r)
    sp = space(oxzfs, pool)
    assert sorted(sp) == sorted([pool, cc, f"{cc}@s1", f"{cc}@c1"]), sp
    check_space_identities(sp, cc)
    verify_all(alt, {k: v for k, v in moved.items() if k.startswith(cc)}, "after the old origins went")
    assert oxzfs.export(pool).returncode == 0
    zdb_check(ours_dir, pool)


def exported_clean(oxzfs, vdir, pool, alt, fs, clone=None):
    """Export POOL; zdb clean and dd_clones right; read-only, the space identities of file
    system FS (and of CLONE, a clone); FS's snapshot space as zdb decodes its deadlists."""
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    check_dir_clones(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    sp = space(oxzfs, pool)
    check_space_identities(sp, fs)
    if clone:
        check_space_identities(sp, clone, clone=True)
    assert oxzfs.export(pool).returncode == 0
    check_exported(oxzfs, vdir, pool, fs, sp)


def test_promote_v5000_life_cycle(oxzfs):
    """Version 5000 on raidz1 (new-format deadlists, dd_clones): promote; origins swap; the
    moved snapshots read as their models under the clone; space identities hold and the
    deadlists OpenZFS's zdb decodes add up to usedbysnapshots; used is conserved; promoting
    back restores the first figures exactly; then the demoted origin is destroyed and the pool
    is clean, with the promoted file system's figures those of a plain file system."""
    pool = "prom5k"
    vdir, alt, fs, cl, models = clone_history(oxzfs, pool, 5000, lambda d: ["raidz1"] + d, 3, "prom5k")
    # A clone of the clone, promoted over it and back first: its origin's origin is a real
    # snapshot (fs@s1), not $ORIGIN@$ORIGIN.
    cc = f"{pool}/cc"
    assert oxzfs.zfs("clone", f"{cl}@c1", cc).returncode == 0
    for name, origin in ((cc, f"{fs}@s1"), (cl, f"{fs}@s1")):
        r = oxzfs.zfs("promote", name)
        assert r.returncode == 0, repr(r)
        r = oxzfs.zfs("get", "-H", "-o", "value", "origin", name, cl if name == cc else cc)
        assert r.stdout.split() == [origin, f"{name}@c1"], repr(r)
    verify_all(alt, models, "after a clone of a clone was promoted and back")
    assert oxzfs.zfs("destroy", cc).returncode == 0
    # Bookmarks of the origin file system: the one up to the origin moves with the snapshots.
    for s in ("s1", "s2"):
        assert oxzfs.zfs("bookmark", f"{fs}@{s}", f"{fs}#b{s[1]}").returncode == 0
    marks = {f"b{s[1]}": tuple(int(x) for x in oxzfs.zfs("get", "-Hp", "-o", "value", "guid,createtxg", f"{fs}@{s}").stdout.split())
             for s in ("s1", "s2")}
    r = oxzfs.zpool("sync", pool)
    assert r.returncode == 0, repr(r)
    before = listing(oxzfs.zfs, pool)
    r = oxzfs.zfs("promote", cl)
    assert r.returncode == 0 and r.stderr == "", repr(r)
    after = listing(oxzfs.zfs, pool)
    assert after[cl][0] == "-" and after[fs][0] == f"{cl}@s1", after
    assert sorted(after) == sorted(k.replace(f"{fs}@s1", f"{cl}@s1") for k in before), after
    # What the two file systems use together does not change (no block moves).
    used = lambda lst, names: sum(int(lst[n][1]) for n in names)  # noqa: E731
    assert used(after, [fs, cl]) == used(before, [fs, cl]), (before, after)
    moved = {k.replace(f"{fs}@s1", f"{cl}@s1"): v for k, v in models.items()}
    verify_all(alt, moved, "after promote")
    r = oxzfs.zfs("list", "-H", "-o", "name", "-t", "bookmark", "-r", pool)
    assert r.stdout.split() == [f"{cl}#b1", f"{fs}#b2"], repr(r)
    exported_clean(oxzfs, vdir, pool, alt, cl, fs)
    assert zdb_bookmarks(vdir, cl) == {"b1": marks["b1"]} and zdb_bookmarks(vdir, fs) == {"b2": marks["b2"]}

    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    # And back: fs takes s1 again, every figure as before the first promote.
    r = oxzfs.zfs("promote", fs)
    assert r.returncode == 0, repr(r)
    back = listing(oxzfs.zfs, pool)
    # The export and import between wrote to the heads (their used and usedbydataset move by a
    # few KiB); origins, snapshot space and every snapshot's figures are as before.
    assert sorted(back) == sorted(before), back
    for name in (n for n in before if n != pool):
        keep = range(7) if "@" in name else (0, 2, 4, 5)
        assert [back[name][i] for i in keep] == [before[name][i] for i in keep], \
            f"{name}: {back[name]} after promoting back, {before[name]} before the first promote"
    verify_all(alt, models, "after promoting back")
    r = oxzfs.zfs("promote", cl)
    assert r.returncode == 0, repr(r)
    for victim in (f"{fs}@s2", fs):
        r = oxzfs.zfs("destroy", victim)
        assert r.returncode == 0, repr(r)
    final = listing(oxzfs.zfs, pool)
    assert sorted(final) == sorted([pool, cl, f"{cl}@s1", f"{cl}@c1"]), final
    verify_all(alt, {k: v for k, v in moved.items() if not k.startswith(fs)}, "after the old origin went")
    exported_clean(oxzfs, vdir, pool, alt, cl)


def test_promote_refusals(oxzfs):
    """OpenZFS's refusals, each leaving the datasets as they were: no clone, a snapshot, a
    name conflict (naming the snapshot and the origin), a read-only pool, wrong arguments."""
    pool = "promref"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "promref", pool, 1, 256, lambda d: d)
    cl = f"{pool}/cl"
    for n in ("a", "b"):
        with open(os.path.join(root, n), "wb") as f:
            f.write(os.urandom(100000))
        assert oxzfs.zfs("snapshot", f"{fs}@{n}").returncode == 0
    assert oxzfs.zfs("clone", f"{fs}@b", cl).returncode == 0
    assert oxzfs.zfs("snapshot", f"{cl}@a").returncode == 0
    assert oxzfs.zpool("sync", pool).returncode == 0
    before = listing(oxzfs.zfs, pool)
    cases = [
        ((fs,), 1, f"cannot promote '{fs}': not a cloned filesystem\n"),
        ((pool,), 1, f"cannot promote '{pool}': not a cloned filesystem\n"),
        ((f"{cl}@a",), 1, f"cannot open '{cl}@a': operation not applicable to datasets of this type\n"),
        ((cl,), 1, f"cannot promote '{cl}': conflicting snapshot 'a' from parent '{fs}@b'\n"),
        ((f"{pool}/nosuch",), 1, f"cannot open '{pool}/nosuch': dataset does not exist\n"),
        ((), 2, "missing clone filesystem argument\nusage:\n\tpromote <clone-filesystem>\n"),
        ((cl, fs), 2, "too many arguments\nusage:\n\tpromote <clone-filesystem>\n"),
    ]
    for args, code, msg in cases:
        r = oxzfs.zfs("promote", *args)
        assert (r.returncode, r.stderr) == (code, msg), repr(r)
    # (The pool's root counts the MOS, which each refusal's sync rewrote.)
    assert {k: v for k, v in listing(oxzfs.zfs, pool).items() if k != pool} == {k: v for k, v in before.items() if k != pool}
    # Without the conflict it goes; then the pool read-only refuses.
    assert oxzfs.zfs("destroy", f"{cl}@a").returncode == 0
    assert oxzfs.zfs("promote", cl).returncode == 0
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    r = oxzfs.zfs("promote", fs)
    assert (r.returncode, r.stderr) == (1, f"cannot promote '{fs}': pool is read-only\n"), repr(r)
    assert oxzfs.export(pool).returncode == 0
