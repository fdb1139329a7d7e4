"""Bad input: truncated devices, zeroed labels, garbage files in the scanned directory. Clear errors,
non-zero exits where the command cannot do what was asked, never a panic, and the daemon survives."""
import hashlib
import os
import random
import subprocess

import pytest

import oracle_pools
from conftest import assert_manifest, copy_vdevs, listed_pools, pool_info

NAME = "oxt-single"
LABEL = 256 << 10


@pytest.fixture
def single(zfs_fuse_pools, oxzfs, request):
    tag = request.node.name.replace("[", "-").replace("]", "")
    vdevs = copy_vdevs(os.path.join(zfs_fuse_pools[NAME], "vdevs"), os.path.join(oxzfs.base, "vdevs", tag))
    alt = os.path.join(oxzfs.base, "alt", tag)
    os.makedirs(alt, exist_ok=True)
    yield vdevs, alt
    if NAME in oxzfs.imported:
        oxzfs.export(NAME)
    assert oxzfs.daemon_alive(), "the daemon died"


def try_import(oxzfs, vdevs, alt):
    r = oxzfs.zpool("import", "-d", vdevs)  # listing must never panic, whatever it finds
    r2 = oxzfs.import_ro(vdevs, NAME, alt)
    return r, r2


@pytest.mark.parametrize("size", [0, 4096, 3 << 20], ids=["empty", "4K", "3M"])
def test_truncated_device_refuses_to_import(size, single, oxzfs):
    vdevs, alt = single
    os.truncate(os.path.join(vdevs, "d0"), size)
    listing, r = try_import(oxzfs, vdevs, alt)
    assert r.returncode != 0, f"a device truncated to {size} bytes cannot hold the pool:\n{r!r}"
    assert r.stderr.strip(), f"the failure must say why:\n{r!r}"


def test_device_missing_its_tail_does_not_panic(single, oxzfs):
    vdevs, alt = single
    path = os.path.join(vdevs, "d0")
    os.truncate(path, os.path.getsize(path) // 2)
    listing, r = try_import(oxzfs, vdevs, alt)
    if r.returncode == 0:
        # whatever imports must read back either the right bytes or an error, never garbage
        mnt = os.path.join(alt, NAME)
        for d, _, files in os.walk(mnt):
            for f in files:
                fp = os.path.join(d, f)
                if not os.path.isfile(fp) or os.path.islink(fp):
                    continue  # fifos and devices would block or mean nothing here
                try:
                    with open(fp, "rb") as fh:
                        while fh.read(1 << 20):
                            pass
                except OSError:
                    pass


def test_zeroed_labels(single, oxzfs):
    vdevs, alt = single
    path = os.path.join(vdevs, "d0")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        for off in (0, LABEL, size - 2 * LABEL, size - LABEL):
            f.seek(off)
            f.write(bytes(LABEL))
    listing, r = try_import(oxzfs, vdevs, alt)
    assert NAME not in listed_pools(listing.stdout + listing.stderr), repr(listing)
    assert r.returncode != 0, repr(r)
    assert r.stderr.strip(), repr(r)


def test_two_labels_zeroed_still_imports(single, oxzfs, zfs_fuse_pools):
    vdevs, alt = single
    path = os.path.join(vdevs, "d0")
    with open(path, "r+b") as f:
        f.write(bytes(2 * LABEL))  # L0 and L1 gone, L2 and L3 remain
    listing, r = try_import(oxzfs, vdevs, alt)
    assert NAME in listed_pools(listing.stdout + listing.stderr), repr(listing)
    assert r.returncode == 0, repr(r)
    ds = pool_info(zfs_fuse_pools[NAME])["datasets"][0]
    assert_manifest(os.path.join(alt, NAME), os.path.join(zfs_fuse_pools[NAME], ds["manifest"]), ds["children"])


def write_garbage(d, rng):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "random-1M"), "wb") as f:
        f.write(rng.randbytes(1 << 20))
    open(os.path.join(d, "empty"), "wb").close()
    with open(os.path.join(d, "small-odd"), "wb") as f:
        f.write(rng.randbytes(12345))
    # something that looks like a label's nvlist header (XDR encoding, native) followed by noise
    with open(os.path.join(d, "fake-label"), "wb") as f:
        f.write(bytes(16 << 10) + b"\x01\x01\x00\x00" + rng.randbytes((112 << 10) - 4) + bytes(128 << 10))
        f.write(rng.randbytes(4 << 20))
    with open(os.path.join(d, "sparse-64M"), "wb") as f:
        f.truncate(64 << 20)
    os.makedirs(os.path.join(d, "a-subdir"), exist_ok=True)


