//! vdev_dtl: each leaf's dirty time log — the txgs whose blocks the leaf lacks (OpenZFS's
//! DTL_MISSING, vdev.c vdev_dtl_*) — kept in the MOS and brought up to date by every txg sync.
//!
//! ```text
//!   leaf config (MOS copy of the vdev tree): DTL = <object>
//!   object: DMU_OT_SPACE_MAP, 4 KiB blocks, bonus space_map_phys_t (DMU_OT_SPACE_MAP_HEADER;
//!           320 bytes with the histogram when spacemap_histogram is enabled — each such
//!           object counts once in that feature's refcount — else 24)
//!   entries: a space map of start 0 and shift 0 whose "offsets" are txgs: one ALLOC entry per
//!            range [txg, txg + n) the leaf missed; rewritten whole (truncated, then the ranges)
//!            whenever the DTL changed, as vdev_dtl_sync does
//! ```
//!
//! A leaf misses a txg when the txg syncs while the leaf is offline, removed (`vdev_probe`) or
//! missing under a mirror, raidz or replacing vdev (vdev_dtl_dirty from the writes that skipped it); a leaf attached
//! or put in by `zpool replace` misses every txg before it joined. Reads go to the other
//! children first while a leaf's DTL is not empty (see `vdev::Vdev::is_stale`), a resilver
//! rewrites what the DTL names and then empties it (`dsl_scrub`). The in-memory DTL lives in
//! the leaf's `VdevStats`; this module loads it at import and writes it in syncing context.

use crate::dsl_pool::PoolW;
use crate::vdev::{Vdev, VdevKind, VdevState};
use crate::{Result, ZfsError};
use oxzfs_format::nvlist::{NvList, NvValue};
use oxzfs_format::spacemap::{decode_entries, encode_entries, SmEntry, SpaceMapPhys};
use oxzfs_format::types;
use std::sync::atomic::Ordering;

/// zfs_vdev_dtl_sm_blksz.
const DTL_SM_BLKSZ: u64 = 4096;
/// Largest DTL space map read back (a DTL holds a handful of ranges).
const MAX_DTL_BYTES: u64 = 16 << 20;
const HISTOGRAM: &str = "com.delphix:spacemap_histogram";

