//! Per-leaf I/O statistics beyond the counts (OpenZFS's `vdev_stat_ex_t`), for `zpool iostat
//! -l/-q/-w/-r`: a latency histogram and a request-size histogram per I/O class, and the
//! number of I/Os in flight per class.
//!
//! The classes are OpenZFS's queue priorities (sync read, sync write, async read, async write,
//! scrub, trim). A thread says which class its I/O belongs to with [`with_class`]: the intent
//! log's writes are sync writes, a scrub's reads are scrub reads; otherwise a read is a sync
//! read (a caller waits for it) and a write an async write (the txg sync's).
//!
//! Histograms have OpenZFS's buckets: power-of-two nanoseconds (37 buckets, `L_HISTO`) and
//! power-of-two bytes (25 buckets, `RQ_HISTO`). A leaf's I/O here is one positioned read or
//! write issued at once, with no queue in front of it: its total wait is its disk wait, queue
//! waits are never sampled (`zpool iostat -l` prints "-" for them, as OpenZFS does for a
//! histogram without samples) and no request is aggregated.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Latency histogram buckets (VDEV_L_HISTO_BUCKETS): bucket b counts latencies in [2^b, 2^(b+1)) ns.
pub const L_HISTO_BUCKETS: usize = 37;
/// Request-size histogram buckets (VDEV_RQ_HISTO_BUCKETS): bucket b counts sizes in [2^b, 2^(b+1)) bytes.
pub const RQ_HISTO_BUCKETS: usize = 25;
/// The I/O classes (ZIO_PRIORITY_NUM_QUEUEABLE minus rebuild and removal, which have no column).
pub const IO_CLASSES: usize = 6;

/// An I/O's class, in OpenZFS's priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoClass {
    SyncRead = 0,
    SyncWrite = 1,
    AsyncRead = 2,
    AsyncWrite = 3,
    Scrub = 4,
    Trim = 5,
}

impl IoClass {
    /// Whether the class's I/O writes (the trim class neither reads nor writes).
    pub fn is_write(self) -> bool {
        matches!(self, IoClass::SyncWrite | IoClass::AsyncWrite)
    }
}

thread_local! {
    static CLASS: Cell<Option<IoClass>> = const { Cell::new(None) };
}

/// Run `f` with this thread's leaf I/O counted in `class`.
pub fn with_class<R>(class: IoClass, f: impl FnOnce() -> R) -> R {
    let was = CLASS.with(|c| c.replace(Some(class)));
    let r = f();
    CLASS.with(|c| c.set(was));
    r
}

/// Run `f` with this thread's leaf I/O counted in `class` if it is one (a worker thread
/// taking the class of the thread that handed it the I/O, from [`current_class`]).
pub fn in_class<R>(class: Option<IoClass>, f: impl FnOnce() -> R) -> R {
    match class {
        Some(k) => with_class(k, f),
        None => f(),
    }
}

/// The class this thread's I/O is counted in, if one was set ([`with_class`]).
pub fn current_class() -> Option<IoClass> {
    CLASS.with(|c| c.get())
}

/// The class of a read or write issued now on this thread.
fn class_for(write: bool) -> IoClass {
    match current_class() {
        // A scrub thread's repair writes are the scrub's too (ZIO_PRIORITY_SCRUB); a class
        // set for writes says nothing of the reads the same thread does, and the reverse.
        Some(c) if c == IoClass::Scrub || c.is_write() == write => c,
        _ if write => IoClass::AsyncWrite,
        _ => IoClass::SyncRead,
    }
}

/// OpenZFS's HISTO(): the bucket of a value (0 for 0), capped at the last bucket.
pub fn bucket(val: u64, buckets: usize) -> usize {
    if val == 0 {
        0
    } else {
        ((63 - val.leading_zeros()) as usize).min(buckets - 1)
    }
}

/// The extended statistics of one leaf.
#[derive(Debug)]
pub struct IoStatsEx {
    /// Latency (disk = total here) per class.
    lat: [[AtomicU64; L_HISTO_BUCKETS]; IO_CLASSES],
    /// Request sizes of the individual (not aggregated) I/Os per class.
    rq: [[AtomicU64; RQ_HISTO_BUCKETS]; IO_CLASSES],
    /// I/Os in flight per class.
    active: [AtomicU64; IO_CLASSES],
}

