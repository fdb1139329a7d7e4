//! metaslab: the allocator. Each top-level vdev is cut into 2^metaslab_shift metaslabs, each
//! with a space map object in the MOS (listed by the vdev's metaslab array).
//!
//! In memory per metaslab: the free segments; the allocations and frees of the syncing txg
//! not yet written to its space map (a sync pass writes them: ALLOC then FREE entries after a
//! debug entry each, as OpenZFS does); frees already written wait two txgs (TXG_DEFER_SIZE)
//! before they can be allocated again. A block allocated and freed within the same sync pass
//! never reaches the space map.
//!
//! First version: first-fit over the free segments, rotating over the top-level vdevs; ditto
//! copies go to another vdev when there is one. Histograms count free segments by power of
//! two, in units of the vdev's sector.
//!
//! A top-level vdev being removed allocates nothing: while it is evacuated (`Removing`, the
//! mapping of what was copied) its frees also free the copies of the part already copied;
//! once evacuated its frees go through the mapping to the copies only.
//!
//! Obsolete space (feature obsolete_counts, OpenZFS's vdev_indirect_mark_obsolete): a free of
//! a range of a removed vdev, or of the part of a vdev being evacuated that was copied
//! already, also marks that range obsolete on the vdev (a destination that is itself removed
//! is marked too, on the way down). The marks of a txg are handed to the sync
//! (`take_obsolete`), which appends them to the vdev's obsolete space map.
use crate::range_tree::{RangeError, RangeTree};
use crate::vdev::Vdev;
use crate::zio::{AllocClass, DvaAllocator};
use oxzfs_format::blkptr::{BlockPointer, Dva};
use oxzfs_format::spacemap::{encode_entries, SmEntry, SpaceMapPhys};

pub struct MsSync {
    pub vdev: u64,
    pub ms_id: u64,
    pub sm_object: u64,
    pub words: Vec<u64>,
    pub new_phys: SpaceMapPhys,
}

/// The most freed ranges a metaslab remembers for autotrim between two passes (the rest is
/// left to a manual trim).
const TRIM_PENDING_MAX: usize = 1 << 16;

#[derive(Default)]
struct Ms {
    start: u64,
    size: u64,
    free: RangeTree,
    sm_object: u64,
    phys: SpaceMapPhys,
    /// Allocations not yet in the space map: (offset, size, txg). The txg is the sync's for
    /// blocks the sync writes, the open one's for intent-log blocks allocated while a txg
    /// syncs: each reaches the space map with its own txg.
    pend_alloc: Vec<(u64, u64, u64)>,
    pend_free: Vec<(u64, u64)>,
    freeing: Vec<(u64, u64)>,
    defer: [Vec<(u64, u64)>; 2],
    /// With autotrim on: ranges that became allocatable again since the last autotrim pass
    /// (OpenZFS's ms_trim), to be trimmed where they are still free then.
    trim_pending: Vec<(u64, u64)>,
}

/// Space freed that is free already (a double free), or allocated that is not free: the free
/// tree refuses it, and the allocator stops there (its state could no longer be trusted).
#[inline]
fn add(t: &mut RangeTree, s: u64, l: u64) {
    if let Err(e) = t.add(s, l) {
        damaged("double free", e);
    }
}

#[inline]
fn remove(t: &mut RangeTree, s: u64, l: u64) {
    if let Err(e) = t.remove(s, l) {
        damaged("remove of space not free", e);
    }
}

#[cold]
#[inline(never)]
fn damaged(what: &str, e: RangeError) -> ! {
    panic!("{what}: {e}")
}

struct Group {
    class: AllocClass,
    /// Being removed: allocates nothing.
    retired: bool,
    /// Evacuated by device removal: its space maps are gone, the sync leaves it alone, and
    /// frees of its ranges wait in `late_frees` for the mapping to send them on.
    evacuated: bool,
    late_frees: Vec<(u64, u64)>,
    /// Once the removal is on disk: where the evacuated vdev's ranges went (its frees are
    /// sent there).
    mapping: Option<std::sync::Arc<crate::vdev::indirect::IndirectMapping>>,
    /// Being evacuated (a removal in progress): what has been copied so far. The vdev keeps
    /// its space maps; a free below the mapping's max offset also frees the copy, a free
    /// above it is counted as done (the copy will not visit it).
    removing: Option<Box<Removing>>,
    /// Ranges of this removed (or being removed) vdev marked obsolete since the last sync
    /// pass took them (vdev_obsolete_segments).
    obsolete: Vec<(u64, u64)>,
    ashift: u8,
    ms_shift: u64,
    ms: Vec<Ms>,
}

/// The in-core state of an evacuation in progress (OpenZFS's spa_vdev_removal_t): the
/// mapping of what was copied, in source order; everything allocated below
/// `mapping.phys.max_offset` has its copy.
#[derive(Debug, Default)]
pub struct Removing {
    pub mapping: crate::vdev::indirect::IndirectMapping,
    /// Bytes freed beyond the copied part since the last look (they need no copy: done).
    pub freed_unvisited: u64,
}

#[derive(Default)]
pub struct Metaslabs {
    groups: Vec<Group>,
    rotor: usize,
    /// The pool has obsolete_counts enabled: frees of removed ranges are marked obsolete.
    pub obsolete_counts: bool,
    /// autotrim=on: space that becomes free again is remembered for the autotrim pass.
    pub autotrim: bool,
}

impl Metaslabs {
    pub fn new_pool(root: &Vdev) -> Metaslabs {
        let groups = root
            .children
            .iter()
            .map(|top| {
                let shift = if top.metaslab_shift != 0 { top.metaslab_shift } else { metaslab_shift(top.asize) };
                // Holes and removed (indirect) vdevs take no allocations.
                let count = if top.is_concrete() { top.asize >> shift } else { 0 };
                let ms = (0..count)
                    .map(|i| {
                        Ms { start: i << shift, size: 1 << shift, free: RangeTree::with_range(i << shift, 1 << shift), ..Default::default() }
                    })
                    .collect();
                let class = if top.is_log {
                    AllocClass::Log
                } else {
                    match top.alloc_bias.as_str() {
                        "special" => AllocClass::Special,
                        "dedup" => AllocClass::Dedup,
                        _ => AllocClass::Normal,
                    }
                };
                // A removed vdev's frees go through its mapping (loaded with the MOS).
                let mapping = top.indirect.as_ref().and_then(|c| c.mapping());
                let evacuated = mapping.is_some();
                Group { class, retired: evacuated, evacuated, late_frees: Vec::new(), mapping, removing: None, obsolete: Vec::new(), ashift: top.ashift, ms_shift: shift, ms }
            })
            .collect();
        Metaslabs { groups, rotor: 0, obsolete_counts: false, autotrim: false }
    }

    /// Whether some top-level vdev belongs to `class` (and takes allocations).
    pub fn has_class(&self, class: AllocClass) -> bool {
        self.groups.iter().any(|g| g.class == class && !g.retired)
    }

    /// Top-level vdev `vdev` allocates nothing more (it is being removed).
    pub fn retire_group(&mut self, vdev: u64) {
        if let Some(g) = self.groups.get_mut(vdev as usize) {
            g.retired = true;
        }
    }

    /// Top-level vdev `vdev` takes allocations again (a faulted log device cleared).
    pub fn unretire_group(&mut self, vdev: u64) {
        if let Some(g) = self.groups.get_mut(vdev as usize) {
            g.retired = false;
        }
    }

