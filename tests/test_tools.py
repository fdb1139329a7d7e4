"""The test tools and the oracle pools themselves: deterministic content, faithful manifests, a zdb
parser that reads what OpenZFS prints, and oracle pools that OpenZFS's zdb finds whole."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

import manifest as manifest_mod
import populate as populate_mod
import zdbparse
from conftest import TESTS, pool_info

pytestmark = pytest.mark.tools

ZDB_SAMPLE = """
Traversing all blocks to verify nothing leaked ...


\tNo leaks (block sum matches space maps exactly)

\tbp count:                   227
\tganged count:                 0
\tbp logical:             8557568      avg:  37698
\tbp physical:            7574016      avg:  33365     compression:   1.13
\tbp allocated:           7752192      avg:  34150     compression:   1.10
\tbp deduped:                   0    ref>1:      0   deduplication:   1.00
\tNormal class:           7752192     used: 12.53%
\tSpecial class             12288     used:  0.15%
\tEmbedded log class              0     used:  0.00%

Blocks\tLSIZE\tPSIZE\tASIZE\t  avg\t comp\t%Total\tType
     -\t    -\t    -\t    -\t    -\t    -\t     -\tunallocated
     1\t  512\t  512\t1.50K\t1.50K\t 1.00\t  0.02\tobject directory
    96\t7.27M\t7.11M\t7.12M\t76.0K\t 1.02\t 96.36\tZFS plain file
   227\t8.16M\t7.22M\t7.39M\t33.3K\t 1.13\t100.00\tTotal

