//! zplw: the ZFS POSIX layer on a writable objset — creating a file system's skeleton
//! (zfs_create_fs) and the vnode operations of a read-write mount (zfs_vnops).
//!
//! ```text
//!   objset (DMU_OST_ZFS)
//!     object 1  master node (ZAP): VERSION, normalization, utf8only, casesensitivity,
//!               [SA_ATTRS], DELETE_QUEUE, ROOT, SHARES
//!     DELETE_QUEUE  unlinked set (ZAP: hex object number → object): files unlinked while
//!               open, freed on last close or at the next mount
//!     ROOT      directory: a ZAP name → (IFTODT(mode) << 60 | object); bonus = the znode
//!     file      data blocks; one block grows up to recordsize, then recordsize blocks
//!     symlink   target inline after the znode when it fits the bonus, else in block 0
//!     xattrs    directory-based: the znode's xattr object is a hidden directory of files
//! ```
//!
//! ZPL version 4 keeps each znode in a 264-byte `znode_phys_t` bonus (pools of version ≤ 23
//! need it; newer pools accept it too). A directory's size is its entry count plus 2.
//! Every operation runs under the pool's write lock (the caller holds the `PoolW`), so the
//! functions here take `&mut ObjsetW` and are single-threaded by construction.

use crate::dbuf::ObjsetW;
use crate::zpl::{Attr, DirEntry};
use crate::{Result, ZfsError};
use oxzfs_format::sa::ZnodeAttrs;
use oxzfs_format::types;
use oxzfs_format::znode::{self as fz, ZNODE_PHYS_SIZE};

/// The master node is always object 1.
pub const MASTER_NODE_OBJ: u64 = 1;
pub const S_IFMT: u64 = 0o170000;
pub const S_IFDIR: u64 = 0o040000;
pub const S_IFREG: u64 = 0o100000;
pub const S_IFLNK: u64 = 0o120000;
/// Largest bonus of a one-slot dnode with one block pointer.
const BONUS_MAX: usize = 320;
/// Longest name (ZAP_MAXNAMELEN - 1).
pub const MAXNAMELEN: usize = 255;

/// A directory entry's value: IFTODT(mode) << 60 | object.
pub fn dirent(obj: u64, mode: u64) -> u64 {
    ((mode >> 12) & 0xf) << 60 | obj
}

fn posix(e: i32, msg: impl Into<String>) -> ZfsError {
    ZfsError::Posix(e, msg.into())
}

/// The six-entry "trivial" ACL equivalent to a mode, as ZFS writes it for new znodes: for each of
/// owner@, group@ and everyone@ a deny entry for the rwx bits the class lacks, then an allow entry
/// for those it has; owner@ also gets the attribute/ACL/owner write rights, everyone@ is denied
/// those and allowed to read attributes, ACL and to synchronize. (type, flags, access mask).
pub fn trivial_acl(mode: u64) -> [(u16, u16, u32); 6] {
    const READ: u32 = 0x1;
    const WRITE: u32 = 0x2 | 0x4; // write data, append data
    const EXEC: u32 = 0x20;
    const OWNER_EXTRA: u32 = 0x100 | 0x10 | 0x40000 | 0x80000; // write attrs, xattrs, ACL, owner
    const EVERYONE_READ: u32 = 0x80 | 0x8 | 0x20000 | 0x100000; // read attrs, xattrs, ACL; sync
    const OWNER: u16 = 0x1000;
    const GROUP: u16 = 0x2000 | 0x0040;
    const EVERYONE: u16 = 0x4000;
    let rwx = |bits: u64| -> u32 {
        (if bits & 4 != 0 { READ } else { 0 }) | (if bits & 2 != 0 { WRITE } else { 0 }) | (if bits & 1 != 0 { EXEC } else { 0 })
    };
    let all = READ | WRITE | EXEC;
    let (o, g, e) = (rwx(mode >> 6), rwx(mode >> 3), rwx(mode));
    [
        (1, OWNER, all & !o),
        (0, OWNER, o | OWNER_EXTRA),
        (1, GROUP, all & !g),
        (0, GROUP, g),
        (1, EVERYONE, (all & !e) | OWNER_EXTRA),
        (0, EVERYONE, e | EVERYONE_READ),
    ]
}

