//! dmu_recv: `zfs receive` — a replication stream (`dmu_send`'s, OpenZFS's or zfs-fuse's)
//! made into a file system and its snapshot (OpenZFS's dmu_recv.c).
//!
//! ```text
//!   BEGIN   checked: magic, a substream, features this pool and oxzfs can take, no payload
//!           full (fromguid 0): a new file system with an empty objset (no ZPL objects: the
//!             stream brings them all); incremental: the file system whose newest snapshot
//!             is the stream's from snapshot (with force, first rolled back to it), unchanged
//!             since then
//!   OBJECT  the object made (dmu_object_claim) or changed in place (reclaim: type, block
//!           size, bonus), its checksum and compression, its bonus bytes as sent
//!   FREEOBJECTS / FREE   objects freed; a range of an object freed (to its end: truncated)
//!   WRITE / WRITE_EMBEDDED / SPILL   the object's bytes (decompressed when sent compressed)
//!   END     the stream's checksum checked; the txg synced; the snapshot taken with the
//!           stream's name, guid and creation time (so later incrementals find it)
//! ```
//!
//! Every record's checksum trailer (when not zero) and END's are checked against the running
//! fletcher-4, and every field against what the objset can hold, before anything is applied
//! from it. Any failure undoes the receive: a new file system is destroyed, an existing one
//! rolled back to the snapshot the stream started from. Nothing a stream says can take the
//! daemon down: sizes are bounded before anything is allocated for them.

use crate::txg::PoolHandle;
use crate::{Result, ZfsError};
use oxzfs_format::dnode::DnodePhys;
use oxzfs_format::drr::*;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

/// The features a stream may have for oxzfs to receive it.
const RECV_FEATURES: u64 = DMU_BACKUP_FEATURE_SA_SPILL
    | DMU_BACKUP_FEATURE_EMBED_DATA
    | DMU_BACKUP_FEATURE_LZ4
    | DMU_BACKUP_FEATURE_LARGE_BLOCKS
    | DMU_BACKUP_FEATURE_COMPRESSED
    | DMU_BACKUP_FEATURE_LARGE_DNODE
    | DMU_BACKUP_FEATURE_ZSTD
    | DMU_BACKUP_FEATURE_DEDUPPROPS;
const DMU_OST_ZFS: u32 = 2;
const DN_MAX_OBJECT: u64 = 1 << 48;

/// The BEGIN record of a stream.
#[derive(Clone, Debug)]
pub struct Begin {
    pub features: u64,
    pub creation_time: u64,
    pub objset_type: u32,
    pub flags: u32,
    pub toguid: u64,
    pub fromguid: u64,
    /// "pool/fs@snap" of the sender.
    pub toname: String,
}

impl Begin {
    pub fn incremental(&self) -> bool {
        self.fromguid != 0
    }
    /// The snapshot's name in the sender ("snap" of "pool/fs@snap").
    pub fn snap(&self) -> &str {
        self.toname.split_once('@').map_or("", |(_, s)| s)
    }
}


fn invalid(msg: impl Into<String>) -> ZfsError {
    ZfsError::Invalid(format!("invalid stream ({})", msg.into()))
}

/// The stream as it is read: records and payloads, the running checksum over them.
pub struct StreamReader<'a> {
    r: &'a mut dyn Read,
    zc: [u64; 4],
    /// Bytes read so far (progress, and where an error is).
    pub offset: u64,
    /// Shared count of bytes read, for a progress report.
    pub read: Option<&'a AtomicU64>,
}

impl<'a> StreamReader<'a> {
    pub fn new(r: &'a mut dyn Read) -> Self {
        StreamReader { r, zc: [0; 4], offset: 0, read: None }
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot read the stream: {e}"))),
            }
        }
        self.offset += got as u64;
        if let Some(c) = self.read {
            c.fetch_add(got as u64, Ordering::Relaxed);
        }
        if got == 0 {
            return Ok(false);
        }
        if got < buf.len() {
            return Err(invalid(format!("it ends at byte {} inside a record", self.offset)));
        }
        Ok(true)
    }

    /// The next record header, its trailer checked (None: the stream ended cleanly before one).
    pub fn record(&mut self) -> Result<Option<[u8; RECORD_SIZE]>> {
        let mut r = [0u8; RECORD_SIZE];
        // The first record is the BEGIN, whatever its bytes say (read_begin checks them).
        let first = self.offset == 0;
        if !self.fill(&mut r)? {
            return Ok(None);
        }
        let before = self.zc;
        fletcher4_more(&mut self.zc, &r[..TRAILER]);
        let typ = u32_at(&r, 0);
        if typ != DRR_BEGIN && !first {
            let trailer: Vec<u64> = (0..4).map(|i| u64_at(&r, TRAILER + 8 * i)).collect();
            if trailer.iter().any(|&w| w != 0) && trailer != self.zc {
                return Err(invalid(format!("checksum mismatch in the record at byte {}", self.offset - RECORD_SIZE as u64)));
            }
        }
        if typ == DRR_END && !first {
            let sent: Vec<u64> = (0..4).map(|i| u64_at(&r, 8 + 8 * i)).collect();
            if sent != before {
                return Err(invalid("checksum mismatch: the END record's checksum is not the stream's"));
            }
        }
        fletcher4_more(&mut self.zc, &r[TRAILER..]);
        Ok(Some(r))
    }

    /// `n` bytes of payload (bounded by the caller).
    pub fn payload(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; n];
        if n > 0 && !self.fill(&mut v)? {
            return Err(invalid(format!("it ends at byte {} before a record's payload", self.offset)));
        }
        fletcher4_more(&mut self.zc, &v);
        Ok(v)
    }
}


