//! oxzfs: the engine, in OpenZFS's layers (lowest last; docs/ARCHITECTURE.md has the picture,
//! scripts/check-layers.py holds the order and fails on an import up it or a circle):
//!
//! ```text
//!   pool      pool (read-only import handle: lists, status, properties), traverse (zdb's
//!             walk, and the scan's), dsl_scrub (the scrub: its thread, start, pause, cancel)
//!   zpl       zpl (read-only file system), zplw (vnode operations), zfs_znode (shared rules)
//!   spa       txg (states, sync, throttle, PoolHandle), spa_load (import), spa_create,
//!             spa_props, spa_label, spa_feature, spa_config (cache file)
//!   dsl       dsl_pool (the write state PoolW), dsl, dsl_dataset, dsl_prop, dsl_space,
//!             deadlist, dsl_snapshot, dsl_rename
//!   dmu       dmu (Objset), zap, dbuf (ObjsetW and its sync), ddt
//!   spa       spa (the Spa handle: vdev tree, ARC, block reads), dsl_scan (scan state)
//!   arc       arc
//!   metaslab  metaslab (allocation, space maps)
//!   zio       zio (compress, checksum, gang, embedded, ditto; verify and retry)
//!   vdev      vdev, vdev::raidz, vdev::sim
//! ```
//!
//! `tunables` (base) holds the knobs under OpenZFS's module parameter names; `range_tree` (base)
//! the set of disjoint ranges the allocator's free space and the log space map replay keep.
//!
//! The bytes↔structure work lives in `oxzfs-format`; nothing here parses raw bytes by hand.

pub mod error;
pub mod nicenum;
pub mod range_tree;
pub mod tunables;
pub mod vdev;
pub mod zio;
pub mod metaslab;
pub mod arc;
pub mod l2arc;
pub mod spa;
pub mod spa_keystore;
pub mod dsl_scan;
pub mod spa_errlog;
pub mod dsl_scan_queue;
pub mod dsl_scan_walk;
pub mod zil;
pub mod dmu;
pub mod zap;
pub mod dbuf;
pub mod dmu_userused;
pub mod ddt;
pub mod dsl;
pub mod dsl_crypt;
pub mod dsl_pool;
pub mod dsl_prop;
pub mod dsl_space;
pub mod deadlist;
pub mod dsl_snapshot;
pub mod dsl_dataset;
pub mod dsl_rename;
pub mod dsl_promote;
pub mod dsl_userhold;
pub mod dsl_bookmark;
pub mod dmu_send;
pub mod spa_feature;
pub mod spa_label;
pub mod spa_props;
pub mod spa_create;
pub mod spa_load;
pub mod spa_log_spacemap;
pub mod txg;
pub mod spa_config;
pub mod dmu_recv;
pub mod vdev_indirect;
pub mod vdev_removal;
pub mod vdev_dtl;
pub mod vdev_probe;
pub mod vdev_attach;
pub mod vdev_rebuild;
pub mod zfs_znode;
pub mod zfs_pflags;
pub mod zfs_posix_acl;
pub mod zfs_quota;
pub mod zfs_diff;
pub mod zpl;
pub mod zplw;
pub mod zfs_log;
pub mod zfs_replay;
pub mod traverse;
pub mod dsl_scrub;
pub mod vdev_removal_thread;
pub mod vdev_rebuild_thread;
pub mod vdev_trim;
pub mod pool;
#[cfg(test)]
mod pool_tests;

pub use error::{ZfsError, Result};
