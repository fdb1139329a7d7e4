//! vdev_removal: `zpool remove` (OpenZFS's vdev_removal.c) in syncing terms — what each step
//! changes under the pool's write state; the thread that drives an evacuation over many txgs
//! is `vdev_removal_thread`'s.
//!
//! A log device (spa_vdev_remove_log) needs no evacuation: what a log device holds lives only
//! until its txg syncs. A cache device or an unused spare goes at once (spa_vdev_remove_aux:
//! the L2ARC forgets what the device holds and the pool's list loses it with the next txg).
//!
//! ```text
//!   log device:
//!   1. the device takes no more allocations; every file system's intent-log chain is dropped
//!      (its records are synced) and the txgs synced until the frees of the log blocks have
//!      left their deferral: the device holds nothing
//!   2. its space maps, metaslab array and vdev ZAPs leave the MOS; in the config the
//!      top-level vdev becomes a hole (type "hole", is_hole), keeping every other vdev's id
//!   3. the labels of its devices are cleared, the new config written with the next txg
//!
//!   data, special or dedup vdev (evacuation into an indirect vdev):
//!   start_removal   the vdev allocates nothing; empty mapping and births objects; the
//!                   config marks it removing; spa_removing_phys scanning (to_copy)
//!   removal_step    (many, each in the open txg) the next allocated ranges copied, their
//!                   mapping entries, births entry and the copied count into the MOS
//!   complete_removal  the vdev becomes indirect; spa_removing_phys finished
//!   cancel_removal  the copies freed, the objects freed, the vdev back to normal; canceled
//! ```
//!
//! While the vdev is being evacuated its frees are split at the copied offset (metaslab's
//! `Removing`): below it the copies are freed as well and the range is marked obsolete, above
//! it the space simply leaves what is to be copied and counts as copied in that txg
//! (OpenZFS's free_from_removing_vdev and svr_sync). Each step runs while no txg syncs, so a
//! copy, its entries and the frees that meet them land in the same txgs: a crash resumes from
//! the mapping on disk, with nothing leaked.
//!
//! Obsolete counts (feature obsolete_counts, on when the removal starts): the vdev's
//! top-level ZAP says `com.delphix:obsolete_counts_are_precise`; the mapping has a counts
//! object (a u32 per entry: the free gaps a step copied along, vdev_removal_max_span) and the
//! vdev an obsolete space map (`com.delphix:indirect_obsolete_sm`, ALLOC entries in bytes)
//! that every free of a copied or removed range is appended to; the two together are the
//! bytes of each entry no block references, which OpenZFS's zdb checks. Each of the three
//! takes a reference of obsolete_counts. Condensing a mapping once much of it is obsolete is
//! `vdev_indirect`'s.

use crate::dsl_pool::PoolW;
use crate::{Result, ZfsError};
use oxzfs_format::nvlist::{NvList, NvValue};

impl PoolW {
    /// Remove log top-level vdev `top` (index in the vdev tree). Its leaves' devices are
    /// returned, their labels already cleared.
    pub fn remove_log_vdev(&mut self, top: u64) -> Result<Vec<String>> {
        let name = self.spa.name.clone();
        let tv = self.spa.root_vdev.children.get(top as usize).cloned().ok_or_else(|| ZfsError::Posix(libc::ENOENT, format!("cannot remove vdev {top}: no such device in pool '{name}'")))?;
        if !tv.is_log {
            return Err(ZfsError::Posix(
                libc::ENOTSUP,
                format!("cannot remove {}: only log devices can be removed from pool '{name}' (evacuating a data device is not supported yet)", tv.display_name()),
            ));
        }
        // 1. No more allocations there; the chains dropped; three txgs for their frees.
        self.ms.lock().retire_group(top);
        self.zil_close_all();
        for _ in 0..3 {
            self.sync()?;
        }
        let (allocated, sms) = self.ms.lock().group_usage(top);
        if allocated != 0 {
            return Err(ZfsError::Posix(libc::EBUSY, format!("cannot remove {}: {allocated} bytes are still allocated on it", tv.display_name())));
        }
        // 2. Its MOS objects: space maps, the metaslab array, the vdev ZAPs.
        self.free_vdev_metaslabs(top, sms)?;
        let mut cfg = self.config_nv.clone();
        let mut tree = cfg.get_nvlist("vdev_tree").cloned().unwrap_or_default();
        let mut tops: Vec<NvList> = tree.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
        let old = tops.get(top as usize).cloned().ok_or_else(|| ZfsError::Invalid(format!("pool '{name}': vdev {top} is not in the config")))?;
        let mut zaps = Vec::new();
        collect_zaps(&old, &mut zaps);
        let avz = self.mos.zap_lookup(1, "com.delphix:vdev_zap_map")?;
        for z in zaps {
            if let Some(avz) = avz {
                self.mos.zap_remove(avz, &format!("{z:x}"))?;
            }
            self.mos.free_object(z)?;
        }
        let mut paths = Vec::new();
        collect_paths(&old, &mut paths);
        // vdev_config_generate of a hole.
        let mut hole = NvList::new();
        hole.add_str("type", "hole");
        hole.add_u64("id", top);
        hole.add_u64("guid", 0);
        hole.add_u64("metaslab_array", 0);
        hole.add_u64("metaslab_shift", 0);
        hole.add_u64("ashift", 0);
        hole.add_u64("asize", 0);
        hole.add_u64("is_log", 0);
        hole.add_u64("is_hole", 1);
        tops[top as usize] = hole;
        tree.insert("children", NvValue::NvListArray(tops));
        cfg.add_nvlist("vdev_tree", tree);
        self.config_nv = cfg;
        self.config_dirty = true;
        // 3. The removed devices forget the pool (their labels zeroed), then the new config.
        for leaf in tv.leaves() {
            if let Some(dev) = &leaf.dev {
                clear_labels(dev.as_ref())?;
            }
        }
        self.sync()?;
        // spa_vdev_remove's record, in the next txg.
        let msg = format!("{name} vdev (log) {}", if tv.is_leaf() { tv.path.clone().unwrap_or_else(|| "-".into()) } else { "-".into() });
        self.log_history_internal("vdev remove", &msg)?;
        Ok(paths)
    }
}

impl PoolW {
    /// Free top-level vdev `top`'s space map objects `sms` and its metaslab array.
    fn free_vdev_metaslabs(&mut self, top: u64, sms: Vec<u64>) -> Result<()> {
        let histogram = self.feature_enabled("com.delphix:spacemap_histogram") && self.version >= crate::spa::SPA_VERSION_FEATURES;
        for sm in sms {
            self.mos.free_object(sm)?;
            if histogram {
                self.feature_incr("com.delphix:spacemap_histogram", -1)?;
            }
        }
        if let Some(&arr) = self.ms_arrays.get(top as usize) {
            if arr != 0 {
                self.mos.free_object(arr)?;
            }
            self.ms_arrays[top as usize] = 0;
        }
        Ok(())
    }

    /// Remove cache device `guid` from the pool: out of the L2ARC now, out of the MOS's l2cache
    /// list with a txg synced here. Returns its path as the list had it.
    pub fn remove_cache_device(&mut self, guid: u64) -> Result<String> {
        self.remove_aux_device("l2cache", guid)
    }

