//! dsl: the dataset tree of a pool — filesystems, volumes and snapshots, their names, space
//! and properties — read from the MOS.
//!
//! ```text
//!  MOS object directory "root_dataset" → dsl_dir (the pool's own name)
//!    dsl_dir.child_dir_zapobj: child name → dsl_dir   (names starting with '$' are internal)
//!    dsl_dir.head_dataset_obj → dsl_dataset (the live filesystem or volume)
//!      dataset.snapnames_zapobj: snapshot name → dsl_dataset
//!    dsl_dir.props_zapobj: property name → value (u64, or a string), set locally here
//! ```
//! A property's value is the nearest local setting walking up the dsl_dir chain (source
//! "local" or "inherited from NAME"), else OpenZFS's default.

use crate::dmu::Objset;
use crate::spa::Spa;
use crate::nicenum::nicenum;
use crate::vdev::deflate_ratio;
#[cfg(test)]
use crate::vdev::raidz_asize;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::{DslDatasetPhys, DslDirPhys, DD_FLAG_USED_BREAKDOWN, DD_USED_CHILD, DD_USED_CHILD_RSRV, DD_USED_HEAD, DD_USED_REFRSRV, DD_USED_SNAP};
use oxzfs_format::objset::DMU_OST_ZVOL;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatasetKind {
    Filesystem,
    Volume,
    Snapshot,
}

impl DatasetKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            DatasetKind::Filesystem => "filesystem",
            DatasetKind::Volume => "volume",
            DatasetKind::Snapshot => "snapshot",
        }
    }
}

#[derive(Clone, Debug)]
pub struct DatasetInfo {
    pub name: String,
    pub kind: DatasetKind,
    pub dir_obj: u64,
    pub ds_obj: u64,
    pub dir: DslDirPhys,
    pub ds: DslDatasetPhys,
    pub objset_type: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PropValue {
    pub name: String,
    pub value: String,
    pub raw: String,
    pub source: String,
}

fn bonus_of(mos: &Objset, obj: u64) -> Result<(Vec<u8>, bool)> {
    let (dn, le) = mos.dnode_with_order(obj)?;
    Ok((dn.bonus, le))
}

/// The DSL directory object `obj` of the MOS.
pub fn dir_phys_of(mos: &Objset, obj: u64) -> Result<DslDirPhys> {
    dir_phys(mos, obj)
}

fn dir_phys(mos: &Objset, obj: u64) -> Result<DslDirPhys> {
    let (b, le) = bonus_of(mos, obj)?;
    DslDirPhys::decode(&b, le).map_err(|e| ZfsError::corrupt(format!("DSL directory {obj}"), e))
}

fn ds_phys(mos: &Objset, obj: u64) -> Result<DslDatasetPhys> {
    let (b, le) = bonus_of(mos, obj)?;
    DslDatasetPhys::decode(&b, le).map_err(|e| ZfsError::corrupt(format!("DSL dataset {obj}"), e))
}

/// Every dataset and snapshot, in `zfs list -t all` order (see `sort_like_zfs_list`).
pub fn list_datasets(spa: &Arc<Spa>) -> Result<Vec<DatasetInfo>> {
    let mos = spa.mos();
    let root_dir = crate::zap::zap_lookup_u64(&mos, 1, "root_dataset")?
        .ok_or_else(|| ZfsError::Invalid(format!("pool '{}': no root_dataset in the MOS", spa.name)))?;
    let mut out = Vec::new();
    let mut stack = vec![(spa.name.clone(), root_dir, 0usize)];
    while let Some((name, dir_obj, depth)) = stack.pop() {
        if depth > 64 || out.len() > 1_000_000 {
            return Err(ZfsError::Invalid(format!("pool '{}': dataset tree too deep or too large", spa.name)));
        }
        let dir = dir_phys(&mos, dir_obj)?;
        if dir.head_dataset_obj != 0 {
            let ds = ds_phys(&mos, dir.head_dataset_obj)?;
            let objset_type = if ds.bp.is_hole() {
                0
            } else {
                Objset::open(spa, &ds.bp).map(|o| o.phys.typ).unwrap_or(0)
            };
            let kind = if objset_type == DMU_OST_ZVOL { DatasetKind::Volume } else { DatasetKind::Filesystem };
            let snapnames = ds.snapnames_zapobj;
            out.push(DatasetInfo { name: name.clone(), kind, dir_obj, ds_obj: dir.head_dataset_obj, dir: dir.clone(), ds, objset_type });
            if snapnames != 0 {
                let mut snaps = Vec::new();
                for (sname, sobj) in crate::zap::zap_list_u64(&mos, snapnames)? {
                    let sds = ds_phys(&mos, sobj)?;
                    snaps.push(DatasetInfo {
                        name: format!("{name}@{sname}"),
                        kind: DatasetKind::Snapshot,
                        dir_obj,
                        ds_obj: sobj,
                        dir: dir.clone(),
                        ds: sds,
                        objset_type,
                    });
                }
                out.extend(snaps);
            }
        }
        if dir.child_dir_zapobj != 0 {
            let mut kids: Vec<(String, u64)> = crate::zap::zap_list_u64(&mos, dir.child_dir_zapobj)?
                .into_iter()
                .filter(|(n, _)| !n.starts_with('$'))
                .collect();
            kids.sort();
            for (cname, cobj) in kids.into_iter().rev() {
                stack.push((format!("{name}/{cname}"), cobj, depth + 1));
            }
        }
    }
    sort_like_zfs_list(&mut out);
    Ok(out)
}

/// `zfs list`'s default order (zfs_iter.c's comparison): the names up to '@' compared byte
/// by byte (so "tank/a-b" sorts before "tank/a/b"), a dataset before its own snapshots, and
/// snapshots of one dataset by creation txg.
pub fn sort_like_zfs_list(list: &mut [DatasetInfo]) {
    list.sort_by(|l, r| zfs_list_order((&l.name, l.ds.creation_txg), (&r.name, r.ds.creation_txg)));
}

/// The comparison behind `sort_like_zfs_list`, on (name, creation txg).
pub fn zfs_list_order(l: (&str, u64), r: (&str, u64)) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    let (lb, ls) = l.0.split_once('@').map_or((l.0, None), |(b, s)| (b, Some(s)));
    let (rb, rs) = r.0.split_once('@').map_or((r.0, None), |(b, s)| (b, Some(s)));
    lb.as_bytes().cmp(rb.as_bytes()).then_with(|| match (ls, rs) {
        (None, None) => Equal,
        (None, Some(_)) => Less,
        (Some(_), None) => Greater,
        (Some(a), Some(b)) => l.1.cmp(&r.1).then_with(|| a.cmp(b)),
    })
}

