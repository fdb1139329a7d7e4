//! Pool feature flags (version 5000 pools): what each is called and what a reader must know.
//!
//! The MOS object directory names three ZAPs: `features_for_read` (features whose on-disk
//! changes a reader must understand, with reference counts), `features_for_write` and
//! `feature_descriptions`. A feature with a non-zero count in `features_for_read` that this
//! implementation does not list in [`READ_SUPPORTED`] makes the pool unimportable (named in the
//! error); one only in `features_for_write` allows a read-only import.

pub struct FeatureInfo {
    pub guid: &'static str,
    /// The short name (`feature@NAME` properties).
    pub name: &'static str,
    /// Readers need not understand it (ZFEATURE_FLAG_READONLY_COMPAT): it is listed in
    /// `features_for_write`, not `features_for_read`.
    pub readonly_compat: bool,
    /// ZFEATURE_FLAG_MOS: its changes are in the MOS only.
    pub mos: bool,
    /// ZFEATURE_FLAG_PER_DATASET: datasets that use it count it.
    pub per_dataset: bool,
    /// ZFEATURE_FLAG_ACTIVATE_ON_ENABLE: active as soon as it is enabled.
    pub activate_on_enable: bool,
    /// Guids of the features it depends on (must be enabled first).
    pub deps: &'static [&'static str],
    /// In OpenZFS 2.1 (a 2.1 zdb understands it).
    pub in_2_1: bool,
}

const RO: u8 = 1;
const MOS: u8 = 2;
const PER_DS: u8 = 4;
const ON_ENABLE: u8 = 8;
const LATER: u8 = 16;

const fn f(guid: &'static str, name: &'static str, flags: u8, deps: &'static [&'static str]) -> FeatureInfo {
    FeatureInfo {
        guid,
        name,
        readonly_compat: flags & RO != 0,
        mos: flags & MOS != 0,
        per_dataset: flags & PER_DS != 0,
        activate_on_enable: flags & ON_ENABLE != 0,
        deps,
        in_2_1: flags & LATER == 0,
    }
}

const EXT: &str = "com.delphix:extensible_dataset";
const BOOKMARKS: &str = "com.delphix:bookmarks";
const BOOKMARK_V2: &str = "com.datto:bookmark_v2";

/// Every feature of OpenZFS 2.1 (zfeature_common.c), then the later ones (not understood by a
/// 2.1 zdb), with their flags and dependencies.
pub const FEATURES: &[FeatureInfo] = &[
    f("com.delphix:async_destroy", "async_destroy", RO, &[]),
    f("com.delphix:empty_bpobj", "empty_bpobj", RO, &[]),
    f("org.illumos:lz4_compress", "lz4_compress", ON_ENABLE, &[]),
    f("com.joyent:multi_vdev_crash_dump", "multi_vdev_crash_dump", 0, &[]),
    f("com.delphix:spacemap_histogram", "spacemap_histogram", RO, &[]),
    f("com.delphix:enabled_txg", "enabled_txg", RO, &[]),
    f("com.delphix:hole_birth", "hole_birth", MOS | ON_ENABLE, &["com.delphix:enabled_txg"]),
    f("com.delphix:zpool_checkpoint", "zpool_checkpoint", RO, &[]),
    f("com.delphix:spacemap_v2", "spacemap_v2", RO | ON_ENABLE, &[]),
    f(EXT, "extensible_dataset", 0, &[]),
    f(BOOKMARKS, "bookmarks", RO, &[EXT]),
    f("com.joyent:filesystem_limits", "filesystem_limits", RO, &[EXT]),
    f("com.delphix:embedded_data", "embedded_data", MOS | ON_ENABLE, &[]),
    f("com.delphix:livelist", "livelist", RO, &[EXT]),
    f("com.delphix:log_spacemap", "log_spacemap", RO, &["com.delphix:spacemap_v2"]),
    f("org.open-zfs:large_blocks", "large_blocks", PER_DS, &[EXT]),
    f("org.zfsonlinux:large_dnode", "large_dnode", PER_DS, &[EXT]),
    f("org.illumos:sha512", "sha512", PER_DS, &[EXT]),
    f("org.illumos:skein", "skein", PER_DS, &[EXT]),
    f("org.illumos:edonr", "edonr", PER_DS, &[EXT]),
    f("com.delphix:redaction_bookmarks", "redaction_bookmarks", 0, &[BOOKMARK_V2, EXT, BOOKMARKS]),
    f("com.delphix:redacted_datasets", "redacted_datasets", PER_DS, &[EXT]),
    f("com.delphix:bookmark_written", "bookmark_written", 0, &[BOOKMARK_V2, EXT, BOOKMARKS]),
    f("com.delphix:device_removal", "device_removal", MOS, &[]),
    f("com.delphix:obsolete_counts", "obsolete_counts", RO, &[EXT, "com.delphix:device_removal"]),
    f("org.zfsonlinux:userobj_accounting", "userobj_accounting", RO | PER_DS, &[EXT]),
    f(BOOKMARK_V2, "bookmark_v2", 0, &[EXT, BOOKMARKS]),
    f("com.datto:encryption", "encryption", PER_DS, &[EXT, BOOKMARK_V2]),
    f("org.zfsonlinux:project_quota", "project_quota", RO | PER_DS, &[EXT]),
    f("org.zfsonlinux:allocation_classes", "allocation_classes", RO, &[]),
    f("com.datto:resilver_defer", "resilver_defer", RO, &[]),
    f("org.openzfs:device_rebuild", "device_rebuild", RO, &[]),
    f("org.freebsd:zstd_compress", "zstd_compress", PER_DS, &[EXT]),
    f("org.openzfs:draid", "draid", MOS, &[]),
    // Later than 2.1.
    f("com.seagate:draid_failure_domains", "draid_failure_domains", MOS | LATER, &["org.openzfs:draid"]),
    f("org.openzfs:zilsaxattr", "zilsaxattr", RO | PER_DS | LATER, &[EXT]),
    f("com.delphix:head_errlog", "head_errlog", ON_ENABLE | LATER, &[]),
    f("org.openzfs:blake3", "blake3", PER_DS | LATER, &[EXT]),
    f("com.fudosecurity:block_cloning", "block_cloning", RO | LATER, &[]),
    f("com.truenas:block_cloning_endian", "block_cloning_endian", RO | LATER, &[]),
    f("com.klarasystems:vdev_zaps_v2", "vdev_zaps_v2", MOS | LATER, &[]),
    f("com.delphix:redaction_list_spill", "redaction_list_spill", LATER, &["com.delphix:redaction_bookmarks"]),
    f("org.openzfs:raidz_expansion", "raidz_expansion", MOS | LATER, &[]),
    f("com.klarasystems:fast_dedup", "fast_dedup", RO | LATER, &[]),
    f("org.zfsonlinux:longname", "longname", PER_DS | LATER, &[EXT]),
    f("com.klarasystems:large_microzap", "large_microzap", RO | PER_DS | LATER, &[EXT, "org.open-zfs:large_blocks"]),
    f("com.klarasystems:dynamic_gang_header", "dynamic_gang_header", MOS | LATER, &[]),
    f("com.truenas:physical_rewrite", "physical_rewrite", RO | PER_DS | LATER, &[EXT]),
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
    // dRAID vdevs are read (vdev::draid); a pool with them imports read-only.
    "org.openzfs:draid",
    "org.freebsd:zstd_compress",
    "org.openzfs:zilsaxattr",
    "com.delphix:head_errlog",
    "org.openzfs:blake3",
    "com.fudosecurity:block_cloning",
    "com.klarasystems:vdev_zaps_v2",
    // Encrypted datasets: their metadata can be traversed without keys; their blocks are read
    // once `zfs load-key` has loaded their keys (oxzfs does not write them).
    "com.datto:encryption",
];

