//! Objsets (`objset_phys_t`): the root of a dataset's (or the MOS's) object tree.
//!
//! ```text
//!     0  meta dnode (512)           512  ZIL header (192)
//!   704  type (u64)   712 flags   720 portable MAC (32)   752 local MAC (32)   → 1K (v1)
//!  1024  userused dnode  1536 groupused dnode                                   → 2K (v2)
//!  2048  projectused dnode                                                      → 4K (v3)
//! ```

use crate::blkptr::BlockPointer;
use crate::bytes::{slice, u64_at};
use crate::dnode::DnodePhys;
use crate::Result;

pub const DMU_OST_NONE: u64 = 0;
pub const DMU_OST_META: u64 = 1;
pub const DMU_OST_ZFS: u64 = 2;
pub const DMU_OST_ZVOL: u64 = 3;
/// os_flags: user/group space accounting is complete (the userused/groupused objects are valid).
pub const OBJSET_FLAG_USERACCOUNTING_COMPLETE: u64 = 1 << 0;
/// os_flags: user/group object counts are complete.
pub const OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE: u64 = 1 << 1;
/// os_flags: project accounting is complete.
pub const OBJSET_FLAG_PROJECTQUOTA_COMPLETE: u64 = 1 << 2;
/// The accounting objects of a file system, whose dnodes live in the objset block itself
/// (DMU_USERUSED_OBJECT, DMU_GROUPUSED_OBJECT, DMU_PROJECTUSED_OBJECT).
pub const DMU_USERUSED_OBJECT: u64 = u64::MAX;
pub const DMU_GROUPUSED_OBJECT: u64 = u64::MAX - 1;
pub const DMU_PROJECTUSED_OBJECT: u64 = u64::MAX - 2;
pub const OBJSET_PHYS_SIZE_V1: usize = 1024;
pub const OBJSET_PHYS_SIZE_V2: usize = 2048;
pub const OBJSET_PHYS_SIZE_V3: usize = 4096;

#[derive(Clone, Debug)]
pub struct ZilHeaderPhys {
    pub claim_txg: u64,
    pub replay_seq: u64,
    pub log: BlockPointer,
    pub claim_blk_seq: u64,
    pub flags: u64,
    pub claim_lr_seq: u64,
}

impl ZilHeaderPhys {
    pub fn decode(buf: &[u8], le: bool) -> Result<ZilHeaderPhys> {
        let b = slice(buf, 0, 192, "ZIL header")?;
        Ok(ZilHeaderPhys {
            claim_txg: u64_at(b, 0, le, "ZIL header")?,
            replay_seq: u64_at(b, 8, le, "ZIL header")?,
            log: BlockPointer::decode(&b[16..], le)?,
            claim_blk_seq: u64_at(b, 144, le, "ZIL header")?,
            flags: u64_at(b, 152, le, "ZIL header")?,
            claim_lr_seq: u64_at(b, 160, le, "ZIL header")?,
        })
    }
}

#[derive(Clone, Debug)]
pub struct ObjsetPhys {
    pub meta_dnode: DnodePhys,
    pub zil_header: ZilHeaderPhys,
    pub typ: u64,
    pub flags: u64,
    pub userused_dnode: Option<DnodePhys>,
    pub groupused_dnode: Option<DnodePhys>,
    pub projectused_dnode: Option<DnodePhys>,
}

impl ObjsetPhys {
    pub fn decode(buf: &[u8], le: bool) -> Result<ObjsetPhys> {
        let b = slice(buf, 0, OBJSET_PHYS_SIZE_V1, "objset")?;
        let opt = |off: usize| -> Result<Option<DnodePhys>> {
            if buf.len() >= off + 512 {
                let d = DnodePhys::decode(&buf[off..off + 512], le)?;
                Ok(if d.is_free() { None } else { Some(d) })
            } else {
                Ok(None)
            }
        };
        Ok(ObjsetPhys {
            meta_dnode: DnodePhys::decode(&b[..512], le)?,
            zil_header: ZilHeaderPhys::decode(&b[512..], le)?,
            typ: u64_at(b, 704, le, "objset")?,
            flags: u64_at(b, 712, le, "objset")?,
            userused_dnode: opt(1024)?,
            groupused_dnode: opt(1536)?,
            projectused_dnode: if buf.len() >= OBJSET_PHYS_SIZE_V3 { opt(2048)? } else { None },
        })
    }
}


