//! `zpool iostat [[-lq]|[-rw]] [-T d|u] [-ghHLpPvy] [-n] [[pool ...]|[pool vdev ...]|[vdev ...]]
//! [interval [count]]`, laid out as OpenZFS 2.1's zpool_main.c prints it.
//!
//! The daemon takes a [`Snapshot`] of the counters (every row it would print, cumulative since
//! import) and [`render`] turns one snapshot, or the difference of two, into the report. A
//! single report is rendered in the daemon; with an interval the command stays in the client
//! ([`run_interval`]): it asks the daemon for a snapshot each interval and prints the
//! difference to the last, as OpenZFS's iostat loop does with its refreshed configs.
//!
//! The extended statistics are oxzfs's own I/O path's (see `oxzfs::vdev::iostat`): each leaf
//! I/O is issued at once with no queue before it, so the total wait is the disk wait, the
//! queue waits have no samples ("-") and no request is aggregated.

use crate::opts::verb_opts;
use crate::verb::{fail, ok, usage, Out, State};
use oxzfs::nicenum::{nicenum, nicetime};
use oxzfs::vdev::iostat::{IoClass, IoStatsSnap, L_HISTO_BUCKETS, RQ_HISTO_BUCKETS};
use oxzfs::vdev::Vdev;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::sync::Arc;

pub const USAGE: &str = "usage:\n\tiostat [[[-c [script1,script2,...][-lq]]|[-rw]] [-T d | u] [-ghHLpPvy]\n\t    [[pool ...]|[pool vdev ...]|[vdev ...]] [[-n] interval [count]]";

/// The word the client puts before the arguments to ask the daemon for a snapshot (JSON)
/// rather than a report.
pub const SNAPSHOT_ARG: &str = "--oxzfs-snapshot";

/// What the command line asks for.
#[derive(Clone, Debug, Default)]
pub struct Args {
    pub verbose: bool,
    pub scripted: bool,
    pub literal: bool,
    pub latency: bool,
    pub queues: bool,
    pub l_histo: bool,
    pub rq_histo: bool,
    pub omit_since_boot: bool,
    pub headers_once: bool,
    pub guid: bool,
    pub follow_links: bool,
    /// 'u' or 'd' (-T).
    pub timestamp: Option<char>,
    /// Seconds between reports (0: one report).
    pub interval: f64,
    /// Reports to print (0: until interrupted).
    pub count: u64,
    /// Pools and vdevs named, interval and count taken off.
    pub operands: Vec<String>,
}

impl Args {
    fn histo(&self) -> bool {
        self.l_histo || self.rq_histo
    }
}

/// zfs_isnumber: digits and dots, not ending in a dot.
fn is_number(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.') && !s.ends_with('.')
}

verb_opts!(
    /// `zpool iostat`'s options.
    IostatOpts {
    #[arg(short = 'c')]
    scripts: Vec<String>,
    #[arg(short = 'T')]
    timestamp: Vec<String>,
    #[arg(short = 'g')]
    guid: bool,
    #[arg(short = 'L')]
    follow_links: bool,
    #[arg(short = 'P')]
    full_paths: bool,
    #[arg(short = 'v')]
    verbose: bool,
    #[arg(short = 'y')]
    omit_since_boot: bool,
    #[arg(short = 'h')]
    help: bool,
    #[arg(short = 'p')]
    literal: bool,
    #[arg(short = 'l')]
    latency: bool,
    #[arg(short = 'q')]
    queues: bool,
    #[arg(short = 'r')]
    rq_histo: bool,
    #[arg(short = 'w')]
    l_histo: bool,
    #[arg(short = 'n')]
    headers_once: bool,
    #[arg(short = 'H')]
    scripted: bool,
});

