//! tunables: the engine's knobs under OpenZFS's module parameter names (what Linux shows in
//! /sys/module/zfs/parameters), process-wide, read where they act and changeable while pools are
//! imported: `oxzfs daemon start|run -o NAME=VALUE` and `oxzfs tunable [NAME[=VALUE]]...`.
//!
//! ```text
//!   fuse_io_uring           1: FUSE mounts made from now on are served through FUSE over
//!                           io_uring when the kernel offers it (the module parameter
//!                           /sys/module/fuse/parameters/enable_uring, which the daemon never
//!                           sets: it is the administrator's, machine-wide); else, or when the
//!                           kernel refuses the ring, through /dev/fuse, said once in the log.
//!                           0 (the default): /dev/fuse; why the default stays there:
//!                           bench/results/2026-11-27-fuse-uring-default.md
//!   zfs_txg_timeout         seconds between txg syncs of a pool with dirty data (read each wait)
//!   zil_slog_bulk           a commit with more log bytes than this on a log device writes them
//!                           at async priority (zpool iostat's classes)
//!   zfs_dirty_data_max      dirty bytes before writers are throttled (0: 10% of memory, ≤ 4G;
//!                           read when a pool is imported for writing)
//!   zfs_arc_max             bytes of the ARC all imported pools share (0: half of
//!                           memory; a change shrinks or grows it at once)
//!   zfs_arc_min             bytes the ARC is not shrunk below (0: 1/32 of zfs_arc_max)
//!   zfs_arc_sys_free        memory the ARC leaves the system: with less available, the
//!                           ARC's target shrinks (0: 1/32 of memory + 3 × min_free_kbytes)
//!   zfs_compressed_arc_enabled  blocks come into the ARC as the pool holds them, compressed
//!                           (see `arc`); 0: decompressed
//!   l2arc_write_max         bytes written to a cache device per feed (l2arc_write_boost
//!                           more while the ARC is cold); l2arc_headroom: how many times that
//!                           the feed scans of the ARC's lists (l2arc_headroom_boost percent
//!                           of that with compressed ARC); l2arc_feed_secs between feeds,
//!                           l2arc_feed_min_ms while busy (l2arc_feed_again);
//!   l2arc_noprefetch        prefetched buffers are not fed
//!   l2arc_rebuild_enabled   rebuild the L2ARC from a cache device's log blocks at import;
//!   l2arc_rebuild_blocks_min_l2size  smaller devices keep no log blocks
//!   l2arc_meta_percent      share of the ARC the L2ARC's headers may take
//!   zfs_max_recordsize      largest recordsize `zfs set` accepts (read at each set)
//!   metaslab_force_ganging  blocks at least this big are written as gang blocks (testing)
//!   zfs_immediate_write_sz  without a log device, a write at least this big goes to its
//!                           final blocks at an fsync and the log record points at them
//!                           (every write does under logbias=throughput)
//!   vdev_removal_max_span   free gaps up to this size between allocated ranges are copied
//!                           with them by a device removal, one mapping entry for the lot
//!   zfs_removal_suspend_progress  1: a device removal makes no progress (testing)
//!   zfs_remove_max_segment  the largest range a device removal copies at once (read at
//!                           each step; rounded up to the pool's largest sector)
//!   zfs_rebuild_max_segment  the largest range a sequential reconstruction copies at once;
//!                           zfs_rebuild_vdev_limit: bytes per leaf it copies in one step
//!                           (txg syncs held off); zfs_rebuild_scrub_enabled: a scrub follows
//!                           a completed one (see vdev_rebuild)
//!   zfs_condense_indirect_vdevs_enable  condense removed vdevs' mappings when
//!                           zfs_condense_indirect_obsolete_pct of what one maps is obsolete
//!                           (and it is over zfs_condense_min_mapping_bytes in memory), or its
//!                           obsolete space map reaches zfs_condense_max_obsolete_bytes
//!   zfs_scan_legacy         1: the scan reads blocks as its walk meets them (0: sorted, see
//!                           dsl_scan_queue); zfs_scan_mem_lim_fact: its queues' memory is
//!                           at most physical memory / this; zfs_scan_issue_strategy (0, 1:
//!                           by address; 2: best-filled extents first), zfs_scan_max_ext_gap,
//!                           zfs_scan_fill_weight: how queued blocks make and rank extents
//!   zfs_scan_suspend_progress  1: scans make no progress (they stay in progress; testing)
//!   zfs_vdev_aggregation_limit  the largest range of adjacent blocks read at once (the
//!                           sorted scan's)
//!   zfs_scrub_min_time_ms   how long a scrub walks the pool between txg syncs (it holds
//!                           syncs off meanwhile; read at each turn)
//!   zfs_sync_pass_dont_compress  the sync pass from which blocks are written uncompressed
//! ```
//!
//! A value is a number with an optional K/M/G/T suffix (powers of 1024). The environment
//! variables that set some of these before the registry existed (OXZFS_ARC_MAX,
//! OXZFS_DIRTY_DATA_MAX, OXZFS_ZFS_MAX_RECORDSIZE, OXZFS_FORCE_GANGING) still give the starting
//! value. Unknown names and bad values are errors naming them; nothing is changed then.
//! Lock-free: each value is an atomic.

