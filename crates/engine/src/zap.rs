//! zap: reading ZAP objects (name → value maps) through the DMU.
//!
//! ```text
//!  block 0 ── block type ZBT_MICRO: the whole object; 64-byte entries (u64 value, cd, name ≤ 49)
//!          └─ block type ZBT_HEADER: a fat ZAP header; the pointer table either sits in the
//!             second half of block 0 (ptrtbl_numblks == 0) or in ptrtbl_numblks blocks from
//!             ptrtbl_blk. Entry i of the table (i = top ptrtbl_shift bits of a name's hash)
//!             is the block id of the leaf holding that name; several entries may share a leaf.
//!  leaves ─── ZBT_LEAF blocks of chunks (see `oxzfs_format::zap`); values are big-endian integers
//! ```
//! A lookup hashes the name (CRC-64 seeded with the salt), reads one pointer-table entry and
//! one leaf. A listing reads the pointer table once and each distinct leaf once. All work is
//! bounded by the object's size as its dnode states it (never by a count read from a block).
//! Blocks are in the byte order of the block pointer that points to them.
//!
//! Normalization (`normflags` ≠ 0: case-insensitive or Unicode-normalized directories) changes
//! the hash input; lookups in such ZAPs fall back to an exact-bytes scan of the listing, which
//! finds every name spelled as stored. Listings are unaffected.

use crate::dmu::Objset;
use crate::{Result, ZfsError};
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::zap::{self as fz, ZBT_HEADER, ZBT_MICRO};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Most pointer-table entries a listing reads (2^24 entries = 128 MiB of table); a larger
/// shift in a header is corruption for any ZAP this engine can hold in memory.
const MAX_PTRTBL_SHIFT: u64 = 24;

/// One entry, micro or fat, in a uniform shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapEntry {
    pub name: Vec<u8>,
    /// Bytes per integer of the value (1, 2, 4 or 8).
    pub int_size: u8,
    pub num_ints: u64,
    /// The value's integers, big-endian, as a fat leaf stores them (a micro entry's u64 is
    /// converted to this form so that `value_u64s` reads both alike).
    pub value: Vec<u8>,
}

impl ZapEntry {
    /// The value as integers (each `int_size` bytes wide).
    pub fn value_u64s(&self) -> Vec<u64> {
        let isz = (self.int_size as usize).max(1);
        self.value.chunks_exact(isz).map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | b as u64)).collect()
    }
    /// The first integer of the value.
    pub fn value_u64(&self) -> Option<u64> {
        let isz = (self.int_size as usize).max(1);
        self.value.get(..isz).map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | b as u64))
    }
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
    /// The key of a string-keyed ZAP as held in memory for rewriting: the name without its
    /// NUL (a uint64-key ZAP's key is `name` itself).
    pub fn name_key(&self) -> Vec<u8> {
        let mut k = self.name.clone();
        if k.last() == Some(&0) {
            k.pop();
        }
        k
    }
}

struct Fat {
    hdr: fz::ZapHeader,
    /// Data block size of the object.
    bs: u64,
    le: bool,
    block0: Arc<Vec<u8>>,
}

enum Kind {
    Micro { salt: u64, normflags: u64, entries: Vec<ZapEntry> },
    Fat(Fat),
}

/// An opened ZAP object: its dnode and first block decoded once, for repeated lookups.
/// Valid as long as the objset does not change (always, for a read-only objset).
pub struct Zap {
    obj: u64,
    objset_id: u64,
    pool: String,
    dn: DnodePhys,
    kind: Kind,
}

fn ctx(os: &Objset, obj: u64) -> String {
    format!("pool '{}' objset {} ZAP object {}", os.spa.name, os.id, obj)
}

/// The names of a micro ZAP's used entries, byte for byte (the format decoder gives names as
/// lossy UTF-8; directory names are arbitrary bytes). Same order as `decode_micro`.
fn micro_raw_names(block: &[u8]) -> Vec<Vec<u8>> {
    const NAME_OFF: usize = 14; // value u64, cd u32, pad u16
    let n = block.len() / fz::MZAP_ENT_LEN;
    let mut out = Vec::new();
    for i in 1..n {
        let e = &block[i * fz::MZAP_ENT_LEN..(i + 1) * fz::MZAP_ENT_LEN];
        let name = &e[NAME_OFF..NAME_OFF + fz::MZAP_NAME_LEN];
        if name[0] == 0 {
            continue;
        }
        let end = name.iter().position(|&c| c == 0).unwrap_or(fz::MZAP_NAME_LEN);
        out.push(name[..end].to_vec());
    }
    out
}

