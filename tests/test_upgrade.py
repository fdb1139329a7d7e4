"""`zpool upgrade`: listing pools that lack features, -v, enabling features.

A pool created with every feature disabled (`zpool create -d`) is listed with each feature
oxzfs would enable (the optional ones marked (*)); `zpool upgrade POOL` enables them, and
libzpool's zhack then finds every one of them enabled in the MOS (for_read or for_write, with
its description), OpenZFS's zdb finds the pool clean, and a bookmark (a feature the upgrade
enabled) can be made. A legacy-version pool is listed with its version and refused by name.
"""
import os
import re
import subprocess

from test_removal import ZHACK
import oracle_pools
from test_write import make_devs, zdb_check

HEADER = "This system supports ZFS pool feature flags.\n\n"


def zhack_features(vdir, pool):
    """{guid: refcount} of features_for_read and features_for_write, and the guids that have a
    description, as OpenZFS's zhack feature stat prints them."""
    r = subprocess.run([ZHACK, "-d", vdir, "feature", "stat", pool], capture_output=True, text=True,
                       errors="replace", timeout=120)
    assert r.returncode == 0, r.stderr
    sections = re.split(r"^(\w+):$", r.stdout, flags=re.M)
    parts = dict(zip(sections[1::2], sections[2::2]))
    counts = {}
    for sec in ("for_read_obj", "for_write_obj"):
        counts.update({m.group(1): int(m.group(2)) for m in re.finditer(r"^\t(\S+) = (\d+)$", parts.get(sec, ""), re.M)})
    described = set(re.findall(r"^\t(\S+) = ", parts.get("descriptions_obj", ""), re.M))
    return counts, described


def test_upgrade_enables_what_create_enables(oxzfs):
    base = os.path.join(oxzfs.base, "upg")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 2, 128)
    assert oxzfs.zpool("create", "-d", "-R", alt, "upg", devs[0]).returncode == 0
    oxzfs.imported.append("upg")
    assert oxzfs.zpool("create", "-o", "version=23", "-R", alt, "upg23", devs[1]).returncode == 0
    oxzfs.imported.append("upg23")
    r = oxzfs.zpool("upgrade")
    assert r.returncode == 0, repr(r)
    assert r.stdout.startswith(HEADER + "The following pools are formatted with legacy version numbers"), repr(r)
    assert "VER  POOL\n---  ------------\n23   upg23\n" in r.stdout, repr(r)
    listed = r.stdout.split("POOL  FEATURE\n---------------\nupg\n")[1].split("\n\n")[0].split()
    assert "bookmarks" in listed and "blake3(*)" in listed and "lz4_compress" in listed, listed
    r = oxzfs.zpool("upgrade", "-V", "23", "upg")
    assert r.stdout == HEADER + "Pool 'upg' is already formatted using more current version '5000'.\n\n", repr(r)
    r = oxzfs.zpool("upgrade", "upg")
    assert r.returncode == 0 and r.stdout.startswith(HEADER + "Enabled the following features on 'upg':\n"), repr(r)
    enabled = [x.strip() for x in r.stdout.splitlines()[3:] if x.startswith("  ")]
    assert enabled == [x for x in listed if not x.endswith("(*)")], (enabled, listed)
    r = oxzfs.zpool("upgrade", "upg")
    assert r.stdout == HEADER + "Pool 'upg' already has all supported and requested features enabled.\n", repr(r)
    for f in enabled:
        r = oxzfs.zpool("get", "-H", "-o", "value", f"feature@{f}", "upg")
        assert r.stdout.strip() in ("enabled", "active"), (f, r)
    assert oxzfs.zfs("snapshot", "upg@s").returncode == 0
    r = oxzfs.zfs("bookmark", "upg@s", "upg#b")
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    for bad, msg in ((["-V", "99", "upg"], "invalid version '99'\n"), (["-v", "upg"], "-v option is incompatible with other arguments\n"),
                     (["-a", "upg"], "-a option should not be used along with a pool name\n")):
        r = oxzfs.zpool("upgrade", *bad)
        assert r.returncode == 2 and r.stderr.startswith(msg) and "usage:" in r.stderr, repr(r)
    r = oxzfs.zpool("upgrade", "-v")
    assert r.returncode == 0 and "\nbookmarks                             (read-only compatible)\n" in r.stdout, repr(r)
    assert " 28  Multiple vdev replacements\n" in r.stdout, repr(r)
    assert oxzfs.export("upg").returncode == 0
    only = os.path.join(base, "upg-dev")
    os.makedirs(only, exist_ok=True)
    os.link(devs[0], os.path.join(only, os.path.basename(devs[0])))
    zdb_check(only, "upg")
    counts, described = zhack_features(only, "upg")
    # A feature's guid ends with its name ("org.illumos:lz4_compress").
    short = lambda guids: {g.split(":", 1)[1] for g in guids}  # noqa: E731
    assert set(enabled) <= short(counts) and set(enabled) <= short(described), (enabled, counts, described)
    assert counts["com.delphix:bookmarks"] == 1, counts
    assert oxzfs.export("upg23").returncode == 0


