//! ddt: the dedup table — which blocks of dedup datasets share their copies, and how often.
//!
//! ```text
//!   MOS dir "DDT-statistics" ─► ZAP: "DDT-sha256-zap-unique" → histogram (512 u64), …
//!   MOS dir "DDT-sha256-zap-unique"    ─► DDT ZAP: key (cksum, sizes, compress) → 4 phys
//!   MOS dir "DDT-sha256-zap-duplicate" ─► the same, for entries referenced more than once
//! ```
//!
//! One table per checksum function (sha256, sha512, skein, edonr, blake3). Every entry is held
//! in memory from import on (the ZAP writer re-encodes whole ZAPs anyway): a write looks its
//! key up and either adds a reference to the copies already there (dedup bit set, the DVAs
//! and physical birth of the entry, as zio_ddt_write's ddt_bp_fill) or places the block and
//! records it with one reference. A free of a dedup bp only drops a reference; `sync` (ddt_sync,
//! in the syncing txg before the MOS) frees the copies of a phys whose count reached zero,
//! moves entries between the unique and duplicate ZAPs as their total count changes, keeps the
//! per-class histograms (an entry's old contribution taken out when it is first touched in a
//! txg, the new one added at sync, as ddt_lookup / ddt_sync_entry do), creates class objects on
//! first use and destroys a table's objects when it is empty.
//!
//! Txg context: writes happen in the syncing txg (the table travels with the dataset sync, like
//! the metaslabs, without the pool lock); frees in the syncing txg or, for `zfs destroy`, in
//! the open txg under the pool's write state — both land in the next `sync`. No lock of its own.

use crate::dbuf::ObjsetW;
use crate::vdev::Vdev;
use crate::zio::{self, DedupWriter, DvaAllocator, Prepared, WriteProps, Written, ZioCtx};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::{BlockPointer, Dva};
use oxzfs_format::checksum;
use oxzfs_format::ddt::{
    decode_phys, ddt_object_name, encode_phys, DdtClass, DdtHistogram, DdtKey, DdtPhys, DdtStat, DDT_PHYS_DITTO,
    DDT_PHYS_TYPES, DDT_ZAP_LEAF_BLOCKSHIFT,
};
use oxzfs_format::dsl::DMU_POOL_DDT_STATS;
use oxzfs_format::types;
use oxzfs_format::zap::{ZAP_FLAG_HASH64, ZAP_FLAG_PRE_HASHED_KEY, ZAP_FLAG_UINT64_KEY};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The checksum a dedup=on / dedup=verify dataset dedups with (ZIO_DEDUPCHECKSUM).
pub const ZIO_DEDUPCHECKSUM: u8 = checksum::ZIO_CHECKSUM_SHA256;
/// DDT ZAP indirect block shift (ddt_zap_indirect_blockshift).
const DDT_ZAP_INDIRECT_BLOCKSHIFT: u8 = 12;

/// One entry in memory: its four phys and the class ZAP holding it on disk (None: not yet).
#[derive(Clone, Debug, Default)]
struct Entry {
    phys: [DdtPhys; DDT_PHYS_TYPES],
    class: Option<DdtClass>,
}

impl Entry {
    fn total_refcnt(&self) -> u64 {
        self.phys[1..].iter().map(|p| p.refcnt).sum()
    }
}

/// The table of one checksum function.
#[derive(Clone, Debug, Default)]
struct Table {
    /// MOS object of each class's ZAP (0: none).
    objects: [u64; 3],
    /// Per-class histograms (ddt_histogram[type][class]).
    histogram: [DdtHistogram; 3],
    entries: BTreeMap<DdtKey, Entry>,
    /// Entries changed since the last sync (their old contribution is out of the histogram).
    dirty: BTreeSet<DdtKey>,
}

/// The pool's dedup tables.
#[derive(Debug, Default)]
pub struct Ddt {
    /// The "DDT-statistics" object (0: none yet).
    stat_obj: u64,
    tables: BTreeMap<u8, Table>,
}

