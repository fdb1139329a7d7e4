//! The intent log's on-disk pieces (`include/sys/zil.h`): log blocks, their chain, and log records.
//!
//! ```text
//!   objset_phys → zil_header (zh_log = first log block's bp)
//!
//!   log block, pool version ≥ 23 ("slim", checksum ZILOG2, fletcher4):
//!     0  zil_chain_t { zc_pad, zc_next_blk (bp, 128), zc_nused, zc_eck (magic + 4 words) }  184
//!   184  log records … up to zc_nused (which counts the 184-byte header)
//!   log block, older pools (checksum ZILOG, fletcher2):
//!     0  log records … up to zc_nused          size-184  zil_chain_t as a trailer
//!
//!   the checksum is embedded in zc_eck: computed with the four words holding the verifier, the
//!   block's own bp checksum { guid0, guid1, objset id, block sequence }, then stored there. The
//!   next block's bp (always allocated, never a hole) carries the same words with the sequence
//!   + 1, so a stale block (an old chain's, or never written) fails the check and ends the chain,
//!   as in zil_read_log_block.
//!
//!   log record (8-byte aligned, lrc_reclen counts the padding):
//!     lr_t { lrc_txtype, lrc_reclen, lrc_txg, lrc_seq }  32, then the type's fields, then the
//!     type's variable part (names NUL-terminated, write data, ACL, xattr name and value)
//! ```
//!
//! Slim blocks are checksummed over the first `zc_nused` bytes (OpenZFS 2.1 and zfs-fuse; later
//! OpenZFS rounds the region up to ZIL_MIN_BLKSZ and zero-fills it, which both readings accept
//! when the writer zero-fills the rest of the block, as `encode_log_block` does). Records are
//! written in little-endian; a block's order comes from its trailer's magic. Nothing here
//! allocates more than the input's length.

use crate::blkptr::{BlockPointer, BLKPTR_SIZE};
use crate::bytes::{slice, u32_at, u64_at};
use crate::checksum::{self, ZEC_MAGIC, ZIO_CHECKSUM_FLETCHER_2, ZIO_CHECKSUM_FLETCHER_4, ZIO_CHECKSUM_ZILOG2, ZIO_ECK_SIZE};
use crate::{FormatError, Result};

/// Size of `zil_chain_t` (pad 8, next bp 128, nused 8, eck 40).
pub const ZIL_CHAIN_SIZE: usize = 8 + BLKPTR_SIZE + 8 + ZIO_ECK_SIZE;
/// Smallest log block (ZIL_MIN_BLKSZ).
pub const ZIL_MIN_BLKSZ: u64 = 4096;
/// Size of the common record header `lr_t`.
pub const LR_HEADER_SIZE: usize = 32;
/// Checksum words of a log block's bp: `zc_word[ZIL_ZC_*]`.
pub const ZIL_ZC_GUID_0: usize = 0;
pub const ZIL_ZC_GUID_1: usize = 1;
pub const ZIL_ZC_OBJSET: usize = 2;
pub const ZIL_ZC_SEQ: usize = 3;
/// zh_flags: replay needed (in memory only) and zh_claim_lr_seq valid.
pub const ZIL_REPLAY_NEEDED: u64 = 0x1;
pub const ZIL_CLAIM_LR_SEQ_VALID: u64 = 0x2;

pub const TX_COMMIT: u64 = 0;
pub const TX_CREATE: u64 = 1;
pub const TX_MKDIR: u64 = 2;
pub const TX_MKXATTR: u64 = 3;
pub const TX_SYMLINK: u64 = 4;
pub const TX_REMOVE: u64 = 5;
pub const TX_RMDIR: u64 = 6;
pub const TX_LINK: u64 = 7;
pub const TX_RENAME: u64 = 8;
pub const TX_WRITE: u64 = 9;
pub const TX_TRUNCATE: u64 = 10;
pub const TX_SETATTR: u64 = 11;
pub const TX_ACL_V0: u64 = 12;
pub const TX_ACL: u64 = 13;
pub const TX_CREATE_ACL: u64 = 14;
pub const TX_CREATE_ATTR: u64 = 15;
pub const TX_CREATE_ACL_ATTR: u64 = 16;
pub const TX_MKDIR_ACL: u64 = 17;
pub const TX_MKDIR_ATTR: u64 = 18;
pub const TX_MKDIR_ACL_ATTR: u64 = 19;
pub const TX_WRITE2: u64 = 20;
pub const TX_SETSAXATTR: u64 = 21;
pub const TX_RENAME_EXCHANGE: u64 = 22;
pub const TX_RENAME_WHITEOUT: u64 = 23;
pub const TX_CLONE_RANGE: u64 = 24;
pub const TX_MAX_TYPE: u64 = 25;
/// Case-insensitive flag in lrc_txtype.
pub const TX_CI: u64 = 1 << 63;