Block Size Histogram
"""


def test_zdbparse_reads_counters_and_table():
    z = zdbparse.parse(ZDB_SAMPLE)
    assert z.totals() == {"bp count": 227, "bp logical": 8557568, "bp physical": 7574016,
                          "bp allocated": 7752192}
    assert z.ganged_count == 0 and z.bp_deduped == 0 and z.leaks is False
    assert z.classes == {"Normal class": 7752192, "Special class": 12288, "Embedded log class": 0}
    assert len(z.table) == 4
    assert z.rows() == [("1", "512", "512", "1.50K", "1.50K", "1.00", "0.02", "object directory"),
                        ("96", "7.27M", "7.11M", "7.12M", "76.0K", "1.02", "96.36", "ZFS plain file"),
                        ("227", "8.16M", "7.22M", "7.39M", "33.3K", "1.13", "100.00", "Total")]


def test_zdbparse_missing_counters_are_none():
    z = zdbparse.parse("zdb: can't open 'x': No such file or directory\n")
    assert z.bp_count is None and z.table == [] and z.leaks is None


def test_zdbparse_object_listing():
    d4 = ("    Object  lvl   iblk   dblk  dsize  dnsize  lsize   %full  type\n"
          "         1    1    16K    512     1K     512    512  100.00  ZFS master node\n"
          "\t\tROOT = 3 \n"
          "    Object  lvl   iblk   dblk  dsize  dnsize  lsize   %full  type\n"
          "         3    1    16K    512     1K     512    512  100.00  ZFS directory\n"
          "\t\tsub = 5 (type: Directory)\n\t\ta b = 6 (type: Regular File)\n"
          "    Object  lvl   iblk   dblk  dsize  dnsize  lsize   %full  type\n"
          "         5    1    16K    512     1K     512    512  100.00  ZFS directory\n"
          "\t\tf = 7 (type: Regular File)\n")
    assert zdbparse.zpl_paths(d4) == {"sub": 5, "a b": 6, "sub/f": 7}
    d5 = ("Indirect blocks:\n"
          "               0 L1  0:5e0c00:400 4000L/400P F=8 B=12/12 cksum=0\n"
          "               0  L0 0:4e0c00:20000 20000L/20000P F=1 B=12/12 cksum=0\n"
          "           20000  L0 0:500c00:20000 1:10:20000 20000L/4000P F=1 B=12/12 cksum=0\n")
    assert zdbparse.l0_blocks(d5) == [(0, [(0, 0x4e0c00, 0x20000)], 0x20000, 0x20000),
                                      (0x20000, [(0, 0x500c00, 0x20000), (1, 0x10, 0x20000)], 0x20000, 0x4000)]


def test_populate_is_deterministic_and_manifest_sees_everything(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        populate_mod.populate(str(root), 11, "small")
    ma, mb = manifest_mod.manifest(str(a)), manifest_mod.manifest(str(b))
    assert ma == mb
    kinds = {e["type"] for e in ma}
    assert kinds == {"dir", "file", "symlink", "fifo"}
    by = {e["path"]: e for e in ma}
    assert by["modes/setuid"]["mode"] == "0o4755"
    assert by["modes/private"]["mode"] == "0o600"
    assert by["modes/sticky"]["mode"] == "0o1777"
    assert (by["modes/owned"]["uid"], by["modes/owned"]["gid"]) == (1234, 5678)
    assert by["hardlinks/h0"]["nlink"] == 4 and by["hardlinks/h0"]["sha256"] == by["sizes/text/f13_131072"]["sha256"]
    assert len(by["link-very-long"]["target"]) > 900
    assert by["holes/all-hole"]["size"] == 3 << 20
    assert by["holes/all-hole"]["sha256"] == hashlib.sha256(bytes(3 << 20)).hexdigest()
    if any("xattrs" in e for e in ma):
        assert "user.comment" in by["sizes/text/f05_4095"]["xattrs"]
    populate_mod.populate(str(a), 11, "change")
    mc = manifest_mod.manifest(str(a))
    assert mc != ma and "added-after-change" in {e["path"] for e in mc}
    assert "many" not in {e["path"] for e in mc}


def test_populate_different_seeds_differ(tmp_path):
    populate_mod.populate(str(tmp_path / "a"), 1, "small")
    populate_mod.populate(str(tmp_path / "b"), 2, "small")
    assert manifest_mod.manifest(str(tmp_path / "a")) != manifest_mod.manifest(str(tmp_path / "b"))


def test_manifest_cli_and_exclude(tmp_path):
    root = tmp_path / "r"
    (root / "child" / "x").mkdir(parents=True)
    (root / "f").write_bytes(b"abc")
    (root / ".zfs").mkdir()
    out = subprocess.run([sys.executable, os.path.join(TESTS, "tools", "manifest.py"), str(root),
                          "--exclude", "child"], capture_output=True, text=True, check=True).stdout
    lines = [json.loads(x) for x in out.splitlines()]
    assert [e["path"] for e in lines] == [".", "f"]
    assert lines[1]["sha256"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert out.splitlines()[1] == json.dumps(lines[1], ensure_ascii=False, sort_keys=True)


def test_zfs_fuse_oracle_pools_are_whole(zfs_fuse_pools):
    for name, d in zfs_fuse_pools.items():
        z = zdbparse.parse(open(os.path.join(d, "zdb-blocks.txt")).read())
        assert z.bp_count and z.leaks is False, f"{name}: OpenZFS zdb -bb"
        assert z.rows() and z.rows()[-1][7] == "Total"
        info = pool_info(d)
        for ds in info["datasets"]:
            live = manifest_mod.load(os.path.join(d, ds["manifest"]))
            snap = manifest_mod.load(os.path.join(d, ds["snapshot_manifests"]["s1"]))
            assert len(live) > 20 and len(snap) > 20 and live != snap, f"{ds['name']} manifests"
        assert sorted(os.listdir(os.path.join(d, "vdevs"))) == sorted(info["devices"])


def test_ztest_oracle_pools_are_whole(ztest_pools):
    for name, d in ztest_pools.items():
        z = zdbparse.parse(open(os.path.join(d, "zdb-blocks.txt")).read())
        assert z.bp_count and z.bp_count > 100, f"{name}: OpenZFS zdb -bb"
        assert pool_info(d)["datasets"], f"{name}: no datasets seen by zdb -d"


def test_workload_model_checks_and_catches_a_planted_difference(tmp_path):
    """The model workload passes on a kernel file system, and its verifier notices a file changed
    behind the model's back."""
    import workload
    root = str(tmp_path / "root")
    os.makedirs(root)
    model = workload.run(root, 3, 200, xattr_max=700)
    assert workload.verify(root, model) == []
    files = [p for p, n in model.nodes.items() if n["type"] == "file"]
    assert files
    with open(os.path.join(root, files[0]), "ab") as f:
        f.write(b"planted")
    diffs = workload.verify(root, model)
    assert diffs and files[0] in diffs[0], diffs
