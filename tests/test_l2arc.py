"""The L2ARC, judged by its outcomes: a pool with a cache device and an ARC small enough that blocks
spill feeds the cache device (zpool iostat -v shows space and writes on it, arcstats l2_size > 0);
OpenZFS 2.1's `zdb -lll` reads our persistent L2ARC header and log blocks without complaint; after an
export and import (and after the daemon is killed and restarted) the first reads hit the cache
device (l2_hits, l2_rebuild_success) and return the bytes written; cache blocks corrupted on the
device are caught (l2_cksum_bad) and read from the pool; `zpool remove` takes the cache device out at
once; secondarycache=none keeps a file's data off it."""
import hashlib
import json
import os
import re
import subprocess
import threading
import time

import pytest

import oracle_pools
from conftest import Oxzfs, unmount_below
from test_write import make_devs

ZDB = oracle_pools.ZDB

# Small devices keep log blocks only below OpenZFS's 1 GiB default of this tunable.
TUNABLES = ["zfs_arc_max=16M", "l2arc_rebuild_blocks_min_l2size=0", "l2arc_feed_secs=1", "l2arc_write_max=32M"]


# OpenZFS 2.1's arcstats rows, in its order (module/zfs/arc.c, arc_stats).
OPENZFS_ARCSTATS = """
hits misses demand_data_hits demand_data_misses demand_metadata_hits demand_metadata_misses
prefetch_data_hits prefetch_data_misses prefetch_metadata_hits prefetch_metadata_misses mru_hits
mru_ghost_hits mfu_hits mfu_ghost_hits deleted mutex_miss access_skip evict_skip
evict_not_enough evict_l2_cached evict_l2_eligible evict_l2_eligible_mfu evict_l2_eligible_mru
evict_l2_ineligible evict_l2_skip hash_elements hash_elements_max hash_collisions hash_chains
hash_chain_max p c c_min c_max size compressed_size uncompressed_size overhead_size hdr_size
data_size metadata_size dbuf_size dnode_size bonus_size other_size anon_size anon_evictable_data
anon_evictable_metadata mru_size mru_evictable_data mru_evictable_metadata mru_ghost_size
mru_ghost_evictable_data mru_ghost_evictable_metadata mfu_size mfu_evictable_data
mfu_evictable_metadata mfu_ghost_size mfu_ghost_evictable_data mfu_ghost_evictable_metadata
l2_hits l2_misses l2_prefetch_asize l2_mru_asize l2_mfu_asize l2_bufc_data_asize
l2_bufc_metadata_asize l2_feeds l2_rw_clash l2_read_bytes l2_write_bytes l2_writes_sent
l2_writes_done l2_writes_error l2_writes_lock_retry l2_evict_lock_retry l2_evict_reading
l2_evict_l1cached l2_free_on_write l2_abort_lowmem l2_cksum_bad l2_io_error l2_size l2_asize
l2_hdr_size l2_log_blk_writes l2_log_blk_avg_asize l2_log_blk_asize l2_log_blk_count
l2_data_to_meta_ratio l2_rebuild_success l2_rebuild_unsupported l2_rebuild_io_errors
l2_rebuild_dh_errors l2_rebuild_cksum_lb_errors l2_rebuild_lowmem l2_rebuild_size
l2_rebuild_asize l2_rebuild_bufs l2_rebuild_bufs_precached l2_rebuild_log_blks
memory_throttle_count memory_direct_count memory_indirect_count memory_all_bytes
memory_free_bytes memory_available_bytes arc_no_grow arc_tempreserve arc_loaned_bytes arc_prune
arc_meta_used arc_meta_limit arc_dnode_limit arc_meta_max arc_meta_min async_upgrade_sync
demand_hit_predictive_prefetch demand_hit_prescient_prefetch arc_need_free arc_sys_free
arc_raw_size cached_only_in_progress abd_chunk_waste_size
""".split()


def tune(ox):
    r = ox.run("tunable", *TUNABLES)
    assert r.returncode == 0, repr(r)


def arcstats(ox):
    r = ox.run("arcstats")
    assert r.returncode == 0, repr(r)
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["name", "type", "data"], r.stdout
    return {p[0]: int(p[2]) for p in (ln.split() for ln in lines[2:])}


def wait_for(ox, what, pred, timeout=60):
    """Poll arcstats until PRED holds (the feed runs every second); the last stats either way."""
    deadline = time.time() + timeout
    while True:
        s = arcstats(ox)
        if pred(s) or time.time() > deadline:
            assert pred(s), f"{what} never happened: {s}"
            return s
        time.sleep(0.5)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def cache_row(ox, pool, dev):
    """(alloc, read ops, write ops, read bytes, write bytes) of the cache device in iostat -Hpv."""
    r = ox.zpool("iostat", "-Hpv", pool)
    assert r.returncode == 0, repr(r)
    for ln in r.stdout.splitlines():
        f = ln.split("\t")
        if f[0] == dev:
            return tuple(int(x) for x in (f[1], f[3], f[4], f[5], f[6]))
    raise AssertionError(f"no iostat row for {dev}:\n{r.stdout}")