    /// Remove hot spare `guid` from the pool's spares list (spa_vdev_remove_aux), refused
    /// with EBUSY while it stands in for a device of this pool. Its label is left as it is: a
    /// spare may be shared with other pools.
    pub fn remove_spare_device(&mut self, guid: u64) -> Result<String> {
        if self.spa.root_vdev.leaves().iter().any(|l| l.guid == guid) {
            return Err(ZfsError::Posix(libc::EBUSY, "pool or dataset is busy".into()));
        }
        self.remove_aux_device("spares", guid)
    }

    /// Take device `guid` out of the aux list `key` ("l2cache", "spares"), with a txg synced
    /// here. Returns its path as the list had it.
    fn remove_aux_device(&mut self, key: &str, guid: u64) -> Result<String> {
        let name = self.spa.name.clone();
        let mut list = self.take_aux_list(key)?;
        let Some(i) = list.iter().position(|d| d.get_u64("guid") == Some(guid)) else {
            self.put_aux_list(key, list)?;
            return Err(ZfsError::Posix(libc::ENOENT, format!("cannot remove {guid}: no such device in pool '{name}'")));
        };
        let gone = list.remove(i);
        if key == "l2cache" {
            self.spa.l2arc.remove_device(guid);
        }
        self.put_aux_list(key, list)?;
        self.config_dirty = true;
        self.sync()?;
        let path = gone.get_str("path").unwrap_or("").to_string();
        let kind = if key == "l2cache" { "l2cache" } else { "spare" };
        self.log_history_internal("vdev remove", &format!("{name} vdev ({kind}) {path}"))?;
        Ok(path)
    }
}

fn collect_zaps(nv: &NvList, out: &mut Vec<u64>) {
    for k in ["com.delphix:vdev_zap_top", "com.delphix:vdev_zap_leaf"] {
        if let Some(z) = nv.get_u64(k) {
            if z != 0 && !out.contains(&z) {
                out.push(z);
            }
        }
    }
    for c in nv.get_nvlist_array("children").unwrap_or_default() {
        collect_zaps(c, out);
    }
}

fn collect_paths(nv: &NvList, out: &mut Vec<String>) {
    if let Some(p) = nv.get_str("path") {
        out.push(p.to_string());
    }
    for c in nv.get_nvlist_array("children").unwrap_or_default() {
        collect_paths(c, out);
    }
}

/// Zero the four labels of a device (vdev_label_init with VDEV_LABEL_REMOVE: the device no
/// longer claims to belong to the pool).
pub(crate) fn clear_labels(dev: &dyn crate::vdev::BlockDevice) -> Result<()> {
    use oxzfs_format::label::{label_offset, VDEV_LABELS, VDEV_LABEL_SIZE};
    let zero = vec![0u8; VDEV_LABEL_SIZE as usize];
    for l in 0..VDEV_LABELS {
        let off = label_offset(l, dev.size());
        dev.write_at(&zero, off).map_err(|e| ZfsError::Io { device: dev.name(), offset: off, source: e })?;
    }
    dev.flush().map_err(|e| ZfsError::Io { device: dev.name(), offset: 0, source: e })
}

/// Read the mapping and births of every indirect vdev in `root` from the MOS (vdev_load of an
/// indirect vdev: vdev_indirect_mapping_open, vdev_indirect_births_open). A mapping whose own
/// blocks sit on another removed vdev is read once that vdev's mapping is in, hence the rounds.
pub fn load_indirect_mappings(mos: &crate::dmu::Objset, root: &crate::vdev::Vdev, pool: &str) -> Result<()> {
    let pending = || root.children.iter().filter_map(|t| t.indirect.as_ref().filter(|c| c.mapping().is_none()).map(|c| (t.id, c.clone()))).collect::<Vec<_>>();
    let mut todo = pending();
    while !todo.is_empty() {
        let mut last_err = None;
        for (id, cfg) in &todo {
            let load = || read_mapping(mos, cfg.mapping_object, cfg.births_object, pool, *id);
            match load() {
                Ok(m) => {
                    cfg.set_mapping(std::sync::Arc::new(m));
                }
                Err(e) => last_err = Some(e),
            }
        }
        let left = pending();
        if left.len() == todo.len() {
            return Err(last_err.unwrap_or_else(|| ZfsError::Invalid(format!("pool '{pool}': indirect mappings cannot be read"))));
        }
        todo = left;
    }
    Ok(())
}

pub use crate::vdev_indirect::OBSOLETE_COUNTS;
/// The top-level vdev ZAP key saying its obsolete counts are precise (set when its removal
/// started with obsolete_counts enabled).
pub const VDEV_TOP_ZAP_OBSOLETE_COUNTS_ARE_PRECISE: &str = "com.delphix:obsolete_counts_are_precise";
/// zfs_vdev_standard_sm_blksz: the block size of an obsolete space map.
const OBSOLETE_SM_BLKSZ: u64 = 128 << 10;

impl PoolW {
    /// Top-level vdev `top`'s entry in the pool's config.
    pub(crate) fn top_config(&self, top: u64) -> Option<&NvList> {
        self.config_nv.get_nvlist("vdev_tree").and_then(|t| t.get_nvlist_array("children")).and_then(|c| c.get(top as usize))
    }

    /// The top-level vdev ZAP of vdev `top` as the config names it.
    pub(crate) fn top_zap(&self, top: u64) -> Option<u64> {
        self.top_config(top).and_then(|c| c.get_u64("com.delphix:vdev_zap_top")).filter(|&z| z != 0)
    }

    /// Append the ranges of removed vdev `top` marked obsolete in this sync pass to its
    /// obsolete space map (vdev_indirect_sync_obsolete): ALLOC entries in bytes (the map's
    /// shift is 0) after a debug entry, the map created on first use and named in the vdev's
    /// top-level ZAP (com.delphix:indirect_obsolete_sm), which takes a reference of
    /// obsolete_counts (and of spacemap_histogram, as every space map does).
    pub(crate) fn write_obsolete_sm(&mut self, top: u64, segs: &[(u64, u64)], txg: u64, pass: u64) -> Result<()> {
        use oxzfs_format::removal::VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM;
        use oxzfs_format::spacemap::{encode_entries, SmEntry, SpaceMapPhys};
        use oxzfs_format::types::{DMU_OT_SPACE_MAP, DMU_OT_SPACE_MAP_HEADER};
        let Some(zap) = self.top_zap(top) else {
            // A vdev of a pool from before per-vdev ZAPs: nowhere to name the map (OpenZFS
            // gives every vdev one first). Its counts stay imprecise, as they were.
            tracing::warn!("pool '{}': removed vdev {top} has no top-level ZAP; its obsolete space is not recorded", self.spa.name);
            return Ok(());
        };
        let mut sm = self.mos.zap_lookup(zap, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM)?.unwrap_or(0);
        if sm == 0 {
            let histogram = self.feature_enabled("com.delphix:spacemap_histogram");
            sm = self.mos.alloc_object(DMU_OT_SPACE_MAP, OBSOLETE_SM_BLKSZ, DMU_OT_SPACE_MAP_HEADER, if histogram { 320 } else { 24 }, 1)?;
            if histogram {
                self.feature_incr("com.delphix:spacemap_histogram", 1)?;
            }
            self.mos.zap_add_u64(zap, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM, sm)?;
            self.feature_incr(OBSOLETE_COUNTS, 1)?;
        }
        let dn = self.mos.dnode(sm)?;
        let mut phys = SpaceMapPhys::decode(&dn.bonus, true).map_err(|e| ZfsError::corrupt(format!("obsolete space map {sm} of vdev {top}"), e))?;
        let mut ents = vec![SmEntry::Debug { action: 0, syncpass: pass, txg }];
        for &(s, l) in segs {
            ents.push(SmEntry::Range { free: false, offset: s, run: l, vdev: None });
            phys.alloc += l as i64;
        }
        let words = encode_entries(&ents, false);
        let mut bytes = Vec::with_capacity(words.len() * 8);
        for w in &words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        self.mos.write(sm, phys.length, &bytes)?;
        phys.length += bytes.len() as u64;
        phys.object = sm;
        self.mos.set_bonus(sm, &phys.encode(dn.bonuslen as usize))?;
        Ok(())
    }

