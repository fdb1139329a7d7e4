"""A scrub or resilver cut short goes on from where it stopped, not from the beginning.

The scan is slowed by `zinject -D` (every I/O of a device takes some milliseconds, as OpenZFS's
tests slow theirs), held still part-way with zfs_scan_suspend_progress, then the pool is exported
(or its daemon killed). OpenZFS's zdb reads the `scan` entry the way OpenZFS would resume it: still
scanning, a non-zero bookmark, the bytes examined so far. After the import `zpool status` shows
those figures again (scanned and issued carry over), and the rest of the scan reads only the rest
of the pool: the device's scrub reads (`zpool iostat -r`, counted since the import) are well below
those of a whole scrub. The pool ends as it should: zdb -bcc clean, a resilvered side complete on
its own with every file the same."""
import os
import re
import subprocess
import time

import manifest as manifest_mod
from conftest import Oxzfs, diff_manifests, fresh_daemon
from test_resilver import resilvered, status
from test_scrub import DONE, alone, fill, import_rw, new_pool, scan_line, tunable
from test_write import ZDB, make_devs, zdb_check
from test_zil import logged_workload, tree, zdb_blocks
from conftest import unmount_below

PROGRESS = re.compile(r"\t(\S+) scanned(?: at \S+/s)?, (\S+) issued(?: at \S+/s)?, (\S+) total\n"
                      r"\t\S+ (?:repaired|resilvered), (\d+\.\d\d)% done")


def progress(oxzfs, pool):
    """(scanned, issued, total, percent done) of the scan under way, as status prints them."""
    line = scan_line(oxzfs, pool)
    m = PROGRESS.search(line)
    assert m, f"no progress lines in {line!r}"
    return m.group(1), m.group(2), m.group(3), float(m.group(4))


def hold_part_way(oxzfs, pool, at=20.0, limit=60):
    """Wait until the scan is AT percent done, then hold it still (zfs_scan_suspend_progress) and
    give it a moment to stop at a block and a sync to write where: its progress then."""
    deadline = time.time() + limit
    while progress(oxzfs, pool)[3] < at:
        assert time.time() < deadline, f"the scan did not reach {at}% in {limit} s: {scan_line(oxzfs, pool)!r}"
        time.sleep(0.05)
    tunable(oxzfs, "zfs_scan_suspend_progress=1")
    time.sleep(0.3)
    held = progress(oxzfs, pool)
    time.sleep(1.2)  # zfs_txg_timeout=1: the bookmark reaches the disk
    assert progress(oxzfs, pool) == held, "held still, the scan went on"
    assert held[3] < 95.0, f"the scan was nearly done before it could be held: {held}"
    return held


def scan_entry(vdir, pool):
    """The 24 words of the MOS directory's `scan` entry, as OpenZFS's zdb reads them."""
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddd", pool, "1"], capture_output=True, text=True, timeout=300)
    m = re.search(r"^\s*scan = ([\d ]+)$", r.stdout, re.M)
    assert m, f"no scan entry in zdb's object directory:\n{r.stdout[-3000:]}{r.stderr[-2000:]}"
    w = [int(x) for x in m.group(1).split()]
    assert len(w) == 24, w
    return {"func": w[0], "state": w[1], "queue_obj": w[2], "to_examine": w[9], "examined": w[10],
            "bookmark": w[19:23]}


def scrub_reads(oxzfs, pool, dev):
    """Scrub reads of DEV since the import (`zpool iostat -r`: the scrub columns of every bucket)."""
    out = oxzfs.zpool("iostat", "-rHp", pool, dev, check=True).stdout
    n = 0
    for ln in out.splitlines():
        cols = ln.split("\t")
        if len(cols) == 13 and cols[0].isdigit():
            n += int(cols[9]) + int(cols[10])
    return n


def delay(oxzfs, dev, pool, ms):
    r = oxzfs.run("zinject", "-d", dev, "-D", f"{ms}:1", pool)
    assert r.returncode == 0 and r.stdout.startswith("Added handler "), repr(r)


