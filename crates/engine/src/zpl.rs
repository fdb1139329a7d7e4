//! zpl: the POSIX view of a filesystem dataset — files, directories, symlinks, xattrs — as
//! read, once, for read-only and read-write file systems alike (OpenZFS's zfs_vnops reads).
//!
//! `ZplRead` holds the reads (getattr, lookup, readdir, read, readlink, listxattr, getxattr,
//! parent, path_of) as provided methods over `dmu::ObjsetRead`, which the synced `Objset` and
//! the writable `dbuf::ObjsetW` both implement. Its two implementors differ only in what they
//! keep: `Zfs` (a read-only import's dataset, a snapshot) caches znodes and directory indexes,
//! `Live` (an `ObjsetW` under the pool's write lock, as the open txg has it) keeps nothing of
//! its own. The changes (create, write, setattr, unlink, rename, xattrs set and removed) are in
//! `zplw` and read through `Live`; the znode rules both share are in `zfs_znode`.
//!
//! ```text
//!  object 1 (master node ZAP): VERSION, ROOT → root directory object, DELETE_QUEUE,
//!                              SA_ATTRS → SA master ZAP {REGISTRY, LAYOUTS} (ZPL ≥ 5)
//!  a znode = a dnode whose bonus holds its attributes: system attributes (bonus type SA 44,
//!            maybe continued in a spill block) or a legacy znode_phys (bonus type ZNODE 17,
//!            ZPL ≤ 4) with a short symlink target inline after it
//!  directory = ZAP: name → (DT type << 60 | object number in the low 48 bits)
//!  file data = the object's blocks; symlink target = SA attribute, inline legacy bonus, or
//!              the object's block 0
//!  xattrs    = SA_DXATTR: a packed nvlist name → byte array (xattr=sa), and/or the znode's
//!              xattr object: a hidden directory whose entries are files holding the values
//! ```
//!
//! Inode numbers are object numbers. Xattr names as Linux sees them: OpenZFS on Linux (and
//! zfs-fuse) store the full name ("user.foo", "trusted.bar", "security.selinux"); Solaris,
//! illumos and FreeBSD store user xattrs without a namespace ("foo"), which Linux lists as
//! "user.foo" and finds after trying the prefixed name; "freebsd:" names are hidden.
//!
//! `Zfs`'s caches: parsed znodes and directory indexes live in bounded LRU maps (the objset
//! cannot change while mounted read-only, so nothing is invalidated). A directory whose ZAP has up to
//! `DIR_MAP_MAX` entries is indexed whole in a hash map on first use; larger ones keep the
//! opened fat ZAP (header) and look names up by hash, one leaf per lookup.
//! Lock order: `znodes` and `dirs` are leaf locks, never held across I/O.

use crate::dbuf::ObjsetW;
use crate::dmu::{Objset, ObjsetRead};
use crate::zap::Zap;
use crate::zfs_znode::{self, linux_xattr_name, stored_xattr_names, S_IFDIR, S_IFMT};
use crate::{Result, ZfsError};
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::sa::{SaRegistry, ZnodeAttrs};
use oxzfs_format::types::{DMU_OT_DIRECTORY_CONTENTS, DMU_OT_SA};
use oxzfs_format::znode;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

pub use crate::zfs_znode::{Attr, DirEntry, MASTER_NODE_OBJ, MAXNAMELEN};

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

/// Parsed znodes kept.
const ZNODE_CACHE: usize = 8192;
/// Directory index weight kept: one per directory plus one per 64 cached names.
const DIR_CACHE_WEIGHT: usize = 8192;
/// Directories with more entries than this are looked up by hash rather than indexed whole.
const DIR_MAP_MAX: u64 = 65536;
/// Object numbers are 48 bits (DN_MAX_OBJECT).
const DN_MAX_OBJECT: u64 = 1 << 48;

/// A bounded map that forgets the least recently used half when full (amortized O(1)).
struct Lru<K, V> {
    map: HashMap<K, (V, u64, usize)>,
    tick: u64,
    weight: usize,
    max_weight: usize,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    fn new(max_weight: usize) -> Self {
        Lru { map: HashMap::new(), tick: 0, weight: 0, max_weight }
    }

