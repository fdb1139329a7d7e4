//! vdev_trim: TRIM of the free space of a pool's leaves, as OpenZFS's vdev_trim.c does it:
//! `zpool trim` (manual: every free range of every metaslab, once, with its progress kept in
//! each leaf's ZAP so that an export or a crash does not start it over) and autotrim (the
//! ranges freed since the last pass, every zfs_trim_txg_batch txgs, where they are still free).
//! A file's ranges are punched out (the host file system gets the space back, which a pool of
//! sparse files on a thin disk or a container's volume needs); a block device's discarded.
//!
//! ```text
//!   zpool trim [-d] [-r rate] ─► trim_command (under the pool's lock): each leaf ACTIVE, its
//!          record in its leaf ZAP, synced ─► resume: the pool's trim thread
//!   thread: repeat: under the pool's lock (no txg sync, no intent-log write: nothing is
//!          allocated meanwhile) one trim_step per active leaf (up to TRIM_STEP_EXTENTS free
//!          extents of the metaslab at its offset, translated to the leaf: mirror children
//!          as they are, raidz columns by vdev_raidz_xlate) ─► let go; at the last metaslab
//!          COMPLETE; with autotrim=on, an autotrim pass every zfs_trim_txg_batch txgs
//!   zpool trim -s / -c ─► SUSPENDED (resumes from its offset) / CANCELED (starts over)
//!   export, reopen ─► the thread stops; ACTIVE stays on disk; the next read-write import goes
//!          on from the leaf's last offset (vdev_trim_restart)
//! ```
//!
//! Space is trimmed only while it is in a metaslab's free tree: frees of the last txgs are
//! still deferred (a rewind or a reader of an older tree may need them) and are not there.
//! Lock order: the thread takes the pool (`PoolHandle::lock`) and never holds its own state
//! (`PoolHandle::trim`, a leaf) across it; commands stop the thread before they take the pool.

use crate::dsl_pool::PoolW;
use crate::txg::PoolHandle;
use crate::vdev::{Vdev, VdevKind};
use crate::vdev_removal::RemovalRequest;
use crate::{Result, ZfsError};
use std::sync::Arc;

pub use crate::vdev::{TrimStat, VDEV_TRIM_ACTIVE, VDEV_TRIM_CANCELED, VDEV_TRIM_COMPLETE, VDEV_TRIM_NONE, VDEV_TRIM_SUSPENDED};

/// The leaf ZAP's entries of a manual trim (VDEV_LEAF_ZAP_TRIM_* in sys/fs/zfs.h), one u64
/// each. The offset is the device's, labels included: OpenZFS stores the end of the last
/// TRIM it issued (which has VDEV_LABEL_START_SIZE in it) and compares it with offsets that
/// do not; it is kept so here, and read back without the labels.
pub const LEAF_ZAP_TRIM_LAST_OFFSET: &str = "org.zfsonlinux:next_offset_to_trim";
pub const LEAF_ZAP_TRIM_ACTION_TIME: &str = "org.zfsonlinux:vdev_trim_action_time";
pub const LEAF_ZAP_TRIM_STATE: &str = "org.zfsonlinux:vdev_trim_state";
pub const LEAF_ZAP_TRIM_RATE: &str = "org.zfsonlinux:vdev_trim_rate";
pub const LEAF_ZAP_TRIM_PARTIAL: &str = "org.zfsonlinux:vdev_trim_partial";
pub const LEAF_ZAP_TRIM_SECURE: &str = "org.zfsonlinux:vdev_trim_secure";

/// Free extents, and bytes, one step trims at most before it lets the pool go: the pool's
/// lock is held while they are punched out or discarded (nothing may be allocated there
/// meanwhile), so a step is kept short. An autotrim pass is cut into steps as well.
const TRIM_STEP_EXTENTS: usize = 64;
const TRIM_STEP_BYTES: u64 = 64 << 20;

/// What `zpool trim` asks of the leaves it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimCmd {
    Start { rate: Option<u64>, secure: bool },
    Suspend,
    Cancel,
}

/// How a step of a leaf's trim ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    More,
    Done,
}

