//! dmu_send: `zfs send` — a snapshot of a file system (or what changed since an earlier one) as
//! OpenZFS's replication stream (dmu_send.c), which `zfs receive` of OpenZFS or zfs-fuse and
//! `zstream dump` read.
//!
//! ```text
//!   BEGIN (magic, versioninfo = substream | feature flags, toguid, fromguid, toname)
//!   for each dnode block of the meta dnode born after the from snapshot (all of them: full):
//!     each slot: a free one → FREEOBJECTS (runs merged); an object →
//!       OBJECT (its dnode's fields, bonus as payload), FREE from its end to DMU_OBJECT_END,
//!       then its blocks born after the from snapshot in offset order: WRITE (data, logical
//!       size, split into 128K pieces without -L), FREE for holes (runs merged), SPILL
//!   a hole of the meta dnode → FREEOBJECTS of the objects it spans
//!   END (the stream's checksum, toguid)
//! ```
//!
//! Every record is 312 bytes; its last 32 hold the fletcher-4 of the stream up to them (zero in
//! BEGIN), running over records and payloads alike, which END repeats. Blocks go out as the
//! sender's file system holds them, decompressed, in the sender's byte order (this one only
//! sends little-endian blocks). Holes with no birth time are sent as frees in every stream
//! (OpenZFS's send_holes_without_birth_time), those with one only when born after the from
//! snapshot, like every other block.
//!
//! The walk reads an `Objset`: the snapshot's tree, immutable.

use crate::dmu::Objset;
use crate::spa::Spa;
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::{BlockPointer, BLKPTR_SIZE};
use oxzfs_format::dnode::{DnodePhys, DNODE_SIZE};
use oxzfs_format::drr::*;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const DMU_OST_ZFS: u32 = 2;
const DNODE_FLAG_SPILL_BLKPTR: u8 = 1 << 2;
const ZIO_CHECKSUM_OFF: u8 = 2;

/// What `zfs send` was asked for.
#[derive(Clone, Debug, Default)]
pub struct SendFlags {
    /// -L: blocks over 128K whole (the dataset's large_blocks feature).
    pub large_blocks: bool,
}

/// One stream to produce: the snapshot and, for an incremental, the earlier one.
pub struct SendSpec {
    pub spa: Arc<Spa>,
    /// "pool/fs@snap" as the BEGIN record names it.
    pub toname: String,
    pub to_bp: BlockPointer,
    pub to_dsobj: u64,
    pub to_guid: u64,
    pub creation_time: u64,
    /// The from snapshot (an incremental), as named to `spec_for`.
    pub fromname: Option<String>,
    /// The from snapshot's guid and creation txg (an incremental), or 0 and 0.
    pub from_guid: u64,
    pub from_txg: u64,
    /// The file system is a clone and the from snapshot is its origin (DRR_FLAG_CLONE).
    pub clone: bool,
    /// Case-insensitive names (DRR_FLAG_CI_DATA).
    pub ci: bool,
    /// Feature flags the dataset's features call for (SA_SPILL for ZPL 5, LARGE_DNODE).
    pub features: u64,
    pub flags: SendFlags,
    /// Held from the moment the snapshot is found until the stream is made: the snapshot
    /// cannot be destroyed under the send (dsl_dataset_long_hold).
    pub _hold: crate::spa::SendHold,
}

/// What a dataset of the pool holds of a per-dataset feature (its object is a ZAP naming it).
fn ds_feature_active(spa: &Arc<Spa>, dsobj: u64, guid: &str) -> bool {
    let mos = spa.mos();
    mos.dnode(dsobj).is_ok_and(|d| d.typ == oxzfs_format::types::DMU_OTN_ZAP_METADATA)
        && crate::zap::zap_lookup_u64(&mos, dsobj, guid).is_ok_and(|v| v.is_some())
}

