//! spa_feature: the feature flags of a version-5000 pool — the table of what oxzfs enables at
//! create, and the refcounts in the MOS's features_for_read/write objects, per-dataset
//! activation (a dataset's ZAP of features it uses) and enabled_txg (zfeature.c and
//! spa_feature_* in OpenZFS).

use crate::spa::SPA_VERSION_FEATURES;
use crate::dbuf::rand_u64;
use crate::dsl_pool::PoolW;
use crate::{Result, ZfsError};
use oxzfs_format::types;

/// Features a new version-5000 pool gets enabled: those whose on-disk effects oxzfs keeps, in
/// OpenZFS's feature order (spa_feature_t), the order `zpool create` enables them in — which
/// decides the ones enabled_txg records (those after it).
/// (guid, name, for-read, description, active on enable)
pub const DEFAULT_FEATURES: &[(&str, &str, bool, &str, bool)] = &[
    ("com.delphix:async_destroy", "async_destroy", false, "Destroy filesystems asynchronously.", false),
    ("com.delphix:empty_bpobj", "empty_bpobj", false, "Snapshots use less space.", false),
    ("org.illumos:lz4_compress", "lz4_compress", true, "LZ4 compression algorithm support.", true),
    ("com.joyent:multi_vdev_crash_dump", "multi_vdev_crash_dump", true, "Crash dumps to multiple vdev pools.", false),
    ("com.delphix:spacemap_histogram", "spacemap_histogram", false, "Spacemaps maintain space histograms.", false),
    ("com.delphix:enabled_txg", "enabled_txg", false, "Record txg at which a feature is enabled", false),
    ("com.delphix:hole_birth", "hole_birth", true, "Retain hole birth txg for more precise zfs send", true),
    ("com.delphix:extensible_dataset", "extensible_dataset", true, "Enhanced dataset functionality, used by other features.", false),
    ("com.delphix:embedded_data", "embedded_data", true, "Blocks which compress very well use even less space.", true),
    ("com.delphix:bookmarks", "bookmarks", false, "\"zfs bookmark\" command", false),
    ("org.open-zfs:large_blocks", "large_blocks", true, "Support for blocks larger than 128KB.", false),
    ("org.zfsonlinux:large_dnode", "large_dnode", true, "Variable on-disk size of dnodes.", false),
    ("org.illumos:sha512", "sha512", true, "SHA-512/256 hash algorithm.", false),
    ("org.illumos:skein", "skein", true, "Skein hash algorithm.", false),
    ("org.illumos:edonr", "edonr", true, "Edon-R hash algorithm.", false),
    ("com.delphix:device_removal", "device_removal", true, "Top-level vdevs can be removed, reducing logical pool size.", false),
    ("com.delphix:obsolete_counts", "obsolete_counts", false, "Reduce memory used by removed devices when their blocks are freed or remapped.", false),
    ("com.delphix:spacemap_v2", "spacemap_v2", false, "Space maps representing large segments are more efficient.", true),
    ("org.zfsonlinux:allocation_classes", "allocation_classes", false, "Support for separate allocation classes.", false),
    ("org.openzfs:device_rebuild", "device_rebuild", false, "Support for sequential mirror/dRAID device rebuilds", false),
    ("org.freebsd:zstd_compress", "zstd_compress", true, "zstd compression algorithm support.", false),
];

/// Features oxzfs implements but leaves disabled on new pools: blake3 because OpenZFS 2.1
/// (whose zdb checks our pools) does not know it; log_spacemap because oxzfs writes no log
/// space maps (it replays and retires OpenZFS's at a read-write import, spa_log_spacemap, so a
/// pool with it active imports read-write); userobj_accounting and project_quota because oxzfs
/// keeps their counts (dmu_userused) but never marks a file system's counts complete, which
/// would activate them for it: OpenZFS does that at its first mount of the file system
/// (dmu_objset_id_quota_upgrade). Enabled with `-o feature@NAME=enabled` at create or
/// `zpool set feature@NAME=enabled`. Same shape as [`DEFAULT_FEATURES`].
pub const OPTIONAL_FEATURES: &[(&str, &str, bool, &str, bool)] = &[
    ("org.zfsonlinux:userobj_accounting", "userobj_accounting", false, "User/Group object accounting.", false),
    ("org.zfsonlinux:project_quota", "project_quota", false, "space/object accounting based on project ID.", false),
    ("org.openzfs:blake3", "blake3", true, "BLAKE3 hash algorithm.", false),
    ("com.delphix:log_spacemap", "log_spacemap", false, "Log metaslab changes on a single spacemap and flush them periodically.", false),
];

