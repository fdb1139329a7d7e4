//! What every zpool and zfs verb shares: the daemon's state (imported pools, their mounts and
//! write handles), the verb result `Out` = (stdout, stderr, exit status) with OpenZFS's exit codes
//! (usage errors 2, other failures 1), a verb's options parsed or answered with its usage, and the lookups of a
//! dataset's pool. It sits below the verb families (`zpool`, `zfs`) and imports neither.

use crate::opts::{parse, VerbArgs};
use oxzfs::pool::Pool;
use oxzfs::txg::PoolHandle;
use oxzfs::ZfsError;
use oxzfs_fuse::MountHandle;
use std::collections::BTreeMap;
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
    /// Pools whose scrub the request waits for once it has let the state go (`zpool scrub
    /// -w`, `zpool wait`): waiting under the lock would stall every other request.
    pub waits: Vec<Arc<oxzfs::spa::Spa>>,
    /// Pools whose resilver the request waits for, in the same way (`zpool wait -t resilver`,
    /// `zpool attach -w`, `zpool replace -w`).
    pub resilver_waits: Vec<Arc<oxzfs::spa::Spa>>,
    /// Pools whose sequential resilver (attach/replace -s) the command waits for.
    pub rebuild_waits: Vec<Arc<PoolHandle>>,
    /// Pools whose manual TRIM `zpool trim -w` (of the leaves it named, by guid) and
    /// `zpool wait -t trim` (of every leaf: None) wait for.
    pub trim_waits: Vec<(Arc<PoolHandle>, Option<Vec<u64>>)>,
    /// Pools whose device removal the request waits for (`zpool remove -w`, `zpool wait -t
    /// remove`).
    /// Pools whose removal a command waits for, with the thread's run it started (`zpool
    /// remove -w`) or None (`zpool wait`).
    pub removal_waits: Vec<(Arc<PoolHandle>, Option<u64>)>,
    /// The descriptors the request passed (`zfs send`: where the stream goes and the caller's
    /// standard error; `zfs receive`: where it comes from and standard error).
    pub fds: Vec<std::os::fd::OwnedFd>,
    /// Streams to run once the request has let the state go (`zfs send`, `zfs receive`): each
    /// adds what it has to say to the request's output.
    pub streams: Vec<Box<dyn FnOnce(&mut Out, &Arc<std::sync::Mutex<State>>) + Send>>,
}

pub type Out = (String, String, i32);

pub fn ok(s: String) -> Out {
    (s, String::new(), 0)
}

pub fn line(msg: impl Into<String>) -> String {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    m
}

pub fn fail(msg: impl Into<String>) -> Out {
    (String::new(), line(msg), 1)
}

pub fn usage(msg: impl Into<String>) -> Out {
    (String::new(), line(msg), 2)
}

pub fn abs(cwd: &Path, p: &str) -> PathBuf {
    let p = PathBuf::from(p);
    if p.is_absolute() {
        p
    } else {
        cwd.join(p)
    }
}

pub fn pool_of<'a>(st: &'a mut State, ds: &str) -> Result<&'a mut Imported, Out> {
    let pool = ds.split(['/', '@', '#']).next().unwrap_or(ds);
    match st.pools.get_mut(pool) {
        Some(i) => Ok(i),
        None => Err((String::new(), format!("cannot open '{ds}': dataset does not exist\n"), 1)),
    }
}

pub fn rw_of(imp: &Imported, ds: &str, verb: &str) -> Result<Arc<PoolHandle>, Out> {
    imp.rw.clone().ok_or_else(|| (String::new(), format!("cannot {verb} '{ds}': pool is read-only\n"), 1))
}

/// The imported pool of dataset `ds` and its write handle (`verb` names the refusal of a
/// read-only pool).
pub fn imported_rw<'a>(st: &'a mut State, ds: &str, verb: &str) -> Result<(&'a mut Imported, Arc<PoolHandle>), Out> {
    let imp = pool_of(st, ds)?;
    let h = rw_of(imp, ds, verb)?;
    Ok((imp, h))
}

/// An I/O error as strerror words it (without Rust's "(os error N)").
pub fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

pub fn err_out(e: ZfsError, ctx: &str) -> Out {
    let m = e.to_string();
    (String::new(), format!("{}\n", if m.starts_with("cannot") { m } else { format!("{ctx}: {m}") }), 1)
}

/// The `-o prop=val` options of a zfs verb as (prop, val) pairs; a missing '=' is a usage
/// error followed by `usage`.
pub fn dash_o_props(values: &[String], usage: &str) -> Result<Vec<(String, String)>, Out> {
    values
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err((String::new(), format!("missing '=' for property=value argument\n{usage}"), 2)),
        })
        .collect()
}

/// A verb's options parsed (`opts::parse`), a bad option answered with the verb's usage (exit 2).
pub fn parse_or_usage<T: VerbArgs>(args: &[String], usage: &str) -> Result<T, Out> {
    parse(args).map_err(|e| (String::new(), format!("{e}\n{usage}"), 2))
}

/// `parse_or_usage` for a verb of exactly `missing.len()` operands: too few answered with
/// `missing[n]`, too many with "too many arguments", each with the usage.
pub fn verb_args<T: VerbArgs>(args: &[String], usage: &str, missing: &[&str]) -> Result<T, Out> {
    let o: T = parse_or_usage(args, usage)?;
    let n = o.operands().len();
    if n < missing.len() {
        return Err((String::new(), format!("{}\n{usage}", missing[n]), 2));
    }
    if n > missing.len() {
        return Err((String::new(), format!("too many arguments\n{usage}"), 2));
    }
    Ok(o)
}


#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};


    #[test]
    fn abs_paths() {
        assert_eq!(abs(Path::new("/home/u"), "d"), PathBuf::from("/home/u/d"));
        assert_eq!(abs(Path::new("/home/u"), "/d"), PathBuf::from("/d"));
    }
}