/// vdev_raidz_xlate: the part of child `col` (of a raidz of `width` children, sectors of
/// 2^`ashift` bytes) that holds the top-level vdev's `[start, end)`: logical sector s lies on
/// child s % width, at row s / width.
pub fn raidz_xlate(width: u64, col: u64, ashift: u8, start: u64, end: u64) -> (u64, u64) {
    let (bs, be) = (start >> ashift, end >> ashift);
    let row = |b: u64| if b > col { (b - col - 1) / width + 1 } else { 0 };
    (row(bs) << ashift, row(be) << ashift)
}

/// `[start, end)` of top-level vdev `v` (or an interior vdev below it) as leaf `guid` holds
/// it: None when the leaf is not below `v` or lies where ranges do not translate (dRAID).
pub fn xlate(v: &Vdev, guid: u64, start: u64, end: u64) -> Option<(u64, u64)> {
    if v.guid == guid {
        return v.is_leaf().then_some((start, end));
    }
    for (i, c) in v.children.iter().enumerate() {
        let (s, e) = match &v.kind {
            VdevKind::Raidz { .. } => raidz_xlate(v.children.len() as u64, i as u64, v.ashift, start, end),
            VdevKind::Mirror | VdevKind::ReplacingOrSpare(_) => (start, end),
            _ => continue,
        };
        if let Some(r) = xlate(c, guid, s, e) {
            return Some(r);
        }
    }
    None
}

/// Whether a leaf below top-level vdev `top` can have its ranges translated (not below a
/// dRAID, whose layout this module does not map).
fn translatable(top: &Vdev, guid: u64) -> bool {
    xlate(top, guid, 0, 0).is_some()
}

/// The leaves a manual trim may cover, as (top-level vdev id, leaf): those of the data, special,
/// dedup and log vdevs that have metaslabs (not the cache and spare devices, not a removed or
/// evacuating vdev), with their ranges translatable.
pub fn trimmable_leaves(root: &Vdev, ms: &crate::metaslab::Metaslabs) -> Vec<(u64, Arc<Vdev>)> {
    let mut out = Vec::new();
    for top in &root.children {
        if !top.is_concrete() || ms.metaslab_ranges(top.id).is_empty() {
            continue;
        }
        collect_leaves(top, top, &mut out);
    }
    out
}

fn collect_leaves(top: &Arc<Vdev>, v: &Arc<Vdev>, out: &mut Vec<(u64, Arc<Vdev>)>) {
    if v.is_leaf() {
        if translatable(top, v.guid) {
            out.push((top.id, v.clone()));
        }
        return;
    }
    for c in &v.children {
        collect_leaves(top, c, out);
    }
}

/// The leaf's share of top-level vdev `top`'s metaslabs: (translated start, length) each.
fn leaf_metaslabs(top: &Vdev, guid: u64, ms: &[(u64, u64)]) -> Vec<(u64, u64)> {
    ms.iter().filter_map(|&(s, l)| xlate(top, guid, s, s + l)).map(|(a, b)| (a, b.saturating_sub(a))).collect()
}

/// vdev_trim_calculate_progress: of the free space of the leaf's share (its free extents as
/// they translate to it, `free`), how much lies below its last offset (done) and all of it
/// (est). Figured when a trim starts or is loaded; the steps then add what they issue.
fn progress(free: &[(u64, u64)], last_offset: u64) -> (u64, u64) {
    let est = free.iter().map(|f| f.1).sum();
    let done = free.iter().map(|&(s, l)| last_offset.saturating_sub(s).min(l)).sum();
    (done, est)
}

impl PoolW {
    /// The free extents of top-level vdev `top` as leaf `guid` holds them (translated).
    fn leaf_free(&self, tv: &Vdev, guid: u64) -> Vec<(u64, u64)> {
        let ms = self.ms.lock();
        let end = ms.metaslab_ranges(tv.id).last().map_or(0, |m| m.0 + m.1);
        ms.free_ranges(tv.id, 0, end).into_iter().filter_map(|(s, l)| xlate(tv, guid, s, s + l)).filter(|(a, b)| b > a).map(|(a, b)| (a, b - a)).collect()
    }
}

fn now() -> u64 {
    crate::dsl_scan::now()
}