/// The stream `zfs send [-i FROM] TO` makes: `to` a snapshot ("pool/fs@snap"), `from` an
/// earlier snapshot of the same file system ("@snap" or whole) or, for a clone, of its origin.
/// Errors name what is wrong, as `zfs send` reports them.
pub fn spec_for(spa: &Arc<Spa>, to: &str, from: Option<&str>, flags: SendFlags) -> Result<SendSpec> {
    use crate::dsl::{find_dataset, DatasetKind};
    let Some((fs, _)) = to.split_once('@') else {
        return Err(ZfsError::Invalid(format!("cannot send '{to}': only snapshots can be sent (name one: {to}@snapshot)")));
    };
    let not_found = |n: &str| ZfsError::NotFound(format!("cannot open '{n}': dataset does not exist"));
    let t = find_dataset(spa, to).map_err(|_| not_found(to))?;
    if t.kind != DatasetKind::Snapshot {
        return Err(not_found(to));
    }
    let head = find_dataset(spa, fs).map_err(|_| not_found(fs))?;
    if head.objset_type != DMU_OST_ZFS as u64 {
        return Err(ZfsError::Unsupported(format!("cannot send '{to}': oxzfs sends file systems only (this is a volume)")));
    }
    if t.ds.bp.encrypted {
        return Err(ZfsError::Unsupported(format!("cannot send '{to}': the dataset is encrypted; oxzfs sends no encrypted dataset yet, neither decrypted nor raw (-w)")));
    }
    let (mut from_guid, mut from_txg, mut clone) = (0, 0, false);
    if let Some(f) = from {
        if f.contains('#') {
            // A bookmark of this file system: its guid and txg are the stream's base.
            let full = if f.starts_with('#') { format!("{fs}{f}") } else { f.to_string() };
            if full.split('#').next() != Some(fs) {
                return Err(ZfsError::Invalid(format!("cannot send '{to}': not an earlier snapshot from the same fs ('{full}')")));
            }
            let b = crate::dsl_bookmark::find_bookmark(spa, &full)?.ok_or_else(|| not_found(&full))?;
            if b.creation_txg >= t.ds.creation_txg {
                return Err(ZfsError::Invalid(format!("cannot send '{to}': not an earlier snapshot from the same fs ('{full}')")));
            }
            from_guid = b.guid;
            from_txg = b.creation_txg;
        } else {
            let full = if f.starts_with('@') { format!("{fs}{f}") } else { f.to_string() };
            if !full.contains('@') {
                return Err(ZfsError::Invalid(format!("cannot send '{to}': incremental source '{f}' must be a snapshot")));
            }
            let fr = find_dataset(spa, &full).map_err(|_| not_found(&full))?;
            if fr.kind != DatasetKind::Snapshot {
                return Err(not_found(&full));
            }
            // An earlier snapshot of this file system, or one of the origin's (and so on up) as of
            // the clone's creation.
            let mos = spa.mos();
            let mut dir = head.dir_obj;
            let mut before = t.ds.creation_txg;
            let mut ok = false;
            for depth in 0..64 {
                if fr.ds.dir_obj == dir && fr.ds.creation_txg < before || (depth > 0 && fr.ds.dir_obj == dir && fr.ds.creation_txg <= before) {
                    ok = true;
                    clone = depth > 0;
                    break;
                }
                let d = crate::dsl::dir_phys_of(&mos, dir)?;
                if d.origin_obj == 0 {
                    break;
                }
                let (b, le) = { let (dn, le) = mos.dnode_with_order(d.origin_obj)?; (dn.bonus, le) };
                let o = oxzfs_format::dsl::DslDatasetPhys::decode(&b, le).map_err(|e| ZfsError::corrupt(format!("DSL dataset {}", d.origin_obj), e))?;
                dir = o.dir_obj;
                before = o.creation_txg;
            }
            if !ok {
                return Err(ZfsError::Invalid(format!("cannot send '{to}': not an earlier snapshot from the same fs ('{full}')")));
            }
            from_guid = fr.ds.guid;
            from_txg = fr.ds.creation_txg;
        }
    }
    let mut features = 0;
    let os = Objset::open_id(spa, &t.ds.bp, t.ds_obj)?;
    if crate::zap::zap_lookup_u64(&os, 1, "VERSION").ok().flatten().unwrap_or(0) >= 5 {
        features |= DMU_BACKUP_FEATURE_SA_SPILL;
    }
    if ds_feature_active(spa, t.ds_obj, "org.zfsonlinux:large_dnode") {
        features |= DMU_BACKUP_FEATURE_LARGE_DNODE;
    }
    let large = flags.large_blocks && ds_feature_active(spa, t.ds_obj, "org.open-zfs:large_blocks");
    Ok(SendSpec {
        spa: spa.clone(),
        toname: to.to_string(),
        to_bp: t.ds.bp.clone(),
        to_dsobj: t.ds_obj,
        to_guid: t.ds.guid,
        creation_time: t.ds.creation_time,
        fromname: from.map(str::to_string),
        from_guid,
        from_txg,
        clone,
        ci: t.ds.flags & oxzfs_format::dsl::DS_FLAG_CI_DATASET != 0,
        features,
        flags: SendFlags { large_blocks: large },
        _hold: spa.send_hold(t.ds_obj),
    })
}

/// The records the stream is made of, written through `out` with the running checksum.
struct Stream<'a> {
    /// None: a dry run, which only counts (`zfs send -n`, the estimate of -v).
    out: Option<&'a mut dyn Write>,
    zc: [u64; 4],
    toguid: u64,
    pending: Pending,
    /// Bytes written so far (`zfs send -v`'s progress reads it).
    written: &'a AtomicU64,
    /// The highest object the meta dnode holds + 1: frees of objects beyond are clipped.
    maxobj: u64,
}

