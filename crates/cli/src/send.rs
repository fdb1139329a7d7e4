//! `zfs send`: a snapshot, or what changed between two, as a replication stream
//! (`oxzfs::dmu_send`) written to where the caller's standard output leads (the descriptor the
//! request passed). The stream is made after the daemon's state is let go, so other commands
//! go on meanwhile; `-v` reports progress on the caller's standard error each second, as
//! OpenZFS's does.

use crate::opts::verb_opts;
use crate::verb::{parse_or_usage, pool_of, Out, State};
use oxzfs::dmu_send::{self, SendFlags, SendSpec};

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

verb_opts!(
    /// `zfs send`'s options.
    SendOpts {
    /// -i: incremental from this snapshot.
    #[arg(short = 'i')]
    incremental: Option<String>,
    /// -I: incremental from this snapshot, with every snapshot between.
    #[arg(short = 'I')]
    intermediate: Option<String>,
    #[arg(short = 'n')]
    dryrun: bool,
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    #[arg(short = 'P')]
    parsable: bool,
    #[arg(short = 'L')]
    large_block: bool,
    /// -e and -c: accepted; blocks go out as WRITE records of their logical bytes, which
    /// every receiver reads (what the options save is stream size).
    #[arg(short = 'e')]
    embed: bool,
    #[arg(short = 'c')]
    compressed: bool,
    #[arg(short = 'R')]
    replicate: bool,
    #[arg(short = 'w')]
    raw: bool,
    #[arg(short = 'p')]
    props: bool,
    #[arg(short = 'D')]
    dedup: bool,
    #[arg(short = 'b')]
    backup: bool,
    #[arg(short = 's')]
    skipmissing: bool,
    #[arg(short = 't')]
    token: Option<String>,
});

/// OpenZFS's usage of `zfs send`, limited to the options oxzfs takes.
pub const SEND_USAGE: &str = "usage:\n\tsend [-nPpRvLec] [-[iI] snapshot] <snapshot>\n";

