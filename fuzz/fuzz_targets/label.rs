#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::{label, uberblock};

fuzz_target!(|data: &[u8]| {
    let mut phys = vec![0u8; label::VDEV_PHYS_SIZE];
    let n = data.len().min(phys.len());
    phys[..n].copy_from_slice(&data[..n]);
    let _ = label::decode_label_config(&phys, 16384);
    let _ = uberblock::decode_ring(data, 131072, 12);
});
