//! `zfs hold`, `zfs release` and `zfs holds`: user holds on snapshots, in zfs_main.c's words
//! and formats. -r takes the snapshot of the same name in every descendant file system that
//! has one.

use crate::opts::{parse, verb_opts};
use crate::verb::{err_out, imported_rw, Out, State};
use oxzfs::dsl::{DatasetInfo, DatasetKind};

pub const HOLD_USAGE: &str = "usage:\n\thold [-r] <tag> <snapshot> ...\n";
pub const RELEASE_USAGE: &str = "usage:\n\trelease [-r] <tag> <snapshot> ...\n";
pub const HOLDS_USAGE: &str = "usage:\n\tholds [-rHp] <snapshot> ...\n";

verb_opts!(
    /// `zfs hold` and `zfs release`'s options.
    HoldOpts {
    #[arg(short = 'r')]
    recursive: bool,
});

verb_opts!(
    /// `zfs holds`' options.
    HoldsOpts {
    #[arg(short = 'r')]
    recursive: bool,
    #[arg(short = 'H')]
    scripted: bool,
    #[arg(short = 'p')]
    parsable: bool,
});

/// The datasets of the pool of `name` (empty when it is not imported).
fn datasets_of(st: &State, name: &str) -> Vec<DatasetInfo> {
    let pool = name.split(['/', '@']).next().unwrap_or(name);
    st.pools.get(pool).and_then(|i| i.pool.datasets().ok()).unwrap_or_default()
}

/// The snapshots `fs@snap` names: itself, and with `recursive` the snapshot `snap` of each
/// file system below `fs` that has one. Err: the file system does not exist.
fn snapshots_named(all: &[DatasetInfo], fs: &str, snap: &str, recursive: bool) -> Result<Vec<String>, String> {
    if !all.iter().any(|d| d.name == fs && d.kind != DatasetKind::Snapshot) {
        return Err(format!("cannot open '{fs}': dataset does not exist\n"));
    }
    let mut out: Vec<String> = all
        .iter()
        .filter(|d| d.kind == DatasetKind::Snapshot)
        .filter_map(|d| d.name.split_once('@').filter(|(f, s)| *s == snap && (*f == fs || recursive && f.starts_with(&format!("{fs}/")))).map(|_| d.name.clone()))
        .collect();
    // A file system before those below it, as zfs_for_each walks them.
    out.sort_by(|a, b| {
        let key = |n: &str| n.split('@').next().unwrap_or(n).split('/').map(str::to_string).collect::<Vec<_>>();
        key(a).cmp(&key(b))
    });
    Ok(out)
}

/// `zfs hold [-r] TAG SNAPSHOT...` and `zfs release [-r] TAG SNAPSHOT...`: each snapshot
/// argument (with its descendants under -r) in one change; a failing argument is reported
/// and the others go on, as zfs_do_hold_rele_impl does.
fn hold_rele(st: &mut State, args: &[String], holding: bool) -> Out {
    let usage = if holding { HOLD_USAGE } else { RELEASE_USAGE };
    let o: HoldOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{usage}"), 2),
    };
    if o.operands.len() < 2 {
        return (String::new(), usage.to_string(), 2);
    }
    let tag = o.operands[0].clone();
    if holding && tag.starts_with('.') {
        return (String::new(), format!("tag may not start with '.'\n{usage}"), 2);
    }
    let mut err = String::new();
    for path in &o.operands[1..] {
        let Some((fs, snap)) = path.split_once('@') else {
            err.push_str(&format!("'{path}' is not a snapshot\n"));
            continue;
        };
        let all = datasets_of(st, fs);
        let names = match snapshots_named(&all, fs, snap, o.recursive) {
            Ok(n) => n,
            Err(e) => {
                err.push_str(&e);
                continue;
            }
        };
        let what = if holding { format!("cannot hold snapshot '{path}'") } else { format!("cannot release hold from snapshot '{path}'") };
        if names.is_empty() {
            err.push_str(&format!("{what}: dataset does not exist\n"));
            continue;
        }
        // A recursive release takes the tag where it is (zfs_release_one skips the others).
        let names: Vec<String> = if !holding && o.recursive {
            let spa = st.pools.get(fs.split('/').next().unwrap_or(fs)).map(|i| i.pool.spa.clone());
            names
                .into_iter()
                .filter(|n| {
                    let info = all.iter().find(|d| &d.name == n);
                    match (&spa, info) {
                        (Some(spa), Some(info)) => oxzfs::dsl_userhold::holds(spa, info).is_ok_and(|h| h.iter().any(|(t, _)| *t == tag)),
                        _ => false,
                    }
                })
                .collect()
        } else {
            names
        };
        if names.is_empty() {
            err.push_str(&format!("{what}: no such tag on this dataset\n"));
            continue;
        }
        let (_, h) = match imported_rw(st, fs, if holding { "hold" } else { "release" }) {
            Ok(x) => x,
            Err(o) => {
                err.push_str(&o.1);
                continue;
            }
        };
        let pairs: Vec<(String, String)> = names.into_iter().map(|n| (n, tag.clone())).collect();
        let r = if holding { h.lock().hold(&pairs) } else { h.lock().release(&pairs) };
        if let Err(e) = r {
            err.push_str(&err_out(e, &what).1);
        }
    }
    let code = if err.is_empty() { 0 } else { 1 };
    (String::new(), err, code)
}

