//! The read-write FUSE adapter: one mount of a file system dataset of a pool imported for
//! writing. Every request takes the pool's write lock (see `oxzfs::txg`), runs the ZPL
//! operation on the open txg, and answers; the txg engine syncs in the background, and
//! fsync waits for a sync of everything dirty.
//!
//! Inode numbers: the dataset's root directory is FUSE inode 1; every other file keeps its
//! ZFS object number (object 1 is the ZPL master node, never a file).
//! Files unlinked while open stay on the delete queue until their last release.

use crate::kind_of;
use fuser::{
    FileAttr, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
};
use oxzfs::txg::PoolHandle;
use oxzfs::zpl::Attr;
use oxzfs::zplw::{self, SetAttr};
use oxzfs::ZfsError;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TTL: Duration = Duration::from_secs(1);
const MIB: u32 = 1 << 20;

pub struct RwFs {
    pool: Arc<PoolHandle>,
    dsobj: u64,
    root: u64,
    /// Open handles per object (for the delete queue).
    open: Arc<Mutex<HashMap<u64, u32>>>,
    /// Objects unlinked while open: their last release frees them.
    orphans: Arc<Mutex<std::collections::HashSet<u64>>>,
}

fn obj_of(root: u64, ino: u64) -> u64 {
    if ino == 1 {
        root
    } else {
        ino
    }
}

fn ino_of(root: u64, obj: u64) -> u64 {
    if obj == root {
        1
    } else {
        obj
    }
}

fn ts(t: TimeOrNow) -> (u64, u64) {
    let st = match t {
        TimeOrNow::Now => SystemTime::now(),
        TimeOrNow::SpecificTime(s) => s,
    };
    match st.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos() as u64),
        Err(_) => (0, 0),
    }
}

/// A Linux dev_t (as FUSE passes it) to ZFS's 64-bit major << 32 | minor.
fn zfs_rdev(rdev: u32) -> u64 {
    let major = ((rdev >> 8) & 0xfff) as u64;
    let minor = ((rdev & 0xff) | ((rdev >> 12) & 0xfff00)) as u64;
    major << 32 | minor
}

impl RwFs {
    fn fattr(&self, a: &Attr) -> FileAttr {
        crate::file_attr(ino_of(self.root, a.ino), a)
    }

    /// "Is this object open?" for unlink/rename; an open one is remembered as an orphan, to be
    /// freed at its last release.
    fn open_marker(&self) -> impl Fn(u64) -> bool {
        let (open, orphans) = (self.open.clone(), self.orphans.clone());
        move |o: u64| {
            let yes = open.lock().unwrap().get(&o).copied().unwrap_or(0) > 0;
            if yes {
                orphans.lock().unwrap().insert(o);
            }
            yes
        }
    }

    fn entry(&self, parent: u64, name: &OsStr, mode: u32, uid: u32, gid: u32, rdev: u64, target: Option<&[u8]>) -> Result<FileAttr, ZfsError> {
        let dir = obj_of(self.root, parent);
        let a = self.pool.with_fs_space(self.dsobj, 4096, |os, txg| {
            let o = zplw::create(os, dir, name.as_bytes(), mode as u64, uid as u64, gid as u64, rdev, target, txg)?;
            zplw::getattr(os, o)
        })?;
        Ok(self.fattr(&a))
    }
}

