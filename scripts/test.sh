#!/usr/bin/env bash
# test.sh — the project's one test command: dependencies, build, Rust unit tests, system tests.
#
#   scripts/test.sh [pytest args...]      e.g. scripts/test.sh -k zdb      or   scripts/test.sh -m tools
#
# Environment:
#   OXZFS_BUILD_PROFILE  dev (default: debug assertions on, shares the build with `cargo test`) or release
#   OXZFS_TEST_DIR       where oracle pools are made and cached (default /var/tmp/oxzfs-test)
#   OXZFS_SHARED_FIXTURES  the optional shared fixture pools (default ../shared/fixtures)
# Exits non-zero if any stage fails; later stages still run when they can, so one run reports everything.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
stage() { printf '\n=== %s\n' "$*"; }

stage "dependencies"
if [ "$(id -u)" = 0 ]; then
  scripts/install-deps.sh
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo scripts/install-deps.sh
else
  echo "not root: skipping scripts/install-deps.sh (run it as root once); the system tests need root for FUSE" >&2
fi
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

profile=${OXZFS_BUILD_PROFILE:-dev}
case "$profile" in
  dev) build_flags=(); bindir=debug ;;
  release) build_flags=(--release); bindir=release ;;
  *) echo "OXZFS_BUILD_PROFILE must be dev or release" >&2; exit 2 ;;
esac

stage "build oxzfs ($profile)"
cargo build "${build_flags[@]}" -p oxzfs-cli

failed=()
stage "cargo test --workspace"
cargo test --workspace || failed+=("cargo test")

stage "fuzz smoke (cargo-fuzz, ${OXZFS_FUZZ_SECONDS:-10}s per target)"
scripts/fuzz-smoke.sh "${OXZFS_FUZZ_SECONDS:-10}" || failed+=("fuzz smoke")

stage "system tests (pytest)"
export OXZFS_BIN="$repo/target/$bindir/oxzfs"
rc=0
timeout --signal=INT --kill-after=60 1500 python3 -m pytest -q tests/ "$@" || rc=$?
case "$rc" in
  0) ;;
  5) echo "pytest collected no tests" >&2; failed+=("pytest (no tests)") ;;
  *) failed+=("pytest (exit $rc)") ;;
esac

if [ "${#failed[@]}" -gt 0 ]; then
  printf '\nFAILED: %s\n' "${failed[*]}" >&2
  exit 1
fi
printf '\nall tests passed\n'
