//! dbuf: the writable view of an objset — dirty dnodes, dirty data blocks and dirty ZAPs of the
//! open txg — and its sync, which turns them into new blocks bottom-up (copy-on-write).
//!
//! ```text
//!   open txg (in memory)                       syncing txg (sync_objset)
//!   DirtyObj { dn, blocks: blkid → bytes,      L0 blocks ─ zio::write_block ─► bps
//!              zap: entries,  trunc_from }     indirect blocks (old ones read, entries
//!                                              replaced) ─► bps, up to dn.blkptr[]
//!                                              dirty dnodes ─► meta-dnode L0 blocks ─► its
//!                                              tree ─► objset_phys block ─► the new objset bp
//! ```
//!
//! Reads see the open txg: a dirty block or ZAP wins, else the last synced tree (through a
//! read-only [`Objset`] of the synced objset_phys). The dnode held in memory keeps the synced
//! block-pointer tree until sync replaces it, so reads of clean blocks of a dirty object still
//! walk the on-disk tree. Every block replaced or freed is handed to the `SyncCtx` for the
//! allocator (and the dataset's space accounting).
//!
//! Holes: a block freed (truncate, punch) or rewritten as zeros, and an indirect left with holes
//! only, becomes a hole; under hole_birth one that replaces a written block keeps its lsize, type
//! and level and records the txg (`SyncCtx::hole_for`), as OpenZFS's free_blocks and
//! zio_write_compress do. Blocks born in a sync note the per-dataset features they use
//! (`born_features`: large_blocks, the checksum's, zstd) for the pool to activate.
//!
//! Txgs: `dirty` is the open txg's. At quiesce `freeze` moves it into `frozen` (an `Arc`,
//! immutable) and returns a `SyncJob` holding everything the sync reads (the synced tree it
//! starts from, the frozen objects), so the job runs without the pool lock while the open txg
//! fills again; reads look at open dirty, then frozen, then the synced tree. `install` makes
//! the job's tree the synced one, drops `frozen`, and fixes up objects dirtied again in the
//! open txg (their dnode copies predate the sync: the block-pointer tree fields come from the
//! synced dnode, the rest from the open copy). A freed object's slot stays taken until the
//! free is synced.
//!
//! Locking: an `ObjsetW` is owned by the pool's write state and changed only under its lock;
//! a `SyncJob` is owned by the syncing thread; the synced `Objset` (`ro`) is shared read-only
//! (`read_later` hands it to readers that read blocks without the lock). `dncache` is a leaf
//! lock.

use crate::dmu::Objset;
use crate::spa::Spa;
use crate::zio::{self, AllocClass, DvaAllocator, WriteProps, Written};
use crate::{Result, ZfsError};
use oxzfs_format::blkptr::{BlockPointer, BLKPTR_SIZE};
use oxzfs_format::checksum::ZIO_CHECKSUM_FLETCHER_4;
use oxzfs_format::compress::{ZIO_COMPRESS_LZ4, ZIO_COMPRESS_LZJB, ZIO_COMPRESS_OFF};
use oxzfs_format::dnode::{DnodePhys, DNODE_FLAG_SPILL_BLKPTR, DNODE_FLAG_USED_BYTES, DNODE_FLAG_USEROBJUSED_ACCOUNTED, DNODE_FLAG_USERUSED_ACCOUNTED, DNODE_SIZE};
use oxzfs_format::objset::{ObjsetPhys, ZilHeaderPhys, DMU_OST_ZFS, OBJSET_PHYS_SIZE_V3};
use oxzfs_format::types;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Fills a new dataset's objset with its type's objects (for a file system, the ZPL's master
/// node and root directory), given the pool version and the txg: the callback that OpenZFS's
/// dmu_objset_create takes from the layer above (zfs_create_cb). The pool write state holds
/// one, set by whoever opens the pool for writing.
pub type ObjsetInit = fn(&mut ObjsetW, u64, u64, &ZplProps) -> Result<()>;

/// The properties a new file system's ZPL takes at creation and keeps in its master node, not
/// in the DSL (zfs_fill_zplprops): casesensitivity (0 sensitive, 1 insensitive, 2 mixed),
/// normalization (u8_textprep's form flags) and utf8only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZplProps {
    pub casesensitivity: u64,
    pub normalization: u64,
    pub utf8only: bool,
}

/// The `ObjsetInit` of a pool opened without a file system layer: making a dataset is refused.
pub fn no_objset_init(_: &mut ObjsetW, _: u64, _: u64, _: &ZplProps) -> Result<()> {
    Err(ZfsError::Unsupported("no file system layer was given to this pool to make a file system with".into()))
}

/// The `ObjsetInit` of a file system whose objects all come from elsewhere (`zfs receive`
/// of a full stream: the stream brings the ZPL's objects, master node first).
pub fn empty_objset_init(_: &mut ObjsetW, _: u64, _: u64, _: &ZplProps) -> Result<()> {
    Ok(())
}

/// Meta-dnode block size (DNODE_BLOCK_SIZE, 16K) and its 32 dnodes.
pub const DNODE_BLOCK_SIZE: u64 = 16384;
const DNODES_PER_BLOCK: u64 = DNODE_BLOCK_SIZE / DNODE_SIZE as u64;
/// Indirect block shift for new objects (DN_MAX_INDBLKSHIFT, 128K), as OpenZFS 2.x creates them.
pub const DEFAULT_INDBLKSHIFT: u8 = 17;
/// Objset phys size we write (2K: room for the user/group accounting dnodes).
pub const OBJSET_SIZE: usize = 2048;

/// A ZAP held in memory while dirty: key bytes (without NUL for names) → (integer size, values).
#[derive(Clone, Debug, Default)]
pub struct ZapObj {
    pub entries: BTreeMap<Vec<u8>, (u8, Vec<u64>)>,
    pub salt: u64,
    pub normflags: u64,
    pub flags: u64,
    /// Block shift of a fat encoding (0: fzap_default_block_shift, 14); kept from disk for a
    /// fat ZAP read back, 12 for the dedup table's ZAPs.
    pub leaf_shift: u8,
}

impl ZapObj {
    pub fn get_u64(&self, name: &str) -> Option<u64> {
        self.entries.get(name.as_bytes()).and_then(|(_, v)| v.first().copied())
    }
    pub fn set_u64(&mut self, name: &str, v: u64) {
        self.entries.insert(name.as_bytes().to_vec(), (8, vec![v]));
    }
}

/// One object dirty in the open txg.
#[derive(Clone, Debug)]
pub struct DirtyObj {
    pub dn: DnodePhys,
    /// Dirty level-0 blocks, each exactly the data block size. Shared (`Arc`): the sync hands
    /// the very buffer to the ARC when it has written it (OpenZFS's dbuf data becoming the
    /// ARC buffer), no copy; a write to a buffer shared so copies it first (`Arc::make_mut`).
    pub blocks: BTreeMap<u64, Arc<Vec<u8>>>,
    /// Authoritative content when the object is a ZAP being changed.
    pub zap: Option<ZapObj>,
    /// Blocks at or beyond this blkid are freed at sync (truncate / free).
    pub trunc_from: Option<u64>,
    /// The object is freed at sync.
    pub freed: bool,
    /// Whole blocks punched out (become holes at sync).
    pub holes: std::collections::BTreeSet<u64>,
    /// Blocks an intent-log commit already wrote where they belong (dmu_sync's override):
    /// blkid → their bp, which the sync installs instead of writing the block again, and
    /// their compressed bytes when stored compressed (what the ARC keeps of them).
    pub overrides: BTreeMap<u64, (BlockPointer, Option<Arc<Vec<u8>>>)>,
}

/// Space accounting of what a sync wrote and freed (for the dataset and dsl_dir).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceDelta {
    pub dsize: i64,
    pub psize: i64,
    pub lsize: i64,
}

impl SpaceDelta {
    fn add(&mut self, bp: &BlockPointer, sign: i64, dsize: u64) {
        self.dsize += sign * dsize as i64;
        self.psize += sign * bp.psize as i64;
        self.lsize += sign * bp.lsize as i64;
    }
}

/// What a sync needs from the pool: the vdevs, the allocator, the txg; it collects frees.
pub struct SyncCtx<'a> {
    pub spa: &'a Arc<Spa>,
    pub alloc: &'a mut dyn DvaAllocator,
    pub txg: u64,
    /// Blocks freed by this sync (the caller frees their DVAs and accounts them).
    pub freed: Vec<BlockPointer>,
    /// Sync pass (1 = first): from pass 2 on, a block born in this txg is replaced in place
    /// when possible by the caller's allocator (not here: we always reallocate; frees of blocks
    /// born this txg undo their allocation).
    pub pass: u32,
    /// dsize of a bp (raidz deflation); supplied by the pool.
    pub dsize: &'a dyn Fn(&BlockPointer) -> u64,
    /// Whether embedded_data may be used.
    pub embed: bool,
    /// lz4_compress enabled (metadata compression: lz4, else lzjb).
    pub lz4: bool,
    /// Whether this is the MOS (3 copies of everything).
    pub is_mos: bool,
    /// hole_birth active: holes made in this txg keep their size, type, level and birth txg.
    pub hole_birth: bool,
    /// userobj_accounting enabled: objects are counted per owner too (`obj-` keys).
    pub userobj: bool,
    /// project_quota enabled: file systems account space per project and have 4K objset blocks.
    pub projects: bool,
    /// The pool's dedup table (travels with the sync, like the allocator).
    pub ddt: &'a mut dyn crate::zio::DedupWriter,
    /// Data blocks allocated and waiting to be written together (flushed at the end of the
    /// sync job, before anything names them from disk).
    pub queue: zio::WriteQueue,
}

impl SyncCtx<'_> {
    /// The bp of a block that is a hole from this txg on, where `prev` was (zio_write_compress
    /// for a block compressed away, free_blocks for a freed one): with hole_birth active and a
    /// `prev` that was ever written (birth ≠ 0), the hole keeps lsize, type and level and
    /// records this txg; otherwise all zeros.
    pub fn hole_for(&self, prev: Option<&BlockPointer>, lsize: u64, typ: u8, level: u8) -> BlockPointer {
        match prev {
            Some(p) if self.hole_birth && p.birth != 0 => {
                BlockPointer { lsize, typ, level, birth: self.txg, ..BlockPointer::hole() }
            }
            _ => BlockPointer::hole(),
        }
    }

    /// The bp a written block leaves in its parent: a block compressed away becomes the hole
    /// `hole_for` makes; a dnode block gets its fill (the dnodes it holds) when counted.
    pub fn written_bp(&self, w: Written, prev: Option<&BlockPointer>, lsize: u64, typ: u8, fill: Option<u64>) -> BlockPointer {
        match w {
            Written::Hole => self.hole_for(prev, lsize, typ, 0),
            Written::Bp(mut bp) => {
                if let Some(f) = fill {
                    bp.fill = f;
                }
                bp
            }
        }
    }
}

/// Dataset-level write policy (from properties).
#[derive(Clone, Copy, Debug)]
pub struct OsProps {
    pub checksum: u8,
    pub compress: u8,
    pub complevel: u8,
    pub copies: usize,
    /// Blocks of this size or less go to the special class (special_small_blocks).
    pub special_small: u64,
    /// Largest data block of a file (recordsize).
    pub recordsize: u64,
    /// readonly=on: every change is refused with EROFS.
    pub readonly: bool,
    /// atime=on (updated with relatime's rule).
    pub atime: bool,
    /// xattr=sa: xattrs of SA znodes go into their DXATTR attribute.
    pub xattr_sa: bool,
    /// Bytes per new znode's dnode (dnodesize: 512 for legacy, 1K for auto).
    pub dnodesize: usize,
    /// dedup: the dedup checksum (0: off) and whether to verify (os_dedup_checksum/_verify).
    pub dedup: u8,
    pub dedup_verify: bool,
    /// sync: 0 standard (fsync commits the intent log), 1 always (every change is committed
    /// before it returns), 2 disabled (fsync returns at once).
    pub sync: u8,
    /// logbias=throughput: large writes are not copied into the log (see zil).
    pub logbias_throughput: bool,
    /// The pool has project_quota enabled: new SA znodes carry a project id (ZFS_PROJID).
    pub projects: bool,
    /// acltype=posix: POSIX ACLs are kept (zfs_posix_acl).
    pub posix_acl: bool,
    /// primarycache / secondarycache: 0 none, 1 metadata, 2 all (what the ARC keeps and
    /// what the L2ARC may get; see `Spa::set_cache_policy`).
    pub primarycache: u8,
    pub secondarycache: u8,
}

