//! txg: the transaction-group machinery — the open → quiescing → syncing states, the sync of
//! one txg, the dirty-data limits and write throttle, and `PoolHandle`, which owns the pool's
//! write state and runs the sync thread. What a txg changes lives elsewhere (`dsl_pool` and the
//! dsl_*/spa_* modules); this module only makes a txg durable.
//!
//! ```text
//!   open txg: ObjsetW of the MOS and of every dataset written, dirty in memory
//!   sync(txg):
//!     1. each dirty dataset objset → new objset bp → its dsl_dataset bonus in the MOS,
//!        space deltas into the dataset and up its dsl_dir chain
//!     2. passes until nothing changes:
//!          MOS objset sync (pass ≥ 2: blocks born this txg rewritten in place when the size
//!          is unchanged) → frees to the allocator → metaslab sync appends to space maps
//!          (space map objects are MOS objects: they dirty the MOS again)
//!     3. flush; the config (when changed) to the even labels; the uberblock into slot
//!        txg % slots of every label; flush; the odd labels — OpenZFS's safe order (spa_label)
//!     4. metaslab sync_done (deferred frees of txg-2 become allocatable, unless a lock-free
//!        reader still walks a tree older than them)
//! ```
//!
//! Txg states (see `PoolHandle`): one txg is *open* — writers dirty dataset objsets in it
//! under the write-state lock `w`; at most one more is *quiescing/syncing*. Quiesce (under
//! `w`) freezes each dirty dataset's dirty state (`ObjsetW::freeze`) and opens txg N+1; the
//! datasets' blocks of N are then written without `w` (the allocator travels with that sync,
//! writers see its totals as of quiesce), while writers change N+1 and readers see open dirty
//! → frozen dirty → synced tree. Back under `w`, the new trees are installed, the dataset
//! bonuses and dsl_dir space updated, and the MOS synced in passes with the space maps; then
//! labels and uberblock. Open-context MOS changes (zfs create/destroy/set, zpool set/add,
//! history) run only from commands, which hold the sync lock (`PoolHandle::lock`): they never
//! meet a txg half-synced, and they may sync inline (stopping the world, `PoolW::sync`).
//!
//! Lock order: `PoolHandle::sync` → `PoolHandle::w` → the handle's leaves (`kick`,
//! `wakeup`). The write throttle (dsl_pool dirty data, dmu_tx_delay) runs before a
//! change takes `w`. Frees of blocks born in the syncing txg in an earlier pass are recorded
//! as FREE entries, as OpenZFS does; every free is deferred two txgs by the metaslabs, which
//! also keeps blocks a lock-free reader may still walk after a sync replaced them: neither the
//! end of the deferral nor the ENOSPC retry's early release gives back frees newer than the
//! oldest tree a reader has pinned (a healing read must never meet a reused block).

use crate::dsl_pool::now;
use crate::spa::SPA_VERSION_FEATURES;
use crate::spa_label::UbWrite;
use crate::spa_label::VDEV_UBERBLOCK_RING;
use crate::vdev::guid_sum;
use crate::vdev::leaf_ashift;
use crate::dbuf::{ObjsetW, OsProps, SpaceDelta, SyncCtx, SyncJob};
use crate::dsl_pool::PoolW;
use crate::metaslab::{dsize_of, MsSync, PoolAlloc, SharedMs};
use crate::spa::Spa;
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::dsl::{DslDatasetPhys, DMU_POOL_SCAN};
use oxzfs_format::label::{label_offset, VDEV_LABELS, VDEV_UBERBLOCK_RING_OFFSET};
use oxzfs_format::objset::DMU_OST_META;
use oxzfs_format::types;
use oxzfs_format::uberblock::{encode_uberblock, uberblock_slot_size, UberblockPhys};
use std::path::PathBuf;
use std::sync::Arc;


/// A txg quiesced: its datasets' frozen dirty state, to be synced.
pub struct Quiesced {
    pub txg: u64,
    jobs: Vec<SyncJob>,
    /// Each job's dataset's ds_prev_snap_txg (frees of blocks born at or before it are dead,
    /// not freed), and the dead blocks its sync left for the deadlist.
    keep: Vec<u64>,
    dead: Vec<Vec<BlockPointer>>,
}

/// What the sync of datasets needs from the pool, taken under the lock at quiesce.
pub(crate) struct SyncEnv {
    spa: Arc<Spa>,
    embed: bool,
    lz4: bool,
    hole_birth: bool,
    userobj: bool,
    projects: bool,
}


impl PoolW {
    /// dsl_scan_sync_state: the scan's phys into the pool directory's "scan" entry and the
    /// datasets still to visit into its queue object ("%llx" of the dataset → its txg).
    pub(crate) fn scan_sync_state(&mut self, phys: &oxzfs_format::dsl::DslScanPhys, queue: &[(u64, u64)]) -> Result<()> {
        self.mos.zap_mut(oxzfs_format::dsl::DMU_POOL_DIRECTORY_OBJECT)?.entries.insert(DMU_POOL_SCAN.as_bytes().to_vec(), (8, phys.words()));
        if phys.queue_obj != 0 && self.mos.exists(phys.queue_obj) {
            let z = self.mos.zap_mut(phys.queue_obj)?;
            z.entries = queue.iter().map(|&(ds, txg)| (format!("{ds:x}").into_bytes(), (8u8, vec![txg]))).collect();
        }
        Ok(())
    }

    /// spa_errlog_sync: the entries logged since the last sync added to errlog_last and
    /// errlog_scrub (each made when it gets its first), and after a finished scan the rotation:
    /// the old errlog_last freed, errlog_scrub (with what was found since) the new errlog_last,
    /// errlog_scrub none. The pool directory names both.
    pub(crate) fn errlog_sync(&mut self) -> Result<()> {
        let Some(p) = self.spa.errlog.lock().unwrap_or_else(|e| e.into_inner()).take_sync() else { return Ok(()) };
        let (mut last, mut scrub) = (p.obj_last, p.obj_scrub);
        self.errlog_add(&mut last, &p.pending_last)?;
        if p.finished {
            if last != 0 && self.mos.exists(last) {
                self.mos.free_object(last)?;
            }
            last = std::mem::take(&mut scrub);
            self.errlog_add(&mut last, &p.pending_scrub)?;
        } else {
            self.errlog_add(&mut scrub, &p.pending_scrub)?;
        }
        let dir = self.mos.zap_mut(oxzfs_format::dsl::DMU_POOL_DIRECTORY_OBJECT)?;
        dir.set_u64(oxzfs_format::dsl::DMU_POOL_ERRLOG_LAST, last);
        dir.set_u64(oxzfs_format::dsl::DMU_POOL_ERRLOG_SCRUB, scrub);
        self.spa.errlog.lock().unwrap_or_else(|e| e.into_inner()).synced(last, scrub);
        Ok(())
    }

    /// sync_error_list: `entries` into error-log ZAP `*obj` (made if 0), each named by its
    /// bookmark, its value an empty name.
    fn errlog_add(&mut self, obj: &mut u64, entries: &std::collections::BTreeSet<crate::spa_errlog::Bookmark>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        if *obj == 0 || !self.mos.exists(*obj) {
            *obj = self.mos.create_zap(oxzfs_format::types::DMU_OT_ERROR_LOG, 0, 0, 0)?;
        }
        let z = self.mos.zap_mut(*obj)?;
        for zb in entries {
            z.entries.insert(crate::spa_errlog::bookmark_name(zb).into_bytes(), (1, vec![0]));
        }
        Ok(())
    }

    // -------------------------------------------------------------------------------- create

