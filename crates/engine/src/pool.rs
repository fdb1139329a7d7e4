//! pool: the handle the daemon and the CLI hold for an imported pool, and the text of the
//! pool-level commands (`zpool import` listings, `zpool status`, `zpool list`) in OpenZFS's
//! own formats.

use crate::dsl::{self, DatasetInfo, DatasetKind, PropValue};
use crate::dmu::Objset;
use crate::spa::{self, ScanResult, Spa};
use crate::vdev::{Vdev, VdevKind, VdevState};
use crate::zpl::{Zfs, ZplRead};
use crate::{Result, ZfsError};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use oxzfs_format::nvlist::NvList;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    pub readonly: bool,
    pub altroot: Option<PathBuf>,
    pub force: bool,
    pub arc_max: Option<u64>,
    /// Import under this name instead of the pool's own.
    pub new_name: Option<String>,
    /// `-m`: import with log devices missing (their intent logs are dropped).
    pub missing_log: bool,
    /// `-N`: nothing mounted; the intent logs are claimed and their replay left to the first
    /// mount.
    pub no_mount: bool,
}

pub struct Pool {
    pub spa: Arc<Spa>,
    pub altroot: Option<PathBuf>,
    /// Datasets currently mounted (name → mountpoint), maintained by the daemon.
    pub mounted: Mutex<HashMap<String, PathBuf>>,
    fs_cache: Mutex<HashMap<String, Arc<Zfs>>>,
    /// Cache and spare devices found in the import directories (guid → path): their labels
    /// name no pool, so the pool scan leaves them out.
    aux_found: HashMap<u64, PathBuf>,
    /// A new random guid at each load of the pool (spa_load_guid, the load_guid property).
    pub load_guid: u64,
    /// The cachefile property: None for the default, Some("none") or Some(path).
    pub cachefile: Mutex<Option<String>>,
}

/// The space an L2ARC device offers (l2arc_add_vdev): the device rounded down to whole labels
/// (256 KiB), less the four labels and boot area (4.5 MiB) and the device header block. None
/// when the device cannot be opened.
pub fn l2arc_space(path: &Path) -> Option<u64> {
    use std::io::{Seek, SeekFrom};
    let len = std::fs::File::open(path).ok()?.seek(SeekFrom::End(0)).ok()?;
    Some((len & !((256 << 10) - 1)).saturating_sub((4 << 20) + (512 << 10) + 512))
}

/// One vdev row of `zpool list -v` (a class heading when `health` is empty).
pub struct ListVdevRow {
    pub name: String,
    pub size: Option<u64>,
    pub alloc: Option<u64>,
    pub frag: Option<u64>,
    pub health: String,
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

/// An error of Spa::open in the words of OpenZFS's `zpool import`.
fn import_error(name: &str, e: ZfsError) -> ZfsError {
    let prefix = format!("cannot import '{name}': ");
    match e {
        ZfsError::Unavailable(m) if m.starts_with(&prefix) && m.contains("one or more devices is currently unavailable") => {
            ZfsError::Unavailable(format!("{prefix}one or more devices is currently unavailable"))
        }
        ZfsError::Unsupported(m) if m.contains("feature(s) not supported by this system: ") => {
            // zpool_import_props on ENOTSUP: the features, one a line, then EZFS_BADVERSION.
            let list = m.rsplit("not supported by this system: ").next().unwrap_or("");
            let mut out = String::from("This pool uses the following feature(s) not supported by this system:\n");
            for f in list.split(", ").filter(|f| !f.is_empty()) {
                out.push_str(&format!("\t{f}\n"));
            }
            out.push_str(&format!("{prefix}unsupported version or feature"));
            ZfsError::Unavailable(out)
        }
        ZfsError::Unavailable(m) if m.starts_with("cannot import") || m.starts_with("The devices below") => ZfsError::Unavailable(m),
        ZfsError::Unsupported(m) if m.starts_with("cannot import") => ZfsError::Unsupported(m),
        other => ZfsError::Unavailable(format!("{prefix}{other}")),
    }
}

impl Pool {
    pub fn import(dirs: &[PathBuf], which: &str, opts: &ImportOptions) -> Result<Arc<Pool>> {
        let mut scan = spa::scan(dirs);
        let cand = crate::spa::choose_as(&mut scan, which, opts.new_name.as_deref())?;
        cand.missing_log_ok = opts.missing_log;
        let arc_max = opts.arc_max.or_else(arc_max_from_env).unwrap_or_else(crate::arc::AdaptiveCache::default_max);
        let spa = Spa::open(cand, true, arc_max).map_err(|e| import_error(&cand.name, e))?;
        let aux_found = find_aux_devices(&spa, dirs);
        attach_cache_devices(&spa, &aux_found);
        Ok(Arc::new(Pool {
            spa,
            altroot: opts.altroot.clone(),
            mounted: Mutex::new(HashMap::new()),
            fs_cache: Mutex::new(HashMap::new()),
            aux_found,
            load_guid: crate::dbuf::rand_u64(),
            cachefile: Mutex::new(None),
        }))
    }

    /// The read view of a pool imported for writing (its Spa follows each synced txg).
    pub fn from_spa(spa: Arc<Spa>, altroot: Option<PathBuf>, dirs: &[PathBuf]) -> Arc<Pool> {
        let aux_found = find_aux_devices(&spa, dirs);
        attach_cache_devices(&spa, &aux_found);
        Arc::new(Pool { spa, altroot, mounted: Mutex::new(HashMap::new()), fs_cache: Mutex::new(HashMap::new()), aux_found, load_guid: crate::dbuf::rand_u64(), cachefile: Mutex::new(None) })
    }

    pub fn name(&self) -> &str {
        &self.spa.name
    }

    /// `zpool history`: every record from the MOS history object, commands and (for `-i`)
    /// internal events.
    pub fn history(&self) -> Result<Vec<HistoryRecord>> {
        let mos = self.spa.mos();
        let Some(obj) = crate::zap::zap_lookup_u64(&mos, 1, "history")? else { return Ok(Vec::new()) };
        let (dn, le) = mos.dnode_with_order(obj)?;
        let w = |i: usize| -> u64 {
            dn.bonus.get(i * 8..i * 8 + 8).map(|b| {
                let a: [u8; 8] = b.try_into().expect("8");
                if le { u64::from_le_bytes(a) } else { u64::from_be_bytes(a) }
            }).unwrap_or(0)
        };
        let (create_len, max, bof, eof) = (w(0), w(1), w(2), w(3));
        if eof > 64 << 20 || max > 1 << 40 {
            return Err(ZfsError::Invalid(format!("history object {obj}: offsets out of range")));
        }
        // Logical offsets past the creation records wrap around the ring of max bytes.
        let phys = |off: u64| -> u64 { if off < create_len || max <= create_len { off } else { create_len + (off - create_len) % (max - create_len) } };
        let mut out = Vec::new();
        let mut off = 0u64;
        let read = |at: u64, n: u64| -> Result<Vec<u8>> {
            let p = phys(at);
            let room = if at < create_len || max <= create_len { n } else { max - p };
            if n <= room {
                return mos.read(&dn, p, n);
            }
            let mut v = mos.read(&dn, p, room)?;
            v.extend_from_slice(&mos.read(&dn, create_len, n - room)?);
            Ok(v)
        };
        while off + 8 <= eof {
            if off >= create_len && off < bof {
                off = bof;
                continue;
            }
            let lb = read(off, 8)?;
            let len = u64::from_le_bytes(lb[..8].try_into().expect("8"));
            if len == 0 || len > 1 << 20 || off + 8 + len > eof {
                break;
            }
            let rec = read(off + 8, len)?;
            if let Ok(nv) = NvList::decode_packed(&rec) {
                let time = nv.get_u64("history time").unwrap_or(0);
                if let Some(cmd) = nv.get_str("history command") {
                    out.push(HistoryRecord::Command { time, cmd: cmd.to_string() });
                } else if let Some(name) = nv.get_str("internal_name") {
                    let txg = nv.get_u64("history txg").unwrap_or(0);
                    let msg = nv.get_str("history internal str").unwrap_or("").to_string();
                    out.push(HistoryRecord::Internal { time, txg, name: name.to_string(), msg });
                }
            }
            off += 8 + len;
        }
        Ok(out)
    }

    /// Numeric pool properties set with `zpool set` (the MOS pool_props ZAP).
    pub fn pool_props(&self) -> std::collections::BTreeMap<String, u64> {
        let mos = self.spa.mos();
        match crate::zap::zap_lookup_u64(&mos, 1, "pool_props") {
            Ok(Some(obj)) => crate::zap::zap_list_u64(&mos, obj).unwrap_or_default().into_iter().collect(),
            _ => Default::default(),
        }
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
        let mut props = dsl::get_props(&self.spa, &info, self.altroot.as_deref(), mounted)?;
        crate::dsl_crypt::fill_props(&self.spa, &info, &mut props);
        Ok(props)
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
        let z = self.load_fs(ds)?;
        self.fs_cache.lock().unwrap().insert(ds.to_string(), z.clone());
        Ok(z)
    }

