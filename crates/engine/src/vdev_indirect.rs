//! vdev_indirect: condensing the mapping of a removed vdev (OpenZFS vdev_indirect.c,
//! spa_condense_indirect_*). Blocks on a removed vdev are freed over time; what they covered
//! is obsolete (the mapping's counts object, a u32 per entry, plus the vdev's obsolete space
//! map). When enough of the mapping is obsolete the mapping is rewritten without the entries
//! nothing references any more, and the obsolete space map starts afresh:
//!
//! ```text
//!   should condense (vdev_indirect_should_condense, once per txg, one vdev at a time):
//!     zfs_condense_indirect_vdevs_enable, an indirect vdev (its evacuation finished) with an
//!     obsolete space map, and either obsolete bytes >= zfs_condense_indirect_obsolete_pct % of
//!     the bytes mapped (with the mapping over zfs_condense_min_mapping_bytes in memory) or the
//!     obsolete space map at least zfs_condense_max_obsolete_bytes long
//!   start (spa_condense_indirect_start_sync): a new mapping object (with a counts object under
//!     obsolete_counts); the vdev's obsolete space map leaves its top-level ZAP (the next free
//!     makes a new one); the MOS directory's com.delphix:condensing_indirect = {vdev, previous
//!     obsolete space map, new mapping}
//!   generate (spa_condense_indirect_generate_new_mapping): counts = the old counts object +
//!     the previous obsolete space map; each old entry not wholly obsolete is appended to the
//!     new mapping with its count
//!   complete (spa_condense_indirect_complete_sync): the old mapping and its counts object
//!     and the previous obsolete space map freed; the vdev's config names the new mapping;
//!     com.delphix:condensing_indirect removed
//! ```
//!
//! OpenZFS spreads generate over txgs from a thread; a mapping here is small enough to do all
//! three in the syncing txg, so a pool is never left mid-condense by oxzfs. One left so by
//! OpenZFS (or a crash of its) is finished in the first txg after a read-write import: the
//! new mapping's entries already written are kept and the rest appended, as OpenZFS's thread
//! resumes. Births are not touched (the births object maps offsets to txgs, not entries).

use crate::dsl_pool::PoolW;
use crate::vdev::indirect::IndirectMapping;
use crate::vdev::VdevKind;
use crate::{tunables, Result, ZfsError};
use oxzfs_format::removal::{decode_mapping_entries, IndirectMappingPhys, MappingEntryPhys, DMU_POOL_CONDENSING_INDIRECT, MAPPING_ENTRY_SIZE, MAPPING_PHYS_SIZE, MAPPING_PHYS_SIZE_V0, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM};
use oxzfs_format::spacemap::{SmEntry, SpaceMapPhys};
use std::sync::Arc;

/// The feature that counts obsolete space of removed vdevs precisely.
pub const OBSOLETE_COUNTS: &str = "com.delphix:obsolete_counts";

/// spa_condensing_indirect_phys_t, the MOS directory's record of a condense under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CondensingPhys {
    pub vdev: u64,
    pub prev_obsolete_sm: u64,
    pub next_mapping: u64,
}

impl PoolW {
    /// The condense under way, if the MOS directory records one.
    pub fn condensing_phys(&mut self) -> Result<Option<CondensingPhys>> {
        let Some((_, w)) = self.mos.zap(1)?.entries.get(DMU_POOL_CONDENSING_INDIRECT.as_bytes()).cloned() else { return Ok(None) };
        match w.as_slice() {
            [vdev, prev, next] => Ok(Some(CondensingPhys { vdev: *vdev, prev_obsolete_sm: *prev, next_mapping: *next })),
            _ => Err(ZfsError::Invalid(format!("pool '{}': {DMU_POOL_CONDENSING_INDIRECT} has {} words, not 3", self.spa.name, w.len()))),
        }
    }

