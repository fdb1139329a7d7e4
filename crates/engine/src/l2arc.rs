//! l2arc: the level-2 ARC — a pool's cache devices, filled from the ARC and read on an ARC
//! miss, and persistent across imports (OpenZFS's l2arc_* in arc.c, 2.0's persistent L2ARC).
//!
//! ```text
//!   cache device (see oxzfs_format::l2arc for the structures)
//!   | labels, boot | dev hdr | buf buf buf logblk buf buf … ───► hand      evict ─► | labels |
//!                            ^ start   (a ring: the hand wraps to start)          end ^
//! ```
//!
//! Feed (`feed_once`, every l2arc_feed_secs from the pool's feed thread): one cache device in
//! turn (round robin); make room ahead of the write hand (`evict`: buffers and log blocks
//! there are forgotten; on the first sweep there is nothing to forget), then write the ARC's
//! eligible buffers from the tails of MFU and MRU (heads while the ARC is cold), looking at
//! no more than l2arc_write_max × l2arc_headroom bytes of each list (× l2arc_headroom_boost
//! percent with compressed ARC, logical bytes) and writing at most
//! l2arc_write_max (+ l2arc_write_boost while cold) bytes. A buffer goes as the pool holds it:
//! its physical (compressed) bytes, so that a read can verify it against the block pointer's
//! checksum; a block the ARC keeps compressed is written as it is, one it keeps decompressed
//! (zfs_compressed_arc_enabled=0) is compressed again as the bp says and
//! written only when that reproduces the checksum (what OpenZFS does without compressed
//! ARC). The ARC also hands the feed what it evicted before a feed wrote it (`take_l2_pending`,
//! at most l2arc_write_max + l2arc_write_boost bytes waiting; the feed thread goes early when
//! half of l2arc_write_max waits): those go first, beyond l2arc_write_max. The tails alone
//! miss buffers that pass through the ARC faster than the feed looks at them — a read of a
//! working set mostly on the cache device turns the ARC over at the cache device's pace, and
//! the few blocks read from the pool among them were evicted unwritten, read from the pool
//! again after the next import. Every buffer gets an entry in the open log block; a full one (dh_log_entries,
//! smaller devices fewer, those under l2arc_rebuild_blocks_min_l2size none) is written
//! after it, lz4-compressed, and chained from the device header, which is rewritten after each
//! feed. The buffers of a feed are written in one device write. At export (`shutdown`) the
//! open log block is written too, its empty slots filled with copies of its last entry (a
//! rebuild counts them as precached), so that the buffers of the last feeds are found again.
//! Before that, after the export's last sync, one more feed (`feed_last`) takes what the ARC
//! holds eligible and unwritten from anywhere in its lists, metadata first: the blocks the
//! last txgs rewrote, which no tail held yet.
//!
//! Read (`read`): an ARC miss looks the block up by its first DVA and birth (`L2Key`; the
//! log entries hold no checksum); the bytes at the entry's address are verified against the
//! reader's bp, then decompressed. An entry the feed wrote of another block under the same DVA
//! and birth (rewritten in place; told by its size or checksum) is a miss. A bad block
//! (overwritten, corrupted, stale) counts in
//! l2_cksum_bad, a failed device read in l2_io_error; both leave the reader to the pool. A
//! device that fails writes, or reads repeatedly, is dropped from the L2ARC (faulted).
//!
//! Rebuild (`add_device`): a device whose header names this pool and device, this version
//! and the same geometry is rebuilt in the background (l2arc_rebuild_enabled): the log block
//! chains are walked from the header's two newest blocks while each stays valid (not evicted,
//! checksum right) and their entries become L2ARC-only headers. Anything else — no header, a
//! header of another pool, a corrupt or truncated device — is an empty device, named in the
//! log, and (when the pool is writable) given a fresh header.
//!
//! The index of what the devices hold (`index`, OpenZFS's L2ARC-only headers) outlives the
//! ARC's copy of the data; it is bounded by the devices' size and by l2arc_meta_percent of
//! the ARC (`L2_HDR_SIZE` bytes a header, as OpenZFS counts them): past that the feed stops
//! (l2_abort_lowmem) and a rebuild ends (l2_rebuild_lowmem).
//!
//! Locks: a device's state (`L2Dev::st`) before the index; the ARC's lock is never held with
//! either. Readers take only the index, briefly, and read the device without locks: a buffer
//! evicted and overwritten meanwhile fails its checksum and is read from the pool.

use crate::arc::{AdaptiveCache, ArcKey};
use crate::tunables;
use crate::vdev::BlockDevice;
use crate::zio;
use oxzfs_format::blkptr::{BlockPointer, Dva};
use oxzfs_format::l2arc::{
    range_check_overlap, L2DevHdrPhys, L2Hands, L2LogBlkPhys, L2LogBlkPtr, L2LogEntPhys, L2Prop, ARC_BUFC_DATA, ARC_BUFC_METADATA, ARC_STATE_MFU, ARC_STATE_MRU,
    L2ARC_DEV_HDR_EVICT_FIRST, L2ARC_DEV_HDR_MAGIC, L2ARC_DEV_HDR_SIZE, L2ARC_LOG_BLK_MAX_ENTRIES, L2ARC_LOG_BLK_SIZE, L2ARC_PERSISTENT_VERSION,
};
use oxzfs_format::label::{VDEV_LABEL_END_SIZE, VDEV_LABEL_SIZE, VDEV_LABEL_START_SIZE};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// What one L2ARC-only header costs, as arcstats' l2_hdr_size counts it (HDR_L2ONLY_SIZE).
pub const L2_HDR_SIZE: u64 = 96;
/// A device is dropped after this many failed reads.
const MAX_READ_ERRORS: u64 = 8;
/// SPA_MAXBLOCKSHIFT: a log block's payload is at most its entries × 16 MiB.
const SPA_MAXBLOCKSHIFT: u32 = 24;

/// A block's identity in the L2ARC: its first DVA and birth txg (the hdr's b_dva, b_birth).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct L2Key {
    pub vdev: u64,
    pub offset: u64,
    pub birth: u64,
}

impl L2Key {
    pub fn of(bp: &BlockPointer) -> Option<L2Key> {
        (!bp.embedded && !bp.is_hole()).then(|| L2Key { vdev: bp.dva[0].vdev, offset: bp.dva[0].offset, birth: bp.birth })
    }
    fn of_arc(k: &ArcKey) -> L2Key {
        L2Key { vdev: k.vdev, offset: k.offset, birth: k.birth }
    }
}

/// How much one feed writes and looks at: l2arc_write_max (+ l2arc_write_boost while the ARC
/// is cold) bytes, from l2arc_headroom times that of each list's tail (× l2arc_headroom_boost
/// percent with compressed ARC: compressed buffers take less room, so it looks further).
#[derive(Clone, Copy, Debug)]
struct FeedSize {
    write_max: u64,
    write_boost: u64,
    headroom: u64,
    headroom_boost: u64,
}

impl FeedSize {
    /// As the tunables say now.
    fn now() -> FeedSize {
        FeedSize {
            write_max: tunables::l2arc_write_max(),
            write_boost: tunables::l2arc_write_boost(),
            headroom: tunables::l2arc_headroom(),
            headroom_boost: if tunables::compressed_arc_enabled() { tunables::l2arc_headroom_boost() } else { 100 },
        }
    }
}

/// Where a buffer lives on a cache device.
#[derive(Clone, Copy, Debug)]
struct L2Buf {
    dev: u64,
    daddr: u64,
    lsize: u64,
    psize: u64,
    asize: u64,
    compress: u8,
    /// The first word of the block's checksum when the feed wrote it (0: unknown, a rebuilt
    /// entry). A block rewritten in place in a later sync pass keeps its DVA and birth, which
    /// name the entry, but not its checksum: the old bytes, fed after the rewrite, must not
    /// answer a read of the new block (OpenZFS drops the old header when the block is
    /// rewritten, so it never meets them).
    cksum0: u64,
    /// From MFU (else MRU), metadata (else data), prefetched: the arcstats breakdown of
    /// what the devices hold (l2_mfu_asize and the like).
    mfu: bool,
    meta: bool,
    prefetch: bool,
}

