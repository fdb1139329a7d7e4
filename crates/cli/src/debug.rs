//! `oxzfs debug`: commands that damage an exported pool on purpose, for the tests of how a
//! damaged pool is met. They write through the engine (checksums right), without the daemon.
//!
//!   debug damage-space-map -d DIR POOL    one sector the first metaslab's space map holds
//!                                         allocated is allocated again in a new entry

use std::path::PathBuf;

const USAGE: &str = "usage: oxzfs debug damage-space-map -d DIR POOL";

pub fn main(args: &[String]) -> i32 {
    let (Some("damage-space-map"), Some("-d"), Some(dir), Some(pool), None) =
        (args.first().map(|s| s.as_str()), args.get(1).map(|s| s.as_str()), args.get(2), args.get(3), args.get(4))
    else {
        eprintln!("{USAGE}");
        return 2;
    };
    let run = || -> oxzfs::Result<String> {
        let scan = oxzfs::spa::scan(&[PathBuf::from(dir)]);
        let mut pw = oxzfs::dsl_pool::PoolW::open(oxzfs::spa::choose(&scan, pool)?, 64 << 20, "oxzfs-debug")?;
        pw.fs_init = oxzfs::zplw::init_fs;
        let what = pw.damage_space_map_for_test()?;
        pw.export()?;
        Ok(what)
    };
    match run() {
        Ok(what) => {
            println!("{what}");
            0
        }
        Err(e) => {
            eprintln!("cannot damage '{pool}': {e}");
            1
        }
    }
}