/// What a stream starts with.
#[derive(Debug)]
pub enum Head {
    /// One file system's stream (its BEGIN).
    Sub(Begin),
    /// A package (`zfs send -R`, `-p`, `-I`): its name ("pool/fs@snap") and header list, its
    /// head checked; its streams follow, then an END.
    Package { toname: String, header: Option<oxzfs_format::nvlist::NvList> },
    /// An END where a stream could begin: the end of a package.
    End,
}

/// The most a package's header list may take (libzfs_max_nvlist's default).
const MAX_PACKAGE_HEADER: usize = 64 << 20;

/// Read and check a stream's BEGIN record. None: the input is empty (the end of a series of
/// concatenated streams).
pub fn read_begin(s: &mut StreamReader) -> Result<Option<Begin>> {
    match read_head(s)? {
        None => Ok(None),
        Some(Head::Sub(b)) => Ok(Some(b)),
        Some(Head::Package { .. }) => Err(ZfsError::Unsupported("the stream is a package (zfs send -R, -p or -I), read with read_head".into())),
        Some(Head::End) => Err(invalid("an END record where a BEGIN belongs")),
    }
}

/// Read what starts a stream: a BEGIN (checked), a package's head (its list read and its
/// checksum checked), or a package's closing END. None: the input is empty.
pub fn read_head(s: &mut StreamReader) -> Result<Option<Head>> {
    let Some(r) = s.record()? else { return Ok(None) };
    if u32_at(&r, 0) == DRR_END {
        return Ok(Some(Head::End));
    }
    let magic = u64_at(&r, 8);
    if magic == DMU_BACKUP_MAGIC.swap_bytes() {
        return Err(ZfsError::Unsupported("the stream was written by a big-endian system; oxzfs receives little-endian streams only".into()));
    }
    if u32_at(&r, 0) != DRR_BEGIN || magic != DMU_BACKUP_MAGIC {
        return Err(invalid("bad magic number"));
    }
    let vi = u64_at(&r, 16);
    let hdrtype = vi & 3;
    let features = (vi >> 2) & ((1 << 30) - 1);
    if hdrtype == DMU_COMPOUNDSTREAM {
        if features & !(DMU_BACKUP_FEATURE_HOLDS | DMU_BACKUP_FEATURE_SA_SPILL) != 0 {
            return Err(ZfsError::Unsupported(format!("the package has features oxzfs does not receive (flags {features:x}: deduplicated or raw)")));
        }
        let len = u32_at(&r, 4) as usize;
        if len > MAX_PACKAGE_HEADER {
            return Err(invalid(format!("a package header of {len} bytes")));
        }
        let payload = s.payload(len)?;
        let header = if len == 0 {
            None
        } else {
            Some(oxzfs_format::nvlist::NvList::decode_packed(&payload).map_err(|e| invalid(format!("malformed nvlist: {e}")))?)
        };
        // The head's END holds the fletcher-4 of the BEGIN and the list, at its checksum field.
        let mut end = [0u8; RECORD_SIZE];
        if !s.fill(&mut end)? || u32_at(&end, 0) != DRR_END {
            return Err(invalid("incorrect header checksum (no END after the package header)"));
        }
        let sent: Vec<u64> = (0..4).map(|i| u64_at(&end, 8 + 8 * i)).collect();
        if sent != s.zc {
            return Err(invalid("incorrect header checksum"));
        }
        let name = &r[56..56 + 256];
        let n = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let toname = std::str::from_utf8(&name[..n]).map_err(|_| invalid("bad snapshot name"))?.to_string();
        if !toname.contains('@') {
            return Err(invalid("bad snapshot name"));
        }
        return Ok(Some(Head::Package { toname, header }));
    }
    if hdrtype != DMU_SUBSTREAM {
        return Err(invalid(format!("unknown header type {hdrtype}")));
    }
    for (f, what) in [
        (DMU_BACKUP_FEATURE_RAW, "a raw (encrypted) stream"),
        (DMU_BACKUP_FEATURE_DEDUP, "a deduplicated stream (zfs send -D)"),
        (DMU_BACKUP_FEATURE_RESUMING, "a resumed stream"),
        (DMU_BACKUP_FEATURE_REDACTED, "a redacted stream"),
    ] {
        if features & f != 0 {
            return Err(ZfsError::Unsupported(format!("the stream is {what}, which oxzfs does not receive")));
        }
    }
    if features & !RECV_FEATURES != 0 {
        return Err(ZfsError::Unsupported(format!("stream has unsupported feature, feature flags = {:x}", features & !RECV_FEATURES)));
    }
    let payload = u32_at(&r, 4) as usize;
    if payload > 0 {
        return Err(ZfsError::Unsupported(format!("the stream's BEGIN record carries {payload} bytes of parameters (resume, redaction or keys), which oxzfs does not receive")));
    }
    let name = &r[56..56 + 256];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let toname = std::str::from_utf8(&name[..end]).map_err(|_| invalid("bad snapshot name"))?.to_string();
    if !toname.contains('@') {
        return Err(invalid("bad snapshot name"));
    }
    let b = Begin { features, creation_time: u64_at(&r, 24), objset_type: u32_at(&r, 32), flags: u32_at(&r, 36), toguid: u64_at(&r, 40), fromguid: u64_at(&r, 48), toname };
    if b.objset_type != DMU_OST_ZFS {
        return Err(ZfsError::Unsupported(format!("the stream holds an objset of type {}; oxzfs receives file systems only", b.objset_type)));
    }
    if b.flags & DRR_FLAG_CLONE != 0 && !b.incremental() {
        return Err(ZfsError::Unsupported("the stream is a full stream of a clone, which oxzfs does not receive (send it incrementally from its origin)".into()));
    }
    Ok(Some(Head::Sub(b)))
}

