//! dmu: objsets and dnodes — reading an object's bytes through its tree of block pointers.
//!
//! ```text
//!   objset_phys (from a bp: the uberblock's root bp for the MOS, a dataset's bp otherwise)
//!     └ meta dnode ── its data is the array of dnodes: object N at byte N*512
//!         └ dnode ── nlevels of block pointers: level 0 holds data blocks of
//!                    datablkszsec*512 bytes; each indirect block (1 << indblkshift bytes)
//!                    holds 1 << (indblkshift - 7) bps of the level below; the dnode holds
//!                    nblkptr bps of the top level.
//! ```
//!
//! A hole (a bp with no DVA) reads as zeros, at any level. Large dnodes take 1 + extra_slots
//! consecutive 512-byte slots. Structures inside a block are in the byte order of the bp that
//! points to the block (`little_endian`), which `dnode_with_order` reports for a dnode's bonus.
//! An `Objset` is an immutable snapshot of an on-disk tree (read-only), so no locks are needed
//! beyond the ARC's. `ObjsetRead` is what the layers above read of any object set: this one,
//! or the writable `dbuf::ObjsetW` layered over it (dirty, then frozen, then synced).

use crate::spa::Spa;
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::{BlockPointer, BLKPTR_SIZE};
use oxzfs_format::dnode::{DnodePhys, DNODE_SIZE};
use oxzfs_format::objset::ObjsetPhys;
use std::sync::Arc;

/// What the layers above read of an object set, whichever it is: a synced one (`Objset`,
/// immutable) or the one being written (`dbuf::ObjsetW`, whose reads see the open txg's dirty
/// state, then the txg being synced, then the synced tree), as OpenZFS reads both through one
/// objset_t. The ZPL reads files, directories and system attributes through this alone.
pub trait ObjsetRead {
    /// Names object `obj` of this objset in error reports ("pool 'p' objset N object M").
    fn describe(&self, obj: u64) -> String;
    /// The dnode of `obj` and the byte order of its bonus.
    fn dnode_ordered(&self, obj: u64) -> Result<(DnodePhys, bool)>;
    /// The spill block of `obj` (whose dnode is `dn`) and its byte order, if it has one.
    fn spill_ordered(&self, obj: u64, dn: &DnodePhys) -> Result<Option<(Arc<Vec<u8>>, bool)>>;
    /// `len` bytes at `offset` of object `obj` (dnode `dn`), holes as zeros; what lies past
    /// the object's last block may be left out (callers clip to the size they know).
    fn read_object(&self, obj: u64, dn: &DnodePhys, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// The first integer of the value of `name` in ZAP `obj`.
    fn zap_value(&self, obj: u64, name: &[u8]) -> Result<Option<u64>>;
    /// Every entry of ZAP `obj`: name and the integers of its value.
    fn zap_entries(&self, obj: u64) -> Result<Vec<(Vec<u8>, Vec<u64>)>>;
}

pub struct Objset {
    pub spa: Arc<Spa>,
    pub phys: ObjsetPhys,
    pub bp: BlockPointer,
    /// The dataset object number in the MOS (0 for the MOS itself), for error reports.
    pub id: u64,
}

impl Spa {
    /// The meta objset as of the last synced txg. Panics only if called after `close`
    /// (export), a bug in the caller.
    pub fn mos(self: &Arc<Self>) -> Arc<Objset> {
        let (bp, phys) = self.mos_root().expect("MOS is open while the pool is imported");
        Arc::new(Objset { spa: self.clone(), phys, bp, id: 0 })
    }
}

impl Objset {
    /// Open the objset `bp` points to (the MOS, or a dataset's).
    pub fn open(spa: &Arc<Spa>, bp: &BlockPointer) -> Result<Arc<Objset>> {
        Self::open_id(spa, bp, 0)
    }

    /// Open with the dataset object number `id` recorded for error reporting.
    pub fn open_id(spa: &Arc<Spa>, bp: &BlockPointer, id: u64) -> Result<Arc<Objset>> {
        let buf = spa.read_bp(bp)?;
        let phys = ObjsetPhys::decode(&buf, bp.little_endian)
            .map_err(|e| ZfsError::corrupt(format!("pool '{}' objset {id} ({bp})", spa.name), e))?;
        Ok(Arc::new(Objset { spa: spa.clone(), phys, bp: bp.clone(), id }))
    }

    fn ctx(&self, obj: u64) -> String {
        format!("pool '{}' objset {} object {}", self.spa.name, self.id, obj)
    }

    /// Highest object number the meta dnode can hold.
    pub fn max_object(&self) -> u64 {
        let md = &self.phys.meta_dnode;
        (md.maxblkid + 1) * md.data_block_size() / DNODE_SIZE as u64
    }

