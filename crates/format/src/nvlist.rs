//! nvlists: the typed name/value lists OpenZFS stores in labels, the MOS config object,
//! SA xattrs and send streams, in their XDR packed encoding (and native little-endian).
//!
//! ```text
//!  header:  encoding (0 native, 1 XDR) | endian (1 little) | 0 | 0
//!  list:    version i32 | nvflag u32 | pairs... | 0 i32 (end)
//!  pair:    encoded size i32 | decoded size i32 | name (XDR string) | type i32 |
//!           nelem i32 | value
//!  XDR: big-endian 4-byte units; strings = length u32 + bytes padded to 4; 64-bit values
//!  are two units; byte arrays are opaque (padded); booleans and small ints take 4 bytes.
//!  Nested lists carry their own version/nvflag, then pairs, then the end marker.
//! ```
//! Decoding is bounded: nesting depth ≤ 32 and no allocation larger than the input.

use crate::{FormatError, Result};

#[derive(Clone, Debug, PartialEq)]
pub enum NvValue {
    Boolean,
    BooleanValue(bool),
    Byte(u8),
    Int8(i8),
    Uint8(u8),
    Int16(i16),
    Uint16(u16),
    Int32(i32),
    Uint32(u32),
    Int64(i64),
    Uint64(u64),
    Double(f64),
    Hrtime(i64),
    String(String),
    ByteArray(Vec<u8>),
    BooleanArray(Vec<bool>),
    Int8Array(Vec<i8>),
    Uint8Array(Vec<u8>),
    Int16Array(Vec<i16>),
    Uint16Array(Vec<u16>),
    Int32Array(Vec<i32>),
    Uint32Array(Vec<u32>),
    Int64Array(Vec<i64>),
    Uint64Array(Vec<u64>),
    StringArray(Vec<String>),
    NvList(NvList),
    NvListArray(Vec<NvList>),
}

// data_type_t values.
const DATA_TYPE_BOOLEAN: i32 = 1;
const DATA_TYPE_BYTE: i32 = 2;
const DATA_TYPE_INT16: i32 = 3;
const DATA_TYPE_UINT16: i32 = 4;
const DATA_TYPE_INT32: i32 = 5;
const DATA_TYPE_UINT32: i32 = 6;
const DATA_TYPE_INT64: i32 = 7;
const DATA_TYPE_UINT64: i32 = 8;
const DATA_TYPE_STRING: i32 = 9;
const DATA_TYPE_BYTE_ARRAY: i32 = 10;
const DATA_TYPE_INT16_ARRAY: i32 = 11;
const DATA_TYPE_UINT16_ARRAY: i32 = 12;
const DATA_TYPE_INT32_ARRAY: i32 = 13;
const DATA_TYPE_UINT32_ARRAY: i32 = 14;
const DATA_TYPE_INT64_ARRAY: i32 = 15;
const DATA_TYPE_UINT64_ARRAY: i32 = 16;
const DATA_TYPE_STRING_ARRAY: i32 = 17;
const DATA_TYPE_HRTIME: i32 = 18;
const DATA_TYPE_NVLIST: i32 = 19;
const DATA_TYPE_NVLIST_ARRAY: i32 = 20;
const DATA_TYPE_BOOLEAN_VALUE: i32 = 21;
const DATA_TYPE_INT8: i32 = 22;
const DATA_TYPE_UINT8: i32 = 23;
const DATA_TYPE_BOOLEAN_ARRAY: i32 = 24;
const DATA_TYPE_INT8_ARRAY: i32 = 25;
const DATA_TYPE_UINT8_ARRAY: i32 = 26;
const DATA_TYPE_DOUBLE: i32 = 27;

const NV_ENCODE_NATIVE: u8 = 0;
const NV_ENCODE_XDR: u8 = 1;
const NV_VERSION: i32 = 0;
const NV_UNIQUE_NAME: u32 = 1;
const MAX_DEPTH: usize = 32;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NvList {
    pub pairs: Vec<(String, NvValue)>,
}

