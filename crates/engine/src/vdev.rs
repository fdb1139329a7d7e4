//! vdev: the device tree of a pool and how bytes are read from it.
//!
//! A pool's vdev tree (from the `vdev_tree` nvlist of the label config) is a root whose children
//! are top-level vdevs: leaves (files or block devices), mirrors or raidz groups, each with an
//! id that DVAs name. A DVA's offset is in the top-level vdev's own address space; for a leaf
//! that space starts after the two front labels and the boot reserve
//! (`VDEV_LABEL_START_SIZE` = 4 MiB), for a mirror every child holds the same bytes at the same
//! offset, and a raidz group spreads the block in columns over its children with parity
//! (see `vdev::raidz`).
//!
//! Reads take a `verify` callback (the block pointer's checksum, supplied by zio) so that a
//! mirror can move on to another child and a raidz can reconstruct by combinations when the data
//! is silently wrong, as OpenZFS's vdev_mirror.c and vdev_raidz.c do. Every error found this way is
//! counted on the leaf that gave bad bytes (READ for I/O errors, CKSUM for wrong bytes), which
//! `zpool status` reports.
//!
//! Self-healing ([`ReadMode`]): a read that finds a bad copy and returns a good one may write the
//! good bytes back over the bad one — the mirror side that failed, the raidz columns that
//! reconstruction replaced — as OpenZFS's vdev_mirror_io_done and vdev_raidz_io_done issue
//! repair writes (only on a pool imported read-write). A scrub's read checks every copy: every
//! mirror side, and the raidz parity against the data, repairing what differs.
//!
//! A leaf whose device goes away under the running pool (a real I/O error with ENXIO or
//! ENODEV, or after which its path no longer names the open device: `BlockDevice::gone`) is
//! REMOVED (`VdevStats::removed`): out of use as an offline leaf is, its reads failing with
//! ENXIO without touching the device; `vdev_probe` watches for it and for its return.
//!
//! All device I/O goes through [`BlockDevice`], so a simulated device can stand in for a file:
//! pools open their leaves by path through [`open_device`], which hands out a device registered
//! for that path ([`register_device`], used by crash tests with `vdev::sim`) before a file.
//! Beside reads and writes, a device may write durably in one call (`BlockDevice::write_sync`,
//! pwritev2 RWF_DSYNC on a file: an intent-log block alone on its vdev) and, when it is a sparse
//! file, have holes written with zeros (`fill_holes`: where the intent log's next blocks go,
//! so that their flushes commit no allocation of the host file system's).
//! Locking: the tree is immutable after open; counters are atomics; the registry has its own
//! mutex, a leaf lock held only to look a path up.

pub mod inject;
pub mod iostat;
pub mod indirect;
pub mod draid;
pub mod raidz;
pub mod sim;

use crate::{Result, ZfsError};
use oxzfs_format::label::VDEV_LABEL_START_SIZE;
use oxzfs_format::nvlist::NvList;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The one trait all device I/O goes through.
pub trait BlockDevice: Send + Sync {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Read exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Write all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Make preceding writes durable.
    fn flush(&self) -> std::io::Result<()>;
    /// A name for messages (the path).
    fn name(&self) -> String;
    /// The descriptor of a regular file behind the device, for copies the kernel makes
    /// between two of them (copy_file_range); None for anything else.
    fn file_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Read exactly `buf.len()` bytes at `offset` past the page cache (O_DIRECT), when the
    /// device can and `buf`'s address, `offset` and the length are multiples of its alignment
    /// (as `write_direct`'s). False when it did not (read with `read_at`).
    fn read_direct(&self, _buf: &mut [u8], _offset: u64) -> std::io::Result<bool> {
        Ok(false)
    }
    /// Write all of `buf` at `offset` past the page cache (O_DIRECT), when the device can and
    /// `buf`'s address, `offset` and the length are multiples of its alignment (`DIRECT_ALIGN`,
    /// or a block device's smaller logical sector size). False when it
    /// did not (write with `write_at`).
    fn write_direct(&self, _buf: &[u8], _offset: u64) -> std::io::Result<bool> {
        Ok(false)
    }
    /// Write all of `buf` at `offset` and make it durable in one call (pwritev2 with
    /// RWF_DSYNC: the range written back and the device's cache flushed, not every dirty page
    /// of the file as a flush would). False when the device cannot (write, then flush).
    fn write_sync(&self, _buf: &[u8], _offset: u64) -> std::io::Result<bool> {
        Ok(false)
    }
    /// Make the holes of a sparse file in `[offset, offset + len)` written space, by writing
    /// zeros over them (what they read as already): a later write there then overwrites space
    /// the host file system holds, and the flush after it commits no allocation to the host's
    /// journal. Nothing for anything but a regular file.
    fn fill_holes(&self, _offset: u64, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
    /// Tell the device that `[offset, offset + len)` holds nothing (TRIM): a file's range is
    /// punched out (its blocks go back to the host file system, it reads as zeros), a block
    /// device's discarded; `secure` asks for a secure erase (a block device's BLKSECDISCARD).
    /// False when the device cannot (vs_trim_notsup); nothing was changed then.
    fn trim(&self, _offset: u64, _len: u64, _secure: bool) -> std::io::Result<bool> {
        Ok(false)
    }
    /// Whether `trim` can work here (vdev_has_trim, vdev_has_securetrim).
    fn trim_supported(&self, _secure: bool) -> bool {
        false
    }
    /// The path the device was opened by no longer names it (OpenZFS learns it from the
    /// kernel's hot-unplug event, or from revalidating the disk after an EIO): the file was
    /// moved or deleted, the block device's node is gone or names another device. False for
    /// a device that cannot tell (a simulated one).
    fn gone(&self) -> bool {
        false
    }
}

/// The alignment `BlockDevice::write_direct` needs of the buffer's address, the offset and the
/// length.
pub const DIRECT_ALIGN: usize = 4096;

/// Where bytes that live at disk `offset` go in `buf` (at least their length plus
/// 2 * DIRECT_ALIGN long) so that their addresses match their disk offsets modulo DIRECT_ALIGN:
/// then any aligned part of them can be written with `write_direct`, past the page cache.
pub fn direct_place(buf: &[u8], offset: u64) -> usize {
    buf.as_ptr().align_offset(DIRECT_ALIGN) + (offset % DIRECT_ALIGN as u64) as usize
}

/// `data`, bound for disk `offset`, copied into a buffer at its `direct_place`; the buffer and
/// where in it the data starts.
pub fn direct_placed(data: &[u8], offset: u64) -> (Vec<u8>, usize) {
    let mut b = vec![0u8; data.len() + 2 * DIRECT_ALIGN];
    let p = direct_place(&b, offset);
    b[p..p + data.len()].copy_from_slice(data);
    (b, p)
}

/// What `fill_holes` writes, a piece at a time: 1 MiB of zeros allocated once and only ever
/// read (the kernel maps its zero page there), not allocated and cleared at every fill.
fn fill_zeros() -> &'static [u8] {
    static ZEROS: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    ZEROS.get_or_init(|| vec![0u8; 1 << 20])
}

/// A file or a block device opened by path.
pub struct FileDevice {
    file: File,
    /// The same file opened for writing with O_DIRECT (`write_direct`), where it can be.
    direct: Option<File>,
    path: PathBuf,
    size: u64,
    /// A regular file (not a block device).
    regular: bool,
    /// What O_DIRECT writes must be multiples of (offset, length, address): a block device's
    /// logical sector size (BLKSSZGET: a pool of ashift 9 on 512-byte sectors has its blocks
    /// on 512-byte boundaries), DIRECT_ALIGN for a file.
    dio_align: usize,
    /// What `read_direct` needs: `dio_align`, or for a regular file what its file system
    /// reports (statx's STATX_DIOALIGN: ext4 on 512-byte sectors takes 512), so that the
    /// blocks of a pool of ashift 9 are read past the page cache too.
    read_align: usize,
    /// The whole device mapped read-only (never touched through), for asking the kernel which
    /// of its pages the host's page cache holds (`in_page_cache`); None where it cannot map.
    map: Option<PageCacheMap>,
}

/// A read-only shared mapping of a device, only ever passed to mincore(2).
struct PageCacheMap {
    addr: usize,
    len: usize,
}

impl PageCacheMap {
    fn new(f: &File, len: u64) -> Option<PageCacheMap> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: a new mapping the kernel places; nothing reads or writes through it.
        let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
        (addr != libc::MAP_FAILED).then_some(PageCacheMap { addr: addr as usize, len })
    }

    /// Whether every page of `[offset, offset + len)` is in the page cache (mincore: no I/O,
    /// no readahead, nothing faulted in). False when it cannot tell.
    fn holds(&self, offset: u64, len: usize) -> bool {
        const PAGE: usize = 4096;
        let start = offset as usize & !(PAGE - 1);
        let end = (offset as usize + len).div_ceil(PAGE) * PAGE;
        if end > self.len || end - start > 64 << 20 {
            return false;
        }
        let mut vec = vec![0u8; (end - start) / PAGE];
        // SAFETY: the range lies inside the mapping, `vec` has a byte per page of it.
        let r = unsafe { libc::mincore((self.addr + start) as *mut libc::c_void, end - start, vec.as_mut_ptr()) };
        r == 0 && vec.iter().all(|v| v & 1 != 0)
    }
}

impl Drop for PageCacheMap {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

impl FileDevice {
    pub fn open(path: &Path, writable: bool) -> std::io::Result<FileDevice> {
        let file = std::fs::OpenOptions::new().read(true).write(writable).open(path)?;
        let md = file.metadata()?;
        let regular = md.file_type().is_file();
        let size = if regular {
            md.len()
        } else {
            // Block devices report 0 in metadata; seek to the end instead.
            use std::io::{Seek, SeekFrom};
            let mut f = &file;
            f.seek(SeekFrom::End(0))?
        };
        use std::os::unix::fs::OpenOptionsExt;
        let direct = std::fs::OpenOptions::new().read(true).write(writable).custom_flags(libc::O_DIRECT).open(path).ok();
        let dio_align = if regular { DIRECT_ALIGN } else { logical_sector_size(&file).filter(|s| s.is_power_of_two() && *s <= DIRECT_ALIGN).unwrap_or(DIRECT_ALIGN) };
        let read_align = if regular { dio_alignment(&file).unwrap_or(dio_align) } else { dio_align };
        let map = if direct.is_some() { PageCacheMap::new(&file, size) } else { None };
        Ok(FileDevice { file, direct, path: path.to_path_buf(), size, regular, dio_align, read_align, map })
    }

