//! vdev_attach: changes to the leaves of a pool's vdev tree while it is imported —
//! `zpool offline [-f]` / `online` / `clear` (vdev_offline, vdev_fault, vdev_online,
//! vdev_clear in OpenZFS's vdev.c), `zpool attach`,
//! `replace` and `detach` (spa_vdev_attach, spa_vdev_detach in spa.c).
//!
//! ```text
//!   offline LEAF: refused (EBUSY, "no valid replicas") when its top-level vdev could not do
//!                 without it; else it takes no reads or writes, each txg synced meanwhile
//!                 goes into its DTL (`vdev_dtl`), and unless temporary (-t) its config gets
//!                 `offline = 1`, so that it stays offline across export and import
//!   offline -f LEAF: FAULTED with "external device fault" (vdev_fault): out of use as an
//!                 offline leaf, its config `faulted = 1` and, unless -t, `aux_state =
//!                 "external"`, which alone brings the fault back at import; when the leaf
//!                 holds the only copy of some data it is DEGRADED instead (`degraded = 1`)
//!                 and stays in use
//!   online LEAF:  back in use for writes, `offline` (and a forced fault) out of its config;
//!                 reads avoid it until a resilver (`dsl_scrub::resilver`) has rewritten the
//!                 txgs its DTL names
//!   clear [LEAF]: forced faults at or below it lifted the same way (vdev_clear)
//! ```
//!
//! ```text
//!   attach DEV NEW   DEV a top-level disk:  disk{top keys}        → mirror{top keys}[DEV, NEW]
//!                    DEV in a mirror:       mirror[.., DEV, ..]   → mirror[.., DEV, .., NEW]
//!   replace OLD NEW  OLD anywhere:          OLD                   → replacing[OLD, NEW]
//!   detach DEV       its mirror or replacing loses it; one left, that child takes the
//!                    parent's place (and its top keys: metaslab array and shift, ashift, asize,
//!                    is_log, create_txg, the top-level vdev ZAP)
//! ```
//! NEW gets a leaf ZAP and a DTL of every txg up to a few past the open one (it holds nothing
//! yet: reads avoid it), its labels with the sync; the caller reopens the pool over the new
//! tree and starts the resilver, at whose end a `replacing` vdev loses its old child
//! (spa_vdev_resilver_done, `replacement_done`). With -s (a mirror or a top-level disk only,
//! device_rebuild enabled) the record of a sequential resilver goes into the top-level vdev's ZAP
//! with the same sync and `vdev_rebuild_thread` copies the allocated space instead; a plain
//! attach is refused while one is active. A detached leaf's DTL object and leaf ZAP
//! leave the MOS and its labels are cleared.
//!
//! All of these run under the pool lock and sync a txg, which puts the new config in the MOS
//! and in the labels of the leaves in use (an offline leaf keeps the labels it had).

use crate::dsl_pool::PoolW;
use crate::vdev::{open_device, Vdev, VdevKind, VdevState};
use crate::vdev_dtl::edit_leaf;
use crate::{Result, ZfsError};
use oxzfs_format::nvlist::{NvList, NvValue};
use std::path::Path;
use std::sync::atomic::Ordering;