enum Pending {
    None,
    Free { object: u64, offset: u64, length: u64 },
    FreeObjects { first: u64, num: u64 },
}


fn io(e: std::io::Error) -> ZfsError {
    ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot write the send stream: {e}"))
}

impl Stream<'_> {
    /// dump_record: the record (its trailer the checksum so far, but in BEGIN), then payload.
    fn emit(&mut self, mut r: [u8; RECORD_SIZE], payload: &[u8]) -> Result<()> {
        debug_assert_eq!(payload.len() % 4, 0);
        if self.out.is_none() {
            self.written.fetch_add((RECORD_SIZE + payload.len()) as u64, Ordering::Relaxed);
            return Ok(());
        }
        fletcher4_more(&mut self.zc, &r[..TRAILER]);
        if u32::from_le_bytes(r[0..4].try_into().unwrap()) != DRR_BEGIN {
            for (i, w) in self.zc.iter().enumerate() {
                put64(&mut r, TRAILER + 8 * i, *w);
            }
        }
        fletcher4_more(&mut self.zc, &r[TRAILER..]);
        let out = self.out.as_mut().expect("records are emitted only when writing");
        out.write_all(&r).map_err(io)?;
        if !payload.is_empty() {
            fletcher4_more(&mut self.zc, payload);
            out.write_all(payload).map_err(io)?;
        }
        self.written.fetch_add((RECORD_SIZE + payload.len()) as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The pending FREE or FREEOBJECTS, written out.
    fn flush_pending(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => Ok(()),
            Pending::Free { object, offset, length } => {
                let mut r = record(DRR_FREE);
                put64(&mut r, 8, object);
                put64(&mut r, 16, offset);
                put64(&mut r, 24, length);
                put64(&mut r, 32, self.toguid);
                self.emit(r, &[])
            }
            Pending::FreeObjects { first, num } => {
                let mut r = record(DRR_FREEOBJECTS);
                put64(&mut r, 8, first);
                put64(&mut r, 16, num);
                put64(&mut r, 24, self.toguid);
                self.emit(r, &[])
            }
        }
    }

    /// dump_free: merged with a pending free of the object that ends where this one starts;
    /// else the pending record goes out and this one waits — but a free to the object's end,
    /// which goes out at once.
    fn free(&mut self, object: u64, offset: u64, length: u64) -> Result<()> {
        let length = if length != OBJECT_END && offset.checked_add(length).is_none() { OBJECT_END } else { length };
        if let Pending::Free { object: o, offset: off, length: len } = &mut self.pending {
            if *o == object && off.wrapping_add(*len) == offset {
                *len = if length == OBJECT_END || offset.checked_add(length).is_none() { OBJECT_END } else { *len + length };
                return Ok(());
            }
        }
        self.flush_pending()?;
        self.pending = Pending::Free { object, offset, length };
        if length == OBJECT_END {
            self.flush_pending()?;
        }
        Ok(())
    }

    /// dump_freeobjects: clipped to the objects the meta dnode holds, merged with a pending
    /// run that ends where this one starts.
    fn free_objects(&mut self, first: u64, mut num: u64) -> Result<()> {
        if self.maxobj > 0 {
            if self.maxobj <= first {
                return Ok(());
            }
            num = num.min(self.maxobj - first);
        }
        if let Pending::FreeObjects { first: f, num: n } = &mut self.pending {
            if *f + *n == first {
                *n += num;
                return Ok(());
            }
        }
        self.flush_pending()?;
        self.pending = Pending::FreeObjects { first, num };
        Ok(())
    }

    /// Any record but a free: the pending free goes first.
    fn emit_after_pending(&mut self, r: [u8; RECORD_SIZE], payload: &[u8]) -> Result<()> {
        self.flush_pending()?;
        self.emit(r, payload)
    }
}

