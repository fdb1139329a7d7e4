//! dsl_snapshot: `zfs snapshot` — a new snapshot dsl_dataset taken from a head, as
//! dsl_dataset_snapshot_sync_impl makes it.
//!
//! ```text
//!   before:  prev ──next──► head (deadlist D, prev_snap_txg P, unique U)
//!   after:   prev ──next──► snap ──next──► head
//!            snap: the head's bp, referenced/compressed/uncompressed, flags; deadlist D;
//!                  prev_snap_obj/txg the head's old ones; creation txg T; unique 0
//!            head: prev_snap_obj = snap, prev_snap_txg = T, unique 0, a new deadlist with an
//!                  empty entry per key of D and one for P (dsl_deadlist_clone + add_key;
//!                  an old-format deadlist is just a new empty bpobj)
//!            head.snapnames_zapobj: name → snap; the snapshot counts the head's per-dataset
//!            features. A clone's first snapshot takes the head's place in its origin's
//!            next_clones.
//! ```
//!
//! A command holds the pool's sync lock: everything dirty is synced first, so the head's bp
//! is the one on disk and no block of the head is born in the snapshot's txg; the snapshots of
//! one command are made in one txg, which is synced before the command returns.

use crate::dsl_pool::{now, PoolW};
use crate::dsl_prop::set_prop_in;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::{DslDatasetPhys, DD_USED_REFRSRV, DS_FLAG_UNIQUE_ACCURATE};
use oxzfs_format::types;