    /// `write_sync` past the page cache (O_DIRECT with RWF_DSYNC): the bytes go from an
    /// aligned copy straight to the disk, durable on return. None when the device or the
    /// range does not allow it (the caller writes through the page cache). The range needs
    /// only the alignment the file system takes for direct I/O (statx's, often 512 bytes):
    /// the intent log's blocks of an ashift-9 pool sit on 512-byte boundaries. Through the
    /// page cache, such a block's write made the host write back every page it touches, and
    /// a 4 KiB write+fsync ran 17% slower (median of 6 alternated runs of 4000: 5,100/s
    /// against 5,980/s on an ext4 file).
    fn write_sync_direct(&self, buf: &[u8], offset: u64) -> std::io::Result<Option<bool>> {
        use std::os::fd::AsRawFd;
        let Some(f) = self.direct.as_ref() else { return Ok(None) };
        if buf.is_empty() || (buf.len() | offset as usize) % self.read_align != 0 {
            return Ok(None);
        }
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < buf.len() + DIRECT_ALIGN {
                *s = vec![0u8; buf.len() + DIRECT_ALIGN];
            }
            let at = s.as_ptr().align_offset(DIRECT_ALIGN);
            let dst = &mut s[at..at + buf.len()];
            dst.copy_from_slice(buf);
            Ok(pwrite_dsync(f.as_raw_fd(), dst, offset, &[libc::EINVAL, libc::EOPNOTSUPP, libc::ENOSYS])?.then_some(true))
        })
    }
}

/// All of `buf` written at `offset` of `fd` with pwritev2(RWF_DSYNC), durable on return.
/// False (nothing written) when the first call fails with one of `unsupported`: the caller
/// has another way to write it.
fn pwrite_dsync(fd: std::os::fd::RawFd, buf: &[u8], offset: u64, unsupported: &[i32]) -> std::io::Result<bool> {
    let (mut off, mut done) = (offset, 0usize);
    while done < buf.len() {
        let iov = libc::iovec { iov_base: buf[done..].as_ptr() as *mut libc::c_void, iov_len: buf.len() - done };
        // SAFETY: one iovec over `buf`'s live bytes.
        let n = unsafe { libc::pwritev2(fd, &iov, 1, off as libc::off_t, libc::RWF_DSYNC) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(c) if done == 0 && unsupported.contains(&c) => return Ok(false),
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero));
        }
        off += n as u64;
        done += n as usize;
    }
    Ok(true)
}

/// The alignment a file's O_DIRECT I/O needs of the buffer and of the offset and length, as
/// its file system reports it (statx with STATX_DIOALIGN, Linux 6.1 on); None when it does not
/// or the figure is not a power of two up to `DIRECT_ALIGN`.
fn dio_alignment(f: &File) -> Option<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: statx fills the struct it is given (zeroed: a plain C struct), which outlives
    // the call; the empty path with AT_EMPTY_PATH names the descriptor itself.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statx(f.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut st) };
    if r != 0 || st.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    let align = st.stx_dio_mem_align.max(st.stx_dio_offset_align) as usize;
    (align.is_power_of_two() && align <= DIRECT_ALIGN).then_some(align)
}

/// A block device's logical sector size (the BLKSSZGET ioctl).
fn logical_sector_size(f: &File) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which lives across the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::BLKSSZGET, &mut size as *mut libc::c_int) };
    (r == 0 && size > 0).then_some(size as usize)
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if offset.checked_add(buf.len() as u64).map_or(true, |end| end > self.size) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("read of {} bytes at {offset:#x} past the end ({:#x})", buf.len(), self.size),
            ));
        }
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn read_direct(&self, buf: &mut [u8], offset: u64) -> std::io::Result<bool> {
        let aligned = (buf.as_ptr() as usize | buf.len() | offset as usize) % self.read_align == 0;
        let Some(f) = self.direct.as_ref().filter(|_| aligned && !buf.is_empty()) else { return Ok(false) };
        if offset.checked_add(buf.len() as u64).map_or(true, |end| end > self.size) {
            return Ok(false); // read_at reports it
        }
        if self.map.as_ref().is_some_and(|m| m.holds(offset, buf.len())) {
            // The host's page cache holds it (its readahead brought in a neighbour's block):
            // a copy from there beats the disk.
            return Ok(false);
        }
        match f.read_exact_at(buf, offset) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(e) => Err(e),
        }
    }
    fn write_direct(&self, buf: &[u8], offset: u64) -> std::io::Result<bool> {
        let aligned = (buf.as_ptr() as usize | buf.len() | offset as usize) % self.dio_align == 0;
        let Some(f) = self.direct.as_ref().filter(|_| aligned && !buf.is_empty()) else { return Ok(false) };
        match f.write_all_at(buf, offset) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(e) => Err(e),
        }
    }
    fn flush(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
    fn write_sync(&self, buf: &[u8], offset: u64) -> std::io::Result<bool> {
        use std::os::fd::AsRawFd;
        if let Some(done) = self.write_sync_direct(buf, offset)? {
            return Ok(done);
        }
        pwrite_dsync(self.file.as_raw_fd(), buf, offset, &[libc::EOPNOTSUPP, libc::ENOSYS])
    }
    fn fill_holes(&self, offset: u64, len: u64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        if !self.regular {
            return Ok(());
        }
        let fd = self.file.as_raw_fd();
        let end = offset.saturating_add(len).min(self.size);
        let mut at = offset;
        while at < end {
            // SEEK_HOLE: the next hole at or after `at` (the end of the file counts as one; a
            // file system that does not track holes reports only that one).
            let hole = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_HOLE) };
            if hole < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let hole = hole as u64;
            if hole >= end {
                break;
            }
            let data = unsafe { libc::lseek(fd, hole as libc::off_t, libc::SEEK_DATA) };
            let stop = match data {
                d if d >= 0 => (d as u64).min(end),
                _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) => end,
                _ => return Err(std::io::Error::last_os_error()),
            };
            let zeros = fill_zeros();
            let mut o = hole;
            while o < stop {
                let n = (stop - o).min(zeros.len() as u64) as usize;
                // Written through the page cache and made durable at once (RWF_DSYNC: this
                // range written back, the host's allocation committed). Left dirty, the zeros
                // were written back piecemeal by the log writes that came later (O_DIRECT
                // writes the cached pages they overlap back first), in growing runs: 10% of
                // 4 KiB write+fsync commits took 200-500 us instead of 90 (p99 430-520 us,
                // now 170-210; 5 alternated runs of 3000, median 7,394 -> 7,426/s). Zeros
                // written with O_DIRECT cost the later log writes more (p50 100 us against 88).
                if !pwrite_dsync(fd, &zeros[..n], o, &[libc::EOPNOTSUPP, libc::ENOSYS])? {
                    self.file.write_all_at(&zeros[..n], o)?;
                }
                o += n as u64;
            }
            at = stop;
        }
        Ok(())
    }
    fn trim_supported(&self, secure: bool) -> bool {
        if self.regular {
            return !secure;
        }
        // The block device's queue limits: a discard of at most 0 bytes is none.
        use std::os::unix::fs::MetadataExt;
        let Ok(md) = self.file.metadata() else { return false };
        let (major, minor) = (libc::major(md.rdev()), libc::minor(md.rdev()));
        let queue = |f: &str| {
            // A partition has its queue on its disk, one directory up.
            ["queue", "../queue"].iter().find_map(|q| std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/{q}/{f}")).ok()).and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0)
        };
        queue("discard_max_bytes") > 0
    }
    fn trim(&self, offset: u64, len: u64, secure: bool) -> std::io::Result<bool> {
        use std::os::fd::AsRawFd;
        let end = offset.saturating_add(len).min(self.size);
        if end <= offset {
            return Ok(true);
        }
        let fd = self.file.as_raw_fd();
        let unsupported = |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::ENOSYS | libc::EINVAL));
        if self.regular {
            // vdev_file: fallocate's punch, the size kept; a file has no secure erase.
            if secure {
                return Ok(false);
            }
            // SAFETY: a plain syscall on our own descriptor.
            let r = unsafe { libc::fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset as libc::off_t, (end - offset) as libc::off_t) };
            if r == 0 {
                return Ok(true);
            }
            let e = std::io::Error::last_os_error();
            return if unsupported(&e) { Ok(false) } else { Err(e) };
        }
        // vdev_disk: BLKDISCARD (or BLKSECDISCARD), the range in bytes.
        const BLKDISCARD: libc::c_ulong = 0x1277;
        const BLKSECDISCARD: libc::c_ulong = 0x127d;
        let range: [u64; 2] = [offset, end - offset];
        // SAFETY: the ioctl reads two u64s from `range`, which lives across the call.
        let r = unsafe { libc::ioctl(fd, if secure { BLKSECDISCARD } else { BLKDISCARD } as _, range.as_ptr()) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if unsupported(&e) {
            Ok(false)
        } else {
            Err(e)
        }
    }
    fn name(&self) -> String {
        self.path.display().to_string()
    }
    fn gone(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            // Only a path that names nothing says the device left; a stat refused for another
            // reason (permissions, a stale mount) proves nothing.
            Err(e) => return matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR | libc::ENXIO | libc::ENODEV)),
        };
        let Ok(open) = self.file.metadata() else { return false };
        if self.regular {
            // A regular file: the same inode of the same file system.
            !now.file_type().is_file() || (now.dev(), now.ino()) != (open.dev(), open.ino())
        } else {
            // A block device: the node names the same device number.
            now.rdev() != open.rdev()
        }
    }
    fn file_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.regular.then(|| self.file.as_raw_fd())
    }
}

/// Devices standing in for paths (see [`register_device`]).
type Registry = std::collections::HashMap<PathBuf, Arc<dyn BlockDevice>>;
static REGISTRY: std::sync::Mutex<Option<Registry>> = std::sync::Mutex::new(None);

/// From now on, opening `path` as a pool device gives `dev` instead of the file (a test's
/// simulated device over that file's image). Replaces an earlier registration.
pub fn register_device(path: &Path, dev: Arc<dyn BlockDevice>) {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(Default::default).insert(path.to_path_buf(), dev);
}