impl Default for OsProps {
    /// The MOS's policy (and a dataset's before its properties are read).
    fn default() -> Self {
        OsProps { checksum: ZIO_CHECKSUM_FLETCHER_4, compress: ZIO_COMPRESS_LZ4, complevel: 0, copies: 1, special_small: 0, recordsize: 128 << 10, readonly: false, atime: true, xattr_sa: false, dnodesize: 512, dedup: 0, dedup_verify: false, sync: 0, logbias_throughput: false, projects: false, posix_acl: false, primarycache: 2, secondarycache: 2 }
    }
}

/// A writable objset.
pub struct ObjsetW {
    /// Dataset object in the MOS (0 for the MOS).
    pub id: u64,
    pub spa: Arc<Spa>,
    /// The last synced objset_phys and its bp (hole before the first sync).
    pub phys: ObjsetPhys,
    pub bp: BlockPointer,
    ro: Option<Arc<Objset>>,
    pub dirty: BTreeMap<u64, DirtyObj>,
    /// Clean ZAPs decoded once (dropped when they become dirty or at sync). Behind a lock so
    /// that reads through `&self` (`ObjsetRead`) fill it too; `&mut self` takes it unlocked.
    zcache: std::sync::Mutex<HashMap<u64, ZapObj>>,
    pub props: OsProps,
    /// Next object number to try (dmu_object_alloc's hint).
    next_obj: u64,
    /// Space written minus freed since the dataset accounting was last updated.
    pub delta: SpaceDelta,
    /// Bytes of dirty blocks (for the writer throttle).
    pub dirty_bytes: u64,
    /// How many data blocks those are (each allocates at least a sector and its parity, which
    /// small records make far more than their bytes: the space check counts it).
    pub dirty_blocks: u64,
    /// Decoded clean dnodes of the synced tree (emptied at every sync; bounded).
    dncache: std::sync::Mutex<HashMap<u64, DnodePhys>>,
    /// The objset's system-attribute registry and layouts once the ZPL loaded them (os_sa).
    pub sa: Option<oxzfs_format::sa::SaRegistry>,
    /// Spill blocks changed in the open txg: new content, or None when the spill goes away.
    spills: BTreeMap<u64, Option<Vec<u8>>>,
    /// Per-dataset features the blocks born in this sync use (dsl_dataset_block_born's
    /// ds_feature_activation); the pool activates them on the dataset and empties the set.
    pub born_features: std::collections::BTreeSet<&'static str>,
    /// The intent log of this objset (its header is `phys.zil_header`).
    pub zil: crate::zil::Zilog,
    /// The dirty state of the txg being synced (quiescing/syncing), frozen: reads see the
    /// open txg's dirty objects, then these, then the synced tree.
    frozen: Option<Arc<Frozen>>,
    /// (this objset's own number, changes so far): moves on with every change of what the
    /// objset reads back (an object dirtied, allocated or freed, a sync installed). Figures
    /// derived from its content stay good while it is the same (`ObjsetW::generation`).
    gen: (u64, u64),
    /// Per normalized directory ZAP looked up by folded names and the flags they are folded
    /// by: how many names it indexes, and folded name → stored names (`zap_find_folded`).
    folded: std::sync::Mutex<HashMap<(u64, u64), FoldedNames>>,
}

/// See `ObjsetW::folded`.
type FoldedNames = (usize, HashMap<Vec<u8>, Vec<Vec<u8>>>);

/// Numbers the writable objsets as they are made, so that no two share a generation.
static OBJSET_INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn new_generation() -> (u64, u64) {
    (OBJSET_INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed), 0)
}

/// The dirty objects of one txg, frozen at quiesce and synced while the next txg is open.
#[derive(Debug, Default)]
pub struct Frozen {
    pub txg: u64,
    pub dirty: BTreeMap<u64, DirtyObj>,
    /// Bytes of dirty data blocks in it (for the write throttle until it is synced).
    pub dirty_bytes: u64,
    /// How many dirty blocks those are (for the space check until it is synced).
    pub dirty_blocks: u64,
    /// Spill blocks changed in it (see `ObjsetW::spills`).
    pub spills: BTreeMap<u64, Option<Vec<u8>>>,
}

/// The sync of one objset's frozen txg: everything it reads is its own (the synced tree it
/// starts from, the frozen dirty objects), so it runs without the pool lock.
pub struct SyncJob {
    pub id: u64,
    spa: Arc<Spa>,
    props: OsProps,
    phys: ObjsetPhys,
    bp: BlockPointer,
    ro: Option<Arc<Objset>>,
    frozen: Arc<Frozen>,
    /// Space written minus freed by this sync.
    pub delta: SpaceDelta,
    /// The dnodes as synced (None: freed), for objects dirtied again in the open txg.
    synced: BTreeMap<u64, Option<DnodePhys>>,
    /// ZAPs as synced, for the decoded-ZAP cache.
    zaps: Vec<(u64, ZapObj)>,
    /// Per-dataset features the blocks born in this sync use (handed to the objset at install).
    born_features: std::collections::BTreeSet<&'static str>,
    /// Intent-log blocks to free in this txg (their records are in it or older).
    pub zil_free: Vec<BlockPointer>,
}

/// Keep decoded ZAP `obj` (the cache starts over past 4096 of them).
fn cache_zap(zcache: &mut HashMap<u64, ZapObj>, obj: u64, z: ZapObj) {
    if zcache.len() > 4096 {
        zcache.clear();
    }
    zcache.insert(obj, z);
}

fn new_meta_dnode() -> DnodePhys {
    empty_dnode(types::DMU_OT_DNODE, 14, (DNODE_BLOCK_SIZE / 512) as u16)
}

/// A dnode of type `typ` with no blocks and no bonus (three block pointers), `datablkszsec`
/// sectors to a block.
fn empty_dnode(typ: u8, indblkshift: u8, datablkszsec: u16) -> DnodePhys {
    DnodePhys {
        typ,
        indblkshift,
        nlevels: 1,
        nblkptr: 3,
        bonustype: 0,
        checksum: 0,
        compress: 0,
        flags: DNODE_FLAG_USED_BYTES,
        datablkszsec,
        bonuslen: 0,
        extra_slots: 0,
        maxblkid: 0,
        used: 0,
        blkptr: vec![BlockPointer::hole(); 3],
        bonus: Vec::new(),
        spill: None,
    }
}

impl ObjsetW {
    /// A new, empty objset of type `typ` (DMU_OST_META, DMU_OST_ZFS).
    pub fn create(spa: &Arc<Spa>, id: u64, typ: u64, props: OsProps) -> ObjsetW {
        spa.set_cache_policy(id, props.primarycache, props.secondarycache);
        let phys = ObjsetPhys {
            meta_dnode: new_meta_dnode(),
            zil_header: ZilHeaderPhys::empty(),
            typ,
            // dmu_objset_create_impl: a new file system is accounted per user and group from
            // its first object on (object counts and projects: see
            // PoolW::accounting_complete).
            flags: if typ == DMU_OST_ZFS && spa.version() >= crate::dmu_userused::SPA_VERSION_USERSPACE { oxzfs_format::objset::OBJSET_FLAG_USERACCOUNTING_COMPLETE } else { 0 },
            userused_dnode: None,
            groupused_dnode: None,
            projectused_dnode: None,
        };
        ObjsetW {
            id,
            spa: spa.clone(),
            phys,
            bp: BlockPointer::hole(),
            ro: None,
            dirty: BTreeMap::new(),
            zcache: Default::default(),
            props,
            next_obj: 1,
            delta: SpaceDelta::default(),
            dirty_bytes: 0,
            dirty_blocks: 0,
            dncache: Default::default(),
            sa: None,
            spills: BTreeMap::new(),
            born_features: Default::default(),
            frozen: None,
            zil: Default::default(),
            gen: new_generation(),
            folded: Default::default(),
        }
    }

    /// Open the objset at `bp` for writing.
    pub fn open(spa: &Arc<Spa>, id: u64, bp: &BlockPointer, props: OsProps) -> Result<ObjsetW> {
        spa.set_cache_policy(id, props.primarycache, props.secondarycache);
        let ro = Objset::open_id(spa, bp, id)?;
        let phys = ro.phys.clone();
        let foreign_log = !phys.zil_header.log.is_hole();
        let max = ro.max_object();
        Ok(ObjsetW {
            id,
            spa: spa.clone(),
            phys,
            bp: bp.clone(),
            ro: Some(ro),
            dirty: BTreeMap::new(),
            zcache: Default::default(),
            props,
            next_obj: max.max(1),
            delta: SpaceDelta::default(),
            dirty_bytes: 0,
            dirty_blocks: 0,
            dncache: Default::default(),
            sa: None,
            spills: BTreeMap::new(),
            born_features: Default::default(),
            frozen: None,
            // A chain on disk is not this Zilog's until an import replays it (zfs_replay).
            zil: crate::zil::Zilog::opened(foreign_log),
            gen: new_generation(),
            folded: Default::default(),
        })
    }

    /// Which state of the objset's content this is: equal generations read the same bytes
    /// from every object (a cache of figures decoded from it may be kept until it moves).
    pub fn generation(&self) -> (u64, u64) {
        self.gen
    }

    fn changed(&mut self) {
        self.gen.1 += 1;
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty() || self.bp.is_hole() || self.zil.dirty
    }

    fn ro(&self) -> Option<&Arc<Objset>> {
        self.ro.as_ref()
    }

    /// The objset as of the last synced txg (None before its first sync): an immutable tree
    /// that read-ahead may walk without the pool lock, as `read_later` does for one object.
    pub fn synced(&self) -> Option<Arc<Objset>> {
        self.ro.clone()
    }

    /// The dirty state of `obj` in the open txg, else in the txg being synced.
    fn dirty_any(&self, obj: u64) -> Option<&DirtyObj> {
        self.dirty.get(&obj).or_else(|| self.frozen_obj(obj))
    }

    /// The frozen txg's dirty state of `obj` (quiescing/syncing).
    fn frozen_obj(&self, obj: u64) -> Option<&DirtyObj> {
        self.frozen.as_ref().and_then(|f| f.dirty.get(&obj))
    }

    /// The current dnode of `obj` (dirty or synced).
    pub fn dnode(&self, obj: u64) -> Result<DnodePhys> {
        if let Some(d) = self.dirty_any(obj) {
            if d.freed {
                return Err(ZfsError::NotFound(format!("objset {} object {obj} (freed)", self.id)));
            }
            return Ok(d.dn.clone());
        }
        if let Some(d) = self.dncache.lock().unwrap_or_else(|p| p.into_inner()).get(&obj) {
            return Ok(d.clone());
        }
        let d = match self.ro() {
            Some(ro) => ro.dnode(obj)?,
            None => return Err(ZfsError::NotFound(format!("objset {} object {obj}", self.id))),
        };
        let mut c = self.dncache.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= 65536 {
            c.clear();
        }
        c.insert(obj, d.clone());
        Ok(d)
    }

    pub fn exists(&self, obj: u64) -> bool {
        self.dnode(obj).is_ok()
    }

