//! `zfs diff`: what changed in a file system between a snapshot and a later snapshot (or the
//! file system as last synced), as OpenZFS finds it (dmu_diff.c, libzfs_diff.c): the later
//! tree's dnode blocks born after the earlier snapshot name the objects that changed; each
//! is compared by its znode (generation, mode, links, ctime) and its path through parent
//! pointers in the two trees: added (`+`), removed (`-`), modified (`M`, with the link count's
//! change for a file whose links changed) or renamed (`R`).

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
    /// From the first path to the second.
    Renamed(String),
}

/// One line of `zfs diff`: the change, the path (from the file system's root, "/" for the
/// root), and the object's mode and ctime on the side the line describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffLine {
    pub change: Change,
    pub path: String,
    pub mode: u64,
    pub ctime: (u64, u64),
}

/// zfs_stat_t and the path of an object (zfs_obj_to_stats), as one side has it.
struct Stat {
    mode: u64,
    gen: u64,
    links: u64,
    ctime: (u64, u64),
    path: String,
}

enum Side {
    /// Not a file system object there (free, or not a znode).
    Absent,
    /// On the delete queue there (unlinked, still open when the tree was taken).
    Unlinked(Stat),
    Here(Stat),
}

struct Tree {
    fs: Arc<Zfs>,
    delete_queue: u64,
}

impl Tree {
    fn open(os: Arc<Objset>) -> Result<Tree> {
        let delete_queue = os.zap_value(MASTER_NODE_OBJ, oxzfs_format::znode::ZFS_UNLINKED_SET.as_bytes())?.unwrap_or(0);
        Ok(Tree { fs: Zfs::open(os)?, delete_queue })
    }

    fn os(&self) -> &Arc<Objset> {
        self.fs.objset()
    }

    /// zfs_obj_to_stats: the object's figures and path, or why there is none.
    fn stat(&self, obj: u64) -> Result<Side> {
        let dn = match self.os().dnode(obj) {
            Ok(d) => d,
            Err(crate::ZfsError::NotFound(_)) => return Ok(Side::Absent),
            Err(e) => return Err(e),
        };
        if dn.bonustype != types::DMU_OT_SA && dn.bonustype != types::DMU_OT_ZNODE {
            return Ok(Side::Absent);
        }
        let z = self.fs.znode(obj)?;
        let mut st = Stat { mode: z.z.mode, gen: z.z.gen, links: z.z.links, ctime: z.z.ctime, path: String::new() };
        if self.delete_queue != 0 && self.os().zap_value(self.delete_queue, format!("{obj:x}").as_bytes())?.is_some() {
            st.path = "(on_delete_queue)".into();
            return Ok(Side::Unlinked(st));
        }
        st.path = self.path(obj)?;
        Ok(Side::Here(st))
    }

    /// zfs_obj_to_path: up the parent pointers to the root (whose parent is itself), each
    /// name the parent's entry for the child; an xattr directory is `<xattrdir>`.
    fn path(&self, obj: u64) -> Result<String> {
        let mut parts: Vec<String> = Vec::new();
        let mut cur = obj;
        for _ in 0..4096 {
            let z = self.fs.znode(cur)?;
            let parent = z.z.parent;
            if parent == cur {
                parts.reverse();
                return Ok(format!("/{}", parts.join("/")));
            }
            let is_xattrdir = z.z.flags & crate::zplw::ZFS_XATTR != 0 && z.z.mode & libc::S_IFMT as u64 == libc::S_IFDIR as u64;
            if is_xattrdir {
                parts.push("<xattrdir>".into());
            } else {
                let name = self
                    .fs
                    .dir_values(parent)?
                    .into_iter()
                    .find(|(_, v)| v & ((1 << 48) - 1) == cur)
                    .map(|(n, _)| String::from_utf8_lossy(n.strip_suffix(&[0]).unwrap_or(&n)).into_owned())
                    .ok_or_else(|| crate::ZfsError::NotFound(format!("{}: no entry for it in its parent {parent}", self.os().describe(cur))))?;
                parts.push(name);
            }
            cur = parent;
        }
        Err(crate::ZfsError::Invalid(format!("{}: parent pointers do not reach the root", self.os().describe(obj))))
    }
}

