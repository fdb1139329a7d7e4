//! l2arc: the persistent L2ARC's on-disk structures (OpenZFS 2.0+, include/sys/arc_impl.h):
//! the device header and the log blocks that say which pool blocks a cache device holds.
//!
//! ```text
//!   cache device
//!   | L0 L1 | boot | dev hdr (512 B, padded to 1 << ashift) | buf buf … logblk buf … | L2 L3 |
//!   0             4M (VDEV_LABEL_START_SIZE)                 ^ dh_start        dh_end ^
//!
//!   l2arc_dev_hdr_phys_t (512 bytes; zio_eck_t, label checksum with the header's offset as
//!   verifier, at the end of the padded block)
//!     0 magic "ZFSCACHE"  8 version (1)  16 spa guid  24 vdev guid  32 log entries per block
//!     40 evict hand  48 flags (EVICT_FIRST)  56 start  64 end  72 start_lbps[2] (2 × 64)
//!     200 lb_asize  208 lb_count  216 trim action time  224 trim state  232 pad  472 eck
//!   l2arc_log_blkptr_t (64 bytes)
//!     0 daddr  8 payload asize  16 payload start  24 prop (lsize, asize, compress, checksum)
//!     32 fletcher-4 of the (lz4-compressed, asize-padded) log block
//!   l2arc_log_blk_phys_t (64 KiB before compression)
//!     0 magic "LOGBLKHD"  8 prev lbp (64)  72 pad  128 entries[1022] × 64:
//!       0 dva (2 words)  16 birth  24 prop  32 daddr  40 complevel  48 pad
//!   le_prop / lbp_prop bits: 0-15 lsize/512-1, 16-31 psize/512-1, 32-38 compress,
//!     39 prefetch, 40-47 checksum, 48-55 type (arc_buf_contents_t), 56 protected, 57-60 state
//! ```
//!
//! Two chains are interleaved: each new log block points back to the block before the
//! previous one (`lb_prev_lbp` = `dh_start_lbps[1]` at commit), and the header holds the two
//! newest. Log blocks are written lz4-compressed when that saves anything, padded to the
//! device's sector, and checksummed with fletcher-4 over the padded bytes. Structures are in
//! the writer's byte order; the magic tells which.

use crate::checksum::{self, ZIO_CHECKSUM_FLETCHER_4, ZIO_CHECKSUM_LABEL};
use crate::compress::{self, ZIO_COMPRESS_LZ4, ZIO_COMPRESS_OFF};
use crate::error::{FormatError, Result};

pub const L2ARC_DEV_HDR_MAGIC: u64 = 0x5a46_5343_4143_4845; // "ZFSCACHE"
pub const L2ARC_LOG_BLK_MAGIC: u64 = 0x4c4f_4742_4c4b_4844; // "LOGBLKHD"
pub const L2ARC_PERSISTENT_VERSION: u64 = 1;
pub const L2ARC_DEV_HDR_EVICT_FIRST: u64 = 1;
pub const L2ARC_LOG_BLK_MAX_ENTRIES: usize = 1022;
/// sizeof (l2arc_dev_hdr_phys_t).
pub const L2ARC_DEV_HDR_SIZE: usize = 512;
/// sizeof (l2arc_log_ent_phys_t).
pub const L2ARC_LOG_ENT_SIZE: usize = 64;
/// sizeof (l2arc_log_blkptr_t).
pub const L2ARC_LOG_BLKPTR_SIZE: usize = 64;
const LOG_BLK_HEADER: usize = 128;
/// sizeof (l2arc_log_blk_phys_t): 64 KiB.
pub const L2ARC_LOG_BLK_SIZE: usize = LOG_BLK_HEADER + L2ARC_LOG_BLK_MAX_ENTRIES * L2ARC_LOG_ENT_SIZE;
const _: () = assert!(L2ARC_LOG_BLK_SIZE == 65536);
const _: () = assert!(232 + 30 * 8 + 40 == L2ARC_DEV_HDR_SIZE);

