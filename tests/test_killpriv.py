"""Set-user-ID and set-group-ID bits under FUSE's HANDLE_KILLPRIV_V2.

With that capability the kernel no longer asks the file system for security.capability before
every write (a round trip per write(2)); in return the file system takes the set-ID bits away
itself on a write or truncation by an unprivileged caller and on a change of owner. The oracle
is the kernel's own file system: the same steps on a directory of the disk the test runs on
must leave the same modes, each read back at once (the kernel's cached attributes included)
and after a remount (what is on disk). (test_zil checks that the intent log replays the change.)"""
import os
import subprocess
import tempfile

from test_write import new_pool, zdb_check

NOBODY = 65534


def as_nobody(*argv):
    """Run ARGV as uid/gid 65534 without capabilities (no CAP_FSETID)."""
    r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"{argv} as nobody: {r.stderr}"


def steps(d):
    """The same sequence in directory D; returns [(step, mode)] read right after each step."""
    out = []
    p = os.path.join(d, "f")

    def mode(step):
        out.append((step, oct(os.stat(p).st_mode & 0o7777)))

    with open(p, "wb") as f:
        f.write(b"x" * 100)
    os.chmod(d, 0o777)
    os.chmod(p, 0o6777)
    as_nobody("sh", "-c", f"echo y >> {p}")
    mode("unprivileged write, group-executable")
    os.chmod(p, 0o6767)
    as_nobody("sh", "-c", f"echo y >> {p}")
    mode("unprivileged write, not group-executable")
    os.chmod(p, 0o6777)
    with open(p, "ab") as f:
        f.write(b"root")
    mode("root write")
    os.chmod(p, 0o6777)
    as_nobody("truncate", "-s", "10", p)
    mode("unprivileged truncate")
    os.chmod(p, 0o6777)
    os.truncate(p, 5)
    mode("root truncate")
    os.chmod(p, 0o6755)
    os.chown(p, -1, -1)
    mode("chown -1 -1")
    os.chmod(p, 0o6745)
    os.chown(p, -1, -1)
    mode("chown -1 -1, not group-executable")
    os.chmod(p, 0o6755)
    os.chown(p, NOBODY, NOBODY)
    mode("chown")
    os.chmod(p, 0o6777)
    os.chmod(p, 0o6777)
    mode("chmod keeps the bits")
    q = os.path.join(d, "dir")
    os.mkdir(q)
    os.chmod(q, 0o3777)
    os.chown(q, NOBODY, NOBODY)
    out.append(("chown of a directory", oct(os.stat(q).st_mode & 0o7777)))
    return out


def test_setid_bits_go_as_on_the_kernels_file_system(oxzfs):
    with tempfile.TemporaryDirectory(dir="/var/tmp") as kd:
        want = steps(kd)
    vdir, alt, root = new_pool(oxzfs, "wkill", "killpriv", 1)
    d = os.path.join(root, "t")
    os.mkdir(d)
    got = steps(d)
    assert got == want, "\n".join(f"{s}: oxzfs {g}, kernel {w}" for (s, w), (_, g) in zip(want, got) if w != g)
    # On disk too (no cached attribute in the way), and the pool is clean for OpenZFS.
    assert oxzfs.export("wkill").returncode == 0
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, "wkill")
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append("wkill")
    assert oct(os.stat(os.path.join(d, "f")).st_mode & 0o7777) == want[-2][1]
    assert oct(os.stat(os.path.join(d, "dir")).st_mode & 0o7777) == want[-1][1]
    assert oxzfs.export("wkill").returncode == 0
    zdb_check(vdir, "wkill")

