//! zpool and zfs verbs, run in the daemon against the pools it holds (or locally, for what needs
//! no pool state: listing importable pools). Each returns (stdout, stderr, exit status); usage
//! errors exit 2, other failures 1, with OpenZFS's wording.

use crate::props;
use crate::table::{self, Col};
use oxzfs::dsl::{DatasetInfo, DatasetKind, PropValue};
use oxzfs::pool::{import_listing, ImportOptions, Pool};
use oxzfs::spa;
use oxzfs::txg::PoolHandle;
use oxzfs_fuse::{MountHandle, MountOpts};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Imported {
    pub pool: Arc<Pool>,
    /// Mounted filesystems, parents before children.
    pub mounts: Vec<MountHandle>,
    /// The write state of a pool imported read-write.
    pub rw: Option<Arc<PoolHandle>>,
    /// When it was imported (iostat averages over the time since).
    pub since: std::time::Instant,
}

#[derive(Default)]
pub struct State {
    pub pools: BTreeMap<String, Imported>,
}

pub type Out = (String, String, i32);

fn ok(s: String) -> Out {
    (s, String::new(), 0)
}

fn line(msg: impl Into<String>) -> String {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    m
}

fn fail(msg: impl Into<String>) -> Out {
    (String::new(), line(msg), 1)
}

fn usage(msg: impl Into<String>) -> Out {
    (String::new(), line(msg), 2)
}

const IMPORT_USAGE: &str = "usage:\n\timport [-d dir] [-D]\n\timport [-o mntopts] [-o property=value] ...\n\t    [-d dir | -c cachefile] [-D] [-l] [-f] [-m] [-N] [-R root] [-F [-n]] -a\n\timport [-o mntopts] [-o property=value] ...\n\t    [-d dir | -c cachefile] [-D] [-l] [-f] [-m] [-N] [-R root] [-F [-n]]\n\t    <pool | id> [newpool]";
const EXPORT_USAGE: &str = "usage:\n\texport [-af] <pool> ...";
const STATUS_USAGE: &str = "usage:\n\tstatus [-c [script1,script2,...]] [-igLpPstvxD]  [-T d|u] [pool] ... \n\t    [interval [count]]";
const ZPOOL_LIST_USAGE: &str = "usage:\n\tlist [-gHLpPv] [-o property[,...]] [-T d|u] [pool] ... \n\t    [interval [count]]";
const ZPOOL_GET_USAGE: &str = "usage:\n\tget [-Hp] [-o \"all\" | field[,...]] <\"all\" | property[,...]> <pool> ...";
const ZFS_LIST_USAGE: &str = "usage:\n\tlist [-Hp] [-r|-d max] [-o property[,...]] [-s property]...\n\t    [-S property]... [-t type[,...]] [filesystem|volume|snapshot] ...";
const ZFS_GET_USAGE: &str = "usage:\n\tget [-rHp] [-d max] [-o \"all\" | field[,...]]\n\t    [-t type[,...]] [-s source[,...]]\n\t    <\"all\" | property[,...]> [filesystem|volume|snapshot|bookmark] ...";

/// Parsed short options: flags in order (with their value, for options taking one) and operands.
#[derive(Debug)]
pub struct Opts {
    pub flags: Vec<(char, Option<String>)>,
    pub operands: Vec<String>,
}

/// getopt(3) as zpool/zfs use it: clustered flags (`-Hp`), values attached or in the next word
/// (`-ofoo`, `-o foo`), `--` ending options; options may follow operands (GNU order).
/// `with_value` lists the options taking a value, `plain` the others.
pub fn getopt(args: &[String], with_value: &str, plain: &str) -> Result<Opts, String> {
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
    pub fn has(&self, c: char) -> bool {
        self.flags.iter().any(|(f, _)| *f == c)
    }
    pub fn values(&self, c: char) -> Vec<String> {
        self.flags.iter().filter(|(f, _)| *f == c).filter_map(|(_, v)| v.clone()).collect()
    }
    /// Values of a repeatable comma-list option, split.
    pub fn list(&self, c: char) -> Vec<String> {
        self.values(c).iter().flat_map(|v| v.split(',').map(|s| s.to_string()).collect::<Vec<_>>()).filter(|s| !s.is_empty()).collect()
    }
}

const IMPORT_VALUE_OPTS: &str = "dRocT";
const IMPORT_FLAGS: &str = "fNFnDamlsXtP";

/// `zpool import [-d dir]...` with no pool named and no -a: only lists, needs no daemon.
pub fn import_is_listing(args: &[String]) -> bool {
    match getopt(args, IMPORT_VALUE_OPTS, IMPORT_FLAGS) {
        Ok(o) => o.operands.is_empty() && !o.has('a'),
        Err(_) => true, // the usage error is reported locally too
    }
}

fn abs(cwd: &Path, p: &str) -> PathBuf {
    let p = PathBuf::from(p);
    if p.is_absolute() {
        p
    } else {
        cwd.join(p)
    }
}

/// Where `zpool import` looks: the -d directories (or /dev), or with `-c FILE` the leaf devices
/// of the pools in that cache file (no directory is scanned).
fn search_dirs(o: &Opts, cwd: &Path) -> Result<Vec<PathBuf>, Out> {
    let d: Vec<PathBuf> = o.values('d').iter().map(|d| abs(cwd, d)).collect();
    if let Some(c) = o.values('c').pop() {
        if !d.is_empty() {
            return Err(usage(format!("-c is incompatible with -d\n{IMPORT_USAGE}")));
        }
        return match oxzfs::spa_config::read(&abs(cwd, &c)) {
            Ok(pools) => Ok(pools.iter().flat_map(|(_, cfg)| oxzfs::spa_config::leaf_paths(cfg)).map(PathBuf::from).collect()),
            Err(oxzfs::ZfsError::Io { source, .. }) => {
                let why = source.to_string();
                Err(fail(format!("failed to open cache file: {}", why.split(" (os error").next().unwrap_or(&why))))
            }
            Err(_) => Err(fail("invalid or corrupt cache file contents")),
        };
    }
    Ok(if d.is_empty() { vec![PathBuf::from("/dev/disk/by-id"), PathBuf::from("/dev")] } else { d })
}

/// `zpool import` listing the pools that could be imported (run without the daemon).
pub fn run_local(args: &[String], cwd: &Path) -> Out {
    let rest = args.get(2..).unwrap_or(&[]);
    let o = match getopt(rest, IMPORT_VALUE_OPTS, IMPORT_FLAGS) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{IMPORT_USAGE}")),
    };
    import_list(&o, cwd)
}

