//! The verbs that change pools: `zpool create` and read-write `zpool import`, in OpenZFS's
//! grammar and words.

use crate::commands::{getopt, mount_all, Imported, Out, State};
use crate::vdevspec::{self, Group};
use oxzfs::pool::Pool;
use oxzfs::spa;
use oxzfs::dsl_pool::PoolW;
use oxzfs::spa_create::{CreateSpec, VdevClass, VdevSpec};
use oxzfs::txg::PoolHandle;
use oxzfs::ZfsError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const CREATE_USAGE: &str = "usage:\n\tcreate [-fnd] [-o property=value] ... \n\t    [-O file-system-property=value] ... \n\t    [-m mountpoint] [-R root] <pool> <vdev> ...";

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn arc_max() -> u64 {
    std::env::var("OXZFS_ARC_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or_else(oxzfs::arc::AdaptiveCache::default_max)
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

fn layout_text(name: &str, spec: &vdevspec::Spec) -> String {
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

pub fn zpool_create(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match getopt(args, "oOmR", "fnd") {
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
    let force = o.has('f');
    let spec = match vdevspec::parse(&o.operands[1..], cwd, force) {
        Ok(s) => s,
        Err(e) => return (String::new(), format!("{e}\n"), 1),
    };
    let mut cs = CreateSpec { name: name.clone(), hostname: hostname(), fs_init: Some(oxzfs::zplw::init_fs), ..Default::default() };
    if o.has('d') {
        // -d: no features enabled (they may be enabled one by one with -o feature@...=enabled).
        cs.disabled = oxzfs::spa_feature::DEFAULT_FEATURES.iter().map(|f| f.1.to_string()).collect();
    }
    let mut cachefile = None;
    for p in o.values('o') {
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
    for p in o.values('O') {
        let Some((k, v)) = p.split_once('=') else {
            return (String::new(), format!("missing '=' for property=value argument\n{CREATE_USAGE}\n"), 2);
        };
        cs.fs_props.push((k.to_string(), v.to_string()));
    }
    if let Some(m) = o.values('m').pop() {
        cs.fs_props.push(("mountpoint".into(), m));
    }
    // Every device must exist and not belong to a pool.
    for d in spec.all_devices() {
        if !d.exists() {
            return (String::new(), format!("cannot open '{}': No such file or directory\n", d.display()), 1);
        }
        if let Ok(p) = spa::probe(&d) {
            let pname = p.config.get_str("name").unwrap_or("").to_string();
            match p.state {
                0 => {
                    return (String::new(), format!("invalid vdev specification\n{} is part of active pool '{pname}'\n", d.display()), 1);
                }
                1 if !force => {
                    return (
                        String::new(),
                        format!("invalid vdev specification\nuse '-f' to override the following errors:\n{} is part of exported pool '{pname}'\n", d.display()),
                        1,
                    );
                }
                _ => {}
            }
        }
    }
    if st.pools.contains_key(&name) {
        return (String::new(), format!("cannot create '{name}': pool already exists\n"), 1);
    }
    if o.has('n') {
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
    let altroot = o.values('R').pop().map(|r| if Path::new(&r).is_absolute() { PathBuf::from(r) } else { cwd.join(r) });
    if altroot.is_some() && !o.values('o').iter().any(|p| p.starts_with("cachefile=")) {
        // zpool create -R implies cachefile=none (add_prop_list_default).
        cachefile = Some("none".to_string());
    }
    let mut dirs: Vec<PathBuf> = spec.all_devices().iter().filter_map(|d| d.parent().map(|p| p.to_path_buf())).collect();
    dirs.sort();
    dirs.dedup();
    let h = PoolHandle::start(pw);
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
    st.pools.insert(name, Imported { pool, mounts, rw: Some(h), since: std::time::Instant::now() });
    (String::new(), err, code)
}

/// Import a pool read-write: the write state and the read view over the same Spa.
/// `new_name`: import under that name (written into the labels and MOS config at once).
pub fn import_rw(dirs: &[PathBuf], which: &str, new_name: Option<&str>, altroot: Option<PathBuf>, _force: bool) -> Result<(Arc<Pool>, Arc<PoolHandle>), ZfsError> {
    let mut scan = spa::scan(dirs);
    let cand = oxzfs::spa::choose_as(&mut scan, which, new_name)?;
    let mut pw = PoolW::open(cand, arc_max(), &hostname())?;
    pw.fs_init = oxzfs::zplw::init_fs;
    if new_name.is_some() {
        pw.config_dirty = true;
        pw.sync()?;
    }
    let spa = pw.spa.clone();
    let h = PoolHandle::start(pw);
    Ok((Pool::from_spa(spa, altroot, dirs), h))
}

fn pool_of<'a>(st: &'a mut State, ds: &str) -> Result<&'a mut Imported, Out> {
    let pool = ds.split('/').next().unwrap_or(ds).split('@').next().unwrap_or(ds);
    match st.pools.get_mut(pool) {
        Some(i) => Ok(i),
        None => Err((String::new(), format!("cannot open '{ds}': dataset does not exist\n"), 1)),
    }
}

fn rw_of(imp: &Imported, ds: &str, verb: &str) -> Result<Arc<PoolHandle>, Out> {
    imp.rw.clone().ok_or_else(|| (String::new(), format!("cannot {verb} '{ds}': pool is read-only\n"), 1))
}

/// The imported pool of dataset `ds` and its write handle (`verb` names the refusal of a
/// read-only pool).
fn imported_rw<'a>(st: &'a mut State, ds: &str, verb: &str) -> Result<(&'a mut Imported, Arc<PoolHandle>), Out> {
    let imp = pool_of(st, ds)?;
    let h = rw_of(imp, ds, verb)?;
    Ok((imp, h))
}

fn err_out(e: ZfsError, ctx: &str) -> Out {
    let m = e.to_string();
    (String::new(), format!("{}\n", if m.starts_with("cannot") { m } else { format!("{ctx}: {m}") }), 1)
}

/// The `-o prop=val` options of a zfs verb as (prop, val) pairs; a missing '=' is a usage
/// error followed by `usage`.
fn dash_o_props(o: &crate::commands::Opts, usage: &str) -> Result<Vec<(String, String)>, Out> {
    o.values('o')
        .into_iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err((String::new(), format!("missing '=' for property=value argument\n{usage}"), 2)),
        })
        .collect()
}

const ZFS_CREATE_USAGE: &str = "usage:\n\tcreate [-Pnpuv] [-o property=value] ... <filesystem>\n\tcreate [-Pnpsv] [-b blocksize] [-o property=value] ... -V <size> <volume>";

/// `zfs create [-p] [-o prop=val]... FS`
pub fn zfs_create(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "o", "pu") {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{ZFS_CREATE_USAGE}\n"), 2),
    };
    if o.operands.len() != 1 {
        return (String::new(), format!("{} filesystem argument\n{ZFS_CREATE_USAGE}\n", if o.operands.is_empty() { "missing" } else { "too many" }), 2);
    }
    let name = o.operands[0].clone();
    let props = match dash_o_props(&o, &format!("{ZFS_CREATE_USAGE}\n")) {
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
        w.create_dataset(&name, &props, o.has('p')).and_then(|_| w.sync())
    };
    if let Err(e) = r {
        return err_out(e, &format!("cannot create '{name}'"));
    }
    let mut err = String::new();
    let code = if !o.has('u') && mount_all(&imp.pool, Some(&h), &mut imp.mounts, &mut err) > 0 { 1 } else { 0 };
    (String::new(), err, code)
}

