//! vdev_removal_thread: the evacuation of a top-level vdev in the background (OpenZFS's
//! spa_vdev_remove_thread), its stop, cancel and wait. The steps themselves are
//! `vdev_removal`'s.
//!
//! ```text
//!   zpool remove ─► start: PoolW::start_removal (synced) ─► the thread; the command returns
//!   thread:  repeat: under the pool's hold (no txg syncs meanwhile) one removal_step of
//!            zfs_remove_max_segment bytes ─► let go; a sync when REMOVE_TXG_BYTES were
//!            copied since the last, else when one is due ─► at the end (nothing left):
//!            complete_removal in the same hold, then the pool opened again (the vdev is
//!            indirect now), a scrub going on over the new one
//!   zpool remove -s ─► the thread stops at a step's end; cancel_removal (synced); a read
//!            or write error of a copy cancels the removal in the same way
//!   export ─► the thread stops; the removal stays in progress on disk, and the next
//!            read-write import goes on from the mapping it has (resume_after_import)
//!   zpool remove -w, zpool wait -t remove ─► wait while the thread runs; the error that
//!            stopped it, if one did, is theirs to print (and exit 1)
//! ```
//!
//! Out of space: a step halves its allocations down to one sector (spa_vdev_copy_impl); when
//! even that fails the thread has up to three txgs synced (deferred frees come back) and
//! tries again, then stops with the error, the removal left in progress.
//!
//! zfs_removal_suspend_progress=1 holds the thread between steps (tests).
//!
//! Lock order: the thread takes the pool (`PoolHandle::lock`) and never holds the removal
//! state (`PoolHandle::removal`, a leaf) across it; commands stop the thread before they take
//! the pool.

use crate::txg::PoolHandle;
use crate::vdev_removal::RemovalRequest;
use crate::{Result, ZfsError};
use std::sync::Arc;

/// Bytes copied before the thread has a txg synced (its copies and mapping made durable and
/// resumable): OpenZFS bounds what is in flight by zfs_remove_max_copy_bytes, 64M.
pub const REMOVE_TXG_BYTES: u64 = 64 << 20;

/// Begin the evacuation of top-level vdev `top` and leave it to the thread. Returns the id
/// of the thread's run (for `wait`).
pub fn start(h: &Arc<PoolHandle>, top: u64) -> Result<u64> {
    h.lock().start_removal(top)?;
    Ok(spawn(h))
}

/// After a read-write import (or a reopen): an evacuation in progress goes on.
pub fn resume_after_import(h: &Arc<PoolHandle>) {
    let removing = h.lock().removing_vdev().ok().flatten();
    if removing.is_some() {
        spawn(h);
    }
}

/// Stop the thread, if one runs, leaving the removal as it is (export, cancel).
pub fn stop(h: &PoolHandle) {
    h.removal.stop_thread();
}

/// `zpool remove -s`: stop the thread and cancel the removal.
pub fn cancel(h: &Arc<PoolHandle>) -> Result<()> {
    stop(h);
    let r = h.lock().cancel_removal();
    h.removal.notify();
    r
}

/// Wait while the pool evacuates a vdev (`zpool remove -w`, `zpool wait -t remove`).
/// Returns the error that stopped the evacuation, when it stopped on one: that of run `run`
/// (the one `zpool remove -w` started), or with no run named, that of a run which was going
/// when the wait began or which left the removal in progress.
pub fn wait(h: &PoolHandle, run: Option<u64>) -> Option<String> {
    let (was_running, current) = {
        let r = h.removal.lock();
        (r.running, r.runs)
    };
    h.removal.wait_while(|r| r.running);
    let (failed_run, err) = h.removal.lock().last_error.clone()?;
    let report = match run {
        Some(id) => id == failed_run,
        None => (was_running && failed_run == current) || h.lock().removing_vdev().ok().flatten().is_some(),
    };
    report.then_some(err)
}

/// The error that stopped the last run of the thread, if any.
pub fn last_error(h: &PoolHandle) -> Option<String> {
    h.removal.lock().last_error.as_ref().map(|e| e.1.clone())
}

