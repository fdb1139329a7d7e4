//! Tests that need a whole pool made by the engine (create, write, sync, export, reopen):
//! the txg machinery's (suspension, the ARC of written blocks, reader pins, the space check
//! under racing writers) and the labels' (which labels import goes by, what they carry). They
//! sit at the top of the layers because a pool needs every layer, the ZPL's file system
//! skeleton included; each module says which layer it tests.

use crate::dsl_pool::PoolW;
use std::path::PathBuf;

/// A new pool `name` on one 128 MiB file in a fresh directory (removed by the caller).
pub(crate) fn test_pool(name: &str) -> (PathBuf, PoolW) {
    let dir = std::env::temp_dir().join(format!("oxzfs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dev = dir.join("d0");
    std::fs::File::create(&dev).unwrap().set_len(128 << 20).unwrap();
    use crate::spa_create::{CreateSpec, VdevClass, VdevSpec};
    let spec = CreateSpec { name: name.into(), vdevs: vec![(VdevClass::Normal, VdevSpec::File(dev))], fs_init: Some(crate::zplw::init_fs), ..Default::default() };
    (dir, PoolW::create(&spec, 64 << 20).unwrap())
}

/// `len` bytes of xorshift noise from `seed` (not 0): data that does not compress.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    oxzfs_format::compress::xorshift_noise(seed, len)
}

mod export_tests {
    use super::test_pool;
    use crate::txg::*;
    

    /// A pool whose sync failed is suspended: export reports it and leaves the labels active
    /// (at the last synced txg) instead of marking the pool cleanly exported.
    #[test]
    fn suspended_pool_does_not_export_clean() {
        let (dir, mut pw) = test_pool("susp");
        let ds = pw.find_dataset("susp").unwrap().expect("the root dataset");
        let h = PoolHandle::start(pw);
        h.lock_open().suspended = Some("txg sync failed: injected".into());
        let e = h.with_fs(ds, |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("is suspended: txg sync failed: injected"), "{e}");
        let e = h.export().unwrap_err();
        assert!(e.to_string().contains("suspended"), "{e}");
        let scan = crate::spa::scan(&[dir.clone()]);
        assert_eq!(scan.pools.len(), 1, "{:?}", scan.problems);
        assert_eq!(scan.pools[0].pool_state, 0, "labels stay POOL_STATE_ACTIVE");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

mod arc_tests {
    use super::test_pool;
    
    

    /// Blocks a sync writes stay in the ARC: later syncs read back what they rewrite (space
    /// map tails, dnode and indirect blocks, the history object) without one cache miss.
    #[test]
    fn syncs_read_back_written_blocks_from_the_arc() {
        let (dir, mut pw) = test_pool("arcw");
        pw.sync().unwrap();
        // (this pool's own counts: the ARC is shared with the other tests' pools)
        let spa = pw.spa.clone();
        let counts = || (spa.arc_hits.load(std::sync::atomic::Ordering::Relaxed), spa.arc_misses.load(std::sync::atomic::Ordering::Relaxed));
        let before = counts();
        for i in 0..5 {
            pw.log_history(&format!("zpool set comment=c{i} arcw")).unwrap();
            pw.sync().unwrap();
        }
        let after = counts();
        assert!(after.0 > before.0, "the syncs read blocks back");
        assert_eq!(after.1, before.1, "every block read back was cached when written");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Metadata a sync writes one block at a time (here the MOS's dnode tree) enters the ARC
    /// as the pool stores it, compressed, with its decompressed bytes beside it for the next
    /// sync to read back.
    #[test]
    fn written_metadata_is_kept_compressed_with_its_copy() {
        let (dir, mut pw) = test_pool("arcmeta");
        pw.sync().unwrap();
        let bp = pw.mos.phys.meta_dnode.blkptr[0].clone();
        assert!(bp.compress != oxzfs_format::compress::ZIO_COMPRESS_OFF && bp.psize < bp.lsize, "{bp:?}");
        let key = crate::spa::arc_key(pw.spa.arc_id, &bp).expect("a block on disk");
        assert_eq!(pw.spa.arc.held(&key), Some((true, true)), "compressed bytes and the copy in use");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

mod space_tests {
    use super::test_pool;
    use crate::txg::*;
    
    use crate::ZfsError;
    use oxzfs_format::types;

    /// A read planned under the lock and finished without it pins the tree it walks, so the
    /// ENOSPC retry does not hand that tree's freed blocks out again meanwhile.
    #[test]
    fn a_planned_read_pins_its_tree() {
        let (dir, mut pw) = test_pool("pin");
        let ds = pw.find_dataset("pin").unwrap().expect("the root dataset");
        pw.sync().unwrap();
        let spa = pw.spa.clone();
        let os = pw.objset(ds).unwrap();
        let r = os.read_later(1, 0, 512).unwrap();
        assert!(matches!(r, crate::dbuf::ReadLater::Clean { .. }), "a clean object is read without the lock");
        // Pinned at the last synced txg: the tree the reader walks holds no block freed by then.
        assert_eq!(spa.oldest_reader(), Some(spa.mos_root().unwrap().0.birth));
        assert!(os.bp.birth <= spa.mos_root().unwrap().0.birth);
        r.finish().unwrap();
        assert_eq!(spa.oldest_reader(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writers racing to fill a small pool: each change passes the space check and is made
    /// in one step, so the pool never holds more dirty data than the check allows — after
    /// every writer met ENOSPC, the state itself still passes the check.
    #[test]
    fn concurrent_writers_cannot_pass_the_space_check_together() {
        let (dir, mut pw) = test_pool("racefill");
        let ds = pw.find_dataset("racefill").unwrap().expect("the root dataset");
        let h = PoolHandle::start(pw);
        // Incompressible bytes (the pool compresses by default).
        let chunk: Vec<u8> = (0..4u64 << 20).map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ (i >> 13) as u8).collect();
        let accepted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let obj = h.with_fs(ds, |os, _| os.alloc_object(types::DMU_OT_PLAIN_FILE_CONTENTS, 128 << 10, 0, 0, 1)).unwrap();
                    for i in 0..64u64 {
                        match h.with_fs_space(ds, chunk.len() as u64, |os, _| os.write(obj, i * chunk.len() as u64, &chunk)) {
                            Ok(()) => {
                                let r = h.lock_open().space_check(0, 0, 1);
                                assert!(r.is_ok(), "writers together overshot the space check: {r:?}");
                                accepted.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed)
                            }
                            Err(ZfsError::Posix(e, _)) if e == libc::ENOSPC => return,
                            Err(e) => panic!("write: {e}"),
                        };
                    }
                    panic!("a 128 MiB pool took 256 MiB from one writer");
                });
            }
        });
        assert!(accepted.into_inner() > 8 << 20, "the pool took some data");
        let g = h.lock();
        let r = g.space_check(0, 0, 1);
        assert!(r.is_ok(), "the writers together overshot the space check: {r:?}");
        drop(g);
        h.sync_now().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

mod spa_labels {
    use crate::spa::*;
    use super::test_pool;
    use oxzfs_format::{label, uberblock};

    /// A txg that wrote the even labels (a second top-level vdev, as `zpool add` does) but
    /// whose uberblock never landed: import goes by the odd labels, which match the newest
    /// uberblock, not by the newer even ones.
    #[test]
    fn labels_newer_than_the_uberblock_are_ignored() {
        let (dir, mut pw) = test_pool("newlbl");
        pw.export().unwrap();
        drop(pw);
        let dev = dir.join("d0");
        let pd = probe(&dev).unwrap();
        let ub_txg = uberblock::best_uberblock(pd.uberblocks.iter()).unwrap().txg;
        assert_eq!(pd.txg, ub_txg, "export writes labels at the last synced txg");
        let mut cfg = pd.config.clone();
        cfg.add_u64("txg", ub_txg + 1);
        cfg.add_u64("vdev_children", 2);
        cfg.add_u64("state", POOL_STATE_ACTIVE);
        let f = std::fs::OpenOptions::new().write(true).open(&dev).unwrap();
        let size = f.metadata().unwrap().len();
        for l in [0, 2] {
            let off = label::label_offset(l, size) + label::VDEV_PHYS_OFFSET;
            let b = label::encode_label_config(&cfg, off).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &b, off).unwrap();
        }
        drop(f);
        assert_eq!(probe(&dev).unwrap().txg, ub_txg + 1, "the newer labels are valid labels");
        let scan = scan(&[dir.clone()]);
        assert_eq!(scan.pools.len(), 1, "{:?}", scan.problems);
        let c = &scan.pools[0];
        assert_eq!(c.txg, ub_txg);
        assert_eq!(c.config.get_u64("vdev_children"), Some(1));
        assert_eq!(c.pool_state, POOL_STATE_EXPORTED);
        assert_eq!(c.state, "ONLINE", "{:?}", c.missing);
        assert!(c.missing.is_empty());
        Spa::open(c, true, 64 << 20).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Labels carry features_for_read and no vdev ZAP numbers (those are the MOS config's);
    /// the MOS config carries features_for_read too — as spa_config_generate and
    /// vdev_config_generate make them.
    #[test]
    fn label_and_mos_configs_as_openzfs_makes_them() {
        let (dir, mut pw) = test_pool("lblcfg");
        pw.export().unwrap();
        drop(pw);
        let pd = probe(&dir.join("d0")).unwrap();
        let f = pd.config.get_nvlist("features_for_read").expect("the label has features_for_read");
        assert!(f.get("com.delphix:embedded_data").is_some(), "an active MOS feature is listed");
        let tree = pd.config.get_nvlist("vdev_tree").unwrap();
        assert!(tree.get("com.delphix:vdev_zap_top").is_none() && tree.get("com.delphix:vdev_zap_leaf").is_none(), "{tree:?}");
        assert!(pd.config.get("com.delphix:has_per_vdev_zaps").is_none(), "has_per_vdev_zaps is the MOS config's");
        let scan = scan(&[dir.clone()]);
        let spa = Spa::open(&scan.pools[0], true, 64 << 20).unwrap();
        assert!(spa.config.get_nvlist("features_for_read").is_some(), "the MOS config has features_for_read");
        let mos_tree = spa.config.get_nvlist("vdev_tree").unwrap().get_nvlist_array("children").unwrap()[0].clone();
        assert!(mos_tree.get("com.delphix:vdev_zap_top").is_some(), "the MOS config keeps the vdev ZAPs");
        assert!(spa.config.get("com.delphix:has_per_vdev_zaps").is_some());
        spa.close();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

mod vdev_removal_tests {
    use crate::dsl_pool::PoolW;
    use crate::spa_create::{CreateSpec, VdevClass, VdevSpec};

    /// A pool `name` of two 1 GiB file vdevs in a fresh temporary directory, for writing.
    fn two_file_vdev_pool(name: &str) -> (std::path::PathBuf, PoolW) {
        file_vdev_pool(name, &["d0", "d1"])
    }

    /// `n` files of 300000 bytes that do not compress in the root file system of pool `name`,
    /// synced.
    fn random_files(pw: &mut PoolW, name: &str, n: u64) {
        let ds = pw.find_dataset(name).unwrap().expect("the root dataset");
        {
            let os = pw.objset(ds).unwrap();
            let fs = crate::zplw::open_fs(os, 4096).unwrap();
            for i in 0..n {
                let obj = crate::zplw::create(os, fs.root, format!("f{i}").as_bytes(), 0o100644, 0, 0, 0, None, 5).unwrap();
                crate::zplw::write(os, obj, 0, &super::noise((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15), 300_000), 4096).unwrap();
            }
        }
        pw.sync().unwrap();
    }

    /// A pool `name` of 1 GiB file vdevs `names` (striped) in a fresh temporary directory.
    fn file_vdev_pool(name: &str, names: &[&str]) -> (std::path::PathBuf, PoolW) {
        let dir = std::env::temp_dir().join(format!("oxzfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let devs: Vec<_> = names.iter().map(|n| dir.join(n)).collect();
        for d in &devs {
            std::fs::File::create(d).unwrap().set_len(1 << 30).unwrap();
        }
        let spec = CreateSpec {
            name: name.into(),
            vdevs: devs.iter().map(|d| (VdevClass::Normal, VdevSpec::File(d.clone()))).collect(),
            fs_init: Some(crate::zplw::init_fs),
            ..Default::default()
        };
        (dir, PoolW::create(&spec, 64 << 20).unwrap())
    }

    /// A new pool `name` of one file with project_quota enabled: its directory, the pool, and
    /// its root dataset.
    fn project_quota_pool(name: &str) -> (std::path::PathBuf, PoolW, u64) {
        let dir = std::env::temp_dir().join(format!("oxzfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dev = dir.join("d0");
        std::fs::File::create(&dev).unwrap().set_len(256 << 20).unwrap();
        let spec = CreateSpec {
            name: name.into(),
            vdevs: vec![(VdevClass::Normal, VdevSpec::File(dev))],
            fs_init: Some(crate::zplw::init_fs),
            enabled: vec!["project_quota".into()],
            ..Default::default()
        };
        let mut pw = PoolW::create(&spec, 64 << 20).unwrap();
        let ds = pw.find_dataset(name).unwrap().expect("the root dataset");
        (dir, pw, ds)
    }

    /// With project_quota, new znodes carry a project id as zfs_mknode gives them: the
    /// directory's when it passes its project on (ZFS_PROJINHERIT, passed on to regular files
    /// and directories), else 0; and the accounting charges the project after a sync.
    #[test]
    fn new_znodes_inherit_their_directorys_project() {
        let (dir, mut pw, ds) = project_quota_pool("projinh");
        let (plain, marked, child, sub, link) = {
            let os = pw.objset(ds).unwrap();
            let fs = crate::zplw::open_fs(os, 4096).unwrap();
            let plain = crate::zplw::create(os, fs.root, b"plain", 0o100644, 0, 0, 0, None, 5).unwrap();
            let marked = crate::zplw::create(os, fs.root, b"proj", 0o40755, 0, 0, 0, None, 5).unwrap();
            let mut z = crate::zplw::get(os, marked).unwrap();
            z.flags |= 0x0000_4000_0000_0000;
            z.projid = 42;
            crate::zplw::put(os, marked, &z).unwrap();
            let child = crate::zplw::create(os, marked, b"f", 0o100644, 0, 0, 0, None, 5).unwrap();
            crate::zplw::write(os, child, 0, &super::noise(42, 10000), 4096).unwrap();
            let sub = crate::zplw::create(os, marked, b"sub", 0o40755, 0, 0, 0, None, 5).unwrap();
            let link = crate::zplw::create(os, marked, b"l", 0o120777, 0, 0, 0, Some(b"f"), 5).unwrap();
            (plain, marked, child, sub, link)
        };
        pw.sync().unwrap();
        let os = pw.objset(ds).unwrap();
        let projid = 0x0000_8000_0000_0000u64;
        let inherit = 0x0000_4000_0000_0000u64;
        let got = |os: &mut crate::dbuf::ObjsetW, o: u64| {
            let z = crate::zplw::get(os, o).unwrap();
            (z.projid, z.flags & projid != 0, z.flags & inherit != 0)
        };
        assert_eq!(got(os, plain), (0, true, false));
        assert_eq!(got(os, marked), (42, true, true));
        assert_eq!(got(os, child), (42, true, true));
        assert_eq!(got(os, sub), (42, true, true));
        // A symlink takes the project, not the flag.
        assert_eq!(got(os, link), (42, true, false));
        // Into the project's directory only what is of its project: EXDEV otherwise.
        let fs = crate::zplw::open_fs(os, 4096).unwrap();
        let e = crate::zplw::link(os, plain, marked, b"plain-link").unwrap_err();
        assert_eq!(e.errno(), libc::EXDEV, "{e}");
        let e = crate::zplw::rename(os, &fs, fs.root, b"plain", marked, b"moved", 0, &|_| false).unwrap_err();
        assert_eq!(e.errno(), libc::EXDEV, "{e}");
        crate::zplw::rename(os, &fs, marked, b"f", fs.root, b"f-out", 0, &|_| false).unwrap();
        // The projects' figures (not marked complete by oxzfs: read from the ZAP itself).
        use crate::dmu::ObjsetRead;
        let synced = os.synced().unwrap();
        let used = synced.zap_value(oxzfs_format::objset::DMU_PROJECTUSED_OBJECT, b"2a").unwrap().unwrap_or(0);
        let objs = synced.zap_value(oxzfs_format::objset::DMU_PROJECTUSED_OBJECT, b"obj-2a").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(used >= 4 * 512 + 10000, "project 42 holds {used} bytes");
        assert_eq!(objs, None, "object counts without userobj_accounting");
    }

    /// A project id given to a znode made without one (before project_quota was enabled) goes
    /// where sa_add_projid puts it, right after the fixed attributes: the accounting reads it
    /// there by offset (as zpl_get_file_info does), and zdb finds the layout sound.
    #[test]
    fn a_project_id_given_later_goes_where_openzfs_puts_it() {
        let (dir, mut pw, ds) = project_quota_pool("addprojid");
        let projid_flag = oxzfs_format::znode::pflags::ZFS_PROJID;
        let f = {
            let os = pw.objset(ds).unwrap();
            let fs = crate::zplw::open_fs(os, 4096).unwrap();
            os.props.projects = false;
            let f = crate::zplw::create(os, fs.root, b"old", 0o100644, 1000, 100, 0, None, 5).unwrap();
            crate::zplw::setxattr(os, f, b"user.k", b"v", 0, 5).unwrap();
            crate::zplw::write(os, f, 0, &super::noise(5, 7000), 4096).unwrap();
            os.props.projects = true;
            assert_eq!(crate::zplw::get(os, f).unwrap().flags & projid_flag, 0);
            let mut x = [0u8; crate::zfs_pflags::FSXATTR_SIZE];
            x[12..16].copy_from_slice(&5u32.to_le_bytes());
            crate::zfs_pflags::set_fsxattr(os, &fs, f, &x, crate::zfs_pflags::Caller { uid: 0 }).unwrap();
            f
        };
        pw.sync().unwrap();
        let os = pw.objset(ds).unwrap();
        let z = crate::zplw::get(os, f).unwrap();
        assert_eq!((z.projid, z.flags & projid_flag != 0, z.uid, z.gid, z.size), (5, true, 1000, 100, 7000));
        assert_eq!(crate::zpl::ZplRead::getxattr(&crate::zpl::Live(os), f, b"user.k").unwrap(), b"v");
        use crate::dmu::ObjsetRead;
        let used = os.synced().unwrap().zap_value(oxzfs_format::objset::DMU_PROJECTUSED_OBJECT, b"5").unwrap().unwrap_or(0);
        assert!(used >= 512 + 7000, "project 5 holds {used} bytes");
        pw.export().unwrap();
        drop(pw);
        zdb_clean(&dir, "addprojid");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Pool `name` opened for writing again from the devices in `dir`.
    fn reopen(dir: &std::path::Path, name: &str) -> PoolW {
        let scan = crate::spa::scan(&[dir.to_path_buf()]);
        let mut pw = PoolW::open(crate::spa::choose(&scan, name).unwrap(), 64 << 20, "test").unwrap();
        pw.fs_init = crate::zplw::init_fs;
        pw
    }

    fn zdb_clean(dir: &std::path::Path, pool: &str) -> String {
        let zdb = "/opt/openzfs/bin/zdb";
        assert!(std::path::Path::new(zdb).exists(), "OpenZFS zdb not found at {zdb}: run scripts/install-deps.sh");
        let out = std::process::Command::new(zdb).args(["-e", "-p"]).arg(dir).args(["-bcc", pool]).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("No leaks"), "zdb -bcc:\n{text}");
        text
    }

    /// An evacuation started, stepped a little and canceled leaves the pool as it was (zdb
    /// clean, no indirect vdev); evacuated in one go (`evacuate_vdev`) the vdev is indirect
    /// and zdb is clean.
    #[test]
    fn evacuation_canceled_then_done() {
        let (dir, mut pw) = two_file_vdev_pool("evac");
        pw.export().unwrap();
        let open = || reopen(&dir, "evac");
        let mut pw = open();
        pw.start_removal(1).unwrap();
        assert_eq!(pw.removing_vdev().unwrap(), Some(1));
        assert!(!pw.removal_step(4096).unwrap());
        pw.sync().unwrap();
        pw.cancel_removal().unwrap();
        assert_eq!(pw.removing_phys().unwrap().map(|p| p.state), Some(crate::vdev_removal::DSS_CANCELED));
        pw.export().unwrap();
        drop(pw);
        zdb_clean(&dir, "evac");
        let mut pw = open();
        let done = pw.evacuate_vdev(1).unwrap();
        assert!(done.copied > 0 && done.entries > 0, "{done:?}");
        let rec = pw.removing_phys().unwrap().unwrap();
        assert_eq!((rec.state, rec.copied, rec.removing_vdev, rec.prev_indirect_vdev), (crate::vdev_removal::DSS_FINISHED, rec.to_copy, 1, 1));
        pw.zil_close_all();
        pw.sync().unwrap();
        drop(pw);
        let mut pw = open();
        pw.export().unwrap();
        drop(pw);
        let text = zdb_clean(&dir, "evac");
        assert!(text.contains("indirect vdev id 1 has"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// attach -s, stepped: a rebuild stopped after a few steps and an export resumes at the
    /// offset the MOS holds (nothing below it copied again), completes with the DTL empty and
    /// the feature's count back to 0, and the new side alone passes OpenZFS's zdb -bcc.
    #[test]
    fn a_rebuild_stopped_midway_resumes_from_its_offset() {
        use crate::vdev_rebuild::{Step, DEVICE_REBUILD, VDEV_REBUILD_ACTIVE, VDEV_REBUILD_COMPLETE};
        let (dir, mut pw) = file_vdev_pool("rbstep", &["d0"]);
        random_files(&mut pw, "rbstep", 20);
        let d1 = dir.join("d1");
        std::fs::File::create(&d1).unwrap().set_len(1 << 30).unwrap();
        let d0 = pw.spa.root_vdev.children[0].guid;
        pw.vdev_attach(d0, &d1, false, None, "d0", "d1", true).unwrap();
        assert!(pw.feature_active(DEVICE_REBUILD));
        pw.export().unwrap();
        drop(pw);
        let mut pw = reopen(&dir, "rbstep");
        let first = pw.rebuild_phys(0).unwrap().unwrap();
        assert_eq!((first.state, first.last_offset), (VDEV_REBUILD_ACTIVE, 0));
        let mut steps = 0;
        while steps < 3 && pw.rebuild_step(0, 64 << 10, 1).unwrap() == Step::More {
            steps += 1;
        }
        let mid = pw.rebuild_phys(0).unwrap().unwrap();
        assert!(mid.last_offset > 0 && mid.bytes_scanned < first.bytes_est, "{mid:?} of {first:?}");
        pw.sync().unwrap();
        pw.export().unwrap();
        drop(pw);
        let mut pw = reopen(&dir, "rbstep");
        assert_eq!(pw.rebuild_phys(0).unwrap(), Some(mid), "the record as the last sync left it");
        assert!(pw.spa.root_vdev.children[0].children[1].is_stale());
        while pw.rebuild_step(0, 1 << 20, 2).unwrap() == Step::More {}
        let end = pw.rebuild_phys(0).unwrap().unwrap();
        assert!(end.bytes_scanned >= first.bytes_est && end.bytes_scanned < first.bytes_est + (1 << 20), "each range once: {end:?} of {first:?}");
        let guid = pw.top_guid(0);
        pw.rebuild_complete(0, guid, 2).unwrap();
        assert_eq!(pw.rebuild_phys(0).unwrap().map(|p| p.state), Some(VDEV_REBUILD_COMPLETE));
        assert!(!pw.feature_active(DEVICE_REBUILD) && pw.feature_enabled(DEVICE_REBUILD));
        assert!(!pw.spa.root_vdev.children[0].children[1].is_stale(), "the DTL is cleared");
        pw.export().unwrap();
        drop(pw);
        zdb_clean(&dir, "rbstep");
        // d0 out of the way: d1 alone holds every block.
        std::fs::rename(dir.join("d0"), std::env::temp_dir().join(format!("oxzfs-rbstep-d0-{}", std::process::id()))).unwrap();
        zdb_clean(&dir, "rbstep");
        std::fs::remove_file(std::env::temp_dir().join(format!("oxzfs-rbstep-d0-{}", std::process::id()))).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Out of space for the copies: a step goes on with halved allocations (spa_vdev_copy_impl)
    /// where the destination has only small holes, and fails with ENOSPC, nothing kept, when
    /// not even one sector is free; once space is back the step goes on, and the pool is
    /// clean after a cancel.
    #[test]
    fn evacuation_step_halves_then_fails_on_enospc() {
        let (dir, mut pw) = two_file_vdev_pool("evacnospc");
        // Some data on both vdevs, some of it to copy.
        random_files(&mut pw, "evacnospc", 40);
        pw.start_removal(1).unwrap();
        let txg = pw.txg;
        // Vdev 0 filled, but for 8K holes every 16K.
        let mut fills = Vec::new();
        {
            let mut ms = pw.ms.lock();
            while let Some((v, off, size)) = ms.alloc(crate::zio::AllocClass::Normal, &|_| 4096, txg, &[]) {
                assert_eq!(v, 0);
                fills.push((off, size));
            }
            let mut kept = Vec::new();
            for (i, f) in fills.drain(..).enumerate() {
                if i % 4 < 2 && f.0 % 16384 < 8192 {
                    ms.free(0, f.0, f.1, txg, txg);
                } else {
                    kept.push(f);
                }
            }
            fills = kept;
        }
        assert!(!pw.removal_step(64 << 10).unwrap());
        {
            let mut ms = pw.ms.lock();
            let r = ms.removing_mut(1).unwrap();
            assert!(!r.mapping.entries.is_empty());
            assert!(r.mapping.entries.iter().all(|e| e.size() <= 8192), "{:?}", r.mapping.entries);
        }
        // Nothing free at all: ENOSPC, and what the step had allocated is given back.
        {
            let mut ms = pw.ms.lock();
            for unit in [8192, 512] {
                while let Some((_, off, size)) = ms.alloc(crate::zio::AllocClass::Normal, &|_| unit, txg, &[]) {
                    fills.push((off, size));
                }
            }
        }
        let before = pw.ms.lock().removing_mut(1).unwrap().mapping.entries.len();
        match pw.removal_step(256 << 10) {
            Err(crate::ZfsError::Posix(libc::ENOSPC, _)) => {}
            other => panic!("a step with no space left: {other:?}"),
        }
        assert_eq!(pw.ms.lock().removing_mut(1).unwrap().mapping.entries.len(), before);
        assert!(pw.ms.lock().alloc(crate::zio::AllocClass::Normal, &|_| 512, txg, &[]).is_none(), "the failed step kept no space");
        {
            let mut ms = pw.ms.lock();
            for (off, size) in fills.drain(..) {
                ms.free(0, off, size, txg, txg);
            }
        }
        assert!(!pw.removal_step(256 << 10).unwrap());
        pw.sync().unwrap();
        pw.cancel_removal().unwrap();
        pw.export().unwrap();
        drop(pw);
        zdb_clean(&dir, "evacnospc");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `zpool remove` of a log device: the pool reopens from its labels with a hole where the
    /// device was, every other vdev keeps its id, and OpenZFS's zdb finds the pool clean.
    #[test]
    fn log_device_removal_leaves_a_hole() {
        let dir = std::env::temp_dir().join(format!("oxzfs-rmlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let devs: Vec<_> = ["d0", "l0"].iter().map(|n| dir.join(n)).collect();
        for d in &devs {
            std::fs::File::create(d).unwrap().set_len(128 << 20).unwrap();
        }
        let spec = CreateSpec {
            name: "rmlog".into(),
            vdevs: vec![(VdevClass::Normal, VdevSpec::File(devs[0].clone())), (VdevClass::Log, VdevSpec::File(devs[1].clone()))],
            fs_init: Some(crate::zplw::init_fs),
            ..Default::default()
        };
        let mut pw = PoolW::create(&spec, 64 << 20).unwrap();
        pw.export().unwrap();
        let scan = crate::spa::scan(&[dir.clone()]);
        let cand = crate::spa::choose(&scan, "rmlog").unwrap();
        let mut pw = PoolW::open(cand, 64 << 20, "test").unwrap();
        pw.fs_init = crate::zplw::init_fs;
        pw.remove_log_vdev(1).unwrap();
        // What `zpool remove` does next: the pool reopens from its labels (PoolHandle::reopen).
        pw.zil_close_all();
        pw.sync().unwrap();
        let scan = crate::spa::scan(&[dir.clone()]);
        let cand = crate::spa::choose(&scan, "rmlog").unwrap();
        assert!(cand.missing.is_empty(), "{:?}", cand.missing);
        drop(pw);
        let mut pw = PoolW::open(cand, 64 << 20, "test").unwrap();
        pw.log_history("zpool remove rmlog l0").unwrap();
        pw.sync().unwrap();
        pw.export().unwrap();
        let zdb = "/opt/openzfs/bin/zdb";
        assert!(std::path::Path::new(zdb).exists(), "OpenZFS zdb not found at {zdb}: run scripts/install-deps.sh");
        let out = std::process::Command::new(zdb).args(["-e", "-p"]).arg(&dir).args(["-bcc", "rmlog"]).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("No leaks"), "zdb -bcc:\n{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

mod scan_walk_tests {
    //! The scan's walk (`dsl_scan_walk`, pool layer): stopped anywhere and resumed from its
    //! bookmark and dataset queue, it reads every block once, as one walk does — but for the
    //! accounting objects' blocks, which every walk through their objset reads again.
    use super::test_pool;
    use crate::dsl_scan_walk::{ScanWalk, Zb};
    use crate::vdev::ReadMode;
    use oxzfs_format::dsl::DslScanPhys;
    use std::collections::BTreeMap;

    /// Walk on from `phys`/`queue` until `budget` blocks were read: (blocks and bytes read
    /// outside the accounting objects, those read inside them, whether the walk ended).
    fn turn(spa: &std::sync::Arc<crate::spa::Spa>, phys: &mut DslScanPhys, queue: &mut BTreeMap<u64, u64>, budget: u64) -> ((u64, u64), u64, bool) {
        let mode = ReadMode::new(false, true);
        let n = std::cell::Cell::new(0u64);
        let stop = || n.get() >= budget;
        let (mut blocks, mut bytes, mut acct) = (0, 0, 0);
        let mut progress = |zb: &Zb, bp: &oxzfs_format::blkptr::BlockPointer, ok: bool| {
            assert!(ok);
            let asize = bp.asize_total();
            n.set(n.get() + 1);
            if (zb.object as i64) < 0 {
                acct += 1;
            } else {
                blocks += 1;
                bytes += asize;
            }
        };
        let mut w = ScanWalk::new(spa, &mode, phys, std::mem::take(queue), &stop, &mut progress);
        let done = w.visit();
        phys.bookmark = w.bookmark.words();
        phys.ddt_bookmark = w.ddt_bookmark;
        phys.cur_min_txg = w.cur_min_txg;
        phys.cur_max_txg = w.cur_max_txg;
        *queue = std::mem::take(&mut w.queue);
        drop(w);
        ((blocks, bytes), acct, done)
    }

    #[test]
    fn a_walk_stopped_anywhere_resumes_without_loss_or_repeat() {
        let (dir, mut pw) = test_pool("scanwalk");
        let ds = pw.find_dataset("scanwalk").unwrap().expect("the root dataset");
        // Files of many sizes (indirect blocks too), a directory, a snapshot, then a sync.
        {
            let os = pw.objset(ds).unwrap();
            let fs = crate::zplw::open_fs(os, 4096).unwrap();
            for i in 0..40u64 {
                let obj = crate::zplw::create(os, fs.root, format!("f{i}").as_bytes(), 0o100644, 0, 0, 0, None, 5).unwrap();
                let data = super::noise(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, (i as usize * 7919) % 300_000 + 1);
                crate::zplw::write(os, obj, 0, &data, 4096).unwrap();
            }
        }
        // A snapshot, then files changed after it: the walk goes through the snapshot, then
        // the head from the snapshot's txg (the dataset queue).
        pw.snapshot(&["scanwalk@one".to_string()], &[]).unwrap();
        {
            let os = pw.objset(ds).unwrap();
            let fs = crate::zplw::open_fs(os, 4096).unwrap();
            for i in 0..10u64 {
                let obj = crate::zplw::create(os, fs.root, format!("g{i}").as_bytes(), 0o100644, 0, 0, 0, None, 5).unwrap();
                crate::zplw::write(os, obj, 0, &vec![i as u8 + 1; 20_000 * i as usize + 1], 4096).unwrap();
            }
        }
        pw.sync().unwrap();
        let spa = pw.spa.clone();
        let start = DslScanPhys { max_txg: u64::MAX - 1, ..Default::default() };
        let (whole, _, done) = turn(&spa, &mut start.clone(), &mut BTreeMap::new(), u64::MAX);
        assert!(whole.0 > 100 && done, "one walk: {whole:?}");
        for budget in [1, 7, 64] {
            let (mut phys, mut queue) = (start.clone(), BTreeMap::new());
            let (mut blocks, mut bytes, mut turns) = (0, 0, 0);
            loop {
                let ((b, n), _, done) = turn(&spa, &mut phys, &mut queue, budget);
                blocks += b;
                bytes += n;
                turns += 1;
                assert!(turns < 10 * whole.0, "the walk moves on");
                if done {
                    break;
                }
                assert_ne!(phys.bookmark, [0; 4], "a walk that stops says where");
            }
            assert_eq!((blocks, bytes), whole, "in turns of {budget} blocks ({turns} turns)");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_dedup_table_is_walked_first_and_resumes_from_its_bookmark() {
        use oxzfs_format::dsl::DDT_CLASS_DUPLICATE;
        let (dir, mut pw) = test_pool("scanddt");
        pw.set_prop("scanddt", "dedup", Some("on")).unwrap();
        let ds = pw.find_dataset("scanddt").unwrap().expect("the root dataset");
        // 60 distinct 4K blocks: the first 40 written twice (duplicate class), the rest once.
        {
            let os = pw.objset(ds).unwrap();
            let fs = crate::zplw::open_fs(os, 4096).unwrap();
            for i in 0..100u64 {
                let obj = crate::zplw::create(os, fs.root, format!("d{i}").as_bytes(), 0o100644, 0, 0, 0, None, 5).unwrap();
                let k = if i < 80 { i % 40 } else { i - 40 };
                crate::zplw::write(os, obj, 0, &super::noise(k + 1, 4096), 4096).unwrap();
            }
        }
        pw.sync().unwrap();
        let spa = pw.spa.clone();
        let mode = ReadMode::new(false, true);
        // One walk from the start: what it reads, by first DVA, and how often.
        let walk_all = |phys: &mut DslScanPhys, budget: u64| {
            let mut reads: BTreeMap<(u64, u64), u64> = BTreeMap::new();
            let mut ddt_read = std::collections::HashSet::new();
            let (mut queue, mut turns, mut stopped_in_ddt) = (BTreeMap::new(), 0, 0);
            loop {
                let n = std::cell::Cell::new(0u64);
                let stop = || n.get() >= budget;
                let mut progress = |zb: &Zb, bp: &oxzfs_format::blkptr::BlockPointer, ok: bool| {
                    assert!(ok);
                    n.set(n.get() + 1);
                    if (zb.object as i64) >= 0 {
                        *reads.entry((bp.dva[0].vdev, bp.dva[0].offset)).or_default() += 1;
                    }
                };
                let mut w = ScanWalk::new(&spa, &mode, phys, std::mem::take(&mut queue), &stop, &mut progress);
                w.ddt_read = Some(&mut ddt_read);
                let done = w.visit();
                phys.bookmark = w.bookmark.words();
                phys.ddt_bookmark = w.ddt_bookmark;
                (phys.cur_min_txg, phys.cur_max_txg) = (w.cur_min_txg, w.cur_max_txg);
                queue = std::mem::take(&mut w.queue);
                drop(w);
                turns += 1;
                if done {
                    return (reads, turns, stopped_in_ddt);
                }
                if phys.ddt_bookmark[0] <= phys.ddt_class_max {
                    assert_ne!(phys.ddt_bookmark[3], 0, "a walk stopped in the table says where in it");
                    stopped_in_ddt += 1;
                }
            }
        };
        let start = DslScanPhys { max_txg: u64::MAX - 1, ddt_class_max: DDT_CLASS_DUPLICATE, ..Default::default() };
        let (whole, _, _) = walk_all(&mut start.clone(), u64::MAX);
        // Without the table phase (class max below ditto's): the same blocks, the shared ones
        // read once per reference.
        let (plain, _, _) = walk_all(&mut DslScanPhys { ddt_bookmark: [3, 0, 0, 0], ..start.clone() }, u64::MAX);
        assert_eq!(whole.keys().collect::<Vec<_>>(), plain.keys().collect::<Vec<_>>(), "the same blocks either way");
        assert!(whole.values().all(|&n| n == 1), "with the table walked first every block is read once: {whole:?}");
        assert_eq!(plain.values().filter(|&&n| n == 2).count(), 40, "the datasets meet each shared block twice");
        for budget in [1, 3, 16] {
            let mut phys = start.clone();
            let (reads, turns, in_ddt) = walk_all(&mut phys, budget);
            assert_eq!(reads, whole, "in turns of {budget} ({turns} turns)");
            assert!(budget > 40 || in_ddt >= 40 / budget as usize / 2, "turns of {budget} stopped in the table {in_ddt} times");
            assert!(phys.ddt_bookmark[0] > DDT_CLASS_DUPLICATE, "the table phase ended: {:?}", phys.ddt_bookmark);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Write `n` files named PREFIX<i> to the root file system of `pw`'s pool and sync.
    fn files(pw: &mut crate::dsl_pool::PoolW, ds: u64, prefix: &str, n: u64) {
        {
            let os = pw.objset(ds).unwrap();
            let fs = crate::zplw::open_fs(os, 4096).unwrap();
            for i in 0..n {
                let obj = crate::zplw::create(os, fs.root, format!("{prefix}{i}").as_bytes(), 0o100644, 0, 0, 0, None, 5).unwrap();
                crate::zplw::write(os, obj, 0, &vec![i as u8 + 1; 30_000 * (i as usize % 7) + 1], 4096).unwrap();
            }
        }
        pw.sync().unwrap();
    }

    /// The first DVA of every block of the pool born by `max_txg` (a whole walk).
    fn blocks(spa: &std::sync::Arc<crate::spa::Spa>, max_txg: u64) -> std::collections::BTreeSet<(u64, u64)> {
        let mode = ReadMode::new(false, true);
        let mut seen = std::collections::BTreeSet::new();
        let mut progress = |_: &Zb, bp: &oxzfs_format::blkptr::BlockPointer, _: bool| {
            seen.insert((bp.dva[0].vdev, bp.dva[0].offset));
        };
        let stop = || false;
        let phys = DslScanPhys { max_txg, ..Default::default() };
        assert!(ScanWalk::new(spa, &mode, &phys, BTreeMap::new(), &stop, &mut progress).visit());
        seen
    }

    #[test]
    fn a_walk_in_turns_follows_snapshots_taken_and_destroyed_meanwhile() {
        use oxzfs_format::dsl::DSS_SCANNING;
        let (dir, mut pw) = test_pool("scansnap");
        let ds = pw.find_dataset("scansnap").unwrap().expect("the root dataset");
        files(&mut pw, ds, "a", 30);
        pw.snapshot(&["scansnap@one".to_string()], &[]).unwrap();
        files(&mut pw, ds, "b", 30);
        let spa = pw.spa.clone();
        let max_txg = pw.txg;
        {
            let mut s = spa.scan.lock();
            s.phys = DslScanPhys { state: DSS_SCANNING, max_txg, ..Default::default() };
            s.queue.clear();
        }
        // Turns of 3 blocks, with the scan's state where the hooks find it; meanwhile a new
        // snapshot, more files, the first snapshot destroyed, a third snapshot.
        let mut seen = std::collections::BTreeSet::new();
        let mode = ReadMode::new(false, true);
        for turn in 0.. {
            let (mut phys, queue) = {
                let s = spa.scan.lock();
                (s.phys.clone(), s.queue.clone())
            };
            let n = std::cell::Cell::new(0u64);
            let stop = || n.get() >= 3;
            let mut progress = |_: &Zb, bp: &oxzfs_format::blkptr::BlockPointer, _: bool| {
                n.set(n.get() + 1);
                seen.insert((bp.dva[0].vdev, bp.dva[0].offset));
            };
            let mut w = ScanWalk::new(&spa, &mode, &phys, queue, &stop, &mut progress);
            let done = w.visit();
            phys.bookmark = w.bookmark.words();
            phys.ddt_bookmark = w.ddt_bookmark;
            phys.cur_min_txg = w.cur_min_txg;
            phys.cur_max_txg = w.cur_max_txg;
            let queue = std::mem::take(&mut w.queue);
            drop(w);
            {
                let mut s = spa.scan.lock();
                s.phys = phys;
                s.queue = queue;
            }
            if done {
                assert!(turn > 12, "the walk ended at turn {turn}, before the changes");
                break;
            }
            match turn {
                4 => pw.snapshot(&["scansnap@two".to_string()], &[]).unwrap(),
                6 => files(&mut pw, ds, "c", 30),
                9 => pw.destroy_snapshot("scansnap@one").unwrap(),
                12 => pw.snapshot(&["scansnap@three".to_string()], &[]).unwrap(),
                _ => {}
            }
            assert!(turn < 100_000, "the walk moves on");
        }
        // Every block the pool holds now, of those born before the scan began, was read.
        let missed: Vec<_> = blocks(&spa, max_txg).difference(&seen).cloned().collect();
        assert!(missed.is_empty(), "{} blocks of the pool were not read: {:?}", missed.len(), &missed[..missed.len().min(8)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The zpl layer: a file system's reads are one path for both object sets.
mod zpl_read_tests {
    use super::test_pool;
    use crate::zpl::{Live, ZplRead, Zfs};
    use crate::zplw;

    /// Everything the reads show of the tree under `dir`: per path its attributes (with or
    /// without the block figures, which a sync changes), bytes or target, and xattrs.
    pub(super) fn walk(fs: &impl ZplRead, with_blocks: bool) -> Vec<String> {
        let mut out = Vec::new();
        let root = fs.root().unwrap();
        let mut stack = vec![(String::new(), root)];
        while let Some((path, ino)) = stack.pop() {
            let mut a = fs.getattr(ino).unwrap();
            if !with_blocks {
                (a.blocks, a.blksize) = (0, 0);
            }
            let mut xattrs = Vec::new();
            for n in fs.listxattr(ino).unwrap() {
                let v = fs.getxattr(ino, &n).unwrap();
                xattrs.push((String::from_utf8_lossy(&n).into_owned(), v));
            }
            let body = match a.mode as u64 & zplw::S_IFMT {
                zplw::S_IFDIR => {
                    let ents = fs.readdir(ino).unwrap();
                    assert_eq!(fs.lookup(ino, b"..").unwrap().ino, fs.parent(ino).unwrap());
                    for e in &ents {
                        let child = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                        assert_eq!(fs.lookup(ino, &e.name).unwrap().ino, e.ino, "{child}");
                        assert_eq!(fs.path_of(e.ino).as_deref(), Some(child.as_str()));
                        stack.push((child, e.ino));
                    }
                    format!("{:?}", ents)
                }
                zplw::S_IFLNK => format!("-> {:?}", fs.readlink(ino).unwrap()),
                _ => format!("{:?}", fs.read(ino, 0, a.size + 4096).unwrap()),
            };
            out.push(format!("{path}: {a:?} {xattrs:?} {body}"));
        }
        out.sort();
        out
    }

    #[test]
    fn a_file_system_reads_alike_while_written_and_once_synced() {
        let (dir, mut pw) = test_pool("zplread");
        let ds = pw.find_dataset("zplread").unwrap().expect("the root dataset");
        let os = pw.objset(ds).unwrap();
        let fs = zplw::open_fs(os, 4096).unwrap();
        let d = zplw::create(os, fs.root, b"dir", zplw::S_IFDIR | 0o750, 1, 2, 0, None, 5).unwrap();
        let f = zplw::create(os, d, b"file", zplw::S_IFREG | 0o640, 3, 4, 0, None, 5).unwrap();
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
        zplw::write(os, f, 0, &data, 4096).unwrap();
        zplw::write(os, f, 90_000, b"tail", 4096).unwrap();
        zplw::create(os, fs.root, b"link", zplw::S_IFLNK | 0o777, 0, 0, 0, Some(b"dir/file"), 5).unwrap();
        zplw::setxattr(os, f, b"user.small", b"v", 0, 5).unwrap();
        zplw::setxattr(os, d, b"user.big", &vec![9u8; 40_000], 0, 5).unwrap();
        let dirty = walk(&Live(os), false);
        assert_eq!(dirty.len(), 4, "{dirty:#?}");
        assert!(dirty.iter().any(|l| l.starts_with("/dir/file: ") && l.contains("size: 90004")), "{dirty:#?}");
        pw.sync().unwrap();
        let os = pw.objset(ds).unwrap();
        let live = walk(&Live(os), true);
        let synced = Zfs::open(crate::dmu::Objset::open_id(&os.spa, &os.bp, ds).unwrap()).unwrap();
        assert_eq!(walk(&*synced, true), live, "the synced objset reads as the writable one");
        assert_eq!(walk(&*synced, false), dirty, "and as it read before the sync");
        let e = Live(os).lookup(fs.root, &[b'x'; 256]).unwrap_err();
        assert_eq!((e.errno(), synced.lookup(fs.root, &[b'x'; 256]).unwrap_err().errno()), (libc::ENAMETOOLONG, libc::ENAMETOOLONG));
        assert_eq!(Live(os).readdir(f).unwrap_err().errno(), libc::ENOTDIR);
        assert_eq!(synced.read(d, 0, 10).unwrap_err().errno(), libc::EISDIR);
        drop(pw);
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The dsl_dir space accounting (dsl_space): each parent's CHILD and CHILD_RSRV stay the sums
/// of its children's used bytes and unused reservations, and $MOS's used bytes are the MOS's
/// blocks once the pool is exported.
mod dsl_accounting_tests {
    use super::test_pool;
    use crate::dsl_pool::PoolW;
    use oxzfs_format::dsl::{DD_USED_CHILD, DD_USED_CHILD_RSRV, DD_USED_HEAD};

    /// OpenZFS's invariants of every dir under `dir`: used is the breakdown's sum; CHILD and
    /// CHILD_RSRV are what the children hold and reserve.
    fn check_tree(pw: &mut PoolW, dir: u64) {
        let p = pw.dir_phys(dir).unwrap();
        assert_eq!(p.used_bytes, p.used_breakdown.iter().sum::<u64>(), "dir {dir}: {p:?}");
        let kids: Vec<u64> = pw.mos.zap(p.child_dir_zapobj).unwrap().entries.values().filter_map(|(_, v)| v.first().copied()).collect();
        let (mut used, mut rsrv) = (0, 0);
        for k in kids {
            let c = pw.dir_phys(k).unwrap();
            used += c.used_bytes;
            rsrv += c.reserved.saturating_sub(c.used_bytes);
            check_tree(pw, k);
        }
        assert_eq!((p.used_breakdown[DD_USED_CHILD], p.used_breakdown[DD_USED_CHILD_RSRV]), (used, rsrv), "dir {dir}: {p:?}");
    }

    /// A change that asks more of a dir than it holds (an accounting that drifted) takes the
    /// dir to zero, and its ancestors follow what it really lost: with a reservation below,
    /// the root's CHILD_RSRV and CHILD still add up.
    #[test]
    fn parents_follow_a_change_larger_than_a_dir_holds() {
        let (tmp, mut pw) = test_pool("dslclamp");
        pw.create_dataset("dslclamp/a", &[("reservation".into(), "50M".into())], false).unwrap();
        pw.sync().unwrap();
        let root = pw.find_dir("dslclamp").unwrap().unwrap();
        check_tree(&mut pw, root);
        for dir in [pw.mos_dir, pw.find_dir("dslclamp/a").unwrap().unwrap()] {
            let held = pw.dir_phys(dir).unwrap().used_bytes as i64;
            assert!(held > 0);
            let d = -(held + (1 << 20));
            pw.dir_transfer(dir, d, 0, 0, d, DD_USED_HEAD, DD_USED_HEAD).unwrap();
            assert_eq!(pw.dir_phys(dir).unwrap().used_bytes, 0);
            check_tree(&mut pw, root);
        }
        drop(pw);
        let _ = std::fs::remove_dir_all(tmp);
    }

    /// The write path's space figures are kept while the MOS stays the same, and the next
    /// check sees every change of what they are made of: a quota and a refquota set and
    /// removed, a new sibling's reservation, bytes charged to the dir at sync.
    #[test]
    fn space_checks_see_every_change_of_their_figures() {
        let (tmp, mut pw) = test_pool("dslfig");
        let a = pw.create_dataset("dslfig/a", &[], false).unwrap();
        pw.sync().unwrap();
        let dir = pw.find_dir("dslfig/a").unwrap().unwrap();
        let short = |pw: &mut PoolW, n: u64| pw.space_for(a, n).unwrap().map(|s| s.err.errno());
        const MIB: u64 = 1 << 20;
        assert_eq!(short(&mut pw, MIB), None);
        let gen = pw.mos.generation();
        assert_eq!(short(&mut pw, MIB), None);
        assert_eq!(pw.mos.generation(), gen, "a check changes nothing in the MOS");
        let used = pw.dir_phys(dir).unwrap().used_bytes;
        pw.set_space_prop(dir, "quota", used + MIB / 2).unwrap();
        assert_eq!(short(&mut pw, MIB), Some(libc::EDQUOT));
        pw.set_space_prop(dir, "quota", 0).unwrap();
        assert_eq!(short(&mut pw, MIB), None);
        let refd = pw.ds_phys(a).unwrap().referenced_bytes;
        pw.set_space_prop(dir, "refquota", refd + MIB / 2).unwrap();
        assert_eq!(short(&mut pw, MIB), Some(libc::EDQUOT));
        pw.set_space_prop(dir, "refquota", 0).unwrap();
        assert_eq!(short(&mut pw, MIB), None);
        // A sibling reserving all but 1 MiB of what `a` may write.
        let avail = pw.dataset_avail(a, false).unwrap();
        pw.create_dataset("dslfig/b", &[("reservation".into(), (avail - MIB).to_string())], false).unwrap();
        assert_eq!(short(&mut pw, 2 * MIB), Some(libc::ENOSPC));
        assert_eq!(short(&mut pw, MIB / 2), None);
        let b = pw.find_dir("dslfig/b").unwrap().unwrap();
        pw.set_space_prop(b, "reservation", 0).unwrap();
        assert_eq!(short(&mut pw, 2 * MIB), None);
        // 2 MiB written and charged at sync: a quota 3 MiB above the old use leaves 1 MiB.
        pw.sync().unwrap();
        let used = pw.dir_phys(dir).unwrap().used_bytes;
        pw.set_space_prop(dir, "quota", used + 3 * MIB).unwrap();
        assert_eq!(short(&mut pw, 2 * MIB), None);
        let os = pw.objset(a).unwrap();
        let obj = os.alloc_object(oxzfs_format::types::DMU_OT_PLAIN_FILE_CONTENTS, 128 << 10, 0, 0, 1).unwrap();
        os.write(obj, 0, &super::noise(7, 2 * MIB as usize)).unwrap();
        pw.sync().unwrap();
        assert!(pw.dir_phys(dir).unwrap().used_bytes >= used + 2 * MIB);
        assert_eq!(short(&mut pw, 2 * MIB), Some(libc::EDQUOT));
        drop(pw);
        let _ = std::fs::remove_dir_all(tmp);
    }

    /// $MOS's used bytes are charged a txg late; export syncs until the last change is
    /// charged, so the pool imported again finds them equal to the MOS's blocks.
    #[test]
    fn export_charges_the_mos_its_last_change() {
        let (tmp, mut pw) = test_pool("dslmos");
        // Until a sync leaves a change of the MOS still to charge.
        let mut pending = false;
        for i in 0..20 {
            pw.create_dataset(&format!("dslmos/d{i}"), &[("reservation".into(), "4M".into())], false).unwrap();
            if pw.mos_delta.dsize != 0 {
                pending = true;
                break;
            }
        }
        assert!(pending, "no sync left a change of the MOS to charge");
        pw.export().unwrap();
        let scan = crate::spa::scan(&[tmp.clone()]);
        let mut pw = PoolW::open(crate::spa::choose(&scan, "dslmos").unwrap(), 64 << 20, "test").unwrap();
        let root_vdev = pw.spa.root_vdev.clone();
        let rootbp = pw.spa.mos.lock().unwrap().as_ref().map(|(bp, _)| bp.clone()).unwrap();
        let mut bps = Vec::new();
        crate::dsl_dataset::collect_objset_bps(&pw.spa, &rootbp, 0, &mut bps).unwrap();
        let blocks: u64 = bps.iter().map(|b| crate::metaslab::dsize_of(&root_vdev, b)).sum();
        let mos_dir = pw.mos_dir;
        assert_eq!(pw.dir_phys(mos_dir).unwrap().used_bytes, blocks);
        let root = pw.find_dir("dslmos").unwrap().unwrap();
        check_tree(&mut pw, root);
        drop(pw);
        let _ = std::fs::remove_dir_all(tmp);
    }
}

/// Changes made in the open txg while the last one syncs (the sync thread writes the
/// datasets without the lock) land whole on disk, whatever the sync made of the txg before.
mod overlap_tests {
    use super::test_pool;
    use crate::zpl::{ZplRead, Zfs};
    use crate::zplw;

    /// A file truncated to nothing and then written with zeros far out syncs as holes; a
    /// write past those zeros in the next txg, made while that sync runs, must still be read
    /// back once synced (the dnode's maxblkid then covered only block 0, and the block, on
    /// disk and checksummed, read as zeros).
    #[test]
    fn a_write_during_the_sync_of_zeros_after_a_truncation_stays() {
        let (dir, mut pw) = test_pool("ovlzero");
        let ds = pw.find_dataset("ovlzero").unwrap().expect("the root dataset");
        let rs = 128 << 10;
        let os = pw.objset(ds).unwrap();
        let fs = zplw::open_fs(os, rs).unwrap();
        let f = zplw::create(os, fs.root, b"f", zplw::S_IFREG | 0o644, 0, 0, 0, None, 5).unwrap();
        zplw::write(os, f, 180_705, &super::noise(7, 3 << 20), rs).unwrap();
        pw.sync().unwrap();
        let os = pw.objset(ds).unwrap();
        zplw::setattr(os, f, &zplw::SetAttr { size: Some(0), ..Default::default() }, rs).unwrap();
        zplw::write(os, f, 0, &vec![0u8; 300_000], rs).unwrap();
        zplw::write(os, f, 323_710, &vec![0u8; 2 << 20], rs).unwrap();
        let tail = b"edehaaagfbdhheade";
        pw.sync_overlapped(|pw| {
            let os = pw.objset(ds)?;
            zplw::write(os, f, 2_421_089, tail, rs).map(|_| ())
        })
        .unwrap();
        pw.sync().unwrap();
        let os = pw.objset(ds).unwrap();
        let synced = Zfs::open(crate::dmu::Objset::open_id(&os.spa, &os.bp, ds).unwrap()).unwrap();
        assert_eq!(synced.getattr(f).unwrap().size, 2_421_106);
        assert_eq!(synced.read(f, 2_421_089, 17).unwrap(), tail, "the write made during the sync");
        assert!(synced.read(f, 0, 2_421_089).unwrap().iter().all(|&b| b == 0));
        drop(pw);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Seeds a randomized test runs: `default`, or `nightly` in the nightly run
    /// (OXZFS_NIGHTLY=1, scripts/test.sh --nightly).
    fn seeds(default: u64, nightly: u64) -> u64 {
        if std::env::var("OXZFS_NIGHTLY").is_ok_and(|v| v == "1") { nightly } else { default }
    }

    /// The file system of dataset `ds` as last synced (read from its objset block on disk).
    fn synced(pw: &mut crate::dsl_pool::PoolW, ds: u64) -> std::sync::Arc<Zfs> {
        let os = pw.objset(ds).unwrap();
        Zfs::open(crate::dmu::Objset::open_id(&os.spa, &os.bp, ds).unwrap()).unwrap()
    }

    /// A sync of `pw` overlapped by 1-4 changes of the next txg on dataset `ds` (`change`,
    /// with its own random stream drawn from `rng`, on the test's `state`).
    fn sync_with_changes<S>(pw: &mut crate::dsl_pool::PoolW, ds: u64, rng: &mut Rng, state: &mut S, change: impl Fn(&mut crate::dbuf::ObjsetW, &mut Rng, &mut S)) {
        let n = 1 + rng.below(4);
        let mut r = Rng(rng.next() | 1);
        pw.sync_overlapped(|pw| {
            let os = pw.objset(ds)?;
            for _ in 0..n {
                change(os, &mut r, state);
            }
            Ok(())
        })
        .unwrap();
    }

    /// xorshift64: the random choices of the randomized tests here.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            if n == 0 { 0 } else { self.next() % n }
        }
        fn pick<T: Copy>(&mut self, v: &[T]) -> T {
            v[self.below(v.len() as u64) as usize]
        }
    }

    /// One random change of one of the files, applied to the file system and to the byte
    /// model: writes (zeros, text, noise) at the start, the end, inside or past the end;
    /// truncations down and up; holes punched.
    fn change(os: &mut crate::dbuf::ObjsetW, rng: &mut Rng, files: &[(u64, u64)], model: &mut [Vec<u8>], meanwhile: bool) {
        let i = if rng.below(2) == 0 { 1 } else { rng.below(files.len() as u64) as usize };
        let (obj, rs) = files[i];
        let m = &mut model[i];
        let size = m.len() as u64;
        match rng.below(10) {
            0..=5 => {
                let off = match rng.below(4) {
                    0 => 0,
                    1 => size,
                    2 => rng.below(size + 1),
                    _ => size + rng.below(300_000),
                };
                let n = rng.pick(&[1usize, 17, 512, 4096, 131_072, 300_000]);
                // (The second file is written mostly with zeros, synced as holes, except
                // by the changes made during a sync: those land in a tree of holes.)
                let kind = if i == 1 && !meanwhile { rng.below(8).saturating_sub(5) } else { rng.below(3) };
                let data = match kind {
                    0 => vec![0u8; n],
                    1 => b"abcdefgh".iter().cycle().take(n).copied().collect(),
                    _ => super::noise(rng.next() | 1, n),
                };
                zplw::write(os, obj, off, &data, rs).unwrap();
                let end = off as usize + n;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
            6..=8 => {
                let new = rng.pick(&[0, 0, size / 2, size + 1, size + 100_000, size.saturating_sub(1)]);
                zplw::setattr(os, obj, &zplw::SetAttr { size: Some(new), ..Default::default() }, rs).unwrap();
                m.resize(new as usize, 0);
            }
            _ => {
                let off = rng.below(size + 1);
                let len = rng.below(size - off + 1);
                zplw::fallocate(os, obj, off, len, 0x03, rs).unwrap();
                m[off as usize..(off + len) as usize].fill(0);
            }
        }
    }

    /// Random writes, truncations and punched holes on files of 128 KiB and 4 KiB records,
    /// with syncs between them, many of them overlapped by changes made in the next txg while
    /// the datasets are written (as writers go on while the sync thread writes without the
    /// lock): after every sync, the synced tree holds what the model held at its quiesce.
    #[test]
    fn random_changes_across_overlapping_syncs() {
        let (dir, mut pw) = test_pool("ovlrand");
        let ds = pw.find_dataset("ovlrand").unwrap().expect("the root dataset");
        for seed in 1..=seeds(16, 256) {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let os = pw.objset(ds).unwrap();
            let fs = zplw::open_fs(os, 128 << 10).unwrap();
            let mut files = Vec::new();
            for (k, rs) in [(0, 128u64 << 10), (1, 128 << 10), (2, 4096)] {
                let name = format!("s{seed}f{k}");
                files.push((zplw::create(os, fs.root, name.as_bytes(), zplw::S_IFREG | 0o644, 0, 0, 0, None, 5).unwrap(), rs));
            }
            let mut model = vec![Vec::new(); files.len()];
            // After each sync, the synced tree holds what the model held at its quiesce.
            let check = |pw: &mut crate::dsl_pool::PoolW, model: &[Vec<u8>], op: usize| {
                let synced = synced(pw, ds);
                for (k, ((obj, _), m)) in files.iter().zip(model).enumerate() {
                    assert_eq!(synced.getattr(*obj).unwrap().size, m.len() as u64, "seed {seed} op {op} file {k}: size");
                    let got = synced.read(*obj, 0, m.len() as u64).unwrap();
                    let first = got.iter().zip(m.iter()).position(|(a, b)| a != b);
                    assert!(first.is_none(), "seed {seed} op {op} file {k} ({} bytes): first difference at {first:?}", m.len());
                }
            };
            for op in 0..120 {
                let os = pw.objset(ds).unwrap();
                change(os, &mut rng, &files, &mut model, false);
                match rng.below(8) {
                    0 | 1 => {
                        let quiesced = model.clone();
                        sync_with_changes(&mut pw, ds, &mut rng, &mut model, |os, r, m| change(os, r, &files, m, true));
                        check(&mut pw, &quiesced, op);
                    }
                    2 => {
                        pw.sync().unwrap();
                        check(&mut pw, &model, op);
                    }
                    _ => {}
                }
            }
            pw.sync().unwrap();
            check(&mut pw, &model, 120);
        }
        drop(pw);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// One random change of the tree (files and directories made, written, truncated, linked,
    /// renamed and removed, xattrs set) under the directories of `dirs`, with a few names so
    /// that changes meet each other; refusals (EEXIST, ENOENT, ENOTEMPTY, ...) are part of it.
    fn tree_change(os: &mut crate::dbuf::ObjsetW, fs: &zplw::FsInfo, rng: &mut Rng, dirs: &mut Vec<u64>) {
        use crate::zpl::{Live, ZplRead};
        const NAMES: [&[u8]; 5] = [b"a", b"b", b"c", b"dir", b"long-name-of-a-file"];
        let dir = dirs[rng.below(dirs.len() as u64) as usize];
        let name = rng.pick(&NAMES);
        let target = Live(os).dir_value(dir, name).ok().flatten();
        let rs = 128 << 10;
        let _ = match rng.below(12) {
            0 | 1 => zplw::create(os, dir, name, zplw::S_IFREG | 0o644, 0, 0, 0, None, 5).map(|_| ()),
            2 => zplw::create(os, dir, name, zplw::S_IFDIR | 0o755, 0, 0, 0, None, 5).map(|d| dirs.push(d)),
            3..=5 => match target {
                Some(obj) => {
                    let off = rng.pick(&[0u64, 4096, 131_072, 200_000]);
                    let n = rng.pick(&[1usize, 5000, 131_072, 300_000]);
                    let data = if rng.below(2) == 0 { vec![0u8; n] } else { super::noise(rng.next() | 1, n) };
                    zplw::write(os, obj, off, &data, rs).map(|_| ())
                }
                None => Ok(()),
            },
            6 => match target {
                Some(obj) => zplw::setattr(os, obj, &zplw::SetAttr { size: Some(rng.pick(&[0u64, 1000, 140_000])), ..Default::default() }, rs).map(|_| ()),
                None => Ok(()),
            },
            7 => zplw::unlink(os, fs, dir, name, &|_| false),
            8 => zplw::rmdir(os, fs, dir, name),
            9 => {
                let ddir = dirs[rng.below(dirs.len() as u64) as usize];
                zplw::rename(os, fs, dir, name, ddir, rng.pick(&NAMES), 0, &|_| false)
            }
            10 => match target {
                Some(obj) => zplw::link(os, obj, dirs[rng.below(dirs.len() as u64) as usize], rng.pick(&NAMES)).map(|_| ()),
                None => Ok(()),
            },
            _ => match target {
                Some(obj) => {
                    let v = super::noise(rng.next() | 1, rng.pick(&[10usize, 300, 5000]));
                    zplw::setxattr(os, obj, rng.pick(&[b"user.x".as_slice(), b"user.long"]), &v, 0, 5)
                }
                None => Ok(()),
            },
        };
    }

    /// Random changes of a tree, with syncs between them, most of them overlapped by changes
    /// of the next txg: after every sync, the synced tree reads exactly as the live one read
    /// at the quiesce (every path's attributes, bytes, xattrs and directory entries).
    #[test]
    fn random_tree_changes_across_overlapping_syncs() {
        use super::zpl_read_tests::walk;
        use crate::zpl::Live;
        let (dir, mut pw) = test_pool("ovltree");
        let ds = pw.find_dataset("ovltree").unwrap().expect("the root dataset");
        for seed in 1..=seeds(8, 128) {
            let mut rng = Rng(seed.wrapping_mul(0xd129_0d5e_37b1_4a65) | 1);
            let os = pw.objset(ds).unwrap();
            let fs = zplw::open_fs(os, 128 << 10).unwrap();
            let top = zplw::create(os, fs.root, format!("t{seed}").as_bytes(), zplw::S_IFDIR | 0o755, 0, 0, 0, None, 5).unwrap();
            let mut dirs = vec![top];
            let check = |pw: &mut crate::dsl_pool::PoolW, want: &[String], op: usize| {
                let got = walk(&*synced(pw, ds), false);
                if got != want {
                    let first = got.iter().zip(want).find(|(g, w)| g != w).map(|(g, w)| (g.chars().take(300).collect::<String>(), w.chars().take(300).collect::<String>()));
                    panic!("seed {seed} op {op}: the synced tree ({} paths) differs from the live one at the quiesce ({} paths); first difference: {first:?}", got.len(), want.len());
                }
            };
            for op in 0..80 {
                let os = pw.objset(ds).unwrap();
                tree_change(os, &fs, &mut rng, &mut dirs);
                match rng.below(4) {
                    0 => {
                        let want = walk(&Live(pw.objset(ds).unwrap()), false);
                        sync_with_changes(&mut pw, ds, &mut rng, &mut dirs, |os, r, d| tree_change(os, &fs, r, d));
                        check(&mut pw, &want, op);
                    }
                    1 => {
                        let want = walk(&Live(pw.objset(ds).unwrap()), false);
                        pw.sync().unwrap();
                        check(&mut pw, &want, op);
                    }
                    _ => {}
                }
            }
        }
        drop(pw);
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A damaged space map refuses the read-write import (spa_load.rs, metaslab.rs).
mod damaged_space_map_tests {
    use super::test_pool;
    use crate::dsl_pool::PoolW;
    use crate::ZfsError;

    /// One sector allocated again in a space map (checksums right): the read-write import is
    /// refused naming the metaslab and its space map, and writes nothing. A MOS object that is
    /// no space map is refused as one.
    #[test]
    fn a_damaged_space_map_refuses_the_import_and_writes_nothing() {
        let (dir, mut pw) = test_pool("smdmg");
        pw.export().unwrap();
        drop(pw);
        let open = || PoolW::open(crate::spa::choose(&crate::spa::scan(&[dir.clone()]), "smdmg").unwrap(), 64 << 20, "test");
        let mut pw = open().unwrap();
        pw.fs_init = crate::zplw::init_fs;
        let err = pw.read_space_map(1, &|e| ZfsError::Invalid(e)).unwrap_err();
        assert!(err.to_string().contains("not a space map"), "{err}");
        let what = pw.damage_space_map_for_test().unwrap();
        pw.export().unwrap();
        drop(pw);
        let bytes = std::fs::read(dir.join("d0")).unwrap();
        let err = open().err().expect("the import is refused").to_string();
        let where_ = what.split(':').next().unwrap();
        assert!(err.starts_with(&format!("cannot import 'smdmg' read-write: {where_}: allocation ")) && err.contains("allocates space that is not free"), "{err}");
        assert!(std::fs::read(dir.join("d0")).unwrap() == bytes, "the refused import wrote to the device");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