    /// One past the highest object number this objset can hold now: the synced dnode array
    /// and the objects dirty since.
    pub fn object_limit(&self) -> u64 {
        let md = &self.phys.meta_dnode;
        let synced = if md.nlevels == 0 { 0 } else { (md.maxblkid + 1) * (md.data_block_size() / DNODE_SIZE as u64) };
        let dirty = self.dirty.keys().next_back().map_or(0, |&o| o + 1);
        let frozen = self.frozen.as_ref().and_then(|f| f.dirty.keys().next_back()).map_or(0, |&o| o + 1);
        synced.max(dirty).max(frozen)
    }

    /// Make `obj` dirty (loading its dnode) and return it.
    pub fn dirty_obj(&mut self, obj: u64) -> Result<&mut DirtyObj> {
        self.changed();
        if !self.dirty.contains_key(&obj) {
            let dn = self.dnode(obj)?;
            self.dirty.insert(obj, DirtyObj { dn, blocks: BTreeMap::new(), zap: None, trunc_from: None, freed: false, holes: Default::default(), overrides: BTreeMap::new() });
        }
        let d = self.dirty.get_mut(&obj).expect("just inserted");
        if d.freed {
            return Err(ZfsError::NotFound(format!("object {obj} (freed)")));
        }
        Ok(d)
    }

    /// Blocks `range` of `obj` change again after a commit wrote them (dbuf_unoverride): the
    /// sync writes them anew, and the blocks the commit wrote are freed when this txg syncs
    /// (a log record names them until then).
    pub(crate) fn unoverride(&mut self, obj: u64, range: std::ops::RangeInclusive<u64>) {
        self.changed();
        let Some(d) = self.dirty.get_mut(&obj) else { return };
        if d.overrides.is_empty() {
            return;
        }
        let keys: Vec<u64> = d.overrides.range(range).map(|(k, _)| *k).collect();
        for k in keys {
            if let Some((bp, _)) = d.overrides.remove(&k) {
                self.zil.free_at_sync(bp);
            }
        }
    }

    /// Drop every override of the open txg: a commit's writes failed (the sync writes the
    /// blocks itself).
    pub fn unoverride_all(&mut self) {
        let objs: Vec<u64> = self.dirty.iter().filter(|(_, d)| !d.overrides.is_empty()).map(|(o, _)| *o).collect();
        for o in objs {
            self.unoverride(o, 0..=u64::MAX);
        }
    }

    /// dmu_sync: write block `blkid` of `obj`, dirty in the open txg `txg`, to where it
    /// belongs now, for an intent-log record to point at (WR_INDIRECT). Returns its bp and
    /// the physical bytes the caller writes (empty when an earlier commit of this txg wrote
    /// it); None when the block is not one to point at (not dirty, all zeros, small enough
    /// to embed, deduplicated, no contiguous space). The txg's sync installs the bp rather
    /// than writing the block again.
    pub fn dmu_sync(&mut self, obj: u64, blkid: u64, txg: u64, env: PolicyEnv, alloc: &mut dyn DvaAllocator) -> Result<Option<(BlockPointer, Vec<u8>)>> {
        let Some(d) = self.dirty.get(&obj) else { return Ok(None) };
        if let Some((bp, _)) = d.overrides.get(&blkid) {
            return Ok(Some((bp.clone(), Vec::new())));
        }
        let Some(data) = d.blocks.get(&blkid) else { return Ok(None) };
        let dn = &d.dn;
        let p = write_policy(&self.props, env, dn.typ, 0, types::ot_is_metadata(dn.typ), dn.data_block_size(), dn.compress, dn.checksum);
        if p.dedup {
            return Ok(None);
        }
        let (bp, phys) = match zio::prepare(&self.spa.checksum_salt, alloc.min_alloc(), data, &p, txg)? {
            zio::Prepared::Hole | zio::Prepared::Embedded(_) => return Ok(None),
            zio::Prepared::Block { mut bp, phys } => {
                let mut got: Vec<oxzfs_format::blkptr::Dva> = Vec::new();
                for _ in 0..p.copies.clamp(1, 3) {
                    match alloc.alloc_dva(p.class, phys.len() as u64, txg, &got) {
                        Some(dva) => got.push(dva),
                        None => break,
                    }
                }
                if got.is_empty() {
                    return Ok(None);
                }
                for (i, dva) in got.into_iter().enumerate() {
                    bp.dva[i] = dva;
                }
                (bp, phys)
            }
        };
        // (The ARC keeps the compressed bytes; the commit writes a copy of what is written.)
        let kept = zio::compressed_bytes(phys);
        let phys = kept.as_ref().map_or_else(|| data.to_vec(), |k| k.to_vec());
        self.changed();
        self.dirty.get_mut(&obj).expect("dirty").overrides.insert(blkid, (bp.clone(), kept));
        Ok(Some((bp, phys)))
    }

    /// The next object allocated is the first free one from `obj` on (replay recreates an
    /// object under the number its log record names).
    pub fn alloc_from(&mut self, obj: u64) {
        self.next_obj = obj;
    }

    /// Allocate a new object (dmu_object_alloc): type, data block size, bonus type and length,
    /// `slots` dnode slots (1 unless large_dnode).
    pub fn alloc_object(&mut self, typ: u8, blksz: u64, bonustype: u8, bonuslen: usize, slots: usize) -> Result<u64> {
        assert!(blksz >= 512 && blksz % 512 == 0 && blksz <= 16 << 20, "object block size {blksz}");
        assert!((1..=32).contains(&slots));
        let nblkptr = ((DNODE_SIZE * slots - 64 - bonuslen.min(DNODE_SIZE * slots - 64 - BLKPTR_SIZE)) / BLKPTR_SIZE).clamp(1, 3);
        assert!(DnodePhys::bonus_room(slots, nblkptr) >= bonuslen, "bonus of {bonuslen} in {slots} slots");
        let mut obj = self.next_obj.max(1);
        loop {
            // Slots of one dnode may not cross a dnode block.
            let in_block = obj % DNODES_PER_BLOCK;
            if in_block + slots as u64 > DNODES_PER_BLOCK {
                obj += DNODES_PER_BLOCK - in_block;
                continue;
            }
            if (0..slots as u64).all(|i| !self.slot_used(obj + i)) {
                break;
            }
            obj += 1;
            if obj >= 1 << 48 {
                return Err(ZfsError::Posix(28, "no free object numbers".into()));
            }
        }
        self.next_obj = obj + slots as u64;
        if slots > 1 {
            // A dnode of more than one slot: the dataset uses large_dnode.
            self.born_features.insert("org.zfsonlinux:large_dnode");
        }
        let dn = DnodePhys {
            typ,
            indblkshift: DEFAULT_INDBLKSHIFT,
            nlevels: 1,
            nblkptr: nblkptr as u8,
            bonustype,
            checksum: 0,
            compress: 0,
            flags: DNODE_FLAG_USED_BYTES,
            datablkszsec: (blksz / 512) as u16,
            bonuslen: bonuslen as u16,
            extra_slots: (slots - 1) as u8,
            maxblkid: 0,
            used: 0,
            blkptr: vec![BlockPointer::hole(); nblkptr],
            bonus: vec![0u8; bonuslen],
            spill: None,
        };
        self.changed();
        self.dirty.insert(obj, DirtyObj { dn, blocks: BTreeMap::new(), zap: None, trunc_from: None, freed: false, holes: Default::default(), overrides: BTreeMap::new() });
        Ok(obj)
    }

    /// Whether dnode slot `obj` is taken (by a dnode or the extra slots of one before it).
    fn slot_used(&self, obj: u64) -> bool {
        if self.dirty_any(obj).is_some() {
            return true; // a freed object's slots are reused only after its sync
        }
        // Extra slots of a dirty large dnode just before.
        let blk0 = obj - obj % DNODES_PER_BLOCK;
        for o in blk0..obj {
            if let Some(d) = self.dirty_any(o) {
                if !d.freed && o + d.dn.slots() as u64 > obj {
                    return true;
                }
            }
        }
        match self.ro() {
            None => false,
            Some(ro) => match ro.dnode(obj) {
                Ok(_) => true,
                Err(ZfsError::NotFound(_)) => {
                    // An extra slot of an on-disk large dnode before it?
                    (blk0..obj).any(|o| self.dirty_any(o).is_none() && ro.dnode(o).map(|d| o + d.slots() as u64 > obj).unwrap_or(false))
                }
                Err(_) => true,
            },
        }
    }

    /// Free object `obj` at sync (all its blocks).
    pub fn free_object(&mut self, obj: u64) -> Result<()> {
        self.unoverride(obj, 0..=u64::MAX);
        self.folded.get_mut().unwrap_or_else(|p| p.into_inner()).retain(|&(o, _), _| o != obj);
        let d = self.dirty_obj(obj)?;
        d.freed = true;
        d.blocks.clear();
        d.zap = None;
        d.trunc_from = Some(0);
        self.zcache_mut().remove(&obj);
        self.spills.remove(&obj);
        if obj < self.next_obj {
            self.next_obj = obj.max(1);
        }
        Ok(())
    }

    /// Replace the bonus buffer.
    pub fn set_bonus(&mut self, obj: u64, bonus: &[u8]) -> Result<()> {
        let d = self.dirty_obj(obj)?;
        let room = DnodePhys::bonus_room(d.dn.slots(), d.dn.nblkptr as usize);
        if bonus.len() > room {
            return Err(ZfsError::Invalid(format!("bonus of {} bytes, room for {room}", bonus.len())));
        }
        d.dn.bonus = bonus.to_vec();
        d.dn.bonuslen = bonus.len() as u16;
        Ok(())
    }

    pub fn bonus(&self, obj: u64) -> Result<Vec<u8>> {
        Ok(self.dnode(obj)?.bonus)
    }

    /// Replace (Some) or remove (None) the object's spill block (its system attributes that
    /// do not fit the bonus). Written at sync as one DMU_OT_SA block of the buffer's size.
    pub fn set_spill(&mut self, obj: u64, spill: Option<Vec<u8>>) -> Result<()> {
        if let Some(b) = &spill {
            if b.is_empty() || b.len() % 512 != 0 || b.len() > 128 << 10 {
                return Err(ZfsError::Posix(libc::EFBIG, format!("object {obj}: a spill block of {} bytes", b.len())));
            }
        }
        if spill.is_some() {
            // The spill's block pointer takes the dnode's last 128 bytes: the bonus must end
            // before them (a stream or a bug asking for more is refused here, not at sync).
            let dn = &self.dirty_obj(obj)?.dn;
            let room = DnodePhys::bonus_room(dn.slots(), dn.nblkptr as usize);
            if dn.bonus.len() + BLKPTR_SIZE > room {
                return Err(ZfsError::Invalid(format!("object {obj}: no room for a spill block pointer after a bonus of {} bytes", dn.bonus.len())));
            }
        }
        // A spill written in the txg being synced counts as there (its dnode copy does not
        // show it yet): removing it must be recorded, or the frozen one would come back.
        let frozen_spill = matches!(self.frozen.as_ref().and_then(|f| f.spills.get(&obj)), Some(Some(_)));
        let had = self.dirty_obj(obj)?.dn.spill.is_some() || frozen_spill;
        if spill.is_none() && !had {
            self.spills.remove(&obj);
        } else {
            self.spills.insert(obj, spill);
        }
        Ok(())
    }

    /// The object's spill block as the open txg sees it.
    pub fn spill(&self, obj: u64) -> Result<Option<Vec<u8>>> {
        for spills in [Some(&self.spills), self.frozen.as_ref().map(|f| &f.spills)].into_iter().flatten() {
            if let Some(s) = spills.get(&obj) {
                return Ok(s.clone());
            }
        }
        let dn = self.dnode(obj)?;
        match (&dn.spill, self.ro()) {
            (Some(bp), Some(ro)) if !bp.is_hole() => Ok(ro.read_spill(&dn)?.map(|b| b.to_vec())),
            _ => Ok(None),
        }
    }

