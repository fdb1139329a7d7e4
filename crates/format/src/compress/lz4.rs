//! LZ4 in OpenZFS's framing: a 4-byte big-endian length, then one raw LZ4 block.
//!
//! ```text
//!   0        4                    4+bufsiz            psize
//!   | bufsiz | LZ4 block (bufsiz) | zero padding to the sector |
//! ```
//!
//! The length is needed because the physical block is padded to the sector size and an LZ4
//! block cannot tell its own end. OpenZFS rejects `bufsiz + 4 > psize` and accepts a block
//! that decodes to fewer than `lsize` bytes (we zero the rest). The block itself is the
//! standard LZ4 block format, handled by lz4_flex.

use crate::{FormatError, Result};

fn bad(detail: impl Into<String>) -> FormatError {
    FormatError::invalid("lz4 block", detail)
}

/// Decode an OpenZFS lz4 block to exactly `lsize` bytes.
pub fn decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    let head = crate::bytes::slice(src, 0, 4, "lz4 block header")?;
    let bufsiz = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let block = src
        .get(4..)
        .and_then(|rest| rest.get(..bufsiz))
        .ok_or_else(|| bad(format!("stored length {bufsiz} passes the {}-byte physical block", src.len())))?;
    let mut out = vec![0u8; lsize];
    lz4_flex::block::decompress_into(block, &mut out).map_err(|e| bad(e.to_string()))?;
    Ok(out)
}

/// Encode `src`; None when the framed block would not fit in `max_psize` bytes.
pub fn compress(src: &[u8], max_psize: usize) -> Option<Vec<u8>> {
    let block = lz4_flex::block::compress(src);
    if block.len() + 4 > max_psize || block.len() > u32::MAX as usize {
        return None;
    }
    let mut out = Vec::with_capacity(block.len() + 4);
    out.extend_from_slice(&(block.len() as u32).to_be_bytes());
    out.extend_from_slice(&block);
    Some(out)
}
