//! zil: the ZFS intent log of one file system (OpenZFS's zil.c), in its on-disk format
//! (`oxzfs_format::zil`).
//!
//! ```text
//!   changes (ZPL, open txg)  ──itx──▶ Zilog: itxs of the open txg, of quiesced txgs not synced
//!   fsync (PoolHandle::zil_commit, one commit at a time per pool: concurrent fsyncs queue and
//!   the next commit takes everything that queued — group commit)
//!     1. under the write state: records built (a write's bytes read from the file as it is
//!        now), packed into log blocks; the chain's tail block (allocated by the commit before,
//!        named in the last block's trailer) is filled first, more blocks are allocated as
//!        needed, and a new tail is allocated and named in the last trailer
//!     2. without it: the blocks written, the devices holding them flushed — fsync returns
//!        (a lone block on a one-device vdev: written durably in one call, RWF_DSYNC); on a
//!        sparse file vdev, first the holes of the new tail and of the free run after it
//!        written with zeros (`FillAhead`), once per `FILL_AHEAD` of log
//!   txg sync (quiesce of txg N, `Zilog::freeze`): itxs of N wait for N's uberblock; log
//!     blocks whose records all belong to txgs ≤ N are freed in N and zh_log moves to the
//!     first block left (or the tail) — the header and the frees commit with N's data
//! ```
//!
//! Log blocks go to the log class (a log device) when the pool has one, else to the normal
//! class, allocated in the open txg (`metaslab::SharedMs`: the sync of an earlier txg may be
//! allocating meanwhile). A commit holds the pool's commit lock while its blocks are written,
//! and quiesce takes that lock: a txg in which log blocks were allocated is not synced before
//! they are on disk (what OpenZFS's lwb tx hold does). So after a crash, a chain is whole up
//! to its tail: blocks born in synced txgs are in the space maps and reachable from the
//! header; blocks born later are claimed by the import that replays them.
//!
//! The first commit of a file system with no chain allocates its first block, points zh_log
//! at it and waits for that txg (zil_create); the chain then lives on while the file system
//! is open (its tail moves on) and is freed at export.
//!
//! Records: TX_CREATE/MKDIR/SYMLINK, REMOVE/RMDIR, LINK, RENAME, WRITE (copied into the
//! record, `WR_COPIED`, in pieces of at most `ZIL_MAX_COPIED`), TRUNCATE, SETATTR. A change
//! with no record (xattrs, ACLs: OpenZFS 2.1 logs none for SA xattrs) is an `Itx::Sync`: an
//! fsync after it syncs the txg instead, as does a commit of more than `ZIL_COMMIT_MAX` bytes.
//!
//! Per-object commit (zil_commit(zilog, foid)): changes of the namespace (create, remove,
//! link, rename, …) are taken by every commit; writes, truncations, setattrs and unrecorded
//! changes of one object only by a commit for that object (an fsync of it, or a commit of
//! everything: sync=always after a namespace change, the crash harness). A commit for one
//! file thus writes none of the bytes another process is streaming into another file.

use crate::metaslab::{PoolAlloc, SharedMs};
use crate::vdev::{Vdev, VdevKind};
use crate::zio::{AllocClass, DvaAllocator, ZioCtx};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::objset::ZilHeaderPhys;
use oxzfs_format::zil::{self, LogRecord, LrBody, LrCommon, ZIL_CHAIN_SIZE, ZIL_MIN_BLKSZ, ZIL_ZC_SEQ};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// The intent log's counters, for every pool of the process, as OpenZFS's zil kstat keeps
/// them (zil_stats, /proc/spl/kstat/zfs/zil).
#[derive(Default)]
pub struct ZilStats {
    /// zil_commit calls (fsync, fsyncdir, sync=always).
    pub commit_count: AtomicU64,
    /// Commits that wrote log blocks (and flushed their devices).
    pub commit_writer_count: AtomicU64,
    /// Records written.
    pub itx_count: AtomicU64,
    /// Writes whose records point at their final blocks (WR_INDIRECT).
    pub itx_indirect_count: AtomicU64,
    pub itx_indirect_bytes: AtomicU64,
    /// Writes whose bytes were copied into the log at commit (WR_NEED_COPY).
    pub itx_needcopy_count: AtomicU64,
    pub itx_needcopy_bytes: AtomicU64,
    /// Records (and their bytes) in log blocks of the normal class and of log devices.
    pub itx_metaslab_normal_count: AtomicU64,
    pub itx_metaslab_normal_bytes: AtomicU64,
    pub itx_metaslab_slog_count: AtomicU64,
    pub itx_metaslab_slog_bytes: AtomicU64,
}

