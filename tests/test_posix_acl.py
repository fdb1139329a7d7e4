"""POSIX ACLs on a file system with acltype=posix, as OpenZFS on Linux keeps them.

The oracle for what ACLs do is the kernel's own implementation in tmpfs: the same steps
(setfacl, creates under a default ACL with a umask, chmod, access by another user) run on both,
and getfacl, the modes and the other user's access must come out the same. zdb is the oracle
for where they are kept: the property's number and the ACL attribute beside the file.
"""
import os
import subprocess

import pytest

from test_snapshots import pool_with_fs
from test_write import zdb_check, zdb_cmd

OTHER_UID = 65534  # nobody


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check:
        assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r


def can_read(path):
    """Whether the other user reads PATH."""
    r = subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", "cat", path],
                       capture_output=True, text=True)
    return r.returncode == 0


def scenario(root):
    """The steps, under ROOT; what they show: getfacl of each object, its mode, and whether the
    other user can read the files."""
    for tool in ("setfacl", "getfacl", "setpriv"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            pytest.fail(f"{tool} is needed: apt-get install acl util-linux", pytrace=False)
    p = lambda *n: os.path.join(root, *n)  # noqa: E731
    seen = []
    old = os.umask(0o022)
    try:
        os.mkdir(p("d"))
        os.chmod(p("d"), 0o755)
        sh("setfacl", "-m", f"u:{OTHER_UID}:rwx", p("d"))
        sh("setfacl", "-d", "-m", f"u:{OTHER_UID}:r-x,g::r-x,o::---", p("d"))
        with open(p("d", "f"), "w") as f:
            f.write("secret\n")
        os.mkdir(p("d", "sub"))
        with open(p("d", "sub", "deep"), "w") as f:
            f.write("deep\n")
        os.symlink("f", p("d", "link"))
        with open(p("plain"), "w") as f:
            f.write("plain\n")
        os.chmod(p("plain"), 0o600)
        names = ["d", "d/f", "d/sub", "d/sub/deep", "plain"]
        snap = lambda tag: seen.extend(  # noqa: E731
            (tag, n, sh("getfacl", "-pn", p(n)).stdout.replace(root, "ROOT"), oct(os.stat(p(n)).st_mode)) for n in names)
        snap("made")
        seen.append(("read", [can_read(p(n)) for n in ("d/f", "d/sub/deep", "plain")]))
        os.chmod(p("d", "f"), 0o640)
        sh("setfacl", "-m", f"u:{OTHER_UID}:r", p("plain"))
        seen.append(("read", [can_read(p(n)) for n in ("d/f", "d/sub/deep", "plain")]))
        sh("setfacl", "-m", "m::---", p("d", "sub", "deep"))
        sh("setfacl", "-b", p("d", "f"))
        sh("setfacl", "-k", p("d", "sub"))
        # An ACL that says no more than the mode is the mode.
        sh("setfacl", "--set", "u::rw,g::r,o::-", p("plain"))
        snap("changed")
        seen.append(("read", [can_read(p(n)) for n in ("d/f", "d/sub/deep", "plain")]))
    finally:
        os.umask(old)
    return seen


def test_posix_acls_as_the_kernel_keeps_them(oxzfs):
    pool = "pacl"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "pacl", pool, 1, 128, lambda d: d, "-O", "acltype=posix")
    tmp = os.path.join(oxzfs.base, "pacl-tmpfs")
    os.makedirs(tmp, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", tmp)
    try:
        want = scenario(tmp)
    finally:
        sh("umount", tmp, check=False)
    got = scenario(root)
    assert got == want
    # Kept where OpenZFS keeps them: acltype is ZFS_ACLTYPE_POSIX (1) in the properties, the
    # ACL an attribute of the file; read back after an export and import.
    r = oxzfs.zfs("get", "-Hp", "-o", "value", "acltype", fs)
    assert r.stdout.strip() == "posix", repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    head, env = zdb_cmd()
    r = subprocess.run(head + ["-e", "-p", vdir, "-dddd", pool], capture_output=True, text=True, errors="replace", env=env)
    assert r.returncode == 0 and "\tacltype = 1 \n" in r.stdout, r.stdout[-2000:] + r.stderr
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert sh("getfacl", "-pn", os.path.join(root, "d")).stdout == \
        next(x[2] for x in want if x[:2] == ("changed", "d")).replace("ROOT", root)


def test_acls_refused_without_acltype_posix(oxzfs):
    """acltype=off (the default): no ACL is taken (EOPNOTSUPP, as OpenZFS answers)."""
    pool = "noacl"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "noacl", pool, 1, 128, lambda d: d)
    with open(os.path.join(root, "f"), "w") as f:
        f.write("x")
    r = sh("setfacl", "-m", f"u:{OTHER_UID}:r", os.path.join(root, "f"), check=False)
    assert r.returncode != 0 and "Operation not supported" in r.stderr, r.stderr