    /// The ZPL of `ds` as last synced, read afresh (the cached one of `open_fs` stays at the
    /// state it was opened in; a live file system's later objects are not in it).
    fn load_fs(&self, ds: &str) -> Result<Arc<Zfs>> {
        let info = dsl::find_dataset(&self.spa, ds)?;
        if info.kind == DatasetKind::Volume {
            return Err(ZfsError::Invalid(format!("cannot mount '{ds}': volumes are not filesystems")));
        }
        if info.ds.bp.is_hole() {
            return Err(ZfsError::Invalid(format!("cannot mount '{ds}': dataset has no objset")));
        }
        if info.ds.bp.encrypted && !crate::dsl_crypt::register(&self.spa, &info) {
            return Err(ZfsError::Posix(libc::EACCES, format!("cannot mount '{ds}': encryption key not loaded")));
        }
        if info.ds.bp.encrypted {
            crate::dsl_crypt::verify_objset(&self.spa, info.ds_obj, &info.ds.bp).map_err(|e| ZfsError::Posix(libc::EIO, format!("cannot mount '{ds}': {e}")))?;
        }
        let os = Objset::open_id(&self.spa, &info.ds.bp, info.ds_obj)?;
        let z = Zfs::open(os)?;
        let num = |p: &str, d: u64| self.prop(ds, p).ok().and_then(|p| p.raw.parse().ok()).unwrap_or(d);
        z.set_space(info.ds.referenced_bytes, num("available", 0), num("recordsize", 128 << 10));
        Ok(z)
    }