pub static ZIL_STATS: ZilStats = ZilStats {
    commit_count: AtomicU64::new(0),
    commit_writer_count: AtomicU64::new(0),
    itx_count: AtomicU64::new(0),
    itx_indirect_count: AtomicU64::new(0),
    itx_indirect_bytes: AtomicU64::new(0),
    itx_needcopy_count: AtomicU64::new(0),
    itx_needcopy_bytes: AtomicU64::new(0),
    itx_metaslab_normal_count: AtomicU64::new(0),
    itx_metaslab_normal_bytes: AtomicU64::new(0),
    itx_metaslab_slog_count: AtomicU64::new(0),
    itx_metaslab_slog_bytes: AtomicU64::new(0),
};

impl ZilStats {
    /// The rows of OpenZFS's zil kstat, in its order (zil_kstat_values). zil_itx_copied_*
    /// (bytes copied when the write was made, for O_SYNC writes) stay 0: every write here is
    /// copied at commit.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("zil_commit_count", g(&self.commit_count)),
            ("zil_commit_writer_count", g(&self.commit_writer_count)),
            ("zil_itx_count", g(&self.itx_count)),
            ("zil_itx_indirect_count", g(&self.itx_indirect_count)),
            ("zil_itx_indirect_bytes", g(&self.itx_indirect_bytes)),
            ("zil_itx_copied_count", 0),
            ("zil_itx_copied_bytes", 0),
            ("zil_itx_needcopy_count", g(&self.itx_needcopy_count)),
            ("zil_itx_needcopy_bytes", g(&self.itx_needcopy_bytes)),
            ("zil_itx_metaslab_normal_count", g(&self.itx_metaslab_normal_count)),
            ("zil_itx_metaslab_normal_bytes", g(&self.itx_metaslab_normal_bytes)),
            ("zil_itx_metaslab_slog_count", g(&self.itx_metaslab_slog_count)),
            ("zil_itx_metaslab_slog_bytes", g(&self.itx_metaslab_slog_bytes)),
        ]
    }
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

/// The largest log block (zil_maxblocksize).
pub const ZIL_MAX_BLKSZ: u64 = 128 << 10;
/// The most write bytes one TX_WRITE record copies; a longer write is logged in pieces.
pub const ZIL_MAX_COPIED: u64 = 32 << 10;
/// A commit of more record bytes than this syncs the txg instead (the data is written once, in
/// its final place, rather than twice).
pub const ZIL_COMMIT_MAX: u64 = 16 << 20;

/// One logged change, waiting for a commit or for its txg to sync.
#[derive(Clone, Debug)]
pub enum Itx {
    /// A record as it will be logged (its txg and sequence are filled in at commit).
    Rec { txtype: u64, body: LrBody },
    /// A write, whose bytes are read from the file when it is committed (WR_NEED_COPY).
    Write { foid: u64, offset: u64, length: u64 },
    /// A change no record describes: a commit that takes it syncs the txg. Of one object
    /// (an xattr), or of the namespace (None).
    Sync { foid: Option<u64> },
}

impl Itx {
    /// The object of an asynchronous itx (a write, truncate, setattr, or a change of one
    /// object's that no record describes): a commit for another object leaves it waiting, as
    /// OpenZFS keeps such itxs on per-object lists until an fsync of their object
    /// (zil_async_to_sync). None: a change of the namespace, which every commit takes.
    pub fn async_foid(&self) -> Option<u64> {
        match self {
            Itx::Write { foid, .. } => Some(*foid),
            Itx::Sync { foid } => *foid,
            Itx::Rec { body: LrBody::Truncate { foid, .. } | LrBody::Setattr { foid, .. } | LrBody::SetSaXattr { foid, .. } | LrBody::Acl { foid, .. }, .. } => Some(*foid),
            Itx::Rec { .. } => None,
        }
    }

    /// Whether a commit for `target` takes this itx (None: a commit of everything).
    fn taken_by(&self, target: Option<&[u64]>) -> bool {
        match (target, self.async_foid()) {
            (None, _) | (_, None) => true,
            (Some(objs), Some(f)) => objs.contains(&f),
        }
    }
}

/// A log block written (or being written) and not yet freed.
#[derive(Clone, Debug)]
struct Lwb {
    bp: BlockPointer,
    /// The txg the block was allocated in, and the newest txg of its records.
    alloc_txg: u64,
    max_txg: u64,
}

/// The intent log of one objset, in memory.
#[derive(Default, Debug)]
pub struct Zilog {
    open: Vec<Itx>,
    /// Itxs of quiesced txgs, not yet known synced.
    older: Vec<(u64, Vec<Itx>)>,
    lwbs: VecDeque<Lwb>,
    /// The chain's next block: allocated, named by the last block's trailer, not written.
    tail: Option<BlockPointer>,
    /// Blocks to free at the next quiesce (a chain dropped whole).
    to_free: Vec<BlockPointer>,
    lr_seq: u64,
    /// The header changed: the objset must sync.
    pub dirty: bool,
    /// Size of the last commit's blocks, for the size of the next tail.
    last_bytes: u64,
    /// Bytes of the log blocks not yet freed.
    live_bytes: u64,
    /// The log on disk is not this Zilog's (left by a crash and not replayed): never log into
    /// it; commits sync the txg.
    pub foreign: bool,
    /// The log is being replayed: the changes replay makes are not logged again.
    pub replaying: bool,
    /// Changes made inside an extended attribute directory are under way (nested): they are
    /// not logged; the file's next fsync syncs the txg instead.
    pub quiet: u32,
    /// Why the log on disk could not be replayed (the file system then does not mount).
    pub replay_error: Option<String>,
    /// The range the last `FillAhead` covered: (top-level vdev, start, end).
    filled: Option<(u64, u64, u64)>,
}

