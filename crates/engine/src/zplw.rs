//! zplw: the changes of the ZFS POSIX layer on a writable objset — creating a file system's
//! skeleton (zfs_create_fs) and the vnode operations that change it (zfs_vnops: create, write,
//! setattr, link, unlink, rename, xattrs set and removed), and a znode's attributes written
//! back (legacy znode_phys or SA layouts). What they read (znodes, directory entries, file
//! bytes) they read through `zpl::Live`, the reads every file system shares.
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
//! ZPL version 4 (pools of version < 24) keeps each znode in a 264-byte `znode_phys_t` bonus.
//! ZPL version 5 (version-24+ pools, as OpenZFS creates them) keeps system attributes:
//!
//! ```text
//!   master node SA_ATTRS → SA master ZAP { REGISTRY: name → num | bswap << 16 | len << 24,
//!                                          LAYOUTS: "n" → u16[] attribute numbers }
//!   znode bonus (type SA, dnodesize - 192 bytes of room): sa_hdr (magic, layout, header size,
//!     variable lengths) + the attributes of its layout; a new znode's layout is
//!     MODE SIZE GEN UID GID PARENT FLAGS ATIME MTIME CTIME CRTIME LINKS [RDEV] DACL_COUNT
//!     DACL_ACES, and attributes added later (SYMLINK, XATTR, DXATTR) go at the end
//!   spill block (DMU_OT_SA, DNODE_FLAG_SPILL_BLKPTR): the attributes from the first one that
//!     would cover the spill pointer on, with their own header and layout
//! ```
//! Symlink targets of SA znodes are always the SYMLINK attribute (long ones spill); xattr=sa
//! puts xattrs in DXATTR (a packed nvlist name → byte array) and falls back to the xattr
//! directory for values over 32K or when the nvlist already exceeds 64K. dnodesize gives new
//! znodes more dnode slots, so more attributes stay in the bonus. A directory's size is its
//! entry count plus 2. Every operation runs under the pool's write lock (the caller holds the
//! `PoolW`), so the functions here take `&mut ObjsetW` and are single-threaded by construction.

use crate::dbuf::{ObjsetW, ZplProps};
use crate::zpl::{Live, ZplRead};
use crate::zfs_znode::{self, Attr};
use crate::{Result, ZfsError};
use oxzfs_format::nvlist::{NvList, NvValue};
use oxzfs_format::sa::{self as fsa, zpl_attr as za, SaRegistry, ZnodeAttrs};
use oxzfs_format::types;
use oxzfs_format::znode::ZNODE_PHYS_SIZE;