/// Parse the words after `iostat`.
pub fn parse(args: &[String]) -> Result<Args, Out> {
    let o = match crate::opts::parse::<IostatOpts>(args) {
        Ok(o) => o,
        Err(e) => return Err(usage(format!("{e}\n{USAGE}"))),
    };
    if o.help {
        return Err(usage(USAGE));
    }
    if !o.scripts.is_empty() {
        return Err(fail("Can't run -c with root privileges unless ZPOOL_SCRIPTS_AS_ROOT is set."));
    }
    let mut a = Args {
        verbose: o.verbose,
        scripted: o.scripted,
        literal: o.literal,
        latency: o.latency,
        queues: o.queues,
        l_histo: o.l_histo,
        rq_histo: o.rq_histo,
        omit_since_boot: o.omit_since_boot,
        headers_once: o.headers_once,
        guid: o.guid,
        follow_links: o.follow_links,
        // -P (full paths) changes nothing: vdev names are their full paths already.
        ..Default::default()
    };
    if let Some(t) = o.timestamp.last() {
        match t.as_str() {
            "u" => a.timestamp = Some('u'),
            "d" => a.timestamp = Some('d'),
            _ => return Err(usage(USAGE)),
        }
    }
    let mut ops = o.operands.clone();
    // get_interval_count: the last number is the interval, or the count after an interval.
    for _ in 0..2 {
        let Some(last) = ops.last().filter(|s| is_number(s)) else { break };
        let Ok(v) = last.parse::<f64>() else { break };
        if v == 0.0 {
            return Err(usage(format!("interval cannot be zero\n{USAGE}")));
        }
        if a.interval != 0.0 {
            a.count = a.interval as u64;
        }
        a.interval = v;
        ops.pop();
    }
    a.operands = ops;
    if a.histo() && (a.latency || a.queues) {
        return Err(usage(format!("[-r|-w] isn't allowed with [-c|-l|-q]\n{USAGE}")));
    }
    if a.l_histo && a.rq_histo {
        return Err(usage(format!("Only one of [-r|-w] can be passed at a time\n{USAGE}")));
    }
    Ok(a)
}

/// One line of the report: a vdev (or the pool, depth 0) or a class heading.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub name: String,
    pub depth: usize,
    /// A class heading ("special", "logs", "cache"): dashes in every column.
    pub heading: bool,
    /// (alloc, free) of the pool and top-level vdevs.
    pub space: Option<(u64, u64)>,
    /// Operations and bytes, read then write, since import.
    pub ops: [u64; 2],
    pub bytes: [u64; 2],
    /// Latency histograms, read then write (total wait, which is the disk wait here).
    pub lat: Vec<Vec<u64>>,
    /// Request-size histograms per I/O class.
    pub rq: Vec<Vec<u64>>,
    /// I/Os in flight per I/O class.
    pub active: Vec<u64>,
}

/// A pool's rows, with the nanoseconds since it was imported.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolSnap {
    pub name: String,
    pub ns: u64,
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub pools: Vec<PoolSnap>,
    /// Named vdevs only (`zpool iostat pool vdev ...`).
    pub vdev_filter: bool,
}

fn empty_ex() -> (Vec<Vec<u64>>, Vec<Vec<u64>>, Vec<u64>) {
    let e = IoStatsSnap::default();
    (vec![vec![0; L_HISTO_BUCKETS]; 2], e.rq, e.active)
}

/// The counters of a vdev: a leaf's own, the sum of its leaves' for the others.
fn vdev_counters(v: &Vdev) -> ([u64; 2], [u64; 2], Vec<Vec<u64>>, IoStatsSnap) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut ops = [0u64; 2];
    let mut bytes = [0u64; 2];
    let mut lat = vec![vec![0u64; L_HISTO_BUCKETS]; 2];
    let mut ex = IoStatsSnap::default();
    for l in v.leaves() {
        let s = &l.stats;
        ops[0] += s.read_ops.load(Relaxed);
        ops[1] += s.write_ops.load(Relaxed);
        bytes[0] += s.read_bytes.load(Relaxed);
        bytes[1] += s.write_bytes.load(Relaxed);
        let e = s.ex.snapshot();
        for (a, b) in lat.iter_mut().flatten().zip(by_type(&e).iter().flatten()) {
            *a += b;
        }
        ex.add(&e);
    }
    (ops, bytes, lat, ex)
}

/// The latency histograms of `e` by type (read, write), as vsx_total_histo is: a scrub's
/// repair writes count as writes only in the scrub's own columns.
fn by_type(e: &IoStatsSnap) -> Vec<Vec<u64>> {
    let mut lat = vec![vec![0u64; L_HISTO_BUCKETS]; 2];
    for (c, h) in e.lat.iter().enumerate() {
        let t = usize::from(c == IoClass::SyncWrite as usize || c == IoClass::AsyncWrite as usize);
        for (a, b) in lat[t].iter_mut().zip(h) {
            *a += b;
        }
    }
    lat
}

fn vdev_name(v: &Vdev, a: &Args) -> String {
    if a.guid {
        return v.guid.to_string();
    }
    let name = v.display_name();
    if a.follow_links && v.is_leaf() {
        if let Ok(p) = std::fs::canonicalize(&name) {
            return p.display().to_string();
        }
    }
    name
}

