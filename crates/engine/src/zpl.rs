//! zpl: the POSIX view of a filesystem dataset — files, directories, symlinks, xattrs — read
//! from its objset (read-only for now).
//!
//! ```text
//!  object 1 (master node ZAP): VERSION, ROOT → root directory object, DELETE_QUEUE,
//!                              SA_ATTRS → SA master (REGISTRY, LAYOUTS) on ZPL ≥ 5
//!  a znode = a dnode whose bonus holds its attributes: system attributes (bonus type SA,
//!            maybe continued in a spill block) or a legacy znode_phys (ZPL ≤ 4)
//!  directory = ZAP: name → (type << 60 | object)
//!  file data = the object's blocks; symlink target = SA attribute, inline legacy bonus, or
//!              block 0; xattrs = SA nvlist (xattr=sa) or a hidden xattr directory of files
//! ```
//! Inode numbers are object numbers. Attribute decoding is cached per object in a bounded
//! map (the objset is immutable while mounted read-only).

use crate::dmu::Objset;
use crate::{Result, ZfsError};
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::nvlist::{NvList, NvValue};
use oxzfs_format::sa::{SaRegistry, ZnodeAttrs};
use oxzfs_format::types::{DMU_OT_SA, DMU_OT_ZNODE};
use oxzfs_format::znode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    /// Permission bits and S_IFMT type.
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units.
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

#[derive(Clone, Copy, Debug, Default)]
pub struct FsStat {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

const S_IFMT: u64 = 0o170000;
const S_IFDIR: u64 = 0o040000;
const S_IFLNK: u64 = 0o120000;
const CACHE_MAX: usize = 16384;

struct Znode {
    dn: DnodePhys,
    z: ZnodeAttrs,
}

pub struct Zfs {
    os: Arc<Objset>,
    pub version: u64,
    root: u64,
    sa: Option<SaRegistry>,
    cache: Mutex<HashMap<u64, Arc<Znode>>>,
    /// (used, available) bytes of the dataset, for statfs.
    space: Mutex<(u64, u64)>,
}

fn posix(errno: i32, msg: impl Into<String>) -> ZfsError {
    ZfsError::Posix(errno, msg.into())
}

impl Zfs {
    pub fn open(os: Arc<Objset>) -> Result<Arc<Zfs>> {
        let master = crate::zap::zap_list_u64(&os, 1)
            .map_err(|e| ZfsError::Invalid(format!("objset {} has no ZPL master node: {e}", os.id)))?;
        let get = |k: &str| master.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        let version = get(znode::ZPL_VERSION_STR).unwrap_or(0);
        let root = get(znode::ZFS_ROOT_OBJ).ok_or_else(|| ZfsError::Invalid(format!("objset {}: no ROOT in the master node", os.id)))?;
        let sa = match get(znode::ZFS_SA_ATTRS) {
            Some(sa_obj) => {
                let sa_master = crate::zap::zap_list_u64(&os, sa_obj)?;
                let reg_obj = sa_master.iter().find(|(n, _)| n == "REGISTRY").map(|(_, v)| *v);
                let lay_obj = sa_master.iter().find(|(n, _)| n == "LAYOUTS").map(|(_, v)| *v);
                let regs = match reg_obj {
                    Some(o) => crate::zap::zap_list_u64(&os, o)?,
                    None => Vec::new(),
                };
                let mut layouts = Vec::new();
                if let Some(o) = lay_obj {
                    for e in crate::zap::zap_list(&os, o)? {
                        let n: u64 = e.name_str().parse().unwrap_or(u64::MAX);
                        layouts.push((n, e.value_u64s().into_iter().map(|v| v as u16).collect()));
                    }
                }
                let mut reg = if regs.is_empty() { SaRegistry::legacy() } else { SaRegistry::new(regs, Vec::new()) };
                for (n, l) in layouts {
                    reg.layouts.insert(n, l);
                }
                Some(reg)
            }
            None => None,
        };
        Ok(Arc::new(Zfs { os, version, root, sa, cache: Mutex::new(HashMap::new()), space: Mutex::new((0, 0)) }))
    }

    pub fn objset(&self) -> &Arc<Objset> {
        &self.os
    }

    pub fn root_ino(&self) -> u64 {
        self.root
    }

