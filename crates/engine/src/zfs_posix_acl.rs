//! POSIX ACLs of file systems with acltype=posix, kept as OpenZFS on Linux keeps them
//! (zpl_xattr.c): the kernel's xattr form of an ACL (`posix_acl_to_xattr`: a version-2 header,
//! then one tag, permission and id per entry) stored as the extended attributes
//! `system.posix_acl_access` and `system.posix_acl_default`, beside the mode bits.
//!
//! The kernel checks access against them itself (a FUSE mount that speaks POSIX ACLs reads them
//! back through getxattr); what it leaves to the file system is done here, at the same points
//! OpenZFS's zpl layer does it: an access ACL that says no more than the mode is not kept but
//! folded into the mode, and one that says more sets the mode's group bits to its mask
//! (zpl_set_posix_acl); a new file takes its directory's default ACL, or the umask where there
//! is none (zpl_init_acl); a change of mode changes the ACL's owner, mask and other entries
//! (zpl_chmod_acl). None of these is an intent-log record (OpenZFS 2.1 logs no xattr change):
//! the file's next fsync syncs the txg.

use crate::dbuf::ObjsetW;
use crate::zfs_znode::{S_IFDIR, S_IFLNK, S_IFMT};
use crate::zpl::{Live, ZplRead};
use crate::zplw;
use crate::{Result, ZfsError};

pub const ACCESS: &[u8] = b"system.posix_acl_access";
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const XATTR_VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// The id of entries that name nobody (ACL_UNDEFINED_ID).
const UNDEFINED_ID: u32 = u32::MAX;

/// One entry: tag, permission bits (rwx), and the user or group a named entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

fn einval(what: &str) -> ZfsError {
    ZfsError::Posix(libc::EINVAL, format!("POSIX ACL: {what}"))
}

/// Whether `name` is one of the two ACL attributes.
pub fn is_acl_name(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

/// The entries of an ACL in xattr form (posix_acl_from_xattr), checked as posix_acl_valid
/// checks them: in tag order, named entries by id without repeats, each owner, group and
/// other entry once, a mask where there are named entries.
pub fn parse(v: &[u8]) -> Result<Vec<Entry>> {
    if v.len() < 4 || (v.len() - 4) % 8 != 0 {
        return Err(einval(&format!("{} bytes", v.len())));
    }
    if u32::from_le_bytes(v[..4].try_into().expect("4")) != XATTR_VERSION {
        return Err(einval("not version 2"));
    }
    let entries: Vec<Entry> = v[4..]
        .chunks_exact(8)
        .map(|c| Entry { tag: u16::from_le_bytes([c[0], c[1]]), perm: u16::from_le_bytes([c[2], c[3]]), id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]) })
        .collect();
    let order = |t: u16| [USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER].iter().position(|&x| x == t);
    let mut last: Option<(usize, u32)> = None;
    for e in &entries {
        let Some(rank) = order(e.tag) else { return Err(einval(&format!("tag {:#x}", e.tag))) };
        if e.perm & !7 != 0 {
            return Err(einval(&format!("permission {:#o}", e.perm)));
        }
        let named = matches!(e.tag, USER | GROUP);
        let key = (rank, if named { e.id } else { 0 });
        if last.is_some_and(|l| key <= l) {
            return Err(einval("entries out of order or repeated"));
        }
        last = Some(key);
    }
    let count = |t: u16| entries.iter().filter(|e| e.tag == t).count();
    if entries.is_empty() {
        return Ok(entries);
    }
    if count(USER_OBJ) != 1 || count(GROUP_OBJ) != 1 || count(OTHER) != 1 || (count(USER) + count(GROUP) > 0 && count(MASK) != 1) {
        return Err(einval("owner, group, other (and, with named entries, mask) each once"));
    }
    Ok(entries)
}

