//! The FUSE adapter: one `Filesystem` for every mount of a file system dataset, read-only (a
//! read-only import's dataset) or read-write (a pool imported for writing), as OpenZFS serves
//! both with one znode layer and refuses changes on a read-only one. Every read — lookup,
//! getattr, readdir(plus), readlink, xattrs — is written once over `zpl::View`: the synced
//! `zpl::Zfs` of a read-only dataset or snapshot, or `zpl::Live`, the open txg's view of a
//! dataset being written. Changes go through `zplw` and exist only for the writable backend;
//! anywhere else they get EROFS. `.zfs/snapshot/<name>/` serves the dataset's snapshots in
//! both (see `snapdir`).
//!
//! Requests: several session threads read requests (fuser's event loops, each on a clone of
//! /dev/fuse). A session thread answers a request itself when the pool lock is free and
//! nothing is queued before it, and otherwise hands it to a worker: changes to the worker of
//! their inode (the file's, or the directory's for names), so the changes to one inode keep
//! the kernel's order; reads to a pool of readers. A read-only mount has one session thread and
//! hands every read to its readers (no lock says when a read would be quick). A change runs in
//! the open txg under the pool's write lock (see `oxzfs::txg`); a read holds the lock only to
//! see what is dirty and to take the synced tree, then reads the blocks without it. Each change
//! is logged for the intent log (`oxzfs::zfs_log`); fsync commits the log
//! (`PoolHandle::zil_commit_obj`), and under sync=always every change does.
//!
//! Caching: what never changes (a read-only mount, a snapshot) the kernel keeps for long
//! (attributes, entries, pages with FOPEN_KEEP_CACHE, symlinks, directory listings per open
//! handle). A writable mount's attributes live 1 s (st_blocks changes at each sync, not through
//! a request), its names 60 s (every change of a name comes through this mount and the
//! kernel's dentry cache follows it; a rollback or receive unmounts first).
//!
//! Round trips are what a metadata operation costs here: readdirplus hands the kernel every
//! listed entry's attributes (a walk needs no lookups), flush is declined once (ENOSYS) so
//! close(2) sends none. Sequential reads of a writable mount: the kernel reads ahead 1 MiB per
//! request; a read of a clean object that continues a stream asks prefetch workers for the
//! next window of blocks (dmu_zfetch), which land in the ARC while the kernel copies this one.
//! The same workers read dnode blocks ahead of the lookups that go through the dnode array in
//! order (stat of files in the order they were made, after a mount: dmu_zfetch on the meta
//! dnode).
//! What a metadata operation costs beyond that is the kernel's: bench/results/
//! 2026-11-26-metadata.md counts the requests each one sends and why.
//!
//! Lock order: the pool's (`PoolHandle`) → `open` → `orphans` (leaves); `streams` and `dnodes`
//! are leaves taken without the pool's; a prefetch worker takes the pool's alone, briefly.
//! Files unlinked while open stay on the delete queue until their last release.

use crate::snapdir::SnapDir;
use crate::{file_attr, join_ino, kind_of, split_ino, CTL_SNAPDIR, CTL_ZFS, SNAP_SHIFT};
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags,
    IoctlFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use oxzfs::dbuf::ReadLater;
use oxzfs::dmu::ReadPart;
use oxzfs::txg::PoolHandle;
use oxzfs::zpl::{Attr, Live, View, Zfs, ZplRead};
use oxzfs::zfs_pflags::{self as pflags, Op};
use oxzfs::zfs_posix_acl as posix_acl;
use oxzfs::zplw::{self, SetAttr};
use oxzfs::ZfsError;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A writable mount's attribute lifetime, and the lifetime of names in `.zfs/snapshot`.
pub(crate) const TTL: Duration = Duration::from_secs(1);
/// How long the kernel keeps a writable mount's name → inode entry (also a negative one)
/// without asking again.
const ENTRY_TTL: Duration = Duration::from_secs(60);
/// The kernel's writeback cache (writes gathered in the page cache, the kernel keeping size,
/// mtime and ctime itself while it holds dirty pages) stays off: with it, pjdfstest's
/// unlink::update_ctime_success, rename::to_multiply_linked and open::open_trunc fail (the
/// kernel's cached times win over the ctime/mtime the file system sets on those changes).
/// Big writes (1 MiB requests) do not need it.
const WRITEBACK_CACHE: bool = false;
const MIB: u32 = 1 << 20;

/// What the live file system is served from.
pub(crate) enum Backend {
    /// A read-only import's dataset: never changes.
    ReadOnly(Arc<Zfs>),
    /// A dataset of a pool imported for writing.
    ReadWrite(Writer),
}

/// The writable backend's state.
pub(crate) struct Writer {
    pool: Arc<PoolHandle>,
    dsobj: u64,
    /// Open handles per object (for the delete queue).
    open: Arc<Mutex<HashMap<u64, u32>>>,
    /// Objects unlinked while open: their last release frees them.
    orphans: Arc<Mutex<std::collections::HashSet<u64>>>,
    /// Sequential read streams per object, for prefetch.
    streams: Mutex<HashMap<u64, Stream>>,
    /// The stream of dnode blocks that lookups meet (see `dnode_ahead`).
    dnodes: Mutex<DnodeStream>,
    /// Blocks to read ahead into the ARC (full queue: the prefetch is skipped, never waited for).
    prefetch: SyncSender<Prefetch>,
    /// The ZPL's fixed objects of the file system, read (and its delete queue drained) at
    /// mount.
    fs_info: Mutex<Option<zplw::FsInfo>>,
}

