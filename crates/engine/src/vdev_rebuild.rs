//! vdev_rebuild: sequential reconstruction of a mirror (`zpool attach -s`, `zpool replace -s`),
//! OpenZFS 2.1's vdev_rebuild.c: the steps and the on-disk state. The thread that runs the
//! steps is `vdev_rebuild_thread`'s.
//!
//! ```text
//!   top-level vdev ZAP: com.delphix:vdev_rebuild = vdev_rebuild_phys_t, 12 uint64s:
//!       state (0 none, 1 active, 2 canceled, 3 complete), last_offset, min_txg, max_txg,
//!       start_time, end_time, scan_time_ms, bytes_scanned, bytes_issued, bytes_rebuilt,
//!       bytes_est, errors
//!   feature org.openzfs:device_rebuild: must be enabled; its count is one per top-level vdev
//!       whose rebuild is active (incremented at the start, decremented at the end or cancel)
//! ```
//!
//! A rebuild copies every allocated range of the top-level vdev (its metaslabs' allocated
//! space, in metaslab order, from `last_offset` on) from a side that holds every txg to the
//! sides whose DTL is not empty, in pieces of at most zfs_rebuild_max_segment, with no block
//! pointer and no checksum: it reads no block tree, and verifies nothing (the scrub that
//! follows, zfs_rebuild_scrub_enabled, does). Each step runs with txg syncs held off, so no
//! range it copies is freed and written anew meanwhile; `last_offset` and the figures reach
//! the MOS with the next sync, so an export or a crash goes on from there. At the end the
//! DTLs of the leaves below are cleared up to `max_txg` (the DTL's end when it began: every
//! later txg was written to every side), the state is complete and the feature's count drops.
//! A rebuild none of whose leaves lacks a txg any more (the new side detached or offline) is
//! canceled. While one is active no healing resilver covers its leaves, no scrub is set up and
//! a plain attach is refused; a healing resilver's setup zeroes the records of finished ones
//! (vdev_rebuild_clear_sync). `zpool status` reads the records from the synced MOS (`pool`).

use crate::dsl_pool::PoolW;
use crate::vdev::{Vdev, VdevKind, VdevState};
use crate::{Result, ZfsError};

/// VDEV_TOP_ZAP_VDEV_REBUILD_PHYS.
pub const VDEV_TOP_ZAP_VDEV_REBUILD_PHYS: &str = "com.delphix:vdev_rebuild";
/// SPA_FEATURE_DEVICE_REBUILD.
pub const DEVICE_REBUILD: &str = "org.openzfs:device_rebuild";
/// REBUILD_PHYS_ENTRIES.
pub const REBUILD_PHYS_ENTRIES: usize = 12;
/// vdev_rebuild_state_t.
pub const VDEV_REBUILD_NONE: u64 = 0;
pub const VDEV_REBUILD_ACTIVE: u64 = 1;
pub const VDEV_REBUILD_CANCELED: u64 = 2;
pub const VDEV_REBUILD_COMPLETE: u64 = 3;

/// vdev_rebuild_phys_t.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildPhys {
    pub state: u64,
    pub last_offset: u64,
    pub min_txg: u64,
    pub max_txg: u64,
    pub start_time: u64,
    pub end_time: u64,
    pub scan_time_ms: u64,
    pub bytes_scanned: u64,
    pub bytes_issued: u64,
    pub bytes_rebuilt: u64,
    pub bytes_est: u64,
    pub errors: u64,
}

impl RebuildPhys {
    pub fn to_words(&self) -> [u64; REBUILD_PHYS_ENTRIES] {
        [self.state, self.last_offset, self.min_txg, self.max_txg, self.start_time, self.end_time, self.scan_time_ms, self.bytes_scanned, self.bytes_issued, self.bytes_rebuilt, self.bytes_est, self.errors]
    }

    /// The entry as the ZAP holds it; None for one of another length (vdev_rebuild_load
    /// treats a damaged entry as no rebuild).
    pub fn from_words(w: &[u64]) -> Option<Self> {
        let w: &[u64; REBUILD_PHYS_ENTRIES] = w.try_into().ok()?;
        Some(Self {
            state: w[0],
            last_offset: w[1],
            min_txg: w[2],
            max_txg: w[3],
            start_time: w[4],
            end_time: w[5],
            scan_time_ms: w[6],
            bytes_scanned: w[7],
            bytes_issued: w[8],
            bytes_rebuilt: w[9],
            bytes_est: w[10],
            errors: w[11],
        })
    }
}

/// What a step of a rebuild found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Copied a piece; more is left.
    More,
    /// Nothing allocated is left past the last offset.
    Done,
    /// No leaf below lacks a txg any more (vdev_rebuild_should_cancel).
    Cancel,
}

