//! The read-write FUSE adapter: one mount of a file system dataset of a pool imported for
//! writing. Several session threads read requests (fuser's event loops, each on a clone of
//! /dev/fuse). A session thread answers a request itself when the pool lock is free and
//! nothing is queued before it, and otherwise hands it to a worker: changes to
//! the worker of their inode (the file's, or the directory's for names), so the changes to one
//! inode keep the kernel's order; reads (lookup, getattr, read, readdir, xattrs) to a pool of
//! readers. A change runs in the open txg under the pool's write lock (see `oxzfs::txg`); a
//! read holds the lock only to see what is dirty and to take the synced tree, then reads the
//! blocks without it. Reads go through `zpl::Live` (the ZPL's one read path, which the
//! read-only adapter takes over `zpl::Zfs`), changes through `zplw`. Each change is logged for the intent log (`oxzfs::zfs_log`); fsync
//! commits the log (`PoolHandle::zil_commit`), and under sync=always every change does.
//!
//! Round trips are what a metadata operation costs here: readdirplus hands the kernel every
//! listed entry's attributes (a walk needs no lookups), flush is declined once (ENOSYS) so
//! close(2) sends none. Sequential reads: the kernel reads ahead 1 MiB per request; a read of
//! a clean object that continues a stream asks prefetch workers for the next window of blocks
//! (dmu_zfetch), which land in the ARC while the kernel copies this one.
//!
//! Lock order: the pool's (`PoolHandle`) → `open` → `orphans` (leaves); `streams` is a leaf
//! taken without the pool's; a prefetch worker takes the pool's alone, briefly.
//!
//! Inode numbers: the dataset's root directory is FUSE inode 1; every other file keeps its
//! ZFS object number (object 1 is the ZPL master node, never a file).
//! Files unlinked while open stay on the delete queue until their last release.

use crate::kind_of;
use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use oxzfs::txg::PoolHandle;
use oxzfs::zpl::{Attr, Live, ZplRead};
use oxzfs::zplw::{self, SetAttr};
use oxzfs::ZfsError;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use oxzfs::dbuf::ReadLater;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TTL: Duration = Duration::from_secs(1);
/// How long the kernel keeps a name → inode entry (also a negative one) without asking again.
/// Every change of a name comes through this mount and the kernel's dentry cache follows it
/// (create, unlink, rename, link); a rollback or receive unmounts first. Attributes keep the
/// short TTL: st_blocks changes at each txg sync, not through a request.
const ENTRY_TTL: Duration = Duration::from_secs(60);
const MIB: u32 = 1 << 20;
/// The kernel's writeback cache (writes gathered in the page cache, the kernel keeping size,
/// mtime and ctime itself while it holds dirty pages) stays off: with it, pjdfstest's
/// unlink::update_ctime_success, rename::to_multiply_linked and open::open_trunc fail (the
/// kernel's cached times win over the ctime/mtime the file system sets on those changes).
/// Big writes (1 MiB requests) do not need it.
const WRITEBACK_CACHE: bool = false;

/// The state every request shares (the workers hold it).
pub struct Inner {
    pool: Arc<PoolHandle>,
    dsobj: u64,
    root: u64,
    /// Open handles per object (for the delete queue).
    open: Arc<Mutex<HashMap<u64, u32>>>,
    /// Objects unlinked while open: their last release frees them.
    orphans: Arc<Mutex<std::collections::HashSet<u64>>>,
    /// Sequential read streams per object, for prefetch.
    streams: Mutex<HashMap<u64, Stream>>,
    /// Blocks to read ahead into the ARC (full queue: the prefetch is skipped, never waited for).
    prefetch: SyncSender<Prefetch>,
    /// The ZPL's fixed objects of the file system, read (and its delete queue drained) at
    /// mount.
    fs_info: Mutex<Option<zplw::FsInfo>>,
}

/// A file being read sequentially (dmu_zfetch's stream): where the next read should start,
/// how far ahead blocks were asked for, and how far ahead the next ask goes (it doubles with
/// each sequential read, up to `PREFETCH_MAX`).
#[derive(Default)]
struct Stream {
    next: u64,
    ahead: u64,
    window: u64,
}

/// One block to read ahead, from the synced tree a clean read planned with.
struct Prefetch {
    pool: Arc<PoolHandle>,
    dsobj: u64,
    ro: Arc<oxzfs::dmu::Objset>,
    dn: Arc<oxzfs_format::dnode::DnodePhys>,
    blkid: u64,
    asked: std::time::Instant,
}

const PREFETCH_WORKERS: usize = 4;
const PREFETCH_QUEUE: usize = 256;
/// The first window and the largest (zfetch_max_distance is 8 MiB).
const PREFETCH_MIN: u64 = 1 << 20;
const PREFETCH_MAX: u64 = 8 << 20;
/// A read ahead still queued after this long is dropped: its blocks may have been freed and
/// reused since (a stale block would only fail its checksum and be ignored, but costs a read).
const PREFETCH_STALE: Duration = Duration::from_millis(200);
/// How far from the last read's end a read may start and still count as sequential (reads of
/// one stream may arrive out of order from the kernel's parallel readahead).
const PREFETCH_SLACK: u64 = 2 << 20;