impl Writer {
    /// The writable backend of dataset `dsobj`: its ZPL opened (the delete queue drained) and
    /// its intent log started. Returns it and the root directory's object.
    pub(crate) fn open(pool: Arc<PoolHandle>, dsobj: u64) -> Result<(Writer, u64), ZfsError> {
        let info = pool.with_fs(dsobj, |os, _| zplw::open_fs_drained(os))?;
        // The intent log's chain starts now, not at the first fsync (zil_create syncs a txg).
        pool.zil_open(dsobj)?;
        let root = info.root;
        let (prefetch, rx) = sync_channel(PREFETCH_QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..PREFETCH_WORKERS {
            prefetcher(format!("oxzfs-pf-{i}"), rx.clone());
        }
        let w = Writer {
            pool,
            dsobj,
            open: Arc::new(Mutex::new(HashMap::new())),
            orphans: Arc::new(Mutex::new(Default::default())),
            streams: Mutex::new(HashMap::new()),
            dnodes: Mutex::new(DnodeStream::default()),
            prefetch,
            fs_info: Mutex::new(Some(info)),
        };
        Ok((w, root))
    }
}

impl Writer {
    /// Whether lookups find names in another case or normalization form than they are stored
    /// in (casesensitivity=insensitive, or a normalization).
    pub(crate) fn names_fold(&self) -> Result<bool, ZfsError> {
        self.pool.with_fs_ro(self.dsobj, |os| Ok(Live(os).name_rules()?.match_flags() != 0))
    }
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

/// The blocks of the dataset's dnode array (the meta dnode's data) that lookups have been
/// meeting: the last one, how far ahead blocks were asked for, and how many the next ask covers
/// (it doubles while lookups go on through the array in order, up to `DNODE_AHEAD_MAX`).
#[derive(Default)]
struct DnodeStream {
    last: u64,
    ahead: u64,
    window: u64,
}

/// Dnode blocks asked for ahead of a lookup, at first and at most (32 blocks of 16 KiB are the
/// dnodes of 1024 files).
const DNODE_AHEAD_MIN: u64 = 4;
const DNODE_AHEAD_MAX: u64 = 32;

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

/// How a mount is served.
pub(crate) struct Serve {
    /// Session threads reading /dev/fuse.
    pub threads: usize,
    /// Workers answering reads.
    pub readers: usize,
    /// Attribute and entry lifetimes of the live file system.
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
}

impl Serve {
    /// A writable mount: see `session_threads`, and the lifetimes above.
    pub(crate) fn writable() -> Serve {
        Serve { threads: session_threads(), readers: READ_WORKERS, attr_ttl: TTL, entry_ttl: ENTRY_TTL }
    }
}

/// The mount: requests that may block run on workers. Changes go to the worker chosen by
/// their inode (the file's, or the directory's for names), so changes to one inode keep the
/// order the kernel sent them in; reads go to a shared pool of readers.
pub struct ZfsFuse {
    inner: Arc<Inner>,
    ordered: Vec<SyncSender<Job>>,
    /// Jobs queued or running per change worker (only session threads add to them).
    pending: Vec<Arc<AtomicUsize>>,
    readers: SyncSender<Job>,
    /// Session threads (see `session_threads`).
    pub(crate) threads: usize,
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

/// What a FUSE inode names.
enum Node {
    /// Object `obj` of the live file system (`snap` None, number 0) or of snapshot number `k`.
    Obj { k: usize, snap: Option<Arc<Zfs>>, obj: u64 },
    /// `.zfs`
    CtlZfs,
    /// `.zfs/snapshot`
    CtlSnapdir,
}

/// One entry of a listed directory: its FUSE inode, kind and name, and the object whose
/// attributes it has (0 for the control directories and snapshot roots).
#[derive(Clone)]
struct Ent {
    ino: u64,
    kind: FileType,
    name: Vec<u8>,
    obj: u64,
}

/// The state every request shares (the workers hold it).
pub struct Inner {
    backend: Backend,
    /// The live file system's root directory (FUSE inode 1).
    root: u64,
    /// `.zfs/snapshot` (None: the pool's read side could not be had; `.zfs` is then absent).
    snapdir: Option<SnapDir>,
    attr_ttl: Duration,
    entry_ttl: Duration,
    /// Listings of open directories that never change, per handle.
    dirs: Mutex<HashMap<u64, Arc<Vec<Ent>>>>,
    next_fh: AtomicU64,
}

impl ZfsFuse {
    pub(crate) fn new(backend: Backend, root: u64, snapdir: Option<SnapDir>, serve: &Serve) -> ZfsFuse {
        let writable = matches!(backend, Backend::ReadWrite(_));
        let inner = Arc::new(Inner {
            backend,
            root,
            snapdir,
            attr_ttl: serve.attr_ttl,
            entry_ttl: serve.entry_ttl,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        });
        let mut ordered = Vec::new();
        let mut pending = Vec::new();
        for i in 0..if writable { CHANGE_WORKERS } else { 0 } {
            let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
            worker(format!("oxzfs-rw-{i}"), inner.clone(), Arc::new(Mutex::new(rx)));
            ordered.push(tx);
            pending.push(Arc::new(AtomicUsize::new(0)));
        }
        let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..serve.readers.max(1) {
            worker(format!("oxzfs-rd-{i}"), inner.clone(), rx.clone());
        }
        ZfsFuse { inner, ordered, pending, readers: tx, threads: serve.threads.max(1) }
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
        if self.ordered.is_empty() {
            return None;
        }
        let i = (ino as usize) % self.ordered.len();
        if self.pending[i].load(Ordering::Acquire) == 0 && self.inner.idle() {
            return None;
        }
        Some(i)
    }

