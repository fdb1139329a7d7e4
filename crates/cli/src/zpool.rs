//! The `zpool` verbs: create, destroy, add, import, export, status, clear, scrub, wait, list,
//! iostat, history, get, set, with OpenZFS's usage text and messages. `zpool import` without a
//! pool named only lists (run locally, no daemon); the others run in the daemon against the
//! pools it holds.

use crate::mounts::{derived_mountpoints, mount_all, remove_mountpoints};
use crate::props;
use clap::ValueEnum;
use crate::table::{self, Col};
use crate::vdevspec::{self, Group};
use crate::opts::{comma_list, parse, verb_opts};
use crate::verb::{abs, err_out, fail, line, ok, usage, Imported, Out, State};
use oxzfs::pool::{import_listing, ImportOptions, Pool};
use oxzfs::spa;
use oxzfs::dsl_pool::PoolW;
use oxzfs::spa_create::{CreateSpec, VdevClass, VdevSpec};
use oxzfs::txg::PoolHandle;
use oxzfs::vdev::VdevState;
use oxzfs::ZfsError;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The verbs oxzfs answers, in the order OpenZFS's `zpool` lists them (clap reads the name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Verb {
    Create,
    Destroy,
    Add,
    Remove,
    Labelclear,
    Sync,
    List,
    Iostat,
    Status,
    Online,
    Offline,
    Clear,
    Attach,
    Detach,
    Replace,
    Scrub,
    Trim,
    Reguid,
    Import,
    Export,
    Upgrade,
    History,
    Get,
    Set,
    Wait,
}

impl Verb {
    /// The verb's usage: OpenZFS's get_usage() text limited to the options oxzfs takes.
    pub fn usage(self) -> &'static str {
        match self {
            Verb::Create => CREATE_USAGE,
            Verb::Destroy => DESTROY_USAGE,
            Verb::Add => ADD_USAGE,
            Verb::Remove => REMOVE_USAGE,
            Verb::Labelclear => crate::labelclear::LABELCLEAR_USAGE,
            Verb::Sync => SYNC_USAGE,
            Verb::List => ZPOOL_LIST_USAGE,
            Verb::Iostat => crate::iostat::USAGE,
            Verb::Status => STATUS_USAGE,
            Verb::Clear => CLEAR_USAGE,
            Verb::Scrub => SCRUB_USAGE,
            Verb::Trim => TRIM_USAGE,
            Verb::Reguid => REGUID_USAGE,
            Verb::Wait => WAIT_USAGE,
            Verb::Import => IMPORT_USAGE,
            Verb::Export => EXPORT_USAGE,
            Verb::Upgrade => crate::upgrade::UPGRADE_USAGE,
            Verb::History => HISTORY_USAGE,
            Verb::Get => ZPOOL_GET_USAGE,
            Verb::Set => SET_USAGE,
            Verb::Offline => OFFLINE_USAGE,
            Verb::Online => ONLINE_USAGE,
            Verb::Attach => ATTACH_USAGE,
            Verb::Detach => DETACH_USAGE,
            Verb::Replace => REPLACE_USAGE,
        }
    }

    /// Run the verb with the words after it; `cwd` is the caller's working directory.
    pub fn run(self, st: &mut State, args: &[String], cwd: &Path) -> Out {
        match self {
            Verb::Create => create(st, args, cwd),
            Verb::Destroy => destroy(st, args),
            Verb::Add => add(st, args, cwd),
            Verb::Remove => remove(st, args),
            Verb::Labelclear => crate::labelclear::labelclear(st, args, cwd),
            Verb::Sync => sync(st, args),
            Verb::List => list(st, args),
            Verb::Iostat => crate::iostat::iostat(st, args),
            Verb::Status => status(st, args),
            Verb::Clear => clear(st, args),
            Verb::Scrub => scrub(st, args),
            Verb::Trim => trim(st, args, cwd),
            Verb::Reguid => reguid(st, args),
            Verb::Wait => wait(st, args),
            Verb::Import => import(st, args, cwd),
            Verb::Export => export(st, args),
            Verb::Upgrade => crate::upgrade::upgrade(st, args),
            Verb::History => history(st, args),
            Verb::Get => get(st, args),
            Verb::Set => set(st, args),
            Verb::Offline => offline(st, args, cwd),
            Verb::Online => online(st, args, cwd),
            Verb::Attach => attach_or_replace(st, args, cwd, false),
            Verb::Replace => attach_or_replace(st, args, cwd, true),
            Verb::Detach => detach(st, args, cwd),
        }
    }
}

const HISTORY_USAGE: &str = "usage:\n\thistory [-il] [<pool>] ...";
const DESTROY_USAGE: &str = "usage:\n\tdestroy [-f] <pool>\n";
const SET_USAGE: &str = "usage:\n\tset <property=value> <pool> \n";
const IMPORT_USAGE: &str = "usage:\n\timport [-d dir] [-D]\n\timport [-o mntopts] [-o property=value] ...\n\t    [-d dir | -c cachefile] [-D] [-l] [-f] [-m] [-N] [-R root] [-F [-n]] -a\n\timport [-o mntopts] [-o property=value] ...\n\t    [-d dir | -c cachefile] [-D] [-l] [-f] [-m] [-N] [-R root] [-F [-n]]\n\t    <pool | id> [newpool]";

const EXPORT_USAGE: &str = "usage:\n\texport [-af] <pool> ...";

const STATUS_USAGE: &str = "usage:\n\tstatus [-c [script1,script2,...]] [-igLpPstvxD]  [-T d|u] [pool] ... \n\t    [interval [count]]";

const ZPOOL_LIST_USAGE: &str = "usage:\n\tlist [-gHLpPv] [-o property[,...]] [-T d|u] [pool] ... \n\t    [interval [count]]";

const ZPOOL_GET_USAGE: &str = "usage:\n\tget [-Hp] [-o \"all\" | field[,...]] <\"all\" | property[,...]> <pool> ...";

verb_opts!(
    /// `zpool import`'s options.
    ImportOpts {
    #[arg(short = 'd')]
    dirs: Vec<String>,
    #[arg(short = 'R')]
    altroot: Vec<String>,
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'c')]
    cachefile: Vec<String>,
    #[arg(short = 'T')]
    txg: Vec<String>,
    #[arg(short = 'f')]
    force: bool,
    #[arg(short = 'N')]
    no_mount: bool,
    #[arg(short = 'F')]
    rewind: bool,
    #[arg(short = 'n')]
    dry_run: bool,
    #[arg(short = 'D')]
    destroyed: bool,
    #[arg(short = 'a')]
    all: bool,
    #[arg(short = 'm')]
    missing_log: bool,
    #[arg(short = 'l')]
    load_keys: bool,
    #[arg(short = 's')]
    scan: bool,
    #[arg(short = 'X')]
    extreme_rewind: bool,
    #[arg(short = 't')]
    temp_name: bool,
    #[arg(short = 'P')]
    full_paths: bool,
});

/// `zpool import [-d dir]...` with no pool named and no -a: only lists, needs no daemon.
pub fn import_is_listing(args: &[String]) -> bool {
    match parse::<ImportOpts>(args) {
        Ok(o) => o.operands.is_empty() && !o.all,
        Err(_) => true, // the usage error is reported locally too
    }
}

/// Where `zpool import` looks: the -d directories (or /dev), or with `-c FILE` the leaf devices
/// of the pools in that cache file (no directory is scanned).
pub fn search_dirs(o: &ImportOpts, cwd: &Path) -> Result<Vec<PathBuf>, Out> {
    let d: Vec<PathBuf> = o.dirs.iter().map(|d| abs(cwd, d)).collect();
    if let Some(c) = o.cachefile.last().cloned() {
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
    let o = match parse::<ImportOpts>(rest) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{IMPORT_USAGE}")),
    };
    import_list(&o, cwd)
}

