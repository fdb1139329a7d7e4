//! dsl_promote: `zfs promote`, as dsl_dataset_promote_check/sync do it. A clone takes over
//! its origin's snapshots up to and including the origin, and the old origin file system
//! becomes a clone of the (moved) origin snapshot. No block moves: the snapshots change
//! directory, the origin and clone links swap, and the space the moved snapshots hold goes
//! from one directory's accounting to the other's.
//!
//! Names follow dsl_dataset.c: the *shared* snapshots are the origin file system's from the
//! origin snapshot back to where that file system itself began (they move); the *clone*
//! snapshots are the clone's own, its head first, back to the origin; the *origin* snapshots
//! are the origin file system's newer than the origin, its head first (they stay).

use crate::dbuf::SpaceDelta;
use crate::dsl_pool::PoolW;
use crate::metaslab::dsize_of;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::{DD_FLAG_USED_BREAKDOWN, DD_USED_HEAD, DD_USED_SNAP, DS_FLAG_NOPROMOTE};
use oxzfs_format::types;

/// SPA_VERSION_DIR_CLONES: from this version each dsl_dir lists its clones (dd_clones).
pub(crate) const SPA_VERSION_DIR_CLONES: u64 = 26;
/// DD_FIELD_LIVELIST and its feature.
const DD_FIELD_LIVELIST: &str = "com.delphix:livelist";
const LIVELIST_FEATURE: &str = "com.delphix:livelist";
/// MAXNAMELEN: a snapshot's full name must stay shorter.
const MAXNAMELEN: usize = 256;

/// snaplist_make: the datasets from `last` back along ds_prev_snap_obj, `last` first, up to
/// and without `first` (with `first` 0: up to where `last`'s directory began).
fn snaplist(w: &mut PoolW, first: u64, last: u64) -> Result<Vec<u64>> {
    let mut first = first;
    let mut out = Vec::new();
    let mut obj = last;
    while obj != first {
        if obj == 0 || out.len() > 1 << 20 {
            return Err(ZfsError::Invalid(format!("dataset {last}: its snapshot chain does not reach object {first}")));
        }
        let p = w.ds_phys(obj)?;
        if first == 0 {
            first = w.dir_phys(p.dir_obj)?.origin_obj;
        }
        out.push(obj);
        obj = p.prev_snap_obj;
    }
    Ok(out)
}

impl PoolW {
    /// dsl_deadlist_space: all that deadlist `dl` holds.
    fn deadlist_space(&mut self, dl: u64) -> Result<SpaceDelta> {
        if self.deadlist_oldfmt(dl)? {
            return self.bpobj_space(dl);
        }
        let h = self.mos.bonus(dl)?;
        let w = |i: usize| h.get(i * 8..i * 8 + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as i64);
        Ok(SpaceDelta { dsize: w(0), psize: w(1), lsize: w(2) })
    }

    /// dsl_deadlist_space_range over either format: a new-format deadlist's entries with
    /// mintxg in [min, max); an old one's (a bpobj) blocks born in (min, max].
    fn deadlist_range_any(&mut self, dl: u64, min: u64, max: u64) -> Result<SpaceDelta> {
        if !self.deadlist_oldfmt(dl)? {
            return self.deadlist_space_range(dl, min, max);
        }
        let mut bps = Vec::new();
        self.bpobj_read_all(dl, 0, &mut bps)?;
        let root = self.spa.root_vdev.clone();
        let mut d = SpaceDelta::default();
        for b in bps.iter().filter(|b| b.birth > min && b.birth <= max) {
            d.dsize += dsize_of(&root, b) as i64;
            d.psize += b.psize as i64;
            d.lsize += b.lsize as i64;
        }
        Ok(d)
    }

