//! The `zfs` verbs: create, destroy, snapshot, rollback, clone, rename, list, get, set, inherit,
//! mount, unmount, with OpenZFS's usage text and messages, run in the daemon against the pools it
//! holds.

use crate::mounts::{derived_mountpoints, mount_all, mount_some, remove_mountpoints};
use oxzfs_fuse::MountHandle;
use crate::props;
use clap::ValueEnum;
use crate::table::{self, Col};
use crate::opts::{comma_list, in_order, parse, parse_matches, verb_opts};
use crate::verb::{fail, parse_or_usage, imported_rw, ok, pool_of, rw_of, usage, verb_args, dash_o_props, err_out, Out, State};
use oxzfs::dsl::{DatasetInfo, DatasetKind, PropValue};
use oxzfs::pool::Pool;
use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;

/// The verbs oxzfs answers, in the order OpenZFS's `zfs` lists them (clap reads the name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Verb {
    Create,
    Destroy,
    #[value(alias = "snap")]
    Snapshot,
    Rollback,
    Clone,
    Promote,
    Bookmark,
    Hold,
    Holds,
    Release,
    Diff,
    Rename,
    List,
    Set,
    Get,
    Inherit,
    Userspace,
    Groupspace,
    Projectspace,
    Project,
    Mount,
    #[value(alias = "umount")]
    Unmount,
    Send,
    #[value(alias = "recv")]
    Receive,
    LoadKey,
    UnloadKey,
}

impl Verb {
    /// The verb's usage: OpenZFS's get_usage() text limited to the options oxzfs takes.
    pub fn usage(self) -> &'static str {
        match self {
            Verb::Create => ZFS_CREATE_USAGE,
            Verb::Destroy => DESTROY_USAGE,
            Verb::Snapshot => ZFS_SNAPSHOT_USAGE,
            Verb::Rollback => ZFS_ROLLBACK_USAGE,
            Verb::Clone => ZFS_CLONE_USAGE,
            Verb::Promote => ZFS_PROMOTE_USAGE,
            Verb::Bookmark => ZFS_BOOKMARK_USAGE,
            Verb::Hold => crate::holds::HOLD_USAGE,
            Verb::Holds => crate::holds::HOLDS_USAGE,
            Verb::Release => crate::holds::RELEASE_USAGE,
            Verb::Diff => crate::diff::DIFF_USAGE,
            Verb::Rename => ZFS_RENAME_USAGE,
            Verb::List => ZFS_LIST_USAGE,
            Verb::Set => SET_USAGE,
            Verb::Get => ZFS_GET_USAGE,
            Verb::Inherit => INHERIT_USAGE,
            Verb::Userspace => crate::userspace::USERSPACE_USAGE,
            Verb::Groupspace => crate::userspace::GROUPSPACE_USAGE,
            Verb::Projectspace => crate::userspace::PROJECTSPACE_USAGE,
            Verb::Project => crate::project::PROJECT_USAGE,
            Verb::Mount => MOUNT_USAGE,
            Verb::Unmount => UNMOUNT_USAGE,
            Verb::Send => crate::send::SEND_USAGE,
            Verb::Receive => crate::recv::RECV_USAGE,
            Verb::LoadKey => crate::keys::LOAD_KEY_USAGE,
            Verb::UnloadKey => crate::keys::UNLOAD_KEY_USAGE,
        }
    }

    /// Run the verb with the words after it; `cwd` is the caller's working directory.
    pub fn run(self, st: &mut State, args: &[String], _cwd: &Path) -> Out {
        match self {
            Verb::Create => create(st, args),
            Verb::Destroy => destroy(st, args),
            Verb::Snapshot => snapshot(st, args),
            Verb::Rollback => rollback(st, args),
            Verb::Clone => clone(st, args),
            Verb::Promote => promote(st, args),
            Verb::Bookmark => bookmark(st, args),
            Verb::Hold => crate::holds::hold(st, args),
            Verb::Holds => crate::holds::holds(st, args),
            Verb::Release => crate::holds::release(st, args),
            Verb::Diff => crate::diff::diff(st, args),
            Verb::Rename => rename(st, args),
            Verb::List => list(st, args),
            Verb::Set => set(st, args),
            Verb::Get => get(st, args),
            Verb::Inherit => inherit(st, args),
            Verb::Userspace => crate::userspace::userspace(st, args),
            Verb::Groupspace => crate::userspace::groupspace(st, args),
            Verb::Projectspace => crate::userspace::projectspace(st, args),
            // The zfs command runs it itself, on the caller's files (project.rs).
            Verb::Project => fail("cannot run 'zfs project' in the daemon: it runs in the zfs command itself"),
            Verb::Mount => mount(st, args),
            Verb::Unmount => unmount(st, args),
            Verb::Send => crate::send::send(st, args),
            Verb::Receive => crate::recv::receive(st, args),
            Verb::LoadKey => crate::keys::load_key(st, args),
            Verb::UnloadKey => crate::keys::unload_key(st, args),
        }
    }
}

const MOUNT_USAGE: &str = "usage:\n\tmount\n\tmount [-flvO] [-o opts] <-a | filesystem>";
const UNMOUNT_USAGE: &str = "usage:\n\tunmount [-fu] <-a | filesystem|mountpoint>";
const DESTROY_USAGE: &str = "usage:\n\tdestroy [-fnpRrv] <filesystem|volume>\n\tdestroy [-d] <filesystem|volume>@<snap>\n\tdestroy <filesystem|volume>#<bookmark>\n";
const INHERIT_USAGE: &str = "usage:\n\tinherit [-rS] <property> <filesystem|volume|snapshot> ...\n";
const SET_USAGE: &str = "usage:\n\tset <property=value> ... <filesystem|volume|snapshot> ...\n";
const ZFS_LIST_USAGE: &str = "usage:\n\tlist [-Hp] [-r|-d max] [-o property[,...]] [-s property]...\n\t    [-S property]... [-t type[,...]] [filesystem|volume|snapshot] ...";

const ZFS_GET_USAGE: &str = "usage:\n\tget [-rHp] [-d max] [-o \"all\" | field[,...]]\n\t    [-t type[,...]] [-s source[,...]]\n\t    <\"all\" | property[,...]> [filesystem|volume|snapshot|bookmark] ...";