impl NvList {
    pub fn new() -> NvList {
        NvList::default()
    }
    pub fn get(&self, name: &str) -> Option<&NvValue> {
        self.pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
    pub fn get_u64(&self, name: &str) -> Option<u64> {
        match self.get(name)? {
            NvValue::Uint64(v) => Some(*v),
            NvValue::Int64(v) | NvValue::Hrtime(v) => Some(*v as u64),
            NvValue::Uint32(v) => Some(*v as u64),
            NvValue::Int32(v) => Some(*v as u64),
            NvValue::Uint16(v) => Some(*v as u64),
            NvValue::Int16(v) => Some(*v as u64),
            NvValue::Uint8(v) | NvValue::Byte(v) => Some(*v as u64),
            NvValue::Int8(v) => Some(*v as u64),
            NvValue::BooleanValue(b) => Some(*b as u64),
            _ => None,
        }
    }
    pub fn get_str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            NvValue::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn get_nvlist(&self, name: &str) -> Option<&NvList> {
        match self.get(name)? {
            NvValue::NvList(l) => Some(l),
            _ => None,
        }
    }
    pub fn get_nvlist_array(&self, name: &str) -> Option<&[NvList]> {
        match self.get(name)? {
            NvValue::NvListArray(l) => Some(l),
            _ => None,
        }
    }
    pub fn get_u64_array(&self, name: &str) -> Option<&[u64]> {
        match self.get(name)? {
            NvValue::Uint64Array(a) => Some(a),
            _ => None,
        }
    }
    /// Set `name`, replacing an existing pair of that name.
    pub fn insert(&mut self, name: &str, value: NvValue) {
        if let Some(p) = self.pairs.iter_mut().find(|(n, _)| n == name) {
            p.1 = value;
        } else {
            self.pairs.push((name.to_string(), value));
        }
    }
    pub fn add_u64(&mut self, name: &str, v: u64) {
        self.insert(name, NvValue::Uint64(v));
    }
    pub fn add_str(&mut self, name: &str, v: &str) {
        self.insert(name, NvValue::String(v.to_string()));
    }
    pub fn add_nvlist(&mut self, name: &str, v: NvList) {
        self.insert(name, NvValue::NvList(v));
    }
    pub fn remove(&mut self, name: &str) {
        self.pairs.retain(|(n, _)| n != name);
    }

    /// Decode a packed nvlist (4-byte header, then the list).
    pub fn decode_packed(buf: &[u8]) -> Result<NvList> {
        if buf.len() < 4 {
            return Err(FormatError::Truncated { what: "nvlist header", need: 4, have: buf.len() });
        }
        match buf[0] {
            NV_ENCODE_XDR => {
                let mut r = Xdr { buf, pos: 4 };
                r.list(0)
            }
            NV_ENCODE_NATIVE => {
                if buf[1] != 1 {
                    return Err(FormatError::unsupported("nvlist", "big-endian native encoding"));
                }
                let mut r = Native { buf, pos: 4 };
                r.list(0)
            }
            e => Err(FormatError::invalid("nvlist header", format!("encoding {e}"))),
        }
    }

    /// Pack as XDR (with the header), as nvlist_pack(NV_ENCODE_XDR) does.
    pub fn encode_xdr(&self) -> Vec<u8> {
        let mut out = vec![NV_ENCODE_XDR, 1, 0, 0];
        enc_list(self, &mut out);
        out
    }

    /// A readable tree, one pair a line, like `zdb -l` prints a config.
    pub fn fmt_tree(&self) -> String {
        let mut s = String::new();
        fmt_list(self, 0, &mut s);
        s
    }
}

fn fmt_list(l: &NvList, depth: usize, s: &mut String) {
    let pad = "    ".repeat(depth);
    for (n, v) in &l.pairs {
        match v {
            NvValue::NvList(c) => {
                s.push_str(&format!("{pad}{n}:\n"));
                fmt_list(c, depth + 1, s);
            }
            NvValue::NvListArray(a) => {
                for (i, c) in a.iter().enumerate() {
                    s.push_str(&format!("{pad}{n}[{i}]:\n"));
                    fmt_list(c, depth + 1, s);
                }
            }
            NvValue::String(x) => s.push_str(&format!("{pad}{n}: '{x}'\n")),
            NvValue::Uint64(x) => s.push_str(&format!("{pad}{n}: {x}\n")),
            other => s.push_str(&format!("{pad}{n}: {other:?}\n")),
        }
    }
}

struct Xdr<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Xdr<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or(FormatError::Truncated {
            what: "XDR nvlist",
            need: self.pos.saturating_add(n),
            have: self.buf.len(),
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn opaque(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.take(n)?;
        let pad = (4 - n % 4) % 4;
        self.take(pad)?;
        Ok(s)
    }
    fn string(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        let b = self.opaque(n)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }
    fn count(&self, n: i32, unit: usize) -> Result<usize> {
        if n < 0 || (n as usize).saturating_mul(unit) > self.buf.len() - self.pos.min(self.buf.len()) {
            return Err(FormatError::invalid("XDR nvlist", format!("{n} elements do not fit")));
        }
        Ok(n as usize)
    }

    /// xdr_array's element count, which must match the pair's nelem.
    fn array_count(&mut self, n: usize) -> Result<()> {
        let c = self.u32()? as usize;
        if c != n {
            return Err(FormatError::invalid("XDR nvlist", format!("array of {c} elements where {n} were announced")));
        }
        Ok(())
    }

    fn list(&mut self, depth: usize) -> Result<NvList> {
        if depth > MAX_DEPTH {
            return Err(FormatError::invalid("XDR nvlist", "nested too deeply"));
        }
        let _version = self.i32()?;
        let _flag = self.u32()?;
        let mut l = NvList::default();
        loop {
            // OpenZFS reads the encoded size but walks the stream; the decoded (native) size
            // is 0 only at the end of the list.
            let _encoded = self.i32()?;
            let decoded = self.i32()?;
            if decoded == 0 {
                break;
            }
            let name = self.string()?;
            let typ = self.i32()?;
            let nelem = self.i32()?;
            if nelem < 0 {
                return Err(FormatError::invalid("XDR nvlist", format!("pair '{name}' has {nelem} elements")));
            }
            let v = self.value(typ, nelem, depth)?;
            l.pairs.push((name, v));
        }
        Ok(l)
    }

    fn value(&mut self, typ: i32, nelem: i32, depth: usize) -> Result<NvValue> {
        // A pair without elements carries no value at all (not even an array count).
        if nelem == 0 {
            return empty_value(typ);
        }
        Ok(match typ {
            DATA_TYPE_BOOLEAN => NvValue::Boolean,
            DATA_TYPE_BOOLEAN_VALUE => NvValue::BooleanValue(self.i32()? != 0),
            DATA_TYPE_BYTE => NvValue::Byte(self.i32()? as u8),
            DATA_TYPE_INT8 => NvValue::Int8(self.i32()? as i8),
            DATA_TYPE_UINT8 => NvValue::Uint8(self.i32()? as u8),
            DATA_TYPE_INT16 => NvValue::Int16(self.i32()? as i16),
            DATA_TYPE_UINT16 => NvValue::Uint16(self.i32()? as u16),
            DATA_TYPE_INT32 => NvValue::Int32(self.i32()?),
            DATA_TYPE_UINT32 => NvValue::Uint32(self.u32()?),
            DATA_TYPE_INT64 => NvValue::Int64(self.u64()? as i64),
            DATA_TYPE_UINT64 => NvValue::Uint64(self.u64()?),
            DATA_TYPE_HRTIME => NvValue::Hrtime(self.u64()? as i64),
            DATA_TYPE_DOUBLE => NvValue::Double(f64::from_bits(self.u64()?)),
            DATA_TYPE_STRING => NvValue::String(self.string()?),
            DATA_TYPE_BYTE_ARRAY => {
                let n = self.count(nelem, 1)?;
                NvValue::ByteArray(self.opaque(n)?.to_vec())
            }
            DATA_TYPE_UINT8_ARRAY | DATA_TYPE_INT8_ARRAY | DATA_TYPE_BOOLEAN_ARRAY | DATA_TYPE_INT16_ARRAY
            | DATA_TYPE_UINT16_ARRAY | DATA_TYPE_INT32_ARRAY | DATA_TYPE_UINT32_ARRAY => {
                let n = self.count(nelem, 4)?;
                self.array_count(n)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.u32()?);
                }
                match typ {
                    DATA_TYPE_UINT8_ARRAY => NvValue::Uint8Array(v.iter().map(|x| *x as u8).collect()),
                    DATA_TYPE_INT8_ARRAY => NvValue::Int8Array(v.iter().map(|x| *x as i8).collect()),
                    DATA_TYPE_BOOLEAN_ARRAY => NvValue::BooleanArray(v.iter().map(|x| *x != 0).collect()),
                    DATA_TYPE_INT16_ARRAY => NvValue::Int16Array(v.iter().map(|x| *x as i16).collect()),
                    DATA_TYPE_UINT16_ARRAY => NvValue::Uint16Array(v.iter().map(|x| *x as u16).collect()),
                    DATA_TYPE_INT32_ARRAY => NvValue::Int32Array(v.iter().map(|x| *x as i32).collect()),
                    _ => NvValue::Uint32Array(v),
                }
            }
            DATA_TYPE_INT64_ARRAY | DATA_TYPE_UINT64_ARRAY => {
                let n = self.count(nelem, 8)?;
                self.array_count(n)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.u64()?);
                }
                if typ == DATA_TYPE_INT64_ARRAY {
                    NvValue::Int64Array(v.into_iter().map(|x| x as i64).collect())
                } else {
                    NvValue::Uint64Array(v)
                }
            }
            DATA_TYPE_STRING_ARRAY => {
                let n = self.count(nelem, 4)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string()?);
                }
                NvValue::StringArray(v)
            }
            DATA_TYPE_NVLIST => NvValue::NvList(self.list(depth + 1)?),
            DATA_TYPE_NVLIST_ARRAY => {
                let n = self.count(nelem, 8)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.list(depth + 1)?);
                }
                NvValue::NvListArray(v)
            }
            t => return Err(FormatError::unsupported("nvlist pair", format!("data type {t}"))),
        })
    }
}

