//! `oxzfs zdb`: the command line of OpenZFS's zdb, for what oxzfs answers of it.
//!
//!   zdb -e -p DIR [-p DIR]... [-b|-bb|-bbb] [-c|-cc] [-d] [-K KEY] POOL
//!                                 block statistics, checksum verification (with -K, encrypted
//!                                 blocks decrypted and their MACs checked), datasets
//!   zdb -C -U FILE                                                a cache file's configs
//!
//! The pool is opened read-only from its devices, without the daemon (oxzfs::traverse). zdb
//! words its usage errors as glibc's getopt does ("invalid option -- 'x'").

use crate::opts::{parse, verb_opts};
use std::path::PathBuf;

verb_opts!(
    /// zdb's options. Those of OpenZFS's zdb that change nothing here (-L, -P, -A, -F, -X,
    /// -s, -v, -V) are taken and ignored, so command lines written for zdb run.
    ZdbOpts {
    #[arg(short = 'b', action = clap::ArgAction::Count)]
    blocks: u8,
    #[arg(short = 'c', action = clap::ArgAction::Count)]
    checksums: u8,
    #[arg(short = 'd', action = clap::ArgAction::Count)]
    datasets: u8,
    #[arg(short = 'e')]
    exported: bool,
    #[arg(short = 'C')]
    config: bool,
    #[arg(short = 'U')]
    cachefile: Vec<String>,
    #[arg(short = 'p')]
    dirs: Vec<String>,
    #[arg(short = 'L')]
    no_leak_check: bool,
    #[arg(short = 'P')]
    parsable: bool,
    #[arg(short = 'A', action = clap::ArgAction::Count)]
    ignore_assertions: u8,
    #[arg(short = 'F')]
    rewind: bool,
    #[arg(short = 'X')]
    extreme_rewind: bool,
    #[arg(short = 's')]
    io_stats: bool,
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    #[arg(short = 'V')]
    verbatim: bool,
    #[arg(short = 'K')]
    key: Option<String>,
});

fn usage(msg: &str) -> i32 {
    eprintln!("zdb: {msg}");
    eprintln!("Usage: oxzfs zdb -e -p DIR [-b|-bb] [-c|-cc] [-d] [-K KEY] POOL");
    2
}

/// Run zdb with the words after `zdb`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let o: ZdbOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            // getopt's own wording, as zdb leaves it to print.
            let e = match (e.strip_prefix("invalid option '"), e.strip_prefix("missing argument for '")) {
                (Some(rest), _) => format!("invalid option -- '{}'", rest.trim_end_matches('\'')),
                (_, Some(rest)) => format!("option requires an argument -- '{}'", rest.split('\'').next().unwrap_or("?")),
                _ => e,
            };
            return usage(&e);
        }
    };
    // Operands after the pool (zdb -d POOL OBJ...: object numbers) are accepted, not used.
    let pool = o.operands.first().cloned();
    if o.config && pool.is_none() {
        // zdb -C [-U FILE]: the cache file, as dump_cachefile prints it.
        let Some(file) = o.cachefile.last().map(PathBuf::from) else { return usage("oxzfs zdb -C needs -U FILE (no default cache file)") };
        return match std::fs::read(&file).map_err(|e| e.to_string()).and_then(|b| oxzfs_format::nvlist::NvList::decode_packed(&b).map_err(|e| e.to_string())) {
            Ok(nvl) => {
                print!("{}", nvl.fmt_tree());
                0
            }
            Err(e) => {
                eprintln!("zdb: cannot read cache file '{}': {e}", file.display());
                1
            }
        };
    }
    let Some(pool) = pool else { return usage("missing pool name") };
    if !o.exported {
        eprintln!("zdb: only exported pools are supported; use -e -p DIR");
        return 2;
    }
    oxzfs::traverse::zdb_pool(&oxzfs::traverse::ZdbRequest {
        dirs: o.dirs.iter().map(PathBuf::from).collect(),
        pool,
        b: o.blocks.into(),
        c: o.checksums.into(),
        d: o.datasets.into(),
        key: o.key.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn zdb_command_lines() {
        let o: ZdbOpts = parse(&v(&["-bcc", "-e", "-p", "/a", "-p/b", "-L", "tank"])).unwrap();
        assert_eq!((o.blocks, o.checksums, o.datasets, o.exported), (1, 2, 0, true));
        assert_eq!(o.dirs, vec!["/a", "/b"]);
        assert_eq!(o.operands, vec!["tank"]);
        assert_eq!(main(&v(&["-Z"])), 2);
        assert_eq!(main(&v(&["-e", "-p"])), 2);
        assert_eq!(main(&v(&["-e"])), 2);
    }
}
