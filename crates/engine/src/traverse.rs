//! traverse: visit every block of a pool once, and `zdb`'s block statistics built on it.
//!
//! The walk is OpenZFS's traverse_pool as zdb uses it (pre-order, keep going on errors):
//! 1. the MOS from the uberblock's root bp;
//! 2. every MOS object whose bonus is a DSL dataset: its objset, skipping blocks born at or
//!    before the dataset's `prev_snap_txg` (those belong to, and were counted with, an older
//!    snapshot), and for a head dataset its intent log chain (blocks born before the first txg
//!    a writable import would use — zdb opens read-only);
//! 3. before those, the pool's deferred-free list (`sync_bplist`) and, from pool version 26,
//!    the `free_bpobj` of destroyed datasets, counted as "deferred free".
//! Inside an objset: the objset block → meta dnode (and the user/group/project used dnodes
//! when the objset block is 2K/4K) → dnode blocks → each dnode's block pointers, indirect
//! blocks and spill block. Holes are not counted; embedded bps are counted but not read.
//!
//! The counts are the figures `zdb -bb` prints: bp count, logical, physical and allocated
//! bytes, per object type and level. With checksum verification (-c metadata, -cc all),
//! each counted non-embedded block is read and verified against its bp on every copy path
//! the vdev layer offers; failures are reported and counted, never fatal.
//!
//! The scrub's walk is another one, in OpenZFS's scan order: `dsl_scan_walk`.

use crate::dmu::Objset;
use crate::nicenum::nicenum;
use crate::spa::{self, Spa};
use crate::zio::{self, ZioCtx};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::{BlockPointer, BLKPTR_SIZE};
use oxzfs_format::checksum;
use oxzfs_format::zil;
use oxzfs_format::dnode::{DnodePhys, DNODE_SIZE};
use oxzfs_format::dsl::DslDatasetPhys;
use oxzfs_format::types;
use std::path::PathBuf;
use std::sync::Arc;

/// Number of DMU object types (DMU_OT_NUMTYPES) and zdb's extra rows after them.
pub const DMU_OT_NUMTYPES: usize = 54;
pub const ZDB_OT_DEFERRED: usize = DMU_OT_NUMTYPES;
pub const ZDB_OT_DITTO: usize = DMU_OT_NUMTYPES + 1;
pub const ZDB_OT_OTHER: usize = DMU_OT_NUMTYPES + 2;
pub const ZDB_OT_TOTAL: usize = DMU_OT_NUMTYPES + 3;
/// Level rows: 0..ZB_TOTAL-1 per level, ZB_TOTAL for all levels.
pub const ZB_TOTAL: usize = 32;

const DMU_OT_DNODE: u8 = 10;
const DMU_OT_OBJSET: u8 = 11;
const DMU_OT_DSL_DATASET: u8 = 16;
const DMU_OT_NEWTYPE: u8 = 0x80;
const DNODE_FLAG_SPILL_BLKPTR: u8 = 1 << 2;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStats {
    pub count: u64,
    pub lsize: u64,
    pub psize: u64,
    pub asize: u64,
    pub gangs: u64,
    pub ditto_samevdev: u64,
    pub ditto_same_ms: u64,
}

/// Statistics of a full traversal.
pub struct PoolBlockStats {
    /// [level or ZB_TOTAL][type or ZDB_OT_* ]
    pub by_type: Vec<Vec<BlockStats>>,
    pub embedded: [u64; 3],
    /// Blocks that failed to read or verify: (objset, object, level, blkid, message).
    pub errors: Vec<(u64, u64, i64, u64, String)>,
    /// Encrypted blocks decrypted and authenticated by a loaded key (verification with
    /// `zdb -K`), and objsets whose MACs were checked.
    pub decrypted: u64,
    pub objset_macs: u64,
    pub psize_hist: [u64; 64],
    pub lsize_hist: [u64; 64],
    pub asize_hist: [u64; 64],
    pub psize_len: [u64; 64],
    pub lsize_len: [u64; 64],
    pub asize_len: [u64; 64],
}

