//! arc: the adaptive replacement cache of verified blocks, kept compressed.
//!
//! Compressed ARC (OpenZFS 2.x, zfs_compressed_arc_enabled=1, the default): a block the pool
//! holds compressed is kept as it is on disk (the header's b_pabd), and the lists, the target
//! and the eviction count its physical size (arcstats compressed_size; uncompressed_size is
//! what the same blocks are decompressed). Readers get the logical bytes: a read decompresses
//! the block once and the copy stays beside the compressed bytes while it is in use (OpenZFS's
//! arc_buf_t, which its dbufs hold): the most recently read copies, up to 1/16 of the target
//! (OpenZFS's dbuf caches take 1/32 for data and 1/64 for metadata), in an LRU of their own
//! (`hot`), counted as overhead_size and in the ARC's size. A block stored uncompressed, or
//! any block with zfs_compressed_arc_enabled=0, is kept decompressed (one buffer, no
//! overhead). A block just written is kept compressed as its writer compressed it: a data
//! block without a copy until someone reads it, a metadata block with its copy beside it (the
//! next sync reads it back, as OpenZFS's dbuf keeps its buffer beside the header's bytes).
//!
//! Four lists as in OpenZFS's arc.c (after Megiddo and Modha): MRU holds blocks seen once, MFU
//! blocks seen again; MRU-ghost and MFU-ghost remember the keys (not the data) of blocks recently
//! evicted from each. A hit in a ghost list moves the target size `p` of MRU toward the list that
//! would have kept the block. Everything is bounded by `c_max` bytes of data; ghost lists are
//! bounded by the same number of bytes of the blocks they name.
//!
//! Keys are (vdev, offset, birth txg) of the first DVA and the block's whole checksum. Address
//! and birth alone do not name a block's content: a block born in a txg may be rewritten in
//! place in a later sync pass of that txg (same DVA, same birth, new bytes, new checksum), so
//! the checksum is part of the key (OpenZFS's hdr identity is DVA + birth too, and its
//! in-place rewrites release the old header first; here the old entry simply ages out). Blocks
//! read are inserted with `insert` (a repeat keeps the entry: the bytes are the same); blocks
//! just written are inserted with `replace` (the writer's bytes are what is on disk now).
//! One cache serves every imported pool, as in OpenZFS ([`shared`]): keys carry the pool's
//! import id, and an export drops that pool's entries (`flush_spa`, arc_flush). A mutex
//! guards it (lock order: ARC is a leaf lock, nothing else is taken while it is held).
//!
//! Its size follows the target `c` (arc_c), between `c_min` and `c_max`: a reaper thread
//! (arc_reap_zthr) watches the memory the system has available and, when it falls below
//! `zfs_arc_sys_free`, lowers `c` by what is missing plus 1/128 of what could go
//! (arc_shrink_shift) and evicts down to it; `c` then stays put for `arc_grow_retry` seconds
//! and grows back as blocks come in while the cache is full (arc_adapt).
//!
//! For the L2ARC (see `l2arc`) an entry remembers the block pointer it was read or written
//! under and whether its dataset lets it go to a cache device (secondarycache); the feed asks
//! for the eligible entries at the tails of MFU and MRU (`l2_candidates`), the buffers about to
//! be evicted — or at the heads while the ARC is still cold (nothing evicted yet, `warm`).
//! The feed marks what it wrote (`mark_l2`); an eligible buffer evicted before that is kept
//! for the feed's next round (`take_l2_pending`, bounded by l2arc_write_max +
//! l2arc_write_boost), and arcstats tell evictions of cached (evict_l2_cached), eligible and
//! ineligible buffers apart.
//! The limit `c_max` (zfs_arc_max) can be changed while the pool is imported (`set_c_max`):
//! a smaller one evicts at once, down to it and never below `c_min`.

use oxzfs_format::blkptr::BlockPointer;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArcKey {
    /// The pool's import (`Spa::arc_id`, OpenZFS's spa_load_guid): one ARC serves every pool.
    pub spa: u64,
    pub vdev: u64,
    pub offset: u64,
    pub birth: u64,
    /// The whole checksum: a block rewritten in place during a txg's later sync passes keeps
    /// its DVA and birth, but not its checksum.
    pub cksum: [u64; 4],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListId {
    Mru,
    Mfu,
    MruGhost,
    MfuGhost,
}

struct Entry {
    /// What the block holds (arc_buf_contents_t and the dnode share), see `classify`.
    kind: BufKind,
    /// Brought in by a prefetch and not read on demand since (ARC_FLAG_PREFETCH).
    prefetch: bool,
    list: ListId,
    seq: u64,
    /// Bytes the header holds and the lists count (arc_hdr_size): the physical size of a
    /// block kept compressed, else the logical size.
    size: u64,
    lsize: u64,
    /// The block as the pool holds it, compressed with `compress`, when kept so; None for a
    /// block kept decompressed (and for ghosts).
    phys: Option<Arc<Vec<u8>>>,
    compress: u8,
    /// The logical bytes: the block itself when it is kept decompressed; beside `phys`, the
    /// decompressed copy of a block in use (then `hot` is its place in the copies' LRU).
    data: Option<Arc<Vec<u8>>>,
    hot: u64,
    /// The block pointer the data was read or written under, when the block may go to the
    /// L2ARC (secondarycache allows it); None otherwise.
    l2bp: Option<Box<BlockPointer>>,
    /// Written to a cache device (HDR_HAS_L2HDR), as the feed said (`mark_l2`).
    l2: bool,
}

/// What a cached block holds: file or volume data, metadata, or dnodes (metadata too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BufKind {
    #[default]
    Data,
    Metadata,
    Dnode,
}

/// How a read met the cache, for the demand/prefetch × data/metadata counters.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    pub prefetch: bool,
    pub meta: bool,
    pub hit: bool,
}

impl L2Candidate {
    /// Bytes it holds.
    fn bytes(&self) -> u64 {
        self.phys.as_ref().or(self.data.as_ref()).map_or(0, |b| b.len() as u64)
    }
}

impl Entry {
    fn resident(&self) -> bool {
        self.data.is_some() || self.phys.is_some()
    }

    /// Bytes of a decompressed copy beside the compressed ones (overhead).
    fn copy(&self) -> u64 {
        if self.hot != 0 {
            self.lsize
        } else {
            0
        }
    }

    /// Bytes it takes in the cache (header and copy).
    fn charge(&self) -> u64 {
        if self.resident() {
            self.size + self.copy()
        } else {
            0
        }
    }
}

/// A buffer the L2ARC feed may write: its key, its bytes and block pointer, and whether it
/// sat in MFU (ARC state for the log entry).
pub struct L2Candidate {
    pub key: ArcKey,
    /// The block as the pool holds it (kept compressed: what the cache device gets as it is)
    /// or, when None, its logical bytes in `data`.
    pub phys: Option<Arc<Vec<u8>>>,
    pub data: Option<Arc<Vec<u8>>>,
    pub bp: BlockPointer,
    pub mfu: bool,
    /// Prefetched and not yet read on demand (only fed with l2arc_noprefetch off).
    pub prefetch: bool,
}

#[derive(Default)]
struct Lists {
    mru: BTreeMap<u64, ArcKey>,
    mfu: BTreeMap<u64, ArcKey>,
    mru_ghost: BTreeMap<u64, ArcKey>,
    mfu_ghost: BTreeMap<u64, ArcKey>,
}

impl Lists {
    fn list(&mut self, id: ListId) -> &mut BTreeMap<u64, ArcKey> {
        match id {
            ListId::Mru => &mut self.mru,
            ListId::Mfu => &mut self.mfu,
            ListId::MruGhost => &mut self.mru_ghost,
            ListId::MfuGhost => &mut self.mfu_ghost,
        }
    }
}

