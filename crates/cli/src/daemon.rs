//! The daemon: owns imported pools and their mounts, serves one request per connection on a
//! unix socket. A request is `{"argv": [...]}`; the reply `{"stdout", "stderr", "code"}`.
//! Each request runs under catch_unwind, so a bug answers with an error instead of taking the
//! daemon (and every mount) down. `daemon stop` unmounts and exports everything, then exits.

use crate::commands;
use clap::error::{ContextKind, ContextValue};
use clap::{ArgAction, Args, Parser};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt;
use tracing_subscriber::prelude::*;
use crate::verb::State;
use crate::client::{is_running, request, request_at, socket_path, Req, Resp, SHUTDOWN};
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};


/// `oxzfs daemon …`.
#[derive(Parser, Debug)]
#[command(name = "daemon", no_binary_name = true, disable_help_flag = true, disable_version_flag = true, disable_help_subcommand = true)]
enum DaemonCmd {
    /// Start the daemon in the background (nothing if it runs).
    Start(RunOpts),
    /// Serve in the foreground.
    Run(RunOpts),
    /// Unmount and export everything, then exit.
    Stop,
    /// Say whether the daemon answers (exit 0) or not (exit 1).
    Status,
}

#[derive(Args, Debug, Default)]
struct RunOpts {
    /// Cache files whose pools are imported as the daemon starts (absolute paths).
    #[arg(short = 'c', value_name = "cachefile", action = ArgAction::Append)]
    cachefiles: Vec<String>,
    /// The level of the daemon's log: error, warn, info, debug, trace, or directives such as
    /// `info,oxzfs=debug`; else $OXZFS_LOG, else $RUST_LOG, else info.
    #[arg(long = "log-level", value_name = "LEVEL")]
    log_level: Option<String>,
    /// Tunables set as the daemon starts, by OpenZFS's module parameter names (`oxzfs tunable`
    /// lists them).
    #[arg(short = 'o', value_name = "tunable=value", action = ArgAction::Append)]
    tunables: Vec<String>,
}

const USAGE: &str = "usage: oxzfs daemon start|run [-c cachefile]... [-o tunable=value]... [--log-level LEVEL]\n       oxzfs daemon stop|status";

pub fn main(args: &[String]) -> i32 {
    let cmd = match DaemonCmd::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let verb = args.first().map(|s| s.as_str());
            if let (Some(ContextValue::String(a)), Some(v @ ("start" | "run"))) = (e.get(ContextKind::InvalidArg), verb) {
                let who = if v == "start" { "cannot start the oxzfs daemon" } else { "oxzfs daemon" };
                eprintln!("{who}: unexpected argument '{a}' (usage: daemon start|run [-c cachefile]... [-o tunable=value]... [--log-level LEVEL])");
                return 1;
            }
            eprintln!("{USAGE}");
            return 2;
        }
    };
    match cmd {
        DaemonCmd::Start(o) => match o.check().and_then(|()| start_with(&o.cachefiles, o.log_level.as_deref(), &o.tunables)) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("cannot start the oxzfs daemon: {e}");
                1
            }
        },
        DaemonCmd::Stop => {
            if !is_running() {
                return 0;
            }
            match request(&[SHUTDOWN.to_string()]) {
                Ok(_) => {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while is_running() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    0
                }
                Err(e) => {
                    eprintln!("cannot stop the oxzfs daemon: {e}");
                    1
                }
            }
        }
        DaemonCmd::Status => {
            if is_running() {
                println!("oxzfs daemon is running on {}", socket_path().display());
                0
            } else {
                println!("oxzfs daemon is not running");
                1
            }
        }
        DaemonCmd::Run(o) => {
            let r = o.check().and_then(|()| {
                init_logging(o.log_level.as_deref())?;
                serve(&o.cachefiles)
            });
            match r {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("oxzfs daemon: {e}");
                    1
                }
            }
        }
    }
}

