//! vdev_probe: leaves whose device goes away under the running pool (OpenZFS's REMOVED
//! state: on Linux the kernel's hot-unplug event through zed, or an EIO after which the disk
//! is found gone — vdev_disk.c, vdev_remove_wanted, spa_async_remove) and their return
//! (zed's auto-online, cmd/zed/agents/zfs_mod.c).
//!
//! ```text
//!   detection   a leaf's I/O fails for real with ENXIO/ENODEV, or with another error after
//!               which its path no longer names the open device (`BlockDevice::gone`: a
//!               file's dev/ino, a block device's st_rdev); or the probe thread, every
//!               PROBE_INTERVAL, finds the path gone the same way
//!                 → `Vdev::set_removed`: REMOVED (VDEV_STATE_REMOVED, aux none), its error
//!                   counts cleared; out of use like an offline leaf: no reads, no writes, no
//!                   labels or uberblocks, each txg synced meanwhile into its DTL
//!   syncing     (`vdev_dtl`) `removed = 1` in the leaf's config (ZPOOL_CONFIG_REMOVED,
//!               written by vdev_config_generate for vdev_removed) while it is gone, out
//!               again once it is back; the DTL also takes the txg before the first sync
//!               that saw it gone (the device may have left in the middle of its writes)
//!   return      the probe thread finds the leaf's path again with a label naming this pool
//!               and this vdev → the pool is reopened over its devices (the leaf opens with
//!               its DTL loaded) and a resilver of what it missed starts; `zpool online` and
//!               `zpool clear` do the same when asked
//! ```
//!
//! A pool without the redundancy to do without the leaf goes UNAVAIL; its next txg sync's
//! writes reach no device and the pool's I/O is suspended with that txg held (failmode=wait,
//! `vdev::IoGate`), as OpenZFS does. A suspended pool is not reopened by the thread: `zpool
//! clear` is asked for, which, with the very device back at its path, returns it in place
//! (`back_in_place`) and resumes the held sync, losing nothing.
//!
//! Lock order: the thread reads the tree through `PoolHandle::spa` (the write state's lock,
//! briefly) and holds nothing while it probes; a reopen takes the pool as a command does.

use crate::dsl_pool::PoolW;
use crate::txg::PoolHandle;
use crate::vdev::Vdev;
use crate::Result;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// How often the thread looks at the leaves' paths (a few stat calls each time).
pub const PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Where a leaf's device is looked for: the path it was opened by, else the config's.
fn leaf_path(leaf: &Vdev) -> Option<PathBuf> {
    leaf.dev.as_ref().map(|d| PathBuf::from(d.name())).or_else(|| leaf.path.as_ref().map(PathBuf::from))
}

/// The identity of what a path names now (device, inode, size, mtime), to probe a candidate
/// that failed once only after it changed.
fn identity(path: &std::path::Path) -> Option<(u64, u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.rdev(), m.mtime(), m.mtime_nsec()))
}

/// The path at which removed leaf `leaf` of pool `spa` is back — the same file or device
/// still open, or a device whose label names this pool and this vdev — or None.
pub fn returned(spa: &crate::spa::Spa, leaf: &Vdev) -> Option<PathBuf> {
    let path = leaf_path(leaf)?;
    identity(&path)?;
    let same = leaf.dev.as_ref().is_some_and(|d| !d.gone());
    (same || is_our_device(&path, spa.guid, leaf.guid)).then_some(path)
}

/// Whether the device at `path` is the pool's leaf `guid` (its newest label names both).
fn is_our_device(path: &std::path::Path, pool_guid: u64, guid: u64) -> bool {
    match crate::spa::probe(path) {
        Ok(p) => p.pool_guid == pool_guid && p.guid == guid,
        Err(_) => false,
    }
}

/// One look at the pool's leaves: the devices gone become REMOVED; the guids of removed
/// leaves whose device is back are returned with their paths. `tried` remembers what a path
/// named when it was found not to be ours.
fn probe_once(h: &PoolHandle, tried: &mut HashMap<u64, Option<(u64, u64, u64, i64, i64)>>) -> Vec<(u64, PathBuf)> {
    let spa = h.spa();
    let mut back = Vec::new();
    for leaf in spa.root_vdev.leaves() {
        if leaf.stats.removed.load(Ordering::Relaxed) {
            let Some(path) = leaf_path(leaf) else { continue };
            let now = identity(&path);
            if now.is_none() || tried.get(&leaf.guid) == Some(&now) {
                continue;
            }
            match returned(&spa, leaf) {
                Some(path) => {
                    tried.remove(&leaf.guid);
                    back.push((leaf.guid, path));
                }
                None => {
                    tried.insert(leaf.guid, now);
                }
            }
        } else if !leaf.out_of_use() {
            if let Some(dev) = &leaf.dev {
                if dev.gone() {
                    leaf.set_removed();
                }
            }
        }
    }
    back
}

/// Reopen the pool over its devices and the directories of `paths` (where removed leaves'
/// devices are back): they open again, and a resilver of the txgs they missed starts (as
/// after an import). Refused while the pool is suspended.
pub fn reopen_with(h: &Arc<PoolHandle>, paths: &[PathBuf]) -> Result<()> {
    let spa = h.spa();
    let mut dirs = crate::vdev_removal_thread::device_dirs(&spa);
    dirs.extend(paths.iter().filter_map(|p| p.parent().map(|d| d.to_path_buf())));
    dirs.sort();
    dirs.dedup();
    undo_same(&h.lock());
    crate::dsl_scrub::stop(h);
    let r = h.reopen(&dirs);
    crate::dsl_scrub::resume_after_import(h);
    crate::vdev_trim::resume_after_import(h);
    r.map(|_| ())
}

