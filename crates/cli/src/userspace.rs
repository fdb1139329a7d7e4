//! `zfs userspace`, `zfs groupspace` and `zfs projectspace`: the space and objects each user,
//! group or project holds in a file system or snapshot, and their quotas, in zfs_main.c's
//! format (zfs_do_userspace, print_us). The figures are those of the last synced txg, as
//! OpenZFS shows them.

use crate::opts::{comma_list, parse, verb_opts};
use crate::verb::{err_out, Out, State};
use oxzfs::zfs_quota::{read_accounting, Kind, Row};
use oxzfs::nicenum::{nicebytes, nicenum};
use std::cmp::Ordering;

pub const USERSPACE_USAGE: &str = "usage:\n\tuserspace [-Hinp] [-o field[,...]] [-s field] ...\n\t    [-S field] ... [-t type[,...]] <filesystem|snapshot|path>\n";
pub const GROUPSPACE_USAGE: &str = "usage:\n\tgroupspace [-Hinp] [-o field[,...]] [-s field] ...\n\t    [-S field] ... [-t type[,...]] <filesystem|snapshot|path>\n";
pub const PROJECTSPACE_USAGE: &str = "usage:\n\tprojectspace [-Hp] [-o field[,...]] [-s field] ... \n\t    [-S field] ... <filesystem|snapshot|path>\n";

verb_opts!(
    /// The options of the three verbs (projectspace refuses -n, -t and -i).
    SpaceOpts {
    #[arg(short = 'H')]
    scripted: bool,
    #[arg(short = 'n')]
    numeric: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 'i')]
    sid2posix: bool,
    #[arg(short = 'o')]
    fields: Vec<String>,
    #[arg(short = 's')]
    sort: Vec<String>,
    #[arg(short = 'S')]
    sort_desc: Vec<String>,
    #[arg(short = 't')]
    types: Vec<String>,
});

const FIELDS: [(&str, &str); 6] = [("type", "TYPE"), ("name", "NAME"), ("used", "USED"), ("quota", "QUOTA"), ("objused", "OBJUSED"), ("objquota", "OBJQUOTA")];

/// The -t words: (the kinds whose figures they read, the kinds whose rows they print)
/// (us_type_names). oxzfs maps no SIDs, so every id is a POSIX one: the SMB types read the
/// figures (the header is printed) but print no row, as in OpenZFS without SIDs.
fn type_kinds(word: &str) -> Option<(&'static [Kind], &'static [Kind])> {
    match word {
        "posixgroup" => Some((&[Kind::Group], &[Kind::Group])),
        "smbgroup" => Some((&[Kind::Group], &[])),
        "posixuser" => Some((&[Kind::User], &[Kind::User])),
        "smbuser" => Some((&[Kind::User], &[])),
        "all" => Some((&[Kind::Group, Kind::User], &[Kind::Group, Kind::User])),
        _ => None,
    }
}

fn type_name(k: Kind) -> &'static str {
    match k {
        Kind::User => "POSIX User",
        Kind::Group => "POSIX Group",
        Kind::Project => "Project",
    }
}

/// The name of id `id` of kind `k`: the user's or group's name from the system's databases
/// unless `numeric` (None: shown as the number, as for every project).
fn id_name(k: Kind, id: u64, numeric: bool) -> Option<String> {
    if numeric {
        return None;
    }
    let raw = u32::try_from(id).ok()?;
    match k {
        Kind::User => nix_name(unsafe { libc::getpwuid(raw) }.cast(), true),
        Kind::Group => nix_name(unsafe { libc::getgrgid(raw) }.cast(), false),
        Kind::Project => None,
    }
}

/// The name field of a `struct passwd` (`user`) or `struct group` the C library returned.
fn nix_name(p: *const u8, user: bool) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-null result of getpwuid/getgrgid points at the library's static entry;
    // the name is its first field in both structures. The daemon runs commands one at a time.
    let name = unsafe {
        if user {
            (*(p as *const libc::passwd)).pw_name
        } else {
            (*(p as *const libc::group)).gr_name
        }
    };
    if name.is_null() {
        return None;
    }
    Some(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
}

pub fn userspace(st: &mut State, args: &[String]) -> Out {
    run(st, args, &[Kind::User], USERSPACE_USAGE, "userspace")
}

pub fn groupspace(st: &mut State, args: &[String]) -> Out {
    run(st, args, &[Kind::Group], GROUPSPACE_USAGE, "groupspace")
}

pub fn projectspace(st: &mut State, args: &[String]) -> Out {
    run(st, args, &[Kind::Project], PROJECTSPACE_USAGE, "projectspace")
}

