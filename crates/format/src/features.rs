//! Pool feature flags (version 5000 pools): what each is called and what a reader must know.
//!
//! The MOS object directory names three ZAPs: `features_for_read` (features whose on-disk
//! changes a reader must understand, with reference counts), `features_for_write` and
//! `feature_descriptions`. A feature with a non-zero count in `features_for_read` that this
//! implementation does not list in [`READ_SUPPORTED`] makes the pool unimportable (named in the
//! error); one only in `features_for_write` allows a read-only import.

pub struct FeatureInfo {
    pub guid: &'static str,
    pub name: &'static str,
    /// Readers need not understand it (ZFEATURE_FLAG_READONLY_COMPAT).
    pub readonly_compat: bool,
}

const fn f(guid: &'static str, name: &'static str, readonly_compat: bool) -> FeatureInfo {
    FeatureInfo { guid, name, readonly_compat }
}

/// Every feature of OpenZFS 2.1, then the later ones (not understood by a 2.1 zdb).
pub const FEATURES: &[FeatureInfo] = &[
    f("com.delphix:async_destroy", "async_destroy", true),
    f("com.delphix:empty_bpobj", "empty_bpobj", true),
    f("org.illumos:lz4_compress", "lz4_compress", false),
    f("com.joyent:multi_vdev_crash_dump", "multi_vdev_crash_dump", false),
    f("com.delphix:spacemap_histogram", "spacemap_histogram", true),
    f("com.delphix:enabled_txg", "enabled_txg", true),
    f("com.delphix:hole_birth", "hole_birth", false),
    f("com.delphix:zpool_checkpoint", "zpool_checkpoint", true),
    f("com.delphix:spacemap_v2", "spacemap_v2", true),
    f("com.delphix:extensible_dataset", "extensible_dataset", false),
    f("com.delphix:bookmarks", "bookmarks", true),
    f("com.joyent:filesystem_limits", "filesystem_limits", true),
    f("com.delphix:embedded_data", "embedded_data", false),
    f("com.delphix:livelist", "livelist", true),
    f("com.delphix:log_spacemap", "log_spacemap", false),
    f("org.open-zfs:large_blocks", "large_blocks", false),
    f("org.zfsonlinux:large_dnode", "large_dnode", false),
    f("org.illumos:sha512", "sha512", false),
    f("org.illumos:skein", "skein", false),
    f("org.illumos:edonr", "edonr", false),
    f("com.delphix:redaction_bookmarks", "redaction_bookmarks", false),
    f("com.delphix:redacted_datasets", "redacted_datasets", false),
    f("com.delphix:bookmark_written", "bookmark_written", false),
    f("com.delphix:device_removal", "device_removal", false),
    f("com.delphix:obsolete_counts", "obsolete_counts", true),
    f("org.zfsonlinux:userobj_accounting", "userobj_accounting", true),
    f("com.datto:bookmark_v2", "bookmark_v2", false),
    f("com.datto:encryption", "encryption", false),
    f("org.zfsonlinux:project_quota", "project_quota", true),
    f("org.zfsonlinux:allocation_classes", "allocation_classes", true),
    f("com.datto:resilver_defer", "resilver_defer", true),
    f("org.openzfs:device_rebuild", "device_rebuild", true),
    f("org.freebsd:zstd_compress", "zstd_compress", false),
    f("org.openzfs:draid", "draid", false),
    // Later than 2.1.
    f("org.openzfs:zilsaxattr", "zilsaxattr", true),
    f("com.delphix:head_errlog", "head_errlog", false),
    f("org.openzfs:blake3", "blake3", false),
    f("com.fudosecurity:block_cloning", "block_cloning", true),
    f("com.klarasystems:vdev_zaps_v2", "vdev_zaps_v2", false),
    f("org.openzfs:raidz_expansion", "raidz_expansion", false),
    f("com.klarasystems:fast_dedup", "fast_dedup", true),
    f("org.openzfs:longname", "longname", false),
    f("org.openzfs:large_microzap", "large_microzap", false),
    f("com.klarasystems:dynamic_gang_header", "dynamic_gang_header", false),
];

/// Features whose on-disk changes this reader understands.
pub const READ_SUPPORTED: &[&str] = &[
    "com.delphix:async_destroy",
    "com.delphix:empty_bpobj",
    "org.illumos:lz4_compress",
    "com.joyent:multi_vdev_crash_dump",
    "com.delphix:spacemap_histogram",
    "com.delphix:enabled_txg",
    "com.delphix:hole_birth",
    "com.delphix:zpool_checkpoint",
    "com.delphix:spacemap_v2",
    "com.delphix:extensible_dataset",
    "com.delphix:bookmarks",
    "com.joyent:filesystem_limits",
    "com.delphix:embedded_data",
    "com.delphix:livelist",
    "com.delphix:log_spacemap",
    "org.open-zfs:large_blocks",
    "org.zfsonlinux:large_dnode",
    "org.illumos:sha512",
    "org.illumos:skein",
    "org.illumos:edonr",
    "com.delphix:redaction_bookmarks",
    "com.delphix:redacted_datasets",
    "com.delphix:bookmark_written",
    "com.delphix:device_removal",
    "com.delphix:obsolete_counts",
    "org.zfsonlinux:userobj_accounting",
    "com.datto:bookmark_v2",
    "org.zfsonlinux:project_quota",
    "org.zfsonlinux:allocation_classes",
    "com.datto:resilver_defer",
    "org.openzfs:device_rebuild",
    "org.freebsd:zstd_compress",
    "org.openzfs:zilsaxattr",
    "com.delphix:head_errlog",
    "org.openzfs:blake3",
    "com.fudosecurity:block_cloning",
    "com.klarasystems:vdev_zaps_v2",
    // Encrypted datasets: their metadata can be traversed without keys; their files are not
    // readable until a key is loaded (which oxzfs does not do yet).
    "com.datto:encryption",
];

pub fn lookup(guid: &str) -> Option<&'static FeatureInfo> {
    FEATURES.iter().find(|f| f.guid == guid)
}

#[cfg(test)]
mod tests {
    #[test]
    fn supported_features_are_known() {
        for g in super::READ_SUPPORTED {
            assert!(super::lookup(g).is_some(), "{g}");
        }
        assert!(!super::READ_SUPPORTED.contains(&"org.openzfs:draid"));
    }
}
