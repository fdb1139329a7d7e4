//! spa: the storage pool's handle and how a pool is found — the device scan, the choice of
//! config and uberblock, and `Spa`, the imported pool every upper layer reads blocks through
//! (vdev tree, ARC, `read_bp`, error log, reader pins). Opening one (the MOS, features, the
//! version check) is `spa_load`'s; this module sits below dmu and names no objset.
//!
//! Finding a pool, as OpenZFS's spa_import does it:
//! 1. `scan`: every file or block device in the given directories is probed for its four labels
//!    (see `oxzfs_format::label`). A label carries the pool's name and guid, the device's own guid,
//!    the txg of the config, and the `vdev_tree` of the top-level vdev the device belongs to.
//!    Devices are grouped by pool guid and found by their own guid; the path stored in the label
//!    is never used to open anything.
//! 2. The pool's vdev tree is assembled from the newest top-level trees the labels hold (and
//!    replaced by the authoritative copy in the MOS once `spa_load` opens it).
//! 3. The active uberblock is the newest valid one (highest txg, then timestamp) in any label
//!    of any device of the pool; its root bp is the MOS objset.
//!
//! Reads go ARC → L2ARC (the pool's cache devices, `l2arc`) → vdevs; what a read brings in is
//! kept in the ARC (and remembered for the L2ARC feed) as the dataset's primarycache and
//! secondarycache allow (`set_cache_policy`, published by the write state for each open
//! dataset; all/all for others and read-only imports). A feed thread per pool fills the cache
//! devices (`start_l2arc`).
//!
//! Locking: the Spa is immutable after open except for the ARC (its own lock), the synced MOS
//! root (`mos`, a leaf lock), the error log (a leaf lock) and the blocks being read (`inflight`,
//! a leaf lock; a reader waiting for another's read of the same block holds none).

use crate::arc::{AdaptiveCache, ArcKey};
use crate::dsl_scan::ScanState;
use crate::l2arc::L2Arc;
use crate::vdev::{open_device, BlockDevice, DeviceMap, Vdev, VdevKind, VdevState, READ_HEAL, READ_PLAIN};
use crate::zio::{self, ZioCtx};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::label::{self, VDEV_LABELS, VDEV_LABEL_SIZE};
use oxzfs_format::nvlist::NvList;
use oxzfs_format::objset::ObjsetPhys;
use oxzfs_format::uberblock::{self, UberblockPhys};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Pool states as the label's `state` records them (POOL_STATE_*).
pub const POOL_STATE_ACTIVE: u64 = 0;
pub const POOL_STATE_EXPORTED: u64 = 1;
pub const POOL_STATE_DESTROYED: u64 = 2;
pub const POOL_STATE_SPARE: u64 = 3;
pub const POOL_STATE_L2CACHE: u64 = 4;

/// The feature-flags pool version (SPA_VERSION_FEATURES).
pub const SPA_VERSION_FEATURES: u64 = 5000;
/// The first pool version with deduplication (SPA_VERSION_DEDUP).
pub const SPA_VERSION_DEDUP: u64 = 21;
/// The first txg of a new pool (TXG_INITIAL).
pub const TXG_INITIAL: u64 = 4;

/// One device's labels as probed.
pub struct ProbedDevice {
    pub path: PathBuf,
    pub dev: Arc<dyn BlockDevice>,
    /// The newest valid label config of the device.
    pub config: NvList,
    pub guid: u64,
    pub pool_guid: u64,
    pub txg: u64,
    pub state: u64,
    /// Valid uberblocks found in the device's labels.
    pub uberblocks: Vec<UberblockPhys>,
    /// Every valid label config with its txg (`config` is the newest of them).
    pub labels: Vec<(u64, NvList)>,
    /// How many of the four labels were valid.
    pub valid_labels: usize,
}

/// A pool found by scanning.
pub struct PoolCandidate {
    pub name: String,
    pub guid: u64,
    pub txg: u64,
    /// The newest label config (carries the name, version, hostid, and one top-level vdev tree).
    pub config: NvList,
    pub devices: DeviceMap,
    /// ONLINE, DEGRADED or UNAVAIL, from the assembled tree.
    pub state: String,
    /// The vdev tree assembled from the labels.
    pub root: Arc<Vdev>,
    pub problems: Vec<String>,
    /// The newest uberblock among the pool's devices.
    pub uberblock: Option<UberblockPhys>,
    /// Label `state` (exported, active, destroyed).
    pub pool_state: u64,
    /// Leaves named by the labels' trees but not found, with their stored path.
    pub missing: Vec<(u64, String)>,
    /// `zpool import -m` (ZFS_IMPORT_MISSING_LOG): import even when log devices are missing;
    /// the intent logs are then dropped, not replayed.
    pub missing_log_ok: bool,
}

pub struct ScanResult {
    pub pools: Vec<PoolCandidate>,
    /// Files that looked like ZFS devices but could not be used, and why.
    pub problems: Vec<String>,
}

