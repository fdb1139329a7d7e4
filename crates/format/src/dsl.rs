//! DSL objects: dataset directories (`dsl_dir_phys_t`) and datasets (`dsl_dataset_phys_t`),
//! both kept in the bonus buffer of MOS objects, and the names of the MOS object directory.
//!
//! ```text
//!  MOS object 1 (object directory ZAP): root_dataset → dsl_dir of the pool's root
//!  dsl_dir:     head_dataset_obj, parent_dir_obj, child_dir_zapobj (name → dsl_dir),
//!               props_zapobj, space accounting
//!  dsl_dataset: dir_obj, prev_snap_obj/txg (the snapshot chain), snapnames_zapobj
//!               (name → snapshot dataset), bp (the objset), space accounting
//! ```

use crate::blkptr::BlockPointer;
use crate::bytes::u64_at;
use crate::Result;

pub const DMU_POOL_DIRECTORY_OBJECT: u64 = 1;
pub const DMU_POOL_CONFIG: &str = "config";
pub const DMU_POOL_ROOT_DATASET: &str = "root_dataset";
pub const DMU_POOL_SYNC_BPOBJ: &str = "sync_bplist";
pub const DMU_POOL_ERRLOG_SCRUB: &str = "errlog_scrub";
pub const DMU_POOL_ERRLOG_LAST: &str = "errlog_last";
pub const DMU_POOL_SPARES: &str = "spares";
pub const DMU_POOL_DEFLATE: &str = "deflate";
pub const DMU_POOL_HISTORY: &str = "history";
pub const DMU_POOL_PROPS: &str = "pool_props";
pub const DMU_POOL_L2CACHE: &str = "l2cache";
pub const DMU_POOL_TMP_USERREFS: &str = "tmp_userrefs";
pub const DMU_POOL_DDT: &str = "DDT-%s-%s-%s";
pub const DMU_POOL_DDT_STATS: &str = "DDT-statistics";
pub const DMU_POOL_CREATION_VERSION: &str = "creation_version";
pub const DMU_POOL_SCAN: &str = "scan";
pub const DMU_POOL_FREE_BPOBJ: &str = "free_bpobj";
pub const DMU_POOL_BPTREE_OBJ: &str = "bptree_obj";
pub const DMU_POOL_EMPTY_BPOBJ: &str = "empty_bpobj";
pub const DMU_POOL_CHECKSUM_SALT: &str = "org.illumos:checksum_salt";
pub const DMU_POOL_VDEV_ZAP_MAP: &str = "com.delphix:vdev_zap_map";
pub const DMU_POOL_REMOVING: &str = "com.delphix:removing";
pub const DMU_POOL_OBSOLETE_BPOBJ: &str = "com.delphix:obsolete_bpobj";
pub const DMU_POOL_CONDENSING_INDIRECT: &str = "com.delphix:condensing_indirect";
pub const DMU_POOL_ZPOOL_CHECKPOINT: &str = "com.delphix:zpool_checkpoint";
pub const DMU_POOL_LOG_SPACEMAP_ZAP: &str = "com.delphix:log_spacemap_zap";
pub const DMU_POOL_DELETED_CLONES: &str = "com.delphix:deleted_clones";
pub const DMU_POOL_FEATURES_FOR_READ: &str = "features_for_read";
pub const DMU_POOL_FEATURES_FOR_WRITE: &str = "features_for_write";
pub const DMU_POOL_FEATURE_DESCRIPTIONS: &str = "feature_descriptions";
pub const DMU_POOL_FEATURE_ENABLED_TXG: &str = "feature_enabled_txg";

pub const DD_FLAG_USED_BREAKDOWN: u64 = 1 << 0;
/// Indexes of dd_used_breakdown.
pub const DD_USED_HEAD: usize = 0;
pub const DD_USED_SNAP: usize = 1;
pub const DD_USED_CHILD: usize = 2;
pub const DD_USED_CHILD_RSRV: usize = 3;
pub const DD_USED_REFRSRV: usize = 4;