/// All datasets of all pools, in `zfs list` order.
pub fn all_datasets(st: &State) -> Vec<(Arc<Pool>, DatasetInfo)> {
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

/// `-t` of zfs list/get. None = the default (filesystems and volumes).
pub fn parse_types(t: &[String]) -> Result<Vec<DatasetKind>, String> {
    if t.is_empty() {
        return Ok(vec![DatasetKind::Filesystem, DatasetKind::Volume]);
    }
    let mut out = Vec::new();
    for x in t {
        match x.as_str() {
            "all" => out.extend([DatasetKind::Filesystem, DatasetKind::Volume, DatasetKind::Snapshot]),
            "filesystem" | "fs" => out.push(DatasetKind::Filesystem),
            "volume" | "vol" => out.push(DatasetKind::Volume),
            "snapshot" | "snap" => out.push(DatasetKind::Snapshot),
            "bookmark" | "bookmarks" => {}
            other => return Err(format!("invalid type '{other}'")),
        }
    }
    Ok(out)
}

/// The datasets (`select`) and bookmarks (`bookmark_rows`) that operands, -r, -d and -t pick:
/// "fs#bm" operands name bookmarks, the others datasets.
#[allow(clippy::type_complexity)]
fn select_with_bookmarks(st: &State, operands: &[String], recurse: bool, depth: Option<usize>, types: &[DatasetKind], all_bookmarks: bool) -> Result<(Vec<(Arc<Pool>, DatasetInfo)>, Vec<(String, Vec<PropValue>)>), String> {
    let (ds_operands, bm_operands): (Vec<String>, Vec<String>) = operands.iter().cloned().partition(|n| !n.contains('#'));
    let sel = if ds_operands.is_empty() && !bm_operands.is_empty() { Vec::new() } else { select(st, &ds_operands, recurse, depth, types)? };
    // As for snapshots: a file system named without -r or -d brings its bookmarks only when
    // bookmarks are all that is asked for (`zfs list -t bookmark fs`).
    let all_bookmarks = all_bookmarks && (ds_operands.is_empty() || recurse || depth.is_some() || types.is_empty());
    let bms = if all_bookmarks || !bm_operands.is_empty() { bookmark_rows(st, operands, recurse, depth, all_bookmarks)? } else { Vec::new() };
    Ok((sel, bms))
}

/// The bookmarks `zfs list` and `zfs get` show, with their properties: those named ("fs#bm";
/// an unknown one is an error), and when `all` (-t bookmark) those of the file systems the
/// other operands select (every file system without operands), with -r or -d below them.
fn bookmark_rows(st: &State, operands: &[String], recurse: bool, depth: Option<usize>, all: bool) -> Result<Vec<(String, Vec<PropValue>)>, String> {
    let mut out = Vec::new();
    for n in operands.iter().filter(|n| n.contains('#')) {
        let pool = n.split(['/', '#']).next().unwrap_or(n);
        let b = st.pools.get(pool).and_then(|i| oxzfs::dsl_bookmark::find_bookmark(&i.pool.spa, n).ok().flatten());
        match b {
            Some(b) => out.push((b.name.clone(), bookmark_props(&b))),
            None => return Err(format!("cannot open '{n}': bookmark does not exist")),
        }
    }
    let fs_ops: Vec<String> = operands.iter().filter(|n| !n.contains('#')).cloned().collect();
    // Named bookmarks alone are all there is to show.
    if all && (operands.is_empty() || !fs_ops.is_empty()) {
        let depth = depth.map(|d| d.saturating_sub(1));
        for (pool, d) in select(st, &fs_ops, recurse || depth.is_some(), depth, &[DatasetKind::Filesystem, DatasetKind::Volume])? {
            for b in oxzfs::dsl_bookmark::bookmarks(&pool.spa, &d).map_err(|e| e.to_string())? {
                out.push((b.name.clone(), bookmark_props(&b)));
            }
        }
    }
    Ok(out)
}

/// A bookmark's properties, as zfs get shows them.
fn bookmark_props(b: &oxzfs::dsl_bookmark::Bookmark) -> Vec<PropValue> {
    let p = |name: &str, value: String, raw: String| PropValue { name: name.into(), value, raw, source: "-".into() };
    vec![
        p("type", "bookmark".into(), "bookmark".into()),
        p("creation", oxzfs::dsl::chrono_like(b.creation_time), b.creation_time.to_string()),
        p("createtxg", b.creation_txg.to_string(), b.creation_txg.to_string()),
        p("guid", b.guid.to_string(), b.guid.to_string()),
    ]
}

/// Select datasets by operands, -r and -d like zfs does.
pub fn select(st: &State, operands: &[String], recurse: bool, depth: Option<usize>, types: &[DatasetKind]) -> Result<Vec<(Arc<Pool>, DatasetInfo)>, String> {
    let all = all_datasets(st);
    select_from(&all, |(_, d)| (d.name.as_str(), d.kind), operands, recurse, depth, types)
}

pub fn depth_of(n: &str) -> usize {
    n.split(['/', '@']).count() - 1
}

/// The selection over any list of datasets (`key` gives name and kind), in list order.
pub fn select_from<T: Clone>(
    all: &[T],
    key: impl Fn(&T) -> (&str, DatasetKind),
    operands: &[String],
    recurse: bool,
    depth: Option<usize>,
    types: &[DatasetKind],
) -> Result<Vec<T>, String> {
    if operands.is_empty() {
        return Ok(all
            .iter()
            .filter(|x| types.contains(&key(x).1))
            .filter(|x| depth.map_or(true, |m| depth_of(key(x).0) <= m))
            .cloned()
            .collect());
    }
    let mut out: Vec<T> = Vec::new();
    for name in operands {
        let name = name.trim_end_matches('/');
        let Some(base) = all.iter().find(|x| key(x).0 == name) else {
            return Err(format!("cannot open '{name}': dataset does not exist"));
        };
        let bd = depth_of(key(base).0);
        let recursive = recurse || depth.is_some();
        for x in all {
            let (dn, kind) = key(x);
            let below = dn == name || dn.starts_with(&format!("{name}/")) || dn.starts_with(&format!("{name}@"));
            if !below {
                continue;
            }
            if dn != name {
                // `zfs list -t snapshot fs` lists fs's own snapshots even without -r.
                let own_snapshot = dn.starts_with(&format!("{name}@"));
                let wanted_snapshot = own_snapshot && types == [DatasetKind::Snapshot];
                if !wanted_snapshot && (!recursive || depth.map_or(false, |m| depth_of(dn) - bd > m)) {
                    continue;
                }
            }
            if !types.contains(&kind) {
                continue;
            }
            if !out.iter().any(|o| key(o).0 == dn) {
                out.push(x.clone());
            }
        }
    }
    Ok(out)
}

verb_opts!(
    /// `zfs list`'s options.
    ListOpts {
    #[arg(short = 'o')]
    fields: Vec<String>,
    #[arg(short = 'd')]
    depth: Vec<String>,
    #[arg(short = 't')]
    types: Vec<String>,
    #[arg(short = 's')]
    sort: Vec<String>,
    #[arg(short = 'S')]
    sort_desc: Vec<String>,
    #[arg(short = 'H')]
    scripted: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'F')]
    fixed_width: bool,
});

