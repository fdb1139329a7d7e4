//! `oxzfs arc_summary [-a] [-d] [-g] [-r] [-s SECTION] [-p PAGE]`: the ARC's and L2ARC's
//! statistics as OpenZFS's arc_summary script words and lays them out (72 columns, its
//! number formats), read from the same counters as `oxzfs arcstats`.
//!
//! Sections: arc, archits, dmu (the prefetcher's zfetchstats), l2arc, tunables, vdev (oxzfs
//! has no vdev cache: the section says so, as OpenZFS's does with the cache disabled), zil.
//! OpenZFS's spl section reads the kernel porting layer's module parameters, which oxzfs does
//! not have: left out, and asked for by name it says the data is not available.

use crate::verb::{fail, ok, usage, Out};
use std::collections::BTreeMap;
use std::fmt::Write;

const INDENT: &str = "        ";
const LINE_LENGTH: usize = 72;
const SECTIONS: [&str; 8] = ["arc", "archits", "dmu", "l2arc", "spl", "tunables", "vdev", "zil"];
const USAGE: &str = "usage: oxzfs arc_summary [-h] [-a] [-d] [-g] [-p PAGE] [-r] [-s SECTION]";

/// f_bytes: powers of two, one decimal ("12.3 MiB", "512 Bytes").
fn f_bytes(b: u64) -> String {
    const UNITS: [(u32, &str); 6] = [(60, "EiB"), (50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    if b < 1024 {
        return format!("{b} Bytes");
    }
    let (shift, unit) = UNITS.iter().find(|(s, _)| b >= 1u64 << s).copied().unwrap_or((10, "KiB"));
    format!("{:.1} {unit}", b as f64 / (1u64 << shift) as f64)
}

/// f_hits: SI prefixes, one decimal ("1.2k", "3.4M").
fn f_hits(h: u64) -> String {
    const UNITS: [(u64, &str); 6] = [(1_000_000_000_000_000_000, "E"), (1_000_000_000_000_000, "P"), (1_000_000_000_000, "T"), (1_000_000_000, "G"), (1_000_000, "M"), (1000, "k")];
    if h < 1000 {
        return h.to_string();
    }
    let (limit, sym) = UNITS.iter().find(|(l, _)| h >= *l).copied().unwrap_or((1000, "k"));
    format!("{:.1}{sym}", h as f64 / limit as f64)
}

/// f_perc: "12.3 %", "< 0.1 %" for a small non-zero share, "n/a" over zero.
fn f_perc(a: u64, b: u64) -> String {
    if b == 0 {
        return "n/a".into();
    }
    let r = format!("{:.1} %", 100.0 * a as f64 / b as f64);
    if r == "0.0 %" && a > 0 {
        "< 0.1 %".into()
    } else {
        r
    }
}

struct Report {
    out: String,
}

impl Report {
    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        self.out.push('\n');
    }
    fn prt_1(&mut self, text: &str, value: &str) {
        let spc = LINE_LENGTH.saturating_sub(text.len() + value.len());
        let _ = writeln!(self.out, "{text}{}{value}", " ".repeat(spc));
    }
    fn prt_i1(&mut self, text: &str, value: &str) {
        let spc = LINE_LENGTH.saturating_sub(INDENT.len() + text.len() + value.len());
        let _ = writeln!(self.out, "{INDENT}{text}{}{value}", " ".repeat(spc));
    }
    fn prt_2(&mut self, text: &str, v1: &str, v2: &str) {
        let values = format!("{v1:>9}  {v2:>9}");
        let spc = LINE_LENGTH.saturating_sub(text.len() + values.len() + 2);
        let _ = writeln!(self.out, "{text}{}  {values}", " ".repeat(spc));
    }
    fn prt_i2(&mut self, text: &str, v1: &str, v2: &str) {
        let values = format!("{v1:>9}  {v2:>9}");
        let spc = LINE_LENGTH.saturating_sub(INDENT.len() + text.len() + values.len() + 2);
        let _ = writeln!(self.out, "{INDENT}{text}{}  {values}", " ".repeat(spc));
    }
    /// format_raw_line: the value right-aligned to the line, or after one space.
    fn raw(&mut self, name: &str, value: &str, alt: bool) {
        if alt {
            let _ = writeln!(self.out, "{INDENT}{name}={value}");
        } else {
            let w = (LINE_LENGTH - INDENT.len()).saturating_sub(name.len()).max(value.len() + 1);
            let _ = writeln!(self.out, "{INDENT}{name}{value:>w$}");
        }
    }
}

/// arc_summary's options, long and short as its argparse declares them.
#[derive(clap::Parser, Debug)]
#[command(no_binary_name = true, disable_help_flag = true, disable_version_flag = true, args_override_self = true)]
struct Opts {
    #[arg(short = 'a', long = "alternate")]
    alt: bool,
    #[arg(short = 'd', long = "description")]
    desc: bool,
    #[arg(short = 'g', long = "graph")]
    graph: bool,
    #[arg(short = 'r', long = "raw")]
    raw: bool,
    #[arg(short = 'h', long = "help")]
    help: bool,
    #[arg(short = 's', long = "section", allow_hyphen_values = true)]
    section: Option<String>,
    #[arg(short = 'p', long = "page", allow_hyphen_values = true)]
    page: Option<String>,
}

fn parse(args: &[String]) -> Result<Opts, Out> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::Parser;
    let mut o = Opts::try_parse_from(args).map_err(|e| {
        let arg = match e.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        // argparse's wording of the same mistakes.
        let why = match e.kind() {
            ErrorKind::InvalidValue | ErrorKind::WrongNumberOfValues | ErrorKind::TooFewValues if arg.contains("page") || arg.starts_with("-p") => "argument -p/--page: expected an integer".to_string(),
            ErrorKind::InvalidValue | ErrorKind::WrongNumberOfValues | ErrorKind::TooFewValues => "argument -s/--section: expected one argument".to_string(),
            _ => format!("unrecognized arguments: {}", arg.split('=').next().unwrap_or(&arg)),
        };
        usage(format!("{USAGE}\narc_summary: error: {why}"))
    })?;
    if o.help {
        return Err(ok(format!("{USAGE}\n")));
    }
    if let Some(p) = o.page.take() {
        let name = match p.parse::<u32>() {
            Ok(1) => "arc",
            Ok(2) => "archits",
            Ok(3) => "l2arc",
            Ok(4) => "dmu",
            Ok(5) => "vdev",
            Ok(6) => "tunables",
            Ok(p) => return Err(fail(format!("Error: Page \"{p}\" not supported"))),
            Err(_) => return Err(usage(format!("{USAGE}\narc_summary: error: argument -p/--page: expected an integer"))),
        };
        o.section = Some(name.into());
    }
    Ok(o)
}

