//! zio: the read and write pipelines between a block pointer and the block's logical bytes.
//!
//! ```text
//!   hole ─────────────────────────────────────────────► zeros (lsize)
//!   embedded ─ payload out of the bp words ─ decompress ► lsize bytes
//!   DVA[i] ─ gang? read the 512-byte gang header (its own embedded checksum), then the
//!            child bps in order, concatenated ─┐
//!          └ vdev read of psize at the DVA ────┴─ verify bp checksum ─ decompress ─► lsize bytes
//! ```
//!
//! Copies are tried in DVA order; the vdev layer itself tries mirror children and raidz
//! reconstructions under the same checksum (the `verify` callback), and counts errors on the
//! leaves. When every copy fails, the error says which block (its bp) and why.
//! The context's `ReadMode` says whether a copy that failed is rewritten from the one that
//! verified (self-healing: ditto DVAs here, mirror sides and raidz columns in the vdev layer)
//! and whether every copy is read (a scrub).
//! A checksum is verified on the physical (compressed) bytes, as OpenZFS computes it at write.
//!
//! Write: compress → (embed) → checksum over the physical bytes → allocate `copies` DVAs →
//! vdev writes. When the allocator has no contiguous room (or OXZFS_FORCE_GANGING asks), the
//! block becomes a gang tree, as zio_write_gang_block builds it:
//!
//! ```text
//!   bp (gang bit on each DVA; DVA[i].asize = header + children's copy i; checksum of the
//!   │   whole physical block)           copies + 1 header copies (at most 3)
//!   └► gang header, 512 bytes: bp[3] | filler | zio_eck_t (gang_header checksum, verifier
//!        │                                      = DVA[0] vdev, offset, physical birth)
//!        └► child i: psize = rest / (3 - i) rounded up to 512, uncompressed, type none,
//!                   level 0, the leader's checksum; itself ganged when it finds no room
//! ```
//!
//! Frees walk the tree (`bp_allocations`): a gang DVA frees only its header, the children
//! free their own copies. A later sync pass rewriting a gang block of the same size rewrites
//! the tree in place.

use crate::vdev::{ReadMode, Vdev, READ_PLAIN};
use crate::{Result, ZfsError};
use std::sync::Arc;
use oxzfs_format::blkptr::{decode_gang_header, BlockPointer, Dva, SPA_GBH_NBLKPTRS};
use oxzfs_format::checksum;
use oxzfs_format::compress;

/// Largest logical block OpenZFS writes (SPA_MAXBLOCKSIZE, 16 MiB).
pub const MAX_BLOCK: u64 = 16 << 20;
const GANG_HEADER_SIZE: u64 = 512;
/// SPA_MINBLOCKSIZE: gang children are cut in multiples of it, and a block this small is
/// never ganged.
const SPA_MINBLOCKSIZE: u64 = 512;
/// Gang trees nest at most this deep: each level cuts a block in three, and 16 MiB reach
/// 512 bytes after ten cuts.
const MAX_GANG_DEPTH: usize = 12;

/// What the pipeline needs from the pool: the vdev tree, the checksum salt, and how reads
/// treat bad copies.
pub struct ZioCtx<'a> {
    pub root: &'a Vdev,
    pub salt: &'a [u8; 32],
    pub mode: &'a ReadMode,
}

impl<'a> ZioCtx<'a> {
    /// A context whose reads only look (no repair, first good copy).
    pub fn new(root: &'a Vdev, salt: &'a [u8; 32]) -> ZioCtx<'a> {
        ZioCtx { root, salt, mode: &READ_PLAIN }
    }
}

/// Verify `data` against the checksum in `bp` (none for checksum=off).
pub fn verify_bp(bp: &BlockPointer, data: &[u8], salt: &[u8; 32]) -> bool {
    if bp.checksum == checksum::ZIO_CHECKSUM_OFF {
        return true;
    }
    let ok = match checksum::compute(bp.checksum, data, bp.little_endian, salt) {
        Ok(c) => bp.checksum_matches(&c),
        Err(_) => false,
    };
    ok
}

/// Read the logical bytes of `bp`.
pub fn read_bp(ctx: &ZioCtx, bp: &BlockPointer) -> Result<Vec<u8>> {
    if bp.lsize > MAX_BLOCK || bp.psize > MAX_BLOCK {
        return Err(ZfsError::Invalid(format!("block pointer sizes out of range: {bp}")));
    }
    if bp.embedded {
        if bp.etype != 0 {
            return Err(ZfsError::Unsupported(format!("embedded block type {} ({bp})", bp.etype)));
        }
        let payload = bp.embedded_payload().map_err(|e| ZfsError::corrupt(format!("embedded bp {bp}"), e))?;
        return decompress(bp, &payload);
    }
    if bp.is_hole() {
        return Ok(vec![0u8; bp.lsize as usize]);
    }
    // Encrypted data needs the dataset's key; dnode blocks keep their cores in plaintext
    // (and are never compressed), so traversal can read them without it.
    if bp.is_encrypted_data() && bp.typ != oxzfs_format::types::DMU_OT_DNODE {
        return Err(ZfsError::Unsupported(format!("encrypted block, key not loaded ({bp})")));
    }
    let physical = read_physical(ctx, bp)?;
    decompress_owned(bp, physical)
}

fn is_uncompressed(bp: &BlockPointer) -> bool {
    bp.compress == compress::ZIO_COMPRESS_OFF || bp.compress == compress::ZIO_COMPRESS_INHERIT || (!bp.embedded && bp.psize == bp.lsize)
}

fn decompress(bp: &BlockPointer, physical: &[u8]) -> Result<Vec<u8>> {
    if is_uncompressed(bp) {
        return decompress_owned(bp, physical.to_vec());
    }
    compress::decompress(bp.compress, physical, bp.lsize as usize)
        .map_err(|e| ZfsError::corrupt(format!("decompressing {bp}"), e))
}

/// `decompress` of bytes the caller gives up: an uncompressed block is handed back as it is
/// (no copy of the block on every read from the vdevs).
pub fn decompress_owned(bp: &BlockPointer, mut physical: Vec<u8>) -> Result<Vec<u8>> {
    if is_uncompressed(bp) {
        physical.resize(bp.lsize as usize, 0);
        return Ok(physical);
    }
    decompress(bp, &physical)
}

/// A block's logical bytes from its verified physical bytes, and those physical bytes too
/// when the block is compressed (what the compressed ARC keeps).
pub fn decompress_keeping(bp: &BlockPointer, physical: Vec<u8>) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    if is_uncompressed(bp) {
        return Ok((decompress_owned(bp, physical)?, None));
    }
    let logical = decompress(bp, &physical)?;
    Ok((logical, Some(physical)))
}

/// `read_bp` that also hands back the physical bytes of a compressed block (None for
/// uncompressed, embedded blocks and holes).
pub fn read_bp_keeping(ctx: &ZioCtx, bp: &BlockPointer) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    if bp.embedded || bp.is_hole() || bp.lsize > MAX_BLOCK || bp.psize > MAX_BLOCK || (bp.is_encrypted_data() && bp.typ != oxzfs_format::types::DMU_OT_DNODE) {
        return read_bp(ctx, bp).map(|d| (d, None));
    }
    decompress_keeping(bp, read_physical(ctx, bp)?)
}

/// The physical bytes of `bp` made again from its logical bytes (compressed as the bp says,
/// zero-padded to psize), when they reproduce the bp's checksum: what the L2ARC writes. None
/// for blocks that cannot be verified that way (embedded, holes, encrypted, checksum=off, or
/// compressed by a compressor whose output differs from ours).
/// An uncompressed block's logical bytes are its physical bytes, verified when they came in:
/// handed back as they are, not checksummed again (the feed runs beside foreground reads).
pub fn physical_for_l2<'a>(bp: &BlockPointer, logical: &'a [u8], salt: &[u8; 32]) -> Option<std::borrow::Cow<'a, [u8]>> {
    if bp.embedded || bp.is_hole() || bp.encrypted || bp.checksum == checksum::ZIO_CHECKSUM_OFF || logical.len() as u64 != bp.lsize || bp.psize > MAX_BLOCK {
        return None;
    }
    if is_uncompressed(bp) {
        return (bp.psize == bp.lsize).then_some(std::borrow::Cow::Borrowed(logical));
    }
    let mut c = compress::compress(bp.compress, 0, logical, bp.psize as usize)?;
    c.resize(bp.psize as usize, 0);
    verify_bp(bp, &c, salt).then_some(std::borrow::Cow::Owned(c))
}

/// The verified physical (psize) bytes of a non-embedded, non-hole bp.
pub fn read_physical(ctx: &ZioCtx, bp: &BlockPointer) -> Result<Vec<u8>> {
    read_physical_at(ctx, bp, 0)
}

