"""Per-dataset write features judged by the oracles: zstd at every kind of level, the sha512 /
skein / edonr checksums, recordsizes from 512 to 1M (16M with the zfs_max_recordsize tunable) and
hole_birth must give pools that OpenZFS 2.1's `zdb -bcc -d` passes with no leaks, whose feature
refcounts zdb itself verifies, whose blocks zdb decodes with the right checksum and compression,
and which read back byte for byte after export and import. blake3 (newer than that zdb) is
checked by round trip and by corrupting a block."""
import ctypes
import os
import re
import subprocess

import pytest

from conftest import Oxzfs, diff_manifests, unmount_below
import manifest as manifest_mod
import oracle_pools
from test_write import make_devs, new_pool, zdb_check

ZDB = oracle_pools.ZDB

# dataset -> (create options, expected checksum and compression of its file blocks, zstd level
# in the block header: the zio_zstd_levels value, 3 by default, 103.. for the fast levels)
DATASETS = {
    "zdef": (["-o", "compression=zstd"], "fletcher4", "zstd", 3),
    "zfast": (["-o", "compression=zstd-fast"], "fletcher4", "zstd", 103),
    "z19sha": (["-o", "compression=zstd-19", "-o", "checksum=sha512"], "sha512", "zstd", 19),
    "zf10skein": (["-o", "compression=zstd-fast-10", "-o", "checksum=skein"], "skein", "zstd", 112),
    "edonr8k": (["-o", "compression=zstd-1", "-o", "checksum=edonr", "-o", "recordsize=8K"], "edonr", "zstd", 1),
    "big1m": (["-o", "compression=zstd-3", "-o", "recordsize=1M"], "fletcher4", "zstd", 3),
    "tiny512": (["-o", "recordsize=512", "-o", "checksum=sha512"], "sha512", "lz4", None),
    "lz4skein": (["-o", "checksum=skein"], "skein", "lz4", None),
}


def zdb(*args):
    r = subprocess.run([ZDB] + list(args), capture_output=True, text=True, errors="replace", timeout=600)
    assert r.returncode == 0, f"zdb {' '.join(args)} exited {r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}"
    return r.stdout


def text_bytes(n, salt=""):
    out = bytearray()
    i = 0
    while len(out) < n:
        out += f"{salt} line {i} of a fairly compressible text file\n".encode()
        i += 1
    return bytes(out[:n])


def write_synced(path, data, at=0):
    with open(path, "wb") as f:
        f.seek(at)
        f.write(data)
        os.fsync(f.fileno())


def fill(root):
    """Compressible text, random bytes and a sparse file in one directory."""
    write_synced(os.path.join(root, "text"), text_bytes(3 << 20, root))
    write_synced(os.path.join(root, "random"), os.urandom(2 << 20))
    write_synced(os.path.join(root, "sparse"), text_bytes(300000), at=7 << 20)
    write_synced(os.path.join(root, "small"), b"tiny file\n" * 30)


def block_lines(vdir, dataset, obj):
    """(level, checksum, compress, lsize, psize, birth) of every non-hole bp of an object, as
    zdb -dddddd decodes them."""
    out = zdb("-e", "-p", vdir, "-bbbbbb", "-ddddd", dataset, str(obj))
    rows = []
    for m in re.finditer(r"\[L(\d+) ZFS plain file\] (\S+) (\S+) \S+ \S+ \S+ \S+ \S+ size=(\w+)L/(\w+)P birth=(\d+)L", out):
        lvl, ck, comp, ls, ps, birth = m.groups()
        rows.append((int(lvl), ck, comp, int(ls, 16), int(ps, 16), int(birth)))
    return rows, out


def feature_refcounts(vdir, pool):
    """{feature: refcount} as zdb verified them ("Verified X feature refcount of N is correct")."""
    text = zdb_check(vdir, pool)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"Verified (\S+) feature refcount of (\d+) is correct", text)}, text


