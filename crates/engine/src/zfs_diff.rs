//! `zfs diff`: what changed in a file system between a snapshot and a later snapshot (or the
//! file system as last synced), as OpenZFS finds it (dmu_diff.c, libzfs_diff.c): the later
//! tree's dnode blocks born after the earlier snapshot name the objects that changed; each
//! is compared by its znode (generation, mode, links, ctime) and its path through parent
//! pointers in the two trees: added (`+`), removed (`-`), modified (`M`, with the link count's
//! change for a file whose links changed) or renamed (`R`). What cannot be described is
//! reported and the rest goes on, as libzfs does.

use std::sync::Arc;

use oxzfs_format::blkptr::{BlockPointer, BLKPTR_SIZE};
use oxzfs_format::dnode::{DnodePhys, DNODE_SIZE};
use oxzfs_format::types;

use crate::dmu::{Objset, ObjsetRead};
use crate::zfs_znode::MASTER_NODE_OBJ;
use crate::zpl::{Zfs, ZplRead};
use crate::Result;

/// What a diff line says of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Removed,
    Modified,
    /// The links of a file went up or down by this much.
    Links(i64),
    /// From the line's path to this one.
    Renamed(Vec<u8>),
}

/// One line of `zfs diff`: the change, the path (from the file system's root, "/" for the
/// root; bytes as the names are), and the object's mode and ctime on the side the line
/// describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffLine {
    pub change: Change,
    pub path: Vec<u8>,
    pub mode: u64,
    pub ctime: (u64, u64),
}

/// What `diff` found: its lines, and the objects it could not describe (each said once, as
/// libzfs reports them and goes on).
#[derive(Debug, Default)]
pub struct Diff {
    pub lines: Vec<DiffLine>,
    pub errors: Vec<String>,
}

/// zfs_stat_t of an object, and its path when one was found (zfs_obj_to_stats).
#[derive(Default)]
struct Stat {
    mode: u64,
    gen: u64,
    links: u64,
    ctime: (u64, u64),
    /// None: no path (a parent that no longer names the object, as after the link a file's
    /// parent pointer came from is removed): get_stats_for_obj's ENOENT, stats kept.
    path: Option<Vec<u8>>,
}

struct Tree {
    fs: Arc<Zfs>,
    delete_queue: u64,
    /// Dnode blocks read, by block id: the objects that begin in them (slot heads).
    heads: std::cell::RefCell<std::collections::HashMap<u64, Vec<(u64, DnodePhys)>>>,
}

/// The dnodes that begin in dnode block `blkid` of `os` (an inner slot of a large dnode is
/// none: dnode_hold_impl's ENOENT), free ones left out.
fn slot_heads(os: &Objset, blkid: u64) -> Result<Vec<(u64, DnodePhys)>> {
    let md = &os.phys.meta_dnode;
    let Some(bp) = os.block_pointer(md, 0, blkid)? else { return Ok(Vec::new()) };
    slot_heads_of(os, blkid, &bp)
}

/// [`slot_heads`] of dnode block `blkid` whose block pointer is `bp`.
fn slot_heads_of(os: &Objset, blkid: u64, bp: &BlockPointer) -> Result<Vec<(u64, DnodePhys)>> {
    if bp.is_hole() && !bp.embedded {
        return Ok(Vec::new());
    }
    let per_block = (os.phys.meta_dnode.data_block_size() / DNODE_SIZE as u64).max(1);
    let data = os.spa.read_bp_for(bp, os.id)?;
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < data.len() / DNODE_SIZE {
        let obj = blkid * per_block + i as u64;
        let dn = DnodePhys::decode(&data[i * DNODE_SIZE..], bp.little_endian).map_err(|e| crate::ZfsError::corrupt(os.describe(obj), e))?;
        if dn.typ == 0 {
            i += 1;
            continue;
        }
        i += 1 + dn.extra_slots as usize;
        out.push((obj, dn));
    }
    Ok(out)
}