/// Features a pool may have active and still import read-write, though oxzfs neither enables
/// nor writes them: the datasets that use them are left as they are (encryption: an encrypted
/// dataset is read with its key loaded, and every change to one is refused, `dsl_crypt`).
pub const LEFT_ALONE_FEATURES: &[&str] = &["com.datto:encryption"];

/// The row of a feature oxzfs can enable, by guid or short name.
pub fn supported_feature(key: &str) -> Option<&'static (&'static str, &'static str, bool, &'static str, bool)> {
    DEFAULT_FEATURES.iter().chain(OPTIONAL_FEATURES).find(|f| f.0 == key || f.1 == key)
}

pub(crate) const ENABLED_TXG: &str = "com.delphix:enabled_txg";

pub(crate) const EXTENSIBLE_DATASET: &str = "com.delphix:extensible_dataset";

impl PoolW {
    pub fn feature_enabled(&self, guid: &str) -> bool {
        self.features.contains_key(guid)
    }

    /// Change a feature's refcount in features_for_read/write.
    pub fn feature_incr(&mut self, guid: &str, by: i64) -> Result<()> {
        let Some((fr, fw)) = self.feature_objs else { return Ok(()) };
        let Some(&(refs, read)) = self.features.get(guid) else {
            return Err(ZfsError::Invalid(format!("feature {guid} is not enabled")));
        };
        let n = (refs as i64 + by).max(0) as u64;
        self.features.insert(guid.to_string(), (n, read));
        if (refs == 0) != (n == 0) && oxzfs_format::features::lookup(guid).is_some_and(|f| f.mos) {
            self.config_dirty = true; // spa_activate/deactivate_mos_feature: the label lists it
        }
        let obj = if read { fr } else { fw };
        self.mos.zap_add_u64(obj, guid, n)?;
        Ok(())
    }

    /// spa_feature_enable (feature_enable_sync): enable feature `guid` in the open txg after
    /// its dependencies — its description, its count (1 when active on enable) in
    /// features_for_read/write, and, once enabled_txg is enabled, the txg in the MOS's
    /// feature_enabled_txg ZAP (enabled_txg counting one more). Enabling it twice does nothing.
    pub fn feature_enable(&mut self, guid: &str) -> Result<()> {
        if self.features.contains_key(guid) {
            return Ok(());
        }
        let Some(&(_, name, read, desc, active)) = supported_feature(guid) else {
            return Err(ZfsError::Unsupported(format!("feature '{guid}' unsupported by oxzfs")));
        };
        let Some((fr, fw)) = self.feature_objs else {
            return Err(ZfsError::Unsupported(format!("pool must be upgraded to enable feature '{name}'")));
        };
        let info = oxzfs_format::features::lookup(guid).ok_or_else(|| ZfsError::Invalid(format!("unknown feature {guid}")))?;
        for dep in info.deps {
            self.feature_enable(dep)?;
        }
        let fd = match self.mos.zap_lookup(1, "feature_descriptions")? {
            Some(o) => o,
            None => return Err(ZfsError::Invalid("no feature_descriptions object".into())),
        };
        let mut d: Vec<u64> = desc.bytes().map(u64::from).collect();
        d.push(0);
        self.mos.zap_mut(fd)?.entries.insert(guid.as_bytes().to_vec(), (1, d));
        let refs = u64::from(active);
        self.features.insert(guid.to_string(), (refs, read));
        self.mos.zap_add_u64(if read { fr } else { fw }, guid, refs)?;
        if active && info.mos {
            self.config_dirty = true; // the label's features_for_read lists it
        }
        if self.features.contains_key(ENABLED_TXG) {
            let obj = match self.mos.zap_lookup(1, "feature_enabled_txg")? {
                Some(o) => o,
                None => {
                    let o = self.mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
                    self.mos.zap_add_u64(1, "feature_enabled_txg", o)?;
                    o
                }
            };
            self.feature_incr(ENABLED_TXG, 1)?;
            let txg = self.txg;
            self.mos.zap_add_u64(obj, guid, txg)?;
        }
        Ok(())
    }

    /// Whether feature `guid` is active (enabled with a non-zero count).
    pub fn feature_active(&self, guid: &str) -> bool {
        self.features.get(guid).is_some_and(|f| f.0 > 0)
    }