/// Forget a registration: `path` opens as a file again.
pub fn unregister_device(path: &Path) {
    if let Some(r) = REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        r.remove(path);
    }
}

/// Open a pool device by path: the device registered for it, else the file or block device.
pub fn open_device(path: &Path, writable: bool) -> std::io::Result<Arc<dyn BlockDevice>> {
    if let Some(d) = REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).as_ref().and_then(|r| r.get(path)) {
        return Ok(d.clone());
    }
    Ok(Arc::new(FileDevice::open(path, writable)?))
}

thread_local! {
    static SPECULATIVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with its reads speculative (ZIO_FLAG_SPECULATIVE): a copy that fails its checksum
/// is not a device's fault and is not counted — the intent log's reads of a chain, whose
/// last block may never have been written.
pub fn speculative<T>(f: impl FnOnce() -> T) -> T {
    let was = SPECULATIVE.with(|s| s.replace(true));
    let out = f();
    SPECULATIVE.with(|s| s.set(was));
    out
}

/// How a verified read treats the copies it finds: `repair` writes the good bytes back over
/// each copy that failed (OpenZFS's self-healing; never on a read-only import), `scrub` reads
/// and checks every copy rather than stopping at the first that verifies (ZIO_FLAG_SCRUB).
/// `repaired` adds up the bytes the repair writes put on leaves (the scan's "repaired").
/// `resilver` (ZIO_FLAG_RESILVER): a mirror reads one up-to-date child and writes the block to
/// every child whose DTL is not empty; a raidz rebuilds such children's columns.
pub struct ReadMode {
    pub repair: bool,
    pub scrub: bool,
    pub resilver: bool,
    /// A leaf's reads of `DIRECT_READ_MIN` bytes or more go past the page cache where the
    /// device can (`BlockDevice::read_direct`): the demand reads of the ARC's misses, which
    /// the ARC keeps; a second copy in the host's page cache costs the kernel more than the
    /// disk's read (page allocation, the copy out) and saves nothing the ARC does not.
    pub direct: bool,
    pub repaired: AtomicU64,
}

impl ReadMode {
    pub const fn new(repair: bool, scrub: bool) -> ReadMode {
        ReadMode { repair, scrub, resilver: false, direct: false, repaired: AtomicU64::new(0) }
    }

    /// A resilver's reads: repair, raidz parity read and checked, stale children rewritten.
    pub const fn resilver() -> ReadMode {
        ReadMode { repair: true, scrub: true, resilver: true, direct: false, repaired: AtomicU64::new(0) }
    }

    /// `new`'s reads, past the page cache (`direct`).
    pub const fn direct(repair: bool) -> ReadMode {
        ReadMode { repair, scrub: false, resilver: false, direct: true, repaired: AtomicU64::new(0) }
    }
}

/// Reads that only look (read-only imports, zdb).
pub static READ_PLAIN: ReadMode = ReadMode::new(false, false);
/// Reads of a pool imported read-write: a bad copy is rewritten from a good one.
pub static READ_HEAL: ReadMode = ReadMode::new(true, false);
/// READ_PLAIN and READ_HEAL for the ARC's demand misses: large reads past the page cache.
pub static READ_PLAIN_DIRECT: ReadMode = ReadMode::direct(false);
pub static READ_HEAL_DIRECT: ReadMode = ReadMode::direct(true);

/// The smallest leaf read `ReadMode::direct` sends past the page cache: records of data. A
/// smaller block (metadata, small files) gains little, and its buffer's alignment slack
/// (`DIRECT_ALIGN`) would be a large share of it.
pub const DIRECT_READ_MIN: u64 = 64 << 10;

/// vdev_trim_state_t.
pub const VDEV_TRIM_NONE: u64 = 0;
pub const VDEV_TRIM_ACTIVE: u64 = 1;
pub const VDEV_TRIM_CANCELED: u64 = 2;
pub const VDEV_TRIM_SUSPENDED: u64 = 3;
pub const VDEV_TRIM_COMPLETE: u64 = 4;

/// A leaf's manual trim, as its vdev_t and vdev_stat_t carry it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimStat {
    /// vdev_trim_state_t.
    pub state: u64,
    /// When it was started, suspended, canceled or completed (seconds since the epoch).
    pub action_time: u64,
    /// Where on the leaf (its allocatable space, labels not counted) it goes on.
    pub last_offset: u64,
    /// Bytes per second (0: as fast as it can).
    pub rate: u64,
    pub partial: bool,
    pub secure: bool,
    /// The device cannot trim (vs_trim_notsup).
    pub notsup: bool,
    /// vs_trim_bytes_done / vs_trim_bytes_est.
    pub bytes_done: u64,
    pub bytes_est: u64,
    pub errors: u64,
}

/// Per-vdev error counters, as `zpool status` shows them.
#[derive(Default, Debug)]
pub struct VdevStats {
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub cksum_errors: AtomicU64,
    pub read_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_ops: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Taken out of use after errors (a log device whose write failed): FAULTED until
    /// `zpool clear` or the next import.
    pub faulted: std::sync::atomic::AtomicBool,
    /// Latency and request-size histograms, I/Os in flight (`zpool iostat -l/-q/-w/-r`).
    pub ex: iostat::IoStatsEx,
    /// Leaves: taken offline by `zpool offline` (the `offline` config nvpair when not -t):
    /// OFFLINE, neither read nor written.
    pub offline: std::sync::atomic::AtomicBool,
    /// Leaves: faulted or degraded by `zpool offline -f` (VDEV_AUX_EXTERNAL, "external device
    /// fault"): with `faulted`, out of use as an offline leaf is; `degraded` (the fault would
    /// have left its top-level vdev without the data) keeps it in use. Kept across imports by
    /// the `aux_state` "external" config nvpair unless -t; until `zpool clear` or `online`.
    pub fault_external: std::sync::atomic::AtomicBool,
    pub degraded: std::sync::atomic::AtomicBool,
    /// Leaves: the device went away under the running pool (VDEV_STATE_REMOVED, see
    /// `vdev_probe`): REMOVED, out of use as an offline leaf is, each txg it misses in its
    /// DTL, `removed = 1` in its config (ZPOOL_CONFIG_REMOVED) until it is back.
    pub removed: std::sync::atomic::AtomicBool,
    /// Leaves: a write failed since the last sync's DTL update (vdev_stat_update dirties the
    /// DTL of a leaf a write failed on): that sync's txg goes into its DTL, so `zpool clear`
    /// resilvers what it missed.
    pub write_failed: std::sync::atomic::AtomicBool,
    /// When `removed` was set (None: at import, from the config).
    pub removed_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// Leaves: the DTL (DTL_MISSING), txg ranges [start, end) whose blocks this leaf lacks,
    /// with the MOS space map object that keeps it (`DTL` in the leaf's config, 0: none yet)
    /// and whether it changed since that object was last written (see `vdev_dtl`).
    pub(crate) dtl: std::sync::Mutex<std::collections::BTreeMap<u64, u64>>,
    pub dtl_object: AtomicU64,
    pub dtl_dirty: std::sync::atomic::AtomicBool,
    /// `dtl` is not empty (read on every read of a mirror or raidz child, without the lock).
    dtl_any: std::sync::atomic::AtomicBool,
    /// Leaves: bytes the running scan wrote here (vs_scan_processed: the "(resilvering)" marker).
    pub scan_processed: AtomicU64,
    /// Leaves: bytes the running sequential resilver wrote here (vs_rebuild_processed).
    pub rebuild_processed: AtomicU64,
    /// Leaves: the manual TRIM's state and progress (`vdev_trim` runs it).
    pub trim: std::sync::Mutex<TrimStat>,
    /// The root vdev's: a txg sync's writes wait here while the pool's I/O is suspended.
    pub io_gate: IoGate,
}