/// The legacy znode_phys, with the trivial ACL of its mode inline.
pub fn encode_znode_phys(z: &ZnodeAttrs) -> Vec<u8> {
    let mut b = vec![0u8; ZNODE_PHYS_SIZE];
    let w = [
        z.atime.0, z.atime.1, z.mtime.0, z.mtime.1, z.ctime.0, z.ctime.1, z.crtime.0, z.crtime.1, z.gen, z.mode, z.size, z.parent, z.links,
        z.xattr, z.rdev, z.flags, z.uid, z.gid,
    ];
    for (i, v) in w.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    // znode_acl_phys_t at 176: extern obj 0, the trivial ACL of the mode inline (version 1,
    // ZFS_ACL_VERSION_FUID, 6 entries of 8 bytes).
    let aces = trivial_acl(z.mode);
    b[184..188].copy_from_slice(&((aces.len() * 8) as u32).to_le_bytes());
    b[188..190].copy_from_slice(&1u16.to_le_bytes());
    b[190..192].copy_from_slice(&(aces.len() as u16).to_le_bytes());
    for (i, (typ, flags, mask)) in aces.iter().enumerate() {
        let o = 192 + i * 8;
        b[o..o + 2].copy_from_slice(&typ.to_le_bytes());
        b[o + 2..o + 4].copy_from_slice(&flags.to_le_bytes());
        b[o + 4..o + 8].copy_from_slice(&mask.to_le_bytes());
    }
    if let Some(t) = &z.symlink {
        if ZNODE_PHYS_SIZE + t.len() <= BONUS_MAX {
            b.extend_from_slice(t);
        }
    }
    b
}

/// A file system being written: its fixed objects.
#[derive(Clone, Debug)]
pub struct FsInfo {
    pub root: u64,
    pub delete_queue: u64,
    pub version: u64,
    pub recordsize: u64,
}

/// Time now as (seconds, nanoseconds).
pub fn now_ts() -> (u64, u64) {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), d.subsec_nanos() as u64)
}

/// Create the skeleton of a new file system in `os` (zfs_create_fs).
pub fn create_fs(os: &mut ObjsetW, zpl_version: u64, txg: u64) -> Result<u64> {
    let zpl_version = zpl_version.min(4); // SA layouts come with the SA encoder
    let master = os.create_zap(types::DMU_OT_MASTER_NODE, 0, 0, 0)?;
    assert_eq!(master, MASTER_NODE_OBJ, "the master node is object 1");
    os.zap_add_u64(master, "VERSION", zpl_version)?;
    os.zap_add_u64(master, "normalization", 0)?;
    os.zap_add_u64(master, "utf8only", 0)?;
    os.zap_add_u64(master, "casesensitivity", 0)?;
    let dq = os.create_zap(types::DMU_OT_UNLINKED_SET, 0, 0, 0)?;
    os.zap_add_u64(master, "DELETE_QUEUE", dq)?;
    let t = now_ts();
    let mk = |os: &mut ObjsetW, mode: u64| -> Result<u64> {
        let d = os.create_zap(types::DMU_OT_DIRECTORY_CONTENTS, types::DMU_OT_ZNODE, ZNODE_PHYS_SIZE, 0)?;
        let z = ZnodeAttrs { mode, links: 2, size: 2, parent: d, gen: txg, atime: t, mtime: t, ctime: t, crtime: t, ..Default::default() };
        os.set_bonus(d, &encode_znode_phys(&z))?;
        Ok(d)
    };
    let root = mk(os, S_IFDIR | 0o755)?;
    os.zap_add_u64(master, "ROOT", root)?;
    let shares = mk(os, S_IFDIR | 0o555)?;
    os.zap_add_u64(master, "SHARES", shares)?;
    Ok(root)
}

/// Read the fixed objects of a file system (version 4 znodes only, for now).
pub fn open_fs(os: &mut ObjsetW, recordsize: u64) -> Result<FsInfo> {
    let version = os.zap_lookup(MASTER_NODE_OBJ, "VERSION")?.ok_or_else(|| ZfsError::Invalid("no ZPL VERSION".into()))?;
    if os.zap_lookup(MASTER_NODE_OBJ, "SA_ATTRS")?.is_some() || version >= 5 {
        return Err(ZfsError::Unsupported(format!("writing ZPL version {version} file systems (system attributes) is not supported yet; mount read-only")));
    }
    let root = os.zap_lookup(MASTER_NODE_OBJ, "ROOT")?.ok_or_else(|| ZfsError::Invalid("no ROOT".into()))?;
    let delete_queue = os.zap_lookup(MASTER_NODE_OBJ, "DELETE_QUEUE")?.unwrap_or(0);
    Ok(FsInfo { root, delete_queue, version, recordsize })
}

