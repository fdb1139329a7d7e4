//! dsl_crypt: the DSL side of native encryption (OpenZFS's dsl_crypt.c): where a dataset's
//! wrapped keys live, its encryption root, `zfs load-key` and `zfs unload-key`, and the
//! properties that show them.
//!
//! ```text
//!   DSL directory (a ZAP once it has extra fields)
//!     └ "com.datto:crypto_key_obj" → DSL crypto key (a ZAP in the MOS):
//!         DSL_CRYPTO_SUITE, _GUID, _VERSION, _IV, _MAC, _MASTER_KEY_1, _HMAC_KEY_1 (the wrapped
//!         keys), DSL_CRYPTO_ROOT_DDOBJ (the encryption root's directory), and, on the root,
//!         keyformat, pbkdf2salt, pbkdf2iters; keylocation is a property of the root.
//! ```
//!
//! Every encrypted directory has its own key object, wrapped under its encryption root's
//! wrapping key: loading the root's key unwraps the master key of each directory under it
//! (clones keep their origin's master key in their own object) and registers them in the
//! pool's keystore (`spa_keystore`), whose reads then decrypt. oxzfs reads encrypted datasets;
//! it does not write them (their file systems mount read-only).

use crate::dmu::Objset;
use crate::dsl::DatasetInfo;
use crate::spa::Spa;
use crate::spa_keystore::DirKey;
use crate::{Result, ZfsError};
use oxzfs_format::crypt::{self, KeyFormat, Suite, WrappedKey};
use std::sync::Arc;

/// DD_FIELD_CRYPTO_KEY_OBJ: the directory's DSL crypto key object.
pub const DD_FIELD_CRYPTO_KEY_OBJ: &str = "com.datto:crypto_key_obj";

/// A DSL crypto key object as stored.
#[derive(Clone, Debug)]
pub struct CryptoKey {
    pub obj: u64,
    /// DSL_CRYPTO_ROOT_DDOBJ: the encryption root's directory.
    pub root_dir: u64,
    pub wrapped: WrappedKey,
    /// keyformat, pbkdf2salt, pbkdf2iters (set on the encryption root's object).
    pub keyformat: u64,
    pub salt: u64,
    pub iters: u64,
}

impl CryptoKey {
    pub fn suite(&self) -> Option<Suite> {
        Suite::from_u64(self.wrapped.suite)
    }
}

/// The crypto key object of directory `dir`, if it has one (an encrypted dataset's).
pub fn key_obj(mos: &Objset, dir: u64) -> Result<Option<u64>> {
    let dn = mos.dnode(dir)?;
    // A directory with no extra fields is a plain DSL_DIR object, not a ZAP.
    if dn.typ == oxzfs_format::types::DMU_OT_DSL_DIR {
        return Ok(None);
    }
    crate::zap::zap_lookup_u64(mos, dir, DD_FIELD_CRYPTO_KEY_OBJ)
}

/// Read DSL crypto key object `obj`.
pub fn read_key(mos: &Objset, obj: u64) -> Result<CryptoKey> {
    let mut k = CryptoKey { obj, root_dir: 0, wrapped: WrappedKey::default(), keyformat: 0, salt: 0, iters: 0 };
    let mut seen_suite = false;
    for e in crate::zap::zap_list(mos, obj)? {
        let num = || e.value_u64().unwrap_or(0);
        match e.name_key().as_slice() {
            b"DSL_CRYPTO_SUITE" => {
                k.wrapped.suite = num();
                seen_suite = true;
            }
            b"DSL_CRYPTO_GUID" => k.wrapped.guid = num(),
            b"DSL_CRYPTO_VERSION" => k.wrapped.version = num(),
            b"DSL_CRYPTO_ROOT_DDOBJ" => k.root_dir = num(),
            b"DSL_CRYPTO_IV" => k.wrapped.iv = e.value.clone(),
            b"DSL_CRYPTO_MAC" => k.wrapped.mac = e.value.clone(),
            b"DSL_CRYPTO_MASTER_KEY_1" => k.wrapped.master = e.value.clone(),
            b"DSL_CRYPTO_HMAC_KEY_1" => k.wrapped.hmac = e.value.clone(),
            b"keyformat" => k.keyformat = num(),
            b"pbkdf2salt" => k.salt = num(),
            b"pbkdf2iters" => k.iters = num(),
            _ => {}
        }
    }
    if !seen_suite || k.root_dir == 0 {
        return Err(ZfsError::Invalid(format!("DSL crypto key object {obj}: no suite or encryption root")));
    }
    Ok(k)
}

