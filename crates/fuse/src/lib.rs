//! oxzfs-fuse: file system datasets mounted through FUSE — one adapter (`adapter::ZfsFuse`)
//! for read-only imports (every change EROFS) and pools imported for writing, with
//! `.zfs/snapshot/<name>/` serving each snapshot as OpenZFS's snapdir does (`.zfs` is hidden
//! from the root's listing, like snapdir=hidden, but can be looked up; `snapdir`).
//!
//! Inode numbers: the dataset's root is FUSE inode 1 (and reported as 1 in every attribute and
//! directory entry); other files keep their ZFS object numbers (object 1 is the ZPL master node,
//! never a file, so the two never meet). Snapshot `k` (numbered from 1 in the order first
//! looked up) maps object `n` to `k << 48 | n`; the control directories `.zfs` and
//! `.zfs/snapshot` live above bit 62. Hard links therefore share an inode number, and a
//! snapshot's files never collide with the live ones. Snapshots are opened on first use and
//! kept.
//!
//! Transport: requests come through /dev/fuse (read(2)/write(2), one session thread per clone
//! of the device), or, with the tunable fuse_io_uring=1 and a kernel that offers it (the fuse
//! module's enable_uring, which the daemon leaves to the administrator), through FUSE over
//! io_uring: one ring per CPU, served by a thread bound to that CPU, so that a caller's request
//! is answered on its own CPU without the two cross-CPU wake-ups of /dev/fuse (the vendored
//! fuser's `uring`; bench/results/2026-11-26-fuse-uring-oxzfs.md). A kernel that does not
//! offer it or refuses the ring leaves the mount on /dev/fuse, said once in the log.

mod adapter;
mod snapdir;

pub use adapter::{zfetch_rows, ZFETCH_STATS};

use adapter::{Backend, Serve, Writer, ZfsFuse};
use fuser::{FileAttr, FileType, INodeNo, MountOption};
use oxzfs::pool::Pool;
use oxzfs::txg::PoolHandle;
use oxzfs::zpl::{Attr, Zfs};
use oxzfs::ZfsError;
use snapdir::SnapDir;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The FUSE attributes of a ZPL attribute set, as inode `ino`.
pub fn file_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.blocks,
        atime: systime(a.atime),
        mtime: systime(a.mtime),
        ctime: systime(a.ctime),
        crtime: systime(a.crtime),
        kind: kind_of(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink.min(u32::MAX as u64) as u32,
        uid: a.uid,
        gid: a.gid,
        rdev: fuse_rdev(a.rdev),
        blksize: a.blksize,
        flags: 0,
    }
}

/// FUSE inode of `.zfs`.
pub const CTL_ZFS: u64 = (1 << 62) + 1;
/// FUSE inode of `.zfs/snapshot`.
pub const CTL_SNAPDIR: u64 = (1 << 62) + 2;
/// Snapshot `k`'s objects live at `k << SNAP_SHIFT | object`.
pub const SNAP_SHIFT: u32 = 48;
const OBJ_MASK: u64 = (1 << SNAP_SHIFT) - 1;
const MIB: u32 = 1 << 20;


/// How a dataset is mounted.
#[derive(Clone, Debug)]
pub struct MountOpts {
    /// Let other users see the mount: None = as root, or when /etc/fuse.conf has user_allow_other.
    pub allow_other: Option<bool>,
    /// Threads answering requests.
    pub workers: usize,
    /// How long the kernel may keep attributes and entries (the data never changes read-only).
    pub ttl: Duration,
    /// Show `.zfs` in the root's listing (snapdir=visible).
    pub snapdir_visible: bool,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts { allow_other: None, workers: 4, ttl: Duration::from_secs(3600), snapdir_visible: false }
    }
}

/// `(seconds, nanoseconds)` since the epoch as a SystemTime (also before 1970).
pub fn systime(t: (i64, u32)) -> SystemTime {
    let nanos = Duration::new(0, t.1.min(999_999_999));
    if t.0 >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.0 as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(t.0.unsigned_abs()) + nanos
    }
}