/// Probe one device: its labels' configs and uberblocks. Errors say why it is not a pool device.
pub fn probe(path: &Path) -> std::result::Result<ProbedDevice, String> {
    let dev = open_device(path, false).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = dev.size();
    if size < 4 * VDEV_LABEL_SIZE {
        return Err(format!("{}: too small to hold ZFS labels ({size} bytes)", path.display()));
    }
    let mut best: Option<(u64, NvList)> = None;
    let mut labels = Vec::new();
    let mut ubs = Vec::new();
    let mut valid = 0;
    let mut ashift_hint = 9;
    let mut last_err = String::from("no valid label");
    for l in 0..VDEV_LABELS {
        let off = label::label_offset(l, size);
        let mut buf = vec![0u8; VDEV_LABEL_SIZE as usize];
        if let Err(e) = dev.read_at(&mut buf, off) {
            last_err = format!("label {l}: {e}");
            continue;
        }
        let cfg_off = 16 << 10;
        match label::decode_label_config(&buf[cfg_off..cfg_off + (112 << 10)], off + cfg_off as u64) {
            Ok(cfg) => {
                valid += 1;
                let txg = cfg.get_u64("txg").unwrap_or(0);
                if let Some(a) = cfg.get_nvlist("vdev_tree").and_then(|t| t.get_u64("ashift")) {
                    ashift_hint = a;
                }
                labels.push((txg, cfg.clone()));
                if best.as_ref().map_or(true, |(t, _)| txg > *t) {
                    best = Some((txg, cfg));
                }
            }
            Err(e) => last_err = format!("label {l}: {e}"),
        }
        let ring_off = 128usize << 10;
        ubs.extend(uberblock::decode_ring(&buf[ring_off..], off + ring_off as u64, ashift_hint));
    }
    let (txg, config) = best.ok_or_else(|| format!("{}: not a ZFS device ({last_err})", path.display()))?;
    Ok(ProbedDevice {
        path: path.to_path_buf(),
        dev,
        guid: config.get_u64("guid").unwrap_or(0),
        pool_guid: config.get_u64("pool_guid").unwrap_or(0),
        state: config.get_u64("state").unwrap_or(0),
        txg,
        config,
        uberblocks: ubs,
        labels,
        valid_labels: valid,
    })
}

/// The label config of `d` that goes with an uberblock of txg `ub_txg` (vdev_label_read_config
/// with the load txg): the newest label not newer than the uberblock (one without a txg counts
/// as the oldest). A label newer than the
/// uberblock was written by a txg whose uberblock never landed and describes a pool that is
/// not there; a device with only such labels is left out (OpenZFS finds its label invalid).
fn label_for_txg(d: &ProbedDevice, ub_txg: u64) -> Option<(u64, NvList)> {
    let usable = d.labels.iter().filter(|(t, _)| *t <= ub_txg);
    usable.max_by_key(|(t, _)| *t).cloned()
}