pub fn import_list(o: &ImportOpts, cwd: &Path) -> Out {
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

pub fn import(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match parse::<ImportOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{IMPORT_USAGE}")),
    };
    if o.operands.is_empty() && !o.all {
        return import_list(&o, cwd);
    }
    if o.all && !o.operands.is_empty() {
        return usage(format!("too many arguments\n{IMPORT_USAGE}"));
    }
    if o.operands.len() > 2 {
        return usage(format!("too many arguments\n{IMPORT_USAGE}"));
    }
    // `zpool import POOL NEWPOOL`: the new name must be valid and free.
    let new_name = o.operands.get(1).cloned();
    if let Some(n) = &new_name {
        if let Err(e) = check_pool_name(n, "import") {
            return fail(e);
        }
    }
    let mut readonly = false;
    let mut cachefile = None;
    for p in o.props.clone() {
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
    let altroot = o.altroot.last().cloned().map(|r| abs(cwd, &r));
    if altroot.is_some() && !o.props.iter().any(|p| p.starts_with("cachefile=")) {
        // zpool import -R implies cachefile=none (add_prop_list_default).
        cachefile = Some("none".to_string());
    }
    let which: Vec<String> = if o.all {
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
    // -l: the keys of the imported pools' encryption roots are loaded before their file
    // systems mount (zfs_crypto_attempt_load_keys), from each root's keylocation.
    let mount_now = !o.no_mount && !o.load_keys;
    let mut imported = Vec::new();
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
        let opts = ImportOptions { readonly, altroot: altroot.clone(), force: o.force, arc_max: None, new_name: new_name.clone(), missing_log: o.missing_log, no_mount: o.no_mount };
        if !readonly {
            match import_rw(&dirs, &which, &opts) {
                Ok((pool, h)) => {
                    oxzfs::dsl_scrub::resume_after_import(&h);
                    oxzfs::vdev_removal_thread::resume_after_import(&h);
                    oxzfs::vdev_rebuild_thread::resume_after_import(&h);
                    oxzfs::vdev_trim::resume_after_import(&h);
                    *pool.cachefile.lock().unwrap_or_else(|e| e.into_inner()) = cachefile.clone();
                    let mut mounts = Vec::new();
                    if mount_now && mount_all(&pool, Some(&h), &mut mounts, &mut out.1) > 0 {
                        out.2 = 1;
                    }
                    imported.push(pool.name().to_string());
                    st.pools.insert(pool.name().to_string(), Imported { pool, mounts, rw: Some(h), since: std::time::Instant::now() });
                }
                Err(e) => {
                    out.1.push_str(&line(import_failure(&which, e)));
                    out.2 = 1;
                }
            }
            continue;
        }
        let pool = match Pool::import(&dirs, &which, &opts) {
            Ok(p) => p,
            Err(e) => {
                out.1.push_str(&line(import_failure(&which, e)));
                out.2 = 1;
                continue;
            }
        };
        let mut mounts = Vec::new();
        if mount_now && mount_all(&pool, None, &mut mounts, &mut out.1) > 0 {
            out.2 = 1;
        }
        imported.push(pool.name().to_string());
        st.pools.insert(pool.name().to_string(), Imported { pool, mounts, rw: None, since: std::time::Instant::now() });
    }
    if o.load_keys && !imported.is_empty() {
        let (no_mount, pools) = (o.no_mount, imported.clone());
        let loaded = crate::keys::load_then(st, &[], true, Some(&imported), move |st| {
            let mut err = String::new();
            let mut failed = false;
            for p in &pools {
                if let Some(imp) = st.pools.get_mut(p) {
                    let rw = imp.rw.clone();
                    failed |= !no_mount && mount_all(&imp.pool, rw.as_ref(), &mut imp.mounts, &mut err) > 0;
                }
            }
            (String::new(), err, failed as i32)
        });
        return (out.0 + &loaded.0, out.1 + &loaded.1, out.2.max(loaded.2));
    }
    out
}

impl State {
    /// Unmount and export everything (daemon stop).
    pub fn shutdown(&mut self) -> (String, String) {
        let names: Vec<String> = self.pools.keys().cloned().collect();
        let mut err = String::new();
        for n in names {
            let (_, e, _) = export(self, &["-f".to_string(), n]);
            err.push_str(&e);
        }
        (String::new(), err)
    }
}

verb_opts!(
    /// `zpool export`'s options.
    ExportOpts {
    #[arg(short = 'f')]
    force: bool,
    #[arg(short = 'a')]
    all: bool,
});

pub fn export(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<ExportOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{EXPORT_USAGE}")),
    };
    let names: Vec<String> = if o.all { st.pools.keys().cloned().collect() } else { o.operands.clone() };
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
            match h.unmount(o.force) {
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
            // The rebuild thread first: at its end it may start a scrub.
            oxzfs::vdev_rebuild_thread::stop(&h);
            oxzfs::dsl_scrub::stop(&h);
            oxzfs::vdev_removal_thread::stop(&h);
            oxzfs::vdev_trim::stop(&h);
            if let Err(e) = h.export() {
                let _ = writeln!(err, "cannot export '{n}': {e}");
                code = 1;
            }
        }
        imp.pool.close();
    }
    (String::new(), err, code)
}

pub fn find_pools<'a>(st: &'a State, names: &[String]) -> Result<Vec<&'a Imported>, Out> {
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

verb_opts!(
    /// `zpool status`'s options.
    StatusOpts {
    #[arg(short = 'T')]
    timestamp: Vec<String>,
    #[arg(short = 'c')]
    scripts: Vec<String>,
    #[arg(short = 'v')]
    verbose: bool,
    #[arg(short = 'x')]
    only_unhealthy: bool,
    #[arg(short = 'P')]
    full_paths: bool,
    #[arg(short = 'L')]
    follow_links: bool,
    #[arg(short = 'g')]
    guids: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 'D')]
    dedup: bool,
    #[arg(short = 't')]
    trim: bool,
    #[arg(short = 'i')]
    initialize: bool,
    #[arg(short = 's')]
    slow_ios: bool,
});