    /// Free removed vdev `top`'s obsolete space map, if it has one (a canceled removal).
    fn free_obsolete_sm(&mut self, top: u64) -> Result<()> {
        use oxzfs_format::removal::VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM;
        let Some(zap) = self.top_zap(top) else { return Ok(()) };
        let Some(sm) = self.mos.zap_lookup(zap, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM)?.filter(|&o| o != 0) else { return Ok(()) };
        self.mos.zap_remove(zap, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM)?;
        self.free_obsolete_sm_object(sm)
    }
}

/// libzfs's words for an EINVAL from spa_vdev_remove_top_check (zpool_vdev_remove).
pub const REMOVE_INVALID_CONFIG: &str = "invalid config; all top-level vdevs must have the same sector size and not be raidz.";

impl PoolW {
    /// spa_vdev_remove_top_check: may top-level vdev `top` (not a log) be evacuated? The
    /// errors carry libzfs's text after "cannot remove DEV: ", with OpenZFS's errno.
    pub fn check_remove_top(&mut self, top: u64) -> Result<()> {
        use crate::vdev::VdevKind;
        let root = self.spa.root_vdev.clone();
        let notsup = || ZfsError::Posix(libc::ENOTSUP, "operation not supported on this type of pool".into());
        let vd = root.children.get(top as usize).ok_or_else(|| ZfsError::Posix(libc::ENODEV, "no such device in pool".into()))?;
        if !vd.is_concrete() || vd.is_log {
            return Err(notsup());
        }
        if self.version < crate::spa::SPA_VERSION_FEATURES || !self.feature_enabled("com.delphix:device_removal") {
            return Err(notsup());
        }
        // Space: a special or dedup vdev's blocks must fit in the normal class's free space;
        // a normal vdev's space must be available in the pool beside the slop.
        let normal = |t: &crate::vdev::Vdev| t.is_concrete() && !t.is_log && t.alloc_bias.is_empty();
        let ms_space = |t: &crate::vdev::Vdev| {
            let shift = t.metaslab_shift.clamp(1, 63);
            (t.asize >> shift) << shift
        };
        if !vd.alloc_bias.is_empty() {
            let ms = self.ms.lock();
            let free: u64 = root.children.iter().filter(|t| normal(t)).map(|t| ms_space(t).saturating_sub(ms.group_usage(t.id).0)).sum();
            let (alloc, _) = ms.group_usage(top);
            if free < alloc {
                return Err(ZfsError::Posix(libc::ENOSPC, "out of space".into()));
            }
        } else {
            let root_dir = self.mos.zap_lookup(1, "root_dataset")?.ok_or_else(|| ZfsError::Invalid("no root_dataset".into()))?;
            let available = self.dir_avail(root_dir, true)?;
            let dspace = (ms_space(vd) >> 9).saturating_mul(crate::vdev::deflate_ratio(vd));
            let slop = crate::dsl::pool_space(&self.spa).slop;
            if available < dspace.saturating_add(slop) {
                return Err(ZfsError::Posix(libc::ENOSPC, "out of space".into()));
            }
        }
        // There can not be a removal in progress.
        if self.removing_vdev()?.is_some() {
            return Err(ZfsError::Posix(libc::EBUSY, REMOVE_BUSY.into()));
        }
        // The devices must all be there.
        if vd.state() != crate::vdev::VdevState::Online {
            return Err(ZfsError::Posix(libc::EIO, "I/O error".into()));
        }
        // One sector size over the normal class, and the class of a special or dedup vdev.
        let invalid = || ZfsError::Posix(libc::EINVAL, REMOVE_INVALID_CONFIG.into());
        let ashifts: Vec<u8> = root.children.iter().filter(|t| normal(t) && t.ashift != 0).map(|t| t.ashift).collect();
        let (min, max) = (ashifts.iter().min().copied(), ashifts.iter().max().copied());
        if min != max {
            return Err(invalid());
        }
        if !vd.alloc_bias.is_empty() && Some(vd.ashift) != max {
            return Err(invalid());
        }
        for c in root.children.iter() {
            if !vd.alloc_bias.is_empty() && c.alloc_bias == vd.alloc_bias && c.ashift != vd.ashift {
                return Err(invalid());
            }
            if !c.is_concrete() {
                continue;
            }
            match c.kind {
                VdevKind::Raidz { .. } => return Err(invalid()),
                VdevKind::Mirror if c.children.iter().any(|l| !l.is_leaf()) => return Err(invalid()),
                _ => {}
            }
        }
        Ok(())
    }
}

/// zfs_remove_max_segment: the longest range one mapping entry covers when copying.
pub const REMOVE_MAX_SEGMENT: u64 = 16 << 20;
/// vdev_removal_max_span: free gaps shorter than this are copied along with their
/// neighbours, one mapping entry for the lot.
pub const REMOVAL_MAX_SPAN: u64 = 32 << 10;

/// The memory the mapping of a removed vdev would take (ZPOOL_CONFIG_INDIRECT_SIZE, which
/// `zpool remove -n` prints): an entry for each free gap of at least `REMOVAL_MAX_SPAN` (the
/// allocated runs between them), the smaller gaps counted as copied, and one entry per
/// `REMOVE_MAX_SEGMENT` of what is then copied.
pub fn mapping_size_estimate(allocated: u64, free_histogram: &[u64; 64], max_ashift: u8) -> u64 {
    let span_bit = 64 - REMOVAL_MAX_SPAN.leading_zeros() as usize; // highbit64
    let mut seg_count = 0u64;
    let mut to_alloc = allocated;
    for (i, &n) in free_histogram.iter().enumerate() {
        if i + 1 < span_bit - 1 {
            to_alloc = to_alloc.saturating_add(n << (i + 1));
        } else {
            seg_count += n;
        }
    }
    let max_segment = REMOVE_MAX_SEGMENT.next_multiple_of(1u64 << max_ashift);
    seg_count += to_alloc / max_segment;
    seg_count * oxzfs_format::removal::MAPPING_ENTRY_SIZE as u64
}