fn import_list(o: &Opts, cwd: &Path) -> Out {
    let dirs = match search_dirs(o, cwd) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let scan = spa::scan(&dirs);
    if scan.pools.is_empty() {
        let mut err = String::from("no pools available to import\n");
        for p in &scan.problems {
            err.push_str(&line(p.as_str()));
        }
        return (String::new(), err, 1);
    }
    ok(import_listing(&scan))
}

/// zpool/zfs when no daemon runs: nothing is imported.
pub fn run_without_daemon(args: &[String], cwd: &Path) -> Out {
    execute(&mut State::default(), args, cwd)
}

/// Run one `zpool ...` / `zfs ...` argument vector against the daemon's state. `cwd` is the
/// caller's working directory (relative paths in arguments are taken from there).
pub fn execute(st: &mut State, argv: &[String], cwd: &Path) -> Out {
    let Some(cmd) = argv.first() else {
        return usage("missing command");
    };
    let Some(verb) = argv.get(1) else {
        return usage(format!("usage: {cmd} command args ..."));
    };
    let rest = &argv[2..];
    let before = cachefiles_in_use(st);
    let out = dispatch(st, cmd, verb, rest, cwd);
    // Changes are recorded in the pool's history, as OpenZFS logs its command lines.
    if out.2 == 0 && matches!((cmd.as_str(), verb.as_str()), ("zpool", "create" | "add" | "set" | "import") | ("zfs", "create" | "destroy" | "set" | "inherit" | "rename" | "snapshot" | "snap" | "clone" | "rollback")) {
        let target = if cmd == "zpool" && verb == "set" { rest.get(1) } else { rest.iter().rev().find(|a| !a.starts_with('-')) };
        if let Some(t) = target {
            let pool = if cmd == "zpool" && verb != "set" {
                rest.iter().filter(|a| !a.starts_with('-')).find(|a| st.pools.contains_key(a.as_str())).cloned()
            } else {
                Some(t.split('/').next().unwrap_or(t).to_string())
            };
            if let Some(h) = pool.and_then(|p| st.pools.get(&p)).and_then(|i| i.rw.clone()) {
                if h.lock().log_history(&argv.join(" ")).is_ok() {
                    let _ = h.sync_now();
                }
            }
        }
    }
    // Then the cache files, with the configs as synced (spa_config_sync after the change).
    if cmd == "zpool" && matches!(verb.as_str(), "create" | "import" | "add" | "set" | "export" | "destroy") {
        write_cachefiles(st, before);
    }
    out
}

/// The cache files the imported pools write to.
fn cachefiles_in_use(st: &State) -> std::collections::BTreeSet<String> {
    st.pools.values().filter_map(|i| oxzfs::spa_config::file_of(i.pool.cachefile.lock().unwrap_or_else(|e| e.into_inner()).as_deref()).map(String::from)).collect()
}

/// spa_write_cachefile for every cache file in use now or before the command (`before`): each
/// rewritten with the writable pools that name it, removed when none is left.
fn write_cachefiles(st: &State, before: std::collections::BTreeSet<String>) {
    let mut files = before;
    files.extend(cachefiles_in_use(st));
    for f in files {
        let pools: Vec<(String, oxzfs_format::nvlist::NvList)> = st
            .pools
            .iter()
            .filter(|(_, i)| oxzfs::spa_config::file_of(i.pool.cachefile.lock().unwrap_or_else(|e| e.into_inner()).as_deref()) == Some(f.as_str()))
            .filter_map(|(n, i)| i.rw.as_ref().map(|h| (n.clone(), h.cachefile_config())))
            .collect();
        if let Err(e) = oxzfs::spa_config::write(Path::new(&f), &pools) {
            eprintln!("oxzfs: cannot write cache file '{f}': {e}");
        }
    }
}

fn dispatch(st: &mut State, cmd: &str, verb: &str, rest: &[String], cwd: &Path) -> Out {
    match (cmd, verb) {
        ("zpool", "import") => zpool_import(st, rest, cwd),
        ("zpool", "create") => crate::write_cmds::zpool_create(st, rest, cwd),
        ("zpool", "destroy") => crate::write_cmds::zpool_destroy(st, rest),
        ("zpool", "add") => crate::write_cmds::zpool_add(st, rest, cwd),
        ("zpool", "iostat") => zpool_iostat(st, rest),
        ("zpool", "set") => crate::write_cmds::zpool_set(st, rest),
        ("zpool", "history") => zpool_history(st, rest),
        ("zfs", "create") => crate::write_cmds::zfs_create(st, rest),
        ("zfs", "destroy") => crate::write_cmds::zfs_destroy(st, rest),
        ("zfs", "snapshot" | "snap") => crate::write_cmds::zfs_snapshot(st, rest),
        ("zfs", "clone") => crate::write_cmds::zfs_clone(st, rest),
        ("zfs", "rollback") => crate::write_cmds::zfs_rollback(st, rest),
        ("zfs", "set") => crate::write_cmds::zfs_set(st, rest),
        ("zfs", "inherit") => crate::write_cmds::zfs_inherit(st, rest),
        ("zfs", "rename") => crate::write_cmds::zfs_rename(st, rest),
        ("zpool", "export") => zpool_export(st, rest),
        ("zpool", "status") => zpool_status(st, rest),
        ("zpool", "list") => zpool_list(st, rest),
        ("zpool", "get") => zpool_get(st, rest),
        ("zfs", "list") => zfs_list(st, rest),
        ("zfs", "get") => zfs_get(st, rest),
        ("zfs", "mount") => zfs_mount(st, rest),
        ("zfs", "unmount") | ("zfs", "umount") => zfs_unmount(st, rest),
        ("zpool", v) => usage(format!("unrecognized command '{v}'\n{}", verb_list("zpool", ZPOOL_VERBS))),
        ("zfs", v) => usage(format!("unrecognized command '{v}'\n{}", verb_list("zfs", ZFS_VERBS))),
        (c, _) => usage(format!("unrecognized command '{c}'")),
    }
}

/// The verbs oxzfs answers, in the order OpenZFS's usage lists them.
const ZPOOL_VERBS: &[&str] = &["create", "destroy", "add", "list", "iostat", "status", "import", "export", "history", "get", "set"];
const ZFS_VERBS: &[&str] = &["create", "destroy", "snapshot", "rollback", "clone", "rename", "list", "set", "get", "inherit", "mount", "unmount"];

fn verb_list(cmd: &str, verbs: &[&str]) -> String {
    let mut s = format!("usage: {cmd} command args ...\nwhere 'command' is one of the following:\n\n");
    for v in verbs {
        s.push_str(&format!("\t{v}\n"));
    }
    s.trim_end().to_string()
}

