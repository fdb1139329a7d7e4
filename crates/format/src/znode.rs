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