impl PoolW {
    /// `mapping_size_estimate` for top-level vdev `top` as the pool stands.
    pub fn removal_mapping_estimate(&self, top: u64) -> u64 {
        let ms = self.ms.lock();
        let (allocated, _) = ms.group_usage(top);
        let max_ashift = self.spa.root_vdev.children.iter().filter(|t| t.is_concrete() && !t.is_log).map(|t| t.ashift).max().unwrap_or(9);
        mapping_size_estimate(allocated, &ms.free_histogram(top), max_ashift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_estimate_as_openzfs_counts() {
        let mut h = [0u64; 64];
        // Gaps of 4K (bucket 12) count as copied (2 * 8K); gaps of 1M (bucket 20) are entries.
        h[12] = 2;
        h[20] = 3;
        let alloc = 40 << 20;
        let want = (3 + (alloc + 2 * 8192) / (16 << 20)) * 24;
        assert_eq!(mapping_size_estimate(alloc, &h, 12), want);
        // A bucket at the span's edge (16K..32K, bucket 14) is an entry of its own.
        let mut h = [0u64; 64];
        h[13] = 1;
        h[14] = 1;
        assert_eq!(mapping_size_estimate(0, &h, 9), 24);
    }
}

/// What an evacuation did, for the caller and the tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evacuated {
    /// The removed vdev's leaf paths (their labels cleared).
    pub paths: Vec<String>,
    pub copied: u64,
    pub entries: u64,
}

/// sr_state values (dsl_scan_state_t).
pub const DSS_SCANNING: u64 = 1;
pub const DSS_FINISHED: u64 = 2;
pub const DSS_CANCELED: u64 = 3;

/// libzfs's words for EBUSY from `zpool remove` of a top-level vdev.
pub const REMOVE_BUSY: &str = "Pool busy; removal may already be in progress";

/// What the removal thread is asked (see `vdev_removal_thread`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemovalRequest {
    #[default]
    None,
    /// Stop (export, cancel): the removal stays as it is on disk.
    Stop,
}

/// The removal thread's state, shared by the thread, the commands that stop it and those
/// that wait for it (held by `PoolHandle`, so it outlives a reopen of the pool).
#[derive(Clone, Debug, Default)]
pub struct RemovalRun {
    pub running: bool,
    pub request: RemovalRequest,
    /// Runs of the thread started so far (the id of the latest).
    pub runs: u64,
    /// The error that stopped run `.0`, if one did.
    pub last_error: Option<(u64, String)>,
}

#[derive(Default)]
pub struct RemovalCtl {
    inner: std::sync::Mutex<RemovalRun>,
    cv: std::sync::Condvar,
}

impl RemovalCtl {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, RemovalRun> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn notify(&self) {
        self.cv.notify_all();
    }

    /// Wait while `f` holds of the state.
    pub fn wait_while(&self, f: impl Fn(&RemovalRun) -> bool) {
        let g = self.lock();
        let _g = self.cv.wait_while(g, |r| f(r)).unwrap_or_else(|p| p.into_inner());
    }

    /// Mark a run of the thread begun: its id, or None when one runs already.
    pub fn begin(&self) -> Option<u64> {
        let mut r = self.lock();
        if r.running {
            return None;
        }
        r.running = true;
        r.request = RemovalRequest::None;
        r.runs += 1;
        Some(r.runs)
    }

    /// Mark run `id` ended, with the error that stopped it (None: it ended well, or its
    /// thread could not be started), and wake those waiting for it.
    pub fn finish(&self, id: u64, error: Option<String>) {
        let mut r = self.lock();
        if let Some(e) = error {
            r.last_error = Some((id, e));
        }
        r.running = false;
        r.request = RemovalRequest::None;
        drop(r);
        self.notify();
    }

    /// Ask the thread to stop, if one runs, and wait until it has.
    pub fn stop_thread(&self) {
        {
            let mut r = self.lock();
            if !r.running {
                return;
            }
            r.request = RemovalRequest::Stop;
        }
        self.wait_while(|r| r.running);
    }
}

impl PoolW {
    /// spa_removing_phys as the MOS directory holds it (None: no removal ever).
    pub fn removing_phys(&mut self) -> Result<Option<oxzfs_format::removal::SpaRemovingPhys>> {
        use oxzfs_format::removal::{SpaRemovingPhys, DMU_POOL_REMOVING};
        Ok(self.mos.zap(1)?.entries.get(DMU_POOL_REMOVING.as_bytes()).and_then(|(_, w)| SpaRemovingPhys::from_words(w).ok()))
    }

    fn put_removing_phys(&mut self, p: &oxzfs_format::removal::SpaRemovingPhys) -> Result<()> {
        use oxzfs_format::removal::DMU_POOL_REMOVING;
        self.mos.zap_mut(1)?.entries.insert(DMU_POOL_REMOVING.as_bytes().to_vec(), (8, p.to_words().to_vec()));
        Ok(())
    }

    /// svr_sync, in every sync pass: what was freed past the copied part of the vdev being
    /// evacuated counts as copied in the txg of the free (OpenZFS, which may finish the
    /// removal, adds only what it copies itself to sr_copied on disk).
    pub(crate) fn removal_sync_progress(&mut self) -> Result<()> {
        let freed = self.ms.lock().take_freed_unvisited();
        if freed == 0 {
            return Ok(());
        }
        let Some(mut rec) = self.removing_phys()?.filter(|p| p.state == DSS_SCANNING) else { return Ok(()) };
        rec.copied += freed;
        self.put_removing_phys(&rec)
    }

    /// The top-level vdev being evacuated, if a removal is in progress.
    pub fn removing_vdev(&mut self) -> Result<Option<u64>> {
        Ok(self.removing_phys()?.filter(|p| p.state == DSS_SCANNING).map(|p| p.removing_vdev))
    }

    /// The config's nvlist of top-level vdev `top`, changed by `f`; the config is written with
    /// the next txg.
    pub(crate) fn edit_top_config(&mut self, top: u64, f: impl FnOnce(&mut NvList)) -> Result<NvList> {
        let mut cfg = self.config_nv.clone();
        let mut tree = cfg.get_nvlist("vdev_tree").cloned().unwrap_or_default();
        let mut tops: Vec<NvList> = tree.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
        let old = tops.get(top as usize).cloned().ok_or_else(|| ZfsError::Invalid(format!("pool '{}': vdev {top} is not in the config", self.spa.name)))?;
        f(&mut tops[top as usize]);
        tree.insert("children", NvValue::NvListArray(tops));
        cfg.add_nvlist("vdev_tree", tree);
        self.config_nv = cfg;
        self.config_dirty = true;
        Ok(old)
    }