    /// Per-dataset features of dataset `dsobj` (the guids in its ZAP, once it is zapified).
    pub fn ds_features(&mut self, dsobj: u64) -> Result<Vec<String>> {
        if self.mos.dnode(dsobj)?.typ != types::DMU_OTN_ZAP_METADATA {
            return Ok(Vec::new());
        }
        let z = self.mos.zap(dsobj)?;
        Ok(z.entries.keys().map(|k| String::from_utf8_lossy(k).into_owned()).filter(|k| oxzfs_format::features::lookup(k).is_some_and(|f| f.per_dataset)).collect())
    }

    /// dsl_dataset_activate_feature: count per-dataset feature `guid` as used by dataset
    /// `dsobj` — the dataset object becomes a ZAP (dmu_object_zapify, counted by
    /// extensible_dataset) holding `guid` = 0, and the pool's refcount goes up by one. Already
    /// active on the dataset: nothing changes.
    pub fn ds_feature_activate(&mut self, dsobj: u64, guid: &str) -> Result<()> {
        if self.version < SPA_VERSION_FEATURES || self.ds_features(dsobj)?.iter().any(|g| g == guid) {
            return Ok(());
        }
        if !self.features.contains_key(guid) {
            return Err(ZfsError::Unsupported(format!("feature {guid} is not enabled")));
        }
        self.feature_incr(guid, 1)?;
        self.zapify_dataset(dsobj)?;
        self.mos.zap_add_u64(dsobj, guid, 0)
    }

    /// dmu_objset_create_impl: a new file system keeps its object counts and projects from its
    /// first object on, so where the pool has userobj_accounting or project_quota enabled they
    /// are marked complete and the feature is active for the dataset (its quotas then hold).
    pub(crate) fn accounting_complete(&mut self, dsobj: u64, os: &mut crate::dbuf::ObjsetW) -> Result<()> {
        use oxzfs_format::objset::{OBJSET_FLAG_PROJECTQUOTA_COMPLETE, OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE};
        for (guid, flag) in [("org.zfsonlinux:userobj_accounting", OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE), ("org.zfsonlinux:project_quota", OBJSET_FLAG_PROJECTQUOTA_COMPLETE)] {
            if self.feature_enabled(guid) {
                os.phys.flags |= flag;
                self.ds_feature_activate(dsobj, guid)?;
            }
        }
        Ok(())
    }

    /// dsl_dataset_zapify: dataset object `dsobj` becomes a ZAP (its bonus kept), counted by
    /// extensible_dataset. Already one: nothing changes.
    pub(crate) fn zapify_dataset(&mut self, dsobj: u64) -> Result<()> {
        if self.mos.dnode(dsobj)?.typ != types::DMU_OTN_ZAP_METADATA {
            let salt = rand_u64() | 1;
            let d = self.mos.dirty_obj(dsobj)?;
            d.dn.typ = types::DMU_OTN_ZAP_METADATA;
            d.zap = Some(crate::dbuf::ZapObj { salt, ..Default::default() });
            self.feature_incr(EXTENSIBLE_DATASET, 1)?;
        }
        Ok(())
    }

    /// Before dataset `dsobj` is freed: each per-dataset feature it counts is released
    /// (dsl_dataset_deactivate_feature), and so is its extensible_dataset count
    /// (dmu_object_free_zapified).
    pub(crate) fn ds_features_release(&mut self, dsobj: u64) -> Result<()> {
        if self.version < SPA_VERSION_FEATURES {
            return Ok(());
        }
        for g in self.ds_features(dsobj)? {
            self.feature_incr(&g, -1)?;
        }
        if self.mos.dnode(dsobj)?.typ == types::DMU_OTN_ZAP_METADATA {
            self.feature_incr(EXTENSIBLE_DATASET, -1)?;
        }
        Ok(())
    }
}