/// What `receive` was asked for.
#[derive(Clone, Debug, Default)]
pub struct RecvOpts {
    /// -F: roll the file system back to the stream's from snapshot (destroying later ones), or
    /// for a full stream replace a file system without snapshots.
    pub force: bool,
    /// -o prop=value: set on the received file system (as `zfs set` would).
    pub props: Vec<(String, String)>,
    /// -d: a new file system's missing parents are made (empty file systems).
    pub create_parents: bool,
}

/// What a receive made.
#[derive(Debug)]
pub struct Received {
    pub fs: String,
    pub snapshot: String,
    pub bytes: u64,
}

/// Receive the stream whose BEGIN is `b` (read from `s`) into file system `fs` as snapshot
/// `snap`. The file system must not be mounted meanwhile (the caller unmounts it).
pub fn receive(h: &PoolHandle, b: &Begin, s: &mut StreamReader, fs: &str, snap: &str, o: &RecvOpts) -> Result<Received> {
    let full = format!("{fs}@{snap}");
    if let Some(m) = crate::dsl_snapshot::snapshot_name_error(&full) {
        return Err(ZfsError::Invalid(format!("cannot receive: invalid name '{full}': {m}")));
    }
    let what = if b.incremental() { "incremental stream" } else { "new filesystem stream" };
    let ctx = |e: ZfsError| -> ZfsError {
        let m = e.to_string();
        let m = if m.starts_with("cannot") { m } else { format!("cannot receive {what}: {m}") };
        match e {
            ZfsError::Unsupported(_) => ZfsError::Unsupported(m),
            ZfsError::NotFound(_) => ZfsError::NotFound(m),
            _ => ZfsError::Invalid(m),
        }
    };
    // Into an encrypted file system, or under one: refused before anything is written.
    {
        let mut w = h.lock();
        let mut at = fs;
        loop {
            if let Some(dir) = w.find_dir(at)? {
                w.refuse_encrypted(dir, &format!("cannot receive {what} into '{fs}'"))?;
                break;
            }
            match at.rsplit_once('/') {
                Some((parent, _)) => at = parent,
                None => break,
            }
        }
    }
    let (dsobj, undo) = begin(h, b, fs, snap, o).map_err(ctx)?;
    let set_props = || -> Result<()> {
        let mut w = h.lock();
        for (k, v) in &o.props {
            w.set_prop(fs, k, Some(v)).map_err(|e| ZfsError::Invalid(format!("cannot set property '{k}={v}': {e}")))?;
        }
        Ok(())
    };
    let r = set_props().and_then(|_| apply(h, b, s, dsobj)).and_then(|_| finish(h, b, fs, snap, dsobj));
    match r {
        Ok(()) => Ok(Received { fs: fs.to_string(), snapshot: full, bytes: s.offset }),
        Err(e) => {
            // Nothing of a failed receive stays.
            let _ = h.sync_now();
            let mut w = h.lock();
            w.datasets.remove(&dsobj);
            let _ = match &undo {
                Undo::Destroy => w.destroy_dataset(fs),
                Undo::Rollback(to) => w.rollback(to),
            };
            drop(w);
            // The undo on disk before the command answers (what it lists and mounts next).
            let _ = h.sync_now();
            Err(ctx(e))
        }
    }
}

enum Undo {
    Destroy,
    Rollback(String),
}

