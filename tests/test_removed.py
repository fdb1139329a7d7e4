"""A device that goes away under a running pool: OpenZFS's REMOVED state.

A vdev file moved out of its directory while the daemon serves the pool is what a pulled USB disk
is to OpenZFS: the leaf goes REMOVED (no I/O to it; the txgs it misses go into its DTL; its config
says `removed = 1`, as vdev_config_generate writes it), the pool DEGRADED with OpenZFS's text for
ZPOOL_STATUS_REMOVED_DEV, and writes go on. Moved back, it is found again (zed's auto-online),
resilvered of only what it missed, and then holds every byte; a scrub repairs nothing and
OpenZFS's `zdb -bcc` is clean. A pool without redundancy loses its only device the way OpenZFS's
does: UNAVAIL, suspended at its next sync (failmode=wait), `zpool clear` refused while the device
is absent, and everything synced before still there at the next import."""
import errno
import hashlib
import os
import random
import re
import subprocess
import threading
import time

import manifest as manifest_mod
from conftest import status_rows
from test_gang import digest as file_hash
from test_resilver import resilvered, state_of, status, write_more
from test_scrub import alone, check_reads, import_rw, new_pool, scrub_done
from test_write import ZDB, make_devs, zdb_check

REMOVED_TEXT = ("status: One or more devices has been removed by the administrator.\n"
                "\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\n"
                "action: Online the device using zpool online' or replace the device with\n\t'zpool replace'.\n")
SUSPENDED_TEXT = ("status: One or more devices are faulted in response to IO failures.\n"
                  "action: Make sure the affected devices are connected, then run 'zpool clear'.\n"
                  "   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-HC\n")
# What each wait below allows: the daemon looks at its devices every half second.
WAIT_S = 15


def wait_for(what, cond, oxzfs, pool):
    """Poll `zpool status POOL` until COND(text) holds (at most WAIT_S seconds): the text."""
    deadline = time.time() + WAIT_S
    while True:
        text = oxzfs.zpool("status", pool).stdout
        if cond(text):
            return text
        assert time.time() < deadline, f"{what} not seen within {WAIT_S} s:\n{text}"
        time.sleep(0.1)


def dev_state(text, dev):
    rows = status_rows(text)
    mine = [v[0] for k, v in rows.items() if k == dev or k.endswith("/" + dev)]
    return mine[0] if mine else None


class Writer:
    """Writes numbered files of 128 KiB of seeded random bytes into DIR, one every 50 ms, until
    stopped; keeps the digest of each file it finished and any error it met."""

    def __init__(self, d):
        self.d, self.done, self.errors = d, {}, []
        self.stop = threading.Event()
        os.makedirs(d, exist_ok=True)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        rng = random.Random(4242)
        i = 0
        while not self.stop.is_set():
            data = rng.randbytes(128 << 10)
            name = f"w{i:05d}.bin"
            try:
                with open(os.path.join(self.d, name), "wb") as f:
                    f.write(data)
            except OSError as e:
                self.errors.append(f"{name}: {e}")
                return
            self.done[name] = hashlib.sha256(data).hexdigest()
            i += 1
            time.sleep(0.05)

    def count(self):
        return len(self.done)

    def wait_more(self, n):
        """Wait until N more files than now are written (bounded)."""
        want = self.count() + n
        deadline = time.time() + WAIT_S
        while self.count() < want:
            assert not self.errors, f"the writer failed: {self.errors}"
            assert time.time() < deadline, f"the writer wrote {self.count()} files, not {want}, in {WAIT_S} s"
            time.sleep(0.05)

    def finish(self):
        self.stop.set()
        self.t.join(30)
        assert not self.t.is_alive(), "the writer did not stop"
        assert not self.errors, f"the writer failed: {self.errors}"

    def check(self):
        for name, want in self.done.items():
            got = file_hash(os.path.join(self.d, name))
            assert got == want, f"{name} reads differently from what was written"


def label_text(dev):
    """DEV's labels as OpenZFS's zdb -l prints them."""
    r = subprocess.run([ZDB, "-l", dev], capture_output=True, text=True, errors="replace", timeout=60)
    assert r.returncode == 0, f"zdb -l {dev} failed:\n{r.stdout}{r.stderr}"
    return r.stdout