impl ZilHeaderPhys {
    /// An empty ZIL header (no log chain yet).
    pub fn empty() -> ZilHeaderPhys {
        ZilHeaderPhys { claim_txg: 0, replay_seq: 0, log: BlockPointer::hole(), claim_blk_seq: 0, flags: 0, claim_lr_seq: 0 }
    }
    /// 192 bytes, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 192];
        b[0..8].copy_from_slice(&self.claim_txg.to_le_bytes());
        b[8..16].copy_from_slice(&self.replay_seq.to_le_bytes());
        b[16..144].copy_from_slice(&self.log.encode(true));
        b[144..152].copy_from_slice(&self.claim_blk_seq.to_le_bytes());
        b[152..160].copy_from_slice(&self.flags.to_le_bytes());
        b[160..168].copy_from_slice(&self.claim_lr_seq.to_le_bytes());
        b
    }
}

impl ObjsetPhys {
    /// Encode as `size` bytes (1K, 2K or 4K), little-endian.
    pub fn encode(&self, size: usize) -> Vec<u8> {
        assert!(size == OBJSET_PHYS_SIZE_V1 || size == OBJSET_PHYS_SIZE_V2 || size == OBJSET_PHYS_SIZE_V3);
        let mut b = vec![0u8; size];
        b[..512].copy_from_slice(&self.meta_dnode.encode());
        b[512..704].copy_from_slice(&self.zil_header.encode());
        b[704..712].copy_from_slice(&self.typ.to_le_bytes());
        b[712..720].copy_from_slice(&self.flags.to_le_bytes());
        let mut put = |off: usize, d: &Option<DnodePhys>| {
            if let Some(d) = d {
                if size >= off + 512 {
                    b[off..off + 512].copy_from_slice(&d.encode());
                }
            }
        };
        put(1024, &self.userused_dnode);
        put(1536, &self.groupused_dnode);
        put(2048, &self.projectused_dnode);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tank-basic's objset (fixture `basic`: rootbp 0:8d5a00:200, 800L/200P lzjb).
    const OS: &[u8] = include_bytes!("../tests/data/fx-objset-basic.bin");

    #[test]
    fn fixture_objset_matches_zdb() {
        let os = ObjsetPhys::decode(OS, true).unwrap();
        assert_eq!((os.typ, os.flags), (DMU_OST_ZFS, OBJSET_FLAG_USERACCOUNTING_COMPLETE));
        // zdb -dddddd tank-basic/ 0: lvl 7, iblk 16K, dblk 16K, maxblkid 2, flags USED_BYTES.
        let m = &os.meta_dnode;
        assert_eq!((m.typ, m.nlevels, m.indblkshift, m.data_block_size(), m.maxblkid, m.nblkptr), (crate::types::DMU_OT_DNODE, 7, 14, 16384, 2, 3));
        assert_eq!(
            m.blkptr[0].compact(true),
            "0:8d5000:400 0:1404000:400 4000L/400P F=82 B=33/33 cksum=0000005943b98e4c:00003d736ae59bdf:00165eaf6cb25b13:05b2b6130fdd0887"
        );
        assert!(m.blkptr[1].is_hole() && m.blkptr[2].is_hole());
        // "ZIL header: claim_txg 0, claim_blk_seq 0, claim_lr_seq 0 replay_seq 0, flags 0x0" and
        // its first log block.
        let z = &os.zil_header;
        assert_eq!((z.claim_txg, z.claim_blk_seq, z.claim_lr_seq, z.replay_seq, z.flags), (0, 0, 0, 0, 0));
        assert_eq!(
            z.log.to_string(),
            "DVA[0]=<0:84f000:1000> [L0 ZIL intent log] zilog2 uncompressed unencrypted LE contiguous unique single \
             size=1000L/1000P birth=33L/33P fill=0 cksum=1c14341ccf0e797a:eb941b9bb67158fa:0000000000000010:0000000000000001"
        );
        // A 2K objset: user and group accounting, no project accounting.
        assert_eq!(os.userused_dnode.as_ref().map(|d| d.typ), Some(crate::types::DMU_OT_USERGROUP_USED));
        assert_eq!(os.groupused_dnode.as_ref().map(|d| d.typ), Some(crate::types::DMU_OT_USERGROUP_USED));
        assert!(os.projectused_dnode.is_none());
        // The 1K form has only the meta dnode and the ZIL header.
        let v1 = ObjsetPhys::decode(&OS[..1024], true).unwrap();
        assert!(v1.userused_dnode.is_none() && v1.meta_dnode.maxblkid == 2);
        assert!(ObjsetPhys::decode(&OS[..1000], true).is_err());
        // Encoding gives back the same bytes.
        assert_eq!(os.encode(2048), &OS[..2048]);
    }
}
