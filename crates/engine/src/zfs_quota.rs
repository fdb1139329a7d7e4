//! What `zfs userspace`, `groupspace` and `projectspace` read of a file system (zfs_quota.c's
//! zfs_userspace_many): the accounting ZAPs the DMU keeps (dmu_userused) and the quota ZAPs the
//! master node names.

use std::collections::BTreeMap;

use oxzfs_format::objset::{DMU_GROUPUSED_OBJECT, DMU_PROJECTUSED_OBJECT, DMU_USERUSED_OBJECT};

use crate::dmu_userused::OBJACCT_PREFIX;

/// Whom a row of [`Accounting`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Group,
    User,
    Project,
}

/// One owner's figures (zfs_useracct_t over the used, quota, objused and objquota props).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub used: u64,
    pub quota: u64,
    pub objused: u64,
    pub objquota: u64,
}

/// What `zfs userspace`, `groupspace` and `projectspace` read of a file system or snapshot.
#[derive(Debug, Default)]
pub struct Accounting {
    /// OBJSET_FLAG_USERACCOUNTING_COMPLETE: without it OpenZFS answers ENOTSUP.
    pub complete: bool,
    /// The object counts (OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE) and the projects
    /// (OBJSET_FLAG_PROJECTQUOTA_COMPLETE) are there to show.
    pub objects: bool,
    pub projects: bool,
    /// By kind and id (the key's hex: a POSIX id, or a FUID's domain index and rid).
    pub rows: BTreeMap<(Kind, u64), Row>,
}

/// The master-node entries naming the quota ZAPs (zfs_userquota_prop_prefixes).
pub const QUOTA_OBJS: [(Kind, bool, &str); 6] = [
    (Kind::User, false, "userquota@"),
    (Kind::Group, false, "groupquota@"),
    (Kind::User, true, "userobjquota@"),
    (Kind::Group, true, "groupobjquota@"),
    (Kind::Project, false, "projectquota@"),
    (Kind::Project, true, "projectobjquota@"),
];

/// The accounting of the objset `os` (a ZPL file system or snapshot): its used ZAPs, and the
/// quotas its master node names (left out when the master node cannot be read, as for an
/// encrypted file system without its key).
pub fn read_accounting(os: &crate::dmu::Objset) -> crate::Result<Accounting> {
    use crate::dmu::ObjsetRead;
    use oxzfs_format::objset::{OBJSET_FLAG_PROJECTQUOTA_COMPLETE, OBJSET_FLAG_USERACCOUNTING_COMPLETE, OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE};
    let f = os.phys.flags;
    let mut acct = Accounting {
        complete: f & OBJSET_FLAG_USERACCOUNTING_COMPLETE != 0,
        objects: f & OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE != 0,
        projects: f & OBJSET_FLAG_PROJECTQUOTA_COMPLETE != 0,
        rows: BTreeMap::new(),
    };
    if !acct.complete {
        return Ok(acct);
    }
    let keep = |kind: Kind, acct: &Accounting| kind != Kind::Project || acct.projects;
    let used = |acct: &mut Accounting, kind: Kind, obj: u64| -> crate::Result<()> {
        let entries = match os.zap_entries(obj) {
            Ok(e) => e,
            Err(crate::ZfsError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        for (name, v) in entries {
            let name = String::from_utf8_lossy(&name);
            let (counts, hex) = match name.strip_prefix(OBJACCT_PREFIX) {
                Some(h) => (true, h),
                None => (false, &*name),
            };
            if counts && !acct.objects {
                continue;
            }
            let (Ok(id), Some(&val)) = (u64::from_str_radix(hex, 16), v.first()) else { continue };
            let row = acct.rows.entry((kind, id)).or_default();
            if counts {
                row.objused = val;
            } else {
                row.used = val;
            }
        }
        Ok(())
    };
    for (kind, obj) in [(Kind::User, DMU_USERUSED_OBJECT), (Kind::Group, DMU_GROUPUSED_OBJECT), (Kind::Project, DMU_PROJECTUSED_OBJECT)] {
        if keep(kind, &acct) {
            used(&mut acct, kind, obj)?;
        }
    }
    for (kind, counts, key) in QUOTA_OBJS {
        if !keep(kind, &acct) || counts && !acct.objects {
            continue;
        }
        let Ok(Some(obj)) = os.zap_value(crate::zfs_znode::MASTER_NODE_OBJ, key.as_bytes()) else { continue };
        // The quota ZAPs have no obj- prefix: their keys are ids (the object quotas' ZAPs
        // are separate objects).
        let entries = match os.zap_entries(obj) {
            Ok(e) => e,
            Err(_) => continue,
        };
        for (name, v) in entries {
            let (Ok(id), Some(&val)) = (u64::from_str_radix(&String::from_utf8_lossy(&name), 16), v.first()) else { continue };
            let row = acct.rows.entry((kind, id)).or_default();
            if counts {
                row.objquota = val;
            } else {
                row.quota = val;
            }
        }
    }
    Ok(acct)
}
