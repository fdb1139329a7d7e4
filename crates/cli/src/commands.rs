//! zpool and zfs verbs, run in the daemon against the pools it holds. Each returns
//! (stdout, stderr, exit status); usage errors exit 2 with OpenZFS's wording.

use crate::table;
use oxzfs::dsl::{DatasetInfo, DatasetKind, PropValue};
use oxzfs::pool::{import_listing, ImportOptions, Pool};
use oxzfs::spa;
use oxzfs_fuse::MountHandle;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;
use std::sync::Arc;

pub struct Imported {
    pub pool: Arc<Pool>,
    pub mounts: Vec<(String, MountHandle)>,
}

#[derive(Default)]
pub struct State {
    pub pools: BTreeMap<String, Imported>,
}

type Out = (String, String, i32);

fn ok(s: String) -> Out {
    (s, String::new(), 0)
}
fn fail(msg: impl Into<String>) -> Out {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    (String::new(), m, 1)
}
fn usage(msg: impl Into<String>) -> Out {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    (String::new(), m, 2)
}

/// Minimal getopt: short flags, some taking a value; returns (flags, operands) or an error.
struct Opts {
    flags: Vec<(char, Option<String>)>,
    operands: Vec<String>,
}

fn getopt(args: &[String], with_value: &str, plain: &str) -> Result<Opts, String> {
    let mut flags = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            operands.extend(args[i + 1..].iter().cloned());
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            let chars: Vec<char> = a[1..].chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                if with_value.contains(c) {
                    let rest: String = chars[j + 1..].iter().collect();
                    let v = if !rest.is_empty() {
                        rest
                    } else {
                        i += 1;
                        args.get(i).cloned().ok_or_else(|| format!("missing argument for '{c}' option"))?
                    };
                    flags.push((c, Some(v)));
                    break;
                } else if plain.contains(c) {
                    flags.push((c, None));
                } else {
                    return Err(format!("invalid option '{c}'"));
                }
                j += 1;
            }
        } else {
            operands.push(a.clone());
        }
        i += 1;
    }
    Ok(Opts { flags, operands })
}

impl Opts {
    fn has(&self, c: char) -> bool {
        self.flags.iter().any(|(f, _)| *f == c)
    }
    fn values(&self, c: char) -> Vec<String> {
        self.flags.iter().filter(|(f, _)| *f == c).filter_map(|(_, v)| v.clone()).collect()
    }
}

pub fn import_is_listing(args: &[String]) -> bool {
    match getopt(args, "dRoc", "fNFnDa") {
        Ok(o) => o.operands.is_empty() && !o.has('a'),
        Err(_) => false,
    }
}

/// Commands that run without the daemon (listing importable pools).
pub fn run_local(args: &[String]) -> Out {
    let rest = &args[2..];
    let o = match getopt(rest, "dRoc", "fNFnDa") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\timport [-d dir] [-D]\n\timport [-d dir] [-o prop=value] [-R root] [-f] [-N] <pool | id>")),
    };
    let dirs: Vec<PathBuf> = o.values('d').into_iter().map(PathBuf::from).collect();
    let dirs = if dirs.is_empty() { vec![PathBuf::from("/dev")] } else { dirs };
    let scan = spa::scan(&dirs);
    if scan.pools.is_empty() {
        let mut err = String::from("no pools available to import\n");
        for p in &scan.problems {
            err.push_str(p);
            err.push('\n');
        }
        return (String::new(), err, 1);
    }
    ok(import_listing(&scan))
}

/// zpool/zfs when no daemon runs: nothing is imported.
pub fn run_without_daemon(args: &[String]) -> Out {
    let mut st = State::default();
    let r = execute(&mut st, args);
    r
}