struct State {
    entries: HashMap<ArcKey, Entry>,
    lists: Lists,
    sizes: [u64; 4],
    seq: u64,
    /// Target size of MRU, adapted by ghost hits.
    p: u64,
    hits: u64,
    misses: u64,
    mru_hits: u64,
    mfu_hits: u64,
    mru_ghost_hits: u64,
    mfu_ghost_hits: u64,
    /// Something was evicted since the cache was made (arc_warm).
    warm: bool,
    /// Bytes of metadata and of dnodes cached (arc_meta_used, dnode_size).
    meta_used: u64,
    dnode_size: u64,
    /// The most entries (headers) the cache has had (hash_elements_max).
    entries_max: u64,
    /// Headers dropped from the ghost lists (deleted).
    deleted: u64,
    /// Bytes evicted that the L2ARC could have taken (from MFU, from MRU) and could not.
    evict_l2_eligible_mfu: u64,
    evict_l2_eligible_mru: u64,
    evict_l2_ineligible: u64,
    /// Bytes evicted that a cache device holds (evict_l2_cached).
    evict_l2_cached: u64,
    /// Buffers evicted before the L2ARC feed wrote them, kept for its next feed (oldest
    /// first, at most `l2_pending_max` bytes), and their bytes.
    l2_pending: std::collections::VecDeque<L2Candidate>,
    l2_pending_bytes: u64,
    /// Decompressed copies beside compressed blocks, oldest first (by `Entry::hot`), and
    /// their bytes (overhead_size).
    hot: BTreeMap<u64, ArcKey>,
    overhead: u64,
    /// Logical bytes of the resident blocks (uncompressed_size).
    lsize: u64,
}

impl State {
    /// Bytes of a resident entry counted as metadata or dnodes, given back (`sign` false) or
    /// taken (true).
    fn account(&mut self, kind: BufKind, size: u64, take: bool) {
        let f = |v: &mut u64| if take { *v += size } else { *v = v.saturating_sub(size) };
        match kind {
            BufKind::Data => {}
            BufKind::Metadata => f(&mut self.meta_used),
            BufKind::Dnode => {
                f(&mut self.meta_used);
                f(&mut self.dnode_size);
            }
        }
    }

    /// Let go of an entry's decompressed copy (its compressed bytes stay).
    fn drop_copy(&mut self, key: &ArcKey) {
        let Some(e) = self.entries.get_mut(key) else { return };
        if e.hot == 0 {
            return;
        }
        let (hot, lsize, kind) = (e.hot, e.lsize, e.kind);
        e.hot = 0;
        e.data = None;
        self.hot.remove(&hot);
        self.overhead -= lsize;
        self.account(kind, lsize, false);
    }

    /// Keep `data`, the decompressed bytes of an entry kept compressed, beside them (or mark
    /// the copy it has as the newest in use).
    fn keep_copy(&mut self, key: &ArcKey, data: Arc<Vec<u8>>) {
        self.seq += 1;
        let seq = self.seq;
        let Some(e) = self.entries.get_mut(key) else { return };
        if e.phys.is_none() {
            return;
        }
        let old = std::mem::replace(&mut e.hot, seq);
        if old != 0 {
            self.hot.remove(&old);
        } else {
            e.data = Some(data);
            let (lsize, kind) = (e.lsize, e.kind);
            self.overhead += lsize;
            self.account(kind, lsize, true);
        }
        self.hot.insert(seq, *key);
    }

    /// Let go of an entry's bytes (evicted to a ghost list, dropped, replaced).
    fn drop_bufs(&mut self, key: &ArcKey) {
        self.drop_copy(key);
        let Some(e) = self.entries.get_mut(key) else { return };
        if !e.resident() {
            return;
        }
        e.data = None;
        e.phys = None;
        let (size, lsize, kind) = (e.size, e.lsize, e.kind);
        self.lsize -= lsize;
        self.account(kind, size, false);
    }

    /// Give an entry its bytes (`Bufs`), as the header's size says.
    fn set_bufs(&mut self, key: &ArcKey, b: Bufs) {
        let Some(e) = self.entries.get_mut(key) else { return };
        let (lsize, kind, size) = (b.data.len() as u64, e.kind, b.size());
        (e.size, e.lsize, e.compress) = (size, lsize, b.compress);
        let copy = match b.phys {
            Some(p) => {
                e.phys = Some(p);
                b.copy.then_some(b.data)
            }
            None => {
                e.data = Some(b.data);
                None
            }
        };
        self.lsize += lsize;
        self.account(kind, size, true);
        if let Some(d) = copy {
            self.keep_copy(key, d);
        }
    }

    /// Drop the oldest decompressed copies until they take at most `max` bytes.
    fn trim_copies(&mut self, max: u64) {
        while self.overhead > max {
            let Some((_, key)) = self.hot.first_key_value().map(|(s, k)| (*s, *k)) else { break };
            self.drop_copy(&key);
        }
    }
}

/// A block's bytes as they come into the cache: logical, and physical when kept compressed.
struct Bufs {
    data: Arc<Vec<u8>>,
    phys: Option<Arc<Vec<u8>>>,
    compress: u8,
    /// With `phys`: keep `data` beside it as a copy in use (a block read, which its reader
    /// holds), or not (a block just written: the next reader decompresses it).
    copy: bool,
}

impl Bufs {
    fn size(&self) -> u64 {
        self.phys.as_ref().map_or(self.data.len(), |p| p.len()) as u64
    }
}

/// Counters for `arcstats`-style reporting.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArcStats {
    pub size: u64,
    /// Bytes of the blocks held (as held: compressed or not), what they are decompressed, and
    /// the decompressed copies beside compressed ones (compressed_size, uncompressed_size,
    /// overhead_size; size is the first and the last).
    pub compressed_size: u64,
    pub uncompressed_size: u64,
    pub overhead_size: u64,
    /// The target (arc_c).
    pub c: u64,
    pub c_max: u64,
    /// memory_throttle_count: times memory pressure lowered the target.
    pub throttles: u64,
    /// arc_no_grow: the target may not grow now.
    pub no_grow: bool,
    pub meta_used: u64,
    pub dnode_size: u64,
    /// Headers (entries, ghosts included) now and at most.
    pub hash_elements: u64,
    pub hash_elements_max: u64,
    pub deleted: u64,
    pub evict_l2_eligible_mfu: u64,
    pub evict_l2_eligible_mru: u64,
    pub evict_l2_ineligible: u64,
    pub evict_l2_cached: u64,
    /// demand data, demand metadata, prefetch data, prefetch metadata: [hits, misses].
    pub access: [[u64; 2]; 4],
    pub c_min: u64,
    pub p: u64,
    pub mru_size: u64,
    pub mfu_size: u64,
    pub mru_ghost_size: u64,
    pub mfu_ghost_size: u64,
    pub hits: u64,
    pub misses: u64,
    pub mru_hits: u64,
    pub mfu_hits: u64,
    pub mru_ghost_hits: u64,
    pub mfu_ghost_hits: u64,
}

pub struct Arc_ {
    c_max: AtomicU64,
    c_min: AtomicU64,
    /// The target size (arc_c): `c_max` unless memory pressure lowered it.
    c: AtomicU64,
    /// No growing of `c` before this time (arc_no_grow; milliseconds since `born`).
    no_grow_until_ms: AtomicU64,
    /// Times the reaper lowered `c` (memory_throttle_count).
    throttles: AtomicU64,
    born: std::time::Instant,
    /// demand data, demand metadata, prefetch data, prefetch metadata: hits and misses
    /// (atomics: every read counts one, without taking the cache's lock again).
    access: [[AtomicU64; 2]; 4],
    state: Mutex<State>,
}