/// The znode attributes of `obj`.
pub fn get(os: &mut ObjsetW, obj: u64) -> Result<ZnodeAttrs> {
    let dn = os.dnode(obj).map_err(|e| match e {
        ZfsError::NotFound(m) => posix(libc::ENOENT, m),
        e => e,
    })?;
    if dn.bonustype != types::DMU_OT_ZNODE {
        return Err(ZfsError::Unsupported(format!("object {obj}: bonus type {} (system attributes)", dn.bonustype)));
    }
    fz::decode_znode_phys(&dn.bonus, true).map_err(|e| ZfsError::corrupt(format!("znode {obj}"), e))
}

fn put(os: &mut ObjsetW, obj: u64, z: &ZnodeAttrs) -> Result<()> {
    os.set_bonus(obj, &encode_znode_phys(z))
}

pub fn to_attr(os: &ObjsetW, obj: u64, z: &ZnodeAttrs) -> Attr {
    let (used, blksz) = os.dnode(obj).map(|d| (d.used_bytes(), d.data_block_size())).unwrap_or((0, 512));
    let t = |x: (u64, u64)| (x.0 as i64, x.1 as u32);
    Attr {
        ino: obj,
        mode: z.mode as u32,
        nlink: z.links,
        uid: z.uid as u32,
        gid: z.gid as u32,
        size: z.size,
        blocks: used.div_ceil(512),
        blksize: blksz.max(512) as u32,
        atime: t(z.atime),
        mtime: t(z.mtime),
        ctime: t(z.ctime),
        crtime: t(z.crtime),
        rdev: z.rdev,
    }
}

pub fn getattr(os: &mut ObjsetW, obj: u64) -> Result<Attr> {
    let z = get(os, obj)?;
    Ok(to_attr(os, obj, &z))
}

fn dir_check(os: &mut ObjsetW, dir: u64) -> Result<ZnodeAttrs> {
    let z = get(os, dir)?;
    if z.mode & S_IFMT != S_IFDIR {
        return Err(posix(libc::ENOTDIR, format!("object {dir} is not a directory")));
    }
    Ok(z)
}

fn name_str(name: &[u8]) -> Result<&str> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(posix(libc::EINVAL, "invalid name"));
    }
    if name.len() > MAXNAMELEN {
        return Err(posix(libc::ENAMETOOLONG, "name too long"));
    }
    // The in-memory ZAP keys are bytes; names need not be UTF-8.
    std::str::from_utf8(name).map_err(|_| posix(libc::EINVAL, "name is not UTF-8"))
}

/// The object `name` refers to in `dir`.
pub fn lookup(os: &mut ObjsetW, dir: u64, name: &[u8]) -> Result<Option<u64>> {
    dir_check(os, dir)?;
    if name.len() > MAXNAMELEN {
        return Err(posix(libc::ENAMETOOLONG, "name too long"));
    }
    let z = os.zap(dir)?;
    Ok(z.entries.get(name).and_then(|(_, v)| v.first()).map(|v| fz::dirent_obj(*v)))
}

pub fn readdir(os: &mut ObjsetW, dir: u64) -> Result<Vec<DirEntry>> {
    dir_check(os, dir)?;
    let z = os.zap(dir)?;
    Ok(z.entries
        .iter()
        .filter_map(|(k, (_, v))| v.first().map(|v| DirEntry { name: k.clone(), ino: fz::dirent_obj(*v), mode: (fz::dirent_type(*v) as u32) << 12 }))
        .collect())
}

fn touch_dir(os: &mut ObjsetW, dir: u64, dsize: i64, dlinks: i64) -> Result<()> {
    let mut z = get(os, dir)?;
    z.size = (z.size as i64 + dsize).max(2) as u64;
    z.links = (z.links as i64 + dlinks).max(1) as u64;
    let t = now_ts();
    z.mtime = t;
    z.ctime = t;
    put(os, dir, &z)
}