pub fn execute(st: &mut State, argv: &[String]) -> Out {
    let (Some(cmd), Some(verb)) = (argv.first(), argv.get(1)) else {
        return usage("missing command\nusage: zpool <command> | zfs <command>");
    };
    let rest = &argv[2..];
    match (cmd.as_str(), verb.as_str()) {
        ("zpool", "import") => zpool_import(st, rest),
        ("zpool", "export") => zpool_export(st, rest),
        ("zpool", "status") => zpool_status(st, rest),
        ("zpool", "list") => zpool_list(st, rest),
        ("zpool", "get") => zpool_get(st, rest),
        ("zfs", "list") => zfs_list(st, rest),
        ("zfs", "get") => zfs_get(st, rest),
        ("zfs", "mount") => zfs_mount(st, rest),
        ("zpool", v) => usage(format!("unrecognized command '{v}'\nusage: zpool <command> args ...\nwhere <command> is one of: import, export, status, list, get")),
        ("zfs", v) => usage(format!("unrecognized command '{v}'\nusage: zfs <command> args ...\nwhere <command> is one of: list, get, mount")),
        (c, _) => usage(format!("unrecognized command '{c}'")),
    }
}

fn zpool_import(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "dRoc", "fNFnDa") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\timport [-d dir] [-D]\n\timport [-d dir] [-o prop=value] [-R root] [-f] [-N] <pool | id> [newpool]")),
    };
    if o.operands.is_empty() {
        return run_local(&["zpool".into(), "import".into()].into_iter().chain(args.iter().cloned()).collect::<Vec<_>>());
    }
    if o.operands.len() > 1 {
        return fail("cannot import: renaming a pool on import is not supported yet");
    }
    let mut readonly = false;
    for p in o.values('o') {
        match p.split_once('=') {
            Some(("readonly", "on")) => readonly = true,
            Some(("readonly", "off")) => readonly = false,
            Some((k, _)) if ["cachefile", "comment", "failmode", "autoexpand", "autoreplace", "listsnapshots"].contains(&k) => {}
            Some((k, _)) => return usage(format!("property '{k}' is not a valid pool property")),
            None => return usage(format!("missing '=' for property=value argument '{p}'")),
        }
    }
    if !readonly {
        return fail("cannot import: read-write import is not supported yet; use -o readonly=on");
    }
    let which = &o.operands[0];
    if st.pools.contains_key(which) || st.pools.values().any(|p| p.pool.guid().to_string() == *which) {
        return fail(format!("cannot import '{which}': a pool with that name already exists"));
    }
    let dirs: Vec<PathBuf> = o.values('d').into_iter().map(PathBuf::from).collect();
    let dirs = if dirs.is_empty() { vec![PathBuf::from("/dev")] } else { dirs };
    let altroot = o.values('R').pop().map(PathBuf::from);
    let opts = ImportOptions { readonly, altroot, force: o.has('f'), arc_max: None };
    let pool = match Pool::import(&dirs, which, &opts) {
        Ok(p) => p,
        Err(e) => return fail(e.to_string()),
    };
    let mut err = String::new();
    let mut mounts = Vec::new();
    if !o.has('N') {
        mount_all(&pool, &mut mounts, &mut err);
    }
    st.pools.insert(pool.name().to_string(), Imported { pool, mounts });
    (String::new(), err, 0)
}

fn mount_all(pool: &Arc<Pool>, mounts: &mut Vec<(String, MountHandle)>, err: &mut String) {
    let Ok(list) = pool.datasets() else { return };
    for ds in list.iter().filter(|d| d.kind == DatasetKind::Filesystem) {
        let props = match pool.props(&ds.name) {
            Ok(p) => p,
            Err(e) => {
                let _ = writeln!(err, "cannot mount '{}': {e}", ds.name);
                continue;
            }
        };
        let get = |n: &str| props.iter().find(|p| p.name == n).map(|p| p.value.clone()).unwrap_or_default();
        if get("canmount") != "on" {
            continue;
        }
        let mp = get("mountpoint");
        if !mp.starts_with('/') {
            continue;
        }
        match oxzfs_fuse::mount(pool.clone(), &ds.name, std::path::Path::new(&mp)) {
            Ok(h) => {
                pool.mounted.lock().unwrap().insert(ds.name.clone(), PathBuf::from(&mp));
                mounts.push((ds.name.clone(), h));
            }
            Err(e) => {
                let _ = writeln!(err, "{e}");
            }
        }
    }
}

