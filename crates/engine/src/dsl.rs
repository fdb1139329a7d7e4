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
use crate::traverse::nicenum;
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

fn dir_phys(mos: &Objset, obj: u64) -> Result<DslDirPhys> {
    let (b, le) = bonus_of(mos, obj)?;
    DslDirPhys::decode(&b, le).map_err(|e| ZfsError::corrupt(format!("DSL directory {obj}"), e))
}

fn ds_phys(mos: &Objset, obj: u64) -> Result<DslDatasetPhys> {
    let (b, le) = bonus_of(mos, obj)?;
    DslDatasetPhys::decode(&b, le).map_err(|e| ZfsError::corrupt(format!("DSL dataset {obj}"), e))
}

/// Every dataset and snapshot, in `zfs list -t all` order: depth first by name, each
/// filesystem followed by its snapshots (by creation txg) before its children.
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
                snaps.sort_by_key(|s| s.ds.creation_txg);
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
    Ok(out)
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
                    0 | 3 => "zstd".into(),
                    l => compress::zstd_level_name(l as u8).unwrap_or_else(|| format!("zstd-{l}")),
                },
                a if a == compress::ZIO_COMPRESS_GZIP_1 + 5 => "gzip".into(),
                a => compress::compress_name(a).into(),
            }
        }
        "checksum" => checksum::checksum_name(v as u8).into(),
        "dedup" => match v {
            0 | 2 => "off".into(),
            1 => "on".into(),
            x => checksum::checksum_name((x & 0xff) as u8).into(),
        },
        "canmount" => ["off", "on", "noauto"].get(v as usize).unwrap_or(&"on").to_string(),
        "snapdir" => ["hidden", "visible"].get(v as usize).unwrap_or(&"hidden").to_string(),
        "xattr" => ["off", "on", "sa"].get(v as usize).unwrap_or(&"on").to_string(),
        "logbias" => ["latency", "throughput"].get(v as usize).unwrap_or(&"latency").to_string(),
        "sync" => ["standard", "always", "disabled"].get(v as usize).unwrap_or(&"standard").to_string(),
        "primarycache" | "secondarycache" => ["none", "metadata", "all"].get(v as usize).unwrap_or(&"all").to_string(),
        "redundant_metadata" => ["all", "most"].get(v as usize).unwrap_or(&"all").to_string(),
        "aclinherit" => ["discard", "noallow", "restricted", "passthrough", "passthrough-x"].get(v as usize).unwrap_or(&"restricted").to_string(),
        "aclmode" => ["discard", "groupmask", "passthrough", "restricted"].get(v as usize).unwrap_or(&"discard").to_string(),
        "acltype" => ["off", "nfsv4", "posix"].get(v as usize).unwrap_or(&"off").to_string(),
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
        _ => onoff(v),
    }
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

/// Pool-wide numbers the dataset properties need.
pub struct PoolSpace {
    /// Usable bytes of the normal class (raidz parity deflated).
    pub dspace: u64,
    pub slop: u64,
}

pub fn pool_space(spa: &Spa) -> PoolSpace {
    let mut dspace = 0u64;
    for top in &spa.root_vdev.children {
        if top.is_log || !top.alloc_bias.is_empty() {
            continue;
        }
        let a = top.asize;
        let d = match top.kind {
            crate::vdev::VdevKind::Raidz { nparity } => {
                let n = top.children.len() as u64;
                if n > nparity as u64 {
                    a / n * (n - nparity as u64)
                } else {
                    a
                }
            }
            _ => a,
        };
        dspace += d;
    }
    let slop = (dspace >> 5).min(128 << 30).max((dspace >> 1).min(128 << 20));
    PoolSpace { dspace, slop }
}