/// setattr mask bits (`lr_mask`), the AT_* values of illumos, FreeBSD, libzpool (zdb, ztest,
/// zhack) and zfs-fuse. OpenZFS's Linux kernel module logs Linux's ATTR_* values instead
/// (ATTR_MODE 1, ATTR_UID 2, …): a log is replayed correctly only by a ZPL that shares its
/// writer's convention, so oxzfs writes and reads these.
pub const AT_MODE: u64 = 0x0002;
pub const AT_UID: u64 = 0x0004;
pub const AT_GID: u64 = 0x0008;
pub const AT_SIZE: u64 = 0x0080;
pub const AT_ATIME: u64 = 0x0100;
pub const AT_MTIME: u64 = 0x0200;
pub const AT_CTIME: u64 = 0x0400;
pub const AT_XVATTR: u64 = 0x10000;

/// OpenZFS's name of a record type, as `zdb -ivv` prints it.
pub fn txtype_name(t: u64) -> &'static str {
    const NAMES: [&str; TX_MAX_TYPE as usize] = [
        "Invalid", "TX_CREATE", "TX_MKDIR", "TX_MKXATTR", "TX_SYMLINK", "TX_REMOVE", "TX_RMDIR", "TX_LINK", "TX_RENAME",
        "TX_WRITE", "TX_TRUNCATE", "TX_SETATTR", "TX_ACL_V0", "TX_ACL_ACL", "TX_CREATE_ACL", "TX_CREATE_ATTR",
        "TX_CREATE_ACL_ATTR", "TX_MKDIR_ACL", "TX_MKDIR_ATTR", "TX_MKDIR_ACL_ATTR", "TX_WRITE2", "TX_SETSAXATTR",
        "TX_RENAME_EXCHANGE", "TX_RENAME_WHITEOUT", "TX_CLONE_RANGE",
    ];
    NAMES.get((t & !TX_CI) as usize).copied().unwrap_or("Unknown")
}

/// A log block as read: where its records are, and the next block of the chain.
#[derive(Clone, Debug)]
pub struct LogBlock<'a> {
    /// The record bytes (`zc_nused` of them, the chain header excluded).
    pub records: &'a [u8],
    pub next: BlockPointer,
    pub le: bool,
}

fn word(b: &[u8], off: usize, le: bool) -> Result<u64> {
    u64_at(b, off, le, "zil_chain")
}

/// Check a log block read for `bp` (ZILOG2 when `slim`, else ZILOG) and find its records and the
/// next block. A block that does not verify (bad or stale checksum, impossible `zc_nused`, or a
/// next bp whose checksum is not this one's with the sequence + 1) is an error: the chain ends
/// there, as in zil_read_log_block.
pub fn decode_log_block<'a>(block: &'a [u8], bp_cksum: [u64; 4], slim: bool) -> Result<LogBlock<'a>> {
    decode_log_block_of(block, bp_cksum, slim, false)
}