    /// Begin the evacuation of data, special or dedup top-level vdev `top`
    /// (spa_vdev_remove_top and vdev_remove_initiate_sync); the copy is `removal_step`'s.
    ///
    /// ```text
    ///   1. checks (spa_vdev_remove_top_check, EBUSY while another removal runs); the vdev
    ///      takes no more allocations; intent logs dropped; txgs synced until its frees are
    ///      through their deferral
    ///   2. an empty mapping object and births object; spa_removing_phys = {scanning, the
    ///      vdev, start time, to_copy = what is allocated on it}; device_removal active; the
    ///      vdev's config gains removing = 1 and the two objects; synced
    /// ```
    pub fn start_removal(&mut self, top: u64) -> Result<()> {
        use oxzfs_format::removal::SpaRemovingPhys;
        use oxzfs_format::types::DMU_OTN_UINT64_METADATA;
        self.check_remove_top(top)?;
        // 1. Quiet the vdev.
        self.ms.lock().retire_group(top);
        self.zil_close_all();
        for _ in 0..3 {
            if let Err(e) = self.sync() {
                self.ms.lock().unretire_group(top);
                return Err(e);
            }
        }
        // 2. The removal's objects and record.
        let to_copy: u64 = self.ms.lock().allocated_segments(top).iter().map(|s| s.1).sum();
        // With obsolete_counts (vdev_remove_initiate_sync, vdev_indirect_mapping_alloc): the
        // vdev's counts are precise (a reference and a key in its top-level ZAP), and the
        // mapping has a counts object (another reference) named in its longer bonus.
        let precise = self.feature_enabled(OBSOLETE_COUNTS);
        self.ms.lock().obsolete_counts = precise;
        if precise {
            if let Some(zap) = self.top_zap(top) {
                self.feature_incr(OBSOLETE_COUNTS, 1)?;
                self.mos.zap_add_u64(zap, VDEV_TOP_ZAP_OBSOLETE_COUNTS_ARE_PRECISE, 1)?;
            }
        }
        let (mapping_obj, phys) = self.alloc_mapping_object()?;
        let births_obj = self.mos.alloc_object(DMU_OTN_UINT64_METADATA, 128 << 10, DMU_OTN_UINT64_METADATA, 8, 1)?;
        self.mos.set_bonus(births_obj, &0u64.to_le_bytes())?;
        let prev = self.removing_phys()?.map_or(u64::MAX, |p| p.prev_indirect_vdev);
        let rec = SpaRemovingPhys { state: DSS_SCANNING, removing_vdev: top, prev_indirect_vdev: prev, start_time: crate::dsl_scan::now(), end_time: 0, to_copy, copied: 0 };
        self.put_removing_phys(&rec)?;
        self.feature_incr("com.delphix:device_removal", 1)?;
        self.edit_top_config(top, |nv| {
            nv.add_u64("removing", 1);
            nv.add_u64("com.delphix:indirect_object", mapping_obj);
            nv.add_u64("com.delphix:indirect_births", births_obj);
        })?;
        self.ms.lock().start_removing(top, crate::vdev::indirect::IndirectMapping { phys, entries: Vec::new(), births: Vec::new() });
        let msg = format!("{} vdev {top} {}", self.spa.name, self.top_path(top));
        self.log_history_internal("vdev remove started", &msg)?;
        self.sync()
    }

    /// vdev_path of top-level vdev `top` as the history records name it: a disk's path, "-"
    /// for a mirror.
    fn top_path(&self, top: u64) -> String {
        self.spa.root_vdev.children.get(top as usize).filter(|t| t.is_leaf()).and_then(|t| t.path.clone()).unwrap_or_else(|| "-".into())
    }

    /// After a read-write import: an evacuation the pool was in goes on from the mapping on
    /// disk (spa_remove_init): the vdev allocates nothing, frees of what was copied free the
    /// copies too (and are marked obsolete when the pool counts obsolete space).
    pub(crate) fn load_removal(&mut self) -> Result<()> {
        let Some(top) = self.removing_vdev()? else { return Ok(()) };
        let name = self.spa.name.clone();
        let nv = self.top_config(top).cloned().unwrap_or_default();
        let (mapping_object, births_object) = (nv.get_u64("com.delphix:indirect_object").unwrap_or(0), nv.get_u64("com.delphix:indirect_births").unwrap_or(0));
        if mapping_object == 0 || !self.spa.root_vdev.children.get(top as usize).is_some_and(|t| t.is_concrete()) {
            return Err(ZfsError::Invalid(format!("pool '{name}': the removal of vdev {top} is in progress but the vdev has no mapping object")));
        }
        let m = read_mapping(&self.spa.mos(), mapping_object, births_object, &name, top)?;
        let copied_to = m.phys.max_offset;
        let remaining: u64 = {
            let mut ms = self.ms.lock();
            ms.start_removing(top, m);
            ms.allocated_segments_from(top, copied_to, u64::MAX).iter().map(|s| s.1).sum()
        };
        // sr_copied as the space maps have it: what was allocated at the start and is neither
        // still waiting past the copied offset. (The frees counted in memory since the last
        // step are lost with a crash; this puts them back.)
        if let Some(mut rec) = self.removing_phys()? {
            let copied = rec.to_copy.saturating_sub(remaining);
            if copied != rec.copied {
                rec.copied = copied;
                self.put_removing_phys(&rec)?;
            }
        }
        Ok(())
    }

