#![no_main]
use libfuzzer_sys::fuzz_target;
use oxzfs_format::{dnode::DnodePhys, objset::ObjsetPhys, sa, znode};

fuzz_target!(|data: &[u8]| {
    for le in [true, false] {
        if let Ok(d) = DnodePhys::decode(data, le) {
            let _ = d.data_block_size();
            let _ = sa::decode_znode_sa(&d.bonus, le, &sa::SaRegistry::legacy());
            let _ = znode::decode_znode_phys(&d.bonus, le);
        }
        let _ = ObjsetPhys::decode(data, le);
    }
});