impl PoolBlockStats {
    fn new() -> Self {
        PoolBlockStats {
            by_type: vec![vec![BlockStats::default(); ZDB_OT_TOTAL + 1]; ZB_TOTAL + 1],
            embedded: [0; 3],
            errors: Vec::new(),
            decrypted: 0,
            objset_macs: 0,
            psize_hist: [0; 64],
            lsize_hist: [0; 64],
            asize_hist: [0; 64],
            psize_len: [0; 64],
            lsize_len: [0; 64],
            asize_len: [0; 64],
        }
    }
    pub fn total(&self) -> BlockStats {
        self.by_type[ZB_TOTAL][ZDB_OT_TOTAL]
    }
}

/// How much to verify while traversing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    None,
    Metadata,
    All,
}

struct Walker<'a> {
    spa: &'a Arc<Spa>,
    verify: Verify,
    stats: PoolBlockStats,
    /// metaslab_shift per top-level vdev, for "dittoed blocks in same metaslab".
    ms_shift: Vec<u64>,
}

fn highbit(x: u64) -> usize {
    if x == 0 {
        0
    } else {
        64 - x.leading_zeros() as usize
    }
}

impl<'a> Walker<'a> {
    fn count(&mut self, bp: &BlockPointer, typ: usize) {
        let asize: u64 = bp.asize_total();
        let gangs = bp.dvas().iter().filter(|d| !d.is_empty() && d.gang).count() as u64;
        let ndvas = if bp.embedded { 0 } else { bp.ndvas() };
        let (same_vdev, same_ms) = match ndvas {
            2 => {
                let s = bp.dva[0].vdev == bp.dva[1].vdev;
                (s, s && self.same_ms(bp.dva[0].vdev, bp.dva[0].offset, bp.dva[1].offset))
            }
            3 => {
                let (a, b, c) = (bp.dva[0].vdev, bp.dva[1].vdev, bp.dva[2].vdev);
                let eq = (a == b) as u32 + (a == c) as u32 + (b == c) as u32;
                let ms = if eq == 0 {
                    false
                } else if a == b && self.same_ms(a, bp.dva[0].offset, bp.dva[1].offset) {
                    true
                } else if a == c && self.same_ms(a, bp.dva[0].offset, bp.dva[2].offset) {
                    true
                } else {
                    b == c && self.same_ms(b, bp.dva[1].offset, bp.dva[2].offset)
                };
                (eq != 0, ms)
            }
            _ => (false, false),
        };
        let level = (bp.level as usize).min(ZB_TOTAL - 1);
        for i in 0..4 {
            let l = if i < 2 { level } else { ZB_TOTAL };
            let t = if i & 1 == 1 { typ } else { ZDB_OT_TOTAL };
            let zb = &mut self.stats.by_type[l][t];
            zb.asize += asize;
            zb.lsize += bp.lsize;
            // zdb counts an embedded bp's physical size as 0 (BP_GET_PSIZE).
            zb.psize += if bp.embedded { 0 } else { bp.psize };
            zb.count += 1;
            zb.gangs += gangs;
            zb.ditto_samevdev += same_vdev as u64;
            zb.ditto_same_ms += same_ms as u64;
        }
        if bp.embedded {
            let e = (bp.etype as usize).min(2);
            self.stats.embedded[e] += 1;
            return;
        }
        let s = &mut self.stats;
        let b = highbit(bp.psize).saturating_sub(1).min(63); // not reached for embedded bps
        s.psize_hist[b] += 1;
        s.psize_len[b] += bp.psize;
        let b = highbit(bp.lsize).saturating_sub(1).min(63);
        s.lsize_hist[b] += 1;
        s.lsize_len[b] += bp.lsize;
        let b = highbit(asize).saturating_sub(1).min(63);
        s.asize_hist[b] += 1;
        s.asize_len[b] += asize;
    }

    fn same_ms(&self, vdev: u64, a: u64, b: u64) -> bool {
        match self.ms_shift.get(vdev as usize) {
            Some(&sh) if sh > 0 && sh < 64 => (a >> sh) == (b >> sh),
            _ => false,
        }
    }

    fn error(&mut self, objset: u64, object: u64, level: i64, blkid: u64, e: &ZfsError) {
        if self.stats.errors.len() < 100_000 {
            self.stats.errors.push((objset, object, level, blkid, e.to_string()));
        }
    }