/// dmu_recv_begin: check the target against the stream; make the new file system or roll
/// the existing one back as asked. The dataset the records go to, and how to undo.
fn begin(h: &PoolHandle, b: &Begin, fs: &str, snap: &str, o: &RecvOpts) -> Result<(u64, Undo)> {
    let mut w = h.lock();
    // Features the pool must have for what the stream holds.
    let need = |w: &crate::dsl_pool::PoolW, guid: &str| -> Result<()> {
        if w.version >= crate::spa::SPA_VERSION_FEATURES && w.features.contains_key(guid) {
            Ok(())
        } else {
            Err(ZfsError::Unsupported(format!("pool must be upgraded to receive this stream (it needs feature {guid})")))
        }
    };
    if b.features & DMU_BACKUP_FEATURE_SA_SPILL != 0 && w.version < 24 {
        return Err(ZfsError::Unsupported(format!("pool must be upgraded to receive this stream (system attributes need version 24, the pool is version {})", w.version)));
    }
    if b.features & DMU_BACKUP_FEATURE_LARGE_BLOCKS != 0 {
        need(&w, "org.open-zfs:large_blocks")?;
    }
    if b.features & DMU_BACKUP_FEATURE_LARGE_DNODE != 0 {
        need(&w, "org.zfsonlinux:large_dnode")?;
    }
    if b.features & DMU_BACKUP_FEATURE_EMBED_DATA != 0 {
        need(&w, "com.delphix:embedded_data")?;
    }
    if w.find_snapshot(&format!("{fs}@{snap}"))?.is_some() {
        return Err(ZfsError::Invalid(format!("destination '{fs}@{snap}' exists")));
    }
    let head = w.find_dataset(fs)?;
    if !b.incremental() {
        if let Some(head) = head {
            if !o.force {
                return Err(ZfsError::Invalid(format!("destination '{fs}' exists\nmust specify -F to overwrite it")));
            }
            let p = w.ds_phys(head)?;
            if p.prev_snap_obj != 0 && w.ds_phys(p.prev_snap_obj)?.dir_obj == p.dir_obj {
                return Err(ZfsError::Invalid(format!("destination has snapshots (eg. {})\nmust destroy them to overwrite it", newest_snapshot_name(&mut w, fs, head)?)));
            }
            w.destroy_dataset(fs)?;
        }
        let parent = fs.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        if w.find_dataset(parent)?.is_none() {
            if !o.create_parents || !parent.contains('/') {
                return Err(ZfsError::NotFound(format!("destination parent '{parent}' does not exist")));
            }
            w.create_dataset(parent, &[], true)?;
        }
        let init = std::mem::replace(&mut w.fs_init, crate::dbuf::empty_objset_init);
        let r = w.create_dataset(fs, &[], false);
        w.fs_init = init;
        let ds = r?;
        if b.flags & DRR_FLAG_CI_DATA != 0 {
            let mut p = w.ds_phys(ds)?;
            p.flags |= oxzfs_format::dsl::DS_FLAG_CI_DATASET;
            w.mos.set_bonus(ds, &p.encode())?;
        }
        if b.features & DMU_BACKUP_FEATURE_LARGE_BLOCKS != 0 {
            w.ds_feature_activate(ds, "org.open-zfs:large_blocks")?;
        }
        return Ok((ds, Undo::Destroy));
    }
    let Some(head) = head else {
        // An incremental stream of a clone from its origin (DRR_FLAG_CLONE): a new clone of
        // the pool's snapshot with the stream's source guid, as libzfs finds the origin.
        if b.flags & DRR_FLAG_CLONE != 0 {
            let list = crate::dsl::list_datasets(&w.spa)?;
            let Some(origin) = list.iter().find(|d| d.kind == crate::dsl::DatasetKind::Snapshot && d.ds.guid == b.fromguid) else {
                return Err(ZfsError::NotFound(format!("local origin for clone {fs} does not exist (no snapshot with guid {:x})", b.fromguid)));
            };
            let parent = fs.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
            if w.find_dataset(parent)?.is_none() {
                return Err(ZfsError::NotFound(format!("destination parent '{parent}' does not exist")));
            }
            let ds = w.create_dataset_from(fs, &[], false, Some(origin.ds_obj))?;
            if b.features & DMU_BACKUP_FEATURE_LARGE_BLOCKS != 0 {
                w.ds_feature_activate(ds, "org.open-zfs:large_blocks")?;
            }
            w.sync()?;
            w.datasets.remove(&ds);
            return Ok((ds, Undo::Destroy));
        }
        return Err(ZfsError::NotFound(format!("destination '{fs}' does not exist")));
    };
    // The snapshot the stream starts from, and whether it is the newest.
    let p = w.ds_phys(head)?;
    let mut from = None;
    let mut newest = true;
    let mut s = p.prev_snap_obj;
    while s != 0 {
        let sp = w.ds_phys(s)?;
        if sp.dir_obj != p.dir_obj {
            break;
        }
        if sp.guid == b.fromguid {
            from = Some(s);
            break;
        }
        newest = false;
        s = sp.prev_snap_obj;
    }
    let Some(from) = from else {
        return Err(ZfsError::Invalid(format!("destination '{fs}' does not have the stream's source snapshot (guid {:x})", b.fromguid)));
    };
    let from_name = format!("{fs}@{}", snapshot_name(&mut w, head, from)?);
    if !newest && !o.force {
        return Err(ZfsError::Invalid(format!("destination has snapshots newer than '{from_name}'\nmust use -F to destroy them")));
    }
    // dsl_dataset_modified_since_snap: born after the snapshot and with another dnode array
    // (a change of the intent log alone, which a mount starts, is no change).
    w.sync()?;
    let fp = w.ds_phys(from)?;
    let p = w.ds_phys(head)?;
    let modified = p.bp.birth > fp.creation_txg && {
        let a = crate::dmu::Objset::open_id(&w.spa, &p.bp, head)?;
        let b = crate::dmu::Objset::open_id(&w.spa, &fp.bp, from)?;
        a.phys.meta_dnode.blkptr != b.phys.meta_dnode.blkptr || a.phys.meta_dnode.maxblkid != b.phys.meta_dnode.maxblkid
    };
    if !o.force && modified {
        return Err(ZfsError::Invalid(format!("destination {fs} has been modified\nsince most recent snapshot")));
    }
    if o.force && (!newest || modified) {
        for n in w.snapshots_after(fs, from)? {
            w.destroy_snapshot(&n)?;
        }
        w.rollback(&from_name)?;
    }
    if b.features & DMU_BACKUP_FEATURE_LARGE_BLOCKS != 0 {
        w.ds_feature_activate(head, "org.open-zfs:large_blocks")?;
    }
    // The records go to a fresh view of the objset (no cache of what the mount read), its
    // intent log gone with the mount that started it (everything it logged is synced).
    w.sync()?;
    w.zil_destroy(head)?;
    w.sync()?;
    w.datasets.remove(&head);
    Ok((head, Undo::Rollback(from_name)))
}