impl PoolW {
    /// The ZAP of the leaf with `guid`, as the config names it (None: a pool from before
    /// per-vdev ZAPs, or a leaf added without one).
    pub(crate) fn leaf_zap(&self, guid: u64) -> Option<u64> {
        fn find(nv: &oxzfs_format::nvlist::NvList, guid: u64, depth: usize) -> Option<u64> {
            if nv.get_u64("guid") == Some(guid) {
                return nv.get_u64("com.delphix:vdev_zap_leaf").filter(|&z| z != 0);
            }
            if depth > 8 {
                return None;
            }
            nv.get_nvlist_array("children").unwrap_or(&[]).iter().find_map(|c| find(c, guid, depth + 1))
        }
        find(self.config_nv.get_nvlist("vdev_tree")?, guid, 0)
    }

    /// The leaf's trim record into its leaf ZAP (vdev_trim_zap_update_sync), written with the
    /// next sync; nothing for a leaf without a ZAP (the state then lives until export).
    fn trim_put(&mut self, guid: u64, t: &TrimStat) -> Result<()> {
        let Some(zap) = self.leaf_zap(guid) else { return Ok(()) };
        let z = self.mos.zap_mut(zap)?;
        for (name, v) in [
            (LEAF_ZAP_TRIM_LAST_OFFSET, if t.last_offset == 0 { 0 } else { t.last_offset + oxzfs_format::label::VDEV_LABEL_START_SIZE }),
            (LEAF_ZAP_TRIM_ACTION_TIME, t.action_time),
            (LEAF_ZAP_TRIM_STATE, t.state),
            (LEAF_ZAP_TRIM_RATE, t.rate),
            (LEAF_ZAP_TRIM_PARTIAL, t.partial as u64),
            (LEAF_ZAP_TRIM_SECURE, t.secure as u64),
        ] {
            z.entries.insert(name.as_bytes().to_vec(), (8, vec![v]));
        }
        Ok(())
    }

    /// vdev_trim_load of every leaf: the record in its ZAP into its in-core state, with the
    /// progress figured from its offset. Leaves with no record keep NONE.
    pub fn trim_load(&mut self) -> Result<()> {
        let root = self.spa.root_vdev.clone();
        let leaves = trimmable_leaves(&root, &self.ms.lock());
        for (top, leaf) in leaves {
            let Some(zap) = self.leaf_zap(leaf.guid) else { continue };
            let z = self.mos.zap(zap)?;
            let get = |n: &str| z.entries.get(n.as_bytes()).and_then(|(_, v)| v.first().copied());
            let Some(state) = get(LEAF_ZAP_TRIM_STATE) else { continue };
            let mut t = TrimStat {
                state,
                action_time: get(LEAF_ZAP_TRIM_ACTION_TIME).unwrap_or(0),
                last_offset: get(LEAF_ZAP_TRIM_LAST_OFFSET).unwrap_or(0).saturating_sub(oxzfs_format::label::VDEV_LABEL_START_SIZE),
                rate: get(LEAF_ZAP_TRIM_RATE).unwrap_or(0),
                partial: get(LEAF_ZAP_TRIM_PARTIAL).unwrap_or(0) != 0,
                secure: get(LEAF_ZAP_TRIM_SECURE).unwrap_or(0) != 0,
                ..Default::default()
            };
            (t.bytes_done, t.bytes_est) = progress(&self.leaf_free(&root.children[top as usize], leaf.guid), t.last_offset);
            if state == VDEV_TRIM_COMPLETE {
                t.bytes_done = t.bytes_est;
            }
            leaf.set_trim_stat(t);
        }
        Ok(())
    }

    /// vs_trim_notsup from the open: every leaf whose device cannot discard is marked, so
    /// that `zpool status -t` says "(trim unsupported)" before any trim was tried.
    fn trim_mark_unsupported(&self) {
        let root = self.spa.root_vdev.clone();
        for (_, leaf) in trimmable_leaves(&root, &self.ms.lock()) {
            if leaf.dev.as_ref().is_some_and(|d| !d.trim_supported(false)) {
                leaf.set_trim_stat(TrimStat { notsup: true, ..leaf.trim_stat() });
            }
        }
    }