/// The report. `stats`: the arcstats rows; `tunables`: (name, value, description).
/// The kstats the report reads, each as (name, value) rows.
#[derive(Default)]
pub struct Kstats<'a> {
    pub arcstats: &'a [(&'static str, u64)],
    pub zfetchstats: &'a [(&'static str, u64)],
    pub zil: &'a [(&'static str, u64)],
}

pub fn run(args: &[String], ks: &Kstats, tunables: &[(String, String, String)]) -> Out {
    let stats = ks.arcstats;
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let k: BTreeMap<&str, u64> = stats.iter().copied().collect();
    let g = |n: &str| k.get(n).copied().unwrap_or(0);
    let mut r = Report { out: String::new() };
    if o.graph {
        graph(&mut r, &g);
        return ok(r.out);
    }
    header(&mut r);
    if o.raw {
        // Every kstat, by name (print_raw).
        for (name, rows) in [("ARCSTATS", stats), ("ZFETCHSTATS", ks.zfetchstats), ("ZIL", ks.zil)] {
            r.line("");
            r.line(&format!("{name}:"));
            let mut rows: Vec<_> = rows.to_vec();
            rows.sort();
            for (n, v) in rows {
                r.raw(n, &v.to_string(), o.alt);
            }
        }
        r.line("");
        section_tunables(&mut r, tunables, &o);
        return ok(r.out);
    }
    let sections: Vec<&str> = match &o.section {
        Some(s) if SECTIONS.contains(&s.as_str()) => vec![s.as_str()],
        Some(s) => return (r.out, format!("Error: Section \"{s}\" unknown\n"), 1),
        None => SECTIONS.to_vec(),
    };
    for s in sections {
        match s {
            "arc" => section_arc(&mut r, &g),
            "archits" => section_archits(&mut r, &g),
            "l2arc" => section_l2arc(&mut r, &g),
            "tunables" => section_tunables(&mut r, tunables, &o),
            "vdev" => r.line("VDEV cache disabled, skipping section\n"),
            "dmu" => section_dmu(&mut r, ks.zfetchstats),
            "zil" => section_zil(&mut r, ks.zil),
            // Kept by OpenZFS's kernel module only.
            other if o.section.is_some() => return (r.out, format!("ERROR: Data on {other} not available\n"), 1),
            _ => {}
        }
    }
    ok(r.out)
}