pub fn status(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<StatusOpts>(args) {
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
    let shown: Vec<&&Imported> = if o.only_unhealthy {
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
    ok(shown.iter().map(|p| p.pool.status_text_with(o.verbose, p.rw.as_ref().is_some_and(|h| h.is_suspended()), o.trim)).collect::<Vec<_>>().join("\n"))
}

const CLEAR_USAGE: &str = "usage:\n\tclear <pool> [device]";

verb_opts!(
    /// `zpool clear` takes no options.
    ClearOpts {

});

/// `zpool clear POOL [DEVICE]` (zpool_do_clear): the error counts of the pool's vdevs, or of
/// DEVICE and what is below it, back to zero.
pub fn clear(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<ClearOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{CLEAR_USAGE}")),
    };
    match o.operands.len() {
        0 => return usage(format!("missing pool name\n{CLEAR_USAGE}")),
        1 | 2 => {}
        _ => return usage(format!("too many arguments\n{CLEAR_USAGE}")),
    }
    let name = &o.operands[0];
    let Some(imp) = st.pools.get_mut(name) else {
        return fail(format!("cannot open '{name}': no such pool"));
    };
    let target = match o.operands.get(1) {
        None => None,
        Some(dev) => match imp.pool.spa.root_vdev.find(dev) {
            Some(v) => Some(v.guid),
            None => return fail(format!("cannot clear errors for {dev}: no such device in pool")),
        },
    };
    // vdev_clear reopens the removed leaves at or below the target: those whose device is
    // back return (and are resilvered), the others stay REMOVED. A pool whose I/O is
    // suspended fails with EIO while a device is absent, as zio_resume makes it; with every
    // device back its waiting sync is resumed (the same device back at its path returns in
    // place: the sync holds the pool, which cannot be reopened under it).
    if let Some(h) = imp.rw.clone() {
        let what = o.operands.get(1).unwrap_or(name);
        let spa = imp.pool.spa.clone();
        let under: Vec<&oxzfs::vdev::Vdev> = match target.and_then(|g| spa.root_vdev.find(&g.to_string())) {
            Some(t) => t.leaves(),
            None => spa.root_vdev.leaves(),
        };
        let removed: Vec<Option<PathBuf>> = under.into_iter().filter(|l| l.state() == VdevState::Removed).map(|l| oxzfs::vdev_probe::returned(&spa, l)).collect();
        let gate_root = h.io_gate();
        if gate_root.stats.io_gate.suspended().is_some() {
            // (The pool's tree as the waiting sync has it, not the read side's.)
            let absent = gate_root.leaves().into_iter().any(|l| l.state() == VdevState::Removed && !l.dev.as_ref().is_some_and(|d| !d.gone()));
            if absent {
                return fail(format!("cannot clear errors for {what}: I/O error"));
            }
            oxzfs::vdev_probe::back_in_place(&gate_root);
            if let Err(e) = h.resume_io() {
                return fail(format!("cannot clear errors for {what}: I/O error ({e})"));
            }
        } else if h.is_suspended() {
            let absent = spa.root_vdev.leaves().into_iter().any(|l| l.state() == VdevState::Removed && oxzfs::vdev_probe::returned(&spa, l).is_none());
            return fail(if absent {
                format!("cannot clear errors for {what}: I/O error")
            } else {
                format!("cannot clear errors for {what}: I/O error (the pool's I/O is suspended: export it and import it again)")
            });
        }
        let back: Vec<PathBuf> = removed.into_iter().flatten().collect();
        if !back.is_empty() {
            let dirs = device_dirs(imp, &back.iter().map(|p| p.as_path()).collect::<Vec<_>>());
            oxzfs::vdev_probe::undo_same(&h.lock());
            if let Err(e) = reopen(imp, &h, &dirs) {
                return err_out(e, &format!("cannot clear errors for {what}: reopening the pool"));
            }
        }
    }
    let root = &imp.pool.spa.root_vdev;
    // vdev_clear: faults forced with `offline -f` lifted (a resilver of what they missed).
    let mut resilver = false;
    if let Some(h) = &imp.rw {
        match h.lock().vdev_clear_faults(target) {
            Ok(stale) => resilver = stale,
            Err(e) => return fail(format!("cannot clear errors for {name}: {e}")),
        }
    }
    let cleared = o.operands.get(1).and_then(|dev| root.find(dev)).unwrap_or(root);
    cleared.clear_errors();
    // A leaf back in use that misses txgs (writes failed on it) is resilvered, as vdev_clear's
    // reopen asks for one.
    let resilvering = { let sc = imp.pool.spa.scan.lock(); sc.scanning() && sc.phys.func == oxzfs_format::dsl::POOL_SCAN_RESILVER };
    resilver |= !resilvering && cleared.leaves().into_iter().any(|l| l.stats.stale() && !l.out_of_use() && l.dev.is_some());
    if let Some(h) = &imp.rw {
        h.lock().log_devices_cleared();
        if resilver {
            if let Err(e) = oxzfs::dsl_scrub::resilver(h) {
                return err_out(e, &format!("cannot resilver '{name}'"));
            }
        }
    }
    ok(String::new())
}

const SCRUB_USAGE: &str = "usage:\n\tscrub [-s | -p] [-w] <pool> ...";
const REGUID_USAGE: &str = "usage:\n\treguid <pool>";

/// `zpool reguid POOL` (zpool_do_reguid, spa_change_guid): a new guid for the pool, written to
/// every label and the MOS config; the pool is reopened by it (an image of the pool's devices
/// can then be imported beside the original).
pub fn reguid(st: &mut State, args: &[String]) -> Out {
    if let Some(opt) = args.iter().find_map(|a| a.strip_prefix('-').filter(|o| !o.is_empty())) {
        return usage(format!("invalid option '{}'\n{REGUID_USAGE}", opt.chars().next().unwrap_or('-')));
    }
    let name = match args {
        [] => return usage(format!("missing pool name\n{REGUID_USAGE}")),
        [n] => n.clone(),
        _ => return usage(format!("too many arguments\n{REGUID_USAGE}")),
    };
    let Some(imp) = st.pools.get_mut(&name) else {
        return fail(format!("cannot open '{name}': no such pool"));
    };
    let Some(h) = imp.rw.clone() else {
        // EROFS from the ioctl of a read-only pool.
        return fail(format!("cannot reguid '{name}': pool is read-only"));
    };
    let r = h.lock().reguid();
    if let Err(e) = r {
        return err_out(e, &format!("cannot reguid '{name}'"));
    }
    let dirs = device_dirs(imp, &[]);
    match reopen(imp, &h, &dirs) {
        Ok(()) => ok(String::new()),
        Err(e) => err_out(e, &format!("cannot reguid '{name}'")),
    }
}

const TRIM_USAGE: &str = "usage:\n\ttrim [-dw] [-r <rate>] [-c | -s] <pool> [<device> ...]";

/// `zpool trim [-dw] [-r RATE] [-c | -s] POOL [DEVICE...]` (zpool_do_trim): start, suspend or
/// cancel the TRIM of the named leaves, or of every leaf of the pool; -w waits for it after the
/// daemon's lock is let go. The options are read in order, as getopt gives them to
/// zpool_do_trim, for its checks of their combinations.
pub fn trim(st: &mut State, args: &[String], cwd: &Path) -> Out {
    use oxzfs::vdev_trim::TrimCmd;
    #[derive(PartialEq)]
    enum Func {
        Start,
        Cancel,
        Suspend,
    }
    let mut func = Func::Start;
    let (mut secure, mut wait, mut rate) = (false, false, None);
    let mut operands = Vec::new();
    let mut it = args.iter();
    let bad = |msg: String| usage(format!("{msg}\n{TRIM_USAGE}"));
    while let Some(a) = it.next() {
        if a == "--" {
            operands.extend(it.by_ref().cloned());
            break;
        }
        // getopt_long's names of the same options.
        let long = match a.split_once('=').map_or(a.as_str(), |(k, _)| k) {
            "--cancel" => Some("-c"),
            "--secure" => Some("-d"),
            "--rate" => Some("-r"),
            "--suspend" => Some("-s"),
            "--wait" => Some("-w"),
            _ => None,
        };
        let joined;
        let a = match (long, a.split_once('=')) {
            (Some(f), Some((_, v))) => {
                joined = format!("{f}{v}");
                &joined
            }
            (Some(f), None) => {
                joined = f.to_string();
                &joined
            }
            (None, _) => a,
        };
        let Some(flags) = a.strip_prefix('-').filter(|f| !f.is_empty()) else {
            operands.push(a.clone());
            continue;
        };
        let mut chars = flags.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                'c' => {
                    if func == Func::Suspend {
                        return bad("-c cannot be combined with other options".into());
                    }
                    func = Func::Cancel;
                }
                's' => {
                    if func == Func::Cancel {
                        return bad("-s cannot be combined with other options".into());
                    }
                    func = Func::Suspend;
                }
                'd' => {
                    if func != Func::Start {
                        return bad("-d cannot be combined with the -c or -s options".into());
                    }
                    secure = true;
                }
                'w' => wait = true,
                'r' => {
                    if func != Func::Start {
                        return bad("-r cannot be combined with the -c or -s options".into());
                    }
                    let rest = &flags[i + 1..];
                    let v = if rest.is_empty() {
                        match it.next() {
                            Some(v) => v.clone(),
                            None => return bad("missing argument for 'r' option".into()),
                        }
                    } else {
                        rest.to_string()
                    };
                    match oxzfs::tunables::parse_value(&v) {
                        Some(n) => rate = Some(n),
                        None => return bad("invalid value for rate".into()),
                    }
                    break;
                }
                other => return bad(format!("invalid option '{other}'")),
            }
        }
    }
    if operands.is_empty() {
        return bad("missing pool name argument".into());
    }
    if wait && func != Func::Start {
        return bad("-w cannot be used with -c or -s".into());
    }
    let name = operands[0].clone();
    // zpool_do_trim returns -1 for these: the exit status is 255.
    let Some(imp) = st.pools.get(&name) else {
        return (String::new(), format!("cannot open '{name}': no such pool\n"), 255);
    };
    let Some(h) = imp.rw.clone() else {
        // The ioctl's EROFS, without a list of vdev errors (zpool_standard_error).
        return (String::new(), "operation failed: pool is read-only\n".into(), 255);
    };
    let fullpool = operands.len() == 1;
    // The leaves named (by path, name or guid, as zpool_find_vdev takes them), each with the
    // name it is reported by; or every leaf that can be trimmed.
    let mut named: Vec<(u64, String)> = Vec::new();
    if fullpool {
        named = oxzfs::vdev_trim::pool_leaves(&h);
    } else {
        // zpool_translate_vdev_guids: any name that is not a leaf of the pool fails the
        // command before anything changes.
        let mut err = String::new();
        let aux = |key: &str, dev: &str| {
            let full = std::fs::canonicalize(abs(cwd, dev)).map(|p| p.display().to_string()).unwrap_or_default();
            imp.pool.aux_devices(key).iter().any(|(p, _)| p == dev || *p == full || Path::new(p).file_name().is_some_and(|n| n == std::ffi::OsStr::new(dev)))
        };
        for dev in &operands[1..] {
            match find_leaf(imp, dev, cwd) {
                Some(g) => named.push((g, dev.clone())),
                None if aux("spares", dev) => {
                    let _ = writeln!(err, "cannot trim '{dev}': device is reserved as a hot spare");
                }
                None if aux("l2cache", dev) => {
                    let _ = writeln!(err, "cannot trim '{dev}': device is in use as a cache");
                }
                // An interior vdev (mirror-0): the kernel's EINVAL.
                None if imp.pool.spa.root_vdev.find(dev).is_some() => {
                    let _ = writeln!(err, "cannot trim '{dev}': invalid device");
                }
                None => {
                    let _ = writeln!(err, "cannot trim '{dev}': no such device in pool");
                }
            }
        }
        if !err.is_empty() {
            return (String::new(), err, 255);
        }
    }
    let cmd = match func {
        Func::Start => TrimCmd::Start { rate, secure },
        Func::Cancel => TrimCmd::Cancel,
        Func::Suspend => TrimCmd::Suspend,
    };
    // A trim's change of state waits for nothing the thread holds: stop it first, as the
    // other commands that take the pool do, and start it again after.
    oxzfs::vdev_trim::stop(&h);
    let r = h.lock().trim_command(&named.iter().map(|n| n.0).collect::<Vec<_>>(), cmd);
    oxzfs::vdev_trim::start(&h);
    let errors = match r {
        Ok(e) => e,
        Err(e) => return err_out(e, "operation failed"),
    };
    let mut err = String::new();
    let mut suppressed = 0;
    for (g, errno) in &errors {
        // check_trim_errs: a pool's leaves that cannot trim are not reported one by one
        // (unless a secure trim was asked for).
        if *errno == libc::EOPNOTSUPP && fullpool && !secure {
            suppressed += 1;
            continue;
        }
        let path = named.iter().find(|n| n.0 == *g).map_or_else(|| g.to_string(), |n| n.1.clone());
        let why = match *errno {
            libc::ENODEV => "no such device in pool",
            libc::EINVAL | libc::EROFS => "invalid device",
            libc::EBUSY => "currently trimming",
            libc::ESRCH => "there is no active trim",
            _ => "trim operations are not supported by this device",
        };
        let _ = writeln!(err, "cannot trim '{path}': {why}");
    }
    if suppressed > 0 && suppressed == named.len() {
        let _ = writeln!(err, "cannot trim: no devices in pool support trim operations");
    }
    if !err.is_empty() {
        // zpool_trim's -1, the command's exit status.
        return (String::new(), err, 255);
    }
    if wait {
        // (lzc_wait_tag per leaf named: the others' trims are not waited for.)
        let started: Vec<u64> = named.iter().map(|n| n.0).filter(|g| !errors.iter().any(|e| e.0 == *g)).collect();
        st.trim_waits.push((h, Some(started)));
    }
    ok(String::new())
}
const WAIT_USAGE: &str = "usage:\n\twait [-t <activity>[,...]] <pool>";

verb_opts!(
    /// `zpool scrub`'s options.
    ScrubOpts {
    #[arg(short = 's')]
    stop: bool,
    #[arg(short = 'p')]
    pause: bool,
    #[arg(short = 'w')]
    wait: bool,
});

/// `zpool scrub [-s | -p] [-w] POOL...` (zpool_do_scrub): start, resume, pause or cancel the
/// scrub of pools imported read-write; -w waits for it after the daemon's lock is let go.
pub fn scrub(st: &mut State, args: &[String]) -> Out {
    use oxzfs::dsl_scrub::{self, ScrubCmd};
    let o = match parse::<ScrubOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{SCRUB_USAGE}")),
    };
    let (cancel, pause, wait) = (o.stop, o.pause, o.wait);
    if cancel && pause {
        return usage(format!("invalid option combination: -s and -p are mutually exclusive\n{SCRUB_USAGE}"));
    }
    if wait && (cancel || pause) {
        return usage(format!("invalid option combination: -w cannot be used with -p or -s\n{SCRUB_USAGE}"));
    }
    if o.operands.is_empty() {
        return usage(format!("missing pool name argument\n{SCRUB_USAGE}"));
    }
    let (cmd, what) = match (cancel, pause) {
        (true, _) => (ScrubCmd::Cancel, "cannot cancel scrubbing"),
        (_, true) => (ScrubCmd::Pause, "cannot pause scrubbing"),
        _ => (ScrubCmd::Start, "cannot scrub"),
    };
    let mut err = String::new();
    for name in &o.operands {
        let Some(imp) = st.pools.get(name) else {
            let _ = writeln!(err, "cannot open '{name}': no such pool");
            continue;
        };
        let Some(h) = &imp.rw else {
            let _ = writeln!(err, "{what} {name}: pool is read-only");
            continue;
        };
        match dsl_scrub::scrub(h, cmd) {
            Ok(()) if wait => st.waits.push(imp.pool.spa.clone()),
            Ok(()) => {}
            Err(e) => {
                let _ = writeln!(err, "{what} {name}: {e}");
            }
        }
    }
    let code = i32::from(!err.is_empty());
    (String::new(), err, code)
}

verb_opts!(
    /// `zpool wait`'s options.
    WaitOpts {
    #[arg(short = 't')]
    activities: Vec<String>,
});