thread_local! {
    /// Whether this thread's sync writes may wait at the I/O gate: the txg sync thread's
    /// (and its workers' on its behalf). A command's own sync must not: it would wait under
    /// the daemon's state, where the `zpool clear` that resumes it waits too.
    static GATE_WAITS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Let this thread's sync writes wait at the I/O gate (the txg sync thread).
pub fn gate_waits_here() {
    GATE_WAITS.with(|w| w.set(true));
}

/// Whether this thread's sync writes may wait at the I/O gate.
pub fn gate_waits() -> bool {
    GATE_WAITS.with(|w| w.get())
}

/// Run `f` with this thread's sync writes waiting at the gate or not as `waits` says (a
/// worker writing for the sync thread).
pub fn with_gate_waits<T>(waits: bool, f: impl FnOnce() -> T) -> T {
    let was = GATE_WAITS.with(|w| w.replace(waits));
    let r = f();
    GATE_WAITS.with(|w| w.set(was));
    r
}

/// The pool's I/O suspended after a txg sync's write reached no device (OpenZFS's
/// zio_suspend with failmode=wait): the sync waits, holding its txg as it is, until
/// `zpool clear` resumes it (zio_resume) and the write is tried again, or until the pool is
/// exported, which gives up (the txg is then lost, the labels keep the last synced one).
/// Kept on the root vdev's stats: every sync write reaches the tree through it.
#[derive(Default, Debug)]
pub struct IoGate {
    /// Why the I/O is suspended (the failed write's error), while it is.
    why: std::sync::Mutex<Option<String>>,
    cv: std::sync::Condvar,
    /// Resumes so far: a waiter retries once this moves.
    resumes: AtomicU64,
    given_up: std::sync::atomic::AtomicBool,
    /// Only a running pool's syncs wait (`arm`): the writes of a create or an import fail.
    armed: std::sync::atomic::AtomicBool,
}

impl IoGate {
    /// Why the pool's I/O is suspended, if it is (no lock but the gate's own).
    pub fn suspended(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Run a sync write, and while it fails, suspend the pool's I/O and wait to be resumed
    /// or given up (then its error is returned).
    pub fn write_or_wait(&self, mut f: impl FnMut() -> Result<()>) -> Result<()> {
        if !self.armed.load(Ordering::Relaxed) || !GATE_WAITS.with(|w| w.get()) {
            return f();
        }
        loop {
            let e = match f() {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if self.given_up.load(Ordering::Relaxed) {
                return Err(e);
            }
            let mut why = self.why.lock().unwrap_or_else(|p| p.into_inner());
            let seen = self.resumes.load(Ordering::Relaxed);
            if why.is_none() {
                tracing::error!("pool I/O suspended: {e}");
                *why = Some(e.to_string());
            }
            while self.resumes.load(Ordering::Relaxed) == seen && !self.given_up.load(Ordering::Relaxed) {
                why = self.cv.wait(why).unwrap_or_else(|p| p.into_inner());
            }
            if self.given_up.load(Ordering::Relaxed) {
                return Err(e);
            }
        }
    }

    /// Whether `arm` was called.
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// From now on failed sync writes wait (the pool is served).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Relaxed);
    }

    /// zio_resume: the waiting writes are tried again (they suspend again if they fail).
    /// Whether the I/O was suspended.
    pub fn resume(&self) -> bool {
        let mut why = self.why.lock().unwrap_or_else(|p| p.into_inner());
        let was = why.take().is_some();
        self.resumes.fetch_add(1, Ordering::Relaxed);
        self.cv.notify_all();
        was
    }

    /// The pool is going away: waiting writes fail with their errors, and later ones at once.
    pub fn give_up(&self) {
        let _why = self.why.lock().unwrap_or_else(|p| p.into_inner());
        self.given_up.store(true, Ordering::Relaxed);
        self.cv.notify_all();
    }
}

impl VdevStats {
    /// The leaf lacks the blocks of some txgs (its DTL is not empty): reads go elsewhere.
    pub fn stale(&self) -> bool {
        self.dtl_any.load(Ordering::Relaxed)
    }

    /// Replace the DTL by `ranges` (as loaded from its space map).
    pub fn dtl_set(&self, ranges: std::collections::BTreeMap<u64, u64>) {
        let mut d = self.dtl.lock().unwrap_or_else(|p| p.into_inner());
        self.dtl_any.store(!ranges.is_empty(), Ordering::Relaxed);
        *d = ranges;
    }

    /// Add txgs [start, end) to the DTL, merged with the ranges they touch.
    pub fn dtl_add(&self, start: u64, end: u64) {
        let mut d = self.dtl.lock().unwrap_or_else(|p| p.into_inner());
        if start >= end || d.range(..=start).next_back().is_some_and(|(_, &e)| e >= end) {
            return; // nothing new
        }
        let (mut s, mut e) = (start, end);
        let touching: Vec<(u64, u64)> = d.range(..=end).filter(|(_, &re)| re >= start).map(|(&a, &b)| (a, b)).collect();
        for (a, b) in touching {
            d.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        d.insert(s, e);
        self.dtl_any.store(true, Ordering::Relaxed);
        self.dtl_dirty.store(true, Ordering::Relaxed);
    }

    /// Take every txg below `end` out of the DTL (vdev_dtl_reassess after a scan to `end - 1`).
    pub fn dtl_clear_below(&self, end: u64) {
        let mut d = self.dtl.lock().unwrap_or_else(|p| p.into_inner());
        let old = std::mem::take(&mut *d);
        for (a, b) in old {
            if b > end {
                d.insert(a.max(end), b);
            }
        }
        self.dtl_any.store(!d.is_empty(), Ordering::Relaxed);
        self.dtl_dirty.store(true, Ordering::Relaxed);
    }

    /// The DTL's first txg and end (exclusive), if not empty.
    pub fn dtl_bounds(&self) -> Option<(u64, u64)> {
        let d = self.dtl.lock().unwrap_or_else(|p| p.into_inner());
        Some((*d.keys().next()?, *d.values().max()?))
    }

    /// A copy read here failed its checksum (not counted under `speculative`).
    pub fn count_cksum_error(&self) {
        if !SPECULATIVE.with(|s| s.get()) {
            self.cksum_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VdevState {
    Online,
    Degraded,
    Faulted,
    Unavail,
    Offline,
    /// The device went away while the pool was imported (VDEV_STATE_REMOVED).
    Removed,
}

impl VdevState {
    pub fn as_str(&self) -> &'static str {
        match self {
            VdevState::Online => "ONLINE",
            VdevState::Degraded => "DEGRADED",
            VdevState::Faulted => "FAULTED",
            VdevState::Unavail => "UNAVAIL",
            VdevState::Offline => "OFFLINE",
            VdevState::Removed => "REMOVED",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VdevKind {
    Root,
    Mirror,
    /// raidz1/2/3.
    Raidz { nparity: u8 },
    /// dRAID (`draid`): raidz groups spread over the children by permutations; read only.
    Draid(draid::Config),
    /// A dRAID's distributed spare (`dspare`, named like draid2-0-0) in use under a `spare`
    /// or `replacing` vdev below its dRAID: no device of its own; what it holds at an offset
    /// lies on the child of its dRAID that the spare's column names there.
    DraidSpare { spare_id: u64, parent: draid::Parent },
    /// A file or disk leaf.
    Leaf { disk: bool },
    /// A placeholder for a device the config names but the pool never had ("missing"/"hole").
    Hole,
    /// `replacing` or `spare` interior vdevs read like mirrors.
    ReplacingOrSpare(String),
    /// A removed top-level vdev whose blocks live elsewhere (`vdev::indirect`): reads go
    /// through its mapping, in zio.
    Indirect,
}

/// The `path` of a hole vdev: the place of a removed top-level vdev, which keeps the ids of the
/// others (a missing device's placeholder has none).
pub const HOLE: &str = "hole";

/// How `Vdev::write_leaf_buf` writes: through the page cache, past it (O_DIRECT where it can),
/// or durably at once.
#[derive(Clone, Copy)]
enum WriteMode {
    Cached,
    Direct,
    Sync,
}

/// One node of the vdev tree.
pub struct Vdev {
    pub id: u64,
    pub guid: u64,
    pub kind: VdevKind,
    pub ashift: u8,
    /// Allocatable size (top-level vdevs: `asize` from the config).
    pub asize: u64,
    /// Leaves: the path stored in the label (for display only: devices are found by guid).
    pub path: Option<String>,
    /// Leaves: the open device, or None when missing.
    pub dev: Option<Arc<dyn BlockDevice>>,
    pub children: Vec<Arc<Vdev>>,
    pub stats: VdevStats,
    /// Top-level vdev belongs to the log class.
    pub is_log: bool,
    /// Allocation class bias: "special", "dedup" or empty.
    pub alloc_bias: String,
    pub metaslab_array: u64,
    pub metaslab_shift: u64,
    /// Indirect vdevs: the mapping's objects, and the mapping once the MOS is read.
    pub indirect: Option<Arc<indirect::IndirectConfig>>,
}

/// Where a leaf device with a given guid was found.
pub type DeviceMap = std::collections::HashMap<u64, (PathBuf, Arc<dyn BlockDevice>)>;

impl Vdev {
    /// Build a vdev subtree from a `vdev_tree` nvlist, attaching devices found by guid.
    /// `depth` bounds recursion against malicious configs.
    pub fn from_config(nv: &NvList, devices: &DeviceMap, depth: usize) -> Result<Arc<Vdev>> {
        Self::from_config_ashift(nv, devices, depth, 0)
    }

    /// As `from_config`; interior vdevs below the top level inherit its ashift (only
    /// top-level vdevs record one).
    fn from_config_ashift(nv: &NvList, devices: &DeviceMap, depth: usize, parent_ashift: u8) -> Result<Arc<Vdev>> {
        if depth > 8 {
            return Err(ZfsError::Invalid("vdev tree nested too deeply".into()));
        }
        let typ = nv.get_str("type").ok_or_else(|| ZfsError::Invalid("vdev config without a type".into()))?;
        let guid = nv.get_u64("guid").unwrap_or(0);
        let id = nv.get_u64("id").unwrap_or(0);
        let ashift = nv.get_u64("ashift").map(|a| a.min(16) as u8).unwrap_or(parent_ashift);
        let kind = match typ {
            "root" => VdevKind::Root,
            "mirror" => VdevKind::Mirror,
            "raidz" => {
                let p = nv.get_u64("nparity").unwrap_or(1);
                if !(1..=3).contains(&p) {
                    return Err(ZfsError::Invalid(format!("raidz vdev with nparity {p}")));
                }
                VdevKind::Raidz { nparity: p as u8 }
            }
            "disk" => VdevKind::Leaf { disk: true },
            "file" => VdevKind::Leaf { disk: false },
            "missing" | "hole" => VdevKind::Hole,
            "replacing" | "spare" => VdevKind::ReplacingOrSpare(typ.to_string()),
            "indirect" => VdevKind::Indirect,
            "dspare" => VdevKind::DraidSpare { spare_id: nv.get_u64("spareid").unwrap_or(0), parent: draid::Parent::default() },
            "draid" => {
                let kids = nv.get_nvlist_array("children").map_or(0, |k| k.len()) as u64;
                let get = |k: &str| nv.get_u64(k).ok_or_else(|| ZfsError::Invalid(format!("dRAID vdev {id} without {k} in its config")));
                VdevKind::Draid(draid::Config::new(get("draid_ndata")?, get("nparity")?, get("draid_nspares")?, kids, get("draid_ngroups")?)?)
            }
            other => return Err(ZfsError::Unsupported(format!("unsupported vdev type: {other}"))),
        };
        let mut children = Vec::new();
        if let Some(kids) = nv.get_nvlist_array("children") {
            if kids.len() > 1024 {
                return Err(ZfsError::Invalid("vdev with more than 1024 children".into()));
            }
            for k in kids {
                children.push(Vdev::from_config_ashift(k, devices, depth + 1, ashift)?);
            }
        }
        let (path, dev) = match kind {
            VdevKind::Leaf { .. } => {
                let found = devices.get(&guid);
                (nv.get_str("path").map(|s| s.to_string()), found.map(|(_, d)| d.clone()))
            }
            // A removed top-level vdev's place (not a missing device).
            VdevKind::Hole if typ == "hole" => (Some(HOLE.to_string()), None),
            VdevKind::DraidSpare { .. } => (nv.get_str("path").map(|s| s.to_string()), None),
            _ => (None, None),
        };
        let stats = VdevStats::default();
        if matches!(kind, VdevKind::Leaf { .. }) {
            stats.offline.store(nv.get_u64("offline").unwrap_or(0) != 0, Ordering::Relaxed);
            // vdev_alloc and vdev_load: a fault forced with `offline -f` (not -t) persists.
            if nv.get_str("aux_state") == Some("external") {
                let degraded = nv.get_u64("degraded").unwrap_or(0) != 0 && nv.get_u64("faulted").unwrap_or(0) == 0;
                stats.fault_external.store(true, Ordering::Relaxed);
                if degraded {
                    stats.degraded.store(true, Ordering::Relaxed);
                } else {
                    stats.faulted.store(true, Ordering::Relaxed);
                }
            }
            stats.dtl_object.store(nv.get_u64("DTL").unwrap_or(0), Ordering::Relaxed);
            // vdev_alloc reads ZPOOL_CONFIG_REMOVED; vdev_open keeps the leaf REMOVED while its
            // device is still absent and forgets it once the device opens.
            stats.removed.store(nv.get_u64("removed").unwrap_or(0) != 0 && dev.is_none(), Ordering::Relaxed);
        }
        let indirect = (kind == VdevKind::Indirect).then(|| {
            Arc::new(indirect::IndirectConfig::new(
                nv.get_u64("com.delphix:indirect_object").unwrap_or(0),
                nv.get_u64("com.delphix:indirect_births").unwrap_or(0),
                nv.get_u64("com.delphix:prev_indirect_vdev").unwrap_or(u64::MAX),
            ))
        });
        let vd = Arc::new(Vdev {
            id,
            guid,
            kind,
            ashift,
            asize: nv.get_u64("asize").unwrap_or(0),
            path,
            dev,
            children,
            stats,
            is_log: nv.get_u64("is_log").unwrap_or(0) != 0,
            alloc_bias: nv.get_str("alloc_bias").unwrap_or("").to_string(),
            metaslab_array: nv.get_u64("metaslab_array").unwrap_or(0),
            metaslab_shift: nv.get_u64("metaslab_shift").unwrap_or(0),
            indirect,
        });
        if let VdevKind::Draid(cfg) = &vd.kind {
            draid::adopt_spares(&vd, cfg)?;
        }
        Ok(vd)
    }

    /// Allocated bytes for `psize` physical bytes on this top-level vdev (vdev_psize_to_asize):
    /// whole sectors, plus parity and padding on raidz.
    pub fn psize_to_asize(&self, psize: u64) -> u64 {
        match self.kind {
            VdevKind::Raidz { nparity } => raidz::asize(psize, self.ashift, self.children.len(), nparity as usize),
            VdevKind::Draid(ref cfg) => cfg.asize(psize, self.ashift),
            _ => psize.div_ceil(1 << self.ashift) << self.ashift,
        }
    }

    /// vdev_is_concrete: a vdev that holds blocks of its own (not a hole, not the indirect
    /// place of a removed vdev).
    pub fn is_concrete(&self) -> bool {
        !matches!(self.kind, VdevKind::Hole | VdevKind::Indirect)
    }

    pub fn is_leaf(&self) -> bool {
        matches!(self.kind, VdevKind::Leaf { .. })
    }

    /// The name `zpool status` prints: `mirror-0`, `raidz2-1`, or the leaf's path.
    /// A top-level vdev the config names but no device was found for (not a hole).
    pub fn is_missing_top(&self) -> bool {
        self.kind == VdevKind::Hole && self.guid == 0 && self.path.as_deref() != Some(HOLE)
    }

    pub fn display_name(&self) -> String {
        match &self.kind {
            VdevKind::Root => "root".into(),
            VdevKind::Mirror => format!("mirror-{}", self.id),
            VdevKind::Raidz { nparity } => format!("raidz{}-{}", nparity, self.id),
            VdevKind::Draid(cfg) => format!("{}-{}", cfg.name(), self.id),
            VdevKind::DraidSpare { spare_id, .. } => self.path.clone().unwrap_or_else(|| format!("dspare-{spare_id}")),
            VdevKind::ReplacingOrSpare(t) => format!("{t}-{}", self.id),
            VdevKind::Hole => format!("hole-{}", self.id),
            VdevKind::Indirect => format!("indirect-{}", self.id),
            VdevKind::Leaf { .. } => match (&self.dev, &self.path) {
                (Some(d), _) => d.name(),
                (None, Some(p)) => p.clone(),
                (None, None) => format!("{}", self.guid),
            },
        }
    }

    /// Health from what is present: missing leaves, and how many a parent can lose.
    pub fn state(&self) -> VdevState {
        match &self.kind {
            VdevKind::Leaf { .. } => {
                if self.stats.offline.load(Ordering::Relaxed) {
                    VdevState::Offline
                } else if self.stats.removed.load(Ordering::Relaxed) {
                    VdevState::Removed
                } else if self.dev.is_none() {
                    VdevState::Unavail
                } else if self.stats.faulted.load(Ordering::Relaxed) {
                    VdevState::Faulted
                } else if self.stats.degraded.load(Ordering::Relaxed) {
                    VdevState::Degraded
                } else {
                    VdevState::Online
                }
            }
            VdevKind::Hole | VdevKind::Indirect => VdevState::Online,
            VdevKind::DraidSpare { parent, .. } => {
                if parent.get().is_some() {
                    VdevState::Online
                } else {
                    VdevState::Unavail
                }
            }
            _ => {
                let bad = self.children.iter().filter(|c| matches!(c.state(), VdevState::Unavail | VdevState::Faulted | VdevState::Offline | VdevState::Removed)).count();
                let degraded = self.children.iter().any(|c| c.state() == VdevState::Degraded);
                let tolerance = match self.kind {
                    VdevKind::Root => 0,
                    VdevKind::Mirror | VdevKind::ReplacingOrSpare(_) => self.children.len().saturating_sub(1),
                    VdevKind::Raidz { nparity } => nparity as usize,
                    VdevKind::Draid(ref cfg) => cfg.nparity as usize,
                    _ => 0,
                };
                if bad == 0 && !degraded {
                    VdevState::Online
                } else if bad <= tolerance && (self.kind != VdevKind::Root || bad == 0) {
                    VdevState::Degraded
                } else if self.kind == VdevKind::Root {
                    VdevState::Unavail
                } else {
                    VdevState::Unavail
                }
            }
        }
    }

    /// Read `size` bytes at `offset` of this vdev's address space, accepting the first copy or
    /// reconstruction for which `verify` returns true. When no candidate verifies, returns the
    /// checksum error; when devices fail, the I/O error.
    pub fn read(&self, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<Vec<u8>> {
        self.read_mode(offset, size, verify, &READ_PLAIN)
    }

    /// `read`, repairing bad copies and checking every copy as `mode` says.
    pub fn read_mode(&self, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool, mode: &ReadMode) -> Result<Vec<u8>> {
        match &self.kind {
            VdevKind::Leaf { .. } => {
                let data = if mode.direct && size >= DIRECT_READ_MIN { self.read_leaf_direct(offset, size)? } else { self.read_leaf(offset, size)? };
                if verify(&data) {
                    Ok(data)
                } else {
                    self.stats.count_cksum_error();
                    Err(ZfsError::Checksum { context: format!("vdev {} offset {offset:#x} size {size:#x}", self.display_name()) })
                }
            }
            VdevKind::Mirror | VdevKind::ReplacingOrSpare(_) => self.read_mirror(offset, size, verify, mode),
            VdevKind::Raidz { nparity } => raidz::read(self, *nparity, offset, size, verify, mode),
            VdevKind::Draid(cfg) => draid::read(self, cfg, offset, size, verify, mode),
            VdevKind::DraidSpare { spare_id, parent } => draid::read_spare(self, *spare_id, parent, offset, size, verify, mode),
            VdevKind::Hole | VdevKind::Root | VdevKind::Indirect => Err(ZfsError::Invalid(format!("read from a {:?} vdev", self.kind))),
        }
    }

    /// Write `data` (a multiple of the sector size) at `offset` of this vdev's address space:
    /// every mirror child, or the raidz columns with parity. Missing children of a redundant
    /// vdev are skipped (counted as write errors); the write fails only when no copy landed.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_with(offset, data, WriteMode::Cached)
    }

    /// `write` with every leaf's write past the page cache where it can be
    /// (`write_leaf_direct`): a device removal's copies, which nothing reads soon.
    pub fn write_direct(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_with(offset, data, WriteMode::Direct)
    }

    fn write_with(&self, offset: u64, data: &[u8], mode: WriteMode) -> Result<()> {
        match &self.kind {
            VdevKind::Leaf { .. } => self.write_leaf_buf(offset, data, mode),
            VdevKind::Mirror | VdevKind::ReplacingOrSpare(_) => {
                let mut ok = 0;
                let mut last = None;
                for c in &self.children {
                    match c.write_with(offset, data, mode) {
                        Ok(()) => ok += 1,
                        Err(e) => last = Some(e),
                    }
                }
                if ok > 0 {
                    Ok(())
                } else {
                    Err(last.unwrap_or_else(|| ZfsError::Invalid("mirror without children".into())))
                }
            }
            VdevKind::Raidz { nparity } => {
                let map = raidz::map(offset, data.len() as u64, self.ashift, self.children.len(), *nparity as usize)?;
                let cols = map.columns(data)?;
                let mut failed = 0;
                for (c, col) in map.cols.iter().zip(cols.iter()) {
                    if self.children[c.devidx].write_with(c.offset, col, mode).is_err() {
                        failed += 1;
                    }
                }
                if failed > *nparity as usize {
                    return Err(ZfsError::Unavailable(format!("raidz {}: {failed} columns failed to write", self.display_name())));
                }
                Ok(())
            }
            // A pool with dRAID vdevs is imported read-only (spa_load refuses it read-write).
            VdevKind::Draid(cfg) => Err(ZfsError::Unsupported(format!("writing to dRAID vdev {}-{} is not supported", cfg.name(), self.id))),
            VdevKind::DraidSpare { .. } => Err(ZfsError::Unsupported(format!("writing to dRAID spare {} is not supported", self.display_name()))),
            VdevKind::Hole | VdevKind::Root | VdevKind::Indirect => Err(ZfsError::Invalid(format!("write to a {:?} vdev", self.kind))),
        }
    }

    /// A leaf taken out of use by a command: offline, or faulted by `zpool offline -f` (it
    /// is neither read nor written; each txg it misses goes into its DTL).
    pub fn out_of_use(&self) -> bool {
        self.stats.offline.load(Ordering::Relaxed)
            || self.stats.removed.load(Ordering::Relaxed)
            || (self.stats.fault_external.load(Ordering::Relaxed) && self.stats.faulted.load(Ordering::Relaxed))
    }

    /// A leaf whose device went away (spa_async_remove): REMOVED from now on, its error
    /// counts cleared as OpenZFS clears them. True when this call made it so.
    pub fn set_removed(&self) -> bool {
        if !self.is_leaf() || self.stats.removed.swap(true, Ordering::Relaxed) {
            return false;
        }
        *self.stats.removed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
        for n in [&self.stats.read_errors, &self.stats.write_errors, &self.stats.cksum_errors] {
            n.store(0, Ordering::Relaxed);
        }
        tracing::warn!("vdev {} (guid {}) was removed: its device is gone", self.display_name(), self.guid);
        true
    }

    /// After a real I/O error of this leaf's device (not an injected one): ENXIO or ENODEV,
    /// or a path that no longer names the device, means the device went away
    /// (vdev_disk_io_done's revalidation after EIO); the leaf becomes REMOVED.
    fn check_removed(&self, dev: &dyn BlockDevice, e: &std::io::Error) {
        if matches!(e.raw_os_error(), Some(libc::ENXIO | libc::ENODEV)) || dev.gone() {
            self.set_removed();
        }
    }

    /// Raw write to a leaf, after the front labels.
    pub fn write_leaf(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_leaf_buf(offset, data, WriteMode::Cached)
    }

    /// `write_leaf`, durable when it returns (`BlockDevice::write_sync`, or a write and a
    /// flush of the device): an intent-log block alone on its vdev.
    pub fn write_leaf_sync(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_leaf_buf(offset, data, WriteMode::Sync)
    }

    /// `write_leaf` past the page cache where the device allows it (`BlockDevice::write_direct`:
    /// `data`'s address, `offset` and the length aligned to `DIRECT_ALIGN`), through it where
    /// not: a resilver's writes of the new side, which nothing reads soon.
    pub fn write_leaf_direct(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_leaf_buf(offset, data, WriteMode::Direct)
    }

    fn write_leaf_buf(&self, offset: u64, data: &[u8], mode: WriteMode) -> Result<()> {
        if self.out_of_use() {
            // Not an error of the device: its DTL records what it misses.
            let why = if self.stats.removed.load(Ordering::Relaxed) { "removed" } else { "offline" };
            return Err(ZfsError::Unavailable(format!("{} is {why}", self.display_name())));
        }
        let dev = self.dev.as_ref().ok_or_else(|| ZfsError::Io {
            device: self.display_name(),
            offset,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "device is missing"),
        })?;
        let phys = offset.checked_add(VDEV_LABEL_START_SIZE).ok_or_else(|| ZfsError::Invalid("offset overflow".into()))?;
        if phys + data.len() as u64 > dev.size() {
            return Err(ZfsError::Invalid(format!("write of {} bytes at {phys:#x} past the end of {}", data.len(), dev.name())));
        }
        self.stats.write_ops.fetch_add(1, Ordering::Relaxed);
        self.stats.write_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        let _io = self.stats.ex.begin(true, data.len() as u64);
        let injected = match inject::check(self.guid, true) {
            Some(inject::DevError::Io) => Err(std::io::Error::from_raw_os_error(libc::EIO)),
            Some(inject::DevError::Nxio) => Err(std::io::Error::from_raw_os_error(libc::ENXIO)),
            _ => Ok(()),
        };
        let write = || match mode {
            WriteMode::Direct => dev.write_direct(data, phys).and_then(|done| if done { Ok(()) } else { dev.write_at(data, phys) }),
            WriteMode::Sync => dev.write_sync(data, phys).and_then(|done| if done { Ok(()) } else { dev.write_at(data, phys).and_then(|_| dev.flush()) }),
            WriteMode::Cached => dev.write_at(data, phys),
        };
        let was_injected = injected.is_err();
        injected.and_then(|_| write()).map_err(|e| {
            self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            self.stats.write_failed.store(true, Ordering::Relaxed);
            if !was_injected {
                self.check_removed(dev.as_ref(), &e);
            }
            ZfsError::Io { device: dev.name(), offset: phys, source: e }
        })
    }

    /// This leaf's manual TRIM state (a copy).
    pub fn trim_stat(&self) -> TrimStat {
        *self.stats.trim.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replace this leaf's manual TRIM state.
    pub fn set_trim_stat(&self, t: TrimStat) {
        *self.stats.trim.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }

    /// TRIM `[offset, offset + len)` of this leaf's allocatable space (the labels' and boot
    /// region's offset added, as for writes): Ok(false) when the device cannot.
    pub fn trim_leaf(&self, offset: u64, len: u64, secure: bool) -> Result<bool> {
        let dev = self.dev.as_ref().filter(|_| !self.out_of_use()).ok_or_else(|| ZfsError::Unavailable(format!("{} is not available", self.display_name())))?;
        let phys = offset.checked_add(VDEV_LABEL_START_SIZE).ok_or_else(|| ZfsError::Invalid("offset overflow".into()))?;
        if phys.saturating_add(len) > dev.size() {
            return Err(ZfsError::Invalid(format!("trim of {len} bytes at {phys:#x} past the end of {}", dev.name())));
        }
        dev.trim(phys, len, secure).map_err(|e| ZfsError::Io { device: dev.name(), offset: phys, source: e })
    }

    /// Copy `size` bytes at `offset` of this leaf to `dst_offset` of leaf `dst` inside the
    /// kernel (copy_file_range: one copy through the page cache, none through this process),
    /// counted in both leaves' statistics as the read and the write it replaces. Ok(false)
    /// when the kernel cannot (not two regular files, another file system's refusal), before
    /// anything was written: the caller copies through memory instead. Not under fault
    /// injection, whose errors only the read and write paths make.
    pub fn copy_leaf_to(&self, offset: u64, dst: &Vdev, dst_offset: u64, size: u64) -> Result<bool> {
        let (Some(sdev), Some(ddev)) = (self.dev.as_ref(), dst.dev.as_ref()) else { return Ok(false) };
        let (Some(sfd), Some(dfd)) = (sdev.file_fd(), ddev.file_fd()) else { return Ok(false) };
        if inject::any() || self.out_of_use() || dst.out_of_use() {
            return Ok(false);
        }
        let (from, to) = (offset + VDEV_LABEL_START_SIZE, dst_offset + VDEV_LABEL_START_SIZE);
        if from + size > sdev.size() || to + size > ddev.size() {
            return Err(ZfsError::Invalid(format!("copy of {size} bytes from {from:#x} of {} to {to:#x} of {} is past an end", sdev.name(), ddev.name())));
        }
        self.stats.read_ops.fetch_add(1, Ordering::Relaxed);
        self.stats.read_bytes.fetch_add(size, Ordering::Relaxed);
        dst.stats.write_ops.fetch_add(1, Ordering::Relaxed);
        dst.stats.write_bytes.fetch_add(size, Ordering::Relaxed);
        let (_r, _w) = (self.stats.ex.begin(false, size), dst.stats.ex.begin(true, size));
        let (mut off_in, mut off_out, mut left) = (from as libc::loff_t, to as libc::loff_t, size as usize);
        while left > 0 {
            let n = unsafe { libc::copy_file_range(sfd, &mut off_in, dfd, &mut off_out, left, 0) };
            if n > 0 {
                left -= n as usize;
                continue;
            }
            let e = if n == 0 { std::io::Error::from_raw_os_error(libc::EIO) } else { std::io::Error::last_os_error() };
            match e.raw_os_error() {
                Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) if left == size as usize => return Ok(false),
                _ => {
                    self.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    return Err(ZfsError::Io { device: format!("{} -> {}", sdev.name(), ddev.name()), offset: off_in as u64, source: e });
                }
            }
        }
        Ok(true)
    }

    /// Like `write`, with a mirror's sides written side by side (an intent-log commit waits
    /// for its write: on slow disks the sides' latencies would add up).
    pub fn write_parallel(&self, offset: u64, data: &[u8]) -> Result<()> {
        if self.kind != VdevKind::Mirror || self.children.len() < 2 {
            return self.write(offset, data);
        }
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            // The sides' threads count their writes in this thread's class (an intent-log
            // commit's are sync writes).
            let class = iostat::current_class();
            let write = move |c: &Arc<Vdev>| iostat::in_class(class, || c.write(offset, data));
            let hs: Vec<_> = self.children.iter().map(|c| s.spawn(move || write(c))).collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(ZfsError::Invalid("mirror side write panicked".into())))).collect()
        });
        let ok = results.iter().filter(|r| r.is_ok()).count();
        if ok > 0 {
            return Ok(());
        }
        results.into_iter().find_map(|r| r.err()).map_or(Ok(()), Err)
    }

    /// `BlockDevice::fill_holes` of `[offset, offset + len)` of this vdev's address space on
    /// every leaf holding it as is (a leaf, a mirror's sides); raidz, whose columns map
    /// elsewhere, is left alone. The range must be free or the caller's: zeros go where a
    /// sparse file has never been written, so what it reads stays the same, but a write into
    /// the same hole meanwhile could land under them. Not counted as I/O (nothing of the
    /// pool's is written); failures are ignored (nothing depends on it but speed).
    pub fn fill_holes(&self, offset: u64, len: u64) {
        match &self.kind {
            VdevKind::Leaf { .. } => {
                let Some(dev) = self.dev.as_ref().filter(|_| !self.out_of_use() && !inject::any()) else { return };
                if let Some(phys) = offset.checked_add(VDEV_LABEL_START_SIZE) {
                    let _ = dev.fill_holes(phys, len);
                }
            }
            VdevKind::Mirror | VdevKind::ReplacingOrSpare(_) => self.children.iter().for_each(|c| c.fill_holes(offset, len)),
            _ => {}
        }
    }

    /// Flush every leaf below at once, each on its own thread (the intent log's flush).
    pub fn flush_parallel(&self) -> Result<()> {
        let leaves: Vec<_> = self.leaves().into_iter().filter(|l| !l.stats.removed.load(Ordering::Relaxed)).filter_map(|l| l.dev.clone()).collect();
        if leaves.len() < 2 {
            return self.flush();
        }
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let hs: Vec<_> = leaves.iter().map(|d| s.spawn(move || d.flush().map_err(|e| ZfsError::Io { device: d.name(), offset: 0, source: e }))).collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(ZfsError::Invalid("flush panicked".into())))).collect()
        });
        results.into_iter().collect()
    }

    /// Flush every leaf below, a failing one counted in its write errors and passed over
    /// (the txg sync's barriers: its writes report a device that fails).
    pub fn flush_all(&self) {
        let _ = self.flush_any();
    }

    /// `flush_all`, failing when no leaf with a device flushed (the last error): the writes
    /// before it are then on stable storage nowhere. A txg sync's flushes around its
    /// uberblocks: a device lost with its side of a mirror does not stop the pool, but a
    /// sync whose every flush failed (a lone disk gone, the power cut) is not on disk and
    /// must not be reported synced — nor an fsync that waited for it acknowledged.
    pub fn flush_any(&self) -> Result<()> {
        let (mut good, mut err) = (0usize, None);
        for l in self.leaves().into_iter().filter(|l| !l.stats.removed.load(Ordering::Relaxed)) {
            if let Some(d) = &l.dev {
                match d.flush() {
                    Ok(()) => good += 1,
                    Err(e) => {
                        l.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                        err = Some(ZfsError::Io { device: d.name(), offset: 0, source: e });
                    }
                }
            }
        }
        match err {
            Some(e) if good == 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// Flush every leaf below (write cache barrier).
    pub fn flush(&self) -> Result<()> {
        for l in self.leaves().into_iter().filter(|l| !l.stats.removed.load(Ordering::Relaxed)) {
            if let Some(d) = &l.dev {
                d.flush().map_err(|e| ZfsError::Io { device: d.name(), offset: 0, source: e })?;
            }
        }
        Ok(())
    }

    /// Raw read from a leaf (no verification), counting I/O errors.
    pub fn read_leaf(&self, offset: u64, size: u64) -> Result<Vec<u8>> {
        if size > 64 << 20 {
            return Err(ZfsError::Invalid(format!("read of {size} bytes is larger than any block")));
        }
        let mut buf = vec![0u8; size as usize];
        self.read_leaf_into(offset, &mut buf)?;
        Ok(buf)
    }

    /// `read_leaf` past the page cache where the device can (`BlockDevice::read_direct`):
    /// read into an aligned place of a buffer a little larger, then moved to its start.
    pub fn read_leaf_direct(&self, offset: u64, size: u64) -> Result<Vec<u8>> {
        if size > 64 << 20 {
            return Err(ZfsError::Invalid(format!("read of {size} bytes is larger than any block")));
        }
        let size = size as usize;
        let mut buf = vec![0u8; size + DIRECT_ALIGN];
        let p = buf.as_ptr().align_offset(DIRECT_ALIGN);
        self.read_leaf_as(offset, &mut buf[p..p + size], true)?;
        if p > 0 {
            buf.copy_within(p..p + size, 0);
        }
        buf.truncate(size);
        buf.shrink_to_fit();
        Ok(buf)
    }

    /// `read_leaf` into the caller's buffer (the sorted scan reuses its range buffers).
    pub fn read_leaf_into(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_leaf_as(offset, buf, false)
    }

    /// `read_leaf_into`, past the page cache if `direct` and the device can.
    fn read_leaf_as(&self, offset: u64, buf: &mut [u8], direct: bool) -> Result<()> {
        let size = buf.len() as u64;
        let dev = self.dev.as_ref().ok_or_else(|| ZfsError::Io {
            device: self.display_name(),
            offset,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "device is missing"),
        })?;
        let phys = offset.checked_add(VDEV_LABEL_START_SIZE).ok_or_else(|| ZfsError::Invalid("offset overflow".into()))?;
        if self.stats.removed.load(Ordering::Relaxed) {
            // No I/O is issued to a removed leaf (vdev_accessible): ENXIO, not counted.
            return Err(ZfsError::Io { device: dev.name(), offset: phys, source: std::io::Error::from_raw_os_error(libc::ENXIO) });
        }
        self.stats.read_ops.fetch_add(1, Ordering::Relaxed);
        self.stats.read_bytes.fetch_add(size, Ordering::Relaxed);
        let io = self.stats.ex.begin(false, size);
        let (res, injected) = match inject::check(self.guid, false) {
            Some(inject::DevError::Io) => (Err(std::io::Error::from_raw_os_error(libc::EIO)), true),
            Some(inject::DevError::Nxio) => (Err(std::io::Error::from_raw_os_error(libc::ENXIO)), true),
            Some(inject::DevError::Corrupt) => (dev.read_at(buf, phys).map(|_| inject::corrupt(buf)), false),
            None if direct => match dev.read_direct(buf, phys) {
                Ok(true) => (Ok(()), false),
                Ok(false) => (dev.read_at(buf, phys), false),
                Err(e) => (Err(e), false),
            },
            None => (dev.read_at(buf, phys), false),
        };
        drop(io);
        match res {
            Ok(()) => Ok(()),
            Err(e) => {
                self.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                if !injected {
                    self.check_removed(dev.as_ref(), &e);
                }
                Err(ZfsError::Io { device: dev.name(), offset: phys, source: e })
            }
        }
    }

    /// A mirror's read (vdev_mirror_io_start/done): children in order until one verifies (a
    /// scrub reads them all); the children that failed get the good bytes when `mode` repairs.
    fn read_mirror(&self, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool, mode: &ReadMode) -> Result<Vec<u8>> {
        let mut last_err = None;
        let mut good: Option<Vec<u8>> = None;
        let mut bad = Vec::new();
        // Children that lack some txgs (a DTL not empty) are read last, only when no
        // up-to-date child gave the block (vdev_mirror_dtl_check); a resilver writes them.
        let usable = |c: &&Arc<Vdev>| !matches!(c.state(), VdevState::Unavail | VdevState::Offline) && !c.out_of_use();
        let fresh: Vec<&Arc<Vdev>> = self.children.iter().filter(usable).filter(|c| !c.is_stale()).collect();
        let stale: Vec<&Arc<Vdev>> = self.children.iter().filter(usable).filter(|c| c.is_stale()).collect();
        // A resilver (and a repairing scrub, which covers every txg) reads a stale child only
        // through it (a replacing vdev whose old side is whole), never a stale leaf, and
        // writes the block to the stale leaves (vdev_mirror_child_missing: no CKSUM error).
        let heal_stale = mode.resilver || (mode.scrub && mode.repair);
        let readable_stale = stale.iter().filter(|c| !(heal_stale && c.is_leaf()));
        let mut source = None;
        for child in fresh.iter().chain(readable_stale) {
            if good.is_some() && (!mode.scrub || mode.resilver) {
                break;
            }
            match child.read_mode(offset, size, verify, mode) {
                Ok(d) => {
                    if good.is_none() {
                        source = Some(child.guid);
                    }
                    good.get_or_insert(d);
                }
                Err(e) => {
                    bad.push(*child);
                    last_err = Some(e);
                }
            }
        }
        if let Some(d) = good {
            if mode.repair {
                for c in bad {
                    c.repair_write(offset, &d, mode);
                }
            }
            if heal_stale {
                for c in stale.into_iter().filter(|c| Some(c.guid) != source) {
                    c.resilver_write(offset, &d, mode);
                }
            }
            return Ok(d);
        }
        Err(last_err.unwrap_or_else(|| ZfsError::Io {
            device: self.display_name(),
            offset,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no child of the mirror is available"),
        }))
    }

    /// A resilver's write of a mirror's block: to the leaves below that lack txgs, not to the
    /// up-to-date ones beside them (the old side of a replacing vdev).
    fn resilver_write(&self, offset: u64, data: &[u8], mode: &ReadMode) {
        match self.kind {
            VdevKind::Mirror | VdevKind::ReplacingOrSpare(_) => {
                for c in self.children.iter().filter(|c| c.is_stale()) {
                    c.resilver_write(offset, data, mode);
                }
            }
            _ => self.repair_write(offset, data, mode),
        }
    }

    /// Some leaf below lacks txgs its siblings have (its DTL is not empty).
    pub fn is_stale(&self) -> bool {
        if self.is_leaf() {
            self.stats.stale()
        } else {
            self.children.iter().any(|c| c.is_stale())
        }
    }

    /// A repair write (ZIO_FLAG_IO_REPAIR): the good bytes of a block over a copy that failed
    /// its read. Its bytes on the leaves count in `mode.repaired`; a failure counts as a WRITE
    /// error on the leaf and leaves the copy as it was.
    pub fn repair_write(&self, offset: u64, data: &[u8], mode: &ReadMode) {
        if self.write(offset, data).is_ok() {
            let on_leaves = match self.kind {
                VdevKind::Leaf { .. } => {
                    self.stats.scan_processed.fetch_add(data.len() as u64, Ordering::Relaxed);
                    data.len() as u64
                }
                VdevKind::Raidz { .. } => self.psize_to_asize(data.len() as u64),
                _ => data.len() as u64 * self.leaves().iter().filter(|l| l.dev.is_some()).count() as u64,
            };
            mode.repaired.fetch_add(on_leaves, Ordering::Relaxed);
        }
    }

    /// `zpool clear` (vdev_clear): the READ, WRITE and CKSUM counts of this vdev and every
    /// vdev below it back to zero.
    pub fn clear_errors(&self) {
        for c in &self.children {
            c.clear_errors();
        }
        for n in [&self.stats.read_errors, &self.stats.write_errors, &self.stats.cksum_errors] {
            n.store(0, Ordering::Relaxed);
        }
        self.stats.faulted.store(false, Ordering::Relaxed);
    }

    /// The vdev `name` names, as zpool_find_vdev finds it: a path, a leaf's file name, a guid,
    /// or an interior vdev's name (mirror-0, raidz1-1).
    pub fn find(&self, name: &str) -> Option<&Vdev> {
        let base = |p: &str| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy() == name);
        let hit = self.kind != VdevKind::Root
            && (self.display_name() == name || self.guid.to_string() == name || self.path.as_deref().is_some_and(|p| p == name || base(p)));
        if hit {
            return Some(self);
        }
        self.children.iter().find_map(|c| c.find(name))
    }

    /// Whether this vdev or one below it is `f`.
    pub fn any(&self, f: &dyn Fn(&Vdev) -> bool) -> bool {
        f(self) || self.children.iter().any(|c| c.any(f))
    }

    /// Every leaf below this vdev, depth first.
    pub fn leaves(&self) -> Vec<&Vdev> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(v) = stack.pop() {
            if v.is_leaf() {
                out.push(v);
            }
            for c in v.children.iter().rev() {
                stack.push(c);
            }
        }
        out
    }
}