pub fn list(st: &mut State, args: &[String]) -> Out {
    let (o, m) = match parse_matches::<ListOpts>(args) {
        Ok(om) => om,
        Err(e) => return usage(format!("{e}\n{ZFS_LIST_USAGE}")),
    };
    let types = match parse_types(&comma_list(&o.types)) {
        Ok(t) => t,
        Err(e) => return usage(format!("{e}\n{ZFS_LIST_USAGE}")),
    };
    let depth = match o.depth.last().cloned().map(|d| d.parse::<usize>()) {
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => return usage(format!("invalid depth '{}'\n{ZFS_LIST_USAGE}", o.depth.last().cloned().unwrap_or_default())),
        None => None,
    };
    let typed = comma_list(&o.fields);
    let typed = if typed.is_empty() { vec!["name".into(), "used".into(), "available".into(), "referenced".into(), "mountpoint".into()] } else { typed };
    // "space" stands for the space columns (zprop_get_list); alone and without -t it leaves
    // snapshots out.
    let types = if typed == ["space"] && comma_list(&o.types).is_empty() { types.into_iter().filter(|k| *k != DatasetKind::Snapshot).collect() } else { types };
    let typed: Vec<String> = typed
        .into_iter()
        .flat_map(|c| if c == "space" { ["name", "avail", "used", "usedbysnapshots", "usedbydataset", "usedbyrefreservation", "usedbychildren"].map(String::from).to_vec() } else { vec![c] })
        .collect();
    let mut cols = Vec::new();
    for c in &typed {
        match props::zfs_prop(c) {
            Some(n) => cols.push(n),
            None => return usage(format!("invalid property '{c}'\n{ZFS_LIST_USAGE}")),
        }
    }
    let mut sorts = Vec::new();
    for (flag, desc) in in_order(&m, &["sort", "sort_desc"]).into_iter().map(|(id, v)| (v, id == "sort_desc")) {
        match props::zfs_prop(&flag) {
            Some(n) => sorts.push((n, desc)),
            None => return usage(format!("invalid property '{flag}'\n{ZFS_LIST_USAGE}")),
        }
    }
    let want_bookmarks = comma_list(&o.types).iter().any(|t| matches!(t.as_str(), "bookmark" | "bookmarks" | "all"));
    let (sel, bms) = match select_with_bookmarks(st, &o.operands, o.recursive, depth, &types, want_bookmarks) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    if sel.is_empty() && bms.is_empty() {
        if o.operands.is_empty() && !o.scripted {
            return (String::new(), "no datasets available\n".to_string(), 0);
        }
        return ok(String::new());
    }
    let p = o.parsable;
    let mut rows: Vec<(Vec<String>, Vec<PropValue>)> = Vec::new();
    for (pool, d) in &sel {
        let pv = pool.props(&d.name).unwrap_or_default();
        let row = cols.iter().map(|c| list_value(d, &pv, c, p)).collect();
        rows.push((row, pv));
    }
    // Each bookmark after its file system and that file system's snapshots.
    for (name, pv) in bms {
        let fs = name.split('#').next().unwrap_or(&name).to_string();
        let row: Vec<String> = cols
            .iter()
            .map(|c| match pv.iter().find(|x| &x.name == c) {
                _ if c == "name" => name.clone(),
                Some(v) if p => v.raw.clone(),
                Some(v) => v.value.clone(),
                None => "-".into(),
            })
            .collect();
        let at = rows.iter().rposition(|(r, _)| r.first().is_some_and(|n| *n == fs || n.starts_with(&format!("{fs}@")) || n.starts_with(&format!("{fs}#"))));
        rows.insert(at.map_or(rows.len(), |i| i + 1), (row, pv));
    }
    if !sorts.is_empty() {
        rows.sort_by(|a, b| {
            for (prop, desc) in &sorts {
                let get = |pv: &[PropValue], row: &[String]| -> String {
                    if prop == "name" {
                        return row.first().cloned().unwrap_or_default();
                    }
                    pv.iter().find(|x| &x.name == prop).map(|x| x.raw.clone()).unwrap_or_default()
                };
                let (x, y) = (get(&a.1, &a.0), get(&b.1, &b.0));
                let ord = match (x.parse::<f64>(), y.parse::<f64>()) {
                    (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
                    _ => x.cmp(&y),
                };
                let ord = if *desc { ord.reverse() } else { ord };
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
            }
            std::cmp::Ordering::Equal
        });
    }
    let rows: Vec<Vec<String>> = rows.into_iter().map(|r| r.0).collect();
    let spec: Vec<Col> = cols
        .iter()
        .map(|c| {
            let (header, right, min) = props::zfs_column(c);
            Col { header, right, min }
        })
        .collect();
    ok(table::render(&spec, &rows, o.scripted, true))
}

pub fn list_value(d: &DatasetInfo, pv: &[PropValue], prop: &str, parsable: bool) -> String {
    if prop == "name" {
        return d.name.clone();
    }
    if d.kind == DatasetKind::Snapshot && prop == "mountpoint" {
        return "-".into();
    }
    match pv.iter().find(|x| x.name == prop) {
        Some(v) if parsable => v.raw.clone(),
        Some(v) => v.value.clone(),
        None => "-".into(),
    }
}

/// Whether a property's source matches `zfs get -s` kinds.
pub fn source_matches(source: &str, kinds: &[String]) -> bool {
    if kinds.is_empty() {
        return true;
    }
    let kind = if source == "-" {
        "none"
    } else if source.starts_with("inherited") {
        "inherited"
    } else {
        source
    };
    kinds.iter().any(|k| k == kind)
}

verb_opts!(
    /// `zfs get`'s options.
    GetOpts {
    #[arg(short = 'o')]
    fields: Vec<String>,
    #[arg(short = 'd')]
    depth: Vec<String>,
    #[arg(short = 't')]
    types: Vec<String>,
    #[arg(short = 's')]
    sources: Vec<String>,
    #[arg(short = 'H')]
    scripted: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 'r')]
    recursive: bool,
});

pub fn get(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<GetOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{ZFS_GET_USAGE}")),
    };
    let Some(propspec) = o.operands.first().cloned() else {
        return usage(format!("missing property argument\n{ZFS_GET_USAGE}"));
    };
    let mut t = comma_list(&o.types);
    if t.is_empty() {
        t.push("all".into());
    }
    let types = match parse_types(&t) {
        Ok(t) => t,
        Err(e) => return usage(format!("{e}\n{ZFS_GET_USAGE}")),
    };
    let depth = match o.depth.last().cloned().map(|d| d.parse::<usize>()) {
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => return usage(format!("invalid depth '{}'\n{ZFS_GET_USAGE}", o.depth.last().cloned().unwrap_or_default())),
        None => None,
    };
    let sources = comma_list(&o.sources);
    for s in &sources {
        if !["local", "default", "inherited", "temporary", "received", "none"].contains(&s.as_str()) {
            return usage(format!("invalid source '{s}'\n{ZFS_GET_USAGE}"));
        }
    }
    let fields: Vec<String> = {
        let f = comma_list(&o.fields);
        if f.is_empty() {
            vec!["name".into(), "property".into(), "value".into(), "source".into()]
        } else if f == ["all"] {
            vec!["name".into(), "property".into(), "value".into(), "received".into(), "source".into()]
        } else {
            f
        }
    };
    for f in &fields {
        if !["name", "property", "value", "received", "source"].contains(&f.as_str()) {
            return usage(format!("invalid field '{f}'\n{ZFS_GET_USAGE}"));
        }
    }
    let mut wanted = Vec::new();
    for w in propspec.split(',') {
        if w == "all" {
            wanted.push("all".to_string());
            continue;
        }
        match props::zfs_prop(w) {
            Some(n) => wanted.push(n),
            None if crate::userspace::is_quota_prop(w) => wanted.push(w.to_string()),
            None => return usage(format!("bad property list: invalid property '{w}'\n{ZFS_GET_USAGE}")),
        }
    }
    // zfs get takes bookmarks with the datasets unless -t leaves them out.
    let want_bookmarks = t.iter().any(|t| matches!(t.as_str(), "bookmark" | "bookmarks" | "all"));
    let (sel, bms) = match select_with_bookmarks(st, &o.operands[1..], o.recursive, depth, &types, want_bookmarks) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let mut rows = Vec::new();
    let quota_props: Vec<&String> = wanted.iter().filter(|w| crate::userspace::is_quota_prop(w)).collect();
    let sel: Vec<(String, Vec<PropValue>)> = sel
        .iter()
        .map(|(pool, d)| {
            let mut pv = pool.props(&d.name).unwrap_or_default();
            for q in &quota_props {
                let (value, raw, source) = crate::userspace::get_quota_prop(pool, d, q);
                pv.push(PropValue { name: q.to_string(), value, raw, source });
            }
            (d.name.clone(), pv)
        })
        .chain(bms)
        .collect();
    for (name, pv) in &sel {
        let pv = pv.clone();
        let mut list: Vec<PropValue> = Vec::new();
        for w in &wanted {
            if w == "all" {
                list.extend(pv.iter().cloned());
            } else if w == "name" {
                list.push(PropValue { name: "name".into(), value: name.clone(), raw: name.clone(), source: "-".into() });
            } else {
                // Properties that don't apply to this dataset type print as "-".
                list.push(pv.iter().find(|p| &p.name == w).cloned().unwrap_or_else(|| PropValue {
                    name: w.clone(),
                    value: "-".into(),
                    raw: "-".into(),
                    source: "-".into(),
                }));
            }
        }
        for p in list.into_iter().filter(|p| source_matches(&p.source, &sources)) {
            let row: Vec<String> = fields
                .iter()
                .map(|f| match f.as_str() {
                    "name" => name.clone(),
                    "property" => p.name.clone(),
                    "value" => if o.parsable { p.raw.clone() } else { p.value.clone() },
                    "received" => "-".into(),
                    _ => p.source.clone(),
                })
                .collect();
            rows.push(row);
        }
    }
    let cols: Vec<Col> = fields.iter().map(|f| Col::left(&f.to_uppercase())).collect();
    ok(table::render(&cols, &rows, o.scripted, true))
}