    /// One step of the evacuation (spa_vdev_copy_impl, in the open txg): up to `budget` bytes
    /// of what is allocated past the copied part are allocated elsewhere (the vdev's own class,
    /// else the normal class; halved down to a sector when space is fragmented), read and
    /// written there; the new mapping entries and the txg's births entry go into their MOS
    /// objects and the copied count into spa_removing_phys, all synced with that txg. True
    /// when nothing is left to copy.
    pub fn removal_step(&mut self, budget: u64) -> Result<bool> {
        use oxzfs_format::removal::{BirthEntryPhys, MappingEntryPhys, BIRTH_ENTRY_SIZE};
        let Some(mut rec) = self.removing_phys()?.filter(|p| p.state == DSS_SCANNING) else { return Ok(true) };
        let top = rec.removing_vdev;
        let root = self.spa.root_vdev.clone();
        let tv = root.children[top as usize].clone();
        let max_ashift = root.children.iter().filter(|t| t.is_concrete() && !t.is_log).map(|t| t.ashift).max().unwrap_or(9);
        let max_segment = crate::tunables::remove_max_segment().next_multiple_of(1u64 << max_ashift.max(9));
        let class = {
            let ms = self.ms.lock();
            let own = ms.group_class(top);
            if ms.has_class(own) {
                own
            } else {
                crate::zio::AllocClass::Normal
            }
        };
        let sector = 1u64 << tv.ashift.max(9);
        let txg = self.txg;
        let (from, segs) = {
            let mut ms = self.ms.lock();
            let Some(r) = ms.removing_mut(top) else { return Err(ZfsError::Invalid(format!("vdev {top} is not being removed"))) };
            let from = r.mapping.phys.max_offset;
            (from, ms.allocated_segments_from(top, from, budget.max(1)))
        };
        let mut entries: Vec<MappingEntryPhys> = Vec::new();
        // Each new entry's obsolete count: the free gaps it covers.
        let mut counts: Vec<u32> = Vec::new();
        // The destination ranges holding copied bytes (what a failed step gives back).
        let mut held: Vec<(u64, u64, u64)> = Vec::new();
        let mut copied = 0u64;
        let mut thismax = max_segment;
        let max_span = crate::tunables::removal_max_span();
        let ms_shift = tv.metaslab_shift.clamp(1, 63);
        let undo = |pw: &mut PoolW, held: &[(u64, u64, u64)], e: ZfsError| -> ZfsError {
            let mut ms = pw.ms.lock();
            for &(v, off, len) in held {
                ms.free(v, off, len, txg, txg);
            }
            e
        };
        let mut queue: std::collections::VecDeque<(u64, u64)> = segs.into_iter().collect();
        while copied < budget {
            // The unit copied next (spa_vdev_copy_impl): the first range (at most
            // zfs_remove_max_segment of it), then the following ones while the free gap
            // before each is at most vdev_removal_max_span and the whole stays within
            // zfs_remove_max_segment and one metaslab.
            let Some((s0, l0)) = queue.pop_front() else { break };
            debug_assert!(s0 >= from);
            let mut unit = std::collections::VecDeque::from([(s0, l0.min(max_segment))]);
            if l0 > max_segment {
                queue.push_front((s0 + max_segment, l0 - max_segment));
            } else {
                while let Some(&(s, l)) = queue.front() {
                    let end = unit.back().map_or(s0, |u| u.0 + u.1);
                    if s - end > max_span || s + l - s0 > max_segment || s >> ms_shift != s0 >> ms_shift {
                        break;
                    }
                    unit.push_back((s, l));
                    queue.pop_front();
                }
            }
            // Its allocations (spa_vdev_copy_segment): the whole span, or when that is more
            // than thismax, up to the end of the last range that fits in it. On ENOSPC the
            // step goes on with half the size, down to one sector.
            while let Some(&(start, _)) = unit.front() {
                let span = unit.back().map_or(0, |u| u.0 + u.1) - start;
                let got = loop {
                    let size = if span <= thismax {
                        span
                    } else {
                        unit.iter().rev().map(|u| u.0 + u.1).find(|&e| e <= start + thismax).map_or(thismax, |e| e - start)
                    };
                    let mut ms = self.ms.lock();
                    let a = ms.alloc(class, &|_| size, txg, &[]).or_else(|| ms.alloc(crate::zio::AllocClass::Normal, &|_| size, txg, &[]));
                    if a.is_some() || size <= sector {
                        break a;
                    }
                    thismax = (span.min(thismax) / 2).div_ceil(sector) * sector;
                };
                let Some((dv, doff, size)) = got else {
                    return Err(undo(self, &held, ZfsError::Posix(libc::ENOSPC, "out of space".into())));
                };
                let dst = root.children[dv as usize].clone();
                if let Err(e) = copy_range(&tv, start, &dst, doff, size) {
                    self.ms.lock().free(dv, doff, size, txg, txg);
                    return Err(undo(self, &held, e));
                }
                // The ranges of [start, start + size) leave the unit; the gaps between them
                // are freed at the destination (unalloc_seg) and counted obsolete.
                let end = start + size;
                let mut at = start;
                let mut gaps = 0u64;
                let mut ms = self.ms.lock();
                while let Some(&(s, l)) = unit.front() {
                    if s >= end {
                        break;
                    }
                    if s > at {
                        ms.free(dv, doff + (at - start), s - at, txg, txg);
                        gaps += s - at;
                    }
                    let take = l.min(end - s);
                    held.push((dv, doff + (s - start), take));
                    copied += take;
                    at = s + take;
                    if take == l {
                        unit.pop_front();
                    } else {
                        unit[0] = (s + take, l - take);
                    }
                }
                drop(ms);
                entries.push(MappingEntryPhys { src: start, mark: false, dst: oxzfs_format::blkptr::Dva { vdev: dv, offset: doff, asize: size, gang: false } });
                counts.push(gaps as u32);
            }
        }
        // The new entries into the in-core mapping (frees of them free the copies from now
        // on) and the MOS.
        let (phys, first, births, birth_index, freed) = {
            let mut ms = self.ms.lock();
            let r = ms.removing_mut(top).expect("removal state");
            let freed = std::mem::take(&mut r.freed_unvisited);
            let m = &mut r.mapping;
            let first = m.entries.len();
            m.entries.extend_from_slice(&entries);
            if !entries.is_empty() {
                crate::vdev_indirect::extend_phys(&mut m.phys, &entries);
                match m.births.last_mut() {
                    Some(b) if b.phys_birth_txg == txg => b.offset = m.phys.max_offset,
                    _ => m.births.push(BirthEntryPhys { offset: m.phys.max_offset, phys_birth_txg: txg }),
                }
            }
            (m.phys, first, m.births.clone(), m.births.len().saturating_sub(1), freed)
        };
        if !entries.is_empty() {
            let nv = self.top_config(top).cloned().unwrap_or_default();
            let mapping_obj = nv.get_u64("com.delphix:indirect_object").unwrap_or(0);
            let births_obj = nv.get_u64("com.delphix:indirect_births").unwrap_or(0);
            // Each new entry's obsolete count: what it covers that was never allocated.
            self.write_mapping_entries(mapping_obj, &phys, first as u64, &entries, &counts)?;
            let b = births[birth_index];
            let mut raw = Vec::with_capacity(BIRTH_ENTRY_SIZE);
            raw.extend_from_slice(&b.offset.to_le_bytes());
            raw.extend_from_slice(&b.phys_birth_txg.to_le_bytes());
            self.mos.write(births_obj, (birth_index * BIRTH_ENTRY_SIZE) as u64, &raw)?;
            self.mos.set_bonus(births_obj, &(births.len() as u64).to_le_bytes())?;
        }
        if copied + freed > 0 {
            rec.copied += copied + freed;
            self.put_removing_phys(&rec)?;
        }
        Ok(entries.is_empty())
    }