/// zfs_prefetch_disable: OXZFS_PREFETCH_DISABLE=1 in the daemon's environment turns read-ahead off.
fn prefetch_disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var("OXZFS_PREFETCH_DISABLE").map_or(false, |v| v == "1"))
}

/// A prefetch worker: read blocks into the ARC; errors are ignored (the demand read that
/// follows reports them).
fn prefetcher(name: String, rx: Arc<Mutex<Receiver<Prefetch>>>) {
    let _ = std::thread::Builder::new().name(name).spawn(move || loop {
        let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        // Only from the dataset's current synced tree: a block a later sync replaced stays
        // allocated for two txgs only (deferred frees), and read after its space was reused it
        // would fail its checksum and count as a device error.
        if job.asked.elapsed() > PREFETCH_STALE || !job.pool.with_fs_ro(job.dsobj, |os| Ok(os.bp == job.ro.bp)).unwrap_or(false) {
            continue;
        }
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Ok(Some(bp)) = job.ro.block_pointer(&job.dn, 0, job.blkid) {
                if !bp.is_hole() && !bp.embedded {
                    let _ = job.ro.spa.read_bp_prefetch(&bp, job.dsobj);
                }
            }
        }));
    });
}

type Job = Box<dyn FnOnce(&Inner) + Send + 'static>;

/// The mount: requests that may block run on workers. Changes go to the worker chosen by
/// their inode (the file's, or the directory's for names), so changes to one inode keep the
/// order the kernel sent them in; reads go to a shared pool of readers.
pub struct RwFs {
    inner: Arc<Inner>,
    ordered: Vec<SyncSender<Job>>,
    /// Jobs queued or running per change worker (only session threads add to them).
    pending: Vec<Arc<AtomicUsize>>,
    readers: SyncSender<Job>,
    /// Session threads (see `session_threads`).
    threads: usize,
    /// `.zfs/snapshot`: the read-only view of the dataset's snapshots (None when it cannot be
    /// opened). Its inodes (control directories, snapshot objects) are all at or above 2^48,
    /// where the live file system has no objects, so each request goes to one side or the other.
    snaps: Option<crate::ZfsFuse>,
}

/// Threads reading requests from /dev/fuse, each on its own clone of the device
/// (FUSE_DEV_IOC_CLONE): one per CPU, at most 4. Measured on 2 CPUs (bench/results/
/// 2026-11-25-transport.md): against one thread, two make a lone creator 36% faster and four
/// fsyncing writers 58% faster, four creators 17% slower (more threads than CPUs contend for
/// the pool lock). `OXZFS_FUSE_THREADS` overrides the number (for benchmarks).
const SESSION_THREADS_MAX: usize = 4;

fn session_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::env::var("OXZFS_FUSE_THREADS").ok().and_then(|v| v.parse().ok()).filter(|&n| (1..=64).contains(&n)).unwrap_or(cpus.clamp(1, SESSION_THREADS_MAX))
}
/// Workers that take changes (each its own queue) and reads (one queue for all).
const CHANGE_WORKERS: usize = 4;
const READ_WORKERS: usize = 4;
/// Reads up to this size may run on the session thread (see `read`).
const SMALL_READ: u32 = 32 << 10;
/// Requests queued per queue before the session thread waits (bounded memory).
const QUEUE_DEPTH: usize = 64;

/// Who sent a request, for the kernel's rule on set-group-ID bits: a caller that is neither
/// privileged (root stands in for CAP_FSETID, which the request does not carry) nor in the
/// file's group takes S_ISGID away with its write.
#[derive(Clone, Copy)]
struct Caller {
    uid: u32,
    gid: u32,
    pid: u32,
}

impl Caller {
    fn of(req: &Request) -> Caller {
        Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
    }

    /// Whether the caller is privileged or in group `gid`: its own group, else one of its
    /// supplementary groups (read from /proc only here, when a set-group-ID file is at stake).
    fn in_group(&self, gid: u64) -> bool {
        if self.uid == 0 || u64::from(self.gid) == gid {
            return true;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) else { return false };
        status.lines().find_map(|l| l.strip_prefix("Groups:")).is_some_and(|g| g.split_whitespace().any(|x| x.parse::<u64>() == Ok(gid)))
    }
}

/// The prefetcher's counters, as OpenZFS's zfetchstats kstat names them: reads that continued
/// a stream (hits), reads that did not (misses), and times the stream table was full
/// (max_streams).
pub static ZFETCH_STATS: [std::sync::atomic::AtomicU64; 3] = [const { std::sync::atomic::AtomicU64::new(0) }; 3];