/// What a commit has to do, decided under the pool's write state.
pub enum Prepared {
    /// Nothing is waiting.
    Nothing,
    /// Sync the txg (a change without a record, a large commit, no usable chain).
    Sync,
    /// The first block was allocated and the header points at it: sync that txg, then commit.
    Create,
    /// Write these blocks (then flush their devices).
    Write(Commit),
}

/// A commit's writes: the file blocks its indirect records point at, then the log blocks
/// (each as its bp and physical bytes); and the space ahead of the new tail to make written
/// on a sparse file vdev.
#[derive(Default)]
pub struct Commit {
    pub data: Vec<(BlockPointer, Vec<u8>)>,
    pub log: Vec<(BlockPointer, Vec<u8>)>,
    pub fill: Option<FillAhead>,
}

/// How far past a new tail a commit makes the holes of a sparse file vdev written space.
pub const FILL_AHEAD: u64 = 1 << 20;

/// The holes of a sparse file vdev where the next log blocks go, made written space by the
/// commit that allocated the chain's new tail (`Vdev::fill_holes`): the new tail, and the free
/// run after it held from the allocator until the filling is done (`Metaslabs::claim_run`), where
/// first-fit puts the blocks that follow. A log block written into a hole of the host file
/// makes its flush commit the host's allocation too (on ext4 about 180 µs instead of 115 for
/// an 8 KiB write and fdatasync); one commit in every `FILL_AHEAD` bytes of log pays that once
/// for the whole run.
pub struct FillAhead {
    ms: SharedMs,
    vdev: u64,
    /// The tail's offset, and the length to fill from it (tail and held run).
    offset: u64,
    len: u64,
    /// The held run until given back: its offset and length, and the txg it is held in.
    held: std::sync::Mutex<Option<(u64, u64, u64)>>,
}

impl FillAhead {
    /// Give the held run back (at once after the filling: a commit whose write fails syncs
    /// the txg next, and the run must not reach its space map as allocated).
    fn release(&self) {
        if let Some((off, len, txg)) = self.held.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if len > 0 {
                self.ms.lock().unclaim(self.vdev, off, len, txg);
            }
        }
    }
}

impl Drop for FillAhead {
    fn drop(&mut self) {
        self.release();
    }
}

/// What a commit needs of the file system it logs (the writable objset, above this layer).
pub trait CommitSource {
    /// The current bytes of a file range (None: the file is gone, nothing to log for it).
    fn read(&mut self, foid: u64, off: u64, len: u64) -> Result<Option<Vec<u8>>>;
    /// A file's data block size (None: the file is gone).
    fn block_size(&mut self, foid: u64) -> Result<Option<u64>>;
    /// Block `blkid` of a file, dirty in the open txg, written where it belongs (dmu_sync):
    /// its bp and the physical bytes to write (empty: written by an earlier commit). None: it
    /// cannot be, and its bytes are copied into the log.
    fn write_block(&mut self, foid: u64, blkid: u64) -> Result<Option<(BlockPointer, Vec<u8>)>>;
}

/// What a commit needs of the pool.
pub struct CommitCtx<'a> {
    pub ms: &'a SharedMs,
    pub root: &'a Vdev,
    /// The open txg (blocks are allocated in it) and the last synced one.
    pub txg: u64,
    pub synced: u64,
    pub spa_version: u64,
    pub objset: u64,
    /// The pool's allocatable bytes.
    pub pool_size: u64,
}

/// The smallest block size of OpenZFS's zil_block_buckets that holds `bytes`.
fn bucket(bytes: u64) -> u64 {
    bytes.clamp(ZIL_MIN_BLKSZ, ZIL_MAX_BLKSZ).next_power_of_two().min(ZIL_MAX_BLKSZ)
}

impl Zilog {
    /// The Zilog of an objset opened from disk; `foreign`: its header names a chain.
    pub fn opened(foreign: bool) -> Zilog {
        Zilog { foreign, ..Default::default() }
    }