/// arc_buf_contents_t, as le_prop's type field holds it.
pub const ARC_BUFC_DATA: u64 = 0;
pub const ARC_BUFC_METADATA: u64 = 1;
/// arc_state_type_t values le_prop's state field holds (2.1 writes MRU 2 or MFU 4).
pub const ARC_STATE_MRU: u64 = 2;
pub const ARC_STATE_MFU: u64 = 4;

fn bf_get(w: u64, low: u32, len: u32) -> u64 {
    (w >> low) & ((1u64 << len) - 1)
}

fn bf_set(w: &mut u64, low: u32, len: u32, v: u64) {
    let mask = ((1u64 << len) - 1) << low;
    *w = (*w & !mask) | ((v << low) & mask);
}

/// The packed size/compress/type word of a log entry or log block pointer (L2BLK_*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2Prop(pub u64);

impl L2Prop {
    pub fn lsize(&self) -> u64 {
        (bf_get(self.0, 0, 16) + 1) << 9
    }
    pub fn psize(&self) -> u64 {
        (bf_get(self.0, 16, 16) + 1) << 9
    }
    pub fn compress(&self) -> u8 {
        bf_get(self.0, 32, 7) as u8
    }
    pub fn prefetch(&self) -> bool {
        bf_get(self.0, 39, 1) != 0
    }
    pub fn checksum(&self) -> u8 {
        bf_get(self.0, 40, 8) as u8
    }
    pub fn typ(&self) -> u64 {
        bf_get(self.0, 48, 8)
    }
    pub fn protected(&self) -> bool {
        bf_get(self.0, 56, 1) != 0
    }
    pub fn state(&self) -> u64 {
        bf_get(self.0, 57, 4)
    }
    /// Sizes are multiples of 512 from 512 to 32 MiB (asserted: a caller's bug otherwise).
    pub fn set_lsize(&mut self, v: u64) {
        assert!(v >= 512 && v % 512 == 0 && (v >> 9) <= 1 << 16, "L2ARC lsize {v}");
        bf_set(&mut self.0, 0, 16, (v >> 9) - 1);
    }
    pub fn set_psize(&mut self, v: u64) {
        assert!(v >= 512 && v % 512 == 0 && (v >> 9) <= 1 << 16, "L2ARC psize {v}");
        bf_set(&mut self.0, 16, 16, (v >> 9) - 1);
    }
    pub fn set_compress(&mut self, v: u8) {
        bf_set(&mut self.0, 32, 7, v as u64);
    }
    pub fn set_prefetch(&mut self, v: bool) {
        bf_set(&mut self.0, 39, 1, v as u64);
    }
    pub fn set_checksum(&mut self, v: u8) {
        bf_set(&mut self.0, 40, 8, v as u64);
    }
    pub fn set_typ(&mut self, v: u64) {
        bf_set(&mut self.0, 48, 8, v);
    }
    pub fn set_protected(&mut self, v: bool) {
        bf_set(&mut self.0, 56, 1, v as u64);
    }
    pub fn set_state(&mut self, v: u64) {
        bf_set(&mut self.0, 57, 4, v);
    }
}

fn get(buf: &[u8], off: usize, le: bool) -> u64 {
    let b: [u8; 8] = buf[off..off + 8].try_into().expect("8 bytes");
    if le {
        u64::from_le_bytes(b)
    } else {
        u64::from_be_bytes(b)
    }
}

/// The byte order a structure starting with `magic` was written in (true: little-endian).
fn byte_order(buf: &[u8], magic: u64, what: &'static str) -> Result<bool> {
    match get(buf, 0, true) {
        m if m == magic => Ok(true),
        m if m.swap_bytes() == magic => Ok(false),
        found => Err(FormatError::BadMagic { what, found }),
    }
}

fn put(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// l2arc_log_blkptr_t: where a log block is and what it covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2LogBlkPtr {
    pub daddr: u64,
    pub payload_asize: u64,
    pub payload_start: u64,
    pub prop: L2Prop,
    pub cksum: [u64; 4],
}