    fn ctx(&self) -> ZioCtx<'_> {
        ZioCtx::new(&self.spa.root_vdev, &self.spa.checksum_salt)
    }

    /// Visit one bp (pre-order): count, verify if asked, descend.
    fn visit_bp(&mut self, bp: &BlockPointer, min_txg: u64, objset: u64, object: u64, blkid: u64) {
        if bp.is_hole() && !bp.embedded {
            return;
        }
        if bp.birth <= min_txg {
            return;
        }
        let typ = if bp.typ & DMU_OT_NEWTYPE != 0 || bp.typ as usize >= DMU_OT_NUMTYPES {
            ZDB_OT_OTHER
        } else {
            bp.typ as usize
        };
        let is_metadata = bp.level > 0 || types::ot_is_metadata(bp.typ);
        self.count(bp, typ);
        if !bp.embedded && (self.verify == Verify::All || (self.verify == Verify::Metadata && is_metadata)) {
            // With the dataset's key loaded, an encrypted block is decrypted too: its MAC
            // checks what the checksum (of the ciphertext) cannot.
            let keyed = bp.is_encrypted_data() && self.spa.keystore.dataset(objset).is_some();
            let r = if keyed { self.spa.read_bp_for(bp, objset).map(|_| ()) } else { zio::read_physical(&self.ctx(), bp).map(|_| ()) };
            match r {
                Ok(()) if keyed => self.stats.decrypted += 1,
                Ok(()) => {}
                Err(e) => self.error(objset, object, bp.level as i64, blkid, &e),
            }
        }
        let descend = bp.level > 0 || bp.typ == DMU_OT_DNODE || bp.typ == DMU_OT_OBJSET;
        if !descend {
            return;
        }
        let data = match self.spa.read_bp(bp) {
            Ok(d) => d,
            Err(e) => {
                // Already reported when verifying this block.
                if self.verify == Verify::None || (!is_metadata && self.verify == Verify::Metadata) {
                    self.error(objset, object, bp.level as i64, blkid, &e);
                }
                return;
            }
        };
        if bp.level > 0 {
            let n = data.len() / BLKPTR_SIZE;
            for i in 0..n {
                match BlockPointer::decode(&data[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE], bp.little_endian) {
                    Ok(child) => {
                        let cblk = blkid.saturating_mul(n as u64).saturating_add(i as u64);
                        self.visit_bp(&child, min_txg, objset, object, cblk)
                    }
                    Err(e) => self.error(objset, object, bp.level as i64 - 1, blkid, &ZfsError::from(e)),
                }
            }
        } else if bp.typ == DMU_OT_DNODE {
            let per_block = data.len() / DNODE_SIZE;
            let mut i = 0;
            while i < per_block {
                let obj = blkid * per_block as u64 + i as u64;
                match DnodePhys::decode(&data[i * DNODE_SIZE..], bp.little_endian) {
                    Ok(dn) => {
                        let slots = dn.slots().max(1);
                        if !dn.is_free() {
                            self.visit_dnode(&dn, min_txg, objset, obj);
                        }
                        i += slots;
                    }
                    Err(e) => {
                        self.error(objset, obj, -1, 0, &ZfsError::from(e));
                        // Skip the slots the dnode claims, so its interior slots are not
                        // misread as dnodes of their own.
                        let extra = data.get(i * DNODE_SIZE + 12).copied().unwrap_or(0) as usize;
                        i += 1 + if extra < 32 { extra } else { 0 };
                    }
                }
            }
        } else {
            // An objset block.
            match oxzfs_format::objset::ObjsetPhys::decode(&data, bp.little_endian) {
                Ok(os) => {
                    self.visit_dnode(&os.meta_dnode, min_txg, objset, 0);
                    if data.len() >= 2048 {
                        if data.len() >= 4096 {
                            if let Some(d) = &os.projectused_dnode {
                                self.visit_dnode(d, min_txg, objset, u64::MAX - 2);
                            }
                        }
                        if let Some(d) = &os.groupused_dnode {
                            self.visit_dnode(d, min_txg, objset, u64::MAX - 1);
                        }
                        if let Some(d) = &os.userused_dnode {
                            self.visit_dnode(d, min_txg, objset, u64::MAX);
                        }
                    }
                }
                Err(e) => self.error(objset, 0, -1, 0, &ZfsError::from(e)),
            }
        }
    }

    fn visit_dnode(&mut self, dn: &DnodePhys, min_txg: u64, objset: u64, object: u64) {
        for (i, bp) in dn.blkptr.iter().enumerate() {
            self.visit_bp(bp, min_txg, objset, object, i as u64);
        }
        if dn.flags & DNODE_FLAG_SPILL_BLKPTR != 0 {
            if let Some(sp) = &dn.spill {
                self.visit_bp(sp, min_txg, objset, object, u64::MAX);
            }
        }
    }

    /// Walk an intent log chain as a read-only zil_parse does, counting each log block.
    fn visit_zil(&mut self, head: &BlockPointer, claim_txg: u64, objset: u64) {
        let first_txg = self.spa.txg() + 1;
        let mut bp = head.clone();
        for _ in 0..1_000_000 {
            if bp.is_hole() {
                return;
            }
            if claim_txg == 0 && bp.birth >= first_txg {
                return;
            }
            let typ = (bp.typ as usize).min(ZDB_OT_OTHER);
            self.count(&bp, typ);
            match self.read_zil_block(&bp, objset) {
                Some(next) => bp = next,
                None => return,
            }
        }
    }

    /// The next bp of a log block's chain, or None when the block does not verify (end of log:
    /// a stale or never-written block fails its embedded checksum, see `oxzfs_format::zil`).
    /// A block of an encrypted dataset whose key is loaded is decrypted too (its MAC checked).
    fn read_zil_block(&mut self, bp: &BlockPointer, objset: u64) -> Option<BlockPointer> {
        let ctx = self.ctx();
        let data = zio::read_dva(&ctx, &bp.dva[0], bp.psize, &|_| true).ok()?;
        let slim = bp.checksum == checksum::ZIO_CHECKSUM_ZILOG2;
        let next = zil::decode_log_block_of(&data, bp.cksum, slim, bp.encrypted).ok().map(|b| b.next)?;
        if bp.is_encrypted_data() && self.verify != Verify::None {
            if let Some(key) = self.spa.keystore.dataset(objset) {
                match crate::spa_keystore::decrypt(&key, bp, data) {
                    Ok(_) => self.stats.decrypted += 1,
                    Err(e) => self.error(objset, 0, -2, bp.cksum[zil::ZIL_ZC_SEQ], &e),
                }
            }
        }
        Some(next)
    }

    /// Count every bp of a bpobj (and its sub-bpobjs) as deferred frees.
    fn count_bpobj(&mut self, mos: &Objset, obj: u64, depth: usize) {
        if depth > 16 || obj == 0 {
            return;
        }
        let Ok((dn, le)) = mos.dnode_with_order(obj) else { return };
        let w = |i: usize| -> u64 {
            dn.bonus
                .get(i * 8..i * 8 + 8)
                .map(|b| {
                    let a: [u8; 8] = b.try_into().unwrap();
                    if le {
                        u64::from_le_bytes(a)
                    } else {
                        u64::from_be_bytes(a)
                    }
                })
                .unwrap_or(0)
        };
        let num = w(0);
        let end = num.saturating_mul(BLKPTR_SIZE as u64);
        let chunk = 1u64 << 20;
        let mut off = 0;
        while off < end {
            let n = chunk.min(end - off);
            match mos.read(&dn, off, n) {
                Ok(buf) => {
                    for i in 0..buf.len() / BLKPTR_SIZE {
                        if let Ok(bp) = BlockPointer::decode(&buf[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE], le) {
                            if !bp.is_hole() || bp.embedded {
                                self.count(&bp, ZDB_OT_DEFERRED);
                            }
                        }
                    }
                }
                Err(e) => {
                    self.error(0, obj, 0, off / BLKPTR_SIZE as u64, &e);
                    return;
                }
            }
            off += n;
        }
        if dn.bonus.len() >= 48 {
            let (subobjs, nsub) = (w(4), w(5));
            if subobjs != 0 && nsub > 0 {
                if let Ok((sdn, _)) = mos.dnode_with_order(subobjs) {
                    if let Ok(buf) = mos.read(&sdn, 0, nsub.min(1 << 20) * 8) {
                        for i in 0..buf.len() / 8 {
                            let a: [u8; 8] = buf[i * 8..i * 8 + 8].try_into().unwrap();
                            let sub = if le { u64::from_le_bytes(a) } else { u64::from_be_bytes(a) };
                            self.count_bpobj(mos, sub, depth + 1);
                        }
                    }
                }
            }
        }
    }
}