fn snapshot_name(w: &mut crate::dsl_pool::PoolW, head: u64, snap: u64) -> Result<String> {
    let names = w.ds_phys(head)?.snapnames_zapobj;
    let z = w.mos.zap(names)?;
    z.entries
        .iter()
        .find(|(_, v)| v.1.first().copied() == Some(snap))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .ok_or_else(|| ZfsError::NotFound(format!("snapshot object {snap}")))
}

fn newest_snapshot_name(w: &mut crate::dsl_pool::PoolW, fs: &str, head: u64) -> Result<String> {
    let s = w.ds_phys(head)?.prev_snap_obj;
    Ok(format!("{fs}@{}", snapshot_name(w, head, s)?))
}

/// The records, applied until END.
fn apply(h: &PoolHandle, b: &Begin, s: &mut StreamReader, dsobj: u64) -> Result<()> {
    let max_blksz = if b.features & DMU_BACKUP_FEATURE_LARGE_BLOCKS != 0 { MAX_BLOCKSIZE } else { 128 << 10 };
    let spill_block = b.flags & DRR_FLAG_SPILL_BLOCK != 0;
    let mut last_write = (0u64, 0u64);
    loop {
        let Some(r) = s.record()? else {
            return Err(invalid(format!("it ends at byte {} without an END record", s.offset)));
        };
        let typ = u32_at(&r, 0);
        let toguid_at = match typ {
            DRR_OBJECT | DRR_WRITE => Some(40),
            DRR_FREEOBJECTS | DRR_SPILL => Some(24),
            DRR_FREE | DRR_WRITE_EMBEDDED => Some(32),
            DRR_END => Some(40),
            _ => None,
        };
        if let Some(at) = toguid_at {
            let g = u64_at(&r, at);
            if g != 0 && g != b.toguid {
                return Err(invalid(format!("a record at byte {} belongs to another stream", s.offset - RECORD_SIZE as u64)));
            }
        }
        match typ {
            DRR_END => return Ok(()),
            DRR_OBJECT => object(h, s, &r, dsobj, max_blksz, spill_block)?,
            DRR_FREEOBJECTS => {
                let (first, num) = (u64_at(&r, 8), u64_at(&r, 16));
                if first.checked_add(num).is_none() {
                    return Err(invalid(format!("FREEOBJECTS of {num} objects from {first}")));
                }
                h.with_fs_received(dsobj, |os, _| {
                    let end = first.saturating_add(num).min(os.object_limit());
                    for obj in first.max(1)..end {
                        if os.exists(obj) {
                            os.free_object(obj)?;
                        }
                    }
                    Ok(())
                })?;
            }
            DRR_WRITE => {
                let (obj, typ, off, lsize) = (u64_at(&r, 8), u32_at(&r, 16), u64_at(&r, 24), u64_at(&r, 32));
                let (comp, psize) = (r[50], u64_at(&r, 96));
                if !oxzfs_format::types::ot_is_valid(typ.min(255) as u8) || typ > 255 || off.checked_add(lsize).is_none() || lsize == 0 || lsize > max_blksz {
                    return Err(invalid(format!("WRITE of {lsize} bytes at {off} of object {obj}")));
                }
                if (obj, off) < last_write {
                    return Err(invalid(format!("WRITE of object {obj} at {off} out of order")));
                }
                last_write = (obj, off);
                let data = if comp != 0 {
                    if psize == 0 || psize > lsize || comp >= oxzfs_format::compress::ZIO_COMPRESS_FUNCTIONS {
                        return Err(invalid(format!("compressed WRITE of object {obj}: compression {comp}, {psize} of {lsize} bytes")));
                    }
                    let p = s.payload(psize as usize)?;
                    oxzfs_format::compress::decompress(comp, &p, lsize as usize).map_err(|e| invalid(format!("WRITE of object {obj} at {off} does not decompress: {e}")))?
                } else {
                    s.payload(lsize as usize)?
                };
                write(h, dsobj, obj, off, &data)?;
            }
            DRR_WRITE_EMBEDDED => {
                let (obj, off, len) = (u64_at(&r, 8), u64_at(&r, 16), u64_at(&r, 24));
                let (comp, etype, lsize, psize) = (r[40], r[41], u32_at(&r, 48) as u64, u32_at(&r, 52) as u64);
                if etype != 0 || psize > 112 || psize == 0 || lsize > max_blksz || lsize < len || off.checked_add(len).is_none() || comp >= oxzfs_format::compress::ZIO_COMPRESS_FUNCTIONS {
                    return Err(invalid(format!("WRITE_EMBEDDED of object {obj} at {off}: type {etype}, {psize} -> {lsize} bytes")));
                }
                let p = s.payload(psize.div_ceil(8) as usize * 8)?;
                let data = if comp == 0 || comp == 2 {
                    p[..psize as usize].to_vec()
                } else {
                    oxzfs_format::compress::decompress(comp, &p[..psize as usize], lsize as usize).map_err(|e| invalid(format!("WRITE_EMBEDDED of object {obj} does not decompress: {e}")))?
                };
                let mut data = data;
                data.resize(lsize as usize, 0);
                write(h, dsobj, obj, off, &data[..len as usize])?;
            }
            DRR_FREE => {
                let (obj, off, len) = (u64_at(&r, 8), u64_at(&r, 16), u64_at(&r, 24));
                if len != OBJECT_END && off.checked_add(len).is_none() {
                    return Err(invalid(format!("FREE of {len} bytes at {off} of object {obj}")));
                }
                h.with_fs_received(dsobj, |os, _| {
                    if !os.exists(obj) {
                        return Err(invalid(format!("FREE in object {obj}, which the stream has not made")));
                    }
                    if len == OBJECT_END || off.saturating_add(len) >= u64::MAX / 2 {
                        os.truncate(obj, off)
                    } else {
                        os.punch(obj, off, len)
                    }
                })?;
            }
            DRR_SPILL => {
                let (obj, len, flags, comp, psize) = (u64_at(&r, 8), u64_at(&r, 16), r[32], r[33], u64_at(&r, 40));
                if !(512..=128 << 10).contains(&len) || len % 512 != 0 || comp != 0 || psize != 0 {
                    return Err(invalid(format!("SPILL of {len} bytes for object {obj}")));
                }
                let data = s.payload(len as usize)?;
                if spill_block && flags & DRR_SPILL_UNMODIFIED != 0 {
                    continue;
                }
                h.with_fs_received(dsobj, |os, _| {
                    if !os.exists(obj) {
                        return Err(invalid(format!("SPILL of object {obj}, which the stream has not made")));
                    }
                    os.set_spill(obj, Some(data))
                })?;
            }
            DRR_BEGIN => return Err(invalid(format!("a second BEGIN record at byte {}", s.offset - RECORD_SIZE as u64))),
            DRR_WRITE_BYREF => return Err(ZfsError::Unsupported("the stream is deduplicated (WRITE_BYREF records), which oxzfs does not receive".into())),
            DRR_OBJECT_RANGE | DRR_REDACT => return Err(ZfsError::Unsupported(format!("record type {typ} (raw or redacted streams) is not received by oxzfs"))),
            t => return Err(invalid(format!("unknown record type {t} at byte {}", s.offset - RECORD_SIZE as u64))),
        }
    }
}