pub const DS_FLAG_INCONSISTENT: u64 = 1 << 0;
pub const DS_FLAG_NOPROMOTE: u64 = 1 << 1;
pub const DS_FLAG_UNIQUE_ACCURATE: u64 = 1 << 2;
pub const DS_FLAG_DEFER_DESTROY: u64 = 1 << 3;
pub const DS_FLAG_CI_DATASET: u64 = 1 << 16;

fn words<const N: usize>(buf: &[u8], le: bool, what: &'static str) -> Result<[u64; N]> {
    let mut w = [0u64; N];
    for (i, x) in w.iter_mut().enumerate() {
        *x = u64_at(buf, i * 8, le, what)?;
    }
    Ok(w)
}

#[derive(Clone, Debug, Default)]
pub struct DslDirPhys {
    pub creation_time: u64,
    pub head_dataset_obj: u64,
    pub parent_dir_obj: u64,
    pub origin_obj: u64,
    pub child_dir_zapobj: u64,
    pub used_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub quota: u64,
    pub reserved: u64,
    pub props_zapobj: u64,
    pub deleg_zapobj: u64,
    pub flags: u64,
    pub used_breakdown: [u64; 5],
    pub clones: u64,
}

impl DslDirPhys {
    pub fn decode(bonus: &[u8], le: bool) -> Result<DslDirPhys> {
        let w: [u64; 19] = words(bonus, le, "DSL directory")?;
        Ok(DslDirPhys {
            creation_time: w[0],
            head_dataset_obj: w[1],
            parent_dir_obj: w[2],
            origin_obj: w[3],
            child_dir_zapobj: w[4],
            used_bytes: w[5],
            compressed_bytes: w[6],
            uncompressed_bytes: w[7],
            quota: w[8],
            reserved: w[9],
            props_zapobj: w[10],
            deleg_zapobj: w[11],
            flags: w[12],
            used_breakdown: [w[13], w[14], w[15], w[16], w[17]],
            clones: w[18],
        })
    }
}

#[derive(Clone, Debug)]
pub struct DslDatasetPhys {
    pub dir_obj: u64,
    pub prev_snap_obj: u64,
    pub prev_snap_txg: u64,
    pub next_snap_obj: u64,
    pub snapnames_zapobj: u64,
    pub num_children: u64,
    pub creation_time: u64,
    pub creation_txg: u64,
    pub deadlist_obj: u64,
    pub referenced_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub unique_bytes: u64,
    pub fsid_guid: u64,
    pub guid: u64,
    pub flags: u64,
    pub bp: BlockPointer,
    pub next_clones_obj: u64,
    pub props_obj: u64,
    pub userrefs_obj: u64,
}

impl DslDatasetPhys {
    pub fn decode(bonus: &[u8], le: bool) -> Result<DslDatasetPhys> {
        let w: [u64; 16] = words(bonus, le, "DSL dataset")?;
        let bp = BlockPointer::decode(bonus.get(128..).unwrap_or(&[]), le)?;
        let tail: [u64; 3] = words(bonus.get(256..).unwrap_or(&[]), le, "DSL dataset")?;
        Ok(DslDatasetPhys {
            dir_obj: w[0],
            prev_snap_obj: w[1],
            prev_snap_txg: w[2],
            next_snap_obj: w[3],
            snapnames_zapobj: w[4],
            num_children: w[5],
            creation_time: w[6],
            creation_txg: w[7],
            deadlist_obj: w[8],
            referenced_bytes: w[9],
            compressed_bytes: w[10],
            uncompressed_bytes: w[11],
            unique_bytes: w[12],
            fsid_guid: w[13],
            guid: w[14],
            flags: w[15],
            bp,
            next_clones_obj: tail[0],
            props_obj: tail[1],
            userrefs_obj: tail[2],
        })
    }
}


fn put_words(out: &mut [u8], w: &[u64]) {
    for (i, x) in w.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
}