/// The value of a pair with nelem 0: BOOLEAN, or an empty array.
fn empty_value(typ: i32) -> Result<NvValue> {
    Ok(match typ {
        DATA_TYPE_BOOLEAN => NvValue::Boolean,
        DATA_TYPE_BYTE_ARRAY => NvValue::ByteArray(Vec::new()),
        DATA_TYPE_BOOLEAN_ARRAY => NvValue::BooleanArray(Vec::new()),
        DATA_TYPE_INT8_ARRAY => NvValue::Int8Array(Vec::new()),
        DATA_TYPE_UINT8_ARRAY => NvValue::Uint8Array(Vec::new()),
        DATA_TYPE_INT16_ARRAY => NvValue::Int16Array(Vec::new()),
        DATA_TYPE_UINT16_ARRAY => NvValue::Uint16Array(Vec::new()),
        DATA_TYPE_INT32_ARRAY => NvValue::Int32Array(Vec::new()),
        DATA_TYPE_UINT32_ARRAY => NvValue::Uint32Array(Vec::new()),
        DATA_TYPE_INT64_ARRAY => NvValue::Int64Array(Vec::new()),
        DATA_TYPE_UINT64_ARRAY => NvValue::Uint64Array(Vec::new()),
        DATA_TYPE_STRING_ARRAY => NvValue::StringArray(Vec::new()),
        DATA_TYPE_NVLIST_ARRAY => NvValue::NvListArray(Vec::new()),
        t => return Err(FormatError::invalid("nvlist pair", format!("data type {t} with no elements"))),
    })
}

