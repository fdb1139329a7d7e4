"""Concurrent changes through one read-write mount while txgs sync under them.

Several processes run the model-based workload (tests/tools/workload.py), each in its own
subtree, round after round for about 20 seconds, while another process fsyncs in a loop (every
fsync syncs a txg: the datasets are written while the workers go on changing the next txg).
Then the pool is exported, OpenZFS's zdb -bcc must find no errors and no leaks, and the
re-imported pool must equal every process's model.
"""
import json
import os
import subprocess
import sys
import time

from test_write import make_devs, zdb_check

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools")

# One worker: rounds of the workload in fresh subtrees of ROOT until DEADLINE; the models, with
# the subtree each belongs to, go to OUT as JSON.
WORKER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import workload
root, seed, deadline, out = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
models = []
rnd = 0
while time.time() < deadline:
    sub = os.path.join(root, f"r{rnd}")
    os.mkdir(sub)
    model = workload.run(sub, seed * 1000 + rnd, 60)
    models.append((f"r{rnd}", model.to_json()))
    rnd += 1
with open(out, "w") as f:
    json.dump(models, f)
"""

# The syncer: fsync a small file over and over until DEADLINE; prints how many.
SYNCER = r"""
import os, sys, time
path, deadline = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
n = 0
while time.time() < deadline:
    os.pwrite(fd, os.urandom(4096), (n % 64) * 4096)
    os.fsync(fd)
    n += 1
os.close(fd)
print(n)
"""


def test_concurrent_writers_while_txgs_sync(oxzfs):
    sys.path.insert(0, TOOLS)
    import workload
    pool = "wconc"
    base = os.path.join(oxzfs.base, "concurrent")
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, 3, 512)
    r = oxzfs.zpool("create", "-o", "ashift=9", "-R", alt, pool, "raidz1", *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    deadline = time.time() + 20
    procs = []
    for i in range(4):
        sub = os.path.join(root, f"p{i}")
        os.mkdir(sub)
        out = os.path.join(base, f"models-{i}.json")
        procs.append((sub, out, subprocess.Popen([sys.executable, "-c", WORKER, TOOLS, sub, str(i + 1), str(deadline), out],
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    syncer = subprocess.Popen([sys.executable, "-c", SYNCER, os.path.join(root, "fsynced"), str(deadline)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _, _, p in procs:
        o, e = p.communicate(timeout=900)
        assert p.returncode == 0, f"a workload process failed:\n{e[-4000:]}"
    o, e = syncer.communicate(timeout=900)
    assert syncer.returncode == 0, e
    assert int(o.strip()) > 0, "no fsync completed during the run"
    models = []
    for sub, out, _ in procs:
        with open(out) as f:
            for name, m in json.load(f):
                models.append((os.path.relpath(os.path.join(sub, name), root), workload.Model.from_json(m)))
    assert len(models) >= 4, "every process finished at least one round"
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    for rel, model in models:
        diffs = workload.verify(os.path.join(root, rel), model)
        assert not diffs, f"{rel}: the re-imported pool differs from the model:\n" + "\n".join(diffs[:10])
    assert oxzfs.export(pool).returncode == 0


# A filler: 1 MiB writes of incompressible data into PATH until the first error; prints the
# bytes written and the errno (0 if none).
FILLER = r"""
import os, sys
path = sys.argv[1]
chunk = os.urandom(1 << 20)
n, err = 0, 0
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
try:
    for _ in range(512):
        os.write(fd, chunk)
        n += len(chunk)
    os.fsync(fd)
except OSError as e:
    err = e.errno
os.close(fd)
print(n, err)
"""


def test_concurrent_writers_meet_a_clean_enospc(oxzfs):
    """Several writers filling a small pool together through the mount (each change worker
    checks space and changes in one step; concurrent_writers_cannot_pass_the_space_check_
    together in crates/engine tests the race itself). Every writer ends in ENOSPC (not EIO from a sync that ran out of room), the pool stays
    writable (not suspended) and exports clean, and OpenZFS's zdb finds no errors or leaks."""
    import errno
    pool = "wfill"
    base = os.path.join(oxzfs.base, "fill")
    vdir = os.path.join(base, "vdevs")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, 1, 128)
    r = oxzfs.zpool("create", "-R", alt, pool, *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    root = os.path.join(alt, pool)
    procs = [subprocess.Popen([sys.executable, "-c", FILLER, os.path.join(root, f"f{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    total = 0
    for p in procs:
        o, e = p.communicate(timeout=600)
        assert p.returncode == 0, e
        n, err = map(int, o.split())
        assert err == errno.ENOSPC, f"a writer ended with {errno.errorcode.get(err, err)} after {n} bytes"
        total += n
    # 128 MiB: OpenZFS's slop is 32 MiB at least; most of the rest was usable.
    assert 40 << 20 <= total <= 96 << 20, total
    os.unlink(os.path.join(root, "f0"))
    with open(os.path.join(root, "after"), "wb") as f:
        f.write(os.urandom(1 << 20))
        os.fsync(f.fileno())
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