    /// Log a change of the open txg. A write that continues the last one (same file, next
    /// byte) extends it.
    pub fn itx(&mut self, itx: Itx) {
        if self.replaying {
            return;
        }
        if let (Itx::Write { foid, offset, length }, Some(Itx::Write { foid: lf, offset: lo, length: ll })) = (&itx, self.open.last_mut()) {
            // (Not past zfs_immediate_write_sz: a write that big is one the log does not copy.)
            if *foid == *lf && *offset == *lo + *ll && *ll + *length < crate::tunables::immediate_write_sz() {
                *ll += *length;
                return;
            }
        }
        self.open.push(itx);
    }

    /// Whether a change waits for a commit.
    pub fn pending(&self) -> bool {
        self.pending_for(None)
    }

    /// Whether a change waits for a commit for `target` (None: any commit).
    pub fn pending_for(&self, target: Option<&[u64]>) -> bool {
        self.open.iter().chain(self.older.iter().flat_map(|(_, v)| v.iter())).any(|i| i.taken_by(target))
    }

    /// Whether this Zilog has a chain on disk (header pointing at it).
    pub fn has_chain(&self) -> bool {
        self.tail.is_some()
    }

    /// Quiesce of `txg` (zil_sync): the open itxs now wait for `txg`; blocks whose records are
    /// all in txgs ≤ `txg` are freed in it and `header.log` moves to the first block left.
    /// Returns the blocks to free in `txg`.
    pub fn freeze(&mut self, txg: u64, header: &mut ZilHeaderPhys) -> Vec<BlockPointer> {
        if !self.open.is_empty() {
            self.older.push((txg, std::mem::take(&mut self.open)));
        }
        let mut freed = std::mem::take(&mut self.to_free);
        while let Some(l) = self.lwbs.front() {
            if l.alloc_txg > txg || l.max_txg > txg {
                break;
            }
            let bp = self.lwbs.pop_front().expect("front").bp;
            self.live_bytes = self.live_bytes.saturating_sub(bp.lsize);
            freed.push(bp);
        }
        let head = match (self.lwbs.front(), &self.tail) {
            (Some(l), _) => l.bp.clone(),
            (None, Some(t)) => t.clone(),
            (None, None) if self.foreign => header.log.clone(),
            (None, None) => BlockPointer::hole(),
        };
        if !self.foreign {
            header.log = head;
        }
        self.dirty = false;
        freed
    }

    /// `txg` is on disk: its itxs are no longer needed.
    pub fn synced(&mut self, txg: u64) {
        self.older.retain(|(t, _)| *t > txg);
    }

    /// Drop the chain (export, reopen): every block is freed at the next quiesce and the
    /// header emptied; pending itxs go (the caller syncs).
    pub fn close(&mut self) {
        self.open.clear();
        self.older.clear();
        if self.tail.is_none() && self.lwbs.is_empty() {
            return;
        }
        self.to_free.extend(self.lwbs.drain(..).map(|l| l.bp));
        self.live_bytes = 0;
        self.to_free.extend(self.tail.take());
        self.open.clear();
        self.older.clear();
        self.dirty = true;
    }

    /// A block a log record of the open txg names, freed when that txg syncs (never handed
    /// out before: the record may be replayed until then).
    pub fn free_at_sync(&mut self, bp: BlockPointer) {
        self.to_free.push(bp);
    }

    /// Adopt a header whose chain was replayed (or holds nothing) by the caller: its blocks
    /// are `chain` (freed at the next quiesce), and the header empties.
    pub fn drop_replayed(&mut self, chain: Vec<BlockPointer>) {
        self.to_free.extend(chain);
        self.foreign = false;
        self.dirty = true;
    }

