//! Checksums: the functions OpenZFS stores in `blk_cksum` and in embedded trailers.
//!
//! A checksum is four 64-bit words. How the words come out of each function is part of the
//! format:
//! - fletcher2 / fletcher4 run over the data read as 64- / 32-bit words in the byte order of the
//!   writer (`le`), with wrapping 64-bit sums;
//! - sha256's digest is always read as four big-endian words;
//! - sha512 (SHA-512/256), skein (Skein-512-256 keyed with the pool's salt) and blake3 (keyed
//!   with the salt) digests are read as words in the writer's byte order;
//! - edonr (Edon-R 512 keyed by hashing the salt into a first block) likewise.
//!
//! Embedded checksums (`zio_eck_t`, 40 bytes: magic + 4 words) sit at the end of labels' config
//! blocks, uberblocks, gang headers and old-style log blocks: the checksum is computed over the
//! whole block with the 4 words replaced by a verifier (for labels: the block's device offset).

use crate::{FormatError, Result};
use sha2::Digest;

pub mod edonr;

pub const ZIO_CHECKSUM_INHERIT: u8 = 0;
pub const ZIO_CHECKSUM_ON: u8 = 1;
pub const ZIO_CHECKSUM_OFF: u8 = 2;
pub const ZIO_CHECKSUM_LABEL: u8 = 3;
pub const ZIO_CHECKSUM_GANG_HEADER: u8 = 4;
pub const ZIO_CHECKSUM_ZILOG: u8 = 5;
pub const ZIO_CHECKSUM_FLETCHER_2: u8 = 6;
pub const ZIO_CHECKSUM_FLETCHER_4: u8 = 7;
pub const ZIO_CHECKSUM_SHA256: u8 = 8;
pub const ZIO_CHECKSUM_ZILOG2: u8 = 9;
pub const ZIO_CHECKSUM_NOPARITY: u8 = 10;
pub const ZIO_CHECKSUM_SHA512: u8 = 11;
pub const ZIO_CHECKSUM_SKEIN: u8 = 12;
pub const ZIO_CHECKSUM_EDONR: u8 = 13;
pub const ZIO_CHECKSUM_BLAKE3: u8 = 14;

/// Magic of an embedded checksum trailer (ZEC_MAGIC).
pub const ZEC_MAGIC: u64 = 0x0210da7ab10c7a11;
/// Size of the trailer: magic + 4 words.
pub const ZIO_ECK_SIZE: usize = 40;

/// The property name of a checksum function.
pub fn checksum_name(c: u8) -> &'static str {
    match c {
        ZIO_CHECKSUM_INHERIT => "inherit",
        ZIO_CHECKSUM_ON => "on",
        ZIO_CHECKSUM_OFF => "off",
        ZIO_CHECKSUM_LABEL => "label",
        ZIO_CHECKSUM_GANG_HEADER => "gang_header",
        ZIO_CHECKSUM_ZILOG => "zilog",
        ZIO_CHECKSUM_FLETCHER_2 => "fletcher2",
        ZIO_CHECKSUM_FLETCHER_4 => "fletcher4",
        ZIO_CHECKSUM_SHA256 => "sha256",
        ZIO_CHECKSUM_ZILOG2 => "zilog2",
        ZIO_CHECKSUM_NOPARITY => "noparity",
        ZIO_CHECKSUM_SHA512 => "sha512",
        ZIO_CHECKSUM_SKEIN => "skein",
        ZIO_CHECKSUM_EDONR => "edonr",
        ZIO_CHECKSUM_BLAKE3 => "blake3",
        _ => "unknown",
    }
}

fn word64(b: &[u8], le: bool) -> u64 {
    let a: [u8; 8] = b.try_into().expect("8 bytes");
    if le {
        u64::from_le_bytes(a)
    } else {
        u64::from_be_bytes(a)
    }
}

pub fn fletcher2(data: &[u8], le: bool) -> [u64; 4] {
    let (mut a0, mut a1, mut b0, mut b1) = (0u64, 0u64, 0u64, 0u64);
    for ch in data.chunks_exact(16) {
        a0 = a0.wrapping_add(word64(&ch[..8], le));
        a1 = a1.wrapping_add(word64(&ch[8..], le));
        b0 = b0.wrapping_add(a0);
        b1 = b1.wrapping_add(a1);
    }
    [a0, a1, b0, b1]
}

