"""Dedup writes, judged by OpenZFS 2.1's zdb and a model of the blocks written.

The model: every file is a list of records (recordsize each, random so that nothing compresses
and no two differ by chance). A record that appears k times over the pool's dedup datasets is one
DDT entry with refcount k: class "duplicate" when k > 1, else "unique", in histogram bucket
2^floor(log2 k). zdb -DD must show exactly those entries and buckets, zdb -bcc -d no leaks (its
leak check claims a dedup block once and counts its references down through the DDT), and the
re-imported files their bytes. References go down as files are deleted and overwritten; entries
move from duplicate to unique and go when nothing references them, and with them the class
objects ("All DDTs are empty").

Layouts: ashift 9 and 12, version 5000 and 23, a dedup vdev (the DDT's ZAPs in the dedup class),
a special vdev (the DDT's ZAPs there), copies=2, and each dedup checksum zdb 2.1 knows.
"""
import collections
import os
import random
import re
import shutil
import subprocess

import pytest

import workload
import zdbparse
from test_gang import forced_ganging_daemon
from test_write import ZDB, make_devs, new_pool, zdb_check, zdb_cmd

REC = 16 << 10

CHECKSUM_OF = {"on": "sha256", "verify": "sha256", "sha256": "sha256", "sha512,verify": "sha512", "sha512": "sha512",
               "skein": "skein", "skein,verify": "skein", "edonr,verify": "edonr"}


def run_zdb(vdir, pool, opt):
    if not os.access(ZDB, os.X_OK):
        pytest.fail(f"OpenZFS zdb not found at {ZDB}: run scripts/install-deps.sh")
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdir, opt, pool], capture_output=True, text=True, errors="replace",
                       timeout=600, env=env)
    text = r.stdout + r.stderr
    assert r.returncode == 0, f"zdb {opt} {pool} exited {r.returncode}:\n{text[-3000:]}"
    return text


