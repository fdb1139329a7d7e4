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

use std::collections::{BTreeMap, HashMap};
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
}

/// Counters for `arcstats`-style reporting.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArcStats {
    pub size: u64,
    pub c_max: u64,
    pub p: u64,
    pub mru_size: u64,
    pub mfu_size: u64,
    pub hits: u64,
    pub misses: u64,
}

pub struct Arc_ {
    c_max: u64,
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
            c_max,
            state: Mutex::new(State {
                entries: HashMap::new(),
                lists: Lists::default(),
                sizes: [0; 4],
                seq: 0,
                p: c_max / 2,
                hits: 0,
                misses: 0,
            }),
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

    pub fn get(&self, key: &ArcKey) -> Option<Arc<Vec<u8>>> {
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
                // Promote to (the head of) MFU.
                st.seq += 1;
                let new_seq = st.seq;
                st.lists.list(list).remove(&seq);
                st.lists.mfu.insert(new_seq, *key);
                let e = st.entries.get_mut(key).unwrap();
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
        self.put(key, data, false)
    }

    /// Insert a block just written: as `insert`, but a cached entry under the same key takes
    /// the new bytes (the device holds them now).
    pub fn replace(&self, key: ArcKey, data: Arc<Vec<u8>>) {
        self.put(key, data, true)
    }

    fn put(&self, key: ArcKey, data: Arc<Vec<u8>>, replace: bool) {
        let size = data.len() as u64;
        if size > self.c_max / 4 {
            return; // Never let one block flush the cache.
        }
        let mut st = self.state.lock().unwrap();
        let st = &mut *st;
        st.seq += 1;
        let seq = st.seq;
        let target = match st.entries.get(&key).map(|e| (e.list, e.seq, e.size)) {
            Some((ListId::MruGhost, old, osz)) => {
                let delta = (st.sizes[3] / st.sizes[2].max(1)).max(1) * osz;
                st.p = (st.p + delta).min(self.c_max);
                st.lists.mru_ghost.remove(&old);
                st.sizes[2] -= osz;
                ListId::Mfu
            }
            Some((ListId::MfuGhost, old, osz)) => {
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
                self.evict(st);
                return;
            }
            None => ListId::Mru,
        };
        st.entries.insert(key, Entry { list: target, seq, size, data: Some(data) });
        st.lists.list(target).insert(seq, key);
        st.sizes[idx(target)] += size;
        self.evict(st);
    }

    fn evict(&self, st: &mut State) {
        while st.sizes[0] + st.sizes[1] > self.c_max {
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
            e.list = ghost;
            let size = e.size;
            st.sizes[idx(from)] -= size;
            st.sizes[idx(ghost)] += size;
            st.lists.list(ghost).insert(seq, key);
        }
        // Bound the ghosts by c_max bytes each.
        for g in [ListId::MruGhost, ListId::MfuGhost] {
            while st.sizes[idx(g)] > self.c_max {
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
            c_max: self.c_max,
            p: st.p,
            mru_size: st.sizes[0],
            mfu_size: st.sizes[1],
            hits: st.hits,
            misses: st.misses,
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
        arc.replace(b, Arc::new(vec![2u8; 512]));
        assert_eq!(arc.get(&b).unwrap()[0], 2);
        assert_eq!(arc.get(&a).unwrap()[0], 1);
    }

    #[test]
    fn replace_takes_new_bytes_insert_keeps_old() {
        let arc = Arc_::new(1 << 20);
        arc.insert(k(1), Arc::new(vec![1u8; 512]));
        arc.insert(k(1), Arc::new(vec![2u8; 512]));
        assert_eq!(arc.get(&k(1)).unwrap()[0], 1);
        arc.replace(k(1), Arc::new(vec![3u8; 1024]));
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