impl DslDirPhys {
    /// The 256-byte bonus, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 256];
        let u = &self.used_breakdown;
        put_words(&mut b, &[
            self.creation_time, self.head_dataset_obj, self.parent_dir_obj, self.origin_obj, self.child_dir_zapobj,
            self.used_bytes, self.compressed_bytes, self.uncompressed_bytes, self.quota, self.reserved,
            self.props_zapobj, self.deleg_zapobj, self.flags, u[0], u[1], u[2], u[3], u[4], self.clones,
        ]);
        b
    }
}

impl DslDatasetPhys {
    /// The 320-byte bonus, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 320];
        put_words(&mut b, &[
            self.dir_obj, self.prev_snap_obj, self.prev_snap_txg, self.next_snap_obj, self.snapnames_zapobj,
            self.num_children, self.creation_time, self.creation_txg, self.deadlist_obj, self.referenced_bytes,
            self.compressed_bytes, self.uncompressed_bytes, self.unique_bytes, self.fsid_guid, self.guid, self.flags,
        ]);
        b[128..256].copy_from_slice(&self.bp.encode(true));
        put_words(&mut b[256..], &[self.next_clones_obj, self.props_obj, self.userrefs_obj]);
        b
    }
}

/// bpobj_phys_t: the bonus of a bpobj (a list of block pointers being freed or kept dead).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BpobjPhys {
    pub num_blkptrs: u64,
    pub bytes: u64,
    pub comp: u64,
    pub uncomp: u64,
    pub subobjs: u64,
    pub num_subobjs: u64,
    pub num_freed: u64,
}

/// Bonus sizes of the three bpobj generations.
pub const BPOBJ_SIZE_V0: usize = 16;
pub const BPOBJ_SIZE_V1: usize = 40;
pub const BPOBJ_SIZE_V2: usize = 56;

