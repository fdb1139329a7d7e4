//! oxzfs-fuse: the FUSE adapter over the ZPL — one mount per filesystem dataset, read-only for
//! now, with `.zfs/snapshot/<name>/` serving each snapshot as OpenZFS's snapdir does.
//!
//! Inode numbers: the dataset's root is FUSE inode 1, other files keep their object numbers
//! (object 1 is the ZPL master node, never a file, so the two never meet). Snapshot `k`
//! (numbered from 1 in the order first looked up) maps object `n` to `k << 48 | n`; the
//! control directories `.zfs` and `.zfs/snapshot` live above bit 62. Hard links therefore
//! share an inode number, and a snapshot's files never collide with the live ones.
//!
//! Requests arrive on fuser's session thread; reads are handed to a small pool of worker
//! threads (replies are Send) so several proceed at once. Attributes and data are cached by
//! the kernel for long: nothing changes under a read-only mount.

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use oxzfs::pool::Pool;
use oxzfs::zpl::{Attr, Zfs};
use oxzfs::ZfsError;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TTL: Duration = Duration::from_secs(3600);
const CTL_ZFS: u64 = (1 << 62) + 1;
const CTL_SNAPDIR: u64 = (1 << 62) + 2;
const SNAP_SHIFT: u32 = 48;
const OBJ_MASK: u64 = (1 << SNAP_SHIFT) - 1;
const FOPEN_KEEP_CACHE: u32 = 1 << 1;
const FOPEN_CACHE_DIR: u32 = 1 << 3;
const READ_WORKERS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

struct Snaps {
    names: Vec<String>,
    fs: HashMap<usize, Arc<Zfs>>,
}

pub struct ZfsFuse {
    live: Arc<Zfs>,
    pool: Arc<Pool>,
    dataset: String,
    snaps: Mutex<Snaps>,
    workers: SyncSender<Job>,
}

/// What a FUSE inode names.
enum Node {
    Obj(usize, Arc<Zfs>, u64),
    CtlZfs,
    CtlSnapdir,
}

fn err(reply_err: impl FnOnce(i32), e: &ZfsError) {
    reply_err(e.errno());
}

fn systime(t: (i64, u32)) -> SystemTime {
    if t.0 >= 0 {
        UNIX_EPOCH + Duration::new(t.0 as u64, t.1.min(999_999_999))
    } else {
        UNIX_EPOCH - Duration::new((-t.0) as u64, 0)
    }
}

