//! spa_create: `zpool create` and `zpool add` — the vdev tree from the user's specs (mirror,
//! raidz, special/dedup/log classes, cache and spare devices), the labels, the MOS's first
//! contents (object directory, config, feature objects, root dataset and its file system, the
//! pool's property and history objects) and the per-vdev ZAPs, as spa_create and
//! spa_vdev_add make them. The root file system's ZPL skeleton comes from the caller.

use crate::dsl_pool::now;
use crate::spa::SPA_VERSION_FEATURES;
use crate::spa::TXG_INITIAL;
use crate::spa_feature::DEFAULT_FEATURES;
use crate::spa_feature::OPTIONAL_FEATURES;
use crate::dsl_prop::set_prop_in;
use crate::dbuf::{rand_u64, ObjsetW, OsProps};
use crate::dsl_pool::{DatasetW, PoolW};
use crate::metaslab::{metaslab_shift, Metaslabs};
use crate::spa::Spa;
use crate::vdev::{open_device, BlockDevice, DeviceMap, Vdev};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::dsl::{BpobjPhys, DslDatasetPhys, DslDirPhys, DD_FLAG_USED_BREAKDOWN, DS_FLAG_UNIQUE_ACCURATE};
use oxzfs_format::label::{label_offset, VDEV_LABELS, VDEV_LABEL_END_SIZE, VDEV_LABEL_SIZE, VDEV_LABEL_START_SIZE, VDEV_PHYS_OFFSET};
use oxzfs_format::nvlist::{NvList, NvValue};
use oxzfs_format::objset::{DMU_OST_META, DMU_OST_ZFS};
use oxzfs_format::types;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Smallest device `zpool create` accepts (SPA_MINDEVSIZE).
pub const SPA_MINDEVSIZE: u64 = 64 << 20;

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
    /// Makes the root file system's objects (the ZPL's `zplw::init_fs`); without it, creation
    /// is refused.
    pub fs_init: Option<crate::dbuf::ObjsetInit>,
}

/// Size of a leaf device usable by a vdev: aligned to the label size, minus the labels.
pub(crate) fn leaf_asize(size: u64) -> u64 {
    let osize = size & !(VDEV_LABEL_SIZE - 1);
    osize.saturating_sub(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)
}

pub(crate) struct Leaf {
    path: PathBuf,
    guid: u64,
    dev: Arc<dyn BlockDevice>,
}

/// The config of a new top-level vdev (and its opened leaves), as `zpool create/add` make it.
/// vdev_label_init's first step for a new leaf (created, added, attached): its four labels
/// cleared whole, uberblock rings included. A ring left by an earlier pool (destroyed, or on a
/// reused device) holds uberblocks of txgs past the new pool's, which an import would take
/// for the newest.
pub(crate) fn clear_labels(dev: &dyn BlockDevice) -> Result<()> {
    let blank = vec![0u8; oxzfs_format::label::VDEV_LABEL_SIZE as usize];
    (0..oxzfs_format::label::VDEV_LABELS)
        .try_for_each(|l| dev.write_at(&blank, oxzfs_format::label::label_offset(l, dev.size())))
        .and_then(|_| dev.flush())
        .map_err(|e| ZfsError::Io { device: dev.name(), offset: 0, source: e })
}

pub(crate) fn build_top(pool: &str, id: u64, class: VdevClass, v: &VdevSpec, ashift: u8, txg: u64) -> Result<(NvList, Vec<Leaf>)> {
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
        // vdev_label_init writes the new labels before anything else: a device that cannot
        // take a write (and a flush) is refused here, where the pool's later syncs would
        // pass over it.
        clear_labels(dev.as_ref())?;
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
pub(crate) fn leaf_type(p: &Path) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(p) {
        Ok(m) if m.file_type().is_block_device() => "disk",
        _ => "file",
    }
}

