//! zfs_log: the intent-log records of the ZPL's changes (OpenZFS's zfs_log.c). Each change of
//! `zplw`, once made in the open txg, hands its record to the objset's `Zilog`; an fsync
//! commits them (`PoolHandle::zil_commit`). Nothing is logged under sync=disabled, nor while a
//! log is replayed. A change no record describes (xattrs, ACLs, RENAME_EXCHANGE) is logged as
//! `Itx::Sync`: the fsync after it syncs the txg.

use crate::dbuf::ObjsetW;
use crate::zil::Itx;
use oxzfs_format::sa::ZnodeAttrs;
use oxzfs_format::zil::{self, LrBody, LrCreate};

const S_IFMT: u64 = 0o170000;
const S_IFDIR: u64 = 0o040000;
const S_IFLNK: u64 = 0o120000;

fn on(os: &ObjsetW) -> bool {
    os.props.sync != 2 && !os.zil.replaying && os.zil.quiet == 0
}

fn rec(os: &mut ObjsetW, txtype: u64, body: LrBody) {
    if on(os) {
        os.zil.itx(Itx::Rec { txtype, body });
    }
}

/// TX_CREATE, TX_MKDIR or TX_SYMLINK: `obj` named `name` in `dir`, as `z` says.
pub fn create(os: &mut ObjsetW, dir: u64, name: &[u8], obj: u64, z: &ZnodeAttrs, target: Option<&[u8]>) {
    if !on(os) {
        return;
    }
    let slots = os.dnode(obj).map(|d| d.slots() as u64).unwrap_or(1);
    let txtype = match z.mode & S_IFMT {
        S_IFDIR => zil::TX_MKDIR,
        S_IFLNK => zil::TX_SYMLINK,
        _ => zil::TX_CREATE,
    };
    let c = LrCreate {
        doid: dir,
        // LR_FOID_SET_SLOTS: dnode slots - 1 in the top byte.
        foid: obj | ((slots - 1) << 56),
        mode: z.mode,
        uid: z.uid,
        gid: z.gid,
        gen: z.gen,
        crtime: [z.crtime.0, z.crtime.1],
        rdev: z.rdev,
    };
    let link = if txtype == zil::TX_SYMLINK { Some(target.unwrap_or_default().to_vec()) } else { None };
    rec(os, txtype, LrBody::Create { c, name: name.to_vec(), link, extra: Vec::new() });
}

/// TX_REMOVE or TX_RMDIR.
pub fn remove(os: &mut ObjsetW, dir: u64, name: &[u8], is_dir: bool) {
    let t = if is_dir { zil::TX_RMDIR } else { zil::TX_REMOVE };
    rec(os, t, LrBody::Remove { doid: dir, name: name.to_vec() });
}

pub fn link(os: &mut ObjsetW, dir: u64, obj: u64, name: &[u8]) {
    rec(os, zil::TX_LINK, LrBody::Link { doid: dir, link_obj: obj, name: name.to_vec() });
}

pub fn rename(os: &mut ObjsetW, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8]) {
    rec(os, zil::TX_RENAME, LrBody::Rename { sdoid: sdir, tdoid: ddir, sname: sname.to_vec(), tname: dname.to_vec() });
}

/// TX_WRITE: the bytes are read from the file when the record is committed.
pub fn write(os: &mut ObjsetW, obj: u64, offset: u64, length: u64) {
    if on(os) && length > 0 {
        os.zil.itx(Itx::Write { foid: obj, offset, length });
    }
}

/// TX_TRUNCATE: free `[offset, offset + length)`; length 0: everything from `offset` on.
pub fn truncate(os: &mut ObjsetW, obj: u64, offset: u64, length: u64) {
    rec(os, zil::TX_TRUNCATE, LrBody::Truncate { foid: obj, offset, length });
}

/// TX_SETATTR with the mask of what changed (a size change is logged before as TX_TRUNCATE
/// when it shrinks, and in the mask).
#[allow(clippy::too_many_arguments)]
pub fn setattr(os: &mut ObjsetW, obj: u64, mode: Option<u64>, uid: Option<u64>, gid: Option<u64>, size: Option<u64>, atime: Option<(u64, u64)>, mtime: Option<(u64, u64)>) {
    let mut mask = 0;
    let mut f = |bit: u64, set: bool| {
        if set {
            mask |= bit;
        }
    };
    f(zil::AT_MODE, mode.is_some());
    f(zil::AT_UID, uid.is_some());
    f(zil::AT_GID, gid.is_some());
    f(zil::AT_SIZE, size.is_some());
    f(zil::AT_ATIME, atime.is_some());
    f(zil::AT_MTIME, mtime.is_some());
    if mask == 0 {
        return;
    }
    let (a, m) = (atime.unwrap_or_default(), mtime.unwrap_or_default());
    let body = LrBody::Setattr {
        foid: obj,
        mask,
        mode: mode.unwrap_or(0),
        uid: uid.unwrap_or(0),
        gid: gid.unwrap_or(0),
        size: size.unwrap_or(0),
        atime: [a.0, a.1],
        mtime: [m.0, m.1],
        xvattr: Vec::new(),
    };
    rec(os, zil::TX_SETATTR, body);
}

/// A change no record describes, of object `foid` (None: of the namespace): the next commit
/// that takes it syncs the txg.
pub fn sync(os: &mut ObjsetW, foid: Option<u64>) {
    if on(os) {
        os.zil.itx(Itx::Sync { foid });
    }
}