/// Find every pool whose devices are in `dirs` (files and block devices directly inside them,
/// or the paths themselves when they name devices).
pub fn scan(dirs: &[PathBuf]) -> ScanResult {
    let mut problems = Vec::new();
    let mut paths = Vec::new();
    for d in dirs {
        match std::fs::read_dir(d) {
            Ok(rd) => {
                // The entry's type as the directory gives it (no stat): a directory is skipped
                // without being looked at, since it may be the mountpoint of a file system of
                // the pool being reopened, whose FUSE requests wait for the lock the caller
                // holds. Only a symlink (or a type the file system does not give) is stat'ed.
                let mut entries: Vec<(PathBuf, Option<std::fs::FileType>)> = rd.filter_map(|e| e.ok().map(|e| (e.path(), e.file_type().ok()))).collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                for (p, ft) in entries {
                    use std::os::unix::fs::FileTypeExt;
                    let wanted = |t: std::fs::FileType| t.is_file() || t.is_block_device();
                    match ft {
                        Some(t) if !t.is_symlink() => {
                            if wanted(t) {
                                paths.push(p);
                            }
                        }
                        _ => {
                            if std::fs::metadata(&p).is_ok_and(|md| wanted(md.file_type())) {
                                paths.push(p);
                            }
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => paths.push(d.clone()),
            Err(e) => problems.push(format!("cannot open '{}': {e}", d.display())),
        }
    }
    let mut by_pool: BTreeMap<u64, Vec<ProbedDevice>> = BTreeMap::new();
    for p in paths {
        match probe(&p) {
            Ok(pd) => {
                if pd.pool_guid == 0 || pd.state == POOL_STATE_L2CACHE || pd.state == POOL_STATE_SPARE {
                    continue; // cache and spare devices belong to no pool by themselves
                }
                if pd.state == POOL_STATE_DESTROYED {
                    continue;
                }
                by_pool.entry(pd.pool_guid).or_default().push(pd);
            }
            Err(e) => {
                if !e.contains("not a ZFS device") && !e.contains("too small") {
                    problems.push(e);
                }
            }
        }
    }
    let pools = by_pool.into_values().map(assemble).collect();
    ScanResult { pools, problems }
}

/// Assemble a candidate from the devices of one pool.
fn assemble(mut devs: Vec<ProbedDevice>) -> PoolCandidate {
    let uberblock = {
        let all: Vec<&UberblockPhys> = devs.iter().flat_map(|d| d.uberblocks.iter()).collect();
        uberblock::best_uberblock(all.into_iter()).cloned()
    };
    // Labels newer than the uberblock chosen are ignored, as spa_load's vdev_validate does.
    // (Should every label be newer, the labels are all there is to go by.)
    if let Some(ub) = uberblock.as_ref().filter(|ub| devs.iter().any(|d| label_for_txg(d, ub.txg).is_some())) {
        let kept: Vec<ProbedDevice> = devs
            .drain(..)
            .filter_map(|mut d| {
                let (txg, config) = label_for_txg(&d, ub.txg)?;
                d.txg = txg;
                d.state = config.get_u64("state").unwrap_or(d.state);
                d.config = config;
                Some(d)
            })
            .collect();
        devs = kept;
    }
    let newest = devs.iter().max_by_key(|d| d.txg).expect("non-empty group");
    let config = newest.config.clone();
    let name = config.get_str("name").unwrap_or("?").to_string();
    let guid = newest.pool_guid;
    let txg = newest.txg;
    let pool_state = newest.state;
    let mut devices: DeviceMap = HashMap::new();
    // Prefer, for a guid seen twice, the copy with the newer label.
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for d in &devs {
        if seen.get(&d.guid).map_or(true, |t| d.txg > *t) {
            seen.insert(d.guid, d.txg);
            devices.insert(d.guid, (d.path.clone(), d.dev.clone()));
        }
    }
    // Newest vdev_tree per top-level id.
    let mut tops: BTreeMap<u64, (u64, NvList)> = BTreeMap::new();
    for d in &devs {
        if let Some(t) = d.config.get_nvlist("vdev_tree") {
            let id = t.get_u64("id").unwrap_or(0);
            if tops.get(&id).map_or(true, |(tx, _)| d.txg > *tx) {
                tops.insert(id, (d.txg, t.clone()));
            }
        }
    }
    let holes: Vec<u64> = config.get_u64_array("hole_array").map(|a| a.to_vec()).unwrap_or_default();
    let nchildren = config.get_u64("vdev_children").unwrap_or(tops.keys().max().map_or(1, |m| m + 1)).min(1024);
    let mut problems = Vec::new();
    let mut children = Vec::new();
    for id in 0..nchildren {
        match tops.get(&id) {
            Some((_, t)) => match Vdev::from_config(t, &devices, 1) {
                Ok(v) => children.push(v),
                Err(e) => {
                    problems.push(format!("top-level vdev {id}: {e}"));
                    children.push(missing_top(id));
                }
            },
            // Ids the config lists as holes (removed top-level vdevs) are not missing.
            None if holes.contains(&id) => children.push(hole_top(id)),
            None => children.push(missing_top(id)),
        }
    }
    let root = Arc::new(Vdev {
        id: 0,
        guid,
        kind: VdevKind::Root,
        ashift: 0,
        asize: 0,
        path: None,
        dev: None,
        children,
        stats: Default::default(),
        is_log: false,
        alloc_bias: String::new(),
        metaslab_array: 0,
        metaslab_shift: 0,
        indirect: None,
    });
    let mut missing = Vec::new();
    for leaf in root.leaves() {
        if leaf.dev.is_none() {
            missing.push((leaf.guid, leaf.path.clone().unwrap_or_else(|| leaf.guid.to_string())));
        }
    }
    for top in &root.children {
        if top.is_missing_top() {
            missing.push((0, format!("top-level vdev {}", top.id)));
        }
    }
    let state = root_state(&root).as_str().to_string();
    PoolCandidate { name, guid, txg, config, devices, state, root, problems, uberblock, pool_state, missing, missing_log_ok: false }
}

fn hole_top(id: u64) -> Arc<Vdev> {
    let mut v = missing_top(id);
    if let Some(m) = Arc::get_mut(&mut v) {
        m.path = Some(crate::vdev::HOLE.to_string());
    }
    v
}

fn missing_top(id: u64) -> Arc<Vdev> {
    Arc::new(Vdev {
        id,
        guid: 0,
        kind: VdevKind::Hole,
        ashift: 0,
        asize: 0,
        path: None,
        dev: None,
        children: Vec::new(),
        stats: Default::default(),
        is_log: false,
        alloc_bias: String::new(),
        metaslab_array: 0,
        metaslab_shift: 0,
        indirect: None,
    })
}

/// The pool's health: UNAVAIL when a top-level vdev is unusable, DEGRADED when any is degraded.
pub fn root_state(root: &Vdev) -> VdevState {
    let mut st = VdevState::Online;
    for top in &root.children {
        if top.is_missing_top() {
            return VdevState::Unavail;
        }
        match top.state() {
            VdevState::Unavail | VdevState::Faulted | VdevState::Offline | VdevState::Removed => {
                if top.is_log {
                    st = VdevState::Degraded;
                } else {
                    return VdevState::Unavail;
                }
            }
            VdevState::Degraded => st = VdevState::Degraded,
            VdevState::Online => {}
        }
    }
    st
}

/// An imported (opened) pool.
pub struct Spa {
    pub name: String,
    pub guid: u64,
    /// The pool config: the MOS copy when readable, else the newest label's.
    pub config: NvList,
    pub root_vdev: Arc<Vdev>,
    pub uberblock: UberblockPhys,
    pub rootbp: BlockPointer,
    /// The pool version (SPA_VERSION): changed only by `zpool upgrade` (PoolW::upgrade_to_features).
    version: std::sync::atomic::AtomicU64,
    pub readonly: bool,
    /// The ARC every pool shares (`arc::shared`), and this import's id in its keys.
    pub arc: Arc<AdaptiveCache>,
    pub arc_id: u64,
    /// This pool's share of the ARC's hits and misses.
    pub arc_hits: std::sync::atomic::AtomicU64,
    pub arc_misses: std::sync::atomic::AtomicU64,
    /// The cache devices (level-2 ARC).
    pub l2arc: Arc<L2Arc>,
    /// primarycache and secondarycache of datasets by object number (0 none, 1 metadata,
    /// 2 all); absent: all.
    cache_policy: Mutex<HashMap<u64, (u8, u8)>>,
    pub checksum_salt: [u8; 32],
    /// The MOS as of the last synced txg: its bp and decoded objset_phys (see `dmu`'s `Spa::mos`).
    pub(crate) mos: Mutex<Option<(BlockPointer, ObjsetPhys)>>,
    /// The error log (`spa_errlog`): in core, and what the next sync adds to the MOS.
    pub errlog: Mutex<crate::spa_errlog::ErrLog>,
    /// Lock-free readers at work, by the txg of the tree they walk (see `ReaderPin`).
    readers: Mutex<BTreeMap<u64, usize>>,
    /// Blocks being read from the vdevs now: a second reader of one (a demand read behind a
    /// prefetch) waits for that read instead of issuing its own (arc_read's in-flight header).
    inflight: Mutex<HashMap<ArcKey, Arc<InFlight>>>,
    /// Snapshots being sent (dataset object → streams reading it): `zfs destroy` of one is
    /// refused as busy meanwhile (OpenZFS's dsl_dataset_long_hold by dmu_send).
    send_holds: Mutex<BTreeMap<u64, usize>>,
    /// Device map (guid → path, device), including cache and spare devices found by the scan.
    pub devices: DeviceMap,
    /// The scrub's state (see `dsl_scan`).
    pub scan: ScanState,
    /// `dsl::dedup_totals` of the MOS whose bp checksum is the key: every write's space check
    /// asks, and the DDT statistics change only when a sync writes a new MOS.
    pub(crate) dedup_totals: Mutex<Option<([u64; 4], (u64, u64))>>,
    /// The keys of encrypted datasets loaded now (`zfs load-key`).
    pub keystore: crate::spa_keystore::Keystore,
}

impl Spa {
    /// A pool handle: its config and vdev tree, the uberblock it was opened at (and the MOS
    /// root bp in it), nothing read yet. The pools share one ARC, made by the first with
    /// `arc_max` bytes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(name: &str, guid: u64, config: NvList, root: Arc<Vdev>, uberblock: UberblockPhys, rootbp: BlockPointer, version: u64, readonly: bool, salt: [u8; 32], devices: DeviceMap, arc_max: u64) -> Spa {
        Spa {
            name: name.to_string(),
            guid,
            config,
            root_vdev: root,
            uberblock,
            rootbp,
            version: std::sync::atomic::AtomicU64::new(version),
            readonly,
            arc: crate::arc::shared(arc_max),
            arc_id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            arc_hits: Default::default(),
            arc_misses: Default::default(),
            l2arc: Arc::new(L2Arc::new(guid)),
            cache_policy: Default::default(),
            checksum_salt: salt,
            mos: Mutex::new(None),
            errlog: Mutex::new(Default::default()),
            readers: Mutex::new(BTreeMap::new()),
            inflight: Default::default(),
            send_holds: Default::default(),
            devices,
            scan: ScanState::default(),
            dedup_totals: Mutex::new(None),
            keystore: Default::default(),
        }
    }

    /// A pool being created: no uberblock yet; the MOS handle appears at the first sync.
    #[allow(clippy::too_many_arguments)]
    /// The pool version.
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A `zpool upgrade` raised the version (synced).
    pub(crate) fn set_version(&self, v: u64) {
        self.version.store(v, std::sync::atomic::Ordering::Relaxed)
    }

    pub fn new_for_write(name: &str, guid: u64, config: NvList, root: Arc<Vdev>, version: u64, salt: [u8; 32], devices: DeviceMap, arc_max: u64) -> Spa {
        let ub = UberblockPhys {
            magic: oxzfs_format::uberblock::UBERBLOCK_MAGIC,
            version,
            txg: 0,
            guid_sum: 0,
            timestamp: 0,
            rootbp_raw: [0; 128],
            software_version: 0,
            mmp_magic: 0,
            mmp_delay: 0,
            mmp_config: 0,
            checkpoint_txg: 0,
            little_endian: true,
        };
        Spa::new(name, guid, config, root, ub, BlockPointer::hole(), version, false, salt, devices, arc_max)
    }

    /// After a txg synced: reads of the pool's metadata (list, get, status) see it.
    pub fn set_synced(&self, rootbp: &BlockPointer) {
        if let Some(phys) = self.read_bp(rootbp).ok().and_then(|b| ObjsetPhys::decode(&b, rootbp.little_endian).ok()) {
            *self.mos.lock().unwrap() = Some((rootbp.clone(), phys));
        }
    }

    /// Forget the MOS (export); the L2ARC stops feeding.
    pub fn close(&self) {
        self.l2arc.shutdown();
        self.mos.lock().unwrap().take();
        // The pool's blocks leave the shared ARC now (arc_flush at export), not when the last
        // thread holding the handle lets it go.
        self.arc.flush_spa(self.arc_id);
    }

    /// Dataset `ds`'s primarycache and secondarycache (0 none, 1 metadata, 2 all).
    pub fn set_cache_policy(&self, ds: u64, primary: u8, secondary: u8) {
        let mut p = self.cache_policy.lock().unwrap_or_else(|p| p.into_inner());
        if (primary, secondary) == (2, 2) {
            p.remove(&ds);
        } else {
            p.insert(ds, (primary, secondary));
        }
    }

    /// Whether the ARC keeps, and whether the L2ARC may get, block `bp` of dataset `ds`.
    fn cacheable(&self, bp: &BlockPointer, ds: u64) -> (bool, bool) {
        let (primary, secondary) = self.cache_policy.lock().unwrap_or_else(|p| p.into_inner()).get(&ds).copied().unwrap_or((2, 2));
        let meta = crate::l2arc::is_metadata(bp);
        let allows = |p: u8| p == 2 || (p == 1 && meta);
        (allows(primary), allows(secondary) && self.l2arc.has_devices())
    }

    /// Keep a block just read in the ARC as its dataset allows (`phys`: its physical bytes
    /// when compressed, what the compressed ARC keeps); a prefetched one is not for the L2ARC
    /// under l2arc_noprefetch (until a demand read hits it).
    fn arc_keep(&self, k: ArcKey, bp: &BlockPointer, ds: u64, data: &Arc<Vec<u8>>, phys: Option<Vec<u8>>, prefetch: bool) {
        match self.cacheable(bp, ds) {
            (false, _) => return,
            (true, l2) => {
                let l2 = l2 && !(prefetch && crate::tunables::l2arc_noprefetch());
                self.arc.insert_block(k, data.clone(), phys, bp.compress, l2.then_some(bp));
            }
        }
        if prefetch {
            self.arc.mark_prefetch(&k);
        }
        self.classify(&k, bp);
    }

    /// Tell the ARC what a block it now holds is (metadata, dnodes).
    fn classify(&self, k: &ArcKey, bp: &BlockPointer) {
        let kind = if bp.level == 0 && bp.typ == oxzfs_format::types::DMU_OT_DNODE {
            crate::arc::BufKind::Dnode
        } else if crate::l2arc::is_metadata(bp) {
            crate::arc::BufKind::Metadata
        } else {
            return;
        };
        self.arc.classify(k, kind);
    }

    /// Add the pool's cache devices found at import (`guid`, path, ashift) to the L2ARC and,
    /// for a writable pool, start its feed thread. A device that cannot be opened or used is
    /// named in the log and left out.
    pub fn open_cache_devices(self: &Arc<Self>, found: &[(u64, PathBuf, u8)]) {
        for (guid, path, ashift) in found {
            let r = crate::vdev::open_device(path, !self.readonly)
                .map_err(|e| format!("cache device {}: {e}", path.display()))
                .and_then(|dev| self.l2arc.add_device(*guid, path.clone(), dev, *ashift, !self.readonly));
            if let Err(e) = r {
                crate::l2arc::log(format!("pool '{}': {e}; not used", self.name));
            }
        }
        if !self.readonly {
            self.start_l2arc();
        }
    }

    /// The feed thread (l2arc_feed_thread, one per pool): one feed of the next cache device
    /// every l2arc_feed_secs, or every l2arc_feed_min_ms while the feeds write more than half
    /// of what they want (l2arc_feed_again, OpenZFS's l2arc_write_interval); it ends with the
    /// pool.
    fn start_l2arc(self: &Arc<Self>) {
        use crate::tunables;
        let weak = Arc::downgrade(self);
        let _ = std::thread::Builder::new().name("l2arc_feed".into()).spawn(move || {
            crate::l2arc::lowest_priority();
            let mut busy = false;
            let mut began = std::time::Instant::now();
            loop {
                // The next feed is due an interval after the last one began, not after it
                // ended (l2arc_write_interval): a long feed does not slow the feeding down.
                let wait = if busy && tunables::l2arc_feed_again() { tunables::l2arc_feed_min() } else { tunables::l2arc_feed_secs() };
                let t0 = began;
                while t0.elapsed() < wait {
                    std::thread::sleep(wait.saturating_sub(t0.elapsed()).min(std::time::Duration::from_millis(100)));
                    match weak.upgrade() {
                        Some(s) if !s.l2arc.stopped() => {
                            // Buffers evicted unwritten pile up: feed them now, before
                            // more are pushed out of the bounded queue.
                            // (Not sooner than l2arc_feed_min_ms after the last feed.)
                            if t0.elapsed() >= tunables::l2arc_feed_min() && s.arc.l2_pending_bytes() > tunables::l2arc_write_max() / 2 {
                                break;
                            }
                        }
                        _ => return,
                    }
                }
                let Some(spa) = weak.upgrade() else { return };
                began = std::time::Instant::now();
                let wanted = tunables::l2arc_write_max() + if spa.arc.warm() { 0 } else { tunables::l2arc_write_boost() };
                let wrote = spa.l2arc.feed_once(&spa.arc, spa.arc_id, &spa.checksum_salt);
                busy = wrote > wanted / 2;
            }
        });
    }

    /// The MOS root (bp, objset_phys); None after `close`.
    pub fn mos_root(&self) -> Option<(BlockPointer, ObjsetPhys)> {
        self.mos.lock().unwrap().clone()
    }

    /// The MOS's root block pointer alone (`mos_root` without a copy of its objset_phys, for
    /// the per-operation callers that want its birth or checksum).
    pub fn mos_bp(&self) -> Option<BlockPointer> {
        self.mos.lock().unwrap().as_ref().map(|(bp, _)| bp.clone())
    }

    pub fn object_directory(&self) -> u64 {
        1
    }

    pub fn txg(&self) -> u64 {
        self.uberblock.txg
    }

    /// The logical bytes of a block, through the ARC.
    pub fn read_bp(&self, bp: &BlockPointer) -> Result<Arc<Vec<u8>>> {
        self.read_bp_for(bp, 0)
    }

    /// `read_bp` of a block of dataset `ds` (its primarycache/secondarycache apply).
    pub fn read_bp_for(&self, bp: &BlockPointer, ds: u64) -> Result<Arc<Vec<u8>>> {
        self.read_bp_as(bp, ds, false)
    }

    /// `read_bp_for` by read-ahead (a prefetch: see `arc_keep`).
    pub fn read_bp_prefetch(&self, bp: &BlockPointer, ds: u64) -> Result<Arc<Vec<u8>>> {
        self.read_bp_as(bp, ds, true)
    }

    fn read_bp_as(&self, bp: &BlockPointer, ds: u64, prefetch: bool) -> Result<Arc<Vec<u8>>> {
        if bp.is_hole() && !bp.embedded {
            return Ok(Arc::new(vec![0u8; bp.lsize as usize]));
        }
        if bp.is_encrypted_data() && !bp.embedded {
            return self.read_encrypted(bp, ds, prefetch);
        }
        // Data of an encrypted type in a dataset whose key is loaded is always encrypted
        // there: a plain pointer to it is someone else's block (OpenZFS's EIO).
        if ds != 0 && bp.level == 0 && oxzfs_format::types::ot_is_encrypted(bp.typ) && self.keystore.dataset(ds).is_some() {
            return Err(ZfsError::Checksum { context: format!("pool '{}' dataset {ds}: unencrypted block in an encrypted dataset ({bp})", self.name) });
        }
        let key = arc_key(self.arc_id, bp);
        if let Some(k) = &key {
            let hit = if !prefetch && self.l2arc.has_devices() && self.cacheable(bp, ds).1 { self.arc.get_l2(k, bp) } else { self.arc.get(k) };
            self.arc.count_access(crate::arc::Access { prefetch, meta: crate::l2arc::is_metadata(bp), hit: hit.is_some() });
            if let Some(d) = hit {
                self.arc_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(d);
            }
            self.arc_misses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let Some(k) = key else { return self.read_bp_uncached(bp).map(Arc::new) };
        // One read per block at a time: join one under way, or announce ours.
        let (mine, flight) = {
            let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            match m.get(&k) {
                Some(f) => (false, f.clone()),
                None => {
                    let f = Arc::new(InFlight::default());
                    m.insert(k, f.clone());
                    (true, f)
                }
            }
        };
        if !mine {
            let done = flight.done.lock().unwrap_or_else(|p| p.into_inner());
            let done = flight.cv.wait_while(done, |d| d.is_none()).unwrap_or_else(|p| p.into_inner());
            if let Some(Some(d)) = done.as_ref() {
                return Ok(d.clone());
            }
            // That read failed: try on our own (and report our own error).
            drop(done);
            return self.read_bp_uncached(bp).map(Arc::new);
        }
        // Done (or unwound by a bug): the waiters are told either way.
        struct Announce<'a>(&'a Spa, ArcKey, Arc<InFlight>, Option<Arc<Vec<u8>>>);
        impl Drop for Announce<'_> {
            fn drop(&mut self) {
                self.0.inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.1);
                *self.2.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.3.take());
                self.2.cv.notify_all();
            }
        }
        let mut announce = Announce(self, k, flight, None);
        let l2 = if self.l2arc.has_devices() { self.l2arc.read(bp, &self.checksum_salt) } else { None };
        let from_l2 = l2.is_some();
        let (data, phys) = match l2 {
            Some(d) => d,
            // A demand miss: the block goes to the ARC, not also to the host's page cache. A
            // prefetch reads through the page cache (the host's readahead of a stream).
            None if !prefetch => zio::read_bp_keeping(&self.zio_ctx_demand(), bp)?,
            None => zio::read_bp_keeping(&self.zio_ctx(), bp)?,
        };
        if bp.encrypted && bp.level > 0 {
            crate::spa_keystore::verify_indirect(bp, &data)?;
        }
        let d = Arc::new(data);
        self.arc_keep(k, bp, ds, &d, phys, prefetch);
        if from_l2 {
            // On a cache device already: nothing for the feed when it is evicted.
            self.arc.mark_l2(&[k]);
        }
        announce.3 = Some(d.clone());
        Ok(d)
    }

    /// An encrypted block of dataset `ds`: decrypted by the dataset's key and kept in the
    /// ARC so; without the key, a dnode block as stored (its block pointers are plaintext),
    /// uncached, and any other block refused (EACCES, as OpenZFS's read of it).
    fn read_encrypted(&self, bp: &BlockPointer, ds: u64, prefetch: bool) -> Result<Arc<Vec<u8>>> {
        if bp.lsize > zio::MAX_BLOCK || bp.psize > zio::MAX_BLOCK {
            return Err(ZfsError::Invalid(format!("block pointer sizes out of range: {bp}")));
        }
        let Some(key) = self.keystore.dataset(ds) else {
            if bp.typ == oxzfs_format::types::DMU_OT_DNODE {
                return self.read_bp_uncached(bp).map(Arc::new);
            }
            return Err(ZfsError::Posix(libc::EACCES, format!("pool '{}' dataset {ds}: encrypted block, key not loaded ({bp})", self.name)));
        };
        let k = arc_key(self.arc_id, bp).expect("not embedded");
        if let Some(d) = self.arc.get(&k) {
            self.arc_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(d);
        }
        self.arc_misses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ctx = if prefetch { self.zio_ctx() } else { self.zio_ctx_demand() };
        let physical = zio::read_physical(&ctx, bp)?;
        let plain = crate::spa_keystore::decrypt(&key, bp, physical)?;
        let d = Arc::new(zio::decompress_owned(bp, plain)?);
        self.arc_keep(k, bp, ds, &d, None, prefetch);
        Ok(d)
    }

    fn read_bp_uncached(&self, bp: &BlockPointer) -> Result<Vec<u8>> {
        zio::read_bp(&self.zio_ctx(), bp)
    }

    /// The context of this pool's reads: a pool imported read-write heals the bad copies its
    /// reads find.
    fn zio_ctx(&self) -> ZioCtx<'_> {
        let mode = if self.readonly { &READ_PLAIN } else { &READ_HEAL };
        ZioCtx { root: &self.root_vdev, salt: &self.checksum_salt, mode }
    }

    /// `zio_ctx` for the ARC's demand misses: large leaf reads past the page cache.
    fn zio_ctx_demand(&self) -> ZioCtx<'_> {
        let mode = if self.readonly { &crate::vdev::READ_PLAIN_DIRECT } else { &crate::vdev::READ_HEAL_DIRECT };
        ZioCtx { root: &self.root_vdev, salt: &self.checksum_salt, mode }
    }

    /// Keep the logical bytes of a block just written in the ARC (as OpenZFS's dbufs keep
    /// their arc bufs after the write): the next sync reads back the blocks it rewrites (space
    /// map tails, indirect blocks, dnode blocks) and need not read and decompress them.
    /// `ds`: the dataset written (its primarycache/secondarycache apply). `phys`: the block's
    /// compressed bytes when it is stored compressed: the ARC then keeps the block compressed,
    /// as a block read is kept, and the L2ARC feed writes those bytes as they are instead of
    /// compressing the block again.
    pub fn cache_written_block(&self, bp: &BlockPointer, data: Arc<Vec<u8>>, phys: Option<Arc<Vec<u8>>>, ds: u64) {
        if bp.is_hole() || data.len() as u64 != bp.lsize {
            return;
        }
        let phys = phys.filter(|p| bp.compress != oxzfs_format::compress::ZIO_COMPRESS_OFF && p.len() as u64 == bp.psize && !bp.is_gang() && !bp.embedded);
        if let Some(k) = arc_key(self.arc_id, bp) {
            // A block rewritten in place (a later sync pass) is not what the L2ARC holds.
            self.l2arc.forget(bp);
            match self.cacheable(bp, ds) {
                (false, _) => {}
                (true, l2) => {
                    self.arc.replace_block(k, data, phys, bp.compress, crate::l2arc::is_metadata(bp), l2.then_some(bp));
                    self.classify(&k, bp);
                }
            }
        }
    }

    /// Register a reader that will walk, without the pool lock, a tree synced in `txg`: until
    /// the pin is dropped, blocks freed after `txg` stay out of the allocator (see
    /// `Metaslabs::release_deferred`).
    pub fn pin_reader(self: &Arc<Self>, txg: u64) -> ReaderPin {
        count_up(&self.readers, txg);
        ReaderPin { spa: self.clone(), txg }
    }

    /// Hold snapshot `dsobj` for a send: it cannot be destroyed until the hold is dropped.
    pub fn send_hold(self: &Arc<Self>, dsobj: u64) -> SendHold {
        count_up(&self.send_holds, dsobj);
        SendHold { spa: self.clone(), dsobj }
    }

    /// Whether a send holds snapshot `dsobj`.
    pub fn send_held(&self, dsobj: u64) -> bool {
        self.send_holds.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&dsobj)
    }

    /// The txg of the oldest tree a pinned reader walks now.
    pub fn oldest_reader(&self) -> Option<u64> {
        self.readers.lock().unwrap().keys().next().copied()
    }

    /// Remember a block that could not be read, for `zpool status -v` (spa_log_error: in
    /// the scan's list while a scan runs; the next sync writes it to the MOS).
    pub fn record_error(&self, objset: u64, object: u64, level: u64, blkid: u64) {
        let scanning = self.scan.lock().scanning();
        self.errlog.lock().unwrap_or_else(|p| p.into_inner()).record((objset, object, level, blkid), scanning);
    }

    /// The error log's entries (objset, object, level, blkid).
    pub fn errors(&self) -> Vec<crate::spa_errlog::Bookmark> {
        self.errlog.lock().unwrap_or_else(|p| p.into_inner()).entries()
    }

    /// A scan ended (spa_errlog_rotate): finished, what it found is the log now (what reads
    /// found before it and it did not, it read again without error); canceled, both lists
    /// stay as they are.
    pub fn errlog_rotate(&self, finished: bool) {
        if finished {
            self.errlog.lock().unwrap_or_else(|p| p.into_inner()).rotate();
        }
    }
}

