//! Compression codecs, in OpenZFS's on-disk framing.
//!
//! | codec | framing on disk |
//! |---|---|
//! | lzjb | raw lzjb stream (hand-written here) |
//! | lz4 | 4-byte big-endian length of the LZ4 block, then the block |
//! | gzip-1..9 | a zlib stream |
//! | zle | zero-length encoding with n = 64 (hand-written here) |
//! | zstd | 4-byte BE compressed length, 4-byte BE version/level word, then a zstd frame |
//!
//! Decoders produce exactly `lsize` bytes or an error; they never panic on any input and never
//! allocate more than `lsize` (itself bounded by 16 MiB, SPA_MAXBLOCKSIZE).

use crate::{FormatError, Result};
use std::io::Read;

pub const ZIO_COMPRESS_INHERIT: u8 = 0;
pub const ZIO_COMPRESS_ON: u8 = 1;
pub const ZIO_COMPRESS_OFF: u8 = 2;
pub const ZIO_COMPRESS_LZJB: u8 = 3;
pub const ZIO_COMPRESS_EMPTY: u8 = 4;
pub const ZIO_COMPRESS_GZIP_1: u8 = 5;
pub const ZIO_COMPRESS_GZIP_9: u8 = 13;
pub const ZIO_COMPRESS_ZLE: u8 = 14;
pub const ZIO_COMPRESS_LZ4: u8 = 15;
pub const ZIO_COMPRESS_ZSTD: u8 = 16;

/// Largest logical block (SPA_MAXBLOCKSIZE).
pub const MAX_LSIZE: usize = 16 << 20;

/// The property name of a compression function.
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

fn bad(detail: impl Into<String>) -> FormatError {
    FormatError::invalid("compressed block", detail)
}

/// Decompress `src` (a block's physical bytes) to exactly `lsize` bytes.
pub fn decompress(alg: u8, src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    if lsize > MAX_LSIZE {
        return Err(bad(format!("logical size {lsize} exceeds 16 MiB")));
    }
    match alg {
        ZIO_COMPRESS_OFF | ZIO_COMPRESS_INHERIT | ZIO_COMPRESS_EMPTY => {
            let mut v = src[..src.len().min(lsize)].to_vec();
            v.resize(lsize, 0);
            Ok(v)
        }
        ZIO_COMPRESS_LZJB | ZIO_COMPRESS_ON => lzjb_decompress(src, lsize),
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => gzip_decompress(src, lsize),
        ZIO_COMPRESS_ZLE => zle_decompress(src, lsize, 64),
        ZIO_COMPRESS_LZ4 => lz4_decompress(src, lsize),
        ZIO_COMPRESS_ZSTD => zstd_decompress(src, lsize),
        other => Err(FormatError::unsupported("compression", format!("function {other}"))),
    }
}

/// Compress `src`; None when the result would not fit in `max_psize` bytes.
pub fn compress(alg: u8, level: u8, src: &[u8], max_psize: usize) -> Option<Vec<u8>> {
    let out = match alg {
        ZIO_COMPRESS_LZJB | ZIO_COMPRESS_ON => lzjb_compress(src, max_psize)?,
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => {
            let lvl = (alg - ZIO_COMPRESS_GZIP_1 + 1) as u32;
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(lvl));
            std::io::Write::write_all(&mut e, src).ok()?;
            e.finish().ok()?
        }
        ZIO_COMPRESS_ZLE => zle_compress(src, 64, max_psize)?,
        ZIO_COMPRESS_LZ4 => {
            let block = lz4_flex::block::compress(src);
            let mut v = Vec::with_capacity(block.len() + 4);
            v.extend_from_slice(&(block.len() as u32).to_be_bytes());
            v.extend_from_slice(&block);
            v
        }
        ZIO_COMPRESS_ZSTD => {
            let level = if level == 0 { 3 } else { level as i32 };
            let frame = zstd::bulk::compress(src, level).ok()?;
            let mut v = Vec::with_capacity(frame.len() + 8);
            v.extend_from_slice(&(frame.len() as u32).to_be_bytes());
            // version (24 bits) then level (8 bits): OpenZFS 1.4.5 = 10405.
            let vl: u32 = (10405u32 << 8) | (level as u32 & 0xff);
            v.extend_from_slice(&vl.to_be_bytes());
            v.extend_from_slice(&frame);
            v
        }
        _ => return None,
    };
    if out.len() > max_psize {
        None
    } else {
        Some(out)
    }
}

const NBBY: u32 = 8;
const MATCH_BITS: u32 = 6;
const MATCH_MIN: usize = 3;
const MATCH_MAX: usize = (1 << MATCH_BITS) + (MATCH_MIN - 1);
const OFFSET_MASK: usize = (1 << (16 - MATCH_BITS)) - 1;
const LEMPEL_SIZE: usize = 1024;

