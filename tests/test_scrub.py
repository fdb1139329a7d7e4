"""Self-healing and scrub, judged by the device bytes and the oracles.

A mirror side or a raidz column overwritten with random bytes in many places is within
redundancy: a pool imported read-write rewrites the bad copies its reads find (self-healing), and
`zpool scrub` reads every copy of every block and repairs all of them, so that the damaged device
alone (the other sides taken away) holds the whole pool again, OpenZFS's `zdb -bcc` is clean and
every file reads back. A read-only import never writes. The scan's state lives in the MOS as
OpenZFS keeps it (`zdb` and zfs-fuse accept it), and `zpool status` prints the `scan:` line as
OpenZFS 2.1 does."""
import errno
import os
import random
import re
import shutil
import subprocess
import time
import zlib

import pytest

import manifest as manifest_mod
import oracle_pools
import populate as populate_mod
from conftest import Oxzfs, count, diff_manifests, fresh_daemon, status_rows, zfs_fuse_imported
from test_damage import LABELS_BACK, LABELS_FRONT, SECTOR, rot_sectors
from test_write import ZDB, _strip_xattrs, make_devs, zdb_check


def fill(root, seed):
    populate_mod.populate(root, seed, "small")
    rng = random.Random(seed)
    with open(os.path.join(root, "random.bin"), "wb") as f:
        f.write(rng.randbytes(6 << 20))
    return manifest_mod.manifest(root)


def new_pool(oxzfs, pool, layout, ndevs, seed, *opts):
    """A pool of NDEVS 64 MiB files laid out as LAYOUT (a function of the device paths), filled
    and exported: (vdev dir, altroot, the manifest of its root file system)."""
    base = os.path.join(oxzfs.base, pool)
    shutil.rmtree(base, ignore_errors=True)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, ndevs, 64)
    r = oxzfs.zpool("create", *opts, "-R", alt, pool, *layout(devs))
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    want = fill(os.path.join(alt, pool), seed)
    assert oxzfs.export(pool).returncode == 0
    return vdir, alt, want


def import_rw(oxzfs, vdir, pool, alt):
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)


def differing_sectors(a, b):
    """Offsets of the 4K sectors of the data area (labels left out) where files A and B differ."""
    out = []
    size = os.path.getsize(a)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        off = LABELS_FRONT
        fa.seek(off)
        fb.seek(off)
        while off < size - LABELS_BACK:
            if fa.read(SECTOR) != fb.read(SECTOR):
                out.append(off)
            off += SECTOR
    return out


def alone(oxzfs, vdir, keep, tag):
    """A directory holding a copy of device KEEP only (the pool's other devices left out)."""
    d = os.path.join(oxzfs.base, "alone", tag)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copyfile(os.path.join(vdir, keep), os.path.join(d, keep))
    return d


def check_reads(oxzfs, vdir, pool, alt, want):
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    try:
        got = manifest_mod.manifest(os.path.join(alt, pool))
        d = diff_manifests(got, want)
        assert not d, f"{pool} from {vdir} reads differently:\n{d}"
    finally:
        assert oxzfs.export(pool).returncode == 0


def cksum_of(oxzfs, pool, dev):
    r = oxzfs.zpool("status", pool, check=True)
    rows = status_rows(r.stdout)
    mine = [v for k, v in rows.items() if k == dev or k.endswith("/" + dev)]
    assert mine, f"{dev} not in status:\n{r!r}"
    return count(mine[0][3]), r.stdout


def test_reads_of_a_read_write_import_heal_the_bad_side(oxzfs):
    pool = "healmirror"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 5)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    assert differing_sectors(d0, d1) == [], "mirror sides differ before any damage"
    assert rot_sectors(d0, seed=zlib.crc32(b"heal")) > 0
    before = len(differing_sectors(d0, d1))
    assert before > 0
    import_rw(oxzfs, vdir, pool, alt)
    got = manifest_mod.manifest(os.path.join(alt, pool))
    assert not diff_manifests(got, want)
    bad, text = cksum_of(oxzfs, pool, "d0")
    assert bad > 0, f"reads met {before} rotten sectors of d0 yet status counts no CKSUM there:\n{text}"
    assert oxzfs.export(pool).returncode == 0
    after = len(differing_sectors(d0, d1))
    # Every block the reads met was rewritten on d0: what still differs is what no read touched
    # (free space, blocks of metadata the import did not need).
    assert after < before / 2, f"{before} rotten sectors on d0, {after} still differ after reading everything"


