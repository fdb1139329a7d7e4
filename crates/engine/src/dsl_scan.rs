//! dsl_scan: the in-core state of a pool's scan (scrub) — OpenZFS's dsl_scan_t with the
//! `spa_scan_pass_*` fields of spa_t. The scan itself (the walk, the reads, the thread) is
//! `dsl_scrub`'s; the txg sync writes the on-disk half into the MOS.
//!
//! ```text
//!   MOS object directory (object 1): "scan" → dsl_scan_phys_t (24 uint64s, a fat ZAP entry):
//!     func (scrub, resilver), state (scanning / finished / canceled), queue_obj (a
//!     DMU_OT_SCAN_QUEUE ZAP of the datasets still to visit while scanning), min/max txg,
//!     cur_min/cur_max txg, start/end time, to_examine, examined, processed (bytes repaired),
//!     errors, ddt bookmark (left zero), bookmark, flags (DSF_SCRUB_PAUSED)
//! ```
//!
//! The phys is what `zpool status` reads after an import; the pass figures (bytes examined
//! and issued since this import or resume, time spent paused) exist only in memory, as in
//! OpenZFS. Each sync writes where the walk stands: the bookmark (scn_bookmark, with
//! cur_min/cur_max_txg of the dataset under way) and the datasets still to visit (the entries
//! of the queue object, "%llx" of the dataset → the txg it was queued with), in OpenZFS's order
//! (`dsl_scan_walk`): a scan cut short by pause, export or a crash goes on from there, whether
//! we or OpenZFS resume it, and its figures carry over (an import counts what was examined as
//! issued before this pass, dsl_scan_init).
//!
//! Locking: one mutex (a leaf) over everything; the condvar wakes `zpool wait` and `scrub -w`.

use oxzfs_format::dsl::{DslScanPhys, DSF_SCRUB_PAUSED, DSS_SCANNING};
use std::sync::{Condvar, Mutex, MutexGuard};

/// What a command asked the running scan to do (checked by its thread between blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    None,
    Pause,
    Cancel,
}

/// The scan's in-core state.
#[derive(Clone, Debug)]
pub struct ScanInner {
    pub phys: DslScanPhys,
    /// `phys` changed since a sync last wrote it.
    pub dirty: bool,
    /// This pass (import or resume): when it started, what it examined and issued.
    pub pass_start: u64,
    pub pass_exam: u64,
    pub pass_issued: u64,
    /// Bytes issued before this pass (scn_issued_before_pass).
    pub issued_before_pass: u64,
    /// When the scrub was paused (0: not paused), and the seconds this pass spent paused.
    pub pass_scrub_pause: u64,
    pub pass_scrub_spent_paused: u64,
    pub request: Request,
    /// A thread is scanning.
    pub running: bool,
    /// The datasets the walk has still to visit, with the txg each was queued with
    /// (scn_queue; the bookmark and the txg range of the dataset under way are in `phys`).
    pub queue: std::collections::BTreeMap<u64, u64>,
    /// The thread's last error, for the daemon's log.
    pub last_error: Option<String>,
}

/// A pool's scan state, shared by the pool handle, the scan thread and `zpool status`.
#[derive(Debug)]
pub struct ScanState {
    inner: Mutex<ScanInner>,
    cv: Condvar,
}

impl Default for ScanState {
    fn default() -> Self {
        ScanState::new(None, crate::dsl_scan::now())
    }
}

/// zb_objset of a walk with no dataset under way (its end, or its dataset destroyed).
pub const ZB_DESTROYED_OBJSET: u64 = u64::MAX;

