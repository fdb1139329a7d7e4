//! dsl_userhold: user holds on snapshots (`zfs hold`, `zfs release`, `zfs holds`) and the
//! deferred destroy that waits for them (`zfs destroy -d`), as dsl_userhold.c and
//! dsl_destroy.c keep them. A snapshot's holds are its userrefs ZAP (ds_userrefs_obj, type
//! DMU_OT_USERREFS): tag → the time the hold was placed. A held snapshot cannot be destroyed;
//! one marked DS_FLAG_DEFER_DESTROY goes when its last hold is released or its last clone
//! destroyed.

use crate::dsl::DatasetInfo;
use crate::dsl_pool::PoolW;
use crate::dsl_pool::now;
use crate::spa::Spa;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::DS_FLAG_DEFER_DESTROY;
use oxzfs_format::types;
use std::sync::Arc;

/// SPA_VERSION_USERREFS: holds exist from this pool version on.
pub const SPA_VERSION_USERREFS: u64 = 18;
/// MAXNAMELEN: a tag must not be longer.
const MAXNAMELEN: usize = 256;

/// The holds of snapshot `info`: (tag, time placed), by tag.
pub fn holds(spa: &Arc<Spa>, info: &DatasetInfo) -> Result<Vec<(String, u64)>> {
    if info.ds.userrefs_obj == 0 {
        return Ok(Vec::new());
    }
    let mos = spa.mos();
    let mut v: Vec<(String, u64)> = crate::zap::zap_list(&mos, info.ds.userrefs_obj)?
        .into_iter()
        .map(|e| {
            let t = e.value.get(..8).map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
            (String::from_utf8_lossy(&e.name).into_owned(), t)
        })
        .collect();
    v.sort();
    Ok(v)
}

impl PoolW {
    /// The number of holds on snapshot object `snap`.
    pub(crate) fn userrefs(&mut self, snap: u64) -> Result<usize> {
        let o = self.ds_phys(snap)?.userrefs_obj;
        Ok(if o == 0 { 0 } else { self.mos.zap(o)?.entries.len() })
    }

    fn holds_supported(&self, what: &str) -> Result<()> {
        if self.version < SPA_VERSION_USERREFS {
            return Err(ZfsError::Posix(libc::ENOTSUP, format!("{what}: pool must be upgraded")));
        }
        Ok(())
    }

    /// `zfs hold`: each (snapshot, tag) in one txg, or none (the error names the snapshot).
    pub fn hold(&mut self, holds: &[(String, String)]) -> Result<()> {
        self.holds_supported("cannot hold")?;
        let mut objs = Vec::with_capacity(holds.len());
        for (i, (snap, tag)) in holds.iter().enumerate() {
            let what = format!("cannot hold snapshot '{snap}'");
            let obj = self.find_snapshot(snap)?.ok_or_else(|| ZfsError::Invalid(format!("{what}: dataset does not exist")))?;
            if tag.len() > MAXNAMELEN {
                return Err(ZfsError::Invalid(format!("{what}: tag too long")));
            }
            let uo = self.ds_phys(obj)?.userrefs_obj;
            let dup = holds[..i].iter().any(|(s, t)| s == snap && t == tag);
            if dup || uo != 0 && self.mos.zap_lookup(uo, tag)?.is_some() {
                return Err(ZfsError::Invalid(format!("{what}: tag already exists on this dataset")));
            }
            objs.push(obj);
        }
        let t = now();
        for (obj, (_, tag)) in objs.into_iter().zip(holds) {
            let mut p = self.ds_phys(obj)?;
            if p.userrefs_obj == 0 {
                p.userrefs_obj = self.mos.create_zap(types::DMU_OT_USERREFS, 0, 0, 0)?;
                self.mos.set_bonus(obj, &p.encode())?;
            }
            self.mos.zap_add_u64(p.userrefs_obj, tag, t)?;
        }
        self.sync()
    }