/// `decode_log_block` of a block of an encrypted dataset when `encrypted`: its embedded
/// checksum is truncated (words 0 and 1 hold the fletcher-4's words 0^2 and 1^3; words 2
/// and 3 the MAC), as zio_checksum_error_impl checks it for an encrypted bp.
pub fn decode_log_block_of<'a>(block: &'a [u8], bp_cksum: [u64; 4], slim: bool, encrypted: bool) -> Result<LogBlock<'a>> {
    let size = block.len();
    if size < ZIL_CHAIN_SIZE {
        return Err(FormatError::Truncated { what: "zil log block", need: ZIL_CHAIN_SIZE, have: size });
    }
    let base = if slim { 0 } else { size - ZIL_CHAIN_SIZE };
    let eck = base + 8 + BLKPTR_SIZE + 8;
    let magic = u64::from_le_bytes(slice(block, eck, 8, "zil_chain")?.try_into().expect("8 bytes"));
    let le = if magic == ZEC_MAGIC {
        true
    } else if magic.swap_bytes() == ZEC_MAGIC {
        false
    } else {
        return Err(FormatError::BadMagic { what: "zil_chain eck", found: magic });
    };
    let nused = word(block, base + 8 + BLKPTR_SIZE, le)?;
    let region = if slim {
        if nused < ZIL_CHAIN_SIZE as u64 || nused > size as u64 {
            return Err(FormatError::invalid("zil_chain", format!("zc_nused {nused} outside {ZIL_CHAIN_SIZE}..={size}")));
        }
        nused as usize
    } else {
        if nused > (size - ZIL_CHAIN_SIZE) as u64 {
            return Err(FormatError::invalid("zil_chain", format!("zc_nused {nused} over {}", size - ZIL_CHAIN_SIZE)));
        }
        size
    };
    let stored = [word(block, eck + 8, le)?, word(block, eck + 16, le)?, word(block, eck + 24, le)?, word(block, eck + 32, le)?];
    let mut copy = block[..region].to_vec();
    for (i, w) in bp_cksum.iter().enumerate() {
        let b = if le { w.to_le_bytes() } else { w.to_be_bytes() };
        copy[eck + 8 + i * 8..eck + 16 + i * 8].copy_from_slice(&b);
    }
    let alg = if slim { ZIO_CHECKSUM_FLETCHER_4 } else { ZIO_CHECKSUM_FLETCHER_2 };
    let mut computed = checksum::compute(alg, &copy, le, &[0u8; 32])?;
    let full = |c: &[u64; 4]| if encrypted { c[0] ^ c[2] == stored[0] && c[1] ^ c[3] == stored[1] } else { *c == stored };
    if slim && !full(&computed) && region % ZIL_MIN_BLKSZ as usize != 0 {
        // Later writers checksum the region rounded up to ZIL_MIN_BLKSZ (zero-filled).
        let up = region.div_ceil(ZIL_MIN_BLKSZ as usize) * ZIL_MIN_BLKSZ as usize;
        if up <= size {
            copy.extend_from_slice(&block[region..up]);
            computed = checksum::compute(alg, &copy, le, &[0u8; 32])?;
        }
    }
    let matches = |c: &[u64; 4]| if encrypted { c[0] ^ c[2] == stored[0] && c[1] ^ c[3] == stored[1] } else { *c == stored };
    if !matches(&computed) {
        return Err(FormatError::Checksum { what: "zil log block" });
    }
    let next = BlockPointer::decode(slice(block, base + 8, BLKPTR_SIZE, "zil_chain next")?, le)?;
    let mut expect = bp_cksum;
    expect[ZIL_ZC_SEQ] = expect[ZIL_ZC_SEQ].wrapping_add(1);
    if next.cksum != expect {
        return Err(FormatError::invalid("zil_chain", "next block's checksum words are not this block's with the sequence + 1"));
    }
    let records = if slim { &block[ZIL_CHAIN_SIZE..nused as usize] } else { &block[..nused as usize] };
    Ok(LogBlock { records, next, le })
}

/// Build a log block of `size` bytes holding `records` (already encoded, 8-aligned), chained to
/// `next`, checksummed with `bp_cksum` as the verifier (little-endian). Slim blocks keep the chain
/// header first; the unused tail is zero.
pub fn encode_log_block(size: usize, records: &[u8], next: &BlockPointer, bp_cksum: [u64; 4], slim: bool) -> Result<Vec<u8>> {
    if size < ZIL_CHAIN_SIZE + records.len() {
        return Err(FormatError::invalid("zil log block", format!("{} record bytes do not fit {size}", records.len())));
    }
    let mut b = vec![0u8; size];
    let (base, rec_at, nused) =
        if slim { (0, ZIL_CHAIN_SIZE, ZIL_CHAIN_SIZE + records.len()) } else { (size - ZIL_CHAIN_SIZE, 0, records.len()) };
    b[rec_at..rec_at + records.len()].copy_from_slice(records);
    b[base + 8..base + 8 + BLKPTR_SIZE].copy_from_slice(&next.encode(true));
    b[base + 8 + BLKPTR_SIZE..base + 16 + BLKPTR_SIZE].copy_from_slice(&(nused as u64).to_le_bytes());
    let eck = base + 16 + BLKPTR_SIZE;
    b[eck..eck + 8].copy_from_slice(&ZEC_MAGIC.to_le_bytes());
    for (i, w) in bp_cksum.iter().enumerate() {
        b[eck + 8 + i * 8..eck + 16 + i * 8].copy_from_slice(&w.to_le_bytes());
    }
    let region = if slim { nused } else { size };
    let alg = if slim { ZIO_CHECKSUM_FLETCHER_4 } else { ZIO_CHECKSUM_FLETCHER_2 };
    let c = checksum::compute(alg, &b[..region], true, &[0u8; 32])?;
    for (i, w) in c.iter().enumerate() {
        b[eck + 8 + i * 8..eck + 16 + i * 8].copy_from_slice(&w.to_le_bytes());
    }
    Ok(b)
}