/// The four labels of an aux (cache or spare) device: a config naming only its guid and state.
pub(crate) fn write_aux_labels(dev: &dyn BlockDevice, label: &NvList) -> Result<()> {
    for l in 0..VDEV_LABELS {
        let off = label_offset(l, dev.size()) + VDEV_PHYS_OFFSET;
        let b = oxzfs_format::label::encode_label_config(label, off).map_err(|e| ZfsError::Invalid(format!("label: {e}")))?;
        dev.write_at(&b, off).map_err(|e| ZfsError::Io { device: dev.name(), offset: off, source: e })?;
    }
    dev.flush().map_err(|e| ZfsError::Io { device: dev.name(), offset: 0, source: e })
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

impl PoolW {
    /// `zpool create`: label the devices, build the MOS and the root dataset, sync txg 4.
    pub fn create(spec: &CreateSpec, arc_max: u64) -> Result<PoolW> {
        crate::dsl_crypt::plain_create_props(&spec.name, &spec.fs_props)?;
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
        let mut pw = PoolW::new(spa, mos, ms, TXG_INITIAL, version, &spec.hostname, config);
        pw.config_dirty = true;
        pw.synced_txg = 0;
        pw.fs_init = spec.fs_init.unwrap_or(crate::dbuf::no_objset_init);
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

    pub(crate) fn create_mos_contents(&mut self, spec: &CreateSpec) -> Result<()> {
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
        if v >= crate::dsl_promote::SPA_VERSION_DIR_CLONES {
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
        let fs_props = crate::dsl_crypt::plain_create_props(&spec.name, &spec.fs_props)?;
        let (zpl_asked, fs_props): (Vec<_>, Vec<_>) = fs_props.into_iter().partition(|(k, _)| crate::dsl_dataset::ZPL_CREATE_PROPS.contains(&k.as_str()));
        let zpl = crate::dsl_dataset::zpl_create_props(&spec.name, &zpl_asked, Default::default())?;
        for (k, val) in &fs_props {
            set_prop_in(mos, root_props, k, val)?;
        }
        for (k, val) in &fs_props {
            self.prop_feature_check(k, val, true)?;
            self.prop_feature_activate(root_ds, k, val)?;
        }
        // The root file system. Version-5000 pools compress with lz4 unless told otherwise.
        if v >= SPA_VERSION_FEATURES && !spec.fs_props.iter().any(|(k, _)| k == "compression") && self.features.contains_key("org.illumos:lz4_compress") {
            set_prop_in(&mut self.mos, root_props, "compression", "lz4")?;
        }
        let props = self.effective_props(root_dir)?;
        let mut os = ObjsetW::create(&self.spa, root_ds, DMU_OST_ZFS, props);
        self.accounting_complete(root_ds, &mut os)?;
        (self.fs_init)(&mut os, v, self.txg, &zpl)?;
        self.datasets.insert(root_ds, DatasetW { dsobj: root_ds, os, prev_snap_txg: 1 });
        Ok(())
    }

    /// Per-vdev ZAPs (OpenZFS 0.7+): one per top-level vdev (holding its allocation bias) and
    /// one per leaf, all listed in the MOS's vdev ZAP map; their object numbers go into the
    /// config as com.delphix:vdev_zap_top / _leaf.
    pub(crate) fn create_vdev_zaps(&mut self) -> Result<()> {
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

    /// `zpool add`: new top-level vdevs (any class), cache and spare devices. The caller
    /// reopens the pool afterwards so that the new vdevs take part in allocation.
    pub fn add_vdevs(&mut self, vdevs: &[(VdevClass, VdevSpec)], cache: &[PathBuf], ashift: Option<u8>) -> Result<()> {
        let mut cfg = self.config_nv.clone();
        let mut tree = cfg.get_nvlist("vdev_tree").cloned().unwrap_or_default();
        let mut tops: Vec<NvList> = tree.get_nvlist_array("children").map(|a| a.to_vec()).unwrap_or_default();
        let default_ashift = self.spa.root_vdev.children.iter().map(|c| c.ashift).max().unwrap_or(9);
        // spa_vdev_add: with a removal in progress the new vdevs must have the pool's sector
        // size; with one in progress or done, none may be raidz.
        if let Some(rec) = self.removing_phys()?.filter(|p| p.state == crate::vdev_removal::DSS_SCANNING || p.prev_indirect_vdev != u64::MAX) {
            let removing = rec.state == crate::vdev_removal::DSS_SCANNING;
            if vdevs.iter().any(|(_, v)| matches!(v, VdevSpec::Raidz(..))) || (removing && ashift.is_some_and(|a| a != default_ashift)) {
                return Err(ZfsError::Posix(libc::EINVAL, "invalid config; a pool with removing/removed vdevs does not support adding raidz or dRAID vdevs".into()));
            }
        }
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
    pub(crate) fn add_aux(&mut self, state: u64, key: &str, paths: &[PathBuf]) -> Result<()> {
        let mut list = self.take_aux_list(key)?;
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
        self.put_aux_list(key, list)
    }

    /// The MOS's list of aux devices `key` ("l2cache", "spares"), its object freed: the caller
    /// writes the new list with `put_aux_list` (spa_sync_aux_dev rewrites the whole object).
    pub(crate) fn take_aux_list(&mut self, key: &str) -> Result<Vec<NvList>> {
        let mut list: Vec<NvList> = Vec::new();
        if let Some(obj) = self.mos.zap_lookup(1, key)? {
            let size = u64::from_le_bytes(self.mos.bonus(obj)?.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]));
            let bytes = self.mos.read(obj, 0, size as usize)?;
            if let Ok(nv) = NvList::decode_packed(&bytes) {
                list = nv.get_nvlist_array(key).map(|a| a.to_vec()).unwrap_or_default();
            }
            self.mos.free_object(obj)?;
            self.mos.zap_remove(1, key)?;
        }
        Ok(list)
    }

    /// Write the list of aux devices `key` as a new packed-nvlist object of the MOS.
    pub(crate) fn put_aux_list(&mut self, key: &str, list: Vec<NvList>) -> Result<()> {
        let mut nv = NvList::new();
        nv.insert(key, NvValue::NvListArray(list));
        let packed = nv.encode_xdr();
        let obj = self.mos.alloc_object(types::DMU_OT_PACKED_NVLIST, 16384, types::DMU_OT_PACKED_NVLIST_SIZE, 8, 1)?;
        self.mos.write(obj, 0, &packed)?;
        self.mos.set_bonus(obj, &(packed.len() as u64).to_le_bytes())?;
        self.mos.zap_add_u64(1, key, obj)?;
        Ok(())
    }
}
