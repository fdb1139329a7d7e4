//! dsl_scrub: `zpool scrub` — the scan of every block of a pool imported read-write, as
//! OpenZFS's dsl_scan.c runs it (its state is `dsl_scan`'s, its walk `dsl_scan_walk`'s).
//!
//! ```text
//!   zpool scrub ─► setup (under the pool lock): dsl_scan_phys = {scrub, scanning, max_txg =
//!                  the open txg, to_examine = allocated bytes, an empty scan-queue ZAP}, the
//!                  `scan` entry written, txg synced ─► the scan thread
//!   scan thread:  repeat (a turn): hold txg syncs off (PoolHandle::hold_syncs);
//!                 gather: walk the last synced tree from the bookmark, each block born by
//!                 max_txg into the sorted queues (`dsl_scan_queue`; "scanned"), for at most
//!                 zfs_scrub_min_time_ms, the queues' memory limit, or the bytes the last
//!                 issue read in that time; issue: read the queues in address order, every
//!                 copy of every block (ReadMode scrub + repair: mirror sides, raidz parity
//!                 against data, ditto DVAs; bad copies rewritten from good ones; adjacent
//!                 blocks as one range, zio::scan_run; a resilver's writes of the new side
//!                 on a writer thread, zio::write_runs, while the next range is read;
//!                 "issued"); the bookmark where the walk
//!                 stopped (nothing before it unread); let syncs go (and one run if it is
//!                 due: the scan's figures ride along into the MOS) ─► at the end: finished,
//!                 end time, queue freed, synced. zfs_scan_legacy=1: each block read as the
//!                 walk meets it (no queues).
//!   a turn cut short (pause, cancel, export, zfs_scan_suspend_progress during its issue):
//!                 undone, its bookmark and figures as when it began (its repairs stay)
//!   zpool scrub -p: the thread stops at a block boundary; DSF_SCRUB_PAUSED, synced
//!   zpool scrub (paused): flag cleared, the thread goes on from the bookmark
//!   zpool scrub -s: the thread stops; canceled, end time, queue freed, synced
//!   export: the thread stops at a block boundary; the pool keeps "scanning" on disk with its
//!           bookmark and dataset queue, and the next read-write import goes on from there
//!           (a crash: from what the last sync wrote, see `dsl_scan`)
//! ```
//!
//! Holding syncs off keeps the tree being walked whole: no block of it is freed or reused
//! until the walk lets go, and each turn starts again in the newest tree. Blocks born after
//! `max_txg` (written since the scrub began) are not read, but the walk descends through
//! them to the older blocks they point to.
//!
//! Lock order: the scan thread takes the pool's sync lock, then the scan state (a leaf); a
//! command stops the thread before it takes the pool lock, never while holding it.

use crate::dsl_pool::PoolW;
use crate::dsl_scan::{now, Request};
use crate::spa::Spa;
use crate::dsl_scan_walk::{ScanWalk, Zb};
use crate::txg::PoolHandle;
use crate::vdev::ReadMode;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::{DslScanPhys, DDT_CLASS_DUPLICATE, DMU_POOL_DIRECTORY_OBJECT, DSF_SCRUB_PAUSED, DSS_CANCELED, DSS_FINISHED, DSS_SCANNING, POOL_SCAN_RESILVER, POOL_SCAN_SCRUB};
use oxzfs_format::types::{DMU_OT_SCAN_QUEUE, DMU_OT_ZAP_OTHER};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What `zpool scrub` asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubCmd {
    /// Start a scrub, or resume a paused one.
    Start,
    /// `-p`
    Pause,
    /// `-s`
    Cancel,
}

/// The first pool version whose scan queue has its own object type (SPA_VERSION_DSL_SCRUB).
const SPA_VERSION_DSL_SCRUB: u64 = 11;
/// The directory entries of a pre-dsl_scan scrub, removed when a scan ends (dsl_scan_done).
const OLD_SCRUB_NAMES: [&str; 8] = ["scrub_bookmark", "scrub_ddt_bookmark", "scrub_ddt_class_max", "scrub_queue", "scrub_min_txg", "scrub_max_txg", "scrub_func", "scrub_errors"];