/// Memory pressure: arc_shrink_shift (1/128 of what can go is freed beyond the deficit),
/// arc_grow_retry (seconds without growth after a shrink), the growth margin (arc_adapt grows
/// `c` only while the cache is within 2 × SPA_MAXBLOCKSIZE of it).
const ARC_SHRINK_SHIFT: u32 = 7;
const ARC_GROW_RETRY_MS: u64 = 5000;
const ARC_GROW_MARGIN: u64 = 2 << 24;

/// The one ARC of this process, made at its first use with `c_max` (zfs_arc_max, or the
/// default), its reaper thread started; later pools share it (zfs_arc_max changes reach it
/// through `set_limits`).
pub fn shared(c_max: u64) -> Arc<Arc_> {
    static SHARED: std::sync::OnceLock<Arc<Arc_>> = std::sync::OnceLock::new();
    SHARED
        .get_or_init(|| {
            let arc = Arc::new(Arc_::new(c_max));
            let weak = Arc::downgrade(&arc);
            let _ = std::thread::Builder::new().name("arc_reap".into()).spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let Some(arc) = weak.upgrade() else { return };
                arc.reap(available_memory());
            });
            arc
        })
        .clone()
}

/// Bytes of memory the system has available (MemAvailable), and its total (MemTotal).
fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb << 10)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

/// Bytes of physical memory (MemTotal; 0 when unknown).
pub fn physmem() -> u64 {
    meminfo().map_or(0, |m| m.1)
}

/// arc_sys_free: the memory the ARC leaves the system: zfs_arc_sys_free when set, else 1/32
/// of memory plus three times the kernel's free-page watermark (min_free_kbytes), as
/// OpenZFS's Linux default is.
pub fn sys_free() -> u64 {
    if let Some(v) = crate::tunables::arc_sys_free() {
        return v;
    }
    let total = meminfo().map(|m| m.1).unwrap_or(0);
    let wmark = std::fs::read_to_string("/proc/sys/vm/min_free_kbytes").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0) << 10;
    wmark * 3 + total / 32
}

/// arc_available_memory: available memory less `sys_free` (negative: that much is missing).
pub fn available_memory() -> i64 {
    match meminfo() {
        Some((avail, _)) => avail as i64 - sys_free() as i64,
        None => i64::MAX,
    }
}

/// The pool's cache. (Named `Arc_` internally to keep `std::sync::Arc` usable; use this alias.)
pub type AdaptiveCache = Arc_;

fn idx(l: ListId) -> usize {
    match l {
        ListId::Mru => 0,
        ListId::Mfu => 1,
        ListId::MruGhost => 2,
        ListId::MfuGhost => 3,
    }
}