def test_read_only_import_never_writes(oxzfs):
    pool = "romirror"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 6)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    assert rot_sectors(d0, seed=zlib.crc32(b"ro")) > 0
    sums = (manifest_mod.file_sha256(d0), manifest_mod.file_sha256(d1))
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    got = manifest_mod.manifest(os.path.join(alt, pool))
    assert not diff_manifests(got, want)
    assert cksum_of(oxzfs, pool, "d0")[0] > 0
    r = oxzfs.zpool("scrub", pool)
    assert (r.returncode, r.stderr) == (1, f"cannot scrub {pool}: pool is read-only\n"), repr(r)
    r = oxzfs.zpool("clear", pool, "nodev")
    assert (r.returncode, r.stderr) == (1, "cannot clear errors for nodev: no such device in pool\n"), repr(r)
    assert oxzfs.zpool("clear", pool).returncode == 0 and cksum_of(oxzfs, pool, "d0")[0] == 0
    assert oxzfs.export(pool).returncode == 0
    assert (manifest_mod.file_sha256(d0), manifest_mod.file_sha256(d1)) == sums, "a read-only import wrote to its devices"


def scan_line(oxzfs, pool):
    """The `scan:` part of `zpool status POOL` (up to the config)."""
    out = oxzfs.zpool("status", pool, check=True).stdout
    m = re.search(r"^  scan: (.*?)^config:", out, re.S | re.M)
    assert m, f"no scan: line in\n{out}"
    return m.group(1)


DONE = re.compile(r"^scrub repaired (\S+) in \d\d:\d\d:\d\d with (\d+) errors on \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\n$")


def scrub_done(oxzfs, pool):
    """`zpool scrub -w POOL`, then (repaired, errors) from its finished scan: line."""
    r = oxzfs.zpool("scrub", "-w", pool)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", repr(r)
    line = scan_line(oxzfs, pool)
    m = DONE.match(line)
    assert m, f"a finished scrub's line, as OpenZFS prints it, expected; got {line!r}"
    return m.group(1), int(m.group(2))


def scrub_repairs(oxzfs, pool, vdir, alt, victim):
    """Scrub a pool whose VICTIM device was damaged: something repaired, no errors, the victim
    charged with CKSUM errors; a second scrub repairs nothing and charges no device. (The callers
    then run zdb on the pool with a device left out, which reads every block from the rest.)"""
    import_rw(oxzfs, vdir, pool, alt)
    repaired, errors = scrub_done(oxzfs, pool)
    assert repaired != "0B" and errors == 0, f"repaired {repaired} with {errors} errors"
    bad, text = cksum_of(oxzfs, pool, victim)
    assert bad > 0, f"the scrub repaired {repaired} yet {victim} shows no CKSUM errors:\n{text}"
    r = oxzfs.zpool("clear", pool, victim)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), repr(r)
    assert cksum_of(oxzfs, pool, victim)[0] == 0, "zpool clear must reset the counts"
    assert scrub_done(oxzfs, pool) == ("0B", 0), "a second scrub must find nothing to repair"
    hist = oxzfs.zpool("history", pool, check=True).stdout
    assert f"zpool scrub -w {pool}" in hist and f"zpool clear {pool} {victim}" in hist, hist
    rows = status_rows(oxzfs.zpool("status", pool, check=True).stdout)
    assert all(count(v[3]) == 0 for v in rows.values() if v[3] is not None), f"the second scrub met bad copies: {rows}"
    assert oxzfs.export(pool).returncode == 0


def test_scrub_repairs_a_rotten_mirror_side(oxzfs):
    pool = "scrubmirror"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 7)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    assert rot_sectors(d0, seed=zlib.crc32(pool.encode())) > 0
    scrub_repairs(oxzfs, pool, vdir, alt, "d0")
    # The damaged side alone holds the whole pool again: zdb reads and verifies every block of
    # it, and every file reads back from it.
    only = alone(oxzfs, vdir, "d0", pool)
    zdb_check(only, pool)
    check_reads(oxzfs, only, pool, alt, want)


def range_reads(oxzfs, pool, dev):
    """Scrub reads of DEV of 256K and more (`zpool iostat -r`): ranges of several blocks (no
    block of these pools is larger than 128K)."""
    out = oxzfs.zpool("iostat", "-rHp", pool, dev, check=True).stdout
    rows = [ln.split("\t") for ln in out.splitlines()]
    return sum(int(c[9]) + int(c[10]) for c in rows if len(c) == 13 and c[0].isdigit() and int(c[0]) >= 256 << 10)


def test_sorted_scrub_reads_ranges_and_legacy_scrub_blocks(oxzfs):
    """The sorted scan reads adjacent blocks as one range (scrub reads of 256K and more in
    `zpool iostat -r`); with zfs_scan_legacy=1 it reads block by block, and repairs a rotten
    side all the same; the rotten side alone then holds the whole pool."""
    pool = "scrubsorted"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 9)
    import_rw(oxzfs, vdir, pool, alt)
    assert scrub_done(oxzfs, pool) == ("0B", 0)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    assert range_reads(oxzfs, pool, d0) > 0 and range_reads(oxzfs, pool, d1) > 0, "the sorted scrub read no ranges"
    assert oxzfs.export(pool).returncode == 0
    assert rot_sectors(d1, seed=zlib.crc32(pool.encode())) > 0
    import_rw(oxzfs, vdir, pool, alt)
    tunable(oxzfs, "zfs_scan_legacy=1")
    try:
        repaired, errors = scrub_done(oxzfs, pool)
        assert repaired != "0B" and errors == 0, (repaired, errors)
        assert range_reads(oxzfs, pool, d0) == 0, "the legacy scrub read ranges"
    finally:
        tunable(oxzfs, "zfs_scan_legacy=0")
    assert scrub_done(oxzfs, pool) == ("0B", 0)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(alone(oxzfs, vdir, "d1", pool), pool)