impl L2LogBlkPtr {
    fn decode(buf: &[u8], le: bool) -> L2LogBlkPtr {
        L2LogBlkPtr {
            daddr: get(buf, 0, le),
            payload_asize: get(buf, 8, le),
            payload_start: get(buf, 16, le),
            prop: L2Prop(get(buf, 24, le)),
            cksum: [get(buf, 32, le), get(buf, 40, le), get(buf, 48, le), get(buf, 56, le)],
        }
    }
    fn encode(&self, buf: &mut [u8]) {
        put(buf, 0, self.daddr);
        put(buf, 8, self.payload_asize);
        put(buf, 16, self.payload_start);
        put(buf, 24, self.prop.0);
        for (i, w) in self.cksum.iter().enumerate() {
            put(buf, 32 + 8 * i, *w);
        }
    }
    /// The aligned size of the log block on the device (L2BLK_GET_PSIZE of lbp_prop).
    pub fn asize(&self) -> u64 {
        self.prop.psize()
    }
}

/// l2arc_dev_hdr_phys_t.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct L2DevHdrPhys {
    pub version: u64,
    pub spa_guid: u64,
    pub vdev_guid: u64,
    pub log_entries: u64,
    pub evict: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    pub start_lbps: [L2LogBlkPtr; 2],
    pub lb_asize: u64,
    pub lb_count: u64,
    pub trim_action_time: u64,
    pub trim_state: u64,
}

impl L2DevHdrPhys {
    /// The header as written at `offset` (VDEV_LABEL_START_SIZE) in a block of `asize` bytes
    /// (512 or the device's sector), little-endian, with its label checksum at the end.
    pub fn encode(&self, asize: usize, offset: u64) -> Vec<u8> {
        assert!(asize >= L2ARC_DEV_HDR_SIZE && asize % 512 == 0, "L2ARC header block of {asize} bytes");
        let mut b = vec![0u8; asize];
        put(&mut b, 0, L2ARC_DEV_HDR_MAGIC);
        put(&mut b, 8, self.version);
        put(&mut b, 16, self.spa_guid);
        put(&mut b, 24, self.vdev_guid);
        put(&mut b, 32, self.log_entries);
        put(&mut b, 40, self.evict);
        put(&mut b, 48, self.flags);
        put(&mut b, 56, self.start);
        put(&mut b, 64, self.end);
        self.start_lbps[0].encode(&mut b[72..136]);
        self.start_lbps[1].encode(&mut b[136..200]);
        put(&mut b, 200, self.lb_asize);
        put(&mut b, 208, self.lb_count);
        put(&mut b, 216, self.trim_action_time);
        put(&mut b, 224, self.trim_state);
        checksum::write_embedded(&mut b, ZIO_CHECKSUM_LABEL, [offset, 0, 0, 0], true);
        b
    }

    /// Decode a header block read at `offset`. A block without the magic or whose checksum
    /// fails is an error (the device is then treated as holding no persistent L2ARC).
    pub fn decode(buf: &[u8], offset: u64) -> Result<L2DevHdrPhys> {
        if buf.len() < L2ARC_DEV_HDR_SIZE {
            return Err(FormatError::Truncated { what: "L2ARC device header", need: L2ARC_DEV_HDR_SIZE, have: buf.len() });
        }
        let le = byte_order(buf, L2ARC_DEV_HDR_MAGIC, "L2ARC device header")?;
        if !checksum::verify_embedded(buf, ZIO_CHECKSUM_LABEL, [offset, 0, 0, 0])? {
            return Err(FormatError::Checksum { what: "L2ARC device header" });
        }
        Ok(L2DevHdrPhys {
            version: get(buf, 8, le),
            spa_guid: get(buf, 16, le),
            vdev_guid: get(buf, 24, le),
            log_entries: get(buf, 32, le),
            evict: get(buf, 40, le),
            flags: get(buf, 48, le),
            start: get(buf, 56, le),
            end: get(buf, 64, le),
            start_lbps: [L2LogBlkPtr::decode(&buf[72..136], le), L2LogBlkPtr::decode(&buf[136..200], le)],
            lb_asize: get(buf, 200, le),
            lb_count: get(buf, 208, le),
            trim_action_time: get(buf, 216, le),
            trim_state: get(buf, 224, le),
        })
    }
}