/// A dry run (`zfs receive -n`): every record after BEGIN read and its checksum checked, up
/// to END; nothing applied.
pub fn check_records(s: &mut StreamReader) -> Result<()> {
    loop {
        let Some(r) = s.record()? else {
            return Err(invalid(format!("it ends at byte {} without an END record", s.offset)));
        };
        let n = match u32_at(&r, 0) {
            DRR_END => return Ok(()),
            DRR_OBJECT => (u32_at(&r, 28) as u64).div_ceil(8) * 8,
            DRR_WRITE if r[50] != 0 => u64_at(&r, 96),
            DRR_WRITE => u64_at(&r, 32),
            DRR_WRITE_EMBEDDED => (u32_at(&r, 52) as u64).div_ceil(8) * 8,
            DRR_SPILL if u64_at(&r, 40) != 0 => u64_at(&r, 40),
            DRR_SPILL => u64_at(&r, 16),
            DRR_FREE | DRR_FREEOBJECTS => 0,
            t => return Err(invalid(format!("unexpected record type {t} at byte {}", s.offset - RECORD_SIZE as u64))),
        };
        if n > MAX_BLOCKSIZE {
            return Err(invalid(format!("a payload of {n} bytes at byte {}", s.offset)));
        }
        s.payload(n as usize)?;
    }
}

/// One WRITE's bytes into object `obj` (which the stream made).
fn write(h: &PoolHandle, dsobj: u64, obj: u64, off: u64, data: &[u8]) -> Result<()> {
    h.with_fs_received(dsobj, |os, _| {
        if !os.exists(obj) {
            return Err(invalid(format!("WRITE to object {obj}, which the stream has not made")));
        }
        os.write(obj, off, data)
    })
}

