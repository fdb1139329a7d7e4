"""The write path, judged by the oracles: pools oxzfs creates and fills through its read-write
FUSE mount must pass OpenZFS 2.1's `zdb -bcc -d` with no leaks and no errors, read back exactly
(by oxzfs after export/import, and by zfs-fuse for version-23 pools), and zfs-fuse's own writes
to our pools must read back through oxzfs."""
import os
import re
import subprocess
import tempfile
import time

import pytest

from conftest import diff_manifests, unmount_below, zfs_fuse_imported
import manifest as manifest_mod
import oracle_pools
import populate as populate_mod

ZDB = oracle_pools.ZDB

# (id, vdev layout builder, device count, ashift, version)
LAYOUTS = [
    ("stripe1-a9", lambda d: d, 1, 9, 5000),
    ("stripe2-a12", lambda d: d, 2, 12, 5000),
    ("mirror2-a9", lambda d: ["mirror"] + d, 2, 9, 5000),
    ("raidz1-a9", lambda d: ["raidz1"] + d, 3, 9, 5000),
    ("raidz2-a12", lambda d: ["raidz2"] + d, 5, 12, 5000),
    ("raidz3-a9", lambda d: ["raidz3"] + d, 5, 9, 5000),
    ("mirror-v23", lambda d: ["mirror"] + d, 2, 12, 23),
    # The hybrid pool: raidz data, a mirrored special vdev, a log and a cache device.
    ("hybrid-a12", lambda d: ["raidz1"] + d[:3] + ["special", "mirror"] + d[3:5] + ["log", d[5], "cache", d[6]],
     7, 12, 5000),
]


def make_devs(d, n, size_mib=128):
    os.makedirs(d, exist_ok=True)
    out = []
    for i in range(n):
        p = os.path.join(d, f"d{i}")
        with open(p, "wb") as f:
            f.truncate(size_mib << 20)
        out.append(p)
    return out



def new_pool(oxzfs, pool, tag, ndevs, *create_args, size_mib=128):
    """Create POOL from NDEVS fresh files under the module's run dir, mounted under an altroot:
    (vdev dir, altroot, root mountpoint)."""
    base = os.path.join(oxzfs.base, tag)
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, ndevs, size_mib)
    r = oxzfs.zpool("create", *create_args, "-R", alt, pool, *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    return vdir, alt, os.path.join(alt, pool)


def zdb_cmd():
    """(argv head, environment) of an OpenZFS zdb that exits as soon as its work is done. A
    traversal (-b, -c, -S) prefetches blocks, and zdb's ARC holds prefetched buffers for
    zfs_arc_min_prefetch_ms (1 s), or zfs_arc_min_prescient_prefetch_ms (6 s) for those a
    traversal asked for, before it may evict them: zdb's exit (arc_flush) waits that out,
    1 to 5 s of idling after well under a second's work on a small pool. Both tunables set
    to 1 ms (`-o`) take that wait away and change nothing zdb checks or prints. `-o` looks
    the variable up in libzpool.so, which the install names libzpool.so.5 only, and the
    installed zdb wrapper sets the library path itself: the binary it runs is run here with a
    private dir holding that name first on the path. Without that layout: zdb as installed."""
    root = os.path.dirname(os.path.abspath(ZDB))
    binary = os.path.join(os.path.dirname(root), "sbin", "zdb")
    libdir = os.path.join(os.path.dirname(root), "lib", "x86_64-linux-gnu")
    if not (os.access(binary, os.X_OK) and os.path.exists(os.path.join(libdir, "libzpool.so.5"))):
        return [ZDB], None
    mine = os.path.join(tempfile.gettempdir(), f"oxzfs-zdb-lib-{os.getuid()}")
    link = os.path.join(mine, "libzpool.so")
    if not os.path.exists(link):
        os.makedirs(mine, exist_ok=True)
        tmp = f"{link}.{os.getpid()}"
        os.symlink(os.path.join(libdir, "libzpool.so.5"), tmp)
        os.replace(tmp, link)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{mine}:{libdir}", PATH=f"{root}:{os.environ.get('PATH', '')}")
    return [binary, "-o", "zfs_arc_min_prefetch_ms=1", "-o", "zfs_arc_min_prescient_prefetch_ms=1"], env


def zdb_check(vdev_dir, pool):
    """OpenZFS zdb -bcc -d on the exported pool: exit 0, no leaks, no checksum errors."""
    if not os.access(ZDB, os.X_OK):
        pytest.fail(f"OpenZFS zdb not found at {ZDB}: run scripts/install-deps.sh")
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdev_dir, "-bcc", "-d", pool], capture_output=True, text=True,
                       errors="replace", timeout=600, env=env)
    text = r.stdout + r.stderr
    assert r.returncode == 0, f"zdb -bcc -d {pool} exited {r.returncode}:\n{text[-4000:]}"
    assert "No leaks" in text, f"zdb did not report 'No leaks' for {pool}:\n{text[-4000:]}"
    bad = [ln for ln in text.splitlines()
           if ("leaked" in ln and "verify nothing leaked" not in ln) or "error" in ln.lower()]
    assert not bad, f"zdb found problems in {pool}:\n" + "\n".join(bad[:20])
    return text


