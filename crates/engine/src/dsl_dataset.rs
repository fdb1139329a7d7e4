//! dsl_dataset: datasets by name (the dsl_dir tree from the root dir's child ZAPs), their
//! creation (dsl_dir + dsl_dataset objects, props, a new objset, optionally from an origin
//! snapshot) and their destruction (blocks freed or deadlisted, objects removed), as
//! dsl_dataset.c and dsl_dir.c do them. The objset's own skeleton (for a file system, the ZPL's
//! master node and root directory) comes from the caller, as dmu_objset_create's callback.

use crate::dsl_pool::now;
use crate::dsl_prop::set_prop_in;
use crate::dbuf::{rand_u64, ObjsetW, SpaceDelta, ZplProps};
use crate::dsl_pool::{DatasetW, PoolW};
use crate::metaslab::dsize_of;
use crate::spa::Spa;
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::dsl::{DslDatasetPhys, DslDirPhys, DD_FLAG_USED_BREAKDOWN, DS_FLAG_UNIQUE_ACCURATE};
use oxzfs_format::objset::DMU_OST_ZFS;
use oxzfs_format::types;
use std::sync::Arc;

/// Every block pointer of an objset born after `mintxg` (its own block, the dnode tree,
/// every object's tree, the accounting objects' trees; a block born earlier has no later
/// children).
pub(crate) fn collect_objset_bps(spa: &Arc<Spa>, osbp: &BlockPointer, mintxg: u64, out: &mut Vec<BlockPointer>) -> Result<()> {
    use oxzfs_format::blkptr::BLKPTR_SIZE;
    let os = crate::dmu::Objset::open(spa, osbp)?;
    if osbp.birth <= mintxg {
        return Ok(());
    }
    out.push(osbp.clone());
    let mut stack: Vec<BlockPointer> = Vec::new();
    // The meta dnode's tree, and the user/group/project accounting objects' (objset_phys's own
    // dnodes, outside the meta dnode's array).
    let mut dn_stack: Vec<DnodePhys> = vec![os.phys.meta_dnode.clone()];
    dn_stack.extend([&os.phys.userused_dnode, &os.phys.groupused_dnode, &os.phys.projectused_dnode].into_iter().flatten().cloned());
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

impl PoolW {
    /// The writable objset of dataset `dsobj` (opened on first use).
    pub fn objset(&mut self, dsobj: u64) -> Result<&mut ObjsetW> {
        if !self.datasets.contains_key(&dsobj) {
            let p = DslDatasetPhys::decode(&self.mos.bonus(dsobj)?, true).map_err(|e| ZfsError::corrupt(format!("dataset {dsobj}"), e))?;
            // A clone with a livelist (OpenZFS 2.x) would need it kept in step with every
            // block born and freed: such a clone stays read-only.
            self.refuse_livelist(dsobj, p.dir_obj)?;
            // An encrypted dataset's blocks would need encrypting, and its objset its MACs:
            // oxzfs reads such datasets (their keys loaded) and leaves them as they are.
            if p.bp.encrypted {
                return Err(ZfsError::Unsupported(format!("dataset {dsobj} is encrypted: oxzfs reads encrypted datasets but does not write them")));
            }
            let props = self.effective_props(p.dir_obj)?;
            let os = ObjsetW::open(&self.spa, dsobj, &p.bp, props)?;
            self.datasets.insert(dsobj, DatasetW { dsobj, os, prev_snap_txg: p.prev_snap_txg });
        }
        Ok(&mut self.datasets.get_mut(&dsobj).expect("inserted").os)
    }

    /// Whether DSL directory `dir` is an encrypted dataset's (it names a DSL crypto key).
    pub fn dir_encrypted(&mut self, dir: u64) -> Result<bool> {
        // A directory with no extra fields is a plain DSL_DIR object, not a ZAP.
        if self.mos.dnode(dir)?.typ == types::DMU_OT_DSL_DIR {
            return Ok(false);
        }
        Ok(self.mos.zap_lookup(dir, crate::dsl_crypt::DD_FIELD_CRYPTO_KEY_OBJ)?.is_some())
    }

    /// Refuse a change to the encrypted dataset of directory `dir` (`what`: "cannot destroy
    /// 'pool/fs'"): its blocks, objset MACs, key objects and IV set guids would need its keys
    /// and writing, which oxzfs does not do. The pool's other datasets stay writable.
    pub fn refuse_encrypted(&mut self, dir: u64, what: &str) -> Result<()> {
        if self.dir_encrypted(dir)? {
            return Err(ZfsError::Posix(libc::EROFS, format!("{what}: encrypted datasets are read-only in oxzfs")));
        }
        Ok(())
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
        let plain = crate::dsl_crypt::plain_create_props(name, props)?;
        // casesensitivity, normalization and utf8only go to the new file system's master node.
        let (zpl_asked, plain): (Vec<_>, Vec<_>) = plain.into_iter().partition(|(k, _)| ZPL_CREATE_PROPS.contains(&k.as_str()));
        let props = &plain[..];
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
        // A child of an encrypted dataset would be encrypted under its encryption root.
        self.refuse_encrypted(pdir, &format!("cannot create '{name}'"))?;
        if let Some(o) = origin {
            let odir = self.ds_phys(o)?.dir_obj;
            self.refuse_encrypted(odir, &format!("cannot create '{name}'"))?;
        }
        // Inherited from the parent file system's master node, where it can be read (not that
        // of an encrypted parent whose key is not loaded: the defaults then).
        let inherited = match self.find_dataset(parent)? {
            Some(pds) if origin.is_none() => {
                let read = |pos: &mut ObjsetW| -> Result<ZplProps> {
                    Ok(ZplProps {
                        casesensitivity: pos.zap_lookup(1, "casesensitivity")?.unwrap_or(0),
                        normalization: pos.zap_lookup(1, "normalization")?.unwrap_or(0),
                        utf8only: pos.zap_lookup(1, "utf8only")?.unwrap_or(0) != 0,
                    })
                };
                self.objset(pds).and_then(read).unwrap_or_default()
            }
            _ => ZplProps::default(),
        };
        let zpl = zpl_create_props(name, &zpl_asked, inherited)?;
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
            if v >= crate::dsl_promote::SPA_VERSION_DIR_CLONES {
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
                self.accounting_complete(ds, &mut os)?;
                (self.fs_init)(&mut os, v, txg, &zpl)?;
                self.datasets.insert(ds, DatasetW { dsobj: ds, os, prev_snap_txg: 1 });
            }
        }
        for (k, val) in props {
            self.prop_feature_activate(ds, k, val)?;
        }
        self.create_space_props(name, dd, requested)?;
        Ok(ds)
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
        self.refuse_encrypted(dir, &format!("cannot destroy '{name}'"))?;
        // Free the objset's blocks (all born after the origin), its intent log's first.
        self.release_reservations(dir)?;
        self.zil_destroy(ds)?;
        self.sync()?;
        self.datasets.remove(&ds);
        self.spa.scan.ds_destroyed(ds, None);
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
        self.destroy_bookmarks_of(ds)?;
        self.ds_features_release(ds)?;
        if dp.deadlist_obj != 0 {
            self.deadlist_free(dp.deadlist_obj)?;
        }
        // A directory whose snapshots had clones keeps their list (dd_clones), empty by now.
        for o in [dp.snapnames_zapobj, ds, ddp.props_zapobj, ddp.child_dir_zapobj, ddp.clones, dir] {
            if o != 0 {
                self.mos.free_object(o)?;
            }
        }
        // An origin marked for deferred destroy goes with its last clone.
        if dp.prev_snap_obj != 0 && self.ds_phys(dp.prev_snap_obj)?.flags & oxzfs_format::dsl::DS_FLAG_DEFER_DESTROY != 0 {
            let origin = self.snapshot_full_name(dp.prev_snap_obj)?;
            self.destroy_if_deferred(dp.prev_snap_obj, &origin)?;
        }
        Ok(())
    }

    pub(crate) fn dir_phys(&mut self, dir: u64) -> Result<DslDirPhys> {
        DslDirPhys::decode(&self.mos.bonus(dir)?, true).map_err(|e| ZfsError::corrupt(format!("dsl dir {dir}"), e))
    }

    pub(crate) fn ds_phys(&mut self, ds: u64) -> Result<DslDatasetPhys> {
        DslDatasetPhys::decode(&self.mos.bonus(ds)?, true).map_err(|e| ZfsError::corrupt(format!("dataset {ds}"), e))
    }
}

