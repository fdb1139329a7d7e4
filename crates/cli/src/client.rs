//! Talking to the daemon: where its unix socket is, the request and reply it exchanges (one JSON
//! line each way per connection), and sending one argument vector to it. Used by the CLI and by
//! the daemon itself; imports nothing of the crate.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The daemon's socket: $OXZFS_SOCKET (made absolute) or /run/oxzfs/oxzfs.sock.
pub fn socket_path() -> PathBuf {
    match std::env::var_os("OXZFS_SOCKET").filter(|s| !s.is_empty()).map(PathBuf::from) {
        Some(p) if p.is_relative() => std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p),
        Some(p) => p,
        None => PathBuf::from("/run/oxzfs/oxzfs.sock"),
    }
}

#[derive(Serialize, Deserialize)]
pub struct Req {
    pub argv: Vec<String>,
    /// The caller's working directory: relative paths in argv are taken from there.
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub struct Resp {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

pub const SHUTDOWN: &str = "__shutdown";

pub fn is_running() -> bool {
    UnixStream::connect(socket_path()).is_ok()
}

/// Send one command to the daemon.
pub fn request(argv: &[String]) -> Result<(String, String, i32), String> {
    let cwd = std::env::current_dir().ok().map(|d| d.display().to_string());
    request_at(&socket_path(), argv, cwd)
}

/// Send one command to the daemon serving `sock`, as if run in `cwd`.
pub fn request_at(sock: &Path, argv: &[String], cwd: Option<String>) -> Result<(String, String, i32), String> {
    let mut s = UnixStream::connect(sock).map_err(|e| e.to_string())?;
    let req = serde_json::to_string(&Req { argv: argv.to_vec(), cwd }).map_err(|e| e.to_string())?;
    s.write_all(req.as_bytes()).and_then(|_| s.write_all(b"\n")).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).map_err(|e| e.to_string())?;
    let r: Resp = serde_json::from_str(&line).map_err(|e| format!("bad reply from the daemon: {e}"))?;
    Ok((r.stdout, r.stderr, r.code))
}