    /// `zpool trim` of the leaves with `guids` (spa_vdev_trim: vdev_trim_change_state for each
    /// that passes its checks), synced. The leaves that did not, each with its errno (ENODEV,
    /// EROFS, EBUSY, ESRCH, EOPNOTSUPP: libzfs's xlate_trim_err says what they mean).
    pub fn trim_command(&mut self, guids: &[u64], cmd: TrimCmd) -> Result<Vec<(u64, i32)>> {
        let root = self.spa.root_vdev.clone();
        let leaves = trimmable_leaves(&root, &self.ms.lock());
        let mut errors = Vec::new();
        let mut chosen = Vec::new();
        for &g in guids {
            let Some((top, leaf)) = leaves.iter().find(|(_, l)| l.guid == g).cloned() else {
                errors.push((g, libc::ENODEV));
                continue;
            };
            let t = leaf.trim_stat();
            let errno = match cmd {
                TrimCmd::Start { .. } if leaf.out_of_use() || leaf.dev.is_none() => libc::EROFS,
                TrimCmd::Start { .. } if t.state == VDEV_TRIM_ACTIVE => libc::EBUSY,
                TrimCmd::Start { secure, .. } if !leaf.dev.as_ref().is_some_and(|d| d.trim_supported(secure)) => {
                    leaf.set_trim_stat(TrimStat { notsup: true, ..leaf.trim_stat() });
                    libc::EOPNOTSUPP
                }
                TrimCmd::Suspend if t.state != VDEV_TRIM_ACTIVE => libc::ESRCH,
                TrimCmd::Cancel if t.state != VDEV_TRIM_ACTIVE && t.state != VDEV_TRIM_SUSPENDED => libc::ESRCH,
                _ => 0,
            };
            if errno != 0 {
                errors.push((g, errno));
            } else {
                chosen.push((top, leaf));
            }
        }
        for (top, leaf) in &chosen {
            let mut t = leaf.trim_stat();
            let old = t.state;
            let what = match cmd {
                TrimCmd::Start { rate, secure } => {
                    // vdev_trim_change_state: a suspended trim goes on from its offset, with
                    // its rate and secure flag unless the command gives them; any other
                    // starts over.
                    if old != VDEV_TRIM_SUSPENDED {
                        t.last_offset = 0;
                        t.rate = 0;
                        t.secure = false;
                        t.partial = false;
                    }
                    if let Some(r) = rate.filter(|&r| r > 0) {
                        t.rate = r;
                    }
                    t.secure |= secure;
                    t.state = VDEV_TRIM_ACTIVE;
                    t.notsup = false;
                    t.errors = 0;
                    "activated"
                }
                TrimCmd::Suspend => {
                    t.state = VDEV_TRIM_SUSPENDED;
                    "suspended"
                }
                TrimCmd::Cancel => {
                    t.state = VDEV_TRIM_CANCELED;
                    t.last_offset = 0;
                    "canceled"
                }
            };
            // (The time of a suspended trim stays that of its suspension when it resumes or
            // is canceled.)
            if old != VDEV_TRIM_SUSPENDED {
                t.action_time = now();
            }
            (t.bytes_done, t.bytes_est) = progress(&self.leaf_free(&root.children[*top as usize], leaf.guid), t.last_offset);
            leaf.set_trim_stat(t);
            self.trim_put(leaf.guid, &t)?;
            self.log_history_internal("trim", &format!("vdev={} {what}", leaf.path.as_deref().unwrap_or("")))?;
        }
        if !chosen.is_empty() {
            self.sync()?;
        }
        Ok(errors)
    }

    /// The leaves whose manual trim is active, as (top-level vdev id, leaf).
    pub fn trimming_leaves(&self) -> Vec<(u64, Arc<Vdev>)> {
        let root = self.spa.root_vdev.clone();
        let leaves = trimmable_leaves(&root, &self.ms.lock());
        leaves.into_iter().filter(|(_, l)| l.trim_stat().state == VDEV_TRIM_ACTIVE).collect()
    }