/// The leaves of top-level vdev `top` a rebuild reads from (every txg, in use) and writes to
/// (their DTL is not empty, in use).
fn sides(top: &Vdev) -> (Vec<&Vdev>, Vec<&Vdev>) {
    let usable = |l: &&Vdev| l.dev.is_some() && !l.out_of_use() && l.state() == VdevState::Online;
    let leaves: Vec<&Vdev> = top.leaves().into_iter().filter(usable).collect();
    leaves.into_iter().partition(|l| !l.stats.stale())
}

/// vdev_resilver_needed over `leaves`: from just before the first txg a leaf in use misses to
/// the end of the last (vdev_dtl_min - 1, vdev_dtl_max); None when none misses any.
pub fn dtl_span<'a>(leaves: impl Iterator<Item = &'a Vdev>) -> Option<(u64, u64)> {
    let bounds = leaves.filter(|l| !l.out_of_use() && l.dev.is_some()).filter_map(|l| l.stats.dtl_bounds());
    bounds.fold(None, |acc: Option<(u64, u64)>, (a, b)| Some(acc.map_or((a, b), |(x, y)| (x.min(a), y.max(b))))).map(|(a, b)| (a.saturating_sub(1), b))
}

impl PoolW {
    /// The rebuild record of top-level vdev `top` (None: none, or the feature not enabled).
    pub fn rebuild_phys(&mut self, top: u64) -> Result<Option<RebuildPhys>> {
        if !self.feature_enabled(DEVICE_REBUILD) {
            return Ok(None);
        }
        let Some(zap) = self.top_zap(top) else { return Ok(None) };
        Ok(self.mos.zap(zap)?.entries.get(VDEV_TOP_ZAP_VDEV_REBUILD_PHYS.as_bytes()).and_then(|(_, w)| RebuildPhys::from_words(w)))
    }

    fn put_rebuild_phys(&mut self, top: u64, p: &RebuildPhys) -> Result<()> {
        let zap = self.top_zap(top).ok_or_else(|| ZfsError::Invalid(format!("vdev {top} has no top-level ZAP")))?;
        self.mos.zap_mut(zap)?.entries.insert(VDEV_TOP_ZAP_VDEV_REBUILD_PHYS.as_bytes().to_vec(), (8, p.to_words().to_vec()));
        Ok(())
    }

    /// The top-level vdevs whose rebuild is active (vdev_rebuild_active), by id.
    pub fn rebuilding_tops(&mut self) -> Result<Vec<u64>> {
        let n = self.top_count();
        let mut out = Vec::new();
        for top in 0..n {
            if self.rebuild_phys(top)?.is_some_and(|p| p.state == VDEV_REBUILD_ACTIVE) {
                out.push(top);
            }
        }
        Ok(out)
    }

    /// spa_vdev_attach's checks of `zpool attach/replace` against rebuilds: with -s
    /// (`rebuild`) the feature must be enabled and no healing resilver under way; without,
    /// no rebuild under way. `msg` is the command's "cannot ..." prefix.
    pub(crate) fn rebuild_attach_check(&mut self, rebuild: bool, replacing: bool, msg: &str) -> Result<()> {
        if rebuild {
            if !self.feature_enabled(DEVICE_REBUILD) {
                return Err(not_rebuildable(replacing, msg));
            }
            let s = self.spa.scan.stat();
            if s.scanning() && s.phys.func == oxzfs_format::dsl::POOL_SCAN_RESILVER {
                return Err(ZfsError::Posix(libc::EBUSY, format!("{msg}: currently resilvering")));
            }
        } else if !self.rebuilding_tops()?.is_empty() {
            return Err(ZfsError::Posix(libc::EBUSY, format!("{msg}: currently sequentially resilvering")));
        }
        Ok(())
    }

    /// vdev_rebuild_initiate_sync (or vdev_rebuild_reset_sync, when one is active already):
    /// the record of a new rebuild of `top` over txgs (`min_txg`, `max_txg`], the feature's
    /// count up by one for a new one, the history's internal record. Written with the next sync.
    pub(crate) fn rebuild_initiate(&mut self, top: u64, top_guid: u64, min_txg: u64, max_txg: u64) -> Result<()> {
        let old = self.rebuild_phys(top)?;
        let reset = old.is_some_and(|p| p.state == VDEV_REBUILD_ACTIVE);
        if !reset {
            self.feature_incr(DEVICE_REBUILD, 1)?;
        }
        let bytes_est = self.ms.lock().allocated_segments(top).iter().map(|s| s.1).sum();
        let t = crate::dsl_scan::now();
        let p = RebuildPhys { state: VDEV_REBUILD_ACTIVE, min_txg, max_txg, start_time: if reset { old.map_or(t, |o| o.start_time) } else { t }, bytes_est, ..Default::default() };
        self.put_rebuild_phys(top, &p)?;
        let what = if reset { "reset" } else { "started" };
        self.log_history_internal("rebuild", &format!("vdev_id={top} vdev_guid={top_guid} {what}"))
    }