/// Create a file, directory, symlink or device node in `dir`.
#[allow(clippy::too_many_arguments)]
pub fn create(os: &mut ObjsetW, dir: u64, name: &[u8], mode: u64, uid: u64, gid: u64, rdev: u64, target: Option<&[u8]>, txg: u64) -> Result<u64> {
    let n = name_str(name)?;
    dir_check(os, dir)?;
    if lookup(os, dir, name)?.is_some() {
        return Err(posix(libc::EEXIST, format!("{n} exists")));
    }
    let t = now_ts();
    let is_dir = mode & S_IFMT == S_IFDIR;
    let obj = if is_dir {
        os.create_zap(types::DMU_OT_DIRECTORY_CONTENTS, types::DMU_OT_ZNODE, ZNODE_PHYS_SIZE, 0)?
    } else {
        let bl = ZNODE_PHYS_SIZE + target.map_or(0, |t| if ZNODE_PHYS_SIZE + t.len() <= BONUS_MAX { t.len() } else { 0 });
        os.alloc_object(types::DMU_OT_PLAIN_FILE_CONTENTS, 512, types::DMU_OT_ZNODE, bl, 1)?
    };
    let mut z = ZnodeAttrs {
        mode,
        uid,
        gid,
        links: if is_dir { 2 } else { 1 },
        size: if is_dir { 2 } else { 0 },
        parent: dir,
        gen: txg,
        rdev,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        ..Default::default()
    };
    if let Some(tg) = target {
        z.size = tg.len() as u64;
        if ZNODE_PHYS_SIZE + tg.len() <= BONUS_MAX {
            z.symlink = Some(tg.to_vec());
        } else {
            // One block holds the whole target (readers take it from block 0).
            grow_blocksize(os, obj, tg.len() as u64, 128 << 10)?;
            os.write(obj, 0, tg)?;
        }
    }
    put(os, obj, &z)?;
    os.zap_add_u64(dir, n, dirent(obj, mode))?;
    touch_dir(os, dir, 1, if is_dir { 1 } else { 0 })?;
    Ok(obj)
}

/// A file with a single block grows its block size up to the recordsize (zfs_grow_blocksize).
fn grow_blocksize(os: &mut ObjsetW, obj: u64, end: u64, recordsize: u64) -> Result<()> {
    let dn = os.dnode(obj)?;
    let bs = dn.data_block_size();
    if dn.maxblkid == 0 && end > bs && bs < recordsize {
        let nb = end.min(recordsize).div_ceil(512) * 512;
        os.set_blocksize(obj, nb)?;
    }
    Ok(())
}

pub fn readlink(os: &mut ObjsetW, obj: u64) -> Result<Vec<u8>> {
    let z = get(os, obj)?;
    if z.mode & S_IFMT != S_IFLNK {
        return Err(posix(libc::EINVAL, "not a symlink"));
    }
    if let Some(t) = z.symlink {
        return Ok(t);
    }
    os.read(obj, 0, z.size as usize)
}

pub fn read(os: &mut ObjsetW, obj: u64, offset: u64, size: u64) -> Result<Vec<u8>> {
    let z = get(os, obj)?;
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EISDIR, "is a directory"));
    }
    if offset >= z.size {
        return Ok(Vec::new());
    }
    let len = size.min(z.size - offset);
    os.read(obj, offset, len as usize)
}

pub fn write(os: &mut ObjsetW, obj: u64, offset: u64, data: &[u8], recordsize: u64) -> Result<usize> {
    let mut z = get(os, obj)?;
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EISDIR, "is a directory"));
    }
    let end = offset + data.len() as u64;
    if end > (1u64 << 63) {
        return Err(posix(libc::EFBIG, "file too large"));
    }
    grow_blocksize(os, obj, end.max(z.size), recordsize)?;
    os.write(obj, offset, data)?;
    if end > z.size {
        z.size = end;
    }
    let t = now_ts();
    z.mtime = t;
    z.ctime = t;
    put(os, obj, &z)?;
    Ok(data.len())
}

