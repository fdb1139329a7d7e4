//! `zfs receive`: a replication stream read from where the caller's standard input leads (the
//! descriptor the request passed), made into a file system's snapshot (`oxzfs::dmu_recv`).
//! The stream is read after the daemon's state is let go; the state is taken again only to
//! unmount the file system an incremental stream changes and to mount it afterwards.
//! Concatenated streams (`zfs send -I`) are received one after another.

use crate::mounts::mount_some;
use crate::opts::verb_opts;
use crate::verb::{parse_or_usage, Out, State};
use oxzfs::dmu_recv::{self, Begin, Head, RecvOpts, StreamReader};
use std::sync::{Arc, Mutex};

verb_opts!(
    /// `zfs receive`'s options (-x: accepted; streams carry no properties to exclude).
    RecvArgs {
    #[arg(short = 'F')]
    force: bool,
    #[arg(short = 'u')]
    nomount: bool,
    #[arg(short = 'v')]
    verbose: bool,
    #[arg(short = 'n')]
    dryrun: bool,
    #[arg(short = 'd')]
    strip_pool: bool,
    #[arg(short = 'e')]
    last_only: bool,
    #[arg(short = 's')]
    resumable: bool,
    #[arg(short = 'A')]
    abort: bool,
    #[arg(short = 'o')]
    props: Vec<String>,
    #[arg(short = 'x')]
    excluded: Vec<String>,
});

/// OpenZFS's usage of `zfs receive`, limited to the options oxzfs takes.
pub const RECV_USAGE: &str = "usage:\n\treceive [-vnFu] [-o <property>=<value>] ... [-x <property>] ...\n\t    <filesystem|volume|snapshot>\n\treceive [-vnFu] [-o <property>=<value>] ... [-x <property>] ... \n\t    [-d | -e] <filesystem>\n";