def test_scrub_repairs_a_rotten_raidz_column(oxzfs):
    pool = "scrubraidz"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["raidz1"] + d, 3, 8, "-o", "ashift=12")
    assert rot_sectors(os.path.join(vdir, "d1"), seed=zlib.crc32(pool.encode())) > 0
    scrub_repairs(oxzfs, pool, vdir, alt, "d1")
    # Without d0 every block is rebuilt from d1 and d2: they must both be right now.
    rest = os.path.join(oxzfs.base, "alone", pool)
    shutil.rmtree(rest, ignore_errors=True)
    os.makedirs(rest)
    for d in ("d1", "d2"):
        shutil.copyfile(os.path.join(vdir, d), os.path.join(rest, d))
    zdb_check(rest, pool)
    check_reads(oxzfs, rest, pool, alt, want)


def tunable(oxzfs, setting):
    oxzfs.run("tunable", setting, check=True)


def test_scrub_pause_resume_cancel_and_wait(oxzfs, work_dir):
    """A version-23 pool: the scrub held in progress (zfs_scan_suspend_progress, as OpenZFS's
    tests hold it), paused, resumed, refused what OpenZFS refuses with its words, carried across
    export and import, left paused for zdb and zfs-fuse, then finished and canceled."""
    pool = "scrubflow"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 9, "-o", "version=23")
    import_rw(oxzfs, vdir, pool, alt)
    # OpenZFS 2.1 prints no scan: line for a pool never scrubbed.
    assert "scan:" not in oxzfs.zpool("status", pool, check=True).stdout
    tunable(oxzfs, "zfs_scan_suspend_progress=1")
    try:
        r = oxzfs.zpool("scrub", pool)
        assert (r.returncode, r.stderr) == (0, ""), repr(r)
        running = re.compile(r"^scrub in progress since .*\n\t\S+ scanned at \S+/s, \S+ issued at \S+/s, \S+ total\n"
                             r"\t0B repaired, \d+\.\d\d% done, no estimated completion time\n$")
        assert running.match(scan_line(oxzfs, pool)), scan_line(oxzfs, pool)
        r = oxzfs.zpool("scrub", pool)
        assert (r.returncode, r.stderr) == (1, f"cannot scrub {pool}: currently scrubbing; use 'zpool scrub -s' "
                                               "to cancel current scrub\n"), repr(r)
        assert oxzfs.zpool("scrub", "-p", pool).returncode == 0
        paused = re.compile(r"^scrub paused since .*\n\tscrub started on .*\n\t\S+ scanned, \S+ issued, \S+ total\n"
                            r"\t0B repaired, \d+\.\d\d% done\n$")
        assert paused.match(scan_line(oxzfs, pool)), scan_line(oxzfs, pool)
        r = oxzfs.zpool("scrub", "-p", pool)
        assert (r.returncode, r.stderr) == (1, f"cannot pause scrubbing {pool}: scrub is paused; "
                                               "use 'zpool scrub' to resume\n"), repr(r)
        # A paused scrub is no activity to wait for.
        assert oxzfs.zpool("wait", "-t", "scrub", pool).returncode == 0
        assert oxzfs.zpool("scrub", pool).returncode == 0
        assert running.match(scan_line(oxzfs, pool)), scan_line(oxzfs, pool)
        # Export while scrubbing, import: still scrubbing (from the MOS); then left paused.
        assert oxzfs.export(pool).returncode == 0
        import_rw(oxzfs, vdir, pool, alt)
        assert running.match(scan_line(oxzfs, pool)), scan_line(oxzfs, pool)
        assert oxzfs.zpool("scrub", "-p", pool).returncode == 0
        assert oxzfs.export(pool).returncode == 0
    finally:
        tunable(oxzfs, "zfs_scan_suspend_progress=0")
    # The paused scrub's pool: OpenZFS's zdb is clean, zfs-fuse imports it and reads it all.
    zdb_check(vdir, pool)
    with zfs_fuse_imported(work_dir, vdir, os.path.join(oxzfs.base, pool, "zfs-fuse-alt"), pool) as zroot:
        d = diff_manifests(_strip_xattrs(manifest_mod.manifest(zroot)), _strip_xattrs(want))
        assert not d, f"zfs-fuse reads a pool with our paused scrub differently:\n{d}"
    # Back in oxzfs: still paused; resumed, it finishes; a new one is canceled.
    import_rw(oxzfs, vdir, pool, alt)
    assert scan_line(oxzfs, pool).startswith("scrub paused since ")
    assert scrub_done(oxzfs, pool) == ("0B", 0)
    tunable(oxzfs, "zfs_scan_suspend_progress=1")
    try:
        assert oxzfs.zpool("scrub", pool).returncode == 0
        assert oxzfs.zpool("scrub", "-s", pool).returncode == 0
    finally:
        tunable(oxzfs, "zfs_scan_suspend_progress=0")
    assert re.match(r"^scrub canceled on \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\n$", scan_line(oxzfs, pool)), \
        scan_line(oxzfs, pool)
    for flag, what in (("-s", "cancel scrubbing"), ("-p", "pause scrubbing")):
        r = oxzfs.zpool("scrub", flag, pool)
        assert (r.returncode, r.stderr) == (1, f"cannot {what} {pool}: there is no active scrub\n"), repr(r)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    assert scan_line(oxzfs, pool).startswith("scrub canceled on ")
    assert oxzfs.export(pool).returncode == 0


