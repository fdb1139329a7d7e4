//! Block pointers (`blkptr_t`, 128 bytes) and gang headers.
//!
//! ```text
//!  words 0-5   three DVAs: w0 = vdev(32) | grid(8) | asize(24, in 512-byte sectors)
//!                          w1 = gang(1) | offset(63, in sectors)
//!  word  6     prop: byteorder(1) dedup(1) encrypt(1) level(5) type(8) checksum(8)
//!                    embedded(1) compress(7) psize(16, sectors-1) lsize(16, sectors-1)
//!              embedded bps: etype in the checksum field, psize(7, bytes-1), lsize(25, bytes-1)
//!  words 7-8   padding          word 9  physical birth txg     word 10  logical birth txg
//!  word  11    fill count       words 12-15  checksum
//! ```
//! An embedded bp keeps its (compressed) payload in words 0-5, 7-9 and 11-15 instead.
//! All words are in the byte order of the block that holds the bp; the byteorder bit tells
//! the order of the data the bp points to (1 = little-endian).

use crate::bytes::{slice, u64_at};
use crate::checksum;
use crate::compress;
use crate::{FormatError, Result};
use std::fmt;

pub const BLKPTR_SIZE: usize = 128;
pub const SPA_GANGBLOCKSIZE: usize = 512;
pub const SPA_GBH_NBLKPTRS: usize = 3;
/// Embedded bp payload types.
pub const BP_EMBEDDED_TYPE_DATA: u8 = 0;
pub const BP_EMBEDDED_TYPE_RESERVED: u8 = 1;
/// A redacted block (zfs redacted send/receive): no data anywhere.
pub const BP_EMBEDDED_TYPE_REDACTED: u8 = 2;
/// Bytes of payload an embedded bp can carry (14 of its 16 words).
pub const BPE_PAYLOAD_SIZE: usize = 112;
/// The words of an embedded bp that carry payload, in payload order (all but prop and birth).
pub const BPE_PAYLOAD_WORDS: [usize; 14] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 14, 15];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dva {
    pub vdev: u64,
    /// Byte offset in the top-level vdev's allocatable space.
    pub offset: u64,
    /// Allocated bytes (with raidz parity and padding; for a gang DVA, the whole gang tree).
    pub asize: u64,
    pub gang: bool,
}