/// The deflate ratio of a top-level vdev (vdev_set_deflate_ratio): 512-byte units of
/// usable space per 512-byte unit allocated, times 512, measured on a 128 KiB block.
pub fn deflate_ratio(top: &crate::vdev::Vdev) -> u64 {
    let psize = 1u64 << 17;
    let asize = match top.kind {
        VdevKind::Raidz { nparity } => raidz_asize(psize, top.ashift, top.children.len() as u64, nparity as u64),
        VdevKind::Draid(ref cfg) => cfg.asize(psize, top.ashift),
        _ => {
            let a = 1u64 << top.ashift.min(17);
            psize.div_ceil(a) * a
        }
    };
    (1 << 17) / (asize >> 9).max(1)
}

/// vdev_raidz_asize: sectors of data, plus parity per row, rounded up to a multiple of
/// nparity + 1 sectors.
pub fn raidz_asize(psize: u64, ashift: u8, cols: u64, nparity: u64) -> u64 {
    if cols <= nparity || psize == 0 {
        return psize;
    }
    let mut asize = ((psize - 1) >> ashift) + 1;
    asize += nparity * asize.div_ceil(cols - nparity);
    asize.div_ceil(nparity + 1) * (nparity + 1) << ashift
}

/// The smallest allocation of the pool: one sector of its top-level vdev with the smallest
/// ashift (holes, which have none, left out).
pub fn min_alloc(root: &Vdev) -> u64 {
    root.children.iter().filter(|c| c.kind != VdevKind::Hole && c.kind != VdevKind::Indirect && c.ashift > 0).map(|c| 1u64 << c.ashift).min().unwrap_or(512)
}

