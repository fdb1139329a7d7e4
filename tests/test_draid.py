"""dRAID pools written by OpenZFS's ztest: oxzfs reads them (test_zdb counts their blocks against
OpenZFS's zdb), rebuilds what lost children held from parity as OpenZFS does, and imports them
read-only only: a read-write import is refused by name and writes nothing."""
import hashlib
import os
import re
import subprocess

import pytest

from conftest import copy_vdevs, parse_zdb
import oracle_pools

WRAP = "zt-draid2-wrap"   # draid2:3d:7c:1s, groups wrapping from row to row
ONE = "zt-draid1-a12"     # draid1:4d:6c:1s


def openzfs_zdb(*args, timeout=900):
    return subprocess.run([os.path.join(oracle_pools.OPENZFS_BIN, "zdb"), *args], capture_output=True, text=True,
                          timeout=timeout)


def draid_tops(vdevs, pool):
    """The pool's normal-class dRAID top-level vdevs from OpenZFS's zdb -C: [(name, [child paths])],
    the name as OpenZFS's zpool prints it (draid2:3d:7c:1s-0)."""
    r = openzfs_zdb("-e", "-p", vdevs, "-C", pool)
    assert r.returncode == 0, r.stderr
    tops, cur = [], None
    for line in r.stdout.splitlines():
        m = re.match(r"^ {12}children\[(\d+)\]:", line)
        if m:
            cur = {"id": int(m.group(1)), "paths": [], "log": 0}
            tops.append(cur)
            continue
        if cur is None:
            continue
        m = re.match(r"^ {16}(\w+): '?([^']*)'?$", line)
        if m:
            cur[m.group(1)] = m.group(2)
        m = re.match(r"^ {20}path: '(.*)'$", line)
        if m:
            cur["paths"].append(m.group(1))
    out = []
    for t in tops:
        if t.get("type") == "draid" and t.get("is_log") == "0":
            name = f"draid{t['nparity']}:{t['draid_ndata']}d:{len(t['paths'])}c:{t['draid_nspares']}s-{t['id']}"
            out.append((name, [os.path.join(vdevs, os.path.basename(p)) for p in t["paths"]]))
    assert out, f"no dRAID vdev in {pool}'s config:\n{r.stdout}"
    return out


def zero_data(path):
    """Zeros over a device's whole data area (past the front labels and boot area, before the
    back labels): the device answers, with nothing of the pool in it."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(4 << 20)
        left = size - (4 << 20) - (512 << 10)
        zeros = bytes(1 << 20)
        while left > 0:
            n = min(left, len(zeros))
            f.write(zeros[:n])
            left -= n


def bad_blocks(text):
    """The bookmarks <objset, object, level, blkid> a zdb -cc reports it could not read."""
    return sorted(set(re.findall(r"Got error.*?reading <([0-9a-f]+, [0-9a-f]+, [0-9a-f-]+, [0-9a-f]+)>", text)))


@pytest.fixture(scope="module")
def draid(ztest_pools, oxzfs):
    def copy(name, tag):
        return copy_vdevs(os.path.join(ztest_pools[name], "vdevs"), os.path.join(oxzfs.base, "draid", f"{name}-{tag}"))
    return copy


@pytest.mark.parametrize("name,lost", [(WRAP, 2), (ONE, 1)])
def test_lost_children_are_rebuilt_from_parity(name, lost, draid, oxzfs, ztest_pools):
    """As many children as the parity covers, zeroed, in the first dRAID: every block still
    verifies (zdb -cc, ours and OpenZFS's, both clean with the full block count); with more
    lost, both zdbs name the same unreadable blocks."""
    vdevs = draid(name, "lost")
    (top, children), *_ = draid_tops(vdevs, name)
    with open(os.path.join(ztest_pools[name], "zdb-blocks.txt"), encoding="utf-8", errors="replace") as f:
        want = parse_zdb(f.read()).bp_count
    for c in children[:lost]:
        zero_data(c)
    for who, r in (("oxzfs", oxzfs.zdb("-e", "-p", vdevs, "-cc", name, timeout=900)),
                   ("OpenZFS", openzfs_zdb("-e", "-p", vdevs, "-cc", name))):
        text = r.stdout + r.stderr
        assert r.returncode == 0 and not bad_blocks(text), f"{who} zdb -cc with {lost} of {top}'s children lost:\n{text[-3000:]}"
        assert parse_zdb(r.stdout).bp_count == want, f"{who}:\n{r.stdout[-2000:]}"
    # More children lost, one at a time, until OpenZFS finds blocks it cannot rebuild (which
    # blocks that is depends on where the permutations put each group's columns): at every
    # step both zdbs name the same unreadable blocks.
    for extra in children[lost:]:
        zero_data(extra)
        ours = oxzfs.zdb("-e", "-p", vdevs, "-cc", name, timeout=900)
        theirs = openzfs_zdb("-e", "-p", vdevs, "-cc", name)
        got, expected = bad_blocks(ours.stdout + ours.stderr), bad_blocks(theirs.stdout + theirs.stderr)
        assert got == expected, f"unreadable blocks with {os.path.basename(extra)} lost too: oxzfs {got}, OpenZFS {expected}"
        if expected:
            break
    assert expected, f"OpenZFS's zdb read {top} with all its children zeroed"


def test_read_write_import_is_refused_read_only_works(draid, oxzfs):
    vdevs = draid(WRAP, "import")
    tops = draid_tops(vdevs, WRAP)
    before = {f: hashlib.sha256(open(os.path.join(vdevs, f), "rb").read()).hexdigest() for f in sorted(os.listdir(vdevs))}
    alt = os.path.join(oxzfs.base, "alt", "draid")
    os.makedirs(alt, exist_ok=True)
    r = oxzfs.zpool("import", "-d", vdevs, "-N", "-f", "-R", alt, WRAP)
    assert r.returncode != 0, f"a dRAID pool imported read-write:\n{r!r}"
    assert "dRAID" in r.stderr and "readonly=on" in r.stderr and tops[0][0] in r.stderr, repr(r)
    after = {f: hashlib.sha256(open(os.path.join(vdevs, f), "rb").read()).hexdigest() for f in sorted(os.listdir(vdevs))}
    assert after == before, "the refused import changed the devices"
    r = oxzfs.import_ro(vdevs, WRAP, alt, force=True, nomount=True)
    assert r.returncode == 0, repr(r)
    try:
        st = oxzfs.zpool("status", WRAP, check=True).stdout
        for top, children in tops:
            assert re.search(rf"^\s+{re.escape(top)}\s+ONLINE", st, re.M), st
            for c in children:
                assert re.search(rf"^\s+{re.escape(c)}\s+ONLINE", st, re.M), st
        # The distributed spares (draid2-0-0, one per dRAID vdev) are there, available.
        spares = re.findall(r"^\s+(draid\d+-\d+-\d+)\s+(\S+)", st, re.M)
        assert spares and all(s == "AVAIL" for _, s in spares), st
    finally:
        assert oxzfs.export(WRAP).returncode == 0