/// `zpool wait [-t ACTIVITY[,...]] POOL` (zpool_do_wait): returns once no activity named is
/// under way. Of OpenZFS's activities a scrub, a resilver and a device removal can run here;
/// the others are never in progress.
pub fn wait(st: &mut State, args: &[String]) -> Out {
    const ACTIVITIES: [&str; 8] = ["discard", "free", "initialize", "replace", "remove", "resilver", "scrub", "trim"];
    let o = match parse::<WaitOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{WAIT_USAGE}")),
    };
    let mut scrub = o.activities.clone().is_empty();
    let mut resilver = o.activities.clone().is_empty();
    let mut remove = o.activities.clone().is_empty();
    let mut trim = o.activities.clone().is_empty();
    for list in o.activities.clone() {
        for a in list.split(',') {
            if !ACTIVITIES.contains(&a) {
                return usage(format!("invalid activity '{a}'\n{WAIT_USAGE}"));
            }
            scrub |= a == "scrub";
            resilver |= a == "resilver" || a == "replace";
            remove |= a == "remove";
            trim |= a == "trim";
        }
    }
    match o.operands.len() {
        0 => return usage(format!("missing 'pool' argument\n{WAIT_USAGE}")),
        1 => {}
        _ => return usage(format!("too many arguments\n{WAIT_USAGE}")),
    }
    let name = &o.operands[0];
    let Some(imp) = st.pools.get(name) else {
        return fail(format!("cannot open '{name}': no such pool"));
    };
    if remove {
        if let Some(h) = &imp.rw {
            st.removal_waits.push((h.clone(), None));
        }
    }
    if trim {
        if let Some(h) = &imp.rw {
            st.trim_waits.push((h.clone(), None));
        }
    }
    // (spa_activity_in_progress: a scrub is waited for as a scrub only, a resilver as a
    // healing resilver or a sequential one, attach/replace -s.)
    if scrub {
        st.waits.push(imp.pool.spa.clone());
    }
    if resilver {
        st.resilver_waits.push(imp.pool.spa.clone());
        if let Some(h) = &imp.rw {
            st.rebuild_waits.push(h.clone());
        }
    }
    ok(String::new())
}

verb_opts!(
    /// `zpool history`'s options.
    HistoryOpts {
    #[arg(short = 'i')]
    internal: bool,
    #[arg(short = 'l')]
    long: bool,
});

/// `zpool history [pool]...`
pub fn history(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<HistoryOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{HISTORY_USAGE}")),
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
                for rec in recs {
                    match rec {
                        oxzfs::pool::HistoryRecord::Command { time, cmd } => {
                            let _ = writeln!(out, "{} {cmd}", oxzfs::dsl::history_time(time));
                        }
                        // print_history_records: "[txg:T] NAME MSG", with -i only.
                        oxzfs::pool::HistoryRecord::Internal { time, txg, name, msg } if o.internal => {
                            let _ = writeln!(out, "{} [txg:{txg}] {name} {msg}", oxzfs::dsl::history_time(time));
                        }
                        oxzfs::pool::HistoryRecord::Internal { .. } => {}
                    }
                }
            }
            Err(e) => return fail(format!("cannot read history of '{}': {e}", imp.pool.name())),
        }
        out.push('\n');
    }
    ok(out)
}

pub fn nice(n: u64, parsable: bool) -> String {
    if parsable {
        n.to_string()
    } else {
        oxzfs::dsl::nicebytes(n)
    }
}

/// Columns of `zpool list` from `-o` (default: OpenZFS's), canonical names.
pub fn zpool_list_columns(fields: &[String]) -> Result<Vec<String>, String> {
    let spec = comma_list(fields);
    if spec.is_empty() {
        return Ok(["name", "size", "allocated", "free", "checkpoint", "expandsize", "fragmentation", "capacity", "dedupratio", "health", "altroot"]
            .iter()
            .map(|s| s.to_string())
            .collect());
    }
    spec.iter().map(|c| props::zpool_prop(c).ok_or_else(|| format!("invalid property '{c}'"))).collect()
}

pub fn zpool_value(imp: &Imported, prop: &str, p: bool) -> String {
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
        "version" => if imp.pool.spa.version() >= 5000 { "-".into() } else { imp.pool.spa.version().to_string() },
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
pub fn feature_state(imp: &Imported, name: &str) -> String {
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

verb_opts!(
    /// `zpool list`'s options.
    ListOpts {
    #[arg(short = 'o')]
    fields: Vec<String>,
    #[arg(short = 'T')]
    timestamp: Vec<String>,
    #[arg(short = 'H')]
    scripted: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 'v')]
    verbose: bool,
    #[arg(short = 'g')]
    guids: bool,
    #[arg(short = 'L')]
    follow_links: bool,
    #[arg(short = 'P')]
    full_paths: bool,
});

pub fn list(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<ListOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{ZPOOL_LIST_USAGE}")),
    };
    let cols = match zpool_list_columns(&o.fields) {
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
    let p = o.parsable;
    let mut rows: Vec<Vec<String>> = Vec::new();
    for imp in &pools {
        rows.push(cols.iter().map(|c| zpool_value(imp, c, p)).collect());
        if o.verbose {
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
    ok(table::render(&spec, &rows, o.scripted, true))
}

verb_opts!(
    /// `zpool get`'s options.
    GetOpts {
    #[arg(short = 'o')]
    fields: Vec<String>,
    #[arg(short = 'H')]
    scripted: bool,
    #[arg(short = 'p')]
    parsable: bool,
});

pub fn get(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<GetOpts>(args) {
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
            let v = zpool_value(imp, n, o.parsable);
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
    let sel: Vec<usize> = match o.fields.last().cloned() {
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
    ok(table::render(&cols, &rows, o.scripted, true))
}

const CREATE_USAGE: &str = "usage:\n\tcreate [-fnd] [-o property=value] ... \n\t    [-O file-system-property=value] ... \n\t    [-m mountpoint] [-R root] <pool> <vdev> ...";

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

pub fn arc_max() -> u64 {
    oxzfs::tunables::arc_max().unwrap_or_else(oxzfs::arc::AdaptiveCache::default_max)
}

/// OpenZFS's pool name rules (zfs_namecheck's pool_namecheck, through zpool_name_valid); the
/// error says "cannot VERB 'NAME': why".
pub fn check_pool_name(name: &str, verb: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("cannot {verb} '{name}': invalid character{why}"));
    // Room for "/$ORIGIN@$ORIGIN" within ZFS_MAX_DATASET_NAME_LEN (256), checked first.
    if name.len() >= 256 - 2 - 2 * "$ORIGIN".len() {
        return Err(format!("cannot {verb} '{name}': name is too long"));
    }
    if name.is_empty() {
        return Err(format!("cannot {verb} '': name must begin with a letter"));
    }
    if !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return Err(format!("cannot {verb} '{name}': name must begin with a letter"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "_-:. ".contains(*c))) {
        return bad(&format!(" '{c}' in pool name"));
    }
    for r in ["mirror", "raidz", "draid", "spare", "log", "cache", "special", "dedup"] {
        if name.starts_with(r) && (r != "log" || name == "log") {
            return Err(format!("cannot {verb} '{name}': name is reserved\npool name may have been omitted"));
        }
    }
    Ok(())
}

pub fn layout_text(name: &str, spec: &vdevspec::Spec) -> String {
    let mut s = format!("would create '{name}' with the following layout:\n\n\t{name}\n");
    let group = |s: &mut String, g: &Group| match g {
        Group::Disk(p) => s.push_str(&format!("\t  {}\n", p.display())),
        Group::Mirror(d) | Group::Raidz(_, d) => {
            let kind = match g {
                Group::Mirror(_) => "mirror".to_string(),
                Group::Raidz(p, _) => format!("raidz{p}"),
                _ => unreachable!(),
            };
            s.push_str(&format!("\t  {kind}\n"));
            for p in d {
                s.push_str(&format!("\t    {}\n", p.display()));
            }
        }
    };
    for g in &spec.data {
        group(&mut s, g);
    }
    for (label, gs) in [("dedup", &spec.dedup), ("special", &spec.special), ("logs", &spec.log)] {
        if !gs.is_empty() {
            s.push_str(&format!("\t{label}\n"));
            for g in gs {
                group(&mut s, g);
            }
        }
    }
    for (label, ds) in [("cache", &spec.cache), ("spares", &spec.spare)] {
        if !ds.is_empty() {
            s.push_str(&format!("\t{label}\n"));
            for d in ds {
                s.push_str(&format!("\t  {}\n", d.display()));
            }
        }
    }
    s
}

verb_opts!(
    /// `zpool create`'s options.
    CreateOpts {
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'O')]
    fs_props: Vec<String>,
    #[arg(short = 'm')]
    mountpoint: Vec<String>,
    #[arg(short = 'R')]
    altroot: Vec<String>,
    #[arg(short = 'f')]
    force: bool,
    #[arg(short = 'n')]
    dry_run: bool,
    #[arg(short = 'd')]
    no_features: bool,
});

pub fn create(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match parse::<CreateOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{CREATE_USAGE}\n"), 2),
    };
    if o.operands.is_empty() {
        return (String::new(), format!("missing pool name argument\n{CREATE_USAGE}\n"), 2);
    }
    if o.operands.len() < 2 {
        return (String::new(), format!("missing vdev specification\n{CREATE_USAGE}\n"), 2);
    }
    let name = o.operands[0].clone();
    if let Err(e) = check_pool_name(&name, "create") {
        return (String::new(), format!("{e}\n"), 1);
    }
    let force = o.force;
    let spec = match vdevspec::parse(&o.operands[1..], cwd, force) {
        Ok(s) => s,
        Err(e) => return (String::new(), format!("{e}\n"), 1),
    };
    let mut cs = CreateSpec { name: name.clone(), hostname: hostname(), fs_init: Some(oxzfs::zplw::init_fs), ..Default::default() };
    if o.no_features {
        // -d: no features enabled (they may be enabled one by one with -o feature@...=enabled).
        cs.disabled = oxzfs::spa_feature::DEFAULT_FEATURES.iter().map(|f| f.1.to_string()).collect();
    }
    let mut cachefile = None;
    for p in o.props.clone() {
        let Some((k, v)) = p.split_once('=') else {
            return (String::new(), format!("missing '=' for property=value argument\n{CREATE_USAGE}\n"), 2);
        };
        match k {
            "ashift" => match ashift_option(v) {
                Ok(a) => {
                    cs.ashift = if a == 0 { None } else { Some(a) };
                    cs.pool_props.push((k.to_string(), a.to_string()));
                }
                Err(e) => return (String::new(), e, 1),
            },
            "version" => match v.parse::<u64>() {
                Ok(n) if n == 5000 || (1..=28).contains(&n) => cs.version = Some(n),
                _ => return (String::new(), format!("cannot create '{name}': invalid property value '{v}' for 'version'\n"), 1),
            },
            _ if k.starts_with("feature@") => {
                let f = &k["feature@".len()..];
                if oxzfs::spa_feature::supported_feature(f).is_none() {
                    return (String::new(), format!("cannot create '{name}': feature '{f}' unsupported by oxzfs\n"), 1);
                }
                match v {
                    "disabled" => cs.disabled.push(f.to_string()),
                    "enabled" => {
                        cs.disabled.retain(|d| d != f);
                        cs.enabled.push(f.to_string());
                    }
                    _ => return (String::new(), format!("property '{k}' can only be set to 'enabled' or 'disabled'\n"), 1),
                }
            }
            "cachefile" => match oxzfs::spa_config::validate(v) {
                Ok(()) => cachefile = oxzfs::spa_config::setting(v),
                Err(e) => return (String::new(), format!("cannot create '{name}': {e}\n"), 1),
            },
            "comment" | "autoexpand" | "failmode" | "autoreplace" | "listsnapshots" | "delegation" | "autotrim" | "multihost" => {
                cs.pool_props.push((k.to_string(), v.to_string()))
            }
            "bootfs" => {}
            _ => return (String::new(), format!("property '{k}' is not a valid pool property\n"), 1),
        }
    }
    for p in o.fs_props.clone() {
        let Some((k, v)) = p.split_once('=') else {
            return (String::new(), format!("missing '=' for property=value argument\n{CREATE_USAGE}\n"), 2);
        };
        cs.fs_props.push((k.to_string(), v.to_string()));
    }
    if let Some(m) = o.mountpoint.last().cloned() {
        cs.fs_props.push(("mountpoint".into(), m));
    }
    // Every device must exist and not belong to a pool.
    for d in spec.all_devices() {
        if !d.exists() {
            return (String::new(), format!("cannot open '{}': No such file or directory\n", d.display()), 1);
        }
        if let Ok(p) = spa::probe(&d) {
            let pname = p.config.get_str("name").unwrap_or("").to_string();
            if p.state == 0 || (p.state == 1 && !force) {
                return (String::new(), in_use(&d, p.state == 0, &pname, force) + "\n", 1);
            }
        }
    }
    if st.pools.contains_key(&name) {
        return (String::new(), format!("cannot create '{name}': pool already exists\n"), 1);
    }
    if o.dry_run {
        return (layout_text(&name, &spec), String::new(), 0);
    }
    for (class, groups) in [(VdevClass::Normal, &spec.data), (VdevClass::Special, &spec.special), (VdevClass::Dedup, &spec.dedup), (VdevClass::Log, &spec.log)] {
        for g in groups {
            cs.vdevs.push((
                class,
                match g {
                    Group::Disk(p) => VdevSpec::File(p.clone()),
                    Group::Mirror(d) => VdevSpec::Mirror(d.clone()),
                    Group::Raidz(n, d) => VdevSpec::Raidz(*n, d.clone()),
                },
            ));
        }
    }
    cs.cache = spec.cache.clone();
    cs.spares = spec.spare.clone();
    if (!spec.special.is_empty() || !spec.dedup.is_empty()) && cs.disabled.iter().any(|d| d == "allocation_classes") {
        return (String::new(), format!("cannot create '{name}': operation not supported on this type of pool\n"), 1);
    }
    let pw = match PoolW::create(&cs, arc_max()) {
        Ok(p) => p,
        Err(e) => {
            let m = e.to_string();
            return (String::new(), format!("{}\n", if m.starts_with("cannot") { m } else { format!("cannot create '{name}': {m}") }), 1);
        }
    };
    let altroot = o.altroot.last().cloned().map(|r| if Path::new(&r).is_absolute() { PathBuf::from(r) } else { cwd.join(r) });
    if altroot.is_some() && !o.props.clone().iter().any(|p| p.starts_with("cachefile=")) {
        // zpool create -R implies cachefile=none (add_prop_list_default).
        cachefile = Some("none".to_string());
    }
    let mut dirs: Vec<PathBuf> = spec.all_devices().iter().filter_map(|d| d.parent().map(|p| p.to_path_buf())).collect();
    dirs.sort();
    dirs.dedup();
    let h = PoolHandle::start(pw);
    oxzfs::vdev_probe::spawn(&h);
    // Open the new pool as an import would: the vdev tree and config as they are on disk.
    let spa = match h.reopen(&dirs) {
        Ok(s) => s,
        Err(e) => {
            let _ = h.export();
            return err_out(e, &format!("cannot create '{name}': the new pool does not open"));
        }
    };
    let pool = Pool::from_spa(spa, altroot, &dirs);
    *pool.cachefile.lock().unwrap_or_else(|e| e.into_inner()) = cachefile;
    let mut mounts = Vec::new();
    let mut err = String::new();
    let code = if mount_all(&pool, Some(&h), &mut mounts, &mut err) > 0 { 1 } else { 0 };
    // (-o autotrim=on: the thread that runs its passes.)
    oxzfs::vdev_trim::resume_after_import(&h);
    st.pools.insert(name, Imported { pool, mounts, rw: Some(h), since: std::time::Instant::now() });
    (String::new(), err, code)
}