    // ---------------------------------------------------------------------------------- open

    // --------------------------------------------------------------------------------- sync

    /// Sync the open txg and open the next one (stopping the world: quiesce, sync the
    /// datasets and finish under the caller's hold of the write state).
    pub fn sync(&mut self) -> Result<()> {
        self.sync_overlapped(|_| Ok(()))
    }

    /// `sync`, with `meanwhile` run on the open txg after the quiesce and before the
    /// datasets are written (what writers do while the sync thread writes without the lock).
    pub(crate) fn sync_overlapped(&mut self, meanwhile: impl FnOnce(&mut PoolW) -> Result<()>) -> Result<()> {
        self.check_suspended()?;
        let r = (|| -> Result<()> {
            let mut q = self.quiesce();
            meanwhile(self)?;
            let env = self.sync_env();
            sync_datasets(&env, &self.ms.clone(), &mut self.ddt, &mut q)?;
            let ub = self.sync_finish(q)?;
            ub.root.stats.io_gate.write_or_wait(|| ub.write())?;
            self.sync_done(ub);
            Ok(())
        })();
        if let Err(e) = &r {
            self.suspended = Some(e.to_string());
        }
        r
    }

    /// Sync, then sync again (at most TXG_DEFER_SIZE more txgs, as OpenZFS's txg_sync_stop
    /// does before a pool goes away) while the MOS's own space change of the last sync is
    /// still to be charged to $MOS: that change is applied a txg late and would otherwise
    /// be lost with the in-memory state at export.
    pub fn sync_settled(&mut self) -> Result<()> {
        self.sync()?;
        for _ in 0..2 {
            if self.mos_delta == SpaceDelta::default() {
                break;
            }
            self.sync()?;
        }
        Ok(())
    }

    /// Refuse to sync (or export) a pool whose earlier sync failed.
    pub fn check_suspended(&self) -> Result<()> {
        match &self.suspended {
            Some(e) => Err(ZfsError::Unavailable(format!("pool '{}' is suspended: {e}", self.spa.name))),
            None => Ok(()),
        }
    }

    /// Quiesce the open txg: every dirty dataset's dirty state is frozen into a sync job, and
    /// the next txg opens (writers go on in it at once).
    pub fn quiesce(&mut self) -> Quiesced {
        let txg = self.txg;
        let mut jobs = Vec::new();
        let mut keep = Vec::new();
        for ds in self.datasets.values_mut() {
            if ds.os.is_dirty() {
                jobs.push(ds.os.freeze(txg));
                keep.push(ds.prev_snap_txg);
            }
        }
        self.txg = txg + 1;
        let dead = vec![Vec::new(); jobs.len()];
        Quiesced { txg, jobs, keep, dead }
    }

    /// What a commit of dataset `dsobj`'s intent log has to do (`zil::Zilog::prepare`), under
    /// the write state: its records packed into blocks allocated in the open txg.
    pub fn zil_prepare(&mut self, dsobj: u64, target: Option<&[u64]>) -> Result<crate::zil::Prepared> {
        self.check_suspended()?;
        let (txg, synced, version) = (self.txg, self.synced_txg, self.version);
        let ms = self.ms.clone();
        let pool_size = self.ms_out.unwrap_or_else(|| ms.lock().space_totals()).0;
        let root = self.spa.root_vdev.clone();
        let env = self.policy_env();
        let os = self.objset(dsobj)?;
        if os.props.sync == 2 {
            return Ok(crate::zil::Prepared::Nothing);
        }
        let ctx = crate::zil::CommitCtx { ms: &ms, root: &root, txg, synced, spa_version: version, objset: dsobj, pool_size };
        let mut zil = std::mem::take(&mut os.zil);
        let mut hdr = os.phys.zil_header.clone();
        let tp = os.props.logbias_throughput;
        let mut src = FsSource { os, ms: &ms, root: &root, txg, env, written: Vec::new() };
        let r = zil.prepare(&ctx, &mut hdr, tp, target, &mut src);
        let FsSource { os, written, .. } = src;
        os.zil = zil;
        os.phys.zil_header = hdr;
        if !matches!(r, Ok(crate::zil::Prepared::Write(_))) {
            // Blocks this commit wrote for indirect records it is not going to write: the
            // sync writes them itself.
            for (obj, blkid) in written {
                os.unoverride(obj, blkid..=blkid);
            }
        }
        r
    }

    /// Start dataset `dsobj`'s intent-log chain ahead of its first fsync (at mount): true when
    /// a first block was allocated and the header names it — the caller syncs that txg, which
    /// the first fsync would otherwise wait for.
    pub fn zil_open(&mut self, dsobj: u64) -> Result<bool> {
        let (txg, synced, version) = (self.txg, self.synced_txg, self.version);
        let ms = self.ms.clone();
        let pool_size = self.ms_out.unwrap_or_else(|| ms.lock().space_totals()).0;
        let root = self.spa.root_vdev.clone();
        let os = self.objset(dsobj)?;
        if os.props.sync == 2 || os.props.readonly || !os.zil.can_create(&os.phys.zil_header) {
            return Ok(false);
        }
        let ctx = crate::zil::CommitCtx { ms: &ms, root: &root, txg, synced, spa_version: version, objset: dsobj, pool_size };
        let mut hdr = os.phys.zil_header.clone();
        let r = os.zil.create(&ctx, &mut hdr, 4096);
        os.phys.zil_header = hdr;
        r.map(|_| true)
    }

    /// zil_commit for a caller that holds the pool alone (no sync thread): the log written
    /// here, or the txg synced inline.
    pub fn zil_commit(&mut self, dsobj: u64) -> Result<()> {
        use crate::zil::Prepared;
        loop {
            match self.zil_prepare(dsobj, None)? {
                Prepared::Nothing => return Ok(()),
                Prepared::Sync => return self.sync(),
                Prepared::Create => self.sync()?,
                Prepared::Write(writes) => {
                    let root = self.spa.root_vdev.clone();
                    let Err((top, e)) = crate::zil::write_commit(&root, &writes) else { return Ok(()) };
                    self.zil_write_failed(dsobj, top, &e);
                    return self.sync();
                }
            }
        }
    }

