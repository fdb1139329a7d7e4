"""Self-healing of ditto copies (copies=2) on one disk, judged by the device bytes.

Each data block of a file system with copies=2 has two DVAs on the one disk. One of the two
copies of every block of a file is overwritten (found with OpenZFS's zdb -dddddd on the
exported pool); both copies of one block of another file are. A normal read returns the right
bytes and rewrites each bad copy it met; a scrub repairs the rest (its "repaired" figure is what
was left), shows "(repairing)" beside the leaf while it does, and counts the block beyond
redundancy as an error, which `zpool status` without -v sums up as OpenZFS does. Afterwards both
copies of every block hold the same bytes, a second scrub repairs nothing, and zdb -bcc is clean."""
import os
import random
import re
import shutil
import subprocess
import time

import manifest as manifest_mod
from test_damage import LABELS_FRONT, SECTOR
from test_scrub import import_rw, read_fails, scan_line, scrub_done
from test_resilver import nice_to_bytes
from test_write import ZDB, make_devs, zdb_check

RECORD = 128 << 10


def ditto_blocks(vdir, pool, *objs):
    """For each object of OBJS of POOL's root file system, [(DVA[0] offset, DVA[1] offset)] of
    its level-0 blocks in file order, as OpenZFS's zdb -dddddd prints them (every DVA from six
    d's on)."""
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-dddddd", f"{pool}/", *map(str, objs)], capture_output=True, text=True, errors="replace")
    out = []
    for part in re.split(r"^ +Object +lvl ", r.stdout, flags=re.M)[1:]:
        rows = re.findall(r"^\s+[0-9a-f]+\s+L0 0:([0-9a-f]+):20000 0:([0-9a-f]+):20000 20000L/20000P ", part, re.M)
        out.append([(int(a, 16), int(b, 16)) for a, b in rows])
    assert r.returncode == 0 and len(out) == len(objs) and all(out), \
        f"zdb -dddddd {pool}/ {objs}: no level-0 blocks with two DVAs:\n{r.stdout[-3000:]}{r.stderr}"
    return out


def copy_at(dev, off):
    """The RECORD bytes at DVA offset OFF of device DEV (past its labels and boot area)."""
    with open(dev, "rb") as f:
        f.seek(LABELS_FRONT + off)
        return f.read(RECORD)


def spoil(dev, off, rng):
    with open(dev, "r+b") as f:
        f.seek(LABELS_FRONT + off + SECTOR)
        f.write(rng.randbytes(SECTOR))


def test_ditto_copies_heal_on_read_and_by_scrub(oxzfs):
    pool = "healditto"
    base = os.path.join(oxzfs.base, pool)
    shutil.rmtree(base, ignore_errors=True)
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    (d0,) = make_devs(vdir, 1, 64)
    r = oxzfs.zpool("create", "-O", "copies=2", "-R", alt, pool, d0)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    rng = random.Random(13)
    data = rng.randbytes(16 * RECORD)
    root = os.path.join(alt, pool)
    for name, body in (("ditto.bin", data), ("lost.bin", rng.randbytes(2 * RECORD))):
        with open(os.path.join(root, name), "wb") as f:
            f.write(body)
    objs = {n: os.stat(os.path.join(root, n)).st_ino for n in ("ditto.bin", "lost.bin")}
    assert oxzfs.export(pool).returncode == 0
    blocks, lost = ditto_blocks(vdir, pool, objs["ditto.bin"], objs["lost.bin"])
    assert len(blocks) == 16 and all(copy_at(d0, a) == copy_at(d0, b) == data[i * RECORD:(i + 1) * RECORD]
                                      for i, (a, b) in enumerate(blocks)), "the two copies differ from what was written"
    # One copy of each block of ditto.bin spoiled, DVA[0] and DVA[1] in turn; both copies of
    # lost.bin's first block.
    for i, dvas in enumerate(blocks):
        spoil(d0, dvas[i % 2], rng)
    for off in lost[0]:
        spoil(d0, off, rng)

    def bad_copies():
        return sum(copy_at(d0, off) != data[i * RECORD:(i + 1) * RECORD] for i, dvas in enumerate(blocks) for off in dvas)

    import_rw(oxzfs, vdir, pool, alt)
    with open(os.path.join(root, "ditto.bin"), "rb") as f:
        assert f.read() == data, "a read of a file with one good copy of each block returned other bytes"
    # Each read takes one copy (OpenZFS picks one at random) and rewrites it if it was bad.
    left = bad_copies()
    assert left < 16, "the reads rewrote none of the bad copies they met"
    read_fails(os.path.join(root, "lost.bin"))
    text = oxzfs.zpool("status", pool, check=True).stdout
    assert text.endswith("\nerrors: 1 data errors, use '-v' for a list\n"), text
    assert ("status: One or more devices has experienced an error resulting in data\n\tcorruption.  "
            "Applications may be affected.\n") in text, text

    # The scrub, slowed down by a delay on the disk: "(repairing)" beside the leaf it writes to.
    assert oxzfs.run("zinject", "-d", d0, "-D", "5:1", pool).returncode == 0
    # (Short turns, so that status gets its turn between them.)
    assert oxzfs.run("tunable", "zfs_scrub_min_time_ms=100").returncode == 0
    try:
        assert oxzfs.zpool("scrub", pool).returncode == 0
        seen, deadline = None, time.time() + 60
        while time.time() < deadline:
            text = oxzfs.zpool("status", pool, check=True).stdout
            if "scan: scrub in progress since " not in text:
                break
            if re.search(r"^\t  \S*d0 +ONLINE +\d+ +\d+ +\d+  \(repairing\)$", text, re.M):
                seen = text
                break
            time.sleep(0.05)
    finally:
        assert oxzfs.run("zinject", "-c", "all").returncode == 0
        assert oxzfs.run("tunable", "zfs_scrub_min_time_ms=1000").returncode == 0
    assert seen, f"no (repairing) beside d0 while the scrub repaired {left} copies:\n{text}"
    assert oxzfs.zpool("wait", "-t", "scrub", pool).returncode == 0
    m = re.match(r"scrub repaired (\S+) in \d\d:\d\d:\d\d with (\d+) errors on ", scan_line(oxzfs, pool))
    assert m, scan_line(oxzfs, pool)
    # What the reads left, one record a copy, and the one block beyond redundancy as an error.
    assert (nice_to_bytes(m.group(1)), int(m.group(2))) == (left * RECORD, 1), (scan_line(oxzfs, pool), left)
    assert "(repairing)" not in oxzfs.zpool("status", pool, check=True).stdout
    assert bad_copies() == 0, "copies still differ from what was written after the scrub"
    assert scrub_done(oxzfs, pool) == ("0B", 1)
    os.unlink(os.path.join(root, "lost.bin"))
    want = manifest_mod.manifest(root)
    assert oxzfs.export(pool).returncode == 0
    assert bad_copies() == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    assert manifest_mod.manifest(root) == want
    assert oxzfs.export(pool).returncode == 0