fn zpool_import(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match getopt(args, IMPORT_VALUE_OPTS, IMPORT_FLAGS) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{IMPORT_USAGE}")),
    };
    if o.operands.is_empty() && !o.has('a') {
        return import_list(&o, cwd);
    }
    if o.has('a') && !o.operands.is_empty() {
        return usage(format!("too many arguments\n{IMPORT_USAGE}"));
    }
    if o.operands.len() > 2 {
        return usage(format!("too many arguments\n{IMPORT_USAGE}"));
    }
    // `zpool import POOL NEWPOOL`: the new name must be valid and free.
    let new_name = o.operands.get(1).cloned();
    if let Some(n) = &new_name {
        if let Err(e) = crate::write_cmds::check_pool_name(n, "import") {
            return fail(e);
        }
    }
    let mut readonly = false;
    let mut cachefile = None;
    for p in o.values('o') {
        match p.split_once('=') {
            Some(("cachefile", v)) => match oxzfs::spa_config::validate(v) {
                Ok(()) => cachefile = oxzfs::spa_config::setting(v),
                Err(e) => return fail(format!("cannot import: {e}")),
            },
            Some(("readonly", "on")) => readonly = true,
            Some(("readonly", "off")) => readonly = false,
            Some(("readonly", v)) => return fail(format!("cannot import: property 'readonly' must be 'on' or 'off', not '{v}'")),
            Some((k, _)) if props::zpool_prop(k).is_some() || k == "cachefile" => {}
            Some((k, _)) => return usage(format!("property '{k}' is not a valid pool property")),
            // `-o mntopts` (mount options without '='): read-only mounts already.
            None => {}
        }
    }
    let dirs = match search_dirs(&o, cwd) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let altroot = o.values('R').pop().map(|r| abs(cwd, &r));
    if altroot.is_some() && !o.values('o').iter().any(|p| p.starts_with("cachefile=")) {
        // zpool import -R implies cachefile=none (add_prop_list_default).
        cachefile = Some("none".to_string());
    }
    let which: Vec<String> = if o.has('a') {
        let scan = spa::scan(&dirs);
        let names: Vec<String> = scan.pools.iter().map(|p| p.name.clone()).filter(|n| !st.pools.contains_key(n)).collect();
        if names.is_empty() {
            return fail("no pools available to import");
        }
        names
    } else {
        o.operands[..1].to_vec()
    };
    let mut out = (String::new(), String::new(), 0);
    for which in which {
        if let Some(n) = new_name.as_ref().filter(|n| st.pools.contains_key(n.as_str())) {
            out.1.push_str(&line(format!("cannot import '{which}' as '{n}': pool already exists")));
            out.2 = 1;
            continue;
        }
        if new_name.is_none() && st.pools.contains_key(&which) || st.pools.values().any(|p| p.pool.guid().to_string() == which) {
            out.1.push_str(&line(format!("cannot import '{which}': a pool with that name already exists")));
            out.1.push_str(&line("use the form 'zpool import <pool | id> <newpool>' to give it a new name".to_string()));
            out.2 = 1;
            continue;
        }
        // By numeric id: the pool found may carry the name of one already imported (the
        // kernel's EEXIST in OpenZFS); importing it would take that name's place in the table.
        if new_name.is_none() && which.bytes().all(|b| b.is_ascii_digit()) {
            let taken = spa::scan(&dirs).pools.into_iter().find(|c| c.guid.to_string() == which).map(|c| c.name).filter(|n| st.pools.contains_key(n));
            if let Some(name) = taken {
                out.1.push_str(&line(format!("cannot import '{name}': pool already exists")));
                out.2 = 1;
                continue;
            }
        }
        if !readonly {
            match crate::write_cmds::import_rw(&dirs, &which, new_name.as_deref(), altroot.clone(), o.has('f')) {
                Ok((pool, h)) => {
                    *pool.cachefile.lock().unwrap_or_else(|e| e.into_inner()) = cachefile.clone();
                    let mut mounts = Vec::new();
                    if !o.has('N') && mount_all(&pool, Some(&h), &mut mounts, &mut out.1) > 0 {
                        out.2 = 1;
                    }
                    st.pools.insert(pool.name().to_string(), Imported { pool, mounts, rw: Some(h), since: std::time::Instant::now() });
                }
                Err(e) => {
                    let msg = e.to_string();
                    out.1.push_str(&line(if msg.starts_with("cannot") { msg } else { format!("cannot import '{which}': {msg}") }));
                    out.2 = 1;
                }
            }
            continue;
        }
        let opts = ImportOptions { readonly, altroot: altroot.clone(), force: o.has('f'), arc_max: None, new_name: new_name.clone() };
        let pool = match Pool::import(&dirs, &which, &opts) {
            Ok(p) => p,
            Err(e) => {
                let msg = e.to_string();
                out.1.push_str(&line(if msg.starts_with("cannot") { msg } else { format!("cannot import '{which}': {msg}") }));
                out.2 = 1;
                continue;
            }
        };
        let mut mounts = Vec::new();
        if !o.has('N') && mount_all(&pool, None, &mut mounts, &mut out.1) > 0 {
            out.2 = 1;
        }
        st.pools.insert(pool.name().to_string(), Imported { pool, mounts, rw: None, since: std::time::Instant::now() });
    }
    out
}

fn prop_of(props: &[PropValue], name: &str) -> String {
    props.iter().find(|p| p.name == name).map(|p| p.value.clone()).unwrap_or_default()
}

/// The mountpoints libzfs's remove_mountpoint takes away once file systems are unmounted (on
/// export and rename): those of the default or inherited mountpoint. Gathered before the
/// unmounts; `remove_mountpoints` runs after all of them, so a child's mountpoint directory
/// inside its (by then unmounted) parent stays, as in OpenZFS.
pub fn derived_mountpoints(pool: &Pool, mounts: &[&MountHandle]) -> Vec<PathBuf> {
    mounts
        .iter()
        .filter(|m| pool.prop(&m.dataset, "mountpoint").map(|p| p.source == "default" || p.source.starts_with("inherited")).unwrap_or(false))
        .map(|m| m.mountpoint.clone())
        .collect()
}

