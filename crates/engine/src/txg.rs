//! txg: the pool's write state and the sync of a transaction group — `zpool create`, read-write
//! import, and the loop that makes one txg durable.
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
//!        txg % slots of every label; flush; the odd labels — OpenZFS's safe order
//!     4. metaslab sync_done (deferred frees of txg-2 become allocatable)
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
//! `fs`, `wakeup`). The write throttle (dsl_pool dirty data, dmu_tx_delay) runs before a
//! change takes `w`. Frees of blocks born in the syncing txg in an earlier pass are recorded
//! as FREE entries, as OpenZFS does; every free is deferred two txgs by the metaslabs, which
//! also keeps blocks a lock-free reader may still walk after a sync replaced them (the ENOSPC
//! retry's early release spares the frees newer than the oldest tree a reader has pinned).

use crate::dbuf::{rand_u64, ObjsetW, OsProps, SpaceDelta, SyncCtx, SyncJob};
use crate::metaslab::{dsize_of, metaslab_shift, psize_to_asize, Metaslabs, MsSync, PoolAlloc};
use crate::spa::{PoolCandidate, Spa};
use crate::vdev::{open_device, BlockDevice, DeviceMap, Vdev};
use oxzfs_format::features::{checksum_feature, compress_feature};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::dsl::{BpobjPhys, DslDatasetPhys, DslDirPhys, DD_FLAG_USED_BREAKDOWN, DS_FLAG_UNIQUE_ACCURATE};
use oxzfs_format::label::{label_offset, VDEV_LABELS, VDEV_LABEL_END_SIZE, VDEV_LABEL_SIZE, VDEV_LABEL_START_SIZE, VDEV_PHYS_OFFSET, VDEV_UBERBLOCK_RING_OFFSET};
use oxzfs_format::nvlist::{NvList, NvValue};
use oxzfs_format::objset::{DMU_OST_META, DMU_OST_ZFS};
use oxzfs_format::types;
use oxzfs_format::uberblock::{encode_uberblock, uberblock_slot_size, UberblockPhys};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The first txg of a new pool (TXG_INITIAL).
pub const TXG_INITIAL: u64 = 4;
pub const SPA_VERSION_FEATURES: u64 = 5000;
/// The first pool version with deduplication (SPA_VERSION_DEDUP).
pub const SPA_VERSION_DEDUP: u64 = 21;
/// Smallest device `zpool create` accepts (SPA_MINDEVSIZE).
pub const SPA_MINDEVSIZE: u64 = 64 << 20;
const VDEV_UBERBLOCK_RING: u64 = 128 << 10;

/// Features a new version-5000 pool gets enabled: those whose on-disk effects oxzfs keeps, in
/// OpenZFS's feature order (spa_feature_t), the order `zpool create` enables them in — which
/// decides the ones enabled_txg records (those after it).
/// (guid, name, for-read, description, active on enable)
pub const DEFAULT_FEATURES: &[(&str, &str, bool, &str, bool)] = &[
    ("com.delphix:async_destroy", "async_destroy", false, "Destroy filesystems asynchronously.", false),
    ("com.delphix:empty_bpobj", "empty_bpobj", false, "Snapshots use less space.", false),
    ("org.illumos:lz4_compress", "lz4_compress", true, "LZ4 compression algorithm support.", true),
    ("com.joyent:multi_vdev_crash_dump", "multi_vdev_crash_dump", true, "Crash dumps to multiple vdev pools.", false),
    ("com.delphix:spacemap_histogram", "spacemap_histogram", false, "Spacemaps maintain space histograms.", false),
    ("com.delphix:enabled_txg", "enabled_txg", false, "Record txg at which a feature is enabled", false),
    ("com.delphix:hole_birth", "hole_birth", true, "Retain hole birth txg for more precise zfs send", true),
    ("com.delphix:extensible_dataset", "extensible_dataset", true, "Enhanced dataset functionality, used by other features.", false),
    ("com.delphix:embedded_data", "embedded_data", true, "Blocks which compress very well use even less space.", true),
    ("org.open-zfs:large_blocks", "large_blocks", true, "Support for blocks larger than 128KB.", false),
    ("org.zfsonlinux:large_dnode", "large_dnode", true, "Variable on-disk size of dnodes.", false),
    ("org.illumos:sha512", "sha512", true, "SHA-512/256 hash algorithm.", false),
    ("org.illumos:skein", "skein", true, "Skein hash algorithm.", false),
    ("org.illumos:edonr", "edonr", true, "Edon-R hash algorithm.", false),
    ("com.delphix:spacemap_v2", "spacemap_v2", false, "Space maps representing large segments are more efficient.", true),
    ("org.zfsonlinux:allocation_classes", "allocation_classes", false, "Support for separate allocation classes.", false),
    ("org.freebsd:zstd_compress", "zstd_compress", true, "zstd compression algorithm support.", false),
];

/// Features oxzfs implements but leaves disabled on new pools, because OpenZFS 2.1 (whose zdb
/// checks our pools) does not know them: enabled with `-o feature@NAME=enabled` at create or
/// `zpool set feature@NAME=enabled`. Same shape as [`DEFAULT_FEATURES`].
pub const OPTIONAL_FEATURES: &[(&str, &str, bool, &str, bool)] = &[("org.openzfs:blake3", "blake3", true, "BLAKE3 hash algorithm.", false)];

/// The row of a feature oxzfs can enable, by guid or short name.
pub fn supported_feature(key: &str) -> Option<&'static (&'static str, &'static str, bool, &'static str, bool)> {
    DEFAULT_FEATURES.iter().chain(OPTIONAL_FEATURES).find(|f| f.0 == key || f.1 == key)
}

const ENABLED_TXG: &str = "com.delphix:enabled_txg";
const EXTENSIBLE_DATASET: &str = "com.delphix:extensible_dataset";

/// A leaf or interior vdev as `zpool create` was given it.
#[derive(Clone, Debug)]
pub enum VdevSpec {
    File(PathBuf),
    Mirror(Vec<PathBuf>),
    Raidz(u8, Vec<PathBuf>),
}

/// The allocation class of a top-level vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VdevClass {
    #[default]
    Normal,
    Log,
    Special,
    Dedup,
}

/// What `zpool create` asks for.
#[derive(Clone, Debug, Default)]
pub struct CreateSpec {
    pub name: String,
    pub vdevs: Vec<(VdevClass, VdevSpec)>,
    /// L2ARC devices.
    pub cache: Vec<PathBuf>,
    /// Hot spares.
    pub spares: Vec<PathBuf>,
    pub ashift: Option<u8>,
    pub version: Option<u64>,
    /// Features to leave disabled (by name).
    pub disabled: Vec<String>,
    /// Optional features to enable (by name; see [`OPTIONAL_FEATURES`]).
    pub enabled: Vec<String>,
    /// Root dataset properties (-O).
    pub fs_props: Vec<(String, String)>,
    /// Pool properties (-o) stored in the pool_props ZAP in the create txg (ashift included).
    pub pool_props: Vec<(String, String)>,
    pub hostname: String,
}

/// Per-dataset write state.
pub struct DatasetW {
    pub dsobj: u64,
    pub os: ObjsetW,
    /// ds_prev_snap_txg: a block born at or before it is shared with the previous snapshot
    /// (or a clone's origin) and goes to the deadlist when freed (dsl_dataset_block_kill).
    pub prev_snap_txg: u64,
}

/// The pool opened for writing.
pub struct PoolW {
    pub spa: Arc<Spa>,
    pub mos: ObjsetW,
    pub datasets: BTreeMap<u64, DatasetW>,
    pub ms: Metaslabs,
    /// The open txg.
    pub txg: u64,
    pub config_dirty: bool,
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
    ms_out: Option<(u64, u64)>,
    /// Set when a sync failed: that txg's frozen state was not installed, so no later txg may
    /// sync on top of it (the pool is suspended; every later change, sync and export refuses).
    /// The one record of suspension, whether the sync thread's sync or a command's failed.
    pub suspended: Option<String>,
    /// The last txg whose uberblock is on disk.
    pub synced_txg: u64,
    /// The dedup tables (with the dataset sync while it runs, like `ms`).
    pub ddt: crate::ddt::Ddt,
}

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
struct SyncEnv {
    spa: Arc<Spa>,
    embed: bool,
    lz4: bool,
    hole_birth: bool,
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Size of a leaf device usable by a vdev: aligned to the label size, minus the labels.
fn leaf_asize(size: u64) -> u64 {
    let osize = size & !(VDEV_LABEL_SIZE - 1);
    osize.saturating_sub(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)
}

struct Leaf {
    path: PathBuf,
    guid: u64,
    dev: Arc<dyn BlockDevice>,
}

impl PoolW {
    // -------------------------------------------------------------------------------- create

    /// `zpool create`: label the devices, build the MOS and the root dataset, sync txg 4.
    pub fn create(spec: &CreateSpec, arc_max: u64) -> Result<PoolW> {
        let version = spec.version.unwrap_or(SPA_VERSION_FEATURES);
        if !(version == SPA_VERSION_FEATURES || (1..=28).contains(&version)) {
            return Err(ZfsError::Invalid(format!("invalid property value for 'version': {version}")));
        }
        if version < 23 && version != SPA_VERSION_FEATURES {
            return Err(ZfsError::Unsupported(format!("creating pools of version {version} (use 23 or 5000)")));
        }
        let pool_guid = rand_u64();
        let mut devices: DeviceMap = DeviceMap::new();
        let mut tree_children = Vec::new();
        let mut min_ashift = 64u8;
        let mut leaves_all: Vec<Leaf> = Vec::new();
        for (id, (class, v)) in spec.vdevs.iter().enumerate() {
            let ashift = spec.ashift.unwrap_or(9);
            min_ashift = min_ashift.min(ashift);
            let (top, leaves) = build_top(&spec.name, id as u64, *class, v, ashift, TXG_INITIAL)?;
            tree_children.push(top);
            for l in leaves {
                devices.insert(l.guid, (l.path.clone(), l.dev.clone() as Arc<dyn crate::vdev::BlockDevice>));
                leaves_all.push(l);
            }
        }
        let mut root = NvList::new();
        root.add_str("type", "root");
        root.add_u64("id", 0);
        root.add_u64("guid", pool_guid);
        root.add_u64("create_txg", TXG_INITIAL);
        root.insert("children", NvValue::NvListArray(tree_children));
        let mut config = NvList::new();
        config.add_u64("version", version);
        config.add_str("name", &spec.name);
        config.add_u64("state", 0);
        config.add_u64("txg", TXG_INITIAL);
        config.add_u64("pool_guid", pool_guid);
        config.add_u64("errata", 0);
        config.add_str("hostname", &spec.hostname);
        config.add_u64("vdev_children", spec.vdevs.len() as u64);
        config.add_nvlist("vdev_tree", root.clone());
        let root_vdev = Vdev::from_config(&root, &devices, 0)?;
        let mut salt = [0u8; 32];
        for c in salt.chunks_mut(8) {
            c.copy_from_slice(&rand_u64().to_le_bytes());
        }
        let spa = Arc::new(Spa::new_for_write(&spec.name, pool_guid, config.clone(), root_vdev, version, salt, devices, arc_max));
        let ms = Metaslabs::new_pool(&spa.root_vdev);
        let mut mos = ObjsetW::create(&spa, 0, DMU_OST_META, OsProps::default());
        // The object directory: object 1.
        let dir = mos.create_zap(types::DMU_OT_OBJECT_DIRECTORY, 0, 0, 0)?;
        assert_eq!(dir, 1, "the object directory is MOS object 1");
        let mut pw = PoolW {
            spa,
            mos,
            datasets: BTreeMap::new(),
            ms,
            txg: TXG_INITIAL,
            config_dirty: true,
            version,
            features: BTreeMap::new(),
            feature_objs: None,
            ms_arrays: Vec::new(),
            mos_delta: SpaceDelta::default(),
            mos_dir: 0,
            hostname: spec.hostname.clone(),
            ub_timestamp: 0,
            last_sync: std::time::Instant::now(),
            config_nv: config,
            added: Default::default(),
            ms_out: None,
            suspended: None,
            synced_txg: 0,
            ddt: Default::default(),
        };
        pw.create_mos_contents(spec)?;
        pw.create_vdev_zaps()?;
        if !spec.cache.is_empty() {
            pw.add_aux(4, "l2cache", &spec.cache)?;
        }
        if !spec.spares.is_empty() {
            pw.add_aux(3, "spares", &spec.spares)?;
        }
        for (k, v) in &spec.pool_props {
            if k == "ashift" {
                // spa_create hands its props to spa_sync_props: the ashift asked for is kept.
                let n = v.parse::<u64>().map_err(|_| ZfsError::Invalid(format!("invalid value '{v}' for property 'ashift'")))?;
                pw.pool_props_store(k, n)?;
            } else {
                pw.set_pool_prop(k, v)?;
            }
        }
        pw.sync()?;
        Ok(pw)
    }

