//! dsl_space: quotas and reservations in the DSL's space accounting, as dsl_dir.c and
//! dsl_dataset.c keep it.
//!
//! ```text
//!   dsl_dir_phys:      dd_used_bytes  = what the dir holds, its unused refreservation included,
//!                                       children counted as max(child used, child dd_reserved)
//!                      dd_used_breakdown[HEAD | SNAP | CHILD | CHILD_RSRV | REFRSRV]
//!                      dd_quota, dd_reserved  (also in the props ZAP as "quota", "reservation")
//!   props ZAP:         "refquota", "refreservation" (the dataset's; ds_reserved in memory)
//!
//!   a dataset's usage changes by Δ (its unique bytes u, refreservation r):
//!     the dir's used   += max(u+Δ, r) − max(u, r)          (the rest moves REFRSRV → HEAD)
//!   a dir's used changes by Δ (used U, dd_reserved R): its parent's
//!     used             += max(U+Δ, R) − max(U, R)          (the rest moves CHILD_RSRV → CHILD)
//! ```
//!
//! Setting one of the four properties is checked as OpenZFS's sync tasks check it (ENOSPC with
//! libzfs's messages) and moves the accounting at once. Writes are refused with ENOSPC when the
//! dataset's available space (reservations of others taken out, pending writes counted) cannot
//! take them. The pool-wide check (`space_check`) estimates the raw space a change needs
//! (copies, raidz parity, indirect blocks) against the allocator's free space and the slop, as
//! dsl_pool's dp_dirty_total and spa_get_slop_space bound OpenZFS's writes; `statfs` reports a
//! file system's space. Runs under the pool's write lock, in the open txg.

use crate::dbuf::SpaceDelta;
use crate::dsl_pool::{DirFigures, PoolW, SpaceFigures};
use crate::metaslab::psize_to_asize;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::{DslDirPhys, DD_FLAG_USED_BREAKDOWN};
use oxzfs_format::dsl::{DD_USED_CHILD, DD_USED_CHILD_RSRV, DD_USED_HEAD, DD_USED_REFRSRV};

/// The four properties whose setting moves space accounting.
pub fn is_space_prop(k: &str) -> bool {
    matches!(k, "quota" | "refquota" | "reservation" | "refreservation")
}

/// max(base + delta, floor) − max(base, floor): how much of a change reaches the level above
/// when `floor` bytes are reserved (parent_delta of dsl_dir.c and dsl_dataset.c).
pub fn parent_delta(base: u64, delta: i64, floor: u64) -> i64 {
    let after = (base as i64 + delta).max(0) as u64;
    after.max(floor) as i64 - base.max(floor) as i64
}

fn enospc(msg: &str) -> ZfsError {
    ZfsError::Posix(libc::ENOSPC, msg.to_string())
}

impl PoolW {
    fn dir_at(&mut self, dir: u64) -> Result<DslDirPhys> {
        DslDirPhys::decode(&self.mos.bonus(dir)?, true).map_err(|e| ZfsError::corrupt(format!("dsl dir {dir}"), e))
    }

    fn ds_at(&mut self, ds: u64) -> Result<oxzfs_format::dsl::DslDatasetPhys> {
        oxzfs_format::dsl::DslDatasetPhys::decode(&self.mos.bonus(ds)?, true).map_err(|e| ZfsError::corrupt(format!("dataset {ds}"), e))
    }

    /// A numeric property set locally on dsl dir `dir` (0 when absent or "none").
    pub fn local_num(&mut self, dir: u64, k: &str) -> Result<u64> {
        let props = self.dir_at(dir)?.props_zapobj;
        if props == 0 {
            return Ok(0);
        }
        let z = self.mos.zap(props)?;
        Ok(z.entries.get(k.as_bytes()).and_then(|(i, v)| if *i == 8 { v.first().copied() } else { None }).unwrap_or(0))
    }

