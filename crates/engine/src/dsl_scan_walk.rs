//! dsl_scan_walk: the scan's walk over a pool's synced tree in OpenZFS's order
//! (dsl_scan_visit), so that where it stops — the bookmark of the `scan` entry, and the queue
//! of datasets still to visit — means the same to OpenZFS and to us, whoever resumes it.
//!
//! ```text
//!   bookmark.objset 0 (the MOS; an all-zero bookmark is the beginning):
//!       the MOS from its root bp, then $ORIGIN@$ORIGIN (pools before version 11: the first
//!       snapshot of every head's chain goes into the queue instead)
//!   bookmark.objset D (a dataset, D != -1): D again, from the bookmark on
//!   then, until the queue is empty: its lowest dataset object D (with the txg it was queued
//!       with: cur_min_txg = max(min_txg, that txg or D's prev_snap_txg), cur_max_txg =
//!       max_txg, or D's creation txg for a snapshot); visiting D queues its next snapshot and
//!       its clones (next_clones_obj) with D's creation txg
//!   the end: bookmark.objset = -1 (ZB_DESTROYED_OBJSET)
//! ```
//!
//! Inside an objset the walk is depth-first by zbookmark (objset, object, level, blkid): the
//! objset block, the meta dnode's blocks — each dnode block followed by its dnodes' trees —
//! then the project/group/user accounting objects (-3, -2, -1). A block is scrubbed after its
//! children (post-order), and not when the walk stopped below it: the blocks above a bookmark
//! are read once, by the walk that finishes their subtree. The walk stops (suspends) only at a level-0 block or an objset's root: the
//! bookmark is that block, not yet read; a walk from a bookmark passes over every subtree
//! wholly before it (zbookmark_subtree_completed) and clears the bookmark at the first block
//! at or after it. The accounting objects are never passed over nor stopped in: they are read
//! again by each walk that goes through their objset, as OpenZFS does. Blocks born at or before
//! cur_min_txg are passed over with everything below them, blocks born after cur_max_txg are
//! descended through but not read.
//!
//! Before all of it, the dedup table (dsl_scan_ddt): every entry of the classes up to
//! scn_ddt_class_max (ditto and duplicate for a scrub or a full resilver, ditto alone for an
//! incremental one), each of its copies born by max_txg read once — among them the ditto
//! copies older systems kept (DDT_PHYS_DITTO), which no block pointer names. Its position is
//! the `scan` entry's DDT bookmark (class, type, checksum, ZAP cursor serialized as OpenZFS's
//! zap_cursor_serialize does), so either of us resumes the other's walk of the table. A dedup
//! block the datasets meet is not read again when this walk read its copies in the table
//! phase (`ddt_scrubbed`; OpenZFS asks the table's classes, ddt_class_contains, and catches
//! entries changing class with a hook in the DDT's sync — keeping the copies read makes the
//! hook unneeded: an entry the table phase did not read is read where the datasets meet it).
//!
//! A head dataset's intent log, when its chain is claimed (a crash's log after an import with
//! -N, before the mount replays it; dsl_scan_zil), is visited before its tree: every log block
//! up to the claimed sequence read at once (speculatively, every copy checked against the
//! chain's embedded checksum, bad copies rewritten), and the blocks its indirect write records
//! name scanned as any other block (bookmarks objset:0:-2:seq and objset:object:-2:blkid).
//! A walk resumed inside the dataset visits it again.
//!
//! With a sink (the sorted scan), the blocks the walk would read go to the scan's queues
//! instead, gang blocks excepted; the walk itself still reads what it descends through (from
//! the ARC).
//!
//! A snapshot taken of the dataset under way, or of one queued, takes its place
//! (dsl_scan_ds_snapshotted); a destroyed snapshot's place goes to the one after it, a
//! destroyed head's is dropped (dsl_scan_ds_destroyed): see `dsl_scan`. A dataset that is gone
//! when its turn comes anyway is passed over.

