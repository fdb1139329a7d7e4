//! dsl_pool: the pool's write state — the MOS and every dataset's writable objset of the open
//! txg, the allocator (metaslabs), the dedup tables, the feature refcounts and the txg numbers
//! (OpenZFS's dsl_pool_t with the write-side fields of spa_t). The layers above change it in
//! open context under `PoolHandle`'s write-state lock; the sync (`txg`) turns it into blocks.
//! What it is for, concern by concern, lives in the modules named after OpenZFS's files:
//! `dsl_dataset` (datasets: find, create, destroy), `dsl_prop` (properties), `dsl_space`
//! (space checks, quotas, statfs), `deadlist`/`dsl_snapshot`/`dsl_rename`, `spa_create`,
//! `spa_load` (import), `spa_feature`, `spa_props` (pool properties, history), `spa_label`
//! (config and labels), `txg` (sync).

use crate::dbuf::{ObjsetW, SpaceDelta};
use crate::metaslab::{Metaslabs, SharedMs};
use crate::spa::Spa;
use oxzfs_format::nvlist::NvList;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per-dataset write state.
pub struct DatasetW {
    pub dsobj: u64,
    pub os: ObjsetW,
    /// ds_prev_snap_txg: a block born at or before it is shared with the previous snapshot
    /// (or a clone's origin) and goes to the deadlist when freed (dsl_dataset_block_kill).
    pub prev_snap_txg: u64,
}

/// One dsl dir of a dataset's chain to the root, as the write path's checks use it.
#[derive(Debug)]
pub(crate) struct DirFigures {
    pub(crate) obj: u64,
    pub(crate) used: u64,
    pub(crate) reserved: u64,
    /// "quota" in the dir's props ZAP (what `quota_check` reads).
    pub(crate) prop_quota: u64,
}

/// What the write path's space checks read of one dataset from the MOS: its referenced and
/// unique bytes, its refquota and refreservation, and its dirs from its own to the root.
#[derive(Debug)]
pub(crate) struct SpaceFigures {
    pub(crate) referenced: u64,
    pub(crate) unique: u64,
    pub(crate) refquota: u64,
    pub(crate) refres: u64,
    pub(crate) chain: Vec<DirFigures>,
}

/// The figures of the datasets written since the MOS last changed, and which MOS state
/// (`ObjsetW::generation`) they were read from.
#[derive(Debug, Default)]
pub(crate) struct FiguresCache {
    pub(crate) gen: (u64, u64),
    pub(crate) by_ds: std::collections::HashMap<u64, std::sync::Arc<SpaceFigures>>,
}

/// The pool opened for writing.
pub struct PoolW {
    pub spa: Arc<Spa>,
    pub mos: ObjsetW,
    pub datasets: BTreeMap<u64, DatasetW>,
    pub ms: SharedMs,
    /// The open txg.
    pub txg: u64,
    pub config_dirty: bool,
    /// Ranges of removed vdevs became obsolete in the last sync: the next one checks whether a
    /// mapping should be condensed (`vdev_indirect`), so it runs even with nothing else dirty.
    pub condense_due: bool,
    pub version: u64,
    /// Features enabled (guid → refcount), for-read flag.
    pub features: BTreeMap<String, (u64, bool)>,
    pub feature_objs: Option<(u64, u64)>,
    /// MOS object of each top-level vdev's metaslab array.
    pub ms_arrays: Vec<u64>,
    pub mos_delta: SpaceDelta,
    pub mos_dir: u64,
    pub hostname: String,
    pub ub_timestamp: u64,
    pub last_sync: std::time::Instant,
    /// The pool config as written (vdev ZAPs and metaslab arrays filled in).
    pub config_nv: NvList,
    /// Leaves being added by `zpool add` (until the pool is reopened).
    pub added: std::collections::HashMap<u64, Arc<dyn crate::vdev::BlockDevice>>,
    /// While a txg's datasets sync without the pool lock the allocator is with that sync:
    /// its (size, allocated) totals at quiesce stand in for it.
    pub(crate) ms_out: Option<(u64, u64)>,
    /// Set when a sync failed: that txg's frozen state was not installed, so no later txg may
    /// sync on top of it (the pool is suspended; every later change, sync and export refuses).
    /// The one record of suspension, whether the sync thread's sync or a command's failed.
    pub suspended: Option<String>,
    /// Intent logs claimed at import and not replayed yet (`zpool import -N`): the first
    /// mount replays them (zfs_replay).
    pub replay_deferred: bool,
    /// The last txg whose uberblock is on disk.
    pub synced_txg: u64,
    /// The dedup tables (with the dataset sync while it runs, like `ms`).
    pub ddt: crate::ddt::Ddt,
    /// Makes a new file system's objects (see `ObjsetInit`).
    pub fs_init: crate::dbuf::ObjsetInit,
    /// The write path's space figures of each dataset, decoded from the MOS
    /// (`SpaceFigures`, read and used by dsl_space), good while the MOS's generation is the one they were read at.
    pub(crate) space_figures: FiguresCache,
}