/// The config entries of a top-level vdev that move with it when a leaf gets or loses a parent.
const TOP_KEYS: [&str; 8] = ["metaslab_array", "metaslab_shift", "ashift", "asize", "is_log", "create_txg", "com.delphix:vdev_zap_top", "alloc_bias"];
/// Txgs past the open one that a new leaf's DTL covers (TXG_CONCURRENT_STATES and the syncs
/// of the reopen that follows the attach).
const DTL_HEADROOM: u64 = 8;

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
        // vdev_offline_locked: the top-level vdev must stay usable without it (a plain disk,
        // a lone log device included, never does).
        let top = top_of(&root, guid).ok_or_else(|| ZfsError::Posix(libc::ENODEV, format!("{msg}: no such device in pool")))?;
        if std::ptr::eq(top, leaf) {
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

    /// vdev_fault of the leaf `guid` (`zpool offline -f`; `temporary`: -t, gone at the next
    /// import): FAULTED, out of use, unless its top-level vdev would be left without the data —
    /// then DEGRADED and still in use, as OpenZFS backs off. Either way "external device fault".
    pub fn vdev_fault(&mut self, guid: u64, temporary: bool, name: &str) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        let Some(leaf) = root.leaves().into_iter().find(|l| l.guid == guid) else {
            return Err(ZfsError::Posix(libc::ENODEV, format!("cannot fault {name}: no such device in pool")));
        };
        let top = top_of(&root, guid).ok_or_else(|| ZfsError::Posix(libc::ENODEV, format!("cannot fault {name}: no such device in pool")))?;
        leaf.stats.fault_external.store(true, Ordering::Relaxed);
        leaf.stats.degraded.store(false, Ordering::Relaxed);
        leaf.stats.faulted.store(true, Ordering::Relaxed);
        // vdev_dtl_required: the only copy of some data stays readable (a log device, whose
        // records the pool can do without, is faulted anyway).
        let parent = parent_of(&root, guid).filter(|p| matches!(p.kind, VdevKind::Mirror | VdevKind::ReplacingOrSpare(_)));
        let others_whole = parent.map_or(true, |p| p.children.iter().any(|c| c.guid != guid && c.state() == VdevState::Online && !c.is_stale()));
        let required = !top.is_log && (std::ptr::eq(top, leaf) || matches!(top.state(), VdevState::Unavail | VdevState::Faulted) || !others_whole);
        if required {
            leaf.stats.faulted.store(false, Ordering::Relaxed);
            leaf.stats.degraded.store(true, Ordering::Relaxed);
        }
        let faulted = !required;
        edit_leaf(&mut self.config_nv, guid, &mut |nv| {
            nv.remove("faulted");
            nv.remove("degraded");
            nv.add_u64(if faulted { "faulted" } else { "degraded" }, 1);
            if temporary {
                nv.remove("aux_state");
            } else {
                nv.add_str("aux_state", "external");
            }
        });
        self.config_dirty = true;
        self.sync()
    }

    /// vdev_clear's part for faults forced with `offline -f`: every such leaf at or below
    /// `guid` (None: the whole pool) back in use, the config keys gone. True when one of them
    /// misses txgs (a resilver is needed).
    pub fn vdev_clear_faults(&mut self, guid: Option<u64>) -> Result<bool> {
        let root = self.spa.root_vdev.clone();
        let below: Vec<&Vdev> = match guid {
            None => root.leaves(),
            Some(g) => root.leaves().into_iter().filter(|l| l.guid == g || parent_chain_has(&root, l.guid, g)).collect(),
        };
        let mut stale = false;
        let mut changed = false;
        for leaf in below.into_iter().filter(|l| l.stats.fault_external.load(Ordering::Relaxed)) {
            unfault(leaf);
            edit_leaf(&mut self.config_nv, leaf.guid, &mut drop_fault_keys);
            stale |= leaf.stats.stale();
            changed = true;
        }
        if changed {
            self.config_dirty = true;
            self.sync()?;
        }
        Ok(stale)
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
        if leaf.stats.fault_external.load(Ordering::Relaxed) {
            unfault(leaf);
        }
        edit_leaf(&mut self.config_nv, guid, &mut |nv| {
            nv.remove("offline");
            drop_fault_keys(nv);
        });
        self.config_dirty = true;
        self.sync()?;
        Ok(leaf.stats.stale())
    }
}