pub use crate::zfs_znode::{MASTER_NODE_OBJ, MAXNAMELEN, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
/// Largest bonus of a one-slot dnode with one block pointer.
const BONUS_MAX: usize = 320;
/// First ZPL version with system attributes (ZPL_VERSION_SA).
pub const ZPL_VERSION_SA: u64 = 5;
pub(crate) use oxzfs_format::znode::pflags::ZFS_XATTR;
use oxzfs_format::znode::pflags::{ZFS_ACL_TRIVIAL, ZFS_ARCHIVE, ZFS_AV_MODIFIED, ZFS_NO_EXECS_DENIED, ZFS_PROJID, ZFS_PROJINHERIT};
/// xattr=sa limits (DXATTR_MAX_ENTRY_SIZE, DXATTR_MAX_SA_SIZE): larger go to the directory.
const DXATTR_MAX_ENTRY_SIZE: usize = 32768;
const DXATTR_MAX_SA_SIZE: usize = 64 << 10;

/// Room for system attributes in a dnode of `dnsize` bytes with one block pointer
/// (DN_BONUS_SIZE).
fn dn_bonus_size(dnsize: usize) -> usize {
    dnsize - 64 - 128
}

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

/// Create the skeleton of a new file system in `os` (zfs_create_fs): version 5 (SA znodes)
/// on pools that have system attributes, else version 4.
/// The file system's fixed objects, with the files unlinked while open before a crash or export
/// freed first (zfs_unlinked_drain, as a mount does).
pub fn open_fs_drained(os: &mut ObjsetW) -> Result<FsInfo> {
    if let Some(e) = &os.zil.replay_error {
        return Err(ZfsError::Unavailable(e.clone()));
    }
    let f = open_fs(os, os.props.recordsize)?;
    if !os.props.readonly {
        drain_delete_queue(os, &f)?;
    }
    Ok(f)
}

/// The pool's `ObjsetInit`: a new file system's objects, ZPL version 5 on pools of version 24
/// and later (system attributes), 4 before.
pub fn init_fs(os: &mut ObjsetW, spa_version: u64, txg: u64, zpl: &ZplProps) -> Result<()> {
    create_fs_with(os, if spa_version >= 24 { ZPL_VERSION_SA } else { 4 }, txg, zpl).map(|_| ())
}

pub fn create_fs(os: &mut ObjsetW, zpl_version: u64, txg: u64) -> Result<u64> {
    create_fs_with(os, zpl_version, txg, &ZplProps::default())
}

/// zfs_create_fs: the master node with the version and how names compare (the root directory
/// is normalized as every directory of the file system will be), the delete queue, the root.
pub fn create_fs_with(os: &mut ObjsetW, zpl_version: u64, txg: u64, zpl: &ZplProps) -> Result<u64> {
    let master = os.create_zap(types::DMU_OT_MASTER_NODE, 0, 0, 0)?;
    assert_eq!(master, MASTER_NODE_OBJ, "the master node is object 1");
    os.zap_add_u64(master, "VERSION", zpl_version)?;
    os.zap_add_u64(master, "normalization", zpl.normalization)?;
    os.zap_add_u64(master, "utf8only", zpl.utf8only as u64)?;
    os.zap_add_u64(master, "casesensitivity", zpl.casesensitivity)?;
    let use_sa = zpl_version >= ZPL_VERSION_SA;
    if use_sa {
        let sa = os.create_zap(types::DMU_OT_SA_MASTER_NODE, 0, 0, 0)?;
        os.zap_add_u64(master, "SA_ATTRS", sa)?;
    }
    let dq = os.create_zap(types::DMU_OT_UNLINKED_SET, 0, 0, 0)?;
    os.zap_add_u64(master, "DELETE_QUEUE", dq)?;
    let root = mknode(os, use_sa, None, S_IFDIR | 0o755, 0, 0, 0, txg)?;
    os.zap_add_u64(master, "ROOT", root)?;
    if !use_sa {
        // zfs-fuse's file systems have a SHARES directory from the start.
        let shares = mknode(os, false, None, S_IFDIR | 0o555, 0, 0, 0, txg)?;
        os.zap_add_u64(master, "SHARES", shares)?;
    }
    Ok(root)
}

/// Read the fixed objects of a file system.
pub fn open_fs(os: &mut ObjsetW, recordsize: u64) -> Result<FsInfo> {
    let version = os.zap_lookup(MASTER_NODE_OBJ, "VERSION")?.ok_or_else(|| ZfsError::Invalid("no ZPL VERSION".into()))?;
    if version > ZPL_VERSION_SA {
        return Err(ZfsError::Unsupported(format!("writing ZPL version {version} file systems is not supported; mount read-only")));
    }
    if os.zap_lookup(MASTER_NODE_OBJ, "SA_ATTRS")?.is_some() {
        with_sa(os, |_, _| Ok(()))?;
    }
    let root = os.zap_lookup(MASTER_NODE_OBJ, "ROOT")?.ok_or_else(|| ZfsError::Invalid("no ROOT".into()))?;
    let delete_queue = os.zap_lookup(MASTER_NODE_OBJ, "DELETE_QUEUE")?.unwrap_or(0);
    Ok(FsInfo { root, delete_queue, version, recordsize })
}

// ------------------------------------------------------------------------ system attributes

/// Run `f` with the objset's SA registry, loading it first (sa_setup). A file system we write
/// registers every ZPL attribute under the numbers OpenZFS gives them (missing ones are
/// registered now, as sa_attr_register_sync does on the first SA write).
fn with_sa<T>(os: &mut ObjsetW, f: impl FnOnce(&mut ObjsetW, &mut SaRegistry) -> Result<T>) -> Result<T> {
    let mut reg = match os.sa.take() {
        Some(r) => r,
        None => load_sa(os)?,
    };
    let r = f(os, &mut reg);
    os.sa = Some(reg);
    r
}

fn sa_master(os: &mut ObjsetW) -> Result<u64> {
    os.zap_lookup(MASTER_NODE_OBJ, "SA_ATTRS")?.ok_or_else(|| ZfsError::Invalid(format!("objset {}: SA znodes but no SA_ATTRS", os.id)))
}

fn load_sa(os: &mut ObjsetW) -> Result<SaRegistry> {
    let sa = sa_master(os)?;
    let reg_obj = os.zap_lookup(sa, "REGISTRY")?;
    let (regs, layouts) = crate::zpl::read_sa_tables(&*os, sa)?;
    let mut reg = SaRegistry::new(regs, layouts);
    let mut missing = Vec::new();
    for (i, (name, len, bswap)) in fsa::ZPL_ATTRS.iter().enumerate() {
        match reg.num_of(name) {
            Some(n) if n as usize == i && reg.attr(n).map(|a| a.length) == Some(*len) => {}
            None if reg.attr(i as u16).is_none() => missing.push((name.to_string(), fsa::registration_value(i as u16, *len, *bswap))),
            _ => return Err(ZfsError::Unsupported(format!("objset {}: attribute {name} is not registered as OpenZFS numbers it; mount read-only", os.id))),
        }
    }
    if !missing.is_empty() {
        let ro = match reg_obj {
            Some(o) => o,
            None => {
                let o = os.create_zap(types::DMU_OT_SA_ATTR_REGISTRATION, 0, 0, 0)?;
                os.zap_add_u64(sa, "REGISTRY", o)?;
                o
            }
        };
        for (name, v) in missing {
            os.zap_add_u64(ro, &name, v)?;
            let a = fsa::SaAttr::from_registration(&name, v);
            reg.attrs.insert(a.num, a);
        }
    }
    Ok(reg)
}

/// The layout number of attribute list `attrs`, adding it to LAYOUTS when new (sa_find_layout:
/// new layouts are numbered by how many exist, the two built-in ones included).
fn sa_layout(os: &mut ObjsetW, reg: &mut SaRegistry, attrs: &[u16]) -> Result<u16> {
    if let Some((n, _)) = reg.layouts.iter().find(|(n, l)| **n >= 2 && l.as_slice() == attrs) {
        return Ok(*n as u16);
    }
    let mut n = reg.layouts.len() as u64;
    while reg.layouts.contains_key(&n) {
        n += 1;
    }
    if n >= 1024 {
        return Err(ZfsError::Posix(libc::ENOSPC, format!("objset {}: no SA layout numbers left", os.id)));
    }
    let sa = sa_master(os)?;
    let lo = match os.zap_lookup(sa, "LAYOUTS")? {
        Some(o) => o,
        None => {
            let o = os.create_zap(types::DMU_OT_SA_ATTR_LAYOUTS, 0, 0, 0)?;
            os.zap_add_u64(sa, "LAYOUTS", o)?;
            o
        }
    };
    os.zap_mut(lo)?.entries.insert(n.to_string().into_bytes(), (2, attrs.iter().map(|a| *a as u64).collect()));
    reg.layouts.insert(n, attrs.to_vec());
    Ok(n as u16)
}

/// The bytes of the trivial ACL of `mode` (zfs_ace_hdr_t entries: type, flags, access mask).
fn trivial_acl_bytes(mode: u64) -> Vec<u8> {
    trivial_acl(mode).iter().flat_map(|(t, f, m)| t.to_le_bytes().into_iter().chain(f.to_le_bytes()).chain(m.to_le_bytes())).collect()
}

/// pflags a new SA znode gets (zfs_mknode with FUIDs and a trivial ACL, zfs_mode_compute).
fn new_pflags(mode: u64) -> u64 {
    ZFS_ARCHIVE | ZFS_AV_MODIFIED | ZFS_ACL_TRIVIAL | exec_bits(mode)
}

fn exec_bits(mode: u64) -> u64 {
    if mode & 0o111 == 0o111 {
        ZFS_NO_EXECS_DENIED
    } else {
        0
    }
}

/// The value of attribute `a` for `z`; None keeps what is stored (attributes we do not model).
fn attr_value(a: u16, z: &ZnodeAttrs, acl_stale: bool) -> Option<Vec<u8>> {
    let u = |v: u64| Some(v.to_le_bytes().to_vec());
    let t = |v: (u64, u64)| Some([v.0.to_le_bytes(), v.1.to_le_bytes()].concat());
    match a {
        za::MODE => u(z.mode),
        za::SIZE => u(z.size),
        za::GEN => u(z.gen),
        za::UID => u(z.uid),
        za::GID => u(z.gid),
        za::PARENT => u(z.parent),
        za::FLAGS => u(z.flags),
        za::LINKS => u(z.links),
        za::XATTR => u(z.xattr),
        za::RDEV => u(z.rdev),
        za::PROJID => u(z.projid),
        za::ATIME => t(z.atime),
        za::MTIME => t(z.mtime),
        za::CTIME => t(z.ctime),
        za::CRTIME => t(z.crtime),
        za::SYMLINK => z.symlink.clone(),
        za::DXATTR => z.dxattr.clone(),
        za::DACL_COUNT if acl_stale => u(trivial_acl(z.mode).len() as u64),
        za::DACL_ACES if acl_stale => Some(trivial_acl_bytes(z.mode)),
        _ => None,
    }
}

/// The attributes stored for `obj` now, in layout order (bonus, then spill), with their bytes.
fn stored_attrs(os: &ObjsetW, obj: u64, bonus: &[u8], reg: &SaRegistry) -> Result<Vec<(u16, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut bufs = vec![bonus.to_vec()];
    if let Some(sp) = os.spill(obj)? {
        bufs.push(sp);
    }
    for b in &bufs {
        for (name, d) in fsa::decode_attrs(b, true, reg).map_err(|e| ZfsError::corrupt(format!("objset {} znode {obj}", os.id), e))? {
            let n = reg.num_of(&name).expect("decoded attributes are registered");
            out.push((n, d.to_vec()));
        }
    }
    Ok(out)
}

/// Write the attributes `attrs` (in this order) of `obj`: the bonus up to where a spill
/// pointer would no longer fit, the rest in a spill block (sa_build_layouts).
fn write_sa(os: &mut ObjsetW, reg: &mut SaRegistry, obj: u64, attrs: &[(u16, Vec<u8>)]) -> Result<()> {
    let dn = os.dnode(obj)?;
    let space = dn_bonus_size(dn.slots() * 512);
    let reglen = |a: u16| reg.attr(a).map_or(0, |x| x.length);
    let lens: Vec<(usize, bool)> = attrs.iter().map(|(a, d)| (d.len(), reglen(*a) == 0)).collect();
    let p = fsa::plan(&lens, space, true);
    if p.total > fsa::SA_MAX_SIZE {
        return Err(posix(libc::EFBIG, format!("object {obj}: {} bytes of system attributes", p.total)));
    }
    let k = p.spill_idx.unwrap_or(attrs.len());
    let nums: Vec<u16> = attrs.iter().map(|(a, _)| *a).collect();
    let items: Vec<(u16, &[u8])> = attrs.iter().map(|(a, d)| (reglen(*a), d.as_slice())).collect();
    let bl = sa_layout(os, reg, &nums[..k])?;
    let bonuslen = if k < attrs.len() { (space - 128).min(p.total + p.hdrsize) } else { p.total + p.hdrsize };
    let bonus = fsa::encode_buf(bl, p.hdrsize, &items[..k], bonuslen);
    let spill = if k < attrs.len() {
        let sp = fsa::plan(&lens[k..], 0, false);
        let need = sp.total + sp.hdrsize;
        if need > fsa::SA_MAX_SIZE {
            return Err(posix(libc::EFBIG, format!("object {obj}: spill of {need} bytes")));
        }
        // A spill block only grows (sa_resize_spill), from 512 bytes.
        let have = os.spill(obj)?.map_or(512, |b| b.len());
        let size = have.max(need.div_ceil(512) * 512);
        let sl = sa_layout(os, reg, &nums[k..])?;
        Some(fsa::encode_buf(sl, sp.hdrsize, &items[k..], size))
    } else {
        None
    };
    os.set_bonus(obj, &bonus)?;
    os.set_spill(obj, spill)
}

/// Store `z` in SA znode `obj`: its stored attributes keep their order, attributes it gained
/// (SYMLINK, XATTR, DXATTR) are appended as sa_update does, a mode change rewrites the ACL.
fn put_sa(os: &mut ObjsetW, obj: u64, z: &ZnodeAttrs) -> Result<()> {
    let bonus = os.dnode(obj)?.bonus;
    with_sa(os, |os, reg| {
        let stored = stored_attrs(os, obj, &bonus, reg)?;
        let old_mode = stored.iter().find(|(a, _)| *a == za::MODE).and_then(|(_, d)| d.get(..8)).map(|b| u64::from_le_bytes(b.try_into().expect("8")));
        let acl_stale = old_mode != Some(z.mode);
        let mut z = z.clone();
        if acl_stale {
            z.flags = (z.flags & !ZFS_NO_EXECS_DENIED) | exec_bits(z.mode);
        }
        let mut attrs: Vec<(u16, Vec<u8>)> = stored.into_iter().map(|(a, d)| (a, attr_value(a, &z, acl_stale).unwrap_or(d))).collect();
        for (a, want) in [(za::SYMLINK, z.symlink.is_some()), (za::XATTR, z.xattr != 0), (za::DXATTR, z.dxattr.is_some())] {
            if want && !attrs.iter().any(|(x, _)| *x == a) {
                attrs.push((a, attr_value(a, &z, true).expect("modelled")));
            }
        }
        if z.flags & ZFS_PROJID != 0 && !attrs.iter().any(|(x, _)| *x == za::PROJID) {
            // sa_add_projid: the project id goes where the accounting reads it, right after
            // the fixed attributes, the others following in its order.
            const ORDER: [u16; 17] = [
                za::MODE, za::SIZE, za::GEN, za::UID, za::GID, za::PARENT, za::FLAGS, za::ATIME, za::MTIME, za::CTIME, za::CRTIME, za::LINKS, za::PROJID, za::RDEV, za::DACL_COUNT, za::DACL_ACES, za::XATTR,
            ];
            for a in ORDER[..13].iter().copied() {
                if !attrs.iter().any(|(x, _)| *x == a) {
                    attrs.push((a, attr_value(a, &z, true).expect("modelled")));
                }
            }
            attrs.sort_by_key(|(a, _)| ORDER.iter().position(|x| x == a).unwrap_or(ORDER.len()));
        }
        write_sa(os, reg, obj, &attrs)
    })
}

/// The normalization of the file system's directories (zfsvfs's z_norm): its normalization
/// property's flags, and case folding (U8_TEXTPREP_TOUPPER) when it is case-insensitive or
/// mixed.
fn zpl_norm(os: &mut ObjsetW) -> Result<u64> {
    let mut norm = os.zap_lookup(MASTER_NODE_OBJ, "normalization")?.unwrap_or(0);
    if matches!(os.zap_lookup(MASTER_NODE_OBJ, "casesensitivity")?, Some(1 | 2)) {
        norm |= oxzfs_format::zap::U8_TEXTPREP_TOUPPER;
    }
    Ok(norm)
}

/// Allocate and initialize a znode (zfs_mknode): a directory ZAP or a plain-file object with
/// the znode's attributes in its bonus, legacy or SA. `parent` (object, pflags) is None for
/// the root, which is its own parent.
#[allow(clippy::too_many_arguments)]
fn mknode(os: &mut ObjsetW, use_sa: bool, parent: Option<(u64, u64)>, mode: u64, uid: u64, gid: u64, rdev: u64, txg: u64) -> Result<u64> {
    let is_dir = mode & S_IFMT == S_IFDIR;
    let dnsize = if use_sa { os.props.dnodesize } else { 512 };
    let slots = dnsize / 512;
    let (bonustype, bonuslen) = if use_sa { (types::DMU_OT_SA, dn_bonus_size(dnsize)) } else { (types::DMU_OT_ZNODE, ZNODE_PHYS_SIZE) };
    let obj = if is_dir {
        let norm = zpl_norm(os)?;
        os.create_zap_slots(types::DMU_OT_DIRECTORY_CONTENTS, bonustype, bonuslen, norm, slots)?
    } else {
        os.alloc_object(types::DMU_OT_PLAIN_FILE_CONTENTS, 512, bonustype, bonuslen, slots)?
    };
    let t = now_ts();
    let (pobj, pflags) = parent.unwrap_or((obj, 0));
    let xattr_flag = pflags & ZFS_XATTR;
    // zfs_mknode: with project_quota every SA znode carries a project id, the directory's
    // when it passes its project on (zfs_inherit_projid), and regular files and directories
    // pass the flag on in turn.
    let inherit = pflags & ZFS_PROJINHERIT != 0;
    let projid = if inherit { get(os, pobj)?.projid } else { 0 };
    let mut proj_flags = if use_sa && os.props.projects { ZFS_PROJID } else { 0 };
    if inherit && matches!(mode & S_IFMT, S_IFDIR | S_IFREG) {
        proj_flags |= ZFS_PROJINHERIT;
    }
    let z = ZnodeAttrs {
        mode,
        uid,
        gid,
        links: if is_dir { 2 } else { 1 },
        size: if is_dir { 2 } else { 0 },
        parent: pobj,
        gen: txg,
        rdev,
        flags: if use_sa { new_pflags(mode) | xattr_flag | proj_flags } else { xattr_flag },
        projid,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        ..Default::default()
    };
    if !use_sa {
        os.set_bonus(obj, &encode_znode_phys(&z))?;
        return Ok(obj);
    }
    let is_dev = matches!(mode & S_IFMT, 0o060000 | 0o020000);
    let mut list = vec![za::MODE, za::SIZE, za::GEN, za::UID, za::GID, za::PARENT, za::FLAGS, za::ATIME, za::MTIME, za::CTIME, za::CRTIME, za::LINKS];
    if z.flags & ZFS_PROJID != 0 {
        list.push(za::PROJID);
    }
    if is_dev {
        list.push(za::RDEV);
    }
    list.extend([za::DACL_COUNT, za::DACL_ACES]);
    let attrs: Vec<(u16, Vec<u8>)> = list.iter().map(|a| (*a, attr_value(*a, &z, true).expect("modelled"))).collect();
    with_sa(os, |os, reg| write_sa(os, reg, obj, &attrs))?;
    Ok(obj)
}

/// The znode attributes of `obj` (its SA registry loaded first for an SA znode, as the
/// changes that follow may register attributes).
pub fn get(os: &mut ObjsetW, obj: u64) -> Result<ZnodeAttrs> {
    if os.sa.is_none() && os.dnode(obj).map_or(false, |d| d.bonustype == types::DMU_OT_SA) {
        with_sa(os, |_, _| Ok(()))?;
    }
    let zn = crate::zpl::load_znode(&*os, os.sa.as_ref(), obj).map_err(|e| match e {
        ZfsError::NotFound(m) => posix(libc::ENOENT, m),
        e => e,
    })?;
    Ok(zn.z)
}

fn is_sa(os: &ObjsetW, obj: u64) -> Result<bool> {
    Ok(os.dnode(obj)?.bonustype == types::DMU_OT_SA)
}

pub fn put(os: &mut ObjsetW, obj: u64, z: &ZnodeAttrs) -> Result<()> {
    if is_sa(os, obj)? {
        put_sa(os, obj, z)
    } else {
        os.set_bonus(obj, &encode_znode_phys(z))
    }
}

pub fn to_attr(os: &ObjsetW, obj: u64, z: &ZnodeAttrs) -> Attr {
    match os.dnode(obj) {
        Ok(dn) => zfs_znode::znode_attr(obj, z, &dn),
        Err(_) => zfs_znode::attr_of(obj, z, 0, 512),
    }
}

/// zfs_link's and zfs_rename's check: an object may not enter a directory that passes on
/// another project than its own (EXDEV, as for a move across file systems).
fn check_same_project(os: &mut ObjsetW, dir: u64, z: &ZnodeAttrs) -> Result<()> {
    let d = get(os, dir)?;
    if d.flags & ZFS_PROJINHERIT != 0 && d.projid != z.projid {
        return Err(posix(libc::EXDEV, format!("project {} into a directory of project {}", z.projid, d.projid)));
    }
    Ok(())
}

/// The project a new object in directory `dir` belongs to (zfs_inherit_projid): the
/// directory's when it passes its project on, else the default (0).
pub fn inherited_projid(os: &mut ObjsetW, dir: u64) -> Result<u64> {
    let z = get(os, dir)?;
    Ok(if z.flags & ZFS_PROJINHERIT != 0 { z.projid } else { 0 })
}

/// A directory entry's name: bytes, UTF-8 or not (OpenZFS stores any bytes but NUL and '/'
/// unless utf8only is set), shown lossily in messages.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Name<'a>(&'a [u8]);

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(self.0))
    }
}

