"""Offline/online and resilver, judged by the device bytes and the oracles.

A mirror side taken offline is left untouched while the pool goes on writing; each txg it
misses goes into its DTL (a space map in the MOS, as OpenZFS keeps it). `zpool online` brings it
back and resilvers only those txgs, after which the side alone (the other one taken away) holds
every file, and OpenZFS's `zdb -bcc` is clean at every step. `zpool status` shows what OpenZFS 2.1
shows: OFFLINE, DEGRADED with the administrator text, then `resilvered … with 0 errors`."""
import os
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import manifest as manifest_mod
from conftest import diff_manifests, status_rows, unmount_below, zfs_fuse_imported
from test_gang import digest as file_hash
from test_damage import rot_sectors
from test_scrub import alone, check_reads, import_rw, new_pool, scrub_done
from test_write import _strip_xattrs, zdb_check


def zdb_checks(*pools):
    """zdb_check of each (vdev dir, pool) at once: zdb's run time is mostly its own waiting."""
    with ThreadPoolExecutor(len(pools)) as ex:
        for f in [ex.submit(zdb_check, v, p) for v, p in pools]:
            f.result()


def status(oxzfs, pool):
    return oxzfs.zpool("status", pool, check=True).stdout


def state_of(text, dev):
    rows = status_rows(text)
    mine = [v for k, v in rows.items() if k == dev or k.endswith("/" + dev)]
    assert mine, f"{dev} not in status:\n{text}"
    return mine[0][0]


def write_more(alt, pool, name, seed, mib):
    rng = random.Random(seed)
    with open(os.path.join(alt, pool, name), "wb") as f:
        f.write(rng.randbytes(mib << 20))


def nice_to_bytes(v):
    mult = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return float(v[:-1]) * mult[v[-1]] if v[-1] in mult else float(v)


def written_then_reimported(oxzfs, vdir, pool, alt, name, seed, mib):
    """MIB MiB written to NAME, the pool exported and imported, the resilver the import starts
    waited for: (status, the manifest of the root file system)."""
    write_more(alt, pool, name, seed, mib)
    want = manifest_mod.manifest(os.path.join(alt, pool))
    assert oxzfs.export(pool).returncode == 0
    import_rw(oxzfs, vdir, pool, alt)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    return status(oxzfs, pool), want


def resilvered(text):
    m = re.search(r"scan: resilvered (\S+) in (\d+:\d\d:\d\d) with (\d+) errors on ", text)
    assert m, f"no finished resilver in status:\n{text}"
    return nice_to_bytes(m.group(1)), int(m.group(3))


