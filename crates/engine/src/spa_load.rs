//! spa_load: opening a scanned pool — the MOS read for the checksum salt, the authoritative
//! config and each top-level vdev's allocation class, the pool version and the features a
//! reader must know checked before anything is used (spa_load in OpenZFS's spa.c). Sits above
//! dmu and zap, which it reads the MOS with; `spa` below holds the opened pool's handle.

use crate::spa_feature::supported_feature;
use crate::dmu::Objset;
use crate::spa::{root_state, PoolCandidate, Spa, SPA_VERSION_FEATURES};
use crate::vdev::{open_device, DeviceMap, Vdev, VdevKind, VdevState};
use oxzfs_format::dsl::{DMU_POOL_ERRLOG_LAST, DMU_POOL_ERRLOG_SCRUB, DslScanPhys, DMU_POOL_SCAN};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::nvlist::NvList;
use oxzfs_format::spacemap::{decode_entries, SmEntry, SpaceMapPhys};
use std::sync::Arc;

use crate::dbuf::{ObjsetW, OsProps};
use crate::dsl_pool::PoolW;
use crate::metaslab::Metaslabs;
use oxzfs_format::dsl::DslDirPhys;

impl Spa {
    /// Open a scanned pool read-only: pick the uberblock, open the MOS, check features.
    pub fn open(cand: &PoolCandidate, readonly: bool, arc_max: u64) -> Result<Arc<Spa>> {
        if !readonly {
            return Self::open_rw(cand, arc_max);
        }
        Self::open_impl(cand, readonly, arc_max)
    }

