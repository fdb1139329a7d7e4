//! The body every decompress_* target shares: the first two bytes (little-endian) are lsize,
//! the rest is the physical block. Whatever decodes must be exactly lsize bytes; the payload
//! must also survive our own encoder's round trip.
use oxzfs_format::compress::{compress, decompress};

pub fn check(alg: u8, data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let lsize = u16::from_le_bytes([data[0], data[1]]) as usize;
    let src = &data[2..];
    if let Ok(out) = decompress(alg, src, lsize) {
        assert_eq!(out.len(), lsize);
    }
    if let Some(c) = compress(alg, 0, src, src.len() * 2 + 64) {
        let back = decompress(alg, &c, src.len()).expect("our own block decodes");
        assert_eq!(back, src);
    }
}
