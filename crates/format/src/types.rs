//! DMU object types: numbers, the names zdb prints for them, and which are metadata.
//!
//! Types 0..54 are the fixed table of OpenZFS 2.1 (`dmu_object_type_t`, `dmu_ot[]`). Newer
//! types are encoded as `DMU_OT_NEWTYPE | flags | byteswap index`: bit 0x80 set, 0x40 for
//! metadata, 0x20 for encrypted, the low 5 bits naming a byteswap function.

/// Number of fixed DMU object types (DMU_OT_NUMTYPES in 2.1).
pub const DMU_OT_NUMTYPES: u8 = 54;
pub const DMU_OT_NEWTYPE: u8 = 0x80;
pub const DMU_OT_METADATA: u8 = 0x40;
pub const DMU_OT_ENCRYPTED: u8 = 0x20;
pub const DMU_OT_BYTESWAP_MASK: u8 = 0x1f;

pub const DMU_OT_NONE: u8 = 0;
pub const DMU_OT_OBJECT_DIRECTORY: u8 = 1;
pub const DMU_OT_OBJECT_ARRAY: u8 = 2;
pub const DMU_OT_PACKED_NVLIST: u8 = 3;
pub const DMU_OT_PACKED_NVLIST_SIZE: u8 = 4;
pub const DMU_OT_BPOBJ: u8 = 5;
pub const DMU_OT_BPOBJ_HDR: u8 = 6;
pub const DMU_OT_SPACE_MAP_HEADER: u8 = 7;
pub const DMU_OT_SPACE_MAP: u8 = 8;
pub const DMU_OT_INTENT_LOG: u8 = 9;
pub const DMU_OT_DNODE: u8 = 10;
pub const DMU_OT_OBJSET: u8 = 11;
pub const DMU_OT_DSL_DIR: u8 = 12;
pub const DMU_OT_DSL_DIR_CHILD_MAP: u8 = 13;
pub const DMU_OT_DSL_DS_SNAP_MAP: u8 = 14;
pub const DMU_OT_DSL_PROPS: u8 = 15;
pub const DMU_OT_DSL_DATASET: u8 = 16;
pub const DMU_OT_ZNODE: u8 = 17;
pub const DMU_OT_OLDACL: u8 = 18;
pub const DMU_OT_PLAIN_FILE_CONTENTS: u8 = 19;
pub const DMU_OT_DIRECTORY_CONTENTS: u8 = 20;
pub const DMU_OT_MASTER_NODE: u8 = 21;
pub const DMU_OT_UNLINKED_SET: u8 = 22;
pub const DMU_OT_ZVOL: u8 = 23;
pub const DMU_OT_ZVOL_PROP: u8 = 24;
pub const DMU_OT_PLAIN_OTHER: u8 = 25;
pub const DMU_OT_UINT64_OTHER: u8 = 26;
pub const DMU_OT_ZAP_OTHER: u8 = 27;
pub const DMU_OT_ERROR_LOG: u8 = 28;
pub const DMU_OT_SPA_HISTORY: u8 = 29;
pub const DMU_OT_SPA_HISTORY_OFFSETS: u8 = 30;
pub const DMU_OT_POOL_PROPS: u8 = 31;
pub const DMU_OT_DSL_PERMS: u8 = 32;
pub const DMU_OT_ACL: u8 = 33;
pub const DMU_OT_SYSACL: u8 = 34;
pub const DMU_OT_FUID: u8 = 35;
pub const DMU_OT_FUID_SIZE: u8 = 36;
pub const DMU_OT_NEXT_CLONES: u8 = 37;
pub const DMU_OT_SCAN_QUEUE: u8 = 38;
pub const DMU_OT_USERGROUP_USED: u8 = 39;
pub const DMU_OT_USERGROUP_QUOTA: u8 = 40;
pub const DMU_OT_USERREFS: u8 = 41;
pub const DMU_OT_DDT_ZAP: u8 = 42;
pub const DMU_OT_DDT_STATS: u8 = 43;
pub const DMU_OT_SA: u8 = 44;
pub const DMU_OT_SA_MASTER_NODE: u8 = 45;
pub const DMU_OT_SA_ATTR_REGISTRATION: u8 = 46;
pub const DMU_OT_SA_ATTR_LAYOUTS: u8 = 47;
pub const DMU_OT_SCAN_XLATE: u8 = 48;
pub const DMU_OT_DEDUP: u8 = 49;
pub const DMU_OT_DEADLIST: u8 = 50;
pub const DMU_OT_DEADLIST_HDR: u8 = 51;
pub const DMU_OT_DSL_CLONES: u8 = 52;
pub const DMU_OT_BPOBJ_SUBOBJ: u8 = 53;

