"""Sequential reconstruction (`zpool attach -s`, `zpool replace -s`), judged by the oracles.

The new mirror side gets every allocated range of the top-level vdev copied from the whole
side, without the block tree and without checksums; then a scrub verifies them. The new side
alone must hold every file, OpenZFS's `zdb -bcc` must be clean, and the record OpenZFS keeps in
the top-level vdev's ZAP (com.delphix:vdev_rebuild, 12 uint64s) and the device_rebuild feature's
count must be what OpenZFS leaves: complete, and 0 (enabled, not active) once it is done."""
import os
import re
import subprocess
import time

import pytest

from conftest import status_rows
from test_resilver import attached_held_killed_reimported, blank, state_of, status, zdb_checks
from test_scrub import alone, check_reads, import_rw, new_pool
from test_write import ZDB

REBUILT = re.compile(r"  scan: resilvered \((mirror-\d+)\) (\S+) in (\d+:\d\d:\d\d) with (\d+) errors on ")


MOS_OBJECT = re.compile(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\d+\s+\S+\s+\S+\s+\S", re.M)


def mos_objects(vdir, pool, upto=400):
    """MOS objects 1..UPTO as OpenZFS's zdb -dddd prints them, by id (one run of zdb; ids
    with no object end its output, hence no check of its exit status)."""
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddd", pool, *map(str, range(1, upto))], capture_output=True, text=True, errors="replace", timeout=300)
    heads = list(MOS_OBJECT.finditer(r.stdout))
    return {int(m.group(1)): r.stdout[m.start():(heads[k + 1].start() if k + 1 < len(heads) else len(r.stdout))] for k, m in enumerate(heads)}


def rebuild_record(vdir, pool):
    """(the top-level vdev ZAP's com.delphix:vdev_rebuild words, device_rebuild's count in
    features_for_write) as OpenZFS's zdb reads them from the exported pool."""
    objs = mos_objects(vdir, pool)
    assert 1 in objs, f"zdb printed no object directory for {pool}"
    rec = [m for o in objs.values() for m in re.findall(r"com\.delphix:vdev_rebuild = ([\d ]+)", o)]
    assert len(rec) == 1, f"com.delphix:vdev_rebuild entries in the MOS: {rec}"
    fw = int(re.search(r"features_for_write = (\d+)", objs[1]).group(1))
    m = re.search(r"org\.openzfs:device_rebuild = (\d+)", objs.get(fw, ""))
    assert m, f"device_rebuild not in features_for_write (object {fw}):\n{objs.get(fw)}"
    return [int(w) for w in rec[0].split()], int(m.group(1))


def rebuilt(text):
    m = REBUILT.search(text)
    assert m, f"no finished sequential resilver in status:\n{text}"
    return m.group(1), int(m.group(4))


def test_attach_s_rebuilds_a_new_side_then_scrubs(oxzfs):
    pool = "rbattach"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: d[:1], 2, 31)
    d1 = os.path.join(vdir, "d1")
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("attach", "-s", "-w", pool, "d0", d1)
    assert r.returncode == 0, repr(r)
    text = status(oxzfs, pool)
    name, errors = rebuilt(text)
    assert name == "mirror-0" and errors == 0 and state_of(text, "d1") == "ONLINE", text
    # The scrub that verifies what was copied started with the rebuild's end.
    assert re.search(r"  scan: scrub (in progress since|repaired \S+ in \S+ with 0 errors on) ", text), text
    oxzfs.zpool("wait", "-t", "scrub", pool, check=True)
    text = status(oxzfs, pool)
    assert re.search(r"  scan: scrub repaired 0B in \S+ with 0 errors on ", text), text
    assert rebuilt(text) == ("mirror-0", 0), text
    assert oxzfs.export(pool).returncode == 0
    words, count = rebuild_record(vdir, pool)
    assert len(words) == 12 and words[0] == 3 and count == 0, (words, count)
    # bytes_scanned == bytes_est covered, bytes_rebuilt > 0, no errors.
    assert words[7] > 0 and words[9] > 0 and words[11] == 0, words
    # A healing resilver later clears the record (vdev_rebuild_clear_sync): status shows it alone.
    import_rw(oxzfs, vdir, pool, alt)
    assert oxzfs.zpool("offline", pool, "d1").returncode == 0
    assert oxzfs.zpool("online", pool, "d1").returncode == 0
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    assert re.search(r"  scan: resilvered \S+ in \S+ with 0 errors on ", text) and "(mirror-0)" not in text, text
    assert oxzfs.export(pool).returncode == 0
    assert rebuild_record(vdir, pool) == ([0] * 12, 0)
    only = alone(oxzfs, vdir, "d1", pool)
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def test_status_marks_the_side_a_rebuild_writes(oxzfs):
    """While `zpool attach -s` writes the new side (each write held 200 ms by zinject -D, one
    1 MiB step at a time), `zpool status` marks that side "(resilvering)" and only it, as
    OpenZFS's zpool marks a leaf with rebuild bytes processed under an active rebuild; once
    the rebuild is done the mark is gone and the new side alone reads back every file."""
    pool = "rbmark"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: d[:1], 2, 34)
    d1 = os.path.join(vdir, "d1")
    import_rw(oxzfs, vdir, pool, alt)
    seen = []
    oxzfs.run("tunable", "zfs_scan_suspend_progress=1", check=True)
    try:
        oxzfs.run("tunable", "zfs_rebuild_vdev_limit=1048576", check=True)
        assert oxzfs.zpool("attach", "-s", pool, "d0", d1).returncode == 0
        r = oxzfs.run("zinject", "-d", d1, "-D", "200:1", pool)
        assert r.returncode == 0 and r.stdout.startswith("Added handler "), repr(r)
        oxzfs.run("tunable", "zfs_scan_suspend_progress=0", check=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            text = status(oxzfs, pool)
            if "  scan: resilver (mirror-0) in progress since " not in text:
                break
            marked = [ln.split()[0] for ln in text.splitlines() if ln.rstrip().endswith("(resilvering)")]
            if marked:
                seen.append((marked, text))
                break
            time.sleep(0.05)
    finally:
        oxzfs.run("tunable", "zfs_scan_suspend_progress=0")
        oxzfs.run("tunable", "zfs_rebuild_vdev_limit=33554432")
        oxzfs.run("zinject", "-c", "all")
    assert seen, f"no (resilvering) mark while the rebuild ran:\n{text}"
    marked, text = seen[0]
    assert [m.rsplit("/", 1)[-1] for m in marked] == ["d1"], text
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    oxzfs.zpool("wait", "-t", "scrub", pool, check=True)
    text = status(oxzfs, pool)
    assert rebuilt(text) == ("mirror-0", 0) and "(resilvering)" not in text, text
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d1", pool)
    check_reads(oxzfs, only, pool, alt, want)


def test_replace_s_of_a_wiped_side_and_export_in_the_middle(oxzfs):
    """A mirror side wiped is replaced with -s; the rebuild, held by zfs_scan_suspend_progress,
    is active on disk across an export and import (zdb reads the record: active, the feature
    counted once) and goes on after it; the replaced device leaves the mirror."""
    pool = "rbreplace"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 32)
    d0, d2 = os.path.join(vdir, "d0"), os.path.join(vdir, "d2")
    blank(d2, 64)
    blank(d0, 64)  # lost: found by nobody at import
    import_rw(oxzfs, vdir, pool, alt)
    assert state_of(status(oxzfs, pool), "mirror-0") == "DEGRADED"
    oxzfs.run("tunable", "zfs_scan_suspend_progress=1", check=True)
    try:
        guid = [k for k in status_rows(status(oxzfs, pool)) if k.isdigit()]
        assert guid, status(oxzfs, pool)
        r = oxzfs.zpool("replace", "-s", pool, guid[0], d2)
        assert r.returncode == 0, repr(r)
        text = status(oxzfs, pool)
        assert "  scan: resilver (mirror-0) in progress since " in text, text
        assert re.search(r"\t\S+ scanned at \S+/s, \S+ issued \S+/s, \S+ total\n\t\S+ resilvered, \d+\.\d\d% done, ", text), text
        assert ("status: One or more devices is currently being resilvered.  The pool will\n"
                "\tcontinue to function, possibly in a degraded state.\naction: Wait for the resilver to complete.\n") in text, text
        # A healing attach meanwhile is refused as OpenZFS refuses it.
        d3 = os.path.join(vdir, "d3")
        blank(d3, 64)
        r = oxzfs.zpool("attach", pool, "d1", d3)
        assert (r.returncode, r.stderr) == (1, f"cannot attach {d3} to d1: currently sequentially resilvering\n"), repr(r)
        # Nor is a scrub started (dsl_scan_setup_check: EBUSY).
        r = oxzfs.zpool("scrub", pool)
        assert (r.returncode, r.stderr) == (1, f"cannot scrub {pool}: currently resilvering\n"), repr(r)
        assert oxzfs.export(pool).returncode == 0
        words, count = rebuild_record(vdir, pool)
        assert words[0] == 1 and count == 1, (words, count)
        import_rw(oxzfs, vdir, pool, alt)
        assert "  scan: resilver (mirror-0) in progress since " in status(oxzfs, pool)
    finally:
        oxzfs.run("tunable", "zfs_scan_suspend_progress=0", check=True)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    oxzfs.zpool("wait", "-t", "scrub", pool, check=True)
    text = status(oxzfs, pool)
    assert rebuilt(text) == ("mirror-0", 0), text
    rows = status_rows(text)
    assert "replacing-0" not in rows and state_of(text, "d2") == "ONLINE" and state_of(text, "mirror-0") == "ONLINE", text
    assert oxzfs.export(pool).returncode == 0
    words, count = rebuild_record(vdir, pool)
    assert words[0] == 3 and count == 0, (words, count)
    only = alone(oxzfs, vdir, "d2", pool)
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)


