"""`zfs rename` of file systems: within a parent, across parents (space and reservations move
with them, as dsl_dir_rename_sync moves them), with -p; mounts follow; OpenZFS's refusals and
messages; OpenZFS's zdb finds the tree it expects, the accounting invariants hold in the phys
it decodes, and no leaks."""
import os
import random

from test_reservation import check_accounting, dsl_state
from test_write import new_pool, zdb_check

M = 1 << 20


def data(n, seed):
    return random.Random(seed).randbytes(n)


def write(path, n, seed):
    with open(path, "wb") as f:
        f.write(data(n, seed))


def names(ox, pool):
    r = ox.zfs("list", "-H", "-o", "name", "-r", pool)
    assert r.returncode == 0, repr(r)
    return set(r.stdout.split())


def test_rename_moves_tree_space_and_mounts(oxzfs):
    pool = "ren"
    vdir, alt, root = new_pool(oxzfs, pool, "ren", 2, size_mib=256)
    for ds, opts in [("a", []), ("a/b", []), ("a/b/c", []), ("r", ["-o", "reservation=20M"]),
                     ("q", ["-o", "quota=3M"]), ("keep", ["-o", "compression=off"])]:
        r = oxzfs.zfs("create", *opts, f"{pool}/{ds}")
        assert r.returncode == 0, repr(r)
    write(os.path.join(root, "a/b/file"), 3 * M + 17, 1)
    write(os.path.join(root, "a/b/c/deep"), 2 * M, 2)
    write(os.path.join(root, "r/rf"), 1 * M, 3)
    os.sync()

    # Across parents: a/b (with its child) goes under keep; its mountpoint follows.
    r = oxzfs.zfs("rename", f"{pool}/a/b", f"{pool}/keep/b2")
    assert r.returncode == 0, repr(r)
    assert not os.path.exists(os.path.join(root, "a/b")), os.listdir(os.path.join(root, "a"))
    with open(os.path.join(root, "keep/b2/file"), "rb") as f:
        assert f.read() == data((3 * M + 17), 1)
    with open(os.path.join(root, "keep/b2/c/deep"), "rb") as f:
        assert f.read() == data((2 * M), 2)
    # The renamed file system writes on; it inherits from its new parent now.
    write(os.path.join(root, "keep/b2/after"), 1 * M, 4)
    r = oxzfs.zfs("get", "-H", "-o", "value,source", "compression", f"{pool}/keep/b2")
    assert r.stdout.split("\t") == ["off", f"inherited from {pool}/keep\n"], repr(r)

    # Same parent, with a reservation; then -p into parents that do not exist yet.
    assert oxzfs.zfs("rename", f"{pool}/r", f"{pool}/r2").returncode == 0
    r = oxzfs.zfs("rename", f"{pool}/keep/b2/c", f"{pool}/x/y/c")
    assert r.returncode == 1 and r.stderr == f"cannot create '{pool}/x/y/c': parent does not exist\n", repr(r)
    r = oxzfs.zfs("rename", "-p", f"{pool}/keep/b2/c", f"{pool}/x/y/c")
    assert r.returncode == 0, repr(r)
    with open(os.path.join(root, "x/y/c/deep"), "rb") as f:
        assert f.read() == data((2 * M), 2)

    # OpenZFS's refusals.
    refusals = [
        ([f"{pool}/keep", f"{pool}/keep/z"], f"cannot rename to '{pool}/keep/z': New dataset name cannot be a descendant of current dataset name\n"),
        ([f"{pool}/keep", f"{pool}/a"], f"cannot rename '{pool}/keep': dataset already exists\n"),
        ([f"{pool}/keep", f"other/keep"], f"cannot rename to 'other/keep': datasets must be within same pool\n"),
        ([f"{pool}/nope", f"{pool}/n2"], f"cannot open '{pool}/nope': dataset does not exist\n"),
        # The 4M of keep/b2 cannot move below a file system with a 3M quota.
        ([f"{pool}/keep/b2", f"{pool}/q/b2"], f"cannot rename '{pool}/keep/b2': out of space\n"),
    ]
    for args, msg in refusals:
        r = oxzfs.zfs("rename", *args)
        assert r.returncode == 1 and r.stderr == msg, (args, repr(r))
    r = oxzfs.zfs("rename", f"{pool}/a")
    assert r.returncode == 2 and r.stderr.startswith("missing target dataset argument\nusage:"), repr(r)
    r = oxzfs.zfs("rename", "-r", f"{pool}/a", f"{pool}/b")
    assert r.returncode == 2 and r.stderr.startswith("source dataset for recursive rename must be a snapshot\n"), repr(r)

    want = {pool, f"{pool}/a", f"{pool}/keep", f"{pool}/keep/b2", f"{pool}/r2", f"{pool}/q", f"{pool}/x",
            f"{pool}/x/y", f"{pool}/x/y/c"}
    assert names(oxzfs, pool) == want
    hist = oxzfs.zpool("history", pool).stdout
    assert f"zfs rename -p {pool}/keep/b2/c {pool}/x/y/c" in hist, hist

    assert oxzfs.export(pool).returncode == 0
    # Export takes the default mountpoint's directory away, as zpool_disable_datasets does.
    assert not os.path.exists(root), os.listdir(alt)
    zdb_check(vdir, pool)
    state = dsl_state(vdir, pool)
    assert {n for n in state if "$" not in n} == want
    check_accounting(state)
    # The reservation moved with r2 and is still charged to the root.
    assert state[f"{pool}/r2"]["reserved"] == 20 * M
    assert state[pool]["child_rsrv"] >= 20 * M - state[f"{pool}/r2"]["used"]

    # Back in: the tree and content as left.
    r = oxzfs.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    with open(os.path.join(root, "keep/b2/after"), "rb") as f:
        assert f.read() == data(M, 4)
    with open(os.path.join(root, "r2/rf"), "rb") as f:
        assert f.read() == data(M, 3)
    assert oxzfs.export(pool).returncode == 0