impl Filesystem for RwFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_readahead(MIB);
        let _ = config.set_max_write(MIB);
        Ok(())
    }

    fn destroy(&mut self) {
        let _ = self.pool.sync_now();
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let dir = obj_of(self.root, parent);
        let r = self.pool.with_fs_ro(self.dsobj, |os| match zplw::lookup(os, dir, name.as_bytes())? {
            Some(o) => zplw::getattr(os, o),
            None => Err(ZfsError::Posix(libc::ENOENT, String::new())),
        });
        match r {
            Ok(a) => reply.entry(&TTL, &self.fattr(&a), 0),
            // A negative entry (inode 0) the kernel may cache: every change of a name comes
            // through this mount, and the kernel drops the entry when it creates the name.
            Err(e) if e.errno() == libc::ENOENT => {
                let mut a = self.fattr(&Attr::default());
                a.ino = 0;
                reply.entry(&TTL, &a, 0)
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let obj = obj_of(self.root, ino);
        match self.pool.with_fs_ro(self.dsobj, |os| zplw::getattr(os, obj)) {
            Ok(a) => reply.attr(&TTL, &self.fattr(&a)),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let obj = obj_of(self.root, ino);
        let s = SetAttr {
            mode: mode.map(|m| m as u64),
            uid: uid.map(|u| u as u64),
            gid: gid.map(|g| g as u64),
            size,
            atime: atime.map(ts),
            mtime: mtime.map(ts),
        };
        match self.pool.with_fs(self.dsobj, |os, _| zplw::setattr(os, obj, &s, os.props.recordsize)) {
            Ok(a) => reply.attr(&TTL, &self.fattr(&a)),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let obj = obj_of(self.root, ino);
        match self.pool.with_fs_ro(self.dsobj, |os| zplw::readlink(os, obj)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn mknod(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        match self.entry(parent, name, mode & !umask, req.uid(), req.gid(), zfs_rdev(rdev), None) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn mkdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        match self.entry(parent, name, (mode & !umask & 0o7777) | 0o040000, req.uid(), req.gid(), 0, None) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn symlink(&mut self, req: &Request<'_>, parent: u64, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        match self.entry(parent, link_name, 0o120777, req.uid(), req.gid(), 0, Some(target.as_os_str().as_bytes())) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn create(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, _flags: i32, reply: ReplyCreate) {
        match self.entry(parent, name, (mode & !umask & 0o7777) | 0o100000, req.uid(), req.gid(), 0, None) {
            Ok(a) => {
                *self.open.lock().unwrap().entry(a.ino).or_insert(0) += 1;
                reply.created(&TTL, &a, 0, 0, 0)
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let dir = obj_of(self.root, parent);
        let is_open = self.open_marker();
        let r = self.pool.with_fs(self.dsobj, |os, _| {
            let fs = self.pool.fs_info(os)?;
            zplw::unlink(os, &fs, dir, name.as_bytes(), &is_open)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let dir = obj_of(self.root, parent);
        let r = self.pool.with_fs(self.dsobj, |os, _| {
            let fs = self.pool.fs_info(os)?;
            zplw::rmdir(os, &fs, dir, name.as_bytes())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn rename(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32, reply: ReplyEmpty) {
        let (s, d) = (obj_of(self.root, parent), obj_of(self.root, newparent));
        let is_open = self.open_marker();
        let r = self.pool.with_fs(self.dsobj, |os, _| {
            let fs = self.pool.fs_info(os)?;
            zplw::rename(os, &fs, s, name.as_bytes(), d, newname.as_bytes(), flags, &is_open)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn link(&mut self, _req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let (o, d) = (obj_of(self.root, ino), obj_of(self.root, newparent));
        match self.pool.with_fs_space(self.dsobj, 512, |os, _| zplw::link(os, o, d, newname.as_bytes())) {
            Ok(a) => reply.entry(&TTL, &self.fattr(&a), 0),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let obj = obj_of(self.root, ino);
        *self.open.lock().unwrap().entry(obj).or_insert(0) += 1;
        reply.opened(0, 0);
    }

    fn release(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _flags: i32, _lock: Option<u64>, _flush: bool, reply: ReplyEmpty) {
        let obj = obj_of(self.root, ino);
        let last = {
            let mut m = self.open.lock().unwrap();
            let c = m.entry(obj).or_insert(1);
            *c = c.saturating_sub(1);
            if *c == 0 {
                m.remove(&obj);
                true
            } else {
                false
            }
        };
        if last && self.orphans.lock().unwrap().remove(&obj) {
            let _ = self.pool.with_fs(self.dsobj, |os, _| {
                let fs = self.pool.fs_info(os)?;
                zplw::release(os, &fs, obj)
            });
        }
        reply.ok();
    }

    fn read(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, size: u32, _flags: i32, _lock: Option<u64>, reply: ReplyData) {
        let obj = obj_of(self.root, ino);
        let r = self.pool.with_fs_ro(self.dsobj, |os| {
            let d = zplw::read(os, obj, offset.max(0) as u64, size as u64)?;
            if os.props.atime && !os.props.readonly {
                zplw::touch_atime(os, obj)?;
            }
            Ok(d)
        });
        match r {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn write(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, data: &[u8], _wf: u32, _flags: i32, _lock: Option<u64>, reply: ReplyWrite) {
        let obj = obj_of(self.root, ino);
        match self.pool.with_fs_space(self.dsobj, data.len() as u64, |os, _| zplw::write(os, obj, offset.max(0) as u64, data, os.props.recordsize)) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn fallocate(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, length: i64, mode: i32, reply: ReplyEmpty) {
        match self.fallocate_impl(ino, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        match self.pool.sync_now() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        match self.pool.sync_now() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        reply.opened(0, 0);
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let dir = obj_of(self.root, ino);
        let r = self.pool.with_fs_ro(self.dsobj, |os| {
            let parent = zplw::get(os, dir)?.parent;
            Ok((parent, zplw::readdir(os, dir)?))
        });
        match r {
            Ok((parent, ents)) => {
                let mut all: Vec<(u64, fuser::FileType, Vec<u8>)> = vec![
                    (ino, fuser::FileType::Directory, b".".to_vec()),
                    (ino_of(self.root, if dir == self.root { dir } else { parent }), fuser::FileType::Directory, b"..".to_vec()),
                ];
                for e in ents {
                    all.push((ino_of(self.root, e.ino), kind_of(e.mode), e.name));
                }
                for (i, (ino, kind, name)) in all.into_iter().enumerate().skip(offset.max(0) as usize) {
                    if reply.add(ino, (i + 1) as i64, kind, OsStr::from_bytes(&name)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        // zfs_statvfs's numbers (the kernel sets f_fsid and f_type for FUSE mounts itself).
        match self.pool.statfs(self.dsobj) {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize as u32, s.namemax, s.bsize as u32),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn setxattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        let obj = obj_of(self.root, ino);
        match self.pool.with_fs_space(self.dsobj, value.len() as u64 + 4096, |os, txg| zplw::setxattr(os, obj, name.as_bytes(), value, flags, txg)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn getxattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        let obj = obj_of(self.root, ino);
        match self.pool.with_fs_ro(self.dsobj, |os| zplw::getxattr(os, obj, name.as_bytes())) {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        let obj = obj_of(self.root, ino);
        match self.pool.with_fs_ro(self.dsobj, |os| zplw::listxattr(os, obj)) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                xattr_reply(reply, &buf, size)
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let obj = obj_of(self.root, ino);
        let r = self.pool.with_fs(self.dsobj, |os, _| {
            let fs = self.pool.fs_info(os)?;
            zplw::removexattr(os, &fs, obj, name.as_bytes())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }
}

impl RwFs {
    fn fallocate_impl(&self, ino: u64, offset: i64, length: i64, mode: i32) -> Result<(), ZfsError> {
        let obj = obj_of(self.root, ino);
        let need = if mode & 0x02 != 0 { 0 } else { length.max(0) as u64 };
        self.pool.with_fs_space(self.dsobj, need, |os, _| zplw::fallocate(os, obj, offset.max(0) as u64, length.max(0) as u64, mode, os.props.recordsize))
    }
}

fn xattr_reply(reply: ReplyXattr, data: &[u8], size: u32) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(libc::ERANGE);
    } else {
        reply.data(data);
    }
}

/// Mount dataset `dsobj` of a pool imported for writing at `mountpoint`.
pub fn mount_rw(pool: Arc<PoolHandle>, dsobj: u64, dataset: String, mountpoint: &Path) -> Result<crate::MountHandle, ZfsError> {
    std::fs::create_dir_all(mountpoint)
        .map_err(|e| ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}': failed to create mountpoint '{}': {e}", mountpoint.display())))?;
    let root = pool.with_fs(dsobj, |os, _| Ok(pool.fs_info(os)?.root))?;
    let fs = RwFs { pool, dsobj, root, open: Arc::new(Mutex::new(HashMap::new())), orphans: Arc::new(Mutex::new(Default::default())) };
    let root_user = unsafe { libc::geteuid() } == 0;
    let mut mo = vec![
        MountOption::RW,
        MountOption::FSName(dataset.clone()),
        MountOption::DefaultPermissions,
        MountOption::CUSTOM(format!("max_read={MIB}")),
    ];
    mo.push(if root_user { MountOption::CUSTOM("subtype=oxzfs".into()) } else { MountOption::Subtype("oxzfs".into()) });
    if root_user {
        mo.push(MountOption::AllowOther);
    }
    let session = fuser::spawn_mount2(fs, mountpoint, &mo)
        .map_err(|e| ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}' on '{}': {e}", mountpoint.display())))?;
    Ok(crate::MountHandle::from_session(session, dataset, mountpoint.to_path_buf()))
}