/// dva_get_dsize_sync: a DVA's allocated bytes scaled by its vdev's deflate ratio.
impl DedupWriter for Ddt {
    fn dedup_write(&mut self, root: &Vdev, salt: &[u8; 32], alloc: &mut dyn DvaAllocator, data: &[u8], p: &WriteProps, verify: bool, txg: u64) -> Result<(Written, Option<Arc<Vec<u8>>>)> {
        self.write_keeping(root, salt, alloc, data, p, verify, txg)
    }
}

fn dva_dsize(root: &Vdev, d: &Dva) -> u64 {
    if d.is_empty() {
        return 0;
    }
    match root.children.get(d.vdev as usize) {
        Some(top) => (d.asize >> 9) * crate::vdev::deflate_ratio(top),
        None => 0,
    }
}

/// ddt_stat_generate: an entry's contribution to its class histogram.
fn entry_stat(root: &Vdev, key: &DdtKey, e: &Entry) -> DdtStat {
    let mut s = DdtStat::default();
    let ndvas = if key.crypt() { 2 } else { 3 };
    for p in e.phys.iter().filter(|p| p.phys_birth != 0) {
        let dsize: u64 = p.dva[..ndvas].iter().map(|d| dva_dsize(root, d)).sum();
        let (l, ps) = (key.lsize(), key.psize());
        s.blocks += 1;
        s.lsize += l;
        s.psize += ps;
        s.dsize += dsize;
        s.ref_blocks += p.refcnt;
        s.ref_lsize += l * p.refcnt;
        s.ref_psize += ps * p.refcnt;
        s.ref_dsize += dsize * p.refcnt;
    }
    s
}

fn bucket(ref_blocks: u64) -> usize {
    (63 - ref_blocks.max(1).leading_zeros()) as usize
}

fn class_index(c: DdtClass) -> usize {
    c as usize
}

impl Table {
    /// Mark `key` changed in this txg: the first time, its on-disk contribution leaves its
    /// class histogram.
    fn touch(&mut self, root: &Vdev, key: &DdtKey) {
        if self.dirty.insert(*key) {
            if let Some(e) = self.entries.get(key) {
                if let Some(c) = e.class {
                    let s = entry_stat(root, key, e);
                    self.histogram[class_index(c)].0[bucket(s.ref_blocks)].add(&s, true);
                }
            }
        }
    }
}

impl Ddt {
    /// Load every table of the pool from the MOS (ddt_load): nothing when the pool never
    /// deduplicated.
    pub fn load(mos: &mut ObjsetW) -> Result<Ddt> {
        let mut ddt = Ddt::default();
        let Some(stat_obj) = mos.zap_lookup(1, DMU_POOL_DDT_STATS)? else { return Ok(ddt) };
        ddt.stat_obj = stat_obj;
        let stats = mos.zap(stat_obj)?.clone();
        // Every function: older systems deduplicated with weak checksums and verify too.
        for c in 0..checksum::ZIO_CHECKSUM_FUNCTIONS as u8 {
            let mut t = Table::default();
            for class in DdtClass::ALL {
                let name = ddt_object_name(checksum::checksum_name(c), class);
                let Some(obj) = mos.zap_lookup(1, &name)? else { continue };
                t.objects[class_index(class)] = obj;
                if let Some((8, words)) = stats.entries.get(name.as_bytes()) {
                    t.histogram[class_index(class)] = DdtHistogram::decode(words).map_err(|e| ZfsError::corrupt(format!("{name} histogram"), e))?;
                }
                let z = mos.zap(obj)?.clone();
                for (k, (isz, v)) in &z.entries {
                    let key = DdtKey::from_zap_key(k).map_err(|e| ZfsError::corrupt(format!("{name} (object {obj})"), e))?;
                    if *isz != 1 {
                        return Err(ZfsError::Invalid(format!("{name} (object {obj}): value of {isz}-byte integers")));
                    }
                    let bytes: Vec<u8> = v.iter().map(|&b| b as u8).collect();
                    let phys = decode_phys(&bytes).map_err(|e| ZfsError::corrupt(format!("{name} (object {obj})"), e))?;
                    t.entries.insert(key, Entry { phys, class: Some(class) });
                }
            }
            if t.objects.iter().any(|&o| o != 0) {
                ddt.tables.insert(c, t);
            }
        }
        Ok(ddt)
    }

    /// Whether anything changed since the last sync.
    pub fn is_dirty(&self) -> bool {
        self.tables.values().any(|t| !t.dirty.is_empty())
    }

