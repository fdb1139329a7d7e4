//! ZAP encoders: a whole ZAP object written from its entries (the writer keeps dirty ZAPs in
//! memory and encodes them once per sync).
//!
//! ```text
//!   micro: one block: mzap_phys (block type, salt, normflags, pad) then 64-byte entries
//!          (value u64, cd u32, pad u16, name[50])
//!   fat:   block 0: zap_phys header + the embedded pointer table (second half of the block,
//!          2^(bs_shift-4) entries, each naming a leaf); then leaves: header, hash buckets
//!          (2^(bs_shift-5) u16 chunk heads), 24-byte chunks: entries, name and value arrays
//!          (integers big-endian), free chunks
//! ```
//!
//! The leaves are blocks 1..=2^p, leaf v holding the hashes whose top p bits are v. While
//! 2^p fits the embedded table (bs_shift-4 bits: 1024 pointers in a 16K block) the table is
//! embedded; past that it is external, as zap_grow_ptrtbl leaves it: zt_shift = p, zt_numblks =
//! 2^p·8/bs blocks at zt_blk, right after the leaves, one pointer per leaf.
use crate::zap::{zap_hash, zap_hash_bits, zap_hashbits, ZAP_LEAF_MAGIC, ZAP_MAGIC, ZBT_HEADER, ZBT_LEAF, ZBT_MICRO};

pub struct FatEntry {
    pub key: Vec<u8>,
    pub int_size: u8,
    pub values: Vec<u64>,
}

pub fn encode_micro(salt: u64, normflags: u64, entries: &[(String, u64)], blksz: usize) -> Vec<u8> {
    let mut b = vec![0u8; blksz];
    b[0..8].copy_from_slice(&ZBT_MICRO.to_le_bytes());
    b[8..16].copy_from_slice(&salt.to_le_bytes());
    b[16..24].copy_from_slice(&normflags.to_le_bytes());
    let mut cds: std::collections::HashMap<u64, u32> = Default::default();
    for (i, (name, v)) in entries.iter().enumerate() {
        let h = zap_hash(salt, &crate::zap::normalized_key(normflags, name.as_bytes()));
        let cd = cds.entry(h).or_insert(0);
        let o = 64 * (i + 1);
        b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        b[o + 8..o + 12].copy_from_slice(&cd.to_le_bytes());
        *cd += 1;
        b[o + 14..o + 14 + name.len()].copy_from_slice(name.as_bytes());
    }
    b
}

/// Chunks one entry takes in a leaf: the entry chunk, its name and its value arrays.
fn entry_chunks(e: &FatEntry) -> usize {
    1 + e.key.len().div_ceil(21).max(1) + (e.values.len() * e.int_size as usize).div_ceil(21).max(1)
}

fn entry_hash(salt: u64, flags: u64, normflags: u64, e: &FatEntry) -> u64 {
    let bits = zap_hashbits(flags);
    if flags & crate::zap::ZAP_FLAG_UINT64_KEY != 0 {
        let words: Vec<u64> = e.key.chunks(8).map(|c| u64::from_be_bytes(c.try_into().unwrap_or([0; 8]))).collect();
        crate::zap::zap_hash_uint64(salt, &words, bits, flags & crate::zap::ZAP_FLAG_PRE_HASHED_KEY != 0)
    } else {
        let k = e.key.strip_suffix(&[0]).unwrap_or(&e.key);
        zap_hash_bits(salt, &crate::zap::normalized_key(normflags, k), bits)
    }
}

