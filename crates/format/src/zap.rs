//! ZAP objects: name → value maps, micro and fat.
//!
//! ```text
//! micro ZAP (one block):  [block_type=ZBT_MICRO salt normflags pad×5] then 64-byte entries
//!                         [value u64][cd u32][pad u16][name 50 bytes, NUL-terminated]
//! fat ZAP, block 0:       [ZBT_HEADER magic ptrtbl{blk numblks shift nextblk copied}
//!                          freeblk num_leafs num_entries salt normflags flags ...]
//!                         second half of block 0: the embedded pointer table (numblks == 0)
//! fat ZAP leaf block:     48-byte header [ZBT_LEAF pad prefix magic nfree nentries prefix_len
//!                          freelist flags], hash table of blocksize/32 u16 chunk indexes,
//!                         then 24-byte chunks: entries (type 252: intlen next name_chunk
//!                         name_numints value_chunk value_numints cd hash) and arrays
//!                         (type 251: 21 bytes of data + next), chains ending at 0xffff
//! ```
//! A name hashes (CRC-64, seeded with the salt, low bits masked off) to a pointer-table index
//! (its top `shift` bits) naming the leaf block. Integers inside leaf arrays are big-endian.

use crate::bytes::{slice, u16_at, u32_at, u64_at, u8_at};
use crate::{FormatError, Result};

pub const ZBT_LEAF: u64 = 1 << 63;
pub const ZBT_HEADER: u64 = (1 << 63) + 1;
pub const ZBT_MICRO: u64 = (1 << 63) + 3;
pub const ZAP_MAGIC: u64 = 0x2F52AB2AB;
pub const ZAP_LEAF_MAGIC: u32 = 0x2AB1EAF;
pub const MZAP_ENT_LEN: usize = 64;
pub const MZAP_NAME_LEN: usize = 50;
pub const ZAP_LEAF_CHUNKSIZE: usize = 24;
pub const ZAP_LEAF_ARRAY_BYTES: usize = 21;
pub const ZAP_CHUNK_FREE: u8 = 253;
pub const ZAP_CHUNK_ENTRY: u8 = 252;
pub const ZAP_CHUNK_ARRAY: u8 = 251;
pub const CHAIN_END: u16 = 0xffff;
pub const ZAP_FLAG_HASH64: u64 = 1 << 0;
pub const ZAP_FLAG_UINT64_KEY: u64 = 1 << 1;
pub const ZAP_FLAG_PRE_HASHED_KEY: u64 = 1 << 2;
const ZFS_CRC64_POLY: u64 = 0xC96C5795D7870F42;

pub fn block_type(buf: &[u8], le: bool) -> Result<u64> {
    u64_at(buf, 0, le, "ZAP block")
}

#[derive(Clone, Debug)]
pub struct MzapEntry {
    pub value: u64,
    pub cd: u32,
    pub name: String,
}

/// A micro ZAP block: (salt, normflags, entries).
pub fn decode_micro(buf: &[u8], le: bool) -> Result<(u64, u64, Vec<MzapEntry>)> {
    let bt = block_type(buf, le)?;
    if bt != ZBT_MICRO {
        return Err(FormatError::BadMagic { what: "micro ZAP", found: bt });
    }
    let salt = u64_at(buf, 8, le, "micro ZAP")?;
    let normflags = u64_at(buf, 16, le, "micro ZAP")?;
    let mut out = Vec::new();
    let n = buf.len() / MZAP_ENT_LEN;
    for i in 1..n {
        let e = &buf[i * MZAP_ENT_LEN..(i + 1) * MZAP_ENT_LEN];
        let name = &e[14..14 + MZAP_NAME_LEN];
        if name[0] == 0 {
            continue;
        }
        let end = name.iter().position(|&c| c == 0).unwrap_or(MZAP_NAME_LEN);
        out.push(MzapEntry {
            value: u64_at(e, 0, le, "micro ZAP entry")?,
            cd: u32_at(e, 8, le, "micro ZAP entry")?,
            name: String::from_utf8_lossy(&name[..end]).into_owned(),
        });
    }
    Ok((salt, normflags, out))
}

#[derive(Clone, Debug, Default)]
pub struct ZapHeader {
    pub block_type: u64,
    pub magic: u64,
    pub ptrtbl_blk: u64,
    pub ptrtbl_numblks: u64,
    pub ptrtbl_shift: u64,
    pub ptrtbl_nextblk: u64,
    pub ptrtbl_blks_copied: u64,
    pub freeblk: u64,
    pub num_leafs: u64,
    pub num_entries: u64,
    pub salt: u64,
    pub normflags: u64,
    pub flags: u64,
}