/// Native little-endian encoding (nvpair structs laid out in memory, 8-byte aligned).
struct Native<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Native<'a> {
    fn at(&self, off: usize, n: usize) -> Result<&'a [u8]> {
        self.buf
            .get(off..off.saturating_add(n))
            .ok_or(FormatError::Truncated { what: "native nvlist", need: off.saturating_add(n), have: self.buf.len() })
    }
    fn list(&mut self, depth: usize) -> Result<NvList> {
        if depth > MAX_DEPTH {
            return Err(FormatError::invalid("native nvlist", "nested too deeply"));
        }
        // nvlist_t: version i32, nvflag u32, priv u64, flag u32, pad i32 = 24 bytes.
        self.at(self.pos, 24)?;
        self.pos += 24;
        let mut l = NvList::default();
        let mut embedded: Vec<(usize, i32, i32)> = Vec::new();
        loop {
            let size = i32::from_le_bytes(self.at(self.pos, 4)?.try_into().unwrap());
            if size == 0 {
                self.pos += 4;
                break;
            }
            if size < 16 {
                return Err(FormatError::invalid("native nvlist", format!("pair size {size}")));
            }
            let p = self.pos;
            let name_sz = i16::from_le_bytes(self.at(p + 4, 2)?.try_into().unwrap()) as usize;
            let nelem = i32::from_le_bytes(self.at(p + 8, 4)?.try_into().unwrap());
            let typ = i32::from_le_bytes(self.at(p + 12, 4)?.try_into().unwrap());
            let name_b = self.at(p + 16, name_sz)?;
            let name = String::from_utf8_lossy(name_b.split(|&c| c == 0).next().unwrap_or(&[])).into_owned();
            let voff = (p + 16 + name_sz + 7) & !7;
            let le64 = |o: usize| -> Result<u64> { Ok(u64::from_le_bytes(self.at(o, 8)?.try_into().unwrap())) };
            let le32 = |o: usize| -> Result<u32> { Ok(u32::from_le_bytes(self.at(o, 4)?.try_into().unwrap())) };
            let v = match typ {
                DATA_TYPE_BOOLEAN => NvValue::Boolean,
                DATA_TYPE_BOOLEAN_VALUE => NvValue::BooleanValue(le32(voff)? != 0),
                DATA_TYPE_UINT64 => NvValue::Uint64(le64(voff)?),
                DATA_TYPE_INT64 => NvValue::Int64(le64(voff)? as i64),
                DATA_TYPE_UINT32 => NvValue::Uint32(le32(voff)?),
                DATA_TYPE_INT32 => NvValue::Int32(le32(voff)? as i32),
                DATA_TYPE_STRING => {
                    let end = p + size as usize;
                    let b = self.at(voff, end.saturating_sub(voff))?;
                    NvValue::String(String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(&[])).into_owned())
                }
                DATA_TYPE_BYTE_ARRAY | DATA_TYPE_UINT8_ARRAY => {
                    let n = nelem.max(0) as usize;
                    NvValue::ByteArray(self.at(voff, n)?.to_vec())
                }
                DATA_TYPE_UINT64_ARRAY => {
                    let n = nelem.max(0) as usize;
                    let b = self.at(voff, n.saturating_mul(8))?;
                    NvValue::Uint64Array(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect())
                }
                DATA_TYPE_NVLIST | DATA_TYPE_NVLIST_ARRAY => {
                    embedded.push((l.pairs.len(), typ, nelem));
                    NvValue::Boolean
                }
                t => return Err(FormatError::unsupported("native nvlist pair", format!("data type {t}"))),
            };
            l.pairs.push((name, v));
            self.pos = p + size as usize;
        }
        // Embedded lists follow the terminator, in pair order.
        for (idx, typ, nelem) in embedded {
            if typ == DATA_TYPE_NVLIST {
                l.pairs[idx].1 = NvValue::NvList(self.list(depth + 1)?);
            } else {
                let n = nelem.max(0) as usize;
                if n > self.buf.len() / 24 {
                    return Err(FormatError::invalid("native nvlist", "nvlist array too long"));
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.list(depth + 1)?);
                }
                l.pairs[idx].1 = NvValue::NvListArray(v);
            }
        }
        Ok(l)
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put_opaque(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(b);
    out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
}
fn put_string(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    put_opaque(out, s.as_bytes());
}