    /// The allocated ranges of top-level vdev `vdev`, in order: what is neither free nor on its
    /// way to being free (freed in a txg not yet synced, or still deferred).
    pub fn allocated_segments(&self, vdev: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let Some(g) = self.groups.get(vdev as usize) else { return out };
        for m in &g.ms {
            let mut unused = m.free.clone();
            for &(s, l) in m.pend_free.iter().chain(m.freeing.iter()).chain(m.defer.iter().flatten()) {
                add(&mut unused, s, l);
            }
            let mut at = m.start;
            for (s, e) in unused.iter_starting_in(m.start, m.start + m.size) {
                if s > at {
                    out.push((at, s - at));
                }
                at = at.max(e);
            }
            if at < m.start + m.size {
                out.push((at, m.start + m.size - at));
            }
        }
        out
    }

    /// The allocated ranges of top-level vdev `vdev` from offset `from` on, in order, until
    /// they add up to `max` bytes or more (the last one may go past; callers clip it).
    pub fn allocated_segments_from(&self, vdev: u64, from: u64, max: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let Some(g) = self.groups.get(vdev as usize) else { return out };
        let mut total = 0u64;
        for m in g.ms.iter().skip((from >> g.ms_shift) as usize) {
            let mut unused = m.free.clone();
            for &(s, l) in m.pend_free.iter().chain(m.freeing.iter()).chain(m.defer.iter().flatten()) {
                add(&mut unused, s, l);
            }
            let mut at = m.start.max(from);
            let end = m.start + m.size;
            if at >= end {
                continue;
            }
            // A free segment that straddles `from` starts below it.
            if let Some((_, e)) = unused.segment_at(at) {
                at = at.max(e);
            }
            let mut push = |s: u64, l: u64, total: &mut u64| {
                out.push((s, l));
                *total += l;
            };
            for (s, e) in unused.iter_starting_in(at, end) {
                if s > at {
                    push(at, s - at, &mut total);
                    if total >= max {
                        return out;
                    }
                }
                at = at.max(e);
            }
            if at < end {
                push(at, end - at, &mut total);
                if total >= max {
                    return out;
                }
            }
        }
        out
    }

    /// The metaslabs of top-level vdev `vdev` as (start, size), in order; empty for a vdev
    /// that allocates nothing any more (evacuated, being removed) or has none.
    pub fn metaslab_ranges(&self, vdev: u64) -> Vec<(u64, u64)> {
        let Some(g) = self.groups.get(vdev as usize).filter(|g| !g.evacuated && g.removing.is_none()) else { return Vec::new() };
        g.ms.iter().map(|m| (m.start, m.size)).collect()
    }

    /// The allocatable (free) ranges of top-level vdev `vdev` within `[start, end)`, clipped
    /// to it, as (offset, length) in order: space no block of any tree the pool may still go
    /// back to holds (the frees of the last txgs are still deferred, not in it). What a TRIM
    /// may discard while the caller keeps allocations off (the pool's lock).
    pub fn free_ranges(&self, vdev: u64, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let Some(g) = self.groups.get(vdev as usize).filter(|g| !g.evacuated && g.removing.is_none()) else { return out };
        if end <= start {
            return out;
        }
        for m in g.ms.iter().skip((start >> g.ms_shift) as usize) {
            if m.start >= end {
                break;
            }
            let (a, b) = (start.max(m.start), end.min(m.start + m.size));
            if a < b {
                out.extend(m.free.overlap(a, b - a).into_iter().map(|(x, y)| (x, y - x)));
            }
        }
        out
    }

    /// Turn the remembering of freed space for autotrim on or off (off forgets what was
    /// remembered).
    pub fn set_autotrim(&mut self, on: bool) {
        self.autotrim = on;
        if !on {
            for m in self.groups.iter_mut().flat_map(|g| g.ms.iter_mut()) {
                m.trim_pending = Vec::new();
            }
        }
    }

    /// What the autotrim pass of top-level vdev `vdev` trims: the ranges freed since the last
    /// pass that are still free now, merged, in order (taken: the next pass starts afresh).
    pub fn take_autotrim(&mut self, vdev: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let Some(g) = self.groups.get_mut(vdev as usize) else { return out };
        let usable = !g.evacuated && g.removing.is_none();
        for m in &mut g.ms {
            let mut pend = std::mem::take(&mut m.trim_pending);
            if !usable || pend.is_empty() {
                continue;
            }
            pend.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (s, l) in pend {
                match merged.last_mut() {
                    Some(last) if last.0 + last.1 >= s => last.1 = last.1.max(s + l - last.0),
                    _ => merged.push((s, l)),
                }
            }
            for (s, l) in merged {
                for (a, b) in m.free.overlap(s, l) {
                    match out.last_mut() {
                        Some(last) if last.0 + last.1 == a => last.1 += b - a,
                        _ => out.push((a, b - a)),
                    }
                }
            }
        }
        out
    }

    /// Give back to autotrim what a pass took and did not get to (`take_autotrim`'s ranges).
    pub fn requeue_autotrim(&mut self, vdev: u64, ranges: &[(u64, u64)]) {
        let Some(g) = self.groups.get_mut(vdev as usize) else { return };
        for &(s, l) in ranges {
            // A merged range may span metaslabs: each part to its own.
            let mut at = s;
            while at < s + l {
                let Some(m) = g.ms.get_mut((at >> g.ms_shift) as usize) else { break };
                let end = (s + l).min(m.start + m.size);
                m.trim_pending.push((at, end - at));
                at = end;
            }
        }
    }

    /// Top-level vdev `vdev` starts (or, at import, goes on with) its evacuation, `mapping`
    /// holding what is copied already: it allocates nothing more.
    pub fn start_removing(&mut self, vdev: u64, mapping: crate::vdev::indirect::IndirectMapping) {
        if let Some(g) = self.groups.get_mut(vdev as usize) {
            g.retired = true;
            g.removing = Some(Box::new(Removing { mapping, freed_unvisited: 0 }));
        }
    }

    /// The evacuation in progress of top-level vdev `vdev`.
    pub fn removing_mut(&mut self, vdev: u64) -> Option<&mut Removing> {
        self.groups.get_mut(vdev as usize).and_then(|g| g.removing.as_deref_mut())
    }

    /// The bytes freed past the copied part of the vdev being evacuated since the last call
    /// (they need no copy: done), taken.
    pub fn take_freed_unvisited(&mut self) -> u64 {
        self.groups.iter_mut().filter_map(|g| g.removing.as_deref_mut()).map(|r| std::mem::take(&mut r.freed_unvisited)).sum()
    }

    /// The evacuation of `vdev` ends (finished or canceled): its state is handed back.
    pub fn take_removing(&mut self, vdev: u64) -> Option<Removing> {
        self.groups.get_mut(vdev as usize).and_then(|g| g.removing.take()).map(|b| *b)
    }

    /// A free of `[offset, offset + asize)` of a vdev being evacuated (free_from_removing_vdev):
    /// the part already copied also frees its copies, the part not yet visited is counted as
    /// done. The source itself is freed by the caller.
    fn free_removing(&mut self, vdev: u64, offset: u64, asize: u64, held: bool, txg: u64, birth: u64) {
        let Some(r) = self.groups[vdev as usize].removing.as_deref_mut() else { return };
        let copied_to = r.mapping.phys.max_offset;
        let below = copied_to.saturating_sub(offset).min(asize);
        r.freed_unvisited += asize - below;
        if below == 0 {
            return;
        }
        let pieces = r.mapping.remap(offset, below).unwrap_or_default();
        if !pieces.is_empty() {
            self.mark_obsolete(vdev, offset, below);
        }
        for p in pieces {
            if held {
                self.free_held(p.vdev, p.offset, p.len);
            } else {
                self.free(p.vdev, p.offset, p.len, txg, birth);
            }
        }
    }

