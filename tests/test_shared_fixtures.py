"""The project's shared fixture pools (../shared/fixtures, or $OXZFS_SHARED_FIXTURES), when present:
every dataset and snapshot reproduces its manifest, and zdb -bb counts what OpenZFS counted.
Optional: user clones don't have them, and then these tests skip saying so."""
import glob
import os
import re

import pytest

from conftest import assert_manifest, listed_pools, parse_zdb, copy_vdevs


def fixture_pool(fdir):
    with open(os.path.join(fdir, "zpool-status.txt")) as f:
        m = re.search(r"^\s*pool:\s*(\S+)", f.read(), re.M)
    return m.group(1)


def fixture_datasets(fdir):
    names = []
    with open(os.path.join(fdir, "zfs-list.txt")) as f:
        for line in f.readlines()[1:]:
            if line.split() and "@" not in line.split()[0]:
                names.append(line.split()[0])
    return names


def fixture_manifests(fdir):
    """[(dataset, snapshot or None, manifest path)]"""
    out = []
    for p in sorted(glob.glob(os.path.join(fdir, "*.manifest.jsonl"))):
        base = os.path.basename(p)[: -len(".manifest.jsonl")]
        ds, _, snap = base.partition("@")
        out.append((ds.replace("_", "/"), snap or None, p))
    return out


@pytest.fixture(scope="module")
def fixtures(shared_fixtures, oxzfs):
    out = {}
    for name, (fdir, vdevs) in shared_fixtures.items():
        out[name] = (fdir, copy_vdevs(vdevs, os.path.join(oxzfs.base, "vdevs", name)))
    return out


def test_fixture_zdb_counts(fixtures, oxzfs):
    failures = []
    for name, (fdir, vdevs) in sorted(fixtures.items()):
        pool = fixture_pool(fdir)
        want = parse_zdb(open(os.path.join(fdir, "zdb-blocks.txt"), errors="replace").read())
        r = oxzfs.zdb("-e", "-p", vdevs, "-bb", pool)
        got = parse_zdb(r.stdout)
        if r.returncode != 0 or got.totals() != want.totals() or got.rows() != want.rows():
            failures.append(f"{name}: exit {r.returncode}, got {got.totals()} want {want.totals()}"
                            + ("" if got.rows() == want.rows() else " (per-type rows differ)"))
    assert not failures, "\n".join(failures)


def test_fixture_contents(fixtures, oxzfs):
    for name, (fdir, vdevs) in sorted(fixtures.items()):
        pool = fixture_pool(fdir)
        r = oxzfs.zpool("import", "-d", vdevs)
        assert pool in listed_pools(r.stdout + r.stderr), repr(r)
        alt = os.path.join(oxzfs.base, "alt", name)
        os.makedirs(alt, exist_ok=True)
        r = oxzfs.import_ro(vdevs, pool, alt)
        assert r.returncode == 0, repr(r)
        try:
            datasets = fixture_datasets(fdir)
            for ds, snap, mf in fixture_manifests(fdir):
                children = [os.path.relpath(c, ds) for c in datasets if c.startswith(ds + "/")]
                # Where the dataset is mounted is what `zfs get mountpoint` says (the fixtures
                # carry mountpoints of the machine that wrote them, under the altroot here).
                r = oxzfs.zfs("get", "-H", "-o", "value", "mountpoint", ds, check=True)
                root = r.stdout.strip()
                assert root.startswith(alt), f"{ds} mountpoint {root!r} is not under the altroot {alt}"
                # Children inherit mountpoints below their parent's: exclude them by relative path.
                children = []
                for c in datasets:
                    if c.startswith(ds + "/"):
                        rc = oxzfs.zfs("get", "-H", "-o", "value", "mountpoint", c, check=True).stdout.strip()
                        if rc.startswith(root + "/"):
                            children.append(os.path.relpath(rc, root))
                if snap:
                    root = os.path.join(root, ".zfs", "snapshot", snap)
                assert_manifest(root, mf, children)
        finally:
            assert oxzfs.export(pool).returncode == 0