fn leaf_entry(e: fz::ZapLeafEntry) -> ZapEntry {
    ZapEntry { name: e.key, int_size: e.int_size, num_ints: e.num_ints, value: e.value }
}

fn be_u64(b: &[u8], le: bool) -> u64 {
    let a: [u8; 8] = b.try_into().expect("8 bytes");
    if le {
        u64::from_le_bytes(a)
    } else {
        u64::from_be_bytes(a)
    }
}

impl Zap {
    /// Open ZAP object `obj` of `os`: read its dnode and block 0.
    pub fn open(os: &Objset, obj: u64) -> Result<Zap> {
        let dn = os.dnode(obj)?;
        let bp = os
            .block_pointer(&dn, 0, 0)?
            .ok_or_else(|| ZfsError::Invalid(format!("{}: no first block", ctx(os, obj))))?;
        let le = bp.little_endian;
        let block0 = os
            .read_block(&dn, obj, 0)?
            .ok_or_else(|| ZfsError::Invalid(format!("{}: first block is a hole", ctx(os, obj))))?;
        let bad = |e| ZfsError::corrupt(ctx(os, obj), e);
        let kind = match fz::block_type(&block0, le).map_err(bad)? {
            ZBT_MICRO => {
                let (salt, normflags, ents) = fz::decode_micro(&block0, le).map_err(bad)?;
                let mut entries: Vec<ZapEntry> = ents
                    .iter()
                    .map(|e| ZapEntry {
                        name: e.name.as_bytes().to_vec(),
                        int_size: 8,
                        num_ints: 1,
                        value: e.value.to_be_bytes().to_vec(),
                    })
                    .collect();
                if ents.iter().any(|e| e.name.contains('\u{fffd}')) {
                    let raw = micro_raw_names(&block0);
                    if raw.len() == entries.len() {
                        for (e, r) in entries.iter_mut().zip(raw) {
                            e.name = r;
                        }
                    }
                }
                Kind::Micro { salt, normflags, entries }
            }
            ZBT_HEADER => {
                let hdr = fz::decode_fat_header(&block0, le).map_err(bad)?;
                let bs = dn.data_block_size();
                if bs < 512 || block0.len() as u64 != bs {
                    return Err(ZfsError::Invalid(format!("{}: fat ZAP block size {bs} (block 0 is {} bytes)", ctx(os, obj), block0.len())));
                }
                Kind::Fat(Fat { hdr, bs, le, block0 })
            }
            other => {
                return Err(ZfsError::corrupt(
                    ctx(os, obj),
                    oxzfs_format::FormatError::BadMagic { what: "ZAP block type", found: other },
                ))
            }
        };
        Ok(Zap { obj, objset_id: os.id, pool: os.spa.name.clone(), dn, kind })
    }

    fn ctx(&self) -> String {
        format!("pool '{}' objset {} ZAP object {}", self.pool, self.objset_id, self.obj)
    }

    /// The hash salt of the object.
    pub fn salt(&self) -> u64 {
        match &self.kind {
            Kind::Micro { salt, .. } => *salt,
            Kind::Fat(f) => f.hdr.salt,
        }
    }

    /// Normalization flags (u8_textprep) of the object.
    pub fn normflags(&self) -> u64 {
        match &self.kind {
            Kind::Micro { normflags, .. } => *normflags,
            Kind::Fat(f) => f.hdr.normflags,
        }
    }

    /// ZAP_FLAG_* of a fat ZAP (0 for micro).
    pub fn flags(&self) -> u64 {
        match &self.kind {
            Kind::Micro { .. } => 0,
            Kind::Fat(f) => f.hdr.flags,
        }
    }

    pub fn is_micro(&self) -> bool {
        matches!(self.kind, Kind::Micro { .. })
    }

    /// Entry count: exact for a micro ZAP, the header's count for a fat one.
    pub fn num_entries(&self) -> u64 {
        match &self.kind {
            Kind::Micro { entries, .. } => entries.len() as u64,
            Kind::Fat(f) => f.hdr.num_entries,
        }
    }

    /// The dnode of the ZAP object.
    pub fn dnode(&self) -> &DnodePhys {
        &self.dn
    }

    /// Every entry.
    pub fn list(&self, os: &Objset) -> Result<Vec<ZapEntry>> {
        match &self.kind {
            Kind::Micro { entries, .. } => Ok(entries.clone()),
            Kind::Fat(fat) => {
                let table = self.pointer_table(os, fat)?;
                let leaves: BTreeSet<u64> = table.into_iter().collect();
                let mut out = Vec::new();
                for blk in leaves {
                    out.extend(self.leaf(os, blk)?.entries.into_iter().map(leaf_entry));
                }
                Ok(out)
            }
        }
    }