fn header(r: &mut Report) {
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let mut buf = [0u8; 64];
    let n = unsafe {
        let t = libc::time(std::ptr::null_mut());
        libc::localtime_r(&t, &mut tm);
        libc::strftime(buf.as_mut_ptr() as *mut libc::c_char, buf.len(), c"%a %b %d %H:%M:%S %Y".as_ptr(), &tm)
    };
    let date = String::from_utf8_lossy(&buf[..n]).to_string();
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    unsafe { libc::uname(&mut u) };
    let field = |f: &[libc::c_char]| unsafe { std::ffi::CStr::from_ptr(f.as_ptr()) }.to_string_lossy().to_string();
    let version = format!("oxzfs {}", env!("CARGO_PKG_VERSION"));
    let sys = format!("{} {}", field(&u.sysname), field(&u.release));
    let machine = format!("Machine: {} ({})", field(&u.nodename), field(&u.machine));
    r.line("");
    r.line(&"-".repeat(LINE_LENGTH));
    let _ = writeln!(r.out, "{:<w$}{date}", "ZFS Subsystem Report", w = LINE_LENGTH.saturating_sub(date.len()));
    let _ = writeln!(r.out, "{sys:<w$}{version}", w = LINE_LENGTH.saturating_sub(version.len()));
    let _ = writeln!(r.out, "{machine:<w$}{version}\n", w = LINE_LENGTH.saturating_sub(version.len()));
}

fn graph(r: &mut Report, g: &dyn Fn(&str) -> u64) {
    const WIDTH: usize = 60;
    let indent = "    ";
    let c_max = g("c_max").max(1);
    let info = format!(
        "ARC: {} ({})  MFU: {}  MRU: {}  META: {} ({}) DNODE {} ({})",
        f_bytes(g("size")),
        f_perc(g("size"), g("c_max")),
        f_bytes(g("mfu_size")),
        f_bytes(g("mru_size")),
        f_bytes(g("arc_meta_used")),
        f_bytes(g("arc_meta_limit")),
        f_bytes(g("dnode_size")),
        f_bytes(g("arc_dnode_limit"))
    );
    let info = format!("{indent}{}{info}", " ".repeat(WIDTH.saturating_sub(info.len()) / 2));
    let border = format!("{indent}+{}+", "-".repeat(WIDTH - 2));
    let ticks = |v: u64| v as f64 / c_max as f64 * WIDTH as f64;
    let (mfu, mru, total) = (ticks(g("mfu_size")), ticks(g("mru_size")), ticks(g("size")));
    let core = format!("{}{}{}", "F".repeat(mfu as usize), "R".repeat(mru as usize), "O".repeat((total - (mfu + mru)).max(0.0) as usize));
    let core = format!("{indent}|{core}{}|", " ".repeat(WIDTH.saturating_sub(2 + core.len())));
    for l in ["", &info, &border, &core, &border, ""] {
        r.line(l);
    }
}