pub fn find_dataset(spa: &Arc<Spa>, name: &str) -> Result<DatasetInfo> {
    list_datasets(spa)?
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| ZfsError::NotFound(format!("cannot open '{name}': dataset does not exist")))
}

/// Raw property value stored in a props ZAP.
#[derive(Clone, Debug)]
enum Stored {
    Num(u64),
    Str(String),
}

fn local_props(mos: &Objset, props_obj: u64) -> BTreeMap<String, Stored> {
    let mut m = BTreeMap::new();
    if props_obj == 0 {
        return m;
    }
    if let Ok(ents) = crate::zap::zap_list(mos, props_obj) {
        for e in ents {
            let name = e.name_str();
            if name.contains('$') {
                continue;
            }
            let v = if e.int_size == 1 {
                let s = e.value.split(|&c| c == 0).next().unwrap_or(&[]);
                Stored::Str(String::from_utf8_lossy(s).into_owned())
            } else {
                match e.value_u64() {
                    Some(v) => Stored::Num(v),
                    None => continue,
                }
            };
            m.insert(name, v);
        }
    }
    m
}

fn onoff(v: u64) -> String {
    if v != 0 { "on" } else { "off" }.into()
}

/// Display form of an index property's number.
fn index_name(prop: &str, v: u64) -> String {
    use oxzfs_format::{checksum, compress};
    match prop {
        "compression" => {
            // The table's first name for a value wins: gzip-6 is shown as "gzip"; zstd keeps
            // its level above the low 7 bits (default 3 shown as "zstd").
            let alg = (v & 0x7f) as u8;
            let level = v >> 7;
            match alg {
                compress::ZIO_COMPRESS_ZSTD => match level {
                    0 => "zstd".into(),
                    103 => "zstd-fast".into(),
                    l => compress::zstd_level_name(l as u8).unwrap_or_else(|| format!("zstd-{l}")),
                },
                a if a == compress::ZIO_COMPRESS_GZIP_1 + 5 => "gzip".into(),
                a => compress::compress_name(a).into(),
            }
        }
        "checksum" => checksum::checksum_name(v as u8).into(),
        // The dedup table's names: the function, ",verify" with ZIO_CHECKSUM_VERIFY.
        "dedup" => match ((v & 0xff) as u8, v & oxzfs_format::checksum::ZIO_CHECKSUM_VERIFY != 0) {
            (checksum::ZIO_CHECKSUM_INHERIT | checksum::ZIO_CHECKSUM_OFF, _) => "off".into(),
            (checksum::ZIO_CHECKSUM_ON, false) => "on".into(),
            (checksum::ZIO_CHECKSUM_ON, true) => "verify".into(),
            (c, false) => checksum::checksum_name(c).into(),
            (c, true) => format!("{},verify", checksum::checksum_name(c)),
        },
        "canmount" => ["off", "on", "noauto"].get(v as usize).unwrap_or(&"on").to_string(),
        "snapdir" => ["hidden", "visible"].get(v as usize).unwrap_or(&"hidden").to_string(),
        "xattr" => ["off", "on", "sa"].get(v as usize).unwrap_or(&"on").to_string(),
        "logbias" => ["latency", "throughput"].get(v as usize).unwrap_or(&"latency").to_string(),
        "sync" => ["standard", "always", "disabled"].get(v as usize).unwrap_or(&"standard").to_string(),
        "primarycache" | "secondarycache" => ["none", "metadata", "all"].get(v as usize).unwrap_or(&"all").to_string(),
        "redundant_metadata" => ["all", "most"].get(v as usize).unwrap_or(&"all").to_string(),
        // ZFS_ACL_DISCARD 0, NOALLOW 1, GROUPMASK 2, PASSTHROUGH 3, RESTRICTED 4,
        // PASSTHROUGH_X 5 (zfs_acl.h): aclinherit takes all but groupmask, aclmode four.
        "aclinherit" => ["discard", "noallow", "-", "passthrough", "restricted", "passthrough-x"].get(v as usize).filter(|s| **s != "-").unwrap_or(&"restricted").to_string(),
        "aclmode" => ["discard", "-", "groupmask", "passthrough", "restricted"].get(v as usize).filter(|s| **s != "-").unwrap_or(&"discard").to_string(),
        // ZFS_ACLTYPE_OFF, ZFS_ACLTYPE_POSIX, ZFS_ACLTYPE_NFSV4 (zfs_ioctl.h).
        "acltype" => ["off", "posix", "nfsv4"].get(v as usize).unwrap_or(&"off").to_string(),
        "dnodesize" => match v {
            0 => "legacy".into(),
            1 => "auto".into(),
            1024 => "1k".into(),
            2048 => "2k".into(),
            4096 => "4k".into(),
            8192 => "8k".into(),
            16384 => "16k".into(),
            _ => v.to_string(),
        },
        "volmode" => ["default", "full", "geom", "dev", "none"].get(v as usize).unwrap_or(&"default").to_string(),
        "casesensitivity" => ["sensitive", "insensitive", "mixed"].get(v as usize).unwrap_or(&"sensitive").to_string(),
        "normalization" => {
            use oxzfs_format::zap::{U8_TEXTPREP_NFC, U8_TEXTPREP_NFD, U8_TEXTPREP_NFKC, U8_TEXTPREP_NFKD};
            match v {
                U8_TEXTPREP_NFC => "formC",
                U8_TEXTPREP_NFD => "formD",
                U8_TEXTPREP_NFKC => "formKC",
                U8_TEXTPREP_NFKD => "formKD",
                _ => "none",
            }
            .to_string()
        }
        _ => onoff(v),
    }
}

/// A property's value as `zfs set` takes it, from its stored number (a replication package
/// carries numbers and index values as uint64).
pub fn stored_value_string(prop: &str, v: u64) -> String {
    match prop {
        "quota" | "refquota" | "reservation" | "refreservation" | "recordsize" | "volsize" | "special_small_blocks" | "filesystem_limit"
        | "snapshot_limit" | "copies" | "volblocksize" => v.to_string(),
        _ => index_name(prop, v),
    }
}