/// Import a pool read-write: the write state and the read view over the same Spa.
/// `new_name`: import under that name (written into the labels and MOS config at once).
/// What `zpool import` says when a pool cannot be imported (its own words when the engine
/// gave them, as zpool_import_props prints them).
fn import_failure(which: &str, e: ZfsError) -> String {
    let msg = e.to_string();
    if msg.starts_with("cannot") || msg.starts_with("The devices below") {
        msg
    } else {
        format!("cannot import '{which}': {msg}")
    }
}

pub fn import_rw(dirs: &[PathBuf], which: &str, opts: &ImportOptions) -> Result<(Arc<Pool>, Arc<PoolHandle>), ZfsError> {
    let (new_name, altroot) = (opts.new_name.as_deref(), opts.altroot.clone());
    let mut scan = spa::scan(dirs);
    let cand = oxzfs::spa::choose_as(&mut scan, which, new_name)?;
    cand.missing_log_ok = opts.missing_log;
    let mut pw = PoolW::open(cand, arc_max(), &hostname())?;
    pw.fs_init = oxzfs::zplw::init_fs;
    // The intent logs a crash left: claimed and replayed before anything mounts (with -N,
    // claimed: the first mount replays them).
    let rep = oxzfs::zfs_replay::replay_pool(&mut pw, !opts.no_mount)?;
    for r in &rep.replayed {
        tracing::info!("{r}");
    }
    for r in &rep.refused {
        tracing::warn!("{r}");
    }
    if new_name.is_some() {
        pw.config_dirty = true;
        pw.sync()?;
    }
    let spa = pw.spa.clone();
    let h = PoolHandle::start(pw);
    oxzfs::vdev_probe::spawn(&h);
    Ok((Pool::from_spa(spa, altroot, dirs), h))
}

verb_opts!(
    /// `zpool destroy`'s options.
    DestroyOpts {
    #[arg(short = 'f')]
    force: bool,
});

/// `zpool destroy [-f] POOL`: unmount, mark the labels destroyed.
pub fn destroy(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<DestroyOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{DESTROY_USAGE}"), 2),
    };
    if o.operands.len() != 1 {
        return (String::new(), format!("missing pool argument\n{DESTROY_USAGE}"), 2);
    }
    let name = o.operands[0].clone();
    let Some(imp) = st.pools.get(&name) else {
        return (String::new(), format!("cannot open '{name}': no such pool\n"), 1);
    };
    let Some(h) = imp.rw.clone() else {
        return (String::new(), format!("cannot destroy '{name}': pool is read-only\n"), 1);
    };
    let mut args = vec![name.clone()];
    if o.force {
        args.insert(0, "-f".into());
    }
    // Export (unmount, sync, labels) then mark destroyed.
    let r = export(st, &args);
    if r.2 != 0 {
        return (String::new(), r.1.replace("cannot export", "cannot destroy"), r.2);
    }
    match h.mark_destroyed() {
        Ok(()) => (String::new(), String::new(), 0),
        Err(e) => err_out(e, &format!("cannot destroy '{name}'")),
    }
}

const ADD_USAGE: &str = "usage:\n\tadd [-fgLnP] [-o property=value] <pool> <vdev> ...";

verb_opts!(
    /// `zpool add`'s options.
    AddOpts {
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'f')]
    force: bool,
    #[arg(short = 'g')]
    guids: bool,
    #[arg(short = 'L')]
    follow_links: bool,
    #[arg(short = 'n')]
    dry_run: bool,
    #[arg(short = 'P')]
    full_paths: bool,
});

