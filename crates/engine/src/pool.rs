//! pool: the handle the daemon and the CLI hold for an imported pool, and the text of the
//! pool-level commands (`zpool import` listings, `zpool status`, `zpool list`) in OpenZFS's
//! own formats.

use crate::dsl::{self, DatasetInfo, DatasetKind, PropValue};
use crate::dmu::Objset;
use crate::spa::{self, PoolCandidate, ScanResult, Spa};
use crate::vdev::{Vdev, VdevKind, VdevState};
use crate::zpl::Zfs;
use crate::{Result, ZfsError};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    pub readonly: bool,
    pub altroot: Option<PathBuf>,
    pub force: bool,
    pub arc_max: Option<u64>,
}

pub struct Pool {
    pub spa: Arc<Spa>,
    pub altroot: Option<PathBuf>,
    /// Datasets currently mounted (name → mountpoint), maintained by the daemon.
    pub mounted: Mutex<HashMap<String, PathBuf>>,
    fs_cache: Mutex<HashMap<String, Arc<Zfs>>>,
}

#[derive(Clone, Debug, Default)]
pub struct PoolListRow {
    pub name: String,
    pub size: u64,
    pub alloc: u64,
    pub free: u64,
    pub frag: Option<u64>,
    pub cap: u64,
    pub dedup: f64,
    pub health: String,
    pub altroot: String,
}

/// Pick the candidate named by `which` (a name or a numeric guid).
pub fn choose<'a>(scan: &'a ScanResult, which: &str) -> Result<&'a PoolCandidate> {
    let matches: Vec<&PoolCandidate> =
        scan.pools.iter().filter(|p| p.name == which || p.guid.to_string() == which).collect();
    match matches.len() {
        0 => Err(ZfsError::NotFound(format!("cannot import '{which}': no such pool available"))),
        1 => Ok(matches[0]),
        _ => Err(ZfsError::Invalid(format!(
            "cannot import '{which}': more than one matching pool\nimport by numeric ID instead"
        ))),
    }
}

impl Pool {
    pub fn import(dirs: &[PathBuf], which: &str, opts: &ImportOptions) -> Result<Arc<Pool>> {
        let scan = spa::scan(dirs);
        let cand = choose(&scan, which)?;
        let arc_max = opts.arc_max.or_else(arc_max_from_env).unwrap_or_else(crate::arc::AdaptiveCache::default_max);
        let spa = Spa::open(cand, true, arc_max).map_err(|e| match e {
            ZfsError::Unavailable(m) | ZfsError::Unsupported(m) if m.starts_with("cannot import") => ZfsError::Unavailable(m),
            other => ZfsError::Unavailable(format!("cannot import '{which}': {other}")),
        })?;
        Ok(Arc::new(Pool { spa, altroot: opts.altroot.clone(), mounted: Mutex::new(HashMap::new()), fs_cache: Mutex::new(HashMap::new()) }))
    }

    pub fn name(&self) -> &str {
        &self.spa.name
    }

    pub fn guid(&self) -> u64 {
        self.spa.guid
    }

    pub fn datasets(&self) -> Result<Vec<DatasetInfo>> {
        dsl::list_datasets(&self.spa)
    }

    pub fn props(&self, ds: &str) -> Result<Vec<PropValue>> {
        let info = dsl::find_dataset(&self.spa, ds)?;
        let mounted = self.mounted.lock().unwrap().contains_key(ds);
        dsl::get_props(&self.spa, &info, self.altroot.as_deref(), mounted)
    }

