//! zfs_replay: an intent log left by a crash, claimed and replayed into its file system when
//! the pool is imported read-write (OpenZFS's zil_claim at import and zil_replay/zfs_replay.c
//! at mount, done here for every file system at import).
//!
//! ```text
//!   txg N (the import's first): every block of the chain born after the last synced txg (and
//!     every block an indirect write record names) is claimed — allocated in N, so nothing
//!     overwrites it; the records of txgs that never synced are applied through the ZPL in
//!     order (lrc_seq above zh_replay_seq only); the header records the claim (zh_claim_txg,
//!     the claimed sequences, ZIL_REPLAY_NEEDED) and what was replayed (zh_replay_seq). N
//!     syncs: the replayed changes and the claim land together.
//!   txg N+1: the chain is freed and the header emptied.
//! ```
//!
//! A crash between the two leaves a claimed log whose records are all replayed (zh_replay_seq):
//! the next import frees it. A record that does not decode, or one oxzfs cannot apply (ACLs,
//! SA xattrs, xattr directories, OpenZFS 2.2's exchange/whiteout renames and clones), stops the
//! replay of that file system: its log stays in place and claimed for `zdb -ivv`, what was
//! applied before stays (and is recorded in zh_replay_seq), and the file system refuses to
//! mount with the error, which names the dataset and the record. A read-only import replays
//! nothing (it never calls this).
//!
//! `zpool import -N` claims the chains (txg N) and leaves them: the first mount of the pool's
//! file systems (mounts::mount_some) replays them, as OpenZFS replays at mount; meanwhile a
//! scrub reads the claimed chains (dsl_scan_walk).
//!
//! `zpool import -m` (a log device missing): OpenZFS drops every intent log (SPA_LOG_CLEAR).
//! Here each chain replays as far as it can be read — nothing of a chain on the missing
//! device, all of one in the pool. After a log device fails, commits go on in chains in the
//! pool's normal class; dropping those would lose fsyncs already acknowledged.

use crate::dbuf::ObjsetW;
use crate::dsl::DatasetKind;
use crate::dsl_pool::PoolW;
use crate::zio::ZioCtx;
use crate::zplw::{self, FsInfo, SetAttr};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::objset::{ZilHeaderPhys, DMU_OST_ZFS};
use oxzfs_format::zil::{self as fz, LogRecord, LrBody};

/// Most log blocks one chain may have (a bound on a corrupt chain's loop).
const MAX_CHAIN_BLOCKS: usize = 1 << 20;

/// What the import's replay did: one line per file system whose log was replayed or refused.
#[derive(Debug, Default)]
pub struct ReplayReport {
    pub replayed: Vec<String>,
    pub refused: Vec<String>,
}

