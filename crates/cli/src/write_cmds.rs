//! The verbs that change pools: `zpool create` and read-write `zpool import`, in OpenZFS's
//! grammar and words.

use crate::commands::{getopt, mount_all, Imported, Out, State};
use crate::vdevspec::{self, Group};
use oxzfs::pool::Pool;
use oxzfs::spa;
use oxzfs::txg::{CreateSpec, PoolHandle, PoolW, VdevClass, VdevSpec};
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

/// OpenZFS's pool name rules (zfs_namecheck's pool_namecheck).
pub(crate) fn check_pool_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("cannot create '{name}': invalid character{why}"));
    // Room for "/$ORIGIN@$ORIGIN" within ZFS_MAX_DATASET_NAME_LEN (256), checked first.
    if name.len() >= 256 - 2 - 2 * "$ORIGIN".len() {
        return Err(format!("cannot create '{name}': name is too long"));
    }
    if name.is_empty() {
        return Err("cannot create '': name must begin with a letter".into());
    }
    if !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return Err(format!("cannot create '{name}': name must begin with a letter"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "_-:. ".contains(*c))) {
        return bad(&format!(" '{c}' in pool name"));
    }
    for r in ["mirror", "raidz", "draid", "spare", "log", "cache", "special", "dedup"] {
        if name.starts_with(r) && (r != "log" || name == "log") {
            return Err(format!("cannot create '{name}': name is reserved\npool name may have been omitted"));
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
    if let Err(e) = check_pool_name(&name) {
        return (String::new(), format!("{e}\n"), 1);
    }
    let force = o.has('f');
    let spec = match vdevspec::parse(&o.operands[1..], cwd, force) {
        Ok(s) => s,
        Err(e) => return (String::new(), format!("{e}\n"), 1),
    };
    let mut cs = CreateSpec { name: name.clone(), hostname: hostname(), ..Default::default() };
    if o.has('d') {
        // -d: no features enabled (they may be enabled one by one with -o feature@...=enabled).
        cs.disabled = oxzfs::txg::DEFAULT_FEATURES.iter().map(|f| f.1.to_string()).collect();
    }
    let mut cachefile = None;
    for p in o.values('o') {
        let Some((k, v)) = p.split_once('=') else {
            return (String::new(), format!("missing '=' for property=value argument\n{CREATE_USAGE}\n"), 2);
        };
        match k {
            "ashift" => match v.parse::<u8>() {
                Ok(a) if a == 0 || (9..=16).contains(&a) => {
                    cs.ashift = if a == 0 { None } else { Some(a) };
                    cs.pool_props.push((k.to_string(), a.to_string()));
                }
                _ => return (String::new(), format!("property 'ashift' number {v} is invalid, only values between 9 and 16 are allowed.\n"), 1),
            },
            "version" => match v.parse::<u64>() {
                Ok(n) if n == 5000 || (1..=28).contains(&n) => cs.version = Some(n),
                _ => return (String::new(), format!("cannot create '{name}': invalid property value '{v}' for 'version'\n"), 1),
            },
            _ if k.starts_with("feature@") => {
                let f = &k["feature@".len()..];
                if oxzfs::txg::supported_feature(f).is_none() {
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
    let cand = oxzfs::pool::choose_as(&mut scan, which, new_name)?;
    let mut pw = PoolW::open(cand, arc_max(), &hostname())?;
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

fn err_out(e: ZfsError, ctx: &str) -> Out {
    let m = e.to_string();
    (String::new(), format!("{}\n", if m.starts_with("cannot") { m } else { format!("{ctx}: {m}") }), 1)
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
    let mut props = Vec::new();
    for p in o.values('o') {
        match p.split_once('=') {
            Some((k, v)) => props.push((k.to_string(), v.to_string())),
            None => return (String::new(), format!("missing '=' for property=value argument\n{ZFS_CREATE_USAGE}\n"), 2),
        }
    }
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
    if name.contains('@') {
        return (String::new(), format!("cannot destroy '{name}': snapshots are not supported yet by the writer\n"), 1);
    }
    let imp = match pool_of(st, &name) {
        Ok(i) => i,
        Err(o) => return o,
    };
    let h = match rw_of(imp, &name, "destroy") {
        Ok(h) => h,
        Err(o) => return o,
    };
    let all: Vec<String> = match imp.pool.datasets() {
        Ok(l) => l.into_iter().map(|d| d.name).collect(),
        Err(e) => return err_out(e, &format!("cannot destroy '{name}'")),
    };
    if !all.contains(&name) {
        return (String::new(), format!("cannot open '{name}': dataset does not exist\n"), 1);
    }
    let mut children: Vec<String> = all.iter().filter(|n| n.starts_with(&format!("{name}/"))).cloned().collect();
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
    // The dataset (not the pool's root) and with -r its descendants, deepest first.
    let mut victims: Vec<String> = children;
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
            w.destroy_dataset(v).and_then(|_| w.sync())
        };
        imp.pool.forget_fs(v);
        if let Err(e) = r {
            return err_out(e, &format!("cannot destroy '{v}'"));
        }
    }
    (String::new(), String::new(), 0)
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
            Some(("ashift", v)) => match v.parse::<u8>() {
                Ok(a) if (9..=16).contains(&a) => ashift = Some(a),
                _ => return (String::new(), format!("property 'ashift' number {v} is invalid, only values between 9 and 16 are allowed.\n"), 1),
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
    if args.len() != 2 {
        return (String::new(), format!("{} argument\n{usage}", if args.is_empty() { "missing property=value" } else if args.len() == 1 { "missing pool name" } else { "too many" }), 2);
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