/// Attribute changes (setattr): mode, uid, gid, size, atime, mtime.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u64>,
    pub uid: Option<u64>,
    pub gid: Option<u64>,
    pub size: Option<u64>,
    pub atime: Option<(u64, u64)>,
    pub mtime: Option<(u64, u64)>,
}

pub fn setattr(os: &mut ObjsetW, obj: u64, s: &SetAttr, recordsize: u64) -> Result<Attr> {
    let mut z = get(os, obj)?;
    let t = now_ts();
    if let Some(m) = s.mode {
        z.mode = (z.mode & S_IFMT) | (m & 0o7777);
    }
    if let Some(u) = s.uid {
        z.uid = u;
    }
    if let Some(g) = s.gid {
        z.gid = g;
    }
    if let Some(size) = s.size {
        if z.mode & S_IFMT == S_IFDIR {
            return Err(posix(libc::EISDIR, "is a directory"));
        }
        if size < z.size {
            os.truncate(obj, size)?;
        } else if size > z.size {
            grow_blocksize(os, obj, size, recordsize)?;
            // Growing leaves a hole: nothing to write, the old tail is already zero.
            let dn = os.dnode(obj)?;
            let bs = dn.data_block_size();
            if z.size % bs != 0 && dn.maxblkid == z.size / bs {
                // zero the tail of the last block beyond the old size (it may hold stale bytes)
                os.truncate(obj, z.size)?;
            }
        }
        z.size = size;
        z.mtime = t;
    }
    if let Some(a) = s.atime {
        z.atime = a;
    }
    if let Some(m) = s.mtime {
        z.mtime = m;
    }
    z.ctime = t;
    put(os, obj, &z)?;
    Ok(to_attr(os, obj, &z))
}

/// Free a file's contents, or queue it when still open (`open` says whether it is).
fn drop_link(os: &mut ObjsetW, fs: &FsInfo, obj: u64, open: bool) -> Result<()> {
    let mut z = get(os, obj)?;
    z.links = z.links.saturating_sub(1);
    z.ctime = now_ts();
    let is_dir = z.mode & S_IFMT == S_IFDIR;
    if z.links == 0 || is_dir {
        if open && !is_dir {
            put(os, obj, &z)?;
            if fs.delete_queue != 0 {
                os.zap_add_u64(fs.delete_queue, &format!("{obj:x}"), obj)?;
            }
        } else {
            free_znode(os, obj, &z)?;
        }
    } else {
        put(os, obj, &z)?;
    }
    Ok(())
}

/// Free a znode and its xattr directory.
pub fn free_znode(os: &mut ObjsetW, obj: u64, z: &ZnodeAttrs) -> Result<()> {
    if z.xattr != 0 {
        if let Ok(ents) = readdir(os, z.xattr) {
            for e in ents {
                let _ = os.free_object(e.ino);
            }
        }
        let _ = os.free_object(z.xattr);
    }
    os.free_object(obj)
}

/// Finish a file unlinked while open (its last close): remove it from the delete queue.
pub fn release(os: &mut ObjsetW, fs: &FsInfo, obj: u64) -> Result<()> {
    if fs.delete_queue == 0 {
        return Ok(());
    }
    let key = format!("{obj:x}");
    if os.zap(fs.delete_queue)?.entries.contains_key(key.as_bytes()) {
        let z = get(os, obj)?;
        if z.links == 0 {
            os.zap_remove(fs.delete_queue, &key)?;
            free_znode(os, obj, &z)?;
        }
    }
    Ok(())
}

/// Empty the delete queue (at mount: files unlinked while open before a crash).
pub fn drain_delete_queue(os: &mut ObjsetW, fs: &FsInfo) -> Result<usize> {
    if fs.delete_queue == 0 {
        return Ok(0);
    }
    let ents: Vec<u64> = os.zap(fs.delete_queue)?.entries.values().filter_map(|(_, v)| v.first().copied()).collect();
    for obj in &ents {
        if let Ok(z) = get(os, *obj) {
            free_znode(os, *obj, &z)?;
        }
    }
    if !ents.is_empty() {
        os.zap_mut(fs.delete_queue)?.entries.clear();
    }
    Ok(ents.len())
}

