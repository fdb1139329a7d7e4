//! raidz: single, double and triple parity over the children of a top-level vdev.
//!
//! A block of `size` bytes (rounded up to the sector size) at `offset` of the raidz vdev's
//! space is laid out in columns, as OpenZFS's vdev_raidz_map_alloc lays it out:
//!
//! ```text
//!   b = offset >> ashift (sector)   s = size in sectors   f = b % dcols (first child)
//!   o = (b / dcols) << ashift       (offset on each child; +1 sector when the column wraps)
//!   q = s / (dcols - p)   r = s % (dcols - p)   bc = r ? r + p : 0  (big columns: q+1 sectors)
//!   columns c = 0..(q ? dcols : bc): child (f + c) % dcols; the first p columns are parity
//!   P, Q, R, the rest hold the data in order. raidz1 swaps columns 0 and 1 when bit 20 of
//!   the offset is set (a format decision kept forever).
//! ```
//! Parity over GF(2^8) with polynomial 0x11d: P = Σ dᵢ, Q = Σ 2^(n-1-i)·dᵢ, R = Σ 4^(n-1-i)·dᵢ
//! (short columns count as zero past their end). Any `p` missing or wrong columns are
//! recovered by solving that linear system. Reads take only the data columns; parity is read
//! when a child is missing, fails, or the checksum says the data is wrong — then combinations
//! of suspect columns are tried (as vdev_raidz_combrec does) until the checksum verifies, and
//! the children that gave wrong bytes are charged a CKSUM error.

use super::{Vdev, VdevState};
use crate::{Result, ZfsError};
use std::sync::atomic::Ordering;

/// One column of a raidz map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidzCol {
    pub devidx: usize,
    /// Offset on the child (in its own space, before the label area).
    pub offset: u64,
    pub size: u64,
}

#[derive(Clone, Debug)]
pub struct RaidzMap {
    pub cols: Vec<RaidzCol>,
    pub nparity: usize,
    /// Total data bytes (size rounded up to the sector).
    pub data_size: u64,
}

impl RaidzMap {
    pub fn new(offset: u64, size: u64, ashift: u8, dcols: usize, nparity: usize) -> Result<RaidzMap> {
        if dcols <= nparity || dcols > 255 || nparity == 0 || nparity > 3 {
            return Err(ZfsError::Invalid(format!("raidz{nparity} with {dcols} children")));
        }
        if size == 0 || size > 16 << 20 {
            return Err(ZfsError::Invalid(format!("raidz read of {size} bytes")));
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
        let acols = if q == 0 { bc } else { dc };
        let mut cols = Vec::with_capacity(acols as usize);
        for c in 0..acols {
            let mut col = f + c;
            let mut coff = o;
            if col >= dc {
                col -= dc;
                coff += 1 << sh;
            }
            let csize = if c < bc { (q + 1) << sh } else { q << sh };
            cols.push(RaidzCol { devidx: col as usize, offset: coff, size: csize });
        }
        if nparity == 1 && offset & (1 << 20) != 0 && cols.len() >= 2 {
            let (a, b2) = (cols[0], cols[1]);
            cols[0] = RaidzCol { devidx: b2.devidx, offset: b2.offset, size: a.size };
            cols[1] = RaidzCol { devidx: a.devidx, offset: a.offset, size: b2.size };
        }
        Ok(RaidzMap { cols, nparity, data_size: s << sh })
    }

    pub fn ndata(&self) -> usize {
        self.cols.len() - self.nparity
    }
}

// GF(2^8), polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d), generator 2.
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

fn gpow(base: u8, e: usize) -> u8 {
    let mut r = 1u8;
    for _ in 0..e {
        r = gmul(r, base);
    }
    r
}

/// Coefficient of data column `i` (of `n`) in parity row `p` (0 = P, 1 = Q, 2 = R).
fn coef(p: usize, i: usize, n: usize) -> u8 {
    match p {
        0 => 1,
        1 => gpow(2, n - 1 - i),
        _ => gpow(4, n - 1 - i),
    }
}

/// Compute the parity columns of `map` from its data columns (cols[nparity..]).
pub fn generate_parity(map: &RaidzMap, cols: &mut [Vec<u8>]) {
    let np = map.nparity;
    let n = map.ndata();
    let plen = map.cols[0].size as usize;
    for p in 0..np {
        let mut out = vec![0u8; plen];
        for i in 0..n {
            let c = coef(p, i, n);
            for (j, &d) in cols[np + i].iter().enumerate() {
                out[j] ^= gmul(c, d);
            }
        }
        cols[p] = out;
    }
}

/// Recover the data columns in `missing` (indexes into data columns 0..n) from the present
/// data columns and the parity rows in `rows`, in place. `cols` holds every column (parity first).
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
    // A[r][m] = coef(row r, missing m); invert by Gauss-Jordan.
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
    // Syndromes: parity XOR contributions of the present data columns.
    let mut syn: Vec<Vec<u8>> = Vec::with_capacity(k);
    for &p in rows {
        let mut s = cols[p].clone();
        s.resize(plen, 0);
        for i in 0..n {
            if missing.contains(&i) {
                continue;
            }
            let c = coef(p, i, n);
            for (j, &d) in cols[np + i].iter().enumerate() {
                s[j] ^= gmul(c, d);
            }
        }
        syn.push(s);
    }
    for (mi, &m) in missing.iter().enumerate() {
        let len = map.cols[np + m].size as usize;
        let mut out = vec![0u8; len];
        for (ri, s) in syn.iter().enumerate() {
            let c = a[mi][k + ri];
            if c == 0 {
                continue;
            }
            for j in 0..len {
                out[j] ^= gmul(c, s[j]);
            }
        }
        cols[np + m] = out;
    }
    true
}