    /// A new, empty mapping object (vdev_indirect_mapping_alloc): with obsolete_counts enabled
    /// its longer bonus names a counts object, which takes a reference of the feature.
    pub(crate) fn alloc_mapping_object(&mut self) -> Result<(u64, IndirectMappingPhys)> {
        use oxzfs_format::types::{DMU_OTN_UINT32_METADATA, DMU_OTN_UINT64_METADATA, DMU_OT_NONE};
        let precise = self.feature_enabled(OBSOLETE_COUNTS);
        let mut phys = IndirectMappingPhys::default();
        let bonus_len = if precise { MAPPING_PHYS_SIZE } else { MAPPING_PHYS_SIZE_V0 };
        let obj = self.mos.alloc_object(DMU_OTN_UINT64_METADATA, 128 << 10, DMU_OTN_UINT64_METADATA, bonus_len, 1)?;
        if precise {
            phys.counts_object = self.mos.alloc_object(DMU_OTN_UINT32_METADATA, 128 << 10, DMU_OT_NONE, 0, 1)?;
            self.feature_incr(OBSOLETE_COUNTS, 1)?;
        }
        self.mos.set_bonus(obj, &phys.encode()[..bonus_len])?;
        Ok((obj, phys))
    }

    /// Write `entries` (with their obsolete counts) at entry `first` of mapping object `obj`,
    /// and its bonus `phys` as it is with them (vdev_indirect_mapping_add_entries; see
    /// `extend_phys`).
    pub(crate) fn write_mapping_entries(&mut self, obj: u64, phys: &IndirectMappingPhys, first: u64, entries: &[MappingEntryPhys], counts: &[u32]) -> Result<()> {
        let raw: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
        self.mos.write(obj, first * MAPPING_ENTRY_SIZE as u64, &raw)?;
        if phys.counts_object != 0 {
            let raw: Vec<u8> = counts.iter().flat_map(|c| c.to_le_bytes()).collect();
            self.mos.write(phys.counts_object, first * 4, &raw)?;
            self.mos.set_bonus(obj, &phys.encode())
        } else {
            self.mos.set_bonus(obj, &phys.encode()[..MAPPING_PHYS_SIZE_V0])
        }
    }

    /// Free an obsolete space map object (space_map_free_obj), with the references it held.
    pub(crate) fn free_obsolete_sm_object(&mut self, sm: u64) -> Result<()> {
        let full = self.mos.dnode(sm)?.bonuslen as usize >= 320;
        self.mos.free_object(sm)?;
        if full {
            self.feature_incr("com.delphix:spacemap_histogram", -1)?;
        }
        self.feature_incr(OBSOLETE_COUNTS, -1)
    }

    /// spa_sync_condense_indirect and the condense itself, in the syncing txg before the MOS
    /// is written: a condense left under way is finished; else the first indirect vdev that
    /// should be condensed is.
    pub(crate) fn condense_indirect_sync(&mut self, txg: u64) -> Result<()> {
        self.condense_due = false;
        if let Some(scip) = self.condensing_phys()? {
            return self.condense_finish(scip, txg);
        }
        if !tunables::condense_indirect_vdevs_enable() {
            return Ok(());
        }
        let root = self.spa.root_vdev.clone();
        for top in root.children.iter().filter(|t| t.kind == VdevKind::Indirect) {
            let Some(sm) = self.obsolete_sm_of(top.id)? else { continue };
            let Some(m) = top.indirect.as_ref().and_then(|c| c.mapping()) else { continue };
            let phys = SpaceMapPhys::decode(&self.mos.bonus(sm)?, true).map_err(|e| ZfsError::corrupt(format!("obsolete space map {sm} of vdev {}", top.id), e))?;
            let (obsolete, mapped) = (phys.alloc.max(0) as u64, m.phys.bytes_mapped);
            let by_share = mapped > 0 && obsolete.saturating_mul(100) / mapped >= tunables::condense_indirect_obsolete_pct() && m.size() > tunables::condense_min_mapping_bytes();
            let by_length = phys.length >= tunables::condense_max_obsolete_bytes();
            if !(by_share || by_length) {
                continue;
            }
            tracing::info!(pool = %self.spa.name, vdev = top.id, obsolete, mapped, sm_length = phys.length, "condensing the mapping of a removed vdev");
            let scip = self.condense_start(top.id, sm)?;
            return self.condense_finish(scip, txg);
        }
        Ok(())
    }

    /// The obsolete space map of vdev `top`, if it has one.
    fn obsolete_sm_of(&mut self, top: u64) -> Result<Option<u64>> {
        let Some(zap) = self.top_zap(top) else { return Ok(None) };
        Ok(self.mos.zap_lookup(zap, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM)?.filter(|&o| o != 0))
    }