    fn open_impl(cand: &PoolCandidate, readonly: bool, arc_max: u64) -> Result<Arc<Spa>> {
        if let Some(p) = cand.problems.iter().find(|p| p.contains("unsupported vdev type")) {
            let what = p.rsplit("unsupported: ").next().unwrap_or(p);
            return Err(ZfsError::Unsupported(format!("cannot import '{}': {what}", cand.name)));
        }
        // A top-level vdev the labels do not show may be a log device (its label is on it
        // alone): the MOS config, read below, says; until then a pool short of one is only
        // suspect. Its MOS is never on a log device.
        let unavailable = |names: &[String]| {
            ZfsError::Unavailable(format!(
                "cannot import '{}': one or more devices is currently unavailable (missing: {})",
                cand.name,
                names.join(", ")
            ))
        };
        let label_names: Vec<String> = cand.missing.iter().map(|(_, p)| p.clone()).collect();
        let short = root_state(&cand.root) == VdevState::Unavail;
        if short && cand.root.children.iter().any(|t| !t.is_missing_top() && matches!(t.state(), VdevState::Unavail | VdevState::Removed)) {
            return Err(unavailable(&label_names));
        }
        let ub = cand
            .uberblock
            .clone()
            .ok_or_else(|| ZfsError::Unavailable(format!("cannot import '{}': no valid uberblock found", cand.name)))?;
        let rootbp = BlockPointer::decode(&ub.rootbp_raw, ub.little_endian)
            .map_err(|e| ZfsError::corrupt(format!("pool '{}' uberblock txg {} root bp", cand.name, ub.txg), e))?;
        let version = cand.config.get_u64("version").unwrap_or(0);
        // SPA_VERSION_IS_SUPPORTED: the legacy versions 1-28 and 5000 (feature flags).
        if !((1..=28).contains(&version) || version == SPA_VERSION_FEATURES) {
            return Err(ZfsError::Unsupported(format!(
                "cannot import '{}': pool is formatted using an unsupported ZFS version (version {version})",
                cand.name
            )));
        }
        let build = |config: NvList, root: Arc<Vdev>, salt: [u8; 32], arc_max: u64| {
            Spa::new(&cand.name, cand.guid, config, root, ub.clone(), rootbp.clone(), version, readonly, salt, cand.devices.clone(), arc_max)
        };
        // First pass: the vdev tree from the labels, to read the salt and the MOS copy of the config.
        let spa0 = Arc::new(build(cand.config.clone(), cand.root.clone(), [0u8; 32], 16 << 20));
        let mos0 = Objset::open(&spa0, &spa0.rootbp).map_err(|e| {
            if short {
                unavailable(&label_names)
            } else {
                ZfsError::Unavailable(format!("cannot import '{}': cannot open the MOS: {e}", spa0.name))
            }
        })?;
        let mut salt = [0u8; 32];
        if let Ok(Some(s)) = crate::zap::zap_lookup(&mos0, 1, b"org.illumos:checksum_salt") {
            let n = s.value.len().min(32);
            salt[..n].copy_from_slice(&s.value[..n]);
        }
        let mut config = cand.config.clone();
        let mut root = cand.root.clone();
        if let Some(mut cfg) = read_mos_config(&mos0) {
            add_alloc_bias(&mos0, &mut cfg);
            if let Some(tree) = cfg.get_nvlist("vdev_tree") {
                if let Ok(r) = Vdev::from_config(tree, &cand.devices, 0) {
                    if r.children.len() >= root.children.len() {
                        root = r;
                    }
                }
            }
            config = cfg;
        }
        // The candidate's name is the one to import under (`zpool import POOL NEWNAME` renames
        // the candidate; the new name reaches the labels and the MOS config at the first sync).
        if config.get_str("name") != Some(cand.name.as_str()) {
            config.add_str("name", &cand.name);
        }
        drop(mos0);
        drop(spa0);
        check_missing(&cand.name, &root, &label_names, cand.missing_log_ok)?;
        let spa = Arc::new(build(config, root, salt, arc_max));
        let mos = Objset::open(&spa, &spa.rootbp)
            .map_err(|e| ZfsError::Unavailable(format!("cannot import '{}': cannot open the MOS: {e}", spa.name)))?;
        // Removed vdevs' mappings first: any later read may go through them.
        if let Err(e) = crate::vdev_removal::load_indirect_mappings(&mos, &spa.root_vdev, &spa.name) {
            spa.close();
            return Err(ZfsError::Unavailable(format!("cannot import '{}': {e}", spa.name)));
        }
        *spa.mos.lock().unwrap() = Some((mos.bp.clone(), mos.phys.clone()));
        // The scan's state (dsl_scan_init): a paused or finished scrub shows in status.
        let scan = crate::zap::zap_lookup(&mos, 1, DMU_POOL_SCAN.as_bytes()).ok().flatten().and_then(|e| DslScanPhys::from_words(&e.value_u64s()).ok());
        let queue_obj = scan.as_ref().map_or(0, |p| p.queue_obj);
        spa.scan.load(scan, crate::dsl_scan::now());
        if queue_obj != 0 {
            // The datasets the walk has still to visit (scan_ds_queue_load).
            let entries = crate::zap::zap_list_u64(&mos, queue_obj).unwrap_or_default();
            spa.scan.lock().queue = entries.iter().filter_map(|(n, txg)| u64::from_str_radix(n.trim_end_matches(char::from(0)), 16).ok().map(|ds| (ds, *txg))).collect();
        }
        // The error log (spa_load: errlog_last, errlog_scrub).
        let log = |name: &str| -> (u64, std::collections::BTreeSet<crate::spa_errlog::Bookmark>) {
            let obj = crate::zap::zap_lookup_u64(&mos, 1, name).ok().flatten().unwrap_or(0);
            let entries = if obj == 0 { Vec::new() } else { crate::zap::zap_list(&mos, obj).unwrap_or_default() };
            (obj, entries.iter().filter_map(|e| crate::spa_errlog::parse_name(&String::from_utf8_lossy(&e.name))).collect())
        };
        let ((obj_last, last), (obj_scrub, scrub)) = (log(DMU_POOL_ERRLOG_LAST), log(DMU_POOL_ERRLOG_SCRUB));
        *spa.errlog.lock().unwrap_or_else(|e| e.into_inner()) = crate::spa_errlog::ErrLog::load(obj_last, last, obj_scrub, scrub);
        drop(mos);
        if let Err(e) = spa.check_features() {
            spa.close();
            return Err(e);
        }
        Ok(spa)
    }

