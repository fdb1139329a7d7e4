//! The dedup table's on-disk records (ddt.h, ddt.c, ddt_zap.c): the key and value of a DDT ZAP
//! entry, and the histogram kept per table and class in the "DDT-statistics" ZAP.
//!
//! ```text
//!   MOS directory: "DDT-<checksum>-zap-<class>" → a ZAP of type DDT_ZAP, flags HASH64 |
//!                  UINT64_KEY (| PRE_HASHED_KEY for dedup-strong checksums); class is
//!                  "ditto", "duplicate" (total refcount > 1) or "unique"
//!                  "DDT-statistics" → a ZAP: the same names → ddt_histogram_t (512 u64)
//!   key   (5 u64): cksum[4] | prop: lsize-1 (16 bits, 512-byte units) | psize-1 (16) |
//!                  compress (7) | crypt (1)
//!   value (bytes): one header byte (compression function, 0x80 = little-endian), then the
//!                  four ddt_phys_t (ditto, single, double, triple copies), ZLE-compressed
//!                  (raw when that saves nothing)
//!   ddt_phys_t (64 bytes): dva[3] (16 bytes each) | refcnt | phys_birth
//!   ddt_stat_t (8 u64): blocks lsize psize dsize ref_blocks ref_lsize ref_psize ref_dsize,
//!                  64 of them per histogram, bucket = highbit(ref_blocks) - 1
//! ```
use crate::blkptr::{BlockPointer, Dva};
use crate::compress::{zle, ZIO_COMPRESS_OFF, ZIO_COMPRESS_ZLE};
use crate::{FormatError, Result};

/// u64 words of a key (DDT_KEY_WORDS).
pub const DDT_KEY_WORDS: usize = 5;
/// ddt_phys_t slots per entry (DDT_PHYS_TYPES): ditto, single, double, triple.
pub const DDT_PHYS_TYPES: usize = 4;
pub const DDT_PHYS_DITTO: usize = 0;
/// Bytes of the four ddt_phys_t of an entry.
pub const DDT_PHYS_BYTES: usize = DDT_PHYS_TYPES * 64;
/// Buckets of a histogram and u64 words of one ddt_stat_t.
pub const DDT_HISTOGRAM_BUCKETS: usize = 64;
pub const DDT_STAT_WORDS: usize = 8;
const DDT_COMPRESS_BYTEORDER_MASK: u8 = 0x80;
const DDT_COMPRESS_FUNCTION_MASK: u8 = 0x7f;
/// DDT ZAP block shifts (ddt_zap_leaf_blockshift / ddt_zap_indirect_blockshift).
pub const DDT_ZAP_LEAF_BLOCKSHIFT: u32 = 12;

/// DDT classes in search order (highest replication first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DdtClass {
    Ditto = 0,
    Duplicate = 1,
    Unique = 2,
}

impl DdtClass {
    pub const ALL: [DdtClass; 3] = [DdtClass::Ditto, DdtClass::Duplicate, DdtClass::Unique];
    pub fn name(self) -> &'static str {
        match self {
            DdtClass::Ditto => "ditto",
            DdtClass::Duplicate => "duplicate",
            DdtClass::Unique => "unique",
        }
    }
}

/// The MOS directory name of a table's class object (DMU_POOL_DDT): "DDT-sha256-zap-unique".
pub fn ddt_object_name(checksum_name: &str, class: DdtClass) -> String {
    format!("DDT-{checksum_name}-zap-{}", class.name())
}

/// ddt_key_t.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DdtKey {
    pub cksum: [u64; 4],
    pub prop: u64,
}