def test_offline_online_resilvers_only_what_was_missed(oxzfs):
    pool = "rsoff"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 11)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    import_rw(oxzfs, vdir, pool, alt)

    r = oxzfs.zpool("offline", pool, "d1")
    assert r.returncode == 0, repr(r)
    text = status(oxzfs, pool)
    assert state_of(text, "d1") == "OFFLINE" and state_of(text, "mirror-0") == "DEGRADED", text
    assert " state: DEGRADED" in text, text
    # status -x: a pool with a problem is shown whole.
    assert oxzfs.zpool("status", "-x", pool, check=True).stdout == text
    assert ("status: One or more devices has been taken offline by the administrator.\n"
            "\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\n"
            "action: Online the device using 'zpool online' or replace the device with\n\t'zpool replace'.\n") in text, text
    # The other side cannot go too; nor can a device that is not there.
    r = oxzfs.zpool("offline", pool, "d0")
    assert r.returncode == 1 and r.stderr == "cannot offline d0: no valid replicas\n", repr(r)
    r = oxzfs.zpool("offline", pool, "nosuch")
    assert r.returncode == 1 and r.stderr == "cannot offline nosuch: no such device in pool\n", repr(r)
    # Nor can the side that holds every txg leave the mirror.
    r = oxzfs.zpool("detach", pool, "d0")
    assert r.returncode == 1 and r.stderr == "cannot detach d0: no valid replicas\n", repr(r)

    # Writes go on without d1: not a byte of it changes, labels included.
    before = file_hash(d1)
    write_more(alt, pool, "while-offline.bin", 1, 3)
    oxzfs.zpool("sync", pool, check=True)
    assert file_hash(d1) == before, "an offline device was written"
    want = manifest_mod.manifest(os.path.join(alt, pool))

    # Offline (not -t) is in the config: it stays so across export and import, and the DTL
    # space map passes zdb.
    assert oxzfs.export(pool).returncode == 0
    assert file_hash(d1) == before, "export wrote to an offline device"
    listing = oxzfs.zpool("import", "-d", vdir, check=True).stdout
    assert "  state: DEGRADED\nstatus: One or more devices are offlined.\n" in listing, listing
    assert re.search(r"\n\t    \S+/d1 +OFFLINE\n", listing), listing
    zdb_check(vdir, pool)
    import_rw(oxzfs, vdir, pool, alt)
    assert state_of(status(oxzfs, pool), "d1") == "OFFLINE"

    r = oxzfs.zpool("online", pool, "d1")
    assert r.returncode == 0, repr(r)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    assert errors == 0 and state_of(text, "d1") == "ONLINE" and " state: ONLINE" in text, text
    # status -x: a healthy pool named is said to be so; with no pool named, only unhealthy ones
    # are shown.
    r = oxzfs.zpool("status", "-x", pool)
    assert r.returncode == 0 and r.stdout == f"pool '{pool}' is healthy\n", repr(r)
    r = oxzfs.zpool("status", "-x")
    assert r.returncode == 0 and pool not in r.stdout, repr(r)
    # Only the txgs d1 missed: about the 3 MiB written meanwhile, not the whole pool.
    assert 3 << 20 <= done < 8 << 20, f"resilvered {done} bytes for 3 MiB missed:\n{text}"
    assert oxzfs.export(pool).returncode == 0
    # d1 alone holds every file.
    only = alone(oxzfs, vdir, "d1", "rsoff")
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def test_temporary_offline_ends_at_import_with_a_resilver(oxzfs):
    pool = "rstemp"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["raidz1"] + d, 3, 12)
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("offline", "-t", pool, "d2")
    assert r.returncode == 0, repr(r)
    r = oxzfs.zpool("offline", pool, "d1")
    assert r.returncode == 1 and r.stderr == "cannot offline d1: no valid replicas\n", repr(r)
    # -t is not in the config: back ONLINE at import, which resilvers what d2 missed.
    text, want = written_then_reimported(oxzfs, vdir, pool, alt, "while-offline.bin", 2, 2)
    done, errors = resilvered(text)
    assert errors == 0 and state_of(text, "d2") == "ONLINE", text
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    # With d0 gone, d2's columns are needed: every file still reads.
    os.rename(os.path.join(vdir, "d0"), os.path.join(vdir, "d0.away"))
    try:
        check_reads(oxzfs, vdir, pool, alt, want)
    finally:
        os.rename(os.path.join(vdir, "d0.away"), os.path.join(vdir, "d0"))


def blank(path, mib):
    with open(path, "wb") as f:
        f.truncate(mib << 20)


def test_attach_makes_a_mirror_and_detach_undoes_it(oxzfs):
    pool = "rsattach"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: d, 1, 14)
    d0, d1, small = (os.path.join(vdir, n) for n in ("d0", "d1", "small"))
    blank(d1, 64)
    blank(small, 32)
    import_rw(oxzfs, vdir, pool, alt)

    # Refusals, nothing written.
    r = oxzfs.zpool("attach", pool, "d0", small)
    assert r.returncode == 1 and r.stderr == f"cannot attach {small} to d0: device is too small\n", repr(r)
    with open(small, "rb") as f:
        assert not f.read().strip(b"\0"), "a refused attach wrote to the device"
    r = oxzfs.zpool("attach", pool, "d0", d0)
    assert r.returncode == 1 and r.stderr.endswith(f"{d0} is part of active pool '{pool}'\n"), repr(r)
    r = oxzfs.zpool("attach", pool, "nosuch", d1)
    assert r.returncode == 1 and r.stderr == f"cannot attach {d1} to nosuch: no such device in pool\n", repr(r)
    r = oxzfs.zpool("detach", pool, "d0")
    assert r.returncode == 1 and r.stderr == "cannot detach d0: only applicable to mirror and replacing vdevs\n", repr(r)
    r = oxzfs.zpool("offline", pool, "d0")
    assert r.returncode == 1 and r.stderr == "cannot offline d0: no valid replicas\n", repr(r)
    r = oxzfs.zpool("offline", pool)
    assert r.returncode == 2 and r.stderr.startswith("missing device name\nusage:\n\toffline [-f] [-t] <pool> <device> ..."), repr(r)
    r = oxzfs.zpool("online", "nopool", "d0")
    assert r.returncode == 1 and r.stderr == "cannot open 'nopool': no such pool\n", repr(r)
    assert " state: ONLINE" in status(oxzfs, pool)

    r = oxzfs.zpool("attach", "-w", pool, "d0", d1)
    assert r.returncode == 0, repr(r)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    assert errors == 0 and state_of(text, "mirror-0") == "ONLINE" and state_of(text, "d1") == "ONLINE", text
    assert done >= 6 << 20, f"a new mirror side got {done} bytes of a pool holding more than 6 MiB:\n{text}"
    write_more(alt, pool, "after-attach.bin", 3, 1)
    want = manifest_mod.manifest(os.path.join(alt, pool))
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d1", "rsattach")
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)

    # Detach shrinks the mirror of two back to the plain disk d1; d0 forgets the pool.
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("detach", pool, "d0")
    assert r.returncode == 0, repr(r)
    text = status(oxzfs, pool)
    rows = status_rows(text)
    assert "mirror-0" not in rows and not any(k.endswith("/d0") for k in rows) and state_of(text, "d1") == "ONLINE", text
    r = oxzfs.zpool("detach", pool, "d1")
    assert r.returncode == 1 and r.stderr == "cannot detach d1: only applicable to mirror and replacing vdevs\n", repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    check_reads(oxzfs, vdir, pool, alt, want)


