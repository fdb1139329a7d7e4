"""Device removal (`zpool remove`, OpenZFS's device_removal feature), judged by the oracles.

Read side: a pool in which OpenZFS removed top-level vdevs (made by OpenZFS's own `ztest`, which
removes devices at random) keeps them as indirect vdevs whose blocks live elsewhere through a
mapping in the MOS. oxzfs imports it, every block reads back through the mappings with a good
checksum, a traversal counts what OpenZFS's `zdb -bb` counts, and `zpool status` hides the
indirect vdevs and prints the `remove:` lines as OpenZFS 2.1 does.

Refusals: what OpenZFS refuses to remove (a raidz pool, mixed sector sizes, the last data
vdev, a device not in the pool) is refused with libzfs's words, and nothing is written: the
devices' bytes stay as they were."""
import os
import random
import re
import shutil
import subprocess
import threading
import time

import pytest

from conftest import parse_zdb
import oracle_pools
from test_write import make_devs
import test_write


def zdb_check(vdir, pool):
    """test_write's zdb -bcc -d check, and what zdb verifies of removed vdevs: the feature
    refcounts of device_removal and obsolete_counts (their objects counted), the space map
    refcount (obsolete space maps included), and the obsolete counts of every mapping entry
    (the bytes no block references any more) where they are precise."""
    text = test_write.zdb_check(vdir, pool)
    bad = [ln for ln in text.splitlines() if "mismatch" in ln or "does not match" in ln or "cannot verify" in ln]
    assert not bad, f"zdb found problems with {pool}'s removed vdevs:\n" + "\n".join(bad[:20])
    if "indirect" in text or "Verified device_removal" in text:
        assert "Verified indirect_refcount feature refcount" in text, text[-3000:]
    return text

ZTEST = os.path.join(oracle_pools.OPENZFS_BIN, "ztest")
ZDB = os.path.join(oracle_pools.OPENZFS_BIN, "zdb")
# A non-raidz pool of mirrors (ztest removes only from pools without raidz), 4K sectors.
ZTEST_ARGS = ["-v", "4", "-s", "96M", "-a", "12", "-m", "2", "-r", "1", "-K", "raidz", "-d", "2", "-t", "3",
              "-T", "150", "-P", "50", "-k", "0", "-C", "special=on"]


def zdb_config(vdir, pool):
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-C", pool], capture_output=True, text=True, errors="replace", timeout=300)
    return r.stdout


def ztest_pool_with_removals(base, pool, attempts=4):
    """Run ztest until the pool it leaves has an indirect vdev; keep only that pool's devices.
    Returns (vdev dir, zdb -C text)."""
    for _ in range(attempts):
        work = os.path.join(base, "ztest")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        r = subprocess.run([ZTEST] + ZTEST_ARGS + ["-f", work, "-p", pool], capture_output=True, text=True,
                           errors="replace", timeout=900)
        if r.returncode != 0:
            continue
        cfg = zdb_config(work, pool)
        if "type: 'indirect'" not in cfg:
            continue
        vdir = os.path.join(base, "vdevs")
        shutil.rmtree(vdir, ignore_errors=True)
        os.makedirs(vdir)
        # ztest leaves other pools' files beside (spa_create_destroy, upgrades, spares): keep
        # the devices this pool's config names.
        for p in re.findall(r"path: '([^']+)'", cfg):
            shutil.copy(p, os.path.join(vdir, os.path.basename(p)))
        return vdir, zdb_config(vdir, pool)
    pytest.fail(f"ztest left no pool with an indirect vdev in {attempts} runs")


@pytest.mark.nightly
def test_openzfs_pool_with_removed_vdevs_reads_back(oxzfs):
    pool = "rmzt"
    base = os.path.join(oxzfs.base, "ztest-removal")
    vdir, _ = ztest_pool_with_removals(base, pool)
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-bb", pool], capture_output=True, text=True, errors="replace", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    want = parse_zdb(r.stdout)
    segments = {int(v): int(n) for v, n in re.findall(r"indirect vdev id (\d+) has (\d+) segments", r.stdout)}
    assert segments, f"OpenZFS zdb names no indirect vdev:\n{r.stdout}"

    # Every block, those on removed vdevs through their mappings, with a good checksum.
    ours = oxzfs.zdb("-e", "-p", vdir, "-bb", pool)
    assert ours.returncode == 0, repr(ours)
    got = parse_zdb(ours.stdout)
    assert got.totals() == want.totals(), f"oxzfs vs OpenZFS zdb -bb\n{ours.stdout}\n{r.stdout}"
    cc = oxzfs.zdb("-e", "-p", vdir, "-cc", pool, timeout=900)
    assert cc.returncode == 0, repr(cc)
    assert "checksum error" not in (cc.stdout + cc.stderr).lower() and "Got error" not in cc.stdout, repr(cc)

    # zpool status: the removal's line, the mappings' memory (24 bytes an entry, as OpenZFS
    # counts it), no indirect vdev in the tree.
    alt = os.path.join(base, "alt")
    os.makedirs(alt, exist_ok=True)
    r = oxzfs.import_ro([vdir], pool, alt, force=True, nomount=True)
    assert r.returncode == 0, repr(r)
    try:
        st = oxzfs.zpool("status", pool, check=True).stdout
        m = re.search(r"^remove: Removal of vdev (\d+) copied \S+ in \d+h\d+m, completed on \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$", st, re.M)
        assert m, st
        assert int(m.group(1)) in segments, st
        mem = sum(segments.values()) * 24
        m = re.search(r"^\t(\S+) memory used for removed device mappings$", st, re.M)
        assert m, st
        assert m.group(1) == nicenum(mem), st
        assert "indirect" not in st, st
    finally:
        assert oxzfs.export(pool).returncode == 0


def nicenum(n):
    """zfs_nicenum for the sizes a status line shows."""
    units = "BKMGTPE"
    i = 0
    v = float(n)
    while v >= 1024 and i < len(units) - 1:
        v /= 1024
        i += 1
    if i == 0 or n % (1 << (10 * i)) == 0:
        return f"{n >> (10 * i)}{units[i] if i else ''}"
    for digits in (2, 1, 0):
        s = f"{v:.{digits}f}{units[i]}"
        if len(s) <= 5:
            return s
    return f"{v:.0f}{units[i]}"


