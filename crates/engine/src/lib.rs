//! oxzfs: the engine. OpenZFS's layers, each talking only to the one below it:
//!
//! ```text
//!   pool      the handle the daemon and CLI hold: import, datasets, properties, status
//!   zpl       files, directories, symlinks, xattrs on znodes (SA or legacy znode_phys)
//!   dsl       datasets, snapshots, properties, the dataset directory tree
//!   zap       name→value objects read through the dmu (micro and fat)
//!   dmu       objsets and dnodes: object data through the indirect block tree
//!   arc       adaptive replacement cache of logical blocks, byte-limited
//!   zio       block pointer → bytes: gang, embedded, decompress, checksum verify, ditto retry
//!   spa       the pool: config, vdev tree, uberblock, MOS, features (spa_config: the cache file)
//!   vdev      leaves (files, block devices), mirror, raidz: reconstruction and error counters
//! ```
//!
//! The bytes↔structure work lives in `oxzfs-format`; nothing here parses raw bytes by hand.

pub mod error;
pub mod nicenum;
pub mod vdev;
pub mod zio;
pub mod arc;
pub mod spa;
pub mod spa_load;
pub mod spa_config;
pub mod dmu;
pub mod zap;
pub mod dsl;
pub mod dsl_space;
pub mod dsl_rename;
pub mod zfs_znode;
pub mod zpl;
pub mod traverse;
pub mod pool;
pub mod metaslab;
pub mod dbuf;
pub mod ddt;
pub mod dsl_pool;
pub mod dsl_dataset;
pub mod dsl_prop;
pub mod spa_feature;
pub mod spa_create;
pub mod spa_label;
pub mod spa_props;
pub mod txg;
pub mod deadlist;
pub mod dsl_snapshot;
pub mod zplw;

pub use error::{ZfsError, Result};
