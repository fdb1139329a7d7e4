//! User, group and project space accounting of a file system (dmu_objset.c's userquota code,
//! zfs_quota.c's zpl_get_file_info): at each sync, every object synced is charged to the
//! owner, group and project its bonus names, as `512 + the dnode's used bytes` and, where
//! the pool has userobj_accounting enabled, as one object (`obj-` keys). The charge the object
//! carried before the sync is taken back first, so the special ZAP objects -1 (users), -2
//! (groups) and -3 (projects) of the objset always hold what OpenZFS's `zfs userspace` reads.
//!
//! OpenZFS keeps the owners an object had in memory between txgs (dn_olduid); oxzfs reads them
//! from the synced tree, which holds the same values.

use std::collections::BTreeMap;

use oxzfs_format::dnode::{DnodePhys, DNODE_FLAG_USEROBJUSED_ACCOUNTED, DNODE_FLAG_USERUSED_ACCOUNTED};
use oxzfs_format::types;

/// A ZAP's entries as the writer keeps them (ZapObj::entries): name → (integer size, values).
pub type ZapEntries = BTreeMap<Vec<u8>, (u8, Vec<u64>)>;
/// SPA_VERSION_USERSPACE: the first pool version that accounts space per user and group.
pub const SPA_VERSION_USERSPACE: u64 = 15;
/// DMU_OBJACCT_PREFIX: the prefix of the object-count keys.
pub const OBJACCT_PREFIX: &str = "obj-";
/// DNODE_MIN_SIZE: what an object is charged beside its blocks.
const DNODE_MIN_SIZE: i64 = 512;
const SA_MAGIC: u32 = 0x2F505A;
/// Offsets in the ZPL's SA layout after the header (zfs_sa.h), as zpl_get_file_info reads them.
const SA_UID_OFFSET: usize = 24;
const SA_GID_OFFSET: usize = 32;
const SA_FLAGS_OFFSET: usize = 48;
const SA_PROJID_OFFSET: usize = 128;
use oxzfs_format::znode::pflags::ZFS_PROJID;
/// znode_phys_t (a legacy, pre-SA znode): zp_uid and zp_gid.
const ZP_UID_OFFSET: usize = 128;
const ZP_GID_OFFSET: usize = 136;

/// The owner, group and project an object is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIds {
    pub user: u64,
    pub group: u64,
    pub project: u64,
}

fn u64_at(b: &[u8], off: usize, swap: bool) -> Option<u64> {
    let v = u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?);
    Some(if swap { v.swap_bytes() } else { v })
}

/// zpl_get_file_info: the ids of a file system object from its bonus (a znode or an SA
/// header; `le`: the byte order of the block the bonus came from, which a znode's fields are
/// in, where an SA header says its own), None for an object the ZPL does not charge (another
/// bonus type, or a bonus that does not parse).
pub fn file_info(bonustype: u8, bonus: &[u8], le: bool) -> Option<FileIds> {
    match bonustype {
        types::DMU_OT_ZNODE => Some(FileIds { user: u64_at(bonus, ZP_UID_OFFSET, !le)?, group: u64_at(bonus, ZP_GID_OFFSET, !le)?, project: 0 }),
        types::DMU_OT_SA => {
            let magic = u32::from_le_bytes(bonus.get(0..4)?.try_into().ok()?);
            if magic == 0 {
                // A new file whose znode is not filled in yet.
                return Some(FileIds { user: 0, group: 0, project: 0 });
            }
            let swap = if magic == SA_MAGIC {
                false
            } else if magic.swap_bytes() == SA_MAGIC {
                true
            } else {
                return None;
            };
            let mut info = u16::from_le_bytes(bonus.get(4..6)?.try_into().ok()?);
            if swap {
                info = info.swap_bytes();
            }
            let hdr = (((info >> 10) & 0x3f) as usize) << 3;
            if hdr < 8 {
                return None;
            }
            let at = |off: usize| u64_at(bonus, hdr + off, swap);
            let flags = at(SA_FLAGS_OFFSET)?;
            let project = if flags & ZFS_PROJID != 0 { at(SA_PROJID_OFFSET)? } else { 0 };
            Some(FileIds { user: at(SA_UID_OFFSET)?, group: at(SA_GID_OFFSET)?, project })
        }
        _ => None,
    }
}