/// Does `n` name this vdev (its name as printed, its path, its guid)?
fn names_vdev(v: &Vdev, n: &str) -> bool {
    v.display_name() == n || v.path.as_deref() == Some(n) || v.guid.to_string() == n
}

fn find_vdev<'a>(v: &'a Arc<Vdev>, n: &str) -> bool {
    names_vdev(v, n) || v.children.iter().any(|c| find_vdev(c, n))
}

/// The rows of every pool asked for, in the order the report prints them.
pub fn snapshot(st: &State, a: &Args) -> Result<Snapshot, Out> {
    // Which operands are pools, which vdevs (zpool_do_iostat's are_all_pools / are_vdevs_in_pool).
    let is_pool = |n: &String| st.pools.contains_key(n);
    let in_pool = |pool: Option<&str>, n: &str| {
        st.pools.iter().filter(|(name, _)| pool.is_none_or(|p| p == name.as_str())).any(|(_, imp)| {
            find_vdev(&imp.pool.spa.root_vdev, n) || imp.pool.aux_devices("l2cache").iter().any(|(p, _)| p == n)
        })
    };
    let ops = &a.operands;
    let (pools, filter): (Vec<String>, Vec<String>) = if ops.is_empty() {
        (st.pools.keys().cloned().collect(), Vec::new())
    } else if ops.iter().all(is_pool) {
        (ops.clone(), Vec::new())
    } else if ops.iter().all(|n| in_pool(None, n)) {
        (st.pools.keys().cloned().collect(), ops.clone())
    } else if is_pool(&ops[0]) {
        if ops[1..].iter().all(|n| in_pool(Some(&ops[0]), n)) {
            (vec![ops[0].clone()], ops[1..].to_vec())
        } else {
            let mut err = format!("Expected either a list of pools, or list of vdevs in \"{}\", but got:\n", ops[0]);
            for n in &ops[1..] {
                let what = if is_pool(n) {
                    "pool"
                } else if in_pool(Some(&ops[0]), n) {
                    "vdev in this pool"
                } else if in_pool(None, n) {
                    "vdev in another pool"
                } else {
                    "unknown"
                };
                let _ = writeln!(err, "\t{n} ({what})");
            }
            return Err(usage(format!("{err}\n{USAGE}")));
        }
    } else if ops.len() == 1 {
        // pool_list_get's word for a name that is neither.
        return Err(fail(format!("cannot open '{}': no such pool", ops[0])));
    } else {
        return Err(fail("Unable to parse pools/vdevs list.\n"));
    };
    let verbose = a.verbose || !filter.is_empty();
    let mut out = Vec::new();
    for name in pools {
        let Some(imp) = st.pools.get(&name) else { continue };
        let pool = &imp.pool;
        let mut rows = Vec::new();
        let row = |name: String, depth: usize, space: Option<(u64, u64)>, v: &Vdev| {
            let (ops, bytes, lat, ex) = vdev_counters(v);
            Row { name, depth, heading: false, space, ops, bytes, lat, rq: ex.rq, active: ex.active }
        };
        let lr = pool.list_row();
        rows.push(row(pool.name().to_string(), 0, Some((lr.alloc, lr.free)), &pool.spa.root_vdev));
        if verbose {
            let kids = &pool.spa.root_vdev.children;
            let classes: [(Option<&str>, Vec<&Arc<Vdev>>); 4] = [
                (None, kids.iter().filter(|t| !t.is_log && t.alloc_bias.is_empty() && !matches!(t.kind, oxzfs::vdev::VdevKind::Hole)).collect()),
                (Some("dedup"), kids.iter().filter(|t| t.alloc_bias == "dedup").collect()),
                (Some("special"), kids.iter().filter(|t| t.alloc_bias == "special").collect()),
                (Some("logs"), kids.iter().filter(|t| t.is_log).collect()),
            ];
            for (label, tops) in classes {
                if tops.is_empty() {
                    continue;
                }
                if let Some(l) = label {
                    let (lat, rq, active) = empty_ex();
                    rows.push(Row { name: l.into(), depth: 0, heading: true, space: None, ops: [0; 2], bytes: [0; 2], lat, rq, active });
                }
                for t in tops {
                    let alloc = pool.vdev_alloc(t).unwrap_or(0);
                    rows.push(row(vdev_name(t, a), 2, Some((alloc, t.asize.saturating_sub(alloc))), t));
                    let mut stack: Vec<(&Arc<Vdev>, usize)> = t.children.iter().rev().map(|c| (c, 4)).collect();
                    while let Some((c, d)) = stack.pop() {
                        rows.push(row(vdev_name(c, a), d, None, c));
                        stack.extend(c.children.iter().rev().map(|k| (k, d + 2)));
                    }
                }
            }
            // Cache devices hold no pool data (their space is the L2ARC's): OpenZFS shows their
            // size as free while nothing is cached on them.
            let cache = pool.aux_devices("l2cache");
            if !cache.is_empty() {
                let (lat, rq, active) = empty_ex();
                rows.push(Row { name: "cache".into(), depth: 0, heading: true, space: None, ops: [0; 2], bytes: [0; 2], lat, rq, active });
                let l2 = pool.spa.l2arc.devices();
                for (path, state) in cache {
                    let used = l2.iter().find(|d| d.path.to_string_lossy() == path.as_str() && !d.faulted);
                    let (space, ops, bytes) = match used {
                        Some(d) => (Some((d.alloc, d.size.saturating_sub(d.alloc))), [d.reads, d.writes], [d.read_bytes, d.write_bytes]),
                        None => match if state == "ONLINE" { oxzfs::pool::l2arc_space(std::path::Path::new(&path)) } else { None } {
                            Some(n) => (Some((0, n)), [0; 2], [0; 2]),
                            None => (None, [0; 2], [0; 2]),
                        },
                    };
                    let (lat, rq, active) = match used {
                        Some(d) => (by_type(&d.ex), d.ex.rq.clone(), d.ex.active.clone()),
                        None => empty_ex(),
                    };
                    rows.push(Row { name: path, depth: 2, heading: false, space, ops, bytes, lat, rq, active });
                }
            }
        }
        if !filter.is_empty() {
            // Only the vdevs named, each at depth 0; the class headings stay (as empty lines).
            rows.retain(|r| r.heading || filter.iter().any(|f| *f == r.name || (r.depth > 0 && st.pools.get(&name).is_some_and(|imp| vdev_named(&imp.pool.spa.root_vdev, &r.name, f)))));
            for r in &mut rows {
                r.depth = 0;
            }
        }
        out.push(PoolSnap { name, ns: imp.since.elapsed().as_nanos() as u64, rows });
    }
    Ok(Snapshot { pools: out, vdev_filter: !filter.is_empty() })
}