fn no_scrub() -> ZfsError {
    ZfsError::Posix(libc::ENOENT, "there is no active scrub".into())
}

/// `zpool scrub [-p | -s]` on a pool imported read-write (the errors carry libzfs's words).
pub fn scrub(h: &Arc<PoolHandle>, cmd: ScrubCmd) -> Result<()> {
    let spa = h.lock_open().spa.clone();
    {
        let s = spa.scan.lock();
        match cmd {
            // spa_scan_stop and dsl_scan_setup_check: a resilver is neither paused, canceled
            // nor replaced by a scrub.
            _ if s.scanning() && s.phys.func == POOL_SCAN_RESILVER => {
                return Err(ZfsError::Posix(libc::EBUSY, "currently resilvering".into()))
            }
            ScrubCmd::Start if s.scanning() && !s.paused() => {
                return Err(ZfsError::Posix(libc::EBUSY, "currently scrubbing; use 'zpool scrub -s' to cancel current scrub".into()))
            }
            ScrubCmd::Pause | ScrubCmd::Cancel if !s.scanning() => return Err(no_scrub()),
            ScrubCmd::Pause if s.paused() => return Err(ZfsError::Posix(libc::EBUSY, "scrub is paused; use 'zpool scrub' to resume".into())),
            _ => {}
        }
    }
    if cmd != ScrubCmd::Start {
        stop_thread(&spa, if cmd == ScrubCmd::Pause { Request::Pause } else { Request::Cancel });
    }
    let mut g = h.lock();
    let mut s = spa.scan.lock();
    let t = now();
    match cmd {
        ScrubCmd::Start if s.paused() => {
            // dsl_scrub_pause_resume_sync: the time paused leaves the rate alone.
            s.phys.flags &= !DSF_SCRUB_PAUSED;
            s.pass_scrub_spent_paused += t.saturating_sub(s.pass_scrub_pause);
            s.pass_scrub_pause = 0;
        }
        ScrubCmd::Start => {
            // dsl_scan_setup_check: not while a sequential resilver is active (libzfs names
            // any EBUSY that is not a scrub's "currently resilvering").
            if !g.rebuilding_tops()?.is_empty() {
                return Err(ZfsError::Posix(libc::EBUSY, "currently resilvering".into()));
            }
            // dsl_scan_setup_sync, after a sync that puts what was written so far on disk
            // (in to_examine and below max_txg).
            drop(s);
            g.sync()?;
            s = spa.scan.lock();
            let max_txg = g.txg;
            setup(&mut g, &mut s, POOL_SCAN_SCRUB, 0, max_txg, t)?;
        }
        _ if !s.scanning() => return Err(no_scrub()), // it finished meanwhile
        ScrubCmd::Pause => {
            s.phys.flags |= DSF_SCRUB_PAUSED;
            s.pass_scrub_pause = t;
        }
        ScrubCmd::Cancel => {
            s.queue.clear();
            end_scan(&mut g, &mut s.phys, DSS_CANCELED, t)?;
            drop(s);
            spa.errlog_rotate(false);
            s = spa.scan.lock();
        }
    }
    publish(h, g, s, &spa, cmd == ScrubCmd::Start)
}

/// The scan's new state into the MOS, synced; with `start`, the scan thread started on it.
fn publish(h: &Arc<PoolHandle>, mut g: impl std::ops::DerefMut<Target = PoolW>, mut s: std::sync::MutexGuard<'_, crate::dsl_scan::ScanInner>, spa: &Arc<Spa>, start: bool) -> Result<()> {
    write_phys(&mut g, &s)?;
    s.dirty = false;
    if start {
        s.running = true;
        s.request = Request::None;
    }
    drop(s);
    g.sync()?;
    drop(g);
    spa.scan.notify();
    if start {
        spawn(h.clone(), spa.clone());
    }
    Ok(())
}

