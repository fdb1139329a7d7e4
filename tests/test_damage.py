"""Damage on copies of zfs-fuse pools.

Within redundancy (devices deleted, or random 4K sectors of one child's data area overwritten) every
file reads back exactly, and `zpool status` tells: DEGRADED, or checksum errors on the damaged child.
Beyond redundancy (a file's data block overwritten on a one-disk pool) that file fails with EIO,
every other file reads fine, and `zpool status -v` names the file."""
import errno
import os
import random
import zlib

import pytest

import manifest as manifest_mod
import oracle_pools
import zdbparse
from conftest import assert_manifest, copy_vdevs, count, diff_manifests, pool_info, status_rows

LABELS_FRONT = 4 << 20      # labels L0, L1 and the boot block: the allocatable area starts here
LABELS_BACK = 512 << 10     # labels L2, L3 at the end
SECTOR = 4096

# (pool, devices to delete) — as many as the layout can lose
MISSING = [("oxt-mirror", ["d1"]), ("oxt-raidz1", ["d1"]), ("oxt-raidz2", ["d0", "d2"]),
           ("oxt-raidz3", ["d1", "d2", "d4"])]
# (pool, child whose data area gets random sectors overwritten)
ROT = [("oxt-mirror", "d0"), ("oxt-raidz1", "d2"), ("oxt-raidz2", "d1"), ("oxt-raidz3", "d3")]


def damaged_copy(oxzfs, zfs_fuse_pools, name, tag):
    src = os.path.join(zfs_fuse_pools[name], "vdevs")
    return copy_vdevs(src, os.path.join(oxzfs.base, "vdevs", f"{name}-{tag}"))


def check_all_datasets(oxzfs, pool_dir, alt):
    info = pool_info(pool_dir)
    for ds in info["datasets"]:
        mnt = os.path.join(alt, ds["name"])
        assert_manifest(mnt, os.path.join(pool_dir, ds["manifest"]), ds["children"])
        for snap, mf in ds["snapshot_manifests"].items():
            assert_manifest(os.path.join(mnt, ".zfs", "snapshot", snap), os.path.join(pool_dir, mf),
                            ds["children"])


def rot_sectors(path, seed, fraction=0.3, written=None):
    """Overwrite a seeded random FRACTION of the non-zero 4K sectors in the data area of PATH
    (what went where into the dict WRITTEN, if given)."""
    rng = random.Random(seed)
    size = os.path.getsize(path)
    hit = 0
    with open(path, "r+b") as f:
        used = []
        off = LABELS_FRONT
        end = size - LABELS_BACK
        while off < end:
            try:
                off = os.lseek(f.fileno(), off, os.SEEK_DATA)
            except OSError:
                break
            if off >= end:
                break
            f.seek(off)
            if f.read(SECTOR).strip(b"\0"):
                used.append(off)
            off += SECTOR
        for o in rng.sample(used, max(1, int(len(used) * fraction))):
            f.seek(o)
            junk = rng.randbytes(SECTOR)
            f.write(junk)
            if written is not None:
                written[o] = junk
            hit += 1
    return hit


@pytest.mark.parametrize("name,gone", MISSING, ids=[m[0] for m in MISSING])
def test_missing_devices_within_redundancy(name, gone, zfs_fuse_pools, oxzfs):
    vdevs = damaged_copy(oxzfs, zfs_fuse_pools, name, "missing")
    for g in gone:
        os.unlink(os.path.join(vdevs, g))
    alt = os.path.join(oxzfs.base, "alt", f"{name}-missing")
    os.makedirs(alt, exist_ok=True)
    r = oxzfs.import_ro(vdevs, name, alt)
    assert r.returncode == 0, f"a pool missing {gone} is within redundancy and must import:\n{r!r}"
    try:
        check_all_datasets(oxzfs, zfs_fuse_pools[name], alt)
        r = oxzfs.zpool("status", name, check=True)
        assert "DEGRADED" in r.stdout, repr(r)
    finally:
        assert oxzfs.export(name).returncode == 0


