//! A file's attribute flags and project id as Linux shows them (`lsattr`, `chattr`,
//! `zfs project`): the ioctls FS_IOC_GETFLAGS / FS_IOC_SETFLAGS and FS_IOC_FSGETXATTR /
//! FS_IOC_FSSETXATTR of zpl_file.c over the znode's flags (immutable, append-only, nodump,
//! project inherit) and its project id; and the rules those flags impose on every change.
//!
//! OpenZFS keeps the rules in two places: its own (zfs_write, zfs_setattr, zfs_zaccess_common,
//! zfs_zaccess_delete) and the kernel's, which sees S_IMMUTABLE and S_APPEND on the inode
//! (may_open, may_delete, vfs_link, notify_change, vfs_fallocate, xattr_permission). A FUSE
//! inode carries neither bit, so the kernel's checks are made here too: [`check`] takes a
//! user's operation and answers EPERM where a Linux OpenZFS mount would.
//!
//! A change of these flags is not an intent-log record of ours (OpenZFS logs it as TX_SETATTR
//! with an xvattr): an fsync after one syncs the txg.

use crate::dbuf::ObjsetW;
use crate::zfs_znode::{Attr, S_IFDIR, S_IFMT, S_IFREG};
use crate::zpl::{Live, ZplRead};
use crate::zplw::{self, FsInfo};
use crate::{Result, ZfsError};
use oxzfs_format::znode::pflags::{ZFS_APPENDONLY, ZFS_IMMUTABLE, ZFS_NODUMP, ZFS_NOUNLINK, ZFS_PROJID, ZFS_PROJINHERIT};
use oxzfs_format::sa::ZnodeAttrs;

/// The ioctl numbers (64-bit Linux): FS_IOC_GETFLAGS and FS_IOC_SETFLAGS (as `long`, though
/// the value passed is an int), their 32-bit forms, and FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR.
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
pub const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
pub const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// `struct fsxattr`: xflags, extsize, nextents, projid, cowextsize, 8 bytes of padding.
pub const FSXATTR_SIZE: usize = 28;

pub const FS_IMMUTABLE_FL: u32 = 0x10;
pub const FS_APPEND_FL: u32 = 0x20;
pub const FS_NODUMP_FL: u32 = 0x40;
pub const FS_PROJINHERIT_FL: u32 = 0x2000_0000;
pub const FS_XFLAG_IMMUTABLE: u32 = 0x8;
pub const FS_XFLAG_APPEND: u32 = 0x10;
pub const FS_XFLAG_NODUMP: u32 = 0x80;
pub const FS_XFLAG_PROJINHERIT: u32 = 0x200;

/// zpl_file.c's flags_lookup: each flag ZFS keeps, as FS_IOC_GETFLAGS and as
/// FS_IOC_FSGETXATTR name it.
const FLAGS: [(u64, u32, u32); 4] = [
    (ZFS_IMMUTABLE, FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE),
    (ZFS_APPENDONLY, FS_APPEND_FL, FS_XFLAG_APPEND),
    (ZFS_NODUMP, FS_NODUMP_FL, FS_XFLAG_NODUMP),
    (ZFS_PROJINHERIT, FS_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT),
];

/// The project id no file may take (ZFS_INVALID_PROJID, as the 32-bit id the ioctl carries).
const INVALID_PROJID: u32 = u32::MAX;

/// Who asks: the user id, and whether the caller is privileged (root stands in for
/// CAP_LINUX_IMMUTABLE and CAP_FOWNER, which a FUSE request does not carry).
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
}

impl Caller {
    fn privileged(&self) -> bool {
        self.uid == 0
    }
}

fn eperm(what: String) -> ZfsError {
    ZfsError::Posix(libc::EPERM, what)
}

/// FS_IOC_GETFLAGS's answer for a znode's flags (zpl_ioctl_getflags).
pub fn fs_flags(z: &ZnodeAttrs) -> u32 {
    FLAGS.iter().filter(|f| z.flags & f.0 != 0).fold(0, |a, f| a | f.1)
}