use crate::{Result, ZfsError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub struct Tunable {
    pub name: &'static str,
    pub desc: &'static str,
    pub min: u64,
    pub max: u64,
    default: u64,
    env: Option<&'static str>,
    value: AtomicU64,
    loaded: AtomicBool,
}

const fn tunable(name: &'static str, desc: &'static str, default: u64, min: u64, max: u64, env: Option<&'static str>) -> Tunable {
    Tunable { name, desc, min, max, default, env, value: AtomicU64::new(0), loaded: AtomicBool::new(false) }
}

static TUNABLES: [Tunable; 45] = [
    tunable("fuse_io_uring", "Serve FUSE mounts made from now on through FUSE over io_uring when the kernel offers it (1; /sys/module/fuse/parameters/enable_uring, set by the administrator) or through /dev/fuse (0)", 0, 0, 1, Some("OXZFS_FUSE_IO_URING")),
    tunable("l2arc_feed_again", "Feed again after l2arc_feed_min_ms when the last feed wrote more than half of what it wanted (1) or wait l2arc_feed_secs always (0)", 1, 0, 1, None),
    tunable("l2arc_feed_min_ms", "Milliseconds between L2ARC writes while the feed keeps busy (l2arc_feed_again)", 200, 1, 3_600_000, None),
    tunable("l2arc_feed_secs", "Seconds between L2ARC writes of a pool's cache devices", 1, 1, 3600, None),
    tunable("l2arc_headroom", "How far past l2arc_write_max the feed looks into the ARC's lists, in multiples of it (0: the whole lists)", 2, 0, 1000, None),
    tunable("l2arc_headroom_boost", "With compressed ARC, how far the L2ARC feed looks into the ARC's lists, in percent of l2arc_headroom", 200, 100, 100_000, None),
    tunable("l2arc_meta_percent", "Largest share of the ARC the headers of L2ARC-only buffers may take, percent", 33, 1, 100, None),
    tunable("l2arc_noprefetch", "Prefetched buffers are not written to the L2ARC (1) or are (0)", 1, 0, 1, None),
    tunable("l2arc_rebuild_blocks_min_l2size", "Cache devices smaller than this keep no log blocks (no persistent L2ARC), bytes", 1 << 30, 0, u64::MAX, None),
    tunable("l2arc_rebuild_enabled", "Rebuild the L2ARC from a cache device's log blocks at import (1) or not (0)", 1, 0, 1, None),
    tunable("l2arc_write_boost", "Extra bytes the L2ARC feed writes while the ARC is cold", 8 << 20, 0, 1 << 40, None),
    tunable("l2arc_write_max", "Bytes the L2ARC feed writes to a cache device per interval", 8 << 20, 512, 1 << 40, None),
    tunable("metaslab_force_ganging", "Blocks at least this big are written as gang blocks (testing)", u64::MAX, 512, u64::MAX, Some("OXZFS_FORCE_GANGING")),
    tunable("vdev_removal_max_span", "Free gaps up to this size between allocated ranges are copied along with them by a device removal (one mapping entry for the lot), bytes", 32 << 10, 0, 1 << 30, None),
    tunable("zfs_arc_max", "Largest size of the ARC the imported pools share, bytes (0: half of memory)", 0, 0, u64::MAX, Some("OXZFS_ARC_MAX")),
    tunable("zfs_arc_min", "Smallest size the ARC is shrunk to, bytes (0: 1/32 of zfs_arc_max, at least 32M)", 0, 0, u64::MAX, None),
    tunable("zfs_arc_sys_free", "Memory the ARC leaves the system: below this much available it shrinks, bytes (0: 1/32 of memory plus three times min_free_kbytes)", 0, 1, u64::MAX, None),
    tunable("zfs_compressed_arc_enabled", "The ARC keeps compressed blocks as the pool holds them, a decompressed copy only of those in use (1), or every block decompressed (0); read as blocks come in", 1, 0, 1, None),
    tunable("zfs_condense_indirect_obsolete_pct", "A removed vdev's mapping is condensed when at least this share of the bytes it maps is obsolete, percent", 25, 0, 100, None),
    tunable("zfs_condense_indirect_vdevs_enable", "Condense the mappings of removed vdevs (1) or not (0)", 1, 0, 1, None),
    tunable("zfs_condense_max_obsolete_bytes", "A removed vdev's mapping is condensed when its obsolete space map is this long, bytes", 1 << 30, 0, u64::MAX, None),
    tunable("zfs_condense_min_mapping_bytes", "Mappings of removed vdevs smaller than this in memory are not condensed for their obsolete share, bytes", 128 << 10, 0, u64::MAX, None),
    tunable("zfs_dirty_data_max", "Dirty data before writers wait, bytes (0: 10% of memory, at most 4G)", 0, 0, u64::MAX, Some("OXZFS_DIRTY_DATA_MAX")),
    tunable("zfs_dirty_data_sync", "Dirty data past which the open txg is synced even below zfs_dirty_data_sync_percent's share, bytes (OpenZFS 0.7's tunable; 0: the share alone)", 64 << 20, 0, u64::MAX, None),
    tunable("zfs_immediate_write_sz", "Without a log device, writes this big go to their final blocks at an fsync and the log records point at them (every write does under logbias=throughput)", 32 << 10, 512, 16 << 20, None),
    tunable("zfs_max_recordsize", "Largest recordsize a dataset may be given, bytes", 1 << 20, 128 << 10, 16 << 20, Some("OXZFS_ZFS_MAX_RECORDSIZE")),
    tunable("zfs_rebuild_max_segment", "Largest range a sequential reconstruction (zpool attach/replace -s) copies at once, bytes", 1 << 20, 4096, 16 << 20, None),
    tunable("zfs_rebuild_scrub_enabled", "1: a scrub verifies the pool's checksums after a sequential reconstruction completes", 1, 0, 1, None),
    tunable("zfs_rebuild_vdev_limit", "Bytes a sequential reconstruction copies per leaf of the top-level vdev between looks at the pool (each step holds txg syncs off)", 32 << 20, 1 << 20, 1 << 30, None),
    tunable("zfs_removal_suspend_progress", "1: a device removal makes no progress (it stays in progress; testing)", 0, 0, 1, None),
    tunable("zfs_remove_max_segment", "Largest range a device removal copies at once (one mapping entry), bytes", 16 << 20, 512, 1 << 30, None),
    tunable("zfs_scan_fill_weight", "How much a sorted scan prefers extents well filled with blocks over large ones (zfs_scan_issue_strategy 2)", 3, 0, 1000, None),
    tunable("zfs_scan_issue_strategy", "Order a sorted scan reads its queued blocks in: 0 automatic (by address), 1 by address, 2 the best-filled extents first", 0, 0, 2, None),
    tunable("zfs_scan_legacy", "1: scans read each block as the walk meets it, unsorted (0: gathered and read in address order)", 0, 0, 1, None),
    tunable("zfs_scan_max_ext_gap", "Largest gap between two queued blocks of a sorted scan that still makes one extent, bytes", 2 << 20, 0, 1 << 40, None),
    tunable("zfs_scan_mem_lim_fact", "A sorted scan's queues may take physical memory / this (at least 16M, at most 1/20 of the pool's allocated bytes)", 20, 1, 1 << 20, None),
    tunable("zfs_scan_suspend_progress", "1: scans make no progress (they stay in progress; testing)", 0, 0, 1, None),
    tunable("zfs_scrub_min_time_ms", "Milliseconds a scrub walks the pool between txg syncs", 1000, 1, 60_000, None),
    tunable("zfs_sync_pass_dont_compress", "Sync pass of a txg from which its blocks are written uncompressed, so the passes converge", 8, 1, 100, None),
    tunable("zfs_trim_extent_bytes_max", "Largest range one TRIM (a file's hole punched, a disk's discard) covers, bytes", 128 << 20, 1 << 20, 1 << 40, None),
    tunable("zfs_trim_extent_bytes_min", "Free extents smaller than this are not trimmed, bytes", 32 << 10, 512, 1 << 30, None),
    tunable("zfs_trim_txg_batch", "Txgs whose frees autotrim gathers before it trims them", 32, 1, 1 << 20, None),
    tunable("zfs_txg_timeout", "Seconds between txg syncs of a pool with dirty data", 5, 1, 3600, None),
    tunable("zfs_vdev_aggregation_limit", "Largest read made of adjacent blocks at once (the sorted scan's ranges), bytes", 1 << 20, 128 << 10, 16 << 20, None),
    tunable("zil_slog_bulk", "Log bytes of one commit beyond which its log blocks on a log device go at async rather than sync priority", 768 << 10, 0, u64::MAX, None),
];

/// A number with an optional K, M, G or T suffix (powers of 1024), as zfs_nicestrtonum reads it.
pub fn parse_value(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

impl Tunable {
    /// The value now: set, else from the environment variable, else the default.
    pub fn get(&self) -> u64 {
        if !self.loaded.load(Ordering::Acquire) {
            let v = self.env.and_then(|e| std::env::var(e).ok()).and_then(|v| parse_value(&v)).filter(|v| self.accepts(*v)).unwrap_or(self.default);
            // A racing set wins: only the first load stores.
            if self.loaded.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.value.store(v, Ordering::Release);
            }
        }
        self.value.load(Ordering::Acquire)
    }

    fn accepts(&self, v: u64) -> bool {
        (self.min..=self.max).contains(&v) || (v == 0 && self.default == 0)
    }

    fn set(&self, v: u64) {
        self.value.store(v, Ordering::Release);
        self.loaded.store(true, Ordering::Release);
    }
}

/// Every tunable, by name.
pub fn all() -> &'static [Tunable] {
    &TUNABLES
}