/// The checksum function a log block's bp names for a pool of `spa_version`.
pub fn log_block_checksum(spa_version: u64) -> u8 {
    if spa_version >= 23 {
        ZIO_CHECKSUM_ZILOG2
    } else {
        checksum::ZIO_CHECKSUM_ZILOG
    }
}

/// The common header of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LrCommon {
    pub txtype: u64,
    pub reclen: u64,
    pub txg: u64,
    pub seq: u64,
}

/// The fields of a create record (`_lr_create_t`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LrCreate {
    pub doid: u64,
    /// Object number; bits 56..63 hold dnode slots - 1 (LR_FOID_GET_SLOTS).
    pub foid: u64,
    pub mode: u64,
    pub uid: u64,
    pub gid: u64,
    pub gen: u64,
    pub crtime: [u64; 2],
    pub rdev: u64,
}

/// A log record's type-specific part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LrBody {
    /// TX_CREATE, TX_MKDIR, TX_MKXATTR, TX_SYMLINK (target in `link`); the _ATTR and _ACL
    /// variants keep their attribute/ACL bytes in `extra`.
    Create { c: LrCreate, name: Vec<u8>, link: Option<Vec<u8>>, extra: Vec<u8> },
    /// TX_REMOVE, TX_RMDIR.
    Remove { doid: u64, name: Vec<u8> },
    Link { doid: u64, link_obj: u64, name: Vec<u8> },
    /// TX_RENAME, TX_RENAME_EXCHANGE.
    Rename { sdoid: u64, tdoid: u64, sname: Vec<u8>, tname: Vec<u8> },
    /// TX_WRITE, TX_WRITE2: `data` holds the bytes of a copied write; an indirect write has
    /// none and `blkptr` names the block that holds them.
    Write { foid: u64, offset: u64, length: u64, blkoff: u64, blkptr: BlockPointer, data: Vec<u8> },
    Truncate { foid: u64, offset: u64, length: u64 },
    /// `xvattr` holds an optional lr_attr_t (AT_XVATTR in the mask).
    Setattr { foid: u64, mask: u64, mode: u64, uid: u64, gid: u64, size: u64, atime: [u64; 2], mtime: [u64; 2], xvattr: Vec<u8> },
    /// TX_SETSAXATTR: `value` None removes the xattr.
    SetSaXattr { foid: u64, name: Vec<u8>, value: Option<Vec<u8>> },
    /// TX_ACL (and TX_ACL_V0, whose counts are zero but aclcnt): raw ACEs in `data`.
    Acl { foid: u64, aclcnt: u64, domcnt: u64, fuidcnt: u64, acl_bytes: u64, acl_flags: u64, data: Vec<u8> },
    /// A type oxzfs does not decode (TX_CLONE_RANGE, TX_RENAME_WHITEOUT, …): the bytes after lr_t.
    Other(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    pub common: LrCommon,
    pub body: LrBody,
}

fn u64s(b: &[u8], off: usize, n: usize, le: bool, what: &'static str) -> Result<Vec<u64>> {
    (0..n).map(|i| u64_at(b, off + i * 8, le, what)).collect()
}

/// Split `b` at its first NUL: (name, rest after the NUL).
fn cstr<'a>(b: &'a [u8], what: &'static str) -> Result<(&'a [u8], &'a [u8])> {
    let n = b.iter().position(|&c| c == 0).ok_or_else(|| FormatError::invalid(what, "name without its NUL"))?;
    Ok((&b[..n], &b[n + 1..]))
}

fn is_create(t: u64) -> bool {
    matches!(t, TX_CREATE..=TX_SYMLINK | TX_CREATE_ACL..=TX_MKDIR_ACL_ATTR)
}