/// `zpool add [-f] [-n] [-o ashift=N] POOL VDEV...`
pub fn add(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match parse::<AddOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{ADD_USAGE}\n"), 2),
    };
    if o.operands.is_empty() {
        return (String::new(), format!("missing pool name argument\n{ADD_USAGE}\n"), 2);
    }
    if o.operands.len() < 2 {
        return (String::new(), format!("missing vdev specification\n{ADD_USAGE}\n"), 2);
    }
    let name = o.operands[0].clone();
    let mut ashift = None;
    for p in o.props.clone() {
        match p.split_once('=') {
            Some(("ashift", v)) => match ashift_option(v) {
                Ok(a) => ashift = (a != 0).then_some(a),
                Err(e) => return (String::new(), e, 1),
            },
            _ => return (String::new(), format!("property '{p}' is not a valid pool property for 'add'\n"), 1),
        }
    }
    // The new vdevs parse like create's, but a lone cache/log/special section is allowed.
    let mut operands = o.operands[1..].to_vec();
    let mut data_missing = false;
    if matches!(operands.first().map(|s| s.as_str()), Some("log" | "cache" | "special" | "dedup" | "spare")) {
        operands.insert(0, "/dev/null".into());
        data_missing = true;
    }
    let mut spec = match vdevspec::parse(&operands, cwd, o.force) {
        Ok(s) => s,
        Err(e) => return (String::new(), format!("{e}\n"), 1),
    };
    if data_missing {
        spec.data.clear();
    }
    let Some(imp) = st.pools.get_mut(&name) else {
        return (String::new(), format!("cannot open '{name}': no such pool\n"), 1);
    };
    let Some(h) = imp.rw.clone() else {
        return (String::new(), format!("cannot add to '{name}': pool is read-only\n"), 1);
    };
    // Each device opened and checked for a pool that claims it, before the replication level
    // (make_root_vdev's order).
    for d in spec.all_devices() {
        if !d.exists() {
            return (String::new(), format!("cannot open '{}': No such file or directory\n", d.display()), 1);
        }
        if let Ok(p) = spa::probe(&d) {
            let pname = p.config.get_str("name").unwrap_or("").to_string();
            if p.state == 0 || (p.state == 1 && !o.force) {
                return (String::new(), in_use(&d, p.state == 0, &pname, o.force) + "\n", 1);
            }
        }
    }
    // Replication level of new data vdevs against the pool's (needs -f to differ).
    if !o.force {
        let pool_kind: Vec<String> = imp
            .pool
            .spa
            .root_vdev
            .children
            .iter()
            .filter(|t| !t.is_log && t.alloc_bias.is_empty())
            .map(|t| match &t.kind {
                oxzfs::vdev::VdevKind::Mirror => "mirror".to_string(),
                oxzfs::vdev::VdevKind::Raidz { .. } => "raidz".to_string(),
                _ => "disk".to_string(),
            })
            .collect();
        for g in &spec.data {
            let k = match g {
                Group::Disk(_) => "disk",
                Group::Mirror(_) => "mirror",
                Group::Raidz(..) => "raidz",
            };
            if let Some(pk) = pool_kind.first() {
                if pk != k {
                    return (
                        String::new(),
                        format!("invalid vdev specification\nuse '-f' to override the following errors:\nmismatched replication level: pool uses {pk} and new vdev is {k}\n"),
                        1,
                    );
                }
            }
        }
    }
    if o.dry_run {
        return (layout_text(&name, &spec).replace("would create", "would update"), String::new(), 0);
    }
    let mut vdevs = Vec::new();
    for (class, groups) in [(VdevClass::Normal, &spec.data), (VdevClass::Special, &spec.special), (VdevClass::Dedup, &spec.dedup), (VdevClass::Log, &spec.log)] {
        for g in groups {
            vdevs.push((
                class,
                match g {
                    Group::Disk(p) => VdevSpec::File(p.clone()),
                    Group::Mirror(d) => VdevSpec::Mirror(d.clone()),
                    Group::Raidz(n, d) => VdevSpec::Raidz(*n, d.clone()),
                },
            ));
        }
    }
    let r = if spec.spare.is_empty() { Ok(()) } else { h.lock().add_spares(&spec.spare) };
    let r = r.and_then(|_| h.lock().add_vdevs(&vdevs, &spec.cache, ashift));
    if let Err(e) = r {
        return err_out(e, &format!("cannot add to '{name}'"));
    }
    // Reopen over every device directory: the new vdevs join the allocator.
    let mut dirs: Vec<PathBuf> = imp.pool.spa.devices.values().filter_map(|(p, _)| p.parent().map(|d| d.to_path_buf())).collect();
    dirs.extend(spec.all_devices().iter().filter_map(|d| d.parent().map(|p| p.to_path_buf())));
    dirs.sort();
    dirs.dedup();
    match reopen(imp, &h, &dirs) {
        Ok(()) => (String::new(), String::new(), 0),
        Err(e) => err_out(e, &format!("cannot add to '{name}': reopening the pool")),
    }
}

/// The pool's read side follows its write state when the engine opened the pool again by
/// itself (a device removal that finished in the background): same mounts and cache file.
/// True when it did.
pub fn refresh(imp: &mut Imported) -> bool {
    let Some(h) = &imp.rw else { return false };
    let spa = h.spa();
    if Arc::ptr_eq(&spa, &imp.pool.spa) {
        return false;
    }
    let dirs = oxzfs::vdev_removal_thread::device_dirs(&spa);
    let mounted = std::mem::take(&mut *imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()));
    let pool = Pool::from_spa(spa, imp.pool.altroot.clone(), &dirs);
    *pool.mounted.lock().unwrap_or_else(|p| p.into_inner()) = mounted;
    *pool.cachefile.lock().unwrap_or_else(|p| p.into_inner()) = imp.pool.cachefile.lock().unwrap_or_else(|p| p.into_inner()).clone();
    imp.pool = pool;
    true
}

/// Open the pool again from its devices in `dirs` after its vdev tree changed (zpool add,
/// remove), keeping its mounts and cache file.
fn reopen(imp: &mut Imported, h: &Arc<PoolHandle>, dirs: &[PathBuf]) -> Result<(), ZfsError> {
    // A scrub goes on over the reopened pool, from the state the reopen's sync wrote.
    oxzfs::dsl_scrub::stop(h);
    oxzfs::vdev_trim::stop(h);
    let spa = h.reopen(dirs);
    oxzfs::dsl_scrub::resume_after_import(h);
    oxzfs::vdev_trim::resume_after_import(h);
    let spa = spa?;
    let mounted = std::mem::take(&mut *imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()));
    let pool = Pool::from_spa(spa, imp.pool.altroot.clone(), dirs);
    *pool.mounted.lock().unwrap_or_else(|p| p.into_inner()) = mounted;
    *pool.cachefile.lock().unwrap_or_else(|p| p.into_inner()) = imp.pool.cachefile.lock().unwrap_or_else(|p| p.into_inner()).clone();
    imp.pool = pool;
    Ok(())
}

const SYNC_USAGE: &str = "usage:\n\tsync [pool] ...\n";

verb_opts!(
    /// `zpool sync` takes no options.
    SyncOpts {

});

/// `zpool sync [POOL]...`: every change made so far is written in a txg (all imported pools
/// when none is named), as OpenZFS's spa_sync through zpool_sync_one.
pub fn sync(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<SyncOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{SYNC_USAGE}"), 2),
    };
    let names: Vec<String> = if o.operands.is_empty() { st.pools.keys().cloned().collect() } else { o.operands.clone() };
    for name in names {
        let Some(imp) = st.pools.get(&name) else {
            return (String::new(), format!("cannot open '{name}': no such pool\n"), 1);
        };
        if let Some(h) = &imp.rw {
            if let Err(e) = h.sync_now() {
                return err_out(e, &format!("cannot sync '{name}'"));
            }
        }
    }
    (String::new(), String::new(), 0)
}

const REMOVE_USAGE: &str = "usage:\n\tremove [-npsw] <pool> <device> ...\n\tremove -s <pool>\n";

verb_opts!(
    /// `zpool remove`'s options.
    RemoveOpts {
    #[arg(short = 'n')]
    dry_run: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 's')]
    stop: bool,
    #[arg(short = 'w')]
    wait: bool,
});

/// `zpool remove [-npw] POOL DEVICE...`, `zpool remove -s POOL`: log, cache and spare devices
/// at once; a data, special or dedup vdev by an evacuation that runs in the background (-w
/// waits for it; -s cancels it).
pub fn remove(st: &mut State, args: &[String]) -> Out {
    let o = match parse::<RemoveOpts>(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{REMOVE_USAGE}"), 2),
    };
    let Some(name) = o.operands.first().cloned() else {
        return (String::new(), format!("missing pool name argument\n{REMOVE_USAGE}"), 2);
    };
    if o.stop {
        // zpool_vdev_remove_cancel (spa_vdev_remove_cancel).
        let Some(imp) = st.pools.get_mut(&name) else {
            return (String::new(), format!("cannot open '{name}': no such pool\n"), 1);
        };
        let Some(h) = imp.rw.clone() else {
            return (String::new(), "cannot cancel removal: pool is read-only\n".to_string(), 1);
        };
        return match oxzfs::vdev_removal_thread::cancel(&h) {
            Ok(()) => (String::new(), String::new(), 0),
            Err(e) => (String::new(), format!("cannot cancel removal: {}\n", posix_text(&e)), 1),
        };
    }
    if o.operands.len() < 2 {
        return (String::new(), format!("missing device\n{REMOVE_USAGE}"), 2);
    }
    let Some(imp) = st.pools.get_mut(&name) else {
        return (String::new(), format!("cannot open '{name}': no such pool\n"), 1);
    };
    let Some(h) = imp.rw.clone() else {
        return (String::new(), format!("cannot remove devices from '{name}': pool is read-only\n"), 1);
    };
    let mut wait_for = None;
    let mut out = String::new();
    for dev in &o.operands[1..] {
        // A top-level vdev by its name (mirror-1), a leaf by path, file name or guid.
        let root = imp.pool.spa.root_vdev.clone();
        let base = |p: &str| Path::new(p).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        // A hot spare not in use goes at once (spa_vdev_remove_aux).
        if let Some(guid) = imp.pool.spare_device_guid(dev) {
            if o.dry_run {
                continue;
            }
            if let Err(e) = h.lock().remove_spare_device(guid) {
                return (out, format!("cannot remove {dev}: {}\n", posix_text(&e)), 1);
            }
            continue;
        }
        // A cache device goes at once (spa_vdev_remove_aux).
        if let Some(guid) = imp.pool.cache_device_guid(dev) {
            if o.dry_run {
                continue;
            }
            if let Err(e) = h.lock().remove_cache_device(guid) {
                return err_out(e, &format!("cannot remove {dev}"));
            }
            continue;
        }
        let top = root.children.iter().find(|t| {
            t.display_name() == *dev || t.guid.to_string() == *dev || t.leaves().iter().any(|l| l.guid.to_string() == *dev || l.path.as_deref().is_some_and(|p| p == dev || base(p) == *dev))
        });
        let Some(top) = top else {
            return (String::new(), format!("cannot remove {dev}: no such device in pool\n"), 1);
        };
        if !top.is_log {
            // A data, special or dedup vdev: evacuated (spa_vdev_remove_top). The device named
            // must be the top-level vdev itself, not a side of a mirror.
            let names_top = top.display_name() == *dev || top.guid.to_string() == *dev || (top.is_leaf() && top.find(dev).is_some());
            // -n only estimates, as zpool_do_remove does (the checks are the kernel's).
            if o.dry_run {
                let size = h.lock().removal_mapping_estimate(top.id);
                out.push_str(&format!("Memory that will be used after removing {dev}: {}\n", oxzfs::nicenum::nicebytes(size)));
                continue;
            }
            let checked = if names_top { h.lock().check_remove_top(top.id) } else { Err(ZfsError::Posix(libc::ENOTSUP, "operation not supported on this type of pool".into())) };
            if let Err(e) = checked {
                return (out, format!("cannot remove {dev}: {}\n", posix_text(&e)), 1);
            }
            // The evacuation goes on in the background (spa_vdev_remove_thread); -w waits
            // for it once the daemon's lock is let go.
            let run = match oxzfs::vdev_removal_thread::start(&h, top.id) {
                Ok(run) => run,
                Err(e) => return (out, format!("cannot remove {dev}: {}\n", posix_text(&e)), 1),
            };
            wait_for = o.wait.then(|| (h.clone(), Some(run)));
            continue;
        }
        if o.dry_run {
            continue;
        }
        let id = top.id;
        if let Err(e) = h.lock().remove_log_vdev(id) {
            let m = e.to_string();
            return (String::new(), format!("{}\n", if m.starts_with("cannot") { m } else { format!("cannot remove {dev}: {m}") }), 1);
        }
        let mut dirs: Vec<PathBuf> = imp.pool.spa.devices.values().filter_map(|(p, _)| p.parent().map(|d| d.to_path_buf())).collect();
        dirs.sort();
        dirs.dedup();
        if let Err(e) = reopen(imp, &h, &dirs) {
            return err_out(e, &format!("cannot remove {dev}: reopening the pool"));
        }
    }
    if let Some(h) = wait_for {
        st.removal_waits.push(h);
    }
    (out, String::new(), 0)
}

