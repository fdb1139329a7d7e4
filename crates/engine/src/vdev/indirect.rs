//! vdev::indirect: the place of a removed top-level vdev (OpenZFS vdev_indirect.c). Its blocks
//! were copied to other vdevs; block pointers still name the old vdev and offset, and a read
//! goes through the mapping: the sorted entries `[src, src + size) → dst DVA` of the mapping
//! object, a block that straddles entries read piece by piece from each destination and put
//! back together (a destination may itself be indirect: the lookup repeats, bounded).
//!
//! The vdev tree is built from the config before the MOS can be read; the mapping, which lives
//! in the MOS, is set after the MOS is open (spa_load), and replaced when a condense
//! (spa_condense_indirect_*, in `vdev_removal`) rewrites it without its obsolete entries: the
//! new mapping maps every range a block pointer may still name as the old one did.

use crate::{Result, ZfsError};
use oxzfs_format::removal::{BirthEntryPhys, IndirectMappingPhys, MappingEntryPhys};
use std::sync::{Arc, RwLock};

/// What the config says of an indirect vdev, and its mapping once loaded.
#[derive(Debug, Default)]
pub struct IndirectConfig {
    /// `com.delphix:indirect_object`: the mapping object in the MOS.
    pub mapping_object: u64,
    /// `com.delphix:indirect_births`: the births object in the MOS.
    pub births_object: u64,
    /// `com.delphix:prev_indirect_vdev`: the vdev removed before this one (u64::MAX: none).
    pub prev_indirect_vdev: u64,
    mapping: RwLock<Option<Arc<IndirectMapping>>>,
}

/// An indirect vdev's mapping and births, as read from the MOS.
#[derive(Debug, Default)]
pub struct IndirectMapping {
    pub phys: IndirectMappingPhys,
    pub entries: Vec<MappingEntryPhys>,
    pub births: Vec<BirthEntryPhys>,
}

/// One piece of a remapped range: `len` bytes at `offset` of top-level vdev `vdev`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub vdev: u64,
    pub offset: u64,
    pub len: u64,
}

impl IndirectMapping {
    /// The memory OpenZFS counts for this mapping (vdev_indirect_mapping_size): its entries
    /// as they sit in memory.
    pub fn size(&self) -> u64 {
        self.phys.num_entries * oxzfs_format::removal::MAPPING_ENTRY_SIZE as u64
    }

    /// The destinations of `[offset, offset + size)` of the removed vdev, in order. Every byte
    /// must be mapped: a gap is corruption (a block pointer naming space that was not allocated
    /// when the vdev was removed).
    pub fn remap(&self, offset: u64, size: u64) -> std::result::Result<Vec<Piece>, String> {
        let mut out = Vec::new();
        let mut at = offset;
        let end = offset.checked_add(size).ok_or("offset overflow")?;
        // The last entry starting at or before `at` (vdev_indirect_mapping_entry_for_offset).
        let mut i = self.entries.partition_point(|e| e.src <= at);
        if i == 0 {
            return Err(format!("offset {offset:#x} is below the first mapped range"));
        }
        i -= 1;
        while at < end {
            let e = self.entries.get(i).ok_or_else(|| format!("range {at:#x}..{end:#x} is past the last mapped range"))?;
            let e_end = e.src + e.size();
            if at < e.src || at >= e_end {
                return Err(format!("offset {at:#x} is not mapped"));
            }
            let len = (e_end - at).min(end - at);
            out.push(Piece { vdev: e.dst.vdev, offset: e.dst.offset + (at - e.src), len });
            at += len;
            i += 1;
        }
        Ok(out)
    }

    /// The txg in which the copy of `offset` was made (vdev_indirect_births_physbirth): the
    /// first births entry whose offset is above it.
    pub fn phys_birth(&self, offset: u64) -> Option<u64> {
        let i = self.births.partition_point(|b| b.offset <= offset);
        self.births.get(i).map(|b| b.phys_birth_txg)
    }
}

impl IndirectConfig {
    pub fn new(mapping_object: u64, births_object: u64, prev_indirect_vdev: u64) -> IndirectConfig {
        IndirectConfig { mapping_object, births_object, prev_indirect_vdev, mapping: RwLock::new(None) }
    }

    /// The mapping, once loaded.
    pub fn mapping(&self) -> Option<Arc<IndirectMapping>> {
        self.mapping.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Load the mapping, or replace it with its condensed form.
    pub fn set_mapping(&self, m: Arc<IndirectMapping>) {
        *self.mapping.write().unwrap_or_else(|p| p.into_inner()) = Some(m);
    }

    /// The loaded mapping, or an error naming the vdev when the MOS has not been read yet.
    pub fn loaded(&self, id: u64) -> Result<Arc<IndirectMapping>> {
        self.mapping().ok_or_else(|| ZfsError::Invalid(format!("indirect vdev {id}: its mapping (object {}) is not loaded", self.mapping_object)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxzfs_format::blkptr::Dva;

    fn entry(src: u64, vdev: u64, dst: u64, size: u64) -> MappingEntryPhys {
        MappingEntryPhys { src, mark: false, dst: Dva { vdev, offset: dst, asize: size, gang: false } }
    }

    #[test]
    fn remap_splits_across_entries() {
        let m = IndirectMapping {
            entries: vec![entry(0x1000, 1, 0x9000, 0x1000), entry(0x2000, 2, 0x4000, 0x2000), entry(0x8000, 1, 0x0, 0x200)],
            ..Default::default()
        };
        assert_eq!(m.remap(0x1200, 0x200).unwrap(), vec![Piece { vdev: 1, offset: 0x9200, len: 0x200 }]);
        assert_eq!(
            m.remap(0x1800, 0x1000).unwrap(),
            vec![Piece { vdev: 1, offset: 0x9800, len: 0x800 }, Piece { vdev: 2, offset: 0x4000, len: 0x800 }]
        );
        // Gaps and ranges outside the mapping are refused.
        assert!(m.remap(0x800, 0x200).is_err());
        assert!(m.remap(0x3e00, 0x400).is_err());
        assert!(m.remap(0x8100, 0x200).is_err());
        assert_eq!(m.remap(0x8000, 0x200).unwrap().len(), 1);
    }

    #[test]
    fn births_lookup() {
        let m = IndirectMapping {
            births: vec![BirthEntryPhys { offset: 0x10000, phys_birth_txg: 7 }, BirthEntryPhys { offset: 0x40000, phys_birth_txg: 9 }],
            ..Default::default()
        };
        assert_eq!(m.phys_birth(0), Some(7));
        assert_eq!(m.phys_birth(0x10000), Some(9));
        assert_eq!(m.phys_birth(0x40000), None);
    }
}