/// Whether the vdev printed as `shown` is the one the user named `n` (by path or guid).
fn vdev_named(root: &Arc<Vdev>, shown: &str, n: &str) -> bool {
    fn walk(v: &Arc<Vdev>, shown: &str, n: &str) -> bool {
        (v.display_name() == shown || v.guid.to_string() == shown) && names_vdev(v, n) || v.children.iter().any(|c| walk(c, shown, n))
    }
    walk(root, shown, n)
}

/// The groups of columns printed, in order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Default,
    Latency,
    Queues,
    LHisto,
    RqHisto,
}

fn groups(a: &Args) -> Vec<Group> {
    if a.l_histo {
        vec![Group::LHisto]
    } else if a.rq_histo {
        vec![Group::RqHisto]
    } else {
        let mut g = vec![Group::Default];
        if a.latency {
            g.push(Group::Latency);
        }
        if a.queues {
            g.push(Group::Queues);
        }
        g
    }
}

fn top_labels(g: Group) -> &'static [(&'static str, usize)] {
    match g {
        Group::Default => &[("capacity", 2), ("operations", 2), ("bandwidth", 2)],
        Group::Latency => &[("total_wait", 2), ("disk_wait", 2), ("syncq_wait", 2), ("asyncq_wait", 2), ("scrub", 1), ("trim", 1)],
        Group::Queues => &[("syncq_read", 2), ("syncq_write", 2), ("asyncq_read", 2), ("asyncq_write", 2), ("scrubq_read", 2), ("trimq_write", 2)],
        Group::LHisto => &[("total_wait", 2), ("disk_wait", 2), ("syncq_wait", 2), ("asyncq_wait", 2)],
        Group::RqHisto => &[("sync_read", 2), ("sync_write", 2), ("async_read", 2), ("async_write", 2), ("scrub", 2), ("trim", 2)],
    }
}

fn bottom_labels(g: Group) -> &'static [&'static str] {
    match g {
        Group::Default => &["alloc", "free", "read", "write", "read", "write"],
        Group::Latency => &["read", "write", "read", "write", "read", "write", "read", "write", "wait", "wait"],
        Group::Queues => &["pend", "activ", "pend", "activ", "pend", "activ", "pend", "activ", "pend", "activ", "pend", "activ"],
        Group::LHisto => &["read", "write", "read", "write", "read", "write", "read", "write", "scrub", "trim"],
        Group::RqHisto => &["ind", "agg", "ind", "agg", "ind", "agg", "ind", "agg", "ind", "agg", "ind", "agg"],
    }
}