/// `read_physical` of a bp `depth` gang levels down. Copies are read in DVA order until one
/// verifies (a scrub reads every one); with a repairing mode the whole (non-gang) copies that
/// failed are rewritten from the good one, as OpenZFS's mirror over DVAs heals them.
fn read_physical_at(ctx: &ZioCtx, bp: &BlockPointer, depth: usize) -> Result<Vec<u8>> {
    let mut last: Option<ZfsError> = None;
    let verify = |d: &[u8]| verify_bp(bp, d, ctx.salt);
    let mut good: Option<Vec<u8>> = None;
    let mut bad: Vec<&Dva> = Vec::new();
    for dva in bp.dvas() {
        if dva.is_empty() {
            continue;
        }
        if good.is_some() && !ctx.mode.scrub {
            break;
        }
        if good.is_some() && dva.gang {
            continue; // another header of the same gang tree: its children were read
        }
        let res = if dva.gang {
            read_gang(ctx, bp, dva, depth)
        } else {
            read_dva(ctx, dva, bp.psize, &verify)
        };
        match res {
            Ok(d) => {
                if dva.gang && !verify(&d) {
                    last = Some(ZfsError::Checksum { context: format!("gang block {bp}") });
                    continue;
                }
                good.get_or_insert(d);
            }
            Err(e) => {
                if !dva.gang {
                    bad.push(dva);
                }
                last = Some(e);
            }
        }
    }
    if let Some(d) = good {
        if ctx.mode.repair {
            for dva in bad {
                if let Some(top) = ctx.root.children.get(dva.vdev as usize) {
                    top.repair_write(dva.offset, &d, ctx.mode);
                }
            }
        }
        return Ok(d);
    }
    Err(match last {
        Some(ZfsError::Checksum { .. }) | None => ZfsError::Checksum { context: format!("block {bp}: no copy verified") },
        Some(e) => e,
    })
}

/// The sorted scan's large reads (what OpenZFS's vdev queue makes of a scan's sorted reads by
/// aggregating them): the blocks `bps` of top-level vdev `top` — ascending, each with one DVA
/// there and no gang — read as one range from each leaf and verified from it. A scrub reads
/// every side of a mirror; a resilver (`ctx.mode.resilver`) reads one side whose DTL is empty
/// (into `bufs[0]`) and hands back, in `writes`, the runs of adjacent verified blocks to write
/// to the sides whose DTL is not, from that buffer (`write_runs`): the caller writes them, on
/// another thread while the next range is read. Returns, per block, whether it was read and
/// verified here (a resilver's block: and its write handed back); the others are for
/// `read_physical` (a copy that failed, fault injection, a failed large read, or a vdev this
/// does not cover: raidz, nested mirrors, sides missing, offline or faulted, a scrub with
/// stale sides), which counts and repairs as it always does. A block that does not verify on
/// the source is never in `writes`. `bufs` holds the range buffers from one call to the next
/// (grown as needed, never shrunk).
pub fn scan_run<'a>(ctx: &ZioCtx<'a>, top: u64, bps: &[&BlockPointer], bufs: &mut Vec<Vec<u8>>, writes: &mut Vec<RunWrite<'a>>) -> Vec<bool> {
    let mut done = vec![false; bps.len()];
    let Some(tv) = ctx.root.children.get(top as usize) else { return done };
    if bps.is_empty() || crate::vdev::inject::any() {
        return done;
    }
    let leaves: Vec<&'a Vdev> = match tv.kind {
        crate::vdev::VdevKind::Leaf { .. } => vec![&**tv],
        crate::vdev::VdevKind::Mirror | crate::vdev::VdevKind::ReplacingOrSpare(_) => tv.children.iter().map(|c| &**c).collect(),
        _ => return done,
    };
    let usable = |l: &&Vdev| l.is_leaf() && l.dev.is_some() && !l.out_of_use() && matches!(l.state(), crate::vdev::VdevState::Online | crate::vdev::VdevState::Degraded);
    if !leaves.iter().all(usable) {
        return done;
    }
    let (fresh, stale): (Vec<&Vdev>, Vec<&Vdev>) = leaves.into_iter().partition(|l| !l.is_stale());
    let (sources, targets) = if ctx.mode.resilver {
        (fresh.into_iter().take(1).collect::<Vec<_>>(), stale)
    } else if stale.is_empty() && ctx.mode.scrub {
        (fresh, Vec::new())
    } else {
        return done;
    };
    if sources.is_empty() {
        return done;
    }
    let at = |bp: &BlockPointer| bp.dva[0];
    let start = at(bps[0]).offset;
    let mut end = start;
    for bp in bps {
        let d = at(bp);
        if bp.dvas().iter().filter(|d| !d.is_empty()).count() != 1 || d.is_empty() || d.gang || d.vdev != top || d.offset < end {
            return done; // not what a run is made of: the caller's mistake, read them one by one
        }
        end = d.offset + bp.psize;
    }
    let len = (end - start) as usize;
    if len > 64 << 20 {
        return done;
    }
    // The range goes at its `direct_place`, so that a resilver's aligned runs are written past
    // the page cache.
    let align = crate::vdev::DIRECT_ALIGN;
    let place = |b: &Vec<u8>| crate::vdev::direct_place(b, start);
    bufs.resize_with(bufs.len().max(sources.len()), Vec::new);
    for (l, b) in sources.iter().zip(bufs.iter_mut()) {
        if b.len() < len + 2 * align {
            b.resize(len + 2 * align, 0);
        }
        let p = place(b);
        if l.read_leaf_into(start, &mut b[p..p + len]).is_err() {
            return done;
        }
    }
    let bufs = &bufs[..sources.len()];
    for (i, bp) in bps.iter().enumerate() {
        let o = (at(bp).offset - start) as usize;
        done[i] = bufs.iter().all(|b| {
            let o = place(b) + o;
            verify_bp(bp, &b[o..o + bp.psize as usize], ctx.salt)
        });
    }
    let base = place(&bufs[0]);
    // A resilver's writes: runs of verified blocks, each block next to the one before it.
    let mut i = 0;
    while i < bps.len() && !targets.is_empty() {
        if !done[i] {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < bps.len() && done[j] && at(bps[j]).offset == at(bps[j - 1]).offset + at(bps[j - 1]).asize {
            j += 1;
        }
        let (a, b) = (at(bps[i]).offset, at(bps[j - 1]).offset + bps[j - 1].psize);
        let bytes: u64 = bps[i..j].iter().map(|bp| bp.psize).sum();
        writes.push(RunWrite { offset: a, at: base + (a - start) as usize, len: (b - a) as usize, bytes, blocks: i..j, targets: targets.clone() });
        i = j;
    }
    done
}

/// A resilver's write of a run of adjacent verified blocks (`scan_run`): `len` bytes at `at`
/// in the range buffer go to `offset` on each of `targets`; `bytes` of them are the blocks'
/// (the rest, padding up to each block's allocated size, is what the source holds there too).
pub struct RunWrite<'a> {
    pub offset: u64,
    pub at: usize,
    pub len: usize,
    pub bytes: u64,
    /// The blocks of the run, as indexes into the `bps` of the `scan_run` call.
    pub blocks: std::ops::Range<usize>,
    pub targets: Vec<&'a Vdev>,
}

/// Write the runs `scan_run` handed back from the buffer it read them into (past the page
/// cache, O_DIRECT, where a run's offset and length are aligned: `scan_run` places the range
/// so that the buffer's addresses are too), counting what lands as repaired (the targets' scan_processed, `mode.repaired`). The runs whose write
/// failed on some target: those blocks are for `read_physical`, which repairs or logs them.
pub fn write_runs<'w, 'a>(mode: &ReadMode, buf: &[u8], writes: &'w [RunWrite<'a>]) -> Vec<&'w RunWrite<'a>> {
    let mut failed = Vec::new();
    for w in writes {
        let data = &buf[w.at..w.at + w.len];
        let mut ok = true;
        for t in &w.targets {
            if t.write_leaf_direct(w.offset, data).is_ok() {
                t.stats.scan_processed.fetch_add(w.bytes, std::sync::atomic::Ordering::Relaxed);
                mode.repaired.fetch_add(w.bytes, std::sync::atomic::Ordering::Relaxed);
            } else {
                ok = false;
            }
        }
        if !ok {
            failed.push(w);
        }
    }
    failed
}

