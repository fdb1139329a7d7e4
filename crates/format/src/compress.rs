//! Compression codecs, byte-compatible with OpenZFS's on-disk framing.
//!
//! A block pointer's `compress` field (7 bits) names the function; `lsize` and `psize` give the
//! logical and physical sizes. The physical block is the codec's output padded with zeros to the
//! sector size, so every decoder here finds the end of its data itself:
//!
//! | value | name | framing on disk | module |
//! |---|---|---|---|
//! | 0, 1 | inherit, on | property values only; "on" resolves to lzjb or lz4 before a block is written | |
//! | 2 | off | the logical bytes | |
//! | 3 | lzjb | bare lzjb stream | [`lzjb`] |
//! | 4 | empty | all-zero block (OpenZFS writes a hole instead) | |
//! | 5..=13 | gzip-1..9 | zlib stream | [`gzip`] |
//! | 14 | zle | zero-length encoding, n = 64 | [`zle`] |
//! | 15 | lz4 | BE32 block length, LZ4 block | [`lz4`] |
//! | 16 | zstd | BE32 frame length, BE32 level/version, magicless zstd frame | [`zstd`] |
//!
//! Decoders produce exactly `lsize` bytes or a [`FormatError`]; they never panic on any input and
//! never allocate more than `lsize` plus the input's size (`lsize` is bounded by 16 MiB,
//! SPA_MAXBLOCKSIZE). Encoders return None when the output would not fit in `max_psize`; the
//! caller passes OpenZFS's bound (`lsize - lsize/8`: at least 12.5% saved) and writes the block
//! uncompressed otherwise. Detecting all-zero blocks (written as holes) is the caller's job.

pub mod gzip;
pub mod lz4;
pub mod lzjb;
pub mod zle;
pub mod zstd;

use crate::{FormatError, Result};

pub const ZIO_COMPRESS_INHERIT: u8 = 0;
pub const ZIO_COMPRESS_ON: u8 = 1;
pub const ZIO_COMPRESS_OFF: u8 = 2;
pub const ZIO_COMPRESS_LZJB: u8 = 3;
pub const ZIO_COMPRESS_EMPTY: u8 = 4;
pub const ZIO_COMPRESS_GZIP_1: u8 = 5;
pub const ZIO_COMPRESS_GZIP_2: u8 = 6;
pub const ZIO_COMPRESS_GZIP_3: u8 = 7;
pub const ZIO_COMPRESS_GZIP_4: u8 = 8;
pub const ZIO_COMPRESS_GZIP_5: u8 = 9;
pub const ZIO_COMPRESS_GZIP_6: u8 = 10;
pub const ZIO_COMPRESS_GZIP_7: u8 = 11;
pub const ZIO_COMPRESS_GZIP_8: u8 = 12;
pub const ZIO_COMPRESS_GZIP_9: u8 = 13;
pub const ZIO_COMPRESS_ZLE: u8 = 14;
pub const ZIO_COMPRESS_LZ4: u8 = 15;
pub const ZIO_COMPRESS_ZSTD: u8 = 16;
/// Number of compression functions (ZIO_COMPRESS_FUNCTIONS).
pub const ZIO_COMPRESS_FUNCTIONS: u8 = 17;

pub use self::zle::ZLE_N;
pub use self::zstd::{zstd_enum_to_level, zstd_level_name, ZIO_ZSTD_LEVEL_DEFAULT};

/// Largest logical block (SPA_MAXBLOCKSIZE).
pub const MAX_LSIZE: usize = 16 << 20;

/// The property name of a compression function ("lz4", "gzip-6", "zstd", …); "unknown" if none.
pub fn compress_name(c: u8) -> &'static str {
    const GZ: [&str; 9] = ["gzip-1", "gzip-2", "gzip-3", "gzip-4", "gzip-5", "gzip-6", "gzip-7", "gzip-8", "gzip-9"];
    match c {
        ZIO_COMPRESS_INHERIT => "inherit",
        ZIO_COMPRESS_ON => "on",
        ZIO_COMPRESS_OFF => "off",
        ZIO_COMPRESS_LZJB => "lzjb",
        ZIO_COMPRESS_EMPTY => "empty",
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => GZ[(c - ZIO_COMPRESS_GZIP_1) as usize],
        ZIO_COMPRESS_ZLE => "zle",
        ZIO_COMPRESS_LZ4 => "lz4",
        ZIO_COMPRESS_ZSTD => "zstd",
        _ => "unknown",
    }
}

/// Decompress `src` (a block's physical bytes, padding included) to exactly `lsize` bytes.
///
/// `off` (and `inherit`, which no written block carries) copy `src` and zero-fill or cut it to
/// `lsize`; `empty` yields zeros; `on` is read as lzjb, what it meant before lz4 existed.
pub fn decompress(alg: u8, src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    if lsize > MAX_LSIZE {
        return Err(FormatError::invalid("compressed block", format!("logical size {lsize} exceeds 16 MiB")));
    }
    match alg {
        ZIO_COMPRESS_OFF | ZIO_COMPRESS_INHERIT => {
            let mut v = src[..src.len().min(lsize)].to_vec();
            v.resize(lsize, 0);
            Ok(v)
        }
        ZIO_COMPRESS_EMPTY => Ok(vec![0u8; lsize]),
        ZIO_COMPRESS_LZJB | ZIO_COMPRESS_ON => lzjb::decompress(src, lsize),
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => gzip::decompress(src, lsize),
        ZIO_COMPRESS_ZLE => zle::decompress(src, lsize, ZLE_N),
        ZIO_COMPRESS_LZ4 => lz4::decompress(src, lsize),
        ZIO_COMPRESS_ZSTD => zstd::decompress(src, lsize),
        other => Err(FormatError::unsupported("compression", format!("function {other}"))),
    }
}

/// Compress `src` with function `alg`; None when the result would not fit in `max_psize` bytes
/// (or `alg` is not a compression function: `inherit`, `on` — the caller resolves it — or an
/// unknown value).
///
/// `level`: for zstd the `zio_zstd_levels` value stored in the header (0 = default, 3); for zle
/// the run parameter n (0 = 64, the only value OpenZFS uses); ignored by the others (gzip's
/// level is in `alg`). `off` copies; `empty` succeeds with no bytes only for an all-zero block.
pub fn compress(alg: u8, level: u8, src: &[u8], max_psize: usize) -> Option<Vec<u8>> {
    let out = match alg {
        ZIO_COMPRESS_OFF => Some(src.to_vec()),
        ZIO_COMPRESS_EMPTY => src.iter().all(|&b| b == 0).then(Vec::new),
        ZIO_COMPRESS_LZJB => lzjb::compress(src, max_psize),
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => gzip::compress(src, (alg - ZIO_COMPRESS_GZIP_1 + 1) as u32, max_psize),
        ZIO_COMPRESS_ZLE => zle::compress(src, if level == 0 { ZLE_N } else { level as usize }, max_psize),
        ZIO_COMPRESS_LZ4 => lz4::compress(src, max_psize),
        ZIO_COMPRESS_ZSTD => zstd::compress(src, level, max_psize),
        _ => None,
    }?;
    (out.len() <= max_psize).then_some(out)
}

/// `len` bytes of xorshift noise from `seed` (not 0): data no codec compresses, for tests
/// here and in the engine.
#[doc(hidden)]
pub fn xorshift_noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests;
