#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::zap;

fuzz_target!(|data: &[u8]| {
    for le in [true, false] {
        let _ = zap::decode_micro(data, le);
        let _ = zap::decode_fat_header(data, le);
        let _ = zap::embedded_ptrtbl(data, le);
        // Leaves must be power-of-two sized: fuzz the largest prefix that is.
        let n = if data.len() >= 512 { 1usize << (usize::BITS - 1 - data.len().leading_zeros()) } else { 0 };
        if n > 0 {
            let _ = zap::decode_fat_leaf(&data[..n], le);
        }
    }
    let _ = zap::zap_hash(1, data);
});