/// Traverse the whole pool, counting as zdb -b does.
pub fn block_stats(spa: &Arc<Spa>, verify: Verify) -> Result<PoolBlockStats> {
    let mut w = Walker::new(spa, verify);
    let mos = spa.mos();
    // Deferred frees first, as zdb does.
    if let Ok(Some(obj)) = crate::zap::zap_lookup_u64(&mos, 1, "sync_bplist") {
        w.count_bpobj(&mos, obj, 0);
    }
    if spa.version() >= 26 {
        if let Ok(Some(obj)) = crate::zap::zap_lookup_u64(&mos, 1, "free_bpobj") {
            w.count_bpobj(&mos, obj, 0);
        }
    }
    w.walk(&mos, &spa.rootbp);
    Ok(w.stats)
}

impl<'a> Walker<'a> {
    fn new(spa: &'a Arc<Spa>, verify: Verify) -> Walker<'a> {
        let ms_shift = spa.root_vdev.children.iter().map(|v| v.metaslab_shift).collect();
        Walker { spa, verify, stats: PoolBlockStats::new(), ms_shift }
    }

    /// The MOS from `rootbp`, then every dataset (its intent log, then its objset).
    fn walk(&mut self, mos: &Objset, rootbp: &BlockPointer) {
        let spa = self.spa;
        self.visit_bp(rootbp, 0, 0, 0, 0);
        let md = mos.phys.meta_dnode.clone();
        let per_block = (md.data_block_size() / DNODE_SIZE as u64).max(1);
        for blkid in 0..=md.maxblkid {
            let block = match mos.read_block(&md, 0, blkid) {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(_) => continue, // counted as an error by the MOS walk
            };
            let le = match mos.block_pointer(&md, 0, blkid) {
                Ok(Some(bp)) => bp.little_endian,
                _ => true,
            };
            let mut i = 0usize;
            while i < per_block as usize {
                let obj = blkid * per_block + i as u64;
                let Ok(dn) = DnodePhys::decode(&block[i * DNODE_SIZE..], le) else {
                    i += 1;
                    continue;
                };
                i += dn.slots().max(1);
                if dn.is_free() || dn.bonustype != DMU_OT_DSL_DATASET {
                    continue;
                }
                let Ok(ds) = DslDatasetPhys::decode(&dn.bonus, le) else { continue };
                let min_txg = ds.prev_snap_txg;
                let is_snapshot = ds.num_children != 0;
                if !is_snapshot && !ds.bp.is_hole() {
                    if let Ok(os) = Objset::open_id(spa, &ds.bp, obj) {
                        let zh = os.phys.zil_header.clone();
                        self.visit_zil(&zh.log, zh.claim_txg, obj);
                    }
                }
                if ds.bp.encrypted && self.verify != Verify::None {
                    match crate::dsl_crypt::verify_objset(spa, obj, &ds.bp) {
                        Ok(true) => self.stats.objset_macs += 1,
                        Ok(false) => {}
                        Err(e) => self.error(obj, 0, -1, 0, &e),
                    }
                }
                self.visit_bp(&ds.bp, min_txg, obj, 0, 0);
            }
        }
    }
}

/// Print what zdb -b/-bb prints; returns zdb's exit code (0 ok, 3 errors).
pub fn print_block_stats(spa: &Arc<Spa>, s: &PoolBlockStats, verbosity: u32, verify: Verify, out: &mut String) -> i32 {
    use std::fmt::Write;
    let c = match verify {
        Verify::None => 0,
        Verify::Metadata => 1,
        Verify::All => 2,
    };
    let _ = write!(
        out,
        "\nTraversing all blocks {}{}{}...\n\n",
        if c > 0 { "to verify " } else { "" },
        if c == 1 { "metadata " } else { "" },
        if c > 0 { "checksums " } else { "" },
    );
    if !s.errors.is_empty() {
        for (os, obj, lvl, blk, msg) in s.errors.iter().take(1000) {
            let _ = writeln!(out, "zdb_blkptr_cb: Got error reading <{os}, {obj}, {lvl}, {blk:x}> -- skipping: {msg}");
        }
        let _ = writeln!(out, "\nError counts:\n\n\t{:>5}  {}", "errno", "count");
        let _ = writeln!(out, "\t{:>5}  {}", 52, s.errors.len());
    }
    let t = s.total();
    if t.count == 0 {
        return 2;
    }
    if !spa.keystore.is_empty() {
        let _ = writeln!(out, "\tencrypted blocks decrypted and authenticated: {}", s.decrypted);
        let _ = writeln!(out, "\tencrypted objsets whose MACs match: {}", s.objset_macs);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "\t{:<16} {:>14}", "bp count:", t.count);
    let _ = writeln!(out, "\t{:<16} {:>14}", "ganged count:", t.gangs);
    let _ = writeln!(out, "\t{:<16} {:>14}      avg: {:>6}", "bp logical:", t.lsize, t.lsize / t.count);
    let _ = writeln!(
        out,
        "\t{:<16} {:>14}      avg: {:>6}     compression: {:>6.2}",
        "bp physical:",
        t.psize,
        t.psize / t.count,
        t.lsize as f64 / t.psize.max(1) as f64
    );
    let _ = writeln!(
        out,
        "\t{:<16} {:>14}      avg: {:>6}     compression: {:>6.2}",
        "bp allocated:",
        t.asize,
        t.asize / t.count,
        t.lsize as f64 / t.asize.max(1) as f64
    );
    let (dedup_asize, dedup_blocks) = crate::ddt::zdb_dedup_totals(spa).unwrap_or((0, 0));
    let _ = writeln!(
        out,
        "\t{:<16} {:>14}    ref>1: {:>6}   deduplication: {:>6.2}",
        "bp deduped:",
        dedup_asize,
        dedup_blocks,
        dedup_asize as f64 / t.asize.max(1) as f64 + 1.0
    );
    for (i, n) in s.embedded.iter().enumerate() {
        if *n > 0 {
            let _ = writeln!(out, "\n\tadditional, non-pointer bps of type {i}: {n:>10}");
        }
    }
    if t.ditto_samevdev != 0 {
        let _ = writeln!(out, "\tDittoed blocks on same vdev: {}", t.ditto_samevdev);
    }
    if t.ditto_same_ms != 0 {
        let _ = writeln!(out, "\tDittoed blocks in same metaslab: {}", t.ditto_same_ms);
    }
    if verbosity >= 2 {
        let _ = writeln!(out, "\nBlocks\tLSIZE\tPSIZE\tASIZE\t  avg\t comp\t%Total\tType");
        for ty in 0..=ZDB_OT_TOTAL {
            let name = type_row_name(ty);
            if s.by_type[ZB_TOTAL][ty].asize == 0 {
                let _ = writeln!(out, "{:>6}\t{:>5}\t{:>5}\t{:>5}\t{:>5}\t{:>5}\t{:>6}\t{}", "-", "-", "-", "-", "-", "-", "-", name);
                continue;
            }
            for l in (-1i32..ZB_TOTAL as i32).rev() {
                let level = if l == -1 { ZB_TOTAL } else { l as usize };
                let zb = &s.by_type[level][ty];
                if zb.asize == 0 {
                    continue;
                }
                if verbosity < 3 && level != ZB_TOTAL {
                    continue;
                }
                if level == 0 && zb.asize == s.by_type[ZB_TOTAL][ty].asize {
                    continue;
                }
                let _ = write!(
                    out,
                    "{:>6}\t{:>5}\t{:>5}\t{:>5}\t{:>5}\t{:>5.2}\t{:>6.2}\t",
                    nicenum(zb.count),
                    nicenum(zb.lsize),
                    nicenum(zb.psize),
                    nicenum(zb.asize),
                    nicenum(zb.asize / zb.count),
                    zb.lsize as f64 / zb.psize.max(1) as f64,
                    100.0 * zb.asize as f64 / t.asize.max(1) as f64
                );
                if level == ZB_TOTAL {
                    let _ = writeln!(out, "{name}");
                } else {
                    let _ = writeln!(out, "    L{level} {name}");
                }
            }
        }
    }
    let _ = writeln!(out);
    let _ = spa;
    if s.errors.is_empty() {
        0
    } else {
        3
    }
}

fn type_row_name(t: usize) -> &'static str {
    match t {
        ZDB_OT_DEFERRED => "deferred free",
        ZDB_OT_DITTO => "dedup ditto",
        ZDB_OT_OTHER => "other",
        ZDB_OT_TOTAL => "Total",
        _ => types::ot_name(t as u8),
    }
}