    /// Record the dataset's space for statfs.
    pub fn set_space(&self, used: u64, avail: u64) {
        *self.space.lock().unwrap() = (used, avail);
    }

    fn znode(&self, ino: u64) -> Result<Arc<Znode>> {
        if let Some(z) = self.cache.lock().unwrap().get(&ino) {
            return Ok(z.clone());
        }
        let (dn, le) = self.os.dnode_with_order(ino).map_err(|e| match e {
            ZfsError::NotFound(m) => posix(libc::ENOENT, m),
            e => e,
        })?;
        let z = match dn.bonustype {
            DMU_OT_SA => {
                let reg = self.sa.as_ref().ok_or_else(|| ZfsError::Invalid(format!("object {ino}: SA bonus without an SA registry")))?;
                let mut z = ZnodeAttrs::default();
                z.merge_sa(&dn.bonus, le, reg).map_err(|e| ZfsError::corrupt(self.ctx(ino), e))?;
                if let Some(spill) = self.os.read_spill(&dn)? {
                    let sle = dn.spill.as_ref().map_or(le, |b| b.little_endian);
                    z.merge_sa(&spill, sle, reg).map_err(|e| ZfsError::corrupt(format!("{} spill", self.ctx(ino)), e))?;
                }
                z
            }
            DMU_OT_ZNODE => znode::decode_znode_phys(&dn.bonus, le).map_err(|e| ZfsError::corrupt(self.ctx(ino), e))?,
            other => return Err(posix(libc::ENOENT, format!("{}: not a file (bonus type {other})", self.ctx(ino)))),
        };
        let zn = Arc::new(Znode { dn, z });
        let mut c = self.cache.lock().unwrap();
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        c.insert(ino, zn.clone());
        Ok(zn)
    }

    fn ctx(&self, ino: u64) -> String {
        format!("pool '{}' objset {} object {}", self.os.spa.name, self.os.id, ino)
    }

    fn to_attr(&self, ino: u64, zn: &Znode) -> Attr {
        let z = &zn.z;
        let t = |p: (u64, u64)| (p.0 as i64, p.1 as u32);
        let blksz = zn.dn.data_block_size().max(512);
        Attr {
            ino,
            mode: z.mode as u32,
            nlink: z.links,
            uid: z.uid as u32,
            gid: z.gid as u32,
            size: z.size,
            blocks: zn.dn.used_bytes().div_ceil(512),
            blksize: blksz.min(1 << 20) as u32,
            atime: t(z.atime),
            mtime: t(z.mtime),
            ctime: t(z.ctime),
            crtime: t(z.crtime),
            rdev: z.rdev,
        }
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let zn = self.znode(ino)?;
        Ok(self.to_attr(ino, &zn))
    }

    fn dir(&self, ino: u64) -> Result<Arc<Znode>> {
        let zn = self.znode(ino)?;
        if zn.z.mode & S_IFMT != S_IFDIR {
            return Err(posix(libc::ENOTDIR, format!("{}: not a directory", self.ctx(ino))));
        }
        Ok(zn)
    }

    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        self.dir(dir)?;
        if name == b"." {
            return self.getattr(dir);
        }
        if name == b".." {
            return self.getattr(self.parent(dir)?);
        }
        let e = crate::zap::zap_lookup(&self.os, dir, name)?
            .ok_or_else(|| posix(libc::ENOENT, format!("{}: no entry named {}", self.ctx(dir), String::from_utf8_lossy(name))))?;
        let v = e.value_u64().ok_or_else(|| ZfsError::Invalid(format!("{}: empty directory entry", self.ctx(dir))))?;
        self.getattr(znode::dirent_obj(v))
    }

    pub fn parent(&self, dir: u64) -> Result<u64> {
        if dir == self.root {
            return Ok(self.root);
        }
        Ok(self.znode(dir)?.z.parent)
    }