pub fn fletcher4(data: &[u8], le: bool) -> [u64; 4] {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    for ch in data.chunks_exact(4) {
        let a4: [u8; 4] = ch.try_into().unwrap();
        let w = if le { u32::from_le_bytes(a4) } else { u32::from_be_bytes(a4) } as u64;
        a = a.wrapping_add(w);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    [a, b, c, d]
}

fn words(digest: &[u8], le: bool) -> [u64; 4] {
    [word64(&digest[0..8], le), word64(&digest[8..16], le), word64(&digest[16..24], le), word64(&digest[24..32], le)]
}

/// Skein-512 with a 256-bit output, keyed (MAC form) with `key`, built on Threefish-512.
pub fn skein512_256(key: &[u8], data: &[u8]) -> [u8; 32] {
    const T_KEY: u64 = 0;
    const T_CFG: u64 = 4;
    const T_MSG: u64 = 48;
    const T_OUT: u64 = 63;
    fn ubi(g: &[u64; 8], msg: &[u8], typ: u64) -> [u64; 8] {
        let mut g = *g;
        let nblocks = if msg.is_empty() { 1 } else { msg.len().div_ceil(64) };
        for i in 0..nblocks {
            let start = i * 64;
            let end = (start + 64).min(msg.len());
            let mut block = [0u8; 64];
            block[..end - start].copy_from_slice(&msg[start..end]);
            let mut m = [0u64; 8];
            for (j, w) in m.iter_mut().enumerate() {
                *w = u64::from_le_bytes(block[j * 8..j * 8 + 8].try_into().unwrap());
            }
            let pos = end as u64;
            let mut t1 = typ << 56;
            if i == 0 {
                t1 |= 1 << 62;
            }
            if i == nblocks - 1 {
                t1 |= 1 << 63;
            }
            let cipher = threefish::Threefish512::new_with_tweak_u64(&g, &[pos, t1]);
            let mut c = m;
            cipher.encrypt_block_u64(&mut c);
            for j in 0..8 {
                g[j] = c[j] ^ m[j];
            }
        }
        g
    }
    let mut g = [0u64; 8];
    if !key.is_empty() {
        g = ubi(&g, key, T_KEY);
    }
    let mut cfg = [0u8; 32];
    cfg[0..4].copy_from_slice(b"SHA3");
    cfg[4..6].copy_from_slice(&1u16.to_le_bytes());
    cfg[8..16].copy_from_slice(&256u64.to_le_bytes());
    g = ubi(&g, &cfg, T_CFG);
    g = ubi(&g, data, T_MSG);
    let out = ubi(&g, &0u64.to_le_bytes(), T_OUT);
    let mut r = [0u8; 32];
    for j in 0..4 {
        r[j * 8..j * 8 + 8].copy_from_slice(&out[j].to_le_bytes());
    }
    r
}

/// The checksum of `data` with function `alg`, as the four words ZFS stores.
pub fn compute(alg: u8, data: &[u8], le: bool, salt: &[u8; 32]) -> Result<[u64; 4]> {
    Ok(match alg {
        ZIO_CHECKSUM_FLETCHER_2 | ZIO_CHECKSUM_ZILOG => fletcher2(data, le),
        ZIO_CHECKSUM_FLETCHER_4 | ZIO_CHECKSUM_ZILOG2 | ZIO_CHECKSUM_ON => fletcher4(data, le),
        ZIO_CHECKSUM_SHA256 | ZIO_CHECKSUM_LABEL | ZIO_CHECKSUM_GANG_HEADER => {
            let d = sha2::Sha256::digest(data);
            words(&d, false)
        }
        ZIO_CHECKSUM_SHA512 => {
            let d = sha2::Sha512_256::digest(data);
            words(&d, le)
        }
        ZIO_CHECKSUM_SKEIN => words(&skein512_256(salt, data), le),
        ZIO_CHECKSUM_BLAKE3 => words(blake3::keyed_hash(salt, data).as_bytes(), le),
        ZIO_CHECKSUM_OFF | ZIO_CHECKSUM_NOPARITY => [0; 4],
        ZIO_CHECKSUM_EDONR => {
            let mut h = edonr::salted(salt);
            h.update(data);
            words(&h.finalize()[..32], le)
        }
        other => return Err(FormatError::invalid("checksum", format!("unknown checksum function {other}"))),
    })
}

/// Verify a block that carries its checksum in a trailing `zio_eck_t`, with `verifier` in place
/// of the stored words while computing. The byte order comes from the trailer's magic.
pub fn verify_embedded(block: &[u8], alg: u8, verifier: [u64; 4]) -> Result<bool> {
    Ok(embedded_parts(block, alg, verifier)?.map_or(false, |(c, s)| c == s))
}

/// The (computed, stored) checksums of a block with a trailing `zio_eck_t`; None when the
/// trailer's magic is absent.
pub fn embedded_parts(block: &[u8], alg: u8, verifier: [u64; 4]) -> Result<Option<([u64; 4], [u64; 4])>> {
    let n = block.len();
    if n < ZIO_ECK_SIZE {
        return Err(FormatError::Truncated { what: "embedded checksum", need: ZIO_ECK_SIZE, have: n });
    }
    let off = n - ZIO_ECK_SIZE;
    let magic = u64::from_le_bytes(block[off..off + 8].try_into().unwrap());
    let le = if magic == ZEC_MAGIC {
        true
    } else if magic.swap_bytes() == ZEC_MAGIC {
        false
    } else {
        return Ok(None);
    };
    let stored = [
        word64(&block[off + 8..off + 16], le),
        word64(&block[off + 16..off + 24], le),
        word64(&block[off + 24..off + 32], le),
        word64(&block[off + 32..off + 40], le),
    ];
    let mut copy = block.to_vec();
    for (i, w) in verifier.iter().enumerate() {
        let b = if le { w.to_le_bytes() } else { w.to_be_bytes() };
        copy[off + 8 + i * 8..off + 16 + i * 8].copy_from_slice(&b);
    }
    let c = compute(alg, &copy, le, &[0u8; 32])?;
    Ok(Some((c, stored)))
}

/// Write a trailing `zio_eck_t` into `block` (magic, then the checksum computed with the verifier).
pub fn write_embedded(block: &mut [u8], alg: u8, verifier: [u64; 4], le: bool) {
    let n = block.len();
    assert!(n >= ZIO_ECK_SIZE, "block too small for an embedded checksum");
    let off = n - ZIO_ECK_SIZE;
    let put = |b: &mut [u8], o: usize, w: u64| {
        let bytes = if le { w.to_le_bytes() } else { w.to_be_bytes() };
        b[o..o + 8].copy_from_slice(&bytes);
    };
    put(block, off, ZEC_MAGIC);
    for (i, w) in verifier.iter().enumerate() {
        put(block, off + 8 + i * 8, *w);
    }
    let c = compute(alg, block, le, &[0u8; 32]).expect("embedded checksum functions are implemented");
    for (i, w) in c.iter().enumerate() {
        put(block, off + 8 + i * 8, *w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_words_are_big_endian() {
        let c = compute(ZIO_CHECKSUM_SHA256, b"abc", true, &[0; 32]).unwrap();
        assert_eq!(c[0], 0xba7816bf8f01cfea);
        assert_eq!(c[3], 0xb410ff61f20015ad);
    }

    #[test]
    fn fletcher4_by_hand() {
        // words 1, 2: a = 3, b = 1 + 3 = 4, c = 1 + 4 = 5, d = 1 + 5 = 6
        let data = [1u8, 0, 0, 0, 2, 0, 0, 0];
        assert_eq!(fletcher4(&data, true), [3, 4, 5, 6]);
        let be = [0u8, 0, 0, 1, 0, 0, 0, 2];
        assert_eq!(fletcher4(&be, false), [3, 4, 5, 6]);
    }

    #[test]
    fn fletcher2_by_hand() {
        let mut data = [0u8; 32];
        data[0] = 1;
        data[8] = 2;
        data[16] = 3;
        data[24] = 4;
        // a0 = 1+3, a1 = 2+4, b0 = 1 + 4, b1 = 2 + 6
        assert_eq!(fletcher2(&data, true), [4, 6, 5, 8]);
    }

    #[test]
    fn skein_unkeyed_matches_reference_vector() {
        // Skein-512-256 of the empty message... checked against the one-byte 0xFF vector of the
        // Skein 1.3 paper (Skein-512-256, message FF):
        use skein::digest::Digest as _;
        for msg in [&b""[..], &[0xff], &[0x5a; 200][..]] {
            let ours = skein512_256(&[], msg);
            let reference = skein::Skein512::<skein::consts::U32>::digest(msg);
            assert_eq!(ours.as_slice(), reference.as_slice(), "message of {} bytes", msg.len());
        }
    }

    #[test]
    fn embedded_round_trip() {
        let mut block = vec![7u8; 4096];
        write_embedded(&mut block, ZIO_CHECKSUM_LABEL, [8192, 0, 0, 0], true);
        assert!(verify_embedded(&block, ZIO_CHECKSUM_LABEL, [8192, 0, 0, 0]).unwrap());
        assert!(!verify_embedded(&block, ZIO_CHECKSUM_LABEL, [4096, 0, 0, 0]).unwrap());
        block[5] ^= 1;
        assert!(!verify_embedded(&block, ZIO_CHECKSUM_LABEL, [8192, 0, 0, 0]).unwrap());
        let mut be = vec![9u8; 1024];
        write_embedded(&mut be, ZIO_CHECKSUM_GANG_HEADER, [1, 2, 3, 0], false);
        assert!(verify_embedded(&be, ZIO_CHECKSUM_GANG_HEADER, [1, 2, 3, 0]).unwrap());
    }
}
