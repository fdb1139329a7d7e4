//! raidz: single, double and triple parity over the children of a top-level vdev.
//!
//! A block of `size` bytes (rounded up to the sector size) at `offset` of the raidz vdev's
//! space is laid out in columns, as OpenZFS's `vdev_raidz_map_alloc` lays it out:
//!
//! ```text
//!   b = offset >> ashift (sector)   s = size in sectors   f = b % dcols (first child)
//!   o = (b / dcols) << ashift       (offset on each child; +1 sector when the column wraps)
//!   q = s / (dcols - p)   r = s % (dcols - p)   bc = r ? r + p : 0  (big columns: q+1 sectors)
//!   columns c = 0..(q ? dcols : bc): child (f + c) % dcols; the first p columns are parity
//!   P, Q, R, the rest hold the data in order. raidz1 swaps the child and offset of columns
//!   0 and 1 when bit 20 of the offset is set (a format decision kept forever).
//!   tot = s + p·(q + (r ? 1 : 0)) sectors are used; the allocation is rounded up to a
//!   multiple of p + 1 sectors, the difference being "skip" sectors that follow the columns
//!   from column bc on (column 1 when bc = 0 and the raidz1 swap happened).
//! ```
//!
//! Parity over GF(2^8) with polynomial 0x11d: P = Σ dᵢ, Q = Σ 2^(n-1-i)·dᵢ, R = Σ 4^(n-1-i)·dᵢ
//! over the n data columns (short columns count as zeros past their end; parity columns have
//! the size of the first data column). Any `p` missing or wrong columns are recovered by
//! solving that linear system (what vdev_raidz_reconstruct_p/q/pq/general do).
//!
//! Reads follow vdev_raidz.c: only the data columns are read; when one is missing or fails, or
//! the checksum (the `verify` callback) rejects the data, the parity is read too and
//! reconstruction is tried: first with the known-bad columns, then with every combination of
//! 1..=p further columns (data or parity) treated as wrong, fewest first, as
//! `vdev_raidz_combrec` does. The first result that verifies wins; the children whose bytes
//! differed from it are charged a CKSUM error (also parity columns that were read and do not
//! match the regenerated parity). When nothing verifies, every child that answered is charged,
//! as OpenZFS does for an unrecoverable block. I/O errors are charged (READ) by the leaf.

use super::{ReadMode, Vdev, VdevState};
use crate::{Result, ZfsError};

/// The largest block a raidz read accepts (SPA_MAXBLOCKSIZE).
pub const RAIDZ_MAX_SIZE: u64 = 16 << 20;
/// The most children a raidz map addresses.
pub const RAIDZ_MAX_CHILDREN: usize = 255;

/// One column of a raidz map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidzCol {
    /// Index of the child vdev.
    pub devidx: usize,
    /// Offset on the child (in its own space, after the front labels).
    pub offset: u64,
    /// Bytes of the column (a multiple of the sector size; may be 0 only for skipped columns,
    /// which are not in `cols`).
    pub size: u64,
}

/// Where the block of (`offset`, `size`) lives on the children of a raidz vdev.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidzMap {
    /// Parity columns first (P, Q, R), then the data columns in order.
    pub cols: Vec<RaidzCol>,
    pub nparity: usize,
    pub ashift: u8,
    /// Total data bytes (size rounded up to the sector).
    pub data_size: u64,
    /// Padding sectors after the columns, each (child, offset on the child): the allocation
    /// rounds the used sectors up to a multiple of nparity + 1. Writers may write them
    /// (OpenZFS issues optional writes there); they never hold data.
    pub skip: Vec<(usize, u64)>,
}

impl RaidzMap {
    /// The map of `size` bytes at `offset` of a raidz vdev of `dcols` children.
    pub fn new(offset: u64, size: u64, ashift: u8, dcols: usize, nparity: usize) -> Result<RaidzMap> {
        if !(1..=3).contains(&nparity) || dcols <= nparity || dcols > RAIDZ_MAX_CHILDREN {
            return Err(ZfsError::Invalid(format!("raidz{nparity} with {dcols} children")));
        }
        if !(9..=16).contains(&ashift) {
            return Err(ZfsError::Invalid(format!("raidz with ashift {ashift}")));
        }
        if size == 0 || size > RAIDZ_MAX_SIZE {
            return Err(ZfsError::Invalid(format!("raidz I/O of {size} bytes")));
        }
        let sh = ashift as u64;
        let b = offset >> sh;
        let s = size.div_ceil(1 << sh);
        let dc = dcols as u64;
        let np = nparity as u64;
        let f = b % dc;
        let o = (b / dc) << sh;
        let q = s / (dc - np);
        let r = s - q * (dc - np);
        let bc = if r == 0 { 0 } else { r + np };
        let tot = s + np * (q + u64::from(r != 0));
        let (acols, scols) = if q == 0 { (bc, dc.min(bc.div_ceil(np + 1) * (np + 1))) } else { (dc, dc) };
        // Every column that is accessed or skipped: (child, offset, size).
        let mut all = Vec::with_capacity(scols as usize);
        for c in 0..scols {
            let mut col = f + c;
            let mut coff = o;
            if col >= dc {
                col -= dc;
                coff += 1 << sh;
            }
            let csize = if c >= acols {
                0
            } else if c < bc {
                (q + 1) << sh
            } else {
                q << sh
            };
            all.push(RaidzCol { devidx: col as usize, offset: coff, size: csize });
        }
        let nskip = tot.div_ceil(np + 1) * (np + 1) - tot;
        let mut skipstart = bc as usize;
        if nparity == 1 && offset & (1 << 20) != 0 {
            // acols >= 2 always: a row holds at least one parity and one data sector, and
            // columns 0 and 1 have the same size.
            let (a, b2) = (all[0], all[1]);
            all[0] = RaidzCol { devidx: b2.devidx, offset: b2.offset, size: a.size };
            all[1] = RaidzCol { devidx: a.devidx, offset: a.offset, size: b2.size };
            if skipstart == 0 {
                skipstart = 1;
            }
        }
        let mut skip = Vec::with_capacity(nskip as usize);
        let mut c = skipstart;
        for _ in 0..nskip {
            if c == all.len() {
                c = 0;
            }
            let col = all[c];
            skip.push((col.devidx, col.offset + col.size));
            c += 1;
        }
        all.truncate(acols as usize);
        Ok(RaidzMap { cols: all, nparity, ashift, data_size: s << sh, skip })
    }

