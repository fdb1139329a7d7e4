"""Read pools that zfs-fuse wrote: import by scanning, read-only with an altroot, and reproduce every
dataset and snapshot byte for byte (manifests taken through zfs-fuse when the pools were made);
zfs list / zfs get speak like OpenZFS; export unmounts."""
import os

import pytest

from conftest import assert_manifest, copy_vdevs, listed_pools, pool_info
import oracle_pools

POOLS = [s["name"] for s in oracle_pools.ZFS_FUSE_POOLS]


@pytest.fixture(scope="module")
def pools(zfs_fuse_pools, oxzfs):
    """{pool: (info, pool dir, private vdev copy, altroot)}"""
    out = {}
    for name in POOLS:
        d = zfs_fuse_pools[name]
        vdevs = copy_vdevs(os.path.join(d, "vdevs"), os.path.join(oxzfs.base, "vdevs", name))
        out[name] = (pool_info(d), d, vdevs, os.path.join(oxzfs.base, "alt", name))
    return out


@pytest.fixture(scope="module")
def imported(pools, oxzfs):
    done = {}

    def get(name):
        if name not in done:
            info, d, vdevs, alt = pools[name]
            os.makedirs(alt, exist_ok=True)
            r = oxzfs.import_ro(vdevs, name, alt)
            assert r.returncode == 0, f"read-only import of {name} failed:\n{r!r}"
            done[name] = (info, d, alt)
        return done[name]
    return get


@pytest.mark.parametrize("name", POOLS)
def test_import_search_lists_pool(name, pools, oxzfs):
    info, d, vdevs, alt = pools[name]
    r = oxzfs.zpool("import", "-d", vdevs)
    assert r.returncode == 0, repr(r)
    assert name in listed_pools(r.stdout + r.stderr), f"{name} not listed:\n{r!r}"
    text = r.stdout + r.stderr
    assert "ONLINE" in text, f"the pool's state is not shown as ONLINE:\n{r!r}"


@pytest.mark.parametrize("name", POOLS)
def test_datasets_match_manifests(name, imported):
    info, d, alt = imported(name)
    for ds in info["datasets"]:
        mnt = os.path.join(alt, ds["name"])
        assert_manifest(mnt, os.path.join(d, ds["manifest"]), ds["children"])


@pytest.mark.parametrize("name", POOLS)
def test_snapshots_match_manifests(name, imported):
    info, d, alt = imported(name)
    for ds in info["datasets"]:
        mnt = os.path.join(alt, ds["name"])
        for snap, mf in ds["snapshot_manifests"].items():
            snapdir = os.path.join(mnt, ".zfs", "snapshot", snap)
            assert_manifest(snapdir, os.path.join(d, mf), ds["children"])


@pytest.mark.parametrize("name", POOLS)
def test_snapshot_dir_lists_snapshots(name, imported):
    info, d, alt = imported(name)
    for ds in info["datasets"]:
        snaps = sorted(os.listdir(os.path.join(alt, ds["name"], ".zfs", "snapshot")))
        assert snaps == sorted(ds["snapshots"])


@pytest.mark.parametrize("name", POOLS)
def test_zfs_list(name, imported, oxzfs):
    info, d, alt = imported(name)
    want = set()
    for ds in info["datasets"]:
        want.add(ds["name"])
        want.update(f"{ds['name']}@{s}" for s in ds["snapshots"])
    r = oxzfs.zfs("list", "-H", "-o", "name", "-t", "all", "-r", name, check=True)
    assert set(r.stdout.split()) == want
    r = oxzfs.zfs("list", "-H", "-o", "name", "-r", name, check=True)
    assert r.stdout.split() == sorted(ds["name"] for ds in info["datasets"]), "filesystems, sorted, no snapshots"
    r = oxzfs.zfs("list", "-H", "-o", "name", "-t", "snapshot", "-r", name, check=True)
    assert set(r.stdout.split()) == {x for x in want if "@" in x}
    r = oxzfs.zfs("list", "-H", "-o", "name", "-d", "0", name, check=True)
    assert r.stdout.split() == [name]


@pytest.mark.parametrize("name", POOLS)
def test_zfs_get(name, imported, oxzfs):
    info, d, alt = imported(name)
    for ds in info["datasets"]:
        r = oxzfs.zfs("get", "-H", "-o", "value", "mountpoint", ds["name"], check=True)
        assert r.stdout.strip() == os.path.join(alt, ds["name"]), repr(r)
        r = oxzfs.zfs("get", "-H", "-o", "property,value,source", "type,readonly", ds["name"], check=True)
        rows = {line.split("\t")[0]: line.split("\t")[1:] for line in r.stdout.splitlines()}
        assert rows["type"][0] == "filesystem"
        assert rows["readonly"][0] == "on"
        for prop, value in ds["props"].items():
            r = oxzfs.zfs("get", "-H", "-o", "value,source", prop, ds["name"], check=True)
            got_value, source = r.stdout.strip().split("\t")
            assert got_value == value, f"{ds['name']} {prop}: {r!r}"
            assert source == "local", f"{ds['name']} {prop}: {r!r}"


@pytest.mark.parametrize("name", POOLS)
def test_zpool_status_and_list(name, imported, oxzfs):
    info, d, alt = imported(name)
    r = oxzfs.zpool("status", name, check=True)
    assert "state: ONLINE" in r.stdout, repr(r)
    for dev in info["devices"]:
        assert dev in r.stdout, f"device {dev} missing from status:\n{r!r}"
    r = oxzfs.zpool("list", "-H", "-o", "name,health", name, check=True)
    assert r.stdout.split() == [name, "ONLINE"], repr(r)


@pytest.mark.parametrize("name", POOLS)
def test_export(name, imported, oxzfs):
    info, d, alt = imported(name)
    r = oxzfs.export(name)
    assert r.returncode == 0, repr(r)
    with open("/proc/self/mounts") as f:
        mounted = [line.split()[1] for line in f]
    assert not [m for m in mounted if m.startswith(alt + "/") or m == alt], "export left mounts behind"
    r = oxzfs.zpool("list", "-H", "-o", "name")
    assert name not in r.stdout.split()