/// dsl_scan_setup_sync: a new scan of blocks born in (`min_txg`, `max_txg`], with a fresh
/// scan-queue object and its figures at zero.
fn setup(g: &mut PoolW, s: &mut crate::dsl_scan::ScanInner, func: u64, min_txg: u64, max_txg: u64, t: u64) -> Result<()> {
    let queue_type = if g.version >= SPA_VERSION_DSL_SCRUB { DMU_OT_SCAN_QUEUE } else { DMU_OT_ZAP_OTHER };
    let queue_obj = g.mos.create_zap(queue_type, 0, 0, 0)?;
    if s.phys.queue_obj != 0 && g.mos.exists(s.phys.queue_obj) {
        g.mos.free_object(s.phys.queue_obj)?;
    }
    let (_, allocated) = g.ms.lock().space_totals();
    // An incremental scan (a resilver of the txgs a leaf missed) reads only the table's ditto
    // class first, the rest where the datasets meet it (dsl_scan_setup_sync).
    let ddt_class_max = if min_txg > crate::spa::TXG_INITIAL { oxzfs_format::ddt::DdtClass::Ditto as u64 } else { DDT_CLASS_DUPLICATE };
    s.phys = DslScanPhys { func, state: DSS_SCANNING, queue_obj, min_txg, max_txg, start_time: t, cur_min_txg: min_txg, cur_max_txg: max_txg, to_examine: allocated, ddt_class_max, ..Default::default() };
    s.pass_start = t;
    s.pass_exam = 0;
    s.pass_issued = 0;
    s.issued_before_pass = 0;
    s.pass_scrub_pause = 0;
    s.pass_scrub_spent_paused = 0;
    s.queue.clear();
    for l in g.spa.root_vdev.leaves() {
        l.stats.scan_processed.store(0, Ordering::Relaxed);
    }
    Ok(())
}

/// The txgs a resilver must cover (vdev_resilver_needed): from just before the first txg any
/// leaf in use misses to the end of the last (vdev_dtl_min, vdev_dtl_max); None when no leaf
/// in use misses any. The leaves of top-level vdevs being rebuilt (`rebuilding`, by id:
/// vdev_rebuild) are the rebuild's, not a resilver's.
fn resilver_needed(spa: &Spa, rebuilding: &[u64]) -> Option<(u64, u64)> {
    let tops = spa.root_vdev.children.iter().filter(|t| !rebuilding.contains(&t.id));
    crate::vdev_rebuild::dtl_span(tops.flat_map(|t| t.leaves()))
}

/// Start a resilver (dsl_resilver_restart) when a leaf in use misses txgs: a scrub under way
/// gives way to it, a resilver under way starts over with the new range. False when no leaf
/// needs one.
pub fn resilver(h: &Arc<PoolHandle>) -> Result<bool> {
    let spa = h.lock_open().spa.clone();
    stop_thread(&spa, Request::Pause);
    let mut g = h.lock();
    let rebuilding = g.rebuilding_tops()?;
    let Some((min_txg, max_txg)) = resilver_needed(&spa, &rebuilding) else {
        drop(g);
        resume_after_import(h);
        return Ok(false);
    };
    let mut s = spa.scan.lock();
    let t = now();
    setup(&mut g, &mut s, POOL_SCAN_RESILVER, min_txg, max_txg, t)?;
    // dsl_scan_setup_sync of a resilver: the records of finished sequential resilvers are
    // cleared (vdev_rebuild_clear_sync), so that status shows this scan.
    g.rebuild_clear_all()?;
    publish(h, g, s, &spa, true)?;
    Ok(true)
}

