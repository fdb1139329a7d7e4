#!/usr/bin/env python3
"""A model-based random file-system workload.

`run(root, seed, ops)` applies random operations both to the real tree under ROOT and to an
in-memory model, checking each operation's outcome (success or the same errno, the touched paths'
content and metadata) against the model as it goes; `verify(root, model)` compares a whole tree
with the model afterwards (e.g. after export and re-import). Deterministic per seed; every failure
names the seed, the operation number and the operation.

Model: path -> node. A node is {"type": "file"|"dir"|"symlink", ...}: files carry an inode id (hard
links share it) whose data and xattrs live in `inodes`; symlinks their target.

    python3 workload.py ROOT --seed N --ops M [--model-out FILE]
    python3 workload.py ROOT --check FILE
"""
import argparse
import errno
import json
import os
import random
import sys


class Mismatch(AssertionError):
    pass


class Model:
    def __init__(self):
        self.nodes = {"": {"type": "dir"}}
        self.inodes = {}
        self.next_ino = 1

    # ---- serialization
    def to_json(self):
        return {"nodes": self.nodes,
                "inodes": {str(k): {"data": v["data"].hex(), "xattrs": {n: x.hex() for n, x in v["xattrs"].items()},
                                    "mode": v["mode"]} for k, v in self.inodes.items()}}

    @staticmethod
    def from_json(j):
        m = Model()
        m.nodes = j["nodes"]
        m.inodes = {int(k): {"data": bytearray(bytes.fromhex(v["data"])),
                             "xattrs": {n: bytes.fromhex(x) for n, x in v["xattrs"].items()}, "mode": v["mode"]}
                    for k, v in j["inodes"].items()}
        m.next_ino = max(m.inodes, default=0) + 1
        return m

    # ---- queries
    def children(self, d):
        pre = d + "/" if d else ""
        return [p for p in self.nodes if p.startswith(pre) and p != d and "/" not in p[len(pre):]]

    def nlink(self, p):
        n = self.nodes[p]
        if n["type"] == "file":
            return sum(1 for q in self.nodes.values() if q.get("ino") == n["ino"])
        if n["type"] == "dir":
            return 2 + sum(1 for c in self.children(p) if self.nodes[c]["type"] == "dir")
        return 1


def parent(p):
    return p.rsplit("/", 1)[0] if "/" in p else ""


def real(root, p):
    return os.path.join(root, p) if p else root


def check_path(root, model, p, ctx):
    """The real object at p matches the model (or both are absent)."""
    rp = real(root, p)
    n = model.nodes.get(p)
    if n is None:
        if os.path.lexists(rp):
            raise Mismatch(f"{ctx}: {p} exists but the model has nothing there")
        return
    try:
        st = os.lstat(rp)
    except OSError as e:
        raise Mismatch(f"{ctx}: {p}: {e} (model: {n['type']})")
    import stat as S
    t = {"file": S.S_ISREG, "dir": S.S_ISDIR, "symlink": S.S_ISLNK}[n["type"]]
    if not t(st.st_mode):
        raise Mismatch(f"{ctx}: {p} has mode {oct(st.st_mode)}, model says {n['type']}")
    if n["type"] == "symlink":
        if os.readlink(rp) != n["target"]:
            raise Mismatch(f"{ctx}: {p} points to {os.readlink(rp)!r}, model {n['target']!r}")
        return
    if st.st_nlink != model.nlink(p):
        raise Mismatch(f"{ctx}: {p} has {st.st_nlink} links, model {model.nlink(p)}")
    if n["type"] == "file":
        ino = model.inodes[n["ino"]]
        with open(rp, "rb") as f:
            data = f.read()
        if data != bytes(ino["data"]):
            first = next((i for i, (a, b) in enumerate(zip(data, ino["data"])) if a != b), min(len(data), len(ino["data"])))
            raise Mismatch(f"{ctx}: {p}: {len(data)} bytes, model {len(ino['data'])}; first difference at {first}")
        if st.st_mode & 0o7777 != ino["mode"]:
            raise Mismatch(f"{ctx}: {p}: mode {oct(st.st_mode & 0o7777)}, model {oct(ino['mode'])}")
        names = sorted(x for x in os.listxattr(rp) if x.startswith("user."))
        if names != sorted(ino["xattrs"]):
            raise Mismatch(f"{ctx}: {p}: xattrs {names}, model {sorted(ino['xattrs'])}")
        for x in names:
            if os.getxattr(rp, x) != ino["xattrs"][x]:
                raise Mismatch(f"{ctx}: {p}: xattr {x} differs")
    else:
        got = sorted(os.listdir(rp))
        want = sorted(c.rsplit("/", 1)[-1] for c in model.children(p))
        if got != want:
            raise Mismatch(f"{ctx}: directory {p or '/'} lists {got[:10]}..., model {want[:10]}...")


