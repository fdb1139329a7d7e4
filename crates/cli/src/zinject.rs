//! `oxzfs zinject`: device fault injection with OpenZFS's zinject syntax, output and messages
//! (the handlers live in the daemon, see `oxzfs::vdev::inject`).
//!
//!   zinject                       list the handlers
//!   zinject -c <id|all>           remove one, or all
//!   zinject -d device [-e io|nxio|corrupt] [-T read|write|free|claim|all] [-f frequency] [-q] pool
//!   zinject -d device -D latency:lanes pool   every I/O of the device takes latency ms, lanes
//!                                             of them at a time
//!
//!   zinject -t data [-e io|checksum] [-a] [-q] PATH   every read of the file's level-0
//!                                             blocks fails (its dataset's objset, its object)
//!
//! Other targets of -t (MOS objects), bookmarks (-b), label (-L), action (-A), panic (-p) and
//! ignored-write (-I) injection are OpenZFS's kernel hooks into places oxzfs does not have;
//! they are refused by name.
//!
//!   zinject -a                                 the ARC flushed (every pool's blocks), nothing
//!                                              else; with -d or -t, after the handler is
//!                                              added: the next read of any block goes to the
//!                                              disks, where a device handler meets it

use crate::verb::{fail, ok, usage, Out, State};
use oxzfs::vdev::inject::{self, DataTarget, DevError, Handler, IoType};
use oxzfs::vdev::Vdev;
use std::fmt::Write;
use std::sync::Arc;

const USAGE: &str = "usage:\n\n\tzinject\n\n\t\tList all active injection records.\n\n\tzinject -c <id|all>\n\n\t\tClear the particular record (if given a numeric ID), or\n\t\tall records if 'all' is specified.\n\n\tzinject -d device [-e errno] [-T <read|write|free|claim|all>] [-f frequency] pool\n\n\t\tInject a fault into a particular device.\n\t\t'errno' can be 'nxio' (the default), 'io', or\n\t\t'corrupt' (bit flip).\n\t\t'frequency' is a value between 0.0001 and 100.0 that limits\n\t\tdevice error injection to a percentage of the IOs.\n\n\tzinject -d device -D latency:lanes pool\n\n\t\tAdd an artificial delay to IO requests on a particular\n\t\tdevice, such that the requests take a minimum of 'latency'\n\t\tmilliseconds to complete. Each delay has an associated\n\t\tnumber of 'lanes' which defines the number of concurrent\n\t\tIO requests that can be processed.\n\n\tzinject -t data [-e errno] [-a] [-q] path\n\n\t\tInject an error into the data blocks of the file at 'path'\n\t\t(a full path). 'errno' can be 'io' (the default) or\n\t\t'checksum'.\n\n\t\t-a\tFlush the ARC cache.  Can be specified without any\n\t\t\tassociated object.";

fn find_leaf<'a>(v: &'a Arc<Vdev>, name: &str) -> Option<&'a Arc<Vdev>> {
    if v.is_leaf() && (v.display_name() == name || v.path.as_deref() == Some(name) || v.guid.to_string() == name || format!("{:x}", v.guid) == name) {
        return Some(v);
    }
    v.children.iter().find_map(|c| find_leaf(c, name))
}

crate::opts::verb_opts!(
    /// zinject's options. The letters of OpenZFS's kernel-only injections (-A -b -C -F -g -I
    /// -l -L -m -p -r -s -u) are taken only to be refused by name.
    ZinjectOpts {
    #[arg(short = 'h')]
    help: bool,
    #[arg(short = 'q')]
    quiet: bool,
    #[arg(short = 'a')]
    arc_too: bool,
    #[arg(short = 'c')]
    cancel: Vec<String>,
    #[arg(short = 'd')]
    device: Vec<String>,
    #[arg(short = 't')]
    target: Vec<String>,
    #[arg(short = 'e')]
    error: Vec<String>,
    #[arg(short = 'T')]
    iotype: Vec<String>,
    #[arg(short = 'f')]
    frequency: Vec<String>,
    #[arg(short = 'D')]
    delay: Vec<String>,
    #[arg(short = 'A')]
    k_a: bool,
    #[arg(short = 'b')]
    k_b: bool,
    #[arg(short = 'C')]
    k_c: bool,
    #[arg(short = 'F')]
    k_f: bool,
    #[arg(short = 'g')]
    k_g: bool,
    #[arg(short = 'I')]
    k_i: bool,
    #[arg(short = 'l')]
    k_l: bool,
    #[arg(short = 'L')]
    k_ll: bool,
    #[arg(short = 'm')]
    k_m: bool,
    #[arg(short = 'p')]
    k_p: bool,
    #[arg(short = 'r')]
    k_r: bool,
    #[arg(short = 's')]
    k_s: bool,
    #[arg(short = 'u')]
    k_u: bool,
});