fn type_and_nelem(v: &NvValue) -> (i32, usize) {
    match v {
        NvValue::Boolean => (DATA_TYPE_BOOLEAN, 0),
        NvValue::BooleanValue(_) => (DATA_TYPE_BOOLEAN_VALUE, 1),
        NvValue::Byte(_) => (DATA_TYPE_BYTE, 1),
        NvValue::Int8(_) => (DATA_TYPE_INT8, 1),
        NvValue::Uint8(_) => (DATA_TYPE_UINT8, 1),
        NvValue::Int16(_) => (DATA_TYPE_INT16, 1),
        NvValue::Uint16(_) => (DATA_TYPE_UINT16, 1),
        NvValue::Int32(_) => (DATA_TYPE_INT32, 1),
        NvValue::Uint32(_) => (DATA_TYPE_UINT32, 1),
        NvValue::Int64(_) => (DATA_TYPE_INT64, 1),
        NvValue::Uint64(_) => (DATA_TYPE_UINT64, 1),
        NvValue::Double(_) => (DATA_TYPE_DOUBLE, 1),
        NvValue::Hrtime(_) => (DATA_TYPE_HRTIME, 1),
        NvValue::String(_) => (DATA_TYPE_STRING, 1),
        NvValue::ByteArray(b) => (DATA_TYPE_BYTE_ARRAY, b.len()),
        NvValue::BooleanArray(b) => (DATA_TYPE_BOOLEAN_ARRAY, b.len()),
        NvValue::Int8Array(b) => (DATA_TYPE_INT8_ARRAY, b.len()),
        NvValue::Uint8Array(b) => (DATA_TYPE_UINT8_ARRAY, b.len()),
        NvValue::Int16Array(b) => (DATA_TYPE_INT16_ARRAY, b.len()),
        NvValue::Uint16Array(b) => (DATA_TYPE_UINT16_ARRAY, b.len()),
        NvValue::Int32Array(b) => (DATA_TYPE_INT32_ARRAY, b.len()),
        NvValue::Uint32Array(b) => (DATA_TYPE_UINT32_ARRAY, b.len()),
        NvValue::Int64Array(b) => (DATA_TYPE_INT64_ARRAY, b.len()),
        NvValue::Uint64Array(b) => (DATA_TYPE_UINT64_ARRAY, b.len()),
        NvValue::StringArray(b) => (DATA_TYPE_STRING_ARRAY, b.len()),
        NvValue::NvList(_) => (DATA_TYPE_NVLIST, 1),
        NvValue::NvListArray(b) => (DATA_TYPE_NVLIST_ARRAY, b.len()),
    }
}

