"""The intent log, as a user meets it: changes fsync'd on a mounted pool survive a kill -9 of
the daemon through the log (not a txg sync), OpenZFS's zdb reads the chain the crash left and
finds the pool clean, a read-only import shows the pool before replay and changes nothing, a
read-write import replays the log; zfs-fuse replays a log oxzfs left on a version-23 pool and
oxzfs replays one zfs-fuse left; a log block with a bad checksum ends the chain."""
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import time

import pytest

from conftest import Oxzfs, unmount_below
import oracle_pools
from test_gang import digest as file_digest
from test_write import ZDB, make_devs, zdb_check


def tree(root):
    """{relative path: ("d",) | ("l", target) | ("f", mode, bytes)} below root."""
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("l", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("d",)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("f", os.stat(p).st_mode & 0o7777, f.read())
    return out


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def logged_workload(root, seed, nfiles=40, sizes=(100, 4096, 5000, 70000)):
    """Changes of every kind the log records, each followed by an fsync; returns the tree after
    each fsync (the last is what must survive)."""
    rng = random.Random(seed)
    snaps = []

    def snap():
        snaps.append(tree(root))

    for i in range(nfiles):
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(os.urandom(rng.choice(sizes)))
            f.flush()
            os.fsync(f.fileno())
        snap()
    os.mkdir(os.path.join(root, "d"))
    os.rename(os.path.join(root, "f1"), os.path.join(root, "d", "g1"))
    os.unlink(os.path.join(root, "f2"))
    os.link(os.path.join(root, "f3"), os.path.join(root, "d", "h3"))
    # fsync commits the changes of the file it is given (and every directory change):
    # a setattr of another file may wait for its own fsync, as in OpenZFS.
    os.truncate(os.path.join(root, "f4"), 100)
    fsync_path(os.path.join(root, "f4"))
    os.chmod(os.path.join(root, "f5"), 0o600)
    fsync_path(os.path.join(root, "f5"))
    os.symlink("some/target", os.path.join(root, "d", "sl"))
    with open(os.path.join(root, "f6"), "r+b") as f:
        f.seek(10)
        f.write(b"overwritten in place")
        f.seek(0, 2)
        f.write(os.urandom(3000))
        f.flush()
        os.fsync(f.fileno())
    fsync_path(os.path.join(root, "d"))
    fsync_path(root)
    snap()
    return snaps


def zdb_intent_log(vdir, pool):
    """OpenZFS zdb -ivv's record counts of the pool's intent logs ({} when none)."""
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-ivv", pool], capture_output=True, text=True, errors="replace", timeout=600)
    assert r.returncode == 0, f"zdb -ivv {pool} exited {r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}"
    counts = {}
    for m in re.finditer(r"^\s+(TX_[A-Z_0-9]+|Total)\s+(\d+)\s*$", r.stdout, re.M):
        counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
    return counts, r.stdout


def zil_kstat(ox):
    """`oxzfs kstat zil`, as {name: value}; the layout is the kernel's kstat file."""
    r = ox.run("kstat", "zil")
    assert r.returncode == 0, repr(r)
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["name", "type", "data"], r.stdout
    return {n: int(v) for n, t, v in (l.split() for l in lines[2:])}


def zdb_blocks(vdir, pool):
    """The log blocks zdb -iivvvvv lists: [(seq, vdev, offset)]."""
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-iiivvvvv", pool], capture_output=True, text=True, errors="replace", timeout=600)
    return [(int(m.group(1)), int(m.group(2), 16), int(m.group(3), 16))
            for m in re.finditer(r"Block seqno (\d+), [^\n]*?DVA\[0\]=<(\w+):(\w+):\w+>", r.stdout)]


def killed_and_imported(ox, vdir, alt, pool):
    """kill -9 the daemon serving POOL, then import it again (read-write: the log replays)."""
    ox.kill9()
    unmount_below(alt)
    r = ox.run("zpool", "import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)


def assert_files(root, want):
    """Every file of WANT ({name: bytes}) below ROOT holds exactly its bytes."""
    for name, data in sorted(want.items()):
        with open(os.path.join(root, name), "rb") as f:
            got = f.read()
        first = next((i for i, (x, y) in enumerate(zip(got, data)) if x != y), min(len(got), len(data)))
        assert got == data, f"{name}: {len(got)} bytes back of {len(data)}, first difference at {first}"


def crash_after_fsyncs(ox, pool, alt, devs, seed, create_opts=(), layout=("mirror",), sizes=(100, 4096, 5000, 70000)):
    r = ox.zpool("create", *create_opts, "-R", alt, pool, *layout, *devs)
    assert r.returncode == 0, repr(r)
    # No txg sync meanwhile: what survives, survives through the log.
    assert ox.run("tunable", "zfs_txg_timeout=3600").returncode == 0
    snaps = logged_workload(os.path.join(alt, pool), seed, sizes=sizes)
    ox.kill9()
    unmount_below(alt)
    return snaps


def reimport_matches(ox, pool, alt, dirs, want, what, extra=()):
    """Import the pool (read-write, `extra` options), check its files are `want`, export it and
    check it with OpenZFS's zdb."""
    r = ox.run("zpool", "import", *extra, *[a for d in dirs for a in ("-d", d)], "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    got = tree(os.path.join(alt, pool))
    bad = sorted(k for k in set(want) | set(got) if got.get(k) != want.get(k))
    assert not bad, f"{what}: {bad[:10]}"
    assert ox.export(pool).returncode == 0
    zdb_check(dirs[0], pool)


@pytest.fixture
def runner(oxzfs_bin, work_dir, request):
    made = []

    def make(name):
        base = os.path.join(work_dir, "run", "zil", request.node.name, name)
        unmount_below(base)
        subprocess.run(["rm", "-rf", base])
        os.makedirs(base)
        ox = Oxzfs(oxzfs_bin, base)
        ox.start_daemon()
        made.append(ox)
        return ox, base

    yield make
    for ox in made:
        ox.teardown()


def test_fsync_survives_kill9_through_the_log(runner):
    ox, base = runner("first")
    pool, alt, vdir = "zlog1", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 3, 256)
    snaps = crash_after_fsyncs(ox, pool, alt, [devs[2]], 1, layout=("mirror", devs[0], devs[1], "log"))
    want = snaps[-1]
    # The chain as OpenZFS reads it: every kind of record, and no leak (the log's blocks born
    # in unsynced txgs are not allocated yet; those of synced ones are reachable).
    counts, text = zdb_intent_log(vdir, pool)
    assert counts.get("TX_CREATE", 0) >= 39 and counts.get("TX_WRITE", 0) >= 39, text[-3000:]
    for t in ("TX_MKDIR", "TX_RENAME", "TX_REMOVE", "TX_LINK", "TX_SETATTR", "TX_SYMLINK"):
        assert counts.get(t, 0) >= 1, f"zdb -ivv shows no {t}:\n{text[-3000:]}"
    zdb_check(vdir, pool)
    # A read-only import shows the pool as its last txg left it and replays nothing.
    ox2, base2 = runner("ro")
    digests = [file_digest(d) for d in devs]
    r = ox2.import_ro(vdir, pool, alt, force=True)
    assert r.returncode == 0, repr(r)
    ro = tree(os.path.join(alt, pool))
    assert len(ro) < len(want), "a read-only import replayed the log"
    assert ox2.export(pool).returncode == 0
    assert [file_digest(d) for d in devs] == digests, "a read-only import and export wrote to a device"
    assert zdb_intent_log(vdir, pool)[0] == counts, "a read-only import changed the log"
    # A read-write import replays it: everything fsync'd is back.
    r = ox2.run("zpool", "import", "-f", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox2.imported.append(pool)
    got = tree(os.path.join(alt, pool))
    missing = sorted(set(want) - set(got))
    assert not missing, f"lost after replay: {missing[:10]}"
    bad = sorted(k for k in want if got.get(k) != want[k])
    assert not bad, f"differs after replay: {bad[:10]}"
    assert set(got) == set(want), f"extra after replay: {sorted(set(got) - set(want))[:10]}"
    assert ox2.export(pool).returncode == 0
    zdb_check(vdir, pool)
    assert zdb_intent_log(vdir, pool)[0] == {}, "the replayed log was not freed"


def test_fsync_commits_its_own_file_only(runner):
    """zil_commit(zilog, foid): an fsync of one file logs the namespace's changes and that
    file's writes, not the bytes another file is being written with (OpenZFS keeps those on
    the other file's list until its own fsync or its txg). Checked on the chain OpenZFS's zdb
    reads after kill -9, and by what the replay brings back."""
    ox, base = runner("perobj")
    pool, alt, vdir = "zlogobj", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1, 256)
    r = ox.zpool("create", "-R", alt, pool, *devs)
    assert r.returncode == 0, repr(r)
    assert ox.run("tunable", "zfs_txg_timeout=3600").returncode == 0
    root = os.path.join(alt, pool)
    streaming = os.urandom(3 << 20)
    small = os.urandom(4096)
    with open(os.path.join(root, "streaming"), "wb") as big:
        big.write(streaming)
        big.flush()
        with open(os.path.join(root, "small"), "wb") as f:
            f.write(small)
            f.flush()
            os.fsync(f.fileno())
    ox.kill9()
    unmount_below(alt)
    counts, text = zdb_intent_log(vdir, pool)
    # Both creates (namespace), one write: the small file's 4K.
    assert counts.get("TX_CREATE") == 2 and counts.get("TX_WRITE") == 1, text[-3000:]
    zdb_check(vdir, pool)
    ox2, _ = runner("perobj-replay")
    r = ox2.run("zpool", "import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox2.imported.append(pool)
    with open(os.path.join(root, "small"), "rb") as f:
        assert f.read() == small
    # The streaming file was never fsync'd: its create is back, its bytes were not logged.
    assert os.path.exists(os.path.join(root, "streaming"))
    assert os.path.getsize(os.path.join(root, "streaming")) < len(streaming)
    assert ox2.export(pool).returncode == 0
    zdb_check(vdir, pool)


@pytest.mark.parametrize("logdev", [False, True], ids=["pool", "throughput"])
def test_large_writes_logged_indirect(runner, logdev):
    """A write of zfs_immediate_write_sz or more goes to its final block and the log record
    points at it (WR_INDIRECT): without a log device, and with one under logbias=throughput.
    OpenZFS's zdb shows the records with their blkptr and finds the crashed pool clean; the
    import replays every byte."""
    ox, base = runner("indirect")
    pool, alt, vdir = "zlogind", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 2, 256)
    layout = (devs[0], "log", devs[1]) if logdev else (devs[0],)
    r = ox.zpool("create", "-R", alt, pool, *layout)
    assert r.returncode == 0, repr(r)
    if logdev:
        assert ox.zfs("set", "logbias=throughput", pool).returncode == 0
    assert ox.run("tunable", "zfs_txg_timeout=3600").returncode == 0
    root = os.path.join(alt, pool)
    rng = random.Random(11)
    fd = os.open(os.path.join(root, "big"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for _ in range(24):
            os.pwrite(fd, os.urandom(rng.choice((32768, 65536, 131072, 300000))), rng.randrange(0, 4 << 20))
            os.fsync(fd)
    finally:
        os.close(fd)
    before = zil_kstat(ox)
    with open(os.path.join(root, "small"), "wb") as f:
        f.write(os.urandom(3000))
        f.flush()
        os.fsync(f.fileno())
    after = zil_kstat(ox)
    # A small write is copied into the record, but under logbias=throughput it too goes to its
    # block (zfs_log_write: WR_INDIRECT whatever its size).
    delta = {k: after[k] - before[k] for k in ("zil_itx_indirect_count", "zil_itx_needcopy_count")}
    assert delta == ({"zil_itx_indirect_count": 1, "zil_itx_needcopy_count": 0} if logdev else
                     {"zil_itx_indirect_count": 0, "zil_itx_needcopy_count": 1}), delta
    want = tree(root)
    ox.kill9()
    unmount_below(alt)
    # (zdb prints an indirect record's block pointer, and reads the block, from -iiiii on.)
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-iiiii", pool], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("has blkptr, will claim") >= 24, r.stdout[-3000:]
    zdb_check(vdir, pool)
    reimport_matches(ox, pool, alt, [vdir], want, "differs after replay")


def test_writes_sharing_a_block_survive_kill9(runner):
    """Writes of zfs_immediate_write_sz or more that share a 128K record before an fsync (two
    64K writes, four 32K ones, an unaligned 48K then 80K) each get a record naming the one block
    the commit wrote: the replay claims that block once and applies every record. (It once
    dropped every record after the first that named a block, losing the second 64K.)"""
    ox, base = runner("shared")
    pool, alt, vdir = "zlogshr", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    r = ox.zpool("create", "-R", alt, pool, *make_devs(vdir, 1, 256))
    assert r.returncode == 0, repr(r)
    assert ox.run("tunable", "zfs_txg_timeout=3600").returncode == 0
    root = os.path.join(alt, pool)
    want = {}
    for name, pieces in (("two64", [65536, 65536]), ("four32", [32768] * 4), ("odd", [49152, 81920])):
        fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            data = b""
            for n in pieces:
                d = os.urandom(n)
                os.write(fd, d)
                data += d
            os.fsync(fd)
        finally:
            os.close(fd)
        want[name] = data
    before = zil_kstat(ox)
    assert before["zil_itx_indirect_count"] >= 8, before
    killed_and_imported(ox, vdir, alt, pool)
    assert_files(root, want)
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_bad_log_block_ends_the_chain(runner):
    """A log block whose checksum fails ends the chain as in OpenZFS: the records before it
    replay, none after it; the pool imports and zdb is clean."""
    ox, base = runner("bad")
    pool, alt, vdir = "zlogbad", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1, 256)
    # (Small files: without a log device a write of zfs_immediate_write_sz or more syncs the txg.)
    snaps = crash_after_fsyncs(ox, pool, alt, devs, 2, layout=(), sizes=(100, 4096, 5000))
    blocks = zdb_blocks(vdir, pool)
    assert len(blocks) > 20, f"zdb lists {len(blocks)} log blocks"
    seq, vdev, off = blocks[len(blocks) // 2]
    assert vdev == 0
    with open(devs[0], "r+b") as f:
        f.seek(0x400000 + off + 200)
        f.write(os.urandom(64))
    r = ox.run("zpool", "import", "-f", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    got = tree(os.path.join(alt, pool))
    assert got in snaps[:-1], "after a bad log block, the content is not that of an fsync before it"
    assert len(got) < len(snaps[-1])
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_an_acl_set_then_fsynced_survives_kill9(runner):
    """An ACL change has no log record of its own: the fsync after it syncs the txg (as OpenZFS
    logs it, TX_ACL, only where the pool's features give it one); either way the ACL set
    before an acknowledged fsync is back after a kill -9."""
    ox, base = runner("acl")
    pool = "zlogacl"
    alt, vdir, root = _new_pool(ox, base, pool, create_args=("-O", "acltype=posix"))
    path = os.path.join(root, "f")
    with open(path, "wb") as f:
        f.write(b"acl")
    # system.posix_acl_access: version 2, then (tag, perm, id): user::rw-, user:65534:r--,
    # group::r--, mask::r--, other::---.
    undefined = 0xFFFFFFFF
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in
                                          ((1, 6, undefined), (2, 4, 65534), (4, 4, undefined), (0x10, 4, undefined), (0x20, 0, undefined)))
    os.setxattr(path, "system.posix_acl_access", acl)
    fsync_path(path)
    killed_and_imported(ox, vdir, alt, pool)
    assert os.getxattr(path, "system.posix_acl_access") == acl
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_files_made_under_a_default_acl_replay(runner):
    """A file and a directory made under a default ACL take it in their extended attribute
    directories, which no record describes: the records of their creation, committed by an
    fsync of the directory they are in, replay after a kill -9; the ACL comes back with the txg
    sync an fsync of the file itself makes."""
    ox, base = runner("aclmade")
    pool = "zlogaclmade"
    alt, vdir, root = _new_pool(ox, base, pool, create_args=("-O", "acltype=posix"))
    undefined = 0xFFFFFFFF
    dacl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in
                                           ((1, 7, undefined), (2, 5, 65534), (4, 5, undefined), (0x10, 5, undefined), (0x20, 0, undefined)))
    d = os.path.join(root, "d")
    os.mkdir(d)
    os.setxattr(d, "system.posix_acl_default", dacl)
    fsync_path(d)
    with open(os.path.join(d, "f"), "wb") as f:
        f.write(b"made")
    os.mkdir(os.path.join(d, "sub"))
    fsync_path(d)
    killed_and_imported(ox, vdir, alt, pool)
    assert sorted(os.listdir(d)) == ["f", "sub"]
    assert os.path.isdir(os.path.join(d, "sub"))
    with open(os.path.join(d, "synced"), "wb") as f:
        f.write(b"synced")
        os.fsync(f.fileno())
    killed_and_imported(ox, vdir, alt, pool)
    assert os.getxattr(os.path.join(d, "synced"), "system.posix_acl_access")[4:] != b""
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def fletcher4(data):
    """OpenZFS's fletcher-4 of little-endian DATA: four 64-bit words."""
    a = b = c = d = 0
    m = (1 << 64) - 1
    for (w,) in struct.iter_unpack("<I", data):
        a = (a + w) & m
        b = (b + a) & m
        c = (c + b) & m
        d = (d + c) & m
    return a, b, c, d


def test_an_unparsable_record_is_refused_by_name_and_left(runner):
    """A log block whose checksum is right but one of whose records does not parse (its
    length below a record header's) is not replayed: the pool imports, the file system's
    mount is refused with an error naming the dataset, the log block and the record, and the
    chain is left in place for OpenZFS's zdb, which still lists its records."""
    ox, base = runner("badrec")
    pool, alt, vdir = "zlogrec", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1, 256)
    crash_after_fsyncs(ox, pool, alt, devs, 3, layout=(), sizes=(100, 4096, 5000))
    before, _ = zdb_intent_log(vdir, pool)
    r = subprocess.run([ZDB, "-e", "-p", vdir, "-iiivvvvv", pool], capture_output=True, text=True, errors="replace", timeout=600)
    blocks = [(int(m.group(1)), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16), [int(w, 16) for w in m.group(5).split(":")])
              for m in re.finditer(r"Block seqno (\d+), [^\n]*?DVA\[0\]=<(\w+):(\w+):\w+> .*? size=(\w+)L/\w+P .*?cksum=([0-9a-f:]+)", r.stdout)]
    assert len(blocks) > 3, r.stdout[-3000:]
    seq, vdev, off, size, verifier = blocks[len(blocks) // 2]
    assert vdev == 0
    with open(devs[0], "r+b") as f:
        f.seek(0x400000 + off)
        blk = bytearray(f.read(size))
        # A slim log block (zil_chain_t first): zc_nused at 136, the embedded checksum's four
        # words at 152; the first record right after the 184-byte header. Its lrc_reclen
        # becomes 8, shorter than a record header, and the block's checksum is made right.
        nused = struct.unpack_from("<Q", blk, 136)[0]
        assert 184 < nused <= size, nused
        struct.pack_into("<Q", blk, 184 + 8, 8)
        region = bytearray(blk[:nused])
        struct.pack_into("<4Q", region, 152, *verifier)
        struct.pack_into("<4Q", blk, 152, *fletcher4(bytes(region)))
        f.seek(0x400000 + off)
        f.write(blk)
    r = ox.run("zpool", "import", "-d", vdir, "-R", alt, pool)
    ox.imported.append(pool)
    text = r.stdout + r.stderr
    # (imported, its mount refused: zpool import's exit status 1, as OpenZFS's when a mount fails)
    assert r.returncode == 1 and text.startswith(f"cannot mount '{pool}': intent log of '{pool}': log block seq {seq} "), repr(r)
    assert "record 1: " in text and "(the log is left in place)" in text, repr(r)
    st = ox.zpool("list", "-H", "-o", "name,health", pool)
    assert st.returncode == 0 and st.stdout == f"{pool}\tONLINE\n", repr(st)
    assert not os.path.ismount(os.path.join(alt, pool))
    assert ox.export(pool).returncode == 0
    after, text = zdb_intent_log(vdir, pool)
    assert after.get("Total", 0) > 0 and after.get("TX_CREATE", 0) >= 1, text[-3000:]


def test_scrub_reads_a_claimed_log_and_repairs_it(runner):
    """A crash's intent log claimed by an import with -N and not replayed yet (OpenZFS replays
    at mount): a scrub reads every claimed log block on both mirror sides, so a log block
    damaged on one side is repaired (bytes repaired, no error, the side's bytes those of the
    other again; as in OpenZFS the log's reads are speculative: the chain's last block was
    never written, and checksum failures are not errors); the first mount then replays the
    whole log and zdb finds the pool clean."""
    ox, base = runner("claimed")
    pool, alt, vdir = "zlogscrub", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 2, 256)
    snaps = crash_after_fsyncs(ox, pool, alt, devs, 4, sizes=(100, 4096, 5000))
    blocks = zdb_blocks(vdir, pool)
    assert len(blocks) > 5, f"zdb lists {len(blocks)} log blocks"
    seq, vdev, off = blocks[len(blocks) // 2]
    with open(devs[0], "r+b") as f:
        f.seek(0x400000 + off + 200)
        f.write(os.urandom(64))
    r = ox.run("zpool", "import", "-N", "-f", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    r = ox.zpool("scrub", "-w", pool)
    assert r.returncode == 0, repr(r)
    text = ox.zpool("status", pool, check=True).stdout
    m = re.search(r"scan: scrub repaired (\S+) in \S+ with (\d+) errors", text)
    assert m and m.group(1) != "0B" and m.group(2) == "0", f"the damaged log block was not repaired by the scrub:\n{text}"
    sides = []
    for d in devs:
        with open(d, "rb") as f:
            f.seek(0x400000 + off)
            sides.append(f.read(512))
    assert sides[0] == sides[1], "the damaged log block was not rewritten on its side"
    r = ox.zfs("mount", "-a")
    assert r.returncode == 0, repr(r)
    got = tree(os.path.join(alt, pool))
    bad = sorted(k for k in set(snaps[-1]) | set(got) if got.get(k) != snaps[-1].get(k))
    assert not bad, f"after the scrub and the mount's replay: {bad[:10]}"
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def _zfs_fuse(work_dir):
    try:
        zf = oracle_pools.ZfsFuse(work_dir)
        zf.__enter__()
        return zf
    except oracle_pools.MissingTool as e:
        pytest.fail(str(e), pytrace=False)


@pytest.mark.parametrize("slog", [False, True], ids=["pool", "logdev"])
def test_zfs_fuse_replays_a_log_oxzfs_left(runner, work_dir, slog):
    ox, base = runner("ours")
    pool, alt, vdir = "zlogx1", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 3, 256)
    layout = ("mirror", devs[0], devs[1], "log") if slog else ("mirror", devs[0])
    want = crash_after_fsyncs(ox, pool, alt, [devs[2] if slog else devs[1]], 3, create_opts=("-o", "version=23"), layout=layout)[-1]
    zdb_check(vdir, pool)
    zalt = os.path.join(base, "zfs-fuse-alt")
    zf = _zfs_fuse(work_dir)
    try:
        r = subprocess.run(["zpool", "import", "-f", "-o", "cachefile=none", "-d", vdir, "-R", zalt, pool], capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse cannot import:\n{r.stdout}{r.stderr}"
        got = tree(os.path.join(zalt, pool))
        bad = sorted(k for k in set(want) | set(got) if got.get(k) != want.get(k))
        assert not bad, f"zfs-fuse's replay differs: {bad[:10]}"
        r = subprocess.run(["zpool", "export", pool], capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse export failed:\n{r.stdout}{r.stderr}"
    finally:
        subprocess.run(["zpool", "export", "-f", pool], capture_output=True)
        zf.__exit__(None, None, None)
    zdb_check(vdir, pool)


def test_oxzfs_replays_a_log_zfs_fuse_left(runner, work_dir):
    ox, base = runner("theirs")
    pool, vdir = "zlogx2", os.path.join(base, "vdevs")
    zalt = os.path.join(base, "zfs-fuse-alt")
    alt = os.path.join(base, "alt")
    devs = make_devs(vdir, 2, 256)
    zf = _zfs_fuse(work_dir)
    try:
        r = subprocess.run(["zpool", "create", "-o", "cachefile=none", "-m", zalt, pool, "mirror", *devs], capture_output=True, text=True)
        assert r.returncode == 0, f"zfs-fuse cannot create:\n{r.stdout}{r.stderr}"
        mp = subprocess.run(["zfs", "get", "-H", "-o", "value", "mountpoint", pool], capture_output=True, text=True).stdout.strip()
        assert os.path.ismount(mp), f"zfs-fuse did not mount {pool} ({mp!r})"
        want = logged_workload(mp, 4, nfiles=30)[-1]
        pids = [int(p) for p in subprocess.run(["pgrep", "-x", "zfs-fuse"], capture_output=True, text=True).stdout.split()]
        assert pids, "zfs-fuse is not running"
        for p in pids:
            os.kill(p, 9)
        for _ in range(100):
            if not subprocess.run(["pgrep", "-x", "zfs-fuse"], capture_output=True).stdout:
                break
            time.sleep(0.1)
        unmount_below(zalt)
        subprocess.run(["umount", "-l", mp], capture_output=True)
    finally:
        zf.__exit__(None, None, None)
    counts, text = zdb_intent_log(vdir, pool)
    assert counts.get("TX_WRITE", 0) >= 1, f"zfs-fuse left no log:\n{text[-2000:]}"
    r = ox.run("zpool", "import", "-f", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    mp = ox.zfs("get", "-H", "-o", "value", "mountpoint", pool).stdout.strip()
    got = tree(mp)
    # zfs-fuse's log holds no record of the truncate of f4 and the chmod of f5, though each
    # was fsync'd (zdb -ivv of its log lists no TX_SETATTR or TX_TRUNCATE): those two files are
    # compared for existence only.
    for k in ("f4", "f5"):
        assert k in got, f"{k} lost"
        got.pop(k)
        want = {kk: v for kk, v in want.items() if kk != k}
    bad = sorted(k for k in set(want) | set(got) if got.get(k) != want.get(k))
    assert not bad, f"oxzfs's replay of zfs-fuse's log differs: {bad[:10]}"
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_log_device_added_and_removed(runner):
    """zpool add POOL log DEV gives the log a device of its own; zpool remove takes it out
    while the pool serves (its log blocks synced away first): the pool keeps its data and
    its other vdevs, zdb is clean, fsync goes on working; the pool's only data vdev is refused
    as OpenZFS refuses it (no room elsewhere for its blocks)."""
    ox, base = runner("addrm")
    pool, alt, vdir = "zlogrm", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 4, 256)
    r = ox.zpool("create", "-R", alt, pool, "mirror", devs[0], devs[1])
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    r = ox.zpool("add", pool, "log", "mirror", devs[2], devs[3])
    assert r.returncode == 0, repr(r)
    st = ox.zpool("status", pool).stdout
    assert "logs" in st and os.path.basename(devs[2]) in st, st
    root = os.path.join(alt, pool)
    want = logged_workload(root, 5, nfiles=12)[-1]
    # The intent log's kstat (OpenZFS's /proc/spl/kstat/zfs/zil rows): every fsync asked for
    # a commit, and the records went to the log device.
    zil = zil_kstat(ox)
    assert zil["zil_commit_count"] >= 16 and zil["zil_commit_writer_count"] >= 1, zil
    assert zil["zil_itx_metaslab_slog_count"] >= 16 and zil["zil_itx_metaslab_slog_bytes"] > 12 * 100, zil
    assert zil["zil_itx_count"] == zil["zil_itx_metaslab_slog_count"] + zil["zil_itx_metaslab_normal_count"], zil
    r = ox.run("kstat", "bogus")
    assert r.returncode == 2 and r.stderr.startswith("unknown kstat 'bogus'\nusage: oxzfs kstat [-j] <arcstats|zfetchstats|zil>"), repr(r)
    summary = ox.run("arc_summary", "-s", "zil")
    assert summary.returncode == 0, repr(summary)
    assert re.search(r"^\s+Commit requests:\s+\d+$", summary.stdout, re.M) and "Transactions to SLOG storage pool:" in summary.stdout, summary.stdout
    r = ox.zpool("remove", pool, "mirror-0")
    assert r.returncode == 1 and r.stderr == "cannot remove mirror-0: out of space\n", repr(r)
    r = ox.zpool("remove", pool, "mirror-1")
    assert r.returncode == 0, repr(r)
    st = ox.zpool("status", pool).stdout
    assert "logs" not in st and os.path.basename(devs[2]) not in st, st
    with open(os.path.join(root, "after-removal"), "wb") as f:
        f.write(b"still logged")
        f.flush()
        os.fsync(f.fileno())
    want["after-removal"] = ("f", 0o644, b"still logged")
    # Without a log device, the records go to the pool's normal class (once the new chain's
    # first block is synced: the fsync that starts a chain syncs the txg instead).
    with open(os.path.join(root, "after-removal-2"), "wb") as f:
        f.write(b"logged in the pool")
        f.flush()
        os.fsync(f.fileno())
    want["after-removal-2"] = ("f", 0o644, b"logged in the pool")
    after = zil_kstat(ox)
    assert after["zil_itx_metaslab_normal_count"] > zil["zil_itx_metaslab_normal_count"], (zil, after)
    assert after["zil_itx_metaslab_slog_count"] == zil["zil_itx_metaslab_slog_count"], (zil, after)
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)
    r = ox.run("zpool", "import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    got = tree(root)
    bad = sorted(k for k in set(want) | set(got) if got.get(k) != want.get(k))
    assert not bad, f"differs after the log device's removal: {bad[:10]}"
    assert ox.export(pool).returncode == 0


def test_missing_log_device_import_m(runner):
    """A log device lost with the machine: `zpool import` refuses as OpenZFS does, naming the
    device and `-m`; `zpool import -m` imports the pool DEGRADED with the log UNAVAIL, at the
    state its last txg left (the records on the lost device are gone), new fsyncs go to the
    pool, `zpool remove` takes the lost device out, and zdb finds the pool clean."""
    ox, base = runner("missing")
    pool, alt, vdir = "zlogmiss", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 3, 256)
    snaps = crash_after_fsyncs(ox, pool, alt, [devs[2]], 6, layout=("mirror", devs[0], devs[1], "log"))
    os.unlink(devs[2])
    # The listing, as OpenZFS's show_import prints a pool whose log device's labels are gone:
    # the guid sum comes up short (ZFS-8000-6X), the root is "missing device".
    r = ox.run("zpool", "import", "-d", vdir)
    assert r.returncode == 0, repr(r)
    assert "  state: UNAVAIL\nstatus: One or more devices are missing from the system.\n action: The pool cannot be imported. Attach the missing\n\tdevices and try again.\n" in r.stdout, r.stdout
    assert "   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-6X\n" in r.stdout, r.stdout
    assert re.search(rf"\t{pool} +UNAVAIL  missing device\n\t  mirror-0 +ONLINE\n", r.stdout), r.stdout
    assert "\tAdditional devices are known to be part of this pool, though their\n\texact configuration cannot be determined.\n" in r.stdout, r.stdout
    for ro in ((), ("-o", "readonly=on")):
        r = ox.run("zpool", "import", *ro, "-d", vdir, "-R", alt, pool)
        assert r.returncode != 0, repr(r)
        assert "The devices below are missing or corrupted, use '-m' to import the pool anyway:" in r.stderr, repr(r)
        assert f"{devs[2]} [log]" in r.stderr, repr(r)
        assert f"cannot import '{pool}': one or more devices is currently unavailable" in r.stderr, repr(r)
    r = ox.run("zpool", "import", "-m", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    st = ox.zpool("status", pool).stdout
    assert " state: DEGRADED" in st and re.search(rf"UNAVAIL .*was {re.escape(devs[2])}", st), st
    assert "One or more devices could not be opened" in st, st
    root = os.path.join(alt, pool)
    got = tree(root)
    assert got == {} or got in snaps[:-1], "after import -m the file system is not at a state it had"
    assert len(got) < len(snaps[-1]), "records on the missing log device were replayed?"
    with open(os.path.join(root, "after"), "wb") as f:
        f.write(b"logged in the pool")
        f.flush()
        os.fsync(f.fileno())
    r = ox.zpool("remove", pool, devs[2])
    assert r.returncode == 0, repr(r)
    st = ox.zpool("status", pool).stdout
    assert " state: ONLINE" in st and "logs" not in st, st
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


class NbdDisk:
    """A file served by nbdkit through its error filter, shown as a plain file by nbdfuse:
    every request fails (EIO) while the file `inject` exists, as a dying disk's would."""

    def __init__(self, d, size_mib):
        for tool in ("nbdkit", "nbdfuse"):
            if not shutil.which(tool):
                pytest.fail(f"{tool} is not installed (apt-get install nbdkit libnbd-bin; scripts/install-deps.sh does)", pytrace=False)
        self.dir, self.mnt = d, os.path.join(d, "mnt")
        os.makedirs(self.mnt)
        back = os.path.join(d, "back.img")
        with open(back, "wb") as f:
            f.truncate(size_mib << 20)
        self.inject = os.path.join(d, "inject")
        self.path = os.path.join(self.mnt, "disk")
        pidfile = os.path.join(d, "nbdfuse.pid")
        self.proc = subprocess.Popen(
            ["nbdfuse", "-P", pidfile, self.path, "--command", "nbdkit", "-s", "--filter=error", "file", back,
             "error-rate=100%", f"error-file={self.inject}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 20
        while not (os.path.exists(pidfile) and os.path.exists(self.path)):
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                pytest.fail(f"nbdfuse did not come up (exit {self.proc.poll()})", pytrace=False)
            time.sleep(0.05)

    def fail(self):
        open(self.inject, "w").close()

    def close(self):
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def test_failing_log_device_falls_back_to_the_pool(runner):
    """A log device that starts failing under fsync: no fsync reports an error, the device
    shows FAULTED with its write errors in `zpool status`, later commits go to the pool, and after a kill -9
    every file fsync'd before and after the failure comes back (`zpool import -m`, the dead
    device being unreadable too)."""
    ox, base = runner("failing")
    pool, alt, vdir = "zlogfail", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 2, 256)
    disk = NbdDisk(os.path.join(base, "nbd"), 128)
    try:
        r = ox.zpool("create", "-R", alt, pool, "mirror", *devs, "log", disk.path)
        assert r.returncode == 0, repr(r)
        assert ox.run("tunable", "zfs_txg_timeout=3600").returncode == 0
        root = os.path.join(alt, pool)
        rng = random.Random(7)
        for i in range(30):
            if i == 10:
                disk.fail()
            with open(os.path.join(root, f"f{i}"), "wb") as f:
                f.write(os.urandom(rng.choice((100, 4096, 5000))))
                f.flush()
                os.fsync(f.fileno())
        want = tree(root)
        st = ox.zpool("status", pool).stdout
        m = re.search(rf"{re.escape(disk.path)}\s+(\S+)\s+\d+\s+(\d+)\s+\d+\s+too many errors", st)
        assert m and m.group(1) == "FAULTED" and int(m.group(2)) > 0, f"the failing log device is not FAULTED with write errors:\n{st}"
        assert " state: DEGRADED" in st and "One or more devices are faulted in response to persistent errors." in st, st
        ox.kill9()
        unmount_below(alt)
        r = ox.run("zpool", "import", "-d", vdir, "-d", disk.mnt, "-R", alt, pool)
        assert r.returncode != 0 and "use '-m'" in r.stderr, repr(r)
        reimport_matches(ox, pool, alt, [vdir, disk.mnt], want, "fsync'd files lost or changed after the log device failed", extra=("-m",))
    finally:
        unmount_below(alt)
        disk.close()


def test_setid_bits_a_write_takes_away_are_replayed(runner):
    """An unprivileged write takes S_ISUID/S_ISGID away (FUSE's HANDLE_KILLPRIV_V2 leaves it to
    the file system); the mode change is logged with the write: fsync, kill -9, and the import's
    replay gives the file its new size and its mode without the bits."""
    from test_killpriv import as_nobody
    ox, base = runner("killpriv")
    pool, alt, vdir = "zkill", os.path.join(base, "alt"), os.path.join(base, "vdevs")
    devs = make_devs(vdir, 1, 128)
    assert ox.zpool("create", "-R", alt, pool, *devs).returncode == 0
    root = os.path.join(alt, pool)
    p = os.path.join(root, "f")
    with open(p, "wb") as f:
        f.write(b"x")
    os.chmod(root, 0o777)
    os.chmod(p, 0o6777)
    assert ox.zpool("sync", pool).returncode == 0
    assert ox.run("tunable", "zfs_txg_timeout=3600").returncode == 0
    as_nobody("python3", "-c", f"import os; fd = os.open({p!r}, os.O_WRONLY | os.O_APPEND); os.write(fd, b'y'); os.fsync(fd)")
    ox.kill9()
    unmount_below(alt)
    r = ox.zpool("import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    st = os.stat(p)
    assert (oct(st.st_mode & 0o7777), st.st_size) == (oct(0o777), 2)
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def _new_pool(ox, base, pool, ndevs=1, create_args=()):
    """A pool on `ndevs` fresh files, mounted below base/alt, with no txg sync to come (what
    survives a kill -9 survives through the log): (alt, vdir, root)."""
    alt, vdir = os.path.join(base, "alt"), os.path.join(base, "vdevs")
    r = ox.zpool("create", *create_args, "-R", alt, pool, *make_devs(vdir, ndevs, 256))
    assert r.returncode == 0, repr(r)
    assert ox.run("tunable", "zfs_txg_timeout=3600").returncode == 0
    return alt, vdir, os.path.join(alt, pool)


def test_sync_always_logs_every_change_without_fsync(runner):
    """Under sync=always every change is in the log before it is answered: files written and
    closed without an fsync, a directory made, a rename, an unlink, a symlink and a chmod all
    come back after a kill -9 (with no txg sync meanwhile), zdb reads their records in the log
    the crash left, and the kstat counts the commits."""
    ox, base = runner("always")
    pool = "zlogalw"
    alt, vdir, root = _new_pool(ox, base, pool)
    assert ox.zfs("set", "sync=always", pool).returncode == 0
    before = zil_kstat(ox)
    rng = random.Random(21)
    for i in range(8):
        with open(os.path.join(root, f"f{i}"), "wb", buffering=0) as f:
            for _ in range(3):
                f.write(os.urandom(rng.choice((100, 4096, 5000))))
    os.mkdir(os.path.join(root, "d"))
    os.rename(os.path.join(root, "f1"), os.path.join(root, "d", "g1"))
    os.unlink(os.path.join(root, "f2"))
    os.symlink("some/target", os.path.join(root, "d", "sl"))
    os.chmod(os.path.join(root, "f3"), 0o600)
    with open(os.path.join(root, "f4"), "r+b", buffering=0) as f:
        f.seek(10)
        f.write(b"overwritten in place")
    want = tree(root)
    after = zil_kstat(ox)
    # 8 creates, 25 writes, mkdir, rename, unlink, symlink, chmod: each committed on its own.
    assert after["zil_commit_count"] - before["zil_commit_count"] >= 38, (before, after)
    assert after["zil_itx_count"] - before["zil_itx_count"] >= 38, (before, after)
    ox.kill9()
    unmount_below(alt)
    counts, text = zdb_intent_log(vdir, pool)
    assert counts.get("TX_CREATE", 0) >= 8 and counts.get("TX_WRITE", 0) >= 25, text[-3000:]
    for t in ("TX_MKDIR", "TX_RENAME", "TX_REMOVE", "TX_SYMLINK", "TX_SETATTR"):
        assert counts.get(t, 0) >= 1, f"zdb -ivv shows no {t}:\n{text[-3000:]}"
    reimport_matches(ox, pool, alt, [vdir], want, "changes made under sync=always lost after kill -9")


def test_sync_disabled_fsync_logs_nothing(runner):
    """Under sync=disabled an fsync writes no log (as OpenZFS's zfs_fsync, which skips
    zil_commit): the kstat counts no log write and no record, zdb finds no record in the log
    a kill -9 leaves, and with no txg sync meanwhile the import shows the files as the last
    txg left them: the fsync'd rewrite and the fsync'd new file are gone. The pool imports
    cleanly and zdb finds it clean."""
    ox, base = runner("disabled")
    pool = "zlogdis"
    alt, vdir, root = _new_pool(ox, base, pool)
    old = os.urandom(5000)
    with open(os.path.join(root, "old"), "wb") as f:
        f.write(old)
    assert ox.zpool("sync", pool).returncode == 0
    assert ox.zfs("set", "sync=disabled", pool).returncode == 0
    before = zil_kstat(ox)
    with open(os.path.join(root, "old"), "r+b") as f:
        f.write(os.urandom(3000))
        f.flush()
        os.fsync(f.fileno())
    with open(os.path.join(root, "new"), "wb") as f:
        f.write(os.urandom(4096))
        f.flush()
        os.fsync(f.fileno())
    os.mkdir(os.path.join(root, "d"))
    fsync_path(os.path.join(root, "d"))
    fsync_path(root)
    after = zil_kstat(ox)
    for k in ("zil_commit_writer_count", "zil_itx_count"):
        assert after[k] == before[k], (k, before, after)
    ox.kill9()
    unmount_below(alt)
    counts, text = zdb_intent_log(vdir, pool)
    assert not {k: v for k, v in counts.items() if v}, f"zdb -ivv finds records of fsyncs under sync=disabled:\n{text[-3000:]}"
    r = ox.run("zpool", "import", "-d", vdir, "-R", alt, pool)
    assert r.returncode == 0, repr(r)
    ox.imported.append(pool)
    assert ox.zfs("get", "-H", "-o", "value", "sync", pool).stdout == "disabled\n"
    got = tree(root)
    assert got == {"old": ("f", 0o644, old)}, {k: (v[0], len(v[-1]) if v[0] == "f" else v) for k, v in got.items()}
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_fdatasync_and_sync_opens_survive_kill9(runner):
    """fdatasync commits a file's writes as fsync does, and a file opened with O_DSYNC or
    O_SYNC has every write committed before write(2) returns (no fsync called): after a kill -9
    with no txg sync meanwhile, the import's replay brings all three back byte for byte, while
    a file written and closed with no sync at all gets its create back but not its bytes."""
    ox, base = runner("dsync")
    pool = "zlogdsy"
    alt, vdir, root = _new_pool(ox, base, pool)
    rng = random.Random(31)
    want = {}
    plain = os.urandom(5000)
    with open(os.path.join(root, "plain"), "wb") as f:
        f.write(plain)
    before = zil_kstat(ox)
    nsync = 0
    for name, flags in (("fdatasync", 0), ("o_dsync", os.O_DSYNC), ("o_sync", os.O_SYNC)):
        fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY | flags, 0o644)
        try:
            data = b""
            for _ in range(5):
                d = os.urandom(rng.choice((100, 4096, 5000)))
                os.write(fd, d)
                data += d
            if flags:
                nsync += 5
            else:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        want[name] = data
    after = zil_kstat(ox)
    assert after["zil_commit_count"] - before["zil_commit_count"] >= nsync + 1, (before, after)
    killed_and_imported(ox, vdir, alt, pool)
    assert_files(root, want)
    assert os.path.exists(os.path.join(root, "plain"))
    assert os.path.getsize(os.path.join(root, "plain")) < len(plain), "bytes never synced came back"
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)


def test_concurrent_fsyncs_share_log_writes(runner):
    """Group commit: threads each appending to their own file and fsyncing it after every
    append, all at once, find their records written by another fsync's log write (the kstat
    counts fewer log writers than commits); after a kill -9 every file has all its fsync'd
    bytes back."""
    import threading
    ox, base = runner("group")
    pool = "zloggrp"
    alt, vdir, root = _new_pool(ox, base, pool)
    nthreads, rounds = 8, 30
    want, errors = {}, []
    start = threading.Barrier(nthreads)

    def worker(i):
        try:
            rng = random.Random(100 + i)
            name = f"t{i}"
            fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                data = b""
                start.wait()
                for _ in range(rounds):
                    d = os.urandom(rng.choice((100, 512, 3000)))
                    os.write(fd, d)
                    os.fsync(fd)
                    data += d
            finally:
                os.close(fd)
            want[name] = data
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append((i, repr(e)))

    before = zil_kstat(ox)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    after = zil_kstat(ox)
    delta = {k: after[k] - before[k] for k in ("zil_commit_count", "zil_commit_writer_count")}
    assert delta["zil_commit_count"] >= nthreads * rounds, delta
    assert 0 < delta["zil_commit_writer_count"] < delta["zil_commit_count"], delta
    killed_and_imported(ox, vdir, alt, pool)
    assert_files(root, want)
    assert ox.export(pool).returncode == 0
    zdb_check(vdir, pool)