/// The text of an error after "cannot remove DEV: " (a Posix error's own message).
fn posix_text(e: &ZfsError) -> String {
    match e {
        ZfsError::Posix(_, m) => m.clone(),
        other => other.to_string(),
    }
}

/// `zpool set prop=value POOL`
pub fn set(st: &mut State, args: &[String]) -> Out {
    let usage = SET_USAGE;
    // zpool_do_set takes no options: a first argument starting with '-' is one.
    if let Some(opt) = args.first().and_then(|a| a.strip_prefix('-')) {
        return (String::new(), format!("invalid option '{}'\n{usage}", opt.chars().next().map(String::from).unwrap_or_default()), 2);
    }
    if args.len() != 2 {
        let what = match args.len() {
            0 => "missing property=value argument",
            1 => "missing pool name",
            _ => "too many pool names",
        };
        return (String::new(), format!("{what}\n{usage}"), 2);
    }
    let Some((k, v)) = args[0].split_once('=') else {
        return (String::new(), format!("missing value in property=value argument\n{usage}"), 2);
    };
    let name = &args[1];
    let Some(imp) = st.pools.get(name) else {
        return (String::new(), format!("cannot open '{name}': no such pool\n"), 1);
    };
    if k == "cachefile" {
        // Not a property of the pool on disk: where the daemon writes its config.
        if let Err(e) = oxzfs::spa_config::validate(v) {
            return (String::new(), format!("cannot set property for '{name}': {e}\n"), 1);
        }
        *imp.pool.cachefile.lock().unwrap_or_else(|p| p.into_inner()) = oxzfs::spa_config::setting(v);
        return (String::new(), String::new(), 0);
    }
    let Some(h) = imp.rw.clone() else {
        return (String::new(), format!("cannot set property for '{name}': pool is read-only\n"), 1);
    };
    let r = {
        let mut w = h.lock();
        w.set_pool_prop(k, v).and_then(|_| w.sync())
    };
    match r {
        Ok(()) => {
            if k == "autotrim" {
                // The pool's trim thread runs the autotrim passes (and stops when nothing is left).
                oxzfs::vdev_trim::set_autotrim(&h, v == "on");
            }
            (String::new(), String::new(), 0)
        }
        Err(e) => err_out(e, &format!("cannot set property for '{name}'")),
    }
}

/// The value of `-o ashift=V` for create and add, as make_leaf_vdev reads it: a number in
/// zfs_nicestrtonum's form (digits, an optional K/M/G/T/P/E suffix), 0 for the device's own
/// sector size, else 9 to 16; the error is OpenZFS's message.
pub fn ashift_option(v: &str) -> Result<u8, String> {
    let digits = v.bytes().take_while(u8::is_ascii_digit).count();
    let suffix = v[digits..].to_ascii_uppercase();
    let shift = match suffix.split_at(suffix.len().min(1)) {
        ("", _) | ("B", "") => Some(0),
        (u, "" | "B" | "IB") => "KMGTPE".find(u).map(|i| 10 * (i as u32 + 1)),
        _ => None,
    };
    let n = match (digits, shift) {
        (1.., Some(sh)) => v[..digits].parse::<u64>().ok().and_then(|n| n.checked_mul(1u64.checked_shl(sh)?)),
        _ => None,
    };
    match n {
        None => Err("ashift must be a number.\n".to_string()),
        Some(0) => Ok(0),
        Some(a @ 9..=16) => Ok(a as u8),
        Some(a) => Err(format!("invalid 'ashift={a}' property: only values between 9 and 16 are allowed.\n")),
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn import_listing_or_not() {
        assert!(import_is_listing(&v(&["-d", "/x"])));
        assert!(import_is_listing(&v(&[])));
        assert!(!import_is_listing(&v(&["-d", "/x", "tank"])));
        assert!(!import_is_listing(&v(&["-a", "-d", "/x"])));
        assert!(!import_is_listing(&v(&["-d", "/x", "-o", "readonly=on", "-R", "/alt", "tank"])));
    }
}
#[cfg(test)]
mod ashift_tests {
    use super::ashift_option;

    #[test]
    fn ashift_values_and_messages_as_make_leaf_vdev() {
        assert_eq!(ashift_option("12"), Ok(12));
        assert_eq!(ashift_option("0"), Ok(0));
        assert_eq!(ashift_option("abc").unwrap_err(), "ashift must be a number.\n");
        assert_eq!(ashift_option("12x").unwrap_err(), "ashift must be a number.\n");
        assert_eq!(ashift_option("17").unwrap_err(), "invalid 'ashift=17' property: only values between 9 and 16 are allowed.\n");
        assert_eq!(ashift_option("1k").unwrap_err(), "invalid 'ashift=1024' property: only values between 9 and 16 are allowed.\n");
    }
}


const OFFLINE_USAGE: &str = "usage:\n\toffline [-f] [-t] <pool> <device> ...\n";
const ONLINE_USAGE: &str = "usage:\n\tonline [-e] <pool> <device> ...\n";

/// A vdev verb's pool, its write handle, and (operand, guid) of each leaf named.
type LeafOperands<'a> = (&'a Imported, Arc<PoolHandle>, Vec<(String, u64)>);

/// The pool a vdev verb names, imported read-write, and the guid of each leaf named after it
/// (zpool_find_vdev: a path, a file name or a guid). Errors as libzfs words them, `what`
/// ("cannot offline") in front.
fn leaf_operands<'a>(st: &'a State, operands: &[String], cwd: &Path, usage_text: &str, what: &str) -> Result<LeafOperands<'a>, Out> {
    let Some(name) = operands.first() else {
        return Err(usage(format!("missing pool name\n{usage_text}")));
    };
    if operands.len() < 2 {
        return Err(usage(format!("missing device name\n{usage_text}")));
    }
    let Some(imp) = st.pools.get(name) else {
        return Err(fail(format!("cannot open '{name}': no such pool")));
    };
    let Some(h) = imp.rw.clone() else {
        return Err(fail(format!("{what} {}: pool is read-only", operands[1])));
    };
    let mut out = Vec::new();
    for dev in &operands[1..] {
        match find_leaf(imp, dev, cwd) {
            Some(guid) => out.push((dev.clone(), guid)),
            None => return Err(fail(format!("{what} {dev}: no such device in pool"))),
        }
    }
    Ok((imp, h, out))
}

/// The guid of the pool's leaf `dev` names (zpool_find_vdev: a path, relative ones from the
/// caller's directory, a file name or a guid).
fn find_leaf(imp: &Imported, dev: &str, cwd: &Path) -> Option<u64> {
    let root = &imp.pool.spa.root_vdev;
    if let Some(v) = root.find(dev).filter(|v| v.is_leaf()) {
        return Some(v.guid);
    }
    let p = abs(cwd, dev);
    let full = std::fs::canonicalize(&p).unwrap_or(p);
    root.find(&full.display().to_string()).filter(|v| v.is_leaf()).map(|v| v.guid)
}

verb_opts!(
    /// `zpool offline`'s options.
    OfflineOpts {
    #[arg(short = 'f')]
    fault: bool,
    #[arg(short = 't')]
    temporary: bool,
});

/// `zpool offline [-f] [-t] POOL DEVICE...` (zpool_do_offline): each leaf out of use, its DTL
/// recording what it misses; -t leaves the config alone, so that it is back after an import.
/// -f faults it instead (FAULTED, "external device fault"; DEGRADED when it holds the only
/// copy of some data), for good unless -t, until `zpool clear` or `online`.
pub fn offline(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match parse::<OfflineOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{OFFLINE_USAGE}")),
    };
    let (_, h, leaves) = match leaf_operands(st, &o.operands, cwd, OFFLINE_USAGE, "cannot offline") {
        Ok(x) => x,
        Err(e) => return e,
    };
    for (dev, guid) in leaves {
        let r = if o.fault { h.lock().vdev_fault(guid, o.temporary, &dev) } else { h.lock().vdev_offline(guid, o.temporary, &dev) };
        if let Err(e) = r {
            return fail(e.to_string());
        }
    }
    ok(String::new())
}

verb_opts!(
    /// `zpool online`'s options.
    OnlineOpts {
    #[arg(short = 'e')]
    expand: bool,
});