/// What `zdb -e -p DIR... [-b..] [-c..] [-d] POOL` asks for (the command line is the CLI's).
pub struct ZdbRequest {
    /// Where to look for the pool's devices (/dev when empty).
    pub dirs: Vec<PathBuf>,
    /// The pool's name or guid (a dataset name's pool part counts).
    pub pool: String,
    /// How many times -b, -c and -d were given.
    pub b: u32,
    pub c: u32,
    pub d: u32,
    /// -K: the key of the pool's encrypted datasets (a raw key: the file holding it).
    pub key: Option<String>,
}

/// `zdb -e`: opens the pool read-only from its devices (no daemon), as OpenZFS's zdb -e does,
/// prints what `req` asks for and returns the exit status.
pub fn zdb_pool(req: &ZdbRequest) -> i32 {
    let (b, c, d, pool) = (req.b, req.c, req.d, req.pool.as_str());
    let mut dirs = req.dirs.clone();
    if dirs.is_empty() {
        dirs.push(PathBuf::from("/dev"));
    }
    let scan = spa::scan(&dirs);
    let cands: Vec<_> = scan
        .pools
        .iter()
        .filter(|p| p.name == pool.split('/').next().unwrap_or("") || p.guid.to_string() == pool)
        .collect();
    let cand = match cands.len() {
        0 => {
            eprintln!("zdb: can't open '{pool}': No such file or directory");
            return 1;
        }
        1 => cands[0],
        _ => {
            eprintln!("zdb: more than one pool named '{pool}': use its numeric id");
            return 1;
        }
    };
    let spa = match Spa::open(cand, true, crate::arc::AdaptiveCache::default_max().min(2 << 30)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("zdb: can't open '{pool}': {e}");
            return 1;
        }
    };
    let mut out = String::new();
    let mut code = 0;
    if let Some(k) = &req.key {
        load_keys(&spa, k);
    }
    if d > 0 {
        out.push_str(&dump_datasets(&spa));
    }
    if b > 0 || c > 0 {
        let verify = match c {
            0 => Verify::None,
            1 => Verify::Metadata,
            _ => Verify::All,
        };
        match block_stats(&spa, verify) {
            Ok(stats) => code = print_block_stats(&spa, &stats, b.max(1), verify, &mut out),
            Err(e) => {
                eprintln!("zdb: traversal failed: {e}");
                code = 1;
            }
        }
    }
    print!("{out}");
    spa.close();
    code
}