def write_stamps(paths):
    """Each device file's size and modification time: any write through the file changes it."""
    return {p: (os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths}


INVALID = "invalid config; all top-level vdevs must have the same sector size and not be raidz."

# (case, create arguments from the device paths, `zpool add` arguments or None, the device to
# remove from the paths, libzfs's message after "cannot remove DEV: "). Devices of 1 GiB
# (sparse): on a pool under 256M the slop is half the pool and no data vdev can ever leave
# (OpenZFS checks the space first, so the small pools answer "out of space").
REFUSALS = [
    ("raidz", lambda d: ["raidz", d[0], d[1], d[2]], ["-f", "{d3}"], lambda d: d[3], INVALID),
    ("mirror-beside-raidz", lambda d: ["-f", "mirror", d[0], d[1], "raidz", d[2], d[3], d[4]], None,
     lambda d: "mirror-0", INVALID),
    ("mixed-ashift", lambda d: ["-o", "ashift=9", d[0], d[2]], ["-o", "ashift=12", "{d1}"], lambda d: d[1], INVALID),
    ("special-ashift", lambda d: ["-o", "ashift=12", d[0], d[1]], ["-o", "ashift=9", "special", "{d2}"],
     lambda d: d[2], INVALID),
    ("last-data-vdev", lambda d: [d[0]], None, lambda d: d[0], "out of space"),
    ("small-pool", lambda d: [d[0], d[1]], None, lambda d: d[1], "out of space"),
    ("mirror-side", lambda d: ["mirror", d[0], d[1], d[2]], None, lambda d: d[1],
     "operation not supported on this type of pool"),
    ("version-23", lambda d: ["-o", "version=23", d[0], d[1]], None, lambda d: d[1],
     "operation not supported on this type of pool"),
    ("not-in-pool", lambda d: [d[0], d[1]], None, lambda d: "nosuchdisk", "no such device in pool"),
]
SMALL = ("last-data-vdev", "small-pool")


@pytest.mark.parametrize("case,layout,add,victim,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_remove_refused_with_openzfs_words_nothing_written(case, layout, add, victim, message, oxzfs):
    pool = "rf" + case.replace("-", "")
    base = os.path.join(oxzfs.base, case)
    shutil.rmtree(base, ignore_errors=True)
    vdir = os.path.join(base, "vdevs")
    devs = make_devs(vdir, 5, 64 if case in SMALL else 1024)
    r = oxzfs.zpool("create", "-R", os.path.join(base, "alt"), pool, *layout(devs))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    if add:
        r = oxzfs.zpool("add", pool, *[a.format(d1=devs[1], d2=devs[2], d3=devs[3]) for a in add])
        assert r.returncode == 0, repr(r)
    oxzfs.zpool("sync", pool, check=True)
    before = oxzfs.zpool("status", pool, check=True).stdout
    stamps = write_stamps(devs)
    dev = victim(devs)
    r = oxzfs.zpool("remove", pool, dev)
    assert r.returncode == 1, repr(r)
    assert r.stderr == f"cannot remove {dev}: {message}\n", repr(r)
    assert write_stamps(devs) == stamps, "a refused removal wrote to the devices"
    assert oxzfs.zpool("status", pool, check=True).stdout == before
    assert oxzfs.export(pool).returncode == 0
    if case in ("raidz", "mixed-ashift", "special-ashift"):
        zdb_check(vdir, pool)


def test_remove_n_prints_the_mapping_estimate(oxzfs):
    """`zpool remove -n` prints what the mapping would take (ZPOOL_CONFIG_INDIRECT_SIZE: one
    24-byte entry per free gap of 32K or more and per 16M copied) and changes nothing; the
    mapping the removal then makes takes within 2x of that."""
    pool = "rmn"
    base = os.path.join(oxzfs.base, "noop")
    shutil.rmtree(base, ignore_errors=True)
    vdir = os.path.join(base, "vdevs")
    devs = make_devs(vdir, 2, 64)
    alt = os.path.join(base, "alt")
    r = oxzfs.zpool("create", "-o", "ashift=12", "-R", alt, pool, devs[0], "special", devs[1])
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    oxzfs.zfs("set", "special_small_blocks=64K", pool, check=True)
    for i in range(40):
        with open(os.path.join(alt, pool, f"f{i}"), "wb") as f:
            f.write(os.urandom(4096 * (1 + i % 5)))
    oxzfs.zpool("sync", pool, check=True)
    before = oxzfs.zpool("status", pool, check=True).stdout
    r = oxzfs.zpool("remove", "-n", pool, devs[1])
    assert r.returncode == 0, repr(r)
    m = re.fullmatch(rf"Memory that will be used after removing {re.escape(devs[1])}: (\S+)\n", r.stdout)
    assert m, repr(r)
    # The special vdev holds the files and the metadata in runs with free gaps between them:
    # a handful of entries at least, far fewer than one per 4K block.
    size = m.group(1)
    assert re.fullmatch(r"\d+B|\d+(\.\d+)?K", size), repr(r)
    n = int(size[:-1]) if size.endswith("B") else float(size[:-1]) * 1024
    assert 24 <= n <= 400 * 24, repr(r)
    assert oxzfs.zpool("status", pool, check=True).stdout == before
    # The removal done: the mapping's memory (gaps up to vdev_removal_max_span copied
    # along, one entry for the lot) within 2x of the estimate.
    oxzfs.zpool("remove", "-w", pool, devs[1], check=True)
    st = oxzfs.zpool("status", pool, check=True).stdout
    m = re.search(r"^\t(\d+(?:\.\d+)?)(K?) memory used for removed device mappings$", st, re.M)
    assert m, st
    used = float(m.group(1)) * (1024 if m.group(2) else 1)
    assert n / 2 <= used <= 2 * n, (size, m.group(0))
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def fresh_pool(oxzfs, pool, tag, size_mib, layout, *opts):
    """A new pool of three SIZE_MIB-MiB files laid out by LAYOUT (of the paths), imported:
    (device paths, vdev dir, altroot, the mount of its root file system)."""
    base = os.path.join(oxzfs.base, tag)
    shutil.rmtree(base, ignore_errors=True)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 3, size_mib)
    r = oxzfs.zpool("create", *opts, "-R", alt, pool, *layout(devs))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    return devs, vdir, alt, os.path.join(alt, pool)


def tree_sums(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def test_special_vdev_removed_under_reader_and_writer(oxzfs):
    """The seed's experiment in miniature: a pool whose special vdev holds the small files and
    the metadata; `zpool remove` of the special vdev while a reader and a writer work on the
    mount. Afterwards every file reads back, `zpool status` prints OpenZFS's remove: lines
    and hides the vdev, OpenZFS's zdb -bcc is clean and shows the indirect vdev, and the pool
    comes back after export and import with every file, frees of the moved blocks included."""
    pool = "rmsp"
    devs, vdir, alt, root = fresh_pool(oxzfs, pool, "special", 128, lambda d: [d[0], d[1], "special", d[2]], "-o", "ashift=12")
    oxzfs.zfs("set", "special_small_blocks=16K", pool, check=True)
    rng = random.Random(14)
    want = {}
    for i in range(300):
        name = os.path.join(f"d{i % 7}", f"s{i}")
        os.makedirs(os.path.join(root, f"d{i % 7}"), exist_ok=True)
        data = rng.randbytes(rng.choice([100, 3000, 9000, 70000]))
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        want[name] = data
    oxzfs.zpool("sync", pool, check=True)
    alloc_before = oxzfs.zpool("list", "-Hp", "-v", "-o", "name,alloc", pool, check=True).stdout
    assert os.path.basename(devs[2]) in alloc_before

    stop = threading.Event()
    errors = []
    written = {}

    def reader():
        names = sorted(want)
        k = 0
        while not stop.is_set():
            n = names[k % len(names)]
            k += 1
            with open(os.path.join(root, n), "rb") as f:
                if f.read() != want[n]:
                    errors.append(f"read of {n} differs")
                    return

    def writer():
        k = 0
        while not stop.is_set():
            name = f"w{k}"
            data = rng.randbytes(5000 + k)
            with open(os.path.join(root, name), "wb") as f:
                f.write(data)
            written[name] = data
            if k % 3 == 2:
                gone = f"w{k - 2}"
                os.unlink(os.path.join(root, gone))
                del written[gone]
            k += 1

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    try:
        r = oxzfs.zpool("remove", "-w", pool, devs[2])
    finally:
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join(60)
    assert r.returncode == 0, repr(r)
    assert not errors, errors
    want.update(written)
    # Files the small-file removal moved: delete some, so their copies are freed through the map.
    for i in range(0, 300, 5):
        name = os.path.join(f"d{i % 7}", f"s{i}")
        os.unlink(os.path.join(root, name))
        del want[name]
    assert tree_sums(root) == want
    st = oxzfs.zpool("status", pool, check=True).stdout
    assert re.search(r"^remove: Removal of vdev 2 copied \S+ in 0h0m, completed on .+\d{4}$", st, re.M), st
    assert re.search(r"^\t\S+ memory used for removed device mappings$", st, re.M), st
    assert devs[2] not in st and "\tspecial\n" not in st and "indirect" not in st, st
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert re.search(r"indirect vdev id 2 has \d+ segments", text), text[-3000:]
    cfg = zdb_config(vdir, pool)
    assert "type: 'indirect'" in cfg and devs[2] not in cfg, cfg
    # The removed device no longer claims to belong to the pool.
    r = subprocess.run([ZDB, "-l", devs[2]], capture_output=True, text=True)
    assert "pool_guid" not in r.stdout, r.stdout
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0


@pytest.mark.parametrize("delay", [0.1, 0.45, 0.55])
def test_daemon_killed_during_removal_imports_clean(delay, oxzfs):
    """A daemon killed while `zpool remove` copies a special vdev away: the pool imports with
    the removal either in progress (the special vdev in place, its copy so far in the
    mapping) or complete (an indirect vdev); every file reads back and OpenZFS's zdb -bcc is
    clean."""
    pool = "rmkill" + str(int(delay * 100))
    devs, vdir, alt, root = fresh_pool(oxzfs, pool, f"kill{delay}", 512, lambda d: [d[0], d[1], "special", d[2]], "-o", "ashift=12")
    oxzfs.zfs("set", "special_small_blocks=64K", pool, check=True)
    rng = random.Random(int(delay * 1000))
    want = {}
    # About 100M on the special vdev: the copy takes long enough to be killed in.
    for i in range(1600):
        data = rng.randbytes(rng.choice([2000, 60000, 60000, 60000]))
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(data)
        want[f"f{i}"] = data
    oxzfs.zpool("sync", pool, check=True)
    proc = subprocess.Popen([oxzfs.binary, "zpool", "remove", "-w", pool, devs[2]], env=oxzfs.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(delay)
    oxzfs.kill9()
    proc.wait(60)
    subprocess.run(["umount", "-l", root], capture_output=True)
    oxzfs.imported.remove(pool)
    # An evacuation found in progress goes on after the import: held here, so that the pool
    # is judged as the kill left it (the resumed copy has its own test).
    oxzfs.start_daemon()
    oxzfs.run("tunable", "zfs_removal_suspend_progress=1", check=True)
    try:
        r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        oxzfs.imported.append(pool)
        st = oxzfs.zpool("status", pool, check=True).stdout
        check_killed_pool(oxzfs, pool, devs, vdir, root, want, st, delay)
    finally:
        oxzfs.run("tunable", "zfs_removal_suspend_progress=0", check=True)


def check_killed_pool(oxzfs, pool, devs, vdir, root, want, st, delay):
    done = "remove: Removal of vdev 2" in st
    print(f"killed {delay}s into the removal: {'complete' if done else 'not done'}")
    assert done != (devs[2] in st), st
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert ("type: 'indirect'" in zdb_config(vdir, pool)) == done


def test_mirror_data_vdev_removed(oxzfs):
    """A mirror of the normal class leaves a pool of a mirror and a disk: its blocks (file data
    and the pool's metadata, the MOS's among them) are copied to the disk, every file reads
    back before and after export/import, a file deleted afterwards frees its copies, and
    OpenZFS's zdb -bcc is clean."""
    pool = "rmmir"
    devs, vdir, alt, root = fresh_pool(oxzfs, pool, "mirror", 1024, lambda d: ["mirror", d[0], d[1]])
    rng = random.Random(3)
    want = {}
    for i in range(60):
        data = rng.randbytes(rng.choice([700, 40000, 300000]))
        with open(os.path.join(root, f"a{i}"), "wb") as f:
            f.write(data)
        want[f"a{i}"] = data
    oxzfs.zpool("sync", pool, check=True)
    r = oxzfs.zpool("add", "-f", pool, devs[2])
    assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("remove", "-w", pool, "mirror-0")
    assert r.returncode == 0, repr(r)
    st = oxzfs.zpool("status", pool, check=True).stdout
    assert "mirror-0" not in st and devs[0] not in st and re.search(r"^remove: Removal of vdev 0 copied", st, re.M), st
    assert oxzfs.zpool("wait", "-t", "remove", pool).returncode == 0
    assert tree_sums(root) == want
    for i in range(0, 60, 4):
        os.unlink(os.path.join(root, f"a{i}"))
        del want[f"a{i}"]
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert re.search(r"indirect vdev id 0 has \d+ segments", text), text[-3000:]
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0


def test_mirror_removed_onto_a_mirror_side_by_side_keeps_damage_repairable(oxzfs):
    """A mirror removed onto another mirror is copied side by side, as OpenZFS's
    spa_vdev_copy_one_child copies it: source side 0 to destination side 0, 1 to 1. Damage on
    one source side that no read has met yet (30% of its used sectors overwritten while the
    pool was exported) lands on one destination side only, so the scrub after the removal
    repairs it all from the other (bytes repaired, 0 errors), every file reads back from the
    pool and OpenZFS's zdb -bcc is clean. One source side copied to both would have left
    those blocks with no good copy anywhere."""
    from test_damage import rot_sectors
    from test_scrub import check_reads, fill, import_rw
    pool = "rmside"
    base = os.path.join(oxzfs.base, pool)
    shutil.rmtree(base, ignore_errors=True)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 4, 1024)  # (the slop space, 128 MiB at least, must stay free after the removal)
    r = oxzfs.zpool("create", "-R", alt, pool, "mirror", devs[0], devs[1], "mirror", devs[2], devs[3])
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    want = fill(os.path.join(alt, pool), 36)
    assert oxzfs.export(pool).returncode == 0
    assert rot_sectors(devs[0], seed=36) > 0
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("remove", "-w", pool, "mirror-0")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("scrub", "-w", pool)
    assert r.returncode == 0, repr(r)
    text = oxzfs.zpool("status", "-v", pool, check=True).stdout
    m = re.search(r"scan: scrub repaired (\S+) in \S+ with (\d+) errors", text)
    assert m and m.group(1) != "0B" and m.group(2) == "0", text
    assert re.search(r"^remove: Removal of vdev 0 copied", text, re.M), text
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    check_reads(oxzfs, vdir, pool, alt, want)


def test_second_removal_goes_through_the_first_mapping(oxzfs):
    """Two vdevs removed one after the other: the first's copies sit on the second, so the
    second's mapping moves them on and a read of a first-removed block goes through both
    mappings; the second indirect vdev names the first as its predecessor, status counts both
    mappings' memory, frees go through the chain, and zdb -bcc is clean."""
    pool = "rmtwo"
    devs, vdir, alt, root = fresh_pool(oxzfs, pool, "two", 1024, lambda d: d)
    rng = random.Random(2)
    want = {}
    for i in range(40):
        want[f"f{i}"] = rng.randbytes(i * 20000 + 100)
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(want[f"f{i}"])
    oxzfs.zpool("sync", pool, check=True)
    for d in devs[:2]:
        r = oxzfs.zpool("remove", "-w", pool, d)
        assert r.returncode == 0, repr(r)
    assert tree_sums(root) == want
    st = oxzfs.zpool("status", pool, check=True).stdout
    assert re.search(r"^remove: Removal of vdev 1 copied", st, re.M), st
    for i in range(0, 40, 3):
        os.unlink(os.path.join(root, f"f{i}"))
        del want[f"f{i}"]
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    segs = dict(re.findall(r"indirect vdev id (\d+) has (\d+) segments", text))
    assert set(segs) == {"0", "1"}, text[-3000:]
    assert f"\t{nicenum(24 * sum(int(n) for n in segs.values()))} memory used for removed device mappings\n" in st, st
    cfg = zdb_config(vdir, pool)
    assert re.search(r"id: 1\n(?:.*\n){0,12}?\s+com.delphix:prev_indirect_vdev: 0\n", cfg), cfg
    # The internal history records as OpenZFS writes them (spa_history_log_internal's
    # nvlist, in its order), read by OpenZFS's zdb -hh.
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-hh", pool], capture_output=True, text=True, errors="replace", timeout=300)
    events = [(t, n, m) for m, n, t in re.findall(
        r"^  history internal str: '(.*)'\n  internal_name: '(vdev remove \w+)'\n  history txg: (\d+)\n  history time: \d+\n"
        r"  history hostname: '.*'$", r.stdout, re.M)]
    assert [(e[1], e[2]) for e in events] == [
        ("vdev remove started", f"{pool} vdev 0 {devs[0]}"), ("vdev remove completed", f"{pool} vdev 0"),
        ("vdev remove started", f"{pool} vdev 1 {devs[1]}"), ("vdev remove completed", f"{pool} vdev 1"),
    ], r.stdout
    assert int(events[0][0]) < int(events[1][0]) < int(events[2][0]) < int(events[3][0]), events
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert tree_sums(root) == want
    hist = oxzfs.zpool("history", "-i", pool, check=True).stdout
    ours = re.findall(r"^\S+ \[txg:(\d+)\] (vdev remove \w+ .*)$", hist, re.M)
    assert ours == [(t, f"{n} {m}") for t, n, m in events], hist
    assert "[txg:" not in oxzfs.zpool("history", pool, check=True).stdout
    assert oxzfs.export(pool).returncode == 0


def test_mapping_condensed_once_mostly_obsolete(oxzfs):
    """After a removal, most of what the mapping maps is freed: the next txgs condense the
    mapping as OpenZFS does (vdev_indirect_should_condense, with zfs_condense_min_mapping_bytes
    lowered so a small pool qualifies): a new mapping object without the wholly obsolete
    entries, a fresh obsolete space map, the old objects freed. OpenZFS's zdb counts fewer
    segments and checks the new mapping's obsolete counts and the feature refcounts, status
    shows less memory for the mapping, and every remaining file reads back before and after
    export/import."""
    pool = "rmcond"
    devs, vdir, alt, root = fresh_pool(oxzfs, pool, "condense", 1024, lambda d: d[:2])
    rng = random.Random(5)
    want = {}
    for i in range(120):
        want[f"c{i}"] = rng.randbytes(rng.choice([3000, 90000, 250000]))
        with open(os.path.join(root, f"c{i}"), "wb") as f:
            f.write(want[f"c{i}"])
    oxzfs.zpool("sync", pool, check=True)
    # Mapping entries of at most 1M, so that freeing the older files empties whole entries.
    tunable(oxzfs, "zfs_remove_max_segment=1M")
    try:
        assert oxzfs.zpool("remove", "-w", pool, devs[0]).returncode == 0
    finally:
        tunable(oxzfs, "zfs_remove_max_segment=16M")
    assert oxzfs.export(pool).returncode == 0
    segments = lambda text: int(re.search(r"indirect vdev id 0 has (\d+) segments", text).group(1))
    objects = lambda: re.findall(r"com.delphix:indirect_object: (\d+)", zdb_config(vdir, pool))
    segs0, obj0 = segments(zdb_check(vdir, pool)), objects()
    assert oxzfs.zpool("import", "-d", vdir, "-R", alt, pool).returncode == 0
    oxzfs.imported.append(pool)
    mem = lambda: re.search(r"^\t(\S+) memory used for removed device mappings$", oxzfs.zpool("status", pool, check=True).stdout, re.M).group(1)
    m0 = mem()
    tunable(oxzfs, "zfs_condense_min_mapping_bytes=0")
    try:
        for i in range(90):
            os.unlink(os.path.join(root, f"c{i}"))
            del want[f"c{i}"]
        for _ in range(3):
            oxzfs.zpool("sync", pool, check=True)
        m1 = mem()
    finally:
        tunable(oxzfs, "zfs_condense_min_mapping_bytes=128K")
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0
    segs1, obj1 = segments(zdb_check(vdir, pool)), objects()
    assert len(obj0) == 1 and obj1 != obj0, (obj0, obj1)
    assert segs1 < segs0, (segs0, segs1)
    assert (m0, m1) == (nicenum(24 * segs0), nicenum(24 * segs1)), (m0, m1, segs0, segs1)
    assert oxzfs.zpool("import", "-d", vdir, "-R", alt, pool).returncode == 0
    oxzfs.imported.append(pool)
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0


DATE = r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}"


def tunable(oxzfs, *settings):
    oxzfs.run("tunable", *settings, check=True)


def slow_removal_pool(oxzfs, pool, tag):
    """Two 1G data disks (sparse; a smaller pool keeps too much slop to let one go) holding about 12M of files (half on each), the copy held
    (zfs_removal_suspend_progress) and cut to one 4K sector a step, so that it can be watched,
    let go a little and held again. Returns (devs, vdir, alt, root, want)."""
    devs, vdir, alt, root = fresh_pool(oxzfs, pool, tag, 1024, lambda d: d[:2], "-o", "ashift=12")
    rng = random.Random(tag)
    want = {}
    for i in range(48):
        data = rng.randbytes(rng.choice([3000, 60000, 250000, 500000]))
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(data)
        want[f"f{i}"] = data
    oxzfs.zpool("sync", pool, check=True)
    tunable(oxzfs, "zfs_removal_suspend_progress=1", "zfs_remove_max_segment=4K")
    return devs, vdir, alt, root, want


def let_removal_run(oxzfs, pool, seconds):
    """Let the held copy go for SECONDS, hold it again, sync: the progress is in the MOS."""
    tunable(oxzfs, "zfs_removal_suspend_progress=0")
    time.sleep(seconds)
    tunable(oxzfs, "zfs_removal_suspend_progress=1")
    time.sleep(0.1)
    oxzfs.zpool("sync", pool, check=True)


def remove_partway(oxzfs, pool, dev):
    """Start the removal of DEV with the copy held, let it go for a moment: the percent done,
    checked to be part of the way."""
    r = oxzfs.zpool("remove", pool, dev)
    assert r.returncode == 0, repr(r)
    let_removal_run(oxzfs, pool, 0.3)
    pct = progress(oxzfs.zpool("status", pool, check=True).stdout)[2]
    assert 0 < pct < 100, pct
    return pct


def progress(st):
    """(copied text, total text, percent) of the in-progress `remove:` lines; asserts their form."""
    m = re.search(r"^\t(\S+) copied out of (\S+) at \S+/s, (\d+\.\d\d)% done, "
                  r"(?:\d+h\d+m to go|\(copy is slow, no estimated time\))$", st, re.M)
    assert m, st
    return m.group(1), m.group(2), float(m.group(3))


def delete_some(root, want, names):
    for n in names:
        if n in want:
            os.unlink(os.path.join(root, n))
            del want[n]


def test_removal_runs_in_background_and_cancels(oxzfs):
    """`zpool remove` of a data vdev returns at once and the evacuation runs behind it:
    `zpool status` prints OpenZFS's in-progress lines and marks the vdev (removing); another
    removal is refused as OpenZFS refuses it; files freed before and after the copy reached
    them go, new files land elsewhere; `zpool remove -s` cancels (the canceled line, the
    vdev takes data again) and OpenZFS's zdb -bcc finds nothing leaked."""
    pool = "rmbg"
    devs, vdir, alt, root, want = slow_removal_pool(oxzfs, pool, "bg")
    try:
        t0 = time.time()
        r = oxzfs.zpool("remove", pool, devs[1])
        assert r.returncode == 0 and r.stdout == "" and r.stderr == "", repr(r)
        assert time.time() - t0 < 5, "zpool remove waited for the evacuation"
        st = oxzfs.zpool("status", pool, check=True).stdout
        assert re.search(rf"^remove: Evacuation of {re.escape(devs[1])} in progress since {DATE}$", st, re.M), st
        progress(st)
        row = [ln for ln in st.splitlines() if devs[1] in ln and "ONLINE" in ln]
        assert len(row) == 1 and row[0].endswith("  (removing)"), st
        r = oxzfs.zpool("remove", pool, devs[0])
        assert r.returncode == 1 and r.stderr == f"cannot remove {devs[0]}: Pool busy; removal may already be in progress\n", repr(r)
        r = oxzfs.zpool("add", "-o", "ashift=9", pool, devs[2])
        assert r.returncode == 1 and r.stderr == f"cannot add to '{pool}': invalid config; a pool with removing/removed vdevs does not support adding raidz or dRAID vdevs\n", repr(r)
        r = oxzfs.zpool("attach", pool, devs[0], devs[2])
        assert r.returncode == 1 and r.stderr == f"cannot attach {devs[2]} to {devs[0]}: {devs[2]} is busy, or device removal is in progress\n", repr(r)
        # Frees of what the copy has not reached; new files.
        delete_some(root, want, [f"f{i}" for i in range(0, 48, 6)])
        for i in range(5):
            want[f"n{i}"] = os.urandom(100000)
            with open(os.path.join(root, f"n{i}"), "wb") as f:
                f.write(want[f"n{i}"])
        let_removal_run(oxzfs, pool, 0.4)
        copied, total, pct = progress(oxzfs.zpool("status", pool, check=True).stdout)
        assert 0 < pct < 100, (copied, total, pct)
        # Frees of what was copied (and of what was not).
        delete_some(root, want, [f"f{i}" for i in range(1, 48, 4)])
        assert tree_sums(root) == want
        r = oxzfs.zpool("remove", "-s", pool)
        assert r.returncode == 0, repr(r)
        st = oxzfs.zpool("status", pool, check=True).stdout
        assert re.search(rf"^remove: Removal of {re.escape(devs[1])} canceled on {DATE}$", st, re.M), st
        assert "(removing)" not in st and "Evacuation" not in st, st
        r = oxzfs.zpool("remove", "-s", pool)
        assert r.returncode == 1 and r.stderr == "cannot cancel removal: operation is not in progress\n", repr(r)
        hist = oxzfs.zpool("history", "-i", pool, check=True).stdout
        assert re.findall(r"\[txg:\d+\] (vdev remove \w+ .*)$", hist, re.M) == [
            f"vdev remove started {pool} vdev 1 {devs[1]}", f"vdev remove canceled {pool} vdev 1 {devs[1]}"], hist
    finally:
        tunable(oxzfs, "zfs_removal_suspend_progress=0", "zfs_remove_max_segment=16M")
    # The vdev takes data again.
    def alloc_of(dev):
        out = oxzfs.zpool("list", "-Hp", "-v", "-o", "name,alloc", pool, check=True).stdout
        return int(next(ln.split()[1] for ln in out.splitlines() if ln.split() and ln.split()[0] == dev))
    oxzfs.zpool("sync", pool, check=True)
    before = alloc_of(devs[1])
    for i in range(8):
        want[f"after{i}"] = os.urandom(200000)
        with open(os.path.join(root, f"after{i}"), "wb") as f:
            f.write(want[f"after{i}"])
    oxzfs.zpool("sync", pool, check=True)
    assert alloc_of(devs[1]) > before
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert "indirect" not in zdb_config(vdir, pool), text[-2000:]


def wait_until_blocked(pid, settle=0.5, limit=60):
    """Until process `pid` has slept in a read of its socket for `settle` seconds (a client that
    sent its request and waits for the daemon's answer)."""
    since, deadline = None, time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/syscall") as f:
                nr = f.read().split()[0]
        except (OSError, IndexError):
            nr = "running"
        # read (0), recvfrom (45), recvmsg (47) on x86_64.
        if nr in ("0", "45", "47"):
            since = since or time.monotonic()
            if time.monotonic() - since >= settle:
                return
        else:
            since = None
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never waited for the daemon's answer")


def test_removal_canceled_by_a_read_error(oxzfs):
    """A read error of the copy cancels the removal, as OpenZFS's removal thread cancels it:
    `zpool wait -t remove` fails with the reason, the canceled line, the vdev back to normal,
    every file reads back once the device heals."""
    pool = "rmeio"
    devs, vdir, alt, root, want = slow_removal_pool(oxzfs, pool, "eio")
    try:
        r = oxzfs.zpool("remove", pool, devs[1])
        assert r.returncode == 0, repr(r)
        oxzfs.run("zinject", "-d", devs[1], "-e", "io", "-T", "read", pool, check=True)
        # The error reaches the command waiting for the removal: the waiter is in place (its
        # request sent, waiting for the answer) before the removal may go on and fail; a wait
        # that starts after the cancel finds no removal in progress, as in OpenZFS.
        waiter = subprocess.Popen([oxzfs.binary, "zpool", "wait", "-t", "remove", pool], env=oxzfs.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until_blocked(waiter.pid)
        tunable(oxzfs, "zfs_removal_suspend_progress=0")
        out, err = waiter.communicate(timeout=300)
        assert waiter.returncode == 1 and "removal canceled after an I/O error" in err, (waiter.returncode, out, err)
    finally:
        oxzfs.run("zinject", "-c", "all")
        tunable(oxzfs, "zfs_removal_suspend_progress=0", "zfs_remove_max_segment=16M")
    st = oxzfs.zpool("status", pool, check=True).stdout
    assert re.search(rf"^remove: Removal of {re.escape(devs[1])} canceled on {DATE}$", st, re.M), st
    assert "(removing)" not in st, st
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0


def test_removal_resumes_after_export_and_kill(oxzfs):
    """An evacuation under way survives an export (OpenZFS's zdb -bcc is clean on the pool
    as it is left, the removal in progress) and a kill -9 of the daemon: each import goes on
    from the mapping on disk, `zpool wait -t remove` waits for the end, the vdev is indirect,
    every file reads back and zdb -bcc is clean."""
    pool = "rmres"
    devs, vdir, alt, root, want = slow_removal_pool(oxzfs, pool, "resume")
    try:
        first = remove_partway(oxzfs, pool, devs[1])
        delete_some(root, want, [f"f{i}" for i in range(0, 48, 5)])
        assert oxzfs.export(pool).returncode == 0
        zdb_check(vdir, pool)
        cfg = zdb_config(vdir, pool)
        assert "removing: 1" in cfg and "type: 'indirect'" not in cfg, cfg
        r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        oxzfs.imported.append(pool)
        st = oxzfs.zpool("status", pool, check=True).stdout
        # Resumed where it was: the files deleted meanwhile count as done.
        again = progress(st)[2]
        assert first <= again < 100 and "(removing)" in st, st
        let_removal_run(oxzfs, pool, 0.3)
        second = progress(oxzfs.zpool("status", pool, check=True).stdout)[2]
        assert again < second < 100, (first, again, second)
        delete_some(root, want, [f"f{i}" for i in range(2, 48, 7)])
        # Synced: the frees are on disk before the kill.
        oxzfs.zpool("sync", pool, check=True)
        oxzfs.kill9()
        subprocess.run(["umount", "-l", root], capture_output=True)
        oxzfs.imported.remove(pool)
    finally:
        if oxzfs.daemon_alive():
            tunable(oxzfs, "zfs_removal_suspend_progress=0", "zfs_remove_max_segment=16M")
    oxzfs.start_daemon()
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert oxzfs.zpool("wait", "-t", "remove", pool).returncode == 0
    st = oxzfs.zpool("status", pool, check=True).stdout
    assert re.search(rf"^remove: Removal of vdev 1 copied \S+ in 0h0m, completed on {DATE}$", st, re.M), st
    assert devs[1] not in st and "(removing)" not in st, st
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert re.search(r"indirect vdev id 1 has \d+ segments", text), text[-3000:]
    assert "type: 'indirect'" in zdb_config(vdir, pool)
    # spa_removing_phys as OpenZFS reads it: finished, vdev 1, everything to copy copied
    # (the frees a kill lost from the count were counted again at the import).
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddd", pool, "1"], capture_output=True, text=True, errors="replace", timeout=300)
    m = re.search(r"com\.delphix:removing = ([\d ]+)$", r.stdout, re.M)
    assert m, r.stdout[-3000:]
    state, vdev, prev, start, end, to_copy, copied = map(int, m.group(1).split())
    assert (state, vdev, prev) == (2, 1, 1) and start <= end and to_copy == copied > 0, m.group(0)


ZHACK = os.path.join(oracle_pools.OPENZFS_BIN, "zhack")


def zhack_rw(vdir, *args):
    """OpenZFS's zhack on the exported pool in VDIR, read-write: libzpool imports the pool
    (resuming a removal in progress, as spa_load does), makes the change, syncs and lets the
    pool go. Without the kernel module: a private mount namespace whose /dev holds the usual
    character devices and a dummy /dev/zfs (libzpool opens it to ask whether a pool is
    active; its ioctl then fails, which means not active)."""
    # /etc/zfs private too: the cache file zhack's import writes there would make the pool
    # known to every later zdb run on the machine.
    setup = ("mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 && mknod -m 666 /dev/zero c 1 5 && "
             "mknod -m 666 /dev/random c 1 8 && mknod -m 666 /dev/urandom c 1 9 && touch /dev/zfs && "
             "mkdir -p /etc/zfs && mount -t tmpfs tmpfs /etc/zfs && exec \"$@\"")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", setup, "zhack",
                        ZHACK, "-d", vdir, *args], capture_output=True, text=True, errors="replace", timeout=300)
    # zhack lets libzpool go without stopping the removal thread the import resumed: now and
    # then its teardown destroys a mutex that thread holds and aborts, after the change was
    # synced (the callers check it is there). The pool is then as after a crash.
    teardown = r.returncode == -6 and re.fullmatch(r"pthread_mutex_destroy\(.*\) == 0 \(0x10 == 0\)\nASSERT at kernel\.c:\d+:mutex_destroy\(\)\n?", r.stderr)
    assert (r.returncode == 0 or teardown) and "cannot" not in r.stderr, repr(r)
    return r