    /// zio_ddt_write for one level-0 block of a dedup dataset: `p.checksum` is the dedup
    /// checksum, `p.copies` selects the phys (single, double, triple). Holes and embedded
    /// blocks are returned as they are (never deduplicated).
    #[allow(clippy::too_many_arguments)]
    pub fn write(&mut self, root: &Vdev, salt: &[u8; 32], alloc: &mut dyn DvaAllocator, data: &[u8], p: &WriteProps, verify: bool, txg: u64) -> Result<Written> {
        Ok(self.write_keeping(root, salt, alloc, data, p, verify, txg)?.0)
    }

    /// `write`, returning with the outcome the block's compressed bytes when it is stored
    /// compressed (a reference added to a copy already written has the same bytes): what the
    /// ARC keeps of it under zfs_compressed_arc_enabled.
    #[allow(clippy::too_many_arguments)]
    pub fn write_keeping(&mut self, root: &Vdev, salt: &[u8; 32], alloc: &mut dyn DvaAllocator, data: &[u8], p: &WriteProps, verify: bool, txg: u64) -> Result<(Written, Option<Arc<Vec<u8>>>)> {
        let (mut bp, phys) = match zio::prepare(salt, alloc.min_alloc(), data, p, txg)? {
            Prepared::Hole => return Ok((Written::Hole, None)),
            Prepared::Embedded(bp) => return Ok((Written::Bp(bp), None)),
            Prepared::Block { bp, phys } => (bp, phys),
        };
        let key = DdtKey::of_bp(&bp);
        if verify {
            if let Some(e) = self.tables.get(&p.checksum).and_then(|t| t.entries.get(&key)) {
                if collides(root, salt, &key, p.checksum, e, data)? {
                    if !checksum::checksum_info(p.checksum).map_or(false, |i| i.dedup()) {
                        // A weak checksum: try again with the strong one.
                        let strong = WriteProps { checksum: ZIO_DEDUPCHECKSUM, ..*p };
                        return self.write_keeping(root, salt, alloc, data, &strong, true, txg);
                    }
                    // A strong checksum cannot tell them apart: an ordinary write.
                    zio::place(root, salt, alloc, &mut bp, &phys, p, txg)?;
                    return Ok((Written::Bp(bp), zio::compressed_bytes(phys)));
                }
            }
        }
        let slot = p.copies.clamp(1, 3);
        let t = self.tables.entry(p.checksum).or_default();
        t.touch(root, &key);
        let e = t.entries.entry(key).or_default();
        let ph = &mut e.phys[slot];
        if ph.phys_birth != 0 {
            bp.dva = ph.dva;
            bp.birth = txg;
            bp.phys_birth = if ph.phys_birth == txg { 0 } else { ph.phys_birth };
        } else {
            if let Err(err) = zio::place(root, salt, alloc, &mut bp, &phys, p, txg) {
                if e.phys.iter().all(|x| x.phys_birth == 0) && e.class.is_none() {
                    t.entries.remove(&key);
                    t.dirty.remove(&key);
                }
                return Err(err);
            }
            ph.dva = bp.dva;
            ph.phys_birth = txg;
        }
        ph.refcnt += 1;
        bp.dedup = true;
        Ok((Written::Bp(bp), zio::compressed_bytes(phys)))
    }

    /// zio_ddt_free: drop one reference of dedup bp `bp` (its copies are freed at sync when
    /// the count reaches zero). A bp the table does not know is left alone, as OpenZFS does.
    pub fn free(&mut self, root: &Vdev, bp: &BlockPointer) {
        let key = DdtKey::of_bp(bp);
        let Some(t) = self.tables.get_mut(&bp.checksum) else { return };
        if !t.entries.contains_key(&key) {
            return;
        }
        t.touch(root, &key);
        let e = t.entries.get_mut(&key).expect("checked");
        let pb = bp.physical_birth();
        if let Some(ph) = e.phys.iter_mut().find(|ph| ph.dva[0] == bp.dva[0] && ph.phys_birth == pb) {
            ph.refcnt = ph.refcnt.saturating_sub(1);
        }
    }

