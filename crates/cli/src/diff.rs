//! `zfs diff [-FHth] snapshot [snapshot|filesystem]`: the files and directories changed between
//! a snapshot and a later one or the file system now, in libzfs_diff.c's format (the engine's
//! zfs_diff finds them). "Now" is the file system synced first, which is what OpenZFS's
//! just-in-time snapshot holds.

use crate::opts::{parse, verb_opts};
use crate::verb::{err_out, Out, State};
use oxzfs::dsl::DatasetKind;
use oxzfs::zfs_diff::{mangle, type_letter, Change};

pub const DIFF_USAGE: &str = "usage:\n\tdiff [-FHth] <snapshot> [snapshot|filesystem]\n";

verb_opts!(
    /// `zfs diff`'s options.
    DiffOpts {
    #[arg(short = 'F')]
    classify: bool,
    #[arg(short = 'H')]
    scripted: bool,
    #[arg(short = 't')]
    timestamped: bool,
    #[arg(short = 'h')]
    no_mangle: bool,
});

fn fail(msg: String) -> Out {
    (String::new(), format!("{msg}\n"), 1)
}

/// get_snapshot_names: (file system, from snapshot, to snapshot or None for the file system).
fn names(from: &str, to: Option<&str>) -> Result<(String, String, Option<String>), Out> {
    let Some(to) = to else {
        let Some((ds, snap)) = from.split_once('@').filter(|(d, s)| !d.is_empty() && !s.is_empty()) else {
            return Err(fail(format!("Badly formed snapshot name {from}: invalid dataset name")));
        };
        return Ok((ds.to_string(), format!("{ds}@{snap}"), None));
    };
    let unable = || fail("Unable to determine which snapshots to compare: invalid dataset name".into());
    let (fds, fsnap) = from.split_once('@').unwrap_or((from, ""));
    let (tds, tsnap) = match to.split_once('@') {
        Some((d, s)) => (d, Some(s)),
        None => (to, None),
    };
    if fsnap.is_empty() || tsnap == Some("") || fds.is_empty() && tds.is_empty() {
        return Err(unable());
    }
    if !fds.is_empty() && !tds.is_empty() && fds != tds {
        // Another file system: a clone whose origin is the earlier snapshot (checked once
        // the datasets are read); its paths are the clone's.
        return Ok((tds.to_string(), from.to_string(), tsnap.map(|s| format!("{tds}@{s}"))));
    }
    let ds = if fds.is_empty() { tds } else { fds };
    Ok((ds.to_string(), format!("{ds}@{fsnap}"), tsnap.map(|s| format!("{ds}@{s}"))))
}

/// dsl_dataset_is_before: snapshot `f` is older than `t` in `t`'s own history, its file
/// system's or, through origins, the file systems it was cloned from.
fn is_before(all: &[oxzfs::dsl::DatasetInfo], f: &oxzfs::dsl::DatasetInfo, t: &oxzfs::dsl::DatasetInfo) -> bool {
    let mut dir = t.dir_obj;
    let mut origin = t.dir.origin_obj;
    // Older than this txg (at or before it for an origin snapshot).
    let mut limit = if t.kind == DatasetKind::Snapshot { t.ds.creation_txg } else { u64::MAX };
    for _ in 0..all.len() + 1 {
        if f.dir_obj == dir {
            return f.ds.creation_txg < limit;
        }
        let Some(o) = all.iter().find(|d| d.ds_obj == origin && origin != 0) else { return false };
        dir = o.dir_obj;
        origin = o.dir.origin_obj;
        limit = o.ds.creation_txg.saturating_add(1);
    }
    false
}