def test_zstd_checksums_recordsizes_pass_zdb_and_read_back(oxzfs):
    pool = "fzstd"
    vdir, alt, root = new_pool(oxzfs, pool, "zstd", 2, size_mib=256)
    for ds, (opts, *_) in DATASETS.items():
        r = oxzfs.zfs("create", *opts, f"{pool}/{ds}")
        assert r.returncode == 0, repr(r)
    # zfs get shows each value as OpenZFS names it.
    r = oxzfs.zfs("get", "-H", "-o", "name,value", "compression", *[f"{pool}/{d}" for d in DATASETS])
    got = dict(line.split("\t") for line in r.stdout.splitlines())
    assert got[f"{pool}/zfast"] == "zstd-fast" and got[f"{pool}/z19sha"] == "zstd-19" and got[f"{pool}/zdef"] == "zstd", got
    assert got[f"{pool}/zf10skein"] == "zstd-fast-10", got
    objs = {}
    for ds in DATASETS:
        d = os.path.join(root, ds)
        fill(d)
        objs[ds] = {n: os.stat(os.path.join(d, n)).st_ino for n in ("text", "random")}
    # Features become active when the txg holding their first block syncs.
    assert oxzfs.zpool("sync", pool).returncode == 0
    want = manifest_mod.manifest(root)
    r = oxzfs.zpool("get", "-H", "-o", "property,value", "all", pool)
    feats = dict(line.split("\t") for line in r.stdout.splitlines() if line.startswith("feature@"))
    for f in ("zstd_compress", "sha512", "skein", "edonr", "large_blocks", "hole_birth", "extensible_dataset", "enabled_txg"):
        assert feats.get(f"feature@{f}") == "active", feats
    assert feats.get("feature@blake3") == "disabled", feats
    assert oxzfs.export(pool).returncode == 0
    refs, _ = feature_refcounts(vdir, pool)
    zstd_sets = [d for d, v in DATASETS.items() if v[2] == "zstd"]
    assert refs.get("zstd_compress") == len(zstd_sets), refs
    assert refs.get("large_blocks") == 1, refs
    assert refs.get("sha512") == 2 and refs.get("skein") == 2 and refs.get("edonr") == 1, refs
    # Every file block carries its dataset's checksum and compression; text shrinks, random not.
    for ds, (opts, ck, comp, level) in DATASETS.items():
        rows, out = block_lines(vdir, f"{pool}/{ds}", objs[ds]["text"])
        l0 = [r for r in rows if r[0] == 0]
        assert l0, f"{ds}: no L0 blocks decoded:\n{out[-2000:]}"
        recordsize = 512 if ds == "tiny512" else 8192 if ds == "edonr8k" else (1 << 20) if ds == "big1m" else 131072
        assert all(r[1] == ck for r in rows), f"{ds}: checksums {set(r[1] for r in rows)}"
        assert all(r[3] == recordsize for r in l0), f"{ds}: lsizes {set(r[3] for r in l0)}"
        if ds != "tiny512":  # 512-byte blocks cannot shrink below one sector
            assert all(r[2] == comp and r[4] <= r[3] - r[3] // 8 for r in l0), f"{ds}: {l0[:3]}"
        if level is not None:
            # zdb -Z reads each zstd block's header: the level word as OpenZFS writes it.
            out = zdb("-e", "-p", vdir, "-Z", "-ddddd", f"{pool}/{ds}", str(objs[ds]["text"]))
            levels = set(int(x) for x in re.findall(r"ZSTD:size=\d+:version=\d+:level=(\d+):NORMAL", out))
            assert levels == {level}, f"{ds}: zstd levels {levels}:\n{out[-1500:]}"
        rows, _ = block_lines(vdir, f"{pool}/{ds}", objs[ds]["random"])
        assert all(r[2] == "uncompressed" and r[4] == r[3] for r in rows if r[0] == 0), f"{ds}: random data compressed?"
    # zdb -bb counts the file data compressed (text shrinks many times, random not at all).
    bb = zdb("-e", "-p", vdir, "-bb", pool)
    m = re.search(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+\S+\s+\S+\s+(\S+)\s+\S+\s+ZFS plain file$", bb, re.M)
    assert m and float(m.group(4)) > 1.5, f"zdb -bb plain file row: {m and m.group(0)}\n{bb[-3000:]}"
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    d = diff_manifests(manifest_mod.manifest(root), want)
    assert not d, f"{pool} after export/import differs:\n{d}"
    assert oxzfs.export(pool).returncode == 0


def test_feature_refusals_and_recordsize_limits(oxzfs):
    pool = "flim"
    vdir, alt, root = new_pool(oxzfs, pool, "lim", 1)
    r = oxzfs.zfs("set", "recordsize=2M", pool)
    assert r.returncode == 1 and r.stderr == f"cannot set property for '{pool}': property setting is not allowed on bootable datasets\n", repr(r)
    r = oxzfs.zfs("create", "-o", "recordsize=2M", f"{pool}/a")
    assert r.returncode == 1 and "invalid property value(s) specified" in r.stderr, repr(r)
    r = oxzfs.zfs("set", "recordsize=3K", pool)
    assert r.returncode == 1 and "'recordsize' must be power of 2 from 512B to 16M" in r.stderr, repr(r)
    r = oxzfs.zfs("set", "checksum=blake3", pool)
    assert r.returncode == 1 and r.stderr == f"cannot set property for '{pool}': pool and or dataset must be upgraded to set this property or value\n", repr(r)
    r = oxzfs.zfs("create", "-o", "checksum=blake3", f"{pool}/b")
    assert r.returncode == 1 and "pool must be upgraded to set this property or value" in r.stderr, repr(r)
    r = oxzfs.zfs("set", "compression=zstd-20", pool)
    assert r.returncode == 1 and "bad property value 'zstd-20'" in r.stderr, repr(r)
    r = oxzfs.zpool("set", "feature@blake3=disabled", pool)
    assert r.returncode == 1 and "can only be set to 'enabled'" in r.stderr, repr(r)
    r = oxzfs.zpool("set", "feature@nosuch=enabled", pool)
    assert r.returncode == 1 and "feature 'nosuch' unsupported" in r.stderr, repr(r)
    # A dataset that used features gives its counts back when destroyed.
    r = oxzfs.zfs("create", "-o", "compression=zstd", "-o", "checksum=sha512", "-o", "recordsize=1M", f"{pool}/gone")
    assert r.returncode == 0, repr(r)
    write_synced(os.path.join(root, "gone", "f"), text_bytes(3 << 20))
    assert oxzfs.zpool("sync", pool).returncode == 0
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@zstd_compress,feature@sha512,feature@large_blocks", pool)
    assert r.stdout.split() == ["active"] * 3, repr(r)
    r = oxzfs.zfs("destroy", f"{pool}/gone")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@zstd_compress,feature@sha512,feature@large_blocks,feature@extensible_dataset", pool)
    assert r.stdout.split() == ["enabled"] * 4, repr(r)
    assert oxzfs.export(pool).returncode == 0
    refs, _ = feature_refcounts(vdir, pool)
    # Nothing uses them now: enabled, not active.
    assert refs.get("zstd_compress") == 0 and refs.get("large_blocks") == 0 and refs.get("sha512") == 0, refs
    # A pool without features: no large blocks, no zstd.
    base = os.path.join(oxzfs.base, "lim-d")
    devs = make_devs(os.path.join(base, "vdevs"), 1)
    r = oxzfs.zpool("create", "-d", "-R", os.path.join(base, "alt"), "flimd", *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("flimd")
    r = oxzfs.zfs("set", "recordsize=1M", "flimd")
    assert r.returncode == 1 and "'recordsize' must be power of 2 from 512B to 128K" in r.stderr, repr(r)
    r = oxzfs.zfs("set", "compression=zstd", "flimd")
    assert r.returncode == 1 and "must be upgraded" in r.stderr, repr(r)
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@zstd_compress,feature@hole_birth", "flimd")
    assert r.stdout.split() == ["disabled", "disabled"], repr(r)
    # Enabled later with zpool set: then accepted (zstd activates on the dataset at once).
    assert oxzfs.zpool("set", "feature@zstd_compress=enabled", "flimd").returncode == 0
    r = oxzfs.zfs("set", "compression=zstd", "flimd")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@zstd_compress,feature@extensible_dataset", "flimd")
    assert r.stdout.split() == ["active", "active"], repr(r)
    assert oxzfs.export("flimd").returncode == 0
    refs, _ = feature_refcounts(os.path.join(base, "vdevs"), "flimd")
    assert refs.get("zstd_compress") == 1, refs


def test_16m_records_with_zfs_max_recordsize(oxzfs_bin, work_dir):
    """With the tunable raised to 16M (as zfs_max_recordsize allows), recordsize=16M is accepted,
    files get 16M blocks, and zdb is clean."""
    base = os.path.join(work_dir, "run", "features-16m")
    unmount_below(base)
    subprocess.run(["rm", "-rf", base])
    ox = Oxzfs(oxzfs_bin, base)
    ox.env["OXZFS_ZFS_MAX_RECORDSIZE"] = str(16 << 20)
    ox.start_daemon()
    try:
        pool = "f16m"
        vdir, alt, root = new_pool(ox, pool, "p", 1, size_mib=256)
        r = ox.zfs("create", "-o", "recordsize=16M", "-o", "compression=zstd", f"{pool}/big")
        assert r.returncode == 0, repr(r)
        p = os.path.join(root, "big", "f")
        data = text_bytes(20 << 20)
        write_synced(p, data)
        obj = os.stat(p).st_ino
        assert ox.export(pool).returncode == 0
        refs, _ = feature_refcounts(vdir, pool)
        assert refs.get("large_blocks") == 1, refs
        rows, out = block_lines(vdir, f"{pool}/big", obj)
        assert sorted(r[3] for r in rows if r[0] == 0) == [16 << 20, 16 << 20], out[-2000:]
        r = ox.import_ro(vdir, pool, alt)
        assert r.returncode == 0, repr(r)
        with open(p, "rb") as f:
            assert f.read() == data
        assert ox.export(pool).returncode == 0
    finally:
        ox.teardown()


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


def punch(fd, off, n):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n) != 0:
        raise OSError(ctypes.get_errno(), "fallocate punch")


def hole_lines(out):
    """(level, lsize, birth) of the holes with a birth that zdb -ddddd lists."""
    return [(int(m.group(1)), int(m.group(2), 16), int(m.group(3)))
            for m in re.finditer(r"^\s+\w+\s+L(\d+)\s+0:0:0 (\w+)L B=(\d+)$", out, re.M)]


def test_hole_birth_holes_pass_zdb(oxzfs):
    """Holes punched, truncated away and overwritten with zeros after the data was synced keep
    their birth txg (zdb lists them with B=), zdb is clean, and every byte reads back."""
    # Each step in a txg of its own (fsync alone writes the intent log): holes made later than
    # the blocks they replace carry a birth txg.
    def txg_sync():
        assert oxzfs.zpool("sync", pool).returncode == 0

    pool = "fhole"
    vdir, alt, root = new_pool(oxzfs, pool, "hole", 1, size_mib=256)
    assert oxzfs.zfs("create", "-o", "recordsize=8K", f"{pool}/h").returncode == 0
    d = os.path.join(root, "h")
    model = {}
    for name in ("punched", "truncated", "zeroed", "mixed", "bigtrunc"):
        # bigtrunc spans two L1 indirects (1024 8K blocks each); the second goes at truncate.
        data = bytearray(os.urandom((10 if name == "bigtrunc" else 3) << 20))
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        model[name] = data
    txg_sync()
    fd = os.open(os.path.join(d, "punched"), os.O_RDWR)
    punch(fd, 1 << 20, 1 << 20)                 # whole L0s, and whole L1s (128 8K blocks each)
    punch(fd, (2 << 20) + 100, 5000)           # inside one block: zeroed in place
    os.fsync(fd)
    txg_sync()
    os.close(fd)
    model["punched"][1 << 20:2 << 20] = bytes(1 << 20)
    model["punched"][(2 << 20) + 100:(2 << 20) + 5100] = bytes(5000)
    os.truncate(os.path.join(d, "truncated"), 100000)
    model["truncated"] = model["truncated"][:100000]
    os.truncate(os.path.join(d, "bigtrunc"), 1 << 20)
    model["bigtrunc"] = model["bigtrunc"][:1 << 20]
    with open(os.path.join(d, "zeroed"), "r+b") as f:
        f.seek(8192 * 3)
        f.write(bytes(8192 * 5))
        os.fsync(f.fileno())
    model["zeroed"][8192 * 3:8192 * 8] = bytes(8192 * 5)
    with open(os.path.join(d, "mixed"), "r+b") as f:
        f.truncate(5 << 20)                    # extend sparsely
        f.seek(4 << 20)
        f.write(b"tail" * 1000)
        os.fsync(f.fileno())
        f.truncate(1 << 20)
        f.truncate(2 << 20)
    model["mixed"] = model["mixed"][:1 << 20] + bytes(1 << 20)
    objs = {n: os.stat(os.path.join(d, n)).st_ino for n in model}
    for n, want in model.items():
        with open(os.path.join(d, n), "rb") as f:
            assert f.read() == bytes(want), f"{n} differs before export"
    assert oxzfs.export(pool).returncode == 0
    refs, _ = feature_refcounts(vdir, pool)
    assert "large_blocks" in refs  # zdb verified the per-dataset counts
    for n in ("punched", "truncated", "zeroed"):
        out = zdb("-e", "-p", vdir, "-ddddd", f"{pool}/h", str(objs[n]))
        holes = hole_lines(out)
        assert holes and all(b > 0 for _, _, b in holes), f"{n}: no holes with a birth txg:\n{out[-3000:]}"
        assert any(lvl == 0 and ls == 8192 for lvl, ls, _ in holes), f"{n}: {holes[:5]}"
    # An indirect block whose children were all freed is a hole of its own size and level.
    out = zdb("-e", "-p", vdir, "-ddddd", f"{pool}/h", str(objs["bigtrunc"]))
    assert (1, 128 << 10) in [(lvl, ls) for lvl, ls, _ in hole_lines(out)], out[-2000:]
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    for n, want in model.items():
        with open(os.path.join(d, n), "rb") as f:
            assert f.read() == bytes(want), f"{n} differs after import"
    assert oxzfs.export(pool).returncode == 0


def test_blake3_round_trip_and_corruption(oxzfs):
    """blake3 (newer than the 2.1 zdb): enabled on request only, written blocks verify after
    export and import, and a corrupted block is detected."""
    pool = "fblake"
    vdir, alt, root = new_pool(oxzfs, pool, "blake", 1, "-o", "feature@blake3=enabled")
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@blake3", pool)
    assert r.stdout.strip() == "enabled", repr(r)
    r = oxzfs.zfs("create", "-o", "checksum=blake3", "-o", "compression=off", f"{pool}/b")
    assert r.returncode == 0, repr(r)
    marker = os.urandom(131072)
    files = {"marked": marker * 2, "text": text_bytes(1 << 20), "random": os.urandom(777777)}
    for n, data in files.items():
        write_synced(os.path.join(root, "b", n), data)
    r = oxzfs.zpool("get", "-H", "-o", "value", "feature@blake3", pool)
    assert r.stdout.strip() == "active", repr(r)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    for n, data in files.items():
        with open(os.path.join(root, "b", n), "rb") as f:
            assert f.read() == data, n
    assert oxzfs.export(pool).returncode == 0
    # Flip one byte of the marked block (stored uncompressed, one copy) on the device.
    dev = os.path.join(vdir, "d0")
    with open(dev, "r+b") as f:
        blob = f.read()
        at = blob.find(marker[:4096])
        assert at > 0, "the marked block is not on the device"
        f.seek(at + 1000)
        f.write(bytes([blob[at + 1000] ^ 0xFF]))
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    with pytest.raises(OSError):
        with open(os.path.join(root, "b", "marked"), "rb") as f:
            f.read()
    with open(os.path.join(root, "b", "text"), "rb") as f:
        assert f.read() == files["text"]
    assert oxzfs.export(pool).returncode == 0


@pytest.mark.parametrize("opts", [["-O", "compression=zstd-fast-3", "-O", "checksum=skein", "-O", "recordsize=16K"],
                                  ["-O", "compression=zstd-7", "-O", "checksum=edonr", "-O", "recordsize=1M"]],
                         ids=["zstdfast-skein-16k", "zstd7-edonr-1m"])
def test_model_workload_with_features(opts, oxzfs):
    """The random workload (writes, truncates, holes, renames) on the root file system of a pool
    created with these properties: checked against the model as it runs, then zdb clean with the
    feature refcounts zdb verifies, and the re-imported pool equals the model."""
    import workload
    pool = "fwl" + opts[1].split("=")[1].replace("-", "")[:8]
    vdir, alt, root = new_pool(oxzfs, pool, "wl-" + pool, 2, "-o", "ashift=12", *opts, size_mib=256)
    seed = sum(map(ord, pool))
    model = workload.run(root, seed, 250)
    assert oxzfs.export(pool).returncode == 0
    refs, _ = feature_refcounts(vdir, pool)
    assert refs.get("zstd_compress") == 1, refs
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    diffs = workload.verify(root, model)
    assert not diffs, f"seed {seed}: the re-imported pool differs from the model:\n" + "\n".join(diffs[:10])
    assert oxzfs.export(pool).returncode == 0
