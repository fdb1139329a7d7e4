//! vdev::sim: a seeded simulated disk for crash tests (DESIGN.md rule 6).
//!
//! ```text
//!   engine ──write_at──► SimDevice ── volatile cache: [(offset, bytes)] in issue order
//!          ◄──read_at───     │          (reads see the cache over the image)
//!          ───flush────►     └─► stable image (a file): what survives power loss, what the next
//!                                import and OpenZFS's zdb read
//! ```
//!
//! A [`SimMachine`] is one computer: the devices of a pool share its I/O counter. Arming a crash
//! at I/O number `n` (writes and flushes both count) makes that I/O and every later one fail
//! with EIO, as if the power went out while the engine was working — typically in the middle of
//! a txg sync. [`SimMachine::power_cut`] then decides, from a seeded [`SimRng`], which unflushed
//! writes reach the stable image ([`Fault`]): none, all (a killed process whose OS survived), a
//! random subset, or a random subset with each device's newest write torn (only a prefix of its
//! sectors, or a random subset of them, lands). Kept writes land in issue order. After the cut
//! the images are what a fresh machine ([`SimMachine::new`] over the same files) imports.
//!
//! Everything random comes from the seed, so a failing seed replays the same faults.
//! Locking: a device's cache has its own mutex (a leaf lock); the machine's counter and crash
//! state are atomics; `power_cut` takes the machine's device list, then each cache in turn.