/// A fat ZAP: header block with the embedded pointer table, then 2^p leaves, leaf v holding
/// the entries whose hash starts with the p bits of v (the smallest p for which all fit), then
/// the external pointer table when 2^p outgrows the embedded one.
pub fn encode_fat(salt: u64, flags: u64, normflags: u64, entries: &[FatEntry], leaf_shift: u32) -> Vec<Vec<u8>> {
    let bs = 1usize << leaf_shift;
    let hash_n = 1usize << (leaf_shift - 5);
    let nchunks = (bs - 2 * hash_n) / 24 - 2;
    let embedded_shift = leaf_shift as u64 - 4;
    let hashes: Vec<u64> = entries.iter().map(|e| entry_hash(salt, flags, normflags, e)).collect();
    let mut p = 0u32;
    loop {
        let mut used = vec![0usize; 1 << p];
        for (e, h) in entries.iter().zip(&hashes) {
            let v = if p == 0 { 0 } else { (h >> (64 - p)) as usize };
            used[v] += entry_chunks(e);
        }
        if used.iter().all(|&u| u <= nchunks) {
            break;
        }
        p += 1;
        // 2^p leaves of a few chunks' entries each: only hash collisions of many entries
        // (a salted CRC-64, far past any directory's size) could need more.
        assert!(p <= 32, "fat ZAP of {} entries: hashes too clustered to split", entries.len());
    }
    let nleaves = 1usize << p;
    let (ptr_shift, ext_blocks) = if p as u64 <= embedded_shift { (embedded_shift, 0) } else { (p as u64, (8usize << p) / bs) };
    let ptr_blk = if ext_blocks > 0 { 1 + nleaves as u64 } else { 0 };
    let mut hdr = vec![0u8; bs];
    let put = |b: &mut [u8], o: usize, v: u64| b[o..o + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut hdr, 0, ZBT_HEADER);
    put(&mut hdr, 8, ZAP_MAGIC);
    put(&mut hdr, 16, ptr_blk); // zt_blk (0: embedded)
    put(&mut hdr, 24, ext_blocks as u64); // zt_numblks
    put(&mut hdr, 32, ptr_shift);
    put(&mut hdr, 40, 0);
    put(&mut hdr, 48, 0);
    put(&mut hdr, 56, 1 + nleaves as u64 + ext_blocks as u64); // freeblk
    put(&mut hdr, 64, nleaves as u64);
    put(&mut hdr, 72, entries.len() as u64);
    put(&mut hdr, 80, salt);
    put(&mut hdr, 88, normflags);
    put(&mut hdr, 96, flags);
    let mut table = vec![0u8; if ext_blocks > 0 { ext_blocks * bs } else { bs / 2 }];
    for i in 0..(1usize << ptr_shift) {
        let leaf = 1 + (i >> (ptr_shift as u32 - p));
        put(&mut table, i * 8, leaf as u64);
    }
    if ext_blocks == 0 {
        hdr[bs / 2..].copy_from_slice(&table);
    }
    let mut out = vec![hdr];
    let mut members: Vec<Vec<(&FatEntry, u64)>> = vec![Vec::new(); nleaves];
    for (e, &h) in entries.iter().zip(&hashes) {
        members[if p == 0 { 0 } else { (h >> (64 - p)) as usize }].push((e, h));
    }
    for (v, m) in members.iter().enumerate() {
        out.push(encode_leaf(m, leaf_shift, v as u64, p, flags & crate::zap::ZAP_FLAG_UINT64_KEY != 0));
    }
    if ext_blocks > 0 {
        out.extend(table.chunks(bs).map(<[u8]>::to_vec));
    }
    out
}