    fn get(&mut self, k: &K) -> Option<V> {
        self.tick += 1;
        let t = self.tick;
        self.map.get_mut(k).map(|e| {
            e.1 = t;
            e.0.clone()
        })
    }

    fn insert(&mut self, k: K, v: V, weight: usize) {
        self.tick += 1;
        let w = weight.max(1);
        if let Some(old) = self.map.insert(k, (v, self.tick, w)) {
            self.weight -= old.2;
        }
        self.weight += w;
        if self.weight > self.max_weight {
            let mut ticks: Vec<u64> = self.map.values().map(|e| e.1).collect();
            ticks.sort_unstable();
            let cut = ticks[ticks.len() / 2];
            let mut kept = 0;
            self.map.retain(|_, e| {
                let keep = e.1 > cut;
                if keep {
                    kept += e.2;
                }
                keep
            });
            self.weight = kept;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// A znode: its dnode and the attributes decoded from its bonus (and spill block).
pub struct Znode {
    pub dn: DnodePhys,
    pub z: ZnodeAttrs,
}

/// How a directory's names are found.
enum DirIndex {
    /// Every name → directory-entry value.
    Map(HashMap<Vec<u8>, u64>),
    /// A big directory: hash lookups in its fat ZAP.
    Hashed(Zap),
}

fn posix(errno: i32, msg: impl Into<String>) -> ZfsError {
    ZfsError::Posix(errno, msg.into())
}

/// How a file system's directories compare names (zfsvfs's z_norm, z_case and z_utf8, from
/// its master node): the normalization its directory ZAPs hash names by (case folded when
/// casesensitivity is insensitive or mixed), whether a lookup keeps case (mixed: Linux's
/// lookups are case-sensitive there, zfs_dirent_lock's MT_MATCH_CASE), and utf8only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameRules {
    pub norm: u64,
    pub match_case: bool,
    pub utf8only: bool,
}

impl NameRules {
    /// The rules of master node values `get` reads.
    pub fn from_master(get: impl Fn(&str) -> Option<u64>) -> NameRules {
        let case = get("casesensitivity").unwrap_or(0);
        let mut norm = get("normalization").unwrap_or(0);
        if matches!(case, 1 | 2) {
            norm |= oxzfs_format::zap::U8_TEXTPREP_TOUPPER;
        }
        NameRules { norm, match_case: case == 2, utf8only: get("utf8only").unwrap_or(0) != 0 }
    }

    /// The normalization a lookup compares names by (zap_name_init_str: without case folding
    /// when it keeps case); 0 when names compare as bytes.
    pub fn match_flags(&self) -> u64 {
        if self.match_case {
            self.norm & !oxzfs_format::zap::U8_TEXTPREP_TOUPPER
        } else {
            self.norm
        }
    }

    /// `name` as lookups compare it.
    pub fn key<'a>(&self, name: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        oxzfs_format::zap::normalized_key(self.match_flags(), name)
    }
}

/// Znode `obj` of `os`, decoded with the objset's SA registry `sa` (for SA znodes).
pub fn load_znode(os: &(impl ObjsetRead + ?Sized), sa: Option<&SaRegistry>, obj: u64) -> Result<Znode> {
    if obj == 0 || obj >= DN_MAX_OBJECT {
        return Err(ZfsError::NotFound(os.describe(obj)));
    }
    let (dn, le) = os.dnode_ordered(obj)?;
    let spill = if dn.bonustype == DMU_OT_SA { os.spill_ordered(obj, &dn)? } else { None };
    let z = zfs_znode::decode_znode(&dn, le, spill.as_ref().map(|(s, sle)| (&s[..], *sle)), sa, &|| os.describe(obj))?;
    Ok(Znode { dn, z })
}

/// The SA master ZAP `sa_obj` of a ZPL ≥ 5 objset: its REGISTRY (attribute name →
/// registration value) and LAYOUTS (layout number → attribute numbers).
pub fn read_sa_tables(os: &(impl ObjsetRead + ?Sized), sa_obj: u64) -> Result<(Vec<(String, u64)>, Vec<(u64, Vec<u16>)>)> {
    let regs = match os.zap_value(sa_obj, b"REGISTRY")? {
        Some(o) => os.zap_entries(o)?.into_iter().filter_map(|(k, v)| Some((String::from_utf8_lossy(&k).into_owned(), *v.first()?))).collect(),
        None => Vec::new(),
    };
    let mut layouts = Vec::new();
    if let Some(o) = os.zap_value(sa_obj, b"LAYOUTS")? {
        for (k, v) in os.zap_entries(o)? {
            let n: u64 = std::str::from_utf8(&k).ok().and_then(|s| s.parse().ok()).ok_or_else(|| {
                ZfsError::Invalid(format!("{}: SA layout named {:?}", os.describe(o), String::from_utf8_lossy(&k)))
            })?;
            layouts.push((n, v.into_iter().map(|x| x as u16).collect()));
        }
    }
    Ok((regs, layouts))
}

/// The SA registry a reader uses: the registered attributes and the layouts, or, when the
/// registry was never written, the built-in ZPL attribute numbering.
fn reader_sa_registry(os: &(impl ObjsetRead + ?Sized), sa_obj: u64) -> Result<SaRegistry> {
    let (regs, layouts) = read_sa_tables(os, sa_obj)?;
    let mut reg = if regs.is_empty() { SaRegistry::legacy() } else { SaRegistry::new(regs, Vec::new()) };
    for (n, l) in layouts {
        reg.layouts.insert(n, l);
    }
    Ok(reg)
}

/// The reads of the ZPL — attributes, names, directories, file bytes, symlinks, xattrs — written
/// once over any object set (`ObjsetRead`): a read-only file system (`Zfs`, whose objset never
/// changes, so it keeps znodes and directory indexes) and a file system being written (`Live`,
/// which sees the open txg) read alike; the changes are in `zplw`.
pub trait ZplRead {
    type Os: ObjsetRead + ?Sized;

