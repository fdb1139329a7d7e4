"""Random pool/layout/property combinations under the write path, judged by the oracles.

Each combination is drawn from a seed: a vdev layout (stripes of 1-3, mirrors of 2-3, raidz1-3 up
to 7 devices, optionally a special mirror, a dedup vdev, a log and a cache; ashift 9, 12 or 13, pool
version 5000 or 23), dataset properties for the root file system and a nested child (compression,
checksum, recordsize, copies, xattr, dnodesize, special_small_blocks, atime, dedup), and a workload:
the model-based random workload (tests/tools/workload.py) on each file system plus the shapes it does
not make by itself (a fat-ZAP directory, a deep tree, 255-byte names, xattrs of many sizes, sparse
files, hard links across directories, renamed subtrees, truncates up and down). Then `zpool export`,
OpenZFS zdb -bcc -d clean with no leaks, and the re-imported pool equals the model and the manifest.

    OXZFS_MATRIX_RUNS=N   how many combinations (default 3: a fixed list of seeds)
    OXZFS_SEED=S          the first seed (default 1); combination k uses seed S+k
Every failure names its seed and the whole combination, so it reproduces with OXZFS_SEED=that seed
and OXZFS_MATRIX_RUNS=1.
"""
import errno
import os
import random
import shutil

import pytest

import manifest as manifest_mod
from conftest import diff_manifests
from test_write import make_devs, new_pool, zdb_check

RUNS = int(os.environ.get("OXZFS_MATRIX_RUNS", "3"))
SEED0 = int(os.environ.get("OXZFS_SEED", "1"))

COMP_V23 = ["off", "on", "lzjb", "zle", "gzip", "gzip-1", "gzip-9"]
COMP_V5000 = COMP_V23 + ["lz4", "zstd", "zstd-1", "zstd-19", "zstd-fast", "zstd-fast-10", "zstd-fast-1000"]
CSUM_V23 = ["fletcher2", "fletcher4", "sha256"]
CSUM_V5000 = CSUM_V23 + ["sha512", "skein", "edonr"]
# dedup=on/verify is drawn for datasets with a dedup-strong checksum (the dedup vdev above holds
# the DDT's ZAPs then).
DEDUP_WRITES = True


def draw(seed):
    """The combination for SEED: (create args, vdev spec, device sizes, child datasets)."""
    rng = random.Random(seed)
    version = rng.choice([5000, 5000, 5000, 23])
    ashift = rng.choice([9, 12, 13])
    kind, n = rng.choice([("stripe", 1), ("stripe", 2), ("stripe", 3), ("mirror", 2), ("mirror", 3),
                          ("raidz1", 3), ("raidz1", 5), ("raidz2", 4), ("raidz2", 6),
                          ("raidz3", 4), ("raidz3", 5), ("raidz3", 7)])
    extras = []
    if version == 5000 and rng.random() < 0.4:
        extras.append(("special", rng.choice([1, 2])))
    if version == 5000 and rng.random() < 0.2:
        extras.append(("dedup", 1))
    if rng.random() < 0.35:
        extras.append(("log", rng.choice([1, 2])))
    if rng.random() < 0.3:
        extras.append(("cache", 1))
    uneven = rng.random() < 0.3

    def props(top):
        comp = COMP_V5000 if version == 5000 else COMP_V23
        csum = CSUM_V5000 if version == 5000 else CSUM_V23
        p = {"compression": rng.choice(comp), "checksum": rng.choice(csum),
             "copies": str(rng.choice([1, 1, 2, 3])), "atime": rng.choice(["on", "off"])}
        rs = [512, 4096, 8192, 16384, 131072] + ([262144, 1 << 20] if version == 5000 else [])
        p["recordsize"] = str(rng.choice(rs))
        if version == 5000:
            p["xattr"] = rng.choice(["on", "sa"])
            p["dnodesize"] = rng.choice(["legacy", "auto", "2k"])
            if any(e[0] == "special" for e in extras):
                p["special_small_blocks"] = str(rng.choice([0, 4096, 16384, 65536]))
        if rng.random() < 0.15 and p["checksum"] in ("sha256", "sha512", "skein"):
            dedup = rng.choice(["on", "verify"])
            if DEDUP_WRITES:
                p["dedup"] = dedup
        if not top:
            p = {k: v for k, v in p.items() if rng.random() < 0.6}
        return p

    root_props = props(True)
    children = [("c1", props(False))]
    if rng.random() < 0.5:
        children.append(("c1/c2", props(False)))
    # Keep the workload's data well inside the pool: records much smaller than a sector (with
    # parity and copies) would allocate many times their bytes and fill it (ENOSPC has its own test).
    parity = {"raidz1": 1, "raidz2": 2, "raidz3": 3}.get(kind, 0)
    eff = dict(root_props)
    for _, p in [("", root_props)] + children:
        eff.update(p)
        if int(eff["copies"]) * (parity + 1) * (1 << ashift) // int(eff["recordsize"]) > 12:
            p["recordsize"] = eff["recordsize"] = "131072"
    return dict(seed=seed, version=version, ashift=ashift, kind=kind, n=n, extras=extras, uneven=uneven,
                root_props=root_props, children=children)


