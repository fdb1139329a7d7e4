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

pub const MMP_MAGIC: u64 = 0xa11cea11;
const MMP_SEQ_VALID_BIT: u64 = 0x02;

impl UberblockPhys {
    /// The multihost write sequence, 0 unless MMP is on and the sequence is valid.
    pub fn mmp_seq(&self) -> u64 {
        if self.mmp_magic == MMP_MAGIC && self.mmp_config & MMP_SEQ_VALID_BIT != 0 {
            (self.mmp_config >> 32) & 0xffff
        } else {
            0
        }
    }
}

/// vdev_uberblock_compare's order: txg, then timestamp, then MMP sequence.
pub fn compare_uberblocks(a: &UberblockPhys, b: &UberblockPhys) -> std::cmp::Ordering {
    (a.txg, a.timestamp, a.mmp_seq()).cmp(&(b.txg, b.timestamp, b.mmp_seq()))
}

/// The newest (see [`compare_uberblocks`]); of equals, the first seen, as OpenZFS keeps it.
pub fn best_uberblock<'a>(ubs: impl Iterator<Item = &'a UberblockPhys>) -> Option<&'a UberblockPhys> {
    let mut best: Option<&UberblockPhys> = None;
    for u in ubs {
        if best.is_none_or(|b| compare_uberblocks(u, b).is_gt()) {
            best = Some(u);
        }
    }
    best
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

    #[test]
    fn ties_break_on_mmp_sequence_then_first_seen() {
        let mut a = ub(5);
        let mut b = ub(5);
        assert!(std::ptr::eq(best_uberblock([&a, &b].into_iter()).unwrap(), &a));
        b.mmp_magic = MMP_MAGIC;
        b.mmp_config = (3 << 32) | MMP_SEQ_VALID_BIT;
        assert!(std::ptr::eq(best_uberblock([&a, &b].into_iter()).unwrap(), &b));
        a.timestamp += 1;
        assert!(std::ptr::eq(best_uberblock([&a, &b].into_iter()).unwrap(), &a));
        assert!(best_uberblock(std::iter::empty()).is_none());
    }

    /// Slot 41 of label 0's ring on the `basic` fixture (1K slots, ashift 9), as written by
    /// zfs-fuse: the nonzero head (208 bytes) and the checksum trailer.
    fn real_slot() -> (Vec<u8>, u64) {
        let head = concat!(
            "0cb1ba000000000017000000000000002900000000000000390b21e8543ed1c2f3a0026b000000000100000000000000",
            "f24600000000000001000000000000006aa0000000000000010000000000000058f40000000000000300000003070b80",
            "00000000000000000000000000000000000000000000000029000000000000001f00000000000000ae3371f211000000",
            "74ba095b73060000449aee6c9c320100a6e430086c332700000000000000000000000000000000000000000000000000",
            "00000000000000000000000000000000",
        );
        let mut b = hex::decode(head).unwrap();
        b.resize(1024 - 40, 0);
        b.extend(hex::decode("117a0cb17ada10021d857de319947a676fea8b482f077ba4b3c452bda95d5d2ddfdcbfd49281e1a6").unwrap());
        (b, (128 << 10) + 41 * 1024)
    }

    #[test]
    fn real_uberblock_slot() {
        let (slot, off) = real_slot();
        let u = decode_uberblock(&slot, off).unwrap();
        // zdb -lu: Uberblock[41].
        assert_eq!((u.magic, u.version, u.txg), (UBERBLOCK_MAGIC, 23, 41));
        assert_eq!(u.guid_sum, 14038070047883201337);
        assert_eq!(u.timestamp, 1795334387);
        assert_eq!((u.mmp_magic, u.checkpoint_txg), (0, 0));
        assert!(u.little_endian);
        assert_eq!(&u.rootbp_raw[..], &slot[40..168]);
        assert_eq!(encode_uberblock(&u, 1024, off), slot);
        assert!(matches!(decode_uberblock(&slot, off + 1024), Err(FormatError::Checksum { .. })));
        // In a ring.
        let mut ring = vec![0u8; 128 << 10];
        ring[41 * 1024..42 * 1024].copy_from_slice(&slot);
        let ubs = decode_ring(&ring, 128 << 10, 9);
        assert_eq!(ubs, vec![u]);
        assert!(decode_uberblock(&slot[..100], off).is_err());
        assert!(decode_uberblock(&[0u8; 1024], off).is_err());
    }

    #[test]
    fn big_endian_round_trip() {
        let mut u = ub(77);
        u.little_endian = false;
        let b = encode_uberblock(&u, 8192, 1 << 20);
        assert_eq!(&b[..8], &UBERBLOCK_MAGIC.to_be_bytes());
        assert_eq!(decode_uberblock(&b, 1 << 20).unwrap(), u);
        assert_eq!(uberblock_slot_size(9), 1024);
        assert_eq!(uberblock_slot_size(16), 8192);
    }

    /// All four labels of the real fixture device, when /work/shared is present: configs and
    /// uberblock rings as `zdb -lu` shows them.
    #[test]
    fn fixture_device_labels() {
        use crate::label::{decode_label_config, encode_label_config, label_offset, VDEV_LABELS, VDEV_PHYS_OFFSET, VDEV_PHYS_SIZE, VDEV_UBERBLOCK_RING_OFFSET};
        use std::io::Read;
        let Ok(f) = std::fs::File::open("/work/shared/fixtures/basic/d0.zst") else { return };
        let mut dev = Vec::new();
        zstd::stream::read::Decoder::new(f).unwrap().read_to_end(&mut dev).unwrap();
        assert_eq!(dev.len(), 64 << 20);
        for i in 0..VDEV_LABELS {
            let at = label_offset(i, dev.len() as u64);
            let phys = &dev[(at + VDEV_PHYS_OFFSET) as usize..][..VDEV_PHYS_SIZE];
            let l = decode_label_config(phys, at + VDEV_PHYS_OFFSET).unwrap();
            assert_eq!(l.get_u64("txg"), Some(41), "label {i}");
            assert_eq!(l.get_nvlist("vdev_tree").unwrap().get_u64("guid"), Some(14576290548776215872));
            assert_eq!(encode_label_config(&l, at + VDEV_PHYS_OFFSET).unwrap(), phys, "label {i}");
            let ring_at = at + VDEV_UBERBLOCK_RING_OFFSET;
            let ubs = decode_ring(&dev[ring_at as usize..], ring_at, 9);
            assert_eq!(ubs.len(), 16, "label {i}");
            let best = best_uberblock(ubs.iter()).unwrap();
            assert_eq!((best.txg, best.timestamp, best.guid_sum), (41, 1795334387, 14038070047883201337));
        }
    }
}
