//! Fault injection into leaf devices, as OpenZFS's zio_inject.c does for `zinject -d`: a
//! handler names a leaf (by guid) and makes its reads, writes or both fail with EIO or ENXIO,
//! or (reads only, at a frequency) come back with one bit flipped, so that tests can break a
//! pool the way failing disks do and watch it cope (READ/WRITE/CKSUM counts, self-healing,
//! scrub and resilver). A delay handler (`zinject -D latency:lanes`, ZINJECT_DELAY_IO) makes
//! every I/O of its leaf take at least `latency`, `lanes` of them at a time: an I/O takes the
//! lane (of all the leaf's delay handlers) that finishes it first, `latency` after that lane is
//! free (or now, if it is), as zio_handle_io_delay queues them — here the I/O's thread sleeps
//! until then.
//!
//! A data handler (`zinject -t data`) names blocks of a file instead — its dataset's objset,
//! its object, a level and a blkid range — and every read of them fails with EIO or a checksum
//! error (`data_fault`, asked where the DMU reads a block and where a scan reads one), so
//! the file's damage reaches the error log and `zpool status -v`.
//!
//! Handlers live in the process (the daemon) until cleared. The leaf I/O path asks [`check`]
//! before each read and write; with no handler registered that is one atomic load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// What a handler does to the I/O it catches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevError {
    /// EIO: the I/O fails.
    Io,
    /// ENXIO: the device does not answer.
    Nxio,
    /// EILSEQ: a read returns with one bit flipped (its checksum then fails).
    Corrupt,
}

/// Which I/O a handler catches (`-T`); free and claim have no device I/O here and catch none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoType {
    Read,
    Write,
    Free,
    Claim,
    All,
}

#[derive(Clone, Debug)]
pub struct Handler {
    pub id: u64,
    pub pool: String,
    pub guid: u64,
    pub error: DevError,
    pub iotype: IoType,
    /// Share of the I/Os caught, in millionths (0: all), as zi_freq.
    pub freq_ppm: u32,
    /// A delay handler: the latency (zi_timer, ns) and lanes (zi_nlanes); 0 for a fault.
    pub delay_ns: u64,
    pub lanes: u64,
    /// A data handler (`zinject -t data`, ZINJECT_DATA_FAULT): the blocks it fails; `guid`
    /// is 0 then.
    pub data: Option<DataTarget>,
}

/// The blocks a data handler fails: blkids `start..=end` at `level` of object `object` of the
/// dataset whose objset is `objset` (zi_objset, zi_object, zi_level, zi_start, zi_end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataTarget {
    pub objset: u64,
    pub object: u64,
    pub level: u64,
    pub start: u64,
    pub end: u64,
}

/// When each lane of a delay handler is free next.
struct Lanes {
    free: Vec<std::time::Instant>,
}

static ANY: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static HANDLERS: Mutex<Vec<Handler>> = Mutex::new(Vec::new());
static SEED: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
static LANES: Mutex<Vec<(u64, Lanes)>> = Mutex::new(Vec::new());

/// Register a handler; its id.
pub fn add(mut h: Handler) -> u64 {
    h.id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let id = h.id;
    let mut hs = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    hs.push(h);
    ANY.store(true, Ordering::Release);
    id
}