    /// Read a whole level-0 block (zeros for a hole or beyond the end).
    fn read_l0(&self, obj: u64, dn: &DnodePhys, blkid: u64) -> Result<Vec<u8>> {
        let bs = dn.data_block_size() as usize;
        let mut v = Vec::with_capacity(bs);
        self.read_l0_range(obj, dn, blkid, 0, bs, &mut v)?;
        Ok(v)
    }

    /// `n` bytes at `boff` of level-0 block `blkid` of `obj` appended to `out`, as `read_l0`
    /// has them, without a copy of the whole block (an fsync's 4 KiB of a 128 KiB record).
    fn read_l0_range(&self, obj: u64, dn: &DnodePhys, blkid: u64, boff: usize, n: usize, out: &mut Vec<u8>) -> Result<()> {
        let copy = |b: &[u8], out: &mut Vec<u8>| {
            let have = b.len().saturating_sub(boff).min(n);
            if have > 0 {
                out.extend_from_slice(&b[boff..boff + have]);
            }
            out.resize(out.len() + n - have, 0);
        };
        for d in [self.dirty.get(&obj), self.frozen_obj(obj)].into_iter().flatten() {
            if let Some(b) = d.blocks.get(&blkid) {
                copy(b, out);
                return Ok(());
            }
            if d.trunc_from.map_or(false, |t| blkid >= t) || d.holes.contains(&blkid) {
                copy(&[], out);
                return Ok(());
            }
        }
        match self.ro() {
            Some(ro) => match ro.read_block(dn, obj, blkid)? {
                Some(b) => copy(&b, out),
                None => copy(&[], out),
            },
            None => copy(&[], out),
        }
        Ok(())
    }

    /// Read `len` bytes at `offset` of object `obj` (zeros in holes; not clipped at any size).
    pub fn read(&self, obj: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
        let dn = self.dnode(obj)?;
        let bs = dn.data_block_size();
        let mut out = Vec::with_capacity(len);
        let mut pos = offset;
        let end = offset + len as u64;
        while pos < end {
            let blkid = pos / bs;
            let boff = (pos % bs) as usize;
            let n = ((bs - boff as u64).min(end - pos)) as usize;
            if blkid > dn.maxblkid && ![self.dirty.get(&obj), self.frozen_obj(obj)].into_iter().flatten().any(|d| d.blocks.contains_key(&blkid)) {
                out.resize(out.len() + n, 0);
            } else {
                self.read_l0_range(obj, &dn, blkid, boff, n, &mut out)?;
            }
            pos += n as u64;
        }
        Ok(out)
    }

    /// A read of `len` bytes at `offset` of `obj` to be done without the pool lock: when no
    /// data of the object is dirty in any txg, the synced tree (an `Arc`, immutable) and the dnode are all
    /// it needs; otherwise the bytes are read now. Blocks the reader may still walk after a
    /// later sync replaced them stay allocated until it is done (deferred frees wait for the
    /// pin, see `Metaslabs::sync_done`).
    pub fn read_later(&self, obj: u64, offset: u64, len: usize) -> Result<ReadLater> {
        // Dirty only in its bonus (an atime, a chmod) counts as clean: its dnode copy keeps the
        // synced block-pointer tree, and no block of it changes at sync.
        let data_dirty = |d: &DirtyObj| d.freed || d.zap.is_some() || !d.blocks.is_empty() || d.trunc_from.is_some() || !d.holes.is_empty();
        if ![self.dirty.get(&obj), self.frozen_obj(obj)].into_iter().flatten().any(data_dirty) {
            if let Some(ro) = self.ro() {
                let dn = self.dnode(obj)?;
                // The tree is the dataset's as of the last synced txg (or of the txg syncing
                // now, once installed): it holds no block freed up to then, so the pin names
                // that txg, not the older one the objset was last written in (which would hold
                // every later free of the pool for as long as such reads go on).
                let synced = self.spa.mos_bp().map_or(0, |bp| bp.birth);
                let _pin = self.spa.pin_reader(self.bp.birth.max(synced));
                return Ok(ReadLater::Clean { ro: ro.clone(), dn, obj, offset, len, _pin });
            }
        }
        self.read(obj, offset, len).map(ReadLater::Done)
    }

    /// Write `data` at `offset` of object `obj`.
    pub fn write(&mut self, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
        let dn = self.dnode(obj)?;
        let bs = dn.data_block_size();
        let mut pos = offset;
        let mut src = 0usize;
        while src < data.len() {
            let blkid = pos / bs;
            let boff = (pos % bs) as usize;
            let n = (bs as usize - boff).min(data.len() - src);
            let whole = boff == 0 && n == bs as usize;
            let have = self.dirty.get(&obj).map_or(false, |d| d.blocks.contains_key(&blkid));
            let base = if whole || have {
                None
            } else if blkid > dn.maxblkid {
                Some(vec![0u8; bs as usize])
            } else {
                Some(self.read_l0(obj, &dn, blkid)?)
            };
            self.unoverride(obj, blkid..=blkid);
            let d = self.dirty_obj(obj)?;
            d.holes.remove(&blkid);
            let fresh = !have;
            if whole {
                let block = match crate::arc::spare_block(n) {
                    Some(mut v) => {
                        v.copy_from_slice(&data[src..src + n]);
                        v
                    }
                    None => data[src..src + n].to_vec(),
                };
                d.blocks.insert(blkid, Arc::new(block));
            } else {
                let b = d.blocks.entry(blkid).or_insert_with(|| Arc::new(base.expect("loaded above")));
                Arc::make_mut(b)[boff..boff + n].copy_from_slice(&data[src..src + n]);
            }
            if blkid > d.dn.maxblkid {
                d.dn.maxblkid = blkid;
            }
            if fresh {
                self.dirty_bytes += bs;
                self.dirty_blocks += 1;
            }
            pos += n as u64;
            src += n;
        }
        Ok(())
    }

    /// Free the bytes from `offset` to the end of the object (the partial block is zeroed).
    pub fn truncate(&mut self, obj: u64, offset: u64) -> Result<()> {
        let dn = self.dnode(obj)?;
        let bs = dn.data_block_size();
        let first_free = offset.div_ceil(bs);
        self.unoverride(obj, offset / bs..=u64::MAX);
        if offset % bs != 0 && offset / bs <= dn.maxblkid {
            let blkid = offset / bs;
            let mut b = self.read_l0(obj, &dn, blkid)?;
            let boff = (offset % bs) as usize;
            b[boff..].iter_mut().for_each(|x| *x = 0);
            self.dirty_obj(obj)?.blocks.insert(blkid, Arc::new(b));
        }
        let d = self.dirty_obj(obj)?;
        d.blocks.retain(|&k, _| k < first_free);
        d.trunc_from = Some(d.trunc_from.map_or(first_free, |t| t.min(first_free)));
        d.dn.maxblkid = first_free.saturating_sub(1).min(d.dn.maxblkid);
        Ok(())
    }

    /// Punch out `len` bytes at `offset` (fallocate PUNCH_HOLE): whole blocks become holes,
    /// the partial blocks at either end are zeroed. The size is unchanged.
    pub fn punch(&mut self, obj: u64, offset: u64, len: u64) -> Result<()> {
        let dn = self.dnode(obj)?;
        let bs = dn.data_block_size();
        let end = offset.saturating_add(len).min((dn.maxblkid + 1) * bs);
        let mut pos = offset;
        while pos < end {
            let blkid = pos / bs;
            let boff = pos % bs;
            let n = (bs - boff).min(end - pos);
            if boff == 0 && n == bs {
                self.unoverride(obj, blkid..=blkid);
                let d = self.dirty_obj(obj)?;
                d.blocks.remove(&blkid);
                d.holes.insert(blkid);
            } else {
                self.write(obj, pos, &vec![0u8; n as usize])?;
            }
            pos += n;
        }
        Ok(())
    }

    /// Change the data block size of an object with at most one block (zfs_grow_blocksize).
    pub fn set_blocksize(&mut self, obj: u64, blksz: u64) -> Result<()> {
        let dn = self.dnode(obj)?;
        if dn.data_block_size() == blksz {
            return Ok(());
        }
        if dn.maxblkid > 0 {
            return Err(ZfsError::Invalid(format!("object {obj}: block size change with {} blocks", dn.maxblkid + 1)));
        }
        let old = self.read_l0(obj, &dn, 0)?;
        self.unoverride(obj, 0..=u64::MAX);
        let d = self.dirty_obj(obj)?;
        // The grown block is dirty whole (what was counted for the old one is already in).
        let counted = if d.blocks.contains_key(&0) { dn.data_block_size() } else { 0 };
        let mut b = old;
        b.resize(blksz as usize, 0);
        d.trunc_from = Some(0);
        d.blocks.clear();
        d.blocks.insert(0, Arc::new(b));
        d.dn.datablkszsec = (blksz / 512) as u16;
        self.dirty_bytes += blksz.saturating_sub(counted);
        self.dirty_blocks += u64::from(counted == 0);
        Ok(())
    }

    // ------------------------------------------------------------------------------ ZAP objects

    /// The content of ZAP `obj` (dirty, cached or read).
    pub fn zap(&mut self, obj: u64) -> Result<&ZapObj> {
        if self.dirty.get(&obj).map_or(false, |d| d.zap.is_some()) {
            return Ok(self.dirty[&obj].zap.as_ref().expect("checked"));
        }
        if self.frozen_obj(obj).map_or(false, |d| d.zap.is_some()) {
            return Ok(self.frozen_obj(obj).and_then(|d| d.zap.as_ref()).expect("checked"));
        }
        if !self.zcache_mut().contains_key(&obj) {
            let z = self.load_zap(obj)?;
            cache_zap(self.zcache_mut(), obj, z);
        }
        Ok(&self.zcache_mut()[&obj])
    }

    /// `f` of the content of ZAP `obj` (dirty, cached or read), through `&self`.
    pub fn with_zap<T>(&self, obj: u64, f: impl FnOnce(&ZapObj) -> T) -> Result<T> {
        if let Some(z) = self.dirty.get(&obj).and_then(|d| d.zap.as_ref()).or_else(|| self.frozen_obj(obj).and_then(|d| d.zap.as_ref())) {
            return Ok(f(z));
        }
        let mut c = self.zcache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(z) = c.get(&obj) {
            return Ok(f(z));
        }
        drop(c);
        let z = self.load_zap(obj)?;
        let r = f(&z);
        c = self.zcache.lock().unwrap_or_else(|p| p.into_inner());
        cache_zap(&mut c, obj, z);
        Ok(r)
    }