    /// `[offset, offset + len)` of removed (or being removed) vdev `vdev` is referenced no
    /// more (vdev_indirect_mark_obsolete): kept for the obsolete space map when the pool
    /// counts obsolete space.
    fn mark_obsolete(&mut self, vdev: u64, offset: u64, len: u64) {
        if self.obsolete_counts && len > 0 {
            self.groups[vdev as usize].obsolete.push((offset, len));
        }
    }

    /// The obsolete marks made since the last call, per vdev, sorted with adjacent ranges
    /// joined (what the sync appends to each vdev's obsolete space map).
    pub fn take_obsolete(&mut self) -> Vec<(u64, Vec<(u64, u64)>)> {
        let mut out = Vec::new();
        for (i, g) in self.groups.iter_mut().enumerate() {
            if g.obsolete.is_empty() {
                continue;
            }
            let mut segs = std::mem::take(&mut g.obsolete);
            segs.sort_unstable();
            let mut joined: Vec<(u64, u64)> = Vec::with_capacity(segs.len());
            for (s, l) in segs {
                match joined.last_mut() {
                    Some(last) if last.0 + last.1 == s => last.1 += l,
                    // A range freed twice (two block pointers naming one block: damage) is
                    // counted once.
                    Some(last) if last.0 + last.1 > s => {
                        tracing::error!("removed vdev {i}: {s:#x}+{l:#x} marked obsolete twice");
                        let end = (s + l).max(last.0 + last.1);
                        last.1 = end - last.0;
                    }
                    Some(_) => joined.push((s, l)),
                    None => joined.push((s, l)),
                }
            }
            out.push((i as u64, joined));
        }
        out
    }

    /// Forget the obsolete marks of `vdev` not yet synced (a canceled removal).
    pub fn clear_obsolete(&mut self, vdev: u64) {
        if let Some(g) = self.groups.get_mut(vdev as usize) {
            g.obsolete.clear();
        }
    }

    /// The allocation class of top-level vdev `vdev`'s group.
    pub fn group_class(&self, vdev: u64) -> AllocClass {
        self.groups.get(vdev as usize).map_or(AllocClass::Normal, |g| g.class)
    }

    /// Device removal has copied top-level vdev `vdev` away: from now on nothing of it syncs,
    /// and its frees are kept until `set_mapping` sends them on.
    pub fn set_evacuated(&mut self, vdev: u64) {
        if let Some(g) = self.groups.get_mut(vdev as usize) {
            g.retired = true;
            g.evacuated = true;
        }
    }

    /// Removed vdev `vdev`'s mapping was condensed: its frees go through `mapping` from now on
    /// (it maps every range a block may still name as the old one did).
    pub fn replace_mapping(&mut self, vdev: u64, mapping: std::sync::Arc<crate::vdev::indirect::IndirectMapping>) {
        if let Some(g) = self.groups.get_mut(vdev as usize).filter(|g| g.mapping.is_some()) {
            g.mapping = Some(mapping);
        }
    }

    /// The removal of evacuated vdev `vdev` is on disk with `mapping`: the frees of its ranges
    /// made since `set_evacuated`, and all later ones, go to the copies (in `txg`). Returns the
    /// frees the mapping does not cover (none in a sound pool).
    pub fn set_mapping(&mut self, vdev: u64, mapping: std::sync::Arc<crate::vdev::indirect::IndirectMapping>, txg: u64) -> Vec<(u64, u64)> {
        let Some(g) = self.groups.get_mut(vdev as usize) else { return Vec::new() };
        g.mapping = Some(mapping.clone());
        let late = std::mem::take(&mut g.late_frees);
        let mut unmapped = Vec::new();
        for (off, len) in late {
            match mapping.remap(off, len) {
                Ok(pieces) => {
                    self.mark_obsolete(vdev, off, len);
                    for p in pieces {
                        self.free(p.vdev, p.offset, p.len, txg, txg);
                    }
                }
                Err(_) => unmapped.push((off, len)),
            }
        }
        unmapped
    }

    /// The free segments of top-level vdev `vdev` counted by size, bucket i holding those of
    /// 2^i up to 2^(i+1) bytes (the metaslab group histogram, mg_histogram).
    pub fn free_histogram(&self, vdev: u64) -> [u64; 64] {
        let mut h = [0u64; 64];
        if let Some(g) = self.groups.get(vdev as usize) {
            for (s, e) in g.ms.iter().flat_map(|m| m.free.iter()) {
                let len = e - s;
                if len > 0 {
                    h[63 - len.leading_zeros() as usize] += 1;
                }
            }
        }
        h
    }

    /// (bytes allocated or held, space map objects) of top-level vdev `vdev`.
    pub fn group_usage(&self, vdev: u64) -> (u64, Vec<u64>) {
        let Some(g) = self.groups.get(vdev as usize) else { return (0, Vec::new()) };
        let mut used = 0i64;
        let mut sms = Vec::new();
        for m in &g.ms {
            used += m.phys.alloc;
            used += m.pend_alloc.iter().map(|a| a.1 as i64).sum::<i64>();
            used += m.defer.iter().flatten().chain(m.freeing.iter()).map(|(_, l)| *l as i64).sum::<i64>();
            if m.sm_object != 0 {
                sms.push(m.sm_object);
            }
        }
        (used.max(0) as u64, sms)
    }

    /// Allocate from a top-level vdev of `class`, rotating over them. `avoid` lists the
    /// (vdev, offset) of the block's other copies: another vdev is preferred, then another
    /// metaslab of the same vdev (ditto blocks survive the loss of a region), then anything.
    pub fn alloc(&mut self, class: AllocClass, asize_of: &dyn Fn(u64) -> u64, txg: u64, avoid: &[(u64, u64)]) -> Option<(u64, u64, u64)> {
        let n = self.groups.len();
        for pass in 0..3 {
            for k in 0..n {
                let g = (self.rotor + k) % n;
                if self.groups[g].class != class || self.groups[g].retired || (pass == 0 && avoid.iter().any(|a| a.0 == g as u64)) {
                    continue;
                }
                let asize = asize_of(g as u64);
                let grp = &mut self.groups[g];
                let shift = grp.ms_shift;
                for (mi, m) in grp.ms.iter_mut().enumerate() {
                    if pass == 1 && avoid.iter().any(|a| a.0 == g as u64 && (a.1 >> shift) as usize == mi) {
                        continue;
                    }
                    let found = m.free.first_fit(asize);
                    if let Some(s) = found {
                        remove(&mut m.free, s, asize);
                        m.pend_alloc.push((s, asize, txg));
                        self.rotor = (g + 1) % n;
                        return Some((g as u64, s, asize));
                    }
                }
            }
        }
        None
    }

    /// A free of a range no metaslab of the pool holds whole: a block pointer read from disk
    /// that names space past its vdev's metaslabs, across two of them, or on a vdev without
    /// any (a hole). Logged and left alone (the space map would refuse it at the next import).
    fn bogus_free(&self, vdev: u64, offset: u64, asize: u64) -> bool {
        let Some(g) = self.groups.get(vdev as usize) else { return self.refuse_free(vdev, offset, asize) };
        if g.evacuated {
            return false;
        }
        let ms = offset >> g.ms_shift;
        let inside = offset.checked_add(asize).is_some_and(|end| asize > 0 && ms < g.ms.len() as u64 && (end - 1) >> g.ms_shift == ms);
        !inside && self.refuse_free(vdev, offset, asize)
    }

