#!/usr/bin/env python3
"""zdbparse.py FILE — parse the block statistics that `zdb -b`/`-bb` (OpenZFS 2.1) prints.

The part of zdb's output this reads:

        bp count:                   227
        ganged count:                 0
        bp logical:             8557568      avg:  37698
        bp physical:            7574016      avg:  33365     compression:   1.13
        bp allocated:           7752192      avg:  34150     compression:   1.10
        bp deduped:                   0    ref>1:      0   deduplication:   1.00
        Normal class:           7752192     used: 12.53%
        ...
    Blocks  LSIZE   PSIZE   ASIZE     avg    comp   %Total  Type
         -      -       -       -       -       -        -  unallocated
         1    512     512   1.50K   1.50K    1.00     0.02  object directory
        ...
       227  8.16M   7.22M   7.39M   33.3K    1.13   100.00  Total

parse(text) gives a ZdbBlocks with the counters (ints, None when absent) and the per-type table as a
list of (blocks, lsize, psize, asize, avg, comp, pct, type) string tuples in zdb's order (with -bbb
and more, the per-level rows "L1 ZFS plain file" come out the same way). Run as a script it prints
the parse as JSON.
"""
import json
import re
import sys
from dataclasses import dataclass, field, asdict

COUNTERS = {
    "bp count": "bp_count",
    "ganged count": "ganged_count",
    "bp logical": "bp_logical",
    "bp physical": "bp_physical",
    "bp allocated": "bp_allocated",
    "bp deduped": "bp_deduped",
}
CLASSES = ("Normal class", "Special class", "Dedup class", "Embedded log class")


@dataclass
class ZdbBlocks:
    bp_count: int = None
    ganged_count: int = None
    bp_logical: int = None
    bp_physical: int = None
    bp_allocated: int = None
    bp_deduped: int = None
    classes: dict = field(default_factory=dict)
    table: list = field(default_factory=list)
    leaks: bool = None

    def totals(self):
        """The four numbers a full traversal must reproduce."""
        return {"bp count": self.bp_count, "bp logical": self.bp_logical,
                "bp physical": self.bp_physical, "bp allocated": self.bp_allocated}

    def rows(self):
        """Table rows that counted something (zdb prints '-' rows for empty types)."""
        return [r for r in self.table if r[0] != "-"]


_COUNTER_RE = re.compile(r"^\s*(bp count|ganged count|bp logical|bp physical|bp allocated|bp deduped):\s+(\d+)")
_CLASS_RE = re.compile(r"^\s*(Normal class|Special class|Dedup class|Embedded log class):?\s+(\d+)")
_HEADER_RE = re.compile(r"^Blocks\s+LSIZE\s+PSIZE\s+ASIZE\s+avg\s+comp\s+%Total\s+Type\s*$")


def parse(text):
    z = ZdbBlocks()
    in_table = False
    for line in text.splitlines():
        if in_table:
            if not line.strip():
                in_table = False
                continue
            parts = line.split(None, 7)
            if len(parts) != 8:
                in_table = False
                continue
            z.table.append(tuple(parts))
            if parts[7] == "Total":
                in_table = False
            continue
        m = _COUNTER_RE.match(line)
        if m:
            setattr(z, COUNTERS[m.group(1)], int(m.group(2)))
            continue
        m = _CLASS_RE.match(line)
        if m:
            z.classes[m.group(1)] = int(m.group(2))
            continue
        if _HEADER_RE.match(line.strip()):
            in_table = True
            continue
        if "No leaks" in line:
            z.leaks = False
        elif re.search(r"\bleaked\b", line) and "verify nothing leaked" not in line:
            z.leaks = True
    return z


_OBJ_RE = re.compile(r"^\s+(-?\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[\d.]+\s+(\S.*)$")
_ENTRY_RE = re.compile(r"^\t\t(.+) = (\d+) \(type: ([^)]*)\)\s*$")
_ROOT_RE = re.compile(r"^\t\tROOT = (\d+)\s*$")