/// File type from the S_IFMT bits of a mode.
pub fn kind_of(mode: u32) -> FileType {
    match mode & 0o170000 {
        0o040000 => FileType::Directory,
        0o120000 => FileType::Symlink,
        0o020000 => FileType::CharDevice,
        0o060000 => FileType::BlockDevice,
        0o010000 => FileType::NamedPipe,
        0o140000 => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// ZFS keeps a device number as `major << 32 | minor`; FUSE wants the kernel's 32-bit
/// encoding (`minor & 0xff | major << 8 | (minor & !0xff) << 12`).
pub fn fuse_rdev(rdev: u64) -> u32 {
    let major = (rdev >> 32) as u32;
    let minor = rdev as u32;
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// Map a FUSE inode number to (snapshot index, object); None for the control directories.
/// `root` is the live filesystem's root object.
pub fn split_ino(ino: u64, root: u64) -> Option<(usize, u64)> {
    match ino {
        1 => Some((0, root)),
        CTL_ZFS | CTL_SNAPDIR => None,
        _ if ino >> 62 != 0 => None,
        _ => Some(((ino >> SNAP_SHIFT) as usize, ino & OBJ_MASK)),
    }
}

/// Map (snapshot index, object) to a FUSE inode number; `root` is that filesystem's root object.
pub fn join_ino(k: usize, obj: u64, root: u64) -> u64 {
    if k == 0 {
        if obj == root {
            1
        } else {
            obj
        }
    } else {
        ((k as u64) << SNAP_SHIFT) | (obj & OBJ_MASK)
    }
}

/// Whether /etc/fuse.conf lets non-root users ask for allow_other.
fn fuse_conf_allows_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|s| s.lines().any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other"))
        .unwrap_or(false)
}

/// fuser's session settings: the mount options, who may use the mount (allow_other), and how
/// many threads read requests (each from its own clone of /dev/fuse, FUSE_DEV_IOC_CLONE).
pub(crate) fn session_config(mount_options: Vec<MountOption>, allow_other: bool, threads: usize) -> fuser::Config {
    let mut c = fuser::Config::default();
    c.mount_options = mount_options;
    c.acl = if allow_other { fuser::SessionACL::All } else { fuser::SessionACL::Owner };
    c.n_threads = Some(threads.max(1));
    c.clone_fd = threads > 1;
    c.io_uring = oxzfs::tunables::get("fuse_io_uring").unwrap_or(0) == 1;
    c.io_uring_log = Some(fuser::UringLog(log_transport));
    c
}

/// The io_uring transport's outcome, in the daemon's log: a fallback to /dev/fuse once as a
/// warning (the tunable asked for the ring), its use as info.
fn log_transport(fell_back: bool, msg: &str) {
    if fell_back {
        tracing::warn!("{msg}");
    } else {
        tracing::info!("{msg}");
    }
}

/// A mounted dataset; unmounted (lazily, if busy) when dropped.
/// Let the kernel read ahead as much as one FUSE read carries (1 MiB). A FUSE mount's
/// backing device starts with the kernel's default of 128 KiB (the smaller of it and
/// max_readahead wins), so a sequential reader's pages would come in 128 KiB requests, each a
/// round trip. Set through the device's /sys/class/bdi/MAJOR:MINOR/read_ahead_kb, as an
/// administrator would; best effort (root only: otherwise the default stays).
pub(crate) fn widen_readahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(mountpoint) else { return };
    let dev = m.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let _ = std::fs::write(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"), format!("{}\n", MIB >> 10));
}

pub struct MountHandle {
    session: Option<fuser::BackgroundSession>,
    pub dataset: String,
    pub mountpoint: PathBuf,
}

/// Detach the mount at `mp`: umount(2) as root, else fusermount3 -u. `lazy` detaches even a
/// busy mount (MNT_DETACH / -z).
fn unmount_path(mp: &Path, lazy: bool) -> std::io::Result<()> {
    let c = CString::new(mp.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(mp).stdin(std::process::Stdio::null()).output()?;
    if out.status.success() {
        Ok(())
    } else if String::from_utf8_lossy(&out.stderr).contains("busy") {
        Err(std::io::Error::from_raw_os_error(libc::EBUSY))
    } else {
        Err(std::io::Error::new(std::io::ErrorKind::Other, String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

/// The FUSE connection behind the mount at `mp` (its device's minor number, the name of its
/// directory under /sys/fs/fuse/connections), from /proc/self/mountinfo: no request to the
/// file system itself.
fn fuse_connection(mp: &Path) -> Option<u32> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mp.to_str()?;
    // mountinfo writes space, tab, newline and backslash as \ooo.
    let unescape = |f: &str| -> String {
        let mut out = String::new();
        let b = f.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
                out.push(u8::from_str_radix(&f[i + 1..i + 4], 8).map(char::from).unwrap_or('?'));
                i += 4;
            } else {
                out.push(b[i] as char);
                i += 1;
            }
        }
        out
    };
    info.lines().rev().find_map(|line| {
        let f: Vec<&str> = line.split(' ').collect();
        let fstype = f.iter().position(|x| *x == "-").and_then(|i| f.get(i + 1))?;
        (fstype.starts_with("fuse") && unescape(f.get(4)?) == want).then(|| f[2].split(':').nth(1)?.parse().ok()).flatten()
    })
}

/// Abort FUSE connection `conn`: what still holds a lazily detached mount open gets ENOTCONN,
/// and the session's threads end (as `umount -f` or `fusermount -z` then an abort would).
fn abort_connection(conn: u32) {
    let dir = format!("/sys/fs/fuse/connections/{conn}");
    if !Path::new(&dir).exists() {
        // The fuse control file system is not mounted (containers, minimal systems): mount it
        // where systemd would (root only; without it the session waits for the last close).
        let (src, target) = (c"fusectl", c"/sys/fs/fuse/connections");
        unsafe { libc::mount(src.as_ptr(), target.as_ptr(), src.as_ptr(), 0, std::ptr::null()) };
    }
    let _ = std::fs::write(format!("{dir}/abort"), "1");
}

impl MountHandle {
    /// Unmount. A busy mount fails with EBUSY unless `force` (then it is detached lazily and
    /// its connection aborted, so that nothing left open on it keeps the session, and whoever
    /// waits for it, alive). On error the handle is given back, still mounted.
    pub fn unmount(mut self, force: bool) -> Result<(), (MountHandle, std::io::Error)> {
        // The kernel sends a FUSE file's RELEASE after close(2) has returned and holds the
        // mount until the reply, so a file closed just before shows the mount busy for a
        // moment: retry for up to a second before calling it busy.
        let mut r = unmount_path(&self.mountpoint, false);
        for _ in 0..20 {
            match &r {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    r = unmount_path(&self.mountpoint, false);
                }
                _ => break,
            }
        }
        // Still busy and forced: detached lazily, and the connection aborted. Only here, where
        // something holds the connection open (so its number is still ours), not after an
        // unmount that ended it.
        let mut conn = None;
        if force && r.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY)) {
            conn = fuse_connection(&self.mountpoint);
            r = unmount_path(&self.mountpoint, true);
        }
        if let Err(e) = r {
            if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
                return Err((self, e));
            }
            // Not mounted any more (someone ran umount): just end the session.
        }
        if let Some(c) = conn {
            abort_connection(c);
        }
        self.finish();
        Ok(())
    }

    fn finish(&mut self) {
        if let Some(s) = self.session.take() {
            // The session thread ends once the kernel drops the connection; fuser's join
            // unwraps the session's result, which must not take the caller down.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || s.join()));
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.session.is_some() {
            // As a forced unmount: the connection aborted only when the mount is busy.
            let mut conn = None;
            if unmount_path(&self.mountpoint, false).is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY)) {
                conn = fuse_connection(&self.mountpoint);
                let _ = unmount_path(&self.mountpoint, true);
            }
            if let Some(c) = conn {
                abort_connection(c);
            }
            self.finish();
        }
    }
}