    /// Plan a commit (under the pool's write state) of what `target` needs: every change of
    /// the namespace and the asynchronous changes of the objects it names (None: of every
    /// object), as zil_commit(zilog, foid) does; the other objects' changes wait for their
    /// own fsync or their txg. `src` reads the current bytes of a file range.
    pub fn prepare(&mut self, ctx: &CommitCtx, header: &mut ZilHeaderPhys, logbias_throughput: bool, target: Option<&[u64]>, src: &mut dyn CommitSource) -> Result<Prepared> {
        let synced = ctx.synced;
        self.older.retain(|(t, _)| *t > synced);
        if !self.pending_for(target) {
            return Ok(Prepared::Nothing);
        }
        if self.foreign {
            return Ok(Prepared::Sync);
        }
        let itxs: Vec<(u64, &Itx)> = self.older.iter().flat_map(|(t, v)| v.iter().map(move |i| (*t, i))).chain(self.open.iter().map(|i| (ctx.txg, i))).filter(|(_, i)| i.taken_by(target)).collect();
        // zfs_log_write's choice: every write under logbias=throughput, and a write of
        // zfs_immediate_write_sz or more when there is no log device, goes to its final
        // blocks, which its records point at (WR_INDIRECT). Such a write of a txg already
        // quiescing syncs that txg instead (its blocks are no longer the open txg's to write).
        let slog = ctx.ms.lock().has_class(AllocClass::Log);
        let big = crate::tunables::immediate_write_sz();
        let indirect = |length: u64| logbias_throughput || (!slog && length >= big);
        let mut bytes = 0u64;
        for (txg, itx) in &itxs {
            bytes += match itx {
                Itx::Sync { .. } => return Ok(Prepared::Sync),
                Itx::Write { length, .. } if indirect(*length) && *txg != ctx.txg => return Ok(Prepared::Sync),
                Itx::Write { length, .. } if indirect(*length) => 200 * length.div_ceil(ZIL_MAX_COPIED).max(1),
                Itx::Write { length, .. } => length + 200 * length.div_ceil(ZIL_MAX_COPIED).max(1),
                Itx::Rec { .. } => 256,
            };
        }
        // The log's blocks live until their txg syncs: past a share of the pool (or a large
        // commit) the txg is synced instead, which frees them.
        if bytes > ZIL_COMMIT_MAX || self.live_bytes + bytes > (ctx.pool_size / 16).max(ZIL_MAX_BLKSZ * 8) {
            return Ok(Prepared::Sync);
        }
        let slim = ctx.spa_version >= 23;
        if self.tail.is_none() {
            if !header.log.is_hole() {
                // A chain this Zilog does not know: not ours to extend.
                self.foreign = true;
                return Ok(Prepared::Sync);
            }
            self.create(ctx, header, bytes)?;
            return Ok(Prepared::Create);
        }
        // The records, in order, with their txg (the sequence is set as they are packed).
        let mut recs: Vec<Vec<u8>> = Vec::new();
        let mut commit = Commit::default();
        let mut max_txg = 0;
        let push = |txg: u64, txtype: u64, body: LrBody, recs: &mut Vec<Vec<u8>>| {
            recs.push(LogRecord { common: LrCommon { txtype, reclen: 0, txg, seq: 0 }, body }.encode());
        };
        for (txg, itx) in &itxs {
            max_txg = max_txg.max(*txg);
            match itx {
                Itx::Rec { txtype, body } => push(*txg, *txtype, body.clone(), &mut recs),
                Itx::Write { foid, offset, length } if indirect(*length) => {
                    let Some(bs) = src.block_size(*foid)? else { continue };
                    let mut off = *offset;
                    let end = offset + length;
                    while off < end {
                        let n = (end - off).min(bs - off % bs);
                        match src.write_block(*foid, off / bs)? {
                            Some((bp, phys)) => {
                                if !phys.is_empty() {
                                    commit.data.push((bp.clone(), phys));
                                }
                                let body = LrBody::Write { foid: *foid, offset: off, length: n, blkoff: off % bs, blkptr: bp, data: Vec::new() };
                                push(*txg, zil::TX_WRITE, body, &mut recs);
                                bump(&ZIL_STATS.itx_indirect_count, 1);
                                bump(&ZIL_STATS.itx_indirect_bytes, n);
                            }
                            // Not a block to point at (all zeros, tiny, deduplicated, no
                            // room): its bytes go into the log.
                            None => {
                                let mut o = off;
                                while o < off + n {
                                    let k = (off + n - o).min(ZIL_MAX_COPIED);
                                    let Some(data) = src.read(*foid, o, k)? else { break };
                                    bump(&ZIL_STATS.itx_needcopy_count, 1);
                                    bump(&ZIL_STATS.itx_needcopy_bytes, k);
                                    let body = LrBody::Write { foid: *foid, offset: o, length: k, blkoff: 0, blkptr: BlockPointer::hole(), data };
                                    push(*txg, zil::TX_WRITE, body, &mut recs);
                                    o += k;
                                }
                            }
                        }
                        off += n;
                    }
                }
                Itx::Write { foid, offset, length } => {
                    let mut off = *offset;
                    let end = offset + length;
                    while off < end {
                        let n = (end - off).min(ZIL_MAX_COPIED);
                        let Some(data) = src.read(*foid, off, n)? else { break };
                        bump(&ZIL_STATS.itx_needcopy_count, 1);
                        bump(&ZIL_STATS.itx_needcopy_bytes, n);
                        let body = LrBody::Write { foid: *foid, offset: off, length: n, blkoff: 0, blkptr: BlockPointer::hole(), data };
                        push(*txg, zil::TX_WRITE, body, &mut recs);
                        off += n;
                    }
                }
                Itx::Sync { .. } => unreachable!("checked above"),
            }
        }
        // Into blocks: the tail first, more as needed, a new tail named by the last.
        let mut blocks: Vec<(BlockPointer, Vec<u8>)> = Vec::new();
        let mut cur = self.tail.clone().expect("a chain");
        let mut body: Vec<u8> = Vec::new();
        let total: u64 = recs.iter().map(|r| r.len() as u64).sum();
        let mut left = total;
        let mut allocated: Vec<BlockPointer> = Vec::new();
        let mut seq = self.lr_seq;
        let r = (|| -> Result<BlockPointer> {
            for r in &mut recs {
                // PAD_MIN bytes stay free for the padding record (see `pad_block`).
                let cap = cur.lsize as usize - ZIL_CHAIN_SIZE - PAD_MIN;
                if r.len() > ZIL_MAX_BLKSZ as usize - ZIL_CHAIN_SIZE - PAD_MIN {
                    return Err(ZfsError::Invalid(format!("zil record of {} bytes", r.len())));
                }
                if body.len() + r.len() > cap {
                    let mut words = cur.cksum;
                    words[ZIL_ZC_SEQ] += 1;
                    let next = alloc_block(ctx, bucket(left + (ZIL_CHAIN_SIZE + PAD_MIN) as u64), words)?;
                    allocated.push(next.clone());
                    pad_block(&mut body, cur.lsize as usize, &mut seq);
                    blocks.push((cur.clone(), std::mem::take(&mut body)));
                    cur = next;
                }
                left -= r.len() as u64;
                seq += 1;
                r[24..32].copy_from_slice(&seq.to_le_bytes());
                body.extend_from_slice(r);
            }
            let mut words = cur.cksum;
            words[ZIL_ZC_SEQ] += 1;
            let size = bucket(self.last_bytes.max(total) + (ZIL_CHAIN_SIZE + PAD_MIN) as u64);
            let tail = alloc_block(ctx, size, words)?;
            pad_block(&mut body, cur.lsize as usize, &mut seq);
            blocks.push((cur.clone(), std::mem::take(&mut body)));
            Ok(tail)
        })();
        let tail = match r {
            Ok(t) => t,
            Err(e) => {
                // Out of space for log blocks: give back what this commit took, sync instead.
                let mut ms = ctx.ms.lock();
                for bp in allocated {
                    let d = bp.dva[0];
                    ms.free(d.vdev, d.offset, d.asize, ctx.txg, ctx.txg);
                }
                let _ = e;
                return Ok(Prepared::Sync);
            }
        };
        for (i, (bp, recs)) in blocks.iter().enumerate() {
            let next = blocks.get(i + 1).map(|b| b.0.clone()).unwrap_or_else(|| tail.clone());
            let block = zil::encode_log_block(bp.lsize as usize, recs, &next, bp.cksum, slim).map_err(|e| ZfsError::Invalid(format!("zil block: {e}")))?;
            commit.log.push((bp.clone(), block));
            self.lwbs.push_back(Lwb { bp: bp.clone(), alloc_txg: ctx.txg, max_txg });
            self.live_bytes += bp.lsize;
        }
        commit.fill = self.fill_ahead(ctx, &tail);
        let (count, bytes) = if slog { (&ZIL_STATS.itx_metaslab_slog_count, &ZIL_STATS.itx_metaslab_slog_bytes) } else { (&ZIL_STATS.itx_metaslab_normal_count, &ZIL_STATS.itx_metaslab_normal_bytes) };
        bump(count, recs.len() as u64);
        bump(bytes, total);
        bump(&ZIL_STATS.itx_count, recs.len() as u64);
        self.lr_seq = seq;
        self.last_bytes = total;
        self.tail = Some(tail);
        // What this commit took is logged; the rest waits.
        self.open.retain(|i| !i.taken_by(target));
        for (_, v) in &mut self.older {
            v.retain(|i| !i.taken_by(target));
        }
        self.older.retain(|(_, v)| !v.is_empty());
        self.dirty = true;
        Ok(Prepared::Write(commit))
    }