    /// The evacuation is done: the vdev becomes an indirect vdev (vdev_remove_complete).
    ///
    /// ```text
    ///   1. its frees from now on go through the mapping to the copies only
    ///   2. its space maps, metaslab array and leaf ZAPs freed, the config's top-level vdev
    ///      turned into an indirect one naming the mapping, births and the vdev removed
    ///      before it; spa_removing_phys finished (end time, prev_indirect_vdev = it) — all
    ///      synced in one txg
    ///   3. its labels cleared
    /// ```
    ///
    /// A crash before step 2's uberblock leaves the removal in progress, all copied (the next
    /// import finishes it); after it, the removal is complete. The pool must be opened again
    /// afterwards (the vdev tree changed).
    pub fn complete_removal(&mut self) -> Result<Evacuated> {
        let Some(mut rec) = self.removing_phys()?.filter(|p| p.state == DSS_SCANNING) else {
            return Err(ZfsError::Invalid("no removal in progress".into()));
        };
        let top = rec.removing_vdev;
        let tv = self.spa.root_vdev.children[top as usize].clone();
        let txg = self.txg;
        let r = self.ms.lock().take_removing(top).ok_or_else(|| ZfsError::Invalid(format!("vdev {top} is not being removed")))?;
        // Everything allocated at the start is copied or freed (OpenZFS asserts sr_copied ==
        // sr_to_copy here).
        let copied = rec.to_copy.max(rec.copied + r.freed_unvisited);
        let mapping = std::sync::Arc::new(r.mapping);
        {
            let mut ms = self.ms.lock();
            ms.set_evacuated(top);
            let unmapped = ms.set_mapping(top, mapping.clone(), txg);
            assert!(unmapped.is_empty(), "frees on vdev {top} before its mapping was set");
        }
        rec.state = DSS_FINISHED;
        rec.end_time = crate::dsl_scan::now();
        rec.copied = copied;
        let prev = rec.prev_indirect_vdev;
        rec.prev_indirect_vdev = top;
        self.put_removing_phys(&rec)?;
        // The vdev's metaslabs and leaf ZAPs go (the top-level ZAP stays, as OpenZFS keeps it).
        let (_, sms) = self.ms.lock().group_usage(top);
        self.free_vdev_metaslabs(top, sms)?;
        let old = self.edit_top_config(top, |_| {})?;
        let mut leaf_zaps = Vec::new();
        for c in old.get_nvlist_array("children").unwrap_or_default() {
            collect_zaps(c, &mut leaf_zaps);
        }
        if let Some(z) = old.get_u64("com.delphix:vdev_zap_leaf") {
            leaf_zaps.push(z);
        }
        let avz = self.mos.zap_lookup(1, "com.delphix:vdev_zap_map")?;
        for z in leaf_zaps.into_iter().filter(|&z| z != 0) {
            if let Some(avz) = avz {
                self.mos.zap_remove(avz, &format!("{z:x}"))?;
            }
            self.mos.free_object(z)?;
        }
        let mut paths = Vec::new();
        collect_paths(&old, &mut paths);
        // vdev_config_generate of an indirect vdev.
        let mut ind = NvList::new();
        ind.add_str("type", "indirect");
        ind.add_u64("id", top);
        ind.add_u64("guid", tv.guid);
        ind.add_u64("metaslab_array", 0);
        ind.add_u64("metaslab_shift", old.get_u64("metaslab_shift").unwrap_or(0));
        ind.add_u64("ashift", old.get_u64("ashift").unwrap_or(tv.ashift as u64));
        ind.add_u64("asize", old.get_u64("asize").unwrap_or(tv.asize));
        ind.add_u64("is_log", 0);
        ind.add_u64("com.delphix:indirect_object", old.get_u64("com.delphix:indirect_object").unwrap_or(0));
        ind.add_u64("com.delphix:indirect_births", old.get_u64("com.delphix:indirect_births").unwrap_or(0));
        if prev != u64::MAX {
            ind.add_u64("com.delphix:prev_indirect_vdev", prev);
        }
        if let Some(t) = old.get_u64("create_txg") {
            ind.add_u64("create_txg", t);
        }
        if let Some(z) = old.get_u64("com.delphix:vdev_zap_top") {
            ind.add_u64("com.delphix:vdev_zap_top", z);
        }
        self.edit_top_config(top, |nv| *nv = ind)?;
        let msg = format!("{} vdev {top}", self.spa.name);
        self.log_history_internal("vdev remove completed", &msg)?;
        self.sync()?;
        for leaf in tv.leaves() {
            if let Some(dev) = &leaf.dev {
                clear_labels(dev.as_ref())?;
            }
        }
        Ok(Evacuated { paths, copied, entries: mapping.entries.len() as u64 })
    }

    /// `zpool remove -s` (spa_vdev_remove_cancel_sync): the copies of what is still allocated
    /// on the vdev are freed, the mapping and births objects freed, the vdev's config loses
    /// removing and the objects, spa_removing_phys canceled, device_removal released; the
    /// vdev takes allocations again. Synced.
    pub fn cancel_removal(&mut self) -> Result<()> {
        let Some(mut rec) = self.removing_phys()?.filter(|p| p.state == DSS_SCANNING) else {
            return Err(ZfsError::Posix(libc::ENOENT, "operation is not in progress".into()));
        };
        let top = rec.removing_vdev;
        let txg = self.txg;
        let counts_object = {
            let mut ms = self.ms.lock();
            let Some(r) = ms.take_removing(top) else { return Err(ZfsError::Invalid(format!("vdev {top} is not being removed"))) };
            let copied_to = r.mapping.phys.max_offset;
            for (s, l) in ms.allocated_segments(top) {
                let end = (s + l).min(copied_to);
                if s >= end {
                    break;
                }
                for p in r.mapping.remap(s, end - s).unwrap_or_default() {
                    ms.free(p.vdev, p.offset, p.len, txg, txg);
                }
            }
            ms.unretire_group(top);
            ms.clear_obsolete(top);
            r.mapping.phys.counts_object
        };
        // The obsolete counts go with the removal (spa_vdev_remove_cancel_sync).
        if let Some(zap) = self.top_zap(top) {
            if self.mos.zap_lookup(zap, VDEV_TOP_ZAP_OBSOLETE_COUNTS_ARE_PRECISE)?.is_some() {
                self.mos.zap_remove(zap, VDEV_TOP_ZAP_OBSOLETE_COUNTS_ARE_PRECISE)?;
                self.feature_incr(OBSOLETE_COUNTS, -1)?;
            }
        }
        self.free_obsolete_sm(top)?;
        if counts_object != 0 {
            self.mos.free_object(counts_object)?;
            self.feature_incr(OBSOLETE_COUNTS, -1)?;
        }
        let old = self.edit_top_config(top, |nv| {
            nv.remove("removing");
            nv.remove("com.delphix:indirect_object");
            nv.remove("com.delphix:indirect_births");
        })?;
        for key in ["com.delphix:indirect_object", "com.delphix:indirect_births"] {
            if let Some(obj) = old.get_u64(key).filter(|&o| o != 0) {
                self.mos.free_object(obj)?;
            }
        }
        self.feature_incr("com.delphix:device_removal", -1)?;
        rec.state = DSS_CANCELED;
        rec.end_time = crate::dsl_scan::now();
        self.put_removing_phys(&rec)?;
        let msg = format!("{} vdev {top} {}", self.spa.name, self.top_path(top));
        self.log_history_internal("vdev remove canceled", &msg)?;
        self.sync()
    }

    /// `zpool remove` of a data, special or dedup top-level vdev done in one go (the start,
    /// every step and the completion under the caller's hold of the pool): for tests and
    /// callers that need the pool as it ends.
    pub fn evacuate_vdev(&mut self, top: u64) -> Result<Evacuated> {
        self.start_removal(top)?;
        while !self.removal_step(u64::MAX)? {}
        self.complete_removal()
    }
}

/// Copy `size` bytes at `from` of top-level vdev `src` to `to` of `dst`. A mirror copied to a
/// mirror goes child by child, as OpenZFS's spa_vdev_copy_one_child does: each destination
/// side from the source side of its own index (wrapping when the source has fewer), so that
/// damage no read has found yet on one source side lands on one destination side only and a
/// scrub can still repair it from another. Otherwise the source is read as a whole (one
/// side of a mirror, without checksums: there is no block pointer here) and written to every
/// side of the destination.
fn copy_range(src: &crate::vdev::Vdev, from: u64, dst: &crate::vdev::Vdev, to: u64, size: u64) -> Result<()> {
    if let Some(pairs) = side_by_side(src, dst) {
        for (s, d) in pairs {
            if !s.copy_leaf_to(from, d, to, size)? {
                copy_chunks(&|at, n| s.read_leaf(at, n), from, &|at, b| d.write_leaf_direct(at, b), to, size)?;
            }
        }
        return Ok(());
    }
    if copy_in_kernel(src, from, dst, to, size)? {
        return Ok(());
    }
    copy_chunks(&|at, n| src.read_mode(at, n, &|_| true, &crate::vdev::READ_PLAIN), from, &|at, b| dst.write_direct(at, b), to, size)
}