    pub fn prop(&self, ds: &str, name: &str) -> Result<PropValue> {
        self.props(ds)?
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ZfsError::Invalid(format!("bad property list: invalid property '{name}'")))
    }

    /// The ZPL of a filesystem or snapshot ("pool/fs@snap").
    pub fn open_fs(&self, ds: &str) -> Result<Arc<Zfs>> {
        if let Some(z) = self.fs_cache.lock().unwrap().get(ds) {
            return Ok(z.clone());
        }
        let info = dsl::find_dataset(&self.spa, ds)?;
        if info.kind == DatasetKind::Volume {
            return Err(ZfsError::Invalid(format!("cannot mount '{ds}': volumes are not filesystems")));
        }
        if info.ds.bp.is_hole() {
            return Err(ZfsError::Invalid(format!("cannot mount '{ds}': dataset has no objset")));
        }
        if info.ds.bp.encrypted {
            return Err(ZfsError::Posix(libc::EACCES, format!("cannot mount '{ds}': encryption key not loaded")));
        }
        let os = Objset::open_id(&self.spa, &info.ds.bp, info.ds_obj)?;
        let z = Zfs::open(os)?;
        let used = info.dir.used_bytes;
        let avail = self.prop(ds, "available").ok().and_then(|p| p.raw.parse().ok()).unwrap_or(0);
        z.set_space(used, avail);
        self.fs_cache.lock().unwrap().insert(ds.to_string(), z.clone());
        Ok(z)
    }

    /// Drop cached objsets and the MOS so the pool's memory is freed after export.
    pub fn close(&self) {
        self.fs_cache.lock().unwrap().clear();
        self.spa.close();
    }

    pub fn health(&self) -> VdevState {
        spa::root_state(&self.spa.root_vdev)
    }

    pub fn list_row(&self) -> PoolListRow {
        let space = dsl::pool_space(&self.spa);
        let mut size = 0;
        for top in &self.spa.root_vdev.children {
            if !top.is_log && top.kind != VdevKind::Hole {
                size += top.asize;
            }
        }
        let alloc = self.allocated();
        let _ = space;
        PoolListRow {
            name: self.spa.name.clone(),
            size,
            alloc,
            free: size.saturating_sub(alloc),
            frag: None,
            cap: if size > 0 { alloc * 100 / size } else { 0 },
            dedup: 1.0,
            health: self.health().as_str().into(),
            altroot: self.altroot.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "-".into()),
        }
    }

    /// Allocated bytes of every top-level vdev (sum of its metaslabs' space map allocations).
    fn allocated(&self) -> u64 {
        let per: u64 = self.spa.root_vdev.children.iter().filter(|t| !t.is_log).map(|t| self.vdev_alloc(t).unwrap_or(0)).sum();
        if per > 0 {
            return per;
        }
        self.dsl_used()
    }

    /// A top-level vdev's allocated bytes, from the space map objects in its metaslab array
    /// (each space map's bonus: object, length, allocated).
    pub fn vdev_alloc(&self, top: &Vdev) -> Option<u64> {
        if top.metaslab_array == 0 || top.metaslab_shift == 0 || top.metaslab_shift > 40 {
            return None;
        }
        let mos = self.spa.mos();
        let (dn, _) = mos.dnode_with_order(top.metaslab_array).ok()?;
        let count = (top.asize >> top.metaslab_shift).min(1 << 20);
        let arr = mos.read(&dn, 0, count * 8).ok()?;
        let mut total: i64 = 0;
        for w in arr.chunks_exact(8) {
            let obj = u64::from_le_bytes(w.try_into().ok()?);
            if obj == 0 {
                continue;
            }
            let (sdn, le) = mos.dnode_with_order(obj).ok()?;
            let b: [u8; 8] = sdn.bonus.get(16..24)?.try_into().ok()?;
            total += if le { i64::from_le_bytes(b) } else { i64::from_be_bytes(b) };
        }
        Some(total.max(0) as u64)
    }

    /// Rows of `zpool list -v` below the pool: (indented name, size, alloc, health).
    pub fn list_vdev_rows(&self) -> Vec<(String, Option<u64>, Option<u64>, String)> {
        let mut out = Vec::new();
        let push_tree = |v: &Vdev, depth: usize, out: &mut Vec<(String, Option<u64>, Option<u64>, String)>| {
            let mut stack = vec![(v, depth)];
            while let Some((n, d)) = stack.pop() {
                let top = d == 1;
                out.push((
                    format!("{}{}", "  ".repeat(d), n.display_name()),
                    top.then_some(n.asize),
                    if top { self.vdev_alloc(n) } else { None },
                    n.state().as_str().to_string(),
                ));
                for c in n.children.iter().rev() {
                    stack.push((c, d + 1));
                }
            }
        };
        for top in self.spa.root_vdev.children.iter().filter(|t| !t.is_log && t.kind != VdevKind::Hole) {
            push_tree(top, 1, &mut out);
        }
        let logs: Vec<_> = self.spa.root_vdev.children.iter().filter(|t| t.is_log).collect();
        if !logs.is_empty() {
            out.push(("logs".into(), None, None, String::new()));
            for t in logs {
                push_tree(t, 1, &mut out);
            }
        }
        out
    }

    fn dsl_used(&self) -> u64 {
        let mos = self.spa.mos();
        crate::zap::zap_lookup_u64(&mos, 1, "root_dataset")
            .ok()
            .flatten()
            .and_then(|o| mos.dnode_with_order(o).ok())
            .and_then(|(dn, le)| oxzfs_format::dsl::DslDirPhys::decode(&dn.bonus, le).ok())
            .map(|d| d.used_bytes)
            .unwrap_or(0)
    }

    /// `zpool status [-v]` for this pool.
    pub fn status_text(&self, verbose: bool) -> String {
        let mut s = String::new();
        let health = self.health();
        let _ = writeln!(s, "  pool: {}", self.spa.name);
        let _ = writeln!(s, " state: {}", health.as_str());
        let errors = self.spa.errors();
        if health == VdevState::Degraded {
            let _ = writeln!(
                s,
                "status: One or more devices could not be used because the label is missing or\n\tinvalid.  Sufficient replicas exist for the pool to continue\n\tfunctioning in a degraded state.\naction: Replace the device using 'zpool replace'.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-4J"
            );
        } else if !errors.is_empty() {
            let _ = writeln!(
                s,
                "status: One or more devices has experienced an error resulting in data\n\tcorruption.  Applications may be affected.\naction: Restore the file in question if possible.  Otherwise restore the\n\tentire pool from backup.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-8A"
            );
        } else if self.any_cksum() {
            let _ = writeln!(
                s,
                "status: One or more devices has experienced an unrecoverable error.  An\n\tattempt was made to correct the error.  Applications are unaffected.\naction: Determine if the device needs to be replaced, and clear the errors\n\tusing 'zpool clear' or replace the device with 'zpool replace'.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-9P"
            );
        }
        let _ = writeln!(s, "config:\n");
        let mut rows: Vec<(String, String, u64, u64, u64)> = Vec::new();
        rows.push((self.spa.name.clone(), health.as_str().into(), 0, 0, 0));
        let root = &self.spa.root_vdev;
        let mut logs = Vec::new();
        let mut special = Vec::new();
        let mut dedup = Vec::new();
        for top in &root.children {
            if top.kind == VdevKind::Hole {
                continue;
            }
            if top.is_log {
                logs.push(top.clone());
            } else if top.alloc_bias == "special" {
                special.push(top.clone());
            } else if top.alloc_bias == "dedup" {
                dedup.push(top.clone());
            } else {
                push_rows(top, 1, &mut rows);
            }
        }
        let mut sections: Vec<(&str, Vec<(String, String, u64, u64, u64)>)> = Vec::new();
        for (title, list) in [("dedup", &dedup), ("special", &special), ("logs", &logs)] {
            if !list.is_empty() {
                let mut r = Vec::new();
                for t in list.iter() {
                    push_rows(t, 1, &mut r);
                }
                sections.push((title, r));
            }
        }
        let cache = self.aux_devices("l2cache");
        let spares = self.aux_devices("spares");
        let width = rows
            .iter()
            .chain(sections.iter().flat_map(|(_, r)| r.iter()))
            .map(|r| r.0.len())
            .chain(cache.iter().chain(spares.iter()).map(|(n, _)| n.len() + 2))
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(s, "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}", "NAME", "STATE", "READ", "WRITE", "CKSUM");
        for r in &rows {
            let _ = writeln!(s, "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}", r.0, r.1, r.2, r.3, r.4);
        }
        for (title, r) in &sections {
            let _ = writeln!(s, "\t{title}");
            for r in r {
                let _ = writeln!(s, "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}", r.0, r.1, r.2, r.3, r.4);
            }
        }
        if !cache.is_empty() {
            let _ = writeln!(s, "\tcache");
            for (n, st) in &cache {
                let _ = writeln!(s, "\t  {:<w$}  {:<8}", n, st, w = width - 2);
            }
        }
        if !spares.is_empty() {
            let _ = writeln!(s, "\tspares");
            for (n, st) in &spares {
                let _ = writeln!(s, "\t  {:<w$}  {:<8}", n, if st == "ONLINE" { "AVAIL" } else { st }, w = width - 2);
            }
        }
        let _ = writeln!(s);
        if errors.is_empty() {
            let _ = writeln!(s, "errors: No known data errors");
        } else if !verbose {
            let _ = writeln!(s, "errors: {} data errors, use '-v' for a list", errors.len());
        } else {
            let _ = writeln!(s, "errors: Permanent errors have been detected in the following files:\n");
            let mut seen = std::collections::BTreeSet::new();
            for (os, obj, _blk) in errors {
                if !seen.insert((os, obj)) {
                    continue;
                }
                let _ = writeln!(s, "        {}", self.error_path(os, obj));
            }
        }
        s
    }

    fn any_cksum(&self) -> bool {
        self.spa.root_vdev.leaves().iter().any(|l| l.stats.cksum_errors.load(Ordering::Relaxed) > 0 || l.stats.read_errors.load(Ordering::Relaxed) > 0)
    }

    /// Cache or spare devices named by the config, with their state (found or not).
    fn aux_devices(&self, key: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(list) = self.spa.config.get_nvlist_array(key) {
            for d in list {
                let guid = d.get_u64("guid").unwrap_or(0);
                match self.spa.devices.get(&guid) {
                    Some((p, _)) => out.push((p.display().to_string(), "ONLINE".into())),
                    None => out.push((d.get_str("path").unwrap_or("?").to_string(), "UNAVAIL".into())),
                }
            }
        }
        out
    }

    /// The path of a damaged object, as `zpool status -v` prints it.
    fn error_path(&self, os_id: u64, obj: u64) -> String {
        if let Ok(list) = self.datasets() {
            if let Some(ds) = list.iter().find(|d| d.ds_obj == os_id) {
                if let Ok(z) = self.open_fs(&ds.name) {
                    if let Some(p) = z.path_of(obj) {
                        let mp = self.prop(&ds.name, "mountpoint").map(|p| p.value).unwrap_or_default();
                        if mp.starts_with('/') && ds.kind != DatasetKind::Snapshot {
                            return format!("{}{}", mp.trim_end_matches('/'), p);
                        }
                        return format!("{}:{}", ds.name, p);
                    }
                }
                return format!("{}:<0x{:x}>", ds.name, obj);
            }
        }
        format!("<0x{os_id:x}>:<0x{obj:x}>")
    }
}