impl Tree {
    fn open(os: Arc<Objset>) -> Result<Tree> {
        let delete_queue = os.zap_value(MASTER_NODE_OBJ, oxzfs_format::znode::ZFS_UNLINKED_SET.as_bytes())?.unwrap_or(0);
        Ok(Tree { fs: Zfs::open(os)?, delete_queue, heads: Default::default() })
    }

    fn os(&self) -> &Arc<Objset> {
        self.fs.objset()
    }

    fn per_block(&self) -> u64 {
        (self.os().phys.meta_dnode.data_block_size() / DNODE_SIZE as u64).max(1)
    }

    /// The dnode of object `obj` if an object begins there.
    fn head(&self, obj: u64) -> Result<Option<DnodePhys>> {
        let blkid = obj / self.per_block();
        let mut heads = self.heads.borrow_mut();
        if !heads.contains_key(&blkid) {
            if heads.len() > 256 {
                heads.clear();
            }
            heads.insert(blkid, slot_heads(self.os(), blkid)?);
        }
        Ok(heads[&blkid].iter().find(|(o, _)| *o == obj).map(|(_, d)| d.clone()))
    }

    /// The objects that begin in `first..=last` (ZFS_IOC_NEXT_OBJ over the range).
    fn allocated_in(&self, first: u64, last: u64) -> Result<Vec<u64>> {
        let md = &self.os().phys.meta_dnode;
        let per = self.per_block();
        let mut out = Vec::new();
        for blkid in first / per..=(last / per).min(md.maxblkid) {
            out.extend(slot_heads(self.os(), blkid)?.into_iter().map(|(o, _)| o).filter(|o| (first..=last).contains(o)));
        }
        Ok(out)
    }

    /// zfs_obj_to_stats: None when it is no file system object here (free, an inner slot, or
    /// not a znode: ENOENT or ENOTSUP).
    fn stat(&self, obj: u64) -> Result<Option<Stat>> {
        let Some(dn) = self.head(obj)? else { return Ok(None) };
        if dn.bonustype != types::DMU_OT_SA && dn.bonustype != types::DMU_OT_ZNODE {
            return Ok(None);
        }
        let z = self.fs.znode(obj)?;
        let mut st = Stat { mode: z.z.mode, gen: z.z.gen, links: z.z.links, ctime: z.z.ctime, path: None };
        if self.delete_queue != 0 && self.os().zap_value(self.delete_queue, format!("{obj:x}").as_bytes())?.is_some() {
            st.path = Some(b"(on_delete_queue)".to_vec());
            return Ok(Some(st));
        }
        st.path = self.path(obj)?;
        Ok(Some(st))
    }

    /// zfs_obj_to_path: up the parent pointers to the root (whose parent is itself), each
    /// name the parent's entry for the child; an xattr directory is `<xattrdir>`. None when a
    /// parent has no entry for the child.
    fn path(&self, obj: u64) -> Result<Option<Vec<u8>>> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut cur = obj;
        for _ in 0..4096 {
            let z = self.fs.znode(cur)?;
            let parent = z.z.parent;
            if parent == cur {
                let mut out = Vec::new();
                for p in parts.iter().rev() {
                    out.push(b'/');
                    out.extend_from_slice(p);
                }
                if out.is_empty() {
                    out.push(b'/');
                }
                return Ok(Some(out));
            }
            let is_xattrdir = z.z.flags & crate::zplw::ZFS_XATTR != 0 && z.z.mode & libc::S_IFMT as u64 == libc::S_IFDIR as u64;
            if is_xattrdir {
                parts.push(b"<xattrdir>".to_vec());
            } else {
                let Some(name) = self.fs.dir_values(parent)?.into_iter().find(|(_, v)| v & ((1 << 48) - 1) == cur).map(|(n, _)| n) else {
                    return Ok(None);
                };
                parts.push(name.strip_suffix(&[0]).map(<[u8]>::to_vec).unwrap_or(name));
            }
            cur = parent;
        }
        Err(crate::ZfsError::Invalid(format!("{}: parent pointers do not reach the root", self.os().describe(obj))))
    }
}