/// rmdir each of `dirs` that is no longer a mount point, ignoring errors (remove_mountpoint).
pub fn remove_mountpoints(dirs: &[PathBuf], still_mounted: &[MountHandle]) {
    for d in dirs {
        if !still_mounted.iter().any(|m| &m.mountpoint == d) {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Mount every filesystem with canmount=on and a path mountpoint (altroot already applied by
/// the engine's properties), parents before children. Returns the number of failures.
pub fn mount_all(pool: &Arc<Pool>, rw: Option<&Arc<PoolHandle>>, mounts: &mut Vec<MountHandle>, err: &mut String) -> usize {
    mount_some(pool, rw, mounts, err, None)
}

/// `mount_all`, limited to one dataset when `only` names it.
pub fn mount_some(pool: &Arc<Pool>, rw: Option<&Arc<PoolHandle>>, mounts: &mut Vec<MountHandle>, err: &mut String, only: Option<&str>) -> usize {
    let list = match pool.datasets() {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(err, "cannot mount datasets of '{}': {e}", pool.name());
            return 1;
        }
    };
    let mut todo = Vec::new();
    for ds in list.iter().filter(|d| d.kind == DatasetKind::Filesystem && only.map_or(true, |o| o == d.name)) {
        let props = match pool.props(&ds.name) {
            Ok(p) => p,
            Err(e) => {
                let _ = writeln!(err, "cannot mount '{}': {e}", ds.name);
                continue;
            }
        };
        let mp = prop_of(&props, "mountpoint");
        if prop_of(&props, "canmount") != "on" || !mp.starts_with('/') {
            continue;
        }
        if pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&ds.name) {
            continue;
        }
        let snapdir_visible = prop_of(&props, "snapdir") == "visible";
        todo.push((ds.name.clone(), PathBuf::from(mp), snapdir_visible, ds.ds_obj));
    }
    todo.sort_by(|a, b| a.1.components().count().cmp(&b.1.components().count()).then(a.1.cmp(&b.1)));
    let mut failures = 0;
    for (name, mp, snapdir_visible, dsobj) in todo {
        let ro_mount = || {
            pool.open_fs(&name).and_then(|fs| {
                let opts = MountOpts { snapdir_visible, ..MountOpts::default() };
                oxzfs_fuse::mount(fs, pool.clone(), name.clone(), &mp, &opts)
            })
        };
        let res = match rw {
            // A dataset the writer cannot change yet (snapshots, system attributes) is served
            // read-only, with a note.
            Some(h) => match oxzfs_fuse::rw::mount_rw(h.clone(), dsobj, name.clone(), &mp, Some((pool.clone(), snapdir_visible))) {
                Err(e) if e.errno() == libc::EROFS || matches!(e, oxzfs::ZfsError::Unsupported(_)) => {
                    let _ = writeln!(err, "note: '{name}' is mounted read-only: {e}");
                    ro_mount()
                }
                r => r,
            },
            None => ro_mount(),
        };
        match res {
            Ok(h) => {
                pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), mp.clone());
                mounts.push(h);
            }
            Err(e) => {
                failures += 1;
                let msg = e.to_string();
                let _ = writeln!(err, "{}", if msg.starts_with("cannot") { msg } else { format!("cannot mount '{name}': {msg}") });
            }
        }
    }
    failures
}

impl State {
    /// Unmount and export everything (daemon stop).
    pub fn shutdown(&mut self) -> (String, String) {
        let names: Vec<String> = self.pools.keys().cloned().collect();
        let mut err = String::new();
        for n in names {
            let (_, e, _) = zpool_export(self, &["-f".to_string(), n]);
            err.push_str(&e);
        }
        (String::new(), err)
    }
}

pub fn zpool_export(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "fa") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{EXPORT_USAGE}")),
    };
    let names: Vec<String> = if o.has('a') { st.pools.keys().cloned().collect() } else { o.operands.clone() };
    if names.is_empty() {
        return usage(format!("missing pool argument\n{EXPORT_USAGE}"));
    }
    let mut err = String::new();
    let mut code = 0;
    for n in &names {
        let Some(mut imp) = st.pools.remove(n) else {
            let _ = writeln!(err, "cannot open '{n}': no such pool");
            code = 1;
            continue;
        };
        // Children before parents.
        let mut busy = false;
        let derived = derived_mountpoints(&imp.pool, &imp.mounts.iter().collect::<Vec<_>>());
        while let Some(h) = imp.mounts.pop() {
            let (ds, mp) = (h.dataset.clone(), h.mountpoint.clone());
            match h.unmount(o.has('f')) {
                Ok(()) => {
                    imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
                }
                Err((h, e)) => {
                    let why = if e.raw_os_error() == Some(libc::EBUSY) { "pool or dataset is busy".to_string() } else { e.to_string() };
                    let _ = writeln!(err, "cannot unmount '{}': {why}", mp.display());
                    imp.mounts.push(h);
                    busy = true;
                    break;
                }
            }
        }
        if busy {
            let _ = writeln!(err, "cannot export '{n}': pool is busy");
            code = 1;
            st.pools.insert(n.clone(), imp);
            continue;
        }
        remove_mountpoints(&derived, &imp.mounts);
        if let Some(h) = imp.rw.take() {
            if let Err(e) = h.export() {
                let _ = writeln!(err, "cannot export '{n}': {e}");
                code = 1;
            }
        }
        imp.pool.close();
    }
    (String::new(), err, code)
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
    let o = match getopt(args, "Tc", "vxPLgpDtisi") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{STATUS_USAGE}")),
    };
    let pools = match find_pools(st, &o.operands) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if pools.is_empty() {
        return (String::new(), "no pools available\n".into(), 0);
    }
    let shown: Vec<&&Imported> = if o.has('x') {
        pools.iter().filter(|p| p.pool.health() != oxzfs::vdev::VdevState::Online || !p.pool.spa.errors().is_empty()).collect()
    } else {
        pools.iter().collect()
    };
    if shown.is_empty() {
        return ok(if o.operands.is_empty() {
            "all pools are healthy\n".to_string()
        } else {
            o.operands.iter().map(|n| format!("pool '{n}' is healthy\n")).collect()
        });
    }
    ok(shown.iter().map(|p| p.pool.status_text(o.has('v'))).collect::<Vec<_>>().join("\n"))
}

