"""`oxzfs zdb -e -p DIR -bb POOL` counts the same blocks as OpenZFS 2.1's zdb -bb (bp count, logical,
physical, allocated, and every row of the per-type table) on pools written by zfs-fuse and by ztest;
`-cc` (verify every block's checksum) finds no errors on them."""
import os

import pytest

from conftest import copy_vdevs, parse_zdb
import oracle_pools

CASES = [("zfs-fuse", s["name"]) for s in oracle_pools.ZFS_FUSE_POOLS] + \
        [("ztest", s["name"]) for s in oracle_pools.ZTEST_POOLS]
IDS = [f"{k}-{n}" for k, n in CASES]


@pytest.fixture(scope="module")
def pool(request, oxzfs):
    cache = {}

    def get(kind, name):
        if (kind, name) not in cache:
            pools = request.getfixturevalue("zfs_fuse_pools" if kind == "zfs-fuse" else "ztest_pools")
            d = pools[name]
            vdevs = copy_vdevs(os.path.join(d, "vdevs"), os.path.join(oxzfs.base, "vdevs", name))
            with open(os.path.join(d, "zdb-blocks.txt"), encoding="utf-8", errors="replace") as f:
                want = parse_zdb(f.read())
            assert want.bp_count, f"OpenZFS zdb output for {name} has no bp count"
            cache[(kind, name)] = (vdevs, want)
        return cache[(kind, name)]
    return get


@pytest.fixture(scope="module")
def ours(pool, oxzfs):
    cache = {}

    def get(kind, name):
        if (kind, name) not in cache:
            vdevs, want = pool(kind, name)
            r = oxzfs.zdb("-e", "-p", vdevs, "-bb", name)
            assert r.returncode == 0, repr(r)
            cache[(kind, name)] = (parse_zdb(r.stdout), want, r)
        return cache[(kind, name)]
    return get


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_zdb_bb_totals(kind, name, ours):
    got, want, r = ours(kind, name)
    assert got.totals() == want.totals(), f"oxzfs vs OpenZFS zdb -bb\n{r.stdout}"


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_zdb_bb_type_table(kind, name, ours):
    got, want, r = ours(kind, name)
    assert got.rows(), f"no per-type table in oxzfs zdb -bb output:\n{r.stdout}"
    g = {row[7]: row for row in got.rows()}
    w = {row[7]: row for row in want.rows()}
    diffs = [f"{t}: got {g.get(t)} want {w.get(t)}" for t in sorted(set(g) | set(w)) if g.get(t) != w.get(t)]
    assert not diffs, "per-type rows differ:\n" + "\n".join(diffs)


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_zdb_cc_no_errors(kind, name, pool, oxzfs):
    vdevs, want = pool(kind, name)
    r = oxzfs.zdb("-e", "-p", vdevs, "-cc", name, timeout=900)
    assert r.returncode == 0, repr(r)
    text = r.stdout + r.stderr
    assert "Got error" not in text and "checksum error" not in text.lower(), repr(r)
    got = parse_zdb(r.stdout)
    if got.bp_count is not None:
        assert got.bp_count == want.bp_count, repr(r)
    assert got.leaks is not True, f"leaks reported:\n{r!r}"


@pytest.mark.parametrize("name", [s["name"] for s in oracle_pools.ZTEST_POOLS])
def test_ztest_pool_imports_with_its_datasets(name, ztest_pools, oxzfs, pool):
    vdevs, _ = pool("ztest", name)
    info_ds = oracle_pools.ztest_datasets(open(os.path.join(ztest_pools[name], "zdb-datasets.txt")).read())
    alt = os.path.join(oxzfs.base, "alt", name)
    os.makedirs(alt, exist_ok=True)
    # ztest's datasets hold raw objects, not files (no ZPL master node), and half are encrypted:
    # like OpenZFS, mounting them fails, so import without mounting (-N) and check the tree.
    r = oxzfs.import_ro(vdevs, name, alt, force=True, nomount=True)
    assert r.returncode == 0, repr(r)
    try:
        r = oxzfs.zfs("list", "-H", "-o", "name", "-t", "all", "-r", name, check=True)
        got = sorted(n for n in r.stdout.split() if "@" not in n)
        assert got == info_ds, repr(r)
        r = oxzfs.zpool("status", name, check=True)
        assert name in r.stdout
    finally:
        assert oxzfs.export(name).returncode == 0