verb_opts!(
    /// `zfs mount`'s options.
    MountOpts {
    #[arg(short = 'o')]
    options: Vec<String>,
    #[arg(short = 'v')]
    verbose: bool,
    #[arg(short = 'l')]
    load_keys: bool,
    #[arg(short = 'a')]
    all: bool,
    #[arg(short = 'O')]
    overlay: bool,
    #[arg(short = 'f')]
    force: bool,
});

pub fn mount(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<MountOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{MOUNT_USAGE}")),
    };
    if o.operands.is_empty() && !o.all {
        let mut s = String::new();
        for imp in st.pools.values() {
            for h in &imp.mounts {
                let _ = writeln!(s, "{:<30}  {}", h.dataset, h.mountpoint.display());
            }
        }
        return ok(s);
    }
    if o.load_keys {
        let (names, all) = (o.operands.clone(), o.all);
        return crate::keys::load_then(st, &names, all, None, move |st| mount_now(st, &o));
    }
    mount_now(st, &o)
}

/// `zfs mount`'s mounts (the keys of -l loaded already).
fn mount_now(st: &mut State, o: &MountOpts) -> Out {
    let mut err = String::new();
    let mut failures = 0;
    if o.all {
        for imp in st.pools.values_mut() {
            let rw = imp.rw.clone();
            failures += mount_all(&imp.pool, rw.as_ref(), &mut imp.mounts, &mut err);
        }
    } else {
        for name in &o.operands {
            let pool = name.split('/').next().unwrap_or(name);
            let Some(imp) = st.pools.get_mut(pool) else {
                let _ = writeln!(err, "cannot open '{name}': dataset does not exist");
                failures += 1;
                continue;
            };
            if imp.mounts.iter().any(|m| &m.dataset == name) {
                let _ = writeln!(err, "cannot mount '{name}': filesystem already mounted");
                failures += 1;
                continue;
            }
            let rw = imp.rw.clone();
            let before = imp.mounts.len();
            failures += mount_some(&imp.pool, rw.as_ref(), &mut imp.mounts, &mut err, Some(name));
            if imp.mounts.len() == before && err.is_empty() {
                let _ = writeln!(err, "cannot mount '{name}': not a mountable filesystem (canmount or mountpoint)");
                failures += 1;
            }
        }
    }
    (String::new(), err, (failures > 0) as i32)
}

verb_opts!(
    /// `zfs unmount`'s options.
    UnmountOpts {
    #[arg(short = 'f')]
    force: bool,
    #[arg(short = 'a')]
    all: bool,
    #[arg(short = 'u')]
    unload_keys: bool,
});

/// `zfs unmount [-f] <-a | filesystem | mountpoint>`
pub fn unmount(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<UnmountOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{UNMOUNT_USAGE}")),
    };
    if o.operands.is_empty() && !o.all {
        return usage(format!("missing filesystem argument\n{UNMOUNT_USAGE}"));
    }
    let wanted = |m: &MountHandle| o.all || o.operands.iter().any(|x| *x == m.dataset || Path::new(x) == m.mountpoint);
    let mut err = String::new();
    let mut code = 0;
    let mut found: Vec<String> = Vec::new();
    for imp in st.pools.values_mut() {
        let (mut chosen, mut keep): (Vec<MountHandle>, Vec<MountHandle>) = std::mem::take(&mut imp.mounts).into_iter().partition(|m| wanted(m));
        // Children before parents.
        chosen.sort_by_key(|m| std::cmp::Reverse(m.mountpoint.components().count()));
        for m in chosen {
            let ds = m.dataset.clone();
            found.push(ds.clone());
            found.push(m.mountpoint.display().to_string());
            match m.unmount(o.force) {
                Ok(()) => {
                    imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
                }
                Err((m, e)) => {
                    let why = if e.raw_os_error() == Some(libc::EBUSY) { "pool or dataset is busy".to_string() } else { e.to_string() };
                    let _ = writeln!(err, "cannot unmount '{}': {why}", m.mountpoint.display());
                    code = 1;
                    keep.push(m);
                }
            }
        }
        keep.sort_by_key(|m| m.mountpoint.components().count());
        imp.mounts = keep;
    }
    for x in o.operands.iter().filter(|x| !found.contains(x)) {
        let _ = writeln!(err, "cannot unmount '{x}': not currently mounted");
        code = 1;
    }
    (String::new(), err, code)
}

const ZFS_CREATE_USAGE: &str = "usage:\n\tcreate [-Pnpuv] [-o property=value] ... <filesystem>\n\tcreate [-Pnpsv] [-b blocksize] [-o property=value] ... -V <size> <volume>";

verb_opts!(
    /// `zfs create`'s options.
    CreateOpts {
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'p')]
    parents: bool,
    #[arg(short = 'u')]
    no_mount: bool,
});

/// `zfs create [-p] [-o prop=val]... FS`
pub fn create(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<CreateOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{ZFS_CREATE_USAGE}\n"), 2),
    };
    if o.operands.len() != 1 {
        return (String::new(), format!("{} filesystem argument\n{ZFS_CREATE_USAGE}\n", if o.operands.is_empty() { "missing" } else { "too many" }), 2);
    }
    let name = o.operands[0].clone();
    let props = match dash_o_props(&o.props, &format!("{ZFS_CREATE_USAGE}\n")) {
        Ok(p) => p,
        Err(out) => return out,
    };
    let imp = match pool_of(st, &name) {
        Ok(i) => i,
        Err(_) => return (String::new(), format!("cannot create '{name}': no such pool '{}'\n", name.split('/').next().unwrap_or("")), 1),
    };
    let h = match rw_of(imp, &name, "create") {
        Ok(h) => h,
        Err(o) => return o,
    };
    let r = {
        let mut w = h.lock();
        w.create_dataset(&name, &props, o.parents).and_then(|_| w.sync())
    };
    if let Err(e) = r {
        return err_out(e, &format!("cannot create '{name}'"));
    }
    let mut err = String::new();
    let code = if !o.no_mount && mount_all(&imp.pool, Some(&h), &mut imp.mounts, &mut err) > 0 { 1 } else { 0 };
    (String::new(), err, code)
}