/// The properties set on a dataset itself (its props ZAP `props_obj`: local values), flat:
/// numbers and index values as uint64, strings and user properties as strings — what a
/// replication package's `props` holds. Properties fixed at creation are left out.
pub fn local_props_nv(mos: &Objset, props_obj: u64) -> oxzfs_format::nvlist::NvList {
    use oxzfs_format::nvlist::{NvList, NvValue};
    let mut nv = NvList::new();
    for (k, v) in local_props(mos, props_obj) {
        if matches!(k.as_str(), "casesensitivity" | "normalization" | "utf8only" | "encryption" | "keyformat" | "pbkdf2iters" | "pbkdf2salt" | "volblocksize") {
            continue;
        }
        nv.insert(&k, match v {
            Stored::Num(n) => NvValue::Uint64(n),
            Stored::Str(s) => NvValue::String(s),
        });
    }
    nv
}

/// Largest recordsize a pool with large_blocks accepts (SPA_MAXBLOCKSIZE).
pub const MAX_RECORDSIZE: u64 = 16 << 20;

/// The stored compression value of zstd at `zio_zstd_levels` value `level`.
fn zstd_prop(level: u8) -> u64 {
    oxzfs_format::compress::ZIO_COMPRESS_ZSTD as u64 | (level as u64) << 7
}

/// How a property value is stored in a DSL props ZAP (the inverse of what `zfs get` shows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PropStore {
    Num(u64),
    Str(String),
}

/// The dedup property's values as zfs_prop.c registers them (OpenZFS 2.1, Linux).
pub const DEDUP_VALUES: &str = "on | off | verify | sha256[,verify] | sha512[,verify] | skein[,verify] | edonr,verify";

/// Properties `zfs set`/`zfs inherit` accept (besides user properties, which contain ':').
pub const SETTABLE: &[&str] = &[
    "mountpoint", "compression", "checksum", "atime", "relatime", "readonly", "setuid", "exec", "devices", "nbmand", "overlay",
    "vscan", "zoned", "jailed", "canmount", "snapdir", "xattr", "logbias", "sync", "primarycache", "secondarycache",
    "redundant_metadata", "acltype", "copies", "recordsize", "quota", "refquota", "reservation", "refreservation",
    "special_small_blocks", "dedup", "keylocation",
];

/// Parse `zfs set`/`-O` input for a property into its stored form, with OpenZFS's messages.
pub fn encode_prop(prop: &str, value: &str) -> Result<PropStore> {
    use oxzfs_format::{checksum, compress};
    let bad = || ZfsError::Invalid(format!("bad property value '{value}' for '{prop}'"));
    let pick = |names: &[&str]| names.iter().position(|n| *n == value).map(|i| PropStore::Num(i as u64)).ok_or_else(bad);
    let size = |v: &str| -> Option<u64> {
        let v = v.trim();
        let (num, mult) = match v.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
            Some((i, _)) => {
                let suf = v[i..].to_ascii_uppercase();
                let m = match suf.trim_end_matches('B') {
                    "" => 1u64,
                    "K" => 1 << 10,
                    "M" => 1 << 20,
                    "G" => 1 << 30,
                    "T" => 1 << 40,
                    _ => return None,
                };
                (&v[..i], m)
            }
            None => (v, 1),
        };
        num.parse::<u64>().ok().map(|n| n * mult)
    };
    Ok(match prop {
        // zfs_prop_valid_keylocation: prompt, or a file:// URI with a path.
        "keylocation" => {
            if value != "prompt" && !(value.starts_with("file:///") && value.len() > 8) && !value.starts_with("https://") && !value.starts_with("http://") {
                return Err(ZfsError::Invalid(format!("invalid keylocation '{value}'")));
            }
            PropStore::Str(value.to_string())
        }
        "mountpoint" => {
            if value != "none" && value != "legacy" && !value.starts_with('/') {
                return Err(ZfsError::Invalid(format!("bad mount point '{value}': must be an absolute path, 'none', or 'legacy'")));
            }
            PropStore::Str(value.to_string())
        }
        "compression" => match value {
            "on" => PropStore::Num(compress::ZIO_COMPRESS_ON as u64),
            "off" => PropStore::Num(compress::ZIO_COMPRESS_OFF as u64),
            "lzjb" => PropStore::Num(compress::ZIO_COMPRESS_LZJB as u64),
            "gzip" => PropStore::Num(compress::ZIO_COMPRESS_GZIP_6 as u64),
            "zle" => PropStore::Num(compress::ZIO_COMPRESS_ZLE as u64),
            "lz4" => PropStore::Num(compress::ZIO_COMPRESS_LZ4 as u64),
            v if v.starts_with("gzip-") => match v[5..].parse::<u8>() {
                Ok(l @ 1..=9) => PropStore::Num((compress::ZIO_COMPRESS_GZIP_1 + l - 1) as u64),
                _ => return Err(bad()),
            },
            // zstd keeps its zio_zstd_levels value above the 7 bits of the function
            // (ZIO_COMPLEVEL_ZSTD); plain "zstd" is the default level (0).
            "zstd" => PropStore::Num(compress::ZIO_COMPRESS_ZSTD as u64),
            "zstd-fast" => PropStore::Num(zstd_prop(compress::zstd::ZIO_ZSTD_LEVEL_FAST_1)),
            v => match (1..=compress::zstd::ZIO_ZSTD_LEVEL_FAST_1000).find(|&l| compress::zstd_level_name(l).as_deref() == Some(v)) {
                Some(l) => PropStore::Num(zstd_prop(l)),
                None => return Err(bad()),
            },
        },
        "checksum" => match value {
            "on" => PropStore::Num(checksum::ZIO_CHECKSUM_ON as u64),
            "off" => PropStore::Num(checksum::ZIO_CHECKSUM_OFF as u64),
            "fletcher2" => PropStore::Num(checksum::ZIO_CHECKSUM_FLETCHER_2 as u64),
            "fletcher4" => PropStore::Num(checksum::ZIO_CHECKSUM_FLETCHER_4 as u64),
            "sha256" => PropStore::Num(checksum::ZIO_CHECKSUM_SHA256 as u64),
            "sha512" => PropStore::Num(checksum::ZIO_CHECKSUM_SHA512 as u64),
            "skein" => PropStore::Num(checksum::ZIO_CHECKSUM_SKEIN as u64),
            "edonr" => PropStore::Num(checksum::ZIO_CHECKSUM_EDONR as u64),
            "blake3" => PropStore::Num(checksum::ZIO_CHECKSUM_BLAKE3 as u64),
            _ => return Err(bad()),
        },
        // zfs_prop.c's dedup_table (blake3 as OpenZFS 2.2 adds it; its feature is checked
        // where the pool is known).
        "dedup" => {
            let verify = oxzfs_format::checksum::ZIO_CHECKSUM_VERIFY;
            let f = |c: u8| c as u64;
            PropStore::Num(match value {
                "on" => f(checksum::ZIO_CHECKSUM_ON),
                "off" => f(checksum::ZIO_CHECKSUM_OFF),
                "verify" => f(checksum::ZIO_CHECKSUM_ON) | verify,
                "sha256" => f(checksum::ZIO_CHECKSUM_SHA256),
                "sha256,verify" => f(checksum::ZIO_CHECKSUM_SHA256) | verify,
                "sha512" => f(checksum::ZIO_CHECKSUM_SHA512),
                "sha512,verify" => f(checksum::ZIO_CHECKSUM_SHA512) | verify,
                "skein" => f(checksum::ZIO_CHECKSUM_SKEIN),
                "skein,verify" => f(checksum::ZIO_CHECKSUM_SKEIN) | verify,
                "edonr,verify" => f(checksum::ZIO_CHECKSUM_EDONR) | verify,
                "blake3" => f(checksum::ZIO_CHECKSUM_BLAKE3),
                "blake3,verify" => f(checksum::ZIO_CHECKSUM_BLAKE3) | verify,
                // zprop_parse_value's words for an index value it does not know.
                _ => return Err(ZfsError::Invalid(format!("'dedup' must be one of '{DEDUP_VALUES}'"))),
            })
        }
        "atime" | "relatime" | "readonly" | "setuid" | "exec" | "devices" | "nbmand" | "overlay" | "utf8only" | "vscan" | "zoned" | "jailed" => {
            pick(&["off", "on"])?
        }
        "canmount" => pick(&["off", "on", "noauto"])?,
        "snapdir" => pick(&["hidden", "visible"])?,
        "xattr" => pick(&["off", "on", "sa"])?,
        "dnodesize" => match value {
            "legacy" => PropStore::Num(0),
            "auto" => PropStore::Num(1),
            "1k" | "1K" => PropStore::Num(1024),
            "2k" | "2K" => PropStore::Num(2048),
            "4k" | "4K" => PropStore::Num(4096),
            "8k" | "8K" => PropStore::Num(8192),
            "16k" | "16K" => PropStore::Num(16384),
            _ => return Err(bad()),
        },
        "logbias" => pick(&["latency", "throughput"])?,
        "sync" => pick(&["standard", "always", "disabled"])?,
        "primarycache" | "secondarycache" => pick(&["none", "metadata", "all"])?,
        "redundant_metadata" => pick(&["all", "most"])?,
        "acltype" => match value {
            "off" | "noacl" => PropStore::Num(0),
            "posix" | "posixacl" => PropStore::Num(1),
            "nfsv4" => PropStore::Num(2),
            _ => return Err(bad()),
        },
        "copies" => match value {
            "1" | "2" | "3" => PropStore::Num(value.parse().expect("digit")),
            _ => return Err(bad()),
        },
        // Up to SPA_MAXBLOCKSIZE here; the pool narrows it (large_blocks, zfs_max_recordsize).
        "recordsize" => match size(value) {
            Some(n) if n.is_power_of_two() && (512..=MAX_RECORDSIZE).contains(&n) => PropStore::Num(n),
            _ => return Err(ZfsError::Invalid("'recordsize' must be power of 2 from 512B to 16M".into())),
        },
        "quota" | "refquota" | "reservation" | "refreservation" => match value {
            "none" => PropStore::Num(0),
            v => PropStore::Num(size(v).ok_or_else(bad)?),
        },
        // libzfs's check, with the pool's maxblocksize of a large_blocks pool (SPA_MAXBLOCKSIZE).
        "special_small_blocks" => match size(value).ok_or_else(bad)? {
            n if n == 0 || (n.is_power_of_two() && (512..=MAX_RECORDSIZE).contains(&n)) => PropStore::Num(n),
            n => return Err(ZfsError::Invalid(format!("invalid 'special_small_blocks={n}' property: must be zero or a power of 2 from 512B to 16M"))),
        },
        _ if prop.contains(':') => PropStore::Str(value.to_string()),
        _ => return Err(ZfsError::Invalid(format!("invalid property '{prop}'"))),
    })
}

