//! spa_label: the config nvlist as spa_config_generate builds it, and its writes with the
//! uberblock to the four labels of every leaf in OpenZFS's safe order (vdev_config_sync): even
//! labels, the uberblock ring slot, flush, odd labels. Export writes the exported state.

use crate::spa::SPA_VERSION_FEATURES;
use crate::dsl_pool::PoolW;
use crate::vdev::Vdev;
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::label::{label_offset, VDEV_PHYS_OFFSET};
use oxzfs_format::nvlist::{NvList, NvValue};
use std::sync::Arc;

/// The end of a txg's sync, written without the pool lock: flush the txg's blocks; when the
/// config changed, the even labels and a flush; the uberblock into its slot of every label; a
/// flush; the odd labels and a flush — OpenZFS's safe order.
/// A device write: the device, the byte offset, the bytes.
pub(crate) type DevWrite = (Arc<dyn crate::vdev::BlockDevice>, u64, Vec<u8>);

pub struct UbWrite {
    pub(crate) txg: u64,
    pub(crate) root: Arc<Vdev>,
    pub(crate) rootbp: BlockPointer,
    pub(crate) config_dirty: bool,
    pub(crate) even: Vec<DevWrite>,
    pub(crate) odd: Vec<DevWrite>,
    pub(crate) ubs: Vec<DevWrite>,
}

impl UbWrite {
    /// vdev_config_sync: the labels' even halves, the uberblocks, the odd halves, each after a
    /// flush of every device. A failing device does not stop the pool (a log device that
    /// died, a mirror side): the txg is on disk when each step reached some device. The
    /// flushes before and after the uberblocks must reach some device too (`flush_any`):
    /// OpenZFS leaves flush errors to the writes that follow, which here may never come (a
    /// power cut at that flush left a sync reported done, and the fsync that waited for it
    /// acknowledged, with its uberblock in no device's stable storage).
    pub(crate) fn write(&self) -> Result<()> {
        self.root.flush_any()?;
        if self.config_dirty {
            write_all(&self.even)?;
            self.root.flush_all();
        }
        write_all(&self.ubs)?;
        self.root.flush_any()?;
        if self.config_dirty {
            write_all(&self.odd)?;
            self.root.flush_all();
        }
        Ok(())
    }
}

/// Write every label or uberblock copy; done when at least one reached its device
/// (vdev_label_sync's and vdev_uberblock_sync's good_writes), else the last error.
pub(crate) fn write_all(w: &[DevWrite]) -> Result<()> {
    let mut err = None;
    let mut good = 0usize;
    for (dev, off, b) in w {
        match dev.write_at(b, *off) {
            Ok(()) => good += 1,
            Err(e) => err = Some(ZfsError::Io { device: dev.name(), offset: *off, source: e }),
        }
    }
    match err {
        Some(e) if good == 0 => Err(e),
        _ => Ok(()),
    }
}

impl PoolW {
    /// The MOS-wide config nvlist (the MOS copy and, trimmed per top-level vdev, the labels').
    pub fn config(&self) -> NvList {
        self.config_at(self.txg)
    }