def test_resilver_never_copies_a_block_that_fails_its_checksum(oxzfs):
    """One disk with rotten sectors, a second attached: the resilver (its reads of ranges and
    the writes of the new side on their own thread) copies only what verifies. No rotten
    sector reaches the new side; what could not be read is counted as errors and named by
    `zpool status -v`; the pool stays up."""
    pool = "rsrot"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: d, 1, 16)
    d0, d1 = (os.path.join(vdir, n) for n in ("d0", "d1"))
    blank(d1, 64)
    rotten = {}
    assert rot_sectors(d0, seed=16, fraction=0.03, written=rotten) > 0
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("attach", "-w", pool, "d0", d1)
    assert r.returncode == 0, repr(r)
    text = oxzfs.zpool("status", "-v", pool, check=True).stdout
    done, errors = resilvered(text)
    assert errors > 0 and "Permanent errors have been detected in the following files:" in text, text
    assert done >= 4 << 20, text
    with open(d1, "rb") as f:
        copied = [o for o, junk in rotten.items() if (f.seek(o), f.read(len(junk)))[1] == junk]
    assert not copied, f"rotten sectors copied to the new side at {copied}"
    assert oxzfs.daemon_alive()
    assert oxzfs.export(pool).returncode == 0


def test_replace_resilvers_the_new_device_and_survives_export(oxzfs):
    pool = "rsrepl"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 15)
    d2 = os.path.join(vdir, "d2")
    blank(d2, 64)
    import_rw(oxzfs, vdir, pool, alt)
    oxzfs.run("tunable", "zfs_scan_suspend_progress=1", check=True)
    try:
        r = oxzfs.zpool("replace", pool, "d0", d2)
        assert r.returncode == 0, repr(r)
        text = status(oxzfs, pool)
        assert "scan: resilver in progress since " in text, text
        assert ("status: One or more devices is currently being resilvered.  The pool will\n"
                "\tcontinue to function, possibly in a degraded state.\naction: Wait for the resilver to complete.\n") in text, text
        assert state_of(text, "replacing-0") == "ONLINE" and state_of(text, "d2") == "ONLINE", text
        r = oxzfs.zpool("replace", pool, "d0", d2)
        assert r.returncode == 1 and "is part of active pool" in r.stderr, repr(r)
        for flags, what in (([], "scrub"), (["-s"], "cancel scrubbing"), (["-p"], "pause scrubbing")):
            r = oxzfs.zpool("scrub", *flags, pool)
            assert (r.returncode, r.stderr) == (1, f"cannot {what} {pool}: currently resilvering\n"), repr(r)
        # Export in the middle: the import takes the resilver up again.
        assert oxzfs.export(pool).returncode == 0
        zdb_check(vdir, pool)
        import_rw(oxzfs, vdir, pool, alt)
        text = status(oxzfs, pool)
        assert "scan: resilver in progress since " in text and state_of(text, "replacing-0") == "ONLINE", text
    finally:
        oxzfs.run("tunable", "zfs_scan_suspend_progress=0", check=True)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    allocated = int(oxzfs.zpool("list", "-Hp", "-o", "allocated", pool, check=True).stdout)
    # Every block once to the new side (not to the old side beside it too).
    assert allocated * 0.8 <= done <= allocated * 1.2, f"resilvered {done} bytes of a pool with {allocated} allocated:\n{text}"
    rows = status_rows(text)
    assert errors == 0 and "replacing-0" not in rows and not any(k.endswith("/d0") for k in rows), text
    assert state_of(text, "d2") == "ONLINE" and state_of(text, "mirror-0") == "ONLINE", text
    assert oxzfs.export(pool).returncode == 0
    # The replaced d0 is out of the pool: wiped, and with d1 away, d2 alone holds everything.
    blank(os.path.join(vdir, "d0"), 64)
    only = alone(oxzfs, vdir, "d2", "rsrepl")
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def test_a_wiped_side_replaced_in_place_is_resilvered_whole(oxzfs):
    """A mirror side wiped while the pool was away (labels and all, as a new disk in the old
    one's place) is UNAVAIL at import; `zpool replace POOL DEV` with no new device resilvers it
    where it is, whole: every file on it alone afterwards, a scrub then repairs nothing, and
    zdb is clean."""
    pool = "rswipe"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 26)
    d1 = os.path.join(vdir, "d1")
    blank(d1, 64)
    import_rw(oxzfs, vdir, pool, alt)
    text = status(oxzfs, pool)
    # (shown by its guid, as OpenZFS shows a leaf it could not open)
    assert " state: DEGRADED" in text and re.search(r"\t    \d+ +UNAVAIL .*  was \S+/d1\n", text), text
    r = oxzfs.zpool("replace", "-w", pool, d1)
    assert r.returncode == 0, repr(r)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    allocated = int(oxzfs.zpool("list", "-Hp", "-o", "allocated", pool, check=True).stdout)
    assert errors == 0 and allocated * 0.8 <= done <= allocated * 1.2, f"resilvered {done} of {allocated}:\n{text}"
    assert state_of(text, "d1") == "ONLINE" and " state: ONLINE" in text and "replacing" not in text, text
    assert scrub_done(oxzfs, pool) == ("0B", 0)
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d1", pool)
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def test_replace_in_raidz_with_a_side_offline(oxzfs):
    """A raidz1 child replaced while another is offline: the new child's columns are rebuilt
    from the others through the replacing vdev; then the offline one comes back."""
    pool = "rsraidz"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["raidz1"] + d, 3, 16)
    d3 = os.path.join(vdir, "d3")
    blank(d3, 64)
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("attach", pool, "d1", d3)
    assert r.returncode == 1 and r.stderr == f"cannot attach {d3} to d1: can only attach to mirrors and top-level disks\n", repr(r)
    assert oxzfs.zpool("offline", pool, "d2").returncode == 0
    write_more(alt, pool, "while-offline.bin", 4, 1)
    r = oxzfs.zpool("replace", "-w", pool, "d1", d3)
    assert r.returncode == 0, repr(r)
    text = status(oxzfs, pool)
    assert resilvered(text)[1] == 0 and "replacing-1" not in status_rows(text), text
    assert state_of(text, "d3") == "ONLINE" and state_of(text, "d2") == "OFFLINE", text
    assert oxzfs.zpool("online", pool, "d2").returncode == 0
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    want = manifest_mod.manifest(os.path.join(alt, pool))
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    # d0 away: d3's columns and d2's resilvered ones are what rebuilds the data.
    blank(os.path.join(vdir, "d1"), 64)
    os.rename(os.path.join(vdir, "d0"), os.path.join(vdir, "d0.away"))
    try:
        check_reads(oxzfs, vdir, pool, alt, want)
    finally:
        os.rename(os.path.join(vdir, "d0.away"), os.path.join(vdir, "d0"))