fn spawn(h: &Arc<PoolHandle>) -> u64 {
    let Some(id) = h.removal.begin() else { return h.removal.lock().runs };
    let h2 = h.clone();
    let name = format!("remove {}", h.name());
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let mut res = run(&h2);
        // An unrecoverable read or write error cancels the removal, as OpenZFS's thread
        // does (zfs_removal_ignore_errors=0): otherwise the damage could become permanent.
        if let Err(e) = &res {
            if matches!(e, ZfsError::Io { .. }) || matches!(e, ZfsError::Posix(libc::EIO, _)) {
                let why = e.to_string();
                res = h2.lock().cancel_removal().and(Err(ZfsError::Invalid(format!("removal canceled after an I/O error: {why}"))));
            }
        }
        if let Err(e) = &res {
            tracing::warn!("pool '{}': device removal stopped: {e}", h2.name());
        }
        h2.removal.finish(id, res.err().map(|e| e.to_string()));
    });
    if spawned.is_err() {
        h.removal.finish(id, None);
    }
    id
}

fn stop_asked(h: &PoolHandle) -> bool {
    h.removal.lock().request != RemovalRequest::None
}

/// Syncs the thread waits through when a step finds no space, before it gives up.
const ENOSPC_SYNCS: u32 = 3;

fn run(h: &Arc<PoolHandle>) -> Result<()> {
    let mut enospc_syncs = 0u32;
    let mut since_sync = 0u64;
    let mut last_synced = 0u64;
    loop {
        if stop_asked(h) {
            return Ok(());
        }
        if crate::tunables::removal_suspend_progress() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let budget = crate::tunables::remove_max_segment();
        let done = {
            let mut g = h.lock();
            if g.removing_vdev()?.is_none() {
                return Ok(()); // canceled or finished meanwhile
            }
            if g.synced_txg != last_synced {
                last_synced = g.synced_txg;
                since_sync = 0;
            }
            let done = match g.removal_step(budget) {
                // Out of space for the copies at one sector (the step halved its
                // allocations down to that, as spa_vdev_copy_impl does): space freed in
                // the last txgs is still deferred; a few syncs give it back.
                Err(ZfsError::Posix(libc::ENOSPC, _)) if enospc_syncs < ENOSPC_SYNCS => {
                    drop(g);
                    enospc_syncs += 1;
                    h.sync_now()?;
                    continue;
                }
                Err(ZfsError::Posix(libc::ENOSPC, _)) => {
                    let name = h.name();
                    let top = g.removing_vdev()?.unwrap_or(u64::MAX);
                    return Err(ZfsError::Posix(
                        libc::ENOSPC,
                        format!("pool '{name}': the evacuation of vdev {top} stopped: out of space for its copies; the removal stays in progress ('zpool remove -s {name}' cancels it, an export and import goes on with it)"),
                    ));
                }
                r => r?,
            };
            enospc_syncs = 0;
            if done {
                g.complete_removal()?;
            }
            since_sync += budget;
            done
        };
        if done {
            // The vdev tree changed: the pool is opened again, as `zpool add` does.
            crate::dsl_scrub::stop(h);
            let dirs = device_dirs(&h.spa());
            let r = h.reopen(&dirs);
            crate::dsl_scrub::resume_after_import(h);
            // The new vdev tree's leaves take their trim records again (and autotrim its flag).
            crate::vdev_trim::resume_after_import(h);
            return r.map(|_| ());
        }
        if since_sync >= REMOVE_TXG_BYTES {
            h.sync_now()?;
            since_sync = 0;
        } else {
            h.sync_if_due()?;
        }
        // Let writers and commands waiting for the pool have it.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The directories holding the pool's devices (where a reopen looks for them).
pub fn device_dirs(spa: &crate::spa::Spa) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = spa.devices.values().filter_map(|(p, _)| p.parent().map(|d| d.to_path_buf())).collect();
    dirs.sort();
    dirs.dedup();
    dirs
}