impl LogRecord {
    /// Decode the record at the start of `b` (which may hold more records after it). The
    /// record's length is `common.reclen`.
    pub fn decode(b: &[u8], le: bool) -> Result<LogRecord> {
        let what = "zil log record";
        let txtype = u64_at(b, 0, le, what)?;
        let reclen = u64_at(b, 8, le, what)?;
        if reclen < LR_HEADER_SIZE as u64 || reclen % 8 != 0 || reclen > b.len() as u64 {
            return Err(FormatError::invalid(what, format!("lrc_reclen {reclen} (type {}) in {} bytes", txtype_name(txtype), b.len())));
        }
        let common = LrCommon { txtype, reclen, txg: u64_at(b, 16, le, what)?, seq: u64_at(b, 24, le, what)? };
        let r = &b[..reclen as usize];
        let t = txtype & !TX_CI;
        let w = |i: usize| u64_at(r, LR_HEADER_SIZE + i * 8, le, what);
        let tail = |i: usize| slice(r, LR_HEADER_SIZE + i * 8, r.len().saturating_sub(LR_HEADER_SIZE + i * 8), what);
        let body = match t {
            _ if is_create(t) => {
                let v = u64s(r, LR_HEADER_SIZE, 9, le, what)?;
                let c = LrCreate { doid: v[0], foid: v[1], mode: v[2], uid: v[3], gid: v[4], gen: v[5], crtime: [v[6], v[7]], rdev: v[8] };
                let after = LR_HEADER_SIZE + 72;
                let (extra_len, at) = create_extra(r, t, after, le)?;
                let extra = slice(r, at - extra_len, extra_len, what)?.to_vec();
                let (name, rest) = cstr(slice(r, at, r.len() - at, what)?, what)?;
                let link = if t == TX_SYMLINK { Some(cstr(rest, what)?.0.to_vec()) } else { None };
                LrBody::Create { c, name: name.to_vec(), link, extra }
            }
            TX_REMOVE | TX_RMDIR => LrBody::Remove { doid: w(0)?, name: cstr(tail(1)?, what)?.0.to_vec() },
            TX_LINK => LrBody::Link { doid: w(0)?, link_obj: w(1)?, name: cstr(tail(2)?, what)?.0.to_vec() },
            TX_RENAME | TX_RENAME_EXCHANGE => {
                let (s, rest) = cstr(tail(2)?, what)?;
                let (d, _) = cstr(rest, what)?;
                LrBody::Rename { sdoid: w(0)?, tdoid: w(1)?, sname: s.to_vec(), tname: d.to_vec() }
            }
            TX_WRITE | TX_WRITE2 => {
                let blkptr = BlockPointer::decode(slice(r, LR_HEADER_SIZE + 32, BLKPTR_SIZE, what)?, le)?;
                let length = w(2)?;
                let data_at = LR_HEADER_SIZE + 32 + BLKPTR_SIZE;
                let avail = r.len().saturating_sub(data_at) as u64;
                // A copied write carries its bytes (padded to 8); an indirect one only the bp.
                let data = if avail >= length && avail > 0 { slice(r, data_at, length as usize, what)?.to_vec() } else { Vec::new() };
                LrBody::Write { foid: w(0)?, offset: w(1)?, length, blkoff: w(3)?, blkptr, data }
            }
            TX_TRUNCATE => LrBody::Truncate { foid: w(0)?, offset: w(1)?, length: w(2)? },
            TX_SETATTR => {
                let v = u64s(r, LR_HEADER_SIZE, 10, le, what)?;
                LrBody::Setattr {
                    foid: v[0],
                    mask: v[1],
                    mode: v[2],
                    uid: v[3],
                    gid: v[4],
                    size: v[5],
                    atime: [v[6], v[7]],
                    mtime: [v[8], v[9]],
                    xvattr: tail(10)?.to_vec(),
                }
            }
            TX_SETSAXATTR => {
                let size = w(1)?;
                let (name, rest) = cstr(tail(2)?, what)?;
                let value = if size == 0 { None } else { Some(slice(rest, 0, size as usize, what)?.to_vec()) };
                LrBody::SetSaXattr { foid: w(0)?, name: name.to_vec(), value }
            }
            TX_ACL => {
                let v = u64s(r, LR_HEADER_SIZE, 6, le, what)?;
                LrBody::Acl { foid: v[0], aclcnt: v[1], domcnt: v[2], fuidcnt: v[3], acl_bytes: v[4], acl_flags: v[5], data: tail(6)?.to_vec() }
            }
            TX_ACL_V0 => LrBody::Acl { foid: w(0)?, aclcnt: w(1)?, domcnt: 0, fuidcnt: 0, acl_bytes: 0, acl_flags: 0, data: tail(2)?.to_vec() },
            _ => LrBody::Other(tail(0)?.to_vec()),
        };
        Ok(LogRecord { common, body })
    }

