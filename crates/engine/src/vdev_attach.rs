//! vdev_attach: changes to the leaves of a pool's vdev tree while it is imported —
//! `zpool offline` / `online` (vdev_offline, vdev_online in OpenZFS's vdev.c).
//!
//! ```text
//!   offline LEAF: refused (EBUSY, "no valid replicas") when its top-level vdev could not do
//!                 without it; else it takes no reads or writes, each txg synced meanwhile
//!                 goes into its DTL (`vdev_dtl`), and unless temporary (-t) its config gets
//!                 `offline = 1`, so that it stays offline across export and import
//!   online LEAF:  back in use for writes, `offline` out of its config; reads avoid it until a
//!                 resilver (`dsl_scrub::resilver`) has rewritten the txgs its DTL names
//! ```
//! Both run under the pool lock and sync a txg, which puts the new config in the MOS and in
//! the labels of the leaves in use (an offline leaf keeps the labels it had).

use crate::dsl_pool::PoolW;
use crate::vdev::{Vdev, VdevKind, VdevState};
use crate::vdev_dtl::edit_leaf;
use crate::{Result, ZfsError};
use std::sync::atomic::Ordering;

impl PoolW {
    /// vdev_offline of the leaf `guid` (`temporary`: -t, not kept in the config).
    pub fn vdev_offline(&mut self, guid: u64, temporary: bool, name: &str) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        let msg = format!("cannot offline {name}");
        let Some(leaf) = root.leaves().into_iter().find(|l| l.guid == guid) else {
            return Err(ZfsError::Posix(libc::ENODEV, format!("{msg}: no such device in pool")));
        };
        if leaf.stats.offline.load(Ordering::Relaxed) {
            return Ok(());
        }
        // vdev_offline_locked: the top-level vdev must stay usable without it (a plain disk
        // never does), and a log device is not offlined here.
        let top = top_of(&root, guid).ok_or_else(|| ZfsError::Posix(libc::ENODEV, format!("{msg}: no such device in pool")))?;
        if std::ptr::eq(top, leaf) || top.is_log {
            return Err(ZfsError::Posix(libc::EBUSY, format!("{msg}: no valid replicas")));
        }
        leaf.stats.offline.store(true, Ordering::Relaxed);
        if matches!(top.state(), VdevState::Unavail | VdevState::Faulted) {
            leaf.stats.offline.store(false, Ordering::Relaxed);
            return Err(ZfsError::Posix(libc::EBUSY, format!("{msg}: no valid replicas")));
        }
        if !temporary {
            edit_leaf(&mut self.config_nv, guid, &mut |nv| nv.add_u64("offline", 1));
        }
        self.config_dirty = true;
        self.sync()
    }

    /// vdev_online of the leaf `guid`: true when its DTL is not empty (a resilver is needed).
    pub fn vdev_online(&mut self, guid: u64, name: &str) -> Result<bool> {
        let root = self.spa.root_vdev.clone();
        let Some(leaf) = root.leaves().into_iter().find(|l| l.guid == guid) else {
            return Err(ZfsError::Posix(libc::ENODEV, format!("cannot online {name}: no such device in pool")));
        };
        if leaf.dev.is_none() {
            return Err(ZfsError::Posix(libc::ENXIO, format!("cannot online {name}: no such device or address")));
        }
        leaf.stats.offline.store(false, Ordering::Relaxed);
        edit_leaf(&mut self.config_nv, guid, &mut |nv| {
            nv.remove("offline");
        });
        self.config_dirty = true;
        self.sync()?;
        Ok(leaf.stats.stale())
    }
}

/// The top-level vdev holding leaf `guid`.
pub fn top_of(root: &Vdev, guid: u64) -> Option<&Vdev> {
    root.children.iter().map(|t| &**t).find(|t| t.kind != VdevKind::Hole && t.leaves().iter().any(|l| l.guid == guid))
}