impl State {
    /// Unmount and export everything (daemon stop).
    pub fn shutdown(&mut self) -> (String, String) {
        let names: Vec<String> = self.pools.keys().cloned().collect();
        let mut err = String::new();
        for n in names {
            let (_, e, _) = zpool_export(self, &[n]);
            err.push_str(&e);
        }
        (String::new(), err)
    }
}

fn zpool_export(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "fa") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\texport [-af] <pool> ...")),
    };
    let names: Vec<String> = if o.has('a') { st.pools.keys().cloned().collect() } else { o.operands.clone() };
    if names.is_empty() {
        return usage("missing pool argument\nusage:\n\texport [-af] <pool> ...");
    }
    for n in &names {
        let Some(mut imp) = st.pools.remove(n) else {
            return fail(format!("cannot open '{n}': no such pool"));
        };
        // Unmount in reverse order (children before parents).
        while let Some((_, h)) = imp.mounts.pop() {
            h.unmount();
        }
        imp.pool.close();
    }
    ok(String::new())
}

fn find_pools<'a>(st: &'a State, names: &[String]) -> Result<Vec<&'a Imported>, Out> {
    if names.is_empty() {
        return Ok(st.pools.values().collect());
    }
    let mut v = Vec::new();
    for n in names {
        match st.pools.get(n) {
            Some(p) => v.push(p),
            None => return Err(fail(format!("cannot open '{n}': no such pool"))),
        }
    }
    Ok(v)
}

fn zpool_status(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "T", "vxPLgpDtis") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tstatus [-vxP] [pool] ...")),
    };
    let pools = match find_pools(st, &o.operands) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if pools.is_empty() {
        return ok("no pools available\n".into());
    }
    if o.has('x') {
        let unhealthy: Vec<_> = pools.iter().filter(|p| p.pool.health() != oxzfs::vdev::VdevState::Online || !p.pool.spa.errors().is_empty()).collect();
        if unhealthy.is_empty() {
            return ok("all pools are healthy\n".into());
        }
        return ok(unhealthy.iter().map(|p| p.pool.status_text(o.has('v'))).collect::<Vec<_>>().join("\n"));
    }
    ok(pools.iter().map(|p| p.pool.status_text(o.has('v'))).collect::<Vec<_>>().join("\n"))
}

fn nice(n: u64, parsable: bool) -> String {
    if parsable {
        n.to_string()
    } else {
        oxzfs::dsl::nicebytes(n)
    }
}

fn zpool_list(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "oT", "HpvgLP") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tlist [-gHLpPv] [-o property[,...]] [pool] ...")),
    };
    let pools = match find_pools(st, &o.operands) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if pools.is_empty() {
        return ok("no pools available\n".into());
    }
    let all = ["name", "size", "alloc", "free", "ckpoint", "expandsz", "frag", "cap", "dedup", "health", "altroot"];
    let cols: Vec<String> = match o.values('o').pop() {
        Some(c) => c.split(',').map(|s| s.to_lowercase()).collect(),
        None => all.iter().map(|s| s.to_string()).collect(),
    };
    for c in &cols {
        let known = all.contains(&c.as_str()) || ["guid", "allocated", "capacity", "fragmentation", "dedupratio"].contains(&c.as_str());
        if !known {
            return usage(format!("invalid property '{c}'"));
        }
    }
    let p = o.has('p');
    let mut rows = Vec::new();
    for imp in &pools {
        let r = imp.pool.list_row();
        let row: Vec<String> = cols
            .iter()
            .map(|c| match c.as_str() {
                "name" => r.name.clone(),
                "size" => nice(r.size, p),
                "alloc" | "allocated" => nice(r.alloc, p),
                "free" => nice(r.free, p),
                "ckpoint" | "expandsz" => "-".into(),
                "frag" | "fragmentation" => r.frag.map(|f| if p { f.to_string() } else { format!("{f}%") }).unwrap_or_else(|| "-".into()),
                "cap" | "capacity" => if p { r.cap.to_string() } else { format!("{}%", r.cap) },
                "dedup" | "dedupratio" => if p { format!("{:.2}", r.dedup) } else { format!("{:.2}x", r.dedup) },
                "health" => r.health.clone(),
                "altroot" => r.altroot.clone(),
                "guid" => imp.pool.guid().to_string(),
                _ => "-".into(),
            })
            .collect();
        rows.push(row);
    }
    let header: Vec<String> = cols.iter().map(|c| c.to_uppercase()).collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let right: Vec<bool> = cols.iter().map(|c| !matches!(c.as_str(), "name" | "health" | "altroot")).collect();
    ok(table::render(&hdr, &rows, &right, o.has('H'), false))
}