    /// dsl_dir_diduse_transfer_space: `used` bytes more (or fewer) in dir `dir`, of which
    /// `tonew` go to breakdown `newtype` and `tonew − used` leave `oldtype`; each ancestor
    /// gets what its child's reservation does not already account for (CHILD_RSRV → CHILD).
    ///
    /// A dir's used bytes never go below zero. Should a change ask for more than a dir holds
    /// (an accounting that drifted, e.g. $MOS's after a crash lost its last delta), the
    /// ancestors get the change the dir's used bytes really took, so each parent's CHILD and
    /// CHILD_RSRV stay the sum of its children's.
    #[allow(clippy::too_many_arguments)]
    pub fn dir_transfer(&mut self, dir: u64, used: i64, psize: i64, lsize: i64, tonew: i64, oldtype: usize, newtype: usize) -> Result<()> {
        let (mut cur, mut used, mut tonew, mut oldtype, mut newtype) = (dir, used, tonew, oldtype, newtype);
        let add = |v: u64, d: i64| (v as i64 + d).max(0) as u64;
        for _ in 0..64 {
            if cur == 0 {
                break;
            }
            let mut p = self.dir_at(cur)?;
            let before = p.used_bytes;
            p.used_bytes = add(before, used);
            if p.used_bytes as i64 - before as i64 != used {
                // Clamped: the rest of this level follows the change the dir really took.
                tonew -= used - (p.used_bytes as i64 - before as i64);
                used = p.used_bytes as i64 - before as i64;
            }
            let accounted = parent_delta(before, used, p.reserved);
            p.compressed_bytes = add(p.compressed_bytes, psize);
            p.uncompressed_bytes = add(p.uncompressed_bytes, lsize);
            if p.flags & DD_FLAG_USED_BREAKDOWN != 0 {
                p.used_breakdown[oldtype] = add(p.used_breakdown[oldtype], -(tonew - used));
                p.used_breakdown[newtype] = add(p.used_breakdown[newtype], tonew);
            }
            self.mos.set_bonus(cur, &p.encode())?;
            cur = p.parent_dir_obj;
            (tonew, used, oldtype, newtype) = (used, accounted, DD_USED_CHILD_RSRV, DD_USED_CHILD);
        }
        Ok(())
    }

    /// A dataset's blocks changed by `delta` in a sync (its unique bytes were `unique`
    /// before): the part its refreservation already covered moves REFRSRV → HEAD.
    pub fn ds_diduse(&mut self, dir: u64, unique: u64, delta: &SpaceDelta) -> Result<()> {
        let res = self.local_num(dir, "refreservation")?;
        let accounted = parent_delta(unique, delta.dsize, res);
        self.dir_transfer(dir, accounted, delta.psize, delta.lsize, delta.dsize, DD_USED_REFRSRV, DD_USED_HEAD)
    }

    /// The dirs from `dir` up to the root, each with the bytes pending in the open txg of the
    /// datasets below it added to its used (dsl_dir_space_towrite) unless `ondisk`.
    fn chain_with_towrite(&mut self, dir: u64, ondisk: bool) -> Result<Vec<(u64, DslDirPhys)>> {
        let mut chain = Vec::new();
        let mut cur = dir;
        while cur != 0 && chain.len() < 64 {
            let p = self.dir_at(cur)?;
            let parent = p.parent_dir_obj;
            chain.push((cur, p));
            cur = parent;
        }
        if !ondisk {
            let dirty: Vec<(u64, u64)> = self.datasets.iter().map(|(k, d)| (*k, d.os.dirty_bytes + d.os.frozen_bytes())).filter(|&(_, b)| b > 0).collect();
            for (ds, bytes) in dirty {
                let mut cur = self.ds_at(ds)?.dir_obj;
                for _ in 0..64 {
                    if cur == 0 {
                        break;
                    }
                    if let Some((_, p)) = chain.iter_mut().find(|(o, _)| *o == cur) {
                        p.used_bytes = p.used_bytes.saturating_add(bytes);
                    }
                    cur = self.dir_at(cur)?.parent_dir_obj;
                }
            }
        }
        Ok(chain)
    }

    /// dsl_dir_space_available of dir `dir` (the pool's usable size less its slop at the root).
    pub fn dir_avail(&mut self, dir: u64, ondisk: bool) -> Result<u64> {
        self.dir_avail_with(dir, ondisk, true)
    }