verb_opts!(
    /// `zfs destroy`'s options.
    DestroyOpts {
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'R')]
    recursive_dependents: bool,
    #[arg(short = 'f')]
    force: bool,
    #[arg(short = 'n')]
    dry_run: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 'v')]
    verbose: bool,
    #[arg(short = 'd')]
    defer: bool,
});

/// `zfs destroy [-r] [-f] FS`, `zfs destroy [-d] FS@SNAP`
pub fn destroy(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<DestroyOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{DESTROY_USAGE}"), 2),
    };
    if o.operands.len() != 1 {
        return (String::new(), format!("missing dataset argument\n{DESTROY_USAGE}"), 2);
    }
    let name = o.operands[0].clone();
    let (imp, h) = match imported_rw(st, &name, "destroy") {
        Ok(x) => x,
        Err(o) => return o,
    };
    if name.contains('#') {
        for (set, what) in [(o.dry_run, "dryrun"), (o.defer, "defer destroy"), (o.recursive, "recursive")] {
            if set {
                return (String::new(), format!("{what} is not supported with bookmark\n"), -1);
            }
        }
        if !matches!(oxzfs::dsl_bookmark::find_bookmark(&imp.pool.spa, &name), Ok(Some(_))) {
            return (String::new(), format!("bookmark '{name}' does not exist.\n"), 1);
        }
        let r = h.lock().destroy_bookmark(&name);
        return match r {
            Ok(()) => (String::new(), String::new(), 0),
            Err(e) => err_out(e, "cannot destroy bookmark"),
        };
    }
    // -v (-p): what goes, as destroy_callback prints it; -n: only that.
    let tell = |n: &str| match (o.verbose, o.parsable, o.dry_run) {
        (false, ..) => String::new(),
        (true, true, _) => format!("destroy\t{n}\n"),
        (true, false, true) => format!("would destroy {n}\n"),
        (true, false, false) => format!("will destroy {n}\n"),
    };
    if name.contains('@') {
        let mut out = String::new();
        if o.verbose || o.dry_run {
            // The snapshot's own listing is needed only to tell (and, for -n, to check) it.
            let Some(snap) = imp.pool.datasets().ok().and_then(|l| l.into_iter().find(|d| d.name == name)) else {
                return (String::new(), "could not find any snapshots to destroy; check snapshot names.\n".into(), 1);
            };
            out = tell(&name);
            let used = snap.ds.unique_bytes;
            if o.verbose {
                out.push_str(&match (o.parsable, o.dry_run) {
                    (true, _) => format!("reclaim\t{used}\n"),
                    (false, true) => format!("would reclaim {}\n", oxzfs::dsl::nicebytes(used)),
                    (false, false) => format!("will reclaim {}\n", oxzfs::dsl::nicebytes(used)),
                });
            }
        }
        if o.dry_run {
            return (out, String::new(), 0);
        }
        let r = if o.defer { h.lock().destroy_snapshot_deferred(&name) } else { h.lock().destroy_snapshot(&name) };
        imp.pool.forget_fs(&name);
        return match r {
            Ok(()) => (out, String::new(), 0),
            Err(e) => (out, format!("{e}\n"), 1),
        };
    }
    let all: Vec<String> = match imp.pool.datasets() {
        Ok(l) => l.into_iter().map(|d| d.name).collect(),
        Err(e) => return err_out(e, &format!("cannot destroy '{name}'")),
    };
    if !all.contains(&name) {
        return (String::new(), format!("cannot open '{name}': dataset does not exist\n"), 1);
    }
    // Descendants and snapshots (of the dataset and of its descendants).
    let mut children: Vec<String> = all.iter().filter(|n| n.starts_with(&format!("{name}/")) || n.starts_with(&format!("{name}@"))).cloned().collect();
    children.sort();
    // OpenZFS's refusals: the pool's root file system is not destroyed (-r takes its
    // descendants), and a file system with children needs -r.
    let is_root = !name.contains('/');
    if is_root && !o.recursive {
        return (
            String::new(),
            format!(
                "cannot destroy '{name}': operation does not apply to pools\nuse 'zfs destroy -r {name}' to destroy all datasets in the pool\nuse 'zpool destroy {name}' to destroy the pool itself\n"
            ),
            1,
        );
    }
    if !children.is_empty() && !o.recursive && !o.recursive_dependents {
        let list: String = children.iter().map(|c| format!("{c}\n")).collect();
        return (String::new(), format!("cannot destroy '{name}': filesystem has children\nuse '-r' to destroy the following datasets:\n{list}"), 1);
    }
    // The dataset (not the pool's root) and with -r its descendants, deepest first, each
    // after its snapshots (newest first).
    let mut victims: Vec<String> = children.into_iter().filter(|n| !n.contains('@')).collect();
    if !is_root {
        victims.push(name.clone());
    }
    victims.sort_by_key(|n| std::cmp::Reverse(n.matches('/').count()));
    // An encrypted dataset among them is refused before anything is unmounted or destroyed.
    {
        let mut w = h.lock();
        for v in &victims {
            let r = match w.find_dir(v) {
                Ok(Some(dir)) => w.refuse_encrypted(dir, &format!("cannot destroy '{v}'")).and_then(|()| w.refuse_held_snapshots(v)),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                return err_out(e, &format!("cannot destroy '{v}'"));
            }
        }
    }
    let mut out = String::new();
    if o.verbose || o.dry_run {
        let mut w = h.lock();
        for v in &victims {
            for s in w.snapshots_after(v, 0).unwrap_or_default() {
                out.push_str(&tell(&s));
            }
            out.push_str(&tell(v));
        }
    }
    if o.dry_run {
        return (out, String::new(), 0);
    }
    for v in &victims {
        // Unmount first.
        if let Some(i) = imp.mounts.iter().position(|m| &m.dataset == v) {
            let m = imp.mounts.remove(i);
            if let Err((m, e)) = m.unmount(o.force) {
                imp.mounts.insert(i, m);
                return (String::new(), format!("cannot unmount '{}': {e}\n", v), 1);
            }
            imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(v);
        }
        let r = {
            let mut w = h.lock();
            (|| {
                let snaps = w.snapshots_after(v, 0)?;
                for s in &snaps {
                    w.destroy_snapshot(s)?;
                }
                w.destroy_dataset(v)?;
                w.sync()
            })()
        };
        imp.pool.forget_fs(v);
        if let Err(e) = r {
            let (_, err, code) = err_out(e, &format!("cannot destroy '{v}'"));
            return (out, err, code);
        }
    }
    (out, String::new(), 0)
}

verb_opts!(
    /// `zfs rollback`'s options.
    RollbackOpts {
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'R')]
    recursive_clones: bool,
    #[arg(short = 'f')]
    force: bool,
});

const ZFS_ROLLBACK_USAGE: &str = "usage:\n\trollback [-rRf] <snapshot>\n";

