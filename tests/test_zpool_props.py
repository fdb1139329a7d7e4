"""`zpool get all` lists what OpenZFS 2.1 lists, in its order: the visible pool properties in
zpool_prop_t order, then feature@ for every spa_feature_t — as OpenZFS 2.1's source
orders them (the lists below), then the newer features oxzfs knows."""
from test_write import new_pool

# OpenZFS 2.1.9: the visible (not hidden) pool properties in zpool_prop_t order
# (include/sys/fs/zfs.h, module/zcommon/zpool_prop.c) ...
OPENZFS_2_1_POOL_PROPS = [
    "size", "capacity", "altroot", "health", "guid", "version", "bootfs", "delegation", "autoreplace", "cachefile",
    "failmode", "listsnapshots", "autoexpand", "dedupratio", "free", "allocated", "readonly", "ashift", "comment",
    "expandsize", "freeing", "fragmentation", "leaked", "multihost", "checkpoint", "load_guid", "autotrim",
    "compatibility",
]
# ... and its spa_feature_t (include/zfeature_common.h), each shown as feature@NAME.
OPENZFS_2_1_FEATURES = [
    "async_destroy", "empty_bpobj", "lz4_compress", "multi_vdev_crash_dump", "spacemap_histogram", "enabled_txg",
    "hole_birth", "extensible_dataset", "embedded_data", "bookmarks", "filesystem_limits", "large_blocks",
    "large_dnode", "sha512", "skein", "edonr", "userobj_accounting", "encryption", "project_quota", "device_removal",
    "obsolete_counts", "zpool_checkpoint", "spacemap_v2", "allocation_classes", "resilver_defer", "bookmark_v2",
    "redaction_bookmarks", "redacted_datasets", "bookmark_written", "log_spacemap", "livelist", "device_rebuild",
    "zstd_compress", "draid",
]
# Features newer than 2.1 that oxzfs knows: listed after 2.1's, as a newer OpenZFS lists them.
NEWER_FEATURES = ["blake3"]


def openzfs_order():
    return OPENZFS_2_1_POOL_PROPS + [f"feature@{f}" for f in OPENZFS_2_1_FEATURES + NEWER_FEATURES]


def test_zpool_get_all_lists_openzfs_properties_in_order(oxzfs):
    pool = "wprops"
    new_pool(oxzfs, pool, "props", 1)
    r = oxzfs.zpool("get", "-H", "all", pool)
    assert r.returncode == 0, repr(r)
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    assert [row[1] for row in rows] == openzfs_order()
    got = {row[1]: (row[2], row[3]) for row in rows}
    assert got["compatibility"] == ("off", "default") and got["checkpoint"] == ("-", "-")
    assert got["feature@lz4_compress"] == ("active", "local")
    assert got["feature@encryption"] == ("disabled", "local")
    assert int(got["load_guid"][0]) > 0 and got["load_guid"][0] != got["guid"][0]
    assert oxzfs.export(pool).returncode == 0