/// zfs_nicebytes: "0B", "512B", "1.50K", "14.9M".
pub fn nicebytes(n: u64) -> String {
    if n < 1024 {
        format!("{n}B")
    } else {
        nicenum(n)
    }
}

fn ratio(u: u64, c: u64) -> String {
    if c == 0 {
        "1.00x".into()
    } else {
        // Hundredths, truncated, as OpenZFS stores and prints the ratio.
        let r = (u as u128 * 100 / c as u128) as u64;
        format!("{}.{:02}x", r / 100, r % 100)
    }
}

/// Pool-wide numbers the dataset properties need, computed as OpenZFS 2.1 does:
///
/// * `dspace` (spa_get_dspace): the deflated size of every metaslab of the normal class
///   (`ms_count << ms_shift` per top-level vdev, raidz parity taken out with the vdev's
///   deflate ratio), less the metaslab a vdev with more than 64 metaslabs sets aside for
///   the embedded log, plus the space dedup saves (`dedup_dspace`).
/// * `slop` (spa_get_slop_space): 1/32 of `dspace - dedup_dspace`, at most 128 GiB, less
///   the embedded log (by no more than half), and at least min(128 MiB, half the pool).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolSpace {
    pub dspace: u64,
    pub slop: u64,
    /// Bytes referenced through the dedup table beyond those allocated (ref_dsize - dsize).
    pub dedup_dspace: u64,
    /// Deflated size of the metaslabs set aside for the embedded log class.
    pub embedded_log: u64,
}

/// The pool's dedup table totals: (dsize, ref_dsize), summed over every DDT histogram in
/// the MOS "DDT-statistics" ZAP (64 buckets of ddt_stat_t: blocks, lsize, psize, dsize,
/// ref_blocks, ref_lsize, ref_psize, ref_dsize).
pub fn dedup_totals(spa: &Arc<Spa>) -> (u64, u64) {
    let Some(key) = spa.mos_bp().map(|bp| bp.cksum) else { return (0, 0) };
    if let Some((k, v)) = *spa.dedup_totals.lock().unwrap() {
        if k == key {
            return v;
        }
    }
    let v = dedup_totals_of(&spa.mos());
    *spa.dedup_totals.lock().unwrap() = Some((key, v));
    v
}

