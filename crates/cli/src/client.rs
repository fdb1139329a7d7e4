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

/// Send one command to the daemon with descriptors of this process passed along (SCM_RIGHTS
/// on the request's bytes): `zfs send` hands its standard output and error, `zfs receive` its
/// standard input and error, so the stream goes between the daemon and wherever they lead
/// (a pipe, a file, a socket) without passing through this process or the reply.
pub fn request_with_fds(argv: &[String], fds: &[std::os::fd::RawFd]) -> Result<(String, String, i32), String> {
    use std::os::fd::AsRawFd;
    let s = UnixStream::connect(socket_path()).map_err(|e| e.to_string())?;
    let cwd = std::env::current_dir().ok().map(|d| d.display().to_string());
    let mut req = serde_json::to_string(&Req { argv: argv.to_vec(), cwd }).map_err(|e| e.to_string())?;
    req.push('\n');
    send_with_fds(s.as_raw_fd(), req.as_bytes(), fds).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).map_err(|e| e.to_string())?;
    let r: Resp = serde_json::from_str(&line).map_err(|e| format!("bad reply from the daemon: {e}"))?;
    Ok((r.stdout, r.stderr, r.code))
}

/// The most descriptors a request carries.
pub const MAX_FDS: usize = 4;

/// Write all of `data` to socket `sock`, `fds` passed with its first bytes.
fn send_with_fds(sock: std::os::fd::RawFd, data: &[u8], fds: &[std::os::fd::RawFd]) -> std::io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let mut cmsg = [0u64; 8];
    let mut done = 0;
    while done < data.len() {
        let iov = libc::iovec { iov_base: data[done..].as_ptr() as *mut libc::c_void, iov_len: data.len() - done };
        // SAFETY: msghdr over one iovec of live bytes and, on the first call, a control buffer
        // (u64-aligned, 64 bytes: room for MAX_FDS descriptors) filled through the CMSG macros.
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &iov as *const libc::iovec as *mut libc::iovec;
            msg.msg_iovlen = 1;
            if done == 0 && !fds.is_empty() {
                let len = std::mem::size_of_val(fds) as u32;
                msg.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
                msg.msg_controllen = libc::CMSG_SPACE(len) as usize;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(len) as usize;
                std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), len as usize);
            }
            libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// Read a request line from `sock` with recvmsg, keeping the descriptors passed with it.
pub fn recv_line_with_fds(sock: std::os::fd::RawFd, max: usize) -> std::io::Result<(String, Vec<std::os::fd::OwnedFd>)> {
    use std::os::fd::FromRawFd;
    let mut out = Vec::new();
    let mut fds = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let mut cmsg = [0u64; 8];
        let iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: msghdr over one iovec of `buf` and a u64-aligned control buffer; the
        // descriptors read from it are new ones this process owns (MSG_CMSG_CLOEXEC).
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &iov as *const libc::iovec as *mut libc::iovec;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&cmsg);
            let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                        let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<libc::c_int>();
                        let p = libc::CMSG_DATA(c) as *const libc::c_int;
                        for i in 0..count {
                            fds.push(std::os::fd::OwnedFd::from_raw_fd(std::ptr::read_unaligned(p.add(i))));
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            n
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
        if out.contains(&b'\n') || out.len() > max {
            break;
        }
    }
    let end = out.iter().position(|&b| b == b'\n').map_or(out.len(), |p| p + 1);
    out.truncate(end);
    Ok((String::from_utf8_lossy(&out).into_owned(), fds))
}