    /// `dir_avail`, with the dirs' quotas left out unless `quotas` (writes meet those as
    /// EDQUOT in `quota_check`; here only the pool and the reservations limit them).
    fn dir_avail_with(&mut self, dir: u64, ondisk: bool, quotas: bool) -> Result<u64> {
        let mut chain = self.chain_with_towrite(dir, ondisk)?;
        chain.reverse();
        let dirs: Vec<DslDirPhys> = chain.into_iter().map(|(_, p)| DslDirPhys { quota: if quotas { p.quota } else { 0 }, ..p }).collect();
        let space = crate::dsl::pool_space(&self.spa);
        Ok(crate::dsl::dir_space_available(space.dspace.saturating_sub(space.slop), &dirs))
    }

    /// What dataset `dsobj` may still write (dsl_dataset_space: its dir's available, plus its
    /// unused refreservation, capped by its refquota).
    pub fn dataset_avail(&mut self, dsobj: u64, ondisk: bool) -> Result<u64> {
        self.dataset_avail_with(dsobj, ondisk, true)
    }

    fn dataset_avail_with(&mut self, dsobj: u64, ondisk: bool, quotas: bool) -> Result<u64> {
        let ds = self.ds_at(dsobj)?;
        let mut avail = self.dir_avail_with(ds.dir_obj, ondisk, quotas)?;
        let (res, refquota) = (self.local_num(ds.dir_obj, "refreservation")?, self.local_num(ds.dir_obj, "refquota")?);
        if res > ds.unique_bytes {
            avail = avail.saturating_add(res - ds.unique_bytes);
        }
        if quotas && refquota != 0 {
            avail = if ds.referenced_bytes < refquota { avail.min(refquota - ds.referenced_bytes) } else { 0 };
        }
        Ok(avail)
    }

    /// `dataset_avail_with(dsobj, false, false)` from the cached figures: the dirs' used
    /// bytes with what every dataset below each has pending (dsl_dir_space_towrite), the
    /// reservations, no quotas (those are `quota_check`'s).
    fn dataset_avail_pending(&mut self, dsobj: u64) -> Result<u64> {
        let f = self.figures(dsobj)?;
        let mut towrite = vec![0u64; f.chain.len()];
        let dirty: Vec<(u64, u64)> = self.datasets.iter().map(|(k, d)| (*k, d.os.dirty_bytes + d.os.frozen_bytes())).filter(|&(_, b)| b > 0).collect();
        for (ds, bytes) in dirty {
            let other = if ds == dsobj { f.clone() } else { self.figures(ds)? };
            for d in &other.chain {
                if let Some(i) = f.chain.iter().position(|c| c.obj == d.obj) {
                    towrite[i] = towrite[i].saturating_add(bytes);
                }
            }
        }
        let space = crate::dsl::pool_space(&self.spa);
        let dirs = f.chain.iter().zip(&towrite).rev().map(|(d, t)| (d.used.saturating_add(*t), d.reserved, 0));
        let mut avail = crate::dsl::dir_space_available_of(space.dspace.saturating_sub(space.slop), dirs);
        if f.refres > f.unique {
            avail = avail.saturating_add(f.refres - f.unique);
        }
        Ok(avail)
    }

    /// ENOSPC when `incoming` more bytes (as allocated, `copies` times) do not fit in what the
    /// dataset may still write: other datasets' reservations are not to be eaten. Quotas are
    /// `quota_check`'s (EDQUOT).
    pub fn reservation_check(&mut self, dsobj: u64, incoming: u64, copies: usize) -> Result<()> {
        if incoming == 0 {
            return Ok(());
        }
        let need = incoming.saturating_mul(copies.max(1) as u64);
        if need > self.dataset_avail_pending(dsobj)? {
            return Err(enospc("out of space"));
        }
        Ok(())
    }

