#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::nvlist::NvList;

fuzz_target!(|data: &[u8]| {
    if let Ok(l) = NvList::decode_packed(data) {
        // Whatever decodes must re-encode and decode to the same list.
        let again = NvList::decode_packed(&l.encode_xdr()).expect("re-encoded nvlist decodes");
        assert_eq!(format!("{again:?}"), format!("{l:?}"));
    }
});