fn dedup_totals_of(mos: &Arc<crate::dmu::Objset>) -> (u64, u64) {
    let Ok(Some(obj)) = crate::zap::zap_lookup_u64(mos, 1, oxzfs_format::dsl::DMU_POOL_DDT_STATS) else {
        return (0, 0);
    };
    let (mut dsize, mut ref_dsize) = (0u64, 0u64);
    for e in crate::zap::zap_list(mos, obj).unwrap_or_default() {
        if e.int_size != 8 {
            continue;
        }
        for bucket in e.value_u64s().chunks_exact(8) {
            dsize = dsize.saturating_add(bucket[3]);
            ref_dsize = ref_dsize.saturating_add(bucket[7]);
        }
    }
    (dsize, ref_dsize)
}

/// OpenZFS's dedup ratio in hundredths (ddt_get_pool_dedup_ratio): 100 without a DDT.
pub fn dedup_ratio_x100(spa: &Arc<Spa>) -> u64 {
    let (dsize, ref_dsize) = dedup_totals(spa);
    if dsize == 0 {
        100
    } else {
        (ref_dsize as u128 * 100 / dsize as u128) as u64
    }
}

pub fn pool_space(spa: &Arc<Spa>) -> PoolSpace {
    let mut dspace = 0u64;
    let mut embedded_log = 0u64;
    for top in &spa.root_vdev.children {
        if top.is_log || !top.alloc_bias.is_empty() || !top.is_concrete() {
            continue;
        }
        let ratio = deflate_ratio(top);
        let deflate = |bytes: u64| (bytes >> 9).saturating_mul(ratio);
        if top.metaslab_shift == 0 || top.metaslab_shift > 40 {
            // No metaslab geometry in the config: the whole allocatable size.
            dspace += deflate(top.asize);
            continue;
        }
        let ms_count = top.asize >> top.metaslab_shift;
        let ms_size = 1u64 << top.metaslab_shift;
        let mut normal = ms_count;
        if ms_count > 64 {
            normal -= 1;
            embedded_log += deflate(ms_size);
        }
        dspace += deflate(normal * ms_size);
    }
    let (dsize, ref_dsize) = dedup_totals(spa);
    let dedup_dspace = ref_dsize.saturating_sub(dsize);
    dspace += dedup_dspace;
    let slop = slop_space(dspace - dedup_dspace, embedded_log);
    PoolSpace { dspace, slop, dedup_dspace, embedded_log }
}

/// spa_get_slop_space for a pool of `space` usable bytes (without dedup savings).
pub fn slop_space(space: u64, embedded_log: u64) -> u64 {
    let mut slop = (space >> 5).min(128 << 30);
    slop -= embedded_log.min(slop >> 1);
    slop.max((space >> 1).min(128 << 20))
}

/// dsl_dir_space_available, evaluated from the root dir down to the dataset's (`dirs` in
/// that order): each dir gets the lesser of what its parent offers (plus its own unused
/// reservation) and what its quota leaves; the root is capped by the pool's usable size.
pub fn dir_space_available(pool_size: u64, dirs: &[DslDirPhys]) -> u64 {
    dir_space_available_of(pool_size, dirs.iter().map(|d| (d.used_bytes, d.reserved, d.quota)))
}

/// `dir_space_available` over (used, reserved, quota) of each dir, root first.
pub fn dir_space_available_of(pool_size: u64, dirs: impl Iterator<Item = (u64, u64, u64)>) -> u64 {
    let mut parentspace = u64::MAX;
    for (i, (used, reserved, quota)) in dirs.enumerate() {
        let mut quota = if quota != 0 { quota } else { u64::MAX };
        if i == 0 {
            quota = quota.min(pool_size);
        }
        if reserved > used && parentspace != u64::MAX {
            parentspace = parentspace.saturating_add(reserved - used);
        }
        parentspace = if used > quota { 0 } else { parentspace.min(quota - used) };
    }
    parentspace
}

