//! spa_log_spacemap: pools with the log_spacemap feature active (OpenZFS's spa_log_spacemap.c).
//!
//! OpenZFS with the feature active writes each txg's allocations and frees of every metaslab
//! to one pool-wide log space map for that txg (listed by the MOS directory's
//! `com.delphix:log_spacemap_zap`, hex txg -> object; 2-word entries naming the top-level
//! vdev, offsets in 512-byte units from the vdev's start), and now and then flushes a metaslab:
//! its changes written to its own space map, the txg from which its changes are only in the
//! logs recorded in the per-top-level-vdev object `com.delphix:ms_unflushed_phys_txgs` of its
//! top ZAP (one u64 per metaslab, metaslab_unflushed_phys_t). A metaslab's allocated space is
//! its space map plus the log entries of txgs >= its unflushed txg; 0 means "not in the logs
//! at all" (a metaslab never synced since the feature was enabled), and OpenZFS's import
//! refuses a pool whose non-zero unflushed txg names no log.
//!
//! oxzfs does not write logs. A read-write import replays them (`replay`): the changes each
//! metaslab has only in the logs, reduced as OpenZFS reduces them (an alloc of what the logs
//! freed cancels the free, and the other way round), go into the allocator as pending
//! allocations and frees of the first txg, which writes them to the metaslabs' space maps (a
//! flush of every metaslab). The same txg sets every unflushed txg to 0 and frees every log
//! space map (each one a spacemap_histogram reference less), leaving the ZAP empty. OpenZFS
//! never leaves that itself (the log of its last txg stays) but takes it: its import reads no
//! log and has no metaslab to match one, and each metaslab joins the logs at its next sync
//! (unflushed txg 0, as one not synced since the feature was activated). From then on our
//! space maps hold everything. The feature stays active (its count,
//! taken by the ZAP's creation, is never given back, as in OpenZFS). A read-only import reads
//! no log (as OpenZFS: spa_ld_log_sm_data skips them when not writeable).

use crate::dsl_pool::PoolW;
use crate::range_tree::RangeTree;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::DMU_POOL_LOG_SPACEMAP_ZAP;
use oxzfs_format::spacemap::{decode_entries, SmEntry, SpaceMapPhys};
use std::collections::BTreeMap;

pub const LOG_SPACEMAP: &str = "com.delphix:log_spacemap";
/// VDEV_TOP_ZAP_MS_UNFLUSHED_PHYS_TXGS.
pub const MS_UNFLUSHED_PHYS_TXGS: &str = "com.delphix:ms_unflushed_phys_txgs";
/// The log space maps' unit (SPA_MINBLOCKSHIFT).
const LOG_SHIFT: u64 = 9;

/// The changes of one metaslab only in the logs: (allocations, frees), disjoint.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct Unflushed {
    pub allocs: RangeTree,
    pub frees: RangeTree,
}

/// spa_ld_log_sm_cb over one log: apply the ranges (top vdev, byte offset, length, free) of
/// the log of `txg` to `out`, keyed by (top, metaslab), skipping a metaslab whose changes of
/// that txg are in its space map already (`txg` < its unflushed txg) and the vdevs `skip`
/// says hold nothing any more (holes, removed vdevs).
pub fn apply_log(
    out: &mut BTreeMap<(u64, u64), Unflushed>,
    txg: u64,
    ranges: &[(u64, u64, u64, bool)],
    ms_shift: &dyn Fn(u64) -> Option<(u64, u64)>,
    unflushed_txg: &dyn Fn(u64, u64) -> u64,
) -> std::result::Result<(), String> {
    for &(top, off, len, free) in ranges {
        // (metaslab shift, metaslab count); None: skip the vdev.
        let Some((shift, count)) = ms_shift(top) else { continue };
        let ms = off >> shift;
        if len == 0 || ms >= count || (off + len - 1) >> shift != ms {
            return Err(format!("the log of txg {txg} has a range {off:#x}+{len:#x} of vdev {top} outside its metaslabs"));
        }
        if txg < unflushed_txg(top, ms) {
            continue;
        }
        let u = out.entry((top, ms)).or_default();
        let moved = if free { u.allocs.remove_xor_add(off, len, &mut u.frees) } else { u.frees.remove_xor_add(off, len, &mut u.allocs) };
        if moved.is_err() {
            let what = if free { "frees" } else { "allocates" };
            return Err(format!("the log of txg {txg} {what} {off:#x}+{len:#x} of vdev {top} twice"));
        }
    }
    Ok(())
}