    fn zcache_mut(&mut self) -> &mut HashMap<u64, ZapObj> {
        self.zcache.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    fn load_zap(&self, obj: u64) -> Result<ZapObj> {
        if let Some(d) = self.dirty.get(&obj) {
            if !d.blocks.is_empty() || d.trunc_from.is_some() {
                return Err(ZfsError::Invalid(format!("object {obj} is being written as data, not a ZAP")));
            }
        }
        if let Some(z) = self.frozen_obj(obj).and_then(|d| d.zap.as_ref()) {
            return Ok(z.clone());
        }
        let ro = self.ro().ok_or_else(|| ZfsError::NotFound(format!("ZAP {obj}")))?;
        let dn = self.dnode(obj)?;
        zapobj_of(ro, obj, &dn)
    }

    /// Make ZAP `obj` dirty and return it for changes.
    pub fn zap_mut(&mut self, obj: u64) -> Result<&mut ZapObj> {
        self.changed();
        let has = self.dirty.get(&obj).map_or(false, |d| d.zap.is_some());
        if !has {
            let frozen = self.frozen_obj(obj).and_then(|d| d.zap.clone());
            let z = match frozen.or_else(|| self.zcache_mut().remove(&obj)) {
                Some(z) => z,
                None => self.load_zap(obj)?,
            };
            self.dirty_obj(obj)?.zap = Some(z);
        }
        Ok(self.dirty.get_mut(&obj).and_then(|d| d.zap.as_mut()).expect("set above"))
    }

    /// Create a new, empty ZAP object of type `typ` (micro until it needs to be fat).
    pub fn create_zap(&mut self, typ: u8, bonustype: u8, bonuslen: usize, normflags: u64) -> Result<u64> {
        self.create_zap_slots(typ, bonustype, bonuslen, normflags, 1)
    }

    /// [`ObjsetW::create_zap`] in a dnode of `slots` slots (large_dnode).
    pub fn create_zap_slots(&mut self, typ: u8, bonustype: u8, bonuslen: usize, normflags: u64, slots: usize) -> Result<u64> {
        let obj = self.alloc_object(typ, 512, bonustype, bonuslen, slots)?;
        let salt = rand_u64() | 1;
        self.dirty.get_mut(&obj).expect("new").zap = Some(ZapObj { salt, normflags, flags: 0, entries: BTreeMap::new(), leaf_shift: 0 });
        Ok(obj)
    }

    pub fn zap_lookup(&mut self, obj: u64, name: &str) -> Result<Option<u64>> {
        Ok(self.zap(obj)?.get_u64(name))
    }

    pub fn zap_add_u64(&mut self, obj: u64, name: &str, v: u64) -> Result<()> {
        self.zap_add_name(obj, name.as_bytes(), v)
    }

    /// [`ObjsetW::zap_add_u64`] of a name in bytes (a directory entry need not be UTF-8).
    pub fn zap_add_name(&mut self, obj: u64, name: &[u8], v: u64) -> Result<()> {
        // Names are matched exactly, as zap_add matches them (a normalized ZAP hashes them by
        // their normalized forms when it is written: normalized_key).
        let new = self.zap_mut(obj)?.entries.insert(name.to_vec(), (8, vec![v])).is_none();
        if new {
            for (&(o, flags), (n, m)) in self.folded.get_mut().unwrap_or_else(|p| p.into_inner()).iter_mut() {
                if o == obj {
                    m.entry(oxzfs_format::zap::normalized_key(flags, name).into_owned()).or_default().push(name.to_vec());
                    *n += 1;
                }
            }
        }
        Ok(())
    }

    pub fn zap_remove(&mut self, obj: u64, name: &str) -> Result<bool> {
        self.zap_remove_name(obj, name.as_bytes())
    }

    pub fn zap_remove_name(&mut self, obj: u64, name: &[u8]) -> Result<bool> {
        let gone = self.zap_mut(obj)?.entries.remove(name).is_some();
        if gone {
            for (&(o, flags), (n, m)) in self.folded.get_mut().unwrap_or_else(|p| p.into_inner()).iter_mut() {
                if o == obj {
                    if let Some(v) = m.get_mut(oxzfs_format::zap::normalized_key(flags, name).as_ref()) {
                        v.retain(|x| x != name);
                    }
                    *n = n.saturating_sub(1);
                }
            }
        }
        Ok(gone)
    }

    /// The stored name and value of the entry of ZAP `obj` whose name folded by `flags` is
    /// `name` folded so (a lookup in a case-insensitive or normalized directory), through an
    /// index of the folded names built on first use and kept by `zap_add_name` and
    /// `zap_remove_name` (rebuilt whenever its count of names is not the ZAP's: changed
    /// otherwise, or freed and made again).
    pub fn zap_find_folded(&self, obj: u64, flags: u64, name: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        self.with_folded(obj, flags, name, |z, names| names.iter().find_map(|n| z.entries.get(n).and_then(|(_, v)| Some((n.clone(), *v.first()?)))))
    }

    /// How many names of ZAP `obj` fold by `flags` to what `name` folds to.
    pub fn zap_count_folded(&self, obj: u64, flags: u64, name: &[u8]) -> Result<usize> {
        self.with_folded(obj, flags, name, |z, names| names.iter().filter(|n| z.entries.contains_key(*n)).count())
    }

    /// `f` of ZAP `obj` and the stored names that fold by `flags` as `name` does (the index
    /// brought up to date first).
    fn with_folded<T>(&self, obj: u64, flags: u64, name: &[u8], f: impl FnOnce(&ZapObj, &[Vec<u8>]) -> T) -> Result<T> {
        let key = oxzfs_format::zap::normalized_key(flags, name);
        self.with_zap(obj, |z| {
            let mut all = self.folded.lock().unwrap_or_else(|p| p.into_inner());
            if !matches!(all.get(&(obj, flags)), Some((n, _)) if *n == z.entries.len()) {
                let mut m: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
                for k in z.entries.keys() {
                    m.entry(oxzfs_format::zap::normalized_key(flags, k).into_owned()).or_default().push(k.clone());
                }
                all.insert((obj, flags), (z.entries.len(), m));
            }
            let (_, m) = all.get(&(obj, flags)).expect("just made");
            f(z, m.get(key.as_ref()).map_or(&[][..], |v| &v[..]))
        })
    }

    // ------------------------------------------------------------------------------------ sync

    /// Write everything dirty; returns the new objset bp. Frees go to `ctx.freed`.
    /// (Quiesce, sync and install in one go: the MOS, and syncs that stop the world.)
    pub fn sync(&mut self, ctx: &mut SyncCtx) -> Result<BlockPointer> {
        let mut job = self.freeze(ctx.txg);
        let bp = job.run(ctx);
        self.install(job);
        bp
    }

    /// Quiesce: take the open txg's dirty state out (frozen: still seen by reads) and hand
    /// back the job that syncs it. The objset's open txg starts empty.
    pub fn freeze(&mut self, txg: u64) -> SyncJob {
        assert!(self.frozen.is_none(), "objset {}: txg {txg} quiesced while another txg syncs", self.id);
        self.changed();
        let frozen = Arc::new(Frozen {
            txg,
            dirty: std::mem::take(&mut self.dirty),
            dirty_bytes: std::mem::take(&mut self.dirty_bytes),
            dirty_blocks: std::mem::take(&mut self.dirty_blocks),
            spills: std::mem::take(&mut self.spills),
        });
        self.frozen = Some(frozen.clone());
        let zil_free = self.zil.freeze(txg, &mut self.phys.zil_header);
        SyncJob {
            id: self.id,
            spa: self.spa.clone(),
            props: self.props,
            phys: self.phys.clone(),
            bp: self.bp.clone(),
            ro: self.ro.clone(),
            frozen,
            delta: SpaceDelta::default(),
            synced: BTreeMap::new(),
            zaps: Vec::new(),
            born_features: Default::default(),
            zil_free,
        }
    }

    /// Bytes of dirty data blocks of the txg being synced.
    pub fn frozen_bytes(&self) -> u64 {
        self.frozen.as_ref().map_or(0, |f| f.dirty_bytes)
    }

    /// How many dirty blocks the txg being synced holds.
    pub fn frozen_blocks(&self) -> u64 {
        self.frozen.as_ref().map_or(0, |f| f.dirty_blocks)
    }

    /// After a job ran: the new synced tree becomes the read base, the frozen state goes away.
    /// An object dirtied again in the open txg copied its dnode before this sync: the fields
    /// the open txg did not change (the block-pointer tree: blkptr, nlevels, used, and
    /// maxblkid / block size / spill when untouched) are taken from the synced dnode.
    pub fn install(&mut self, job: SyncJob) {
        self.changed();
        let frozen = self.frozen.take().expect("install after freeze");
        assert!(Arc::ptr_eq(&frozen, &job.frozen), "objset {}: a job installed on another txg's state", self.id);
        for (obj, synced) in &job.synced {
            let (Some(open), Some(synced)) = (self.dirty.get_mut(obj), synced) else { continue };
            let before = &frozen.dirty[obj].dn;
            open.dn.blkptr = synced.blkptr.clone();
            open.dn.nlevels = synced.nlevels;
            open.dn.used = synced.used;
            open.dn.flags |= synced.flags & DNODE_FLAG_USED_BYTES;
            // The open txg's own blocks count whatever the sync made of the frozen ones.
            if open.dn.maxblkid == before.maxblkid {
                open.dn.maxblkid = synced.maxblkid.max(open.blocks.keys().next_back().copied().unwrap_or(0));
            }
            if open.dn.datablkszsec == before.datablkszsec {
                open.dn.datablkszsec = synced.datablkszsec;
            }
            if open.dn.spill == before.spill {
                open.dn.spill = synced.spill.clone();
                open.dn.flags = (open.dn.flags & !DNODE_FLAG_SPILL_BLKPTR) | (synced.flags & DNODE_FLAG_SPILL_BLKPTR);
            }
        }
        let zcache = self.zcache.get_mut().unwrap_or_else(|p| p.into_inner());
        for (obj, z) in job.zaps {
            cache_zap(zcache, obj, z);
        }
        for (obj, d) in &frozen.dirty {
            if d.freed {
                zcache.remove(obj);
            }
        }
        // The accounting ZAPs change only here (account_owners): what was read of them before
        // is the last txg's.
        for obj in [oxzfs_format::objset::DMU_USERUSED_OBJECT, oxzfs_format::objset::DMU_GROUPUSED_OBJECT, oxzfs_format::objset::DMU_PROJECTUSED_OBJECT] {
            zcache.remove(&obj);
        }
        self.dncache.lock().unwrap_or_else(|p| p.into_inner()).clear();
        // The intent log's header may have moved on in the open txg (a new chain): keep it.
        let zh = std::mem::replace(&mut self.phys.zil_header, oxzfs_format::objset::ZilHeaderPhys::empty());
        self.phys = job.phys;
        self.phys.zil_header = zh;
        self.bp = job.bp;
        self.delta.dsize += job.delta.dsize;
        self.delta.psize += job.delta.psize;
        self.delta.lsize += job.delta.lsize;
        self.born_features.extend(job.born_features);
        // Reads now go through the new tree.
        self.ro = Some(Arc::new(Objset { spa: self.spa.clone(), phys: self.phys.clone(), bp: self.bp.clone(), id: self.id }));
    }
}

impl crate::dmu::ObjsetRead for ObjsetW {
    fn describe(&self, obj: u64) -> String {
        format!("pool '{}' objset {} object {}", self.spa.name, self.id, obj)
    }

    /// What this objset writes and holds in memory is in the host's order (little-endian).
    fn dnode_ordered(&self, obj: u64) -> Result<(DnodePhys, bool)> {
        Ok((self.dnode(obj)?, true))
    }

    fn spill_ordered(&self, obj: u64, _dn: &DnodePhys) -> Result<Option<(Arc<Vec<u8>>, bool)>> {
        Ok(self.spill(obj)?.map(|b| (Arc::new(b), true)))
    }

    fn read_object(&self, obj: u64, _dn: &DnodePhys, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read(obj, offset, len as usize)
    }

    fn zap_value(&self, obj: u64, name: &[u8]) -> Result<Option<u64>> {
        self.with_zap(obj, |z| z.entries.get(name).and_then(|(_, v)| v.first().copied()))
    }

    fn zap_entries(&self, obj: u64) -> Result<Vec<(Vec<u8>, Vec<u64>)>> {
        self.with_zap(obj, |z| z.entries.iter().map(|(k, (_, v))| (k.clone(), v.clone())).collect())
    }
}

impl SyncJob {
    /// The objset bp the job wrote (after `run`).
    pub fn bp_synced(&self) -> BlockPointer {
        self.bp.clone()
    }