/// Produce the stream of `spec` into `out`; `written` counts its bytes as they go. Returns
/// the stream's length. Without `out`, a dry run: the length the stream would have, read
/// from the metadata alone (no data block is read).
pub fn send<'a>(spec: &SendSpec, out: Option<&'a mut dyn Write>, written: &'a AtomicU64) -> Result<u64> {
    let os = Objset::open_id(&spec.spa, &spec.to_bp, spec.to_dsobj)?;
    let md = os.phys.meta_dnode.clone();
    let mut s = Stream { out, zc: [0; 4], toguid: spec.to_guid, pending: Pending::None, written, maxobj: 0 };
    // BEGIN
    let mut features = spec.features;
    if spec.flags.large_blocks {
        features |= DMU_BACKUP_FEATURE_LARGE_BLOCKS;
    }
    let mut r = record(DRR_BEGIN);
    put64(&mut r, 8, DMU_BACKUP_MAGIC);
    put64(&mut r, 16, DMU_SUBSTREAM | (features << 2));
    put64(&mut r, 24, spec.creation_time);
    put32(&mut r, 32, DMU_OST_ZFS);
    let mut flags = DRR_FLAG_FREERECORDS | DRR_FLAG_SPILL_BLOCK;
    if spec.clone {
        flags |= DRR_FLAG_CLONE;
    }
    if spec.ci {
        flags |= DRR_FLAG_CI_DATA;
    }
    put32(&mut r, 36, flags);
    put64(&mut r, 40, spec.to_guid);
    put64(&mut r, 48, spec.from_guid);
    let name = spec.toname.as_bytes();
    if name.len() >= 256 {
        return Err(ZfsError::Invalid(format!("cannot send '{}': name too long", spec.toname)));
    }
    r[56..56 + name.len()].copy_from_slice(name);
    s.emit(r, &[])?;
    s.maxobj = (md.maxblkid + 1) * (md.data_block_size() / DNODE_SIZE as u64);
    let dry = s.out.is_none();
    // Read-ahead (send_prefetch_thread's role): blocks the walk will read soon are read by
    // helper threads meanwhile, into the ARC, where the walk finds them (or joins the read).
    let (tx, rx) = std::sync::mpsc::sync_channel::<BlockPointer>(PREFETCH_QUEUE);
    let rx = std::sync::Mutex::new(rx);
    std::thread::scope(|scope| -> Result<()> {
        if !dry {
            for _ in 0..PREFETCH_THREADS {
                let (rx, spa, id) = (&rx, &os.spa, os.id);
                scope.spawn(move || loop {
                    let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok(bp) = next else { return };
                    let _ = spa.read_bp_prefetch(&bp, id);
                });
            }
        }
        let w = Walker { os: &os, from_txg: spec.from_txg, flags: &spec.flags, dry, ahead: (!dry).then_some(tx) };
        w.meta_dnode(&md, &mut s)
    })?;
    s.flush_pending()?;
    // END: the checksum of everything before it, then (in its trailer) including its head.
    let mut r = record(DRR_END);
    for (i, v) in s.zc.iter().enumerate() {
        put64(&mut r, 8 + 8 * i, *v);
    }
    put64(&mut r, 40, spec.to_guid);
    s.emit(r, &[])?;
    if let Some(o) = s.out.as_mut() {
        o.flush().map_err(io)?;
    }
    Ok(written.load(Ordering::Relaxed))
}

/// A block met in a walk of one object's tree.
enum Visit {
    /// A level-0 block born after the from snapshot: its bp and number.
    Data(u64, BlockPointer),
    /// A hole at `level` (0: one block) numbered `blkid` at that level.
    Hole(u8, u64),
}

struct Walker<'a> {
    os: &'a Objset,
    from_txg: u64,
    flags: &'a SendFlags,
    /// Count, do not read, data blocks and spill blocks.
    dry: bool,
    /// Where blocks to read ahead go (None: no read-ahead).
    ahead: Option<std::sync::mpsc::SyncSender<BlockPointer>>,
}

/// Read-ahead: blocks queued at most, threads reading them, and how far ahead of the walk
/// (in blocks of one indirect block's children) it asks.
const PREFETCH_QUEUE: usize = 64;
const PREFETCH_THREADS: usize = 4;
const PREFETCH_WINDOW: usize = 32;