/// `zfs send [-nvPLec] [-i|-I snapshot] snapshot`.
pub fn send(st: &mut State, args: &[String]) -> Out {
    let o = match parse_or_usage::<SendOpts>(args, SEND_USAGE) {
        Ok(o) => o,
        Err(out) => return out,
    };
    for (set, flag, what) in [
        (o.raw, "-w", "raw streams"),
        (o.dedup, "-D", "deduplicated streams"),
        (o.backup, "-b", "received properties in streams"),
        (o.skipmissing, "-s", "packages that skip missing snapshots"),
        (o.token.is_some(), "-t", "resumable streams"),
    ] {
        if set {
            return (String::new(), format!("oxzfs does not send {what} yet ({flag})\n"), 2);
        }
    }
    let to = match o.operands.as_slice() {
        [] => return (String::new(), format!("missing snapshot argument\n{SEND_USAGE}"), 2),
        [t] => t.clone(),
        _ => return (String::new(), format!("too many arguments\n{SEND_USAGE}"), 2),
    };
    if o.incremental.is_some() && o.intermediate.is_some() {
        return (String::new(), format!("invalid option combination: -i and -I\n{SEND_USAGE}"), 2);
    }
    let imp = match pool_of(st, &to) {
        Ok(i) => i,
        Err(out) => return out,
    };
    let spa = imp.pool.spa.clone();
    let flags = SendFlags { large_blocks: o.large_block };
    // The streams to make: one; with -I one per snapshot after FROM up to TO; with -R or -p
    // those of the package (libzfs's compound stream), whose head names the file systems,
    // snapshots and properties. -I alone makes a package without a header list.
    let (specs, head): (Vec<SendSpec>, Option<Vec<u8>>) = if o.replicate || o.props {
        let from = o.incremental.as_deref().or(o.intermediate.as_deref());
        let doall = o.intermediate.is_some() || (o.replicate && from.is_none());
        let p = match dmu_send::package_for(&spa, &to, from, doall, o.replicate, flags.clone()) {
            Ok(p) => p,
            Err(e) => return (String::new(), format!("{e}\n"), 1),
        };
        match dmu_send::package_head(&p.toname, p.header.as_ref()) {
            Ok(h) => (p.streams, Some(h)),
            Err(e) => return (String::new(), format!("{e}\n"), 1),
        }
    } else {
        let mut pairs: Vec<(Option<String>, String)> = Vec::new();
        match (&o.incremental, &o.intermediate) {
            (Some(f), _) => pairs.push((Some(f.clone()), to.clone())),
            (None, Some(f)) => {
                let fs = to.split('@').next().unwrap_or(&to).to_string();
                let full_from = if f.starts_with('@') { format!("{fs}{f}") } else { f.clone() };
                let snaps = match snapshots_between(&spa, &fs, &full_from, &to) {
                    Ok(s) => s,
                    Err(e) => return (String::new(), format!("{e}\n"), 1),
                };
                let mut prev = full_from;
                for s in snaps {
                    pairs.push((Some(prev.clone()), s.clone()));
                    prev = s;
                }
            }
            (None, None) => pairs.push((None, to.clone())),
        }
        let mut specs = Vec::new();
        for (from, to) in &pairs {
            match dmu_send::spec_for(&spa, to, from.as_deref(), flags.clone()) {
                Ok(s) => specs.push(s),
                Err(e) => return (String::new(), format!("{e}\n"), 1),
            }
        }
        let head = match o.intermediate.is_some() {
            true => match dmu_send::package_head(&to, None) {
                Ok(h) => Some(h),
                Err(e) => return (String::new(), format!("{e}\n"), 1),
            },
            false => None,
        };
        (specs, head)
    };
    let framing = head.as_ref().map_or(0, |h| (h.len() + oxzfs_format::drr::RECORD_SIZE) as u64);
    // Estimates: the exact length of each stream, from the metadata alone.
    let mut out = String::new();
    let mut sizes = Vec::new();
    if o.verbose > 0 || o.dryrun {
        for s in &specs {
            match dmu_send::send(s, None, &AtomicU64::new(0)) {
                Ok(n) => sizes.push(n),
                Err(e) => return (String::new(), format!("cannot send '{}': {e}\n", s.toname), 1),
            }
        }
    }
    if o.verbose > 0 {
        for (s, size) in specs.iter().zip(&sizes) {
            out.push_str(&verbose_line(s.fromname.as_deref(), &s.toname, *size, o.parsable));
        }
        let total: u64 = sizes.iter().sum::<u64>() + framing;
        out.push_str(&if o.parsable { format!("size\t{total}\n") } else { format!("total estimated size is {}\n", oxzfs::dsl::nicebytes(total)) });
    }
    if o.dryrun {
        // A dry run's report goes to standard output.
        return (out, String::new(), 0);
    }
    let mut fds = std::mem::take(&mut st.fds).into_iter();
    let (Some(stream), err) = (fds.next(), fds.next()) else {
        return (String::new(), "cannot send: no stream descriptor came with the request (run `zfs send` through the oxzfs command)\n".into(), 1);
    };
    let verbose = o.verbose > 0;
    let parsable = o.parsable;
    st.streams.push(Box::new(move |res: &mut Out, _state: &Arc<std::sync::Mutex<State>>| {
        let mut errf = err.map(std::fs::File::from);
        if let Some(e) = errf.as_mut() {
            let _ = e.write_all(out.as_bytes());
        } else {
            res.1.push_str(&out);
        }
        let mut w = std::fs::File::from(stream);
        let fail = |res: &mut Out, m: String| {
            res.1.push_str(&m);
            res.2 = 1;
        };
        if let Some(h) = &head {
            if let Err(e) = w.write_all(h) {
                return fail(res, format!("warning: cannot write the send stream: {e}\n"));
            }
        }
        for s in &specs {
            if let Err(m) = run_one(s, &mut w, errf.as_ref(), verbose, parsable) {
                return fail(res, m);
            }
        }
        if head.is_some() {
            if let Err(e) = w.write_all(&dmu_send::package_tail()) {
                fail(res, format!("warning: cannot write the send stream: {e}\n"));
            }
        }
    }));
    (String::new(), String::new(), 0)
}

