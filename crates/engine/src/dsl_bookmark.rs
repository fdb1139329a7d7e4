//! dsl_bookmark: bookmarks (`zfs bookmark fs@snap fs#name`), as dsl_bookmark.c keeps them. A
//! head dataset's bookmarks are a ZAP (DS_FIELD_BOOKMARK_NAMES in the zapified dataset,
//! case-folded names, U8_TEXTPREP_TOUPPER) of name → zfs_bookmark_phys_t as 64-bit integers:
//! the snapshot's guid, creation txg and creation time. That is all an incremental send from
//! a bookmark needs, and all oxzfs writes: the three-word (v1) form OpenZFS writes when
//! bookmark_written is not enabled. The feature `bookmarks` counts head datasets that have a
//! bookmarks ZAP. Pools with v2 bookmarks active (redaction lists, written accounting keys in
//! the deadlists) import read-only, so their bookmarks are read, never changed.

use crate::dsl::DatasetInfo;
use crate::dsl_pool::PoolW;
use crate::spa::Spa;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::DS_FLAG_CI_DATASET;
use oxzfs_format::types;
use std::sync::Arc;

/// DS_FIELD_BOOKMARK_NAMES: a head dataset's bookmarks ZAP.
pub const DS_FIELD_BOOKMARK_NAMES: &str = "com.delphix:bookmarks";
pub const BOOKMARKS_FEATURE: &str = "com.delphix:bookmarks";
const BOOKMARK_V2_FEATURE: &str = "com.datto:bookmark_v2";
/// ZFS_MAX_DATASET_NAME_LEN: a full name ("pool/fs#bm") must be shorter.
pub(crate) const MAX_DATASET_NAME_LEN: usize = 256;
/// ZBM_FLAG_HAS_FBN: the bookmark keeps written accounting (bookmark_written).
const ZBM_FLAG_HAS_FBN: u64 = 1;

/// A bookmark as stored (zfs_bookmark_phys_t, its first words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bookmark {
    /// "fs#name".
    pub name: String,
    pub guid: u64,
    pub creation_txg: u64,
    pub creation_time: u64,
    /// The stored words (3 for v1, 12 for v2).
    pub words: Vec<u64>,
}

impl Bookmark {
    fn flags(&self) -> u64 {
        self.words.get(4).copied().unwrap_or(0)
    }
    fn redaction_obj(&self) -> u64 {
        self.words.get(3).copied().unwrap_or(0)
    }
}

fn decode(fs: &str, name: &[u8], words: Vec<u64>) -> Result<Bookmark> {
    let n = String::from_utf8_lossy(name);
    if words.len() < 3 {
        return Err(ZfsError::Invalid(format!("bookmark {fs}#{n}: {} words, fewer than zfs_bookmark_phys_t's 3", words.len())));
    }
    Ok(Bookmark { name: format!("{fs}#{n}"), guid: words[0], creation_txg: words[1], creation_time: words[2], words })
}

/// The bookmarks ZAP of head dataset object `ds` in `mos`, if it has one.
fn bookmarks_obj(mos: &crate::dmu::Objset, ds: u64) -> Result<Option<u64>> {
    if mos.dnode(ds)?.typ != types::DMU_OTN_ZAP_METADATA {
        return Ok(None);
    }
    Ok(crate::zap::zap_lookup_u64(mos, ds, DS_FIELD_BOOKMARK_NAMES)?.filter(|&o| o != 0))
}