/// `zpool iostat [-v] [-H] [-p] [pool]...`: capacity, operations and bandwidth per pool (and
/// per vdev with -v), averaged since import, in OpenZFS's layout.
fn zpool_iostat(st: &mut State, args: &[String]) -> Out {
    use oxzfs::vdev::Vdev;
    use std::sync::atomic::Ordering::Relaxed;
    let o = match getopt(args, "", "vHpgLPy") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tiostat [[[-c [script1,script2,...][-lq]]|[-rw]] [-T d | u] [-ghHLpPvy]\n\t    [[pool ...]|[pool vdev ...]|[vdev ...]] [[-n] interval [count]]")),
    };
    let pools = match find_pools(st, &o.operands) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if pools.is_empty() {
        return fail("no pools available");
    }
    let p = o.has('p');
    let num = |n: u64| if p || n < 1024 { n.to_string() } else { oxzfs::dsl::nicebytes(n).trim_end_matches('B').to_string() };
    fn sums(v: &Vdev) -> (u64, u64, u64, u64) {
        if v.is_leaf() {
            let s = &v.stats;
            return (s.read_ops.load(Relaxed), s.write_ops.load(Relaxed), s.read_bytes.load(Relaxed), s.write_bytes.load(Relaxed));
        }
        v.children.iter().map(|c| sums(c)).fold((0, 0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3))
    }
    let mut rows: Vec<(String, String, String, [u64; 4])> = Vec::new();
    for imp in &pools {
        let secs = imp.since.elapsed().as_secs_f64().max(1.0);
        let rate = |x: (u64, u64, u64, u64)| [(x.0 as f64 / secs) as u64, (x.1 as f64 / secs) as u64, (x.2 as f64 / secs) as u64, (x.3 as f64 / secs) as u64];
        let pool = &imp.pool;
        let lr = pool.list_row();
        rows.push((pool.name().to_string(), nice(lr.alloc, p), nice(lr.free, p), rate(sums(&pool.spa.root_vdev))));
        if o.has('v') {
            let section = |label: Option<&str>, tops: Vec<&Arc<Vdev>>, rows: &mut Vec<(String, String, String, [u64; 4])>| {
                if tops.is_empty() {
                    return;
                }
                if let Some(l) = label {
                    rows.push((l.to_string(), String::new(), String::new(), [u64::MAX; 4]));
                }
                for t in tops {
                    let alloc = pool.vdev_alloc(t).unwrap_or(0);
                    rows.push((format!("  {}", t.display_name()), nice(alloc, p), nice(t.asize.saturating_sub(alloc), p), rate(sums(t))));
                    let mut stack: Vec<(&Arc<Vdev>, usize)> = t.children.iter().rev().map(|c| (c, 2)).collect();
                    while let Some((c, d)) = stack.pop() {
                        rows.push((format!("{}{}", "  ".repeat(d), c.display_name()), "-".into(), "-".into(), rate(sums(c))));
                        stack.extend(c.children.iter().rev().map(|k| (k, d + 1)));
                    }
                }
            };
            let kids = &pool.spa.root_vdev.children;
            section(None, kids.iter().filter(|t| !t.is_log && t.alloc_bias.is_empty()).collect(), &mut rows);
            section(Some("dedup"), kids.iter().filter(|t| t.alloc_bias == "dedup").collect(), &mut rows);
            section(Some("special"), kids.iter().filter(|t| t.alloc_bias == "special").collect(), &mut rows);
            section(Some("logs"), kids.iter().filter(|t| t.is_log).collect(), &mut rows);
            // Cache devices hold no pool data (their space is the L2ARC's): OpenZFS shows their
            // size as free while nothing is cached on them.
            let cache = pool.aux_devices("l2cache");
            if !cache.is_empty() {
                rows.push(("cache".into(), String::new(), String::new(), [u64::MAX; 4]));
                for (path, state) in cache {
                    let size = if state == "ONLINE" { oxzfs::pool::l2arc_space(std::path::Path::new(&path)) } else { None };
                    let free = size.map(|n| nice(n, p)).unwrap_or_else(|| "-".into());
                    let alloc = if size.is_some() { nice(0, p) } else { "-".into() };
                    rows.push((format!("  {path}"), alloc, free, [0; 4]));
                }
            }
        }
    }
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(10);
    let mut out = String::new();
    if !o.has('H') {
        let _ = writeln!(out, "{:w$}    capacity     operations     bandwidth ", "");
        let _ = writeln!(out, "{:<w$}  alloc   free   read  write   read  write", "pool");
        let _ = writeln!(out, "{}  -----  -----  -----  -----  -----  -----", "-".repeat(w));
    }
    for (name, a, f, r) in rows {
        if r[0] == u64::MAX {
            // A class heading (print_iostat_dashes with a name): a dash in every column.
            if !o.has('H') {
                let _ = writeln!(out, "{name:<w$}  {:>5}  {:>5}  {:>5}  {:>5}  {:>5}  {:>5}", "-", "-", "-", "-", "-", "-");
            } else {
                let _ = writeln!(out);
            }
            continue;
        }
        let bw = |x: u64| if p || x < 1024 { x.to_string() } else { oxzfs::dsl::nicebytes(x) };
        if o.has('H') {
            let _ = writeln!(out, "{}\t{a}\t{f}\t{}\t{}\t{}\t{}", name.trim(), num(r[0]), num(r[1]), bw(r[2]), bw(r[3]));
        } else {
            let _ = writeln!(out, "{name:<w$}  {a:>5}  {f:>5}  {:>5}  {:>5}  {:>5}  {:>5}", num(r[0]), num(r[1]), bw(r[2]), bw(r[3]));
        }
    }
    if !o.has('H') {
        let _ = writeln!(out, "{}  -----  -----  -----  -----  -----  -----", "-".repeat(w));
    }
    ok(out)
}

/// `zpool history [pool]...`
fn zpool_history(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "il") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\thistory [-il] [<pool>] ...")),
    };
    let pools = match find_pools(st, &o.operands) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let mut out = String::new();
    for imp in pools {
        let _ = writeln!(out, "History for '{}':", imp.pool.name());
        match imp.pool.history() {
            Ok(recs) => {
                for (t, cmd) in recs {
                    let _ = writeln!(out, "{} {cmd}", oxzfs::dsl::history_time(t));
                }
            }
            Err(e) => return fail(format!("cannot read history of '{}': {e}", imp.pool.name())),
        }
        out.push('\n');
    }
    ok(out)
}

fn nice(n: u64, parsable: bool) -> String {
    if parsable {
        n.to_string()
    } else {
        oxzfs::dsl::nicebytes(n)
    }
}

/// Columns of `zpool list` from `-o` (default: OpenZFS's), canonical names.
fn zpool_list_columns(o: &Opts) -> Result<Vec<String>, String> {
    let spec = o.list('o');
    if spec.is_empty() {
        return Ok(["name", "size", "allocated", "free", "checkpoint", "expandsize", "fragmentation", "capacity", "dedupratio", "health", "altroot"]
            .iter()
            .map(|s| s.to_string())
            .collect());
    }
    spec.iter().map(|c| props::zpool_prop(c).ok_or_else(|| format!("invalid property '{c}'"))).collect()
}