impl PoolW {
    /// Syncing context of `txg`: the txg goes into the DTL of every leaf it skips (offline,
    /// removed or missing below a redundant vdev), and every DTL that changed is written to its space map
    /// (created, and named in the leaf's config, on first use). Runs before the MOS syncs.
    pub(crate) fn dtl_sync(&mut self, txg: u64) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        self.removed_sync();
        let mut changed: Vec<&Vdev> = Vec::new();
        for top in root.children.iter().filter(|t| redundant(t)) {
            for leaf in top.leaves() {
                if leaf.stats.removed.load(Ordering::Relaxed) {
                    // Gone before the previous txg's sync was done, perhaps in the middle of
                    // its writes: that txg is missed too (see `vdev_probe`).
                    let at = *leaf.stats.removed_at.lock().unwrap_or_else(|p| p.into_inner());
                    let from = if at.map_or(true, |t| t <= self.last_sync) { txg.saturating_sub(1).max(1) } else { txg };
                    leaf.stats.dtl_add(from, txg + 1);
                } else if matches!(leaf.state(), VdevState::Offline | VdevState::Unavail) || leaf.out_of_use() {
                    leaf.stats.dtl_add(txg, txg + 1);
                } else if leaf.stats.write_failed.swap(false, Ordering::Relaxed) {
                    // A write failed on it since the last of these: during this txg's sync, or
                    // after the last one's DTL update (its MOS, its labels).
                    leaf.stats.dtl_add(txg.saturating_sub(1).max(1), txg + 1);
                }
            }
        }
        for leaf in root.leaves() {
            if leaf.stats.dtl_dirty.swap(false, Ordering::Relaxed) {
                changed.push(leaf);
            }
        }
        for leaf in changed {
            self.dtl_write(leaf)?;
        }
        Ok(())
    }

    /// Syncing context: the config's `removed` key follows each leaf's REMOVED state
    /// (vdev_state_dirty after spa_async_remove, vdev_open clearing vdev_removed).
    pub(crate) fn removed_sync(&mut self) {
        let root = self.spa.root_vdev.clone();
        for leaf in root.leaves() {
            let removed = leaf.stats.removed.load(Ordering::Relaxed);
            let mut changed = false;
            edit_leaf(&mut self.config_nv, leaf.guid, &mut |nv| {
                let has = nv.get_u64("removed").unwrap_or(0) != 0;
                if removed && !has {
                    nv.add_u64("removed", 1);
                    changed = true;
                } else if !removed && nv.get("removed").is_some() {
                    nv.remove("removed");
                    changed = true;
                }
            });
            self.config_dirty |= changed;
        }
    }

    /// vdev_dtl_sync for one leaf (none for a leaf the config no longer has: being detached).
    fn dtl_write(&mut self, leaf: &Vdev) -> Result<()> {
        let ranges: Vec<(u64, u64)> = leaf.stats.dtl.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(&a, &b)| (a, b)).collect();
        let obj = leaf.stats.dtl_object.load(Ordering::Relaxed);
        if let Some(obj) = self.dtl_write_for(leaf.guid, obj, &ranges)? {
            leaf.stats.dtl_object.store(obj, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Write DTL `ranges` of leaf `guid` to its space map `obj` (0: a new one, named in the
    /// leaf's config): the object, None when the config has no such leaf.
    pub(crate) fn dtl_write_for(&mut self, guid: u64, obj: u64, ranges: &[(u64, u64)]) -> Result<Option<u64>> {
        let mut obj = obj;
        if !edit_leaf(&mut self.config_nv, guid, &mut |_| {}) {
            return Ok(None);
        }
        let histogram = self.version >= crate::spa::SPA_VERSION_FEATURES && self.feature_enabled(HISTOGRAM);
        if obj == 0 || !self.mos.exists(obj) {
            let bonus = if histogram { 320 } else { 24 };
            obj = self.mos.alloc_object(types::DMU_OT_SPACE_MAP, DTL_SM_BLKSZ, types::DMU_OT_SPACE_MAP_HEADER, bonus, 1)?;
            if histogram {
                self.feature_incr(HISTOGRAM, 1)?;
            }
            edit_leaf(&mut self.config_nv, guid, &mut |nv| nv.add_u64("DTL", obj));
            self.config_dirty = true;
        }
        let entries: Vec<SmEntry> = ranges.iter().map(|&(a, b)| SmEntry::Range { free: false, offset: a, run: b - a, vdev: None }).collect();
        let mut bytes = Vec::new();
        for w in encode_entries(&entries, false) {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        self.mos.truncate(obj, 0)?;
        if !bytes.is_empty() {
            self.mos.write(obj, 0, &bytes)?;
        }
        let bonuslen = self.mos.dnode(obj)?.bonuslen as usize;
        let phys = SpaceMapPhys { object: obj, length: bytes.len() as u64, alloc: ranges.iter().map(|&(a, b)| (b - a) as i64).sum(), histogram: [0; 32] };
        self.mos.set_bonus(obj, &phys.encode(bonuslen))?;
        Ok(Some(obj))
    }

    /// Free a DTL space map (a leaf detached: vdev_dtl_sync of a detached vdev), leaving the
    /// feature refcount as space_map_free does.
    pub(crate) fn dtl_free(&mut self, obj: u64) -> Result<()> {
        if obj == 0 || !self.mos.exists(obj) {
            return Ok(());
        }
        let counted = self.mos.dnode(obj)?.bonuslen as usize == 320;
        self.mos.free_object(obj)?;
        if counted && self.version >= crate::spa::SPA_VERSION_FEATURES && self.feature_enabled(HISTOGRAM) {
            self.feature_incr(HISTOGRAM, -1)?;
        }
        Ok(())
    }

    /// vdev_dtl_load of every leaf that has a DTL object (at open).
    pub(crate) fn dtl_load(&mut self) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        for leaf in root.leaves() {
            let obj = leaf.stats.dtl_object.load(Ordering::Relaxed);
            if obj == 0 {
                continue;
            }
            let what = || format!("pool '{}' leaf {} DTL object {obj}", self.spa.name, leaf.display_name());
            let phys = SpaceMapPhys::decode(&self.mos.bonus(obj)?, true).map_err(|e| ZfsError::corrupt(what(), e))?;
            if phys.length > MAX_DTL_BYTES {
                return Err(ZfsError::Invalid(format!("{}: {} bytes of entries, more than a DTL holds", what(), phys.length)));
            }
            let words = self.mos.read(obj, 0, phys.length as usize)?;
            let mut dtl = std::collections::BTreeMap::new();
            for e in decode_entries(&words, true).map_err(|e| ZfsError::corrupt(what(), e))? {
                if let SmEntry::Range { free, offset, run, .. } = e {
                    if free {
                        dtl.retain(|&a, &mut b: &mut u64| !(a >= offset && b <= offset + run));
                    } else {
                        dtl.insert(offset, offset.saturating_add(run));
                    }
                }
            }
            leaf.stats.dtl_set(dtl);
        }
        Ok(())
    }
}

/// A top-level vdev whose leaves can miss txgs without the pool losing data.
fn redundant(top: &Vdev) -> bool {
    matches!(top.kind, VdevKind::Mirror | VdevKind::Raidz { .. } | VdevKind::Draid(_) | VdevKind::ReplacingOrSpare(_))
}

/// Apply `f` to the config nvlist of vdev `guid` (a leaf, or an interior vdev below the root)
/// in `config`'s vdev tree; false when the tree has no such vdev. `f` may replace the whole
/// node.
pub(crate) fn edit_leaf(config: &mut NvList, guid: u64, f: &mut dyn FnMut(&mut NvList)) -> bool {
    fn walk(nv: &mut NvList, guid: u64, f: &mut dyn FnMut(&mut NvList), depth: usize) -> bool {
        if depth > 8 {
            return false;
        }
        if depth > 0 && nv.get_u64("guid") == Some(guid) {
            f(nv);
            return true;
        }
        match nv.get_nvlist_array("children").map(|a| a.to_vec()) {
            Some(mut kids) => {
                let hit = kids.iter_mut().any(|k| walk(k, guid, f, depth + 1));
                if hit {
                    nv.insert("children", NvValue::NvListArray(kids));
                }
                hit
            }
            None => false,
        }
    }
    let Some(mut tree) = config.get_nvlist("vdev_tree").cloned() else { return false };
    let hit = walk(&mut tree, guid, f, 0);
    if hit {
        config.add_nvlist("vdev_tree", tree);
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtl_ranges_merge_and_clear() {
        let s = crate::vdev::VdevStats::default();
        assert!(!s.stale());
        s.dtl_add(10, 11);
        s.dtl_add(11, 12);
        s.dtl_add(20, 21);
        assert_eq!(s.dtl.lock().unwrap().iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(), vec![(10, 12), (20, 21)]);
        assert_eq!(s.dtl_bounds(), Some((10, 21)));
        s.dtl_dirty.store(false, Ordering::Relaxed);
        s.dtl_add(10, 12);
        assert!(!s.dtl_dirty.load(Ordering::Relaxed), "a range already there changes nothing");
        s.dtl_clear_below(20);
        assert_eq!(s.dtl_bounds(), Some((20, 21)));
        s.dtl_clear_below(21);
        assert!(!s.stale());
    }

    /// A two-way mirror over two temporary files (leaf guids 1 and 2).
    fn mirror(tag: &str) -> (std::sync::Arc<Vdev>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("oxzfs-dtl-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut devices = crate::vdev::DeviceMap::new();
        let mut kids = Vec::new();
        for g in [1u64, 2] {
            let p = dir.join(format!("d{g}"));
            std::fs::File::create(&p).unwrap().set_len(8 << 20).unwrap();
            devices.insert(g, (p.clone(), crate::vdev::open_device(&p, true).unwrap()));
            let mut n = NvList::new();
            n.add_str("type", "file");
            n.add_u64("guid", g);
            n.add_str("path", &p.display().to_string());
            kids.push(n);
        }
        let mut m = NvList::new();
        m.add_str("type", "mirror");
        m.add_u64("ashift", 9);
        m.insert("children", NvValue::NvListArray(kids));
        (Vdev::from_config(&m, &devices, 0).unwrap(), dir)
    }

    #[test]
    fn stale_sides_are_read_last_and_written_by_resilvers_and_scrubs() {
        use crate::vdev::ReadMode;
        let want: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let verify = |d: &[u8]| d == want.as_slice();
        for (tag, mode) in [("resilver", ReadMode::resilver()), ("scrub", ReadMode::new(true, true))] {
            let (m, dir) = mirror(tag);
            m.write(0, &want).unwrap();
            let side = &m.children[1];
            side.write_leaf(0, &[0u8; 4096]).unwrap(); // the txg it missed
            side.stats.dtl_add(5, 6);
            // An ordinary read goes to the whole side first: no error charged to the stale one.
            assert_eq!(m.read_mode(0, 4096, &verify, &crate::vdev::READ_HEAL).unwrap(), want);
            assert_eq!(side.stats.cksum_errors.load(Ordering::Relaxed), 0);
            assert_ne!(side.read_leaf(0, 4096).unwrap(), want, "a plain read rewrote a stale side");
            // A resilver or scrub writes the block there, still without a CKSUM error.
            assert_eq!(m.read_mode(0, 4096, &verify, &mode).unwrap(), want);
            assert_eq!(side.read_leaf(0, 4096).unwrap(), want, "{tag} left the stale side as it was");
            assert_eq!((side.stats.cksum_errors.load(Ordering::Relaxed), mode.repaired.load(Ordering::Relaxed)), (0, 4096), "{tag}");
            assert_eq!(side.stats.scan_processed.load(Ordering::Relaxed), 4096);
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn edit_leaf_finds_a_leaf_under_a_mirror() {
        let leaf = |g: u64| {
            let mut n = NvList::new();
            n.add_str("type", "file");
            n.add_u64("guid", g);
            n
        };
        let mut mirror = NvList::new();
        mirror.add_str("type", "mirror");
        mirror.insert("children", NvValue::NvListArray(vec![leaf(1), leaf(2)]));
        let mut root = NvList::new();
        root.add_str("type", "root");
        root.insert("children", NvValue::NvListArray(vec![mirror]));
        let mut cfg = NvList::new();
        cfg.add_nvlist("vdev_tree", root);
        assert!(edit_leaf(&mut cfg, 2, &mut |n| n.add_u64("DTL", 77)));
        assert!(!edit_leaf(&mut cfg, 3, &mut |n| n.add_u64("DTL", 1)));
        let m = &cfg.get_nvlist("vdev_tree").unwrap().get_nvlist_array("children").unwrap()[0];
        assert_eq!(m.get_nvlist_array("children").unwrap()[1].get_u64("DTL"), Some(77));
        assert_eq!(m.get_nvlist_array("children").unwrap()[0].get_u64("DTL"), None);
    }
}
