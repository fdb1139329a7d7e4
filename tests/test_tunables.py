"""Tunables under OpenZFS's module parameter names: `oxzfs tunable` lists, reads and sets them in
the running daemon, `oxzfs daemon start -o NAME=VALUE` sets them as it starts; unknown names and
bad values are refused naming them, and change nothing. A changed tunable acts at once
(zfs_max_recordsize: what `zfs set recordsize` accepts)."""
import os

from conftest import Oxzfs
from test_write import new_pool, zdb_check

NAMES = ["fuse_io_uring", "l2arc_feed_again", "l2arc_feed_min_ms", "l2arc_feed_secs", "l2arc_headroom", "l2arc_headroom_boost", "l2arc_meta_percent", "l2arc_noprefetch", "l2arc_rebuild_blocks_min_l2size",
         "l2arc_rebuild_enabled", "l2arc_write_boost", "l2arc_write_max", "metaslab_force_ganging", "vdev_removal_max_span", "zfs_arc_max",
         "zfs_arc_min", "zfs_arc_sys_free", "zfs_compressed_arc_enabled", "zfs_condense_indirect_obsolete_pct", "zfs_condense_indirect_vdevs_enable",
         "zfs_condense_max_obsolete_bytes", "zfs_condense_min_mapping_bytes", "zfs_dirty_data_max", "zfs_dirty_data_sync", "zfs_immediate_write_sz", "zfs_max_recordsize", "zfs_rebuild_max_segment", "zfs_rebuild_scrub_enabled",
         "zfs_rebuild_vdev_limit", "zfs_removal_suspend_progress",
         "zfs_remove_max_segment", "zfs_scan_fill_weight", "zfs_scan_issue_strategy", "zfs_scan_legacy",
         "zfs_scan_max_ext_gap", "zfs_scan_mem_lim_fact", "zfs_scan_suspend_progress",
         "zfs_scrub_min_time_ms", "zfs_sync_pass_dont_compress", "zfs_trim_extent_bytes_max", "zfs_trim_extent_bytes_min",
         "zfs_trim_txg_batch", "zfs_txg_timeout", "zfs_vdev_aggregation_limit", "zil_slog_bulk"]


def tunables(ox):
    r = ox.run("tunable")
    assert r.returncode == 0, repr(r)
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


def test_tunable_lists_reads_sets_and_refuses(oxzfs):
    t = tunables(oxzfs)
    assert sorted(t) == NAMES
    assert t["zfs_txg_timeout"] == "5" and t["zfs_max_recordsize"] == str(1 << 20)

    r = oxzfs.run("tunable", "zfs_txg_timeout=3")
    assert r.returncode == 0 and r.stdout == "zfs_txg_timeout=3\n", repr(r)
    r = oxzfs.run("tunable", "zfs_txg_timeout")
    assert r.stdout == "zfs_txg_timeout=3\n", repr(r)

    for args, words in [
        (["zfs_no_such=1"], ["unknown tunable 'zfs_no_such'"]),
        (["zfs_txg_timeout=soon"], ["bad value 'soon'", "zfs_txg_timeout"]),
        (["zfs_max_recordsize=64M"], ["bad value '64M'", "zfs_max_recordsize", "between"]),
        # all are checked before any is set
        (["zfs_txg_timeout=4", "zfs_nope=1"], ["unknown tunable 'zfs_nope'"]),
    ]:
        r = oxzfs.run("tunable", *args)
        assert r.returncode != 0, repr(r)
        assert all(w in r.stderr for w in words), repr(r)
    after = tunables(oxzfs)
    assert after["zfs_txg_timeout"] == "3" and after["zfs_max_recordsize"] == str(1 << 20), after
    oxzfs.run("tunable", "zfs_txg_timeout=5", check=True)


def test_zfs_max_recordsize_acts_at_once(oxzfs):
    pool = "tunrs"
    vdir, alt, root = new_pool(oxzfs, pool, "tunrs", 1)
    oxzfs.zfs("create", f"{pool}/fs", check=True)
    # above zfs_max_recordsize: OpenZFS's ERANGE wording for recordsize
    r = oxzfs.zfs("set", "recordsize=4M", f"{pool}/fs")
    assert r.returncode != 0 and "property setting is not allowed" in r.stderr, repr(r)
    oxzfs.run("tunable", "zfs_max_recordsize=16M", check=True)
    try:
        oxzfs.zfs("set", "recordsize=4M", f"{pool}/fs", check=True)
        r = oxzfs.zfs("get", "-Hp", "-o", "value", "recordsize", f"{pool}/fs")
        assert r.stdout.strip() == str(4 << 20), repr(r)
        data = os.urandom(9 << 20)
        with open(os.path.join(root, "fs", "big"), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    finally:
        oxzfs.run("tunable", "zfs_max_recordsize=1M", check=True)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_daemon_start_sets_tunables_and_refuses_bad_ones(oxzfs_bin, work_dir):
    base = os.path.join(work_dir, "run", "test_tunables_start")
    ox = Oxzfs(oxzfs_bin, base)
    os.makedirs(base, exist_ok=True)
    try:
        r = ox.run("daemon", "start", "-o", "zfs_bogus=1")
        assert r.returncode != 0 and "unknown tunable 'zfs_bogus'" in r.stderr, repr(r)
        assert not ox.daemon_alive(), "a refused start left a daemon"
        r = ox.run("tunable")
        assert r.returncode != 0 and "not running" in r.stderr, repr(r)
        ox.run("daemon", "start", "-o", "zfs_txg_timeout=9", "-o", "zfs_dirty_data_max=64M", check=True)
        t = tunables(ox)
        assert t["zfs_txg_timeout"] == "9" and t["zfs_dirty_data_max"] == str(64 << 20), t
    finally:
        ox.teardown()