    /// Run a change that may wait long (fsync: the log's write and flush) here when nothing is
    /// queued for its inode's worker — the other session threads go on reading requests
    /// meanwhile, and a lone fsync pays no thread hand-off — else behind what is queued. A
    /// request that came through FUSE over io_uring always goes to the worker: its queue has
    /// one thread, and every caller on that CPU would wait behind the flush (fsyncing writers
    /// then commit one at a time instead of together: half the rate with 4 of them).
    fn change_waiting(&self, ino: u64, f: impl FnOnce(&Inner) + Send + 'static) {
        if self.ordered.is_empty() {
            return self.inline(f);
        }
        let i = (ino as usize) % self.ordered.len();
        if self.threads > 1 && self.pending[i].load(Ordering::Acquire) == 0 && !fuser::on_ring_thread() {
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

    /// A change made with the file system's fixed objects at hand (the delete queue: unlink,
    /// rmdir, rename, removexattr): EROFS where nothing changes (`frozen`), else `f` on inode
    /// `key`'s worker, committed under sync=always, answered empty.
    fn change_fs(&self, frozen: bool, key: u64, reply: ReplyEmpty, f: impl FnOnce(&Inner, &Writer, &mut oxzfs::dbuf::ObjsetW, &zplw::FsInfo) -> Result<(), ZfsError> + Send + 'static) {
        if frozen {
            return reply.error(erofs());
        }
        self.change(key, move |s| reply_empty(s.w().and_then(|w| w.durable(w.with_fs_info(|os, fs| f(s, w, os, fs)))), reply));
    }

    /// Run a read on any reader — or here, when the pool lock is free.
    fn read_op(&self, f: impl FnOnce(&Inner) + Send + 'static) {
        if self.inner.idle() {
            return self.inline(f);
        }
        self.on_reader(f);
    }

    /// Run a read on a reader.
    fn on_reader(&self, f: impl FnOnce(&Inner) + Send + 'static) {
        if let Err(e) = self.readers.send(Box::new(f)) {
            (e.0)(&self.inner);
        }
    }
}

impl Inner {
    /// Whether a request may run on the session thread without waiting: the writable pool's
    /// lock is free. (A read-only mount cannot tell; its reads go to the readers.)
    fn idle(&self) -> bool {
        match &self.backend {
            Backend::ReadWrite(w) => w.pool.idle(),
            Backend::ReadOnly(_) => false,
        }
    }

    /// Whether inode `ino` is one nothing may change: everything of a read-only mount, `.zfs`
    /// and the snapshots' files.
    fn frozen(&self, ino: u64) -> bool {
        ino >> SNAP_SHIFT != 0 || matches!(self.backend, Backend::ReadOnly(_))
    }

    /// The writable backend (EROFS for a read-only mount).
    fn w(&self) -> Result<&Writer, ZfsError> {
        match &self.backend {
            Backend::ReadWrite(w) => Ok(w),
            Backend::ReadOnly(_) => Err(ZfsError::Posix(libc::EROFS, "read-only file system".into())),
        }
    }

    fn node(&self, ino: u64) -> Result<Node, ZfsError> {
        match ino {
            CTL_ZFS if self.snapdir.is_some() => return Ok(Node::CtlZfs),
            CTL_SNAPDIR if self.snapdir.is_some() => return Ok(Node::CtlSnapdir),
            _ => {}
        }
        let Some((k, obj)) = split_ino(ino, self.root) else {
            return Err(ZfsError::Posix(libc::ENOENT, format!("inode {ino:#x}")));
        };
        if k == 0 {
            return Ok(Node::Obj { k, snap: None, obj });
        }
        let snap = self.snapdir.as_ref().and_then(|s| s.get(k)).ok_or_else(|| ZfsError::Posix(libc::ESTALE, format!("inode {ino:#x}")))?;
        Ok(Node::Obj { k, snap: Some(snap), obj })
    }

    /// `f` over the file system `snap` names (a snapshot's, or the live one for None), as it
    /// is now: a writable one under the pool's lock, as the open txg has it.
    fn view<T>(&self, snap: Option<&Arc<Zfs>>, f: impl FnOnce(&View) -> Result<T, ZfsError>) -> Result<T, ZfsError> {
        match (snap, &self.backend) {
            (Some(fs), _) | (None, Backend::ReadOnly(fs)) => f(&View::Synced(fs)),
            (None, Backend::ReadWrite(w)) => w.pool.with_fs_ro(w.dsobj, |os| f(&View::Open(Live(os)))),
        }
    }

    /// The FUSE attributes of `a`, an object of snapshot `k` (or of the live file system).
    fn fattr(&self, k: usize, snap: Option<&Arc<Zfs>>, a: &Attr) -> FileAttr {
        file_attr(join_ino(k, a.ino, snap.map_or(self.root, |s| s.root_ino())), a)
    }

    /// The attributes `.zfs` and `.zfs/snapshot` take their times from.
    fn root_attr(&self) -> Attr {
        self.view(None, |v| v.getattr(self.root)).unwrap_or_default()
    }

    /// How long the kernel keeps the attributes and entries of inode `ino`.
    fn ttls(&self, ino: u64) -> (Duration, Duration) {
        if ino >> SNAP_SHIFT != 0 && matches!(self.backend, Backend::ReadWrite(_)) {
            // Snapshots come and go while the pool is written: names under .zfs live briefly.
            (TTL, TTL)
        } else {
            (self.attr_ttl, self.entry_ttl)
        }
    }

    fn attr_of(&self, ino: u64) -> Result<FileAttr, ZfsError> {
        match self.node(ino)? {
            Node::CtlZfs => Ok(ctl_attr(CTL_ZFS, &self.root_attr())),
            Node::CtlSnapdir => Ok(ctl_attr(CTL_SNAPDIR, &self.root_attr())),
            Node::Obj { k, snap, obj } => self.view(snap.as_ref(), |v| Ok(self.fattr(k, snap.as_ref(), &v.getattr(obj)?))),
        }
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> Result<FileAttr, ZfsError> {
        match self.node(parent)? {
            Node::Obj { k: 0, obj, .. } if obj == self.root && name == b".zfs" && self.snapdir.is_some() => Ok(ctl_attr(CTL_ZFS, &self.root_attr())),
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
                    let sd = self.snapdir.as_ref().expect("a control directory has a snapdir");
                    let (k, fs) = sd.open(name)?;
                    Ok(self.fattr(k, Some(&fs), &fs.getattr(fs.root_ino())?))
                }
            },
            Node::Obj { k, snap, obj } => match (&snap, &self.backend) {
                (None, Backend::ReadWrite(w)) => {
                    // The synced tree comes out with the answer: the dnode blocks the next
                    // lookups will want are read ahead from it, without the lock.
                    let (a, ro) = w.pool.with_fs_ro(w.dsobj, |os| Ok((Live(os).lookup(obj, name)?, os.synced())))?;
                    if let Some(ro) = ro {
                        w.dnode_ahead(&ro, a.ino);
                    }
                    Ok(self.fattr_live(&a))
                }
                _ => self.view(snap.as_ref(), |v| Ok(self.fattr(k, snap.as_ref(), &v.lookup(obj, name)?))),
            },
        }
    }

    /// The whole listing of a directory, "." and ".." first.
    fn list(&self, ino: u64) -> Result<Vec<Ent>, ZfsError> {
        let dir = |ino: u64, name: &[u8]| Ent { ino, kind: FileType::Directory, name: name.to_vec(), obj: 0 };
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
                let sd = self.snapdir.as_ref().expect("a control directory has a snapdir");
                for name in sd.names() {
                    if let Ok((k, fs)) = sd.open(&name) {
                        out.push(dir(join_ino(k, fs.root_ino(), fs.root_ino()), name.as_bytes()));
                    }
                }
            }
            Node::Obj { k, snap, obj } => {
                let root = snap.as_ref().map_or(self.root, |s| s.root_ino());
                self.view(snap.as_ref(), |v| {
                    let list = v.readdir(obj)?;
                    let pobj = v.parent(obj)?;
                    let parent = if obj == root && k > 0 { CTL_SNAPDIR } else { join_ino(k, pobj, root) };
                    out.push(Ent { obj, ..dir(join_ino(k, obj, root), b".") });
                    out.push(Ent { obj: pobj, ..dir(parent, b"..") });
                    if k == 0 && obj == root && self.snapdir.as_ref().is_some_and(|s| s.visible) {
                        out.push(dir(CTL_ZFS, b".zfs"));
                    }
                    out.reserve(list.len());
                    for e in list {
                        out.push(Ent { ino: join_ino(k, e.ino, root), kind: kind_of(e.mode), name: e.name, obj: e.ino });
                    }
                    Ok(())
                })?;
            }
        }
        Ok(out)
    }

