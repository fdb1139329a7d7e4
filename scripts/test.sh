#!/usr/bin/env bash
# test.sh — the project's one test command: dependencies, build, Rust unit tests, system tests.
#
#   scripts/test.sh [--nightly] [pytest args...]   e.g. scripts/test.sh -k zdb   or   scripts/test.sh -m tools
#
# The default run is sized for CI (30 minutes on 2 cores): the crash harness runs 4 seeds per layout
# and the system tests marked `nightly` are left out. `--nightly` (or NIGHTLY=1) runs the larger
# target: 32 crash seeds per layout, 60 s per fuzz target, and every system test.
#
# Environment:
#   OXZFS_BUILD_PROFILE  dev (default: debug assertions on, shares the build with `cargo test`) or release
#   OXZFS_TEST_DIR       where oracle pools are made and cached (default /var/tmp/oxzfs-test)
#   OXZFS_SHARED_FIXTURES  the optional shared fixture pools (default ../shared/fixtures)
#   OXZFS_TEST_JOBS      pytest-xdist workers (default auto: one per core; 0 runs in one process)
#   OXZFS_CRASH_SEEDS, OXZFS_FUZZ_SECONDS  override the run's crash seeds and fuzz seconds
# Exits non-zero if any stage fails; later stages still run when they can, so one run reports everything.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
stage() { printf '\n=== %s\n' "$*"; }

nightly=${NIGHTLY:-0}
if [ "${1:-}" = "--nightly" ]; then
  nightly=1
  shift
fi
if [ "$nightly" = 1 ]; then
  export OXZFS_CRASH_SEEDS=${OXZFS_CRASH_SEEDS:-32} OXZFS_NIGHTLY=1
  fuzz_seconds=${OXZFS_FUZZ_SECONDS:-60}
  pytest_timeout=5400
else
  export OXZFS_CRASH_SEEDS=${OXZFS_CRASH_SEEDS:-4}
  fuzz_seconds=${OXZFS_FUZZ_SECONDS:-10}
  # well inside CI's 30 minutes together with the build, cargo test and the fuzz smoke
  pytest_timeout=1080
fi
timed() {  # timed NAME CMD...: run CMD, say how long it took
  local t0=$SECONDS rc=0
  "${@:2}" || rc=$?
  printf '=== %s: %ds\n' "$1" $((SECONDS - t0))
  return $rc
}

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
timed build cargo build "${build_flags[@]}" -p oxzfs-cli

failed=()
stage "layers (scripts/check-layers.py: no import circle, no engine import up the layers)"
timed layers python3 scripts/check-layers.py || failed+=("layers")

stage "cargo test --workspace (crash harness: $OXZFS_CRASH_SEEDS seeds per layout)"
timed "cargo test" cargo test --workspace || failed+=("cargo test")

stage "fuzz smoke (cargo-fuzz, ${fuzz_seconds}s per target)"
timed "fuzz smoke" scripts/fuzz-smoke.sh "$fuzz_seconds" || failed+=("fuzz smoke")

stage "system tests (pytest)"
export OXZFS_BIN="$repo/target/$bindir/oxzfs"
# pytest-xdist: one worker per core, each test module whole in one worker (its daemon and run dir)
jobs=${OXZFS_TEST_JOBS:-auto}
xdist=()
if [ "$jobs" != 0 ] && python3 -c 'import xdist' 2>/dev/null; then
  xdist=(-n "$jobs" --dist loadfile)
fi
rc=0
timed pytest timeout --signal=INT --kill-after=60 "$pytest_timeout" \
  python3 -m pytest -q --durations=15 "${xdist[@]}" tests/ "$@" || rc=$?
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
