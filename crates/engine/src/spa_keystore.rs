//! spa_keystore: the keys of encrypted datasets loaded now, and the decryption of their blocks
//! on the way from the vdevs to the ARC (OpenZFS's spa_keystore and the crypt step of its
//! read zio).
//!
//! `zfs load-key` (dsl_crypt) unwraps each DSL directory's master key under its encryption
//! root's wrapping key and registers it here for the directory and its datasets; a read of an
//! encrypted block of dataset `ds` (`Spa::read_bp_for`) finds the key here, derives the block's
//! key from the salt in the bp (cached per salt), checks the MAC and decrypts. Without a key, a
//! dnode block is read as it is stored (the cores, and so the block pointers, are plaintext:
//! traversal, scrub and zdb need no key) and every other encrypted block is refused with EACCES.
//! The ARC holds decrypted blocks only: a block read without its key is never cached, and a
//! read first asks for the key, so an unloaded key is not answered from the cache.

use crate::{Result, ZfsError};
use oxzfs_format::blkptr::BlockPointer;
use oxzfs_format::crypt::{self, MasterKey, SALT_LEN};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// A DSL directory's unwrapped keys and the block keys derived from them so far.
pub struct DirKey {
    pub dir_obj: u64,
    pub key: MasterKey,
    derived: Mutex<HashMap<[u8; SALT_LEN], Arc<crypt::Zeroizing<Vec<u8>>>>>,
}

/// How many derived block keys a directory keeps (a salt lasts for many blocks: OpenZFS
/// rotates it every ZFS_CURRENT_MAX_SALT_USES encryptions).
const DERIVED_MAX: usize = 256;

impl DirKey {
    pub fn new(dir_obj: u64, key: MasterKey) -> DirKey {
        DirKey { dir_obj, key, derived: Mutex::new(HashMap::new()) }
    }

    fn block_key(&self, salt: &[u8; SALT_LEN]) -> Arc<crypt::Zeroizing<Vec<u8>>> {
        let mut d = self.derived.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = d.get(salt) {
            return k.clone();
        }
        if d.len() >= DERIVED_MAX {
            d.clear();
        }
        let k = Arc::new(self.key.block_key(salt));
        d.insert(*salt, k.clone());
        k
    }
}

/// The loaded keys: by DSL directory, and by dataset (heads and snapshots of those directories).
#[derive(Default)]
pub struct Keystore {
    dirs: RwLock<HashMap<u64, Arc<DirKey>>>,
    datasets: RwLock<HashMap<u64, Arc<DirKey>>>,
    /// Whether any key is loaded: asked by every read of file data, lock-free.
    any: std::sync::atomic::AtomicBool,
}

impl Keystore {
    /// Register `key` for directory `dir` and its datasets `ds`.
    pub fn add(&self, key: Arc<DirKey>, ds: &[u64]) {
        let mut m = self.datasets.write().unwrap_or_else(|p| p.into_inner());
        for d in ds {
            m.insert(*d, key.clone());
        }
        self.dirs.write().unwrap_or_else(|p| p.into_inner()).insert(key.dir_obj, key);
        self.any.store(true, std::sync::atomic::Ordering::Release);
    }

    /// A dataset of a directory whose key is loaded (a snapshot made since): registered too.
    pub fn add_dataset(&self, dir: u64, ds: u64) -> bool {
        let Some(k) = self.dir(dir) else { return false };
        self.datasets.write().unwrap_or_else(|p| p.into_inner()).insert(ds, k);
        true
    }

    /// Forget the keys of directories `dirs` and every dataset of theirs.
    pub fn remove(&self, dirs: &[u64]) {
        let mut d = self.dirs.write().unwrap_or_else(|p| p.into_inner());
        d.retain(|d, _| !dirs.contains(d));
        self.datasets.write().unwrap_or_else(|p| p.into_inner()).retain(|_, k| !dirs.contains(&k.dir_obj));
        self.any.store(!d.is_empty(), std::sync::atomic::Ordering::Release);
    }

    pub fn dir(&self, dir: u64) -> Option<Arc<DirKey>> {
        self.dirs.read().unwrap_or_else(|p| p.into_inner()).get(&dir).cloned()
    }

    pub fn dataset(&self, ds: u64) -> Option<Arc<DirKey>> {
        if !self.any.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.datasets.read().unwrap_or_else(|p| p.into_inner()).get(&ds).cloned()
    }

    pub fn is_empty(&self) -> bool {
        !self.any.load(std::sync::atomic::Ordering::Acquire)
    }
}

pub use oxzfs_format::crypt::bp_params;

/// The plaintext physical bytes of encrypted block `bp` (its ciphertext `physical`, whose
/// checksum was verified), by `key`. A MAC that does not match is a checksum error: the
/// block is damaged (its checksum only covers the ciphertext), or the key is not the one it
/// was written with.
pub fn decrypt(key: &DirKey, bp: &BlockPointer, physical: Vec<u8>) -> Result<Vec<u8>> {
    let (salt, iv, mut mac) = bp_params(bp);
    if bp.typ == oxzfs_format::types::DMU_OT_INTENT_LOG {
        // A log block's checksum is embedded (the bp's is the chain's verifier): its MAC is
        // the upper half of the embedded one, bytes 168..184 as written.
        let Some(m) = physical.get(168..184) else {
            return Err(ZfsError::Invalid(format!("encrypted log block of {} bytes ({bp})", physical.len())));
        };
        mac.copy_from_slice(m);
    }
    let bkey = key.block_key(&salt);
    let out = match bp.typ {
        oxzfs_format::types::DMU_OT_DNODE => crypt::open_dnode_block(&key.key, &bkey, &iv, &mac, physical, bp.little_endian),
        oxzfs_format::types::DMU_OT_INTENT_LOG => crypt::open_zil_block(&key.key, &bkey, &iv, &mac, physical, bp.little_endian),
        _ => {
            let mut buf = physical;
            key.key.open(&bkey, &iv, &[], &mut buf, &mac).map(|_| buf).map_err(|_| oxzfs_format::FormatError::Checksum { what: "encrypted block MAC" })
        }
    };
    out.map_err(|e| match e {
        oxzfs_format::FormatError::Checksum { .. } => ZfsError::Checksum { context: format!("MAC of encrypted block {bp} (dataset key of DSL directory {})", key.dir_obj) },
        e => ZfsError::corrupt(format!("encrypted block {bp}"), e),
    })
}

/// Check an encrypted dataset's indirect block against the MAC its pointer carries (no key
/// needed: what OpenZFS checks on every read of one). Key version 1's auth buffers first, then
/// version 0's, as OpenZFS tries them.
pub fn verify_indirect(bp: &BlockPointer, logical: &[u8]) -> Result<()> {
    let (_, _, mac) = bp_params(bp);
    for version in [1, 0] {
        let got = crypt::indirect_mac(logical, bp.little_endian, version).map_err(|e| ZfsError::corrupt(format!("indirect block {bp}"), e))?;
        if got == mac {
            return Ok(());
        }
    }
    Err(ZfsError::Checksum { context: format!("MAC of the block pointers of indirect block {bp}") })
}