    /// Encode little-endian, padded to 8 bytes; `common.reclen` is set from the result.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(LR_HEADER_SIZE + 64);
        let put = |b: &mut Vec<u8>, v: &[u64]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
        let c = &self.common;
        put(&mut b, &[c.txtype, 0, c.txg, c.seq]);
        let cz = |b: &mut Vec<u8>, s: &[u8]| {
            b.extend_from_slice(s);
            b.push(0)
        };
        match &self.body {
            LrBody::Create { c, name, link, extra } => {
                put(&mut b, &[c.doid, c.foid, c.mode, c.uid, c.gid, c.gen, c.crtime[0], c.crtime[1], c.rdev]);
                b.extend_from_slice(extra);
                cz(&mut b, name);
                if let Some(l) = link {
                    cz(&mut b, l);
                }
            }
            LrBody::Remove { doid, name } => {
                put(&mut b, &[*doid]);
                cz(&mut b, name);
            }
            LrBody::Link { doid, link_obj, name } => {
                put(&mut b, &[*doid, *link_obj]);
                cz(&mut b, name);
            }
            LrBody::Rename { sdoid, tdoid, sname, tname } => {
                put(&mut b, &[*sdoid, *tdoid]);
                cz(&mut b, sname);
                cz(&mut b, tname);
            }
            LrBody::Write { foid, offset, length, blkoff, blkptr, data } => {
                put(&mut b, &[*foid, *offset, *length, *blkoff]);
                b.extend_from_slice(&blkptr.encode(true));
                b.extend_from_slice(data);
            }
            LrBody::Truncate { foid, offset, length } => put(&mut b, &[*foid, *offset, *length]),
            LrBody::Setattr { foid, mask, mode, uid, gid, size, atime, mtime, xvattr } => {
                put(&mut b, &[*foid, *mask, *mode, *uid, *gid, *size, atime[0], atime[1], mtime[0], mtime[1]]);
                b.extend_from_slice(xvattr);
            }
            LrBody::SetSaXattr { foid, name, value } => {
                put(&mut b, &[*foid, value.as_ref().map_or(0, |v| v.len() as u64)]);
                cz(&mut b, name);
                if let Some(v) = value {
                    b.extend_from_slice(v);
                }
            }
            LrBody::Acl { foid, aclcnt, domcnt, fuidcnt, acl_bytes, acl_flags, data } => {
                if self.common.txtype & !TX_CI == TX_ACL_V0 {
                    put(&mut b, &[*foid, *aclcnt]);
                } else {
                    put(&mut b, &[*foid, *aclcnt, *domcnt, *fuidcnt, *acl_bytes, *acl_flags]);
                }
                b.extend_from_slice(data);
            }
            LrBody::Other(rest) => b.extend_from_slice(rest),
        }
        b.resize(b.len().div_ceil(8) * 8, 0);
        let n = b.len() as u64;
        b[8..16].copy_from_slice(&n.to_le_bytes());
        b
    }

    /// The object a record changes out of order (TX_OOO: write, truncate, setattr, ACL, xattr).
    pub fn ooo_object(&self) -> Option<u64> {
        match &self.body {
            LrBody::Write { foid, .. }
            | LrBody::Truncate { foid, .. }
            | LrBody::Setattr { foid, .. }
            | LrBody::SetSaXattr { foid, .. }
            | LrBody::Acl { foid, .. } => Some(*foid),
            _ => None,
        }
    }
}