    /// The object set read.
    fn os(&self) -> &Self::Os;
    /// The root directory's object.
    fn root(&self) -> Result<u64>;
    /// Znode `ino`.
    fn znode(&self, ino: u64) -> Result<Arc<Znode>>;

    /// The directory-entry value of `name` in directory `dir` (which the caller has checked).
    fn dir_value(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        self.os().zap_value(dir, name)
    }

    /// Every (name, directory-entry value) of directory `dir` (which the caller has checked).
    fn dir_values(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64)>> {
        Ok(self.os().zap_entries(dir)?.into_iter().filter_map(|(k, v)| Some((k, *v.first()?))).collect())
    }

    /// Attributes of object `ino`.
    fn getattr(&self, ino: u64) -> Result<Attr> {
        let zn = self.znode(ino)?;
        Ok(zfs_znode::znode_attr(ino, &zn.z, &zn.dn))
    }

    /// Znode `ino`, which must be a directory (ENOTDIR).
    fn dir(&self, ino: u64) -> Result<Arc<Znode>> {
        let zn = self.znode(ino)?;
        if zn.z.mode & S_IFMT != S_IFDIR {
            return Err(posix(libc::ENOTDIR, format!("{}: not a directory", self.os().describe(ino))));
        }
        Ok(zn)
    }

    /// Object `ino` must be a directory (ENOTDIR), as `dir` checks it.
    fn check_dir(&self, ino: u64) -> Result<()> {
        self.dir(ino).map(|_| ())
    }

    /// How the file system compares names.
    fn name_rules(&self) -> Result<NameRules> {
        let os = self.os();
        Ok(NameRules::from_master(|k| os.zap_value(MASTER_NODE_OBJ, k.as_bytes()).ok().flatten()))
    }

    /// The entry `name` finds in directory `dir` (which the caller has checked): its stored name
    /// and directory-entry value. The name itself, else, where the file system normalizes or
    /// folds case, the entry whose name compares equal as OpenZFS compares them (zap_match
    /// with MT_NORMALIZE): "foo" finds "Foo" on a case-insensitive file system.
    fn dir_find(&self, dir: u64, name: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        if let Some(v) = self.dir_value(dir, name)? {
            return Ok(Some((name.to_vec(), v)));
        }
        let rules = self.name_rules()?;
        if rules.match_flags() == 0 {
            return Ok(None);
        }
        let key = rules.key(name);
        Ok(self.dir_values(dir)?.into_iter().find(|(n, _)| rules.key(n) == key))
    }