fn enc_value(v: &NvValue, out: &mut Vec<u8>) {
    match v {
        NvValue::Boolean => {}
        NvValue::BooleanValue(b) => put_u32(out, *b as u32),
        NvValue::Byte(x) | NvValue::Uint8(x) => put_u32(out, *x as u32),
        NvValue::Int8(x) => put_u32(out, *x as i32 as u32),
        NvValue::Int16(x) => put_u32(out, *x as i32 as u32),
        NvValue::Uint16(x) => put_u32(out, *x as u32),
        NvValue::Int32(x) => put_u32(out, *x as u32),
        NvValue::Uint32(x) => put_u32(out, *x),
        NvValue::Int64(x) | NvValue::Hrtime(x) => put_u64(out, *x as u64),
        NvValue::Uint64(x) => put_u64(out, *x),
        NvValue::Double(x) => put_u64(out, x.to_bits()),
        NvValue::String(s) => put_string(out, s),
        // xdr_opaque: no count.
        NvValue::ByteArray(b) => put_opaque(out, b),
        _ if is_xdr_array(v) => {
            put_u32(out, type_and_nelem(v).1 as u32);
            enc_elems(v, out);
        }
        _ => enc_elems(v, out),
    }
}

/// Types XDR-encoded with xdr_array (a count, then the elements).
fn is_xdr_array(v: &NvValue) -> bool {
    matches!(
        v,
        NvValue::BooleanArray(_)
            | NvValue::Int8Array(_)
            | NvValue::Uint8Array(_)
            | NvValue::Int16Array(_)
            | NvValue::Uint16Array(_)
            | NvValue::Int32Array(_)
            | NvValue::Uint32Array(_)
            | NvValue::Int64Array(_)
            | NvValue::Uint64Array(_)
    )
}

fn enc_elems(v: &NvValue, out: &mut Vec<u8>) {
    match v {
        NvValue::BooleanArray(a) => a.iter().for_each(|x| put_u32(out, *x as u32)),
        NvValue::Int8Array(a) => a.iter().for_each(|x| put_u32(out, *x as i32 as u32)),
        NvValue::Uint8Array(a) => a.iter().for_each(|x| put_u32(out, *x as u32)),
        NvValue::Int16Array(a) => a.iter().for_each(|x| put_u32(out, *x as i32 as u32)),
        NvValue::Uint16Array(a) => a.iter().for_each(|x| put_u32(out, *x as u32)),
        NvValue::Int32Array(a) => a.iter().for_each(|x| put_u32(out, *x as u32)),
        NvValue::Uint32Array(a) => a.iter().for_each(|x| put_u32(out, *x)),
        NvValue::Int64Array(a) => a.iter().for_each(|x| put_u64(out, *x as u64)),
        NvValue::Uint64Array(a) => a.iter().for_each(|x| put_u64(out, *x)),
        NvValue::StringArray(a) => a.iter().for_each(|s| put_string(out, s)),
        _ => {}
    }
}

fn enc_list(l: &NvList, out: &mut Vec<u8>) {
    put_u32(out, NV_VERSION as u32);
    put_u32(out, NV_UNIQUE_NAME);
    for (name, v) in &l.pairs {
        let start = out.len();
        put_u32(out, 0); // encoded size, patched below
        put_u32(out, native_size(name, v) as u32); // decoded size
        put_string(out, name);
        let (t, n) = type_and_nelem(v);
        put_u32(out, t as u32);
        put_u32(out, n as u32);
        if n > 0 {
            match v {
                // Embedded lists follow inline; the pair's encoded size includes them.
                NvValue::NvList(c) => enc_list(c, out),
                NvValue::NvListArray(a) => a.iter().for_each(|c| enc_list(c, out)),
                _ => enc_value(v, out),
            }
        }
        let encoded = (out.len() - start) as u32;
        out[start..start + 4].copy_from_slice(&encoded.to_be_bytes());
    }
    put_u32(out, 0);
    put_u32(out, 0);
}