@pytest.mark.parametrize("cls", ["special", "dedup"])
def test_special_vdev_grows_into_a_mirror_and_back(oxzfs, cls):
    """A special (or dedup) vdev becomes a mirror by attach, resilvered, and back by detach;
    the class's blocks then live on the new side alone."""
    pool = "rs" + cls
    opts = ("-O", "dedup=on") if cls == "dedup" else ()
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: [d[0], cls, d[1]], 2, 17, *opts)
    d2 = os.path.join(vdir, "d2")
    blank(d2, 64)
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("attach", "-w", pool, "d1", d2)
    assert r.returncode == 0, repr(r)
    text = status(oxzfs, pool)
    assert resilvered(text)[1] == 0 and f"\t{cls}\t\n\t  mirror-1 " in text, text
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    import_rw(oxzfs, vdir, pool, alt)
    assert oxzfs.zpool("detach", pool, "d1").returncode == 0
    text = status(oxzfs, pool)
    assert "mirror-1" not in status_rows(text) and state_of(text, "d2") == "ONLINE", text
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    # The class's blocks live on d2 now: d1 wiped, everything reads.
    blank(os.path.join(vdir, "d1"), 64)
    check_reads(oxzfs, vdir, pool, alt, want)


@pytest.mark.nightly
def test_version_23_offline_attach_detach_read_by_zfs_fuse(oxzfs, work_dir):
    pool = "rsv23"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 18, "-o", "version=23")
    d2 = os.path.join(vdir, "d2")
    blank(d2, 64)
    import_rw(oxzfs, vdir, pool, alt)
    assert oxzfs.zpool("offline", pool, "d1").returncode == 0
    write_more(alt, pool, "while-offline.bin", 5, 1)
    want = manifest_mod.manifest(os.path.join(alt, pool))
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    # zfs-fuse imports the pool with an offline side and a DTL, and reads it all.
    with zfs_fuse_imported(work_dir, vdir, os.path.join(oxzfs.base, pool, "zfs-fuse-alt"), pool) as zroot:
        d = diff_manifests(_strip_xattrs(manifest_mod.manifest(zroot)), _strip_xattrs(want))
        assert not d, f"zfs-fuse reads the pool with an offline side differently:\n{d}"
    import_rw(oxzfs, vdir, pool, alt)
    assert oxzfs.zpool("online", pool, "d1").returncode == 0
    assert oxzfs.zpool("attach", "-w", pool, "d1", d2).returncode == 0
    assert oxzfs.zpool("detach", pool, "d0").returncode == 0
    text = status(oxzfs, pool)
    assert state_of(text, "d1") == "ONLINE" and state_of(text, "d2") == "ONLINE" and "d0" not in text, text
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    blank(os.path.join(vdir, "d0"), 64)
    with zfs_fuse_imported(work_dir, vdir, os.path.join(oxzfs.base, pool, "zfs-fuse-alt"), pool) as zroot:
        d = diff_manifests(_strip_xattrs(manifest_mod.manifest(zroot)), _strip_xattrs(want))
        assert not d, f"zfs-fuse reads the pool after attach and detach differently:\n{d}"