    pub(crate) fn config_at(&self, txg: u64) -> NvList {
        let mut c = self.config_nv.clone();
        c.add_u64("txg", txg);
        c.add_str("hostname", &self.hostname);
        if let Some(tree) = c.get_nvlist("vdev_tree").cloned() {
            let mut tree = tree;
            if let Some(NvValue::NvListArray(children)) = tree.get("children").cloned() {
                // spa_config_generate: the ids of hole vdevs (removed top-level vdevs), so
                // an import assembling the tree from labels knows them for holes, not missing.
                let holes: Vec<u64> = children.iter().filter(|ch| ch.get_str("type") == Some("hole")).filter_map(|ch| ch.get_u64("id")).collect();
                if !holes.is_empty() {
                    c.insert("hole_array", NvValue::Uint64Array(holes));
                }
                let children: Vec<NvList> = children
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut ch)| {
                        ch.add_u64("metaslab_array", self.ms_arrays.get(i).copied().unwrap_or(0));
                        ch.remove("alloc_bias");
                        ch
                    })
                    .collect();
                tree.insert("children", NvValue::NvListArray(children));
            }
            c.add_nvlist("vdev_tree", tree);
        }
        if self.version >= SPA_VERSION_FEATURES {
            // spa_config_generate adds them to every config it makes, the MOS copy too.
            c.add_nvlist("features_for_read", self.label_features());
        }
        c
    }

    /// Write label configs (`which` of the four) for every leaf.
    pub(crate) fn write_labels(&self, which: &[usize], txg: u64, state: u64) -> Result<()> {
        write_all(&self.label_writes(which, txg, state)?)
    }

    /// The label configs (`which` of the four) of every leaf, encoded, with where they go.
    pub(crate) fn label_writes(&self, which: &[usize], txg: u64, state: u64) -> Result<Vec<DevWrite>> {
        let mut out = Vec::new();
        let full = self.config();
        let tree = full.get_nvlist("vdev_tree").cloned().unwrap_or_default();
        let tops: Vec<NvList> = tree.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
        for top_nv in &tops {
            let top_guid = top_nv.get_u64("guid").unwrap_or(0);
            let mut leaves: Vec<&NvList> = Vec::new();
            let mut stack: Vec<&NvList> = vec![top_nv];
            while let Some(n) = stack.pop() {
                match n.get_nvlist_array("children") {
                    Some(kids) => stack.extend(kids.iter()),
                    None => leaves.push(n),
                }
            }
            for leaf in leaves {
                let guid = leaf.get_u64("guid").unwrap_or(0);
                let Some(dev) = self.device(guid) else { continue };
                // An offline leaf keeps the labels it had (vdev_writeable).
                if leaf.get_u64("offline").unwrap_or(0) != 0 || self.spa.root_vdev.leaves().iter().any(|l| l.guid == guid && l.out_of_use()) {
                    continue;
                }
                let mut c = NvList::new();
                c.add_u64("version", self.version);
                c.add_str("name", &self.spa.name);
                c.add_u64("state", state);
                c.add_u64("txg", txg);
                c.add_u64("pool_guid", self.pool_guid());
                c.add_u64("errata", 0);
                c.add_str("hostname", &self.hostname);
                c.add_u64("top_guid", top_guid);
                c.add_u64("guid", guid);
                if let Some(h) = full.get("hole_array") {
                    c.insert("hole_array", h.clone());
                }
                c.add_u64("vdev_children", tops.len() as u64);
                // The vdev ZAPs are the MOS config's alone (vdev_config_generate's VDEV_CONFIG_MOS).
                let mut top_label = top_nv.clone();
                strip_vdev_zaps(&mut top_label);
                c.add_nvlist("vdev_tree", top_label);
                if self.version >= SPA_VERSION_FEATURES {
                    c.add_nvlist("features_for_read", self.label_features());
                }
                // has_per_vdev_zaps, like the vdev ZAPs, is the MOS config's only.
                for &l in which {
                    let off = label_offset(l, dev.size()) + VDEV_PHYS_OFFSET;
                    let b = oxzfs_format::label::encode_label_config(&c, off).map_err(|e| ZfsError::Invalid(format!("label: {e}")))?;
                    out.push((dev.clone(), off, b));
                }
            }
        }
        Ok(out)
    }

    /// The features a reader of the MOS must know (spa_label_features: active features with
    /// the MOS flag), which the labels and the MOS config carry, even when there are none.
    pub(crate) fn label_features(&self) -> NvList {
        let mut f = NvList::new();
        for (g, (refs, _)) in &self.features {
            if *refs > 0 && oxzfs_format::features::lookup(g).is_some_and(|f| f.mos) {
                f.insert(g, NvValue::Boolean);
            }
        }
        f
    }

    /// The open device of leaf `guid` (the pool's, or one being added).
    pub(crate) fn device(&self, guid: u64) -> Option<Arc<dyn crate::vdev::BlockDevice>> {
        if let Some(d) = self.added.get(&guid) {
            return Some(d.clone());
        }
        self.spa.root_vdev.leaves().into_iter().find(|l| l.guid == guid).and_then(|l| l.dev.clone())
    }

    /// Export: sync, then mark the labels exported.
    pub fn export(&mut self) -> Result<()> {
        self.zil_close_all();
        self.sync_settled()?;
        // A last feed of what the last txgs rewrote; no L2ARC feed writes to the cache
        // devices once the pool is exported.
        let spa = self.spa.clone();
        spa.l2arc.feed_last(&spa.arc, spa.arc_id, &spa.checksum_salt);
        spa.l2arc.shutdown();
        self.set_label_state(1)
    }

    /// Rewrite every label with pool state `state` (1 exported, 2 destroyed).
    pub fn set_label_state(&mut self, state: u64) -> Result<()> {
        let txg = self.txg - 1;
        let root = self.spa.root_vdev.clone();
        for which in [[0usize, 2], [1, 3]] {
            self.write_labels(&which, txg, state)?;
            root.flush_all();
        }
        Ok(())
    }
}

/// Remove the vdev ZAP object numbers from a vdev config and its children (a label's copy).
pub(crate) fn strip_vdev_zaps(nv: &mut NvList) {
    nv.remove("com.delphix:vdev_zap_top");
    nv.remove("com.delphix:vdev_zap_leaf");
    if let Some(mut kids) = nv.get_nvlist_array("children").map(|a| a.to_vec()) {
        kids.iter_mut().for_each(strip_vdev_zaps);
        nv.insert("children", NvValue::NvListArray(kids));
    }
}

pub(crate) const VDEV_UBERBLOCK_RING: u64 = 128 << 10;