/// Seconds since the epoch (gethrestime_sec).
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl ScanState {
    /// The state of a pool just opened, from its `scan` entry if it has one
    /// (dsl_scan_init and spa_scan_stat_init): a paused scrub counts as paused since now.
    pub fn new(phys: Option<DslScanPhys>, now: u64) -> ScanState {
        ScanState { inner: Mutex::new(fresh(phys, now)), cv: Condvar::new() }
    }

    /// Replace the state by the one read from the pool's MOS at open.
    pub fn load(&self, phys: Option<DslScanPhys>, now: u64) {
        *self.lock() = fresh(phys, now);
    }

    pub fn lock(&self) -> MutexGuard<'_, ScanInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wake everyone waiting for a change (`wait_while`).
    pub fn notify(&self) {
        self.cv.notify_all();
    }

    /// Wait while `f` holds, re-checking at every change.
    pub fn wait_while(&self, mut f: impl FnMut(&ScanInner) -> bool) {
        let g = self.lock();
        let _g = self.cv.wait_while(g, |s| f(s)).unwrap_or_else(|p| p.into_inner());
    }

    /// A copy of the state, for `zpool status`.
    pub fn stat(&self) -> ScanInner {
        self.lock().clone()
    }

    /// dsl_scan_ds_snapshotted: head `ds` got snapshot `snap` (syncing context, no walk under
    /// way): where the walk stands in the head, or its place in the queue, is the snapshot's
    /// now (visiting the snapshot queues the head again from the snapshot's txg).
    pub fn ds_snapshotted(&self, ds: u64, snap: u64) {
        let mut s = self.lock();
        if !s.scanning() {
            return;
        }
        if s.phys.bookmark[0] == ds {
            s.phys.bookmark[0] = snap;
        }
        if let Some(txg) = s.queue.remove(&ds) {
            s.queue.insert(snap, txg);
        }
        s.dirty = true;
    }

    /// dsl_scan_ds_destroyed: dataset `ds` goes (`next`: the snapshot or head after it, when
    /// it is a snapshot, which takes its place with the txgs it was to be visited from). A
    /// walk that stood in it goes on with the queue (a snapshot's next is queued from the
    /// walk's cur_min_txg: visited again whole, nothing of the destroyed one's is missed).
    pub fn ds_destroyed(&self, ds: u64, next: Option<u64>) {
        let mut s = self.lock();
        if !s.scanning() {
            return;
        }
        let mut requeue = s.queue.remove(&ds);
        if s.phys.bookmark[0] == ds {
            s.phys.bookmark = [crate::dsl_scan::ZB_DESTROYED_OBJSET, 0, 0, 0];
            requeue = Some(s.phys.cur_min_txg);
        }
        if let (Some(n), Some(txg)) = (next, requeue) {
            let t = s.queue.get(&n).map_or(txg, |&t| t.min(txg));
            s.queue.insert(n, t);
        }
        s.dirty = true;
    }

    /// The phys and dataset queue to write in this sync, if they changed.
    pub fn take_dirty(&self) -> Option<(DslScanPhys, Vec<(u64, u64)>)> {
        let mut s = self.lock();
        std::mem::take(&mut s.dirty).then(|| (s.phys.clone(), s.queue.iter().map(|(&a, &b)| (a, b)).collect()))
    }
}

/// The in-core state for `phys` (none: no scan ever), at time `now`.
fn fresh(phys: Option<DslScanPhys>, now: u64) -> ScanInner {
    let phys = phys.unwrap_or_default();
    let paused = phys.is_paused();
    ScanInner {
        issued_before_pass: phys.examined.saturating_sub(phys.skipped),
        phys,
        dirty: false,
        pass_start: now,
        pass_exam: 0,
        pass_issued: 0,
        pass_scrub_pause: if paused { now } else { 0 },
        pass_scrub_spent_paused: 0,
        request: Request::None,
        running: false,
        queue: Default::default(),
        last_error: None,
    }
}

impl ScanInner {
    /// A scan is under way (running or paused): dsl_scan_is_running.
    pub fn scanning(&self) -> bool {
        self.phys.state == DSS_SCANNING
    }

    pub fn paused(&self) -> bool {
        self.phys.flags & DSF_SCRUB_PAUSED != 0 && self.scanning()
    }

    /// Bytes issued in all (pss_issued).
    pub fn issued(&self) -> u64 {
        self.issued_before_pass + self.pass_issued
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxzfs_format::dsl::POOL_SCAN_SCRUB;

    #[test]
    fn a_paused_scrub_imports_paused_with_its_figures() {
        let phys = DslScanPhys { func: POOL_SCAN_SCRUB, state: DSS_SCANNING, examined: 5000, skipped: 1000, flags: DSF_SCRUB_PAUSED, ..Default::default() };
        let st = ScanState::new(Some(phys), 77);
        let s = st.stat();
        assert!(s.scanning() && s.paused());
        assert_eq!((s.pass_scrub_pause, s.issued()), (77, 4000));
        assert!(st.take_dirty().is_none());
        st.lock().dirty = true;
        assert_eq!(st.take_dirty().map(|p| p.0.examined), Some(5000));
        assert!(st.take_dirty().is_none());
        let none = ScanState::new(None, 1).stat();
        assert!(!none.scanning() && !none.paused());
    }
}
