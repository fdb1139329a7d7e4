//! dsl_rename: `zfs rename` of a file system, as dsl_dir_rename_sync does it.
//!
//! ```text
//!   old parent dir ──child map "a"──▶ dir D ◀──child map "b"── new parent dir
//!        (entry removed)               │ dd_parent_obj = new parent
//!                                      └ children, snapshots, dataset: unchanged
//!
//!   when the parent changes, what D is charged to its ancestors moves:
//!     old parent CHILD      −= D.used       new parent CHILD      += D.used
//!     old parent CHILD_RSRV −= unused rsv   new parent CHILD_RSRV += unused rsv
//!   (unused rsv = D.reserved − D.used when the reservation is larger), each carried up to
//!   the root through the ancestors' own reservations as any space change is.
//! ```
//!
//! Names of snapshots and descendants follow from the tree, so nothing else is rewritten;
//! the open objsets below D take the properties they now inherit. Runs under the pool's
//! write lock in the open txg, like every DSL change here.

use crate::dsl_pool::PoolW;
use crate::{Result, ZfsError};
use oxzfs_format::dsl::{DD_USED_CHILD, DD_USED_CHILD_RSRV};

/// Whether `name` is `of` or below it ("tank/a/b" is below "tank/a", "tank/ab" is not).
fn is_within(name: &str, of: &str) -> bool {
    name == of || name.strip_prefix(of).is_some_and(|r| r.starts_with('/'))
}

impl PoolW {
    /// Rename file system `old` to `new` (same pool), creating missing parents with `parents`.
    /// Errors carry OpenZFS's words without the "cannot rename" prefix the caller adds.
    pub fn rename_dataset(&mut self, old: &str, new: &str, parents: bool) -> Result<()> {
        let pool = self.spa.name.clone();
        if new.split('/').next() != Some(pool.as_str()) || !new.contains('/') {
            return Err(ZfsError::Invalid(format!("cannot rename to '{new}': datasets must be within same pool")));
        }
        if is_within(new, old) {
            return Err(ZfsError::Invalid(format!("cannot rename to '{new}': New dataset name cannot be a descendant of current dataset name")));
        }
        let (new_parent, leaf) = new.rsplit_once('/').expect("checked above");
        if new.len() > 255 {
            return Err(ZfsError::Invalid(format!("cannot rename to '{new}': name is too long")));
        }
        if leaf.is_empty() || new.split('/').any(|c| c.is_empty()) || !leaf.chars().all(|c| c.is_ascii_alphanumeric() || "_-:. ".contains(c)) {
            return Err(ZfsError::Invalid(format!("cannot rename to '{new}': invalid character in dataset name")));
        }
        let dir = self.find_dir(old)?.ok_or_else(|| ZfsError::NotFound(format!("cannot open '{old}': dataset does not exist")))?;
        // An encrypted dataset keeps its place under its encryption root, and a dataset moved
        // under one would have to be encrypted.
        self.refuse_encrypted(dir, &format!("cannot rename '{old}'"))?;
        if let Some(np) = self.find_dir(new_parent)? {
            self.refuse_encrypted(np, &format!("cannot rename to '{new}'"))?;
        }
        let ddp = self.dir_phys(dir)?;
        if ddp.parent_dir_obj == 0 {
            return Err(ZfsError::Invalid(format!("cannot rename to '{new}': datasets must be within same pool")));
        }
        if self.find_dir(new)?.is_some() {
            return Err(ZfsError::Invalid(format!("cannot rename '{old}': dataset already exists")));
        }
        let pdir = match self.find_dir(new_parent)? {
            Some(d) => d,
            None if parents => {
                self.create_dataset(new_parent, &[], true)?;
                self.find_dir(new_parent)?.expect("just created")
            }
            None => return Err(ZfsError::Invalid(format!("cannot create '{new}': parent does not exist"))),
        };
        let old_parent = ddp.parent_dir_obj;
        // What the dir is charged to its ancestors: its used, or its reservation if larger.
        let myspace = ddp.used_bytes.max(ddp.reserved);
        if pdir != old_parent {
            self.rename_quota_check(old_parent, pdir, myspace)?;
        }
        let old_leaf = old.rsplit('/').next().unwrap_or(old).to_string();
        let old_map = self.dir_phys(old_parent)?.child_dir_zapobj;
        let new_map = self.dir_phys(pdir)?.child_dir_zapobj;
        self.mos.zap_remove(old_map, &old_leaf)?;
        self.mos.zap_add_u64(new_map, leaf, dir)?;
        if pdir != old_parent {
            let mut d = self.dir_phys(dir)?;
            d.parent_dir_obj = pdir;
            self.mos.set_bonus(dir, &d.encode())?;
            let (u, c, l) = (d.used_bytes as i64, d.compressed_bytes as i64, d.uncompressed_bytes as i64);
            self.dir_transfer(old_parent, -u, -c, -l, -u, DD_USED_CHILD, DD_USED_CHILD)?;
            self.dir_transfer(pdir, u, c, l, u, DD_USED_CHILD, DD_USED_CHILD)?;
            if d.reserved > d.used_bytes {
                let unused = (d.reserved - d.used_bytes) as i64;
                self.dir_transfer(old_parent, -unused, 0, 0, -unused, DD_USED_CHILD_RSRV, DD_USED_CHILD_RSRV)?;
                self.dir_transfer(pdir, unused, 0, 0, unused, DD_USED_CHILD_RSRV, DD_USED_CHILD_RSRV)?;
            }
            // Inherited properties now come from the new parents.
            self.refresh_open_props()?;
        }
        Ok(())
    }

    /// dsl_dir_transfer_possible: moving `space` bytes from under `from` to under `to` must fit
    /// the quotas of `to` and its ancestors below the closest common ancestor (those above
    /// already count it).
    fn rename_quota_check(&mut self, from: u64, to: u64, space: u64) -> Result<()> {
        let mut from_chain = Vec::new();
        let mut cur = from;
        while cur != 0 && from_chain.len() < 256 {
            from_chain.push(cur);
            cur = self.dir_phys(cur)?.parent_dir_obj;
        }
        let mut cur = to;
        for _ in 0..256 {
            if cur == 0 || from_chain.contains(&cur) {
                break;
            }
            let d = self.dir_phys(cur)?;
            if d.quota != 0 && d.used_bytes.saturating_add(space) > d.quota {
                return Err(ZfsError::Posix(libc::ENOSPC, "out of space".into()));
            }
            cur = d.parent_dir_obj;
        }
        Ok(())
    }
}