/// `name` as a directory entry's name: not empty, no '/' or NUL, at most MAXNAMELEN bytes.
fn name_ok(name: &[u8]) -> Result<Name<'_>> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(posix(libc::EINVAL, "invalid name"));
    }
    if name.len() > MAXNAMELEN {
        return Err(posix(libc::ENAMETOOLONG, "name too long"));
    }
    Ok(Name(name))
}

/// An extended attribute's name, which oxzfs keeps as UTF-8.
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

fn touch_dir(os: &mut ObjsetW, dir: u64, dsize: i64, dlinks: i64) -> Result<()> {
    let mut z = get(os, dir)?;
    z.size = (z.size as i64 + dsize).max(2) as u64;
    z.links = (z.links as i64 + dlinks).max(1) as u64;
    let t = now_ts();
    z.mtime = t;
    z.ctime = t;
    put(os, dir, &z)
}

/// Names of one normalized form a normalized directory takes at most (a mixed file system's
/// "foo", "Foo", "FOO"... hash alike): OpenZFS writes a micro ZAP whose names collide more than
/// 127 times as a fat one, and a fat ZAP's leaf holds only so many of one hash (ENOSPC then).
const MAX_SAME_FORM: usize = 64;

/// Before `name` goes into directory `dir`: on a file system with utf8only, a name that is not
/// UTF-8 is refused (EILSEQ, as zfs_dirent_lock refuses it); in a normalized directory, a name
/// whose normalized form is longer than a name may be (zap_name_init_str: ENOTSUP), and one
/// more name of a form the directory holds too many of (ENOSPC).
fn check_dir_add(os: &mut ObjsetW, dir: u64, name: Name) -> Result<()> {
    if std::str::from_utf8(name.0).is_err() && Live(os).name_rules()?.utf8only {
        return Err(posix(libc::EILSEQ, format!("{name}: not UTF-8, and the file system takes UTF-8 names only")));
    }
    let norm = os.zap(dir)?.normflags;
    if norm != 0 {
        let key = oxzfs_format::zap::normalized_key(norm, name.0);
        if key.len() > MAXNAMELEN {
            return Err(posix(libc::EOPNOTSUPP, format!("{name}: its normalized form is longer than {MAXNAMELEN} bytes")));
        }
        let same = os.zap_count_folded(dir, norm, name.0)?;
        if same >= MAX_SAME_FORM {
            return Err(posix(libc::ENOSPC, format!("{name}: directory {dir} holds {same} names of its normalized form")));
        }
    }
    Ok(())
}