/// The bookmarks of file system `head` (a head dataset), by name.
pub fn bookmarks(spa: &Arc<Spa>, head: &DatasetInfo) -> Result<Vec<Bookmark>> {
    let mos = spa.mos();
    let Some(obj) = bookmarks_obj(&mos, head.ds_obj)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for e in crate::zap::zap_list(&mos, obj)? {
        out.push(decode(&head.name, &e.name, e.value_u64s())?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Bookmark `name` ("fs#bm"), looked up as OpenZFS does in a case-folding ZAP.
pub fn find_bookmark(spa: &Arc<Spa>, name: &str) -> Result<Option<Bookmark>> {
    let Some((fs, bm)) = name.split_once('#') else { return Ok(None) };
    let Ok(head) = crate::dsl::find_dataset(spa, fs) else { return Ok(None) };
    let ci = head.ds.flags & DS_FLAG_CI_DATASET != 0;
    Ok(bookmarks(spa, &head)?.into_iter().find(|b| same_name(ci, b.name[fs.len() + 1..].as_bytes(), bm.as_bytes())))
}

/// Whether bookmark names `a` and `b` are one name: exactly, or ignoring case in a
/// case-insensitive file system (DS_FLAG_CI_DATASET), as dsl_bookmark_lookup_impl matches.
fn same_name(ci: bool, a: &[u8], b: &[u8]) -> bool {
    if ci {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// zfs_component_namecheck for a bookmark's short name.
fn name_error(short: &str) -> Option<&'static str> {
    if short.is_empty() {
        return Some("empty component or misplaced '@' or '#' delimiter in name");
    }
    if !short.chars().all(|c| c.is_ascii_alphanumeric() || "_-:. ".contains(c)) {
        return Some("invalid character in name");
    }
    None
}

impl PoolW {
    /// Whether head dataset `ds` is case-insensitive (DS_FLAG_CI_DATASET).
    pub(crate) fn head_ci(&mut self, ds: u64) -> Result<bool> {
        Ok(self.ds_phys(ds)?.flags & DS_FLAG_CI_DATASET != 0)
    }

    /// Whether bookmark names `a` and `b` of head dataset `ds` are one name.
    pub(crate) fn same_bookmark_name(&mut self, ds: u64, a: &[u8], b: &[u8]) -> Result<bool> {
        Ok(same_name(self.head_ci(ds)?, a, b))
    }

    /// The (bookmarks ZAP, name → words) of head dataset `ds`.
    pub(crate) fn bookmark_map(&mut self, ds: u64) -> Result<Option<(u64, Vec<(Vec<u8>, Vec<u64>)>)>> {
        let Some(obj) = self.zapified_lookup(ds, DS_FIELD_BOOKMARK_NAMES)?.filter(|&o| o != 0) else { return Ok(None) };
        let z = self.mos.zap(obj)?;
        Ok(Some((obj, z.entries.iter().map(|(k, (_, v))| (k.clone(), v.clone())).collect())))
    }

    /// `zfs bookmark SOURCE NEW`: NEW ("fs#name") keeps the guid, txg and time of SOURCE, a
    /// snapshot of the same file system ("fs@snap") or another of its bookmarks ("fs#other").
    pub fn bookmark(&mut self, source: &str, new: &str) -> Result<()> {
        let what = format!("cannot create bookmark '{new}'");
        let Some((fs, short)) = new.split_once('#') else {
            return Err(ZfsError::Invalid(format!("{what}: invalid bookmark name")));
        };
        if let Some(e) = name_error(short) {
            return Err(ZfsError::Invalid(format!("{what}: {e}")));
        }
        if new.len() >= MAX_DATASET_NAME_LEN {
            return Err(ZfsError::Invalid(format!("{what}: name is too long")));
        }
        let src_fs = source.split(['@', '#']).next().unwrap_or(source);
        if src_fs != fs {
            return Err(ZfsError::Invalid(format!("{what}: source is not an ancestor of the new bookmark's dataset")));
        }
        if !self.feature_enabled(BOOKMARKS_FEATURE) {
            return Err(ZfsError::Posix(libc::ENOTSUP, format!("{what}: bookmark feature not enabled")));
        }
        let head = self.find_dataset(fs)?.ok_or_else(|| ZfsError::Invalid(format!("{what}: dataset does not exist")))?;
        let words = if source.contains('@') {
            let snap = self.find_snapshot(source)?.ok_or_else(|| ZfsError::Invalid(format!("{what}: source snapshot '{source}' does not exist")))?;
            let p = self.ds_phys(snap)?;
            vec![p.guid, p.creation_txg, p.creation_time]
        } else if let Some((_, sbm)) = source.split_once('#') {
            let ci = self.head_ci(head)?;
            let found = self.bookmark_map(head)?.and_then(|(_, m)| m.into_iter().find(|(k, _)| same_name(ci, k, sbm.as_bytes())));
            let (_, w) = found.ok_or_else(|| ZfsError::Invalid(format!("{what}: source bookmark '{source}' does not exist")))?;
            w.into_iter().take(3).collect()
        } else {
            return Err(ZfsError::Invalid(format!("{what}: invalid source name '{source}'")));
        };
        let dir = self.ds_phys(head)?.dir_obj;
        self.refuse_encrypted(dir, &what)?;
        let ci = self.head_ci(head)?;
        if let Some((_, m)) = self.bookmark_map(head)? {
            if m.iter().any(|(k, _)| same_name(ci, k, short.as_bytes())) {
                return Err(ZfsError::Invalid(format!("{what}: bookmark exists")));
            }
        }
        self.add_bookmarks(head, &[(short.as_bytes().to_vec(), words)])?;
        self.sync()
    }

    /// `zfs destroy fs#name`. A bookmark keeping written accounting or a redaction list is
    /// refused (its pool imports read-only anyway).
    pub fn destroy_bookmark(&mut self, name: &str) -> Result<()> {
        let what = format!("cannot destroy bookmark '{name}'");
        let (fs, short) = name.split_once('#').ok_or_else(|| ZfsError::Invalid(format!("{what}: invalid bookmark name")))?;
        let head = self.find_dataset(fs)?.ok_or_else(|| ZfsError::Invalid(format!("{what}: dataset does not exist")))?;
        let Some((obj, m)) = self.bookmark_map(head)? else {
            return Err(ZfsError::NotFound(format!("{what}: bookmark does not exist")));
        };
        let ci = self.head_ci(head)?;
        let Some((key, words)) = m.iter().find(|(k, _)| same_name(ci, k, short.as_bytes())).cloned() else {
            return Err(ZfsError::NotFound(format!("{what}: bookmark does not exist")));
        };
        let b = decode(fs, &key, words)?;
        if b.flags() & ZBM_FLAG_HAS_FBN != 0 || b.redaction_obj() != 0 {
            return Err(ZfsError::Posix(libc::ENOTSUP, format!("{what}: a bookmark with written accounting or a redaction list is not changed by oxzfs")));
        }
        self.mos.zap_mut(obj)?.entries.remove(&key);
        if b.words.len() > 3 {
            self.feature_incr(BOOKMARK_V2_FEATURE, -1)?;
        }
        if m.len() == 1 {
            self.free_bookmarks_zap(head, obj)?;
        }
        self.sync()
    }

    /// Bookmarks (name, words) of head `to` added, each as it is: the bookmarks ZAP made
    /// when `to` has none (dsl_bookmark_node_add).
    pub(crate) fn add_bookmarks(&mut self, to: u64, marks: &[(Vec<u8>, Vec<u64>)]) -> Result<()> {
        let obj = match self.bookmark_map(to)? {
            Some((obj, _)) => obj,
            None => {
                let obj = self.mos.create_zap(types::DMU_OTN_ZAP_METADATA, 0, 0, oxzfs_format::zap::U8_TEXTPREP_TOUPPER)?;
                self.feature_incr(BOOKMARKS_FEATURE, 1)?;
                self.zapify_dataset(to)?;
                self.mos.zap_add_u64(to, DS_FIELD_BOOKMARK_NAMES, obj)?;
                obj
            }
        };
        let z = self.mos.zap_mut(obj)?;
        for (k, w) in marks {
            z.entries.insert(k.clone(), (8, w.clone()));
        }
        Ok(())
    }

    /// The head dataset `ds` is destroyed: its bookmarks go with it.
    pub(crate) fn destroy_bookmarks_of(&mut self, ds: u64) -> Result<()> {
        let Some((obj, m)) = self.bookmark_map(ds)? else { return Ok(()) };
        for (k, w) in &m {
            let b = decode("", k, w.clone())?;
            if b.flags() & ZBM_FLAG_HAS_FBN != 0 || b.redaction_obj() != 0 {
                return Err(ZfsError::Posix(libc::ENOTSUP, format!("dataset {ds} has bookmark {:?} with written accounting or a redaction list, which oxzfs does not change", String::from_utf8_lossy(k))));
            }
            if w.len() > 3 {
                self.feature_incr(BOOKMARK_V2_FEATURE, -1)?;
            }
        }
        self.free_bookmarks_zap(ds, obj)
    }

    fn free_bookmarks_zap(&mut self, head: u64, obj: u64) -> Result<()> {
        self.mos.free_object(obj)?;
        self.mos.zap_remove(head, DS_FIELD_BOOKMARK_NAMES)?;
        self.feature_incr(BOOKMARKS_FEATURE, -1)
    }
}