    /// Forget the cached file systems of `name`, its snapshots and its descendants (after it
    /// was renamed or destroyed, the names may come back for other datasets).
    pub fn forget_fs(&self, name: &str) {
        let within = |n: &str| n == name || n.strip_prefix(name).is_some_and(|r| r.starts_with('/') || r.starts_with('@'));
        self.fs_cache.lock().unwrap().retain(|n, _| !within(n));
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
            if !top.is_log && top.is_concrete() {
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
            frag: self.fragmentation(),
            cap: if size > 0 { alloc * 100 / size } else { 0 },
            dedup: dsl::dedup_ratio_x100(&self.spa) as f64 / 100.0,
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

    /// Fragmentation of a top-level vdev as OpenZFS computes it (metaslab_group_fragmentation):
    /// each metaslab's from its space map histogram through zfs_frag_table, weighted by the
    /// metaslab's free space, over the vdev's space. None without histograms (old pools).
    pub fn vdev_frag(&self, top: &Vdev) -> Option<u64> {
        const TABLE: [u64; 16] = [100, 100, 98, 95, 90, 80, 70, 60, 50, 40, 30, 20, 15, 10, 5, 0];
        if top.metaslab_array == 0 || top.metaslab_shift == 0 || top.metaslab_shift > 40 {
            return None;
        }
        let mos = self.spa.mos();
        let (dn, _) = mos.dnode_with_order(top.metaslab_array).ok()?;
        let count = (top.asize >> top.metaslab_shift).min(1 << 20);
        let ms_size = 1u64 << top.metaslab_shift;
        let arr = mos.read(&dn, 0, count * 8).ok()?;
        let (mut weighted, mut valid) = (0u128, 0u64);
        for w in arr.chunks_exact(8) {
            let obj = u64::from_le_bytes(w.try_into().ok()?);
            if obj == 0 {
                valid += 1; // never used: fragmentation 0
                continue;
            }
            let (sdn, le) = mos.dnode_with_order(obj).ok()?;
            if sdn.bonus.len() < 320 {
                continue; // no histogram: invalid
            }
            let rd = |i: usize| -> u64 {
                let b: [u8; 8] = sdn.bonus[i..i + 8].try_into().expect("8");
                if le { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) }
            };
            let alloc = rd(16);
            let (mut frag, mut total) = (0u128, 0u128);
            for i in 0..32usize {
                let h = rd(64 + i * 8);
                if h == 0 {
                    continue;
                }
                let idx = (top.ashift as usize + i).saturating_sub(9).min(TABLE.len() - 1);
                let space = (h as u128) << (i as u32 + top.ashift as u32);
                total += space;
                frag += space * TABLE[idx] as u128;
            }
            let ms_frag = if total > 0 { frag / total } else { 0 };
            weighted += ms_frag * ms_size.saturating_sub(alloc) as u128;
            valid += 1;
        }
        if valid < count / 2 || count == 0 {
            return None;
        }
        Some((weighted / (count * ms_size) as u128) as u64)
    }

    /// Fragmentation of the pool (the normal class): the vdevs' weighted by their space.
    pub fn fragmentation(&self) -> Option<u64> {
        let (mut f, mut sp) = (0u128, 0u128);
        for top in self.spa.root_vdev.children.iter().filter(|t| !t.is_log && t.alloc_bias.is_empty() && t.is_concrete()) {
            let space = ((top.asize >> top.metaslab_shift.max(1)) << top.metaslab_shift) as u128;
            f += self.vdev_frag(top)? as u128 * space;
            sp += space;
        }
        (sp > 0).then(|| (f / sp) as u64)
    }
    /// The rows of `zpool list -v` below the pool (print_list_stats): the data vdevs, then each
    /// class (dedup, special, logs) under a heading, then cache and spare devices. A heading
    /// row has no health; top-level vdevs carry size, alloc and fragmentation, others none.
    pub fn list_vdev_rows(&self) -> Vec<ListVdevRow> {
        let mut out = Vec::new();
        let push_tree = |v: &Vdev, out: &mut Vec<ListVdevRow>| {
            let mut stack = vec![(v, 1usize)];
            while let Some((n, d)) = stack.pop() {
                let top = d == 1;
                out.push(ListVdevRow {
                    name: format!("{}{}", "  ".repeat(d), n.display_name()),
                    size: top.then_some(n.asize),
                    alloc: if top { self.vdev_alloc(n) } else { None },
                    frag: if top { self.vdev_frag(n) } else { None },
                    health: n.state().as_str().to_string(),
                });
                for c in n.children.iter().rev() {
                    stack.push((c, d + 1));
                }
            }
        };
        let heading = |name: &str| ListVdevRow { name: name.into(), size: None, alloc: None, frag: None, health: String::new() };
        let tops = &self.spa.root_vdev.children;
        for top in tops.iter().filter(|t| t.is_concrete() && top_class(t).is_empty()) {
            push_tree(top, &mut out);
        }
        for class in ["dedup", "special", "logs"] {
            let members: Vec<_> = tops.iter().filter(|t| t.is_concrete() && top_class(t) == class).collect();
            if !members.is_empty() {
                out.push(heading(class));
                for t in members {
                    push_tree(t, &mut out);
                }
            }
        }
        for (key, title) in [("l2cache", "cache"), ("spares", "spare")] {
            let devs = self.aux_devices(key);
            if !devs.is_empty() {
                out.push(heading(title));
                for (path, state) in devs {
                    // A cache device's size is its L2ARC space, nothing of it allocated yet.
                    let size = if key == "l2cache" && state == "ONLINE" { l2arc_space(Path::new(&path)) } else { None };
                    let state = if key == "spares" && state == "ONLINE" { "AVAIL".to_string() } else { state };
                    out.push(ListVdevRow { name: format!("  {path}"), size, alloc: size.map(|_| 0), frag: None, health: state });
                }
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

    /// `zpool status [-v]` for this pool, as OpenZFS 2.1's status_callback prints it:
    /// the header, the most serious status reason with its action and message id, the
    /// scan line, the config table (NAME padded to the widest indented vdev name, at least
    /// 10; STATE padded to 8; READ/WRITE/CKSUM in 5 columns through zfs_nicenum), the
    /// dedup/special/logs classes, cache and spares, and the error summary.
    pub fn status_text(&self, verbose: bool) -> String {
        self.status_text_for(verbose, false)
    }

    /// `status_text` of a pool whose I/O may be `suspended` (a txg sync failed: the write
    /// side knows): state SUSPENDED and the I/O failure text, as zpool_get_state_str and
    /// check_status have it for failmode=wait.
    pub fn status_text_for(&self, verbose: bool, suspended: bool) -> String {
        self.status_text_with(verbose, suspended, false)
    }

    /// `status_text_for`, with `zpool status -t`'s TRIM state after each leaf (`trim`).
    pub fn status_text_with(&self, verbose: bool, suspended: bool, trim: bool) -> String {
        let mut s = String::new();
        let health = self.health();
        let errors = self.error_objects();
        let _ = writeln!(s, "  pool: {}", self.spa.name);
        let _ = writeln!(s, " state: {}", if suspended { "SUSPENDED" } else { health.as_str() });
        let reason = if suspended { Reason::IoFailureWait } else { self.status_reason(health, !errors.is_empty()) };
        s.push_str(reason.status_lines());
        let scan = self.spa.scan.stat();
        let rebuilds = self.rebuild_stats();
        let named: Vec<(String, crate::vdev_rebuild::RebuildPhys)> = rebuilds.iter().map(|(_, n, p)| (n.clone(), *p)).collect();
        s.push_str(&scan_and_rebuild_status(&scan, &named, crate::dsl_scan::now()));
        let rebuilding: Vec<u64> = rebuilds.iter().filter(|r| r.2.state == crate::vdev_rebuild::VDEV_REBUILD_ACTIVE).map(|r| r.0).collect();
        let scanning = scan.scanning().then_some(scan.phys.func);
        let removal = self.removal_stat();
        if let Some(r) = &removal {
            s.push_str(&removal_status(r, &self.spa.root_vdev, crate::dsl_scan::now()));
        }
        // The vdev being evacuated is marked "(removing)" (vs_scan_removing).
        let removing = removal.filter(|r| r.phys.state == 1).map(|r| r.phys.removing_vdev);
        let marks = Marks { scanning, removing, rebuilding: &rebuilding, below_rebuild: false, trim };
        let root = &self.spa.root_vdev;
        let cache = self.aux_devices("l2cache");
        let spares = self.aux_devices("spares");
        let mut width = tree_width(root, 0, true).max(10);
        for (n, _) in cache.iter().chain(spares.iter()) {
            width = width.max(n.len() + 2);
        }
        let _ = writeln!(s, "config:\n");
        let _ = writeln!(s, "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}", "NAME", "STATE", "READ", "WRITE", "CKSUM");
        status_row(&mut s, &self.spa.name, health.as_str(), root, 0, width, "");
        for top in root.children.iter().filter(|t| top_class(t) == "") {
            status_tree(&mut s, top, 2, width, marks);
        }
        for class in ["dedup", "special", "logs"] {
            let tops: Vec<_> = root.children.iter().filter(|t| top_class(t) == class).collect();
            if !tops.is_empty() {
                let _ = writeln!(s, "\t{class}\t");
                for t in tops {
                    status_tree(&mut s, t, 2, width, marks);
                }
            }
        }
        if !cache.is_empty() {
            let _ = writeln!(s, "\tcache");
            for (n, st) in &cache {
                let aux = if st == "ONLINE" { "" } else { "  cannot open" };
                let _ = writeln!(s, "\t  {:<w$}  {:<8} {:>5} {:>5} {:>5}{aux}", n, st, 0, 0, 0, w = width - 2);
            }
        }
        if !spares.is_empty() {
            let _ = writeln!(s, "\tspares");
            for (n, st) in &spares {
                let st = if st == "ONLINE" { "AVAIL" } else { st.as_str() };
                let aux = if st == "INUSE" { "  currently in use" } else { "" };
                let _ = writeln!(s, "\t  {:<w$}  {:<8}{aux}", n, st, w = width - 2);
            }
        }
        let _ = writeln!(s);
        if errors.is_empty() {
            let _ = writeln!(s, "errors: No known data errors");
        } else if !verbose {
            let _ = writeln!(s, "errors: {} data errors, use '-v' for a list", errors.len());
        } else {
            let _ = writeln!(s, "errors: Permanent errors have been detected in the following files:\n");
            let list = self.datasets().unwrap_or_default();
            let mut fs = HashMap::new();
            for (os, obj) in errors {
                let _ = writeln!(s, "{:7} {}", "", self.error_path(&list, &mut fs, os, obj));
            }
        }
        s
    }

    /// The damaged (objset, object) pairs, each once, in order.
    fn error_objects(&self) -> Vec<(u64, u64)> {
        let set: std::collections::BTreeSet<(u64, u64)> = self.spa.errors().into_iter().map(|(os, obj, _, _)| (os, obj)).collect();
        set.into_iter().collect()
    }

    /// check_status (libzfs_status.c) for an imported pool, among the reasons this engine
    /// can observe, most serious first.
    fn status_reason(&self, health: VdevState, data_errors: bool) -> Reason {
        // Not found at import (a leaf removed while imported is REMOVED, not missing).
        let missing = self.spa.root_vdev.leaves().iter().any(|l| l.state() == VdevState::Unavail);
        let scan = self.spa.scan.stat();
        let rebuilds = self.rebuild_stats();
        let rebuild_end = rebuilds.iter().filter(|r| r.2.state == crate::vdev_rebuild::VDEV_REBUILD_COMPLETE).map(|r| r.2.end_time).max().unwrap_or(0);
        let scrubbed_after = scan.phys.func == oxzfs_format::dsl::POOL_SCAN_SCRUB && (scan.phys.state != oxzfs_format::dsl::DSS_FINISHED || scan.phys.end_time >= rebuild_end);
        if scan.scanning() && scan.phys.func == oxzfs_format::dsl::POOL_SCAN_RESILVER {
            Reason::Resilvering
        } else if rebuilds.iter().any(|r| r.2.state == crate::vdev_rebuild::VDEV_REBUILD_ACTIVE) {
            // ZPOOL_STATUS_REBUILDING: the same words.
            Reason::Resilvering
        } else if rebuild_end > 0 && !scrubbed_after && scan.phys.state != oxzfs_format::dsl::DSS_SCANNING {
            Reason::RebuildScrub
        } else if health == VdevState::Unavail && missing {
            Reason::MissingDevNr
        } else if data_errors {
            Reason::CorruptData
        } else if self.spa.root_vdev.leaves().iter().any(|l| l.state() == VdevState::Faulted) {
            Reason::FaultedDevR
        } else if missing {
            Reason::MissingDevR
        } else if self.any_cksum() {
            Reason::FailingDev
        } else if self.spa.root_vdev.leaves().iter().any(|l| l.state() == VdevState::Offline) {
            Reason::OfflineDev
        } else if self.spa.root_vdev.leaves().iter().any(|l| l.state() == VdevState::Removed) {
            Reason::RemovedDev
        } else if self.spa.version() < spa::SPA_VERSION_FEATURES {
            // Every legacy version is "older" to OpenZFS 2.1. (Feature-flag pools with
            // features left disabled would report FEAT_DISABLED: not told apart here.)
            Reason::VersionOlder
        } else {
            Reason::Ok
        }
    }

    fn any_cksum(&self) -> bool {
        fn has_errors(v: &Vdev) -> bool {
            v.stats.cksum_errors.load(Ordering::Relaxed) > 0
                || v.stats.read_errors.load(Ordering::Relaxed) > 0
                || v.stats.write_errors.load(Ordering::Relaxed) > 0
                || v.children.iter().any(|c| has_errors(c))
        }
        has_errors(&self.spa.root_vdev)
    }

    /// The guid of the pool's cache device named `dev` (its path, file name or guid).
    pub fn cache_device_guid(&self, dev: &str) -> Option<u64> {
        self.aux_device_guid("l2cache", dev)
    }

    /// The guid of the hot spare `dev` names (its path, file name or guid).
    pub fn spare_device_guid(&self, dev: &str) -> Option<u64> {
        self.aux_device_guid("spares", dev)
    }

    /// The guid of the cache device or spare (`key` "l2cache" or "spares") that `dev` names.
    fn aux_device_guid(&self, key: &str, dev: &str) -> Option<u64> {
        let nv = crate::spa_load::read_mos_packed(&self.spa.mos(), key)?;
        let base = |p: &str| Path::new(p).file_name().map(|f| f.to_string_lossy().into_owned());
        nv.get_nvlist_array(key)?.iter().find_map(|d| {
            let guid = d.get_u64("guid")?;
            let stored = d.get_str("path").map(str::to_string);
            let found = self.aux_found.get(&guid).map(|p| p.display().to_string());
            let named = |p: &Option<String>| p.as_deref().is_some_and(|p| p == dev || base(p).as_deref() == Some(dev));
            (guid.to_string() == dev || named(&stored) || named(&found)).then_some(guid)
        })
    }

    /// Cache or spare devices (the MOS "l2cache"/"spares" packed nvlists, else the config),
    /// with their state: ONLINE when the scan found them (FAULTED: a cache device dropped after
    /// I/O errors), else UNAVAIL under their guid.
    pub fn aux_devices(&self, key: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let stored = crate::spa_load::read_mos_packed(&self.spa.mos(), key);
        let list = stored.as_ref().and_then(|nv| nv.get_nvlist_array(key)).or_else(|| self.spa.config.get_nvlist_array(key));
        for d in list.unwrap_or(&[]) {
            let guid = d.get_u64("guid").unwrap_or(0);
            match self.spa.devices.get(&guid).map(|(p, _)| p).or_else(|| self.aux_found.get(&guid)) {
                // A cache device the L2ARC dropped after I/O errors.
                Some(p) if key == "l2cache" && self.spa.l2arc.devices().iter().any(|d| d.guid == guid && d.faulted) => {
                    out.push((p.display().to_string(), "FAULTED".into()))
                }
                // A hot spare that has taken a device's place (VDEV_AUX_SPARED).
                Some(p) if key == "spares" && self.spa.root_vdev.leaves().iter().any(|l| l.guid == guid) => out.push((p.display().to_string(), "INUSE".into())),
                Some(p) => out.push((p.display().to_string(), "ONLINE".into())),
                // A dRAID's distributed spare (draid2-0-0): space on its dRAID's own children,
                // there as long as the pool is; in use when the tree holds it.
                None if d.get_str("type") == Some("dspare") => {
                    let used = self.spa.root_vdev.any(&|v| v.guid == guid && matches!(v.kind, crate::vdev::VdevKind::DraidSpare { .. }));
                    out.push((d.get_str("path").unwrap_or("?").to_string(), if used { "INUSE" } else { "ONLINE" }.into()))
                }
                None => out.push((d.get_str("path").unwrap_or("?").to_string(), "UNAVAIL".into())),
            }
        }
        out
    }

    /// The path of a damaged object, as `zpool status -v` prints it (zpool_obj_to_path):
    /// the mountpoint and path when the dataset is mounted, else `dataset:path`,
    /// `dataset:<0xOBJ>` when the path is unknown, `<metadata>:<0xOBJ>` for the MOS.
    /// `list` is the pool's datasets, `fs` the ZPLs read so far by this listing.
    fn error_path(&self, list: &[DatasetInfo], fs: &mut HashMap<u64, Option<Arc<Zfs>>>, os_id: u64, obj: u64) -> String {
        if os_id == 0 {
            return format!("<metadata>:<0x{obj:x}>");
        }
        if let Some(ds) = list.iter().find(|d| d.ds_obj == os_id) {
            // Snapshots never change: their cached ZPL will do. A head may have objects made
            // since it was cached: read it as last synced (the error log names only blocks
            // that were synced).
            let z = fs.entry(os_id).or_insert_with(|| {
                if ds.name.contains('@') { self.open_fs(&ds.name) } else { self.load_fs(&ds.name) }.ok()
            });
            return match z.as_ref().and_then(|z| z.path_of(obj)) {
                Some(p) => match self.mounted.lock().unwrap().get(&ds.name) {
                    Some(mp) => format!("{}{}", mp.display().to_string().trim_end_matches('/'), p),
                    None => format!("{}:{}", ds.name, p),
                },
                None => format!("{}:<0x{:x}>", ds.name, obj),
            };
        }
        format!("<0x{os_id:x}>:<0x{obj:x}>")
    }
}

/// The zpool_status_t values this engine reports, with OpenZFS 2.1's texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    Resilvering,
    RebuildScrub,
    OfflineDev,
    RemovedDev,
    IoFailureWait,
    FaultedDevR,
    MissingDevR,
    MissingDevNr,
    CorruptData,
    FailingDev,
    VersionOlder,
    Ok,
}

impl Reason {
    /// The status/action/see lines of `zpool status`.
    fn status_lines(self) -> &'static str {
        match self {
            // (No message id: libzfs_status.c has none for faulted devices.)
            Reason::FaultedDevR => "status: One or more devices are faulted in response to persistent errors.\n\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\naction: Replace the faulted device, or use 'zpool clear' to mark the device\n\trepaired.\n",
            Reason::MissingDevR => "status: One or more devices could not be opened.  Sufficient replicas exist for\n\tthe pool to continue functioning in a degraded state.\naction: Attach the missing device and online it using 'zpool online'.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-2Q\n",
            Reason::MissingDevNr => "status: One or more devices could not be opened.  There are insufficient\n\treplicas for the pool to continue functioning.\naction: Attach the missing device and online it using 'zpool online'.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-3C\n",
            Reason::CorruptData => "status: One or more devices has experienced an error resulting in data\n\tcorruption.  Applications may be affected.\naction: Restore the file in question if possible.  Otherwise restore the\n\tentire pool from backup.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-8A\n",
            Reason::FailingDev => "status: One or more devices has experienced an unrecoverable error.  An\n\tattempt was made to correct the error.  Applications are unaffected.\naction: Determine if the device needs to be replaced, and clear the errors\n\tusing 'zpool clear' or replace the device with 'zpool replace'.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-9P\n",
            Reason::VersionOlder => "status: The pool is formatted using a legacy on-disk format.  The pool can\n\tstill be used, but some features are unavailable.\naction: Upgrade the pool using 'zpool upgrade'.  Once this is done, the\n\tpool will no longer be accessible on software that does not support\n\tfeature flags.\n",
            Reason::OfflineDev => "status: One or more devices has been taken offline by the administrator.\n\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\naction: Online the device using 'zpool online' or replace the device with\n\t'zpool replace'.\n",
            // OpenZFS 2.1's words (the missing quote included).
            Reason::RemovedDev => "status: One or more devices has been removed by the administrator.\n\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\naction: Online the device using zpool online' or replace the device with\n\t'zpool replace'.\n",
            Reason::IoFailureWait => "status: One or more devices are faulted in response to IO failures.\naction: Make sure the affected devices are connected, then run 'zpool clear'.\n   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-HC\n",
            Reason::Resilvering => "status: One or more devices is currently being resilvered.  The pool will\n\tcontinue to function, possibly in a degraded state.\naction: Wait for the resilver to complete.\n",
            Reason::RebuildScrub => "status: One or more devices have been sequentially resilvered, scrubbing\n\tthe pool is recommended.\naction: Use 'zpool scrub' to verify all data checksums.\n",
            Reason::Ok => "",
        }
    }
}

/// Which config section a top-level vdev is printed in: "" (the pool's own tree), or its
/// allocation class ("dedup", "special", "logs").
fn top_class(v: &Vdev) -> &str {
    if !v.is_concrete() {
        "hole"
    } else if v.is_log {
        "logs"
    } else {
        v.alloc_bias.as_str()
    }
}

/// A leaf that was not found at import: OpenZFS marks it "not present", names it by guid
/// in `zpool status` and adds "was PATH".
fn not_present(v: &Vdev) -> bool {
    v.is_leaf() && v.dev.is_none() && v.state() != VdevState::Removed
}

/// The name column of a vdev (zpool_vdev_name with the type-id suffix); `imported`
/// selects `zpool status`'s guid for devices not present over the import listing's path.
fn vdev_name(v: &Vdev, imported: bool) -> String {
    match (&v.kind, &v.path) {
        (VdevKind::Leaf { .. }, _) if imported && not_present(v) => v.guid.to_string(),
        (VdevKind::Leaf { .. }, Some(p)) if v.dev.is_none() => p.clone(),
        _ => v.display_name(),
    }
}

/// max_width: the widest `depth + name` below (and including) `v`, children two deeper.
fn tree_width(v: &Vdev, depth: usize, imported: bool) -> usize {
    let own = if depth == 0 { 0 } else { vdev_name(v, imported).len() + depth };
    v.children.iter().filter(|c| c.is_concrete()).map(|c| tree_width(c, depth + 2, imported)).fold(own, usize::max)
}

/// The auxiliary words after a row ("  was PATH", "  cannot open", ...).
fn aux_text(v: &Vdev, imported: bool) -> String {
    if not_present(v) {
        if imported {
            format!("  was {}", v.path.as_deref().unwrap_or("-"))
        } else {
            "  cannot open".into()
        }
    } else if v.is_leaf() && v.stats.fault_external.load(std::sync::atomic::Ordering::Relaxed) && matches!(v.state(), VdevState::Faulted | VdevState::Degraded) {
        "  external device fault".into()
    } else if v.is_leaf() && v.state() == VdevState::Faulted {
        "  too many errors".into()
    } else if !v.is_leaf() && matches!(v.state(), VdevState::Unavail | VdevState::Faulted) {
        "  insufficient replicas".into()
    } else {
        String::new()
    }
}

fn status_row(s: &mut String, name: &str, state: &str, v: &Vdev, depth: usize, width: usize, aux: &str) {
    let count = |a: &std::sync::atomic::AtomicU64| crate::nicenum::nicenum(a.load(Ordering::Relaxed));
    let _ = writeln!(
        s,
        "\t{:depth$}{:<w$}  {:<8} {:>5} {:>5} {:>5}{}",
        "",
        name,
        state,
        count(&v.stats.read_errors),
        count(&v.stats.write_errors),
        count(&v.stats.cksum_errors),
        aux,
        w = width.saturating_sub(depth)
    );
}

/// What print_status_config marks on the rows: `scanning`, the func of the scan under way
/// (the leaves it wrote to: "(resilvering)" or "(repairing)"); `removing`, the top-level vdev
/// being evacuated ("(removing)", which OpenZFS prints from 2.2 on).
/// `rebuilding`: the top-level vdevs whose sequential resilver is active (their leaves it
/// wrote to: "(resilvering)"), and whether the vdev printed is below one of them.
#[derive(Clone, Copy)]
struct Marks<'a> {
    scanning: Option<u64>,
    removing: Option<u64>,
    rebuilding: &'a [u64],
    below_rebuild: bool,
    /// `zpool status -t`: every leaf's TRIM state, not only "(trimming)".
    trim: bool,
}

fn status_tree(s: &mut String, v: &Vdev, depth: usize, width: usize, mut marks: Marks) {
    if !v.is_concrete() {
        return;
    }
    let mut aux = aux_text(v, true);
    if depth == 2 && marks.removing == Some(v.id) {
        aux.push_str("  (removing)");
    }
    if let Some(func) = marks.scanning.filter(|_| v.is_leaf() && v.state() == VdevState::Online && v.stats.scan_processed.load(Ordering::Relaxed) != 0) {
        aux.push_str(if func == oxzfs_format::dsl::POOL_SCAN_RESILVER { "  (resilvering)" } else { "  (repairing)" });
    }
    if depth == 2 {
        marks.below_rebuild = marks.rebuilding.contains(&v.id);
    }
    if marks.below_rebuild && v.is_leaf() && v.state() == VdevState::Online && v.stats.rebuild_processed.load(Ordering::Relaxed) != 0 && !aux.ends_with("(resilvering)") {
        aux.push_str("  (resilvering)");
    }
    if v.is_leaf() {
        let removing = depth == 2 && marks.removing == Some(v.id);
        aux.push_str(&trim_status(&v.trim_stat(), marks.trim, removing));
    }
    status_row(s, &vdev_name(v, true), v.state().as_str(), v, depth, width, &aux);
    for c in &v.children {
        status_tree(s, c, depth + 2, width, marks);
    }
}

/// Give the pool's cache devices that were found to its L2ARC (rebuilt from their log blocks,
/// fed when the pool is writable). The sector size is the one the pool's l2cache list records
/// for the device, else 512 bytes (what OpenZFS finds for a file).
fn attach_cache_devices(spa: &Arc<Spa>, found: &HashMap<u64, PathBuf>) {
    let Some(nv) = crate::spa_load::read_mos_packed(&spa.mos(), "l2cache") else { return };
    let devs: Vec<(u64, PathBuf, u8)> = nv
        .get_nvlist_array("l2cache")
        .unwrap_or(&[])
        .iter()
        .filter_map(|d| {
            let guid = d.get_u64("guid")?;
            Some((guid, found.get(&guid)?.clone(), d.get_u64("ashift").unwrap_or(9).clamp(9, 16) as u8))
        })
        .collect();
    spa.open_cache_devices(&devs);
}

/// Probe the files of the import directories for the pool's cache and spare devices
/// (labels in the L2CACHE or SPARE state carry only their own guid).
fn find_aux_devices(spa: &Arc<Spa>, dirs: &[PathBuf]) -> HashMap<u64, PathBuf> {
    let mut wanted = std::collections::HashSet::new();
    for key in ["l2cache", "spares"] {
        if let Some(nv) = crate::spa_load::read_mos_packed(&spa.mos(), key) {
            for d in nv.get_nvlist_array(key).unwrap_or(&[]) {
                wanted.insert(d.get_u64("guid").unwrap_or(0));
            }
        }
    }
    let mut found = HashMap::new();
    if wanted.is_empty() {
        return found;
    }
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else { continue };
        for p in rd.filter_map(|e| e.ok().map(|e| e.path())).take(100_000) {
            if let Ok(pd) = spa::probe(&p) {
                if wanted.contains(&pd.guid) && !found.contains_key(&pd.guid) {
                    found.insert(pd.guid, p);
                }
            }
        }
    }
    found
}


/// What `zpool import -d DIR` prints for the pools found, as OpenZFS 2.1's show_import:
/// the reason's "status:" line (2.1 prints it without the leading space the other labels
/// have), the action for the pool's state, the message id, and the config with the name
/// column as wide as the widest of the pool name, indented vdev names, and 10.
pub fn import_listing(scan: &ScanResult) -> String {
    let mut s = String::new();
    for (i, c) in scan.pools.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        let _ = writeln!(s, "   pool: {}", c.name);
        let _ = writeln!(s, "     id: {}", c.guid);
        let state = c.state.as_str();
        let destroyed = c.pool_state == 2;
        let _ = writeln!(s, "  state: {}{}", state, if destroyed { " (DESTROYED)" } else { "" });
        let missing_leaf = c.root.leaves().iter().any(|l| l.dev.is_none());
        let missing_top = c.root.children.iter().any(|t| t.is_missing_top());
        let version = c.config.get_u64("version").unwrap_or(0);
        let unsupported = c.problems.iter().find(|p| p.contains("unsupported vdev type"));
        let mut msgid = None;
        if let Some(p) = unsupported {
            let what = p.rsplit("unsupported: ").next().unwrap_or(p);
            let _ = writeln!(s, "status: The pool uses a vdev type this system does not support ({what}).");
            let _ = writeln!(s, " action: The pool cannot be imported on this system.");
        } else {
            if missing_leaf || missing_top {
                let _ = writeln!(s, "status: One or more devices are missing from the system.");
                msgid = Some(if missing_top {
                    "ZFS-8000-6X"
                } else if state == "UNAVAIL" {
                    "ZFS-8000-3C"
                } else {
                    "ZFS-8000-2Q"
                });
            } else if c.root.leaves().iter().any(|l| l.state() == VdevState::Offline) {
                let _ = writeln!(s, "status: One or more devices are offlined.");
            } else if (1..spa::SPA_VERSION_FEATURES).contains(&version) {
                let _ = writeln!(s, "status: The pool is formatted using a legacy on-disk version.");
            }
            // As OpenZFS words a pool with features it reads but cannot write.
            let draid = c.root.children.iter().find(|t| matches!(t.kind, crate::vdev::VdevKind::Draid(_)));
            if let (Some(t), None, "ONLINE" | "DEGRADED") = (draid, msgid, state) {
                let _ = writeln!(s, "status: The pool can only be accessed in read-only mode on this system. It\n\tcannot be accessed in read-write mode because it uses dRAID vdevs ({}),\n\twhich oxzfs reads but does not write.", t.display_name());
                let _ = writeln!(s, " action: The pool can be imported in read-only mode.");
            } else {
                match state {
                    "ONLINE" if msgid.is_none() && (1..spa::SPA_VERSION_FEATURES).contains(&version) => {
                        let _ = writeln!(s, " action: The pool can be imported using its name or numeric identifier, though\n\tsome features will not be available without an explicit 'zpool upgrade'.");
                    }
                    "ONLINE" => {
                        let _ = writeln!(s, " action: The pool can be imported using its name or numeric identifier.");
                    }
                    "DEGRADED" => {
                        let _ = writeln!(s, " action: The pool can be imported despite missing or damaged devices.  The\n\tfault tolerance of the pool may be compromised if imported.");
                    }
                    _ if msgid.is_some() => {
                        let _ = writeln!(s, " action: The pool cannot be imported. Attach the missing\n\tdevices and try again.");
                    }
                    _ => {
                        let _ = writeln!(s, " action: The pool cannot be imported due to damaged devices or data.");
                    }
                }
            }
        }
        if let Some(comment) = c.config.get_str("comment") {
            let _ = writeln!(s, "comment: {comment}");
        }
        if let Some(id) = msgid {
            let _ = writeln!(s, "   see: https://openzfs.github.io/openzfs-docs/msg/{id}");
        }
        let _ = writeln!(s, " config:\n");
        let width = tree_width(&c.root, 0, false).max(c.name.len()).max(10);
        // The root's aux state: a top-level vdev whose labels were not found (a log device,
        // say) leaves the guid sum short (VDEV_AUX_BAD_GUID_SUM, "missing device"); leaves
        // missing from a top-level vdev leave it without replicas.
        let aux = match state {
            "UNAVAIL" if missing_top => "  missing device",
            "UNAVAIL" => "  insufficient replicas",
            _ => "",
        };
        let _ = writeln!(s, "\t{:<width$}  {}{}", c.name, state, aux);
        for top in c.root.children.iter().filter(|t| top_class(t) == "") {
            import_tree(&mut s, top, 2, width);
        }
        for class in ["dedup", "special", "logs"] {
            let tops: Vec<_> = c.root.children.iter().filter(|t| top_class(t) == class).collect();
            if !tops.is_empty() {
                let _ = writeln!(s, "\t{class}\t");
                for t in tops {
                    import_tree(&mut s, t, 2, width);
                }
            }
        }
        if missing_top {
            let _ = writeln!(s, "\n\tAdditional devices are known to be part of this pool, though their\n\texact configuration cannot be determined.");
        }
    }
    for p in &scan.problems {
        let _ = writeln!(s, "{p}");
    }
    s
}