def histogram_after(text, marker):
    """The DDT histogram table following MARKER: {bucket: (blocks, ref_blocks)}."""
    hist = {}
    if marker in text:
        for m in re.finditer(r"^\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+\S+\s+(\d+)\s", text.split(marker, 1)[1], re.M):
            hist[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    return hist


def zdb_ddt(vdir, pool):
    """zdb -DD: ({(checksum, class): entries}, {bucket: (blocks, ref_blocks)} aggregated, text)."""
    text = run_zdb(vdir, pool, "-DD")
    objs = {(m.group(1), m.group(2)): int(m.group(3))
            for m in re.finditer(r"^DDT-(\w+)-zap-(\w+): (\d+) entries", text, re.M)}
    return objs, histogram_after(text, "DDT histogram (aggregated"), text


def expected_ddt(files, checksum):
    """The DDT the model's files make: ({(checksum, class): entries}, {bucket: (blocks, refs)})."""
    counts = collections.Counter(rec for recs in files.values() for rec in recs)
    objs = collections.Counter()
    hist = collections.defaultdict(lambda: [0, 0])
    for k in counts.values():
        objs[(checksum, "duplicate" if k > 1 else "unique")] += 1
        b = 1 << (k.bit_length() - 1)
        hist[b][0] += 1
        hist[b][1] += k
    return dict(objs), {b: tuple(v) for b, v in hist.items()}


def write_file(path, recs):
    with open(path, "wb") as f:
        for r in recs:
            f.write(r)
        os.fsync(f.fileno())


def check_files(root, files):
    for rel, recs in files.items():
        with open(os.path.join(root, rel), "rb") as f:
            got = f.read()
        assert got == b"".join(recs), f"{rel}: {len(got)} bytes differ from the {len(recs)} records written"


def reimport(ox, vdir, alt, pool, files):
    """Import POOL read-write again; its files must read back as the model has them."""
    assert ox.run("zpool", "import", "-d", vdir, "-R", alt, pool).returncode == 0
    ox.imported.append(pool)
    check_files(os.path.join(alt, pool), files)


def delete_all_and_check(ox, vdir, alt, pool, files, checksum):
    """Re-import, delete every file, export: the DDT must be empty and zdb clean."""
    reimport(ox, vdir, alt, pool, files)
    for rel in list(files):
        os.unlink(os.path.join(alt, pool, rel))
    files.clear()
    assert ox.export(pool).returncode == 0
    check_pool(ox, vdir, pool, files, checksum, False)


def check_pool(ox, vdir, pool, files, checksum, dedup_class):
    """Exported POOL: zdb clean, its DDT the model's, the dedup class used when there is one, and
    our own zdb's block totals and dedup savings those of OpenZFS's."""
    text = zdb_check(vdir, pool)
    theirs = zdbparse.parse(text)
    ours = ox.zdb("-e", "-p", vdir, "-bb", pool)
    got = zdbparse.parse(ours.stdout)
    assert (got.totals(), got.bp_deduped) == (theirs.totals(), theirs.bp_deduped), repr(ours)
    objs, hist, ddt_text = zdb_ddt(vdir, pool)
    want_objs, want_hist = expected_ddt(files, checksum)
    if not want_objs:
        assert "All DDTs are empty" in ddt_text and not objs, ddt_text[-2000:]
        return text
    assert objs == want_objs, f"DDT objects {objs}, model {want_objs}\n{ddt_text[-2000:]}"
    assert hist == want_hist, f"DDT histogram {hist}, model {want_hist}\n{ddt_text[-2000:]}"
    # zdb -S simulates dedup over every level-0 data block: the same table from the bps.
    sim = histogram_after(run_zdb(vdir, pool, "-S"), "Simulated DDT histogram")
    assert sim == want_hist, f"zdb -S histogram {sim}, model {want_hist}"
    deduped = int(re.search(r"bp deduped:\s+(\d+)", text).group(1))
    if any(c == "duplicate" for _, c in want_objs):
        assert deduped > 0, text[-2000:]
    if dedup_class:
        used = int(re.search(r"Dedup class\s+(\d+)", text).group(1))
        assert used > 0, f"the DDT is not in the dedup class:\n{text[-2000:]}"
    return text


LAYOUTS = [
    # id, ashift, version, extra class, dataset properties
    ("a9-v5000", 9, 5000, None, {"dedup": "on"}),
    ("a12-dedupvdev-copies2", 12, 5000, "dedup", {"dedup": "sha512,verify", "copies": "2"}),
    ("a12-special", 12, 5000, "special", {"dedup": "skein"}),
    ("a9-v23", 9, 23, None, {"dedup": "verify", "compression": "on"}),
    ("a12-edonr-lz4", 12, 5000, None, {"dedup": "edonr,verify", "compression": "lz4"}),
]


@pytest.mark.parametrize("lid,ashift,version,extra,props", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_dedup_table_follows_references(lid, ashift, version, extra, props, oxzfs):
    pool = "dd" + lid.replace("-", "")[:20]
    base = os.path.join(oxzfs.base, lid)
    shutil.rmtree(base, ignore_errors=True)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 2 if extra else 1, 256)
    vdevs = [devs[0]] + ([extra, devs[1]] if extra else [])
    r = oxzfs.zpool("create", "-f", "-o", f"ashift={ashift}", "-o", f"version={version}", "-R", alt, pool, *vdevs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    args = [a for k, v in props.items() for a in ("-o", f"{k}={v}")]
    assert oxzfs.zfs("create", "-o", f"recordsize={REC}", *args, f"{pool}/d").returncode == 0
    assert oxzfs.zfs("create", f"{pool}/d/e").returncode == 0
    r = oxzfs.zfs("get", "-H", "-o", "value,source", "dedup", f"{pool}/d/e")
    assert r.stdout.split("\t") == [props["dedup"], f"inherited from {pool}/d\n"], repr(r)
    checksum = CHECKSUM_OF[props["dedup"]]
    rng = random.Random(lid)
    blk = [rng.randbytes(REC) for _ in range(10)]
    uniq = [rng.randbytes(REC) for _ in range(4)]
    files = {"d/a": blk, "d/b": list(blk), "d/e/c": blk[:5] + blk[:5], "d/u": uniq}
    root = os.path.join(alt, pool)
    for rel, recs in files.items():
        write_file(os.path.join(root, rel), recs)
    # zpool's dedupratio: ddt_get_pool_dedup_ratio (referenced / allocated, truncated to 1/100),
    # of the dedup table as synced (fsync writes the intent log, not the table).
    assert oxzfs.zpool("sync", pool).returncode == 0
    want_objs, want_hist = expected_ddt(files, checksum)
    allocated = sum(b for b, _ in want_hist.values())
    referenced = sum(rf for _, rf in want_hist.values())
    r = oxzfs.zpool("get", "-Hp", "-o", "value", "dedupratio", pool)
    assert r.stdout.strip() == f"{referenced * 100 // allocated / 100:.2f}", repr(r)
    assert oxzfs.export(pool).returncode == 0
    check_pool(oxzfs, vdir, pool, files, checksum, extra == "dedup")

    # Fewer references: deletes, and an overwrite that drops blk[0] and doubles uniq[0].
    reimport(oxzfs, vdir, alt, pool, files)
    for rel in ("d/b", "d/e/c"):
        os.unlink(os.path.join(root, rel))
        del files[rel]
    with open(os.path.join(root, "d/a"), "r+b") as f:
        f.write(uniq[0])
        os.fsync(f.fileno())
    files["d/a"] = [uniq[0]] + blk[1:]
    assert oxzfs.export(pool).returncode == 0
    check_pool(oxzfs, vdir, pool, files, checksum, extra == "dedup")

    # Nothing left: the entries and the class objects go.
    delete_all_and_check(oxzfs, vdir, alt, pool, files, checksum)
    shutil.rmtree(base, ignore_errors=True)


def test_dedup_under_random_workload(oxzfs):
    """The model-based workload on a dedup dataset without compression (its zero and patterned
    files share blocks), then a dataset destroyed: zdb clean each time, the files as the model."""
    pool = "ddwork"
    vdir, alt, root = new_pool(oxzfs, pool, pool, 1, "-O", "compression=off", size_mib=256)
    for ds in ("w", "x"):
        assert oxzfs.zfs("create", "-o", "dedup=on", "-o", "recordsize=4K", f"{pool}/{ds}").returncode == 0
    for ds in ("w", "x"):
        for i in range(3):
            write_file(os.path.join(root, ds, f"zeros{i}"), [bytes(64 << 10)])
    wroot = os.path.join(root, "w", "wl")
    os.mkdir(wroot)
    model = workload.run(wroot, 7, 300)
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert int(re.search(r"bp deduped:\s+(\d+)", text).group(1)) > 0, text[-2000:]
    objs, _, ddt_text = zdb_ddt(vdir, pool)
    assert objs.get(("sha256", "duplicate"), 0) > 0, ddt_text[-2000:]
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    diffs = workload.verify(wroot, model)
    assert not diffs, "re-imported tree differs from the model:\n" + "\n".join(diffs[:10])
    assert oxzfs.export(pool).returncode == 0
    assert oxzfs.run("zpool", "import", "-d", vdir, "-R", alt, pool).returncode == 0
    oxzfs.imported.append(pool)
    for ds in ("w", "x"):
        assert oxzfs.zfs("destroy", f"{pool}/{ds}").returncode == 0
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    _, _, ddt_text = zdb_ddt(vdir, pool)
    assert "All DDTs are empty" in ddt_text, ddt_text[-2000:]


def test_dedup_property_values_and_refusals(oxzfs):
    """zfs set/create/get of dedup as OpenZFS: the table's values, its message for others, the
    feature and version checks, inheritance."""
    pool = "ddprop"
    vdir, alt, root = new_pool(oxzfs, pool, pool, 1)
    values = {"on": "on", "verify": "verify", "sha256,verify": "sha256,verify", "sha512": "sha512",
              "skein,verify": "skein,verify", "edonr,verify": "edonr,verify", "off": "off"}
    for v, shown in values.items():
        r = oxzfs.zfs("set", f"dedup={v}", pool)
        assert r.returncode == 0, repr(r)
        r = oxzfs.zfs("get", "-H", "-o", "value,source", "dedup", pool)
        assert r.stdout == f"{shown}\tlocal\n", repr(r)
    for bad in ("edonr", "sha256,verify,verify", "fletcher4", "yes"):
        r = oxzfs.zfs("set", f"dedup={bad}", pool)
        assert r.returncode == 1 and r.stderr == (
            f"cannot set property for '{pool}': 'dedup' must be one of 'on | off | verify | sha256[,verify] | "
            "sha512[,verify] | skein[,verify] | edonr,verify'\n"), repr(r)
    # blake3 only where its feature is enabled.
    r = oxzfs.zfs("set", "dedup=blake3", pool)
    assert r.returncode == 1 and r.stderr == (
        f"cannot set property for '{pool}': pool and or dataset must be upgraded to set this property or value\n"), repr(r)
    assert oxzfs.zpool("set", "feature@blake3=enabled", pool).returncode == 0
    r = oxzfs.zfs("set", "dedup=blake3,verify", pool)
    assert r.returncode == 0, repr(r)
    # A blake3 DDT (newer than zdb 2.1: checked by round trip): the feature goes active, the
    # records read back after re-import.
    assert oxzfs.zfs("create", "-o", "compression=off", f"{pool}/b3").returncode == 0
    rec = random.Random(3).randbytes(128 << 10)
    write_file(os.path.join(root, "b3", "f"), [rec, rec, rec])
    assert oxzfs.zpool("sync", pool).returncode == 0
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@blake3,dedupratio", pool)
    assert r.stdout.split() == ["active", "3.00x"], repr(r)
    assert oxzfs.export(pool).returncode == 0
    reimport(oxzfs, vdir, alt, pool, {"b3/f": [rec, rec, rec]})
    assert oxzfs.zfs("destroy", f"{pool}/b3").returncode == 0
    # Inheritance and its source.
    assert oxzfs.zfs("set", "dedup=sha256,verify", pool).returncode == 0
    assert oxzfs.zfs("create", f"{pool}/c").returncode == 0
    r = oxzfs.zfs("get", "-H", "-o", "value,source", "dedup", f"{pool}/c")
    assert r.stdout == f"sha256,verify\tinherited from {pool}\n", repr(r)
    assert oxzfs.zfs("inherit", "dedup", pool).returncode == 0
    r = oxzfs.zfs("get", "-H", "-o", "value,source", "dedup", f"{pool}/c")
    assert r.stdout == "off\tdefault\n", repr(r)
    # Version 23 has dedup (SPA_VERSION_DEDUP is 21) but not the sha512 feature.
    vdir23, alt23, _ = new_pool(oxzfs, "ddprop23", "ddprop23", 1, "-o", "version=23")
    r = oxzfs.zfs("create", "-o", "dedup=sha512", "ddprop23/x")
    assert r.returncode == 1 and "pool must be upgraded to set this property or value" in r.stderr, repr(r)
    r = oxzfs.zfs("create", "-o", "dedup=verify", "ddprop23/x")
    assert r.returncode == 0, repr(r)


@pytest.fixture(scope="module")
def forced(oxzfs_bin, work_dir):
    yield from forced_ganging_daemon(oxzfs_bin, work_dir, "test_dedup_forced")


def test_dedup_of_gang_blocks(forced):
    """128K records ganged: the DDT keeps the gang DVAs, references share the tree, and the last
    free takes the whole tree (header copies and children) — zdb clean at each step."""
    ox = forced
    pool = "ddgang"
    base = os.path.join(ox.base, pool)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 2, 128)
    assert ox.zpool("create", "-R", alt, pool, *devs).returncode == 0
    ox.imported.append(pool)
    assert ox.zfs("create", "-o", "dedup=on", "-o", "compression=off", f"{pool}/d").returncode == 0
    rng = random.Random(5)
    recs = [rng.randbytes(128 << 10) for _ in range(6)]
    files = {"d/a": recs, "d/b": recs[:3], "d/c": recs[3:] + recs[3:]}
    root = os.path.join(alt, pool)
    for rel, r in files.items():
        write_file(os.path.join(root, rel), r)
    assert ox.export(pool).returncode == 0
    text = check_pool(ox, vdir, pool, files, "sha256", False)
    assert zdbparse.parse(text).ganged_count > 0, text[-2000:]
    reimport(ox, vdir, alt, pool, files)
    os.unlink(os.path.join(root, "d/a"))
    del files["d/a"]
    assert ox.export(pool).returncode == 0
    check_pool(ox, vdir, pool, files, "sha256", False)
    delete_all_and_check(ox, vdir, alt, pool, files, "sha256")