    /// snaplist_space: the deadlists' space from `mintxg` on, summed over `snaps`.
    fn snaplist_space(&mut self, snaps: &[u64], mintxg: u64) -> Result<u64> {
        let mut s = 0u64;
        for &o in snaps {
            let dl = self.ds_phys(o)?.deadlist_obj;
            s += self.deadlist_range_any(dl, mintxg, u64::MAX)?.dsize as u64;
        }
        Ok(s)
    }

    /// The entry `name` of a dsl object that may be a zapified one (a plain object has none).
    pub(crate) fn zapified_lookup(&mut self, obj: u64, name: &str) -> Result<Option<u64>> {
        if self.mos.dnode(obj)?.typ != types::DMU_OTN_ZAP_METADATA {
            return Ok(None);
        }
        self.mos.zap_lookup(obj, name)
    }

    /// dsl_dir_remove_livelist (total): a clone's livelist is specific to its origin txg,
    /// so a promote frees it (the clone's frees then go the usual way, by the deadlists).
    fn remove_livelist(&mut self, dir: u64) -> Result<()> {
        if let Some(ll) = self.zapified_lookup(dir, DD_FIELD_LIVELIST)? {
            self.mos.zap_remove(dir, DD_FIELD_LIVELIST)?;
            self.deadlist_free(ll)?;
            self.feature_incr(LIVELIST_FEATURE, -1)?;
        }
        Ok(())
    }

