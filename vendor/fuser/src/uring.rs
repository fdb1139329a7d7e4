//! FUSE over io_uring (added for oxzfs; not part of fuser 0.18.0).
//!
//! The protocol (Linux 6.14+, `/sys/module/fuse/parameters/enable_uring`): the kernel offers
//! `FUSE_OVER_IO_URING` in FUSE_INIT only while the module parameter is on; the server asks for
//! it in its reply. After the reply the server registers ring entries with
//! `IORING_OP_URING_CMD` (128-byte SQEs), command `FUSE_IO_URING_CMD_REGISTER`, on any /dev/fuse
//! fd of the connection: the SQE's `addr` points at two iovecs (the entry's header buffer,
//! `struct fuse_uring_req_header`, and its payload buffer, at least the connection's largest
//! request), its 80-byte command area holds `struct fuse_uring_cmd_req` (flags, commit id,
//! queue id). There is one queue per possible CPU; a request goes to the queue of the CPU its
//! caller runs on, and until every queue has an entry the kernel holds requests back (a failed
//! registration turns the ring off for the connection and lets them go to /dev/fuse).
//!
//! A registered entry completes (CQE result 0) when a request lands in it: the header buffer
//! then has the `fuse_in_header` in its first 128 bytes, the operation's fixed argument (its
//! first argument, which may be empty) in the next 128, and `fuse_uring_ent_in_out` (flags,
//! commit id, payload size) after them; the remaining arguments (names, write data) are in the
//! payload buffer. The answer goes back the same way: `fuse_out_header` in the first 128 bytes,
//! everything after it in the payload buffer and its length in `payload_sz`, then
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH` with the commit id, which also hands the entry back for
//! the next request. Forgets and interrupts stay on /dev/fuse, as do notifications.
//!
//! Here: one thread per queue, bound to its CPU, waits on the queue's ring and reaps its
//! completions. It rebuilds the classic request layout in front of the payload (no copy of
//! write data) and dispatches it like a request read from /dev/fuse. A reply made on the queue
//! thread is queued on the ring and submitted with the thread's next wait (one io_uring_enter
//! for a batch). A reply made on another thread (the file system answers large reads from its
//! workers) is written into the entry and its COMMIT_AND_FETCH submitted by that thread itself,
//! the submission queue shared under a short lock (the kernel takes commands from any task of
//! the ring): the kernel then copies the answer to the caller in the replying thread's context,
//! on its CPU, instead of waking the queue thread for it (an eventfd wake-up per reply and the
//! copy on the caller's CPU, which halved sequential reads). The eventfd stays only as a
//! fallback when such a submission fails. Queue threads keep the scheduler's default time slice
//! (see `short_slice` for why not a short one). `FUSER_URING_NOBIND=1` in the environment leaves
//! the queue threads unbound, `FUSER_URING_SHORTSLICE=1` gives them the 100 us slice (both kept
//! to measure what they change).

use std::cell::Cell;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::mem::ManuallyDrop;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;

use crate::Filesystem;
use crate::ReplyEmpty;
use crate::channel::Channel;
use crate::ll::Operation;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

/// `enum fuse_uring_cmd`
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `struct fuse_uring_req_header`: in/out header, operation header, `fuse_uring_ent_in_out`.
const HDR_OP_IN: usize = 128;
const HDR_ENT: usize = 256;
const HDR_SIZE: usize = 256 + 32;
const OP_IN_MAX: usize = 128;
/// `sizeof(struct fuse_in_header)`, `sizeof(struct fuse_out_header)`
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// Where an entry's payload buffer starts in its allocation: the header buffer sits at 0 and
/// the classic request layout is rebuilt just before the payload.
const PAYLOAD_AT: usize = 4096;
/// Entries per queue.
pub(crate) const DEPTH: usize = 8;
const EVENTFD_TAG: u64 = u64::MAX;

/// Where the transport's outcome is told: `(fell_back, message)`.
#[derive(Clone, Copy)]
pub struct UringLog(pub fn(bool, &str));

impl std::fmt::Debug for UringLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UringLog")
    }
}

/// Any two loggers count as the same setting.
impl PartialEq for UringLog {
    fn eq(&self, _: &UringLog) -> bool {
        true
    }
}
impl Eq for UringLog {}

struct Ent {
    /// Header buffer at 0, payload buffer at `PAYLOAD_AT` (page aligned, zeroed).
    mem: *mut u8,
    iov: Box<[libc::iovec; 2]>,
    commit_id: AtomicU64,
    /// The request in the entry has its answer (set by the one reply that writes it).
    answered: AtomicBool,
    /// Senders alive for the entry's request (a reply not made yet).
    holders: AtomicUsize,
    /// The last command submitted for the entry (to resubmit after EAGAIN/EINTR).
    last_cmd: AtomicU32,
}

// SAFETY: the buffers are written by one side at a time: the kernel between a command's
// submission and its completion, the queue thread while it rebuilds and dispatches the request,
// the one reply (guarded by `answered`) before the commit is submitted.
unsafe impl Send for Ent {}
unsafe impl Sync for Ent {}

fn layout(payload: usize) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(PAYLOAD_AT + payload, 4096).expect("ring entry layout")
}

pub(crate) struct Queue {
    qid: u16,
    /// The queue's ring: its submission queue is written under `sq` by any thread; only the
    /// queue thread reads its completions.
    ring: ManuallyDrop<IoUring<squeue::Entry128, cqueue::Entry>>,
    sq: Mutex<()>,
    /// The connection's /dev/fuse fd (set by the queue thread before it registers).
    dev: AtomicI32,
    /// Wakes the queue thread when a reply made elsewhere could not submit its commit.
    evfd: OwnedFd,
    payload: usize,
    ents: Vec<Ent>,
}

impl Drop for Queue {
    fn drop(&mut self) {
        // The ring goes first: closing it ends the commands that point into the entries.
        // SAFETY: dropped once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        for e in &self.ents {
            // SAFETY: allocated in `Queue::new` with this layout; no sender is left (they hold the Arc).
            unsafe { std::alloc::dealloc(e.mem, layout(self.payload)) };
        }
    }
}

impl Queue {
    fn new(qid: u16, ring: IoUring<squeue::Entry128, cqueue::Entry>, payload: usize) -> io::Result<Queue> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        let evfd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut ents = Vec::with_capacity(DEPTH);
        for _ in 0..DEPTH {
            // SAFETY: non-zero size.
            let mem = unsafe { std::alloc::alloc_zeroed(layout(payload)) };
            if mem.is_null() {
                for e in &ents {
                    let e: &Ent = e;
                    unsafe { std::alloc::dealloc(e.mem, layout(payload)) };
                }
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            let iov = Box::new([
                libc::iovec { iov_base: mem.cast(), iov_len: HDR_SIZE },
                // SAFETY: inside the allocation.
                libc::iovec { iov_base: unsafe { mem.add(PAYLOAD_AT) }.cast(), iov_len: payload },
            ]);
            ents.push(Ent { mem, iov, commit_id: AtomicU64::new(0), answered: AtomicBool::new(true), holders: AtomicUsize::new(0), last_cmd: AtomicU32::new(CMD_REGISTER) });
        }
        Ok(Queue { qid, ring: ManuallyDrop::new(ring), sq: Mutex::new(()), dev: AtomicI32::new(-1), evfd, payload, ents })
    }

    fn read_u32(&self, idx: usize, off: usize) -> u32 {
        // SAFETY: off + 4 is inside the header buffer; unaligned read of plain bytes.
        unsafe { self.ents[idx].mem.add(off).cast::<u32>().read_unaligned() }
    }

    fn read_u64(&self, idx: usize, off: usize) -> u64 {
        // SAFETY: as above.
        unsafe { self.ents[idx].mem.add(off).cast::<u64>().read_unaligned() }
    }

    /// Write the answer to entry `idx` (the out header, then the payload) and queue its commit.
    fn answer(self: &Arc<Self>, idx: u32, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let ent = &self.ents[idx as usize];
        if ent.answered.swap(true, Ordering::AcqRel) {
            return Err(io::Error::other("FUSE request answered twice"));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut err = None;
        if total < OUT_HEADER {
            err = Some(libc::EIO);
        } else if total - OUT_HEADER > self.payload {
            err = Some(libc::EINVAL);
        }
        let mut at = 0usize;
        if err.is_none() {
            for b in bufs {
                let mut src: &[u8] = b;
                while !src.is_empty() {
                    // The out header goes to the header buffer, the rest to the payload.
                    let (dst, room) = if at < OUT_HEADER { (at, OUT_HEADER - at) } else { (PAYLOAD_AT + at - OUT_HEADER, usize::MAX) };
                    let n = src.len().min(room);
                    // SAFETY: dst..dst+n is inside the allocation (sizes checked above).
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ent.mem.add(dst), n) };
                    src = &src[n..];
                    at += n;
                }
            }
        } else {
            // Keep the unique from the header the reply carried, if it has one.
            let unique = bufs.first().filter(|b| b.len() >= OUT_HEADER).map_or(0, |b| u64::from_ne_bytes(b[8..16].try_into().unwrap()));
            self.write_error(idx, unique, err.unwrap());
            at = OUT_HEADER;
        }
        // SAFETY: payload_sz field of fuse_uring_ent_in_out.
        unsafe { ent.mem.add(HDR_ENT + 16).cast::<u32>().write_unaligned((at - OUT_HEADER) as u32) };
        self.commit(idx)
    }

    /// Queue the COMMIT_AND_FETCH of entry `idx` (its answer written): on the queue thread it
    /// goes with the thread's next wait; elsewhere this thread submits it now.
    fn commit(self: &Arc<Self>, idx: u32) -> io::Result<()> {
        let on_queue = ON_QUEUE.with(|q| q.get()) == Arc::as_ptr(self);
        {
            let _g = self.sq.lock().unwrap_or_else(|p| p.into_inner());
            let sqe = cmd_sqe(self.dev.load(Ordering::Acquire), self, idx as usize, CMD_COMMIT_AND_FETCH);
            // SAFETY: the submission queue is only written under `sq`; the SQE points at the
            // entry, which lives as long as the queue (and the ring with it).
            let mut sq = unsafe { self.ring.submission_shared() };
            // At most one command per entry is outstanding, and the queue holds them all.
            if unsafe { sq.push(&sqe) }.is_err() {
                return Err(io::Error::other("io_uring submission queue full"));
            }
        }
        if on_queue {
            return Ok(());
        }
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) => {
                    // Left in the queue: the queue thread submits it when woken.
                    let one = 1u64.to_ne_bytes();
                    // SAFETY: writing 8 bytes to our eventfd.
                    let _ = unsafe { libc::write(self.evfd.as_raw_fd(), one.as_ptr().cast(), 8) };
                    return Ok(());
                }
            }
        }
    }

    /// An out header with `-errno` and no payload.
    fn write_error(&self, idx: u32, unique: u64, errno: i32) {
        let mut h = [0u8; OUT_HEADER];
        h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        let ent = &self.ents[idx as usize];
        // SAFETY: the first 16 bytes of the header buffer; then payload_sz = 0.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), ent.mem, OUT_HEADER);
            ent.mem.add(HDR_ENT + 16).cast::<u32>().write_unaligned(0);
        }
    }
}

thread_local! {
    /// The queue whose thread this is (replies made here need no wake-up).
    static ON_QUEUE: Cell<*const Queue> = const { Cell::new(std::ptr::null()) };
}

/// Whether this thread is a ring's queue thread. A file system that runs requests inline
/// should not block one for long (an fsync's flush): everything else from its CPU's callers
/// waits behind it, where /dev/fuse has other session threads to go on reading requests.
pub fn on_ring_thread() -> bool {
    ON_QUEUE.with(|q| !q.get().is_null())
}

/// Where a request that came through a ring entry is answered.
#[derive(Debug)]
pub(crate) struct RingSlot {
    q: Arc<Queue>,
    idx: u32,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Queue({})", self.qid)
    }
}

impl RingSlot {
    fn new(q: Arc<Queue>, idx: u32) -> RingSlot {
        q.ents[idx as usize].holders.fetch_add(1, Ordering::AcqRel);
        RingSlot { q, idx }
    }

    pub(crate) fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.q.answer(self.idx, bufs)
    }
}

impl Clone for RingSlot {
    fn clone(&self) -> RingSlot {
        RingSlot::new(self.q.clone(), self.idx)
    }
}

impl Drop for RingSlot {
    fn drop(&mut self) {
        self.q.ents[self.idx as usize].holders.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The rings made before the FUSE_INIT reply asks for the transport (so that a machine where
/// io_uring cannot be set up never asks for it).
pub(crate) struct Prepared {
    queues: Vec<Arc<Queue>>,
    pub(crate) log: Option<UringLog>,
    /// The session's one line about the transport has been logged (by whichever queue first
    /// served a request or was refused).
    pub(crate) told: Arc<AtomicBool>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prepared({} queues)", self.queues.len())
    }
}

/// Number of possible CPUs (the kernel makes one queue for each).
fn possible_cpus() -> usize {
    if let Ok(s) = std::fs::read_to_string("/sys/devices/system/cpu/possible") {
        let last = s.trim().split(',').filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok()).max();
        if let Some(n) = last {
            return n + 1;
        }
    }
    // SAFETY: plain libc call.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    if n > 0 { n as usize } else { 1 }
}

/// Make one ring and its entries per possible CPU; `payload`: the connection's largest
/// request or answer after the headers.
pub(crate) fn prepare(payload: usize, log: Option<UringLog>) -> io::Result<Prepared> {
    let nr = possible_cpus();
    if nr > usize::from(u16::MAX) {
        return Err(io::Error::other("too many CPUs"));
    }
    let mut queues = Vec::with_capacity(nr);
    for qid in 0..nr {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().setup_cqsize(2 * (DEPTH as u32 + 1)).setup_submit_all().build((DEPTH as u32 + 1).next_power_of_two())?;
        queues.push(Arc::new(Queue::new(qid as u16, ring, payload)?));
    }
    Ok(Prepared { queues, log, told: Arc::new(AtomicBool::new(false)) })
}

fn cmd_sqe(dev: RawFd, q: &Queue, idx: usize, cmd: u32) -> squeue::Entry128 {
    let ent = &q.ents[idx];
    ent.last_cmd.store(cmd, Ordering::Relaxed);
    // struct fuse_uring_cmd_req: flags, commit_id, qid, padding.
    let mut area = [0u8; 80];
    if cmd == CMD_COMMIT_AND_FETCH {
        area[8..16].copy_from_slice(&ent.commit_id.load(Ordering::Acquire).to_ne_bytes());
    }
    area[16..18].copy_from_slice(&q.qid.to_ne_bytes());
    let mut op = opcode::UringCmd80::new(types::Fd(dev), cmd).cmd(area);
    if cmd == CMD_REGISTER {
        op = op.addr(Some(ent.iov.as_ptr() as u64));
    }
    let sqe = op.build().user_data(idx as u64);
    if cmd != CMD_REGISTER {
        return sqe;
    }
    // The registration's iovec count goes in the SQE's len (offset 24), which the opcode
    // builder does not set.
    // SAFETY: Entry128 is a repr(C) 128-byte plain-data SQE.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    unsafe { std::mem::transmute(raw) }
}

/// A registration no queue can accept (queue id out of range): the kernel answers EINVAL and
/// turns the ring off for the connection, so requests held back for it go to /dev/fuse.
fn refuse_sqe(dev: RawFd) -> squeue::Entry128 {
    let mut area = [0u8; 80];
    area[16..18].copy_from_slice(&u16::MAX.to_ne_bytes());
    let sqe = opcode::UringCmd80::new(types::Fd(dev), CMD_REGISTER).cmd(area).build().user_data(EVENTFD_TAG - 1);
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    unsafe { std::mem::transmute(raw) }
}

fn evfd_read_sqe(q: &Queue, buf: *mut u8) -> squeue::Entry128 {
    opcode::Read::new(types::Fd(q.evfd.as_raw_fd()), buf, 8).build().user_data(EVENTFD_TAG).into()
}

/// Bind this thread to CPU `cpu` (best effort).
fn bind_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays in bounds for cpu < CPU_SETSIZE.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Give this thread a short time slice (the fair scheduler's custom slice, Linux 6.12+: a
/// `sched_setattr` of SCHED_OTHER with `sched_runtime`), so that when a request wakes it on its
/// CPU it preempts the task running there at once. Not done by default (only with
/// `FUSER_URING_SHORTSLICE=1`): measured on 2 CPUs, the transports alternated
/// (bench/results/2026-11-27-fuse-uring-default.md), with the short slice one process made
/// 0.64-0.82x the creates of /dev/fuse and read sequentially at 0.81-0.95x when the benchmark
/// ran ahead of the machine's other work (nice -20); at the default slice 0.89-1.45x and
/// 1.02-1.13x, and under load no worse than with it. The likely reason: the task running on
/// the queue's CPU is mostly the caller itself, which an asynchronous request (a RELEASE at
/// close, a readahead READ) leaves running, and preempting it for each of them costs more than
/// the earlier answer saves. Best effort (older kernels ignore the runtime).
fn short_slice() {
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }
    let attr = SchedAttr { size: std::mem::size_of::<SchedAttr>() as u32, policy: libc::SCHED_OTHER as u32, flags: 0, nice: 0, priority: 0, runtime: 100_000, deadline: 0, period: 0 };
    // SAFETY: sched_setattr(0 = this thread, a valid sched_attr of its stated size, no flags).
    let _ = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
}

impl Prepared {
    pub(crate) fn into_queues(self) -> Vec<Arc<Queue>> {
        self.queues
    }
}

/// Serve queue `q` on this thread until the connection ends (every entry returned with an
/// error). `ch` is the session's /dev/fuse channel.
pub(crate) fn serve<FS: Filesystem>(q: Arc<Queue>, ch: Channel, se: SessionEventLoop<FS>, log: Option<UringLog>, told: Arc<AtomicBool>) -> io::Result<()> {
    let dev = ch.as_fd().as_raw_fd();
    q.dev.store(dev, Ordering::Release);
    let ring = &*q.ring;
    if std::env::var_os("FUSER_URING_NOBIND").is_none() {
        bind_cpu(usize::from(q.qid));
    }
    if std::env::var_os("FUSER_URING_SHORTSLICE").is_some() {
        short_slice();
    }
    ON_QUEUE.with(|c| c.set(Arc::as_ptr(&q)));
    let mut evbuf = Box::new([0u8; 8]);
    let mut sqes: Vec<squeue::Entry128> = (0..q.ents.len()).map(|i| cmd_sqe(dev, &q, i, CMD_REGISTER)).collect();
    sqes.push(evfd_read_sqe(&q, evbuf.as_mut_ptr()));
    let mut live = q.ents.len();
    let mut served = 0u64;
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(2 * (DEPTH + 1));
    let mut scratch: Vec<u64> = Vec::new();
    loop {
        if !sqes.is_empty() {
            let _g = q.sq.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: the submission queue is only written under `sq`.
            let mut sq = unsafe { ring.submission_shared() };
            for s in sqes.drain(..) {
                // SAFETY: every buffer an SQE points at (iovecs, entry memory, evbuf) lives as
                // long as the queue/this function; at most DEPTH + 1 commands are outstanding.
                if unsafe { sq.push(&s) }.is_err() {
                    return Err(io::Error::other("io_uring submission queue full"));
                }
            }
        }
        // Submits what is queued (this thread's commands and replies, and any another thread
        // queued and has not submitted yet: the kernel takes each once) and waits.
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) || e.raw_os_error() == Some(libc::EBUSY) => continue,
            Err(e) => {
                if served == 0 {
                    // Nothing registered for sure: make the kernel give up on the ring.
                    let _g = q.sq.lock().unwrap_or_else(|p| p.into_inner());
                    // SAFETY: written under `sq`.
                    let mut sq = unsafe { ring.submission_shared() };
                    let _ = unsafe { sq.push(&refuse_sqe(dev)) };
                    drop(sq);
                    let _ = ring.submit();
                }
                return Err(e);
            }
        }
        cqes.clear();
        // SAFETY: only this thread reads the completion queue.
        cqes.extend(unsafe { ring.completion_shared() }.map(|c| (c.user_data(), c.result())));
        for &(tag, res) in &cqes {
            if tag == EVENTFD_TAG {
                sqes.push(evfd_read_sqe(&q, evbuf.as_mut_ptr()));
                continue;
            }
            if tag == EVENTFD_TAG - 1 {
                continue;
            }
            let idx = tag as usize;
            if idx >= q.ents.len() {
                continue;
            }
            if res == 0 {
                served += 1;
                if served == 1 && !told.swap(true, Ordering::AcqRel) {
                    if let Some(l) = log {
                        (l.0)(false, "FUSE over io_uring in use");
                    }
                }
                dispatch(&q, idx, &ch, &se, &mut scratch);
                continue;
            }
            let e = -res;
            if e == libc::EAGAIN || e == libc::EINTR {
                sqes.push(cmd_sqe(dev, &q, idx, q.ents[idx].last_cmd.load(Ordering::Relaxed)));
                continue;
            }
            live -= 1;
            let ending = matches!(e, libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED | libc::ENODEV);
            if !ending && !told.swap(true, Ordering::AcqRel) {
                if let Some(l) = log {
                    let what = if q.ents[idx].last_cmd.load(Ordering::Relaxed) == CMD_REGISTER { "registration" } else { "commit" };
                    (l.0)(true, &format!("FUSE over io_uring: the kernel refused the ring's {what} on queue {} ({}): requests are served through /dev/fuse", q.qid, io::Error::from_raw_os_error(e)));
                }
            }
        }
        if live == 0 {
            return Ok(());
        }
    }
}

/// Rebuild the request in entry `idx` in /dev/fuse's layout and dispatch it.
fn dispatch<FS: Filesystem>(q: &Arc<Queue>, idx: usize, ch: &Channel, se: &SessionEventLoop<FS>, scratch: &mut Vec<u64>) {
    let ent = &q.ents[idx];
    ent.commit_id.store(q.read_u64(idx, HDR_ENT + 8), Ordering::Release);
    ent.answered.store(false, Ordering::Release);
    let in_len = q.read_u32(idx, 0) as usize;
    let payload = q.read_u32(idx, HDR_ENT + 16) as usize;
    let unique = q.read_u64(idx, 8);
    let op_len = in_len.checked_sub(IN_HEADER + payload).filter(|&n| n <= OP_IN_MAX && payload <= q.payload);
    let Some(op_len) = op_len else {
        q.write_error(idx as u32, unique, libc::EIO);
        ent.answered.store(true, Ordering::Release);
        let _ = q.commit(idx as u32);
        return;
    };
    let start = PAYLOAD_AT - IN_HEADER - op_len;
    let data: &[u8] = if start % 8 == 0 {
        // SAFETY: header and operation header copied just before the payload (inside the
        // allocation, past the header buffer), making one contiguous request of in_len bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(ent.mem, ent.mem.add(start), IN_HEADER);
            std::ptr::copy_nonoverlapping(ent.mem.add(HDR_OP_IN), ent.mem.add(start + IN_HEADER), op_len);
            std::slice::from_raw_parts(ent.mem.add(start), in_len)
        }
    } else {
        // An operation header of odd length: the request is copied whole to an aligned buffer.
        scratch.clear();
        scratch.resize(in_len.div_ceil(8), 0);
        let dst = scratch.as_mut_ptr().cast::<u8>();
        // SAFETY: the three parts fit the scratch buffer of in_len bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(ent.mem, dst, IN_HEADER);
            std::ptr::copy_nonoverlapping(ent.mem.add(HDR_OP_IN), dst.add(IN_HEADER), op_len);
            std::ptr::copy_nonoverlapping(ent.mem.add(PAYLOAD_AT), dst.add(IN_HEADER + op_len), payload);
            std::slice::from_raw_parts(dst, in_len)
        }
    };
    let sender = ch.sender_for_ring(RingSlot::new(q.clone(), idx as u32));
    if let Some(req) = RequestWithSender::new(sender, data) {
        if let Ok(Operation::Destroy(_)) = req.request.operation() {
            req.reply::<ReplyEmpty>().ok();
        } else {
            req.dispatch(se);
        }
    }
    // A request nothing answers (none should come this way) still gives its entry back.
    if !ent.answered.load(Ordering::Acquire) && ent.holders.load(Ordering::Acquire) == 0 && !ent.answered.swap(true, Ordering::AcqRel) {
        q.write_error(idx as u32, unique, libc::ENOSYS);
        let _ = q.commit(idx as u32);
    }
}