    /// One step of the manual trim of `leaf` below top-level vdev `top` (vdev_trim_ranges):
    /// the free extents past its last offset, up to TRIM_STEP_EXTENTS of them or `budget`
    /// bytes (a rate's share), each of at least zfs_trim_extent_bytes_min and cut at
    /// zfs_trim_extent_bytes_max, punched out or discarded on the leaf. The bytes issued, and
    /// whether the leaf is done. Run under the pool's lock: nothing is allocated meanwhile.
    pub fn trim_step(&mut self, top: u64, leaf: &Vdev, budget: u64) -> Result<(u64, Step)> {
        let root = self.spa.root_vdev.clone();
        let tv = root.children.get(top as usize).ok_or_else(|| ZfsError::Invalid(format!("trim of a leaf of vdev {top}, which the pool lacks")))?;
        let mut t = leaf.trim_stat();
        if t.state != VDEV_TRIM_ACTIVE {
            return Ok((0, Step::Done));
        }
        if leaf.out_of_use() || leaf.dev.is_none() {
            // vdev_trim_should_stop: an offline or removed leaf's trim waits, ACTIVE, for it.
            return Ok((0, Step::More));
        }
        let budget = budget.min(TRIM_STEP_BYTES);
        let ms = self.ms.lock().metaslab_ranges(top);
        let lms = leaf_metaslabs(tv, leaf.guid, &ms);
        // A secure trim leaves no extent out (SPA_MINBLOCKSIZE), as vdev_trim_thread has it.
        let min = if t.secure { 512 } else { crate::tunables::trim_extent_bytes_min() };
        let max = crate::tunables::trim_extent_bytes_max().min(budget).max(64 << 10);
        let mut issued = 0u64;
        let mut extents = 0usize;
        let mut finished = true;
        'ms: for (&(ms_start, ms_len), &(lstart, llen)) in ms.iter().zip(&lms) {
            if lstart + llen <= t.last_offset {
                continue;
            }
            let free = self.ms.lock().free_ranges(top, ms_start, ms_start + ms_len);
            for (s, l) in free {
                let Some((a, b)) = xlate(tv, leaf.guid, s, s + l) else { continue };
                let a = a.max(t.last_offset);
                if b <= a {
                    continue;
                }
                if b - a >= min {
                    let mut at = a;
                    while at < b {
                        let n = (b - at).min(max);
                        match leaf.trim_leaf(at, n, t.secure) {
                            Ok(true) => issued += n,
                            Ok(false) => {
                                // The device stopped taking trims: the leaf's trim ends here.
                                t.notsup = true;
                                t.state = VDEV_TRIM_CANCELED;
                                t.action_time = now();
                                leaf.set_trim_stat(t);
                                self.trim_put(leaf.guid, &t)?;
                                return Ok((issued, Step::Done));
                            }
                            Err(ZfsError::Unavailable(_)) => {
                                // The leaf went away under the step: it goes on from here
                                // when the leaf is back (vdev_trim_cb rolls the offset back).
                                leaf.set_trim_stat(TrimStat { bytes_done: t.bytes_done + issued, ..t });
                                return Ok((issued, Step::More));
                            }
                            Err(e) => {
                                // vdev_trim_cb: an error is counted, the trim goes on.
                                t.errors += 1;
                                tracing::warn!("trim of {}: {e}", leaf.display_name());
                            }
                        }
                        at += n;
                        t.last_offset = at;
                        if issued >= budget && at < b {
                            finished = false;
                            break 'ms;
                        }
                    }
                    extents += 1;
                }
                t.last_offset = b;
                if extents >= TRIM_STEP_EXTENTS || issued >= budget {
                    finished = false;
                    break 'ms;
                }
            }
            t.last_offset = t.last_offset.max(lstart + llen);
        }
        if finished {
            t.state = VDEV_TRIM_COMPLETE;
            t.action_time = now();
            self.log_history_internal("trim", &format!("vdev={} complete", leaf.path.as_deref().unwrap_or("")))?;
        }
        t.bytes_done += issued;
        if finished {
            t.bytes_done = t.bytes_done.max(t.bytes_est);
        }
        leaf.set_trim_stat(t);
        self.trim_put(leaf.guid, &t)?;
        Ok((issued, if finished { Step::Done } else { Step::More }))
    }

    /// One step of autotrim (vdev_autotrim_thread's, for every top-level vdev): what was freed
    /// since the last pass and is still free, trimmed on every leaf that takes trims, up to
    /// TRIM_STEP_BYTES; what is left waits for the next step. Extents below
    /// zfs_trim_extent_bytes_min are left. As in OpenZFS, a leaf with a manual trim under way
    /// and the leaves of a replacing or spare vdev are left out. Whether anything is left.
    pub fn autotrim_step(&mut self) -> bool {
        let root = self.spa.root_vdev.clone();
        let leaves = trimmable_leaves(&root, &self.ms.lock());
        let (min, max) = (crate::tunables::trim_extent_bytes_min(), crate::tunables::trim_extent_bytes_max().min(TRIM_STEP_BYTES));
        let mut issued = 0;
        let mut extents = 0;
        for top in root.children.iter() {
            let ranges = self.ms.lock().take_autotrim(top.id);
            if ranges.is_empty() {
                continue;
            }
            let usable: Vec<&Arc<Vdev>> = leaves
                .iter()
                .filter(|(t, l)| *t == top.id && !l.out_of_use() && l.dev.as_ref().is_some_and(|d| d.trim_supported(false)))
                .filter(|(_, l)| l.trim_stat().state != VDEV_TRIM_ACTIVE && !below_replacing(top, l.guid))
                .map(|(_, l)| l)
                .collect();
            for (k, &(s, l)) in ranges.iter().enumerate() {
                if issued >= TRIM_STEP_BYTES || extents >= TRIM_STEP_EXTENTS {
                    self.ms.lock().requeue_autotrim(top.id, &ranges[k..]);
                    return true;
                }
                for leaf in &usable {
                    let Some((a, b)) = xlate(top, leaf.guid, s, s + l) else { continue };
                    if b.saturating_sub(a) < min {
                        continue;
                    }
                    let mut at = a;
                    while at < b {
                        let n = (b - at).min(max);
                        match leaf.trim_leaf(at, n, false) {
                            Ok(true) => issued += n,
                            Ok(false) => break,
                            Err(e) => tracing::warn!("autotrim of {}: {e}", leaf.display_name()),
                        }
                        at += n;
                    }
                    extents += 1;
                }
            }
        }
        false
    }
}