    /// A commit's log write failed on top-level vdev `top`: the chain is dropped and the
    /// caller syncs the txg (what the records said is then in the pool, nothing acknowledged
    /// is lost). A failed log device takes no more log blocks: later chains go to the pool's
    /// normal class, as OpenZFS's zil_alloc falls back when the log class cannot allocate.
    pub fn zil_write_failed(&mut self, dsobj: u64, top: u64, e: &ZfsError) {
        if let Ok(os) = self.objset(dsobj) {
            os.zil.write_failed();
            os.unoverride_all();
        }
        let Some(t) = self.spa.root_vdev.children.get(top as usize).filter(|t| t.is_log) else { return };
        tracing::warn!("pool '{}': log device {} failed ({e}); intent log blocks go to the pool", self.spa.name, t.display_name());
        for l in t.leaves() {
            if l.stats.write_errors.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                l.stats.faulted.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.ms.lock().retire_group(top);
    }

    /// After `zpool clear`: a log device no longer faulted takes log blocks again.
    pub fn log_devices_cleared(&mut self) {
        let root = self.spa.root_vdev.clone();
        for t in root.children.iter().filter(|t| t.is_log && t.state() == crate::vdev::VdevState::Online) {
            self.ms.lock().unretire_group(t.id);
        }
    }

    /// What the write policy needs of the pool for a data block of the open txg.
    fn policy_env(&self) -> crate::dbuf::PolicyEnv {
        crate::dbuf::PolicyEnv {
            embed: self.features.contains_key("com.delphix:embedded_data"),
            lz4: self.features.contains_key("org.illumos:lz4_compress"),
            is_mos: false,
            pass: 1,
        }
    }

    fn sync_env(&self) -> SyncEnv {
        let p = self.policy_env();
        SyncEnv {
            spa: self.spa.clone(),
            embed: p.embed,
            lz4: p.lz4,
            hole_birth: self.feature_active("com.delphix:hole_birth"),
            userobj: self.features.contains_key("org.zfsonlinux:userobj_accounting"),
            projects: self.features.contains_key("org.zfsonlinux:project_quota"),
        }
    }

    /// Finish the sync of quiesced txg `q` (its datasets written): install the datasets' new
    /// trees, account their space in the MOS, sync the MOS until the space maps converge; the
    /// labels and the uberblock to write (`UbWrite::write`, which needs no pool state) follow.
    fn sync_finish(&mut self, q: Quiesced) -> Result<UbWrite> {
        let txg = q.txg;
        let spa = self.spa.clone();
        let root = spa.root_vdev.clone();
        // $MOS accounting of the previous txg (applied a txg late, as OpenZFS does).
        let md = std::mem::take(&mut self.mos_delta);
        if md != SpaceDelta::default() && self.mos_dir != 0 {
            self.dir_diduse(self.mos_dir, md, true)?;
        }
        // 1. Datasets: their new bps and space into the MOS.
        for (mut job, dead) in q.jobs.into_iter().zip(q.dead) {
            let id = job.id;
            let bp = job.bp_synced();
            // zil_sync: log blocks whose records this txg holds.
            for zbp in std::mem::take(&mut job.zil_free) {
                let mut dvas = Vec::new();
                crate::zio::bp_frees(&crate::zio::ZioCtx::new(&root, &spa.checksum_salt), &zbp, &mut dvas)?;
                let mut ms = self.ms.lock();
                for d in dvas {
                    ms.free_held(d.vdev, d.offset, d.asize);
                }
            }
            let ds = self.datasets.get_mut(&id).expect("a quiesced dataset stays open until synced");
            ds.os.install(job);
            let delta = std::mem::take(&mut ds.os.delta);
            // dsl_dataset_sync: features the blocks born this txg use become active here.
            for guid in std::mem::take(&mut ds.os.born_features) {
                self.ds_feature_activate(id, guid)?;
            }
            let mut p = DslDatasetPhys::decode(&self.mos.bonus(id)?, true).map_err(|e| ZfsError::corrupt(format!("dataset {id}"), e))?;
            let unique = p.unique_bytes;
            p.bp = bp;
            p.referenced_bytes = (p.referenced_bytes as i64 + delta.dsize).max(0) as u64;
            p.compressed_bytes = (p.compressed_bytes as i64 + delta.psize).max(0) as u64;
            p.uncompressed_bytes = (p.uncompressed_bytes as i64 + delta.lsize).max(0) as u64;
            // Dead blocks (kept by a snapshot) left the tree but stay this dataset's unique.
            let dead_dsize: i64 = dead.iter().map(|b| dsize_of(&root, b) as i64).sum();
            p.unique_bytes = (p.unique_bytes as i64 + delta.dsize + dead_dsize).max(0) as u64;
            let dir = p.dir_obj;
            self.mos.set_bonus(id, &p.encode())?;
            if dead.is_empty() {
                self.ds_diduse(dir, unique, &delta)?;
            } else {
                self.dataset_blocks_dead(id, unique, &delta, &dead)?;
            }
        }
        // The dedup tables (ddt_sync): entries into their ZAPs, copies nobody references freed.
        for bp in self.ddt.sync(&mut self.mos, &root)? {
            self.free_bp(&bp, txg)?;
        }
        // The scan's progress (dsl_scan_sync_state), when it changed.
        if let Some((phys, queue)) = spa.scan.take_dirty() {
            self.scan_sync_state(&phys, &queue)?;
        }
        // The error log (spa_errlog_sync): new entries into their ZAPs, rotated after a scan.
        self.errlog_sync()?;
        // The leaves' DTLs (vdev_dtl_sync), which may name a new object in the config.
        self.dtl_sync(txg)?;
        // A removed vdev's mapping condensed (spa_sync_condense_indirect), which names a new
        // mapping object in the config.
        self.condense_indirect_sync(txg)?;
        // 2. The MOS, until the space maps stop changing.
        if self.config_dirty {
            let cfg = self.mos.zap_lookup(1, "config")?.ok_or_else(|| ZfsError::Invalid("no config object".into()))?;
            let packed = self.config_at(txg).encode_xdr();
            self.mos.truncate(cfg, 0)?;
            self.mos.write(cfg, 0, &packed)?;
            self.mos.set_bonus(cfg, &(packed.len() as u64).to_le_bytes())?;
        }
        let mut pass = 1u32;
        let rootbp;
        loop {
            self.removal_sync_progress()?;
            let mut mos = std::mem::replace(&mut self.mos, ObjsetW::create(&spa, 0, DMU_OST_META, OsProps::default()));
            let r = self.sync_objset(&mut mos, pass, true, txg);
            self.mos = mos;
            let bp = r?;
            let d = std::mem::take(&mut self.mos.delta);
            self.mos_delta.dsize += d.dsize;
            self.mos_delta.psize += d.psize;
            self.mos_delta.lsize += d.lsize;
            let (syncs, obsolete) = {
                let mut ms = self.ms.lock();
                ms.obsolete_counts = self.feature_enabled(crate::vdev_removal::OBSOLETE_COUNTS);
                (ms.sync(txg, pass as u64), ms.take_obsolete())
            };
            if syncs.is_empty() && obsolete.is_empty() {
                rootbp = bp;
                break;
            }
            for s in syncs {
                self.write_space_map(s)?;
            }
            for (vdev, segs) in obsolete {
                self.write_obsolete_sm(vdev, &segs, txg, pass as u64)?;
                self.condense_due = true;
            }
            pass += 1;
            if pass > 100 {
                return Err(ZfsError::Invalid(format!("txg {txg} did not converge after 100 sync passes")));
            }
        }
        // 3. Labels and uberblock, encoded here, written by the caller.
        let ub = UberblockPhys {
            magic: oxzfs_format::uberblock::UBERBLOCK_MAGIC,
            version: self.version,
            txg,
            // vdev_guid_sum over the tree the config now has (a vdev just added or removed is
            // in the config before the pool reopens over it).
            guid_sum: self.config_guid_sum().unwrap_or_else(|| guid_sum(&root)),
            timestamp: now(),
            rootbp_raw: rootbp.encode(true),
            software_version: 5000,
            mmp_magic: 0,
            mmp_delay: 0,
            mmp_config: 0,
            checkpoint_txg: 0,
            little_endian: true,
        };
        let config_dirty = self.config_dirty;
        let (even, odd) = if config_dirty { (self.label_writes(&[0, 2], txg, 0)?, self.label_writes(&[1, 3], txg, 0)?) } else { (Vec::new(), Vec::new()) };
        let mut ubs = Vec::new();
        for leaf in root.leaves() {
            // An offline leaf is left as it was (vdev_writeable).
            let Some(dev) = leaf.dev.as_ref().filter(|_| !leaf.out_of_use()) else { continue };
            let slot = uberblock_slot_size(leaf_ashift(&root, leaf) as u64) as u64;
            let nslots = VDEV_UBERBLOCK_RING / slot;
            for l in 0..VDEV_LABELS {
                let off = label_offset(l, dev.size()) + VDEV_UBERBLOCK_RING_OFFSET + (txg % nslots) * slot;
                ubs.push((dev.clone(), off, encode_uberblock(&ub, slot as usize, off)));
            }
        }
        if ubs.is_empty() {
            // Every leaf out of use (a lone device removed): this txg would be on no device.
            return Err(ZfsError::Unavailable(format!("pool '{}': no device left to write txg {txg}'s uberblock to", spa.name)));
        }
        Ok(UbWrite { txg, root, rootbp, config_dirty, even, odd, ubs })
    }

    /// The sum of every vdev guid in the config's tree, the root's (the pool guid) included.
    fn config_guid_sum(&self) -> Option<u64> {
        fn sum(nv: &oxzfs_format::nvlist::NvList) -> u64 {
            nv.get_nvlist_array("children").unwrap_or_default().iter().fold(nv.get_u64("guid").unwrap_or(0), |a, c| a.wrapping_add(sum(c)))
        }
        let tree = self.config_nv.get_nvlist("vdev_tree")?;
        let kids = tree.get_nvlist_array("children").unwrap_or_default();
        Some(kids.iter().fold(self.pool_guid(), |a, c| a.wrapping_add(sum(c))))
    }

    /// After the uberblock of `ub` is on disk: deferred frees move on, the synced root is
    /// the pool's.
    fn sync_done(&mut self, ub: UbWrite) {
        let txg = ub.txg;
        if ub.config_dirty {
            self.config_dirty = false;
        }
        let oldest_reader = self.spa.oldest_reader();
        self.ms.lock().sync_done(txg, oldest_reader);
        for ds in self.datasets.values_mut() {
            ds.os.zil.synced(txg);
        }
        self.spa.set_synced(&ub.rootbp);
        self.last_sync = std::time::Instant::now();
        self.synced_txg = txg;
    }

    /// Sync one objset (a dataset's, or the MOS in pass `pass`) and free what it replaced.
    fn sync_objset(&mut self, os: &mut ObjsetW, pass: u32, is_mos: bool, txg: u64) -> Result<BlockPointer> {
        let env = self.sync_env();
        let mut job = os.freeze(txg);
        let ms = self.ms.clone();
        let r = run_job(&env, &ms, &mut self.ddt, &mut job, pass, is_mos, txg, 0);
        os.install(job);
        r.map(|(bp, _)| bp)
    }

    /// Free every allocation behind `bp` (a gang block: its header copies and its whole tree).
    pub(crate) fn free_bp(&mut self, bp: &BlockPointer, txg: u64) -> Result<()> {
        let spa = self.spa.clone();
        let ms = self.ms.clone();
        free_bp_in(&spa, &ms, &mut self.ddt, bp, txg)
    }

    /// Apply a space delta to a dsl_dir (HEAD) and its ancestors (CHILD).
    pub(crate) fn dir_diduse(&mut self, dir: u64, d: SpaceDelta, head: bool) -> Result<()> {
        let k = if head { oxzfs_format::dsl::DD_USED_HEAD } else { oxzfs_format::dsl::DD_USED_CHILD };
        self.dir_transfer(dir, d.dsize, d.psize, d.lsize, d.dsize, k, k)
    }

    /// Append a metaslab's new entries to its space map object (creating it on first use).
    fn write_space_map(&mut self, s: MsSync) -> Result<()> {
        let mut sm = s.sm_object;
        let histogram = self.feature_enabled("com.delphix:spacemap_histogram");
        if sm == 0 {
            let bonus = if histogram { 320 } else { 24 };
            let blksz = if self.version >= SPA_VERSION_FEATURES { 1 << 16 } else { 4096 };
            sm = self.mos.alloc_object(types::DMU_OT_SPACE_MAP, blksz, types::DMU_OT_SPACE_MAP_HEADER, bonus, 1)?;
            self.ms.lock().set_sm_object(s.vdev, s.ms_id, sm);
            let arr = self.ms_arrays[s.vdev as usize];
            self.mos.write(arr, s.ms_id * 8, &sm.to_le_bytes())?;
            if self.version >= SPA_VERSION_FEATURES && self.feature_enabled("com.delphix:spacemap_histogram") {
                self.feature_incr("com.delphix:spacemap_histogram", 1)?;
            }
        }
        let dn: DnodePhys = self.mos.dnode(sm)?;
        let mut phys = s.new_phys.clone();
        phys.object = sm;
        let start = phys.length - (s.words.len() as u64 * 8);
        let mut bytes = Vec::with_capacity(s.words.len() * 8);
        for w in &s.words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        self.mos.write(sm, start, &bytes)?;
        let bl = dn.bonuslen as usize;
        self.mos.set_bonus(sm, &phys.encode(bl))?;
        Ok(())
    }

}

/// Run one objset's sync job in pass `pass` of `txg` with allocator `ms`, and free what it
/// replaced (deferred by the metaslabs for two txgs) when born after `keep`; the blocks born
/// at or before it (shared with a snapshot) come back for the dataset's deadlist.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_job(env: &SyncEnv, ms: &SharedMs, ddt: &mut crate::ddt::Ddt, job: &mut SyncJob, pass: u32, is_mos: bool, txg: u64, keep: u64) -> Result<(BlockPointer, Vec<BlockPointer>)> {
    let root = env.spa.root_vdev.clone();
    let dsize = |bp: &BlockPointer| dsize_of(&root, bp);
    let min_alloc = crate::vdev::min_alloc(&root);
    let mut ctx = SyncCtx {
        spa: &env.spa,
        alloc: &mut PoolAlloc { ms, root: &root, min_alloc },
        txg,
        freed: Vec::new(),
        pass,
        dsize: &dsize,
        embed: env.embed,
        lz4: env.lz4,
        is_mos,
        hole_birth: env.hole_birth,
        userobj: env.userobj,
        projects: env.projects,
        ddt: &mut *ddt,
        queue: Default::default(),
    };
    let bp = job.run(&mut ctx)?;
    let (dead, freed): (Vec<BlockPointer>, Vec<BlockPointer>) = std::mem::take(&mut ctx.freed).into_iter().partition(|b| b.birth <= keep);
    drop(ctx);
    for bp in &freed {
        free_bp_in(&env.spa, ms, ddt, bp, txg)?;
    }
    Ok((bp, dead))
}