def test_zfs_fuse_pool_upgraded_to_feature_flags(oxzfs, zfs_fuse_pools):
    """A raidz1 pool zfs-fuse wrote (version 23, with a snapshot) moves to feature flags: the
    version-26 upgrade (the $FREE directory, the free bpobj, dd_clones), the feature objects and
    version 5000 in the labels. Every file system and snapshot still reads as zfs-fuse's
    manifests say; snapshots, a clone and a bookmark are made and destroyed after; OpenZFS's zdb
    is clean and reads version 5000, every dd_clones lists its clones, and libzpool (zhack)
    imports the pool read-write and changes it, after which we read it all again."""
    from conftest import assert_manifest, copy_vdevs, pool_info
    from test_promote import check_dir_clones
    from test_removal import zhack_rw
    name = "oxt-raidz1"
    src = zfs_fuse_pools[name]
    vdir = copy_vdevs(os.path.join(src, "vdevs"), os.path.join(oxzfs.base, "upg-zf", "vdevs"))
    alt = os.path.join(oxzfs.base, "upg-zf", "alt")
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, name)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(name)
    r = oxzfs.zpool("upgrade", name)
    assert r.returncode == 0, repr(r)
    assert r.stdout.startswith(HEADER + f"Successfully upgraded '{name}' from version 23 to feature flags.\n"
                               f"Enabled the following features on '{name}':\n"), repr(r)
    r = oxzfs.zpool("get", "-H", "-o", "value", "version,feature@bookmarks", name)
    assert r.stdout.split() == ["-", "enabled"], repr(r)
    info = pool_info(src)

    def check_manifests():
        for ds in info["datasets"]:
            root = os.path.join(alt, ds["name"])
            # (the clone's mountpoint directory stays in the root file system, as in OpenZFS)
            assert_manifest(root, os.path.join(src, ds["manifest"]), ds["children"] + ["upclone"])
            for snap, man in ds.get("snapshot_manifests", {}).items():
                assert_manifest(os.path.join(root, ".zfs", "snapshot", snap), os.path.join(src, man), ds["children"])

    check_manifests()
    fs = info["datasets"][0]["name"]
    assert oxzfs.zfs("snapshot", f"{fs}@up").returncode == 0
    assert oxzfs.zfs("clone", f"{fs}@up", f"{name}/upclone").returncode == 0
    assert oxzfs.zfs("bookmark", f"{fs}@up", f"{fs}#up").returncode == 0
    with open(os.path.join(alt, name, "upclone", "new"), "wb") as f:
        f.write(os.urandom(200000))
    assert oxzfs.export(name).returncode == 0
    zdb_check(vdir, name)
    check_dir_clones(vdir, name)
    r = subprocess.run([os.path.join(oracle_pools.OPENZFS_BIN, "zdb"), "-e", "-p", vdir, "-C", name],
                       capture_output=True, text=True)
    assert r.returncode == 0 and re.search(r"^\s+version: 5000$", r.stdout, re.M), r.stdout[:2000]
    zhack_rw(vdir, "feature", "enable", name, "com.example:after_upgrade")
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, name)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(name)
    for victim in (f"{name}/upclone", f"{fs}#up", f"{fs}@up"):
        r = oxzfs.zfs("destroy", victim)
        assert r.returncode == 0, repr(r)
    check_manifests()
    assert oxzfs.export(name).returncode == 0
    zdb_check(vdir, name)
