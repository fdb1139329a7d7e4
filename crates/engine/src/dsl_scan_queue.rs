//! dsl_scan_queue: the sorted scan's queues (OpenZFS 0.8's two-phase scan, dsl_scan.c's
//! scan_io_t queues): the walk (`dsl_scan_walk`) hands each block it would read to these
//! queues instead of reading it, and the queues read them afterwards in the order of their
//! addresses on the disks, so a scrub or resilver reads each disk nearly front to back
//! instead of in the order of the datasets' trees.
//!
//! ```text
//!   one queue per top-level vdev (vdev_scan_io_queue), keyed by the offset of the block's
//!   first DVA there (q_sios_by_addr; a block already queued at that offset is not queued
//!   twice):
//!       offset ─► scan_io: the block pointer, its bookmark
//!   extents (q_exts_by_addr): runs of queued blocks whose gaps are at most
//!   zfs_scan_max_ext_gap; each with its fill (the bytes queued in it)
//!   issue order (zfs_scan_issue_strategy): 0 and 1, by address (what OpenZFS does when it
//!   checkpoints, which every issue here is: see below); 2, the extents by score first
//!   (q_exts_by_size: fill + fill% × fill × zfs_scan_fill_weight, compressed to its binary
//!   logarithm as OpenZFS does, the lower address first among equals), each by address
//! ```
//!
//! The walk (`dsl_scan_walk`, given a sink) hands the blocks over; `dsl_scrub` owns the queues
//! and issues them.
//!
//! Memory: the walk stops gathering when the queues hold as much as OpenZFS's hard limit
//! allows (dsl_scan_should_clear: physical memory / zfs_scan_mem_lim_fact, at least 16M,
//! at most 1/20 of the pool's allocated bytes), and then everything queued is issued.
//!
//! Why every issue is a checkpoint here: OpenZFS keeps its queues across txgs and takes out of
//! them each block a txg frees (dsl_scan_freed), and writes the bookmark only when the queues
//! are empty. Our scan holds txg syncs off for the whole of a turn — the walk that gathers and
//! the issue that empties the queues — so nothing queued is freed or reused before it is
//! read, and the bookmark the turn leaves has everything before it issued: a pause, an export
//! or a crash resumes from a bookmark that is true. A turn whose issue is cut short (a pause,
//! an export, zfs_scan_suspend_progress) is undone rather than left half issued: its bookmark
//! and figures go back to where it began, as OpenZFS goes back to its last checkpoint. How
//! much a turn gathers follows the rate its issues read at (`dsl_scrub`), so a turn stays
//! near zfs_scrub_min_time_ms of reading on slow disks as on fast ones. Gang blocks are read at once by the walk
//! (OpenZFS does the same); a block with several DVAs is queued at its first and reads all
//! of them when issued (each copy checked, bad ones rewritten, as the unsorted scan does).
//!
//! Locking: a queue is owned by the scan thread (no lock); the issue threads (one per
//! top-level vdev with blocks queued, as OpenZFS's dsl_scan_iss taskq) each take one queue.

use crate::dsl_scan_walk::Zb;
use oxzfs_format::blkptr::BlockPointer;
use std::collections::BTreeMap;

/// One queued read (scan_io_t).
pub struct ScanIo {
    pub bp: BlockPointer,
    pub zb: Zb,
}

/// OpenZFS's zfs_scan_mem_lim_min.
const MEM_LIM_MIN: u64 = 16 << 20;

/// What a queued block costs in memory (SIO_GET_MUSED, with the tree's share).
pub const SIO_MUSED: u64 = (std::mem::size_of::<ScanIo>() + std::mem::size_of::<u64>() * 4) as u64;

/// The per-top-level-vdev queues of a turn.
#[derive(Default)]
pub struct ScanQueues {
    /// Top-level vdev id → offset of the block's first DVA → the block.
    pub queues: BTreeMap<u64, BTreeMap<u64, ScanIo>>,
    /// Memory the queued blocks take (q_sio_memused over the queues).
    pub mem_used: u64,
    /// Allocated bytes of the queued blocks (every DVA).
    pub queued_asize: u64,
}

impl ScanQueues {
    /// dsl_scan_enqueue: queue `bp` (not embedded, not gang) at its first DVA. False when the
    /// block was queued already.
    pub fn insert(&mut self, bp: &BlockPointer, zb: &Zb) -> bool {
        let Some(dva) = bp.dvas().iter().find(|d| !d.is_empty()) else { return false };
        let q = self.queues.entry(dva.vdev).or_default();
        if q.contains_key(&dva.offset) {
            return false;
        }
        q.insert(dva.offset, ScanIo { bp: bp.clone(), zb: *zb });
        self.mem_used += SIO_MUSED;
        self.queued_asize += bp.asize_total();
        true
    }

    pub fn is_empty(&self) -> bool {
        self.queues.values().all(|q| q.is_empty())
    }

    /// Take the queues out for issuing, leaving these empty.
    pub fn take(&mut self) -> Vec<(u64, Vec<ScanIo>)> {
        self.mem_used = 0;
        self.queued_asize = 0;
        let strategy = crate::tunables::scan_issue_strategy();
        let gap = crate::tunables::scan_max_ext_gap();
        let weight = crate::tunables::scan_fill_weight();
        std::mem::take(&mut self.queues).into_iter().map(|(vdev, q)| (vdev, issue_order(q, strategy, gap, weight))).collect()
    }
}