/// `zfs get all` for one dataset, in OpenZFS's order.
pub fn get_props(spa: &Arc<Spa>, ds: &DatasetInfo, altroot: Option<&Path>, mounted: bool) -> Result<Vec<PropValue>> {
    let mos = spa.mos();
    // Collect local props of this dir and its ancestors: (dataset name, props).
    let mut chain: Vec<(String, BTreeMap<String, Stored>)> = Vec::new();
    let mut dirs: Vec<DslDirPhys> = Vec::new();
    let base = ds.name.split('@').next().unwrap_or(&ds.name).to_string();
    {
        let mut dir_obj = ds.dir_obj;
        let mut name = base.clone();
        for _ in 0..64 {
            let dir = dir_phys(&mos, dir_obj)?;
            chain.push((name.clone(), local_props(&mos, dir.props_zapobj)));
            let parent = dir.parent_dir_obj;
            dirs.push(dir);
            if parent == 0 {
                break;
            }
            dir_obj = parent;
            name = match name.rfind('/') {
                Some(i) => name[..i].to_string(),
                None => break,
            };
        }
    }
    dirs.reverse();
    let snapshot = ds.kind == DatasetKind::Snapshot;
    let snap_local = if snapshot { local_props(&mos, ds.ds.props_obj) } else { BTreeMap::new() };
    let find = |prop: &str, inheritable: bool| -> Option<(Stored, String)> {
        if let Some(v) = snap_local.get(prop) {
            return Some((v.clone(), "local".into()));
        }
        for (i, (n, p)) in chain.iter().enumerate() {
            if let Some(v) = p.get(prop) {
                let src = if i == 0 && !snapshot { "local".to_string() } else { format!("inherited from {n}") };
                return Some((v.clone(), src));
            }
            if !inheritable {
                break;
            }
        }
        None
    };
    let mut out = Vec::new();
    let mut push = |name: &str, value: String, raw: String, source: &str| {
        out.push(PropValue { name: name.into(), value, raw, source: source.into() });
    };
    let space = pool_space(spa);
    let mut avail = dir_space_available(space.dspace.saturating_sub(space.slop), &dirs);
    if ds.kind != DatasetKind::Snapshot {
        // dsl_dataset_space: an unused refreservation adds to, a refquota caps, what the
        // dataset may still write.
        let own = chain.first().map(|c| &c.1);
        let get = |p: &str| match own.and_then(|m| m.get(p)) {
            Some(Stored::Num(v)) => *v,
            _ => 0,
        };
        let (refquota, refreserv) = (get("refquota"), get("refreservation"));
        if refreserv > ds.ds.unique_bytes {
            avail = avail.saturating_add(refreserv - ds.ds.unique_bytes);
        }
        if refquota != 0 {
            avail = if refquota <= ds.ds.referenced_bytes { 0 } else { avail.min(refquota - ds.ds.referenced_bytes) };
        }
    }
    let dir = &ds.dir;
    let d = &ds.ds;
    let breakdown = dir.flags & DD_FLAG_USED_BREAKDOWN != 0;
    let (used, u_snap, u_ds, u_child, u_refr) = if snapshot {
        (d.unique_bytes, 0, 0, 0, 0)
    } else if breakdown {
        let b = dir.used_breakdown;
        (dir.used_bytes, b[DD_USED_SNAP], b[DD_USED_HEAD], b[DD_USED_CHILD] + b[DD_USED_CHILD_RSRV], b[DD_USED_REFRSRV])
    } else {
        (dir.used_bytes, 0, d.referenced_bytes, dir.used_bytes.saturating_sub(d.referenced_bytes), 0)
    };
    let num = |v: u64| (nicebytes(v), v.to_string());
    let kind = ds.kind.as_str();
    push("type", kind.into(), kind.into(), "-");
    let ct = chrono_like(d.creation_time);
    push("creation", ct, d.creation_time.to_string(), "-");
    let (a, b) = num(used);
    push("used", a, b, "-");
    if !snapshot {
        let (a, b) = num(avail);
        push("available", a, b, "-");
    } else {
        push("available", "-".into(), "-".into(), "-");
    }
    let (a, b) = num(d.referenced_bytes);
    push("referenced", a, b, "-");
    let cr = if snapshot { ratio(d.uncompressed_bytes, d.compressed_bytes) } else { ratio(dir.uncompressed_bytes, dir.compressed_bytes) };
    push("compressratio", cr.clone(), cr.trim_end_matches('x').into(), "-");
    if ds.kind == DatasetKind::Filesystem {
        let m = if mounted { "yes" } else { "no" };
        push("mounted", m.into(), m.into(), "-");
    }
    // A clone's origin snapshot ($ORIGIN@$ORIGIN, which every file system comes from, is not
    // listed and not shown).
    if !snapshot && ds.dir.origin_obj != 0 {
        if let Some(o) = list_datasets(spa)?.into_iter().find(|o| o.kind == DatasetKind::Snapshot && o.ds_obj == ds.dir.origin_obj) {
            push("origin", o.name.clone(), o.name, "-");
        }
    }
    let numprop = |prop: &str, default: u64, none_if_zero: bool| -> (String, String, String) {
        match find(prop, false) {
            Some((Stored::Num(v), src)) => {
                let disp = if none_if_zero && v == 0 { "none".into() } else { nicebytes(v) };
                (disp, v.to_string(), src)
            }
            _ => (if none_if_zero && default == 0 { "none".into() } else { nicebytes(default) }, default.to_string(), "default".into()),
        }
    };
    if !snapshot {
        for (p, none) in [("quota", true), ("reservation", true)] {
            let (v, r, s) = numprop(p, 0, none);
            push(p, v, r, &s);
        }
    }
    let idx = |prop: &str, default: &str| -> (String, String, String) {
        match find(prop, true) {
            Some((Stored::Num(v), src)) => (index_name(prop, v), index_name(prop, v), src),
            Some((Stored::Str(s), src)) => (s.clone(), s, src),
            None => (default.into(), default.into(), "default".into()),
        }
    };
    if ds.kind != DatasetKind::Volume {
        let (v, r, s) = match find("recordsize", true) {
            Some((Stored::Num(v), src)) => (nicebytes(v), v.to_string(), src),
            _ => ("128K".into(), "131072".into(), "default".into()),
        };
        push("recordsize", v, r, &s);
    }
    if ds.kind == DatasetKind::Filesystem {
        let (mp, src) = match find("mountpoint", true) {
            Some((Stored::Str(s), src)) => {
                // Inherited mountpoints get the rest of the name appended.
                let owner = src.strip_prefix("inherited from ").unwrap_or(&base).to_string();
                let rest = base.strip_prefix(&owner).unwrap_or("");
                // "/" stays "/" (zfs-fuse's `zpool create -R` stores it for the root).
                let v = match s.as_str() {
                    "none" | "legacy" => s,
                    _ => match format!("{}{}", s.trim_end_matches('/'), rest) {
                        v if v.is_empty() => "/".into(),
                        v => v,
                    },
                };
                (v, src)
            }
            _ => (format!("/{base}"), "default".into()),
        };
        let shown = match (altroot, mp.starts_with('/')) {
            (Some(a), true) => {
                let a = a.display().to_string();
                if mp == "/" { a } else { format!("{}{}", a.trim_end_matches('/'), mp) }
            }
            _ => mp,
        };
        push("mountpoint", shown.clone(), shown, &src);
        let (v, r, s) = idx("sharenfs", "off");
        push("sharenfs", v, r, &s);
    }
    for (p, def) in [("checksum", "on"), ("compression", "off")] {
        let (v, r, s) = idx(p, def);
        push(p, v, r, &s);
    }
    if ds.kind != DatasetKind::Volume {
        for (p, def) in [("atime", "on"), ("devices", "on"), ("exec", "on"), ("setuid", "on"), ("readonly", "off"), ("zoned", "off"), ("snapdir", "hidden"), ("aclmode", "discard"), ("aclinherit", "restricted")] {
            if p == "readonly" && spa.readonly {
                // A read-only import makes every dataset read-only for its duration.
                push(p, "on".into(), "on".into(), "temporary");
                continue;
            }
            let (v, r, s) = idx(p, def);
            push(p, v, r, &s);
        }
    }
    push("createtxg", d.creation_txg.to_string(), d.creation_txg.to_string(), "-");
    if ds.kind != DatasetKind::Volume {
        let (v, r, s) = match find("canmount", false) {
            Some((Stored::Num(v), src)) => (index_name("canmount", v), index_name("canmount", v), src),
            _ => ("on".into(), "on".into(), "default".into()),
        };
        push("canmount", v, r, &s);
        let (v, r, s) = idx("xattr", "on");
        push("xattr", v, r, &s);
    }
    let copies = match find("copies", true) {
        Some((Stored::Num(v), src)) => (v.to_string(), src),
        _ => ("1".into(), "default".into()),
    };
    push("copies", copies.0.clone(), copies.0, &copies.1);
    if ds.kind != DatasetKind::Volume {
        // The ZPL's own properties, from the file system's master node (zfs_get_zplprop).
        let master = if ds.ds.bp.is_hole() { None } else { Objset::open(spa, &ds.ds.bp).ok() };
        let zpl = |k: &str| master.as_ref().and_then(|os| crate::zap::zap_lookup_u64(os, 1, k).ok().flatten()).unwrap_or(0);
        let version = zpl("VERSION");
        push("version", version.to_string(), version.to_string(), "-");
        for p in ["utf8only", "normalization", "casesensitivity"] {
            let v = index_name(p, zpl(p));
            push(p, v.clone(), v, "-");
        }
    }
    if ds.kind != DatasetKind::Volume {
        for (p, def) in [("vscan", "off"), ("nbmand", "off"), ("sharesmb", "off")] {
            let (v, r, s) = idx(p, def);
            push(p, v, r, &s);
        }
    }
    if !snapshot {
        for p in ["refquota", "refreservation"] {
            let (v, r, s) = numprop(p, 0, true);
            push(p, v, r, &s);
        }
    }
    push("guid", d.guid.to_string(), d.guid.to_string(), "-");
    for (p, def) in [("primarycache", "all"), ("secondarycache", "all")] {
        let (v, r, s) = idx(p, def);
        push(p, v, r, &s);
    }
    if !snapshot {
        for (p, v) in [("usedbysnapshots", u_snap), ("usedbydataset", u_ds), ("usedbychildren", u_child), ("usedbyrefreservation", u_refr)] {
            let (a, b) = num(v);
            push(p, a, b, "-");
        }
    }
    if snapshot {
        let deferred = ds.ds.flags & oxzfs_format::dsl::DS_FLAG_DEFER_DESTROY != 0;
        push("defer_destroy", onoff(deferred as u64), onoff(deferred as u64), "-");
        let holds = if ds.ds.userrefs_obj == 0 { 0 } else { crate::zap::zap_list(&mos, ds.ds.userrefs_obj).map(|l| l.len()).unwrap_or(0) };
        push("userrefs", holds.to_string(), holds.to_string(), "-");
    } else {
        let (v, r, s) = idx("logbias", "latency");
        push("logbias", v, r, &s);
    }
    push("objsetid", ds.ds_obj.to_string(), ds.ds_obj.to_string(), "-");
    for (p, def) in [("dedup", "off"), ("mlslabel", "none"), ("sync", "standard"), ("dnodesize", "legacy")] {
        let (v, r, s) = idx(p, def);
        push(p, v, r, &s);
    }
    let rcr = ratio(d.uncompressed_bytes, d.compressed_bytes);
    push("refcompressratio", rcr.clone(), rcr.trim_end_matches('x').into(), "-");
    let (a, b) = num(if snapshot { 0 } else { d.referenced_bytes });
    push("written", a, b, "-");
    if !snapshot {
        let (a, b) = num(dir.uncompressed_bytes);
        push("logicalused", a, b, "-");
    }
    let (a, b) = num(d.uncompressed_bytes);
    push("logicalreferenced", a, b, "-");
    if !snapshot {
        for p in ["filesystem_limit", "snapshot_limit", "filesystem_count", "snapshot_count"] {
            push(p, "none".into(), "18446744073709551615".into(), "default");
        }
        let (v, r, s) = idx("snapdev", "hidden");
        push("snapdev", v, r, &s);
    }
    if ds.kind != DatasetKind::Volume {
        let (v, r, s) = idx("acltype", "off");
        push("acltype", v, r, &s);
    }
    for p in ["context", "fscontext", "defcontext", "rootcontext"] {
        push(p, "none".into(), "none".into(), "default");
    }
    if ds.kind == DatasetKind::Filesystem {
        let (v, r, s) = idx("relatime", "off");
        push("relatime", v, r, &s);
    }
    let (v, r, s) = idx("redundant_metadata", "all");
    push("redundant_metadata", v, r, &s);
    if ds.kind == DatasetKind::Filesystem {
        let (v, r, s) = idx("overlay", "on");
        push("overlay", v, r, &s);
    }
    // An encrypted dataset's values replace these (`dsl_crypt::props`, through `Pool::props`).
    push("encryption", "off".into(), "off".into(), "default");
    match find("keylocation", false) {
        Some((Stored::Str(v), src)) => push("keylocation", v.clone(), v, &src),
        _ => push("keylocation", "none".into(), "none".into(), "default"),
    }
    push("keyformat", "none".into(), "none".into(), "default");
    push("pbkdf2iters", "0".into(), "0".into(), "default");
    if !snapshot {
        let (v, r, s) = match find("special_small_blocks", true) {
            Some((Stored::Num(v), src)) => (nicebytes(v), v.to_string(), src),
            _ => ("0".into(), "0".into(), "default".into()),
        };
        push("special_small_blocks", v, r, &s);
    }
    out.retain(|p| prop_applies(&p.name, ds.kind));
    // User properties (module:name), set here or above, after the native ones in name order.
    let user: std::collections::BTreeSet<String> = snap_local.keys().chain(chain.iter().flat_map(|(_, p)| p.keys())).filter(|k| k.contains(':')).cloned().collect();
    for k in user {
        if let Some((Stored::Str(v), src)) = find(&k, true) {
            out.push(PropValue { name: k, value: v.clone(), raw: v, source: src });
        }
    }
    Ok(out)
}

