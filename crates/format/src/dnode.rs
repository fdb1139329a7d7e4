//! Dnodes (`dnode_phys_t`): 512-byte slots, 1 + extra_slots of them for a large dnode.
//!
//! ```text
//!   0 type  1 indblkshift  2 nlevels  3 nblkptr  4 bonustype  5 checksum  6 compress  7 flags
//!   8 datablkszsec(u16)  10 bonuslen(u16)  12 extra_slots  13..16 pad
//!  16 maxblkid(u64)  24 used(u64)  32..64 pad
//!  64 blkptr[nblkptr] (128 bytes each), then the bonus buffer (bonuslen bytes)
//!     with DNODE_FLAG_SPILL_BLKPTR, the last 128 bytes of the dnode are the spill bp
//! ```

use crate::blkptr::{BlockPointer, BLKPTR_SIZE};
use crate::bytes::{slice, u16_at, u64_at, u8_at};
use crate::{FormatError, Result};

pub const DNODE_SHIFT: u32 = 9;
pub const DNODE_SIZE: usize = 512;
pub const DNODE_CORE_SIZE: usize = 64;
pub const DN_MAX_SLOTS: usize = 32;
/// DN_MAX_LEVELS: enough levels to address 2^64 bytes with 512-byte blocks and 4K indirects.
pub const DN_MAX_LEVELS: u8 = 12;
pub const DN_MIN_INDBLKSHIFT: u8 = 12;
pub const DN_MAX_INDBLKSHIFT: u8 = 17;
pub const DNODE_FLAG_USED_BYTES: u8 = 1 << 0;
pub const DNODE_FLAG_USERUSED_ACCOUNTED: u8 = 1 << 1;
pub const DNODE_FLAG_SPILL_BLKPTR: u8 = 1 << 2;
/// The dnode is counted in its owner's object count (userobj_accounting).
pub const DNODE_FLAG_USEROBJUSED_ACCOUNTED: u8 = 1 << 3;

#[derive(Clone, Debug)]
pub struct DnodePhys {
    pub typ: u8,
    pub indblkshift: u8,
    pub nlevels: u8,
    pub nblkptr: u8,
    pub bonustype: u8,
    pub checksum: u8,
    pub compress: u8,
    pub flags: u8,
    pub datablkszsec: u16,
    pub bonuslen: u16,
    pub extra_slots: u8,
    pub maxblkid: u64,
    pub used: u64,
    pub blkptr: Vec<BlockPointer>,
    pub bonus: Vec<u8>,
    pub spill: Option<BlockPointer>,
}

impl DnodePhys {
    /// Decode the dnode at the start of `buf` (which may continue into its extra slots).
    pub fn decode(buf: &[u8], le: bool) -> Result<DnodePhys> {
        let core = slice(buf, 0, DNODE_CORE_SIZE, "dnode")?;
        let typ = u8_at(core, 0, "dnode")?;
        let extra_slots = u8_at(core, 12, "dnode")?;
        let mut dn = DnodePhys {
            typ,
            indblkshift: core[1],
            nlevels: core[2],
            nblkptr: core[3],
            bonustype: core[4],
            checksum: core[5],
            compress: core[6],
            flags: core[7],
            datablkszsec: u16_at(core, 8, le, "dnode")?,
            bonuslen: u16_at(core, 10, le, "dnode")?,
            extra_slots,
            maxblkid: u64_at(core, 16, le, "dnode")?,
            used: u64_at(core, 24, le, "dnode")?,
            blkptr: Vec::new(),
            bonus: Vec::new(),
            spill: None,
        };
        if typ == 0 {
            return Ok(dn);
        }
        let slots = 1 + extra_slots as usize;
        if slots > DN_MAX_SLOTS {
            return Err(FormatError::invalid("dnode", format!("{slots} slots")));
        }
        let size = slots * DNODE_SIZE;
        let all = slice(buf, 0, size, "dnode (extra slots)")?;
        let spill = dn.flags & DNODE_FLAG_SPILL_BLKPTR != 0;
        let tail = if spill { BLKPTR_SIZE } else { 0 };
        let nbp = dn.nblkptr as usize;
        if nbp == 0 || DNODE_CORE_SIZE + nbp * BLKPTR_SIZE + tail > size {
            return Err(FormatError::invalid("dnode", format!("{nbp} block pointers in {slots} slot(s)")));
        }
        for i in 0..nbp {
            dn.blkptr.push(BlockPointer::decode(&all[DNODE_CORE_SIZE + i * BLKPTR_SIZE..], le)?);
        }
        let bonus_off = DNODE_CORE_SIZE + nbp * BLKPTR_SIZE;
        let bonus_max = size - bonus_off - tail;
        let bl = dn.bonuslen as usize;
        if bl > bonus_max {
            return Err(FormatError::invalid("dnode", format!("bonus of {bl} bytes, room for {bonus_max}")));
        }
        dn.bonus = all[bonus_off..bonus_off + bl].to_vec();
        if spill {
            dn.spill = Some(BlockPointer::decode(&all[size - BLKPTR_SIZE..], le)?);
        }
        if dn.nlevels == 0 || dn.nlevels > DN_MAX_LEVELS {
            return Err(FormatError::invalid("dnode", format!("{} levels", dn.nlevels)));
        }
        Ok(dn)
    }


