"""`zpool trim` and autotrim: the free space of a pool of files goes back to the host file system
(each device file's allocated blocks shrink by about what was deleted), and nothing the pool
still holds is touched: OpenZFS's zdb -bcc reads every block of the pool afterwards and finds
no checksum error and no leak (a live block punched out reads as zeros and fails its
checksum), and the files read back whole after an export and import. The state of a trim is
where OpenZFS keeps it (the leaf ZAP's org.zfsonlinux:vdev_trim_* entries, which zdb shows),
survives an export, and `zpool status -t` prints it as OpenZFS 2.1 does."""
import hashlib
import os
import re
import subprocess
import time

import pytest

from test_write import make_devs, zdb_check, zdb_cmd

CTIME = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"


def allocated(path):
    return os.stat(path).st_blocks * 512


def write_random(path, mib):
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(mib):
            b = os.urandom(1 << 20)
            h.update(b)
            f.write(b)
    return h.hexdigest()


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def leaf_trim_zaps(vdir, pool):
    """Per leaf ZAP of the exported pool (zdb -C), its org.zfsonlinux:vdev_trim_* entries as
    zdb -dddd prints them."""
    head, env = zdb_cmd()
    cfg = subprocess.run(head + ["-e", "-p", vdir, "-C", pool], capture_output=True, text=True, env=env).stdout
    out = {}
    for obj in re.findall(r"com\.delphix:vdev_zap_leaf: (\d+)", cfg):
        text = subprocess.run(head + ["-e", "-p", vdir, "-dddd", pool, obj], capture_output=True, text=True, env=env).stdout
        out[int(obj)] = dict(re.findall(r"org\.zfsonlinux:(vdev_trim_\w+|next_offset_to_trim) = (\d+)", text))
    return out


def leaf_rows(status, devs):
    return [ln for ln in status.splitlines() if any(ln.strip().startswith(d + " ") for d in devs)]


def fill_and_free(oxzfs, pool, mnt, gone_mib=48):
    """Files that stay (their digests), then a big one deleted and its frees past the two
    deferred txgs, so that its space is free to trim."""
    keep = {f"keep{i}": write_random(os.path.join(mnt, f"keep{i}"), 2) for i in range(4)}
    write_random(os.path.join(mnt, "gone"), gone_mib)
    assert oxzfs.zpool("sync", pool).returncode == 0
    return keep


def drop(oxzfs, pool, mnt):
    os.unlink(os.path.join(mnt, "gone"))
    for i in range(4):
        with open(os.path.join(mnt, f"tick{i}"), "w") as f:
            f.write("x")
        assert oxzfs.zpool("sync", pool).returncode == 0