/// After a read-write import: a scan the pool was running (not paused) goes on from its
/// bookmark (dsl_scan_init leaves it scanning; the next sync resumes it); with
/// no scan under way, a leaf in use that misses txgs gets its resilver (spa_load's
/// vdev_resilver_needed check).
pub fn resume_after_import(h: &Arc<PoolHandle>) {
    let (spa, rebuilding) = {
        let mut g = h.lock_open();
        (g.spa.clone(), g.rebuilding_tops().unwrap_or_default())
    };
    {
        let s = spa.scan.lock();
        if !s.scanning() && !s.running && resilver_needed(&spa, &rebuilding).is_some() {
            drop(s);
            if let Err(e) = resilver(h) {
                spa.scan.lock().last_error = Some(e.to_string());
            }
            return;
        }
    }
    let go = {
        let mut s = spa.scan.lock();
        let go = s.scanning() && !s.paused() && !s.running;
        if go {
            s.running = true;
            s.request = Request::None;
        }
        go
    };
    if go {
        spawn(h.clone(), spa);
    }
}

/// Stop the scan thread, if one runs, leaving the scan's state as it is (export).
pub fn stop(h: &PoolHandle) {
    let spa = h.lock_open().spa.clone();
    stop_thread(&spa, Request::Pause);
}

/// Wait while the pool runs a scan of kind `func` (`zpool wait -t scrub`: POOL_SCAN_SCRUB,
/// `-t resilver`: POOL_SCAN_RESILVER); a paused scrub is not waited for.
pub fn wait_func(spa: &Spa, func: u64) {
    spa.scan.wait_while(|s| s.phys.func == func && s.scanning() && !s.paused() && s.running);
}

fn stop_thread(spa: &Spa, why: Request) {
    {
        let mut s = spa.scan.lock();
        if !s.running {
            return;
        }
        s.request = why;
    }
    spa.scan.wait_while(|s| s.running);
}

/// The `scan` entry of the pool directory and the dataset queue (dsl_scan_sync_state).
fn write_phys(g: &mut PoolW, s: &crate::dsl_scan::ScanInner) -> Result<()> {
    let queue: Vec<(u64, u64)> = s.queue.iter().map(|(&a, &b)| (a, b)).collect();
    g.scan_sync_state(&s.phys, &queue)
}

/// dsl_scan_done: the scan ends as `state`; its queue object and an old-style scrub's entries go.
fn end_scan(g: &mut PoolW, phys: &mut DslScanPhys, state: u64, t: u64) -> Result<()> {
    let dir = g.mos.zap_mut(DMU_POOL_DIRECTORY_OBJECT)?;
    for name in OLD_SCRUB_NAMES {
        dir.entries.remove(name.as_bytes());
    }
    if phys.queue_obj != 0 && g.mos.exists(phys.queue_obj) {
        g.mos.free_object(phys.queue_obj)?;
    }
    phys.queue_obj = 0;
    phys.flags &= !DSF_SCRUB_PAUSED;
    phys.state = state;
    phys.end_time = t;
    Ok(())
}

fn spawn(h: Arc<PoolHandle>, spa: Arc<Spa>) {
    let name = format!("scrub {}", spa.name);
    let s2 = spa.clone();
    let r = std::thread::Builder::new().name(name).spawn(move || {
        // The scan's reads and repair writes are counted as scrub I/O (ZIO_PRIORITY_SCRUB).
        let r = crate::vdev::iostat::with_class(crate::vdev::iostat::IoClass::Scrub, || run(&h, &spa));
        let mut s = spa.scan.lock();
        if let Err(e) = r {
            // The daemon's log shows it with the scan's status (`ScanInner::last_error`).
            s.last_error = Some(e.to_string());
        }
        s.running = false;
        s.request = Request::None;
        drop(s);
        spa.scan.notify();
    });
    if r.is_err() {
        s2.scan.lock().running = false;
        s2.scan.notify();
    }
}

/// What the first turn of a sorted scan gathers at most before it issues (allocated bytes),
/// and the least any turn gathers: later turns gather what the last issue's rate reads in
/// zfs_scrub_min_time_ms, so that a turn (which holds syncs off) stays about that long on
/// slow disks too, and a scan moves on — and can be held or exported — in steps of that size.
const ISSUE_BUDGET_FIRST: u64 = 1 << 20;
const ISSUE_BUDGET_MIN: u64 = 1 << 20;

