//! ZLE: zero-length encoding, the cheap codec for blocks that are mostly zeros.
//!
//! A stream of runs, each introduced by one length byte `b`, with the parameter `n` (64 in every
//! OpenZFS pool; the table entry's "level"):
//!
//! ```text
//!   b <  n:  b+1 literal bytes follow              (1 ..= n)
//!   b >= n:  b-n+1 zero bytes, nothing follows     (1 ..= 256-n)
//! ```
//!
//! Decoding stops when `lsize` bytes are out (sector padding after the stream is never read);
//! a run that would pass `lsize` or the input is corruption. The encoder follows OpenZFS's run
//! choices exactly (a literal run ends before two zeros in a row, and includes its last byte
//! only when that byte is not zero) so both produce the same bytes and give up at the same point.

use crate::{FormatError, Result};

/// The run-length parameter OpenZFS uses for ZLE (zio_compress_table's value).
pub const ZLE_N: usize = 64;

fn bad(detail: impl Into<String>) -> FormatError {
    FormatError::invalid("zle block", detail)
}

/// Decode a ZLE stream with parameter `n` (1..=255) to exactly `lsize` bytes.
pub fn decompress(src: &[u8], lsize: usize, n: usize) -> Result<Vec<u8>> {
    if !(1..=255).contains(&n) {
        return Err(bad(format!("run parameter {n} outside 1..=255")));
    }
    let mut dst = Vec::with_capacity(lsize);
    let mut s = 0usize;
    while s < src.len() && dst.len() < lsize {
        let len = 1 + src[s] as usize;
        s += 1;
        if len <= n {
            let chunk = src.get(s..s + len).ok_or_else(|| bad(format!("literal run of {len} at {s} passes the input")))?;
            if dst.len() + len > lsize {
                return Err(bad(format!("literal run of {len} passes the logical size {lsize}")));
            }
            dst.extend_from_slice(chunk);
            s += len;
        } else {
            let zeros = len - n;
            if dst.len() + zeros > lsize {
                return Err(bad(format!("zero run of {zeros} passes the logical size {lsize}")));
            }
            dst.resize(dst.len() + zeros, 0);
        }
    }
    if dst.len() != lsize {
        return Err(bad(format!("input ended with {} of {lsize} bytes out", dst.len())));
    }
    Ok(dst)
}

/// Encode `src` with parameter `n` (1..=255); None when it would not fit in `max_psize` bytes.
pub fn compress(src: &[u8], n: usize, max_psize: usize) -> Option<Vec<u8>> {
    if !(1..=255).contains(&n) {
        return None;
    }
    let mut dst = Vec::with_capacity(max_psize.min(src.len() + src.len() / n + 1));
    let mut s = 0usize;
    // OpenZFS's loop runs while at least two output bytes remain (a length byte and one more).
    while s < src.len() && dst.len() + 1 < max_psize {
        let first = s;
        if src[s] == 0 {
            let last = (s + (256 - n)).min(src.len());
            while s < last && src[s] == 0 {
                s += 1;
            }
            dst.push((s - first - 1 + n) as u8);
        } else {
            // A literal run needs room for n bytes after its length byte.
            if max_psize - (dst.len() + 1) < n {
                break;
            }
            let len_at = dst.len();
            dst.push(0);
            let last = (s + n).min(src.len());
            while s + 1 < last && (src[s] | src[s + 1]) != 0 {
                s += 1;
            }
            if src[s] != 0 {
                s += 1;
            }
            dst.extend_from_slice(&src[first..s]);
            dst[len_at] = (s - first - 1) as u8;
        }
    }
    if s == src.len() && dst.len() <= max_psize {
        Some(dst)
    } else {
        None
    }
}
