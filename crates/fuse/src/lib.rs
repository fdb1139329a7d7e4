//! oxzfs-fuse: the FUSE adapter over the ZPL — one mount per filesystem dataset, read-only for
//! now, with `.zfs/snapshot/<name>/` serving each snapshot as OpenZFS's snapdir does
//! (`.zfs` is hidden from the root's listing, like snapdir=hidden, but can be looked up).
//!
//! Inode numbers: the dataset's root is FUSE inode 1 (and reported as 1 in every attribute and
//! directory entry); other files keep their ZFS object numbers (object 1 is the ZPL master node,
//! never a file, so the two never meet). Snapshot `k` (numbered from 1 in the order first
//! looked up) maps object `n` to `k << 48 | n`; the control directories `.zfs` and
//! `.zfs/snapshot` live above bit 62. Hard links therefore share an inode number, and a
//! snapshot's files never collide with the live ones. Snapshots are opened on first use and
//! kept.
//!
//! Requests arrive on fuser's session thread; everything that touches the pool (lookup,
//! getattr, readdir, read, readlink, xattrs, statfs) is handed to a small pool of worker
//! threads (fuser's replies are Send), so several requests proceed at once. Nothing changes
//! under a read-only mount, so the kernel caches attributes, entries, symlinks and pages for
//! long (FOPEN_KEEP_CACHE, long TTLs), and reads come in up to 1 MiB at a time.

pub mod rw;

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use oxzfs::pool::Pool;
use oxzfs::zpl::{Attr, Zfs, ZplRead};
use oxzfs::ZfsError;
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The FUSE attributes of a ZPL attribute set, as inode `ino`.
pub fn file_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
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
        rdev: fuse_rdev(a.rdev),
        blksize: a.blksize,
        flags: 0,
    }
}

/// FUSE inode of `.zfs`.
pub const CTL_ZFS: u64 = (1 << 62) + 1;
/// FUSE inode of `.zfs/snapshot`.
pub const CTL_SNAPDIR: u64 = (1 << 62) + 2;
/// Snapshot `k`'s objects live at `k << SNAP_SHIFT | object`.
pub const SNAP_SHIFT: u32 = 48;
const OBJ_MASK: u64 = (1 << SNAP_SHIFT) - 1;
const MIB: u32 = 1 << 20;


/// How a dataset is mounted.
#[derive(Clone, Debug)]
pub struct MountOpts {
    /// Let other users see the mount: None = as root, or when /etc/fuse.conf has user_allow_other.
    pub allow_other: Option<bool>,
    /// Threads answering requests.
    pub workers: usize,
    /// How long the kernel may keep attributes and entries (the data never changes read-only).
    pub ttl: Duration,
    /// Show `.zfs` in the root's listing (snapdir=visible).
    pub snapdir_visible: bool,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts { allow_other: None, workers: 4, ttl: Duration::from_secs(3600), snapdir_visible: false }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// What a FUSE inode names.
enum Node {
    /// Snapshot index (0 = the live filesystem), its ZPL, object number.
    Obj(usize, Arc<Zfs>, u64),
    CtlZfs,
    CtlSnapdir,
}

/// One entry of a listed directory, as kept for an open directory handle.
#[derive(Clone)]
struct Ent {
    ino: u64,
    kind: FileType,
    name: Vec<u8>,
}

#[derive(Default)]
struct Snaps {
    /// Names in order of first use; snapshot index = position + 1.
    names: Vec<String>,
    fs: HashMap<usize, Arc<Zfs>>,
}

/// The state shared by the session thread and the workers.
struct Inner {
    live: Arc<Zfs>,
    pool: Arc<Pool>,
    dataset: String,
    ttl: Duration,
    snapdir_visible: bool,
    snaps: Mutex<Snaps>,
    dirs: Mutex<HashMap<u64, Arc<Vec<Ent>>>>,
    next_fh: AtomicU64,
}

/// The fuser filesystem: forwards each request to a worker.
pub struct ZfsFuse {
    inner: Arc<Inner>,
    workers: SyncSender<Job>,
}

/// `(seconds, nanoseconds)` since the epoch as a SystemTime (also before 1970).
pub fn systime(t: (i64, u32)) -> SystemTime {
    let nanos = Duration::new(0, t.1.min(999_999_999));
    if t.0 >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.0 as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(t.0.unsigned_abs()) + nanos
    }
}