    /// The dnode of object `obj`.
    pub fn dnode(&self, obj: u64) -> Result<DnodePhys> {
        self.dnode_with_order(obj).map(|(d, _)| d)
    }

    /// The dnode of object `obj` and the byte order of the block holding it (for the bonus).
    pub fn dnode_with_order(&self, obj: u64) -> Result<(DnodePhys, bool)> {
        if obj >= oxzfs_format::objset::DMU_PROJECTUSED_OBJECT {
            // The accounting objects live in the objset block itself (DMU_*USED_OBJECT).
            let dn = match obj {
                oxzfs_format::objset::DMU_USERUSED_OBJECT => &self.phys.userused_dnode,
                oxzfs_format::objset::DMU_GROUPUSED_OBJECT => &self.phys.groupused_dnode,
                _ => &self.phys.projectused_dnode,
            };
            return match dn.as_ref().filter(|d| !d.is_free()) {
                Some(d) => Ok((d.clone(), self.bp.little_endian)),
                None => Err(ZfsError::NotFound(format!("{} (no accounting object)", self.ctx(obj)))),
            };
        }
        let md = &self.phys.meta_dnode;
        let blksz = md.data_block_size();
        if blksz < DNODE_SIZE as u64 {
            return Err(ZfsError::Invalid(format!("{}: meta dnode block size {blksz}", self.ctx(obj))));
        }
        let per_block = blksz / DNODE_SIZE as u64;
        let blkid = obj / per_block;
        if blkid > md.maxblkid {
            return Err(ZfsError::NotFound(format!("{}", self.ctx(obj))));
        }
        let bp = self.block_pointer(md, 0, blkid)?;
        let Some(bp) = bp.filter(|b| !b.is_hole()) else {
            return Err(ZfsError::NotFound(format!("{} (hole in the dnode array)", self.ctx(obj))));
        };
        let block = self.read_block_bp(&bp, 0, blkid)?;
        let off = ((obj % per_block) * DNODE_SIZE as u64) as usize;
        let dn = DnodePhys::decode(&block[off..], bp.little_endian).map_err(|e| ZfsError::corrupt(self.ctx(obj), e))?;
        if dn.is_free() {
            return Err(ZfsError::NotFound(format!("{} (free dnode)", self.ctx(obj))));
        }
        Ok((dn, bp.little_endian))
    }

    fn read_block_bp(&self, bp: &BlockPointer, obj: u64, blkid: u64) -> Result<Arc<Vec<u8>>> {
        // zinject -t data: the block fails before the ARC is asked (every read of it fails
        // while the handler stands).
        if let Some(f) = crate::vdev::inject::data_fault(&self.spa.name, self.id, obj, 0, blkid) {
            self.spa.record_error(self.id, obj, 0, blkid);
            return Err(injected_error(f, &self.ctx(obj), blkid));
        }
        self.spa.read_bp_for(bp, self.id).map_err(|e| {
            if !matches!(e, ZfsError::Invalid(_) | ZfsError::Unsupported(_)) {
                self.spa.record_error(self.id, obj, 0, blkid);
            }
            e
        })
    }

    /// The bp of block `blkid` at `level` of the object, or None beyond the tree / under a hole.
    pub fn block_pointer(&self, dn: &DnodePhys, level: u8, blkid: u64) -> Result<Option<BlockPointer>> {
        let nlevels = dn.nlevels as u32;
        if nlevels == 0 || level as u32 >= nlevels {
            return Ok(None);
        }
        if dn.indblkshift < 7 || dn.indblkshift > 17 {
            if nlevels > 1 {
                return Err(ZfsError::Invalid(format!("dnode with indblkshift {}", dn.indblkshift)));
            }
        }
        let epbs = (dn.indblkshift as u32).saturating_sub(7);
        let top_shift = epbs as u64 * (nlevels - 1 - level as u32) as u64;
        let top_idx = if top_shift >= 64 { 0 } else { blkid >> top_shift };
        if top_idx >= dn.blkptr.len() as u64 {
            return Ok(None);
        }
        let mut bp = dn.blkptr[top_idx as usize].clone();
        let mut lvl = nlevels - 1;
        while lvl > level as u32 {
            if bp.is_hole() {
                return Ok(None);
            }
            let ind = self.spa.read_bp_for(&bp, self.id)?;
            let shift = epbs as u64 * (lvl - 1 - level as u32) as u64;
            let idx = (blkid.checked_shr(shift as u32).unwrap_or(0) & ((1u64 << epbs) - 1)) as usize;
            let off = idx * BLKPTR_SIZE;
            if off + BLKPTR_SIZE > ind.len() {
                return Err(ZfsError::Invalid(format!("indirect block too small ({} bytes) for index {idx}", ind.len())));
            }
            bp = BlockPointer::decode(&ind[off..off + BLKPTR_SIZE], bp.little_endian)
                .map_err(|e| ZfsError::corrupt(format!("indirect block at level {lvl}"), e))?;
            lvl -= 1;
        }
        Ok(Some(bp))
    }

