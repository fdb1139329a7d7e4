//! What `zfs userspace`, `groupspace` and `projectspace` read of a file system (zfs_quota.c's
//! zfs_userspace_many): the accounting ZAPs the DMU keeps (dmu_userused) and the quota ZAPs the
//! master node names.

use std::collections::BTreeMap;

use oxzfs_format::objset::{DMU_GROUPUSED_OBJECT, DMU_PROJECTUSED_OBJECT, DMU_USERUSED_OBJECT};

use crate::dbuf::ObjsetW;
use crate::dmu_userused::OBJACCT_PREFIX;

/// Whom a row of [`Accounting`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Group,
    User,
    Project,
}

/// One owner's figures (zfs_useracct_t over the used, quota, objused and objquota props):
/// None where the file system has no entry for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub used: Option<u64>,
    pub quota: Option<u64>,
    pub objused: Option<u64>,
    pub objquota: Option<u64>,
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
                row.objused = Some(val);
            } else {
                row.used = Some(val);
            }
        }
        Ok(())
    };
    for (kind, obj) in [(Kind::User, DMU_USERUSED_OBJECT), (Kind::Group, DMU_GROUPUSED_OBJECT), (Kind::Project, DMU_PROJECTUSED_OBJECT)] {
        if keep(kind, &acct) {
            used(&mut acct, kind, obj)?;
        }
    }
    for (key, kind, counts) in QUOTA_PROPS {
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
                row.objquota = Some(val);
            } else {
                row.quota = Some(val);
            }
        }
    }
    Ok(acct)
}

/// The quota properties and what each one is about: (prefix of the property and of its
/// master-node entry naming the quota ZAP (zfs_userquota_prop_prefixes), kind, whether it
/// counts objects).
pub const QUOTA_PROPS: [(&str, Kind, bool); 6] = [
    ("userquota@", Kind::User, false),
    ("groupquota@", Kind::Group, false),
    ("userobjquota@", Kind::User, true),
    ("groupobjquota@", Kind::Group, true),
    ("projectquota@", Kind::Project, false),
    ("projectobjquota@", Kind::Project, true),
];

/// The used properties (userused@ and the rest): (prefix, kind, whether it counts objects).
pub const USED_PROPS: [(&str, Kind, bool); 6] = [
    ("userused@", Kind::User, false),
    ("groupused@", Kind::Group, false),
    ("userobjused@", Kind::User, true),
    ("groupobjused@", Kind::Group, true),
    ("projectused@", Kind::Project, false),
    ("projectobjused@", Kind::Project, true),
];

/// ZPL_VERSION_USERSPACE: the first file system version with user quotas.
pub const ZPL_VERSION_USERSPACE: u64 = 4;

fn used_obj(kind: Kind) -> u64 {
    match kind {
        Kind::User => DMU_USERUSED_OBJECT,
        Kind::Group => DMU_GROUPUSED_OBJECT,
        Kind::Project => DMU_PROJECTUSED_OBJECT,
    }
}

/// `key` of ZAP `obj` of the live file system `os`, if it is there.
fn lookup(os: &ObjsetW, obj: u64, key: &str) -> Option<u64> {
    os.with_zap(obj, |z| z.get_u64(key)).ok().flatten()
}

/// The quota ZAP the master node names for property `prefix`, if one was made.
fn quota_obj(os: &ObjsetW, prefix: &str) -> Option<u64> {
    lookup(os, crate::zfs_znode::MASTER_NODE_OBJ, prefix)
}

/// Whether `id` of `kind` is at or over its quota of bytes (`objects`: of objects) in the
/// live file system `os` (zfs_id_overblockquota, zfs_id_overobjquota): the figures are those
/// of the last synced txg, so a quota may be passed by what one txg holds, as in OpenZFS.
pub fn over_quota_of(os: &ObjsetW, kind: Kind, id: u64, objects: bool) -> bool {
    use oxzfs_format::objset::{OBJSET_FLAG_PROJECTQUOTA_COMPLETE, OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE};
    if objects && os.phys.flags & OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE == 0 {
        return false;
    }
    if kind == Kind::Project && os.phys.flags & OBJSET_FLAG_PROJECTQUOTA_COMPLETE == 0 {
        return false;
    }
    let Some(&(prefix, _, _)) = QUOTA_PROPS.iter().find(|p| p.1 == kind && p.2 == objects) else { return false };
    let Some(qobj) = quota_obj(os, prefix) else { return false };
    let hex = format!("{id:x}");
    let Some(quota) = lookup(os, qobj, &hex) else { return false };
    let key = if objects { format!("{OBJACCT_PREFIX}{hex}") } else { hex };
    lookup(os, used_obj(kind), &key).is_some_and(|used| used >= quota)
}

