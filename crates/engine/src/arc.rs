//! arc: the adaptive replacement cache of logical (decompressed, verified) blocks.
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
//! One cache serves a whole pool; a mutex guards it (lock order: ARC is a leaf lock, nothing
//! else is taken while it is held).
//!
//! For the L2ARC (see `l2arc`) an entry remembers the block pointer it was read or written
//! under and whether its dataset lets it go to a cache device (secondarycache); the feed asks
//! for the eligible entries at the tails of MFU and MRU (`l2_candidates`), the buffers about to
//! be evicted — or at the heads while the ARC is still cold (nothing evicted yet, `warm`).
//! The limit `c_max` (zfs_arc_max) can be changed while the pool is imported (`set_c_max`):
//! a smaller one evicts at once, down to it and never below `c_min`.

use oxzfs_format::blkptr::BlockPointer;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArcKey {
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
    list: ListId,
    seq: u64,
    size: u64,
    data: Option<Arc<Vec<u8>>>,
    /// The block pointer the data was read or written under, when the block may go to the
    /// L2ARC (secondarycache allows it); None otherwise.
    l2bp: Option<Box<BlockPointer>>,
}

/// A buffer the L2ARC feed may write: its key, logical bytes and block pointer, and whether it
/// sat in MFU (ARC state for the log entry).
pub struct L2Candidate {
    pub key: ArcKey,
    pub data: Arc<Vec<u8>>,
    pub bp: BlockPointer,
    pub mfu: bool,
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
}