    fn create_mos_contents(&mut self, spec: &CreateSpec) -> Result<()> {
        let v = self.version;
        let t = now();
        let mos = &mut self.mos;
        // Metaslab arrays, one per top-level vdev.
        for _ in 0..self.spa.root_vdev.children.len() {
            let a = mos.alloc_object(types::DMU_OT_OBJECT_ARRAY, 16384, 0, 0, 1)?;
            self.ms_arrays.push(a);
        }
        let dd_flags = if v >= 13 { DD_FLAG_USED_BREAKDOWN } else { 0 };
        let new_dir = |mos: &mut ObjsetW, parent: u64| -> Result<u64> {
            let dd = mos.alloc_object(types::DMU_OT_DSL_DIR, 512, types::DMU_OT_DSL_DIR, 256, 1)?;
            let props = mos.create_zap(types::DMU_OT_DSL_PROPS, 0, 0, 0)?;
            let child = mos.create_zap(types::DMU_OT_DSL_DIR_CHILD_MAP, 0, 0, 0)?;
            let phys = DslDirPhys { creation_time: t, parent_dir_obj: parent, props_zapobj: props, child_dir_zapobj: child, flags: dd_flags, ..Default::default() };
            mos.set_bonus(dd, &phys.encode())?;
            Ok(dd)
        };
        let root_dir = new_dir(mos, 0)?;
        mos.zap_add_u64(1, "root_dataset", root_dir)?;
        let root_child = DslDirPhys::decode(&mos.bonus(root_dir)?, true).map_err(|e| ZfsError::corrupt("root dir".to_string(), e))?.child_dir_zapobj;
        let mos_dir = new_dir(mos, root_dir)?;
        mos.zap_add_u64(root_child, "$MOS", mos_dir)?;
        self.mos_dir = mos_dir;
        let bpobj_new = |mos: &mut ObjsetW, bs: u64| -> Result<u64> {
            let o = mos.alloc_object(types::DMU_OT_BPOBJ, bs, types::DMU_OT_BPOBJ_HDR, crate::deadlist::bpobj_bonus_size(v, false), 1)?;
            let len = mos.bonus(o)?.len();
            mos.set_bonus(o, &BpobjPhys::default().encode(len))?;
            Ok(o)
        };
        if v >= 26 {
            let free_dir = new_dir(mos, root_dir)?;
            mos.zap_add_u64(root_child, "$FREE", free_dir)?;
            let fb = bpobj_new(mos, 128 << 10)?;
            mos.zap_add_u64(1, "free_bpobj", fb)?;
        }
        let deadlist_new = |mos: &mut ObjsetW| -> Result<u64> {
            if v >= 26 {
                let o = mos.create_zap(types::DMU_OT_DEADLIST, types::DMU_OT_DEADLIST_HDR, 320, 0)?;
                Ok(o)
            } else {
                bpobj_new(mos, 128 << 10)
            }
        };
        // $ORIGIN and its snapshot (dsl_pool_create_origin).
        let origin_dir = new_dir(mos, root_dir)?;
        mos.zap_add_u64(root_child, "$ORIGIN", origin_dir)?;
        let ohead = mos.alloc_object(types::DMU_OT_DSL_DATASET, 512, types::DMU_OT_DSL_DATASET, 320, 1)?;
        let osnap = mos.alloc_object(types::DMU_OT_DSL_DATASET, 512, types::DMU_OT_DSL_DATASET, 320, 1)?;
        let ohead_snapnames = mos.create_zap(types::DMU_OT_DSL_DS_SNAP_MAP, 0, 0, 2)?;
        mos.zap_add_u64(ohead_snapnames, "$ORIGIN", osnap)?;
        let snap_dl = deadlist_new(mos)?;
        let head_dl = deadlist_new(mos)?;
        if v >= 26 {
            let b = bpobj_new(mos, 128 << 10)?;
            mos.zap_mut(head_dl)?.entries.insert(b"1".to_vec(), (8, vec![b]));
        }
        let flags = if v >= 9 { DS_FLAG_UNIQUE_ACCURATE } else { 0 };
        let blank = |dir: u64| DslDatasetPhys {
            dir_obj: dir,
            prev_snap_obj: 0,
            prev_snap_txg: 0,
            next_snap_obj: 0,
            snapnames_zapobj: 0,
            num_children: 0,
            creation_time: t,
            creation_txg: 1,
            deadlist_obj: 0,
            referenced_bytes: 0,
            compressed_bytes: 0,
            uncompressed_bytes: 0,
            unique_bytes: 0,
            fsid_guid: rand_u64() >> 8,
            guid: rand_u64(),
            flags,
            bp: BlockPointer::hole(),
            next_clones_obj: 0,
            props_obj: 0,
            userrefs_obj: 0,
        };
        let root_ds = mos.alloc_object(types::DMU_OT_DSL_DATASET, 512, types::DMU_OT_DSL_DATASET, 320, 1)?;
        let next_clones = mos.create_zap(types::DMU_OT_NEXT_CLONES, 0, 0, 0)?;
        mos.zap_add_u64(next_clones, &format!("{root_ds:x}"), root_ds)?;
        let mut sp = blank(origin_dir);
        sp.next_snap_obj = ohead;
        sp.num_children = 2;
        sp.deadlist_obj = snap_dl;
        sp.next_clones_obj = next_clones;
        mos.set_bonus(osnap, &sp.encode())?;
        let mut hp = blank(origin_dir);
        hp.prev_snap_obj = osnap;
        hp.prev_snap_txg = 1;
        hp.snapnames_zapobj = ohead_snapnames;
        hp.deadlist_obj = head_dl;
        mos.set_bonus(ohead, &hp.encode())?;
        let mut od = DslDirPhys::decode(&mos.bonus(origin_dir)?, true).expect("just encoded");
        od.head_dataset_obj = ohead;
        if v >= 19 {
            let clones = mos.create_zap(types::DMU_OT_DSL_CLONES, 0, 0, 0)?;
            mos.zap_add_u64(clones, &format!("{root_ds:x}"), root_ds)?;
            od.clones = clones;
        }
        mos.set_bonus(origin_dir, &od.encode())?;
        // Features.
        if v >= SPA_VERSION_FEATURES {
            let fr = mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
            let fw = mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
            let fd = mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
            mos.zap_add_u64(1, "features_for_read", fr)?;
            mos.zap_add_u64(1, "features_for_write", fw)?;
            mos.zap_add_u64(1, "feature_descriptions", fd)?;
            self.feature_objs = Some((fr, fw));
            // As `zpool create` asks: every default feature not disabled, then the optional
            // ones asked for, each after its dependencies (spa_feature_enable).
            let wanted: Vec<&str> = DEFAULT_FEATURES
                .iter()
                .filter(|f| !spec.disabled.iter().any(|d| d == f.1))
                .chain(OPTIONAL_FEATURES.iter().filter(|f| spec.enabled.iter().any(|e| e == f.1)))
                .map(|f| f.0)
                .collect();
            for guid in wanted {
                self.feature_enable(guid)?;
            }
            let mos = &mut self.mos;
            mos.zap_add_u64(1, "creation_version", v)?;
            let salt = self.spa.checksum_salt;
            mos.zap_mut(1)?.entries.insert(b"org.illumos:checksum_salt".to_vec(), (1, salt.iter().map(|&b| b as u64).collect()));
        }
        let mos = &mut self.mos;
        // Config object (packed nvlist, bonus = its size) and the deferred-free bpobj.
        let cfg = mos.alloc_object(types::DMU_OT_PACKED_NVLIST, 16384, types::DMU_OT_PACKED_NVLIST_SIZE, 8, 1)?;
        mos.zap_add_u64(1, "config", cfg)?;
        if v >= 11 {
            mos.zap_add_u64(1, "deflate", 1)?;
        }
        let sync_bpobj = bpobj_new(mos, 16384)?;
        mos.dirty_obj(sync_bpobj)?.dn.compress = oxzfs_format::compress::ZIO_COMPRESS_OFF;
        mos.zap_add_u64(1, "sync_bplist", sync_bpobj)?;
        // The root dataset: a clone of $ORIGIN@$ORIGIN.
        let mut rp = blank(root_dir);
        rp.prev_snap_obj = osnap;
        rp.prev_snap_txg = 1;
        rp.snapnames_zapobj = mos.create_zap(types::DMU_OT_DSL_DS_SNAP_MAP, 0, 0, 2)?;
        rp.deadlist_obj = deadlist_new(mos)?;
        mos.set_bonus(root_ds, &rp.encode())?;
        let mut rd = DslDirPhys::decode(&mos.bonus(root_dir)?, true).expect("just encoded");
        rd.head_dataset_obj = root_ds;
        rd.origin_obj = osnap;
        mos.set_bonus(root_dir, &rd.encode())?;
        let root_props = DslDirPhys::decode(&mos.bonus(root_dir)?, true).expect("just encoded").props_zapobj;
        for (k, val) in &spec.fs_props {
            set_prop_in(mos, root_props, k, val)?;
        }
        for (k, val) in &spec.fs_props {
            self.prop_feature_check(k, val, true)?;
            self.prop_feature_activate(root_ds, k, val)?;
        }
        // The root file system. Version-5000 pools compress with lz4 unless told otherwise.
        if v >= SPA_VERSION_FEATURES && !spec.fs_props.iter().any(|(k, _)| k == "compression") && self.features.contains_key("org.illumos:lz4_compress") {
            set_prop_in(&mut self.mos, root_props, "compression", "lz4")?;
        }
        let props = self.effective_props(root_dir)?;
        let mut os = ObjsetW::create(&self.spa, root_ds, DMU_OST_ZFS, props);
        crate::zplw::create_fs(&mut os, if v >= 24 { 5 } else { 4 }, self.txg)?;
        self.datasets.insert(root_ds, DatasetW { dsobj: root_ds, os, prev_snap_txg: 1 });
        Ok(())
    }