/// (zdb name, is metadata) of each fixed type.
const TABLE: [(&str, bool); 54] = [
    ("unallocated", true),
    ("object directory", true),
    ("object array", true),
    ("packed nvlist", true),
    ("packed nvlist size", true),
    ("bpobj", true),
    ("bpobj header", true),
    ("SPA space map header", true),
    ("SPA space map", true),
    ("ZIL intent log", true),
    ("DMU dnode", true),
    ("DMU objset", true),
    ("DSL directory", true),
    ("DSL directory child map", true),
    ("DSL dataset snap map", true),
    ("DSL props", true),
    ("DSL dataset", true),
    ("ZFS znode", true),
    ("ZFS V0 ACL", true),
    ("ZFS plain file", false),
    ("ZFS directory", true),
    ("ZFS master node", true),
    ("ZFS delete queue", true),
    ("zvol object", false),
    ("zvol prop", true),
    ("other uint8[]", false),
    ("other uint64[]", false),
    ("other ZAP", true),
    ("persistent error log", true),
    ("SPA history", true),
    ("SPA history offsets", true),
    ("Pool properties", true),
    ("DSL permissions", true),
    ("ZFS ACL", true),
    ("ZFS SYSACL", true),
    ("FUID table", true),
    ("FUID table size", true),
    ("DSL dataset next clones", true),
    ("scan work queue", true),
    ("ZFS user/group/project used", true),
    ("ZFS user/group/project quota", true),
    ("snapshot refcount tags", true),
    ("DDT ZAP algorithm", true),
    ("DDT statistics", true),
    ("System attributes", true),
    ("SA master node", true),
    ("SA attr registration", true),
    ("SA attr layouts", true),
    ("scan translations", true),
    ("deduplicated block", false),
    ("DSL deadlist map", true),
    ("DSL deadlist map hdr", true),
    ("DSL dir clones", true),
    ("bpobj subobj", true),
];

/// Byteswap functions (`dmu_object_byteswap_t`), the low 5 bits of a new-style type.
pub const DMU_BSWAP_UINT8: u8 = 0;
pub const DMU_BSWAP_UINT16: u8 = 1;
pub const DMU_BSWAP_UINT32: u8 = 2;
pub const DMU_BSWAP_UINT64: u8 = 3;
pub const DMU_BSWAP_ZAP: u8 = 4;
pub const DMU_BSWAP_DNODE: u8 = 5;
pub const DMU_BSWAP_OBJSET: u8 = 6;
pub const DMU_BSWAP_ZNODE: u8 = 7;
pub const DMU_BSWAP_OLDACL: u8 = 8;
pub const DMU_BSWAP_ACL: u8 = 9;
pub const DMU_BSWAP_NUMFUNCS: u8 = 10;
/// Names of the byteswap functions (`dmu_ot_byteswap[].ob_name`).
const BSWAP_NAMES: [&str; 10] = ["uint8", "uint16", "uint32", "uint64", "zap", "dnode", "objset", "znode", "oldacl", "acl"];