def test_scrub_resumes_from_its_bookmark_after_export_and_import(oxzfs):
    pool = "scanres"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 21)
    d0 = os.path.join(vdir, "d0")
    import_rw(oxzfs, vdir, pool, alt)
    tunable(oxzfs, "zfs_txg_timeout=1")
    try:
        delay(oxzfs, d0, pool, 8)
        assert oxzfs.zpool("scrub", pool).returncode == 0
        held = hold_part_way(oxzfs, pool)
        r = oxzfs.run("zinject")
        head = "%3s  %-15s  %-15s  %-15s  %s\n" % ("ID", "POOL", "DELAY (ms)", "LANES", "GUID")
        head += "---  ---------------  ---------------  ---------------  ----------------\n"
        row = re.escape("%-15s  %-15s  %-15s  " % (pool, 8, 1))
        assert r.stdout.startswith(head) and re.fullmatch(r"\s*\d+  " + row + r"[0-9a-f]+\n\n", r.stdout[len(head):]), \
            repr(r.stdout)
        assert oxzfs.export(pool).returncode == 0
        e = scan_entry(vdir, pool)
        assert (e["func"], e["state"]) == (1, 1), e
        assert e["bookmark"] != [0, 0, 0, 0] and e["examined"] > 0, e
        import_rw(oxzfs, vdir, pool, alt)
        # The figures of the first part, again: scanned and issued, and as far done.
        after = progress(oxzfs, pool)
        assert after == held, f"before export {held}, after import {after}"
        assert after[1] == after[0] and after[1] not in ("0", "0B"), after
        assert oxzfs.run("zinject", "-c", "all").returncode == 0
    finally:
        tunable(oxzfs, "zfs_scan_suspend_progress=0")
        tunable(oxzfs, "zfs_txg_timeout=5")
        oxzfs.run("zinject", "-c", "all")
    assert oxzfs.zpool("wait", "-t", "scrub", pool).returncode == 0
    m = DONE.match(scan_line(oxzfs, pool))
    assert m and m.groups() == ("0B", "0"), scan_line(oxzfs, pool)
    rest = scrub_reads(oxzfs, pool, d0)
    r = oxzfs.zpool("scrub", "-w", pool)
    assert r.returncode == 0, repr(r)
    whole = scrub_reads(oxzfs, pool, d0) - rest
    assert 0 < rest < whole * (1 - held[3] / 100 / 2), \
        f"resumed at {held[3]}%, the rest read {rest} blocks of d0, a whole scrub {whole}"
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_resilver_resumes_after_kill9_and_completes_the_new_side(oxzfs_bin, work_dir):
    """A new mirror side half resilvered when the daemon is killed: the next import goes on
    from the bookmark (its figures carried over, only the rest written), the DTL empties, and
    the new side alone holds the whole pool."""
    ox = fresh_daemon(oxzfs_bin, work_dir, "resilver-resume")
    base = ox.base
    pool = "rsres"
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    d0, d1 = make_devs(vdir, 2, 64)
    try:
        r = ox.zpool("create", "-R", alt, pool, d0)
        assert r.returncode == 0, repr(r)
        ox.imported.append(pool)
        want = fill(os.path.join(alt, pool), 22)
        tunable(ox, "zfs_txg_timeout=1")
        # The new side's writes are slow: the resilver takes its time.
        tunable(ox, "zfs_scan_suspend_progress=1")
        r = ox.zpool("attach", pool, d0, d1)
        assert r.returncode == 0, repr(r)
        delay(ox, d1, pool, 8)
        tunable(ox, "zfs_scan_suspend_progress=0")
        held = hold_part_way(ox, pool)
        assert scan_line(ox, pool).startswith("resilver in progress since ")
        ox.kill9()
    finally:
        ox.teardown()
    e = scan_entry(vdir, pool)
    assert (e["func"], e["state"]) == (2, 1) and e["bookmark"] != [0, 0, 0, 0] and e["examined"] > 0, e
    ox2 = Oxzfs(oxzfs_bin, os.path.join(base, "after"))
    ox2.start_daemon()
    try:
        tunable(ox2, "zfs_scan_suspend_progress=1")
        try:
            r = ox2.zpool("import", "-f", "-d", vdir, "-R", alt, pool)
            assert r.returncode == 0, repr(r)
            ox2.imported.append(pool)
            after = progress(ox2, pool)
            assert after[1] == after[0] and after[1] not in ("0", "0B") and after[3] > 0, (held, after)
            assert after[3] <= held[3], f"what reached the disk is at most what was done: {held} {after}"
        finally:
            tunable(ox2, "zfs_scan_suspend_progress=0")
        assert ox2.zpool("wait", "-t", "resilver", pool).returncode == 0
        assert resilvered(status(ox2, pool))[1] == 0
        assert not diff_manifests(manifest_mod.manifest(os.path.join(alt, pool)), want)
        assert ox2.export(pool).returncode == 0
    finally:
        ox2.teardown()
    # The new side alone: OpenZFS's zdb -bcc is clean and every file reads back.
    only = alone(ox2, vdir, "d1", "rsres")
    zdb_check(only, pool)