/// receive_object: an OBJECT record, checked, then the object made or changed.
fn object(h: &PoolHandle, s: &mut StreamReader, r: &[u8; RECORD_SIZE], dsobj: u64, max_blksz: u64, spill_block: bool) -> Result<()> {
    let obj = u64_at(r, 8);
    let (typ, bonustype, blksz, bonuslen) = (u32_at(r, 16), u32_at(r, 20), u32_at(r, 24) as u64, u32_at(r, 28) as usize);
    let (checksum, compress, slots, flags) = (r[32], r[33], r[34].max(1) as usize, r[35]);
    let raw = u32_at(r, 36) != 0 || r[48] != 0 || r[49] != 0 || r[50] != 0 || u64_at(r, 56) != 0;
    let bad = |why: &str| invalid(format!("OBJECT {obj}: {why}"));
    if obj == 0 || obj >= DN_MAX_OBJECT {
        return Err(bad("no such object number"));
    }
    if typ == 0 || typ > 255 || !oxzfs_format::types::ot_is_valid(typ as u8) || bonustype > 255 || !oxzfs_format::types::ot_is_valid(bonustype as u8) {
        return Err(bad(&format!("type {typ}, bonus type {bonustype}")));
    }
    if checksum as usize >= oxzfs_format::checksum::ZIO_CHECKSUM_FUNCTIONS || compress >= oxzfs_format::compress::ZIO_COMPRESS_FUNCTIONS {
        return Err(bad(&format!("checksum {checksum}, compression {compress}")));
    }
    if blksz < 512 || blksz % 512 != 0 || blksz > max_blksz {
        return Err(bad(&format!("block size {blksz}")));
    }
    if slots > 32 || obj % 32 + slots as u64 > 32 {
        return Err(bad(&format!("{slots} dnode slots")));
    }
    if bonuslen > DnodePhys::bonus_room(slots, 1) {
        return Err(bad(&format!("bonus of {bonuslen} bytes in {slots} slots")));
    }
    if flags & !DRR_OBJECT_SPILL != 0 || (flags & DRR_OBJECT_SPILL != 0 && !spill_block) || raw {
        return Err(bad("flags or raw fields this stream cannot have"));
    }
    let payload = s.payload(bonuslen.div_ceil(8) * 8)?;
    let bonus = &payload[..bonuslen];
    // A dnode of another size: freed, synced, then made anew.
    let resize = h.with_fs_received(dsobj, |os, _| Ok(os.dnode(obj).ok().is_some_and(|d| d.slots() != slots)))?;
    if resize {
        h.with_fs_received(dsobj, |os, _| os.free_object(obj))?;
        h.sync_now()?;
    }
    let has_spill = flags & DRR_OBJECT_SPILL != 0;
    // The block pointers the dnode gets (deduce_nblkptr): one under system attributes, whose
    // bonus takes the dnode's room; else as many as the bonus leaves room for, up to 3. A
    // spill's block pointer needs the room's last 128 bytes.
    let nblkptr = if bonustype == oxzfs_format::types::DMU_OT_SA as u32 { 1 } else { ((DnodePhys::bonus_room(slots, 1) - bonuslen) / 128 + 1).clamp(1, 3) };
    if DnodePhys::bonus_room(slots, nblkptr) < bonuslen + if has_spill { 128 } else { 0 } {
        return Err(bad(&format!("a bonus of {bonuslen} bytes leaves no room for its spill block")));
    }
    h.with_fs_received(dsobj, |os, _| {
        let set_nblkptr = |os: &mut crate::dbuf::ObjsetW| -> Result<()> {
            let d = os.dirty_obj(obj)?;
            d.dn.nblkptr = nblkptr as u8;
            d.dn.blkptr.resize(nblkptr, oxzfs_format::blkptr::BlockPointer::hole());
            Ok(())
        };
        match os.dnode(obj) {
            Err(ZfsError::NotFound(_)) => {
                os.alloc_from(obj);
                let got = os.alloc_object(typ as u8, blksz, bonustype as u8, 0, slots)?;
                if got != obj {
                    os.free_object(got)?;
                    return Err(bad("its dnode slots are taken"));
                }
                set_nblkptr(os)?;
            }
            Err(e) => return Err(e),
            Ok(dn) => {
                // receive_object on an existing object: its data goes when the block size
                // changes or the bonus grows into the block pointers' room.
                if dn.data_block_size() != blksz || nblkptr < dn.nblkptr as usize {
                    os.truncate(obj, 0)?;
                    let d = os.dirty_obj(obj)?;
                    d.dn.datablkszsec = (blksz / 512) as u16;
                    d.dn.maxblkid = 0;
                    set_nblkptr(os)?;
                } else if DnodePhys::bonus_room(slots, dn.nblkptr as usize) < bonuslen + if has_spill { 128 } else { 0 } {
                    return Err(bad(&format!("a bonus of {bonuslen} bytes does not fit the object as it is")));
                }
                let d = os.dirty_obj(obj)?;
                d.dn.typ = typ as u8;
                d.dn.bonustype = bonustype as u8;
            }
        }
        {
            let d = os.dirty_obj(obj)?;
            d.dn.checksum = checksum;
            d.dn.compress = compress;
        }
        os.set_bonus(obj, bonus)?;
        if spill_block && !has_spill && os.spill(obj)?.is_some() {
            os.set_spill(obj, None)?;
        }
        Ok(())
    })
}