/// FS_IOC_FSGETXATTR's answer (zpl_ioctl_getxattr): the flags as xflags and the project id.
pub fn fsxattr(z: &ZnodeAttrs) -> [u8; FSXATTR_SIZE] {
    let xflags = FLAGS.iter().filter(|f| z.flags & f.0 != 0).fold(0, |a, f| a | f.2);
    let mut b = [0u8; FSXATTR_SIZE];
    b[..4].copy_from_slice(&xflags.to_le_bytes());
    b[12..16].copy_from_slice(&(z.projid as u32).to_le_bytes());
    b
}

/// FS_IOC_SETFLAGS (zpl_ioctl_setflags, then zfs_setattr).
pub fn set_flags(os: &mut ObjsetW, fs: &FsInfo, obj: u64, flags: u32, who: Caller) -> Result<Attr> {
    if flags & !(FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_PROJINHERIT_FL) != 0 {
        return Err(ZfsError::Posix(libc::EOPNOTSUPP, format!("flags {flags:#x}: not kept by ZFS")));
    }
    let want = FLAGS.iter().filter(|f| flags & f.1 != 0).fold(0, |a, f| a | f.0);
    apply(os, fs, obj, want, None, who)
}

/// FS_IOC_FSSETXATTR (zpl_ioctl_setxattr, then zfs_setattr): the flags and the project id in
/// `buf`, a `struct fsxattr`.
pub fn set_fsxattr(os: &mut ObjsetW, fs: &FsInfo, obj: u64, buf: &[u8], who: Caller) -> Result<Attr> {
    if buf.len() < 16 {
        return Err(ZfsError::Posix(libc::EINVAL, format!("struct fsxattr of {} bytes", buf.len())));
    }
    let xflags = u32::from_le_bytes(buf[..4].try_into().expect("4"));
    let projid = u32::from_le_bytes(buf[12..16].try_into().expect("4"));
    if projid == INVALID_PROJID {
        return Err(ZfsError::Posix(libc::EINVAL, format!("project id {projid}")));
    }
    if xflags & !(FS_XFLAG_IMMUTABLE | FS_XFLAG_APPEND | FS_XFLAG_NODUMP | FS_XFLAG_PROJINHERIT) != 0 {
        return Err(ZfsError::Posix(libc::EOPNOTSUPP, format!("xflags {xflags:#x}: not kept by ZFS")));
    }
    let want = FLAGS.iter().filter(|f| xflags & f.2 != 0).fold(0, |a, f| a | f.0);
    apply(os, fs, obj, want, Some(projid as u64), who)
}

/// zfs_setattr of the four flags (`want`: the ones to have) and, when given, the project id.
fn apply(os: &mut ObjsetW, fs: &FsInfo, obj: u64, want: u64, projid: Option<u64>, who: Caller) -> Result<Attr> {
    let mut z = zplw::get(os, obj)?;
    let kept = FLAGS.iter().fold(0, |a, f| a | f.0);
    let changed = (z.flags ^ want) & kept;
    if changed & (ZFS_IMMUTABLE | ZFS_APPENDONLY) != 0 && !who.privileged() {
        return Err(eperm(format!("object {obj}: only root changes the immutable and append-only flags")));
    }
    if u64::from(who.uid) != z.uid && !who.privileged() {
        return Err(ZfsError::Posix(libc::EACCES, format!("object {obj}: not the owner")));
    }
    let reg_or_dir = matches!(z.mode & S_IFMT, S_IFREG | S_IFDIR);
    // Project ids need project_quota and a regular file or directory (a set id is asked for
    // with every FS_IOC_FSSETXATTR, changed or not), with system attributes (sa_add_projid
    // would first move an old znode, or its xattr directory, to them: not done here).
    let is_sa = |os: &ObjsetW, o: u64| os.dnode(o).map(|d| d.bonustype == oxzfs_format::types::DMU_OT_SA);
    let projects = os.props.projects && is_sa(os, obj)? && (z.xattr == 0 || is_sa(os, z.xattr)?);
    if (projid.is_some() || changed & ZFS_PROJINHERIT != 0) && (!projects || !reg_or_dir) {
        return Err(ZfsError::Posix(libc::EOPNOTSUPP, format!("object {obj}: no project ids here")));
    }
    // Optional attributes need FUIDs (ZPL version 3).
    if fs.version < 3 {
        return Err(ZfsError::Posix(libc::EINVAL, format!("ZPL version {} keeps no file flags", fs.version)));
    }
    let projid = projid.filter(|&p| p != z.projid || z.flags & ZFS_PROJID == 0);
    if let Some(p) = projid {
        if crate::zfs_quota::over_project_quota(os, p) {
            return Err(ZfsError::Posix(libc::EDQUOT, format!("project {p}: quota exceeded")));
        }
    }
    // The ioctls' setattr asks for the optional attributes only (ATTR_XVATTR): no time changes.
    z.flags = (z.flags & !kept) | want;
    if let Some(p) = projid {
        z.projid = p;
        z.flags |= ZFS_PROJID;
    }
    zplw::put(os, obj, &z)?;
    // zfs_setattr_dir: the file's extended attribute directory and what it holds take the
    // same project.
    if let (Some(p), true) = (projid, z.xattr != 0) {
        let mut objs = vec![z.xattr];
        objs.extend(Live(os).dir_values(z.xattr)?.into_iter().map(|(_, v)| oxzfs_format::znode::dirent_obj(v)));
        for o in objs {
            let mut x = zplw::get(os, o)?;
            if x.projid != p || x.flags & ZFS_PROJID == 0 {
                x.projid = p;
                x.flags |= ZFS_PROJID;
                zplw::put(os, o, &x)?;
            }
        }
    }
    crate::zfs_log::sync(os, Some(obj));
    Ok(zplw::to_attr(os, obj, &z))
}

