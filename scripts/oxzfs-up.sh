#!/usr/bin/env bash
# oxzfs-up.sh — start oxzfs on the default pool of files and mount it (the README's "start").
#
#   sudo scripts/oxzfs-up.sh            # pool files under ./.oxzfs-data, mounted under ./.oxzfs-data/mnt
#
# Environment: OXZFS_DATA (pool directory, default ./.oxzfs-data), OXZFS_POOL (pool name, default
#              "tank"), OXZFS_MOUNT (altroot of the mounts, default $OXZFS_DATA/mnt),
#              OXZFS_SOCKET (daemon socket), OXZFS_BIN (use this oxzfs binary instead of building
#              target/release/oxzfs).
#
# On the first run it makes the pool: a mirror of two 128 MiB files for data, a separate
# intent-log device and an L2ARC cache device, with sample content in two filesystems and a
# snapshot. Every later run just imports it (read-only, for now) and mounts it. Stop with:
#   target/release/oxzfs daemon stop          (unmounts everything and exports the pool)
#
# >>> TEMPORARY: until oxzfs has its write path, the pool is CREATED BY zfs-fuse (installed by
# >>> install-deps.sh), which doubles as an independent check that oxzfs reads what another ZFS
# >>> wrote. Once the write path lands, creation moves to `oxzfs zpool create` / `oxzfs zfs create`
# >>> and the import below loses `-o readonly=on`.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
data=${OXZFS_DATA:-$repo/.oxzfs-data}
case "$data" in /*) ;; *) data=$repo/$data ;; esac
pool=${OXZFS_POOL:-tank}
mnt=${OXZFS_MOUNT:-$data/mnt}
export OXZFS_SOCKET=${OXZFS_SOCKET:-/run/oxzfs/oxzfs.sock}

if [ "$(id -u)" != 0 ]; then
  echo "oxzfs-up.sh: run as root (FUSE mounts with allow_other and the package installs need it)" >&2
  exit 1
fi
scripts/install-deps.sh
command -v fusermount3 >/dev/null || { apt-get install -y -q fuse3 >/dev/null; }
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
if [ -n "${OXZFS_BIN:-}" ]; then
  bin=$OXZFS_BIN
else
  echo "building oxzfs (release)..."
  cargo build --release -q -p oxzfs-cli
  bin=$repo/target/release/oxzfs
fi

# ---- first run: make the pool (with zfs-fuse until `oxzfs zpool create` exists) ----
if [ ! -f "$data/vdevs/.complete" ]; then
  echo "making the default pool '$pool' under $data/vdevs ..."
  rm -rf "$data/vdevs" "$data/gen"
  mkdir -p "$data/vdevs" "$data/gen"
  for f in d0 d1 log0 cache0; do truncate -s 128M "$data/vdevs/$f"; done
  # zfs-fuse takes cache devices only if they are block devices: back one by the file, so that
  # scanning $data/vdevs later finds its label like the others'.
  loop=$(losetup --find --show "$data/vdevs/cache0" 2>/dev/null || true)
  [ -n "$loop" ] || echo "(no loop device available: making the pool without a cache device)"
  python3 - "$data" "$pool" "$loop" <<'PY'
import os, subprocess, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "tools"))
import oracle_pools, populate
data, pool, loop = sys.argv[1], sys.argv[2], sys.argv[3]
v = os.path.join(data, "vdevs")
gen = os.path.join(data, "gen")
def run(*c):
    subprocess.run(c, check=True)
with oracle_pools.ZfsFuse(data):
    cache = ["cache", loop] if loop else []
    run("zpool", "create", "-f", "-R", gen, "-m", "/" + pool, pool,
        "mirror", f"{v}/d0", f"{v}/d1", "log", f"{v}/log0", *cache)
    run("zfs", "create", "-o", "compression=gzip", f"{pool}/docs")
    populate.populate(os.path.join(gen, pool), 1, "small")
    populate.populate(os.path.join(gen, pool, "docs"), 2, "wide")
    subprocess.run(["sync"])
    run("zfs", "snapshot", "-r", f"{pool}@first")
    populate.populate(os.path.join(gen, pool), 1, "change")
    subprocess.run(["sync"])
    run("zpool", "export", pool)
PY
  [ -n "$loop" ] && losetup -d "$loop"
  touch "$data/vdevs/.complete"
fi

# ---- every run: import read-only and mount ----
"$bin" daemon start
if "$bin" zpool list -H -o name 2>/dev/null | grep -qx "$pool"; then
  echo "'$pool' is already imported"
else
  "$bin" zpool import -d "$data/vdevs" -o readonly=on -R "$mnt" "$pool"
fi
"$bin" zpool status "$pool"
"$bin" zfs list -r -t all "$pool"
echo
echo "oxzfs is serving '$pool' (read-only) under $mnt:"
"$bin" zfs mount | sed 's/^/  /'