/// default_column_width.
fn column_width(a: &Args, g: Group) -> usize {
    if !a.literal {
        return 5;
    }
    match g {
        Group::Default => 15,
        Group::Latency | Group::LHisto => 10,
        Group::Queues | Group::RqHisto => 6,
    }
}

struct Ctx<'a> {
    a: &'a Args,
    groups: Vec<Group>,
    namewidth: usize,
    title: &'static str,
}

impl Ctx<'_> {
    fn width(&self, g: Group, force: usize) -> usize {
        if force > 0 {
            force
        } else {
            column_width(self.a, g)
        }
    }

    /// print_iostat_labels: each label centred over its columns.
    fn labels(&self, out: &mut String, force: usize, top: bool) {
        for &g in &self.groups {
            let cw = self.width(g, force);
            let labels: Vec<(&str, usize)> = if top { top_labels(g).to_vec() } else { bottom_labels(g).iter().map(|&l| (l, 1)).collect() };
            for (name, columns) in labels {
                let columns = columns.max(1);
                let rw = cw * columns + 2 * (columns - 1);
                let start = (rw / columns).saturating_sub(name.len() / columns);
                out.push_str("  ");
                out.push_str(&" ".repeat(start));
                out.push_str(name);
                out.push_str(&" ".repeat(rw.saturating_sub(start + name.len())));
            }
        }
    }

    /// print_iostat_dashes: a separator, or a named row with a dash in every column.
    fn dashes(&self, out: &mut String, force: usize, name: Option<&str>) {
        let nw = self.namewidth.max(self.title.len()).max(name.map_or(0, |n| n.len()));
        match name {
            Some(n) => {
                let _ = write!(out, "{n:<nw$}");
            }
            None => out.push_str(&"-".repeat(nw)),
        }
        for &g in &self.groups {
            let cw = self.width(g, force);
            for _ in bottom_labels(g) {
                if name.is_some() {
                    let _ = write!(out, "  {:>w$}-", " ", w = cw - 1);
                } else {
                    let _ = write!(out, "  {}", &"--------------------"[..cw.min(20)]);
                }
            }
        }
    }

    fn header(&self, out: &mut String, force: usize, histo_name: Option<&str>) {
        let nw = self.namewidth.max(self.title.len()).max(histo_name.map_or(0, |n| n.len()));
        match histo_name {
            Some(n) => {
                let _ = write!(out, "{n:<nw$}");
            }
            None => out.push_str(&" ".repeat(nw)),
        }
        self.labels(out, force, true);
        out.push('\n');
        let _ = write!(out, "{:<nw$}", self.title);
        self.labels(out, force, false);
        out.push('\n');
        self.dashes(out, force, None);
        out.push('\n');
    }

    /// print_one_stat.
    fn stat(&self, out: &mut String, s: &str, cw: usize) {
        if self.a.scripted {
            let _ = write!(out, "\t{s}");
        } else if s.starts_with('0') {
            let _ = write!(out, "  {:>cw$}", "0");
        } else {
            let t: String = s.chars().take(cw).collect();
            let _ = write!(out, "  {t:>cw$}");
        }
    }

    fn num(&self, v: u64) -> String {
        if self.a.literal {
            v.to_string()
        } else {
            nicenum(v)
        }
    }

    fn time(&self, v: u64) -> String {
        if self.a.literal {
            if v == 0 {
                "-".into()
            } else {
                v.to_string()
            }
        } else {
            nicetime(v)
        }
    }
}

/// single_histo_average: the mean of a power-of-two latency histogram, each bucket at its
/// midpoint.
fn histo_average(h: &[u64]) -> u64 {
    let (mut count, mut total) = (0u64, 0u64);
    for (i, &n) in h.iter().enumerate() {
        if n != 0 {
            total = total.saturating_add(n.saturating_mul((1u64 << i) + ((1u64 << i) / 2)));
            count += n;
        }
    }
    total.checked_div(count).unwrap_or(0)
}

fn sub(a: &[u64], b: Option<&[u64]>) -> Vec<u64> {
    match b {
        Some(b) if b.len() == a.len() => a.iter().zip(b).map(|(x, y)| x.saturating_sub(*y)).collect(),
        _ => a.to_vec(),
    }
}