/// Ranges of the later tree's dnode array that changed after `from_txg`: (first object, last
/// object, in use) in object order. A dnode block born later lists each of its dnodes (in use
/// or free); a hole born later frees every object it spans, and so does a hole of no birth
/// (a pool without hole_birth, or a block that was always a hole), which OpenZFS's traversal
/// visits too (send_holes_without_birth_time) (dmu_diff.c's diff_cb).
fn changed_ranges(os: &Objset, from_txg: u64) -> Result<Vec<(u64, u64, bool)>> {
    let md = &os.phys.meta_dnode;
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    let push = |first: u64, last: u64, inuse: bool, out: &mut Vec<(u64, u64, bool)>| match out.last_mut() {
        Some(l) if l.2 == inuse && l.1.checked_add(1) == Some(first) => l.1 = last,
        _ => out.push((first, last, inuse)),
    };
    if md.nlevels == 0 {
        return Ok(out);
    }
    // Object numbers are below 2^48: shifts past that say nothing more.
    let epbs = (md.indblkshift.clamp(7, 17) as u32) - 7;
    let per_block = (md.data_block_size() / DNODE_SIZE as u64).max(1);
    let top = md.nlevels - 1;
    let mut stack: Vec<(u8, u64, BlockPointer)> = md.blkptr.iter().enumerate().rev().map(|(i, bp)| (top, i as u64, bp.clone())).collect();
    while let Some((level, blkid, bp)) = stack.pop() {
        let hole = bp.is_hole() && !bp.embedded;
        if bp.birth <= from_txg && !(hole && bp.birth == 0) {
            continue;
        }
        let span = per_block.checked_shl(epbs * level as u32).filter(|s| *s < 1 << 48).unwrap_or(1 << 48);
        let first = blkid.saturating_mul(span);
        if first >= 1 << 48 {
            continue;
        }
        if hole {
            push(first, first.saturating_add(span - 1).min((1 << 48) - 1), false, &mut out);
            continue;
        }
        if level > 0 {
            let data = os.spa.read_bp_for(&bp, os.id)?;
            let n = data.len() / BLKPTR_SIZE;
            for i in (0..n).rev() {
                let c = BlockPointer::decode(&data[i * BLKPTR_SIZE..], bp.little_endian).map_err(|e| crate::ZfsError::corrupt(format!("{}: meta dnode indirect block", os.describe(0)), e))?;
                stack.push((level - 1, (blkid << epbs) + i as u64, c));
            }
            continue;
        }
        let mut obj = first;
        // The block the walk reached: its pointer is at hand.
        let heads = slot_heads_of(os, blkid, &bp)?;
        for (o, _) in heads {
            if o > obj {
                push(obj, o - 1, false, &mut out);
            }
            push(o, o, true, &mut out);
            obj = o + 1;
        }
        if obj < first + per_block {
            push(obj, first + per_block - 1, false, &mut out);
        }
    }
    Ok(out)
}