impl Walker<'_> {
    /// The blocks of `dn`'s tree (object `obj`) to send, in offset order: level-0 blocks and
    /// holes born after the from snapshot (holes with no birth time always), to `f`.
    fn walk(&self, dn: &DnodePhys, obj: u64, f: &mut dyn FnMut(Visit) -> Result<()>) -> Result<()> {
        if dn.nlevels == 0 {
            return Ok(());
        }
        let top = dn.nlevels - 1;
        for (i, bp) in dn.blkptr.iter().enumerate() {
            self.visit(dn, obj, bp, top, i as u64, f)?;
        }
        Ok(())
    }

    fn visit(&self, dn: &DnodePhys, obj: u64, bp: &BlockPointer, level: u8, blkid: u64, f: &mut dyn FnMut(Visit) -> Result<()>) -> Result<()> {
        if bp.is_hole() && !bp.embedded {
            if bp.birth == 0 || bp.birth > self.from_txg {
                return f(Visit::Hole(level, blkid));
            }
            return Ok(());
        }
        if bp.birth <= self.from_txg {
            return Ok(());
        }
        if level == 0 {
            return f(Visit::Data(blkid, bp.clone()));
        }
        if !bp.little_endian {
            return Err(big_endian(self.os, obj));
        }
        let block = self.os.spa.read_bp_for(bp, self.os.id)?;
        let per = 1u64 << (dn.indblkshift - 7);
        let children = block
            .chunks_exact(BLKPTR_SIZE)
            .take(per as usize)
            .map(|c| BlockPointer::decode(c, true).map_err(|e| ZfsError::corrupt(format!("objset {} object {obj} indirect block", self.os.id), e)))
            .collect::<Result<Vec<_>>>()?;
        for (j, child) in children.iter().enumerate() {
            // The children a window ahead of this one, read meanwhile.
            if j == 0 {
                children.iter().take(PREFETCH_WINDOW).for_each(|c| self.read_ahead(c));
            } else if let Some(c) = children.get(j + PREFETCH_WINDOW - 1) {
                self.read_ahead(c);
            }
            self.visit(dn, obj, child, level - 1, blkid * per + j as u64, f)?;
        }
        Ok(())
    }

    /// Ask for block `bp` to be read ahead, if the walk will read it (never blocks: a full
    /// queue drops the request, and the walk reads the block itself).
    fn read_ahead(&self, bp: &BlockPointer) {
        if let Some(tx) = &self.ahead {
            if !bp.is_hole() && !bp.embedded && bp.birth > self.from_txg {
                let _ = tx.try_send(bp.clone());
            }
        }
    }

    /// The meta dnode's tree: each dnode block to send, its objects; holes as free objects.
    fn meta_dnode(&self, md: &DnodePhys, s: &mut Stream) -> Result<()> {
        let blksz = md.data_block_size();
        let per_block = blksz / DNODE_SIZE as u64;
        let per = 1u64 << (md.indblkshift - 7);
        self.walk(md, 0, &mut |v| match v {
            Visit::Hole(level, blkid) => {
                let span = per.saturating_pow(level as u32);
                match blkid.checked_mul(span).and_then(|b| b.checked_mul(per_block)) {
                    Some(first) => s.free_objects(first, span.saturating_mul(per_block)),
                    None => Ok(()),
                }
            }
            Visit::Data(blkid, bp) => {
                if !bp.little_endian {
                    return Err(big_endian(self.os, 0));
                }
                let block = self.os.spa.read_bp_for(&bp, self.os.id)?;
                // The top blocks of this dnode block's objects (a small file's data), read
                // ahead while the objects before them go out.
                if self.ahead.is_some() {
                    let mut i = 0usize;
                    while i < per_block as usize {
                        let Ok(dn) = DnodePhys::decode(&block[i * DNODE_SIZE..], true) else { break };
                        if dn.typ != 0 {
                            dn.blkptr.iter().for_each(|b| self.read_ahead(b));
                        }
                        i += if dn.typ == 0 { 1 } else { dn.slots() };
                    }
                }
                let mut i = 0u64;
                while i < per_block {
                    let obj = blkid * per_block + i;
                    let at = (i as usize) * DNODE_SIZE;
                    let dn = DnodePhys::decode(&block[at..], true).map_err(|e| ZfsError::corrupt(format!("objset {} object {obj}", self.os.id), e))?;
                    let slots = 1 + dn.extra_slots as u64;
                    if obj == 0 {
                        // The meta dnode's own slot.
                    } else if dn.typ == 0 {
                        s.free_objects(obj, 1)?;
                    } else {
                        self.object(obj, &dn, s)?;
                    }
                    i += if dn.typ == 0 { 1 } else { slots };
                }
                Ok(())
            }
        })
    }

    /// dump_dnode, then the object's blocks.
    fn object(&self, obj: u64, dn: &DnodePhys, s: &mut Stream) -> Result<()> {
        let blksz = dn.data_block_size();
        let mut r = record(DRR_OBJECT);
        put64(&mut r, 8, obj);
        put32(&mut r, 16, dn.typ as u32);
        put32(&mut r, 20, dn.bonustype as u32);
        let sent_blksz = if !self.flags.large_blocks { blksz.min(OLD_MAXBLOCKSIZE) } else { blksz };
        put32(&mut r, 24, sent_blksz as u32);
        put32(&mut r, 28, dn.bonuslen as u32);
        r[32] = dn.checksum;
        r[33] = dn.compress;
        r[34] = 1 + dn.extra_slots;
        let has_spill = dn.flags & DNODE_FLAG_SPILL_BLKPTR != 0;
        if has_spill {
            r[35] |= DRR_OBJECT_SPILL;
        }
        put64(&mut r, 40, s.toguid);
        let bonuslen = (dn.bonuslen as usize).div_ceil(8) * 8;
        let mut bonus = dn.bonus.clone();
        bonus.resize(bonuslen, 0);
        s.emit_after_pending(r, &bonus[..bonuslen])?;
        s.free(obj, (dn.maxblkid + 1).saturating_mul(blksz), OBJECT_END)?;
        let spill = dn.spill.as_ref().filter(|bp| has_spill && !bp.is_hole());
        // A spill block the from snapshot has already goes out too, marked unmodified: an older
        // receiver could have dropped it on a change of the object's other attributes.
        if let Some(bp) = spill.filter(|bp| bp.birth <= self.from_txg) {
            self.spill(obj, bp, DRR_SPILL_UNMODIFIED, s)?;
        }
        // Blocks past the last one of a file's data are not sent (the free to the end covers
        // them); a metadata object's are.
        let meta = oxzfs_format::types::ot_is_metadata(dn.typ);
        let per = 1u64 << (dn.indblkshift - 7);
        self.walk(dn, obj, &mut |v| {
            let (level, blkid) = match &v {
                Visit::Hole(level, blkid) => (*level, *blkid),
                Visit::Data(blkid, _) => (0, *blkid),
            };
            let span = per.saturating_pow(level as u32);
            let Some(start) = blkid.checked_mul(span) else { return Ok(()) };
            if !meta && start > dn.maxblkid {
                return Ok(());
            }
            match v {
                Visit::Hole(..) => {
                    let Some(offset) = start.checked_mul(blksz) else { return Ok(()) };
                    let end = start.checked_add(span).and_then(|e| e.checked_mul(blksz)).unwrap_or(u64::MAX);
                    s.free(obj, offset, end - offset)
                }
                Visit::Data(blkid, bp) => self.write(obj, dn, blkid, &bp, s),
            }
        })?;
        if let Some(bp) = spill.filter(|bp| bp.birth > self.from_txg) {
            self.spill(obj, bp, 0, s)?;
        }
        Ok(())
    }

    /// dump_spill: the object's spill block (its logical bytes).
    fn spill(&self, obj: u64, bp: &BlockPointer, flags: u8, s: &mut Stream) -> Result<()> {
        if !bp.little_endian {
            return Err(big_endian(self.os, obj));
        }
        if self.dry {
            s.flush_pending()?;
            s.written.fetch_add(RECORD_SIZE as u64 + bp.lsize, Ordering::Relaxed);
            return Ok(());
        }
        let data = self.os.spa.read_bp_for(bp, self.os.id)?;
        let mut r = record(DRR_SPILL);
        put64(&mut r, 8, obj);
        put64(&mut r, 16, data.len() as u64);
        put64(&mut r, 24, s.toguid);
        r[32] = flags;
        put32(&mut r, 84, bp.typ as u32);
        s.emit_after_pending(r, &data)
    }

    /// dump_write of level-0 block `blkid` (its bytes decompressed), in 128K pieces without -L.
    fn write(&self, obj: u64, dn: &DnodePhys, blkid: u64, bp: &BlockPointer, s: &mut Stream) -> Result<()> {
        if !bp.little_endian && !bp.embedded && needs_byteswap(dn.typ) {
            return Err(big_endian(self.os, obj));
        }
        let data = if self.dry { Arc::new(Vec::new()) } else { self.os.spa.read_bp_for(bp, self.os.id)? };
        let lsize = if self.dry { bp.lsize } else { data.len() as u64 };
        let offset = blkid * dn.data_block_size();
        let whole = lsize <= OLD_MAXBLOCKSIZE || self.flags.large_blocks;
        let piece = if whole { lsize } else { OLD_MAXBLOCKSIZE };
        let mut at = 0u64;
        while at < lsize {
            let n = piece.min(lsize - at);
            let mut r = record(DRR_WRITE);
            put64(&mut r, 8, obj);
            put32(&mut r, 16, dn.typ as u32);
            put64(&mut r, 24, offset + at);
            put64(&mut r, 32, n);
            put64(&mut r, 40, s.toguid);
            if !whole || bp.embedded || bp.encrypted {
                // No checksum of these bytes to hand on (a piece, an embedded or a decrypted
                // block): the receiver computes one if it wants one.
                r[48] = ZIO_CHECKSUM_OFF;
            } else {
                // The block's own checksum and dedup key: a receiver may dedup by them.
                r[48] = bp.checksum;
                if oxzfs_format::checksum::checksum_info(bp.checksum).is_some_and(|c| c.dedup()) {
                    r[49] |= DRR_CHECKSUM_DEDUP;
                }
                let key = oxzfs_format::ddt::DdtKey::of_bp(bp);
                for (i, w) in key.cksum.iter().enumerate() {
                    put64(&mut r, 56 + 8 * i, *w);
                }
                put64(&mut r, 88, key.prop);
            }
            if self.dry {
                s.flush_pending()?;
                s.written.fetch_add(RECORD_SIZE as u64 + n, Ordering::Relaxed);
            } else {
                s.emit_after_pending(r, &data[at as usize..(at + n) as usize])?;
            }
            at += n;
        }
        Ok(())
    }
}