def test_hot_spare_takes_a_place_and_stays_or_goes_back(oxzfs):
    pool = "rsspare"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 19)
    s0, s1 = os.path.join(vdir, "s0"), os.path.join(vdir, "s1")
    blank(s0, 64)
    blank(s1, 64)
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("add", pool, "spare", s0, s1)
    assert r.returncode == 0, repr(r)
    assert re.search(r"\tspares\n\t  \S+/s0 +AVAIL +\n\t  \S+/s1 +AVAIL", status(oxzfs, pool)), status(oxzfs, pool)
    # s1 stands in for d1 and is detached again: back to AVAIL.
    assert oxzfs.zpool("replace", "-w", pool, "d1", s1).returncode == 0
    text = status(oxzfs, pool)
    assert state_of(text, "spare-1") == "ONLINE" and re.search(r"\t  \S+/s1 +INUSE     currently in use\n", text), text
    # A spare in use cannot be removed (spa_vdev_remove_aux: EBUSY).
    r = oxzfs.zpool("remove", pool, s1)
    assert (r.returncode, r.stderr) == (1, f"cannot remove {s1}: pool or dataset is busy\n"), repr(r)
    assert oxzfs.zpool("detach", pool, "s1").returncode == 0
    assert re.search(r"\t  \S+/s1 +AVAIL", status(oxzfs, pool)), status(oxzfs, pool)
    # s0 stands in for d0, and d0 is detached: s0 is a member for good, no longer a spare.
    assert oxzfs.zpool("replace", "-w", pool, "d0", s0).returncode == 0
    assert resilvered(status(oxzfs, pool))[1] == 0
    assert oxzfs.zpool("detach", pool, "d0").returncode == 0
    text = status(oxzfs, pool)
    rows = status_rows(text)
    assert "spare-0" not in rows and state_of(text, "s0") == "ONLINE" and state_of(text, "mirror-0") == "ONLINE", text
    assert re.search(r"\tspares\n\t  \S+/s1 +AVAIL +\n\n", text), text
    # An available spare goes at once, and stays gone after export/import.
    r = oxzfs.zpool("remove", pool, s1)
    assert r.returncode == 0 and r.stderr == "", repr(r)
    assert "spares" not in status(oxzfs, pool), status(oxzfs, pool)
    assert oxzfs.export(pool).returncode == 0
    import_rw(oxzfs, vdir, pool, alt)
    assert "spares" not in status(oxzfs, pool) and s1 not in status(oxzfs, pool), status(oxzfs, pool)
    assert oxzfs.export(pool).returncode == 0
    blank(os.path.join(vdir, "d0"), 64)
    only = alone(oxzfs, vdir, "s0", "rsspare")
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def attached_held_killed_reimported(oxzfs, pool, seed, flags, held):
    """A one-disk pool POOL (fill SEED) gets d1 attached (`zpool attach FLAGS`) with
    zfs_scan_suspend_progress=1, status showing HELD; the daemon is killed (-9), the pool
    imported again by a new one and the resilver waited for: (vdev dir, altroot, manifest)."""
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: d[:1], 2, seed)
    import_rw(oxzfs, vdir, pool, alt)
    oxzfs.run("tunable", "zfs_scan_suspend_progress=1", check=True)
    assert oxzfs.zpool("attach", *flags, pool, "d0", os.path.join(vdir, "d1")).returncode == 0
    assert held in status(oxzfs, pool)
    oxzfs.kill9()
    unmount_below(alt)  # the killed daemon's mount is dead
    r = oxzfs.zpool("import", "-f", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    assert oxzfs.zpool("wait", "-t", "resilver", pool).returncode == 0
    return vdir, alt, want


@pytest.mark.nightly
def test_attach_resilver_goes_on_after_kill9(oxzfs):
    """The daemon killed while a new mirror side is being resilvered: the MOS says a resilver
    is under way and the new side's DTL says what it lacks, so the next import (by a new
    daemon, which starts with the scan going again) resilvers it to the end; the new side
    alone then holds every file."""
    pool = "rskill"
    vdir, alt, want = attached_held_killed_reimported(oxzfs, pool, 20, [], "scan: resilver in progress since ")
    text = status(oxzfs, pool)
    assert resilvered(text)[1] == 0 and state_of(text, "d1") == "ONLINE", text
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d1", "rskill")
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


@pytest.mark.nightly
def test_a_missing_side_back_and_onlined_is_resilvered(oxzfs):
    """A mirror side missing at import misses every txg synced meanwhile (its DTL); put back
    and onlined, it is found again and resilvered; a side still missing stays so, with
    OpenZFS's warning."""
    pool = "rsback"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 21)
    d1, away = os.path.join(vdir, "d1"), os.path.join(vdir, "..", "d1.away")
    os.rename(d1, away)  # out of the directory the import scans
    import_rw(oxzfs, vdir, pool, alt)
    assert state_of(status(oxzfs, pool), "mirror-0") == "DEGRADED"
    write_more(alt, pool, "while-missing.bin", 6, 2)
    want = manifest_mod.manifest(os.path.join(alt, pool))
    r = oxzfs.zpool("online", pool, "d1")
    assert r.returncode == 0 and r.stdout == ("warning: device 'd1' onlined, but remains in faulted state\n"
                                              "use 'zpool replace' to replace devices that are no longer present\n"), repr(r)
    os.rename(away, d1)
    r = oxzfs.zpool("online", pool, "d1")
    assert r.returncode == 0 and r.stdout == "", repr(r)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    assert errors == 0 and state_of(text, "d1") == "ONLINE" and done >= 2 << 20, text
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d1", "rsback")
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def test_offline_f_faults_a_device_until_clear_or_online(oxzfs):
    """`zpool offline -f`: the side is FAULTED ("external device fault") and takes no I/O, for
    good (the config's aux_state, as OpenZFS keeps it) across export and import, until `zpool
    clear` resilvers what it missed; with -t the fault ends at the next import."""
    pool = "rsfault"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 23)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    import_rw(oxzfs, vdir, pool, alt)
    faulted_row = re.compile(r"^\t    \S*d0 +FAULTED +0 +0 +0  external device fault$", re.M)

    r = oxzfs.zpool("offline", "-f", pool, "d0")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), repr(r)
    text = status(oxzfs, pool)
    assert faulted_row.search(text) and state_of(text, "mirror-0") == "DEGRADED" and " state: DEGRADED" in text, text
    assert ("status: One or more devices are faulted in response to persistent errors.\n"
            "\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\n"
            "action: Replace the faulted device, or use 'zpool clear' to mark the device\n\trepaired.\n") in text, text
    before = file_hash(d0)
    write_more(alt, pool, "while-faulted.bin", 2, 2)
    oxzfs.zpool("sync", pool, check=True)
    assert file_hash(d0) == before, "a faulted device was written"
    # Persistent: faulted again after export and import.
    assert oxzfs.export(pool).returncode == 0
    import_rw(oxzfs, vdir, pool, alt)
    assert faulted_row.search(status(oxzfs, pool)), status(oxzfs, pool)
    assert file_hash(d0) == before, "an import wrote to a faulted device"
    r = oxzfs.zpool("clear", pool, "d0")
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    assert errors == 0 and state_of(text, "d0") == "ONLINE" and " state: ONLINE" in text, text
    assert 2 << 20 <= done < 7 << 20, f"resilvered {done} bytes for 2 MiB missed:\n{text}"

    # -t: faulted until the next import, which resilvers what it missed; online lifts it too.
    r = oxzfs.zpool("offline", "-f", "-t", pool, "d1")
    assert r.returncode == 0, repr(r)
    assert state_of(status(oxzfs, pool), "d1") == "FAULTED"
    text, want = written_then_reimported(oxzfs, vdir, pool, alt, "while-tmp-faulted.bin", 3, 1)
    assert state_of(text, "d1") == "ONLINE" and resilvered(text)[1] == 0, text
    assert oxzfs.zpool("offline", "-f", pool, "d1").returncode == 0
    assert oxzfs.zpool("online", pool, "d1").returncode == 0
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    assert state_of(status(oxzfs, pool), "d1") == "ONLINE"
    assert oxzfs.export(pool).returncode == 0
    # Each side alone holds the whole pool; the one faulted for good reads every file back.
    only0, only1 = alone(oxzfs, vdir, "d0", "rsfault0"), alone(oxzfs, vdir, "d1", "rsfault1")
    zdb_checks((only0, pool), (only1, pool))
    check_reads(oxzfs, only0, pool, alt, want)