    /// The `FillAhead` for a new tail, unless the last one covered it already: on a leaf or
    /// mirror top-level vdev with a regular file under it.
    fn fill_ahead(&mut self, ctx: &CommitCtx, tail: &BlockPointer) -> Option<FillAhead> {
        let d = tail.dva[0];
        let end = d.offset + d.asize;
        if self.filled.is_some_and(|(v, s, e)| v == d.vdev && s <= d.offset && end <= e) {
            return None;
        }
        let top = ctx.root.children.get(d.vdev as usize)?;
        if !matches!(top.kind, VdevKind::Leaf { .. } | VdevKind::Mirror) || !top.leaves().iter().any(|l| l.dev.as_ref().is_some_and(|dev| dev.file_fd().is_some())) {
            return None;
        }
        let held = ctx.ms.lock().claim_run(d.vdev, end, FILL_AHEAD, ctx.txg);
        self.filled = Some((d.vdev, d.offset, end + held));
        Some(FillAhead { ms: ctx.ms.clone(), vdev: d.vdev, offset: d.offset, len: d.asize + held, held: std::sync::Mutex::new(Some((end, held, ctx.txg))) })
    }

    /// zil_create: a new chain (new guid), its first block (sized for `bytes`) allocated in the
    /// open txg and named by the header; usable once that txg is synced.
    pub fn create(&mut self, ctx: &CommitCtx, header: &mut ZilHeaderPhys, bytes: u64) -> Result<()> {
        let words = [crate::zio::rand_u64(), crate::zio::rand_u64(), ctx.objset, 1];
        let bp = alloc_block(ctx, bucket(bytes + (ZIL_CHAIN_SIZE + PAD_MIN) as u64), words)?;
        *header = ZilHeaderPhys::empty();
        header.log = bp.clone();
        self.tail = Some(bp);
        self.dirty = true;
        Ok(())
    }