def test_a_mirror_side_moved_away_is_removed_and_back_resilvered(oxzfs):
    pool = "rmmirror"
    vdir, alt, _ = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 31)
    d0, d1, away = os.path.join(vdir, "d0"), os.path.join(vdir, "d1"), os.path.join(vdir, "..", "d1.away")
    import_rw(oxzfs, vdir, pool, alt)
    root = os.path.join(alt, pool)
    write_more(alt, pool, "before.bin", 7, 6)
    oxzfs.zpool("sync", pool, check=True)
    before_mib = 12  # the fill (about 6 MiB) and before.bin
    w = Writer(os.path.join(root, "writer"))
    w.wait_more(4)

    # Away (out of the directory the pool's devices are in): REMOVED within a bounded wait.
    written_at_move = w.count()
    os.rename(d1, away)
    text = wait_for("d1 REMOVED", lambda t: dev_state(t, "d1") == "REMOVED", oxzfs, pool)
    assert " state: DEGRADED\n" in text and dev_state(text, "mirror-0") == "DEGRADED", text
    assert REMOVED_TEXT in text, text
    assert re.search(r"\n\t    \S*d1 +REMOVED +0 +0 +0\n", text), text
    # status -x shows it.
    assert pool in oxzfs.zpool("status", "-x").stdout

    # Writes go on and succeed; the device is not touched meanwhile (after the sync that was
    # under way when it went).
    oxzfs.zpool("sync", pool, check=True)
    untouched = file_hash(away)
    w.wait_more(10)
    oxzfs.zpool("sync", pool, check=True)
    assert file_hash(away) == untouched, "a REMOVED device was written"
    # The other side's label records the removal, as OpenZFS writes it (ZPOOL_CONFIG_REMOVED).
    label = label_text(d0)
    assert re.search(r"\n\s*removed: 1\n", label), label

    # Back: found again, ONLINE after a resilver of what it missed.
    os.rename(away, d1)
    text = wait_for("d1 ONLINE after its resilver",
                    lambda t: dev_state(t, "d1") == "ONLINE" and "scan: resilvered" in t, oxzfs, pool)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    w.wait_more(4)
    w.finish()
    during_mib = (w.count() - written_at_move) * 128 / 1024
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    assert errors == 0 and " state: ONLINE\n" in text and dev_state(text, "d1") == "ONLINE", text
    # Only what it missed: at most what was written meanwhile (and the metadata it changed),
    # never the data it already held.
    assert 0 < done <= (during_mib + 4) * (1 << 20) and done < before_mib << 20, \
        f"resilvered {done} bytes; {during_mib} MiB written while it was away:\n{text}"
    assert not re.search(r"\n\s*removed: 1\n", label_text(d1)), "the label still records a removal"
    w.check()
    assert scrub_done(oxzfs, pool) == ("0B", 0), "a scrub after the resilver must repair nothing"
    want = manifest_mod.manifest(root)
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    # d1 alone holds every file.
    check_reads(oxzfs, alone(oxzfs, vdir, "d1", "rmmirror"), pool, alt, want)
    assert oxzfs.daemon_alive()