    #[cold]
    fn refuse_free(&self, vdev: u64, offset: u64, asize: u64) -> bool {
        tracing::error!("free of {vdev}:{offset:#x}:{asize:#x}, which no metaslab of the pool holds whole: left alone");
        true
    }

    pub fn free(&mut self, vdev: u64, offset: u64, asize: u64, txg: u64, birth: u64) {
        if self.bogus_free(vdev, offset, asize) {
            return;
        }
        let g = &mut self.groups[vdev as usize];
        if g.evacuated {
            if let Some(m) = g.mapping.clone() {
                // A range the mapping does not cover (a bogus free) is not marked: OpenZFS
                // asserts every obsolete range is mapped.
                let pieces = m.remap(offset, asize).unwrap_or_default();
                if !pieces.is_empty() {
                    self.mark_obsolete(vdev, offset, asize);
                }
                for p in pieces {
                    self.free(p.vdev, p.offset, p.len, txg, birth);
                }
            } else {
                g.late_frees.push((offset, asize));
            }
            return;
        }
        if g.removing.is_some() {
            self.free_removing(vdev, offset, asize, false, txg, birth);
        }
        let g = &mut self.groups[vdev as usize];
        let m = &mut g.ms[(offset >> g.ms_shift) as usize];
        if let Some(i) = m.pend_alloc.iter().position(|&(s, l, _)| s == offset && l == asize) {
            m.pend_alloc.remove(i);
            add(&mut m.free, offset, asize);
        } else {
            m.pend_free.push((offset, asize));
        }
    }

    /// Free an intent-log block. Unlike `free`, an allocation still pending (made in the
    /// txg being synced, not in the space map yet) is not handed back at once: the sync under
    /// way could then write over it before its uberblock lands, and a crash would find the
    /// log block destroyed while the previous uberblock's chain still needs it. It is held
    /// for the two deferred txgs instead (and never reaches the space map).
    pub fn free_held(&mut self, vdev: u64, offset: u64, asize: u64) {
        if self.bogus_free(vdev, offset, asize) {
            return;
        }
        let g = &mut self.groups[vdev as usize];
        if g.evacuated {
            if let Some(m) = g.mapping.clone() {
                let pieces = m.remap(offset, asize).unwrap_or_default();
                if !pieces.is_empty() {
                    self.mark_obsolete(vdev, offset, asize);
                }
                for p in pieces {
                    self.free_held(p.vdev, p.offset, p.len);
                }
            } else {
                g.late_frees.push((offset, asize));
            }
            return;
        }
        if g.removing.is_some() {
            self.free_removing(vdev, offset, asize, true, 0, 0);
        }
        let g = &mut self.groups[vdev as usize];
        let m = &mut g.ms[(offset >> g.ms_shift) as usize];
        if let Some(i) = m.pend_alloc.iter().position(|&(s, l, _)| s == offset && l == asize) {
            m.pend_alloc.remove(i);
            m.freeing.push((offset, asize));
        } else {
            m.pend_free.push((offset, asize));
        }
    }

    pub fn sync(&mut self, txg: u64, pass: u64) -> Vec<MsSync> {
        let mut out = Vec::new();
        for (gi, g) in self.groups.iter_mut().enumerate().filter(|(_, g)| !g.evacuated) {
            let sh = g.ashift;
            for (mi, m) in g.ms.iter_mut().enumerate() {
                let allocs: Vec<(u64, u64)> = m.pend_alloc.iter().filter(|a| a.2 <= txg).map(|a| (a.0, a.1)).collect();
                if allocs.is_empty() && m.pend_free.is_empty() {
                    continue;
                }
                let mut ents = Vec::new();
                let mut delta: i64 = 0;
                for (kind, list) in [(0u8, &allocs), (1u8, &m.pend_free)] {
                    if list.is_empty() {
                        continue;
                    }
                    ents.push(SmEntry::Debug { action: kind, syncpass: pass, txg });
                    let mut l = list.clone();
                    l.sort();
                    for (s, len) in l {
                        ents.push(SmEntry::Range { free: kind == 1, offset: (s - m.start) >> sh, run: len >> sh, vdev: None });
                        delta += if kind == 0 { len as i64 } else { -(len as i64) };
                    }
                }
                let words = encode_entries(&ents, false);
                m.phys.length += words.len() as u64 * 8;
                m.phys.alloc += delta;
                m.freeing.extend(m.pend_free.drain(..));
                m.pend_alloc.retain(|a| a.2 > txg);
                let mut hist = [0u64; 32];
                for (s, e) in m.free.iter() {
                    let len = e - s;
                    let b = (63 - len.leading_zeros() as i64 - sh as i64).clamp(0, 31) as usize;
                    hist[b] += 1;
                }
                m.phys.histogram = hist;
                out.push(MsSync { vdev: gi as u64, ms_id: mi as u64, sm_object: m.sm_object, words, new_phys: m.phys.clone() });
            }
        }
        out
    }

    /// Claim `[offset, offset + asize)` of top-level vdev `vdev` as allocated in `txg`
    /// (zio_claim: an intent-log block a crash left allocated in a txg that never synced).
    /// False when the space is not free (it is someone else's, or the claim is bogus).
    pub fn claim(&mut self, vdev: u64, offset: u64, asize: u64, txg: u64) -> bool {
        let Some(g) = self.groups.get_mut(vdev as usize) else { return false };
        let Some(m) = g.ms.get_mut((offset >> g.ms_shift) as usize) else { return false };
        if asize == 0 || offset + asize > m.start + m.size {
            return false;
        }
        if m.free.remove(offset, asize).is_err() {
            return false;
        }
        m.pend_alloc.push((offset, asize, txg));
        true
    }

    /// Hold the free run that starts at `offset` of top-level vdev `vdev`, up to `max` bytes
    /// and within its metaslab, as allocated in `txg`, for a moment (the intent log's hole
    /// filling, `zil::FillAhead`): nobody else is handed that space until `unclaim` gives
    /// it back. The length held (0: `offset` does not start a free run).
    pub fn claim_run(&mut self, vdev: u64, offset: u64, max: u64, txg: u64) -> u64 {
        let Some(g) = self.groups.get_mut(vdev as usize).filter(|g| !g.retired && !g.evacuated && g.removing.is_none()) else { return 0 };
        let Some(m) = g.ms.get_mut((offset >> g.ms_shift) as usize) else { return 0 };
        let Some(e) = m.free.segment_at(offset).map(|(_, e)| e).filter(|&e| e > offset) else { return 0 };
        let len = (e - offset).min(max);
        remove(&mut m.free, offset, len);
        m.pend_alloc.push((offset, len, txg));
        len
    }

    /// Give back what `claim_run` held (never in a space map: it is still pending in `txg`).
    pub fn unclaim(&mut self, vdev: u64, offset: u64, len: u64, txg: u64) {
        let Some(g) = self.groups.get_mut(vdev as usize) else { return };
        let Some(m) = g.ms.get_mut((offset >> g.ms_shift) as usize) else { return };
        if let Some(i) = m.pend_alloc.iter().position(|&a| a == (offset, len, txg)) {
            m.pend_alloc.remove(i);
            add(&mut m.free, offset, len);
        }
    }

    pub fn set_sm_object(&mut self, vdev: u64, ms: u64, obj: u64) {
        let m = &mut self.groups[vdev as usize].ms[ms as usize];
        m.sm_object = obj;
        m.phys.object = obj;
    }