fn section_arc(r: &mut Report, g: &dyn Fn(&str) -> u64) {
    let throttle = g("memory_throttle_count");
    r.prt_1("ARC status:", if throttle == 0 { "HEALTHY" } else { "THROTTLED" });
    r.prt_i1("Memory throttle count:", &throttle.to_string());
    r.line("");
    let (size, c, c_max, c_min) = (g("size"), g("c"), g("c_max"), g("c_min"));
    let (mfu, mru) = (g("mfu_size"), g("mru_size"));
    let (meta_limit, meta, dnode_limit, dnode) = (g("arc_meta_limit"), g("arc_meta_used"), g("arc_dnode_limit"), g("dnode_size"));
    r.prt_2("ARC size (current):", &f_perc(size, c_max), &f_bytes(size));
    r.prt_i2("Target size (adaptive):", &f_perc(c, c_max), &f_bytes(c));
    r.prt_i2("Min size (hard limit):", &f_perc(c_min, c_max), &f_bytes(c_min));
    r.prt_i2("Max size (high water):", &format!("{}:1", c_max / c_min.max(1)), &f_bytes(c_max));
    // (As OpenZFS's later arc_summary shows the compressed ARC: the blocks held, compressed,
    // and the decompressed copies beside them as parts of the size; what the blocks held are
    // decompressed against the compressed size.)
    let (compressed, uncompressed, overhead) = (g("compressed_size"), g("uncompressed_size"), g("overhead_size"));
    r.prt_i2("Compressed size:", &f_perc(compressed, size), &f_bytes(compressed));
    r.prt_i2("Overhead size:", &f_perc(overhead, size), &f_bytes(overhead));
    r.prt_i2("Uncompressed size:", &f_perc(uncompressed, compressed), &f_bytes(uncompressed));
    r.prt_i2("Most Frequently Used (MFU) cache size:", &f_perc(mfu, mfu + mru), &f_bytes(mfu));
    r.prt_i2("Most Recently Used (MRU) cache size:", &f_perc(mru, mfu + mru), &f_bytes(mru));
    r.prt_i2("Metadata cache size (hard limit):", &f_perc(meta_limit, c_max), &f_bytes(meta_limit));
    r.prt_i2("Metadata cache size (current):", &f_perc(meta, meta_limit), &f_bytes(meta));
    r.prt_i2("Dnode cache size (hard limit):", &f_perc(dnode_limit, meta_limit), &f_bytes(dnode_limit));
    r.prt_i2("Dnode cache size (current):", &f_perc(dnode, dnode_limit), &f_bytes(dnode));
    r.line("");
    r.line("ARC hash breakdown:");
    r.prt_i1("Elements max:", &f_hits(g("hash_elements_max")));
    r.prt_i2("Elements current:", &f_perc(g("hash_elements"), g("hash_elements_max")), &f_hits(g("hash_elements")));
    r.prt_i1("Collisions:", &f_hits(g("hash_collisions")));
    r.prt_i1("Chain max:", &f_hits(g("hash_chain_max")));
    r.prt_i1("Chains:", &f_hits(g("hash_chains")));
    r.line("");
    r.line("ARC misc:");
    r.prt_i1("Deleted:", &f_hits(g("deleted")));
    r.prt_i1("Mutex misses:", &f_hits(g("mutex_miss")));
    r.prt_i1("Eviction skips:", &f_hits(g("evict_skip")));
    r.prt_i1("Eviction skips due to L2 writes:", &f_hits(g("evict_l2_skip")));
    r.prt_i1("L2 cached evictions:", &f_bytes(g("evict_l2_cached")));
    r.prt_i1("L2 eligible evictions:", &f_bytes(g("evict_l2_eligible")));
    r.prt_i2("L2 eligible MFU evictions:", &f_perc(g("evict_l2_eligible_mfu"), g("evict_l2_eligible")), &f_bytes(g("evict_l2_eligible_mfu")));
    r.prt_i2("L2 eligible MRU evictions:", &f_perc(g("evict_l2_eligible_mru"), g("evict_l2_eligible")), &f_bytes(g("evict_l2_eligible_mru")));
    r.prt_i1("L2 ineligible evictions:", &f_bytes(g("evict_l2_ineligible")));
    r.line("");
}

