//! `zfs receive`: a replication stream read from where the caller's standard input leads (the
//! descriptor the request passed), made into a file system's snapshot (`oxzfs::dmu_recv`).
//! The stream is read after the daemon's state is let go; the state is taken again only to
//! unmount the file system an incremental stream changes and to mount it afterwards.
//! Concatenated streams (`zfs send -I`) are received one after another.

use crate::mounts::mount_some;
use crate::opts::verb_opts;
use crate::verb::{parse_or_usage, Out, State};
use oxzfs::dmu_recv::{self, Begin, RecvOpts, StreamReader};
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
        loop {
            let mut s = StreamReader::new(&mut input);
            let begin = match dmu_recv::read_begin(&mut s) {
                Ok(Some(b)) => b,
                Ok(None) if first => {
                    res.1.push_str("cannot receive: failed to read from stream\n");
                    res.2 = 1;
                    return;
                }
                Ok(None) => return,
                Err(e) => {
                    res.1.push_str(&format!("cannot receive: {e}\n"));
                    res.2 = 1;
                    return;
                }
            };
            first = false;
            match one(&opts, &props, &target, &pool, &begin, &mut s, state) {
                Ok(line) => res.0.push_str(&line),
                Err(m) => {
                    res.1.push_str(&m);
                    res.2 = 1;
                    return;
                }
            }
        }
    }));
    (String::new(), String::new(), 0)
}

/// Where a stream goes: the file system and the snapshot name (zfs_receive_one's naming:
/// TARGET, TARGET@SNAP, or with -d / -e the sent name's path under TARGET).
fn target_names(o: &RecvArgs, target: &str, b: &Begin) -> Result<(String, String), String> {
    let (sent_fs, sent_snap) = b.toname.split_once('@').unwrap_or((&b.toname, ""));
    if o.strip_pool || o.last_only {
        let tail = if o.last_only { sent_fs.rsplit('/').next().unwrap_or(sent_fs).to_string() } else { sent_fs.split_once('/').map(|(_, r)| r.to_string()).unwrap_or_default() };
        let fs = if tail.is_empty() { target.to_string() } else { format!("{target}/{tail}") };
        return Ok((fs, sent_snap.to_string()));
    }
    match target.split_once('@') {
        Some((fs, snap)) => Ok((fs.to_string(), snap.to_string())),
        None => Ok((target.to_string(), sent_snap.to_string())),
    }
}

/// Receive one stream (its BEGIN read): the report line (-v) or why it failed.
fn one(o: &RecvArgs, props: &[(String, String)], target: &str, pool: &str, b: &Begin, s: &mut StreamReader, state: &Arc<Mutex<State>>) -> Result<String, String> {
    let (fs, snap) = target_names(o, target, b)?;
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
    let start = std::time::Instant::now();
    // The file system the stream changes is unmounted meanwhile.
    let (h, was_mounted) = {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(imp) = st.pools.get_mut(pool) else { return Err(format!("cannot open '{pool}': dataset does not exist\n")) };
        let Some(h) = imp.rw.clone() else { return Err(format!("cannot receive: pool '{pool}' is read-only\n")) };
        let mut was = false;
        if let Some(i) = imp.mounts.iter().position(|m| m.dataset == fs) {
            let m = imp.mounts.remove(i);
            if let Err((m, e)) = m.unmount(false) {
                imp.mounts.insert(i, m);
                return Err(format!("cannot unmount '{fs}': {e}\n"));
            }
            imp.pool.mounted.lock().unwrap_or_else(|p| p.into_inner()).remove(&fs);
            was = true;
        }
        (h, was)
    };
    let r = dmu_recv::receive(&h, b, s, &fs, &snap, &RecvOpts { force: o.force, props: props.to_vec() });
    // Mounted (again) as OpenZFS does after a receive, unless -u.
    {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(imp) = st.pools.get_mut(pool) {
            if !o.nomount || was_mounted {
                let mut e = String::new();
                mount_some(&imp.pool, imp.rw.as_ref(), &mut imp.mounts, &mut e, Some(&fs));
                if !e.is_empty() && r.is_ok() {
                    out.push_str(&e);
                }
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