    /// `zfs set` of quota, refquota, reservation or refreservation on dsl dir `dir` (value 0
    /// = none): OpenZFS's checks, then the property, the dsl_dir fields and the accounting.
    pub fn set_space_prop(&mut self, dir: u64, k: &str, value: u64) -> Result<()> {
        if self.dirty() {
            // The checks compare with what is on disk: settle the open txg first.
            self.sync()?;
        }
        let p = self.dir_at(dir)?;
        let dsobj = p.head_dataset_obj;
        let ds = self.ds_at(dsobj)?;
        let less = "size is less than current used or reserved space";
        let greater = "size is greater than available space";
        match k {
            "quota" => {
                if value != 0 && (value < p.reserved || value < p.used_bytes) {
                    return Err(enospc(less));
                }
            }
            "refquota" => {
                let res = self.local_num(dir, "refreservation")?;
                if value != 0 && (value < ds.referenced_bytes || value < res) {
                    return Err(enospc(less));
                }
            }
            "reservation" => {
                let used = p.used_bytes;
                let (new, old) = (used.max(value), used.max(p.reserved));
                if new > old {
                    let avail = if p.parent_dir_obj != 0 {
                        self.dir_avail(p.parent_dir_obj, false)?
                    } else {
                        let space = crate::dsl::pool_space(&self.spa);
                        space.dspace.saturating_sub(space.slop).saturating_sub(used)
                    };
                    if new - old > avail || (p.quota > 0 && value > p.quota) {
                        return Err(enospc(greater));
                    }
                }
            }
            "refreservation" => {
                let unique = ds.unique_bytes;
                let old_res = self.local_num(dir, "refreservation")?;
                let refquota = self.local_num(dir, "refquota")?;
                let (new, old) = (unique.max(value), unique.max(old_res));
                if new > old && (new - old > self.dir_avail(dir, true)? || (refquota > 0 && value > refquota)) {
                    return Err(enospc(greater));
                }
            }
            _ => return Err(ZfsError::Invalid(format!("invalid property '{k}'"))),
        }
        self.apply_space_prop(dir, k, value)
    }