impl Arc_ {
    /// A cache holding at most `c_max` bytes of block data.
    pub fn new(c_max: u64) -> Arc_ {
        let c_max = c_max.max(1 << 20);
        Arc_ {
            c_max: AtomicU64::new(c_max),
            c_min: AtomicU64::new(crate::tunables::arc_min().unwrap_or_else(|| Self::default_min(c_max)).min(c_max)),
            c: AtomicU64::new(c_max),
            no_grow_until_ms: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
            born: std::time::Instant::now(),
            state: Mutex::new(State {
                entries: HashMap::new(),
                lists: Lists::default(),
                sizes: [0; 4],
                seq: 0,
                p: c_max / 2,
                hits: 0,
                misses: 0,
                mru_hits: 0,
                mfu_hits: 0,
                mru_ghost_hits: 0,
                mfu_ghost_hits: 0,
                warm: false,
                meta_used: 0,
                dnode_size: 0,
                entries_max: 0,
                deleted: 0,
                evict_l2_eligible_mfu: 0,
                evict_l2_eligible_mru: 0,
                evict_l2_ineligible: 0,
                evict_l2_cached: 0,
                l2_pending: Default::default(),
                l2_pending_bytes: 0,
                hot: BTreeMap::new(),
                overhead: 0,
                lsize: 0,
            }),
            access: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// zfs_arc_min's default: 1/32 of the limit, at least 32 MiB (never above the limit).
    pub fn default_min(c_max: u64) -> u64 {
        (c_max / 32).max(32 << 20).min(c_max)
    }

    fn c_max(&self) -> u64 {
        self.c_max.load(Ordering::Relaxed)
    }

    fn c(&self) -> u64 {
        self.c.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Whether `c` may grow now (not within arc_grow_retry of a shrink).
    fn may_grow(&self) -> bool {
        self.now_ms() >= self.no_grow_until_ms.load(Ordering::Relaxed)
    }

    /// One look of the reaper (arc_reap_cb_check / arc_reap_cb): `avail` is the memory
    /// available beyond arc_sys_free; when it is short, lower the target by the deficit plus
    /// 1/128 of what could go, evict down to it, and grow no more for a while.
    pub fn reap(&self, avail: i64) {
        if avail >= 0 {
            return;
        }
        self.no_grow_until_ms.store(self.now_ms() + ARC_GROW_RETRY_MS, Ordering::Relaxed);
        let c_min = self.c_min.load(Ordering::Relaxed);
        let can_free = self.c().saturating_sub(c_min) as i64;
        let to_free = (can_free >> ARC_SHRINK_SHIFT) - avail;
        if can_free > 0 && to_free > 0 {
            self.reduce_target(to_free as u64);
        }
    }

    /// arc_reduce_target_size: the target drops by `to_free` from the lower of itself and the
    /// size (never below c_min), and the cache evicts down to it.
    pub fn reduce_target(&self, to_free: u64) {
        let mut st = self.state.lock().unwrap();
        let size = st.sizes[0] + st.sizes[1] + st.overhead;
        let c_min = self.c_min.load(Ordering::Relaxed);
        let c = self.c().min(size);
        let new = if c > to_free && c - to_free > c_min { c - to_free } else { c_min };
        self.c.store(new, Ordering::Relaxed);
        st.p = st.p.saturating_sub(st.p >> ARC_SHRINK_SHIFT);
        if st.p > new {
            st.p = new / 2;
        }
        self.throttles.fetch_add(1, Ordering::Relaxed);
        self.evict(&mut st);
    }

    /// Drop every entry of one pool (arc_flush at export): its blocks can be of no use to
    /// anyone else.
    pub fn flush_spa(&self, spa: u64) {
        self.flush(Some(spa));
    }

    /// arc_flush: drop every entry of pool `spa` (by its arc id), or of every pool (None:
    /// `zinject -a`, so that the next read of any block goes to the disks).
    pub fn flush(&self, spa: Option<u64>) {
        let mut st = self.state.lock().unwrap();
        let st = &mut *st;
        let gone: Vec<ArcKey> = st.entries.keys().filter(|k| spa.map_or(true, |s| k.spa == s)).copied().collect();
        st.l2_pending.retain(|c| spa.is_some_and(|s| c.key.spa != s));
        st.l2_pending_bytes = st.l2_pending.iter().map(L2Candidate::bytes).sum();
        for k in gone {
            st.drop_bufs(&k);
            if let Some(e) = st.entries.remove(&k) {
                st.lists.list(e.list).remove(&e.seq);
                st.sizes[idx(e.list)] -= e.size;
            }
        }
    }
    /// Change the limits while the cache is in use (zfs_arc_max, zfs_arc_min): the limit is
    /// kept at or above `c_min`, and a smaller one evicts at once.
    pub fn set_limits(&self, c_max: u64, c_min: u64) {
        let c_max = c_max.max(c_min).max(1 << 20);
        self.c_min.store(c_min.min(c_max), Ordering::Relaxed);
        self.c_max.store(c_max, Ordering::Relaxed);
        // (arc_tuning_update: the target keeps its place between the new bounds; it grows
        // toward a higher c_max as blocks come in, and stays low while memory is short.)
        let c = self.c.load(Ordering::Relaxed).min(c_max).max(c_min.min(c_max));
        self.c.store(c, Ordering::Relaxed);
        let mut st = self.state.lock().unwrap();
        st.p = st.p.min(c_max);
        self.evict(&mut st);
    }

    /// Whether the cache has evicted anything yet (arc_warm): until then the L2ARC feeds from
    /// the heads of the lists, and writes l2arc_write_boost more.
    pub fn warm(&self) -> bool {
        self.state.lock().unwrap().warm
    }

    /// The entries the L2ARC feed may write, from the tails of MFU then MRU (the heads while
    /// the cache is cold), looking at no more than `scan` bytes of each list (0: all).
    /// `skip` says which are already on a cache device.
    pub fn l2_candidates(&self, spa: u64, scan: u64, skip: &dyn Fn(&ArcKey) -> bool) -> Vec<L2Candidate> {
        let st = self.state.lock().unwrap();
        let mut out = Vec::new();
        for (list, mfu) in [(&st.lists.mfu, true), (&st.lists.mru, false)] {
            let mut passed = 0u64;
            let keys: Box<dyn Iterator<Item = &ArcKey>> = if st.warm { Box::new(list.values()) } else { Box::new(list.values().rev()) };
            for key in keys.filter(|k| k.spa == spa) {
                let Some(e) = st.entries.get(key) else { continue };
                passed += e.lsize;
                if scan != 0 && passed > scan {
                    break;
                }
                let Some(bp) = e.l2bp.as_ref().filter(|_| e.resident()) else { continue };
                if !skip(key) {
                    out.push(L2Candidate { key: *key, phys: e.phys.clone(), data: e.data.clone(), bp: (**bp).clone(), mfu, prefetch: e.prefetch });
                }
            }
        }
        out
    }

    /// Take the buffers of pool `spa` evicted before the feed wrote them (the others stay).
    /// The feed writes them first: without this, a buffer that passes through the cache
    /// faster than the feed looks at the lists' tails (the ARC turning over at the pace of
    /// L2ARC hits, or of writes) never reaches a cache device.
    pub fn take_l2_pending(&self, spa: u64) -> Vec<L2Candidate> {
        let mut st = self.state.lock().unwrap();
        let (mine, others): (Vec<L2Candidate>, Vec<L2Candidate>) = std::mem::take(&mut st.l2_pending).into_iter().partition(|c| c.key.spa == spa);
        st.l2_pending_bytes = others.iter().map(L2Candidate::bytes).sum();
        st.l2_pending = others.into();
        mine
    }

    /// Bytes waiting in `take_l2_pending` (of every pool).
    pub fn l2_pending_bytes(&self) -> u64 {
        self.state.lock().unwrap().l2_pending_bytes
    }

    /// The feed wrote these buffers to a cache device (arc_hdr_set_flags HAS_L2HDR).
    pub fn mark_l2(&self, keys: &[ArcKey]) {
        let mut st = self.state.lock().unwrap();
        for k in keys {
            if let Some(e) = st.entries.get_mut(k) {
                e.l2 = true;
            }
        }
    }

    /// The default limit: half of physical memory minus 1 GiB, at least 64 MiB, as OpenZFS's
    /// arc_c_max default on Linux is half of RAM.
    pub fn default_max() -> u64 {
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if pages > 0 && page > 0 {
            ((pages as u64) * (page as u64) / 2).max(64 << 20)
        } else {
            1 << 30
        }
    }

    /// Say what a cached block holds (after inserting it): metadata and dnodes are counted
    /// in arc_meta_used and dnode_size while they stay.
    pub fn classify(&self, key: &ArcKey, kind: BufKind) {
        let mut st = self.state.lock().unwrap();
        let Some(e) = st.entries.get_mut(key) else { return };
        if e.kind == kind || !e.resident() {
            return;
        }
        let (old, size) = (e.kind, e.charge());
        e.kind = kind;
        st.account(old, size, false);
        st.account(kind, size, true);
    }

    /// Mark a block just inserted by a prefetch (its L2ARC log entry says so).
    pub fn mark_prefetch(&self, key: &ArcKey) {
        if let Some(e) = self.state.lock().unwrap().entries.get_mut(key) {
            e.prefetch = true;
        }
    }

    /// Count a read's meeting with the cache (demand_data_hits and the like).
    pub fn count_access(&self, a: Access) {
        let row = usize::from(a.meta) + 2 * usize::from(a.prefetch);
        self.access[row][usize::from(!a.hit)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, key: &ArcKey) -> Option<Arc<Vec<u8>>> {
        self.get_inner(key, None)
    }

    /// `get` by a demand read of a block the L2ARC may hold: a buffer brought in without its
    /// block pointer (a prefetch, under l2arc_noprefetch) becomes eligible for the feed.
    pub fn get_l2(&self, key: &ArcKey, bp: &BlockPointer) -> Option<Arc<Vec<u8>>> {
        self.get_inner(key, Some(bp))
    }

    fn get_inner(&self, key: &ArcKey, l2bp: Option<&BlockPointer>) -> Option<Arc<Vec<u8>>> {
        let (data, phys, compress, lsize) = self.lookup(key, l2bp)?;
        if data.is_some() {
            return data;
        }
        // Kept compressed, no copy in use: decompress outside the lock and keep the copy.
        let phys = phys?;
        let Ok(d) = oxzfs_format::compress::decompress(compress, &phys, lsize as usize) else {
            // (Verified when it came in: never expected.) Forget it; the reader goes to disk.
            let mut st = self.state.lock().unwrap();
            if st.entries.get(key).is_some_and(|e| e.phys.as_ref().is_some_and(|p| Arc::ptr_eq(p, &phys))) {
                st.drop_bufs(key);
            }
            return None;
        };
        let d = Arc::new(d);
        let mut st = self.state.lock().unwrap();
        if st.entries.get(key).is_some_and(|e| e.hot == 0 && e.phys.as_ref().is_some_and(|p| Arc::ptr_eq(p, &phys))) {
            st.keep_copy(key, d.clone());
            self.evict(&mut st);
        }
        Some(d)
    }

    /// A hit's bytes (the copy in use, else the compressed bytes, their function and logical
    /// size), the entry promoted; None for a miss.
    #[allow(clippy::type_complexity)]
    fn lookup(&self, key: &ArcKey, l2bp: Option<&BlockPointer>) -> Option<(Option<Arc<Vec<u8>>>, Option<Arc<Vec<u8>>>, u8, u64)> {
        let mut st = self.state.lock().unwrap();
        let st = &mut *st;
        let (list, seq, data) = match st.entries.get(key) {
            Some(e) => (e.list, e.seq, (e.data.clone(), e.phys.clone(), e.compress, e.lsize)),
            None => {
                st.misses += 1;
                return None;
            }
        };
        match list {
            ListId::Mru | ListId::Mfu => {
                st.hits += 1;
                if list == ListId::Mru {
                    st.mru_hits += 1;
                } else {
                    st.mfu_hits += 1;
                }
                // Promote to (the head of) MFU.
                st.seq += 1;
                let new_seq = st.seq;
                st.lists.list(list).remove(&seq);
                st.lists.mfu.insert(new_seq, *key);
                let e = st.entries.get_mut(key).unwrap();
                if let (None, Some(bp)) = (&e.l2bp, l2bp) {
                    e.l2bp = Some(Box::new(bp.clone()));
                }
                if l2bp.is_some() {
                    e.prefetch = false;
                }
                let size = e.size;
                e.list = ListId::Mfu;
                e.seq = new_seq;
                st.sizes[idx(list)] -= size;
                st.sizes[idx(ListId::Mfu)] += size;
                // A copy in use moves to the newest end of the copies' LRU, unless it was
                // touched so lately that it is still in the newer half (no churn for hot ones).
                let hot = st.entries[key].hot;
                if hot != 0 && st.seq - hot > st.hot.len() as u64 / 2 {
                    if let Some(d) = data.0.clone() {
                        st.keep_copy(key, d);
                    }
                }
                Some(data)
            }
            _ => {
                st.misses += 1;
                None
            }
        }
    }

    /// Insert a block just read. Adapts `p` on ghost hits, then evicts to stay under `c_max`.
    pub fn insert(&self, key: ArcKey, data: Arc<Vec<u8>>) {
        self.put(key, Bufs { data, phys: None, compress: 0, copy: false }, false, None)
    }

    /// `insert`, remembering the block pointer of a block the L2ARC may hold.
    pub fn insert_l2(&self, key: ArcKey, data: Arc<Vec<u8>>, bp: &BlockPointer) {
        self.put(key, Bufs { data, phys: None, compress: 0, copy: false }, false, Some(Box::new(bp.clone())))
    }

    /// Insert a block just read: its logical bytes `data` and, when the pool holds it
    /// compressed (with function `compress`), its physical bytes `phys`, kept instead under
    /// zfs_compressed_arc_enabled (`data` then stays as the copy in use). `l2bp`: its block
    /// pointer when the L2ARC may hold it.
    pub fn insert_block(&self, key: ArcKey, data: Arc<Vec<u8>>, phys: Option<Vec<u8>>, compress: u8, l2bp: Option<&BlockPointer>) {
        let phys = phys.filter(|_| crate::tunables::compressed_arc_enabled()).map(Arc::new);
        self.put(key, Bufs { data, phys, compress, copy: true }, false, l2bp.map(|b| Box::new(b.clone())))
    }

    /// Insert a block just written: as `insert`, but a cached entry under the same key takes
    /// the new bytes (the device holds them now).
    pub fn replace(&self, key: ArcKey, data: Arc<Vec<u8>>, l2bp: Option<&BlockPointer>) {
        self.replace_block(key, data, None, 0, false, l2bp)
    }

    /// `replace` with the block's compressed bytes `phys` (function `compress`) when the
    /// writer has them: kept compressed, with `data` as the copy in use when `copy` (metadata
    /// the next sync reads back, as a dbuf keeps its buffer beside the header's compressed
    /// bytes), else alone (a data block nobody reads yet).
    pub fn replace_block(&self, key: ArcKey, data: Arc<Vec<u8>>, phys: Option<Arc<Vec<u8>>>, compress: u8, copy: bool, l2bp: Option<&BlockPointer>) {
        let phys = phys.filter(|_| crate::tunables::compressed_arc_enabled());
        let compress = if phys.is_some() { compress } else { 0 };
        self.put(key, Bufs { data, phys, compress, copy }, true, l2bp.map(|b| Box::new(b.clone())))
    }

    fn put(&self, key: ArcKey, bufs: Bufs, replace: bool, l2bp: Option<Box<BlockPointer>>) {
        let size = bufs.size();
        if size > self.c_max() / 4 {
            return; // Never let one block flush the cache.
        }
        let mut st = self.state.lock().unwrap();
        let st = &mut *st;
        st.seq += 1;
        let seq = st.seq;
        let target = match st.entries.get(&key).map(|e| (e.list, e.seq, e.size)) {
            Some((ListId::MruGhost, old, osz)) => {
                st.mru_ghost_hits += 1;
                let delta = (st.sizes[3] / st.sizes[2].max(1)).max(1) * osz;
                st.p = (st.p + delta).min(self.c_max());
                st.lists.mru_ghost.remove(&old);
                st.sizes[2] -= osz;
                ListId::Mfu
            }
            Some((ListId::MfuGhost, old, osz)) => {
                st.mfu_ghost_hits += 1;
                let delta = (st.sizes[2] / st.sizes[3].max(1)).max(1) * osz;
                st.p = st.p.saturating_sub(delta);
                st.lists.mfu_ghost.remove(&old);
                st.sizes[3] -= osz;
                ListId::Mfu
            }
            Some((list, _, osz)) => {
                if !replace {
                    return; // Already cached.
                }
                // Same place in the lists, new bytes.
                st.drop_bufs(&key);
                st.sizes[idx(list)] -= osz;
                st.sizes[idx(list)] += size;
                st.set_bufs(&key, bufs);
                let e = st.entries.get_mut(&key).expect("present");
                (e.l2bp, e.l2) = (l2bp, false);
                self.evict(st);
                return;
            }
            None => ListId::Mru,
        };
        // arc_adapt: a cache near its target grows the target, up to c_max, unless memory
        // was short lately.
        let c = self.c();
        if c < self.c_max() && st.sizes[0] + st.sizes[1] + st.overhead + ARC_GROW_MARGIN >= c && self.may_grow() {
            self.c.store((c + size).min(self.c_max()), Ordering::Relaxed);
        }
        if let Some(e) = st.entries.get_mut(&key) {
            // A ghost comes back.
            (e.list, e.seq, e.l2bp, e.prefetch, e.l2) = (target, seq, l2bp, false, false);
        } else {
            st.entries.insert(key, Entry { kind: BufKind::Data, prefetch: false, list: target, seq, size, lsize: 0, phys: None, compress: 0, data: None, hot: 0, l2bp, l2: false });
        }
        st.set_bufs(&key, bufs);
        st.entries_max = st.entries_max.max(st.entries.len() as u64);
        st.lists.list(target).insert(seq, key);
        st.sizes[idx(target)] += size;
        self.evict(st);
    }

    fn evict(&self, st: &mut State) {
        let c_max = self.c_max();
        let c = self.c().min(c_max);
        st.trim_copies(c >> 4);
        while st.sizes[0] + st.sizes[1] + st.overhead > c {
            st.warm = true;
            // Evict from MRU when it is over its target, else from MFU.
            let from = if (st.sizes[0] > st.p && !st.lists.mru.is_empty()) || st.lists.mfu.is_empty() {
                ListId::Mru
            } else {
                ListId::Mfu
            };
            let ghost = if from == ListId::Mru { ListId::MruGhost } else { ListId::MfuGhost };
            let Some((&seq, &key)) = st.lists.list(from).iter().next() else { break };
            st.lists.list(from).remove(&seq);
            // A buffer the L2ARC may hold and has not written yet goes to the feed rather
            // than nowhere (see `take_l2_pending`).
            let e = &st.entries[&key];
            let rescue = match (&e.l2bp, e.l2) {
                (Some(bp), false) => Some(L2Candidate { key, phys: e.phys.clone(), data: e.data.clone().filter(|_| e.phys.is_none()), bp: (**bp).clone(), mfu: from == ListId::Mfu, prefetch: e.prefetch }),
                _ => None,
            };
            st.drop_bufs(&key);
            let e = st.entries.get_mut(&key).unwrap();
            let (eligible, cached) = (e.l2bp.take().is_some(), e.l2);
            e.list = ghost;
            let size = e.size;
            match (eligible, cached, from) {
                (false, _, _) => st.evict_l2_ineligible += size,
                (true, true, _) => st.evict_l2_cached += size,
                (true, false, ListId::Mfu) => st.evict_l2_eligible_mfu += size,
                (true, false, _) => st.evict_l2_eligible_mru += size,
            }
            if let Some(c) = rescue {
                st.l2_pending_bytes += size;
                st.l2_pending.push_back(c);
                let max = crate::tunables::l2arc_write_max() + crate::tunables::l2arc_write_boost();
                while st.l2_pending_bytes > max {
                    let Some(old) = st.l2_pending.pop_front() else { break };
                    st.l2_pending_bytes -= old.bytes();
                }
            }
            st.sizes[idx(from)] -= size;
            st.sizes[idx(ghost)] += size;
            st.lists.list(ghost).insert(seq, key);
        }
        // Bound the ghosts by c_max bytes each.
        for g in [ListId::MruGhost, ListId::MfuGhost] {
            while st.sizes[idx(g)] > c_max {
                let Some((&seq, &key)) = st.lists.list(g).iter().next() else { break };
                st.lists.list(g).remove(&seq);
                if let Some(e) = st.entries.remove(&key) {
                    st.sizes[idx(g)] -= e.size;
                    st.deleted += 1;
                }
            }
        }
    }

    /// How `key` is held, for tests: (compressed bytes kept, decompressed bytes kept);
    /// None when not resident.
    #[cfg(test)]
    pub(crate) fn held(&self, key: &ArcKey) -> Option<(bool, bool)> {
        let st = self.state.lock().unwrap();
        let e = st.entries.get(key).filter(|e| matches!(e.list, ListId::Mru | ListId::Mfu))?;
        Some((e.phys.is_some(), e.data.is_some()))
    }

    pub fn stats(&self) -> ArcStats {
        let st = self.state.lock().unwrap();
        ArcStats {
            size: st.sizes[0] + st.sizes[1] + st.overhead,
            compressed_size: st.sizes[0] + st.sizes[1],
            uncompressed_size: st.lsize,
            overhead_size: st.overhead,
            c: self.c(),
            c_max: self.c_max(),
            throttles: self.throttles.load(Ordering::Relaxed),
            no_grow: !self.may_grow(),
            meta_used: st.meta_used,
            dnode_size: st.dnode_size,
            hash_elements: st.entries.len() as u64,
            hash_elements_max: st.entries_max,
            deleted: st.deleted,
            evict_l2_eligible_mfu: st.evict_l2_eligible_mfu,
            evict_l2_eligible_mru: st.evict_l2_eligible_mru,
            evict_l2_ineligible: st.evict_l2_ineligible,
            evict_l2_cached: st.evict_l2_cached,
            access: std::array::from_fn(|r| std::array::from_fn(|h| self.access[r][h].load(Ordering::Relaxed))),
            c_min: self.c_min.load(Ordering::Relaxed),
            p: st.p,
            mru_size: st.sizes[0],
            mfu_size: st.sizes[1],
            mru_ghost_size: st.sizes[2],
            mfu_ghost_size: st.sizes[3],
            hits: st.hits,
            misses: st.misses,
            mru_hits: st.mru_hits,
            mfu_hits: st.mfu_hits,
            mru_ghost_hits: st.mru_ghost_hits,
            mfu_ghost_hits: st.mfu_ghost_hits,
        }
    }
}

/// Buffers for whole data blocks written through the file system, made ahead with their pages
/// already faulted in (`spare_block`). A block a write fills is new memory while the ARC grows
/// (it keeps what was written), and faulting its pages in (a fault per 4 KiB: the kernel's
/// zeroing and accounting) cost a sequential write a third of its CPU, on the thread that
/// answers the write while the writer waits. A thread of its own keeps some ready instead, on
/// the other CPU, as OpenZFS's ABD chunks come from kmem caches whose slabs are filled off the
/// I/O path. One list per power-of-two size (the record sizes) from `SPARE_MIN` up, each filled
/// once a write asked for that size, to `SPARE_BYTES`.
struct Spares {
    /// The buffers of each size class, and whether a write has asked for that size.
    lists: Mutex<[(bool, Vec<Vec<u8>>); SPARE_CLASSES]>,
    /// Wakes the filler when an asked-for class runs low.
    low: std::sync::Condvar,
}

/// Bytes of spare buffers kept ready per size; the filler wakes below half of it.
const SPARE_BYTES: usize = 8 << 20;
/// Sizes 32 KiB to 16 MiB (smaller blocks are a few pages each, not worth it).
const SPARE_MIN_SHIFT: u32 = 15;
const SPARE_CLASSES: usize = 10;

fn spares() -> &'static Spares {
    static SPARES: std::sync::OnceLock<&'static Spares> = std::sync::OnceLock::new();
    SPARES.get_or_init(|| {
        let sp: &'static Spares = Box::leak(Box::new(Spares { lists: Mutex::new(std::array::from_fn(|_| (false, Vec::new()))), low: std::sync::Condvar::new() }));
        let _ = std::thread::Builder::new().name("oxzfs-spares".into()).spawn(move || fill_spares(sp));
        sp
    })
}

/// The size class a class index stands for, and whether that class wants more.
fn spare_size(class: usize) -> usize {
    1 << (SPARE_MIN_SHIFT as usize + class)
}

fn spare_low(class: usize, list: &(bool, Vec<Vec<u8>>)) -> bool {
    list.0 && list.1.len() * spare_size(class) < SPARE_BYTES / 2
}

/// The filler: make buffers for each class a write asked for until it holds `SPARE_BYTES`,
/// touching every page so that the copy into it does not fault; then sleep until one runs low.
fn fill_spares(sp: &'static Spares) {
    loop {
        let class = {
            let lists = sp.lists.lock().unwrap_or_else(|p| p.into_inner());
            let lists = sp.low.wait_while(lists, |l| !l.iter().enumerate().any(|(c, x)| spare_low(c, x))).unwrap_or_else(|p| p.into_inner());
            (0..SPARE_CLASSES).find(|&c| spare_low(c, &lists[c])).expect("one is low")
        };
        let size = spare_size(class);
        loop {
            // A few at a time, outside the lock.
            let made: Vec<Vec<u8>> = (0..(1 << 20) / size + 1).map(|_| vec_touched(size)).collect();
            let mut lists = sp.lists.lock().unwrap_or_else(|p| p.into_inner());
            lists[class].1.extend(made);
            if lists[class].1.len() * size >= SPARE_BYTES {
                break;
            }
        }
    }
}

/// A buffer of `size` zeros whose pages are all in memory (written, not calloc'ed: fresh memory
/// from calloc would be left untouched).
fn vec_touched(size: usize) -> Vec<u8> {
    let mut v: Vec<u8> = Vec::with_capacity(size);
    v.resize(size, 0);
    v
}

/// A buffer of `len` bytes (contents unspecified: the caller overwrites all of it) for a whole
/// block about to be filled, from the spares when one of that size is ready; `None` for sizes
/// without spares (not a power of two, below 32 KiB) or when none is ready (the caller
/// allocates as usual).
pub fn spare_block(len: usize) -> Option<Vec<u8>> {
    if !len.is_power_of_two() || len.trailing_zeros() < SPARE_MIN_SHIFT {
        return None;
    }
    let class = (len.trailing_zeros() - SPARE_MIN_SHIFT) as usize;
    if class >= SPARE_CLASSES {
        return None;
    }
    let sp = spares();
    let mut lists = sp.lists.lock().unwrap_or_else(|p| p.into_inner());
    lists[class].0 = true;
    let v = lists[class].1.pop();
    if spare_low(class, &lists[class]) {
        sp.low.notify_one();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_blocks_only_for_record_sizes_and_made_once_asked_for() {
        assert!(spare_block(40 << 10).is_none(), "not a power of two");
        assert!(spare_block(16 << 10).is_none(), "below 32 KiB");
        assert!(spare_block(32 << 20).is_none(), "above 16 MiB");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Some(v) = spare_block(64 << 10) {
                assert_eq!(v.len(), 64 << 10);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no spare came after a write asked for the size");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn k(o: u64) -> ArcKey {
        ArcKey { spa: 1, vdev: 0, offset: o, birth: 1, cksum: [0; 4] }
    }

    #[test]
    fn whole_checksum_names_a_block_rewritten_in_place() {
        let arc = Arc_::new(1 << 20);
        let a = ArcKey { spa: 1, vdev: 0, offset: 4096, birth: 9, cksum: [7, 1, 2, 3] };
        // Rewritten in place in a later pass: same DVA and birth, checksum differs past word 0.
        let b = ArcKey { cksum: [7, 1, 2, 4], ..a };
        arc.insert(a, Arc::new(vec![1u8; 512]));
        assert!(arc.get(&b).is_none(), "a different checksum is a different block");
        arc.replace(b, Arc::new(vec![2u8; 512]), None);
        assert_eq!(arc.get(&b).unwrap()[0], 2);
        assert_eq!(arc.get(&a).unwrap()[0], 1);
    }

    #[test]
    fn replace_takes_new_bytes_insert_keeps_old() {
        let arc = Arc_::new(1 << 20);
        arc.insert(k(1), Arc::new(vec![1u8; 512]));
        arc.insert(k(1), Arc::new(vec![2u8; 512]));
        assert_eq!(arc.get(&k(1)).unwrap()[0], 1);
        arc.replace(k(1), Arc::new(vec![3u8; 1024]), None);
        assert_eq!(arc.get(&k(1)).unwrap()[0], 3);
        assert_eq!(arc.stats().size, 1024);
    }

    #[test]
    fn stays_under_limit_and_keeps_frequent_blocks() {
        let arc = Arc_::new(1 << 20); // 1 MiB
        let blk = Arc::new(vec![0u8; 64 << 10]);
        // A hot set of 4 blocks, touched twice, then a scan of 100 cold blocks.
        for o in 0..4 {
            arc.insert(k(o), blk.clone());
            assert!(arc.get(&k(o)).is_some());
        }
        for o in 100..200 {
            arc.insert(k(o), blk.clone());
            assert!(arc.stats().size <= 1 << 20);
        }
        for o in 0..4 {
            assert!(arc.get(&k(o)).is_some(), "frequent block {o} survived the scan");
        }
        assert!(arc.get(&k(100)).is_none(), "the oldest cold block was evicted");
        let s = arc.stats();
        assert!(s.size <= s.c_max);
    }

    #[test]
    fn a_smaller_limit_evicts_at_once_and_l2_candidates_come_from_the_tails() {
        let arc = Arc_::new(4 << 20);
        let bp = BlockPointer::default();
        for o in 0..32 {
            arc.insert_l2(k(o), Arc::new(vec![0u8; 64 << 10]), &bp);
        }
        assert!(!arc.warm());
        // Cold: from the head (newest first).
        let c = arc.l2_candidates(1, 0, &|_| false);
        assert_eq!(c.len(), 32);
        assert_eq!(c[0].key, k(31));
        arc.set_limits(1 << 20, 0);
        let s = arc.stats();
        assert!(s.size <= 1 << 20 && s.c_max == 1 << 20, "{s:?}");
        assert!(arc.warm());
        // Warm: from the tail (oldest first), bounded by the scan, skipping what L2 holds.
        let c = arc.l2_candidates(1, 128 << 10, &|key| key.offset == 16);
        assert_eq!(c.iter().map(|c| c.key.offset).collect::<Vec<_>>(), vec![17]);
        // Blocks inserted without a bp (secondarycache=none) are never candidates.
        arc.insert(k(100), Arc::new(vec![0u8; 512]));
        assert!(arc.l2_candidates(1, 0, &|_| false).iter().all(|c| c.key.offset != 100));
    }

    #[test]
    fn a_demand_hit_makes_a_prefetched_buffer_eligible_for_the_l2arc() {
        let arc = Arc_::new(4 << 20);
        let bp = BlockPointer { birth: 7, ..Default::default() };
        // Brought in without its bp (a prefetch under l2arc_noprefetch): not a candidate.
        arc.insert(k(1), Arc::new(vec![1u8; 4096]));
        assert!(arc.l2_candidates(1, 0, &|_| false).is_empty());
        // A plain hit leaves it so; a demand hit that may feed the L2ARC gives it its bp.
        assert!(arc.get(&k(1)).is_some());
        assert!(arc.l2_candidates(1, 0, &|_| false).is_empty());
        assert!(arc.get_l2(&k(1), &bp).is_some());
        let c = arc.l2_candidates(1, 0, &|_| false);
        assert_eq!((c.len(), c[0].bp.birth, c[0].mfu), (1, 7, true));
    }

    #[test]
    fn memory_pressure_lowers_the_target_and_growth_waits() {
        let arc = Arc_::new(8 << 20);
        arc.set_limits(8 << 20, 1 << 20);
        for o in 0..200 {
            arc.insert(k(o), Arc::new(vec![0u8; 64 << 10]));
        }
        assert_eq!(arc.stats().size, 8 << 20);
        arc.reap(1 << 30); // plenty available: nothing happens
        assert_eq!((arc.stats().c, arc.stats().throttles), (8 << 20, 0));
        // 3 MiB missing: the target drops by that and 1/128 of what could go.
        arc.reap(-(3 << 20));
        let s = arc.stats();
        assert_eq!(s.c, (8 << 20) - (3 << 20) - ((7 << 20) >> 7), "{s:?}");
        assert!(s.size <= s.c && s.no_grow && s.throttles == 1, "{s:?}");
        // No growth right after: new blocks evict old ones at the lowered target.
        for o in 1000..1200 {
            arc.insert(k(o), Arc::new(vec![0u8; 64 << 10]));
        }
        assert_eq!(arc.stats().c, s.c);
        assert!(arc.stats().size <= s.c);
        // Never below c_min.
        arc.reap(-(1 << 40));
        assert_eq!(arc.stats().c, 1 << 20);
        // New limits keep the lowered target within them (arc_tuning_update): not back to
        // c_max while memory is short.
        arc.set_limits(8 << 20, 2 << 20);
        assert_eq!(arc.stats().c, 2 << 20);
        arc.set_limits(16 << 20, 2 << 20);
        assert_eq!((arc.stats().c, arc.stats().c_max), (2 << 20, 16 << 20));
        arc.set_limits(1 << 20, 1 << 20);
        assert_eq!(arc.stats().c, 1 << 20);
    }

    #[test]
    fn a_prefetched_buffer_is_fed_as_such_until_a_demand_read() {
        let arc = Arc_::new(4 << 20);
        let bp = BlockPointer::default();
        arc.insert_l2(k(1), Arc::new(vec![0u8; 4096]), &bp);
        arc.mark_prefetch(&k(1));
        assert!(arc.l2_candidates(1, 0, &|_| false)[0].prefetch);
        assert!(arc.get_l2(&k(1), &bp).is_some());
        assert!(!arc.l2_candidates(1, 0, &|_| false)[0].prefetch);
    }

    #[test]
    fn metadata_and_evictions_are_counted() {
        let arc = Arc_::new(1 << 20);
        let bp = BlockPointer::default();
        arc.insert(k(1), Arc::new(vec![0u8; 16384]));
        arc.classify(&k(1), BufKind::Dnode);
        arc.insert_l2(k(2), Arc::new(vec![0u8; 16384]), &bp);
        arc.classify(&k(2), BufKind::Metadata);
        let s = arc.stats();
        assert_eq!((s.meta_used, s.dnode_size, s.hash_elements), (32768, 16384, 2));
        // Push both out with data: what they held leaves the counts, the L2-eligible one is
        // counted as such.
        for o in 10..100 {
            arc.insert(k(o), Arc::new(vec![0u8; 65536]));
        }
        let s = arc.stats();
        assert_eq!((s.meta_used, s.dnode_size), (0, 0), "{s:?}");
        assert_eq!(s.evict_l2_eligible_mru, 16384, "{s:?}");
        assert!(s.evict_l2_ineligible >= 16384 && s.deleted > 0 && s.hash_elements_max >= s.hash_elements, "{s:?}");
        arc.count_access(Access { prefetch: true, meta: true, hit: false });
        arc.count_access(Access { prefetch: false, meta: false, hit: true });
        assert_eq!(arc.stats().access, [[1, 0], [0, 0], [0, 0], [0, 1]]);
    }

    #[test]
    fn pools_share_the_cache_and_an_export_drops_only_its_own() {
        let arc = Arc_::new(4 << 20);
        let other = |o: u64| ArcKey { spa: 2, ..k(o) };
        arc.insert(k(1), Arc::new(vec![1u8; 4096]));
        arc.insert(other(1), Arc::new(vec![2u8; 4096]));
        assert_eq!((arc.get(&k(1)).unwrap()[0], arc.get(&other(1)).unwrap()[0]), (1, 2));
        let bp = BlockPointer::default();
        arc.insert_l2(other(2), Arc::new(vec![0u8; 4096]), &bp);
        assert!(arc.l2_candidates(1, 0, &|_| false).is_empty(), "another pool's buffer offered to this pool's cache device");
        arc.flush_spa(2);
        assert!(arc.get(&other(1)).is_none() && arc.get(&k(1)).is_some());
        assert_eq!(arc.stats().size, 4096);
    }

    #[test]
    fn compressed_blocks_are_counted_compressed_and_read_decompressed() {
        use oxzfs_format::compress::{compress, ZIO_COMPRESS_LZ4};
        let arc = Arc_::new(4 << 20);
        let block = |o: u64| {
            let logical: Vec<u8> = format!("block {o} ").into_bytes().into_iter().cycle().take(128 << 10).collect();
            let phys = compress(ZIO_COMPRESS_LZ4, 0, &logical, 64 << 10).unwrap();
            (Arc::new(logical), phys)
        };
        // 256 blocks of 128K: 32 MiB decompressed, eight times the limit.
        let mut psize = 0;
        for o in 0..256 {
            let (l, p) = block(o);
            psize += p.len() as u64;
            arc.insert_block(k(o), l, Some(p), ZIO_COMPRESS_LZ4, None);
        }
        let s = arc.stats();
        assert!(psize + (4 << 20) / 16 < 4 << 20, "the test's blocks compress well ({psize})");
        assert_eq!((s.compressed_size, s.uncompressed_size), (psize, 256 << 17), "{s:?}");
        // The copies in use are bounded (1/16 of the target) and counted in the size.
        assert!(s.overhead_size <= (4 << 20) / 16 && s.overhead_size > 0, "{s:?}");
        assert_eq!(s.size, s.compressed_size + s.overhead_size);
        // Every block is still there, read back decompressed; the oldest had lost its copy.
        for o in 0..256 {
            assert_eq!(*arc.get(&k(o)).unwrap(), *block(o).0, "block {o}");
        }
        let s = arc.stats();
        assert!(s.overhead_size <= (4 << 20) / 16 && s.size <= s.c, "{s:?}");
        // A block stored uncompressed (no physical bytes given) is kept once, no overhead.
        let before = arc.stats();
        arc.insert_block(k(1000), Arc::new(vec![7u8; 4096]), None, 0, None);
        let s = arc.stats();
        assert_eq!((s.compressed_size - before.compressed_size, s.uncompressed_size - before.uncompressed_size), (4096, 4096));
        // The feed gets the compressed bytes as they are.
        let bp = BlockPointer::default();
        let (l, p) = block(2000);
        arc.insert_block(k(2000), l, Some(p.clone()), ZIO_COMPRESS_LZ4, Some(&bp));
        let c = arc.l2_candidates(1, 0, &|_| false);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].phys.as_deref(), Some(&p));
        // An export lets go of it all.
        arc.flush_spa(1);
        let s = arc.stats();
        assert_eq!((s.size, s.compressed_size, s.uncompressed_size, s.overhead_size), (0, 0, 0, 0), "{s:?}");
        // A block just written with its compressed bytes is kept compressed, without a copy
        // until it is read; it replaces what the key held, and the feed gets those bytes.
        let (l, p) = block(3000);
        arc.insert(k(3000), Arc::new(vec![9u8; 128 << 10]));
        arc.replace_block(k(3000), l.clone(), Some(Arc::new(p.clone())), ZIO_COMPRESS_LZ4, false, Some(&bp));
        let s = arc.stats();
        assert_eq!((s.size, s.compressed_size, s.uncompressed_size, s.overhead_size), (p.len() as u64, p.len() as u64, 128 << 10, 0), "{s:?}");
        assert_eq!(arc.l2_candidates(1, 0, &|_| false)[0].phys.as_deref(), Some(&p));
        assert_eq!(*arc.get(&k(3000)).unwrap(), *l);
        assert_eq!(arc.stats().overhead_size, 128 << 10, "read, it has its copy in use");
    }

    #[test]
    fn buffers_evicted_before_the_feed_wrote_them_wait_for_it() {
        let arc = Arc_::new(1 << 20);
        let bp = BlockPointer::default();
        for o in 0..16 {
            arc.insert_l2(k(o), Arc::new(vec![o as u8; 64 << 10]), &bp);
        }
        // The feed wrote the first eight; sixteen more push all sixteen out.
        arc.mark_l2(&(0..8).map(k).collect::<Vec<_>>());
        for o in 16..32 {
            arc.insert_l2(k(o), Arc::new(vec![o as u8; 64 << 10]), &bp);
        }
        let s = arc.stats();
        assert_eq!((s.evict_l2_cached, s.evict_l2_eligible_mru), (8 << 16, 8 << 16), "{s:?}");
        assert_eq!(arc.l2_pending_bytes(), 8 << 16);
        assert!(arc.take_l2_pending(2).is_empty(), "another pool's");
        let p = arc.take_l2_pending(1);
        assert_eq!(p.iter().map(|c| c.key.offset).collect::<Vec<_>>(), (8..16).collect::<Vec<_>>());
        assert!(p.iter().all(|c| c.data.as_ref().unwrap()[0] == c.key.offset as u8));
        assert_eq!(arc.l2_pending_bytes(), 0);
        // An export drops what waits.
        arc.insert_l2(k(100), Arc::new(vec![0u8; 512 << 10]), &bp);
        arc.insert_l2(k(101), Arc::new(vec![0u8; 256 << 10]), &bp);
        assert!(arc.l2_pending_bytes() > 0);
        arc.flush_spa(1);
        assert_eq!(arc.l2_pending_bytes(), 0);
    }

    #[test]
    fn ghost_hit_grows_mru_target() {
        let arc = Arc_::new(1 << 20);
        let blk = Arc::new(vec![0u8; 256 << 10]);
        for o in 0..8 {
            arc.insert(k(o), blk.clone());
        }
        let p0 = arc.stats().p;
        arc.insert(k(0), blk.clone()); // k(0) was evicted to the MRU ghost list
        assert!(arc.stats().p > p0);
        assert!(arc.get(&k(0)).is_some());
    }
}