/// print_import_config: name and state, no counters; holes and missing top-levels print nothing.
fn import_tree(s: &mut String, v: &Vdev, depth: usize, width: usize) {
    if !v.is_concrete() {
        return;
    }
    let st = if not_present(v) { "UNAVAIL" } else { v.state().as_str() };
    let _ = writeln!(s, "\t{:depth$}{:<w$}  {}{}", "", vdev_name(v, false), st, aux_text(v, false), w = width.saturating_sub(depth));
    for c in &v.children {
        import_tree(s, c, depth + 2, width);
    }
}

/// The zfs_arc_max tunable (or OXZFS_ARC_MAX, see `tunables`) caps the ARC of pools the daemon
/// imports.
fn arc_max_from_env() -> Option<u64> {
    crate::tunables::arc_max()
}

/// print_scan_status of OpenZFS 2.1: the scrub's lines when the last scan was a scrub, then
/// the resilver's or the sequential resilvers' (`rebuilds`: each top-level vdev's name and
/// record), whichever is active, else whichever ended last.
pub fn scan_and_rebuild_status(st: &crate::dsl_scan::ScanInner, rebuilds: &[(String, crate::vdev_rebuild::RebuildPhys)], now: u64) -> String {
    use crate::vdev_rebuild::VDEV_REBUILD_ACTIVE;
    use oxzfs_format::dsl::{DSS_SCANNING, POOL_SCAN_RESILVER, POOL_SCAN_SCRUB};
    let p = &st.phys;
    let have_resilver = p.func == POOL_SCAN_RESILVER;
    let resilver_end = if have_resilver { p.end_time } else { 0 };
    let active_resilver = have_resilver && p.state == DSS_SCANNING;
    let active_rebuild = rebuilds.iter().any(|r| r.1.state == VDEV_REBUILD_ACTIVE);
    let rebuild_end = if active_rebuild { 0 } else { rebuilds.iter().map(|r| r.1.end_time).max().unwrap_or(0) };
    let mut s = String::new();
    if p.func == POOL_SCAN_SCRUB {
        s.push_str(&scan_status(st, now));
    }
    if active_resilver || (!active_rebuild && have_resilver && resilver_end > 0 && resilver_end > rebuild_end) {
        s.push_str(&scan_status(st, now));
    } else if active_rebuild || (!active_resilver && rebuild_end > 0 && rebuild_end > resilver_end) {
        for (name, r) in rebuilds {
            s.push_str(&rebuild_status(name, r));
        }
    }
    s
}