    /// spa_condense_indirect_start_sync.
    fn condense_start(&mut self, top: u64, prev_sm: u64) -> Result<CondensingPhys> {
        let (next, _) = self.alloc_mapping_object()?;
        let zap = self.top_zap(top).ok_or_else(|| ZfsError::Invalid(format!("vdev {top} has no top-level ZAP")))?;
        self.mos.zap_remove(zap, VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM)?;
        let scip = CondensingPhys { vdev: top, prev_obsolete_sm: prev_sm, next_mapping: next };
        self.mos.zap_mut(1)?.entries.insert(DMU_POOL_CONDENSING_INDIRECT.as_bytes().to_vec(), (8, vec![scip.vdev, scip.prev_obsolete_sm, scip.next_mapping]));
        Ok(scip)
    }

    /// What a condense under way needs from disk, read and checked (at a read-write import,
    /// so that a damaged one refuses the import instead of failing the first sync): the
    /// vdev's config and loaded mapping, its mapping object, each entry's obsolete count, and
    /// the new mapping's bonus and entries so far.
    pub(crate) fn condense_read(&mut self, scip: CondensingPhys) -> Result<CondenseRead> {
        let name = self.spa.name.clone();
        let bad = |what: String| ZfsError::Invalid(format!("pool '{name}': condensing vdev {}: {what}", scip.vdev));
        let top = self.spa.root_vdev.children.get(scip.vdev as usize).cloned().ok_or_else(|| bad("no such vdev".into()))?;
        let cfg = top.indirect.clone().ok_or_else(|| bad("not an indirect vdev".into()))?;
        let old = cfg.mapping().ok_or_else(|| bad("its mapping is not loaded".into()))?;
        let old_obj = self.top_config(scip.vdev).and_then(|c| c.get_u64("com.delphix:indirect_object")).ok_or_else(|| bad("no mapping object in the config".into()))?;
        // The counts: the old mapping's counts object, plus the previous obsolete space map.
        let n = old.entries.len();
        let mut counts = vec![0u64; n];
        if old.phys.counts_object != 0 && n > 0 {
            let raw = self.mos.read(old.phys.counts_object, 0, n * 4)?;
            for (c, b) in counts.iter_mut().zip(raw.chunks_exact(4)) {
                *c = u32::from_le_bytes(b.try_into().expect("4 bytes")) as u64;
            }
        }
        let sm = scip.prev_obsolete_sm;
        let (_, entries) = self.read_space_map(sm, &|e| bad(format!("obsolete space map {sm}: {e}")))?;
        for e in entries {
            if let SmEntry::Range { free: false, offset, run, .. } = e {
                add_obsolete(&old, &mut counts, offset, run).map_err(|e| bad(format!("obsolete space map {sm}: {e}")))?;
            }
        }
        // What the new mapping has already (a condense OpenZFS began).
        let dn = self.mos.dnode(scip.next_mapping)?;
        let phys = IndirectMappingPhys::decode(&dn.bonus, true).map_err(|e| bad(format!("mapping {}: {e}", scip.next_mapping)))?;
        let held = (dn.maxblkid + 1).saturating_mul(dn.data_block_size());
        if phys.num_entries.saturating_mul(MAPPING_ENTRY_SIZE as u64) > held {
            return Err(bad(format!("mapping {}: {} entries do not fit in its {held} bytes", scip.next_mapping, phys.num_entries)));
        }
        let new_entries = if phys.num_entries > 0 {
            let raw = self.mos.read(scip.next_mapping, 0, phys.num_entries as usize * MAPPING_ENTRY_SIZE)?;
            decode_mapping_entries(&raw, phys.num_entries, true).map_err(|e| bad(format!("mapping {}: {e}", scip.next_mapping)))?
        } else {
            Vec::new()
        };
        Ok(CondenseRead { cfg, old, old_obj, counts, phys, new_entries })
    }