    /// One step of the rebuild of `top` (vdev_rebuild_ranges): the allocated ranges past its
    /// last offset, up to `budget` bytes, read from a whole side and written to the sides
    /// that lack txgs, in pieces of zfs_rebuild_max_segment. `scan_time_ms`: the run time so
    /// far. Run with txg syncs held off.
    pub fn rebuild_step(&mut self, top: u64, budget: u64, scan_time_ms: u64) -> Result<Step> {
        let Some(mut p) = self.rebuild_phys(top)?.filter(|p| p.state == VDEV_REBUILD_ACTIVE) else { return Ok(Step::Done) };
        let root = self.spa.root_vdev.clone();
        let tv = root.children.get(top as usize).ok_or_else(|| ZfsError::Invalid(format!("no top-level vdev {top}")))?;
        let (sources, targets) = sides(tv);
        if targets.is_empty() {
            return Ok(Step::Cancel);
        }
        if sources.is_empty() {
            return Err(ZfsError::Posix(libc::ENXIO, format!("pool '{}': vdev {top} has no side to rebuild from", self.spa.name)));
        }
        let segs = self.ms.lock().allocated_segments_from(top, p.last_offset, budget);
        if segs.is_empty() {
            return Ok(Step::Done);
        }
        let piece = crate::tunables::rebuild_max_segment().max(1 << tv.ashift.max(9));
        // The pieces of this step, in order, up to the budget: (offset, length) of the I/O and
        // the allocated bytes it covers. The I/O is widened to DIRECT_ALIGN (a few bytes of free
        // space copied with it, within the metaslab: harmless) so that it is written past the
        // page cache, and thus to the disk while the next pieces are read.
        let align = crate::vdev::DIRECT_ALIGN as u64;
        let ms_end = |at: u64| ((at >> tv.metaslab_shift.max(1)) + 1) << tv.metaslab_shift.max(1);
        let mut pieces = Vec::new();
        let mut copied = 0u64;
        'segs: for (s, l) in segs {
            let mut at = s.max(p.last_offset);
            while at < s + l {
                if copied >= budget {
                    break 'segs;
                }
                let n = piece.min(s + l - at);
                let io_at = at / align * align;
                let io_end = (at + n).div_ceil(align).saturating_mul(align).min(ms_end(at)).max(at + n);
                pieces.push((io_at, io_end - io_at, n, at + n));
                at += n;
                copied += n;
            }
        }
        // Read on a thread of its own while the pieces read before are written, at most
        // zfs_rebuild_vdev_limit bytes ahead (vr_bytes_inflight_max); buffers go back and forth.
        let ahead = (crate::tunables::rebuild_vdev_limit() / piece).clamp(1, 64) as usize;
        let align = align as usize;
        // Where a piece at `at` goes in a buffer: its address matches the offset modulo
        // DIRECT_ALIGN, so that aligned pieces are written past the page cache.
        let place = |b: &Vec<u8>, at: u64| b.as_ptr().align_offset(align) + (at % align as u64) as usize;
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(u64, u64, u64, u64, Vec<u8>, bool)>(ahead);
        let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::scope(|sc| {
            let sources = &sources;
            let pieces = &pieces;
            let class = crate::vdev::iostat::current_class();
            sc.spawn(move || {
                let read = || {
                    for &(at, len, n, end) in pieces {
                        let mut b = free_rx.try_recv().unwrap_or_else(|_| vec![0u8; piece as usize + 4 * align]);
                        let o = place(&b, at);
                        let ok = sources.iter().any(|src| src.read_leaf_into(at, &mut b[o..o + len as usize]).is_ok());
                        if full_tx.send((at, len, n, end, b, ok)).is_err() {
                            return;
                        }
                    }
                };
                crate::vdev::iostat::in_class(class, read)
            });
            for (at, len, n, end, b, ok) in full_rx {
                if ok {
                    let o = place(&b, at);
                    for t in &targets {
                        match t.write_leaf_direct(at, &b[o..o + len as usize]) {
                            Ok(()) => {
                                p.bytes_rebuilt += n;
                                t.stats.rebuild_processed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(_) => p.errors += 1,
                        }
                    }
                } else {
                    p.errors += 1;
                }
                p.bytes_scanned += n;
                p.bytes_issued += n;
                p.last_offset = end;
                let _ = free_tx.send(b);
            }
        });
        p.scan_time_ms = scan_time_ms;
        self.put_rebuild_phys(top, &p)?;
        Ok(Step::More)
    }