/// `zfs rollback [-rRf] FS@SNAP`: with -r the newer snapshots are destroyed first; the file
/// system is unmounted around the change and mounted again.
pub fn rollback(st: &mut State, args: &[String]) -> Out {
    let o = match verb_args::<RollbackOpts>(args, ZFS_ROLLBACK_USAGE, &["missing dataset argument"]) {
        Ok(o) => o,
        Err(out) => return out,
    };
    let name = o.operands[0].clone();
    let (imp, h) = match imported_rw(st, &name, "rollback") {
        Ok(x) => x,
        Err(o) => return o,
    };
    let Some((fs, _)) = name.split_once('@') else {
        return (String::new(), format!("cannot open '{name}': operation only applies to snapshots\n"), 1);
    };
    let newer = {
        let mut w = h.lock();
        match w.find_snapshot(&name) {
            Ok(Some(snap)) => w.snapshots_after(fs, snap),
            Ok(None) => return (String::new(), format!("cannot open '{name}': dataset does not exist\n"), 1),
            Err(e) => Err(e),
        }
    };
    let newer = match newer {
        Ok(n) => n,
        Err(e) => return err_out(e, &format!("cannot rollback to '{name}'")),
    };
    // Bookmarks newer than the snapshot would name a state the file system no longer has
    // (dsl_dataset_rollback_check: none after the most recent snapshot).
    let newer_marks: Vec<String> = {
        let spa = &imp.pool.spa;
        match (oxzfs::dsl::find_dataset(spa, &name), oxzfs::dsl::find_dataset(spa, fs)) {
            (Ok(snap), Ok(head)) => oxzfs::dsl_bookmark::bookmarks(spa, &head)
                .unwrap_or_default()
                .into_iter()
                .filter(|b| b.creation_txg > snap.ds.creation_txg)
                .map(|b| b.name)
                .collect(),
            _ => Vec::new(),
        }
    };
    if !(newer.is_empty() && newer_marks.is_empty()) && !o.recursive && !o.recursive_clones {
        let list: String = newer.iter().rev().chain(&newer_marks).map(|n| format!("{n}\n")).collect();
        return (
            String::new(),
            format!("cannot rollback to '{name}': more recent snapshots or bookmarks exist\nuse '-r' to force deletion of the following snapshots and bookmarks:\n{list}"),
            1,
        );
    }
    for n in &newer_marks {
        if let Err(e) = h.lock().destroy_bookmark(n) {
            return (String::new(), format!("{e}\n"), 1);
        }
    }
    for n in &newer {
        let r = h.lock().destroy_snapshot(n);
        if let Err(e) = r {
            return (String::new(), format!("{e}\n"), 1);
        }
    }
    if let Some(i) = imp.mounts.iter().position(|m| m.dataset == fs) {
        let m = imp.mounts.remove(i);
        if let Err((m, e)) = m.unmount(o.force) {
            imp.mounts.insert(i, m);
            return (String::new(), format!("cannot unmount '{fs}': {e}\n"), 1);
        }
        imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(fs);
    }
    let r = h.lock().rollback(&name);
    let mut err = match r {
        Ok(()) => String::new(),
        Err(e) => format!("{e}\n"),
    };
    let failed = !err.is_empty();
    let code = if mount_all(&imp.pool, Some(&h), &mut imp.mounts, &mut err) > 0 || failed { 1 } else { 0 };
    (String::new(), err, code)
}

verb_opts!(
    /// `zfs clone`'s options.
    CloneOpts {
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'p')]
    parents: bool,
});

const ZFS_CLONE_USAGE: &str = "usage:\n\tclone [-p] [-o property=value] ... <snapshot> <filesystem|volume>\n";

/// `zfs clone [-p] [-o prop=val]... FS@SNAP NEWFS`
pub fn clone(st: &mut State, args: &[String]) -> Out {
    let o = match verb_args::<CloneOpts>(args, ZFS_CLONE_USAGE, &["missing source dataset argument", "missing target dataset argument"]) {
        Ok(o) => o,
        Err(out) => return out,
    };
    let (src, target) = (o.operands[0].clone(), o.operands[1].clone());
    let props = match dash_o_props(&o.props, ZFS_CLONE_USAGE) {
        Ok(p) => p,
        Err(out) => return out,
    };
    let imp = match pool_of(st, &src) {
        Ok(i) => i,
        Err(o) => return o,
    };
    if target.split('/').next() != src.split(['/', '@']).next() {
        return (String::new(), format!("cannot create '{target}': source and target pools differ\n"), 1);
    }
    let h = match rw_of(imp, &target, "create") {
        Ok(h) => h,
        Err(o) => return o,
    };
    let r = {
        let mut w = h.lock();
        match w.find_snapshot(&src) {
            Ok(Some(snap)) => w.create_dataset_from(&target, &props, o.parents, Some(snap)).and_then(|_| w.sync()),
            Ok(None) => return (String::new(), format!("cannot open '{src}': dataset does not exist\n"), 1),
            Err(e) => Err(e),
        }
    };
    if let Err(e) = r {
        return err_out(e, &format!("cannot create '{target}'"));
    }
    let mut err = String::new();
    let code = if mount_all(&imp.pool, Some(&h), &mut imp.mounts, &mut err) > 0 { 1 } else { 0 };
    (String::new(), err, code)
}

verb_opts!(
    /// `zfs bookmark` has no options.
    BookmarkOpts {});

const ZFS_BOOKMARK_USAGE: &str = "usage:\n\tbookmark <snapshot|bookmark> <newbookmark>\n";

/// `zfs bookmark SNAPSHOT|BOOKMARK NEWBOOKMARK`: either name may be short ("@snap", "#bm"),
/// the other giving the file system, as zfs_do_bookmark expands them.
pub fn bookmark(st: &mut State, args: &[String]) -> Out {
    let o = match verb_args::<BookmarkOpts>(args, ZFS_BOOKMARK_USAGE, &["missing source argument", "missing bookmark argument"]) {
        Ok(o) => o,
        Err(out) => return out,
    };
    let (mut source, mut new) = (o.operands[0].clone(), o.operands[1].clone());
    if !source.contains(['@', '#']) {
        return usage(format!("invalid source name '{source}': must contain a '@' or '#'\n{ZFS_BOOKMARK_USAGE}"));
    }
    if !new.contains('#') {
        return usage(format!("invalid bookmark name '{new}': must contain a '#'\n{ZFS_BOOKMARK_USAGE}"));
    }
    match (source.starts_with(['@', '#']), new.starts_with('#')) {
        (true, true) => return usage(format!("either source or bookmark must be specified as full dataset paths\n{ZFS_BOOKMARK_USAGE}")),
        (true, false) => source = format!("{}{source}", new.split('#').next().unwrap_or("")),
        (false, true) => new = format!("{}{new}", source.split(['@', '#']).next().unwrap_or("")),
        (false, false) => {}
    }
    let exists = st.pools.get(source.split(['/', '@', '#']).next().unwrap_or("")).is_some_and(|i| {
        if source.contains('#') {
            matches!(oxzfs::dsl_bookmark::find_bookmark(&i.pool.spa, &source), Ok(Some(_)))
        } else {
            i.pool.datasets().is_ok_and(|l| l.iter().any(|d| d.name == source))
        }
    });
    if !exists {
        return usage(format!("cannot open '{source}': dataset does not exist\n{ZFS_BOOKMARK_USAGE}"));
    }
    let (_, h) = match imported_rw(st, new.split('#').next().unwrap_or(&new), "create bookmark") {
        Ok(x) => x,
        Err(o) => return o,
    };
    let r = h.lock().bookmark(&source, &new);
    match r {
        Ok(()) => (String::new(), String::new(), 0),
        Err(e) => err_out(e, &format!("cannot create bookmark '{new}'")),
    }
}

verb_opts!(
    /// `zfs promote` has no options.
    PromoteOpts {});

const ZFS_PROMOTE_USAGE: &str = "usage:\n\tpromote <clone-filesystem>\n";

