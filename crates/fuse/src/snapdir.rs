//! `.zfs/snapshot`: the snapshots of a mounted dataset, as OpenZFS's snapdir serves them. Each
//! snapshot is opened (read-only, through the pool's read side) on first use and numbered in
//! that order from 1; the number is the high bits of its files' inode numbers (see the crate's
//! inode mapping). A snapshot destroyed since is gone at once; one made again under an old name
//! is another snapshot, with a new number.

use crate::SNAP_SHIFT;
use oxzfs::pool::Pool;
use oxzfs::zpl::Zfs;
use oxzfs::ZfsError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Table {
    /// Names in order of first use; snapshot number = position + 1.
    names: Vec<String>,
    fs: HashMap<usize, Arc<Zfs>>,
}

pub(crate) struct SnapDir {
    pool: Arc<Pool>,
    dataset: String,
    /// `.zfs` shows in the root's listing (snapdir=visible).
    pub visible: bool,
    table: Mutex<Table>,
}

impl SnapDir {
    pub fn new(pool: Arc<Pool>, dataset: String, visible: bool) -> SnapDir {
        SnapDir { pool, dataset, visible, table: Mutex::new(Table::default()) }
    }

    /// The dataset's snapshots, by name.
    pub fn names(&self) -> Vec<String> {
        let prefix = format!("{}@", self.dataset);
        self.pool
            .datasets()
            .map(|l| l.into_iter().filter_map(|d| d.name.strip_prefix(&prefix).map(|s| s.to_string())).collect())
            .unwrap_or_default()
    }

    /// Number and ZPL of snapshot `name`, opening it on first use.
    pub fn open(&self, name: &str) -> Result<(usize, Arc<Zfs>), ZfsError> {
        if name.is_empty() || name.contains('/') || !self.names().iter().any(|n| n == name) {
            let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = t.names.iter().position(|n| n == name) {
                t.fs.remove(&(i + 1));
            }
            return Err(ZfsError::Posix(libc::ENOENT, format!("no snapshot {name}")));
        }
        // The pool keeps each snapshot's ZPL open (and forgets it when the snapshot is
        // destroyed): a snapshot made again under the same name is the new one here too.
        let fs = self.pool.open_fs(&format!("{}@{}", self.dataset, name))?;
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        // A snapshot made again under an old name is another one: a new number, so new inode
        // numbers (the kernel's cached pages of the old files are not taken for its files).
        let same = |i: usize| t.names[i] == name && t.fs.get(&(i + 1)).is_some_and(|f| Arc::ptr_eq(f, &fs));
        let found = (0..t.names.len()).rev().find(|&i| same(i));
        let idx = match found {
            Some(i) => i + 1,
            None => {
                if t.names.len() + 1 >= (1 << (62 - SNAP_SHIFT)) {
                    return Err(ZfsError::Posix(libc::ENFILE, "too many snapshots in use".into()));
                }
                t.names.push(name.to_string());
                t.names.len()
            }
        };
        t.fs.insert(idx, fs.clone());
        Ok((idx, fs))
    }

    /// Snapshot number `k`, if it is still open (ESTALE otherwise: destroyed since).
    pub fn get(&self, k: usize) -> Option<Arc<Zfs>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).fs.get(&k).cloned()
    }
}