/// A user's operation, for [`check`].
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    /// Data written at `offset`.
    Write { obj: u64, offset: u64 },
    /// A change of attributes: of mode, owner or group (`owner`), size, times set to given
    /// values (`times_set`) or to now (`times_now`), set-ID bits taken away (`kill`: the
    /// kernel's removal of privileges, a mode change when there are bits to take).
    SetAttr { obj: u64, owner: bool, size: bool, times_set: bool, times_now: bool, kill: bool },
    /// fallocate(2) with `mode`.
    Fallocate { obj: u64, mode: i32 },
    /// A name made in `dir` (create, mkdir, mknod, symlink).
    Create { dir: u64 },
    /// `name` removed from `dir` (unlink, rmdir).
    Remove { dir: u64, name: &'a [u8] },
    /// A hard link to `obj` made in `dir`.
    Link { obj: u64, dir: u64 },
    /// `sname` in `sdir` renamed to `dname` in `ddir` (`exchange`: RENAME_EXCHANGE).
    Rename { sdir: u64, sname: &'a [u8], ddir: u64, dname: &'a [u8] },
    /// An extended attribute of `obj` set or removed.
    Xattr { obj: u64 },
}

/// The znode flags of `obj`.
fn flags_of(os: &mut ObjsetW, obj: u64) -> Result<u64> {
    Ok(zplw::get(os, obj)?.flags)
}

/// EPERM where a Linux OpenZFS mount refuses `op` for the flags of the files it touches
/// (immutable, append-only, no-unlink); Ok otherwise. Other errors (a missing name) are left to
/// the operation itself.
pub fn check(os: &mut ObjsetW, op: Op) -> Result<()> {
    let deny = |what: &str| Err(eperm(what.to_string()));
    match op {
        Op::Write { obj, offset } => {
            let z = zplw::get(os, obj)?;
            if z.flags & ZFS_IMMUTABLE != 0 || z.flags & ZFS_APPENDONLY != 0 && offset < z.size {
                return deny("immutable or append-only file");
            }
        }
        Op::SetAttr { obj, owner, size, times_set, times_now, kill } => {
            let z = zplw::get(os, obj)?;
            let frozen = z.flags & (ZFS_IMMUTABLE | ZFS_APPENDONLY) != 0;
            let immutable = z.flags & ZFS_IMMUTABLE != 0;
            if frozen && (owner || size || times_set) || immutable && (times_now || kill && z.mode & 0o6000 != 0) {
                return deny("immutable or append-only file");
            }
        }
        Op::Fallocate { obj, mode } => {
            let f = flags_of(os, obj)?;
            if f & ZFS_IMMUTABLE != 0 || f & ZFS_APPENDONLY != 0 && mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                return deny("immutable or append-only file");
            }
        }
        Op::Create { dir } => {
            if flags_of(os, dir)? & ZFS_IMMUTABLE != 0 {
                return deny("immutable directory");
            }
        }
        Op::Remove { dir, name } => may_delete(os, dir, name)?,
        Op::Link { obj, dir } => {
            if flags_of(os, obj)? & (ZFS_IMMUTABLE | ZFS_APPENDONLY) != 0 {
                return deny("immutable or append-only file");
            }
            if flags_of(os, dir)? & ZFS_IMMUTABLE != 0 {
                return deny("immutable directory");
            }
        }
        Op::Rename { sdir, sname, ddir, dname } => {
            may_delete(os, sdir, sname)?;
            if flags_of(os, ddir)? & ZFS_IMMUTABLE != 0 {
                return deny("immutable directory");
            }
            if Live(os).dir_lookup(ddir, dname)?.is_some() {
                may_delete(os, ddir, dname)?;
            }
        }
        Op::Xattr { obj } => {
            if flags_of(os, obj)? & (ZFS_IMMUTABLE | ZFS_APPENDONLY) != 0 {
                return deny("immutable or append-only file");
            }
        }
    }
    Ok(())
}