fn zpool_get(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "o", "Hp") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tget [-Hp] [-o \"all\" | field[,...]] <\"all\" | property[,...]> <pool> ...")),
    };
    let Some(props) = o.operands.first() else { return usage("missing property argument") };
    let pools = match find_pools(st, &o.operands[1..]) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let mut rows = Vec::new();
    for imp in pools {
        let r = imp.pool.list_row();
        let cfg = &imp.pool.spa.config;
        let vals: Vec<(&str, String, &str)> = vec![
            ("size", nice(r.size, o.has('p')), "-"),
            ("capacity", format!("{}%", r.cap), "-"),
            ("altroot", r.altroot.clone(), if r.altroot == "-" { "default" } else { "local" }),
            ("health", r.health.clone(), "-"),
            ("guid", imp.pool.guid().to_string(), "-"),
            ("version", if imp.pool.spa.version >= 5000 { "-".into() } else { imp.pool.spa.version.to_string() }, if imp.pool.spa.version >= 5000 { "default" } else { "local" }),
            ("readonly", "on".into(), "-"),
            ("comment", cfg.get_str("comment").unwrap_or("-").to_string(), "default"),
            ("free", nice(r.free, o.has('p')), "-"),
            ("allocated", nice(r.alloc, o.has('p')), "-"),
        ];
        for (n, v, s) in vals {
            if props == "all" || props.split(',').any(|p| p == n) {
                rows.push(vec![imp.pool.name().to_string(), n.to_string(), v, s.to_string()]);
            }
        }
    }
    ok(table::render(&["NAME", "PROPERTY", "VALUE", "SOURCE"], &rows, &[false; 4], o.has('H'), false))
}

/// All datasets of all pools, in `zfs list` order.
fn all_datasets(st: &State) -> Vec<(Arc<Pool>, DatasetInfo)> {
    let mut v = Vec::new();
    for imp in st.pools.values() {
        if let Ok(list) = imp.pool.datasets() {
            for d in list {
                v.push((imp.pool.clone(), d));
            }
        }
    }
    v
}

fn parse_types(t: Option<String>) -> Result<Vec<DatasetKind>, String> {
    let Some(t) = t else { return Ok(vec![DatasetKind::Filesystem, DatasetKind::Volume]) };
    let mut out = Vec::new();
    for x in t.split(',') {
        match x {
            "all" => out.extend([DatasetKind::Filesystem, DatasetKind::Volume, DatasetKind::Snapshot]),
            "filesystem" | "fs" => out.push(DatasetKind::Filesystem),
            "volume" | "vol" => out.push(DatasetKind::Volume),
            "snapshot" | "snap" => out.push(DatasetKind::Snapshot),
            "bookmark" => {}
            other => return Err(format!("invalid type '{other}'")),
        }
    }
    Ok(out)
}