    /// Write the frozen txg: data and ZAP blocks, indirect blocks, the dnode blocks, the
    /// objset block; returns the new objset bp. Frees go to `ctx.freed`.
    pub fn run(&mut self, ctx: &mut SyncCtx) -> Result<BlockPointer> {
        let frozen = self.frozen.clone();
        let mut dnodes: BTreeMap<u64, Option<DnodePhys>> = BTreeMap::new();
        for (&obj, d) in &frozen.dirty {
            if d.freed {
                free_tree(self, ctx, &d.dn)?;
                dnodes.insert(obj, None);
                continue;
            }
            let mut dn = d.dn.clone();
            let typ = dn.typ;
            let meta = types::ot_is_metadata(typ);
            if let Some(z) = &d.zap {
                let (blocks, trunc_from) = encode_zap(&mut dn, z)?;
                self.zaps.push((obj, z.clone()));
                let props = self.block_props(ctx, typ, 0, meta, dn.data_block_size(), dn.compress, dn.checksum);
                let blocks = blocks.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
                sync_tree(self, ctx, &mut dn, &blocks, trunc_from, &d.holes, props, None, &BTreeMap::new())?;
            } else {
                let props = self.block_props(ctx, typ, 0, meta, dn.data_block_size(), dn.compress, dn.checksum);
                sync_tree(self, ctx, &mut dn, &d.blocks, d.trunc_from, &d.holes, props, None, &d.overrides)?;
            }
            if let Some(spill) = frozen.spills.get(&obj) {
                sync_spill(self, ctx, &mut dn, spill.clone())?;
            }
            dnodes.insert(obj, Some(dn));
        }
        if !ctx.is_mos && self.phys.typ == DMU_OST_ZFS && self.spa.version() >= crate::dmu_userused::SPA_VERSION_USERSPACE {
            self.account_owners(ctx, &mut dnodes)?;
        }
        // The meta dnode: dirty dnodes go into their 16K blocks.
        let mut md = self.phys.meta_dnode.clone();
        let mut md_blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut fills: HashMap<u64, u64> = HashMap::new();
        let mut touched: Vec<u64> = dnodes.keys().map(|o| o / DNODES_PER_BLOCK).collect();
        touched.dedup();
        for blkid in touched {
            let mut block = if blkid <= self.phys.meta_dnode.maxblkid {
                match &self.ro {
                    Some(ro) => ro.read_block(&self.phys.meta_dnode, 0, blkid)?.map(|b| b.to_vec()).unwrap_or_default(),
                    None => Vec::new(),
                }
            } else {
                Vec::new()
            };
            block.resize(DNODE_BLOCK_SIZE as usize, 0);
            for (obj, dn) in dnodes.range(blkid * DNODES_PER_BLOCK..(blkid + 1) * DNODES_PER_BLOCK) {
                let off = ((obj % DNODES_PER_BLOCK) as usize) * DNODE_SIZE;
                match dn {
                    Some(dn) => {
                        let bytes = dn.encode();
                        block[off..off + bytes.len()].copy_from_slice(&bytes);
                    }
                    None => {
                        // Zero the freed dnode and its extra slots.
                        let slots = DnodePhys::decode(&block[off..], true).map(|d| d.slots()).unwrap_or(1);
                        let end = (off + slots * DNODE_SIZE).min(block.len());
                        block[off..end].iter_mut().for_each(|x| *x = 0);
                    }
                }
            }
            // Fill: allocated dnodes in the block.
            let mut n = 0u64;
            let mut i = 0usize;
            while i < DNODES_PER_BLOCK as usize {
                let off = i * DNODE_SIZE;
                if block[off] != 0 {
                    n += 1;
                    i += 1 + block[off + 12] as usize;
                } else {
                    i += 1;
                }
            }
            fills.insert(blkid, n);
            if blkid > md.maxblkid || md.blkptr.iter().all(|b| b.is_hole()) {
                md.maxblkid = md.maxblkid.max(blkid);
            }
            md_blocks.insert(blkid, block);
        }
        self.synced = dnodes;
        let props = self.block_props(ctx, types::DMU_OT_DNODE, 0, true, DNODE_BLOCK_SIZE, 0, 0);
        let md_blocks = md_blocks.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
        sync_tree(self, ctx, &mut md, &md_blocks, None, &Default::default(), props, Some(&fills), &BTreeMap::new())?;
        self.phys.meta_dnode = md;
        // The objset block itself: 4K where the pool keeps projects (a projectused dnode of
        // another writer is never dropped), 2K otherwise (dmu_objset_open_impl's sizes).
        let size = if ctx.projects || self.phys.projectused_dnode.as_ref().is_some_and(|d| !d.is_free()) { OBJSET_PHYS_SIZE_V3 } else { OBJSET_SIZE };
        let bytes = self.phys.encode(size);
        let mut p = self.block_props(ctx, types::DMU_OT_OBJSET, 0, true, size as u64, 0, 0);
        p.embed_ok = false;
        let fill: u64 = self.phys.meta_dnode.blkptr.iter().map(|b| if b.is_hole() { 0 } else { b.fill }).sum();
        let prev = if self.bp.is_hole() { None } else { Some(self.bp.clone()) };
        let mut bp = match write_cached(ctx.spa, self.id, ctx.alloc, &Arc::new(bytes), &p, ctx.txg, prev.as_ref())? {
            Written::Bp(bp) => bp,
            Written::Hole => unreachable!("an objset block is never all zeros"),
        };
        bp.fill = fill;
        self.note_born(&bp);
        if let Some(old) = prev {
            if old.dva != bp.dva {
                self.delta.add(&old, -1, (ctx.dsize)(&old));
                ctx.freed.push(old);
                self.delta.add(&bp, 1, (ctx.dsize)(&bp));
            }
        } else {
            self.delta.add(&bp, 1, (ctx.dsize)(&bp));
        }
        self.bp = bp.clone();
        // The data blocks gathered by this job go out before anything names them from disk.
        ctx.queue.flush(&ctx.spa.root_vdev)?;
        Ok(bp)
    }

    /// dmu_objset_do_userquota_updates: charge every object of this sync to its owner, group
    /// and project (taking back what it carried at the last sync), mark the dnodes accounted,
    /// and write the changed counts into the objset's accounting ZAPs, made on the first sync
    /// that needs them (dmu_objset_do_userquota_updates_prep).
    fn account_owners(&mut self, ctx: &mut SyncCtx, dnodes: &mut BTreeMap<u64, Option<DnodePhys>>) -> Result<()> {
        use crate::dmu::ObjsetRead;
        use crate::dmu_userused::{dnode_ids, Deltas};
        use oxzfs_format::objset::{DMU_GROUPUSED_OBJECT, DMU_PROJECTUSED_OBJECT, DMU_USERUSED_OBJECT};
        let projects = ctx.projects;
        let mark = DNODE_FLAG_USERUSED_ACCOUNTED | if ctx.userobj { DNODE_FLAG_USEROBJUSED_ACCOUNTED } else { 0 };
        let mut deltas = Deltas::default();
        let frozen = self.frozen.clone();
        for (&obj, new) in dnodes.iter_mut() {
            // What the object was at the last sync (none: it was free). A failing read fails
            // the sync, as the dnode block's own read would: a guess would charge twice.
            let old = match self.ro.as_ref().map(|ro| ro.dnode_with_order(obj)) {
                Some(Ok(d)) => Some(d),
                Some(Err(ZfsError::NotFound(_))) | None => None,
                Some(Err(e)) => return Err(e),
            };
            let mut old_spill = None;
            if let Some((old, le)) = &old {
                if old.bonuslen == 0 && old.bonustype == types::DMU_OT_SA {
                    old_spill = match self.ro.as_ref() {
                        Some(ro) => ro.spill_ordered(obj, old)?.map(|(b, _)| b),
                        None => None,
                    };
                }
                if let Some(ids) = dnode_ids(old, old_spill.as_deref().map(|b| b.as_slice()), *le) {
                    deltas.charge(&ids, old.used_bytes(), old.flags, -1, projects);
                }
            }
            let Some(dn) = new else { continue };
            dn.flags |= mark;
            let spill: Option<Vec<u8>> = if dn.bonuslen == 0 && dn.bonustype == types::DMU_OT_SA {
                match frozen.spills.get(&obj) {
                    Some(s) => s.clone(),
                    None => old_spill.map(|b| b.to_vec()),
                }
            } else {
                None
            };
            // What this objset writes is in the host's order (little-endian).
            if let Some(ids) = dnode_ids(dn, spill.as_deref(), true) {
                deltas.charge(&ids, dn.used_bytes(), dn.flags, 1, projects);
            }
        }
        let slots: &[(u64, &BTreeMap<String, i64>)] = if projects {
            &[(DMU_USERUSED_OBJECT, &deltas.user), (DMU_GROUPUSED_OBJECT, &deltas.group), (DMU_PROJECTUSED_OBJECT, &deltas.project)]
        } else {
            &[(DMU_USERUSED_OBJECT, &deltas.user), (DMU_GROUPUSED_OBJECT, &deltas.group)]
        };
        for &(obj, changes) in slots {
            let slot = match obj {
                DMU_USERUSED_OBJECT => &self.phys.userused_dnode,
                DMU_GROUPUSED_OBJECT => &self.phys.groupused_dnode,
                _ => &self.phys.projectused_dnode,
            };
            let existing = slot.clone().filter(|d| !d.is_free());
            if existing.is_some() && changes.values().all(|&d| d == 0) {
                continue;
            }
            let (mut dn, mut z) = match existing {
                Some(dn) => {
                    let ro = self.ro.as_ref().ok_or_else(|| ZfsError::Invalid(format!("objset {}: accounting object {obj:#x} without a synced tree", self.id)))?;
                    let z = zapobj_of(ro, obj, &dn)?;
                    (dn, z)
                }
                None => (special_zap_dnode(), ZapObj { salt: rand_u64() | 1, ..Default::default() }),
            };
            crate::dmu_userused::apply(&mut z.entries, changes);
            let (blocks, trunc_from) = encode_zap(&mut dn, &z)?;
            let props = self.block_props(ctx, types::DMU_OT_USERGROUP_USED, 0, true, dn.data_block_size(), dn.compress, dn.checksum);
            let blocks = blocks.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
            sync_tree(self, ctx, &mut dn, &blocks, trunc_from, &Default::default(), props, None, &BTreeMap::new())?;
            match obj {
                DMU_USERUSED_OBJECT => self.phys.userused_dnode = Some(dn),
                DMU_GROUPUSED_OBJECT => self.phys.groupused_dnode = Some(dn),
                _ => self.phys.projectused_dnode = Some(dn),
            }
        }
        Ok(())
    }

    /// dsl_dataset_block_born's feature side: the per-dataset features block `bp`, born in
    /// this sync, uses (large_blocks above 128K, its checksum's and its compression's).
    fn note_born(&mut self, bp: &BlockPointer) {
        if bp.is_hole() {
            return;
        }
        if bp.lsize > 128 << 10 {
            self.born_features.insert("org.open-zfs:large_blocks");
        }
        if !bp.embedded {
            self.born_features.extend(oxzfs_format::features::checksum_feature(bp.checksum));
        }
        self.born_features.extend(oxzfs_format::features::compress_feature(bp.compress));
    }