def test_scrub_bad_input(oxzfs):
    usage = "usage:\n\tscrub [-s | -p] [-w] <pool> ...\n"
    for args, err in ((["-x", "p"], "invalid option 'x'\n"), ([], "missing pool name argument\n"),
                      (["-s", "-p", "p"], "invalid option combination: -s and -p are mutually exclusive\n"),
                      (["-w", "-s", "p"], "invalid option combination: -w cannot be used with -p or -s\n")):
        r = oxzfs.zpool("scrub", *args)
        assert (r.returncode, r.stderr) == (2, err + usage), repr(r)
    r = oxzfs.zpool("scrub", "nosuchpool")
    assert (r.returncode, r.stderr) == (1, "cannot open 'nosuchpool': no such pool\n"), repr(r)
    r = oxzfs.zpool("wait", "-t", "scrub,nonsense", "nosuchpool")
    assert r.returncode == 2 and r.stderr.startswith("invalid activity 'nonsense'\n"), repr(r)
    r = oxzfs.zpool("wait", "nosuchpool")
    assert (r.returncode, r.stderr) == (1, "cannot open 'nosuchpool': no such pool\n"), repr(r)
    r = oxzfs.zpool("clear", "nosuchpool")
    assert (r.returncode, r.stderr) == (1, "cannot open 'nosuchpool': no such pool\n"), repr(r)
    r = oxzfs.zpool("clear")
    assert (r.returncode, r.stderr) == (2, "missing pool name\nusage:\n\tclear <pool> [device]\n"), repr(r)


def test_scrub_counts_damage_beyond_redundancy(oxzfs):
    """One disk, data blocks overwritten: nothing can repair them. The scrub says how many
    blocks it could not read, `zpool status -v` names the damaged files, the pool stays up."""
    pool = "scrubsingle"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: d, 1, 10)
    assert rot_sectors(os.path.join(vdir, "d0"), seed=zlib.crc32(pool.encode()), fraction=0.05) > 0
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.zpool("scrub", "-w", pool)
    assert r.returncode == 0, repr(r)
    m = DONE.match(scan_line(oxzfs, pool))
    assert m and int(m.group(2)) > 0, f"damage on a one-disk pool must count as scrub errors: {scan_line(oxzfs, pool)!r}"
    r = oxzfs.zpool("status", "-v", pool, check=True)
    assert "Permanent errors have been detected in the following files:" in r.stdout, r.stdout
    assert oxzfs.daemon_alive()
    assert oxzfs.export(pool).returncode == 0


def test_scrub_goes_on_after_kill9(oxzfs_bin, work_dir):
    """A scrub under way when the daemon is killed: the pool's MOS says it is scanning, so the
    next read-write import starts it again and it runs to the end; zdb is clean."""
    ox = fresh_daemon(oxzfs_bin, work_dir, "scrub-kill9")
    base = ox.base
    pool = "scrubkill"
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 2, 64)
    try:
        r = ox.zpool("create", "-R", alt, pool, "mirror", *devs)
        assert r.returncode == 0, repr(r)
        want = fill(os.path.join(alt, pool), 11)
        tunable(ox, "zfs_scan_suspend_progress=1")
        assert ox.zpool("scrub", pool).returncode == 0
        assert scan_line(ox, pool).startswith("scrub in progress since ")
        ox.kill9()
    finally:
        ox.teardown()
    ox2 = Oxzfs(oxzfs_bin, os.path.join(base, "after"))
    ox2.start_daemon()
    try:
        r = ox2.zpool("import", "-f", "-d", vdir, "-R", alt, pool)
        assert r.returncode == 0, repr(r)
        ox2.imported.append(pool)
        assert ox2.zpool("wait", "-t", "scrub", pool).returncode == 0
        m = DONE.match(scan_line(ox2, pool))
        assert m and m.groups() == ("0B", "0"), scan_line(ox2, pool)
        assert not diff_manifests(manifest_mod.manifest(os.path.join(alt, pool)), want)
        assert ox2.export(pool).returncode == 0
    finally:
        ox2.teardown()
    zdb_check(vdir, pool)