impl PoolW {
    /// spa_ld_log_spacemaps for a read-write import, then the flush of every metaslab and the
    /// logs' end in the open txg (see the module's text). Nothing to do without the ZAP.
    pub(crate) fn replay_log_spacemaps(&mut self) -> Result<()> {
        let Some(zap) = self.mos.zap_lookup(1, DMU_POOL_LOG_SPACEMAP_ZAP)? else { return Ok(()) };
        let bad = |what: String| ZfsError::Invalid(format!("cannot import '{}' read-write: log space maps: {what}", self.spa.name));
        // The unflushed txg of every metaslab (spa_ld_unflushed_txgs).
        let root = self.spa.root_vdev.clone();
        let mut unflushed: BTreeMap<u64, (u64, Vec<u64>)> = BTreeMap::new(); // top -> (object, txgs)
        let mut geometry: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for top in root.children.iter() {
            if !top.is_concrete() || top.metaslab_array == 0 {
                continue;
            }
            let count = top.asize >> top.metaslab_shift;
            geometry.insert(top.id, (top.metaslab_shift, count));
            let Some(tz) = self.top_zap(top.id) else { continue };
            let Some(obj) = self.mos.zap_lookup(tz, MS_UNFLUSHED_PHYS_TXGS)? else { continue };
            let raw = self.mos.read(obj, 0, (count * 8) as usize)?;
            let txgs = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).collect();
            unflushed.insert(top.id, (obj, txgs));
        }
        // The logs, oldest first (spa_ld_log_sm_metadata): each non-zero unflushed txg has one.
        let mut logs: Vec<(u64, u64)> = Vec::new();
        for (k, (_, v)) in self.mos.zap(zap)?.entries.clone() {
            let name = String::from_utf8_lossy(&k).trim_end_matches('\0').to_string();
            let txg = u64::from_str_radix(&name, 16).map_err(|_| bad(format!("entry '{name}' of the log ZAP is no txg")))?;
            logs.push((txg, v.first().copied().unwrap_or(0)));
        }
        logs.sort();
        for (top, (_, txgs)) in &unflushed {
            if let Some((ms, t)) = txgs.iter().enumerate().find(|(_, &t)| t != 0 && logs.binary_search_by_key(&t, |l| l.0).is_err()) {
                return Err(bad(format!("metaslab {ms} of vdev {top} has unflushed changes from txg {t}, which has no log")));
            }
        }
        let mut changes = BTreeMap::new();
        let mut histogram_refs = 0i64;
        for &(txg, obj) in &logs {
            let dn = self.mos.dnode(obj)?;
            let phys = SpaceMapPhys::decode(&dn.bonus, true).map_err(|e| bad(format!("log of txg {txg} (object {obj}): {e}")))?;
            if dn.bonuslen as usize != 24 {
                histogram_refs += 1; // space_map_free_obj gives back a spacemap_histogram reference
            }
            if phys.length % 8 != 0 || phys.length > (dn.maxblkid + 1) * dn.data_block_size() {
                return Err(bad(format!("log of txg {txg} (object {obj}) claims {} bytes", phys.length)));
            }
            let words = self.mos.read(obj, 0, phys.length as usize)?;
            let entries = decode_entries(&words, true).map_err(|e| bad(format!("log of txg {txg} (object {obj}): {e}")))?;
            let mut ranges = Vec::with_capacity(entries.len());
            for e in entries {
                match e {
                    SmEntry::Range { free, offset, run, vdev: Some(v) } => ranges.push((v, offset << LOG_SHIFT, run << LOG_SHIFT, free)),
                    SmEntry::Range { vdev: None, .. } => return Err(bad(format!("log of txg {txg} has an entry without a vdev"))),
                    SmEntry::Debug { .. } => {}
                }
            }
            let geo = |top: u64| geometry.get(&top).copied();
            let ut = |top: u64, ms: u64| unflushed.get(&top).and_then(|(_, t)| t.get(ms as usize).copied()).unwrap_or(0);
            apply_log(&mut changes, txg, &ranges, &geo, &ut).map_err(bad)?;
        }
        // Into the allocator, as the first txg's allocations and frees (the flush).
        let txg = self.txg;
        {
            let mut ms = self.ms.lock();
            for ((top, _), u) in &changes {
                let allocs: Vec<(u64, u64)> = u.allocs.iter().map(|(s, e)| (s, e - s)).collect();
                let frees: Vec<(u64, u64)> = u.frees.iter().map(|(s, e)| (s, e - s)).collect();
                ms.apply_unflushed(*top, &allocs, &frees, txg).map_err(bad)?;
            }
        }
        // Every metaslab flushed: no unflushed txg, no log.
        for (obj, txgs) in unflushed.values() {
            if txgs.iter().any(|&t| t != 0) {
                self.mos.write(*obj, 0, &vec![0u8; txgs.len() * 8])?;
            }
        }
        for &(txg, obj) in &logs {
            self.mos.free_object(obj)?;
            self.mos.zap_remove(zap, &format!("{txg:x}"))?;
        }
        if histogram_refs > 0 && self.feature_enabled("com.delphix:spacemap_histogram") {
            self.feature_incr("com.delphix:spacemap_histogram", -histogram_refs)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(v: &[(u64, u64)]) -> RangeTree {
        RangeTree::from_ranges(v).unwrap()
    }

    #[test]
    fn logs_reduce_to_what_each_metaslab_has_only_there() {
        // Two metaslabs of 64K on vdev 0 (shift 16); vdev 1 is a hole.
        let geo = |top: u64| (top == 0).then_some((16, 2));
        // Metaslab 1 was flushed in txg 11: the log of txg 10 is in its space map already.
        let ut = |_: u64, ms: u64| if ms == 1 { 11 } else { 10 };
        let mut out = BTreeMap::new();
        let t10 = [(0, 0x1000, 0x3000, false), (0, 0x10000, 0x1000, false), (1, 0x0, 0x1000, false), (0, 0x8000, 0x1000, true)];
        apply_log(&mut out, 10, &t10, &geo, &ut).unwrap();
        // txg 11: part of the txg-10 allocation freed again (cancels), a free of space map space,
        // an allocation of what txg 10 freed (cancels), and a new allocation in metaslab 1.
        let t11 = [(0, 0x2000, 0x1000, true), (0, 0x6000, 0x2000, true), (0, 0x8000, 0x1000, false), (0, 0x12000, 0x2000, false)];
        apply_log(&mut out, 11, &t11, &geo, &ut).unwrap();
        let m0 = &out[&(0, 0)];
        assert_eq!(m0.allocs, segs(&[(0x1000, 0x1000), (0x3000, 0x1000)]));
        assert_eq!(m0.frees, segs(&[(0x6000, 0x2000)]));
        let m1 = &out[&(0, 1)];
        assert_eq!(m1.allocs, segs(&[(0x12000, 0x2000)]));
        assert!(m1.frees.is_empty());
        assert_eq!(out.len(), 2);
        // The same space allocated twice, or a range past the metaslabs: refused.
        assert!(apply_log(&mut out, 12, &[(0, 0x1000, 0x800, false)], &geo, &ut).unwrap_err().contains("twice"));
        assert!(apply_log(&mut out, 12, &[(0, 0xf000, 0x2000, false)], &geo, &ut).unwrap_err().contains("outside"));
        assert!(apply_log(&mut out, 12, &[(0, 0x20000, 0x1000, true)], &geo, &ut).unwrap_err().contains("outside"));
    }
}
