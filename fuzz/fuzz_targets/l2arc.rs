#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::l2arc::{L2DevHdrPhys, L2LogBlkPhys, L2LogBlkPtr, L2Prop};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = L2DevHdrPhys::decode(data, 4 << 20) {
        let _ = h.encode(512, 4 << 20);
    }
    let n = data.first().map_or(0, |b| *b as usize * 4);
    if let Ok(lb) = L2LogBlkPhys::decode(data, n) {
        let _ = lb.encode();
    }
    // A log block pointer of any size over any bytes: checksum, decompress, decode.
    if data.len() >= 8 {
        let prop = L2Prop(u64::from_le_bytes(data[..8].try_into().unwrap()));
        let lbp = L2LogBlkPtr { daddr: 0, payload_asize: 0, payload_start: 0, prop, cksum: oxzfs_format::checksum::fletcher4(&data[8..], true) };
        let _ = L2LogBlkPhys::read(&data[8..], &lbp, 7);
    }
});