    /// `zfs promote name`: clone `name` takes its origin's place (see the module's text).
    /// Refused with OpenZFS's words: a snapshot, a file system that is not a clone, a
    /// snapshot name the clone already has ("conflicting snapshot 'S' from parent 'O'"), a
    /// snapshot being sent (bookmarks up to the origin move too, their names checked alike);
    /// and, as oxzfs does not write them, encrypted datasets.
    pub fn promote(&mut self, name: &str) -> Result<()> {
        let what = format!("cannot promote '{name}'");
        if name.contains('@') {
            return Err(ZfsError::Invalid(format!("{what}: snapshots can not be promoted")));
        }
        let hdir = self.find_dir(name)?.ok_or_else(|| ZfsError::Invalid(format!("cannot open '{name}': dataset does not exist")))?;
        let hdp = self.dir_phys(hdir)?;
        let hds = hdp.head_dataset_obj;
        let origin_ds = hdp.origin_obj;
        if origin_ds == 0 || Some(origin_ds) == self.pool_origin_snap()? {
            return Err(ZfsError::Invalid(format!("{what}: not a cloned filesystem")));
        }
        if self.ds_phys(hds)?.flags & DS_FLAG_NOPROMOTE != 0 {
            return Err(ZfsError::Posix(libc::EXDEV, format!("{what}: the dataset is a receive in progress")));
        }
        let odir = self.ds_phys(origin_ds)?.dir_obj;
        self.refuse_encrypted(hdir, &what)?;
        self.refuse_encrypted(odir, &what)?;
        // The heads' dirty changes go first: the accounting below reads the synced state.
        self.sync()?;
        let odp = self.dir_phys(odir)?;
        let shared = snaplist(self, 0, origin_ds)?;
        let clone_snaps = snaplist(self, 0, hds)?;
        let origin_snaps = snaplist(self, origin_ds, odp.head_dataset_obj)?;
        let origin_head = odp.head_dataset_obj;
        let origin_origin = (odp.origin_obj != 0).then_some(odp.origin_obj);
        let origin_name = self.snapshot_full_name(origin_ds)?;
        // The origin file system's bookmarks up to the origin move with its snapshots.
        let origin_txg = self.ds_phys(origin_ds)?.creation_txg;
        let (obm_obj, moving) = match self.bookmark_map(origin_head)? {
            Some((o, m)) => (o, m.into_iter().filter(|(_, w)| w.get(1).is_some_and(|&t| t <= origin_txg)).collect::<Vec<_>>()),
            None => (0, Vec::new()),
        };
        let clone_marks = self.bookmark_map(hds)?.map(|(_, m)| m).unwrap_or_default();

        // dsl_dataset_promote_check.
        let oldest_clone = *clone_snaps.last().expect("the head at least");
        let op = self.ds_phys(origin_ds)?;
        let dl = self.ds_phys(oldest_clone)?.deadlist_obj;
        let unique = self.deadlist_range_any(dl, op.prev_snap_txg, u64::MAX)?.dsize as u64;
        let mut used = SpaceDelta { dsize: op.referenced_bytes as i64, psize: op.compressed_bytes as i64, lsize: op.uncompressed_bytes as i64 };
        let hnames = self.ds_phys(hds)?.snapnames_zapobj;
        let mut moved_names = Vec::with_capacity(shared.len());
        let mut conflict = None;
        for &s in &shared {
            if self.spa.send_held(s) {
                return Err(ZfsError::Posix(libc::EBUSY, format!("{what}: dataset is busy")));
            }
            let snapname = self.snapshot_full_name(s)?.split_once('@').map(|(_, n)| n.to_string()).unwrap_or_default();
            if snapname.len() >= MAXNAMELEN - name.len() - 1 {
                return Err(ZfsError::Posix(libc::ENAMETOOLONG, format!("{what}: name is too long")));
            }
            if conflict.is_none() && self.mos.zap_lookup(hnames, &snapname)?.is_some() {
                conflict = Some(snapname.clone());
            }
            moved_names.push(snapname);
            let sp = self.ds_phys(s)?;
            if sp.prev_snap_obj == 0 {
                continue; // the very first snapshot has no deadlist to count
            }
            let d = self.deadlist_space(sp.deadlist_obj)?;
            used.dsize += d.dsize;
            used.psize += d.psize;
            used.lsize += d.lsize;
        }
        for (k, _) in &moving {
            if k.len() >= MAXNAMELEN - name.len() - 1 {
                return Err(ZfsError::Posix(libc::ENAMETOOLONG, format!("{what}: name is too long")));
            }
            let mut clash = false;
            for (c, _) in &clone_marks {
                clash |= self.same_bookmark_name(hds, c, k)?;
            }
            if conflict.is_none() && clash {
                conflict = Some(String::from_utf8_lossy(k).into_owned());
            }
        }
        if let Some(c) = conflict {
            return Err(ZfsError::Invalid(format!("{what}: conflicting snapshot '{c}' from parent '{origin_name}'")));
        }
        if let Some(oo) = origin_origin {
            let p = self.ds_phys(oo)?;
            used.dsize -= p.referenced_bytes as i64;
            used.psize -= p.compressed_bytes as i64;
            used.lsize -= p.uncompressed_bytes as i64;
        }
        self.transfer_possible(hdir, odir, used.dsize.max(0) as u64, &what)?;
        let mut clone_used_snap = 0;
        if hdp.flags & DD_FLAG_USED_BREAKDOWN != 0 {
            // dd_origin_txg of the origin's directory: its own origin's birth, if it is a clone.
            let odd_origin_txg = match origin_origin {
                Some(oo) if Some(oo) != self.pool_origin_snap()? => self.ds_phys(oo)?.creation_txg,
                _ => 0,
            };
            clone_used_snap = self.snaplist_space(&shared, odd_origin_txg)? + self.snaplist_space(&clone_snaps, odd_origin_txg)?;
        }
        let mut origin_used_snap = 0;
        if odp.flags & DD_FLAG_USED_BREAKDOWN != 0 {
            origin_used_snap = self.snaplist_space(&origin_snaps, op.creation_txg)?;
        }

        let dir_clones = self.version >= SPA_VERSION_DIR_CLONES;
        if dir_clones && origin_origin.is_none() {
            return Err(ZfsError::Invalid(format!("{what}: '{origin_name}' has no origin of its own (pool version {})", self.version)));
        }

        // dsl_dataset_promote_sync: nothing below fails but on an I/O error.
        let mut op = self.ds_phys(origin_ds)?;
        let oldnext = op.next_snap_obj;
        op.next_snap_obj = oldest_clone;
        op.unique_bytes = unique;
        if op.next_clones_obj != 0 {
            self.mos.zap_remove(op.next_clones_obj, &format!("{oldest_clone:x}"))?;
            self.mos.zap_add_u64(op.next_clones_obj, &format!("{oldnext:x}"), oldnext)?;
        }
        self.mos.set_bonus(origin_ds, &op.encode())?;
        let mut hdp = self.dir_phys(hdir)?;
        hdp.origin_obj = odp.origin_obj;
        self.mos.set_bonus(hdir, &hdp.encode())?;
        let mut odp2 = self.dir_phys(odir)?;
        odp2.origin_obj = origin_ds;
        self.mos.set_bonus(odir, &odp2.encode())?;
        if dir_clones {
            let oo = origin_origin.expect("checked above");
            let oodir = self.ds_phys(oo)?.dir_obj;
            self.dir_clones_remove(odir, hds)?;
            self.dir_clones_add(oodir, hds)?;
            self.dir_clones_remove(oodir, origin_head)?;
            self.dir_clones_add(hdir, origin_head)?;
        }
        // The shared snapshots move to the clone's directory, with the clones of each.
        let onames = self.ds_phys(origin_head)?.snapnames_zapobj;
        for (&s, snapname) in shared.iter().zip(&moved_names) {
            self.mos.zap_remove(onames, snapname)?;
            self.mos.zap_add_u64(hnames, snapname, s)?;
            let mut sp = self.ds_phys(s)?;
            sp.dir_obj = hdir;
            self.mos.set_bonus(s, &sp.encode())?;
            if sp.next_clones_obj != 0 && dir_clones {
                let clones: Vec<u64> = self.mos.zap(sp.next_clones_obj)?.entries.values().filter_map(|(_, v)| v.first().copied()).collect();
                for c in clones.into_iter().filter(|&c| c != oldnext) {
                    let cdir = self.ds_phys(c)?.dir_obj;
                    let chead = self.dir_phys(cdir)?.head_dataset_obj;
                    self.dir_clones_remove(odir, chead)?;
                    self.dir_clones_add(hdir, chead)?;
                }
            }
        }
        if !moving.is_empty() {
            let z = self.mos.zap_mut(obm_obj)?;
            for (k, _) in &moving {
                z.entries.remove(k);
            }
            self.add_bookmarks(hds, &moving)?;
        }
        // The space the moved snapshots hold changes directory.
        let hsnap = self.dir_phys(hdir)?.used_breakdown[DD_USED_SNAP] as i64;
        let delta = clone_used_snap as i64 - hsnap;
        self.dir_transfer(hdir, delta, 0, 0, delta, DD_USED_SNAP, DD_USED_SNAP)?;
        self.dir_transfer(hdir, used.dsize - delta, used.psize, used.lsize, used.dsize - delta, DD_USED_HEAD, DD_USED_HEAD)?;
        let osnap = self.dir_phys(odir)?.used_breakdown[DD_USED_SNAP] as i64;
        let delta = origin_used_snap as i64 - osnap;
        self.dir_transfer(odir, delta, 0, 0, delta, DD_USED_SNAP, DD_USED_SNAP)?;
        self.dir_transfer(odir, -used.dsize - delta, -used.psize, -used.lsize, -used.dsize - delta, DD_USED_HEAD, DD_USED_HEAD)?;
        self.remove_livelist(hdir)?;
        self.remove_livelist(odir)?;
        self.sync()
    }