def test_scrub_in_short_turns_while_files_change(oxzfs):
    """zfs_scrub_min_time_ms=1: the scan stops after about a millisecond's walk and goes on in
    the next synced tree, over and over, while files are written, rewritten and removed. It
    ends with no errors, and the pool is as the writes left it (zdb clean, content equal)."""
    import threading
    pool = "scrubturns"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 12)
    import_rw(oxzfs, vdir, pool, alt)
    root = os.path.join(alt, pool)
    stop = threading.Event()

    def churn():
        rng = random.Random(12)
        i = 0
        while not stop.is_set():
            with open(os.path.join(root, f"churn{i % 13}"), "wb") as f:
                f.write(rng.randbytes(rng.choice([3000, 70000, 400000])))
            gone = os.path.join(root, f"churn{(i * 7) % 13}")
            if i % 5 == 4 and os.path.exists(gone):
                os.unlink(gone)
            i += 1

    tunable(oxzfs, "zfs_scrub_min_time_ms=1")
    t = threading.Thread(target=churn)
    t.start()
    try:
        assert scrub_done(oxzfs, pool)[1] == 0
        assert scrub_done(oxzfs, pool)[1] == 0
    finally:
        stop.set()
        t.join()
        tunable(oxzfs, "zfs_scrub_min_time_ms=1000")
    want = manifest_mod.manifest(root)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    check_reads(oxzfs, vdir, pool, alt, want)


def test_zinject_device_faults(oxzfs):
    """`oxzfs zinject -d` breaks a leaf the way a failing disk would, with OpenZFS's zinject
    syntax and output: read errors on one mirror side leave every file readable (the other side
    answers) and are counted on that side alone; bit flips on reads are caught by the checksums
    (CKSUM) and healed; write errors are counted on the side that failed while the pool goes on;
    handlers are listed and cleared as zinject does."""
    pool = "zinj"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 9)
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    r = oxzfs.run("zinject")
    assert r.stdout == "No handlers registered.\nRun 'zinject -h' for usage information.\n", repr(r)
    r = oxzfs.run("zinject", "-d", d0, "-e", "io", "-T", "read", pool)
    assert r.returncode == 1 and r.stderr == f"cannot open '{pool}': no such pool\n", repr(r)
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.run("zinject", "-d", "nodev", "-e", "io", pool)
    assert r.returncode == 1 and r.stderr == f"cannot find device 'nodev' in pool '{pool}'\n", repr(r)
    r = oxzfs.run("zinject", "-d", d0, "-e", "corrupt", pool)
    assert r.returncode == 1 and r.stderr == "device corrupt errors require io type read and a frequency value\n", repr(r)
    r = oxzfs.run("zinject", "-d", d0, "-e", "io", "-T", "read", pool)
    assert r.returncode == 0, repr(r)
    m = re.fullmatch(rf"Added handler (\d+) with the following properties:\n  pool: {pool}\n  vdev: ([0-9a-f]+)\n", r.stdout)
    assert m, repr(r)
    listing = oxzfs.run("zinject").stdout.splitlines()
    assert listing[:2] == [" ID  POOL             GUID", "---  ---------------  ----------------"], listing
    assert listing[2].split() == [m.group(1), pool, m.group(2)], listing
    # Reads: the cache is cold after the import; every file comes from d1.
    got = manifest_mod.manifest(os.path.join(alt, pool))
    assert not diff_manifests(got, want)
    rows = status_rows(oxzfs.zpool("status", pool, check=True).stdout)
    assert count(rows[d0][1]) > 0 and count(rows[d1][1]) == 0 and rows[d0][0] == "ONLINE", rows
    r = oxzfs.run("zinject", "-c", m.group(1))
    assert r.stdout == f"removed handler {m.group(1)}\n", repr(r)
    assert oxzfs.zpool("clear", pool).returncode == 0
    # Writes failing on d0: the pool takes them on d1, the failures are d0's.
    r = oxzfs.run("zinject", "-q", "-d", d0, "-e", "io", "-T", "write", pool)
    assert r.returncode == 0 and r.stdout.strip().isdigit(), repr(r)
    with open(os.path.join(alt, pool, "during"), "wb") as f:
        f.write(os.urandom(1 << 20))
    assert oxzfs.zpool("sync", pool).returncode == 0
    rows = status_rows(oxzfs.zpool("status", pool, check=True).stdout)
    assert count(rows[d0][2]) > 0 and count(rows[d1][2]) == 0, rows
    os.unlink(os.path.join(alt, pool, "during"))
    r = oxzfs.run("zinject", "-c", "all")
    assert r.stdout == "removed all registered handlers\n", repr(r)
    assert oxzfs.run("zinject").stdout.startswith("No handlers registered."), "handlers left after -c all"
    assert oxzfs.zpool("clear", pool).returncode == 0
    # The clear resilvers the txgs whose writes failed on d0 (its DTL), and a scrub goes over
    # the rest...
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    scrub_done(oxzfs, pool)
    # ... and bit flips on every read of d0 are caught by the checksums, never returned.
    assert oxzfs.export(pool).returncode == 0
    import_rw(oxzfs, vdir, pool, alt)
    r = oxzfs.run("zinject", "-d", d0, "-e", "corrupt", "-T", "read", "-f", "100", pool)
    assert r.returncode == 0, repr(r)
    got = manifest_mod.manifest(os.path.join(alt, pool))
    assert not diff_manifests(got, want)
    rows = status_rows(oxzfs.zpool("status", pool, check=True).stdout)
    assert count(rows[d0][3]) > 0 and count(rows[d1][3]) == 0, rows
    assert oxzfs.run("zinject", "-c", "all").returncode == 0
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def read_fails(path):
    """A read of PATH's first MiB fails with EIO."""
    try:
        with open(path, "rb") as f:
            f.read(1 << 20)
    except OSError as e:
        assert e.errno == errno.EIO, e
        return
    raise AssertionError(f"a read of {path} succeeded")