/// The feature with this guid ("com.delphix:hole_birth").
pub fn lookup(guid: &str) -> Option<&'static FeatureInfo> {
    FEATURES.iter().find(|f| f.guid == guid)
}

/// The feature with this short name ("hole_birth").
pub fn lookup_name(name: &str) -> Option<&'static FeatureInfo> {
    FEATURES.iter().find(|f| f.name == name)
}

/// Whether this reader understands the on-disk changes of feature `guid`.
pub fn read_supported(guid: &str) -> bool {
    READ_SUPPORTED.contains(&guid)
}

/// The feature whose use a block's checksum function counts (zio_checksum_to_feature).
pub fn checksum_feature(c: u8) -> Option<&'static str> {
    use crate::checksum as ck;
    match c {
        ck::ZIO_CHECKSUM_SHA512 => Some("org.illumos:sha512"),
        ck::ZIO_CHECKSUM_SKEIN => Some("org.illumos:skein"),
        ck::ZIO_CHECKSUM_EDONR => Some("org.illumos:edonr"),
        ck::ZIO_CHECKSUM_BLAKE3 => Some("org.openzfs:blake3"),
        _ => None,
    }
}

/// The feature a compression function needs per dataset (zio_compress_to_feature).
pub fn compress_feature(c: u8) -> Option<&'static str> {
    (c == crate::compress::ZIO_COMPRESS_ZSTD).then_some("org.freebsd:zstd_compress")
}

#[cfg(test)]
mod tests {
    #[test]
    fn supported_features_are_known() {
        for g in super::READ_SUPPORTED {
            assert!(super::lookup(g).is_some(), "{g}");
        }
        // A layout oxzfs does not read (raidz expansion) stays out.
        assert!(!super::READ_SUPPORTED.contains(&"org.openzfs:raidz_expansion"));
    }

    #[test]
    fn table_is_consistent() {
        use super::*;
        let mut guids = std::collections::BTreeSet::new();
        for f in FEATURES {
            assert!(guids.insert(f.guid), "duplicate {}", f.guid);
            assert!(f.guid.contains(':') && f.guid.ends_with(f.name), "{}", f.guid);
            for d in f.deps {
                let dep = lookup(d).unwrap_or_else(|| panic!("{} depends on unknown {d}", f.guid));
                // A 2.1 feature depends only on 2.1 features.
                assert!(!f.in_2_1 || dep.in_2_1, "{} -> {d}", f.guid);
            }
        }
        // OpenZFS 2.1 has 34 features (SPA_FEATURES).
        assert_eq!(FEATURES.iter().filter(|f| f.in_2_1).count(), 34);
        let hb = lookup("com.delphix:hole_birth").unwrap();
        assert!(!hb.readonly_compat && hb.mos && hb.activate_on_enable);
        assert_eq!(hb.deps, &["com.delphix:enabled_txg"]);
        assert!(lookup("com.delphix:log_spacemap").unwrap().readonly_compat);
        assert!(lookup_name("longname").unwrap().guid == "org.zfsonlinux:longname");
        assert!(read_supported("com.delphix:embedded_data"));
    }
}
