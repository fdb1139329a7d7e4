#!/usr/bin/env python3
"""oracle_pools.py [WORKDIR] — make the pools oxzfs is checked against, with what the oracles say of them.

Two writers other than oxzfs make pools here, once, cached under WORKDIR (default $OXZFS_TEST_DIR or
/var/tmp/oxzfs-test); a pool is made again only when its recipe changes (RECIPE) or it is incomplete.

zfs-fuse pools (pool version 23, ZPL 4), WORKDIR/zfs-fuse/<pool>/:
    vdevs/d0 ...               the exported pool's device files (sparse, DEV_SIZE each)
    <ds>@s1.manifest.jsonl     content of dataset <ds> ('/' written as '_') at snapshot s1
    <ds>.manifest.jsonl        content after the `change` profile ran on the live dataset
    zdb-blocks.txt             OpenZFS 2.1 `zdb -e -p vdevs -bb <pool>` (stdout)
    zfs-list.txt, zpool-status.txt, info.json (layout, datasets, properties), .complete (recipe stamp)
  The recipe (checked by hand on this machine's kind, Debian 12, zfs-fuse 0.7.0):
    * the daemon is `zfs-fuse --pidfile FILE` as root; it daemonizes at once but answers on
      /var/run/zfs/zfs_socket only a moment later: poll `zpool list` until it succeeds. A stale pid
      file (SIGTERM leaves it behind) makes the next start exit 1 silently: remove it first.
    * `zpool create -f -R GENMNT -m /<pool> [-o ashift=9] <pool> <vdevs>` stores mountpoint=/<pool> and
      mounts below GENMNT; `zfs create -o prop=value` for children; files default to ashift=12.
    * zfs-fuse has no .zfs directory and no xattrs (EOPNOTSUPP): a snapshot's manifest is taken of the
      live dataset just before `zfs snapshot -r`, with nothing written in between.
    * `zpool export` unmounts; then SIGTERM to the daemon stops it (we stop it only if we started it).

ztest pools (version 5000 with feature flags), WORKDIR/ztest/<pool>/:
    vdevs/*  zdb-blocks.txt  zdb-datasets.txt  ztest.log  info.json  .complete
  `/opt/openzfs/bin/ztest` runs a short random workload in several shapes (mirror, raidz1-3, dRAID, special
  class on/off, ashift 9/12); the pool it leaves behind is read by OpenZFS zdb.

Shared fixtures (optional, ../shared/fixtures): decompressed with `zstd -d --sparse` into
WORKDIR/fixtures/<name>/vdevs/.
"""
import concurrent.futures
import contextlib
import fcntl
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import manifest as manifest_mod  # noqa: E402
import populate as populate_mod  # noqa: E402

RECIPE = "oracle-pools-2"
DEV_SIZE = 256 << 20
OPENZFS_BIN = os.environ.get("OXZFS_OPENZFS_BIN", "/opt/openzfs/bin")
ZDB = os.path.join(OPENZFS_BIN, "zdb")
ZTEST = os.path.join(OPENZFS_BIN, "ztest")

# name, vdev layout (type, device count), pool create options, datasets:
#   (relative name, properties, [(profile, seed), ...])  ("" is the pool's root dataset)
ZFS_FUSE_POOLS = [
    dict(name="oxt-single", vdev=("disk", 1), create=["-o", "ashift=9"], datasets=[
        ("", {}, [("small", 1)]),
        ("gz", {"compression": "gzip", "checksum": "sha256"}, [("small", 2)]),
    ]),
    dict(name="oxt-mirror", vdev=("mirror", 2), create=[], datasets=[
        ("", {}, [("small", 3)]),
        ("lz", {"compression": "lzjb"}, [("wide", 4)]),
    ]),
    dict(name="oxt-raidz1", vdev=("raidz1", 3), create=["-o", "ashift=9"], datasets=[
        ("", {"recordsize": "16K"}, [("small", 5)]),
        ("c2", {"copies": "2", "compression": "on"}, [("small", 6)]),
    ]),
    dict(name="oxt-raidz2", vdev=("raidz2", 4), create=[], datasets=[
        ("", {"compression": "on"}, [("small", 7)]),
        ("rs", {"recordsize": "16K", "compression": "gzip", "checksum": "sha256"}, [("small", 8)]),
    ]),
    dict(name="oxt-raidz3", vdev=("raidz3", 5), create=[], datasets=[
        ("", {"compression": "on"}, [("small", 9), ("big", 10)]),
    ]),
]