    /// Number of data columns.
    pub fn ndata(&self) -> usize {
        self.cols.len() - self.nparity
    }

    /// Bytes this block allocates on the raidz vdev: every column plus the skip sectors
    /// (equals [`asize`] of the size).
    pub fn asize(&self) -> u64 {
        self.cols.iter().map(|c| c.size).sum::<u64>() + ((self.skip.len() as u64) << self.ashift)
    }

    /// All columns of `data` (at most `data_size` bytes; zero-padded), parity computed:
    /// what a writer puts at each `cols[i]`.
    pub fn columns(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        if data.len() as u64 > self.data_size {
            return Err(ZfsError::Invalid(format!("{} bytes do not fit a raidz map of {}", data.len(), self.data_size)));
        }
        let mut cols = vec![Vec::new(); self.cols.len()];
        let mut pos = 0usize;
        for (i, c) in self.cols.iter().enumerate().skip(self.nparity) {
            let mut v = vec![0u8; c.size as usize];
            let end = (pos + v.len()).min(data.len());
            if pos < end {
                v[..end - pos].copy_from_slice(&data[pos..end]);
            }
            pos += c.size as usize;
            cols[i] = v;
        }
        generate_parity(self, &mut cols);
        Ok(cols)
    }
}

/// The map of `size` bytes at `offset` (see [`RaidzMap::new`]).
pub fn map(offset: u64, size: u64, ashift: u8, dcols: usize, nparity: usize) -> Result<RaidzMap> {
    RaidzMap::new(offset, size, ashift, dcols, nparity)
}

/// Bytes allocated on a raidz vdev for a block of `psize` bytes (vdev_raidz_asize).
pub fn asize(psize: u64, ashift: u8, dcols: usize, nparity: usize) -> u64 {
    if psize == 0 || dcols <= nparity {
        return 0;
    }
    let (dc, np) = (dcols as u64, nparity as u64);
    let mut a = ((psize - 1) >> ashift) + 1;
    a += np * ((a + dc - np - 1) / (dc - np));
    (a.div_ceil(np + 1) * (np + 1)) << ashift
}

// ---- GF(2^8), polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d), generator 2 ----

struct Gf {
    exp: [u8; 512],
    log: [u8; 256],
}

fn gf() -> &'static Gf {
    use std::sync::OnceLock;
    static G: OnceLock<Gf> = OnceLock::new();
    G.get_or_init(|| {
        let mut exp = [0u8; 512];
        let mut log = [0u8; 256];
        let mut x: u16 = 1;
        for i in 0..255 {
            exp[i] = x as u8;
            log[x as usize] = i as u8;
            x <<= 1;
            if x & 0x100 != 0 {
                x ^= 0x11d;
            }
        }
        for i in 255..512 {
            exp[i] = exp[i - 255];
        }
        Gf { exp, log }
    })
}

fn gmul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    let g = gf();
    g.exp[g.log[a as usize] as usize + g.log[b as usize] as usize]
}

fn ginv(a: u8) -> u8 {
    let g = gf();
    g.exp[255 - g.log[a as usize] as usize]
}

/// 2^e (p = 1) or 4^e (p = 2) in GF(2^8); 1 for P.
fn coef(p: usize, i: usize, n: usize) -> u8 {
    let e = (n - 1 - i) % 255;
    let g = gf();
    match p {
        0 => 1,
        1 => g.exp[e],
        _ => g.exp[(2 * e) % 255],
    }
}

/// `dst[j] ^= c · src[j]` over the common length.
fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    match c {
        0 => {}
        1 => dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= s),
        _ => {
            let mut t = [0u8; 256];
            for (x, v) in t.iter_mut().enumerate() {
                *v = gmul(c, x as u8);
            }
            dst.iter_mut().zip(src).for_each(|(d, &s)| *d ^= t[s as usize]);
        }
    }
}

/// Compute the parity columns `cols[..nparity]` of `map` from its data columns
/// (`cols[nparity..]`, each of its column's size).
pub fn generate_parity(map: &RaidzMap, cols: &mut [Vec<u8>]) {
    let np = map.nparity;
    let n = map.ndata();
    let plen = map.cols[0].size as usize;
    for p in 0..np {
        let mut out = vec![0u8; plen];
        for i in 0..n {
            mul_add(&mut out, &cols[np + i], coef(p, i, n));
        }
        cols[p] = out;
    }
}

/// Recover the data columns `missing` (indexes into the data columns 0..n) from the present
/// data columns and the parity rows `rows` (0 = P, 1 = Q, 2 = R; at least `missing.len()`),
/// in place. False when the system is singular or parity is short.
fn solve(map: &RaidzMap, cols: &mut [Vec<u8>], missing: &[usize], rows: &[usize]) -> bool {
    let np = map.nparity;
    let n = map.ndata();
    let k = missing.len();
    if k == 0 {
        return true;
    }
    if rows.len() < k {
        return false;
    }
    let rows = &rows[..k];
    // Invert A[r][m] = coef(row r, missing m) by Gauss-Jordan on [A | I].
    let mut a = vec![vec![0u8; 2 * k]; k];
    for (ri, &p) in rows.iter().enumerate() {
        for (mi, &m) in missing.iter().enumerate() {
            a[ri][mi] = coef(p, m, n);
        }
        a[ri][k + ri] = 1;
    }
    for col in 0..k {
        let Some(piv) = (col..k).find(|&r| a[r][col] != 0) else { return false };
        a.swap(col, piv);
        let inv = ginv(a[col][col]);
        for x in a[col].iter_mut() {
            *x = gmul(*x, inv);
        }
        for r in 0..k {
            if r != col && a[r][col] != 0 {
                let f = a[r][col];
                for c2 in 0..2 * k {
                    let v = gmul(f, a[col][c2]);
                    a[r][c2] ^= v;
                }
            }
        }
    }
    let plen = map.cols[0].size as usize;
    // Syndromes: each parity row minus the contributions of the present data columns.
    let mut syn: Vec<Vec<u8>> = Vec::with_capacity(k);
    for &p in rows {
        let mut s = cols[p].clone();
        s.resize(plen, 0);
        for i in (0..n).filter(|i| !missing.contains(i)) {
            mul_add(&mut s, &cols[np + i], coef(p, i, n));
        }
        syn.push(s);
    }
    for (mi, &m) in missing.iter().enumerate() {
        let mut out = vec![0u8; map.cols[np + m].size as usize];
        for (ri, s) in syn.iter().enumerate() {
            mul_add(&mut out, s, a[mi][k + ri]);
        }
        cols[np + m] = out;
    }
    true
}