/// `zfs receive [-Fnuv] [-d|-e] target`.
pub fn receive(st: &mut State, args: &[String]) -> Out {
    let o = match parse_or_usage::<RecvArgs>(args, RECV_USAGE) {
        Ok(o) => o,
        Err(out) => return out,
    };
    for (set, flag, what) in [
        (o.resumable, "-s", "resumable receives"),
        (o.abort, "-A", "resumable receives"),
    ] {
        if set {
            return (String::new(), format!("oxzfs does not support {what} yet ({flag})\n"), 2);
        }
    }
    let mut props = Vec::new();
    for p in &o.props {
        match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => props.push((k.to_string(), v.to_string())),
            _ => return (String::new(), format!("missing '=' for property=value argument\n{RECV_USAGE}"), 2),
        }
    }
    if o.strip_pool && o.last_only {
        return (String::new(), format!("invalid option combination: -d and -e\n{RECV_USAGE}"), 2);
    }
    let target = match o.operands.as_slice() {
        [] => return (String::new(), format!("missing snapshot argument\n{RECV_USAGE}"), 2),
        [t] => t.clone(),
        _ => return (String::new(), format!("too many arguments\n{RECV_USAGE}"), 2),
    };
    if (o.strip_pool || o.last_only) && target.contains('@') {
        return (String::new(), format!("cannot receive: argument to -d or -e must be a filesystem\n{RECV_USAGE}"), 2);
    }
    let pool = target.split(['/', '@']).next().unwrap_or(&target).to_string();
    let Some(imp) = st.pools.get(&pool) else {
        return (String::new(), format!("cannot open '{pool}': dataset does not exist\n"), 1);
    };
    if imp.rw.is_none() {
        return (String::new(), format!("cannot receive: pool '{pool}' is read-only\n"), 1);
    }
    let mut fds = std::mem::take(&mut st.fds).into_iter();
    let (Some(input), err) = (fds.next(), fds.next()) else {
        return (String::new(), "cannot receive: no stream descriptor came with the request (run `zfs receive` through the oxzfs command)\n".into(), 1);
    };
    let opts = o;
    let props = std::sync::Arc::new(props);
    st.streams.push(Box::new(move |res: &mut Out, state: &Arc<Mutex<State>>| {
        drop(err);
        let mut input = std::io::BufReader::with_capacity(1 << 20, std::fs::File::from(input));
        let mut first = true;
        // The package being read (`zfs send -R`, `-p`, `-I`): its name and header list.
        let mut package: Option<Package> = None;
        loop {
            let mut s = StreamReader::new(&mut input);
            let fail = |res: &mut Out, m: String| {
                res.1.push_str(&m);
                res.2 = 1;
            };
            let begin = match dmu_recv::read_head(&mut s) {
                Ok(Some(Head::Sub(b))) => b,
                Ok(Some(Head::Package { toname, header })) if package.is_none() => {
                    if target.contains('@') && header.as_ref().is_some_and(|h| h.get("not_recursive").is_none()) {
                        return fail(res, "cannot receive: cannot specify snapshot name for multi-snapshot stream\n".into());
                    }
                    first = false;
                    package = Some(Package { sendfs: toname.split_once('@').map_or(toname.clone(), |(f, _)| f.to_string()), header });
                    continue;
                }
                Ok(Some(Head::End)) if package.is_some() => {
                    // An incremental package received with -F: the snapshots of its file
                    // systems that the sender no longer has go (recv_incremental_replication).
                    if let Some(p) = package.take() {
                        if opts.force && !opts.dryrun && p.header.as_ref().is_some_and(|h| h.get_str("fromsnap").is_some()) {
                            match prune(&opts, &target, &pool, &p, state) {
                                Ok(line) => res.0.push_str(&line),
                                Err(m) => return fail(res, m),
                            }
                        }
                    }
                    continue;
                }
                Ok(Some(_)) => return fail(res, "cannot receive: invalid stream (a package inside a package, or an END where a BEGIN belongs)\n".into()),
                Ok(None) if first => return fail(res, "cannot receive: failed to read from stream\n".into()),
                Ok(None) if package.is_some() => return fail(res, "cannot receive: invalid stream (the package ends before its END record)\n".into()),
                Ok(None) => return,
                Err(e) => return fail(res, format!("cannot receive: {e}\n")),
            };
            first = false;
            match one(&opts, &props, &target, &pool, &begin, &mut s, state, package.as_ref()) {
                Ok(line) => res.0.push_str(&line),
                Err(m) => return fail(res, m),
            }
        }
    }));
    (String::new(), String::new(), 0)
}

/// Where a stream goes: the file system and the snapshot name (zfs_receive_one's naming:
/// TARGET, TARGET@SNAP, or with -d / -e the sent name's path under TARGET).
fn target_names(o: &RecvArgs, target: &str, toname: &str, package: Option<&Package>) -> Result<(String, String), String> {
    let (sent_fs, sent_snap) = toname.split_once('@').unwrap_or((toname, ""));
    // The name the sender started from: the package's file system, or this stream's.
    let sendfs = package.map_or(sent_fs, |p| p.sendfs.as_str());
    if o.strip_pool || o.last_only {
        let tail = if o.last_only {
            let cut = sendfs.rfind('/').map_or(0, |i| i + 1);
            sent_fs.get(cut..).unwrap_or(sent_fs).to_string()
        } else {
            sent_fs.split_once('/').map(|(_, r)| r.to_string()).unwrap_or_default()
        };
        let fs = if tail.is_empty() { target.to_string() } else { format!("{target}/{tail}") };
        return Ok((fs, sent_snap.to_string()));
    }
    match target.split_once('@') {
        Some((fs, snap)) => Ok((fs.to_string(), snap.to_string())),
        // Under the target, where the sender's file system was under the package's.
        None => Ok((format!("{target}{}", sent_fs.strip_prefix(sendfs).unwrap_or("")), sent_snap.to_string())),
    }
}