    /// After txg `txg` synced: the frees of txg - 2 become allocatable and this txg's are
    /// deferred. Not while a lock-free reader walks a tree older than txg - 2 (`oldest_reader`,
    /// see `release_deferred`): such a tree may still point at them, and a read that found one
    /// reused could take the new bytes for a bad copy and "repair" them. They stay deferred,
    /// with the next frees (and from then on counted as frees of the newest of them), until no
    /// reader walks a tree that old.
    pub fn sync_done(&mut self, txg: u64, oldest_reader: Option<u64>) {
        let slot = (txg % 2) as usize;
        let hold = oldest_reader.is_some_and(|r| r < txg.saturating_sub(2));
        for g in &mut self.groups {
            for m in &mut g.ms {
                let old = std::mem::take(&mut m.defer[slot]);
                let mut next = std::mem::take(&mut m.freeing);
                if hold {
                    next.extend(old);
                } else {
                    for (s, l) in old {
                        add(&mut m.free, s, l);
                        if self.autotrim && m.trim_pending.len() < TRIM_PENDING_MAX {
                            m.trim_pending.push((s, l));
                        }
                    }
                }
                m.defer[slot] = next;
            }
        }
    }

    /// Make space freed in synced txgs allocatable now, before its two-txg deferral ends
    /// (when the pool is full: the deferral protects rewinding to older uberblocks, and lock-free
    /// readers still walking a tree from before the free). `synced_txg` is the last txg whose
    /// `sync_done` ran (the deferred frees are its and the one before's); the frees of a txg
    /// are released only when no reader walks a tree older than it (`oldest_reader`, the txg of
    /// the oldest tree a reader walks: a tree synced in txg S no longer points at blocks freed
    /// in txgs up to S).
    pub fn release_deferred(&mut self, synced_txg: u64, oldest_reader: Option<u64>) {
        for freed_in in [synced_txg, synced_txg.saturating_sub(1)] {
            if oldest_reader.is_some_and(|s| s < freed_in) {
                continue;
            }
            let slot = (freed_in % 2) as usize;
            for g in &mut self.groups {
                for m in &mut g.ms {
                    for (s, l) in std::mem::take(&mut m.defer[slot]) {
                        add(&mut m.free, s, l);
                        if self.autotrim && m.trim_pending.len() < TRIM_PENDING_MAX {
                            m.trim_pending.push((s, l));
                        }
                    }
                }
            }
        }
    }

    /// Metaslab `ms` of top-level vdev `vdev` from its space map (object `sm`, read from disk):
    /// its entries applied to the metaslab's free space as OpenZFS's space_map_load does.
    /// Entries that contradict themselves or the metaslab (a range outside it or overflowing,
    /// space freed that is free or allocated that is not free) are refused with what is wrong;
    /// the metaslab is then left as it was. An allocated figure in the header other than what
    /// the entries add up to is logged and kept, as OpenZFS keeps it.
    pub fn load(&mut self, vdev: u64, ms: u64, sm: u64, phys: SpaceMapPhys, entries: &[SmEntry]) -> Result<(), String> {
        let name = format!("vdev {vdev} metaslab {ms} (space map object {sm})");
        let Some(g) = self.groups.get_mut(vdev as usize) else { return Err(format!("{name}: the pool has no such vdev")) };
        let sh = g.ashift;
        let Some(m) = g.ms.get_mut(ms as usize) else { return Err(format!("{name}: the vdev has {} metaslabs", g.ms.len())) };
        let (ms_start, ms_end) = (m.start, m.start + m.size);
        let mut free = RangeTree::with_range(ms_start, m.size);
        for e in entries {
            let SmEntry::Range { free: is_free, offset, run, .. } = *e else { continue };
            let what = if is_free { "free" } else { "allocation" };
            let bytes = |units: u64| units.checked_mul(1u64 << sh);
            let (Some(s), Some(l)) = (bytes(offset).and_then(|o| o.checked_add(ms_start)), bytes(run)) else {
                return Err(format!("{name}: {what} of {offset:#x}+{run:#x} sectors overflows"));
            };
            if l == 0 || s.checked_add(l).is_none_or(|end| end > ms_end) {
                return Err(format!("{name}: {what} {s:#x}+{l:#x} is outside the metaslab {ms_start:#x}..{ms_end:#x}"));
            }
            let r = if is_free { free.add(s, l) } else { free.remove(s, l) };
            if let Err(e) = r {
                let wrong = if is_free { "frees space that is free" } else { "allocates space that is not free" };
                return Err(format!("{name}: {what} {s:#x}+{l:#x} {wrong} ({e})"));
            }
        }
        let free_bytes: u64 = free.iter().map(|(s, e)| e - s).sum();
        let allocated = m.size - free_bytes;
        if phys.alloc != allocated as i64 {
            // OpenZFS checks this only in its debug builds (metaslab_verify_space) and carries
            // the header's figure on; so does this load, saying so, rather than refusing a pool
            // OpenZFS imports.
            tracing::warn!("{name}: the header says {} bytes allocated, the entries {allocated}; the header's figure is kept, as OpenZFS keeps it", phys.alloc);
        }
        m.sm_object = sm;
        m.phys = phys;
        m.free = free;
        Ok(())
    }

    /// The mappings of removed vdevs and of a removal in progress, read from disk, checked
    /// where a free goes through them: every destination lies in one metaslab of a top-level
    /// vdev that has metaslabs, or on another removed vdev (whose own mapping sends it on). A
    /// mapping naming anything else is refused with its vdev, entry and destination.
    pub fn check_mappings(&self) -> Result<(), String> {
        for (gi, g) in self.groups.iter().enumerate() {
            let maps = g.mapping.as_deref().into_iter().chain(g.removing.as_deref().map(|r| &r.mapping));
            for m in maps {
                for e in &m.entries {
                    let d = e.dst;
                    let bad = |why: String| Err(format!("the mapping of removed vdev {gi} sends {:#x}+{:#x} to vdev {} offset {:#x}, {why}", e.src, d.asize, d.vdev, d.offset));
                    let Some(to) = self.groups.get(d.vdev as usize).filter(|_| d.vdev != gi as u64) else {
                        return bad("which is no other vdev of the pool".into());
                    };
                    if to.evacuated {
                        continue;
                    }
                    let end = d.offset.checked_add(d.asize).filter(|&e| e > d.offset);
                    let ms = (d.offset >> to.ms_shift) as usize;
                    let inside = end.is_some_and(|end| ms < to.ms.len() && (end - 1) >> to.ms_shift == ms as u64);
                    if !inside {
                        return bad(format!("outside its {} metaslabs of 2^{} bytes", to.ms.len(), to.ms_shift));
                    }
                }
            }
        }
        Ok(())
    }

    /// For tests of damaged pools only: the first sector of the first allocated range of the
    /// first metaslab with a space map is allocated again in `txg` (its sync writes an
    /// allocation entry of space the space map holds allocated, as a writer with a bug would).
    /// Returns (vdev, metaslab, space map object, offset, length).
    pub fn allocate_again_for_test(&mut self, txg: u64) -> Option<(u64, u64, u64, u64, u64)> {
        for (gi, g) in self.groups.iter_mut().enumerate().filter(|(_, g)| !g.evacuated && !g.retired) {
            let unit = 1u64 << g.ashift;
            for (mi, m) in g.ms.iter_mut().enumerate().filter(|(_, m)| m.sm_object != 0) {
                let first_free = m.free.iter().next().map_or(m.start + m.size, |(s, _)| s);
                let at = if first_free > m.start { m.start } else { m.free.iter().next().map(|(_, e)| e).filter(|&e| e < m.start + m.size)? };
                m.pend_alloc.push((at, unit, txg));
                return Some((gi as u64, mi as u64, m.sm_object, at, unit));
            }
        }
        None
    }