/// l2arc_log_ent_phys_t: one pool block held on the cache device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2LogEntPhys {
    /// The block's first DVA as its two raw words.
    pub dva: [u64; 2],
    pub birth: u64,
    pub prop: L2Prop,
    pub daddr: u64,
    pub complevel: u64,
}

/// l2arc_log_blk_phys_t, decoded: the pointer back in its chain and its entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct L2LogBlkPhys {
    pub prev_lbp: L2LogBlkPtr,
    pub entries: Vec<L2LogEntPhys>,
}

impl L2LogBlkPhys {
    /// The 64 KiB logical block (unused entries zero).
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.entries.len() <= L2ARC_LOG_BLK_MAX_ENTRIES, "{} L2ARC log entries", self.entries.len());
        let mut b = vec![0u8; L2ARC_LOG_BLK_SIZE];
        put(&mut b, 0, L2ARC_LOG_BLK_MAGIC);
        self.prev_lbp.encode(&mut b[8..72]);
        for (i, e) in self.entries.iter().enumerate() {
            let o = LOG_BLK_HEADER + i * L2ARC_LOG_ENT_SIZE;
            put(&mut b, o, e.dva[0]);
            put(&mut b, o + 8, e.dva[1]);
            put(&mut b, o + 16, e.birth);
            put(&mut b, o + 24, e.prop.0);
            put(&mut b, o + 32, e.daddr);
            put(&mut b, o + 40, e.complevel);
        }
        b
    }

    /// Decode the 64 KiB logical block, keeping its first `nentries` entries.
    pub fn decode(buf: &[u8], nentries: usize) -> Result<L2LogBlkPhys> {
        if buf.len() < L2ARC_LOG_BLK_SIZE {
            return Err(FormatError::Truncated { what: "L2ARC log block", need: L2ARC_LOG_BLK_SIZE, have: buf.len() });
        }
        if nentries > L2ARC_LOG_BLK_MAX_ENTRIES {
            return Err(FormatError::invalid("L2ARC log block", format!("{nentries} entries per block (at most {L2ARC_LOG_BLK_MAX_ENTRIES})")));
        }
        let le = byte_order(buf, L2ARC_LOG_BLK_MAGIC, "L2ARC log block")?;
        let entries = (0..nentries)
            .map(|i| {
                let o = LOG_BLK_HEADER + i * L2ARC_LOG_ENT_SIZE;
                L2LogEntPhys {
                    dva: [get(buf, o, le), get(buf, o + 8, le)],
                    birth: get(buf, o + 16, le),
                    prop: L2Prop(get(buf, o + 24, le)),
                    daddr: get(buf, o + 32, le),
                    complevel: get(buf, o + 40, le),
                }
            })
            .collect();
        Ok(L2LogBlkPhys { prev_lbp: L2LogBlkPtr::decode(&buf[8..72], le), entries })
    }

    /// The block as l2arc_log_blk_commit writes it at `daddr` on a device of sector `1 <<
    /// ashift`: the bytes (lz4-compressed when that makes it smaller, zero-padded to the
    /// sector) and the pointer to it (payload fields from the caller).
    pub fn commit(&self, daddr: u64, ashift: u8, payload_asize: u64, payload_start: u64) -> (Vec<u8>, L2LogBlkPtr) {
        let raw = self.encode();
        let sector = 1usize << ashift.clamp(9, 16);
        let round = |n: usize| n.div_ceil(sector) * sector;
        let (mut bytes, comp) = match compress::compress(ZIO_COMPRESS_LZ4, 0, &raw, raw.len() - 1) {
            Some(c) if round(c.len()) < raw.len() => (c, ZIO_COMPRESS_LZ4),
            _ => (raw, ZIO_COMPRESS_OFF),
        };
        bytes.resize(round(bytes.len()), 0);
        let mut prop = L2Prop::default();
        prop.set_lsize(L2ARC_LOG_BLK_SIZE as u64);
        prop.set_psize(bytes.len() as u64);
        prop.set_checksum(ZIO_CHECKSUM_FLETCHER_4);
        prop.set_compress(comp);
        let lbp = L2LogBlkPtr { daddr, payload_asize, payload_start, prop, cksum: checksum::fletcher4(&bytes, true) };
        (bytes, lbp)
    }

    /// Read back a block `lbp` names from the bytes at its address (`asize` of them):
    /// checksum, decompress, decode (l2arc_log_blk_read).
    pub fn read(bytes: &[u8], lbp: &L2LogBlkPtr, nentries: usize) -> Result<L2LogBlkPhys> {
        let asize = lbp.asize() as usize;
        if bytes.len() < asize || asize > L2ARC_LOG_BLK_SIZE {
            return Err(FormatError::invalid("L2ARC log block", format!("{asize} bytes at {} (have {})", lbp.daddr, bytes.len())));
        }
        let bytes = &bytes[..asize];
        if checksum::fletcher4(bytes, true) != lbp.cksum && checksum::fletcher4(bytes, false) != lbp.cksum {
            return Err(FormatError::Checksum { what: "L2ARC log block" });
        }
        let raw = match lbp.prop.compress() {
            ZIO_COMPRESS_OFF => bytes.to_vec(),
            ZIO_COMPRESS_LZ4 => compress::decompress(ZIO_COMPRESS_LZ4, bytes, L2ARC_LOG_BLK_SIZE)?,
            c => return Err(FormatError::unsupported("L2ARC log block", format!("compression {c}"))),
        };
        L2LogBlkPhys::decode(&raw, nentries)
    }
}