def test_writes_failed_on_a_side_are_resilvered_at_clear(oxzfs):
    """Writes failing on one mirror side (zinject -e io -T write) put the txgs they belonged
    to into that side's DTL, as OpenZFS's vdev_stat_update does; `zpool clear` then resilvers
    just those, and the side alone holds every file again."""
    pool = "rswfail"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 23)
    d0 = os.path.join(vdir, "d0")
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.run("zinject", "-q", "-d", d0, "-e", "io", "-T", "write", pool)
    assert r.returncode == 0, repr(r)
    write_more(alt, pool, "while-failing.bin", 7, 3)
    oxzfs.zpool("sync", pool, check=True)
    assert oxzfs.run("zinject", "-c", "all").returncode == 0
    rows = status_rows(status(oxzfs, pool))
    assert int(rows[d0][2]) > 0, rows
    want = manifest_mod.manifest(os.path.join(alt, pool))
    r = oxzfs.zpool("clear", pool)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), repr(r)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    assert errors == 0 and done >= 3 << 20, text
    rows = status_rows(text)
    assert all(tuple(v[:4]) == ("ONLINE", "0", "0", "0") for k, v in rows.items() if k in (d0, os.path.join(vdir, "d1"))), rows
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d0", pool)
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def marked_while_slowed(oxzfs, pool, dev, marker):
    """While every I/O to DEV takes 5 ms (zinject -D) and the scan works in short turns, a
    status showing MARKER beside DEV with the resilver in progress, else None; the delay is
    lifted before returning."""
    assert oxzfs.run("zinject", "-d", dev, "-D", "5:1", pool).returncode == 0
    oxzfs.run("tunable", "zfs_scrub_min_time_ms=100", check=True)
    try:
        oxzfs.run("tunable", "zfs_scan_suspend_progress=0", check=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            text = status(oxzfs, pool)
            if "scan: resilver in progress since " not in text:
                return None
            if re.search(rf"^\t    \S*/{os.path.basename(dev)} +ONLINE +\d+ +\d+ +\d+  {re.escape(marker)}$", text, re.M):
                return text
            time.sleep(0.05)
        return None
    finally:
        assert oxzfs.run("zinject", "-c", "all").returncode == 0
        oxzfs.run("tunable", "zfs_scrub_min_time_ms=1000", check=True)


def test_mirror_grows_then_sides_are_replaced_while_written(oxzfs, work_dir):
    """A version-23 two-way mirror grows to three sides by `zpool attach`, then one side is
    replaced by a new device and another by a hot spare. Files are written while each healing
    resilver is held (zfs_scan_suspend_progress) and after it resumes; "(resilvering)" stands
    beside the new leaf while it is written. A device in use is refused as OpenZFS refuses it,
    nothing changed. Afterwards each side alone holds every file, zdb -bcc is clean, and
    zfs-fuse imports the pool and reads every byte."""
    pool = "rsgrow"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 27, "-o", "version=23")
    d0, d1, d2, d3, s0 = (os.path.join(vdir, n) for n in ("d0", "d1", "d2", "d3", "s0"))
    for d in (d2, d3, s0):
        blank(d, 64)
    import_rw(oxzfs, vdir, pool, alt)

    # A device of the pool itself as the new one: make_root_vdev's refusal, -f or not.
    before, hist = status(oxzfs, pool), oxzfs.zpool("history", pool, check=True).stdout
    for flags, heading in (([], "use '-f' to override the following errors:"), (["-f"], "the following errors must be manually repaired:")):
        r = oxzfs.zpool("replace", *flags, pool, "d0", d1)
        assert (r.returncode, r.stdout, r.stderr) == (
            1, "", f"invalid vdev specification\n{heading}\n{d1} is part of active pool '{pool}'\n"), repr(r)
    # (zpool add checks it before the replication level, which differs too.)
    r = oxzfs.zpool("add", pool, d1)
    assert (r.returncode, r.stderr) == (
        1, f"invalid vdev specification\nuse '-f' to override the following errors:\n{d1} is part of active pool '{pool}'\n"), repr(r)
    assert (status(oxzfs, pool), oxzfs.zpool("history", pool, check=True).stdout) == (before, hist), "a refused replace changed the pool"

    # d2 attached: three sides; written while held, and while resilvering once resumed.
    oxzfs.run("tunable", "zfs_scan_suspend_progress=1", check=True)
    try:
        assert oxzfs.zpool("attach", pool, "d1", d2).returncode == 0
        text = status(oxzfs, pool)
        assert "scan: resilver in progress since " in text and [k for k in status_rows(text) if k.startswith(vdir)] == [d0, d1, d2], text
        write_more(alt, pool, "held-attach.bin", 31, 1)
        oxzfs.zpool("sync", pool, check=True)
        seen = marked_while_slowed(oxzfs, pool, d2, "(resilvering)")
        assert seen and seen.count("(resilvering)") == 1, f"no (resilvering) beside {d2} alone:\n{seen}"
        write_more(alt, pool, "after-attach.bin", 32, 1)
    finally:
        oxzfs.run("tunable", "zfs_scan_suspend_progress=0", check=True)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    assert resilvered(text)[1] == 0 and all(state_of(text, d) == "ONLINE" for d in ("d0", "d1", "d2")), text
    assert "(resilvering)" not in text, text

    # d0 replaced by d3, held likewise.
    oxzfs.run("tunable", "zfs_scan_suspend_progress=1", check=True)
    try:
        assert oxzfs.zpool("replace", pool, "d0", d3).returncode == 0
        assert state_of(status(oxzfs, pool), "replacing-0") == "ONLINE"
        write_more(alt, pool, "held-replace.bin", 33, 1)
        oxzfs.zpool("sync", pool, check=True)
    finally:
        oxzfs.run("tunable", "zfs_scan_suspend_progress=0", check=True)
    write_more(alt, pool, "after-replace.bin", 34, 1)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    rows = status_rows(text)
    assert resilvered(text)[1] == 0 and "replacing-0" not in rows and d0 not in rows and state_of(text, "d3") == "ONLINE", text

    # The hot spare s0 takes d1's place.
    assert oxzfs.zpool("add", pool, "spare", s0).returncode == 0
    assert oxzfs.zpool("replace", "-w", pool, "d1", s0).returncode == 0
    text = status(oxzfs, pool)
    assert resilvered(text)[1] == 0 and state_of(text, "spare-1") == "ONLINE", text
    assert re.search(r"\tspares\n\t  \S+/s0 +INUSE     currently in use\n", text), text
    want = manifest_mod.manifest(os.path.join(alt, pool))
    assert {"held-attach.bin", "after-attach.bin", "held-replace.bin", "after-replace.bin"} <= {e["path"].lstrip("/") for e in want}
    assert oxzfs.export(pool).returncode == 0

    sides = {n: alone(oxzfs, vdir, n, f"{pool}-{n}") for n in ("d2", "d3", "s0")}
    zdb_checks((vdir, pool), *((d, pool) for d in sides.values()))
    for d in sides.values():
        check_reads(oxzfs, d, pool, alt, want)
    with zfs_fuse_imported(work_dir, vdir, os.path.join(oxzfs.base, pool, "zfs-fuse-alt"), pool) as zroot:
        d = diff_manifests(_strip_xattrs(manifest_mod.manifest(zroot)), _strip_xattrs(want))
        assert not d, f"zfs-fuse reads the pool after attach, replace and a spare differently:\n{d}"