/// The changes from `from` (a snapshot of the file system, taken at `from_txg`) to `to` (a
/// later snapshot, or the file system as last synced), in object order as `zfs diff` prints
/// them.
pub fn diff(from: Arc<Objset>, to: Arc<Objset>, from_txg: u64) -> Result<Diff> {
    let shares = to.zap_value(MASTER_NODE_OBJ, oxzfs_format::znode::ZFS_SHARES_DIR.as_bytes())?.unwrap_or(0);
    let ranges = changed_ranges(&to, from_txg)?;
    let (f, t) = (Tree::open(from)?, Tree::open(to)?);
    let mut d = Diff::default();
    let stat = |tree: &Tree, obj: u64, d: &mut Diff| match tree.stat(obj) {
        Ok(s) => s,
        Err(e) => {
            d.errors.push(format!("Unable to determine path or stats for object {obj} in {}: {e}", tree.os().describe(obj)));
            None
        }
    };
    for (first, last, inuse) in ranges {
        if !inuse {
            // write_free_diffs: what the earlier tree had there is gone (describe_free: not
            // if it was on the delete queue or has no path).
            for obj in f.allocated_in(first, last)? {
                if obj == shares {
                    continue;
                }
                if let Some(s) = stat(&f, obj, &mut d) {
                    if let Some(p) = s.path.filter(|p| p != b"(on_delete_queue)") {
                        d.lines.push(DiffLine { change: Change::Removed, path: p, mode: s.mode, ctime: s.ctime });
                    }
                }
            }
            continue;
        }
        for obj in first..=last {
            if obj == shares {
                continue;
            }
            // write_inuse_diffs_one
            let (fs, ts) = (stat(&f, obj, &mut d), stat(&t, obj, &mut d));
            let ferr = fs.as_ref().map_or(true, |s| s.path.is_none());
            let terr = ts.as_ref().map_or(true, |s| s.path.is_none());
            if ferr && terr {
                continue;
            }
            let (fs, ts) = (fs.unwrap_or_default(), ts.unwrap_or_default());
            let dir = |m: u64| m & libc::S_IFMT as u64 == libc::S_IFDIR as u64;
            let change = if dir(fs.mode) || dir(ts.mode) || fs.links == 0 || ts.links == 0 { 0 } else { ts.links as i64 - fs.links as i64 };
            let line = |change: Change, s: &Stat| DiffLine { change, path: s.path.clone().unwrap_or_default(), mode: s.mode, ctime: s.ctime };
            if ferr {
                d.lines.push(line(if change != 0 { Change::Links(change) } else { Change::Added }, &ts));
                continue;
            }
            if terr {
                let l = line(if change != 0 { Change::Links(change) } else { Change::Removed }, &fs);
                d.lines.push(l);
                continue;
            }
            let same_gen = fs.gen == ts.gen && fs.mode & libc::S_IFMT as u64 == ts.mode & libc::S_IFMT as u64;
            if !same_gen {
                // Re-created, or the object number used again.
                d.lines.push(line(Change::Removed, &fs));
                d.lines.push(line(Change::Added, &ts));
            } else if fs.ctime == ts.ctime {
                continue;
            } else if change != 0 {
                let path = if change > 0 { &fs.path } else { &ts.path };
                d.lines.push(DiffLine { change: Change::Links(change), path: path.clone().unwrap_or_default(), mode: ts.mode, ctime: ts.ctime });
            } else if fs.path == ts.path {
                d.lines.push(line(Change::Modified, &ts));
            } else {
                d.lines.push(DiffLine { change: Change::Renamed(ts.path.clone().unwrap_or_default()), path: fs.path.clone().unwrap_or_default(), mode: ts.mode, ctime: ts.ctime });
            }
        }
    }
    Ok(d)
}

/// The path as libzfs's stream_bytes writes it: printable characters but for the backslash
/// as they are, every other byte as a backslash and four octal digits.
pub fn mangle(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s {
        if c > b' ' && c != b'\\' && c < 0x7f {
            out.push(c as char);
        } else {
            out.push_str(&format!("\\{c:04o}"));
        }
    }
    out
}

/// get_what: the -F letter of a mode.
pub fn type_letter(mode: u64) -> char {
    match mode as u32 & libc::S_IFMT {
        libc::S_IFBLK => 'B',
        libc::S_IFCHR => 'C',
        libc::S_IFDIR => '/',
        libc::S_IFIFO => '|',
        libc::S_IFLNK => '@',
        libc::S_IFSOCK => '=',
        libc::S_IFREG => 'F',
        _ => '?',
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_mangled_as_libzfs_streams_them() {
        assert_eq!(mangle(b"/a b\\c\td\x7f\xc3\xa9"), "/a\\0040b\\0134c\\0011d\\0177\\0303\\0251");
        assert_eq!(mangle(b"/plain-name_1.txt"), "/plain-name_1.txt");
        assert_eq!((type_letter(0o100644), type_letter(0o40755), type_letter(0o120777)), ('F', '/', '@'));
    }
}