/// dmu_recv_end: the txg synced, then the snapshot with the stream's identity.
fn finish(h: &PoolHandle, b: &Begin, fs: &str, snap: &str, dsobj: u64) -> Result<()> {
    h.sync_now()?;
    let mut w = h.lock();
    let name = format!("{fs}@{snap}");
    w.snapshot(std::slice::from_ref(&name), &[])?;
    let so = w.find_snapshot(&name)?.ok_or_else(|| ZfsError::NotFound(name.clone()))?;
    let mut p = w.ds_phys(so)?;
    p.guid = b.toguid;
    p.creation_time = b.creation_time;
    w.mos.set_bonus(so, &p.encode())?;
    w.datasets.remove(&dsobj);
    w.sync()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small well-formed stream: BEGIN, OBJECT 1 (8 bytes of bonus), FREE to its end, WRITE
    /// of 512 bytes, END; every trailer and the END checksum filled as a sender does.
    fn stream() -> Vec<u8> {
        let mut out = Vec::new();
        let mut zc = [0u64; 4];
        let mut emit = |mut r: [u8; RECORD_SIZE], payload: &[u8], out: &mut Vec<u8>| {
            fletcher4_more(&mut zc, &r[..TRAILER]);
            if u32_at(&r, 0) == DRR_END {
                // drr_end.drr_checksum: the stream before END (taken before its own head).
                let mut z = [0u64; 4];
                fletcher4_more(&mut z, out);
                for (i, w) in z.iter().enumerate() {
                    put64(&mut r, 8 + 8 * i, *w);
                }
                zc = [0; 4];
                fletcher4_more(&mut zc, out);
                fletcher4_more(&mut zc, &r[..TRAILER]);
            }
            if u32_at(&r, 0) != DRR_BEGIN {
                for (i, w) in zc.iter().enumerate() {
                    put64(&mut r, TRAILER + 8 * i, *w);
                }
            }
            fletcher4_more(&mut zc, &r[TRAILER..]);
            out.extend_from_slice(&r);
            fletcher4_more(&mut zc, payload);
            out.extend_from_slice(payload);
        };
        let mut b = record(DRR_BEGIN);
        put64(&mut b, 8, DMU_BACKUP_MAGIC);
        put64(&mut b, 16, DMU_SUBSTREAM);
        put32(&mut b, 32, 2);
        put64(&mut b, 40, 0x1234);
        b[56..62].copy_from_slice(b"p/f@s\0");
        emit(b, &[], &mut out);
        let mut o = record(DRR_OBJECT);
        put64(&mut o, 8, 1);
        put32(&mut o, 16, 19);
        put32(&mut o, 24, 512);
        put32(&mut o, 28, 8);
        o[34] = 1;
        put64(&mut o, 40, 0x1234);
        emit(o, &[7u8; 8], &mut out);
        let mut f = record(DRR_FREE);
        put64(&mut f, 8, 1);
        put64(&mut f, 16, 512);
        put64(&mut f, 24, OBJECT_END);
        emit(f, &[], &mut out);
        let mut w = record(DRR_WRITE);
        put64(&mut w, 8, 1);
        put32(&mut w, 16, 19);
        put64(&mut w, 32, 512);
        emit(w, &[9u8; 512], &mut out);
        emit(record(DRR_END), &[], &mut out);
        out
    }

    fn check(bytes: &[u8]) -> Result<()> {
        let mut cur = std::io::Cursor::new(bytes.to_vec());
        let mut s = StreamReader::new(&mut cur);
        read_begin(&mut s)?.ok_or_else(|| invalid("empty"))?;
        check_records(&mut s)
    }

    #[test]
    fn a_well_formed_stream_reads_to_its_end() {
        let s = stream();
        check(&s).expect("the stream is well formed");
        let mut cur = std::io::Cursor::new(s.clone());
        let mut r = StreamReader::new(&mut cur);
        let b = read_begin(&mut r).unwrap().unwrap();
        assert_eq!((b.toname.as_str(), b.toguid, b.incremental(), b.snap()), ("p/f@s", 0x1234, false, "s"));
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_refused() {
        let s = stream();
        for n in 0..s.len() {
            assert!(check(&s[..n]).is_err(), "cut at {n} accepted");
        }
        for i in 0..s.len() {
            for bit in [0u8, 3, 7] {
                let mut t = s.clone();
                t[i] ^= 1 << bit;
                // BEGIN has no trailer, but the next record's covers it.
                assert!(check(&t).is_err(), "byte {i} bit {bit} flipped accepted");
            }
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x9e3779b97f4a7c15u64;
        for len in [0usize, 1, 311, 312, 313, 624, 1000, 5000] {
            for _ in 0..50 {
                let mut v = Vec::with_capacity(len);
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    v.push(x as u8);
                }
                // A valid BEGIN in front of garbage, and garbage alone.
                let mut with_begin = stream()[..312].to_vec();
                with_begin.extend_from_slice(&v);
                let _ = check(&v);
                assert!(check(&with_begin).is_err());
            }
        }
    }
}