/// Counters for `arcstats`-style reporting.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArcStats {
    pub size: u64,
    pub c_max: u64,
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
    state: Mutex<State>,
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
            }),
        }
    }

    /// zfs_arc_min's default: 1/32 of the limit, at least 32 MiB (never above the limit).
    pub fn default_min(c_max: u64) -> u64 {
        (c_max / 32).max(32 << 20).min(c_max)
    }

    fn c_max(&self) -> u64 {
        self.c_max.load(Ordering::Relaxed)
    }

    /// Change the limits while the cache is in use (zfs_arc_max, zfs_arc_min): the limit is
    /// kept at or above `c_min`, and a smaller one evicts at once.
    pub fn set_limits(&self, c_max: u64, c_min: u64) {
        let c_max = c_max.max(c_min).max(1 << 20);
        self.c_min.store(c_min.min(c_max), Ordering::Relaxed);
        self.c_max.store(c_max, Ordering::Relaxed);
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
    pub fn l2_candidates(&self, scan: u64, skip: &dyn Fn(&ArcKey) -> bool) -> Vec<L2Candidate> {
        let st = self.state.lock().unwrap();
        let mut out = Vec::new();
        for (list, mfu) in [(&st.lists.mfu, true), (&st.lists.mru, false)] {
            let mut passed = 0u64;
            let keys: Box<dyn Iterator<Item = &ArcKey>> = if st.warm { Box::new(list.values()) } else { Box::new(list.values().rev()) };
            for key in keys {
                let Some(e) = st.entries.get(key) else { continue };
                passed += e.size;
                if scan != 0 && passed > scan {
                    break;
                }
                let (Some(bp), Some(data)) = (&e.l2bp, &e.data) else { continue };
                if !skip(key) {
                    out.push(L2Candidate { key: *key, data: data.clone(), bp: (**bp).clone(), mfu });
                }
            }
        }
        out
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

    pub fn get(&self, key: &ArcKey) -> Option<Arc<Vec<u8>>> {
        self.get_inner(key, None)
    }

    /// `get` by a demand read of a block the L2ARC may hold: a buffer brought in without its
    /// block pointer (a prefetch, under l2arc_noprefetch) becomes eligible for the feed.
    pub fn get_l2(&self, key: &ArcKey, bp: &BlockPointer) -> Option<Arc<Vec<u8>>> {
        self.get_inner(key, Some(bp))
    }

    fn get_inner(&self, key: &ArcKey, l2bp: Option<&BlockPointer>) -> Option<Arc<Vec<u8>>> {
        let mut st = self.state.lock().unwrap();
        let st = &mut *st;
        let (list, seq, data) = match st.entries.get(key) {
            Some(e) => (e.list, e.seq, e.data.clone()),
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
                let size = e.size;
                e.list = ListId::Mfu;
                e.seq = new_seq;
                st.sizes[idx(list)] -= size;
                st.sizes[idx(ListId::Mfu)] += size;
                data
            }
            _ => {
                st.misses += 1;
                None
            }
        }
    }

    /// Insert a block just read. Adapts `p` on ghost hits, then evicts to stay under `c_max`.
    pub fn insert(&self, key: ArcKey, data: Arc<Vec<u8>>) {
        self.put(key, data, false, None)
    }

    /// `insert`, remembering the block pointer of a block the L2ARC may hold.
    pub fn insert_l2(&self, key: ArcKey, data: Arc<Vec<u8>>, bp: &BlockPointer) {
        self.put(key, data, false, Some(Box::new(bp.clone())))
    }

    /// Insert a block just written: as `insert`, but a cached entry under the same key takes
    /// the new bytes (the device holds them now).
    pub fn replace(&self, key: ArcKey, data: Arc<Vec<u8>>, l2bp: Option<&BlockPointer>) {
        self.put(key, data, true, l2bp.map(|b| Box::new(b.clone())))
    }

    fn put(&self, key: ArcKey, data: Arc<Vec<u8>>, replace: bool, l2bp: Option<Box<BlockPointer>>) {
        let size = data.len() as u64;
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
                st.sizes[idx(list)] -= osz;
                st.sizes[idx(list)] += size;
                let e = st.entries.get_mut(&key).expect("present");
                e.size = size;
                e.data = Some(data);
                e.l2bp = l2bp;
                self.evict(st);
                return;
            }
            None => ListId::Mru,
        };
        st.entries.insert(key, Entry { list: target, seq, size, data: Some(data), l2bp });
        st.lists.list(target).insert(seq, key);
        st.sizes[idx(target)] += size;
        self.evict(st);
    }

    fn evict(&self, st: &mut State) {
        let c_max = self.c_max();
        while st.sizes[0] + st.sizes[1] > c_max {
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
            let e = st.entries.get_mut(&key).unwrap();
            e.data = None;
            e.l2bp = None;
            e.list = ghost;
            let size = e.size;
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
                }
            }
        }
    }

    pub fn stats(&self) -> ArcStats {
        let st = self.state.lock().unwrap();
        ArcStats {
            size: st.sizes[0] + st.sizes[1],
            c_max: self.c_max(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn k(o: u64) -> ArcKey {
        ArcKey { vdev: 0, offset: o, birth: 1, cksum: [0; 4] }
    }

    #[test]
    fn whole_checksum_names_a_block_rewritten_in_place() {
        let arc = Arc_::new(1 << 20);
        let a = ArcKey { vdev: 0, offset: 4096, birth: 9, cksum: [7, 1, 2, 3] };
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
        let c = arc.l2_candidates(0, &|_| false);
        assert_eq!(c.len(), 32);
        assert_eq!(c[0].key, k(31));
        arc.set_limits(1 << 20, 0);
        let s = arc.stats();
        assert!(s.size <= 1 << 20 && s.c_max == 1 << 20, "{s:?}");
        assert!(arc.warm());
        // Warm: from the tail (oldest first), bounded by the scan, skipping what L2 holds.
        let c = arc.l2_candidates(128 << 10, &|key| key.offset == 16);
        assert_eq!(c.iter().map(|c| c.key.offset).collect::<Vec<_>>(), vec![17]);
        // Blocks inserted without a bp (secondarycache=none) are never candidates.
        arc.insert(k(100), Arc::new(vec![0u8; 512]));
        assert!(arc.l2_candidates(0, &|_| false).iter().all(|c| c.key.offset != 100));
    }

    #[test]
    fn a_demand_hit_makes_a_prefetched_buffer_eligible_for_the_l2arc() {
        let arc = Arc_::new(4 << 20);
        let bp = BlockPointer { birth: 7, ..Default::default() };
        // Brought in without its bp (a prefetch under l2arc_noprefetch): not a candidate.
        arc.insert(k(1), Arc::new(vec![1u8; 4096]));
        assert!(arc.l2_candidates(0, &|_| false).is_empty());
        // A plain hit leaves it so; a demand hit that may feed the L2ARC gives it its bp.
        assert!(arc.get(&k(1)).is_some());
        assert!(arc.l2_candidates(0, &|_| false).is_empty());
        assert!(arc.get_l2(&k(1), &bp).is_some());
        let c = arc.l2_candidates(0, &|_| false);
        assert_eq!((c.len(), c[0].bp.birth, c[0].mfu), (1, 7, true));
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
