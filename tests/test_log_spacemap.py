"""Pools with OpenZFS's log space maps (feature com.delphix:log_spacemap, active on every pool
OpenZFS 2.x made and synced): each txg's allocations and frees of all metaslabs sit in one
pool-wide log space map until the metaslabs are flushed. oxzfs imports such a pool read-write:
it replays the logs into its allocator (never handing out space they hold, never losing space
they freed), flushes every metaslab at its first txg and frees the logs, which OpenZFS's
libzpool (zhack) and zdb accept afterwards."""
import os
import re
import subprocess

from test_removal import ZDB, feature_refcount, tree_sums, zdb_check, zhack_rw
from test_write import make_devs

LOG_SM = "com.delphix:log_spacemap"


def zdb_m(vdir, pool):
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-mmm", pool], capture_output=True, text=True, errors="replace",
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def log_space_maps(text):
    """The log space maps zdb -m lists: {txg: length in bytes}."""
    return {int(t): int(n, 16) for t, n in re.findall(r"^Log Spacemap object \d+ txg (\d+)\nspace map object \d+:\n  smp_length = (0x[0-9a-f]+)$", text, re.M)}


def unflushed(text):
    return [int(t) for t in re.findall(r"^\tunflushed txg=(\d+)$", text, re.M)]


def write_files(root, want, names, size):
    for n in names:
        want[n] = os.urandom(size)
        with open(os.path.join(root, n), "wb") as f:
            f.write(want[n])


def test_log_spacemap_pool_round_trip(oxzfs):
    """A pool whose log space maps OpenZFS wrote (log_spacemap enabled by zhack, activated by
    libzpool's next read-write import, which leaves a log with unflushed changes behind):
    oxzfs imports it read-write, deletes and writes files, exports; zdb
    -bcc finds no leak and no double allocation, no log space map is left, every metaslab
    is flushed (unflushed txg 0) and the feature stays active; libzpool imports it read-write
    again and we read every file back, and retire its logs once more."""
    pool = "logsm"
    base = os.path.join(oxzfs.base, "rt")
    vdir, alt = os.path.join(base, "vdevs"), os.path.join(base, "alt")
    devs = make_devs(vdir, 2, 64)
    root = os.path.join(alt, pool)
    oxzfs.zpool("create", "-o", "feature@log_spacemap=enabled", "-R", alt, pool, *devs, check=True)
    oxzfs.imported.append(pool)
    want = {}
    write_files(root, want, [f"a{i}" for i in range(12)], 512 << 10)
    assert oxzfs.export(pool).returncode == 0
    # The next libzpool import syncs with the feature enabled: the first log space map.
    zhack_rw(vdir, "feature", "enable", pool, "com.example:logsm_on")
    assert feature_refcount(vdir, pool, LOG_SM) == 1
    text = zdb_m(vdir, pool)
    logs = log_space_maps(text)
    assert logs and max(logs.values()) > 0, text[-3000:]
    assert any(unflushed(text)), text[-3000:]
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert tree_sums(root) == want
    # Free some, then write more than was freed.
    for n in [f"a{i}" for i in range(0, 12, 2)]:
        os.unlink(os.path.join(root, n))
        del want[n]
    oxzfs.zpool("sync", pool, check=True)
    write_files(root, want, [f"b{i}" for i in range(10)], 512 << 10)
    assert oxzfs.export(pool).returncode == 0
    text = zdb_check(vdir, pool)
    assert "space map refcount mismatch" not in text, text[-3000:]
    text = zdb_m(vdir, pool)
    assert log_space_maps(text) == {} and set(unflushed(text)) == {0}, text[-3000:]
    assert feature_refcount(vdir, pool, LOG_SM) == 1
    # OpenZFS takes it back (a log of its own again), and we read it.
    zhack_rw(vdir, "feature", "enable", pool, "com.example:logsm_back")
    assert log_space_maps(zdb_m(vdir, pool))
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    assert tree_sums(root) == want
    assert oxzfs.export(pool).returncode == 0
    # Those logs replayed and retired as well (zdb -mmm loads every space map: a range
    # allocated or freed twice would fail it).
    text = zdb_m(vdir, pool)
    assert log_space_maps(text) == {} and set(unflushed(text)) == {0}, text[-3000:]