/// Whether the file system has any quota ZAP at all (the cheap test before the others).
fn has_quotas(os: &ObjsetW) -> bool {
    os.with_zap(crate::zfs_znode::MASTER_NODE_OBJ, |z| QUOTA_PROPS.iter().any(|p| z.get_u64(p.0).is_some())).unwrap_or(false)
}

fn edquot(what: String) -> crate::ZfsError {
    crate::ZfsError::Posix(libc::EDQUOT, format!("{what}: quota exceeded"))
}

/// zfs_write's check: EDQUOT when the file's owner, group or (a set) project is at its quota
/// of bytes.
pub fn check_write(os: &mut ObjsetW, obj: u64) -> crate::Result<()> {
    if !has_quotas(os) {
        return Ok(());
    }
    let z = &crate::zplw::get(os, obj)?;
    if over_quota_of(os, Kind::User, z.uid, false) || over_quota_of(os, Kind::Group, z.gid, false) || z.projid != 0 && over_quota_of(os, Kind::Project, z.projid, false) {
        return Err(edquot(format!("object {obj}")));
    }
    Ok(())
}

/// zfs_id_overquota: at the quota of bytes or of objects.
fn over_either(os: &ObjsetW, kind: Kind, id: u64) -> bool {
    over_quota_of(os, kind, id, false) || over_quota_of(os, kind, id, true)
}

/// zfs_acl_ids_overquota, before a create: EDQUOT when the new object's owner, group or (a
/// set) project is at a quota.
pub fn check_create(os: &ObjsetW, uid: u64, gid: u64, projid: u64) -> crate::Result<()> {
    if !has_quotas(os) {
        return Ok(());
    }
    if over_either(os, Kind::User, uid) || over_either(os, Kind::Group, gid) || projid != 0 && over_either(os, Kind::Project, projid) {
        return Err(edquot(format!("uid {uid} gid {gid}")));
    }
    Ok(())
}

/// zfs_setattr's check of a new project id: whether the project is at a quota.
pub fn over_project_quota(os: &ObjsetW, projid: u64) -> bool {
    projid != 0 && has_quotas(os) && over_either(os, Kind::Project, projid)
}

/// zfs_setattr's check of a change of owner or group: EDQUOT when the new one is at a quota.
pub fn check_chown(os: &mut ObjsetW, obj: u64, uid: Option<u64>, gid: Option<u64>) -> crate::Result<()> {
    if uid.is_none() && gid.is_none() || !has_quotas(os) {
        return Ok(());
    }
    let z = &crate::zplw::get(os, obj)?;
    if uid.is_some_and(|u| u != z.uid && over_either(os, Kind::User, u)) || gid.is_some_and(|g| g != z.gid && over_either(os, Kind::Group, g)) {
        return Err(edquot(format!("uid {uid:?} gid {gid:?}")));
    }
    Ok(())
}

/// zfs_set_userquota: quota `quota` (0: none) for `id` under property `prefix` of the live
/// file system `os`, the quota ZAP made (and named in the master node) on first use.
/// `projects`: the pool keeps projects (project_quota enabled).
pub fn set_quota(os: &mut ObjsetW, prefix: &str, id: u64, quota: u64, projects: bool) -> crate::Result<()> {
    let Some(&(_, kind, _)) = QUOTA_PROPS.iter().find(|p| p.0 == prefix) else {
        return Err(crate::ZfsError::Posix(libc::EINVAL, format!("{prefix}: not a quota property")));
    };
    let master = crate::zfs_znode::MASTER_NODE_OBJ;
    let version = os.zap_lookup(master, "VERSION")?.unwrap_or(0);
    if version < ZPL_VERSION_USERSPACE || kind == Kind::Project && !projects {
        return Err(crate::ZfsError::Posix(libc::ENOTSUP, "pool and or dataset must be upgraded to set this property or value".into()));
    }
    let hex = format!("{id:x}");
    let obj = match os.zap_lookup(master, prefix)? {
        Some(o) => o,
        None if quota == 0 => return Ok(()),
        None => {
            let o = os.create_zap(oxzfs_format::types::DMU_OT_USERGROUP_QUOTA, 0, 0, 0)?;
            os.zap_add_u64(master, prefix, o)?;
            o
        }
    };
    if quota == 0 {
        os.zap_remove(obj, &hex)?;
    } else {
        os.zap_mut(obj)?.set_u64(&hex, quota);
    }
    Ok(())
}
