//! Runs one `zpool …` / `zfs …` argument vector: picks the verb family and the verb, and keeps the
//! cache files of the imported pools up to date afterwards. Above `zpool` and `zfs`, which never
//! import it; the daemon (and the CLI when no daemon runs) call `execute`.

use crate::verb::{fail, ok, usage, Out, State};
use crate::{zfs, zpool};
use clap::ValueEnum;
use std::path::Path;

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
    if cmd == "tunable" {
        return tunable(st, &argv[1..]);
    }
    if cmd == "arcstats" {
        return kstat(st, &argv[1..], Some("arcstats"));
    }
    if cmd == "kstat" {
        return kstat(st, &argv[1..], None);
    }
    if cmd == "zinject" {
        return crate::zinject::zinject(st, &argv[1..]);
    }
    if cmd == "arc_summary" {
        let tunables: Vec<(String, String, String)> = oxzfs::tunables::all().iter().map(|t| (t.name.to_string(), t.get().to_string(), t.desc.to_string())).collect();
        let (arc, zf, zil) = (arcstat_rows(st), oxzfs_fuse::zfetch_rows(), oxzfs::zil::ZIL_STATS.rows());
        return crate::arc_summary::run(&argv[1..], &crate::arc_summary::Kstats { arcstats: &arc, zfetchstats: &zf, zil: &zil }, &tunables);
    }
    let Some(verb) = argv.get(1) else {
        return usage(format!("usage: {cmd} command args ..."));
    };
    let rest = &argv[2..];
    // `zpool -?` / `zpool --help`: the verb list, asked for (stdout, exit 0).
    if cmd != "zdb" && matches!(verb.as_str(), "-?" | "--help") {
        return ok(format!("{}\n", verb_list(cmd)));
    }
    // `zpool VERB --help` / `zpool VERB -?`: that verb's usage, as a usage error (exit 2).
    if matches!(rest.first().map(|s| s.as_str()), Some("--help" | "-?")) {
        let text = match cmd.as_str() {
            "zpool" => zpool::Verb::from_str(verb, false).ok().map(|v| v.usage()),
            "zfs" => zfs::Verb::from_str(verb, false).ok().map(|v| v.usage()),
            _ => None,
        };
        if let Some(text) = text {
            return usage(text);
        }
    }
    let before = cachefiles_in_use(st);
    let mut reopened = false;
    if cmd != "zdb" {
        // A removal finished in the background reopened its pool: the read side follows, and
        // the cache files take its new config.
        for imp in st.pools.values_mut() {
            reopened |= crate::zpool::refresh(imp);
        }
        crate::zpool::finish_replacements(st);
    }
    if let Some(out) = refused_while_suspended(st, cmd, verb, rest) {
        return out;
    }
    let out = dispatch(st, cmd, verb, rest, cwd);
    // Changes are recorded in the pool's history, as OpenZFS logs its command lines.
    if out.2 == 0 && matches!((cmd.as_str(), verb.as_str()), ("zpool", "create" | "add" | "remove" | "set" | "import" | "upgrade" | "scrub" | "trim" | "reguid" | "clear" | "offline" | "online" | "attach" | "detach" | "replace") | ("zfs", "create" | "destroy" | "set" | "inherit" | "rename" | "snapshot" | "snap" | "clone" | "promote" | "bookmark" | "hold" | "release" | "rollback")) {
        let target = if cmd == "zpool" && verb == "set" { rest.get(1) } else { rest.iter().rev().find(|a| !a.starts_with('-')) };
        if let Some(t) = target {
            let pool = if cmd == "zpool" && verb != "set" {
                rest.iter().filter(|a| !a.starts_with('-')).find(|a| st.pools.contains_key(a.as_str())).cloned()
            } else {
                // A short name ("@snap", "#bm") takes its pool from the other operand.
                rest.iter().rev().filter(|a| !a.starts_with(['-', '@', '#'])).chain([t]).next().map(|a| a.split(['/', '@', '#']).next().unwrap_or(a).to_string())
            };
            if let Some(h) = pool.and_then(|p| st.pools.get(&p)).and_then(|i| i.rw.clone()) {
                if h.lock().log_history(&argv.join(" ")).is_ok() {
                    let _ = h.sync_now();
                }
            }
        }
    }
    // Then the cache files, with the configs as synced (spa_config_sync after the change).
    if reopened || (cmd == "zpool" && matches!(verb.as_str(), "create" | "import" | "add" | "remove" | "set" | "export" | "destroy" | "attach" | "detach" | "replace" | "reguid")) {
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

/// What a pool whose I/O is suspended refuses, as OpenZFS's ioctls answer EAGAIN then
/// ("pool I/O is currently suspended"): every command that would change the pool or wait for
/// a sync, which would otherwise wait under the daemon's state and hold every other command
/// (`zpool clear` and `zpool status` among them) up. What only looks, `clear` and `export`
/// are let through.
fn refused_while_suspended(st: &State, cmd: &str, verb: &str, rest: &[String]) -> Option<Out> {
    let looks = match cmd {
        "zpool" => matches!(verb, "status" | "list" | "get" | "iostat" | "clear" | "export" | "history" | "events" | "help" | "version"),
        "zfs" => matches!(verb, "list" | "get" | "help" | "version" | "unmount" | "umount" | "mount" | "send"),
        _ => true,
    };
    if looks {
        return None;
    }
    let target = rest.iter().filter(|a| !a.starts_with('-')).find_map(|a| {
        let pool = a.split(['/', '@', '#']).next().unwrap_or(a);
        st.pools.get(pool).and_then(|i| i.rw.as_ref()).filter(|h| h.is_suspended()).map(|_| a.clone())
    })?;
    Some(fail(format!("cannot {verb} '{target}': pool I/O is currently suspended")))
}

fn dispatch(st: &mut State, cmd: &str, verb: &str, rest: &[String], cwd: &Path) -> Out {
    match cmd {
        "zpool" => match zpool::Verb::from_str(verb, false) {
            Ok(v) => v.run(st, rest, cwd),
            Err(_) => usage(format!("unrecognized command '{verb}'\n{}", verb_list(cmd))),
        },
        "zfs" => match zfs::Verb::from_str(verb, false) {
            Ok(v) => v.run(st, rest, cwd),
            Err(_) => usage(format!("unrecognized command '{verb}'\n{}", verb_list(cmd))),
        },
        c => usage(format!("unrecognized command '{c}'")),
    }
}

/// `usage: zpool command args ...` and the verbs, as OpenZFS lists them (names only).
fn verb_list(cmd: &str) -> String {
    fn names<V: ValueEnum>() -> Vec<String> {
        V::value_variants().iter().filter_map(|v| v.to_possible_value()).map(|p| p.get_name().to_string()).collect()
    }
    let names = if cmd == "zpool" { names::<zpool::Verb>() } else { names::<zfs::Verb>() };
    let mut s = format!("usage: {cmd} command args ...\nwhere 'command' is one of the following:\n\n");
    for v in names {
        s.push_str(&format!("\t{v}\n"));
    }
    s.trim_end().to_string()
}

/// zfs_arc_max / zfs_arc_min changed: the ARC the pools share takes the new limits at once
/// (a smaller limit evicts now).
fn resize_arcs(_st: &State) {
    let (max, min) = arc_limits();
    oxzfs::arc::shared(max).set_limits(max, min);
}

/// (c_max, c_min) as the tunables set them.
fn arc_limits() -> (u64, u64) {
    use oxzfs::tunables;
    let max = tunables::arc_max().unwrap_or_else(oxzfs::arc::AdaptiveCache::default_max);
    (max, tunables::arc_min().unwrap_or_else(|| oxzfs::arc::AdaptiveCache::default_min(max)))
}

crate::opts::verb_opts!(
    /// `oxzfs kstat`'s and `oxzfs arcstats`'s options: -j prints JSON.
    KstatOpts {
    #[arg(short = 'j')]
    json: bool,
});

/// The kstats `oxzfs kstat` prints, by their names under /proc/spl/kstat/zfs.
const KSTATS: [&str; 3] = ["arcstats", "zfetchstats", "zil"];

/// `oxzfs kstat [-j] NAME` (NAME: arcstats, zfetchstats, zil) and `oxzfs arcstats [-j]`: the
/// daemon's counters as OpenZFS's /proc/spl/kstat/zfs/NAME shows them (`name type data`, type
/// 4 for a counter): the shared ARC's and the L2ARC's since the daemon started, the
/// prefetcher's, the intent log's; `-j` as a JSON object of name: value.
fn kstat(st: &State, args: &[String], fixed: Option<&str>) -> Out {
    let usage_text = match fixed {
        Some(_) => "usage: oxzfs arcstats [-j]".to_string(),
        None => format!("usage: oxzfs kstat [-j] <{}>", KSTATS.join("|")),
    };
    let (json, name) = match crate::opts::parse::<KstatOpts>(args) {
        Ok(o) => match (fixed, o.operands.as_slice()) {
            (Some(n), []) => (o.json, n.to_string()),
            (None, [n]) if KSTATS.contains(&n.as_str()) => (o.json, n.clone()),
            (None, [n]) => return usage(format!("unknown kstat '{n}'\n{usage_text}")),
            (None, []) => return usage(format!("missing kstat name\n{usage_text}")),
            _ => return usage(format!("too many arguments\n{usage_text}")),
        },
        Err(e) => return usage(format!("{e}\n{usage_text}")),
    };
    let rows = match name.as_str() {
        "zfetchstats" => oxzfs_fuse::zfetch_rows(),
        "zil" => oxzfs::zil::ZIL_STATS.rows(),
        _ => arcstat_rows(st),
    };
    if json {
        let m: serde_json::Map<String, serde_json::Value> = rows.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
        return ok(format!("{}\n", serde_json::Value::Object(m)));
    }
    // The kstat header line (kid, type 1 = named, flags, rows, size, crtime, snaptime), then
    // the rows, as the kernel's kstat file prints them.
    // (SPL's kstat_seq_show: "%-31s %-4s %s" and "%-31s %-4d %llu".)
    let mut out = format!("13 1 0x01 {} {} 0 0\n{:<31} {:<4} {}\n", rows.len(), rows.len() * 40, "name", "type", "data");
    for (k, v) in rows {
        out.push_str(&format!("{k:<31} {:<4} {v}\n", 4));
    }
    ok(out)
}

fn arcstat_rows(st: &State) -> Vec<(&'static str, u64)> {
    // One ARC serves every pool (made here with the tunables' limits if no pool made it yet).
    let s = oxzfs::arc::shared(arc_limits().0).stats();
    let (mut l2size, mut l2asize, mut lbc, mut lba, mut hdr) = (0, 0, 0, 0, 0);
    for imp in st.pools.values() {
        let (a, b, c, d, e) = imp.pool.spa.l2arc.sizes();
        l2size += a;
        l2asize += b;
        lbc += c;
        lba += d;
        hdr += e;
    }
    let avail = oxzfs::arc::available_memory();
    // arc_meta_limit and arc_dnode_limit as OpenZFS's defaults set them (zfs_arc_meta_limit_percent
    // 75 of c_max, zfs_arc_dnode_limit_percent 10 of that): figures for arc_summary, not limits
    // the cache enforces.
    let meta_limit = s.c_max / 4 * 3;
    let [ddh, ddm] = s.access[0];
    let [dmh, dmm] = s.access[1];
    let [pdh, pdm] = s.access[2];
    let [pmh, pmm] = s.access[3];
    // The L2ARC's counters are the process's (every pool's since the daemon started); its
    // sizes are those of the pools imported now.
    let l2 = oxzfs::l2arc::L2_STATS.snapshot();
    let l2c = |name: &str| l2.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
    let mut parts = [0u64; 5];
    for imp in st.pools.values() {
        for (p, v) in parts.iter_mut().zip(imp.pool.spa.l2arc.asize_breakdown()) {
            *p += v;
        }
    }
    let [l2_mfu, l2_mru, l2_prefetch, l2_data, l2_meta] = parts;
    // In the order of OpenZFS 2.1's arcstats kstat; OpenZFS's rows for what oxzfs has no
    // counterpart of (its hash table's chains, the anonymous state, the kernel's reclaim
    // callbacks, lock retries) are left out.
    let mut rows: Vec<(&'static str, u64)> = vec![
        ("hits", s.hits),
        ("misses", s.misses),
        ("demand_data_hits", ddh),
        ("demand_data_misses", ddm),
        ("demand_metadata_hits", dmh),
        ("demand_metadata_misses", dmm),
        ("prefetch_data_hits", pdh),
        ("prefetch_data_misses", pdm),
        ("prefetch_metadata_hits", pmh),
        ("prefetch_metadata_misses", pmm),
        ("mru_hits", s.mru_hits),
        ("mru_ghost_hits", s.mru_ghost_hits),
        ("mfu_hits", s.mfu_hits),
        ("mfu_ghost_hits", s.mfu_ghost_hits),
        ("deleted", s.deleted),
        ("evict_l2_cached", s.evict_l2_cached),
        ("evict_l2_eligible", s.evict_l2_eligible_mfu + s.evict_l2_eligible_mru),
        ("evict_l2_eligible_mfu", s.evict_l2_eligible_mfu),
        ("evict_l2_eligible_mru", s.evict_l2_eligible_mru),
        ("evict_l2_ineligible", s.evict_l2_ineligible),
        ("hash_elements", s.hash_elements),
        ("hash_elements_max", s.hash_elements_max),
        ("p", s.p),
        ("c", s.c),
        ("c_min", s.c_min),
        ("c_max", s.c_max),
        ("size", s.size),
        ("compressed_size", s.compressed_size),
        ("uncompressed_size", s.uncompressed_size),
        ("overhead_size", s.overhead_size),
        // (The blocks held by kind; dnode_size is part of metadata_size, as arc_meta_used is.)
        ("data_size", s.size.saturating_sub(s.meta_used)),
        ("metadata_size", s.meta_used),
        ("dnode_size", s.dnode_size),
        ("mru_size", s.mru_size),
        ("mru_ghost_size", s.mru_ghost_size),
        ("mfu_size", s.mfu_size),
        ("mfu_ghost_size", s.mfu_ghost_size),
    ];
    rows.extend([
        ("l2_hits", l2c("l2_hits")),
        ("l2_misses", l2c("l2_misses")),
        ("l2_prefetch_asize", l2_prefetch),
        ("l2_mru_asize", l2_mru),
        ("l2_mfu_asize", l2_mfu),
        ("l2_bufc_data_asize", l2_data),
        ("l2_bufc_metadata_asize", l2_meta),
    ]);
    let before_sizes = ["l2_feeds", "l2_rw_clash", "l2_read_bytes", "l2_write_bytes", "l2_writes_sent", "l2_writes_done", "l2_writes_error", "l2_evict_reading", "l2_abort_lowmem", "l2_cksum_bad", "l2_io_error"];
    rows.extend(before_sizes.map(|n| (n, l2c(n))));
    rows.extend([
        ("l2_size", l2size),
        ("l2_asize", l2asize),
        ("l2_hdr_size", hdr),
        ("l2_log_blk_writes", l2c("l2_log_blk_writes")),
        // (The log blocks on the devices now: their mean size, and the buffers' bytes to theirs.)
        ("l2_log_blk_avg_asize", lba.checked_div(lbc).unwrap_or(0)),
        ("l2_log_blk_asize", lba),
        ("l2_log_blk_count", lbc),
        ("l2_data_to_meta_ratio", l2asize.checked_div(lba).unwrap_or(0)),
    ]);
    rows.extend(l2.iter().filter(|(n, _)| n.starts_with("l2_rebuild_")).copied());
    rows.extend([
        ("memory_throttle_count", s.throttles),
        ("memory_all_bytes", oxzfs::arc::physmem()),
        // (a signed kstat in OpenZFS: shown here as 0 when memory is short)
        ("memory_available_bytes", avail.max(0) as u64),
        ("arc_no_grow", u64::from(s.no_grow)),
        ("arc_meta_used", s.meta_used),
        ("arc_meta_limit", meta_limit),
        ("arc_dnode_limit", meta_limit / 10),
        ("arc_sys_free", oxzfs::arc::sys_free()),
    ]);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
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
}

crate::opts::verb_opts!(
    /// `oxzfs tunable`'s arguments: no options, NAME or NAME=VALUE words.
    TunableOpts {});

/// `oxzfs tunable [NAME[=VALUE]]...`: with no operand every tunable as NAME=VALUE, one a line;
/// NAME prints one, NAME=VALUE sets it (all are checked before any is set).
fn tunable(st: &State, args: &[String]) -> Out {
    use oxzfs::tunables;
    let args = match crate::opts::parse::<TunableOpts>(args) {
        Ok(o) => o.operands,
        Err(e) => return usage(format!("{e}\nusage: oxzfs tunable [NAME[=VALUE]]...")),
    };
    if args.is_empty() {
        return ok(tunables::all().iter().map(|t| format!("{}={}\n", t.name, t.get())).collect());
    }
    for a in &args {
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        if let Err(e) = tunables::lookup(name) {
            return fail(e.to_string());
        }
        if let Some((_, v)) = a.split_once('=') {
            if tunables::parse_value(v).is_none() {
                return fail(format!("bad value '{v}' for tunable '{name}': not a number"));
            }
        }
    }
    let mut out = String::new();
    for a in &args {
        match a.split_once('=') {
            Some(_) => match tunables::set_assignment(a) {
                Ok(v) => {
                    tracing::info!(tunable = %a, "set");
                    if a.starts_with("zfs_arc_max=") || a.starts_with("zfs_arc_min=") {
                        resize_arcs(st);
                    }
                    out.push_str(&format!("{}={v}\n", a.split_once('=').map_or("", |x| x.0)));
                }
                Err(e) => return (out, format!("{e}\n"), 1),
            },
            None => out.push_str(&format!("{a}={}\n", tunables::get(a).expect("checked above"))),
        }
    }
    ok(out)
}