pub fn unlink(os: &mut ObjsetW, fs: &FsInfo, dir: u64, name: &[u8], open: &dyn Fn(u64) -> bool) -> Result<()> {
    let n = name_str(name)?;
    let obj = lookup(os, dir, name)?.ok_or_else(|| posix(libc::ENOENT, format!("{n}: no such file")))?;
    let z = get(os, obj)?;
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EISDIR, format!("{n} is a directory")));
    }
    os.zap_remove(dir, n)?;
    touch_dir(os, dir, -1, 0)?;
    drop_link(os, fs, obj, open(obj))
}

pub fn rmdir(os: &mut ObjsetW, fs: &FsInfo, dir: u64, name: &[u8]) -> Result<()> {
    let n = name_str(name)?;
    let obj = lookup(os, dir, name)?.ok_or_else(|| posix(libc::ENOENT, format!("{n}: no such directory")))?;
    let z = get(os, obj)?;
    if z.mode & S_IFMT != S_IFDIR {
        return Err(posix(libc::ENOTDIR, format!("{n} is not a directory")));
    }
    if !os.zap(obj)?.entries.is_empty() {
        return Err(posix(libc::ENOTEMPTY, format!("{n} is not empty")));
    }
    os.zap_remove(dir, n)?;
    touch_dir(os, dir, -1, -1)?;
    drop_link(os, fs, obj, false)
}

pub fn link(os: &mut ObjsetW, obj: u64, dir: u64, name: &[u8]) -> Result<Attr> {
    let n = name_str(name)?;
    let mut z = get(os, obj)?;
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EPERM, "hard link to a directory"));
    }
    if lookup(os, dir, name)?.is_some() {
        return Err(posix(libc::EEXIST, format!("{n} exists")));
    }
    z.links += 1;
    z.ctime = now_ts();
    put(os, obj, &z)?;
    os.zap_add_u64(dir, n, dirent(obj, z.mode))?;
    touch_dir(os, dir, 1, 0)?;
    Ok(to_attr(os, obj, &z))
}

/// Whether `anc` is `obj` or one of its ancestors (a directory may not move under itself).
fn is_ancestor(os: &mut ObjsetW, anc: u64, mut obj: u64, root: u64) -> Result<bool> {
    for _ in 0..4096 {
        if obj == anc {
            return Ok(true);
        }
        if obj == root {
            return Ok(false);
        }
        let p = get(os, obj)?.parent;
        if p == obj || p == 0 {
            return Ok(false);
        }
        obj = p;
    }
    Ok(false)
}

pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

#[allow(clippy::too_many_arguments)]
pub fn rename(os: &mut ObjsetW, fs: &FsInfo, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8], flags: u32, open: &dyn Fn(u64) -> bool) -> Result<()> {
    let sn = name_str(sname)?.to_string();
    let dn = name_str(dname)?.to_string();
    let obj = lookup(os, sdir, sname)?.ok_or_else(|| posix(libc::ENOENT, format!("{sn}: no such file")))?;
    let mut z = get(os, obj)?;
    let target = lookup(os, ddir, dname)?;
    let is_dir = z.mode & S_IFMT == S_IFDIR;
    if is_dir && sdir != ddir && is_ancestor(os, obj, ddir, fs.root)? {
        return Err(posix(libc::EINVAL, "cannot move a directory under itself"));
    }
    if target == Some(obj) {
        return Ok(());
    }
    if flags & RENAME_EXCHANGE != 0 {
        let t = target.ok_or_else(|| posix(libc::ENOENT, format!("{dn}: no such file")))?;
        let mut tz = get(os, t)?;
        let t_is_dir = tz.mode & S_IFMT == S_IFDIR;
        if t_is_dir && sdir != ddir && is_ancestor(os, t, sdir, fs.root)? {
            return Err(posix(libc::EINVAL, "cannot move a directory under itself"));
        }
        os.zap_add_u64(sdir, &sn, dirent(t, tz.mode))?;
        os.zap_add_u64(ddir, &dn, dirent(obj, z.mode))?;
        let now = now_ts();
        if sdir != ddir {
            z.parent = ddir;
            tz.parent = sdir;
            if is_dir != t_is_dir {
                let d = if is_dir { 1 } else { -1 };
                touch_dir(os, ddir, 0, d)?;
                touch_dir(os, sdir, 0, -d)?;
            }
        }
        z.ctime = now;
        tz.ctime = now;
        put(os, obj, &z)?;
        put(os, t, &tz)?;
        touch_dir(os, sdir, 0, 0)?;
        touch_dir(os, ddir, 0, 0)?;
        return Ok(());
    }
    if let Some(t) = target {
        if flags & RENAME_NOREPLACE != 0 {
            return Err(posix(libc::EEXIST, format!("{dn} exists")));
        }
        let tz = get(os, t)?;
        let t_is_dir = tz.mode & S_IFMT == S_IFDIR;
        if is_dir && !t_is_dir {
            return Err(posix(libc::ENOTDIR, format!("{dn} is not a directory")));
        }
        if !is_dir && t_is_dir {
            return Err(posix(libc::EISDIR, format!("{dn} is a directory")));
        }
        if t_is_dir {
            if !os.zap(t)?.entries.is_empty() {
                return Err(posix(libc::ENOTEMPTY, format!("{dn} is not empty")));
            }
            touch_dir(os, ddir, -1, -1)?;
        } else {
            touch_dir(os, ddir, -1, 0)?;
        }
        os.zap_remove(ddir, &dn)?;
        drop_link(os, fs, t, open(t))?;
    }
    os.zap_remove(sdir, &sn)?;
    touch_dir(os, sdir, -1, if is_dir { -1 } else { 0 })?;
    os.zap_add_u64(ddir, &dn, dirent(obj, z.mode))?;
    touch_dir(os, ddir, 1, if is_dir { 1 } else { 0 })?;
    z.parent = if is_dir || z.parent == sdir { ddir } else { z.parent };
    z.ctime = now_ts();
    put(os, obj, &z)
}