/// Mount `fs` (dataset `dataset` of `pool`) read-only at `mountpoint`, creating the directory
/// if needed, served in the background until the handle is dropped or unmounted.
pub fn mount(fs: Arc<Zfs>, pool: Arc<Pool>, dataset: String, mountpoint: &Path, opts: &MountOpts) -> Result<MountHandle, ZfsError> {
    let root = fs.root_ino();
    let snapdir = SnapDir::new(pool, dataset.clone(), opts.snapdir_visible);
    // Nothing changes: attributes and entries are kept for long. One session thread hands
    // every request to the readers.
    let serve = Serve { threads: 1, readers: opts.workers, attr_ttl: opts.ttl, entry_ttl: opts.ttl };
    let fsimpl = ZfsFuse::new(Backend::ReadOnly(fs), root, Some(snapdir), &serve);
    let mo = vec![MountOption::RO, MountOption::NoAtime, MountOption::NoDev, MountOption::NoSuid];
    spawn(fsimpl, dataset, mountpoint, mo, opts.allow_other)
}

/// Mount dataset `dsobj` of a pool imported for writing at `mountpoint`.
/// `snapshots`: the pool's read side and whether `.zfs` shows in the root's listing
/// (snapdir=visible), for `.zfs/snapshot`.
pub fn mount_rw(pool: Arc<PoolHandle>, dsobj: u64, dataset: String, mountpoint: &Path, snapshots: Option<(Arc<Pool>, bool)>) -> Result<MountHandle, ZfsError> {
    create_mountpoint(&dataset, mountpoint)?;
    let (w, root) = Writer::open(pool, dsobj)?;
    // The read side serves the snapshots; it must know the dataset (a new one it has not
    // seen yet gets no .zfs until the pool's read side is reopened).
    let snapdir = snapshots.filter(|(ro, _)| ro.open_fs(&dataset).is_ok()).map(|(ro, visible)| SnapDir::new(ro, dataset.clone(), visible));
    let mut serve = Serve::writable();
    if w.names_fold()? {
        // One file under several names ("foo" and "FOO" on a case-insensitive file system):
        // the kernel must not keep an entry (nor a negative one) that a change under another
        // of its names leaves stale.
        serve.entry_ttl = std::time::Duration::ZERO;
    }
    let fsimpl = ZfsFuse::new(Backend::ReadWrite(w), root, snapdir, &serve);
    let root_user = unsafe { libc::geteuid() } == 0;
    spawn(fsimpl, dataset, mountpoint, vec![MountOption::RW], Some(root_user))
}