def test_online_and_clear_of_a_removed_side(oxzfs):
    """`zpool online` of a side still away says what OpenZFS says and leaves it REMOVED;
    `zpool clear` leaves it so too; back, `zpool online` resilvers it."""
    pool = "rmonline"
    vdir, alt, want = new_pool(oxzfs, pool, lambda d: ["mirror"] + d, 2, 32)
    d0, away = os.path.join(vdir, "d0"), os.path.join(vdir, "..", "d0.away")
    import_rw(oxzfs, vdir, pool, alt)
    os.rename(d0, away)
    wait_for("d0 REMOVED", lambda t: dev_state(t, "d0") == "REMOVED", oxzfs, pool)
    write_more(alt, pool, "while-away.bin", 8, 2)
    r = oxzfs.zpool("online", pool, "d0")
    assert (r.returncode, r.stderr) == (0, "") and r.stdout == (
        "warning: device 'd0' onlined, but remains in faulted state\n"
        "use 'zpool replace' to replace devices that are no longer present\n"), repr(r)
    r = oxzfs.zpool("clear", pool)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), repr(r)
    assert dev_state(status(oxzfs, pool), "d0") == "REMOVED"
    # Back: `online` finds it (or the probe did first), and the resilver follows.
    os.rename(away, d0)
    r = oxzfs.zpool("online", pool, "d0")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), repr(r)
    oxzfs.zpool("wait", "-t", "resilver", pool, check=True)
    text = status(oxzfs, pool)
    done, errors = resilvered(text)
    assert errors == 0 and dev_state(text, "d0") == "ONLINE" and " state: ONLINE\n" in text, text
    assert done >= 2 << 20, text
    want = manifest_mod.manifest(os.path.join(alt, pool))
    assert oxzfs.export(pool).returncode == 0
    only = alone(oxzfs, vdir, "d0", "rmonline")
    zdb_check(only, pool)
    check_reads(oxzfs, only, pool, alt, want)


def lone_pool(oxzfs, pool, name, seed):
    """A pool of one 64 MiB file device with file NAME written and synced:
    (vdev dir, altroot, the pool's root directory, the device)."""
    base = os.path.join(oxzfs.base, pool)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    (d0,) = make_devs(vdir, 1, 64)
    r = oxzfs.zpool("create", "-R", alt, pool, d0)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    write_more(alt, pool, name, seed, 2)
    oxzfs.zpool("sync", pool, check=True)
    return vdir, alt, os.path.join(alt, pool), d0


