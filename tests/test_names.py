"""Case-insensitive and Unicode-normalized file systems (casesensitivity, normalization,
utf8only): names found in another case or form, as OpenZFS finds them.

The oracle is zfs-fuse (version 23 has all three properties): a directory of such a file system
is a ZAP that hashes each name by its normalized, upper-cased form, so a name oxzfs writes with
the wrong hash is one zfs-fuse cannot find in a big (fat) directory, and a name zfs-fuse wrote
is one oxzfs finds only if it compares names as zap_match does. zdb checks the pool after.
"""
import os
import subprocess

from conftest import zfs_fuse_imported, zfs_fuse_new_pool
from test_snapshots import pool_with_fs
from test_write import make_devs, zdb_check

NFC_CAFE = "caf\u00e9"
NFD_CAFE = "cafe\u0301"
# Longer than a micro ZAP's names (MZAP_NAME_LEN): its directory is a fat ZAP, looked up by hash.
LONG = "A-Name-Too-Long-For-A-Micro-ZAP-" * 2 + "Mixed"


def zf(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    assert r.returncode == 0, f"zfs-fuse {' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


def test_names_cross_zfs_fuse(oxzfs, work_dir):
    """File systems zfs-fuse made case-insensitive (one also formD): oxzfs finds what zfs-fuse
    wrote under any case or form, refuses a second name that folds to an existing one, removes
    and renames by another case; zfs-fuse then finds under any case what oxzfs wrote, in a
    fat directory too (the hash of the folded name)."""
    pool = "zfnames"
    base = os.path.join(oxzfs.base, pool)
    vdir = os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1, 256)
    zalt, alt = os.path.join(base, "zfs-fuse-alt"), os.path.join(base, "alt")
    ci, nf = f"{pool}/ci", f"{pool}/nf"
    with zfs_fuse_new_pool(work_dir, zalt, pool, devs):
        zf("zfs", "create", "-o", "casesensitivity=insensitive", ci)
        zf("zfs", "create", "-o", "casesensitivity=insensitive", "-o", "normalization=formD", nf)
        zci, znf = os.path.join(zalt, ci), os.path.join(zalt, nf)
        write(os.path.join(zci, "Foo"), "foo")
        write(os.path.join(zci, "Keep"), "keep")
        write(os.path.join(zci, LONG), "long")
        write(os.path.join(zci, "Gone"), "gone")
        os.mkdir(os.path.join(zci, "Dir"))
        write(os.path.join(znf, NFC_CAFE), "cafe")
        r = zf("zfs", "get", "-H", "-o", "value", "casesensitivity,normalization,utf8only", nf)
        assert r.stdout.split() == ["insensitive", "formD", "on"], r.stdout
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    oci, onf = os.path.join(alt, ci), os.path.join(alt, nf)
    r = oxzfs.zfs("get", "-H", "-o", "value", "casesensitivity,normalization,utf8only", nf)
    assert r.stdout.split() == ["insensitive", "formD", "on"], repr(r)
    # What zfs-fuse wrote, found under other cases and forms.
    assert read(os.path.join(oci, "FOO")) == "foo" and read(os.path.join(oci, "fOo")) == "foo"
    assert read(os.path.join(oci, LONG.lower())) == "long"
    assert read(os.path.join(onf, NFD_CAFE.upper())) == "cafe"
    assert os.path.isdir(os.path.join(oci, "DIR"))
    # A name that folds to an existing one is that one.
    try:
        os.open(os.path.join(oci, "KEEP"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        raise AssertionError("KEEP made beside Keep")
    except FileExistsError:
        pass
    os.mkdir(os.path.join(oci, "dir", "Sub"))
    # Removal and renames by another case. (A rename to another case of the same name changes
    # nothing: the kernel sees one file under both names, as on Linux OpenZFS.)
    os.unlink(os.path.join(oci, "GONE"))
    os.rename(os.path.join(oci, "foo"), os.path.join(oci, "Bar"))
    os.rename(os.path.join(oci, "BAR"), os.path.join(oci, "bar"))
    assert sorted(os.listdir(oci)) == sorted(["Bar", "Keep", LONG, "Dir"])
    # New names, not ASCII, in the fat directory and the normalized one.
    write(os.path.join(oci, "\u00c9lan"), "elan")
    write(os.path.join(oci, "New-" + LONG), "new long")
    write(os.path.join(onf, "R\u00e9sum\u00e9"), "resume")
    assert read(os.path.join(onf, "re\u0301sume\u0301".upper())) == "resume"
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    with zfs_fuse_imported(work_dir, vdir, zalt, pool):
        zci, znf = os.path.join(zalt, ci), os.path.join(zalt, nf)
        assert read(os.path.join(zci, "\u00e9LAN")) == "elan"
        assert read(os.path.join(zci, "new-" + LONG.lower())) == "new long"
        assert read(os.path.join(zci, "BAR")) == "foo"
        assert not os.path.exists(os.path.join(zci, "gone"))
        assert os.path.isdir(os.path.join(zci, "dir", "SUB"))
        assert read(os.path.join(znf, "RE\u0301SUME\u0301")) == "resume"
        assert read(os.path.join(znf, NFD_CAFE)) == "cafe"
        assert sorted(os.listdir(zci)) == sorted(["Bar", "Keep", LONG, "Dir", "\u00c9lan", "New-" + LONG])


def test_names_oxzfs_makes(oxzfs, work_dir):
    """`zfs create -o casesensitivity=... -o normalization=...` as OpenZFS takes them (a
    normalization turns utf8only on, a child inherits them); zfs-fuse reads the file systems
    as so made; mixed keeps Linux's lookups exact; utf8only refuses other names."""
    pool = "oxnames"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "oxnames", pool, 1, 256, lambda d: d, "-o", "version=23")
    ci, mx = f"{pool}/ci", f"{pool}/mx"
    assert oxzfs.zfs("create", "-o", "casesensitivity=insensitive", "-o", "normalization=formC", ci).returncode == 0
    assert oxzfs.zfs("create", "-o", "casesensitivity=mixed", mx).returncode == 0
    assert oxzfs.zfs("create", f"{ci}/child").returncode == 0
    r = oxzfs.zfs("create", "-o", "normalization=formD", "-o", "utf8only=off", f"{pool}/bad")
    assert r.returncode != 0 and "'utf8only' must be set 'on' if normalization chosen" in r.stderr, repr(r)
    r = oxzfs.zfs("create", "-o", "casesensitivity=maybe", f"{pool}/bad")
    assert r.returncode != 0 and "'casesensitivity' must be one of 'sensitive | insensitive | mixed'" in r.stderr, repr(r)
    r = oxzfs.zfs("get", "-H", "-o", "value", "casesensitivity,normalization,utf8only", f"{ci}/child")
    assert r.stdout.split() == ["insensitive", "formC", "on"], repr(r)
    oci, omx = os.path.join(alt, ci), os.path.join(alt, mx)
    write(os.path.join(oci, "Readme"), "readme")
    write(os.path.join(oci, LONG), "long")
    assert read(os.path.join(oci, "README")) == "readme"
    write(os.path.join(omx, "a"), "lower")
    write(os.path.join(omx, "A"), "upper")
    assert read(os.path.join(omx, "a")) == "lower" and read(os.path.join(omx, "A")) == "upper"
    try:
        write(os.path.join(oci, "bad\udcff"), "x")
        raise AssertionError("a name that is not UTF-8 made with utf8only=on")
    except OSError as e:
        assert e.errno == 84, e  # EILSEQ
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    zalt = os.path.join(oxzfs.base, "oxnames-zf")
    with zfs_fuse_imported(work_dir, vdir, zalt, pool):
        r = zf("zfs", "get", "-H", "-o", "value", "casesensitivity,normalization,utf8only", ci)
        assert r.stdout.split() == ["insensitive", "formC", "on"], r.stdout
        zci = os.path.join(zalt, ci)
        assert read(os.path.join(zci, "readme")) == "readme"
        assert read(os.path.join(zci, LONG.upper())) == "long"
        write(os.path.join(zci, "Zf"), "zf")
        zmx = os.path.join(zalt, mx)
        assert read(os.path.join(zmx, "A")) == "upper"


def test_normalized_directory_limits(oxzfs):
    """What a normalized directory refuses, as OpenZFS's ZAP would: a name whose normalized
    form is longer than a name may be (ENOTSUP), and more names of one normalized form than a
    ZAP leaf holds on a mixed file system (ENOSPC, where every case of "abcdefg" hashes alike);
    the pool stays sound."""
    pool = "normlim"
    vdir, alt, fs, root = pool_with_fs(oxzfs, "normlim", pool, 1, 128, lambda d: d)
    mx, kd = f"{pool}/mx", f"{pool}/kd"
    assert oxzfs.zfs("create", "-o", "casesensitivity=mixed", mx).returncode == 0
    assert oxzfs.zfs("create", "-o", "normalization=formKD", kd).returncode == 0
    omx, okd = os.path.join(alt, mx), os.path.join(alt, kd)
    made, refused = 0, None
    for i in range(128):
        name = "".join(c.upper() if i >> b & 1 else c for b, c in enumerate("abcdefg"))
        try:
            open(os.path.join(omx, name), "w").close()
            made += 1
        except OSError as e:
            refused = e.errno
            break
    assert (made, refused) == (64, 28), (made, refused)  # ENOSPC
    # U+FDFA is one character of 3 bytes, and 18 under compatibility decomposition.
    try:
        open(os.path.join(okd, "\ufdfa" * 80), "w").close()
        raise AssertionError("a name of 1400 normalized bytes made")
    except OSError as e:
        assert e.errno == 95, e  # EOPNOTSUPP
    open(os.path.join(okd, "\ufdfa" * 7), "w").close()
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