def feature_refcount(vdir, pool, feature):
    r = subprocess.run([ZHACK, "-d", vdir, "feature", "stat", pool], capture_output=True, text=True,
                       errors="replace", timeout=120)
    m = re.search(rf"^\t{re.escape(feature)} = (\d+)$", r.stdout, re.M)
    return int(m.group(1)) if m else None


def test_removal_round_trips_through_openzfs(oxzfs):
    """OpenZFS's libzpool (zhack) takes over a pool we left in the middle of a removal with
    files freed on both sides of the copied offset: it imports it read-write (its removal
    thread resumes from our mapping, obsolete counts and space map), changes it (a feature
    enabled) and lets it go; we import what it left read-write, finish the removal, free more
    files through the mapping, and OpenZFS's zdb -bcc -d is clean, the precise obsolete
    counts of every mapping entry checked. Then zhack opens the finished pool read-write
    again, and we read every file back from what it wrote."""
    pool = "rmzh"
    devs, vdir, alt, root, want = slow_removal_pool(oxzfs, pool, "zhack")
    try:
        remove_partway(oxzfs, pool, devs[1])
        delete_some(root, want, [f"f{i}" for i in range(0, 48, 5)])
        oxzfs.zpool("sync", pool, check=True)
        assert oxzfs.export(pool).returncode == 0
    finally:
        tunable(oxzfs, "zfs_removal_suspend_progress=0", "zfs_remove_max_segment=16M")
    # The removal's counts as we left them: precise, a counts object, an obsolete space map
    # for the frees of what was copied; device_removal held by the removing vdev.
    assert feature_refcount(vdir, pool, "com.delphix:obsolete_counts") in (2, 3)
    assert feature_refcount(vdir, pool, "com.delphix:device_removal") == 1
    zhack_rw(vdir, "feature", "enable", pool, "com.example:removal_midway")
    assert feature_refcount(vdir, pool, "com.example:removal_midway") == 0
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert oxzfs.zpool("wait", "-t", "remove", pool).returncode == 0
    st = oxzfs.zpool("status", pool, check=True).stdout
    assert re.search(rf"^remove: Removal of vdev 1 copied \S+ in \d+h\d+m, completed on {DATE}$", st, re.M), st
    assert tree_sums(root) == want
    delete_some(root, want, [f"f{i}" for i in range(1, 48, 4)])
    assert oxzfs.export(pool).returncode == 0
    # Finished by us, opened and changed by OpenZFS, read back by us.
    zhack_rw(vdir, "feature", "enable", pool, "com.example:removal_done")
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert re.search(r"indirect vdev id 1 has \d+ segments", text), text[-3000:]
    assert feature_refcount(vdir, pool, "com.delphix:obsolete_counts") == 3