/// Create a file, directory, symlink or device node in `dir`.
#[allow(clippy::too_many_arguments)]
pub fn create(os: &mut ObjsetW, dir: u64, name: &[u8], mode: u64, uid: u64, gid: u64, rdev: u64, target: Option<&[u8]>, txg: u64) -> Result<u64> {
    let n = name_ok(name)?;
    let pz = Live(os).dir(dir)?.z.clone();
    if Live(os).dir_lookup(dir, name)?.is_some() {
        return Err(posix(libc::EEXIST, format!("{n} exists")));
    }
    check_dir_add(os, dir, n)?;
    let is_dir = mode & S_IFMT == S_IFDIR;
    let use_sa = is_sa(os, dir)?;
    let obj = mknode(os, use_sa, Some((dir, pz.flags)), mode, uid, gid, rdev, txg)?;
    let mut z = get(os, obj)?;
    // mknode wrote the whole znode; only a symlink's target changes it again.
    if let Some(tg) = target {
        z.size = tg.len() as u64;
        if use_sa || ZNODE_PHYS_SIZE + tg.len() <= BONUS_MAX {
            // SA znodes keep every target in the SYMLINK attribute (long ones spill).
            z.symlink = Some(tg.to_vec());
        } else {
            // One block holds the whole target (readers take it from block 0).
            grow_blocksize(os, obj, tg.len() as u64, 128 << 10)?;
            os.write(obj, 0, tg)?;
        }
        put(os, obj, &z)?;
    }
    os.zap_add_name(dir, n.0, dirent(obj, mode))?;
    touch_dir(os, dir, 1, if is_dir { 1 } else { 0 })?;
    crate::zfs_log::create(os, dir, name, obj, &z, target);
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

pub fn write(os: &mut ObjsetW, obj: u64, offset: u64, data: &[u8], recordsize: u64) -> Result<usize> {
    write_as(os, obj, offset, data, recordsize, None)
}

/// `write` by a caller without CAP_FSETID when `kill` is given (`kill(gid)`: is the caller in
/// group `gid`): the write takes the set-ID bits away (see `killed_mode`), as zfs_write's
/// zfs_clear_setid_bits_if_necessary does, logged as TX_SETATTR of the mode before the write.
pub fn write_as(os: &mut ObjsetW, obj: u64, offset: u64, data: &[u8], recordsize: u64, kill: Option<&dyn Fn(u64) -> bool>) -> Result<usize> {
    let mut z = get(os, obj)?;
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EISDIR, "is a directory"));
    }
    let end = offset + data.len() as u64;
    if end > (1u64 << 63) {
        return Err(posix(libc::EFBIG, "file too large"));
    }
    if let Some(in_group) = kill {
        let m = killed_mode(z.mode, z.gid, in_group);
        if m != z.mode {
            z.mode = m;
            crate::zfs_log::setattr(os, obj, Some(m), None, None, None, None, None);
        }
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
    crate::zfs_log::write(os, obj, offset, data.len() as u64);
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
    /// Clear the set-user-ID bit, and the set-group-ID bit of a group-executable file, of a
    /// file that is not a directory, as a change of owner or a truncation by an unprivileged
    /// caller does (the kernel leaves this to the file system under FUSE's
    /// HANDLE_KILLPRIV_V2).
    pub kill_suidgid: bool,
}

