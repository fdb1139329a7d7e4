//! The legacy znode (`znode_phys_t`, ZPL version ≤ 4): 264 bytes in the bonus buffer
//! (bonus type DMU_OT_ZNODE), and the ZPL master node and directory entry encodings.
//!
//! ```text
//!   0 atime[2]  16 mtime[2]  32 ctime[2]  48 crtime[2]  64 gen  72 mode  80 size  88 parent
//!  96 links  104 xattr  112 rdev  120 flags  128 uid  136 gid  144 zap  152 pad[3]  176 acl(88)
//!  264 short symlink targets follow inline when they fit in the bonus buffer
//! ```
//! Directory ZAP values: object number in the low 48 bits, the file type (IFTODT) in the top 4.

use crate::bytes::u64_at;
use crate::sa::ZnodeAttrs;
use crate::Result;

pub const ZNODE_PHYS_SIZE: usize = 264;
pub const ZPL_VERSION_STR: &str = "VERSION";
pub const ZFS_ROOT_OBJ: &str = "ROOT";
pub const ZFS_UNLINKED_SET: &str = "DELETE_QUEUE";
pub const ZFS_SA_ATTRS: &str = "SA_ATTRS";
pub const ZFS_SHARES_DIR: &str = "SHARES";
pub const ZFS_FUID_TABLES: &str = "FUID";

/// The znode's flags (`zp_flags`, SA `ZPL_FLAGS`): the file attributes kept in its upper half
/// (zfs_znode.h), and the flags that mark what the znode carries.
pub mod pflags {
    pub const ZFS_XATTR: u64 = 0x1;
    pub const ZFS_ACL_TRIVIAL: u64 = 0x4;
    pub const ZFS_NO_EXECS_DENIED: u64 = 0x100;
    pub const ZFS_READONLY: u64 = 0x0000_0001_0000_0000;
    pub const ZFS_HIDDEN: u64 = 0x0000_0002_0000_0000;
    pub const ZFS_SYSTEM: u64 = 0x0000_0004_0000_0000;
    pub const ZFS_ARCHIVE: u64 = 0x0000_0008_0000_0000;
    pub const ZFS_IMMUTABLE: u64 = 0x0000_0010_0000_0000;
    pub const ZFS_NOUNLINK: u64 = 0x0000_0020_0000_0000;
    pub const ZFS_APPENDONLY: u64 = 0x0000_0040_0000_0000;
    pub const ZFS_NODUMP: u64 = 0x0000_0080_0000_0000;
    pub const ZFS_AV_MODIFIED: u64 = 0x0000_0400_0000_0000;
    /// New children of a directory with this flag take its project id (and the flag).
    pub const ZFS_PROJINHERIT: u64 = 0x0000_4000_0000_0000;
    /// The znode carries a project id (SA `ZPL_PROJID`).
    pub const ZFS_PROJID: u64 = 0x0000_8000_0000_0000;
}

/// Object number of a directory entry value.
pub fn dirent_obj(v: u64) -> u64 {
    v & ((1u64 << 48) - 1)
}

/// File type (DT_* value) of a directory entry value.
pub fn dirent_type(v: u64) -> u8 {
    ((v >> 60) & 0xf) as u8
}

pub fn decode_znode_phys(bonus: &[u8], le: bool) -> Result<ZnodeAttrs> {
    let w = |i: usize| u64_at(bonus, i * 8, le, "znode");
    let mut z = ZnodeAttrs {
        atime: (w(0)?, w(1)?),
        mtime: (w(2)?, w(3)?),
        ctime: (w(4)?, w(5)?),
        crtime: (w(6)?, w(7)?),
        gen: w(8)?,
        mode: w(9)?,
        size: w(10)?,
        parent: w(11)?,
        links: w(12)?,
        xattr: w(13)?,
        rdev: w(14)?,
        flags: w(15)?,
        uid: w(16)?,
        gid: w(17)?,
        ..Default::default()
    };
    let is_link = z.mode & 0o170000 == 0o120000;
    if is_link && (z.size as usize).saturating_add(ZNODE_PHYS_SIZE) <= bonus.len() {
        z.symlink = Some(bonus[ZNODE_PHYS_SIZE..ZNODE_PHYS_SIZE + z.size as usize].to_vec());
    }
    Ok(z)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLK2: &[u8] = include_bytes!("../tests/data/fx-dnode-basic-blk2.bin");

    fn bonus(n: usize) -> Vec<u8> {
        crate::dnode::DnodePhys::decode(&BLK2[(n - 64) * 512..], true).unwrap().bonus
    }

    /// 2026-11-22 07:59:46 UTC, when the fixture was written.
    const T46: u64 = 1795334386;

    #[test]
    fn fixture_znodes_match_zdb() {
        // zdb -dddddd tank-basic/ 80: /link-short, mode 120777, size 18, gen 25, parent 3,
        // links 1, pflags 40800000104, atime 07:59:47, m/c/crtime 07:59:46.
        let z = decode_znode_phys(&bonus(80), true).unwrap();
        assert_eq!((z.mode, z.size, z.gen, z.parent, z.links, z.flags), (0o120777, 18, 25, 3, 1, 0x40800000104));
        assert_eq!((z.uid, z.gid, z.xattr, z.rdev), (0, 0, 0, 0));
        assert_eq!((z.atime.0, z.mtime.0, z.ctime.0, z.crtime.0), (T46 + 1, T46, T46, T46));
        assert!(z.atime.1 < 1_000_000_000);
        assert_eq!(z.symlink.as_deref(), Some(&b"sizes/text/f5_4096"[..]));
        // /link-long: 228-byte target, not in the bonus.
        let z = decode_znode_phys(&bonus(81), true).unwrap();
        assert_eq!((z.mode, z.size), (0o120777, 228));
        assert!(z.symlink.is_none());
        // /sparse.img and the /names directory.
        let z = decode_znode_phys(&bonus(83), true).unwrap();
        assert_eq!((z.mode, z.size, z.flags), (0o100644, 8388608, 0x40800000004));
        let z = decode_znode_phys(&bonus(77), true).unwrap();
        assert_eq!((z.mode, z.size, z.links, z.flags), (0o40755, 4, 2, 0x40800000144));
        assert!(z.symlink.is_none());
    }

    #[test]
    fn legacy_symlink_inline() {
        let mut b = vec![0u8; 320];
        b[72..80].copy_from_slice(&0o120777u64.to_le_bytes());
        b[80..88].copy_from_slice(&3u64.to_le_bytes());
        b[96..104].copy_from_slice(&1u64.to_le_bytes());
        b[264..267].copy_from_slice(b"abc");
        let z = decode_znode_phys(&b, true).unwrap();
        assert_eq!(z.symlink.as_deref(), Some(&b"abc"[..]));
        assert_eq!(z.links, 1);
        assert!(decode_znode_phys(&b[..100], true).is_err());
        assert_eq!(dirent_obj((8u64 << 60) | 34), 34);
        assert_eq!(dirent_type((8u64 << 60) | 34), 8);
    }
}