fn section_archits(r: &mut Report, g: &dyn Fn(&str) -> u64) {
    let (hits, misses) = (g("hits"), g("misses"));
    let all = hits + misses;
    let actual = g("mfu_hits") + g("mru_hits");
    r.prt_1("ARC total accesses (hits + misses):", &f_hits(all));
    for (t, v) in [("Cache hit ratio:", hits), ("Cache miss ratio:", misses), ("Actual hit ratio (MFU + MRU hits):", actual)] {
        r.prt_i2(t, &f_perc(v, all), &f_hits(v));
    }
    let dd = g("demand_data_hits") + g("demand_data_misses");
    r.prt_i2("Data demand efficiency:", &f_perc(g("demand_data_hits"), dd), &f_hits(dd));
    let dp = g("prefetch_data_hits") + g("prefetch_data_misses");
    r.prt_i2("Data prefetch efficiency:", &f_perc(g("prefetch_data_hits"), dp), &f_hits(dp));
    let known = g("mfu_hits") + g("mru_hits") + g("mfu_ghost_hits") + g("mru_ghost_hits");
    r.line("");
    r.line("Cache hits by cache type:");
    for (t, n) in [
        ("Most frequently used (MFU):", "mfu_hits"),
        ("Most recently used (MRU):", "mru_hits"),
        ("Most frequently used (MFU) ghost:", "mfu_ghost_hits"),
        ("Most recently used (MRU) ghost:", "mru_ghost_hits"),
    ] {
        r.prt_i2(t, &f_perc(g(n), hits), &f_hits(g(n)));
    }
    if hits >= known {
        r.prt_i2("Anonymously used:", &f_perc(hits - known, hits), &f_hits(hits - known));
    }
    for (title, total, kind) in [("Cache hits by data type:", hits, "hits"), ("Cache misses by data type:", misses, "misses")] {
        r.line("");
        r.line(title);
        for (t, n) in [("Demand data:", "demand_data"), ("Prefetch data:", "prefetch_data"), ("Demand metadata:", "demand_metadata"), ("Prefetch metadata:", "prefetch_metadata")] {
            let v = g(&format!("{n}_{kind}"));
            r.prt_i2(t, &f_perc(v, total), &f_hits(v));
        }
    }
    r.line("");
}