impl PoolW {
    /// The write state of a pool about to be created or just opened: open txg `txg`, nothing
    /// dirty, no features loaded, no file system layer yet (the callers fill those in).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(spa: Arc<Spa>, mos: ObjsetW, ms: Metaslabs, txg: u64, version: u64, hostname: &str, config_nv: NvList) -> PoolW {
        PoolW {
            spa,
            mos,
            datasets: BTreeMap::new(),
            ms: SharedMs::new(ms),
            txg,
            config_dirty: false,
            condense_due: false,
            version,
            features: BTreeMap::new(),
            feature_objs: None,
            ms_arrays: Vec::new(),
            mos_delta: SpaceDelta::default(),
            mos_dir: 0,
            hostname: hostname.to_string(),
            ub_timestamp: 0,
            last_sync: std::time::Instant::now(),
            config_nv,
            added: Default::default(),
            ms_out: None,
            suspended: None,
            replay_deferred: false,
            synced_txg: txg - 1,
            ddt: Default::default(),
            fs_init: crate::dbuf::no_objset_init,
            space_figures: Default::default(),
        }
    }

    /// Drop every file system's intent-log chain (export, reopen): the sync that follows frees
    /// the blocks and empties the headers. A chain left by a crash and not replayed stays.
    pub fn zil_close_all(&mut self) {
        for ds in self.datasets.values_mut() {
            if !ds.os.zil.foreign {
                ds.os.zil.close();
            }
        }
    }

    /// zil_destroy for dataset `ds` (destroy, rollback): its chain is freed by the next sync and
    /// its header emptied; a chain a crash left and no replay took is read to find its blocks
    /// (those of synced txgs, or all once claimed: the others were never allocated).
    pub fn zil_destroy(&mut self, ds: u64) -> crate::Result<()> {
        let synced = self.synced_txg;
        let spa = self.spa.clone();
        let os = self.objset(ds)?;
        if !os.zil.foreign {
            os.zil.close();
            return Ok(());
        }
        let hdr = os.phys.zil_header.clone();
        let ctx = crate::zio::ZioCtx::new(&spa.root_vdev, &spa.checksum_salt);
        let chain = crate::zil::parse_chain(&ctx, &hdr.log, 1 << 20);
        let blocks = chain.blocks.into_iter().map(|(bp, _)| bp).filter(|bp| hdr.claim_txg != 0 || bp.birth <= synced).collect();
        os.phys.zil_header = oxzfs_format::objset::ZilHeaderPhys::empty();
        os.zil.drop_replayed(blocks);
        os.zil.replay_error = None;
        Ok(())
    }

    /// Whether anything is waiting for a sync.
    pub fn dirty(&self) -> bool {
        // A scan's progress alone is worth a sync (OpenZFS syncs each txg while it scans).
        self.mos.is_dirty()
            || self.config_dirty
            || self.condense_due
            || self.ddt.is_dirty()
            || self.datasets.values().any(|d| d.os.is_dirty())
            || self.spa.scan.lock().dirty
            || self.spa.errlog.lock().unwrap_or_else(|e| e.into_inner()).dirty()
    }
}

/// Seconds since the epoch, for creation times and history records.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