@pytest.mark.nightly
def test_evacuation_rate(oxzfs):
    """A 320M data disk evacuated onto a new one with the default tunables: the copy's rate
    is printed (bytes copied per second of `zpool remove -w`), every file reads back and
    OpenZFS's zdb -bcc is clean."""
    pool = "rmrate"
    devs, vdir, alt, root = fresh_pool(oxzfs, pool, "rate", 4096, lambda d: [d[0]], "-o", "ashift=12")
    want = {}
    for i in range(40):
        want[f"f{i}"] = os.urandom(8 << 20)
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(want[f"f{i}"])
    oxzfs.zpool("sync", pool, check=True)
    oxzfs.zpool("add", pool, devs[1], check=True)
    t0 = time.time()
    oxzfs.zpool("remove", "-w", pool, devs[0], check=True)
    took = time.time() - t0
    st = oxzfs.zpool("status", pool, check=True).stdout
    m = re.search(r"^remove: Removal of vdev 0 copied (\S+) in", st, re.M)
    assert m, st
    print(f"evacuated {m.group(1)} in {took:.2f} s: {320 / took:.0f} MB/s of file data")
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def ztest_pool_removing(base, pool, attempts=6):
    """Run ztest with OpenZFS's removals held (zfs_removal_suspend_progress) and every pass
    killed, until the pool it leaves has a removal in progress; keep only that pool's
    devices. Whether one does is ztest's chance: a removal must start in some pass (ztest
    tries one every 10 s or so, and spa_vdev_remove often refuses its pick), which on a loaded
    machine (fewer operations a pass) most runs of three passes do not: up to six runs. More
    passes a run make ztest abort itself as overdue when its zdb checks are slow. Returns the vdev dir. ztest sets the variable through libzpool.so (and passes
    it to the zdb it runs), which the installed library lacks under that name: a link to
    it in a private dir, and a zdb wrapper that sees it too."""
    lib = os.path.join(base, "lib")
    os.makedirs(lib, exist_ok=True)
    libdir = "/opt/openzfs/lib/x86_64-linux-gnu"
    if not os.path.exists(os.path.join(lib, "libzpool.so")):
        os.symlink(os.path.join(libdir, "libzpool.so.5"), os.path.join(lib, "libzpool.so"))
    env = dict(os.environ, LD_LIBRARY_PATH=f"{lib}:{libdir}", ZDB_PATH=os.path.join(base, "zdbw"))
    with open(env["ZDB_PATH"], "w") as f:
        f.write(f"#!/bin/sh\nexport LD_LIBRARY_PATH={lib}:{libdir}\nexec /opt/openzfs/sbin/zdb \"$@\"\n")
    os.chmod(env["ZDB_PATH"], 0o755)
    why = []
    for _ in range(attempts):
        work = os.path.join(base, "ztest")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        r = subprocess.run(["/opt/openzfs/sbin/ztest", "-v", "2", "-s", "96M", "-a", "12", "-m", "2", "-r", "1", "-K", "raidz",
                            "-d", "2", "-t", "3", "-T", "60", "-P", "20", "-k", "100", "-C", "special=on",
                            "-o", "zfs_removal_suspend_progress=1", "-f", work, "-p", pool],
                           env=env, capture_output=True, text=True, errors="replace", timeout=900)
        # A pass after the one that started the (held) removal is often aborted by ztest's
        # own check: its attach test expects success, but the removal a killed pass left in
        # progress makes spa_vdev_attach return ENOTSUP (95), and only the pass that started
        # a removal knows to skip that test. The pool such an abort leaves is as good as a
        # killed pass's: kept when zdb reads a removal in progress from it.
        # The other abort a held removal causes: the pass that started it waits for it to
        # finish (ztest_device_removal), which it never does, until ztest's own deadline
        # aborts the pass as overdue. Any pool zdb reads with a removal in progress is kept,
        # however ztest ended: zdb's reading of it is the check.
        said = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("ztest:")]
        cfg = zdb_config(work, pool)
        if "removing: 1" not in cfg:
            why.append(f"ztest exited {r.returncode}: {said[:2] or (r.stdout + r.stderr)[-300:]!r}" if r.returncode != 0
                       else "ztest exited 0, no removal in progress (none of its removals started, or one finished)")
            continue
        vdir = os.path.join(base, "vdevs")
        shutil.rmtree(vdir, ignore_errors=True)
        os.makedirs(vdir)
        for p in re.findall(r"path: '([^']+)'", cfg):
            shutil.copy(p, os.path.join(vdir, os.path.basename(p)))
        return vdir
    pytest.fail(f"ztest left no pool with a removal in progress in {attempts} runs:\n" + "\n".join(why))