pub fn list() -> Vec<Handler> {
    HANDLERS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Remove one handler; false if there is none with that id.
pub fn clear(id: u64) -> bool {
    let mut hs = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    let n = hs.len();
    hs.retain(|h| h.id != id);
    ANY.store(!hs.is_empty(), Ordering::Release);
    LANES.lock().unwrap_or_else(|p| p.into_inner()).retain(|(i, _)| *i != id);
    hs.len() != n
}

pub fn clear_all() {
    let mut hs = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    hs.clear();
    ANY.store(false, Ordering::Release);
    LANES.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// A pseudo-random draw in [0, 1e6) (xorshift; the frequency needs no better).
fn draw() -> u32 {
    let mut x = SEED.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    SEED.store(x, Ordering::Relaxed);
    (x % 1_000_000) as u32
}

/// Some handler is registered (the leaf I/O path then asks `check` for each I/O).
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// The fault, if any, a read (`write` false) or write of the leaf `guid` meets now; a delay
/// handler of the leaf first holds the caller until its I/O would complete.
pub fn check(guid: u64, write: bool) -> Option<DevError> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let hs = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    let delays: Vec<&Handler> = hs.iter().filter(|h| h.guid == guid && h.delay_ns != 0).collect();
    let until = if delays.is_empty() { None } else { lane_until(&delays) };
    drop(hs);
    if let Some(t) = until {
        std::thread::sleep(t.saturating_duration_since(std::time::Instant::now()));
    }
    check_faults(guid, write)
}

/// When an I/O caught by the delay handlers `hs` completes: the lane, of all theirs, that
/// would finish it first is taken up to then (delays add up, as OpenZFS's do).
fn lane_until(hs: &[&Handler]) -> Option<std::time::Instant> {
    let now = std::time::Instant::now();
    let mut all = LANES.lock().unwrap_or_else(|p| p.into_inner());
    let mut best: Option<(std::time::Instant, u64, usize)> = None;
    for h in hs {
        if !all.iter().any(|(id, _)| *id == h.id) {
            all.push((h.id, Lanes { free: vec![now; h.lanes.clamp(1, 1 << 16) as usize] }));
        }
        let (_, l) = all.iter().find(|(id, _)| *id == h.id).expect("pushed above");
        for (i, f) in l.free.iter().enumerate() {
            let done = (*f).max(now) + std::time::Duration::from_nanos(h.delay_ns);
            if best.map_or(true, |(b, _, _)| done < b) {
                best = Some((done, h.id, i));
            }
        }
    }
    let (done, id, i) = best?;
    if let Some((_, l)) = all.iter_mut().find(|(x, _)| *x == id) {
        l.free[i] = done;
    }
    Some(done)
}

/// The fault handlers' part of `check`.
fn check_faults(guid: u64, write: bool) -> Option<DevError> {
    let hs = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    hs.iter()
        .filter(|h| h.guid == guid && h.delay_ns == 0 && h.data.is_none())
        .filter(|h| match h.iotype {
            IoType::All => true,
            IoType::Read => !write,
            IoType::Write => write,
            IoType::Free | IoType::Claim => false,
        })
        .find(|h| h.freq_ppm == 0 || draw() < h.freq_ppm)
        .map(|h| h.error)
}

/// The fault a read of block (`objset`, `object`, `level`, `blkid`) of pool `pool` meets
/// (zio_handle_fault_injection: io or checksum), if a data handler names it.
pub fn data_fault(pool: &str, objset: u64, object: u64, level: u64, blkid: u64) -> Option<DevError> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let hs = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
    hs.iter()
        .filter(|h| h.pool == pool)
        .find(|h| h.data.is_some_and(|d| d.objset == objset && d.object == object && d.level == level && (d.start..=d.end).contains(&blkid)))
        .map(|h| h.error)
}

/// Flip one bit of a buffer read (a corrupt injection).
pub fn corrupt(buf: &mut [u8]) {
    if !buf.is_empty() {
        let i = draw() as usize % buf.len();
        buf[i] ^= 1 << (draw() % 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_catch_their_device_and_io_type_until_cleared() {
        let g = 0xfeed_0001;
        assert_eq!(check(g, false), None);
        let id = add(Handler { id: 0, pool: "p".into(), guid: g, error: DevError::Io, iotype: IoType::Read, freq_ppm: 0, delay_ns: 0, lanes: 0, data: None });
        assert_eq!((check(g, false), check(g, true), check(g + 1, false)), (Some(DevError::Io), None, None));
        let id2 = add(Handler { id: 0, pool: "p".into(), guid: g, error: DevError::Nxio, iotype: IoType::Write, freq_ppm: 0, delay_ns: 0, lanes: 0, data: None });
        assert_eq!(check(g, true), Some(DevError::Nxio));
        assert!(clear(id) && !clear(id));
        assert_eq!(check(g, false), None);
        // At 50%, about half the reads are caught.
        clear(id2);
        add(Handler { id: 0, pool: "p".into(), guid: g, error: DevError::Corrupt, iotype: IoType::Read, freq_ppm: 500_000, delay_ns: 0, lanes: 0, data: None });
        let caught = (0..10_000).filter(|_| check(g, false).is_some()).count();
        assert!((4000..6000).contains(&caught), "{caught}");
        let mut b = vec![0u8; 64];
        corrupt(&mut b);
        assert_eq!(b.iter().map(|x| x.count_ones()).sum::<u32>(), 1);
        clear_all();
        assert_eq!(check(g, false), None);
        // A delay handler holds each I/O of its leaf, one lane: one after the other.
        let id = add(Handler { id: 0, pool: "p".into(), guid: g, error: DevError::Io, iotype: IoType::All, freq_ppm: 0, delay_ns: 20_000_000, lanes: 1, data: None });
        let t = std::time::Instant::now();
        assert_eq!((check(g, false), check(g, true), check(g, false)), (None, None, None), "a delay fails nothing");
        assert!(t.elapsed() >= std::time::Duration::from_millis(60), "{:?}", t.elapsed());
        let t = std::time::Instant::now();
        assert_eq!(check(g + 1, false), None);
        assert!(t.elapsed() < std::time::Duration::from_millis(20), "another leaf is not delayed");
        assert!(clear(id));
    }

}