    /// ddt_sync: write the changed entries into their class ZAPs in the MOS, update the
    /// histograms in "DDT-statistics", create and destroy class objects. Returns the (plain,
    /// non-dedup) bps whose copies are to be freed in `txg`.
    pub fn sync(&mut self, mos: &mut ObjsetW, root: &Vdev) -> Result<Vec<BlockPointer>> {
        let mut freed = Vec::new();
        if !self.is_dirty() {
            return Ok(freed);
        }
        if self.stat_obj == 0 {
            self.stat_obj = mos.create_zap(types::DMU_OT_DDT_STATS, 0, 0, 0)?;
            mos.zap_add_u64(1, DMU_POOL_DDT_STATS, self.stat_obj)?;
        }
        let stat_obj = self.stat_obj;
        for (&c, t) in self.tables.iter_mut() {
            // ddt_sync_table: a table nothing touched this txg is left as it is.
            if t.dirty.is_empty() {
                continue;
            }
            let cname = checksum::checksum_name(c);
            for key in std::mem::take(&mut t.dirty) {
                let Some(e) = t.entries.get_mut(&key) else { continue };
                for (i, ph) in e.phys.iter_mut().enumerate() {
                    if ph.phys_birth == 0 {
                        continue;
                    }
                    if i == DDT_PHYS_DITTO || ph.refcnt == 0 {
                        let mut b = key.bp(c, ph);
                        b.dedup = false;
                        freed.push(b);
                        *ph = DdtPhys::default();
                    }
                }
                let total = e.total_refcnt();
                let nclass = if total > 1 { DdtClass::Duplicate } else { DdtClass::Unique };
                if let Some(oc) = e.class {
                    if oc != nclass || total == 0 {
                        let obj = t.objects[class_index(oc)];
                        mos.zap_mut(obj)?.entries.remove(&key.zap_key());
                        e.class = None;
                    }
                }
                if total == 0 {
                    t.entries.remove(&key);
                    continue;
                }
                e.class = Some(nclass);
                let s = entry_stat(root, &key, e);
                t.histogram[class_index(nclass)].0[bucket(s.ref_blocks)].add(&s, false);
                if t.objects[class_index(nclass)] == 0 {
                    t.objects[class_index(nclass)] = create_class_object(mos, c, nclass, stat_obj)?;
                }
                let value: Vec<u64> = encode_phys(&e.phys).into_iter().map(u64::from).collect();
                let obj = t.objects[class_index(nclass)];
                mos.zap_mut(obj)?.entries.insert(key.zap_key(), (1, value));
            }
            // ddt_object_sync for every class object; the table's objects go when it is empty.
            let mut count = 0usize;
            for class in DdtClass::ALL {
                let obj = t.objects[class_index(class)];
                if obj == 0 {
                    continue;
                }
                let name = ddt_object_name(cname, class);
                mos.zap_mut(stat_obj)?.entries.insert(name.into_bytes(), (8, t.histogram[class_index(class)].encode()));
                count += mos.zap(obj)?.entries.len();
            }
            if count == 0 {
                for class in DdtClass::ALL {
                    let obj = t.objects[class_index(class)];
                    if obj == 0 {
                        continue;
                    }
                    let name = ddt_object_name(cname, class);
                    mos.zap_remove(1, &name)?;
                    mos.zap_remove(stat_obj, &name)?;
                    mos.free_object(obj)?;
                    t.objects[class_index(class)] = 0;
                    t.histogram[class_index(class)] = DdtHistogram::default();
                }
            }
        }
        self.tables.retain(|_, t| t.objects.iter().any(|&o| o != 0) || !t.entries.is_empty());
        Ok(freed)
    }
}