fn create_mountpoint(dataset: &str, mountpoint: &Path) -> Result<(), ZfsError> {
    std::fs::create_dir_all(mountpoint).map_err(|e| {
        ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}': failed to create mountpoint '{}': {e}", mountpoint.display()))
    })
}

/// Serve `fsimpl` at `mountpoint` (created if needed) with the mount options `mo` and those
/// every mount has.
fn spawn(fsimpl: ZfsFuse, dataset: String, mountpoint: &Path, mut mo: Vec<MountOption>, allow_other: Option<bool>) -> Result<MountHandle, ZfsError> {
    create_mountpoint(&dataset, mountpoint)?;
    mo.extend([MountOption::FSName(dataset.clone()), MountOption::DefaultPermissions, MountOption::CUSTOM(format!("max_read={MIB}"))]);
    // fusermount3 takes the subtype itself; as root fuser calls mount(2), which ignores
    // MountOption::Subtype, so the kernel is told directly (it shows as type fuse.oxzfs).
    let root = unsafe { libc::geteuid() } == 0;
    mo.push(if root { MountOption::CUSTOM("subtype=oxzfs".into()) } else { MountOption::Subtype("oxzfs".into()) });
    let allow_other = allow_other.unwrap_or_else(|| root || fuse_conf_allows_other());
    let threads = fsimpl.threads;
    let session = fuser::spawn_mount(fsimpl, mountpoint, &session_config(mo, allow_other, threads)).map_err(|e| {
        ZfsError::Posix(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot mount '{dataset}' on '{}': {e}", mountpoint.display()))
    })?;
    widen_readahead(mountpoint);
    Ok(MountHandle { session: Some(session), dataset, mountpoint: mountpoint.to_path_buf() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_mapping_round_trips() {
        let root = 4;
        assert_eq!(join_ino(0, root, root), 1);
        assert_eq!(split_ino(1, root), Some((0, root)));
        assert_eq!(join_ino(0, 17, root), 17);
        assert_eq!(split_ino(17, root), Some((0, 17)));
        let s = join_ino(3, 17, root);
        assert_eq!(s, 3 << 48 | 17);
        assert_eq!(split_ino(s, root), Some((3, 17)));
        // A snapshot's root is not renumbered to 1.
        assert_eq!(join_ino(2, root, root), 2 << 48 | 4);
        assert_eq!(split_ino(CTL_ZFS, root), None);
        assert_eq!(split_ino(CTL_SNAPDIR, root), None);
        assert_eq!(split_ino(1 << 63, root), None);
    }

    #[test]
    fn times_and_devices() {
        assert_eq!(systime((1, 5)), UNIX_EPOCH + Duration::new(1, 5));
        assert_eq!(systime((-2, 500_000_000)), UNIX_EPOCH - Duration::new(1, 500_000_000));
        // /dev/null: major 1, minor 3; a large minor spills above bit 20.
        assert_eq!(fuse_rdev(1 << 32 | 3), 0x103);
        assert_eq!(fuse_rdev(8 << 32 | 0x1234), 0x34 | 8 << 8 | 0x1200 << 12);
        assert_eq!(kind_of(0o120777), FileType::Symlink);
        assert_eq!(kind_of(0o100644), FileType::RegularFile);
        assert_eq!(kind_of(0o040755), FileType::Directory);
    }
}
