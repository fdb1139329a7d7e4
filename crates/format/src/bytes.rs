//! Bounds-checked little/big-endian field readers shared by every decoder.

use crate::{FormatError, Result};

/// Read a u64 at `off` in the given byte order; errors (never panics) when out of range.
pub fn u64_at(buf: &[u8], off: usize, le: bool, what: &'static str) -> Result<u64> {
    let b = slice(buf, off, 8, what)?;
    let a: [u8; 8] = b.try_into().expect("slice of 8");
    Ok(if le { u64::from_le_bytes(a) } else { u64::from_be_bytes(a) })
}

pub fn u32_at(buf: &[u8], off: usize, le: bool, what: &'static str) -> Result<u32> {
    let b = slice(buf, off, 4, what)?;
    let a: [u8; 4] = b.try_into().expect("slice of 4");
    Ok(if le { u32::from_le_bytes(a) } else { u32::from_be_bytes(a) })
}

pub fn u16_at(buf: &[u8], off: usize, le: bool, what: &'static str) -> Result<u16> {
    let b = slice(buf, off, 2, what)?;
    let a: [u8; 2] = b.try_into().expect("slice of 2");
    Ok(if le { u16::from_le_bytes(a) } else { u16::from_be_bytes(a) })
}

pub fn u8_at(buf: &[u8], off: usize, what: &'static str) -> Result<u8> {
    buf.get(off).copied().ok_or(FormatError::Truncated { what, need: off + 1, have: buf.len() })
}

/// `buf[off..off+len]`, or a Truncated error naming `what`.
pub fn slice<'a>(buf: &'a [u8], off: usize, len: usize, what: &'static str) -> Result<&'a [u8]> {
    let end = off.checked_add(len).ok_or(FormatError::Truncated { what, need: usize::MAX, have: buf.len() })?;
    buf.get(off..end).ok_or(FormatError::Truncated { what, need: end, have: buf.len() })
}