fn read_col(vd: &Vdev, col: &RaidzCol) -> Option<Vec<u8>> {
    let child = vd.children.get(col.devidx)?;
    if col.size == 0 {
        return Some(Vec::new());
    }
    if child.state() == VdevState::Unavail {
        return None;
    }
    let r = if child.is_leaf() { child.read_leaf(col.offset, col.size) } else { child.read(col.offset, col.size, &|_| true) };
    r.ok()
}

fn assemble(map: &RaidzMap, cols: &[Vec<u8>], size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(map.data_size as usize);
    for c in &cols[map.nparity..] {
        out.extend_from_slice(c);
    }
    out.truncate(size as usize);
    out
}

/// Subsets of `items` of size `k`, in lexicographic order.
fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..k).collect();
    if k == 0 || k > items.len() {
        return out;
    }
    loop {
        out.push(idx.iter().map(|&i| items[i]).collect());
        let mut i = k;
        loop {
            if i == 0 {
                return out;
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

pub fn read(vd: &Vdev, nparity: u8, offset: u64, size: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<Vec<u8>> {
    let np = nparity as usize;
    let map = RaidzMap::new(offset, size, vd.ashift, vd.children.len(), np)?;
    let n = map.ndata();
    let fail = || ZfsError::Checksum { context: format!("vdev {} offset {offset:#x} size {size:#x}: no reconstruction verified", vd.display_name()) };
    // 1. Data columns only.
    let mut cols: Vec<Vec<u8>> = vec![Vec::new(); map.cols.len()];
    let mut missing_data = Vec::new();
    for i in 0..n {
        match read_col(vd, &map.cols[np + i]) {
            Some(d) => cols[np + i] = d,
            None => missing_data.push(i),
        }
    }
    if missing_data.is_empty() {
        let d = assemble(&map, &cols, size);
        if verify(&d) {
            return Ok(d);
        }
    }
    if missing_data.len() > np {
        return Err(ZfsError::Io {
            device: vd.display_name(),
            offset,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, format!("{} columns unreadable, parity {np}", missing_data.len())),
        });
    }
    // 2. Parity.
    let mut rows = Vec::new();
    for p in 0..np {
        if let Some(d) = read_col(vd, &map.cols[p]) {
            cols[p] = d;
            rows.push(p);
        }
    }
    let original = cols.clone();
    // 3. Reconstruct the missing columns, then, if the checksum still fails, also each
    //    combination of present data columns as silently wrong.
    let present: Vec<usize> = (0..n).filter(|i| !missing_data.contains(i)).collect();
    let spare = rows.len().saturating_sub(missing_data.len());
    for extra in 0..=spare {
        let combos = if extra == 0 { vec![Vec::new()] } else { combinations(&present, extra) };
        for combo in combos {
            let mut bad: Vec<usize> = missing_data.clone();
            bad.extend_from_slice(&combo);
            bad.sort_unstable();
            let mut trial = original.clone();
            // Try each choice of parity rows when more are available than needed.
            let row_sets = if rows.len() > bad.len() { combinations(&rows, bad.len()) } else { vec![rows.clone()] };
            for rs in row_sets {
                if !solve(&map, &mut trial, &bad, &rs) {
                    continue;
                }
                let d = assemble(&map, &trial, size);
                if verify(&d) {
                    for &i in &combo {
                        if trial[np + i] != original[np + i] {
                            if let Some(ch) = vd.children.get(map.cols[np + i].devidx) {
                                ch.stats.cksum_errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    return Ok(d);
                }
            }
        }
    }
    Err(fail())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::{BlockDevice, VdevKind, VdevStats};
    use oxzfs_format::label::VDEV_LABEL_START_SIZE;
    use std::sync::{Arc, Mutex};

    struct MemDev(Mutex<Vec<u8>>);
    impl BlockDevice for MemDev {
        fn size(&self) -> u64 {
            self.0.lock().unwrap().len() as u64
        }
        fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
            let d = self.0.lock().unwrap();
            buf.copy_from_slice(&d[off as usize..off as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
            self.0.lock().unwrap()[off as usize..off as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn name(&self) -> String {
            "mem".into()
        }
    }

    fn leaf(i: u64, dev: Option<Arc<MemDev>>) -> Arc<Vdev> {
        Arc::new(Vdev {
            id: i,
            guid: 100 + i,
            kind: VdevKind::Leaf { disk: false },
            ashift: 9,
            asize: 0,
            path: None,
            dev: dev.map(|d| d as Arc<dyn BlockDevice>),
            children: vec![],
            stats: VdevStats::default(),
            is_log: false,
            alloc_bias: String::new(),
            metaslab_array: 0,
            metaslab_shift: 0,
        })
    }

    fn build(devs: &[Arc<MemDev>], present: &[bool], np: u8) -> Vdev {
        Vdev {
            id: 0,
            guid: 1,
            kind: VdevKind::Raidz { nparity: np },
            ashift: 9,
            asize: 0,
            path: None,
            dev: None,
            children: devs.iter().enumerate().map(|(i, d)| leaf(i as u64, present[i].then(|| d.clone()))).collect(),
            stats: VdevStats::default(),
            is_log: false,
            alloc_bias: String::new(),
            metaslab_array: 0,
            metaslab_shift: 0,
        }
    }

    fn write_block(devs: &[Arc<MemDev>], np: usize, offset: u64, data: &[u8]) -> RaidzMap {
        let map = RaidzMap::new(offset, data.len() as u64, 9, devs.len(), np).unwrap();
        let mut cols = vec![Vec::new(); map.cols.len()];
        let mut pos = 0;
        for i in 0..map.ndata() {
            let sz = map.cols[np + i].size as usize;
            let mut c = vec![0u8; sz];
            let take = sz.min(data.len().saturating_sub(pos));
            c[..take].copy_from_slice(&data[pos..pos + take]);
            pos += sz;
            cols[np + i] = c;
        }
        generate_parity(&map, &mut cols);
        for (c, col) in map.cols.iter().zip(cols.iter()) {
            devs[c.devidx].write_at(col, c.offset + VDEV_LABEL_START_SIZE).unwrap();
        }
        map
    }

    #[test]
    fn reconstructs_missing_and_wrong_columns() {
        for np in 1..=3usize {
            for ndev in [np + 2, np + 4] {
                for (offset, len) in [(0u64, 512usize), (512 * 7, 4096 + 512), (1 << 20, 128 << 10), (3 << 9, 1536)] {
                    let devs: Vec<Arc<MemDev>> = (0..ndev).map(|_| Arc::new(MemDev(Mutex::new(vec![0u8; 8 << 20])))).collect();
                    let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8 ^ (offset as u8)).collect();
                    let map = write_block(&devs, np, offset, &data);
                    let want = data.clone();
                    let verify = |d: &[u8]| d == &want[..];
                    // Everything present.
                    let all = vec![true; ndev];
                    assert_eq!(read(&build(&devs, &all, np as u8), np as u8, offset, len as u64, &verify).unwrap(), data);
                    // Up to np devices missing.
                    for k in 1..=np {
                        for gone in combinations(&(0..ndev).collect::<Vec<_>>(), k) {
                            let mut present = vec![true; ndev];
                            for g in &gone {
                                present[*g] = false;
                            }
                            let got = read(&build(&devs, &present, np as u8), np as u8, offset, len as u64, &verify);
                            assert_eq!(got.unwrap(), data, "np {np} ndev {ndev} missing {gone:?}");
                        }
                    }
                    // Silent corruption of up to np data columns.
                    for k in 1..=np.min(map.ndata()) {
                        let victims: Vec<RaidzCol> = map.cols[np..np + k].to_vec();
                        let saved: Vec<Vec<u8>> = victims
                            .iter()
                            .map(|c| {
                                let mut b = vec![0u8; c.size as usize];
                                devs[c.devidx].read_at(&mut b, c.offset + VDEV_LABEL_START_SIZE).unwrap();
                                b
                            })
                            .collect();
                        for c in &victims {
                            devs[c.devidx].write_at(&vec![0xeeu8; c.size as usize], c.offset + VDEV_LABEL_START_SIZE).unwrap();
                        }
                        let vd = build(&devs, &all, np as u8);
                        assert_eq!(read(&vd, np as u8, offset, len as u64, &verify).unwrap(), data, "np {np} corrupt {k}");
                        for c in &victims {
                            assert_eq!(vd.children[c.devidx].stats.cksum_errors.load(Ordering::Relaxed), 1);
                        }
                        for (c, s) in victims.iter().zip(saved) {
                            devs[c.devidx].write_at(&s, c.offset + VDEV_LABEL_START_SIZE).unwrap();
                        }
                    }
                    // Beyond parity: an error, not a panic.
                    let mut present = vec![true; ndev];
                    for c in map.cols.iter().take(np + 1) {
                        present[c.devidx] = false;
                    }
                    assert!(read(&build(&devs, &present, np as u8), np as u8, offset, len as u64, &verify).is_err());
                }
            }
        }
    }
}
