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