    /// The listing of an open directory handle (kept from its first read when the directory
    /// never changes), or of `ino` as it is now.
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

    fn readdir(&self, ino: u64, fh: u64, offset: u64, mut reply: ReplyDirectory) {
        let list = match self.listing(ino, fh) {
            Ok(l) => l,
            Err(e) => return reply.error(Errno::from_i32(e.errno())),
        };
        for (n, e) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.ino), (n + 1) as u64, e.kind, OsStr::from_bytes(&e.name)) {
                break;
            }
        }
        reply.ok();
    }

    /// readdir with every entry's attributes (READDIR + LOOKUP in one request): a walk that
    /// stats what it lists needs no lookup of its own. Attributes are read only for the
    /// entries that fit the kernel's buffer, a writable file system's under one hold of the
    /// pool's lock.
    fn readdirplus(&self, ino: u64, fh: u64, offset: u64, mut reply: ReplyDirectoryPlus) {
        let (list, node) = match self.listing(ino, fh).and_then(|l| Ok((l, self.node(ino)?))) {
            Ok(x) => x,
            Err(e) => return reply.error(Errno::from_i32(e.errno())),
        };
        // One lifetime for an entry and its attributes here: the shorter (a mount whose names
        // fold keeps no entries).
        let (attr_ttl, entry_ttl) = self.ttls(ino);
        let ttl = attr_ttl.min(entry_ttl);
        let r = match node {
            Node::Obj { k, snap, obj } => self.view(snap.as_ref(), |v| {
                let here = v.getattr(obj)?;
                let dot = self.fattr(k, snap.as_ref(), &here);
                // `.zfs` in the live root's listing (snapdir=visible) is the control directory,
                // with the root's times: read here, not through attr_of, which would take the
                // pool's lock a second time.
                add_plus(&list, offset, &dot, ttl, &mut reply, |e| match e.obj {
                    0 => Ok(ctl_attr(e.ino, &here)),
                    o => v.getattr(o).map(|a| self.fattr(k, snap.as_ref(), &a)),
                });
                Ok(())
            }),
            Node::CtlZfs | Node::CtlSnapdir => self.attr_of(ino).map(|dot| add_plus(&list, offset, &dot, ttl, &mut reply, |e| self.attr_of(e.ino))),
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    /// Read: a writable file system's under the pool lock only the znode, what is dirty and
    /// the synced tree; the block reads, checksums and decompression after it.
    ///
    /// The bytes come as the ARC's buffers (`ReadPart`s), which the reply sends as they are.
    fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<ReadPart>, ZfsError> {
        let (snap, obj) = match self.node(ino)? {
            Node::Obj { snap, obj, .. } => (snap, obj),
            _ => return Err(ZfsError::Posix(libc::EISDIR, String::new())),
        };
        let w = match (&snap, &self.backend) {
            (None, Backend::ReadWrite(w)) => w,
            (Some(fs), _) | (None, Backend::ReadOnly(fs)) => {
                let v = fs.read(obj, offset, size as u64)?;
                let n = v.len();
                return Ok(vec![ReadPart::Block(Arc::new(v), 0..n)]);
            }
        };
        let plan = w.pool.with_fs_ro(w.dsobj, |os| {
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
            w.read_ahead(ro, dn, *obj, *offset, *len as u64);
        }
        plan.finish_parts()
    }

    fn fattr_live(&self, a: &Attr) -> FileAttr {
        self.fattr(0, None, a)
    }

    /// A new object `name` in `parent`, of `mode` narrowed by `umask` or, on a file system
    /// with POSIX ACLs, by the directory's default ACL, which it then takes (zpl_init_acl).
    #[allow(clippy::too_many_arguments)]
    fn entry(&self, parent: u64, name: &OsStr, mode: u32, umask: u32, uid: u32, gid: u32, rdev: u64, target: Option<&[u8]>) -> Result<FileAttr, ZfsError> {
        let w = self.w()?;
        let dir = self.obj(parent);
        let a = w.pool.with_fs_space(w.dsobj, 4096, |os, txg| {
            // zfs_create finds an existing name (EEXIST) before it looks at quotas.
            if Live(os).dir_lookup(dir, name.as_bytes())?.is_none() {
                pflags::check(os, Op::Create { dir })?;
                let projid = zplw::inherited_projid(os, dir)?;
                oxzfs::zfs_quota::check_create(os, uid as u64, gid as u64, projid)?;
            }
            let (mode, acl) = match os.props.posix_acl {
                true => posix_acl::create_mode(os, dir, mode as u64, umask)?,
                false => (mode as u64 & !u64::from(umask & 0o777), None),
            };
            let o = zplw::create(os, dir, name.as_bytes(), mode, uid as u64, gid as u64, rdev, target, txg)?;
            if let Err(e) = posix_acl::inherit(os, dir, o, acl, txg) {
                // zpl_create: a file that could not take its ACL is removed again.
                let fs = zplw::open_fs(os, os.props.recordsize)?;
                let _ = if mode & 0o170000 == 0o040000 { zplw::rmdir(os, &fs, dir, name.as_bytes()) } else { zplw::unlink(os, &fs, dir, name.as_bytes(), &|_| false) };
                return Err(e);
            }
            Live(os).getattr(o)
        });
        let a = w.durable(a)?;
        Ok(self.fattr_live(&a))
    }

    /// The live file system's object of FUSE inode `ino` (the root is inode 1).
    fn obj(&self, ino: u64) -> u64 {
        if ino == 1 {
            self.root
        } else {
            ino
        }
    }

    fn reply_entry(&self, r: Result<FileAttr, ZfsError>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry_with_ttls(&self.attr_ttl, &self.entry_ttl, &a, Generation(0)),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn fallocate(&self, ino: u64, offset: i64, length: i64, mode: i32) -> Result<(), ZfsError> {
        let w = self.w()?;
        let obj = self.obj(ino);
        let need = if mode & 0x02 != 0 { 0 } else { length.max(0) as u64 };
        w.durable(w.pool.with_fs_space(w.dsobj, need, |os, _| {
            pflags::check(os, Op::Fallocate { obj, mode })?;
            zplw::fallocate(os, obj, offset.max(0) as u64, length.max(0) as u64, mode, os.props.recordsize)
        }))
    }
}

/// Add the entries of `list` from position `offset` to a readdirplus reply until it is full,
/// each with the attributes `attr_of` gives. The kernel takes no entry for "." and "..": they
/// get the directory's attributes (`dot`). A name whose object cannot be read (damage) is given
/// without an entry the kernel keeps: a lookup then reports the error.
fn add_plus(list: &[Ent], offset: u64, dot: &FileAttr, ttl: Duration, reply: &mut ReplyDirectoryPlus, attr_of: impl Fn(&Ent) -> Result<FileAttr, ZfsError>) {
    for (n, e) in list.iter().enumerate().skip(offset as usize) {
        let (attr, ttl) = match e.name.as_slice() {
            b"." | b".." => (FileAttr { ino: INodeNo(e.ino), ..*dot }, ttl),
            _ => match attr_of(e) {
                Ok(a) => (a, ttl),
                Err(_) => (unreadable(e, dot), Duration::ZERO),
            },
        };
        if reply.add(INodeNo(e.ino), (n + 1) as u64, OsStr::from_bytes(&e.name), &ttl, &attr, Generation(0)) {
            break;
        }
    }
}

/// The attributes of a listed name whose object cannot be read.
fn unreadable(e: &Ent, dot: &FileAttr) -> FileAttr {
    FileAttr { ino: INodeNo(e.ino), kind: e.kind, nlink: 1, perm: 0, size: 0, blocks: 0, ..*dot }
}

/// The attributes of `.zfs` and `.zfs/snapshot`: read-only directories with the root's times.
fn ctl_attr(ino: u64, like: &Attr) -> FileAttr {
    let t = crate::systime(like.crtime);
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
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

impl Writer {
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

    /// After a lookup found object `obj`: when the lookups are going through the dnode array in
    /// order (files looked up in the order they were made, as `ls -l`, `find`, a backup or
    /// a build do after a mount), ask for the dnode blocks after `obj`'s, so that their reads
    /// overlap instead of each lookup waiting for its own. OpenZFS gets this from dmu_zfetch
    /// on the meta dnode (dnode_hold's dbuf_read); the blocks land in the ARC, which is where
    /// the lookups' own reads (under the pool lock) look first.
    fn dnode_ahead(&self, ro: &Arc<oxzfs::dmu::Objset>, obj: u64) {
        let md = &ro.phys.meta_dnode;
        let bs = md.data_block_size();
        let per_block = bs / oxzfs_format::dnode::DNODE_SIZE as u64;
        if per_block == 0 || prefetch_disabled() {
            return;
        }
        let blk = obj / per_block;
        let (from, to) = {
            let mut s = self.dnodes.lock().unwrap_or_else(|p| p.into_inner());
            // The same block or one of the next two (the directories and other files made in
            // between take objects too) continues the stream; anything else starts one.
            if blk < s.last || blk > s.last + 2 {
                (s.last, s.ahead, s.window) = (blk, blk + 1, 0);
                return;
            }
            if blk > s.last || s.window == 0 {
                s.window = (s.window * 2).clamp(DNODE_AHEAD_MIN, DNODE_AHEAD_MAX);
            }
            s.last = blk;
            let to = (blk + 1 + s.window).min(md.maxblkid + 1);
            let from = s.ahead.max(blk + 1);
            if from >= to {
                return;
            }
            s.ahead = to;
            (from, to)
        };
        self.ask(ro, md, from..to);
    }

    /// Queue the read-ahead of blocks `blkids` of object `dn` of the synced tree `ro` (as many
    /// as the queue takes: a full queue drops the rest, never waits).
    fn ask(&self, ro: &Arc<oxzfs::dmu::Objset>, dn: &oxzfs_format::dnode::DnodePhys, blkids: impl Iterator<Item = u64>) {
        let dn = Arc::new(dn.clone());
        let asked = std::time::Instant::now();
        for blkid in blkids {
            let job = Prefetch { pool: self.pool.clone(), dsobj: self.dsobj, ro: ro.clone(), dn: dn.clone(), blkid, asked };
            if self.prefetch.try_send(job).is_err() {
                return;
            }
        }
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
        self.ask(ro, dn, from / bs..to.div_ceil(bs));
    }

}

/// Zeros to send from (a hole's bytes in a read reply).
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// Pieces of a read reply past which they are gathered into one buffer instead (writev takes
/// at most 1024, the reply's header among them; small blocks make many pieces).
const REPLY_PIECES_MAX: usize = 256;

/// Answer a read with its bytes: the blocks' buffers and zeros sent as they are (one writev,
/// no copy into a reply buffer), or gathered when they are too many pieces.
fn reply_parts(reply: ReplyData, parts: &[ReadPart]) {
    let mut iov: Vec<std::io::IoSlice<'_>> = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            ReadPart::Block(b, r) => iov.push(std::io::IoSlice::new(&b[r.clone()])),
            ReadPart::Zeros(n) => {
                let mut left = *n;
                while left > 0 && iov.len() <= REPLY_PIECES_MAX {
                    let k = left.min(ZEROS.len());
                    iov.push(std::io::IoSlice::new(&ZEROS[..k]));
                    left -= k;
                }
            }
        }
        if iov.len() > REPLY_PIECES_MAX {
            break;
        }
    }
    match iov.len() {
        0 => reply.data(&[]),
        1 => reply.data(&iov[0]),
        n if n <= REPLY_PIECES_MAX => reply.data_vectored(&iov),
        _ => reply.data(&ReadPart::gather(parts)),
    }
}

fn reply_empty(r: Result<(), ZfsError>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(Errno::from_i32(e.errno())),
    }
}

fn erofs() -> Errno {
    Errno::from_i32(libc::EROFS)
}

impl Filesystem for ZfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MIB);
        let _ = config.set_max_write(MIB);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        // Kernel capabilities asked for, each only if the kernel offers it.
        // FUSE_HAS_IOCTL_DIR: lsattr and chattr work on directories as on files.
        for cap in [InitFlags::FUSE_ASYNC_READ, InitFlags::FUSE_BIG_WRITES, InitFlags::FUSE_PARALLEL_DIROPS, InitFlags::FUSE_DO_READDIRPLUS, InitFlags::FUSE_HAS_IOCTL_DIR] {
            let _ = config.add_capabilities(cap);
        }
        match self.inner.backend {
            Backend::ReadOnly(_) => {
                // Nothing changes: symlinks are cached, and the kernel picks readdir or
                // readdirplus by what the reader does next.
                for cap in [InitFlags::FUSE_READDIRPLUS_AUTO, InitFlags::FUSE_CACHE_SYMLINKS] {
                    let _ = config.add_capabilities(cap);
                }
            }
            Backend::ReadWrite(_) => {
                // The file system takes set-ID bits away itself (see `write` and `setattr`):
                // the kernel then stops asking for security.capability before every write (one
                // GETXATTR round trip per write(2); now one per file until its attributes are
                // next refreshed).
                let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
                // acltype=posix: the kernel checks access against the ACLs (read back through
                // getxattr) and leaves the umask to the file system, which applies it or the
                // directory's default ACL (`entry`).
                if let Backend::ReadWrite(w) = &self.inner.backend {
                    if w.pool.with_fs_ro(w.dsobj, |os| Ok(os.props.posix_acl)).unwrap_or(false) {
                        let _ = config.add_capabilities(InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK);
                    }
                }
                if WRITEBACK_CACHE {
                    let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
                }
            }
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
        let Backend::ReadWrite(w) = &self.inner.backend else { return };
        let orphans: Vec<u64> = w.orphans.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for obj in orphans {
            let _ = w.with_fs_info(|os, fs| zplw::release(os, fs, obj));
        }
        let _ = w.pool.sync_now();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = parent.0;
        let name = name.as_bytes().to_vec();
        self.read_op(move |s| {
            let (attr_ttl, entry_ttl) = s.ttls(parent);
            match s.lookup(parent, &name) {
                Ok(a) => reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, Generation(0)),
                // A negative entry (inode 0) the kernel may cache: every change of a name
                // comes through this mount, and the kernel drops the entry when it creates the
                // name. Not in .zfs/snapshot, whose names come and go with `zfs snapshot`.
                Err(e) if e.errno() == libc::ENOENT && split_ino(parent, s.root).is_some() => {
                    let mut a = s.fattr_live(&Attr::default());
                    a.ino = INodeNo(0);
                    reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, Generation(0))
                }
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = ino.0;
        self.read_op(move |s| match s.attr_of(ino) {
            Ok(a) => reply.attr(&s.ttls(ino).0, &a),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
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
        if self.inner.frozen(ino) {
            return reply.error(erofs());
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
        let is_set = |t: &Option<TimeOrNow>| matches!(t, Some(TimeOrNow::SpecificTime(_)));
        let is_now = |t: &Option<TimeOrNow>| matches!(t, Some(TimeOrNow::Now));
        let (times_set, times_now) = (is_set(&atime) || is_set(&mtime), is_now(&atime) || is_now(&mtime));
        let owner = mode.is_some() || uid.is_some() || gid.is_some();
        let sa = SetAttr {
            mode: mode.map(|m| m as u64),
            uid: uid.map(|u| u as u64),
            gid: gid.map(|g| g as u64),
            size,
            atime: atime.map(ts),
            mtime: mtime.map(ts),
            kill_suidgid,
        };
        self.change(ino, move |s| {
            let obj = s.obj(ino);
            let r = s.w().and_then(|w| {
                w.durable(w.pool.with_fs(w.dsobj, |os, txg| {
                    pflags::check(os, Op::SetAttr { obj, owner, size: sa.size.is_some(), times_set, times_now, kill: sa.kill_suidgid })?;
                    oxzfs::zfs_quota::check_chown(os, obj, sa.uid, sa.gid)?;
                    let a = zplw::setattr_as(os, obj, &sa, os.props.recordsize, &|gid| caller.in_group(gid))?;
                    if sa.mode.is_some() {
                        posix_acl::chmod(os, obj, u64::from(a.mode), txg)?;
                    }
                    Ok(a)
                }))
            });
            match r {
                Ok(a) => reply.attr(&s.attr_ttl, &s.fattr_live(&a)),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let ino = ino.0;
        self.read_op(move |s| {
            let r = match s.node(ino) {
                Ok(Node::Obj { snap, obj, .. }) => s.view(snap.as_ref(), |v| v.readlink(obj)),
                Ok(_) => Err(ZfsError::Posix(libc::EINVAL, String::new())),
                Err(e) => Err(e),
            };
            match r {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let parent = parent.0;
        if self.inner.frozen(parent) {
            return reply.error(erofs());
        }
        let (name, uid, gid) = (name.to_os_string(), req.uid(), req.gid());
        self.change(parent, move |s| s.reply_entry(s.entry(parent, &name, mode, umask, uid, gid, zfs_rdev(rdev), None), reply));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let parent = parent.0;
        if self.inner.frozen(parent) {
            return reply.error(erofs());
        }
        let (name, uid, gid) = (name.to_os_string(), req.uid(), req.gid());
        self.change(parent, move |s| s.reply_entry(s.entry(parent, &name, (mode & 0o7777) | 0o040000, umask, uid, gid, 0, None), reply));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let parent = parent.0;
        if self.inner.frozen(parent) {
            return reply.error(erofs());
        }
        let (name, uid, gid, target) = (link_name.to_os_string(), req.uid(), req.gid(), target.as_os_str().as_bytes().to_vec());
        self.change(parent, move |s| s.reply_entry(s.entry(parent, &name, 0o120777, 0, uid, gid, 0, Some(&target)), reply));
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, _flags: i32, reply: ReplyCreate) {
        let parent = parent.0;
        if self.inner.frozen(parent) {
            return reply.error(erofs());
        }
        let (name, uid, gid) = (name.to_os_string(), req.uid(), req.gid());
        self.change(parent, move |s| match s.entry(parent, &name, (mode & 0o7777) | 0o100000, umask, uid, gid, 0, None).and_then(|a| Ok((a, s.w()?))) {
            Ok((a, w)) => {
                *w.open.lock().unwrap().entry(s.obj(a.ino.0)).or_insert(0) += 1;
                reply.created(&s.attr_ttl, &a, Generation(0), FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (parent, name) = (parent.0, name.to_os_string());
        self.change_fs(self.inner.frozen(parent), parent, reply, move |s, w, os, fs| {
            pflags::check(os, Op::Remove { dir: s.obj(parent), name: name.as_bytes() })?;
            zplw::unlink(os, fs, s.obj(parent), name.as_bytes(), &w.open_marker())
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (parent, name) = (parent.0, name.to_os_string());
        self.change_fs(self.inner.frozen(parent), parent, reply, move |s, _, os, fs| {
            pflags::check(os, Op::Remove { dir: s.obj(parent), name: name.as_bytes() })?;
            zplw::rmdir(os, fs, s.obj(parent), name.as_bytes())
        });
    }

    fn rename(&self, _req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        let (parent, newparent, flags) = (parent.0, newparent.0, flags.bits());
        let (name, newname) = (name.to_os_string(), newname.to_os_string());
        // Renames between directories all go to one worker: they keep their order.
        let key = if parent == newparent { parent } else { 0 };
        let frozen = self.inner.frozen(parent) || self.inner.frozen(newparent);
        self.change_fs(frozen, key, reply, move |s, w, os, fs| {
            let (sdir, ddir) = (s.obj(parent), s.obj(newparent));
            pflags::check(os, Op::Rename { sdir, sname: name.as_bytes(), ddir, dname: newname.as_bytes() })?;
            if flags & zplw::RENAME_EXCHANGE != 0 {
                pflags::check(os, Op::Rename { sdir: ddir, sname: newname.as_bytes(), ddir: sdir, dname: name.as_bytes() })?;
            }
            zplw::rename(os, fs, sdir, name.as_bytes(), ddir, newname.as_bytes(), flags, &w.open_marker())
        });
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let ino = ino.0;
        let newparent = newparent.0;
        if self.inner.frozen(ino) || self.inner.frozen(newparent) {
            return reply.error(erofs());
        }
        let newname = newname.to_os_string();
        self.change(newparent, move |s| {
            let (o, d) = (s.obj(ino), s.obj(newparent));
            let r = s.w().and_then(|w| {
                w.durable(w.pool.with_fs_space(w.dsobj, 512, |os, _| {
                    pflags::check(os, Op::Link { obj: o, dir: d })?;
                    zplw::link(os, o, d, newname.as_bytes())
                }))
            });
            s.reply_entry(r.map(|a| s.fattr_live(&a)), reply)
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino.0;
        match &self.inner.backend {
            // An open for writing meets the file's immutable and append-only flags (may_open).
            Backend::ReadWrite(_) if !self.inner.frozen(ino) && (flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0) => {
                let (append, trunc) = (flags.0 & libc::O_APPEND != 0, flags.0 & libc::O_TRUNC != 0);
                self.change(ino, move |s| {
                    let obj = s.obj(ino);
                    let r = s.w().and_then(|w| {
                        let append_only = w.pool.with_fs_ro(w.dsobj, |os| {
                            pflags::check_open_write(os, obj, append, trunc)
                        })?;
                        *w.open.lock().unwrap().entry(obj).or_insert(0) += 1;
                        Ok(append_only)
                    });
                    match r {
                        // An append-only file is written through, never through a shared
                        // writable mapping (zfs_map refuses one; its pages would be written back
                        // below the end of the file, which is refused).
                        Ok(true) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
                        Ok(false) => reply.opened(FileHandle(0), FopenFlags::empty()),
                        Err(e) => reply.error(Errno::from_i32(e.errno())),
                    }
                });
            }
            Backend::ReadWrite(w) if !self.inner.frozen(ino) => {
                *w.open.lock().unwrap().entry(self.inner.obj(ino)).or_insert(0) += 1;
                reply.opened(FileHandle(0), FopenFlags::empty());
            }
            // Nothing here changes: the kernel keeps the file's pages across opens.
            _ if flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0 => reply.error(erofs()),
            // A read-only mount keeps no state per open file: ENOSYS tells the kernel so, and
            // from then on it opens files without asking (and sends no RELEASE), keeping their
            // pages across opens (FUSE's no_open, the kernel's default flags for it). Two round
            // trips fewer for every open(2) and close(2). (Not for a snapshot's file in a
            // writable mount: the answer holds for the whole mount, whose live files are
            // counted open.) The mount itself is read-only: a write open never gets here.
            Backend::ReadOnly(_) => reply.error(Errno::from_i32(libc::ENOSYS)),
            _ => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
        }
    }

    fn release(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        let ino = ino.0;
        let w = match &self.inner.backend {
            Backend::ReadWrite(w) if !self.inner.frozen(ino) => w,
            _ => return reply.ok(),
        };
        let obj = self.inner.obj(ino);
        let free = {
            let mut m = w.open.lock().unwrap();
            let c = m.entry(obj).or_insert(1);
            *c = c.saturating_sub(1);
            *c == 0 && {
                m.remove(&obj);
                w.orphans.lock().unwrap().remove(&obj)
            }
        };
        if free {
            // The last close of a file unlinked while open frees it: on the file's worker,
            // after the writes the kernel sent before.
            self.change(ino, move |s| {
                if let Ok(w) = s.w() {
                    let _ = w.with_fs_info(|os, fs| zplw::release(os, fs, obj));
                }
                reply.ok();
            });
        } else {
            reply.ok();
        }
    }

    fn read(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        let ino = ino.0;
        let job = move |s: &Inner| match s.read(ino, offset, size) {
            Ok(parts) => reply_parts(reply, &parts),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        };
        // A big read goes to a reader: the kernel's readahead sends reads of a stream several
        // at a time, and their copies then run side by side while this thread takes the next
        // request. A small one (random I/O) is not worth the hand-off.
        if size <= SMALL_READ {
            return self.read_op(job);
        }
        self.on_reader(job);
    }

    fn write(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, data: &[u8], wf: WriteFlags, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyWrite) {
        let ino = ino.0;
        let wf = wf.bits();
        if self.inner.frozen(ino) {
            return reply.error(erofs());
        }
        // FUSE_WRITE_KILL_SUIDGID: the writer lacks CAP_FSETID and the file has set-ID bits.
        let kill = (wf & WriteFlags::FUSE_WRITE_KILL_SUIDGID.bits() != 0).then(|| Caller::of(_req));
        fn write(s: &Inner, ino: u64, offset: u64, data: &[u8], kill: Option<Caller>, reply: ReplyWrite) {
            let obj = s.obj(ino);
            let in_group = kill.map(|c| move |gid| c.in_group(gid));
            let r = s.w().and_then(|w| {
                w.durable(w.pool.with_fs_space(w.dsobj, data.len() as u64, |os, _| {
                    pflags::check(os, Op::Write { obj, offset })?;
                    oxzfs::zfs_quota::check_write(os, obj)?;
                    zplw::write_as(os, obj, offset, data, os.props.recordsize, in_group.as_ref().map(|f| f as &dyn Fn(u64) -> bool))
                }))
            });
            match r {
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
        if self.inner.frozen(ino) {
            return reply.error(erofs());
        }
        self.change(ino, move |s| reply_empty(s.fallocate(ino, offset as i64, length as i64, mode), reply));
    }

    /// Nothing to do at close (writes are in the open txg already, fsync syncs): ENOSYS tells
    /// the kernel so, and it sends no more flushes, sparing every close(2) a round trip.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::from_i32(libc::ENOSYS));
    }

    /// fsync, fdatasync (and the kernel's fsync after an O_SYNC/O_DSYNC write): the intent
    /// log's commit for this file (zil_commit(zilog, foid): the namespace's changes and the
    /// file's own, not other files'), on the file's worker, after its writes. What nothing
    /// changes is always on stable storage.
    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let ino = ino.0;
        if self.inner.frozen(ino) {
            return reply.ok();
        }
        self.change_waiting(ino, move |s| reply_empty(s.w().and_then(|w| w.pool.zil_commit_obj(w.dsobj, s.obj(ino))), reply));
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.fsync(req, ino, fh, datasync, reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino.0;
        // A directory that never changes keeps its listing for the handle's life; the live
        // directories of a writable mount, and `.zfs/snapshot` there, are listed afresh.
        let fixed = match self.inner.backend {
            Backend::ReadOnly(_) => true,
            Backend::ReadWrite(_) => ino >> SNAP_SHIFT != 0 && ino >> 62 == 0,
        };
        if fixed {
            let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
            reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE);
        } else {
            reply.opened(FileHandle(0), FopenFlags::empty());
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        if fh.0 != 0 {
            self.inner.dirs.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh.0);
        }
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        let (ino, fh) = (ino.0, fh.0);
        self.read_op(move |s| s.readdir(ino, fh, offset, reply));
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus) {
        let (ino, fh) = (ino.0, fh.0);
        self.read_op(move |s| s.readdirplus(ino, fh, offset, reply));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // zfs_statvfs's numbers (the kernel sets f_fsid and f_type for FUSE mounts itself).
        let r = match &self.inner.backend {
            Backend::ReadWrite(w) => w.pool.statfs(w.dsobj).map(|s| (s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize as u32, s.namemax)),
            Backend::ReadOnly(fs) => fs.statfs().map(|s| (s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen)),
        };
        match r {
            Ok((blocks, bfree, bavail, files, ffree, bsize, namelen)) => reply.statfs(blocks, bfree, bavail, files, ffree, bsize, namelen, bsize),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn setxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        let ino = ino.0;
        if self.inner.frozen(ino) {
            return reply.error(erofs());
        }
        let (name, value) = (name.to_os_string(), value.to_vec());
        self.change(ino, move |s| {
            let obj = s.obj(ino);
            reply_empty(
                s.w().and_then(|w| {
                    w.durable(w.pool.with_fs_space(w.dsobj, value.len() as u64 + 4096, |os, txg| {
                        pflags::check(os, Op::Xattr { obj })?;
                        if posix_acl::is_acl_name(name.as_bytes()) {
                            let fs = zplw::open_fs(os, os.props.recordsize)?;
                            return posix_acl::set(os, &fs, obj, name.as_bytes(), Some(&value), flags, txg);
                        }
                        zplw::setxattr(os, obj, name.as_bytes(), &value, flags, txg)
                    }))
                }),
                reply,
            )
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let ino = ino.0;
        let name = name.as_bytes().to_vec();
        self.read_op(move |s| {
            let r = match s.node(ino) {
                Ok(Node::Obj { snap, obj, .. }) => s.view(snap.as_ref(), |v| v.getxattr(obj, &name)),
                Ok(_) => Err(ZfsError::Posix(libc::ENODATA, String::new())),
                Err(e) => Err(e),
            };
            match r {
                Ok(v) => xattr_reply(reply, &v, size),
                Err(e) => reply.error(Errno::from_i32(e.errno())),
            }
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let ino = ino.0;
        self.read_op(move |s| {
            let r = match s.node(ino) {
                Ok(Node::Obj { snap, obj, .. }) => s.view(snap.as_ref(), |v| v.listxattr(obj)),
                Ok(_) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
            match r {
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
        let (ino, name) = (ino.0, name.to_os_string());
        self.change_fs(self.inner.frozen(ino), ino, reply, move |s, _, os, fs| {
            pflags::check(os, Op::Xattr { obj: s.obj(ino) })?;
            if posix_acl::is_acl_name(name.as_bytes()) {
                return posix_acl::set(os, fs, s.obj(ino), name.as_bytes(), None, 0, 0);
            }
            zplw::removexattr(os, fs, s.obj(ino), name.as_bytes())
        });
    }

    /// lsattr, chattr and `zfs project` (zpl_ioctl): the file's flags and project id. Other
    /// ioctls (a terminal's TCGETS from every buffered open in some languages) are not ours:
    /// ENOTTY, as a file system without them answers.
    #[allow(clippy::too_many_arguments)]
    fn ioctl(&self, req: &Request, ino: INodeNo, _fh: FileHandle, _flags: IoctlFlags, cmd: u32, in_data: &[u8], _out_size: u32, reply: ReplyIoctl) {
        let ino = ino.0;
        match cmd {
            pflags::FS_IOC_GETFLAGS | pflags::FS_IOC32_GETFLAGS | pflags::FS_IOC_FSGETXATTR => self.read_op(move |s| {
                let r = match s.node(ino) {
                    Ok(Node::Obj { snap, obj, .. }) => s.view(snap.as_ref(), |v| Ok(v.znode(obj)?.z.clone())),
                    Ok(_) => Err(ZfsError::Posix(libc::ENOTTY, String::new())),
                    Err(e) => Err(e),
                };
                match r {
                    Ok(z) if cmd == pflags::FS_IOC_FSGETXATTR => reply.ioctl(0, &pflags::fsxattr(&z)),
                    Ok(z) => reply.ioctl(0, &pflags::fs_flags(&z).to_le_bytes()),
                    Err(e) => reply.error(Errno::from_i32(e.errno())),
                }
            }),
            pflags::FS_IOC_SETFLAGS | pflags::FS_IOC32_SETFLAGS | pflags::FS_IOC_FSSETXATTR => {
                if self.inner.frozen(ino) || !matches!(self.inner.backend, Backend::ReadWrite(_)) {
                    return reply.error(erofs());
                }
                let (data, who) = (in_data.to_vec(), pflags::Caller { uid: req.uid() });
                self.change(ino, move |s| {
                    let obj = s.obj(ino);
                    let r = s.w().and_then(|w| {
                        w.durable(w.with_fs_info(|os, fs| {
                            match cmd {
                                pflags::FS_IOC_FSSETXATTR => pflags::set_fsxattr(os, fs, obj, &data, who),
                                _ => match data.get(..4) {
                                    Some(b) => pflags::set_flags(os, fs, obj, u32::from_le_bytes(b.try_into().expect("4")), who),
                                    None => Err(ZfsError::Posix(libc::EINVAL, "no flags given".into())),
                                },
                            }
                            .map(|_| ())
                        }))
                    });
                    match r {
                        Ok(()) => reply.ioctl(0, &[]),
                        Err(e) => reply.error(Errno::from_i32(e.errno())),
                    }
                });
            }
            _ => reply.error(Errno::from_i32(libc::ENOTTY)),
        }
    }

    /// Only reached without default_permissions: writes to what never changes are refused.
    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.bits() & libc::W_OK != 0 && self.inner.frozen(ino.0) {
            reply.error(erofs())
        } else {
            reply.ok()
        }
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