/// After an incremental package with -F: destroy the snapshots of each file system it carries
/// that the package's list does not name (snapshots the sender destroyed since). Only file
/// systems the package names are looked at; what -v says, as OpenZFS's receive says it.
fn prune(o: &RecvArgs, target: &str, pool: &str, p: &Package, state: &Arc<Mutex<State>>) -> Result<String, String> {
    use oxzfs_format::nvlist::NvValue;
    let Some(fss) = p.header.as_ref().and_then(|h| h.get_nvlist("fss")) else { return Ok(String::new()) };
    let (spa, h) = {
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(imp) = st.pools.get(pool) else { return Ok(String::new()) };
        let Some(h) = imp.rw.clone() else { return Ok(String::new()) };
        (imp.pool.spa.clone(), h)
    };
    let all = oxzfs::dsl::list_datasets(&spa).map_err(|e| format!("cannot receive: {e}\n"))?;
    let mut out = String::new();
    for (_, e) in &fss.pairs {
        let NvValue::NvList(e) = e else { continue };
        let (Some(name), Some(snaps)) = (e.get_str("name"), e.get_nvlist("snaps")) else { continue };
        let keep: Vec<u64> = snaps.pairs.iter().filter_map(|(_, v)| if let NvValue::Uint64(g) = v { Some(*g) } else { None }).collect();
        // Where the package put this file system.
        let Ok((fs, _)) = target_names(o, target, &format!("{name}@x"), Some(p)) else { continue };
        for d in all.iter().filter(|d| d.name.split_once('@').is_some_and(|(f, _)| f == fs)) {
            if keep.contains(&d.ds.guid) {
                continue;
            }
            if o.verbose {
                out.push_str(&format!("attempting destroy {}\n", d.name));
            }
            match h.lock().destroy_snapshot(&d.name) {
                Ok(()) => {
                    if o.verbose {
                        out.push_str("success\n");
                    }
                }
                Err(e) => return Err(format!("cannot destroy '{}': {e}\n", d.name)),
            }
        }
    }
    // The file systems below the target none of whose snapshots the sender has (destroyed
    // there, or made here): their snapshots, then themselves, deepest first, as
    // recv_incremental_replication's "check for delete" does with -F.
    let sent: std::collections::HashSet<u64> = fss
        .pairs
        .iter()
        .filter_map(|(_, e)| if let NvValue::NvList(e) = e { e.get_nvlist("snaps") } else { None })
        .flat_map(|sn| sn.pairs.iter().filter_map(|(_, v)| if let NvValue::Uint64(g) = v { Some(*g) } else { None }).collect::<Vec<_>>())
        .collect();
    let Ok((top, _)) = target_names(o, target, &format!("{}@x", p.sendfs), Some(p)) else { return Ok(out) };
    let all = oxzfs::dsl::list_datasets(&spa).map_err(|e| format!("cannot receive: {e}\n"))?;
    let below = |n: &str| n.strip_prefix(top.as_str()).is_some_and(|r| r.starts_with('/'));
    let mut gone: Vec<&oxzfs::dsl::DatasetInfo> = all
        .iter()
        .filter(|d| d.kind != oxzfs::dsl::DatasetKind::Snapshot && below(&d.name))
        .filter(|d| !all.iter().any(|s| s.name.split_once('@').is_some_and(|(f, _)| f == d.name) && sent.contains(&s.ds.guid)))
        .collect();
    gone.sort_by_key(|d| std::cmp::Reverse(d.name.matches('/').count()));
    for d in gone {
        {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(imp) = st.pools.get_mut(pool) {
                let mounted = crate::mounts::take_below(&mut imp.mounts, &d.name);
                let (_, busy) = crate::mounts::unmount_all(&imp.pool, &mut imp.mounts, mounted, false);
                if !busy.is_empty() {
                    return Err(busy);
                }
            }
        }
        let snaps: Vec<&str> = all.iter().filter(|s| s.name.split_once('@').is_some_and(|(f, _)| f == d.name)).map(|s| s.name.as_str()).collect();
        for name in snaps.into_iter().chain([d.name.as_str()]) {
            if o.verbose {
                out.push_str(&format!("attempting destroy {name}\n"));
            }
            let r = if name.contains('@') { h.lock().destroy_snapshot(name) } else { h.lock().destroy_dataset(name) };
            match r {
                Ok(()) if o.verbose => out.push_str("success\n"),
                Ok(()) => {}
                Err(e) => return Err(format!("cannot destroy '{name}': {e}\n")),
            }
        }
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(imp) = st.pools.get(pool) {
            imp.pool.forget_fs(&d.name);
        }
    }
    let _ = h.sync_now();
    Ok(out)
}