@pytest.mark.parametrize("layout", ["single", "mirror", "raidz1", "raidz2"])
def test_trim_gives_the_free_space_back(oxzfs, layout):
    pool = f"tr{layout}"
    vdir = os.path.join(oxzfs.base, pool)
    n = {"single": 1, "mirror": 2, "raidz1": 3, "raidz2": 4}[layout]
    devs = make_devs(vdir, n, 192)
    mnt = os.path.join(oxzfs.base, pool + "-mnt")
    spec = devs if layout == "single" else [layout, *devs]
    r = oxzfs.zpool("create", "-m", mnt, pool, *spec)
    assert r.returncode == 0, r
    oxzfs.imported.append(pool)
    keep = fill_and_free(oxzfs, pool, mnt)
    before = [allocated(d) for d in devs]
    drop(oxzfs, pool, mnt)
    r = oxzfs.zpool("status", "-t", pool)
    for row in leaf_rows(r.stdout, devs):
        assert row.endswith("  (untrimmed)"), r.stdout
    r = oxzfs.zpool("trim", "-w", pool)
    assert (r.returncode, r.stderr) == (0, ""), r
    after = [allocated(d) for d in devs]
    # Every copy of every block still there: a scrub reads each side and column, and finds
    # nothing to repair (zdb below would not see a bad copy that another copy covers).
    r = oxzfs.zpool("scrub", "-w", pool)
    assert r.returncode == 0, r
    st = oxzfs.zpool("status", pool).stdout
    assert re.search(r"scan: scrub repaired 0B in \S+ with 0 errors", st), st
    for row in leaf_rows(st, devs):
        assert row.split()[1:5] == ["ONLINE", "0", "0", "0"], st
    # The 48 MiB file's share of each device (its data columns, or all of it on a mirror side).
    share = {"single": 48, "mirror": 48, "raidz1": 24, "raidz2": 24}[layout] << 20
    for d, b, a in zip(devs, before, after):
        assert b - a >= share * 0.8, f"{d}: {b} -> {a} bytes allocated on the host"
    r = oxzfs.zpool("status", "-t", pool)
    rows = leaf_rows(r.stdout, devs)
    assert len(rows) == n, r.stdout
    for row in rows:
        assert re.search(rf"  \(100% trimmed, completed at {CTIME}\)$", row), r.stdout
    # Without -t nothing is said of a trim that is not under way.
    st = oxzfs.zpool("status", pool).stdout
    assert "(trimming)" not in st and "trimmed" not in st, st
    hist = oxzfs.zpool("history", "-i", pool).stdout
    for d in devs:
        assert f"trim vdev={d} activated" in hist and f"trim vdev={d} complete" in hist, hist
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    zaps = leaf_trim_zaps(vdir, pool)
    assert len(zaps) == n, zaps
    for z in zaps.values():
        # VDEV_TRIM_COMPLETE; the offset past the last trim, labels (4 MiB) included.
        assert z.get("vdev_trim_state") == "4" and int(z["next_offset_to_trim"]) > 4 << 20, zaps
        assert abs(int(z["vdev_trim_action_time"]) - time.time()) < 600, zaps
    r = oxzfs.zpool("import", "-d", vdir, pool)
    assert r.returncode == 0, r
    for name, h in keep.items():
        assert digest(os.path.join(mnt, name)) == h, name
    assert re.search(rf"\(100% trimmed, completed at {CTIME}\)", oxzfs.zpool("status", "-t", pool).stdout)
    assert oxzfs.export(pool).returncode == 0


