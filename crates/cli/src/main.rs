//! The `oxzfs` command: `oxzfs zpool …`, `oxzfs zfs …`, `oxzfs zdb …` and `oxzfs daemon …`.
//! Linked or copied under the names `zpool`, `zfs` or `zdb`, it answers to those directly.
//!
//! Pool state lives in the daemon (`oxzfsd`, run by `oxzfs daemon run`): it holds the imported
//! pools and their FUSE mounts. `zpool`/`zfs` verbs are sent to it over a unix socket
//! ($OXZFS_SOCKET, default /run/oxzfs/oxzfs.sock) as the argument vector, and its reply is the
//! command's stdout, stderr and exit status. `zdb` and `zpool import -d DIR` (listing) read the
//! devices directly, as OpenZFS's do, and `zfs project` works on the caller's files itself.

mod client;
mod commands;
mod arc_summary;
mod daemon;
mod debug;
mod iostat;
mod props;
mod table;
mod vdevspec;
mod verb;
mod zdb;
mod zinject;
mod zfs;
mod zpool;
mod mounts;
mod opts;
mod keys;
mod labelclear;
mod diff;
mod holds;
mod project;
mod userspace;
mod upgrade;
mod recv;
mod send;

use clap::ValueEnum;
use std::path::PathBuf;

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let argv0 = args.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
    if args.is_empty() {
        args.push("oxzfs".into());
    }
    if matches!(argv0.as_str(), "zpool" | "zfs" | "zdb") {
        args.insert(1, argv0);
    }
    let code = run(&args[1..]);
    std::process::exit(code);
}

fn cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// The command families: the first word picks one, which reads the rest itself.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Family {
    Zpool,
    Zfs,
    Zdb,
    Daemon,
    Tunable,
    Arcstats,
    Kstat,
    #[value(name = "arc_summary")]
    ArcSummary,
    Zinject,
    /// Damage an exported pool on purpose (tests).
    Debug,
}

const USAGE: &str = "usage: oxzfs <command> ...\n\n\tzpool import|export|status|list ...\n\tzfs list|get|mount ...\n\tzdb -e -p DIR [-b|-bb] [-c|-cc] [-d] POOL\n\tdaemon start|stop|status|run\n\ttunable [NAME[=VALUE]]...\n\tarcstats [-j]\n\tkstat [-j] arcstats|zfetchstats|zil\n\tarc_summary [-adgr] [-s SECTION]\n\tzinject [-c ID|all] [-d DEV [-e ERR] [-T TYPE] [-f FREQ] POOL]";

fn usage() -> i32 {
    eprintln!("{USAGE}");
    2
}

/// Print a verb's output and give its exit status.
fn show((out, err, code): (String, String, i32)) -> i32 {
    print!("{out}");
    eprint!("{err}");
    code
}