/// Removed leaves whose very file or device is at their path again (a file moved back) are
/// back in use at once: the syncs of a reopen write their labels, which a lone device's pool
/// needs to sync at all. Under the pool (no txg half-synced): every txg synced without them is
/// in their DTL already; the open one, whose intent-log blocks may have skipped them, goes in
/// too, for the resilver.
pub fn undo_same(g: &PoolW) {
    for top in &g.spa.root_vdev.children {
        // (A leaf that is its own top-level vdev has no DTL: nothing holds its blocks.)
        let redundant = !top.is_leaf();
        for leaf in top.leaves() {
            if leaf.stats.removed.load(Ordering::Relaxed) && leaf.dev.as_ref().is_some_and(|d| !d.gone()) {
                if redundant {
                    leaf.stats.dtl_add(g.txg.saturating_sub(1).max(1), g.txg + 1);
                }
                leaf.stats.removed.store(false, Ordering::Relaxed);
            }
        }
    }
}

/// `undo_same` without the pool's write state (a sync waiting for its I/O to resume holds
/// it): removed leaves whose very device is at their path again are back in use; the txg
/// being synced goes into their DTL as a failed write's does (`write_failed`), for the
/// resilver.
pub fn back_in_place(root: &Vdev) {
    for leaf in root.leaves() {
        if leaf.stats.removed.load(Ordering::Relaxed) && leaf.dev.as_ref().is_some_and(|d| !d.gone()) {
            leaf.stats.write_failed.store(true, Ordering::Relaxed);
            leaf.stats.removed.store(false, Ordering::Relaxed);
        }
    }
}

/// Start the pool's probe thread (the daemon, for each pool it imports read-write; it ends
/// when the handle is dropped or the pool exported).
pub fn spawn(h: &Arc<PoolHandle>) {
    let weak: Weak<PoolHandle> = Arc::downgrade(h);
    let _ = std::thread::Builder::new().name("vdev_probe".into()).spawn(move || {
        let mut tried = HashMap::new();
        loop {
            std::thread::sleep(PROBE_INTERVAL);
            let Some(h) = weak.upgrade() else { return };
            if h.stopped() {
                return;
            }
            if h.spa().readonly {
                continue;
            }
            let back = probe_once(&h, &mut tried);
            if back.is_empty() || h.is_suspended() {
                continue;
            }
            let paths: Vec<PathBuf> = back.iter().map(|(_, p)| p.clone()).collect();
            match reopen_with(&h, &paths) {
                Ok(()) => tracing::info!("pool '{}': {} back, reopened", h.name(), paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")),
                Err(e) => tracing::warn!("pool '{}': reopening for a device back: {e}", h.name()),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::{BlockDevice, FileDevice};

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oxzfs-probe-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A file device is gone when its path is moved away, deleted, or names another file;
    /// back when the same file is at the path again.
    #[test]
    fn a_file_device_is_gone_when_its_path_names_something_else() {
        let d = scratch("gone");
        let (p, away) = (d.join("d0"), d.join("d0.away"));
        std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let dev = FileDevice::open(&p, true).unwrap();
        assert!(!dev.gone());
        std::fs::rename(&p, &away).unwrap();
        assert!(dev.gone(), "moved away");
        std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
        assert!(dev.gone(), "another file at the path");
        std::fs::remove_file(&p).unwrap();
        std::fs::rename(&away, &p).unwrap();
        assert!(!dev.gone(), "the same file back");
        std::fs::remove_file(&p).unwrap();
        assert!(dev.gone(), "deleted");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A removed leaf takes no I/O: a read fails with ENXIO and is not counted; a write is
    /// refused (its DTL records it) and not counted either.
    #[test]
    fn a_removed_leaf_takes_no_io() {
        let d = scratch("noio");
        let p = d.join("d0");
        std::fs::File::create(&p).unwrap().set_len(8 << 20).unwrap();
        let mut nv = oxzfs_format::nvlist::NvList::new();
        nv.add_str("type", "file");
        nv.add_u64("guid", 7);
        nv.add_str("path", &p.display().to_string());
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&p, true).unwrap());
        let mut devices = crate::vdev::DeviceMap::new();
        devices.insert(7, (p.clone(), dev));
        let leaf = Vdev::from_config(&nv, &devices, 0).unwrap();
        leaf.write(0, &[1u8; 4096]).unwrap();
        assert!(leaf.set_removed() && !leaf.set_removed());
        assert_eq!(leaf.state(), crate::vdev::VdevState::Removed);
        assert!(leaf.out_of_use());
        let e = leaf.read_leaf(0, 4096).unwrap_err();
        assert!(e.to_string().contains("No such device or address"), "{e}");
        assert!(leaf.write(0, &[2u8; 4096]).is_err());
        let before = std::fs::read(&p).unwrap();
        assert_eq!(&before[4 << 20..(4 << 20) + 4096], &[1u8; 4096][..], "the refused write left the file alone");
        assert_eq!(leaf.stats.read_errors.load(Ordering::Relaxed) + leaf.stats.write_errors.load(Ordering::Relaxed), 0);
        // A config that says removed, its device absent: REMOVED at import; present: not.
        nv.add_u64("removed", 1);
        assert_eq!(Vdev::from_config(&nv, &Default::default(), 0).unwrap().state(), crate::vdev::VdevState::Removed);
        assert_eq!(Vdev::from_config(&nv, &devices, 0).unwrap().state(), crate::vdev::VdevState::Online);
        let _ = std::fs::remove_dir_all(&d);
    }
}
