#!/usr/bin/env python3
"""check-layers.py — the engine's layers and the crates' module graphs, checked against the code.

    scripts/check-layers.py [--quiet]

Reads every `crate::module` path in crates/format/src, crates/engine/src, crates/cli/src and
crates/fuse/src, test code included (a test that reaches up ties the layers as an import does),
and fails when:
  * two or more modules of one crate import each other in a circle, or
  * an engine module imports one of a higher layer than its own (ENGINE_LAYERS below, the
    order of docs/ARCHITECTURE.md), or an engine module is in no layer.
Each offence names the edge and the file:line of the import. Exit 0 when clean, 1 otherwise.
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lowest first. A module may import its own layer and the ones below it; circles are refused
# even inside a layer.
ENGINE_LAYERS = [
    ("base", ["error", "nicenum", "range_tree", "tunables"]),
    ("vdev", ["vdev", "vdev::indirect", "vdev::inject", "vdev::iostat", "vdev::raidz", "vdev::draid", "vdev::sim"]),
    ("zio", ["zio"]),
    ("metaslab", ["metaslab"]),
    ("arc", ["arc", "l2arc"]),
    ("spa handle", ["dsl_scan", "spa_errlog", "spa_keystore", "spa"]),
    ("zil", ["zil"]),
    ("dmu", ["dmu", "zap", "dbuf", "ddt", "dmu_userused"]),
    ("dsl", ["dsl", "dsl_crypt", "dsl_pool", "dsl_prop", "dsl_space", "deadlist", "dsl_snapshot", "dsl_dataset", "dsl_rename", "dsl_promote", "dsl_userhold", "dsl_bookmark", "dmu_send"]),
    ("spa", ["spa_feature", "spa_log_spacemap", "spa_label", "spa_props", "spa_create", "spa_load", "txg", "spa_config", "vdev_removal", "vdev_indirect", "vdev_dtl", "vdev_attach", "vdev_rebuild", "dmu_recv"]),
    ("zpl", ["zfs_znode", "zfs_pflags", "zfs_posix_acl", "zfs_quota", "zfs_diff", "zpl", "zplw", "zfs_log", "zfs_replay"]),
    ("pool", ["traverse", "dsl_scan_queue", "dsl_scan_walk", "dsl_scrub", "vdev_removal_thread", "vdev_rebuild_thread", "vdev_trim", "vdev_probe", "pool", "pool_tests"]),
]

PATH_RE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)(?:::([a-z_][a-z0-9_]*))?")
USE_GROUP_RE = re.compile(r"\buse crate::\{([^}]*)\}")


def modules(src):
    """{module name: file} for a crate's src dir (nested modules as a::b)."""
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or f in ("lib.rs", "main.rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].replace(os.sep, "::")
            out[rel] = os.path.join(root, f)
    return out


def source_lines(path):
    return open(path, encoding="utf-8").read().split("\n")


def edges(src):
    """[(from module, to module, file, line number)] of one crate."""
    mods = modules(src)
    names = set(mods)
    out = []
    for m, path in sorted(mods.items()):
        for n, line in enumerate(source_lines(path), 1):
            code = line.split("//", 1)[0]
            targets = []
            for a, b in PATH_RE.findall(code):
                targets.append(f"{a}::{b}" if b and f"{a}::{b}" in names else a)
            for group in USE_GROUP_RE.findall(code):
                for item in group.split(","):
                    head = item.strip().split("::")[0].strip()
                    if head:
                        targets.append(head)
            for t in targets:
                if t in names and t != m and not m.startswith(t + "::"):
                    out.append((m, t, path, n))
    return out


def circles(es):
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {}
    for a, b, _, _ in es:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def check_crate(name, src, layers=None):
    problems = []
    es = edges(src)
    for comp in circles(es):
        inside = [e for e in es if e[0] in comp and e[1] in comp]
        problems.append(f"{name}: import circle of {len(comp)} modules: {', '.join(comp)}")
        for a, b, path, n in inside:
            problems.append(f"    {a} -> {b}  ({os.path.relpath(path, REPO)}:{n})")
    if layers:
        rank = {}
        for i, (_, mods) in enumerate(layers):
            for m in mods:
                rank[m] = i
        for m in sorted(modules(src)):
            if m not in rank:
                problems.append(f"{name}: module {m} is in no layer (add it to ENGINE_LAYERS in scripts/check-layers.py)")
        seen = set()
        for a, b, path, n in es:
            if a in rank and b in rank and rank[b] > rank[a] and (a, b) not in seen:
                seen.add((a, b))
                problems.append(
                    f"{name}: {a} (layer {layers[rank[a]][0]}) imports {b} of the higher layer {layers[rank[b]][0]}"
                    f"  ({os.path.relpath(path, REPO)}:{n})"
                )
    return problems, es


def main():
    quiet = "--quiet" in sys.argv[1:]
    problems = []
    p, es = check_crate("engine", os.path.join(REPO, "crates", "engine", "src"), ENGINE_LAYERS)
    problems += p
    p, cli_es = check_crate("cli", os.path.join(REPO, "crates", "cli", "src"))
    problems += p
    p, format_es = check_crate("format", os.path.join(REPO, "crates", "format", "src"))
    problems += p
    p, fuse_es = check_crate("fuse", os.path.join(REPO, "crates", "fuse", "src"))
    problems += p
    if problems:
        print("\n".join(problems))
        print(f"layers: {len(problems)} problem lines", file=sys.stderr)
        return 1
    if not quiet:
        print(f"layers: engine {len(ENGINE_LAYERS)} layers, {len(es)} imports, no circle, none upward; cli {len(cli_es)} imports, format {len(format_es)} imports, fuse {len(fuse_es)} imports, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
