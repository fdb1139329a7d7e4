#!/usr/bin/env bash
# oxzfs-up.sh — start oxzfs on the default pool of files and mount it (the README's "start").
#
#   sudo scripts/oxzfs-up.sh            # pool files under ./.oxzfs-data, mounted under ./.oxzfs-data/mnt
#
# Environment: OXZFS_DATA (pool directory), OXZFS_POOL (pool name, default "tank"),
#              OXZFS_MOUNT (altroot of the mounts), OXZFS_SOCKET (daemon socket).
#
# On the first run it makes the pool: a mirror of two 128 MiB files for data plus a separate
# intent-log device, with sample content and a snapshot. oxzfs's own `zpool create` arrives with
# the write path; until then the pool is written by zfs-fuse (installed by install-deps.sh),
# which is also an independent check that oxzfs reads what another ZFS wrote.
# Every later run just imports (read-only, for now) and mounts it. Stop with:
#   target/release/oxzfs daemon stop
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
data=${OXZFS_DATA:-$repo/.oxzfs-data}
pool=${OXZFS_POOL:-tank}
mnt=${OXZFS_MOUNT:-$data/mnt}
export OXZFS_SOCKET=${OXZFS_SOCKET:-/run/oxzfs/oxzfs.sock}

if [ "$(id -u)" != 0 ]; then
  echo "oxzfs-up.sh: run as root (FUSE mounts with allow_other and the package installs need it)" >&2
  exit 1
fi
scripts/install-deps.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
echo "building oxzfs (release)..."
cargo build --release -q -p oxzfs-cli
bin=$repo/target/release/oxzfs

if [ ! -f "$data/vdevs/.complete" ]; then
  echo "making the default pool '$pool' under $data/vdevs ..."
  rm -rf "$data/vdevs" "$data/gen"
  mkdir -p "$data/vdevs" "$data/gen"
  for f in d0 d1 log0; do truncate -s 128M "$data/vdevs/$f"; done
  python3 - "$data" "$pool" <<'PY'
import os, subprocess, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "tools"))
import oracle_pools, populate
data, pool = sys.argv[1], sys.argv[2]
v = os.path.join(data, "vdevs")
gen = os.path.join(data, "gen")
def run(*c):
    subprocess.run(c, check=True)
with oracle_pools.ZfsFuse(data):
    run("zpool", "create", "-f", "-R", gen, "-m", "/" + pool, pool,
        "mirror", f"{v}/d0", f"{v}/d1", "log", f"{v}/log0")
    run("zfs", "create", "-o", "compression=gzip", f"{pool}/docs")
    populate.populate(os.path.join(gen, pool), 1, "small")
    populate.populate(os.path.join(gen, pool, "docs"), 2, "wide")
    run("zfs", "snapshot", "-r", f"{pool}@first")
    populate.populate(os.path.join(gen, pool), 1, "change")
    run("zpool", "export", pool)
PY
  touch "$data/vdevs/.complete"
fi

"$bin" daemon start
if "$bin" zpool list -H -o name 2>/dev/null | grep -qx "$pool"; then
  echo "'$pool' is already imported"
else
  "$bin" zpool import -d "$data/vdevs" -o readonly=on -R "$mnt" "$pool"
fi
"$bin" zpool status "$pool"
"$bin" zfs list -r -t all "$pool"
echo
echo "oxzfs is serving '$pool' (read-only) under $mnt"