/// The xattr form of `entries` (posix_acl_to_xattr: entries that name nobody carry the
/// undefined id).
pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut v = XATTR_VERSION.to_le_bytes().to_vec();
    for e in entries {
        let id = if matches!(e.tag, USER | GROUP) { e.id } else { UNDEFINED_ID };
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// posix_acl_equiv_mode: the permission bits `entries` give (the mask as the group's where
/// there is one), and whether the mode says all the ACL says.
pub fn equiv_mode(entries: &[Entry]) -> (u64, bool) {
    let (mut mode, mut mask, mut equiv) = (0u64, None, true);
    for e in entries {
        let p = u64::from(e.perm & 7);
        match e.tag {
            USER_OBJ => mode |= p << 6,
            GROUP_OBJ => mode |= p << 3,
            OTHER => mode |= p,
            MASK => {
                mask = Some(p);
                equiv = false;
            }
            _ => equiv = false,
        }
    }
    if let Some(m) = mask {
        mode = (mode & !0o070) | m << 3;
    }
    (mode, equiv)
}

/// posix_acl_create_masq: `entries` (a default ACL) narrowed by the new file's permission
/// bits, and those bits narrowed by the ACL. Returns whether the ACL says more than the mode.
fn create_masq(entries: &mut [Entry], mode: &mut u64) -> bool {
    let mut m = *mode & 0o777;
    let mut not_equiv = false;
    for e in entries.iter_mut() {
        match e.tag {
            USER_OBJ => {
                e.perm &= ((m >> 6) & 7) as u16;
                m &= (u64::from(e.perm) << 6) | !0o700;
            }
            OTHER => {
                e.perm &= (m & 7) as u16;
                m &= u64::from(e.perm) | !0o007;
            }
            USER | GROUP | MASK => not_equiv = true,
            _ => {}
        }
    }
    let group = entries.iter().position(|e| e.tag == MASK).or_else(|| entries.iter().position(|e| e.tag == GROUP_OBJ));
    if let Some(i) = group {
        entries[i].perm &= ((m >> 3) & 7) as u16;
        m &= (u64::from(entries[i].perm) << 3) | !0o070;
    }
    *mode = (*mode & !0o777) | (m & 0o777);
    not_equiv
}

/// The ACL attribute `name` of `obj`, if it has one.
fn stored(os: &mut ObjsetW, obj: u64, name: &[u8]) -> Result<Option<Vec<Entry>>> {
    match Live(os).getxattr(obj, name) {
        Ok(v) => Ok(Some(parse(&v)?)),
        Err(e) if e.errno() == libc::ENODATA => Ok(None),
        Err(e) => Err(e),
    }
}

fn remove(os: &mut ObjsetW, fs: &zplw::FsInfo, obj: u64, name: &[u8]) -> Result<()> {
    match zplw::removexattr(os, fs, obj, name) {
        Err(e) if e.errno() == libc::ENODATA => Ok(()),
        r => r,
    }
}

/// setxattr (`value` Some) or removexattr of ACL attribute `name` (zpl_xattr_acl_set, then
/// zpl_set_posix_acl): refused where the file system keeps no POSIX ACLs (EOPNOTSUPP) and on a
/// symbolic link; a default ACL only on a directory (EACCES); an access ACL the mode says all
/// of is folded into the mode and not kept, another sets the mode's group bits to its mask.
#[allow(clippy::too_many_arguments)]
pub fn set(os: &mut ObjsetW, fs: &zplw::FsInfo, obj: u64, name: &[u8], value: Option<&[u8]>, flags: i32, txg: u64) -> Result<()> {
    if !os.props.posix_acl {
        return Err(ZfsError::Posix(libc::EOPNOTSUPP, "the file system keeps no POSIX ACLs (acltype)".into()));
    }
    let mut z = zplw::get(os, obj)?;
    if z.mode & S_IFMT == S_IFLNK {
        return Err(ZfsError::Posix(libc::EOPNOTSUPP, "no ACL on a symbolic link".into()));
    }
    let Some(value) = value else { return zplw::removexattr(os, fs, obj, name) };
    let entries = parse(value)?;
    if name == DEFAULT {
        if z.mode & S_IFMT != S_IFDIR {
            return if entries.is_empty() { Ok(()) } else { Err(ZfsError::Posix(libc::EACCES, "a default ACL is for a directory".into())) };
        }
        return zplw::setxattr(os, obj, name, &encode(&entries), flags, txg);
    }
    let (bits, equiv) = equiv_mode(&entries);
    if !entries.is_empty() && z.mode & 0o777 != bits {
        z.mode = (z.mode & !0o777) | bits;
        z.ctime = zplw::now_ts();
        zplw::put(os, obj, &z)?;
        crate::zfs_log::setattr(os, obj, Some(z.mode), None, None, None, None, None);
    }
    if equiv || entries.is_empty() {
        return remove(os, fs, obj, name);
    }
    zplw::setxattr(os, obj, name, &encode(&entries), flags, txg)
}

/// The permission bits a new object in directory `dir` starts with (zpl_init_acl): `mode`
/// narrowed by the directory's default ACL, or by `umask` where it has none (a symbolic link:
/// as asked). Returns the bits and the ACL to give the object afterwards (`inherit`).
pub fn create_mode(os: &mut ObjsetW, dir: u64, mode: u64, umask: u32) -> Result<(u64, Option<Vec<Entry>>)> {
    if mode & S_IFMT == S_IFLNK {
        return Ok((mode, None));
    }
    match stored(os, dir, DEFAULT)? {
        Some(d) if !d.is_empty() => {
            let mut acl = d;
            let mut m = mode;
            create_masq(&mut acl, &mut m);
            Ok((m, Some(acl)))
        }
        _ => Ok((mode & !u64::from(umask & 0o777), None)),
    }
}

/// After a create in `dir` whose bits `create_mode` gave with `acl`: a directory takes the
/// default ACL itself, and the object its access ACL where that says more than its mode.
pub fn inherit(os: &mut ObjsetW, dir: u64, obj: u64, acl: Option<Vec<Entry>>, txg: u64) -> Result<()> {
    let Some(acl) = acl else { return Ok(()) };
    if zplw::get(os, obj)?.mode & S_IFMT == S_IFDIR {
        let d = stored(os, dir, DEFAULT)?.unwrap_or_default();
        zplw::setxattr(os, obj, DEFAULT, &encode(&d), 0, txg)?;
    }
    if !equiv_mode(&acl).1 {
        zplw::setxattr(os, obj, ACCESS, &encode(&acl), 0, txg)?;
    }
    Ok(())
}

/// zpl_chmod_acl after a change of mode to `mode`: the access ACL's owner, mask (or group) and
/// other entries take the new bits (posix_acl_chmod_masq).
pub fn chmod(os: &mut ObjsetW, obj: u64, mode: u64, txg: u64) -> Result<()> {
    if !os.props.posix_acl {
        return Ok(());
    }
    let Some(mut acl) = stored(os, obj, ACCESS)? else { return Ok(()) };
    let has_mask = acl.iter().any(|e| e.tag == MASK);
    for e in acl.iter_mut() {
        match e.tag {
            USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
            OTHER => e.perm = (mode & 7) as u16,
            MASK => e.perm = ((mode >> 3) & 7) as u16,
            GROUP_OBJ if !has_mask => e.perm = ((mode >> 3) & 7) as u16,
            _ => {}
        }
    }
    zplw::setxattr(os, obj, ACCESS, &encode(&acl), 0, txg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    #[test]
    fn xattr_form_round_trips_and_is_checked() {
        let acl = vec![e(USER_OBJ, 7, UNDEFINED_ID), e(USER, 5, 1000), e(GROUP_OBJ, 5, UNDEFINED_ID), e(MASK, 5, UNDEFINED_ID), e(OTHER, 0, UNDEFINED_ID)];
        let v = encode(&acl);
        assert_eq!(v.len(), 4 + 8 * 5);
        assert_eq!(parse(&v).unwrap(), acl);
        // Named entries without a mask, entries out of order, a bad size: refused.
        assert!(parse(&encode(&[e(USER_OBJ, 7, 0), e(USER, 5, 1000), e(GROUP_OBJ, 5, 0), e(OTHER, 0, 0)])).is_err());
        assert!(parse(&encode(&[e(GROUP_OBJ, 5, 0), e(USER_OBJ, 7, 0), e(OTHER, 0, 0)])).is_err());
        assert!(parse(&v[..v.len() - 1]).is_err());
    }

    #[test]
    fn modes_as_the_kernel_computes_them() {
        let plain = [e(USER_OBJ, 6, 0), e(GROUP_OBJ, 4, 0), e(OTHER, 4, 0)];
        assert_eq!(equiv_mode(&plain), (0o644, true));
        let named = [e(USER_OBJ, 7, 0), e(USER, 7, 1000), e(GROUP_OBJ, 5, 0), e(MASK, 3, 0), e(OTHER, 1, 0)];
        assert_eq!(equiv_mode(&named), (0o731, false));
        // A default ACL narrowed by create(2)'s mode 0666, and the mode by the ACL.
        let mut acl = named.to_vec();
        let mut mode = 0o100666;
        assert!(create_masq(&mut acl, &mut mode));
        assert_eq!(mode, 0o100620);
        assert_eq!(acl.iter().map(|x| x.perm).collect::<Vec<_>>(), vec![6, 7, 5, 2, 0]);
    }
}