use super::BlockDevice;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A small seeded generator (splitmix64): the same seed gives the same faults everywhere.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True `num` times out of `den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// What happens to the writes a device had not flushed when the power went out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every unflushed write lands (the process died, the machine did not: kill -9).
    KeepAll,
    /// Every unflushed write is lost.
    DropAll,
    /// Each unflushed write is lost or lands, at random.
    DropSome,
    /// As `DropSome`, and each device's newest unflushed write lands torn: a sector-aligned
    /// prefix of it, or a random subset of its sectors.
    TearLast,
}

/// The I/O counter and crash switch the devices of one machine share.
#[derive(Debug, Default)]
struct SimCtl {
    ops: AtomicU64,
    crash_at: AtomicU64,
    /// Flushes issued, and the one that crashes (`SimMachine::arm_crash_at_flush`).
    flushes: AtomicU64,
    crash_at_flush: AtomicU64,
    crashed: AtomicBool,
}

impl SimCtl {
    /// Count one I/O; Err when the machine is (or now goes) down.
    fn io(&self, what: &str, dev: &str) -> std::io::Result<()> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(dead(what, dev));
        }
        let n = self.ops.fetch_add(1, Ordering::SeqCst);
        let flush_due = what == "flush" && self.flushes.fetch_add(1, Ordering::SeqCst) >= self.crash_at_flush.load(Ordering::SeqCst);
        if n >= self.crash_at.load(Ordering::SeqCst) || flush_due {
            self.crashed.store(true, Ordering::SeqCst);
            return Err(dead(what, dev));
        }
        Ok(())
    }
}

fn dead(what: &str, dev: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Other, format!("{what} on {dev}: simulated power loss"))
}

/// One computer's disks: they share the I/O counter and lose power together.
pub struct SimMachine {
    ctl: Arc<SimCtl>,
    devices: Mutex<Vec<Arc<SimDevice>>>,
}

impl Default for SimMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl SimMachine {
    /// A machine that never crashes until [`SimMachine::arm_crash`].
    pub fn new() -> SimMachine {
        let ctl = SimCtl { crash_at: AtomicU64::new(u64::MAX), crash_at_flush: AtomicU64::new(u64::MAX), ..Default::default() };
        SimMachine { ctl: Arc::new(ctl), devices: Mutex::new(Vec::new()) }
    }

    /// A simulated disk over the image file `path` (which must exist, sized), with sectors of
    /// `sector` bytes (the unit a torn write keeps or loses).
    pub fn device(&self, path: &Path, sector: u64) -> std::io::Result<Arc<SimDevice>> {
        assert!(sector.is_power_of_two() && sector >= 512, "sector size {sector}");
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        let size = file.metadata()?.len();
        let d = Arc::new(SimDevice { ctl: self.ctl.clone(), file, path: path.to_path_buf(), size, sector, cache: Mutex::new(Vec::new()) });
        self.devices.lock().unwrap_or_else(|p| p.into_inner()).push(d.clone());
        Ok(d)
    }

    /// I/Os (writes and flushes) issued so far on this machine.
    pub fn ops(&self) -> u64 {
        self.ctl.ops.load(Ordering::SeqCst)
    }

    /// Crash when I/O number `at` (counting from 0, see [`SimMachine::ops`]) is issued.
    pub fn arm_crash(&self, at: u64) {
        self.ctl.crash_at.store(at, Ordering::SeqCst);
    }

    /// Crash at the `n`th flush from now (1: the next one), whatever the I/Os between.
    pub fn arm_crash_at_flush(&self, n: u64) {
        let done = self.ctl.flushes.load(Ordering::SeqCst);
        self.ctl.crash_at_flush.store(done + n.max(1) - 1, Ordering::SeqCst);
    }

    /// Whether the armed crash has happened.
    pub fn crashed(&self) -> bool {
        self.ctl.crashed.load(Ordering::SeqCst)
    }

    /// Power goes out now: the machine stops answering I/O, and each device's unflushed
    /// writes reach its image or not as `fault` and `rng` decide. Returns what happened, one
    /// line a device, for the failure message of a test.
    pub fn power_cut(&self, fault: Fault, rng: &mut SimRng) -> std::io::Result<Vec<String>> {
        self.ctl.crashed.store(true, Ordering::SeqCst);
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        let mut report = Vec::new();
        for d in devices.iter() {
            report.push(d.cut(fault, rng)?);
        }
        Ok(report)
    }
}

/// A disk with a volatile write cache over a stable image file.
pub struct SimDevice {
    ctl: Arc<SimCtl>,
    file: File,
    path: PathBuf,
    size: u64,
    sector: u64,
    /// Writes since the last flush, in issue order.
    cache: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl SimDevice {
    fn check_range(&self, len: usize, offset: u64) -> std::io::Result<()> {
        if offset.checked_add(len as u64).map_or(true, |end| end > self.size) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{len} bytes at {offset:#x} past the end of {} ({:#x})", self.path.display(), self.size),
            ));
        }
        Ok(())
    }

    /// Power loss on this device: write what survives of the cache to the image.
    fn cut(&self, fault: Fault, rng: &mut SimRng) -> std::io::Result<String> {
        let pending = std::mem::take(&mut *self.cache.lock().unwrap_or_else(|p| p.into_inner()));
        let n = pending.len();
        let mut kept = 0;
        let mut torn = String::new();
        for (i, (off, data)) in pending.iter().enumerate() {
            let keep = match fault {
                Fault::KeepAll => true,
                Fault::DropAll => false,
                Fault::DropSome | Fault::TearLast => rng.chance(1, 2),
            };
            if fault == Fault::TearLast && i + 1 == n {
                // A one-sector write lands whole or not at all; a longer one loses at least
                // one sector: the tail after a random prefix, or a random subset.
                let sectors = (data.len() as u64).div_ceil(self.sector);
                let prefix = rng.chance(1, 2);
                let cut = 1 + rng.below(sectors.max(2) - 1);
                let lost = rng.below(sectors);
                let mut landed = 0;
                for s in 0..sectors {
                    let lands = if sectors == 1 {
                        rng.chance(1, 2)
                    } else if prefix {
                        s < cut
                    } else {
                        s != lost && rng.chance(1, 2)
                    };
                    if lands {
                        let a = (s * self.sector) as usize;
                        let b = (a + self.sector as usize).min(data.len());
                        self.file.write_all_at(&data[a..b], off + a as u64)?;
                        landed += 1;
                    }
                }
                torn = format!(", last write ({:#x} bytes at {off:#x}) torn: {landed}/{sectors} sectors landed", data.len());
                continue;
            }
            if keep {
                self.file.write_all_at(data, *off)?;
                kept += 1;
            }
        }
        Ok(format!("{}: {kept} of {n} unflushed writes landed{torn}", self.path.display()))
    }
}

impl BlockDevice for SimDevice {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if self.ctl.crashed.load(Ordering::SeqCst) {
            return Err(dead("read", &self.path.display().to_string()));
        }
        self.check_range(buf.len(), offset)?;
        self.file.read_exact_at(buf, offset)?;
        let end = offset + buf.len() as u64;
        for (woff, data) in self.cache.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let wend = woff + data.len() as u64;
            if *woff < end && wend > offset {
                let a = (*woff).max(offset);
                let b = wend.min(end);
                buf[(a - offset) as usize..(b - offset) as usize].copy_from_slice(&data[(a - woff) as usize..(b - woff) as usize]);
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.check_range(buf.len(), offset)?;
        self.ctl.io("write", &self.path.display().to_string())?;
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).push((offset, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        self.ctl.io("flush", &self.path.display().to_string())?;
        let pending = std::mem::take(&mut *self.cache.lock().unwrap_or_else(|p| p.into_inner()));
        for (off, data) in pending {
            self.file.write_all_at(&data, off)?;
        }
        Ok(())
    }
    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(name: &str, size: u64) -> PathBuf {
        let p = std::env::temp_dir().join(format!("oxzfs-sim-{name}-{}", std::process::id()));
        let f = File::create(&p).unwrap();
        f.set_len(size).unwrap();
        p
    }

    fn stable(p: &Path, off: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        File::open(p).unwrap().read_exact_at(&mut b, off).unwrap();
        b
    }

    #[test]
    fn reads_see_the_cache_and_only_flushed_writes_are_stable() {
        let p = image("cache", 1 << 20);
        let m = SimMachine::new();
        let d = m.device(&p, 512).unwrap();
        d.write_at(&[1u8; 1024], 4096).unwrap();
        d.write_at(&[2u8; 512], 4608).unwrap();
        let mut b = vec![0u8; 1536];
        d.read_at(&mut b, 4096).unwrap();
        assert_eq!(&b[..512], &[1u8; 512][..]);
        assert_eq!(&b[512..1024], &[2u8; 512][..]);
        assert_eq!(&b[1024..], &[0u8; 512][..]);
        assert_eq!(stable(&p, 4096, 1024), vec![0u8; 1024], "nothing is stable before a flush");
        d.flush().unwrap();
        assert_eq!(stable(&p, 4096, 1024), [vec![1u8; 512], vec![2u8; 512]].concat());
        // Unflushed writes are lost when the power goes out with DropAll.
        d.write_at(&[3u8; 512], 0).unwrap();
        m.power_cut(Fault::DropAll, &mut SimRng::new(1)).unwrap();
        assert_eq!(stable(&p, 0, 512), vec![0u8; 512]);
        assert!(d.read_at(&mut b, 0).is_err(), "a dead machine answers no I/O");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn an_armed_crash_fails_that_io_and_all_later_ones() {
        let p = image("arm", 1 << 20);
        let m = SimMachine::new();
        let d = m.device(&p, 512).unwrap();
        m.arm_crash(2);
        d.write_at(&[1u8; 512], 0).unwrap();
        d.flush().unwrap();
        assert!(d.write_at(&[2u8; 512], 512).is_err());
        assert!(m.crashed());
        assert!(d.flush().is_err());
        m.power_cut(Fault::KeepAll, &mut SimRng::new(1)).unwrap();
        assert_eq!(stable(&p, 0, 1024), [vec![1u8; 512], vec![0u8; 512]].concat(), "the failed write never landed");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_torn_write_lands_whole_sectors_only_and_not_all_of_them() {
        for seed in 0..50 {
            let p = image(&format!("tear{seed}"), 1 << 20);
            let m = SimMachine::new();
            let d = m.device(&p, 512).unwrap();
            d.write_at(&[7u8; 4096], 8192).unwrap();
            m.power_cut(Fault::TearLast, &mut SimRng::new(seed)).unwrap();
            let b = stable(&p, 8192, 4096);
            let landed: Vec<bool> = b.chunks(512).map(|s| {
                assert!(s.iter().all(|&x| x == s[0]), "seed {seed}: a sector landed partly");
                s[0] == 7
            }).collect();
            assert!(landed.iter().any(|l| !l) || landed.len() == 1, "seed {seed}: a torn write landed whole: {landed:?}");
            std::fs::remove_file(&p).unwrap();
        }
    }
}