/// One stream to `w`, with `-v`'s per-second progress lines on `err`.
fn run_one(s: &SendSpec, w: &mut std::fs::File, err: Option<&std::fs::File>, verbose: bool, parsable: bool) -> Result<(), String> {
    let written = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let progress = match (verbose, err.and_then(|e| e.try_clone().ok())) {
        (true, Some(mut e)) => {
            let (written, done, name) = (written.clone(), done.clone(), s.toname.clone());
            if !parsable {
                let _ = writeln!(e, "TIME        SENT   SNAPSHOT {name}");
            }
            Some(std::thread::spawn(move || {
                let mut ticks = 0;
                while !done.load(Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    ticks += 1;
                    if ticks % 10 != 0 || done.load(Ordering::Acquire) {
                        continue;
                    }
                    let now = clock();
                    let n = written.load(Ordering::Relaxed);
                    let _ = if parsable { writeln!(e, "{now}\t{n}\t{name}") } else { writeln!(e, "{now}   {:>5}   {name}", oxzfs::dsl::nicebytes(n)) };
                }
            }))
        }
        _ => None,
    };
    let mut buf = std::io::BufWriter::with_capacity(1 << 20, w);
    // (send flushes what it wrote through `buf` before it returns.)
    let r = dmu_send::send(s, Some(&mut buf), &written);
    done.store(true, Ordering::Release);
    if let Some(p) = progress {
        let _ = p.join();
    }
    r.map(|_| ()).map_err(|e| {
        let m = e.to_string();
        if m.starts_with("cannot") { format!("warning: {m}\n") } else { format!("warning: cannot send '{}': {m}\n", s.toname) }
    })
}

/// The time of day as `zfs send -v` prints it (HH:MM:SS, local time).
fn clock() -> String {
    // SAFETY: localtime_r fills the struct it is given from a time_t read just before.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}

/// send_print_verbose: one stream's line of `-v`.
fn verbose_line(from: Option<&str>, to: &str, size: u64, parsable: bool) -> String {
    let head = match (from, parsable) {
        (Some(f), true) => format!("incremental\t{f}\t{to}"),
        (Some(f), false) => format!("send from {f} to {to}"),
        (None, true) => format!("full\t{to}"),
        (None, false) => format!("full send of {to}"),
    };
    if parsable {
        format!("{head}\t{size}\n")
    } else {
        format!("{head} estimated size is {}\n", oxzfs::dsl::nicebytes(size))
    }
}

/// The snapshots of `fs` after `from` up to `to` (both named whole), oldest first: what
/// `zfs send -I from to` sends one after another.
fn snapshots_between(spa: &Arc<oxzfs::spa::Spa>, fs: &str, from: &str, to: &str) -> Result<Vec<String>, String> {
    let all = oxzfs::dsl::list_datasets(spa).map_err(|e| e.to_string())?;
    let txg_of = |n: &str| all.iter().find(|d| d.name == n).map(|d| d.ds.creation_txg);
    let Some(t) = txg_of(to) else { return Err(format!("cannot open '{to}': dataset does not exist")) };
    let Some(f) = txg_of(from) else { return Err(format!("cannot open '{from}': dataset does not exist")) };
    let mut snaps: Vec<(u64, String)> = all
        .iter()
        .filter(|d| d.name.split_once('@').is_some_and(|(p, _)| p == fs) && d.ds.creation_txg > f && d.ds.creation_txg <= t)
        .map(|d| (d.ds.creation_txg, d.name.clone()))
        .collect();
    snaps.sort();
    if snaps.is_empty() {
        return Err(format!("cannot send '{to}': not an earlier snapshot from the same fs ('{from}')"));
    }
    Ok(snaps.into_iter().map(|(_, n)| n).collect())
}