/// File type from the S_IFMT bits of a mode.
pub fn kind_of(mode: u32) -> FileType {
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

/// ZFS keeps a device number as `major << 32 | minor`; FUSE wants the kernel's 32-bit
/// encoding (`minor & 0xff | major << 8 | (minor & !0xff) << 12`).
pub fn fuse_rdev(rdev: u64) -> u32 {
    let major = (rdev >> 32) as u32;
    let minor = rdev as u32;
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// Map a FUSE inode number to (snapshot index, object); None for the control directories.
/// `root` is the live filesystem's root object.
pub fn split_ino(ino: u64, root: u64) -> Option<(usize, u64)> {
    match ino {
        1 => Some((0, root)),
        CTL_ZFS | CTL_SNAPDIR => None,
        _ if ino >> 62 != 0 => None,
        _ => Some(((ino >> SNAP_SHIFT) as usize, ino & OBJ_MASK)),
    }
}

/// Map (snapshot index, object) to a FUSE inode number; `root` is that filesystem's root object.
pub fn join_ino(k: usize, obj: u64, root: u64) -> u64 {
    if k == 0 {
        if obj == root {
            1
        } else {
            obj
        }
    } else {
        ((k as u64) << SNAP_SHIFT) | (obj & OBJ_MASK)
    }
}

fn ctl_attr(ino: u64, like: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: systime(like.crtime),
        mtime: systime(like.crtime),
        ctime: systime(like.crtime),
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

/// Whether /etc/fuse.conf lets non-root users ask for allow_other.
fn fuse_conf_allows_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|s| s.lines().any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other"))
        .unwrap_or(false)
}

impl Inner {
    fn snapshot_names(&self) -> Vec<String> {
        let prefix = format!("{}@", self.dataset);
        self.pool
            .datasets()
            .map(|l| l.into_iter().filter_map(|d| d.name.strip_prefix(&prefix).map(|s| s.to_string())).collect())
            .unwrap_or_default()
    }

    /// Index (from 1) and ZPL of snapshot `name`, opening it on first use.
    /// A snapshot destroyed since (on a read-write pool) is gone from `.zfs/snapshot` at once.
    fn snap(&self, name: &str) -> Result<(usize, Arc<Zfs>), ZfsError> {
        if name.is_empty() || name.contains('/') || !self.snapshot_names().iter().any(|n| n == name) {
            let mut s = self.snaps.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = s.names.iter().position(|n| n == name) {
                s.fs.remove(&(i + 1));
            }
            return Err(ZfsError::Posix(libc::ENOENT, format!("no snapshot {name}")));
        }
        // The pool keeps each snapshot's ZPL open (and forgets it when the snapshot is
        // destroyed): a snapshot made again under the same name is the new one here too.
        let fs = self.pool.open_fs(&format!("{}@{}", self.dataset, name))?;
        let mut s = self.snaps.lock().unwrap_or_else(|p| p.into_inner());
        // A snapshot made again under an old name is another one: a new index, so new inode
        // numbers (the kernel's cached pages of the old files are not taken for its files).
        let same = |i: usize| s.names[i] == name && s.fs.get(&(i + 1)).is_some_and(|f| Arc::ptr_eq(f, &fs));
        let found = (0..s.names.len()).rev().find(|&i| same(i));
        let idx = match found {
            Some(i) => i + 1,
            None => {
                if s.names.len() + 1 >= (1 << (62 - SNAP_SHIFT)) {
                    return Err(ZfsError::Posix(libc::ENFILE, "too many snapshots in use".into()));
                }
                s.names.push(name.to_string());
                s.names.len()
            }
        };
        s.fs.insert(idx, fs.clone());
        Ok((idx, fs))
    }

    fn node(&self, ino: u64) -> Result<Node, ZfsError> {
        match ino {
            CTL_ZFS => return Ok(Node::CtlZfs),
            CTL_SNAPDIR => return Ok(Node::CtlSnapdir),
            _ => {}
        }
        let Some((k, obj)) = split_ino(ino, self.live.root_ino()) else {
            return Err(ZfsError::Posix(libc::ENOENT, format!("inode {ino:#x}")));
        };
        if k == 0 {
            return Ok(Node::Obj(0, self.live.clone(), obj));
        }
        let s = self.snaps.lock().unwrap_or_else(|p| p.into_inner());
        let fs = s.fs.get(&k).cloned().ok_or_else(|| ZfsError::Posix(libc::ESTALE, format!("inode {ino:#x}")))?;
        Ok(Node::Obj(k, fs, obj))
    }

    fn fattr(&self, k: usize, fs: &Zfs, a: &Attr) -> FileAttr {
        file_attr(join_ino(k, a.ino, fs.root_ino()), a)
    }

    fn root_attr(&self) -> Attr {
        self.live.getattr(self.live.root_ino()).unwrap_or_default()
    }

    fn attr_of(&self, ino: u64) -> Result<FileAttr, ZfsError> {
        match self.node(ino)? {
            Node::CtlZfs => Ok(ctl_attr(CTL_ZFS, &self.root_attr())),
            Node::CtlSnapdir => Ok(ctl_attr(CTL_SNAPDIR, &self.root_attr())),
            Node::Obj(k, fs, obj) => Ok(self.fattr(k, &fs, &fs.getattr(obj)?)),
        }
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> Result<FileAttr, ZfsError> {
        match self.node(parent)? {
            Node::Obj(0, fs, obj) if obj == fs.root_ino() && name == b".zfs" => Ok(ctl_attr(CTL_ZFS, &self.root_attr())),
            Node::CtlZfs => match name {
                b"snapshot" => Ok(ctl_attr(CTL_SNAPDIR, &self.root_attr())),
                b"." => Ok(ctl_attr(CTL_ZFS, &self.root_attr())),
                b".." => self.attr_of(1),
                _ => Err(ZfsError::Posix(libc::ENOENT, String::new())),
            },
            Node::CtlSnapdir => match name {
                b"." => Ok(ctl_attr(CTL_SNAPDIR, &self.root_attr())),
                b".." => Ok(ctl_attr(CTL_ZFS, &self.root_attr())),
                _ => {
                    let name = std::str::from_utf8(name).map_err(|_| ZfsError::Posix(libc::ENOENT, String::new()))?;
                    let (k, fs) = self.snap(name)?;
                    Ok(self.fattr(k, &fs, &fs.getattr(fs.root_ino())?))
                }
            },
            Node::Obj(k, fs, obj) => Ok(self.fattr(k, &fs, &fs.lookup(obj, name)?)),
        }
    }

    /// The whole listing of a directory, "." and ".." first.
    fn list(&self, ino: u64) -> Result<Vec<Ent>, ZfsError> {
        let dir = |ino: u64, name: &[u8]| Ent { ino, kind: FileType::Directory, name: name.to_vec() };
        let mut out = Vec::new();
        match self.node(ino)? {
            Node::CtlZfs => {
                out.push(dir(CTL_ZFS, b"."));
                out.push(dir(1, b".."));
                out.push(dir(CTL_SNAPDIR, b"snapshot"));
            }
            Node::CtlSnapdir => {
                out.push(dir(CTL_SNAPDIR, b"."));
                out.push(dir(CTL_ZFS, b".."));
                for name in self.snapshot_names() {
                    if let Ok((k, fs)) = self.snap(&name) {
                        out.push(dir(join_ino(k, fs.root_ino(), fs.root_ino()), name.as_bytes()));
                    }
                }
            }
            Node::Obj(k, fs, obj) => {
                let list = fs.readdir(obj)?;
                let root = fs.root_ino();
                let parent = if obj == root {
                    if k > 0 {
                        CTL_SNAPDIR
                    } else {
                        1
                    }
                } else {
                    join_ino(k, fs.parent(obj).unwrap_or(obj), root)
                };
                out.push(dir(join_ino(k, obj, root), b"."));
                out.push(dir(parent, b".."));
                if k == 0 && obj == root && self.snapdir_visible {
                    out.push(dir(CTL_ZFS, b".zfs"));
                }
                out.reserve(list.len());
                for e in list {
                    out.push(Ent { ino: join_ino(k, e.ino, root), kind: kind_of(e.mode), name: e.name });
                }
            }
        }
        Ok(out)
    }

    /// The listing of an open directory handle (computed on its first read), or of `ino`.
    fn listing(&self, ino: u64, fh: u64) -> Result<Arc<Vec<Ent>>, ZfsError> {
        if let Some(l) = self.dirs.lock().unwrap_or_else(|p| p.into_inner()).get(&fh) {
            return Ok(l.clone());
        }
        let l = Arc::new(self.list(ino)?);
        if fh != 0 {
            self.dirs.lock().unwrap_or_else(|p| p.into_inner()).insert(fh, l.clone());
        }
        Ok(l)
    }

    fn read(&self, ino: u64, offset: i64, size: u32) -> Result<Vec<u8>, ZfsError> {
        match self.node(ino)? {
            Node::Obj(_, fs, obj) => fs.read(obj, offset.max(0) as u64, size as u64),
            _ => Err(ZfsError::Posix(libc::EISDIR, String::new())),
        }
    }
}

fn xattr_reply(reply: ReplyXattr, data: &[u8], size: u32) {
    if size == 0 {
        reply.size(data.len() as u32)
    } else if data.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE))
    } else {
        reply.data(data)
    }
}