_COMMON = ["-s", "128M", "-d", "3", "-t", "2", "-T", "10", "-P", "10", "-k", "0"]
ZTEST_POOLS = [
    dict(name="zt-mirror-a9", args=["-v", "2", "-m", "2", "-r", "1", "-K", "raidz", "-a", "9", "-C", "special=off"]),
    dict(name="zt-raidz1-a12", args=["-v", "1", "-m", "1", "-r", "3", "-R", "1", "-K", "raidz", "-a", "12",
                                     "-C", "special=on"]),
    dict(name="zt-raidz2-a9", args=["-v", "1", "-m", "1", "-r", "4", "-R", "2", "-K", "raidz", "-a", "9",
                                    "-C", "special=on"]),
    dict(name="zt-raidz3-a12", args=["-v", "1", "-m", "1", "-r", "5", "-R", "3", "-K", "raidz", "-a", "12",
                                     "-C", "special=off"]),
    # dRAID (ztest's default raid kind is random between raidz and draid): 4 data + 1 parity
    # over 6 children with one distributed spare (each group fills one row), and 3 data + 2
    # parity over 7 children, one spare (6 groups per slice: groups wrap from row to row).
    dict(name="zt-draid1-a12", args=["-v", "1", "-m", "1", "-r", "6", "-R", "1", "-K", "draid", "-D", "4", "-S", "1",
                                     "-a", "12", "-C", "special=off"]),
    dict(name="zt-draid2-wrap", args=["-v", "1", "-m", "1", "-r", "7", "-R", "2", "-K", "draid", "-D", "3", "-S", "1",
                                      "-a", "12", "-C", "special=on"]),
    # Triple parity over 12 children with two distributed spares (5 groups of 8 per slice).
    dict(name="zt-draid3-spares2", args=["-v", "1", "-m", "1", "-r", "12", "-R", "3", "-K", "draid", "-D", "5", "-S", "2",
                                         "-a", "12", "-C", "special=off"]),
    # Native encryption: ztest encrypts each dataset it makes with a chance of one half (a
    # random suite, its raw key ZTEST_KEY); eight datasets make a pool without one rare
    # (1 in 256), and such a run is made again (`encrypted`).
    dict(name="zt-crypt", args=["-v", "1", "-m", "0", "-r", "4", "-R", "1", "-K", "raidz", "-a", "12",
                                "-C", "special=off"], after=["-d", "8", "-t", "8"], encrypted=True),
]
# The raw wrapping key of every encrypted dataset ztest makes (ztest_wkeydata).
ZTEST_KEY = b"abcdefghijklmnopqrstuvwxyz012345"