/// For a create record of type `t` whose fixed part ends at `after`: (length of the attribute /
/// ACL bytes before the name, offset of the name).
fn create_extra(r: &[u8], t: u64, after: usize, le: bool) -> Result<(usize, usize)> {
    let what = "zil create record";
    let acl = matches!(t, TX_CREATE_ACL | TX_CREATE_ACL_ATTR | TX_MKDIR_ACL | TX_MKDIR_ACL_ATTR);
    let attr = matches!(t, TX_CREATE_ATTR | TX_CREATE_ACL_ATTR | TX_MKDIR_ATTR | TX_MKDIR_ACL_ATTR);
    let mut at = after;
    let mut acl_tail = 0usize;
    if acl {
        // lr_acl_create_t: aclcnt, domcnt, fuidcnt, acl_bytes, acl_flags after _lr_create_t; then
        // the xvattr (if any), the ACEs rounded up to 8, the FUIDs and their domain strings.
        let v = u64s(r, at, 5, le, what)?;
        at += 40;
        let (domcnt, fuidcnt, acl_bytes) = (v[1], v[2], v[3]);
        let ace = acl_bytes.checked_add(7).map(|x| x & !7).ok_or_else(|| FormatError::invalid(what, "ACL length"))?;
        let fuids = fuidcnt.checked_mul(8).ok_or_else(|| FormatError::invalid(what, "FUID count"))?;
        let base = ace.checked_add(fuids).filter(|&n| n <= r.len() as u64).ok_or_else(|| FormatError::invalid(what, "ACL past the record"))?;
        acl_tail = base as usize;
        // Domain strings follow, NUL-terminated, domcnt of them.
        let mut off = 0usize;
        for _ in 0..domcnt {
            let start = at + acl_tail + off;
            let rest = slice(r, start, r.len().saturating_sub(start), what)?;
            let n = rest.iter().position(|&c| c == 0).ok_or_else(|| FormatError::invalid(what, "FUID domain without NUL"))?;
            off += n + 1;
        }
        acl_tail += off;
    }
    let mut xv = 0usize;
    if attr {
        let mask = u32_at(r, at, le, what)? as usize;
        if mask == 0 || mask > 64 {
            return Err(FormatError::invalid(what, format!("lr_attr_masksize {mask}")));
        }
        // ZIL_XVAT_SIZE: lr_attr_t (8) + 4 * (mask - 1) + 7 u64 (attrs, crtime, scanstamp).
        xv = 8 + 4 * (mask - 1) + 56;
        xv = xv.div_ceil(8) * 8;
    }
    let extra = xv + acl_tail;
    let name_at = at.checked_add(extra).filter(|&n| n <= r.len()).ok_or_else(|| FormatError::invalid(what, "attributes past the record"))?;
    Ok((name_at - after, name_at))
}

/// Iterate the records of a log block's record bytes, in order; stops at the first error.
pub fn records(b: &[u8], le: bool) -> impl Iterator<Item = Result<LogRecord>> + '_ {
    let mut off = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || off >= b.len() {
            return None;
        }
        let r = LogRecord::decode(&b[off..], le);
        match &r {
            Ok(rec) => off += rec.common.reclen as usize,
            Err(_) => failed = true,
        }
        Some(r)
    })
}

