//! gzip-1..9: a zlib stream (RFC 1950: 2-byte header, deflate data, Adler-32), as zlib's
//! `compress2`/`uncompress` write and read it; the level lives only in the block pointer's
//! compression value (gzip-1 = 5 … gzip-9 = 13), not in the stream.
//!
//! The physical block is padded to the sector size after the stream; decoding stops at the
//! stream's end. Like zlib's `uncompress`, a complete stream that yields fewer than `lsize`
//! bytes is accepted (the rest is zero); a stream that is cut short, fails its Adler-32, or
//! would yield more than `lsize` bytes is corruption.

use crate::{FormatError, Result};
use flate2::{Compression, Decompress, FlushDecompress, Status};

fn bad(detail: impl Into<String>) -> FormatError {
    FormatError::invalid("gzip block", detail)
}

/// Decode a zlib stream to exactly `lsize` bytes.
pub fn decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; lsize];
    let mut z = Decompress::new(true);
    // One extra byte of room tells "ended exactly at lsize" apart from "wanted more".
    let mut spare = [0u8; 1];
    let status = z.decompress(src, &mut out, FlushDecompress::Finish).map_err(|e| bad(e.to_string()))?;
    let status = match status {
        Status::StreamEnd => Status::StreamEnd,
        _ if z.total_out() as usize == lsize => {
            let before = z.total_out();
            let consumed = z.total_in() as usize;
            let st = z
                .decompress(&src[consumed.min(src.len())..], &mut spare, FlushDecompress::Finish)
                .map_err(|e| bad(e.to_string()))?;
            if z.total_out() != before {
                return Err(bad(format!("stream is longer than the logical size {lsize}")));
            }
            st
        }
        s => s,
    };
    if status != Status::StreamEnd {
        return Err(bad(format!("stream incomplete after {} bytes in, {} out", z.total_in(), z.total_out())));
    }
    Ok(out)
}

/// Encode `src` at zlib level 1..=9; None when the stream would not fit in `max_psize` bytes.
pub fn compress(src: &[u8], level: u32, max_psize: usize) -> Option<Vec<u8>> {
    let mut z = flate2::Compress::new(Compression::new(level.clamp(1, 9)), true);
    let mut out = Vec::with_capacity(max_psize);
    match z.compress_vec(src, &mut out, flate2::FlushCompress::Finish) {
        Ok(Status::StreamEnd) if out.len() <= max_psize => Some(out),
        _ => None,
    }
}
