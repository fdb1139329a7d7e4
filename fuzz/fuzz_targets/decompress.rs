#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::compress;

// First byte: codec; next two: logical size (in 512-byte units); the rest: the compressed bytes.
fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let alg = [
        compress::ZIO_COMPRESS_LZJB,
        compress::ZIO_COMPRESS_LZ4,
        compress::ZIO_COMPRESS_GZIP_1 + 5,
        compress::ZIO_COMPRESS_ZLE,
        compress::ZIO_COMPRESS_ZSTD,
    ][data[0] as usize % 5];
    let lsize = ((u16::from_le_bytes([data[1], data[2]]) as usize) % 257 + 1) * 512;
    if let Ok(out) = compress::decompress(alg, &data[3..], lsize) {
        assert_eq!(out.len(), lsize);
    }
});