impl DdtKey {
    /// ddt_key_fill: the key of a (non-embedded) bp.
    pub fn of_bp(bp: &BlockPointer) -> DdtKey {
        let mut prop = 0u64;
        prop |= ((bp.lsize >> 9).saturating_sub(1)) & 0xffff;
        prop |= (((bp.psize >> 9).saturating_sub(1)) & 0xffff) << 16;
        prop |= (bp.compress as u64 & 0x7f) << 32;
        prop |= (bp.encrypted as u64) << 39;
        DdtKey { cksum: bp.cksum, prop }
    }
    pub fn lsize(&self) -> u64 {
        ((self.prop & 0xffff) + 1) << 9
    }
    pub fn psize(&self) -> u64 {
        (((self.prop >> 16) & 0xffff) + 1) << 9
    }
    pub fn compress(&self) -> u8 {
        ((self.prop >> 32) & 0x7f) as u8
    }
    pub fn crypt(&self) -> bool {
        (self.prop >> 39) & 1 != 0
    }
    pub fn words(&self) -> [u64; DDT_KEY_WORDS] {
        [self.cksum[0], self.cksum[1], self.cksum[2], self.cksum[3], self.prop]
    }
    /// The key as a uint64-key ZAP holds it: the words big-endian (a leaf's integer arrays).
    pub fn zap_key(&self) -> Vec<u8> {
        self.words().iter().flat_map(|w| w.to_be_bytes()).collect()
    }
    /// The inverse of `zap_key`.
    pub fn from_zap_key(k: &[u8]) -> Result<DdtKey> {
        if k.len() != DDT_KEY_WORDS * 8 {
            return Err(FormatError::invalid("ddt key", format!("{} bytes, expected {}", k.len(), DDT_KEY_WORDS * 8)));
        }
        let w: Vec<u64> = k.chunks_exact(8).map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes"))).collect();
        Ok(DdtKey { cksum: [w[0], w[1], w[2], w[3]], prop: w[4] })
    }
    /// The dedup-bit bp of this key and `phys` (ddt_bp_create), for reads and frees.
    pub fn bp(&self, checksum: u8, phys: &DdtPhys) -> BlockPointer {
        BlockPointer {
            dva: phys.dva,
            lsize: self.lsize(),
            psize: self.psize(),
            compress: self.compress(),
            checksum,
            typ: crate::types::DMU_OT_DEDUP,
            level: 0,
            little_endian: true,
            dedup: true,
            encrypted: self.crypt(),
            birth: phys.phys_birth,
            phys_birth: 0,
            fill: 1,
            cksum: self.cksum,
            ..Default::default()
        }
    }
}

/// ddt_phys_t: one set of copies of a deduplicated block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DdtPhys {
    pub dva: [Dva; 3],
    pub refcnt: u64,
    pub phys_birth: u64,
}

impl DdtPhys {
    fn decode(w: &[u64]) -> DdtPhys {
        DdtPhys {
            dva: [Dva::decode(w[0], w[1]), Dva::decode(w[2], w[3]), Dva::decode(w[4], w[5])],
            refcnt: w[6],
            phys_birth: w[7],
        }
    }
    fn encode(&self, out: &mut Vec<u64>) {
        for d in &self.dva {
            let (a, b) = d.encode();
            out.push(a);
            out.push(b);
        }
        out.push(self.refcnt);
        out.push(self.phys_birth);
    }
}

/// Encode an entry's four phys as a DDT ZAP value (ddt_compress): header byte, then the bytes
/// ZLE-compressed, or raw when ZLE saves nothing.
pub fn encode_phys(phys: &[DdtPhys; DDT_PHYS_TYPES]) -> Vec<u8> {
    let mut words = Vec::with_capacity(DDT_PHYS_TYPES * 8);
    for p in phys {
        p.encode(&mut words);
    }
    let raw: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (func, body) = match zle::compress(&raw, zle::ZLE_N, DDT_PHYS_BYTES) {
        Some(c) if c.len() != DDT_PHYS_BYTES => (ZIO_COMPRESS_ZLE, c),
        _ => (ZIO_COMPRESS_OFF, raw),
    };
    let mut out = Vec::with_capacity(body.len() + 1);
    out.push(func | DDT_COMPRESS_BYTEORDER_MASK);
    out.extend_from_slice(&body);
    out
}

/// Decode a DDT ZAP value (ddt_decompress) into the entry's four phys.
pub fn decode_phys(v: &[u8]) -> Result<[DdtPhys; DDT_PHYS_TYPES]> {
    let bad = |d: String| FormatError::invalid("ddt entry value", d);
    let (&hdr, body) = v.split_first().ok_or_else(|| bad("empty".into()))?;
    let raw = match hdr & DDT_COMPRESS_FUNCTION_MASK {
        ZIO_COMPRESS_ZLE => zle::decompress(body, DDT_PHYS_BYTES, zle::ZLE_N)?,
        ZIO_COMPRESS_OFF if body.len() >= DDT_PHYS_BYTES => body[..DDT_PHYS_BYTES].to_vec(),
        f => return Err(bad(format!("compression function {f} with {} bytes", body.len()))),
    };
    let le = hdr & DDT_COMPRESS_BYTEORDER_MASK != 0;
    let words: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| {
            let a: [u8; 8] = c.try_into().expect("8 bytes");
            if le { u64::from_le_bytes(a) } else { u64::from_be_bytes(a) }
        })
        .collect();
    let mut out = [DdtPhys::default(); DDT_PHYS_TYPES];
    for (i, p) in out.iter_mut().enumerate() {
        *p = DdtPhys::decode(&words[i * 8..(i + 1) * 8]);
    }
    Ok(out)
}