use crate::dmu::Objset;
use crate::spa::Spa;
use crate::vdev::ReadMode;
use crate::zio::{self, ZioCtx};
use oxzfs_format::blkptr::{BlockPointer, BLKPTR_SIZE};
use oxzfs_format::dnode::{DnodePhys, DNODE_SIZE};
use oxzfs_format::dsl::{DslDatasetPhys, DslDirPhys};
use oxzfs_format::objset::ObjsetPhys;
use oxzfs_format::zil as fz;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// A dedup table copy the table phase read: the table's checksum function, the block's
/// checksum and its first DVA (vdev, offset).
pub type DdtCopy = (u8, [u64; 4], u64, u64);

pub use crate::dsl_scan::ZB_DESTROYED_OBJSET;

/// DDT_TYPES: the table's one on-disk type (ZAP).
const DDT_TYPES: u64 = 1;
/// zb_level of an objset's root block (-1).
const ZB_ROOT_LEVEL: u64 = u64::MAX;
/// Added to the level of a meta-dnode block so that it sorts before its objects' blocks.
const COMPARE_META_LEVEL: u64 = 0x8000_0000;
/// The meta dnode's block size in sectors that a bookmark is compared as (DNODE_BLOCK_SHIFT 14).
const META_DBSS: u64 = 1 << (14 - 9);
const SPA_BLKPTRSHIFT: u64 = 7;
const DMU_SPILL_BLKID: u64 = u64::MAX;
/// zb_level of an intent log's blocks and of the blocks its write records name (ZB_ZIL_LEVEL, -2).
const ZB_ZIL_LEVEL: u64 = -2i64 as u64;
use oxzfs_format::objset::{DMU_GROUPUSED_OBJECT, DMU_PROJECTUSED_OBJECT, DMU_USERUSED_OBJECT};
const DMU_OT_DNODE: u8 = 10;
const DMU_OT_OBJSET: u8 = 11;
const DMU_OT_DSL_DATASET: u8 = 16;
const DNODE_FLAG_SPILL_BLKPTR: u8 = 1 << 2;
/// The first pool version with $ORIGIN (SPA_VERSION_DSL_SCRUB).
const SPA_VERSION_DSL_SCRUB: u64 = 11;

/// zbookmark_phys_t: objset, object, level (an int64: -1 is an objset's root), blkid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Zb {
    pub objset: u64,
    pub object: u64,
    pub level: u64,
    pub blkid: u64,
}

impl Zb {
    pub fn from_words(w: [u64; 4]) -> Zb {
        Zb { objset: w[0], object: w[1], level: w[2], blkid: w[3] }
    }

    pub fn words(&self) -> [u64; 4] {
        [self.objset, self.object, self.level, self.blkid]
    }

    pub fn is_zero(&self) -> bool {
        *self == Zb::default()
    }
}

/// What the walk knows of the dnode whose blocks it visits (dn_datablkszsec, dn_indblkshift).
#[derive(Clone, Copy)]
struct Dn {
    dbss: u64,
    ibs: u8,
}

/// BP_SPANB: level-0 blocks under one block of `level` (0 when the shift leaves 64 bits, as
/// the C shift would give garbage there anyway).
fn spanb(ibs: u8, level: u64) -> u64 {
    let per = (ibs as u64).wrapping_sub(SPA_BLKPTRSHIFT);
    match per.checked_mul(level) {
        Some(s) if s < 64 => 1u64 << s,
        _ => 0,
    }
}

/// zbookmark_compare: where `a` (of a dnode of `dbss1` sectors and indirect shift `ibs1`) and
/// `b` fall in the walk's order; meta-dnode blocks count as the first object they hold, before
/// that object's own blocks.
fn zb_compare(dbss1: u64, ibs1: u8, dbss2: u64, ibs2: u8, a: &Zb, b: &Zb) -> Ordering {
    if a.object == b.object && a.level == b.level && a.blkid == b.blkid {
        return Ordering::Equal;
    }
    let canon = |dbss: u64, ibs: u8, z: &Zb| {
        let l0 = z.blkid.wrapping_mul(spanb(ibs, z.level));
        if z.object == 0 {
            (l0.wrapping_mul(dbss), 0, z.level.wrapping_add(COMPARE_META_LEVEL))
        } else {
            (z.object, l0, z.level)
        }
    };
    let (ao, al0, alev) = canon(dbss1, ibs1, a);
    let (bo, bl0, blev) = canon(dbss2, ibs2, b);
    ao.cmp(&bo).then(al0.cmp(&bl0)).then(blev.cmp(&alev))
}

