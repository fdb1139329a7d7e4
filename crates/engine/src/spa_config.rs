//! spa_config: the pool cache file (the `cachefile` pool property), as OpenZFS's spa_config.c
//! keeps /etc/zfs/zpool.cache.
//!
//! ```text
//!   cache file = one packed nvlist, native encoding (fnvlist_pack; little-endian here):
//!                { <pool name> → <pool config nvlist>, ... }
//!   pool config = spa_config_generate of the whole pool (what the MOS "config" object holds):
//!                 version, name, state (0 active), txg, pool_guid, errata, hostname,
//!                 vdev_children, vdev_tree (every leaf's path), features_for_read, ...
//! ```
//! `cachefile` is not stored in the pool: it lives with the imported pool (none = no file,
//! a path = that file; the default — OpenZFS's /etc/zfs/zpool.cache — writes no file in
//! oxzfs, so that a host's own kernel ZFS never reads our pools at boot). The file holds every
//! writable imported pool whose cachefile is that path; it is rewritten whole (truncate, write,
//! fsync) when a pool's config or cachefile changes, and removed when no pool is left in it.
//! `zpool import -c FILE` reads it back: the leaf paths of a pool's vdev tree are the devices
//! to open, without scanning directories.
//!
//! No locks of its own: the daemon calls it with its state held.

use crate::{Result, ZfsError};
use oxzfs_format::nvlist::{NvList, NvValue};
use std::path::Path;

/// Largest cache file read back (OpenZFS reads the whole file; configs are a few KiB a pool).
const MAX_CACHEFILE: u64 = 64 << 20;

/// libzfs's check of a `cachefile` value (zpool_valid_proplist): empty (the default), "none",
/// or an absolute path to a file in an existing directory. The error is libzfs's aux message.
pub fn validate(v: &str) -> std::result::Result<(), String> {
    if v.is_empty() || v == "none" {
        return Ok(());
    }
    if !v.starts_with('/') {
        return Err("property 'cachefile' must be empty, an absolute path, or 'none'".into());
    }
    let slash = v.rfind('/').unwrap_or(0);
    let (dir, last) = (&v[..slash], &v[slash..]);
    if last == "/" || last == "/." || last == "/.." {
        return Err(format!("'{v}' is not a valid file"));
    }
    if !dir.is_empty() && !Path::new(dir).is_dir() {
        return Err(format!("'{dir}' is not a valid directory"));
    }
    Ok(())
}

/// The in-memory value of a `cachefile` setting: None for the default (no file written),
/// Some("none") or Some(path).
pub fn setting(v: &str) -> Option<String> {
    if v.is_empty() {
        None
    } else {
        Some(v.to_string())
    }
}

/// The file a setting writes to, if any.
pub fn file_of(setting: Option<&str>) -> Option<&str> {
    setting.filter(|s| *s != "none")
}

/// spa_config_write: the pools' configs packed into `path` (replacing it), or the file
/// removed when `pools` is empty (a missing file is fine).
pub fn write(path: &Path, pools: &[(String, NvList)]) -> Result<()> {
    let io = |e: std::io::Error| ZfsError::Io { device: path.display().to_string(), offset: 0, source: e };
    if pools.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
            _ => Ok(()),
        };
    }
    let mut nvl = NvList::new();
    for (name, config) in pools {
        nvl.insert(name, NvValue::NvList(config.clone()));
    }
    let packed = nvl.encode_native();
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(path).map_err(io)?;
    let r = f.write_all(&packed).and_then(|_| f.sync_all());
    if let Err(e) = r {
        // As spa_config_write: a half-written cache file is worse than none.
        let _ = std::fs::remove_file(path);
        return Err(io(e));
    }
    Ok(())
}

/// Read a cache file: (pool name, config) for every pool in it.
pub fn read(path: &Path) -> Result<Vec<(String, NvList)>> {
    let io = |e: std::io::Error| ZfsError::Io { device: path.display().to_string(), offset: 0, source: e };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_CACHEFILE {
        return Err(ZfsError::Invalid(format!("cache file '{}' is {len} bytes, more than a cache file holds", path.display())));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let nvl = NvList::decode_packed(&bytes).map_err(|e| ZfsError::corrupt(format!("cache file '{}'", path.display()), e))?;
    Ok(nvl
        .pairs
        .into_iter()
        .filter_map(|(name, v)| match v {
            NvValue::NvList(c) => Some((name, c)),
            _ => None,
        })
        .collect())
}

/// Every leaf device path of a config's vdev tree (what `zpool import -c` opens).
pub fn leaf_paths(config: &NvList) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<&NvList> = config.get_nvlist("vdev_tree").into_iter().collect();
    for aux in ["spares", "l2cache"] {
        if let Some(a) = config.get_nvlist_array(aux) {
            stack.extend(a.iter());
        }
    }
    while let Some(v) = stack.pop() {
        match v.get_nvlist_array("children") {
            Some(kids) => stack.extend(kids.iter()),
            None => {
                if let Some(p) = v.get_str("path") {
                    out.push(p.to_string());
                }
            }
        }
    }
    out.sort();
    out
}

impl crate::txg::PoolHandle {
    /// The pool's config as a cache file holds it (spa->spa_config: the MOS config of the
    /// last synced txg, state active).
    pub fn cachefile_config(&self) -> NvList {
        let w = self.lock();
        let mut c = w.config();
        c.add_u64("state", 0);
        c.add_u64("txg", w.txg.saturating_sub(1));
        if c.get_nvlist("features_for_read").is_none() {
            // spa_config_generate always adds the label features, empty or not.
            c.add_nvlist("features_for_read", NvList::new());
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cachefile_values_are_checked_as_libzfs_does() {
        assert!(validate("").is_ok() && validate("none").is_ok() && validate("/tmp/x.cache").is_ok());
        assert!(validate("rel/path").unwrap_err().contains("absolute path"));
        for bad in ["/tmp/", "/tmp/.", "/tmp/.."] {
            assert!(validate(bad).unwrap_err().contains("is not a valid file"), "{bad}");
        }
        assert!(validate("/no/such/dir/x").unwrap_err().contains("'/no/such/dir' is not a valid directory"));
        assert_eq!(file_of(setting("none").as_deref()), None);
        assert_eq!(file_of(setting("").as_deref()), None);
        assert_eq!(file_of(setting("/a/b").as_deref()), Some("/a/b"));
    }

    #[test]
    fn write_read_remove_round_trip() {
        let dir = std::env::temp_dir().join(format!("oxzfs-cachefile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("zpool.cache");
        let mut leaf = NvList::new();
        leaf.add_str("type", "file");
        leaf.add_str("path", "/d/a");
        let mut root = NvList::new();
        root.add_str("type", "root");
        root.insert("children", NvValue::NvListArray(vec![leaf]));
        let mut cfg = NvList::new();
        cfg.add_str("name", "p1");
        cfg.add_nvlist("vdev_tree", root);
        write(&path, &[("p1".into(), cfg.clone())]).unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back, vec![("p1".to_string(), cfg.clone())]);
        assert_eq!(leaf_paths(&back[0].1), vec!["/d/a".to_string()]);
        write(&path, &[]).unwrap();
        assert!(!path.exists());
        write(&path, &[]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