/// A package being received: the sender's top file system and the header list.
struct Package {
    sendfs: String,
    header: Option<oxzfs_format::nvlist::NvList>,
}

impl Package {
    /// The properties the header gives the file system of snapshot `guid`, as `zfs set`
    /// takes them.
    fn props_of(&self, guid: u64) -> Vec<(String, String)> {
        use oxzfs_format::nvlist::NvValue;
        let Some(fss) = self.header.as_ref().and_then(|h| h.get_nvlist("fss")) else { return Vec::new() };
        for (_, e) in &fss.pairs {
            let NvValue::NvList(e) = e else { continue };
            let has = e.get_nvlist("snaps").is_some_and(|sn| sn.pairs.iter().any(|(_, v)| *v == NvValue::Uint64(guid)));
            if !has {
                continue;
            }
            let Some(props) = e.get_nvlist("props") else { return Vec::new() };
            return props
                .pairs
                .iter()
                .filter_map(|(k, v)| match v {
                    NvValue::Uint64(n) => Some((k.clone(), oxzfs::dsl::stored_value_string(k, *n))),
                    NvValue::String(s) => Some((k.clone(), s.clone())),
                    _ => None,
                })
                .collect();
        }
        Vec::new()
    }
}

impl Package {
    /// The user properties the header gives snapshot `toname` (guid `guid`) of its file
    /// system (snapprops), as `zfs set` takes them.
    fn snapprops_of(&self, guid: u64, toname: &str) -> Vec<(String, String)> {
        use oxzfs_format::nvlist::NvValue;
        let Some(fss) = self.header.as_ref().and_then(|h| h.get_nvlist("fss")) else { return Vec::new() };
        let short = toname.split_once('@').map_or(toname, |(_, s)| s);
        for (_, e) in &fss.pairs {
            let NvValue::NvList(e) = e else { continue };
            if !e.get_nvlist("snaps").is_some_and(|sn| sn.pairs.iter().any(|(_, v)| *v == NvValue::Uint64(guid))) {
                continue;
            }
            let Some(props) = e.get_nvlist("snapprops").and_then(|sp| sp.get_nvlist(short)) else { return Vec::new() };
            return props
                .pairs
                .iter()
                .filter(|(k, _)| k.contains(':'))
                .filter_map(|(k, v)| match v {
                    NvValue::String(s) => Some((k.clone(), s.clone())),
                    NvValue::NvList(n) => n.get_str("value").map(|s| (k.clone(), s.to_string())),
                    _ => None,
                })
                .collect();
        }
        Vec::new()
    }
}