def crypto_keys(vdevs, pool):
    """The DSL crypto key objects of a pool, from OpenZFS's zdb dump of its MOS: {object: {name:
    value}} (DSL_CRYPTO_SUITE, DSL_CRYPTO_ROOT_DDOBJ, keyformat, ...), and the DSL directories'
    and datasets' links: ({dir: crypto key object}, {dataset object: dir})."""
    r = run([ZDB, "-e", "-p", vdevs, "-dddd", pool, "0:-1"], check=False)
    keys, dir_key, ds_dir = {}, {}, {}
    obj = None
    for line in r.stdout.splitlines():
        m = re.match(r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[\d.]+\s+(.*)$", line)
        if m:
            obj = int(m.group(1))
            continue
        m = re.match(r"^\s+([A-Za-z_.:0-9]+) = (\S+)", line)
        if not m or obj is None:
            continue
        k, v = m.group(1), m.group(2)
        if k.startswith("DSL_CRYPTO_") or k in ("keyformat", "pbkdf2iters", "pbkdf2salt"):
            keys.setdefault(obj, {})[k] = v
        elif k == "com.datto:crypto_key_obj":
            dir_key[obj] = int(v)
        elif k == "dir_obj":
            ds_dir[obj] = int(v)
    return keys, dir_key, ds_dir

INSTALL_HINT = "run scripts/install-deps.sh (as root) to install it"


class MissingTool(RuntimeError):
    pass


def log(msg):
    sys.stderr.write(f"[oracle-pools] {msg}\n")
    sys.stderr.flush()


def workdir():
    return os.environ.get("OXZFS_TEST_DIR", "/var/tmp/oxzfs-test")


def run(cmd, check=True, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def require(*tools):
    """Raise MissingTool naming each missing program and what installs it."""
    where = {"zfs-fuse": "Debian package zfs-fuse", "zpool": "Debian package zfs-fuse",
             "zfs": "Debian package zfs-fuse", ZDB: "OpenZFS 2.1 userspace (zfsutils-linux) under /opt/openzfs",
             ZTEST: "OpenZFS 2.1 ztest (zfs-test) under /opt/openzfs", "zstd": "Debian package zstd",
             "fusermount3": "Debian package fuse3"}
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise MissingTool("missing: " + "; ".join(f"{t} ({where.get(t, 'see scripts/install-deps.sh')})"
                                                   for t in missing) + f" — {INSTALL_HINT}")


@contextlib.contextmanager
def locked(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def is_complete(d):
    try:
        with open(os.path.join(d, ".complete")) as f:
            return f.read().strip() == RECIPE
    except OSError:
        return False


def mark_complete(d):
    with open(os.path.join(d, ".complete"), "w") as f:
        f.write(RECIPE + "\n")


def ds_file(ds):
    return ds.replace("/", "_")


def zdb_blocks(vdevdir, pool):
    """OpenZFS zdb -bb of an exported pool: (stdout, returncode). Progress goes to stderr."""
    r = run([ZDB, "-e", "-p", vdevdir, "-bb", pool], check=False)
    return r.stdout, r.returncode


# ---------------------------------------------------------------------------------------------- zfs-fuse

# zfs-fuse is one daemon for the whole machine (/var/run/zfs/zfs_socket, pools by name): whoever
# starts it or talks to it holds this lock meanwhile, so parallel test workers take turns.
ZFS_FUSE_LOCK = os.environ.get("OXZFS_ZFS_FUSE_LOCK", "/run/lock/oxzfs-zfs-fuse.lock")


class ZfsFuse:
    """The zfs-fuse daemon, held under ZFS_FUSE_LOCK from enter to exit: started if not already
    running, stopped at the end only if we started it."""

    def __init__(self, work):
        self.pidfile = os.path.join(work, "zfs-fuse.pid")
        self.started = False
        self.lock = None

    @staticmethod
    def alive():
        return run(["zpool", "list"], check=False).returncode == 0

    def __enter__(self):
        require("zfs-fuse", "zpool", "zfs")
        self.lock = locked(ZFS_FUSE_LOCK)
        self.lock.__enter__()
        try:
            return self._start()
        except BaseException:
            self._unlock()
            raise

    def _unlock(self):
        if self.lock is not None:
            lock, self.lock = self.lock, None
            lock.__exit__(None, None, None)

    def _start(self):
        if self.alive():
            return self
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pidfile)
        r = run(["zfs-fuse", "--pidfile", self.pidfile], check=False)
        if r.returncode != 0:
            raise RuntimeError(f"zfs-fuse did not start (exit {r.returncode}): {r.stderr}")
        self.started = True
        deadline = time.time() + 30
        while not self.alive():
            if time.time() > deadline:
                raise RuntimeError("zfs-fuse started but does not answer on /var/run/zfs/zfs_socket")
            time.sleep(0.3)
        return self

    def __exit__(self, *exc):
        try:
            self._stop()
        finally:
            self._unlock()
        return False

    def _stop(self):
        if not self.started:
            return
        try:
            with open(self.pidfile) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pidfile)


def _vdev_args(kind, devs):
    if kind == "disk":
        return list(devs)
    return [kind] + list(devs)


def make_zfs_fuse_pool(work, spec):
    name = spec["name"]
    d = os.path.join(work, "zfs-fuse", name)
    vdevs = os.path.join(d, "vdevs")
    gen = os.path.join(work, "gen-mnt")
    if run(["zpool", "list", name], check=False).returncode == 0:
        run(["zpool", "destroy", "-f", name], check=False)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(vdevs)
    os.makedirs(gen, exist_ok=True)
    kind, n = spec["vdev"]
    devs = []
    for i in range(n):
        p = os.path.join(vdevs, f"d{i}")
        with open(p, "wb") as f:
            f.truncate(DEV_SIZE)
        devs.append(p)
    log(f"zfs-fuse: creating {name} ({kind} of {n})")
    run(["zpool", "create", "-f", "-R", gen, "-m", "/" + name] + spec["create"] + [name]
        + _vdev_args(kind, devs))
    try:
        datasets = []
        for rel, props, _ in spec["datasets"]:
            ds = name + ("/" + rel if rel else "")
            if rel:
                cmd = ["zfs", "create"]
                for k, v in props.items():
                    cmd += ["-o", f"{k}={v}"]
                run(cmd + [ds])
            else:
                for k, v in props.items():
                    run(["zfs", "set", f"{k}={v}", ds])
            datasets.append(ds)
        children = {ds: [os.path.relpath(c, ds) for c in datasets if c.startswith(ds + "/")]
                    for ds in datasets}
        mounts = {ds: os.path.join(gen, ds) for ds in datasets}
        for (rel, _, profiles), ds in zip(spec["datasets"], datasets):
            for profile, seed in profiles:
                populate_mod.populate(mounts[ds], seed, profile)
        run(["sync"])
        for ds in datasets:
            with open(os.path.join(d, f"{ds_file(ds)}@s1.manifest.jsonl"), "w", encoding="utf-8") as f:
                f.write(manifest_mod.dumps(manifest_mod.manifest(mounts[ds], children[ds])))
        run(["zfs", "snapshot", "-r", f"{name}@s1"])
        for (rel, _, profiles), ds in zip(spec["datasets"], datasets):
            populate_mod.populate(mounts[ds], profiles[0][1], "change")
        run(["sync"])
        for ds in datasets:
            with open(os.path.join(d, f"{ds_file(ds)}.manifest.jsonl"), "w", encoding="utf-8") as f:
                f.write(manifest_mod.dumps(manifest_mod.manifest(mounts[ds], children[ds])))
        with open(os.path.join(d, "zfs-list.txt"), "w") as f:
            f.write(run(["zfs", "list", "-t", "all", "-o",
                         "name,used,refer,compress,checksum,recsize,copies,mountpoint", "-r", name]).stdout)
        with open(os.path.join(d, "zpool-status.txt"), "w") as f:
            f.write(run(["zpool", "status", name]).stdout)
    finally:
        run(["zpool", "export", name], check=False)
    if run(["zpool", "list", name], check=False).returncode == 0:
        raise RuntimeError(f"zfs-fuse could not export {name}")
    out, rc = zdb_blocks(vdevs, name)
    with open(os.path.join(d, "zdb-blocks.txt"), "w") as f:
        f.write(out)
    if rc != 0 or "No leaks" not in out:
        raise RuntimeError(f"OpenZFS zdb -bb is not happy with zfs-fuse pool {name} (exit {rc}):\n{out}")
    info = dict(pool=name, kind="zfs-fuse", vdev=list(spec["vdev"]), devices=[os.path.basename(p) for p in devs],
                datasets=[dict(name=ds, props=props, children=children[ds], snapshots=["s1"],
                               manifest=f"{ds_file(ds)}.manifest.jsonl",
                               snapshot_manifests={"s1": f"{ds_file(ds)}@s1.manifest.jsonl"})
                          for ds, (_, props, _) in zip(datasets, spec["datasets"])])
    with open(os.path.join(d, "info.json"), "w") as f:
        json.dump(info, f, indent=1)
    mark_complete(d)
    return d


def zfs_fuse_pools(work=None):
    """Make (or reuse) every zfs-fuse pool; returns {name: directory}."""
    work = work or workdir()
    out = {}
    with locked(os.path.join(work, ".lock")):
        todo = [s for s in ZFS_FUSE_POOLS if not is_complete(os.path.join(work, "zfs-fuse", s["name"]))]
        if todo:
            require("zfs-fuse", "zpool", "zfs", ZDB)
            with ZfsFuse(work):
                for spec in todo:
                    make_zfs_fuse_pool(work, spec)
        for s in ZFS_FUSE_POOLS:
            out[s["name"]] = os.path.join(work, "zfs-fuse", s["name"])
    return out


# ---------------------------------------------------------------------------------------------- ztest

def make_ztest_pool(work, spec):
    name = spec["name"]
    d = os.path.join(work, "ztest", name)
    vdevs = os.path.join(d, "vdevs")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(vdevs)
    log(f"ztest: {name} {' '.join(spec['args'])}")
    cmd = [ZTEST] + spec["args"] + _COMMON + spec.get("after", []) + ["-f", vdevs, "-p", name]
    # ztest is a stress test of OpenZFS itself and, rarely, trips over its own assertions;
    # a failed run is retried on fresh files before the oracle is declared unavailable.
    for attempt in range(3):
        if attempt:
            shutil.rmtree(vdevs, ignore_errors=True)
            os.makedirs(vdevs)
        # ztest verifies its pool with OpenZFS's zdb -bcc after creating it, after freezing it and
        # after every pass: two thirds of its run time and most of its CPU. We run zdb ourselves on
        # the finished pool (below), so ztest's own runs are pointed at `true` (ZDB_PATH).
        r = run(cmd, check=False, env=dict(os.environ, ZDB_PATH=shutil.which("true") or "/bin/true"))
        with open(os.path.join(d, "ztest.log"), "a") as f:
            f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
        if r.returncode == 0 and spec.get("encrypted") and not crypto_keys(vdevs, name)[0]:
            log(f"ztest: {name} came out with no encrypted dataset; again")
            r.returncode = -1
            continue
        if r.returncode == 0:
            break
    if r.returncode != 0:
        raise RuntimeError(f"ztest failed (exit {r.returncode}) three times, see {d}/ztest.log")
    # ztest keeps its own config cache next to the vdev files; it is not a device
    for extra in glob.glob(os.path.join(vdevs, "*.cache")):
        shutil.move(extra, d)
    out, rc = zdb_blocks(vdevs, name)
    with open(os.path.join(d, "zdb-blocks.txt"), "w") as f:
        f.write(out)
    if rc != 0 or "bp count" not in out:
        raise RuntimeError(f"OpenZFS zdb -bb failed on ztest pool {name} (exit {rc}):\n{out}")
    r = run([ZDB, "-e", "-p", vdevs, "-d", name], check=False)
    with open(os.path.join(d, "zdb-datasets.txt"), "w") as f:
        f.write(r.stdout)
    info = dict(pool=name, kind="ztest", args=spec["args"] + _COMMON + spec.get("after", []),
                devices=sorted(os.listdir(vdevs)), datasets=ztest_datasets(r.stdout))
    with open(os.path.join(d, "info.json"), "w") as f:
        json.dump(info, f, indent=1)
    mark_complete(d)
    return d


def ztest_datasets(zdb_d):
    """Dataset names (not snapshots, not the MOS) from `zdb -d` lines 'Dataset NAME [ZPL], ID ...'."""
    names = []
    for line in zdb_d.splitlines():
        if line.startswith("Dataset ") and " [META]" not in line:
            name = line.split()[1]
            if "@" not in name:
                names.append(name)
    return sorted(names)


def ztest_pools(work=None):
    work = work or workdir()
    out = {}
    with locked(os.path.join(work, ".lock")):
        todo = [s for s in ZTEST_POOLS if not is_complete(os.path.join(work, "ztest", s["name"]))]
        if todo:
            require(ZTEST, ZDB)
            # ztest mostly waits (its run time is fixed by -T), so the pools are made side by side
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(todo)) as ex:
                for f in [ex.submit(make_ztest_pool, work, spec) for spec in todo]:
                    f.result()
        for s in ZTEST_POOLS:
            out[s["name"]] = os.path.join(work, "ztest", s["name"])
    return out


# ---------------------------------------------------------------------------------------------- fixtures

def shared_fixtures(src, work=None):
    """Decompress each fixture folder of SRC into WORKDIR/fixtures/<name>/vdevs; {name: (srcdir, vdevdir)}."""
    work = work or workdir()
    out = {}
    with locked(os.path.join(work, ".lock")):
        for fdir in sorted(glob.glob(os.path.join(src, "*"))):
            zsts = sorted(glob.glob(os.path.join(fdir, "*.zst")))
            if not zsts:
                continue
            name = os.path.basename(fdir)
            d = os.path.join(work, "fixtures", name)
            vdevs = os.path.join(d, "vdevs")
            if not is_complete(d):
                require("zstd")
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(vdevs)
                for z in zsts:
                    dst = os.path.join(vdevs, os.path.basename(z)[:-4])
                    run(["zstd", "-q", "-d", "--sparse", z, "-o", dst])
                mark_complete(d)
            out[name] = (fdir, vdevs)
    return out


def main(argv):
    work = argv[1] if len(argv) > 1 else workdir()
    for name, d in zfs_fuse_pools(work).items():
        print(f"zfs-fuse {name}: {d}")
    for name, d in ztest_pools(work).items():
        print(f"ztest {name}: {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
