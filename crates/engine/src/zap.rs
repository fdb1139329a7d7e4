//! zap: reading ZAP objects (name → value maps) through the DMU.
//!
//! A ZAP object's first block says which kind it is. A micro ZAP is that one block. A fat ZAP
//! has a header (block 0), a pointer table (embedded in block 0, or in blocks of its own) that
//! maps the top bits of a name's hash to a leaf block, and the leaves holding the entries
//! (see `oxzfs_format::zap`). Lookups go straight to the one leaf the hash names; listings
//! visit each distinct leaf once. Work is bounded by the object's size.

use crate::dmu::Objset;
use crate::{Result, ZfsError};
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::zap::{self as fz, ZBT_HEADER, ZBT_MICRO};
use std::collections::BTreeSet;

/// One entry, micro or fat, in a uniform shape.
#[derive(Clone, Debug)]
pub struct ZapEntry {
    pub name: Vec<u8>,
    pub int_size: u8,
    pub num_ints: u64,
    /// Big-endian integers as a fat leaf stores them (micro values are converted to this form).
    pub value: Vec<u8>,
}

impl ZapEntry {
    pub fn value_u64s(&self) -> Vec<u64> {
        let isz = (self.int_size as usize).max(1);
        self.value.chunks_exact(isz).map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | b as u64)).collect()
    }
    pub fn value_u64(&self) -> Option<u64> {
        self.value_u64s().first().copied()
    }
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

struct Fat {
    hdr: fz::ZapHeader,
    bs: u64,
    le: bool,
    block0: std::sync::Arc<Vec<u8>>,
}

enum Kind {
    Micro(Vec<fz::MzapEntry>),
    Fat(Fat),
}

fn ctx(os: &Objset, obj: u64) -> String {
    format!("pool '{}' objset {} ZAP object {}", os.spa.name, os.id, obj)
}

fn open(os: &Objset, obj: u64) -> Result<(DnodePhys, Kind)> {
    let dn = os.dnode(obj)?;
    let bp = os
        .block_pointer(&dn, 0, 0)?
        .ok_or_else(|| ZfsError::Invalid(format!("{}: no first block", ctx(os, obj))))?;
    let le = bp.little_endian;
    let block0 = match os.read_block(&dn, obj, 0)? {
        Some(b) => b,
        None => return Err(ZfsError::Invalid(format!("{}: first block is a hole", ctx(os, obj)))),
    };
    let bt = fz::block_type(&block0, le).map_err(|e| ZfsError::corrupt(ctx(os, obj), e))?;
    match bt {
        ZBT_MICRO => {
            let (_, _, ents) = fz::decode_micro(&block0, le).map_err(|e| ZfsError::corrupt(ctx(os, obj), e))?;
            Ok((dn, Kind::Micro(ents)))
        }
        ZBT_HEADER => {
            let hdr = fz::decode_fat_header(&block0, le).map_err(|e| ZfsError::corrupt(ctx(os, obj), e))?;
            let bs = dn.data_block_size();
            Ok((dn, Kind::Fat(Fat { hdr, bs, le, block0 })))
        }
        other => Err(ZfsError::corrupt(ctx(os, obj), oxzfs_format::FormatError::BadMagic { what: "ZAP block type", found: other })),
    }
}

fn micro_entry(e: &fz::MzapEntry) -> ZapEntry {
    ZapEntry { name: e.name.as_bytes().to_vec(), int_size: 8, num_ints: 1, value: e.value.to_be_bytes().to_vec() }
}

fn leaf_entry(e: fz::ZapLeafEntry) -> ZapEntry {
    ZapEntry { name: e.key, int_size: e.int_size, num_ints: e.num_ints, value: e.value }
}