    /// Changes of top-level vdev `vdev`'s metaslabs that OpenZFS's log space maps hold and
    /// their space maps do not (spa_log_spacemap::replay), after the space maps are loaded:
    /// `allocs` (free per the space map) become allocations and `frees` (allocated per the
    /// space map) frees of `txg`, which its sync writes to the space maps. Each range must lie
    /// in one metaslab, in whole sectors, and be in the state its change expects.
    pub fn apply_unflushed(&mut self, vdev: u64, allocs: &[(u64, u64)], frees: &[(u64, u64)], txg: u64) -> Result<(), String> {
        let Some(g) = self.groups.get_mut(vdev as usize).filter(|g| !g.evacuated) else {
            return Err(format!("changes of vdev {vdev}, which has no metaslabs"));
        };
        let unit = (1u64 << g.ashift) - 1;
        for (free, list) in [(false, allocs), (true, frees)] {
            for &(s, l) in list {
                let what = if free { "free" } else { "allocation" };
                let m = g.ms.get_mut((s >> g.ms_shift) as usize).filter(|m| l > 0 && s + l <= m.start + m.size && (s | l) & unit == 0);
                let Some(m) = m else { return Err(format!("{what} {s:#x}+{l:#x} of vdev {vdev} is not in one metaslab in whole sectors")) };
                let inside = m.free.contains(s, l);
                let touches = m.free.intersects(s, l);
                if free == touches || (!free && !inside) {
                    let state = if free { "free" } else { "allocated" };
                    return Err(format!("{what} {s:#x}+{l:#x} of vdev {vdev} is {state} in its space map already"));
                }
                if free {
                    m.pend_free.push((s, l));
                } else {
                    remove(&mut m.free, s, l);
                    m.pend_alloc.push((s, l, txg));
                }
            }
        }
        Ok(())
    }

    /// (size, allocated) bytes over every metaslab; space freed but still deferred counts as
    /// allocated (it cannot be allocated yet).
    pub fn space_totals(&self) -> (u64, u64) {
        let mut size = 0;
        let mut alloc = 0i64;
        for g in self.groups.iter().filter(|g| g.class != AllocClass::Log) {
            for m in &g.ms {
                size += m.size;
                alloc += m.phys.alloc;
                let held: u64 = m.defer.iter().flatten().chain(m.freeing.iter()).map(|(_, l)| *l).sum();
                alloc += held as i64;
            }
        }
        (size, alloc.max(0) as u64)
    }
}

/// The metaslabs shared by the txg sync (which allocates the blocks of the syncing txg) and
/// the intent log (which allocates log blocks in the open txg meanwhile): each allocation
/// and free takes the lock briefly.
#[derive(Default, Clone)]
pub struct SharedMs(std::sync::Arc<std::sync::Mutex<Metaslabs>>);

impl SharedMs {
    pub fn new(ms: Metaslabs) -> SharedMs {
        SharedMs(std::sync::Arc::new(std::sync::Mutex::new(ms)))
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Metaslabs> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The allocator seen by the write pipeline: metaslabs of the top-level vdevs.
pub struct PoolAlloc<'a> {
    pub ms: &'a SharedMs,
    pub root: &'a Vdev,
    pub min_alloc: u64,
}

/// asize of `psize` bytes on top-level vdev `top` (vdev_psize_to_asize).
pub fn psize_to_asize(top: &Vdev, psize: u64) -> u64 {
    top.psize_to_asize(psize)
}

impl DvaAllocator for PoolAlloc<'_> {
    fn alloc_dva(&mut self, class: AllocClass, psize: u64, txg: u64, avoid: &[Dva]) -> Option<Dva> {
        let avoid: Vec<(u64, u64)> = avoid.iter().map(|d| (d.vdev, d.offset)).collect();
        let avoid = &avoid[..];
        let root = self.root;
        let asize_of = |v: u64| psize_to_asize(&root.children[v as usize], psize);
        // Special (and dedup) blocks fall back to the normal class when it is full or absent.
        let mut ms = self.ms.lock();
        let (vdev, offset, asize) = match class {
            AllocClass::Normal => ms.alloc(AllocClass::Normal, &asize_of, txg, avoid),
            // spa_preferred_class: DDT blocks go to the dedup class, else to special
            // (zfs_ddt_data_is_special), falling back to normal when that class is full.
            AllocClass::Dedup if !ms.has_class(AllocClass::Dedup) => {
                ms.alloc(AllocClass::Special, &asize_of, txg, avoid).or_else(|| ms.alloc(AllocClass::Normal, &asize_of, txg, avoid))
            }
            c => ms.alloc(c, &asize_of, txg, avoid).or_else(|| ms.alloc(AllocClass::Normal, &asize_of, txg, avoid)),
        }?;
        Some(Dva { vdev, offset, asize, gang: false })
    }
    fn unalloc_dva(&mut self, dva: &Dva, txg: u64) {
        self.ms.lock().free(dva.vdev, dva.offset, dva.asize, txg, txg);
    }
    fn min_alloc(&self) -> u64 {
        self.min_alloc
    }
}

/// metaslab_shift for a top-level vdev of `asize` bytes (vdev_metaslab_set_size, 2.1 tunables).
pub fn metaslab_shift(asize: u64) -> u64 {
    let highbit = |x: u64| if x == 0 { 0 } else { 64 - x.leading_zeros() as u64 };
    let ms_count = asize >> 29;
    let mut shift = if ms_count < 16 {
        highbit(asize / 16)
    } else if ms_count > 200 {
        highbit(asize / 200)
    } else {
        29
    };
    if shift < 24 {
        shift = 24;
    } else if shift > 34 {
        shift = 34;
        if (asize >> shift) > 131072 {
            shift = highbit(asize / 131072);
        }
    }
    shift
}