impl Default for IoStatsEx {
    fn default() -> Self {
        IoStatsEx {
            lat: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            rq: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            active: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One I/O in flight on a leaf: counted active from [`IoStatsEx::begin`], recorded when dropped.
pub struct IoTimer<'a> {
    stats: &'a IoStatsEx,
    class: IoClass,
    size: u64,
    start: Instant,
}

impl Drop for IoTimer<'_> {
    fn drop(&mut self) {
        let c = self.class as usize;
        let ns = self.start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.stats.lat[c][bucket(ns, L_HISTO_BUCKETS)].fetch_add(1, Relaxed);
        self.stats.rq[c][bucket(self.size, RQ_HISTO_BUCKETS)].fetch_add(1, Relaxed);
        self.stats.active[c].fetch_sub(1, Relaxed);
    }
}

impl IoStatsEx {
    /// A read (`write` false) or write of `size` bytes starts now, in this thread's class.
    pub fn begin(&self, write: bool, size: u64) -> IoTimer<'_> {
        let class = class_for(write);
        self.active[class as usize].fetch_add(1, Relaxed);
        IoTimer { stats: self, class, size, start: Instant::now() }
    }

    pub fn snapshot(&self) -> IoStatsSnap {
        let load = |a: &[AtomicU64]| a.iter().map(|x| x.load(Relaxed)).collect::<Vec<u64>>();
        IoStatsSnap {
            lat: self.lat.iter().map(|h| load(h)).collect(),
            rq: self.rq.iter().map(|h| load(h)).collect(),
            active: load(&self.active),
        }
    }
}

/// A copy of [`IoStatsEx`] (or the sum over the leaves below a vdev), indexed by
/// `IoClass as usize`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoStatsSnap {
    pub lat: Vec<Vec<u64>>,
    pub rq: Vec<Vec<u64>>,
    pub active: Vec<u64>,
}

impl Default for IoStatsSnap {
    fn default() -> Self {
        IoStatsSnap {
            lat: vec![vec![0; L_HISTO_BUCKETS]; IO_CLASSES],
            rq: vec![vec![0; RQ_HISTO_BUCKETS]; IO_CLASSES],
            active: vec![0; IO_CLASSES],
        }
    }
}

impl IoStatsSnap {
    /// Add another leaf's statistics (a parent's are its children's sum, vdev_get_stats_ex).
    pub fn add(&mut self, o: &IoStatsSnap) {
        for (a, b) in self.lat.iter_mut().flatten().zip(o.lat.iter().flatten()) {
            *a += b;
        }
        for (a, b) in self.rq.iter_mut().flatten().zip(o.rq.iter().flatten()) {
            *a += b;
        }
        for (a, b) in self.active.iter_mut().zip(&o.active) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_openzfs_highbit_minus_one() {
        assert_eq!(bucket(0, L_HISTO_BUCKETS), 0);
        assert_eq!(bucket(1, L_HISTO_BUCKETS), 0);
        assert_eq!(bucket(2, L_HISTO_BUCKETS), 1);
        assert_eq!(bucket(4095, RQ_HISTO_BUCKETS), 11);
        assert_eq!(bucket(4096, RQ_HISTO_BUCKETS), 12);
        assert_eq!(bucket(1 << 30, RQ_HISTO_BUCKETS), 24);
        assert_eq!(bucket(u64::MAX, L_HISTO_BUCKETS), 36);
    }

    #[test]
    fn classes_follow_the_thread() {
        let s = IoStatsEx::default();
        drop(s.begin(false, 4096));
        drop(s.begin(true, 131072));
        with_class(IoClass::SyncWrite, || {
            drop(s.begin(true, 8192));
            drop(s.begin(false, 512));
        });
        with_class(IoClass::Scrub, || drop(s.begin(true, 4096)));
        let snap = s.snapshot();
        let n = |c: IoClass| snap.rq[c as usize].iter().sum::<u64>();
        assert_eq!((n(IoClass::SyncRead), n(IoClass::AsyncWrite), n(IoClass::SyncWrite), n(IoClass::Scrub)), (2, 1, 1, 1));
        assert_eq!(snap.rq[IoClass::SyncWrite as usize][13], 1);
        assert!(snap.active.iter().all(|&a| a == 0));
    }
}
