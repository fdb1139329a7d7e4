//! `oxzfs zinject`: device fault injection with OpenZFS's zinject syntax, output and messages
//! (the handlers live in the daemon, see `oxzfs::vdev::inject`).
//!
//!   zinject                       list the handlers
//!   zinject -c <id|all>           remove one, or all
//!   zinject -d device [-e io|nxio|corrupt] [-T read|write|free|claim|all] [-f frequency] [-q] pool
//!   zinject -d device -D latency:lanes pool   every I/O of the device takes latency ms, lanes
//!                                             of them at a time
//!
//! Data (-t/-b), label (-L), action (-A), panic (-p) and ignored-write (-I)
//! injection are OpenZFS's kernel hooks into places oxzfs does not have; they are refused by
//! name.

use crate::verb::{fail, ok, usage, Out, State};
use oxzfs::vdev::inject::{self, DevError, Handler, IoType};
use oxzfs::vdev::Vdev;
use std::fmt::Write;
use std::sync::Arc;

const USAGE: &str = "usage:\n\n\tzinject\n\n\t\tList all active injection records.\n\n\tzinject -c <id|all>\n\n\t\tClear the particular record (if given a numeric ID), or\n\t\tall records if 'all' is specified.\n\n\tzinject -d device [-e errno] [-T <read|write|free|claim|all>] [-f frequency] pool\n\n\t\tInject a fault into a particular device.\n\t\t'errno' can be 'nxio' (the default), 'io', or\n\t\t'corrupt' (bit flip).\n\t\t'frequency' is a value between 0.0001 and 100.0 that limits\n\t\tdevice error injection to a percentage of the IOs.\n\n\tzinject -d device -D latency:lanes pool\n\n\t\tAdd an artificial delay to IO requests on a particular\n\t\tdevice, such that the requests take a minimum of 'latency'\n\t\tmilliseconds to complete. Each delay has an associated\n\t\tnumber of 'lanes' which defines the number of concurrent\n\t\tIO requests that can be processed.";

fn find_leaf<'a>(v: &'a Arc<Vdev>, name: &str) -> Option<&'a Arc<Vdev>> {
    if v.is_leaf() && (v.display_name() == name || v.path.as_deref() == Some(name) || v.guid.to_string() == name || format!("{:x}", v.guid) == name) {
        return Some(v);
    }
    v.children.iter().find_map(|c| find_leaf(c, name))
}

pub fn zinject(st: &mut State, args: &[String]) -> Out {
    let (mut cancel, mut device, mut error, mut iotype, mut freq, mut quiet) = (None, None, DevError::Nxio, IoType::All, 0u32, false);
    let (mut delay_ns, mut lanes) = (0u64, 0u64);
    let mut operands = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(flag) = a.strip_prefix('-').filter(|f| f.len() == 1) else {
            operands.push(a.clone());
            continue;
        };
        let c = flag.chars().next().unwrap_or('?');
        let mut value = |c: char| it.next().cloned().ok_or_else(|| usage(format!("option -{c} requires an operand\n{USAGE}")));
        match c {
            'h' => return usage(USAGE),
            'q' => quiet = true,
            'c' => match value(c) {
                Ok(v) => cancel = Some(v),
                Err(e) => return e,
            },
            'd' => match value(c) {
                Ok(v) => device = Some(v),
                Err(e) => return e,
            },
            'e' => match value(c).map(|v| v.to_ascii_lowercase()) {
                Ok(v) => {
                    error = match v.as_str() {
                        "io" => DevError::Io,
                        "nxio" => DevError::Nxio,
                        "corrupt" => DevError::Corrupt,
                        "checksum" => return fail("device error type must be 'io', 'nxio' or 'corrupt'"),
                        _ => return usage(format!("invalid error type '{v}': must be 'io', 'checksum' or 'nxio'\n{USAGE}")),
                    }
                }
                Err(e) => return e,
            },
            'T' => match value(c).map(|v| v.to_ascii_lowercase()) {
                Ok(v) => {
                    iotype = match v.as_str() {
                        "read" => IoType::Read,
                        "write" => IoType::Write,
                        "free" => IoType::Free,
                        "claim" => IoType::Claim,
                        "all" => IoType::All,
                        _ => return usage(format!("invalid I/O type '{v}': must be 'read', 'write', 'free', 'claim' or 'all'\n{USAGE}")),
                    }
                }
                Err(e) => return e,
            },
            'f' => match value(c) {
                Ok(v) => match v.parse::<f64>() {
                    Ok(p) if (0.0001..=100.0).contains(&p) => freq = ((p / 100.0 * 1e6) as u32).max(1),
                    Ok(_) => return fail("out of range: frequency value must be in the range [0.0001, 100.0]"),
                    Err(_) => return fail("invalid value: frequency value must be in the range [0.0001, 100.0]"),
                },
                Err(e) => return e,
            },
            'D' => match value(c) {
                // parse_delay: "%lu:%lu", a latency of zero refused.
                Ok(v) => match v.split_once(':').map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>())) {
                    Some((Ok(ms), Ok(n))) if ms != 0 => (delay_ns, lanes) = (ms.saturating_mul(1_000_000), n),
                    _ => return usage(format!("invalid i/o delay value: '{v}'\n{USAGE}")),
                },
                Err(e) => return e,
            },
            'a' | 'A' | 'b' | 'C' | 'F' | 'g' | 'I' | 'l' | 'L' | 'm' | 'p' | 'r' | 's' | 't' | 'u' => {
                return fail(format!("option -{c}: oxzfs injects device faults and delays only (-d device [-e] [-T] [-f], -d device -D latency:lanes)"));
            }
            _ => return usage(format!("invalid option '{c}'\n{USAGE}")),
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
    let Some(dev) = device else {
        if args.is_empty() {
            return list();
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
    let id = inject::add(Handler { id: 0, pool: pool.clone(), guid, error, iotype, freq_ppm: freq, delay_ns, lanes });
    if quiet {
        return ok(format!("{id}\n"));
    }
    ok(format!("Added handler {id} with the following properties:\n  pool: {pool}\n  vdev: {guid:x}\n"))
}

fn list() -> Out {
    let hs = inject::list();
    if hs.is_empty() {
        return ok("No handlers registered.\nRun 'zinject -h' for usage information.\n".into());
    }
    // print_all_handlers: the device faults, then the delays, each table followed by a blank line.
    let mut out = String::new();
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
    ok(out)
}