@pytest.mark.parametrize("name,child", ROT, ids=[m[0] for m in ROT])
def test_bit_rot_on_one_child_is_repaired_in_flight(name, child, zfs_fuse_pools, oxzfs):
    vdevs = damaged_copy(oxzfs, zfs_fuse_pools, name, "rot")
    n = rot_sectors(os.path.join(vdevs, child), seed=zlib.crc32(name.encode()))
    assert n > 0
    alt = os.path.join(oxzfs.base, "alt", f"{name}-rot")
    os.makedirs(alt, exist_ok=True)
    r = oxzfs.import_ro(vdevs, name, alt)
    assert r.returncode == 0, repr(r)
    try:
        check_all_datasets(oxzfs, zfs_fuse_pools[name], alt)
        r = oxzfs.zpool("status", name, check=True)
        rows = status_rows(r.stdout)
        mine = [v for k, v in rows.items() if k == child or k.endswith("/" + child)]
        assert mine, f"damaged child {child} not in status:\n{r!r}"
        assert "DEGRADED" in r.stdout or count(mine[0][3]) > 0, \
            f"{n} rotten sectors on {child}, yet status shows neither DEGRADED nor CKSUM errors:\n{r!r}"
    finally:
        assert oxzfs.export(name).returncode == 0


def test_damage_beyond_redundancy_gives_eio_for_that_file_only(zfs_fuse_pools, oxzfs):
    name = "oxt-single"
    pool_dir = zfs_fuse_pools[name]
    info = pool_info(pool_dir)
    ds = next(d for d in info["datasets"] if d["name"] == name)
    want = manifest_mod.load(os.path.join(pool_dir, ds["manifest"]))
    victim = next(e for e in want if e["type"] == "file" and e["path"].startswith("sizes/random/")
                  and e["size"] >= 262144 and e["nlink"] == 1)
    vdevs = damaged_copy(oxzfs, zfs_fuse_pools, name, "eio")
    # where is its data? ask OpenZFS's zdb
    d4 = oracle_pools.run([oracle_pools.ZDB, "-e", "-p", vdevs, "-dddd", name + "/"]).stdout
    obj = zdbparse.zpl_paths(d4).get(victim["path"])
    assert obj, f"zdb -dddd did not show {victim['path']}"
    d5 = oracle_pools.run([oracle_pools.ZDB, "-e", "-p", vdevs, "-ddddd", name + "/", str(obj)]).stdout
    blocks = zdbparse.l0_blocks(d5)
    assert blocks, f"no L0 blocks for object {obj}:\n{d5}"
    _, dvas, _, psize = blocks[len(blocks) // 2]
    assert len(dvas) == 1, "copies=1 data must have a single DVA"
    vdev, offset, asize = dvas[0]
    rng = random.Random(7)
    with open(os.path.join(vdevs, "d0"), "r+b") as f:
        f.seek(LABELS_FRONT + offset)
        f.write(rng.randbytes(psize))
    alt = os.path.join(oxzfs.base, "alt", f"{name}-eio")
    os.makedirs(alt, exist_ok=True)
    r = oxzfs.import_ro(vdevs, name, alt)
    assert r.returncode == 0, repr(r)
    try:
        mnt = os.path.join(alt, name)
        with pytest.raises(OSError) as e:
            with open(os.path.join(mnt, victim["path"]), "rb") as f:
                while f.read(1 << 20):
                    pass
        assert e.value.errno == errno.EIO, f"want EIO, got {e.value!r}"
        got = manifest_mod.manifest(mnt, ds["children"] + [victim["path"]])
        d = diff_manifests(got, [x for x in want if x["path"] != victim["path"]])
        assert not d, f"other files must read fine:\n{d}"
        r = oxzfs.zpool("status", "-v", name)
        assert os.path.basename(victim["path"]) in r.stdout, f"status -v does not list the file:\n{r!r}"
        assert oxzfs.daemon_alive()
    finally:
        assert oxzfs.export(name).returncode == 0