/// Read `size` bytes at a DVA under `verify`.
pub fn read_dva(ctx: &ZioCtx, dva: &Dva, size: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<Vec<u8>> {
    let top = ctx
        .root
        .children
        .get(dva.vdev as usize)
        .ok_or_else(|| ZfsError::Invalid(format!("DVA names vdev {} which the pool does not have", dva.vdev)))?;
    if top.kind == crate::vdev::VdevKind::Indirect {
        return read_indirect(ctx, top, dva.offset, size, verify, 0);
    }
    top.read_mode(dva.offset, size, verify, ctx.mode)
}

/// How many removed vdevs a read may pass through (a mapping's destination on a vdev removed
/// later): more than there can be top-level vdevs means a loop in corrupt mappings.
const MAX_INDIRECT_DEPTH: usize = 64;

/// A read from a removed vdev (vdev_indirect_io_start): the range remapped, each piece read
/// from its destination (itself remapped when that vdev was removed too), the whole checked.
/// A block in one piece is read with the checksum, so a mirror moves on to a good side; a
/// split block's pieces are read as they are and verified together.
fn read_indirect(ctx: &ZioCtx, top: &Vdev, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool, depth: usize) -> Result<Vec<u8>> {
    if depth > MAX_INDIRECT_DEPTH {
        return Err(ZfsError::Invalid(format!("indirect vdev {}: mappings nest deeper than {MAX_INDIRECT_DEPTH}", top.id)));
    }
    let cfg = top.indirect.as_ref().ok_or_else(|| ZfsError::Invalid(format!("indirect vdev {} without its config", top.id)))?;
    let pieces = cfg
        .loaded(top.id)?
        .remap(offset, size)
        .map_err(|e| ZfsError::Invalid(format!("indirect vdev {}: read of {size:#x} bytes at {offset:#x}: {e}", top.id)))?;
    let read_piece = |p: &crate::vdev::indirect::Piece, verify: &dyn Fn(&[u8]) -> bool| -> Result<Vec<u8>> {
        let dst = ctx.root.children.get(p.vdev as usize).ok_or_else(|| ZfsError::Invalid(format!("indirect vdev {}: mapping names vdev {} which the pool does not have", top.id, p.vdev)))?;
        if dst.kind == crate::vdev::VdevKind::Indirect {
            read_indirect(ctx, dst, p.offset, p.len, verify, depth + 1)
        } else {
            dst.read_mode(p.offset, p.len, verify, ctx.mode)
        }
    };
    if let [p] = pieces.as_slice() {
        return read_piece(p, verify);
    }
    let mut data = Vec::with_capacity(size as usize);
    for p in &pieces {
        data.extend_from_slice(&read_piece(p, &|_| true)?);
    }
    if verify(&data) {
        Ok(data)
    } else {
        Err(ZfsError::Checksum { context: format!("indirect vdev {} offset {offset:#x} size {size:#x} ({} pieces)", top.id, pieces.len()) })
    }
}

/// The verifier a gang header's embedded checksum starts from (zio_checksum_gang_verifier):
/// the block's identity (DVA[0]) and physical birth, whichever copy is read.
fn gang_verifier(bp: &BlockPointer) -> [u64; 4] {
    [bp.dva[0].vdev, bp.dva[0].offset, bp.physical_birth(), 0]
}

/// The three child bps of gang block `bp`, from the header at its gang DVA `dva`.
fn read_gang_header(ctx: &ZioCtx, bp: &BlockPointer, dva: &Dva) -> Result<Vec<BlockPointer>> {
    let verifier = gang_verifier(bp);
    // In an encrypted dataset the header keeps only half of its checksum: the gang-header
    // function is not dedup-capable, so the upper words are folded in and then zeroed.
    let truncated = bp.encrypted && bp.typ != oxzfs_format::types::DMU_OT_OBJSET;
    let check = |d: &[u8]| match checksum::embedded_parts(d, checksum::ZIO_CHECKSUM_GANG_HEADER, verifier) {
        Ok(Some((c, s))) => {
            if truncated {
                c[0] ^ c[2] == s[0] && c[1] ^ c[3] == s[1] && s[2] == 0 && s[3] == 0
            } else {
                c == s
            }
        }
        _ => false,
    };
    let hdr = read_dva(ctx, dva, GANG_HEADER_SIZE, &check)?;
    let le = hdr_little_endian(&hdr);
    decode_gang_header(&hdr, le).map_err(|e| ZfsError::corrupt(format!("gang header of {bp}"), e))
}

/// The child bps of gang block `bp`, from the first of its header copies that verifies.
pub fn gang_children(ctx: &ZioCtx, bp: &BlockPointer) -> Result<Vec<BlockPointer>> {
    let mut last = None;
    for dva in bp.dvas().iter().filter(|d| !d.is_empty() && d.gang) {
        match read_gang_header(ctx, bp, dva) {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| ZfsError::Invalid(format!("{bp} has no gang DVA"))))
}

fn read_gang(ctx: &ZioCtx, bp: &BlockPointer, dva: &Dva, depth: usize) -> Result<Vec<u8>> {
    if depth > MAX_GANG_DEPTH {
        return Err(ZfsError::Invalid(format!("gang tree deeper than {MAX_GANG_DEPTH} at {bp}")));
    }
    let children = read_gang_header(ctx, bp, dva)?;
    let mut out = Vec::with_capacity(bp.psize as usize);
    for child in children.iter().filter(|c| !c.is_hole()) {
        let mut part = read_physical_at(ctx, child, depth + 1)?;
        out.append(&mut part);
        if out.len() as u64 >= bp.psize {
            break;
        }
    }
    if (out.len() as u64) < bp.psize {
        return Err(ZfsError::Invalid(format!("gang block {bp} holds only {} of {} bytes", out.len(), bp.psize)));
    }
    out.truncate(bp.psize as usize);
    Ok(out)
}

/// A gang header's byte order, from the magic of its embedded checksum trailer.
fn hdr_little_endian(hdr: &[u8]) -> bool {
    let n = hdr.len();
    if n < 40 {
        return true;
    }
    let m = u64::from_le_bytes(hdr[n - 40..n - 32].try_into().unwrap());
    m == 0x0210da7ab10c7a11
}

// ---------------------------------------------------------------------------------------------
// The write pipeline: compress → (embed) → checksum → allocate → vdev write.

/// How one block is to be written (the zio_prop_t of OpenZFS).
#[derive(Clone, Copy, Debug)]
pub struct WriteProps {
    pub typ: u8,
    pub level: u8,
    pub checksum: u8,
    pub compress: u8,
    /// zstd level stored in the frame header (0 = default) / unused for the others.
    pub complevel: u8,
    pub copies: usize,
    /// Whether a tiny block may be stored inside its bp (embedded_data enabled, level 0,
    /// not a type whose bp fill counts children).
    pub embed_ok: bool,
    /// Allocation class to try first.
    pub class: AllocClass,
    /// Deduplicate through the pool's dedup table (level-0 data of a dedup dataset; the
    /// checksum is then the dedup checksum), comparing bytes first when `dedup_verify`.
    pub dedup: bool,
    pub dedup_verify: bool,
}

/// The metaslab classes of OpenZFS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocClass {
    Normal,
    Special,
    Dedup,
    Log,
}

/// The dedup stage of the write pipeline (zio_ddt_write): a block whose dataset deduplicates is
/// handed to the pool's dedup tables, which add a reference to a copy already written or write
/// it (`ddt::Ddt` implements it; the syncing objset only sees this).
pub trait DedupWriter {
    #[allow(clippy::too_many_arguments)]
    /// The outcome, with the block's compressed bytes when it is stored compressed.
    fn dedup_write(&mut self, root: &Vdev, salt: &[u8; 32], alloc: &mut dyn DvaAllocator, data: &[u8], p: &WriteProps, verify: bool, txg: u64) -> Result<(Written, Option<Arc<Vec<u8>>>)>;
}

/// Where blocks go: the write pipeline asks for one DVA at a time.
pub trait DvaAllocator {
    /// Allocate room for `psize` physical bytes away from the block's other copies in `avoid`
    /// (another top-level vdev, else another metaslab, when possible). Returns the DVA
    /// (vdev, offset, asize) or None when the pool is full.
    fn alloc_dva(&mut self, class: AllocClass, psize: u64, txg: u64, avoid: &[Dva]) -> Option<Dva>;
    /// Give back a DVA this allocator handed out in this txg and that was never used (a
    /// gang tree or a set of copies that could not be completed).
    fn unalloc_dva(&mut self, dva: &Dva, txg: u64);
    /// The smallest allocation unit of the class (1 << min ashift).
    fn min_alloc(&self) -> u64;
}

/// What the pipeline produced for a block.
pub enum Written {
    /// All zeros: the caller stores a hole.
    Hole,
    Bp(BlockPointer),
}

fn is_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Run the write pipeline for `data` (the block's logical bytes, `lsize = data.len()`).
pub fn write_block(
    root: &Vdev,
    salt: &[u8; 32],
    alloc: &mut dyn DvaAllocator,
    data: &[u8],
    p: &WriteProps,
    txg: u64,
) -> Result<Written> {
    Ok(write_block_over(root, salt, alloc, data, p, txg, None)?.0)
}

/// The write pipeline, rewriting `prev` in place when it was born in this txg and the new
/// physical size equals its own (sync passes ≥ 2 converge this way, as OpenZFS's
/// zfs_sync_pass_rewrite). Otherwise new DVAs are allocated (the caller frees `prev`).
/// Returned with the outcome: the block's compressed bytes when it was compressed and written
/// whole (what the ARC keeps of it under zfs_compressed_arc_enabled).
pub fn write_block_over(
    root: &Vdev,
    salt: &[u8; 32],
    alloc: &mut dyn DvaAllocator,
    data: &[u8],
    p: &WriteProps,
    txg: u64,
    prev: Option<&BlockPointer>,
) -> Result<(Written, Option<Arc<Vec<u8>>>)> {
    let (bp, phys) = match prepare(salt, alloc.min_alloc(), data, p, txg)? {
        Prepared::Hole => return Ok((Written::Hole, None)),
        Prepared::Embedded(bp) => return Ok((Written::Bp(bp), None)),
        Prepared::Block { bp, phys } => (bp, phys),
    };
    let w = write_prepared(root, salt, alloc, bp, &phys, p, txg, prev)?;
    Ok((w, compressed_bytes(phys)))
}

/// The physical bytes of a prepared block when they are not the caller's (compressed).
pub fn compressed_bytes(phys: std::borrow::Cow<'_, [u8]>) -> Option<Arc<Vec<u8>>> {
    match phys {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(v) => Some(Arc::new(v)),
    }
}

/// The rest of `write_block_over` once the block is prepared: over `prev` when this txg's
/// earlier pass wrote it at the same size, else newly placed.
#[allow(clippy::too_many_arguments)]
fn write_prepared(root: &Vdev, salt: &[u8; 32], alloc: &mut dyn DvaAllocator, mut bp: BlockPointer, phys: &[u8], p: &WriteProps, txg: u64, prev: Option<&BlockPointer>) -> Result<Written> {
    if let Some(pb) = prev.filter(|pb| rewrites_in_place(pb, &bp, txg)) {
        bp.dva = pb.dva;
        if pb.is_gang() {
            // The same psize cuts into the same children: rewrite the tree where it is.
            let ctx = ZioCtx::new(root, salt);
            rewrite_gang(&ctx, &mut bp, phys, 0)?;
        } else {
            write_dvas(root, &bp, phys)?;
        }
        return Ok(Written::Bp(bp));
    }
    place(root, salt, alloc, &mut bp, phys, p, txg)?;
    Ok(Written::Bp(bp))
}

/// A block this txg's earlier sync pass wrote at the same physical size is rewritten where
/// it is (never a dedup block: its copies may be shared).
fn rewrites_in_place(prev: &BlockPointer, bp: &BlockPointer, txg: u64) -> bool {
    prev.birth == txg && !prev.embedded && !prev.dedup && !prev.is_hole() && prev.psize == bp.psize && prev.ndvas() >= 1
}

/// A batch whose blocks hold at least this many bytes in all is compressed, checksummed and
/// written on the worker pool; a smaller one runs on the caller (a pool's hand-off costs more
/// than a few small blocks' work).
const PARALLEL_MIN_BYTES: usize = 256 << 10;

/// One block of a batch (`write_blocks_over`): its logical bytes, its properties and the
/// block of the previous tree it replaces.
pub struct BlockWrite<'a> {
    pub data: &'a Arc<Vec<u8>>,
    pub p: WriteProps,
    pub prev: Option<BlockPointer>,
}