/// DMU_OT(byteswap, metadata, encrypted): a new-style object type.
pub const fn dmu_ot(byteswap: u8, metadata: bool, encrypted: bool) -> u8 {
    DMU_OT_NEWTYPE
        | if metadata { DMU_OT_METADATA } else { 0 }
        | if encrypted { DMU_OT_ENCRYPTED } else { 0 }
        | (byteswap & DMU_OT_BYTESWAP_MASK)
}
pub const DMU_OTN_UINT8_DATA: u8 = dmu_ot(DMU_BSWAP_UINT8, false, false);
pub const DMU_OTN_UINT8_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT8, true, false);
pub const DMU_OTN_UINT16_DATA: u8 = dmu_ot(DMU_BSWAP_UINT16, false, false);
pub const DMU_OTN_UINT16_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT16, true, false);
pub const DMU_OTN_UINT32_DATA: u8 = dmu_ot(DMU_BSWAP_UINT32, false, false);
pub const DMU_OTN_UINT32_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT32, true, false);
pub const DMU_OTN_UINT64_DATA: u8 = dmu_ot(DMU_BSWAP_UINT64, false, false);
pub const DMU_OTN_UINT64_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT64, true, false);
pub const DMU_OTN_ZAP_DATA: u8 = dmu_ot(DMU_BSWAP_ZAP, false, false);
pub const DMU_OTN_ZAP_METADATA: u8 = dmu_ot(DMU_BSWAP_ZAP, true, false);
pub const DMU_OTN_UINT8_ENC_DATA: u8 = dmu_ot(DMU_BSWAP_UINT8, false, true);
pub const DMU_OTN_UINT8_ENC_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT8, true, true);
pub const DMU_OTN_UINT16_ENC_DATA: u8 = dmu_ot(DMU_BSWAP_UINT16, false, true);
pub const DMU_OTN_UINT16_ENC_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT16, true, true);
pub const DMU_OTN_UINT32_ENC_DATA: u8 = dmu_ot(DMU_BSWAP_UINT32, false, true);
pub const DMU_OTN_UINT32_ENC_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT32, true, true);
pub const DMU_OTN_UINT64_ENC_DATA: u8 = dmu_ot(DMU_BSWAP_UINT64, false, true);
pub const DMU_OTN_UINT64_ENC_METADATA: u8 = dmu_ot(DMU_BSWAP_UINT64, true, true);
pub const DMU_OTN_ZAP_ENC_DATA: u8 = dmu_ot(DMU_BSWAP_ZAP, false, true);
pub const DMU_OTN_ZAP_ENC_METADATA: u8 = dmu_ot(DMU_BSWAP_ZAP, true, true);

/// Rows of zdb's `-bb` table past the fixed types (`ZDB_OT_*` in cmd/zdb/zdb.c): frees
/// deferred to a later txg, dedup auto-ditto copies, every new-style type, and the total.
pub const ZDB_OT_DEFERRED: usize = DMU_OT_NUMTYPES as usize;
pub const ZDB_OT_DITTO: usize = DMU_OT_NUMTYPES as usize + 1;
pub const ZDB_OT_OTHER: usize = DMU_OT_NUMTYPES as usize + 2;
pub const ZDB_OT_TOTAL: usize = DMU_OT_NUMTYPES as usize + 3;

/// DMU_OT_IS_VALID.
pub fn ot_is_valid(t: u8) -> bool {
    if t & DMU_OT_NEWTYPE != 0 {
        t & DMU_OT_BYTESWAP_MASK < DMU_BSWAP_NUMFUNCS
    } else {
        t < DMU_OT_NUMTYPES
    }
}

/// The byteswap function of a type: DMU_OT_BYTESWAP for new-style types, `ot_byteswap` of
/// the fixed table otherwise (None for an invalid type).
pub fn ot_byteswap(t: u8) -> Option<u8> {
    if t & DMU_OT_NEWTYPE != 0 {
        let b = t & DMU_OT_BYTESWAP_MASK;
        return (b < DMU_BSWAP_NUMFUNCS).then_some(b);
    }
    BYTESWAP.get(t as usize).copied()
}

/// Name of a byteswap function ("uint64", "zap", ...).
pub fn bswap_name(b: u8) -> &'static str {
    BSWAP_NAMES.get(b as usize).copied().unwrap_or("UNKNOWN")
}