pub fn decode_fat_header(buf: &[u8], le: bool) -> Result<ZapHeader> {
    let w = |i: usize| u64_at(buf, i * 8, le, "fat ZAP header");
    let h = ZapHeader {
        block_type: w(0)?,
        magic: w(1)?,
        ptrtbl_blk: w(2)?,
        ptrtbl_numblks: w(3)?,
        ptrtbl_shift: w(4)?,
        ptrtbl_nextblk: w(5)?,
        ptrtbl_blks_copied: w(6)?,
        freeblk: w(7)?,
        num_leafs: w(8)?,
        num_entries: w(9)?,
        salt: w(10)?,
        normflags: w(11)?,
        flags: w(12)?,
    };
    if h.block_type != ZBT_HEADER {
        return Err(FormatError::BadMagic { what: "fat ZAP header", found: h.block_type });
    }
    if h.magic != ZAP_MAGIC {
        return Err(FormatError::BadMagic { what: "fat ZAP magic", found: h.magic });
    }
    if h.ptrtbl_shift > 48 {
        return Err(FormatError::invalid("fat ZAP header", format!("pointer table shift {}", h.ptrtbl_shift)));
    }
    Ok(h)
}

/// The pointer table embedded in the second half of block 0.
pub fn embedded_ptrtbl(buf: &[u8], le: bool) -> Result<Vec<u64>> {
    let half = buf.len() / 2;
    let n = half / 8;
    (0..n).map(|i| u64_at(buf, half + i * 8, le, "embedded ZAP pointer table")).collect()
}

#[derive(Clone, Debug)]
pub struct ZapLeafEntry {
    pub hash: u64,
    pub cd: u32,
    pub int_size: u8,
    pub num_ints: u64,
    /// Name bytes without the NUL; for uint64-keyed ZAPs the raw big-endian key words.
    pub key: Vec<u8>,
    /// Value bytes as stored: integers big-endian.
    pub value: Vec<u8>,
}

impl ZapLeafEntry {
    pub fn value_u64s(&self) -> Vec<u64> {
        self.ints(8)
    }
    pub fn value_u16s(&self) -> Vec<u16> {
        self.ints(2).into_iter().map(|v| v as u16).collect()
    }
    fn ints(&self, want: usize) -> Vec<u64> {
        let isz = (self.int_size as usize).max(1);
        let _ = want;
        self.value.chunks_exact(isz).map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | b as u64)).collect()
    }
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

#[derive(Clone, Debug)]
pub struct ZapLeaf {
    pub prefix: u64,
    pub prefix_len: u16,
    pub nentries: u16,
    pub entries: Vec<ZapLeafEntry>,
}

/// Decode every entry of a fat ZAP leaf block (whose size is `buf.len()`, the ZAP's block
/// size) of a ZAP with string keys.
pub fn decode_fat_leaf(buf: &[u8], le: bool) -> Result<ZapLeaf> {
    decode_fat_leaf_keyed(buf, le, false)
}

