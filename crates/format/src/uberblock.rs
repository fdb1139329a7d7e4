//! Uberblocks: the root of a pool's tree, written to a ring in every label each txg.
//!
//! ```text
//!   0 magic (0x00bab10c)  8 version  16 txg  24 guid_sum  32 timestamp  40 root bp (128)
//! 168 software_version  176 mmp_magic  184 mmp_delay  192 mmp_config  200 checkpoint_txg
//! ```
//! The ring (128K) holds slots of 1 << clamp(ashift, 10, 13) bytes, each with a sha256 trailer
//! whose verifier is the slot's absolute device offset. The active uberblock is the valid one
//! with the highest txg (then timestamp).

use crate::bytes::u64_at;
use crate::checksum::{verify_embedded, write_embedded, ZIO_CHECKSUM_LABEL};
use crate::label::VDEV_UBERBLOCK_RING;
use crate::{FormatError, Result};

pub const UBERBLOCK_MAGIC: u64 = 0x00bab10c;
pub const UBERBLOCK_SHIFT: u64 = 10;
pub const MAX_UBERBLOCK_SHIFT: u64 = 13;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UberblockPhys {
    pub magic: u64,
    pub version: u64,
    pub txg: u64,
    pub guid_sum: u64,
    pub timestamp: u64,
    pub rootbp_raw: [u8; 128],
    pub software_version: u64,
    pub mmp_magic: u64,
    pub mmp_delay: u64,
    pub mmp_config: u64,
    pub checkpoint_txg: u64,
    pub little_endian: bool,
}

pub fn uberblock_slot_size(ashift: u64) -> usize {
    1 << ashift.clamp(UBERBLOCK_SHIFT, MAX_UBERBLOCK_SHIFT)
}

pub fn decode_uberblock(slot: &[u8], slot_offset: u64) -> Result<UberblockPhys> {
    let m = u64_at(slot, 0, true, "uberblock")?;
    let le = if m == UBERBLOCK_MAGIC {
        true
    } else if m.swap_bytes() == UBERBLOCK_MAGIC {
        false
    } else {
        return Err(FormatError::BadMagic { what: "uberblock", found: m });
    };
    if !verify_embedded(slot, ZIO_CHECKSUM_LABEL, [slot_offset, 0, 0, 0])? {
        return Err(FormatError::Checksum { what: "uberblock" });
    }
    let w = |o: usize| u64_at(slot, o, le, "uberblock");
    let mut rootbp_raw = [0u8; 128];
    rootbp_raw.copy_from_slice(crate::bytes::slice(slot, 40, 128, "uberblock")?);
    Ok(UberblockPhys {
        magic: UBERBLOCK_MAGIC,
        version: w(8)?,
        txg: w(16)?,
        guid_sum: w(24)?,
        timestamp: w(32)?,
        rootbp_raw,
        software_version: w(168)?,
        mmp_magic: w(176)?,
        mmp_delay: w(184)?,
        mmp_config: w(192)?,
        checkpoint_txg: w(200)?,
        little_endian: le,
    })
}

/// Every valid uberblock of a ring that starts at device offset `ring_offset`.
pub fn decode_ring(ring: &[u8], ring_offset: u64, ashift: u64) -> Vec<UberblockPhys> {
    let slot = uberblock_slot_size(ashift);
    let ring = &ring[..ring.len().min(VDEV_UBERBLOCK_RING)];
    ring.chunks_exact(slot)
        .enumerate()
        .filter_map(|(i, s)| decode_uberblock(s, ring_offset + (i * slot) as u64).ok())
        .collect()
}

/// The newest: highest txg, then timestamp.
pub fn best_uberblock<'a>(ubs: impl Iterator<Item = &'a UberblockPhys>) -> Option<&'a UberblockPhys> {
    ubs.max_by(|a, b| (a.txg, a.timestamp).cmp(&(b.txg, b.timestamp)))
}

pub fn encode_uberblock(ub: &UberblockPhys, slot_size: usize, slot_offset: u64) -> Vec<u8> {
    let le = ub.little_endian;
    let mut b = vec![0u8; slot_size];
    let put = |b: &mut [u8], o: usize, v: u64| b[o..o + 8].copy_from_slice(&if le { v.to_le_bytes() } else { v.to_be_bytes() });
    put(&mut b, 0, UBERBLOCK_MAGIC);
    put(&mut b, 8, ub.version);
    put(&mut b, 16, ub.txg);
    put(&mut b, 24, ub.guid_sum);
    put(&mut b, 32, ub.timestamp);
    b[40..168].copy_from_slice(&ub.rootbp_raw);
    put(&mut b, 168, ub.software_version);
    put(&mut b, 176, ub.mmp_magic);
    put(&mut b, 184, ub.mmp_delay);
    put(&mut b, 192, ub.mmp_config);
    put(&mut b, 200, ub.checkpoint_txg);
    write_embedded(&mut b, ZIO_CHECKSUM_LABEL, [slot_offset, 0, 0, 0], le);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ub(txg: u64) -> UberblockPhys {
        UberblockPhys {
            magic: UBERBLOCK_MAGIC,
            version: 5000,
            txg,
            guid_sum: 99,
            timestamp: 1000 + txg,
            rootbp_raw: [7; 128],
            software_version: 0,
            mmp_magic: 0,
            mmp_delay: 0,
            mmp_config: 0,
            checkpoint_txg: 0,
            little_endian: true,
        }
    }

    #[test]
    fn ring_picks_newest_valid() {
        let slot = uberblock_slot_size(12);
        assert_eq!(slot, 4096);
        let base = 128 << 10;
        let mut ring = vec![0u8; 128 << 10];
        for (i, t) in [5u64, 9, 7].iter().enumerate() {
            let mut u = ub(*t);
            u.little_endian = i != 2;
            ring[i * slot..(i + 1) * slot].copy_from_slice(&encode_uberblock(&u, slot, base + (i * slot) as u64));
        }
        // Corrupt the txg 9 copy: it must be skipped.
        ring[slot + 100] ^= 1;
        let ubs = decode_ring(&ring, base, 12);
        assert_eq!(ubs.len(), 2);
        assert_eq!(best_uberblock(ubs.iter()).unwrap().txg, 7);
        assert!(!best_uberblock(ubs.iter()).unwrap().little_endian);
    }
}