/// zbookmark_subtree_completed: a walk stopped at `last` has visited all of `root`'s subtree.
fn subtree_completed(dn: Option<Dn>, root: &Zb, last: &Zb) -> bool {
    let Some(dn) = dn else { return false };
    let next = Zb { blkid: root.blkid.wrapping_add(1), ..*root };
    zb_compare(dn.dbss, dn.ibs, META_DBSS, 0, &next, last) != Ordering::Greater
}

/// zbookmark_subtree_tbd: `root` is at or after `last`.
fn subtree_tbd(dn: Option<Dn>, root: &Zb, last: &Zb) -> bool {
    let Some(dn) = dn else { return false };
    zb_compare(dn.dbss, dn.ibs, META_DBSS, 0, root, last) != Ordering::Less
}

/// One turn of a scan's walk: its position in and out (`bookmark`, `cur_*_txg`, `queue`),
/// what it reads with, and when to stop.
pub struct ScanWalk<'a> {
    pub spa: &'a Arc<Spa>,
    pub mode: &'a ReadMode,
    pub min_txg: u64,
    pub max_txg: u64,
    pub cur_min_txg: u64,
    pub cur_max_txg: u64,
    /// scn_bookmark: not zero while the walk goes to where the last one stopped; where this one
    /// stopped when it returns unfinished.
    pub bookmark: Zb,
    /// The datasets still to visit, with the txg each was queued with (scn_queue).
    pub queue: BTreeMap<u64, u64>,
    /// Asked at each block where the walk may stop, once it visited a block this turn.
    pub stop: &'a dyn Fn() -> bool,
    /// Hears of each block read: its bookmark and block pointer, whether a copy verified.
    pub progress: &'a mut dyn FnMut(&Zb, &BlockPointer, bool),
    /// The sorted scan's queues (`dsl_scan_queue`): when set, the blocks to read go there
    /// instead of being read now (dsl_scan_enqueue), except gang blocks.
    pub sink: Option<&'a mut dyn FnMut(&Zb, &BlockPointer)>,
    /// scn_ddt_class_max, and scn_ddt_bookmark (class, type, checksum, cursor): the table
    /// phase is under way while the bookmark's class is at most the class max.
    pub ddt_class_max: u64,
    pub ddt_bookmark: [u64; 4],
    /// The copies the table phase of this process read (kept across turns by the caller).
    pub ddt_read: Option<&'a mut HashSet<DdtCopy>>,
    suspending: bool,
    visited: u64,
}