    /// Whether `create` may start a chain: none in memory, none on disk, none left by a crash.
    pub fn can_create(&self, header: &ZilHeaderPhys) -> bool {
        self.tail.is_none() && !self.foreign && header.log.is_hole()
    }

    /// A commit's write failed: the chain may have a hole, so it is dropped (its blocks freed
    /// at the next quiesce) and the next commit starts a new one; the caller syncs the txg.
    pub fn write_failed(&mut self) {
        self.to_free.extend(self.lwbs.drain(..).map(|l| l.bp));
        self.live_bytes = 0;
        self.to_free.extend(self.tail.take());
        self.dirty = true;
    }
}

/// The smallest padding record (a TX_TRUNCATE: `lr_t` and three words).
const PAD_MIN: usize = 56;

/// Pad a slim block's records so that `zc_nused` is a multiple of ZIL_MIN_BLKSZ. Readers
/// disagree on what the embedded checksum of a slim block covers: OpenZFS (since build 141)
/// the used bytes rounded up to ZIL_MIN_BLKSZ, zfs-fuse (older) exactly `zc_nused`; with
/// `zc_nused` on a boundary both cover the same bytes. The padding is one TX_TRUNCATE of
/// object 0 in txg 1, with the next sequence number (sequences must grow, zil_parse; zdb
/// wants a txg): every replay skips a record of a txg before its claim (no pool claims in
/// txg 1, which its creation syncs) before looking at it.
fn pad_block(body: &mut Vec<u8>, lsize: usize, seq: &mut u64) {
    let nused = ZIL_CHAIN_SIZE + body.len();
    let mut pad = nused.div_ceil(ZIL_MIN_BLKSZ as usize) * ZIL_MIN_BLKSZ as usize - nused;
    if pad == 0 {
        return;
    }
    if pad < PAD_MIN {
        pad += ZIL_MIN_BLKSZ as usize;
    }
    debug_assert!(nused + pad <= lsize, "padding fits: {nused} + {pad} > {lsize}");
    *seq += 1;
    let mut r = vec![0u8; pad];
    r[0..8].copy_from_slice(&zil::TX_TRUNCATE.to_le_bytes());
    r[8..16].copy_from_slice(&(pad as u64).to_le_bytes());
    r[16..24].copy_from_slice(&1u64.to_le_bytes());
    r[24..32].copy_from_slice(&seq.to_le_bytes());
    body.extend_from_slice(&r);
}

/// Allocate a log block of `size` bytes in the open txg: on a log device when there is one,
/// else in the normal class (zio_alloc_zil); its bp carries `words` as the checksum verifier.
fn alloc_block(ctx: &CommitCtx, size: u64, words: [u64; 4]) -> Result<BlockPointer> {
    let min_alloc = crate::vdev::min_alloc(ctx.root);
    let mut alloc = PoolAlloc { ms: ctx.ms, root: ctx.root, min_alloc };
    let class = if ctx.ms.lock().has_class(AllocClass::Log) { AllocClass::Log } else { AllocClass::Normal };
    let dva = alloc.alloc_dva(class, size, ctx.txg, &[]).ok_or_else(|| ZfsError::Posix(libc::ENOSPC, "no space for an intent log block".into()))?;
    let mut bp = BlockPointer {
        lsize: size,
        psize: size,
        compress: oxzfs_format::compress::ZIO_COMPRESS_OFF,
        checksum: zil::log_block_checksum(ctx.spa_version),
        typ: oxzfs_format::types::DMU_OT_INTENT_LOG,
        level: 0,
        little_endian: true,
        birth: ctx.txg,
        fill: 0,
        cksum: words,
        ..Default::default()
    };
    bp.dva[0] = dva;
    Ok(bp)
}

/// Write a commit: its `FillAhead` first (the run it held given back at once), then the file
/// blocks its records point at, flushed, then the log blocks, flushed (a log block on disk
/// names only blocks already there). On a failure, the top-level vdev that failed and why.
pub fn write_commit(root: &Vdev, commit: &Commit) -> std::result::Result<(), (u64, ZfsError)> {
    use crate::vdev::iostat::{with_class, IoClass};
    // A commit's writes are waited for by an fsync: sync writes (ZIO_PRIORITY_SYNC_WRITE),
    // but a commit of more than zil_slog_bulk bytes of log blocks on a log device goes at async
    // priority, as OpenZFS's zil_lwb_write_issue does, so that one bulk writer does not crowd
    // the log device.
    let log_bytes: u64 = commit.log.iter().map(|(_, b)| b.len() as u64).sum();
    let on_slog = commit.log.iter().any(|(bp, _)| root.children.get(bp.dva[0].vdev as usize).is_some_and(|t| t.is_log));
    let class = if on_slog && log_bytes > crate::tunables::zil_slog_bulk() { IoClass::AsyncWrite } else { IoClass::SyncWrite };
    if let Some(f) = &commit.fill {
        if let Some(top) = root.children.get(f.vdev as usize) {
            top.fill_holes(f.offset, f.len);
        }
        f.release();
    }
    with_class(class, || {
        if !commit.data.is_empty() {
            write_blocks(root, &commit.data)?;
        }
        write_blocks(root, &commit.log)
    })
}