pub fn hold(st: &mut State, args: &[String]) -> Out {
    hold_rele(st, args, true)
}

pub fn release(st: &mut State, args: &[String]) -> Out {
    hold_rele(st, args, false)
}

/// `zfs holds [-rHp] SNAPSHOT...`: NAME, TAG and TIMESTAMP of every hold, as print_holds
/// lays them out (the columns as wide as the longest name and tag).
pub fn holds(st: &mut State, args: &[String]) -> Out {
    let o: HoldsOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{HOLDS_USAGE}"), 2),
    };
    if o.operands.is_empty() {
        return (String::new(), HOLDS_USAGE.to_string(), 2);
    }
    let mut err = String::new();
    let mut failed = false;
    let mut rows: Vec<(String, String, u64)> = Vec::new();
    let mut found = 0;
    let (mut nwidth, mut tagwidth) = (0, 0);
    for path in &o.operands {
        let Some((fs, snap)) = path.split_once('@') else {
            err.push_str(&format!("'{path}' is not a snapshot\n"));
            failed = true;
            continue;
        };
        let all = datasets_of(st, fs);
        let names = if o.recursive {
            match snapshots_named(&all, fs, snap, true) {
                Ok(n) => n,
                Err(e) => {
                    err.push_str(&e);
                    failed = true;
                    continue;
                }
            }
        } else if all.iter().any(|d| &d.name == path) {
            vec![path.clone()]
        } else {
            err.push_str(&format!("cannot open '{path}': dataset does not exist\n"));
            failed = true;
            continue;
        };
        let pool = fs.split('/').next().unwrap_or(fs);
        let Some(imp) = st.pools.get(pool) else { continue };
        for n in names {
            let Some(info) = all.iter().find(|d| d.name == n) else { continue };
            let hs = match oxzfs::dsl_userhold::holds(&imp.pool.spa, info) {
                Ok(h) => h,
                Err(e) => {
                    err.push_str(&err_out(e, &format!("cannot get holds of '{n}'")).1);
                    failed = true;
                    continue;
                }
            };
            found += 1;
            nwidth = nwidth.max(n.len());
            for (tag, t) in hs {
                tagwidth = tagwidth.max(tag.len());
                rows.push((n.clone(), tag, t));
            }
        }
    }
    let mut out = String::new();
    if !o.scripted {
        out.push_str(&format!("{:<nwidth$}  {:<tagwidth$}  TIMESTAMP\n", "NAME", "TAG"));
    }
    for (n, tag, t) in rows {
        let time = if o.parsable { t.to_string() } else { oxzfs::dsl::chrono_like(t) };
        if o.scripted {
            out.push_str(&format!("{n}\t{tag}\t{time}\n"));
        } else {
            out.push_str(&format!("{n:<nwidth$}  {tag:<tagwidth$}  {time}\n"));
        }
    }
    if found == 0 {
        err.push_str("no datasets available\n");
    }
    (out, err, if failed { 1 } else { 0 })
}