    /// vdev_rebuild_complete_sync: complete, the DTLs of the leaves below cleared up to the
    /// rebuild's max_txg (vdev_dtl_reassess), the feature's count down. Synced.
    pub fn rebuild_complete(&mut self, top: u64, top_guid: u64, scan_time_ms: u64) -> Result<()> {
        let Some(mut p) = self.rebuild_phys(top)? else { return Ok(()) };
        p.state = VDEV_REBUILD_COMPLETE;
        p.end_time = crate::dsl_scan::now();
        p.scan_time_ms = scan_time_ms;
        self.put_rebuild_phys(top, &p)?;
        let root = self.spa.root_vdev.clone();
        if let Some(tv) = root.children.get(top as usize) {
            for l in tv.leaves().into_iter().filter(|l| !l.out_of_use() && l.dev.is_some()) {
                if l.stats.dtl_bounds().is_some_and(|(_, end)| end <= p.max_txg) {
                    l.stats.dtl_clear_below(p.max_txg);
                }
            }
        }
        self.feature_incr(DEVICE_REBUILD, -1)?;
        self.log_history_internal("rebuild", &format!("vdev_id={top} vdev_guid={top_guid} complete"))?;
        self.sync()
    }

    /// vdev_rebuild_cancel_sync: canceled, the feature's count down. Synced.
    pub fn rebuild_cancel(&mut self, top: u64, top_guid: u64) -> Result<()> {
        let Some(mut p) = self.rebuild_phys(top)?.filter(|p| p.state == VDEV_REBUILD_ACTIVE) else { return Ok(()) };
        p.state = VDEV_REBUILD_CANCELED;
        p.end_time = crate::dsl_scan::now();
        self.put_rebuild_phys(top, &p)?;
        self.feature_incr(DEVICE_REBUILD, -1)?;
        self.log_history_internal("rebuild", &format!("vdev_id={top} vdev_guid={top_guid} canceled"))?;
        self.sync()
    }

    /// vdev_rebuild_clear_sync of every top-level vdev: a record that is not active is zeroed
    /// where the top-level vdev ZAP has one.
    pub fn rebuild_clear_all(&mut self) -> Result<()> {
        let n = self.top_count();
        for top in 0..n {
            if self.rebuild_phys(top)?.is_some_and(|p| p.state != VDEV_REBUILD_ACTIVE && p != RebuildPhys::default()) {
                self.put_rebuild_phys(top, &RebuildPhys::default())?;
            }
            for l in self.spa.root_vdev.children.get(top as usize).map(|t| t.leaves()).unwrap_or_default() {
                l.stats.rebuild_processed.store(0, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// How many top-level vdevs the config has (holes and indirect ones counted).
    fn top_count(&self) -> u64 {
        self.config_nv.get_nvlist("vdev_tree").and_then(|t| t.get_nvlist_array("children")).map_or(0, |c| c.len() as u64)
    }

    /// The guid of top-level vdev `top` as the config has it.
    pub fn top_guid(&self, top: u64) -> u64 {
        self.top_config(top).and_then(|c| c.get_u64("guid")).unwrap_or(0)
    }
}

/// ENOTSUP of a -s attach or replace in libzfs's words (zpool_vdev_attach).
pub(crate) fn not_rebuildable(replacing: bool, msg: &str) -> ZfsError {
    let why = if replacing { "only mirror and dRAID vdevs support sequential reconstruction" } else { "can only attach to mirrors and top-level disks" };
    ZfsError::Posix(libc::ENOTSUP, format!("{msg}: {why}"))
}

/// spa_vdev_attach's check of a -s attach or replace: the top-level vdev that would hold the
/// new leaf must be a mirror (a top-level disk becomes one).
pub(crate) fn rebuild_top_ok(top: &Vdev, leaf: &Vdev) -> bool {
    std::ptr::eq(top, leaf) || top.kind == VdevKind::Mirror
}

/// The txgs (`min`, `max`] a rebuild of `top` covers, with `extra`, a new leaf's DTL end,
/// counted in (the leaf is in the config, not yet in the vdev tree).
pub(crate) fn rebuild_range(top: &Vdev, extra: u64) -> (u64, u64) {
    // The new leaf lacks every txg from the first: min_txg is 0.
    (0, dtl_span(top.leaves().into_iter()).map_or(extra, |n| n.1.max(extra)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phys_words_round_trip_and_wrong_lengths_are_none() {
        let p = RebuildPhys { state: VDEV_REBUILD_ACTIVE, last_offset: 1 << 20, min_txg: 0, max_txg: 42, start_time: 7, end_time: 0, scan_time_ms: 3, bytes_scanned: 9, bytes_issued: 9, bytes_rebuilt: 9, bytes_est: 100, errors: 0 };
        assert_eq!(RebuildPhys::from_words(&p.to_words()), Some(p));
        assert_eq!(RebuildPhys::from_words(&[1; 11]), None);
        assert_eq!(RebuildPhys::from_words(&[1; 13]), None);
    }
}