/// `ZFETCH_STATS` as the kstat's rows.
pub fn zfetch_rows() -> Vec<(&'static str, u64)> {
    ["hits", "misses", "max_streams"].into_iter().zip(ZFETCH_STATS.iter().map(|a| a.load(std::sync::atomic::Ordering::Relaxed))).collect()
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

/// A worker: run jobs until the mount goes away; a bug in one request must not take the mount
/// down (the reply, dropped unanswered, tells the kernel EIO).
fn worker(name: String, inner: Arc<Inner>, rx: Arc<Mutex<Receiver<Job>>>) {
    let _ = std::thread::Builder::new().name(name).spawn(move || loop {
        let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&inner)));
    });
}

impl RwFs {
    fn new(inner: Inner) -> RwFs {
        let inner = Arc::new(inner);
        let mut ordered = Vec::new();
        let mut pending = Vec::new();
        for i in 0..CHANGE_WORKERS {
            let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
            worker(format!("oxzfs-rw-{i}"), inner.clone(), Arc::new(Mutex::new(rx)));
            ordered.push(tx);
            pending.push(Arc::new(AtomicUsize::new(0)));
        }
        let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..READ_WORKERS {
            worker(format!("oxzfs-rd-{i}"), inner.clone(), rx.clone());
        }
        RwFs { inner, ordered, pending, readers: tx, threads: session_threads(), snaps: None }
    }

    /// The snapshot view, when `ino` is one of its inodes (`.zfs`, `.zfs/snapshot`, objects of
    /// snapshots).
    fn snap_ino(&self, ino: u64) -> Option<&crate::ZfsFuse> {
        if ino >> crate::SNAP_SHIFT != 0 {
            self.snaps.as_ref()
        } else {
            None
        }
    }

    /// Run a job here, on the session thread (a panic answers EIO through the dropped reply).
    fn inline(&self, f: impl FnOnce(&Inner)) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&self.inner)));
    }

    /// Run a change on the worker of inode `ino` — or here, when that worker has nothing
    /// queued (so the order holds) and the pool lock is free (the change will not wait): a
    /// lone writer pays no thread hand-off.
    fn change(&self, ino: u64, f: impl FnOnce(&Inner) + Send + 'static) {
        match self.change_inline(ino) {
            None => self.inline(f),
            Some(i) => self.queue(i, f),
        }
    }

    /// Whether a change to inode `ino` may run here now (None), else the worker it goes to.
    fn change_inline(&self, ino: u64) -> Option<usize> {
        let i = (ino as usize) % self.ordered.len();
        if self.pending[i].load(Ordering::Acquire) == 0 && self.inner.pool.idle() {
            return None;
        }
        Some(i)
    }

    /// Run a change that may wait long (fsync: the log's write and flush) here when nothing is
    /// queued for its inode's worker — the other session threads go on reading requests
    /// meanwhile, and a lone fsync pays no thread hand-off — else behind what is queued.
    fn change_waiting(&self, ino: u64, f: impl FnOnce(&Inner) + Send + 'static) {
        let i = (ino as usize) % self.ordered.len();
        if self.threads > 1 && self.pending[i].load(Ordering::Acquire) == 0 {
            return self.inline(f);
        }
        self.queue(i, f);
    }

    fn queue(&self, i: usize, f: impl FnOnce(&Inner) + Send + 'static) {
        let pending = self.pending[i].clone();
        pending.fetch_add(1, Ordering::AcqRel);
        let job: Job = Box::new(move |s: &Inner| {
            struct Done(Arc<AtomicUsize>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::AcqRel);
                }
            }
            let _done = Done(pending);
            f(s)
        });
        if let Err(e) = self.ordered[i].send(job) {
            (e.0)(&self.inner);
        }
    }

    /// Run a read on any reader — or here, when the pool lock is free.
    fn read_op(&self, f: impl FnOnce(&Inner) + Send + 'static) {
        if self.inner.pool.idle() {
            return self.inline(f);
        }
        if let Err(e) = self.readers.send(Box::new(f)) {
            (e.0)(&self.inner);
        }
    }
}

impl Inner {
    fn fattr(&self, a: &Attr) -> FileAttr {
        crate::file_attr(ino_of(self.root, a.ino), a)
    }