pub fn zinject(st: &mut State, args: &[String]) -> Out {
    let o: ZinjectOpts = match crate::opts::parse(args) {
        Ok(o) => o,
        Err(e) => {
            // zinject's own wording of a missing value.
            let e = match e.strip_prefix("missing argument for '") {
                Some(rest) => format!("option -{} requires an operand", rest.split('\'').next().unwrap_or("?")),
                None => e,
            };
            return usage(format!("{e}\n{USAGE}"));
        }
    };
    if o.help {
        return usage(USAGE);
    }
    let kernel_only = [(o.k_a, 'A'), (o.k_b, 'b'), (o.k_c, 'C'), (o.k_f, 'F'), (o.k_g, 'g'), (o.k_i, 'I'), (o.k_l, 'l'), (o.k_ll, 'L'), (o.k_m, 'm'), (o.k_p, 'p'), (o.k_r, 'r'), (o.k_s, 's'), (o.k_u, 'u')];
    if let Some((_, c)) = kernel_only.iter().find(|(given, _)| *given) {
        return fail(format!("option -{c}: oxzfs injects device faults and delays (-d device [-e] [-T] [-f], -d device -D latency:lanes) and data errors into files (-t data [-e] PATH) only"));
    }
    let (cancel, device, target, quiet, operands) = (o.cancel.last().cloned(), o.device.last().cloned(), o.target.last().cloned(), o.quiet, o.operands.clone());
    let error_given = o.error.last().map(|v| v.to_ascii_lowercase());
    let mut error = DevError::Nxio;
    if let (None, Some(v)) = (&target, &error_given) {
        error = match v.as_str() {
            "io" => DevError::Io,
            "nxio" => DevError::Nxio,
            "corrupt" => DevError::Corrupt,
            "checksum" => return fail("device error type must be 'io', 'nxio' or 'corrupt'"),
            _ => return usage(format!("invalid error type '{v}': must be 'io', 'checksum' or 'nxio'\n{USAGE}")),
        };
    }
    let mut iotype = IoType::All;
    if let Some(v) = o.iotype.last().map(|v| v.to_ascii_lowercase()) {
        iotype = match v.as_str() {
            "read" => IoType::Read,
            "write" => IoType::Write,
            "free" => IoType::Free,
            "claim" => IoType::Claim,
            "all" => IoType::All,
            _ => return usage(format!("invalid I/O type '{v}': must be 'read', 'write', 'free', 'claim' or 'all'\n{USAGE}")),
        };
    }
    let mut freq = 0u32;
    if let Some(v) = o.frequency.last() {
        freq = match v.parse::<f64>() {
            Ok(p) if (0.0001..=100.0).contains(&p) => ((p / 100.0 * 1e6) as u32).max(1),
            Ok(_) => return fail("out of range: frequency value must be in the range [0.0001, 100.0]"),
            Err(_) => return fail("invalid value: frequency value must be in the range [0.0001, 100.0]"),
        };
    }
    let (mut delay_ns, mut lanes) = (0u64, 0u64);
    if let Some(v) = o.delay.last() {
        // parse_delay: "%lu:%lu", a latency of zero refused.
        match v.split_once(':').map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>())) {
            Some((Ok(ms), Ok(n))) if ms != 0 => (delay_ns, lanes) = (ms.saturating_mul(1_000_000), n),
            _ => return usage(format!("invalid i/o delay value: '{v}'\n{USAGE}")),
        }
    }
    if let Some(c) = cancel {
        if device.is_some() || freq > 0 {
            return usage(format!("cancel (-c) incompatible with any other options\n{USAGE}"));
        }
        if !operands.is_empty() {
            return usage(format!("extraneous argument to '-c'\n{USAGE}"));
        }
        if c == "all" {
            inject::clear_all();
            return ok("removed all registered handlers\n".into());
        }
        return match c.parse::<u64>() {
            Ok(id) if inject::clear(id) => ok(format!("removed handler {id}\n")),
            Ok(id) => fail(format!("failed to remove handler {id}: No such file or directory")),
            Err(_) => fail(format!("invalid handle id '{c}': must be an integer or 'all'")),
        };
    }
    if let Some(t) = target {
        if device.is_some() {
            return usage(format!("-t and -d are incompatible\n{USAGE}"));
        }
        return flushed(st, o.arc_too, data_handler(st, &t, error_given.as_deref(), &operands, quiet));
    }
    let Some(dev) = device else {
        if args.is_empty() {
            return list();
        }
        if o.arc_too {
            // zinject -a: the ARC flushed, no handler (ZINJECT_NULL), nothing printed.
            if !operands.is_empty() {
                return usage(format!("extraneous argument for '-f'\n{USAGE}"));
            }
            return flushed(st, true, ok(String::new()));
        }
        return usage(format!("at least one of '-b', '-d', '-t', '-a', '-p', '-I' or '-u' must be specified\n{USAGE}"));
    };
    if operands.len() != 1 {
        return usage(format!("device (-d) injection requires a single pool name\n{USAGE}"));
    }
    if error == DevError::Corrupt && (freq == 0 || iotype != IoType::Read) {
        return fail("device corrupt errors require io type read and a frequency value");
    }
    let pool = &operands[0];
    let Some(imp) = st.pools.get(pool) else {
        return fail(format!("cannot open '{pool}': no such pool"));
    };
    let Some(leaf) = find_leaf(&imp.pool.spa.root_vdev, &dev) else {
        return fail(format!("cannot find device '{dev}' in pool '{pool}'"));
    };
    let guid = leaf.guid;
    let id = inject::add(Handler { id: 0, pool: pool.clone(), guid, error, iotype, freq_ppm: freq, delay_ns, lanes, data: None });
    let out = if quiet { format!("{id}\n") } else { format!("Added handler {id} with the following properties:\n  pool: {pool}\n  vdev: {guid:x}\n") };
    flushed(st, o.arc_too, ok(out))
}