/// Why a snapshot name is refused (zfs_namecheck's messages), or None.
pub fn snapshot_name_error(full: &str) -> Option<String> {
    if full.len() >= 256 {
        return Some("name is too long".into());
    }
    let (fs, snap) = full.split_once('@')?;
    if snap.contains('@') || snap.contains('#') {
        return Some("multiple '@' and/or '#' delimiters in name".into());
    }
    if snap.is_empty() || fs.is_empty() || fs.split('/').any(|c| c.is_empty()) {
        return Some("empty component or misplaced '@' or '#' delimiter in name".into());
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || "_-:. ".contains(c);
    if let Some(c) = fs.chars().chain(snap.chars()).find(|&c| !ok(c) && c != '/') {
        return Some(format!("invalid character '{c}' in name"));
    }
    if let Some(c) = snap.chars().find(|&c| !ok(c)) {
        return Some(format!("invalid character '{c}' in name"));
    }
    None
}


impl PoolW {
    /// Free every one of `bps` in `txg`: the (negative) space change.
    fn free_all(&mut self, bps: &[oxzfs_format::blkptr::BlockPointer], txg: u64) -> Result<crate::dbuf::SpaceDelta> {
        let root = self.spa.root_vdev.clone();
        let mut d = crate::dbuf::SpaceDelta::default();
        for bp in bps {
            d.dsize -= crate::metaslab::dsize_of(&root, bp) as i64;
            d.psize -= bp.psize as i64;
            d.lsize -= bp.lsize as i64;
            self.free_bp(bp, txg)?;
        }
        Ok(d)
    }

    /// The snapshot object named `name` ("fs@snap"), or None.
    pub fn find_snapshot(&mut self, name: &str) -> Result<Option<u64>> {
        let Some((fs, snap)) = name.split_once('@') else { return Ok(None) };
        let Some(head) = self.find_dataset(fs)? else { return Ok(None) };
        let names = self.ds_phys(head)?.snapnames_zapobj;
        if names == 0 {
            return Ok(None);
        }
        self.mos.zap_lookup(names, snap)
    }

    /// `zfs snapshot`: snapshots `names` ("fs@snap", checked by the caller for their form)
    /// in one txg, each with the user properties `props`; nothing is made when one fails
    /// (the error names it).
    pub fn snapshot(&mut self, names: &[String], props: &[(String, String)]) -> Result<()> {
        let mut heads = Vec::new();
        for n in names {
            let (fs, snap) = n.split_once('@').ok_or_else(|| ZfsError::Invalid(format!("cannot create snapshot '{n}': missing '@' delimiter in snapshot name")))?;
            let head = self.find_dataset(fs)?.ok_or_else(|| ZfsError::NotFound(format!("cannot create snapshot '{n}': dataset does not exist")))?;
            if self.find_snapshot(n)?.is_some() {
                return Err(ZfsError::Invalid(format!("cannot create snapshot '{n}': dataset already exists")));
            }
            if heads.iter().any(|&(h, _): &(u64, &str)| h == head) {
                return Err(ZfsError::Invalid("cannot create snapshots : multiple snapshots of same fs not allowed".into()));
            }
            let dir = self.ds_phys(head)?.dir_obj;
            self.refuse_encrypted(dir, &format!("cannot create snapshot '{n}'"))?;
            heads.push((head, snap));
        }
        // zil_suspend: a head's intent log is emptied by the sync below (its changes are then
        // in the tree), so the snapshot does not share its chain. A log left by a crash and
        // not replayed cannot be: the snapshot is refused.
        for &(head, _) in &heads {
            let os = self.objset(head)?;
            if os.zil.foreign {
                return Err(ZfsError::Unavailable(format!("cannot create snapshot of dataset {head}: its intent log was not replayed (import the pool read-write to replay it)")));
            }
            os.zil.close();
        }
        // The heads as on disk, then the snapshots in the next txg.
        self.sync()?;
        let txg = self.txg;
        for (head, snap) in heads {
            self.snapshot_one(head, snap, txg, props)?;
        }
        self.sync()
    }

    /// dsl_dataset_snapshot_sync_impl for head `ds` in txg `crtxg`.
    fn snapshot_one(&mut self, ds: u64, name: &str, crtxg: u64, props: &[(String, String)]) -> Result<()> {
        let mut hp = self.ds_phys(ds)?;
        let dir = hp.dir_obj;
        let mos = &mut self.mos;
        let snap = mos.alloc_object(types::DMU_OT_DSL_DATASET, 512, types::DMU_OT_DSL_DATASET, 320, 1)?;
        let props_obj = if props.is_empty() {
            0
        } else {
            let o = mos.create_zap(types::DMU_OT_DSL_PROPS, 0, 0, 0)?;
            for (k, v) in props {
                set_prop_in(mos, o, k, v)?;
            }
            o
        };
        let sp = DslDatasetPhys {
            dir_obj: dir,
            prev_snap_obj: hp.prev_snap_obj,
            prev_snap_txg: hp.prev_snap_txg,
            next_snap_obj: ds,
            snapnames_zapobj: 0,
            num_children: 1,
            creation_time: now(),
            creation_txg: crtxg,
            deadlist_obj: hp.deadlist_obj,
            referenced_bytes: hp.referenced_bytes,
            compressed_bytes: hp.compressed_bytes,
            uncompressed_bytes: hp.uncompressed_bytes,
            unique_bytes: 0,
            fsid_guid: crate::dbuf::rand_u64() >> 8,
            guid: crate::dbuf::rand_u64(),
            flags: hp.flags,
            bp: hp.bp.clone(),
            next_clones_obj: 0,
            props_obj,
            userrefs_obj: 0,
        };
        mos.set_bonus(snap, &sp.encode())?;
        self.spa.scan.ds_snapshotted(ds, snap);
        for f in self.ds_features(ds)? {
            self.ds_feature_activate(snap, &f)?;
        }
        if hp.prev_snap_obj != 0 {
            let mut pp = self.ds_phys(hp.prev_snap_obj)?;
            if pp.next_snap_obj == ds {
                pp.next_snap_obj = snap;
                self.mos.set_bonus(hp.prev_snap_obj, &pp.encode())?;
            } else if pp.next_clones_obj != 0 {
                self.mos.zap_remove(pp.next_clones_obj, &format!("{ds:x}"))?;
                self.mos.zap_add_u64(pp.next_clones_obj, &format!("{snap:x}"), snap)?;
            }
        }
        // A refreservation is charged in full once the unique bytes go to zero.
        let res = self.local_num(dir, "refreservation")?;
        if res > 0 {
            let d = hp.unique_bytes.min(res) as i64;
            self.dir_transfer(dir, d, 0, 0, d, DD_USED_REFRSRV, DD_USED_REFRSRV)?;
        }
        let dl = self.deadlist_clone(hp.deadlist_obj, u64::MAX, hp.prev_snap_obj)?;
        self.deadlist_add_key(dl, hp.prev_snap_txg)?;
        hp.deadlist_obj = dl;
        hp.prev_snap_obj = snap;
        hp.prev_snap_txg = crtxg;
        hp.unique_bytes = 0;
        if self.version >= 9 {
            hp.flags |= DS_FLAG_UNIQUE_ACCURATE;
        }
        self.mos.set_bonus(ds, &hp.encode())?;
        self.mos.zap_add_u64(hp.snapnames_zapobj, name, snap)?;
        if let Some(d) = self.datasets.get_mut(&ds) {
            d.prev_snap_txg = crtxg;
        }
        Ok(())
    }
}

impl PoolW {
    /// `zfs destroy fs@snap` (dsl_destroy_snapshot_sync_impl): the blocks only this snapshot
    /// held are freed, its deadlist merges into the next one's, and the accounting of its
    /// neighbours follows. A snapshot with clones or holds is refused.
    pub fn destroy_snapshot(&mut self, name: &str) -> Result<()> {
        let obj = self.find_snapshot(name)?.ok_or_else(|| ZfsError::Invalid("could not find any snapshots to destroy; check snapshot names.".into()))?;
        let sp = self.ds_phys(obj)?;
        self.refuse_encrypted(sp.dir_obj, &format!("cannot destroy '{name}'"))?;
        if sp.num_children > 1 {
            return Err(ZfsError::Invalid(format!("cannot destroy '{name}': snapshot has dependent clones\nuse '-R' to destroy the following datasets:")));
        }
        if self.spa.send_held(obj) || sp.userrefs_obj != 0 && !self.mos.zap(sp.userrefs_obj)?.entries.is_empty() {
            return Err(ZfsError::Posix(libc::EBUSY, format!("cannot destroy snapshot {name}: dataset is busy")));
        }
        self.sync()?;
        let sp = self.ds_phys(obj)?;
        let txg = self.txg;
        let dir = sp.dir_obj;
        self.ds_features_release(obj)?;
        // The previous snapshot (or the origin, past a branch point) lets go of us.
        let mut after_branch_point = false;
        let mut prev = None;
        if sp.prev_snap_obj != 0 {
            let mut pp = self.ds_phys(sp.prev_snap_obj)?;
            after_branch_point = pp.next_snap_obj != obj;
            if after_branch_point && pp.next_clones_obj != 0 {
                self.mos.zap_remove(pp.next_clones_obj, &format!("{obj:x}"))?;
                if sp.next_snap_obj != 0 {
                    self.mos.zap_add_u64(pp.next_clones_obj, &format!("{:x}", sp.next_snap_obj), sp.next_snap_obj)?;
                }
            }
            if !after_branch_point {
                pp.next_snap_obj = sp.next_snap_obj;
            }
            self.mos.set_bonus(sp.prev_snap_obj, &pp.encode())?;
            prev = Some(sp.prev_snap_obj);
        }
        let next = sp.next_snap_obj;
        self.spa.scan.ds_destroyed(obj, Some(next));
        let mut np = self.ds_phys(next)?;
        let old_unique = np.unique_bytes;
        np.prev_snap_obj = sp.prev_snap_obj;
        np.prev_snap_txg = sp.prev_snap_txg;
        self.mos.set_bonus(next, &np.encode())?;
        let root = self.spa.root_vdev.clone();
        let freed;
        if self.deadlist_oldfmt(np.deadlist_obj)? {
            // process_old_deadlist: next's dead blocks born before us join our deadlist, the
            // rest were ours alone; then the deadlists swap.
            let mut bps = Vec::new();
            self.bpobj_read_all(np.deadlist_obj, 0, &mut bps)?;
            let (keep, gone): (Vec<_>, Vec<_>) = bps.into_iter().partition(|b| b.birth <= sp.prev_snap_txg);
            if let (Some(p), false) = (prev, after_branch_point) {
                let mut pp = self.ds_phys(p)?;
                let more: u64 = keep.iter().filter(|b| b.birth > pp.prev_snap_txg).map(|b| crate::metaslab::dsize_of(&root, b)).sum();
                pp.unique_bytes += more;
                self.mos.set_bonus(p, &pp.encode())?;
            }
            self.deadlist_insert(sp.deadlist_obj, &keep)?;
            let mut np = self.ds_phys(next)?;
            let old_dl = np.deadlist_obj;
            np.deadlist_obj = sp.deadlist_obj;
            self.mos.set_bonus(next, &np.encode())?;
            self.bpobj_free(old_dl)?;
            freed = gone;
        } else {
            if let (Some(p), false) = (prev, after_branch_point) {
                let mut pp = self.ds_phys(p)?;
                let d = self.deadlist_space_range(np.deadlist_obj, pp.prev_snap_txg, sp.prev_snap_txg)?;
                pp.unique_bytes += d.dsize as u64;
                self.mos.set_bonus(p, &pp.encode())?;
            }
            let (gone, _) = self.deadlist_take_from(np.deadlist_obj, sp.prev_snap_txg)?;
            self.deadlist_merge_free(np.deadlist_obj, sp.deadlist_obj)?;
            freed = gone;
        }
        // What only we held is freed: out of the dir's SNAP usage.
        let used = self.free_all(&freed, txg)?;
        self.dir_transfer(dir, used.dsize, used.psize, used.lsize, used.dsize, oxzfs_format::dsl::DD_USED_SNAP, oxzfs_format::dsl::DD_USED_SNAP)?;
        let head = self.dir_phys(dir)?.head_dataset_obj;
        let mut np = self.ds_phys(next)?;
        if next != head {
            // Next's unique gains what only we and it held: born after our prev, dead after it.
            let nn = self.ds_phys(np.next_snap_obj)?;
            if !self.deadlist_oldfmt(nn.deadlist_obj)? {
                let d = self.deadlist_space_range(nn.deadlist_obj, sp.prev_snap_txg, sp.creation_txg)?;
                np.unique_bytes += d.dsize as u64;
            } else {
                let mut bps = Vec::new();
                self.bpobj_read_all(nn.deadlist_obj, 0, &mut bps)?;
                np.unique_bytes += bps.iter().filter(|b| b.birth > sp.prev_snap_txg && b.birth <= sp.creation_txg).map(|b| crate::metaslab::dsize_of(&root, b)).sum::<u64>();
            }
            self.mos.set_bonus(next, &np.encode())?;
            let hdl = self.ds_phys(head)?.deadlist_obj;
            self.deadlist_remove_key(hdl, sp.creation_txg)?;
        } else {
            // dsl_dataset_recalc_head_uniq.
            let mrs = match prev {
                Some(p) => self.ds_phys(p)?.referenced_bytes,
                None => 0,
            };
            let dl_used = if self.deadlist_oldfmt(np.deadlist_obj)? {
                self.bpobj_space(np.deadlist_obj)?.dsize as u64
            } else {
                u64::from_le_bytes(self.mos.bonus(np.deadlist_obj)?[0..8].try_into().expect("8 bytes"))
            };
            np.unique_bytes = (np.referenced_bytes + dl_used).saturating_sub(mrs);
            self.mos.set_bonus(next, &np.encode())?;
            let res = self.local_num(dir, "refreservation")?;
            if old_unique < res {
                let d = (np.unique_bytes.saturating_sub(old_unique)).min(res - old_unique) as i64;
                self.dir_transfer(dir, -d, 0, 0, -d, DD_USED_REFRSRV, DD_USED_REFRSRV)?;
            }
            if let Some(d) = self.datasets.get_mut(&next) {
                d.prev_snap_txg = sp.prev_snap_txg;
            }
        }
        // Out of the namespace; the objects go.
        let names = self.ds_phys(head)?.snapnames_zapobj;
        let snapname = name.split_once('@').map(|(_, s)| s).unwrap_or(name);
        self.mos.zap_remove(names, snapname)?;
        for o in [sp.next_clones_obj, sp.props_obj, sp.userrefs_obj, obj] {
            if o != 0 {
                self.mos.free_object(o)?;
            }
        }
        self.sync()
    }
}

impl PoolW {
    /// The snapshots of file system `fs` newer than snapshot object `snap`, newest first.
    pub fn snapshots_after(&mut self, fs: &str, snap: u64) -> Result<Vec<String>> {
        let head = self.find_dataset(fs)?.ok_or_else(|| ZfsError::Invalid(format!("cannot open '{fs}': dataset does not exist")))?;
        let hp = self.ds_phys(head)?;
        let names: std::collections::HashMap<u64, String> =
            self.mos.zap(hp.snapnames_zapobj)?.entries.iter().filter_map(|(k, (_, v))| v.first().map(|&o| (o, String::from_utf8_lossy(k).into_owned()))).collect();
        let mut out = Vec::new();
        let mut cur = hp.prev_snap_obj;
        while cur != 0 && cur != snap && out.len() < 1 << 20 {
            let Some(n) = names.get(&cur) else { break };
            out.push(format!("{fs}@{n}"));
            cur = self.ds_phys(cur)?.prev_snap_obj;
        }
        Ok(out)
    }

    /// `zfs rollback fs@snap` to the file system's latest snapshot (the caller destroys the
    /// newer ones first and unmounts the file system): the head becomes the snapshot again —
    /// its blocks born since are freed, what its deadlist kept is its own again (SNAP → HEAD),
    /// the snapshot's unique bytes go to zero — the end state of dsl_dataset_rollback_sync's
    /// clone-and-swap.
    pub fn rollback(&mut self, name: &str) -> Result<()> {
        let (fs, _) = name.split_once('@').ok_or_else(|| ZfsError::Invalid(format!("cannot open '{name}': operation only applies to snapshots")))?;
        let snap = self.find_snapshot(name)?.ok_or_else(|| ZfsError::Invalid(format!("cannot open '{name}': dataset does not exist")))?;
        let head = self.find_dataset(fs)?.expect("the snapshot's file system exists");
        let dir = self.ds_phys(head)?.dir_obj;
        self.refuse_encrypted(dir, &format!("cannot rollback to '{name}'"))?;
        // The head's intent log goes with the state it logs (zil_destroy).
        self.zil_destroy(head)?;
        self.sync()?;
        let mut hp = self.ds_phys(head)?;
        if hp.prev_snap_obj != snap {
            return Err(ZfsError::Invalid(format!("cannot rollback to '{name}': more recent snapshots or bookmarks exist")));
        }
        self.datasets.remove(&head);
        let mut sp = self.ds_phys(snap)?;
        let dir = hp.dir_obj;
        let root = self.spa.root_vdev.clone();
        let txg = self.txg;
        // The head's own blocks (born after the snapshot) are freed.
        let mut freed = Vec::new();
        if !hp.bp.is_hole() && hp.bp != sp.bp {
            crate::dsl_dataset::collect_objset_bps(&self.spa, &hp.bp, hp.prev_snap_txg, &mut freed)?;
        }
        let gone = self.free_all(&freed, txg)?;
        self.ds_diduse(dir, hp.unique_bytes, &gone)?;
        // What the head's deadlist kept is the head's again.
        let ddp = self.dir_phys(dir)?;
        let origin_txg = if ddp.origin_obj != 0 { self.ds_phys(ddp.origin_obj)?.creation_txg } else { 0 };
        let mut dead = Vec::new();
        if self.deadlist_oldfmt(hp.deadlist_obj)? {
            self.bpobj_read_all(hp.deadlist_obj, 0, &mut dead)?;
        } else {
            for (_, obj) in self.deadlist_entries(hp.deadlist_obj)? {
                self.bpobj_read_all(obj, 0, &mut dead)?;
            }
        }
        let back: i64 = dead.iter().filter(|b| b.birth > origin_txg).map(|b| crate::metaslab::dsize_of(&root, b) as i64).sum();
        if back != 0 {
            self.dir_transfer(dir, 0, 0, 0, back, oxzfs_format::dsl::DD_USED_SNAP, oxzfs_format::dsl::DD_USED_HEAD)?;
        }
        let dl = self.deadlist_clone(hp.deadlist_obj, u64::MAX, hp.prev_snap_obj)?;
        self.deadlist_free(hp.deadlist_obj)?;
        hp.deadlist_obj = dl;
        hp.bp = sp.bp.clone();
        hp.referenced_bytes = sp.referenced_bytes;
        hp.compressed_bytes = sp.compressed_bytes;
        hp.uncompressed_bytes = sp.uncompressed_bytes;
        hp.unique_bytes = 0;
        self.mos.set_bonus(head, &hp.encode())?;
        sp.unique_bytes = 0;
        self.mos.set_bonus(snap, &sp.encode())?;
        self.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::snapshot_name_error;

    #[test]
    fn names_as_zfs_namecheck_says() {
        assert_eq!(snapshot_name_error("tank/a@s1"), None);
        assert_eq!(snapshot_name_error("tank/a@x@y").as_deref(), Some("multiple '@' and/or '#' delimiters in name"));
        assert_eq!(snapshot_name_error("tank/a@").as_deref(), Some("empty component or misplaced '@' or '#' delimiter in name"));
        assert_eq!(snapshot_name_error("tank/a@b%c").as_deref(), Some("invalid character '%' in name"));
        assert_eq!(snapshot_name_error("tank/a@b/c").as_deref(), Some("invalid character '/' in name"));
        assert!(snapshot_name_error(&format!("tank@{}", "x".repeat(260))).is_some());
    }
}