impl Drop for Spa {
    /// The pool is gone (exported, or its import given up): its blocks leave the shared ARC.
    fn drop(&mut self) {
        self.arc.flush_spa(self.arc_id);
    }
}

/// A send's hold on its snapshot (`Spa::send_hold`).
pub struct SendHold {
    spa: Arc<Spa>,
    dsobj: u64,
}

impl Drop for SendHold {
    fn drop(&mut self) {
        count_down(&self.spa.send_holds, self.dsobj);
    }
}

/// One more holder of `key` in a map of holders (`Spa::readers`, `Spa::send_holds`).
fn count_up(m: &Mutex<BTreeMap<u64, usize>>, key: u64) {
    *m.lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_default() += 1;
}

/// One holder of `key` fewer; the key goes with its last holder.
fn count_down(m: &Mutex<BTreeMap<u64, usize>>, key: u64) {
    let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = m.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            m.remove(&key);
        }
    }
}

/// A lock-free reader's hold on the tree it walks (`Spa::pin_reader`); dropped when it is done.
pub struct ReaderPin {
    spa: Arc<Spa>,
    txg: u64,
}

impl Drop for ReaderPin {
    fn drop(&mut self) {
        count_down(&self.spa.readers, self.txg);
    }
}

/// A block's ARC key: the pool's import, its first DVA, birth and whole checksum (none for
/// embedded blocks).
pub fn arc_key(spa: u64, bp: &BlockPointer) -> Option<ArcKey> {
    (!bp.embedded).then(|| ArcKey { spa, vdev: bp.dva[0].vdev, offset: bp.dva[0].offset, birth: bp.birth, cksum: bp.cksum })
}