/// The `scan:` lines of one top-level vdev's sequential resilver (print_rebuild_status_impl
/// of OpenZFS 2.1; the rates over the run time the record holds).
pub fn rebuild_status(name: &str, r: &crate::vdev_rebuild::RebuildPhys) -> String {
    use crate::nicenum::nicebytes;
    use crate::vdev_rebuild::{VDEV_REBUILD_ACTIVE, VDEV_REBUILD_CANCELED, VDEV_REBUILD_COMPLETE};
    let mut s = String::from("  scan: ");
    match r.state {
        VDEV_REBUILD_COMPLETE => {
            let _ = write!(s, "resilvered ({name}) {} in {} with {} errors on {}", nicebytes(r.bytes_rebuilt), secs_to_dhms(r.scan_time_ms / 1000), r.errors, ctime(r.end_time));
            return s;
        }
        VDEV_REBUILD_CANCELED => {
            let _ = write!(s, "resilver ({name}) canceled on {}", ctime(r.end_time));
            return s;
        }
        VDEV_REBUILD_ACTIVE => {
            let _ = write!(s, "resilver ({name}) in progress since {}", ctime(r.start_time));
        }
        _ => return String::new(),
    }
    let scan_rate = (r.bytes_scanned / (r.scan_time_ms + 1)) * 1000;
    let issue_rate = (r.bytes_issued / (r.scan_time_ms + 1)) * 1000;
    let pct = (r.bytes_scanned as f64 * 100.0 / (r.bytes_est + 1) as f64).min(100.0);
    let left = secs_to_dhms(r.bytes_est.saturating_sub(r.bytes_scanned) / scan_rate.max(1));
    let _ = writeln!(s, "\t{} scanned at {}/s, {} issued {}/s, {} total", nicebytes(r.bytes_scanned), nicebytes(scan_rate), nicebytes(r.bytes_issued), nicebytes(issue_rate), nicebytes(r.bytes_est));
    let _ = write!(s, "\t{} resilvered, {pct:.2}% done", nicebytes(r.bytes_rebuilt));
    if scan_rate >= 10 << 20 {
        let _ = writeln!(s, ", {left} to go");
    } else {
        s.push_str(", no estimated completion time\n");
    }
    s
}