    /// dsl_dir_transfer_possible: the clone's directory, and each of its ancestors below the
    /// one it shares with the origin's, must have room (quota) for `space` more bytes.
    fn transfer_possible(&mut self, to: u64, from: u64, space: u64, what: &str) -> Result<()> {
        let mut from_chain = Vec::new();
        let mut d = from;
        while d != 0 && from_chain.len() < 1 << 10 {
            from_chain.push(d);
            d = self.dir_phys(d)?.parent_dir_obj;
        }
        let mut d = to;
        let mut n = 0;
        while d != 0 && !from_chain.contains(&d) && n < 1 << 10 {
            let p = self.dir_phys(d)?;
            let quota = self.local_num(d, "quota")?;
            if quota != 0 && p.used_bytes.saturating_add(space) > quota {
                return Err(ZfsError::Posix(libc::ENOSPC, format!("{what}: out of space")));
            }
            d = p.parent_dir_obj;
            n += 1;
        }
        Ok(())
    }

    fn dir_clones_remove(&mut self, dir: u64, ds: u64) -> Result<()> {
        let c = self.dir_phys(dir)?.clones;
        if c != 0 {
            self.mos.zap_remove(c, &format!("{ds:x}"))?;
        }
        Ok(())
    }

    fn dir_clones_add(&mut self, dir: u64, ds: u64) -> Result<()> {
        let mut p = self.dir_phys(dir)?;
        if p.clones == 0 {
            p.clones = self.mos.create_zap(types::DMU_OT_DSL_CLONES, 0, 0, 0)?;
            self.mos.set_bonus(dir, &p.encode())?;
        }
        self.mos.zap_add_u64(p.clones, &format!("{ds:x}"), ds)
    }