    /// Open a scanned pool for writing (the caller, the txg engine, loads the rest).
    pub fn open_rw(cand: &PoolCandidate, arc_max: u64) -> Result<Arc<Spa>> {
        for (_, (path, _)) in cand.devices.iter() {
            if std::fs::OpenOptions::new().write(true).open(path).is_err() {
                return Err(ZfsError::Invalid(format!("cannot import '{}': {} is not writable", cand.name, path.display())));
            }
        }
        let mut devices = DeviceMap::new();
        for (g, (path, _)) in cand.devices.iter() {
            let d = open_device(path, true).map_err(|e| ZfsError::Io { device: path.display().to_string(), offset: 0, source: e })?;
            devices.insert(*g, (path.clone(), d));
        }
        // The MOS copy of the config rebuilds the tree over these writable devices.
        let c = PoolCandidate {
            name: cand.name.clone(),
            guid: cand.guid,
            txg: cand.txg,
            config: cand.config.clone(),
            devices,
            state: cand.state.clone(),
            root: cand.root.clone(),
            problems: cand.problems.clone(),
            uberblock: cand.uberblock.clone(),
            pool_state: cand.pool_state,
            missing: cand.missing.clone(),
            missing_log_ok: cand.missing_log_ok,
        };
        let spa = Self::open_impl(&c, false, arc_max)?;
        Ok(spa)
    }

    /// Features in use that a reader must understand: (guid, refcount).
    pub fn features_for_read(self: &Arc<Self>) -> Vec<(String, u64)> {
        let mos = self.mos();
        match crate::zap::zap_lookup_u64(&mos, 1, "features_for_read") {
            Ok(Some(obj)) => crate::zap::zap_list_u64(&mos, obj).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Every enabled feature with its refcount (features_for_read and features_for_write).
    pub fn features_enabled(self: &Arc<Self>) -> Vec<(String, u64)> {
        let mos = self.mos();
        let mut v = Vec::new();
        for which in ["features_for_read", "features_for_write"] {
            if let Ok(Some(obj)) = crate::zap::zap_lookup_u64(&mos, 1, which) {
                v.extend(crate::zap::zap_list_u64(&mos, obj).unwrap_or_default());
            }
        }
        v
    }

    fn check_features(self: &Arc<Self>) -> Result<()> {
        let unknown: Vec<String> = self
            .features_for_read()
            .into_iter()
            .filter(|(g, refs)| *refs > 0 && !oxzfs_format::features::READ_SUPPORTED.contains(&g.as_str()))
            .map(|(g, _)| g)
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(ZfsError::Unsupported(format!(
                "cannot import '{}': pool uses the following feature(s) not supported by this system: {}",
                self.name,
                unknown.join(", ")
            )))
        }
    }
}

/// OpenZFS keeps a top-level vdev's allocation class (special, dedup, log) in the vdev's
/// own ZAP, not in the config: copy it into the in-memory config as `alloc_bias`.
fn add_alloc_bias(mos: &Objset, cfg: &mut NvList) {
    use oxzfs_format::nvlist::NvValue;
    let Some(mut tree) = cfg.get_nvlist("vdev_tree").cloned() else { return };
    let Some(mut tops) = tree.get_nvlist_array("children").map(|a| a.to_vec()) else { return };
    for t in tops.iter_mut() {
        let Some(z) = t.get_u64("com.delphix:vdev_zap_top") else { continue };
        if let Ok(Some(e)) = crate::zap::zap_lookup(mos, z, b"org.zfsonlinux:allocation_bias") {
            let b = e.value.split(|&c| c == 0).next().unwrap_or(&[]);
            t.add_str("alloc_bias", &String::from_utf8_lossy(b));
        }
    }
    tree.insert("children", NvValue::NvListArray(tops));
    cfg.add_nvlist("vdev_tree", tree);
}

/// A packed nvlist object named `key` in the MOS object directory ("config", "l2cache",
/// "spares"): its size is the u64 in the dnode's bonus.
pub fn read_mos_packed(mos: &Objset, key: &str) -> Option<NvList> {
    let obj = crate::zap::zap_lookup_u64(mos, 1, key).ok()??;
    let (dn, le) = mos.dnode_with_order(obj).ok()?;
    let b: [u8; 8] = dn.bonus.get(..8)?.try_into().ok()?;
    let size = if le { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) };
    if size == 0 || size > (16 << 20) {
        return None;
    }
    let bytes = mos.read(&dn, 0, size).ok()?;
    NvList::decode_packed(&bytes).ok()
}

/// The MOS `config` object.
fn read_mos_config(mos: &Objset) -> Option<NvList> {
    read_mos_packed(mos, "config")
}