/// Whether leaf `guid` lies below a replacing or spare vdev of `top` (vdev_autotrim_thread
/// trims only the top-level vdev's own leaf children).
fn below_replacing(v: &Vdev, guid: u64) -> bool {
    v.children.iter().any(|c| (matches!(c.kind, VdevKind::ReplacingOrSpare(_)) && c.leaves().iter().any(|l| l.guid == guid)) || below_replacing(c, guid))
}

/// After a read-write import or a reopen: the trim records read back, and the thread started
/// when a trim is active or autotrim is on.
pub fn resume_after_import(h: &Arc<PoolHandle>) {
    let autotrim = {
        let mut g = h.lock();
        if let Err(e) = g.trim_load() {
            tracing::warn!("pool '{}': trim state not read: {e}", h.name());
        }
        g.trim_mark_unsupported();
        let on = g.pool_prop_num("autotrim").ok().flatten().unwrap_or(0) != 0;
        g.ms.lock().set_autotrim(on);
        on
    };
    if autotrim || !h.lock_open().trimming_leaves().is_empty() {
        start(h);
    }
}

/// `zpool set autotrim=on|off` took effect: freed space is remembered (or no longer), and the
/// thread runs the passes.
pub fn set_autotrim(h: &Arc<PoolHandle>, on: bool) {
    h.lock_open().ms.lock().set_autotrim(on);
    if on {
        start(h);
    }
}

/// Every leaf a manual trim of the whole pool covers, as (guid, path).
pub fn pool_leaves(h: &PoolHandle) -> Vec<(u64, String)> {
    let w = h.lock_open();
    let leaves = trimmable_leaves(&w.spa.root_vdev, &w.ms.lock());
    leaves.into_iter().map(|(_, l)| (l.guid, l.path.clone().unwrap_or_else(|| l.guid.to_string()))).collect()
}

/// Start the trim thread unless one runs.
pub fn start(h: &Arc<PoolHandle>) {
    let Some(id) = h.trim.begin() else { return };
    let h2 = h.clone();
    let spawned = std::thread::Builder::new().name(format!("trim {}", h.name())).spawn(move || {
        let res = crate::vdev::iostat::with_class(crate::vdev::iostat::IoClass::Trim, || run(&h2));
        if let Err(e) = &res {
            tracing::warn!("pool '{}': trim stopped: {e}", h2.name());
        }
        h2.trim.finish(id, res.err().map(|e| e.to_string()));
    });
    if spawned.is_err() {
        h.trim.finish(id, None);
    }
}

/// Stop the thread, if one runs, leaving active trims active on disk (export, reopen).
pub fn stop(h: &PoolHandle) {
    h.trim.stop_thread();
}