impl<'a> ScanWalk<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spa: &'a Arc<Spa>,
        mode: &'a ReadMode,
        phys: &oxzfs_format::dsl::DslScanPhys,
        queue: BTreeMap<u64, u64>,
        stop: &'a dyn Fn() -> bool,
        progress: &'a mut dyn FnMut(&Zb, &BlockPointer, bool),
    ) -> ScanWalk<'a> {
        ScanWalk {
            spa,
            mode,
            min_txg: phys.min_txg,
            max_txg: phys.max_txg,
            cur_min_txg: phys.cur_min_txg,
            cur_max_txg: phys.cur_max_txg,
            bookmark: Zb::from_words(phys.bookmark),
            queue,
            stop,
            progress,
            sink: None,
            ddt_class_max: phys.ddt_class_max,
            ddt_bookmark: phys.ddt_bookmark,
            ddt_read: None,
            suspending: false,
            visited: 0,
        }
    }

    /// dsl_scan_visit: walk on from the bookmark; true when the walk reached its end.
    pub fn visit(&mut self) -> bool {
        let mos = self.spa.mos();
        if self.ddt_bookmark[0] <= self.ddt_class_max {
            self.cur_min_txg = self.min_txg;
            self.cur_max_txg = self.max_txg;
            self.visit_ddt(&mos);
            if self.suspending {
                return false;
            }
        }
        if self.bookmark.objset == 0 {
            self.cur_min_txg = self.min_txg;
            self.cur_max_txg = self.max_txg;
            let rootbp = mos.bp.clone();
            self.visit_rootbp(0, &rootbp);
            if self.suspending {
                return false;
            }
            match origin_snap(&mos) {
                Some(o) if self.spa.version() >= SPA_VERSION_DSL_SCRUB => self.visitds(&mos, o),
                _ => self.enqueue_chains(&mos),
            }
            if self.suspending {
                return false;
            }
        } else if self.bookmark.objset != ZB_DESTROYED_OBJSET {
            self.visitds(&mos, self.bookmark.objset);
            if self.suspending {
                return false;
            }
        }
        self.bookmark = Zb::default();
        while let Some((dsobj, txg)) = self.queue.pop_first() {
            let Some(ds) = ds_phys(&mos, dsobj) else { continue };
            let from = if txg != 0 { txg } else { ds.prev_snap_txg };
            self.cur_min_txg = self.min_txg.max(from);
            self.cur_max_txg = if ds.num_children != 0 { self.max_txg.min(ds.creation_txg) } else { self.max_txg };
            self.visitds(&mos, dsobj);
            if self.suspending {
                return false;
            }
        }
        self.bookmark = Zb { objset: ZB_DESTROYED_OBJSET, ..Zb::default() };
        true
    }

    /// dsl_scan_ddt: the table's entries from the DDT bookmark on, class by class (type, then
    /// checksum function within it), each ZAP in cursor order; each copy of an entry born by
    /// max_txg read (dsl_scan_ddt_entry), with the zero bookmark. Stops between entries.
    fn visit_ddt(&mut self, mos: &Objset) {
        use oxzfs_format::ddt::{ddt_object_name, decode_phys, DdtClass, DdtKey};
        let [mut class, mut typ, mut cks, mut cursor] = self.ddt_bookmark;
        while class <= self.ddt_class_max && (class as usize) < DdtClass::ALL.len() {
            while typ < DDT_TYPES {
                while cks < oxzfs_format::checksum::ZIO_CHECKSUM_FUNCTIONS as u64 {
                    let name = ddt_object_name(oxzfs_format::checksum::checksum_name(cks as u8), DdtClass::ALL[class as usize]);
                    let obj = crate::zap::zap_lookup_u64(mos, 1, &name).ok().flatten().unwrap_or(0);
                    let max_txg = self.max_txg;
                    let walked = match obj {
                        0 => Ok(true),
                        _ => crate::zap::Zap::open(mos, obj).and_then(|z| {
                            z.walk_from_cursor(mos, cursor, |e, next| {
                                if let (Ok(key), Ok(phys)) = (DdtKey::from_zap_key(&e.name), decode_phys(&e.value)) {
                                    for p in phys.iter().filter(|p| p.phys_birth != 0 && p.phys_birth <= max_txg) {
                                        let bp = key.bp(cks as u8, p);
                                        if let Some(read) = self.ddt_read.as_deref_mut() {
                                            read.insert((cks as u8, bp.cksum, bp.dva[0].vdev, bp.dva[0].offset));
                                        }
                                        self.read_or_queue(&bp, &Zb::default());
                                    }
                                }
                                self.visited += 1;
                                self.ddt_bookmark = [class, typ, cks, next];
                                !(self.stop)()
                            })
                        }),
                    };
                    match walked {
                        Ok(true) => {}
                        Ok(false) => {
                            self.suspending = true;
                            return;
                        }
                        // A table object that does not read: an error of its MOS object; the
                        // walk goes on with the next.
                        Err(_) => self.spa.record_error(0, obj, 0, 0),
                    }
                    cursor = 0;
                    cks += 1;
                }
                cks = 0;
                typ += 1;
            }
            typ = 0;
            class += 1;
        }
        self.ddt_bookmark = [class, 0, 0, 0];
    }

    /// Whether the table phase of this walk read `bp` (a dedup block) already.
    fn ddt_scrubbed(&self, bp: &BlockPointer) -> bool {
        let Some(read) = self.ddt_read.as_deref() else { return false };
        bp.dedup && read.contains(&(bp.checksum, bp.cksum, bp.dva[0].vdev, bp.dva[0].offset))
    }

    /// dsl_scan_visitds: dataset `dsobj`'s tree, then its next snapshot and clones queued.
    fn visitds(&mut self, mos: &Objset, dsobj: u64) {
        let Some(ds) = ds_phys(mos, dsobj) else { return };
        if self.cur_min_txg >= self.max_txg {
            return; // created after the scan began: nothing of it, nor after it, to read
        }
        // Only a head's intent log is the dataset's (a snapshot's header may name the same
        // chain); $ORIGIN has none. Visited again by a walk resumed inside the dataset, as
        // OpenZFS's dsl_scan_visitds does (the log's blocks have no place in the bookmark's
        // order).
        if ds.num_children == 0 {
            self.visit_zil(dsobj, &ds.bp);
        }
        self.visit_rootbp(dsobj, &ds.bp);
        if self.suspending {
            return;
        }
        if ds.next_snap_obj != 0 {
            self.queue.insert(ds.next_snap_obj, ds.creation_txg);
        }
        if ds.num_children > 1 {
            let listed = (ds.next_clones_obj != 0).then(|| crate::zap::zap_list_u64(mos, ds.next_clones_obj).ok()).flatten();
            match listed.filter(|l| l.len() as u64 == ds.num_children - 1) {
                Some(clones) => {
                    for (name, _) in clones {
                        if let Ok(c) = u64::from_str_radix(name.trim_end_matches(char::from(0)), 16) {
                            self.queue.insert(c, ds.creation_txg);
                        }
                    }
                }
                None => {
                    // enqueue_clones_cb: the first dataset of each chain that starts here.
                    for (c, cp) in all_datasets(mos) {
                        if cp.prev_snap_obj == dsobj && c != ds.next_snap_obj {
                            self.queue.insert(c, ds.creation_txg);
                        }
                    }
                }
            }
        }
    }

    /// enqueue_cb over every head (pools without $ORIGIN): the first snapshot of its chain.
    fn enqueue_chains(&mut self, mos: &Objset) {
        let all: BTreeMap<u64, DslDatasetPhys> = all_datasets(mos).into_iter().collect();
        'heads: for (&obj, ds) in all.iter().filter(|(_, d)| d.num_children == 0) {
            let (mut cur, mut phys) = (obj, ds);
            while phys.prev_snap_obj != 0 {
                match all.get(&phys.prev_snap_obj) {
                    Some(prev) if prev.next_snap_obj == cur => {
                        cur = phys.prev_snap_obj;
                        phys = prev;
                    }
                    // A clone: its chain is queued from its origin.
                    _ => continue 'heads,
                }
            }
            self.queue.insert(cur, phys.prev_snap_txg);
        }
    }

    /// dsl_scan_zil: a claimed intent log (a crash's chain, claimed at import and not yet
    /// replayed): each log block up to the claimed sequence read, every copy checked against
    /// the chain's embedded checksum (a bad copy rewritten from a good one; checksum failures
    /// not counted, an I/O error counted and logged as objset:0:-2:seq), and the blocks its indirect write records name (born in or after the
    /// claim txg) scanned as any other block. A chain never claimed is not visited.
    fn visit_zil(&mut self, dsobj: u64, bp: &BlockPointer) {
        if bp.is_hole() {
            return;
        }
        let Ok(os) = Objset::open(self.spa, bp) else { return };
        let zh = os.phys.zil_header.clone();
        if zh.claim_txg == 0 || zh.log.is_hole() {
            return;
        }
        let plain = ZioCtx { root: &self.spa.root_vdev, salt: &self.spa.checksum_salt, mode: &crate::vdev::READ_PLAIN };
        let chain = crate::zil::parse_chain(&plain, &zh.log, 1 << 20);
        let lr_limit = if zh.flags & fz::ZIL_CLAIM_LR_SEQ_VALID != 0 { zh.claim_lr_seq } else { u64::MAX };
        let ctx = ZioCtx { root: &self.spa.root_vdev, salt: &self.spa.checksum_salt, mode: self.mode };
        for (lbp, recs) in &chain.blocks {
            let seq = lbp.cksum[fz::ZIL_ZC_SEQ];
            if seq > zh.claim_blk_seq {
                break;
            }
            if self.in_range(lbp) {
                let zb = Zb { objset: dsobj, object: 0, level: ZB_ZIL_LEVEL, blkid: seq };
                let slim = lbp.checksum == oxzfs_format::checksum::ZIO_CHECKSUM_ZILOG2;
                let verify = |d: &[u8]| fz::decode_log_block_of(d, lbp.cksum, slim, lbp.encrypted).is_ok();
                // Speculative, as OpenZFS reads ZB_ZIL_LEVEL: the claimed chain ends in a
                // block allocated and never written, whose checksum fails; only an I/O error
                // is one.
                let r = crate::vdev::speculative(|| zio::read_dva(&ctx, &lbp.dva[0], lbp.psize, &verify));
                let ok = !matches!(r, Err(ref e) if !matches!(e, crate::ZfsError::Checksum { .. }));
                if !ok {
                    self.spa.record_error(zb.objset, zb.object, zb.level, zb.blkid);
                }
                (self.progress)(&zb, lbp, ok);
            }
            for r in recs.iter().take_while(|r| r.common.seq <= lr_limit) {
                if let fz::LrBody::Write { foid, offset, blkptr, .. } = &r.body {
                    if !blkptr.is_hole() && blkptr.birth >= zh.claim_txg && blkptr.lsize > 0 {
                        let zb = Zb { objset: dsobj, object: *foid, level: ZB_ZIL_LEVEL, blkid: offset / blkptr.lsize };
                        self.scan_block(blkptr, &zb);
                    }
                }
            }
        }
    }

    /// Whether the scan reads `bp` (dsl_scan_scrub_cb): born after cur_min_txg, and its
    /// copies born in the scan's range.
    fn in_range(&self, bp: &BlockPointer) -> bool {
        let birth = bp.physical_birth();
        !bp.is_hole() && !bp.embedded && bp.birth > self.cur_min_txg && birth > self.min_txg && birth <= self.max_txg
    }

    /// Read (or queue, with a sink) one block the scan visits outside the trees: an indirect
    /// write of an intent log.
    fn scan_block(&mut self, bp: &BlockPointer, zb: &Zb) {
        if !self.in_range(bp) {
            return;
        }
        self.read_or_queue(bp, zb);
    }

    fn visit_rootbp(&mut self, objset: u64, bp: &BlockPointer) {
        let zb = Zb { objset, object: 0, level: ZB_ROOT_LEVEL, blkid: 0 };
        self.visitbp(bp, &zb, None);
    }

    /// dsl_scan_check_suspend.
    fn check_suspend(&mut self, zb: &Zb) -> bool {
        if (zb.object as i64) < 0 {
            return false; // the accounting objects are never stopped in
        }
        if self.suspending {
            return true;
        }
        if !self.bookmark.is_zero() || (zb.level != 0 && zb.level != ZB_ROOT_LEVEL) {
            return false;
        }
        if self.visited == 0 || !(self.stop)() {
            return false;
        }
        self.bookmark = if zb.level == ZB_ROOT_LEVEL { Zb { objset: zb.objset, ..Zb::default() } } else { *zb };
        self.suspending = true;
        true
    }

    /// dsl_scan_check_resume: true when `zb`'s subtree was walked before the bookmark.
    fn check_resume(&mut self, dn: Option<Dn>, zb: &Zb) -> bool {
        if !self.bookmark.is_zero() && (zb.object as i64) >= 0 {
            if subtree_completed(dn, zb, &self.bookmark) {
                return true;
            }
            if subtree_tbd(dn, zb, &self.bookmark) {
                self.bookmark = Zb::default();
            }
        }
        false
    }

    /// dsl_scan_visitbp.
    fn visitbp(&mut self, bp: &BlockPointer, zb: &Zb, dn: Option<Dn>) {
        if self.check_suspend(zb) || self.check_resume(dn, zb) {
            return;
        }
        self.visited += 1;
        if bp.is_hole() || bp.birth <= self.cur_min_txg {
            return;
        }
        self.recurse(bp, zb, dn);
        // Stopped below it: it is read when a later walk finishes its subtree (OpenZFS reads
        // it at each stop below it, and again then).
        if self.suspending || bp.physical_birth() > self.cur_max_txg {
            return;
        }
        // Read by the table phase (dsl_scan_visitbp's ddt_class_contains).
        if self.ddt_scrubbed(bp) {
            return;
        }
        // dsl_scan_scrub_cb: only copies born in the scan's range are read.
        let birth = bp.physical_birth();
        if bp.embedded || birth <= self.min_txg || birth > self.max_txg {
            return;
        }
        self.read_or_queue(bp, zb);
    }

    /// A block the scan reads: to the sorted scan's queues (gang blocks excepted), else read
    /// now (every copy, bad ones rewritten; an error counted and logged).
    fn read_or_queue(&mut self, bp: &BlockPointer, zb: &Zb) {
        if let Some(sink) = self.sink.as_deref_mut() {
            if !bp.dvas().iter().any(|d| d.gang) {
                sink(zb, bp);
                return;
            }
        }
        let ctx = ZioCtx { root: &self.spa.root_vdev, salt: &self.spa.checksum_salt, mode: self.mode };
        let injected = crate::vdev::inject::data_fault(&self.spa.name, zb.objset, zb.object, zb.level, zb.blkid).is_some();
        let r = if injected { Err(crate::ZfsError::Checksum { context: "injected".into() }) } else { zio::read_physical(&ctx, bp) };
        if r.is_err() {
            self.spa.record_error(zb.objset, zb.object, zb.level, zb.blkid);
        }
        (self.progress)(zb, bp, r.is_ok());
    }

    /// dsl_scan_recurse: the children of an indirect, dnode or objset block.
    fn recurse(&mut self, bp: &BlockPointer, zb: &Zb, dn: Option<Dn>) {
        let descend = bp.level > 0 || bp.typ == DMU_OT_DNODE || bp.typ == DMU_OT_OBJSET;
        if !descend {
            return;
        }
        // Unreadable: the block's own scrub read counts the error.
        let Ok(data) = self.spa.read_bp(bp) else { return };
        if bp.level > 0 {
            let epb = (data.len() / BLKPTR_SIZE) as u64;
            for i in 0..epb {
                if self.suspending {
                    return;
                }
                let at = i as usize * BLKPTR_SIZE;
                let Ok(child) = BlockPointer::decode(&data[at..at + BLKPTR_SIZE], bp.little_endian) else { continue };
                let czb = Zb { objset: zb.objset, object: zb.object, level: zb.level.wrapping_sub(1), blkid: zb.blkid.wrapping_mul(epb).wrapping_add(i) };
                self.visitbp(&child, &czb, dn);
            }
        } else if bp.typ == DMU_OT_DNODE {
            let epb = data.len() / DNODE_SIZE;
            let mut i = 0;
            while i < epb && !self.suspending {
                let Ok(d) = DnodePhys::decode(&data[i * DNODE_SIZE..], bp.little_endian) else {
                    i += 1;
                    continue;
                };
                self.visitdnode(&d, zb.objset, zb.blkid.wrapping_mul(epb as u64).wrapping_add(i as u64));
                i += d.extra_slots as usize + 1;
            }
        } else if let Ok(os) = ObjsetPhys::decode(&data, bp.little_endian) {
            self.visitdnode(&os.meta_dnode, zb.objset, 0);
            if data.len() >= 2048 {
                if data.len() >= 4096 {
                    if let Some(d) = &os.projectused_dnode {
                        self.visitdnode(d, zb.objset, DMU_PROJECTUSED_OBJECT);
                    }
                }
                for (d, obj) in [(&os.groupused_dnode, DMU_GROUPUSED_OBJECT), (&os.userused_dnode, DMU_USERUSED_OBJECT)] {
                    if let Some(d) = d {
                        self.visitdnode(d, zb.objset, obj);
                    }
                }
            }
        }
    }

    /// dsl_scan_visitdnode: a dnode's block pointers, then its spill block.
    fn visitdnode(&mut self, d: &DnodePhys, objset: u64, object: u64) {
        let dn = Some(Dn { dbss: d.datablkszsec as u64, ibs: d.indblkshift });
        let top = (d.nlevels as u64).wrapping_sub(1);
        for (j, bp) in d.blkptr.iter().enumerate().take(d.nblkptr as usize) {
            self.visitbp(bp, &Zb { objset, object, level: top, blkid: j as u64 }, dn);
        }
        if d.flags & DNODE_FLAG_SPILL_BLKPTR != 0 {
            if let Some(sp) = &d.spill {
                self.visitbp(sp, &Zb { objset, object, level: 0, blkid: DMU_SPILL_BLKID }, dn);
            }
        }
    }
}