/// Decode a fat ZAP leaf; `uint64_key` for ZAPs with ZAP_FLAG_UINT64_KEY (the DDT), whose
/// keys are arrays of 8-byte words (name_numints counts words) rather than NUL-terminated
/// strings (name_numints counts bytes, the NUL included).
pub fn decode_fat_leaf_keyed(buf: &[u8], le: bool, uint64_key: bool) -> Result<ZapLeaf> {
    let bs = buf.len();
    if bs < 512 || !bs.is_power_of_two() {
        return Err(FormatError::invalid("fat ZAP leaf", format!("block size {bs}")));
    }
    let bt = u64_at(buf, 0, le, "fat ZAP leaf")?;
    if bt != ZBT_LEAF {
        return Err(FormatError::BadMagic { what: "fat ZAP leaf", found: bt });
    }
    let magic = u32_at(buf, 24, le, "fat ZAP leaf")?;
    if magic != ZAP_LEAF_MAGIC {
        return Err(FormatError::BadMagic { what: "fat ZAP leaf magic", found: magic as u64 });
    }
    let prefix = u64_at(buf, 16, le, "fat ZAP leaf")?;
    let nentries = u16_at(buf, 30, le, "fat ZAP leaf")?;
    let prefix_len = u16_at(buf, 32, le, "fat ZAP leaf")?;
    let nhash = bs >> 5;
    let chunks_off = 48 + 2 * nhash;
    let nchunks = (bs - 2 * nhash) / ZAP_LEAF_CHUNKSIZE - 2;
    let chunk = |i: u16| -> Result<&[u8]> {
        if i as usize >= nchunks {
            return Err(FormatError::invalid("fat ZAP leaf", format!("chunk index {i} of {nchunks}")));
        }
        slice(buf, chunks_off + i as usize * ZAP_LEAF_CHUNKSIZE, ZAP_LEAF_CHUNKSIZE, "fat ZAP leaf chunk")
    };
    let read_array = |start: u16, nbytes: usize| -> Result<Vec<u8>> {
        if nbytes > bs * 2 {
            return Err(FormatError::invalid("fat ZAP leaf", format!("array of {nbytes} bytes")));
        }
        let mut out = Vec::with_capacity(nbytes);
        let mut c = start;
        let mut steps = 0;
        while out.len() < nbytes {
            if c == CHAIN_END || steps > nchunks {
                return Err(FormatError::invalid("fat ZAP leaf", "array chain ends early or loops"));
            }
            let ch = chunk(c)?;
            if ch[0] != ZAP_CHUNK_ARRAY {
                return Err(FormatError::invalid("fat ZAP leaf", format!("chunk {c} is not an array")));
            }
            let take = (nbytes - out.len()).min(ZAP_LEAF_ARRAY_BYTES);
            out.extend_from_slice(&ch[1..1 + take]);
            c = u16_at(ch, 22, le, "fat ZAP array chunk")?;
            steps += 1;
        }
        Ok(out)
    };
    let mut entries = Vec::new();
    let mut seen = vec![false; nchunks];
    for b in 0..nhash {
        let mut c = u16_at(buf, 48 + 2 * b, le, "fat ZAP leaf hash")?;
        let mut steps = 0;
        while c != CHAIN_END {
            if steps > nchunks {
                return Err(FormatError::invalid("fat ZAP leaf", "entry chain loops"));
            }
            steps += 1;
            let ch = chunk(c)?;
            if ch[0] != ZAP_CHUNK_ENTRY {
                return Err(FormatError::invalid("fat ZAP leaf", format!("chunk {c} is not an entry")));
            }
            if seen[c as usize] {
                break;
            }
            seen[c as usize] = true;
            let int_size = u8_at(ch, 1, "entry")?;
            let next = u16_at(ch, 2, le, "entry")?;
            let name_chunk = u16_at(ch, 4, le, "entry")?;
            let name_numints = u16_at(ch, 6, le, "entry")? as usize;
            let value_chunk = u16_at(ch, 8, le, "entry")?;
            let value_numints = u16_at(ch, 10, le, "entry")? as u64;
            let cd = u32_at(ch, 12, le, "entry")?;
            let hash = u64_at(ch, 16, le, "entry")?;
            if !matches!(int_size, 1 | 2 | 4 | 8) {
                return Err(FormatError::invalid("fat ZAP entry", format!("integer length {int_size}")));
            }
            let key = if uint64_key {
                read_array(name_chunk, name_numints * 8)?
            } else {
                // String keys carry their NUL.
                let mut k = read_array(name_chunk, name_numints)?;
                if k.last() == Some(&0) {
                    k.pop();
                }
                k
            };
            let value = read_array(value_chunk, value_numints as usize * int_size as usize)?;
            entries.push(ZapLeafEntry { hash, cd, int_size, num_ints: value_numints, key, value });
            c = next;
        }
    }
    Ok(ZapLeaf { prefix, prefix_len, nentries, entries })
}

fn crc64_table() -> &'static [u64; 256] {
    use std::sync::OnceLock;
    static T: OnceLock<[u64; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = [0u64; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = (c >> 1) ^ ((c & 1).wrapping_neg() & ZFS_CRC64_POLY);
            }
            *e = c;
        }
        t
    })
}