/// How many ranges a resilver reads ahead of its writes (each a buffer of up to
/// zfs_vdev_aggregation_limit), and how many of them it writes at once: a device that takes
/// several requests together (a disk's queue, a network block device) is kept busy, as
/// OpenZFS keeps up to zfs_vdev_async_write_max_active writes in flight on each leaf.
const WRITES_AHEAD: usize = 4;
const RESILVER_WRITERS: usize = 4;

/// Issued bytes, repairs and errors into the scan's figures.
fn account(spa: &Spa, mode: &ReadMode, issued: u64, errors: u64) {
    let repaired = mode.repaired.swap(0, Ordering::Relaxed);
    let mut s = spa.scan.lock();
    s.phys.processed += repaired;
    s.pass_issued += issued;
    s.phys.errors += errors;
}

/// The largest gap between two queued blocks read as one range (zfs_vdev_read_gap_limit).
const RUN_GAP: u64 = 32 << 10;

/// How many ranges of one top-level vdev are read at once (each by a thread of its own, in
/// the queue's order, as OpenZFS keeps up to zfs_vdev_scrub_max_active scan reads in flight on
/// a leaf): while one waits for its device, another's blocks are checked.
const SCAN_READERS: usize = 3;

/// The runs of a vdev's queue: index ranges of the blocks read as one range (adjacent, gaps up
/// to RUN_GAP, up to zfs_vdev_aggregation_limit in all), each other block a run of its own.
fn runs_of(vdev: u64, ios: &[crate::dsl_scan_queue::ScanIo]) -> Vec<std::ops::Range<usize>> {
    let limit = crate::tunables::vdev_aggregation_limit();
    let runnable = |bp: &oxzfs_format::blkptr::BlockPointer| bp.dvas().iter().filter(|d| !d.is_empty()).count() == 1 && !bp.dva[0].is_empty() && !bp.dva[0].gang && bp.dva[0].vdev == vdev;
    let mut out = Vec::new();
    let mut i = 0;
    while i < ios.len() {
        let mut j = i + 1;
        if runnable(&ios[i].bp) {
            let start = ios[i].bp.dva[0].offset;
            let mut end = start + ios[i].bp.psize;
            while j < ios.len() && runnable(&ios[j].bp) {
                let d = ios[j].bp.dva[0];
                if d.offset < end || d.offset - end > RUN_GAP || d.offset + ios[j].bp.psize - start > limit {
                    break;
                }
                end = d.offset + ios[j].bp.psize;
                j += 1;
            }
        }
        out.push(i..j);
        i = j;
    }
    out
}

/// A range's buffer with the writes to make from it (a resilver's), and where its blocks start
/// in the vdev's queue.
type WriteJob<'a> = (Vec<u8>, Vec<crate::zio::RunWrite<'a>>, usize);

/// Names the type of a reader closure's argument, lifetime included (a closure's own
/// annotation cannot).
fn reader_fn<'a, F: Fn(std::sync::mpsc::SyncSender<WriteJob<'a>>)>(f: F) -> F {
    f
}