fn section_l2arc(r: &mut Report, g: &dyn Fn(&str) -> u64) {
    if g("l2_size") == 0 {
        r.line("L2ARC not detected, skipping section\n");
        return;
    }
    let errors = g("l2_writes_error") + g("l2_cksum_bad") + g("l2_io_error");
    let access = g("l2_hits") + g("l2_misses");
    r.prt_1("L2ARC status:", if errors > 0 { "DEGRADED" } else { "HEALTHY" });
    for (t, n) in [
        ("Low memory aborts:", "l2_abort_lowmem"),
        ("Free on write:", "l2_free_on_write"),
        ("R/W clashes:", "l2_rw_clash"),
        ("Bad checksums:", "l2_cksum_bad"),
        ("I/O errors:", "l2_io_error"),
    ] {
        r.prt_i1(t, &f_hits(g(n)));
    }
    r.line("");
    let (size, asize) = (g("l2_size"), g("l2_asize"));
    r.prt_1("L2ARC size (adaptive):", &f_bytes(size));
    r.prt_i2("Compressed:", &f_perc(asize, size), &f_bytes(asize));
    r.prt_i2("Header size:", &f_perc(g("l2_hdr_size"), size), &f_bytes(g("l2_hdr_size")));
    for (t, n) in [
        ("MFU allocated size:", "l2_mfu_asize"),
        ("MRU allocated size:", "l2_mru_asize"),
        ("Prefetch allocated size:", "l2_prefetch_asize"),
        ("Data (buffer content) allocated size:", "l2_bufc_data_asize"),
        ("Metadata (buffer content) allocated size:", "l2_bufc_metadata_asize"),
    ] {
        r.prt_i2(t, &f_perc(g(n), asize), &f_bytes(g(n)));
    }
    r.line("");
    r.prt_1("L2ARC breakdown:", &f_hits(access));
    r.prt_i2("Hit ratio:", &f_perc(g("l2_hits"), access), &f_hits(g("l2_hits")));
    r.prt_i2("Miss ratio:", &f_perc(g("l2_misses"), access), &f_hits(g("l2_misses")));
    r.prt_i1("Feeds:", &f_hits(g("l2_feeds")));
    r.line("");
    r.line("L2ARC writes:");
    let (sent, done) = (g("l2_writes_sent"), g("l2_writes_done"));
    if sent != done {
        r.prt_i2("Writes sent:", "FAULTED", &f_hits(sent));
        r.prt_i2("Done ratio:", &f_perc(done, sent), &f_hits(done));
        r.prt_i2("Error ratio:", &f_perc(g("l2_writes_error"), sent), &f_hits(g("l2_writes_error")));
    } else {
        r.prt_i2("Writes sent:", "100 %", &f_hits(sent));
    }
    r.line("");
    r.line("L2ARC evicts:");
    r.prt_i1("Lock retries:", &f_hits(g("l2_evict_lock_retry")));
    r.prt_i1("Upon reading:", &f_hits(g("l2_evict_reading")));
    r.line("");
}