    pub fn readdir(&self, dir: u64) -> Result<Vec<DirEntry>> {
        self.dir(dir)?;
        let mut out: Vec<DirEntry> = crate::zap::zap_list(&self.os, dir)?
            .into_iter()
            .filter_map(|e| {
                let v = e.value_u64()?;
                let dt = znode::dirent_type(v) as u32;
                Some(DirEntry { name: e.name, ino: znode::dirent_obj(v), mode: dt << 12 })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub fn read(&self, ino: u64, offset: u64, size: u64) -> Result<Vec<u8>> {
        let zn = self.znode(ino)?;
        if zn.z.mode & S_IFMT == S_IFDIR {
            return Err(posix(libc::EISDIR, format!("{}: is a directory", self.ctx(ino))));
        }
        if offset >= zn.z.size {
            return Ok(Vec::new());
        }
        let len = size.min(zn.z.size - offset);
        let mut data = self.os.read_obj(&zn.dn, ino, offset, len)?;
        data.resize(len as usize, 0);
        Ok(data)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let zn = self.znode(ino)?;
        if zn.z.mode & S_IFMT != S_IFLNK {
            return Err(posix(libc::EINVAL, format!("{}: not a symlink", self.ctx(ino))));
        }
        if let Some(t) = &zn.z.symlink {
            return Ok(t.clone());
        }
        let mut d = self.os.read_obj(&zn.dn, ino, 0, zn.z.size)?;
        d.truncate(zn.z.size as usize);
        Ok(d)
    }

    /// SA xattrs (name → value) of a znode.
    fn sa_xattrs(&self, zn: &Znode) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(raw) = &zn.z.dxattr else { return Vec::new() };
        let Ok(nv) = NvList::decode_packed(raw) else { return Vec::new() };
        nv.pairs
            .iter()
            .filter_map(|(k, v)| match v {
                NvValue::ByteArray(b) | NvValue::Uint8Array(b) => Some((k.as_bytes().to_vec(), b.clone())),
                _ => None,
            })
            .collect()
    }

    /// Names as Linux sees them: ZFS stores user xattrs without the "user." prefix unless the
    /// dataset was written with the compatibility name scheme; other namespaces keep theirs.
    fn linux_name(raw: &[u8]) -> Vec<u8> {
        let known = [&b"user."[..], b"trusted.", b"security.", b"system."];
        if known.iter().any(|p| raw.starts_with(p)) {
            raw.to_vec()
        } else {
            let mut v = b"user.".to_vec();
            v.extend_from_slice(raw);
            v
        }
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let zn = self.znode(ino)?;
        let mut names: Vec<Vec<u8>> = self.sa_xattrs(&zn).into_iter().map(|(k, _)| Self::linux_name(&k)).collect();
        if zn.z.xattr != 0 {
            for e in self.readdir(zn.z.xattr)? {
                names.push(Self::linux_name(&e.name));
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let zn = self.znode(ino)?;
        let matches = |raw: &[u8]| Self::linux_name(raw) == name;
        for (k, v) in self.sa_xattrs(&zn) {
            if matches(&k) {
                return Ok(v);
            }
        }
        if zn.z.xattr != 0 {
            for e in self.readdir(zn.z.xattr)? {
                if matches(&e.name) {
                    let a = self.getattr(e.ino)?;
                    return self.read(e.ino, 0, a.size);
                }
            }
        }
        Err(posix(libc::ENODATA, format!("{}: no xattr {}", self.ctx(ino), String::from_utf8_lossy(name))))
    }

    pub fn statfs(&self) -> Result<FsStat> {
        let (used, avail) = *self.space.lock().unwrap();
        let bsize = 4096u64;
        let objs = self.os.phys.meta_dnode.maxblkid.saturating_add(1) * self.os.phys.meta_dnode.data_block_size() / 512;
        Ok(FsStat {
            blocks: (used + avail) / bsize,
            bfree: avail / bsize,
            bavail: avail / bsize,
            files: objs + avail / 512,
            ffree: avail / 512,
            bsize: bsize as u32,
            namelen: 255,
        })
    }

    /// The path of object `ino` from the root, through parent pointers (for error reports).
    pub fn path_of(&self, ino: u64) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        let mut cur = ino;
        for _ in 0..256 {
            if cur == self.root {
                parts.reverse();
                return Some(format!("/{}", parts.join("/")));
            }
            let parent = self.znode(cur).ok()?.z.parent;
            let name = self
                .readdir(parent)
                .ok()?
                .into_iter()
                .find(|e| e.ino == cur)
                .map(|e| String::from_utf8_lossy(&e.name).into_owned())?;
            parts.push(name);
            cur = parent;
        }
        None
    }
}