/// `zfs promote CLONE`: the clone takes its origin's snapshots and place (the old origin
/// becomes its clone). Mounts stay where they are.
pub fn promote(st: &mut State, args: &[String]) -> Out {
    let o = match verb_args::<PromoteOpts>(args, ZFS_PROMOTE_USAGE, &["missing clone filesystem argument"]) {
        Ok(o) => o,
        Err(out) => return out,
    };
    let name = o.operands[0].clone();
    if name.contains('@') {
        return (String::new(), format!("cannot open '{name}': operation not applicable to datasets of this type\n"), 1);
    }
    let h = match imported_rw(st, &name, "promote") {
        Ok((_, h)) => h,
        Err(o) => return o,
    };
    let r = h.lock().promote(&name);
    match r {
        Ok(()) => (String::new(), String::new(), 0),
        Err(e) => err_out(e, &format!("cannot promote '{name}'")),
    }
}

verb_opts!(
    /// `zfs snapshot`'s options.
    SnapshotOpts {
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'r')]
    recursive: bool,
});

const ZFS_SNAPSHOT_USAGE: &str = "usage:\n\tsnapshot [-r] [-o property=value] ... <filesystem|volume>@<snap> ...\n";

/// `zfs snapshot [-r] [-o prop=val]... FS@SNAP...`: every snapshot in one txg, or none.
pub fn snapshot(st: &mut State, args: &[String]) -> Out {
    let o = match parse_or_usage::<SnapshotOpts>(args, ZFS_SNAPSHOT_USAGE) {
        Ok(o) => o,
        Err(out) => return out,
    };
    if o.operands.is_empty() {
        return (String::new(), format!("missing snapshot argument\n{ZFS_SNAPSHOT_USAGE}"), 2);
    }
    let mut props = Vec::new();
    for p in &o.props {
        match p.split_once('=') {
            Some((k, _)) if !k.contains(':') => {
                return (String::new(), format!("cannot create snapshot '{}': property '{k}' cannot be set on snapshots\n", o.operands[0]), 1);
            }
            Some((k, v)) => props.push((k.to_string(), v.to_string())),
            None => return (String::new(), format!("missing '=' for property=value argument\n{ZFS_SNAPSHOT_USAGE}"), 2),
        }
    }
    let multiple = o.recursive || o.operands.len() > 1;
    let mut names = Vec::new();
    let mut pool_name = None;
    for a in &o.operands {
        let Some((fs, snap)) = a.split_once('@') else {
            return (String::new(), ZFS_SNAPSHOT_USAGE.to_string(), 2);
        };
        let pool = fs.split('/').next().unwrap_or(fs).to_string();
        let imp = match st.pools.get(&pool) {
            Some(i) => i,
            None => return (String::new(), format!("cannot open '{fs}': dataset does not exist\n{ZFS_SNAPSHOT_USAGE}"), 2),
        };
        let all: Vec<String> = match imp.pool.datasets() {
            Ok(l) => l.into_iter().map(|d| d.name).filter(|n| !n.contains('@')).collect(),
            Err(e) => return err_out(e, &format!("cannot open '{fs}'")),
        };
        if !all.iter().any(|n| n == fs) {
            return (String::new(), format!("cannot open '{fs}': dataset does not exist\n{ZFS_SNAPSHOT_USAGE}"), 2);
        }
        if pool_name.get_or_insert_with(|| pool.clone()) != &pool {
            return (String::new(), "cannot create snapshots : cross-pool snapshots are not allowed\n".into(), 1);
        }
        names.push(format!("{fs}@{snap}"));
        if o.recursive {
            let mut below: Vec<&String> = all.iter().filter(|n| n.starts_with(&format!("{fs}/"))).collect();
            below.sort();
            names.extend(below.into_iter().map(|n| format!("{n}@{snap}")));
        }
    }
    for n in &names {
        if let Some(why) = oxzfs::dsl_snapshot::snapshot_name_error(n) {
            return (String::new(), format!("cannot create snapshot '{n}': {why}\n"), 1);
        }
    }
    let pool = pool_name.expect("one operand at least");
    let imp = st.pools.get(&pool).expect("looked up above");
    let h = match rw_of(imp, &names[0], "create snapshot") {
        Ok(h) => h,
        Err(o) => return o,
    };
    let r = h.lock().snapshot(&names, &props);
    match r {
        Ok(()) => (String::new(), String::new(), 0),
        Err(e) => {
            let mut out = err_out(e, &format!("cannot create snapshot '{}'", names[0]));
            if multiple {
                out.1.push_str("no snapshots were created\n");
            }
            out
        }
    }
}

/// `zfs set prop=val... FS...`
pub fn set(st: &mut State, args: &[String]) -> Out {
    let usage = SET_USAGE;
    // zfs set takes no options oxzfs knows: a leading '-' word is an invalid option, as in OpenZFS.
    if let Some(c) = args.first().filter(|a| a.len() > 1 && a.starts_with('-')).and_then(|a| a.chars().nth(1)) {
        return (String::new(), format!("invalid option '{c}'\n{usage}"), 2);
    }
    let assigns: Vec<&String> = args.iter().take_while(|a| a.contains('=')).collect();
    let targets: Vec<String> = args[assigns.len()..].to_vec();
    if assigns.is_empty() {
        return (String::new(), format!("missing property=value argument(s)\n{usage}"), 2);
    }
    if targets.is_empty() {
        return (String::new(), format!("missing dataset name(s)\n{usage}"), 2);
    }
    for t in &targets {
        let imp = match pool_of(st, t) {
            Ok(i) => i,
            Err(o) => return o,
        };
        let h = match rw_of(imp, t, "set property for") {
            Ok(h) => h,
            Err(o) => return o,
        };
        // User, group and project quotas live in the file system itself (zfs_set_userquota).
        let mut plain = Vec::new();
        for a in &assigns {
            match crate::userspace::set_quota_prop(&h, &imp.pool, t, a) {
                Ok(true) => {}
                Ok(false) => plain.push(*a),
                Err(e) => return err_out(e, &format!("cannot set property for '{t}'")),
            }
        }
        let r = {
            let mut w = h.lock();
            let mut r = Ok(());
            for a in &plain {
                let (k, v) = a.split_once('=').expect("filtered");
                r = w.set_prop(t, k, Some(v));
                if r.is_err() {
                    break;
                }
            }
            r.and_then(|_| w.sync())
        };
        if let Err(e) = r {
            return err_out(e, &format!("cannot set property for '{t}'"));
        }
        // A new mountpoint or canmount: remount the file system and those below it.
        if assigns.iter().any(|a| a.starts_with("mountpoint=") || a.starts_with("canmount=")) {
            let gone = crate::mounts::take_below(&mut imp.mounts, t);
            let (_, mut err) = crate::mounts::unmount_all(&imp.pool, &mut imp.mounts, gone, false);
            let n = mount_all(&imp.pool, Some(&h), &mut imp.mounts, &mut err);
            if n > 0 || !err.is_empty() {
                return (String::new(), err, 1);
            }
        }
    }
    (String::new(), String::new(), 0)
}

verb_opts!(
    /// `zfs inherit`'s options.
    InheritOpts {
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'S')]
    received: bool,
});