fn push_rows(v: &Vdev, depth: usize, rows: &mut Vec<(String, String, u64, u64, u64)>) {
    let name = format!("{}{}", "  ".repeat(depth), v.display_name());
    rows.push((
        name,
        v.state().as_str().into(),
        v.stats.read_errors.load(Ordering::Relaxed),
        v.stats.write_errors.load(Ordering::Relaxed),
        v.stats.cksum_errors.load(Ordering::Relaxed),
    ));
    for c in &v.children {
        push_rows(c, depth + 1, rows);
    }
}

/// What `zpool import -d DIR` prints for the pools found.
pub fn import_listing(scan: &ScanResult) -> String {
    let mut s = String::new();
    for (i, c) in scan.pools.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        let _ = writeln!(s, "   pool: {}", c.name);
        let _ = writeln!(s, "     id: {}", c.guid);
        let _ = writeln!(s, "  state: {}", c.state);
        if let Some(p) = c.problems.iter().find(|p| p.contains("unsupported vdev type")) {
            let what = p.rsplit("unsupported: ").next().unwrap_or(p);
            let _ = writeln!(s, " status: The pool uses a vdev type this system does not support ({what}).");
            let _ = writeln!(s, " action: The pool cannot be imported on this system.");
        } else {
        match c.state.as_str() {
            "ONLINE" => {
                let _ = writeln!(s, " action: The pool can be imported using its name or numeric identifier.");
            }
            "DEGRADED" => {
                let _ = writeln!(s, " status: One or more devices are missing from the system.");
                let _ = writeln!(
                    s,
                    " action: The pool can be imported despite missing or damaged devices.  The\n\tfault tolerance of the pool may be compromised if imported."
                );
                let _ = writeln!(s, "   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-2Q");
            }
            _ => {
                let _ = writeln!(s, " status: One or more devices are missing from the system.");
                let _ = writeln!(
                    s,
                    " action: The pool cannot be imported. Attach the missing\n\tdevices and try again."
                );
                let _ = writeln!(s, "   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-3C");
            }
        }
        }
        let _ = writeln!(s, " config:\n");
        let mut rows = Vec::new();
        rows.push((c.name.clone(), c.state.clone()));
        for top in &c.root.children {
            if top.kind == VdevKind::Hole {
                rows.push((format!("  missing-{}", top.id), "UNAVAIL".into()));
                continue;
            }
            import_rows(top, 1, &mut rows);
        }
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(4);
        for (n, st) in rows {
            let _ = writeln!(s, "\t{:<width$}  {}", n, st);
        }
    }
    for p in &scan.problems {
        let _ = writeln!(s, "{p}");
    }
    s
}

fn import_rows(v: &Vdev, depth: usize, rows: &mut Vec<(String, String)>) {
    let name = match (&v.kind, &v.path) {
        (VdevKind::Leaf { .. }, Some(p)) if v.dev.is_none() => p.clone(),
        _ => v.display_name(),
    };
    let st = if v.is_leaf() && v.dev.is_none() { "UNAVAIL".to_string() } else { v.state().as_str().to_string() };
    rows.push((format!("{}{}", "  ".repeat(depth), name), st));
    for c in &v.children {
        import_rows(c, depth + 1, rows);
    }
}

/// `OXZFS_ARC_MAX` (bytes, or with a K/M/G suffix) caps the ARC of pools the daemon imports.
fn arc_max_from_env() -> Option<u64> {
    let v = std::env::var("OXZFS_ARC_MAX").ok()?;
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1u64 << 10),
        'm' | 'M' => (&v[..v.len() - 1], 1 << 20),
        'g' | 'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>().ok().map(|n| n.saturating_mul(mult))
}