    /// Generate what is left of the new mapping, then complete the condense.
    fn condense_finish(&mut self, scip: CondensingPhys, txg: u64) -> Result<()> {
        let name = self.spa.name.clone();
        let CondenseRead { cfg, old, old_obj, counts, mut phys, mut new_entries } = self.condense_read(scip)?;
        let n = old.entries.len();
        let start = if phys.max_offset == 0 { 0 } else { old.entries.partition_point(|e| e.src + e.size() <= phys.max_offset) };
        let (mut add, mut add_counts) = (Vec::new(), Vec::new());
        for (e, &c) in old.entries.iter().zip(&counts).skip(start) {
            if c < e.size() {
                add.push(*e);
                add_counts.push(c as u32);
            }
        }
        let first = phys.num_entries;
        extend_phys(&mut phys, &add);
        self.write_mapping_entries(scip.next_mapping, &phys, first, &add, &add_counts)?;
        new_entries.extend_from_slice(&add);
        // spa_condense_indirect_complete_sync.
        if old.phys.counts_object != 0 {
            self.mos.free_object(old.phys.counts_object)?;
            self.feature_incr(OBSOLETE_COUNTS, -1)?;
        }
        self.mos.free_object(old_obj)?;
        self.free_obsolete_sm_object(scip.prev_obsolete_sm)?;
        self.mos.zap_remove(1, DMU_POOL_CONDENSING_INDIRECT)?;
        self.edit_top_config(scip.vdev, |nv| nv.add_u64("com.delphix:indirect_object", scip.next_mapping))?;
        tracing::info!(pool = %name, vdev = scip.vdev, txg, mapping = scip.next_mapping, entries = new_entries.len(), was = n, "condensed the mapping of a removed vdev");
        let m = Arc::new(IndirectMapping { phys, entries: new_entries, births: old.births.clone() });
        cfg.set_mapping(m.clone());
        self.ms.lock().replace_mapping(scip.vdev, m);
        Ok(())
    }
}

/// What `condense_read` found on disk for a condense under way.
pub(crate) struct CondenseRead {
    cfg: Arc<crate::vdev::indirect::IndirectConfig>,
    old: Arc<IndirectMapping>,
    old_obj: u64,
    counts: Vec<u64>,
    phys: IndirectMappingPhys,
    new_entries: Vec<MappingEntryPhys>,
}

/// A mapping's bonus after `entries` are appended to it: the highest source offset mapped, the
/// bytes mapped, the number of entries.
pub(crate) fn extend_phys(phys: &mut IndirectMappingPhys, entries: &[MappingEntryPhys]) {
    if let Some(last) = entries.last() {
        phys.max_offset = last.src + last.size();
        phys.bytes_mapped += entries.iter().map(|e| e.size()).sum::<u64>();
        phys.num_entries += entries.len() as u64;
    }
}

/// Count `[offset, offset + run)` of the removed vdev as obsolete in the entries it covers
/// (vdev_indirect_mapping_increment_obsolete_count). A range outside the mapping, or one that
/// would make an entry more than wholly obsolete, is an error.
fn add_obsolete(m: &IndirectMapping, counts: &mut [u64], offset: u64, run: u64) -> std::result::Result<(), String> {
    let mut at = offset;
    let end = offset.checked_add(run).ok_or("range overflows")?;
    let mut i = m.entries.partition_point(|e| e.src <= at).checked_sub(1).ok_or_else(|| format!("{offset:#x} is below the mapping"))?;
    while at < end {
        let e = m.entries.get(i).ok_or_else(|| format!("{at:#x} is past the mapping"))?;
        if at < e.src || at >= e.src + e.size() {
            return Err(format!("{at:#x} is not mapped"));
        }
        let len = (e.src + e.size() - at).min(end - at);
        counts[i] += len;
        if counts[i] > e.size() {
            return Err(format!("entry at {:#x} counts {} obsolete bytes of {}", e.src, counts[i], e.size()));
        }
        at += len;
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxzfs_format::blkptr::Dva;

    fn entry(src: u64, size: u64) -> MappingEntryPhys {
        MappingEntryPhys { src, mark: false, dst: Dva { vdev: 1, offset: src * 2, asize: size, gang: false } }
    }

    #[test]
    fn obsolete_ranges_count_against_the_entries_they_cover() {
        let m = IndirectMapping { entries: vec![entry(0, 0x1000), entry(0x1000, 0x1000), entry(0x4000, 0x2000)], ..Default::default() };
        let mut c = vec![0; 3];
        add_obsolete(&m, &mut c, 0x800, 0x1000).unwrap();
        assert_eq!(c, vec![0x800, 0x800, 0]);
        add_obsolete(&m, &mut c, 0x4000, 0x2000).unwrap();
        assert_eq!(c, vec![0x800, 0x800, 0x2000]);
        // Past an entry's size, in a gap, or outside: refused.
        assert!(add_obsolete(&m, &mut c, 0x4000, 0x200).is_err());
        assert!(add_obsolete(&m, &mut c.clone(), 0x2000, 0x200).is_err());
        assert!(add_obsolete(&m, &mut c.clone(), 0x7000, 0x200).is_err());
    }
}
