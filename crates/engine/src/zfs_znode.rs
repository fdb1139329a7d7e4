//! zfs_znode: the ZPL's on-disk rules that reading and writing share — a znode's attributes
//! from its dnode (system attributes in the bonus and spill block, or the legacy znode_phys
//! bonus of ZPL 4), the attributes a stat shows, what a read of a byte range may return,
//! where a symlink's target is, and the SA xattr nvlist. The ZPL's reads (`zpl`) and its
//! changes (`zplw`) both decode through here, so each rule lives once (OpenZFS's zfs_znode.c
//! and zfs_sa.c hold them for both).
//!
//! ```text
//!   dnode bonus type SA:    sa_hdr + attributes of its layout; the rest in the spill block
//!   dnode bonus type ZNODE: znode_phys_t (264 bytes), the symlink target inline after it when
//!                           it fits, else in block 0 of the object
//! ```

use crate::{Result, ZfsError};
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::nvlist::{NvList, NvValue};
use oxzfs_format::sa::{SaRegistry, ZnodeAttrs};
use oxzfs_format::types::{DMU_OT_SA, DMU_OT_ZNODE};
use oxzfs_format::znode;

/// The master node is always object 1.
pub const MASTER_NODE_OBJ: u64 = 1;
/// Longest name (ZAP_MAXNAMELEN - 1).
pub const MAXNAMELEN: usize = 255;
pub const S_IFMT: u64 = 0o170000;
pub const S_IFDIR: u64 = 0o040000;
pub const S_IFREG: u64 = 0o100000;
pub const S_IFLNK: u64 = 0o120000;
/// Longest symlink target read from a block (a bound on what a damaged size can ask for).
const SYMLINK_MAX: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    /// Permission bits and S_IFMT type.
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units, from the dnode's used bytes.
    pub blocks: u64,
    pub blksize: u32,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub crtime: (i64, u32),
    pub rdev: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    /// S_IFMT bits.
    pub mode: u32,
}

fn posix(errno: i32, msg: impl Into<String>) -> ZfsError {
    ZfsError::Posix(errno, msg.into())
}

/// The attributes of a znode from its dnode (`le`: the byte order of the block holding it) and
/// its spill block (with its own order), with the objset's SA registry for SA znodes. `ctx`
/// names the object in errors.
pub fn decode_znode(dn: &DnodePhys, le: bool, spill: Option<(&[u8], bool)>, sa: Option<&SaRegistry>, ctx: &dyn Fn() -> String) -> Result<ZnodeAttrs> {
    match dn.bonustype {
        DMU_OT_SA => {
            let reg = sa.ok_or_else(|| ZfsError::Invalid(format!("{}: SA bonus in an objset without an SA registry", ctx())))?;
            let mut z = ZnodeAttrs::default();
            z.merge_sa(&dn.bonus, le, reg).map_err(|e| ZfsError::corrupt(ctx(), e))?;
            if let Some((sp, sle)) = spill {
                z.merge_sa(sp, sle, reg).map_err(|e| ZfsError::corrupt(format!("{} spill block", ctx()), e))?;
            }
            Ok(z)
        }
        DMU_OT_ZNODE => znode::decode_znode_phys(&dn.bonus, le).map_err(|e| ZfsError::corrupt(ctx(), e)),
        other => Err(ZfsError::NotFound(format!("{}: not a file (bonus type {other})", ctx()))),
    }
}

/// What stat shows of znode `ino`: its attributes, blocks from the dnode's used bytes, the
/// object's block size as the I/O size.
pub fn znode_attr(ino: u64, z: &ZnodeAttrs, dn: &DnodePhys) -> Attr {
    attr_of(ino, z, dn.used_bytes(), dn.data_block_size())
}

/// [`znode_attr`] from the dnode's used bytes and data block size.
pub fn attr_of(ino: u64, z: &ZnodeAttrs, used_bytes: u64, blksz: u64) -> Attr {
    let t = |p: (u64, u64)| (p.0 as i64, p.1 as u32);
    Attr {
        ino,
        mode: z.mode as u32,
        nlink: z.links,
        uid: z.uid as u32,
        gid: z.gid as u32,
        size: z.size,
        blocks: used_bytes.div_ceil(512),
        blksize: blksz.clamp(512, 1 << 24) as u32,
        atime: t(z.atime),
        mtime: t(z.mtime),
        ctime: t(z.ctime),
        crtime: t(z.crtime),
        rdev: z.rdev,
    }
}

