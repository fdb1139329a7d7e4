#!/usr/bin/env bash
# fuzz-smoke.sh [SECONDS] — run every cargo-fuzz target over the format decoders briefly.
# Needs a nightly toolchain (rustup) and cargo-fuzz; installs both when missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-10}
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p corpus
for t in $(cargo +nightly fuzz list); do
  echo "fuzz: $t (${secs}s)"
  mkdir -p "corpus/$t"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=0 2>&1 | tail -2
done
echo "fuzz: all targets ran without a crash"