fn run(args: &[String]) -> i32 {
    if matches!(args.first().map(|s| s.as_str()), Some("-h" | "--help" | "help")) {
        usage();
        return 0;
    }
    let Some(first) = args.first() else { return usage() };
    let Ok(family) = Family::from_str(first, false) else {
        eprintln!("unrecognized command '{first}'");
        return usage();
    };
    // Each family is handed the words unchanged (the daemon protocol carries the argv as typed).
    let rest = &args[1..];
    match family {
        Family::Zdb => zdb::main(rest),
        Family::Daemon => daemon::main(rest),
        Family::Debug => debug::main(rest),
        // Tunables and the ARC live in the daemon's process, where the pools are.
        Family::Tunable | Family::Arcstats | Family::Kstat | Family::ArcSummary | Family::Zinject => {
            if !client::is_running() {
                eprintln!("cannot reach the oxzfs daemon at {}: it is not running (tunables are the daemon's: `oxzfs daemon start -o NAME=VALUE`)", client::socket_path().display());
                return 1;
            }
            match client::request(args) {
                Ok(r) => show(r),
                Err(e) => {
                    eprintln!("cannot reach the oxzfs daemon at {}: {e}", client::socket_path().display());
                    1
                }
            }
        }
        Family::Zpool | Family::Zfs => {
            let cmd = &args[0];
            // Usage asked for (`zpool VERB --help`, `zpool -?`) needs no daemon.
            if args[1..].iter().take(2).any(|a| a == "--help" || a == "-?") {
                return show(commands::run_without_daemon(args, &cwd()));
            }
            // `zfs project` works on the caller's files, opened here with the caller's
            // credentials: it never goes to the daemon.
            if cmd == "zfs" && args.get(1).map(|s| s.as_str()) == Some("project") {
                return project::main(&args[2..]);
            }
            // Listing importable pools needs no daemon.
            if cmd == "zpool" && args.get(1).map(|s| s.as_str()) == Some("import") && zpool::import_is_listing(&args[2..]) {
                return show(zpool::run_local(args, &cwd()));
            }
            // A pool that is imported (or created, which imports it) lives in the daemon.
            let autostart = cmd == "zpool" && matches!(args.get(1).map(|s| s.as_str()), Some("import" | "create"));
            if !client::is_running() {
                if autostart {
                    if let Err(e) = daemon::start(&[]) {
                        eprintln!("cannot start the oxzfs daemon: {e}");
                        return 1;
                    }
                } else {
                    // Nothing is imported: answer as OpenZFS does with no pools.
                    return show(commands::run_without_daemon(args, &cwd()));
                }
            }
            // `zpool iostat ... INTERVAL [COUNT]` stays here, asking the daemon each interval.
            if cmd == "zpool" && args.get(1).map(|s| s.as_str()) == Some("iostat") {
                if let Ok(a) = iostat::parse(&args[2..]) {
                    if a.interval > 0.0 {
                        return iostat::run_interval(&args[2..], &|argv| client::request(argv));
                    }
                }
            }
            // `zfs send` and `zfs receive`: the stream goes between the daemon and this
            // process's standard output or input, passed along with standard error.
            if cmd == "zfs" && matches!(args.get(1).map(|s| s.as_str()), Some("send" | "receive" | "recv")) {
                let sending = args[1] == "send";
                if sending && !args[2..].iter().any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('n')) && unsafe { libc::isatty(1) } == 1 {
                    eprintln!("Error: Stream can not be written to a terminal.\nYou must redirect standard output.");
                    return 1;
                }
                return match client::request_with_fds(args, &[if sending { 1 } else { 0 }, 2]) {
                    Ok(r) => show(r),
                    Err(e) => {
                        eprintln!("cannot reach the oxzfs daemon at {}: {e}", client::socket_path().display());
                        1
                    }
                };
            }
            // `zfs load-key`: a key may be read from this process's terminal or input.
            if keys::wants_fds(args) {
                keys::guard_terminal();
                let r = client::request_with_fds(args, &[0, 1, 2]);
                keys::restore_terminal();
                return match r {
                    Ok(r) => show(r),
                    Err(e) => {
                        eprintln!("cannot reach the oxzfs daemon at {}: {e}", client::socket_path().display());
                        1
                    }
                };
            }
            let mut res = client::request(args);
            // A daemon that was killed can hold its socket for a moment while its last threads
            // finish their I/O, and then drops the connection unanswered: an import or create
            // waits for it to be gone and starts a new one.
            if autostart && matches!(&res, Err(e) if e.contains("Connection reset")) {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while client::is_running() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                if let Err(e) = daemon::start(&[]) {
                    eprintln!("cannot start the oxzfs daemon: {e}");
                    return 1;
                }
                res = client::request(args);
            }
            match res {
                Ok(r) => show(r),
                Err(e) => {
                    eprintln!("cannot reach the oxzfs daemon at {}: {e}", client::socket_path().display());
                    1
                }
            }
        }
    }
}