def layout_args(c, vdir):
    """zpool create's vdev arguments for combination C, its devices made under VDIR."""
    total = c["n"] + sum(k for _, k in c["extras"])
    os.makedirs(vdir, exist_ok=True)
    devs = []
    for i in range(total):
        size = 1024 if not c["uneven"] else 640 + 160 * i
        p = os.path.join(vdir, f"d{i}")
        with open(p, "wb") as f:
            f.truncate(size << 20)
        devs.append(p)
    args = ([] if c["kind"] == "stripe" else [c["kind"]]) + devs[:c["n"]]
    i = c["n"]
    for cls, k in c["extras"]:
        args.append(cls)
        if k > 1 and cls in ("special", "dedup", "log"):
            args.append("mirror")
        args += devs[i:i + k]
        i += k
    return args


def describe(c):
    return (f"seed {c['seed']}: version={c['version']} ashift={c['ashift']} {c['kind']}x{c['n']}"
            f"{' uneven' if c['uneven'] else ''} extras={c['extras']} root={c['root_props']} "
            f"children={c['children']}")


# ---------------------------------------------------------------------------------- extra shapes

def extra_shapes(root, rng):
    """What workload.py does not make: a fat-ZAP directory, a deep tree, 255-byte names, xattrs of
    many sizes, sparse files, hard links across directories, a renamed subtree, truncates."""
    many = os.path.join(root, "many")
    os.mkdir(many)
    for k in range(rng.choice([300, 1200])):
        with open(os.path.join(many, f"entry-{k:05d}-" + "z" * (k % 40)), "wb") as f:
            f.write(bytes([k % 251]) * (k % 700))
    for k in range(0, 300, 7):  # holes in the fat ZAP
        os.unlink(os.path.join(many, f"entry-{k:05d}-" + "z" * (k % 40)))
    d = os.path.join(root, "deep")
    os.mkdir(d)
    for k in range(rng.choice([20, 60])):
        d = os.path.join(d, f"lvl{k}")
        os.mkdir(d)
    with open(os.path.join(d, "bottom"), "wb") as f:
        f.write(b"bottom of the tree")
    longs = os.path.join(root, "longnames")
    os.mkdir(longs)
    for name in ("L" * 255, "\u00e9" * 127 + "x", "d" * 254 + "D"):
        with open(os.path.join(longs, name), "wb") as f:
            f.write(name.encode())
    os.mkdir(os.path.join(longs, "D" * 255))
    os.symlink("t" * 1000, os.path.join(longs, "S" * 255))
    xf = os.path.join(root, "xattrs")
    with open(xf, "wb") as f:
        f.write(b"x")
    for sz in (0, 1, 100, 255, 1000, 4000, 8000, 32000, 65536):
        os.setxattr(xf, f"user.sz{sz}", rng.randbytes(sz))
    for k in range(40):
        os.setxattr(xf, f"user.many{k}", bytes([k]) * (k * 13))
    for k in range(0, 40, 3):
        os.removexattr(xf, f"user.many{k}")
    os.setxattr(xf, "user.sz4000", b"shrunk")
    sp = os.path.join(root, "sparse")
    with open(sp, "wb") as f:
        f.write(b"head")
        f.seek(rng.choice([5 << 20, 77 << 20, 300 << 20]))
        f.write(rng.randbytes(5000))
        f.truncate(f.tell() + (1 << 20))
    with open(os.path.join(root, "sparse2"), "wb") as f:
        f.truncate(1 << 30)
        f.seek(123456789)
        f.write(b"middle")
    links = [os.path.join(root, "many"), os.path.join(root, "longnames"), d]
    src = os.path.join(root, "linked")
    with open(src, "wb") as f:
        f.write(rng.randbytes(20000))
    for k, ld in enumerate(links):
        os.link(src, os.path.join(ld, f"hl{k}"))
    os.unlink(os.path.join(links[0], "hl0"))
    os.rename(os.path.join(root, "deep", "lvl0", "lvl1"), os.path.join(root, "longnames", "moved"))
    os.rename(os.path.join(root, "longnames", "L" * 255), os.path.join(root, "many", "L" * 255))
    tr = os.path.join(root, "trunc")
    data = bytearray(rng.randbytes(3 << 20))
    with open(tr, "wb") as f:
        f.write(data)
    for new in (1000000, 5 << 20, 4097, 0, 700000):
        os.truncate(tr, new)
    with open(tr, "r+b") as f:
        f.seek(100)
        f.write(b"after")
    with open(os.path.join(root, "big"), "wb") as f:
        for _ in range(rng.choice([1, 4])):
            f.write(rng.randbytes(1 << 20))