/// `zpool online POOL DEVICE...` (zpool_do_online): each leaf back in use, and a resilver of
/// the txgs it missed when its DTL names any.
pub fn online(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match parse::<OnlineOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{ONLINE_USAGE}")),
    };
    let (name, h, leaves) = match leaf_operands(st, &o.operands, cwd, ONLINE_USAGE, "cannot online") {
        Ok((_, h, leaves)) => (o.operands[0].clone(), h, leaves),
        Err(e) => return e,
    };
    let Some(imp) = st.pools.get_mut(&name) else {
        return fail(format!("cannot open '{name}': no such pool"));
    };
    let mut out = String::new();
    let mut resilver = false;
    for (dev, guid) in leaves {
        let gone = |imp: &Imported| imp.pool.spa.root_vdev.leaves().iter().any(|l| l.guid == guid && (l.dev.is_none() || l.state() == VdevState::Removed));
        let removed = imp.pool.spa.root_vdev.leaves().into_iter().find(|l| l.guid == guid && l.state() == VdevState::Removed).map(|l| oxzfs::vdev_probe::returned(&imp.pool.spa, l));
        let missing_at = imp.pool.spa.root_vdev.leaves().into_iter().find(|l| l.guid == guid && l.dev.is_none()).and_then(|l| l.path.clone());
        let reopen_at = match removed {
            // vdev_open keeps a removed leaf whose device is still absent REMOVED.
            Some(None) => None,
            Some(Some(path)) => Some(path),
            None => missing_at.map(PathBuf::from),
        };
        if let Some(path) = reopen_at {
            // vdev_reopen: a device that was missing may be back (the reopen resilvers it).
            let dirs = device_dirs(imp, &[path.as_path()]);
            oxzfs::vdev_probe::undo_same(&h.lock());
            if let Err(e) = reopen(imp, &h, &dirs) {
                return err_out(e, &format!("cannot online {dev}: reopening the pool"));
            }
        }
        if gone(imp) {
            let _ = write!(out, "warning: device '{dev}' onlined, but remains in faulted state\nuse 'zpool replace' to replace devices that are no longer present\n");
            continue;
        }
        match h.lock().vdev_online(guid, &dev) {
            Ok(stale) => resilver |= stale,
            Err(e) => return fail(e.to_string()),
        }
    }
    if resilver {
        if let Err(e) = oxzfs::dsl_scrub::resilver(&h) {
            return err_out(e, &format!("cannot resilver '{name}'"));
        }
    }
    ok(out)
}

const ATTACH_USAGE: &str = "usage:\n\tattach [-fsw] [-o property=value] <pool> <device> <new-device>\n";
const REPLACE_USAGE: &str = "usage:\n\treplace [-fsw] [-o property=value] <pool> <device> [new-device]\n";
const DETACH_USAGE: &str = "usage:\n\tdetach <pool> <device>\n";

/// The directories of the pool's devices and of `extra` (where a reopen looks).
fn device_dirs(imp: &Imported, extra: &[&Path]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = imp.pool.spa.devices.values().filter_map(|(p, _)| p.parent().map(|d| d.to_path_buf())).collect();
    dirs.extend(extra.iter().filter_map(|p| p.parent().map(|d| d.to_path_buf())));
    dirs.sort();
    dirs.dedup();
    dirs
}

verb_opts!(
    /// `zpool attach` and `zpool replace`'s options.
    AttachOpts {
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'f')]
    force: bool,
    #[arg(short = 's')]
    sequential: bool,
    #[arg(short = 'w')]
    wait: bool,
});

/// `zpool attach [-fw] POOL DEVICE NEW` / `zpool replace [-fw] POOL OLD [NEW]`
/// (zpool_do_attach_or_replace): NEW joins DEVICE's mirror (a disk becomes a mirror) or takes
/// OLD's place, and a resilver writes every block to it; -w waits for the resilver.
pub fn attach_or_replace(st: &mut State, args: &[String], cwd: &Path, replacing: bool) -> Out {
    let usage_text = if replacing { REPLACE_USAGE } else { ATTACH_USAGE };
    let o = match parse::<AttachOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{usage_text}")),
    };
    let (name, old) = match (o.operands.first(), o.operands.get(1)) {
        (None, _) => return usage(format!("missing pool name argument\n{usage_text}")),
        (Some(_), None) => return usage(format!("missing <device> specification\n{usage_text}")),
        (Some(n), Some(d)) => (n.clone(), d.clone()),
    };
    let new = match o.operands.get(2) {
        Some(n) => n.clone(),
        None if replacing => old.clone(),
        None => return usage(format!("missing <new_device> specification\n{usage_text}")),
    };
    if o.operands.len() > 3 {
        return usage(format!("too many arguments\n{usage_text}"));
    }
    let Some(imp) = st.pools.get_mut(&name) else {
        return fail(format!("cannot open '{name}': no such pool"));
    };
    let what = if replacing { format!("cannot replace {old} with {new}") } else { format!("cannot attach {new} to {old}") };
    let Some(h) = imp.rw.clone() else {
        return fail(format!("{what}: pool is read-only"));
    };
    let Some(old_guid) = find_leaf(imp, &old, cwd) else {
        return fail(format!("{what}: no such device in pool"));
    };
    let Some(leaf) = imp.pool.spa.root_vdev.leaves().into_iter().find(|l| l.guid == old_guid) else {
        return fail(format!("{what}: no such device in pool"));
    };
    // `zpool replace POOL OLD`: a new device at OLD's path.
    let new_path = match (o.operands.get(2), &leaf.path) {
        (None, Some(p)) => PathBuf::from(p),
        _ => abs(cwd, &new),
    };
    if !new_path.exists() {
        return fail(format!("cannot open '{}': No such file or directory", new_path.display()));
    }
    // make_root_vdev's check_in_use: a device some pool claims is refused before anything is
    // written (the pool's own devices among them).
    if let Ok(p) = spa::probe(&new_path) {
        let pname = p.config.get_str("name").unwrap_or("").to_string();
        // A device of this very pool is in use whatever its labels' state says.
        let ours = p.pool_guid == imp.pool.spa.guid;
        if ours || p.state == 0 || (p.state == 1 && !o.force) {
            return fail(in_use(&new_path, ours || p.state == 0, &pname, o.force));
        }
    }
    let spare = if replacing { h.lock().spare_guid(&new_path) } else { None };
    let r = h.lock().vdev_attach(old_guid, &new_path, replacing, spare, &old, &new, o.sequential);
    if let Err(e) = r {
        return err_out(e, &what);
    }
    let dirs = device_dirs(imp, &[&new_path]);
    if let Err(e) = reopen(imp, &h, &dirs) {
        return err_out(e, &format!("{what}: reopening the pool"));
    }
    if o.sequential {
        // The record is on disk with the new leaf: the rebuild thread takes it from there.
        oxzfs::vdev_rebuild_thread::resume_after_import(&h);
        if o.wait {
            st.rebuild_waits.push(h.clone());
        }
        return ok(String::new());
    }
    if let Err(e) = oxzfs::dsl_scrub::resilver(&h) {
        return err_out(e, &format!("cannot resilver '{name}'"));
    }
    if o.wait {
        st.resilver_waits.push(imp.pool.spa.clone());
    }
    ok(String::new())
}

verb_opts!(
    /// `zpool detach` takes no options.
    DetachOpts {

});

/// `zpool detach POOL DEVICE` (zpool_do_detach): DEVICE leaves its mirror or replacing vdev.
pub fn detach(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match parse::<DetachOpts>(args) {
        Ok(o) => o,
        Err(e) => return usage(format!("{e}\n{DETACH_USAGE}")),
    };
    let (name, dev) = match (o.operands.first(), o.operands.get(1)) {
        (None, _) => return usage(format!("missing pool name\n{DETACH_USAGE}")),
        (Some(_), None) => return usage(format!("missing <device> specification\n{DETACH_USAGE}")),
        (Some(n), Some(d)) => (n.clone(), d.clone()),
    };
    if o.operands.len() > 2 {
        return usage(format!("too many arguments\n{DETACH_USAGE}"));
    }
    let Some(imp) = st.pools.get_mut(&name) else {
        return fail(format!("cannot open '{name}': no such pool"));
    };
    let Some(h) = imp.rw.clone() else {
        return fail(format!("cannot detach {dev}: pool is read-only"));
    };
    let Some(guid) = find_leaf(imp, &dev, cwd) else {
        return fail(format!("cannot detach {dev}: no such device in pool"));
    };
    oxzfs::dsl_scrub::stop(&h);
    let r = h.lock().vdev_detach(guid, &dev);
    if let Err(e) = r {
        oxzfs::dsl_scrub::resume_after_import(&h);
        return err_out(e, &format!("cannot detach {dev}"));
    }
    let dirs = device_dirs(imp, &[]);
    match reopen(imp, &h, &dirs) {
        Ok(()) => ok(String::new()),
        Err(e) => err_out(e, &format!("cannot detach {dev}: reopening the pool")),
    }
}

/// make_root_vdev's refusal of a device a pool claims (check_file through vdev_error): an
/// active pool's device is refused even with -f, which only changes the heading.
fn in_use(dev: &Path, active: bool, pool: &str, force: bool) -> String {
    let heading = if force { "the following errors must be manually repaired:" } else { "use '-f' to override the following errors:" };
    let how = if active { "active" } else { "exported" };
    format!("invalid vdev specification\n{heading}\n{} is part of {how} pool '{pool}'", dev.display())
}

/// spa_vdev_resilver_done for every pool: a `replacing` vdev whose resilver has ended loses
/// its old child, and the pool is reopened over the tree without it. Runs before each command,
/// so that what a command sees is the tree as OpenZFS has it once a replace is done.
pub fn finish_replacements(st: &mut State) {
    for imp in st.pools.values_mut() {
        let Some(h) = imp.rw.clone() else { continue };
        // (A pool whose sync waits for its I/O to resume is left as it is.)
        if h.is_suspended() {
            continue;
        }
        // A healing resilver under way decides when it ends; a scrub (the one that follows a
        // sequential resilver among them) does not hold the replaced device.
        let scan = imp.pool.spa.scan.stat();
        if scan.scanning() && scan.phys.func == oxzfs_format::dsl::POOL_SCAN_RESILVER {
            continue;
        }
        // (The pool's I/O may be suspended after the look above: a lone device gone while a
        // sync writes. The sync then holds the pool until a `zpool clear`, which must not wait
        // behind this.)
        let Ok(done) = h.lock_unless_suspended().map(|g| g.replacement_done()) else { continue };
        if done.is_empty() {
            continue;
        }
        for guid in done {
            let r = h.lock_unless_suspended().and_then(|mut g| g.vdev_detach(guid, &guid.to_string()));
            if let Err(e) = r {
                tracing::warn!("pool '{}': detaching replaced device {guid}: {e}", imp.pool.spa.name);
                return;
            }
        }
        let dirs = device_dirs(imp, &[]);
        if let Err(e) = reopen(imp, &h, &dirs) {
            tracing::warn!("pool '{}': reopening after a replace: {e}", imp.pool.spa.name);
        }
    }
}
