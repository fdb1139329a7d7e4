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
# On the first run oxzfs makes the pool itself, a small hybrid storage pool of sparse files under
# $OXZFS_DATA/pool: a raidz1 of three 512 MiB files for data, a mirrored special vdev for metadata
# and small blocks, a separate intent-log device and an L2ARC cache device; plus a file system
# "tank/docs" with gzip compression and some sample files. Every later run imports it read-write
# and mounts it. Stop with:
#   target/release/oxzfs daemon stop          (unmounts everything and exports the pool)
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

# ---- first run: make the pool with oxzfs ----
"$bin" daemon start
if [ ! -f "$data/pool/.complete" ]; then
  echo "making the default pool '$pool' under $data/pool ..."
  rm -rf "$data/pool"
  mkdir -p "$data/pool"
  for f in d0 d1 d2; do truncate -s 512M "$data/pool/$f"; done
  for f in special0 special1 log0 cache0; do truncate -s 128M "$data/pool/$f"; done
  "$bin" zpool create -f -R "$mnt" "$pool" raidz1 "$data/pool/d0" "$data/pool/d1" "$data/pool/d2" \
    special mirror "$data/pool/special0" "$data/pool/special1" log "$data/pool/log0" cache "$data/pool/cache0"
  "$bin" zfs create -o compression=gzip "$pool/docs"
  python3 - "$mnt/$pool" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "tools"))
import populate
root = sys.argv[1]
populate.populate(root, 1, "small")
populate.populate(os.path.join(root, "docs"), 2, "wide")
PY
  touch "$data/pool/.complete"
fi

# ---- every run: import read-write and mount ----
if "$bin" zpool list -H -o name 2>/dev/null | grep -qx "$pool"; then
  echo "'$pool' is imported"
else
  "$bin" zpool import -d "$data/pool" -R "$mnt" "$pool"
fi
"$bin" zpool status "$pool"
"$bin" zfs list -r -t all "$pool"
echo
echo "oxzfs is serving '$pool' under $mnt:"
"$bin" zfs mount | sed 's/^/  /'