fn encode_leaf(members: &[(&FatEntry, u64)], leaf_shift: u32, prefix: u64, prefix_len: u32, uint64_keys: bool) -> Vec<u8> {
    let bs = 1usize << leaf_shift;
    let hash_shift = leaf_shift - 5;
    let hash_n = 1usize << hash_shift;
    let chunks0 = 48 + 2 * hash_n;
    let nchunks = (bs - 2 * hash_n) / 24 - 2;
    let mut l = vec![0u8; bs];
    let mut next = 0usize;
    let mut heads: Vec<u16> = vec![0xffff; hash_n];
    let mut cds: std::collections::HashMap<u64, u32> = Default::default();
    let write_array = |l: &mut Vec<u8>, first: usize, bytes: &[u8]| {
        let n = bytes.len().div_ceil(21).max(1);
        for k in 0..n {
            let o = chunks0 + (first + k) * 24;
            l[o] = 251;
            let part = &bytes[(k * 21).min(bytes.len())..((k + 1) * 21).min(bytes.len())];
            l[o + 1..o + 1 + part.len()].copy_from_slice(part);
            let nx: u16 = if k + 1 < n { (first + k + 1) as u16 } else { 0xffff };
            l[o + 22..o + 24].copy_from_slice(&nx.to_le_bytes());
        }
        n
    };
    for (e, h) in members {
        let h = *h;
        let cd = cds.entry(h).or_insert(0);
        let ec = next;
        next += 1;
        let nc = next;
        next += write_array(&mut l, nc, &e.key);
        let mut vb = Vec::new();
        for v in &e.values {
            vb.extend_from_slice(&v.to_be_bytes()[8 - e.int_size as usize..]);
        }
        let vc = next;
        next += write_array(&mut l, vc, &vb);
        let idx = ((h >> (64 - hash_shift - prefix_len)) as usize) & (hash_n - 1);
        let o = chunks0 + ec * 24;
        l[o] = 252;
        l[o + 1] = e.int_size;
        l[o + 2..o + 4].copy_from_slice(&heads[idx].to_le_bytes());
        l[o + 4..o + 6].copy_from_slice(&(nc as u16).to_le_bytes());
        let name_ints = if uint64_keys { e.key.len() / 8 } else { e.key.len() };
        l[o + 6..o + 8].copy_from_slice(&(name_ints as u16).to_le_bytes());
        l[o + 8..o + 10].copy_from_slice(&(vc as u16).to_le_bytes());
        l[o + 10..o + 12].copy_from_slice(&(e.values.len() as u16).to_le_bytes());
        l[o + 12..o + 16].copy_from_slice(&cd.to_le_bytes());
        l[o + 16..o + 24].copy_from_slice(&h.to_le_bytes());
        *cd += 1;
        heads[idx] = ec as u16;
    }
    assert!(next <= nchunks, "leaf overflow");
    for i in 0..hash_n {
        l[48 + 2 * i..50 + 2 * i].copy_from_slice(&heads[i].to_le_bytes());
    }
    for c in next..nchunks {
        let o = chunks0 + c * 24;
        l[o] = 253;
        let nx: u16 = if c + 1 < nchunks { (c + 1) as u16 } else { 0xffff };
        l[o + 22..o + 24].copy_from_slice(&nx.to_le_bytes());
    }
    l[0..8].copy_from_slice(&ZBT_LEAF.to_le_bytes());
    l[16..24].copy_from_slice(&prefix.to_le_bytes());
    l[24..28].copy_from_slice(&ZAP_LEAF_MAGIC.to_le_bytes());
    l[28..30].copy_from_slice(&((nchunks - next) as u16).to_le_bytes());
    l[30..32].copy_from_slice(&(members.len() as u16).to_le_bytes());
    l[32..34].copy_from_slice(&(prefix_len as u16).to_le_bytes());
    let fl: u16 = if next < nchunks { next as u16 } else { 0xffff };
    l[34..36].copy_from_slice(&fl.to_le_bytes());
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zap::{decode_fat_header, decode_fat_leaf, embedded_ptrtbl, zap_leaf_index};

    /// The pointer of `hash` in an encoded fat ZAP, read as a reader reads it (embedded table,
    /// or the external blocks at zt_blk).
    fn leaf_of(blocks: &[Vec<u8>], hash: u64) -> u64 {
        let h = decode_fat_header(&blocks[0], true).unwrap();
        let idx = zap_leaf_index(hash, h.ptrtbl_shift) as usize;
        if h.ptrtbl_numblks == 0 {
            return embedded_ptrtbl(&blocks[0], true).unwrap()[idx];
        }
        let per = blocks[0].len() / 8;
        let b = &blocks[(h.ptrtbl_blk as usize) + idx / per];
        u64::from_le_bytes(b[(idx % per) * 8..(idx % per) * 8 + 8].try_into().unwrap())
    }

    fn roundtrip(n: usize, name_len: usize) -> u64 {
        let salt = 0x1234_5678_9abc_def1;
        let entries: Vec<FatEntry> = (0..n)
            .map(|k| {
                let mut key = format!("{k:07}").into_bytes();
                key.resize(name_len, b'n');
                key.push(0);
                FatEntry { key, int_size: 8, values: vec![k as u64] }
            })
            .collect();
        let blocks = encode_fat(salt, 0, 0, &entries, 14);
        let h = decode_fat_header(&blocks[0], true).unwrap();
        assert_eq!(h.num_entries, n as u64);
        assert_eq!(h.freeblk, blocks.len() as u64, "every block up to freeblk is written");
        assert_eq!(1 + h.num_leafs + h.ptrtbl_numblks, blocks.len() as u64);
        if h.ptrtbl_numblks > 0 {
            assert_eq!(h.ptrtbl_blk, 1 + h.num_leafs, "the external table follows the leaves");
            assert_eq!(h.ptrtbl_numblks * (16384 / 8), 1 << h.ptrtbl_shift);
        } else {
            assert_eq!((h.ptrtbl_blk, h.ptrtbl_shift), (0, 10));
        }
        for (k, e) in entries.iter().enumerate().step_by(7) {
            let hash = entry_hash(salt, 0, 0, e);
            let leaf = decode_fat_leaf(&blocks[leaf_of(&blocks, hash) as usize], true).unwrap();
            assert_eq!(leaf.prefix, zap_leaf_index(hash, leaf.prefix_len as u64));
            let found = leaf.entries.iter().find(|x| x.key[..] == e.key[..e.key.len() - 1]).expect("entry in the leaf its hash names");
            assert_eq!(found.value_u64s(), vec![k as u64]);
        }
        h.ptrtbl_numblks
    }

    /// A case-folding ZAP's entries sit where the hash of their upper-cased names points,
    /// which is where OpenZFS looks them up; their header keeps the normflags.
    #[test]
    fn fat_zap_hashes_normalized_names() {
        let salt = 0x0fed_cba9_8765_4321;
        let norm = crate::zap::U8_TEXTPREP_TOUPPER;
        let entries: Vec<FatEntry> = (0..4000)
            .map(|k| FatEntry { key: format!("file-{k:05}.txt\0").into_bytes(), int_size: 8, values: vec![k] })
            .collect();
        let blocks = encode_fat(salt, 0, norm, &entries, 14);
        assert_eq!(decode_fat_header(&blocks[0], true).unwrap().normflags, norm);
        let mut moved = 0;
        for e in entries.iter().step_by(13) {
            let name = &e.key[..e.key.len() - 1];
            let hash = crate::zap::zap_hash(salt, &name.to_ascii_uppercase());
            let leaf = decode_fat_leaf(&blocks[leaf_of(&blocks, hash) as usize], true).unwrap();
            assert!(leaf.entries.iter().any(|x| x.key[..] == *name), "{:?} not in the leaf its normalized hash names", String::from_utf8_lossy(name));
            moved += (leaf_of(&blocks, hash) != leaf_of(&blocks, crate::zap::zap_hash(salt, name))) as usize;
        }
        assert!(moved > 0, "upper-casing moved no name to another leaf: the check proves nothing");
    }

    #[test]
    fn fat_zap_embedded_table() {
        assert_eq!(roundtrip(3000, 30), 0);
    }

    #[test]
    fn fat_zap_outgrows_the_embedded_table() {
        // 255-byte names take 15 chunks: ~40 fit a 16K leaf, so 60000 need more than 1024 leaves.
        assert!(roundtrip(60000, 255) >= 1);
    }
}