/// may_open (and zfs_open) of `obj` for writing (`append`: with O_APPEND) or with O_TRUNC:
/// EPERM for an immutable file, and for an append-only one unless appending. Ok(whether the
/// file is append-only).
pub fn check_open_write(os: &mut ObjsetW, obj: u64, append: bool, trunc: bool) -> Result<bool> {
    let f = flags_of(os, obj)?;
    if f & ZFS_IMMUTABLE != 0 {
        return Err(eperm("immutable file".into()));
    }
    if f & ZFS_APPENDONLY != 0 && (!append || trunc) {
        return Err(eperm("append-only file: open it with O_APPEND".into()));
    }
    Ok(f & ZFS_APPENDONLY != 0)
}

/// may_delete and zfs_zaccess_delete: a name leaves a directory that is neither immutable nor
/// append-only, and names a file that is not immutable, append-only or no-unlink.
fn may_delete(os: &mut ObjsetW, dir: u64, name: &[u8]) -> Result<()> {
    if flags_of(os, dir)? & (ZFS_IMMUTABLE | ZFS_APPENDONLY) != 0 {
        return Err(eperm("immutable or append-only directory".into()));
    }
    if let Some(obj) = Live(os).dir_lookup(dir, name)? {
        if flags_of(os, obj)? & (ZFS_IMMUTABLE | ZFS_APPENDONLY | ZFS_NOUNLINK) != 0 {
            return Err(eperm("immutable, append-only or no-unlink file".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_map_as_zpl_file_does() {
        let z = ZnodeAttrs { flags: ZFS_IMMUTABLE | ZFS_NODUMP | ZFS_PROJINHERIT | ZFS_PROJID | oxzfs_format::znode::pflags::ZFS_ARCHIVE, projid: 77, ..Default::default() };
        assert_eq!(fs_flags(&z), FS_IMMUTABLE_FL | FS_NODUMP_FL | FS_PROJINHERIT_FL);
        let x = fsxattr(&z);
        assert_eq!(u32::from_le_bytes(x[..4].try_into().unwrap()), FS_XFLAG_IMMUTABLE | FS_XFLAG_NODUMP | FS_XFLAG_PROJINHERIT);
        assert_eq!(u32::from_le_bytes(x[12..16].try_into().unwrap()), 77);
    }

    /// The ioctl numbers as <linux/fs.h>'s _IOR/_IOW macros make them.
    #[test]
    fn ioctl_numbers() {
        let ioc = |dir: u32, ty: u8, nr: u32, size: u32| dir << 30 | size << 16 | (ty as u32) << 8 | nr;
        assert_eq!(FS_IOC_GETFLAGS, ioc(2, b'f', 1, 8));
        assert_eq!(FS_IOC_SETFLAGS, ioc(1, b'f', 2, 8));
        assert_eq!(FS_IOC32_GETFLAGS, ioc(2, b'f', 1, 4));
        assert_eq!(FS_IOC_FSGETXATTR, ioc(2, b'X', 31, FSXATTR_SIZE as u32));
        assert_eq!(FS_IOC_FSSETXATTR, ioc(1, b'X', 32, FSXATTR_SIZE as u32));
    }
}