/// The ids of `dn` as file_info reads them from its bonus, or from `spill` when the dnode has
/// no bonus and its SA lives in the spill block.
pub fn dnode_ids(dn: &DnodePhys, spill: Option<&[u8]>, le: bool) -> Option<FileIds> {
    if dn.is_free() {
        return None;
    }
    if dn.bonuslen == 0 && dn.bonustype == types::DMU_OT_SA {
        return file_info(dn.bonustype, spill?, le);
    }
    if dn.bonuslen == 0 {
        return None;
    }
    file_info(dn.bonustype, &dn.bonus, le)
}

/// The changes one sync makes to the three accounting ZAPs, by key (userquota_cache_t).
#[derive(Debug, Default)]
pub struct Deltas {
    pub user: BTreeMap<String, i64>,
    pub group: BTreeMap<String, i64>,
    pub project: BTreeMap<String, i64>,
}

impl Deltas {
    /// do_userquota_update and do_userobjquota_update: charge (or, with `sign` -1, take back)
    /// an object of dnode flags `flags` and used bytes `used` to `ids`; projects only when the
    /// objset keeps them.
    pub fn charge(&mut self, ids: &FileIds, used: u64, flags: u8, sign: i64, projects: bool) {
        let mut add = |prefix: &str, delta: i64| {
            *self.user.entry(format!("{prefix}{:x}", ids.user)).or_default() += delta;
            *self.group.entry(format!("{prefix}{:x}", ids.group)).or_default() += delta;
            if projects {
                *self.project.entry(format!("{prefix}{:x}", ids.project)).or_default() += delta;
            }
        };
        if flags & DNODE_FLAG_USERUSED_ACCOUNTED != 0 {
            add("", sign * (DNODE_MIN_SIZE + used as i64));
        }
        if flags & DNODE_FLAG_USEROBJUSED_ACCOUNTED != 0 {
            add(OBJACCT_PREFIX, sign);
        }
    }

    pub fn is_empty(&self) -> bool {
        [&self.user, &self.group, &self.project].iter().all(|m| m.values().all(|&d| d == 0))
    }
}