/// scan_io_queues_run: read the queued blocks, each top-level vdev's in its own threads, in
/// the queues' order, as the walk would have (every copy checked, bad ones rewritten, errors
/// counted and logged). Blocks next to each other (`runs_of`) are read as one range
/// (`zio::scan_run`), what fails there one by one; SCAN_READERS ranges at once. A resilver's
/// writes of the new sides go to RESILVER_WRITERS threads, from the buffers the ranges were
/// read into. A request (pause, cancel, export) or zfs_scan_suspend_progress cuts it short.
/// The bytes read, and whether it was cut short.
fn issue(spa: &Arc<Spa>, mode: &ReadMode, queues: Vec<(u64, Vec<crate::dsl_scan_queue::ScanIo>)>) -> (u64, bool) {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
    use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
    use std::sync::Mutex;
    let one = |vdev: u64, ios: Vec<crate::dsl_scan_queue::ScanIo>| {
        let ctx = crate::zio::ZioCtx { root: &spa.root_vdev, salt: &spa.checksum_salt, mode };
        let class = crate::vdev::iostat::current_class();
        let runs = runs_of(vdev, &ios);
        let record = |sio: &crate::dsl_scan_queue::ScanIo| -> u64 {
            let injected = crate::vdev::inject::data_fault(&spa.name, sio.zb.objset, sio.zb.object, sio.zb.level, sio.zb.blkid).is_some();
            if injected || crate::zio::read_physical(&ctx, &sio.bp).is_err() {
                spa.record_error(sio.zb.objset, sio.zb.object, sio.zb.level, sio.zb.blkid);
                return 1;
            }
            0
        };
        let (next, cut, bytes) = (AtomicUsize::new(0), AtomicBool::new(false), AtomicU64::new(0));
        // Writers share the queue; when they are all gone (a panic) its receiver goes with
        // them and a reader writes what it has itself.
        let (job_tx, job_rx) = sync_channel::<WriteJob>(WRITES_AHEAD);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (free_tx, free_rx) = channel::<Vec<u8>>();
        let free_rx = Mutex::new(free_rx);
        let writer = |job_rx: Arc<Mutex<Receiver<WriteJob>>>, free_tx: Sender<Vec<u8>>| {
            let mut failed = Vec::new();
            loop {
                let job = job_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                let Ok((buf, writes, base)) = job else { break };
                failed.extend(crate::zio::write_runs(mode, &buf, &writes).into_iter().flat_map(|w| w.blocks.clone()).map(|k| base + k));
                let _ = free_tx.send(buf);
            }
            failed
        };
        let reader = reader_fn(|job_tx| {
            let mut bufs = Vec::new();
            loop {
                if cut.load(Ordering::Relaxed) {
                    return;
                }
                if spa.scan.lock().request != Request::None || crate::tunables::scan_suspend_progress() {
                    cut.store(true, Ordering::Relaxed);
                    return;
                }
                let Some(r) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else { return };
                let run = &ios[r.clone()];
                let mut writes = Vec::new();
                let done = if run.len() > 1 {
                    crate::zio::scan_run(&ctx, vdev, &run.iter().map(|s| &s.bp).collect::<Vec<_>>(), &mut bufs, &mut writes)
                } else {
                    vec![false]
                };
                let mut errors: u64 = 0;
                if !writes.is_empty() {
                    let spare = free_rx.lock().unwrap_or_else(|e| e.into_inner()).try_recv().unwrap_or_default();
                    let buf = std::mem::replace(&mut bufs[0], spare);
                    if let Err(e) = job_tx.send((buf, writes, r.start)) {
                        let (buf, writes, _) = e.0;
                        let failed: Vec<usize> = crate::zio::write_runs(mode, &buf, &writes).into_iter().flat_map(|w| w.blocks.clone()).collect();
                        errors += failed.into_iter().map(|k| record(&run[k])).sum::<u64>();
                    }
                }
                errors += run.iter().zip(done).filter(|(_, ok)| !ok).map(|(sio, _)| record(sio)).sum::<u64>();
                let asize: u64 = run.iter().map(|s| s.bp.asize_total()).sum();
                bytes.fetch_add(asize, Ordering::Relaxed);
                account(spa, mode, asize, errors);
            }
        });
        std::thread::scope(|sc| {
            let writers: Vec<_> = (0..if mode.resilver { RESILVER_WRITERS } else { 0 })
                .map(|_| {
                    let (writer, job_rx, free_tx) = (&writer, job_rx.clone(), free_tx.clone());
                    sc.spawn(move || crate::vdev::iostat::in_class(class, || writer(job_rx, free_tx)))
                })
                .collect();
            drop(job_rx);
            let readers: Vec<_> = (1..SCAN_READERS.min(runs.len()))
                .map(|_| {
                    let (reader, job_tx) = (&reader, job_tx.clone());
                    sc.spawn(move || crate::vdev::iostat::in_class(class, || reader(job_tx)))
                })
                .collect();
            reader(job_tx);
            for r in readers {
                if r.join().is_err() {
                    cut.store(true, Ordering::Relaxed);
                }
            }
            if cut.load(Ordering::Relaxed) {
                // The writers finish what they were handed (their failures are read again by
                // the turn that walks here next).
                for w in writers {
                    let _ = w.join();
                }
                return (bytes.load(Ordering::Relaxed), true);
            }
            // The runs whose write failed: read (and repaired, or logged) one by one.
            let failed: Vec<usize> = writers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect();
            let errors = failed.into_iter().map(|k| record(&ios[k])).sum();
            account(spa, mode, 0, errors);
            (bytes.load(Ordering::Relaxed), false)
        })
    };
    let sum = |rs: Vec<(u64, bool)>| rs.into_iter().fold((0, false), |(b, c), (b2, c2)| (b + b2, c || c2));
    if queues.len() <= 1 {
        return sum(queues.into_iter().map(|(v, ios)| one(v, ios)).collect());
    }
    let class = crate::vdev::iostat::current_class();
    std::thread::scope(|sc| {
        let hs: Vec<_> = queues
            .into_iter()
            .map(|(v, ios)| {
                let one = &one;
                sc.spawn(move || crate::vdev::iostat::in_class(class, || one(v, ios)))
            })
            .collect();
        sum(hs.into_iter().map(|h| h.join().unwrap_or((0, true))).collect())
    })
}