/// ZINJECT_FLUSH_ARC: with -a, once the command succeeded, the ARC drops every pool's blocks
/// (arc_flush(NULL)), so the next read of any block goes to the disks.
fn flushed(st: &State, arc_too: bool, out: Out) -> Out {
    if arc_too && out.2 == 0 {
        if let Some(imp) = st.pools.values().next() {
            imp.pool.spa.arc.flush(None);
        }
    }
    out
}

/// `zinject -t data [-e io|checksum] PATH`: a handler failing every level-0 block of the file
/// at PATH (a full path in a mounted dataset of an imported pool).
fn data_handler(st: &State, target: &str, error: Option<&str>, operands: &[String], quiet: bool) -> Out {
    const TYPES: [&str; 9] = ["data", "dnode", "mos", "mosdir", "metaslab", "config", "bpobj", "spacemap", "errlog"];
    if !TYPES.contains(&target) {
        return usage(format!("invalid type '{target}'\n{USAGE}"));
    }
    if target != "data" {
        return fail(format!("-t {target}: oxzfs injects data errors into files only (-t data)"));
    }
    let error = match error {
        None | Some("io") => DevError::Io,
        Some("checksum") => DevError::Corrupt,
        Some(e) => return usage(format!("invalid error type '{e}': must be 'io' or 'checksum' for data\n{USAGE}")),
    };
    let [path] = operands else {
        return usage(format!("the '-t' option requires exactly one argument\n{USAGE}"));
    };
    if !path.starts_with('/') {
        return fail(format!("invalid object '{path}': must be full path"));
    }
    // The mounted dataset holding PATH: the longest mountpoint it lies under (parse_pathname).
    let p = std::path::Path::new(path);
    let found = st.pools.iter().flat_map(|(name, imp)| imp.mounts.iter().map(move |m| (name, imp, m))).filter(|(_, _, m)| p.starts_with(&m.mountpoint)).max_by_key(|(_, _, m)| m.mountpoint.components().count());
    let Some((pool, imp, m)) = found else {
        return fail(format!("cannot find mountpoint for '{path}'"));
    };
    let md = match std::fs::metadata(p) {
        Ok(md) => md,
        Err(e) => return fail(format!("cannot open '{path}': {e}")),
    };
    use std::os::unix::fs::MetadataExt;
    // FUSE inode 1 is the dataset's root directory (its object is not the inode number).
    if md.ino() == 1 {
        return fail(format!("invalid path '{path}': the root of a file system"));
    }
    let Some(objset) = imp.pool.datasets().ok().and_then(|ds| ds.into_iter().find(|d| d.name == m.dataset)).map(|d| d.ds_obj) else {
        return fail(format!("cannot open '{}': dataset does not exist", m.dataset));
    };
    let object = md.ino();
    let data = DataTarget { objset, object, level: 0, start: 0, end: u64::MAX };
    let id = inject::add(Handler { id: 0, pool: pool.clone(), guid: 0, error, iotype: IoType::Read, freq_ppm: 0, delay_ns: 0, lanes: 0, data: Some(data) });
    if quiet {
        return ok(format!("{id}\n"));
    }
    ok(format!("Added handler {id} with the following properties:\n  pool: {pool}\nobjset: {objset}\nobject: {object}\n  type: 0\n level: 0\n range: all\n  dvas: 0x0\n"))
}