/// The size of the pair in native form (nvpair_t header + name + value, 8-aligned), which the
/// XDR encoding records as the "decoded size".
fn native_size(name: &str, v: &NvValue) -> usize {
    let al = |x: usize| (x + 7) & !7;
    let hdr = 16 + al(name.len() + 1);
    let val = match v {
        NvValue::Boolean => 0,
        NvValue::BooleanValue(_) | NvValue::Byte(_) | NvValue::Int8(_) | NvValue::Uint8(_) | NvValue::Int16(_)
        | NvValue::Uint16(_) | NvValue::Int32(_) | NvValue::Uint32(_) => 8,
        NvValue::Int64(_) | NvValue::Uint64(_) | NvValue::Hrtime(_) | NvValue::Double(_) => 8,
        NvValue::String(s) => al(s.len() + 1),
        NvValue::ByteArray(b) | NvValue::Uint8Array(b) => al(b.len()),
        NvValue::Int8Array(b) => al(b.len()),
        NvValue::BooleanArray(b) => al(b.len() * 4),
        NvValue::Int16Array(b) => al(b.len() * 2),
        NvValue::Uint16Array(b) => al(b.len() * 2),
        NvValue::Int32Array(b) => al(b.len() * 4),
        NvValue::Uint32Array(b) => al(b.len() * 4),
        NvValue::Int64Array(b) => b.len() * 8,
        NvValue::Uint64Array(b) => b.len() * 8,
        NvValue::StringArray(a) => a.len() * 8 + a.iter().map(|s| s.len() + 1).sum::<usize>(),
        NvValue::NvList(_) => 24,
        NvValue::NvListArray(a) => al(a.len() * 8) + a.len() * 24,
    };
    al(hdr + val)
}