/// ddt_object_create: a class ZAP (uint64 keys, 64-bit hashes, pre-hashed for dedup-strong
/// checksums; 4K leaves and indirect blocks), named in the MOS directory and the statistics.
fn create_class_object(mos: &mut ObjsetW, c: u8, class: DdtClass, stat_obj: u64) -> Result<u64> {
    let obj = mos.create_zap(types::DMU_OT_DDT_ZAP, 0, 0, 0)?;
    let prehash = checksum::checksum_info(c).map_or(false, |i| i.dedup());
    {
        let z = mos.zap_mut(obj)?;
        z.flags = ZAP_FLAG_HASH64 | ZAP_FLAG_UINT64_KEY | if prehash { ZAP_FLAG_PRE_HASHED_KEY } else { 0 };
        z.leaf_shift = DDT_ZAP_LEAF_BLOCKSHIFT as u8;
    }
    mos.dirty_obj(obj)?.dn.indblkshift = DDT_ZAP_INDIRECT_BLOCKSHIFT;
    let name = ddt_object_name(checksum::checksum_name(c), class);
    mos.zap_add_u64(1, &name, obj)?;
    mos.zap_mut(stat_obj)?.entries.insert(name.into_bytes(), (8, DdtHistogram::default().encode()));
    Ok(obj)
}

/// zio_ddt_collision: whether a copy the entry holds differs from `data` (read back, its
/// logical bytes compared). A copy that cannot be read counts as different, as in OpenZFS:
/// the block is then written on its own rather than failing the sync.
fn collides(root: &Vdev, salt: &[u8; 32], key: &DdtKey, c: u8, e: &Entry, data: &[u8]) -> Result<bool> {
    for ph in e.phys.iter().filter(|p| p.phys_birth != 0) {
        if key.lsize() != data.len() as u64 {
            return Ok(true);
        }
        match zio::read_bp(&ZioCtx::new(root, salt), &key.bp(c, ph)) {
            Ok(got) if got == data => {}
            _ => return Ok(true),
        }
    }
    Ok(false)
}