// ------------------------------------------------------------------------------------ xattrs

fn xattr_dir(os: &mut ObjsetW, obj: u64, create: bool, txg: u64) -> Result<Option<u64>> {
    let mut z = get(os, obj)?;
    if z.xattr != 0 {
        return Ok(Some(z.xattr));
    }
    if !create {
        return Ok(None);
    }
    let d = os.create_zap(types::DMU_OT_DIRECTORY_CONTENTS, types::DMU_OT_ZNODE, ZNODE_PHYS_SIZE, 0)?;
    let t = now_ts();
    let xz = ZnodeAttrs {
        mode: S_IFDIR | 0o755,
        links: 2,
        size: 2,
        parent: obj,
        gen: txg,
        uid: z.uid,
        gid: z.gid,
        flags: 0x0000_0008_0000_0000, // ZFS_XATTR: an extended attribute directory
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        ..Default::default()
    };
    put(os, d, &xz)?;
    z.xattr = d;
    put(os, obj, &z)?;
    Ok(Some(d))
}

pub fn listxattr(os: &mut ObjsetW, obj: u64) -> Result<Vec<Vec<u8>>> {
    match xattr_dir(os, obj, false, 0)? {
        None => Ok(Vec::new()),
        Some(d) => Ok(readdir(os, d)?.into_iter().map(|e| e.name).collect()),
    }
}

pub fn getxattr(os: &mut ObjsetW, obj: u64, name: &[u8]) -> Result<Vec<u8>> {
    let none = || posix(libc::ENODATA, "no such attribute");
    let d = xattr_dir(os, obj, false, 0)?.ok_or_else(none)?;
    let f = lookup(os, d, name)?.ok_or_else(none)?;
    read(os, f, 0, u64::MAX / 2)
}

/// flags: XATTR_CREATE (1), XATTR_REPLACE (2).
pub fn setxattr(os: &mut ObjsetW, obj: u64, name: &[u8], value: &[u8], flags: i32, txg: u64) -> Result<()> {
    name_str(name)?;
    let d = xattr_dir(os, obj, true, txg)?.expect("created");
    let existing = lookup(os, d, name)?;
    if flags & 1 != 0 && existing.is_some() {
        return Err(posix(libc::EEXIST, "attribute exists"));
    }
    if flags & 2 != 0 && existing.is_none() {
        return Err(posix(libc::ENODATA, "no such attribute"));
    }
    let f = match existing {
        Some(f) => {
            os.truncate(f, 0)?;
            f
        }
        None => create(os, d, name, S_IFREG | 0o644, 0, 0, 0, None, txg)?,
    };
    write(os, f, 0, value, 128 << 10)?;
    let mut z = get(os, f)?;
    z.size = value.len() as u64;
    put(os, f, &z)?;
    let mut oz = get(os, obj)?;
    oz.ctime = now_ts();
    put(os, obj, &oz)
}