/// Whether an object type's blocks hold words a big-endian sender would have to swap.
fn needs_byteswap(typ: u8) -> bool {
    !matches!(typ, oxzfs_format::types::DMU_OT_PLAIN_FILE_CONTENTS | oxzfs_format::types::DMU_OT_ZVOL)
}

fn big_endian(os: &Objset, obj: u64) -> ZfsError {
    ZfsError::Unsupported(format!("objset {} object {obj}: its blocks were written big-endian; oxzfs sends only little-endian blocks", os.id))
}

/// A replication package (`zfs send -R`, `-p`; libzfs's compound stream): a header naming the
/// file systems and snapshots it carries, then their streams one after another.
pub struct Package {
    /// "pool/fs@snap" of the header.
    pub toname: String,
    /// The header's nvlist (fromsnap, tosnap, not_recursive, fss); none for `zfs send -I`
    /// alone, whose package only strings the streams together.
    pub header: Option<oxzfs_format::nvlist::NvList>,
    /// The streams, parents before children and origins before clones, each file system's
    /// snapshots oldest first.
    pub streams: Vec<SendSpec>,
}

/// What `zfs send -R` / `-p` carries: `to` ("pool/fs@snap"), with `recursive` its descendants
/// too; `from` (-i, or -I with `intermediate`) an earlier snapshot ("@a" or whole). Full -R
/// and -I send every snapshot up to `to` (from `from` on), -i only from `from` to `to`.
pub fn package_for(spa: &Arc<Spa>, to: &str, from: Option<&str>, intermediate: bool, recursive: bool, flags: SendFlags) -> Result<Package> {
    use crate::dsl::{list_datasets, DatasetKind};
    use oxzfs_format::nvlist::{NvList, NvValue};
    let Some((top, tosnap)) = to.split_once('@') else {
        return Err(ZfsError::Invalid(format!("cannot send '{to}': only snapshots can be sent (name one: {to}@snapshot)")));
    };
    let fromsnap = from.map(|f| f.rsplit_once('@').map_or(f, |(_, s)| s).to_string());
    if let Some(f) = from {
        if f.contains('@') && !f.starts_with('@') && f.split_once('@').map(|(fs, _)| fs) != Some(top) {
            return Err(ZfsError::Unsupported(format!("cannot send '{to}': a replication package's source must be a snapshot of '{top}' (@snap)")));
        }
    }
    let all = list_datasets(spa)?;
    let by_name = |n: &str| all.iter().find(|d| d.name == n);
    let Some(top_snap) = by_name(to).filter(|d| d.kind == DatasetKind::Snapshot) else {
        return Err(ZfsError::NotFound(format!("cannot open '{to}': dataset does not exist")));
    };
    let to_txg = top_snap.ds.creation_txg;
    let mos = spa.mos();
    // The file systems: the top one, and with -R those below it (list order: parents first).
    let mut fss: Vec<&crate::dsl::DatasetInfo> = Vec::new();
    for d in all.iter().filter(|d| d.kind == DatasetKind::Filesystem) {
        let below = d.name == top || (recursive && d.name.starts_with(&format!("{top}/")));
        if !below {
            continue;
        }
        if by_name(&format!("{}@{tosnap}", d.name)).is_none() {
            if d.name != top && d.ds.creation_txg > to_txg {
                continue; // made after the snapshot: not part of it
            }
            return Err(ZfsError::NotFound(format!("cannot send '{}@{tosnap}': snapshot does not exist", d.name)));
        }
        fss.push(d);
    }
    let snaps_of = |fs: &str| -> Vec<&crate::dsl::DatasetInfo> {
        let mut v: Vec<_> = all.iter().filter(|d| d.kind == DatasetKind::Snapshot && d.name.split_once('@').is_some_and(|(f, _)| f == fs)).collect();
        v.sort_by_key(|d| d.ds.creation_txg);
        v
    };
    // A file system's origin, when it is a clone (not of $ORIGIN): the snapshot's info.
    let origin_of = |d: &crate::dsl::DatasetInfo| all.iter().find(|o| d.dir.origin_obj != 0 && o.ds_obj == d.dir.origin_obj && !o.name.contains("$ORIGIN"));
    let mut header = NvList::new();
    if let Some(f) = &fromsnap {
        header.add_str("fromsnap", f);
    }
    header.add_str("tosnap", tosnap);
    if !recursive {
        header.insert("not_recursive", NvValue::Boolean);
    }
    let mut fss_nv = NvList::new();
    let mut streams_of: Vec<(String, Option<String>, Vec<SendSpec>)> = Vec::new();
    for d in &fss {
        let tosnap_txg = by_name(&format!("{}@{tosnap}", d.name)).map_or(0, |s| s.ds.creation_txg);
        let snaps: Vec<_> = snaps_of(&d.name).into_iter().filter(|s| s.ds.creation_txg <= tosnap_txg).collect();
        let mut e = NvList::new();
        e.add_str("name", &d.name);
        let parent = d.name.rsplit_once('/').map(|(p, _)| p).filter(|_| d.name != top);
        let pfs = match parent {
            None => 0,
            Some(p) => fromsnap.as_ref().and_then(|f| by_name(&format!("{p}@{f}"))).or_else(|| by_name(&format!("{p}@{tosnap}"))).map_or(0, |s| s.ds.guid),
        };
        e.add_u64("parentfromsnap", pfs);
        let origin = origin_of(d);
        if let Some(o) = origin {
            e.add_u64("origin", o.ds.guid);
        }
        e.add_nvlist("props", crate::dsl::local_props_nv(&mos, d.dir.props_zapobj));
        let mut sn = NvList::new();
        let mut sp = NvList::new();
        for s in &snaps {
            let short = s.name.split_once('@').map_or("", |(_, n)| n);
            sn.add_u64(short, s.ds.guid);
            sp.add_nvlist(short, crate::dsl::local_props_nv(&mos, s.ds.props_obj));
        }
        e.add_nvlist("snaps", sn);
        e.add_nvlist("snapprops", sp);
        fss_nv.add_nvlist(&format!("0x{:x}", d.ds.guid), e);
        // Its streams.
        let names: Vec<String> = snaps.iter().map(|s| s.name.clone()).collect();
        let has_from = fromsnap.as_ref().is_some_and(|f| names.iter().any(|n| n.ends_with(&format!("@{f}"))));
        let mut pairs: Vec<(Option<String>, String)> = Vec::new();
        let to_name = format!("{}@{tosnap}", d.name);
        if has_from && !intermediate {
            pairs.push((Some(format!("{}@{}", d.name, fromsnap.as_ref().expect("has_from"))), to_name));
        } else {
            let start = if has_from { names.iter().position(|n| n.ends_with(&format!("@{}", fromsnap.as_ref().expect("has_from")))).map_or(0, |i| i + 1) } else { 0 };
            let mut prev: Option<String> = if has_from { Some(names[start - 1].clone()) } else { origin.map(|o| o.name.clone()) };
            // -i of a file system new since the source: its snapshot alone (from its origin).
            let list: Vec<String> = if fromsnap.is_some() && !has_from && !intermediate { vec![to_name] } else { names[start..].to_vec() };
            for n in list {
                pairs.push((prev.clone(), n.clone()));
                prev = Some(n);
            }
        }
        let mut specs = Vec::new();
        for (f, t) in pairs {
            specs.push(spec_for(spa, &t, f.as_deref(), flags.clone())?);
        }
        streams_of.push((d.name.clone(), origin.map(|o| o.name.split_once('@').map_or(String::new(), |(f, _)| f.to_string())), specs));
    }
    header.add_nvlist("fss", fss_nv);
    // Parents before children (list order) and origins before their clones.
    let mut streams = Vec::new();
    let mut sent: Vec<String> = Vec::new();
    let in_stream: Vec<String> = streams_of.iter().map(|(n, _, _)| n.clone()).collect();
    while streams_of.iter().any(|(n, _, _)| !sent.contains(n)) {
        let before = sent.len();
        for (name, origin_fs, specs) in streams_of.iter_mut() {
            if sent.contains(name) {
                continue;
            }
            if origin_fs.as_ref().is_some_and(|o| in_stream.contains(o) && !sent.contains(o)) {
                continue;
            }
            streams.append(specs);
            sent.push(name.clone());
        }
        if sent.len() == before {
            return Err(ZfsError::Invalid(format!("cannot send '{to}': clones and origins form a circle")));
        }
    }
    Ok(Package { toname: to.to_string(), header: Some(header), streams })
}

