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


def vdev_tree(vdevs, pool):
    """OpenZFS's zdb -C vdev tree of the exported pool, as nested dicts (children in "children")."""
    r = openzfs_zdb("-e", "-p", vdevs, "-C", pool)
    assert r.returncode == 0, r.stderr
    root, stack = None, []
    for line in r.stdout.splitlines():
        m = re.match(r"^( *)(children\[\d+\]|vdev_tree):$", line)
        if m:
            depth = len(m.group(1))
            while stack and stack[-1][0] >= depth:
                stack.pop()
            node = {"children": []}
            if stack:
                stack[-1][1]["children"].append(node)
            elif m.group(2) == "vdev_tree":
                root = node
            else:
                continue
            stack.append((depth, node))
            continue
        m = re.match(r"^( *)([\w.:]+): '?([^']*)'?$", line)
        if m and stack and len(m.group(1)) > stack[-1][0]:
            stack[-1][1][m.group(2)] = m.group(3)
    assert root and root["children"], f"no vdev tree in zdb -C of {pool}:\n{r.stdout}"
    return root


def draid_tops(vdevs, pool):
    """The pool's normal-class dRAID top-level vdevs: [(name as OpenZFS's zpool prints it, e.g.
    draid2:3d:7c:1s-0, [its children: dicts of zdb -C])]."""
    out = []
    for t in vdev_tree(vdevs, pool)["children"]:
        if t.get("type") == "draid" and t.get("is_log") == "0":
            name = f"draid{t['nparity']}:{t['draid_ndata']}d:{len(t['children'])}c:{t['draid_nspares']}s-{t['id']}"
            out.append((name, t["children"]))
    assert out, f"no dRAID vdev in {pool}'s config"
    return out


def files(vdevs, child):
    """The device files of a dRAID child (itself, or the leaves of its spare or replacing vdev)."""
    if child.get("type") == "file":
        return [os.path.join(vdevs, os.path.basename(child["path"]))]
    return [f for c in child["children"] for f in files(vdevs, c)]


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