/// U8_TEXTPREP_TOUPPER in a ZAP's normflags: names are compared (and hashed) upper-cased
/// (casesensitivity=insensitive or mixed).
pub const U8_TEXTPREP_TOUPPER: u64 = 0x2;
/// The Unicode normalization forms of u8_textprep.h (the `normalization` property's values):
/// canonical decomposition, compatibility decomposition, canonical composition after either.
pub const U8_CANON_DECOMP: u64 = 0x10;
pub const U8_COMPAT_DECOMP: u64 = 0x20;
pub const U8_CANON_COMP: u64 = 0x40;
pub const U8_TEXTPREP_NFD: u64 = U8_CANON_DECOMP;
pub const U8_TEXTPREP_NFC: u64 = U8_CANON_DECOMP | U8_CANON_COMP;
pub const U8_TEXTPREP_NFKD: u64 = U8_COMPAT_DECOMP;
pub const U8_TEXTPREP_NFKC: u64 = U8_COMPAT_DECOMP | U8_CANON_COMP;

/// The form of string key `key` that a ZAP with `normflags` hashes and compares (zap_normalize:
/// u8_textprep_str with invalid bytes passed through): each character upper-cased by its
/// simple case mapping when U8_TEXTPREP_TOUPPER is set, then the normalization form asked for.
///
/// Case alone is folded as u8_textprep_str walks the bytes: ASCII byte by byte, a lead byte
/// taking as many bytes as it announces (whatever they are), a sequence cut short by the end
/// kept as it is. The case mapping is Unicode 5.0's, OpenZFS's tables: the Rust library's newer
/// one without the upper cases assigned since (`case_of_unicode_5`). The normalization forms are
/// the `unicode-normalization` crate's, which agree with 5.0's on every character 5.0 assigned
/// (normalization is stable across Unicode versions).
pub fn normalized_key(normflags: u64, key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use unicode_normalization::UnicodeNormalization;
    let upper = normflags & U8_TEXTPREP_TOUPPER != 0;
    let form = normflags & (U8_CANON_DECOMP | U8_COMPAT_DECOMP | U8_CANON_COMP);
    if !upper && form == 0 {
        return std::borrow::Cow::Borrowed(key);
    }
    if key.is_ascii() {
        return if upper { std::borrow::Cow::Owned(key.to_ascii_uppercase()) } else { std::borrow::Cow::Borrowed(key) };
    }
    if form == 0 {
        return std::borrow::Cow::Owned(fold_case(key));
    }
    let mut out = Vec::with_capacity(key.len() + 8);
    for chunk in key.utf8_chunks() {
        let valid = chunk.valid();
        let folded: String = if upper { valid.chars().map(simple_upper).collect() } else { valid.to_string() };
        let normal: String = match form {
            U8_TEXTPREP_NFD => folded.nfd().collect(),
            U8_TEXTPREP_NFC => folded.nfc().collect(),
            U8_TEXTPREP_NFKD => folded.nfkd().collect(),
            U8_TEXTPREP_NFKC => folded.nfkc().collect(),
            _ => folded,
        };
        out.extend_from_slice(normal.as_bytes());
        out.extend_from_slice(chunk.invalid());
    }
    std::borrow::Cow::Owned(out)
}

/// u8_textprep_str's upper-casing without normalization: by the length each lead byte
/// announces (u8_number_of_bytes), bytes that are not a character left as they are.
fn fold_case(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len());
    let mut i = 0;
    while i < key.len() {
        let b = key[i];
        let sz = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => 1,
        };
        if sz == 1 {
            out.push(b.to_ascii_uppercase());
            i += 1;
        } else if i + sz > key.len() {
            out.extend_from_slice(&key[i..]);
            break;
        } else {
            let seq = &key[i..i + sz];
            match std::str::from_utf8(seq).ok().and_then(|s| s.chars().next()) {
                Some(c) => out.extend_from_slice(simple_upper(c).encode_utf8(&mut [0; 4]).as_bytes()),
                None => out.extend_from_slice(seq),
            }
            i += sz;
        }
    }
    out
}

/// A character's simple upper-case mapping, one character for one as u8_textprep's tables map
/// them (the character itself where there is none, as for ß), as Unicode 5.0 had it.
fn simple_upper(c: char) -> char {
    let u = c as u32;
    // Greek with ypogegrammeni: the simple mapping is the capital with prosgegrammeni, where
    // the full one gives two characters.
    match u {
        0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => return char::from_u32(u + 8).unwrap_or(c),
        0x1FB3 | 0x1FC3 | 0x1FF3 => return char::from_u32(u + 9).unwrap_or(c),
        _ => {}
    }
    let mut it = c.to_uppercase();
    match (it.next(), it.next()) {
        (Some(x), None) if case_of_unicode_5(u, x as u32) => x,
        _ => c,
    }
}