impl Dva {
    /// A DVA with no allocation (DVA_IS_EMPTY: asize == 0).
    pub fn is_empty(&self) -> bool {
        self.asize == 0
    }
    pub fn decode(w0: u64, w1: u64) -> Dva {
        Dva { vdev: w0 >> 32, asize: (w0 & 0xff_ffff) << 9, offset: (w1 & !(1u64 << 63)) << 9, gang: w1 >> 63 != 0 }
    }
    pub fn encode(&self) -> (u64, u64) {
        let w0 = (self.vdev << 32) | ((self.asize >> 9) & 0xff_ffff);
        let w1 = ((self.gang as u64) << 63) | ((self.offset >> 9) & !(1u64 << 63));
        (w0, w1)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPointer {
    pub dva: [Dva; 3],
    pub lsize: u64,
    pub psize: u64,
    pub compress: u8,
    pub checksum: u8,
    pub typ: u8,
    pub level: u8,
    pub little_endian: bool,
    pub dedup: bool,
    pub embedded: bool,
    pub etype: u8,
    pub encrypted: bool,
    pub birth: u64,
    pub phys_birth: u64,
    pub fill: u64,
    pub cksum: [u64; 4],
    /// The 128 bytes as read (embedded payloads are taken from here).
    pub raw: [u8; 128],
    /// The byte order the raw bytes were decoded with.
    pub raw_le: bool,
}

impl Default for BlockPointer {
    fn default() -> Self {
        BlockPointer {
            dva: [Dva::default(); 3],
            lsize: 0,
            psize: 0,
            compress: 0,
            checksum: 0,
            typ: 0,
            level: 0,
            little_endian: true,
            dedup: false,
            embedded: false,
            etype: 0,
            encrypted: false,
            birth: 0,
            phys_birth: 0,
            fill: 0,
            cksum: [0; 4],
            raw: [0; 128],
            raw_le: true,
        }
    }
}

impl BlockPointer {
    /// Decode the first 128 bytes of `buf`, whose words are in byte order `le`.
    pub fn decode(buf: &[u8], le: bool) -> Result<BlockPointer> {
        let b = slice(buf, 0, BLKPTR_SIZE, "block pointer")?;
        let w = |i: usize| u64_at(b, i * 8, le, "block pointer");
        let mut raw = [0u8; 128];
        raw.copy_from_slice(b);
        let prop = w(6)?;
        let embedded = (prop >> 39) & 1 != 0;
        let mut bp = BlockPointer {
            raw,
            raw_le: le,
            embedded,
            compress: ((prop >> 32) & 0x7f) as u8,
            typ: ((prop >> 48) & 0xff) as u8,
            level: ((prop >> 56) & 0x1f) as u8,
            encrypted: (prop >> 61) & 1 != 0,
            dedup: (prop >> 62) & 1 != 0,
            little_endian: (prop >> 63) & 1 != 0,
            birth: w(10)?,
            ..Default::default()
        };
        if embedded {
            bp.etype = ((prop >> 40) & 0xff) as u8;
            bp.lsize = (prop & 0x1ff_ffff) + 1;
            bp.psize = ((prop >> 25) & 0x7f) + 1;
            if bp.psize > BPE_PAYLOAD_SIZE as u64 {
                return Err(FormatError::invalid("embedded block pointer", format!("payload of {} bytes", bp.psize)));
            }
            // BP_GET_FILL of an embedded bp is 1; its fill word holds payload.
            bp.fill = 1;
        } else {
            for i in 0..3 {
                bp.dva[i] = Dva::decode(w(2 * i)?, w(2 * i + 1)?);
            }
            bp.lsize = ((prop & 0xffff) + 1) << 9;
            bp.psize = (((prop >> 16) & 0xffff) + 1) << 9;
            bp.checksum = ((prop >> 40) & 0xff) as u8;
            bp.phys_birth = w(9)?;
            bp.fill = w(11)?;
            if bp.encrypted && bp.level == 0 && crate::types::ot_is_encrypted(bp.typ) {
                bp.fill &= 0xffff_ffff; // the upper half holds IV bits
            }
            bp.cksum = [w(12)?, w(13)?, w(14)?, w(15)?];
        }
        Ok(bp)
    }

    /// Word `i` (0..16) of the 128 bytes as read, in the order they were decoded with: what
    /// OpenZFS keeps in its in-core blkptr_t (fields some feature packs its own way, such as
    /// an encrypted block's salt and IV, are read from here).
    pub fn raw_word(&self, i: usize) -> u64 {
        let b: [u8; 8] = self.raw[i * 8..i * 8 + 8].try_into().expect("a block pointer has 16 words");
        if self.raw_le {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        }
    }

    /// Encode to 128 bytes in byte order `le` (non-embedded bps; embedded ones keep `raw`).
    pub fn encode(&self, le: bool) -> [u8; 128] {
        if self.embedded {
            if le == self.raw_le {
                return self.raw;
            }
            let mut out = [0u8; 128];
            for i in 0..16 {
                let mut a = [0u8; 8];
                a.copy_from_slice(&self.raw[i * 8..i * 8 + 8]);
                a.reverse();
                out[i * 8..i * 8 + 8].copy_from_slice(&a);
            }
            return out;
        }
        let mut words = [0u64; 16];
        for i in 0..3 {
            let (a, b) = self.dva[i].encode();
            words[2 * i] = a;
            words[2 * i + 1] = b;
        }
        let lsz = if self.lsize == 0 { 0 } else { (self.lsize >> 9) - 1 };
        let psz = if self.psize == 0 { 0 } else { (self.psize >> 9) - 1 };
        words[6] = (lsz & 0xffff)
            | ((psz & 0xffff) << 16)
            | ((self.compress as u64 & 0x7f) << 32)
            | ((self.checksum as u64) << 40)
            | ((self.typ as u64) << 48)
            | ((self.level as u64 & 0x1f) << 56)
            | ((self.encrypted as u64) << 61)
            | ((self.dedup as u64) << 62)
            | ((self.little_endian as u64) << 63);
        words[9] = self.phys_birth;
        words[10] = self.birth;
        words[11] = self.fill;
        words[12..16].copy_from_slice(&self.cksum);
        let mut out = [0u8; 128];
        for (i, w) in words.iter().enumerate() {
            let b = if le { w.to_le_bytes() } else { w.to_be_bytes() };
            out[i * 8..i * 8 + 8].copy_from_slice(&b);
        }
        out
    }

    /// An embedded block pointer (BP_EMBEDDED_TYPE_DATA) carrying `payload` (the compressed
    /// bytes, at most 112) of a level-0 block of `lsize` logical bytes.
    pub fn new_embedded(payload: &[u8], lsize: u64, compress: u8, typ: u8, birth: u64) -> BlockPointer {
        assert!(!payload.is_empty() && payload.len() <= BPE_PAYLOAD_SIZE && lsize >= 1 && lsize <= 1 << 25);
        let mut words = [0u64; 16];
        let mut padded = [0u8; BPE_PAYLOAD_SIZE];
        padded[..payload.len()].copy_from_slice(payload);
        for (k, &w) in BPE_PAYLOAD_WORDS.iter().enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(&padded[k * 8..k * 8 + 8]);
            words[w] = u64::from_le_bytes(a);
        }
        words[6] = ((lsize - 1) & 0x1ff_ffff)
            | (((payload.len() as u64 - 1) & 0x7f) << 25)
            | ((compress as u64 & 0x7f) << 32)
            | (1 << 39)
            | (0u64 << 40) // BP_EMBEDDED_TYPE_DATA
            | ((typ as u64) << 48)
            | (1u64 << 63);
        words[10] = birth;
        let mut raw = [0u8; 128];
        for (i, w) in words.iter().enumerate() {
            raw[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        BlockPointer::decode(&raw, true).expect("an embedded bp we built decodes")
    }

    /// An all-zero block pointer: a hole that was never written.
    pub fn hole() -> BlockPointer {
        // BP_ZERO: not even the byte-order bit is set.
        BlockPointer { little_endian: false, ..BlockPointer::default() }
    }

    /// BP_IS_HOLE: not embedded and DVA 0 holds nothing.
    pub fn is_hole(&self) -> bool {
        !self.embedded && self.dva[0].vdev == 0 && self.dva[0].offset == 0 && self.dva[0].asize == 0 && !self.dva[0].gang
    }

    /// BP_GET_NDVAS: how many DVAs are allocated. An encrypted block keeps its salt and IV
    /// where DVA[2] would be.
    pub fn ndvas(&self) -> usize {
        if self.embedded {
            return 0;
        }
        let n = if self.is_encrypted_data() { 2 } else { 3 };
        self.dva[..n].iter().filter(|d| !d.is_empty()).count()
    }

    /// BP_IS_ENCRYPTED: a level-0 block of an encrypted type in an encrypted dataset.
    pub fn is_encrypted_data(&self) -> bool {
        self.encrypted && self.level == 0 && crate::types::ot_is_encrypted(self.typ)
    }

    /// The DVAs that hold copies (DVA[2] of an encrypted block is not one).
    pub fn dvas(&self) -> &[Dva] {
        if self.embedded {
            &self.dva[..0]
        } else if self.is_encrypted_data() {
            &self.dva[..2]
        } else {
            &self.dva[..]
        }
    }

    /// Whether `computed` matches the stored checksum: blocks of encrypted datasets (other
    /// than objsets) keep a MAC in words 2-3, so only words 0-1 are compared.
    pub fn checksum_matches(&self, computed: &[u64; 4]) -> bool {
        if self.encrypted && self.typ != crate::types::DMU_OT_OBJSET {
            // Checksums not marked dedup-capable (fletcher, and edonr) fold their upper half
            // into the kept lower half.
            let weak = !matches!(
                self.checksum,
                checksum::ZIO_CHECKSUM_SHA256 | checksum::ZIO_CHECKSUM_SHA512 | checksum::ZIO_CHECKSUM_SKEIN | checksum::ZIO_CHECKSUM_BLAKE3
            );
            let (a, b) = if weak { (computed[0] ^ computed[2], computed[1] ^ computed[3]) } else { (computed[0], computed[1]) };
            a == self.cksum[0] && b == self.cksum[1]
        } else {
            *computed == self.cksum
        }
    }

    pub fn is_gang(&self) -> bool {
        !self.embedded && self.dva[0].gang
    }

    pub fn asize_total(&self) -> u64 {
        self.dvas().iter().map(|d| d.asize).sum()
    }

    /// BP_PHYSICAL_BIRTH: the birth txg of the physical copy (phys_birth, or birth when
    /// zero; 0 for an embedded bp, which has no physical copy).
    pub fn physical_birth(&self) -> u64 {
        if self.embedded {
            0
        } else if self.phys_birth != 0 {
            self.phys_birth
        } else {
            self.birth
        }
    }

    /// The payload bytes of an embedded bp (psize of them, still compressed).
    pub fn embedded_payload(&self) -> Result<Vec<u8>> {
        if !self.embedded {
            return Err(FormatError::invalid("embedded block pointer", "not embedded"));
        }
        let mut out = Vec::with_capacity(self.psize as usize);
        for word in BPE_PAYLOAD_WORDS {
            let v = u64_at(&self.raw, word * 8, self.raw_le, "embedded block pointer")?;
            for byte in v.to_le_bytes() {
                if out.len() < self.psize as usize {
                    out.push(byte);
                }
            }
        }
        Ok(out)
    }
}

impl BlockPointer {
    /// BP_IS_REDACTED: an embedded bp of the redacted type.
    pub fn is_redacted(&self) -> bool {
        self.embedded && self.etype == BP_EMBEDDED_TYPE_REDACTED
    }

    /// BP_IS_AUTHENTICATED: a level-0 block of an unencrypted type in an encrypted dataset.
    pub fn is_authenticated(&self) -> bool {
        self.encrypted && self.level == 0 && !crate::types::ot_is_encrypted(self.typ)
    }

    /// BP_IS_METADATA: indirect blocks and blocks of metadata types.
    pub fn is_metadata(&self) -> bool {
        self.level > 0 || crate::types::ot_is_metadata(self.typ)
    }

    /// The one-line form zdb uses for indirect-block listings (snprintf_blkptr_compact):
    /// `vdev:offset:asize ... LSIZEL/PSIZEP F=fill B=birth/physbirth cksum=...`; zdb shows
    /// every DVA at `-dddddd` and only the first below that (`all_dvas`).
    pub fn compact(&self, all_dvas: bool) -> String {
        if self.embedded {
            return format!("EMBEDDED et={} {:x}L/{:x}P B={}", self.etype, self.lsize, self.psize, self.birth);
        }
        let n = if all_dvas { self.ndvas() } else { 1 };
        let mut s = String::new();
        for d in &self.dva[..n] {
            s.push_str(&format!("{}:{:x}:{:x} ", d.vdev, d.offset, d.asize));
        }
        if self.is_hole() {
            s.push_str(&format!("{:x}L B={}", self.lsize, self.birth));
        } else {
            s.push_str(&format!(
                "{:x}L/{:x}P F={} B={}/{} cksum={:016x}:{:016x}:{:016x}:{:016x}",
                self.lsize,
                self.psize,
                self.fill,
                self.birth,
                self.physical_birth(),
                self.cksum[0],
                self.cksum[1],
                self.cksum[2],
                self.cksum[3]
            ));
        }
        s
    }
}

/// The compression name as zio_compress_table has it ("uncompressed" for off).
fn zio_compress_name(c: u8) -> &'static str {
    if c == compress::ZIO_COMPRESS_OFF {
        "uncompressed"
    } else {
        compress::compress_name(c)
    }
}

/// The form of snprintf_blkptr (zdb's `rootbp`, `bp =` lines): DVAs, then
/// `[L0 type] checksum compress crypt LE contiguous unique copies size=L/P birth=L/P fill cksum`.
impl fmt::Display for BlockPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let typ = crate::types::bp_type_name(self.typ);
        if self.is_hole() {
            return write!(f, "HOLE [L{} {}] size={:x}L birth={}L", self.level, typ, self.lsize, self.birth);
        }
        if self.is_redacted() {
            return write!(f, "REDACTED [L{} {}] size={:x}L birth={}L", self.level, typ, self.lsize, self.birth);
        }
        if self.embedded {
            return write!(
                f,
                "EMBEDDED [L{} {}] et={} {} size={:x}L/{:x}P birth={}L",
                self.level,
                typ,
                self.etype,
                zio_compress_name(self.compress),
                self.lsize,
                self.psize,
                self.birth
            );
        }
        let mut copies = 0usize;
        for (i, d) in self.dva[..self.ndvas()].iter().enumerate() {
            if !d.is_empty() {
                copies += 1;
            }
            write!(f, "DVA[{i}]=<{}:{:x}:{:x}> ", d.vdev, d.offset, d.asize)?;
        }
        if self.is_encrypted_data() {
            let w = |i: usize| u64_at(&self.raw, i * 8, self.raw_le, "block pointer").unwrap_or(0);
            write!(f, "salt={:x} iv={:x}:{:x} ", w(4), w(5), w(11) >> 32)?;
        }
        if self.is_gang() && self.dva[2].asize <= self.dva[1].asize / 2 {
            copies = copies.saturating_sub(1);
        }
        let crypt = if self.is_encrypted_data() {
            "encrypted"
        } else if self.is_authenticated() {
            "authenticated"
        } else if self.encrypted && self.level > 0 {
            "indirect-MAC"
        } else {
            "unencrypted"
        };
        write!(
            f,
            "[L{} {}] {} {} {} {} {} {} {} size={:x}L/{:x}P birth={}L/{}P fill={} cksum={:016x}:{:016x}:{:016x}:{:016x}",
            self.level,
            typ,
            checksum::checksum_name(self.checksum),
            zio_compress_name(self.compress),
            crypt,
            if self.little_endian { "LE" } else { "BE" },
            if self.is_gang() { "gang" } else { "contiguous" },
            if self.dedup { "dedup" } else { "unique" },
            ["zero", "single", "double", "triple"][copies.min(3)],
            self.lsize,
            self.psize,
            self.birth,
            self.physical_birth(),
            self.fill,
            self.cksum[0],
            self.cksum[1],
            self.cksum[2],
            self.cksum[3]
        )
    }
}