/// The `-bb` row zdb counts a block of type `t` in: the type itself for a fixed type,
/// [`ZDB_OT_OTHER`] for every new-style (DMU_OT_NEWTYPE) type.
pub fn zdb_bucket(t: u8) -> usize {
    if t & DMU_OT_NEWTYPE != 0 {
        ZDB_OT_OTHER
    } else {
        t as usize
    }
}

/// The label of row `row` of zdb's `-bb` table (rows 0..=ZDB_OT_TOTAL).
pub fn zdb_row_name(row: usize) -> &'static str {
    match row {
        ZDB_OT_DEFERRED => "deferred free",
        ZDB_OT_DITTO => "dedup ditto",
        ZDB_OT_OTHER => "other",
        ZDB_OT_TOTAL => "Total",
        r if r < DMU_OT_NUMTYPES as usize => TABLE[r].0,
        _ => "UNKNOWN",
    }
}

/// The name of an object type as zdb's `-bb` table labels it: `dmu_ot[].ot_name` for the fixed
/// types, "other" (the row every new-style type is counted in) for DMU_OT_NEWTYPE types,
/// "UNKNOWN" for numbers past the table.
pub fn ot_name(t: u8) -> &'static str {
    if t & DMU_OT_NEWTYPE != 0 {
        return "other";
    }
    TABLE.get(t as usize).map(|e| e.0).unwrap_or("UNKNOWN")
}

/// The type as snprintf_blkptr prints it inside a bp: the fixed name, or for a new-style type
/// "bswap metadata zap" / "bswap data uint64" and so on.
pub fn bp_type_name(t: u8) -> String {
    if t & DMU_OT_NEWTYPE != 0 {
        format!("bswap {} {}", if ot_is_metadata(t) { "metadata" } else { "data" }, bswap_name(t & DMU_OT_BYTESWAP_MASK))
    } else {
        TABLE.get(t as usize).map(|e| e.0).unwrap_or("UNKNOWN").to_string()
    }
}

/// The type as zdb's object listing (`-dd`) names it (zdb_ot_name): the fixed name, or the
/// byteswap function's name for a new-style type.
pub fn zdb_ot_name(t: u8) -> &'static str {
    if t & DMU_OT_NEWTYPE != 0 {
        return bswap_name(t & DMU_OT_BYTESWAP_MASK);
    }
    TABLE.get(t as usize).map(|e| e.0).unwrap_or("UNKNOWN")
}

/// ZDB_OT_TYPE: the fixed type zdb uses to pick a dumper for a type (new-style ZAPs and
/// uint64 arrays map to "other ZAP" / "other uint64[]"; anything else new-style to NUMTYPES).
pub fn zdb_ot_type(t: u8) -> u8 {
    match t {
        t if t < DMU_OT_NUMTYPES => t,
        DMU_OTN_ZAP_DATA | DMU_OTN_ZAP_METADATA => DMU_OT_ZAP_OTHER,
        DMU_OTN_UINT64_DATA | DMU_OTN_UINT64_METADATA => DMU_OT_UINT64_OTHER,
        _ => DMU_OT_NUMTYPES,
    }
}

/// Byteswap function of each fixed type (`dmu_ot[].ot_byteswap`).
const BYTESWAP: [u8; 54] = [
    0, 4, 3, 0, 3, 3, 3, 3, 3, 3, 5, 6, 3, 4, 4, 4, 3, 7, 8, 0, 4, 4, 4, 0, 4, 0, 3, 4, 4, 0, 3, 4, 4, 9, 0, 0, 3, 4, 4, 4, 4, 4, 4, 4, 0, 4, 4, 4, 4, 0, 4, 3, 4, 3,
];

/// DMU_OT_IS_ENCRYPTED: blocks of this type are encrypted in an encrypted dataset (others
/// are only authenticated).
pub fn ot_is_encrypted(t: u8) -> bool {
    if t & DMU_OT_NEWTYPE != 0 {
        return t & DMU_OT_ENCRYPTED != 0;
    }
    ENCRYPTED.get(t as usize).copied().unwrap_or(false)
}