/// Claim and replay the intent log of every file system of `pw` (just opened read-write,
/// nothing changed yet), syncing twice when there was one (see the module's text). Without
/// `replay` (`zpool import -N`: OpenZFS claims at import and replays at mount) the chains are
/// only claimed, synced, and left in place (`PoolW::replay_deferred`) for the first mount's
/// call, which replays them as chains claimed before.
pub fn replay_pool(pw: &mut PoolW, replay: bool) -> Result<ReplayReport> {
    let spa = pw.spa.clone();
    let first_txg = pw.txg;
    let mut report = ReplayReport::default();
    let mut done: Vec<(u64, Vec<BlockPointer>)> = Vec::new();
    let list = crate::dsl::list_datasets(&spa)?;

    for d in list.iter().filter(|d| d.kind == DatasetKind::Filesystem && d.objset_type == DMU_OST_ZFS) {
        if d.ds.bp.encrypted {
            refuse_unclaimed_encrypted(&spa, d)?;
            continue;
        }
        let Ok(os) = pw.objset(d.ds_obj) else { continue };
        let hdr = os.phys.zil_header.clone();
        if hdr.log.is_hole() {
            continue;
        }
        let ctx = ZioCtx::new(&spa.root_vdev, &spa.checksum_salt);
        let chain = crate::zil::parse_chain(&ctx, &hdr.log, MAX_CHAIN_BLOCKS);
        let claimed_before = hdr.claim_txg != 0;
        let claim_txg = if claimed_before { hdr.claim_txg } else { first_txg };
        let blk_limit = if claimed_before { hdr.claim_blk_seq } else { u64::MAX };
        let lr_limit = if claimed_before && hdr.flags & fz::ZIL_CLAIM_LR_SEQ_VALID != 0 { hdr.claim_lr_seq } else { u64::MAX };
        // The chain's blocks (claimed when born after the last synced txg), their records.
        let mut blocks: Vec<BlockPointer> = Vec::new();
        let mut records: Vec<LogRecord> = Vec::new();
        let mut to_free: Vec<BlockPointer> = Vec::new();
        // The blocks indirect writes name, each claimed once (zil_bp_tree_add): the pieces of
        // one block's writes, logged before the txg synced, name the same block.
        let mut named: std::collections::HashSet<(u64, u64, u64)> = std::collections::HashSet::new();
        let (mut max_blk, mut max_lr) = (0u64, 0u64);
        for (bp, recs) in &chain.blocks {
            let seq = bp.cksum[fz::ZIL_ZC_SEQ];
            if seq > blk_limit {
                break;
            }
            if !claimed_before && bp.birth >= first_txg && !claim(pw, bp)? {
                break;
            }
            max_blk = max_blk.max(seq);
            blocks.push(bp.clone());
            for r in recs {
                if r.common.seq > lr_limit {
                    break;
                }
                max_lr = max_lr.max(r.common.seq);
                // An indirect write's block: claimed like the chain's, freed after replay
                // when its txg never synced (else the file's tree holds it).
                if let LrBody::Write { blkptr, .. } = &r.body {
                    if !blkptr.is_hole() && blkptr.birth >= claim_txg && named.insert((blkptr.dva[0].vdev, blkptr.dva[0].offset, blkptr.birth)) {
                        if !claimed_before && !claim(pw, blkptr)? {
                            named.remove(&(blkptr.dva[0].vdev, blkptr.dva[0].offset, blkptr.birth));
                            continue;
                        }
                        to_free.push(blkptr.clone());
                    }
                }
                records.push(r.clone());
            }
        }
        let todo: Vec<&LogRecord> = records.iter().filter(|r| r.common.txg >= claim_txg && r.common.seq > hdr.replay_seq).collect();
        let mut error = chain.bad_record.as_ref().map(|e| format!("{e} (the log is left in place)"));
        if error.is_none() {
            if let Some(r) = todo.iter().find(|r| !replayable(r)) {
                error = Some(format!("record seq {} ({}) cannot be replayed by oxzfs (the log is left in place)", r.common.seq, fz::txtype_name(r.common.txtype)));
            }
        }
        let os = pw.objset(d.ds_obj)?;
        let mut replayed_seq = hdr.replay_seq;
        let mut applied = 0usize;
        if replay && error.is_none() {
            let fs = zplw::open_fs(os, os.props.recordsize)?;
            os.zil.replaying = true;
            for r in &todo {
                if let Err(e) = replay_record(os, &fs, &ctx, r, first_txg) {
                    error = Some(format!("replay of record seq {} ({}) failed: {e} (the log is left in place)", r.common.seq, fz::txtype_name(r.common.txtype)));
                    break;
                }
                replayed_seq = r.common.seq;
                applied += 1;
            }
            os.zil.replaying = false;
        }
        // The claim, in the header (zil_claim), and how far replay went.
        os.phys.zil_header = ZilHeaderPhys {
            claim_txg,
            replay_seq: replayed_seq,
            log: hdr.log.clone(),
            claim_blk_seq: max_blk,
            flags: fz::ZIL_CLAIM_LR_SEQ_VALID | if !records.is_empty() || blocks.len() > 1 { fz::ZIL_REPLAY_NEEDED } else { 0 },
            claim_lr_seq: max_lr,
        };
        os.zil.dirty = true;
        if !replay {
            pw.replay_deferred = true;
            continue;
        }
        match error {
            Some(e) => {
                let msg = format!("intent log of '{}': {e}", d.name);
                os.zil.replay_error = Some(msg.clone());
                report.refused.push(msg);
            }
            None => {
                if applied > 0 {
                    report.replayed.push(format!("'{}': {applied} intent log records replayed", d.name));
                }
                blocks.extend(to_free);
                done.push((d.ds_obj, blocks));
            }
        }
    }
    if !replay && pw.replay_deferred {
        pw.sync()?; // the claims
        return Ok(report);
    }
    pw.replay_deferred = false;
    if report.refused.is_empty() && done.is_empty() {
        return Ok(report);
    }
    pw.sync()?;
    // zil_destroy: the replayed chains go.
    for (ds, blocks) in done {
        let os = pw.objset(ds)?;
        os.phys.zil_header = ZilHeaderPhys::empty();
        os.zil.drop_replayed(blocks);
    }
    pw.sync()?;
    Ok(report)
}