/// The three bps of a gang header (`zio_gbh_phys_t`: 3 bps, filler, and a 40-byte embedded
/// checksum trailer whose magic ZEC_MAGIC also tells the byte order the header was written in;
/// a header whose magic reads byte-swapped is decoded in the other order).
pub fn decode_gang_header(buf: &[u8], le: bool) -> Result<Vec<BlockPointer>> {
    let b = slice(buf, 0, SPA_GANGBLOCKSIZE, "gang header")?;
    let tail = SPA_GANGBLOCKSIZE - 40;
    let magic = u64_at(b, tail, le, "gang header")?;
    let le = if magic == checksum::ZEC_MAGIC {
        le
    } else if magic.swap_bytes() == checksum::ZEC_MAGIC {
        !le
    } else {
        return Err(FormatError::BadMagic { what: "gang header trailer", found: magic });
    };
    (0..SPA_GBH_NBLKPTRS).map(|i| BlockPointer::decode(&b[i * BLKPTR_SIZE..], le)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut bp = BlockPointer::default();
        bp.dva[0] = Dva { vdev: 1, offset: 0x4d000, asize: 0x600, gang: false };
        bp.dva[1] = Dva { vdev: 0, offset: 0x1200, asize: 0x200, gang: true };
        bp.lsize = 0x20000;
        bp.psize = 0x1200;
        bp.compress = compress::ZIO_COMPRESS_LZ4;
        bp.checksum = checksum::ZIO_CHECKSUM_FLETCHER_4;
        bp.typ = crate::types::DMU_OT_PLAIN_FILE_CONTENTS;
        bp.level = 2;
        bp.little_endian = true;
        bp.dedup = true;
        bp.birth = 77;
        bp.fill = 3;
        bp.cksum = [1, 2, 3, 4];
        for le in [true, false] {
            let raw = bp.encode(le);
            let mut d = BlockPointer::decode(&raw, le).unwrap();
            d.raw = bp.raw;
            d.raw_le = bp.raw_le;
            assert_eq!(d, bp);
            assert_eq!(d.ndvas(), 2);
        }
        assert!(BlockPointer::decode(&[0u8; 128], true).unwrap().is_hole());
        assert!(BlockPointer::decode(&[0u8; 100], true).is_err());
    }

    /// Level-6 block of tank-basic's meta-dnode (fixture `basic`): its first bp is the L5
    /// block, the other 127 are holes.
    const L6: &[u8] = include_bytes!("../tests/data/fx-indirect-basic-l6.bin");
    /// Level-1 block of tank-basic's /sparse.img (object 83): six data blocks among holes.
    const OBJ83_L1: &[u8] = include_bytes!("../tests/data/fx-indirect-basic-obj83-l1.bin");

    fn bps(block: &[u8]) -> Vec<BlockPointer> {
        block.chunks_exact(BLKPTR_SIZE).map(|c| BlockPointer::decode(c, true).unwrap()).collect()
    }

    #[test]
    fn fixture_indirect_block_matches_zdb() {
        let v = bps(L6);
        assert_eq!(v.len(), 128);
        // zdb -dddddd tank-basic/ 0: "0  L5      0:8d4c00:400 0:1403c00:400 4000L/400P F=82 B=33/33 cksum=..."
        assert_eq!(
            v[0].compact(true),
            "0:8d4c00:400 0:1403c00:400 4000L/400P F=82 B=33/33 \
             cksum=00000059fea2c8ed:00003e23d15940cc:0016b2419075091f:05cd35dc4bc9bc6c"
        );
        assert_eq!(v[0].compact(false), "0:8d4c00:400 4000L/400P F=82 B=33/33 cksum=00000059fea2c8ed:00003e23d15940cc:0016b2419075091f:05cd35dc4bc9bc6c");
        let b = &v[0];
        assert_eq!((b.level, b.typ, b.checksum, b.compress), (5, crate::types::DMU_OT_DNODE, checksum::ZIO_CHECKSUM_FLETCHER_4, compress::ZIO_COMPRESS_LZJB));
        assert_eq!((b.ndvas(), b.asize_total(), b.physical_birth()), (2, 0x800, 33));
        assert!(b.little_endian && !b.is_gang() && !b.dedup && !b.embedded && !b.is_hole());
        assert_eq!(
            b.to_string(),
            "DVA[0]=<0:8d4c00:400> DVA[1]=<0:1403c00:400> [L5 DMU dnode] fletcher4 lzjb unencrypted LE contiguous \
             unique double size=4000L/400P birth=33L/33P fill=82 \
             cksum=00000059fea2c8ed:00003e23d15940cc:0016b2419075091f:05cd35dc4bc9bc6c"
        );
        assert!(v[1..].iter().all(|b| b.is_hole() && b.ndvas() == 0));
        // Encoding a decoded bp gives back the bytes on disk, in either byte order.
        for (i, b) in v.iter().enumerate() {
            assert_eq!(&b.encode(true)[..], &L6[i * 128..(i + 1) * 128], "bp {i}");
            let be = b.encode(false);
            let mut back = BlockPointer::decode(&be, false).unwrap();
            back.raw = b.raw;
            back.raw_le = true;
            assert_eq!(&back, b);
        }
    }

    #[test]
    fn fixture_holes_and_data_blocks() {
        let v = bps(OBJ83_L1);
        // zdb: "40000  L0 0:7a0000:20000 20000L/20000P F=1 B=25/25 cksum=..." and five more.
        let want = [
            (0x2, "0:7a0000:20000 20000L/20000P F=1 B=25/25 cksum=0000009a8572f2cd:001e7512cd8811cf:0086ea9e311a2a0f:bb425b7aa78b9723"),
            (0x6, "0:780000:20000 20000L/20000P F=1 B=25/25 cksum=0000014ff0f62d1e:0091d0b136cbc8ac:a5e206faa4a58973:7ef27d89ba9bc53e"),
            (0x16, "0:744a00:20000 20000L/20000P F=1 B=25/25 cksum=000002a351f6f24d:00a1c7d5cda6bcb5:642697e0bbda906b:4dc877f1746597ba"),
            (0x1b, "0:820000:20000 20000L/20000P F=1 B=28/28 cksum=00000255bad3765c:0090ede0b7b101d6:9468f16b46fe4e67:480e31aca676e7c4"),
            (0x1d, "0:7c0000:20000 20000L/20000P F=1 B=25/25 cksum=000000d03c8a3d68:002181813577570c:b23b43a125e1df12:7f1916003f0bbbc0"),
            (0x24, "0:800000:20000 20000L/20000P F=1 B=28/28 cksum=0000012132c17a85:001be3f9e607561c:5895ae22ae0587c2:9bb4b17de60cfc86"),
        ];
        for (i, b) in v.iter().enumerate() {
            match want.iter().find(|w| w.0 == i) {
                Some((_, s)) => {
                    assert_eq!(b.compact(true), *s, "blkid {i}");
                    assert_eq!((b.typ, b.level, b.compress), (crate::types::DMU_OT_PLAIN_FILE_CONTENTS, 0, compress::ZIO_COMPRESS_OFF));
                }
                None => {
                    assert!(b.is_hole(), "blkid {i}");
                    assert_eq!(b.birth, 0, "pool version 23 holes have no birth");
                }
            }
        }
        assert_eq!(v.iter().filter(|b| !b.is_hole()).count(), 6); // the L1's fill (F=6)
    }

    #[test]
    fn gang_header_checks_its_trailer() {
        let mut g = vec![0u8; SPA_GANGBLOCKSIZE];
        let mut bp = BlockPointer::default();
        bp.dva[0] = Dva { vdev: 0, offset: 0x10000, asize: 0x200, gang: false };
        bp.lsize = 0x200;
        bp.psize = 0x200;
        bp.birth = 9;
        g[..128].copy_from_slice(&bp.encode(false));
        g[SPA_GANGBLOCKSIZE - 40..SPA_GANGBLOCKSIZE - 32].copy_from_slice(&checksum::ZEC_MAGIC.to_be_bytes());
        // Written big-endian, read with the little-endian guess: the trailer corrects it.
        let v = decode_gang_header(&g, true).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!((v[0].dva[0].offset, v[0].birth), (0x10000, 9));
        assert!(v[1].is_hole() && v[2].is_hole());
        g[SPA_GANGBLOCKSIZE - 40] ^= 1;
        assert!(decode_gang_header(&g, true).is_err());
        assert!(decode_gang_header(&g[..511], true).is_err());
    }

    #[test]
    fn display_of_holes_embedded_and_new_types() {
        let mut b = BlockPointer::default();
        b.lsize = 0x200;
        assert_eq!(b.to_string(), "HOLE [L0 unallocated] size=200L birth=0L");
        b.typ = crate::types::DMU_OTN_ZAP_METADATA;
        b.dva[0] = Dva { vdev: 1, offset: 0x400, asize: 0x200, gang: true };
        b.psize = 0x200;
        b.checksum = checksum::ZIO_CHECKSUM_SHA256;
        b.compress = compress::ZIO_COMPRESS_OFF;
        b.dedup = true;
        // As snprintf_blkptr counts copies: a gang bp whose DVA[2] is no larger than half of
        // DVA[1] loses one (here 0 <= 0).
        assert!(b.to_string().starts_with("DVA[0]=<1:400:200> [L0 bswap metadata zap] sha256 uncompressed unencrypted LE gang dedup zero"));
    }

    #[test]
    fn embedded_payload() {
        // An embedded bp: lsize 300, psize 20, payload bytes 0..20 laid out in words 0..
        let mut raw = [0u8; 128];
        for i in 0..20u8 {
            raw[i as usize] = i; // words 0-2 hold bytes 0..24 in LE order
        }
        let prop: u64 = (299) | (19 << 25) | (1 << 39) | ((compress::ZIO_COMPRESS_OFF as u64) << 32) | (1 << 63);
        raw[48..56].copy_from_slice(&prop.to_le_bytes());
        raw[80..88].copy_from_slice(&9u64.to_le_bytes());
        let bp = BlockPointer::decode(&raw, true).unwrap();
        assert!(bp.embedded && !bp.is_hole());
        assert_eq!((bp.lsize, bp.psize, bp.birth), (300, 20, 9));
        assert_eq!(bp.embedded_payload().unwrap(), (0..20u8).collect::<Vec<_>>());
        assert_eq!((bp.fill, bp.physical_birth(), bp.ndvas()), (1, 0, 0));
        assert_eq!(bp.to_string(), "EMBEDDED [L0 unallocated] et=0 uncompressed size=12cL/14P birth=9L");
        assert_eq!(bp.compact(true), "EMBEDDED et=0 12cL/14P B=9");
        // The same bp written big-endian carries the same payload.
        let mut be = [0u8; 128];
        for i in 0..16 {
            let w = u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
            be[i * 8..i * 8 + 8].copy_from_slice(&w.to_be_bytes());
        }
        let b2 = BlockPointer::decode(&be, false).unwrap();
        assert_eq!(b2.embedded_payload().unwrap(), (0..20u8).collect::<Vec<_>>());
        assert_eq!(b2.encode(true), raw);
    }
}