const ENCRYPTED: [bool; 54] = [false, false, false, false, false, false, false, false, false, true, true, false, false, false, false, false, false, false, true, true, true, false, true, true, false, true, true, false, false, false, false, false, false, true, true, true, false, false, false, true, true, false, false, false, true, true, true, true, false, true, false, false, false, false];

/// DMU_OT_IS_METADATA.
pub fn ot_is_metadata(t: u8) -> bool {
    if t & DMU_OT_NEWTYPE != 0 {
        return t & DMU_OT_METADATA != 0;
    }
    TABLE.get(t as usize).map(|e| e.1).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn names_match_zdb() {
        assert_eq!(ot_name(DMU_OT_PLAIN_FILE_CONTENTS), "ZFS plain file");
        assert_eq!(ot_name(DMU_OT_BPOBJ_SUBOBJ), "bpobj subobj");
        assert_eq!(ot_name(DMU_OT_DNODE), "DMU dnode");
        assert!(ot_is_metadata(DMU_OT_DNODE));
        assert!(!ot_is_metadata(DMU_OT_PLAIN_FILE_CONTENTS));
        assert!(ot_is_metadata(DMU_OT_NEWTYPE | DMU_OT_METADATA | 3));
    }

    /// The type column of zdb -bb on the `basic` fixture, row by row.
    #[test]
    fn rows_match_zdb_bb() {
        let txt = include_str!("../tests/data/fx-zdb-blocks-basic.txt");
        let rows: Vec<&str> = txt
            .lines()
            .skip_while(|l| !l.starts_with("Blocks\tLSIZE"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.splitn(8, '\t').nth(7).unwrap())
            .collect();
        assert_eq!(rows.len(), ZDB_OT_TOTAL + 1);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(zdb_row_name(i), *r, "row {i}");
            if i < DMU_OT_NUMTYPES as usize {
                assert_eq!(ot_name(i as u8), *r);
            }
        }
    }

    #[test]
    fn new_style_types() {
        assert_eq!(DMU_OTN_ZAP_METADATA, 0xc4);
        assert_eq!(DMU_OTN_UINT64_ENC_DATA, 0xa3);
        assert_eq!(zdb_bucket(DMU_OTN_ZAP_METADATA), ZDB_OT_OTHER);
        assert_eq!(zdb_bucket(DMU_OT_ZNODE), DMU_OT_ZNODE as usize);
        assert_eq!(ot_name(DMU_OTN_UINT64_DATA), "other");
        assert_eq!(bp_type_name(DMU_OTN_ZAP_METADATA), "bswap metadata zap");
        assert_eq!(bp_type_name(DMU_OTN_UINT8_DATA), "bswap data uint8");
        assert_eq!(zdb_ot_name(DMU_OTN_UINT64_METADATA), "uint64");
        assert_eq!(zdb_ot_type(DMU_OTN_ZAP_DATA), DMU_OT_ZAP_OTHER);
        assert_eq!(zdb_ot_type(DMU_OTN_UINT64_METADATA), DMU_OT_UINT64_OTHER);
        assert_eq!(zdb_ot_type(DMU_OTN_UINT8_METADATA), DMU_OT_NUMTYPES);
        assert!(ot_is_valid(DMU_OTN_ZAP_ENC_METADATA) && !ot_is_valid(0x80 | 12) && !ot_is_valid(54));
        assert!(ot_is_encrypted(DMU_OTN_UINT8_ENC_DATA) && !ot_is_encrypted(DMU_OTN_UINT8_DATA));
        assert!(!ot_is_metadata(DMU_OTN_ZAP_DATA));
        assert_eq!(ot_byteswap(DMU_OT_DNODE), Some(DMU_BSWAP_DNODE));
        assert_eq!(ot_byteswap(DMU_OT_DIRECTORY_CONTENTS), Some(DMU_BSWAP_ZAP));
        assert_eq!(ot_byteswap(DMU_OTN_UINT16_DATA), Some(DMU_BSWAP_UINT16));
        assert_eq!(ot_name(200 & 0x7f), "UNKNOWN");
    }
}