/// Whether a property exists for a kind of dataset (the type masks of zfs_prop.c):
/// `zfs get all` leaves out the others.
pub fn prop_applies(prop: &str, kind: DatasetKind) -> bool {
    use DatasetKind::*;
    const FS_ONLY: &[&str] = &[
        "mounted", "quota", "recordsize", "mountpoint", "sharenfs", "atime", "zoned", "snapdir", "aclmode",
        "aclinherit", "canmount", "vscan", "sharesmb", "dnodesize", "filesystem_limit", "filesystem_count",
        "relatime", "overlay", "special_small_blocks",
    ];
    const FS_SNAP: &[&str] =
        &["devices", "exec", "setuid", "xattr", "version", "utf8only", "normalization", "casesensitivity", "nbmand", "acltype"];
    const SNAP_ONLY: &[&str] = &["defer_destroy", "userrefs", "clones"];
    const NOT_SNAP: &[&str] = &[
        "available", "reservation", "checksum", "compression", "readonly", "copies", "refquota", "refreservation",
        "usedbysnapshots", "usedbydataset", "usedbychildren", "usedbyrefreservation", "logbias", "dedup", "sync",
        "logicalused", "volmode", "snapshot_limit", "snapshot_count", "snapdev", "redundant_metadata", "keylocation",
        "keyformat", "pbkdf2iters",
    ];
    if FS_ONLY.contains(&prop) {
        kind == Filesystem
    } else if FS_SNAP.contains(&prop) {
        kind != Volume
    } else if SNAP_ONLY.contains(&prop) {
        kind == Snapshot
    } else if NOT_SNAP.contains(&prop) {
        kind != Snapshot
    } else {
        true
    }
}

