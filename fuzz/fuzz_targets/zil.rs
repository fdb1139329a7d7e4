#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::zil;

fuzz_target!(|data: &[u8]| {
    for slim in [true, false] {
        if let Ok(b) = zil::decode_log_block(data, [0, 0, 0, 1], slim) {
            for r in zil::records(b.records, b.le) {
                let _ = r;
            }
        }
    }
    for le in [true, false] {
        for r in zil::records(data, le) {
            if let Ok(r) = r {
                let _ = r.encode();
            }
        }
    }
});