/// Select datasets by operands, -r and -d like zfs does.
fn select(st: &State, operands: &[String], recurse: bool, depth: Option<usize>, types: &[DatasetKind]) -> Result<Vec<(Arc<Pool>, DatasetInfo)>, String> {
    let all = all_datasets(st);
    let depth_of = |n: &str| n.split(['/', '@']).count() - 1;
    if operands.is_empty() {
        return Ok(all
            .into_iter()
            .filter(|(_, d)| types.contains(&d.kind))
            .filter(|(_, d)| depth.map_or(true, |m| depth_of(&d.name) <= m))
            .collect());
    }
    let mut out = Vec::new();
    for name in operands {
        let Some((_, base)) = all.iter().find(|(_, d)| &d.name == name) else {
            return Err(format!("cannot open '{name}': dataset does not exist"));
        };
        let bd = depth_of(&base.name);
        let recursive = recurse || depth.is_some();
        for (p, d) in &all {
            let below = d.name == *name || d.name.starts_with(&format!("{name}/")) || d.name.starts_with(&format!("{name}@"));
            if !below {
                continue;
            }
            if d.name != *name {
                let own_snapshot = d.name.starts_with(&format!("{name}@"));
                // `zfs list -t snapshot fs` lists fs's own snapshots even without -r.
                let wanted_snapshot = own_snapshot && types == [DatasetKind::Snapshot];
                if !wanted_snapshot && (!recursive || depth.map_or(false, |m| depth_of(&d.name) - bd > m)) {
                    continue;
                }
            }
            if !types.contains(&d.kind) {
                continue;
            }
            out.push((p.clone(), d.clone()));
        }
    }
    Ok(out)
}

fn prop_alias(c: &str) -> &str {
    match c {
        "avail" => "available",
        "refer" => "referenced",
        "ratio" => "compressratio",
        "refratio" => "refcompressratio",
        "reserv" => "reservation",
        "refreserv" => "refreservation",
        "recsize" => "recordsize",
        "compress" => "compression",
        "lused" => "logicalused",
        "lrefer" => "logicalreferenced",
        "usedsnap" => "usedbysnapshots",
        "usedds" => "usedbydataset",
        "usedchild" => "usedbychildren",
        "usedrefreserv" => "usedbyrefreservation",
        "rdonly" => "readonly",
        "volsize" => "volsize",
        other => other,
    }
}

fn zfs_list(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "odtsS", "HprF") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tlist [-Hp] [-r|-d max] [-o property[,...]] [-s property]... [-S property]... [-t type[,...]] [filesystem|volume|snapshot] ...")),
    };
    let types = match parse_types(o.values('t').pop()) {
        Ok(t) => t,
        Err(e) => return usage(e),
    };
    let depth = match o.values('d').pop().map(|d| d.parse::<usize>()) {
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => return usage("invalid depth"),
        None => None,
    };
    let cols: Vec<String> = match o.values('o').pop() {
        Some(c) => c.split(',').map(|s| s.to_string()).collect(),
        None => vec!["name".into(), "used".into(), "avail".into(), "refer".into(), "mountpoint".into()],
    };
    let sel = match select(st, &o.operands, o.has('r'), depth, &types) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if sel.is_empty() {
        if o.operands.is_empty() {
            return (String::new(), "no datasets available\n".to_string(), 0);
        }
        return ok(String::new());
    }
    let p = o.has('p');
    let mut rows = Vec::new();
    for (pool, d) in &sel {
        let props = pool.props(&d.name).unwrap_or_default();
        let row: Vec<String> = cols
            .iter()
            .map(|c| {
                if c == "name" {
                    return d.name.clone();
                }
                let n = prop_alias(c);
                match props.iter().find(|x| x.name == n) {
                    Some(v) => {
                        if d.kind == DatasetKind::Snapshot && n == "mountpoint" {
                            "-".into()
                        } else if p {
                            v.raw.clone()
                        } else {
                            v.value.clone()
                        }
                    }
                    None => "-".into(),
                }
            })
            .collect();
        rows.push(row);
    }
    for (sort, desc) in o.values('s').into_iter().map(|s| (s, false)).chain(o.values('S').into_iter().map(|s| (s, true))) {
        if let Some(i) = cols.iter().position(|c| *c == sort) {
            rows.sort_by(|a, b| {
                let ord = match (a[i].parse::<f64>(), b[i].parse::<f64>()) {
                    (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
                    _ => a[i].cmp(&b[i]),
                };
                if desc {
                    ord.reverse()
                } else {
                    ord
                }
            });
        }
    }
    let header: Vec<String> = cols.iter().map(|c| c.to_uppercase()).collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let right: Vec<bool> = cols
        .iter()
        .map(|c| matches!(prop_alias(c), "used" | "available" | "referenced" | "compressratio" | "refcompressratio" | "logicalused" | "logicalreferenced" | "written" | "quota" | "refquota" | "reservation" | "refreservation" | "recordsize" | "usedbysnapshots" | "usedbydataset" | "usedbychildren" | "usedbyrefreservation"))
        .collect();
    ok(table::render(&hdr, &rows, &right, o.has('H'), false))
}