/// The crypto key of dataset `info`'s directory, if it is encrypted.
pub fn key_of(spa: &Arc<Spa>, info: &DatasetInfo) -> Result<Option<CryptoKey>> {
    let mos = spa.mos();
    match key_obj(&mos, info.dir_obj)? {
        Some(obj) => read_key(&mos, obj).map(Some),
        None => Ok(None),
    }
}

/// The name of the file system of DSL directory `dir`.
fn dir_name(spa: &Arc<Spa>, dir: u64) -> Result<Option<String>> {
    Ok(crate::dsl::list_datasets(spa)?.into_iter().find(|d| d.dir_obj == dir && d.kind != crate::dsl::DatasetKind::Snapshot).map(|d| d.name))
}

/// The encryption root of `name`: (its name, its crypto key), or None when not encrypted.
pub fn encryption_root(spa: &Arc<Spa>, name: &str) -> Result<Option<(String, CryptoKey)>> {
    let info = crate::dsl::find_dataset(spa, name)?;
    let Some(key) = key_of(spa, &info)? else { return Ok(None) };
    if key.root_dir == info.dir_obj {
        return Ok(Some((name.split('@').next().unwrap_or(name).to_string(), key)));
    }
    let root = dir_name(spa, key.root_dir)?.ok_or_else(|| ZfsError::Invalid(format!("'{name}': its encryption root (DSL directory {}) is not in the pool", key.root_dir)))?;
    let rk = key_of(spa, &crate::dsl::find_dataset(spa, &root)?)?.ok_or_else(|| ZfsError::Invalid(format!("'{root}': encryption root without a key object")))?;
    Ok(Some((root, rk)))
}

/// `zfs load-key`'s errors, in libzfs's words.
fn key_error(msg: String) -> ZfsError {
    ZfsError::Posix(libc::EACCES, format!("Key load error: {msg}"))
}

/// Whether the key of `name`'s encryption root is loaded (keystatus=available).
pub fn key_loaded(spa: &Arc<Spa>, info: &DatasetInfo) -> bool {
    spa.keystore.dir(info.dir_obj).is_some()
}

/// Make sure dataset `info` (a snapshot made since its key was loaded, say) is in the
/// keystore when its directory's key is: true when its blocks can be read.
pub fn register(spa: &Arc<Spa>, info: &DatasetInfo) -> bool {
    spa.keystore.dataset(info.ds_obj).is_some() || spa.keystore.add_dataset(info.dir_obj, info.ds_obj)
}

/// Check the MACs of encrypted dataset `ds`'s objset block `bp` with its loaded key, as
/// OpenZFS checks them when it opens the dataset to decrypt: the portable MAC anchors the
/// tree of MACs below (the meta dnode's pointers); the local one covers user accounting when
/// it is kept. Ok(false) when the dataset's key is not loaded.
pub fn verify_objset(spa: &Arc<Spa>, ds: u64, bp: &oxzfs_format::blkptr::BlockPointer) -> Result<bool> {
    let Some(key) = spa.keystore.dataset(ds) else { return Ok(false) };
    let block = spa.read_bp(bp)?;
    let (portable, local) = crypt::objset_macs(&key.key, &block, bp.little_endian).map_err(|e| ZfsError::corrupt(format!("objset of dataset {ds}"), e))?;
    let stored = |o: usize| block.get(o..o + 32).map(|s| s.to_vec()).unwrap_or_default();
    if stored(720) != portable || (local != [0u8; 32] && stored(752) != local) {
        return Err(ZfsError::Checksum { context: format!("pool '{}' dataset {ds}: objset MAC does not match ({bp})", spa.name) });
    }
    Ok(true)
}