    /// Encode into `slots * 512` bytes, little-endian (the inverse of [`DnodePhys::decode`]).
    /// A free dnode encodes as zeros. The bonus is placed after the block pointers; the spill
    /// pointer, when present, in the last 128 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let size = self.slots() * DNODE_SIZE;
        let mut out = vec![0u8; size];
        if self.typ == 0 {
            return out;
        }
        out[0] = self.typ;
        out[1] = self.indblkshift;
        out[2] = self.nlevels;
        out[3] = self.nblkptr;
        out[4] = self.bonustype;
        out[5] = self.checksum;
        out[6] = self.compress;
        out[7] = self.flags;
        out[8..10].copy_from_slice(&self.datablkszsec.to_le_bytes());
        out[10..12].copy_from_slice(&self.bonuslen.to_le_bytes());
        out[12] = self.extra_slots;
        out[16..24].copy_from_slice(&self.maxblkid.to_le_bytes());
        out[24..32].copy_from_slice(&self.used.to_le_bytes());
        assert_eq!(self.blkptr.len(), self.nblkptr as usize, "dnode: nblkptr != block pointers");
        for (i, bp) in self.blkptr.iter().enumerate() {
            let o = DNODE_CORE_SIZE + i * BLKPTR_SIZE;
            out[o..o + BLKPTR_SIZE].copy_from_slice(&bp.encode(true));
        }
        let bonus_off = DNODE_CORE_SIZE + self.blkptr.len() * BLKPTR_SIZE;
        let tail = if self.spill.is_some() { BLKPTR_SIZE } else { 0 };
        assert!(bonus_off + self.bonus.len() + tail <= size, "dnode: bonus of {} does not fit", self.bonus.len());
        assert_eq!(self.bonus.len(), self.bonuslen as usize, "dnode: bonuslen != bonus");
        out[bonus_off..bonus_off + self.bonus.len()].copy_from_slice(&self.bonus);
        if let Some(sp) = &self.spill {
            out[size - BLKPTR_SIZE..].copy_from_slice(&sp.encode(true));
        }
        out
    }

    /// Room for the bonus in a dnode of `slots` slots with `nblkptr` block pointers.
    pub fn bonus_room(slots: usize, nblkptr: usize) -> usize {
        slots * DNODE_SIZE - DNODE_CORE_SIZE - nblkptr * BLKPTR_SIZE
    }

    /// Data block size in bytes.
    pub fn data_block_size(&self) -> u64 {
        self.datablkszsec as u64 * 512
    }

    pub fn is_free(&self) -> bool {
        self.typ == 0
    }

    /// Slots this dnode occupies.
    pub fn slots(&self) -> usize {
        1 + self.extra_slots as usize
    }

    /// Space used, in bytes.
    pub fn used_bytes(&self) -> u64 {
        if self.flags & DNODE_FLAG_USED_BYTES != 0 {
            self.used
        } else {
            self.used.saturating_mul(512)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tank-basic (fixture `basic`, zfs-fuse, ZPL 4): the dnode block holding objects 64..95.
    const BLK2: &[u8] = include_bytes!("../tests/data/fx-dnode-basic-blk2.bin");

    fn obj(n: usize) -> DnodePhys {
        let off = (n - 64) * DNODE_SIZE;
        DnodePhys::decode(&BLK2[off..], true).unwrap()
    }

    #[test]
    fn fixture_dnode_block_matches_zdb() {
        let all: Vec<DnodePhys> = BLK2.chunks_exact(DNODE_SIZE).map(|c| DnodePhys::decode(c, true).unwrap()).collect();
        // The L0 bp of this block says F=21: 21 allocated dnodes.
        assert_eq!(all.iter().filter(|d| !d.is_free()).count(), 21);
        // zdb -dddddd tank-basic/ 83: lvl 2, iblk 16K, dblk 128K, maxblkid 36, bonus 264 ZFS znode,
        // flags USED_BYTES USERUSED_ACCOUNTED, dsize 770K.
        let d = obj(83);
        assert_eq!((d.typ, d.nlevels, d.indblkshift, d.data_block_size()), (crate::types::DMU_OT_PLAIN_FILE_CONTENTS, 2, 14, 128 << 10));
        assert_eq!((d.maxblkid, d.bonustype, d.bonuslen, d.nblkptr, d.slots()), (36, crate::types::DMU_OT_ZNODE, 264, 1, 1));
        assert_eq!(d.flags, DNODE_FLAG_USED_BYTES | DNODE_FLAG_USERUSED_ACCOUNTED);
        assert_eq!(d.used_bytes(), 770 << 10);
        assert_eq!(
            d.blkptr[0].compact(true),
            "0:840000:400 0:1380000:400 4000L/400P F=6 B=28/28 cksum=0000006eb074c237:00003e824582cb7b:0014a1f72a772797:050f155daeb6fe72"
        );
        assert!(d.spill.is_none());
        // Object 80 (/link-short): no data block, a 282-byte bonus (znode + inline target), and
        // without DNODE_FLAG_USED_BYTES.
        let d = obj(80);
        assert_eq!((d.bonuslen, d.flags, d.used, d.data_block_size()), (282, DNODE_FLAG_USERUSED_ACCOUNTED, 0, 512));
        assert!(d.blkptr[0].is_hole());
        // Object 81 (/link-long): the target lives in its one data block.
        let d = obj(81);
        assert_eq!(d.bonuslen, 264);
        assert_eq!(d.used_bytes(), 512);
        assert_eq!(
            d.blkptr[0].compact(true),
            "0:744600:200 200L/200P F=1 B=25/25 cksum=0000001a75fc10fe:00000a5f001cb813:00021b3b10129952:004b753f16d18cc9"
        );
        assert_eq!(obj(77).typ, crate::types::DMU_OT_DIRECTORY_CONTENTS);
    }

    /// A dnode block of an OpenZFS 2.1 ztest pool (large_dnode): objects 1, 11, 12 (1K) and
    /// 14 (2K); the slots inside a large dnode hold its bonus, not dnodes.
    const ZT: &[u8] = include_bytes!("../tests/data/fx-dnode-ztest-large.bin");

    #[test]
    fn fixture_large_dnodes_match_zdb() {
        // Walk the block as dnode_next_offset does: a dnode covers 1 + extra_slots slots.
        let mut found = Vec::new();
        let mut slot = 0;
        while slot < 32 {
            let d = DnodePhys::decode(&ZT[slot * DNODE_SIZE..], true).unwrap();
            if !d.is_free() {
                found.push((slot, d.slots()));
            }
            slot += d.slots();
        }
        // The block's bp has F=4.
        assert_eq!(found, vec![(1, 1), (11, 1), (12, 2), (14, 4)]);
        // zdb -dddddd fxzt/ds_0 12: lvl 5, iblk 128K, dblk 2K, dnsize 1K, bonus 832,
        // maxblkid 743085448679, K=fletcher2, Z=gzip-8, USED_BYTES, dsize 3.06M.
        let d = DnodePhys::decode(&ZT[12 * DNODE_SIZE..], true).unwrap();
        assert_eq!((d.typ, d.nlevels, d.indblkshift, d.data_block_size(), d.slots()), (crate::types::DMU_OT_UINT64_OTHER, 5, 17, 2048, 2));
        assert_eq!((d.bonuslen, d.bonus.len(), d.bonustype, d.maxblkid), (832, 832, crate::types::DMU_OT_UINT64_OTHER, 743085448679));
        assert_eq!((d.checksum, d.compress, d.flags), (crate::checksum::ZIO_CHECKSUM_FLETCHER_2, crate::compress::ZIO_COMPRESS_GZIP_8, DNODE_FLAG_USED_BYTES));
        assert_eq!((d.used_bytes() as f64 / 1048576.0 * 100.0).round(), 306.0);
        assert_eq!(
            d.blkptr[0].compact(true),
            "1:2f05000:1000 2:10f5000:1000 20000L/1000P F=613 B=1474/1474 \
             cksum=04439d37d13e7c0d:5f3783c6b1c76974:dbf3b0b3cf4f1d4e:b59f9b93db7f7ff0"
        );
        // An indirect block of an encrypted dataset: MAC-protected, not encrypted.
        assert!(d.blkptr[0].encrypted && !d.blkptr[0].is_encrypted_data());
        assert!(d.blkptr[0].to_string().contains(" indirect-MAC LE contiguous unique double "));
        // Object 14: four slots, a 1856-byte bonus (1.81K), iblk 64K.
        let d = DnodePhys::decode(&ZT[14 * DNODE_SIZE..], true).unwrap();
        assert_eq!((d.slots(), d.bonuslen, d.indblkshift, d.nlevels, d.maxblkid), (4, 1856, 16, 5, 1430844894));
        assert_eq!(
            d.blkptr[0].compact(true),
            "1:2ee8000:1000 2:10ed000:1000 10000L/1000P F=31 B=1474/1474 \
             cksum=02a69eea6340ea75:118e1590a4016cf9:45eecb5e8db1924f:5a24986c8b08a233"
        );
        // Its four slots must all be there.
        assert!(DnodePhys::decode(&ZT[14 * DNODE_SIZE..16 * DNODE_SIZE], true).is_err());
        // Object 1, a micro ZAP with three bps (the 3-bp shape of a 512-byte dnode).
        let d = DnodePhys::decode(&ZT[DNODE_SIZE..], true).unwrap();
        assert_eq!((d.typ, d.nblkptr, d.bonuslen, d.data_block_size()), (crate::types::DMU_OT_ZAP_OTHER, 3, 0, 1024));
    }

    #[test]
    fn decodes_core_bonus_and_spill() {
        let mut b = vec![0u8; 1024];
        b[0] = 19; // plain file
        b[1] = 17;
        b[2] = 1;
        b[3] = 1;
        b[4] = 44;
        b[7] = DNODE_FLAG_USED_BYTES | DNODE_FLAG_SPILL_BLKPTR;
        b[8..10].copy_from_slice(&256u16.to_le_bytes());
        b[10..12].copy_from_slice(&100u16.to_le_bytes());
        b[12] = 1; // two slots
        b[16..24].copy_from_slice(&5u64.to_le_bytes());
        b[24..32].copy_from_slice(&4096u64.to_le_bytes());
        b[192] = 0xab; // first bonus byte
        let dn = DnodePhys::decode(&b, true).unwrap();
        assert_eq!(dn.data_block_size(), 128 << 10);
        assert_eq!((dn.maxblkid, dn.used_bytes(), dn.slots()), (5, 4096, 2));
        assert_eq!(dn.bonus.len(), 100);
        assert_eq!(dn.bonus[0], 0xab);
        assert!(dn.spill.is_some());
        assert!(DnodePhys::decode(&b[..600], true).is_err(), "second slot missing");
        b[10..12].copy_from_slice(&2000u16.to_le_bytes());
        assert!(DnodePhys::decode(&b, true).is_err(), "bonus too long");
    }
}
