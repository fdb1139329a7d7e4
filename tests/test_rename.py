"""renameat2 flags through the FUSE mount: RENAME_NOREPLACE refuses an existing target,
RENAME_EXCHANGE swaps two names (files, directories, across directories), and the znodes'
parent pointers, link counts and directory entries are what OpenZFS's zdb expects."""
import ctypes
import errno
import os
import re
import subprocess

import oracle_pools
import zdbparse
from test_write import new_pool, zdb_check

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(src, dst, flags):
    """renameat2(2); raises OSError with the errno the kernel (and so the FUSE daemon) gave."""
    fn = _libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), src)


def znodes(vdir, pool):
    """{path: (object, parent object, links)} of the pool's root file system, from OpenZFS's zdb
    (paths from the directory ZAPs, parent and links from the znodes)."""
    r = subprocess.run([oracle_pools.ZDB, "-e", "-p", vdir, "-dddd", pool], capture_output=True, text=True,
                       errors="replace", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines, section = [], False
    for line in r.stdout.splitlines():
        if line.startswith("Dataset "):
            section = line.startswith(f"Dataset {pool} [ZPL]")
        elif section:
            lines.append(line)
    text = "\n".join(lines)
    attrs, cur = {}, None
    for line in lines:
        m = re.match(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[\d.]+\s+(\S.*)$", line)
        if m:
            cur = int(m.group(1))
            continue
        m = re.match(r"^\t(parent|links)\s+(\d+)$", line)
        if m and cur is not None:
            attrs.setdefault(cur, {})[m.group(1)] = int(m.group(2))
    out = {}
    for path, obj in zdbparse.zpl_paths(text).items():
        a = attrs.get(obj, {})
        out["/" + path] = (obj, a.get("parent"), a.get("links"))
    return out


def test_renameat2_noreplace_and_exchange(oxzfs):
    pool = "wren"
    vdir, alt, root = new_pool(oxzfs, pool, "rename", 1)
    p = lambda *a: os.path.join(root, *a)
    os.makedirs(p("d1", "sub1"))
    os.makedirs(p("d2", "sub2", "deep"))
    for path, data in [("d1/f1", b"one"), ("d2/f2", b"two"), ("d1/g", b"g1"), ("d1/h", b"h1")]:
        with open(p(path), "wb") as f:
            f.write(data)
    # NOREPLACE: refused onto an existing name, allowed onto a free one.
    try:
        renameat2(p("d1", "g"), p("d1", "h"), RENAME_NOREPLACE)
        raise AssertionError("RENAME_NOREPLACE replaced an existing file")
    except OSError as e:
        assert e.errno == errno.EEXIST, e
    renameat2(p("d1", "g"), p("d2", "g2"), RENAME_NOREPLACE)
    assert not os.path.exists(p("d1", "g")) and open(p("d2", "g2"), "rb").read() == b"g1"
    # EXCHANGE: two files in two directories.
    renameat2(p("d1", "f1"), p("d2", "f2"), RENAME_EXCHANGE)
    assert open(p("d1", "f1"), "rb").read() == b"two" and open(p("d2", "f2"), "rb").read() == b"one"
    # A file with a directory, across directories: the directories' link counts follow.
    links = (os.stat(p("d1")).st_nlink, os.stat(p("d2")).st_nlink)
    renameat2(p("d1", "h"), p("d2", "sub2"), RENAME_EXCHANGE)
    assert os.path.isdir(p("d1", "h")) and os.path.isfile(p("d2", "sub2"))
    assert os.path.isdir(p("d1", "h", "deep"))
    assert (os.stat(p("d1")).st_nlink, os.stat(p("d2")).st_nlink) == (links[0] + 1, links[1] - 1)
    # A directory with a file across directories, then two directories.
    renameat2(p("d1", "sub1"), p("d2", "g2"), RENAME_EXCHANGE)
    assert os.path.isfile(p("d1", "sub1")) and os.path.isdir(p("d2", "g2"))
    os.mkdir(p("d2", "x"))
    renameat2(p("d1", "h"), p("d2", "x"), RENAME_EXCHANGE)
    assert os.path.isdir(p("d2", "x", "deep")) and os.listdir(p("d1", "h")) == []
    # A missing target, and a directory exchanged with its own descendant.
    for src, dst, err in [(p("d1", "f1"), p("d2", "nothere"), errno.ENOENT),
                          (p("d2", "x"), p("d2", "x", "deep"), errno.EINVAL)]:
        try:
            renameat2(src, dst, RENAME_EXCHANGE)
            raise AssertionError(f"RENAME_EXCHANGE {src} {dst} succeeded")
        except OSError as e:
            assert e.errno == err, e
    listing = {d: sorted(os.listdir(p(d))) for d in ("d1", "d2")}
    assert listing == {"d1": ["f1", "h", "sub1"], "d2": ["f2", "g2", "sub2", "x"]}, listing
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    z = znodes(vdir, pool)
    d1, d2 = z["/d1"][0], z["/d2"][0]
    want_parent = {"/d1/f1": d1, "/d1/h": d1, "/d1/sub1": d1, "/d2/f2": d2, "/d2/g2": d2, "/d2/sub2": d2,
                   "/d2/x": d2, "/d2/x/deep": z["/d2/x"][0]}
    for path, parent in want_parent.items():
        assert path in z, (path, sorted(z))
        assert z[path][1] == parent, (path, z[path], parent)
    # Directory link counts as OpenZFS counts them: 2 + subdirectories.
    assert z["/d1"][2] == 2 + 1 and z["/d2"][2] == 2 + 2, (z["/d1"], z["/d2"])
    r = oxzfs.import_ro(vdir, pool, os.path.dirname(root))
    assert r.returncode == 0, repr(r)
    assert open(p("d1", "f1"), "rb").read() == b"two" and open(p("d2", "sub2"), "rb").read() == b"h1"
    assert open(p("d1", "sub1"), "rb").read() == b"g1" and open(p("d2", "f2"), "rb").read() == b"one"
    assert oxzfs.export(pool).returncode == 0