@pytest.mark.parametrize("lid,layout,n,ashift,version", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_create_fill_export_zdb_reimport(lid, layout, n, ashift, version, oxzfs):
    pool = "w" + lid.replace("-", "")
    base = os.path.join(oxzfs.base, lid)
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, n)
    r = oxzfs.zpool("create", "-f", "-o", f"ashift={ashift}", "-o", f"version={version}", "-R", alt,
                    pool, *layout(devs))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    assert os.path.ismount(root), f"{root} is not mounted after create:\n{r!r}"
    populate_mod.populate(root, 7, "small")
    want = manifest_mod.manifest(root)
    assert len(want) > 20
    # Everything reads back through the live mount before export.
    r = oxzfs.export(pool)
    assert r.returncode == 0, repr(r)
    assert not os.path.ismount(root)
    zdb_check(vdir, pool)
    # Re-import read-only: the same content.
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    got = manifest_mod.manifest(root)
    d = diff_manifests(got, want)
    assert not d, f"{pool} after export/import differs:\n{d}"
    assert oxzfs.export(pool).returncode == 0


def test_create_refusals(oxzfs):
    base = os.path.join(oxzfs.base, "refusals")
    small = os.path.join(base, "small")
    os.makedirs(base, exist_ok=True)
    with open(small, "wb") as f:
        f.truncate(32 << 20)
    r = oxzfs.zpool("create", "tiny", small)
    assert r.returncode == 1 and "less than the minimum size (64M)" in r.stderr, repr(r)
    r = oxzfs.zpool("create", "nope", os.path.join(base, "absent"))
    assert r.returncode == 1 and "No such file or directory" in r.stderr, repr(r)
    devs = make_devs(base, 3)
    r = oxzfs.zpool("create", "mix", "mirror", devs[0], devs[1], devs[2], "raidz", "x", "y")
    assert r.returncode != 0
    r = oxzfs.zpool("create", "mix", devs[0], "mirror", devs[1], devs[2])
    assert r.returncode == 1 and "mismatched replication level" in r.stderr and "-f" in r.stderr, repr(r)
    r = oxzfs.zpool("create", "-n", "dry", "mirror", devs[0], devs[1])
    assert r.returncode == 0 and "would create 'dry' with the following layout" in r.stdout, repr(r)
    assert "mirror" in r.stdout
    r = oxzfs.zpool("create", "1bad", devs[0])
    assert r.returncode == 1 and "must begin with a letter" in r.stderr, repr(r)
    # A device of an exported pool needs -f; of an imported one, it is refused.
    alt = os.path.join(base, "alt")
    r = oxzfs.zpool("create", "-R", alt, "first", devs[0])
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("first")
    assert oxzfs.export("first").returncode == 0
    r = oxzfs.zpool("create", "second", devs[0])
    assert r.returncode == 1 and "is part of exported pool 'first'" in r.stderr and "-f" in r.stderr, repr(r)
    unmount_below(alt)