/// Rebuild the columns `bad` (column indexes, parity or data; at most `nparity`) of `cols`
/// from the others, in place: data from the parity that is not bad, then the bad parity
/// regenerated. For resilver and self-heal writes.
pub fn reconstruct(map: &RaidzMap, cols: &mut [Vec<u8>], bad: &[usize]) -> Result<()> {
    let np = map.nparity;
    if cols.len() != map.cols.len() || bad.len() > np || bad.iter().any(|&b| b >= cols.len()) {
        return Err(ZfsError::Invalid(format!("raidz reconstruction of columns {bad:?} of {}", map.cols.len())));
    }
    let missing: Vec<usize> = bad.iter().filter(|&&b| b >= np).map(|&b| b - np).collect();
    let rows: Vec<usize> = (0..np).filter(|p| !bad.contains(p)).collect();
    if !solve(map, cols, &missing, &rows) {
        return Err(ZfsError::Invalid(format!("raidz columns {bad:?} cannot be rebuilt")));
    }
    if bad.iter().any(|&b| b < np) {
        let mut fresh = cols.to_vec();
        generate_parity(map, &mut fresh);
        for &b in bad.iter().filter(|&&b| b < np) {
            cols[b] = std::mem::take(&mut fresh[b]);
        }
    }
    Ok(())
}

/// Read one column; None when the child is missing or the read failed (a leaf counts its own
/// I/O errors).
pub(super) fn read_col(vd: &Vdev, col: &RaidzCol, mode: &ReadMode) -> Option<Vec<u8>> {
    if col.size == 0 {
        return Some(Vec::new()); // a dRAID row's empty column: nothing on disk
    }
    let child = vd.children.get(col.devidx)?;
    // Offline leaves, and leaves lacking txgs (a DTL not empty), are rebuilt from parity; a
    // replacing child is read through (its whole side), a resilver writing its new side.
    if matches!(child.state(), VdevState::Unavail | VdevState::Offline) || child.out_of_use() || (child.is_leaf() && child.is_stale()) {
        return None;
    }
    let inner = if mode.resilver { mode } else { &crate::vdev::READ_PLAIN };
    let r = if child.is_leaf() { child.read_leaf(col.offset, col.size) } else { child.read_mode(col.offset, col.size, &|_| true, inner) };
    r.ok().filter(|d| d.len() as u64 == col.size)
}

fn assemble(map: &RaidzMap, cols: &[Vec<u8>], size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(map.data_size as usize);
    for c in &cols[map.nparity..] {
        out.extend_from_slice(c);
    }
    out.truncate(size as usize);
    out
}