/// The scan thread: turns of the walk until the end or a request.
fn run(h: &Arc<PoolHandle>, spa: &Arc<Spa>) -> Result<()> {
    let resilvering = spa.scan.lock().phys.func == POOL_SCAN_RESILVER;
    let mode = if resilvering { ReadMode::resilver() } else { ReadMode::new(true, true) };
    {
        // A walk from the beginning (a new scan, or one whose bookmark is at the start) counts
        // everything again: the figures of the walk start over, the repairs and errors found
        // so far stay. A walk from a bookmark keeps them.
        let mut s = spa.scan.lock();
        if s.phys.bookmark == [0; 4] && s.queue.is_empty() {
            s.phys.examined = 0;
            s.phys.skipped = 0;
            s.issued_before_pass = 0;
            s.pass_exam = 0;
            s.pass_issued = 0;
        }
    }
    let mut queues = crate::dsl_scan_queue::ScanQueues::default();
    // The dedup table's copies this process's table phase read (see dsl_scan_walk).
    let mut ddt_read = std::collections::HashSet::new();
    // Bytes per second the last issue read (None before the first).
    let mut issue_rate: Option<f64> = None;
    loop {
        {
            let s = spa.scan.lock();
            if s.request != Request::None || !s.scanning() {
                return Ok(());
            }
        }
        if crate::tunables::scan_suspend_progress() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let stopped = {
            let _hold = h.hold_syncs();
            // Where the walk stands, read once syncs are held: no snapshot or destroy moves it
            // until the turn has written it back.
            let (phys, queue, before) = {
                let s = spa.scan.lock();
                (s.phys.clone(), s.queue.clone(), (s.phys.examined, s.phys.errors, s.pass_exam, s.pass_issued))
            };
            let deadline = std::time::Instant::now() + crate::tunables::scrub_min_time();
            // The sorted scan gathers while its queues fit in memory and what they hold can be
            // read in about a turn's time (at the rate of the last issue), then reads them all.
            let sorted = !crate::tunables::scan_legacy();
            let mem_limit = crate::dsl_scan_queue::mem_limit(phys.to_examine);
            let issue_budget = issue_rate.map_or(ISSUE_BUDGET_FIRST, |r| (r * crate::tunables::scrub_min_time().as_secs_f64()) as u64).max(ISSUE_BUDGET_MIN);
            let queued = std::cell::Cell::new((0u64, 0u64));
            let stop = || {
                let (mem, asize) = queued.get();
                std::time::Instant::now() >= deadline || mem >= mem_limit || asize >= issue_budget || spa.scan.lock().request != Request::None || crate::tunables::scan_suspend_progress()
            };
            let mut progress = |_: &Zb, bp: &oxzfs_format::blkptr::BlockPointer, ok: bool| {
                let asize = bp.asize_total();
                let repaired = mode.repaired.swap(0, Ordering::Relaxed);
                let mut s = spa.scan.lock();
                s.phys.examined += asize;
                s.phys.processed += repaired;
                s.pass_exam += asize;
                s.pass_issued += asize;
                if !ok {
                    s.phys.errors += 1;
                }
            };
            let mut sink = |zb: &Zb, bp: &oxzfs_format::blkptr::BlockPointer| {
                if queues.insert(bp, zb) {
                    queued.set((queues.mem_used, queues.queued_asize));
                    let asize = bp.asize_total();
                    let mut s = spa.scan.lock();
                    s.phys.examined += asize;
                    s.pass_exam += asize;
                }
            };
            let mut walk = ScanWalk::new(spa, &mode, &phys, queue, &stop, &mut progress);
            if sorted {
                walk.sink = Some(&mut sink);
            }
            walk.ddt_read = Some(&mut ddt_read);
            let done = walk.visit();
            // Where the walk stands, for the next turn and the next sync (one with the figures).
            let (bookmark, ddt_bookmark, cur_min, cur_max, queue) = (walk.bookmark, walk.ddt_bookmark, walk.cur_min_txg, walk.cur_max_txg, std::mem::take(&mut walk.queue));
            drop(walk);
            // Everything queued is read before the turn lets syncs go (see dsl_scan_queue):
            // the bookmark it leaves has nothing unread before it.
            let t = std::time::Instant::now();
            let (bytes, cut) = issue(spa, &mode, queues.take());
            if bytes > 0 && !cut {
                issue_rate = Some(bytes as f64 / t.elapsed().as_secs_f64().max(1e-4));
            }
            let mut s = spa.scan.lock();
            if cut {
                // Held, paused, exported or canceled before all was read: the turn is undone
                // (its bookmark and figures as they were when it began; the repairs it made
                // stay made), and the next turn walks from there again.
                (s.phys.examined, s.phys.errors, s.pass_exam, s.pass_issued) = before;
                Some(())
            } else {
                s.phys.bookmark = bookmark.words();
                s.phys.ddt_bookmark = ddt_bookmark;
                s.phys.cur_min_txg = cur_min;
                s.phys.cur_max_txg = cur_max;
                s.queue = queue;
                s.dirty = true;
                (!done).then_some(())
            }
        };
        match stopped {
            Some(()) => {
                h.sync_if_due()?;
                // Let a command or the sync thread waiting for the pool have it.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            None => {
                let mut g = h.lock();
                let mut s = spa.scan.lock();
                if s.request != Request::None {
                    return Ok(()); // paused or canceled as the walk ended: the command decides
                }
                s.phys.processed += mode.repaired.swap(0, Ordering::Relaxed);
                if (resilvering || s.phys.min_txg == 0) && s.phys.errors == 0 {
                    // vdev_dtl_reassess after a resilver or scrub without errors: the txgs it
                    // covered are on every leaf in use (the DTL space maps go out with this
                    // sync).
                    for l in spa.root_vdev.leaves().into_iter().filter(|l| !l.out_of_use() && l.dev.is_some()) {
                        l.stats.dtl_clear_below(s.phys.max_txg);
                    }
                }
                end_scan(&mut g, &mut s.phys, DSS_FINISHED, now())?;
                drop(s);
                spa.errlog_rotate(true);
                let mut s = spa.scan.lock();
                s.queue.clear();
                write_phys(&mut g, &s)?;
                s.dirty = false;
                drop(s);
                return g.sync();
            }
        }
    }
}