pub fn removexattr(os: &mut ObjsetW, fs: &FsInfo, obj: u64, name: &[u8]) -> Result<()> {
    let none = || posix(libc::ENODATA, "no such attribute");
    let d = xattr_dir(os, obj, false, 0)?.ok_or_else(none)?;
    lookup(os, d, name)?.ok_or_else(none)?;
    unlink(os, fs, d, name, &|_| false)
}

/// fallocate(2): mode 0 or KEEP_SIZE reserve (ZFS allocates at write; only the size may grow),
/// PUNCH_HOLE|KEEP_SIZE frees a range. Other modes: EOPNOTSUPP, as OpenZFS answers.
pub fn fallocate(os: &mut ObjsetW, obj: u64, offset: u64, len: u64, mode: i32, recordsize: u64) -> Result<()> {
    const KEEP_SIZE: i32 = 0x01;
    const PUNCH_HOLE: i32 = 0x02;
    let mut z = get(os, obj)?;
    if z.mode & S_IFMT != S_IFREG {
        return Err(posix(libc::ENODEV, "not a regular file"));
    }
    let end = offset.checked_add(len).ok_or_else(|| posix(libc::EFBIG, "range overflows"))?;
    if mode == PUNCH_HOLE | KEEP_SIZE {
        if offset < z.size {
            os.punch(obj, offset, end.min(z.size) - offset)?;
        }
    } else if mode == 0 || mode == KEEP_SIZE {
        if mode == 0 && end > z.size {
            grow_blocksize(os, obj, end, recordsize)?;
            z.size = end;
        }
    } else {
        return Err(posix(libc::EOPNOTSUPP, "fallocate mode"));
    }
    let t = now_ts();
    z.mtime = t;
    z.ctime = t;
    put(os, obj, &z)
}

/// relatime: a read updates atime when it is not newer than mtime/ctime or a day old.
pub fn touch_atime(os: &mut ObjsetW, obj: u64) -> Result<()> {
    let mut z = get(os, obj)?;
    let now = now_ts();
    if z.atime <= z.mtime || z.atime <= z.ctime || now.0.saturating_sub(z.atime.0) >= 86400 {
        z.atime = now;
        put(os, obj, &z)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ACLs zfs-fuse wrote for a 0755 directory and a 0644 file (fixture `basic`).
    #[test]
    fn trivial_acl_matches_what_zfs_fuse_writes() {
        assert_eq!(
            trivial_acl(0o40755),
            [(1, 0x1000, 0x0), (0, 0x1000, 0xc0137), (1, 0x2040, 0x6), (0, 0x2040, 0x21), (1, 0x4000, 0xc0116), (0, 0x4000, 0x1200a9)]
        );
        assert_eq!(
            trivial_acl(0o100644),
            [(1, 0x1000, 0x20), (0, 0x1000, 0xc0117), (1, 0x2040, 0x26), (0, 0x2040, 0x1), (1, 0x4000, 0xc0136), (0, 0x4000, 0x120089)]
        );
    }

    /// A znode we encode decodes to the same attributes, its ACL bytes equal the fixture's.
    #[test]
    fn znode_phys_round_trip() {
        let z = ZnodeAttrs { mode: 0o100644, size: 1234, gen: 9, uid: 1000, gid: 100, parent: 4, links: 1, atime: (1, 2), mtime: (3, 4), ctime: (5, 6), crtime: (7, 8), ..Default::default() };
        let b = encode_znode_phys(&z);
        let d = fz::decode_znode_phys(&b, true).unwrap();
        assert_eq!((d.mode, d.size, d.gen, d.uid, d.gid, d.parent, d.links, d.atime, d.crtime), (z.mode, z.size, z.gen, z.uid, z.gid, z.parent, z.links, z.atime, z.crtime));
        let fx = include_bytes!("../../format/tests/data/fx-dnode-basic-blk2.bin");
        let bonus = &fx[9 * 512 + 192..9 * 512 + 192 + 264];
        assert_eq!(&b[176..264], &bonus[176..264], "the ACL of a 0644 file");
    }
}