/// zdb's dedup figures for "bp deduped" (zdb_ddt_leak_init): over the duplicate-class entries
/// of every table, the allocated bytes saved (a phys's asize times its references beyond the
/// first) and how many phys that is. Read-only, from the synced MOS.
pub fn zdb_dedup_totals(spa: &std::sync::Arc<crate::spa::Spa>) -> Result<(u64, u64)> {
    let mos = spa.mos();
    let (mut asize, mut blocks) = (0u64, 0u64);
    for c in 0..checksum::ZIO_CHECKSUM_FUNCTIONS as u8 {
        let name = ddt_object_name(checksum::checksum_name(c), DdtClass::Duplicate);
        let Some(obj) = crate::zap::zap_lookup_u64(&mos, 1, &name)? else { continue };
        for e in crate::zap::zap_list(&mos, obj)? {
            let phys = decode_phys(&e.value).map_err(|err| ZfsError::corrupt(format!("{name} (object {obj})"), err))?;
            let key = DdtKey::from_zap_key(&e.name).map_err(|err| ZfsError::corrupt(format!("{name} (object {obj})"), err))?;
            for ph in phys[1..].iter().filter(|p| p.phys_birth != 0) {
                // BP_GET_ASIZE of the entry's bp: an encrypted block's third DVA holds its
                // salt and IV, not a copy.
                let a: u64 = key.bp(c, ph).asize_total();
                asize = asize.saturating_add(a.saturating_mul(ph.refcnt.saturating_sub(1)));
                blocks += 1;
            }
        }
    }
    Ok((asize, blocks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zio::write_tests::{pool, Bump};
    use crate::zio::AllocClass;

    fn props(checksum: u8, copies: usize) -> WriteProps {
        WriteProps {
            typ: types::DMU_OT_PLAIN_FILE_CONTENTS,
            level: 0,
            checksum,
            compress: oxzfs_format::compress::ZIO_COMPRESS_OFF,
            complevel: 0,
            copies,
            embed_ok: true,
            class: AllocClass::Normal,
            dedup: true,
            dedup_verify: false,
        }
    }

    fn bp_of(w: Written) -> BlockPointer {
        match w {
            Written::Bp(bp) => bp,
            Written::Hole => panic!("a hole"),
        }
    }

    /// References share the first write's copies (dedup bit, physical birth of the first txg),
    /// each copies count has its own phys, frees count down, embedded blocks stay out.
    #[test]
    fn references_share_copies_and_count_down() {
        let (_dir, root, _) = pool("mirror", 2, 0, 9);
        let salt = [0u8; 32];
        let mut alloc = Bump { next: 0, top: root.children[0].clone() };
        let mut ddt = Ddt::default();
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + i / 300) as u8).collect();
        let p = props(checksum::ZIO_CHECKSUM_SHA256, 1);
        let first = bp_of(ddt.write(&root, &salt, &mut alloc, &data, &p, false, 10).unwrap());
        let again = bp_of(ddt.write(&root, &salt, &mut alloc, &data, &p, true, 12).unwrap());
        assert!(first.dedup && again.dedup);
        assert_eq!(again.dva, first.dva);
        assert_eq!((again.birth, again.phys_birth, again.physical_birth()), (12, 10, 10));
        let two = bp_of(ddt.write(&root, &salt, &mut alloc, &data, &props(checksum::ZIO_CHECKSUM_SHA256, 2), false, 12).unwrap());
        assert_ne!(two.dva[0], first.dva[0]);
        assert_eq!(two.ndvas(), 2);
        let t = &ddt.tables[&checksum::ZIO_CHECKSUM_SHA256];
        let e = &t.entries[&DdtKey::of_bp(&first)];
        assert_eq!((e.phys[1].refcnt, e.phys[1].phys_birth, e.phys[2].refcnt, e.total_refcnt()), (2, 10, 1, 3));
        // Frees select the phys by DVA[0] and physical birth.
        ddt.free(&root, &again);
        ddt.free(&root, &two);
        let e = &ddt.tables[&checksum::ZIO_CHECKSUM_SHA256].entries[&DdtKey::of_bp(&first)];
        assert_eq!((e.phys[1].refcnt, e.phys[2].refcnt), (1, 0));
        // A block small enough to embed is never deduplicated.
        let mut tiny = vec![0u8; 4096];
        tiny[0] = 1;
        let mut lz4 = props(checksum::ZIO_CHECKSUM_SHA256, 1);
        lz4.compress = oxzfs_format::compress::ZIO_COMPRESS_LZ4;
        let emb = bp_of(ddt.write(&root, &salt, &mut alloc, &tiny, &lz4, false, 12).unwrap());
        assert!(emb.embedded && !emb.dedup);
        assert_eq!(ddt.tables[&checksum::ZIO_CHECKSUM_SHA256].entries.len(), 1);
    }

    /// verify: an entry whose copy does not hold these bytes under the same key (forged here:
    /// the copy of other data, which does not even verify) is a collision — with
    /// a dedup-strong checksum the block is written on its own (no dedup bit), with edonr the
    /// write moves to the strong checksum's table.
    #[test]
    fn verify_falls_back_on_collision() {
        let (_dir, root, _) = pool("mirror", 2, 0, 9);
        let salt = [3u8; 32];
        let mut alloc = Bump { next: 0, top: root.children[0].clone() };
        for c in [checksum::ZIO_CHECKSUM_SHA512, checksum::ZIO_CHECKSUM_EDONR] {
            let mut ddt = Ddt::default();
            let a = vec![0xa5u8; 4096];
            let b: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
            let p = props(c, 1);
            let bp_a = bp_of(ddt.write(&root, &salt, &mut alloc, &a, &p, true, 5).unwrap());
            // Forge the collision: b's key now names a's copies.
            let key_b = match zio::prepare(&salt, 512, &b, &p, 6).unwrap() {
                Prepared::Block { bp, .. } => DdtKey::of_bp(&bp),
                _ => unreachable!(),
            };
            let t = ddt.tables.get_mut(&c).unwrap();
            let e = t.entries[&DdtKey::of_bp(&bp_a)].clone();
            t.entries.insert(key_b, e);
            let bp_b = bp_of(ddt.write(&root, &salt, &mut alloc, &b, &p, true, 6).unwrap());
            assert_ne!(bp_b.dva[0], bp_a.dva[0], "checksum {c}: the colliding block got a's copies");
            if c == checksum::ZIO_CHECKSUM_EDONR {
                assert!(bp_b.dedup && bp_b.checksum == ZIO_DEDUPCHECKSUM, "{bp_b}");
                assert!(ddt.tables[&ZIO_DEDUPCHECKSUM].entries.contains_key(&DdtKey::of_bp(&bp_b)));
            } else {
                assert!(!bp_b.dedup && bp_b.checksum == c, "{bp_b}");
            }
            assert_eq!(zio::read_bp(&ZioCtx::new(&root, &salt), &bp_b).unwrap(), b);
        }
    }
}