/// The pool's tree as the MOS config has it, checked for missing devices (spa_load's
/// guid-sum check and spa_check_for_missing_logs): a missing data vdev makes the pool
/// unavailable; a missing log device too, unless `zpool import -m` accepts losing the logs.
fn check_missing(pool: &str, root: &Vdev, label_names: &[String], missing_log_ok: bool) -> Result<()> {
    let missing_leaves = |v: &Vdev| -> Vec<String> {
        v.leaves().iter().filter(|l| l.dev.is_none()).map(|l| l.path.clone().unwrap_or_else(|| l.guid.to_string())).collect()
    };
    let lost_data = root.children.iter().any(|t| t.is_missing_top() || (!t.is_log && matches!(t.state(), VdevState::Unavail | VdevState::Removed)));
    if lost_data {
        let mut names = missing_leaves(root);
        if names.is_empty() {
            names = label_names.to_vec();
        }
        return Err(ZfsError::Unavailable(format!("cannot import '{pool}': one or more devices is currently unavailable (missing: {})", names.join(", "))));
    }
    let logs: Vec<&Arc<Vdev>> = root.children.iter().filter(|t| t.is_log && matches!(t.state(), VdevState::Unavail | VdevState::Removed)).collect();
    if logs.is_empty() || missing_log_ok {
        return Ok(());
    }
    // zpool_import_props on ENXIO with the load info's missing devices (print_vdev_tree).
    let mut text = String::from("The devices below are missing or corrupted, use '-m' to import the pool anyway:\n");
    for t in logs {
        text.push_str(&format!("\t    {} [log]\n", t.display_name()));
        if !t.children.is_empty() {
            for l in &t.children {
                text.push_str(&format!("\t      {}\n", l.display_name()));
            }
        }
    }
    text.push_str(&format!("\ncannot import '{pool}': one or more devices is currently unavailable"));
    Err(ZfsError::Unavailable(text))
}

impl PoolW {
    /// Import a scanned pool read-write: open the MOS for writing and load the metaslabs.
    pub fn open(cand: &PoolCandidate, arc_max: u64, hostname: &str) -> Result<PoolW> {
        let spa = Spa::open_rw(cand, arc_max)?;
        let version = spa.version();
        // The first sync rewrites the labels and the MOS config (spa_load's need_update for an
        // import, SPA_ASYNC_CONFIG_UPDATE): the labels say POOL_STATE_ACTIVE again, so that a
        // device of an imported pool is "part of active pool", and a new name is taken.
        let mos = ObjsetW::open(&spa, 0, &spa.rootbp, OsProps::default())?;
        // The metaslab geometry the allocator is cut to, before it is (see metaslab_count).
        for top in spa.root_vdev.children.iter().filter(|t| t.is_concrete() && t.metaslab_shift != 0) {
            metaslab_count(top).map_err(|e| ZfsError::Invalid(format!("cannot import '{}' read-write: {e}", spa.name)))?;
        }
        let mut pw = PoolW::new(spa.clone(), mos, Metaslabs::new_pool(&spa.root_vdev), spa.uberblock.txg + 1, version, hostname, spa.config.clone());
        pw.config_dirty = true;
        pw.check_writable()?;
        // A condense OpenZFS left under way is finished by the first txg (vdev_indirect).
        // A damaged one refuses the import here rather than failing that txg.
        if let Some(scip) = pw.condensing_phys()? {
            pw.condense_read(scip)?;
        }
        pw.load_features()?;
        pw.ms.lock().obsolete_counts = pw.feature_enabled(crate::vdev_removal::OBSOLETE_COUNTS);
        pw.load_metaslabs()?;
        // Changes only in OpenZFS's log space maps: into the metaslabs, flushed by the first txg.
        pw.replay_log_spacemaps()?;
        pw.load_removal()?;
        if let Err(e) = pw.ms.lock().check_mappings() {
            return Err(ZfsError::Invalid(format!("cannot import '{}' read-write: {e}", spa.name)));
        }
        pw.dtl_load()?;
        // A log device imported missing (`-m`) takes no log blocks: they go to the pool.
        for t in spa.root_vdev.children.iter().filter(|t| t.is_log && matches!(t.state(), VdevState::Unavail | VdevState::Removed)) {
            pw.ms.lock().retire_group(t.id);
        }
        pw.ddt = crate::ddt::Ddt::load(&mut pw.mos)?;
        let root_dir = pw.mos.zap_lookup(1, "root_dataset")?.ok_or_else(|| ZfsError::Invalid("no root_dataset".into()))?;
        let rd = DslDirPhys::decode(&pw.mos.bonus(root_dir)?, true).map_err(|e| ZfsError::corrupt("root dir".to_string(), e))?;
        pw.mos_dir = pw.mos.zap_lookup(rd.child_dir_zapobj, "$MOS")?.unwrap_or(0);
        Ok(pw)
    }