def test_zinject_data_fails_a_files_reads_until_cleared(oxzfs):
    """`zinject -t data -e checksum PATH` fails every read of the file's blocks: a read gets
    EIO, `zpool status -v` names the file, the handler is listed; after `zinject -c all`,
    `zpool clear` and a scrub the file reads back whole and the error log is empty."""
    pool = "zidata"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: d, 1, 31)
    import_rw(oxzfs, vdir, pool, alt)
    path = os.path.join(alt, pool, "random.bin")
    obj = os.stat(path).st_ino
    r = oxzfs.run("zinject", "-t", "data", "-e", "checksum", "-a", path)
    assert r.returncode == 0, repr(r)
    m = re.fullmatch(r"Added handler (\d+) with the following properties:\n  pool: (\S+)\nobjset: (\d+)\nobject: (\d+)\n"
                     r"  type: 0\n level: 0\n range: all\n  dvas: 0x0\n", r.stdout)
    assert m and m.group(2) == pool and int(m.group(4)) == obj, repr(r.stdout)
    hid, objset = m.group(1), m.group(3)
    listing = oxzfs.run("zinject").stdout
    assert listing.startswith(" ID  POOL             OBJSET  OBJECT  TYPE      LVL  DVAs  RANGE          \n"
                              "---  ---------------  ------  ------  --------  ---  ----  ---------------\n"), repr(listing)
    assert f"{hid:>3}  {pool:<15}  {objset:<6}  {obj:<6}  -         0    0x00  all\n" in listing, repr(listing)
    read_fails(path)
    # A file made after the import, in a directory made after it, is named by its path too.
    late = os.path.join(alt, pool, "late", "made-after-import.bin")
    os.makedirs(os.path.dirname(late))
    with open(late, "wb") as f:
        f.write(random.Random(7).randbytes(300_000))
    assert oxzfs.zpool("sync", pool).returncode == 0
    r = oxzfs.run("zinject", "-t", "data", "-e", "checksum", "-a", late)
    assert r.returncode == 0, repr(r)
    read_fails(late)
    late_obj = os.stat(late).st_ino
    out = oxzfs.zpool("status", "-v", pool, check=True).stdout
    assert "errors: Permanent errors have been detected in the following files:" in out, out
    assert f"        {path}\n" in out and f"        {late}\n" in out, out
    for bad in (["-t", "data", "random.bin"], ["-t", "mos", path], ["-t", "data", "-e", "nxio", path]):
        r = oxzfs.run("zinject", *bad)
        assert r.returncode != 0 and r.stderr, (bad, r)
    r = oxzfs.run("zinject", "-c", "all")
    assert (r.returncode, r.stdout) == (0, "removed all registered handlers\n"), repr(r)
    # The error log is in the MOS (errlog_last, entries objset:object:level:blkid in hex, as
    # OpenZFS's zdb shows them): export, a new daemon, import, and status -v still names the file.
    assert oxzfs.export(pool).returncode == 0
    last, scrub = errlog_objects(vdir, pool)
    objs = {f"{int(objset):x}:{o:x}:0:" for o in (obj, late_obj)}
    assert scrub is None and {k[:k.rindex(":") + 1] for k in last} == objs, (last, scrub)
    zdb_check(vdir, pool)
    oxzfs.stop_daemon()
    oxzfs.start_daemon()
    import_rw(oxzfs, vdir, pool, alt)
    out = oxzfs.zpool("status", "-v", pool, check=True).stdout
    assert "errors: Permanent errors have been detected in the following files:" in out, out
    assert f"        {path}\n" in out and f"        {late}\n" in out, out
    assert oxzfs.zpool("clear", pool).returncode == 0
    assert scrub_done(oxzfs, pool) == ("0B", 0)
    assert "errors: No known data errors" in oxzfs.zpool("status", "-v", pool, check=True).stdout
    shutil.rmtree(os.path.dirname(late))
    got = manifest_mod.manifest(os.path.join(alt, pool))
    assert not diff_manifests(got, want)
    # The clean scrub emptied it on disk too.
    assert oxzfs.export(pool).returncode == 0
    assert errlog_objects(vdir, pool) == (None, None)
    zdb_check(vdir, pool)