fn kget(rows: &[(&'static str, u64)], name: &str) -> u64 {
    rows.iter().find(|(n, _)| *n == name).map_or(0, |r| r.1)
}

/// The DMU's prefetcher (zfetchstats).
fn section_dmu(r: &mut Report, zf: &[(&'static str, u64)]) {
    let (hits, misses) = (kget(zf, "hits"), kget(zf, "misses"));
    let total = hits + misses;
    r.prt_1("DMU prefetch efficiency:", &f_hits(total));
    r.prt_i2("Hit ratio:", &f_perc(hits, total), &f_hits(hits));
    r.prt_i2("Miss ratio:", &f_perc(misses, total), &f_hits(misses));
    r.line("");
}

/// The intent log (zil kstat).
fn section_zil(r: &mut Report, z: &[(&'static str, u64)]) {
    let g = |n: &str| kget(z, n);
    r.prt_1("ZIL committed transactions:", &f_hits(g("zil_itx_count")));
    r.prt_i1("Commit requests:", &f_hits(g("zil_commit_count")));
    r.prt_i1("Flushes to stable storage:", &f_hits(g("zil_commit_writer_count")));
    r.prt_i2("Transactions to SLOG storage pool:", &f_bytes(g("zil_itx_metaslab_slog_bytes")), &f_hits(g("zil_itx_metaslab_slog_count")));
    r.prt_i2("Transactions to non-SLOG storage pool:", &f_bytes(g("zil_itx_metaslab_normal_bytes")), &f_hits(g("zil_itx_metaslab_normal_count")));
    r.line("");
}

fn section_tunables(r: &mut Report, tunables: &[(String, String, String)], o: &Opts) {
    r.line("Tunables:");
    let mut t: Vec<_> = tunables.iter().collect();
    t.sort();
    for (name, value, desc) in t {
        if o.desc {
            let _ = writeln!(r.out, "{INDENT}# {desc}");
        }
        r.raw(name, value, o.alt);
    }
    r.line("");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats_are_arc_summarys() {
        assert_eq!((f_bytes(512), f_bytes(1536), f_bytes(3 << 30)), ("512 Bytes".into(), "1.5 KiB".into(), "3.0 GiB".into()));
        assert_eq!((f_hits(999), f_hits(1234), f_hits(5_600_000)), ("999".into(), "1.2k".into(), "5.6M".into()));
        assert_eq!((f_perc(1, 3), f_perc(1, 100_000), f_perc(1, 0)), ("33.3 %".into(), "< 0.1 %".into(), "n/a".into()));
    }

    #[test]
    fn lines_are_72_columns() {
        let stats = [("size", 1u64 << 20), ("c", 2 << 20), ("c_max", 4 << 20), ("c_min", 1 << 20), ("mfu_size", 1 << 19), ("mru_size", 1 << 19)];
        let (out, _, code) = run(&["-s".into(), "arc".into()], &Kstats { arcstats: &stats, ..Default::default() }, &[]);
        assert_eq!(code, 0);
        let l = out.lines().find(|l| l.starts_with("ARC size (current):")).unwrap();
        assert_eq!(l, "ARC size (current):                                    25.0 %    1.0 MiB");
        assert!(out.lines().filter(|l| l.starts_with(INDENT) && l.trim_start().starts_with("Target size")).all(|l| l.len() == 72));
        let stats = [("size", 3u64 << 20), ("compressed_size", 2 << 20), ("uncompressed_size", 8 << 20), ("overhead_size", 1 << 20), ("c_max", 4 << 20)];
        let (out, _, _) = run(&["-s".into(), "arc".into()], &Kstats { arcstats: &stats, ..Default::default() }, &[]);
        let row = |t: &str| out.lines().find(|l| l.trim_start().starts_with(t)).map(|l| l.split_whitespace().rev().take(3).collect::<Vec<_>>().join(" "));
        assert_eq!(row("Compressed size:").as_deref(), Some("MiB 2.0 %"), "{out}");
        assert_eq!(row("Overhead size:").as_deref(), Some("MiB 1.0 %"), "{out}");
        assert_eq!(row("Uncompressed size:").as_deref(), Some("MiB 8.0 %"), "{out}");
        assert!(out.contains("Uncompressed size:") && out.contains("400.0 %    8.0 MiB"), "{out}");
        let (_, err, code) = run(&["-s".into(), "nope".into()], &Kstats { arcstats: &stats, ..Default::default() }, &[]);
        assert_eq!((err.as_str(), code), ("Error: Section \"nope\" unknown\n", 1));
    }

    #[test]
    fn command_line_as_argparse_words_it() {
        let stats = [("size", 1u64 << 20), ("c", 2 << 20), ("c_max", 4 << 20), ("c_min", 1 << 20)];
        let run_s = |a: &[&str]| run(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &Kstats { arcstats: &stats, ..Default::default() }, &[]);
        let tail = |o: Out| (o.1.lines().last().unwrap_or("").to_string(), o.2);
        assert_eq!(tail(run_s(&["-s"])), ("arc_summary: error: argument -s/--section: expected one argument".into(), 2));
        assert_eq!(tail(run_s(&["-p"])), ("arc_summary: error: argument -p/--page: expected an integer".into(), 2));
        assert_eq!(tail(run_s(&["-p", "x"])), ("arc_summary: error: argument -p/--page: expected an integer".into(), 2));
        assert_eq!(tail(run_s(&["-x"])), ("arc_summary: error: unrecognized arguments: -x".into(), 2));
        assert_eq!(tail(run_s(&["bogus"])), ("arc_summary: error: unrecognized arguments: bogus".into(), 2));
        assert_eq!(run_s(&["-p", "9"]).1, "Error: Page \"9\" not supported\n");
        assert_eq!(run_s(&["-h"]), (format!("{USAGE}\n"), String::new(), 0));
        let (out, _, code) = run_s(&["--section=arc", "-r"]);
        assert_eq!(code, 0);
        assert!(!out.is_empty());
        assert_eq!(run_s(&["--page", "1"]).2, 0);
    }
}