def test_garbage_next_to_a_good_pool(single, oxzfs, zfs_fuse_pools):
    vdevs, alt = single
    write_garbage(vdevs, random.Random(3))
    listing, r = try_import(oxzfs, vdevs, alt)
    assert listed_pools(listing.stdout + listing.stderr) == [NAME], repr(listing)
    assert r.returncode == 0, repr(r)
    ds = pool_info(zfs_fuse_pools[NAME])["datasets"][0]
    assert_manifest(os.path.join(alt, NAME), os.path.join(zfs_fuse_pools[NAME], ds["manifest"]), ds["children"])


def test_only_garbage(oxzfs):
    d = os.path.join(oxzfs.base, "vdevs", "only-garbage")
    write_garbage(d, random.Random(4))
    listing = oxzfs.zpool("import", "-d", d)
    assert listed_pools(listing.stdout + listing.stderr) == [], repr(listing)
    r = oxzfs.zpool("import", "-d", d, "-o", "readonly=on", "nosuchpool")
    assert r.returncode != 0 and r.stderr.strip(), repr(r)
    r = oxzfs.zdb("-e", "-p", d, "-bb", "nosuchpool")
    assert r.returncode != 0, repr(r)
    assert oxzfs.daemon_alive()


def test_nonexistent_directory(oxzfs):
    r = oxzfs.zpool("import", "-d", os.path.join(oxzfs.base, "does-not-exist"), "-o", "readonly=on", NAME)
    assert r.returncode != 0 and r.stderr.strip(), repr(r)
    assert oxzfs.daemon_alive()


def test_unknown_commands_fail_cleanly(oxzfs):
    for args in (["zpool", "frobnicate"], ["zfs", "list", "-o"], ["zdb", "-e"], ["nonsense"]):
        r = oxzfs.run(*args)
        assert r.returncode != 0, repr(r)
    assert oxzfs.daemon_alive()


def device_hashes(d):
    return {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest() for f in sorted(os.listdir(d))}


def test_damaged_space_map_refuses_read_write_import(oxzfs):
    """A space map whose checksum is right but whose entries contradict each other (one sector
    allocated twice, written by `oxzfs debug damage-space-map` through the engine's own sync):
    the read-write import is refused naming the metaslab and its space map, writes nothing
    (the devices' bytes are unchanged), and a read-only import still reads the files."""
    pool = "oxsmdamage"
    vdir = os.path.join(oxzfs.base, "vdevs", pool)
    alt = os.path.join(oxzfs.base, "alt", pool)
    os.makedirs(vdir, exist_ok=True)
    os.makedirs(alt, exist_ok=True)
    dev = os.path.join(vdir, "d0")
    with open(dev, "wb") as f:
        f.truncate(64 << 20)
    oxzfs.zpool("create", "-o", "ashift=9", "-R", alt, pool, dev, check=True)
    data = random.Random(7).randbytes(300 << 10)
    with open(os.path.join(alt, pool, "f"), "wb") as f:
        f.write(data)
    assert oxzfs.export(pool).returncode == 0
    zdb_m = [oracle_pools.ZDB, "-e", "-p", vdir, "-mmm", pool]
    r = subprocess.run(zdb_m, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = oxzfs.run("debug", "damage-space-map", "-d", vdir, pool, check=True)
    # "vdev V metaslab M (space map object S): OFFSET+LEN allocated again"
    where, what = r.stdout.split(": ")
    assert where.startswith("vdev 0 metaslab ") and "space map object" in where, repr(r)
    off, length = (int(x, 16) for x in what.split()[0].split("+"))
    # OpenZFS's zdb finds the same contradiction loading that space map.
    r = subprocess.run(zdb_m, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout[-2000:]
    assert f"removing nonexistent segment from range tree (offset={off:x} size={length:x})" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    before = device_hashes(vdir)
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 1, repr(r)
    assert r.stderr.startswith(f"cannot import '{pool}' read-write: {where}: allocation "), repr(r)
    assert "allocates space that is not free" in r.stderr, repr(r)
    assert device_hashes(vdir) == before, "a refused import wrote to the devices"
    assert pool not in listed_pools(oxzfs.zpool("list").stdout), "the refused pool is not imported"
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    with open(os.path.join(alt, pool, "f"), "rb") as f:
        assert f.read() == data
    assert oxzfs.export(pool).returncode == 0
    assert oxzfs.daemon_alive()