@pytest.mark.nightly
def test_openzfs_pool_with_removal_in_progress(oxzfs):
    """A pool OpenZFS left in the middle of a removal imports read-only: `zpool status` prints
    the in-progress lines and marks the vdev (removing). Read-write, OpenZFS's removal goes on
    here to its end and zdb is clean (oxzfs keeps precise obsolete counts and goes on with a
    removal in progress, see test_removal_round_trips_through_openzfs; ztest's log space maps
    it replays and retires, test_log_spacemap) — unless the pool has encrypted datasets, as
    ztest makes half of its datasets, a feature oxzfs does not write: then read-write is
    refused, naming it."""
    pool = "rmztip"
    base = os.path.join(oxzfs.base, "ztest-removing")
    vdir = ztest_pool_removing(base, pool)
    alt = os.path.join(base, "alt")
    os.makedirs(alt, exist_ok=True)
    r = oxzfs.import_ro([vdir], pool, alt, force=True, nomount=True)
    assert r.returncode == 0, repr(r)
    try:
        st = oxzfs.zpool("status", pool, check=True).stdout
        m = re.search(rf"^remove: Evacuation of (\S+) in progress since {DATE}$", st, re.M)
        assert m, st
        progress(st)
        row = [ln for ln in st.splitlines() if ln.strip().startswith(m.group(1) + " ")]
        assert len(row) == 1 and row[0].endswith("  (removing)"), st
    finally:
        assert oxzfs.export(pool).returncode == 0
    r = oxzfs.zpool("import", "-N", "-d", vdir, "-R", alt, pool)
    if r.returncode != 0:
        # ztest encrypts half of the datasets it makes: the pool has encryption active.
        assert "read-write" in r.stderr and "readonly=on" in r.stderr, repr(r)
        assert re.search(r"feature com\.\w+:\w+ is active", r.stderr), repr(r)
        return
    # No feature we do not write is active: OpenZFS's removal goes on here and finishes.
    oxzfs.imported.append(pool)
    r = oxzfs.zpool("wait", "-t", "remove", pool)
    assert r.returncode == 0, repr(r)
    st = oxzfs.zpool("status", pool, check=True).stdout
    assert re.search(rf"^remove: Removal of vdev \d+ copied \S+ in \d+h\d+m, completed on {DATE}$", st, re.M), st
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