/// Wait while a manual trim of the pool is active (`zpool wait -t trim`), or of the leaves
/// with the guids `leaves` (`zpool trim -w`, which waits for those it named),
/// then until its end is on disk (the trim's last record synced). A thread stopped for good
/// (the pool exported, or the thread ended on an error) ends the wait: the error, if any.
pub fn wait(h: &PoolHandle, leaves: Option<&[u64]>) -> Option<String> {
    let mut idle_since: Option<std::time::Instant> = None;
    loop {
        let active = h.lock_open().trimming_leaves();
        if !active.iter().any(|(_, l)| leaves.is_none_or(|g| g.contains(&l.guid))) {
            break;
        }
        let run = h.trim.lock().clone();
        if run.running {
            idle_since = None;
        } else if let Some((id, e)) = run.last_error.filter(|(id, _)| *id == run.runs) {
            let _ = id;
            return Some(e);
        } else if idle_since.get_or_insert_with(std::time::Instant::now).elapsed() > std::time::Duration::from_secs(1) {
            // Not restarted by the command that stopped it: the pool is gone or reopening
            // failed.
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    h.sync_now().err().map(|e| e.to_string())
}

fn run(h: &Arc<PoolHandle>) -> Result<()> {
    // Each leaf's bytes issued since its trim was seen starting here (zfs_trim's rate pacing).
    let mut paced: std::collections::HashMap<u64, (std::time::Instant, u64)> = std::collections::HashMap::new();
    let mut last_auto_txg = h.lock_open().txg;
    let mut auto_more = false;
    loop {
        if h.trim.lock().request != RemovalRequest::None {
            return Ok(());
        }
        let (active, worked, autotrim) = {
            // Not while the pool's I/O is suspended (the sync waiting at the gate holds the
            // pool): the thread waits, and an export stops it meanwhile.
            let Ok(mut g) = h.lock_unless_suspended() else {
                std::thread::sleep(std::time::Duration::from_millis(200));
                continue;
            };
            let leaves = g.trimming_leaves();
            paced.retain(|guid, _| leaves.iter().any(|(_, l)| l.guid == *guid));
            let mut worked = false;
            for (top, leaf) in &leaves {
                let rate = leaf.trim_stat().rate;
                let p = paced.entry(leaf.guid).or_insert((std::time::Instant::now(), 0));
                if rate > 0 && p.1 as f64 > rate as f64 * p.0.elapsed().as_secs_f64() {
                    continue;
                }
                // A rate is kept by steps of a tenth of a second's bytes.
                let budget = if rate > 0 { (rate / 10).max(64 << 10) } else { u64::MAX };
                let (n, _) = g.trim_step(*top, leaf, budget)?;
                p.1 += n;
                worked |= n > 0;
            }
            let autotrim = g.ms.lock().autotrim;
            if autotrim && (auto_more || g.txg >= last_auto_txg + crate::tunables::trim_txg_batch()) {
                if !auto_more {
                    last_auto_txg = g.txg;
                }
                auto_more = g.autotrim_step();
                worked |= auto_more;
            }
            (!leaves.is_empty(), worked, autotrim)
        };
        if !active && !autotrim {
            return Ok(());
        }
        // Let writers and commands waiting for the pool have it (the txg syncs are the sync
        // thread's); a leaf ahead of its rate, or one that is away, waits longer, and with
        // only autotrim to watch for longer still.
        let pause = match (worked, active) {
            (true, _) => 2,
            (false, true) => 10,
            (false, false) => 200,
        };
        std::thread::sleep(std::time::Duration::from_millis(pause));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vdev_raidz_xlate's arithmetic: every logical sector of a range lies on the child and
    /// row the translation gives, and no other sector of the child is inside.
    #[test]
    fn raidz_xlate_covers_exactly_the_columns_sectors() {
        for width in [3u64, 4, 5, 7] {
            for start in 0..40u64 {
                for end in start..48u64 {
                    for col in 0..width {
                        let (a, b) = raidz_xlate(width, col, 9, start << 9, end << 9);
                        let rows: Vec<u64> = (start..end).filter(|s| s % width == col).map(|s| s / width).collect();
                        let got: Vec<u64> = ((a >> 9)..(b >> 9)).collect();
                        assert_eq!(got, rows, "width {width} col {col} [{start}, {end})");
                    }
                }
            }
        }
    }

    #[test]
    fn progress_counts_the_free_space_below_the_offset() {
        let free = [(0, 100), (150, 50), (300, 50)];
        assert_eq!(progress(&free, 0), (0, 200));
        assert_eq!(progress(&free, 170), (120, 200));
        assert_eq!(progress(&free, 1000), (200, 200));
    }
}