/// Receive one stream (its BEGIN read): the report line (-v) or why it failed.
#[allow(clippy::too_many_arguments)]
fn one(o: &RecvArgs, cli_props: &[(String, String)], target: &str, pool: &str, b: &Begin, s: &mut StreamReader, state: &Arc<Mutex<State>>, package: Option<&Package>) -> Result<String, String> {
    let (fs, snap) = target_names(o, target, &b.toname, package)?;
    // A file system the package makes gets the properties it carries, then -o's.
    let mut props: Vec<(String, String)> = match package {
        Some(p) if !b.incremental() || b.flags & oxzfs_format::drr::DRR_FLAG_CLONE != 0 => p.props_of(b.toguid),
        _ => Vec::new(),
    };
    props.extend(cli_props.iter().cloned());
    let kind = if b.incremental() { "incremental" } else { "full" };
    let head = format!("{} {kind} stream of {} into {fs}@{snap}\n", if o.dryrun { "would receive" } else { "receiving" }, b.toname);
    let mut out = String::new();
    if o.verbose {
        out.push_str(&head);
    }
    if o.dryrun {
        // Read the whole stream (its checksums checked), change nothing.
        dmu_recv::check_records(s).map_err(|e| format!("cannot receive: {e}\n"))?;
        return Ok(out);
    }
    // A snapshot the target has already (an incremental package sent again): skipped.
    if package.is_some() {
        let spa = state.lock().unwrap_or_else(|p| p.into_inner()).pools.get(pool).map(|i| i.pool.spa.clone());
        let have = spa.and_then(|spa| oxzfs::dsl::list_datasets(&spa).ok()).is_some_and(|l| {
            l.iter().any(|d| d.ds.guid == b.toguid && d.name.split_once('@').is_some_and(|(f, _)| f == fs))
        });
        if have {
            dmu_recv::check_records(s).map_err(|e| format!("cannot receive: {e}\n"))?;
            if o.verbose {
                out.push_str(&format!("snap {fs}@{snap} already exists; ignoring\n"));
            }
            return Ok(out);
        }
    }
    let start = std::time::Instant::now();
    // The file system the stream changes is unmounted meanwhile.
    // The file system the stream changes is unmounted meanwhile, with those mounted below it
    // (deepest first); they are mounted again after, and the new one unless -u.
    let (h, was_mounted) = {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(imp) = st.pools.get_mut(pool) else { return Err(format!("cannot open '{pool}': dataset does not exist\n")) };
        let Some(h) = imp.rw.clone() else { return Err(format!("cannot receive: pool '{pool}' is read-only\n")) };
        let gone = crate::mounts::take_below(&mut imp.mounts, &fs);
        let (was, busy) = crate::mounts::unmount_all(&imp.pool, &mut imp.mounts, gone, false);
        if !busy.is_empty() {
            let mut err = String::new();
            for ds in was.iter().rev() {
                mount_some(&imp.pool, imp.rw.as_ref(), &mut imp.mounts, &mut err, Some(ds));
            }
            return Err(busy);
        }
        (h, was)
    };
    let r = dmu_recv::receive(&h, b, s, &fs, &snap, &RecvOpts { force: o.force, props: props.to_vec(), create_parents: o.strip_pool });
    // The snapshot's own properties the package carries (snapprops: user properties), as
    // zfs_receive_one sets them once the snapshot is there.
    let r = r.and_then(|got| {
        if let Some(p) = package {
            let mut w = h.lock();
            for (k, v) in p.snapprops_of(b.toguid, &b.toname) {
                w.set_prop(&format!("{fs}@{snap}"), &k, Some(&v)).map_err(|e| oxzfs::ZfsError::Invalid(format!("cannot set property '{k}={v}' of '{fs}@{snap}': {e}")))?;
            }
            w.sync()?;
        }
        Ok(got)
    });
    // Mounted (again) as OpenZFS does after a receive, unless -u.
    {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(imp) = st.pools.get_mut(pool) {
            let mut e = String::new();
            let mut again: Vec<String> = was_mounted.iter().rev().cloned().collect();
            if !o.nomount && r.is_ok() && !again.contains(&fs) {
                again.insert(0, fs.clone());
            }
            for ds in &again {
                mount_some(&imp.pool, imp.rw.as_ref(), &mut imp.mounts, &mut e, Some(ds));
            }
            if !e.is_empty() && r.is_ok() {
                out.push_str(&e);
            }
            if let Some(h) = imp.rw.as_ref() {
                if r.is_ok() {
                    let _ = h.lock().log_history(&format!("zfs receive {target}"));
                }
            }
        }
    }
    let got = r.map_err(|e| {
        let m = e.to_string();
        format!("{}\n", if m.starts_with("cannot") { m } else { format!("cannot receive: {m}") })
    })?;
    if o.verbose {
        let secs = start.elapsed().as_secs_f64();
        let rate = (got.bytes as f64 / secs.max(1e-3)) as u64;
        out.push_str(&format!("received {} stream in {} seconds ({}/sec)\n", oxzfs::dsl::nicebytes(got.bytes), secs.round().max(1.0) as u64, oxzfs::dsl::nicebytes(rate)));
    }
    Ok(out)
}