    /// "Is this object open?" for unlink/rename; an open one is remembered as an orphan, to be
    /// freed at its last release.
    fn open_marker(&self) -> impl Fn(u64) -> bool {
        let (open, orphans) = (self.open.clone(), self.orphans.clone());
        move |o: u64| {
            // Under `open`: a last release in between sees the orphan.
            let open = open.lock().unwrap();
            let yes = open.get(&o).copied().unwrap_or(0) > 0;
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
            Live(os).getattr(o)
        });
        let a = self.durable(a)?;
        Ok(self.fattr(&a))
    }

    /// sync=always: a change is committed to the intent log before it is answered.
    fn durable<T>(&self, r: Result<T, ZfsError>) -> Result<T, ZfsError> {
        let v = r?;
        if self.pool.with_fs_ro(self.dsobj, |os| Ok(os.props.sync == 1))? {
            self.pool.zil_commit(self.dsobj)?;
        }
        Ok(v)
    }

    /// A change that needs the file system's fixed objects (delete queue).
    fn with_fs_info(&self, f: impl FnOnce(&mut oxzfs::dbuf::ObjsetW, &oxzfs::zplw::FsInfo) -> Result<(), ZfsError>) -> Result<(), ZfsError> {
        self.pool.with_fs(self.dsobj, |os, _| {
            let mut cached = self.fs_info.lock().unwrap_or_else(|p| p.into_inner());
            if cached.is_none() {
                *cached = Some(zplw::open_fs_drained(os)?);
            }
            f(os, cached.as_ref().expect("just set"))
        })
    }

    fn reply_entry(&self, r: Result<FileAttr, ZfsError>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry_with_ttls(&TTL, &ENTRY_TTL, &a, Generation(0)),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    /// Read: under the pool lock only the znode, what is dirty and the synced tree; the
    /// block reads, checksums and decompression after it.
    fn read(&self, ino: u64, offset: i64, size: u32) -> Result<Vec<u8>, ZfsError> {
        let obj = obj_of(self.root, ino);
        let offset = offset.max(0) as u64;
        let plan = self.pool.with_fs_ro(self.dsobj, |os| {
            let a = Live(os).getattr(obj)?;
            if a.mode & libc::S_IFMT == libc::S_IFDIR {
                return Err(ZfsError::Posix(libc::EISDIR, "is a directory".into()));
            }
            if os.props.atime && !os.props.readonly {
                zplw::touch_atime(os, obj)?;
            }
            if offset >= a.size {
                return Ok(ReadLater::Done(Vec::new()));
            }
            let len = (size as u64).min(a.size - offset);
            os.read_later(obj, offset, len as usize)
        })?;
        if let ReadLater::Clean { ro, dn, obj, offset, len, .. } = &plan {
            self.read_ahead(ro, dn, *obj, *offset, *len as u64);
        }
        plan.finish()
    }

    /// After a read of a clean object: when it continues a sequential stream, ask for the
    /// blocks of the next window (dmu_zfetch), so they come from the vdevs in parallel with
    /// this read and the kernel's copy, and are in the ARC when the next read wants them.
    fn read_ahead(&self, ro: &Arc<oxzfs::dmu::Objset>, dn: &oxzfs_format::dnode::DnodePhys, obj: u64, offset: u64, len: u64) {
        let bs = dn.data_block_size();
        if bs == 0 || dn.maxblkid == 0 || prefetch_disabled() {
            return;
        }
        let end = offset + len;
        let (from, to) = {
            let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            if streams.len() > 1024 && !streams.contains_key(&obj) {
                streams.clear();
                ZFETCH_STATS[2].fetch_add(1, Ordering::Relaxed);
            }
            let s = streams.entry(obj).or_default();
            if offset.abs_diff(s.next) > PREFETCH_SLACK {
                // Not sequential: a new stream starts here (prefetch from its next read).
                *s = Stream { next: end, ahead: end, window: 0 };
                ZFETCH_STATS[1].fetch_add(1, Ordering::Relaxed);
                return;
            }
            ZFETCH_STATS[0].fetch_add(1, Ordering::Relaxed);
            s.next = s.next.max(end);
            s.window = (s.window * 2).clamp(PREFETCH_MIN, PREFETCH_MAX);
            let to = (s.next + s.window).min((dn.maxblkid + 1) * bs);
            let from = s.ahead.max(s.next);
            if from >= to {
                return;
            }
            s.ahead = to;
            (from, to)
        };
        let dn = Arc::new(dn.clone());
        let asked = std::time::Instant::now();
        for blkid in from / bs..to.div_ceil(bs) {
            let job = Prefetch { pool: self.pool.clone(), dsobj: self.dsobj, ro: ro.clone(), dn: dn.clone(), blkid, asked };
            if self.prefetch.try_send(job).is_err() {
                return;
            }
        }
    }

    fn fallocate(&self, ino: u64, offset: i64, length: i64, mode: i32) -> Result<(), ZfsError> {
        let obj = obj_of(self.root, ino);
        let need = if mode & 0x02 != 0 { 0 } else { length.max(0) as u64 };
        self.pool.with_fs_space(self.dsobj, need, |os, _| zplw::fallocate(os, obj, offset.max(0) as u64, length.max(0) as u64, mode, os.props.recordsize))
    }

    /// The entries of directory `ino` from position `offset` on: ".", "..", then the ZAP's
    /// names; each with its FUSE inode, kind and ZFS object (for readdirplus's attributes).
    fn dir_entries(&self, os: &mut oxzfs::dbuf::ObjsetW, ino: u64, offset: i64) -> Result<Vec<(u64, fuser::FileType, Vec<u8>, u64)>, ZfsError> {
        let dir = obj_of(self.root, ino);
        let parent = if dir == self.root { dir } else { zplw::get(os, dir)?.parent };
        let ents = Live(os).readdir(dir)?;
        let dots = [(ino, fuser::FileType::Directory, b".".to_vec(), dir), (ino_of(self.root, parent), fuser::FileType::Directory, b"..".to_vec(), parent)];
        let rest = ents.into_iter().map(|e| (ino_of(self.root, e.ino), kind_of(e.mode), e.name, e.ino));
        Ok(dots.into_iter().chain(rest).skip(offset.max(0) as usize).collect())
    }

    fn readdir(&self, ino: u64, offset: i64, mut reply: ReplyDirectory) {
        match self.pool.with_fs_ro(self.dsobj, |os| self.dir_entries(os, ino, offset)) {
            Ok(all) => {
                for (i, (ino, kind, name, _)) in all.into_iter().enumerate() {
                    if reply.add(INodeNo(ino), (offset.max(0) + (i + 1) as i64) as u64, kind, OsStr::from_bytes(&name)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    /// readdir with every entry's attributes (READDIR + LOOKUP in one request): a walk that
    /// stats what it lists needs no lookup of its own. Attributes are read only for the
    /// entries that fit the kernel's buffer.
    fn readdirplus(&self, ino: u64, offset: i64, mut reply: ReplyDirectoryPlus) {
        let r = self.pool.with_fs_ro(self.dsobj, |os| {
            let all = self.dir_entries(os, ino, offset)?;
            let mut full = false;
            for (i, (ino, _, name, obj)) in all.into_iter().enumerate() {
                // A name whose object cannot be read (a bug, damage) is left out, as readdir would
                // show it and a lookup fail.
                let Ok(a) = Live(os).getattr(obj) else { continue };
                if reply.add(INodeNo(ino), (offset.max(0) + (i + 1) as i64) as u64, OsStr::from_bytes(&name), &TTL, &crate::file_attr(ino, &a), Generation(0)) {
                    full = true;
                    break;
                }
            }
            Ok(full)
        });
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }
}

fn reply_empty(r: Result<(), ZfsError>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(Errno::from_i32(e.errno())),
    }
}

impl Filesystem for RwFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MIB);
        let _ = config.set_max_write(MIB);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        for cap in [InitFlags::FUSE_ASYNC_READ, InitFlags::FUSE_BIG_WRITES, InitFlags::FUSE_PARALLEL_DIROPS, InitFlags::FUSE_DO_READDIRPLUS] {
            let _ = config.add_capabilities(cap);
        }
        // The file system takes set-ID bits away itself (see `write` and `setattr`): the
        // kernel then stops asking for security.capability before every write (one GETXATTR
        // round trip per write(2); now one per file until its attributes are next refreshed).
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        if WRITEBACK_CACHE {
            let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
        }
        Ok(())
    }

    /// The session is over (fuser calls this once every session thread has ended): changes
    /// still queued on the workers run to their end; then files unlinked while open whose
    /// last close never arrived are freed — an unmount aborts the kernel's RELEASE requests
    /// not yet read (a close(2) does not wait for its RELEASE), as evicting the inodes at
    /// unmount frees them in OpenZFS (zfs_zinactive); then a sync.
    fn destroy(&mut self) {
        while self.pending.iter().any(|p| p.load(Ordering::Acquire) != 0) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let orphans: Vec<u64> = self.inner.orphans.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for obj in orphans {
            let _ = self.inner.with_fs_info(|os, fs| zplw::release(os, fs, obj));
        }
        let _ = self.inner.pool.sync_now();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = parent.0;
        if parent == 1 && name.as_bytes() == b".zfs" || parent >> crate::SNAP_SHIFT != 0 {
            return match self.snaps.as_ref() {
                Some(v) => v.lookup(_req, INodeNo(parent), name, reply),
                None => reply.error(Errno::from_i32(libc::ENOENT)),
            };
        }
        let name = name.to_os_string();
        self.read_op(move |s| {
            let dir = obj_of(s.root, parent);
            let r = s.pool.with_fs_ro(s.dsobj, |os| match Live(os).dir_lookup(dir, name.as_bytes())? {
                Some(o) => Live(os).getattr(o),
                None => Err(ZfsError::Posix(libc::ENOENT, String::new())),
            });
            match r {
                Ok(a) => reply.entry_with_ttls(&TTL, &ENTRY_TTL, &s.fattr(&a), Generation(0)),
                // A negative entry (inode 0) the kernel may cache: every change of a name comes
                // through this mount, and the kernel drops the entry when it creates the name.
                Err(e) if e.errno() == libc::ENOENT => {
                    let mut a = s.fattr(&Attr::default());
                    a.ino = INodeNo(0);
                    reply.entry_with_ttls(&TTL, &ENTRY_TTL, &a, Generation(0))
                }
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = ino.0;
        if let Some(v) = self.snap_ino(ino) {
            return v.getattr(_req, INodeNo(ino), _fh, reply);
        }
        self.read_op(move |s| {
            let obj = obj_of(s.root, ino);
            match s.pool.with_fs_ro(s.dsobj, |os| Live(os).getattr(obj)) {
                Ok(a) => reply.attr(&TTL, &s.fattr(&a)),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ino = ino.0;
        if ino >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        // Under HANDLE_KILLPRIV_V2 the kernel no longer sends the mode a change of owner or a
        // truncation leaves: a chown takes the set-ID bits away, and so does a truncation by
        // an unprivileged caller (root stands in for CAP_FSETID, which the request does not
        // carry). A setattr that changes nothing is the kernel's own removal of privileges
        // (before an unprivileged write, and chown(-1, -1)), its mode stripped: the reply
        // gives the kernel the mode without the bits before the write's data goes out.
        let nothing = mode.is_none() && uid.is_none() && gid.is_none() && size.is_none() && atime.is_none() && mtime.is_none();
        let chown = uid.is_some() || gid.is_some() || nothing;
        let kill_suidgid = mode.is_none() && (chown || (size.is_some() && req.uid() != 0));
        let caller = Caller::of(req);
        let s = SetAttr {
            mode: mode.map(|m| m as u64),
            uid: uid.map(|u| u as u64),
            gid: gid.map(|g| g as u64),
            size,
            atime: atime.map(ts),
            mtime: mtime.map(ts),
            kill_suidgid,
        };
        self.change(ino, move |i| {
            let obj = obj_of(i.root, ino);
            match i.durable(i.pool.with_fs(i.dsobj, |os, _| zplw::setattr_as(os, obj, &s, os.props.recordsize, &|gid| caller.in_group(gid)))) {
                Ok(a) => reply.attr(&TTL, &i.fattr(&a)),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let ino = ino.0;
        if let Some(v) = self.snap_ino(ino) {
            return v.readlink(_req, INodeNo(ino), reply);
        }
        self.read_op(move |s| {
            let obj = obj_of(s.root, ino);
            match s.pool.with_fs_ro(s.dsobj, |os| Live(os).readlink(obj)) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let parent = parent.0;
        if parent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let (name, uid, gid) = (name.to_os_string(), req.uid(), req.gid());
        self.change(parent, move |s| s.reply_entry(s.entry(parent, &name, mode & !umask, uid, gid, zfs_rdev(rdev), None), reply));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let parent = parent.0;
        if parent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let (name, uid, gid) = (name.to_os_string(), req.uid(), req.gid());
        self.change(parent, move |s| s.reply_entry(s.entry(parent, &name, (mode & !umask & 0o7777) | 0o040000, uid, gid, 0, None), reply));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let parent = parent.0;
        if parent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let (name, uid, gid, target) = (link_name.to_os_string(), req.uid(), req.gid(), target.as_os_str().as_bytes().to_vec());
        self.change(parent, move |s| s.reply_entry(s.entry(parent, &name, 0o120777, uid, gid, 0, Some(&target)), reply));
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, _flags: i32, reply: ReplyCreate) {
        let parent = parent.0;
        if parent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let (name, uid, gid) = (name.to_os_string(), req.uid(), req.gid());
        self.change(parent, move |s| match s.entry(parent, &name, (mode & !umask & 0o7777) | 0o100000, uid, gid, 0, None) {
            Ok(a) => {
                *s.open.lock().unwrap().entry(obj_of(s.root, a.ino.0)).or_insert(0) += 1;
                reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = parent.0;
        if parent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let name = name.to_os_string();
        self.change(parent, move |s| {
            let dir = obj_of(s.root, parent);
            let is_open = s.open_marker();
            reply_empty(s.durable(s.with_fs_info(|os, fs| zplw::unlink(os, fs, dir, name.as_bytes(), &is_open))), reply)
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = parent.0;
        if parent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let name = name.to_os_string();
        self.change(parent, move |s| {
            let dir = obj_of(s.root, parent);
            reply_empty(s.durable(s.with_fs_info(|os, fs| zplw::rmdir(os, fs, dir, name.as_bytes()))), reply)
        });
    }

    fn rename(&self, _req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        let parent = parent.0;
        let newparent = newparent.0;
        let flags = flags.bits();
        if parent >> crate::SNAP_SHIFT != 0 || newparent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let (name, newname) = (name.to_os_string(), newname.to_os_string());
        // Renames between directories all go to one worker: they keep their order.
        let key = if parent == newparent { parent } else { 0 };
        self.change(key, move |s| {
            let (sd, dd) = (obj_of(s.root, parent), obj_of(s.root, newparent));
            let is_open = s.open_marker();
            reply_empty(s.durable(s.with_fs_info(|os, fs| zplw::rename(os, fs, sd, name.as_bytes(), dd, newname.as_bytes(), flags, &is_open))), reply)
        });
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let ino = ino.0;
        let newparent = newparent.0;
        if newparent >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let newname = newname.to_os_string();
        self.change(newparent, move |s| {
            let (o, d) = (obj_of(s.root, ino), obj_of(s.root, newparent));
            let r = s.durable(s.pool.with_fs_space(s.dsobj, 512, |os, _| zplw::link(os, o, d, newname.as_bytes())));
            s.reply_entry(r.map(|a| s.fattr(&a)), reply)
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino.0;
        if let Some(v) = self.snap_ino(ino) {
            return v.open(_req, INodeNo(ino), _flags, reply);
        }
        let obj = obj_of(self.inner.root, ino);
        *self.inner.open.lock().unwrap().entry(obj).or_insert(0) += 1;
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn release(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        let ino = ino.0;
        if let Some(v) = self.snap_ino(ino) {
            return v.release(_req, INodeNo(ino), _fh, _flags, _lock, _flush, reply);
        }
        let s = &self.inner;
        let obj = obj_of(s.root, ino);
        let free = {
            let mut m = s.open.lock().unwrap();
            let c = m.entry(obj).or_insert(1);
            *c = c.saturating_sub(1);
            *c == 0 && {
                m.remove(&obj);
                s.orphans.lock().unwrap().remove(&obj)
            }
        };
        if free {
            // The last close of a file unlinked while open frees it: on the file's worker,
            // after the writes the kernel sent before.
            self.change(ino, move |s| {
                let _ = s.with_fs_info(|os, fs| zplw::release(os, fs, obj));
                reply.ok();
            });
        } else {
            reply.ok();
        }
    }

    fn read(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        let ino = ino.0;
        let offset = offset as i64;
        if let Some(v) = self.snap_ino(ino) {
            return v.read(_req, INodeNo(ino), _fh, offset as u64, size, _flags, _lock, reply);
        }
        let job = move |s: &Inner| match s.read(ino, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        };
        // A big read goes to a reader: the kernel's readahead sends reads of a stream several
        // at a time, and their copies then run side by side while this thread takes the next
        // request. A small one (random I/O) is not worth the hand-off.
        if size <= SMALL_READ {
            return self.read_op(job);
        }
        if let Err(e) = self.readers.send(Box::new(job)) {
            (e.0)(&self.inner);
        }
    }

    fn write(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, data: &[u8], wf: WriteFlags, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyWrite) {
        let ino = ino.0;
        let offset = offset as i64;
        let wf = wf.bits();
        if ino >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        // FUSE_WRITE_KILL_SUIDGID: the writer lacks CAP_FSETID and the file has set-ID bits.
        let kill = (wf & WriteFlags::FUSE_WRITE_KILL_SUIDGID.bits() != 0).then(|| Caller::of(_req));
        fn write(s: &Inner, ino: u64, offset: i64, data: &[u8], kill: Option<Caller>, reply: ReplyWrite) {
            let obj = obj_of(s.root, ino);
            let in_group = kill.map(|c| move |gid| c.in_group(gid));
            let r = s.pool.with_fs_space(s.dsobj, data.len() as u64, |os, _| {
                zplw::write_as(os, obj, offset.max(0) as u64, data, os.props.recordsize, in_group.as_ref().map(|f| f as &dyn Fn(u64) -> bool))
            });
            match s.durable(r) {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        }
        // Run here, the data is written from the request's buffer; queued, it is copied.
        match self.change_inline(ino) {
            None => self.inline(|s| write(s, ino, offset, data, kill, reply)),
            Some(i) => {
                let data = data.to_vec();
                self.queue(i, move |s| write(s, ino, offset, &data, kill, reply));
            }
        }
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        let ino = ino.0;
        let offset = offset as i64;
        let length = length as i64;
        if ino >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        self.change(ino, move |s| reply_empty(s.durable(s.fallocate(ino, offset, length, mode)), reply));
    }

    /// Nothing to do at close (writes are in the open txg already, fsync syncs): ENOSYS tells
    /// the kernel so, and it sends no more flushes, sparing every close(2) a round trip.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::from_i32(libc::ENOSYS));
    }

    /// fsync, fdatasync (and the kernel's fsync after an O_SYNC/O_DSYNC write): the intent
    /// log's commit for this file (zil_commit(zilog, foid): the namespace's changes and the
    /// file's own, not other files'), on the file's worker, after its writes.
    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let ino = ino.0;
        self.change_waiting(ino, move |s| reply_empty(s.pool.zil_commit_obj(s.dsobj, obj_of(s.root, ino)), reply));
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let ino = ino.0;
        self.change_waiting(ino, move |s| reply_empty(s.pool.zil_commit_obj(s.dsobj, obj_of(s.root, ino)), reply));
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The control directories change as snapshots come and go: no cached listing.
        if _ino.0 >> crate::SNAP_SHIFT != 0 && _ino.0 >> 62 == 0 {
            if let Some(v) = self.snaps.as_ref() {
                return v.opendir(_req, _ino, _flags, reply);
            }
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn releasedir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags, reply: ReplyEmpty) {
        let ino = ino.0;
        let fh = fh.0;
        let flags = flags.0;
        match self.snap_ino(ino) {
            Some(v) => v.releasedir(_req, INodeNo(ino), FileHandle(fh), OpenFlags(flags), reply),
            None => reply.ok(),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        let ino = ino.0;
        let offset = offset as i64;
        if let Some(v) = self.snap_ino(ino) {
            return v.readdir(_req, INodeNo(ino), _fh, offset as u64, reply);
        }
        self.read_op(move |s| s.readdir(ino, offset, reply));
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus) {
        let ino = ino.0;
        let offset = offset as i64;
        if let Some(v) = self.snap_ino(ino) {
            return v.readdirplus(_req, INodeNo(ino), _fh, offset as u64, reply);
        }
        self.read_op(move |s| s.readdirplus(ino, offset, reply));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // zfs_statvfs's numbers (the kernel sets f_fsid and f_type for FUSE mounts itself).
        match self.inner.pool.statfs(self.inner.dsobj) {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize as u32, s.namemax, s.bsize as u32),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn setxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        let ino = ino.0;
        if ino >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let (name, value) = (name.to_os_string(), value.to_vec());
        self.change(ino, move |s| {
            let obj = obj_of(s.root, ino);
            reply_empty(s.durable(s.pool.with_fs_space(s.dsobj, value.len() as u64 + 4096, |os, txg| zplw::setxattr(os, obj, name.as_bytes(), &value, flags, txg))), reply)
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let ino = ino.0;
        if let Some(v) = self.snap_ino(ino) {
            return v.getxattr(_req, INodeNo(ino), name, size, reply);
        }
        let name = name.to_os_string();
        self.read_op(move |s| {
            let obj = obj_of(s.root, ino);
            match s.pool.with_fs_ro(s.dsobj, |os| Live(os).getxattr(obj, name.as_bytes())) {
                Ok(v) => xattr_reply(reply, &v, size),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let ino = ino.0;
        if let Some(v) = self.snap_ino(ino) {
            return v.listxattr(_req, INodeNo(ino), size, reply);
        }
        self.read_op(move |s| {
            let obj = obj_of(s.root, ino);
            match s.pool.with_fs_ro(s.dsobj, |os| Live(os).listxattr(obj)) {
                Ok(names) => {
                    let mut buf = Vec::new();
                    for n in names {
                        buf.extend_from_slice(&n);
                        buf.push(0);
                    }
                    xattr_reply(reply, &buf, size)
                }
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ino = ino.0;
        if ino >> crate::SNAP_SHIFT != 0 {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        let name = name.to_os_string();
        self.change(ino, move |s| {
            let obj = obj_of(s.root, ino);
            reply_empty(s.durable(s.with_fs_info(|os, fs| zplw::removexattr(os, fs, obj, name.as_bytes()))), reply)
        });
    }
}

fn xattr_reply(reply: ReplyXattr, data: &[u8], size: u32) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE));
    } else {
        reply.data(data);
    }
}

/// Mount dataset `dsobj` of a pool imported for writing at `mountpoint`.
/// `snapshots`: the pool's read side and whether `.zfs` shows in the root's listing
/// (snapdir=visible), for `.zfs/snapshot`.
pub fn mount_rw(pool: Arc<PoolHandle>, dsobj: u64, dataset: String, mountpoint: &Path, snapshots: Option<(Arc<oxzfs::pool::Pool>, bool)>) -> Result<crate::MountHandle, ZfsError> {
    std::fs::create_dir_all(mountpoint)
        .map_err(|e| ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}': failed to create mountpoint '{}': {e}", mountpoint.display())))?;
    let info = pool.with_fs(dsobj, |os, _| zplw::open_fs_drained(os))?;
    // The intent log's chain starts now, not at the first fsync (zil_create syncs a txg).
    pool.zil_open(dsobj)?;
    let root = info.root;
    let (prefetch, rx) = sync_channel(PREFETCH_QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..PREFETCH_WORKERS {
        prefetcher(format!("oxzfs-pf-{i}"), rx.clone());
    }
    let inner = Inner {
        pool,
        dsobj,
        root,
        open: Arc::new(Mutex::new(HashMap::new())),
        orphans: Arc::new(Mutex::new(Default::default())),
        streams: Mutex::new(HashMap::new()),
        prefetch,
        fs_info: Mutex::new(Some(info)),
    };
    let mut fs = RwFs::new(inner);
    if let Some((ro, visible)) = snapshots {
        // Snapshots never change; the names in .zfs/snapshot do, so entries live briefly.
        let opts = crate::MountOpts { workers: 2, ttl: TTL, snapdir_visible: visible, ..crate::MountOpts::default() };
        fs.snaps = ro.open_fs(&dataset).ok().map(|live| crate::ZfsFuse::new(live, ro.clone(), dataset.clone(), &opts));
    }
    let root_user = unsafe { libc::geteuid() } == 0;
    let mut mo = vec![
        MountOption::RW,
        MountOption::FSName(dataset.clone()),
        MountOption::DefaultPermissions,
        MountOption::CUSTOM(format!("max_read={MIB}")),
    ];
    mo.push(if root_user { MountOption::CUSTOM("subtype=oxzfs".into()) } else { MountOption::Subtype("oxzfs".into()) });
    let config = crate::session_config(mo, root_user, fs.threads);
    let session = fuser::spawn_mount(fs, mountpoint, &config)
        .map_err(|e| ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}' on '{}': {e}", mountpoint.display())))?;
    crate::widen_readahead(mountpoint);
    Ok(crate::MountHandle::from_session(session, dataset, mountpoint.to_path_buf()))
}