/// zap_increment of each key by its delta in a ZAP's entries: a count that comes to zero is
/// removed.
pub fn apply(entries: &mut ZapEntries, deltas: &BTreeMap<String, i64>) {
    for (k, &d) in deltas {
        if d == 0 {
            continue;
        }
        let key = k.as_bytes();
        let old = entries.get(key).and_then(|(_, v)| v.first().copied()).unwrap_or(0);
        let new = old.wrapping_add(d as u64);
        if new == 0 {
            entries.remove(key);
        } else {
            entries.insert(key.to_vec(), (8, vec![new]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa_bonus(uid: u64, gid: u64, flags: u64, projid: Option<u64>) -> Vec<u8> {
        // Header of 16 bytes (layout 2, one variable length), then the fixed attributes.
        let mut b = vec![0u8; 16 + 136];
        b[0..4].copy_from_slice(&SA_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&((2u16 << 10) | 2).to_le_bytes());
        b[16 + SA_UID_OFFSET..][..8].copy_from_slice(&uid.to_le_bytes());
        b[16 + SA_GID_OFFSET..][..8].copy_from_slice(&gid.to_le_bytes());
        b[16 + SA_FLAGS_OFFSET..][..8].copy_from_slice(&flags.to_le_bytes());
        if let Some(p) = projid {
            b[16 + SA_PROJID_OFFSET..][..8].copy_from_slice(&p.to_le_bytes());
        }
        b
    }

    #[test]
    fn sa_and_znode_bonuses_give_their_ids() {
        assert_eq!(file_info(types::DMU_OT_SA, &sa_bonus(1000, 100, 0, Some(7)), true), Some(FileIds { user: 1000, group: 100, project: 0 }));
        assert_eq!(file_info(types::DMU_OT_SA, &sa_bonus(1000, 100, ZFS_PROJID, Some(7)), true), Some(FileIds { user: 1000, group: 100, project: 7 }));
        // Big-endian SA: every field swapped.
        let mut be = sa_bonus(0, 0, 0, None);
        be[0..4].copy_from_slice(&SA_MAGIC.to_be_bytes());
        be[4..6].copy_from_slice(&((2u16 << 10) | 2).to_be_bytes());
        be[16 + SA_UID_OFFSET..][..8].copy_from_slice(&42u64.to_be_bytes());
        be[16 + SA_GID_OFFSET..][..8].copy_from_slice(&43u64.to_be_bytes());
        assert_eq!(file_info(types::DMU_OT_SA, &be, true), Some(FileIds { user: 42, group: 43, project: 0 }));
        let mut zp = vec![0u8; 264];
        zp[ZP_UID_OFFSET..][..8].copy_from_slice(&5u64.to_le_bytes());
        zp[ZP_GID_OFFSET..][..8].copy_from_slice(&6u64.to_le_bytes());
        assert_eq!(file_info(types::DMU_OT_ZNODE, &zp, true), Some(FileIds { user: 5, group: 6, project: 0 }));
        // A znode from a big-endian pool: its fields in that order.
        let mut zb = vec![0u8; 264];
        zb[ZP_UID_OFFSET..][..8].copy_from_slice(&5u64.to_be_bytes());
        zb[ZP_GID_OFFSET..][..8].copy_from_slice(&6u64.to_be_bytes());
        assert_eq!(file_info(types::DMU_OT_ZNODE, &zb, false), Some(FileIds { user: 5, group: 6, project: 0 }));
        assert_eq!(file_info(0, &zp, true), None);
        assert_eq!(file_info(types::DMU_OT_SA, &[1, 2, 3, 4, 0, 0, 0, 0], true), None);
        assert_eq!(file_info(types::DMU_OT_SA, &[0; 8], true), Some(FileIds { user: 0, group: 0, project: 0 }));
    }

    #[test]
    fn charges_net_out_and_zero_counts_leave_the_zap() {
        let ids = FileIds { user: 0x3e8, group: 0x64, project: 0 };
        let both = DNODE_FLAG_USERUSED_ACCOUNTED | DNODE_FLAG_USEROBJUSED_ACCOUNTED;
        let mut d = Deltas::default();
        d.charge(&ids, 4096, both, 1, false);
        assert_eq!((d.user["3e8"], d.user["obj-3e8"], d.group["64"]), (4608, 1, 4608));
        assert!(d.project.is_empty());
        let mut z = ZapEntries::new();
        let get = |z: &ZapEntries, k: &str| z.get(k.as_bytes()).map(|(_, v)| v[0]);
        apply(&mut z, &d.user);
        assert_eq!(get(&z, "3e8"), Some(4608));
        // The same object, grown and moved to another owner by the next sync.
        let mut d = Deltas::default();
        d.charge(&ids, 4096, both, -1, false);
        d.charge(&FileIds { user: 0, ..ids }, 8192, both, 1, false);
        apply(&mut z, &d.user);
        assert_eq!((get(&z, "3e8"), get(&z, "obj-3e8"), get(&z, "0"), get(&z, "obj-0")), (None, None, Some(8704), Some(1)));
        // An object synced before accounting (no flags) is not taken back.
        let mut d = Deltas::default();
        d.charge(&ids, 4096, 0, -1, true);
        assert!(d.is_empty());
    }
}
