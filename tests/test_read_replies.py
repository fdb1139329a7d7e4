"""Reads of a writable mount answered from the ARC's block buffers as they are (one writev of
the blocks' pieces, zeros for holes, gathered into one buffer past 256 pieces): after an export
and import (nothing cached, the blocks come from the vdevs through the read-ahead), every byte
read back in 1 MiB reads is the byte written, holes and partial blocks included; zdb is clean."""
import os
import random

from test_write import new_pool, zdb_check


def read_all(path, size=1 << 20):
    out = bytearray()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(size)
            if not b:
                return bytes(out)
            out += b


def test_reads_after_import_match_what_was_written(oxzfs):
    pool = "wreply"
    vdir, alt, root = new_pool(oxzfs, pool, "reply", 1)
    # recordsize=1K: a 1 MiB read is 1024 blocks, more pieces than one reply sends as they are.
    r = oxzfs.zfs("create", "-o", "recordsize=1K", f"{pool}/small")
    assert r.returncode == 0, repr(r)
    rng = random.Random(7)
    want = {}
    # Data, a hole of whole records and a partial one, data again, a hole to a size past the
    # last block (zeros past the stored bytes).
    p = os.path.join(root, "holey")
    with open(p, "wb") as f:
        a = rng.randbytes(300 << 10)
        f.write(a)
        f.seek((1 << 20) + 5000)
        b = rng.randbytes(200 << 10)
        f.write(b)
        f.truncate((3 << 20) + 123)
    want[p] = a + bytes((1 << 20) + 5000 - len(a)) + b + bytes((3 << 20) + 123 - (1 << 20) - 5000 - len(b))
    # One block smaller than a record (its size rounded up to sectors, read back clipped).
    p = os.path.join(root, "tiny")
    want[p] = rng.randbytes(1000)
    # Several full records and a last partial one, and small records with holes among them.
    p = os.path.join(root, "records")
    want[p] = rng.randbytes((5 << 20) + 777)
    p = os.path.join(root, "small", "f")
    want[p] = b"".join(rng.randbytes(1024) if i % 7 else bytes(1024) for i in range(2500)) + rng.randbytes(99)
    for p, data in want.items():
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(data)
    assert oxzfs.export(pool).returncode == 0
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    for p, data in want.items():
        got = read_all(p)
        assert len(got) == len(data), (p, len(got), len(data))
        bad = next((i for i in range(0, len(data), 4096) if got[i:i + 4096] != data[i:i + 4096]), None)
        assert bad is None, f"{p}: differs from what was written at byte {bad}"
    assert oxzfs.export(pool).returncode == 0
    zdb_check(vdir, pool)