/// Give every allocation behind `bp` back to the allocator (free in `txg`, deferred): its
/// DVAs, and for a gang block its header copies and its whole tree. A dedup bp only drops its
/// reference in the dedup table (the copies go at the table's sync when none is left).
pub(crate) fn free_bp_in(spa: &Spa, ms: &SharedMs, ddt: &mut crate::ddt::Ddt, bp: &BlockPointer, txg: u64) -> Result<()> {
    if bp.dedup && !bp.embedded && !bp.is_hole() {
        ddt.free(&spa.root_vdev, bp);
        return Ok(());
    }
    let mut dvas = Vec::new();
    crate::zio::bp_frees(&crate::zio::ZioCtx::new(&spa.root_vdev, &spa.checksum_salt), bp, &mut dvas)?;
    for d in dvas {
        ms.lock().free(d.vdev, d.offset, d.asize, txg, bp.birth);
    }
    Ok(())
}

/// A device write: the device, the offset, the bytes.

/// Write the quiesced datasets of `q` (pass 1; the MOS follows in `sync_finish`).
pub(crate) fn sync_datasets(env: &SyncEnv, ms: &SharedMs, ddt: &mut crate::ddt::Ddt, q: &mut Quiesced) -> Result<()> {
    for ((job, keep), dead) in q.jobs.iter_mut().zip(&q.keep).zip(&mut q.dead) {
        *dead = run_job(env, ms, ddt, job, 1, false, q.txg, *keep)?.1;
    }
    Ok(())
}