impl RunOpts {
    /// Refuse bad options before anything starts; the tunables are set in this process (the
    /// daemon, for `run`).
    fn check(&self) -> Result<(), String> {
        if let Some(f) = self.cachefiles.iter().find(|f| !f.starts_with('/')) {
            return Err(format!("cache file '{f}' must be an absolute path"));
        }
        for t in &self.tunables {
            oxzfs::tunables::set_assignment(t).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// The daemon's diagnostics go through `tracing` to its stderr (the log file `daemon start`
/// opens), at the level given by --log-level, $OXZFS_LOG or $RUST_LOG (in that order), else info.
fn init_logging(level: Option<&str>) -> Result<(), String> {
    let spec = level
        .map(|s| s.to_string())
        .or_else(|| std::env::var("OXZFS_LOG").ok().filter(|s| !s.is_empty()))
        .or_else(|| std::env::var("RUST_LOG").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "info".to_string());
    let filter: Targets = spec.parse().map_err(|e| format!("invalid log level '{spec}': {e}"))?;
    let _ = tracing_subscriber::registry().with(fmt::layer().with_writer(std::io::stderr).with_ansi(false)).with(filter).try_init();
    Ok(())
}

/// Start the daemon in the background (idempotent); returns once it answers. The pools listed
/// in `cachefiles` are imported as it starts.
pub fn start(cachefiles: &[String]) -> Result<(), String> {
    start_with(cachefiles, None, &[])
}

/// `start` with the daemon's log level (passed on as `--log-level`).
fn start_with(cachefiles: &[String], log_level: Option<&str>, tunables: &[String]) -> Result<(), String> {
    if is_running() {
        return Ok(());
    }
    let sock = socket_path();
    let dir = sock.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let log_path = dir.join(format!("{}.log", sock.file_name().and_then(|s| s.to_str()).unwrap_or("oxzfsd")));
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(exe);
    // The daemon keeps no directory busy and finds its socket from anywhere.
    cmd.args(["daemon", "run"])
        .args(cachefiles.iter().flat_map(|f| ["-c", f.as_str()]))
        .args(log_level.iter().flat_map(|l| ["--log-level", l]))
        .args(tunables.iter().flat_map(|t| ["-o", t.as_str()]))
        .current_dir("/")
        .env("OXZFS_SOCKET", &sock)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    use std::os::unix::process::CommandExt;
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if is_running() {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("the daemon exited ({st}); see {}", log_path.display()));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(format!("the daemon did not answer within 20 s; see {}", log_path.display()))
}

/// The allocator's thresholds for a daemon that churns block-sized buffers (16K to 1M) every
/// txg: glibc would give each freed buffer above its mmap/trim thresholds back to the kernel
/// and fault fresh zeroed pages in for the next (a third of the CPU of an fsync loop went to
/// page faults); buffers up to 32 MiB stay in the heap, and up to 128 MiB of free heap stays.
///
/// One arena for all threads: blocks are made on one thread and freed on another (a FUSE
/// thread fills a record, the ARC drops it; a prefetch worker reads a block, an export frees
/// it), and with an arena per thread what one thread's arena got back was no use to the next
/// thread's, which faulted in fresh pages instead (a sequential read after an import faulted
/// in 188 of every MiB's 256 pages and spent twice the CPU per MiB; with one arena, 20).
/// Small allocations mostly stay in each thread's cache (tcache) and do not take the lock.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Import every pool a cache file lists, as zfs-import-cache does at boot (`zpool import -c
/// FILE -aN`: mounting is left to `zfs mount -a`, as to zfs-mount), keeping FILE as each
/// pool's cachefile so that an export takes it out again. A missing or empty file imports
/// nothing. Messages go to the daemon's log.
fn import_cachefiles(st: &mut State, files: &[String]) {
    for f in files {
        if std::fs::metadata(f).map_or(true, |m| m.len() == 0) {
            continue;
        }
        let argv: Vec<String> = ["zpool", "import", "-c", f, "-a", "-N", "-o"].iter().map(|s| s.to_string()).chain([format!("cachefile={f}")]).collect();
        let (out, err, code) = commands::execute(st, &argv, Path::new("/"));
        for l in out.lines().chain(err.lines()) {
            tracing::info!(cachefile = %f, "{l}");
        }
        tracing::info!(cachefile = %f, code, "imported the pools of the cache file");
    }
}

fn serve(cachefiles: &[String]) -> Result<(), String> {
    tune_allocator();
    let sock = socket_path();
    if let Some(dir) = sock.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    if UnixStream::connect(&sock).is_ok() {
        return Err(format!("another daemon is already serving {}", sock.display()));
    }
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|e| format!("cannot bind {}: {e}", sock.display()))?;
    tracing::info!(socket = %sock.display(), "oxzfs daemon serving");
    let state = Arc::new(Mutex::new(State::default()));
    catch_termination(sock.clone());
    // Requests that come meanwhile wait for the state.
    import_cachefiles(&mut state.lock().unwrap_or_else(|p| p.into_inner()), cachefiles);
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        // A client that connects and says nothing must not stall the daemon.
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        // The request line, with the descriptors a `zfs send` or `zfs receive` passes along.
        let Ok((line, fds)) = crate::client::recv_line_with_fds(std::os::fd::AsRawFd::as_raw_fd(&conn), 1 << 20) else { continue };
        let req: Req = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                reply(&mut conn, String::new(), format!("bad request: {e}\n"), 2);
                continue;
            }
        };
        if req.argv.first().map(|s| s.as_str()) == Some(SHUTDOWN) {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            let (out, err) = st.shutdown();
            reply(&mut conn, out, err, 0);
            let _ = std::fs::remove_file(&sock);
            return Ok(());
        }
        let state = state.clone();
        std::thread::spawn(move || {
            let argv = req.argv.clone();
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let (out, waits, resilver_waits, removal_waits, rebuild_waits, trim_waits, streams) = {
                    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                    let cwd = PathBuf::from(req.cwd.clone().unwrap_or_else(|| "/".into()));
                    st.fds = fds;
                    let out = commands::execute(&mut st, &argv, &cwd);
                    st.fds.clear();
                    (out, std::mem::take(&mut st.waits), std::mem::take(&mut st.resilver_waits), std::mem::take(&mut st.removal_waits), std::mem::take(&mut st.rebuild_waits), std::mem::take(&mut st.trim_waits), std::mem::take(&mut st.streams))
                };
                // A send or receive streams with the state let go (other commands go on).
                let mut out = out;
                for job in streams {
                    job(&mut out, &state);
                }
                // An evacuation that stopped on an error fails the command waiting for it.
                for (h, run) in removal_waits {
                    if let Some(e) = oxzfs::vdev_removal_thread::wait(&h, run) {
                        out.1.push_str(&format!("{e}\n"));
                        out.2 = 1;
                    }
                }
                for h in rebuild_waits {
                    oxzfs::vdev_rebuild_thread::wait(&h);
                }
                for (h, leaves) in trim_waits {
                    if let Some(e) = oxzfs::vdev_trim::wait(&h, leaves.as_deref()) {
                        out.1.push_str(&format!("error waiting to trim '{}': {e}\n", h.name()));
                        out.2 = 1;
                    }
                }
                for spa in waits {
                    oxzfs::dsl_scrub::wait_func(&spa, oxzfs_format::dsl::POOL_SCAN_SCRUB);
                }
                for spa in resilver_waits {
                    oxzfs::dsl_scrub::wait_func(&spa, oxzfs_format::dsl::POOL_SCAN_RESILVER);
                }
                out
            }));
            let (out, err, code) = match res {
                Ok(r) => r,
                Err(p) => {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "unknown".into());
                    tracing::error!(argv = ?argv, "request panicked: {msg}");
                    (String::new(), format!("internal error: {msg}\n"), 1)
                }
            };
            tracing::debug!(argv = ?argv, code, "request done");
            reply(&mut conn, out, err, code);
        });
    }
    Ok(())
}

/// SIGTERM, SIGINT and SIGHUP stop the daemon cleanly (unmount, export) instead of leaving
/// dead mounts behind: the signals are blocked in every thread and a dedicated thread waits
/// for them, then asks the daemon to shut down through its own socket.
fn catch_termination(sock: PathBuf) {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        let _ = std::thread::Builder::new().name("oxzfs-signals".into()).spawn(move || {
            let mut sig: libc::c_int = 0;
            if libc::sigwait(&set, &mut sig) == 0 {
                tracing::info!(signal = sig, "shutting down");
                let _ = request_at(&sock, &[SHUTDOWN.to_string()], None);
                std::process::exit(0);
            }
        });
    }
}

fn reply(conn: &mut UnixStream, stdout: String, stderr: String, code: i32) {
    if let Ok(s) = serde_json::to_string(&Resp { stdout, stderr, code }) {
        let _ = conn.write_all(s.as_bytes());
        let _ = conn.write_all(b"\n");
    }
}