/// The physical bytes of a queued write: the caller's block as it is, or its compressed copy
/// (shared with the ARC, which keeps it).
struct Queued(Arc<Vec<u8>>);

impl Queued {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Blocks at least this big go out alone: gathering them into one write would copy each
/// (SPA_OLD_MAXBLOCKSIZE; a full record is a large write already).
const AGGREGATE_BELOW: u64 = 128 << 10;

/// The data writes of one objset's sync, gathered before they are issued (at the job's end,
/// or once they hold 64 MiB), as OpenZFS's vdev queues hold a txg's writes: sorted by device
/// and offset, a run of small blocks that lie
/// end to end on a mirror or a single device goes out as one write of at most
/// zfs_vdev_aggregation_limit bytes (the gaps a block's allocation leaves past its bytes
/// written as zeros), and the writes run on the worker pool. On a disk that pays per request
/// (a hard disk) a txg of thousands of small files becomes a few writes. raidz blocks go out
/// one by one: each block's columns and parity are its own.
#[derive(Default)]
pub struct WriteQueue {
    blocks: Vec<(BlockPointer, Queued)>,
    /// Bytes held (what the blocks will write).
    bytes: u64,
}

/// A queue holding this much goes out before the job's end: a large txg's compressed copies
/// are not all held at once, and its first writes overlap the rest of the job.
const QUEUE_FLUSH_BYTES: u64 = 64 << 20;

impl WriteQueue {
    /// Write everything queued; on a failure, the first error (the sync fails with it).
    pub fn flush(&mut self, root: &Vdev) -> Result<()> {
        use rayon::prelude::*;
        let blocks = std::mem::take(&mut self.blocks);
        self.bytes = 0;
        if blocks.is_empty() {
            return Ok(());
        }
        // One entry per copy: (top-level vdev, offset, asize, block).
        let mut writes: Vec<(u64, u64, u64, usize)> = Vec::new();
        for (i, (bp, _)) in blocks.iter().enumerate() {
            for d in bp.dva.iter().filter(|d| !d.is_empty()) {
                writes.push((d.vdev, d.offset, d.asize, i));
            }
        }
        writes.sort_unstable();
        let limit = crate::tunables::vdev_aggregation_limit();
        // Runs of writes issued as one: indices into `writes`.
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for (k, &(vdev, off, asize, i)) in writes.iter().enumerate() {
            let joins = runs.last().is_some_and(|r| {
                let (pv, po, pa, _) = writes[r.end - 1];
                pv == vdev
                    && po + pa == off
                    && pa < AGGREGATE_BELOW
                    && asize < AGGREGATE_BELOW
                    && off + blocks[i].1.bytes().len() as u64 - writes[r.start].1 <= limit
                    && root.children.get(vdev as usize).is_some_and(|t| !matches!(t.kind, crate::vdev::VdevKind::Raidz { .. }))
            });
            if joins {
                runs.last_mut().expect("a run").end = k + 1;
            } else {
                runs.push(k..k + 1);
            }
        }
        // The worker threads count their writes in the caller's class (a sync's async writes).
        let class = crate::vdev::iostat::current_class();
        let waits = crate::vdev::gate_waits();
        // A mirror's or a single device's runs go out one after another on one worker, in
        // offset order: its leaves take buffered writes one at a time anyway (a file's inode
        // lock), and two workers writing the same file spin on that lock (a tenth of a
        // sequential write's CPU). Different top-level vdevs, and a raidz's blocks (each
        // block's columns are the children's own writes), still go out side by side.
        let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
        for (k, r) in runs.iter().enumerate() {
            let vdev = writes[r.start].0;
            let raidz = root.children.get(vdev as usize).is_some_and(|t| matches!(t.kind, crate::vdev::VdevKind::Raidz { .. }));
            match groups.last_mut() {
                Some(g) if !raidz && writes[runs[g.start].start].0 == vdev => g.end = k + 1,
                _ => groups.push(k..k + 1),
            }
        }
        groups.par_iter().try_for_each(|g| {
            runs[g.clone()].iter().try_for_each(|r| {
                let (vdev, off, _, i) = writes[r.start];
                let top = root.children.get(vdev as usize).ok_or_else(|| ZfsError::Invalid(format!("DVA on vdev {vdev}")))?;
                let write = |data: &[u8]| crate::vdev::iostat::in_class(class, || crate::vdev::with_gate_waits(waits, || top_write(root, top, off, data)));
                if r.len() == 1 {
                    return write(blocks[i].1.bytes());
                }
                let (lo, hi) = (writes[r.start].1, writes[r.end - 1].1 + blocks[writes[r.end - 1].3].1.bytes().len() as u64);
                let mut buf = vec![0u8; (hi - lo) as usize];
                for &(_, o, _, j) in &writes[r.clone()] {
                    let b = blocks[j].1.bytes();
                    buf[(o - lo) as usize..(o - lo) as usize + b.len()].copy_from_slice(b);
                }
                write(&buf)
            })
        })
    }
}

/// `write_block_over` for a batch of blocks, as OpenZFS's zio pipeline spreads a txg's writes
/// over its issue taskqs: compression and checksums run on the worker pool, the DVAs are
/// allocated in the batch's order on the caller (the same allocations as one block after
/// another), and the contiguous blocks' writes then go to `queue` (the caller flushes it
/// before anything points at them from disk) or, without one, out on the pool at once. A
/// block that gangs or is rewritten in place is written on the caller when it is allocated.
/// Each block's outcome, in order, with its compressed bytes when it was compressed and
/// written whole (what the ARC keeps of it under zfs_compressed_arc_enabled).
pub fn write_blocks_over<'a>(root: &Vdev, salt: &[u8; 32], alloc: &mut dyn DvaAllocator, items: &[BlockWrite<'a>], txg: u64, queue: Option<&mut WriteQueue>) -> Result<Vec<(Written, Option<Arc<Vec<u8>>>)>> {
    use rayon::prelude::*;
    let parallel = items.len() > 1 && items.iter().map(|b| b.data.len()).sum::<usize>() >= PARALLEL_MIN_BYTES;
    let min_alloc = alloc.min_alloc();
    let prep = |b: &BlockWrite<'a>| prepare(salt, min_alloc, b.data.as_slice(), &b.p, txg);
    let prepared: Vec<Result<Prepared>> = if parallel { items.par_iter().map(prep).collect() } else { items.iter().map(prep).collect() };
    let mut out = Vec::with_capacity(items.len());
    let mut own = WriteQueue::default();
    let defer = queue.is_some() || parallel;
    for (b, pr) in items.iter().zip(prepared) {
        let (mut bp, phys) = match pr? {
            Prepared::Hole => {
                out.push((Written::Hole, None));
                continue;
            }
            Prepared::Embedded(bp) => {
                out.push((Written::Bp(bp), None));
                continue;
            }
            Prepared::Block { bp, phys } => (bp, phys),
        };
        let in_place = b.prev.as_ref().is_some_and(|pb| rewrites_in_place(pb, &bp, txg));
        let psize = phys.len() as u64;
        let dvas = if in_place || psize >= force_ganging() { None } else { alloc_copies(alloc, b.p.class, psize, b.p.copies.clamp(1, 3), txg) };
        let Some(dvas) = dvas else {
            out.push((write_prepared(root, salt, alloc, bp, &phys, &b.p, txg, b.prev.as_ref())?, None));
            continue;
        };
        for (slot, d) in bp.dva.iter_mut().zip(&dvas) {
            *slot = *d;
        }
        let compressed = compressed_bytes(phys);
        let bytes = compressed.clone().unwrap_or_else(|| b.data.clone());
        if defer {
            own.bytes += bytes.len() as u64;
            own.blocks.push((bp.clone(), Queued(bytes)));
        } else {
            write_dvas(root, &bp, &bytes)?;
        }
        out.push((Written::Bp(bp), compressed));
    }
    match queue {
        Some(q) => {
            q.bytes += own.bytes;
            q.blocks.append(&mut own.blocks);
            if q.bytes >= QUEUE_FLUSH_BYTES {
                q.flush(root)?;
            }
        }
        None => own.flush(root)?,
    }
    Ok(out)
}

