//! Property column metadata as OpenZFS's tables give it (zfs_prop.c, zpool_prop.c): the column
//! heading each property prints under in `zfs list -o` / `zpool list -o`, whether its values
//! are numbers (right-aligned, at least 5 wide, as "20.4M" is), and the short names the
//! commands accept (a property's column name, case-insensitively, also names it).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Number,
    Index,
    Text,
}

pub const ZFS_COLUMNS: &[(&str, &str, Kind)] = &[
    ("redundant_metadata", "REDUND_MD", Kind::Index),
    ("sync", "SYNC", Kind::Index),
    ("checksum", "CHECKSUM", Kind::Index),
    ("dedup", "DEDUP", Kind::Index),
    ("compression", "COMPRESS", Kind::Index),
    ("snapdir", "SNAPDIR", Kind::Index),
    ("snapdev", "SNAPDEV", Kind::Index),
    ("aclmode", "ACLMODE", Kind::Index),
    ("acltype", "ACLTYPE", Kind::Index),
    ("aclinherit", "ACLINHERIT", Kind::Index),
    ("copies", "COPIES", Kind::Index),
    ("primarycache", "PRIMARYCACHE", Kind::Index),
    ("secondarycache", "SECONDARYCACHE", Kind::Index),
    ("logbias", "LOGBIAS", Kind::Index),
    ("xattr", "XATTR", Kind::Index),
    ("dnodesize", "DNSIZE", Kind::Index),
    ("volmode", "VOLMODE", Kind::Index),
    ("atime", "ATIME", Kind::Index),
    ("relatime", "RELATIME", Kind::Index),
    ("devices", "DEVICES", Kind::Index),
    ("exec", "EXEC", Kind::Index),
    ("setuid", "SETUID", Kind::Index),
    ("readonly", "RDONLY", Kind::Index),
    ("jailed", "JAILED", Kind::Index),
    ("zoned", "ZONED", Kind::Index),
    ("vscan", "VSCAN", Kind::Index),
    ("nbmand", "NBMAND", Kind::Index),
    ("overlay", "OVERLAY", Kind::Index),
    ("version", "VERSION", Kind::Index),
    ("canmount", "CANMOUNT", Kind::Index),
    ("mounted", "MOUNTED", Kind::Index),
    ("defer_destroy", "DEFER_DESTROY", Kind::Index),
    ("keystatus", "KEYSTATUS", Kind::Index),
    ("normalization", "NORMALIZATION", Kind::Index),
    ("casesensitivity", "CASE", Kind::Index),
    ("keyformat", "KEYFORMAT", Kind::Index),
    ("encryption", "ENCRYPTION", Kind::Index),
    ("utf8only", "UTF8ONLY", Kind::Index),
    ("origin", "ORIGIN", Kind::Text),
    ("clones", "CLONES", Kind::Text),
    ("mountpoint", "MOUNTPOINT", Kind::Text),
    ("sharenfs", "SHARENFS", Kind::Text),
    ("type", "TYPE", Kind::Text),
    ("sharesmb", "SHARESMB", Kind::Text),
    ("mlslabel", "MLSLABEL", Kind::Text),
    ("context", "CONTEXT", Kind::Text),
    ("fscontext", "FSCONTEXT", Kind::Text),
    ("defcontext", "DEFCONTEXT", Kind::Text),
    ("rootcontext", "ROOTCONTEXT", Kind::Text),
    ("receive_resume_token", "RESUMETOK", Kind::Text),
    ("encryptionroot", "ENCROOT", Kind::Text),
    ("keylocation", "KEYLOCATION", Kind::Text),
    ("redact_snaps", "RSNAPS", Kind::Text),
    ("used", "USED", Kind::Number),
    ("available", "AVAIL", Kind::Number),
    ("referenced", "REFER", Kind::Number),
    ("compressratio", "RATIO", Kind::Number),
    ("refcompressratio", "REFRATIO", Kind::Number),
    ("volblocksize", "VOLBLOCK", Kind::Number),
    ("usedbysnapshots", "USEDSNAP", Kind::Number),
    ("usedbydataset", "USEDDS", Kind::Number),
    ("usedbychildren", "USEDCHILD", Kind::Number),
    ("usedbyrefreservation", "USEDREFRESERV", Kind::Number),
    ("userrefs", "USERREFS", Kind::Number),
    ("written", "WRITTEN", Kind::Number),
    ("logicalused", "LUSED", Kind::Number),
    ("logicalreferenced", "LREFER", Kind::Number),
    ("filesystem_count", "FSCOUNT", Kind::Number),
    ("snapshot_count", "SSCOUNT", Kind::Number),
    ("guid", "GUID", Kind::Number),
    ("createtxg", "CREATETXG", Kind::Number),
    ("pbkdf2iters", "PBKDF2ITERS", Kind::Number),
    ("objsetid", "OBJSETID", Kind::Number),
    ("quota", "QUOTA", Kind::Number),
    ("reservation", "RESERV", Kind::Number),
    ("volsize", "VOLSIZE", Kind::Number),
    ("refquota", "REFQUOTA", Kind::Number),
    ("refreservation", "REFRESERV", Kind::Number),
    ("filesystem_limit", "FSLIMIT", Kind::Number),
    ("snapshot_limit", "SSLIMIT", Kind::Number),
    ("recordsize", "RECSIZE", Kind::Number),
    ("special_small_blocks", "SPECIAL_SMALL_BLOCKS", Kind::Number),
    ("creation", "CREATION", Kind::Text),
    ("name", "NAME", Kind::Text),
];

