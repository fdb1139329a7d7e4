#!/usr/bin/env python3
"""populate.py ROOT SEED PROFILE — write deterministic test content under ROOT.

The same SEED and PROFILE always give the same names, bytes, modes and owners, so a tree written
through one ZFS implementation can be compared, entry by entry, with what another one reads back
(see manifest.py).

Profiles:
  small   every kind of entry: file sizes on both sides of the 512 B, 4 KiB and 128 KiB block edges,
          holes made by seeking (leading, inner, trailing, all-hole), a deep path, unicode and odd
          names, short and long symlinks (inline and spilled to a block), hard links, modes such as
          0o600, 0o4755, 0o2750, 0o1777, other owners, a fifo, user.* xattrs (where the file
          system supports them: zfs-fuse does not, and they are then silently absent).
  wide    one directory with 3000 entries of 200-byte names (fat ZAP directory), plus a small dir.
  big     a few MiB of random bytes, a few MiB of text, and a sparse 1 GiB file.
  dup     repeated identical blocks (for dedup).
  change  mutates an existing tree: rewrites, appends, truncates, deletes, renames, chmods, new
          files and directories, a removed directory.

Only the standard library.
"""
import errno
import os
import random
import sys

WORDS = [b"pool", b"vdev", b"special", b"metaslab", b"txg", b"arc", b"l2arc", b"zil", b"dedup",
         b"snapshot", b"raidz", b"mirror", b"checksum", b"uberblock", b"dnode", b"\n"]


def blob(rng, n, kind):
    if kind == "random":
        return rng.randbytes(n)
    if kind == "zeros":
        return bytes(n)
    if kind == "text":
        out = bytearray()
        while len(out) < n:
            out += rng.choice(WORDS) + b" "
        return bytes(out[:n])
    raise ValueError(kind)


def write(path, data, mode=0o644, owner=None):
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if owner is not None:
        os.chown(path, *owner)
    os.chmod(path, mode)