/// The report for `cur`, as a difference from `prev` when there is one (the interval's
/// report), else averaged since import. `header` prints the column heading first.
pub fn render(cur: &Snapshot, prev: Option<&Snapshot>, a: &Args, header: bool) -> String {
    let histo = a.histo();
    let title = if a.l_histo {
        "latency"
    } else if a.rq_histo {
        "req_size"
    } else if cur.vdev_filter {
        "vdev"
    } else {
        "pool"
    };
    let verbose = a.verbose || cur.vdev_filter;
    // get_namewidth_iostat: the widest name with its indent, at least 10.
    let namewidth = cur
        .pools
        .iter()
        .flat_map(|p| {
            let pn = p.name.len();
            let rows = if verbose { p.rows.iter().filter(|r| !r.heading).map(|r| r.name.len() + r.depth).max().unwrap_or(0) } else { 0 };
            [pn, rows]
        })
        .max()
        .unwrap_or(0)
        .max(10);
    let cx = Ctx { a, groups: groups(a), namewidth, title };
    let mut out = String::new();
    if header && !histo && !a.scripted {
        cx.header(&mut out, 0, None);
    }
    for p in &cur.pools {
        let old = prev.and_then(|s| s.pools.iter().find(|q| q.name == p.name)).filter(|q| q.rows.len() == p.rows.len());
        let tdelta = p.ns.saturating_sub(old.map_or(0, |o| o.ns));
        let scale = if old.is_none() && histo { 1.0 } else if tdelta == 0 { 1.0 } else { 1e9 / tdelta as f64 };
        let mut printed = 0;
        for (i, r) in p.rows.iter().enumerate() {
            let o = old.map(|o| &o.rows[i]).filter(|o| o.name == r.name);
            if r.heading {
                if !histo && !a.scripted && !cur.vdev_filter {
                    cx.dashes(&mut out, 0, Some(&r.name));
                }
                out.push('\n');
                continue;
            }
            if histo {
                out.push('\n');
                histogram(&cx, &mut out, r, o, scale);
                printed += 1;
                continue;
            }
            if a.scripted {
                out.push_str(&r.name);
            } else if r.name.len() + r.depth > namewidth {
                let _ = write!(out, "{}{}", " ".repeat(r.depth), r.name);
            } else {
                let _ = write!(out, "{}{:<w$}", " ".repeat(r.depth), r.name, w = namewidth - r.depth);
            }
            for &g in &cx.groups {
                let cw = column_width(a, g);
                match g {
                    Group::Default => {
                        match r.space {
                            Some((alloc, free)) => {
                                cx.stat(&mut out, &cx.num(alloc), cw);
                                cx.stat(&mut out, &cx.num(free), cw);
                            }
                            None => {
                                let na = if a.literal { '0' } else { '-' };
                                if a.scripted {
                                    let _ = write!(out, "\t{na}\t{na}");
                                } else {
                                    let _ = write!(out, "  {na:>cw$}  {na:>cw$}");
                                }
                            }
                        }
                        let d = |now: u64, then: Option<u64>| ((now.saturating_sub(then.unwrap_or(0))) as f64 * scale) as u64;
                        for (now, then) in [
                            (r.ops[0], o.map(|o| o.ops[0])),
                            (r.ops[1], o.map(|o| o.ops[1])),
                            (r.bytes[0], o.map(|o| o.bytes[0])),
                            (r.bytes[1], o.map(|o| o.bytes[1])),
                        ] {
                            cx.stat(&mut out, &cx.num(d(now, then)), cw);
                        }
                    }
                    Group::Latency => {
                        let lat: Vec<Vec<u64>> = (0..2).map(|t| sub(&r.lat[t], o.map(|o| o.lat[t].as_slice()))).collect();
                        // total r/w, disk r/w (the same here), the four queue waits, the scrub
                        // and trim queue waits: never sampled.
                        let vals = [histo_average(&lat[0]), histo_average(&lat[1]), histo_average(&lat[0]), histo_average(&lat[1]), 0, 0, 0, 0, 0, 0];
                        for v in vals {
                            cx.stat(&mut out, &cx.time(v), cw);
                        }
                    }
                    Group::Queues => {
                        for c in 0..6 {
                            cx.stat(&mut out, &cx.num(0), cw);
                            cx.stat(&mut out, &cx.num(r.active.get(c).copied().unwrap_or(0)), cw);
                        }
                    }
                    Group::LHisto | Group::RqHisto => {}
                }
            }
            out.push('\n');
            printed += 1;
        }
        if printed > 0 && !histo && !a.scripted && verbose && !cur.vdev_filter {
            cx.dashes(&mut out, 0, None);
            out.push('\n');
        }
    }
    if ((cur.pools.len() > 1 && !verbose && !histo) || (!histo && cur.vdev_filter)) && !a.scripted {
        cx.dashes(&mut out, 0, None);
        out.push('\n');
    }
    out
}