/// The records of a log block of an encrypted dataset, read without its key: only what is
/// plaintext there, each record's lr_t and a write's block pointer (at byte 64, as
/// zio_crypt_init_uios_zil leaves it); every other body is `Other` with no bytes. What a claim
/// and a scrub need of an encrypted chain.
pub fn records_encrypted(b: &[u8], le: bool) -> impl Iterator<Item = Result<LogRecord>> + '_ {
    let mut off = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || off >= b.len() {
            return None;
        }
        let r = (|| {
            let w = u64s(b, off, 4, le, "lr_t")?;
            let common = LrCommon { txtype: w[0], reclen: w[1], txg: w[2], seq: w[3] };
            if common.reclen < 32 || common.reclen > (b.len() - off) as u64 {
                return Err(FormatError::invalid("lr_t", format!("record length {} at {off}", common.reclen)));
            }
            let body = if common.txtype == TX_WRITE && common.reclen >= 192 {
                let blkptr = BlockPointer::decode(&b[off + 64..off + 192], le)?;
                LrBody::Write { foid: 0, offset: 0, length: 0, blkoff: 0, blkptr, data: Vec::new() }
            } else {
                LrBody::Other(Vec::new())
            };
            Ok(LogRecord { common, body })
        })();
        match &r {
            Ok(rec) => off += rec.common.reclen as usize,
            Err(_) => failed = true,
        }
        Some(r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(txtype: u64, seq: u64, body: LrBody) -> LogRecord {
        LogRecord { common: LrCommon { txtype, reclen: 0, txg: 7, seq }, body }
    }

    fn round_trip(r: &LogRecord) {
        let b = r.encode();
        assert_eq!(b.len() % 8, 0);
        let back = LogRecord::decode(&b, true).unwrap();
        assert_eq!(back.common.reclen, b.len() as u64);
        assert_eq!(back.encode(), b, "{}", txtype_name(r.common.txtype));
        assert_eq!(std::mem::discriminant(&back.body), std::mem::discriminant(&r.body));
        if let (LrBody::Write { data: a, .. }, LrBody::Write { data: d, .. }) = (&back.body, &r.body) {
            assert_eq!(a, d);
        }
    }

    #[test]
    fn records_round_trip() {
        let c = LrCreate { doid: 34, foid: 129, mode: 0o100644, uid: 1000, gid: 100, gen: 9, crtime: [1, 2], rdev: 0 };
        round_trip(&rec(TX_CREATE, 1, LrBody::Create { c: c.clone(), name: b"hello.txt".to_vec(), link: None, extra: vec![] }));
        round_trip(&rec(TX_SYMLINK, 2, LrBody::Create { c, name: b"ln".to_vec(), link: Some(b"/some/target".to_vec()), extra: vec![] }));
        round_trip(&rec(TX_REMOVE, 3, LrBody::Remove { doid: 34, name: b"x".to_vec() }));
        round_trip(&rec(TX_LINK, 4, LrBody::Link { doid: 34, link_obj: 129, name: b"hard".to_vec() }));
        round_trip(&rec(TX_RENAME, 5, LrBody::Rename { sdoid: 34, tdoid: 35, sname: b"a".to_vec(), tname: b"bb".to_vec() }));
        let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        round_trip(&rec(TX_WRITE, 6, LrBody::Write { foid: 129, offset: 8192, length: 4096, blkoff: 0, blkptr: BlockPointer::hole(), data }));
        round_trip(&rec(TX_TRUNCATE, 7, LrBody::Truncate { foid: 129, offset: 100, length: u64::MAX - 100 }));
        round_trip(&rec(
            TX_SETATTR,
            8,
            LrBody::Setattr { foid: 129, mask: AT_MODE | AT_SIZE, mode: 0o600, uid: 0, gid: 0, size: 5, atime: [3, 4], mtime: [5, 6], xvattr: vec![] },
        ));
        round_trip(&rec(TX_SETSAXATTR, 9, LrBody::SetSaXattr { foid: 129, name: b"user.k".to_vec(), value: Some(b"v1".to_vec()) }));
        round_trip(&rec(TX_SETSAXATTR, 10, LrBody::SetSaXattr { foid: 129, name: b"user.k".to_vec(), value: None }));
    }

    #[test]
    fn a_write_record_is_the_size_openzfs_logs() {
        // lr_write_t is 192 bytes before the data; 5 bytes of data pad to 200.
        let r = rec(TX_WRITE, 1, LrBody::Write { foid: 2, offset: 0, length: 5, blkoff: 0, blkptr: BlockPointer::hole(), data: b"hello".to_vec() });
        assert_eq!(r.encode().len(), 200);
    }

    #[test]
    fn blocks_round_trip_and_stale_ones_end_the_chain() {
        let recs: Vec<u8> = [rec(TX_REMOVE, 1, LrBody::Remove { doid: 34, name: b"gone".to_vec() }), rec(TX_TRUNCATE, 2, LrBody::Truncate { foid: 9, offset: 0, length: 1 })]
            .iter()
            .flat_map(|r| r.encode())
            .collect();
        let ck = [11, 22, 54, 1];
        let mut next = BlockPointer::hole();
        next.cksum = [11, 22, 54, 2];
        for slim in [true, false] {
            let blk = encode_log_block(4096, &recs, &next, ck, slim).unwrap();
            let lb = decode_log_block(&blk, ck, slim).unwrap();
            assert_eq!(lb.records, &recs[..]);
            let got: Vec<_> = records(lb.records, lb.le).map(|r| r.unwrap().common.seq).collect();
            assert_eq!(got, vec![1, 2]);
            // the same block read for a bp of another sequence is stale
            assert!(decode_log_block(&blk, [11, 22, 54, 7], slim).is_err());
            // a flipped record byte fails the checksum
            let mut bad = blk.clone();
            let at = if slim { ZIL_CHAIN_SIZE + 40 } else { 40 };
            bad[at] ^= 1;
            assert!(matches!(decode_log_block(&bad, ck, slim), Err(FormatError::Checksum { .. })));
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        for len in [0usize, 7, 32, 40, 183, 184, 300, 4096] {
            for _ in 0..200 {
                let b: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed as u8
                    })
                    .collect();
                let _ = decode_log_block(&b, [0; 4], true);
                let _ = decode_log_block(&b, [0; 4], false);
                for r in records(&b, true) {
                    let _ = r;
                }
            }
        }
        // A plausible header with an absurd reclen is refused, not trusted.
        let mut b = vec![0u8; 64];
        b[0..8].copy_from_slice(&TX_WRITE.to_le_bytes());
        b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(LogRecord::decode(&b, true).is_err());
    }
}