impl PoolW {
    /// spa_vdev_attach: NEW (`new_path`) beside leaf `old` — a mirror side (`replacing`
    /// false) or its replacement; a hot spare (`spare`: its guid) replaces under a `spare`
    /// vdev and keeps its guid. Returns the new leaf's guid. Nothing is written when refused.
    ///
    /// With `rebuild` (-s) the new leaf is rebuilt sequentially (`vdev_rebuild`): its record
    /// goes into the top-level vdev's ZAP with the same sync, for the caller to start the
    /// thread after the reopen; no healing resilver is to be started for that vdev.
    #[allow(clippy::too_many_arguments)]
    pub fn vdev_attach(&mut self, old: u64, new_path: &Path, replacing: bool, spare: Option<u64>, old_name: &str, new_name: &str, rebuild: bool) -> Result<u64> {
        let msg = if replacing { format!("cannot replace {old_name} with {new_name}") } else { format!("cannot attach {new_name} to {old_name}") };
        self.rebuild_attach_check(rebuild, replacing, &msg)?;
        // spa_vdev_attach: nothing is attached while a device is being removed.
        if self.removing_vdev()?.is_some() {
            return Err(ZfsError::Posix(libc::EBUSY, format!("{msg}: {new_name} is busy, or device removal is in progress")));
        }
        let root = self.spa.root_vdev.clone();
        let nodev = || ZfsError::Posix(libc::ENODEV, format!("{msg}: no such device in pool"));
        let leaf = root.leaves().into_iter().find(|l| l.guid == old).ok_or_else(nodev)?;
        let top = top_of(&root, old).ok_or_else(nodev)?;
        let parent = parent_of(&root, old);
        match parent.map(|p| &p.kind) {
            None | Some(VdevKind::Root) => {}
            Some(VdevKind::Mirror) => {}
            Some(VdevKind::Raidz { .. }) if replacing => {}
            Some(VdevKind::ReplacingOrSpare(_)) if replacing => {
                return Err(ZfsError::Posix(libc::ENOTSUP, format!("{msg}: already in replacing/spare config; wait for completion or use 'zpool detach'")));
            }
            _ => return Err(ZfsError::Posix(libc::ENOTSUP, format!("{msg}: can only attach to mirrors and top-level disks"))),
        }
        if rebuild && (!crate::vdev_rebuild::rebuild_top_ok(top, leaf) || self.top_zap(top.id).is_none()) {
            return Err(crate::vdev_rebuild::not_rebuildable(replacing, &msg));
        }
        let dev = open_device(new_path, true).map_err(|e| ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot open '{}': {e}", new_path.display())))?;
        // vdev_get_min_asize: a mirror side must hold the whole top-level vdev, a raidz child
        // its share.
        let need = match top.kind {
            VdevKind::Raidz { .. } => top.asize / top.children.len().max(1) as u64,
            _ => top.asize,
        };
        if crate::spa_create::leaf_asize(dev.size()) < need {
            return Err(ZfsError::Posix(libc::EOVERFLOW, format!("{msg}: device is too small")));
        }
        if leaf.dev.as_ref().is_some_and(|d| d.name() == dev.name()) {
            return Err(ZfsError::Posix(libc::EBUSY, format!("{msg}: {new_name} is busy, or device removal is in progress")));
        }
        let new_guid = spare.unwrap_or_else(crate::zio::rand_u64);
        let path = std::fs::canonicalize(new_path).unwrap_or(new_path.to_path_buf());
        let mut new = NvList::new();
        new.add_str("type", crate::spa_create::leaf_type(&path));
        new.add_u64("guid", new_guid);
        new.add_str("path", &path.display().to_string());
        new.add_u64("create_txg", self.txg);
        if spare.is_some() {
            new.add_u64("is_spare", 1);
        }
        if let Some(z) = self.new_vdev_zap()? {
            new.add_u64("com.delphix:vdev_zap_leaf", z);
        }
        let attach_to_mirror = !replacing && parent.is_some_and(|p| p.kind == VdevKind::Mirror);
        let mut cfg = self.config_nv.clone();
        let hit = if attach_to_mirror {
            let p = parent.map(|p| p.guid).unwrap_or(0);
            edit_leaf(&mut cfg, p, &mut |nv| {
                let mut kids = nv.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
                let mut n = new.clone();
                n.add_u64("id", kids.len() as u64);
                kids.push(n);
                nv.insert("children", NvValue::NvListArray(kids));
            })
        } else {
            // vdev_add_parent: a mirror (attach to a top-level disk) or a replacing vdev in the
            // leaf's place, with its id (and the top keys when it is a top-level vdev).
            let typ = match (replacing, spare) {
                (true, Some(_)) => "spare",
                (true, None) => "replacing",
                _ => "mirror",
            };
            let is_top = std::ptr::eq(top, leaf);
            edit_leaf(&mut cfg, old, &mut |nv| {
                let mut oldnv = nv.clone();
                let mut p = NvList::new();
                p.add_str("type", typ);
                p.add_u64("id", oldnv.get_u64("id").unwrap_or(0));
                p.add_u64("guid", crate::zio::rand_u64());
                if is_top {
                    for k in TOP_KEYS {
                        if let Some(v) = oldnv.get(k).cloned() {
                            p.insert(k, v);
                            if k != "create_txg" {
                                oldnv.remove(k);
                            }
                        }
                    }
                }
                oldnv.add_u64("id", 0);
                let mut n = new.clone();
                n.add_u64("id", 1);
                p.insert("children", NvValue::NvListArray(vec![oldnv, n]));
                *nv = p;
            })
        };
        if !hit {
            return Err(nodev());
        }
        // vdev_label_init (after every refusal: a refused attach writes nothing).
        crate::spa_create::clear_labels(dev.as_ref())?;
        self.config_nv = cfg;
        // The new leaf lacks every txg so far (vdev_dtl_dirty from TXG_INITIAL).
        self.dtl_write_for(new_guid, 0, &[(1, self.txg + DTL_HEADROOM)])?;
        if rebuild {
            let (min_txg, max_txg) = crate::vdev_rebuild::rebuild_range(top, self.txg + DTL_HEADROOM);
            let guid = self.top_guid(top.id);
            self.rebuild_initiate(top.id, guid, min_txg, max_txg)?;
        }
        self.added.insert(new_guid, dev);
        self.config_dirty = true;
        self.sync()?;
        Ok(new_guid)
    }

    /// spa_vdev_detach of leaf `guid` from its mirror or replacing vdev. Returns its path.
    pub fn vdev_detach(&mut self, guid: u64, name: &str) -> Result<String> {
        let msg = format!("cannot detach {name}");
        let root = self.spa.root_vdev.clone();
        let leaf = root.leaves().into_iter().find(|l| l.guid == guid).ok_or_else(|| ZfsError::Posix(libc::ENODEV, format!("{msg}: no such device in pool")))?;
        let Some(parent) = parent_of(&root, guid).filter(|p| matches!(p.kind, VdevKind::Mirror | VdevKind::ReplacingOrSpare(_))) else {
            return Err(ZfsError::Posix(libc::ENOTSUP, format!("{msg}: only applicable to mirror and replacing vdevs")));
        };
        // vdev_dtl_required: some other child must hold every txg.
        let whole = |c: &Vdev| c.guid != guid && c.state() == VdevState::Online && !c.is_stale();
        if !parent.children.iter().any(|c| whole(c)) {
            return Err(ZfsError::Posix(libc::EBUSY, format!("{msg}: no valid replicas")));
        }
        let is_top = root.children.iter().any(|t| t.guid == parent.guid);
        let mut cfg = self.config_nv.clone();
        let mut gone: Option<NvList> = None;
        edit_leaf(&mut cfg, parent.guid, &mut |nv| {
            let mut kids = nv.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
            if let Some(i) = kids.iter().position(|k| k.get_u64("guid") == Some(guid)) {
                gone = Some(kids.remove(i));
            }
            for (i, k) in kids.iter_mut().enumerate() {
                k.add_u64("id", i as u64);
            }
            if kids.len() == 1 {
                // vdev_remove_parent: the last child takes the parent's place.
                let mut only = kids.remove(0);
                only.add_u64("id", nv.get_u64("id").unwrap_or(0));
                if is_top {
                    for k in TOP_KEYS {
                        if let Some(v) = nv.get(k).cloned() {
                            only.insert(k, v);
                        }
                    }
                }
                *nv = only;
            } else {
                nv.insert("children", NvValue::NvListArray(kids));
            }
        });
        let gone = gone.ok_or_else(|| ZfsError::Posix(libc::ENODEV, format!("{msg}: no such device in pool")))?;
        self.config_nv = cfg;
        // Its MOS objects go; it takes no more writes and forgets the pool.
        self.dtl_free(gone.get_u64("DTL").unwrap_or(0))?;
        if let Some(z) = gone.get_u64("com.delphix:vdev_zap_leaf") {
            if let Some(avz) = self.mos.zap_lookup(1, "com.delphix:vdev_zap_map")? {
                self.mos.zap_remove(avz, &format!("{z:x}"))?;
            }
            self.mos.free_object(z)?;
        }
        leaf.stats.offline.store(true, Ordering::Relaxed);
        let spare_parent = parent.kind == VdevKind::ReplacingOrSpare("spare".into());
        if spare_parent && gone.get_u64("is_spare").unwrap_or(0) != 0 {
            // A hot spare detached goes back to the spares, AVAIL (its spare label again).
            if let Some(dev) = &leaf.dev {
                crate::vdev_removal::clear_labels(dev.as_ref())?;
                let mut label = NvList::new();
                label.add_u64("version", self.version);
                label.add_u64("state", 3);
                label.add_u64("guid", guid);
                crate::spa_create::write_aux_labels(dev.as_ref(), &label)?;
            }
        } else {
            if let Some(dev) = &leaf.dev {
                crate::vdev_removal::clear_labels(dev.as_ref())?;
            }
            if spare_parent {
                // The original detached: the spare that took its place is a member for good,
                // no longer one of the spares (spa_vdev_detach's unspare).
                let permanent: Vec<u64> = parent.children.iter().filter(|c| c.guid != guid).map(|c| c.guid).collect();
                for g in &permanent {
                    edit_leaf(&mut self.config_nv, *g, &mut |nv| nv.remove("is_spare"));
                }
                let list = self.take_aux_list("spares")?;
                let kept: Vec<NvList> = list.into_iter().filter(|d| !d.get_u64("guid").is_some_and(|g| permanent.contains(&g))).collect();
                if !kept.is_empty() {
                    self.put_aux_list("spares", kept)?;
                }
            }
        }
        self.config_dirty = true;
        self.sync()?;
        Ok(gone.get_str("path").unwrap_or(name).to_string())
    }

    /// `zpool add POOL spare DEV...`: hot spares, labelled as such and listed in the MOS.
    pub fn add_spares(&mut self, paths: &[std::path::PathBuf]) -> Result<()> {
        self.add_aux(3, "spares", paths)?;
        self.config_dirty = true;
        self.sync()
    }

    /// The guid of the pool's hot spare at `path` (the MOS "spares" list, as last synced).
    pub fn spare_guid(&self, path: &Path) -> Option<u64> {
        let full = std::fs::canonicalize(path).unwrap_or(path.to_path_buf());
        let nv = crate::spa_load::read_mos_packed(&self.spa.mos(), "spares")?;
        nv.get_nvlist_array("spares")?.iter().find(|d| d.get_str("path").is_some_and(|p| Path::new(p) == full)).and_then(|d| d.get_u64("guid"))
    }

    /// A new vdev ZAP listed in the pool's vdev ZAP map (feature-flag pools that have one).
    fn new_vdev_zap(&mut self) -> Result<Option<u64>> {
        if self.version < crate::spa::SPA_VERSION_FEATURES {
            return Ok(None);
        }
        let Some(avz) = self.mos.zap_lookup(1, "com.delphix:vdev_zap_map")? else { return Ok(None) };
        let z = self.mos.create_zap(oxzfs_format::types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
        self.mos.zap_add_u64(avz, &format!("{z:x}"), z)?;
        Ok(Some(z))
    }

    /// spa_vdev_resilver_done: the old children of a `replacing` vdev whose new child holds
    /// every txg (no scan under way): the guids to detach, old first.
    pub fn replacement_done(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut stack: Vec<&Vdev> = self.spa.root_vdev.children.iter().map(|t| &**t).collect();
        while let Some(v) = stack.pop() {
            if v.kind == VdevKind::ReplacingOrSpare("replacing".into()) {
                if let Some(new) = v.children.last().filter(|n| n.state() == VdevState::Online && !n.is_stale()) {
                    out.extend(v.children.iter().filter(|c| c.guid != new.guid).flat_map(|c| c.leaves().into_iter().map(|l| l.guid)));
                }
            }
            stack.extend(v.children.iter().map(|c| &**c));
        }
        out
    }
}

/// A leaf's forced fault lifted (vdev_clear, vdev_online: faulted and degraded cleared).
fn unfault(leaf: &Vdev) {
    leaf.stats.fault_external.store(false, Ordering::Relaxed);
    leaf.stats.faulted.store(false, Ordering::Relaxed);
    leaf.stats.degraded.store(false, Ordering::Relaxed);
}

/// The config nvpairs of a forced fault.
fn drop_fault_keys(nv: &mut NvList) {
    nv.remove("faulted");
    nv.remove("degraded");
    nv.remove("aux_state");
}

/// Whether vdev `anc` is above leaf `guid`.
fn parent_chain_has(root: &Vdev, guid: u64, anc: u64) -> bool {
    let mut g = guid;
    while let Some(p) = parent_of(root, g) {
        if p.guid == anc {
            return true;
        }
        g = p.guid;
    }
    false
}

/// The vdev whose child leaf `guid` is (None: a top-level leaf, or no such leaf).
pub fn parent_of(root: &Vdev, guid: u64) -> Option<&Vdev> {
    let mut stack: Vec<&Vdev> = root.children.iter().map(|t| &**t).collect();
    while let Some(v) = stack.pop() {
        if v.children.iter().any(|c| c.guid == guid) {
            return Some(v);
        }
        stack.extend(v.children.iter().map(|c| &**c));
    }
    None
}

/// The top-level vdev holding leaf `guid`.
pub fn top_of(root: &Vdev, guid: u64) -> Option<&Vdev> {
    root.children.iter().map(|t| &**t).find(|t| t.kind != VdevKind::Hole && t.leaves().iter().any(|l| l.guid == guid))
}