def test_create_destroy_create_on_the_same_files(oxzfs):
    """A pool created on the files of a destroyed pool that synced far past the new pool's txgs:
    create clears each device's four labels whole (vdev_label_init), uberblock rings included,
    so nothing of the old pool is left for an import to take for the newest. The new pool
    imports with its data; zdb -l shows it alone in all four labels of each file, every
    uberblock in the rings is its own, zdb -bcc finds no leak, and the old pool is found no
    more."""
    base = os.path.join(oxzfs.base, "recreate")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 2, 64)
    assert oxzfs.zpool("create", "-R", alt, "rcgone", *devs).returncode == 0
    oxzfs.imported.append("rcgone")
    for i in range(30):
        with open(os.path.join(alt, "rcgone", f"f{i}"), "wb") as f:
            f.write(os.urandom(20000))
        assert oxzfs.zpool("sync", "rcgone").returncode == 0
    assert oxzfs.zpool("destroy", "rcgone").returncode == 0
    oxzfs.imported.remove("rcgone")
    pool = "rcnew"
    r = oxzfs.zpool("create", "-R", alt, pool, *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    data = os.urandom(300000)
    with open(os.path.join(alt, pool, "mine"), "wb") as f:
        f.write(data)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    for dev in devs:
        r = subprocess.run([ZDB, "-lu", dev], capture_output=True, text=True, errors="replace", timeout=60)
        text = r.stdout + r.stderr
        assert r.returncode == 0 and "failed to unpack label" not in text, text[-3000:]
        names = set(re.findall(r"^\s+name: '([^']*)'", text, re.M))
        assert names == {pool}, f"{dev}: labels of {names}:\n{text[-3000:]}"
        assert re.search(r"^\s+labels = 0 1 2 3\s*$", text, re.M), f"{dev}: the four labels differ:\n{text[-3000:]}"
        sums = set(re.findall(r"^\s+guid_sum = (\d+)", text, re.M))
        assert len(sums) == 1, f"{dev}: uberblocks of more than one pool (guid sums {sums}):\n{text[-3000:]}"
    r = subprocess.run([ZDB, "-e", "-p", vdir, "rcgone"], capture_output=True, text=True, errors="replace", timeout=60)
    assert r.returncode != 0, f"zdb still finds the destroyed pool:\n{(r.stdout + r.stderr)[-2000:]}"
    assert oxzfs.import_ro(vdir, pool, alt).returncode == 0
    with open(os.path.join(alt, pool, "mine"), "rb") as f:
        assert f.read() == data
    assert sorted(os.listdir(os.path.join(alt, pool))) == ["mine"]
    assert oxzfs.export(pool).returncode == 0


def _strip_xattrs(entries):
    return [{k: v for k, v in e.items() if k != "xattrs"} for e in entries]


def test_v23_pool_crosses_with_zfs_fuse(oxzfs, work_dir):
    """A version-23 pool written by oxzfs: zfs-fuse imports it and sees the same content; zfs-fuse
    writes more and exports; oxzfs reads what zfs-fuse wrote; zdb is clean at each step."""
    pool = "wcross23"
    base = os.path.join(oxzfs.base, "cross23")
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, 2)
    r = oxzfs.zpool("create", "-o", "version=23", "-R", alt, pool, "mirror", *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    populate_mod.populate(root, 11, "small")
    ours = _strip_xattrs(manifest_mod.manifest(root))
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    with zfs_fuse_imported(work_dir, vdir, os.path.join(base, "zfs-fuse-alt"), pool) as zroot:
        theirs = _strip_xattrs(manifest_mod.manifest(zroot))
        d = diff_manifests(theirs, ours)
        assert not d, f"zfs-fuse sees different content:\n{d}"
        populate_mod.populate(os.path.join(zroot, "from-zfs-fuse"), 12, "small")
        with open(os.path.join(zroot, "file-by-zfs-fuse"), "wb") as f:
            f.write(os.urandom(300000))
        after = _strip_xattrs(manifest_mod.manifest(zroot))
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    got = _strip_xattrs(manifest_mod.manifest(root))
    d = diff_manifests(got, after)
    assert not d, f"oxzfs reads zfs-fuse's writes differently:\n{d}"
    assert oxzfs.export(pool).returncode == 0


def test_enospc_keeps_slop_and_frees_again(oxzfs):
    """Filling the pool ends in a clean ENOSPC before the slop space is touched; deleting gives
    the space back; zdb is clean afterwards and the content reads back."""
    import errno
    pool = "wfull"
    base = os.path.join(oxzfs.base, "full")
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, 2, 256)
    r = oxzfs.zpool("create", "-R", alt, pool, "mirror", *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    chunk = os.urandom(1 << 20)
    written = 0
    err = None
    with open(os.path.join(root, "fill"), "wb") as f:
        try:
            for _ in range(1024):
                f.write(chunk)
                f.flush()
                written += len(chunk)
            os.fsync(f.fileno())
        except OSError as e:
            err = e
    assert err is not None and err.errno == errno.ENOSPC, f"expected ENOSPC, got {err!r} after {written} bytes"
    # 256 MiB mirror: OpenZFS keeps 128 MiB of slop; most of the rest must have been usable.
    assert 80 << 20 <= written <= 128 << 20, written
    st = os.statvfs(root)
    assert st.f_bavail * st.f_frsize < 16 << 20
    os.unlink(os.path.join(root, "fill"))
    with open(os.path.join(root, "again"), "wb") as f:
        for _ in range(64):
            f.write(chunk)
        os.fsync(f.fileno())
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    assert sorted(os.listdir(root)) == ["again"]
    with open(os.path.join(root, "again"), "rb") as f:
        assert f.read(1 << 20) == chunk
    assert os.path.getsize(os.path.join(root, "again")) == 64 << 20
    assert oxzfs.export(pool).returncode == 0


KILL9_LAYOUTS = [("raidz1", 3), ("mirror", 2), (None, 1)]


# Seeds 1-3 turn once through the layouts; 4-6 turn through them again with other workloads
# (the nightly run: scripts/test.sh --nightly).
@pytest.mark.parametrize("seed", [1, 2, 3] + [pytest.param(s, marks=pytest.mark.nightly) for s in (4, 5, 6)])
def test_kill9_keeps_everything_fsynced(seed, oxzfs_bin, work_dir):
    """kill -9 of the daemon in the middle of a workload: the pool imports at its last synced
    txg, zdb is clean, and every file that was fsync'd is there with its content. The layout
    (raidz1, mirror, single disk) turns with the seed; crash_at_random_points_imports_the_last_
    synced_txg (crates/engine/tests/crash.rs) does the same below the daemon over many seeds."""
    import random
    import time
    from conftest import Oxzfs
    rng = random.Random(seed)
    base = os.path.join(work_dir, "run", "kill9", str(seed))
    unmount_below(base)
    import shutil
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    ox = Oxzfs(oxzfs_bin, base)
    ox.start_daemon()
    pool = f"wkill{seed}"
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    kind, ndev = KILL9_LAYOUTS[(seed - 1) % len(KILL9_LAYOUTS)]
    devs = make_devs(vdir, ndev, 256)
    try:
        r = ox.zpool("create", "-R", alt, pool, *([kind] if kind else []), *devs)
        assert r.returncode == 0, repr(r)
        root = os.path.join(alt, pool)
        synced = {}
        deadline = time.time() + rng.uniform(1, 6)
        i = 0
        total = 0
        while time.time() < deadline and total < (60 << 20):
            data = os.urandom(rng.choice([100, 5000, 70000, 300000]))
            total += len(data)
            p = os.path.join(root, f"f{i}")
            with open(p, "wb") as f:
                f.write(data)
                if rng.random() < 0.4:
                    f.flush()
                    os.fsync(f.fileno())
                    synced[f"f{i}"] = data
            i += 1
        # the process that serves the pool, not the `daemon start` launcher (long gone): kill9
        # returns once it is gone, so the import below never races a daemon still holding the pool
        ox.kill9()
    finally:
        ox.teardown()
    # zdb on the pool as the crash left it (never exported).
    zdb_check(vdir, pool)
    ox2 = Oxzfs(oxzfs_bin, os.path.join(base, "after"))
    ox2.start_daemon()
    try:
        r = ox2.run("zpool", "import", "-f", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        ox2.imported.append(pool)
        root = os.path.join(alt, pool)
        for name, data in synced.items():
            with open(os.path.join(root, name), "rb") as f:
                assert f.read() == data, f"fsync'd file {name} lost or changed (seed {seed})"
        assert ox2.export(pool).returncode == 0
    finally:
        ox2.teardown()
    zdb_check(vdir, pool)


def test_zpool_add_log_cache_special_and_data(oxzfs):
    """zpool add of a log device, a cache device, a special mirror and a data mirror to a live
    pool: writes after each go on, the pool lists them, zdb is clean and uses both classes."""
    pool = "wadd"
    base = os.path.join(oxzfs.base, "add")
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    d = make_devs(vdir, 8)
    r = oxzfs.zpool("create", "-R", alt, pool, "mirror", d[0], d[1])
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    populate_mod.populate(os.path.join(root, "before"), 1, "small")
    for args in (["log", d[2]], ["cache", d[3]], ["special", "mirror", d[4], d[5]]):
        r = oxzfs.zpool("add", pool, *args)
        assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("add", pool, d[6])
    assert r.returncode == 1 and "mismatched replication level" in r.stderr, repr(r)
    r = oxzfs.zpool("add", pool, "mirror", d[6], d[7])
    assert r.returncode == 0, repr(r)
    populate_mod.populate(os.path.join(root, "after"), 2, "small")
    want = manifest_mod.manifest(root)
    st = oxzfs.zpool("status", pool).stdout
    for word in ("logs", "cache", "special", "mirror-3"):
        assert word in st, st
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert "Special class" in text, text[-2000:]
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    d2 = diff_manifests(manifest_mod.manifest(root), want)
    assert not d2, d2
    assert oxzfs.export(pool).returncode == 0


def test_quotas_readonly_fallocate(oxzfs):
    """quota and refquota end in EDQUOT, readonly=on in EROFS, fallocate grows and punches;
    zdb is clean afterwards."""
    import errno
    pool = "wquota"
    vdir, alt, _ = new_pool(oxzfs, pool, "quota", 1, size_mib=512)
    for args in (["-o", "quota=20M", f"{pool}/q"], ["-o", "refquota=10M", f"{pool}/r"]):
        r = oxzfs.zfs("create", *args)
        assert r.returncode == 0, repr(r)
    root = os.path.join(alt, pool)
    chunk = os.urandom(1 << 20)
    for ds, limit in (("q", 20), ("r", 10)):
        n = 0
        with pytest.raises(OSError) as ei:
            with open(os.path.join(root, ds, "f"), "wb") as f:
                for _ in range(64):
                    f.write(chunk)
                    f.flush()
                    n += 1
        assert ei.value.errno == errno.EDQUOT, ei.value
        assert limit - 2 <= n <= limit, (ds, n)
    r = oxzfs.zfs("set", "readonly=on", f"{pool}/r")
    assert r.returncode == 0, repr(r)
    with pytest.raises(OSError) as ei:
        open(os.path.join(root, "r", "new"), "wb").close()
    assert ei.value.errno == errno.EROFS
    p = os.path.join(root, "holey")
    with open(p, "wb") as f:
        f.write(chunk * 4)
        os.posix_fallocate(f.fileno(), 0, 6 << 20)
    assert os.path.getsize(p) == 6 << 20
    subprocess.run(["fallocate", "-p", "-o", str(1 << 20), "-l", str(2 << 20), p], check=True)
    with open(p, "rb") as f:
        data = f.read()
    assert data[: 1 << 20] == chunk and data[1 << 20: 3 << 20] == bytes(2 << 20) and data[3 << 20: 4 << 20] == chunk
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


WORKLOADS = [
    ("mirror-a9-lz4", ["mirror"], 2, 9, []),
    ("raidz2-a12-gzip", ["raidz2"], 4, 12, ["-O", "compression=gzip"]),
    ("stripe-a9-off-sha256", [], 2, 9, ["-O", "compression=off", "-O", "checksum=sha256"]),
    ("raidz1-hybrid-zle", ["raidz1"], 3, 12, ["-O", "compression=zle", "-O", "recordsize=16K"]),
    ("v23-mirror-lzjb", ["mirror"], 2, 9, ["-o", "version=23", "-O", "compression=lzjb"]),
    # ZPL 5: xattrs in the SA (large ones in the xattr directory), 1K dnodes (large_dnode).
    ("stripe-a9-xattrsa-dnauto", [], 1, 9, ["-O", "xattr=sa", "-O", "dnodesize=auto"]),
]


@pytest.mark.parametrize("wid,kind,n,ashift,opts", WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_model_workload(wid, kind, n, ashift, opts, oxzfs):
    """A random workload checked op by op against an in-memory model on each layout; then export,
    OpenZFS zdb -bcc with no leaks, and the re-imported pool equals the model."""
    import workload
    pool = "wl" + wid.replace("-", "")[:20]
    base = os.path.join(oxzfs.base, "wl-" + wid)
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, n + (3 if "hybrid" in wid else 0), 256)
    layout = kind + devs[:n]
    if "hybrid" in wid:
        layout += ["special", "mirror", devs[n], devs[n + 1], "log", devs[n + 2]]
    r = oxzfs.zpool("create", "-o", f"ashift={ashift}", *opts, "-R", alt, pool, *layout)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    seed = sum(map(ord, wid))
    model = workload.run(root, seed, 250)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    diffs = workload.verify(root, model)
    assert not diffs, f"seed {seed}: the re-imported pool differs from the model:\n" + "\n".join(diffs[:10])
    assert oxzfs.export(pool).returncode == 0


def test_unlinked_open_file_lives_until_close(oxzfs):
    """A file unlinked while open keeps its data for the open descriptor (it waits on the delete
    queue) and is freed at the last close; zdb is clean afterwards."""
    pool = "wdq"
    vdir, alt, _ = new_pool(oxzfs, pool, "dq", 1)
    p = os.path.join(alt, pool, "doomed")
    data = os.urandom(3 << 20)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, data)
        os.unlink(p)
        assert not os.path.exists(p)
        os.fsync(fd)
        os.write(fd, b"more")
        assert os.pread(fd, len(data) + 4, 0) == data + b"more"
    finally:
        os.close(fd)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    # The file's object is gone: the dataset holds no plain file any more.
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dd", pool], capture_output=True, text=True, errors="replace")
    assert r.returncode == 0, r.stderr
    assert "ZFS plain file" not in r.stdout, r.stdout[-3000:]


def test_zpool_set_get_persist(oxzfs):
    """zpool set of the comment (config) and of pool_props values, read back after export and
    import, and bad values refused."""
    pool = "wprops"
    vdir, alt, _ = new_pool(oxzfs, pool, "props", 1)
    for kv in ("comment=hello", "autoexpand=on", "failmode=continue"):
        r = oxzfs.zpool("set", kv, pool)
        assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("set", "failmode=sometimes", pool)
    assert r.returncode == 1 and "failmode" in r.stderr, repr(r)
    r = oxzfs.zpool("set", "size=1", pool)
    assert r.returncode == 1 and "readonly" in r.stderr, repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.run("zpool", "import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("get", "-H", "-o", "property,value,source", "comment,autoexpand,failmode,delegation", pool)
    assert r.returncode == 0, repr(r)
    assert r.stdout.splitlines() == ["comment\thello\tlocal", "autoexpand\ton\tlocal", "failmode\tcontinue\tlocal",
                                     "delegation\ton\tdefault"], r.stdout
    assert oxzfs.export(pool).returncode == 0


def test_zpool_history_records_changes(oxzfs):
    """Commands that change a pool are logged to its history, which OpenZFS's zdb -h reads."""
    pool = "whist"
    vdir, alt, _ = new_pool(oxzfs, pool, "hist", 1)
    assert oxzfs.zfs("create", f"{pool}/a").returncode == 0
    assert oxzfs.zpool("set", "comment=hi", pool).returncode == 0
    r = oxzfs.zpool("history", pool)
    assert r.returncode == 0, repr(r)
    lines = r.stdout.splitlines()
    assert lines[0] == f"History for '{pool}':", r.stdout
    cmds = [ln.split(" ", 1)[1] for ln in lines[1:] if ln.strip()]
    assert cmds[0].startswith("zpool create ") and cmds[1:] == [f"zfs create {pool}/a", f"zpool set comment=hi {pool}"], cmds
    assert oxzfs.export(pool).returncode == 0
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-h", pool], capture_output=True, text=True)
    assert r.returncode == 0 and f"zfs create {pool}/a" in r.stdout and f"zpool set comment=hi {pool}" in r.stdout, r.stdout


def test_zfs_mount_unmount_and_mountpoint_changes(oxzfs):
    """zfs unmount / mount of a file system, canmount=off keeps it unmounted, and a new mountpoint
    moves the mount (children follow); the data stays."""
    pool = "wmnt"
    vdir, alt, root = new_pool(oxzfs, pool, "mnt", 1)
    assert oxzfs.zfs("create", "-p", f"{pool}/a/b").returncode == 0
    with open(os.path.join(root, "a", "b", "f"), "w") as f:
        f.write("data")
    r = oxzfs.zfs("unmount", f"{pool}/a")
    assert r.returncode == 1 and "busy" in r.stderr, repr(r)  # a file system is mounted below it
    for ds in (f"{pool}/a/b", f"{pool}/a"):
        r = oxzfs.zfs("unmount", ds)
        assert r.returncode == 0, repr(r)
    assert not os.path.ismount(os.path.join(root, "a")) and not os.path.ismount(os.path.join(root, "a", "b"))
    r = oxzfs.zfs("unmount", f"{pool}/a")
    assert r.returncode == 1 and "not currently mounted" in r.stderr, repr(r)
    assert oxzfs.zfs("mount", f"{pool}/a").returncode == 0
    assert os.path.ismount(os.path.join(root, "a"))
    assert oxzfs.zfs("mount", "-a").returncode == 0
    assert os.path.ismount(os.path.join(root, "a", "b"))
    r = oxzfs.zfs("set", f"mountpoint=/moved", f"{pool}/a")
    assert r.returncode == 0, repr(r)
    assert os.path.ismount(os.path.join(alt, "moved")) and os.path.ismount(os.path.join(alt, "moved", "b"))
    with open(os.path.join(alt, "moved", "b", "f")) as f:
        assert f.read() == "data"
    r = oxzfs.zfs("set", "canmount=off", f"{pool}/a")
    assert r.returncode == 0, repr(r)
    assert not os.path.ismount(os.path.join(alt, "moved"))
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_create_without_daemon_starts_it(oxzfs_bin, work_dir):
    """`zpool create` with no daemon running starts one, as `zpool import` does: the new pool is
    imported and mounted afterwards (it used to be written and left behind, neither imported nor
    exported)."""
    from conftest import Oxzfs
    base = os.path.join(work_dir, "run", "create-autostart")
    unmount_below(base)
    import shutil
    shutil.rmtree(base, ignore_errors=True)
    ox = Oxzfs(oxzfs_bin, base)
    try:
        assert not ox.daemon_alive()
        devs = make_devs(os.path.join(base, "vdevs"), 2)
        alt = os.path.join(base, "alt")
        r = ox.zpool("create", "-R", alt, "auto", "mirror", *devs)
        assert r.returncode == 0, repr(r)
        ox.imported.append("auto")
        assert ox.daemon_alive()
        r = ox.zpool("list", "-H", "-o", "name,health")
        assert r.stdout.split() == ["auto", "ONLINE"], repr(r)
        with open(os.path.join(alt, "auto", "f"), "wb") as f:
            f.write(b"x" * 100000)
        assert ox.export("auto").returncode == 0
        zdb_check(os.path.join(base, "vdevs"), "auto")
    finally:
        ox.teardown()


def test_zpool_iostat_and_list_v_classes_and_cache(oxzfs):
    """`zpool iostat -v` and `zpool list -v` as OpenZFS lays it out: the data vdevs, then a heading with a dash in
    every column for each class (special, logs) and for cache devices; the top-level vdevs'
    alloc adds up to the pool's; writes reach the raidz children."""
    pool = "wiostat"
    vdir = os.path.join(oxzfs.base, "iostat", "vdevs")
    alt = os.path.join(oxzfs.base, "iostat", "alt")
    d = make_devs(vdir, 6)
    r = oxzfs.zpool("create", "-R", alt, pool, "raidz1", *d[:3], "special", d[3], "log", d[4], "cache", d[5])
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    with open(os.path.join(alt, pool, "big"), "wb") as f:
        f.write(os.urandom(8 << 20))
        f.flush()
        os.fsync(f.fileno())
    # fsync put the file in the intent log (on the log device); the txg puts it in the raidz.
    assert oxzfs.zpool("sync", pool).returncode == 0
    r = oxzfs.zpool("iostat", "-vp", pool)
    assert r.returncode == 0, repr(r)
    rows = [ln.split() for ln in r.stdout.splitlines()[3:-1]]
    names = [x[0] for x in rows]
    assert names == [pool, "raidz1-0", *d[:3], "special", d[3], "logs", d[4], "cache", d[5]], r.stdout
    for heading in ("special", "logs", "cache"):
        assert rows[names.index(heading)][1:] == ["-"] * 6, r.stdout
    by = {x[0]: x for x in rows}
    # Every class but the log adds to the pool's space (vdev_space_update): the log device's
    # allocations (its intent-log chain) are its own.
    assert int(by[pool][1]) == int(by["raidz1-0"][1]) + int(by[d[3]][1]), r.stdout
    assert int(by["raidz1-0"][1]) >= 8 << 20, r.stdout
    assert all(int(by[c][4]) > 0 or int(by[c][6]) > 0 for c in d[:3]), r.stdout
    # The cache device: nothing cached yet, its space (less labels) free.
    assert int(by[d[5]][1]) == 0 and (128 << 20) - (5 << 20) < int(by[d[5]][2]) < 128 << 20, r.stdout
    # zpool list -v: the same order and headings; top-level vdevs carry FRAG and CAP.
    r = oxzfs.zpool("list", "-vHp", "-o", "name,size,alloc,frag,cap,health", pool)
    assert r.returncode == 0, repr(r)
    lrows = [ln.split("\t") for ln in r.stdout.splitlines()]
    assert [x[0].strip() for x in lrows] == names, r.stdout
    lby = {x[0].strip(): x for x in lrows}
    for heading in ("special", "logs", "cache"):
        assert lby[heading][1:] == ["-"] * 5, r.stdout
    for top in ("raidz1-0", d[3], d[4]):
        assert lby[top][3].isdigit() and lby[top][4].isdigit() and lby[top][5] == "ONLINE", r.stdout
    assert int(lby["raidz1-0"][2]) == int(by["raidz1-0"][1]), (r.stdout, by)
    assert lby[d[0]][1:5] == ["-"] * 4, r.stdout
    assert oxzfs.export(pool).returncode == 0


def test_zpool_iostat_latency_queues_histograms_and_intervals(oxzfs):
    """`zpool iostat -l/-q/-w/-r`, vdev filters and `interval count` as OpenZFS 2.1 prints them:
    the histograms count every leaf I/O the operation counters count (the intent log's writes
    as sync writes on the log device, the txg's as async writes on the data disks); a report
    per interval shows what happened in that interval only; OpenZFS's refusals."""
    pool = "wiolat"
    vdir, alt = os.path.join(oxzfs.base, "iolat", "vdevs"), os.path.join(oxzfs.base, "iolat", "alt")
    *data, log = make_devs(vdir, 3)
    r = oxzfs.zpool("create", "-O", "compression=off", "-R", alt, pool, "mirror", *data, "log", log)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    fd = os.open(os.path.join(root, "small"), os.O_WRONLY | os.O_CREAT, 0o644)
    for _ in range(20):
        os.write(fd, b"s" * 4096)
        os.fsync(fd)
    os.close(fd)
    assert oxzfs.zpool("sync", pool).returncode == 0

    def histos(flag):
        """{vdev: [[column values] per bucket]} of `zpool iostat -Hp -v FLAG` (counts since import)."""
        r = oxzfs.zpool("iostat", "-Hpv", flag, pool)
        assert r.returncode == 0, repr(r)
        out, name = {}, None
        for ln in r.stdout.splitlines():
            f = ln.split("\t")
            if len(f) == 1 and f[0]:
                name = f[0]
                out[name] = []
            elif len(f) > 1:
                out[name].append([int(x) for x in f[1:]])
        return out

    # Without an interval the histograms are counts since import; the pool is idle, so the
    # two tables count the same I/Os.
    w = histos("-w")
    rq = histos("-r")
    for leaf in (*data, log):
        rows = w[leaf]
        assert len(rows) == 37, rows
        # Columns: total_wait r/w, disk_wait r/w, syncq r/w, asyncq r/w, scrub, trim.
        assert [x[:2] for x in rows] == [x[2:4] for x in rows]  # no queue: total wait is the disk wait
        assert all(x[4:] == [0] * 6 for x in rows), "queue waits sampled with no queue"
        # Columns: sync_read ind/agg, sync_write ind/agg, async_read, async_write, scrub, trim.
        assert len(rq[leaf]) == 25 - 9  # buckets from 512 B
        assert all(x[1::2] == [0] * 6 for x in rq[leaf]), "aggregated I/O reported"
        assert sum(x[0] + x[1] for x in rows) == sum(sum(x[0::2]) for x in rq[leaf]), (leaf, rows, rq[leaf])
    assert sum(x[2] for x in rq[log]) >= 20, rq[log]  # each fsync wrote at least one log block
    assert sum(x[6] for x in rq[log]) == 0, "log device writes counted as async"
    for d in data:
        assert sum(x[6] for x in rq[d]) > 0 and sum(x[2] for x in rq[d]) == 0, rq[d]
    # the file (80 KiB, one block) reached each mirror side in one async write of 64-128 KiB
    assert all(rq[d][16 - 9][6] >= 1 for d in data), rq
    # zil_slog_bulk: a commit with more log bytes than this writes them to the log device at
    # async priority (0: every commit).
    assert oxzfs.run("tunable", "zil_slog_bulk=0").returncode == 0
    try:
        fd = os.open(os.path.join(root, "bulk"), os.O_WRONLY | os.O_CREAT, 0o644)
        for _ in range(5):
            os.write(fd, b"b" * 4096)
            os.fsync(fd)
        os.close(fd)
    finally:
        assert oxzfs.run("tunable", "zil_slog_bulk=768K").returncode == 0
    rq2 = histos("-r")
    assert sum(x[6] for x in rq2[log]) >= 5 and sum(x[2] for x in rq2[log]) == sum(x[2] for x in rq[log]), (rq[log], rq2[log])
    rq = rq2

    r = oxzfs.zpool("iostat", "-l", pool)
    assert r.returncode == 0, repr(r)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["capacity", "operations", "bandwidth", "total_wait", "disk_wait", "syncq_wait", "asyncq_wait", "scrub", "trim"], r.stdout
    row = lines[3].split()
    assert row[0] == pool and re.fullmatch(r"\d+(ns|us|ms|s)", row[8]) and row[8] == row[10], r.stdout
    assert row[11:] == ["-"] * 6, r.stdout
    r = oxzfs.zpool("iostat", "-q", "-H", pool)
    assert r.returncode == 0 and r.stdout.split("\t")[7:] == ["0"] * 11 + ["0\n"], repr(r)

    # Named vdevs only, each at depth 0 under the "vdev" title, closed by a separator.
    r = oxzfs.zpool("iostat", "-v", pool, log)
    assert r.returncode == 0, repr(r)
    lines = r.stdout.splitlines()
    assert lines[1].startswith("vdev ") and lines[-1].startswith("-----"), r.stdout
    # (the class heading of the log is an empty line when vdevs are named, as in OpenZFS)
    assert [ln.split()[0] for ln in lines[3:-1] if ln.strip()] == [log], r.stdout

    # -y: the report since import is left out. The one interval of an idle pool shows no
    # writes, where the report since import shows those of the test so far.
    assert oxzfs.zpool("sync", pool).returncode == 0
    since = oxzfs.zpool("iostat", "-Hp", pool, check=True).stdout.split("\t")
    r = oxzfs.zpool("iostat", "-Hp", "-y", pool, "1", "1")
    rows = [ln.split("\t") for ln in r.stdout.splitlines()]
    assert r.returncode == 0 and len(rows) == 1 and rows[0][0] == pool, repr(r)
    assert int(since[4]) > 0 and rows[0][4] == "0" and rows[0][6] == "0", (since, rows)

    # One report per interval: the first since import, the next ones only what their second saw.
    cp = subprocess.Popen([oxzfs.binary, "zpool", "iostat", "-Hp", pool, "1", "4"], env=oxzfs.env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    with open(os.path.join(root, "burst"), "wb") as f:
        f.write(os.urandom(8 << 20))
    assert oxzfs.zpool("sync", pool).returncode == 0
    out, err = cp.communicate(timeout=60)
    assert cp.returncode == 0, err
    rows = [ln.split("\t") for ln in out.splitlines()]
    assert len(rows) == 4 and all(x[0] == pool for x in rows), out
    written = sum(int(x[6]) for x in rows[1:])
    # both mirror sides took the 8 MiB (each report is bytes per second over about a second)
    assert written >= 0.8 * (16 << 20), out

    for args, code, msg in [
        (("-w", "-r"), 2, "Only one of [-r|-w] can be passed at a time\n"),
        (("-w", "-l"), 2, "[-r|-w] isn't allowed with [-c|-l|-q]\n"),
        ((pool, "0"), 2, "interval cannot be zero\n"),
        ((pool, "nosuchvdev"), 2, f'Expected either a list of pools, or list of vdevs in "{pool}", but got:\n\tnosuchvdev (unknown)\n'),
    ]:
        r = oxzfs.zpool("iostat", *args)
        assert r.returncode == code and r.stderr.startswith(msg), repr(r)
    assert oxzfs.export(pool).returncode == 0


def test_import_under_a_new_name(oxzfs):
    """`zpool import POOL NEWPOOL`: the pool lives on under the new name, which a read-write
    import writes into its labels and MOS config (OpenZFS's zdb finds it by that name); a
    read-only import renames it in memory only; OpenZFS's refusals."""
    pool = "imporig"
    vdir, alt, root = new_pool(oxzfs, pool, "impnew", 2, "-O", "compression=off")
    data = os.urandom(300000)
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(data)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool, "9bad")
    assert r.returncode == 1 and r.stderr == "cannot import '9bad': name must begin with a letter\n", repr(r)
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool, "impnew")
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("impnew")
    assert oxzfs.zpool("list", "-H", "-o", "name").stdout.split() == ["impnew"]
    with open(os.path.join(alt, "impnew", "f"), "rb") as f:
        assert f.read() == data
    with open(os.path.join(alt, "impnew", "g"), "wb") as f:
        f.write(data[::-1])
    assert oxzfs.export("impnew").returncode == 0
    # OpenZFS finds it under the new name only, labels and MOS config alike.
    zdb_check(vdir, "impnew")
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-C", "impnew"], capture_output=True, text=True)
    assert r.returncode == 0 and "name: 'impnew'" in r.stdout and "imporig" not in r.stdout, r.stdout + r.stderr
    lab = subprocess.run([ZDB, "-l", os.path.join(vdir, "d1")], capture_output=True, text=True)
    assert "name: 'impnew'" in lab.stdout and "imporig" not in lab.stdout, lab.stdout
    # Read-only under yet another name: nothing written.
    r = oxzfs.zpool("import", "-d", vdir, "-o", "readonly=on", "-R", alt, "impnew", "imp3")
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("imp3")
    with open(os.path.join(alt, "imp3", "g"), "rb") as f:
        assert f.read() == data[::-1]
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, "impnew", "imp3")
    assert r.returncode == 1 and r.stderr == "cannot import 'impnew' as 'imp3': pool already exists\n", repr(r)
    assert oxzfs.export("imp3").returncode == 0
    lab = subprocess.run([ZDB, "-l", os.path.join(vdir, "d0")], capture_output=True, text=True)
    assert "name: 'impnew'" in lab.stdout, lab.stdout