def test_a_lone_device_removed_suspends_the_pool_until_cleared_and_loses_nothing(oxzfs):
    """A one-device pool whose device goes away: UNAVAIL, and the next txg sync's writes reach
    no device, so the pool's I/O is suspended (failmode=wait) with that txg held, as OpenZFS's
    zio_suspend does. Meanwhile commands that would change the pool or wait for a sync are
    refused with OpenZFS's "pool I/O is currently suspended", an fsync fails, `zpool clear`
    fails while the device is absent. With the device back, `zpool clear` resumes the held
    sync (zio_resume): nothing written before or during the suspension is lost. Gone again,
    an export gives the held txg up: the labels keep the last synced txg, and the import finds
    everything synced."""
    pool = "rmlone"
    vdir, alt, root, d0 = lone_pool(oxzfs, pool, "synced.bin", 9)
    away = os.path.join(oxzfs.base, pool, "d0.away")

    os.rename(d0, away)
    text = wait_for("d0 REMOVED", lambda t: dev_state(t, "d0") == "REMOVED", oxzfs, pool)
    assert " state: UNAVAIL\n" in text, text
    # Written to the open txg, which cannot be synced now.
    write_more(alt, pool, "during.bin", 10, 1)
    r = oxzfs.zpool("sync", pool)
    assert r.returncode == 1 and r.stderr.startswith(f"cannot sync '{pool}': pool I/O is currently suspended"), repr(r)
    text = wait_for("the pool SUSPENDED", lambda t: " state: SUSPENDED\n" in t, oxzfs, pool)
    assert SUSPENDED_TEXT in text and dev_state(text, "d0") == "REMOVED", text
    r = oxzfs.zpool("clear", pool)
    assert (r.returncode, r.stderr) == (1, f"cannot clear errors for {pool}: I/O error\n"), repr(r)
    r = oxzfs.zfs("create", f"{pool}/new")
    assert (r.returncode, r.stderr) == (1, f"cannot create '{pool}/new': pool I/O is currently suspended\n"), repr(r)
    # An fsync cannot be answered: it fails (its data stays in the held txg's successor).
    with open(os.path.join(root, "fsynced.bin"), "wb") as f:
        f.write(random.Random(11).randbytes(200_000))
        f.flush()
        try:
            os.fsync(f.fileno())
            fsynced = True
        except OSError as e:
            fsynced = e.errno
    assert fsynced == errno.EIO, f"an fsync on a suspended pool answered {fsynced}"
    assert oxzfs.daemon_alive()
    want = manifest_mod.manifest(root)
    assert {e["path"] for e in want} >= {"synced.bin", "during.bin", "fsynced.bin"}, want

    # Back, and cleared: the held sync goes on, then the rest.
    os.rename(away, d0)
    r = oxzfs.zpool("clear", pool)
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    text = wait_for("the pool ONLINE", lambda t: " state: ONLINE\n" in t, oxzfs, pool)
    assert dev_state(text, "d0") == "ONLINE", text
    assert oxzfs.zpool("sync", pool).returncode == 0
    assert oxzfs.zfs("create", f"{pool}/new").returncode == 0
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    import_rw(oxzfs, vdir, pool, alt)
    got = manifest_mod.manifest(root)
    assert got == want, f"after the resumed sync, export and import: {got} vs {want}"
    assert os.path.isdir(os.path.join(root, "new"))

    # Gone again: the export gives the held txg up (it refuses a clean export, the txg that
    # failed is not on disk, and lets the pool go); the import finds everything synced.
    os.rename(d0, away)
    wait_for("d0 REMOVED", lambda t: dev_state(t, "d0") == "REMOVED", oxzfs, pool)
    write_more(alt, pool, "lost.bin", 12, 1)
    wait_for("the pool SUSPENDED", lambda t: " state: SUSPENDED\n" in t and oxzfs.zpool("sync", pool).returncode == 1, oxzfs, pool)
    os.rename(away, d0)
    r = oxzfs.export(pool)
    assert "pool I/O is currently suspended" in r.stderr, repr(r)
    if pool in oxzfs.imported:
        oxzfs.imported.remove(pool)
    assert pool not in oxzfs.zpool("list", "-H", "-o", "name").stdout
    zdb_check(vdir, pool)
    import_rw(oxzfs, vdir, pool, alt)
    got = {e["path"]: e for e in manifest_mod.manifest(root)}
    for e in want:
        assert got.get(e["path"]) == e, f"{e['path']} differs after the reimport: {got.get(e['path'])} vs {e}"
    text = status(oxzfs, pool)
    assert " state: ONLINE\n" in text and dev_state(text, "d0") == "ONLINE", text
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_write_faults_on_a_lone_device_suspend_until_cleared(oxzfs):
    """`zinject -e io -T write` on a one-device pool: the txg sync's writes fail and the pool's
    I/O is suspended with the txg held. A `zpool clear` while the fault lasts resumes the
    sync, which fails again: the pool stays suspended and the clear says so. Once the
    handler is gone, `zpool clear` resumes it for good; what was written meanwhile is on
    disk after an export and import, zdb clean."""
    pool = "zisusp"
    vdir, alt, root, d0 = lone_pool(oxzfs, pool, "before.bin", 21)
    r = oxzfs.run("zinject", "-d", d0, "-e", "io", "-T", "write", pool)
    assert r.returncode == 0, repr(r)
    write_more(alt, pool, "during.bin", 22, 2)
    def suspended(text):
        oxzfs.zpool("sync", pool)  # (asks for the sync that meets the fault)
        return " state: SUSPENDED\n" in text
    text = wait_for("the pool SUSPENDED", suspended, oxzfs, pool)
    assert SUSPENDED_TEXT in text, text
    r = oxzfs.zpool("clear", pool)
    assert r.returncode == 1 and r.stderr.startswith(f"cannot clear errors for {pool}: I/O error (pool I/O is currently suspended"), repr(r)
    assert " state: SUSPENDED\n" in status(oxzfs, pool)
    want = manifest_mod.manifest(root)
    assert oxzfs.run("zinject", "-c", "all").returncode == 0
    r = oxzfs.zpool("clear", pool)
    assert (r.returncode, r.stderr) == (0, ""), repr(r)
    text = status(oxzfs, pool)
    assert " state: ONLINE\n" in text and "errors: No known data errors" in text, text
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    import_rw(oxzfs, vdir, pool, alt)
    assert manifest_mod.manifest(root) == want
    assert oxzfs.export(pool).returncode == 0