pub fn lzjb_decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    let mut dst: Vec<u8> = Vec::with_capacity(lsize);
    let mut s = 0usize;
    let mut copymask: u32 = 1 << (NBBY - 1);
    let mut copymap: u32 = 0;
    while dst.len() < lsize {
        copymask <<= 1;
        if copymask == 1 << NBBY {
            copymask = 1;
            copymap = *src.get(s).ok_or_else(|| bad("lzjb: input ended"))? as u32;
            s += 1;
        }
        if copymap & copymask != 0 {
            let b0 = *src.get(s).ok_or_else(|| bad("lzjb: input ended in a match"))? as usize;
            let b1 = *src.get(s + 1).ok_or_else(|| bad("lzjb: input ended in a match"))? as usize;
            s += 2;
            let mlen = (b0 >> (NBBY - MATCH_BITS)) + MATCH_MIN;
            let offset = ((b0 << NBBY) | b1) & OFFSET_MASK;
            if offset == 0 || offset > dst.len() {
                return Err(bad(format!("lzjb: match offset {offset} before the start")));
            }
            let mut cpy = dst.len() - offset;
            for _ in 0..mlen {
                if dst.len() >= lsize {
                    break;
                }
                let b = dst[cpy];
                dst.push(b);
                cpy += 1;
            }
        } else {
            let b = *src.get(s).ok_or_else(|| bad("lzjb: input ended"))?;
            s += 1;
            dst.push(b);
        }
    }
    Ok(dst)
}

pub fn lzjb_compress(src: &[u8], max_psize: usize) -> Option<Vec<u8>> {
    let mut dst: Vec<u8> = Vec::with_capacity(max_psize.min(src.len()));
    let mut lempel = [0usize; LEMPEL_SIZE];
    let mut copymask: u32 = 1 << (NBBY - 1);
    let mut copymap_at = 0usize;
    let mut s = 0usize;
    while s < src.len() {
        copymask <<= 1;
        if copymask == 1 << NBBY {
            if dst.len() + 1 + 2 * NBBY as usize >= max_psize {
                return None;
            }
            copymask = 1;
            copymap_at = dst.len();
            dst.push(0);
        }
        if s + MATCH_MAX > src.len() {
            dst.push(src[s]);
            s += 1;
            continue;
        }
        let mut hash = ((src[s] as usize) << 16) + ((src[s + 1] as usize) << 8) + src[s + 2] as usize;
        hash += hash >> 9;
        hash += hash >> 5;
        let hp = &mut lempel[hash & (LEMPEL_SIZE - 1)];
        let offset = (s.wrapping_sub(*hp)) & OFFSET_MASK;
        *hp = s;
        if offset != 0 && offset <= s {
            let cpy = s - offset;
            if src[s] == src[cpy] && src[s + 1] == src[cpy + 1] && src[s + 2] == src[cpy + 2] {
                dst[copymap_at] |= copymask as u8;
                let mut mlen = MATCH_MIN;
                while mlen < MATCH_MAX && src[s + mlen] == src[cpy + mlen] {
                    mlen += 1;
                }
                dst.push((((mlen - MATCH_MIN) << (NBBY - MATCH_BITS)) | (offset >> NBBY)) as u8);
                dst.push(offset as u8);
                s += mlen;
                continue;
            }
        }
        dst.push(src[s]);
        s += 1;
    }
    if dst.len() > max_psize {
        None
    } else {
        Some(dst)
    }
}

pub fn zle_decompress(src: &[u8], lsize: usize, n: usize) -> Result<Vec<u8>> {
    let mut dst = Vec::with_capacity(lsize);
    let mut s = 0usize;
    while s < src.len() && dst.len() < lsize {
        let len = 1 + src[s] as usize;
        s += 1;
        if len <= n {
            let chunk = src.get(s..s + len).ok_or_else(|| bad("zle: literal run past the input"))?;
            if dst.len() + len > lsize {
                return Err(bad("zle: output longer than the logical size"));
            }
            dst.extend_from_slice(chunk);
            s += len;
        } else {
            let z = len - n;
            if dst.len() + z > lsize {
                return Err(bad("zle: output longer than the logical size"));
            }
            dst.resize(dst.len() + z, 0);
        }
    }
    if dst.len() != lsize {
        return Err(bad(format!("zle: produced {} of {lsize} bytes", dst.len())));
    }
    Ok(dst)
}