/// A block through zio_write_compress: all zeros (a hole), embedded in its bp, or its
/// physical bytes and a bp with everything but the DVAs.
pub enum Prepared<'a> {
    Hole,
    Embedded(BlockPointer),
    /// `phys` borrows the caller's bytes when the block is stored as it is (not compressed).
    Block { bp: BlockPointer, phys: std::borrow::Cow<'a, [u8]> },
}

/// Compress (at most 7/8 of lsize, rounded to `min_alloc`), embed when tiny, checksum the
/// physical bytes.
pub fn prepare<'a>(salt: &[u8; 32], min_alloc: u64, data: &'a [u8], p: &WriteProps, txg: u64) -> Result<Prepared<'a>> {
    let lsize = data.len() as u64;
    assert!(lsize > 0 && lsize % 512 == 0 && lsize <= MAX_BLOCK, "write of {lsize} bytes");
    let compressing = p.compress != compress::ZIO_COMPRESS_OFF;
    if compressing && is_zero(data) {
        return Ok(Prepared::Hole);
    }
    let mut comp = compress::ZIO_COMPRESS_OFF;
    let mut phys = std::borrow::Cow::Borrowed(data);
    if compressing {
        // Compress only if it saves at least 1/8 (zio_compress_data's d_len).
        let max = (lsize - (lsize >> 3)) as usize;
        if let Some(c) = compress::compress(p.compress, p.complevel, data, max) {
            if p.embed_ok && p.level == 0 && c.len() <= oxzfs_format::blkptr::BPE_PAYLOAD_SIZE {
                return Ok(Prepared::Embedded(BlockPointer::new_embedded(&c, lsize, p.compress, p.typ, txg)));
            }
            let rounded = (c.len() as u64).div_ceil(min_alloc) * min_alloc;
            if rounded < lsize {
                let mut c = c;
                c.resize(rounded as usize, 0);
                phys = std::borrow::Cow::Owned(c);
                comp = p.compress;
            }
        }
    }
    let psize = phys.len() as u64;
    let cksum = checksum::compute(p.checksum, &phys, true, salt)
        .map_err(|e| ZfsError::Invalid(format!("checksum {}: {e}", p.checksum)))?;
    let bp = BlockPointer {
        lsize,
        psize,
        compress: comp,
        checksum: p.checksum,
        typ: p.typ,
        level: p.level,
        little_endian: true,
        birth: txg,
        fill: 1,
        cksum,
        ..Default::default()
    };
    Ok(Prepared::Block { bp, phys })
}

/// Allocate `p.copies` DVAs for a prepared block (contiguous or ganged) and write it; when
/// the pool cannot hold them all, fewer ditto copies rather than failing the sync.
pub fn place(root: &Vdev, salt: &[u8; 32], alloc: &mut dyn DvaAllocator, bp: &mut BlockPointer, phys: &[u8], p: &WriteProps, txg: u64) -> Result<()> {
    let copies = p.copies.clamp(1, 3);
    for n in (1..=copies).rev() {
        let mut placer = Placer { root, salt, alloc: &mut *alloc, class: p.class, copies: n, txg, placed: Vec::new() };
        if placer.place(bp, phys, 0)? {
            return Ok(());
        }
    }
    Err(ZfsError::Posix(28, "out of space".into()))
}

/// The metaslab_force_ganging tunable (or OXZFS_FORCE_GANGING=SIZE): every allocation of at
/// least SIZE physical bytes is written as a gang block (OpenZFS's, made deterministic).
fn force_ganging() -> u64 {
    crate::tunables::force_ganging()
}

/// `copies` DVAs of `psize` bytes each (on different vdevs or metaslabs when possible), or
/// None with nothing allocated.
fn alloc_copies(alloc: &mut dyn DvaAllocator, class: AllocClass, psize: u64, copies: usize, txg: u64) -> Option<Vec<Dva>> {
    let mut got: Vec<Dva> = Vec::with_capacity(copies);
    for _ in 0..copies {
        match alloc.alloc_dva(class, psize, txg, &got) {
            Some(d) => got.push(d),
            None => {
                for d in &got {
                    alloc.unalloc_dva(d, txg);
                }
                return None;
            }
        }
    }
    Some(got)
}

/// Places the blocks of one write (a block and, when it gangs, its children): the pool's
/// vdevs, the allocator, and everything allocated so far (to give back when a tree fails).
struct Placer<'a> {
    root: &'a Vdev,
    salt: &'a [u8; 32],
    alloc: &'a mut dyn DvaAllocator,
    class: AllocClass,
    copies: usize,
    txg: u64,
    placed: Vec<Dva>,
}

impl Placer<'_> {
    /// Put `phys` (already checksummed into `bp`) on `copies` DVAs and write it: contiguous
    /// when the allocator finds room, else as a gang tree (zio_dva_allocate's fallback).
    /// Ok(false) when there is no room; what this call allocated is then given back.
    fn place(&mut self, bp: &mut BlockPointer, phys: &[u8], depth: usize) -> Result<bool> {
        let psize = phys.len() as u64;
        let can_gang = psize > SPA_MINBLOCKSIZE && depth < MAX_GANG_DEPTH;
        let forced = can_gang && psize >= force_ganging();
        if !forced && self.contiguous(bp, phys)? {
            return Ok(true);
        }
        if can_gang && self.gang(bp, phys, depth)? {
            return Ok(true);
        }
        if forced {
            // A forced gang that found no room for its tree may still fit in one piece.
            return self.contiguous(bp, phys);
        }
        Ok(false)
    }

    /// `phys` on `copies` contiguous DVAs, written; Ok(false) with nothing allocated when the
    /// allocator has no such room.
    fn contiguous(&mut self, bp: &mut BlockPointer, phys: &[u8]) -> Result<bool> {
        let Some(dvas) = alloc_copies(self.alloc, self.class, phys.len() as u64, self.copies, self.txg) else { return Ok(false) };
        bp.dva = Default::default();
        for (slot, d) in bp.dva.iter_mut().zip(&dvas) {
            *slot = *d;
        }
        self.placed.extend(dvas);
        write_dvas(self.root, bp, phys)?;
        Ok(true)
    }

    /// Write `phys` as a gang block (zio_write_gang_block): a 512-byte header on one more copy
    /// than the data gets (at most three), whose three bps hold the data cut in pieces, each
    /// placed like any block (ganged again when it too finds no room). The header's embedded
    /// checksum starts from the verifier of `bp`; each gang DVA of `bp` carries the gang bit
    /// and the asize of the header plus the children's copies of that index.
    fn gang(&mut self, bp: &mut BlockPointer, phys: &[u8], depth: usize) -> Result<bool> {
        let mark = self.placed.len();
        let gbh_copies = (self.copies + 1).min(3);
        let Some(hdr) = alloc_copies(self.alloc, self.class, GANG_HEADER_SIZE, gbh_copies, self.txg) else { return Ok(false) };
        self.placed.extend(hdr.iter().copied());
        bp.dva = Default::default();
        for (slot, d) in bp.dva.iter_mut().zip(&hdr) {
            *slot = Dva { gang: true, ..*d };
        }
        let mut gbh = vec![0u8; GANG_HEADER_SIZE as usize];
        let mut off = 0usize;
        for (g, n) in gang_piece_sizes(phys.len() as u64).into_iter().enumerate() {
            let piece = &phys[off..off + n as usize];
            off += n as usize;
            let mut child = gang_child_bp(bp, piece, self.salt, self.txg)?;
            if !self.place(&mut child, piece, depth + 1)? {
                for d in self.placed.drain(mark..) {
                    self.alloc.unalloc_dva(&d, self.txg);
                }
                bp.dva = Default::default();
                return Ok(false);
            }
            for (pd, cd) in bp.dva.iter_mut().zip(child.dva.iter()) {
                if !cd.is_empty() {
                    pd.asize += cd.asize;
                }
            }
            gbh[g * 128..(g + 1) * 128].copy_from_slice(&child.encode(true));
        }
        write_gang_header(self.root, bp, &mut gbh)?;
        Ok(true)
    }
}

/// The sizes gang children are cut into (zio_write_gang_block): the rest divided by the
/// slots left, rounded up to SPA_MINBLOCKSIZE.
fn gang_piece_sizes(psize: u64) -> Vec<u64> {
    let mut out = Vec::with_capacity(SPA_GBH_NBLKPTRS);
    let mut resid = psize;
    for g in 0..SPA_GBH_NBLKPTRS as u64 {
        if resid == 0 {
            break;
        }
        let n = (resid / (SPA_GBH_NBLKPTRS as u64 - g)).div_ceil(SPA_MINBLOCKSIZE) * SPA_MINBLOCKSIZE;
        let n = n.clamp(SPA_MINBLOCKSIZE.min(resid), resid);
        out.push(n);
        resid -= n;
    }
    out
}

/// The bp of one gang child: `piece` stored uncompressed, type none, level 0, the leader's
/// checksum function (fill stays 0, as OpenZFS leaves it).
fn gang_child_bp(parent: &BlockPointer, piece: &[u8], salt: &[u8; 32], txg: u64) -> Result<BlockPointer> {
    let cksum = checksum::compute(parent.checksum, piece, true, salt)
        .map_err(|e| ZfsError::Invalid(format!("checksum {}: {e}", parent.checksum)))?;
    Ok(BlockPointer {
        lsize: piece.len() as u64,
        psize: piece.len() as u64,
        compress: compress::ZIO_COMPRESS_OFF,
        checksum: parent.checksum,
        typ: oxzfs_format::types::DMU_OT_NONE,
        level: 0,
        little_endian: true,
        birth: txg,
        fill: 0,
        cksum,
        ..Default::default()
    })
}