@pytest.mark.parametrize("name,lost", [(WRAP, 2), (ONE, 1), ("zt-draid3-spares2", 3)])
def test_lost_children_are_rebuilt_from_parity(name, lost, draid, oxzfs, ztest_pools):
    """As many children as the parity covers, zeroed, in the first dRAID: every block still
    verifies (zdb -cc, ours and OpenZFS's, both clean with the full block count); with more
    lost, both zdbs name the same unreadable blocks."""
    vdevs = draid(name, "lost")
    (top, kids), *_ = draid_tops(vdevs, name)
    children = [f for k in kids for f in files(vdevs, k)]
    with open(os.path.join(ztest_pools[name], "zdb-blocks.txt"), encoding="utf-8", errors="replace") as f:
        want = parse_zdb(f.read()).bp_count
    for c in children[:lost]:
        zero_data(c)
    for who, r in (("oxzfs", oxzfs.zdb("-e", "-p", vdevs, "-cc", name, timeout=900)),
                   ("OpenZFS", openzfs_zdb("-e", "-p", vdevs, "-cc", name))):
        text = r.stdout + r.stderr
        assert r.returncode == 0 and not bad_blocks(text), f"{who} zdb -cc with {lost} of {top}'s children lost:\n{text[-3000:]}"
        assert parse_zdb(r.stdout).bp_count == want, f"{who}:\n{r.stdout[-2000:]}"
    # Where ztest left a distributed spare standing in for a child (a spare vdev of the child's
    # device and draid<p>-<top>-<id>), the child's device gone and as many others lost as the
    # parity covers: the child's columns can only come from where the spare keeps them.
    spared = [k for k in kids if any(c.get("type") == "dspare" for c in k["children"])]
    if spared:
        v2 = draid(name, "spared")
        for f in files(v2, spared[0]):
            os.unlink(f)
        parity = int(re.match(r"draid(\d)", top).group(1))
        for f in [f for k in kids if k is not spared[0] for f in files(v2, k)][:parity]:
            zero_data(f)
        ours = oxzfs.zdb("-e", "-p", v2, "-cc", name, timeout=900)
        theirs = openzfs_zdb("-e", "-p", v2, "-cc", name)
        assert bad_blocks(ours.stdout + ours.stderr) == bad_blocks(theirs.stdout + theirs.stderr), \
            f"through the distributed spare:\n{ours.stdout[-2000:]}\n{theirs.stdout[-2000:]}"
        assert parse_zdb(ours.stdout).bp_count == want, f"through the distributed spare, our traversal stopped short:\n{ours!r}"
    # More children lost, one at a time, until OpenZFS finds blocks it cannot rebuild (which
    # blocks that is depends on where the permutations put each group's columns): at every
    # step we name every block OpenZFS's zdb names, and none while it names none. (Ours may
    # name a few more: on one ztest pool left with an active distributed spare, OpenZFS's
    # -cc did not report a block of an encrypted dataset that its `zdb -R` reads back as
    # zeros, and ours did.)
    for extra in children[lost:]:
        zero_data(extra)
        ours = oxzfs.zdb("-e", "-p", vdevs, "-cc", name, timeout=900)
        theirs = openzfs_zdb("-e", "-p", vdevs, "-cc", name)
        got, expected = bad_blocks(ours.stdout + ours.stderr), bad_blocks(theirs.stdout + theirs.stderr)
        # A block the pool's load needs (the MOS's DDT statistics, say) may be among the lost:
        # OpenZFS's zdb then cannot open the pool and names no block at all. Ours must name
        # a MOS block among those it cannot read.
        if theirs.returncode != 0 and re.search(r"can't open '[^']*': (Input/output error|.*checksum)", theirs.stdout + theirs.stderr):
            assert any(b.startswith("0, ") for b in got), \
                f"OpenZFS cannot open {name} with {os.path.basename(extra)} lost too, yet we read every MOS block: {got}\n{theirs!r}"
            expected = ["(the pool cannot be opened)"]
            break
        assert set(expected) <= set(got) and bool(got) == bool(expected), \
            f"unreadable blocks with {os.path.basename(extra)} lost too: oxzfs {got}, OpenZFS {expected}"
        # (OpenZFS's zdb may stop short of a dataset it cannot open and report its blocks as
        # leaked: ours must visit at least as many.)
        assert parse_zdb(ours.stdout).bp_count >= parse_zdb(theirs.stdout).bp_count, \
            f"our traversal visited fewer blocks with {os.path.basename(extra)} lost too:\n{ours!r}\n{theirs!r}"
        if expected:
            break
    assert expected, f"OpenZFS's zdb read {top} with all its children zeroed"


def test_read_write_import_is_refused_read_only_works(draid, oxzfs):
    vdevs = draid(WRAP, "import")
    tops = [(top, [f for k in kids for f in files(vdevs, k)]) for top, kids in draid_tops(vdevs, WRAP)]
    before = {f: hashlib.sha256(open(os.path.join(vdevs, f), "rb").read()).hexdigest() for f in sorted(os.listdir(vdevs))}
    alt = os.path.join(oxzfs.base, "alt", "draid")
    os.makedirs(alt, exist_ok=True)
    # The listing says what the import will allow, as OpenZFS words a pool it can only read.
    r = oxzfs.zpool("import", "-d", vdevs)
    assert r.returncode == 0 and re.search(r"action: The pool can be imported in read-only mode", r.stdout), repr(r)
    assert f"dRAID vdevs ({tops[0][0]})" in r.stdout, repr(r)
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
        # The distributed spares (draid2-0-0, one per dRAID vdev) are listed: in use where
        # ztest left one standing in for a child (ONLINE in the tree), else available.
        tree, _, listed = st.partition("\tspares")
        spares = re.findall(r"^\s+(draid\d+-\d+-\d+)\s+(\S+)", listed, re.M)
        in_tree = set(re.findall(r"^\s+(draid\d+-\d+-\d+)\s+ONLINE", tree, re.M))
        assert spares and all(s == ("INUSE" if n in in_tree else "AVAIL") for n, s in spares), st
    finally:
        assert oxzfs.export(WRAP).returncode == 0