def errlog_objects(vdir, pool):
    """OpenZFS's zdb -dddd of the MOS: the entries of the objects the pool directory names
    errlog_last and errlog_scrub ({} for an object without entries, None for none)."""
    def dump(obj):
        r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddd", pool, str(obj)], capture_output=True, text=True, errors="replace")
        assert r.returncode == 0, f"zdb -dddd {pool} {obj}:\n{r.stdout}{r.stderr}"
        return r.stdout
    d = dict(re.findall(r"^\t\t(errlog_last|errlog_scrub) = (\d+) *$", dump(1), re.M))
    assert set(d) == {"errlog_last", "errlog_scrub"}, f"no error log in the pool directory:\n{dump(1)}"
    out = []
    for k in ("errlog_last", "errlog_scrub"):
        obj = int(d[k])
        if obj == 0:
            out.append(None)
            continue
        text = dump(obj)
        assert "ZFS error log" in text or "error log" in text.lower(), text
        out.append(dict(re.findall(r"^\t\t([0-9a-f]+:[0-9a-f]+:[0-9a-f]+:[0-9a-f]+) = (.*?) *$", text, re.M)))
    return tuple(out)


def l0_offset(vdir, pool, obj):
    """The offset on its vdev of the first data block of object OBJ of POOL's root file
    system, as OpenZFS's zdb -ddddd prints it (exported pool)."""
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-ddddd", f"{pool}/", str(obj)], capture_output=True, text=True, errors="replace")
    m = re.search(r"^\s+0\s+L0 0:([0-9a-f]+):[0-9a-f]+ ", r.stdout, re.M)
    assert r.returncode == 0 and m, f"zdb -ddddd {pool}/ {obj}: no level-0 block:\n{r.stdout[-3000:]}{r.stderr}"
    return int(m.group(1), 16)


@pytest.mark.nightly
def test_error_log_round_trips_with_zfs_fuse(oxzfs, work_dir):
    """A version-23 pool's error log both ways: zfs-fuse's `zpool status -v` names the file
    whose read failed under oxzfs (our errlog_last), and oxzfs's names the file zfs-fuse
    could not read (damaged on the one disk beyond redundancy) after zfs-fuse exported it."""
    pool = "errlog23"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: d, 1, 33, "-o", "version=23")
    import_rw(oxzfs, vdir, pool, alt)
    path = os.path.join(alt, pool, "random.bin")
    victim = os.path.join(alt, pool, "victim.bin")
    with open(victim, "wb") as f:
        f.write(random.Random(33).randbytes(128 << 10))
    obj = os.stat(victim).st_ino
    assert oxzfs.run("zinject", "-t", "data", "-e", "checksum", path).returncode == 0
    read_fails(path)
    assert oxzfs.run("zinject", "-c", "all").returncode == 0
    assert oxzfs.export(pool).returncode == 0
    off = l0_offset(vdir, pool, obj)
    with open(os.path.join(vdir, "d0"), "r+b") as f:
        f.seek(LABELS_FRONT + off)
        f.write(random.Random(34).randbytes(SECTOR))
    zalt = os.path.join(oxzfs.base, pool, "zfs-fuse-alt")
    with zfs_fuse_imported(work_dir, vdir, zalt, pool) as zroot:
        r = subprocess.run(["zpool", "status", "-v", pool], capture_output=True, text=True)
        assert "Permanent errors" in r.stdout and "random.bin" in r.stdout, f"zfs-fuse does not read our error log:\n{r.stdout}{r.stderr}"
        read_fails(os.path.join(zroot, "victim.bin"))
    import_rw(oxzfs, vdir, pool, alt)
    out = oxzfs.zpool("status", "-v", pool, check=True).stdout
    assert f"        {victim}\n" in out and f"        {path}\n" in out, out
    assert oxzfs.export(pool).returncode == 0