def test_trim_suspend_resume_cancel_and_errors(oxzfs):
    pool = "trsus"
    vdir = os.path.join(oxzfs.base, pool)
    d0, d1, c0 = make_devs(vdir, 3, 256)
    mnt = os.path.join(oxzfs.base, pool + "-mnt")
    assert oxzfs.zpool("create", "-m", mnt, pool, "mirror", d0, d1, "cache", c0).returncode == 0
    oxzfs.imported.append(pool)
    keep = fill_and_free(oxzfs, pool, mnt, gone_mib=64)
    drop(oxzfs, pool, mnt)
    # At 4 MiB/s the 200-odd MiB free take about a minute: the trim is caught under way. A
    # writer makes, fsyncs and deletes files meanwhile (the intent log allocates, the syncs
    # allocate and free): what it keeps must read back whole.
    r = oxzfs.zpool("trim", "-r", "4M", pool, d0)
    assert (r.returncode, r.stderr) == (0, ""), r
    written = {}
    stop = time.time() + 1.5
    k = 0
    while time.time() < stop:
        path = os.path.join(mnt, f"w{k}")
        data = os.urandom(4096 + (k % 7) * 33000)
        with open(path, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        if k % 3 == 2:
            os.unlink(os.path.join(mnt, f"w{k - 1}"))
            written.pop(f"w{k - 1}")
        written[f"w{k}"] = hashlib.sha256(data).hexdigest()
        k += 1
    keep.update(written)
    st = oxzfs.zpool("status", pool).stdout
    assert leaf_rows(st, [d0])[0].endswith("  (trimming)") and not leaf_rows(st, [d1])[0].endswith(")"), st
    # An export leaves it ACTIVE on disk, at its offset; the import goes on with it.
    assert oxzfs.export(pool).returncode == 0
    zaps = [z for z in leaf_trim_zaps(vdir, pool).values() if z]
    assert len(zaps) == 1 and zaps[0]["vdev_trim_state"] == "1" and int(zaps[0]["next_offset_to_trim"]) > 4 << 20, zaps
    assert oxzfs.zpool("import", "-d", vdir, pool).returncode == 0
    for name, h in keep.items():
        assert digest(os.path.join(mnt, name)) == h, name
    time.sleep(0.5)
    st = oxzfs.zpool("status", "-t", pool).stdout
    m = re.search(rf"  \((\d+)% trimmed, started at {CTIME}\)$", leaf_rows(st, [d0])[0])
    assert m and int(m.group(1)) < 100, st
    assert leaf_rows(st, [d1])[0].endswith("  (untrimmed)"), st
    r = oxzfs.zpool("trim", pool, d0)
    assert (r.returncode, r.stderr) == (255, f"cannot trim '{d0}': currently trimming\n"), r
    r = oxzfs.zpool("trim", "-s", pool, d0)
    assert (r.returncode, r.stderr) == (0, ""), r
    st = oxzfs.zpool("status", "-t", pool).stdout
    m = re.search(rf"  \((\d+)% trimmed, suspended, started at {CTIME}\)$", leaf_rows(st, [d0])[0])
    assert m and int(m.group(1)) < 100, st
    pct = int(m.group(1))
    # Suspended is kept on disk: the import does not resume it.
    assert oxzfs.export(pool).returncode == 0
    zaps = leaf_trim_zaps(vdir, pool)
    suspended = [z for z in zaps.values() if z]
    # VDEV_TRIM_SUSPENDED, with its rate (bytes per second) and the offset it goes on from.
    assert len(suspended) == 1 and suspended[0]["vdev_trim_state"] == "3", zaps
    assert suspended[0]["vdev_trim_rate"] == str(4 << 20) and int(suspended[0]["next_offset_to_trim"]) > 4 << 20, zaps
    assert oxzfs.zpool("import", "-d", vdir, pool).returncode == 0
    time.sleep(0.5)
    st = oxzfs.zpool("status", "-t", pool).stdout
    m = re.search(rf"  \((\d+)% trimmed, suspended, started at {CTIME}\)$", leaf_rows(st, [d0])[0])
    assert m and abs(int(m.group(1)) - pct) <= 1, st
    # Resumed from its offset (at the rate it had unless given another, as OpenZFS does).
    r = oxzfs.zpool("trim", "-w", "-r", "10G", pool, d0)
    assert (r.returncode, r.stderr) == (0, ""), r
    st = oxzfs.zpool("status", "-t", pool).stdout
    assert re.search(rf"  \(100% trimmed, completed at {CTIME}\)$", leaf_rows(st, [d0])[0]), st
    # Cancel: of a trim under way it goes back to untrimmed; of none it fails.
    r = oxzfs.zpool("trim", "-r", "1M", pool, d1)
    assert r.returncode == 0, r
    # -w waits for the leaves it names only (d0 again, from its start), not for d1's slow one.
    r = oxzfs.zpool("trim", "-w", pool, d0)
    assert (r.returncode, r.stderr) == (0, ""), r
    st = oxzfs.zpool("status", "-t", pool).stdout
    assert re.search(rf"  \(100% trimmed, completed at {CTIME}\)$", leaf_rows(st, [d0])[0]), st
    assert re.search(rf"  \(\d+% trimmed, started at {CTIME}\)$", leaf_rows(st, [d1])[0]), st
    r = oxzfs.zpool("trim", "-c", pool, d1)
    assert (r.returncode, r.stderr) == (0, ""), r
    st = oxzfs.zpool("status", "-t", pool).stdout
    assert leaf_rows(st, [d1])[0].endswith("  (untrimmed)"), st
    for args, msg in (
        (("-c", pool, d1), f"cannot trim '{d1}': there is no active trim\n"),
        (("-s", pool, d0), f"cannot trim '{d0}': there is no active trim\n"),
        ((pool, "nosuch"), "cannot trim 'nosuch': no such device in pool\n"),
        ((pool, "mirror-0"), "cannot trim 'mirror-0': invalid device\n"),
        ((pool, c0), f"cannot trim '{c0}': device is in use as a cache\n"),
        (("-d", pool, d0), f"cannot trim '{d0}': trim operations are not supported by this device\n"),
        (("-d", pool), f"cannot trim '{d0}': trim operations are not supported by this device\n"
                       f"cannot trim '{d1}': trim operations are not supported by this device\n"),
    ):
        r = oxzfs.zpool("trim", *args)
        assert (r.returncode, r.stderr) == (255, msg), (args, r)
    usage = "usage:\n\ttrim [-dw] [-r <rate>] [-c | -s] <pool> [<device> ...]\n"
    for args, msg in (
        ((), "missing pool name argument\n"),
        (("-c", "-s", pool), "-s cannot be combined with other options\n"),
        (("-s", "-c", pool), "-c cannot be combined with other options\n"),
        (("-c", "-d", pool), "-d cannot be combined with the -c or -s options\n"),
        (("-s", "-r", "1M", pool), "-r cannot be combined with the -c or -s options\n"),
        (("-w", "-s", pool), "-w cannot be used with -c or -s\n"),
        (("-r", "fast", pool), "invalid value for rate\n"),
        (("-x", pool), "invalid option 'x'\n"),
    ):
        r = oxzfs.zpool("trim", *args)
        assert (r.returncode, r.stderr) == (2, msg + usage), (args, r)
    r = oxzfs.zpool("trim", "nosuchpool")
    assert (r.returncode, r.stderr) == (255, "cannot open 'nosuchpool': no such pool\n"), r
    hist = oxzfs.zpool("history", "-i", pool).stdout
    for what in ("activated", "suspended", "complete", "canceled"):
        assert re.search(rf"trim vdev=/\S+ {what}", hist), (what, hist)
    checked_after_export(oxzfs, pool, vdir, mnt, keep)


def checked_after_export(oxzfs, pool, vdir, mnt, keep):
    """Exported, zdb finds every block whole and nothing leaked; imported again, the files that
    stayed read back as written; exported."""
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert oxzfs.zpool("import", "-d", vdir, pool).returncode == 0
    for name, h in keep.items():
        assert digest(os.path.join(mnt, name)) == h, name
    assert oxzfs.export(pool).returncode == 0


def test_autotrim(oxzfs):
    pool = "trauto"
    vdir = os.path.join(oxzfs.base, pool)
    (d0,) = make_devs(vdir, 1, 192)
    mnt = os.path.join(oxzfs.base, pool + "-mnt")
    assert oxzfs.run("tunable", "zfs_trim_txg_batch=1").returncode == 0
    try:
        assert oxzfs.zpool("create", "-o", "autotrim=on", "-m", mnt, pool, d0).returncode == 0
        oxzfs.imported.append(pool)
        assert oxzfs.zpool("get", "-H", "-o", "value", "autotrim", pool).stdout == "on\n"
        keep = fill_and_free(oxzfs, pool, mnt)
        before = allocated(d0)
        drop(oxzfs, pool, mnt)
        deadline = time.time() + 30
        while allocated(d0) > before - (40 << 20) and time.time() < deadline:
            assert oxzfs.zpool("sync", pool).returncode == 0
            time.sleep(0.3)
        assert allocated(d0) <= before - (40 << 20), (before, allocated(d0))
        # Autotrim keeps no state: the manual one stays untrimmed.
        assert leaf_rows(oxzfs.zpool("status", "-t", pool).stdout, [d0])[0].endswith("  (untrimmed)")
        # Off: what is freed now stays allocated on the host.
        assert oxzfs.zpool("set", "autotrim=off", pool).returncode == 0
        write_random(os.path.join(mnt, "gone"), 32)
        assert oxzfs.zpool("sync", pool).returncode == 0
        before = allocated(d0)
        drop(oxzfs, pool, mnt)
        time.sleep(1)
        assert oxzfs.zpool("sync", pool).returncode == 0
        assert allocated(d0) > before - (8 << 20), (before, allocated(d0))
        checked_after_export(oxzfs, pool, vdir, mnt, keep)
    finally:
        oxzfs.run("tunable", "zfs_trim_txg_batch=32")