/// zpool properties: (name, column, kind). `health` is a number internally: right-aligned, 8 wide.
pub const ZPOOL_COLUMNS: &[(&str, &str, Kind)] = &[
    ("name", "NAME", Kind::Text),
    ("size", "SIZE", Kind::Number),
    ("allocated", "ALLOC", Kind::Number),
    ("free", "FREE", Kind::Number),
    ("checkpoint", "CKPOINT", Kind::Number),
    ("expandsize", "EXPANDSZ", Kind::Number),
    ("fragmentation", "FRAG", Kind::Number),
    ("capacity", "CAP", Kind::Number),
    ("dedupratio", "DEDUP", Kind::Number),
    ("health", "HEALTH", Kind::Number),
    ("altroot", "ALTROOT", Kind::Text),
    ("guid", "GUID", Kind::Number),
    ("version", "VERSION", Kind::Number),
    ("readonly", "RDONLY", Kind::Index),
    ("comment", "COMMENT", Kind::Text),
    ("freeing", "FREEING", Kind::Number),
    ("leaked", "LEAKED", Kind::Number),
    ("ashift", "ASHIFT", Kind::Number),
    ("listsnapshots", "LISTSNAPS", Kind::Index),
    ("autoexpand", "EXPAND", Kind::Index),
    ("autoreplace", "REPLACE", Kind::Index),
    ("failmode", "FAILMODE", Kind::Index),
    ("cachefile", "CACHEFILE", Kind::Text),
    ("bootfs", "BOOTFS", Kind::Text),
    ("delegation", "DELEGATION", Kind::Index),
    ("load_guid", "LOAD_GUID", Kind::Number),
    ("compatibility", "COMPATIBILITY", Kind::Text),
    ("multihost", "MULTIHOST", Kind::Index),
    ("autotrim", "AUTOTRIM", Kind::Index),
];

/// Short names `zfs` accepts besides the column names.
fn zfs_alias(s: &str) -> &str {
    match s {
        "avail" => "available",
        "refer" => "referenced",
        "compress" => "compression",
        "reserv" => "reservation",
        "refreserv" => "refreservation",
        "recsize" => "recordsize",
        "volblock" => "volblocksize",
        "rdonly" => "readonly",
        other => other,
    }
}

fn find<'a>(table: &'a [(&'a str, &'a str, Kind)], s: &str) -> Option<&'a (&'a str, &'a str, Kind)> {
    table.iter().find(|(n, _, _)| *n == s).or_else(|| table.iter().find(|(_, c, _)| c.eq_ignore_ascii_case(s)))
}

/// The canonical name of a zfs property given as typed (full name, column name or short form);
/// user properties (with a ':') pass through. None if unknown.
pub fn zfs_prop(s: &str) -> Option<String> {
    if s.contains(':') {
        return Some(s.to_string());
    }
    find(ZFS_COLUMNS, zfs_alias(s)).map(|p| p.0.to_string())
}

/// (column heading, right-aligned, minimum width) of a zfs property in `zfs list`.
pub fn zfs_column(prop: &str) -> (String, bool, usize) {
    match find(ZFS_COLUMNS, prop) {
        Some((_, col, Kind::Number)) => (col.to_string(), true, col.len().max(5)),
        Some((_, col, _)) => (col.to_string(), false, col.len()),
        None => (prop.to_uppercase(), false, prop.len()),
    }
}

/// The canonical name of a zpool property (full name or column name).
pub fn zpool_prop(s: &str) -> Option<String> {
    let s = match s {
        "alloc" => "allocated",
        "cap" => "capacity",
        "frag" => "fragmentation",
        "dedup" => "dedupratio",
        "expandsz" => "expandsize",
        "ckpoint" => "checkpoint",
        other => other,
    };
    find(ZPOOL_COLUMNS, s).map(|p| p.0.to_string())
}

/// (column heading, right-aligned, minimum width) of a zpool property in `zpool list`.
pub fn zpool_column(prop: &str) -> (String, bool, usize) {
    match find(ZPOOL_COLUMNS, prop) {
        Some((_, col, Kind::Number)) => (col.to_string(), true, if prop == "health" { 8 } else { col.len().max(5) }),
        Some((_, col, _)) => (col.to_string(), false, col.len()),
        None => (prop.to_uppercase(), false, prop.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_columns() {
        assert_eq!(zfs_prop("avail").as_deref(), Some("available"));
        assert_eq!(zfs_prop("AVAIL").as_deref(), Some("available"));
        assert_eq!(zfs_prop("ratio").as_deref(), Some("compressratio"));
        assert_eq!(zfs_prop("refer").as_deref(), Some("referenced"));
        assert_eq!(zfs_prop("com.example:tag").as_deref(), Some("com.example:tag"));
        assert_eq!(zfs_prop("nonsense"), None);
        assert_eq!(zfs_column("available"), ("AVAIL".into(), true, 5));
        assert_eq!(zfs_column("used"), ("USED".into(), true, 5));
        assert_eq!(zfs_column("mountpoint"), ("MOUNTPOINT".into(), false, 10));
        assert_eq!(zfs_column("compressratio").0, "RATIO");
        assert!(!zfs_column("creation").1);
        assert_eq!(zpool_prop("alloc").as_deref(), Some("allocated"));
        assert_eq!(zpool_prop("CAP").as_deref(), Some("capacity"));
        assert_eq!(zpool_column("health"), ("HEALTH".into(), true, 8));
        assert_eq!(zpool_column("fragmentation"), ("FRAG".into(), true, 5));
        assert_eq!(zpool_column("altroot"), ("ALTROOT".into(), false, 7));
    }
}