/// print_iostat_histos: one table per vdev, a line per bucket.
fn histogram(cx: &Ctx, out: &mut String, r: &Row, o: Option<&Row>, scale: f64) {
    let a = cx.a;
    let cols: Vec<Vec<u64>> = if a.l_histo {
        let lat: Vec<Vec<u64>> = (0..2).map(|t| sub(&r.lat[t], o.map(|o| o.lat[t].as_slice()))).collect();
        let none = vec![0; L_HISTO_BUCKETS];
        vec![lat[0].clone(), lat[1].clone(), lat[0].clone(), lat[1].clone(), none.clone(), none.clone(), none.clone(), none.clone(), none.clone(), none]
    } else {
        let none = vec![0; RQ_HISTO_BUCKETS];
        let mut v = Vec::new();
        for c in 0..6 {
            v.push(sub(&r.rq[c], o.map(|o| o.rq[c].as_slice())));
            v.push(none.clone());
        }
        v
    };
    let cw = if a.literal {
        let max = cols.iter().flatten().copied().max().unwrap_or(0);
        5usize.max(if max == 0 { 0 } else { (max as f64).log10() as usize + 1 })
    } else {
        5
    };
    let nw = cx.namewidth.max(cx.title.len());
    if a.scripted {
        let _ = writeln!(out, "{}", r.name);
    } else {
        cx.header(out, cw, Some(&r.name));
    }
    let start = if a.rq_histo { 9 } else { 0 };
    let buckets = cols[0].len();
    for j in start..buckets {
        let (val, label) = if a.l_histo {
            let v = (1u64 << (j + 1)) - 1;
            (v, nicetime(v))
        } else {
            let v = 1u64 << j;
            (v, nicenum(v))
        };
        if a.scripted {
            let _ = write!(out, "{val}");
        } else {
            let _ = write!(out, "{label:<nw$}");
        }
        for c in &cols {
            cx.stat(out, &cx.num((c[j] as f64 * scale) as u64), cw);
        }
        out.push('\n');
    }
    if !a.scripted {
        let n = bottom_labels(if a.l_histo { Group::LHisto } else { Group::RqHisto }).len();
        let _ = writeln!(out, "{}", "-".repeat(nw + (cw + 2) * n));
    }
}

/// print_timestamp: `-T u` the seconds since the epoch, `-T d` the date as date(1) prints it.
pub fn timestamp(fmt: char) -> String {
    let t = unsafe { libc::time(std::ptr::null_mut()) };
    if fmt == 'u' {
        return format!("{t}\n");
    }
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let mut buf = [0u8; 64];
    let f = c"%a %b %e %H:%M:%S %Z %Y";
    let n = unsafe {
        libc::localtime_r(&t, &mut tm);
        libc::strftime(buf.as_mut_ptr() as *mut libc::c_char, buf.len(), f.as_ptr(), &tm)
    };
    format!("{}\n", String::from_utf8_lossy(&buf[..n]))
}

/// `zpool iostat` in the daemon: one report (or, asked by the client, a snapshot in JSON).
pub fn iostat(st: &mut State, args: &[String]) -> Out {
    let (want_snapshot, args) = match args.first() {
        Some(w) if w == SNAPSHOT_ARG => (true, &args[1..]),
        _ => (false, args),
    };
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let snap = match snapshot(st, &a) {
        Ok(s) => s,
        Err(e) => return e,
    };
    if want_snapshot {
        return ok(serde_json::to_string(&snap).unwrap_or_default());
    }
    if snap.pools.is_empty() {
        return fail("no pools available");
    }
    let mut out = String::new();
    if let Some(t) = a.timestamp {
        out.push_str(&timestamp(t));
    }
    if a.omit_since_boot {
        // -y without an interval: the report since import is all there is, and it is left out.
        if !a.histo() && !a.scripted {
            let mut h = String::new();
            render(&Snapshot { pools: Vec::new(), vdev_filter: snap.vdev_filter }, None, &a, true).lines().take(3).for_each(|l| {
                h.push_str(l);
                h.push('\n');
            });
            out.push_str(&h);
        }
        return ok(out);
    }
    out.push_str(&render(&snap, None, &a, true));
    ok(out)
}

/// Terminal rows when the output is a terminal (headings are repeated each screenful).
fn terminal_height() -> Option<usize> {
    unsafe {
        if libc::isatty(1) == 0 {
            return None;
        }
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_row > 0 {
            return Some(ws.ws_row as usize);
        }
    }
    None
}

