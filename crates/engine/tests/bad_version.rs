//! A pool whose labels name a version oxzfs does not know (neither 1-28 nor 5000) is refused at
//! import, read-only and read-write, with an error naming the version, and nothing is written.

use oxzfs::dsl_pool::PoolW;
use oxzfs::spa::Spa;
use oxzfs::spa_create::{CreateSpec, VdevClass, VdevSpec};
use oxzfs_format::label::{decode_label_config, encode_label_config, label_offset, VDEV_LABELS, VDEV_PHYS_OFFSET, VDEV_PHYS_SIZE};
use std::os::unix::fs::FileExt;

#[test]
fn an_unknown_pool_version_is_refused_by_name_and_nothing_is_written() {
    let dir = std::env::temp_dir().join(format!("oxzfs-badver-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dev = dir.join("d0");
    std::fs::File::create(&dev).unwrap().set_len(128 << 20).unwrap();
    let spec = CreateSpec { name: "badver".into(), vdevs: vec![(VdevClass::Normal, VdevSpec::File(dev.clone()))], fs_init: Some(oxzfs::zplw::init_fs), ..Default::default() };
    let mut pw = PoolW::create(&spec, 32 << 20).unwrap();
    pw.export().unwrap();
    drop(pw);

    // Every label's config says version 999 (checksums kept valid, so only the version is wrong).
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&dev).unwrap();
    let size = f.metadata().unwrap().len();
    for l in 0..VDEV_LABELS {
        let off = label_offset(l, size) + VDEV_PHYS_OFFSET;
        let mut phys = vec![0u8; VDEV_PHYS_SIZE];
        f.read_exact_at(&mut phys, off).unwrap();
        let mut cfg = decode_label_config(&phys, off).unwrap();
        assert_eq!(cfg.get_u64("version"), Some(5000));
        cfg.add_u64("version", 999);
        f.write_all_at(&encode_label_config(&cfg, off).unwrap(), off).unwrap();
    }
    f.sync_all().unwrap();
    let before = std::fs::read(&dev).unwrap();

    let scan = oxzfs::spa::scan(&[dir.clone()]);
    let cand = oxzfs::spa::choose(&scan, "badver").expect("the pool is still found by the scan");
    for readonly in [true, false] {
        let err = match Spa::open(cand, readonly, 16 << 20) {
            Ok(_) => panic!("a version-999 pool imported (readonly={readonly})"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("unsupported ZFS version") && err.contains("999"), "readonly={readonly}: {err}");
    }
    let err = match PoolW::open(cand, 16 << 20, "test") {
        Ok(_) => panic!("a version-999 pool opened for writing"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("999"), "{err}");
    assert!(std::fs::read(&dev).unwrap() == before, "a refused import wrote to the device");
    std::fs::remove_dir_all(&dir).unwrap();
}