/// l2arc_range_check_overlap: whether `check` lies in the ring range written from `bottom`
/// (earlier) to `top` (later), which may wrap past the device's end.
pub fn range_check_overlap(bottom: u64, top: u64, check: u64) -> bool {
    if bottom < top {
        bottom <= check && check <= top
    } else if bottom > top {
        check <= top || bottom <= check
    } else {
        check == top
    }
}

/// The ring's hands as l2arc_log_blkptr_valid judges a log block pointer against them.
#[derive(Clone, Copy, Debug)]
pub struct L2Hands {
    pub start: u64,
    pub end: u64,
    pub hand: u64,
    pub evict: u64,
    pub first: bool,
}

impl L2Hands {
    /// l2arc_log_blkptr_valid: the block and its payload fit the device and none of them was
    /// evicted (overwritten) since.
    pub fn lbp_valid(&self, lbp: &L2LogBlkPtr) -> bool {
        let asize = lbp.asize();
        let end = (lbp.daddr + asize).wrapping_sub(1);
        let start = lbp.payload_start;
        let evicted = range_check_overlap(start, end, self.hand)
            || range_check_overlap(start, end, self.evict)
            || range_check_overlap(self.hand, self.evict, start)
            || range_check_overlap(self.hand, self.evict, end);
        start >= self.start && end <= self.end && asize > 0 && asize <= L2ARC_LOG_BLK_SIZE as u64 && (!evicted || self.first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prop_bits_are_openzfs_macros() {
        let mut p = L2Prop::default();
        p.set_lsize(128 << 10);
        p.set_psize(4096);
        p.set_compress(ZIO_COMPRESS_LZ4);
        p.set_prefetch(true);
        p.set_typ(ARC_BUFC_METADATA);
        p.set_state(ARC_STATE_MFU);
        // lsize 128K -> 255, psize 4K -> 7 << 16, lz4 15 << 32, prefetch bit 39, type 48, state 57.
        assert_eq!(p.0, 255 | (7 << 16) | (15 << 32) | (1 << 39) | (1 << 48) | (4 << 57));
        assert_eq!((p.lsize(), p.psize(), p.compress(), p.prefetch(), p.typ(), p.state()), (128 << 10, 4096, 15, true, 1, 4));
        assert!(!p.protected());
    }

    fn sample_hdr() -> L2DevHdrPhys {
        L2DevHdrPhys {
            version: 1,
            spa_guid: 0x1234,
            vdev_guid: 0x5678,
            log_entries: 7,
            evict: 5 << 20,
            flags: L2ARC_DEV_HDR_EVICT_FIRST,
            start: (4 << 20) + 512,
            end: 100 << 20,
            start_lbps: [L2LogBlkPtr { daddr: 9 << 20, payload_asize: 1 << 20, payload_start: 8 << 20, prop: L2Prop(99), cksum: [1, 2, 3, 4] }, L2LogBlkPtr::default()],
            lb_asize: 4096,
            lb_count: 1,
            trim_action_time: 0,
            trim_state: 0,
        }
    }

    #[test]
    fn header_round_trips_and_checks_its_checksum() {
        let h = sample_hdr();
        for asize in [512, 4096] {
            let b = h.encode(asize, 4 << 20);
            assert_eq!(b.len(), asize);
            assert_eq!(&b[0..8], b"EHCACSFZ", "magic in little-endian order");
            assert_eq!(L2DevHdrPhys::decode(&b, 4 << 20).unwrap(), h);
            // The checksum covers every byte and the offset it was written at.
            assert!(matches!(L2DevHdrPhys::decode(&b, 8 << 20), Err(FormatError::Checksum { .. })));
            let mut bad = b.clone();
            bad[300] ^= 1;
            assert!(matches!(L2DevHdrPhys::decode(&bad, 4 << 20), Err(FormatError::Checksum { .. })));
        }
        assert!(matches!(L2DevHdrPhys::decode(&[0u8; 512], 4 << 20), Err(FormatError::BadMagic { .. })));
        assert!(matches!(L2DevHdrPhys::decode(&[0u8; 100], 4 << 20), Err(FormatError::Truncated { .. })));
    }

    #[test]
    fn log_block_commits_compressed_and_reads_back() {
        let entries: Vec<L2LogEntPhys> = (0..7u64)
            .map(|i| {
                let mut prop = L2Prop::default();
                prop.set_lsize(128 << 10);
                prop.set_psize(128 << 10);
                prop.set_compress(ZIO_COMPRESS_OFF);
                L2LogEntPhys { dva: [(1 << 32) | 256, 1000 + i * 256], birth: 40 + i, prop, daddr: (5 << 20) + i * (128 << 10), complevel: 0 }
            })
            .collect();
        let lb = L2LogBlkPhys { prev_lbp: L2LogBlkPtr { daddr: 77 << 9, ..Default::default() }, entries };
        let (bytes, lbp) = lb.commit(6 << 20, 12, 7 * (128 << 10), 5 << 20);
        assert_eq!(lbp.prop.compress(), ZIO_COMPRESS_LZ4, "a mostly empty log block compresses");
        assert_eq!(bytes.len() % 4096, 0);
        assert_eq!(lbp.asize(), bytes.len() as u64);
        assert_eq!(lbp.prop.lsize(), 65536);
        assert_eq!(lbp.prop.checksum(), ZIO_CHECKSUM_FLETCHER_4);
        assert_eq!(L2LogBlkPhys::read(&bytes, &lbp, 7).unwrap(), lb);
        let mut bad = bytes.clone();
        bad[10] ^= 0x40;
        assert!(matches!(L2LogBlkPhys::read(&bad, &lbp, 7), Err(FormatError::Checksum { .. })));
        assert!(L2LogBlkPhys::read(&bytes[..512], &lbp, 7).is_err());
        assert!(L2LogBlkPhys::decode(&vec![0u8; 65536], 1).is_err());
        assert!(L2LogBlkPhys::decode(&lb.encode(), 5000).is_err());
    }

    #[test]
    fn ring_ranges_wrap() {
        assert!(range_check_overlap(10, 20, 15));
        assert!(!range_check_overlap(10, 20, 25));
        assert!(range_check_overlap(20, 10, 25) && range_check_overlap(20, 10, 5));
        assert!(!range_check_overlap(20, 10, 15));
        let h = L2Hands { start: 100, end: 10_000, hand: 3000, evict: 4000, first: false };
        let mut p = L2Prop::default();
        p.set_psize(512);
        let lbp = |daddr, payload_start| L2LogBlkPtr { daddr, payload_start, prop: p, ..Default::default() };
        assert!(h.lbp_valid(&lbp(2000, 1000)));
        assert!(!h.lbp_valid(&lbp(3500, 3200)), "evicted: between the hands");
        assert!(!h.lbp_valid(&lbp(20_000, 1000)), "past the end");
        assert!(h.lbp_valid(&lbp(5000, 4500)), "behind the evict hand, not yet overwritten");
    }
}