/// Ranges of the later tree's dnode array that changed after `from_txg`: (first object, last
/// object, in use) in object order. A dnode block born later lists each of its dnodes (in use
/// or free); a hole born later frees every object it spans (dmu_diff.c's diff_cb; holes of a
/// pool without hole_birth carry no birth and say nothing, as in OpenZFS).
fn changed_ranges(os: &Objset, from_txg: u64) -> Result<Vec<(u64, u64, bool)>> {
    let md = &os.phys.meta_dnode;
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    let push = |first: u64, last: u64, inuse: bool, out: &mut Vec<(u64, u64, bool)>| match out.last_mut() {
        Some(l) if l.2 == inuse && l.1 + 1 == first => l.1 = last,
        _ => out.push((first, last, inuse)),
    };
    if md.nlevels == 0 {
        return Ok(out);
    }
    let epbs = (md.indblkshift as u32).saturating_sub(7);
    let per_block = (md.data_block_size() / DNODE_SIZE as u64).max(1);
    // (level, blkid, bp) still to look at, in object order.
    let top = md.nlevels - 1;
    let mut stack: Vec<(u8, u64, BlockPointer)> = md.blkptr.iter().enumerate().rev().map(|(i, bp)| (top, i as u64, bp.clone())).collect();
    while let Some((level, blkid, bp)) = stack.pop() {
        if bp.birth <= from_txg {
            continue;
        }
        let span = per_block << (epbs * level as u32);
        if bp.is_hole() && !bp.embedded {
            push(blkid * span, (blkid + 1) * span - 1, false, &mut out);
            continue;
        }
        let data = os.spa.read_bp_for(&bp, os.id)?;
        if level > 0 {
            let n = data.len() / BLKPTR_SIZE;
            for i in (0..n).rev() {
                let c = BlockPointer::decode(&data[i * BLKPTR_SIZE..], bp.little_endian).map_err(|e| crate::ZfsError::corrupt(format!("{}: meta dnode indirect block", os.describe(0)), e))?;
                stack.push((level - 1, (blkid << epbs) + i as u64, c));
            }
            continue;
        }
        let mut i = 0usize;
        while i < (data.len() / DNODE_SIZE) {
            let obj = blkid * per_block + i as u64;
            let dn = DnodePhys::decode(&data[i * DNODE_SIZE..], bp.little_endian).map_err(|e| crate::ZfsError::corrupt(os.describe(obj), e))?;
            if dn.typ == 0 {
                push(obj, obj, false, &mut out);
                i += 1;
            } else {
                push(obj, obj, true, &mut out);
                i += 1 + dn.extra_slots as usize;
            }
        }
    }
    Ok(out)
}

/// The changes from `from` (a snapshot of the file system, taken at `from_txg`) to `to` (a
/// later snapshot, or the file system as last synced), in object order as `zfs diff` prints
/// them.
pub fn diff(from: Arc<Objset>, to: Arc<Objset>, from_txg: u64) -> Result<Vec<DiffLine>> {
    let shares = to.zap_value(MASTER_NODE_OBJ, oxzfs_format::znode::ZFS_SHARES_DIR.as_bytes())?.unwrap_or(0);
    let ranges = changed_ranges(&to, from_txg)?;
    let (f, t) = (Tree::open(from)?, Tree::open(to)?);
    let mut out = Vec::new();
    let line = |change: Change, s: &Stat| DiffLine { change, path: s.path.clone(), mode: s.mode, ctime: s.ctime };
    for (first, last, inuse) in ranges {
        if !inuse {
            // write_free_diffs: what the earlier tree had there is gone.
            let limit = f.os().max_object();
            for obj in first..=last.min(limit.saturating_sub(1)) {
                if obj == shares {
                    continue;
                }
                if let Side::Here(s) = f.stat(obj)? {
                    out.push(line(Change::Removed, &s));
                }
            }
            continue;
        }
        for obj in first..=last {
            if obj == shares {
                continue;
            }
            // write_inuse_diffs_one
            let (fs, ts) = (f.stat(obj)?, t.stat(obj)?);
            let (fs, ts) = match (fs, ts) {
                (Side::Absent, Side::Absent) => continue,
                (Side::Absent, Side::Here(s) | Side::Unlinked(s)) => {
                    out.push(line(Change::Added, &s));
                    continue;
                }
                (Side::Here(s) | Side::Unlinked(s), Side::Absent) => {
                    out.push(line(Change::Removed, &s));
                    continue;
                }
                (Side::Here(a) | Side::Unlinked(a), Side::Here(b) | Side::Unlinked(b)) => (a, b),
            };
            let dir = |m: u64| m & libc::S_IFMT as u64 == libc::S_IFDIR as u64;
            let change = if dir(fs.mode) || dir(ts.mode) || fs.links == 0 || ts.links == 0 { 0 } else { ts.links as i64 - fs.links as i64 };
            let same_gen = fs.gen == ts.gen && fs.mode & libc::S_IFMT as u64 == ts.mode & libc::S_IFMT as u64;
            if !same_gen {
                // Re-created, or the object number used again.
                out.push(line(Change::Removed, &fs));
                out.push(line(Change::Added, &ts));
            } else if fs.ctime == ts.ctime {
                continue;
            } else if change != 0 {
                let path = if change > 0 { &fs.path } else { &ts.path };
                out.push(DiffLine { change: Change::Links(change), path: path.clone(), mode: ts.mode, ctime: ts.ctime });
            } else if fs.path == ts.path {
                out.push(line(Change::Modified, &ts));
            } else {
                out.push(DiffLine { change: Change::Renamed(ts.path.clone()), path: fs.path.clone(), mode: ts.mode, ctime: ts.ctime });
            }
        }
    }
    Ok(out)
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