pub(crate) fn guid_sum(v: &Vdev) -> u64 {
    v.children.iter().fold(v.guid, |a, c| a.wrapping_add(guid_sum(c)))
}

pub(crate) fn leaf_ashift(root: &Vdev, leaf: &Vdev) -> u8 {
    for top in &root.children {
        if top.leaves().iter().any(|l| std::ptr::eq(*l, leaf)) {
            return top.ashift;
        }
    }
    leaf.ashift
}

/// A vdev of `kind` for the tests (guid 100 + id, no config behind it).
#[cfg(test)]
pub(crate) fn test_node(id: u64, kind: VdevKind, ashift: u8, dev: Option<Arc<dyn BlockDevice>>, children: Vec<Arc<Vdev>>) -> Vdev {
    Vdev {
        id,
        guid: 100 + id,
        kind,
        ashift,
        asize: 0,
        path: None,
        dev,
        children,
        stats: VdevStats::default(),
        is_log: false,
        alloc_bias: String::new(),
        metaslab_array: 0,
        metaslab_shift: 0,
        indirect: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holes(f: &File, from: u64, to: u64) -> bool {
        use std::os::fd::AsRawFd;
        let h = unsafe { libc::lseek(f.as_raw_fd(), from as libc::off_t, libc::SEEK_HOLE) };
        h >= 0 && (h as u64) < to
    }

    /// A leaf's reads past the page cache read what buffered reads do, bytes still dirty in
    /// the page cache included (the kernel writes them back before an O_DIRECT read); a
    /// buffer, offset or length off the alignment is left to `read_at`.
    #[test]
    fn direct_reads_read_what_buffered_reads_do() {
        let path = std::env::temp_dir().join(format!("oxzfs-dio-{}-{:?}", std::process::id(), std::thread::current().id()));
        std::fs::write(&path, oxzfs_format::compress::xorshift_noise(5, 8 << 20)).unwrap();
        let dev = Arc::new(FileDevice::open(&path, true).unwrap());
        dev.write_at(&[3u8; 5000], VDEV_LABEL_START_SIZE + (1 << 20) + 100).unwrap();
        let direct = dev.direct.is_some();
        // Bytes the page cache holds are read from there (read_direct declines them).
        let mut b = vec![0u8; 3 * DIRECT_ALIGN];
        let p = b.as_ptr().align_offset(DIRECT_ALIGN);
        dev.read_at(&mut b[p..p + DIRECT_ALIGN], 2 << 20).unwrap();
        if dev.map.is_some() {
            assert!(!dev.read_direct(&mut b[p..p + DIRECT_ALIGN], 2 << 20).unwrap(), "in the page cache");
        }
        let f = File::open(&path).unwrap();
        f.sync_all().unwrap();
        // SAFETY: advice on a descriptor we own (the written-back pages leave the cache).
        unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let leaf = test_node(0, VdevKind::Leaf { disk: false }, 12, Some(dev.clone() as Arc<dyn BlockDevice>), vec![]);
        for (offset, size) in [(1 << 20, 128 << 10), (0, 64 << 10), (3 << 20, 1 << 20), (4096, 132 << 10), ((1 << 20) + 512, 128 << 10), ((2 << 20) + 1536, 70 << 10)] {
            assert_eq!(leaf.read_leaf_direct(offset, size).unwrap(), leaf.read_leaf(offset, size).unwrap(), "{offset:#x}+{size:#x}");
        }
        f.sync_all().unwrap();
        // SAFETY: as above.
        unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(dev.read_direct(&mut b[p..p + DIRECT_ALIGN], 1 << 20).unwrap(), direct, "aligned: past the page cache where the file system can");
        assert!(!dev.read_direct(&mut b[p + 1..p + 1 + DIRECT_ALIGN], 1 << 20).unwrap(), "a buffer off the alignment");
        assert!(!dev.read_direct(&mut b[p..p + DIRECT_ALIGN], (1 << 20) + 256).unwrap(), "an offset off the alignment");
        // A pool of ashift 9 has its blocks on 512-byte boundaries: read past the page cache
        // where the file system takes it (statx's figure).
        if direct && dev.read_align <= 512 {
            assert!(dev.read_direct(&mut b[p..p + DIRECT_ALIGN], (1 << 20) + 512).unwrap());
        }
        assert!(!dev.read_direct(&mut b[p..p + DIRECT_ALIGN], 8 << 20).unwrap(), "past the end: read_at reports it");
        let _ = std::fs::remove_file(&path);
    }

    /// The intent log's hole filling leaves what the file reads as it was (zeros where it was
    /// never written, the data where it was) and no hole in the range; a durable write lands.
    #[test]
    fn filled_holes_read_the_same_and_durable_writes_land() {
        let path = std::env::temp_dir().join(format!("oxzfs-fill-{}-{:?}", std::process::id(), std::thread::current().id()));
        let f = File::create(&path).unwrap();
        f.set_len(8 << 20).unwrap();
        f.write_all_at(&[7u8; 4096], 3 << 20).unwrap();
        let dev = FileDevice::open(&path, true).unwrap();
        let before = std::fs::read(&path).unwrap();
        dev.fill_holes(2 << 20, 2 << 20).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before, "the file reads the same");
        let f = File::open(&path).unwrap();
        // (A file system without SEEK_HOLE reports no hole anywhere: nothing to fill.)
        assert!(!holes(&f, 2 << 20, 4 << 20), "no hole left in the range");
        assert!(dev.write_sync(&[9u8; 8192], 5 << 20).unwrap(), "pwritev2 with RWF_DSYNC on a file");
        let mut b = vec![0u8; 8192];
        dev.read_at(&mut b, 5 << 20).unwrap();
        assert!(b.iter().all(|&x| x == 9));
        let _ = std::fs::remove_file(&path);
    }

    /// A durable write past the page cache, on 512-byte boundaries inside pages that buffered
    /// writes have dirtied around it: every byte reads back as last written, through the page
    /// cache and from the file, and a range off every alignment still lands (buffered).
    #[test]
    fn durable_writes_past_the_page_cache_keep_their_neighbours() {
        let path = std::env::temp_dir().join(format!("oxzfs-dsync-{}-{:?}", std::process::id(), std::thread::current().id()));
        let f = File::create(&path).unwrap();
        f.set_len(4 << 20).unwrap();
        let dev = FileDevice::open(&path, true).unwrap();
        let base = (1u64 << 20) + 0xe00;
        // Buffered neighbours in the same pages, left dirty in the page cache.
        dev.write_at(&[1u8; 512], base - 512).unwrap();
        dev.write_at(&[2u8; 512], base + 8192).unwrap();
        let direct = dev.write_sync_direct(&[3u8; 8192], base).unwrap();
        if dev.direct.is_some() && dev.read_align <= 512 {
            assert_eq!(direct, Some(true), "512-aligned: past the page cache");
        }
        if direct.is_none() {
            assert!(dev.write_sync(&[3u8; 8192], base).unwrap());
        }
        assert_eq!(dev.write_sync_direct(&[4u8; 100], 3 << 20).unwrap(), None, "a length off the alignment");
        assert!(dev.write_sync(&[4u8; 100], (3 << 20) + 7).unwrap(), "buffered when it cannot go direct");
        let check = |what: &str, b: &[u8]| {
            let at = |o: u64| b[(o - (base - 512)) as usize];
            assert_eq!(at(base - 512), 1, "{what}: the buffered neighbour before");
            assert_eq!(at(base - 1), 1, "{what}");
            assert!((base..base + 8192).all(|o| at(o) == 3), "{what}: the durable write");
            assert_eq!(at(base + 8192), 2, "{what}: the buffered neighbour after");
        };
        let mut b = vec![0u8; 8192 + 1024];
        dev.read_at(&mut b, base - 512).unwrap();
        check("through the page cache", &b);
        dev.flush().unwrap();
        let whole = std::fs::read(&path).unwrap();
        check("the file", &whole[(base - 512) as usize..(base + 8192 + 512) as usize]);
        assert!(whole[(3 << 20) + 7..(3 << 20) + 107].iter().all(|&x| x == 4));
        let _ = std::fs::remove_file(&path);
    }
}