/// Whether the case pair `lower` → `upper` was in Unicode 5.0 (OpenZFS's tables): neither a
/// lower-case letter added later (Cherokee's, Cyrillic Extended-C, Osage, Adlam and the other
/// scripts past Deseret) nor an upper case added later (Georgian Mtavruli, Latin Extended-C/D,
/// Cyrillic Extended-B, and single letters of Greek, Cyrillic and Coptic).
fn case_of_unicode_5(lower: u32, upper: u32) -> bool {
    let later_upper = matches!(upper, 0x0370..=0x0373 | 0x0376 | 0x037F | 0x03CF | 0x0514..=0x052F | 0x10C7 | 0x10CD | 0x1C90..=0x1CBF | 0x2C6D..=0x2C7F | 0x2CEB..=0x2CF3 | 0xA640..=0xA7FF);
    let later_lower = matches!(lower, 0x13F8..=0x13FD | 0x1C80..=0x1C88 | 0x2D27 | 0x2D2D | 0xAB70..=0xABBF | 0x10450..);
    !later_upper && !later_lower
}

/// The hash of a string key (its bytes without the NUL, after any normalization the ZAP's
/// normflags ask for), as zap_hash computes it for ZAPs without ZAP_FLAG_HASH64 (every micro
/// ZAP and most fat ones): CRC-64 (ECMA polynomial, reflected) seeded with the salt, keeping
/// the top 28 bits. The low bits are left for the collision differentiator (cd) in cookies.
pub fn zap_hash(salt: u64, key: &[u8]) -> u64 {
    zap_hash_bits(salt, key, 28)
}

/// Significant hash bits of a ZAP with the given header flags (zap_hashbits): 48 with
/// ZAP_FLAG_HASH64, else 28.
pub fn zap_hashbits(flags: u64) -> u32 {
    if flags & ZAP_FLAG_HASH64 != 0 {
        48
    } else {
        28
    }
}

/// The string-key hash keeping `bits` significant bits (28, or 48 with ZAP_FLAG_HASH64).
pub fn zap_hash_bits(salt: u64, key: &[u8], bits: u32) -> u64 {
    let t = crc64_table();
    let mut h = salt;
    for &c in key {
        h = (h >> 8) ^ t[((h ^ c as u64) & 0xff) as usize];
    }
    hash_mask(h, bits)
}

/// The hash of a ZAP_FLAG_UINT64_KEY key: each word fed to the CRC low byte first. With
/// ZAP_FLAG_PRE_HASHED_KEY (the DDT) the first word is the hash itself (`pre_hashed`).
pub fn zap_hash_uint64(salt: u64, key: &[u64], bits: u32, pre_hashed: bool) -> u64 {
    if pre_hashed {
        return hash_mask(key.first().copied().unwrap_or(0), bits);
    }
    let t = crc64_table();
    let mut h = salt;
    for &w in key {
        for c in w.to_le_bytes() {
            h = (h >> 8) ^ t[((h ^ c as u64) & 0xff) as usize];
        }
    }
    hash_mask(h, bits)
}

fn hash_mask(h: u64, bits: u32) -> u64 {
    let bits = bits.clamp(1, 64);
    if bits == 64 {
        h
    } else {
        h & !((1u64 << (64 - bits)) - 1)
    }
}