    /// Per-vdev ZAPs (OpenZFS 0.7+): one per top-level vdev (holding its allocation bias) and
    /// one per leaf, all listed in the MOS's vdev ZAP map; their object numbers go into the
    /// config as com.delphix:vdev_zap_top / _leaf.
    fn create_vdev_zaps(&mut self) -> Result<()> {
        if self.version < SPA_VERSION_FEATURES {
            return Ok(());
        }
        let avz = match self.mos.zap_lookup(1, "com.delphix:vdev_zap_map")? {
            Some(a) => a,
            None => {
                let a = self.mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
                self.mos.zap_add_u64(1, "com.delphix:vdev_zap_map", a)?;
                a
            }
        };
        let mut cfg = self.config_nv.clone();
        let mut tree = cfg.get_nvlist("vdev_tree").cloned().unwrap_or_default();
        let mut tops: Vec<NvList> = tree.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
        let mut special = false;
        for top in tops.iter_mut().filter(|t| t.get_u64("com.delphix:vdev_zap_top").is_none()) {
            let new_zap = |mos: &mut ObjsetW| -> Result<u64> {
                let z = mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
                mos.zap_add_u64(avz, &format!("{z:x}"), z)?;
                Ok(z)
            };
            let tz = new_zap(&mut self.mos)?;
            top.add_u64("com.delphix:vdev_zap_top", tz);
            if let Some(bias) = top.get_str("alloc_bias").map(|b| b.to_string()) {
                let mut v: Vec<u64> = bias.bytes().map(|c| c as u64).collect();
                v.push(0);
                self.mos.zap_mut(tz)?.entries.insert(b"org.zfsonlinux:allocation_bias".to_vec(), (1, v));
                special |= bias == "special" || bias == "dedup";
            }
            match top.get_nvlist_array("children").map(|a| a.to_vec()) {
                Some(mut kids) => {
                    for k in kids.iter_mut() {
                        let lz = new_zap(&mut self.mos)?;
                        k.add_u64("com.delphix:vdev_zap_leaf", lz);
                    }
                    top.insert("children", NvValue::NvListArray(kids));
                }
                None => {
                    let lz = new_zap(&mut self.mos)?;
                    top.add_u64("com.delphix:vdev_zap_leaf", lz);
                }
            }
        }
        tree.insert("children", NvValue::NvListArray(tops));
        cfg.add_nvlist("vdev_tree", tree);
        cfg.insert("com.delphix:has_per_vdev_zaps", NvValue::Boolean);
        self.config_nv = cfg;
        if special {
            if !self.features.contains_key("org.zfsonlinux:allocation_classes") {
                return Err(ZfsError::Unsupported("special and dedup vdevs need the allocation_classes feature".into()));
            }
            if self.features.get("org.zfsonlinux:allocation_classes").map_or(0, |f| f.0) == 0 {
                self.feature_incr("org.zfsonlinux:allocation_classes", 1)?;
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------- open

    /// Import a scanned pool read-write: open the MOS for writing and load the metaslabs.
    pub fn open(cand: &PoolCandidate, arc_max: u64, hostname: &str) -> Result<PoolW> {
        let spa = Spa::open_rw(cand, arc_max)?;
        let version = spa.version;
        // Imported under a new name: the labels and the MOS config take it at the first sync.
        let renamed = cand.config.get_str("name") != Some(spa.name.as_str());
        let mos = ObjsetW::open(&spa, 0, &spa.rootbp, OsProps::default())?;
        let mut pw = PoolW {
            spa: spa.clone(),
            mos,
            datasets: BTreeMap::new(),
            ms: Metaslabs::new_pool(&spa.root_vdev),
            txg: spa.uberblock.txg + 1,
            config_dirty: renamed,
            version,
            features: BTreeMap::new(),
            feature_objs: None,
            ms_arrays: Vec::new(),
            mos_delta: SpaceDelta::default(),
            mos_dir: 0,
            hostname: hostname.to_string(),
            ub_timestamp: 0,
            last_sync: std::time::Instant::now(),
            config_nv: spa.config.clone(),
            added: Default::default(),
            ms_out: None,
            suspended: None,
            synced_txg: spa.uberblock.txg,
            ddt: Default::default(),
        };
        pw.check_writable()?;
        pw.load_features()?;
        pw.load_metaslabs()?;
        pw.ddt = crate::ddt::Ddt::load(&mut pw.mos)?;
        let root_dir = pw.mos.zap_lookup(1, "root_dataset")?.ok_or_else(|| ZfsError::Invalid("no root_dataset".into()))?;
        let rd = DslDirPhys::decode(&pw.mos.bonus(root_dir)?, true).map_err(|e| ZfsError::corrupt("root dir".to_string(), e))?;
        pw.mos_dir = pw.mos.zap_lookup(rd.child_dir_zapobj, "$MOS")?.unwrap_or(0);
        Ok(pw)
    }

    fn check_writable(&mut self) -> Result<()> {
        // Every feature active for write must be one we keep.
        if self.version < SPA_VERSION_FEATURES {
            return Ok(());
        }
        for which in ["features_for_read", "features_for_write"] {
            let Some(obj) = self.mos.zap_lookup(1, which)? else { continue };
            let z = self.mos.zap(obj)?.clone();
            for (k, (_, v)) in &z.entries {
                let name = String::from_utf8_lossy(k).into_owned();
                let refs = v.first().copied().unwrap_or(0);
                if refs > 0 && supported_feature(&name).is_none() {
                    return Err(ZfsError::Unsupported(format!(
                        "cannot import '{}' read-write: feature {name} is active and not supported for writing by oxzfs (import with -o readonly=on)",
                        self.spa.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn load_features(&mut self) -> Result<()> {
        if self.version < SPA_VERSION_FEATURES {
            return Ok(());
        }
        let fr = self.mos.zap_lookup(1, "features_for_read")?.unwrap_or(0);
        let fw = self.mos.zap_lookup(1, "features_for_write")?.unwrap_or(0);
        for (obj, read) in [(fr, true), (fw, false)] {
            if obj == 0 {
                continue;
            }
            let z = self.mos.zap(obj)?.clone();
            for (k, (_, v)) in z.entries {
                self.features.insert(String::from_utf8_lossy(&k).into_owned(), (v.first().copied().unwrap_or(0), read));
            }
        }
        self.feature_objs = Some((fr, fw));
        Ok(())
    }

    pub fn feature_enabled(&self, guid: &str) -> bool {
        self.features.contains_key(guid)
    }

    fn load_metaslabs(&mut self) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        for top in &root.children {
            self.ms_arrays.push(top.metaslab_array);
            if top.metaslab_array == 0 {
                continue;
            }
            let count = top.asize >> top.metaslab_shift;
            let arr = self.mos.read(top.metaslab_array, 0, (count * 8) as usize)?;
            for ms in 0..count {
                let sm = u64::from_le_bytes(arr[(ms * 8) as usize..(ms * 8 + 8) as usize].try_into().expect("8"));
                if sm == 0 {
                    continue;
                }
                let dn = self.mos.dnode(sm)?;
                let phys = oxzfs_format::spacemap::SpaceMapPhys::decode(&dn.bonus, true).map_err(|e| ZfsError::corrupt(format!("space map {sm}"), e))?;
                let words = self.mos.read(sm, 0, phys.length as usize)?;
                let entries = oxzfs_format::spacemap::decode_entries(&words, true).map_err(|e| ZfsError::corrupt(format!("space map {sm}"), e))?;
                self.ms.load(top.id, ms, sm, phys, &entries);
            }
        }
        Ok(())
    }

    // --------------------------------------------------------------------------------- sync

    /// The MOS-wide config nvlist (the MOS copy and, trimmed per top-level vdev, the labels').
    pub fn config(&self) -> NvList {
        self.config_at(self.txg)
    }

    fn config_at(&self, txg: u64) -> NvList {
        let mut c = self.config_nv.clone();
        c.add_u64("txg", txg);
        c.add_str("hostname", &self.hostname);
        if let Some(tree) = c.get_nvlist("vdev_tree").cloned() {
            let mut tree = tree;
            if let Some(NvValue::NvListArray(children)) = tree.get("children").cloned() {
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

    /// Sync the open txg and open the next one (stopping the world: quiesce, sync the
    /// datasets and finish under the caller's hold of the write state).
    pub fn sync(&mut self) -> Result<()> {
        self.check_suspended()?;
        let r = (|| -> Result<()> {
            let mut q = self.quiesce();
            let env = self.sync_env();
            sync_datasets(&env, &mut self.ms, &mut self.ddt, &mut q)?;
            let ub = self.sync_finish(q)?;
            ub.write()?;
            self.sync_done(ub);
            Ok(())
        })();
        if let Err(e) = &r {
            self.suspended = Some(e.to_string());
        }
        r
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

    fn sync_env(&self) -> SyncEnv {
        SyncEnv {
            spa: self.spa.clone(),
            embed: self.features.contains_key("com.delphix:embedded_data"),
            lz4: self.features.contains_key("org.illumos:lz4_compress"),
            hole_birth: self.feature_active("com.delphix:hole_birth"),
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
        for (job, dead) in q.jobs.into_iter().zip(q.dead) {
            let id = job.id;
            let bp = job.bp_synced();
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
            let mut mos = std::mem::replace(&mut self.mos, ObjsetW::create(&spa, 0, DMU_OST_META, OsProps::default()));
            let r = self.sync_objset(&mut mos, pass, true, txg);
            self.mos = mos;
            let bp = r?;
            let d = std::mem::take(&mut self.mos.delta);
            self.mos_delta.dsize += d.dsize;
            self.mos_delta.psize += d.psize;
            self.mos_delta.lsize += d.lsize;
            let syncs = self.ms.sync(txg, pass as u64);
            if syncs.is_empty() {
                rootbp = bp;
                break;
            }
            for s in syncs {
                self.write_space_map(s)?;
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
            guid_sum: guid_sum(&root),
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
            let Some(dev) = &leaf.dev else { continue };
            let slot = uberblock_slot_size(leaf_ashift(&root, leaf) as u64) as u64;
            let nslots = VDEV_UBERBLOCK_RING / slot;
            for l in 0..VDEV_LABELS {
                let off = label_offset(l, dev.size()) + VDEV_UBERBLOCK_RING_OFFSET + (txg % nslots) * slot;
                ubs.push((dev.clone(), off, encode_uberblock(&ub, slot as usize, off)));
            }
        }
        Ok(UbWrite { txg, root, rootbp, config_dirty, even, odd, ubs })
    }

    /// After the uberblock of `ub` is on disk: deferred frees move on, the synced root is
    /// the pool's.
    fn sync_done(&mut self, ub: UbWrite) {
        let txg = ub.txg;
        if ub.config_dirty {
            self.config_dirty = false;
        }
        self.ms.sync_done(txg);
        self.spa.set_synced(&ub.rootbp);
        self.last_sync = std::time::Instant::now();
        self.synced_txg = txg;
    }

    /// Sync one objset (a dataset's, or the MOS in pass `pass`) and free what it replaced.
    fn sync_objset(&mut self, os: &mut ObjsetW, pass: u32, is_mos: bool, txg: u64) -> Result<BlockPointer> {
        let env = self.sync_env();
        let mut job = os.freeze(txg);
        let r = run_job(&env, &mut self.ms, &mut self.ddt, &mut job, pass, is_mos, txg, 0);
        os.install(job);
        r.map(|(bp, _)| bp)
    }

    /// Free every allocation behind `bp` (a gang block: its header copies and its whole tree).
    pub(crate) fn free_bp(&mut self, bp: &BlockPointer, txg: u64) -> Result<()> {
        let spa = self.spa.clone();
        free_bp_in(&spa, &mut self.ms, &mut self.ddt, bp, txg)
    }

    /// Apply a space delta to a dsl_dir (HEAD) and its ancestors (CHILD).
    fn dir_diduse(&mut self, dir: u64, d: SpaceDelta, head: bool) -> Result<()> {
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
            self.ms.set_sm_object(s.vdev, s.ms_id, sm);
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

    /// Change a feature's refcount in features_for_read/write.
    pub fn feature_incr(&mut self, guid: &str, by: i64) -> Result<()> {
        let Some((fr, fw)) = self.feature_objs else { return Ok(()) };
        let Some(&(refs, read)) = self.features.get(guid) else {
            return Err(ZfsError::Invalid(format!("feature {guid} is not enabled")));
        };
        let n = (refs as i64 + by).max(0) as u64;
        self.features.insert(guid.to_string(), (n, read));
        if (refs == 0) != (n == 0) && oxzfs_format::features::lookup(guid).is_some_and(|f| f.mos) {
            self.config_dirty = true; // spa_activate/deactivate_mos_feature: the label lists it
        }
        let obj = if read { fr } else { fw };
        self.mos.zap_add_u64(obj, guid, n)?;
        Ok(())
    }

    /// spa_feature_enable (feature_enable_sync): enable feature `guid` in the open txg after
    /// its dependencies — its description, its count (1 when active on enable) in
    /// features_for_read/write, and, once enabled_txg is enabled, the txg in the MOS's
    /// feature_enabled_txg ZAP (enabled_txg counting one more). Enabling it twice does nothing.
    pub fn feature_enable(&mut self, guid: &str) -> Result<()> {
        if self.features.contains_key(guid) {
            return Ok(());
        }
        let Some(&(_, name, read, desc, active)) = supported_feature(guid) else {
            return Err(ZfsError::Unsupported(format!("feature '{guid}' unsupported by oxzfs")));
        };
        let Some((fr, fw)) = self.feature_objs else {
            return Err(ZfsError::Unsupported(format!("pool must be upgraded to enable feature '{name}'")));
        };
        let info = oxzfs_format::features::lookup(guid).ok_or_else(|| ZfsError::Invalid(format!("unknown feature {guid}")))?;
        for dep in info.deps {
            self.feature_enable(dep)?;
        }
        let fd = match self.mos.zap_lookup(1, "feature_descriptions")? {
            Some(o) => o,
            None => return Err(ZfsError::Invalid("no feature_descriptions object".into())),
        };
        let mut d: Vec<u64> = desc.bytes().map(u64::from).collect();
        d.push(0);
        self.mos.zap_mut(fd)?.entries.insert(guid.as_bytes().to_vec(), (1, d));
        let refs = u64::from(active);
        self.features.insert(guid.to_string(), (refs, read));
        self.mos.zap_add_u64(if read { fr } else { fw }, guid, refs)?;
        if active && info.mos {
            self.config_dirty = true; // the label's features_for_read lists it
        }
        if self.features.contains_key(ENABLED_TXG) {
            let obj = match self.mos.zap_lookup(1, "feature_enabled_txg")? {
                Some(o) => o,
                None => {
                    let o = self.mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, 0)?;
                    self.mos.zap_add_u64(1, "feature_enabled_txg", o)?;
                    o
                }
            };
            self.feature_incr(ENABLED_TXG, 1)?;
            let txg = self.txg;
            self.mos.zap_add_u64(obj, guid, txg)?;
        }
        Ok(())
    }

    /// Whether feature `guid` is active (enabled with a non-zero count).
    pub fn feature_active(&self, guid: &str) -> bool {
        self.features.get(guid).is_some_and(|f| f.0 > 0)
    }

    /// Per-dataset features of dataset `dsobj` (the guids in its ZAP, once it is zapified).
    pub fn ds_features(&mut self, dsobj: u64) -> Result<Vec<String>> {
        if self.mos.dnode(dsobj)?.typ != types::DMU_OTN_ZAP_METADATA {
            return Ok(Vec::new());
        }
        let z = self.mos.zap(dsobj)?;
        Ok(z.entries.keys().map(|k| String::from_utf8_lossy(k).into_owned()).filter(|k| oxzfs_format::features::lookup(k).is_some_and(|f| f.per_dataset)).collect())
    }

    /// dsl_dataset_activate_feature: count per-dataset feature `guid` as used by dataset
    /// `dsobj` — the dataset object becomes a ZAP (dmu_object_zapify, counted by
    /// extensible_dataset) holding `guid` = 0, and the pool's refcount goes up by one. Already
    /// active on the dataset: nothing changes.
    pub fn ds_feature_activate(&mut self, dsobj: u64, guid: &str) -> Result<()> {
        if self.version < SPA_VERSION_FEATURES || self.ds_features(dsobj)?.iter().any(|g| g == guid) {
            return Ok(());
        }
        if !self.features.contains_key(guid) {
            return Err(ZfsError::Unsupported(format!("feature {guid} is not enabled")));
        }
        self.feature_incr(guid, 1)?;
        if self.mos.dnode(dsobj)?.typ != types::DMU_OTN_ZAP_METADATA {
            let salt = rand_u64() | 1;
            let d = self.mos.dirty_obj(dsobj)?;
            d.dn.typ = types::DMU_OTN_ZAP_METADATA;
            d.zap = Some(crate::dbuf::ZapObj { salt, ..Default::default() });
            self.feature_incr(EXTENSIBLE_DATASET, 1)?;
        }
        self.mos.zap_add_u64(dsobj, guid, 0)
    }

    /// Before dataset `dsobj` is freed: each per-dataset feature it counts is released
    /// (dsl_dataset_deactivate_feature), and so is its extensible_dataset count
    /// (dmu_object_free_zapified).
    pub(crate) fn ds_features_release(&mut self, dsobj: u64) -> Result<()> {
        if self.version < SPA_VERSION_FEATURES {
            return Ok(());
        }
        for g in self.ds_features(dsobj)? {
            self.feature_incr(&g, -1)?;
        }
        if self.mos.dnode(dsobj)?.typ == types::DMU_OTN_ZAP_METADATA {
            self.feature_incr(EXTENSIBLE_DATASET, -1)?;
        }
        Ok(())
    }

    /// Write label configs (`which` of the four) for every leaf.
    fn write_labels(&self, which: &[usize], txg: u64, state: u64) -> Result<()> {
        write_all(&self.label_writes(which, txg, state)?)
    }

    /// The label configs (`which` of the four) of every leaf, encoded, with where they go.
    fn label_writes(&self, which: &[usize], txg: u64, state: u64) -> Result<Vec<DevWrite>> {
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
                let mut c = NvList::new();
                c.add_u64("version", self.version);
                c.add_str("name", &self.spa.name);
                c.add_u64("state", state);
                c.add_u64("txg", txg);
                c.add_u64("pool_guid", self.spa.guid);
                c.add_u64("errata", 0);
                c.add_str("hostname", &self.hostname);
                c.add_u64("top_guid", top_guid);
                c.add_u64("guid", guid);
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
    fn label_features(&self) -> NvList {
        let mut f = NvList::new();
        for (g, (refs, _)) in &self.features {
            if *refs > 0 && oxzfs_format::features::lookup(g).is_some_and(|f| f.mos) {
                f.insert(g, NvValue::Boolean);
            }
        }
        f
    }

    /// The open device of leaf `guid` (the pool's, or one being added).
    fn device(&self, guid: u64) -> Option<Arc<dyn crate::vdev::BlockDevice>> {
        if let Some(d) = self.added.get(&guid) {
            return Some(d.clone());
        }
        self.spa.root_vdev.leaves().into_iter().find(|l| l.guid == guid).and_then(|l| l.dev.clone())
    }

    /// `zpool add`: new top-level vdevs (any class), cache and spare devices. The caller
    /// reopens the pool afterwards so that the new vdevs take part in allocation.
    pub fn add_vdevs(&mut self, vdevs: &[(VdevClass, VdevSpec)], cache: &[PathBuf], ashift: Option<u8>) -> Result<()> {
        let mut cfg = self.config_nv.clone();
        let mut tree = cfg.get_nvlist("vdev_tree").cloned().unwrap_or_default();
        let mut tops: Vec<NvList> = tree.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
        let default_ashift = self.spa.root_vdev.children.iter().map(|c| c.ashift).max().unwrap_or(9);
        for (class, v) in vdevs {
            if matches!(class, VdevClass::Special | VdevClass::Dedup) && !self.features.contains_key("org.zfsonlinux:allocation_classes") {
                return Err(ZfsError::Invalid(format!("cannot add to '{}': operation not supported on this type of pool", self.spa.name)));
            }
            let id = tops.len() as u64;
            let (top, leaves) = build_top(&self.spa.name, id, *class, v, ashift.unwrap_or(default_ashift), self.txg)?;
            let arr = self.mos.alloc_object(types::DMU_OT_OBJECT_ARRAY, 16384, 0, 0, 1)?;
            self.ms_arrays.push(arr);
            for l in leaves {
                self.added.insert(l.guid, l.dev.clone());
            }
            tops.push(top);
        }
        tree.insert("children", NvValue::NvListArray(tops.clone()));
        cfg.add_nvlist("vdev_tree", tree);
        cfg.add_u64("vdev_children", tops.len() as u64);
        self.config_nv = cfg;
        if self.version >= SPA_VERSION_FEATURES {
            self.create_vdev_zaps()?;
        }
        if !cache.is_empty() {
            self.add_aux(4, "l2cache", cache)?;
        }
        self.config_dirty = true;
        self.sync()
    }

    /// Label cache (4) or spare (3) devices and list them in their MOS object.
    fn add_aux(&mut self, state: u64, key: &str, paths: &[PathBuf]) -> Result<()> {
        let mut list: Vec<NvList> = Vec::new();
        if let Some(obj) = self.mos.zap_lookup(1, key)? {
            let size = u64::from_le_bytes(self.mos.bonus(obj)?.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]));
            let bytes = self.mos.read(obj, 0, size as usize)?;
            if let Ok(nv) = NvList::decode_packed(&bytes) {
                list = nv.get_nvlist_array(key).map(|a| a.to_vec()).unwrap_or_default();
            }
            self.mos.free_object(obj)?;
        }
        for p in paths {
            let dev = open_device(p, true).map_err(|e| ZfsError::Invalid(format!("cannot open '{}': {e}", p.display())))?;
            let g = rand_u64();
            let path = std::fs::canonicalize(p).unwrap_or(p.clone());
            let mut n = NvList::new();
            n.add_str("type", leaf_type(&path));
            n.add_u64("guid", g);
            n.add_str("path", &path.display().to_string());
            if state == 3 {
                n.add_u64("is_spare", 1);
            }
            let mut label = NvList::new();
            label.add_u64("version", self.version);
            label.add_u64("state", state);
            label.add_u64("guid", g);
            write_aux_labels(dev.as_ref(), &label)?;
            list.push(n);
        }
        let mut nv = NvList::new();
        nv.insert(key, NvValue::NvListArray(list));
        let packed = nv.encode_xdr();
        let obj = self.mos.alloc_object(types::DMU_OT_PACKED_NVLIST, 16384, types::DMU_OT_PACKED_NVLIST_SIZE, 8, 1)?;
        self.mos.write(obj, 0, &packed)?;
        self.mos.set_bonus(obj, &(packed.len() as u64).to_le_bytes())?;
        self.mos.zap_add_u64(1, key, obj)?;
        Ok(())
    }

    /// Export: sync, then mark the labels exported.
    pub fn export(&mut self) -> Result<()> {
        self.sync()?;
        self.set_label_state(1)
    }

    /// Rewrite every label with pool state `state` (1 exported, 2 destroyed).
    pub fn set_label_state(&mut self, state: u64) -> Result<()> {
        let txg = self.txg - 1;
        let root = self.spa.root_vdev.clone();
        for which in [[0usize, 2], [1, 3]] {
            self.write_labels(&which, txg, state)?;
            root.flush()?;
        }
        Ok(())
    }

    /// Append a command to the pool's history (the MOS "history" object: a log of packed
    /// nvlists, each after its u64 length, with the offsets in the bonus). The object is made on
    /// first use; when it is full, records are counted as lost (no ring wrap yet).
    pub fn log_history(&mut self, cmd: &str) -> Result<()> {
        const MAX: u64 = 1 << 20;
        let obj = match self.mos.zap_lookup(1, "history")? {
            Some(o) => o,
            None => {
                let o = self.mos.alloc_object(types::DMU_OT_SPA_HISTORY, 128 << 10, types::DMU_OT_SPA_HISTORY_OFFSETS, 40, 1)?;
                let mut b = vec![0u8; 40];
                b[8..16].copy_from_slice(&MAX.to_le_bytes());
                self.mos.set_bonus(o, &b)?;
                self.mos.zap_add_u64(1, "history", o)?;
                o
            }
        };
        let bonus = self.mos.bonus(obj)?;
        let w = |i: usize| u64::from_le_bytes(bonus[i * 8..i * 8 + 8].try_into().expect("8"));
        let (mut create_len, max, mut bof, mut eof, mut lost) = (w(0), w(1), w(2), w(3), w(4));
        let mut nv = NvList::new();
        nv.add_u64("history time", now());
        nv.add_str("history command", cmd);
        nv.add_u64("history who", unsafe { libc::getuid() } as u64);
        nv.add_str("history hostname", &self.hostname);
        let packed = nv.encode_xdr();
        let mut rec = (packed.len() as u64).to_le_bytes().to_vec();
        rec.extend_from_slice(&packed);
        if eof + rec.len() as u64 > max {
            lost += 1;
        } else {
            self.mos.write(obj, eof, &rec)?;
            eof += rec.len() as u64;
            if create_len == 0 {
                // The first record (the creation) is kept forever; the ring starts after it.
                create_len = eof;
                bof = eof;
            }
        }
        let mut b = vec![0u8; 40];
        for (i, v) in [create_len, max, bof, eof, lost].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        self.mos.set_bonus(obj, &b)
    }

    /// `zpool set`: the comment goes into the config; the other properties into the MOS's
    /// pool_props ZAP (as spa_sync_props stores them). Values are OpenZFS's.
    pub fn set_pool_prop(&mut self, k: &str, v: &str) -> Result<()> {
        if let Some(f) = k.strip_prefix("feature@") {
            // zpool_valid_proplist's words; then spa_feature_enable in the open txg.
            let Some(&(guid, ..)) = supported_feature(f) else {
                return Err(ZfsError::Invalid(format!("feature '{f}' unsupported by kernel")));
            };
            if v != "enabled" {
                return Err(ZfsError::Invalid(format!("property '{k}' can only be set to 'enabled'")));
            }
            if self.version < SPA_VERSION_FEATURES {
                return Err(ZfsError::Invalid("pool must be upgraded to enable features".into()));
            }
            return self.feature_enable(guid);
        }
        let bad = || ZfsError::Invalid(format!("invalid value '{v}' for property '{k}'"));
        let onoff = |v: &str| match v {
            "on" => Ok(1u64),
            "off" => Ok(0),
            _ => Err(bad()),
        };
        let num = match k {
            "comment" => {
                if v.len() > 32 || v.chars().any(|c| c.is_control()) {
                    return Err(ZfsError::Invalid("comment must be at most 32 printable characters".into()));
                }
                self.config_nv.add_str("comment", v);
                self.config_dirty = true;
                return Ok(());
            }
            "cachefile" => return Ok(()), // no cache file: pools are found by scanning
            "autoexpand" | "autoreplace" | "listsnapshots" | "delegation" | "autotrim" | "multihost" => onoff(v)?,
            "failmode" => match v {
                "wait" => 0,
                "continue" => 1,
                "panic" => 2,
                _ => return Err(bad()),
            },
            "ashift" | "size" | "free" | "allocated" | "capacity" | "health" | "guid" | "version" | "readonly" | "altroot" => {
                return Err(ZfsError::Invalid(format!("property '{k}' is readonly")))
            }
            _ => return Err(ZfsError::Invalid(format!("property '{k}' is not a valid pool property"))),
        };
        self.pool_props_store(k, num)
    }

    /// A numeric pool property into the MOS pool_props ZAP (made on first use).
    fn pool_props_store(&mut self, k: &str, num: u64) -> Result<()> {
        let obj = match self.mos.zap_lookup(1, "pool_props")? {
            Some(o) => o,
            None => {
                let o = self.mos.create_zap(types::DMU_OT_POOL_PROPS, 0, 0, 0)?;
                self.mos.zap_add_u64(1, "pool_props", o)?;
                o
            }
        };
        self.mos.zap_add_u64(obj, k, num)
    }

    /// What the pool's features allow of a property value (zfs_check_settable and libzfs's
    /// zfs_valid_proplist), with OpenZFS's messages for `zfs create` (`creating`) or `zfs set`.
    pub fn prop_feature_check(&self, k: &str, v: &str, creating: bool) -> Result<()> {
        let upgrade = || {
            ZfsError::Invalid(if creating { "pool must be upgraded to set this property or value" } else { "pool and or dataset must be upgraded to set this property or value" }.into())
        };
        let needs = |guid: Option<&str>| match guid {
            Some(g) if !self.features.contains_key(g) => Err(upgrade()),
            _ => Ok(()),
        };
        match (k, crate::dsl::encode_prop(k, v)?) {
            ("compression", crate::dsl::PropStore::Num(n)) => needs(compress_feature((n & 0x7f) as u8)),
            ("checksum", crate::dsl::PropStore::Num(n)) => needs(checksum_feature(n as u8)),
            // zfs_check_settable: dedup needs SPA_VERSION_DEDUP, then its checksum's feature.
            ("dedup", _) if self.version < SPA_VERSION_DEDUP => Err(upgrade()),
            ("dedup", crate::dsl::PropStore::Num(n)) => needs(checksum_feature((n & 0xff) as u8)),
            ("dnodesize", _) if v != "legacy" => needs(Some("org.zfsonlinux:large_dnode")),
            ("recordsize", crate::dsl::PropStore::Num(n)) if n > 128 << 10 => {
                if !self.features.contains_key("org.open-zfs:large_blocks") {
                    // libzfs bounds it by the pool's maxblocksize: 128K without large_blocks.
                    return Err(ZfsError::Invalid("'recordsize' must be power of 2 from 512B to 128K".into()));
                }
                if n > zfs_max_recordsize() {
                    // ERANGE from the kernel, as libzfs words it.
                    return Err(ZfsError::Invalid(if creating { "invalid property value(s) specified" } else { "property setting is not allowed on bootable datasets" }.into()));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// dsl_dataset_set_compression: compression=zstd set on a dataset makes zstd_compress
    /// active on it at once (other features wait for the blocks that use them).
    fn prop_feature_activate(&mut self, dsobj: u64, k: &str, v: &str) -> Result<()> {
        if k != "compression" || dsobj == 0 {
            return Ok(());
        }
        if let crate::dsl::PropStore::Num(n) = crate::dsl::encode_prop(k, v)? {
            if let Some(g) = compress_feature((n & 0x7f) as u8) {
                self.ds_feature_activate(dsobj, g)?;
            }
        }
        Ok(())
    }

    /// `zfs set` (Some) or `zfs inherit` (None) of a property on a dataset.
    pub fn set_prop(&mut self, ds: &str, k: &str, v: Option<&str>) -> Result<()> {
        let dir = self.find_dir(ds)?.ok_or_else(|| ZfsError::NotFound(format!("cannot open '{ds}': dataset does not exist")))?;
        if crate::dsl_space::is_space_prop(k) {
            let Some(v) = v else { return Err(ZfsError::Invalid(format!("'{k}' property cannot be inherited"))) };
            let crate::dsl::PropStore::Num(n) = crate::dsl::encode_prop(k, v)? else { unreachable!("sizes are numbers") };
            return self.set_space_prop(dir, k, n);
        }
        let props = self.dir_phys(dir)?.props_zapobj;
        match v {
            Some(v) => {
                self.prop_feature_check(k, v, false)?;
                set_prop_in(&mut self.mos, props, k, v)?;
                let head = self.dir_phys(dir)?.head_dataset_obj;
                self.prop_feature_activate(head, k, v)?;
            }
            None => {
                if !crate::dsl::SETTABLE.contains(&k) && !k.contains(':') {
                    return Err(ZfsError::Invalid(format!("invalid property '{k}'")));
                }
                self.mos.zap_remove(props, k)?;
            }
        }
        self.refresh_open_props()
    }

    /// Open objsets follow the properties they now have (after a set, inherit or rename).
    pub(crate) fn refresh_open_props(&mut self) -> Result<()> {
        let ids: Vec<u64> = self.datasets.keys().copied().collect();
        for id in ids {
            let d = self.ds_phys(id)?.dir_obj;
            let p = self.effective_props(d)?;
            self.datasets.get_mut(&id).expect("listed").os.props = p;
        }
        Ok(())
    }

    /// The writable objset of dataset `dsobj` (opened on first use).
    pub fn objset(&mut self, dsobj: u64) -> Result<&mut ObjsetW> {
        if !self.datasets.contains_key(&dsobj) {
            let p = DslDatasetPhys::decode(&self.mos.bonus(dsobj)?, true).map_err(|e| ZfsError::corrupt(format!("dataset {dsobj}"), e))?;
            // A clone with a livelist (OpenZFS 2.x) would need it kept in step with every
            // block born and freed: such a clone stays read-only.
            self.refuse_livelist(dsobj, p.dir_obj)?;
            let props = self.effective_props(p.dir_obj)?;
            let os = ObjsetW::open(&self.spa, dsobj, &p.bp, props)?;
            self.datasets.insert(dsobj, DatasetW { dsobj, os, prev_snap_txg: p.prev_snap_txg });
        }
        Ok(&mut self.datasets.get_mut(&dsobj).expect("inserted").os)
    }

    /// Raw bytes allocated per byte of data on the worst top-level vdev (raidz parity and
    /// padding, sector rounding of a 128K block), for space estimates.
    fn raw_per_byte(&self) -> f64 {
        self.spa
            .root_vdev
            .children
            .iter()
            .map(|t| psize_to_asize(t, 128 << 10) as f64 / (128u64 << 10) as f64)
            .fold(1.0, f64::max)
    }

    /// Raw bytes the smallest block takes on the worst top-level vdev (a sector, its raidz
    /// parity and padding): a dirty block of a small record costs at least this much.
    fn raw_per_block(&self) -> u64 {
        self.spa.root_vdev.children.iter().map(|t| psize_to_asize(t, 512)).max().unwrap_or(512)
    }

    /// Raw bytes `bytes` of data in `blocks` blocks, `copies` times, may allocate: by the
    /// bytes (large records) or by the blocks (small records on wide sectors), whichever is more.
    fn raw_estimate(&self, bytes: u64, blocks: u64, copies: usize) -> u64 {
        let by_bytes = (bytes as f64 * self.raw_per_byte()) as u64;
        by_bytes.max(blocks.saturating_mul(self.raw_per_block())).saturating_mul(copies.max(1) as u64)
    }

    /// Refuse a change that would need `incoming` more bytes of data in `incoming_blocks`
    /// blocks when the pool cannot take it and still keep OpenZFS's slop space (ENOSPC).
    /// What is dirty counts with its own dataset's copies. Space freed in the last two txgs
    /// is not yet allocatable and does not count as free.
    pub fn space_check(&self, incoming: u64, incoming_blocks: u64, copies: usize) -> Result<()> {
        let (size, alloc) = self.space_totals();
        let slop = crate::dsl::slop_space(size, 0);
        let pending = self
            .datasets
            .values()
            .map(|d| self.raw_estimate(d.os.dirty_bytes + d.os.frozen_bytes(), d.os.dirty_blocks + d.os.frozen_blocks(), d.os.props.copies))
            .fold(self.raw_estimate(self.mos.dirty_bytes, self.mos.dirty_blocks, copies), u64::saturating_add)
            .saturating_add(self.raw_estimate(incoming, incoming_blocks, copies));
        let dirty = (pending as f64 * 1.05) as u64 + (1 << 20);
        if alloc.saturating_add(dirty).saturating_add(slop) > size {
            return Err(ZfsError::Posix(libc::ENOSPC, format!("pool '{}' is out of space", self.spa.name)));
        }
        Ok(())
    }

    /// refquota of the dataset and quota of its directory and every ancestor: EDQUOT when
    /// `incoming` more bytes (plus what is dirty) would pass one.
    pub fn quota_check(&mut self, dsobj: u64, incoming: u64) -> Result<()> {
        let dirty = self.datasets.get(&dsobj).map_or(0, |d| d.os.dirty_bytes + d.os.frozen_bytes()) + incoming;
        let p = self.ds_phys(dsobj)?;
        let mut dir = p.dir_obj;
        let mut first = true;
        while dir != 0 {
            let d = self.dir_phys(dir)?;
            if d.props_zapobj != 0 {
                let z = self.mos.zap(d.props_zapobj)?;
                let get = |k: &str| z.entries.get(k.as_bytes()).and_then(|(i, v)| if *i == 8 { v.first().copied() } else { None }).unwrap_or(0);
                let (refquota, quota) = (get("refquota"), get("quota"));
                if first && refquota > 0 && p.referenced_bytes + dirty > refquota {
                    return Err(ZfsError::Posix(libc::EDQUOT, "refquota exceeded".into()));
                }
                if quota > 0 && d.used_bytes + dirty > quota {
                    return Err(ZfsError::Posix(libc::EDQUOT, "quota exceeded".into()));
                }
            }
            first = false;
            dir = d.parent_dir_obj;
        }
        Ok(())
    }

    /// Whether dataset `dsobj` may take a change needing `incoming` more bytes: None, or what
    /// it is short of (pool space, quota, reservation) with the error to give. A read-only
    /// dataset is an error (EROFS).
    fn space_for(&mut self, dsobj: u64, incoming: u64) -> Result<Option<Short>> {
        let os = self.objset(dsobj)?;
        if os.props.readonly {
            return Err(ZfsError::Posix(libc::EROFS, "read-only file system (readonly=on)".into()));
        }
        let copies = os.props.copies;
        // A write may start and end in a partial record: one block more than it fills.
        let blocks = if incoming == 0 { 0 } else { incoming.div_ceil(os.props.recordsize.max(512)) + 1 };
        if let Err(err) = self.space_check(incoming, blocks, copies) {
            return Ok(Some(Short { space: true, err }));
        }
        if incoming > 0 {
            if let Err(err) = self.quota_check(dsobj, incoming) {
                return Ok(Some(Short { space: false, err }));
            }
        }
        if let Err(err) = self.reservation_check(dsobj, incoming, copies) {
            return Ok(Some(Short { space: false, err }));
        }
        Ok(None)
    }

    /// Bytes of dirty data blocks waiting for a sync (the open txg's and the syncing one's).
    pub fn dirty_bytes(&self) -> u64 {
        self.mos.dirty_bytes + self.datasets.values().map(|d| d.os.dirty_bytes + d.os.frozen_bytes()).sum::<u64>()
    }

    /// (size, allocated) of the pool's metaslabs (as of quiesce while a txg syncs).
    pub fn space_totals(&self) -> (u64, u64) {
        self.ms_out.unwrap_or_else(|| self.ms.space_totals())
    }

    /// Whether anything is waiting for a sync.
    pub fn dirty(&self) -> bool {
        self.mos.is_dirty() || self.config_dirty || self.ddt.is_dirty() || self.datasets.values().any(|d| d.os.is_dirty())
    }
}

/// What a change was refused for (`PoolW::space_for`): `space` when the pool itself is full
/// (the retry may release deferred frees), and the error to give.
struct Short {
    space: bool,
    err: ZfsError,
}

/// The zfs_max_recordsize tunable: the largest recordsize `zfs set` accepts (1M, as in
/// OpenZFS 2.1; up to 16M from $OXZFS_ZFS_MAX_RECORDSIZE, read by the daemon).
pub fn zfs_max_recordsize() -> u64 {
    std::env::var("OXZFS_ZFS_MAX_RECORDSIZE").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(1 << 20).clamp(128 << 10, crate::dsl::MAX_RECORDSIZE)
}

/// Store property `k` = `val` (validated) in a DSL props ZAP.
pub fn set_prop_in(mos: &mut ObjsetW, props_obj: u64, k: &str, val: &str) -> Result<()> {
    match crate::dsl::encode_prop(k, val)? {
        crate::dsl::PropStore::Num(n) => mos.zap_add_u64(props_obj, k, n),
        crate::dsl::PropStore::Str(s) => {
            let mut b: Vec<u64> = s.bytes().map(|c| c as u64).collect();
            b.push(0);
            mos.zap_mut(props_obj)?.entries.insert(k.as_bytes().to_vec(), (1, b));
            Ok(())
        }
    }
}

/// The config of a new top-level vdev (and its opened leaves), as `zpool create/add` make it.
fn build_top(pool: &str, id: u64, class: VdevClass, v: &VdevSpec, ashift: u8, txg: u64) -> Result<(NvList, Vec<Leaf>)> {
    let (typ, paths, nparity): (&str, Vec<PathBuf>, u8) = match v {
        VdevSpec::File(p) => ("file", vec![p.clone()], 0),
        VdevSpec::Mirror(ps) => ("mirror", ps.clone(), 0),
        VdevSpec::Raidz(p, ps) => ("raidz", ps.clone(), *p),
    };
    let mut leaves = Vec::new();
    for p in &paths {
        let dev = open_device(p, true).map_err(|e| ZfsError::Invalid(format!("cannot open '{}': {e}", p.display())))?;
        if dev.size() < SPA_MINDEVSIZE {
            return Err(ZfsError::Invalid(format!("cannot create '{pool}': one or more devices is less than the minimum size (64M)")));
        }
        leaves.push(Leaf { path: std::fs::canonicalize(p).unwrap_or(p.clone()), guid: rand_u64(), dev });
    }
    let min_leaf = leaves.iter().map(|l| leaf_asize(l.dev.size())).min().unwrap_or(0);
    let asize = if typ == "raidz" { min_leaf * leaves.len() as u64 } else { min_leaf };
    let leaf_nv = |l: &Leaf, lid: u64| {
        let mut n = NvList::new();
        n.add_str("type", leaf_type(&l.path));
        n.add_u64("id", lid);
        n.add_u64("guid", l.guid);
        n.add_str("path", &l.path.display().to_string());
        n.add_u64("create_txg", txg);
        n
    };
    let mut top = if typ == "file" {
        leaf_nv(&leaves[0], id)
    } else {
        let mut t = NvList::new();
        t.add_str("type", typ);
        t.add_u64("id", id);
        t.add_u64("guid", rand_u64());
        if typ == "raidz" {
            t.add_u64("nparity", nparity as u64);
        }
        t.insert("children", NvValue::NvListArray(leaves.iter().enumerate().map(|(i, l)| leaf_nv(l, i as u64)).collect()));
        t
    };
    top.add_u64("metaslab_array", 0);
    top.add_u64("metaslab_shift", metaslab_shift(asize));
    top.add_u64("ashift", ashift as u64);
    top.add_u64("asize", asize);
    top.add_u64("is_log", (class == VdevClass::Log) as u64);
    top.add_u64("create_txg", txg);
    // In memory only: OpenZFS keeps the bias in the top-level vdev's ZAP.
    match class {
        VdevClass::Special => top.add_str("alloc_bias", "special"),
        VdevClass::Dedup => top.add_str("alloc_bias", "dedup"),
        VdevClass::Log => top.add_str("alloc_bias", "log"),
        VdevClass::Normal => {}
    }
    Ok((top, leaves))
}

/// "disk" for block devices, "file" for files (the leaf types OpenZFS records).
fn leaf_type(p: &Path) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(p) {
        Ok(m) if m.file_type().is_block_device() => "disk",
        _ => "file",
    }
}

/// The four labels of an aux (cache or spare) device: a config naming only its guid and state.
fn write_aux_labels(dev: &dyn BlockDevice, label: &NvList) -> Result<()> {
    for l in 0..VDEV_LABELS {
        let off = label_offset(l, dev.size()) + VDEV_PHYS_OFFSET;
        let b = oxzfs_format::label::encode_label_config(label, off).map_err(|e| ZfsError::Invalid(format!("label: {e}")))?;
        dev.write_at(&b, off).map_err(|e| ZfsError::Io { device: dev.name(), offset: off, source: e })?;
    }
    dev.flush().map_err(|e| ZfsError::Io { device: dev.name(), offset: 0, source: e })
}

/// Remove the vdev ZAP object numbers from a vdev config and its children (a label's copy).
fn strip_vdev_zaps(nv: &mut NvList) {
    nv.remove("com.delphix:vdev_zap_top");
    nv.remove("com.delphix:vdev_zap_leaf");
    if let Some(mut kids) = nv.get_nvlist_array("children").map(|a| a.to_vec()) {
        kids.iter_mut().for_each(strip_vdev_zaps);
        nv.insert("children", NvValue::NvListArray(kids));
    }
}

fn guid_sum(v: &Vdev) -> u64 {
    v.children.iter().fold(v.guid, |a, c| a.wrapping_add(guid_sum(c)))
}

fn leaf_ashift(root: &Vdev, leaf: &Vdev) -> u8 {
    for top in &root.children {
        if top.leaves().iter().any(|l| std::ptr::eq(*l, leaf)) {
            return top.ashift;
        }
    }
    leaf.ashift
}

/// Open the device files named on a `zpool create` command line (existence checked).
pub fn check_paths(paths: &[&Path]) -> Result<()> {
    for p in paths {
        if !p.exists() {
            return Err(ZfsError::Invalid(format!("cannot open '{}': No such file or directory", p.display())));
        }
    }
    Ok(())
}

/// Run one objset's sync job in pass `pass` of `txg` with allocator `ms`, and free what it
/// replaced (deferred by the metaslabs for two txgs) when born after `keep`; the blocks born
/// at or before it (shared with a snapshot) come back for the dataset's deadlist.
#[allow(clippy::too_many_arguments)]
fn run_job(env: &SyncEnv, ms: &mut Metaslabs, ddt: &mut crate::ddt::Ddt, job: &mut SyncJob, pass: u32, is_mos: bool, txg: u64, keep: u64) -> Result<(BlockPointer, Vec<BlockPointer>)> {
    let root = env.spa.root_vdev.clone();
    let dsize = |bp: &BlockPointer| dsize_of(&root, bp);
    let min_alloc = root.children.iter().map(|c| 1u64 << c.ashift).min().unwrap_or(512);
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
        ddt: &mut *ddt,
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
fn free_bp_in(spa: &Spa, ms: &mut Metaslabs, ddt: &mut crate::ddt::Ddt, bp: &BlockPointer, txg: u64) -> Result<()> {
    if bp.dedup && !bp.embedded && !bp.is_hole() {
        ddt.free(&spa.root_vdev, bp);
        return Ok(());
    }
    let mut dvas = Vec::new();
    crate::zio::bp_allocations(&crate::zio::ZioCtx { root: &spa.root_vdev, salt: &spa.checksum_salt }, bp, &mut dvas)?;
    for d in dvas {
        ms.free(d.vdev, d.offset, d.asize, txg, bp.birth);
    }
    Ok(())
}

/// A device write: the device, the offset, the bytes.
type DevWrite = (Arc<dyn crate::vdev::BlockDevice>, u64, Vec<u8>);

fn write_all(w: &[DevWrite]) -> Result<()> {
    for (dev, off, b) in w {
        dev.write_at(b, *off).map_err(|e| ZfsError::Io { device: dev.name(), offset: *off, source: e })?;
    }
    Ok(())
}

/// The end of a txg's sync, written without the pool lock: flush the txg's blocks; when the
/// config changed, the even labels and a flush; the uberblock into its slot of every label; a
/// flush; the odd labels and a flush — OpenZFS's safe order.
pub struct UbWrite {
    txg: u64,
    root: Arc<Vdev>,
    rootbp: BlockPointer,
    config_dirty: bool,
    even: Vec<DevWrite>,
    odd: Vec<DevWrite>,
    ubs: Vec<DevWrite>,
}

impl UbWrite {
    fn write(&self) -> Result<()> {
        self.root.flush()?;
        if self.config_dirty {
            write_all(&self.even)?;
            self.root.flush()?;
        }
        write_all(&self.ubs)?;
        self.root.flush()?;
        if self.config_dirty {
            write_all(&self.odd)?;
            self.root.flush()?;
        }
        Ok(())
    }
}

/// Write the quiesced datasets of `q` (pass 1; the MOS follows in `sync_finish`).
fn sync_datasets(env: &SyncEnv, ms: &mut Metaslabs, ddt: &mut crate::ddt::Ddt, q: &mut Quiesced) -> Result<()> {
    for ((job, keep), dead) in q.jobs.iter_mut().zip(&q.keep).zip(&mut q.dead) {
        *dead = run_job(env, ms, ddt, job, 1, false, q.txg, *keep)?.1;
    }
    Ok(())
}


// ------------------------------------------------------------------------------------------
// The handle mounts and commands share: the write state, the txg sync thread, the throttle.

/// Sync at least this often (zfs_txg_timeout).
pub const TXG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

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
    /// capped at 4 GiB (OXZFS_DIRTY_DATA_MAX, in bytes, overrides it).
    pub fn for_ram(ram: u64, env_max: Option<u64>) -> DirtyLimits {
        let max = env_max.filter(|&m| m > 0).unwrap_or_else(|| (ram / 10).min(4 << 30)).max(1 << 20);
        DirtyLimits { max, sync_percent: 20, delay_min_percent: 60, delay_scale_ns: 1_000_000_000 / 2000, delay_max_ns: 100_000_000 }
    }

    fn from_system() -> DirtyLimits {
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        let psize = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let ram = if pages > 0 && psize > 0 { pages as u64 * psize as u64 } else { 4 << 30 };
        let env = std::env::var("OXZFS_DIRTY_DATA_MAX").ok().and_then(|v| v.trim().parse::<u64>().ok());
        DirtyLimits::for_ram(ram, env)
    }

    /// Dirty bytes past which the open txg is synced early (dsl_pool_need_dirty_sync).
    pub fn sync_bytes(&self) -> u64 {
        self.max / 100 * self.sync_percent
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
/// command never sees a txg half-synced and may sync inline) → `w` (the write state) →
/// `kick`, `fs`, `wakeup` (leaves, held briefly).
pub struct PoolHandle {
    pub w: std::sync::Mutex<PoolW>,
    sync: std::sync::Mutex<()>,
    fs: std::sync::Mutex<std::collections::HashMap<u64, crate::zplw::FsInfo>>,
    stop: std::sync::atomic::AtomicBool,
    /// Wakes the sync thread early (dirty data past the sync threshold).
    kick: std::sync::Mutex<bool>,
    kick_cv: std::sync::Condvar,
    /// The throttle's schedule: when the last delayed change may go (dp_last_wakeup).
    wakeup: std::sync::Mutex<std::time::Instant>,
    pub limits: DirtyLimits,
}

/// The write state held by a command: no txg is syncing meanwhile (see `PoolHandle`).
pub struct PoolGuard<'a> {
    w: std::sync::MutexGuard<'a, PoolW>,
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

fn unpoison<T>(r: std::sync::LockResult<T>) -> T {
    r.unwrap_or_else(|p| p.into_inner())
}

/// Run a piece of a sync, turning a panic (a bug) into an error so that the pool is
/// suspended, not wedged.
fn catch<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
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
        let h = Arc::new(PoolHandle {
            w: std::sync::Mutex::new(pw),
            sync: std::sync::Mutex::new(()),
            fs: std::sync::Mutex::new(std::collections::HashMap::new()),
            stop: std::sync::atomic::AtomicBool::new(false),
            kick: std::sync::Mutex::new(false),
            kick_cv: std::sync::Condvar::new(),
            wakeup: std::sync::Mutex::new(std::time::Instant::now()),
            limits: DirtyLimits::from_system(),
        });
        let weak = Arc::downgrade(&h);
        std::thread::Builder::new()
            .name("txg_sync".into())
            .spawn(move || loop {
                let Some(h) = weak.upgrade() else { return };
                let kicked = {
                    let k = unpoison(h.kick.lock());
                    let (mut k, _) = unpoison(h.kick_cv.wait_timeout_while(k, std::time::Duration::from_millis(200), |k| !*k));
                    std::mem::take(&mut *k)
                };
                if h.stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let due = {
                    let w = h.lock_open();
                    w.suspended.is_none() && w.dirty() && (kicked || w.dirty_bytes() >= h.limits.sync_bytes() || w.last_sync.elapsed() >= TXG_TIMEOUT)
                };
                if due {
                    let s = unpoison(h.sync.lock());
                    let _ = h.sync_txg(&s);
                }
            })
            .expect("spawn the txg sync thread");
        h
    }

    /// The write state for a command (waits for a txg being synced; see `PoolHandle`).
    pub fn lock(&self) -> PoolGuard<'_> {
        let s = unpoison(self.sync.lock());
        PoolGuard { w: unpoison(self.w.lock()), _sync: s }
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

    /// Sync the open txg (the caller holds `sync`): quiesce under the lock, write the datasets
    /// without it, finish (MOS, uberblock) under it.
    fn sync_txg(&self, _sync: &std::sync::MutexGuard<'_, ()>) -> Result<()> {
        let (mut q, env, mut ms, mut ddt) = {
            let mut w = self.lock_open();
            w.check_suspended()?;
            if !w.dirty() {
                return Ok(());
            }
            let q = w.quiesce();
            let env = w.sync_env();
            w.ms_out = Some(w.ms.space_totals());
            let ms = std::mem::take(&mut w.ms);
            let ddt = std::mem::take(&mut w.ddt);
            (q, env, ms, ddt)
        };
        let r = catch(|| sync_datasets(&env, &mut ms, &mut ddt, &mut q));
        let r = {
            let mut w = self.lock_open();
            w.ms = ms;
            w.ddt = ddt;
            w.ms_out = None;
            r.and_then(|_| catch(|| w.sync_finish(q)))
        };
        // The flushes, labels and uberblock without the lock; then the txg is synced.
        let r = r.and_then(|ub| {
            ub.write()?;
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
            let w = self.lock_open();
            let target = if w.dirty() { w.txg } else { w.txg - 1 };
            if w.synced_txg >= target {
                return Ok(());
            }
            target
        };
        let s = unpoison(self.sync.lock());
        if self.lock_open().synced_txg >= target {
            return Ok(());
        }
        self.suspended()?;
        self.sync_txg(&s)
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
            g.ms.release_deferred(synced, oldest);
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

    /// The ZPL's fixed objects of the objset (cached).
    pub fn fs_info(&self, os: &mut ObjsetW) -> Result<crate::zplw::FsInfo> {
        if let Some(f) = unpoison(self.fs.lock()).get(&os.id) {
            return Ok(f.clone());
        }
        let f = crate::zplw::open_fs(os, os.props.recordsize)?;
        // Files unlinked while open before a crash or export are freed now (zfs_unlinked_drain).
        if !os.props.readonly {
            crate::zplw::drain_delete_queue(os, &f)?;
        }
        unpoison(self.fs.lock()).insert(os.id, f.clone());
        Ok(f)
    }

    pub fn name(&self) -> String {
        self.lock_open().spa.name.clone()
    }

    /// After export: mark the labels destroyed (zpool destroy).
    pub fn mark_destroyed(&self) -> Result<()> {
        self.lock().set_label_state(2)
    }

    /// Open the pool again from its devices (after `zpool add` changed the vdev tree), keeping
    /// the mounts: they go through this handle.
    pub fn reopen(&self, dirs: &[PathBuf]) -> Result<Arc<Spa>> {
        let mut w = self.lock();
        w.sync()?;
        let guid = w.spa.guid;
        let hostname = w.hostname.clone();
        let scan = crate::spa::scan(dirs);
        let cand = crate::spa::choose(&scan, &guid.to_string())?;
        let arc_max = w.spa.arc.stats().c_max;
        let nw = PoolW::open(cand, arc_max, &hostname)?;
        let spa = nw.spa.clone();
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
        let mut w = self.lock();
        if let Some(e) = w.suspended.clone() {
            return Err(ZfsError::Unavailable(format!("pool I/O is currently suspended ({e})")));
        }
        w.export()
    }
}

// ------------------------------------------------------------------------------------------
// Datasets: create and destroy file systems (dsl_dir + dsl_dataset + objset + ZPL skeleton).

impl PoolW {
    pub(crate) fn dir_phys(&mut self, dir: u64) -> Result<DslDirPhys> {
        DslDirPhys::decode(&self.mos.bonus(dir)?, true).map_err(|e| ZfsError::corrupt(format!("dsl dir {dir}"), e))
    }

    pub(crate) fn ds_phys(&mut self, ds: u64) -> Result<DslDatasetPhys> {
        DslDatasetPhys::decode(&self.mos.bonus(ds)?, true).map_err(|e| ZfsError::corrupt(format!("dataset {ds}"), e))
    }

    /// The dsl_dir of a dataset name ("pool/a/b"), or None.
    pub fn find_dir(&mut self, name: &str) -> Result<Option<u64>> {
        let mut parts = name.split('/');
        if parts.next() != Some(self.spa.name.as_str()) {
            return Ok(None);
        }
        let mut dir = self.mos.zap_lookup(1, "root_dataset")?.ok_or_else(|| ZfsError::Invalid("no root_dataset".into()))?;
        for p in parts {
            if p.is_empty() {
                return Ok(None);
            }
            let child = self.dir_phys(dir)?.child_dir_zapobj;
            match self.mos.zap_lookup(child, p)? {
                Some(d) => dir = d,
                None => return Ok(None),
            }
        }
        Ok(Some(dir))
    }

    /// The head dataset object of a dataset name.
    pub fn find_dataset(&mut self, name: &str) -> Result<Option<u64>> {
        match self.find_dir(name)? {
            Some(d) => Ok(Some(self.dir_phys(d)?.head_dataset_obj).filter(|&o| o != 0)),
            None => Ok(None),
        }
    }

    /// `zfs create [-p]`: a new file system, a clone of $ORIGIN@$ORIGIN as OpenZFS makes them.
    pub fn create_dataset(&mut self, name: &str, props: &[(String, String)], parents: bool) -> Result<u64> {
        self.create_dataset_from(name, props, parents, None)
    }

    /// `zfs create`, or with `origin` (a snapshot object) `zfs clone`: the new head shares the
    /// origin's objset, its blocks born at or before the origin stay the origin's.
    pub fn create_dataset_from(&mut self, name: &str, props: &[(String, String)], parents: bool, origin: Option<u64>) -> Result<u64> {
        if name.len() > 255 {
            return Err(ZfsError::Invalid(format!("cannot create '{name}': name is too long")));
        }
        let Some((parent, leaf)) = name.rsplit_once('/') else {
            return Err(ZfsError::Invalid(format!("cannot create '{name}': missing dataset name")));
        };
        if leaf.is_empty() || !leaf.chars().all(|c| c.is_ascii_alphanumeric() || "_-:. ".contains(c)) || leaf.starts_with('$') {
            return Err(ZfsError::Invalid(format!("cannot create '{name}': invalid character in dataset name")));
        }
        for (k, v) in props {
            self.prop_feature_check(k, v, true).map_err(|e| ZfsError::Invalid(format!("cannot create '{name}': {e}")))?;
        }
        let requested = props;
        if self.find_dir(name)?.is_some() {
            return Err(ZfsError::Invalid(format!("cannot create '{name}': dataset already exists")));
        }
        let pdir = match self.find_dir(parent)? {
            Some(d) => d,
            None if parents && parent.contains('/') => {
                self.create_dataset(parent, &[], true)?;
                self.find_dir(parent)?.expect("just created")
            }
            None => return Err(ZfsError::Invalid(format!("cannot create '{name}': parent does not exist"))),
        };
        let v = self.version;
        let t = now();
        let txg = self.txg;
        // The origin snapshot and its head.
        let root_dir = self.mos.zap_lookup(1, "root_dataset")?.expect("checked");
        let root_child = self.dir_phys(root_dir)?.child_dir_zapobj;
        let origin_dir = self.mos.zap_lookup(root_child, "$ORIGIN")?;
        let osnap = match (origin, origin_dir) {
            (Some(o), _) => Some((self.ds_phys(o)?.dir_obj, o)),
            (None, Some(od)) => {
                let head = self.dir_phys(od)?.head_dataset_obj;
                Some((od, self.ds_phys(head)?.prev_snap_obj))
            }
            (None, None) => None,
        };
        let ophys = match origin {
            Some(o) => Some(self.ds_phys(o)?),
            None => None,
        };
        let mos = &mut self.mos;
        let dd = mos.alloc_object(types::DMU_OT_DSL_DIR, 512, types::DMU_OT_DSL_DIR, 256, 1)?;
        let props_obj = mos.create_zap(types::DMU_OT_DSL_PROPS, 0, 0, 0)?;
        let child = mos.create_zap(types::DMU_OT_DSL_DIR_CHILD_MAP, 0, 0, 0)?;
        let pchild = DslDirPhys::decode(&mos.bonus(pdir)?, true).map_err(|e| ZfsError::corrupt("dir".to_string(), e))?.child_dir_zapobj;
        mos.zap_add_u64(pchild, leaf, dd)?;
        // quota, reservation and the like are set once the dataset exists (they are checked).
        for (k, val) in props.iter().filter(|(k, _)| !crate::dsl_space::is_space_prop(k)) {
            set_prop_in(mos, props_obj, k, val)?;
        }
        let ds = mos.alloc_object(types::DMU_OT_DSL_DATASET, 512, types::DMU_OT_DSL_DATASET, 320, 1)?;
        // dsl_deadlist_clone of the origin's head's deadlist, its keys before the origin.
        let deadlist = match osnap {
            Some((od, o)) => {
                let op = self.ds_phys(o)?;
                let ohead = self.dir_phys(od)?.head_dataset_obj;
                let hdl = self.ds_phys(ohead)?.deadlist_obj;
                self.deadlist_clone(hdl, op.creation_txg, o)?
            }
            None => self.deadlist_alloc()?,
        };
        let mos = &mut self.mos;
        let snapnames = mos.create_zap(types::DMU_OT_DSL_DS_SNAP_MAP, 0, 0, 2)?;
        let mut dp = DslDatasetPhys {
            dir_obj: dd,
            prev_snap_obj: 0,
            prev_snap_txg: 0,
            next_snap_obj: 0,
            snapnames_zapobj: snapnames,
            num_children: 0,
            creation_time: t,
            creation_txg: txg,
            deadlist_obj: deadlist,
            referenced_bytes: 0,
            compressed_bytes: 0,
            uncompressed_bytes: 0,
            unique_bytes: 0,
            fsid_guid: rand_u64() >> 8,
            guid: rand_u64(),
            flags: if v >= 9 { DS_FLAG_UNIQUE_ACCURATE } else { 0 },
            bp: BlockPointer::hole(),
            next_clones_obj: 0,
            props_obj: 0,
            userrefs_obj: 0,
        };
        let mut ddp = DslDirPhys {
            creation_time: t,
            head_dataset_obj: ds,
            parent_dir_obj: pdir,
            child_dir_zapobj: child,
            props_zapobj: props_obj,
            flags: if v >= 13 { DD_FLAG_USED_BREAKDOWN } else { 0 },
            ..Default::default()
        };
        if let Some((od, snap)) = osnap {
            dp.prev_snap_obj = snap;
            dp.prev_snap_txg = 1;
            ddp.origin_obj = snap;
            if let Some(op) = &ophys {
                dp.prev_snap_txg = op.creation_txg;
                dp.referenced_bytes = op.referenced_bytes;
                dp.compressed_bytes = op.compressed_bytes;
                dp.uncompressed_bytes = op.uncompressed_bytes;
                dp.bp = op.bp.clone();
                dp.flags |= op.flags & (oxzfs_format::dsl::DS_FLAG_INCONSISTENT | oxzfs_format::dsl::DS_FLAG_CI_DATASET);
            }
            let mut sp = DslDatasetPhys::decode(&mos.bonus(snap)?, true).map_err(|e| ZfsError::corrupt("origin".to_string(), e))?;
            sp.num_children += 1;
            if sp.next_clones_obj == 0 {
                sp.next_clones_obj = mos.create_zap(types::DMU_OT_NEXT_CLONES, 0, 0, 0)?;
            }
            mos.zap_add_u64(sp.next_clones_obj, &format!("{ds:x}"), ds)?;
            mos.set_bonus(snap, &sp.encode())?;
            if v >= 19 {
                let mut odp = DslDirPhys::decode(&mos.bonus(od)?, true).map_err(|e| ZfsError::corrupt("origin dir".to_string(), e))?;
                if odp.clones == 0 {
                    odp.clones = mos.create_zap(types::DMU_OT_DSL_CLONES, 0, 0, 0)?;
                    mos.set_bonus(od, &odp.encode())?;
                }
                mos.zap_add_u64(odp.clones, &format!("{ds:x}"), ds)?;
            }
        }
        mos.set_bonus(ds, &dp.encode())?;
        mos.set_bonus(dd, &ddp.encode())?;
        let osprops = self.effective_props(dd)?;
        match (origin, &ophys) {
            (Some(o), Some(op)) => {
                let os = ObjsetW::open(&self.spa, ds, &op.bp, osprops)?;
                self.datasets.insert(ds, DatasetW { dsobj: ds, os, prev_snap_txg: op.creation_txg });
                for f in self.ds_features(o)? {
                    self.ds_feature_activate(ds, &f)?;
                }
            }
            _ => {
                let mut os = ObjsetW::create(&self.spa, ds, DMU_OST_ZFS, osprops);
                crate::zplw::create_fs(&mut os, if v >= 24 { 5 } else { 4 }, txg)?;
                self.datasets.insert(ds, DatasetW { dsobj: ds, os, prev_snap_txg: 1 });
            }
        }
        for (k, val) in props {
            self.prop_feature_activate(ds, k, val)?;
        }
        self.create_space_props(name, dd, requested)?;
        Ok(ds)
    }

    /// The write policy of datasets under dsl_dir `dir`: each property from the nearest
    /// directory that sets it, else OpenZFS's default.
    pub fn effective_props(&mut self, dir: u64) -> Result<OsProps> {
        use oxzfs_format::{checksum as ck, compress as cz};
        let mut found: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        let mut cur = dir;
        let mut depth = 0;
        while cur != 0 && depth < 64 {
            let d = self.dir_phys(cur)?;
            if d.props_zapobj != 0 {
                let z = self.mos.zap(d.props_zapobj)?.clone();
                for name in ["compression", "checksum", "copies", "recordsize", "special_small_blocks", "readonly", "atime", "xattr", "dnodesize", "dedup"] {
                    if !found.contains_key(name) {
                        if let Some((8, v)) = z.entries.get(name.as_bytes()).map(|(i, v)| (*i, v.clone())) {
                            if let Some(x) = v.first() {
                                found.insert(name, *x);
                            }
                        }
                    }
                }
            }
            cur = d.parent_dir_obj;
            depth += 1;
        }
        let lz4 = self.features.contains_key("org.illumos:lz4_compress");
        let mut compress = found.get("compression").copied().unwrap_or(cz::ZIO_COMPRESS_OFF as u64);
        if compress == cz::ZIO_COMPRESS_ON as u64 {
            compress = if lz4 { cz::ZIO_COMPRESS_LZ4 as u64 } else { cz::ZIO_COMPRESS_LZJB as u64 };
        }
        let mut checksum = found.get("checksum").copied().unwrap_or(ck::ZIO_CHECKSUM_ON as u64);
        if checksum == ck::ZIO_CHECKSUM_ON as u64 {
            checksum = ck::ZIO_CHECKSUM_FLETCHER_4 as u64;
        }
        // zio_checksum_dedup_select: on (and verify) is the pool's dedup checksum.
        let dedup = found.get("dedup").copied().unwrap_or(ck::ZIO_CHECKSUM_OFF as u64);
        let dedup_verify = dedup & oxzfs_format::checksum::ZIO_CHECKSUM_VERIFY != 0;
        let dedup = match (dedup & 0xff) as u8 {
            ck::ZIO_CHECKSUM_INHERIT | ck::ZIO_CHECKSUM_OFF => 0,
            ck::ZIO_CHECKSUM_ON => crate::ddt::ZIO_DEDUPCHECKSUM,
            c => c,
        };
        Ok(OsProps {
            dedup,
            dedup_verify,
            checksum: checksum as u8,
            compress: (compress & 0x7f) as u8,
            complevel: (compress >> 7) as u8,
            copies: found.get("copies").copied().unwrap_or(1).clamp(1, 3) as usize,
            special_small: found.get("special_small_blocks").copied().unwrap_or(0),
            recordsize: found.get("recordsize").copied().unwrap_or(128 << 10),
            readonly: found.get("readonly").copied().unwrap_or(0) != 0,
            atime: found.get("atime").copied().unwrap_or(1) != 0,
            xattr_sa: found.get("xattr").copied() == Some(2),
            // dnodesize=auto is 1K (dnodesize_changed_cb); legacy 512.
            dnodesize: match found.get("dnodesize").copied().unwrap_or(0) {
                0 => 512,
                1 => 1024,
                n => n.clamp(512, 16384) as usize,
            },
        })
    }

    /// `zfs destroy` of a file system without snapshots or children: every block freed now.
    pub fn destroy_dataset(&mut self, name: &str) -> Result<()> {
        let dir = self.find_dir(name)?.ok_or_else(|| ZfsError::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
        let ddp = self.dir_phys(dir)?;
        if ddp.parent_dir_obj == 0 {
            return Err(ZfsError::Invalid(format!("cannot destroy '{name}': operation does not apply to pools\nuse 'zfs destroy -r {name}' to destroy all datasets in the pool\nuse 'zpool destroy {name}' to destroy the pool itself")));
        }
        if !self.mos.zap(ddp.child_dir_zapobj)?.entries.is_empty() {
            return Err(ZfsError::Invalid(format!("cannot destroy '{name}': filesystem has children\nuse '-r' to destroy the following datasets:")));
        }
        let ds = ddp.head_dataset_obj;
        let dp = self.ds_phys(ds)?;
        if !self.mos.zap(dp.snapnames_zapobj)?.entries.is_empty() {
            return Err(ZfsError::Invalid(format!("cannot destroy '{name}': filesystem has children\nuse '-r' to destroy the following datasets:")));
        }
        // Free the objset's blocks (all born after the origin).
        self.release_reservations(dir)?;
        self.sync()?;
        self.datasets.remove(&ds);
        let dp = self.ds_phys(ds)?;
        let mut freed = Vec::new();
        if !dp.bp.is_hole() {
            // A clone's blocks born at or before its origin stay the origin's.
            collect_objset_bps(&self.spa, &dp.bp, dp.prev_snap_txg, &mut freed)?;
        }
        let txg = self.txg;
        for bp in &freed {
            self.free_bp(bp, txg)?;
        }
        let root = self.spa.root_vdev.clone();
        let mut delta = SpaceDelta::default();
        for bp in &freed {
            delta.dsize -= dsize_of(&root, bp) as i64;
            delta.psize -= bp.psize as i64;
            delta.lsize -= bp.lsize as i64;
        }
        // Unlink from the parent and the origin, then free the MOS objects.
        let mut ddp = self.dir_phys(dir)?;
        let parent = ddp.parent_dir_obj;
        // What the dir held goes from its ancestors' CHILD usage.
        let used = SpaceDelta { dsize: -(ddp.used_bytes as i64), psize: -(ddp.compressed_bytes as i64), lsize: -(ddp.uncompressed_bytes as i64) };
        ddp.used_bytes = 0;
        self.mos.set_bonus(dir, &ddp.encode())?;
        self.dir_diduse(parent, used, false)?;
        let pchild = self.dir_phys(parent)?.child_dir_zapobj;
        let leaf = name.rsplit('/').next().unwrap_or(name).to_string();
        self.mos.zap_remove(pchild, &leaf)?;
        if dp.prev_snap_obj != 0 {
            let mut sp = self.ds_phys(dp.prev_snap_obj)?;
            sp.num_children = sp.num_children.saturating_sub(1);
            if sp.next_clones_obj != 0 {
                self.mos.zap_remove(sp.next_clones_obj, &format!("{ds:x}"))?;
            }
            let od = sp.dir_obj;
            self.mos.set_bonus(dp.prev_snap_obj, &sp.encode())?;
            let odp = self.dir_phys(od)?;
            if odp.clones != 0 {
                self.mos.zap_remove(odp.clones, &format!("{ds:x}"))?;
            }
        }
        let _ = delta;
        self.ds_features_release(ds)?;
        if dp.deadlist_obj != 0 {
            self.deadlist_free(dp.deadlist_obj)?;
        }
        for o in [dp.snapnames_zapobj, ds, ddp.props_zapobj, ddp.child_dir_zapobj, dir] {
            if o != 0 {
                self.mos.free_object(o)?;
            }
        }
        Ok(())
    }
}

/// Every block pointer of an objset born after `mintxg` (its own block, the dnode tree,
/// every object's tree; a block born earlier has no later children).
pub(crate) fn collect_objset_bps(spa: &Arc<Spa>, osbp: &BlockPointer, mintxg: u64, out: &mut Vec<BlockPointer>) -> Result<()> {
    use oxzfs_format::blkptr::BLKPTR_SIZE;
    let os = crate::dmu::Objset::open(spa, osbp)?;
    if osbp.birth <= mintxg {
        return Ok(());
    }
    out.push(osbp.clone());
    let mut stack: Vec<BlockPointer> = Vec::new();
    let mut dn_stack: Vec<DnodePhys> = vec![os.phys.meta_dnode.clone()];
    while let Some(dn) = dn_stack.pop() {
        stack.extend(dn.blkptr.iter().filter(|b| !b.is_hole()).cloned());
        if let Some(sp) = &dn.spill {
            if !sp.is_hole() {
                stack.push(sp.clone());
            }
        }
        while let Some(bp) = stack.pop() {
            if bp.birth <= mintxg {
                continue;
            }
            if !bp.embedded {
                out.push(bp.clone());
            }
            if bp.embedded {
                continue;
            }
            if bp.level > 0 {
                let b = spa.read_bp(&bp)?;
                for i in 0..b.len() / BLKPTR_SIZE {
                    let c = BlockPointer::decode(&b[i * BLKPTR_SIZE..], bp.little_endian).map_err(|e| ZfsError::corrupt("indirect".to_string(), e))?;
                    if !c.is_hole() {
                        stack.push(c);
                    }
                }
            } else if bp.typ == types::DMU_OT_DNODE {
                let b = spa.read_bp(&bp)?;
                let mut i = 0;
                while i + 512 <= b.len() {
                    if b[i] != 0 {
                        if let Ok(d) = DnodePhys::decode(&b[i..], bp.little_endian) {
                            i += d.slots() * 512;
                            dn_stack.push(d);
                            continue;
                        }
                    }
                    i += 512;
                }
            }
        }
    }
    Ok(())
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
        assert_eq!(l.sync_bytes(), l.max / 100 * 20);
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

/// A new pool `name` on one 128 MiB file in a fresh directory (removed by the caller).
#[cfg(test)]
pub(crate) fn test_pool(name: &str) -> (PathBuf, PoolW) {
    let dir = std::env::temp_dir().join(format!("oxzfs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dev = dir.join("d0");
    std::fs::File::create(&dev).unwrap().set_len(128 << 20).unwrap();
    let spec = CreateSpec { name: name.into(), vdevs: vec![(VdevClass::Normal, VdevSpec::File(dev))], ..Default::default() };
    (dir, PoolW::create(&spec, 64 << 20).unwrap())
}

#[cfg(test)]
mod export_tests {
    use super::*;

    /// A pool whose sync failed is suspended: export reports it and leaves the labels active
    /// (at the last synced txg) instead of marking the pool cleanly exported.
    #[test]
    fn suspended_pool_does_not_export_clean() {
        let (dir, mut pw) = test_pool("susp");
        let ds = pw.find_dataset("susp").unwrap().expect("the root dataset");
        let h = PoolHandle::start(pw);
        h.lock_open().suspended = Some("txg sync failed: injected".into());
        let e = h.with_fs(ds, |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("is suspended: txg sync failed: injected"), "{e}");
        let e = h.export().unwrap_err();
        assert!(e.to_string().contains("suspended"), "{e}");
        let scan = crate::spa::scan(&[dir.clone()]);
        assert_eq!(scan.pools.len(), 1, "{:?}", scan.problems);
        assert_eq!(scan.pools[0].pool_state, 0, "labels stay POOL_STATE_ACTIVE");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod arc_tests {
    use super::*;

    /// Blocks a sync writes stay in the ARC: later syncs read back what they rewrite (space
    /// map tails, dnode and indirect blocks, the history object) without one cache miss.
    #[test]
    fn syncs_read_back_written_blocks_from_the_arc() {
        let (dir, mut pw) = test_pool("arcw");
        pw.sync().unwrap();
        let before = pw.spa.arc.stats();
        for i in 0..5 {
            pw.log_history(&format!("zpool set comment=c{i} arcw")).unwrap();
            pw.sync().unwrap();
        }
        let after = pw.spa.arc.stats();
        assert!(after.hits > before.hits, "the syncs read blocks back");
        assert_eq!(after.misses, before.misses, "every block read back was cached when written");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod space_tests {
    use super::*;

    /// A read planned under the lock and finished without it pins the tree it walks, so the
    /// ENOSPC retry does not hand that tree's freed blocks out again meanwhile.
    #[test]
    fn a_planned_read_pins_its_tree() {
        let (dir, mut pw) = test_pool("pin");
        let ds = pw.find_dataset("pin").unwrap().expect("the root dataset");
        pw.sync().unwrap();
        let spa = pw.spa.clone();
        let os = pw.objset(ds).unwrap();
        let r = os.read_later(1, 0, 512).unwrap();
        assert!(matches!(r, crate::dbuf::ReadLater::Clean { .. }), "a clean object is read without the lock");
        assert_eq!(spa.oldest_reader(), Some(os.bp.birth));
        r.finish().unwrap();
        assert_eq!(spa.oldest_reader(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writers racing to fill a small pool: each change passes the space check and is made
    /// in one step, so the pool never holds more dirty data than the check allows — after
    /// every writer met ENOSPC, the state itself still passes the check.
    #[test]
    fn concurrent_writers_cannot_pass_the_space_check_together() {
        let (dir, mut pw) = test_pool("racefill");
        let ds = pw.find_dataset("racefill").unwrap().expect("the root dataset");
        let h = PoolHandle::start(pw);
        // Incompressible bytes (the pool compresses by default).
        let chunk: Vec<u8> = (0..4u64 << 20).map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ (i >> 13) as u8).collect();
        let accepted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let obj = h.with_fs(ds, |os, _| os.alloc_object(types::DMU_OT_PLAIN_FILE_CONTENTS, 128 << 10, 0, 0, 1)).unwrap();
                    for i in 0..64u64 {
                        match h.with_fs_space(ds, chunk.len() as u64, |os, _| os.write(obj, i * chunk.len() as u64, &chunk)) {
                            Ok(()) => {
                                let r = h.lock_open().space_check(0, 0, 1);
                                assert!(r.is_ok(), "writers together overshot the space check: {r:?}");
                                accepted.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed)
                            }
                            Err(ZfsError::Posix(e, _)) if e == libc::ENOSPC => return,
                            Err(e) => panic!("write: {e}"),
                        };
                    }
                    panic!("a 128 MiB pool took 256 MiB from one writer");
                });
            }
        });
        assert!(accepted.into_inner() > 8 << 20, "the pool took some data");
        let g = h.lock();
        let r = g.space_check(0, 0, 1);
        assert!(r.is_ok(), "the writers together overshot the space check: {r:?}");
        drop(g);
        h.sync_now().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