impl BpobjPhys {
    pub fn decode(bonus: &[u8], le: bool) -> Result<BpobjPhys> {
        let g = |i: usize| -> Result<u64> {
            if bonus.len() >= (i + 1) * 8 { u64_at(bonus, i * 8, le, "bpobj") } else { Ok(0) }
        };
        if bonus.len() < BPOBJ_SIZE_V0 {
            return Err(crate::FormatError::invalid("bpobj", format!("bonus of {} bytes", bonus.len())));
        }
        Ok(BpobjPhys { num_blkptrs: g(0)?, bytes: g(1)?, comp: g(2)?, uncomp: g(3)?, subobjs: g(4)?, num_subobjs: g(5)?, num_freed: g(6)? })
    }
    pub fn encode(&self, size: usize) -> Vec<u8> {
        let mut b = vec![0u8; BPOBJ_SIZE_V2];
        put_words(&mut b, &[self.num_blkptrs, self.bytes, self.comp, self.uncomp, self.subobjs, self.num_subobjs, self.num_freed]);
        b.truncate(size);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MOS dnodes 0..31 of the `basic` fixture pool.
    const MOS0: &[u8] = include_bytes!("../tests/data/fx-dnode-basic-mos0.bin");
    const T46: u64 = 1795334386;

    fn bonus(obj: usize) -> (u8, Vec<u8>) {
        let d = crate::dnode::DnodePhys::decode(&MOS0[obj * 512..], true).unwrap();
        (d.bonustype, d.bonus)
    }

    #[test]
    fn fixture_dsl_dir_matches_zdb() {
        let (bt, b) = bonus(2);
        assert_eq!((bt, b.len()), (crate::types::DMU_OT_DSL_DIR, 256));
        let d = DslDirPhys::decode(&b, true).unwrap();
        // zdb -dddddd tank-basic 2
        assert_eq!((d.creation_time, d.head_dataset_obj, d.parent_dir_obj, d.origin_obj, d.child_dir_zapobj), (T46, 16, 0, 14, 4));
        assert_eq!((d.quota, d.reserved, d.props_zapobj, d.deleg_zapobj, d.flags, d.clones), (0, 0, 3, 0, DD_FLAG_USED_BREAKDOWN, 0));
        // used 7.35M = HEAD 7.12M + SNAP 108K + CHILD 128K
        assert_eq!((d.used_breakdown[DD_USED_SNAP] as f64 / 1024.0).round(), 108.0); // nicenum rounds
        assert_eq!((d.used_breakdown[DD_USED_CHILD] as f64 / 1024.0).round(), 128.0);
        assert_eq!((d.used_breakdown[DD_USED_CHILD_RSRV], d.used_breakdown[DD_USED_REFRSRV]), (0, 0));
        assert_eq!(d.used_breakdown.iter().sum::<u64>(), d.used_bytes);
        assert_eq!((d.used_bytes as f64 / 1048576.0 * 100.0).round(), 735.0);
        assert!(DslDirPhys::decode(&b[..100], true).is_err());
        assert_eq!(d.encode(), b);
    }

    #[test]
    fn fixture_dsl_datasets_match_zdb() {
        let (bt, b) = bonus(16);
        assert_eq!((bt, b.len()), (crate::types::DMU_OT_DSL_DATASET, 320));
        let ds = DslDatasetPhys::decode(&b, true).unwrap();
        assert_eq!((ds.dir_obj, ds.prev_snap_obj, ds.prev_snap_txg, ds.next_snap_obj, ds.snapnames_zapobj), (2, 55, 31, 0, 17));
        assert_eq!((ds.num_children, ds.userrefs_obj, ds.creation_time, ds.creation_txg, ds.deadlist_obj), (0, 0, T46, 1, 56));
        assert_eq!((ds.fsid_guid, ds.guid, ds.flags), (27442732333247172, 15208006873311644525, DS_FLAG_UNIQUE_ACCURATE));
        assert_eq!((ds.next_clones_obj, ds.props_obj), (0, 0));
        assert_eq!((ds.unique_bytes as f64 / 1024.0).round(), 548.0);
        assert_eq!(
            ds.bp.to_string(),
            "DVA[0]=<0:8d5a00:200> DVA[1]=<0:1404a00:200> [L0 DMU objset] fletcher4 lzjb unencrypted LE contiguous unique \
             double size=800L/200P birth=33L/33P fill=82 cksum=00000013d2021e2e:00000663c1abf534:00011e09fa2c3450:0023d6b849211b3d"
        );
        // $ORIGIN's head dataset: never written, a hole.
        let ds = DslDatasetPhys::decode(&bonus(14).1, true).unwrap();
        assert_eq!((ds.dir_obj, ds.next_snap_obj, ds.num_children, ds.deadlist_obj, ds.next_clones_obj), (8, 11, 2, 13, 19));
        assert_eq!((ds.fsid_guid, ds.guid), (46734484078348182, 7019893940177528737));
        assert_eq!(ds.bp.to_string(), "HOLE [L0 unallocated] size=200L birth=0L");
        assert!(DslDatasetPhys::decode(&bonus(16).1[..270], true).is_err());
        assert_eq!(DslDatasetPhys::decode(&bonus(16).1, true).unwrap().encode(), bonus(16).1);
    }
}

/// The scan functions (pool_scan_func_t).
pub const POOL_SCAN_NONE: u64 = 0;
pub const POOL_SCAN_SCRUB: u64 = 1;
pub const POOL_SCAN_RESILVER: u64 = 2;
/// The scan states (dsl_scan_state_t).
pub const DSS_NONE: u64 = 0;
pub const DSS_SCANNING: u64 = 1;
pub const DSS_FINISHED: u64 = 2;
pub const DSS_CANCELED: u64 = 3;
/// dsl_scan_flags_t: a scrub paused by `zpool scrub -p`.
pub const DSF_SCRUB_PAUSED: u64 = 1 << 1;
/// The DDT classes a scrub walks before the datasets (zfs_scrub_ddt_class_max's default,
/// DDT_CLASS_DUPLICATE).
pub const DDT_CLASS_DUPLICATE: u64 = 1;
/// Words of a `dsl_scan_phys_t` (SCAN_PHYS_NUMINTS).
pub const SCAN_PHYS_NUMINTS: usize = 24;

/// `dsl_scan_phys_t`: a scrub's or resilver's state, the value (24 uint64s) of the `scan` entry
/// of the pool directory. Bookmarks are zbookmark_phys_t (objset, object, level, blkid) and
/// ddt_bookmark_t (class, type, checksum, cursor).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DslScanPhys {
    pub func: u64,
    pub state: u64,
    pub queue_obj: u64,
    pub min_txg: u64,
    pub max_txg: u64,
    pub cur_min_txg: u64,
    pub cur_max_txg: u64,
    pub start_time: u64,
    pub end_time: u64,
    pub to_examine: u64,
    pub examined: u64,
    pub skipped: u64,
    pub processed: u64,
    pub errors: u64,
    pub ddt_class_max: u64,
    pub ddt_bookmark: [u64; 4],
    pub bookmark: [u64; 4],
    pub flags: u64,
}