def make_pool(ox, tag, pool, cache_mib=96):
    base = os.path.join(ox.base, tag)
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    data = make_devs(vdir, 1, 128)[0]
    cache = os.path.join(vdir, "cache0")
    with open(cache, "wb") as f:
        f.truncate(cache_mib << 20)
    r = ox.zpool("create", "-R", alt, pool, data, "cache", cache)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    return vdir, alt, cache


def import_pool(ox, vdir, alt, pool):
    r = ox.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)


def reimport_and_read(ox, vdir, alt, pool, want):
    """Import POOL, wait for its cache device's rebuild, read the file back: arcstats before, after."""
    before = arcstats(ox)
    import_pool(ox, vdir, alt, pool)
    wait_for(ox, "the L2ARC rebuild", lambda s: s["l2_rebuild_success"] > before["l2_rebuild_success"])
    assert sha(os.path.join(alt, pool, "f")) == want
    return before, arcstats(ox)


def kstat(ox, name):
    """`oxzfs kstat NAME` as {row: value} (the kernel's kstat layout)."""
    r = ox.run("kstat", name)
    assert r.returncode == 0, repr(r)
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["name", "type", "data"], r.stdout
    return {n: int(v) for n, _, v in (l.split() for l in lines[2:])}


def zdb_l2arc(cache):
    r = subprocess.run([ZDB, "-lll", cache], capture_output=True, text=True, errors="replace", timeout=120)
    return r, r.stdout + r.stderr


def test_feed_persist_rebuild_corrupt_remove(oxzfs):
    tune(oxzfs)
    pool = "l2a"
    vdir, alt, cache = make_pool(oxzfs, "l2a", pool)
    root = os.path.join(alt, pool)
    data = os.urandom(24 << 20)
    want = hashlib.sha256(data).hexdigest()
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(data)
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert sha(os.path.join(root, "f")) == want

    # Fed: the cache device holds blocks, iostat and arcstats say so.
    s = wait_for(oxzfs, "an L2ARC feed of 8 MiB", lambda s: s["l2_size"] >= 8 << 20)
    assert s["l2_writes_done"] > 0 and s["l2_log_blk_count"] > 0 and s["size"] <= 16 << 20, s
    alloc, _, writes, _, wbytes = cache_row(oxzfs, pool, cache)
    assert alloc >= 8 << 20 and wbytes > 0, (alloc, writes, wbytes)

    # OpenZFS's zdb reads our header and log blocks (it fails when the header counts more log
    # blocks than it finds valid).
    assert oxzfs.export(pool).returncode == 0
    r, text = zdb_l2arc(cache)
    assert r.returncode == 0, text[-3000:]
    assert "L2ARC device header" in text and "    version: 1" in text, text[-3000:]
    m = re.search(r"log_blk_count:\s+(\d+) with valid cksum\s+(\d+) with invalid cksum", text)
    assert m and int(m.group(1)) > 0 and m.group(2) == "0", text[-3000:]
    addresses = [int(a) for a in re.findall(r"\|\s+address: (\d+)", text)]
    assert addresses, text[-3000:]

    # Re-imported: rebuilt from the log blocks, the first read is served by the cache device.
    zf = kstat(oxzfs, "zfetchstats")
    before, after = reimport_and_read(oxzfs, vdir, alt, pool, want)
    # That read was sequential: the prefetcher followed it (zfetchstats, and arc_summary's DMU
    # section from the same counters).
    zf2 = kstat(oxzfs, "zfetchstats")
    assert zf2["hits"] - zf["hits"] >= 16 and zf2["misses"] >= zf["misses"], (zf, zf2)
    dmu = oxzfs.run("arc_summary", "-s", "dmu").stdout
    assert re.search(r"^DMU prefetch efficiency:\s+\S+$", dmu, re.M) and "Hit ratio:" in dmu, dmu
    assert after["l2_hits"] - before["l2_hits"] >= 32, (before, after)
    assert after["l2_cksum_bad"] == before["l2_cksum_bad"], after
    _, reads, _, rbytes, _ = cache_row(oxzfs, pool, cache)
    assert rbytes >= 4 << 20, rbytes
    # Its reads and the feed's writes are timed: iostat -l's wait columns (ns with -p) and
    # -w's histograms count them on the cache device's row.
    r = oxzfs.zpool("iostat", "-Hpvl", pool)
    row = next((ln.split("\t") for ln in r.stdout.splitlines() if ln.split("\t")[0] == cache), None)
    assert row and row[7].isdigit() and int(row[7]) > 0 and row[9].isdigit() and int(row[9]) > 0, r.stdout

    # Corrupt the blocks on the cache device (not its log blocks): read from the pool, counted.
    assert oxzfs.export(pool).returncode == 0
    with open(cache, "r+b") as f:
        for a in addresses:
            f.seek(a + 100)
            f.write(b"\xde\xad\xbe\xef" * 4)
    before, after = reimport_and_read(oxzfs, vdir, alt, pool, want)
    assert after["l2_cksum_bad"] - before["l2_cksum_bad"] >= 32, (before, after)

    # zpool remove: at once; reads stay right, status and iostat no longer show it.
    r = oxzfs.zpool("remove", pool, cache)
    assert r.returncode == 0, repr(r)
    st = oxzfs.zpool("status", pool).stdout
    assert "cache" not in st and cache not in st, st
    assert cache not in oxzfs.zpool("iostat", "-v", pool).stdout
    assert oxzfs.export(pool).returncode == 0
    before = arcstats(oxzfs)
    import_pool(oxzfs, vdir, alt, pool)
    assert sha(os.path.join(root, "f")) == want
    after = arcstats(oxzfs)
    assert after["l2_hits"] == before["l2_hits"] and after["l2_rebuild_success"] == before["l2_rebuild_success"], after
    assert cache not in oxzfs.zpool("status", pool).stdout

    # zpool add of a cache device on the live pool: used at once.
    with open(cache, "r+b") as f:
        f.truncate(0)
        f.truncate(96 << 20)
    r = oxzfs.zpool("add", pool, "cache", cache)
    assert r.returncode == 0, repr(r)
    assert cache in oxzfs.zpool("status", pool).stdout
    assert sha(os.path.join(root, "f")) == want
    wait_for(oxzfs, "a feed of the added device", lambda s: s["l2_size"] >= 1 << 20)
    assert cache_row(oxzfs, pool, cache)[0] > 0
    assert oxzfs.export(pool).returncode == 0


