//! System attributes (ZPL version 5 and later): a znode's attributes packed in its bonus
//! buffer (bonus type DMU_OT_SA) and, when they do not fit, in a spill block.
//!
//! ```text
//!  sa_hdr_phys: magic u32 (0x2F505A) | layout_info u16 (layout number: 10 bits,
//!               header size in 8-byte units: 6 bits) | lengths u16[] (one per variable-length
//!               attribute of the layout)
//!  then the attributes of the layout, in layout order, each starting 8-byte aligned
//! ```
//! Which attributes a layout holds, and each attribute's number and fixed length (0 for
//! variable), come from the SA master node's REGISTRY and LAYOUTS ZAPs (read by the engine).

use crate::bytes::{slice, u16_at, u32_at, u64_at};
use crate::{FormatError, Result};
use std::collections::BTreeMap;

pub const SA_MAGIC: u32 = 0x2F505A;

#[derive(Clone, Debug)]
pub struct SaAttr {
    pub name: String,
    pub num: u16,
    pub length: u16,
    pub byteswap: u8,
}

impl SaAttr {
    /// From a REGISTRY ZAP entry: attr number (16 bits), byteswap (8), length (16).
    pub fn from_registration(name: &str, value: u64) -> SaAttr {
        SaAttr {
            name: name.to_string(),
            num: (value & 0xffff) as u16,
            byteswap: ((value >> 16) & 0xff) as u8,
            length: ((value >> 24) & 0xffff) as u16,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct SaRegistry {
    pub attrs: BTreeMap<u16, SaAttr>,
    pub layouts: BTreeMap<u64, Vec<u16>>,
}

/// The ZPL attribute table (zfs_attr_table): name, fixed length (0 = variable) and byteswap
/// type (sa_bswap_type_t: 0 uint64 array, 3 uint8 array, 4 ACL), in attribute order. A ZPL
/// objset numbers them by their index here: the 16 legacy attributes keep their legacy numbers
/// and sa_setup numbers the others, in this order, from 16.
pub const ZPL_ATTRS: &[(&str, u16, u8)] = &[
    ("ZPL_ATIME", 16, 0),
    ("ZPL_MTIME", 16, 0),
    ("ZPL_CTIME", 16, 0),
    ("ZPL_CRTIME", 16, 0),
    ("ZPL_GEN", 8, 0),
    ("ZPL_MODE", 8, 0),
    ("ZPL_SIZE", 8, 0),
    ("ZPL_PARENT", 8, 0),
    ("ZPL_LINKS", 8, 0),
    ("ZPL_XATTR", 8, 0),
    ("ZPL_RDEV", 8, 0),
    ("ZPL_FLAGS", 8, 0),
    ("ZPL_UID", 8, 0),
    ("ZPL_GID", 8, 0),
    ("ZPL_PAD", 32, 0),
    ("ZPL_ZNODE_ACL", 88, 3),
    ("ZPL_DACL_COUNT", 8, 0),
    ("ZPL_SYMLINK", 0, 3),
    ("ZPL_SCANSTAMP", 32, 3),
    ("ZPL_DACL_ACES", 0, 4),
    ("ZPL_DXATTR", 0, 3),
    ("ZPL_PROJID", 8, 0),
];

/// Attribute numbers of the ZPL table (indexes into [`ZPL_ATTRS`]).
pub mod zpl_attr {
    pub const ATIME: u16 = 0;
    pub const MTIME: u16 = 1;
    pub const CTIME: u16 = 2;
    pub const CRTIME: u16 = 3;
    pub const GEN: u16 = 4;
    pub const MODE: u16 = 5;
    pub const SIZE: u16 = 6;
    pub const PARENT: u16 = 7;
    pub const LINKS: u16 = 8;
    pub const XATTR: u16 = 9;
    pub const RDEV: u16 = 10;
    pub const FLAGS: u16 = 11;
    pub const UID: u16 = 12;
    pub const GID: u16 = 13;
    pub const DACL_COUNT: u16 = 16;
    pub const SYMLINK: u16 = 17;
    pub const DACL_ACES: u16 = 19;
    pub const DXATTR: u16 = 20;
    pub const PROJID: u16 = 21;
}

/// A REGISTRY ZAP value (ATTR_ENCODE): attr number in bits 0-15, byteswap type in 16-23,
/// length in 24-39.
pub fn registration_value(num: u16, length: u16, byteswap: u8) -> u64 {
    num as u64 | (byteswap as u64) << 16 | (length as u64) << 24
}

/// The REGISTRY entries a new ZPL objset gets (every attribute of [`ZPL_ATTRS`]).
pub fn zpl_registrations() -> Vec<(String, u64)> {
    ZPL_ATTRS.iter().enumerate().map(|(i, (n, len, bs))| (n.to_string(), registration_value(i as u16, *len, *bs))).collect()
}

/// Layout 0: a legacy znode_phys_t read as SA (attributes 0..=15 of the legacy table).
pub const SA_LEGACY_ZPL_LAYOUT: [u16; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

impl SaRegistry {
    /// From the REGISTRY ZAP (name → encoded attr) and the LAYOUTS ZAP (layout number → attr
    /// numbers). Layouts 0 (legacy znode) and 1 (no attributes, used by a header whose layout
    /// field is 0) are built in, as sa_setup adds them for ZPL objsets; the LAYOUTS ZAP numbers
    /// its own from 2.
    pub fn new(regs: Vec<(String, u64)>, layouts: Vec<(u64, Vec<u16>)>) -> SaRegistry {
        let mut r = SaRegistry::default();
        r.add_builtin_layouts();
        for (name, v) in regs {
            let a = SaAttr::from_registration(&name, v);
            r.attrs.insert(a.num, a);
        }
        for (n, l) in layouts {
            r.layouts.insert(n, l);
        }
        r
    }

    fn add_builtin_layouts(&mut self) {
        self.layouts.insert(0, SA_LEGACY_ZPL_LAYOUT.to_vec());
        self.layouts.insert(1, Vec::new());
    }

    /// The default ZPL table (zfs_attr_table order, which is also sa_legacy_attrs for the
    /// first 16), for objsets whose registry was never written.
    pub fn legacy() -> SaRegistry {
        let mut r = SaRegistry::default();
        r.add_builtin_layouts();
        for (i, (name, len, bs)) in ZPL_ATTRS.iter().enumerate() {
            r.attrs.insert(i as u16, SaAttr { name: name.to_string(), num: i as u16, length: *len, byteswap: *bs });
        }
        r
    }

    /// The attribute registered as number `num`.
    pub fn attr(&self, num: u16) -> Option<&SaAttr> {
        self.attrs.get(&num)
    }

    /// The number of the attribute named `name`.
    pub fn num_of(&self, name: &str) -> Option<u16> {
        self.attrs.values().find(|a| a.name == name).map(|a| a.num)
    }

    fn by_name(&self, num: u16) -> Option<&SaAttr> {
        self.attrs.get(&num)
    }
}

/// `sa_hdr_phys_t`.
#[derive(Clone, Debug)]
pub struct SaHdr {
    /// The layout number as stored (SA_HDR_LAYOUT_NUM).
    pub layout: u16,
    /// Header size in bytes (SA_HDR_SIZE): the magic, the layout info and the lengths, padded to 8.
    pub hdrsz: usize,
    /// Every u16 the header has room for after the layout info: the lengths of the layout's
    /// variable-size attributes come first (how many are meaningful depends on the layout).
    pub var_lengths: Vec<u16>,
}

impl SaHdr {
    /// SA_LAYOUT_NUM for an SA bonus or spill buffer: a stored 0 means layout 1 (no attributes).
    pub fn layout_num(&self) -> u64 {
        if self.layout == 0 {
            1
        } else {
            self.layout as u64
        }
    }
}

/// The header of an SA buffer (bonus of type DMU_OT_SA, or a spill block).
pub fn decode_hdr(buf: &[u8], le: bool) -> Result<SaHdr> {
    let magic = u32_at(buf, 0, le, "SA header")?;
    if magic != SA_MAGIC {
        return Err(FormatError::BadMagic { what: "SA header", found: magic as u64 });
    }
    let info = u16_at(buf, 4, le, "SA header")?;
    let layout = info & 0x3ff;
    let hdrsz = (((info >> 10) & 0x3f) as usize) << 3;
    if hdrsz < 8 || hdrsz > buf.len() {
        return Err(FormatError::invalid("SA header", format!("header size {hdrsz}")));
    }
    let nlen = (hdrsz - 6) / 2;
    let var_lengths = (0..nlen).map(|i| u16_at(buf, 6 + 2 * i, le, "SA header")).collect::<Result<Vec<_>>>()?;
    Ok(SaHdr { layout, hdrsz, var_lengths })
}

/// Every attribute in `buf` as (name, bytes).
pub fn decode_attrs<'a>(buf: &'a [u8], le: bool, reg: &SaRegistry) -> Result<Vec<(String, &'a [u8])>> {
    let hdr = decode_hdr(buf, le)?;
    let layout = reg
        .layouts
        .get(&hdr.layout_num())
        .ok_or_else(|| FormatError::invalid("SA header", format!("unknown layout {}", hdr.layout)))?;
    // The data starts after the lengths of the layout's variable-size attributes, rounded up
    // to 8 bytes (sa_attr_iter computes it from the layout, not from SA_HDR_SIZE).
    let nvar = layout.iter().filter(|a| reg.by_name(**a).is_none_or(|x| x.length == 0)).count();
    let mut off = (6 + 2 * nvar + 7) & !7;
    let mut vi = 0;
    let mut out = Vec::new();
    for a in layout {
        let attr = reg.by_name(*a).ok_or_else(|| FormatError::invalid("SA layout", format!("unregistered attribute {a}")))?;
        let len = if attr.length != 0 {
            attr.length as usize
        } else {
            let l = *hdr.var_lengths.get(vi).ok_or_else(|| FormatError::invalid("SA header", "missing variable length"))?;
            vi += 1;
            l as usize
        };
        let data = slice(buf, off, len, "SA attribute")?;
        out.push((attr.name.clone(), data));
        off = (off + len + 7) & !7;
    }
    Ok(out)
}

/// Size of a block pointer: the room a spill pointer takes at the end of the bonus area.
const SA_BLKPTR_SIZE: usize = 128;
/// Largest SA buffer (SPA_OLD_MAXBLOCKSIZE).
pub const SA_MAX_SIZE: usize = 128 << 10;

/// Where a set of attributes goes (sa_find_sizes): the header size of the bonus buffer, the
/// index of the first attribute that moves to the spill block (None: all fit the bonus) and the
/// total size of all attributes (each after the first starting 8-byte aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaPlan {
    pub hdrsize: usize,
    pub spill_idx: Option<usize>,
    pub total: usize,
}

/// Plan an SA buffer for attributes of `lens` bytes (`var`: variable-length) in `space` bytes.
/// For the bonus buffer (`bonus`), attributes past the point where a spill pointer would no
/// longer fit, or whose header growth does not fit, go to the spill block; a spill buffer holds
/// everything. The header has 8 bytes (magic, layout info, first variable length) plus 2 for
/// each further variable-length attribute, rounded up to 8.
pub fn plan(lens: &[(usize, bool)], space: usize, bonus: bool) -> SaPlan {
    let mut hdrsize = 8usize;
    let mut extra = 0usize;
    let mut total = 0usize;
    let mut index: Option<usize> = None;
    let mut will_spill = false;
    let mut nvar = 0usize;
    let r8 = |x: usize| (x + 7) & !7;
    for (i, &(len, var)) in lens.iter().enumerate() {
        total = r8(total) + len;
        if will_spill {
            continue;
        }
        if var {
            nvar += 1;
        }
        let grows = var && nvar > 1;
        let tmp_hdr = hdrsize + if grows { 2 } else { 0 };
        let might_spill_here = bonus && index.is_none() && total + r8(tmp_hdr) > space - SA_BLKPTR_SIZE;
        if grows {
            if !bonus || tmp_hdr + total < space {
                hdrsize = tmp_hdr;
                if index.is_some() || might_spill_here {
                    extra += 2;
                }
            } else {
                index.get_or_insert(i);
                will_spill = true;
                continue;
            }
        }
        if might_spill_here {
            index = Some(i);
        }
        if bonus && total + r8(hdrsize) > space {
            will_spill = true;
        }
    }
    if will_spill {
        hdrsize -= extra;
    }
    SaPlan { hdrsize: r8(hdrsize), spill_idx: if will_spill { index } else { None }, total }
}

/// Lay out one SA buffer of `buflen` bytes (sa_build_layouts): the header (magic, `layout`,
/// `hdrsize`, the lengths of the variable-length attributes in order), then each attribute
/// 8-byte aligned. `attrs` are (registered length, bytes); little-endian.
pub fn encode_buf(layout: u16, hdrsize: usize, attrs: &[(u16, &[u8])], buflen: usize) -> Vec<u8> {
    assert!(layout < 1024 && hdrsize % 8 == 0 && hdrsize >= 8 && hdrsize < 512, "SA header {layout}/{hdrsize}");
    let mut b = vec![0u8; buflen.max(hdrsize)];
    b[0..4].copy_from_slice(&SA_MAGIC.to_le_bytes());
    let info = layout | ((hdrsize / 8) as u16) << 10;
    b[4..6].copy_from_slice(&info.to_le_bytes());
    let mut li = 6;
    let mut off = hdrsize;
    for (reglen, data) in attrs {
        if *reglen == 0 {
            assert!(li + 2 <= hdrsize, "SA header too small for the variable lengths");
            b[li..li + 2].copy_from_slice(&(data.len() as u16).to_le_bytes());
            li += 2;
        } else {
            assert_eq!(*reglen as usize, data.len(), "fixed-size SA attribute of the wrong size");
        }
        assert!(off + data.len() <= b.len(), "SA buffer of {buflen} bytes overflows");
        b[off..off + data.len()].copy_from_slice(data);
        off = (off + data.len() + 7) & !7;
    }
    b
}

#[derive(Clone, Debug, Default)]
pub struct ZnodeAttrs {
    pub mode: u64,
    pub size: u64,
    pub gen: u64,
    pub uid: u64,
    pub gid: u64,
    pub parent: u64,
    pub flags: u64,
    pub links: u64,
    pub atime: (u64, u64),
    pub mtime: (u64, u64),
    pub ctime: (u64, u64),
    pub crtime: (u64, u64),
    pub rdev: u64,
    pub xattr: u64,
    pub symlink: Option<Vec<u8>>,
    /// Packed nvlist of SA-stored xattrs (xattr=sa).
    pub dxattr: Option<Vec<u8>>,
    pub projid: u64,
}

impl ZnodeAttrs {
    /// Merge attributes found in `buf` into `self`.
    pub fn merge_sa(&mut self, buf: &[u8], le: bool, reg: &SaRegistry) -> Result<Vec<String>> {
        let attrs = decode_attrs(buf, le, reg)?;
        let mut names = Vec::new();
        for (name, d) in attrs {
            let u = |i: usize| u64_at(d, i * 8, le, "SA attribute");
            match name.as_str() {
                "ZPL_MODE" => self.mode = u(0)?,
                "ZPL_SIZE" => self.size = u(0)?,
                "ZPL_GEN" => self.gen = u(0)?,
                "ZPL_UID" => self.uid = u(0)?,
                "ZPL_GID" => self.gid = u(0)?,
                "ZPL_PARENT" => self.parent = u(0)?,
                "ZPL_FLAGS" => self.flags = u(0)?,
                "ZPL_LINKS" => self.links = u(0)?,
                "ZPL_ATIME" => self.atime = (u(0)?, u(1)?),
                "ZPL_MTIME" => self.mtime = (u(0)?, u(1)?),
                "ZPL_CTIME" => self.ctime = (u(0)?, u(1)?),
                "ZPL_CRTIME" => self.crtime = (u(0)?, u(1)?),
                "ZPL_RDEV" => self.rdev = u(0)?,
                "ZPL_XATTR" => self.xattr = u(0)?,
                "ZPL_PROJID" => self.projid = u(0)?,
                "ZPL_SYMLINK" => self.symlink = Some(d.to_vec()),
                "ZPL_DXATTR" => self.dxattr = Some(d.to_vec()),
                _ => {}
            }
            names.push(name);
        }
        Ok(names)
    }
}

/// The ZPL attributes stored in `buf` (a bonus or a spill block).
pub fn decode_znode_sa(buf: &[u8], le: bool, reg: &SaRegistry) -> Result<ZnodeAttrs> {
    let mut z = ZnodeAttrs::default();
    z.merge_sa(buf, le, reg)?;
    Ok(z)
}

/// Names of the attributes present in `buf`.
pub fn attrs_present(buf: &[u8], le: bool, reg: &SaRegistry) -> Result<Vec<String>> {
    Ok(decode_attrs(buf, le, reg)?.into_iter().map(|(n, _)| n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry a ZPL 5 objset writes: zfs_attr_table in order, numbered from 0,
    /// ATTR_ENCODE(num, length, byteswap).
    fn zpl_registry(layouts: Vec<(u64, Vec<u16>)>) -> SaRegistry {
        SaRegistry::new(zpl_registrations(), layouts)
    }

    /// An SA buffer as sa_build_layouts lays it out: header (magic, layout info, the lengths of
    /// the variable attributes, padded to 8), then each attribute padded to 8.
    fn build(le: bool, layout: u16, attrs: &[&[u8]], var: &[u16]) -> Vec<u8> {
        let hdrsz = (6 + 2 * var.len() + 7) & !7;
        let mut b = vec![0u8; hdrsz];
        let put16 = |b: &mut Vec<u8>, off: usize, v: u16| b[off..off + 2].copy_from_slice(&if le { v.to_le_bytes() } else { v.to_be_bytes() });
        b[0..4].copy_from_slice(&if le { SA_MAGIC.to_le_bytes() } else { SA_MAGIC.to_be_bytes() });
        put16(&mut b, 4, layout | (((hdrsz / 8) as u16) << 10));
        for (i, l) in var.iter().enumerate() {
            put16(&mut b, 6 + 2 * i, *l);
        }
        for a in attrs {
            b.extend_from_slice(a);
            while !b.len().is_multiple_of(8) {
                b.push(0);
            }
        }
        b
    }

    fn w(le: bool, v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| if le { x.to_le_bytes() } else { x.to_be_bytes() }).collect()
    }

    #[test]
    fn zpl_symlink_layout_in_both_byte_orders() {
        use std::collections::BTreeMap;
        let n: BTreeMap<&str, u16> = ZPL_ATTRS.iter().enumerate().map(|(i, (nm, _, _))| (*nm, i as u16)).collect();
        let names = [
            "ZPL_MODE", "ZPL_SIZE", "ZPL_GEN", "ZPL_UID", "ZPL_GID", "ZPL_PARENT", "ZPL_FLAGS", "ZPL_ATIME", "ZPL_MTIME", "ZPL_CTIME",
            "ZPL_CRTIME", "ZPL_LINKS", "ZPL_DACL_COUNT", "ZPL_DACL_ACES", "ZPL_SYMLINK", "ZPL_PROJID",
        ];
        let reg = zpl_registry(vec![(2, names.iter().map(|x| n[x]).collect())]);
        assert_eq!(reg.num_of("ZPL_SYMLINK"), Some(17));
        assert_eq!(reg.attr(5).map(|a| (a.length, a.byteswap)), Some((8, 0)));
        assert_eq!(reg.attr(19).map(|a| (a.length, a.byteswap)), Some((0, 4)));
        for le in [true, false] {
            let aces = [0xaau8; 12];
            let target = b"../some/where/else";
            let attrs: Vec<Vec<u8>> = vec![
                w(le, &[0o120777]),
                w(le, &[18]),
                w(le, &[7]),
                w(le, &[1000]),
                w(le, &[100]),
                w(le, &[34]),
                w(le, &[0x40800000004]),
                w(le, &[1700000000, 1]),
                w(le, &[1700000001, 2]),
                w(le, &[1700000002, 3]),
                w(le, &[1700000003, 4]),
                w(le, &[1]),
                w(le, &[2]),
                aces.to_vec(),
                target.to_vec(),
                w(le, &[9]),
            ];
            let refs: Vec<&[u8]> = attrs.iter().map(|a| a.as_slice()).collect();
            let b = build(le, 2, &refs, &[12, 18]);
            let h = decode_hdr(&b, le).unwrap();
            assert_eq!((h.layout, h.hdrsz, h.layout_num()), (2, 16, 2));
            assert_eq!(&h.var_lengths[..2], &[12, 18]);
            let z = decode_znode_sa(&b, le, &reg).unwrap();
            assert_eq!((z.mode, z.size, z.gen, z.uid, z.gid, z.parent), (0o120777, 18, 7, 1000, 100, 34));
            assert_eq!((z.flags, z.links, z.projid), (0x40800000004, 1, 9));
            assert_eq!((z.atime, z.mtime, z.ctime, z.crtime), ((1700000000, 1), (1700000001, 2), (1700000002, 3), (1700000003, 4)));
            assert_eq!(z.symlink.as_deref(), Some(&target[..]));
            assert!(z.dxattr.is_none());
            let present = attrs_present(&b, le, &reg).unwrap();
            assert_eq!(present, names.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            // Cut short: the last attribute does not fit.
            assert!(decode_znode_sa(&b[..b.len() - 8], le, &reg).is_err());
            // The other byte order does not even have the magic.
            assert!(decode_hdr(&b, !le).is_err());
        }
    }

    /// What we encode decodes back, and the header matches the layout sa_build_layouts makes.
    #[test]
    fn encode_round_trip() {
        let reg = SaRegistry::new(zpl_registrations(), vec![(2, vec![5, 6, 17, 19])]);
        let mode = 0o120777u64.to_le_bytes();
        let size = 5u64.to_le_bytes();
        let aces = [0x11u8; 48];
        let attrs: Vec<(u16, &[u8])> = vec![(8, &mode), (8, &size), (0, b"hello"), (0, &aces)];
        let p = plan(&[(8, false), (8, false), (5, true), (48, true)], 320, true);
        // Two variable attributes: the header has 8 + 2 bytes, rounded to 16.
        assert_eq!(p, SaPlan { hdrsize: 16, spill_idx: None, total: 8 + 8 + 8 + 48 });
        let b = encode_buf(2, p.hdrsize, &attrs, p.total + p.hdrsize);
        assert_eq!(b.len(), 88);
        let h = decode_hdr(&b, true).unwrap();
        assert_eq!((h.layout, h.hdrsz, &h.var_lengths[..2]), (2, 16, &[5u16, 48][..]));
        assert_eq!(plan(&[(8, false), (5, true)], 320, true).hdrsize, 8);
        let z = decode_znode_sa(&b, true, &reg).unwrap();
        assert_eq!((z.mode, z.size, z.symlink.as_deref()), (0o120777, 5, Some(&b"hello"[..])));
    }

    /// A long symlink target does not fit a 512-byte dnode's 320-byte bonus: the attributes from
    /// the one that would cover the spill pointer on move to the spill block.
    #[test]
    fn plan_spills_what_does_not_fit() {
        // MODE SIZE GEN UID GID PARENT FLAGS (8 each) ATIME MTIME CTIME CRTIME (16) LINKS
        // DACL_COUNT (8) DACL_ACES (48) SYMLINK (300)
        let mut lens = vec![(8, false); 7];
        lens.extend([(16, false); 4]);
        lens.extend([(8, false), (8, false), (48, true), (300, true)]);
        let p = plan(&lens, 320, true);
        // Up to DACL_ACES: 184 bytes + an 8-byte header = 192, just clear of the spill pointer.
        assert_eq!(p.spill_idx, Some(14), "the symlink target moves to the spill block");
        assert_eq!(p.hdrsize, 8);
        assert_eq!(p.total, 7 * 8 + 64 + 16 + 48 + 300);
        // With a 1K dnode (832-byte bonus area) everything stays in the bonus.
        let p = plan(&lens, 832, true);
        assert_eq!((p.spill_idx, p.hdrsize), (None, 16));
        // A spill buffer never spills.
        let p = plan(&lens[13..], 512, false);
        assert_eq!((p.spill_idx, p.hdrsize, p.total), (None, 16, 48 + 300));
        // One more fixed attribute before DACL_ACES pushes it over: it spills from there.
        let mut lens2 = lens.clone();
        lens2.insert(0, (8, false));
        assert_eq!(plan(&lens2, 320, true).spill_idx, Some(14));
    }

    #[test]
    fn builtin_layouts() {
        let reg = SaRegistry::legacy();
        // A header whose layout field is 0 means layout 1: no attributes.
        let b = build(true, 0, &[], &[]);
        assert_eq!(decode_hdr(&b, true).unwrap().layout_num(), 1);
        let z = decode_znode_sa(&b, true, &reg).unwrap();
        assert_eq!(z.mode, 0);
        assert!(attrs_present(&b, true, &reg).unwrap().is_empty());
        assert_eq!(reg.layouts.get(&0).map(|l| l.len()), Some(16));
        // A layout nobody registered is an error naming it.
        let b = build(true, 9, &[], &[]);
        assert!(matches!(decode_znode_sa(&b, true, &reg), Err(FormatError::Invalid { .. })));
        // A header size past the buffer.
        let mut b = build(true, 2, &[], &[]);
        b[5] = 0xfc;
        assert!(decode_hdr(&b, true).is_err());
    }

    #[test]
    fn registration_values() {
        // ZPL_SIZE as a ZPL 5 objset registers it: attr 6, 8 bytes, uint64 array byteswap (0).
        let a = SaAttr::from_registration("ZPL_SIZE", 0x0800_0006);
        assert_eq!((a.num, a.length, a.byteswap, a.name.as_str()), (6, 8, 0, "ZPL_SIZE"));
        assert_eq!(registration_value(6, 8, 0), 0x0800_0006);
        // ZPL_ZNODE_ACL: 88 bytes, uint8 array; ZPL_DACL_ACES: variable, ACL byteswap.
        assert_eq!(zpl_registrations()[15].1, 0x5803_000f);
        assert_eq!(zpl_registrations()[19].1, 0x0004_0013);
        let a = SaAttr::from_registration("ZPL_DXATTR", 20);
        assert_eq!((a.num, a.length, a.byteswap), (20, 0, 0));
    }

    #[test]
    fn decodes_a_layout_with_a_variable_attribute() {
        // registry: MODE(5, 8 bytes), SIZE(6, 8), SYMLINK(17, variable); layout 2 = [5, 17, 6]
        let reg = SaRegistry::new(
            vec![
                ("ZPL_MODE".into(), 5 | (8 << 24)),
                ("ZPL_SIZE".into(), 6 | (8 << 24)),
                ("ZPL_SYMLINK".into(), 17),
            ],
            vec![(2, vec![5, 17, 6])],
        );
        let mut b = vec![0u8; 64];
        b[0..4].copy_from_slice(&SA_MAGIC.to_le_bytes());
        let info: u16 = 2 | (1 << 10); // header 8 bytes
        b[4..6].copy_from_slice(&info.to_le_bytes());
        b[6..8].copy_from_slice(&5u16.to_le_bytes()); // symlink length 5
        b[8..16].copy_from_slice(&0o120777u64.to_le_bytes());
        b[16..21].copy_from_slice(b"hello");
        b[24..32].copy_from_slice(&5u64.to_le_bytes());
        let z = decode_znode_sa(&b, true, &reg).unwrap();
        assert_eq!(z.mode, 0o120777);
        assert_eq!(z.size, 5);
        assert_eq!(z.symlink.as_deref(), Some(&b"hello"[..]));
        b[0] = 0;
        assert!(decode_znode_sa(&b, true, &reg).is_err());
    }
}