impl ZfsFuse {
    pub fn new(live: Arc<Zfs>, pool: Arc<Pool>, dataset: String, opts: &MountOpts) -> ZfsFuse {
        let (tx, rx) = sync_channel::<Job>(1024);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..opts.workers.max(1) {
            let rx = rx.clone();
            let _ = std::thread::Builder::new().name(format!("oxzfs-fuse-{i}")).spawn(move || loop {
                let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                    Ok(j) => j,
                    Err(_) => return,
                };
                // A bug in one request must not take the mount down; the reply, dropped
                // unanswered, tells the kernel EIO.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            });
        }
        let inner = Inner {
            live,
            pool,
            dataset,
            ttl: opts.ttl,
            snapdir_visible: opts.snapdir_visible,
            snaps: Mutex::new(Snaps::default()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        };
        ZfsFuse { inner: Arc::new(inner), workers: tx }
    }

    /// Run `f` on a worker (or here, when the queue is full).
    fn spawn(&self, f: impl FnOnce(&Inner) + Send + 'static) {
        let inner = self.inner.clone();
        let job: Job = Box::new(move || f(&inner));
        match self.workers.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(j)) | Err(TrySendError::Disconnected(j)) => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(j));
            }
        }
    }
}

impl Filesystem for ZfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MIB);
        let _ = config.set_max_write(MIB);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        // Kernel capabilities asked for, each only if the kernel offers it.
        for cap in [InitFlags::FUSE_ASYNC_READ, InitFlags::FUSE_DO_READDIRPLUS, InitFlags::FUSE_READDIRPLUS_AUTO, InitFlags::FUSE_PARALLEL_DIROPS, InitFlags::FUSE_CACHE_SYMLINKS] {
            let _ = config.add_capabilities(cap);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = parent.0;
        let name = name.as_bytes().to_vec();
        self.spawn(move |i| match i.lookup(parent, &name) {
            Ok(a) => reply.entry(&i.ttl, &a, Generation(0)),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = ino.0;
        self.spawn(move |i| match i.attr_of(ino) {
            Ok(a) => reply.attr(&i.ttl, &a),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let ino = ino.0;
        self.spawn(move |i| match i.node(ino) {
            Ok(Node::Obj(_, fs, obj)) => match fs.readlink(obj) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            },
            Ok(_) => reply.error(Errno::from_i32(libc::EINVAL)),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn open(&self, _req: &Request, _ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let flags = flags.0;
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            reply.error(Errno::from_i32(libc::EROFS));
        } else {
            reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE);
        }
    }

    fn release(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let fh = fh.0;
        self.inner.dirs.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh);
        reply.ok();
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let ino = ino.0;
        let offset = offset as i64;
        self.spawn(move |i| match i.read(ino, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let ino = ino.0;
        let fh = fh.0;
        let offset = offset as i64;
        self.spawn(move |i| {
            let list = match i.listing(ino, fh) {
                Ok(l) => l,
                Err(e) => return reply.error(Errno::from_i32(e.errno())),
            };
            for (n, e) in list.iter().enumerate().skip(offset.max(0) as usize) {
                if reply.add(INodeNo(e.ino), (n + 1) as u64, e.kind, OsStr::from_bytes(&e.name)) {
                    break;
                }
            }
            reply.ok();
        });
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let ino = ino.0;
        let fh = fh.0;
        let offset = offset as i64;
        self.spawn(move |i| {
            let list = match i.listing(ino, fh) {
                Ok(l) => l,
                Err(e) => return reply.error(Errno::from_i32(e.errno())),
            };
            let dot = match i.attr_of(ino) {
                Ok(a) => a,
                Err(e) => return reply.error(Errno::from_i32(e.errno())),
            };
            for (n, e) in list.iter().enumerate().skip(offset.max(0) as usize) {
                // The kernel takes no entry for "." and ".."; give them the directory's attributes.
                let attr = if e.name == b"." || e.name == b".." {
                    FileAttr { ino: INodeNo(e.ino), ..dot }
                } else {
                    match i.attr_of(e.ino) {
                        Ok(a) => a,
                        // Listed but unreadable: give the name without an entry the kernel keeps.
                        Err(_) => FileAttr { ino: INodeNo(e.ino), kind: e.kind, nlink: 1, perm: 0, size: 0, blocks: 0, ..dot },
                    }
                };
                if reply.add(INodeNo(e.ino), (n + 1) as u64, OsStr::from_bytes(&e.name), &i.ttl, &attr, Generation(0)) {
                    break;
                }
            }
            reply.ok();
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(move |i| match i.live.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let ino = ino.0;
        let name = name.as_bytes().to_vec();
        self.spawn(move |i| match i.node(ino) {
            Ok(Node::Obj(_, fs, obj)) => match fs.getxattr(obj, &name) {
                Ok(v) => xattr_reply(reply, &v, size),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            },
            Ok(_) => reply.error(Errno::from_i32(libc::ENODATA)),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let ino = ino.0;
        self.spawn(move |i| {
            let names = match i.node(ino) {
                Ok(Node::Obj(_, fs, obj)) => match fs.listxattr(obj) {
                    Ok(n) => n,
                    Err(e) => return reply.error(Errno::from_i32(e.errno())),
                },
                Ok(_) => Vec::new(),
                Err(e) => return reply.error(Errno::from_i32(e.errno())),
            };
            let mut buf = Vec::new();
            for n in names {
                buf.extend_from_slice(&n);
                buf.push(0);
            }
            xattr_reply(reply, &buf, size)
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let mask = mask.bits();
        if mask & libc::W_OK != 0 {
            reply.error(Errno::from_i32(libc::EROFS))
        } else {
            reply.ok()
        }
    }
}

/// fuser's session settings: the mount options, who may use the mount (allow_other), and how
/// many threads read requests (each from its own clone of /dev/fuse, FUSE_DEV_IOC_CLONE).
pub(crate) fn session_config(mount_options: Vec<MountOption>, allow_other: bool, threads: usize) -> fuser::Config {
    let mut c = fuser::Config::default();
    c.mount_options = mount_options;
    c.acl = if allow_other { fuser::SessionACL::All } else { fuser::SessionACL::Owner };
    c.n_threads = Some(threads.max(1));
    c.clone_fd = threads > 1;
    c
}

/// A mounted dataset; unmounted (lazily, if busy) when dropped.
/// Let the kernel read ahead as much as one FUSE read carries (1 MiB). A FUSE mount's
/// backing device starts with the kernel's default of 128 KiB (the smaller of it and
/// max_readahead wins), so a sequential reader's pages would come in 128 KiB requests, each a
/// round trip. Set through the device's /sys/class/bdi/MAJOR:MINOR/read_ahead_kb, as an
/// administrator would; best effort (root only: otherwise the default stays).
pub(crate) fn widen_readahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(mountpoint) else { return };
    let dev = m.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let _ = std::fs::write(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"), format!("{}\n", MIB >> 10));
}

pub struct MountHandle {
    session: Option<fuser::BackgroundSession>,
    pub dataset: String,
    pub mountpoint: PathBuf,
}

/// Detach the mount at `mp`: umount(2) as root, else fusermount3 -u. `lazy` detaches even a
/// busy mount (MNT_DETACH / -z).
fn unmount_path(mp: &Path, lazy: bool) -> std::io::Result<()> {
    let c = CString::new(mp.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(mp).stdin(std::process::Stdio::null()).output()?;
    if out.status.success() {
        Ok(())
    } else if String::from_utf8_lossy(&out.stderr).contains("busy") {
        Err(std::io::Error::from_raw_os_error(libc::EBUSY))
    } else {
        Err(std::io::Error::new(std::io::ErrorKind::Other, String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

impl MountHandle {
    pub(crate) fn from_session(session: fuser::BackgroundSession, dataset: String, mountpoint: PathBuf) -> MountHandle {
        MountHandle { session: Some(session), dataset, mountpoint }
    }

    /// Unmount. A busy mount fails with EBUSY unless `force` (then it is detached lazily).
    /// On error the handle is given back, still mounted.
    pub fn unmount(mut self, force: bool) -> Result<(), (MountHandle, std::io::Error)> {
        if let Err(e) = unmount_path(&self.mountpoint, force) {
            if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
                return Err((self, e));
            }
            // Not mounted any more (someone ran umount): just end the session.
        }
        self.finish();
        Ok(())
    }

    fn finish(&mut self) {
        if let Some(s) = self.session.take() {
            // The session thread ends once the kernel drops the connection; fuser's join
            // unwraps the session's result, which must not take the caller down.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || s.join()));
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.session.is_some() {
            let _ = unmount_path(&self.mountpoint, true);
            self.finish();
        }
    }
}

/// Mount `fs` (dataset `dataset` of `pool`) read-only at `mountpoint`, creating the directory
/// if needed, served in the background until the handle is dropped or unmounted.
pub fn mount(fs: Arc<Zfs>, pool: Arc<Pool>, dataset: String, mountpoint: &Path, opts: &MountOpts) -> Result<MountHandle, ZfsError> {
    std::fs::create_dir_all(mountpoint).map_err(|e| {
        ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}': failed to create mountpoint '{}': {e}", mountpoint.display()))
    })?;
    let mut mo = vec![
        MountOption::RO,
        MountOption::FSName(dataset.clone()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::CUSTOM(format!("max_read={MIB}")),
    ];
    // fusermount3 takes the subtype itself; as root fuser calls mount(2), which ignores
    // MountOption::Subtype, so the kernel is told directly (it shows as type fuse.oxzfs).
    let root = unsafe { libc::geteuid() } == 0;
    mo.push(if root { MountOption::CUSTOM("subtype=oxzfs".into()) } else { MountOption::Subtype("oxzfs".into()) });
    let allow_other = opts.allow_other.unwrap_or_else(|| root || fuse_conf_allows_other());
    let fsimpl = ZfsFuse::new(fs, pool, dataset.clone(), opts);
    let session = fuser::spawn_mount(fsimpl, mountpoint, &session_config(mo, allow_other, 1)).map_err(|e| {
        ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}' on '{}': {e}", mountpoint.display()))
    })?;
    widen_readahead(mountpoint);
    Ok(MountHandle { session: Some(session), dataset, mountpoint: mountpoint.to_path_buf() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_mapping_round_trips() {
        let root = 4;
        assert_eq!(join_ino(0, root, root), 1);
        assert_eq!(split_ino(1, root), Some((0, root)));
        assert_eq!(join_ino(0, 17, root), 17);
        assert_eq!(split_ino(17, root), Some((0, 17)));
        let s = join_ino(3, 17, root);
        assert_eq!(s, 3 << 48 | 17);
        assert_eq!(split_ino(s, root), Some((3, 17)));
        // A snapshot's root is not renumbered to 1.
        assert_eq!(join_ino(2, root, root), 2 << 48 | 4);
        assert_eq!(split_ino(CTL_ZFS, root), None);
        assert_eq!(split_ino(CTL_SNAPDIR, root), None);
        assert_eq!(split_ino(1 << 63, root), None);
    }

    #[test]
    fn times_and_devices() {
        assert_eq!(systime((1, 5)), UNIX_EPOCH + Duration::new(1, 5));
        assert_eq!(systime((-2, 500_000_000)), UNIX_EPOCH - Duration::new(1, 500_000_000));
        // /dev/null: major 1, minor 3; a large minor spills above bit 20.
        assert_eq!(fuse_rdev(1 << 32 | 3), 0x103);
        assert_eq!(fuse_rdev(8 << 32 | 0x1234), 0x34 | 8 << 8 | 0x1200 << 12);
        assert_eq!(kind_of(0o120777), FileType::Symlink);
        assert_eq!(kind_of(0o100644), FileType::RegularFile);
        assert_eq!(kind_of(0o040755), FileType::Directory);
    }
}