// ------------------------------------------------------------------------------------------
// The handle mounts and commands share: the write state, the txg sync thread, the throttle.


/// The dirty-data limits of the write throttle (dsl_pool.c / dmu_tx.c tunables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirtyLimits {
    /// zfs_dirty_data_max: writers block at this much dirty data.
    pub max: u64,
    /// zfs_dirty_data_sync_percent: a sync starts past this share of `max`.
    pub sync_percent: u64,
    /// zfs_delay_min_dirty_percent: writers are delayed past this share of `max`.
    pub delay_min_percent: u64,
    /// zfs_delay_scale (ns): the curve's scale.
    pub delay_scale_ns: u64,
    /// zfs_delay_max_ns: no single delay is longer.
    pub delay_max_ns: u64,
}

impl DirtyLimits {
    /// OpenZFS's defaults for a machine of `ram` bytes: zfs_dirty_data_max is 10% of memory,
    /// capped at 4 GiB (the zfs_dirty_data_max tunable overrides it when set).
    pub fn for_ram(ram: u64, env_max: Option<u64>) -> DirtyLimits {
        let max = env_max.filter(|&m| m > 0).unwrap_or_else(|| (ram / 10).min(4 << 30)).max(1 << 20);
        DirtyLimits { max, sync_percent: 20, delay_min_percent: 60, delay_scale_ns: 1_000_000_000 / 2000, delay_max_ns: 100_000_000 }
    }

    fn from_system() -> DirtyLimits {
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        let psize = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let ram = if pages > 0 && psize > 0 { pages as u64 * psize as u64 } else { 4 << 30 };
        DirtyLimits::for_ram(ram, crate::tunables::dirty_data_max())
    }

    /// Dirty bytes past which the open txg is synced early (dsl_pool_need_dirty_sync):
    /// zfs_dirty_data_sync_percent of the maximum, or zfs_dirty_data_sync when that is less.
    /// OpenZFS 2.x has the share only (20% of up to 4 GiB); oxzfs keeps 0.7's byte limit
    /// beside it because every byte it writes arrives over FUSE first: with txgs of at most
    /// 64 MiB the sync writes one txg while the next arrives, where a share of gigabytes
    /// would leave a write of a few hundred megabytes and its fsync to run one after the other
    /// (512 MiB and an fsync on one file vdev: 490 MB/s with the share alone, 700 with both).
    pub fn sync_bytes(&self) -> u64 {
        Self::sync_bytes_with(self.max / 100 * self.sync_percent, crate::tunables::dirty_data_sync())
    }

    fn sync_bytes_with(share: u64, limit: Option<u64>) -> u64 {
        limit.map_or(share, |l| share.min(l))
    }

    /// How long a change must wait with `dirty` bytes dirty (dmu_tx_delay's curve):
    /// 0 below delay_min_percent of max, then delay_scale * (dirty - min) / (max - dirty),
    /// never more than delay_max_ns (and that at or past max, where writers also block).
    pub fn delay_ns(&self, dirty: u64) -> u64 {
        let min = self.max / 100 * self.delay_min_percent;
        if dirty <= min {
            return 0;
        }
        if dirty >= self.max {
            return self.delay_max_ns;
        }
        let t = self.delay_scale_ns as u128 * (dirty - min) as u128 / (self.max - dirty) as u128;
        t.min(self.delay_max_ns as u128) as u64
    }
}

/// The pool as mounts and commands share it.
///
/// Txg states: one txg is open (writers change it, under `w`); at most one is quiescing or
/// syncing: quiesce freezes every dataset's dirty state (under `w`) and opens the next txg;
/// the datasets' blocks are written without `w` (writers go on in the open txg, readers see
/// open dirty → frozen dirty → synced tree); the MOS, the space maps, labels and uberblock
/// are written under `w`, which also installs the new synced trees.
///
/// Lock order: `sync` (one sync at a time; also held by commands through `lock()`, so a
/// command never sees a txg half-synced and may sync inline) → `commit` (an intent-log
/// commit; quiesce) → `w` (the write state) → the metaslabs, `kick`, `fs`, `wakeup` (leaves,
/// held briefly).
pub struct PoolHandle {
    pub w: std::sync::Mutex<PoolW>,
    sync: std::sync::Mutex<()>,
    /// One intent-log commit at a time (concurrent fsyncs queue here, and the next commit
    /// takes all that queued: group commit). Quiesce takes it too, so a txg in which log
    /// blocks were allocated waits for them to be written (see `zil`).
    commit: std::sync::Mutex<()>,
    /// The (dataset, object) of each fsync waiting for the commit lock: the commit that gets
    /// it takes their objects' changes too, so they find nothing left to do.
    fsync_waiters: std::sync::Mutex<Vec<(u64, u64)>>,
    stop: std::sync::atomic::AtomicBool,
    /// Wakes the sync thread early (dirty data past the sync threshold).
    kick: std::sync::Mutex<bool>,
    kick_cv: std::sync::Condvar,
    /// The throttle's schedule: when the last delayed change may go (dp_last_wakeup).
    wakeup: std::sync::Mutex<std::time::Instant>,
    pub limits: DirtyLimits,
    /// The device-removal thread's state (see `vdev_removal_thread`): kept here, it outlives
    /// the reopen that ends a removal.
    pub removal: crate::vdev_removal::RemovalCtl,
    /// The rebuild thread's state (see `vdev_rebuild_thread`), of the same shape.
    pub rebuild: crate::vdev_removal::RemovalCtl,
    /// The trim thread's state (see `vdev_trim`), of the same shape.
    pub trim: crate::vdev_removal::RemovalCtl,
    /// The pool's root vdev as the write state has it (a reopen replaces it), for its I/O gate.
    root: std::sync::Mutex<Arc<crate::vdev::Vdev>>,
    /// Notified (under `kick`) after each txg sync of the sync thread, done or failed.
    synced_cv: std::sync::Condvar,
}

/// The write state held by a command: no txg is syncing meanwhile (see `PoolHandle`).
pub struct PoolGuard<'a> {
    w: std::sync::MutexGuard<'a, PoolW>,
    _commit: std::sync::MutexGuard<'a, ()>,
    _sync: std::sync::MutexGuard<'a, ()>,
}

impl std::ops::Deref for PoolGuard<'_> {
    type Target = PoolW;
    fn deref(&self) -> &PoolW {
        &self.w
    }
}

impl std::ops::DerefMut for PoolGuard<'_> {
    fn deref_mut(&mut self) -> &mut PoolW {
        &mut self.w
    }
}

pub(crate) fn unpoison<T>(r: std::sync::LockResult<T>) -> T {
    r.unwrap_or_else(|p| p.into_inner())
}

/// Run a piece of a sync, turning a panic (a bug) into an error so that the pool is
/// suspended, not wedged.
pub(crate) fn catch<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            Err(ZfsError::Invalid(format!("txg sync failed: {msg}")))
        }
    }
}