    /// Data block `blkid` (level 0) of an object; None for a hole.
    pub fn read_block(&self, dn: &DnodePhys, obj: u64, blkid: u64) -> Result<Option<Arc<Vec<u8>>>> {
        match self.block_pointer(dn, 0, blkid)? {
            None => Ok(None),
            Some(bp) if bp.is_hole() && !bp.embedded => Ok(None),
            Some(bp) => self.read_block_bp(&bp, obj, blkid).map(Some),
        }
    }

    /// `len` bytes at `offset` of the object, holes as zeros, clipped at the end of its last block.
    pub fn read(&self, dn: &DnodePhys, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read_obj(dn, 0, offset, len)
    }

    /// As `read`, naming the object for error reports.
    pub fn read_obj(&self, dn: &DnodePhys, obj: u64, offset: u64, len: u64) -> Result<Vec<u8>> {
        Ok(ReadPart::gather(&self.read_obj_parts(dn, obj, offset, len)?))
    }

    /// `read_obj`'s bytes as the pieces of the blocks they are in (the ARC's buffers, shared,
    /// not copied) and runs of zeros (holes, a block's end past its stored length), in order:
    /// what a reply that can send several pieces at once (FUSE's writev) takes as it is.
    pub fn read_obj_parts(&self, dn: &DnodePhys, obj: u64, offset: u64, len: u64) -> Result<Vec<ReadPart>> {
        let blksz = dn.data_block_size();
        if blksz == 0 {
            return Ok(Vec::new());
        }
        let end_of_obj = (dn.maxblkid + 1).saturating_mul(blksz);
        let end = offset.saturating_add(len).min(end_of_obj);
        if offset >= end {
            return Ok(Vec::new());
        }
        if end - offset > 256 << 20 {
            return Err(ZfsError::Invalid(format!("read of {} bytes is too large", end - offset)));
        }
        let mut out: Vec<ReadPart> = Vec::new();
        let mut pos = offset;
        while pos < end {
            let blkid = pos / blksz;
            let in_blk = pos % blksz;
            let n = (blksz - in_blk).min(end - pos);
            let mut zeros = n as usize;
            if let Some(block) = self.read_block(dn, obj, blkid)? {
                let a = in_blk as usize;
                let b = (in_blk + n).min(block.len() as u64) as usize;
                if a < b {
                    out.push(ReadPart::Block(block, a..b));
                    zeros -= b - a;
                }
            }
            if zeros > 0 {
                match out.last_mut() {
                    Some(ReadPart::Zeros(z)) => *z += zeros,
                    _ => out.push(ReadPart::Zeros(zeros)),
                }
            }
            pos += n;
        }
        Ok(out)
    }

    /// The spill block of a dnode (system attributes that did not fit in the bonus).
    pub fn read_spill(&self, dn: &DnodePhys) -> Result<Option<Arc<Vec<u8>>>> {
        match &dn.spill {
            Some(bp) if !bp.is_hole() => self.spa.read_bp_for(bp, self.id).map(Some),
            _ => Ok(None),
        }
    }
}

/// A piece of an object's bytes (`Objset::read_obj_parts`): bytes of a block as the ARC holds
/// it, or zeros.
#[derive(Clone, Debug)]
pub enum ReadPart {
    Block(Arc<Vec<u8>>, std::ops::Range<usize>),
    Zeros(usize),
}

impl ReadPart {
    pub fn len(&self) -> usize {
        match self {
            ReadPart::Block(_, r) => r.len(),
            ReadPart::Zeros(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces' bytes in one buffer.
    pub fn gather(parts: &[ReadPart]) -> Vec<u8> {
        let mut out = Vec::with_capacity(parts.iter().map(ReadPart::len).sum());
        for p in parts {
            match p {
                ReadPart::Block(b, r) => out.extend_from_slice(&b[r.clone()]),
                ReadPart::Zeros(n) => out.resize(out.len() + n, 0),
            }
        }
        out
    }
}

/// The error a read caught by a data handler returns.
pub fn injected_error(f: crate::vdev::inject::DevError, what: &str, blkid: u64) -> ZfsError {
    match f {
        crate::vdev::inject::DevError::Corrupt => ZfsError::Checksum { context: format!("{what} block {blkid} (injected)") },
        _ => ZfsError::Io { device: format!("{what} block {blkid}"), offset: 0, source: std::io::Error::from_raw_os_error(libc::EIO) },
    }
}
