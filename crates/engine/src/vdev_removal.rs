//! vdev_removal: `zpool remove` of a log device (OpenZFS's spa_vdev_remove for a log top-level
//! vdev, which needs no evacuation: what a log device holds lives only until its txg syncs),
//! and of a cache device (spa_vdev_remove_aux: at once — the L2ARC forgets what the device
//! holds and the pool's l2cache list loses it with the next txg; the device keeps its cache
//! label and L2ARC header, which name no pool it belongs to).
//!
//! ```text
//!   1. the device takes no more allocations; every file system's intent-log chain is dropped
//!      (its records are synced) and the txgs synced until the frees of the log blocks have
//!      left their deferral: the device holds nothing
//!   2. its space maps, metaslab array and vdev ZAPs leave the MOS; in the config the
//!      top-level vdev becomes a hole (type "hole", is_hole), keeping every other vdev's id
//!   3. the labels of its devices are cleared, the new config written with the next txg
//! ```

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
        Ok(gone.get_str("path").unwrap_or("").to_string())
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
    use oxzfs_format::removal::{decode_birth_entries, decode_mapping_entries, IndirectMappingPhys, BIRTH_ENTRY_SIZE, MAPPING_ENTRY_SIZE};
    let pending = || root.children.iter().filter_map(|t| t.indirect.as_ref().filter(|c| c.mapping.get().is_none()).map(|c| (t.id, c.clone()))).collect::<Vec<_>>();
    let mut todo = pending();
    while !todo.is_empty() {
        let mut last_err = None;
        for (id, cfg) in &todo {
            let load = || -> Result<crate::vdev::indirect::IndirectMapping> {
                let bad = |what: &str, e: String| ZfsError::Invalid(format!("pool '{pool}': indirect vdev {id}: {what}: {e}"));
                let (dn, le) = mos.dnode_with_order(cfg.mapping_object)?;
                let phys = IndirectMappingPhys::decode(&dn.bonus, le).map_err(|e| bad("mapping object", e.to_string()))?;
                let object_bytes = (dn.maxblkid + 1).saturating_mul(dn.data_block_size());
                let need = phys.num_entries.saturating_mul(MAPPING_ENTRY_SIZE as u64);
                if need > object_bytes {
                    return Err(bad("mapping object", format!("{} entries do not fit in its {object_bytes} bytes", phys.num_entries)));
                }
                let raw = mos.read_obj(&dn, cfg.mapping_object, 0, need)?;
                let entries = decode_mapping_entries(&raw, phys.num_entries, le).map_err(|e| bad("mapping object", e.to_string()))?;
                let mut births = Vec::new();
                if cfg.births_object != 0 {
                    let (bdn, ble) = mos.dnode_with_order(cfg.births_object)?;
                    let count = oxzfs_format::bytes::u64_at(&bdn.bonus, 0, ble, "births phys").map_err(|e| bad("births object", e.to_string()))?;
                    let bytes = (bdn.maxblkid + 1).saturating_mul(bdn.data_block_size());
                    let need = count.saturating_mul(BIRTH_ENTRY_SIZE as u64);
                    if need > bytes {
                        return Err(bad("births object", format!("{count} entries do not fit in its {bytes} bytes")));
                    }
                    let raw = mos.read_obj(&bdn, cfg.births_object, 0, need)?;
                    births = decode_birth_entries(&raw, count, ble).map_err(|e| bad("births object", e.to_string()))?;
                }
                Ok(crate::vdev::indirect::IndirectMapping { phys, entries, births })
            };
            match load() {
                Ok(m) => {
                    let _ = cfg.mapping.set(std::sync::Arc::new(m));
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

impl PoolW {
    /// `zpool remove` of a data, special or dedup top-level vdev (spa_vdev_remove_top and the
    /// removal thread, done in one go): every allocated range of the vdev is copied to the
    /// other vdevs and the vdev becomes an indirect vdev whose mapping sends old addresses to
    /// the copies.
    ///
    /// ```text
    ///   1. checks (spa_vdev_remove_top_check); the vdev takes no more allocations; intent
    ///      logs dropped; txgs synced until its frees are through their deferral
    ///   2. in the open txg: each allocated range (up to REMOVE_MAX_SEGMENT) allocated on a
    ///      vdev of the same class (the normal class when none is left or it is full), read
    ///      from the vdev as it is and written there; the vdev's group then syncs no more
    ///   3. the mapping and births objects, spa_removing_phys (finished), device_removal
    ///      active, the vdev's space maps, metaslab array and leaf ZAPs freed, the config's
    ///      top-level vdev turned into an indirect one — all synced in that one txg
    ///   4. the vdev's labels cleared (its frees, from step 3's sync on, go through the
    ///      mapping to the copies in the txg that makes them)
    /// ```
    ///
    /// A crash before step 3's uberblock leaves the pool as it was (the copies sit in space
    /// the old state has free); after it, the removal is complete. The caller holds the pool,
    /// so no other change interleaves: writers wait for the copy.
    pub fn evacuate_vdev(&mut self, top: u64) -> Result<Evacuated> {
        use oxzfs_format::removal::{MappingEntryPhys, SpaRemovingPhys, DMU_POOL_REMOVING};
        use oxzfs_format::types::DMU_OTN_UINT64_METADATA;
        self.check_remove_top(top)?;
        let root = self.spa.root_vdev.clone();
        let tv = root.children[top as usize].clone();
        let start_time = crate::dsl_scan::now();
        // 1. Quiet the vdev.
        self.ms.lock().retire_group(top);
        self.zil_close_all();
        for _ in 0..3 {
            self.sync()?;
        }
        // 2. Copy.
        let class = {
            let ms = self.ms.lock();
            let own = ms.group_class(top);
            if ms.has_class(own) {
                own
            } else {
                crate::zio::AllocClass::Normal
            }
        };
        let segs = self.ms.lock().allocated_segments(top);
        let sector = 1u64 << tv.ashift.max(9);
        let txg = self.txg;
        let mut entries: Vec<MappingEntryPhys> = Vec::new();
        let mut copied = 0u64;
        let undo = |pw: &mut PoolW, entries: &[MappingEntryPhys], e: ZfsError| -> ZfsError {
            let mut ms = pw.ms.lock();
            for en in entries {
                ms.free(en.dst.vdev, en.dst.offset, en.dst.asize, txg, txg);
            }
            ms.unretire_group(top);
            e
        };
        for (start, len) in segs {
            let end = start + len;
            let mut at = start;
            while at < end {
                let mut want = (end - at).min(REMOVE_MAX_SEGMENT);
                let got = loop {
                    let mut ms = self.ms.lock();
                    let a = ms.alloc(class, &|_| want, txg, &[]).or_else(|| ms.alloc(crate::zio::AllocClass::Normal, &|_| want, txg, &[]));
                    if a.is_some() || want <= sector {
                        break a;
                    }
                    want = (want / 2).div_ceil(sector) * sector;
                };
                let Some((dv, doff, dsize)) = got else {
                    return Err(undo(self, &entries, ZfsError::Posix(libc::ENOSPC, "out of space".into())));
                };
                let dst = root.children[dv as usize].clone();
                if let Err(e) = tv.read_mode(at, dsize, &|_| true, &crate::vdev::READ_PLAIN).and_then(|d| dst.write(doff, &d)) {
                    self.ms.lock().free(dv, doff, dsize, txg, txg);
                    return Err(undo(self, &entries, e));
                }
                entries.push(MappingEntryPhys { src: at, mark: false, dst: oxzfs_format::blkptr::Dva { vdev: dv, offset: doff, asize: dsize, gang: false } });
                copied += dsize;
                at += dsize;
            }
        }
        root.flush_all();
        // From here the vdev's frees go to the copies, in the txg that makes them: the frees
        // the sync below makes (old MOS blocks there) land with the removal itself.
        let max_offset = entries.last().map_or(0, |e| e.src + e.size());
        let phys = oxzfs_format::removal::IndirectMappingPhys { max_offset, bytes_mapped: copied, num_entries: entries.len() as u64, counts_object: 0 };
        let mapping = std::sync::Arc::new(crate::vdev::indirect::IndirectMapping { phys, entries, births: Vec::new() });
        {
            let mut ms = self.ms.lock();
            ms.set_evacuated(top);
            let unmapped = ms.set_mapping(top, mapping.clone(), txg);
            assert!(unmapped.is_empty(), "frees on vdev {top} before its mapping was set");
        }
        let entries = &mapping.entries;
        // 3. The mapping, the births, the removal's record, the config.
        let mapping_obj = self.mos.alloc_object(DMU_OTN_UINT64_METADATA, 128 << 10, DMU_OTN_UINT64_METADATA, oxzfs_format::removal::MAPPING_PHYS_SIZE_V0, 1)?;
        let mut raw = Vec::with_capacity(entries.len() * oxzfs_format::removal::MAPPING_ENTRY_SIZE);
        for e in entries {
            raw.extend_from_slice(&e.encode());
        }
        if !raw.is_empty() {
            self.mos.write(mapping_obj, 0, &raw)?;
        }
        self.mos.set_bonus(mapping_obj, &phys.encode()[..oxzfs_format::removal::MAPPING_PHYS_SIZE_V0])?;
        let births_obj = self.mos.alloc_object(DMU_OTN_UINT64_METADATA, 128 << 10, DMU_OTN_UINT64_METADATA, 8, 1)?;
        let mut b = Vec::new();
        b.extend_from_slice(&max_offset.to_le_bytes());
        b.extend_from_slice(&txg.to_le_bytes());
        self.mos.write(births_obj, 0, &b)?;
        self.mos.set_bonus(births_obj, &1u64.to_le_bytes())?;
        let prev = self
            .mos
            .zap_mut(1)?
            .entries
            .get(DMU_POOL_REMOVING.as_bytes())
            .and_then(|(_, w)| SpaRemovingPhys::from_words(w).ok())
            .map_or(u64::MAX, |p| p.prev_indirect_vdev);
        let rec = SpaRemovingPhys { state: 2, removing_vdev: top, prev_indirect_vdev: top, start_time, end_time: crate::dsl_scan::now(), to_copy: copied, copied };
        self.mos.zap_mut(1)?.entries.insert(DMU_POOL_REMOVING.as_bytes().to_vec(), (8, rec.to_words().to_vec()));
        self.feature_incr("com.delphix:device_removal", 1)?;
        // The vdev's metaslabs and leaf ZAPs go (the top-level ZAP stays, as OpenZFS keeps it).
        let (_, sms) = self.ms.lock().group_usage(top);
        self.free_vdev_metaslabs(top, sms)?;
        let mut cfg = self.config_nv.clone();
        let mut tree = cfg.get_nvlist("vdev_tree").cloned().unwrap_or_default();
        let mut tops: Vec<NvList> = tree.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
        let old = tops.get(top as usize).cloned().ok_or_else(|| ZfsError::Invalid(format!("pool '{}': vdev {top} is not in the config", self.spa.name)))?;
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
        ind.add_u64("com.delphix:indirect_object", mapping_obj);
        ind.add_u64("com.delphix:indirect_births", births_obj);
        if prev != u64::MAX {
            ind.add_u64("com.delphix:prev_indirect_vdev", prev);
        }
        if let Some(t) = old.get_u64("create_txg") {
            ind.add_u64("create_txg", t);
        }
        if let Some(z) = old.get_u64("com.delphix:vdev_zap_top") {
            ind.add_u64("com.delphix:vdev_zap_top", z);
        }
        tops[top as usize] = ind;
        tree.insert("children", NvValue::NvListArray(tops));
        cfg.add_nvlist("vdev_tree", tree);
        self.config_nv = cfg;
        self.config_dirty = true;
        self.sync()?;
        for leaf in tv.leaves() {
            if let Some(dev) = &leaf.dev {
                clear_labels(dev.as_ref())?;
            }
        }
        Ok(Evacuated { paths, copied, entries: mapping.entries.len() as u64 })
    }
}

impl PoolW {
    /// Whether this pool's removals leave oxzfs anything it cannot keep when writing: an
    /// evacuation OpenZFS left under way (its state is in its removal thread), a condensing
    /// of a mapping under way, or a removed vdev whose obsolete space is counted precisely
    /// (an obsolete space map, or counts OpenZFS promised precise): frees of its blocks would
    /// have to add to them, which oxzfs does not do yet. Such pools import read-only.
    pub(crate) fn check_removals_writable(&mut self) -> Result<()> {
        use oxzfs_format::removal::{SpaRemovingPhys, DMU_POOL_CONDENSING_INDIRECT, DMU_POOL_REMOVING, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM};
        let name = self.spa.name.clone();
        let refuse = |why: String| ZfsError::Unsupported(format!("cannot import '{name}' read-write: {why}, which oxzfs does not keep yet (import with -o readonly=on)"));
        let dir = self.mos.zap(1)?;
        if let Some(p) = dir.entries.get(DMU_POOL_REMOVING.as_bytes()).and_then(|(_, w)| SpaRemovingPhys::from_words(w).ok()) {
            if p.state == 1 {
                return Err(refuse(format!("the removal of vdev {} is in progress", p.removing_vdev)));
            }
        }
        if dir.entries.contains_key(DMU_POOL_CONDENSING_INDIRECT.as_bytes()) {
            return Err(refuse("the mapping of a removed vdev is being condensed".into()));
        }
        let root = self.spa.root_vdev.clone();
        for t in root.children.iter().filter(|t| t.indirect.is_some()) {
            let Some(zap) = self.config_nv.get_nvlist("vdev_tree").and_then(|tree| tree.get_nvlist_array("children")).and_then(|c| c.get(t.id as usize)).and_then(|c| c.get_u64("com.delphix:vdev_zap_top")) else { continue };
            for key in [VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM, "com.delphix:obsolete_counts_are_precise"] {
                if self.mos.zap_lookup(zap, key)?.is_some() {
                    return Err(refuse(format!("removed vdev {} counts its obsolete space ({key})", t.id)));
                }
            }
            if t.indirect.as_ref().and_then(|c| c.mapping.get()).is_some_and(|m| m.phys.counts_object != 0) {
                return Err(refuse(format!("removed vdev {} counts its obsolete space (a counts object)", t.id)));
            }
        }
        Ok(())
    }
}