    /// $ORIGIN@$ORIGIN (dp_origin_snap), which every file system of a version 11+ pool is a
    /// clone of without being one.
    pub(crate) fn pool_origin_snap(&mut self) -> Result<Option<u64>> {
        let Some(root) = self.mos.zap_lookup(1, "root_dataset")? else { return Ok(None) };
        let child = self.dir_phys(root)?.child_dir_zapobj;
        let Some(od) = self.mos.zap_lookup(child, "$ORIGIN")? else { return Ok(None) };
        let head = self.dir_phys(od)?.head_dataset_obj;
        Ok(Some(self.ds_phys(head)?.prev_snap_obj).filter(|&o| o != 0))
    }

    /// "fs@snap" of snapshot object `snap`, from its directory's name and its head's
    /// snapnames.
    pub(crate) fn snapshot_full_name(&mut self, snap: u64) -> Result<String> {
        let sp = self.ds_phys(snap)?;
        let fs = self.dir_name_of(sp.dir_obj)?;
        let head = self.dir_phys(sp.dir_obj)?.head_dataset_obj;
        let names = self.ds_phys(head)?.snapnames_zapobj;
        let z = self.mos.zap(names)?;
        let n = z.entries.iter().find(|(_, (_, v))| v.first() == Some(&snap)).map(|(k, _)| String::from_utf8_lossy(k).into_owned());
        n.map(|n| format!("{fs}@{n}")).ok_or_else(|| ZfsError::Invalid(format!("snapshot {snap}: not in its file system's snapshot names")))
    }

    /// The name of DSL directory `dir` ("pool/a/b"), from the parents' child maps.
    pub(crate) fn dir_name_of(&mut self, dir: u64) -> Result<String> {
        let mut parts = Vec::new();
        let mut d = dir;
        loop {
            let p = self.dir_phys(d)?;
            if p.parent_dir_obj == 0 {
                break;
            }
            let children = self.dir_phys(p.parent_dir_obj)?.child_dir_zapobj;
            let z = self.mos.zap(children)?;
            let leaf = z.entries.iter().find(|(_, (_, v))| v.first() == Some(&d)).map(|(k, _)| String::from_utf8_lossy(k).into_owned());
            parts.push(leaf.ok_or_else(|| ZfsError::Invalid(format!("dsl dir {d}: not in its parent's children")))?);
            if parts.len() > 1 << 10 {
                return Err(ZfsError::Invalid(format!("dsl dir {dir}: its parents loop")));
            }
            d = p.parent_dir_obj;
        }
        parts.push(self.spa.name.clone());
        parts.reverse();
        Ok(parts.join("/"))
    }
}