/// An encrypted file system's intent log is left to OpenZFS (replaying it writes the dataset,
/// which oxzfs does not do). A chain already claimed is in the space maps and stays for it. A
/// chain never claimed whose first block was written holds records: a claim made by a later
/// import would take them as synced, and the blocks after the first are not in the space maps
/// (this import could hand them out again). The read-write import is refused then, before
/// anything is written. A chain whose first block was never written holds nothing.
fn refuse_unclaimed_encrypted(spa: &std::sync::Arc<crate::spa::Spa>, d: &crate::dsl::DatasetInfo) -> Result<()> {
    let os = crate::dmu::Objset::open_id(spa, &d.ds.bp, d.ds_obj)?;
    let hdr = &os.phys.zil_header;
    if hdr.log.is_hole() || hdr.claim_txg != 0 {
        return Ok(());
    }
    let ctx = ZioCtx::new(&spa.root_vdev, &spa.checksum_salt);
    let head = &hdr.log;
    let slim = head.checksum == oxzfs_format::checksum::ZIO_CHECKSUM_ZILOG2;
    let verify = |b: &[u8]| fz::decode_log_block_of(b, head.cksum, slim, head.encrypted).is_ok();
    let written = !head.dva[0].is_empty() && crate::vdev::speculative(|| crate::zio::read_dva(&ctx, &head.dva[0], head.psize, &verify)).is_ok();
    if written {
        return Err(ZfsError::Unsupported(format!(
            "cannot import '{}' read-write: encrypted file system '{}' has an intent log never claimed, which oxzfs cannot replay (import with -o readonly=on, or with OpenZFS to replay it)",
            spa.name, d.name
        )));
    }
    Ok(())
}

