//! spa_errlog: the pool's persistent error log (OpenZFS's spa_errlog.c, without the
//! head_errlog feature): the blocks that could not be read, as bookmarks (objset, object,
//! level, blkid), what `zpool status -v` turns into file names.
//!
//! ```text
//!   in core (ErrLog)                      on disk (MOS, named by the pool directory)
//!   last   what reads found               errlog_last   ZAP (DMU_OT_ERROR_LOG)
//!   scrub  what the running scan found    errlog_scrub  ZAP
//!   entry: "objset:object:level:blkid" in hex (bookmark_to_name), the value an empty name
//!   (one byte, 0: OpenZFS fills names in lazily and never does for this format)
//! ```
//!
//! An error is logged to `scrub` while a scan runs (or finished since the last sync), to
//! `last` otherwise; each entry also waits in a pending list until the syncing txg adds it to
//! its ZAP (`PoolW::errlog_sync`, spa_errlog_sync). A finished scan rotates the log
//! (spa_errlog_rotate): in core its list becomes `last` at once; at the next sync the old
//! errlog_last object is freed, errlog_scrub becomes errlog_last (with what was found since)
//! and errlog_scrub is 0 — so one clean scrub empties the log, in core and on disk. A
//! canceled scan leaves both lists as they are. Import reads both objects back
//! (`load`), so the log outlives export, import and a daemon restart.
//!
//! Locking: a leaf lock (`Spa::errlog`).

use std::collections::BTreeSet;

/// A block's bookmark: (objset, object, level, blkid); the level as the bits of an int64.
pub type Bookmark = (u64, u64, u64, u64);

/// At most this many entries in core per list (the log is for people to read).
const MAX_ENTRIES: usize = 10_000;

/// The error log of an imported pool.
#[derive(Default, Debug)]
pub struct ErrLog {
    last: BTreeSet<Bookmark>,
    scrub: BTreeSet<Bookmark>,
    /// Not yet in their ZAP (spa_errlist_last, spa_errlist_scrub).
    pending_last: BTreeSet<Bookmark>,
    pending_scrub: BTreeSet<Bookmark>,
    /// A scan finished since the last sync (spa_scrub_finished).
    finished: bool,
    /// The ZAP objects (spa_errlog_last, spa_errlog_scrub); 0: none.
    obj_last: u64,
    obj_scrub: u64,
}

/// What one sync writes (`ErrLog::take_sync`).
#[derive(Debug, PartialEq, Eq)]
pub struct ErrLogSync {
    pub pending_last: BTreeSet<Bookmark>,
    pub pending_scrub: BTreeSet<Bookmark>,
    pub finished: bool,
    pub obj_last: u64,
    pub obj_scrub: u64,
}

impl ErrLog {
    /// The log as import finds it: the two objects and their entries.
    pub fn load(obj_last: u64, last: BTreeSet<Bookmark>, obj_scrub: u64, scrub: BTreeSet<Bookmark>) -> ErrLog {
        ErrLog { last, scrub, obj_last, obj_scrub, ..Default::default() }
    }

    /// spa_log_error: `zb` could not be read; `scanning`, a scan runs.
    pub fn record(&mut self, zb: Bookmark, scanning: bool) {
        let (list, pending) = if self.finished {
            // Rotated in core already: it joins the new last list at the sync.
            (&mut self.last, &mut self.pending_scrub)
        } else if scanning {
            (&mut self.scrub, &mut self.pending_scrub)
        } else {
            (&mut self.last, &mut self.pending_last)
        };
        if list.len() < MAX_ENTRIES && list.insert(zb) {
            pending.insert(zb);
        }
    }

    /// Every entry (spa_get_errlog: both lists, on disk and pending).
    pub fn entries(&self) -> Vec<Bookmark> {
        self.last.union(&self.scrub).copied().collect()
    }

    /// spa_errlog_rotate: a scan finished; what it found is the log now.
    pub fn rotate(&mut self) {
        self.last = std::mem::take(&mut self.scrub);
        self.finished = true;
    }

    /// Whether a sync has something to write.
    pub fn dirty(&self) -> bool {
        self.finished || !self.pending_last.is_empty() || !self.pending_scrub.is_empty()
    }

    /// The changes for this sync, taken (None: nothing to write).
    pub fn take_sync(&mut self) -> Option<ErrLogSync> {
        self.dirty().then(|| ErrLogSync {
            pending_last: std::mem::take(&mut self.pending_last),
            pending_scrub: std::mem::take(&mut self.pending_scrub),
            finished: std::mem::take(&mut self.finished),
            obj_last: self.obj_last,
            obj_scrub: self.obj_scrub,
        })
    }

    /// The objects the sync left.
    pub fn synced(&mut self, obj_last: u64, obj_scrub: u64) {
        self.obj_last = obj_last;
        self.obj_scrub = obj_scrub;
    }
}

/// bookmark_to_name: "objset:object:level:blkid", each in hex.
pub fn bookmark_name(zb: &Bookmark) -> String {
    format!("{:x}:{:x}:{:x}:{:x}", zb.0, zb.1, zb.2, zb.3)
}

/// name_to_bookmark: the four hex numbers of an entry's name (None: not one).
pub fn parse_name(name: &str) -> Option<Bookmark> {
    let mut it = name.trim_end_matches('\0').split(':').map(|p| u64::from_str_radix(p, 16).ok());
    let zb = (it.next()??, it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(zb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_as_openzfs_prints_them() {
        let zb = (0x36, 0x80, u64::MAX - 1, 0x1f);
        assert_eq!(bookmark_name(&zb), "36:80:fffffffffffffffe:1f");
        assert_eq!(parse_name("36:80:fffffffffffffffe:1f\0"), Some(zb));
        assert_eq!(parse_name("36:80:0"), None);
        assert_eq!(parse_name("36:80:0:1:2"), None);
        assert_eq!(parse_name("x:80:0:1"), None);
    }

    #[test]
    fn a_finished_scan_rotates_and_a_canceled_one_keeps_both() {
        let mut l = ErrLog::load(10, [(1, 1, 0, 0)].into(), 11, BTreeSet::new());
        l.record((2, 2, 0, 0), true);
        l.record((3, 3, 0, 0), false);
        assert_eq!(l.entries(), vec![(1, 1, 0, 0), (2, 2, 0, 0), (3, 3, 0, 0)]);
        let s = l.take_sync().unwrap();
        assert_eq!((s.pending_last.len(), s.pending_scrub.len(), s.finished, s.obj_last, s.obj_scrub), (1, 1, false, 10, 11));
        assert!(l.take_sync().is_none());
        l.rotate();
        assert_eq!(l.entries(), vec![(2, 2, 0, 0)]);
        l.record((4, 4, 0, 0), false); // before the sync: joins the rotated list
        let s = l.take_sync().unwrap();
        assert!(s.finished && s.pending_last.is_empty() && s.pending_scrub.contains(&(4, 4, 0, 0)));
        // a clean scan empties it
        l.rotate();
        assert!(l.entries().is_empty());
        assert!(l.take_sync().unwrap().finished);
        // the same error twice is logged once
        l.record((5, 5, 0, 0), false);
        l.record((5, 5, 0, 0), false);
        let s = l.take_sync().unwrap();
        assert!(!s.finished && s.pending_last.len() == 1);
    }
}