/// The mode with the bits a write, truncation or change of owner takes away (the kernel's
/// setattr_should_drop_suidgid): S_ISUID; S_ISGID when the group may execute, or when the
/// caller is neither in the file's group nor privileged (`in_group(gid)` says; without
/// S_IXGRP, S_ISGID otherwise marks mandatory locking and stays). Directories keep theirs.
fn killed_mode(mode: u64, gid: u64, in_group: &dyn Fn(u64) -> bool) -> u64 {
    if mode & S_IFMT == S_IFDIR {
        return mode;
    }
    let mut m = mode & !(libc::S_ISUID as u64);
    if m & libc::S_ISGID as u64 != 0 && (m & libc::S_IXGRP as u64 != 0 || !in_group(gid)) {
        m &= !(libc::S_ISGID as u64);
    }
    m
}

pub fn setattr(os: &mut ObjsetW, obj: u64, s: &SetAttr, recordsize: u64) -> Result<Attr> {
    setattr_as(os, obj, s, recordsize, &|_| true)
}

/// `setattr` for a caller: `in_group(gid)` says whether the caller is in group `gid` or
/// privileged (for `SetAttr::kill_suidgid`).
pub fn setattr_as(os: &mut ObjsetW, obj: u64, s: &SetAttr, recordsize: u64, in_group: &dyn Fn(u64) -> bool) -> Result<Attr> {
    let mut z = get(os, obj)?;
    let old_gid = z.gid;
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
    let before = z.mode;
    if s.kill_suidgid {
        z.mode = killed_mode(z.mode, old_gid, in_group);
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
    let mode = (s.mode.is_some() || z.mode != before).then_some(z.mode);
    crate::zfs_log::setattr(os, obj, mode, s.uid, s.gid, s.size, s.atime, s.mtime);
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
        if let Ok(ents) = Live(os).readdir(z.xattr) {
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
    let n = name_ok(name)?;
    let (stored, obj) = find(os, dir, name)?.ok_or_else(|| posix(libc::ENOENT, format!("{n}: no such file")))?;
    let z = get(os, obj)?;
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EISDIR, format!("{n} is a directory")));
    }
    os.zap_remove_name(dir, &stored)?;
    touch_dir(os, dir, -1, 0)?;
    drop_link(os, fs, obj, open(obj))?;
    crate::zfs_log::remove(os, dir, name, false);
    Ok(())
}

