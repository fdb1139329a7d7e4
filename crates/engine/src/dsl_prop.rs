//! dsl_prop: dataset properties — set (local) and inherited values in each dsl_dir's props
//! ZAP, the features a property value needs, and the effective properties a dataset's writes
//! use (compression, checksum, copies, recordsize, dedup, ...), as dsl_prop.c keeps them.

use crate::spa::SPA_VERSION_DEDUP;
use crate::dbuf::{ObjsetW, OsProps};
use crate::dsl_pool::PoolW;
use crate::{Result, ZfsError};
use oxzfs_format::features::{checksum_feature, compress_feature};

/// The zfs_max_recordsize tunable: the largest recordsize `zfs set` accepts (1M, as in
/// OpenZFS 2.1; up to 16M when set, see `tunables`).
pub fn zfs_max_recordsize() -> u64 {
    crate::tunables::max_recordsize().clamp(128 << 10, crate::dsl::MAX_RECORDSIZE)
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

impl PoolW {
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
    pub(crate) fn prop_feature_activate(&mut self, dsobj: u64, k: &str, v: &str) -> Result<()> {
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
        if ds.contains('@') {
            return self.set_snapshot_prop(ds, k, v);
        }
        let dir = self.find_dir(ds)?.ok_or_else(|| ZfsError::NotFound(format!("cannot open '{ds}': dataset does not exist")))?;
        if crate::dsl_space::is_space_prop(k) {
            let Some(v) = v else { return Err(ZfsError::Invalid(format!("'{k}' property cannot be inherited"))) };
            let crate::dsl::PropStore::Num(n) = crate::dsl::encode_prop(k, v)? else { unreachable!("sizes are numbers") };
            return self.set_space_prop(dir, k, n);
        }
        let props = self.dir_phys(dir)?.props_zapobj;
        // An encryption root's key location (not part of what its MACs cover: the one change
        // an encrypted dataset takes here).
        if k == "keylocation" {
            let key = if self.dir_encrypted(dir)? { self.mos.zap_lookup(dir, crate::dsl_crypt::DD_FIELD_CRYPTO_KEY_OBJ)? } else { None };
            let root = match key {
                Some(obj) => self.mos.zap_lookup(obj, "DSL_CRYPTO_ROOT_DDOBJ")?,
                None => None,
            };
            if root != Some(dir) {
                return Err(ZfsError::Invalid("'keylocation' can only be set on encryption roots".into()));
            }
            if v.is_none() {
                return Err(ZfsError::Invalid("'keylocation' cannot be inherited".into()));
            }
        }
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

    /// A snapshot's own properties: user properties only (`module:name`), kept in the
    /// snapshot's props object (made on the first), as OpenZFS keeps them.
    fn set_snapshot_prop(&mut self, name: &str, k: &str, v: Option<&str>) -> Result<()> {
        if !k.contains(':') {
            return Err(ZfsError::Invalid("this property can not be modified for snapshots".into()));
        }
        let snap = self.find_snapshot(name)?.ok_or_else(|| ZfsError::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
        let mut sp = self.ds_phys(snap)?;
        match v {
            Some(v) => {
                if sp.props_obj == 0 {
                    sp.props_obj = self.mos.create_zap(oxzfs_format::types::DMU_OT_DSL_PROPS, 0, 0, 0)?;
                    self.mos.set_bonus(snap, &sp.encode())?;
                }
                set_prop_in(&mut self.mos, sp.props_obj, k, v)
            }
            None if sp.props_obj != 0 => self.mos.zap_remove(sp.props_obj, k).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Open objsets follow the properties they now have (after a set, inherit or rename).
    pub(crate) fn refresh_open_props(&mut self) -> Result<()> {
        let ids: Vec<u64> = self.datasets.keys().copied().collect();
        for id in ids {
            let d = self.ds_phys(id)?.dir_obj;
            let p = self.effective_props(d)?;
            self.spa.set_cache_policy(id, p.primarycache, p.secondarycache);
            self.datasets.get_mut(&id).expect("listed").os.props = p;
        }
        Ok(())
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
                for name in ["compression", "checksum", "copies", "recordsize", "special_small_blocks", "readonly", "atime", "xattr", "dnodesize", "dedup", "sync", "logbias", "primarycache", "secondarycache", "acltype"] {
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
            sync: found.get("sync").copied().unwrap_or(0).min(2) as u8,
            logbias_throughput: found.get("logbias").copied() == Some(1),
            projects: self.features.contains_key("org.zfsonlinux:project_quota"),
            posix_acl: found.get("acltype").copied() == Some(1),
            primarycache: found.get("primarycache").copied().unwrap_or(2).min(2) as u8,
            secondarycache: found.get("secondarycache").copied().unwrap_or(2).min(2) as u8,
            // dnodesize=auto is 1K (dnodesize_changed_cb); legacy 512.
            dnodesize: match found.get("dnodesize").copied().unwrap_or(0) {
                0 => 512,
                1 => 1024,
                n => n.clamp(512, 16384) as usize,
            },
        })
    }
}