impl PoolHandle {
    /// Wrap a pool opened for writing and start its sync thread.
    pub fn start(pw: PoolW) -> Arc<PoolHandle> {
        pw.spa.root_vdev.stats.io_gate.arm();
        let root = std::sync::Mutex::new(pw.spa.root_vdev.clone());
        let h = Arc::new(PoolHandle {
            root,
            synced_cv: std::sync::Condvar::new(),
            w: std::sync::Mutex::new(pw),
            sync: std::sync::Mutex::new(()),
            commit: std::sync::Mutex::new(()),
            fsync_waiters: std::sync::Mutex::new(Vec::new()),
            stop: std::sync::atomic::AtomicBool::new(false),
            kick: std::sync::Mutex::new(false),
            kick_cv: std::sync::Condvar::new(),
            wakeup: std::sync::Mutex::new(std::time::Instant::now()),
            limits: DirtyLimits::from_system(),
            removal: Default::default(),
            rebuild: Default::default(),
            trim: Default::default(),
        });
        let weak = Arc::downgrade(&h);
        std::thread::Builder::new()
            .name("txg_sync".into())
            .spawn(move || loop {
                crate::vdev::gate_waits_here();
                let Some(h) = weak.upgrade() else { return };
                let kicked = {
                    let k = unpoison(h.kick.lock());
                    let (mut k, _) = unpoison(h.kick_cv.wait_timeout_while(k, std::time::Duration::from_millis(200), |k| !*k));
                    std::mem::take(&mut *k)
                };
                if h.stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                if h.sync_due(kicked) {
                    let s = unpoison(h.sync.lock());
                    let _ = h.sync_txg(&s);
                    drop(s);
                    let _k = unpoison(h.kick.lock());
                    h.synced_cv.notify_all();
                }
            })
            .expect("spawn the txg sync thread");
        h
    }