/// `Sun Nov 22 11:39 2026`, as zfs get prints creation (UTC; ctime format without seconds).
pub fn chrono_like(secs: u64) -> String {
    let (y, mo, d, h, m, _, wd) = civil(secs);
    const WD: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MO: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!("{} {} {:>2} {:02}:{:02} {}", WD[wd as usize], MO[(mo - 1) as usize], d, h, m, y)
}

/// `zpool history`'s time stamp: "2026-11-22.16:14:00" (UTC).
pub fn history_time(secs: u64) -> String {
    let (y, mo, d, h, m, s, _) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}.{h:02}:{m:02}:{s:02}")
}

/// (year, month, day, hour, minute, second, weekday) of a time in seconds since the epoch, UTC.
fn civil(secs: u64) -> (i64, i64, i64, u64, u64, u64, i64) {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let (h, m) = (rem / 3600, (rem % 3600) / 60);
    // Civil date from days since the epoch.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    let wd = (days + 4).rem_euclid(7);
    (y, mo, d, h, m, rem % 60, wd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(nicebytes(0), "0B");
        assert_eq!(nicebytes(1023), "1023B");
        assert_eq!(nicebytes(1024), "1K");
        assert_eq!(nicebytes(1536), "1.50K");
        assert_eq!(nicebytes(131072), "128K");
        // 9.999K needs one decimal less to fit five characters.
        assert_eq!(nicebytes(10239), "10.0K");
        assert_eq!(nicebytes(15_623_782), "14.9M");
        assert_eq!(nicebytes(7_466_496), "7.12M");
        assert_eq!(nicebytes(1 << 40), "1T");
        assert_eq!(chrono_like(0), "Thu Jan  1 00:00 1970");
        assert_eq!(chrono_like(1_795_347_591), "Sun Nov 22 11:39 2026");
        assert_eq!(ratio(113, 100), "1.13x");
        // Truncated, not rounded; no compression reads 1.00x.
        assert_eq!(ratio(1999, 1000), "1.99x");
        assert_eq!(ratio(5, 0), "1.00x");
    }

    #[test]
    fn zfs_list_order_is_openzfs() {
        let mut v = vec![("tank/a/b", 9), ("tank/a@s2", 5), ("tank/a-x", 4), ("tank", 1), ("tank/a", 2), ("tank/a@s1", 3), ("tank@z", 8)];
        v.sort_by(|l, r| zfs_list_order(*l, *r));
        let names: Vec<&str> = v.iter().map(|x| x.0).collect();
        // Byte order of the names before '@' ('-' < '/'), a dataset before its snapshots,
        // snapshots by creation txg.
        assert_eq!(names, ["tank", "tank@z", "tank/a", "tank/a@s1", "tank/a@s2", "tank/a-x", "tank/a/b"]);
        let mut w = vec![("p@late", 20), ("p@early", 10)];
        w.sort_by(|l, r| zfs_list_order(*l, *r));
        assert_eq!(w[0].0, "p@early");
    }

    #[test]
    fn raidz_space() {
        // raidz1 of 3, 512-byte sectors: 256 data + 128 parity sectors for 128K.
        assert_eq!(raidz_asize(128 << 10, 9, 3, 1), 384 << 9);
        // raidz3 of 5: 256 + 3 * 128 = 640, already a multiple of 4.
        assert_eq!(raidz_asize(128 << 10, 9, 5, 3), 640 << 9);
        // raidz2 of 4, 4K sectors: 32 + 2 * 16 = 64 sectors, padded to a multiple of 3.
        assert_eq!(raidz_asize(128 << 10, 12, 4, 2), 66 << 12);
        // A 512-byte block on raidz2 of 4 with 4K sectors: 1 + 2 parity, padded to 3.
        assert_eq!(raidz_asize(512, 12, 4, 2), 3 << 12);
    }

    #[test]
    fn slop_as_openzfs_2_1() {
        // Small pools: half the pool (less than 128 MiB).
        assert_eq!(slop_space(64 << 20, 0), 32 << 20);
        // Mid-size: 128 MiB floor.
        assert_eq!(slop_space(1 << 30, 0), 128 << 20);
        // Large: 1/32.
        assert_eq!(slop_space(1 << 40, 0), 32 << 30);
        // Capped at 128 GiB.
        assert_eq!(slop_space(8 << 40, 0), 128 << 30);
        // An embedded log takes from the slop, at most half of it.
        assert_eq!(slop_space(1 << 40, 1 << 30), 31 << 30);
        assert_eq!(slop_space(1 << 40, 64 << 30), 16 << 30);
    }

    #[test]
    fn space_available_walks_quota_and_reservation() {
        let dir = |used: u64, quota: u64, reserved: u64| DslDirPhys { used_bytes: used, quota, reserved, ..Default::default() };
        assert_eq!(dir_space_available(100, &[dir(10, 0, 0)]), 90);
        assert_eq!(dir_space_available(100, &[dir(10, 0, 0), dir(20, 50, 0)]), 30);
        // An unused reservation adds to what the parent offers.
        assert_eq!(dir_space_available(100, &[dir(10, 0, 0), dir(20, 0, 40)]), 110);
        // Over quota: nothing.
        assert_eq!(dir_space_available(100, &[dir(10, 0, 0), dir(60, 50, 0)]), 0);
        // A root quota smaller than the pool wins.
        assert_eq!(dir_space_available(100, &[dir(10, 40, 0)]), 30);
    }

    #[test]
    fn property_type_masks() {
        use DatasetKind::*;
        assert!(prop_applies("mountpoint", Filesystem) && !prop_applies("mountpoint", Snapshot) && !prop_applies("mountpoint", Volume));
        assert!(prop_applies("version", Snapshot) && !prop_applies("version", Volume));
        assert!(!prop_applies("compression", Snapshot) && prop_applies("compression", Volume));
        assert!(prop_applies("userrefs", Snapshot) && !prop_applies("userrefs", Filesystem));
        assert!(prop_applies("guid", Snapshot) && prop_applies("mlslabel", Snapshot));
        assert!(!prop_applies("available", Snapshot));
    }
}