fn zpool_value(imp: &Imported, prop: &str, p: bool) -> String {
    let r = imp.pool.list_row();
    match prop {
        "name" => r.name,
        "size" => nice(r.size, p),
        "allocated" => nice(r.alloc, p),
        "free" => nice(r.free, p),
        // OpenZFS prints "-" for a zero checkpoint or expandable size, -p or not.
        "checkpoint" | "expandsize" => "-".into(),
        "fragmentation" => r.frag.map(|f| if p { f.to_string() } else { format!("{f}%") }).unwrap_or_else(|| "-".into()),
        "capacity" => if p { r.cap.to_string() } else { format!("{}%", r.cap) },
        "dedupratio" => if p { format!("{:.2}", r.dedup) } else { format!("{:.2}x", r.dedup) },
        "health" => r.health,
        "altroot" => r.altroot,
        "guid" => imp.pool.guid().to_string(),
        "version" => if imp.pool.spa.version >= 5000 { "-".into() } else { imp.pool.spa.version.to_string() },
        "readonly" => if imp.pool.spa.readonly { "on".into() } else { "off".into() },
        "comment" => imp.rw.as_ref().map(|h| h.lock().config_nv.get_str("comment").map(|c| c.to_string())).unwrap_or_else(|| imp.pool.spa.config.get_str("comment").map(|c| c.to_string())).unwrap_or_else(|| "-".into()),
        "autoexpand" | "autoreplace" | "listsnapshots" | "autotrim" | "multihost" | "delegation" => {
            let d = if prop == "delegation" { 1 } else { 0 };
            if imp.pool.pool_props().get(prop).copied().unwrap_or(d) != 0 { "on".into() } else { "off".into() }
        }
        "failmode" => ["wait", "continue", "panic"].get(imp.pool.pool_props().get("failmode").copied().unwrap_or(0) as usize).unwrap_or(&"wait").to_string(),
        "freeing" | "leaked" => "0".into(),
        "cachefile" => imp.pool.cachefile.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| "-".into()),
        "bootfs" => "-".into(),
        "ashift" => imp.pool.pool_props().get("ashift").copied().unwrap_or(0).to_string(),
        "load_guid" => imp.pool.load_guid.to_string(),
        "compatibility" => "off".into(),
        _ if prop.starts_with("feature@") => feature_state(imp, &prop["feature@".len()..]),
        _ => "-".into(),
    }
}

/// OpenZFS 2.1's features in spa_feature_t order (the order `zpool get all` lists them in).
const FEATURES_2_1: &[&str] = &[
    "async_destroy", "empty_bpobj", "lz4_compress", "multi_vdev_crash_dump", "spacemap_histogram", "enabled_txg", "hole_birth",
    "extensible_dataset", "embedded_data", "bookmarks", "filesystem_limits", "large_blocks", "large_dnode", "sha512", "skein", "edonr",
    "userobj_accounting", "encryption", "project_quota", "device_removal", "obsolete_counts", "zpool_checkpoint", "spacemap_v2",
    "allocation_classes", "resilver_defer", "bookmark_v2", "redaction_bookmarks", "redacted_datasets", "bookmark_written", "log_spacemap",
    "livelist", "device_rebuild", "zstd_compress", "draid",
];

/// feature@NAME of a pool: disabled, enabled (refcount 0) or active (zpool_prop_get_feature) —
/// from the open txg's counts on a pool imported for writing, else from the MOS.
fn feature_state(imp: &Imported, name: &str) -> String {
    let Some(f) = oxzfs_format::features::lookup_name(name) else { return "-".into() };
    let refcount = match &imp.rw {
        Some(h) => h.lock().features.get(f.guid).map(|&(refs, _)| refs),
        None => imp.pool.spa.features_enabled().into_iter().find(|(g, _)| g == f.guid).map(|(_, refs)| refs),
    };
    match refcount {
        None => "disabled",
        Some(0) => "enabled",
        Some(_) => "active",
    }
    .into()
}

fn zpool_list(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "oT", "HpvgLP") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{ZPOOL_LIST_USAGE}")),
    };
    let cols = match zpool_list_columns(&o) {
        Ok(c) => c,
        Err(e) => return usage(format!("{e}\n{ZPOOL_LIST_USAGE}")),
    };
    let pools = match find_pools(st, &o.operands) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if pools.is_empty() {
        return (String::new(), "no pools available\n".into(), 0);
    }
    let p = o.has('p');
    let mut rows: Vec<Vec<String>> = Vec::new();
    for imp in &pools {
        rows.push(cols.iter().map(|c| zpool_value(imp, c, p)).collect());
        if o.has('v') {
            // One row per vdev below the pool, as `zpool list -v` prints them.
            for row in imp.pool.list_vdev_rows() {
                let heading = row.health.is_empty();
                let (size, alloc) = (row.size, row.alloc);
                rows.push(
                    cols.iter()
                        .map(|c| match c.as_str() {
                            "name" => row.name.clone(),
                            "altroot" => String::new(),
                            // A class heading: a dash in every column (print_list_stats).
                            _ if heading => "-".into(),
                            "size" => size.map(|v| nice(v, p)).unwrap_or_else(|| "-".into()),
                            "allocated" => alloc.map(|v| nice(v, p)).unwrap_or_else(|| "-".into()),
                            "free" => match (size, alloc) {
                                (Some(s), Some(a)) => nice(s.saturating_sub(a), p),
                                _ => "-".into(),
                            },
                            "fragmentation" => row.frag.map(|f| if p { f.to_string() } else { format!("{f}%") }).unwrap_or_else(|| "-".into()),
                            "capacity" => match (size, alloc) {
                                (Some(s), Some(a)) if s > 0 => {
                                    let pct = a as f64 * 100.0 / s as f64;
                                    if p { format!("{}", (pct as u64)) } else { format!("{pct:.2}%") }
                                }
                                _ => "-".into(),
                            },
                            "health" => row.health.clone(),
                            _ => "-".into(),
                        })
                        .collect(),
                );
            }
        }
    }
    let spec: Vec<Col> = cols
        .iter()
        .map(|c| {
            let (header, right, min) = props::zpool_column(c);
            Col { header, right, min }
        })
        .collect();
    ok(table::render(&spec, &rows, o.has('H'), true))
}

