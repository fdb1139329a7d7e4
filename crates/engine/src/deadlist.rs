//! deadlist: blocks a head dataset no longer references but a snapshot still does
//! (dsl_deadlist.c, bpobj.c, and the snapshot side of dsl_dataset_block_kill).
//!
//! ```text
//!   pool version >= 26 (SPA_VERSION_DEADLISTS):
//!     ds_deadlist_obj ─► ZAP (DMU_OT_DEADLIST, bonus DMU_OT_DEADLIST_HDR: dl_used, dl_comp,
//!                        dl_uncomp, 37 words of pad) of  "%llx" mintxg ─► bpobj
//!       a dead bp born at txg b goes to the entry with the largest mintxg < b (mintxg is
//!       exclusive); an entry may name the pool's shared empty bpobj (MOS directory
//!       "empty_bpobj", counted by feature empty_bpobj) until its first block, when it gets
//!       a bpobj of its own.
//!   older pools (zfs-fuse's version 23): ds_deadlist_obj is one bpobj (the old bplist).
//!   bpobj: DMU_OT_BPOBJ (128K blocks) of 128-byte blkptrs, bonus DMU_OT_BPOBJ_HDR:
//!     num_blkptrs, bytes (dsize), comp, uncomp (version >= 3), subobjs, num_subobjs
//!     (version >= 26), num_freed (livelist active). Stored bps have no checksum (unless
//!     dedup) and fill 0, as bpobj_enqueue keeps them.
//!
//!   dsl_dataset_block_kill of bp (used = dsize) on head ds:
//!     born > ds_prev_snap_txg  → freed (the txg sync does it; unique −= used)
//!     born ≤ ds_prev_snap_txg  → deadlist; prev snapshot's unique += used when ds is its
//!                                next and the bp was born after the prev's prev_snap_txg;
//!                                the dir moves used HEAD → SNAP when born after the
//!                                dir's origin txg (a clone's older blocks were never its)
//!     referenced, compressed, uncompressed −= the bp's, either way.
//! ```
//!
//! Everything here changes MOS objects: it runs under the pool's write state, in the open
//! txg (snapshot) or in `sync_finish` before the MOS syncs (dead blocks of a dataset sync).

use crate::dbuf::SpaceDelta;
use crate::metaslab::dsize_of;
use crate::dsl_pool::PoolW;
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::{BlockPointer, BLKPTR_SIZE};
use oxzfs_format::dsl::{BpobjPhys, DD_USED_HEAD, DD_USED_SNAP};
use oxzfs_format::types;

/// The MOS directory entry naming the shared empty bpobj.
const EMPTY_BPOBJ_KEY: &str = "empty_bpobj";
const EMPTY_BPOBJ: &str = "com.delphix:empty_bpobj";
const LIVELIST: &str = "com.delphix:livelist";
/// DD_FIELD_LIVELIST, the entry of a zapified dsl_dir naming its livelist.
const DD_FIELD_LIVELIST: &str = "com.delphix:livelist";
/// bpobj object block size (SPA_OLD_MAXBLOCKSIZE).
const BPOBJ_BLOCKSIZE: u64 = 128 << 10;
/// dsl_deadlist_phys_t: three counters and 37 words of pad.
const DEADLIST_HDR_SIZE: usize = 320;

/// Bonus size of a new bpobj (bpobj_alloc): 2 words before version 3, 4 before 26, 6 after,
/// 7 while livelists are active.
pub fn bpobj_bonus_size(version: u64, livelist_active: bool) -> usize {
    match version {
        0..=2 => 16,
        3..=25 => 32,
        _ if livelist_active => 56,
        _ => 48,
    }
}

/// The space a list of blocks takes: (dsize, psize, lsize) as the dataset counts them.
fn sums(root: &crate::vdev::Vdev, bps: &[BlockPointer]) -> SpaceDelta {
    let mut d = SpaceDelta::default();
    for bp in bps {
        d.dsize += dsize_of(root, bp) as i64;
        d.psize += bp.psize as i64;
        d.lsize += bp.lsize as i64;
    }
    d
}