macro_rules! l2stats {
    ($($name:ident),* $(,)?) => {
        /// The L2ARC's counters, under their arcstats names.
        #[derive(Default)]
        pub struct L2Stats { $(pub $name: AtomicU64,)* }
        impl L2Stats {
            pub const fn new() -> L2Stats {
                L2Stats { $($name: AtomicU64::new(0),)* }
            }

            /// (arcstats name, value) of every counter.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((concat!("l2_", stringify!($name)), self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

l2stats!(
    hits, misses, feeds, rw_clash, read_bytes, write_bytes, writes_sent, writes_done, writes_error, evict_reading, abort_lowmem, cksum_bad, io_error,
    log_blk_writes, rebuild_success, rebuild_unsupported, rebuild_io_errors, rebuild_dh_errors, rebuild_cksum_lb_errors,
    rebuild_lowmem, rebuild_size, rebuild_asize, rebuild_bufs, rebuild_bufs_precached, rebuild_log_blks,
);

/// The process's L2ARC counters, every pool's since the daemon started (arcstats counts as
/// OpenZFS's: they do not go back when a pool is exported).
pub static L2_STATS: L2Stats = L2Stats::new();

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// I/O counts of a cache device (zpool iostat).
#[derive(Default)]
pub struct DevIo {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    /// Latency and request-size histograms, I/Os in flight (`zpool iostat -l/-w/-r/-q`): the
    /// reads are demand reads (sync read), the feed's writes async writes, as OpenZFS issues
    /// them.
    pub ex: crate::vdev::iostat::IoStatsEx,
}

/// A cache device's ring and log state (l2arc_dev_t's).
#[derive(Default)]
struct DevState {
    hand: u64,
    evict: u64,
    first: bool,
    /// The two newest log blocks (dh_start_lbps).
    lbps: [L2LogBlkPtr; 2],
    /// Log blocks on the device still valid, newest first (l2ad_lbptr_list).
    lb_list: VecDeque<L2LogBlkPtr>,
    /// Entries of the log block being filled, and its payload's size and start.
    open: Vec<L2LogEntPhys>,
    payload_asize: u64,
    payload_start: u64,
    /// Buffers on the device by address: (key, asize, lsize).
    bufs: BTreeMap<u64, (L2Key, u64, u64)>,
    /// Bytes of buffers and log blocks on the device.
    alloc: u64,
    lsize: u64,
}

impl DevState {
    fn lb_asize(&self) -> u64 {
        self.lb_list.iter().map(|l| l.asize()).sum()
    }
}

/// One cache device of the pool.
pub struct L2Dev {
    pub guid: u64,
    pub path: PathBuf,
    dev: Arc<dyn BlockDevice>,
    ashift: u8,
    start: u64,
    end: u64,
    hdr_asize: u64,
    log_entries: u64,
    writable: bool,
    st: Mutex<DevState>,
    pub io: DevIo,
    faulted: AtomicBool,
    rebuilding: AtomicBool,
}

impl L2Dev {
    fn hands(st: &DevState, start: u64, end: u64) -> L2Hands {
        L2Hands { start, end, hand: st.hand, evict: st.evict, first: st.first }
    }

    fn asize(&self, psize: u64) -> u64 {
        let s = 1u64 << self.ashift;
        psize.div_ceil(s) * s
    }

    /// The header as it stands (l2arc_dev_hdr_update's fields).
    fn header(&self, spa_guid: u64, st: &DevState) -> L2DevHdrPhys {
        L2DevHdrPhys {
            version: L2ARC_PERSISTENT_VERSION,
            spa_guid,
            vdev_guid: self.guid,
            log_entries: self.log_entries,
            evict: st.evict,
            flags: if st.first { L2ARC_DEV_HDR_EVICT_FIRST } else { 0 },
            start: self.start,
            end: self.end,
            start_lbps: st.lbps,
            lb_asize: st.lb_asize(),
            lb_count: st.lb_list.len() as u64,
            trim_action_time: 0,
            trim_state: 0,
        }
    }

    fn write_header(&self, spa_guid: u64, st: &DevState) -> std::io::Result<()> {
        let b = self.header(spa_guid, st).encode(self.hdr_asize as usize, VDEV_LABEL_START_SIZE);
        self.dev.write_at(&b, VDEV_LABEL_START_SIZE)
    }
}

/// A cache device as `zpool iostat -v` shows it.
pub struct L2DevReport {
    pub guid: u64,
    pub path: PathBuf,
    pub size: u64,
    pub alloc: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub faulted: bool,
    pub ex: crate::vdev::iostat::IoStatsSnap,
}

/// The L2ARC of one pool.
pub struct L2Arc {
    spa_guid: u64,
    devs: RwLock<Vec<Arc<L2Dev>>>,
    index: Mutex<HashMap<L2Key, L2Buf>>,
    rr: AtomicUsize,
    stop: AtomicBool,
    /// This pool's counters (`L2_STATS` holds the process's).
    pub stats: L2Stats,
}

/// The cache device geometry OpenZFS derives (l2arc_add_vdev, l2arc_rebuild_dev): the
/// usable ring [start, end) after the labels and the header, and the log entries per block.
pub fn geometry(dev_size: u64, ashift: u8) -> Option<(u64, u64, u64, u64)> {
    let osize = dev_size & !(VDEV_LABEL_SIZE - 1);
    let asize = osize.checked_sub(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)?;
    let hdr_asize = (L2ARC_DEV_HDR_SIZE as u64).max(1 << ashift);
    let start = VDEV_LABEL_START_SIZE + hdr_asize;
    let end = VDEV_LABEL_START_SIZE + asize;
    if end <= start + (1 << 20) {
        return None;
    }
    let log_entries = if end < tunables::l2arc_rebuild_blocks_min_l2size() { 0 } else { ((end - start) >> SPA_MAXBLOCKSHIFT).min(L2ARC_LOG_BLK_MAX_ENTRIES as u64) };
    Some((start, end, hdr_asize, log_entries))
}

impl L2Arc {
    pub fn new(spa_guid: u64) -> L2Arc {
        L2Arc { spa_guid, devs: RwLock::new(Vec::new()), index: Mutex::new(HashMap::new()), rr: AtomicUsize::new(0), stop: AtomicBool::new(false), stats: L2Stats::default() }
    }

    /// Count in this L2ARC's counters and the process's.
    fn count(&self, which: fn(&L2Stats) -> &AtomicU64, n: u64) {
        bump(which(&self.stats), n);
        bump(which(&L2_STATS), n);
    }

    /// Whether any cache device is in use (reads look up the index only then).
    pub fn has_devices(&self) -> bool {
        self.devs.read().unwrap_or_else(|p| p.into_inner()).iter().any(|d| !d.faulted.load(Ordering::Relaxed))
    }

    /// Headers the index holds.
    pub fn headers(&self) -> u64 {
        self.index.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }

    /// Add cache device `guid` (l2arc_add_vdev): rebuilt in the background from its log blocks
    /// when its header is this pool's, else started empty (a fresh header when `writable`).
    pub fn add_device(self: &Arc<Self>, guid: u64, path: PathBuf, dev: Arc<dyn BlockDevice>, ashift: u8, writable: bool) -> Result<(), String> {
        let Some((start, end, hdr_asize, log_entries)) = geometry(dev.size(), ashift) else {
            return Err(format!("cache device {}: too small ({} bytes)", path.display(), dev.size()));
        };
        let d = Arc::new(L2Dev {
            guid,
            path,
            dev,
            ashift,
            start,
            end,
            hdr_asize,
            log_entries,
            writable,
            st: Mutex::new(DevState { hand: start, evict: start, first: true, ..Default::default() }),
            io: DevIo::default(),
            faulted: AtomicBool::new(false),
            rebuilding: AtomicBool::new(false),
        });
        let hdr = self.read_header(&d);
        if let Some(h) = hdr.filter(|_| log_entries > 0) {
            d.rebuilding.store(true, Ordering::Release);
            self.devs.write().unwrap_or_else(|p| p.into_inner()).push(d.clone());
            let me = self.clone();
            let dd = d.clone();
            std::thread::Builder::new()
                .name("l2arc_rebuild".into())
                .spawn(move || {
                    lowest_priority();
                    me.rebuild(&dd, &h);
                    dd.rebuilding.store(false, Ordering::Release);
                })
                .map_err(|e| format!("cache device {}: cannot start its rebuild: {e}", d.path.display()))?;
            return Ok(());
        }
        if writable {
            let st = d.st.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = d.write_header(self.spa_guid, &st) {
                log(format!("cache device {}: cannot write its L2ARC header: {e}", d.path.display()));
                d.faulted.store(true, Ordering::Relaxed);
            }
        }
        self.devs.write().unwrap_or_else(|p| p.into_inner()).push(d);
        Ok(())
    }

    /// The device's header when it is one this pool can rebuild from (l2arc_dev_hdr_read);
    /// None (counted, logged) otherwise.
    fn read_header(&self, d: &L2Dev) -> Option<L2DevHdrPhys> {
        let mut b = vec![0u8; d.hdr_asize as usize];
        if let Err(e) = d.dev.read_at(&mut b, VDEV_LABEL_START_SIZE) {
            self.count(|s| &s.rebuild_dh_errors, 1);
            log(format!("cache device {}: L2ARC header unreadable ({e}); starting empty", d.path.display()));
            return None;
        }
        let magic = u64::from_le_bytes(b[..8].try_into().expect("8"));
        if magic == 0 {
            return None; // a new device
        }
        match L2DevHdrPhys::decode(&b, VDEV_LABEL_START_SIZE) {
            Ok(h)
                if h.spa_guid == self.spa_guid
                    && h.vdev_guid == d.guid
                    && h.version == L2ARC_PERSISTENT_VERSION
                    && h.log_entries == d.log_entries
                    && h.end == d.end
                    && range_check_overlap(d.start, d.end, h.evict) =>
            {
                Some(h)
            }
            Ok(_) => {
                self.count(|s| &s.rebuild_unsupported, 1);
                log(format!("cache device {}: L2ARC header of another pool, device or geometry; starting empty", d.path.display()));
                None
            }
            Err(e) => {
                self.count(|s| &s.rebuild_unsupported, 1);
                if magic == L2ARC_DEV_HDR_MAGIC || magic.swap_bytes() == L2ARC_DEV_HDR_MAGIC {
                    log(format!("cache device {}: bad L2ARC header ({e}); starting empty", d.path.display()));
                }
                None
            }
        }
    }

    /// l2arc_rebuild: walk the log block chains from the header and restore their entries.
    fn rebuild(&self, d: &L2Dev, h: &L2DevHdrPhys) {
        let mut st = d.st.lock().unwrap_or_else(|p| p.into_inner());
        st.evict = h.evict.max(d.start);
        st.hand = (h.start_lbps[0].daddr + h.start_lbps[0].asize()).max(d.start);
        st.first = h.flags & L2ARC_DEV_HDR_EVICT_FIRST != 0;
        st.lbps = h.start_lbps;
        if !tunables::l2arc_rebuild_enabled() {
            log(format!("cache device {}: L2ARC rebuild disabled", d.path.display()));
            return;
        }
        let mut lbps = h.start_lbps;
        let mut ok = true;
        let cap = self.header_cap();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                ok = false;
                break;
            }
            if !L2Dev::hands(&st, d.start, d.end).lbp_valid(&lbps[0]) {
                break;
            }
            let asize = lbps[0].asize();
            let mut b = vec![0u8; asize as usize];
            if let Err(e) = d.dev.read_at(&mut b, lbps[0].daddr) {
                self.count(|s| &s.rebuild_io_errors, 1);
                log(format!("cache device {}: L2ARC log block at {} unreadable ({e}); rebuild stops", d.path.display(), lbps[0].daddr));
                ok = false;
                break;
            }
            let lb = match L2LogBlkPhys::read(&b, &lbps[0], d.log_entries as usize) {
                Ok(lb) => lb,
                Err(e) => {
                    self.count(|s| &s.rebuild_cksum_lb_errors, 1);
                    log(format!("cache device {}: L2ARC log block at {}: {e}; rebuild stops", d.path.display(), lbps[0].daddr));
                    ok = false;
                    break;
                }
            };
            if self.headers() * L2_HDR_SIZE > cap {
                self.count(|s| &s.rebuild_lowmem, 1);
                log(format!("cache device {}: L2ARC headers reached l2arc_meta_percent of the ARC; rebuild stops", d.path.display()));
                ok = false;
                break;
            }
            self.restore(d, &mut st, &lb);
            st.lb_list.push_back(lbps[0]);
            st.alloc += asize;
            self.count(|s| &s.rebuild_log_blks, 1);
            if range_check_overlap(lbps[1].payload_start, lbps[0].payload_start, st.evict) && !st.first {
                break;
            }
            lbps = [lbps[1], lb.prev_lbp];
        }
        if ok && !st.lb_list.is_empty() {
            self.count(|s| &s.rebuild_success, 1);
            log(format!("cache device {}: L2ARC rebuild successful, restored {} blocks", d.path.display(), st.lb_list.len()));
        } else if ok {
            // Nothing valid: a fresh header.
            st.lbps = Default::default();
            if d.writable {
                let _ = d.write_header(self.spa_guid, &st);
            }
        }
    }

    /// l2arc_log_blk_restore: a log block's entries become L2ARC-only headers.
    fn restore(&self, d: &L2Dev, st: &mut DevState, lb: &L2LogBlkPhys) {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        for le in lb.entries.iter().rev() {
            let dva = Dva::decode(le.dva[0], le.dva[1]);
            let key = L2Key { vdev: dva.vdev, offset: dva.offset, birth: le.birth };
            let (lsize, psize) = (le.prop.lsize(), le.prop.psize());
            let asize = d.asize(psize);
            if le.daddr < d.start || le.daddr + asize > d.end || psize > lsize.max(512) || lsize > zio::MAX_BLOCK {
                continue; // not an entry of this ring
            }
            self.count(|s| &s.rebuild_bufs, 1);
            self.count(|s| &s.rebuild_size, lsize);
            self.count(|s| &s.rebuild_asize, asize);
            if index.contains_key(&key) {
                self.count(|s| &s.rebuild_bufs_precached, 1);
                continue;
            }
            index.insert(key, L2Buf {
                dev: d.guid,
                daddr: le.daddr,
                lsize,
                psize,
                asize,
                compress: le.prop.compress(),
                cksum0: 0,
                mfu: le.prop.state() == oxzfs_format::l2arc::ARC_STATE_MFU,
                meta: le.prop.typ() == oxzfs_format::l2arc::ARC_BUFC_METADATA,
                prefetch: le.prop.prefetch(),
            });
            st.bufs.insert(le.daddr, (key, asize, lsize));
            st.alloc += asize;
            st.lsize += lsize;
        }
    }

    fn header_cap(&self) -> u64 {
        // Against the largest ARC: the pools' ARCs are sized alike.
        crate::tunables::arc_max().unwrap_or_else(AdaptiveCache::default_max) * tunables::l2arc_meta_percent() / 100
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Stop feeding and rebuilding (export, device changes): a feed under way finishes first.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for d in self.devs.read().unwrap_or_else(|p| p.into_inner()).iter() {
            let mut st = d.st.lock().unwrap_or_else(|p| p.into_inner());
            self.commit_partial(d, &mut st);
        }
    }

    /// At export: the open log block, whose buffers are on the device already, is written
    /// too, its empty slots filled with copies of its last entry (a rebuild, ours or
    /// OpenZFS's, finds the copies already restored: l2_rebuild_bufs_precached). Otherwise
    /// the buffers of the last feeds since a full log block — up to a log block's worth —
    /// would not be found by the next import.
    fn commit_partial(&self, d: &L2Dev, st: &mut DevState) {
        let Some(&last) = st.open.last() else { return };
        let lb_asize = d.asize(L2ARC_LOG_BLK_SIZE as u64);
        if !d.writable || d.faulted.load(Ordering::Relaxed) || d.log_entries == 0 || st.hand + lb_asize >= d.end {
            return;
        }
        self.evict(d, st, lb_asize);
        st.open.resize(d.log_entries as usize, last);
        let at = st.hand;
        let bytes = self.commit_open(d, st);
        let r = d.dev.write_at(&bytes, at).and_then(|_| d.write_header(self.spa_guid, st));
        if let Err(e) = r {
            log(format!("cache device {}: last L2ARC log block not written ({e})", d.path.display()));
        }
    }

    /// l2arc_log_blk_commit: the open log block's bytes, to be written at the hand (which
    /// moves past it), chained from the header's newest pointers.
    fn commit_open(&self, d: &L2Dev, st: &mut DevState) -> Vec<u8> {
        let lb = L2LogBlkPhys { prev_lbp: st.lbps[1], entries: std::mem::take(&mut st.open) };
        let (bytes, lbp) = lb.commit(st.hand, d.ashift, st.payload_asize, st.payload_start);
        st.hand += lbp.asize();
        st.lbps = [lbp, st.lbps[0]];
        st.lb_list.push_front(lbp);
        st.alloc += lbp.asize();
        st.payload_asize = 0;
        st.payload_start = 0;
        self.count(|s| &s.log_blk_writes, 1);
        self.count(|s| &s.write_bytes, lbp.asize());
        bytes
    }

    /// Take cache device `guid` out (zpool remove; l2arc_remove_vdev): its buffers are
    /// forgotten at once. Returns whether it was there.
    pub fn remove_device(&self, guid: u64) -> bool {
        let d = {
            let mut devs = self.devs.write().unwrap_or_else(|p| p.into_inner());
            let Some(i) = devs.iter().position(|d| d.guid == guid) else { return false };
            devs.remove(i)
        };
        let _st = d.st.lock().unwrap_or_else(|p| p.into_inner());
        self.index.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, b| b.dev != guid);
        true
    }

    /// Drop a failing device: no more feeds or reads go to it.
    fn fault(&self, d: &L2Dev, why: &str) {
        if !d.faulted.swap(true, Ordering::Relaxed) {
            log(format!("cache device {}: {why}; dropped from the L2ARC", d.path.display()));
            self.index.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, b| b.dev != d.guid);
        }
    }

    /// Forget a block (rewritten in place by a later sync pass of its txg, or freed).
    pub fn forget(&self, bp: &BlockPointer) {
        if let Some(k) = L2Key::of(bp) {
            if let Ok(mut i) = self.index.lock() {
                i.remove(&k);
            }
        }
    }

    /// The logical bytes of `bp` from a cache device, verified, and its physical bytes when
    /// compressed (for the compressed ARC); None (counted) when the L2ARC does not hold it or
    /// what it holds is unreadable or wrong.
    pub fn read(&self, bp: &BlockPointer, salt: &[u8; 32]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        let key = L2Key::of(bp)?;
        let buf = self.index.lock().unwrap_or_else(|p| p.into_inner()).get(&key).copied();
        let Some(buf) = buf else {
            self.count(|s| &s.misses, 1);
            return None;
        };
        let drop_entry = || {
            let mut i = self.index.lock().unwrap_or_else(|p| p.into_inner());
            if i.get(&key).is_some_and(|b| b.dev == buf.dev && b.daddr == buf.daddr) {
                i.remove(&key);
            }
        };
        let dev = self.devs.read().unwrap_or_else(|p| p.into_inner()).iter().find(|d| d.guid == buf.dev && !d.faulted.load(Ordering::Relaxed)).cloned();
        let Some(dev) = dev else {
            drop_entry();
            self.count(|s| &s.misses, 1);
            return None;
        };
        if buf.psize != bp.psize || buf.lsize != bp.lsize || buf.compress != bp.compress || (buf.cksum0 != 0 && buf.cksum0 != bp.cksum[0]) {
            // Another block under the same DVA and birth (rewritten in place): not the one
            // asked for, a miss.
            drop_entry();
            self.count(|s| &s.misses, 1);
            return None;
        }
        let mut b = vec![0u8; buf.asize as usize];
        let timer = dev.io.ex.begin(false, buf.asize);
        let r = dev.dev.read_at(&mut b, buf.daddr);
        drop(timer);
        if let Err(e) = r {
            self.count(|s| &s.io_error, 1);
            drop_entry();
            if dev.io.read_errors.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_READ_ERRORS {
                self.fault(&dev, &format!("read errors ({e})"));
            }
            return None;
        }
        bump(&dev.io.reads, 1);
        bump(&dev.io.read_bytes, buf.asize);
        b.truncate(buf.psize as usize);
        let data = if zio::verify_bp(bp, &b, salt) { zio::decompress_keeping(bp, b).ok() } else { None };
        match data {
            Some(d) => {
                self.count(|s| &s.hits, 1);
                self.count(|s| &s.read_bytes, buf.psize);
                Some(d)
            }
            None => {
                self.count(|s| &s.cksum_bad, 1);
                drop_entry();
                None
            }
        }
    }

    /// One feed (l2arc_feed_thread's body) from the buffers of the pool whose ARC keys carry
    /// `spa`: returns the bytes written.
    pub fn feed_once(&self, arc: &AdaptiveCache, spa: u64, salt: &[u8; 32]) -> u64 {
        self.feed(arc, spa, salt, false, &FeedSize::now())
    }

    /// The last feed before an export (after its last sync): what the ARC holds eligible and
    /// not yet on a cache device, from anywhere in its lists, metadata first, up to
    /// l2arc_write_max (+ l2arc_write_boost while cold) bytes, on each writable device. The
    /// tails a periodic feed looks at never hold the blocks the last txgs rewrote (dnode and
    /// indirect blocks of files just read under atime=on, of files just written): without
    /// this, the first reads after the import would find only their older copies on the cache
    /// device, stale, and go to the pool for them. OpenZFS feeds no more at export; this
    /// writes no more than one feed does.
    pub fn feed_last(&self, arc: &AdaptiveCache, spa: u64, salt: &[u8; 32]) -> u64 {
        let n = self.devs.read().unwrap_or_else(|p| p.into_inner()).len();
        let size = FeedSize::now();
        (0..n).map(|_| self.feed(arc, spa, salt, true, &size)).sum()
    }

    fn feed(&self, arc: &AdaptiveCache, spa: u64, salt: &[u8; 32], last: bool, fs: &FeedSize) -> u64 {
        if self.stop.load(Ordering::Relaxed) {
            return 0;
        }
        let usable: Vec<Arc<L2Dev>> = self
            .devs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|d| d.writable && !d.faulted.load(Ordering::Relaxed) && !d.rebuilding.load(Ordering::Acquire))
            .cloned()
            .collect();
        if usable.is_empty() {
            return 0;
        }
        let d = usable[self.rr.fetch_add(1, Ordering::Relaxed) % usable.len()].clone();
        if self.headers() * L2_HDR_SIZE > arc.stats().c_max * tunables::l2arc_meta_percent() / 100 {
            self.count(|s| &s.abort_lowmem, 1);
            return 0;
        }
        self.count(|s| &s.feeds, 1);
        let warm = arc.warm();
        let size = fs.write_max + if warm { 0 } else { fs.write_boost };
        let scan = size.saturating_mul(fs.headroom).saturating_mul(fs.headroom_boost) / 100;
        // First what the ARC evicted before a feed could write it, then the lists' tails;
        // the evicted ones (bounded by the ARC) are written beyond l2arc_write_max.
        let mut cands = arc.take_l2_pending(spa);
        let pending: u64 = cands.iter().map(|c| c.bp.psize).sum();
        let size = size + pending;
        if last {
            let mut all = arc.l2_candidates(spa, 0, &|_| false);
            all.sort_by_key(|c| !is_metadata(&c.bp));
            cands.extend(all);
        } else {
            cands.extend(arc.l2_candidates(spa, scan, &|_| false));
        }
        // Room ahead of the hand for the buffers and their log blocks (l2arc_write_size and
        // l2arc_log_blk_overhead, counting the candidates rather than 512-byte buffers), never
        // more than half the ring.
        let ring = d.end - d.start;
        let n = (cands.len() as u64).min(size >> 9);
        let lb_room = if d.log_entries > 0 { d.asize(L2ARC_LOG_BLK_SIZE as u64) } else { 0 };
        let overhead = if d.log_entries > 0 { n.div_ceil(d.log_entries) * lb_room } else { 0 };
        let distance = (size + overhead).min(ring / 2);
        let mut st = d.st.lock().unwrap_or_else(|p| p.into_inner());
        if self.stop.load(Ordering::Relaxed) {
            return 0;
        }
        self.evict(&d, &mut st, distance);
        // (l2arc_noprefetch: a prefetched buffer is not a candidate until a demand read hits
        // it; the ARC gives it no block pointer before that, see `Spa::arc_keep`.)
        let batch_start = st.hand;
        let mut batch: Vec<u8> = Vec::new();
        let mut placed: Vec<(L2Key, L2Buf)> = Vec::new();
        let mut placed_keys: Vec<ArcKey> = Vec::new();
        let mut write_psize = 0u64;
        {
            let index = self.index.lock().unwrap_or_else(|p| p.into_inner());
            let in_l2 = |k: &ArcKey| index.contains_key(&L2Key::of_arc(k));
            let mut seen = std::collections::HashSet::new();
            for c in cands.iter().filter(|c| !in_l2(&c.key)) {
                if !seen.insert(c.key) {
                    continue; // evicted, read again and in the lists once more
                }
                // Kept compressed: written as it is (verified when it came in); else
                // compressed again, and written only when that reproduces the checksum.
                let phys: std::borrow::Cow<[u8]> = match (&c.phys, &c.data) {
                    (Some(p), _) if p.len() as u64 == c.bp.psize => std::borrow::Cow::Borrowed(&p[..]),
                    (_, Some(d)) => match zio::physical_for_l2(&c.bp, d, salt) {
                        Some(p) => p,
                        None => continue,
                    },
                    _ => continue,
                };
                let psize = phys.len() as u64;
                let asize = d.asize(psize);
                if write_psize + psize > size || batch.len() as u64 + asize + lb_room > distance || st.hand + asize + lb_room > d.end {
                    break;
                }
                let daddr = st.hand;
                batch.extend_from_slice(&phys);
                batch.resize(batch.len() + (asize - psize) as usize, 0);
                st.hand += asize;
                write_psize += psize;
                let key = L2Key::of_arc(&c.key);
                placed_keys.push(c.key);
                placed.push((key, L2Buf { dev: d.guid, daddr, lsize: c.bp.lsize, psize, asize, compress: c.bp.compress, cksum0: c.bp.cksum[0], mfu: c.mfu, meta: is_metadata(&c.bp), prefetch: c.prefetch }));
                if d.log_entries > 0 {
                    self.log_insert(&d, &mut st, &c.bp, daddr, psize, (c.mfu, c.prefetch), &mut batch);
                }
            }
        }
        if batch.is_empty() {
            if st.evict != batch_start {
                let _ = d.write_header(self.spa_guid, &st);
            }
            return 0;
        }
        self.count(|s| &s.writes_sent, 1);
        let timer = d.io.ex.begin(true, batch.len() as u64);
        let r = d.dev.write_at(&batch, batch_start);
        drop(timer);
        if let Err(e) = r {
            self.count(|s| &s.writes_error, 1);
            bump(&d.io.write_errors, 1);
            st.hand = batch_start;
            drop(st);
            self.fault(&d, &format!("write of {} bytes at {batch_start} failed ({e})", batch.len()));
            return 0;
        }
        self.count(|s| &s.writes_done, 1);
        self.count(|s| &s.write_bytes, write_psize);
        bump(&d.io.writes, 1);
        bump(&d.io.write_bytes, batch.len() as u64);
        arc.mark_l2(&placed_keys);
        {
            let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
            for (key, buf) in placed {
                st.bufs.insert(buf.daddr, (key, buf.asize, buf.lsize));
                st.alloc += buf.asize;
                st.lsize += buf.lsize;
                index.insert(key, buf);
            }
        }
        if let Err(e) = d.write_header(self.spa_guid, &st) {
            drop(st);
            self.fault(&d, &format!("header write failed ({e})"));
        }
        batch.len() as u64
    }

    /// l2arc_log_blk_insert (+ l2arc_log_blk_commit when the block is full: its bytes go
    /// into the batch right after the buffer).
    #[allow(clippy::too_many_arguments)]
    fn log_insert(&self, d: &L2Dev, st: &mut DevState, bp: &BlockPointer, daddr: u64, psize: u64, (mfu, prefetch): (bool, bool), batch: &mut Vec<u8>) {
        let mut prop = L2Prop::default();
        prop.set_lsize(bp.lsize);
        prop.set_psize(psize);
        prop.set_compress(bp.compress);
        prop.set_typ(if is_metadata(bp) { ARC_BUFC_METADATA } else { ARC_BUFC_DATA });
        prop.set_state(if mfu { ARC_STATE_MFU } else { ARC_STATE_MRU });
        prop.set_prefetch(prefetch);
        let (w0, w1) = bp.dva[0].encode();
        if st.open.is_empty() {
            st.payload_start = daddr;
        }
        st.open.push(L2LogEntPhys { dva: [w0, w1], birth: bp.birth, prop, daddr, complevel: 0 });
        st.payload_asize += d.asize(psize);
        if st.open.len() as u64 == d.log_entries {
            let bytes = self.commit_open(d, st);
            batch.extend_from_slice(&bytes);
        }
    }

    /// l2arc_evict: make room for `distance` bytes (buffers and their log blocks) ahead of
    /// the hand, wrapping to the start when the end is near (`distance` is under the ring's
    /// size: the second pass always ends).
    fn evict(&self, d: &L2Dev, st: &mut DevState, distance: u64) {
        assert!(distance < d.end - d.start, "L2ARC eviction of {distance} bytes in a ring of {}", d.end - d.start);
        loop {
            let rerun = st.hand + distance >= d.end;
            let taddr = if rerun { d.end } else { st.hand + distance };
            if !st.first {
                st.evict = st.evict.max(taddr);
                // Log blocks that an eviction would overwrite (oldest first).
                while let Some(lbp) = st.lb_list.back().copied() {
                    if L2Dev::hands(st, d.start, d.end).lbp_valid(&lbp) {
                        break;
                    }
                    st.lb_list.pop_back();
                    st.alloc -= lbp.asize();
                }
                let gone: Vec<u64> = st.bufs.range(st.hand..st.evict).map(|(a, _)| *a).collect();
                if !gone.is_empty() {
                    let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
                    for a in gone {
                        let (key, asize, lsize) = st.bufs.remove(&a).expect("listed");
                        st.alloc -= asize;
                        st.lsize -= lsize;
                        if index.get(&key).is_some_and(|b| b.dev == d.guid && b.daddr == a) {
                            index.remove(&key);
                        }
                    }
                }
            }
            if !rerun {
                break;
            }
            st.hand = d.start;
            st.evict = d.start;
            st.first = false;
        }
    }

    /// Every device's numbers (zpool iostat -v, arcstats l2_size/l2_asize).
    pub fn devices(&self) -> Vec<L2DevReport> {
        self.devs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|d| {
                let alloc = d.st.try_lock().map(|s| s.alloc).unwrap_or(0);
                L2DevReport {
                    guid: d.guid,
                    path: d.path.clone(),
                    size: d.end - d.start,
                    alloc,
                    reads: d.io.reads.load(Ordering::Relaxed),
                    writes: d.io.writes.load(Ordering::Relaxed),
                    read_bytes: d.io.read_bytes.load(Ordering::Relaxed),
                    write_bytes: d.io.write_bytes.load(Ordering::Relaxed),
                    faulted: d.faulted.load(Ordering::Relaxed),
                    ex: d.io.ex.snapshot(),
                }
            })
            .collect()
    }

    /// arcstats' L2ARC size rows: (l2_size: logical bytes, l2_asize: allocated bytes of
    /// buffers, l2_log_blk_count, l2_log_blk_asize, l2_hdr_size).
    pub fn sizes(&self) -> (u64, u64, u64, u64, u64) {
        let (mut lsize, mut asize, mut lbc, mut lba) = (0, 0, 0, 0);
        for d in self.devs.read().unwrap_or_else(|p| p.into_inner()).iter() {
            if let Ok(st) = d.st.try_lock() {
                let l = st.lb_asize();
                lsize += st.lsize;
                asize += st.alloc - l;
                lbc += st.lb_list.len() as u64;
                lba += l;
            }
        }
        (lsize, asize, lbc, lba, self.headers() * L2_HDR_SIZE)
    }

    /// Allocated bytes of the buffers on the devices: from MFU, from MRU, prefetched, data,
    /// metadata (l2_mfu_asize, l2_mru_asize, l2_prefetch_asize, l2_bufc_data_asize,
    /// l2_bufc_metadata_asize).
    pub fn asize_breakdown(&self) -> [u64; 5] {
        let mut out = [0u64; 5];
        for b in self.index.lock().unwrap_or_else(|p| p.into_inner()).values() {
            out[if b.mfu { 0 } else { 1 }] += b.asize;
            if b.prefetch {
                out[2] += b.asize;
            }
            out[if b.meta { 4 } else { 3 }] += b.asize;
        }
        out
    }
}