    /// Store the property and move the accounting (the sync half of the set).
    fn apply_space_prop(&mut self, dir: u64, k: &str, value: u64) -> Result<()> {
        let old_refres = self.local_num(dir, "refreservation")?;
        let mut p = self.dir_at(dir)?;
        if p.props_zapobj != 0 {
            self.mos.zap_add_u64(p.props_zapobj, k, value)?;
        }
        match k {
            "quota" => {
                p.quota = value;
                self.mos.set_bonus(dir, &p.encode())?;
            }
            "reservation" => {
                let delta = p.used_bytes.max(value) as i64 - p.used_bytes.max(p.reserved) as i64;
                p.reserved = value;
                self.mos.set_bonus(dir, &p.encode())?;
                if p.parent_dir_obj != 0 && delta != 0 {
                    self.dir_transfer(p.parent_dir_obj, delta, 0, 0, delta, DD_USED_CHILD_RSRV, DD_USED_CHILD_RSRV)?;
                }
            }
            "refreservation" => {
                let unique = self.ds_at(p.head_dataset_obj)?.unique_bytes;
                let delta = value.saturating_sub(unique) as i64 - old_refres.saturating_sub(unique) as i64;
                if delta != 0 {
                    self.dir_transfer(dir, delta, 0, 0, delta, DD_USED_REFRSRV, DD_USED_REFRSRV)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `zfs create -o` of the space properties: set on the new dataset as `zfs set` would;
    /// when refused, the dataset is destroyed again and the create fails (out of space).
    pub fn create_space_props(&mut self, name: &str, dir: u64, props: &[(String, String)]) -> Result<()> {
        for (k, v) in props.iter().filter(|(k, _)| is_space_prop(k)) {
            let crate::dsl::PropStore::Num(n) = crate::dsl::encode_prop(k, v)? else { unreachable!("sizes are numbers") };
            if let Err(e) = self.set_space_prop(dir, k, n) {
                self.destroy_dataset(name)?;
                self.sync()?;
                return Err(match e {
                    ZfsError::Posix(libc::ENOSPC, _) => enospc("out of space"),
                    other => other,
                });
            }
        }
        Ok(())
    }

    /// Before a dataset is destroyed: its refreservation and reservation stop counting
    /// (dsl_dir_destroy_sync sets the reservation to 0; the refreservation goes with the head).
    pub fn release_reservations(&mut self, dir: u64) -> Result<()> {
        if self.local_num(dir, "refreservation")? != 0 {
            self.apply_space_prop(dir, "refreservation", 0)?;
        }
        if self.dir_at(dir)?.reserved != 0 {
            self.apply_space_prop(dir, "reservation", 0)?;
        }
        Ok(())
    }
}

/// What statfs reports for a mounted file system, as zfs_statvfs computes it from
/// dmu_objset_space: bytes in units of the dataset's recordsize (z_max_blksz), the referenced
/// bytes rounded up to one so a file system never uses 0 blocks; objects from the fill count
/// of the dataset's root block pointer (allocated dnodes) against DN_MAX_OBJECT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub bsize: u64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    /// Longest name: ZAP_MAXNAMELEN - 1.
    pub namemax: u32,
    /// dmu_objset_fsid_guid: the dataset's fsid_guid.
    pub fsid: u64,
}

/// DN_MAX_OBJECT: 2^48 objects in an objset.
const DN_MAX_OBJECT: u64 = 1 << 48;
/// DNODE_SHIFT: 512-byte dnodes.
const DNODE_SHIFT: u32 = 9;
/// ZAP_MAXNAMELEN: a directory entry's name with its NUL.
const ZAP_MAXNAMELEN: u32 = 256;

impl StatFs {
    /// zfs_statvfs's arithmetic over (referenced, available, used objects, block size).
    pub fn compute(refd: u64, avail: u64, usedobjs: u64, bsize: u64) -> StatFs {
        let bsize = if bsize.is_power_of_two() { bsize } else { 128 << 10 };
        let shift = bsize.trailing_zeros();
        let refd = refd.div_ceil(bsize) * bsize;
        let bfree = avail >> shift;
        let availobjs = DN_MAX_OBJECT.saturating_sub(usedobjs);
        let ffree = availobjs.min(avail >> DNODE_SHIFT);
        StatFs { bsize, blocks: refd.saturating_add(avail) >> shift, bfree, bavail: bfree, files: ffree + usedobjs, ffree, namemax: ZAP_MAXNAMELEN - 1, fsid: 0 }
    }
}

impl PoolW {
    /// statfs of head dataset `dsobj` (what df shows; `zfs get available,referenced` agree).
    pub fn statfs(&mut self, dsobj: u64) -> Result<StatFs> {
        let ds = self.ds_at(dsobj)?;
        let avail = self.dataset_avail(dsobj, true)?;
        let recordsize = self.effective_props(ds.dir_obj)?.recordsize;
        let fill = if ds.bp.is_hole() { 0 } else { ds.bp.fill };
        Ok(StatFs { fsid: ds.fsid_guid, ..StatFs::compute(ds.referenced_bytes, avail, fill, recordsize) })
    }
}



/// What a change was refused for (`PoolW::space_for`): `space` when the pool itself is full
/// (the retry may release deferred frees), and the error to give.
pub(crate) struct Short {
    pub(crate) space: bool,
    pub(crate) err: ZfsError,
}

impl PoolW {
    /// Raw bytes allocated per byte of data on the worst top-level vdev (raidz parity and
    /// padding, sector rounding of a 128K block), for space estimates.
    pub(crate) fn raw_per_byte(&self) -> f64 {
        self.spa
            .root_vdev
            .children
            .iter()
            .map(|t| psize_to_asize(t, 128 << 10) as f64 / (128u64 << 10) as f64)
            .fold(1.0, f64::max)
    }

    /// Raw bytes the smallest block takes on the worst top-level vdev (a sector, its raidz
    /// parity and padding): a dirty block of a small record costs at least this much.
    pub(crate) fn raw_per_block(&self) -> u64 {
        self.spa.root_vdev.children.iter().map(|t| psize_to_asize(t, 512)).max().unwrap_or(512)
    }

    /// Raw bytes `bytes` of data in `blocks` blocks, `copies` times, may allocate: by the
    /// bytes (large records) or by the blocks (small records on wide sectors), whichever is more.
    pub(crate) fn raw_estimate(&self, bytes: u64, blocks: u64, copies: usize) -> u64 {
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
        let f = self.figures(dsobj)?;
        for (i, d) in f.chain.iter().enumerate() {
            if i == 0 && f.refquota > 0 && f.referenced + dirty > f.refquota {
                return Err(ZfsError::Posix(libc::EDQUOT, "refquota exceeded".into()));
            }
            if d.prop_quota > 0 && d.used + dirty > d.prop_quota {
                return Err(ZfsError::Posix(libc::EDQUOT, "quota exceeded".into()));
            }
        }
        Ok(())
    }

    /// The space figures of dataset `dsobj` as the MOS has them now: decoded once per state
    /// of the MOS. Every change of what they are made of is a change of the MOS (the dsl dirs'
    /// and datasets' bonus buffers: space charged at sync, quota and reservation fields; the
    /// props ZAPs: quota, refquota, reservation, refreservation; the dataset tree: dirs made,
    /// destroyed, renamed or moved), and any change of the MOS moves its generation, which
    /// empties the cache. What changes between syncs without the MOS (the bytes dirty in the
    /// open and syncing txgs, the pool's size) is read live by the checks.
    fn figures(&mut self, dsobj: u64) -> Result<std::sync::Arc<SpaceFigures>> {
        let gen = self.mos.generation();
        if self.space_figures.gen != gen {
            self.space_figures.gen = gen;
            self.space_figures.by_ds.clear();
        }
        if let Some(f) = self.space_figures.by_ds.get(&dsobj) {
            return Ok(f.clone());
        }
        let ds = self.ds_at(dsobj)?;
        let mut chain = Vec::new();
        let mut cur = ds.dir_obj;
        let (mut refquota, mut refres) = (0, 0);
        while cur != 0 && chain.len() < 64 {
            let p = self.dir_at(cur)?;
            let mut prop_quota = 0;
            if p.props_zapobj != 0 {
                let z = self.mos.zap(p.props_zapobj)?;
                let get = |k: &str| z.entries.get(k.as_bytes()).and_then(|(i, v)| if *i == 8 { v.first().copied() } else { None }).unwrap_or(0);
                prop_quota = get("quota");
                if chain.is_empty() {
                    (refquota, refres) = (get("refquota"), get("refreservation"));
                }
            }
            chain.push(DirFigures { obj: cur, used: p.used_bytes, reserved: p.reserved, prop_quota });
            cur = p.parent_dir_obj;
        }
        let f = std::sync::Arc::new(SpaceFigures { referenced: ds.referenced_bytes, unique: ds.unique_bytes, refquota, refres, chain });
        self.space_figures.by_ds.insert(dsobj, f.clone());
        Ok(f)
    }

    /// Whether dataset `dsobj` may take a change needing `incoming` more bytes: None, or what
    /// it is short of (pool space, quota, reservation) with the error to give. A read-only
    /// dataset is an error (EROFS).
    pub(crate) fn space_for(&mut self, dsobj: u64, incoming: u64) -> Result<Option<Short>> {
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
        self.ms_out.unwrap_or_else(|| self.ms.lock().space_totals())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_delta_is_what_the_reservation_does_not_cover() {
        // No reservation: everything passes up.
        assert_eq!(parent_delta(10, 5, 0), 5);
        assert_eq!(parent_delta(10, -5, 0), -5);
        // Below the reservation: nothing passes up, either way.
        assert_eq!(parent_delta(10, 50, 100), 0);
        assert_eq!(parent_delta(60, -50, 100), 0);
        // Crossing it: only the part above.
        assert_eq!(parent_delta(90, 20, 100), 10);
        assert_eq!(parent_delta(110, -20, 100), -10);
        // Path independence: the sum of steps is the whole step.
        let steps = [30i64, 50, -70, 90, -20];
        let mut u = 40u64;
        let mut sum = 0;
        for s in steps {
            sum += parent_delta(u, s, 100);
            u = (u as i64 + s) as u64;
        }
        assert_eq!(sum, parent_delta(40, steps.iter().sum(), 100));
    }

    #[test]
    fn statfs_counts_in_recordsize_units() {
        // 1 byte referenced still takes a block; 1 MiB available in 128K blocks is 8.
        let s = StatFs::compute(1, 1 << 20, 7, 128 << 10);
        assert_eq!((s.bsize, s.blocks, s.bfree, s.bavail), (128 << 10, 9, 8, 8));
        // Free objects: the smaller of what is left of 2^48 and available / 512.
        assert_eq!((s.ffree, s.files), (2048, 2055));
        let big = StatFs::compute(0, u64::MAX >> 4, 5, 1 << 20);
        assert_eq!(big.ffree, (1 << 48) - 5);
        assert_eq!(big.files, 1 << 48);
    }
}
