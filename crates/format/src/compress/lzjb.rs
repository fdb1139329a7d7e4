//! LZJB: the original ZFS compressor (Jeff Bonwick's Lempel-Ziv), hand-written from the format.
//!
//! On disk the block is the bare stream, no header; it is decoded until `lsize` bytes are out,
//! so the sector padding after it is never read. The stream is groups of one *copymap* byte
//! and up to eight items; bit i (from the least significant) of the copymap says what item i is:
//!
//! ```text
//!   bit clear: one literal byte
//!   bit set:   a match, two bytes  [ mlen-3 : 6 | offset : 10 ] (big-endian 16-bit word)
//!              copy mlen (3..=66) bytes from `offset` (1..=1023) bytes back in the output
//! ```
//!
//! The compressor hashes three bytes into a 1024-entry table of the last position that hashed
//! there (OpenZFS keeps the low 16 bits of the position's address; a zeroed table and positions
//! relative to the block start give the same matches as a 1 KiB-aligned buffer). It gives up
//! (returns None) as soon as fewer than a full group's worst case (17 bytes) is left in
//! `max_psize`, exactly where OpenZFS gives up, so both pick "compressed" for the same blocks.

use crate::{FormatError, Result};

const NBBY: usize = 8;
const MATCH_BITS: usize = 6;
const MATCH_MIN: usize = 3;
const MATCH_MAX: usize = (1 << MATCH_BITS) + (MATCH_MIN - 1);
const OFFSET_MASK: usize = (1 << (16 - MATCH_BITS)) - 1;
const LEMPEL_SIZE: usize = 1024;

fn bad(detail: impl Into<String>) -> FormatError {
    FormatError::invalid("lzjb block", detail)
}

/// Decode an lzjb stream to exactly `lsize` bytes.
pub fn decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    let mut dst: Vec<u8> = Vec::with_capacity(lsize);
    let mut s = 0usize;
    let mut copymap = 0u8;
    let mut item = NBBY; // index of the next item in the current group
    while dst.len() < lsize {
        if item == NBBY {
            copymap = *src.get(s).ok_or_else(|| bad(format!("input ended at {s} with {} of {lsize} bytes out", dst.len())))?;
            s += 1;
            item = 0;
        }
        let is_match = copymap & (1 << item) != 0;
        item += 1;
        if is_match {
            let pair = src.get(s..s + 2).ok_or_else(|| bad(format!("input ended inside a match at {s}")))?;
            s += 2;
            let mlen = (pair[0] as usize >> (NBBY - MATCH_BITS)) + MATCH_MIN;
            let offset = (((pair[0] as usize) << NBBY) | pair[1] as usize) & OFFSET_MASK;
            if offset == 0 || offset > dst.len() {
                return Err(bad(format!("match offset {offset} at output {} points before the block", dst.len())));
            }
            let n = mlen.min(lsize - dst.len());
            let from = dst.len() - offset;
            // Byte by byte: a match may overlap the bytes it produces (offset < mlen).
            for i in 0..n {
                let b = dst[from + i];
                dst.push(b);
            }
        } else {
            let b = *src.get(s).ok_or_else(|| bad(format!("input ended at {s} with {} of {lsize} bytes out", dst.len())))?;
            s += 1;
            dst.push(b);
        }
    }
    debug_assert_eq!(dst.len(), lsize);
    Ok(dst)
}

/// Encode `src`; None when the stream would not fit in `max_psize` bytes.
pub fn compress(src: &[u8], max_psize: usize) -> Option<Vec<u8>> {
    let mut dst: Vec<u8> = Vec::with_capacity(max_psize.min(src.len() + src.len() / 8 + 1));
    let mut lempel = [0u16; LEMPEL_SIZE];
    let mut copymap_at = 0usize;
    let mut item = NBBY;
    let mut s = 0usize;
    while s < src.len() {
        if item == NBBY {
            // Room for a whole group (copymap + 8 two-byte matches) must remain.
            if dst.len() + 1 + 2 * NBBY >= max_psize {
                return None;
            }
            item = 0;
            copymap_at = dst.len();
            dst.push(0);
        }
        let mask = 1u8 << item;
        item += 1;
        if s + MATCH_MAX > src.len() {
            dst.push(src[s]);
            s += 1;
            continue;
        }
        let mut hash = ((src[s] as usize) << 16) + ((src[s + 1] as usize) << 8) + src[s + 2] as usize;
        hash += hash >> 9;
        hash += hash >> 5;
        let hp = &mut lempel[hash & (LEMPEL_SIZE - 1)];
        let offset = (s.wrapping_sub(*hp as usize)) & OFFSET_MASK;
        *hp = s as u16;
        if offset != 0 && offset <= s {
            let cpy = s - offset;
            if src[s..s + MATCH_MIN] == src[cpy..cpy + MATCH_MIN] {
                let mut mlen = MATCH_MIN;
                while mlen < MATCH_MAX && src[s + mlen] == src[cpy + mlen] {
                    mlen += 1;
                }
                dst[copymap_at] |= mask;
                dst.push((((mlen - MATCH_MIN) << (NBBY - MATCH_BITS)) | (offset >> NBBY)) as u8);
                dst.push(offset as u8);
                s += mlen;
                continue;
            }
        }
        dst.push(src[s]);
        s += 1;
    }
    debug_assert!(dst.len() <= max_psize);
    Some(dst)
}