fn run(st: &mut State, args: &[String], default_kinds: &[Kind], usage: &str, verb: &str) -> Out {
    let bad = |msg: String| -> Out { (String::new(), format!("{msg}\n{usage}"), 2) };
    if args.is_empty() {
        return (String::new(), usage.to_string(), 2);
    }
    let o: SpaceOpts = match parse(args) {
        Ok(o) => o,
        Err(e) => return bad(e.to_string()),
    };
    let projects = verb == "projectspace";
    if projects {
        for (set, c) in [(o.numeric, 'n'), (!o.types.is_empty(), 't'), (o.sid2posix, 'i')] {
            if set {
                return bad(format!("invalid option '{c}'"));
            }
        }
    }
    match o.operands.len() {
        0 => return bad("missing dataset name".into()),
        1 => {}
        _ => return bad("too many arguments".into()),
    }
    let mut fields = Vec::new();
    let typed = comma_list(&o.fields);
    for f in if typed.is_empty() { FIELDS.iter().map(|f| f.0.to_string()).collect() } else { typed } {
        match FIELDS.iter().position(|x| x.0 == f) {
            Some(i) => fields.push(i),
            None => return (String::new(), format!("invalid type '{f}' for -o option\n"), 255),
        }
    }
    // zfs_add_sort_column: any property name (only type, name, used and quota order the
    // rows), else "invalid field".
    let mut sorts: Vec<(usize, bool)> = Vec::new();
    for (f, desc) in o.sort.iter().map(|f| (f, false)).chain(o.sort_desc.iter().map(|f| (f, true))) {
        match FIELDS[..4].iter().position(|x| x.0 == f) {
            Some(i) => sorts.push((i, desc)),
            None if crate::props::zfs_prop(f).is_some() || f.contains(':') => {}
            None => return bad(format!("invalid field '{f}'")),
        }
    }
    // Always the type, then the name, after what was asked for.
    sorts.extend([(0, false), (1, false)]);
    let (mut read, mut kinds): (Vec<Kind>, Vec<Kind>) = (default_kinds.to_vec(), default_kinds.to_vec());
    if !o.types.is_empty() {
        (read, kinds) = (Vec::new(), Vec::new());
        for t in comma_list(&o.types) {
            match type_kinds(&t) {
                Some((r, k)) => {
                    read.extend_from_slice(r);
                    kinds.extend_from_slice(k);
                }
                None => return (String::new(), format!("invalid type '{t}' for -t option\n"), 255),
            }
        }
    }
    let target = &o.operands[0];
    let Some((name, os)) = (match open_target(st, target) {
        Ok(t) => t,
        Err(e) => return e,
    }) else {
        return (String::new(), "operation is only applicable to filesystems and their snapshots\n".into(), 1);
    };
    let acct = match read_accounting(&os) {
        Ok(a) => a,
        Err(e) => return err_out(e, &format!("cannot get used/quota for {name}")),
    };
    // The project figures' ENOTSUP is passed over (zfs_userspace): nothing to print.
    if projects && !(acct.complete && acct.projects) {
        return (String::new(), String::new(), 0);
    }
    if !acct.complete {
        return (String::new(), format!("cannot get used/quota for {name}: unsupported version or feature\n"), 1);
    }
    // Project ids and -n print numbers (cb_numname).
    let numeric = o.numeric || projects;
    // Every row read sets the columns' widths (userspace_cb); only the kinds asked for print.
    let mut rows: Vec<(Kind, u64, Option<String>, &Row)> = acct.rows.iter().filter(|((k, _), _)| read.contains(k)).map(|(&(k, id), r)| (k, id, id_name(k, id, numeric), r)).collect();
    // userspace_cb: a row that has one of used and quota has both (0 for the missing one),
    // and the same for objused and objquota; a pair it has neither of prints "-".
    let value = |r: &Row, f: usize| -> Option<u64> {
        let (space, objs) = (r.used.is_some() || r.quota.is_some(), acct.objects && (r.objused.is_some() || r.objquota.is_some()));
        match f {
            2 => space.then(|| r.used.unwrap_or(0)),
            3 => space.then(|| r.quota.unwrap_or(0)),
            4 => objs.then(|| r.objused.unwrap_or(0)),
            5 => objs.then(|| r.objquota.unwrap_or(0)),
            _ => None,
        }
    };
    rows.sort_by(|a, b| {
        for &(f, desc) in &sorts {
            let ord = match f {
                0 => (a.0 as u8).cmp(&(b.0 as u8)),
                // us_compare: names as strings when both have one, else as numbers, a name
                // counting as 0.
                1 => match (&a.2, &b.2) {
                    (Some(x), Some(y)) => x.cmp(y),
                    _ => (if a.2.is_some() { 0 } else { a.1 }).cmp(&(if b.2.is_some() { 0 } else { b.1 })),
                },
                _ => value(a.3, f).unwrap_or(0).cmp(&value(b.3, f).unwrap_or(0)),
            };
            let ord = if desc { ord.reverse() } else { ord };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    });
    if rows.is_empty() {
        return (String::new(), String::new(), 0);
    }
    let cell = |k: Kind, id: u64, name: &Option<String>, r: &Row, f: usize| -> String {
        match (f, value(r, f)) {
            (0, _) => type_name(k).to_string(),
            (1, _) => name.clone().unwrap_or_else(|| id.to_string()),
            (_, None) => "-".to_string(),
            (_, Some(v)) if o.parsable => v.to_string(),
            (3 | 5, Some(0)) => "none".to_string(),
            (2 | 3, Some(v)) => nicebytes(v),
            (_, Some(v)) => nicenum(v),
        }
    };
    let all: Vec<(Kind, Vec<String>)> = rows.iter().map(|(k, id, n, r)| (*k, fields.iter().map(|&f| cell(*k, *id, n, r, f)).collect())).collect();
    let widths: Vec<usize> = fields.iter().enumerate().map(|(i, &f)| all.iter().map(|(_, r)| r[i].len()).max().unwrap_or(0).max(FIELDS[f].1.len())).collect();
    let table: Vec<Vec<String>> = all.into_iter().filter(|(k, _)| kinds.contains(k)).map(|(_, r)| r).collect();
    let mut out = String::new();
    if o.scripted {
        for row in &table {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return (out, String::new(), 0);
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, (&f, c)) in fields.iter().zip(cells).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let w = widths[i];
            if f <= 1 {
                s.push_str(&format!("{c:<w$}"));
            } else {
                s.push_str(&format!("{c:>w$}"));
            }
        }
        s.push('\n');
        s
    };
    out.push_str(&line(fields.iter().map(|&f| FIELDS[f].1).collect()));
    for row in &table {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    (out, String::new(), 0)
}

type Target = Option<(String, std::sync::Arc<oxzfs::dmu::Objset>)>;

/// The file system or snapshot `target` names (a dataset name, or a path inside a mounted
/// file system): its name and its synced objset; None when it is a volume.
fn open_target(st: &State, target: &str) -> Result<Target, Out> {
    let name = if target.starts_with('/') {
        let path = std::path::Path::new(target);
        let hit = st.pools.values().flat_map(|i| i.mounts.iter()).filter(|m| path.starts_with(&m.mountpoint)).max_by_key(|m| m.mountpoint.as_os_str().len());
        match hit {
            Some(m) => m.dataset.clone(),
            None => return Err((String::new(), format!("cannot open '{target}': not a ZFS file system\n"), 1)),
        }
    } else {
        target.to_string()
    };
    let pool = name.split(['/', '@']).next().unwrap_or(&name);
    let not_found = || (String::new(), format!("cannot open '{name}': dataset does not exist\n"), 1);
    let Some(imp) = st.pools.get(pool) else { return Err(not_found()) };
    let all = imp.pool.datasets().map_err(|e| err_out(e, &format!("cannot open '{name}'")))?;
    let Some(info) = all.iter().find(|d| d.name == name) else { return Err(not_found()) };
    if info.objset_type != oxzfs_format::objset::DMU_OST_ZFS {
        return Ok(None);
    }
    let os = oxzfs::dmu::Objset::open_id(&imp.pool.spa, &info.ds.bp, info.ds_obj).map_err(|e| err_out(e, &format!("cannot open '{name}'")))?;
    Ok(Some((name, os)))
}

/// The user-quota property `prop` is (userquota@NAME, userused@NAME, ...): its prefix, kind,
/// whether it counts objects, whether it is a quota, and NAME.
fn quota_prop(prop: &str) -> Option<(&'static str, Kind, bool, bool, &str)> {
    let (head, name) = prop.split_once('@')?;
    if name.is_empty() {
        return None;
    }
    let quota = oxzfs::zfs_quota::QUOTA_PROPS.iter().map(|p| (p, true));
    let used = oxzfs::zfs_quota::USED_PROPS.iter().map(|p| (p, false));
    quota.chain(used).find(|(p, _)| p.0.strip_suffix('@') == Some(head)).map(|((prefix, kind, objects), q)| (*prefix, *kind, *objects, q, name))
}

/// Whether `prop` names a user, group or project quota or figure (for `zfs get`).
pub fn is_quota_prop(prop: &str) -> bool {
    quota_prop(prop).is_some()
}

/// The id NAME stands for: a number, else a user's or group's name in the system's
/// databases (userquota_propname_decode; SIDs are not mapped here). Projects are numbers.
fn resolve_id(kind: Kind, name: &str) -> Option<u64> {
    if let Ok(n) = name.parse::<u64>() {
        return Some(n);
    }
    let c = std::ffi::CString::new(name).ok()?;
    match kind {
        Kind::User => {
            // SAFETY: getpwnam with a NUL-terminated name; the entry is read at once.
            let p = unsafe { libc::getpwnam(c.as_ptr()) };
            (!p.is_null()).then(|| unsafe { (*p).pw_uid } as u64)
        }
        Kind::Group => {
            let g = unsafe { libc::getgrnam(c.as_ptr()) };
            (!g.is_null()).then(|| unsafe { (*g).gr_gid } as u64)
        }
        Kind::Project => None,
    }
}

/// `zfs get` of a user-quota property of dataset `info` of `pool`: (value, raw, source); "-"
/// where it does not apply or cannot be read (zfs_prop_get_userquota failing).
pub fn get_quota_prop(pool: &oxzfs::pool::Pool, info: &oxzfs::dsl::DatasetInfo, prop: &str) -> (String, String, String) {
    let none = || ("-".to_string(), "-".to_string(), "-".to_string());
    let Some((_, kind, objects, quota, name)) = quota_prop(prop) else { return none() };
    let Some(id) = resolve_id(kind, name) else { return none() };
    if info.objset_type != oxzfs_format::objset::DMU_OST_ZFS {
        return none();
    }
    let Ok(os) = oxzfs::dmu::Objset::open_id(&pool.spa, &info.ds.bp, info.ds_obj) else { return none() };
    let Ok(acct) = read_accounting(&os) else { return none() };
    if !acct.complete || objects && !acct.objects || kind == Kind::Project && !acct.projects {
        return none();
    }
    let row = acct.rows.get(&(kind, id)).cloned().unwrap_or_default();
    let v = match (objects, quota) {
        (false, false) => row.used,
        (false, true) => row.quota,
        (true, false) => row.objused,
        (true, true) => row.objquota,
    }
    .unwrap_or(0);
    let shown = if quota && v == 0 {
        "none".to_string()
    } else if objects {
        nicenum(v)
    } else {
        nicebytes(v)
    };
    (shown, v.to_string(), "local".to_string())
}

/// `zfs set userquota@NAME=SIZE` (and the group, object and project quotas) on file system
/// `ds`: Ok(false) when `assign` is not such a property.
pub fn set_quota_prop(h: &oxzfs::txg::PoolHandle, pool: &oxzfs::pool::Pool, ds: &str, assign: &str) -> Result<bool, oxzfs::ZfsError> {
    use oxzfs::ZfsError;
    let Some((prop, value)) = assign.split_once('=') else { return Ok(false) };
    let Some(head) = prop.split_once('@').map(|(h, _)| h) else { return Ok(false) };
    let known = |t: &[(&str, Kind, bool)]| t.iter().any(|p| p.0.strip_suffix('@') == Some(head));
    if known(&oxzfs::zfs_quota::USED_PROPS) {
        return Err(ZfsError::Invalid(format!("'{prop}' is readonly")));
    }
    if !known(&oxzfs::zfs_quota::QUOTA_PROPS) {
        return Ok(false);
    }
    // A quota property with an empty name.
    let Some((prefix, kind, _, _, name)) = quota_prop(prop) else {
        return Err(ZfsError::Invalid(format!("'{prop}' has an invalid user/group name")));
    };
    let Some(id) = resolve_id(kind, name) else {
        return Err(ZfsError::Invalid(format!("'{prop}' has an invalid user/group name")));
    };
    let quota = match value {
        "none" => 0,
        v => match oxzfs::dsl::encode_prop("quota", v) {
            Ok(oxzfs::dsl::PropStore::Num(n)) => n,
            _ => return Err(ZfsError::Invalid(format!("bad numeric value '{v}'"))),
        },
    };
    let info = pool.datasets()?.into_iter().find(|d| d.name == ds).ok_or_else(|| ZfsError::NotFound(format!("cannot open '{ds}': dataset does not exist")))?;
    if ds.contains('@') || info.objset_type != oxzfs_format::objset::DMU_OST_ZFS {
        return Err(ZfsError::Invalid(format!("'{prop}' does not apply to datasets of this type")));
    }
    let projects = h.lock().feature_enabled("org.zfsonlinux:project_quota");
    h.with_fs(info.ds_obj, |os, _| oxzfs::zfs_quota::set_quota(os, prefix, id, quota, projects))?;
    Ok(true)
}