/// `zfs load-key` of encryption root `name` with the user's key `material`; `noop`: check
/// the key only (-n). Returns the datasets whose keys became available.
pub fn load_key(spa: &Arc<Spa>, name: &str, material: &[u8], noop: bool) -> Result<Vec<String>> {
    let Some((_, rkey)) = encryption_root(spa, name)? else {
        return Err(key_error(format!("'{name}' is not encrypted.")));
    };
    let format = KeyFormat::from_u64(rkey.keyformat).ok_or_else(|| key_error(format!("'{name}': keyformat {} is not known.", rkey.keyformat)))?;
    let wkey = crypt::wrapping_key(format, material, rkey.salt, rkey.iters).map_err(key_error)?;
    load_wrapping_key(spa, name, &wkey, noop)
}

/// `load_key` with the wrapping key derived already (the daemon derives it, PBKDF2's long
/// work, without holding its state). Every directory of the root is unwrapped before any is
/// registered: a key that fails leaves nothing loaded. A damaged key object of a directory
/// under another root is not this load's business.
pub fn load_wrapping_key(spa: &Arc<Spa>, name: &str, wkey: &[u8; crypt::WRAPPING_KEY_LEN], noop: bool) -> Result<Vec<String>> {
    let Some((root, rkey)) = encryption_root(spa, name)? else {
        return Err(key_error(format!("'{name}' is not encrypted.")));
    };
    if root != name {
        return Err(key_error(format!("Keys must be loaded for encryption root of '{name}' ({root}).")));
    }
    if spa.keystore.dir(rkey.root_dir).is_some() && !noop {
        return Err(key_error(format!("Key already loaded for '{name}'.")));
    }
    let mos = spa.mos();
    let all = crate::dsl::list_datasets(spa)?;
    let mut dirs: Vec<(u64, Vec<&DatasetInfo>)> = Vec::new();
    for d in &all {
        match dirs.iter_mut().find(|(dir, _)| *dir == d.dir_obj) {
            Some((_, v)) => v.push(d),
            None => dirs.push((d.dir_obj, vec![d])),
        }
    }
    let mut keys = Vec::new();
    for (dir, members) in dirs {
        let Some(obj) = key_obj(&mos, dir)? else { continue };
        let k = match read_key(&mos, obj) {
            Ok(k) => k,
            Err(e) if dir == rkey.root_dir => return Err(e),
            Err(_) => continue,
        };
        if k.root_dir != rkey.root_dir {
            continue;
        }
        let master = crypt::unwrap_key(&k.wrapped, wkey).map_err(|e| ZfsError::corrupt(format!("'{name}': DSL crypto key object {obj}"), e))?;
        let Some(master) = master else {
            if dir == rkey.root_dir {
                return Err(key_error(format!("Incorrect key provided for '{name}'.")));
            }
            return Err(ZfsError::Checksum { context: format!("'{}': its DSL crypto key (object {obj}) does not open with the key of '{name}'", members[0].name) });
        };
        keys.push((dir, master, members));
    }
    let mut loaded = Vec::new();
    if noop {
        return Ok(loaded);
    }
    for (dir, master, members) in keys {
        spa.keystore.add(Arc::new(DirKey::new(dir, master)), &members.iter().map(|m| m.ds_obj).collect::<Vec<_>>());
        loaded.extend(members.iter().filter(|m| m.kind != crate::dsl::DatasetKind::Snapshot).map(|m| m.name.clone()));
    }
    Ok(loaded)
}