fn add3(bonus: &mut [u8], d: &SpaceDelta) {
    for (i, v) in [d.dsize, d.psize, d.lsize].into_iter().enumerate() {
        let cur = u64::from_le_bytes(bonus[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        bonus[i * 8..i * 8 + 8].copy_from_slice(&((cur as i64 + v).max(0) as u64).to_le_bytes());
    }
}

impl PoolW {
    /// Refuse writes to a clone that has a livelist (DD_FIELD_LIVELIST in its zapified
    /// dsl_dir): OpenZFS keeps it in step with every block the clone allocates and frees.
    pub(crate) fn refuse_livelist(&mut self, dsobj: u64, dir: u64) -> Result<()> {
        if self.mos.dnode(dir)?.typ != types::DMU_OTN_ZAP_METADATA {
            return Ok(());
        }
        if self.mos.zap_lookup(dir, DD_FIELD_LIVELIST)?.is_some() {
            return Err(ZfsError::Posix(
                libc::EROFS,
                format!("dataset {dsobj} is a clone with a livelist (feature livelist): oxzfs does not keep livelists; mount it read-only"),
            ));
        }
        Ok(())
    }

    fn livelist_active(&self) -> bool {
        self.features.get(LIVELIST).is_some_and(|&(n, _)| n > 0)
    }

    /// bpobj_alloc: a new, empty bpobj.
    pub(crate) fn bpobj_alloc(&mut self) -> Result<u64> {
        let size = bpobj_bonus_size(self.version, self.livelist_active());
        let o = self.mos.alloc_object(types::DMU_OT_BPOBJ, BPOBJ_BLOCKSIZE, types::DMU_OT_BPOBJ_HDR, size, 1)?;
        self.mos.set_bonus(o, &BpobjPhys::default().encode(size))?;
        Ok(o)
    }

    /// The pool's shared empty bpobj (0: none).
    fn empty_bpobj(&mut self) -> Result<u64> {
        Ok(self.mos.zap_lookup(1, EMPTY_BPOBJ_KEY)?.unwrap_or(0))
    }

    /// bpobj_alloc_empty: with feature empty_bpobj, one more reference to the shared empty
    /// bpobj (made on first use); without it, a bpobj of its own.
    fn bpobj_alloc_empty(&mut self) -> Result<u64> {
        if !self.feature_enabled(EMPTY_BPOBJ) {
            return self.bpobj_alloc();
        }
        let mut e = self.empty_bpobj()?;
        if e == 0 {
            e = self.bpobj_alloc()?;
            self.mos.zap_add_u64(1, EMPTY_BPOBJ_KEY, e)?;
        }
        self.feature_incr(EMPTY_BPOBJ, 1)?;
        Ok(e)
    }

    /// bpobj_decr_empty: one reference to the shared empty bpobj less; the last one frees it.
    fn bpobj_decr_empty(&mut self) -> Result<()> {
        self.feature_incr(EMPTY_BPOBJ, -1)?;
        if self.features.get(EMPTY_BPOBJ).is_some_and(|&(n, _)| n == 0) {
            let e = self.empty_bpobj()?;
            self.mos.zap_remove(1, EMPTY_BPOBJ_KEY)?;
            if e != 0 {
                self.mos.free_object(e)?;
            }
        }
        Ok(())
    }

    /// bpobj_enqueue of each of `bps` (none embedded) at the end of bpobj `obj`.
    pub(crate) fn bpobj_enqueue(&mut self, obj: u64, bps: &[BlockPointer]) -> Result<()> {
        let bonus = self.mos.bonus(obj)?;
        let mut h = BpobjPhys::decode(&bonus, true).map_err(|e| ZfsError::corrupt(format!("bpobj {obj}"), e))?;
        let root = self.spa.root_vdev.clone();
        let mut bytes = Vec::with_capacity(bps.len() * BLKPTR_SIZE);
        for bp in bps {
            let mut stored = bp.clone();
            if !stored.dedup {
                stored.cksum = [0; 4];
            }
            stored.fill = 0;
            bytes.extend_from_slice(&stored.encode(true));
        }
        let s = sums(&root, bps);
        let start = h.num_blkptrs * BLKPTR_SIZE as u64;
        h.num_blkptrs += bps.len() as u64;
        h.bytes = (h.bytes as i64 + s.dsize) as u64;
        if bonus.len() > 16 {
            h.comp = (h.comp as i64 + s.psize) as u64;
            h.uncomp = (h.uncomp as i64 + s.lsize) as u64;
        }
        self.mos.write(obj, start, &bytes)?;
        self.mos.set_bonus(obj, &h.encode(bonus.len()))
    }

    /// Whether deadlist `dl` is of the old format (a bpobj itself).
    pub(crate) fn deadlist_oldfmt(&mut self, dl: u64) -> Result<bool> {
        Ok(self.mos.dnode(dl)?.typ == types::DMU_OT_BPOBJ)
    }

    /// The entries of a new-format deadlist: (mintxg, bpobj), by mintxg.
    pub(crate) fn deadlist_entries(&mut self, dl: u64) -> Result<Vec<(u64, u64)>> {
        let z = self.mos.zap(dl)?;
        let mut v = Vec::with_capacity(z.entries.len());
        for (k, (_, vals)) in &z.entries {
            let key = std::str::from_utf8(k).ok().and_then(|s| u64::from_str_radix(s, 16).ok());
            match (key, vals.first()) {
                (Some(t), Some(&o)) => v.push((t, o)),
                _ => return Err(ZfsError::Invalid(format!("deadlist {dl}: bad entry {:?}", String::from_utf8_lossy(k)))),
            }
        }
        v.sort_unstable();
        Ok(v)
    }

    /// dsl_deadlist_alloc: a new, empty deadlist.
    pub(crate) fn deadlist_alloc(&mut self) -> Result<u64> {
        if self.version < 26 {
            return self.bpobj_alloc();
        }
        let o = self.mos.create_zap(types::DMU_OT_DEADLIST, types::DMU_OT_DEADLIST_HDR, DEADLIST_HDR_SIZE, 0)?;
        self.mos.set_bonus(o, &[0u8; DEADLIST_HDR_SIZE])?;
        Ok(o)
    }

    /// dsl_deadlist_add_key: a new (empty) entry for blocks born after `mintxg`.
    pub(crate) fn deadlist_add_key(&mut self, dl: u64, mintxg: u64) -> Result<()> {
        if self.deadlist_oldfmt(dl)? {
            return Ok(());
        }
        let obj = self.bpobj_alloc_empty()?;
        self.mos.zap_add_u64(dl, &format!("{mintxg:x}"), obj)
    }

    /// dsl_deadlist_clone: a new deadlist with an empty entry for each key of `dl` below
    /// `maxtxg` (for an old-format `dl` on a newer pool: a key per snapshot from `mrs_obj`
    /// back, as dsl_deadlist_regenerate makes them).
    pub(crate) fn deadlist_clone(&mut self, dl: u64, maxtxg: u64, mrs_obj: u64) -> Result<u64> {
        let new = self.deadlist_alloc()?;
        if self.deadlist_oldfmt(dl)? {
            if !self.deadlist_oldfmt(new)? {
                let mut mrs = mrs_obj;
                let mut n = 0;
                while mrs != 0 && n < 1 << 20 {
                    let p = self.ds_phys(mrs)?;
                    self.deadlist_add_key(new, p.prev_snap_txg)?;
                    mrs = p.prev_snap_obj;
                    n += 1;
                }
            }
            return Ok(new);
        }
        for (t, _) in self.deadlist_entries(dl)? {
            if t >= maxtxg {
                break;
            }
            let obj = self.bpobj_alloc_empty()?;
            self.mos.zap_add_u64(new, &format!("{t:x}"), obj)?;
        }
        Ok(new)
    }

    /// dsl_deadlist_insert of every one of `bps`.
    pub(crate) fn deadlist_insert(&mut self, dl: u64, bps: &[BlockPointer]) -> Result<()> {
        let bps: Vec<BlockPointer> = bps.iter().filter(|b| !b.is_hole()).cloned().collect();
        if bps.is_empty() {
            return Ok(());
        }
        if self.deadlist_oldfmt(dl)? {
            return self.bpobj_enqueue(dl, &bps);
        }
        let root = self.spa.root_vdev.clone();
        let mut hdr = self.mos.bonus(dl)?;
        if hdr.len() < 24 {
            return Err(ZfsError::Invalid(format!("deadlist {dl}: header of {} bytes", hdr.len())));
        }
        add3(&mut hdr, &sums(&root, &bps));
        self.mos.set_bonus(dl, &hdr)?;
        let entries = self.deadlist_entries(dl)?;
        if entries.is_empty() {
            return Err(ZfsError::Invalid(format!("deadlist {dl} has no entries for a block born at txg {}", bps[0].birth)));
        }
        // Each bp to the entry with the largest mintxg below its birth (else the first).
        let mut groups: Vec<Vec<BlockPointer>> = vec![Vec::new(); entries.len()];
        for bp in bps {
            let i = entries.partition_point(|&(t, _)| t < bp.birth).saturating_sub(1);
            groups[i].push(bp);
        }
        let empty = self.empty_bpobj()?;
        for ((t, mut obj), g) in entries.into_iter().zip(groups) {
            if g.is_empty() {
                continue;
            }
            if obj == empty && empty != 0 {
                obj = self.bpobj_alloc()?;
                self.bpobj_decr_empty()?;
                self.mos.zap_add_u64(dl, &format!("{t:x}"), obj)?;
            }
            self.bpobj_enqueue(obj, &g)?;
        }
        Ok(())
    }

    /// dsl_deadlist_free: the deadlist and its bpobjs (references to the empty bpobj given
    /// back). Sub-bpobjs of an entry go with it.
    pub(crate) fn deadlist_free(&mut self, dl: u64) -> Result<()> {
        if self.deadlist_oldfmt(dl)? {
            return self.bpobj_free(dl);
        }
        let empty = self.empty_bpobj()?;
        for (_, obj) in self.deadlist_entries(dl)? {
            if obj == empty && empty != 0 {
                self.bpobj_decr_empty()?;
            } else {
                self.bpobj_free(obj)?;
            }
        }
        self.mos.free_object(dl)
    }

    /// bpobj_free: the bpobj and the sub-bpobjs it lists.
    pub(crate) fn bpobj_free(&mut self, obj: u64) -> Result<()> {
        let h = BpobjPhys::decode(&self.mos.bonus(obj)?, true).map_err(|e| ZfsError::corrupt(format!("bpobj {obj}"), e))?;
        for sub in self.bpobj_subobjs(&h)? {
            self.bpobj_free(sub)?;
        }
        if h.subobjs != 0 {
            self.mos.free_object(h.subobjs)?;
        }
        self.mos.free_object(obj)
    }

    /// bpobj_space: (bytes, comp, uncomp) of a bpobj, its sub-bpobjs included.
    pub(crate) fn bpobj_space(&mut self, obj: u64) -> Result<SpaceDelta> {
        let h = BpobjPhys::decode(&self.mos.bonus(obj)?, true).map_err(|e| ZfsError::corrupt(format!("bpobj {obj}"), e))?;
        Ok(SpaceDelta { dsize: h.bytes as i64, psize: h.comp as i64, lsize: h.uncomp as i64 })
    }

    /// Every bp a bpobj holds, its sub-bpobjs' included (bpobj_iterate_nofree).
    pub(crate) fn bpobj_read_all(&mut self, obj: u64, depth: u32, out: &mut Vec<BlockPointer>) -> Result<()> {
        if depth > 64 {
            return Err(ZfsError::Invalid(format!("bpobj {obj}: sub-bpobjs nested too deep")));
        }
        let h = BpobjPhys::decode(&self.mos.bonus(obj)?, true).map_err(|e| ZfsError::corrupt(format!("bpobj {obj}"), e))?;
        let size = self.mos.dnode(obj)?.data_block_size().max(1) * (self.mos.dnode(obj)?.maxblkid + 1);
        if h.num_blkptrs.saturating_mul(BLKPTR_SIZE as u64) > size {
            return Err(ZfsError::Invalid(format!("bpobj {obj}: {} blkptrs in {size} bytes", h.num_blkptrs)));
        }
        let raw = self.mos.read(obj, 0, (h.num_blkptrs * BLKPTR_SIZE as u64) as usize)?;
        for c in raw.chunks_exact(BLKPTR_SIZE) {
            let bp = BlockPointer::decode(c, true).map_err(|e| ZfsError::corrupt(format!("bpobj {obj}"), e))?;
            if !bp.is_hole() {
                out.push(bp);
            }
        }
        for sub in self.bpobj_subobjs(&h)? {
            self.bpobj_read_all(sub, depth + 1, out)?;
        }
        Ok(())
    }

    /// The sub-bpobjs a bpobj lists (its bpo_subobjs array).
    fn bpobj_subobjs(&mut self, h: &BpobjPhys) -> Result<Vec<u64>> {
        if h.subobjs == 0 {
            return Ok(Vec::new());
        }
        let n = h.num_subobjs.min(1 << 24);
        let raw = self.mos.read(h.subobjs, 0, (n * 8) as usize)?;
        Ok(raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).filter(|&o| o != 0).collect())
    }

    /// Add the content of bpobj `src` (then gone) to deadlist `dl`'s entry at `entry`
    /// (mintxg, bpobj): an entry still naming the empty bpobj takes `src` itself, as
    /// dle_enqueue_subobj does; otherwise `src`'s bps are appended and `src` freed. The
    /// deadlist's header is not changed. Returns the entry's bpobj after.
    fn entry_take(&mut self, dl: u64, entry: (u64, u64), src: u64) -> Result<u64> {
        let empty = self.empty_bpobj()?;
        if src == empty && empty != 0 {
            self.bpobj_decr_empty()?;
            return Ok(entry.1);
        }
        if entry.1 == empty && empty != 0 {
            self.bpobj_decr_empty()?;
            self.mos.zap_add_u64(dl, &format!("{:x}", entry.0), src)?;
            return Ok(src);
        }
        let mut bps = Vec::new();
        self.bpobj_read_all(src, 0, &mut bps)?;
        if !bps.is_empty() {
            self.bpobj_enqueue(entry.1, &bps)?;
        }
        self.bpobj_free(src)?;
        Ok(entry.1)
    }

    /// dsl_deadlist_remove_key: the entry `mintxg` merges into the one before it.
    pub(crate) fn deadlist_remove_key(&mut self, dl: u64, mintxg: u64) -> Result<()> {
        if self.deadlist_oldfmt(dl)? {
            return Ok(());
        }
        let entries = self.deadlist_entries(dl)?;
        let Some(i) = entries.iter().position(|&(t, _)| t == mintxg) else { return Ok(()) };
        self.mos.zap_remove(dl, &format!("{mintxg:x}"))?;
        match i.checked_sub(1) {
            Some(p) => {
                self.entry_take(dl, entries[p], entries[i].1)?;
            }
            None => {
                // No entry before it (cannot happen for a key a snapshot added): keep its
                // blocks under the next one, else free it.
                match entries.get(i + 1) {
                    Some(&next) => {
                        self.entry_take(dl, next, entries[i].1)?;
                    }
                    None => self.deadlist_entry_free(entries[i].1)?,
                }
            }
        }
        Ok(())
    }

    fn deadlist_entry_free(&mut self, obj: u64) -> Result<()> {
        let empty = self.empty_bpobj()?;
        if obj == empty && empty != 0 {
            self.bpobj_decr_empty()
        } else {
            self.bpobj_free(obj)
        }
    }

    /// dsl_deadlist_space_range: the space of the entries of new-format `dl` with
    /// mintxg in [min, max).
    pub(crate) fn deadlist_space_range(&mut self, dl: u64, min: u64, max: u64) -> Result<SpaceDelta> {
        let empty = self.empty_bpobj()?;
        let mut d = SpaceDelta::default();
        for (t, obj) in self.deadlist_entries(dl)? {
            if t >= min && t < max && !(obj == empty && empty != 0) {
                let s = self.bpobj_space(obj)?;
                d.dsize += s.dsize;
                d.psize += s.psize;
                d.lsize += s.lsize;
            }
        }
        Ok(d)
    }

    /// Take the entries of new-format `dl` with mintxg >= `min` out of it: their blocks (to
    /// be freed) and their space; the header goes down by it (dsl_deadlist_move_bpobj, with
    /// the blocks freed at once instead of through the pool's free bpobj).
    pub(crate) fn deadlist_take_from(&mut self, dl: u64, min: u64) -> Result<(Vec<BlockPointer>, SpaceDelta)> {
        let mut bps = Vec::new();
        let mut d = SpaceDelta::default();
        let empty = self.empty_bpobj()?;
        for (t, obj) in self.deadlist_entries(dl)? {
            if t < min {
                continue;
            }
            if !(obj == empty && empty != 0) {
                let s = self.bpobj_space(obj)?;
                d.dsize += s.dsize;
                d.psize += s.psize;
                d.lsize += s.lsize;
                self.bpobj_read_all(obj, 0, &mut bps)?;
            }
            self.deadlist_entry_free(obj)?;
            self.mos.zap_remove(dl, &format!("{t:x}"))?;
        }
        let mut hdr = self.mos.bonus(dl)?;
        add3(&mut hdr, &SpaceDelta { dsize: -d.dsize, psize: -d.psize, lsize: -d.lsize });
        self.mos.set_bonus(dl, &hdr)?;
        Ok((bps, d))
    }

    /// dsl_deadlist_merge of new-format deadlist `src` into `dl`: each entry of `src` goes to
    /// the entry of `dl` with the same mintxg or the nearest before it; `src` is freed.
    pub(crate) fn deadlist_merge_free(&mut self, dl: u64, src: u64) -> Result<()> {
        // An old-format one (a bpobj, made before the pool's upgrade to version 26): its
        // blocks go in one by one (dsl_deadlist_merge's bpobj case).
        if self.deadlist_oldfmt(src)? {
            let mut bps = Vec::new();
            self.bpobj_read_all(src, 0, &mut bps)?;
            self.deadlist_insert(dl, &bps)?;
            return self.bpobj_free(src);
        }
        let mut space = SpaceDelta::default();
        for (t, obj) in self.deadlist_entries(src)? {
            let empty = self.empty_bpobj()?;
            if !(obj == empty && empty != 0) {
                let s = self.bpobj_space(obj)?;
                space.dsize += s.dsize;
                space.psize += s.psize;
                space.lsize += s.lsize;
            }
            let entries = self.deadlist_entries(dl)?;
            let i = entries.partition_point(|&(k, _)| k <= t).saturating_sub(1);
            match entries.get(i) {
                Some(&e) => {
                    self.entry_take(dl, e, obj)?;
                }
                None => {
                    self.mos.zap_add_u64(dl, &format!("{t:x}"), obj)?;
                }
            }
        }
        let mut hdr = self.mos.bonus(dl)?;
        add3(&mut hdr, &space);
        self.mos.set_bonus(dl, &hdr)?;
        self.mos.free_object(src)
    }

    /// The dead blocks of a dataset's sync (born at or before its ds_prev_snap_txg, already
    /// out of its tree and its referenced bytes): onto its deadlist, with the accounting of
    /// dsl_dataset_block_kill. `unique` is the dataset's unique bytes before the sync and
    /// `delta` the tree's change (dead blocks counted out).
    pub(crate) fn dataset_blocks_dead(&mut self, ds: u64, unique: u64, delta: &SpaceDelta, dead: &[BlockPointer]) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        let p = self.ds_phys(ds)?;
        let dir = p.dir_obj;
        let ddp = self.dir_phys(dir)?;
        let origin_txg = if ddp.origin_obj != 0 { self.ds_phys(ddp.origin_obj)?.creation_txg } else { 0 };
        let all = sums(&root, dead);
        let xfer: i64 = dead.iter().filter(|b| b.birth > origin_txg).map(|b| dsize_of(&root, b) as i64).sum();
        if p.prev_snap_obj != 0 {
            let mut prev = self.ds_phys(p.prev_snap_obj)?;
            if prev.next_snap_obj == ds {
                let more: u64 = dead.iter().filter(|b| b.birth > prev.prev_snap_txg).map(|b| dsize_of(&root, b)).sum();
                if more > 0 {
                    prev.unique_bytes += more;
                    self.mos.set_bonus(p.prev_snap_obj, &prev.encode())?;
                }
            }
        }
        // The dir keeps the dead blocks (they move to SNAP); the rest of the change is HEAD's.
        let net = SpaceDelta { dsize: delta.dsize + all.dsize, psize: delta.psize + all.psize, lsize: delta.lsize + all.lsize };
        self.ds_diduse(dir, unique, &net)?;
        if xfer != 0 {
            self.dir_transfer(dir, 0, 0, 0, xfer, DD_USED_HEAD, DD_USED_SNAP)?;
        }
        self.deadlist_insert(p.deadlist_obj, dead)
    }
}