    /// The hash bits of a serialized cursor of this ZAP (zap_hashbits; 28 for a micro ZAP).
    pub fn cursor_bits(&self) -> u32 {
        match &self.kind {
            Kind::Micro { .. } => 28,
            Kind::Fat(fat) => fz::zap_hashbits(fat.hdr.flags),
        }
    }

    /// The entries from serialized cursor `cursor` on (`zap_cursor_serialize`: [ cd | hash
    /// bits ], 0 for the start; kept in the scan's DDT bookmark), in the order of OpenZFS's ZAP
    /// cursor (by hash, then cd), each with the serialized cursor that follows it, until `f`
    /// returns false. Leaves are read one at a time from the cursor's, so a walk in many
    /// short turns reads each leaf about once. A micro ZAP has no such order on disk: its
    /// entries come in their slots' order, numbered as the cd. Returns whether it got to the end.
    pub fn walk_from_cursor(&self, os: &Objset, cursor: u64, mut f: impl FnMut(ZapEntry, u64) -> bool) -> Result<bool> {
        let bits = self.cursor_bits();
        let from = if cursor == 0 { (0, 0) } else { (cursor << (64 - bits), (cursor >> bits) as u32) };
        let next = |h: u64, cd: u32| (h >> (64 - bits)) | ((cd as u64 + 1) << bits);
        match &self.kind {
            Kind::Micro { entries, .. } => {
                for (cd, e) in entries.iter().enumerate().skip(from.1 as usize) {
                    if !f(e.clone(), next(0, cd as u32)) {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Kind::Fat(fat) => {
                let table = self.pointer_table(os, fat)?;
                let start = fz::zap_leaf_index(from.0, fat.hdr.ptrtbl_shift) as usize;
                let mut seen = BTreeSet::new();
                for &blk in table.iter().skip(start) {
                    if !seen.insert(blk) {
                        continue;
                    }
                    let mut es: Vec<_> = self.leaf(os, blk)?.entries.into_iter().filter(|e| (e.hash, e.cd) >= from).collect();
                    es.sort_by_key(|e| (e.hash, e.cd));
                    for e in es {
                        let c = next(e.hash, e.cd);
                        if !f(leaf_entry(e), c) {
                            return Ok(false);
                        }
                    }
                }
                Ok(true)
            }
        }
    }

    /// The entry named `name`, if any.
    pub fn lookup(&self, os: &Objset, name: &[u8]) -> Result<Option<ZapEntry>> {
        match &self.kind {
            Kind::Micro { entries, .. } => Ok(entries.iter().find(|e| e.name == name).cloned()),
            Kind::Fat(fat) => {
                let h = &fat.hdr;
                if h.flags & (fz::ZAP_FLAG_UINT64_KEY | fz::ZAP_FLAG_PRE_HASHED_KEY) != 0 {
                    return Ok(self.list(os)?.into_iter().find(|e| e.name == name));
                }
                Ok(self.hashed_leaf(os, fat, name)?.entries.into_iter().find(|e| e.key == name).map(leaf_entry))
            }
        }
    }

    /// The entry whose name equals `name` once both are normalized by `match_flags` (a subset
    /// of the ZAP's normflags: zap_match under MT_NORMALIZE), if any. Every such name hashes
    /// as `name` does (by the ZAP's normflags), so one leaf holds them all.
    pub fn lookup_matching(&self, os: &Objset, name: &[u8], match_flags: u64) -> Result<Option<ZapEntry>> {
        let key = fz::normalized_key(match_flags, name);
        let same = |n: &[u8]| fz::normalized_key(match_flags, n) == key;
        match &self.kind {
            Kind::Micro { entries, .. } => Ok(entries.iter().find(|e| same(&e.name)).cloned()),
            Kind::Fat(fat) => {
                if fat.hdr.flags & (fz::ZAP_FLAG_UINT64_KEY | fz::ZAP_FLAG_PRE_HASHED_KEY) != 0 {
                    return Ok(None);
                }
                Ok(self.hashed_leaf(os, fat, name)?.entries.into_iter().find(|e| same(&e.key)).map(leaf_entry))
            }
        }
    }

    /// The leaf that holds string key `name`: by the hash of its normalized form
    /// (zap_name_init_str hashes what the ZAP's normflags make of it).
    fn hashed_leaf(&self, os: &Objset, fat: &Fat, name: &[u8]) -> Result<fz::ZapLeaf> {
        let h = &fat.hdr;
        let bits = if h.flags & fz::ZAP_FLAG_HASH64 != 0 { 48 } else { 28 };
        let hash = fz::zap_hash_bits(h.salt, &fz::normalized_key(h.normflags, name), bits);
        let idx = fz::zap_leaf_index(hash, h.ptrtbl_shift);
        let blk = self.pointer(os, fat, idx)?;
        self.leaf(os, blk)
    }

    fn check_shift(&self, fat: &Fat) -> Result<u64> {
        let shift = fat.hdr.ptrtbl_shift;
        if shift > MAX_PTRTBL_SHIFT {
            return Err(ZfsError::Invalid(format!("{}: pointer table shift {shift}", self.ctx())));
        }
        let n = 1u64 << shift;
        if fat.hdr.ptrtbl_numblks == 0 {
            let room = fat.bs / 16;
            if n > room {
                return Err(ZfsError::Invalid(format!("{}: embedded pointer table of {n} entries, room for {room}", self.ctx())));
            }
        } else {
            let end = fat.hdr.ptrtbl_blk.checked_add(fat.hdr.ptrtbl_numblks);
            if fat.hdr.ptrtbl_blk == 0 || end.map_or(true, |e| e > self.dn.maxblkid + 1) || n * 8 > fat.hdr.ptrtbl_numblks.saturating_mul(fat.bs) {
                return Err(ZfsError::Invalid(format!(
                    "{}: pointer table of {n} entries in blocks {}+{} of an object of {} blocks",
                    self.ctx(),
                    fat.hdr.ptrtbl_blk,
                    fat.hdr.ptrtbl_numblks,
                    self.dn.maxblkid + 1
                )));
            }
        }
        Ok(n)
    }

    /// Leaf block id for pointer-table index `idx`.
    fn pointer(&self, os: &Objset, fat: &Fat, idx: u64) -> Result<u64> {
        let n = self.check_shift(fat)?;
        if idx >= n {
            return Err(ZfsError::Invalid(format!("{}: pointer index {idx} of {n}", self.ctx())));
        }
        if fat.hdr.ptrtbl_numblks == 0 {
            let off = (fat.bs / 2 + idx * 8) as usize;
            return Ok(be_u64(&fat.block0[off..off + 8], fat.le));
        }
        let per = fat.bs / 8;
        let blk = fat.hdr.ptrtbl_blk + idx / per;
        let (b, le) = self.block(os, blk, "pointer table")?;
        let off = ((idx % per) * 8) as usize;
        Ok(be_u64(&b[off..off + 8], le))
    }

    /// The whole pointer table (its first 2^shift entries).
    fn pointer_table(&self, os: &Objset, fat: &Fat) -> Result<Vec<u64>> {
        let n = self.check_shift(fat)? as usize;
        if fat.hdr.ptrtbl_numblks == 0 {
            let mut t = fz::embedded_ptrtbl(&fat.block0, fat.le).map_err(|e| ZfsError::corrupt(self.ctx(), e))?;
            t.truncate(n);
            return Ok(t);
        }
        let mut t = Vec::with_capacity(n);
        let mut blk = fat.hdr.ptrtbl_blk;
        while t.len() < n {
            let (b, le) = self.block(os, blk, "pointer table")?;
            for c in b.chunks_exact(8).take(n - t.len()) {
                t.push(be_u64(c, le));
            }
            blk += 1;
        }
        Ok(t)
    }

    /// Block `blk` of the object, which must exist and be a full block; with its byte order.
    fn block(&self, os: &Objset, blk: u64, what: &str) -> Result<(Arc<Vec<u8>>, bool)> {
        if blk > self.dn.maxblkid {
            return Err(ZfsError::Invalid(format!("{}: {what} block {blk} beyond the last block {}", self.ctx(), self.dn.maxblkid)));
        }
        let bp = os.block_pointer(&self.dn, 0, blk)?;
        let le = bp.as_ref().map_or(true, |b| b.little_endian);
        let b = os
            .read_block(&self.dn, self.obj, blk)?
            .ok_or_else(|| ZfsError::Invalid(format!("{}: {what} block {blk} is a hole", self.ctx())))?;
        if (b.len() as u64) < self.dn.data_block_size() {
            return Err(ZfsError::Invalid(format!("{}: {what} block {blk} is {} bytes", self.ctx(), b.len())));
        }
        Ok((b, le))
    }

    fn leaf(&self, os: &Objset, blk: u64) -> Result<fz::ZapLeaf> {
        if blk == 0 {
            return Err(ZfsError::Invalid(format!("{}: pointer table names block 0 as a leaf", self.ctx())));
        }
        let (b, le) = self.block(os, blk, "leaf")?;
        // The dedup table's ZAPs have keys of 8-byte words.
        let uint64_key = matches!(&self.kind, Kind::Fat(f) if f.hdr.flags & fz::ZAP_FLAG_UINT64_KEY != 0);
        fz::decode_fat_leaf_keyed(&b[..self.dn.data_block_size() as usize], le, uint64_key)
            .map_err(|e| ZfsError::corrupt(format!("{} leaf block {blk}", self.ctx()), e))
    }
}

/// Every entry of ZAP object `obj`.
pub fn zap_list(os: &Objset, obj: u64) -> Result<Vec<ZapEntry>> {
    Zap::open(os, obj)?.list(os)
}

/// The entry named `name` in ZAP object `obj`, if any.
pub fn zap_lookup(os: &Objset, obj: u64, name: &[u8]) -> Result<Option<ZapEntry>> {
    Zap::open(os, obj)?.lookup(os, name)
}

/// The first integer of the value named `name`.
pub fn zap_lookup_u64(os: &Objset, obj: u64, name: &str) -> Result<Option<u64>> {
    Ok(zap_lookup(os, obj, name.as_bytes())?.and_then(|e| e.value_u64()))
}

/// Every (name, first integer) pair; entries with an empty value are left out.
pub fn zap_list_u64(os: &Objset, obj: u64) -> Result<Vec<(String, u64)>> {
    Ok(zap_list(os, obj)?.into_iter().filter_map(|e| e.value_u64().map(|v| (e.name_str(), v))).collect())
}

/// A synced objset read through the one interface the layers above use (the ZAP reads here,
/// the dnode and block reads in dmu).
impl crate::dmu::ObjsetRead for Objset {
    fn describe(&self, obj: u64) -> String {
        format!("pool '{}' objset {} object {}", self.spa.name, self.id, obj)
    }

    fn dnode_ordered(&self, obj: u64) -> Result<(DnodePhys, bool)> {
        self.dnode_with_order(obj)
    }

    fn spill_ordered(&self, _obj: u64, dn: &DnodePhys) -> Result<Option<(Arc<Vec<u8>>, bool)>> {
        let le = dn.spill.as_ref().map_or(true, |b| b.little_endian);
        Ok(self.read_spill(dn)?.map(|b| (b, le)))
    }

    fn read_object(&self, obj: u64, dn: &DnodePhys, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read_obj(dn, obj, offset, len)
    }

    fn zap_value(&self, obj: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(zap_lookup(self, obj, name)?.and_then(|e| e.value_u64()))
    }

    fn zap_entries(&self, obj: u64) -> Result<Vec<(Vec<u8>, Vec<u64>)>> {
        Ok(zap_list(self, obj)?.into_iter().map(|e| { let v = e.value_u64s(); (e.name, v) }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_alike_for_every_integer_width() {
        let e = ZapEntry { name: b"a".to_vec(), int_size: 2, num_ints: 3, value: vec![0, 5, 1, 0, 0xff, 0xff] };
        assert_eq!(e.value_u64s(), vec![5, 256, 65535]);
        assert_eq!(e.value_u64(), Some(5));
        let m = ZapEntry { name: b"ROOT".to_vec(), int_size: 8, num_ints: 1, value: 34u64.to_be_bytes().to_vec() };
        assert_eq!(m.value_u64(), Some(34));
        let empty = ZapEntry { name: vec![], int_size: 8, num_ints: 0, value: vec![] };
        assert_eq!(empty.value_u64(), None);
    }

    #[test]
    fn micro_names_keep_their_bytes() {
        let mut b = vec![0u8; 256];
        b[0..8].copy_from_slice(&ZBT_MICRO.to_le_bytes());
        b[64..72].copy_from_slice(&7u64.to_le_bytes());
        b[64 + 14..64 + 17].copy_from_slice(b"a\xffb");
        b[192..200].copy_from_slice(&8u64.to_le_bytes());
        b[192 + 14..192 + 16].copy_from_slice(b"zz");
        assert_eq!(micro_raw_names(&b), vec![b"a\xffb".to_vec(), b"zz".to_vec()]);
        let (_, _, ents) = fz::decode_micro(&b, true).unwrap();
        assert_eq!(ents.len(), 2, "the raw names line up with the decoder's entries");
    }
}