def test_zinject_a_flushes_the_arc(oxzfs):
    """`zinject -a` drops the ARC's blocks, so the next read goes to the disks: a read fault
    on the one disk added without -a is not met by a file read before (the ARC answers),
    with -a it is (EIO); `zinject -a` alone prints nothing and succeeds."""
    pool = "zinjarc"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: d, 1, 35)
    import_rw(oxzfs, vdir, pool, alt)
    path, d0 = os.path.join(alt, pool, "random.bin"), os.path.join(vdir, "d0")

    def read_past_page_cache():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return os.pread(fd, 1 << 20, 0)
        finally:
            os.close(fd)

    first = read_past_page_cache()
    assert len(first) == 1 << 20
    assert oxzfs.run("zinject", "-d", d0, "-e", "io", "-T", "read", pool).returncode == 0
    assert read_past_page_cache() == first, "a read the ARC holds went to the faulty disk"
    assert oxzfs.run("zinject", "-c", "all").returncode == 0
    r = oxzfs.run("zinject", "-a")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), repr(r)
    r = oxzfs.run("zinject", "-a", pool)
    assert r.returncode == 2 and r.stderr.startswith("extraneous argument for '-f'\n"), repr(r)
    assert read_past_page_cache() == first
    r = oxzfs.run("zinject", "-d", d0, "-e", "io", "-T", "read", "-a", pool)
    assert r.returncode == 0 and r.stdout.startswith("Added handler "), repr(r)
    try:
        read_past_page_cache()
        raise AssertionError("a read after zinject -a did not meet the disk's fault")
    except OSError as e:
        assert e.errno == errno.EIO, e
    assert oxzfs.run("zinject", "-c", "all").returncode == 0
    assert oxzfs.zpool("clear", pool).returncode == 0
    assert read_past_page_cache() == first
    assert oxzfs.export(pool).returncode == 0


DITTO = re.compile(r"^index \w+ refcnt \d+ ditto DVA\[0\]=<0:([0-9a-f]+):([0-9a-f]+)>", re.M)


def zfs_fuse_ditto_pool(work_dir, vdir, zalt, pool, block):
    """A two-way mirror made by zfs-fuse (version 23) with dedupditto=100 and one file of 120
    copies of BLOCK: past 100 references zfs-fuse writes the block's ditto copy
    (DDT_PHYS_DITTO), which no block pointer names. Exported when done."""
    devs = make_devs(vdir, 2, 64)
    with oracle_pools.ZfsFuse(work_dir):
        def zf(*cmd):
            r = subprocess.run(list(cmd), capture_output=True, text=True)
            assert r.returncode == 0, f"zfs-fuse: {' '.join(cmd)}: {r.stdout}{r.stderr}"
            return r.stdout
        try:
            zf("zpool", "create", "-f", "-R", zalt, pool, "mirror", *devs)
            zf("zpool", "set", "dedupditto=100", pool)
            zf("zfs", "set", "dedup=on", pool)
            mnt = zf("zfs", "get", "-H", "-o", "value", "mountpoint", pool).strip()
            deadline = time.time() + 20
            while not os.path.ismount(mnt):
                assert time.time() < deadline, f"zfs-fuse did not mount {pool} at {mnt}"
                time.sleep(0.2)
            with open(os.path.join(mnt, "f"), "wb") as f:
                for _ in range(120):
                    f.write(block)
        finally:
            subprocess.run(["zpool", "export", "-f", pool], capture_output=True)


def test_scrub_reads_the_dedup_tables_ditto_copies(oxzfs, work_dir):
    """The dedup table's ditto copies (DDT_PHYS_DITTO, written by older systems past dedupditto
    references) are named by no block pointer: only a scrub that walks the table first, as
    OpenZFS's does, reads them. One mirror side of the ditto copy is overwritten; our scrub
    repairs it from the other side, and both sides hold the same bytes there afterwards."""
    pool = "ditto23"
    base = os.path.join(oxzfs.base, pool)
    shutil.rmtree(base, ignore_errors=True)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    block = random.Random(41).randbytes(128 << 10)
    zfs_fuse_ditto_pool(work_dir, vdir, os.path.join(base, "zfs-fuse-alt"), pool, block)
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-DDDDD", pool], capture_output=True, text=True, errors="replace", timeout=300)
    copies = [(int(o, 16), int(s, 16)) for o, s in DITTO.findall(r.stdout)]
    assert len(copies) == 1, f"zfs-fuse left {len(copies)} ditto copies, one expected:\n{r.stdout[-3000:]}{r.stderr[-2000:]}"
    off, size = copies[0]
    d0, d1 = os.path.join(vdir, "d0"), os.path.join(vdir, "d1")
    with open(d0, "r+b") as f:
        f.seek(LABELS_FRONT + off)
        f.write(random.Random(42).randbytes(size))

    def side(path):
        with open(path, "rb") as f:
            f.seek(LABELS_FRONT + off)
            return f.read(size)
    assert side(d0) != side(d1)
    import_rw(oxzfs, vdir, pool, alt)
    repaired, errors = scrub_done(oxzfs, pool)
    assert errors == 0 and repaired != "0B", f"the scrub repaired {repaired} with {errors} errors: it did not read the ditto copy"
    assert cksum_of(oxzfs, pool, "d0")[0] > 0
    assert scrub_done(oxzfs, pool) == ("0B", 0), "a second scrub must find nothing to repair"
    mnt = oxzfs.zfs("get", "-H", "-o", "value", "mountpoint", pool, check=True).stdout.strip()
    with open(os.path.join(mnt, "f"), "rb") as f:
        assert f.read() == block * 120
    assert oxzfs.export(pool).returncode == 0
    assert side(d0) == side(d1), "the ditto copy's bad side was not rewritten"
    zdb_check(vdir, pool)