/// The tunable called `name`.
pub fn lookup(name: &str) -> Result<&'static Tunable> {
    TUNABLES.iter().find(|t| t.name == name).ok_or_else(|| ZfsError::Invalid(format!("unknown tunable '{name}'")))
}

/// The value of `name`.
pub fn get(name: &str) -> Result<u64> {
    Ok(lookup(name)?.get())
}

/// Set `name` from the text `value`; refused (nothing changed) for an unknown name, a value that
/// is not a number, or one out of the tunable's range.
pub fn set(name: &str, value: &str) -> Result<u64> {
    let t = lookup(name)?;
    let v = parse_value(value).ok_or_else(|| ZfsError::Invalid(format!("bad value '{value}' for tunable '{name}': not a number")))?;
    if !t.accepts(v) {
        let zero = if t.default == 0 { " (or 0 for the default)" } else { "" };
        return Err(ZfsError::Invalid(format!("bad value '{value}' for tunable '{name}': must be between {} and {}{zero}", t.min, t.max)));
    }
    t.set(v);
    Ok(v)
}

/// Apply `NAME=VALUE`.
pub fn set_assignment(a: &str) -> Result<u64> {
    let (n, v) = a.split_once('=').ok_or_else(|| ZfsError::Invalid(format!("bad tunable setting '{a}': expected NAME=VALUE")))?;
    set(n.trim(), v)
}