pub fn diff(st: &mut State, args: &[String]) -> Out {
    let o: DiffOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return (String::new(), format!("{e}\n{DIFF_USAGE}"), 2),
    };
    let (from, to) = match o.operands.as_slice() {
        [f] => (f.clone(), None),
        [f, t] => (f.clone(), Some(t.clone())),
        [] => return (String::new(), format!("must provide at least one snapshot name\n{DIFF_USAGE}"), 2),
        _ => return (String::new(), format!("too many arguments\n{DIFF_USAGE}"), 2),
    };
    let (ds, from, to) = match names(&from, to.as_deref()) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let pool = ds.split('/').next().unwrap_or(&ds).to_string();
    let Some(imp) = st.pools.get(&pool) else {
        return fail(format!("cannot open '{ds}': dataset does not exist"));
    };
    // The file system "now": what it holds once synced (OpenZFS snapshots it just in time).
    if to.is_none() {
        if let Some(h) = &imp.rw {
            if let Err(e) = h.lock().sync() {
                return err_out(e, &format!("Cannot create just-in-time snapshot of '{ds}'"));
            }
        }
    }
    let all = match imp.pool.datasets() {
        Ok(a) => a,
        Err(e) => return err_out(e, &format!("cannot open '{from}'")),
    };
    let find = |n: &str| all.iter().find(|d| d.name == n);
    if find(&ds).is_none() {
        return fail(format!("cannot open '{ds}': dataset does not exist"));
    }
    // The file system's mountpoint begins every path (get_mountpoint).
    let Some(mnt) = imp.mounts.iter().find(|m| m.dataset == ds).map(|m| m.mountpoint.to_string_lossy().into_owned()) else {
        return fail("Cannot diff an unmounted snapshot: operation not applicable to datasets of this type".into());
    };
    let mnt = if mnt == "/" { String::new() } else { mnt };
    // A snapshot that is not there fails in the kernel's diff (ENOENT).
    let Some(f) = find(&from) else { return fail("Unable to obtain diffs: No such file or directory".into()) };
    let target = to.clone().unwrap_or_else(|| ds.clone());
    let Some(t) = find(&target) else { return fail("Unable to obtain diffs: No such file or directory".into()) };
    if t.kind == DatasetKind::Volume || f.objset_type != oxzfs_format::objset::DMU_OST_ZFS {
        return fail(format!("Unable to obtain diffs: cannot diff '{target}': operation not applicable to datasets of this type"));
    }
    if f.dir_obj != t.dir_obj && all.iter().find(|d| d.name == ds).is_none_or(|d| d.dir.origin_obj != f.ds_obj) {
        return fail("Not an earlier snapshot from the same fs: invalid dataset name".into());
    }
    if !is_before(&all, f, t) {
        return fail("Unable to obtain diffs: \n   Not an earlier snapshot from the same fs".into());
    }
    let open = |d: &oxzfs::dsl::DatasetInfo| oxzfs::dmu::Objset::open_id(&imp.pool.spa, &d.ds.bp, d.ds_obj);
    let lines = match (open(f), open(t)) {
        (Ok(fo), Ok(to)) => oxzfs::zfs_diff::diff(fo, to, f.ds.creation_txg),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let found = match lines {
        Ok(l) => l,
        Err(e) => return err_out(e, "Unable to obtain diffs"),
    };
    let path = |p: &[u8]| -> String {
        let mut full = mnt.as_bytes().to_vec();
        full.extend_from_slice(p);
        if o.no_mangle {
            String::from_utf8_lossy(&full).into_owned()
        } else {
            mangle(&full)
        }
    };
    let mut out = String::new();
    for l in found.lines {
        if o.timestamped {
            out.push_str(&format!("{:10}.{:09}\t", l.ctime.0, l.ctime.1));
        }
        let letter = match l.change {
            Change::Added => '+',
            Change::Removed => '-',
            Change::Modified | Change::Links(_) => 'M',
            Change::Renamed(_) => 'R',
        };
        out.push(letter);
        out.push('\t');
        if o.classify {
            out.push(type_letter(l.mode));
            out.push('\t');
        }
        out.push_str(&path(&l.path));
        match &l.change {
            Change::Renamed(new) => {
                out.push_str(if o.scripted { "\t" } else { " -> " });
                out.push_str(&path(new));
            }
            Change::Links(d) => out.push_str(&format!("\t({d:+})")),
            _ => {}
        }
        out.push('\n');
    }
    let err: String = found.errors.iter().map(|e| format!("{e}\n")).collect();
    (out, err, 0)
}