fn kind_of(mode: u32) -> FileType {
    match mode & 0o170000 {
        0o040000 => FileType::Directory,
        0o120000 => FileType::Symlink,
        0o020000 => FileType::CharDevice,
        0o060000 => FileType::BlockDevice,
        0o010000 => FileType::NamedPipe,
        0o140000 => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn dir_attr(ino: u64, like: &Attr) -> FileAttr {
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: systime(like.mtime),
        mtime: systime(like.mtime),
        ctime: systime(like.mtime),
        crtime: systime(like.crtime),
        kind: FileType::Directory,
        perm: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 512,
        flags: 0,
    }
}

impl ZfsFuse {
    pub fn new(live: Arc<Zfs>, pool: Arc<Pool>, dataset: String) -> ZfsFuse {
        let (tx, rx) = sync_channel::<Job>(256);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..READ_WORKERS {
            let rx = rx.clone();
            let _ = std::thread::Builder::new().name(format!("oxzfs-read-{i}")).spawn(move || loop {
                let job = match rx.lock().unwrap().recv() {
                    Ok(j) => j,
                    Err(_) => return,
                };
                job();
            });
        }
        ZfsFuse { live, pool, dataset, snaps: Mutex::new(Snaps { names: Vec::new(), fs: HashMap::new() }), workers: tx }
    }

    fn snapshot_names(&self) -> Vec<String> {
        let prefix = format!("{}@", self.dataset);
        self.pool
            .datasets()
            .map(|l| l.into_iter().filter_map(|d| d.name.strip_prefix(&prefix).map(|s| s.to_string())).collect())
            .unwrap_or_default()
    }

    /// Index (from 1) of snapshot `name`, opening it on first use.
    fn snap_index(&self, name: &str) -> Result<(usize, Arc<Zfs>), ZfsError> {
        let mut s = self.snaps.lock().unwrap();
        let idx = match s.names.iter().position(|n| n == name) {
            Some(i) => i + 1,
            None => {
                if !self.snapshot_names().iter().any(|n| n == name) {
                    return Err(ZfsError::NotFound(format!("snapshot {name}")));
                }
                s.names.push(name.to_string());
                s.names.len()
            }
        };
        if let Some(fs) = s.fs.get(&idx) {
            return Ok((idx, fs.clone()));
        }
        let fs = self.pool.open_fs(&format!("{}@{}", self.dataset, name))?;
        s.fs.insert(idx, fs.clone());
        Ok((idx, fs))
    }

    fn node(&self, ino: u64) -> Result<Node, ZfsError> {
        match ino {
            1 => return Ok(Node::Obj(0, self.live.clone(), self.live.root_ino())),
            CTL_ZFS => return Ok(Node::CtlZfs),
            CTL_SNAPDIR => return Ok(Node::CtlSnapdir),
            _ => {}
        }
        let k = (ino >> SNAP_SHIFT) as usize;
        let obj = ino & OBJ_MASK;
        if k == 0 {
            return Ok(Node::Obj(0, self.live.clone(), obj));
        }
        let s = self.snaps.lock().unwrap();
        let fs = s.fs.get(&k).cloned().ok_or_else(|| ZfsError::NotFound(format!("inode {ino:#x}")))?;
        Ok(Node::Obj(k, fs, obj))
    }

    fn ino_of(&self, k: usize, fs: &Zfs, obj: u64) -> u64 {
        if k == 0 {
            if obj == fs.root_ino() {
                1
            } else {
                obj
            }
        } else {
            ((k as u64) << SNAP_SHIFT) | obj
        }
    }

    fn fattr(&self, k: usize, fs: &Zfs, a: &Attr) -> FileAttr {
        FileAttr {
            ino: self.ino_of(k, fs, a.ino),
            size: a.size,
            blocks: a.blocks,
            atime: systime(a.atime),
            mtime: systime(a.mtime),
            ctime: systime(a.ctime),
            crtime: systime(a.crtime),
            kind: kind_of(a.mode),
            perm: (a.mode & 0o7777) as u16,
            nlink: a.nlink.min(u32::MAX as u64) as u32,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev as u32,
            blksize: a.blksize,
            flags: 0,
        }
    }

    fn root_attr(&self) -> Attr {
        self.live.getattr(self.live.root_ino()).unwrap_or_default()
    }
}

impl Filesystem for ZfsFuse {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name.as_bytes();
        match self.node(parent) {
            Ok(Node::Obj(0, fs, obj)) if obj == fs.root_ino() && name == b".zfs" => {
                reply.entry(&TTL, &dir_attr(CTL_ZFS, &self.root_attr()), 0);
            }
            Ok(Node::CtlZfs) => {
                if name == b"snapshot" {
                    reply.entry(&TTL, &dir_attr(CTL_SNAPDIR, &self.root_attr()), 0)
                } else {
                    reply.error(libc::ENOENT)
                }
            }
            Ok(Node::CtlSnapdir) => match self.snap_index(&String::from_utf8_lossy(name)) {
                Ok((k, fs)) => match fs.getattr(fs.root_ino()) {
                    Ok(a) => reply.entry(&TTL, &self.fattr(k, &fs, &a), 0),
                    Err(e) => err(|c| reply.error(c), &e),
                },
                Err(e) => err(|c| reply.error(c), &e),
            },
            Ok(Node::Obj(k, fs, obj)) => match fs.lookup(obj, name) {
                Ok(a) => reply.entry(&TTL, &self.fattr(k, &fs, &a), 0),
                Err(e) => err(|c| reply.error(c), &e),
            },
            Err(e) => err(|c| reply.error(c), &e),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.node(ino) {
            Ok(Node::CtlZfs) => reply.attr(&TTL, &dir_attr(CTL_ZFS, &self.root_attr())),
            Ok(Node::CtlSnapdir) => reply.attr(&TTL, &dir_attr(CTL_SNAPDIR, &self.root_attr())),
            Ok(Node::Obj(k, fs, obj)) => match fs.getattr(obj) {
                Ok(a) => reply.attr(&TTL, &self.fattr(k, &fs, &a)),
                Err(e) => err(|c| reply.error(c), &e),
            },
            Err(e) => err(|c| reply.error(c), &e),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.node(ino) {
            Ok(Node::Obj(_, fs, obj)) => match fs.readlink(obj) {
                Ok(t) => reply.data(&t),
                Err(e) => err(|c| reply.error(c), &e),
            },
            _ => reply.error(libc::EINVAL),
        }
    }

    fn open(&mut self, _req: &Request<'_>, _ino: u64, flags: i32, reply: ReplyOpen) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            reply.error(libc::EROFS);
        } else {
            reply.opened(0, FOPEN_KEEP_CACHE);
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        reply.opened(0, FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        match self.node(ino) {
            Ok(Node::Obj(_, fs, obj)) => {
                let job: Job = Box::new(move || match fs.read(obj, offset.max(0) as u64, size as u64) {
                    Ok(d) => reply.data(&d),
                    Err(e) => reply.error(e.errno()),
                });
                if let Err(e) = self.workers.try_send(job) {
                    // Queue full (or workers gone): serve it here.
                    match e {
                        std::sync::mpsc::TrySendError::Full(j) | std::sync::mpsc::TrySendError::Disconnected(j) => j(),
                    }
                }
            }
            Ok(_) => reply.error(libc::EISDIR),
            Err(e) => err(|c| reply.error(c), &e),
        }
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let mut entries: Vec<(u64, FileType, Vec<u8>)> = Vec::new();
        match self.node(ino) {
            Ok(Node::CtlZfs) => {
                entries.push((CTL_ZFS, FileType::Directory, b".".to_vec()));
                entries.push((1, FileType::Directory, b"..".to_vec()));
                entries.push((CTL_SNAPDIR, FileType::Directory, b"snapshot".to_vec()));
            }
            Ok(Node::CtlSnapdir) => {
                entries.push((CTL_SNAPDIR, FileType::Directory, b".".to_vec()));
                entries.push((CTL_ZFS, FileType::Directory, b"..".to_vec()));
                for name in self.snapshot_names() {
                    // Inode numbers of snapshot roots are assigned on lookup; readdir reports
                    // a stable placeholder in the control range.
                    let ino = match self.snap_index(&name) {
                        Ok((k, fs)) => self.ino_of(k, &fs, fs.root_ino()),
                        Err(_) => CTL_SNAPDIR,
                    };
                    entries.push((ino, FileType::Directory, name.into_bytes()));
                }
            }
            Ok(Node::Obj(k, fs, obj)) => {
                let list = match fs.readdir(obj) {
                    Ok(l) => l,
                    Err(e) => return err(|c| reply.error(c), &e),
                };
                let parent = if k > 0 && obj == fs.root_ino() {
                    CTL_SNAPDIR
                } else {
                    let p = fs.parent(obj).unwrap_or(obj);
                    self.ino_of(k, &fs, p)
                };
                entries.push((self.ino_of(k, &fs, obj), FileType::Directory, b".".to_vec()));
                entries.push((parent, FileType::Directory, b"..".to_vec()));
                for e in list {
                    entries.push((self.ino_of(k, &fs, e.ino), kind_of(e.mode), e.name));
                }
            }
            Err(e) => return err(|c| reply.error(c), &e),
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(ino, (i + 1) as i64, kind, OsStr::from_bytes(&name)) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        match self.live.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize),
            Err(e) => err(|c| reply.error(c), &e),
        }
    }

    fn getxattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.node(ino) {
            Ok(Node::Obj(_, fs, obj)) => match fs.getxattr(obj, name.as_bytes()) {
                Ok(v) => {
                    if size == 0 {
                        reply.size(v.len() as u32)
                    } else if v.len() > size as usize {
                        reply.error(libc::ERANGE)
                    } else {
                        reply.data(&v)
                    }
                }
                Err(e) => err(|c| reply.error(c), &e),
            },
            _ => reply.error(libc::ENODATA),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        let names = match self.node(ino) {
            Ok(Node::Obj(_, fs, obj)) => match fs.listxattr(obj) {
                Ok(n) => n,
                Err(e) => return err(|c| reply.error(c), &e),
            },
            _ => Vec::new(),
        };
        let mut buf = Vec::new();
        for n in names {
            buf.extend_from_slice(&n);
            buf.push(0);
        }
        if size == 0 {
            reply.size(buf.len() as u32)
        } else if buf.len() > size as usize {
            reply.error(libc::ERANGE)
        } else {
            reply.data(&buf)
        }
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, mask: i32, reply: fuser::ReplyEmpty) {
        if mask & libc::W_OK != 0 {
            reply.error(libc::EROFS)
        } else {
            reply.ok()
        }
    }
}

/// A mounted dataset; unmounts when dropped.
pub struct MountHandle {
    session: Option<fuser::BackgroundSession>,
    pub mountpoint: std::path::PathBuf,
}

impl MountHandle {
    pub fn unmount(mut self) {
        if let Some(s) = self.session.take() {
            s.join();
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            s.join();
        }
    }
}

/// Mount `dataset` of `pool` read-only at `mountpoint`.
pub fn mount(pool: Arc<Pool>, dataset: &str, mountpoint: &Path) -> Result<MountHandle, ZfsError> {
    let fs = pool.open_fs(dataset)?;
    std::fs::create_dir_all(mountpoint)
        .map_err(|e| ZfsError::Invalid(format!("cannot mount '{dataset}': cannot create '{}': {e}", mountpoint.display())))?;
    let mut opts = vec![
        MountOption::RO,
        MountOption::FSName(dataset.to_string()),
        MountOption::Subtype("oxzfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    if unsafe { libc::geteuid() } == 0 {
        opts.push(MountOption::AllowOther);
    }
    let fsimpl = ZfsFuse::new(fs, pool.clone(), dataset.to_string());
    let session = fuser::spawn_mount2(fsimpl, mountpoint, &opts)
        .map_err(|e| ZfsError::Invalid(format!("cannot mount '{dataset}' on '{}': {e}", mountpoint.display())))?;
    Ok(MountHandle { session: Some(session), mountpoint: mountpoint.to_path_buf() })
}