def zpl_paths(text):
    """{path: object} for every entry of a ZPL dataset, from `zdb -dddd POOL/DS` (directory ZAPs, from ROOT)."""
    dirs, root, cur, header = {}, None, None, False
    for line in text.splitlines():
        if line.strip().startswith("Object  lvl"):
            header = True
            continue
        if header:
            header = False
            m = _OBJ_RE.match(line)
            cur = int(m.group(1)) if m else None
            continue
        m = _ROOT_RE.match(line)
        if m and root is None:
            root = int(m.group(1))
            continue
        m = _ENTRY_RE.match(line)
        if m and cur is not None:
            dirs.setdefault(cur, {})[m.group(1)] = int(m.group(2))
    paths = {}
    if root is None:
        return paths
    stack = [("", root)]
    seen = set()
    while stack:
        prefix, obj = stack.pop()
        if obj in seen:
            continue
        seen.add(obj)
        for name, child in dirs.get(obj, {}).items():
            p = f"{prefix}/{name}" if prefix else name
            paths[p] = child
            if child in dirs:
                stack.append((p, child))
    return paths


def znodes(text):
    """{object: {"type", "dnsize", "bonus", attribute: value, "sa_xattrs": {name: value}}} from
    `zdb -dddd POOL/DS`: the znode attributes zdb decodes (uid, gid, times, gen, mode, size,
    parent, links, pflags, xattr, rdev, target) as the strings it prints."""
    out, cur, header, in_sa = {}, None, False, False
    for line in text.splitlines():
        if line.strip().startswith("Object  lvl"):
            header, in_sa = True, False
            continue
        if header:
            header = False
            f = line.split()
            if len(f) >= 9 and f[0].lstrip("-").isdigit():
                cur = out.setdefault(int(f[0]), {"type": " ".join(f[8:]), "dnsize": f[5], "sa_xattrs": {}})
            else:
                cur = None
            continue
        if cur is None:
            continue
        m = re.match(r"^\s+(\d+)\s+bonus\s+(.*)$", line)
        if m:
            cur["bonus"] = m.group(2).strip()
            cur["bonuslen"] = int(m.group(1))
            continue
        if line.startswith("\tSA xattrs:"):
            in_sa = True
            continue
        if in_sa and line.startswith("\t\t") and " = " in line:
            k, v = line[2:].split(" = ", 1)
            cur["sa_xattrs"][k] = v
            continue
        if line.startswith("\t") and not line.startswith("\t\t"):
            in_sa = False
            f = line[1:].split(None, 1)
            if len(f) == 2 and f[0] in ("uid", "gid", "atime", "mtime", "ctime", "crtime", "gen", "mode", "size",
                                        "parent", "links", "pflags", "xattr", "rdev", "target", "path"):
                cur[f[0]] = f[1].strip() if f[0] != "target" else f[1].rstrip("\n")
    return out


_L0_RE = re.compile(r"^\s+([0-9a-f]+)\s+L0\s+((?:\d+:[0-9a-f]+:[0-9a-f]+\s+)+)(\S+)L/(\S+)P")


def l0_blocks(text):
    """[(file offset, [(vdev, offset, asize), ...], lsize, psize)] from the 'Indirect blocks' list of
    `zdb -ddddd POOL/DS OBJ`; DVA offsets are from the start of the vdev's allocatable area (after the
    4 MiB of labels L0, L1 and the boot block)."""
    out = []
    for line in text.splitlines():
        m = _L0_RE.match(line)
        if not m:
            continue
        dvas = []
        for d in m.group(2).split():
            v, off, asize = d.split(":")
            dvas.append((int(v), int(off, 16), int(asize, 16)))
        out.append((int(m.group(1), 16), dvas, int(m.group(3), 16), int(m.group(4), 16)))
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: zdbparse.py FILE  (zdb -bb output)\n")
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        print(json.dumps(asdict(parse(f.read())), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