/// The `scan:` line of `zpool status` (print_scan_status and print_scan_scrub_resilver_status
/// of OpenZFS 2.1): nothing for a pool never scrubbed, as 2.1 prints it.
pub fn scan_status(st: &crate::dsl_scan::ScanInner, now: u64) -> String {
    use crate::nicenum::nicebytes;
    use oxzfs_format::dsl::{DSS_CANCELED, DSS_FINISHED, POOL_SCAN_RESILVER, POOL_SCAN_SCRUB};
    let p = &st.phys;
    if p.func != POOL_SCAN_SCRUB && p.func != POOL_SCAN_RESILVER {
        return String::new();
    }
    let resilver = p.func == POOL_SCAN_RESILVER;
    let mut s = String::from("  scan: ");
    let processed = nicebytes(p.processed);
    if p.state == DSS_FINISHED {
        let took = secs_to_dhms(p.end_time.saturating_sub(p.start_time));
        let what = if resilver { "resilvered" } else { "scrub repaired" };
        let _ = write!(s, "{what} {processed} in {took} with {} errors on {}", p.errors, ctime(p.end_time));
        return s;
    }
    if p.state == DSS_CANCELED {
        let _ = write!(s, "{} canceled on {}", if resilver { "resilver" } else { "scrub" }, ctime(p.end_time));
        return s;
    }
    // Resilvers are never paused.
    let paused = st.pass_scrub_pause != 0 && !resilver;
    if resilver {
        let _ = write!(s, "resilver in progress since {}", ctime(p.start_time));
    } else if paused {
        let _ = write!(s, "scrub paused since {}\tscrub started on {}", ctime(st.pass_scrub_pause), ctime(p.start_time));
    } else {
        let _ = write!(s, "scrub in progress since {}", ctime(p.start_time));
    }
    let (scanned, issued, total) = (p.examined, st.issued(), p.to_examine);
    let fraction_done = issued as f64 / total as f64;
    let elapsed = now.saturating_sub(st.pass_start).saturating_sub(st.pass_scrub_spent_paused).max(1);
    let (scan_rate, issue_rate) = (st.pass_exam / elapsed, st.pass_issued / elapsed);
    let secs_left = if issue_rate != 0 && total >= issued { Some((total - issued) / issue_rate) } else { None };
    if paused {
        let _ = writeln!(s, "\t{} scanned, {} issued, {} total", nicebytes(scanned), nicebytes(issued), nicebytes(total));
    } else {
        let _ = writeln!(s, "\t{} scanned at {}/s, {} issued at {}/s, {} total", nicebytes(scanned), nicebytes(scan_rate), nicebytes(issued), nicebytes(issue_rate), nicebytes(total));
    }
    let _ = write!(s, "\t{processed} {}, {:.2}% done", if resilver { "resilvered" } else { "repaired" }, 100.0 * fraction_done);
    if paused {
        s.push('\n');
    } else {
        match secs_left {
            Some(left) if issue_rate >= 10 << 20 && issued > 0 => {
                let _ = writeln!(s, ", {} to go", secs_to_dhms(left));
            }
            _ => s.push_str(", no estimated completion time\n"),
        }
    }
    s
}

/// secs_to_dhms: "01:02:03", or "2 days 01:02:03".
fn secs_to_dhms(total: u64) -> String {
    let (days, hours, mins, secs) = (total / 86400, (total / 3600) % 24, (total / 60) % 60, total % 60);
    if days > 0 {
        format!("{days} days {hours:02}:{mins:02}:{secs:02}")
    } else {
        format!("{hours:02}:{mins:02}:{secs:02}")
    }
}

/// What `zpool status` shows of device removal (pool_removal_stat_t, spa_removal_get_stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovalStat {
    pub phys: oxzfs_format::removal::SpaRemovingPhys,
    /// Bytes of memory the mappings of every removed vdev take.
    pub mapping_memory: u64,
}

impl Pool {
    /// The pool's removal state (spa_removing_phys in the MOS directory), None when no device
    /// was ever removed with evacuation.
    /// The rebuild record of each top-level vdev that has one (vdev_rebuild_get_stats), with
    /// the vdev's name (zpool_vdev_name, VDEV_NAME_TYPE_ID), as the last sync left them.
    pub fn rebuild_stats(&self) -> Vec<(u64, String, crate::vdev_rebuild::RebuildPhys)> {
        use crate::vdev_rebuild::{RebuildPhys, VDEV_REBUILD_NONE, VDEV_TOP_ZAP_VDEV_REBUILD_PHYS};
        let mos = self.spa.mos();
        let Some(cfg) = crate::spa_load::read_mos_packed(&mos, "config") else { return Vec::new() };
        let Some(tops) = cfg.get_nvlist("vdev_tree").and_then(|t| t.get_nvlist_array("children")) else { return Vec::new() };
        let mut out = Vec::new();
        for (i, t) in tops.iter().enumerate() {
            let Some(zap) = t.get_u64("com.delphix:vdev_zap_top") else { continue };
            let Some(e) = crate::zap::zap_lookup(&mos, zap, VDEV_TOP_ZAP_VDEV_REBUILD_PHYS.as_bytes()).ok().flatten() else { continue };
            let Some(p) = RebuildPhys::from_words(&e.value_u64s()).filter(|p| p.state != VDEV_REBUILD_NONE) else { continue };
            let name = self.spa.root_vdev.children.get(i).map_or_else(|| i.to_string(), |v| vdev_name(v, true));
            out.push((i as u64, name, p));
        }
        out
    }