/// The byte range a read of `size` bytes at `offset` returns from a file of this znode: None
/// past the end, EISDIR for a directory.
pub fn read_range(z: &ZnodeAttrs, offset: u64, size: u64, ctx: &dyn Fn() -> String) -> Result<Option<(u64, u64)>> {
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EISDIR, format!("{}: is a directory", ctx())));
    }
    if offset >= z.size {
        return Ok(None);
    }
    Ok(Some((offset, size.min(z.size - offset))))
}

/// A symlink's target: the SYMLINK attribute (SA) or inline znode_phys tail when there is one,
/// else `read(len)` of the object's first bytes, zero-filled to the size.
pub fn symlink_target(z: &ZnodeAttrs, ctx: &dyn Fn() -> String, read: impl FnOnce(u64) -> Result<Vec<u8>>) -> Result<Vec<u8>> {
    if z.mode & S_IFMT != S_IFLNK {
        return Err(posix(libc::EINVAL, format!("{}: not a symlink", ctx())));
    }
    if let Some(t) = &z.symlink {
        return Ok(t.clone());
    }
    if z.size > SYMLINK_MAX {
        return Err(ZfsError::Invalid(format!("{}: symlink target of {} bytes", ctx(), z.size)));
    }
    let mut d = read(z.size)?;
    d.resize(z.size as usize, 0);
    Ok(d)
}

/// A directory entry from its ZAP value (IFTODT(mode) << 60 | object). Entries written without
/// a type (older writers) ask `mode_of` for the object's S_IFMT bits.
pub fn dir_entry(name: Vec<u8>, v: u64, mode_of: impl FnOnce(u64) -> u32) -> DirEntry {
    let ino = znode::dirent_obj(v);
    let mut mode = (znode::dirent_type(v) as u32) << 12;
    if mode == 0 {
        mode = mode_of(ino);
    }
    DirEntry { name, ino, mode }
}

/// The SA xattrs of a znode (xattr=sa: the DXATTR attribute, a packed nvlist of name → bytes).
pub fn sa_xattr_nvlist(z: &ZnodeAttrs, ctx: &dyn Fn() -> String) -> Result<NvList> {
    match &z.dxattr {
        Some(raw) => NvList::decode_packed(raw).map_err(|e| ZfsError::corrupt(format!("{} SA xattrs", ctx()), e)),
        None => Ok(NvList::new()),
    }
}

/// The bytes of an xattr value in the SA nvlist.
pub fn nv_bytes(v: &NvValue) -> Option<&[u8]> {
    match v {
        NvValue::ByteArray(b) | NvValue::Uint8Array(b) => Some(b),
        _ => None,
    }
}

/// The namespaces Linux xattr names carry.
const LINUX_NAMESPACES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];

/// How Linux shows a stored xattr name: namespaced names as they are, names without a
/// namespace (written by other platforms) under "user.", FreeBSD system names not at all.
pub fn linux_xattr_name(stored: &[u8]) -> Option<Vec<u8>> {
    if stored.starts_with(b"freebsd:") {
        return None;
    }
    if LINUX_NAMESPACES.iter().any(|p| stored.starts_with(p)) {
        return Some(stored.to_vec());
    }
    let mut v = b"user.".to_vec();
    v.extend_from_slice(stored);
    Some(v)
}

/// The stored names a Linux name may have, in the order to try them: as given, then for a
/// user xattr the bare name other platforms write (unless that would look namespaced itself).
pub fn stored_xattr_names(linux: &[u8]) -> Vec<Vec<u8>> {
    let mut v = vec![linux.to_vec()];
    if let Some(bare) = linux.strip_prefix(b"user.") {
        if !bare.is_empty() && !bare.starts_with(b"freebsd:") && !LINUX_NAMESPACES.iter().any(|p| bare.starts_with(p)) {
            v.push(bare.to_vec());
        }
    }
    v
}