/// A message for the daemon's log (its standard error): devices left out, rebuilds.
pub fn log(msg: String) {
    eprintln!("l2arc: {msg}");
}

/// Run the calling thread at the lowest priority (nice 19), as OpenZFS runs its L2ARC feed and
/// rebuild threads (minclsyspri, MAX_PRIO - 1): their work waits for the readers', whose CPU
/// they would otherwise take on a busy machine. On Linux the nice value is the thread's own.
pub(crate) fn lowest_priority() {
    // SAFETY: gettid and setpriority take no pointers; a failure leaves the priority as it is.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// Whether a block is metadata for the ARC (arc_buf_type: indirect blocks and every object
/// type but file and volume data).
pub fn is_metadata(bp: &BlockPointer) -> bool {
    bp.level > 0 || oxzfs_format::types::ot_is_metadata(bp.typ)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::BlockDevice;

    /// A cache device in memory that can be made to fail.
    struct MemDev {
        bytes: Mutex<Vec<u8>>,
        fail: AtomicBool,
    }

    impl BlockDevice for MemDev {
        fn size(&self) -> u64 {
            self.bytes.lock().unwrap().len() as u64
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            if self.fail.load(Ordering::Relaxed) {
                return Err(std::io::Error::other("injected"));
            }
            let b = self.bytes.lock().unwrap();
            buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            if self.fail.load(Ordering::Relaxed) {
                return Err(std::io::Error::other("injected"));
            }
            self.bytes.lock().unwrap()[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn name(&self) -> String {
            "mem".into()
        }
    }

    fn block(i: u64, salt: &[u8; 32]) -> (BlockPointer, Vec<u8>) {
        let data: Vec<u8> = (0..8192u64).map(|b| ((b * 31 + i * 7) % 251) as u8).collect();
        let cksum = oxzfs_format::checksum::compute(oxzfs_format::checksum::ZIO_CHECKSUM_FLETCHER_4, &data, true, salt).unwrap();
        let mut bp = BlockPointer { lsize: 8192, psize: 8192, compress: oxzfs_format::compress::ZIO_COMPRESS_OFF, checksum: oxzfs_format::checksum::ZIO_CHECKSUM_FLETCHER_4, typ: oxzfs_format::types::DMU_OT_PLAIN_FILE_CONTENTS, little_endian: true, birth: 10, fill: 1, cksum, ..Default::default() };
        bp.dva[0] = Dva { vdev: 0, offset: i * 8192, asize: 8192, gang: false };
        (bp, data)
    }

    fn mem_dev(size: usize) -> Arc<MemDev> {
        Arc::new(MemDev { bytes: Mutex::new(vec![0u8; size]), fail: AtomicBool::new(false) })
    }

    /// A 64 MiB device of pool `pool` fed once with `n` blocks: (device, L2ARC, blocks, bytes
    /// written). Log blocks on a small device: the tests that need them all set this tunable.
    #[allow(clippy::type_complexity)]
    fn fed_device(n: u64, pool: u64, guid: u64, salt: &[u8; 32]) -> (Arc<MemDev>, Arc<L2Arc>, Vec<(BlockPointer, Vec<u8>)>, u64) {
        tunables::set("l2arc_rebuild_blocks_min_l2size", "0").unwrap();
        let mem = mem_dev(64 << 20);
        let (arc, blocks) = setup(n, salt);
        let l2 = Arc::new(L2Arc::new(pool));
        l2.add_device(guid, "mem".into(), mem.clone(), 9, true).unwrap();
        let wrote = l2.feed_once(&arc, 1, salt);
        (mem, l2, blocks, wrote)
    }

    fn wait_rebuilt(l: &L2Arc) {
        while l.devs.read().unwrap().iter().any(|d| d.rebuilding.load(Ordering::Acquire)) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn setup(n: u64, salt: &[u8; 32]) -> (AdaptiveCache, Vec<(BlockPointer, Vec<u8>)>) {
        let arc = AdaptiveCache::new(64 << 20);
        let blocks: Vec<_> = (0..n).map(|i| block(i, salt)).collect();
        for (bp, d) in &blocks {
            arc.insert_l2(ArcKey { spa: 1, vdev: 0, offset: bp.dva[0].offset, birth: bp.birth, cksum: bp.cksum }, Arc::new(d.clone()), bp);
        }
        (arc, blocks)
    }

    /// A block at the head of a warm ARC (a dnode block the last txg rewrote) is beyond what
    /// a periodic feed looks at; the export's last feed writes it, metadata before data.
    #[test]
    fn the_last_feed_takes_new_metadata_from_the_head() {
        let salt = [0u8; 32];
        tunables::set("l2arc_rebuild_blocks_min_l2size", "0").unwrap();
        let key = |bp: &BlockPointer| ArcKey { spa: 1, vdev: 0, offset: bp.dva[0].offset, birth: bp.birth, cksum: bp.cksum };
        // 48 MiB of ARC over 56 MiB of 8 KiB blocks: warm, and more than the feed's window
        // (l2arc_write_max × l2arc_headroom × l2arc_headroom_boost: 32 MiB at the defaults).
        let arc = AdaptiveCache::new(48 << 20);
        for i in 0..7168 {
            let (bp, d) = block(i, &salt);
            arc.insert_l2(key(&bp), Arc::new(d), &bp);
        }
        assert!(arc.warm());
        let l2 = Arc::new(L2Arc::new(79));
        l2.add_device(7, "mem".into(), mem_dev(128 << 20), 9, true).unwrap();
        let drain = || (0..64).any(|_| l2.feed_once(&arc, 1, &salt) == 0);
        assert!(drain());
        let (mut meta, d) = block(9000, &salt);
        meta.typ = oxzfs_format::types::DMU_OT_DNODE;
        arc.insert_l2(key(&meta), Arc::new(d.clone()), &meta);
        // (What the insert pushed out of the ARC unwritten goes first.)
        assert!(drain());
        assert!(l2.read(&meta, &salt).is_none(), "the periodic feed does not look at the head");
        assert!(l2.feed_last(&arc, 1, &salt) > 0);
        assert!(l2.read(&meta, &salt).map(|r| r.0) == Some(d), "the newest metadata block is on the cache device");
    }

    #[test]
    fn an_export_commits_the_open_log_block() {
        let salt = [0u8; 32];
        // 3 entries a log block, 40 buffers: the 40th waits in the open block.
        let (mem, l2, blocks, _) = fed_device(40, 78, 6, &salt);
        l2.shutdown();
        let again = Arc::new(L2Arc::new(78));
        again.add_device(6, "mem".into(), mem, 9, true).unwrap();
        wait_rebuilt(&again);
        assert_eq!(again.headers(), 40, "every buffer written is found after the export");
        assert_eq!(again.stats.rebuild_bufs_precached.load(Ordering::Relaxed), 2, "the two copies filling the last block");
        let (bp, d) = &blocks[39];
        assert!(again.read(bp, &salt).map(|r| r.0).as_deref() == Some(&d[..]));
    }

    #[test]
    fn feed_read_rebuild_and_corruption() {
        let salt = [0u8; 32];
        let (mem, l2, blocks, wrote) = fed_device(40, 77, 5, &salt);
        assert!(wrote >= 40 * 8192, "wrote {wrote}");
        assert_eq!(l2.headers(), 40);
        for (bp, d) in &blocks {
            assert!(l2.read(bp, &salt).map(|r| r.0).as_deref() == Some(&d[..]), "block at {}", bp.dva[0].offset);
        }
        assert_eq!(l2.stats.hits.load(Ordering::Relaxed), 40);
        let (_, _, lbc, _, _) = l2.sizes();
        // 64 MiB device: (end - start) >> 24 = 3 entries a log block, 40 buffers: 13 blocks.
        assert_eq!(lbc, 13);
        // A new L2ARC over the same device (a re-import) finds the committed entries.
        let l2b = Arc::new(L2Arc::new(77));
        l2b.add_device(5, "mem".into(), mem.clone(), 9, true).unwrap();
        wait_rebuilt(&l2b);
        assert_eq!(l2b.headers(), 39, "the open log block's last entry is not persistent");
        assert_eq!(l2b.stats.rebuild_success.load(Ordering::Relaxed), 1);
        assert_eq!(l2b.stats.rebuild_log_blks.load(Ordering::Relaxed), 13);
        // (The cold ARC is fed newest first: block 0 went last, into the open log block.)
        assert!(l2b.read(&blocks[0].0, &salt).is_none());
        assert!(l2b.read(&blocks[20].0, &salt).map(|r| r.0).as_deref() == Some(&blocks[20].1[..]));
        // Another pool's L2ARC starts empty.
        let other = Arc::new(L2Arc::new(78));
        other.add_device(5, "mem".into(), mem.clone(), 9, true).unwrap();
        assert_eq!(other.headers(), 0);
        assert_eq!(other.stats.rebuild_unsupported.load(Ordering::Relaxed), 1);
        // That pool wrote its own header: this pool's next import finds nothing to rebuild.
        let again = Arc::new(L2Arc::new(77));
        again.add_device(5, "mem".into(), mem.clone(), 9, true).unwrap();
        assert_eq!(again.headers(), 0);
        // Corrupt the data region: reads fail verification, counted, not served.
        let (start, _, _, _) = geometry(64 << 20, 9).unwrap();
        let junk = vec![0xa5u8; 1 << 20];
        mem.write_at(&junk, start).unwrap();
        // (The first megabyte of the ring holds the newest blocks, fed first.)
        for (bp, _) in blocks.iter().rev().take(8) {
            assert!(l2b.read(bp, &salt).is_none());
        }
        assert!(l2b.stats.cksum_bad.load(Ordering::Relaxed) >= 8);
        // A failing device is dropped; nothing reaches the reader.
        mem.fail.store(true, Ordering::Relaxed);
        for (bp, _) in blocks.iter().rev().skip(8) {
            assert!(l2b.read(bp, &salt).is_none());
        }
        assert!(!l2b.has_devices());
    }

    /// One feed writes l2arc_write_max bytes of buffers, plus l2arc_write_boost while the ARC
    /// is cold, from l2arc_headroom times that of each list's tail; the next feed goes on
    /// with the rest.
    #[test]
    fn a_feed_writes_write_max_plus_boost_while_cold_from_headroom_of_the_tails() {
        tunables::set("l2arc_rebuild_blocks_min_l2size", "0").unwrap();
        let salt = [0u8; 32];
        let (arc, blocks) = setup(40, &salt);
        assert!(!arc.warm());
        let l2 = Arc::new(L2Arc::new(80));
        l2.add_device(5, "mem".into(), mem_dev(64 << 20), 9, true).unwrap();
        let buffers = |l2: &L2Arc| l2.index.lock().unwrap().len() as u64;
        // 5 blocks of write_max and 3 of boost: 8 of the 40.
        let fs = FeedSize { write_max: 5 * 8192, write_boost: 3 * 8192, headroom: 2, headroom_boost: 100 };
        l2.feed(&arc, 1, &salt, false, &fs);
        assert_eq!(buffers(&l2), 8);
        // headroom 1: only write_max + boost bytes of the tail are looked at, and those are on
        // the device already: nothing more.
        l2.feed(&arc, 1, &salt, false, &FeedSize { headroom: 1, ..fs });
        assert_eq!(buffers(&l2), 8);
        // headroom 2: the next 8 of the tail's 16.
        l2.feed(&arc, 1, &salt, false, &fs);
        assert_eq!(buffers(&l2), 16);
        // Warm (the ARC has evicted): no boost. (A 1 MiB ARC filled with blocks no feed
        // takes, then the 40 blocks again: what it evicts is the former.)
        let warm = AdaptiveCache::new(1 << 20);
        for i in 0..200u64 {
            warm.insert(ArcKey { spa: 1, vdev: 1, offset: i << 13, birth: 3, cksum: [i; 4] }, Arc::new(vec![0u8; 8192]));
        }
        for (bp, d) in &blocks {
            warm.insert_l2(ArcKey { spa: 1, vdev: 0, offset: bp.dva[0].offset, birth: bp.birth, cksum: bp.cksum }, Arc::new(d.clone()), bp);
        }
        assert!(warm.warm());
        let l2w = Arc::new(L2Arc::new(80));
        l2w.add_device(5, "mem".into(), mem_dev(64 << 20), 9, true).unwrap();
        l2w.feed(&warm, 1, &salt, false, &FeedSize { headroom: 100, ..fs });
        assert_eq!(buffers(&l2w), 5);
    }

    /// A device whose write fails is dropped at once (faulted), the failure counted; no
    /// buffer is recorded on it.
    #[test]
    fn a_failed_feed_write_drops_the_device() {
        let salt = [0u8; 32];
        let (arc, _) = setup(4, &salt);
        let l2 = Arc::new(L2Arc::new(81));
        let mem = mem_dev(64 << 20);
        l2.add_device(5, "mem".into(), mem.clone(), 9, true).unwrap();
        mem.fail.store(true, Ordering::Relaxed);
        assert_eq!(l2.feed_once(&arc, 1, &salt), 0);
        assert_eq!(l2.stats.writes_error.load(Ordering::Relaxed), 1);
        assert!(!l2.has_devices() && l2.headers() == 0);
    }

    /// A block rewritten in place (same DVA and birth, other bytes and checksum) is not
    /// answered by the entry the feed wrote of the old one: a miss, not a bad checksum, and the
    /// entry goes; the old block itself still reads.
    #[test]
    fn a_block_rewritten_in_place_misses_instead_of_failing_its_checksum() {
        let salt = [0u8; 32];
        let (_mem, l2, blocks, _) = fed_device(4, 79, 5, &salt);
        let mut new = blocks[1].0.clone();
        new.cksum[0] ^= 1;
        assert!(l2.read(&new, &salt).is_none());
        assert_eq!((l2.stats.cksum_bad.load(Ordering::Relaxed), l2.stats.misses.load(Ordering::Relaxed)), (0, 1));
        assert_eq!(l2.headers(), 3, "the entry goes");
        let (other, od) = &blocks[2];
        assert!(l2.read(other, &salt).map(|r| r.0).as_deref() == Some(&od[..]));
    }

    #[test]
    fn devices_take_turns_and_a_wrapped_ring_rebuilds_only_what_is_left() {
        // (Tests that need log blocks on small devices all set this; none needs the default.)
        tunables::set("l2arc_rebuild_blocks_min_l2size", "0").unwrap();
        let salt = [0u8; 32];
        let mems: Vec<Arc<MemDev>> = (0..2).map(|_| mem_dev(40 << 20)).collect();
        let l2 = Arc::new(L2Arc::new(9));
        for (i, m) in mems.iter().enumerate() {
            l2.add_device(100 + i as u64, format!("mem{i}").into(), m.clone(), 9, true).unwrap();
        }
        let (_, end, _, entries) = geometry(40 << 20, 9).unwrap();
        assert_eq!(entries, 2, "(end - start) >> 24 entries a log block");
        let mut all = Vec::new();
        for round in 0..24u64 {
            let arc = AdaptiveCache::new(64 << 20);
            for i in 0..400 {
                let (mut bp, d) = block(round * 1000 + i, &salt);
                bp.birth = 200 + round;
                arc.insert_l2(ArcKey { spa: 1, vdev: 0, offset: bp.dva[0].offset, birth: bp.birth, cksum: bp.cksum }, Arc::new(d.clone()), &bp);
                all.push((bp, d));
            }
            l2.feed_once(&arc, 1, &salt);
        }
        let devs = l2.devices();
        assert!(devs.iter().all(|d| d.writes == 12), "both devices fed in turn");
        assert!(devs.iter().all(|d| d.alloc <= end), "{:?}", devs.iter().map(|d| d.alloc).collect::<Vec<_>>());
        let held: Vec<_> = all.iter().filter(|(bp, _)| l2.index.lock().unwrap().contains_key(&L2Key::of(bp).unwrap())).collect();
        assert!(!held.is_empty() && held.len() < all.len(), "the rings wrapped: {} of {} held", held.len(), all.len());
        // A re-import finds what the log blocks still describe, and every block it finds reads
        // back right (none that a wrap overwrote).
        let again = Arc::new(L2Arc::new(9));
        for (i, m) in mems.iter().enumerate() {
            again.add_device(100 + i as u64, format!("mem{i}").into(), m.clone(), 9, true).unwrap();
        }
        wait_rebuilt(&again);
        assert_eq!(again.stats.rebuild_success.load(Ordering::Relaxed), 2);
        let found = again.headers();
        assert!(found > 0 && found <= held.len() as u64, "{found} found, {} held", held.len());
        let mut hits = 0;
        for (bp, d) in &all {
            if let Some((got, _)) = again.read(bp, &salt) {
                assert!(got == *d, "block at {} read back wrong", bp.dva[0].offset);
                hits += 1;
            }
        }
        assert_eq!(hits, found);
        assert_eq!(again.stats.cksum_bad.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn bad_headers_and_truncated_devices_start_empty() {
        let salt = [0u8; 32];
        let (mem, _, blocks, wrote) = fed_device(30, 3, 4, &salt);
        assert!(wrote > 0);
        let image = mem.bytes.lock().unwrap().clone();
        let rebuilt = |bytes: Vec<u8>| {
            let m = Arc::new(MemDev { bytes: Mutex::new(bytes), fail: AtomicBool::new(false) });
            let l = Arc::new(L2Arc::new(3));
            let r = l.add_device(4, "mem".into(), m, 9, true);
            wait_rebuilt(&l);
            (r, l)
        };
        // As written: rebuilt.
        let (r, l) = rebuilt(image.clone());
        assert!(r.is_ok() && l.headers() > 0);
        // A header with a flipped bit: its checksum fails, the device starts empty.
        let mut bad = image.clone();
        bad[VDEV_LABEL_START_SIZE as usize + 100] ^= 4;
        let (r, l) = rebuilt(bad);
        assert!(r.is_ok() && l.headers() == 0 && l.stats.rebuild_unsupported.load(Ordering::Relaxed) == 1);
        // The device cut short: its geometry no longer matches the header's.
        let (r, l) = rebuilt(image[..48 << 20].to_vec());
        assert!(r.is_ok() && l.headers() == 0);
        // Too small to hold a ring at all: refused with a reason, nothing written.
        let (r, l) = rebuilt(image[..(5 << 20)].to_vec());
        assert!(r.unwrap_err().contains("too small") && !l.has_devices());
        // A log block gone bad stops the rebuild there; what it restored before reads right.
        let mut bad = image.clone();
        let h = L2DevHdrPhys::decode(&image[VDEV_LABEL_START_SIZE as usize..][..512], VDEV_LABEL_START_SIZE).unwrap();
        let second = h.start_lbps[1].daddr as usize;
        bad[second + 8] ^= 1;
        let (r, l) = rebuilt(bad);
        assert!(r.is_ok() && l.stats.rebuild_cksum_lb_errors.load(Ordering::Relaxed) == 1);
        assert!(l.headers() > 0 && l.headers() < 29, "{}", l.headers());
        for (bp, d) in &blocks {
            if let Some((got, _)) = l.read(bp, &salt) {
                assert!(got == *d);
            }
        }
    }

    #[test]
    fn the_ring_wraps_and_forgets_what_it_overwrites() {
        let salt = [0u8; 32];
        let mem = mem_dev(8 << 20);
        let l2 = Arc::new(L2Arc::new(1));
        l2.add_device(2, "mem".into(), mem, 9, true).unwrap();
        let (start, end, _, entries) = geometry(8 << 20, 9).unwrap();
        assert_eq!(entries, 0, "a ring under 16 MiB keeps no log blocks");
        let ring = end - start;
        let mut total = 0;
        for round in 0..6u64 {
            let arc = AdaptiveCache::new(64 << 20);
            for i in 0..200 {
                let (mut bp, d) = block(round * 1000 + i, &salt);
                bp.birth = 100 + round;
                arc.insert_l2(ArcKey { spa: 1, vdev: 0, offset: bp.dva[0].offset, birth: bp.birth, cksum: bp.cksum }, Arc::new(d), &bp);
            }
            total += l2.feed_once(&arc, 1, &salt);
        }
        assert!(total > ring, "wrote {total} bytes into a ring of {ring}");
        let (_, asize, _, _, _) = l2.sizes();
        assert!(asize <= ring, "{asize} allocated in a ring of {ring}");
        assert!(l2.headers() * 8192 <= ring);
    }
}