    /// The zio properties of a block of this objset (dmu_write_policy).
    #[allow(clippy::too_many_arguments)]
    fn block_props(&self, ctx: &SyncCtx, typ: u8, level: u8, meta: bool, blksz: u64, dn_compress: u8, dn_checksum: u8) -> WriteProps {
        let env = PolicyEnv { embed: ctx.embed, lz4: ctx.lz4, is_mos: ctx.is_mos, pass: ctx.pass };
        write_policy(&self.props, env, typ, level, meta, blksz, dn_compress, dn_checksum)
    }
}

/// What dmu_write_policy needs of the pool and the sync beside the objset's properties.
#[derive(Clone, Copy)]
pub struct PolicyEnv {
    pub embed: bool,
    pub lz4: bool,
    pub is_mos: bool,
    pub pass: u32,
}

/// The zio properties of a block of an objset with properties `props` (dmu_write_policy).
#[allow(clippy::too_many_arguments)]
pub fn write_policy(props: &OsProps, ctx: PolicyEnv, typ: u8, level: u8, meta: bool, blksz: u64, dn_compress: u8, dn_checksum: u8) -> WriteProps {
    let md_compress = if ctx.lz4 { ZIO_COMPRESS_LZ4 } else { ZIO_COMPRESS_LZJB };
    let ismd = meta || level > 0;
    let (mut checksum, mut compress, mut copies) = (props.checksum, props.compress, props.copies);
    if dn_checksum != 0 {
        checksum = dn_checksum;
    }
    if dn_compress != 0 {
        compress = dn_compress;
    }
    if ismd {
        if dn_compress != ZIO_COMPRESS_OFF {
            compress = md_compress;
        }
        checksum = md_checksum(checksum);
        copies += 1;
    }
    if ctx.is_mos {
        copies = 3;
    }
    if ctx.pass as u64 >= crate::tunables::sync_pass_dont_compress() {
        compress = ZIO_COMPRESS_OFF; // let the passes converge
    }
    let class = if typ == types::DMU_OT_DDT_ZAP {
        AllocClass::Dedup
    } else if ismd || (props.special_small > 0 && blksz <= props.special_small) {
        AllocClass::Special
    } else {
        AllocClass::Normal
    };
    // dmu_write_policy: level-0 data of a dedup dataset takes the dedup checksum (over the
    // dnode's own), and verify is forced when that checksum is not strong enough alone.
    let dedup = !ismd && !ctx.is_mos && props.dedup != 0;
    let mut dedup_verify = false;
    if dedup {
        checksum = props.dedup;
        dedup_verify = props.dedup_verify || !oxzfs_format::checksum::checksum_info(checksum).map_or(false, |i| i.dedup());
    }
    WriteProps {
        typ,
        level,
        checksum,
        compress,
        complevel: props.complevel,
        copies: copies.min(3),
        embed_ok: ctx.embed && level == 0 && typ != types::DMU_OT_DNODE && typ != types::DMU_OT_OBJSET,
        class,
        dedup,
        dedup_verify,
    }
}

/// The checksum of a metadata block when the data checksum is `c` (dmu_write_policy): `c`
/// itself when it is strong enough for metadata and kept in the bp, else fletcher4.
fn md_checksum(c: u8) -> u8 {
    match oxzfs_format::checksum::checksum_info(c) {
        Some(i) if i.metadata() && !i.embedded() => c,
        _ => ZIO_CHECKSUM_FLETCHER_4,
    }
}

/// A read planned under the pool lock (see `ObjsetW::read_later`).
pub enum ReadLater {
    Done(Vec<u8>),
    /// A read of the synced tree; the pin keeps its freed blocks from being reallocated early.
    Clean { ro: Arc<Objset>, dn: DnodePhys, obj: u64, offset: u64, len: usize, _pin: crate::spa::ReaderPin },
}

impl ReadLater {
    /// The bytes (zeros in holes and past the last block), read from the vdevs (through the
    /// ARC) without the pool lock.
    pub fn finish(self) -> Result<Vec<u8>> {
        match self {
            ReadLater::Done(v) => Ok(v),
            ReadLater::Clean { ro, dn, obj, offset, len, _pin } => {
                let mut v = ro.read_obj(&dn, obj, offset, len as u64)?;
                v.resize(len, 0);
                Ok(v)
            }
        }
    }