impl PoolW {
    /// `zpool upgrade` of a legacy-version pool (11-28) to feature flags, as spa_upgrade and
    /// spa_sync_upgrades do it in one txg: below version 26 the `$FREE` directory, the pool's
    /// free bpobj and every origin directory's list of clones (dsl_pool_upgrade_dir_clones);
    /// then the feature objects (spa_feature_create_zap_objects) and version 5000 in the
    /// uberblock and the labels. The caller enables the features after. Versions 1-10 (no
    /// $ORIGIN: OpenZFS rewrites every clone's links first) are refused.
    pub fn upgrade_to_features(&mut self) -> Result<()> {
        let v = self.version;
        if v >= SPA_VERSION_FEATURES {
            return Ok(());
        }
        if v < 11 {
            return Err(ZfsError::Posix(libc::ENOTSUP, format!("oxzfs upgrades pools of version 11 or later (this one is version {v}); OpenZFS's zpool upgrade does")));
        }
        self.sync()?;
        let root = self.mos.zap_lookup(1, "root_dataset")?.ok_or_else(|| ZfsError::Invalid("no root_dataset".into()))?;
        let root_child = self.dir_phys(root)?.child_dir_zapobj;
        if v < crate::dsl_promote::SPA_VERSION_DIR_CLONES {
            if self.mos.zap_lookup(root_child, "$FREE")?.is_none() {
                let dd = self.mos.alloc_object(types::DMU_OT_DSL_DIR, 512, types::DMU_OT_DSL_DIR, 256, 1)?;
                let props = self.mos.create_zap(types::DMU_OT_DSL_PROPS, 0, 0, 0)?;
                let child = self.mos.create_zap(types::DMU_OT_DSL_DIR_CHILD_MAP, 0, 0, 0)?;
                let flags = if v >= 13 { oxzfs_format::dsl::DD_FLAG_USED_BREAKDOWN } else { 0 };
                let phys = oxzfs_format::dsl::DslDirPhys { creation_time: crate::dsl_pool::now(), parent_dir_obj: root, props_zapobj: props, child_dir_zapobj: child, flags, ..Default::default() };
                self.mos.set_bonus(dd, &phys.encode())?;
                self.mos.zap_add_u64(root_child, "$FREE", dd)?;
            }
            if self.mos.zap_lookup(1, "free_bpobj")?.is_none() {
                // A bpobj of the new version's layout (with sub-bpobjs), as OpenZFS allocates it
                // directly because the pool still says the old version.
                let size = crate::deadlist::bpobj_bonus_size(crate::dsl_promote::SPA_VERSION_DIR_CLONES, false);
                let o = self.mos.alloc_object(types::DMU_OT_BPOBJ, 128 << 10, types::DMU_OT_BPOBJ_HDR, size, 1)?;
                self.mos.set_bonus(o, &oxzfs_format::dsl::BpobjPhys::default().encode(size))?;
                self.mos.zap_add_u64(1, "free_bpobj", o)?;
            }
            // upgrade_dir_clones_cb: each head dataset with an origin joins the origin's
            // directory's clones.
            let mut dirs = vec![root];
            let mut seen = 0usize;
            while let Some(d) = dirs.pop() {
                seen += 1;
                if seen > 1 << 20 {
                    return Err(ZfsError::Invalid("the DSL directory tree does not end".into()));
                }
                let p = self.dir_phys(d)?;
                let children: Vec<u64> = self.mos.zap(p.child_dir_zapobj)?.entries.values().filter_map(|(_, v)| v.first().copied()).collect();
                dirs.extend(children);
                if p.head_dataset_obj == 0 || p.origin_obj == 0 {
                    continue;
                }
                let odir = self.ds_phys(p.origin_obj)?.dir_obj;
                let mut op = self.dir_phys(odir)?;
                if op.clones == 0 {
                    op.clones = self.mos.create_zap(types::DMU_OT_DSL_CLONES, 0, 0, 0)?;
                    self.mos.set_bonus(odir, &op.encode())?;
                }
                self.mos.zap_add_u64(op.clones, &format!("{:x}", p.head_dataset_obj), p.head_dataset_obj)?;
            }
        }
        let fr = self.mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
        let fw = self.mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
        let fd = self.mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
        self.mos.zap_add_u64(1, "features_for_read", fr)?;
        self.mos.zap_add_u64(1, "features_for_write", fw)?;
        self.mos.zap_add_u64(1, "feature_descriptions", fd)?;
        self.feature_objs = Some((fr, fw));
        if self.mos.zap_lookup(1, "org.illumos:checksum_salt")?.is_none() {
            let salt = self.spa.checksum_salt;
            self.mos.zap_mut(1)?.entries.insert(b"org.illumos:checksum_salt".to_vec(), (1, salt.iter().map(|&b| b as u64).collect()));
        }
        self.version = SPA_VERSION_FEATURES;
        self.config_nv.add_u64("version", SPA_VERSION_FEATURES);
        self.config_dirty = true;
        self.log_history_internal("upgrade", &format!("from={v} to={SPA_VERSION_FEATURES}"))?;
        self.sync()?;
        self.spa.set_version(SPA_VERSION_FEATURES);
        Ok(())
    }
}