pub fn zle_compress(src: &[u8], n: usize, max_psize: usize) -> Option<Vec<u8>> {
    let mut dst = Vec::new();
    let mut s = 0usize;
    while s < src.len() {
        if dst.len() >= max_psize {
            return None;
        }
        if src[s] == 0 {
            let first = s;
            let last = (s + (256 - n)).min(src.len());
            while s < last && src[s] == 0 {
                s += 1;
            }
            dst.push((s - first - 1 + n) as u8);
        } else {
            let first = s;
            let last = (s + n).min(src.len());
            // A literal run ends before two zeros in a row (a zero run is cheaper).
            while s < last && !(src[s] == 0 && s + 1 < src.len() && src[s + 1] == 0) {
                s += 1;
            }
            dst.push((s - first - 1) as u8);
            dst.extend_from_slice(&src[first..s]);
        }
    }
    if dst.len() > max_psize {
        None
    } else {
        Some(dst)
    }
}

pub fn lz4_decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    if src.len() < 4 {
        return Err(bad("lz4: no length header"));
    }
    let n = u32::from_be_bytes(src[..4].try_into().unwrap()) as usize;
    let body = src.get(4..4 + n).ok_or_else(|| bad(format!("lz4: length {n} past the {} bytes", src.len())))?;
    let mut out = vec![0u8; lsize];
    let got = lz4_flex::block::decompress_into(body, &mut out).map_err(|e| bad(format!("lz4: {e}")))?;
    if got != lsize {
        // OpenZFS accepts a short output; the rest of the buffer is zero.
        out[got..].fill(0);
    }
    Ok(out)
}

pub fn gzip_decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(lsize);
    let mut d = flate2::read::ZlibDecoder::new(src).take(lsize as u64);
    d.read_to_end(&mut out).map_err(|e| bad(format!("gzip: {e}")))?;
    if out.len() != lsize {
        return Err(bad(format!("gzip: produced {} of {lsize} bytes", out.len())));
    }
    Ok(out)
}

pub fn zstd_decompress(src: &[u8], lsize: usize) -> Result<Vec<u8>> {
    if src.len() < 8 {
        return Err(bad("zstd: no header"));
    }
    let n = u32::from_be_bytes(src[..4].try_into().unwrap()) as usize;
    let body = src.get(8..8 + n).ok_or_else(|| bad(format!("zstd: length {n} past the {} bytes", src.len())))?;
    let mut out = vec![0u8; lsize];
    let mut d = zstd::bulk::Decompressor::new().map_err(|e| bad(format!("zstd: {e}")))?;
    let got = d.decompress_to_buffer(body, &mut out[..]).map_err(|e| bad(format!("zstd: {e}")))?;
    if got != lsize {
        out[got..].fill(0);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Vec<u8>> {
        let text: Vec<u8> = b"pool vdev special metaslab txg arc l2arc zil dedup snapshot raidz mirror "
            .iter()
            .cycle()
            .take(131072)
            .copied()
            .collect();
        let mut x: u64 = 0x1234_5678;
        let random: Vec<u8> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut mixed = vec![0u8; 16384];
        mixed[100..200].copy_from_slice(&random[..100]);
        mixed[9000] = 7;
        vec![text, vec![0u8; 4096], random, mixed, vec![1, 2, 3]]
    }

    #[test]
    fn round_trips() {
        for alg in [ZIO_COMPRESS_LZJB, ZIO_COMPRESS_GZIP_1 + 5, ZIO_COMPRESS_ZLE, ZIO_COMPRESS_LZ4, ZIO_COMPRESS_ZSTD] {
            for s in samples() {
                let max = s.len() * 2 + 64;
                if let Some(c) = compress(alg, 0, &s, max) {
                    let d = decompress(alg, &c, s.len()).unwrap_or_else(|e| panic!("{}: {e}", compress_name(alg)));
                    assert_eq!(d, s, "{} round trip of {} bytes", compress_name(alg), s.len());
                }
            }
        }
    }

    #[test]
    fn compressible_data_shrinks() {
        let s = &samples()[0];
        for alg in [ZIO_COMPRESS_LZJB, ZIO_COMPRESS_GZIP_1, ZIO_COMPRESS_LZ4, ZIO_COMPRESS_ZSTD] {
            let c = compress(alg, 0, s, s.len() - s.len() / 8).expect("text compresses");
            assert!(c.len() < s.len() / 4, "{}: {} bytes", compress_name(alg), c.len());
        }
        assert!(compress(ZIO_COMPRESS_ZLE, 0, &vec![0u8; 131072], 65536).unwrap().len() < 1024);
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 99;
        for len in [0usize, 1, 3, 4, 8, 9, 100, 4096] {
            let g: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (x >> 33) as u8
                })
                .collect();
            for alg in 0..=20u8 {
                let _ = decompress(alg, &g, 4096);
            }
        }
        assert!(decompress(ZIO_COMPRESS_LZ4, &[0, 0, 0, 9, 1], 512).is_err());
        assert!(decompress(ZIO_COMPRESS_LZJB, &[0], 17 << 20).is_err());
    }
}