/// `zfs unload-key` of encryption root `name`: the keys of every directory under it leave
/// the keystore. The caller has unmounted what uses them.
pub fn unload_key(spa: &Arc<Spa>, name: &str) -> Result<()> {
    let Some((root, rkey)) = encryption_root(spa, name)? else {
        return Err(ZfsError::Posix(libc::EACCES, format!("Key unload error: '{name}' is not encrypted.")));
    };
    if root != name {
        return Err(ZfsError::Posix(libc::EACCES, format!("Key unload error: Keys must be unloaded for encryption root of '{name}' ({root}).")));
    }
    if spa.keystore.dir(rkey.root_dir).is_none() {
        return Err(ZfsError::Posix(libc::EACCES, format!("Key unload error: Key already unloaded for '{name}'.")));
    }
    let mos = spa.mos();
    let mut dirs = Vec::new();
    for d in crate::dsl::list_datasets(spa)? {
        if dirs.contains(&d.dir_obj) {
            continue;
        }
        if let Some(obj) = key_obj(&mos, d.dir_obj)? {
            if read_key(&mos, obj)?.root_dir == rkey.root_dir {
                dirs.push(d.dir_obj);
            }
        }
    }
    spa.keystore.remove(&dirs);
    // The decrypted blocks leave memory with the key (the pool's cached blocks all go, as
    // zinject -a drops them: they are read again as needed).
    spa.arc.flush_spa(spa.arc_id);
    Ok(())
}

/// The encryption properties of an encrypted dataset `info`, in place of the defaults
/// `dsl::get_props` gave (encryption, keyformat, keylocation, pbkdf2iters), and the two
/// only encrypted datasets have (encryptionroot, keystatus), as `zfs get` shows them.
pub fn fill_props(spa: &Arc<Spa>, info: &DatasetInfo, props: &mut Vec<crate::dsl::PropValue>) {
    let Some(k) = key_of(spa, info).ok().flatten() else { return };
    let suite = k.suite().map(|s| s.name().to_string()).unwrap_or_else(|| format!("{}", k.wrapped.suite));
    let is_root = k.root_dir == info.dir_obj;
    let fmt = KeyFormat::from_u64(k.keyformat).map(|f| f.name()).unwrap_or("none").to_string();
    let status = if key_loaded(spa, info) { "available" } else { "unavailable" };
    let root_name = if is_root { info.name.split('@').next().unwrap_or(&info.name).to_string() } else { dir_name(spa, k.root_dir).ok().flatten().unwrap_or_default() };
    // Replaced where the kind of dataset has the property; the two of encrypted datasets only
    // are added.
    let set = |props: &mut Vec<crate::dsl::PropValue>, name: &str, value: String, source: &str, add: bool| {
        let v = crate::dsl::PropValue { name: name.into(), value: value.clone(), raw: value, source: source.into() };
        match props.iter_mut().find(|p| p.name == name) {
            Some(p) => *p = v,
            // After pbkdf2iters (or encryption), where OpenZFS's table has them.
            None if add => {
                let at = props.iter().rposition(|p| matches!(p.name.as_str(), "pbkdf2iters" | "encryption" | "encryptionroot")).map_or(props.len(), |i| i + 1);
                props.insert(at, v);
            }
            None => {}
        }
    };
    set(props, "encryption", suite, "-", false);
    set(props, "keyformat", fmt, "-", false);
    set(props, "pbkdf2iters", k.iters.to_string(), if k.iters == 0 { "default" } else { "-" }, false);
    if !is_root {
        set(props, "keylocation", "none".into(), "default", false);
    }
    set(props, "encryptionroot", root_name, "-", true);
    set(props, "keystatus", status.into(), "-", true);
}

/// The properties of a dataset being made (`zfs create -o`, `zpool create -O`) without
/// `encryption=off` (the default: nothing is stored for it); anything that would make it
/// encrypted is refused, as oxzfs reads encrypted datasets but makes none.
pub fn plain_create_props(name: &str, props: &[(String, String)]) -> Result<Vec<(String, String)>> {
    let plain: Vec<(String, String)> = props.iter().filter(|(k, v)| !(k == "encryption" && v == "off")).cloned().collect();
    if let Some((k, v)) = plain.iter().find(|(k, _)| matches!(k.as_str(), "encryption" | "keyformat" | "keylocation" | "pbkdf2iters")) {
        return Err(ZfsError::Posix(libc::EROFS, format!("cannot create '{name}': {k}={v}: encrypted datasets are read-only in oxzfs (it reads them, it does not make them)")));
    }
    Ok(plain)
}
