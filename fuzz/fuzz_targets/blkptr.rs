#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::blkptr::{decode_gang_header, BlockPointer};

fuzz_target!(|data: &[u8]| {
    for le in [true, false] {
        if let Ok(bp) = BlockPointer::decode(data, le) {
            let _ = bp.to_string();
            let _ = bp.embedded_payload();
            let _ = bp.asize_total();
            if !bp.embedded {
                let again = BlockPointer::decode(&bp.encode(le), le).expect("re-encoded bp decodes");
                assert_eq!(again.dva, bp.dva);
                assert_eq!(again.cksum, bp.cksum);
            }
        }
        let _ = decode_gang_header(data, le);
    }
});