    pub(crate) fn check_writable(&mut self) -> Result<()> {
        // A mirror or raidz inside a top-level mirror or raidz (only ztest makes them): our
        // writes size and place blocks for the top-level vdev's own kind, which such a tree
        // does not read back.
        fn nested(v: &Vdev) -> bool {
            v.children.iter().any(|c| matches!(c.kind, VdevKind::Mirror | VdevKind::Raidz { .. }) || nested(c))
        }
        if let Some(top) = self.spa.root_vdev.children.iter().find(|t| matches!(t.kind, VdevKind::Draid(_))) {
            return Err(ZfsError::Unsupported(format!(
                "cannot import '{}' read-write: top-level vdev {} is dRAID, which oxzfs reads but does not write (import with -o readonly=on)",
                self.spa.name,
                top.display_name()
            )));
        }
        if let Some(top) = self.spa.root_vdev.children.iter().find(|t| nested(t)) {
            return Err(ZfsError::Unsupported(format!(
                "cannot import '{}' read-write: top-level vdev {} has a mirror or raidz inside it, a layout oxzfs does not write (import with -o readonly=on)",
                self.spa.name, top.id
            )));
        }
        // Every feature active for write must be one we keep.
        if self.version < SPA_VERSION_FEATURES {
            return Ok(());
        }
        for which in ["features_for_read", "features_for_write"] {
            let Some(obj) = self.mos.zap_lookup(1, which)? else { continue };
            let z = self.mos.zap(obj)?.clone();
            for (k, (_, v)) in &z.entries {
                let name = String::from_utf8_lossy(k).into_owned();
                let refs = v.first().copied().unwrap_or(0);
                if refs > 0 && supported_feature(&name).is_none() && !crate::spa_feature::LEFT_ALONE_FEATURES.contains(&name.as_str()) {
                    return Err(ZfsError::Unsupported(format!(
                        "cannot import '{}' read-write: feature {name} is active and not supported for writing by oxzfs (import with -o readonly=on)",
                        self.spa.name
                    )));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn load_features(&mut self) -> Result<()> {
        if self.version < SPA_VERSION_FEATURES {
            return Ok(());
        }
        let fr = self.mos.zap_lookup(1, "features_for_read")?.unwrap_or(0);
        let fw = self.mos.zap_lookup(1, "features_for_write")?.unwrap_or(0);
        for (obj, read) in [(fr, true), (fw, false)] {
            if obj == 0 {
                continue;
            }
            let z = self.mos.zap(obj)?.clone();
            for (k, (_, v)) in z.entries {
                self.features.insert(String::from_utf8_lossy(&k).into_owned(), (v.first().copied().unwrap_or(0), read));
            }
        }
        self.feature_objs = Some((fr, fw));
        Ok(())
    }

    /// Every top-level vdev's metaslabs from their space maps (vdev_metaslab_init and
    /// metaslab_load at a read-write import). A metaslab array, metaslab count or space map
    /// that contradicts itself refuses the import, naming what is wrong; nothing is written.
    pub(crate) fn load_metaslabs(&mut self) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        let pool = self.spa.name.clone();
        let bad = |what: String| ZfsError::Invalid(format!("cannot import '{pool}' read-write: {what}"));
        // Each space map belongs to one metaslab (two writing one object would corrupt it).
        let mut owner: std::collections::HashMap<u64, (u64, usize)> = std::collections::HashMap::new();
        for top in &root.children {
            self.ms_arrays.push(top.metaslab_array);
            if top.metaslab_array == 0 {
                continue;
            }
            let count = metaslab_count(top).map_err(bad)?;
            let arr = self.mos.read(top.metaslab_array, 0, (count * 8) as usize)?;
            for (ms, w) in arr.chunks_exact(8).enumerate() {
                let sm = u64::from_le_bytes(w.try_into().expect("8"));
                if sm == 0 {
                    continue;
                }
                let name = format!("vdev {} metaslab {ms} (space map object {sm})", top.id);
                if let Some((v, m)) = owner.insert(sm, (top.id, ms)) {
                    return Err(bad(format!("{name}: the object is vdev {v} metaslab {m}'s space map as well")));
                }
                let (phys, entries) = self.read_space_map(sm, &|e| bad(format!("{name}: {e}")))?;
                self.ms.lock().load(top.id, ms as u64, sm, phys, &entries).map_err(bad)?;
            }
        }
        Ok(())
    }
}

impl PoolW {
    /// For tests of damaged pools only (`oxzfs debug`): one sector the first metaslab's space
    /// map holds allocated is allocated again in an entry of the next sync, which is made; the
    /// space map stays checksummed right and contradicts itself. Says what was written.
    pub fn damage_space_map_for_test(&mut self) -> Result<String> {
        let txg = self.txg;
        let hit = self.ms.lock().allocate_again_for_test(txg);
        let Some((vdev, ms, sm, at, len)) = hit else { return Err(ZfsError::Invalid("no metaslab has a space map with allocated space".into())) };
        self.sync()?;
        Ok(format!("vdev {vdev} metaslab {ms} (space map object {sm}): {at:#x}+{len:#x} allocated again"))
    }
}

impl PoolW {
    /// Space map `sm` of the MOS: its header and entries, refused (by `bad`, told what is
    /// wrong) when the object is no space map or its header claims entries the object does
    /// not hold.
    pub(crate) fn read_space_map(&mut self, sm: u64, bad: &dyn Fn(String) -> ZfsError) -> Result<(SpaceMapPhys, Vec<SmEntry>)> {
        let dn = self.mos.dnode(sm)?;
        if dn.typ != oxzfs_format::types::DMU_OT_SPACE_MAP {
            return Err(bad(format!("the object is of type {}, not a space map", dn.typ)));
        }
        let phys = SpaceMapPhys::decode(&dn.bonus, true).map_err(|e| bad(e.to_string()))?;
        let held = (dn.maxblkid + 1).saturating_mul(dn.data_block_size());
        if phys.length % 8 != 0 || phys.length > held {
            return Err(bad(format!("the header says {} bytes of entries, the object holds {held}", phys.length)));
        }
        let words = self.mos.read(sm, 0, phys.length as usize)?;
        let entries = decode_entries(&words, true).map_err(|e| bad(e.to_string()))?;
        Ok((phys, entries))
    }
}

/// The metaslab count of top-level vdev `top` (asize >> metaslab_shift), refused when its
/// config's metaslab shift cannot be: below the sector size or the smallest shift any ZFS
/// chose (2^17), 64 or more, or a count past what any pool holds (2^20: OpenZFS aims at 200
/// per vdev and caps new vdevs at 2^17).
pub(crate) fn metaslab_count(top: &Vdev) -> std::result::Result<u64, String> {
    let shift = top.metaslab_shift;
    if shift < MIN_MS_SHIFT.max(top.ashift as u64) || shift >= 64 {
        return Err(format!("vdev {} has metaslab shift {shift}", top.id));
    }
    let count = top.asize >> shift;
    if count > MAX_MS_COUNT {
        return Err(format!("vdev {} has {count} metaslabs of 2^{shift} bytes, more than {MAX_MS_COUNT}", top.id));
    }
    Ok(count)
}

/// The smallest metaslab shift (the first pools' SPA_MAXBLOCKSHIFT, 128K).
const MIN_MS_SHIFT: u64 = 17;
/// The most metaslabs a top-level vdev may have.
const MAX_MS_COUNT: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    /// A metaslab shift below a sector or 2^17, of 64 or more, or a count past 2^20 metaslabs
    /// is refused by name; what pools have passes.
    #[test]
    fn metaslab_geometry_no_pool_has_is_refused() {
        let count = |ashift: u8, asize: u64, shift: u64| {
            let mut v = crate::vdev::test_node(2, VdevKind::Mirror, ashift, None, Vec::new());
            (v.asize, v.metaslab_shift) = (asize, shift);
            metaslab_count(&v)
        };
        assert_eq!(count(9, 64 << 20, 24), Ok(4));
        assert_eq!(count(12, 1 << 40, 34), Ok(64));
        assert_eq!(count(9, 1 << 20, 17), Ok(8));
        for (ashift, asize, shift, want) in [(9, 64 << 20, 0, "vdev 2 has metaslab shift 0"), (9, 1 << 20, 16, "shift 16"), (9, 1 << 20, 64, "shift 64"), (18, 1 << 30, 17, "shift 17"), (9, 1 << 40, 17, "vdev 2 has 8388608 metaslabs of 2^17 bytes, more than 1048576")] {
            let err = count(ashift, asize, shift).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }
}