/// zdb -K: the key tried on every encryption root of the pool (as a file's path for a root
/// whose keyformat is raw, as OpenZFS's zdb takes it); a root it does not open is reported.
fn load_keys(spa: &Arc<Spa>, key: &str) {
    let Ok(list) = crate::dsl::list_datasets(spa) else { return };
    for d in list.iter().filter(|d| d.kind != crate::dsl::DatasetKind::Snapshot) {
        let Ok(Some(k)) = crate::dsl_crypt::key_of(spa, d) else { continue };
        if k.root_dir != d.dir_obj {
            continue;
        }
        let material = match oxzfs_format::crypt::KeyFormat::from_u64(k.keyformat) {
            Some(oxzfs_format::crypt::KeyFormat::Raw) => match std::fs::read(key) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("zdb: cannot read the raw key of '{}' from '{key}': {e}", d.name);
                    continue;
                }
            },
            _ => key.as_bytes().to_vec(),
        };
        if let Err(e) = crate::dsl_crypt::load_key(spa, &d.name, &material, false) {
            eprintln!("zdb: '{}': {e}", d.name);
        }
    }
}

/// `zdb -d`: one line per dataset, as zdb prints it.
fn dump_datasets(spa: &Arc<Spa>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mos = spa.mos();
    let _ = writeln!(
        out,
        "Dataset mos [META], ID 0, cr_txg 4, {}, {} objects",
        nicenum(spa.rootbp.dva.iter().map(|d| d.asize).sum()),
        count_objects(&mos)
    );
    if let Ok(list) = crate::dsl::list_datasets(spa) {
        for ds in list {
            let kind = match ds.kind {
                crate::dsl::DatasetKind::Volume => "ZVOL",
                _ => "ZPL",
            };
            let objects = Objset::open_id(spa, &ds.ds.bp, ds.ds_obj).map(|o| count_objects(&o)).unwrap_or(0);
            let _ = writeln!(
                out,
                "Dataset {} [{}], ID {}, cr_txg {}, {}, {} objects",
                ds.name,
                kind,
                ds.ds_obj,
                ds.ds.creation_txg,
                nicenum(ds.ds.referenced_bytes),
                objects
            );
        }
    }
    out
}

fn count_objects(os: &Objset) -> u64 {
    // The objset bp's fill count is the number of allocated objects.
    os.bp.fill
}
