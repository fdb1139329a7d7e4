//! Space maps: the on-disk log of a metaslab's allocations and frees.
//!
//! ```text
//!   bonus (space_map_phys_t): smp_object, smp_length (bytes of entries), smp_alloc,
//!         smp_pad[5], smp_histogram[32] (only with spacemap_histogram: 320 bytes, else 24)
//!   entries, u64 words:
//!     debug   10 | action(2) | syncpass(10) | txg(50)          (prefix 2)
//!     v1      0 | offset(47) | type(1) | run-1(15)             (units of 1 << ashift)
//!     v2      11 | pad | run-1(36) | vdev(24)  +  type(1) | offset(63)
//! ```
//! First version: v1 entries are written (runs split at 2^15 units); v1, v2 and debug entries
//! are read.
use crate::bytes::u64_at;
use crate::Result;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpaceMapPhys {
    pub object: u64,
    pub length: u64,
    pub alloc: i64,
    pub histogram: [u64; 32],
}

impl SpaceMapPhys {
    pub fn decode(b: &[u8], le: bool) -> Result<SpaceMapPhys> {
        let mut p = SpaceMapPhys { object: u64_at(b, 0, le, "sm")?, length: u64_at(b, 8, le, "sm")?, alloc: u64_at(b, 16, le, "sm")? as i64, histogram: [0; 32] };
        if b.len() >= 320 {
            for i in 0..32 {
                p.histogram[i] = u64_at(b, 64 + i * 8, le, "sm")?;
            }
        }
        Ok(p)
    }
    pub fn encode(&self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 320];
        b[0..8].copy_from_slice(&self.object.to_le_bytes());
        b[8..16].copy_from_slice(&self.length.to_le_bytes());
        b[16..24].copy_from_slice(&(self.alloc as u64).to_le_bytes());
        for i in 0..32 {
            b[64 + i * 8..72 + i * 8].copy_from_slice(&self.histogram[i].to_le_bytes());
        }
        b.truncate(len);
        b
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmEntry {
    Debug { action: u8, syncpass: u64, txg: u64 },
    Range { free: bool, offset: u64, run: u64, vdev: Option<u64> },
}

pub fn decode_entries(b: &[u8], le: bool) -> Result<Vec<SmEntry>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 8 <= b.len() {
        let w = u64_at(b, i, le, "sm entry")?;
        i += 8;
        match w >> 62 {
            2 => out.push(SmEntry::Debug { action: ((w >> 60) & 3) as u8, syncpass: (w >> 50) & 0x3ff, txg: w & ((1 << 50) - 1) }),
            3 => {
                let w2 = u64_at(b, i, le, "sm entry")?;
                i += 8;
                out.push(SmEntry::Range { free: w2 >> 63 != 0, offset: w2 & !(1 << 63), run: ((w >> 24) & ((1 << 36) - 1)) + 1, vdev: Some(w & 0xff_ffff) });
            }
            _ => out.push(SmEntry::Range { free: (w >> 15) & 1 != 0, offset: (w >> 16) & ((1 << 47) - 1), run: (w & 0x7fff) + 1, vdev: None }),
        }
    }
    Ok(out)
}

pub fn encode_entries(entries: &[SmEntry], _v2: bool) -> Vec<u64> {
    let mut out = Vec::new();
    for e in entries {
        match *e {
            SmEntry::Debug { action, syncpass, txg } => out.push((2u64 << 62) | ((action as u64 & 3) << 60) | ((syncpass & 0x3ff) << 50) | (txg & ((1 << 50) - 1))),
            SmEntry::Range { free, mut offset, mut run, .. } => {
                while run > 0 {
                    let r = run.min(1 << 15);
                    out.push((offset << 16) | ((free as u64) << 15) | (r - 1));
                    offset += r;
                    run -= r;
                }
            }
        }
    }
    out
}