fn zfs_get(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "odts", "Hpr") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tget [-rHp] [-d max] [-o \"all\" | field[,...]] [-t type[,...]] [-s source[,...]] <\"all\" | property[,...]> [filesystem|volume|snapshot] ...")),
    };
    let Some(propspec) = o.operands.first().cloned() else {
        return usage("missing property argument\nusage:\n\tget [-rHp] [-d max] [-o \"all\" | field[,...]] <\"all\" | property[,...]> [filesystem|volume|snapshot] ...");
    };
    let types = match parse_types(o.values('t').pop().or(Some("all".into()))) {
        Ok(t) => t,
        Err(e) => return usage(e),
    };
    let depth = o.values('d').pop().and_then(|d| d.parse::<usize>().ok());
    let sel = match select(st, &o.operands[1..], o.has('r'), depth, &types) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let fields: Vec<String> = match o.values('o').pop() {
        Some(f) if f == "all" => vec!["name".into(), "property".into(), "value".into(), "received".into(), "source".into()],
        Some(f) => f.split(',').map(|s| s.to_string()).collect(),
        None => vec!["name".into(), "property".into(), "value".into(), "source".into()],
    };
    for f in &fields {
        if !["name", "property", "value", "received", "source"].contains(&f.as_str()) {
            return usage(format!("invalid field '{f}'"));
        }
    }
    let wanted: Vec<String> = propspec.split(',').map(|s| prop_alias(s).to_string()).collect();
    let mut rows = Vec::new();
    for (pool, d) in &sel {
        let props: Vec<PropValue> = pool.props(&d.name).unwrap_or_default();
        let list: Vec<&PropValue> = if wanted.iter().any(|w| w == "all") {
            props.iter().collect()
        } else {
            let mut v = Vec::new();
            for w in &wanted {
                match props.iter().find(|p| &p.name == w) {
                    Some(p) => v.push(p),
                    None => {
                        let known = ["name", "volsize", "volblocksize", "origin", "clones", "keystatus", "encryptionroot", "receive_resume_token", "defer_destroy", "userrefs"];
                        if !known.contains(&w.as_str()) && !w.contains(':') {
                            return usage(format!("bad property list: invalid property '{w}'"));
                        }
                    }
                }
            }
            v
        };
        for p in list {
            let row: Vec<String> = fields
                .iter()
                .map(|f| match f.as_str() {
                    "name" => d.name.clone(),
                    "property" => p.name.clone(),
                    "value" => if o.has('p') { p.raw.clone() } else { p.value.clone() },
                    "received" => "-".into(),
                    _ => p.source.clone(),
                })
                .collect();
            rows.push(row);
        }
    }
    let header: Vec<String> = fields.iter().map(|c| c.to_uppercase()).collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    ok(table::render(&hdr, &rows, &vec![false; fields.len()], o.has('H'), false))
}

fn zfs_mount(st: &mut State, args: &[String]) -> Out {
    if !args.is_empty() {
        return fail("zfs mount of a single dataset is not supported yet; datasets mount at import");
    }
    let mut s = String::new();
    for imp in st.pools.values() {
        for (name, h) in &imp.mounts {
            let _ = writeln!(s, "{:<24}  {}", name, h.mountpoint.display());
        }
    }
    ok(s)
}