/// Claim every allocation of `bp` in the open txg; false (nothing claimed) when some of it
/// is not free (the block is not what the chain says: the chain ends before it).
fn claim(pw: &mut PoolW, bp: &BlockPointer) -> Result<bool> {
    let spa = pw.spa.clone();
    let mut dvas = Vec::new();
    if crate::zio::bp_allocations(&ZioCtx::new(&spa.root_vdev, &spa.checksum_salt), bp, &mut dvas).is_err() {
        return Ok(false);
    }
    let txg = pw.txg;
    let mut ms = pw.ms.lock();
    let mut got = Vec::new();
    for d in &dvas {
        if ms.claim(d.vdev, d.offset, d.asize, txg) {
            got.push(d);
        } else {
            for g in got {
                ms.free(g.vdev, g.offset, g.asize, txg, txg);
            }
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether oxzfs applies records of this type.
fn replayable(r: &LogRecord) -> bool {
    matches!(
        r.common.txtype & !fz::TX_CI,
        fz::TX_CREATE
            | fz::TX_MKDIR
            | fz::TX_SYMLINK
            | fz::TX_CREATE_ATTR
            | fz::TX_MKDIR_ATTR
            | fz::TX_REMOVE
            | fz::TX_RMDIR
            | fz::TX_LINK
            | fz::TX_RENAME
            | fz::TX_WRITE
            | fz::TX_WRITE2
            | fz::TX_TRUNCATE
            | fz::TX_SETATTR
    )
}

/// Apply one record through the ZPL (zfs_replay_vector).
fn replay_record(os: &mut ObjsetW, fs: &FsInfo, ctx: &ZioCtx, r: &LogRecord, txg: u64) -> Result<()> {
    let t = r.common.txtype & !fz::TX_CI;
    let rs = os.props.recordsize;
    match &r.body {
        LrBody::Create { c, name, link, .. } => {
            // LR_FOID_GET_OBJ: the object number is the low 48 bits.
            let obj = c.foid & ((1 << 48) - 1);
            let mut mode = c.mode;
            if t == fz::TX_MKDIR || t == fz::TX_MKDIR_ATTR {
                mode = (mode & 0o7777) | 0o040000;
            } else if t == fz::TX_SYMLINK {
                mode = (mode & 0o7777) | 0o120000;
            } else if mode & 0o170000 == 0 {
                mode |= 0o100000;
            }
            os.alloc_from(obj);
            let got = zplw::create(os, c.doid, name, mode, c.uid, c.gid, c.rdev, link.as_deref(), txg)?;
            if got != obj {
                return Err(ZfsError::Invalid(format!("object {obj} is in use (created as {got})")));
            }
            let mut z = zplw::get(os, got)?;
            z.gen = c.gen;
            z.crtime = (c.crtime[0], c.crtime[1]);
            zplw::put(os, got, &z)
        }
        LrBody::Remove { doid, name } if t == fz::TX_RMDIR => zplw::rmdir(os, fs, *doid, name),
        LrBody::Remove { doid, name } => zplw::unlink(os, fs, *doid, name, &|_| false),
        LrBody::Link { doid, link_obj, name } => zplw::link(os, *link_obj, *doid, name).map(|_| ()),
        LrBody::Rename { sdoid, tdoid, sname, tname } => zplw::rename(os, fs, *sdoid, sname, *tdoid, tname, 0, &|_| false),
        LrBody::Write { foid, offset, length, blkoff, blkptr, data } => {
            if t == fz::TX_WRITE2 {
                // The size a write split over records ends at (its bytes are in a block the
                // file already holds).
                let z = zplw::get(os, *foid)?;
                let end = offset + length;
                if end > z.size {
                    zplw::setattr(os, *foid, &SetAttr { size: Some(end), ..Default::default() }, rs)?;
                }
                return Ok(());
            }
            let bytes = if data.len() as u64 == *length {
                data.clone()
            } else if blkptr.is_hole() {
                vec![0u8; *length as usize]
            } else {
                // An indirect write: the bytes are in the block the record names.
                let b = crate::zio::read_bp(ctx, blkptr)?;
                let (s, e) = (*blkoff as usize, (*blkoff + *length) as usize);
                b.get(s..e).ok_or_else(|| ZfsError::Invalid(format!("indirect write of {length} bytes at {blkoff} in a block of {}", b.len())))?.to_vec()
            };
            zplw::write(os, *foid, *offset, &bytes, rs).map(|_| ())
        }
        LrBody::Truncate { foid, offset, length } => {
            if *length == 0 {
                zplw::setattr(os, *foid, &SetAttr { size: Some(*offset), ..Default::default() }, rs).map(|_| ())
            } else {
                // zfs_freesp: the range freed (within the file), and a range past the end
                // extends the file to it.
                let z = zplw::get(os, *foid)?;
                let end = offset.saturating_add(*length);
                if *offset < z.size {
                    zplw::fallocate(os, *foid, *offset, end.min(z.size) - offset, 0x03, rs)?;
                }
                if end > z.size {
                    zplw::setattr(os, *foid, &SetAttr { size: Some(end), ..Default::default() }, rs)?;
                }
                Ok(())
            }
        }
        LrBody::Setattr { foid, mask, mode, uid, gid, size, atime, mtime, .. } => {
            let has = |b: u64| mask & b != 0;
            let s = SetAttr {
                mode: has(fz::AT_MODE).then_some(mode & 0o7777),
                uid: has(fz::AT_UID).then_some(*uid),
                gid: has(fz::AT_GID).then_some(*gid),
                size: has(fz::AT_SIZE).then_some(*size),
                atime: has(fz::AT_ATIME).then_some((atime[0], atime[1])),
                mtime: has(fz::AT_MTIME).then_some((mtime[0], mtime[1])),
                kill_suidgid: false,
            };
            zplw::setattr(os, *foid, &s, rs).map(|_| ())
        }
        _ => Err(ZfsError::Unsupported(format!("{} records", fz::txtype_name(t)))),
    }
}