/// Pointer-table index of a hash: its top `shift` bits (ZAP_HASH_IDX).
pub fn zap_leaf_index(hash: u64, shift: u64) -> u64 {
    if shift == 0 || shift > 64 {
        0
    } else {
        hash >> (64 - shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalize_as_u8_textprep_does() {
        let k = |f, s: &str| String::from_utf8(normalized_key(f, s.as_bytes()).into_owned()).unwrap();
        assert_eq!(k(U8_TEXTPREP_TOUPPER, "Foo.txt"), "FOO.TXT");
        assert_eq!(k(0, "Café"), "Café");
        // NFC and NFD of é (U+00E9, or e + U+0301) meet; case folds with either.
        assert_eq!(k(U8_TEXTPREP_NFD, "Caf\u{e9}"), "Cafe\u{301}");
        assert_eq!(k(U8_TEXTPREP_NFC, "Cafe\u{301}"), "Caf\u{e9}");
        assert_eq!(k(U8_TEXTPREP_TOUPPER | U8_TEXTPREP_NFD, "caf\u{e9}"), "CAFE\u{301}");
        assert_eq!(k(U8_TEXTPREP_TOUPPER, "stra\u{df}e"), "STRA\u{df}E", "simple mapping: ß stays");
        assert_eq!(k(U8_TEXTPREP_NFKC, "\u{fb01}le"), "file", "compatibility: the fi ligature");
        // Bytes that are not UTF-8 pass through; ASCII around them is still folded, except
        // what a lead byte takes with it (u8_textprep_str's walk): é cut short keeps "s".
        assert_eq!(normalized_key(U8_TEXTPREP_TOUPPER | U8_TEXTPREP_NFD, b"a\xffb").into_owned(), b"A\xffB".to_vec());
        assert_eq!(normalized_key(U8_TEXTPREP_TOUPPER, b"caf\xe9s").into_owned(), b"CAF\xe9s".to_vec());
        assert_eq!(normalized_key(U8_TEXTPREP_TOUPPER, b"a\xffb").into_owned(), b"A\xffB".to_vec());
        // Unicode 5.0's case pairs only: Georgian Mkhedruli has no upper case there; the Greek
        // letters with ypogegrammeni map one to one.
        assert_eq!(k(U8_TEXTPREP_TOUPPER, "\u{10d0}"), "\u{10d0}");
        assert_eq!(k(U8_TEXTPREP_TOUPPER, "\u{1f80}\u{1fb3}"), "\u{1f88}\u{1fbc}");
        assert_eq!(k(U8_TEXTPREP_TOUPPER, "\u{3b1}\u{430}"), "\u{391}\u{410}");
    }

    #[test]
    fn micro_zap() {
        let mut b = vec![0u8; 512];
        b[0..8].copy_from_slice(&ZBT_MICRO.to_le_bytes());
        b[8..16].copy_from_slice(&77u64.to_le_bytes());
        b[64..72].copy_from_slice(&34u64.to_le_bytes());
        b[64 + 14..64 + 18].copy_from_slice(b"ROOT");
        let (salt, _, ents) = decode_micro(&b, true).unwrap();
        assert_eq!(salt, 77);
        assert_eq!(ents.len(), 1);
        assert_eq!((ents[0].name.as_str(), ents[0].value), ("ROOT", 34));
        assert!(decode_micro(&b[..10], true).is_err());
    }

    const MASTER: &[u8] = include_bytes!("../tests/data/fx-microzap-basic-master.bin");
    const ROOT: &[u8] = include_bytes!("../tests/data/fx-microzap-basic-root.bin");
    const FAT_HDR: &[u8] = include_bytes!("../tests/data/fx-fatzap-mg-hdr.bin");
    const FAT_LEAF1: &[u8] = include_bytes!("../tests/data/fx-fatzap-mg-leaf1.bin");

    #[test]
    fn fixture_micro_zaps_match_zdb() {
        assert_eq!(block_type(MASTER, true).unwrap(), ZBT_MICRO);
        // zdb: "microzap: 512 bytes, 4 entries: ROOT = 3, SHARES = 4, DELETE_QUEUE = 2, VERSION = 4"
        let (salt, norm, ents) = decode_micro(MASTER, true).unwrap();
        assert_eq!((salt, norm), (0xc224f3, 0));
        let mut got: Vec<(&str, u64)> = ents.iter().map(|e| (e.name.as_str(), e.value)).collect();
        got.sort();
        assert_eq!(got, vec![("DELETE_QUEUE", 2), ("ROOT", 3), ("SHARES", 4), ("VERSION", 4)]);
        assert!(ents.iter().all(|e| e.cd == 0));
        // The root directory: 1 KiB, 10 entries; values carry the DT_ type in the top 4 bits.
        let (_, _, ents) = decode_micro(ROOT, true).unwrap();
        let mut got: Vec<(&str, u64, u8)> =
            ents.iter().map(|e| (e.name.as_str(), crate::znode::dirent_obj(e.value), crate::znode::dirent_type(e.value))).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("added-after-change", 84, 8),
                ("deep", 48, 4),
                ("empty-dir", 82, 4),
                ("hardlink-to-f5", 24, 8),
                ("link-long", 81, 10),
                ("link-short", 80, 10),
                ("modes", 74, 4),
                ("names", 77, 4),
                ("sizes", 5, 4),
                ("sparse.img", 83, 8),
            ]
        );
        assert!(decode_micro(FAT_HDR, true).is_err());
    }

    #[test]
    fn fixture_fat_zap_matches_zdb() {
        // zdb -dddddd tank-mirror-gzip/lz 5 ("Fat ZAP stats"): embedded pointer table of 1024
        // entries, shift 10, 16 leaves, 3000 entries, salt 0x3a8d7eb.
        assert_eq!(block_type(FAT_HDR, true).unwrap(), ZBT_HEADER);
        let h = decode_fat_header(FAT_HDR, true).unwrap();
        assert_eq!((h.magic, h.ptrtbl_blk, h.ptrtbl_numblks, h.ptrtbl_shift), (ZAP_MAGIC, 0, 0, 10));
        assert_eq!((h.ptrtbl_nextblk, h.ptrtbl_blks_copied, h.num_leafs, h.num_entries), (0, 0, 16, 3000));
        assert_eq!((h.salt, h.normflags, h.freeblk), (0x3a8d7eb, 0, 17));
        assert_eq!(zap_hashbits(h.flags), 28);
        let t = embedded_ptrtbl(FAT_HDR, true).unwrap();
        assert_eq!(t.len(), 1024);
        let leaves: std::collections::BTreeSet<u64> = t.iter().copied().collect();
        assert_eq!(leaves, (1..=16).collect());
        // "Leafs with 2^n pointers: 6: 16": every leaf owns 64 consecutive entries.
        assert!(t[..64].iter().all(|&b| b == 1));

        let leaf = decode_fat_leaf(FAT_LEAF1, true).unwrap();
        assert_eq!((leaf.prefix, leaf.prefix_len, leaf.nentries), (0, 4, 188));
        assert_eq!(leaf.entries.len(), 188);
        for e in &leaf.entries {
            // zdb lists every name as entry-NNNNN = NNNNN + 6 (type: Regular File).
            let name = e.name_str();
            let n: u64 = name.strip_prefix("entry-").unwrap().parse().unwrap();
            assert_eq!((e.int_size, e.num_ints, e.cd), (8, 1, 0), "{name}");
            assert_eq!(e.value_u64s(), vec![(8u64 << 60) | (n + 6)], "{name}");
            assert_eq!(e.hash, zap_hash(h.salt, name.as_bytes()), "{name}");
            assert_eq!(zap_leaf_index(e.hash, leaf.prefix_len as u64), leaf.prefix);
            assert_eq!(t[zap_leaf_index(e.hash, h.ptrtbl_shift) as usize], 1);
        }
        // Damaged leaves give errors, never panics or hangs.
        let mut bad = FAT_LEAF1.to_vec();
        bad[24] ^= 1;
        assert!(decode_fat_leaf(&bad, true).is_err());
        assert!(decode_fat_leaf(&FAT_LEAF1[..16000], true).is_err());
        let mut bad = FAT_LEAF1.to_vec();
        for i in (48..48 + 1024).step_by(2) {
            bad[i] = 0x10; // every bucket points at chunk 16
        }
        let _ = decode_fat_leaf(&bad, true);
    }

    #[test]
    fn uint64_key_hash_and_leaf() {
        // A uint64 key hashes its words low byte first: the same as the bytes of the words in
        // little-endian order.
        let w = [0x0102030405060708u64, 42];
        let mut bytes = Vec::new();
        for x in w {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        assert_eq!(zap_hash_uint64(7, &w, 28, false), zap_hash_bits(7, &bytes, 28));
        assert_eq!(zap_hash_uint64(7, &w, 48, true), 0x0102030405060708 & !0xffff);
        assert_eq!(zap_hash_bits(7, &bytes, 48) & 0xffff, 0);
        assert_eq!(zap_leaf_index(0xf000_0000_0000_0000, 4), 0xf);
        assert_eq!(zap_leaf_index(0xf000_0000_0000_0000, 0), 0);
    }

    #[test]
    fn uint64_keyed_leaf() {
        // One entry: key [0x1122334455667788, 9] (two words), value u64 5, in a 512-byte leaf.
        let bs = 512usize;
        let mut b = vec![0u8; bs];
        b[0..8].copy_from_slice(&ZBT_LEAF.to_le_bytes());
        b[24..28].copy_from_slice(&ZAP_LEAF_MAGIC.to_le_bytes());
        b[30..32].copy_from_slice(&1u16.to_le_bytes());
        let nhash = bs >> 5;
        for i in 1..nhash {
            b[48 + 2 * i..50 + 2 * i].copy_from_slice(&CHAIN_END.to_le_bytes());
        }
        let c0 = 48 + 2 * nhash;
        b[c0] = ZAP_CHUNK_ENTRY;
        b[c0 + 1] = 8;
        b[c0 + 2..c0 + 4].copy_from_slice(&CHAIN_END.to_le_bytes());
        b[c0 + 4..c0 + 6].copy_from_slice(&1u16.to_le_bytes()); // key chunk
        b[c0 + 6..c0 + 8].copy_from_slice(&2u16.to_le_bytes()); // 2 words
        b[c0 + 8..c0 + 10].copy_from_slice(&3u16.to_le_bytes()); // value chunk
        b[c0 + 10..c0 + 12].copy_from_slice(&1u16.to_le_bytes());
        // The 16 key bytes: big-endian words, 16 bytes fit in one array chunk.
        let k = c0 + 24;
        b[k] = ZAP_CHUNK_ARRAY;
        b[k + 1..k + 9].copy_from_slice(&0x1122334455667788u64.to_be_bytes());
        b[k + 9..k + 17].copy_from_slice(&9u64.to_be_bytes());
        b[k + 22..k + 24].copy_from_slice(&CHAIN_END.to_le_bytes());
        let v = c0 + 72;
        b[v] = ZAP_CHUNK_ARRAY;
        b[v + 1..v + 9].copy_from_slice(&5u64.to_be_bytes());
        b[v + 22..v + 24].copy_from_slice(&CHAIN_END.to_le_bytes());
        let leaf = decode_fat_leaf_keyed(&b, true, true).unwrap();
        assert_eq!(leaf.entries.len(), 1);
        let e = &leaf.entries[0];
        assert_eq!(e.key.len(), 16);
        assert_eq!(&e.key[..8], &0x1122334455667788u64.to_be_bytes());
        assert_eq!(e.value_u64s(), vec![5]);
        // Read as a string-keyed ZAP, the key is only 2 bytes long.
        assert_eq!(decode_fat_leaf(&b, true).unwrap().entries[0].key.len(), 2);
    }

    #[test]
    fn crc_table_is_ecma_reflected() {
        assert_eq!(crc64_table()[128], ZFS_CRC64_POLY);
        assert_eq!(zap_hash(1, b"") & 0xfffffff, 0);
    }

    #[test]
    fn leaf_round_trip_by_hand() {
        // A 512-byte leaf with one entry "ab" → u64 5.
        let bs = 512usize;
        let mut b = vec![0u8; bs];
        b[0..8].copy_from_slice(&ZBT_LEAF.to_le_bytes());
        b[24..28].copy_from_slice(&ZAP_LEAF_MAGIC.to_le_bytes());
        b[30..32].copy_from_slice(&1u16.to_le_bytes());
        let nhash = bs >> 5;
        for i in 0..nhash {
            b[48 + 2 * i..50 + 2 * i].copy_from_slice(&CHAIN_END.to_le_bytes());
        }
        b[48..50].copy_from_slice(&0u16.to_le_bytes());
        let c0 = 48 + 2 * nhash;
        let e = &mut b[c0..c0 + 24];
        e[0] = ZAP_CHUNK_ENTRY;
        e[1] = 8;
        e[2..4].copy_from_slice(&CHAIN_END.to_le_bytes());
        e[4..6].copy_from_slice(&1u16.to_le_bytes());
        e[6..8].copy_from_slice(&3u16.to_le_bytes());
        e[8..10].copy_from_slice(&2u16.to_le_bytes());
        e[10..12].copy_from_slice(&1u16.to_le_bytes());
        let a = &mut b[c0 + 24..c0 + 48];
        a[0] = ZAP_CHUNK_ARRAY;
        a[1..4].copy_from_slice(b"ab\0");
        a[22..24].copy_from_slice(&CHAIN_END.to_le_bytes());
        let v = &mut b[c0 + 48..c0 + 72];
        v[0] = ZAP_CHUNK_ARRAY;
        v[1..9].copy_from_slice(&5u64.to_be_bytes());
        v[22..24].copy_from_slice(&CHAIN_END.to_le_bytes());
        let leaf = decode_fat_leaf(&b, true).unwrap();
        assert_eq!(leaf.entries.len(), 1);
        assert_eq!(leaf.entries[0].name_str(), "ab");
        assert_eq!(leaf.entries[0].value_u64s(), vec![5]);
        // A loop in the chain is an error, not a hang.
        let c1 = c0 + 24;
        b[c1 + 22..c1 + 24].copy_from_slice(&1u16.to_le_bytes());
        b[c0 + 6..c0 + 8].copy_from_slice(&1000u16.to_le_bytes());
        assert!(decode_fat_leaf(&b, true).is_err());
    }
}