    /// `zfs release`: each (snapshot, tag) in one txg, or none; a snapshot marked for
    /// deferred destroy goes with its last hold (and no clone left).
    pub fn release(&mut self, rels: &[(String, String)]) -> Result<()> {
        self.holds_supported("cannot release")?;
        let mut objs = Vec::with_capacity(rels.len());
        for (snap, tag) in rels {
            let what = format!("cannot release hold from snapshot '{snap}'");
            let obj = self.find_snapshot(snap)?.ok_or_else(|| ZfsError::Invalid(format!("{what}: dataset does not exist")))?;
            let uo = self.ds_phys(obj)?.userrefs_obj;
            if uo == 0 || self.mos.zap_lookup(uo, tag)?.is_none() {
                return Err(ZfsError::Invalid(format!("{what}: no such tag on this dataset")));
            }
            objs.push(obj);
        }
        // A snapshot that goes with its last hold must be free to go before anything changes
        // (dsl_dataset_user_release_check_one: EBUSY).
        for (&obj, (snap, _)) in objs.iter().zip(rels) {
            let p = self.ds_phys(obj)?;
            let releasing = rels.iter().zip(&objs).filter(|(_, &o)| o == obj).map(|((_, t), _)| t).collect::<std::collections::BTreeSet<_>>().len();
            if p.flags & DS_FLAG_DEFER_DESTROY != 0 && p.num_children <= 1 && self.userrefs(obj)? == releasing && self.spa.send_held(obj) {
                return Err(ZfsError::Posix(libc::EBUSY, format!("cannot release hold from snapshot '{snap}': dataset is busy")));
            }
        }
        for (&obj, (_, tag)) in objs.iter().zip(rels) {
            let uo = self.ds_phys(obj)?.userrefs_obj;
            // The same tag twice in one release is one release.
            self.mos.zap_remove(uo, tag)?;
        }
        self.sync()?;
        for (obj, (snap, _)) in objs.into_iter().zip(rels) {
            self.destroy_if_deferred(obj, snap)?;
        }
        Ok(())
    }

    /// `zfs destroy -d fs@snap`: destroyed now when nothing keeps it, else marked to go when
    /// its last hold is released and its last clone destroyed (defer_destroy=on).
    pub fn destroy_snapshot_deferred(&mut self, name: &str) -> Result<()> {
        self.holds_supported(&format!("cannot destroy '{name}'"))?;
        let obj = self.find_snapshot(name)?.ok_or_else(|| ZfsError::Invalid("could not find any snapshots to destroy; check snapshot names.".into()))?;
        let p = self.ds_phys(obj)?;
        if p.num_children <= 1 && self.userrefs(obj)? == 0 {
            return self.destroy_snapshot(name);
        }
        self.refuse_encrypted(p.dir_obj, &format!("cannot destroy '{name}'"))?;
        let mut p = p;
        p.flags |= DS_FLAG_DEFER_DESTROY;
        self.mos.set_bonus(obj, &p.encode())?;
        self.sync()
    }

    /// `zfs destroy -r` of file system `fs` cannot take its snapshots while one is held:
    /// refused before anything goes, naming the held one.
    pub fn refuse_held_snapshots(&mut self, fs: &str) -> Result<()> {
        for s in self.snapshots_after(fs, 0)? {
            let obj = self.find_snapshot(&s)?.ok_or_else(|| ZfsError::NotFound(s.clone()))?;
            if self.userrefs(obj)? > 0 {
                return Err(ZfsError::Posix(libc::EBUSY, format!("cannot destroy snapshot {s}: dataset is busy")));
            }
        }
        Ok(())
    }

    /// A snapshot marked for deferred destroy goes once it has no hold and no clone.
    pub(crate) fn destroy_if_deferred(&mut self, obj: u64, name: &str) -> Result<()> {
        let p = self.ds_phys(obj)?;
        // One a send holds stays marked, to go with its next release or clone's destroy.
        if p.flags & DS_FLAG_DEFER_DESTROY != 0 && p.num_children <= 1 && self.userrefs(obj)? == 0 && !self.spa.send_held(obj) {
            self.destroy_snapshot(name)?;
        }
        Ok(())
    }
}