/// The tunable `$name` (a literal that must be one of TUNABLES'; the unit tests call every
/// reader below), looked up once: the readers are one atomic load after that.
macro_rules! known {
    ($name:literal) => {{
        static T: std::sync::OnceLock<&'static Tunable> = std::sync::OnceLock::new();
        *T.get_or_init(|| lookup($name).unwrap_or_else(|_| panic!("tunable {} is not in TUNABLES", $name)))
    }};
}

/// Values the code reads.
pub fn condense_indirect_vdevs_enable() -> bool {
    known!("zfs_condense_indirect_vdevs_enable").get() != 0
}

pub fn condense_indirect_obsolete_pct() -> u64 {
    known!("zfs_condense_indirect_obsolete_pct").get()
}

pub fn condense_max_obsolete_bytes() -> u64 {
    known!("zfs_condense_max_obsolete_bytes").get()
}

pub fn condense_min_mapping_bytes() -> u64 {
    known!("zfs_condense_min_mapping_bytes").get()
}

pub fn trim_extent_bytes_max() -> u64 {
    known!("zfs_trim_extent_bytes_max").get()
}

pub fn trim_extent_bytes_min() -> u64 {
    known!("zfs_trim_extent_bytes_min").get()
}

pub fn trim_txg_batch() -> u64 {
    known!("zfs_trim_txg_batch").get()
}