/// The (source side, destination side) pairs of a mirror copied to a mirror whose sides are
/// all healthy and up to date (source side `i % n` for destination side `i`); None for any
/// other pair of vdevs, or when a side is missing, offline or behind (the copy then reads the
/// source mirror as a whole, which picks a side that has the data).
fn side_by_side<'a>(src: &'a crate::vdev::Vdev, dst: &'a crate::vdev::Vdev) -> Option<Vec<(&'a crate::vdev::Vdev, &'a crate::vdev::Vdev)>> {
    use crate::vdev::VdevKind;
    let mirror = |v: &crate::vdev::Vdev| matches!(v.kind, VdevKind::Mirror) && !v.children.is_empty() && v.children.iter().all(|c| healthy_leaf(c));
    if !mirror(src) || !mirror(dst) {
        return None;
    }
    Some(dst.children.iter().enumerate().map(|(i, d)| (src.children[i % src.children.len()].as_ref(), d.as_ref())).collect())
}

/// A leaf online, in use and missing no txg (its DTL empty).
fn healthy_leaf(l: &crate::vdev::Vdev) -> bool {
    use crate::vdev::{VdevKind, VdevState};
    matches!(l.kind, VdevKind::Leaf { .. }) && l.state() == VdevState::Online && !l.out_of_use() && l.stats.dtl_bounds().is_none()
}

/// Bytes a copy reads and writes at a time.
const COPY_CHUNK: u64 = 1 << 20;

/// Copy `size` bytes with `read(offset, len)` at `from` and `write(offset, bytes)` at `to`:
/// chunks read by one thread and written by another, so the read of the next chunk goes on
/// during the write of the last (OpenZFS issues a copy's read and its writes as zios in
/// flight together); each chunk placed for a direct write (`vdev::direct_placed`). A read or
/// write error ends the copy with that error.
fn copy_chunks(read: &(dyn Fn(u64, u64) -> Result<Vec<u8>> + Sync), from: u64, write: &dyn Fn(u64, &[u8]) -> Result<()>, to: u64, size: u64) -> Result<()> {
    if size <= COPY_CHUNK {
        let (b, p) = crate::vdev::direct_placed(&read(from, size)?, to);
        return write(to, &b[p..p + size as usize]);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(u64, (Vec<u8>, usize), usize)>>(2);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut at = 0;
            while at < size {
                let n = COPY_CHUNK.min(size - at);
                let r = read(from + at, n).map(|d| (at, crate::vdev::direct_placed(&d, to + at), d.len()));
                let failed = r.is_err();
                if tx.send(r).is_err() || failed {
                    return;
                }
                at += n;
            }
        });
        // Dropping the receiver on an error stops the reader at its next send.
        for chunk in rx {
            let (at, (b, p), n) = chunk?;
            write(to + at, &b[p..p + n])?;
        }
        Ok(())
    })
}

/// `copy_range` inside the kernel, when the source is a leaf (or a mirror whose sides are
/// all healthy and up to date: the first is read, as the mirror's read would) and every leaf
/// of the destination is a file the kernel can copy into (see `Vdev::copy_leaf_to`). False
/// when not, nothing written.
fn copy_in_kernel(src: &crate::vdev::Vdev, from: u64, dst: &crate::vdev::Vdev, to: u64, size: u64) -> Result<bool> {
    use crate::vdev::VdevKind;
    let source = match src.kind {
        VdevKind::Leaf { .. } => Some(src),
        VdevKind::Mirror if src.children.iter().all(|c| healthy_leaf(c)) => src.children.first().map(|c| c.as_ref()),
        _ => None,
    };
    let targets: Vec<&crate::vdev::Vdev> = match dst.kind {
        VdevKind::Leaf { .. } => vec![dst],
        VdevKind::Mirror if dst.children.iter().all(|c| healthy_leaf(c)) => dst.children.iter().map(|c| c.as_ref()).collect(),
        _ => Vec::new(),
    };
    let Some(source) = source.filter(|_| !targets.is_empty()) else { return Ok(false) };
    for (i, t) in targets.iter().enumerate() {
        if !source.copy_leaf_to(from, t, to, size)? {
            if i == 0 {
                return Ok(false);
            }
            // The kernel copied to one side and not another: that side through memory.
            t.write(to, &source.read_leaf(from, size)?)?;
        }
    }
    Ok(true)
}

/// Read the mapping and births objects of vdev `id` from the MOS (vdev_indirect_mapping_open,
/// vdev_indirect_births_open).
fn read_mapping(mos: &crate::dmu::Objset, mapping_object: u64, births_object: u64, pool: &str, id: u64) -> Result<crate::vdev::indirect::IndirectMapping> {
    use oxzfs_format::removal::{decode_birth_entries, decode_mapping_entries, IndirectMappingPhys, BIRTH_ENTRY_SIZE, MAPPING_ENTRY_SIZE};
    let bad = |what: &str, e: String| ZfsError::Invalid(format!("pool '{pool}': indirect vdev {id}: {what}: {e}"));
    let (dn, le) = mos.dnode_with_order(mapping_object)?;
    let phys = IndirectMappingPhys::decode(&dn.bonus, le).map_err(|e| bad("mapping object", e.to_string()))?;
    let object_bytes = (dn.maxblkid + 1).saturating_mul(dn.data_block_size());
    let need = phys.num_entries.saturating_mul(MAPPING_ENTRY_SIZE as u64);
    if need > object_bytes {
        return Err(bad("mapping object", format!("{} entries do not fit in its {object_bytes} bytes", phys.num_entries)));
    }
    let raw = if need == 0 { Vec::new() } else { mos.read_obj(&dn, mapping_object, 0, need)? };
    let entries = decode_mapping_entries(&raw, phys.num_entries, le).map_err(|e| bad("mapping object", e.to_string()))?;
    let mut births = Vec::new();
    if births_object != 0 {
        let (bdn, ble) = mos.dnode_with_order(births_object)?;
        let count = oxzfs_format::bytes::u64_at(&bdn.bonus, 0, ble, "births phys").map_err(|e| bad("births object", e.to_string()))?;
        let bytes = (bdn.maxblkid + 1).saturating_mul(bdn.data_block_size());
        let need = count.saturating_mul(BIRTH_ENTRY_SIZE as u64);
        if need > bytes {
            return Err(bad("births object", format!("{count} entries do not fit in its {bytes} bytes")));
        }
        if need > 0 {
            let raw = mos.read_obj(&bdn, births_object, 0, need)?;
            births = decode_birth_entries(&raw, count, ble).map_err(|e| bad("births object", e.to_string()))?;
        }
    }
    Ok(crate::vdev::indirect::IndirectMapping { phys, entries, births })
}