pub fn rmdir(os: &mut ObjsetW, fs: &FsInfo, dir: u64, name: &[u8]) -> Result<()> {
    let n = name_ok(name)?;
    let (stored, obj) = find(os, dir, name)?.ok_or_else(|| posix(libc::ENOENT, format!("{n}: no such directory")))?;
    let z = get(os, obj)?;
    if z.mode & S_IFMT != S_IFDIR {
        return Err(posix(libc::ENOTDIR, format!("{n} is not a directory")));
    }
    if !os.zap(obj)?.entries.is_empty() {
        return Err(posix(libc::ENOTEMPTY, format!("{n} is not empty")));
    }
    os.zap_remove_name(dir, &stored)?;
    touch_dir(os, dir, -1, -1)?;
    drop_link(os, fs, obj, false)?;
    crate::zfs_log::remove(os, dir, name, true);
    Ok(())
}

pub fn link(os: &mut ObjsetW, obj: u64, dir: u64, name: &[u8]) -> Result<Attr> {
    let n = name_ok(name)?;
    let mut z = get(os, obj)?;
    if z.mode & S_IFMT == S_IFDIR {
        return Err(posix(libc::EPERM, "hard link to a directory"));
    }
    if Live(os).dir_lookup(dir, name)?.is_some() {
        return Err(posix(libc::EEXIST, format!("{n} exists")));
    }
    check_same_project(os, dir, &z)?;
    check_dir_add(os, dir, n)?;
    z.links += 1;
    z.ctime = now_ts();
    // zfs_link_create sets the parent to the new link's directory (OpenZFS and zfs-fuse do).
    z.parent = dir;
    put(os, obj, &z)?;
    os.zap_add_name(dir, n.0, dirent(obj, z.mode))?;
    touch_dir(os, dir, 1, 0)?;
    crate::zfs_log::link(os, dir, obj, name);
    Ok(to_attr(os, obj, &z))
}