/// `zpool iostat ... interval [count]` in the client: a report every interval, each the
/// difference from the last snapshot, until `count` reports or the user stops it.
/// `request` asks the daemon (argv without the program name) and gives its answer.
pub fn run_interval(args: &[String], request: &dyn Fn(&[String]) -> Result<(String, String, i32), String>) -> i32 {
    use std::io::Write as _;
    let a = match parse(args) {
        Ok(a) => a,
        Err((o, e, c)) => {
            print!("{o}");
            eprint!("{e}");
            return c;
        }
    };
    let mut argv: Vec<String> = vec!["zpool".into(), "iostat".into(), SNAPSHOT_ARG.into()];
    argv.extend(args.iter().cloned());
    let mut prev: Option<Snapshot> = None;
    let mut iteration = 0u64;
    let mut left = a.count;
    let mut headers_once = a.headers_once;
    loop {
        let snap = match request(&argv) {
            Ok((out, _, 0)) => match serde_json::from_str::<Snapshot>(&out) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("bad reply from the daemon: {e}");
                    return 1;
                }
            },
            Ok((o, e, c)) => {
                print!("{o}");
                eprint!("{e}");
                return c;
            }
            Err(e) => {
                eprintln!("cannot reach the oxzfs daemon: {e}");
                return 1;
            }
        };
        let mut out = String::new();
        if snap.pools.is_empty() {
            eprintln!("no pools available");
        } else {
            let skip = a.omit_since_boot && iteration == 0;
            let height = terminal_height();
            if height.is_none() {
                headers_once = true;
            }
            if let Some(t) = a.timestamp {
                out.push_str(&timestamp(t));
            }
            iteration += 1;
            let verbose = a.verbose || snap.vdev_filter;
            let header = (iteration == 1 && !skip) || (skip != verbose) || (!headers_once && height.is_some_and(|h| iteration % h as u64 == 0));
            if skip {
                if header && !a.histo() && !a.scripted {
                    out.extend(render(&Snapshot { pools: Vec::new(), vdev_filter: snap.vdev_filter }, None, &a, true).lines().take(3).map(|l| format!("{l}\n")));
                }
            } else {
                out.push_str(&render(&snap, prev.as_ref(), &a, header));
            }
        }
        print!("{out}");
        let _ = std::io::stdout().flush();
        let skipped = a.omit_since_boot && iteration == 1;
        prev = Some(snap);
        // (-y: the report left out is not one of the `count`, as in OpenZFS's loop.)
        if left != 0 && !skipped {
            left -= 1;
            if left == 0 {
                return 0;
            }
        }
        std::thread::sleep(std::time::Duration::from_secs_f64(a.interval));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn interval_and_count_come_off_the_end() {
        let a = parse(&args("-v tank 2 5")).unwrap();
        assert_eq!((a.interval, a.count, a.operands.clone()), (2.0, 5, vec!["tank".to_string()]));
        let a = parse(&args("tank 0.5")).unwrap();
        assert_eq!((a.interval, a.count), (0.5, 0));
        assert_eq!(parse(&args("tank 0")).unwrap_err().1.lines().next(), Some("interval cannot be zero"));
        assert_eq!(parse(&args("-w -l")).unwrap_err().1.lines().next(), Some("[-r|-w] isn't allowed with [-c|-l|-q]"));
        assert_eq!(parse(&args("-w -r")).unwrap_err().1.lines().next(), Some("Only one of [-r|-w] can be passed at a time"));
    }

    #[test]
    fn headings_as_openzfs_centres_them() {
        let a = Args { latency: true, ..Default::default() };
        let cx = Ctx { a: &a, groups: groups(&a), namewidth: 10, title: "pool" };
        let mut s = String::new();
        cx.header(&mut s, 0, None);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "              capacity     operations     bandwidth    total_wait     disk_wait    syncq_wait    asyncq_wait  scrub   trim");
        assert_eq!(lines[1], "pool        alloc   free   read  write   read  write   read  write   read  write   read  write   read  write   wait   wait");
        assert_eq!(lines[2], "----------  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----");
    }

    #[test]
    fn histogram_average_uses_bucket_midpoints() {
        let mut h = vec![0; L_HISTO_BUCKETS];
        h[10] = 2; // 1024..2047 ns: midpoint 1536
        h[20] = 1; // midpoint 1572864
        assert_eq!(histo_average(&h), (2 * 1536 + 1572864) / 3);
        assert_eq!(histo_average(&[0; 4]), 0);
    }
}
