//! vdev_rebuild_thread: the thread of a pool's sequential reconstructions (OpenZFS's
//! vdev_rebuild_thread, one for all the top-level vdevs being rebuilt here), its stop and
//! wait. The steps and the record on disk are `vdev_rebuild`'s.
//!
//! ```text
//!   zpool attach/replace -s ─► PoolW::vdev_attach (the record, active, synced with the new
//!            leaf) ─► reopen ─► resume_after_import: a scrub under way is canceled, the thread
//!   thread:  repeat: under the pool's lock (no txg syncs, no intent-log writes meanwhile) one
//!            rebuild_step of zfs_rebuild_vdev_limit bytes for each leaf of each top-level vdev
//!            being rebuilt ─► let go; a sync when one is due (the offset and figures ride
//!            along) ─► at the end: rebuild_complete (DTLs cleared, synced); when no rebuild
//!            is left and zfs_rebuild_scrub_enabled, a scrub to verify the checksums
//!   export ─► the thread stops; the rebuild stays active on disk, and the next read-write
//!            import goes on from its last offset (resume_after_import)
//!   zpool attach -w, zpool wait -t resilver ─► wait while the thread runs
//! ```
//!
//! zfs_scan_suspend_progress=1 holds the thread between steps, as it holds OpenZFS's.
//!
//! Lock order: the thread takes the pool (`PoolHandle::lock`) and never holds its own state
//! (`PoolHandle::rebuild`, a leaf) across it; commands stop the thread before they take the pool.

use crate::txg::PoolHandle;
use crate::vdev_rebuild::Step;
use crate::vdev_removal::RemovalRequest;
use crate::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// After a read-write import, a reopen or an attach -s: the rebuilds the pool has active go on.
pub fn resume_after_import(h: &Arc<PoolHandle>) {
    let active = h.lock_open().rebuilding_tops().unwrap_or_default();
    if active.is_empty() {
        return;
    }
    // vdev_rebuild_thread: a scrub under way is canceled (a resilver of other vdevs is not).
    let spa = h.spa();
    let scrubbing = {
        let s = spa.scan.stat();
        s.scanning() && s.phys.func == oxzfs_format::dsl::POOL_SCAN_SCRUB
    };
    if scrubbing {
        let _ = crate::dsl_scrub::scrub(h, crate::dsl_scrub::ScrubCmd::Cancel);
    }
    let Some(id) = h.rebuild.begin() else { return };
    let h2 = h.clone();
    let spawned = std::thread::Builder::new().name(format!("rebuild {}", h.name())).spawn(move || {
        let res = crate::vdev::iostat::with_class(crate::vdev::iostat::IoClass::Scrub, || run(&h2));
        if let Err(e) = &res {
            tracing::warn!("pool '{}': sequential resilver stopped: {e}", h2.name());
        }
        h2.rebuild.finish(id, res.err().map(|e| e.to_string()));
    });
    if spawned.is_err() {
        h.rebuild.finish(id, None);
    }
}

/// Stop the thread, if one runs, leaving the rebuilds active on disk (export, reopen).
pub fn stop(h: &PoolHandle) {
    h.rebuild.stop_thread();
}

/// Wait while the thread runs (`zpool attach -s -w`, `zpool wait -t resilver`).
pub fn wait(h: &PoolHandle) {
    h.rebuild.wait_while(|r| r.running);
}

/// Whether the thread runs (a rebuild is going on in this process).
pub fn running(h: &PoolHandle) -> bool {
    h.rebuild.lock().running
}

fn run(h: &Arc<PoolHandle>) -> Result<()> {
    let started = std::time::Instant::now();
    // Each vdev's run time before this pass (vr_prev_scan_time_ms).
    let mut before: HashMap<u64, u64> = HashMap::new();
    loop {
        if h.rebuild.lock().request != RemovalRequest::None {
            return Ok(());
        }
        if crate::tunables::scan_suspend_progress() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let mut completed = false;
        let left = {
            let mut g = h.lock();
            let tops = g.rebuilding_tops()?;
            for &top in &tops {
                let prev = match before.get(&top) {
                    Some(&ms) => ms,
                    None => {
                        let ms = g.rebuild_phys(top)?.map_or(0, |p| p.scan_time_ms);
                        *before.entry(top).or_insert(ms)
                    }
                };
                let ms = prev + started.elapsed().as_millis() as u64;
                let leaves = g.spa.root_vdev.children.get(top as usize).map_or(1, |t| t.leaves().len() as u64);
                let guid = g.top_guid(top);
                match g.rebuild_step(top, crate::tunables::rebuild_vdev_limit() * leaves.max(1), ms)? {
                    Step::More => {}
                    Step::Done => {
                        g.rebuild_complete(top, guid, ms)?;
                        completed = true;
                    }
                    Step::Cancel => g.rebuild_cancel(top, guid)?,
                }
            }
            g.rebuilding_tops()?.len()
        };
        if left == 0 {
            // vdev_rebuild_complete_sync: the last rebuild done, a scrub verifies what it
            // copied (one under way or paused is left as it is: dsl_scan_setup_check).
            if completed && crate::tunables::rebuild_scrub_enabled() && !h.spa().scan.stat().scanning() {
                if let Err(e) = crate::dsl_scrub::scrub(h, crate::dsl_scrub::ScrubCmd::Start) {
                    tracing::warn!("pool '{}': the scrub after a sequential resilver: {e}", h.name());
                }
            }
            return Ok(());
        }
        h.sync_if_due()?;
        // Let writers and commands waiting for the pool have it.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