def holey(path, size, pieces):
    """A file of SIZE bytes that holds only PIECES [(offset, bytes)]; the rest are holes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        for off, data in pieces:
            f.seek(off)
            f.write(data)
        f.truncate(size)


def try_xattr(path, name, value):
    try:
        os.setxattr(path, name, value, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM):
            raise


def small(root, rng):
    sizes = [0, 1, 511, 512, 513, 4095, 4096, 4097, 16383, 16384, 16385, 65536,
             131071, 131072, 131073, 262145, 300000, 1 << 20]
    for i, n in enumerate(sizes):
        for kind in ("random", "text", "zeros"):
            write(f"{root}/sizes/{kind}/f{i:02d}_{n}", blob(rng, n, kind))
    # holes made by seeking past the end
    K = 1024
    holey(f"{root}/holes/leading", 300 * K, [(260 * K, blob(rng, 5000, "random"))])
    holey(f"{root}/holes/inner", 1 << 20, [(0, blob(rng, 4096, "random")),
                                          ((1 << 20) - 4096, blob(rng, 4096, "random"))])
    holey(f"{root}/holes/trailing", 5 << 20, [(0, blob(rng, 200 * K, "text"))])
    holey(f"{root}/holes/all-hole", 3 << 20, [])
    holey(f"{root}/holes/unaligned", 8 << 20,
          [(rng.randrange(0, 8 << 20), blob(rng, rng.randrange(1, 9000), "random")) for _ in range(7)])
    deep = root + "/deep/" + "/".join(f"level{i:02d}" for i in range(30))
    write(deep + "/bottom.txt", b"bottom of the tree\n")
    write(f"{root}/modes/exec.sh", b"#!/bin/sh\necho hi\n", 0o755)
    write(f"{root}/modes/private", blob(rng, 100, "text"), 0o600)
    write(f"{root}/modes/setuid", blob(rng, 3000, "random"), 0o4755)
    write(f"{root}/modes/setgid", blob(rng, 10, "text"), 0o2750)
    write(f"{root}/modes/none", b"no permissions\n", 0o000)
    write(f"{root}/modes/owned", b"owned by someone else\n", 0o640, owner=(1234, 5678))
    write(f"{root}/modes/nobody", b"nobody's\n", 0o644, owner=(65534, 65534))
    os.makedirs(f"{root}/modes/sticky")
    os.chmod(f"{root}/modes/sticky", 0o1777)
    os.makedirs(f"{root}/modes/dir700")
    write(f"{root}/modes/dir700/inside", b"inside a 0700 dir\n")
    os.chmod(f"{root}/modes/dir700", 0o700)
    write(f"{root}/names/caf\u00e9 \u65e5\u672c\u8a9e \u0444\u0430\u0439\u043b.txt", b"unicode name\n")
    write(f"{root}/names/emoji-\U0001F600-\u00e5\u00e4\u00f6", b"more unicode\n")
    write(f"{root}/names/with space and 'quotes' \"double\"", b"odd name\n")
    write(f"{root}/names/" + "L" * 255, b"a 255-byte name\n")
    write(f"{root}/names/.hidden", b"dot file\n")
    os.symlink("sizes/text/f07_4097", f"{root}/link-short")
    os.symlink("/" + "x" * 200 + "/target-that-does-not-exist", f"{root}/link-long")
    os.symlink("../" * 40 + "y" * 900, f"{root}/link-very-long")
    os.symlink("deep/level00", f"{root}/link-to-dir")
    os.symlink("dangling", f"{root}/names/link-dangling")
    os.link(f"{root}/sizes/random/f06_4096", f"{root}/hardlink-to-f06")
    os.makedirs(f"{root}/hardlinks")
    for i in range(3):
        os.link(f"{root}/sizes/text/f13_131072", f"{root}/hardlinks/h{i}")
    os.makedirs(f"{root}/empty-dir")
    os.mkfifo(f"{root}/fifo")
    for i in range(40):
        write(f"{root}/many/m{i:03d}", blob(rng, rng.randrange(0, 2000), "text"))
    try_xattr(f"{root}/sizes/text/f05_4095", "user.comment", b"an extended attribute")
    try_xattr(f"{root}/sizes/text/f05_4095", "user.big", rng.randbytes(2000))
    try_xattr(f"{root}/empty-dir", "user.on-a-dir", b"x")


def wide(root, rng):
    for i in range(3000):
        name = f"{i:05d}-" + "w" * 194
        write(f"{root}/wide/{name}", blob(rng, rng.randrange(0, 300), "text"))
    for i in range(20):
        write(f"{root}/narrow/n{i}", blob(rng, 100, "random"))


def big(root, rng):
    write(f"{root}/big/random-6M", blob(rng, 6 << 20, "random"))
    write(f"{root}/big/text-5M", blob(rng, 5 << 20, "text"))
    pieces = [(rng.randrange(0, (1 << 30) - 65536), blob(rng, rng.randrange(1, 65536), "random"))
              for _ in range(16)]
    holey(f"{root}/big/sparse-1G", 1 << 30, pieces)


def dup(root, rng):
    block = blob(rng, 128 << 10, "random")
    for i in range(12):
        write(f"{root}/dup/copy-{i}", block * 4)
    for i in range(4):
        write(f"{root}/dup/unique-{i}", blob(rng, 256 << 10, "random"))


def change(root, rng):
    files = []
    for d, dirs, fs in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != ".zfs" and not os.path.ismount(os.path.join(d, x)))
        for f in sorted(fs):
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                files.append(p)
    files.sort()
    for p in rng.sample(files, max(1, len(files) // 5)):
        act = rng.choice(["rewrite", "append", "delete", "rename", "truncate", "chmod", "extend"])
        size = os.path.getsize(p)
        if act == "rewrite":
            with open(p, "r+b") as f:
                f.seek(rng.randrange(0, max(1, size)))
                f.write(rng.randbytes(rng.randrange(1, 70000)))
        elif act == "append":
            with open(p, "ab") as f:
                f.write(rng.randbytes(rng.randrange(1, 200000)))
        elif act == "delete":
            os.unlink(p)
        elif act == "rename":
            os.rename(p, p + ".renamed")
        elif act == "truncate":
            os.truncate(p, size // 2)
        elif act == "chmod":
            os.chmod(p, rng.choice([0o600, 0o640, 0o755, 0o444]))
        else:
            os.truncate(p, size + rng.randrange(1, 3 << 20))
    write(f"{root}/added-after-change", blob(rng, 50000, "text"))
    write(f"{root}/new-dir/nested/file", blob(rng, 140000, "random"))
    victim = os.path.join(root, "many")
    if os.path.isdir(victim):
        for f in sorted(os.listdir(victim)):
            os.unlink(os.path.join(victim, f))
        os.rmdir(victim)


PROFILES = {"small": small, "wide": wide, "big": big, "dup": dup, "change": change}


def populate(root, seed, profile):
    os.makedirs(root, exist_ok=True)
    PROFILES[profile](root, random.Random(f"{profile}:{seed}"))


def main(argv):
    if len(argv) != 4 or argv[3] not in PROFILES:
        sys.stderr.write(f"usage: populate.py ROOT SEED {{{'|'.join(PROFILES)}}}\n")
        return 2
    populate(argv[1], int(argv[2]), argv[3])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