    pub fn removal_stat(&self) -> Option<RemovalStat> {
        let mos = self.spa.mos();
        let e = crate::zap::zap_lookup(&mos, 1, oxzfs_format::removal::DMU_POOL_REMOVING.as_bytes()).ok().flatten()?;
        let phys = oxzfs_format::removal::SpaRemovingPhys::from_words(&e.value_u64s()).ok()?;
        if phys.state == 0 {
            return None;
        }
        Some(RemovalStat { phys, mapping_memory: mapping_memory(&self.spa.root_vdev, phys.prev_indirect_vdev) })
    }
}

/// The memory of the mappings along the chain of removed vdevs that starts at `id`.
pub fn mapping_memory(root: &Vdev, mut id: u64) -> u64 {
    let mut total = 0;
    let mut hops = 0;
    while id != u64::MAX && hops <= root.children.len() {
        let Some(cfg) = root.children.get(id as usize).and_then(|t| t.indirect.as_ref()) else { break };
        total += cfg.mapping().map_or(0, |m| m.size());
        id = cfg.prev_indirect_vdev;
        hops += 1;
    }
    total
}

/// The `remove:` lines of `zpool status` (print_removal_status of OpenZFS 2.1).
pub fn removal_status(r: &RemovalStat, root: &Vdev, now: u64) -> String {
    use crate::nicenum::nicenum;
    let p = &r.phys;
    let name = root.children.get(p.removing_vdev as usize).map(|v| vdev_name(v, true)).unwrap_or_else(|| p.removing_vdev.to_string());
    let mut s = String::from("remove: ");
    match p.state {
        2 => {
            let minutes = p.end_time.saturating_sub(p.start_time) / 60;
            let _ = write!(s, "Removal of vdev {} copied {} in {}h{}m, completed on {}", p.removing_vdev, nicenum(p.copied), minutes / 60, minutes % 60, ctime(p.end_time));
        }
        3 => {
            let _ = write!(s, "Removal of {name} canceled on {}", ctime(p.end_time));
        }
        _ => {
            let _ = write!(s, "Evacuation of {name} in progress since {}", ctime(p.start_time));
            let copied = p.copied.max(1);
            let total = p.to_copy;
            let elapsed = now.saturating_sub(p.start_time).max(1);
            // OpenZFS keeps the rate in a uint_t.
            let rate = ((copied / elapsed) as u32).max(1) as u64;
            let mins_left = (total.saturating_sub(copied) / rate) / 60;
            let hours_left = mins_left / 60;
            let _ = write!(s, "\t{} copied out of {} at {}/s, {:.2}% done", nicenum(copied), nicenum(total), nicenum(rate), 100.0 * copied as f64 / total.max(1) as f64);
            if hours_left < 30 * 24 {
                let _ = writeln!(s, ", {}h{}m to go", hours_left, mins_left % 60);
            } else {
                let _ = writeln!(s, ", (copy is slow, no estimated time)");
            }
        }
    }
    if r.mapping_memory > 0 {
        let _ = writeln!(s, "\t{} memory used for removed device mappings", nicenum(r.mapping_memory));
    }
    s
}

/// print_status_trim: a leaf's TRIM state after its row; with -t (`verbose`) every leaf's
/// (its share done, or "untrimmed", or "trim unsupported"), else only "(trimming)".
fn trim_status(t: &crate::vdev_trim::TrimStat, verbose: bool, removing: bool) -> String {
    use crate::vdev_trim::{VDEV_TRIM_ACTIVE, VDEV_TRIM_COMPLETE, VDEV_TRIM_SUSPENDED};
    if !verbose {
        return if t.state == VDEV_TRIM_ACTIVE { "  (trimming)".into() } else { String::new() };
    }
    if matches!(t.state, VDEV_TRIM_ACTIVE | VDEV_TRIM_SUSPENDED | VDEV_TRIM_COMPLETE) && !removing {
        let pct = if t.state == VDEV_TRIM_COMPLETE { 100 } else { t.bytes_done * 100 / (t.bytes_est + 1) };
        let when = ctime(t.action_time);
        let when = when.trim_end_matches('\n');
        let what = match t.state {
            VDEV_TRIM_SUSPENDED => "suspended, started at",
            VDEV_TRIM_ACTIVE => "started at",
            _ => "completed at",
        };
        format!("  ({pct}% trimmed, {what} {when})")
    } else if t.notsup {
        "  (trim unsupported)".into()
    } else {
        "  (untrimmed)".into()
    }
}

/// ctime(3): "Wed Nov 25 12:00:00 2026\n" in the local time zone.
fn ctime(t: u64) -> String {
    let mut buf = [0 as libc::c_char; 64];
    let tt = t as libc::time_t;
    // SAFETY: ctime_r writes at most 26 bytes into the 64-byte buffer and NUL-terminates it.
    let p = unsafe { libc::ctime_r(&tt, buf.as_mut_ptr()) };
    if p.is_null() {
        return format!("{t}\n");
    }
    // SAFETY: a non-null return is the NUL-terminated string in `buf`.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod scan_status_tests {
    use super::*;
    use crate::dsl_scan::ScanState;
    use oxzfs_format::dsl::{DslScanPhys, DSF_SCRUB_PAUSED, DSS_CANCELED, DSS_FINISHED, DSS_SCANNING, POOL_SCAN_SCRUB};

    fn line(phys: Option<DslScanPhys>, at: u64, now: u64) -> String {
        std::env::set_var("TZ", "UTC");
        scan_status(&ScanState::new(phys, at).stat(), now)
    }

    #[test]
    fn scan_lines_as_openzfs_prints_them() {
        assert_eq!(line(None, 0, 0), "");
        let t0 = 1_795_608_000; // Wed Nov 25 12:00:00 2026 UTC
        let done = DslScanPhys { func: POOL_SCAN_SCRUB, state: DSS_FINISHED, start_time: t0 - 61, end_time: t0, processed: 1536, errors: 0, ..Default::default() };
        assert_eq!(line(Some(done.clone()), t0, t0), "  scan: scrub repaired 1.50K in 00:01:01 with 0 errors on Wed Nov 25 12:00:00 2026\n");
        let gone = DslScanPhys { state: DSS_CANCELED, ..done.clone() };
        assert_eq!(line(Some(gone), t0, t0), "  scan: scrub canceled on Wed Nov 25 12:00:00 2026\n");
        let running = DslScanPhys { state: DSS_SCANNING, end_time: 0, to_examine: 100 << 20, examined: 1 << 20, ..done.clone() };
        let st = ScanState::new(Some(running.clone()), t0);
        let text = |exam: u64| {
            {
                let mut s = st.lock();
                s.pass_exam = exam;
                s.pass_issued = exam;
            }
            scan_status(&st.stat(), t0 + 1)
        };
        let head = "  scan: scrub in progress since Wed Nov 25 11:58:59 2026\n";
        assert_eq!(text(20 << 20), format!("{head}\t1M scanned at 20M/s, 21M issued at 20M/s, 100M total\n\t1.50K repaired, 21.00% done, 00:00:03 to go\n"));
        // Under 10M/s OpenZFS makes no guess.
        assert_eq!(text(2 << 20), format!("{head}\t1M scanned at 2M/s, 3M issued at 2M/s, 100M total\n\t1.50K repaired, 3.00% done, no estimated completion time\n"));
        let paused = DslScanPhys { flags: DSF_SCRUB_PAUSED, ..running };
        assert_eq!(
            line(Some(paused), t0, t0 + 5),
            "  scan: scrub paused since Wed Nov 25 12:00:00 2026\n\tscrub started on Wed Nov 25 11:58:59 2026\n\t1M scanned, 1M issued, 100M total\n\t1.50K repaired, 1.00% done\n"
        );
    }

    #[test]
    fn resilver_lines_as_openzfs_prints_them() {
        let t0 = 1_795_608_000; // Wed Nov 25 12:00:00 2026 UTC
        let done = DslScanPhys { func: oxzfs_format::dsl::POOL_SCAN_RESILVER, state: DSS_FINISHED, start_time: t0 - 3, end_time: t0, processed: 3 << 20, ..Default::default() };
        assert_eq!(line(Some(done.clone()), t0, t0), "  scan: resilvered 3M in 00:00:03 with 0 errors on Wed Nov 25 12:00:00 2026\n");
        let gone = DslScanPhys { state: DSS_CANCELED, ..done.clone() };
        assert_eq!(line(Some(gone), t0, t0), "  scan: resilver canceled on Wed Nov 25 12:00:00 2026\n");
        let running = DslScanPhys { state: DSS_SCANNING, end_time: 0, to_examine: 100 << 20, examined: 1 << 20, ..done };
        assert_eq!(
            line(Some(running), t0, t0),
            "  scan: resilver in progress since Wed Nov 25 11:59:57 2026\n\t1M scanned at 0B/s, 1M issued at 0B/s, 100M total\n\t3M resilvered, 1.00% done, no estimated completion time\n"
        );
    }
}

#[cfg(test)]
mod removal_status_tests {
    use super::*;
    use oxzfs_format::removal::SpaRemovingPhys;