/// bp_get_dsize: allocated bytes scaled by each vdev's deflate ratio (raidz parity left out).
pub fn dsize_of(root: &Vdev, bp: &BlockPointer) -> u64 {
    bp.dvas()
        .iter()
        .filter(|d| !d.is_empty())
        .map(|d| (d.asize >> 9) * crate::vdev::deflate_ratio(&root.children[d.vdev as usize]))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_metaslab() -> Metaslabs {
        let m = Ms { start: 0, size: 1 << 20, free: RangeTree::with_range(0, 1 << 20), ..Default::default() };
        Metaslabs { groups: vec![Group { class: AllocClass::Normal, retired: false, evacuated: false, late_frees: Vec::new(), mapping: None, removing: None, obsolete: Vec::new(), ashift: 9, ms_shift: 20, ms: vec![m] }], rotor: 0, obsolete_counts: false, autotrim: false }
    }

    fn is_free(ms: &Metaslabs, off: u64) -> bool {
        ms.groups[0].ms[0].free.contains(off, 1)
    }

    /// The ENOSPC retry's early release gives back the frees of a txg only when no lock-free
    /// reader walks a tree older than that txg (such a tree may still point at them).
    /// A free on a vdev being evacuated: the part below the copied offset frees its copy as
    /// well, the part beyond is counted as done; the source is freed either way.
    #[test]
    fn frees_of_a_removing_vdev_split_at_the_copied_offset() {
        use crate::vdev::indirect::IndirectMapping;
        use oxzfs_format::removal::{IndirectMappingPhys, MappingEntryPhys};
        let mut ms = one_metaslab();
        let second = one_metaslab().groups.remove(0);
        ms.groups.push(second);
        assert!(ms.claim(0, 0, 0x4000, 5));
        assert!(ms.claim(1, 0x10000, 0x2000, 6));
        let entry = MappingEntryPhys { src: 0, mark: false, dst: Dva { vdev: 1, offset: 0x10000, asize: 0x2000, gang: false } };
        let phys = IndirectMappingPhys { max_offset: 0x2000, bytes_mapped: 0x2000, num_entries: 1, counts_object: 0 };
        ms.start_removing(0, IndirectMapping { phys, entries: vec![entry], births: Vec::new() });
        assert!(ms.alloc(AllocClass::Normal, &|_| 512, 7, &[]).is_some_and(|a| a.0 == 1), "a removing vdev allocates nothing");
        ms.sync(6, 1);
        ms.free(0, 0x1000, 0x2000, 8, 5);
        assert_eq!(ms.groups[1].ms[0].pend_free, vec![(0x11000, 0x1000)]);
        assert_eq!(ms.groups[0].ms[0].pend_free, vec![(0x1000, 0x2000)]);
        assert_eq!(ms.removing_mut(0).unwrap().freed_unvisited, 0x1000);
        // What is still allocated past the copied offset, from there on.
        assert_eq!(ms.allocated_segments_from(0, 0x2000, u64::MAX), vec![(0x3000, 0x1000)]);
        assert_eq!(ms.allocated_segments_from(0, 0, 1), vec![(0, 0x1000)]);
    }

    /// What a TRIM may discard: only space in the free tree (never what is allocated, nor a
    /// free still deferred); autotrim gets the frees that came back since its last pass, less
    /// what was allocated again meanwhile, and nothing while it is off.
    #[test]
    fn trims_see_only_free_space_and_autotrim_what_came_back() {
        let mut ms = one_metaslab();
        ms.set_autotrim(true);
        let sz = |_| 0x4000u64;
        let a: Vec<u64> = (0..4).map(|_| ms.alloc(AllocClass::Normal, &sz, 10, &[]).unwrap().1).collect();
        ms.sync(10, 1);
        ms.sync_done(10, None);
        assert_eq!(ms.free_ranges(0, 0, 1 << 20), vec![(0x10000, (1 << 20) - 0x10000)]);
        assert_eq!(ms.free_ranges(0, 0x8000, 0x20000), vec![(0x10000, 0x10000)]);
        ms.free(0, a[1], 0x4000, 11, 10);
        ms.free(0, a[2], 0x4000, 11, 10);
        ms.sync(11, 1);
        ms.sync_done(11, None);
        ms.sync(12, 1);
        ms.sync_done(12, None);
        assert!(ms.free_ranges(0, 0, 0x10000).is_empty(), "deferred frees are not free yet");
        assert!(ms.take_autotrim(0).is_empty());
        ms.sync(13, 1);
        ms.sync_done(13, None);
        assert_eq!(ms.free_ranges(0, 0, 0x10000), vec![(0x4000, 0x8000)]);
        // Half of it allocated again before the pass: the pass trims the rest only.
        let again = ms.alloc(AllocClass::Normal, &sz, 14, &[]).unwrap().1;
        assert_eq!(again, 0x4000);
        assert_eq!(ms.take_autotrim(0), vec![(0x8000, 0x4000)]);
        assert!(ms.take_autotrim(0).is_empty(), "taken once");
        ms.set_autotrim(false);
        ms.free(0, a[3], 0x4000, 14, 10);
        for t in 14..17 {
            ms.sync(t, 1);
            ms.sync_done(t, None);
        }
        assert!(ms.take_autotrim(0).is_empty(), "nothing remembered while off");
        assert_eq!(ms.metaslab_ranges(0), vec![(0, 1 << 20)]);
    }

    #[test]
    fn release_deferred_spares_blocks_a_reader_may_walk() {
        let mut ms = one_metaslab();
        let sz = |_| 4096u64;
        let a = ms.alloc(AllocClass::Normal, &sz, 10, &[]).unwrap().1;
        let b = ms.alloc(AllocClass::Normal, &sz, 10, &[]).unwrap().1;
        ms.sync(10, 1);
        ms.sync_done(10, None);
        for (txg, off) in [(11, a), (12, b)] {
            ms.free(0, off, 4096, txg, 10);
            ms.sync(txg, 1);
            ms.sync_done(txg, None);
        }
        assert!(!is_free(&ms, a) && !is_free(&ms, b), "both frees are deferred");
        // A reader walks the tree of txg 11: b (freed in 12) may be in it, a (freed in 11) not.
        ms.release_deferred(12, Some(11));
        assert!(is_free(&ms, a), "the free of txg 11 is released");
        assert!(!is_free(&ms, b), "the free of txg 12 waits for the reader");
        ms.release_deferred(12, None);
        assert!(is_free(&ms, b), "released once no reader walks an older tree");
    }

    /// The two-txg deferral waits for a reader walking a tree from before the free.
    #[test]
    fn deferred_frees_wait_for_a_reader_of_an_older_tree() {
        let mut ms = one_metaslab();
        let sz = |_| 4096u64;
        let a = ms.alloc(AllocClass::Normal, &sz, 10, &[]).unwrap().1;
        ms.sync(10, 1);
        ms.sync_done(10, None);
        ms.free(0, a, 4096, 11, 10);
        ms.sync(11, 1);
        ms.sync_done(11, Some(10));
        ms.sync(12, 1);
        ms.sync_done(12, Some(10));
        // txg 13 would release the free of txg 11, but a reader walks the tree of txg 10.
        ms.sync(13, 1);
        ms.sync_done(13, Some(10));
        assert!(!is_free(&ms, a), "held for the reader of txg 10");
        ms.sync(14, 1);
        ms.sync_done(14, Some(12));
        ms.sync(15, 1);
        ms.sync_done(15, Some(13));
        assert!(is_free(&ms, a), "no reader walks a tree from before the free any more");
    }

    /// The intent log's hole filling holds the free run after a log block for a moment:
    /// nothing else is handed it meanwhile, and giving it back leaves no trace in the space
    /// map (the allocator's state is what it was).
    #[test]
    fn a_claimed_run_is_held_and_given_back_without_a_trace() {
        let mut ms = one_metaslab();
        let sz = |_| 8192u64;
        let tail = ms.alloc(AllocClass::Normal, &sz, 10, &[]).unwrap().1;
        assert_eq!(ms.claim_run(0, tail + 8192, 1 << 16, 10), 1 << 16);
        assert!(!is_free(&ms, tail + 8192) && !is_free(&ms, tail + 8192 + 0xffff));
        assert!(is_free(&ms, tail + 8192 + 0x10000));
        let other = ms.alloc(AllocClass::Normal, &sz, 10, &[]).unwrap().1;
        assert_eq!(other, tail + 8192 + 0x10000, "the held run is not handed out");
        assert_eq!(ms.claim_run(0, tail + 4096, 1 << 16, 10), 0, "not the start of a free run");
        // Clipped at the end of the free run (and of the metaslab).
        assert_eq!(ms.claim_run(0, (1 << 20) - 0x3000, 1 << 16, 10), 0x3000);
        ms.unclaim(0, (1 << 20) - 0x3000, 0x3000, 10);
        ms.unclaim(0, tail + 8192, 1 << 16, 10);
        ms.free(0, other, 8192, 10, 10);
        assert!(is_free(&ms, tail + 8192) && is_free(&ms, other));
        let synced = ms.sync(10, 1);
        assert_eq!(synced.len(), 1);
        // The space map gets the tail's allocation only.
        assert_eq!(synced[0].new_phys.alloc, 8192);
    }

    /// A space map whose entries contradict themselves or the metaslab, or whose header's
    /// allocated figure is not what its entries add up to, is refused by name and leaves the
    /// metaslab as it was; a sound one loads.
    #[test]
    fn a_space_map_that_contradicts_itself_is_refused() {
        let range = |free: bool, offset: u64, run: u64| SmEntry::Range { free, offset, run, vdev: None };
        let phys = |alloc: i64| SpaceMapPhys { object: 5, length: 0, alloc, histogram: [0; 32] };
        // In 512-byte sectors: 0x800 sectors per 1 MiB metaslab.
        let cases: &[(&[SmEntry], i64, &str)] = &[
            (&[range(false, 0, 8), range(false, 4, 8)], 0x2000, "allocation 0x800+0x1000 allocates space that is not free"),
            (&[range(false, 0, 8), range(true, 0, 8), range(true, 2, 1)], 0, "free 0x400+0x200 frees space that is free"),
            (&[range(true, 0x10, 1)], 0, "frees space that is free"),
            (&[range(false, 0x7ff, 2)], 0x400, "allocation 0xffe00+0x400 is outside the metaslab 0x0..0x100000"),
            (&[range(false, 0x800, 1)], 0x200, "is outside the metaslab"),
            (&[range(false, 1 << 62, 1)], 0x200, "allocation of 0x4000000000000000+0x1 sectors overflows"),
            (&[range(false, 0, 1 << 36)], 0x200, "is outside the metaslab"),
        ];
        for (entries, alloc, want) in cases {
            let mut ms = one_metaslab();
            let err = ms.load(0, 0, 5, phys(*alloc), entries).unwrap_err();
            assert!(err.starts_with("vdev 0 metaslab 0 (space map object 5): ") && err.contains(want), "{err}");
            assert!(is_free(&ms, 0) && ms.groups[0].ms[0].free.len() == 1 && ms.groups[0].ms[0].sm_object == 0, "left as it was");
        }
        // A header whose allocated figure is not what the entries add up to loads, the figure
        // kept (OpenZFS verifies it only in debug builds).
        let mut ms = one_metaslab();
        ms.load(0, 0, 5, phys(0x1000), &[range(false, 0, 8), range(true, 0, 4)]).unwrap();
        assert!(!is_free(&ms, 0x800) && is_free(&ms, 0) && ms.groups[0].ms[0].phys.alloc == 0x1000);
        let mut ms = one_metaslab();
        assert!(ms.load(0, 1, 5, phys(0), &[]).unwrap_err().contains("the vdev has 1 metaslabs"));
        assert!(ms.load(2, 0, 5, phys(0), &[]).unwrap_err().contains("no such vdev"));
        // Allocated, freed, allocated again: 0x1000 bytes allocated from 0x400 on.
        let ok = [range(false, 0, 8), SmEntry::Debug { action: 0, syncpass: 1, txg: 4 }, range(true, 0, 2), range(false, 8, 2)];
        ms.load(0, 0, 5, phys(0x1000), &ok).unwrap();
        assert!(is_free(&ms, 0) && !is_free(&ms, 0x400) && !is_free(&ms, 0x13ff) && is_free(&ms, 0x1400));
        assert_eq!(ms.space_totals(), (1 << 20, 0x1000));
    }

    /// A removed vdev's mapping that sends a range to no vdev, to itself, or past or across the
    /// metaslabs of its destination is refused by name; one into a metaslab passes.
    #[test]
    fn a_mapping_to_nowhere_is_refused() {
        use crate::vdev::indirect::IndirectMapping;
        use oxzfs_format::removal::MappingEntryPhys;
        let check = |vdev: u64, offset: u64, asize: u64| {
            let mut ms = one_metaslab();
            let second = one_metaslab().groups.remove(0);
            ms.groups.push(second);
            let entry = MappingEntryPhys { src: 0x2000, mark: false, dst: Dva { vdev, offset, asize, gang: false } };
            ms.start_removing(0, IndirectMapping { entries: vec![entry], ..Default::default() });
            ms.check_mappings()
        };
        check(1, 0x10000, 0x2000).unwrap();
        for (v, off, len, want) in [(2, 0, 0x200, "no other vdev"), (0, 0, 0x200, "no other vdev"), (1, 1 << 20, 0x200, "outside its 1 metaslabs of 2^20 bytes"), (1, 0xff000, 0x2000, "outside"), (1, u64::MAX - 0x100, 0x200, "outside")] {
            let err = check(v, off, len).unwrap_err();
            assert!(err.starts_with("the mapping of removed vdev 0 sends 0x2000+") && err.contains(want), "{err}");
        }
    }

    /// Frees of ranges no metaslab holds whole (a block pointer from disk naming a vdev the
    /// pool does not have, space past the metaslabs, or across two) are left alone.
    #[test]
    fn a_free_outside_the_metaslabs_is_left_alone() {
        let mut ms = one_metaslab();
        for (v, off, len) in [(3, 0, 0x200), (0, 1 << 20, 0x200), (0, (1 << 20) - 0x200, 0x400), (0, u64::MAX - 0x100, 0x200), (0, 0, 0)] {
            ms.free(v, off, len, 5, 4);
            ms.free_held(v, off, len);
        }
        assert!(ms.groups[0].ms[0].pend_free.is_empty() && ms.sync(5, 1).is_empty());
    }

    /// Changes replayed from log space maps: allocations leave the free space at once and,
    /// with the frees, reach the space map at the first sync; the frees become allocatable
    /// only after the deferral. A change the space map contradicts is refused by name.
    #[test]
    fn unflushed_changes_reach_the_space_map_at_the_first_sync() {
        let mut ms = one_metaslab();
        // The space map: 0x10000..0x20000 allocated.
        ms.groups[0].ms[0].free = RangeTree::from_ranges(&[(0, 0x10000), (0x20000, (1 << 20) - 0x20000)]).unwrap();
        ms.apply_unflushed(0, &[(0x4000, 0x1000)], &[(0x18000, 0x2000)], 7).unwrap();
        assert!(!is_free(&ms, 0x4000) && !is_free(&ms, 0x18000));
        let out = ms.sync(7, 1);
        assert_eq!(out.len(), 1);
        let ents = oxzfs_format::spacemap::decode_entries(&out[0].words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>(), true).unwrap();
        let ranges: Vec<(bool, u64, u64)> = ents.iter().filter_map(|e| match *e { SmEntry::Range { free, offset, run, .. } => Some((free, offset << 9, run << 9)), _ => None }).collect();
        assert_eq!(ranges, vec![(false, 0x4000, 0x1000), (true, 0x18000, 0x2000)]);
        assert_eq!(out[0].new_phys.alloc, -0x1000);
        for t in 7..10 {
            ms.sync_done(t, None);
        }
        assert!(is_free(&ms, 0x18000) && !is_free(&ms, 0x4000));
        let err = |r: Result<(), String>| r.unwrap_err();
        assert!(err(ms.apply_unflushed(0, &[(0x4000, 0x200)], &[], 10)).contains("allocated in its space map already"));
        assert!(err(ms.apply_unflushed(0, &[], &[(0x30000, 0x200)], 10)).contains("free in its space map already"));
        assert!(err(ms.apply_unflushed(0, &[], &[(0x10100, 0x200)], 10)).contains("whole sectors"));
        assert!(err(ms.apply_unflushed(0, &[(0xff000, 0x2000)], &[], 10)).contains("one metaslab"));
        assert!(err(ms.apply_unflushed(3, &[(0, 0x200)], &[], 10)).contains("no metaslabs"));
    }
}