/// ddt_stat_t.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DdtStat {
    pub blocks: u64,
    pub lsize: u64,
    pub psize: u64,
    pub dsize: u64,
    pub ref_blocks: u64,
    pub ref_lsize: u64,
    pub ref_psize: u64,
    pub ref_dsize: u64,
}

impl DdtStat {
    fn words(&self) -> [u64; DDT_STAT_WORDS] {
        [self.blocks, self.lsize, self.psize, self.dsize, self.ref_blocks, self.ref_lsize, self.ref_psize, self.ref_dsize]
    }
    fn from_words(w: &[u64]) -> DdtStat {
        DdtStat { blocks: w[0], lsize: w[1], psize: w[2], dsize: w[3], ref_blocks: w[4], ref_lsize: w[5], ref_psize: w[6], ref_dsize: w[7] }
    }
    /// ddt_stat_add: add (or with `neg`, subtract) `o` word by word, wrapping as OpenZFS's
    /// unsigned arithmetic does.
    pub fn add(&mut self, o: &DdtStat, neg: bool) {
        let mut w = self.words();
        for (a, b) in w.iter_mut().zip(o.words()) {
            *a = if neg { a.wrapping_sub(b) } else { a.wrapping_add(b) };
        }
        *self = DdtStat::from_words(&w);
    }
}

/// ddt_histogram_t: 64 buckets by log2 of the reference count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DdtHistogram(pub [DdtStat; DDT_HISTOGRAM_BUCKETS]);

impl Default for DdtHistogram {
    fn default() -> Self {
        DdtHistogram([DdtStat::default(); DDT_HISTOGRAM_BUCKETS])
    }
}

impl DdtHistogram {
    pub fn decode(words: &[u64]) -> Result<DdtHistogram> {
        if words.len() != DDT_HISTOGRAM_BUCKETS * DDT_STAT_WORDS {
            return Err(FormatError::invalid("ddt histogram", format!("{} words, expected 512", words.len())));
        }
        let mut h = DdtHistogram::default();
        for (i, s) in h.0.iter_mut().enumerate() {
            *s = DdtStat::from_words(&words[i * DDT_STAT_WORDS..(i + 1) * DDT_STAT_WORDS]);
        }
        Ok(h)
    }
    pub fn encode(&self) -> Vec<u64> {
        self.0.iter().flat_map(|s| s.words()).collect()
    }
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|s| *s == DdtStat::default())
    }
    /// ddt_histogram_stat: the sum of every bucket.
    pub fn total(&self) -> DdtStat {
        let mut t = DdtStat::default();
        for s in &self.0 {
            t.add(s, false);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phys_value_roundtrip_and_compression() {
        let mut phys = [DdtPhys::default(); DDT_PHYS_TYPES];
        phys[1] = DdtPhys { dva: [Dva { vdev: 0, offset: 0x40_0000, asize: 0x2_0000, gang: false }, Dva::default(), Dva::default()], refcnt: 2, phys_birth: 17 };
        let v = encode_phys(&phys);
        // Mostly zeros: ZLE wins, and the header says ZLE on a little-endian writer.
        assert_eq!(v[0], ZIO_COMPRESS_ZLE | 0x80);
        assert!(v.len() < 40, "{} bytes", v.len());
        assert_eq!(decode_phys(&v).unwrap(), phys);
        // Four full phys: nothing to gain, stored raw.
        // (no two zero bytes in a row anywhere: the grid byte of each DVA is a lone zero)
        let dva = Dva::decode(0x0101_0101_0001_0101, 0x8101_0101_0101_0101);
        let full = DdtPhys { dva: [dva; 3], refcnt: 0x0101_0101_0101_0101, phys_birth: 0x0202_0202_0202_0202 };
        let v = encode_phys(&[full; 4]);
        assert_eq!(v[0], ZIO_COMPRESS_OFF | 0x80);
        assert_eq!(v.len(), DDT_PHYS_BYTES + 1);
        assert_eq!(decode_phys(&v).unwrap(), [full; 4]);
        assert!(decode_phys(&[0x80 | 9, 1, 2]).is_err());
    }

    #[test]
    fn key_fields() {
        let bp = BlockPointer { lsize: 128 << 10, psize: 4096, compress: 15, cksum: [1, 2, 3, 4], ..Default::default() };
        let k = DdtKey::of_bp(&bp);
        assert_eq!(k.prop, 255 | (7 << 16) | (15 << 32));
        assert_eq!((k.lsize(), k.psize(), k.compress(), k.crypt()), (128 << 10, 4096, 15, false));
        assert_eq!(DdtKey::from_zap_key(&k.zap_key()).unwrap(), k);
        assert_eq!(ddt_object_name("sha256", DdtClass::Duplicate), "DDT-sha256-zap-duplicate");
    }
}
