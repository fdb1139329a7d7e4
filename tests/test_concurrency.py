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

from test_write import make_devs, new_pool, zdb_check

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools")

# One worker: rounds of the workload in fresh subtrees of ROOT until DEADLINE; the models, with
# the subtree each belongs to, go to OUT as JSON. Only the last KEEP rounds' subtrees stay (the
# older ones are removed, through the mount too): a fast machine runs enough rounds in the 20
# seconds to fill the pool otherwise, and the workload's writes would meet ENOSPC.
WORKER = r"""
import json, os, shutil, sys, time
sys.path.insert(0, sys.argv[1])
import workload
root, seed, deadline, out = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
KEEP = 3
models = []
rnd = 0
while time.time() < deadline:
    sub = os.path.join(root, f"r{rnd}")
    os.mkdir(sub)
    model = workload.run(sub, seed * 1000 + rnd, 60)
    models.append((f"r{rnd}", model.to_json()))
    if len(models) > KEEP:
        old, _ = models.pop(0)
        shutil.rmtree(os.path.join(root, old))
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
try:
    # a writer that starts after the others filled the pool meets ENOSPC at create already
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
except OSError as e:
    print(0, e.errno)
    sys.exit(0)
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
    vdir, alt, root = new_pool(oxzfs, pool, "fill", 1, size_mib=128)
    procs = [subprocess.Popen([sys.executable, "-c", FILLER, os.path.join(root, f"f{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    written = []
    for p in procs:
        o, e = p.communicate(timeout=600)
        assert p.returncode == 0, e
        n, err = map(int, o.split())
        assert err == errno.ENOSPC, f"a writer ended with {errno.errorcode.get(err, err)} after {n} bytes"
        written.append(n)
    total = sum(written)
    # 128 MiB: OpenZFS's slop is 32 MiB at least; most of the rest was usable.
    assert 40 << 20 <= total <= 96 << 20, total
    # free the biggest file (a writer that started late may have written nothing)
    os.unlink(os.path.join(root, f"f{written.index(max(written))}"))
    with open(os.path.join(root, "after"), "wb") as f:
        f.write(os.urandom(1 << 20))
        os.fsync(f.fileno())
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)

# A sequential reader: read PATH in 1 MiB reads, over and over until DEADLINE, and check that
# every 128 KiB block is one whole version of that block (the writer's 4 KiB pages carry their
# block, page and version; a block is written by one request, so a read sees it before or
# after, never half); prints how many passes it made. O_DIRECT: every read reaches the file
# system (the kernel's page cache gives no atomicity against a concurrent write of a page).
READER = r"""
import mmap, os, sys, time
path, deadline, nblocks = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
passes = 0
buf = mmap.mmap(-1, 1 << 20)
while time.time() < deadline:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    off = 0
    while True:
        n = os.preadv(fd, [buf], off)
        if n == 0:
            break
        b = bytes(buf[:n])
        for p in range(0, n, 4096):
            page, pos = b[p:p + 4096], off + p
            blk, pg, ver = (int.from_bytes(page[i:i + 8], "little") for i in (0, 8, 16))
            if pg == 0:
                block_ver = ver
            want = bytes([(blk * 31 + pg * 7 + ver) % 251]) * (4096 - 24)
            if (blk, pg, ver) != (pos >> 17, (pos >> 12) & 31, block_ver) or page[24:] != want:
                print(f"bad page at {pos}: block {blk} page {pg} version {ver} (page 0 had {block_ver})", file=sys.stderr)
                sys.exit(1)
        off += n
    os.close(fd)
    assert off == nblocks << 17, off
    passes += 1
print(passes)
"""


def page_bytes(blk, pg, ver):
    head = blk.to_bytes(8, "little") + pg.to_bytes(8, "little") + ver.to_bytes(8, "little")
    return head + bytes([(blk * 31 + pg * 7 + ver) % 251]) * (4096 - 24)


def block_bytes(blk, ver):
    return b"".join(page_bytes(blk, pg, ver) for pg in range(32))


def test_sequential_readers_while_the_file_is_rewritten_and_synced(oxzfs):
    """Reads ahead (prefetch) and reads outside the pool lock race rewrites of the same file,
    each followed by an fsync (a txg), so the blocks a read planned may be freed and reused:
    readers must only ever see whole versions of each page, the pool must count no error, and
    zdb and the re-imported file must agree with the writer's model."""
    import random
    pool = "wseqrd"
    vdir, alt, _ = new_pool(oxzfs, pool, "seqread", 1, size_mib=256)
    path = os.path.join(alt, pool, "big")
    nblocks = 96
    versions = [0] * nblocks
    with open(path, "wb") as f:
        for blk in range(nblocks):
            f.write(block_bytes(blk, 0))
        os.fsync(f.fileno())
    deadline = time.time() + 15
    readers = [subprocess.Popen([sys.executable, "-c", READER, path, str(deadline), str(nblocks)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    rng = random.Random(7)
    fd = os.open(path, os.O_WRONLY)
    writes = 0
    while time.time() < deadline:
        blk = rng.randrange(nblocks)
        versions[blk] += 1
        os.pwrite(fd, block_bytes(blk, versions[blk]), blk << 17)
        writes += 1
        if writes % 4 == 0:
            os.fsync(fd)
            # A pause with the file clean: reads then plan from the synced tree and read ahead,
            # and the next rewrites and syncs free the blocks those plans name.
            time.sleep(0.02)
    os.close(fd)
    for p in readers:
        o, e = p.communicate(timeout=900)
        assert p.returncode == 0, f"a reader saw a torn or foreign page:\n{e[-3000:]}"
        assert int(o.strip()) > 0, "a reader finished no pass"
    r = oxzfs.zpool("status", "-v", pool, check=True)
    assert "No known data errors" in r.stdout, repr(r)
    for ln in r.stdout.splitlines():
        cols = ln.split()
        if len(cols) == 5 and cols[1] == "ONLINE":
            assert cols[2:] == ["0", "0", "0"], f"errors counted while reading:\n{r.stdout}"
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = oxzfs.import_ro(vdir, pool, alt)
    assert r.returncode == 0, repr(r)
    with open(os.path.join(alt, pool, "big"), "rb") as f:
        for blk in range(nblocks):
            assert f.read(1 << 17) == block_bytes(blk, versions[blk]), f"block {blk} is not version {versions[blk]}"
    assert oxzfs.export(pool).returncode == 0