/// The properties a file system takes at creation into its master node rather than the DSL.
pub(crate) const ZPL_CREATE_PROPS: [&str; 3] = ["casesensitivity", "normalization", "utf8only"];

/// zfs_fill_zplprops and libzfs's checks: the values asked for (`asked`: pairs of
/// [`ZPL_CREATE_PROPS`]), the rest as `inherited` has them (the parent file system's);
/// a normalization asks for utf8only=on, and refuses utf8only=off.
pub(crate) fn zpl_create_props(name: &str, asked: &[(String, String)], inherited: ZplProps) -> Result<ZplProps> {
    let mut z = inherited;
    let bad = |p: &str, values: &str| ZfsError::Invalid(format!("cannot create '{name}': '{p}' must be one of '{values}'"));
    let (mut norm_asked, mut utf8_asked) = (None, None);
    for (k, v) in asked {
        match k.as_str() {
            "casesensitivity" => {
                z.casesensitivity = match v.as_str() {
                    "sensitive" => 0,
                    "insensitive" => 1,
                    "mixed" => 2,
                    _ => return Err(bad(k, "sensitive | insensitive | mixed")),
                }
            }
            "normalization" => {
                use oxzfs_format::zap::{U8_TEXTPREP_NFC, U8_TEXTPREP_NFD, U8_TEXTPREP_NFKC, U8_TEXTPREP_NFKD};
                let n = match v.as_str() {
                    "none" => 0,
                    "formC" => U8_TEXTPREP_NFC,
                    "formD" => U8_TEXTPREP_NFD,
                    "formKC" => U8_TEXTPREP_NFKC,
                    "formKD" => U8_TEXTPREP_NFKD,
                    _ => return Err(bad(k, "none | formC | formD | formKC | formKD")),
                };
                z.normalization = n;
                norm_asked = Some(n);
            }
            _ => {
                let u = match v.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad(k, "on | off")),
                };
                z.utf8only = u;
                utf8_asked = Some(u);
            }
        }
    }
    match (norm_asked, utf8_asked) {
        (Some(n), None) if n != 0 => z.utf8only = true,
        (Some(n), Some(false)) if n != 0 => return Err(ZfsError::Invalid(format!("cannot create '{name}': 'utf8only' must be set 'on' if normalization chosen"))),
        _ => {}
    }
    Ok(z)
}