/// Calls `f` with each `k`-subset of `items` in lexicographic order until it returns true.
pub(super) fn for_each_combination(items: &[usize], k: usize, f: &mut dyn FnMut(&[usize]) -> bool) -> bool {
    if k > items.len() {
        return false;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    let mut pick = vec![0usize; k];
    loop {
        for (p, &i) in pick.iter_mut().zip(&idx) {
            *p = items[i];
        }
        if f(&pick) {
            return true;
        }
        let mut i = k;
        loop {
            if i == 0 {
                return false;
            }
            i -= 1;
            if idx[i] != i + items.len() - k {
                break;
            }
        }
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

fn charge(vd: &Vdev, col: &RaidzCol) {
    if let Some(ch) = vd.children.get(col.devidx) {
        ch.stats.count_cksum_error();
    }
}

/// Read `size` bytes at `offset` of the raidz vdev `vd`, reconstructing from parity when
/// children are missing, fail, or give bytes that `verify` rejects. With `mode.scrub` the
/// parity is always read and checked against the data; with `mode.repair` every column found
/// wrong (or unreadable on a present child) is rewritten from the good data.
pub fn read(vd: &Vdev, nparity: u8, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool, mode: &ReadMode) -> Result<Vec<u8>> {
    let map = RaidzMap::new(offset, size, vd.ashift, vd.children.len(), nparity as usize)?;
    read_map(vd, &map, offset, size, verify, mode)
}

/// `read` of the `size` bytes laid out by `map` on `vd`'s children (a raidz block, or a row
/// of a dRAID block: `offset` names it in errors).
pub fn read_map(vd: &Vdev, map: &RaidzMap, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool, mode: &ReadMode) -> Result<Vec<u8>> {
    read_map_with(vd, map, offset, size, verify, mode, &|c| read_col(vd, c, mode))
}

/// `read_map` with each column read by `col_reader` (None: unreadable). dRAID reads a column
/// held by a spare or replacing child from each of its sides in turn when the block does not
/// verify (`draid::read`).
pub fn read_map_with(
    vd: &Vdev,
    map: &RaidzMap,
    offset: u64,
    size: u64,
    verify: &dyn Fn(&[u8]) -> bool,
    mode: &ReadMode,
    col_reader: &dyn Fn(&RaidzCol) -> Option<Vec<u8>>,
) -> Result<Vec<u8>> {
    let np = map.nparity;
    let ncols = map.cols.len();
    let mut cols: Vec<Vec<u8>> = vec![Vec::new(); ncols];
    let mut failed = vec![false; ncols];
    // 1. The data columns only.
    for c in np..ncols {
        match col_reader(&map.cols[c]) {
            Some(d) => cols[c] = d,
            None => failed[c] = true,
        }
    }
    let data_failed = failed.iter().any(|&f| f);
    if !data_failed {
        let d = assemble(map, &cols, size);
        if verify(&d) {
            if mode.scrub {
                // raidz_parity_verify: the parity read back must be the data's parity.
                for c in 0..np {
                    match col_reader(&map.cols[c]) {
                        Some(p) => cols[c] = p,
                        None => failed[c] = true,
                    }
                }
                settle(vd, map, &cols, &failed, cols.clone(), mode);
            }
            return Ok(d);
        }
    }
    // 2. The parity.
    for c in 0..np {
        match col_reader(&map.cols[c]) {
            Some(d) => cols[c] = d,
            None => failed[c] = true,
        }
    }
    let nfailed = failed.iter().filter(|&&f| f).count();
    if nfailed > np {
        return Err(ZfsError::Io {
            device: vd.display_name(),
            offset,
            source: std::io::Error::other(format!("{nfailed} of {ncols} raidz{np} columns unreadable")),
        });
    }
    // 3. Reconstruction: the failed columns, plus 0..=(np - nfailed) more suspects, fewest
    //    first. A combination that marks no data column (beyond the failed ones) as bad
    //    gives the bytes already rejected, so it is skipped.
    let known: Vec<usize> = (0..ncols).filter(|&c| failed[c]).collect();
    let suspects: Vec<usize> = (0..ncols).filter(|&c| !failed[c]).collect();
    let mut result: Option<(Vec<Vec<u8>>, Vec<u8>)> = None;
    for extra in 0..=np - nfailed {
        let mut attempt = |combo: &[usize]| -> bool {
            let bad: Vec<usize> = known.iter().chain(combo).copied().collect();
            let missing: Vec<usize> = bad.iter().filter(|&&c| c >= np).map(|&c| c - np).collect();
            if missing.is_empty() || (!data_failed && !combo.iter().any(|&c| c >= np)) {
                return false;
            }
            let rows: Vec<usize> = (0..np).filter(|p| !bad.contains(p)).collect();
            let mut trial = cols.clone();
            if !solve(map, &mut trial, &missing, &rows) {
                return false;
            }
            let d = assemble(map, &trial, size);
            if verify(&d) {
                result = Some((trial, d));
                true
            } else {
                false
            }
        };
        if for_each_combination(&suspects, extra, &mut attempt) {
            break;
        }
    }
    let Some((good, data)) = result else {
        // Unrecoverable: every child that answered shares the blame.
        for c in suspects {
            charge(vd, &map.cols[c]);
        }
        return Err(ZfsError::Checksum {
            context: format!("vdev {} offset {offset:#x} size {size:#x}: no reconstruction verified", vd.display_name()),
        });
    };
    settle(vd, map, &cols, &failed, good, mode);
    Ok(data)
}

/// After a read found the good data columns (`good`): charge a CKSUM error to the children
/// whose bytes were wrong — data columns that differ from the good data, parity columns that
/// were read and differ from its parity — and, when `mode` repairs, write the right bytes
/// there and over the columns that could not be read from a present child.
fn settle(vd: &Vdev, map: &RaidzMap, cols: &[Vec<u8>], failed: &[bool], mut good: Vec<Vec<u8>>, mode: &ReadMode) {
    generate_parity(map, &mut good);
    for (c, col) in map.cols.iter().enumerate() {
        let wrong = if failed[c] {
            vd.children.get(col.devidx).is_some_and(|ch| !matches!(ch.state(), VdevState::Unavail | VdevState::Offline) && !ch.out_of_use())
        } else if cols[c].is_empty() {
            false // parity not read (a read whose data verified at once)
        } else if cols[c] != good[c] {
            charge(vd, col);
            true
        } else {
            false
        };
        if wrong && mode.repair {
            if let Some(ch) = vd.children.get(col.devidx) {
                ch.repair_write(col.offset, &good[c], mode);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use crate::vdev::{BlockDevice, FileDevice, VdevKind};
    use oxzfs_format::checksum;
    use oxzfs_format::label::VDEV_LABEL_START_SIZE;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    /// A sparse in-memory device of 512-byte sectors (unwritten sectors read as zeros) that
    /// can be told to fail every read.
    #[derive(Default)]
    struct MemDev {
        sectors: Mutex<HashMap<u64, Vec<u8>>>,
        fail: AtomicBool,
    }

    impl BlockDevice for MemDev {
        fn size(&self) -> u64 {
            1 << 40
        }
        fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
            if self.fail.load(Ordering::Relaxed) {
                return Err(std::io::Error::other("injected read error"));
            }
            assert!(off.is_multiple_of(512) && buf.len().is_multiple_of(512));
            let s = self.sectors.lock().unwrap();
            for (i, chunk) in buf.chunks_mut(512).enumerate() {
                match s.get(&(off / 512 + i as u64)) {
                    Some(d) => chunk.copy_from_slice(d),
                    None => chunk.fill(0),
                }
            }
            Ok(())
        }
        fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
            assert!(off.is_multiple_of(512) && buf.len().is_multiple_of(512));
            let mut s = self.sectors.lock().unwrap();
            for (i, chunk) in buf.chunks(512).enumerate() {
                s.insert(off / 512 + i as u64, chunk.to_vec());
            }
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn name(&self) -> String {
            "mem".into()
        }
    }

    use crate::vdev::test_node as node;

    /// A raidz over `devs`, leaving out those not `present`.
    fn build<D: BlockDevice + 'static>(devs: &[Arc<D>], present: &[bool], np: u8) -> Vdev {
        let children = devs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let dev = present[i].then(|| d.clone() as Arc<dyn BlockDevice>);
                Arc::new(node(i as u64, VdevKind::Leaf { disk: false }, 9, dev, vec![]))
            })
            .collect();
        node(0, VdevKind::Raidz { nparity: np }, 9, None, children)
    }

    fn mem_devs(n: usize) -> Vec<Arc<MemDev>> {
        (0..n).map(|_| Arc::new(MemDev::default())).collect()
    }

    fn put(devs: &[Arc<MemDev>], c: &RaidzCol, bytes: &[u8]) {
        devs[c.devidx].write_at(bytes, c.offset + VDEV_LABEL_START_SIZE).unwrap();
    }

    fn get(devs: &[Arc<MemDev>], c: &RaidzCol) -> Vec<u8> {
        let mut b = vec![0u8; c.size as usize];
        devs[c.devidx].read_at(&mut b, c.offset + VDEV_LABEL_START_SIZE).unwrap();
        b
    }

    fn write_block(devs: &[Arc<MemDev>], np: usize, offset: u64, data: &[u8]) -> RaidzMap {
        let map = RaidzMap::new(offset, data.len() as u64, 9, devs.len(), np).unwrap();
        for (c, bytes) in map.cols.iter().zip(map.columns(data).unwrap()) {
            put(devs, c, &bytes);
        }
        map
    }

    fn cksums(vd: &Vdev) -> Vec<u64> {
        vd.children.iter().map(|c| c.stats.cksum_errors.load(Ordering::Relaxed)).collect()
    }

    fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for_each_combination(&(0..n).collect::<Vec<_>>(), k, &mut |c| {
            out.push(c.to_vec());
            false
        });
        out
    }

    #[test]
    fn map_of_real_blocks() {
        // raidz1 of 3, DVA 0:e2e800:2400, psize 0x1600 (11 sectors): first child 1, two big
        // columns of 6 sectors, one of 5, one skip sector after the short column.
        let m = map(0xe2e800, 0x1600, 9, 3, 1).unwrap();
        assert_eq!(
            m.cols,
            vec![
                RaidzCol { devidx: 1, offset: 0x4ba200, size: 3072 },
                RaidzCol { devidx: 2, offset: 0x4ba200, size: 3072 },
                RaidzCol { devidx: 0, offset: 0x4ba400, size: 2560 },
            ]
        );
        assert_eq!(m.skip, vec![(0, 0x4bae00)]);
        assert_eq!(m.asize(), 0x2400);
        // Bit 20 set: parity and the first data column trade places.
        let m = map(0xdfb800, 0x200, 9, 3, 1).unwrap();
        assert_eq!(
            m.cols,
            vec![RaidzCol { devidx: 2, offset: 0x4a9200, size: 512 }, RaidzCol { devidx: 1, offset: 0x4a9200, size: 512 }]
        );
        assert!(m.skip.is_empty());
        assert_eq!(m.asize(), 0x400);
        // The asize of every fixture DVA below (from zdb) is what the map allocates.
        for (np, dcols, off, psize, dva_asize) in [
            (1, 3, 0xb00000u64, 0x4000u64, 0x6000u64),
            (2, 4, 0xfae200, 0x1400, 0x2a00),
            (2, 4, 0xfa0400, 0x800, 0x1200),
            (2, 4, 0xc00000, 0x20000, 0x40200),
            (3, 5, 0x183d000, 0x1400, 0x3800),
            (3, 5, 0x1052000, 0xae00, 0x1b800),
            (3, 5, 0x41000, 0x20000, 0x50000),
        ] {
            assert_eq!(map(off, psize, 9, dcols, np).unwrap().asize(), dva_asize, "{off:#x}");
            assert_eq!(asize(psize, 9, dcols, np), dva_asize);
        }
    }

    #[test]
    fn map_invariants() {
        for np in 1..=3usize {
            for dcols in [np + 1, np + 2, 7, 12] {
                for sectors in [1u64, 2, 3, 5, 8, 13, 64, 257] {
                    for start in [0u64, 1, 2, 5, 2048, 2049, 4096 + 3] {
                        let (off, size) = (start << 9, sectors << 9);
                        let m = map(off, size, 9, dcols, np).unwrap();
                        assert_eq!(m.asize(), asize(size, 9, dcols, np), "np {np} dcols {dcols} s {sectors} b {start}");
                        assert_eq!(m.asize() % (((np + 1) as u64) << 9), 0);
                        let data: u64 = m.cols[np..].iter().map(|c| c.size).sum();
                        assert_eq!(data, size);
                        assert!(m.cols.iter().all(|c| c.size == m.cols[0].size || c.size + 512 == m.cols[0].size));
                        // No two columns (or skip sectors) overlap on a child.
                        let mut used: Vec<(usize, u64, u64)> = m.cols.iter().map(|c| (c.devidx, c.offset, c.offset + c.size)).collect();
                        used.extend(m.skip.iter().map(|&(d, o)| (d, o, o + 512)));
                        used.sort();
                        for w in used.windows(2) {
                            assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "{used:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bounds_are_errors() {
        assert!(map(0, 16 << 20, 9, 5, 1).is_ok());
        assert!(map(0, (16 << 20) + 1, 9, 5, 1).is_err());
        assert!(map(0, 0, 9, 5, 1).is_err());
        assert!(map(0, 512, 9, 256, 1).is_err());
        assert!(map(0, 512, 9, 255, 3).is_ok());
        assert!(map(0, 512, 9, 3, 3).is_err());
        assert!(map(0, 512, 9, 4, 4).is_err());
        assert!(map(0, 512, 64, 4, 1).is_err());
        assert!(map(u64::MAX, 16 << 20, 16, 255, 3).is_ok());
        let devs = mem_devs(3);
        let vd = build(&devs, &[true; 3], 1);
        assert!(read(&vd, 1, 0, 32 << 20, &|_| true, &crate::vdev::READ_PLAIN).is_err());
        assert!(read(&vd, 3, 0, 512, &|_| true, &crate::vdev::READ_PLAIN).is_err());
        let m = map(0, 1024, 9, 3, 1).unwrap();
        assert!(m.columns(&[0u8; 1025]).is_err());
        let mut cols = m.columns(&[1u8; 1024]).unwrap();
        assert!(reconstruct(&m, &mut cols, &[0, 1]).is_err());
        assert!(reconstruct(&m, &mut cols, &[7]).is_err());
    }

    #[test]
    fn gf_and_parity_vectors() {
        // Q of data columns (d0, d1) is 2·d0 + d1; R is 4·d0 + d1 (OpenZFS's generators).
        let m = map(0, 1024, 9, 5, 3).unwrap();
        assert_eq!(m.ndata(), 2);
        let mut data = vec![0u8; 1024];
        data[0] = 0x80;
        data[512] = 0x01;
        let cols = m.columns(&data).unwrap();
        assert_eq!(cols[0][0], 0x81);
        assert_eq!(cols[1][0], 0x1d ^ 0x01); // 2·0x80 = 0x100 mod 0x11d = 0x1d
        assert_eq!(cols[2][0], 0x3a ^ 0x01); // 4·0x80 = 2·0x1d = 0x3a
        for a in 1..=255u8 {
            assert_eq!(gmul(a, ginv(a)), 1);
        }
        // reconstruct() rebuilds any nparity columns, parity or data.
        let payload: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for np in 1..=3 {
            let m = map(512 * 3, 4096 - 512, 9, 6, np).unwrap();
            let want = m.columns(&payload[..4096 - 512]).unwrap();
            for k in 1..=np {
                for bad in subsets(m.cols.len(), k) {
                    let mut cols = want.clone();
                    for &b in &bad {
                        cols[b] = vec![0x5a; cols[b].len()];
                    }
                    reconstruct(&m, &mut cols, &bad).unwrap();
                    assert_eq!(cols, want, "np {np} bad {bad:?}");
                }
            }
        }
    }

    #[test]
    fn repairing_reads_rewrite_the_columns_they_replace() {
        use crate::vdev::ReadMode;
        for np in 1..=3usize {
            let ndev = np + 3;
            let (offset, len) = (512 * 5, 8192usize);
            let devs = mem_devs(ndev);
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
            let map = write_block(&devs, np, offset, &data);
            let good: Vec<Vec<u8>> = map.cols.iter().map(|c| get(&devs, c)).collect();
            let want = data.clone();
            let verify = |d: &[u8]| d == &want[..];
            let all = vec![true; ndev];
            // Every data and parity column rotten in turn, and np of them at once.
            let mut cases: Vec<Vec<usize>> = (0..map.cols.len()).map(|c| vec![c]).collect();
            cases.push((0..np).map(|k| np + k % (map.cols.len() - np)).collect::<std::collections::BTreeSet<_>>().into_iter().collect());
            for victims in cases {
                for &c in &victims {
                    put(&devs, &map.cols[c], &vec![0x5a; map.cols[c].size as usize]);
                }
                let parity_only = victims.iter().all(|&c| c < np);
                // A plain read repairs nothing; a healing read repairs what it reconstructs
                // (a rotten parity column is not read when the data verifies); a scrub checks
                // the parity too.
                let vd = build(&devs, &all, np as u8);
                assert_eq!(read(&vd, np as u8, offset, len as u64, &verify, &crate::vdev::READ_PLAIN).unwrap(), data);
                assert!(victims.iter().all(|&c| get(&devs, &map.cols[c]) != good[c]));
                let heal = ReadMode::new(true, false);
                assert_eq!(read(&vd, np as u8, offset, len as u64, &verify, &heal).unwrap(), data);
                let healed = victims.iter().all(|&c| get(&devs, &map.cols[c]) == good[c]);
                assert_eq!(healed, !parity_only, "np {np} victims {victims:?}");
                let scrub = ReadMode::new(true, true);
                let vd = build(&devs, &all, np as u8);
                assert_eq!(read(&vd, np as u8, offset, len as u64, &verify, &scrub).unwrap(), data);
                for (c, col) in map.cols.iter().enumerate() {
                    assert_eq!(get(&devs, col), good[c], "np {np} victims {victims:?} column {c}");
                }
                let charged: u64 = cksums(&vd).iter().sum();
                assert_eq!(charged, if parity_only { victims.len() as u64 } else { 0 });
                let sizes: u64 = victims.iter().map(|&c| map.cols[c].size).sum();
                assert_eq!(heal.repaired.load(Ordering::Relaxed) + scrub.repaired.load(Ordering::Relaxed), sizes);
                // Nothing left to repair.
                let again = ReadMode::new(true, true);
                assert_eq!(read(&build(&devs, &all, np as u8), np as u8, offset, len as u64, &verify, &again).unwrap(), data);
                assert_eq!(again.repaired.load(Ordering::Relaxed), 0);
            }
        }
    }

    #[test]
    fn reconstructs_missing_and_wrong_columns() {
        for np in 1..=3usize {
            for ndev in [np + 1, np + 2, np + 4] {
                for (offset, len) in [(0u64, 512usize), (512 * 7, 4096 + 512), (1 << 20, 128 << 10), (3 << 9, 1536)] {
                    let devs = mem_devs(ndev);
                    let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8 ^ (offset as u8)).collect();
                    let map = write_block(&devs, np, offset, &data);
                    let want = data.clone();
                    let verify = |d: &[u8]| d == &want[..];
                    let all = vec![true; ndev];
                    let vd = build(&devs, &all, np as u8);
                    assert_eq!(read(&vd, np as u8, offset, len as u64, &verify, &crate::vdev::READ_PLAIN).unwrap(), data);
                    assert_eq!(cksums(&vd), vec![0; ndev]);
                    // Up to np devices missing.
                    for k in 1..=np {
                        for gone in subsets(ndev, k) {
                            let mut present = vec![true; ndev];
                            for g in &gone {
                                present[*g] = false;
                            }
                            let vd = build(&devs, &present, np as u8);
                            let got = read(&vd, np as u8, offset, len as u64, &verify, &crate::vdev::READ_PLAIN);
                            assert_eq!(got.unwrap(), data, "np {np} ndev {ndev} missing {gone:?}");
                            assert_eq!(cksums(&vd), vec![0; ndev]);
                        }
                    }
                    // Silent corruption of up to np columns (data or parity, at least one
                    // data column): the data comes back and exactly those children are charged.
                    for k in 1..=np {
                        for victims in subsets(map.cols.len(), k) {
                            if victims.iter().all(|&c| c < np) {
                                continue;
                            }
                            let saved: Vec<Vec<u8>> = victims.iter().map(|&c| get(&devs, &map.cols[c])).collect();
                            for &c in &victims {
                                put(&devs, &map.cols[c], &vec![0xee; map.cols[c].size as usize]);
                            }
                            let vd = build(&devs, &all, np as u8);
                            let got = read(&vd, np as u8, offset, len as u64, &verify, &crate::vdev::READ_PLAIN);
                            assert_eq!(got.unwrap(), data, "np {np} ndev {ndev} corrupt {victims:?}");
                            let mut expect = vec![0u64; ndev];
                            for &c in &victims {
                                expect[map.cols[c].devidx] += 1;
                            }
                            assert_eq!(cksums(&vd), expect, "np {np} ndev {ndev} corrupt {victims:?}");
                            for (&c, s) in victims.iter().zip(saved) {
                                put(&devs, &map.cols[c], &s);
                            }
                        }
                    }
                    // One child missing and another silently wrong, within parity.
                    if np >= 2 && map.ndata() >= 2 {
                        let (gone, rot) = (map.cols[np].devidx, np + 1);
                        let saved = get(&devs, &map.cols[rot]);
                        put(&devs, &map.cols[rot], &vec![0x11; saved.len()]);
                        let mut present = all.clone();
                        present[gone] = false;
                        let vd = build(&devs, &present, np as u8);
                        assert_eq!(read(&vd, np as u8, offset, len as u64, &verify, &crate::vdev::READ_PLAIN).unwrap(), data);
                        assert_eq!(vd.children[map.cols[rot].devidx].stats.cksum_errors.load(Ordering::Relaxed), 1);
                        put(&devs, &map.cols[rot], &saved);
                    }
                    // Beyond parity: an error, not a panic.
                    if map.cols.len() > np {
                        let mut present = all.clone();
                        for c in map.cols.iter().take(np + 1) {
                            present[c.devidx] = false;
                        }
                        assert!(read(&build(&devs, &present, np as u8), np as u8, offset, len as u64, &verify, &crate::vdev::READ_PLAIN).is_err());
                    }
                }
            }
        }
    }

    #[test]
    fn io_errors_and_unrecoverable_blocks_are_counted() {
        let devs = mem_devs(4);
        let data: Vec<u8> = (0..6144u32).map(|i| (i * 7) as u8).collect();
        let map = write_block(&devs, 1, 4096, &data);
        let want = data.clone();
        let verify = |d: &[u8]| d == &want[..];
        // A child whose reads fail: READ error on it, data reconstructed.
        let victim = map.cols[2].devidx;
        devs[victim].fail.store(true, Ordering::Relaxed);
        let vd = build(&devs, &[true; 4], 1);
        assert_eq!(read(&vd, 1, 4096, 6144, &verify, &crate::vdev::READ_PLAIN).unwrap(), data);
        assert_eq!(vd.children[victim].stats.read_errors.load(Ordering::Relaxed), 1);
        assert_eq!(cksums(&vd), vec![0; 4]);
        // And a second column wrong: beyond raidz1, a checksum error naming the vdev and the
        // offset, every child that answered charged.
        let other = map.cols[3];
        put(&devs, &other, &vec![0; other.size as usize]);
        let vd = build(&devs, &[true; 4], 1);
        match read(&vd, 1, 4096, 6144, &verify, &crate::vdev::READ_PLAIN) {
            Err(ZfsError::Checksum { context }) => assert!(context.contains("raidz1-0") && context.contains("0x1000"), "{context}"),
            other => panic!("{other:?}"),
        }
        let mut expect = vec![1u64; 4];
        expect[victim] = 0;
        assert_eq!(cksums(&vd), expect);
        // Two children gone from a raidz1: an I/O error.
        devs[victim].fail.store(false, Ordering::Relaxed);
        let mut present = vec![true; 4];
        present[map.cols[1].devidx] = false;
        present[map.cols[2].devidx] = false;
        assert!(matches!(read(&build(&devs, &present, 1), 1, 4096, 6144, &verify, &crate::vdev::READ_PLAIN), Err(ZfsError::Io { .. })));
    }

    #[test]
    fn replacing_child_is_read_through() {
        let devs = mem_devs(3);
        let data = vec![0x42u8; 2048];
        let map = write_block(&devs, 1, 0, &data);
        let want = data.clone();
        // Child 1 is a `replacing` vdev of the old device (present) and a new empty one.
        let mut children: Vec<Arc<Vdev>> = Vec::new();
        for (i, d) in devs.iter().enumerate() {
            let leaf = Arc::new(node(i as u64, VdevKind::Leaf { disk: false }, 9, Some(d.clone() as Arc<dyn BlockDevice>), vec![]));
            if i == map.cols[1].devidx {
                let fresh = Arc::new(node(9, VdevKind::Leaf { disk: false }, 9, None, vec![]));
                children.push(Arc::new(node(i as u64, VdevKind::ReplacingOrSpare("replacing".into()), 9, None, vec![leaf, fresh])));
            } else {
                children.push(leaf);
            }
        }
        let vd = node(0, VdevKind::Raidz { nparity: 1 }, 9, None, children);
        assert_eq!(read(&vd, 1, 0, 2048, &|d| d == &want[..], &crate::vdev::READ_PLAIN).unwrap(), data);
    }

    /// Real blocks of the zfs-fuse fixture pools (ashift 9): every column as it is on the
    /// children, in map order, with the fletcher4 that zdb prints for the block pointer.
    const VECTORS: &[(&str, &[u8], usize, usize, u64, u64, [u64; 4])] = &[
        ("raidz1 short column", include_bytes!("testdata/raidz1-e2e800.cols"), 1, 3, 0xe2e800, 0x1600,
         [0x000002d9aa85ceb5, 0x0007d7ab0f853495, 0x0d47246408572e86, 0xdf7b8154ef5aea71]),
        ("raidz1 bit 20 swap", include_bytes!("testdata/raidz1-dfb800.cols"), 1, 3, 0xdfb800, 0x200,
         [0x12a, 0x8064, 0x1c109e, 0x4259ad0]),
        ("raidz2", include_bytes!("testdata/raidz2-fae200.cols"), 2, 4, 0xfae200, 0x1400,
         [0x000002cec95c8c86, 0x0006dbd10becbfed, 0x0aac7ee3f3645f8f, 0x7e278a41894989a4]),
        ("raidz3", include_bytes!("testdata/raidz3-183d000.cols"), 3, 5, 0x183d000, 0x1400,
         [0x000002cfc95e1b99, 0x0006e889486752bf, 0x0acd2d9bb8f83d1b, 0xb44a18c098803ccd]),
    ];

    #[test]
    fn real_blocks_read_and_reconstruct() {
        for &(name, bytes, np, dcols, offset, psize, ck) in VECTORS {
            let m = map(offset, psize, 9, dcols, np).unwrap();
            let devs = mem_devs(dcols);
            let mut pos = 0;
            let mut cols = Vec::new();
            for c in &m.cols {
                let b = &bytes[pos..pos + c.size as usize];
                put(&devs, c, b);
                cols.push(b.to_vec());
                pos += c.size as usize;
            }
            assert_eq!(pos, bytes.len(), "{name}");
            // The parity on disk is the parity we compute.
            let mut ours = cols.clone();
            generate_parity(&m, &mut ours);
            assert_eq!(ours, cols, "{name}: parity differs from the pool's");
            let verify = |d: &[u8]| checksum::fletcher4(d, true) == ck;
            let want = read(&build(&devs, &vec![true; dcols], np as u8), np as u8, offset, psize, &verify, &crate::vdev::READ_PLAIN).unwrap();
            assert_eq!(want.len() as u64, psize);
            for k in 1..=np {
                for gone in subsets(dcols, k) {
                    let present: Vec<bool> = (0..dcols).map(|i| !gone.contains(&i)).collect();
                    let got = read(&build(&devs, &present, np as u8), np as u8, offset, psize, &verify, &crate::vdev::READ_PLAIN).unwrap();
                    assert!(got == want, "{name}: missing {gone:?}");
                }
                for rot in subsets(m.cols.len(), k) {
                    if rot.iter().all(|&c| c < np) {
                        continue;
                    }
                    for &c in &rot {
                        put(&devs, &m.cols[c], &vec![0xa5; m.cols[c].size as usize]);
                    }
                    let vd = build(&devs, &vec![true; dcols], np as u8);
                    assert!(read(&vd, np as u8, offset, psize, &verify, &crate::vdev::READ_PLAIN).unwrap() == want, "{name}: rotten {rot:?}");
                    let mut expect = vec![0u64; dcols];
                    for &c in &rot {
                        expect[m.cols[c].devidx] += 1;
                    }
                    assert_eq!(cksums(&vd), expect, "{name}: rotten {rot:?}");
                    for &c in &rot {
                        put(&devs, &m.cols[c], &cols[c]);
                    }
                }
            }
        }
    }

    /// The fixture pools themselves (outside the repository; needs `zstd`):
    /// `cargo test -p oxzfs --lib vdev::raidz -- --ignored`. Blocks up to 128 KiB, including
    /// a raidz1 block with the bit-20 swap, a sha256 (dedup) block and compressed blocks with
    /// short columns, read whole and with every set of up to nparity children missing.
    #[test]
    #[ignore]
    fn fixture_pools() {
        let root = std::env::var_os("OXZFS_SHARED_FIXTURES")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"));
        let work = std::env::temp_dir().join(format!("oxzfs-raidz-test-{}", std::process::id()));
        let f4 = checksum::ZIO_CHECKSUM_FLETCHER_4;
        let sha = checksum::ZIO_CHECKSUM_SHA256;
        let cases: &[(&str, usize, usize, &[(u64, u64, u8, [u64; 4])])] = &[
            ("raidz1", 1, 3, &[
                (0xb00000, 0x4000, f4, [0x000007f3bcac99f8, 0x003f848d14806a56, 0x5207fba40712ea47, 0xb686276bc0f2fbfa]),
                (0xae4800, 0x4000, f4, [0x000008081daae593, 0x003ff0983d3719ac, 0x5505525849b7cad9, 0x15e23c6f67001689]),
                (0x17400, 0xa00, f4, [0x000000afec943726, 0x0000f76b96f57b48, 0x00d1ac3ac1aa1ece, 0x83c477e2113d3da3]),
            ]),
            ("raidz2-dedup", 2, 4, &[
                (0xc00000, 0x20000, sha, [0xaf64ac87cefd38ad, 0xc3e0f3998ae1538e, 0x4011303d01d14d7d, 0x7cc7dccb0854656a]),
                (0xfa0400, 0x800, f4, [0x00000082809cd1c3, 0x00009bc719945e15, 0x0069e368f3f019ea, 0x34a2d753ccac1dba]),
                (0x22e00, 0xa00, f4, [0x000000a9912d3035, 0x0000e910616b87b7, 0x00bf9c221a40df6c, 0x7518cf8d9371d677]),
            ]),
            ("raidz3-big", 3, 5, &[
                (0x41000, 0x20000, f4, [0x00003fe3b596ca0b, 0x0feee09a9656b57f, 0x128d41a5f1eb3ab9, 0x58e8971ada26d008]),
                (0x1052000, 0xae00, f4, [0x00000a70de973403, 0x00e17f33a2e48e3f, 0xb2d51c5cb7039656, 0x6d6212ad502b1277]),
                (0x1849800, 0x600, f4, [0x00000077e7b1e370, 0x00005d5ac3f1cff9, 0x002a7496cfef97b6, 0x0e911914e91091ea]),
            ]),
        ];
        for &(pool, np, dcols, blocks) in cases {
            let dir = work.join(pool);
            std::fs::create_dir_all(&dir).unwrap();
            let mut devs = Vec::new();
            for i in 0..dcols {
                let out = dir.join(format!("d{i}"));
                let st = std::process::Command::new("zstd")
                    .args(["-q", "-f", "-d", "--sparse"])
                    .arg(root.join(pool).join(format!("d{i}.zst")))
                    .arg("-o")
                    .arg(&out)
                    .status()
                    .expect("zstd");
                assert!(st.success());
                devs.push(Arc::new(FileDevice::open(&out, false).unwrap()));
            }
            for &(offset, psize, alg, ck) in blocks {
                let verify = |d: &[u8]| checksum::compute(alg, d, true, &[0; 32]).map_or(false, |c| c == ck);
                let vd = build(&devs, &vec![true; dcols], np as u8);
                let want = read(&vd, np as u8, offset, psize, &verify, &crate::vdev::READ_PLAIN).unwrap();
                for k in 1..=np {
                    for gone in subsets(dcols, k) {
                        let present: Vec<bool> = (0..dcols).map(|i| !gone.contains(&i)).collect();
                        let vd = build(&devs, &present, np as u8);
                        let got = read(&vd, np as u8, offset, psize, &verify, &crate::vdev::READ_PLAIN);
                        assert!(got.unwrap() == want, "{pool} {offset:#x} missing {gone:?}");
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&work);
    }
}