    /// The pool is being exported: its threads end.
    pub fn stopped(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A txg sync failed and the pool is suspended (see `PoolW::suspended`).
    pub fn is_suspended(&self) -> bool {
        // A sync waiting at the gate may hold the write state: ask the gate first.
        self.io_gate().stats.io_gate.suspended().is_some() || self.lock_open().suspended.is_some()
    }

    /// `zpool clear` of a pool whose I/O is suspended (zio_resume): the waiting sync writes
    /// are tried again; returns once the sync they belong to is done, or with an error when
    /// they failed again (the pool stays suspended) or a command's sync is still waiting.
    pub fn resume_io(&self) -> Result<()> {
        let root = self.io_gate();
        let gate = &root.stats.io_gate;
        gate.resume();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(e) = gate.suspended() {
                return Err(ZfsError::Unavailable(format!("pool I/O is currently suspended ({e})")));
            }
            if let Ok(_s) = self.sync.try_lock() {
                return Ok(());
            }
            if std::time::Instant::now() >= until {
                return Err(ZfsError::Unavailable("the resumed txg sync has not finished".into()));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The pool's root vdev, whose stats hold its I/O gate (`IoGate`), without the write
    /// state's lock.
    pub fn io_gate(&self) -> Arc<crate::vdev::Vdev> {
        unpoison(self.root.lock()).clone()
    }

    /// Whether the sync thread would sync now: dirty data past the threshold, the timeout
    /// passed, or `kicked`.
    fn sync_due(&self, kicked: bool) -> bool {
        let w = self.lock_open();
        w.suspended.is_none() && w.dirty() && (kicked || w.dirty_bytes() >= self.limits.sync_bytes() || w.last_sync.elapsed() >= crate::tunables::txg_timeout())
    }

    /// Hold txg syncs off (commands too) while a scan walks the synced tree: no block of it
    /// is freed or reused meanwhile (OpenZFS scans in syncing context for the same reason).
    pub fn hold_syncs(&self) -> std::sync::MutexGuard<'_, ()> {
        unpoison(self.sync.lock())
    }

    /// Sync the open txg if the sync thread would have (a scan that held syncs off lets the
    /// one it delayed happen).
    pub fn sync_if_due(&self) -> Result<()> {
        if !self.sync_due(false) {
            return Ok(());
        }
        let s = unpoison(self.sync.lock());
        self.sync_txg(&s)
    }

    /// The write state for a command (waits for a txg being synced; see `PoolHandle`).
    pub fn lock(&self) -> PoolGuard<'_> {
        let s = unpoison(self.sync.lock());
        let c = unpoison(self.commit.lock());
        PoolGuard { w: unpoison(self.w.lock()), _commit: c, _sync: s }
    }

    /// `lock`, unless the pool's I/O is suspended while waiting for it (EIO then): a txg sync
    /// waiting at the I/O gate holds the sync lock until a `zpool clear`, and a command or a
    /// background thread that waited for it there would hold up the commands (export, clear)
    /// that must go on meanwhile.
    pub fn lock_unless_suspended(&self) -> Result<PoolGuard<'_>> {
        let s = self.wait_unless_suspended(|| match self.sync.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        })?;
        let c = unpoison(self.commit.lock());
        let w = self.lock_open_unless_suspended()?;
        Ok(PoolGuard { w, _commit: c, _sync: s })
    }

    /// `take` tried until it gives the lock, unless the pool's I/O is suspended meanwhile.
    fn wait_unless_suspended<T>(&self, take: impl Fn() -> Option<T>) -> Result<T> {
        for tries in 0u32.. {
            if let Some(g) = take() {
                return Ok(g);
            }
            if let Some(e) = self.io_gate().stats.io_gate.suspended() {
                return Err(ZfsError::Posix(libc::EIO, format!("pool I/O is currently suspended ({e})")));
            }
            if tries < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        unreachable!("the loop returns")
    }

    /// Whether a change or read would get the write state at once (nobody holds it): a hint
    /// for running a request without handing it to another thread.
    pub fn idle(&self) -> bool {
        matches!(self.w.try_lock(), Ok(_))
    }

    /// The write state for a change or a read in the open txg (a sync may be under way).
    pub(crate) fn lock_open(&self) -> std::sync::MutexGuard<'_, PoolW> {
        unpoison(self.w.lock())
    }

    fn suspended(&self) -> Result<()> {
        self.lock_open().check_suspended()
    }

    /// The write state, unless the pool's I/O is suspended while waiting for it: a sync may
    /// hold the state while its write waits at the gate (in its finish, under the lock), and a
    /// caller that holds the daemon's state (a command) would then wait for the `zpool clear`
    /// that cannot come. EIO then, as `sync_now` answers a suspended pool.
    fn lock_open_unless_suspended(&self) -> Result<std::sync::MutexGuard<'_, PoolW>> {
        self.wait_unless_suspended(|| match self.w.try_lock() {
            Ok(w) => Some(w),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        })
    }

    /// Sync the open txg (the caller holds `sync`): quiesce under the lock, write the datasets
    /// without it, finish (MOS, uberblock) under it.
    fn sync_txg(&self, _sync: &std::sync::MutexGuard<'_, ()>) -> Result<()> {
        let (mut q, env, ms, mut ddt) = {
            let _commit = unpoison(self.commit.lock());
            let mut w = self.lock_open();
            w.check_suspended()?;
            if !w.dirty() {
                return Ok(());
            }
            let q = w.quiesce();
            let env = w.sync_env();
            let totals = w.ms.lock().space_totals();
            w.ms_out = Some(totals);
            let ms = w.ms.clone();
            let ddt = std::mem::take(&mut w.ddt);
            (q, env, ms, ddt)
        };
        let r = catch(|| sync_datasets(&env, &ms, &mut ddt, &mut q));
        let r = {
            let mut w = self.lock_open();
            w.ddt = ddt;
            w.ms_out = None;
            r.and_then(|_| catch(|| w.sync_finish(q)))
        };
        // The flushes, labels and uberblock without the lock; then the txg is synced.
        let r = r.and_then(|ub| {
            ub.root.stats.io_gate.write_or_wait(|| ub.write())?;
            self.lock_open().sync_done(ub);
            Ok(())
        });
        if let Err(e) = &r {
            let mut w = self.lock_open();
            if w.suspended.is_none() {
                w.suspended = Some(e.to_string());
            }
        }
        r
    }

    /// Wait until every change made before the call is on disk (txg_wait_synced for the open
    /// txg): one sync serves every waiter queued behind it.
    pub fn sync_now(&self) -> Result<()> {
        let target = {
            let w = self.lock_open_unless_suspended()?;
            let target = if w.dirty() { w.txg } else { w.txg - 1 };
            if w.synced_txg >= target {
                return Ok(());
            }
            target
        };
        // The sync thread syncs it: a write that reaches no device waits there for `zpool
        // clear` (see `IoGate`), while this caller (a command under the daemon's state, an
        // fsync) is answered that the pool's I/O is suspended.
        loop {
            let root = self.io_gate();
            if let Some(e) = root.stats.io_gate.suspended() {
                // (EIO, as an fsync on a suspended pool with failmode=continue gets.)
                return Err(ZfsError::Posix(libc::EIO, format!("pool I/O is currently suspended ({e})")));
            }
            {
                let w = self.lock_open_unless_suspended()?;
                if w.synced_txg >= target {
                    return Ok(());
                }
                w.check_suspended()?;
                // A pool whose syncs cannot wait (being created or imported, without the sync
                // thread's gate) syncs here.
                if !root.stats.io_gate.armed() || self.stopped() {
                    drop(w);
                    let s = unpoison(self.sync.lock());
                    if self.lock_open().synced_txg >= target {
                        return Ok(());
                    }
                    self.suspended()?;
                    return self.sync_txg(&s);
                }
            }
            let mut k = unpoison(self.kick.lock());
            *k = true;
            self.kick_cv.notify_all();
            let _ = unpoison(self.synced_cv.wait_timeout(k, std::time::Duration::from_millis(50)));
        }
    }

    /// Make every change to dataset `dsobj` made before the call durable (zil_commit): its
    /// records written to the intent log and the log's devices flushed; a txg sync where the
    /// log cannot say it (see `zil`). sync=disabled: nothing to do.
    pub fn zil_commit(&self, dsobj: u64) -> Result<()> {
        self.zil_commit_for(dsobj, None)
    }

    /// `zil_commit` for an fsync of object `foid`: the namespace's changes and `foid`'s (and
    /// those of the objects other fsyncs wait on meanwhile), not every file's.
    pub fn zil_commit_obj(&self, dsobj: u64, foid: u64) -> Result<()> {
        unpoison(self.fsync_waiters.lock()).push((dsobj, foid));
        self.zil_commit_for(dsobj, Some(foid))
    }

    fn zil_commit_for(&self, dsobj: u64, foid: Option<u64>) -> Result<()> {
        use crate::zil::{Prepared, ZIL_STATS};
        ZIL_STATS.commit_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        loop {
            let commit = unpoison(self.commit.lock());
            // Group commit: the objects of every fsync queued behind this lock.
            let target: Option<Vec<u64>> = foid.map(|f| {
                let mut w = unpoison(self.fsync_waiters.lock());
                let mut objs = vec![f];
                w.retain(|&(d, o)| {
                    if d == dsobj {
                        objs.push(o);
                    }
                    d != dsobj
                });
                objs.sort_unstable();
                objs.dedup();
                objs
            });
            let (step, root) = {
                let mut w = self.lock_open();
                (w.zil_prepare(dsobj, target.as_deref())?, w.spa.root_vdev.clone())
            };
            match step {
                Prepared::Nothing => return Ok(()),
                Prepared::Sync => {
                    drop(commit);
                    return self.sync_now();
                }
                Prepared::Create => {
                    drop(commit);
                    self.sync_now()?;
                }
                Prepared::Write(writes) => {
                    ZIL_STATS.commit_writer_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Err((top, e)) = crate::zil::write_commit(&root, &writes) else { return Ok(()) };
                    self.lock_open().zil_write_failed(dsobj, top, &e);
                    drop(commit);
                    return self.sync_now();
                }
            }
        }
    }

    /// `PoolW::zil_open` and the sync it asks for (a mount's, before it serves).
    pub fn zil_open(&self, dsobj: u64) -> Result<()> {
        let created = {
            let _c = unpoison(self.commit.lock());
            self.lock_open().zil_open(dsobj)?
        };
        if created {
            self.sync_now()?;
        }
        Ok(())
    }

    /// The write throttle before a change (dmu_tx_wait/dmu_tx_delay): past the sync threshold
    /// the sync thread is woken; past delay_min_percent the change waits its turn on the delay
    /// curve; at the maximum it waits until a sync brings the dirty data under it.
    fn throttle(&self) {
        let dirty = self.lock_open().dirty_bytes();
        if dirty >= self.limits.sync_bytes() {
            *unpoison(self.kick.lock()) = true;
            self.kick_cv.notify_all();
        }
        if dirty >= self.limits.max {
            // Blocked until the syncing txg frees room: the sync frees it when it installs.
            let _ = self.sync_now();
            return;
        }
        let delay = self.limits.delay_ns(dirty);
        if delay == 0 {
            return;
        }
        let now = std::time::Instant::now();
        let wake = {
            let mut last = unpoison(self.wakeup.lock());
            let d = std::time::Duration::from_nanos(delay);
            let wake = (now + d).max(*last + d);
            *last = wake;
            wake
        };
        if wake > now {
            std::thread::sleep(wake - now);
        }
    }

    /// Run a change on dataset `dsobj` in the open txg.
    pub fn with_fs<T>(&self, dsobj: u64, f: impl FnOnce(&mut ObjsetW, u64) -> Result<T>) -> Result<T> {
        self.suspended()?;
        self.throttle();
        let mut w = self.lock_open();
        let txg = w.txg;
        let os = w.objset(dsobj)?;
        if os.props.readonly {
            return Err(ZfsError::Posix(libc::EROFS, "read-only file system (readonly=on)".into()));
        }
        f(os, txg)
    }

    /// Like `with_fs`, for `zfs receive`, which writes a file system whatever its readonly
    /// property says (as OpenZFS's dmu_recv writes below the ZPL).
    pub fn with_fs_received<T>(&self, dsobj: u64, f: impl FnOnce(&mut ObjsetW, u64) -> Result<T>) -> Result<T> {
        self.suspended()?;
        self.throttle();
        let mut w = self.lock_open();
        let txg = w.txg;
        f(w.objset(dsobj)?, txg)
    }

    /// Like `with_fs`, for a change that needs about `incoming` bytes of new data: refused with
    /// ENOSPC when the pool is full (keeping the slop space), EDQUOT past a quota.
    ///
    /// The checks and the change run under one hold of the write state, so the change is
    /// dirty (and counted by the next writer's check) before anyone else checks: concurrent
    /// writers cannot pass the checks together and overshoot the margin between them (what
    /// OpenZFS's dsl_dir_tempreserve_space counts its reservations for; here the dirty bytes
    /// themselves are the reservation, as nothing happens between check and change).
    pub fn with_fs_space<T>(&self, dsobj: u64, incoming: u64, f: impl FnOnce(&mut ObjsetW, u64) -> Result<T>) -> Result<T> {
        self.suspended()?;
        self.throttle();
        let short = {
            let mut w = self.lock_open();
            match w.space_for(dsobj, incoming)? {
                None => {
                    let txg = w.txg;
                    return f(w.objset(dsobj)?, txg);
                }
                Some(short) => short,
            }
        };
        // Frees waiting in the open txg or deferred in the last two give space back; what
        // is dirty may be overwrites: sync and measure again, holding the pool meanwhile.
        self.sync_now()?;
        let mut g = self.lock();
        if short.space {
            let (synced, oldest) = (g.synced_txg, g.spa.oldest_reader());
            g.ms.lock().release_deferred(synced, oldest);
        }
        if let Some(short) = g.space_for(dsobj, incoming)? {
            return Err(short.err);
        }
        let txg = g.txg;
        f(g.objset(dsobj)?, txg)
    }

    /// Run a read on dataset `dsobj` (it sees the open txg).
    pub fn with_fs_ro<T>(&self, dsobj: u64, f: impl FnOnce(&mut ObjsetW) -> Result<T>) -> Result<T> {
        let mut w = self.lock_open();
        f(w.objset(dsobj)?)
    }

    pub fn name(&self) -> String {
        self.lock_open().spa.name.clone()
    }

    /// The pool's read side as the write state has it now (a reopen replaces it).
    pub fn spa(&self) -> Arc<Spa> {
        self.lock_open().spa.clone()
    }

    /// After export: mark the labels destroyed (zpool destroy).
    pub fn mark_destroyed(&self) -> Result<()> {
        self.lock().set_label_state(2)
    }

    /// Open the pool again from its devices (after `zpool add` changed the vdev tree), keeping
    /// the mounts: they go through this handle.
    pub fn reopen(&self, dirs: &[PathBuf]) -> Result<Arc<Spa>> {
        let mut w = self.lock();
        w.zil_close_all();
        w.sync_settled()?;
        // The new handle rebuilds the L2ARC from the cache devices; this one writes no more.
        w.spa.l2arc.shutdown();
        // (The config's: a reguid's new one once it is on disk.)
        let guid = w.pool_guid();
        let hostname = w.hostname.clone();
        let scan = crate::spa::scan(dirs);
        let cand = crate::spa::choose(&scan, &guid.to_string())?;
        let arc_max = w.spa.arc.stats().c_max;
        let mut nw = PoolW::open(cand, arc_max, &hostname)?;
        nw.fs_init = w.fs_init;
        let spa = nw.spa.clone();
        spa.root_vdev.stats.io_gate.arm();
        *unpoison(self.root.lock()) = spa.root_vdev.clone();
        *w = nw;
        Ok(spa)
    }

    /// Sync, mark the pool exported and stop the sync thread. A suspended pool (a sync failed:
    /// that txg's changes were not written) is not marked exported as if all were on disk: the
    /// error is returned and the labels keep the pool active at its last synced txg.
    pub fn export(&self) -> Result<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        *unpoison(self.kick.lock()) = true;
        self.kick_cv.notify_all();
        // A sync waiting for its I/O to resume gives up: its txg is lost, the pool suspended.
        let root = self.io_gate();
        if root.stats.io_gate.suspended().is_some() {
            root.stats.io_gate.give_up();
        }
        let mut w = self.lock();
        if let Some(e) = w.suspended.clone() {
            return Err(ZfsError::Unavailable(format!("pool I/O is currently suspended ({e})")));
        }
        w.export()
    }
}