def run_combination(oxzfs, c, ops=150):
    import workload
    pool = f"mx{c['seed']}"
    base = os.path.join(oxzfs.base, pool)
    shutil.rmtree(base, ignore_errors=True)
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    what = describe(c)
    args = ["-f", "-o", f"ashift={c['ashift']}", "-o", f"version={c['version']}", "-R", alt]
    for k, v in c["root_props"].items():
        args += ["-O", f"{k}={v}"]
    r = oxzfs.zpool("create", *args, pool, *layout_args(c, vdir))
    assert r.returncode == 0, f"{what}\n{r!r}"
    oxzfs.imported.append(pool)
    for name, props in c["children"]:
        cargs = []
        for k, v in props.items():
            cargs += ["-o", f"{k}={v}"]
        r = oxzfs.zfs("create", *cargs, f"{pool}/{name}")
        assert r.returncode == 0, f"{what}\n{r!r}"
    rng = random.Random(c["seed"])
    fss = [""] + [name for name, _ in c["children"]]
    models, manifests = {}, {}
    for k, fs in enumerate(fss):
        root = os.path.join(alt, pool, fs) if fs else os.path.join(alt, pool)
        wroot = os.path.join(root, "wl")
        os.mkdir(wroot)
        try:
            models[fs] = workload.run(wroot, c["seed"] * 10 + k, ops)
            if k < 2:
                extra_shapes(root, rng)
        except Exception as e:  # noqa: BLE001 - reported with the combination
            pytest.fail(f"{what}\non {fs or 'the root'}: {type(e).__name__}: {e}")
        manifests[fs] = manifest_mod.manifest(root, ["wl"])
    r = oxzfs.export(pool)
    assert r.returncode == 0, f"{what}\n{r!r}"
    try:
        zdb_check(vdir, pool)
    except AssertionError as e:
        raise AssertionError(f"{what}\n{e}") from None
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, f"{what}\n{r!r}"
    for fs in fss:
        root = os.path.join(alt, pool, fs) if fs else os.path.join(alt, pool)
        diffs = workload.verify(os.path.join(root, "wl"), models[fs])
        assert not diffs, f"{what}\nre-imported {fs or 'root'} differs from the model:\n" + "\n".join(diffs[:10])
        d = diff_manifests(manifest_mod.manifest(root, ["wl"]), manifests[fs])
        assert not d, f"{what}\nre-imported {fs or 'root'} differs from its manifest:\n{d}"
    assert oxzfs.export(pool).returncode == 0
    shutil.rmtree(base, ignore_errors=True)


SEEDS = list(range(SEED0, SEED0 + RUNS))


# The first combination runs by default, the others (more draws of the same checks) in the nightly run.
@pytest.mark.parametrize("seed", [pytest.param(s, marks=[pytest.mark.nightly] if i else []) for i, s in enumerate(SEEDS)],
                         ids=[f"seed{s}" for s in SEEDS])
def test_random_combination(seed, oxzfs):
    run_combination(oxzfs, draw(seed))


@pytest.mark.parametrize("layout", [["d0"], ["raidz2", "d0", "d1", "d2", "d3"]], ids=["single", "raidz2"])
def test_small_records_on_wide_sectors_fill_to_clean_enospc(layout, oxzfs):
    """512-byte records on 8K sectors with copies=3 allocate ~48 times their bytes (raidz2: ~144):
    writes must meet ENOSPC while they are made, not be accepted and then fail the txg sync
    (export said 'out of space' and the pool kept unwritable dirty data). After the ENOSPC,
    deleting gives space back, export works and zdb is clean."""
    pool = "mxsmall" + str(len(layout))
    base = os.path.join(oxzfs.base, pool)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, len([d for d in layout if d.startswith("d")]), 128)
    spec = [os.path.join(vdir, d) if d.startswith("d") else d for d in layout]
    r = oxzfs.zpool("create", "-o", "ashift=13", "-O", "recordsize=512", "-O", "copies=3", "-O", "compression=off",
                    "-R", alt, pool, *spec)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    written = 0
    with pytest.raises(OSError) as ei:
        for k in range(64):
            with open(os.path.join(root, f"f{k}"), "wb") as f:
                for _ in range(16):
                    f.write(os.urandom(64 << 10))
                    f.flush()
                    written += 64 << 10
    assert ei.value.errno == errno.ENOSPC, ei.value
    assert written > 0
    for k in range(64):
        p = os.path.join(root, f"f{k}")
        if os.path.exists(p):
            os.unlink(p)
    with open(os.path.join(root, "after"), "wb") as f:
        f.write(os.urandom(64 << 10))
    r = oxzfs.export(pool)
    assert r.returncode == 0, repr(r)
    zdb_check(vdir, pool)


def test_dedup_writes(oxzfs):
    """dedup=on with sha256: two copies of the same data share one block (zdb's DDT and dedup ratio),
    zdb-clean."""
    pool = "mxdedup"
    vdir, alt, _ = new_pool(oxzfs, pool, pool, 1, "-O", "checksum=sha256", size_mib=256)
    r = oxzfs.zfs("create", "-o", "dedup=on", f"{pool}/d")
    assert r.returncode == 0, repr(r)
    data = os.urandom(4 << 20)
    for name in ("a", "b"):
        with open(os.path.join(alt, pool, "d", name), "wb") as f:
            f.write(data)
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    deduped = [ln for ln in text.splitlines() if "bp deduped:" in ln]
    assert deduped and int(deduped[0].split()[2]) >= 4 << 20, text[-3000:]
