//! zstd in OpenZFS's framing (module/zstd/zfs_zstd.c): an 8-byte header, then one zstd frame in
//! the *magicless* format (the 4-byte magic 0xFD2FB528 left out), written without a content size
//! and without a frame checksum.
//!
//! ```text
//!   0       4                      8                   8+c_len            psize
//!   | c_len | level:8 | version:24 | magicless frame    | zero padding     |
//!     BE32    one BE32 word
//! ```
//!
//! `version` is the zstd library version that wrote the block (10405 for zstd 1.4.5 in OpenZFS
//! 2.1) and is informational. `level` is the *enum* `zio_zstd_levels` value, not zstd's own level:
//! 1..=19 are zstd levels 1..=19, 103..=123 are the fast levels -1..-10, -20, -30 … -100, -500,
//! -1000 (ZIO_ZSTD_LEVEL_FAST_1 = 103). OpenZFS rejects a block whose level is not one of these.
//! Early OpenZFS 2.0 builds stored the word in host bit-field order; OpenZFS recognises those
//! layouts by where the zero byte of the (< 2^16) version sits, and so do we.

use crate::{FormatError, Result};

/// zstd's frame magic, little-endian on the wire; OpenZFS leaves it out.
const ZSTD_MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();
const HDR: usize = 8;

/// ZIO_ZSTD_LEVEL_DEFAULT: zstd level 3.
pub const ZIO_ZSTD_LEVEL_DEFAULT: u8 = 3;
/// ZIO_ZSTD_LEVEL_FAST_1: the first of the negative (fast) levels.
pub const ZIO_ZSTD_LEVEL_FAST_1: u8 = 103;
/// ZIO_ZSTD_LEVEL_FAST_1000: the last of them.
pub const ZIO_ZSTD_LEVEL_FAST_1000: u8 = 123;

/// zstd's level for an OpenZFS `zio_zstd_levels` value, None if it names no level.
pub fn zstd_enum_to_level(level: u8) -> Option<i32> {
    const FAST: [i32; 21] = [-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -20, -30, -40, -50, -60, -70, -80, -90, -100, -500, -1000];
    match level {
        1..=19 => Some(level as i32),
        ZIO_ZSTD_LEVEL_FAST_1..=ZIO_ZSTD_LEVEL_FAST_1000 => Some(FAST[(level - ZIO_ZSTD_LEVEL_FAST_1) as usize]),
        _ => None,
    }
}

/// The property suffix of a `zio_zstd_levels` value: "zstd-3", "zstd-fast-10"; None if invalid.
pub fn zstd_level_name(level: u8) -> Option<String> {
    let l = zstd_enum_to_level(level)?;
    Some(if l > 0 { format!("zstd-{l}") } else { format!("zstd-fast-{}", -l) })
}

fn bad(detail: impl Into<String>) -> FormatError {
    FormatError::invalid("zstd block", detail)
}

/// The header of an OpenZFS zstd block: frame length, level enum, library version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZstdHeader {
    pub c_len: u32,
    pub level: u8,
    pub version: u32,
}

/// Decode the 8-byte header (any of the layouts OpenZFS accepts).
pub fn decode_header(src: &[u8]) -> Result<ZstdHeader> {
    let c_len = crate::bytes::u32_at(src, 0, false, "zstd block header")?;
    let raw = crate::bytes::u32_at(src, 4, false, "zstd block header")?;
    let byte = |shift: u32| (raw >> shift) & 0xff;
    // The first zero byte, from the least significant, tells the layout.
    let (level, version) = match (0..4).find(|i| byte(8 * i) == 0) {
        Some(0) => (byte(24), raw.swap_bytes() >> 8),
        Some(1) => (byte(0), raw.swap_bytes() & 0xff_ffff),
        Some(2) => (byte(24), raw & 0xff_ffff),
        Some(3) => (byte(0), raw >> 8),
        _ => (0, 0),
    };
    Ok(ZstdHeader { c_len, level: level as u8, version })
}

/// The `zio_zstd_levels` value a zstd block was written with.
pub fn header_level(src: &[u8]) -> Result<u8> {
    Ok(decode_header(src)?.level)
}

/// Decode an OpenZFS zstd block to exactly `lsize` bytes.
pub fn decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    let h = decode_header(src)?;
    if zstd_enum_to_level(h.level).is_none() {
        return Err(bad(format!("level {} in the header names no zstd level", h.level)));
    }
    let c_len = h.c_len as usize;
    let frame = src
        .get(HDR..)
        .and_then(|rest| rest.get(..c_len))
        .ok_or_else(|| bad(format!("stored length {c_len} passes the {}-byte physical block", src.len())))?;
    // Put the magic back: the standard decoder then reads the frame exactly as the magicless one.
    let mut framed = Vec::with_capacity(c_len + 4);
    framed.extend_from_slice(&ZSTD_MAGIC);
    framed.extend_from_slice(frame);
    let mut out = vec![0u8; lsize];
    let mut d = zstd::bulk::Decompressor::new().map_err(|e| bad(e.to_string()))?;
    // A short output is accepted, as ZSTD_decompressDCtx does; the rest stays zero.
    d.decompress_to_buffer(&framed, &mut out[..]).map_err(|e| bad(e.to_string()))?;
    Ok(out)
}

/// Encode `src` at `level` (a `zio_zstd_levels` value; 0 means the default, 3); None when the
/// block would not fit in `max_psize` bytes or the level is invalid.
pub fn compress(src: &[u8], level: u8, max_psize: usize) -> Option<Vec<u8>> {
    let level = if level == 0 { ZIO_ZSTD_LEVEL_DEFAULT } else { level };
    let zlevel = zstd_enum_to_level(level)?;
    if max_psize < HDR {
        return None;
    }
    let mut c = zstd::bulk::Compressor::new(zlevel).ok()?;
    c.set_parameter(zstd::stream::raw::CParameter::ContentSizeFlag(false)).ok()?;
    c.set_parameter(zstd::stream::raw::CParameter::ChecksumFlag(false)).ok()?;
    // Room for the frame with its magic, which is then replaced by the header.
    let mut frame = Vec::with_capacity(max_psize - HDR + ZSTD_MAGIC.len());
    c.compress_to_buffer(src, &mut frame).ok()?;
    if frame.len() < 4 || frame[..4] != ZSTD_MAGIC {
        return None;
    }
    let c_len = frame.len() - 4;
    if c_len + HDR > max_psize {
        return None;
    }
    let version = zstd::zstd_safe::version_number() & 0xff_ffff;
    let mut out = Vec::with_capacity(c_len + HDR);
    out.extend_from_slice(&(c_len as u32).to_be_bytes());
    out.extend_from_slice(&(((level as u32) << 24) | version).to_be_bytes());
    out.extend_from_slice(&frame[4..]);
    Some(out)
}
