#!/usr/bin/env bash
# install-deps.sh — everything oxzfs's build and system tests need, on Debian 12, as root. Idempotent:
# a second run installs nothing and does not touch the network.
#
#   * FUSE 3 (fusermount3), zstd, pytest and pytest-xdist (the system tests run on every core), e2fsprogs, btrfs-progs, fio (benchmarks' reference file systems)
#   * zfs-fuse 0.7 (Debian main): a userspace ZFS (pool version 23) — an oracle that writes pools for us
#   * OpenZFS 2.1 userspace tools (Debian contrib: zfsutils-linux, zfs-test and their libraries), unpacked
#     under /opt/openzfs rather than installed (they conflict with zfs-fuse's zpool/zfs), run through
#     wrappers /opt/openzfs/bin/{zdb,ztest,zstream,zhack}
#   * a Rust toolchain (cargo) is expected to be there already; this script says what to do if not.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "install-deps.sh: run as root (it uses apt-get and writes /opt/openzfs)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
OPENZFS=/opt/openzfs
updated=0
apt_update() {
  if [ "$updated" = 0 ]; then
    apt-get update -qq
    updated=1
  fi
}

# OpenZFS's userspace packages live in Debian's contrib component.
for src in /etc/apt/sources.list.d/debian.sources; do
  if [ -f "$src" ] && ! grep -q '^Components:.*contrib' "$src"; then
    sed -i 's/^Components: main$/Components: main contrib/' "$src"
    updated=0
  fi
done
if [ -f /etc/apt/sources.list ] && grep -q '^deb .*debian.* main$' /etc/apt/sources.list; then
  sed -i 's/^\(deb .*debian.* main\)$/\1 contrib/' /etc/apt/sources.list
  updated=0
fi
# a fresh machine may have no package lists at all
if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then apt_update; fi
if ! ls /var/lib/apt/lists/*contrib*_Packages >/dev/null 2>&1; then apt_update; fi

pkgs=(fuse3 zstd python3-pytest python3-pytest-xdist e2fsprogs btrfs-progs fio zfs-fuse nbdkit acl)
# nbdfuse (a disk served by nbdkit, with its error and delay filters, as a plain file: the tests'
# failing log device, the benchmarks' slow disks): its own package from Debian 13, libnbd-bin before
if apt-cache show nbdfuse >/dev/null 2>&1; then pkgs+=(nbdfuse); else pkgs+=(libnbd-bin); fi
missing=()
for pkg in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt_update
  # fuse3 replaces Debian's fuse (2) and provides it, so zfs-fuse's dependency is still met
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# python3 may be another interpreter than Debian's (pyenv, venv): give that one pytest and xdist too
for mod in pytest:pytest xdist:pytest-xdist; do
  if ! python3 -c "import ${mod%%:*}" 2>/dev/null; then
    python3 -m pip install -q "${mod#*:}" || python3 -m pip install -q --break-system-packages "${mod#*:}"
  fi
done

if [ ! -x "$OPENZFS/sbin/zdb" ] || [ ! -x "$OPENZFS/sbin/ztest" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  pkgs=(zfsutils-linux zfs-test libzpool5linux libnvpair3linux libuutil3linux libzfs4linux)
  if ! (cd "$tmp" && apt-get download -qq "${pkgs[@]}" >/dev/null 2>&1); then
    apt_update
    (cd "$tmp" && apt-get download -qq "${pkgs[@]}")
  fi
  mkdir -p "$OPENZFS"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$OPENZFS"; done
  dpkg-deb -f "$tmp"/zfsutils-linux_*.deb Version > "$OPENZFS/VERSION"
fi
mkdir -p "$OPENZFS/bin"
for tool in zdb ztest zstream zhack; do
  w="$OPENZFS/bin/$tool"
  body="#!/bin/sh
export PATH=$OPENZFS/bin:\$PATH LD_LIBRARY_PATH=$OPENZFS/lib/x86_64-linux-gnu
exec $OPENZFS/sbin/$tool \"\$@\""
  if [ ! -x "$w" ] || [ "$(cat "$w")" != "$body" ]; then
    printf '%s\n' "$body" > "$w"
    chmod 755 "$w"
  fi
done
"$OPENZFS/bin/zdb" -h >/dev/null 2>&1 || [ $? -le 2 ] || { echo "install-deps.sh: $OPENZFS/bin/zdb does not run" >&2; exit 1; }

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  cat >&2 <<'MSG'
install-deps.sh: no Rust toolchain (cargo) found. Install one, e.g. Debian's
    apt-get install -y cargo rustc     (Debian 12 ships 1.63: may be too old for this workspace)
or a current toolchain from rustup, then re-run.
MSG
  exit 1
fi
# pjdfstest (the POSIX test suite, a crate on crates.io) and the dummy user it switches to.
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
if ! command -v pjdfstest >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/pjdfstest" ]; then
  if ! dpkg-query -W -f='${Status}' libacl1-dev 2>/dev/null | grep -q "ok installed"; then
    apt_update
    apt-get install -y -qq libacl1-dev acl >/dev/null
  fi
  cargo install -q --locked pjdfstest || cargo install -q pjdfstest
fi
id tests >/dev/null 2>&1 || echo 'tests:x:::Dummy User for pjdfstest:/:/usr/sbin/nologin' | newusers

echo "deps: zfs-fuse $(dpkg-query -W -f='${Version}' zfs-fuse), OpenZFS userspace $(cat "$OPENZFS/VERSION" 2>/dev/null || echo '?'), $(zstd --version | head -1), pytest $(python3 -c 'import pytest; print(pytest.__version__)'), pytest-xdist $(python3 -c 'import xdist; print(xdist.__version__)')"