/// `zfs destroy [-r] [-f] FS`
pub fn zfs_destroy(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "rRfnpv") {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\nusage:\n\tdestroy [-fnpRrv] <filesystem|volume>\n"), 2),
    };
    if o.operands.len() != 1 {
        return (String::new(), "missing dataset argument\nusage:\n\tdestroy [-fnpRrv] <filesystem|volume>\n".into(), 2);
    }
    let name = o.operands[0].clone();
    let (imp, h) = match imported_rw(st, &name, "destroy") {
        Ok(x) => x,
        Err(o) => return o,
    };
    if name.contains('@') {
        let r = h.lock().destroy_snapshot(&name);
        imp.pool.forget_fs(&name);
        return match r {
            Ok(()) => (String::new(), String::new(), 0),
            Err(e) => (String::new(), format!("{e}\n"), 1),
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
    if is_root && !o.has('r') {
        return (
            String::new(),
            format!(
                "cannot destroy '{name}': operation does not apply to pools\nuse 'zfs destroy -r {name}' to destroy all datasets in the pool\nuse 'zpool destroy {name}' to destroy the pool itself\n"
            ),
            1,
        );
    }
    if !children.is_empty() && !o.has('r') && !o.has('R') {
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
    for v in &victims {
        // Unmount first.
        if let Some(i) = imp.mounts.iter().position(|m| &m.dataset == v) {
            let m = imp.mounts.remove(i);
            if let Err((m, e)) = m.unmount(o.has('f')) {
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
            return err_out(e, &format!("cannot destroy '{v}'"));
        }
    }
    (String::new(), String::new(), 0)
}

/// `getopt`, a bad option answered with the verb's usage (exit 2).
fn getopt_or_usage(args: &[String], with_value: &str, plain: &str, usage: &str) -> Result<crate::commands::Opts, Out> {
    getopt(args, with_value, plain).map_err(|e| (String::new(), format!("{e}\n{usage}"), 2))
}

/// `getopt_or_usage` for a verb of exactly `missing.len()` operands: too few answered with
/// `missing[n]`, too many with "too many arguments", each with the usage.
fn verb_args(args: &[String], with_value: &str, plain: &str, usage: &str, missing: &[&str]) -> Result<crate::commands::Opts, Out> {
    let o = getopt_or_usage(args, with_value, plain, usage)?;
    let n = o.operands.len();
    if n < missing.len() {
        return Err((String::new(), format!("{}\n{usage}", missing[n]), 2));
    }
    if n > missing.len() {
        return Err((String::new(), format!("too many arguments\n{usage}"), 2));
    }
    Ok(o)
}

const ZFS_ROLLBACK_USAGE: &str = "usage:\n\trollback [-rRf] <snapshot>\n";

/// `zfs rollback [-rRf] FS@SNAP`: with -r the newer snapshots are destroyed first; the file
/// system is unmounted around the change and mounted again.
pub fn zfs_rollback(st: &mut State, args: &[String]) -> Out {
    let o = match verb_args(args, "", "rRf", ZFS_ROLLBACK_USAGE, &["missing dataset argument"]) {
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
    if !newer.is_empty() && !o.has('r') && !o.has('R') {
        let list: String = newer.iter().rev().map(|n| format!("{n}\n")).collect();
        return (
            String::new(),
            format!("cannot rollback to '{name}': more recent snapshots or bookmarks exist\nuse '-r' to force deletion of the following snapshots and bookmarks:\n{list}"),
            1,
        );
    }
    for n in &newer {
        let r = h.lock().destroy_snapshot(n);
        if let Err(e) = r {
            return (String::new(), format!("{e}\n"), 1);
        }
    }
    if let Some(i) = imp.mounts.iter().position(|m| m.dataset == fs) {
        let m = imp.mounts.remove(i);
        if let Err((m, e)) = m.unmount(o.has('f')) {
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

const ZFS_CLONE_USAGE: &str = "usage:\n\tclone [-p] [-o property=value] ... <snapshot> <filesystem|volume>\n";

/// `zfs clone [-p] [-o prop=val]... FS@SNAP NEWFS`
pub fn zfs_clone(st: &mut State, args: &[String]) -> Out {
    let o = match verb_args(args, "o", "p", ZFS_CLONE_USAGE, &["missing source dataset argument", "missing target dataset argument"]) {
        Ok(o) => o,
        Err(out) => return out,
    };
    let (src, target) = (o.operands[0].clone(), o.operands[1].clone());
    let props = match dash_o_props(&o, ZFS_CLONE_USAGE) {
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
            Ok(Some(snap)) => w.create_dataset_from(&target, &props, o.has('p'), Some(snap)).and_then(|_| w.sync()),
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

const ZFS_SNAPSHOT_USAGE: &str = "usage:\n\tsnapshot [-r] [-o property=value] ... <filesystem|volume>@<snap> ...\n";

/// `zfs snapshot [-r] [-o prop=val]... FS@SNAP...`: every snapshot in one txg, or none.
pub fn zfs_snapshot(st: &mut State, args: &[String]) -> Out {
    let o = match getopt_or_usage(args, "o", "r", ZFS_SNAPSHOT_USAGE) {
        Ok(o) => o,
        Err(out) => return out,
    };
    if o.operands.is_empty() {
        return (String::new(), format!("missing snapshot argument\n{ZFS_SNAPSHOT_USAGE}"), 2);
    }
    let mut props = Vec::new();
    for p in o.values('o') {
        match p.split_once('=') {
            Some((k, _)) if !k.contains(':') => {
                return (String::new(), format!("cannot create snapshot '{}': property '{k}' cannot be set on snapshots\n", o.operands[0]), 1);
            }
            Some((k, v)) => props.push((k.to_string(), v.to_string())),
            None => return (String::new(), format!("missing '=' for property=value argument\n{ZFS_SNAPSHOT_USAGE}"), 2),
        }
    }
    let multiple = o.has('r') || o.operands.len() > 1;
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
        if o.has('r') {
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
pub fn zfs_set(st: &mut State, args: &[String]) -> Out {
    let usage = "usage:\n\tset <property=value> ... <filesystem|volume|snapshot> ...\n";
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
        let r = {
            let mut w = h.lock();
            let mut r = Ok(());
            for a in &assigns {
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
            let below = |d: &str| d == t.as_str() || d.starts_with(&format!("{t}/"));
            let (mut gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut imp.mounts).into_iter().partition(|m| below(&m.dataset));
            imp.mounts = keep;
            gone.sort_by_key(|m| std::cmp::Reverse(m.mountpoint.components().count()));
            let mut err = String::new();
            for m in gone {
                let ds = m.dataset.clone();
                match m.unmount(false) {
                    Ok(()) => {
                        imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
                    }
                    Err((m, e)) => {
                        err.push_str(&format!("cannot unmount '{}': {e}\n", m.mountpoint.display()));
                        imp.mounts.push(m);
                    }
                }
            }
            let n = mount_all(&imp.pool, Some(&h), &mut imp.mounts, &mut err);
            if n > 0 || !err.is_empty() {
                return (String::new(), err, 1);
            }
        }
    }
    (String::new(), String::new(), 0)
}

/// `zfs inherit [-r] prop FS...`
pub fn zfs_inherit(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "rS") {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\nusage:\n\tinherit [-rS] <property> <filesystem|volume|snapshot> ...\n"), 2),
    };
    if o.operands.len() < 2 {
        return (String::new(), "missing property or dataset argument\nusage:\n\tinherit [-rS] <property> <filesystem|volume|snapshot> ...\n".into(), 2);
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
        if o.has('r') {
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

/// `zpool destroy [-f] POOL`: unmount, mark the labels destroyed.
pub fn zpool_destroy(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "f") {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\nusage:\n\tdestroy [-f] <pool>\n"), 2),
    };
    if o.operands.len() != 1 {
        return (String::new(), "missing pool argument\nusage:\n\tdestroy [-f] <pool>\n".into(), 2);
    }
    let name = o.operands[0].clone();
    let Some(imp) = st.pools.get(&name) else {
        return (String::new(), format!("cannot open '{name}': no such pool\n"), 1);
    };
    let Some(h) = imp.rw.clone() else {
        return (String::new(), format!("cannot destroy '{name}': pool is read-only\n"), 1);
    };
    let mut args = vec![name.clone()];
    if o.has('f') {
        args.insert(0, "-f".into());
    }
    // Export (unmount, sync, labels) then mark destroyed.
    let r = crate::commands::zpool_export(st, &args);
    if r.2 != 0 {
        return (String::new(), r.1.replace("cannot export", "cannot destroy"), r.2);
    }
    match h.mark_destroyed() {
        Ok(()) => (String::new(), String::new(), 0),
        Err(e) => err_out(e, &format!("cannot destroy '{name}'")),
    }
}

const ADD_USAGE: &str = "usage:\n\tadd [-fgLnP] [-o property=value] <pool> <vdev> ...";

/// `zpool add [-f] [-n] [-o ashift=N] POOL VDEV...`
pub fn zpool_add(st: &mut State, args: &[String], cwd: &Path) -> Out {
    let o = match getopt(args, "o", "fgLnP") {
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
    for p in o.values('o') {
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
    let mut spec = match vdevspec::parse(&operands, cwd, o.has('f')) {
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
    // Replication level of new data vdevs against the pool's (needs -f to differ).
    if !o.has('f') {
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
    for d in spec.all_devices() {
        if !d.exists() {
            return (String::new(), format!("cannot open '{}': No such file or directory\n", d.display()), 1);
        }
        if let Ok(p) = spa::probe(&d) {
            let pname = p.config.get_str("name").unwrap_or("").to_string();
            if p.state == 0 || (p.state == 1 && !o.has('f')) {
                return (String::new(), format!("invalid vdev specification\n{} is part of {} pool '{pname}'\n", d.display(), if p.state == 0 { "active" } else { "exported" }), 1);
            }
        }
    }
    if o.has('n') {
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
    let r = h.lock().add_vdevs(&vdevs, &spec.cache, ashift);
    if let Err(e) = r {
        return err_out(e, &format!("cannot add to '{name}'"));
    }
    // Reopen over every device directory: the new vdevs join the allocator.
    let mut dirs: Vec<PathBuf> = imp.pool.spa.devices.values().filter_map(|(p, _)| p.parent().map(|d| d.to_path_buf())).collect();
    dirs.extend(spec.all_devices().iter().filter_map(|d| d.parent().map(|p| p.to_path_buf())));
    dirs.sort();
    dirs.dedup();
    match h.reopen(&dirs) {
        Ok(spa) => {
            let mounted = std::mem::take(&mut *imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()));
            let pool = Pool::from_spa(spa, imp.pool.altroot.clone(), &dirs);
            *pool.mounted.lock().unwrap_or_else(|p| p.into_inner()) = mounted;
            *pool.cachefile.lock().unwrap_or_else(|p| p.into_inner()) = imp.pool.cachefile.lock().unwrap_or_else(|p| p.into_inner()).clone();
            imp.pool = pool;
            (String::new(), String::new(), 0)
        }
        Err(e) => err_out(e, &format!("cannot add to '{name}': reopening the pool")),
    }
}

/// `zpool set prop=value POOL`
pub fn zpool_set(st: &mut State, args: &[String]) -> Out {
    let usage = "usage:\n\tset <property=value> <pool> \n";
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
        Ok(()) => (String::new(), String::new(), 0),
        Err(e) => err_out(e, &format!("cannot set property for '{name}'")),
    }
}

const ZFS_RENAME_USAGE: &str = "usage:\n\trename [-f] <filesystem|volume|snapshot> <filesystem|volume|snapshot>\n\trename -p [-f] <filesystem|volume> <filesystem|volume>\n\trename -u [-f] <filesystem> <filesystem>\n\trename -r <snapshot> <snapshot>\n";

/// `zfs rename [-p] [-f] FS NEWFS`: the file system and everything below it take the new
/// name; those mounted are unmounted first and mounted again where their mountpoints now are.
pub fn zfs_rename(st: &mut State, args: &[String]) -> Out {
    let o = match getopt(args, "", "pruf") {
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
    if o.has('r') && o.has('p') {
        return bad("-p and -r options are mutually exclusive");
    }
    if o.has('u') && o.has('p') {
        return bad("-u and -p options are mutually exclusive");
    }
    let (old, new) = (o.operands[0].clone(), o.operands[1].clone());
    if o.has('r') && !old.contains('@') {
        return bad("source dataset for recursive rename must be a snapshot");
    }
    if old.contains('@') || new.contains('@') {
        return (String::new(), format!("cannot rename '{old}': renaming snapshots is not supported yet by the writer\n"), 1);
    }
    if o.has('u') {
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
    let below = |d: &str| d == old.as_str() || d.starts_with(&format!("{old}/"));
    let (mut gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut imp.mounts).into_iter().partition(|m| below(&m.dataset));
    imp.mounts = keep;
    gone.sort_by_key(|m| std::cmp::Reverse(m.mountpoint.components().count()));
    let mut err = String::new();
    let mut busy = false;
    let derived = crate::commands::derived_mountpoints(&imp.pool, &gone.iter().collect::<Vec<_>>());
    for m in gone {
        let ds = m.dataset.clone();
        match m.unmount(o.has('f')) {
            Ok(()) => {
                imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
            }
            Err((m, e)) => {
                err.push_str(&format!("cannot unmount '{}': {e}\n", m.mountpoint.display()));
                imp.mounts.push(m);
                busy = true;
            }
        }
    }
    let r = if busy {
        Ok(())
    } else {
        crate::commands::remove_mountpoints(&derived, &imp.mounts);
        let mut w = h.lock();
        // Synced first: the quota check sees what the file systems hold on disk.
        w.sync().and_then(|_| w.rename_dataset(&old, &new, o.has('p'))).and_then(|_| w.sync())
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

/// The value of `-o ashift=V` for create and add, as make_leaf_vdev reads it: a number in
/// zfs_nicestrtonum's form (digits, an optional K/M/G/T/P/E suffix), 0 for the device's own
/// sector size, else 9 to 16; the error is OpenZFS's message.
fn ashift_option(v: &str) -> Result<u8, String> {
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