/// A block read under way (see `Spa::inflight`): its outcome once done (None: it failed).
#[derive(Default)]
struct InFlight {
    done: Mutex<Option<Option<Arc<Vec<u8>>>>>,
    cv: std::sync::Condvar,
}

/// Pick the candidate named by `which` (a name or a numeric guid).
pub fn choose<'a>(scan: &'a ScanResult, which: &str) -> Result<&'a PoolCandidate> {
    let matches: Vec<&PoolCandidate> =
        scan.pools.iter().filter(|p| p.name == which || p.guid.to_string() == which).collect();
    match matches.len() {
        0 => Err(ZfsError::Unavailable(format!("cannot import '{which}': no such pool available"))),
        1 => Ok(matches[0]),
        _ => Err(ZfsError::Invalid(format!(
            "cannot import '{which}': more than one matching pool\nimport by numeric ID instead"
        ))),
    }
}

/// The candidate `which` of a scan, renamed to `new_name` when given (`zpool import POOL
/// NEWPOOL`): the pool is opened under that name, and a read-write import writes it into the
/// labels and the MOS config at its first sync.
pub fn choose_as<'a>(scan: &'a mut ScanResult, which: &str, new_name: Option<&str>) -> Result<&'a mut PoolCandidate> {
    let i = {
        let c = choose(scan, which)?;
        scan.pools.iter().position(|p| std::ptr::eq(p, c)).expect("chosen from this scan")
    };
    let c = &mut scan.pools[i];
    if let Some(n) = new_name {
        c.name = n.to_string();
        c.config.add_str("name", n);
    }
    Ok(c)
}