/// The entry `name` finds in directory `dir`: its stored name (another case or form of `name` on
/// a file system that folds them) and its object.
fn find(os: &mut ObjsetW, dir: u64, name: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
    Live(os).check_dir(dir)?;
    Ok(Live(os).dir_find(dir, name)?.map(|(n, v)| (n, oxzfs_format::znode::dirent_obj(v))))
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
    let sn = name_ok(sname)?;
    let dn = name_ok(dname)?;
    Live(os).check_dir(sdir)?;
    Live(os).check_dir(ddir)?;
    let (sstored, obj) = find(os, sdir, sname)?.ok_or_else(|| posix(libc::ENOENT, format!("{sn}: no such file")))?;
    let mut z = get(os, obj)?;
    let found = find(os, ddir, dname)?;
    let is_dir = z.mode & S_IFMT == S_IFDIR;
    if is_dir && sdir != ddir && is_ancestor(os, obj, ddir, fs.root)? {
        return Err(posix(libc::EINVAL, "cannot move a directory under itself"));
    }
    // The same entry under another name: nothing to do, unless a case-insensitive file system
    // is asked to change the name's case or form (zfs_rename's case-only rename).
    let case_only = matches!(&found, Some((t, o)) if *o == obj && sdir == ddir && *t == sstored && sstored != dname);
    if found.as_ref().is_some_and(|(_, o)| *o == obj) && !case_only {
        return Ok(());
    }
    let target = if case_only { None } else { found.map(|(_, o)| o) };
    if sdir != ddir {
        check_same_project(os, ddir, &z)?;
    }
    check_dir_add(os, ddir, dn)?;
    if flags & RENAME_EXCHANGE != 0 {
        let t = target.ok_or_else(|| posix(libc::ENOENT, format!("{dn}: no such file")))?;
        let mut tz = get(os, t)?;
        let t_is_dir = tz.mode & S_IFMT == S_IFDIR;
        if t_is_dir && sdir != ddir && is_ancestor(os, t, sdir, fs.root)? {
            return Err(posix(libc::EINVAL, "cannot move a directory under itself"));
        }
        // Each name keeps its stored form; only what it names changes.
        let tstored = find(os, ddir, dname)?.map_or_else(|| dname.to_vec(), |(n, _)| n);
        os.zap_add_name(sdir, &sstored, dirent(t, tz.mode))?;
        os.zap_add_name(ddir, &tstored, dirent(obj, z.mode))?;
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
        // TX_RENAME_EXCHANGE is OpenZFS 2.2's (a feature 2.1 and zfs-fuse do not know).
        crate::zfs_log::sync(os, None);
        return Ok(());
    }
    if let Some(t) = target {
        if flags & RENAME_NOREPLACE != 0 {
            return Err(posix(libc::EEXIST, format!("{dn} exists")));
        }
        let tstored = find(os, ddir, dname)?.map_or_else(|| dname.to_vec(), |(n, _)| n);
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
        os.zap_remove_name(ddir, &tstored)?;
        drop_link(os, fs, t, open(t))?;
    }
    os.zap_remove_name(sdir, &sstored)?;
    touch_dir(os, sdir, -1, if is_dir { -1 } else { 0 })?;
    os.zap_add_name(ddir, dn.0, dirent(obj, z.mode))?;
    touch_dir(os, ddir, 1, if is_dir { 1 } else { 0 })?;
    // zfs_link_create: every new entry makes its directory the object's parent.
    z.parent = ddir;
    z.ctime = now_ts();
    put(os, obj, &z)?;
    crate::zfs_log::rename(os, sdir, sname, ddir, dname);
    Ok(())
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
    let use_sa = is_sa(os, obj)?;
    // The hidden directory and the files in it carry ZFS_XATTR; the directory's mode is
    // S_IFDIR | S_ISVTX | 0777 (zfs_get_xattrdir).
    let d = mknode(os, use_sa, Some((obj, ZFS_XATTR)), S_IFDIR | 0o1777, z.uid, z.gid, 0, txg)?;
    z.xattr = d;
    put(os, obj, &z)?;
    Ok(Some(d))
}

/// The SA xattrs of a znode (its DXATTR nvlist; empty when it has none).
fn sa_xattrs(z: &ZnodeAttrs, obj: u64) -> Result<NvList> {
    zfs_znode::sa_xattr_nvlist(z, &|| format!("znode {obj}"))
}

fn dir_xattr(os: &mut ObjsetW, obj: u64, name: &[u8]) -> Result<Option<u64>> {
    match xattr_dir(os, obj, false, 0)? {
        Some(d) => Live(os).dir_lookup(d, name),
        None => Ok(None),
    }
}