def test_s_on_raidz_gets_openzfs_errors(oxzfs):
    pool = "rbraidz"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: ["raidz1"] + d, 3, 33)
    d3 = os.path.join(vdir, "d3")
    blank(d3, 64)
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("replace", "-s", pool, "d1", d3)
    assert (r.returncode, r.stderr) == (1, f"cannot replace d1 with {d3}: only mirror and dRAID vdevs support sequential reconstruction\n"), repr(r)
    r = oxzfs.zpool("attach", "-s", pool, "d1", d3)
    assert (r.returncode, r.stderr) == (1, f"cannot attach {d3} to d1: can only attach to mirrors and top-level disks\n"), repr(r)
    with open(d3, "rb") as f:
        assert not f.read().strip(b"\0"), "a refused replace wrote to the device"
    assert oxzfs.export(pool).returncode == 0


def test_s_without_the_feature_gets_openzfs_errors(oxzfs):
    """A pool from before feature flags has no device_rebuild: spa_vdev_attach's ENOTSUP, in
    libzfs's words for attach and for replace; a plain attach still works."""
    pool = "rbv28"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: d[:1], 2, 34, "-o", "version=28")
    d1 = os.path.join(vdir, "d1")
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("attach", "-s", pool, "d0", d1)
    assert (r.returncode, r.stderr) == (1, f"cannot attach {d1} to d0: can only attach to mirrors and top-level disks\n"), repr(r)
    r = oxzfs.zpool("replace", "-s", pool, "d0", d1)
    assert (r.returncode, r.stderr) == (1, f"cannot replace d0 with {d1}: only mirror and dRAID vdevs support sequential reconstruction\n"), repr(r)
    assert oxzfs.zpool("get", "-H", "-o", "value", "feature@device_rebuild", pool, check=True).stdout.strip() in ("-", "disabled", "")
    assert oxzfs.export(pool).returncode == 0


@pytest.mark.nightly
def test_attach_s_goes_on_after_kill9(oxzfs):
    """The daemon killed while a rebuild is held: the record in the top-level vdev ZAP says it
    is active, so the next import (a new daemon) takes it up and completes it. The new side
    alone then holds every file."""
    pool = "rbkill"
    vdir, alt, want = attached_held_killed_reimported(oxzfs, pool, 35, ["-s"], "  scan: resilver (mirror-0) in progress since ")
    text = status(oxzfs, pool)
    assert rebuilt(text) == ("mirror-0", 0) and state_of(text, "d1") == "ONLINE", text
    oxzfs.zpool("wait", "-t", "scrub", pool, check=True)
    assert oxzfs.export(pool).returncode == 0
    assert rebuild_record(vdir, pool)[0][0] == 3
    only = alone(oxzfs, vdir, "d1", pool)
    zdb_checks((vdir, pool), (only, pool))
    check_reads(oxzfs, only, pool, alt, want)