    /// `finish`'s bytes as pieces (`Objset::read_obj_parts`): the ARC's buffers as they are,
    /// for a caller that sends them on without gathering them into one buffer.
    pub fn finish_parts(self) -> Result<Vec<crate::dmu::ReadPart>> {
        use crate::dmu::ReadPart;
        match self {
            ReadLater::Done(v) => {
                let n = v.len();
                Ok(vec![ReadPart::Block(Arc::new(v), 0..n)])
            }
            ReadLater::Clean { ro, dn, obj, offset, len, _pin } => {
                let mut parts = ro.read_obj_parts(&dn, obj, offset, len as u64)?;
                let got: usize = parts.iter().map(ReadPart::len).sum();
                if got < len {
                    parts.push(ReadPart::Zeros(len - got));
                }
                Ok(parts)
            }
        }
    }
}

pub use crate::zio::rand_u64;

/// Encode a dirty ZAP into the object's blocks (micro when it fits, else fat): the new
/// blocks, and the truncation (everything) that replaces the old ones; the dnode's block size
/// and maxblkid follow.
/// The content of ZAP `obj` (dnode `dn`) of the synced objset `ro`, as ZapObj.
fn zapobj_of(ro: &Objset, obj: u64, dn: &DnodePhys) -> Result<ZapObj> {
    let z = crate::zap::Zap::open(ro, obj)?;
    let mut out = ZapObj { salt: z.salt(), normflags: z.normflags(), flags: z.flags(), ..Default::default() };
    if dn.maxblkid > 0 {
        out.leaf_shift = dn.data_block_size().trailing_zeros() as u8;
    }
    let uint64_key = z.flags() & oxzfs_format::zap::ZAP_FLAG_UINT64_KEY != 0;
    for e in z.list(ro)? {
        // A uint64 key is its words (a last zero byte is part of it, not a NUL).
        let key = if uint64_key { e.name.clone() } else { e.name_key() };
        out.entries.insert(key, (e.int_size, e.value_u64s()));
    }
    Ok(out)
}

/// The dnode of a new accounting ZAP (zap_create_claim of DMU_OT_USERGROUP_USED: no bonus,
/// 512-byte blocks until it grows).
fn special_zap_dnode() -> DnodePhys {
    empty_dnode(types::DMU_OT_USERGROUP_USED, DEFAULT_INDBLKSHIFT, 1)
}

fn encode_zap(dn: &mut DnodePhys, z: &ZapObj) -> Result<(BTreeMap<u64, Vec<u8>>, Option<u64>)> {
    use oxzfs_format::zap_write;
    let micro: Option<Vec<(String, u64)>> = z
        .entries
        .iter()
        .map(|(k, (isz, v))| {
            if *isz == 8 && v.len() == 1 && k.len() < oxzfs_format::zap::MZAP_NAME_LEN && !k.contains(&0) {
                String::from_utf8(k.clone()).ok().map(|s| (s, v[0]))
            } else {
                None
            }
        })
        .collect();
    let blocks: Vec<Vec<u8>> = match micro {
        Some(m) if z.flags == 0 && (m.len() + 1) * 64 <= 128 * 1024 => {
            let mut bs = 512usize;
            while (m.len() + 1) * 64 > bs {
                bs *= 2;
            }
            // A micro ZAP never shrinks its block (OpenZFS grows it in place).
            bs = bs.max(if dn.maxblkid == 0 { dn.data_block_size() as usize } else { 0 }).min(128 * 1024);
            vec![zap_write::encode_micro(z.salt, z.normflags, &m, bs)]
        }
        _ => {
            let ents: Vec<zap_write::FatEntry> = z
                .entries
                .iter()
                .map(|(k, (isz, v))| {
                    let mut key = k.clone();
                    if z.flags & oxzfs_format::zap::ZAP_FLAG_UINT64_KEY == 0 {
                        key.push(0);
                    }
                    zap_write::FatEntry { key, int_size: *isz, values: v.clone() }
                })
                .collect();
            let shift = if z.leaf_shift == 0 { 14 } else { z.leaf_shift as u32 };
            zap_write::encode_fat(z.salt, z.flags, z.normflags, &ents, shift)
        }
    };
    let bs = blocks[0].len() as u64;
    dn.datablkszsec = (bs / 512) as u16;
    dn.maxblkid = blocks.len() as u64 - 1;
    let mut out = BTreeMap::new();
    for (i, b) in blocks.into_iter().enumerate() {
        assert_eq!(b.len() as u64, bs, "ZAP blocks of one size");
        out.insert(i as u64, b);
    }
    Ok((out, Some(0)))
}

/// Write a changed spill block (or drop it): the old one is freed, the dnode points at the new
/// one with DNODE_FLAG_SPILL_BLKPTR, and its used bytes follow.
fn sync_spill(os: &mut SyncJob, ctx: &mut SyncCtx, dn: &mut DnodePhys, spill: Option<Vec<u8>>) -> Result<()> {
    let mut used = dn.used as i64;
    if let Some(old) = dn.spill.take() {
        if !old.is_hole() && !old.embedded {
            used -= (ctx.dsize)(&old) as i64;
            os.delta.add(&old, -1, (ctx.dsize)(&old));
            ctx.freed.push(old);
        }
    }
    dn.flags &= !DNODE_FLAG_SPILL_BLKPTR;
    if let Some(data) = spill {
        let props = os.block_props(ctx, types::DMU_OT_SA, 0, true, data.len() as u64, dn.compress, dn.checksum);
        let bp = match write_cached(&os.spa, os.id, ctx.alloc, &Arc::new(data), &props, ctx.txg, None)? {
            Written::Bp(bp) => bp,
            Written::Hole => unreachable!("an SA spill block starts with its magic"),
        };
        if !bp.embedded {
            used += (ctx.dsize)(&bp) as i64;
            os.delta.add(&bp, 1, (ctx.dsize)(&bp));
        }
        dn.spill = Some(bp);
        dn.flags |= DNODE_FLAG_SPILL_BLKPTR;
    }
    dn.used = used.max(0) as u64;
    Ok(())
}

/// Write a block (`zio::write_block_over`) and keep its logical bytes in the pool's ARC, as a
/// dbuf keeps its buffer after the write: the next txg's sync reads back what it rewrites
/// (space map tails, indirect and dnode blocks) from memory.
/// `ds`: the dataset (objset) the block belongs to.
#[allow(clippy::too_many_arguments)]
fn write_cached(spa: &Spa, ds: u64, alloc: &mut dyn DvaAllocator, data: &Arc<Vec<u8>>, p: &WriteProps, txg: u64, prev: Option<&BlockPointer>) -> Result<Written> {
    let (w, phys) = zio::write_block_over(&spa.root_vdev, &spa.checksum_salt, alloc, data, p, txg, prev)?;
    if let Written::Bp(bp) = &w {
        spa.cache_written_block(bp, data.clone(), phys, ds);
    }
    Ok(w)
}

/// Free every block of a dnode's tree (object freed).
fn free_tree(os: &mut SyncJob, ctx: &mut SyncCtx, dn: &DnodePhys) -> Result<()> {
    let mut stack: Vec<BlockPointer> = dn.blkptr.iter().filter(|b| !b.is_hole()).cloned().collect();
    if let Some(sp) = &dn.spill {
        if !sp.is_hole() {
            stack.push(sp.clone());
        }
    }
    while let Some(bp) = stack.pop() {
        if bp.level > 0 {
            let ind = os.spa.read_bp(&bp)?;
            for i in 0..ind.len() / BLKPTR_SIZE {
                let c = BlockPointer::decode(&ind[i * BLKPTR_SIZE..], bp.little_endian)
                    .map_err(|e| ZfsError::corrupt("indirect block".to_string(), e))?;
                if !c.is_hole() {
                    stack.push(c);
                }
            }
        }
        if !bp.embedded {
            os.delta.add(&bp, -1, (ctx.dsize)(&bp));
            ctx.freed.push(bp);
        }
    }
    Ok(())
}

fn decode_bps(buf: &[u8], le: bool) -> Result<Vec<BlockPointer>> {
    (0..buf.len() / BLKPTR_SIZE)
        .map(|i| BlockPointer::decode(&buf[i * BLKPTR_SIZE..], le).map_err(|e| ZfsError::corrupt("indirect block".to_string(), e)))
        .collect()
}

fn encode_bps(bps: &[BlockPointer]) -> Vec<u8> {
    let mut out = vec![0u8; bps.len() * BLKPTR_SIZE];
    for (i, b) in bps.iter().enumerate() {
        out[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE].copy_from_slice(&b.encode(true));
    }
    out
}

/// Levels needed for `maxblkid` with `nblkptr` top pointers and `epbs` bits per indirect.
fn levels_for(maxblkid: u64, nblkptr: u64, epbs: u32) -> u8 {
    let mut levels = 1u8;
    let mut cap = nblkptr as u128;
    while (maxblkid as u128) >= cap {
        cap <<= epbs;
        levels += 1;
    }
    levels
}

/// Sync one object's block tree: write its dirty L0 blocks, free truncated ones, rewrite the
/// indirect blocks on the way up, update dn.blkptr / maxblkid / nlevels / used.
#[allow(clippy::too_many_arguments)]
fn sync_tree(
    os: &mut SyncJob,
    ctx: &mut SyncCtx,
    dn: &mut DnodePhys,
    blocks: &BTreeMap<u64, Arc<Vec<u8>>>,
    trunc_from: Option<u64>,
    holes: &std::collections::BTreeSet<u64>,
    l0: WriteProps,
    fills: Option<&HashMap<u64, u64>>,
    overrides: &BTreeMap<u64, (BlockPointer, Option<Arc<Vec<u8>>>)>,
) -> Result<()> {
    let old = dn.clone();
    let epbs = (old.indblkshift as u32) - 7;
    let per = 1u64 << epbs;
    let nbp = old.nblkptr as u64;
    let old_tree_empty = old.blkptr.iter().all(|b| b.is_hole());
    // New shape.
    let max_needed = blocks.keys().next_back().copied().unwrap_or(0).max(if old_tree_empty { 0 } else { dn.maxblkid });
    let mut nlevels = old.nlevels.max(levels_for(max_needed, nbp, epbs));
    if old_tree_empty && trunc_from == Some(0) {
        nlevels = levels_for(max_needed, nbp, epbs);
    }
    // A tree of holes only is rebuilt from nothing (its holes' levels may not fit the shape).
    let fresh_top = old_tree_empty && nlevels != old.nlevels;
    let old_nl = old.nlevels;
    // Dirty indirect blocks: (level, blkid) → entries.
    let mut ind: BTreeMap<(u8, u64), Vec<BlockPointer>> = BTreeMap::new();
    let mut top: Vec<BlockPointer> = if fresh_top { vec![BlockPointer::hole(); nbp as usize] } else { old.blkptr.clone() };
    let mut used = old.used as i64;
    let ro = os.ro.clone();
    // The old bp of block (level, blkid) in the old tree.
    let old_bp = |level: u8, blkid: u64| -> Result<Option<BlockPointer>> {
        if old_tree_empty || level >= old_nl {
            return Ok(None);
        }
        match &ro {
            Some(ro) => ro.block_pointer(&old, level, blkid),
            None => Ok(None),
        }
    };
    if nlevels > old_nl && !old_tree_empty {
        // Growth: the old top pointers move into block 0 of level old_nl.
        let mut v = vec![BlockPointer::hole(); per as usize];
        v[..old.blkptr.len()].clone_from_slice(&old.blkptr);
        ind.insert((old_nl, 0), v);
        for l in old_nl + 1..nlevels {
            ind.insert((l, 0), vec![BlockPointer::hole(); per as usize]);
        }
        top = vec![BlockPointer::hole(); nbp as usize];
    }
    // Load (or create) the indirect block at (level, blkid) for modification.
    fn load(
        ind: &mut BTreeMap<(u8, u64), Vec<BlockPointer>>,
        level: u8,
        blkid: u64,
        per: u64,
        spa: &Spa,
        old_bp: &dyn Fn(u8, u64) -> Result<Option<BlockPointer>>,
    ) -> Result<()> {
        if ind.contains_key(&(level, blkid)) {
            return Ok(());
        }
        let v = match old_bp(level, blkid)? {
            Some(bp) if !bp.is_hole() => {
                let b = spa.read_bp(&bp)?;
                let mut v = decode_bps(&b, bp.little_endian)?;
                v.resize(per as usize, BlockPointer::hole());
                v
            }
            _ => vec![BlockPointer::hole(); per as usize],
        };
        ind.insert((level, blkid), v);
        Ok(())
    }
    // Install bp at (level, blkid): into its parent indirect or the dnode's top.
    let mut changes: Vec<(u8, u64, BlockPointer)> = Vec::new();
    // Truncation: every old L0 beyond trunc_from becomes a hole (frees gathered by walking).
    if let Some(t) = trunc_from {
        if !old_tree_empty {
            let mut stack: Vec<(u8, u64, BlockPointer)> =
                old.blkptr.iter().enumerate().filter(|(_, b)| !b.is_hole()).map(|(i, b)| (old_nl - 1, i as u64, b.clone())).collect();
            while let Some((level, blkid, bp)) = stack.pop() {
                let first = blkid << (epbs as u64 * level as u64);
                let last = ((blkid + 1) << (epbs as u64 * level as u64)) - 1;
                if last < t {
                    continue;
                }
                if level == 0 {
                    if !blocks.contains_key(&blkid) {
                        changes.push((0, blkid, ctx.hole_for(Some(&bp), bp.lsize, bp.typ, 0)));
                    }
                    continue;
                }
                let _ = first;
                let b = os.spa.read_bp(&bp)?;
                for (i, c) in decode_bps(&b, bp.little_endian)?.into_iter().enumerate() {
                    if !c.is_hole() {
                        stack.push((level - 1, blkid * per + i as u64, c));
                    }
                }
            }
        }
    }
    // Punched blocks become holes.
    for &blkid in holes {
        if let Some(b) = old_bp(0, blkid)?.filter(|b| !b.is_hole() && !blocks.contains_key(&blkid)) {
            changes.push((0, blkid, ctx.hole_for(Some(&b), b.lsize, b.typ, 0)));
        }
    }
    // Write the dirty L0 blocks: those written by an intent-log commit or deduplicated one by
    // one, the rest as one batch (compressed, checksummed and written on the worker pool).
    let mut batch: Vec<(u64, &Arc<Vec<u8>>)> = Vec::new();
    let mut items: Vec<zio::BlockWrite> = Vec::new();
    for (&blkid, data) in blocks {
        let mut p = l0;
        if fills.is_some() {
            p.embed_ok = false;
        }
        let prev = old_bp(0, blkid)?;
        if !p.dedup && !overrides.contains_key(&blkid) {
            batch.push((blkid, data));
            items.push(zio::BlockWrite { data, p, prev });
            continue;
        }
        if let Some((bp, phys)) = overrides.get(&blkid) {
            // Written by an intent-log commit (dmu_sync): installed as it is.
            if !bp.embedded {
                os.spa.cache_written_block(bp, data.clone(), phys.clone(), os.id);
            }
            changes.push((0, blkid, bp.clone()));
            continue;
        }
        let (w, phys) = ctx.ddt.dedup_write(&os.spa.root_vdev, &os.spa.checksum_salt, ctx.alloc, data, &p, p.dedup_verify, ctx.txg)?;
        if let Written::Bp(bp) = &w {
            os.spa.cache_written_block(bp, data.clone(), phys, os.id);
        }
        changes.push((0, blkid, ctx.written_bp(w, prev.as_ref(), data.len() as u64, p.typ, fills.and_then(|f| f.get(&blkid).copied()))));
    }
    let written = zio::write_blocks_over(&os.spa.root_vdev, &os.spa.checksum_salt, ctx.alloc, &items, ctx.txg, Some(&mut ctx.queue))?;
    for (((blkid, data), b), (w, phys)) in batch.into_iter().zip(&items).zip(written) {
        if let Written::Bp(bp) = &w {
            os.spa.cache_written_block(bp, data.clone(), phys, os.id);
        }
        changes.push((0, blkid, ctx.written_bp(w, b.prev.as_ref(), data.len() as u64, b.p.typ, fills.and_then(|f| f.get(&blkid).copied()))));
    }
    // Apply changes level by level.
    let mut level = 0u8;
    let md_props = |lvl: u8| {
        let mut p = l0;
        p.level = lvl;
        p.embed_ok = false;
        p.compress = if ctx.pass as u64 >= crate::tunables::sync_pass_dont_compress() { ZIO_COMPRESS_OFF } else if ctx.lz4 { ZIO_COMPRESS_LZ4 } else { ZIO_COMPRESS_LZJB };
        p.checksum = md_checksum(p.checksum);
        if !ctx.is_mos && !types::ot_is_metadata(l0.typ) {
            p.copies = (p.copies + 1).min(3);
        }
        p.class = AllocClass::Special;
        p.dedup = false;
        p.dedup_verify = false;
        p
    };
    loop {
        // Install this level's changes into their parents, freeing replaced blocks.
        for (lvl, blkid, bp) in changes.drain(..) {
            debug_assert_eq!(lvl, level);
            let slot: &mut BlockPointer = if lvl + 1 == nlevels {
                &mut top[blkid as usize]
            } else {
                let pb = blkid / per;
                load(&mut ind, lvl + 1, pb, per, &os.spa, &old_bp)?;
                &mut ind.get_mut(&(lvl + 1, pb)).expect("loaded")[(blkid % per) as usize]
            };
            let prev = std::mem::replace(slot, bp.clone());
            // A pointer moved on growth, or a block rewritten in place, stays allocated (a
            // dedup block written again over itself is a new reference: not the same).
            let same = !prev.is_hole() && !prev.embedded && !bp.is_hole() && !bp.embedded && prev.dva == bp.dva && prev.birth == bp.birth;
            if !same {
                if !prev.is_hole() && !prev.embedded {
                    used -= (ctx.dsize)(&prev) as i64;
                    os.delta.add(&prev, -1, (ctx.dsize)(&prev));
                    ctx.freed.push(prev);
                }
                if !bp.is_hole() && !bp.embedded {
                    used += (ctx.dsize)(&bp) as i64;
                    os.delta.add(&bp, 1, (ctx.dsize)(&bp));
                }
                os.note_born(&bp);
            }
        }
        level += 1;
        if level >= nlevels {
            break;
        }
        // Write the dirty indirect blocks of this level.
        let keys: Vec<(u8, u64)> = ind.range((level, 0)..(level, u64::MAX)).map(|(k, _)| *k).collect();
        for k in keys {
            let entries = ind.remove(&k).expect("listed");
            let fill: u64 = entries.iter().map(|b| if b.is_hole() { 0 } else { b.fill }).sum();
            // An indirect of holes only is a hole itself (dbuf_write_children_ready).
            let bp = if entries.iter().all(|b| b.is_hole()) {
                ctx.hole_for(old_bp(level, k.1)?.as_ref(), 1 << old.indblkshift, l0.typ, level)
            } else {
                let bytes = Arc::new(encode_bps(&entries));
                let prev = old_bp(level, k.1)?;
                match write_cached(&os.spa, os.id, ctx.alloc, &bytes, &md_props(level), ctx.txg, prev.as_ref())? {
                    Written::Hole => BlockPointer::hole(),
                    Written::Bp(mut bp) => {
                        bp.fill = fill;
                        bp
                    }
                }
            };
            changes.push((level, k.1, bp));
        }
        // When growing, the old tree's top pointers were moved, not freed: don't count twice.
    }
    // Shrink the tree shape after a truncation to nothing.
    dn.blkptr = top;
    dn.nlevels = nlevels;
    dn.used = used.max(0) as u64;
    dn.flags |= DNODE_FLAG_USED_BYTES;
    // Blocks dirtied after the truncation keep the maxblkid they raised even when they were
    // written as holes (zeros), as OpenZFS's dbuf_dirty raises dn_maxblkid.
    if trunc_from == Some(0) && blocks.is_empty() && dn.blkptr.iter().all(|b| b.is_hole()) {
        dn.maxblkid = 0;
    }
    Ok(())
}