    /// The object `name` names in directory `dir` ("." and ".." are not entries).
    fn dir_lookup(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        self.check_dir(dir)?;
        if name.len() > MAXNAMELEN {
            return Err(posix(libc::ENAMETOOLONG, format!("{}: name of {} bytes", self.os().describe(dir), name.len())));
        }
        Ok(self.dir_find(dir, name)?.map(|(_, v)| znode::dirent_obj(v)))
    }

    /// Attributes of `name` in directory `dir` ("." and ".." included).
    fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        if name == b"." || name == b".." {
            self.dir(dir)?;
            return self.getattr(if name == b"." { dir } else { self.parent(dir)? });
        }
        let obj = self.dir_lookup(dir, name)?.ok_or_else(|| {
            ZfsError::NotFound(format!("{}: no entry named '{}'", self.os().describe(dir), String::from_utf8_lossy(name)))
        })?;
        self.getattr(obj)
    }

    /// The parent directory of `dir` (the root is its own parent).
    fn parent(&self, dir: u64) -> Result<u64> {
        let root = self.root()?;
        if dir == root {
            return Ok(root);
        }
        let p = self.znode(dir)?.z.parent;
        Ok(if p == 0 { root } else { p })
    }

    /// The entries of directory `dir`, without "." and "..", sorted by name.
    fn readdir(&self, dir: u64) -> Result<Vec<DirEntry>> {
        self.check_dir(dir)?;
        let mut out: Vec<DirEntry> = self
            .dir_values(dir)?
            .into_iter()
            .map(|(name, v)| zfs_znode::dir_entry(name, v, |ino| self.getattr(ino).map_or(0, |a| a.mode & S_IFMT as u32)))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Up to `size` bytes of file `ino` from `offset`, clipped at the file size; holes read as zeros.
    fn read(&self, ino: u64, offset: u64, size: u64) -> Result<Vec<u8>> {
        let zn = self.znode(ino)?;
        let os = self.os();
        let Some((offset, len)) = zfs_znode::read_range(&zn.z, offset, size, &|| os.describe(ino))? else { return Ok(Vec::new()) };
        let mut data = os.read_object(ino, &zn.dn, offset, len)?;
        // Past the object's last block (a file extended by truncate) reads as zeros.
        data.resize(len as usize, 0);
        Ok(data)
    }

    /// The target of symlink `ino`.
    fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let zn = self.znode(ino)?;
        let os = self.os();
        zfs_znode::symlink_target(&zn.z, &|| os.describe(ino), |len| os.read_object(ino, &zn.dn, 0, len))
    }