/// `zfs inherit [-r] prop FS...`
pub fn inherit(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<InheritOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{INHERIT_USAGE}"), 2),
    };
    if o.operands.len() < 2 {
        return (String::new(), format!("missing property or dataset argument\n{INHERIT_USAGE}"), 2);
    }
    let prop = o.operands[0].clone();
    if oxzfs::dsl_space::is_space_prop(&prop) {
        return (String::new(), format!("'{prop}' property cannot be inherited\nuse 'zfs set {prop}=none' to clear\nuse 'zfs inherit -S {prop}' to revert to received value\n"), 1);
    }
    for t in &o.operands[1..] {
        let imp = match pool_of(st, t) {
            Ok(i) => i,
            Err(o) => return o,
        };
        let h = match rw_of(imp, t, "inherit property for") {
            Ok(h) => h,
            Err(o) => return o,
        };
        let mut names = vec![t.clone()];
        if o.recursive {
            if let Ok(l) = imp.pool.datasets() {
                names.extend(l.into_iter().map(|d| d.name).filter(|n| n.starts_with(&format!("{t}/"))));
            }
        }
        let r = {
            let mut w = h.lock();
            let mut r = Ok(());
            for n in &names {
                r = w.set_prop(n, &prop, None);
                if r.is_err() {
                    break;
                }
            }
            r.and_then(|_| w.sync())
        };
        if let Err(e) = r {
            return err_out(e, &format!("cannot inherit property for '{t}'"));
        }
    }
    (String::new(), String::new(), 0)
}

const ZFS_RENAME_USAGE: &str = "usage:\n\trename [-f] <filesystem|volume|snapshot> <filesystem|volume|snapshot>\n\trename -p [-f] <filesystem|volume> <filesystem|volume>\n\trename -u [-f] <filesystem> <filesystem>\n\trename -r <snapshot> <snapshot>\n";

verb_opts!(
    /// `zfs rename`'s options.
    RenameOpts {
    #[arg(short = 'p')]
    parents: bool,
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'u')]
    no_remount: bool,
    #[arg(short = 'f')]
    force: bool,
});

/// `zfs rename [-p] [-f] FS NEWFS`: the file system and everything below it take the new
/// name; those mounted are unmounted first and mounted again where their mountpoints now are.
pub fn rename(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<RenameOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{ZFS_RENAME_USAGE}"), 2),
    };
    let bad = |m: &str| (String::new(), format!("{m}\n{ZFS_RENAME_USAGE}"), 2);
    match o.operands.len() {
        0 => return bad("missing source dataset argument"),
        1 => return bad("missing target dataset argument"),
        2 => {}
        _ => return bad("too many arguments"),
    }
    if o.recursive && o.parents {
        return bad("-p and -r options are mutually exclusive");
    }
    if o.no_remount && o.parents {
        return bad("-u and -p options are mutually exclusive");
    }
    let (old, new) = (o.operands[0].clone(), o.operands[1].clone());
    if o.recursive && !old.contains('@') {
        return bad("source dataset for recursive rename must be a snapshot");
    }
    if old.contains('@') || new.contains('@') {
        return (String::new(), format!("cannot rename '{old}': renaming snapshots is not supported yet by the writer\n"), 1);
    }
    if o.no_remount {
        return (String::new(), format!("cannot rename '{old}': renaming without unmounting (-u) is not supported yet\n"), 1);
    }
    let imp = match pool_of(st, &old) {
        Ok(i) => i,
        Err(o) => return o,
    };
    let exists = imp.pool.datasets().map(|l| l.iter().any(|d| d.name == old)).unwrap_or(false);
    if !exists {
        return (String::new(), format!("cannot open '{old}': dataset does not exist\n"), 1);
    }
    if old == new {
        return (String::new(), String::new(), 0);
    }
    let h = match rw_of(imp, &old, "rename") {
        Ok(h) => h,
        Err(o) => return o,
    };
    // Unmount the file system and those below it, deepest first.
    let gone = crate::mounts::take_below(&mut imp.mounts, &old);
    let derived = derived_mountpoints(&imp.pool, &gone.iter().collect::<Vec<_>>());
    let (_, mut err) = crate::mounts::unmount_all(&imp.pool, &mut imp.mounts, gone, o.force);
    let busy = !err.is_empty();
    let r = if busy {
        Ok(())
    } else {
        remove_mountpoints(&derived, &imp.mounts);
        let mut w = h.lock();
        // Synced first: the quota check sees what the file systems hold on disk.
        w.sync().and_then(|_| w.rename_dataset(&old, &new, o.parents)).and_then(|_| w.sync())
    };
    imp.pool.forget_fs(&old);
    let failed = match r {
        Ok(()) => busy,
        Err(e) => {
            err.push_str(&err_out(e, &format!("cannot rename '{old}'")).1);
            true
        }
    };
    // Mount again what can be (under the new names, or the old ones if the rename failed).
    let n = mount_all(&imp.pool, Some(&h), &mut imp.mounts, &mut err);
    (String::new(), err, if failed || n > 0 { 1 } else { 0 })
}


#[cfg(test)]
mod tests {
    use super::*;
    use oxzfs::dsl::DatasetKind::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn types_and_sources() {
        assert_eq!(parse_types(&[]).unwrap(), vec![Filesystem, Volume]);
        assert_eq!(parse_types(&v(&["snap"])).unwrap(), vec![Snapshot]);
        assert_eq!(parse_types(&v(&["fs", "vol"])).unwrap(), vec![Filesystem, Volume]);
        assert!(parse_types(&v(&["nope"])).is_err());
        assert!(source_matches("local", &v(&["local", "default"])));
        assert!(source_matches("inherited from tank", &v(&["inherited"])));
        assert!(source_matches("-", &v(&["none"])));
        assert!(!source_matches("default", &v(&["local"])));
        assert!(source_matches("default", &[]));
    }

    fn ds(name: &str) -> (String, DatasetKind) {
        (name.to_string(), if name.contains('@') { Snapshot } else { Filesystem })
    }

    #[test]
    fn selection_like_zfs() {
        let all: Vec<(String, DatasetKind)> = ["tank", "tank@s1", "tank/a", "tank/a@s2", "tank/a/b", "tank/c"].iter().map(|n| ds(n)).collect();
        let names = |r: Result<Vec<(String, DatasetKind)>, String>| r.unwrap().into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        fn key(x: &(String, DatasetKind)) -> (&str, DatasetKind) {
            (x.0.as_str(), x.1)
        }
        let fs = [Filesystem, Volume];
        let every = [Filesystem, Volume, Snapshot];
        assert_eq!(names(select_from(&all, key, &[], false, None, &fs)), ["tank", "tank/a", "tank/a/b", "tank/c"]);
        assert_eq!(names(select_from(&all, key, &[], false, Some(1), &fs)), ["tank", "tank/a", "tank/c"]);
        assert_eq!(names(select_from(&all, key, &v(&["tank/a"]), false, None, &fs)), ["tank/a"]);
        assert_eq!(names(select_from(&all, key, &v(&["tank/a"]), true, None, &every)), ["tank/a", "tank/a@s2", "tank/a/b"]);
        assert_eq!(names(select_from(&all, key, &v(&["tank"]), false, Some(1), &fs)), ["tank", "tank/a", "tank/c"]);
        assert_eq!(names(select_from(&all, key, &v(&["tank"]), false, None, &[Snapshot])), ["tank@s1"]);
        assert_eq!(names(select_from(&all, key, &v(&["tank@s1"]), false, None, &every)), ["tank@s1"]);
        assert!(select_from(&all, key, &v(&["nope"]), false, None, &fs).is_err());
    }
}
