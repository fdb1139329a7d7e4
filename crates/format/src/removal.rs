//! Device removal's on-disk structures (OpenZFS vdev_indirect_mapping.h, vdev_indirect_births.h,
//! spa_impl.h): what an indirect vdev — the place of a removed top-level vdev — keeps in the MOS.
//!
//! ```text
//!   mapping object (DMU_OTN_UINT64_METADATA), bonus vdev_indirect_mapping_phys_t:
//!     vimp_max_offset | vimp_bytes_mapped | vimp_num_entries | vimp_counts_object
//!     (24 bytes in the first version, without the counts object)
//!   its data: vimp_num_entries entries of 24 bytes, sorted by source offset:
//!     vimep_src  : mark(1) | source offset >> 9 (63)
//!     vimep_dst  : a DVA (2 words); its asize is the length of the mapped range
//!   births object, bonus vdev_indirect_births_phys_t: vib_count;
//!     data: vib_count entries { vibe_offset, vibe_phys_birth_txg }: everything below
//!     vibe_offset was copied in txg vibe_phys_birth_txg
//!   MOS directory "com.delphix:removing" (7 u64s, spa_removing_phys_t):
//!     sr_state | sr_removing_vdev | sr_prev_indirect_vdev | sr_start_time | sr_end_time |
//!     sr_to_copy | sr_copied          (state: dsl_scan_state_t, vdev ids -1 for none)
//! ```
use crate::blkptr::Dva;
use crate::bytes::u64_at;
use crate::Result;

/// Bytes of one vdev_indirect_mapping_entry_phys_t.
pub const MAPPING_ENTRY_SIZE: usize = 24;
/// Bytes of one vdev_indirect_birth_entry_phys_t.
pub const BIRTH_ENTRY_SIZE: usize = 16;
/// The bonus of a mapping object without its counts object (VDEV_INDIRECT_MAPPING_SIZE_V0).
pub const MAPPING_PHYS_SIZE_V0: usize = 24;
/// The bonus of a mapping object with the counts object.
pub const MAPPING_PHYS_SIZE: usize = 32;
/// Words of spa_removing_phys_t.
pub const REMOVING_PHYS_WORDS: usize = 7;
/// The MOS directory entry holding spa_removing_phys_t.
pub const DMU_POOL_REMOVING: &str = "com.delphix:removing";
/// The MOS directory entry holding spa_condensing_indirect_phys_t.
pub const DMU_POOL_CONDENSING_INDIRECT: &str = "com.delphix:condensing_indirect";
/// The top-level vdev ZAP key of an indirect vdev's obsolete space map.
pub const VDEV_TOP_ZAP_INDIRECT_OBSOLETE_SM: &str = "com.delphix:indirect_obsolete_sm";

/// vdev_indirect_mapping_phys_t.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndirectMappingPhys {
    pub max_offset: u64,
    pub bytes_mapped: u64,
    pub num_entries: u64,
    /// 0 when the bonus is of the first version (no obsolete counts).
    pub counts_object: u64,
}

impl IndirectMappingPhys {
    pub fn decode(b: &[u8], le: bool) -> Result<IndirectMappingPhys> {
        let w = |i: usize| u64_at(b, i * 8, le, "indirect mapping phys");
        let counts_object = if b.len() >= MAPPING_PHYS_SIZE { w(3)? } else { 0 };
        Ok(IndirectMappingPhys { max_offset: w(0)?, bytes_mapped: w(1)?, num_entries: w(2)?, counts_object })
    }

    pub fn encode(&self) -> [u8; MAPPING_PHYS_SIZE] {
        let mut b = [0u8; MAPPING_PHYS_SIZE];
        for (i, v) in [self.max_offset, self.bytes_mapped, self.num_entries, self.counts_object].into_iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// One vdev_indirect_mapping_entry_phys_t: `[src, src + dst.asize)` of the removed vdev now
/// lives at `dst`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingEntryPhys {
    pub src: u64,
    /// zdb's garbage-collection mark (bit 63 of the first word).
    pub mark: bool,
    pub dst: Dva,
}

impl MappingEntryPhys {
    pub fn size(&self) -> u64 {
        self.dst.asize
    }

    pub fn decode(b: &[u8], le: bool) -> Result<MappingEntryPhys> {
        let w0 = u64_at(b, 0, le, "indirect mapping entry")?;
        let d0 = u64_at(b, 8, le, "indirect mapping entry")?;
        let d1 = u64_at(b, 16, le, "indirect mapping entry")?;
        Ok(MappingEntryPhys { src: (w0 & !(1u64 << 63)) << 9, mark: w0 >> 63 != 0, dst: Dva::decode(d0, d1) })
    }