impl Fat {
    /// Leaf block id for pointer-table index `idx`.
    fn ptr(&self, os: &Objset, dn: &DnodePhys, obj: u64, idx: u64) -> Result<u64> {
        if self.hdr.ptrtbl_numblks == 0 {
            let tbl = fz::embedded_ptrtbl(&self.block0, self.le).map_err(|e| ZfsError::corrupt(ctx(os, obj), e))?;
            tbl.get(idx as usize).copied().ok_or_else(|| ZfsError::Invalid(format!("{}: pointer index {idx}", ctx(os, obj))))
        } else {
            let per = self.bs / 8;
            let blk = self.hdr.ptrtbl_blk + idx / per;
            let off = (idx % per) * 8;
            let b = os
                .read_block(dn, obj, blk)?
                .ok_or_else(|| ZfsError::Invalid(format!("{}: pointer table block {blk} is a hole", ctx(os, obj))))?;
            let bytes: [u8; 8] = b[off as usize..off as usize + 8].try_into().unwrap();
            Ok(if self.le { u64::from_le_bytes(bytes) } else { u64::from_be_bytes(bytes) })
        }
    }

    fn leaf(&self, os: &Objset, dn: &DnodePhys, obj: u64, blk: u64) -> Result<fz::ZapLeaf> {
        if blk == 0 || blk > dn.maxblkid {
            return Err(ZfsError::Invalid(format!("{}: leaf block {blk} out of range", ctx(os, obj))));
        }
        let b = os
            .read_block(dn, obj, blk)?
            .ok_or_else(|| ZfsError::Invalid(format!("{}: leaf block {blk} is a hole", ctx(os, obj))))?;
        fz::decode_fat_leaf(&b, self.le).map_err(|e| ZfsError::corrupt(format!("{} leaf {blk}", ctx(os, obj)), e))
    }

    fn hash_bits(&self) -> u32 {
        if self.hdr.flags & fz::ZAP_FLAG_HASH64 != 0 {
            48
        } else {
            28
        }
    }
}

/// Every entry of a ZAP object.
pub fn zap_list(os: &Objset, obj: u64) -> Result<Vec<ZapEntry>> {
    let (dn, kind) = open(os, obj)?;
    match kind {
        Kind::Micro(ents) => Ok(ents.iter().map(micro_entry).collect()),
        Kind::Fat(fat) => {
            let mut leaves = BTreeSet::new();
            let n = 1u64 << fat.hdr.ptrtbl_shift.min(32);
            if n > (dn.maxblkid + 1) * fat.bs {
                return Err(ZfsError::Invalid(format!("{}: pointer table of {n} entries", ctx(os, obj))));
            }
            for i in 0..n {
                leaves.insert(fat.ptr(os, &dn, obj, i)?);
            }
            let mut out = Vec::new();
            for blk in leaves {
                let leaf = fat.leaf(os, &dn, obj, blk)?;
                out.extend(leaf.entries.into_iter().map(leaf_entry));
            }
            Ok(out)
        }
    }
}

/// The entry named `name`, if any.
pub fn zap_lookup(os: &Objset, obj: u64, name: &[u8]) -> Result<Option<ZapEntry>> {
    let (dn, kind) = open(os, obj)?;
    match kind {
        Kind::Micro(ents) => Ok(ents.iter().find(|e| e.name.as_bytes() == name).map(micro_entry)),
        Kind::Fat(fat) => {
            if fat.hdr.flags & fz::ZAP_FLAG_UINT64_KEY != 0 {
                return Ok(zap_list(os, obj)?.into_iter().find(|e| e.name == name));
            }
            let h = fz::zap_hash_bits(fat.hdr.salt, name, fat.hash_bits());
            let idx = fz::zap_leaf_index(h, fat.hdr.ptrtbl_shift);
            let blk = fat.ptr(os, &dn, obj, idx)?;
            let leaf = fat.leaf(os, &dn, obj, blk)?;
            Ok(leaf.entries.into_iter().find(|e| e.key == name).map(leaf_entry))
        }
    }
}

pub fn zap_lookup_u64(os: &Objset, obj: u64, name: &str) -> Result<Option<u64>> {
    Ok(zap_lookup(os, obj, name.as_bytes())?.and_then(|e| e.value_u64()))
}

pub fn zap_list_u64(os: &Objset, obj: u64) -> Result<Vec<(String, u64)>> {
    Ok(zap_list(os, obj)?.into_iter().filter_map(|e| e.value_u64().map(|v| (e.name_str(), v))).collect())
}