pub fn txg_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(known!("zfs_txg_timeout").get())
}

pub fn removal_suspend_progress() -> bool {
    known!("zfs_removal_suspend_progress").get() != 0
}

pub fn rebuild_max_segment() -> u64 {
    known!("zfs_rebuild_max_segment").get()
}

pub fn rebuild_scrub_enabled() -> bool {
    known!("zfs_rebuild_scrub_enabled").get() != 0
}

pub fn rebuild_vdev_limit() -> u64 {
    known!("zfs_rebuild_vdev_limit").get()
}

pub fn remove_max_segment() -> u64 {
    known!("zfs_remove_max_segment").get()
}

pub fn removal_max_span() -> u64 {
    known!("vdev_removal_max_span").get()
}

pub fn scan_suspend_progress() -> bool {
    known!("zfs_scan_suspend_progress").get() != 0
}

pub fn scan_fill_weight() -> u64 {
    known!("zfs_scan_fill_weight").get()
}

pub fn scan_issue_strategy() -> u64 {
    known!("zfs_scan_issue_strategy").get()
}

pub fn scan_legacy() -> bool {
    known!("zfs_scan_legacy").get() != 0
}

pub fn scan_max_ext_gap() -> u64 {
    known!("zfs_scan_max_ext_gap").get()
}

pub fn scan_mem_lim_fact() -> u64 {
    known!("zfs_scan_mem_lim_fact").get()
}

pub fn sync_pass_dont_compress() -> u64 {
    known!("zfs_sync_pass_dont_compress").get()
}

pub fn vdev_aggregation_limit() -> u64 {
    known!("zfs_vdev_aggregation_limit").get()
}

pub fn scrub_min_time() -> std::time::Duration {
    std::time::Duration::from_millis(known!("zfs_scrub_min_time_ms").get())
}

pub fn dirty_data_sync() -> Option<u64> {
    Some(known!("zfs_dirty_data_sync").get()).filter(|v| *v > 0)
}

pub fn dirty_data_max() -> Option<u64> {
    Some(known!("zfs_dirty_data_max").get()).filter(|v| *v > 0)
}

pub fn arc_max() -> Option<u64> {
    Some(known!("zfs_arc_max").get()).filter(|v| *v > 0)
}

pub fn arc_min() -> Option<u64> {
    Some(known!("zfs_arc_min").get()).filter(|v| *v > 0)
}

/// zfs_compressed_arc_enabled: blocks come into the ARC compressed (read as each comes in).
pub fn compressed_arc_enabled() -> bool {
    known!("zfs_compressed_arc_enabled").get() != 0
}