def test_a_destroyed_pools_device_attached_keeps_none_of_its_uberblocks(oxzfs):
    """`zpool attach` of a device that held a destroyed pool synced far past this pool's txgs:
    the new side's four labels are initialised whole (OpenZFS's vdev_label_init), so none of
    the old pool's uberblocks is left in its rings for an import to take for the newest. The
    pool, and the new side alone, import at this pool's own txgs; zdb is clean."""
    base = os.path.join(oxzfs.base, "rsold")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    os.makedirs(vdir, exist_ok=True)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    blank(d0, 64)
    blank(d1, 64)
    assert oxzfs.zpool("create", "-R", alt, "rsgone", d1).returncode == 0
    for i in range(40):
        with open(os.path.join(alt, "rsgone", f"f{i}"), "wb") as f:
            f.write(b"%d" % i)
        assert oxzfs.zpool("sync", "rsgone").returncode == 0
    assert oxzfs.zpool("destroy", "rsgone").returncode == 0
    pool = "rsnewer"
    assert oxzfs.zpool("create", "-R", alt, pool, d0).returncode == 0
    oxzfs.imported.append(pool)
    write_more(alt, pool, "mine.bin", 31, 2)
    r = oxzfs.zpool("attach", "-w", pool, d0, d1)
    assert r.returncode == 0, repr(r)
    want = manifest_mod.manifest(os.path.join(alt, pool))
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d1", "rsnewer")
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)
    check_reads(oxzfs, vdir, pool, alt, want)