    /// The names of the xattrs of `ino`, as Linux shows them: those in the SA, then those of
    /// the xattr directory.
    fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let zn = self.znode(ino)?;
        let mut stored: Vec<Vec<u8>> = sa_xattrs(self.os(), ino, &zn.z)?.into_iter().map(|(k, _)| k).collect();
        if zn.z.xattr != 0 {
            stored.extend(self.readdir(zn.z.xattr)?.into_iter().map(|e| e.name));
        }
        let mut names: Vec<Vec<u8>> = stored.iter().filter_map(|k| linux_xattr_name(k)).collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The value of xattr `name` (a Linux name, with its namespace) of `ino`.
    fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let zn = self.znode(ino)?;
        let sa = sa_xattrs(self.os(), ino, &zn.z)?;
        for stored in stored_xattr_names(name) {
            if let Some((_, v)) = sa.iter().find(|(k, _)| *k == stored) {
                return Ok(v.clone());
            }
            if zn.z.xattr != 0 {
                if let Some(obj) = self.dir_lookup(zn.z.xattr, &stored)? {
                    let a = self.getattr(obj)?;
                    if a.size > 1 << 26 {
                        return Err(posix(libc::E2BIG, format!("{}: xattr of {} bytes", self.os().describe(ino), a.size)));
                    }
                    return self.read(obj, 0, a.size);
                }
            }
        }
        Err(posix(libc::ENODATA, format!("{}: no xattr {}", self.os().describe(ino), String::from_utf8_lossy(name))))
    }

    /// The path of object `ino` from the root, through parent pointers (for error reports).
    fn path_of(&self, ino: u64) -> Option<String> {
        let root = self.root().ok()?;
        let mut parts: Vec<String> = Vec::new();
        let mut cur = ino;
        for _ in 0..256 {
            if cur == root {
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

/// SA xattrs (stored name → value) of znode `ino`.
fn sa_xattrs(os: &(impl ObjsetRead + ?Sized), ino: u64, z: &ZnodeAttrs) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let nv = zfs_znode::sa_xattr_nvlist(z, &|| os.describe(ino))?;
    Ok(nv.pairs.iter().filter_map(|(k, v)| Some((k.as_bytes().to_vec(), zfs_znode::nv_bytes(v)?.to_vec()))).collect())
}

/// The file system of an objset being written, read as the open txg has it (what a read-write
/// mount, the intent log's replay and the changes in `zplw` read through). No caches: the
/// objset keeps its decoded dnodes and ZAPs itself.
pub struct Live<'a>(pub &'a ObjsetW);

impl ZplRead for Live<'_> {
    type Os = ObjsetW;

    fn os(&self) -> &ObjsetW {
        self.0
    }

    fn root(&self) -> Result<u64> {
        self.0.zap_value(MASTER_NODE_OBJ, znode::ZFS_ROOT_OBJ.as_bytes())?.ok_or_else(|| ZfsError::Invalid(format!("{}: no ROOT in the master node", self.0.describe(MASTER_NODE_OBJ))))
    }

    fn znode(&self, ino: u64) -> Result<Arc<Znode>> {
        let os = self.0;
        let reg;
        let sa = match &os.sa {
            Some(r) => Some(r),
            // Not loaded yet (the ZPL loads it when it opens the file system for writing):
            // read it as a read-only mount does.
            None => match os.zap_value(MASTER_NODE_OBJ, znode::ZFS_SA_ATTRS.as_bytes())? {
                Some(o) if os.dnode(ino).map_or(false, |d| d.bonustype == DMU_OT_SA) => {
                    reg = reader_sa_registry(os, o)?;
                    Some(&reg)
                }
                _ => None,
            },
        };
        load_znode(os, sa, ino).map(Arc::new)
    }

    fn name_rules(&self) -> Result<NameRules> {
        self.0.with_zap(MASTER_NODE_OBJ, |z| NameRules::from_master(|k| z.get_u64(k)))
    }

    /// As the trait's, the folded match found through the objset's index of folded names (a
    /// scan of the directory would make filling it quadratic).
    fn dir_find(&self, dir: u64, name: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        if let Some(v) = self.dir_value(dir, name)? {
            return Ok(Some((name.to_vec(), v)));
        }
        let flags = self.name_rules()?.match_flags();
        if flags == 0 {
            return Ok(None);
        }
        self.0.zap_find_folded(dir, flags, name)
    }

    /// A directory's dnode is of the ZPL's directory type: that is checked without decoding
    /// its znode (a lookup's parent, every time); anything else gets `dir`'s full check and
    /// its error.
    fn check_dir(&self, ino: u64) -> Result<()> {
        if self.0.dnode(ino).map_or(false, |d| d.typ == DMU_OT_DIRECTORY_CONTENTS) {
            return Ok(());
        }
        self.dir(ino).map(|_| ())
    }
}