/// Seal a gang header (its embedded checksum from `bp`'s verifier) and write it at each of
/// `bp`'s gang DVAs.
fn write_gang_header(root: &Vdev, bp: &BlockPointer, gbh: &mut [u8]) -> Result<()> {
    checksum::write_embedded(gbh, checksum::ZIO_CHECKSUM_GANG_HEADER, gang_verifier(bp), true);
    for d in bp.dva.iter().filter(|d| !d.is_empty()) {
        let top = root.children.get(d.vdev as usize).ok_or_else(|| ZfsError::Invalid(format!("DVA on vdev {}", d.vdev)))?;
        top_write(root, top, d.offset, gbh)?;
    }
    Ok(())
}

/// Rewrite gang block `bp` in place with new physical bytes of the same size (a later sync
/// pass): the children keep their DVAs and get the new pieces and checksums, then the header.
fn rewrite_gang(ctx: &ZioCtx, bp: &mut BlockPointer, phys: &[u8], depth: usize) -> Result<()> {
    if depth > MAX_GANG_DEPTH {
        return Err(ZfsError::Invalid(format!("gang tree deeper than {MAX_GANG_DEPTH} at {bp}")));
    }
    let children = gang_children(ctx, bp)?;
    let mut gbh = vec![0u8; GANG_HEADER_SIZE as usize];
    let mut off = 0usize;
    for (g, old) in children.iter().enumerate().filter(|(_, c)| !c.is_hole()) {
        let end = off + old.psize as usize;
        let piece = phys.get(off..end).ok_or_else(|| ZfsError::Invalid(format!("gang block {bp} children exceed its psize")))?;
        off = end;
        let mut child = gang_child_bp(bp, piece, ctx.salt, old.birth)?;
        child.dva = old.dva;
        if old.is_gang() {
            rewrite_gang(ctx, &mut child, piece, depth + 1)?;
        } else {
            write_dvas(ctx.root, &child, piece)?;
        }
        gbh[g * 128..(g + 1) * 128].copy_from_slice(&child.encode(true));
    }
    if off != phys.len() {
        return Err(ZfsError::Invalid(format!("gang block {bp} children hold {off} of {} bytes", phys.len())));
    }
    write_gang_header(ctx.root, bp, &mut gbh)
}

/// Where allocation `d` lives: itself, or on a removed (indirect) vdev the ranges its mapping
/// sends it to (metaslab_free_impl and metaslab_claim_impl through vdev_op_remap).
fn concrete_dvas(root: &Vdev, d: Dva, out: &mut Vec<Dva>, depth: usize) -> Result<()> {
    let top = root.children.get(d.vdev as usize).ok_or_else(|| ZfsError::Invalid(format!("DVA names vdev {} which the pool does not have", d.vdev)))?;
    let Some(cfg) = top.indirect.as_ref() else {
        out.push(d);
        return Ok(());
    };
    if depth > MAX_INDIRECT_DEPTH {
        return Err(ZfsError::Invalid(format!("indirect vdev {}: mappings nest deeper than {MAX_INDIRECT_DEPTH}", top.id)));
    }
    let pieces = cfg.loaded(top.id)?.remap(d.offset, d.asize).map_err(|e| ZfsError::Invalid(format!("indirect vdev {}: allocation {d:?}: {e}", top.id)))?;
    for p in pieces {
        concrete_dvas(root, Dva { vdev: p.vdev, offset: p.offset, asize: p.len, gang: false }, out, depth + 1)?;
    }
    Ok(())
}

/// Every allocation behind `bp`, as the frees of OpenZFS see them (on removed vdevs, where
/// their mappings put them): its DVAs (a gang DVA
/// counts only its header) and, for a gang block, those of every child down the tree.
pub fn bp_allocations(ctx: &ZioCtx, bp: &BlockPointer, out: &mut Vec<Dva>) -> Result<()> {
    bp_allocations_at(ctx, bp, out, 0, true)
}

/// Every allocation behind `bp` as its block pointers name them, those on removed vdevs left
/// as they are: what a free hands the allocator, which sends them through the mappings and
/// marks them obsolete on the way (metaslab_free_impl).
pub fn bp_frees(ctx: &ZioCtx, bp: &BlockPointer, out: &mut Vec<Dva>) -> Result<()> {
    bp_allocations_at(ctx, bp, out, 0, false)
}

fn bp_allocations_at(ctx: &ZioCtx, bp: &BlockPointer, out: &mut Vec<Dva>, depth: usize, remap: bool) -> Result<()> {
    if depth > MAX_GANG_DEPTH {
        return Err(ZfsError::Invalid(format!("gang tree deeper than {MAX_GANG_DEPTH} at {bp}")));
    }
    for d in bp.dvas().iter().filter(|d| !d.is_empty()) {
        let d = if d.gang {
            let top = ctx.root.children.get(d.vdev as usize).ok_or_else(|| ZfsError::Invalid(format!("DVA names vdev {} which the pool does not have", d.vdev)))?;
            Dva { asize: top.psize_to_asize(GANG_HEADER_SIZE), gang: false, ..*d }
        } else {
            *d
        };
        if remap {
            concrete_dvas(ctx.root, d, out, 0)?;
        } else {
            ctx.root.children.get(d.vdev as usize).ok_or_else(|| ZfsError::Invalid(format!("DVA names vdev {} which the pool does not have", d.vdev)))?;
            out.push(d);
        }
    }
    if bp.is_gang() {
        for child in gang_children(ctx, bp)?.iter().filter(|c| !c.is_hole()) {
            bp_allocations_at(ctx, child, out, depth + 1, remap)?;
        }
    }
    Ok(())
}

/// Write the physical bytes of a block to each of its DVAs.
pub(crate) fn write_dvas(root: &Vdev, bp: &BlockPointer, phys: &[u8]) -> Result<()> {
    for d in bp.dva.iter().filter(|d| !d.is_empty()) {
        let top = root.children.get(d.vdev as usize).ok_or_else(|| ZfsError::Invalid(format!("DVA on vdev {}", d.vdev)))?;
        top_write(root, top, d.offset, phys)?;
    }
    Ok(())
}

/// A txg sync's write to top-level vdev `top`: while it reaches no device, the pool's I/O is
/// suspended and the write waits to be tried again (`IoGate`).
pub(crate) fn top_write(root: &Vdev, top: &Vdev, offset: u64, data: &[u8]) -> Result<()> {
    root.stats.io_gate.write_or_wait(|| top.write(offset, data))
}

/// A pseudo-random u64 (salts, guids): from the OS.
pub fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    let v = u64::from_le_bytes(b);
    if v == 0 {
        0x5eed_0f_0a2f5
    } else {
        v
    }
}

#[cfg(test)]
pub(crate) mod write_tests {
    use super::*;
    use crate::vdev::{BlockDevice, DeviceMap, FileDevice};
    use oxzfs_format::nvlist::{NvList, NvValue};
    use std::sync::Arc;

    /// A bump allocator over one top-level vdev (enough to exercise the pipeline).
    pub(crate) struct Bump {
        pub(crate) next: u64,
        pub(crate) top: Arc<Vdev>,
    }
    impl DvaAllocator for Bump {
        fn alloc_dva(&mut self, _c: AllocClass, psize: u64, _txg: u64, _avoid: &[Dva]) -> Option<Dva> {
            let asize = match self.top.kind {
                crate::vdev::VdevKind::Raidz { nparity } => crate::vdev::raidz::asize(psize, self.top.ashift, self.top.children.len(), nparity as usize),
                _ => psize.div_ceil(1 << self.top.ashift) << self.top.ashift,
            };
            let d = Dva { vdev: 0, offset: self.next, asize, gang: false };
            self.next += asize;
            Some(d)
        }
        fn unalloc_dva(&mut self, _dva: &Dva, _txg: u64) {}
        fn min_alloc(&self) -> u64 {
            1 << self.top.ashift
        }
    }

    /// A bump allocator that has no room for anything above `limit` bytes (a fragmented
    /// pool), recording what it hands out and takes back.
    struct Frag {
        bump: Bump,
        limit: u64,
        live: Vec<Dva>,
    }
    impl DvaAllocator for Frag {
        fn alloc_dva(&mut self, c: AllocClass, psize: u64, txg: u64, avoid: &[Dva]) -> Option<Dva> {
            if psize > self.limit {
                return None;
            }
            let d = self.bump.alloc_dva(c, psize, txg, avoid)?;
            self.live.push(d);
            Some(d)
        }
        fn unalloc_dva(&mut self, dva: &Dva, _txg: u64) {
            let i = self.live.iter().position(|d| d == dva).expect("unalloc of a DVA never allocated");
            self.live.remove(i);
        }
        fn min_alloc(&self) -> u64 {
            self.bump.min_alloc()
        }
    }

    fn sorted(mut v: Vec<Dva>) -> Vec<(u64, u64, u64)> {
        let mut out: Vec<_> = v.drain(..).map(|d| (d.vdev, d.offset, d.asize)).collect();
        out.sort();
        out
    }