/// Write blocks to every DVA and flush the top-level vdevs holding them. A top-level vdev
/// that is one device and takes one write of them (a commit's lone log block) gets it written
/// durably in one call (`Vdev::write_leaf_sync`) instead of a write and a flush of the whole
/// device file.
fn write_blocks(root: &Vdev, blocks: &[(BlockPointer, Vec<u8>)]) -> std::result::Result<(), (u64, ZfsError)> {
    let dvas = || blocks.iter().flat_map(|(bp, data)| bp.dva.iter().filter(|d| !d.is_empty()).map(move |d| (*d, data)));
    let mut tops: Vec<(u64, usize)> = Vec::new();
    for (d, _) in dvas() {
        match tops.iter_mut().find(|t| t.0 == d.vdev) {
            Some(t) => t.1 += 1,
            None => tops.push((d.vdev, 1)),
        }
    }
    let lone = |t: &Vdev, n: usize| n == 1 && t.is_leaf();
    for (d, data) in dvas() {
        let top = root.children.get(d.vdev as usize).ok_or_else(|| (d.vdev, ZfsError::Invalid(format!("log block on vdev {}", d.vdev))))?;
        let n = tops.iter().find(|t| t.0 == d.vdev).map_or(0, |t| t.1);
        let r = if lone(top, n) { top.write_leaf_sync(d.offset, data) } else { top.write_parallel(d.offset, data) };
        r.map_err(|e| (d.vdev, e))?;
    }
    for (t, n) in tops {
        if let Some(top) = root.children.get(t as usize).filter(|top| !lone(top, n)) {
            top.flush_parallel().map_err(|e| (t, e))?;
        }
    }
    Ok(())
}

/// A chain as read from disk (zil_parse): every block the header or a trailer names, in
/// order, the first that does not verify included (it is allocated too, the chain's tail),
/// with the records of those that verified.
#[derive(Debug, Default)]
pub struct Chain {
    pub blocks: Vec<(BlockPointer, Vec<LogRecord>)>,
    /// A record that did not decode: where, and the error (the walk stops there).
    pub bad_record: Option<String>,
}

/// Walk the chain from `head`, reading at most `limit` blocks.
pub fn parse_chain(ctx: &ZioCtx, head: &BlockPointer, limit: usize) -> Chain {
    let mut out = Chain::default();
    let mut bp = head.clone();
    let mut seen = std::collections::HashSet::new();
    while !bp.is_hole() && out.blocks.len() < limit {
        if !seen.insert((bp.dva[0].vdev, bp.dva[0].offset)) {
            break;
        }
        out.blocks.push((bp.clone(), Vec::new()));
        if bp.dva[0].is_empty() || bp.lsize == 0 || bp.lsize > 16 << 20 {
            break;
        }
        let slim = bp.checksum == oxzfs_format::checksum::ZIO_CHECKSUM_ZILOG2;
        let want = bp.cksum;
        let verify = |d: &[u8]| zil::decode_log_block_of(d, want, slim, bp.encrypted).is_ok();
        let Ok(data) = crate::vdev::speculative(|| crate::zio::read_dva(ctx, &bp.dva[0], bp.psize, &verify)) else { break };
        let Ok(block) = zil::decode_log_block_of(&data, want, slim, bp.encrypted) else { break };
        let mut recs = Vec::new();
        // An encrypted dataset's records are ciphertext but for their headers and a write's
        // block pointer: only those are read (claim and scrub need no more).
        let records: Box<dyn Iterator<Item = _>> =
            if bp.encrypted { Box::new(zil::records_encrypted(block.records, block.le)) } else { Box::new(zil::records(block.records, block.le)) };
        for r in records {
            match r {
                Ok(r) => recs.push(r),
                Err(e) => {
                    out.bad_record = Some(format!("log block seq {} at vdev {} offset {:#x}, record {}: {e}", bp.cksum[ZIL_ZC_SEQ], bp.dva[0].vdev, bp.dva[0].offset, recs.len() + 1));
                    out.blocks.last_mut().expect("pushed").1 = recs;
                    return out;
                }
            }
        }
        out.blocks.last_mut().expect("pushed").1 = recs;
        bp = block.next;
    }
    out
}