def test_scrub_resumed_inside_a_dataset_reads_its_claimed_log_again(oxzfs_bin, work_dir):
    """A crash's intent log claimed by an import with -N (replayed only by the first mount) is
    the head dataset's: a scrub that stopped inside that dataset reads the log again when it
    goes on, before its bookmark, as OpenZFS's dsl_scan_visitds does. A log block damaged on
    one mirror side while the pool was exported is repaired by the rest of the scrub, and the
    mount then replays the whole log."""
    ox = fresh_daemon(oxzfs_bin, work_dir, "scan-resume-zil")
    pool = "rszil"
    vdir, alt = os.path.join(ox.base, "vdevs"), os.path.join(ox.base, "alt")
    d0, d1 = make_devs(vdir, 2, 128)
    root = os.path.join(alt, pool)
    try:
        r = ox.zpool("create", "-R", alt, pool, "mirror", d0, d1)
        assert r.returncode == 0, repr(r)
        ox.imported.append(pool)
        fill(root, 23)
        assert ox.zpool("sync", pool).returncode == 0
        # No txg sync from here on: the changes survive the kill through the log only.
        tunable(ox, "zfs_txg_timeout=3600")
        work = os.path.join(root, "logged")
        os.mkdir(work)
        snaps = logged_workload(work, 6, sizes=(100, 4096, 5000))
        ox.kill9()
        unmount_below(alt)
        blocks = zdb_blocks(vdir, pool)
        assert len(blocks) > 5, f"zdb lists {len(blocks)} log blocks"
        _, vdev, off = blocks[len(blocks) // 2]
        assert vdev == 0
        r = subprocess.run([ZDB, "-e", "-p", vdir, "-d", pool], capture_output=True, text=True, timeout=300)
        m = re.search(rf"^Dataset {pool} \[ZPL\], ID (\d+),", r.stdout, re.M)
        assert m, r.stdout + r.stderr
        head = int(m.group(1))
        r = ox.zpool("import", "-N", "-f", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        tunable(ox, "zfs_txg_timeout=1")
        delay(ox, d0, pool, 8)
        assert ox.zpool("scrub", pool).returncode == 0
        hold_part_way(ox, pool)
        assert ox.run("zinject", "-c", "all").returncode == 0
        assert ox.export(pool).returncode == 0
        e = scan_entry(vdir, pool)
        assert (e["func"], e["state"]) == (1, 1) and e["bookmark"][0] == head, \
            f"the scrub did not stop inside dataset {head}: {e}"
        with open(d0, "r+b") as f:
            f.seek(0x400000 + off + 200)
            f.write(os.urandom(64))
        r = ox.zpool("import", "-N", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        tunable(ox, "zfs_scan_suspend_progress=0")
        assert ox.zpool("wait", "-t", "scrub", pool).returncode == 0
        line = scan_line(ox, pool)
        m = DONE.match(line)
        assert m and m.group(1) != "0B" and m.group(2) == "0", f"the damaged log block was not repaired: {line!r}"
        sides = []
        for d in (d0, d1):
            with open(d, "rb") as f:
                f.seek(0x400000 + off)
                sides.append(f.read(512))
        assert sides[0] == sides[1], "the damaged log block was not rewritten on its side"
        assert ox.zfs("mount", "-a").returncode == 0
        got = tree(work)
        bad = sorted(k for k in set(snaps[-1]) | set(got) if got.get(k) != snaps[-1].get(k))
        assert not bad, f"after the scrub and the mount's replay: {bad[:10]}"
        assert ox.export(pool).returncode == 0
    finally:
        ox.teardown()
    zdb_check(vdir, pool)


def test_wait_for_a_scrub_does_not_wait_for_a_resilver(oxzfs):
    """`zpool wait -t scrub` waits for a scrub only, as OpenZFS's spa_activity_in_progress
    tells them apart: it returns while a resilver runs; `-t scrub,resilver` waits for that
    resilver to end."""
    pool = "waitkind"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: [d[0]], 2, 25)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    import_rw(oxzfs, vdir, pool, alt)
    waiter = None
    tunable(oxzfs, "zfs_scan_suspend_progress=1")
    try:
        assert oxzfs.zpool("attach", pool, d0, d1).returncode == 0
        assert scan_line(oxzfs, pool).startswith("resilver in progress since "), scan_line(oxzfs, pool)
        r = oxzfs.zpool("wait", "-t", "scrub", pool, timeout=60)
        assert r.returncode == 0 and r.stdout == r.stderr == "", repr(r)
        waiter = subprocess.Popen([oxzfs.binary, "zpool", "wait", "-t", "scrub,resilver", pool], env=oxzfs.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert waiter.poll() is None, "zpool wait -t scrub,resilver returned while the resilver was held"
        assert scan_line(oxzfs, pool).startswith("resilver in progress since ")
    finally:
        tunable(oxzfs, "zfs_scan_suspend_progress=0")
        if waiter is not None and waiter.poll() is None:
            try:
                waiter.wait(timeout=120)
            except subprocess.TimeoutExpired:
                waiter.kill()
    assert waiter.returncode == 0, waiter.communicate()
    assert re.match(r"resilvered \S+ in \d\d:\d\d:\d\d with 0 errors on ", scan_line(oxzfs, pool)), scan_line(oxzfs, pool)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