fn zpool_get(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "o", "Hp") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{ZPOOL_GET_USAGE}")),
    };
    let Some(spec) = o.operands.first() else { return usage(format!("missing property argument\n{ZPOOL_GET_USAGE}")) };
    // OpenZFS 2.1's visible pool properties in zpool_prop_t order, then every feature@.
    let all = [
        "size", "capacity", "altroot", "health", "guid", "version", "bootfs", "delegation", "autoreplace", "cachefile", "failmode",
        "listsnapshots", "autoexpand", "dedupratio", "free", "allocated", "readonly", "ashift", "comment", "expandsize", "freeing",
        "fragmentation", "leaked", "multihost", "checkpoint", "load_guid", "autotrim", "compatibility",
    ];
    let wanted: Vec<String> = if spec == "all" {
        // Then the features oxzfs knows beyond 2.1's (disabled unless asked for).
        let newer = oxzfs::spa_feature::OPTIONAL_FEATURES.iter().map(|f| f.1).filter(|n| !FEATURES_2_1.contains(n));
        all.iter().map(|s| s.to_string()).chain(FEATURES_2_1.iter().copied().chain(newer).map(|f| format!("feature@{f}"))).collect()
    } else {
        let mut v = Vec::new();
        for p in spec.split(',') {
            match props::zpool_prop(p) {
                Some(n) => v.push(n),
                None if p.strip_prefix("feature@").is_some_and(|f| oxzfs_format::features::lookup_name(f).is_some()) => v.push(p.to_string()),
                None => return usage(format!("bad property list: invalid property '{p}'\n{ZPOOL_GET_USAGE}")),
            }
        }
        v
    };
    let pools = match find_pools(st, &o.operands[1..]) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let mut rows = Vec::new();
    for imp in pools {
        for n in &wanted {
            let v = zpool_value(imp, n, o.has('p'));
            let source = match n.as_str() {
                "altroot" => if v == "-" { "default" } else { "local" },
                "readonly" => "-",
                // OpenZFS: "default" only at the default version (5000, shown as "-").
                "version" => if v == "-" { "default" } else { "local" },
                "comment" if v != "-" => "local",
                "cachefile" if v != "-" => "local",
                "ashift" if imp.pool.pool_props().contains_key("ashift") => "local",
                _ if n.starts_with("feature@") => "local",
                "listsnapshots" | "autoexpand" | "autoreplace" | "failmode" | "delegation" | "autotrim" | "multihost"
                    if imp.pool.pool_props().contains_key(n.as_str()) =>
                {
                    "local"
                }
                "comment" | "cachefile" | "bootfs" | "listsnapshots" | "autoexpand" | "autoreplace" | "failmode" | "delegation" | "ashift" | "autotrim" | "multihost"
                | "compatibility" => "default",
                _ => "-",
            };
            rows.push(vec![imp.pool.name().to_string(), n.clone(), v, source.to_string()]);
        }
    }
    // -o: the columns to show, in order (name, property, value, source; "all").
    let fields = ["name", "property", "value", "source"];
    let sel: Vec<usize> = match o.values('o').pop() {
        None => (0..4).collect(),
        Some(list) if list == "all" => (0..4).collect(),
        Some(list) => {
            let mut v = Vec::new();
            for f in list.split(',') {
                match fields.iter().position(|x| *x == f) {
                    Some(i) => v.push(i),
                    None => return usage(format!("invalid field '{f}'\n{ZPOOL_GET_USAGE}")),
                }
            }
            v
        }
    };
    let cols: Vec<Col> = sel.iter().map(|&i| Col::left(["NAME", "PROPERTY", "VALUE", "SOURCE"][i])).collect();
    let rows: Vec<Vec<String>> = rows.into_iter().map(|r| sel.iter().map(|&i| r[i].clone()).collect()).collect();
    ok(table::render(&cols, &rows, o.has('H'), true))
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

/// Select datasets by operands, -r and -d like zfs does.
fn select(st: &State, operands: &[String], recurse: bool, depth: Option<usize>, types: &[DatasetKind]) -> Result<Vec<(Arc<Pool>, DatasetInfo)>, String> {
    let all = all_datasets(st);
    select_from(&all, |(_, d)| (d.name.as_str(), d.kind), operands, recurse, depth, types)
}

fn depth_of(n: &str) -> usize {
    n.split(['/', '@']).count() - 1
}

/// The selection over any list of datasets (`key` gives name and kind), in list order.
fn select_from<T: Clone>(
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

fn zfs_list(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "odtsS", "HprF") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{ZFS_LIST_USAGE}")),
    };
    let types = match parse_types(&o.list('t')) {
        Ok(t) => t,
        Err(e) => return usage(format!("{e}\n{ZFS_LIST_USAGE}")),
    };
    let depth = match o.values('d').pop().map(|d| d.parse::<usize>()) {
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => return usage(format!("invalid depth '{}'\n{ZFS_LIST_USAGE}", o.values('d').pop().unwrap_or_default())),
        None => None,
    };
    let typed = o.list('o');
    let typed = if typed.is_empty() { vec!["name".into(), "used".into(), "available".into(), "referenced".into(), "mountpoint".into()] } else { typed };
    // "space" stands for the space columns (zprop_get_list); alone and without -t it leaves
    // snapshots out.
    let types = if typed == ["space"] && o.list('t').is_empty() { types.into_iter().filter(|k| *k != DatasetKind::Snapshot).collect() } else { types };
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
    for (flag, desc) in o.flags.iter().filter_map(|(f, v)| match f {
        's' => Some((v.clone().unwrap_or_default(), false)),
        'S' => Some((v.clone().unwrap_or_default(), true)),
        _ => None,
    }) {
        match props::zfs_prop(&flag) {
            Some(n) => sorts.push((n, desc)),
            None => return usage(format!("invalid property '{flag}'\n{ZFS_LIST_USAGE}")),
        }
    }
    let sel = match select(st, &o.operands, o.has('r'), depth, &types) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if sel.is_empty() {
        if o.operands.is_empty() && !o.has('H') {
            return (String::new(), "no datasets available\n".to_string(), 0);
        }
        return ok(String::new());
    }
    let p = o.has('p');
    let mut rows: Vec<(Vec<String>, Vec<PropValue>)> = Vec::new();
    for (pool, d) in &sel {
        let pv = pool.props(&d.name).unwrap_or_default();
        let row = cols.iter().map(|c| list_value(d, &pv, c, p)).collect();
        rows.push((row, pv));
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
    ok(table::render(&spec, &rows, o.has('H'), true))
}