/// The config nvlist of label 0 of the `basic` fixture pool (zfs-fuse, pool version 23), as
/// packed by nvlist_pack(NV_ENCODE_XDR): 816 bytes, shared by the label tests.
#[cfg(test)]
pub(crate) fn real_label_nvlist() -> Vec<u8> {
    const HEX: &[&str] = &[
        "01010000000000000000000100000024000000200000000776657273696f6e0000000008000000010000000000000017",
        "0000002800000028000000046e616d6500000009000000010000000a74616e6b2d626173696300000000002400000020",
        "000000057374617465000000000000080000000100000000000000010000002000000020000000037478670000000008",
        "000000010000000000000029000000280000002800000009706f6f6c5f677569640000000000000800000001f887db4e",
        "597065f9000000240000002000000006686f737469640000000000080000000100000000007f01000000002400000028",
        "00000008686f73746e616d65000000090000000100000002766d0000000000240000002800000008746f705f67756964",
        "0000000800000001ca4963068eb0a540000000200000002000000004677569640000000800000001ca4963068eb0a540",
        "0000002c000000280000000d766465765f6368696c6472656e00000000000008000000010000000000000001000001bc",
        "0000003800000009766465765f7472656500000000000013000000010000000000000001000000200000002000000004",
        "7479706500000009000000010000000466696c6500000020000000200000000269640000000000080000000100000000",
        "00000000000000200000002000000004677569640000000800000001ca4963068eb0a540000000400000004000000004",
        "706174680000000900000001000000242f7661722f746d702f666978747572652d776f726b2f62617369632f76646576",
        "732f64300000002c000000280000000e6d657461736c61625f6172726179000000000008000000010000000000000017",
        "0000002c000000280000000e6d657461736c61625f736869667400000000000800000001000000000000001300000024",
        "00000020000000066173686966740000000000080000000100000000000000090000002400000020000000056173697a",
        "6500000000000008000000010000000003b8000000000024000000200000000669735f6c6f6700000000000800000001",
        "000000000000000000000028000000280000000a6372656174655f747867000000000008000000010000000000000004",
    ];
    let mut b = hex::decode(HEX.concat()).unwrap();
    b.resize(REAL_LABEL_NVLIST_LEN, 0); // the hex stops at the last nonzero byte
    b
}
#[cfg(test)]
pub(crate) const REAL_LABEL_NVLIST_LEN: usize = 832;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_label_nvlist_decodes_and_reencodes_byte_identical() {
        let packed = real_label_nvlist();
        let l = NvList::decode_packed(&packed).unwrap();
        // zdb -l facts.
        assert_eq!(l.get_u64("version"), Some(23));
        assert_eq!(l.get_str("name"), Some("tank-basic"));
        assert_eq!(l.get_u64("txg"), Some(41));
        assert_eq!(l.get_u64("pool_guid"), Some(17908523572816537081));
        assert_eq!(l.get_str("hostname"), Some("vm"));
        let t = l.get_nvlist("vdev_tree").unwrap();
        assert_eq!(t.get_str("type"), Some("file"));
        assert_eq!(t.get_str("path"), Some("/var/tmp/fixture-work/basic/vdevs/d0"));
        assert_eq!(t.get_u64("ashift"), Some(9));
        assert_eq!(t.get_u64("asize"), Some(62390272));
        assert_eq!(l.encode_xdr(), packed);
        // Trailing zero padding (as in a label block) is ignored.
        let mut padded = packed.clone();
        padded.resize(4096, 0);
        assert_eq!(NvList::decode_packed(&padded).unwrap(), l);
        let tree = l.fmt_tree();
        assert!(tree.contains("name: 'tank-basic'") && tree.contains("    ashift: 9"), "{tree}");
    }

    #[test]
    fn empty_arrays_carry_no_value() {
        let mut l = NvList::new();
        l.insert("a", NvValue::Uint64Array(vec![]));
        l.insert("b", NvValue::NvListArray(vec![]));
        l.insert("c", NvValue::StringArray(vec![]));
        l.insert("s", NvValue::StringArray(vec!["x".into(), "".into()]));
        l.insert("i", NvValue::Int16Array(vec![-1, 2]));
        l.insert("d", NvValue::Double(1.5));
        l.insert("h", NvValue::Hrtime(-5));
        let p = l.encode_xdr();
        // header 4, list header 8; pair "a": sizes 8, name 4+4, type 4, nelem 4 = 24 bytes.
        assert_eq!(&p[12..16], &24u32.to_be_bytes());
        assert_eq!(NvList::decode_packed(&p).unwrap(), l);
    }

    #[test]
    fn nested_pair_encoded_size_covers_the_embedded_list() {
        let mut c = NvList::new();
        c.add_u64("x", 1);
        let mut l = NvList::new();
        l.add_nvlist("n", c);
        let p = l.encode_xdr();
        // pair: 8 sizes + 8 name + 8 type/nelem = 24; embedded: 8 header + 32 pair "x" + 8 end.
        assert_eq!(&p[12..16], &(24u32 + 8 + 32 + 8).to_be_bytes());
        assert_eq!(p.len(), 4 + 8 + 72 + 8);
    }

    fn sample() -> NvList {
        let mut child = NvList::new();
        child.add_str("type", "file");
        child.add_u64("guid", 0x1234_5678_9abc_def0);
        child.add_str("path", "/var/tmp/d0");
        let mut tree = NvList::new();
        tree.add_str("type", "mirror");
        tree.insert("children", NvValue::NvListArray(vec![child.clone(), child]));
        let mut l = NvList::new();
        l.add_u64("version", 5000);
        l.add_str("name", "tank");
        l.add_nvlist("vdev_tree", tree);
        l.insert("features_for_read", NvValue::NvList(NvList::new()));
        l.insert("flag", NvValue::Boolean);
        l.insert("bytes", NvValue::ByteArray(vec![1, 2, 3, 4, 5]));
        l.insert("arr", NvValue::Uint64Array(vec![7, 8]));
        l.insert("b", NvValue::BooleanValue(true));
        l
    }

    #[test]
    fn xdr_round_trip() {
        let l = sample();
        let packed = l.encode_xdr();
        assert_eq!(&packed[..4], &[1, 1, 0, 0]);
        let d = NvList::decode_packed(&packed).unwrap();
        assert_eq!(d, l);
        assert_eq!(d.get_nvlist("vdev_tree").unwrap().get_nvlist_array("children").unwrap().len(), 2);
        assert_eq!(d.get_u64("version"), Some(5000));
    }

    #[test]
    fn truncated_and_garbage_inputs_error() {
        let packed = sample().encode_xdr();
        for n in [0, 3, 4, 10, packed.len() / 2, packed.len() - 1] {
            assert!(NvList::decode_packed(&packed[..n]).is_err(), "cut at {n}");
        }
        let mut bad = packed.clone();
        bad[4 + 8 + 3] = 0xff; // a huge pair size
        let _ = NvList::decode_packed(&bad);
        // deep nesting is refused
        let mut deep = NvList::new();
        for _ in 0..40 {
            let mut p = NvList::new();
            p.add_nvlist("x", deep);
            deep = p;
        }
        assert!(NvList::decode_packed(&deep.encode_xdr()).is_err());
    }
}