impl DslScanPhys {
    /// From the entry's words; anything but 24 of them is refused (OpenZFS's zap_lookup says
    /// EOVERFLOW or EINVAL).
    pub fn from_words(w: &[u64]) -> Result<DslScanPhys> {
        if w.len() != SCAN_PHYS_NUMINTS {
            return Err(crate::FormatError::Invalid { what: "dsl_scan_phys", detail: format!("scan entry of {} words, want {SCAN_PHYS_NUMINTS}", w.len()) });
        }
        let four = |i: usize| [w[i], w[i + 1], w[i + 2], w[i + 3]];
        Ok(DslScanPhys {
            func: w[0],
            state: w[1],
            queue_obj: w[2],
            min_txg: w[3],
            max_txg: w[4],
            cur_min_txg: w[5],
            cur_max_txg: w[6],
            start_time: w[7],
            end_time: w[8],
            to_examine: w[9],
            examined: w[10],
            skipped: w[11],
            processed: w[12],
            errors: w[13],
            ddt_class_max: w[14],
            ddt_bookmark: four(15),
            bookmark: four(19),
            flags: w[23],
        })
    }

    pub fn words(&self) -> Vec<u64> {
        let mut w = vec![
            self.func,
            self.state,
            self.queue_obj,
            self.min_txg,
            self.max_txg,
            self.cur_min_txg,
            self.cur_max_txg,
            self.start_time,
            self.end_time,
            self.to_examine,
            self.examined,
            self.skipped,
            self.processed,
            self.errors,
            self.ddt_class_max,
        ];
        w.extend_from_slice(&self.ddt_bookmark);
        w.extend_from_slice(&self.bookmark);
        w.push(self.flags);
        assert_eq!(w.len(), SCAN_PHYS_NUMINTS);
        w
    }

    pub fn is_scanning(&self) -> bool {
        self.state == DSS_SCANNING
    }

    pub fn is_paused(&self) -> bool {
        self.is_scanning() && self.flags & DSF_SCRUB_PAUSED != 0
    }
}

#[cfg(test)]
mod scan_tests {
    use super::*;

    #[test]
    fn scan_phys_words_round_trip_in_openzfs_order() {
        let w: Vec<u64> = (100..124).collect();
        let p = DslScanPhys::from_words(&w).unwrap();
        assert_eq!((p.func, p.state, p.queue_obj, p.to_examine, p.errors, p.flags), (100, 101, 102, 109, 113, 123));
        assert_eq!(p.ddt_bookmark, [115, 116, 117, 118]);
        assert_eq!(p.bookmark, [119, 120, 121, 122]);
        assert_eq!(p.words(), w);
        assert!(DslScanPhys::from_words(&w[..23]).is_err());
        assert!(DslScanPhys::from_words(&[w.clone(), vec![0]].concat()).is_err());
    }
}