// ------------------------------------------------------------------------------------------
// Datasets: create and destroy file systems (dsl_dir + dsl_dataset + objset + ZPL skeleton).



impl PoolHandle {
    /// [`PoolW::statfs`] under the pool's lock.
    pub fn statfs(&self, dsobj: u64) -> Result<crate::dsl_space::StatFs> {
        // Only the MOS and the space totals are read: they change under the write state's lock
        // alone, so a sync under way does not hold statfs up.
        self.lock_open().statfs(dsobj)
    }
}

#[cfg(test)]
mod tests {
    use super::DirtyLimits;

    const GIB: u64 = 1 << 30;

    /// zfs_dirty_data_max: 10% of memory, capped at 4 GiB; the override wins.
    #[test]
    fn dirty_data_max_from_memory() {
        assert_eq!(DirtyLimits::for_ram(16 * GIB, None).max, 16 * GIB / 10);
        assert_eq!(DirtyLimits::for_ram(64 * GIB, None).max, 4 * GIB);
        assert_eq!(DirtyLimits::for_ram(64 * GIB, Some(100 << 20)).max, 100 << 20);
        let l = DirtyLimits::for_ram(10 * GIB, None);
        assert_eq!(DirtyLimits::sync_bytes_with(l.max / 100 * 20, None), l.max / 100 * 20);
        assert_eq!(DirtyLimits::sync_bytes_with(l.max / 100 * 20, Some(64 << 20)), 64 << 20);
        assert_eq!(DirtyLimits::sync_bytes_with(32 << 20, Some(64 << 20)), 32 << 20);
    }

    /// dmu_tx_delay's curve: nothing up to 60% of the maximum, then scale * (dirty - min) /
    /// (max - dirty), growing and capped at 100 ms; at the maximum the cap.
    #[test]
    fn delay_curve() {
        let l = DirtyLimits { max: 1000 << 20, sync_percent: 20, delay_min_percent: 60, delay_scale_ns: 500_000, delay_max_ns: 100_000_000 };
        let min = l.max / 100 * 60;
        assert_eq!(l.delay_ns(0), 0);
        assert_eq!(l.delay_ns(min), 0);
        // Halfway between min and max: scale * 1 (the two distances are equal).
        let mid = min + (l.max - min) / 2;
        assert_eq!(l.delay_ns(mid), 500_000);
        // 90%: (900 - 600) / (1000 - 900) = 3 scales.
        assert_eq!(l.delay_ns(l.max / 100 * 90), 1_500_000);
        let mut last = 0;
        for pct in 61..100 {
            let d = l.delay_ns(l.max / 100 * pct);
            assert!(d >= last, "the delay grows with dirty data ({pct}%: {d} < {last})");
            last = d;
        }
        assert_eq!(l.delay_ns(l.max - 1), 100_000_000);
        assert_eq!(l.delay_ns(l.max), 100_000_000);
        assert_eq!(l.delay_ns(2 * l.max), 100_000_000);
    }
}

/// The file system a commit logs, as the intent log sees it (zil::CommitSource): file bytes
/// and blocks of the writable objset.
struct FsSource<'a> {
    os: &'a mut crate::dbuf::ObjsetW,
    ms: &'a crate::metaslab::SharedMs,
    root: &'a crate::vdev::Vdev,
    txg: u64,
    env: crate::dbuf::PolicyEnv,
    /// (object, block) written by this commit for its indirect records.
    written: Vec<(u64, u64)>,
}

impl crate::zil::CommitSource for FsSource<'_> {
    fn read(&mut self, foid: u64, off: u64, len: u64) -> Result<Option<Vec<u8>>> {
        match self.os.read(foid, off, len as usize) {
            Ok(d) => Ok(Some(d)),
            Err(ZfsError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn block_size(&mut self, foid: u64) -> Result<Option<u64>> {
        match self.os.dnode(foid) {
            Ok(dn) => Ok(Some(dn.data_block_size())),
            Err(ZfsError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write_block(&mut self, foid: u64, blkid: u64) -> Result<Option<(oxzfs_format::blkptr::BlockPointer, Vec<u8>)>> {
        let min_alloc = crate::vdev::min_alloc(self.root);
        let mut alloc = crate::metaslab::PoolAlloc { ms: self.ms, root: self.root, min_alloc };
        let r = self.os.dmu_sync(foid, blkid, self.txg, self.env, &mut alloc)?;
        if r.as_ref().is_some_and(|(_, phys)| !phys.is_empty()) {
            self.written.push((foid, blkid));
        }
        Ok(r)
    }
}