fn list() -> Out {
    let hs = inject::list();
    if hs.is_empty() {
        return ok("No handlers registered.\nRun 'zinject -h' for usage information.\n".into());
    }
    // print_all_handlers: the device faults, then the delays, each table followed by a blank line.
    let mut out = String::new();
    let (data, hs): (Vec<_>, Vec<_>) = hs.into_iter().partition(|h| h.data.is_some());
    let (faults, delays): (Vec<_>, Vec<_>) = hs.into_iter().partition(|h| h.delay_ns == 0);
    if !faults.is_empty() {
        let _ = write!(out, "{:>3}  {:<15}  {}\n---  ---------------  ----------------\n", "ID", "POOL", "GUID");
        for h in faults {
            let _ = writeln!(out, "{:>3}  {:<15}  {:x}", h.id, h.pool, h.guid);
        }
        out.push('\n');
    }
    if !delays.is_empty() {
        let _ = writeln!(out, "{:>3}  {:<15}  {:<15}  {:<15}  {}", "ID", "POOL", "DELAY (ms)", "LANES", "GUID");
        let _ = writeln!(out, "---  ---------------  ---------------  ---------------  ----------------");
        for h in delays {
            let _ = writeln!(out, "{:>3}  {:<15}  {:<15}  {:<15}  {:x}", h.id, h.pool, h.delay_ns / 1_000_000, h.lanes, h.guid);
        }
        out.push('\n');
    }
    if !data.is_empty() {
        let _ = writeln!(out, "{:>3}  {:<15}  {:<6}  {:<6}  {:<8}  {:>3}  {:<4}  {:<15}", "ID", "POOL", "OBJSET", "OBJECT", "TYPE", "LVL", "DVAs", "RANGE");
        let _ = writeln!(out, "---  ---------------  ------  ------  --------  ---  ----  ---------------");
        for h in data {
            let Some(d) = h.data else { continue };
            let range = if d.start == 0 && d.end == u64::MAX { "all".to_string() } else { format!("[{}, {}]", d.start, d.end) };
            let _ = writeln!(out, "{:>3}  {:<15}  {:<6}  {:<6}  {:<8}  {:<3}  0x{:02x}  {range}", h.id, h.pool, d.objset, d.object, "-", d.level, 0);
        }
        out.push('\n');
    }
    ok(out)
}