/// The file system as a mount reads it: read-only (`Zfs`: a read-only import's dataset, a
/// snapshot) or being written (`Live`: the open txg's view). One type, so whoever serves both
/// (the FUSE adapter) writes each read once.
pub enum View<'a> {
    Synced(&'a Zfs),
    Open(Live<'a>),
}

impl<'a> ZplRead for View<'a> {
    type Os = dyn ObjsetRead + 'a;

    fn os(&self) -> &(dyn ObjsetRead + 'a) {
        match self {
            View::Synced(z) => z.os(),
            View::Open(l) => l.os(),
        }
    }

    fn root(&self) -> Result<u64> {
        match self {
            View::Synced(z) => z.root(),
            View::Open(l) => l.root(),
        }
    }

    fn znode(&self, ino: u64) -> Result<Arc<Znode>> {
        match self {
            View::Synced(z) => z.znode(ino),
            View::Open(l) => l.znode(ino),
        }
    }

    fn check_dir(&self, ino: u64) -> Result<()> {
        match self {
            View::Synced(z) => z.check_dir(ino),
            View::Open(l) => l.check_dir(ino),
        }
    }

    fn dir_value(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        match self {
            View::Synced(z) => z.dir_value(dir, name),
            View::Open(l) => l.dir_value(dir, name),
        }
    }

    fn name_rules(&self) -> Result<NameRules> {
        match self {
            View::Synced(z) => z.name_rules(),
            View::Open(l) => l.name_rules(),
        }
    }

    fn dir_values(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64)>> {
        match self {
            View::Synced(z) => z.dir_values(dir),
            View::Open(l) => l.dir_values(dir),
        }
    }
}

/// A read-only file system (a read-only import's dataset, a snapshot): its objset never
/// changes, so znodes and directory indexes are kept.
pub struct Zfs {
    os: Arc<Objset>,
    /// ZPL version from the master node.
    pub version: u64,
    root: u64,
    sa: Option<SaRegistry>,
    znodes: Mutex<Lru<u64, Arc<Znode>>>,
    dirs: Mutex<Lru<u64, Arc<DirIndex>>>,
    /// (referenced, available, recordsize) of the dataset, for statfs.
    space: Mutex<(u64, u64, u64)>,
    /// How its directories compare names.
    rules: NameRules,
}

impl Zfs {
    /// Open the ZPL of a filesystem objset: its master node, root and SA registry.
    pub fn open(os: Arc<Objset>) -> Result<Arc<Zfs>> {
        let master = crate::zap::zap_list_u64(&os, MASTER_NODE_OBJ)
            .map_err(|e| ZfsError::Invalid(format!("pool '{}' objset {} has no ZPL master node: {e}", os.spa.name, os.id)))?;
        let get = |k: &str| master.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        let version = get(znode::ZPL_VERSION_STR).unwrap_or(0);
        let root = get(znode::ZFS_ROOT_OBJ)
            .ok_or_else(|| ZfsError::Invalid(format!("pool '{}' objset {}: no ROOT in the master node", os.spa.name, os.id)))?;
        let sa = match get(znode::ZFS_SA_ATTRS) {
            Some(sa_obj) => Some(reader_sa_registry(&*os, sa_obj)?),
            None => None,
        };
        Ok(Arc::new(Zfs {
            os,
            version,
            root,
            sa,
            znodes: Mutex::new(Lru::new(ZNODE_CACHE)),
            dirs: Mutex::new(Lru::new(DIR_CACHE_WEIGHT)),
            space: Mutex::new((0, 0, 128 << 10)),
            rules: NameRules::from_master(get),
        }))
    }

    pub fn objset(&self) -> &Arc<Objset> {
        &self.os
    }

    pub fn root_ino(&self) -> u64 {
        self.root
    }

    /// Record the dataset's space (referenced and available bytes, recordsize) for statfs.
    pub fn set_space(&self, referenced: u64, avail: u64, recordsize: u64) {
        *self.space.lock().unwrap() = (referenced, avail, recordsize);
    }

    /// The name index of directory `dir` (which the caller has checked is one).
    fn dir_index(&self, dir: u64) -> Result<Arc<DirIndex>> {
        if let Some(d) = self.dirs.lock().unwrap().get(&dir) {
            return Ok(d);
        }
        let zap = Zap::open(&self.os, dir)?;
        let (idx, weight) = if zap.is_micro() || zap.num_entries() <= DIR_MAP_MAX {
            let mut m = HashMap::new();
            for e in zap.list(&self.os)? {
                if let Some(v) = e.value_u64() {
                    m.insert(e.name, v);
                }
            }
            let w = 1 + m.len() / 64;
            (DirIndex::Map(m), w)
        } else {
            (DirIndex::Hashed(zap), 1)
        };
        let idx = Arc::new(idx);
        self.dirs.lock().unwrap().insert(dir, idx.clone(), weight);
        Ok(idx)
    }

    /// Space and object counts, as OpenZFS's statvfs computes them.
    pub fn statfs(&self) -> Result<FsStat> {
        let (referenced, avail, recordsize) = *self.space.lock().unwrap();
        // zfs_statvfs's numbers, as a writable mount reports them (dsl_space::StatFs).
        let s = crate::dsl_space::StatFs::compute(referenced, avail, self.os.bp.fill, recordsize);
        Ok(FsStat { blocks: s.blocks, bfree: s.bfree, bavail: s.bavail, files: s.files, ffree: s.ffree, bsize: s.bsize as u32, namelen: s.namemax })
    }
}

impl ZplRead for Zfs {
    type Os = Objset;

    fn os(&self) -> &Objset {
        &self.os
    }

    fn root(&self) -> Result<u64> {
        Ok(self.root)
    }

    fn znode(&self, ino: u64) -> Result<Arc<Znode>> {
        if let Some(z) = self.znodes.lock().unwrap().get(&ino) {
            return Ok(z);
        }
        let zn = Arc::new(load_znode(&*self.os, self.sa.as_ref(), ino)?);
        self.znodes.lock().unwrap().insert(ino, zn.clone(), 1);
        Ok(zn)
    }

    fn name_rules(&self) -> Result<NameRules> {
        Ok(self.rules)
    }

    /// As the trait's, a big directory's normalized match found through its hash.
    fn dir_find(&self, dir: u64, name: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        let flags = self.rules.match_flags();
        match &*self.dir_index(dir)? {
            DirIndex::Map(m) => Ok(match m.get(name) {
                Some(v) => Some((name.to_vec(), *v)),
                None if flags != 0 => {
                    let key = self.rules.key(name);
                    m.iter().find(|(n, _)| self.rules.key(n) == key).map(|(n, v)| (n.clone(), *v))
                }
                None => None,
            }),
            DirIndex::Hashed(zap) => {
                let e = match zap.lookup(&self.os, name)? {
                    Some(e) => Some(e),
                    None if flags != 0 => zap.lookup_matching(&self.os, name, flags)?,
                    None => None,
                };
                Ok(e.and_then(|e| Some((e.name.clone(), e.value_u64()?))))
            }
        }
    }

    fn dir_value(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        match &*self.dir_index(dir)? {
            DirIndex::Map(m) => Ok(m.get(name).copied()),
            DirIndex::Hashed(zap) => Ok(zap.lookup(&self.os, name)?.and_then(|e| e.value_u64())),
        }
    }

    fn dir_values(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64)>> {
        Ok(match &*self.dir_index(dir)? {
            DirIndex::Map(m) => m.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            DirIndex::Hashed(zap) => zap.list(&self.os)?.into_iter().filter_map(|e| e.value_u64().map(|v| (e.name, v))).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_stays_bounded_and_keeps_recent_entries() {
        let mut l: Lru<u64, u64> = Lru::new(100);
        for i in 0..1000 {
            l.insert(i, i * 2, 1);
            assert_eq!(l.get(&0), Some(0), "a key used on every round survives");
            assert!(l.weight <= 100 && l.len() <= 100);
        }
        assert_eq!(l.get(&999), Some(1998));
        assert_eq!(l.get(&500), None);
        let mut w: Lru<u64, u64> = Lru::new(10);
        w.insert(1, 1, 8);
        w.insert(2, 2, 8);
        assert!(w.weight <= 10);
        w.insert(2, 3, 1);
        assert_eq!(w.get(&2), Some(3));
    }

    #[test]
    fn xattr_names_map_like_openzfs_on_linux() {
        assert_eq!(linux_xattr_name(b"user.foo"), Some(b"user.foo".to_vec()));
        assert_eq!(linux_xattr_name(b"security.selinux"), Some(b"security.selinux".to_vec()));
        assert_eq!(linux_xattr_name(b"foo"), Some(b"user.foo".to_vec()), "Solaris/FreeBSD user xattr");
        assert_eq!(linux_xattr_name(b"freebsd:system.x"), None);
        assert_eq!(stored_xattr_names(b"user.foo"), vec![b"user.foo".to_vec(), b"foo".to_vec()]);
        assert_eq!(stored_xattr_names(b"trusted.a"), vec![b"trusted.a".to_vec()]);
        assert_eq!(stored_xattr_names(b"user.trusted.a"), vec![b"user.trusted.a".to_vec()]);
    }
}
