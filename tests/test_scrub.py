"""Self-healing and scrub, judged by the device bytes and the oracles.

A mirror side or a raidz column overwritten with random bytes in many places is within
redundancy: a pool imported read-write rewrites the bad copies its reads find (self-healing), and
`zpool scrub` reads every copy of every block and repairs all of them, so that the damaged device
alone (the other sides taken away) holds the whole pool again, OpenZFS's `zdb -bcc` is clean and
every file reads back. A read-only import never writes. The scan's state lives in the MOS as
OpenZFS keeps it (`zdb` and zfs-fuse accept it), and `zpool status` prints the `scan:` line as
OpenZFS 2.1 does."""
import os
import random
import re
import shutil
import subprocess
import zlib

import pytest

import manifest as manifest_mod
import oracle_pools
import populate as populate_mod
from conftest import count, diff_manifests, status_rows
from test_damage import LABELS_BACK, LABELS_FRONT, SECTOR, rot_sectors
from test_write import make_devs, zdb_check


def fill(root, seed):
    populate_mod.populate(root, seed, "small")
    rng = random.Random(seed)
    with open(os.path.join(root, "random.bin"), "wb") as f:
        f.write(rng.randbytes(6 << 20))
    return manifest_mod.manifest(root)


def new_pool(oxzfs, pool, layout, ndevs, seed, *opts):
    """A pool of NDEVS 64 MiB files laid out as LAYOUT (a function of the device paths), filled
    and exported: (vdev dir, altroot, the manifest of its root file system)."""
    base = os.path.join(oxzfs.base, pool)
    shutil.rmtree(base, ignore_errors=True)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, ndevs, 64)
    r = oxzfs.zpool("create", *opts, "-R", alt, pool, *layout(devs))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    want = fill(os.path.join(alt, pool), seed)
    assert oxzfs.export(pool).returncode == 0
    return vdir, alt, want


def import_rw(oxzfs, vdir, pool, alt):
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)


def differing_sectors(a, b):
    """Offsets of the 4K sectors of the data area (labels left out) where files A and B differ."""
    out = []
    size = os.path.getsize(a)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        off = LABELS_FRONT
        fa.seek(off)
        fb.seek(off)
        while off < size - LABELS_BACK:
            if fa.read(SECTOR) != fb.read(SECTOR):
                out.append(off)
            off += SECTOR
    return out


def alone(oxzfs, vdir, keep, tag):
    """A directory holding a copy of device KEEP only (the pool's other devices left out)."""
    d = os.path.join(oxzfs.base, "alone", tag)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copyfile(os.path.join(vdir, keep), os.path.join(d, keep))
    return d


def check_reads(oxzfs, vdir, pool, alt, want):
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    try:
        got = manifest_mod.manifest(os.path.join(alt, pool))
        d = diff_manifests(got, want)
        assert not d, f"{pool} from {vdir} reads differently:\n{d}"
    finally:
        assert oxzfs.export(pool).returncode == 0


def cksum_of(oxzfs, pool, dev):
    r = oxzfs.zpool("status", pool, check=True)
    rows = status_rows(r.stdout)
    mine = [v for k, v in rows.items() if k == dev or k.endswith("/" + dev)]
    assert mine, f"{dev} not in status:\n{r!r}"
    return count(mine[0][3]), r.stdout


def test_reads_of_a_read_write_import_heal_the_bad_side(oxzfs):
    pool = "healmirror"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 5)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    assert differing_sectors(d0, d1) == [], "mirror sides differ before any damage"
    assert rot_sectors(d0, seed=zlib.crc32(b"heal")) > 0
    before = len(differing_sectors(d0, d1))
    assert before > 0
    import_rw(oxzfs, vdir, pool, alt)
    got = manifest_mod.manifest(os.path.join(alt, pool))
    assert not diff_manifests(got, want)
    bad, text = cksum_of(oxzfs, pool, "d0")
    assert bad > 0, f"reads met {before} rotten sectors of d0 yet status counts no CKSUM there:\n{text}"
    assert oxzfs.export(pool).returncode == 0
    after = len(differing_sectors(d0, d1))
    # Every block the reads met was rewritten on d0: what still differs is what no read touched
    # (free space, blocks of metadata the import did not need).
    assert after < before / 2, f"{before} rotten sectors on d0, {after} still differ after reading everything"


def test_read_only_import_never_writes(oxzfs):
    pool = "romirror"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 6)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    assert rot_sectors(d0, seed=zlib.crc32(b"ro")) > 0
    sums = (manifest_mod.file_sha256(d0), manifest_mod.file_sha256(d1))
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    got = manifest_mod.manifest(os.path.join(alt, pool))
    assert not diff_manifests(got, want)
    assert cksum_of(oxzfs, pool, "d0")[0] > 0
    assert oxzfs.export(pool).returncode == 0
    assert (manifest_mod.file_sha256(d0), manifest_mod.file_sha256(d1)) == sums, "a read-only import wrote to its devices"