    /// A block that finds no contiguous room is written as a gang tree (nested when the
    /// pieces are still too big): it reads back, its DVAs carry the gang bit and the asize of
    /// the whole tree, the free walk finds exactly what was allocated, and a rewrite of the
    /// same size in a later pass keeps every DVA.
    #[test]
    fn blocks_without_room_are_ganged() {
        let salt = [5u8; 32];
        for (kind, n, p, ashift) in [("mirror", 2, 0, 9), ("raidz", 3, 1, 12)] {
            let (_d, root, _) = pool(kind, n, p, ashift);
            let top = root.children[0].clone();
            for (limit, copies) in [(48u64 << 10, 1usize), (16 << 10, 2), (4 << 10, 3)] {
                let mut alloc = Frag { bump: Bump { next: 0, top: top.clone() }, limit, live: Vec::new() };
                let data: Vec<u8> = (0..128u32 << 10).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
                let props = WriteProps { typ: 19, level: 0, checksum: checksum::ZIO_CHECKSUM_FLETCHER_4, compress: compress::ZIO_COMPRESS_OFF, complevel: 0, copies, embed_ok: false, class: AllocClass::Normal, dedup: false, dedup_verify: false };
                let Written::Bp(bp) = write_block(&root, &salt, &mut alloc, &data, &props, 9).unwrap() else { panic!("hole") };
                assert!(bp.is_gang(), "{kind} limit {limit}: {bp}");
                assert_eq!(bp.ndvas(), (copies + 1).min(3), "one more header copy than data copies");
                let ctx = ZioCtx::new(&root, &salt);
                assert_eq!(read_bp(&ctx, &bp).unwrap(), data, "{kind} limit {limit}");
                let mut all = Vec::new();
                bp_allocations(&ctx, &bp, &mut all).unwrap();
                assert_eq!(sorted(all.clone()), sorted(alloc.live.clone()), "the free walk finds every allocation");
                assert!(all.iter().all(|d| d.asize <= top.psize_to_asize(limit.max(512))));
                // DVA[i] of the leader accounts its header and the children's copies i.
                let hdr = top.psize_to_asize(512);
                let data_total: u64 = all.iter().map(|d| d.asize).sum::<u64>() - hdr * bp.ndvas() as u64;
                let deep_headers = all.len() as u64 - bp.ndvas() as u64;
                assert!(bp.dva.iter().all(|d| d.is_empty() || d.gang));
                assert_eq!(bp.asize_total(), all.iter().map(|d| d.asize).sum::<u64>(), "{kind} limit {limit}: {deep_headers} {data_total}");
                // A later pass rewrites the same size in place.
                let data2: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
                let (Written::Bp(bp2), _) = write_block_over(&root, &salt, &mut alloc, &data2, &props, 9, Some(&bp)).unwrap() else { panic!() };
                assert_eq!(bp2.dva, bp.dva);
                assert_ne!(bp2.cksum, bp.cksum);
                assert_eq!(read_bp(&ctx, &bp2).unwrap(), data2);
                let mut all2 = Vec::new();
                bp_allocations(&ctx, &bp2, &mut all2).unwrap();
                assert_eq!(sorted(all2), sorted(alloc.live.clone()));
            }
            // No room even for the pieces: nothing stays allocated.
            let mut alloc = Frag { bump: Bump { next: 0, top: top.clone() }, limit: 0, live: Vec::new() };
            let props = WriteProps { typ: 19, level: 0, checksum: 7, compress: compress::ZIO_COMPRESS_OFF, complevel: 0, copies: 1, embed_ok: false, class: AllocClass::Normal, dedup: false, dedup_verify: false };
            assert!(write_block(&root, &salt, &mut alloc, &[7u8; 8192], &props, 9).is_err());
            assert!(alloc.live.is_empty());
        }
    }

    #[test]
    fn gang_pieces_cover_the_block() {
        for psize in [1024u64, 1536, 4096, 131072, 131072 + 512, 16 << 20] {
            let v = gang_piece_sizes(psize);
            assert_eq!(v.iter().sum::<u64>(), psize);
            assert!(v.len() <= 3 && v.iter().all(|n| n % 512 == 0 && *n > 0));
        }
        assert_eq!(gang_piece_sizes(131072), vec![44032, 43520, 43520]);
        assert_eq!(crate::tunables::parse_value("64K"), Some(65536));
        assert_eq!(crate::tunables::parse_value("4096"), Some(4096));
        assert_eq!(crate::tunables::parse_value("x"), None);
    }