def test_daemon_killed_and_restarted_finds_the_cache_again(oxzfs_bin, work_dir):
    base = os.path.join(work_dir, "run", "test_l2arc_restart")
    unmount_below(base)
    subprocess.run(["rm", "-rf", base])
    runners = []

    def runner(name):
        ox = Oxzfs(oxzfs_bin, os.path.join(base, name))
        ox.start_daemon()
        runners.append(ox)
        tune(ox)
        return ox

    try:
        ox = runner("first")
        pool = "l2r"
        vdir, alt, cache = make_pool(ox, "l2r", pool)
        data = os.urandom(16 << 20)
        want = hashlib.sha256(data).hexdigest()
        with open(os.path.join(alt, pool, "f"), "wb") as f:
            f.write(data)
        assert ox.zpool("sync", pool).returncode == 0
        assert sha(os.path.join(alt, pool, "f")) == want
        wait_for(ox, "an L2ARC feed of 8 MiB", lambda s: s["l2_size"] >= 8 << 20 and s["l2_log_blk_count"] > 0)
        # No export: the daemon dies with the pool imported.
        ox.kill9()
        ox.imported.remove(pool)
        unmount_below(alt)
        ox2 = runner("second")
        r = ox2.zpool("import", "-f", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        ox2.imported.append(pool)
        wait_for(ox2, "the L2ARC rebuild after a restart", lambda s: s["l2_rebuild_success"] >= 1)
        assert sha(os.path.join(alt, pool, "f")) == want
        s = arcstats(ox2)
        assert s["l2_hits"] >= 32 and s["l2_cksum_bad"] == 0, s
        assert ox2.export(pool).returncode == 0
        # A read-only import reads the cache device too (rebuilt, never written).
        r = ox2.import_ro(vdir, pool, alt)
        assert r.returncode == 0, repr(r)
        wait_for(ox2, "the rebuild of a read-only import", lambda t: t["l2_rebuild_success"] > s["l2_rebuild_success"])
        assert sha(os.path.join(alt, pool, "f")) == want
        t = arcstats(ox2)
        assert t["l2_hits"] - s["l2_hits"] >= 32, t
        assert ox2.export(pool).returncode == 0
        # The cache device fails under the pool (cut short: its reads fail): the readers get
        # the pool's bytes, the device is dropped and shown FAULTED.
        before, after = reimport_and_read(ox2, vdir, alt, pool, want)
        assert ox2.export(pool).returncode == 0
        import_pool(ox2, vdir, alt, pool)
        wait_for(ox2, "the rebuild", lambda t: t["l2_rebuild_success"] > after["l2_rebuild_success"])
        with open(cache, "r+b") as f:
            f.truncate(5 << 20)
        assert sha(os.path.join(alt, pool, "f")) == want
        t = arcstats(ox2)
        assert t["l2_io_error"] - after["l2_io_error"] >= 8, t
        st = ox2.zpool("status", pool).stdout
        assert re.search(r"cache0\s+FAULTED", st), st
        assert ox2.export(pool).returncode == 0
    finally:
        for ox in runners:
            ox.teardown()


def test_secondarycache_none_feeds_no_data(oxzfs):
    tune(oxzfs)
    pool = "l2b"
    vdir, alt, cache = make_pool(oxzfs, "l2b", pool)
    assert oxzfs.zfs("set", "secondarycache=none", pool).returncode == 0
    root = os.path.join(alt, pool)
    data = os.urandom(16 << 20)
    with open(os.path.join(root, "f"), "wb") as f:
        f.write(data)
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert sha(os.path.join(root, "f")) == hashlib.sha256(data).hexdigest()
    feeds = arcstats(oxzfs)["l2_feeds"]
    s = wait_for(oxzfs, "three L2ARC feeds", lambda s: s["l2_feeds"] >= feeds + 3)
    # Only the pool's own metadata (the MOS, always cacheable) may have gone there, not the
    # 16 MiB of the file.
    assert s["l2_size"] < 4 << 20, s
    assert cache_row(oxzfs, pool, cache)[0] < 4 << 20
    # secondarycache=metadata: read again after an import, the file's data is not fed, its
    # metadata may be.
    assert oxzfs.zfs("set", "secondarycache=metadata", pool).returncode == 0
    assert oxzfs.export(pool).returncode == 0
    import_pool(oxzfs, vdir, alt, pool)
    assert sha(os.path.join(root, "f")) == hashlib.sha256(data).hexdigest()
    feeds = arcstats(oxzfs)["l2_feeds"]
    s = wait_for(oxzfs, "three L2ARC feeds", lambda s: s["l2_feeds"] >= feeds + 3)
    assert s["l2_bufc_data_asize"] == 0 and s["l2_bufc_metadata_asize"] > 0 and s["l2_size"] < 4 << 20, s
    # secondarycache=all: the same file is fed once it is read again.
    assert oxzfs.zfs("set", "secondarycache=all", pool).returncode == 0
    assert oxzfs.export(pool).returncode == 0
    import_pool(oxzfs, vdir, alt, pool)
    assert sha(os.path.join(root, "f")) == hashlib.sha256(data).hexdigest()
    wait_for(oxzfs, "a feed of the file", lambda s: s["l2_size"] >= 12 << 20)
    # l2arc_feed_secs: an idle pool's feed thread wakes once every that many seconds.
    assert oxzfs.run("tunable", "l2arc_feed_secs=3").returncode == 0
    try:
        time.sleep(1.5)
        f0 = arcstats(oxzfs)["l2_feeds"]
        time.sleep(9)
        fed = arcstats(oxzfs)["l2_feeds"] - f0
        assert 2 <= fed <= 4, f"{fed} feeds in 9 s at l2arc_feed_secs=3"
    finally:
        assert oxzfs.run("tunable", "l2arc_feed_secs=1").returncode == 0
    assert oxzfs.export(pool).returncode == 0


def pool_with_file(ox, pool, mib, layout):
    """POOL (compression=off) on the devices LAYOUT(vdev dir) returns, under ox.base/POOL, with
    file f of MIB MiB of random bytes: (vdev dir, altroot, the file's path, its sha256)."""
    base = os.path.join(ox.base, pool)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    r = ox.zpool("create", "-O", "compression=off", "-R", alt, pool, *layout(vdir))
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    path = os.path.join(alt, pool, "f")
    data = os.urandom(mib << 20)
    with open(path, "wb") as f:
        f.write(data)
    return vdir, alt, path, hashlib.sha256(data).hexdigest()


def test_primarycache_keeps_what_it_says(oxzfs):
    """primarycache=none keeps none of the dataset's blocks in the ARC (the second read of a
    file misses again), =metadata only its metadata (data misses again, its indirect block
    hits), =all both (the second read hits)."""
    tune(oxzfs)
    assert oxzfs.run("tunable", "zfs_arc_max=256M").returncode == 0
    pool = "l2pc"
    vdir, alt, path, want = pool_with_file(oxzfs, pool, 4, lambda vdir: make_devs(vdir, 1, 128))
    blocks = (4 << 20) >> 17

    def data_misses(s):
        return s["demand_data_misses"] + s["prefetch_data_misses"]

    for policy in ("none", "metadata", "all"):
        assert oxzfs.zfs("set", f"primarycache={policy}", pool).returncode == 0
        # (An export and import empty the ARC of the pool's blocks.)
        assert oxzfs.export(pool).returncode == 0
        import_pool(oxzfs, vdir, alt, pool)
        assert read_direct(path) == want
        s1 = arcstats(oxzfs)
        assert read_direct(path) == want
        s2 = arcstats(oxzfs)
        dh, dm = s2["demand_data_hits"] - s1["demand_data_hits"], data_misses(s2) - data_misses(s1)
        mh = s2["demand_metadata_hits"] - s1["demand_metadata_hits"]
        if policy == "all":
            assert dh >= blocks and dm == 0, (policy, s1, s2)
        else:
            assert dh == 0 and dm >= blocks, (policy, s1, s2)
        if policy == "metadata":
            assert mh > 0, (policy, s1, s2)
    assert oxzfs.export(pool).returncode == 0
    tune(oxzfs)


def test_two_cache_devices_serve_within_an_import_and_one_goes_under_reads(oxzfs):
    """Two cache devices take turns (both hold blocks, both in iostat -v). A file three times
    the ARC, read again in the same import, comes back from them once the ARC has evicted it.
    One is removed while a reader goes over the file again and again: every read is right, the
    device leaves status and iostat, the other keeps serving. With l2arc_rebuild_enabled=0 an
    import does not rebuild from the one left."""
    tune(oxzfs)
    # (Feeds of 8 MiB: the evicted part of the file does not all go to the first device fed.)
    assert oxzfs.run("tunable", "l2arc_write_max=8M").returncode == 0
    s0 = arcstats(oxzfs)
    pool = "l2two"
    caches = []

    def layout(vdir):
        data_dev = make_devs(vdir, 1, 160)
        caches.extend(os.path.join(vdir, f"cache{i}") for i in range(2))
        for c in caches:
            with open(c, "wb") as f:
                f.truncate(96 << 20)
        return data_dev + ["cache"] + caches

    vdir, alt, path, want = pool_with_file(oxzfs, pool, 48, layout)
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert read_direct(path) == want
    wait_for(oxzfs, "a feed of each device", lambda s: all(cache_row(oxzfs, pool, c)[0] >= 4 << 20 for c in caches))
    s1 = arcstats(oxzfs)
    assert read_direct(path) == want
    s2 = arcstats(oxzfs)
    assert s2["l2_hits"] - s1["l2_hits"] >= 64 and s2["l2_cksum_bad"] == s1["l2_cksum_bad"], (s1, s2)
    assert sum(cache_row(oxzfs, pool, c)[3] for c in caches) >= 8 << 20

    # zpool remove of one while a reader loops over the file.
    errors, rounds, stop = [], [0], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                if read_direct(path) != want:
                    errors.append("a read differs")
            except OSError as e:
                errors.append(repr(e))
            rounds[0] += 1

    t = threading.Thread(target=reader)
    t.start()
    try:
        time.sleep(0.3)
        r = oxzfs.zpool("remove", pool, caches[0])
        assert r.returncode == 0, repr(r)
        time.sleep(0.5)
        at_removal = rounds[0]
        deadline = time.time() + 30
        while rounds[0] < at_removal + 2 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        t.join(60)
    assert not errors and rounds[0] >= 3, (errors, rounds)
    st = oxzfs.zpool("status", pool).stdout
    assert caches[0] not in st and caches[1] in st, st
    iv = oxzfs.zpool("iostat", "-v", pool).stdout
    assert caches[0] not in iv and caches[1] in iv, iv
    s3 = arcstats(oxzfs)
    assert read_direct(path) == want
    assert arcstats(oxzfs)["l2_hits"] > s3["l2_hits"]

    # l2arc_rebuild_enabled=0: the import leaves the device's content alone (nothing restored).
    assert oxzfs.export(pool).returncode == 0
    assert oxzfs.run("tunable", "l2arc_rebuild_enabled=0").returncode == 0
    try:
        before = arcstats(oxzfs)
        import_pool(oxzfs, vdir, alt, pool)
        time.sleep(2)
        after = arcstats(oxzfs)
        assert after["l2_rebuild_success"] == before["l2_rebuild_success"] and after["l2_rebuild_bufs"] == before["l2_rebuild_bufs"], (before, after)
        assert read_direct(path) == want
        assert arcstats(oxzfs)["l2_hits"] == after["l2_hits"]
    finally:
        assert oxzfs.run("tunable", "l2arc_rebuild_enabled=1").returncode == 0
    assert oxzfs.export(pool).returncode == 0
    assert arcstats(oxzfs)["l2_cksum_bad"] == s0["l2_cksum_bad"]
    tune(oxzfs)


def test_arcstats_usage_and_json(oxzfs):
    r = oxzfs.run("arcstats", "-x")
    assert r.returncode == 2 and "usage: oxzfs arcstats [-j]" in r.stderr, repr(r)
    r = oxzfs.run("arcstats", "-j")
    assert r.returncode == 0, repr(r)
    j = json.loads(r.stdout)
    for k in ("hits", "misses", "size", "c", "c_min", "c_max", "mru_size", "mfu_size", "l2_hits", "l2_misses",
              "l2_size", "l2_asize", "l2_feeds", "l2_rw_clash", "l2_cksum_bad", "l2_io_error", "l2_rebuild_success",
              "l2_rebuild_log_blks", "l2_log_blk_count", "demand_data_hits", "prefetch_metadata_misses",
              "arc_meta_used", "arc_meta_limit", "dnode_size", "hash_elements", "memory_throttle_count",
              "l2_mfu_asize", "l2_bufc_metadata_asize"):
        assert k in j, k
    # The hits and misses by kind add up to the totals.
    kinds = ("demand_data", "demand_metadata", "prefetch_data", "prefetch_metadata")
    assert sum(j[f"{k}_hits"] for k in kinds) == j["hits"] and sum(j[f"{k}_misses"] for k in kinds) == j["misses"], j
    # Every row is one of OpenZFS's, under its name and in its order; every l2_rebuild_ one is there.
    names = [ln.split()[0] for ln in oxzfs.run("arcstats").stdout.splitlines()[2:]]
    assert set(names) <= set(OPENZFS_ARCSTATS), set(names) - set(OPENZFS_ARCSTATS)
    assert names == [n for n in OPENZFS_ARCSTATS if n in names], names
    assert {n for n in OPENZFS_ARCSTATS if n.startswith("l2_rebuild_")} <= set(names), names
    assert j["data_size"] + j["metadata_size"] == j["size"] and j["memory_all_bytes"] > j["c_max"], j


def test_arc_summary_reads_the_arcstats(oxzfs):
    """`oxzfs arc_summary` in OpenZFS's layout (72 columns, its number formats), from the
    same counters as arcstats; -r dumps every counter; an unknown section is refused."""
    tune(oxzfs)
    j = json.loads(oxzfs.run("arcstats", "-j").stdout)
    r = oxzfs.run("arc_summary", "-s", "arc")
    assert r.returncode == 0, repr(r)
    lines = r.stdout.splitlines()
    assert lines[2].startswith("ZFS Subsystem Report") and len(lines[2]) == 72, r.stdout
    want_max = f"{j['c_max'] / (1 << 20):.1f} MiB"
    row = next(ln for ln in lines if "Max size (high water):" in ln)
    assert row.split()[-3:] == [f"{j['c_max'] // j['c_min']}:1", *want_max.split()] and len(row) == 72, row
    assert any(ln.startswith("ARC status:") and ln.endswith("HEALTHY") for ln in lines), r.stdout
    r = oxzfs.run("arc_summary", "-r")
    assert r.returncode == 0, repr(r)
    raw = {ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("        ") and len(ln.split()) == 2}
    assert set(j) <= raw and "zfs_arc_max" in raw, set(j) - raw
    r = oxzfs.run("arc_summary", "-s", "bogus")
    assert r.returncode == 1 and r.stderr == 'Error: Section "bogus" unknown\n', repr(r)


def read_direct(path):
    """sha256 of PATH read with O_DIRECT: every read reaches the file system (no page cache)."""
    import mmap
    h, buf = hashlib.sha256(), mmap.mmap(-1, 1 << 20)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        while n := os.readv(fd, [buf]):
            h.update(buf[:n])
    finally:
        os.close(fd)
    return h.hexdigest()


def test_compressed_arc_caches_more_than_its_size(oxzfs):
    """Compressed ARC (zfs_compressed_arc_enabled=1, OpenZFS's default): blocks are kept as the
    pool holds them, so a compressible file three times zfs_arc_max is read a second time from
    the ARC (demand data hits, no new misses), compressed_size under uncompressed_size, the
    decompressed copies in overhead_size; with zfs_compressed_arc_enabled=0 the same second read
    misses. The bytes read are the bytes written; arc_summary shows the three figures."""
    tune(oxzfs)
    pool = "carc"
    base = os.path.join(oxzfs.base, "carc")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    r = oxzfs.zpool("create", "-O", "compression=lz4", "-R", alt, pool, *make_devs(vdir, 1, 128))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    path = os.path.join(alt, pool, "text")
    line = b" lines of text the ARC keeps compressed, as the pool holds them\n"
    data = b"".join(b"%08d" % i + line for i in range((48 << 20) // (8 + len(line)) + 1))[:48 << 20]
    with open(path, "wb") as f:
        f.write(data)
    want = hashlib.sha256(data).hexdigest()
    blocks = len(data) >> 17

    def two_reads():
        # Export and import: the ARC and the kernel's caches start empty.
        assert oxzfs.export(pool).returncode == 0
        import_pool(oxzfs, vdir, alt, pool)
        assert read_direct(path) == want
        first = arcstats(oxzfs)
        assert read_direct(path) == want
        return first, arcstats(oxzfs)

    # (Data misses: demand and prefetch ones; the read-ahead brings most blocks in.)
    def data_misses(s):
        return s["demand_data_misses"] + s["prefetch_data_misses"]

    first, second = two_reads()
    assert second["demand_data_hits"] - first["demand_data_hits"] >= blocks, (first, second)
    assert data_misses(second) == data_misses(first), (first, second)
    s = second
    assert s["uncompressed_size"] >= 2 * s["c_max"] and 0 < s["compressed_size"] < s["uncompressed_size"] // 3, s
    assert 0 < s["overhead_size"] <= s["c_max"] // 16 and s["size"] == s["compressed_size"] + s["overhead_size"] <= s["c_max"], s
    r = oxzfs.run("arc_summary", "-s", "arc")
    assert r.returncode == 0, repr(r)
    for label in ("Compressed size:", "Overhead size:", "Uncompressed size:"):
        row = next((ln for ln in r.stdout.splitlines() if ln.strip().startswith(label)), None)
        assert row is not None and len(row) == 72, r.stdout
    # Kept decompressed: the file is three times the cache; its second read misses again.
    assert oxzfs.run("tunable", "zfs_compressed_arc_enabled=0").returncode == 0
    first, second = two_reads()
    assert data_misses(second) - data_misses(first) >= blocks // 2, (first, second)
    assert second["compressed_size"] == second["uncompressed_size"] <= second["c_max"], second
    assert oxzfs.run("tunable", "zfs_compressed_arc_enabled=1").returncode == 0
    assert oxzfs.export(pool).returncode == 0


@pytest.mark.parametrize("how", ["dedup", "intent-log"])
def test_written_blocks_enter_the_arc_compressed(oxzfs, how):
    """Blocks written one by one, not in a sync's batch, are kept in the ARC as the pool
    stores them too: those of a dedup dataset, and those an intent-log commit writes where
    they belong (logbias=throughput under sync=always) and the sync then installs. What the
    pool's blocks take in the ARC is measured by its export, which drops them."""
    tune(oxzfs)
    assert oxzfs.run("tunable", "zfs_arc_max=512M").returncode == 0
    pool = "wc" + how[0]
    base = os.path.join(oxzfs.base, pool)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    props = ["dedup=on"] if how == "dedup" else ["logbias=throughput", "sync=always"]
    r = oxzfs.zpool("create", "-O", "compression=lz4", *sum((["-O", p] for p in props), []), "-R", alt, pool, *make_devs(vdir, 1, 128))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    line = b" lines of text kept compressed from the moment they are written\n"
    data = b"".join(b"%08d" % i + line for i in range((16 << 20) // (8 + len(line)) + 1))[:16 << 20]
    path = os.path.join(alt, pool, "text")
    zil0 = kstat(oxzfs, "zil")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for off in range(0, len(data), 128 << 10):
            os.pwrite(fd, data[off:off + (128 << 10)], off)
    finally:
        os.close(fd)
    assert oxzfs.zpool("sync", pool).returncode == 0
    if how == "intent-log":
        # (Every 128 KiB write went to its place and the log named it.)
        zil1 = kstat(oxzfs, "zil")
        assert zil1["zil_itx_indirect_bytes"] - zil0["zil_itx_indirect_bytes"] >= len(data), (zil0, zil1)
    held = arcstats(oxzfs)
    assert oxzfs.export(pool).returncode == 0
    left = arcstats(oxzfs)
    comp = held["compressed_size"] - left["compressed_size"]
    uncomp = held["uncompressed_size"] - left["uncompressed_size"]
    assert uncomp >= len(data) and 0 < comp < uncomp // 3, (held, left)
    tune(oxzfs)


def test_zfs_arc_max_shrinks_the_arc_at_once(oxzfs):
    tune(oxzfs)
    pool = "l2c"
    base = os.path.join(oxzfs.base, "l2c")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    r = oxzfs.zpool("create", "-R", alt, pool, *make_devs(vdir, 1, 64))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    with open(os.path.join(alt, pool, "f"), "wb") as f:
        f.write(os.urandom(12 << 20))
    assert oxzfs.zpool("sync", pool).returncode == 0
    s = arcstats(oxzfs)
    assert s["size"] > 8 << 20 and s["c_max"] == 16 << 20, s
    assert oxzfs.run("tunable", "zfs_arc_max=8M").returncode == 0
    s = arcstats(oxzfs)
    assert s["size"] <= 8 << 20 and s["c_max"] == 8 << 20, s
    assert oxzfs.export(pool).returncode == 0


def test_one_arc_for_all_pools_shrinks_under_memory_pressure(oxzfs):
    """One ARC serves every imported pool, as in OpenZFS: its limit is zfs_arc_max for all of
    them together, and an export drops that pool's blocks only. When the system's available
    memory falls below zfs_arc_sys_free, the target `c` shrinks (never below zfs_arc_min),
    memory_throttle_count counts it, and after arc_grow_retry the target grows back as blocks
    come in."""
    tune(oxzfs)
    assert oxzfs.run("tunable", "zfs_arc_min=4M").returncode == 0
    base = os.path.join(oxzfs.base, "shared")
    roots = {}
    for i, pool in enumerate(("arcp1", "arcp2")):
        vdir, alt = os.path.join(base, f"v{i}"), os.path.join(base, f"alt{i}")
        r = oxzfs.zpool("create", "-O", "compression=off", "-R", alt, pool, *make_devs(vdir, 1, 64))
        assert r.returncode == 0, repr(r)
        oxzfs.imported.append(pool)
        roots[pool] = os.path.join(alt, pool)
        with open(os.path.join(roots[pool], "f"), "wb") as f:
            f.write(os.urandom(10 << 20))
        assert oxzfs.zpool("sync", pool).returncode == 0
    s = arcstats(oxzfs)
    assert s["c_max"] == 16 << 20 and s["c_min"] == 4 << 20 and 10 << 20 < s["size"] <= 16 << 20, s
    assert oxzfs.export("arcp1").returncode == 0
    t = arcstats(oxzfs)
    assert t["size"] < s["size"] - (1 << 20), (s, t)
    # Memory "short": the ARC must leave the system all of it.
    total = int(next(ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemTotal:"))) << 10
    assert oxzfs.run("tunable", f"zfs_arc_sys_free={total}").returncode == 0
    s = wait_for(oxzfs, "the ARC shrinking to zfs_arc_min", lambda s: s["c"] == 4 << 20, timeout=30)
    assert s["size"] <= 4 << 20 and s["memory_throttle_count"] > 0 and s["arc_no_grow"] == 1, s
    assert s["memory_available_bytes"] == 0 and s["arc_sys_free"] == total, s
    assert oxzfs.run("tunable", "zfs_arc_sys_free=0").returncode == 0
    time.sleep(6)  # arc_grow_retry (5 s) after the last shrink
    with open(os.path.join(roots["arcp2"], "g"), "wb") as f:
        f.write(os.urandom(8 << 20))
    assert oxzfs.zpool("sync", "arcp2").returncode == 0
    s = arcstats(oxzfs)
    assert s["c"] > 8 << 20 and s["arc_no_grow"] == 0, s
    assert oxzfs.run("tunable", "zfs_arc_min=0").returncode == 0
    assert oxzfs.export("arcp2").returncode == 0


def test_v23_pool_with_our_cache_device_imports_in_zfs_fuse(oxzfs, work_dir):
    """zfs-fuse (pool version 23, no persistent L2ARC) imports a pool whose cache device we fed
    and reads the file back; its own L2ARC takes the device over."""
    tune(oxzfs)
    pool = "l2v23"
    base = os.path.join(oxzfs.base, "l2v23")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    data = make_devs(vdir, 1, 128)[0]
    # zfs-fuse takes cache devices only as block devices: a loop device over a file, named by
    # a link in the pool's directory (both scans follow it).
    img = os.path.join(base, "cache0.img")
    with open(img, "wb") as f:
        f.truncate(96 << 20)
    r = subprocess.run(["losetup", "-f", "--show", img], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"losetup cannot attach a loop device: {r.stderr}", pytrace=False)
    loop = r.stdout.strip()
    try:
        os.symlink(loop, os.path.join(vdir, "cache0"))
        v23_cross(oxzfs, work_dir, base, vdir, alt, pool, data, loop)
    finally:
        subprocess.run(["losetup", "-d", loop], capture_output=True)


def v23_cross(oxzfs, work_dir, base, vdir, alt, pool, data, cache):
    r = oxzfs.zpool("create", "-o", "version=23", "-R", alt, pool, data, "cache", cache)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    blob = os.urandom(12 << 20)
    with open(os.path.join(alt, pool, "f"), "wb") as f:
        f.write(blob)
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert sha(os.path.join(alt, pool, "f")) == hashlib.sha256(blob).hexdigest()
    wait_for(oxzfs, "an L2ARC feed", lambda s: s["l2_size"] >= 4 << 20)
    assert oxzfs.export(pool).returncode == 0
    try:
        with oracle_pools.ZfsFuse(work_dir):
            zfs_fuse_reads(os.path.join(base, "zfs-fuse-alt"), vdir, pool, cache, hashlib.sha256(blob).hexdigest())
    except oracle_pools.MissingTool as e:
        pytest.fail(str(e), pytrace=False)
    # And back: our import finds no header of ours (zfs-fuse's L2ARC wrote over the device or
    # left it) and reads right either way.
    import_pool(oxzfs, vdir, alt, pool)
    assert sha(os.path.join(alt, pool, "f")) == hashlib.sha256(blob).hexdigest()
    assert oxzfs.export(pool).returncode == 0


def zfs_fuse_reads(zalt, vdir, pool, cache, want):
    """zfs-fuse (its lock held) imports POOL, lists the cache device, reads f as WANT, exports."""
    try:
        r = subprocess.run(["zpool", "import", "-d", vdir, "-R", zalt, pool], capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse cannot import our pool:\n{r.stdout}{r.stderr}"
        st = subprocess.run(["zpool", "status", pool], capture_output=True, text=True).stdout
        assert "cache" in st and os.path.basename(cache) in st, st
        assert sha(os.path.join(zalt, pool, "f")) == want
        r = subprocess.run(["zpool", "export", pool], capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse export failed:\n{r.stdout}{r.stderr}"
    finally:
        subprocess.run(["zpool", "export", "-f", pool], capture_output=True)