/// Set (Some) or remove (None) xattr `name` in the SA nvlist of `obj` (zpl_xattr_set_sa);
/// EFBIG when the value or the nvlist is too big for the SA (the caller then uses the
/// directory). The DXATTR attribute stays once it exists, possibly an empty nvlist.
fn set_sa_xattr(os: &mut ObjsetW, obj: u64, name: &str, value: Option<&[u8]>) -> Result<()> {
    let mut z = get(os, obj)?;
    let mut nv = sa_xattrs(&z, obj)?;
    if let Some(v) = value {
        if v.len() > DXATTR_MAX_ENTRY_SIZE {
            return Err(posix(libc::EFBIG, "xattr value too big for the SA"));
        }
        if nv.encode_xdr().len() > DXATTR_MAX_SA_SIZE {
            return Err(posix(libc::EFBIG, "SA xattrs full"));
        }
    }
    nv.remove(name);
    if let Some(v) = value {
        nv.pairs.push((name.to_string(), NvValue::ByteArray(v.to_vec())));
    }
    z.dxattr = Some(nv.encode_xdr());
    z.ctime = now_ts();
    put(os, obj, &z)
}

fn set_dir_xattr(os: &mut ObjsetW, obj: u64, name: &[u8], value: &[u8], txg: u64) -> Result<()> {
    let d = xattr_dir(os, obj, true, txg)?.expect("created");
    let f = match Live(os).dir_lookup(d, name)? {
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

/// flags: XATTR_CREATE (1), XATTR_REPLACE (2). With xattr=sa on an SA znode the value goes
/// into the SA when it fits, else into the xattr directory; a stale copy in the other place
/// is removed (zpl_xattr_set).
pub fn setxattr(os: &mut ObjsetW, obj: u64, name: &[u8], value: &[u8], flags: i32, txg: u64) -> Result<()> {
    // What changes in the extended attribute directory is not logged (OpenZFS logs it with
    // TX_MKXATTR, which 2.1's replay alone knows): a record naming a directory no record made
    // would fail the replay.
    os.zil.quiet += 1;
    let r = setxattr_impl(os, obj, name, value, flags, txg);
    os.zil.quiet -= 1;
    // OpenZFS 2.1 logs no record for an xattr change: an fsync of the file after it syncs the
    // txg.
    crate::zfs_log::sync(os, Some(obj));
    r
}

fn setxattr_impl(os: &mut ObjsetW, obj: u64, name: &[u8], value: &[u8], flags: i32, txg: u64) -> Result<()> {
    let n = name_str(name)?;
    let z = get(os, obj)?;
    let in_sa = sa_xattrs(&z, obj)?.get(n).is_some();
    let in_dir = dir_xattr(os, obj, name)?.is_some();
    if flags & 1 != 0 && (in_sa || in_dir) {
        return Err(posix(libc::EEXIST, "attribute exists"));
    }
    if flags & 2 != 0 && !(in_sa || in_dir) {
        return Err(posix(libc::ENODATA, "no such attribute"));
    }
    if os.props.xattr_sa && is_sa(os, obj)? {
        match set_sa_xattr(os, obj, n, Some(value)) {
            Ok(()) => {
                if in_dir {
                    remove_dir_xattr(os, obj, name)?;
                }
                return Ok(());
            }
            Err(ZfsError::Posix(e, _)) if e == libc::EFBIG => {}
            Err(e) => return Err(e),
        }
    }
    set_dir_xattr(os, obj, name, value, txg)?;
    if in_sa {
        set_sa_xattr(os, obj, n, None)?;
    }
    Ok(())
}

fn remove_dir_xattr(os: &mut ObjsetW, obj: u64, name: &[u8]) -> Result<()> {
    let d = xattr_dir(os, obj, false, 0)?.ok_or_else(|| posix(libc::ENODATA, "no such attribute"))?;
    let fs = FsInfo { root: 0, delete_queue: 0, version: 0, recordsize: 0 };
    unlink(os, &fs, d, name, &|_| false)
}

pub fn removexattr(os: &mut ObjsetW, fs: &FsInfo, obj: u64, name: &[u8]) -> Result<()> {
    os.zil.quiet += 1;
    let r = removexattr_impl(os, fs, obj, name);
    os.zil.quiet -= 1;
    crate::zfs_log::sync(os, Some(obj));
    r
}

fn removexattr_impl(os: &mut ObjsetW, _fs: &FsInfo, obj: u64, name: &[u8]) -> Result<()> {
    let n = name_str(name)?;
    let z = get(os, obj)?;
    if sa_xattrs(&z, obj)?.get(n).is_some() {
        return set_sa_xattr(os, obj, n, None);
    }
    dir_xattr(os, obj, name)?.ok_or_else(|| posix(libc::ENODATA, "no such attribute"))?;
    remove_dir_xattr(os, obj, name)
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
            crate::zfs_log::truncate(os, obj, offset, end.min(z.size) - offset);
        }
    } else if mode == 0 || mode == KEEP_SIZE {
        if mode == 0 && end > z.size {
            grow_blocksize(os, obj, end, recordsize)?;
            z.size = end;
            crate::zfs_log::setattr(os, obj, None, None, None, Some(end), None, None);
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
        let d = oxzfs_format::znode::decode_znode_phys(&b, true).unwrap();
        assert_eq!((d.mode, d.size, d.gen, d.uid, d.gid, d.parent, d.links, d.atime, d.crtime), (z.mode, z.size, z.gen, z.uid, z.gid, z.parent, z.links, z.atime, z.crtime));
        let fx = include_bytes!("../../format/tests/data/fx-dnode-basic-blk2.bin");
        let bonus = &fx[9 * 512 + 192..9 * 512 + 192 + 264];
        assert_eq!(&b[176..264], &bonus[176..264], "the ACL of a 0644 file");
    }
}