pub fn arc_sys_free() -> Option<u64> {
    Some(known!("zfs_arc_sys_free").get()).filter(|v| *v > 0)
}

/// The L2ARC feed's knobs, read at each feed.
pub fn l2arc_feed_again() -> bool {
    known!("l2arc_feed_again").get() != 0
}

pub fn l2arc_feed_min() -> std::time::Duration {
    std::time::Duration::from_millis(known!("l2arc_feed_min_ms").get())
}

pub fn l2arc_feed_secs() -> std::time::Duration {
    std::time::Duration::from_secs(known!("l2arc_feed_secs").get())
}

pub fn l2arc_headroom() -> u64 {
    known!("l2arc_headroom").get()
}

pub fn l2arc_headroom_boost() -> u64 {
    known!("l2arc_headroom_boost").get()
}

pub fn l2arc_meta_percent() -> u64 {
    known!("l2arc_meta_percent").get()
}

pub fn l2arc_noprefetch() -> bool {
    known!("l2arc_noprefetch").get() != 0
}

pub fn l2arc_rebuild_blocks_min_l2size() -> u64 {
    known!("l2arc_rebuild_blocks_min_l2size").get()
}

pub fn l2arc_rebuild_enabled() -> bool {
    known!("l2arc_rebuild_enabled").get() != 0
}

pub fn l2arc_write_boost() -> u64 {
    known!("l2arc_write_boost").get()
}

pub fn l2arc_write_max() -> u64 {
    known!("l2arc_write_max").get()
}

pub fn max_recordsize() -> u64 {
    known!("zfs_max_recordsize").get()
}

pub fn immediate_write_sz() -> u64 {
    known!("zfs_immediate_write_sz").get()
}

pub fn zil_slog_bulk() -> u64 {
    known!("zil_slog_bulk").get()
}

pub fn force_ganging() -> u64 {
    known!("metaslab_force_ganging").get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readers_read_the_tunables_they_name() {
        // Every name a reader looks up (known!) is a tunable: the source read as text, so a
        // reader added later is checked too.
        let src = include_str!("tunables.rs");
        let named: Vec<&str> = src.split("known!(\"").skip(1).filter_map(|r| r.split('"').next()).filter(|n| !n.is_empty() && !n.contains(' ')).collect();
        assert!(named.len() > 20, "{named:?}");
        for n in named {
            assert!(lookup(n).is_ok(), "reader of unknown tunable {n}");
        }
        assert!(TUNABLES.windows(2).all(|w| w[0].name < w[1].name), "sorted by name");
    }

    #[test]
    fn values_parse_and_refusals_name_what_is_wrong() {
        assert_eq!(parse_value("16M"), Some(16 << 20));
        assert_eq!(parse_value("7"), Some(7));
        assert_eq!(parse_value("1x"), None);
        assert_eq!(parse_value("99999999999T"), None);
        let e = set("zfs_no_such", "1").unwrap_err().to_string();
        assert!(e.contains("unknown tunable 'zfs_no_such'"), "{e}");
        let e = set("zfs_txg_timeout", "soon").unwrap_err().to_string();
        assert!(e.contains("'soon'") && e.contains("zfs_txg_timeout"), "{e}");
        let e = set("zfs_max_recordsize", "64M").unwrap_err().to_string();
        assert!(e.contains("between 131072 and 16777216"), "{e}");
        assert!(set_assignment("zfs_txg_timeout").is_err());
        // a refused setting changed nothing
        assert_eq!(get("zfs_max_recordsize").unwrap(), max_recordsize());
    }

    #[test]
    fn set_values_are_read_back() {
        let before = get("zfs_txg_timeout").unwrap();
        assert_eq!(set_assignment("zfs_txg_timeout=7").unwrap(), 7);
        assert_eq!(txg_timeout(), std::time::Duration::from_secs(7));
        set("zfs_txg_timeout", &before.to_string()).unwrap();
        assert_eq!(set("zfs_arc_max", "0").unwrap(), 0);
        assert_eq!(arc_max(), None);
    }
}