/// `zfs get all` for one dataset, in OpenZFS's order.
pub fn get_props(spa: &Arc<Spa>, ds: &DatasetInfo, altroot: Option<&Path>, mounted: bool) -> Result<Vec<PropValue>> {
    let mos = spa.mos();
    // Collect local props of this dir and its ancestors: (dataset name, props).
    let mut chain: Vec<(String, BTreeMap<String, Stored>)> = Vec::new();
    let base = ds.name.split('@').next().unwrap_or(&ds.name).to_string();
    {
        let mut dir_obj = ds.dir_obj;
        let mut name = base.clone();
        for _ in 0..64 {
            let dir = dir_phys(&mos, dir_obj)?;
            chain.push((name.clone(), local_props(&mos, dir.props_zapobj)));
            if dir.parent_dir_obj == 0 {
                break;
            }
            dir_obj = dir.parent_dir_obj;
            name = match name.rfind('/') {
                Some(i) => name[..i].to_string(),
                None => break,
            };
        }
    }
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
    let root_used = dir_phys(&mos, crate::zap::zap_lookup_u64(&mos, 1, "root_dataset")?.unwrap_or(0)).map(|d| d.used_bytes).unwrap_or(0);
    let mut avail = space.dspace.saturating_sub(space.slop).saturating_sub(root_used);
    for (_, p) in &chain {
        if let Some(Stored::Num(q)) = p.get("quota") {
            if *q > 0 {
                avail = avail.min(*q);
            }
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
                let v = if s == "none" || s == "legacy" { s } else { format!("{}{}", s.trim_end_matches('/'), rest) };
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
    if ds.kind == DatasetKind::Filesystem {
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
    if ds.kind == DatasetKind::Filesystem {
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
        let version = if ds.ds.bp.is_hole() {
            0
        } else {
            Objset::open(spa, &ds.ds.bp)
                .ok()
                .and_then(|os| crate::zap::zap_lookup_u64(&os, 1, "VERSION").ok().flatten())
                .unwrap_or(0)
        };
        push("version", version.to_string(), version.to_string(), "-");
        for (p, def) in [("utf8only", "off"), ("normalization", "none"), ("casesensitivity", "sensitive")] {
            push(p, def.into(), def.into(), "-");
        }
    }
    if ds.kind == DatasetKind::Filesystem {
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
        for (p, def) in [("logbias", "latency")] {
            let (v, r, s) = idx(p, def);
            push(p, v, r, &s);
        }
    }
    push("objsetid", ds.ds_obj.to_string(), ds.ds_obj.to_string(), "-");
    if !snapshot {
        for (p, def) in [("dedup", "off"), ("mlslabel", "none"), ("sync", "standard"), ("dnodesize", "legacy")] {
            let (v, r, s) = idx(p, def);
            push(p, v, r, &s);
        }
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
    if ds.kind == DatasetKind::Filesystem {
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
    push("encryption", "off".into(), "off".into(), "default");
    push("keylocation", "none".into(), "none".into(), "default");
    push("keyformat", "none".into(), "none".into(), "default");
    push("pbkdf2iters", "0".into(), "0".into(), "default");
    if !snapshot {
        let (v, r, s) = match find("special_small_blocks", true) {
            Some((Stored::Num(v), src)) => (nicebytes(v), v.to_string(), src),
            _ => ("0".into(), "0".into(), "default".into()),
        };
        push("special_small_blocks", v, r, &s);
    }
    Ok(out)
}

/// `Sun Nov 22 11:39 2026`, as zfs get prints creation (UTC; ctime format without seconds).
pub fn chrono_like(secs: u64) -> String {
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
    const WD: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MO: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!("{} {} {:>2} {:02}:{:02} {}", WD[wd as usize], MO[(mo - 1) as usize], d, h, m, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn formats() {
        assert_eq!(nicebytes(0), "0B");
        assert_eq!(nicebytes(15_623_782), "14.9M");
        assert_eq!(chrono_like(0), "Thu Jan  1 00:00 1970");
        assert_eq!(chrono_like(1_795_347_591), "Sun Nov 22 11:39 2026");
        assert_eq!(ratio(113, 100), "1.13x");
    }
}