/// The DSL dataset of MOS object `obj`, if it is one.
fn ds_phys(mos: &Objset, obj: u64) -> Option<DslDatasetPhys> {
    let (dn, le) = mos.dnode_with_order(obj).ok()?;
    if dn.is_free() || dn.bonustype != DMU_OT_DSL_DATASET {
        return None;
    }
    DslDatasetPhys::decode(&dn.bonus, le).ok()
}

/// $ORIGIN@$ORIGIN (dp_origin_snap): the head of the root's "$ORIGIN" child, its previous snapshot.
fn origin_snap(mos: &Objset) -> Option<u64> {
    let root_dir = crate::zap::zap_lookup_u64(mos, 1, "root_dataset").ok()??;
    let dir = |obj: u64| {
        let (dn, le) = mos.dnode_with_order(obj).ok()?;
        DslDirPhys::decode(&dn.bonus, le).ok()
    };
    let od = crate::zap::zap_lookup_u64(mos, dir(root_dir)?.child_dir_zapobj, "$ORIGIN").ok()??;
    let head = ds_phys(mos, dir(od)?.head_dataset_obj)?;
    (head.prev_snap_obj != 0).then_some(head.prev_snap_obj)
}

/// Every DSL dataset of the MOS, by object number.
fn all_datasets(mos: &Objset) -> Vec<(u64, DslDatasetPhys)> {
    (1..mos.max_object()).filter_map(|o| ds_phys(mos, o).map(|d| (o, d))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zb(object: u64, level: u64, blkid: u64) -> Zb {
        Zb { objset: 5, object, level, blkid }
    }

    #[test]
    fn bookmarks_order_as_openzfs_walks() {
        let dn = Dn { dbss: 32, ibs: 17 };
        let lt = |a: Zb, b: Zb| zb_compare(dn.dbss, dn.ibs, dn.dbss, dn.ibs, &a, &b) == Ordering::Less;
        // An indirect block comes before the level-0 blocks below it, which come in blkid order.
        assert!(lt(zb(9, 1, 0), zb(9, 0, 0)));
        assert!(lt(zb(9, 0, 0), zb(9, 0, 1)));
        assert!(lt(zb(9, 0, 1023), zb(9, 1, 1)));
        // The meta dnode's block holding objects 32..63 comes after object 31, before object 32.
        assert!(lt(zb(31, 0, 99), zb(0, 0, 1)));
        assert!(lt(zb(0, 0, 1), zb(32, 0, 0)));
        // A walk stopped at object 40 block 3 is past object 9 and past 40's first blocks.
        let last = zb(40, 0, 3);
        assert!(subtree_completed(Some(dn), &zb(9, 2, 0), &last));
        assert!(subtree_completed(Some(dn), &zb(40, 0, 2), &last));
        assert!(!subtree_completed(Some(dn), &zb(40, 1, 0), &last));
        assert!(!subtree_completed(Some(dn), &zb(40, 0, 3), &last));
        assert!(subtree_tbd(Some(dn), &zb(40, 0, 3), &last));
        assert!(!subtree_tbd(Some(dn), &zb(40, 1, 0), &last));
        // An objset's root is never passed over.
        assert!(!subtree_completed(None, &zb(0, ZB_ROOT_LEVEL, 0), &last));
    }
}