    pub fn encode(&self) -> [u8; MAPPING_ENTRY_SIZE] {
        let mut b = [0u8; MAPPING_ENTRY_SIZE];
        let w0 = ((self.mark as u64) << 63) | ((self.src >> 9) & !(1u64 << 63));
        let (d0, d1) = self.dst.encode();
        b[0..8].copy_from_slice(&w0.to_le_bytes());
        b[8..16].copy_from_slice(&d0.to_le_bytes());
        b[16..24].copy_from_slice(&d1.to_le_bytes());
        b
    }
}

/// Decode a mapping object's data: `n` entries, checked sorted and not overlapping.
pub fn decode_mapping_entries(b: &[u8], n: u64, le: bool) -> Result<Vec<MappingEntryPhys>> {
    let need = (n as usize).checked_mul(MAPPING_ENTRY_SIZE).filter(|&x| x <= b.len());
    let Some(need) = need else {
        return Err(crate::error::FormatError::Truncated { what: "indirect mapping entries", need: n as usize * MAPPING_ENTRY_SIZE, have: b.len() });
    };
    let mut out = Vec::with_capacity(n as usize);
    let mut end = 0u64;
    for c in b[..need].chunks_exact(MAPPING_ENTRY_SIZE) {
        let e = MappingEntryPhys::decode(c, le)?;
        if e.src < end || e.size() == 0 {
            return Err(crate::error::FormatError::invalid("indirect mapping entry", format!("entry at {:#x} (size {:#x}) overlaps or follows {end:#x}", e.src, e.size())));
        }
        end = e.src + e.size();
        out.push(e);
    }
    Ok(out)
}

/// One vdev_indirect_birth_entry_phys_t.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BirthEntryPhys {
    pub offset: u64,
    pub phys_birth_txg: u64,
}

pub fn decode_birth_entries(b: &[u8], n: u64, le: bool) -> Result<Vec<BirthEntryPhys>> {
    let need = (n as usize).checked_mul(BIRTH_ENTRY_SIZE).filter(|&x| x <= b.len());
    let Some(need) = need else {
        return Err(crate::error::FormatError::Truncated { what: "indirect births entries", need: n as usize * BIRTH_ENTRY_SIZE, have: b.len() });
    };
    b[..need]
        .chunks_exact(BIRTH_ENTRY_SIZE)
        .map(|c| Ok(BirthEntryPhys { offset: u64_at(c, 0, le, "births entry")?, phys_birth_txg: u64_at(c, 8, le, "births entry")? }))
        .collect()
}

/// spa_removing_phys_t.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaRemovingPhys {
    /// dsl_scan_state_t: 0 none, 1 scanning (evacuating), 2 finished, 3 canceled.
    pub state: u64,
    /// The vdev most recently removed or being removed, u64::MAX for none.
    pub removing_vdev: u64,
    /// The vdev most recently removed to completion, u64::MAX for none.
    pub prev_indirect_vdev: u64,
    pub start_time: u64,
    pub end_time: u64,
    pub to_copy: u64,
    pub copied: u64,
}

impl SpaRemovingPhys {
    pub fn from_words(w: &[u64]) -> Result<SpaRemovingPhys> {
        if w.len() < REMOVING_PHYS_WORDS {
            return Err(crate::error::FormatError::Truncated { what: "spa_removing_phys", need: REMOVING_PHYS_WORDS * 8, have: w.len() * 8 });
        }
        Ok(SpaRemovingPhys { state: w[0], removing_vdev: w[1], prev_indirect_vdev: w[2], start_time: w[3], end_time: w[4], to_copy: w[5], copied: w[6] })
    }

    pub fn to_words(&self) -> [u64; REMOVING_PHYS_WORDS] {
        [self.state, self.removing_vdev, self.prev_indirect_vdev, self.start_time, self.end_time, self.to_copy, self.copied]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_entry_round_trip() {
        let e = MappingEntryPhys { src: 0x1234_5600, mark: true, dst: Dva { vdev: 2, offset: 0x80_0000, asize: 0x2_0000, gang: false } };
        let b = e.encode();
        assert_eq!(MappingEntryPhys::decode(&b, true).unwrap(), e);
        // The source offset is in 512-byte units in the low 63 bits.
        assert_eq!(u64::from_le_bytes(b[0..8].try_into().unwrap()), (1 << 63) | (0x1234_5600 >> 9));
    }

    #[test]
    fn overlapping_entries_refused() {
        let a = MappingEntryPhys { src: 0, mark: false, dst: Dva { vdev: 1, offset: 0, asize: 0x1000, gang: false } };
        let b = MappingEntryPhys { src: 0x800, ..a };
        let mut raw = a.encode().to_vec();
        raw.extend_from_slice(&b.encode());
        assert!(decode_mapping_entries(&raw, 2, true).is_err());
        assert!(decode_mapping_entries(&raw, 3, true).is_err());
        assert_eq!(decode_mapping_entries(&raw[..24], 1, true).unwrap(), vec![a]);
    }
}