    pub(crate) fn pool(kind: &str, n: usize, nparity: u64, ashift: u64) -> (tempfile_dir::Dir, Arc<Vdev>, Arc<Vdev>) {
        let dir = tempfile_dir::Dir::new();
        let mut devices = DeviceMap::new();
        let mut kids = Vec::new();
        for i in 0..n {
            let p = dir.path().join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(64 << 20).unwrap();
            let d: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&p, true).unwrap());
            devices.insert(100 + i as u64, (p.clone(), d));
            let mut c = NvList::new();
            c.add_str("type", "file");
            c.add_u64("id", i as u64);
            c.add_u64("guid", 100 + i as u64);
            kids.push(c);
        }
        let mut top = NvList::new();
        top.add_str("type", kind);
        top.add_u64("id", 0);
        top.add_u64("guid", 7);
        top.add_u64("ashift", ashift);
        top.add_u64("asize", 50 << 20);
        if kind == "raidz" {
            top.add_u64("nparity", nparity);
        }
        top.insert("children", NvValue::NvListArray(kids));
        let mut root = NvList::new();
        root.add_str("type", "root");
        root.add_u64("id", 0);
        root.add_u64("guid", 1);
        root.insert("children", NvValue::NvListArray(vec![top]));
        let full = Vdev::from_config(&root, &devices, 0).unwrap();
        devices.remove(&100);
        let degraded = Vdev::from_config(&root, &devices, 0).unwrap();
        (dir, full, degraded)
    }

    pub(crate) mod tempfile_dir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!("oxzfs-zio-{}-{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    /// Blocks written through the pipeline read back (checksum verified, decompressed) on
    /// mirror and raidz1-3, compressed or not, with ditto copies, and survive losing a child.
    #[test]
    fn written_blocks_read_back_on_every_layout() {
        let salt = [3u8; 32];
        for (kind, n, p, ashift) in [("mirror", 2, 0, 9), ("raidz", 3, 1, 9), ("raidz", 5, 2, 12), ("raidz", 7, 3, 9)] {
            let (_d, root, degraded) = pool(kind, n, p, ashift);
            let top = root.children[0].clone();
            let mut alloc = Bump { next: 0, top: top.clone() };
            let mut seed = 0x1234_5678u64;
            for (i, &(lsize, comp, copies)) in [(131072u64, compress::ZIO_COMPRESS_LZ4, 1usize), (4096, compress::ZIO_COMPRESS_OFF, 2), (16384, compress::ZIO_COMPRESS_GZIP_6, 3), (512, compress::ZIO_COMPRESS_ZLE, 1)].iter().enumerate() {
                // Half random, half repetitive: compressible but not trivially.
                let mut data = vec![0u8; lsize as usize];
                for (j, b) in data.iter_mut().enumerate() {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    *b = if j % 2 == 0 { (seed >> 56) as u8 } else { (j % 7) as u8 };
                }
                let props = WriteProps { typ: 19, level: 0, checksum: checksum::ZIO_CHECKSUM_FLETCHER_4, compress: comp, complevel: 0, copies, embed_ok: false, class: AllocClass::Normal, dedup: false, dedup_verify: false };
                let Written::Bp(bp) = write_block(&root, &salt, &mut alloc, &data, &props, 9).unwrap() else { panic!("hole") };
                assert_eq!((bp.lsize, bp.birth, bp.ndvas()), (lsize, 9, copies), "{kind} block {i}");
                assert!(bp.psize <= lsize && (bp.compress == compress::ZIO_COMPRESS_OFF || bp.psize % (1 << ashift) == 0));
                let ctx = ZioCtx::new(&root, &salt);
                assert_eq!(read_bp(&ctx, &bp).unwrap(), data, "{kind} block {i}");
                // Lose the first child: the block is still readable (parity or the mirror).
                let dctx = ZioCtx::new(&degraded, &salt);
                assert_eq!(read_bp(&dctx, &bp).unwrap(), data, "{kind} block {i} degraded");
            }
            // All zeros with compression: a hole; tiny compressible: embedded in the bp.
            let props = WriteProps { typ: 19, level: 0, checksum: 7, compress: compress::ZIO_COMPRESS_LZ4, complevel: 0, copies: 1, embed_ok: true, class: AllocClass::Normal, dedup: false, dedup_verify: false };
            assert!(matches!(write_block(&root, &salt, &mut alloc, &[0u8; 4096], &props, 9).unwrap(), Written::Hole));
            let small = b"hello, world\n".repeat(40);
            let mut blk = small.clone();
            blk.resize(1024, 0);
            let Written::Bp(bp) = write_block(&root, &salt, &mut alloc, &blk, &props, 9).unwrap() else { panic!() };
            assert!(bp.embedded && bp.psize <= 112);
            assert_eq!(read_bp(&ZioCtx::new(&root, &salt), &bp).unwrap(), blk);
        }
    }

    /// A batch through the write queue (as a sync writes a dnode's blocks): small blocks
    /// lying end to end go out merged, large ones and raidz blocks alone; every block reads
    /// back, on each copy, after the flush, and nothing is on disk before it.
    #[test]
    fn queued_batches_read_back_after_the_flush() {
        let salt = [5u8; 32];
        for (kind, n, p, ashift) in [("mirror", 2, 0, 12), ("mirror", 2, 0, 9), ("raidz", 3, 1, 12)] {
            let (_d, root, _) = pool(kind, n, p, ashift);
            let mut alloc = Bump { next: 0, top: root.children[0].clone() };
            let mut seed = 0x9e37_79b9u64;
            let mut datas: Vec<Arc<Vec<u8>>> = Vec::new();
            let mut props = Vec::new();
            for (i, lsize) in [1536u64, 4096, 512, 8192, 131072, 2560, 3584, 131072, 1024].into_iter().enumerate() {
                let mut data = vec![0u8; lsize as usize];
                for (j, b) in data.iter_mut().enumerate() {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    *b = if i % 3 == 0 { (j % 13) as u8 } else { (seed >> 56) as u8 };
                }
                datas.push(Arc::new(data));
                let compress = if i % 3 == 0 { compress::ZIO_COMPRESS_LZ4 } else { compress::ZIO_COMPRESS_OFF };
                props.push(WriteProps { typ: 19, level: 0, checksum: checksum::ZIO_CHECKSUM_FLETCHER_4, compress, complevel: 0, copies: 1 + i % 2, embed_ok: false, class: AllocClass::Normal, dedup: false, dedup_verify: false });
            }
            let items: Vec<BlockWrite> = datas.iter().zip(&props).map(|(d, p)| BlockWrite { data: d, p: *p, prev: None }).collect();
            let mut queue = WriteQueue::default();
            let written = write_blocks_over(&root, &salt, &mut alloc, &items, 9, Some(&mut queue)).unwrap();
            let bps: Vec<BlockPointer> = written.into_iter().enumerate().map(|(i, w)| match w {
                (Written::Bp(bp), phys) => {
                    // The compressed bytes come back for the ARC, exactly what the bp stores.
                    match phys {
                        Some(p) => {
                            assert!(bp.compress != compress::ZIO_COMPRESS_OFF && p.len() as u64 == bp.psize, "{kind} block {i}");
                            assert_eq!(compress::decompress(bp.compress, &p, bp.lsize as usize).unwrap(), *datas[i], "{kind} block {i}");
                        }
                        None => assert_eq!(bp.compress, compress::ZIO_COMPRESS_OFF, "{kind} block {i}"),
                    }
                    bp
                }
                (Written::Hole, _) => panic!("hole"),
            }).collect();
            let ctx = ZioCtx::new(&root, &salt);
            assert!(read_bp(&ctx, &bps[1]).is_err(), "{kind}: a queued block is not on disk before the flush");
            queue.flush(&root).unwrap();
            for (i, (bp, data)) in bps.iter().zip(&datas).enumerate() {
                assert_eq!(bp.ndvas(), props[i].copies, "{kind} block {i}");
                for d in 0..bp.ndvas() {
                    let one = BlockPointer { dva: [bp.dva[d], Dva::default(), Dva::default()], ..bp.clone() };
                    assert_eq!(&read_bp(&ctx, &one).unwrap(), data.as_ref(), "{kind} block {i} copy {d}");
                }
            }
        }
    }

    /// A healing read rewrites what it found bad: a mirror side, then a whole ditto copy
    /// (both sides) from the other DVA; a plain read writes nothing.
    #[test]
    fn healing_reads_repair_mirror_sides_and_ditto_copies() {
        use std::sync::atomic::Ordering;
        let salt = [5u8; 32];
        let (_d, root, _) = pool("mirror", 2, 0, 9);
        let mut alloc = Bump { next: 0, top: root.children[0].clone() };
        let data: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let props = WriteProps { typ: 19, level: 0, checksum: checksum::ZIO_CHECKSUM_FLETCHER_4, compress: compress::ZIO_COMPRESS_OFF, complevel: 0, copies: 2, embed_ok: false, class: AllocClass::Normal, dedup: false, dedup_verify: false };
        let Written::Bp(bp) = write_block(&root, &salt, &mut alloc, &data, &props, 9).unwrap() else { panic!("hole") };
        let sides = &root.children[0].children;
        let at = |side: usize, dva: usize| sides[side].read_leaf(bp.dva[dva].offset, bp.psize).unwrap();
        let rot = |side: usize, dva: usize| sides[side].write_leaf(bp.dva[dva].offset, &vec![0xa5; bp.psize as usize]).unwrap();
        // A plain read finds the good copy and leaves the bad one.
        rot(0, 0);
        assert_eq!(read_bp(&ZioCtx::new(&root, &salt), &bp).unwrap(), data);
        assert_ne!(at(0, 0), data);
        // One side bad: the mirror rewrites it.
        let heal = ReadMode::new(true, false);
        assert_eq!(read_bp(&ZioCtx { root: &root, salt: &salt, mode: &heal }, &bp).unwrap(), data);
        assert_eq!((at(0, 0), heal.repaired.load(Ordering::Relaxed)), (data.clone(), bp.psize));
        // The whole first copy bad: the second rewrites it on both sides.
        rot(0, 0);
        rot(1, 0);
        let heal = ReadMode::new(true, false);
        assert_eq!(read_bp(&ZioCtx { root: &root, salt: &salt, mode: &heal }, &bp).unwrap(), data);
        assert_eq!((at(0, 0), at(1, 0), heal.repaired.load(Ordering::Relaxed)), (data.clone(), data.clone(), 2 * bp.psize));
        // A scrub reads every copy: a bad side of the second copy is found and rewritten too.
        rot(1, 1);
        let scrub = ReadMode::new(true, true);
        assert_eq!(read_bp(&ZioCtx { root: &root, salt: &salt, mode: &scrub }, &bp).unwrap(), data);
        assert_eq!((at(1, 1), scrub.repaired.load(Ordering::Relaxed)), (data.clone(), bp.psize));
        assert_eq!(sides[1].stats.cksum_errors.load(Ordering::Relaxed), 2);
    }

    /// zstd blocks in OpenZFS's framing: bp compress = ZIO_COMPRESS_ZSTD, the physical block
    /// begins with the BE32 frame length and the BE32 level/version word (the zio_zstd_levels
    /// value, 3 for the default), and blocks that would not save 1/8 are written uncompressed.
    #[test]
    fn zstd_blocks_carry_openzfs_header_and_level() {
        let salt = [5u8; 32];
        let (_d, root, _) = pool("mirror", 2, 0, 9);
        let top = root.children[0].clone();
        let mut alloc = Bump { next: 0, top };
        let ctx = ZioCtx::new(&root, &salt);
        let text: Vec<u8> = (0..4000).flat_map(|i| format!("record {i} of a compressible text\n").into_bytes()).collect();
        let mut data = text[..131072].to_vec();
        data.resize(131072, 0);
        for (complevel, want_level) in [(0u8, 3u8), (1, 1), (19, 19), (103, 103), (112, 112)] {
            let props = WriteProps { typ: 19, level: 0, checksum: checksum::ZIO_CHECKSUM_SHA512, compress: compress::ZIO_COMPRESS_ZSTD, complevel, copies: 1, embed_ok: false, class: AllocClass::Normal, dedup: false, dedup_verify: false };
            let Written::Bp(bp) = write_block(&root, &salt, &mut alloc, &data, &props, 7).unwrap() else { panic!("hole") };
            assert_eq!((bp.compress, bp.checksum), (compress::ZIO_COMPRESS_ZSTD, checksum::ZIO_CHECKSUM_SHA512), "level {complevel}");
            assert!(bp.psize <= 131072 - 131072 / 8, "level {complevel}: psize {}", bp.psize);
            let phys = read_physical(&ctx, &bp).unwrap();
            let c_len = u32::from_be_bytes(phys[0..4].try_into().unwrap()) as u64;
            let word = u32::from_be_bytes(phys[4..8].try_into().unwrap());
            assert_eq!((word >> 24) as u8, want_level, "level byte for complevel {complevel}");
            assert!(word & 0xff_ffff >= 10405, "zstd version {}", word & 0xff_ffff);
            assert!(c_len + 8 <= bp.psize && bp.psize - (c_len + 8) < 512, "c_len {c_len} psize {}", bp.psize);
            assert!(phys[8 + c_len as usize..].iter().all(|&b| b == 0), "zero padding");
            assert_eq!(compress::zstd::header_level(&phys).unwrap(), want_level);
            assert_eq!(read_bp(&ctx, &bp).unwrap(), data, "level {complevel} reads back");
        }
        // Random bytes do not save 12.5%: stored uncompressed, still checksummed.
        let mut seed = 99u64;
        let rnd: Vec<u8> = (0..65536)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 56) as u8
            })
            .collect();
        let props = WriteProps { typ: 19, level: 0, checksum: checksum::ZIO_CHECKSUM_SKEIN, compress: compress::ZIO_COMPRESS_ZSTD, complevel: 19, copies: 1, embed_ok: false, class: AllocClass::Normal, dedup: false, dedup_verify: false };
        let Written::Bp(bp) = write_block(&root, &salt, &mut alloc, &rnd, &props, 7).unwrap() else { panic!("hole") };
        assert_eq!((bp.compress, bp.psize), (compress::ZIO_COMPRESS_OFF, 65536));
        assert_eq!(read_bp(&ctx, &bp).unwrap(), rnd);
        // A block that compresses to just over 7/8 of its size is not compressed either.
        let mut half = rnd.clone();
        half[..6000].iter_mut().for_each(|b| *b = b'a');
        let Written::Bp(bp) = write_block(&root, &salt, &mut alloc, &half, &props, 7).unwrap() else { panic!("hole") };
        assert_eq!(bp.compress, compress::ZIO_COMPRESS_OFF, "saving under 1/8 is not taken");
        // The skein checksum is keyed with the pool's salt: another salt fails to verify.
        assert!(read_bp(&ZioCtx::new(&root, &[6u8; 32]), &bp).is_err());
    }
}