/// dsl_scan_should_clear's hard limit for a pool with `allocated` bytes: physical memory /
/// zfs_scan_mem_lim_fact, at least 16M, at most 1/20 of what the pool has allocated.
pub fn mem_limit(allocated: u64) -> u64 {
    let physmem = crate::arc::physmem();
    let hard = (physmem / crate::tunables::scan_mem_lim_fact().max(1)).max(MEM_LIM_MIN);
    hard.min(allocated / 20).max(SIO_MUSED)
}

/// An extent of a queue (range_seg_gap_t): [start, end) and the bytes queued in it, with the
/// blocks it holds (`first..last` of the queue in address order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Extent {
    start: u64,
    end: u64,
    fill: u64,
    first: usize,
    last: usize,
}

/// The extents of a queue's blocks (in address order): blocks merged while the gap between
/// them is at most `gap`.
fn extents(q: &[(u64, ScanIo)], gap: u64) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::new();
    for (i, (off, sio)) in q.iter().enumerate() {
        let asize = sio.bp.dvas().first().map_or(0, |d| d.asize);
        match out.last_mut() {
            Some(e) if *off <= e.end.saturating_add(gap) => {
                e.end = e.end.max(off + asize);
                e.fill += asize;
                e.last = i + 1;
            }
            _ => out.push(Extent { start: *off, end: off + asize, fill: asize, first: i, last: i + 1 }),
        }
    }
    out
}

/// ext_size_value: an extent's score, the bytes queued in it plus its fill ratio (in 1/128)
/// times those bytes times `weight`, compressed to 64 minus its highest bit (lower first).
fn score_rank(e: &Extent, weight: u64) -> u64 {
    let size = (e.end - e.start).max(1);
    let ratio = (e.fill << 7) / size;
    let score = e.fill.saturating_add(ratio.saturating_mul(weight).saturating_mul(e.fill) >> 7);
    score.leading_zeros() as u64
}

/// The order a queue's blocks are issued in: by address (strategies 0 and 1), or the
/// extents by score, each by address (strategy 2).
fn issue_order(q: BTreeMap<u64, ScanIo>, strategy: u64, gap: u64, weight: u64) -> Vec<ScanIo> {
    if strategy != 2 {
        return q.into_values().collect();
    }
    let q: Vec<(u64, ScanIo)> = q.into_iter().collect();
    let mut exts = extents(&q, gap);
    exts.sort_by_key(|e| (score_rank(e, weight), e.start));
    let mut slots: Vec<Option<ScanIo>> = q.into_iter().map(|(_, s)| Some(s)).collect();
    exts.iter().flat_map(|e| e.first..e.last).filter_map(|i| slots[i].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxzfs_format::blkptr::Dva;

    fn bp(vdev: u64, offset: u64, asize: u64) -> BlockPointer {
        let mut b = BlockPointer::default();
        b.dva[0] = Dva { vdev, offset, asize, gang: false };
        b.birth = 5;
        b
    }

    fn q(blocks: &[(u64, u64)]) -> ScanQueues {
        let mut s = ScanQueues::default();
        for (i, &(off, asize)) in blocks.iter().enumerate() {
            assert!(s.insert(&bp(0, off, asize), &Zb { objset: 1, object: 2, level: 0, blkid: i as u64 }));
        }
        s
    }

    #[test]
    fn blocks_are_issued_by_address_once() {
        let mut s = q(&[(900, 100), (100, 100), (500, 100)]);
        assert!(!s.insert(&bp(0, 500, 100), &Zb::default()), "queued twice");
        assert_eq!(s.queued_asize, 300);
        assert!(s.insert(&bp(1, 50, 10), &Zb::default()));
        let out = s.take();
        assert!(s.is_empty() && s.mem_used == 0);
        let offs: Vec<(u64, Vec<u64>)> = out.iter().map(|(v, ios)| (*v, ios.iter().map(|x| x.bp.dva[0].offset).collect())).collect();
        assert_eq!(offs, vec![(0, vec![100, 500, 900]), (1, vec![50])]);
    }

    #[test]
    fn extents_merge_within_the_gap_and_the_fullest_go_first() {
        // two extents: [0, 300) full, [10000, 10100) then a lone block far away
        let s = q(&[(0, 100), (100, 100), (200, 100), (100_000, 100)]);
        let v: Vec<(u64, ScanIo)> = s.queues.into_values().next().unwrap().into_iter().collect();
        let ex = extents(&v, 1000);
        assert_eq!(ex, vec![Extent { start: 0, end: 300, fill: 300, first: 0, last: 3 }, Extent { start: 100_000, end: 100_100, fill: 100, first: 3, last: 4 }]);
        let ex2 = extents(&v, 99_800);
        assert_eq!(ex2, vec![Extent { start: 0, end: 100_100, fill: 400, first: 0, last: 4 }]);
        assert!(score_rank(&ex[0], 3) < score_rank(&ex[1], 3));
        // strategy 2: the small lone block at a low address goes after the full extent
        let mut s = q(&[(0, 100), (5_000_000, 100_000), (5_100_000, 100_000)]);
        let order: Vec<u64> = issue_order(std::mem::take(s.queues.get_mut(&0).unwrap()), 2, 1000, 3).iter().map(|x| x.bp.dva[0].offset).collect();
        assert_eq!(order, vec![5_000_000, 5_100_000, 0]);
    }
}