fn list_value(d: &DatasetInfo, pv: &[PropValue], prop: &str, parsable: bool) -> String {
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
fn source_matches(source: &str, kinds: &[String]) -> bool {
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

fn zfs_get(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "odts", "Hpr") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{ZFS_GET_USAGE}")),
    };
    let Some(propspec) = o.operands.first().cloned() else {
        return usage(format!("missing property argument\n{ZFS_GET_USAGE}"));
    };
    let mut t = o.list('t');
    if t.is_empty() {
        t.push("all".into());
    }
    let types = match parse_types(&t) {
        Ok(t) => t,
        Err(e) => return usage(format!("{e}\n{ZFS_GET_USAGE}")),
    };
    let depth = match o.values('d').pop().map(|d| d.parse::<usize>()) {
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => return usage(format!("invalid depth '{}'\n{ZFS_GET_USAGE}", o.values('d').pop().unwrap_or_default())),
        None => None,
    };
    let sources = o.list('s');
    for s in &sources {
        if !["local", "default", "inherited", "temporary", "received", "none"].contains(&s.as_str()) {
            return usage(format!("invalid source '{s}'\n{ZFS_GET_USAGE}"));
        }
    }
    let fields: Vec<String> = {
        let f = o.list('o');
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
            None => return usage(format!("bad property list: invalid property '{w}'\n{ZFS_GET_USAGE}")),
        }
    }
    let sel = match select(st, &o.operands[1..], o.has('r'), depth, &types) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut rows = Vec::new();
    for (pool, d) in &sel {
        let pv: Vec<PropValue> = pool.props(&d.name).unwrap_or_default();
        let mut list: Vec<PropValue> = Vec::new();
        for w in &wanted {
            if w == "all" {
                list.extend(pv.iter().cloned());
            } else if w == "name" {
                list.push(PropValue { name: "name".into(), value: d.name.clone(), raw: d.name.clone(), source: "-".into() });
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
    let cols: Vec<Col> = fields.iter().map(|f| Col::left(&f.to_uppercase())).collect();
    ok(table::render(&cols, &rows, o.has('H'), true))
}

fn zfs_mount(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "o", "vlaOf") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tmount\n\tmount [-flvO] [-o opts] <-a | filesystem>")),
    };
    if o.operands.is_empty() && !o.has('a') {
        let mut s = String::new();
        for imp in st.pools.values() {
            for h in &imp.mounts {
                let _ = writeln!(s, "{:<30}  {}", h.dataset, h.mountpoint.display());
            }
        }
        return ok(s);
    }
    let mut err = String::new();
    let mut failures = 0;
    if o.has('a') {
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

/// `zfs unmount [-f] <-a | filesystem | mountpoint>`
fn zfs_unmount(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "fau") {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\nusage:\n\tunmount [-fu] <-a | filesystem|mountpoint>")),
    };
    if o.operands.is_empty() && !o.has('a') {
        return usage("missing filesystem argument\nusage:\n\tunmount [-fu] <-a | filesystem|mountpoint>");
    }
    let wanted = |m: &MountHandle| o.has('a') || o.operands.iter().any(|x| *x == m.dataset || Path::new(x) == m.mountpoint);
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
            match m.unmount(o.has('f')) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use oxzfs::dsl::DatasetKind::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn getopt_like_zpool() {
        let o = getopt(&v(&["-Hp", "-o", "name,size", "tank", "-v"]), "o", "Hpv").unwrap();
        assert!(o.has('H') && o.has('p') && o.has('v'));
        assert_eq!(o.values('o'), vec!["name,size"]);
        assert_eq!(o.operands, vec!["tank"]);
        let o = getopt(&v(&["-oname", "-d", "/a", "-d/b", "--", "-x"]), "od", "").unwrap();
        assert_eq!(o.values('d'), vec!["/a", "/b"]);
        assert_eq!(o.list('o'), vec!["name"]);
        assert_eq!(o.operands, vec!["-x"]);
        assert_eq!(getopt(&v(&["-Hz"]), "", "H").unwrap_err(), "invalid option 'z'");
        assert_eq!(getopt(&v(&["-d"]), "d", "").unwrap_err(), "missing argument for 'd' option");
        // A lone "-" is an operand.
        assert_eq!(getopt(&v(&["-"]), "", "").unwrap().operands, vec!["-"]);
    }

    #[test]
    fn import_listing_or_not() {
        assert!(import_is_listing(&v(&["-d", "/x"])));
        assert!(import_is_listing(&v(&[])));
        assert!(!import_is_listing(&v(&["-d", "/x", "tank"])));
        assert!(!import_is_listing(&v(&["-a", "-d", "/x"])));
        assert!(!import_is_listing(&v(&["-d", "/x", "-o", "readonly=on", "-R", "/alt", "tank"])));
    }

    #[test]
    fn verbs_without_pools() {
        let cwd = Path::new("/");
        let mut st = State::default();
        let r = execute(&mut st, &v(&["zpool", "list"]), cwd);
        assert_eq!((r.1.as_str(), r.2), ("no pools available\n", 0));
        let r = execute(&mut st, &v(&["zpool", "status", "tank"]), cwd);
        assert_eq!((r.1.as_str(), r.2), ("cannot open 'tank': no such pool\n", 1));
        let r = execute(&mut st, &v(&["zpool", "export"]), cwd);
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("missing pool argument\nusage:\n\texport"));
        let r = execute(&mut st, &v(&["zpool", "export", "tank"]), cwd);
        assert_eq!((r.1.as_str(), r.2), ("cannot open 'tank': no such pool\n", 1));
        let r = execute(&mut st, &v(&["zfs", "list"]), cwd);
        assert_eq!((r.1.as_str(), r.2), ("no datasets available\n", 0));
        let r = execute(&mut st, &v(&["zfs", "list", "tank/x"]), cwd);
        assert_eq!((r.1.as_str(), r.2), ("cannot open 'tank/x': dataset does not exist\n", 1));
        let r = execute(&mut st, &v(&["zfs", "list", "-Q"]), cwd);
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("invalid option 'Q'\nusage:\n\tlist"));
        for (args, msg) in [(&["-Q", "x"][..], "invalid option 'Q'"), (&["a=b"][..], "missing pool name"), (&["a=b", "p", "q"][..], "too many pool names")] {
            let r = execute(&mut st, &v(&[&["zpool", "set"][..], args].concat()), cwd);
            assert_eq!(r.2, 2);
            assert!(r.1.starts_with(&format!("{msg}\nusage:\n\tset <property=value> <pool> \n")), "{}", r.1);
        }
        let r = execute(&mut st, &v(&["zfs", "list", "-o", "nope"]), cwd);
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("invalid property 'nope'"));
        let r = execute(&mut st, &v(&["zfs", "list", "-t", "bogus"]), cwd);
        assert_eq!(r.2, 2);
        let r = execute(&mut st, &v(&["zfs", "get"]), cwd);
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("missing property argument"));
        let r = execute(&mut st, &v(&["zfs", "get", "bogus", "tank"]), cwd);
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("bad property list: invalid property 'bogus'"));
        let r = execute(&mut st, &v(&["zpool", "frobnicate"]), cwd);
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("unrecognized command 'frobnicate'"));
        let r = execute(&mut st, &v(&["zpool"]), cwd);
        assert_eq!(r.2, 2);
        let r = execute(&mut st, &v(&["zpool", "list", "-o", "bogus"]), cwd);
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("invalid property 'bogus'"));
    }

    #[test]
    fn import_errors() {
        let mut st = State::default();
        let r = execute(&mut st, &v(&["zpool", "import", "-d", "/nonexistent", "tank"]), Path::new("/"));
        assert_eq!(r.2, 1);
        assert_eq!(r.1, "cannot import 'tank': no such pool available\n");
        let r = execute(&mut st, &v(&["zpool", "import", "-o", "bogus=1", "-d", "/x", "tank"]), Path::new("/"));
        assert_eq!(r.2, 2);
        let r = execute(&mut st, &v(&["zpool", "import", "-d", "/x", "-Z", "tank"]), Path::new("/"));
        assert_eq!(r.2, 2);
        assert!(r.1.starts_with("invalid option 'Z'\nusage:\n\timport"));
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
        assert_eq!(abs(Path::new("/home/u"), "d"), PathBuf::from("/home/u/d"));
        assert_eq!(abs(Path::new("/home/u"), "/d"), PathBuf::from("/d"));
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