/// A package's head: the BEGIN (a compound stream) with the header's nvlist packed in XDR
/// as its payload (none for `zfs send -I` alone), and an END holding their fletcher-4.
pub fn package_head(toname: &str, header: Option<&oxzfs_format::nvlist::NvList>) -> Result<Vec<u8>> {
    let payload = header.map(|h| h.encode_xdr()).unwrap_or_default();
    let mut r = record(DRR_BEGIN);
    put32(&mut r, 4, payload.len() as u32);
    put64(&mut r, 8, DMU_BACKUP_MAGIC);
    put64(&mut r, 16, DMU_COMPOUNDSTREAM);
    let name = toname.as_bytes();
    if name.len() >= 256 {
        return Err(ZfsError::Invalid(format!("cannot send '{toname}': name too long")));
    }
    r[56..56 + name.len()].copy_from_slice(name);
    let mut zc = [0u64; 4];
    fletcher4_more(&mut zc, &r);
    fletcher4_more(&mut zc, &payload);
    let mut end = record(DRR_END);
    for (i, w) in zc.iter().enumerate() {
        put64(&mut end, 8 + 8 * i, *w);
    }
    Ok([&r[..], &payload[..], &end[..]].concat())
}

/// A package's last record: an END of zeros.
pub fn package_tail() -> [u8; RECORD_SIZE] {
    record(DRR_END)
}