    fn root_of_two() -> Vdev {
        use oxzfs_format::nvlist::{NvList, NvValue};
        let node = |typ: &str, id: u64, path: Option<&str>, kids: Vec<NvList>| {
            let mut nv = NvList::new();
            nv.add_str("type", typ);
            nv.add_u64("id", id);
            nv.add_u64("guid", 10 + id);
            if let Some(p) = path {
                nv.add_str("path", p);
            }
            if !kids.is_empty() {
                nv.insert("children", NvValue::NvListArray(kids));
            }
            nv
        };
        let mirror = node("mirror", 1, None, vec![node("file", 0, Some("/d/b"), vec![]), node("file", 1, Some("/d/c"), vec![])]);
        let root = node("root", 0, None, vec![node("file", 0, Some("/d/a"), vec![]), mirror]);
        std::sync::Arc::try_unwrap(Vdev::from_config(&root, &Default::default(), 0).unwrap()).ok().unwrap()
    }

    #[test]
    fn removal_lines_as_openzfs_2_1_prints_them() {
        std::env::set_var("TZ", "UTC");
        let t0 = 1_795_608_000; // Wed Nov 25 12:00:00 2026 UTC
        let root = root_of_two();
        let mut p = SpaRemovingPhys { state: 1, removing_vdev: 1, prev_indirect_vdev: u64::MAX, start_time: t0, end_time: 0, to_copy: 100 << 20, copied: 25 << 20 };
        // In progress: 25M in 100 s, 75M to go at 262144 B/s = 300 s.
        let s = removal_status(&RemovalStat { phys: p, mapping_memory: 0 }, &root, t0 + 100);
        assert_eq!(s, "remove: Evacuation of mirror-1 in progress since Wed Nov 25 12:00:00 2026\n\t25M copied out of 100M at 256K/s, 25.00% done, 0h5m to go\n");
        p.state = 2;
        p.end_time = t0 + 3 * 3600 + 7 * 60 + 5;
        p.copied = p.to_copy;
        let s = removal_status(&RemovalStat { phys: p, mapping_memory: 3552 }, &root, t0);
        assert_eq!(s, "remove: Removal of vdev 1 copied 100M in 3h7m, completed on Wed Nov 25 15:07:05 2026\n\t3.47K memory used for removed device mappings\n");
        p.state = 3;
        let s = removal_status(&RemovalStat { phys: p, mapping_memory: 0 }, &root, t0);
        assert_eq!(s, "remove: Removal of mirror-1 canceled on Wed Nov 25 15:07:05 2026\n");
    }

    #[test]
    fn rebuild_lines_as_openzfs_2_1_prints_them() {
        use crate::dsl_scan::ScanState;
        use crate::vdev_rebuild::RebuildPhys;
        use oxzfs_format::dsl::DslScanPhys;
        std::env::set_var("TZ", "UTC");
        let t0 = 1_795_608_000; // Wed Nov 25 12:00:00 2026 UTC
        // 20M of 80M scanned in 999 ms: (20M / 1000) * 1000 B/s as OpenZFS counts, 60M to go in 3 s.
        let mut r = RebuildPhys { state: 1, start_time: t0, scan_time_ms: 999, bytes_scanned: 20 << 20, bytes_issued: 20 << 20, bytes_rebuilt: 20 << 20, bytes_est: 80 << 20, ..Default::default() };
        assert_eq!(rebuild_status("mirror-0", &r), "  scan: resilver (mirror-0) in progress since Wed Nov 25 12:00:00 2026\n\t20M scanned at 20.0M/s, 20M issued 20.0M/s, 80M total\n\t20M resilvered, 25.00% done, 00:00:03 to go\n");
        r.state = 3;
        r.end_time = t0 + 61;
        r.scan_time_ms = 61_000;
        assert_eq!(rebuild_status("mirror-0", &r), "  scan: resilvered (mirror-0) 20M in 00:01:01 with 0 errors on Wed Nov 25 12:01:01 2026\n");
        // A finished scrub and the rebuild before it: both, the scrub first.
        let scrub = DslScanPhys { func: 1, state: 2, start_time: t0 + 62, end_time: t0 + 63, ..Default::default() };
        let st = ScanState::new(Some(scrub), t0).stat();
        let both = scan_and_rebuild_status(&st, &[("mirror-0".into(), r)], t0 + 64);
        assert!(both.starts_with("  scan: scrub repaired 0B in 00:00:01 with 0 errors on ") && both.contains("\n  scan: resilvered (mirror-0) 20M in 00:01:01"), "{both}");
    }

    /// The rows print_status_config marks: a leaf a sequential resilver has written to
    /// (vs_rebuild_processed), below a top-level vdev whose rebuild is active, is
    /// "(resilvering)"; a leaf a healing scan wrote to (vs_scan_processed) is "(resilvering)"
    /// or, for a scrub, "(repairing)", and never twice.
    #[test]
    fn resilvering_and_repairing_marks_as_openzfs_prints_them() {
        use oxzfs_format::dsl::{POOL_SCAN_RESILVER, POOL_SCAN_SCRUB};
        use oxzfs_format::nvlist::{NvList, NvValue};
        // A mirror of two file leaves that are there (ONLINE).
        let dir = std::env::temp_dir().join(format!("oxzfs-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut devices = crate::vdev::DeviceMap::new();
        let leaf = |name: &str, id: u64, devices: &mut crate::vdev::DeviceMap| {
            let path = dir.join(name);
            std::fs::File::create(&path).unwrap().set_len(64 << 20).unwrap();
            let dev: std::sync::Arc<dyn crate::vdev::BlockDevice> = std::sync::Arc::new(crate::vdev::FileDevice::open(&path, false).unwrap());
            devices.insert(20 + id, (path.clone(), dev));
            let mut nv = NvList::new();
            nv.add_str("type", "file");
            nv.add_u64("id", id);
            nv.add_u64("guid", 20 + id);
            nv.add_str("path", path.to_str().unwrap());
            nv
        };
        let kids = vec![leaf("b", 0, &mut devices), leaf("c", 1, &mut devices)];
        let mut mirror = NvList::new();
        mirror.add_str("type", "mirror");
        mirror.add_u64("id", 1);
        mirror.add_u64("guid", 30);
        mirror.insert("children", NvValue::NvListArray(kids));
        let mut rootnv = NvList::new();
        rootnv.add_str("type", "root");
        rootnv.add_u64("id", 0);
        rootnv.add_u64("guid", 40);
        rootnv.insert("children", NvValue::NvListArray(vec![mirror]));
        let root = Vdev::from_config(&rootnv, &devices, 0).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let rows = |marks: Marks| {
            let mut s = String::new();
            for t in &root.children {
                status_tree(&mut s, t, 2, 12, marks);
            }
            s.lines().map(|l| (l.split_whitespace().next().unwrap_or("").to_string(), l.trim_end().to_string())).collect::<Vec<_>>()
        };
        let marked = |marks: Marks, mark: &str| -> Vec<String> { rows(marks).into_iter().filter(|(_, l)| l.ends_with(mark)).map(|(n, _)| n).collect() };
        let none = Marks { scanning: None, removing: None, rebuilding: &[], below_rebuild: false, trim: false };
        let (b, c) = (&root.children[0].children[0], &root.children[0].children[1]);
        assert!(marked(none, ")").is_empty(), "{:?}", rows(none));
        // The rebuild wrote to c: only c is marked, and only while mirror-1's rebuild is active.
        c.stats.rebuild_processed.store(4096, Ordering::Relaxed);
        let rebuilding = Marks { rebuilding: &[1], ..none };
        assert_eq!(marked(rebuilding, "  (resilvering)"), [c.display_name()], "{:?}", rows(rebuilding));
        assert!(marked(none, ")").is_empty(), "{:?}", rows(none));
        let elsewhere = Marks { rebuilding: &[7], ..none };
        assert!(marked(elsewhere, ")").is_empty(), "{:?}", rows(elsewhere));
        // A healing scan that wrote to b and c: both marked once.
        b.stats.scan_processed.store(512, Ordering::Relaxed);
        c.stats.scan_processed.store(512, Ordering::Relaxed);
        let resilver = Marks { scanning: Some(POOL_SCAN_RESILVER), ..rebuilding };
        assert_eq!(marked(resilver, "  (resilvering)"), [b.display_name(), c.display_name()], "{:?}", rows(resilver));
        assert!(rows(resilver).iter().all(|(_, l)| l.matches("(resilvering)").count() <= 1), "{:?}", rows(resilver));
        let scrub = Marks { scanning: Some(POOL_SCAN_SCRUB), ..none };
        assert_eq!(marked(scrub, "  (repairing)"), [b.display_name(), c.display_name()], "{:?}", rows(scrub));
    }
}

/// One record of a pool's history (spa_history.c's nvlists).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryRecord {
    /// A command as the user gave it.
    Command { time: u64, cmd: String },
    /// An internal event (spa_history_log_internal): its txg, operation and message.
    Internal { time: u64, txg: u64, name: String, msg: String },
}