def verify(root, model):
    """Differences between the whole tree and the model (an empty list when equal)."""
    out = []
    seen = set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        rel = "" if rel == "." else rel
        if rel == "" and ".zfs" in dirs:
            dirs.remove(".zfs")
        for n in dirs + files:
            seen.add(f"{rel}/{n}" if rel else n)
    for p in sorted(seen - set(model.nodes)):
        out.append(f"extra {p}")
    for p in sorted(model.nodes):
        try:
            check_path(root, model, p, "verify")
        except Mismatch as e:
            out.append(str(e))
    return out


NAMES = ["a", "b", "c", "dir", "file", "x" * 40, "long-" + "n" * 200, "ünïcödé", "sp ace", "q"]


def rand_data(rng, n):
    kind = rng.random()
    if kind < 0.3:
        return bytes(n)
    if kind < 0.6:
        return (bytes(rng.choice(b"abcdefgh") for _ in range(16)) * (n // 16 + 1))[:n]
    return rng.randbytes(n)


def pick(rng, model, kind=None):
    c = [p for p, n in model.nodes.items() if kind is None or n["type"] == kind]
    return rng.choice(c) if c else None


def new_path(rng, model):
    d = pick(rng, model, "dir")
    name = rng.choice(NAMES) + str(rng.randrange(20))
    return f"{d}/{name}" if d else name


def expect(fn, want_errno, ctx):
    """Run fn; its errno must be want_errno (None: success)."""
    try:
        fn()
        got = None
    except OSError as e:
        got = e.errno
    if got != want_errno:
        raise Mismatch(f"{ctx}: got {errno.errorcode.get(got, got) if got else 'success'}, "
                       f"model expects {errno.errorcode.get(want_errno, want_errno) if want_errno else 'success'}")


def step(root, model, rng, i):
    ops = ["create", "write", "write", "truncate", "rename", "link", "unlink", "mkdir", "rmdir", "symlink",
           "setxattr", "rmxattr", "chmod", "populate", "bigwrite"]
    op = rng.choice(ops)
    touched = []
    if op == "create":
        p = new_path(rng, model)
        exists = p in model.nodes
        data = rand_data(rng, rng.choice([0, 1, 100, 4095, 4096, 70000]))
        ctx = f"op {i} create {p}"
        if exists:
            expect(lambda: os.close(os.open(real(root, p), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)),
                   errno.EEXIST, ctx)
        else:
            def f():
                with open(real(root, p), "xb") as fh:
                    fh.write(data)
            expect(f, None, ctx)
            ino = model.next_ino
            model.next_ino += 1
            model.inodes[ino] = {"data": bytearray(data), "xattrs": {}, "mode": 0o644}
            model.nodes[p] = {"type": "file", "ino": ino}
        touched = [p, parent(p)]
    elif op in ("write", "bigwrite"):
        p = pick(rng, model, "file")
        if p is None:
            return op
        ino = model.inodes[model.nodes[p]["ino"]]
        size = len(ino["data"])
        off = rng.choice([0, size, rng.randrange(size + 1), size + rng.randrange(200000)])
        n = rng.choice([1, 17, 512, 4096, 131072, 300000]) if op == "write" else (1 << 20) * rng.randrange(1, 4)
        data = rand_data(rng, n)

        def f():
            fd = os.open(real(root, p), os.O_WRONLY)
            try:
                os.pwrite(fd, data, off)
            finally:
                os.close(fd)
        expect(f, None, f"op {i} write {p} @{off}+{n}")
        if off > size:
            ino["data"].extend(bytes(off - size))
        ino["data"][off:off + n] = data
        touched = [p]
    elif op == "truncate":
        p = pick(rng, model, "file")
        if p is None:
            return op
        ino = model.inodes[model.nodes[p]["ino"]]
        size = len(ino["data"])
        new = rng.choice([0, size // 2, size + 1, size + 100000, max(0, size - 1)])
        expect(lambda: os.truncate(real(root, p), new), None, f"op {i} truncate {p} {new}")
        if new < size:
            del ino["data"][new:]
        else:
            ino["data"].extend(bytes(new - size))
        touched = [p]
    elif op == "rename":
        s = pick(rng, model)
        if not s:
            return op
        d = new_path(rng, model)
        sn, dn = model.nodes[s], model.nodes.get(d)
        ctx = f"op {i} rename {s} -> {d}"
        want = None
        if d == s:
            want = None
        elif sn["type"] == "dir" and (d + "/").startswith(s + "/"):
            want = errno.EINVAL
        elif (s + "/").startswith(d + "/"):
            want = errno.ENOTEMPTY  # the target is an ancestor of the source: the VFS refuses first
        elif dn is not None:
            if dn["type"] == "dir" and sn["type"] != "dir":
                want = errno.EISDIR
            elif dn["type"] != "dir" and sn["type"] == "dir":
                want = errno.ENOTDIR
            elif dn["type"] == "dir" and model.children(d):
                want = errno.ENOTEMPTY
            elif dn.get("ino") is not None and dn.get("ino") == sn.get("ino"):
                want = None  # same inode: a no-op
        expect(lambda: os.rename(real(root, s), real(root, d)), want, ctx)
        if want is None and d != s and not (dn is not None and dn.get("ino") is not None and dn.get("ino") == sn.get("ino")):
            moved = {p: n for p, n in model.nodes.items() if p == s or p.startswith(s + "/")}
            if dn is not None:
                model.nodes.pop(d)
            for p, n in moved.items():
                model.nodes.pop(p)
            for p, n in moved.items():
                model.nodes[d + p[len(s):]] = n
        touched = [s, d, parent(s), parent(d)]
    elif op == "link":
        s = pick(rng, model, "file")
        if not s:
            return op
        d = new_path(rng, model)
        want = errno.EEXIST if d in model.nodes else None
        expect(lambda: os.link(real(root, s), real(root, d)), want, f"op {i} link {s} -> {d}")
        if want is None:
            model.nodes[d] = {"type": "file", "ino": model.nodes[s]["ino"]}
        touched = [s, d, parent(d)]
    elif op == "unlink":
        p = pick(rng, model)
        if not p:
            return op
        n = model.nodes[p]
        want = errno.EISDIR if n["type"] == "dir" else None
        expect(lambda: os.unlink(real(root, p)), want, f"op {i} unlink {p}")
        if want is None:
            model.nodes.pop(p)
        touched = [p, parent(p)]
    elif op == "mkdir":
        p = new_path(rng, model)
        want = errno.EEXIST if p in model.nodes else None
        expect(lambda: os.mkdir(real(root, p)), want, f"op {i} mkdir {p}")
        if want is None:
            model.nodes[p] = {"type": "dir"}
        touched = [p, parent(p)]
    elif op == "rmdir":
        p = pick(rng, model, "dir")
        if not p:
            return op
        want = errno.ENOTEMPTY if model.children(p) else None
        got_ok = []

        def f():
            os.rmdir(real(root, p))
            got_ok.append(1)
        # Linux may say EEXIST or ENOTEMPTY for a non-empty directory
        try:
            f()
            got = None
        except OSError as e:
            got = e.errno
        if not (got == want or (want == errno.ENOTEMPTY and got == errno.EEXIST)):
            raise Mismatch(f"op {i} rmdir {p}: got {got}, model expects {want}")
        if want is None:
            model.nodes.pop(p)
        touched = [p, parent(p)]
    elif op == "symlink":
        p = new_path(rng, model)
        target = rng.choice(["a", "../b", "/abs/path", "t" * 300, "dir/x"])
        want = errno.EEXIST if p in model.nodes else None
        expect(lambda: os.symlink(target, real(root, p)), want, f"op {i} symlink {p}")
        if want is None:
            model.nodes[p] = {"type": "symlink", "target": target}
        touched = [p, parent(p)]
    elif op in ("setxattr", "rmxattr"):
        p = pick(rng, model, "file")
        if not p:
            return op
        ino = model.inodes[model.nodes[p]["ino"]]
        name = "user." + rng.choice(["a", "b", "comment", "x" * 50])
        if op == "setxattr":
            size = rng.choice([0, 10, 300, 700, 5000, 40000])
            val = rand_data(rng, size if size <= getattr(model, "xattr_max", 40000) else 700)
            expect(lambda: os.setxattr(real(root, p), name, val), None, f"op {i} setxattr {p} {name}")
            ino["xattrs"][name] = val
        else:
            want = None if name in ino["xattrs"] else errno.ENODATA
            expect(lambda: os.removexattr(real(root, p), name), want, f"op {i} removexattr {p} {name}")
            ino["xattrs"].pop(name, None)
        touched = [p]
    elif op == "chmod":
        p = pick(rng, model, "file")
        if not p:
            return op
        mode = rng.choice([0o600, 0o644, 0o755, 0o400])
        expect(lambda: os.chmod(real(root, p), mode), None, f"op {i} chmod {p}")
        model.inodes[model.nodes[p]["ino"]]["mode"] = mode
        touched = [p]
    elif op == "populate":
        d = pick(rng, model, "dir")
        base = f"{d}/pop{i}" if d else f"pop{i}"
        if base in model.nodes:
            return op
        os.mkdir(real(root, base))
        model.nodes[base] = {"type": "dir"}
        for k in range(rng.randrange(5, 60)):
            p = f"{base}/f{k}"
            data = rand_data(rng, rng.randrange(0, 3000))
            with open(real(root, p), "wb") as fh:
                fh.write(data)
            ino = model.next_ino
            model.next_ino += 1
            model.inodes[ino] = {"data": bytearray(data), "xattrs": {}, "mode": 0o644}
            model.nodes[p] = {"type": "file", "ino": ino}
        touched = [base, parent(base)]
    for p in touched:
        if p is not None:
            check_path(root, model, p, f"seed {rng.seed_value} op {i} {op}")
    # drop inodes no name refers to
    live = {n.get("ino") for n in model.nodes.values()}
    for k in [k for k in model.inodes if k not in live]:
        model.inodes.pop(k)
    return op


def run(root, seed, ops, check_every=1, xattr_max=40000):
    """XATTR_MAX bounds xattr values: ZFS holds 64K, a kernel file system under the tools' own
    self-test far less (ext4: one block per inode)."""
    rng = random.Random(seed)
    rng.seed_value = seed
    model = Model()
    model.xattr_max = xattr_max
    for i in range(ops):
        try:
            step(root, model, rng, i)
        except Mismatch as e:
            raise Mismatch(f"seed {seed}: {e}") from None
    return model


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=500)
    ap.add_argument("--model-out")
    ap.add_argument("--check")
    a = ap.parse_args(argv[1:])
    if a.check:
        with open(a.check) as f:
            model = Model.from_json(json.load(f))
        diffs = verify(a.root, model)
        for d in diffs[:20]:
            print(d)
        return 1 if diffs else 0
    model = run(a.root, a.seed, a.ops)
    if a.model_out:
        with open(a.model_out, "w") as f:
            json.dump(model.to_json(), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
