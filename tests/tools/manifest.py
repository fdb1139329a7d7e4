#!/usr/bin/env python3
"""manifest.py ROOT [--exclude REL]... — the content a reader must reproduce, one JSON object per line.

One object per entry below ROOT (ROOT itself is "."), sorted by path, keys sorted:
  path    relative, '/'-separated
  type    file | dir | symlink | fifo | socket | chardev | blockdev
  mode    permission bits including setuid/setgid/sticky, as an octal string ("0o4755")
  uid, gid
  size, nlink, sha256        for files (sha256 of the content, holes read as zeros)
  target                     for symlinks
  rdev                       for device nodes
  xattrs  {name: sha256}     user.* extended attributes, only when there are some

The walk stays inside ROOT's file system: a directory on another device (a child dataset mounted
below its parent) is left out together with everything below it, and so is ".zfs" at the root.
--exclude drops an entry and everything below it (a child dataset's mountpoint directory as seen
inside a snapshot of the parent). The format is that of the fixtures' *.manifest.jsonl.
"""
import hashlib
import json
import os
import stat
import sys

TYPES = {stat.S_IFCHR: "chardev", stat.S_IFBLK: "blockdev", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket"}


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def entry(root, rel):
    p = os.path.join(root, rel) if rel != "." else root
    st = os.lstat(p)
    e = {"path": rel, "mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid, "gid": st.st_gid}
    fmt = stat.S_IFMT(st.st_mode)
    if fmt == stat.S_IFLNK:
        e.update(type="symlink", target=os.readlink(p))
        return e
    if fmt == stat.S_IFDIR:
        e["type"] = "dir"
    elif fmt == stat.S_IFREG:
        e.update(type="file", size=st.st_size, nlink=st.st_nlink, sha256=file_sha256(p))
    else:
        e["type"] = TYPES.get(fmt, "unknown")
        if fmt in (stat.S_IFCHR, stat.S_IFBLK):
            e["rdev"] = st.st_rdev
        return e
    try:
        names = sorted(n for n in os.listxattr(p, follow_symlinks=False) if n.startswith("user."))
    except OSError:
        names = []
    if names:
        e["xattrs"] = {n: hashlib.sha256(os.getxattr(p, n, follow_symlinks=False)).hexdigest()
                       for n in names}
    return e


def paths(root, exclude=()):
    excluded = {os.path.normpath(x) for x in exclude}
    dev = os.lstat(root).st_dev
    rels = ["."]
    for d, dirs, files in os.walk(root):
        keep = []
        for x in dirs:
            full = os.path.join(d, x)
            rel = os.path.relpath(full, root)
            if (d == root and x == ".zfs") or rel in excluded:
                continue
            if os.lstat(full).st_dev != dev:
                continue
            keep.append(x)
        dirs[:] = keep
        for n in keep + files:
            rel = os.path.relpath(os.path.join(d, n), root)
            if rel not in excluded:
                rels.append(rel)
    return sorted(rels)


def manifest(root, exclude=()):
    """The entries of ROOT as a list of dicts, sorted by path."""
    return [entry(root, rel) for rel in paths(root, exclude)]


def dumps(entries):
    return "".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in entries)


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv):
    args, exclude = [], []
    it = iter(argv[1:])
    for a in it:
        if a == "--exclude":
            exclude.append(next(it))
        else:
            args.append(a)
    if len(args) != 1:
        sys.stderr.write("usage: manifest.py ROOT [--exclude REL]...\n")
        return 2
    sys.stdout.write(dumps(manifest(args[0], exclude)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
