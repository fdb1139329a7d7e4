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
    /// Remove cache device `guid` from the pool: out of the L2ARC now, out of the MOS's l2cache
    /// list with a txg synced here. Returns its path as the list had it.
    pub fn remove_cache_device(&mut self, guid: u64) -> Result<String> {
        let name = self.spa.name.clone();
        let mut list = self.take_aux_list("l2cache")?;
        let Some(i) = list.iter().position(|d| d.get_u64("guid") == Some(guid)) else {
            self.put_aux_list("l2cache", list)?;
            return Err(ZfsError::Posix(libc::ENOENT, format!("cannot remove {guid}: no such device in pool '{name}'")));
        };
        let gone = list.remove(i);
        self.spa.l2arc.remove_device(guid);
        self.put_aux_list("l2cache", list)?;
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
fn clear_labels(dev: &dyn crate::vdev::BlockDevice) -> Result<()> {
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
