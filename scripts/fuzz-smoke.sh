#!/usr/bin/env bash
# fuzz-smoke.sh [SECONDS] [TARGET...] — run cargo-fuzz targets over the format decoders briefly.
#
# Runs every target in fuzz/ (or only the named ones) for SECONDS each (default 20) and fails if
# any target crashes, leaks or times out; the crash's input is left in fuzz/artifacts/TARGET/.
# Needs a nightly toolchain and cargo-fuzz: installs both (rustup, cargo install) when missing.
# The decompress_* targets start from the real blocks in crates/format/tests/data.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"
secs=${1:-20}
shift || true
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
command -v rustup >/dev/null || { echo "fuzz: rustup is needed for a nightly toolchain" >&2; exit 2; }
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

# Seed the decompressors' corpora with real OpenZFS blocks (2-byte little-endian lsize, block).
data="$root/crates/format/tests/data"
if [ -f "$data/VECTORS" ]; then
  grep -v '^#' "$data/VECTORS" | while read -r file codec lsize _; do
    [ -n "$file" ] && [ "$lsize" -lt 65536 ] || continue
    case $codec in gzip-*) codec=gzip ;; esac
    dir="corpus/decompress_$codec"
    [ -d "fuzz_targets" ] && [ -f "fuzz_targets/decompress_$codec.rs" ] || continue
    mkdir -p "$dir"
    { printf "\\x$(printf %02x $((lsize & 255)))\\x$(printf %02x $((lsize >> 8)))"; cat "$data/$file"; } > "$dir/real-${file%.bin}"
  done
fi

targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)
failed=()
for t in "${targets[@]}"; do
  echo "fuzz: $t (${secs}s)"
  mkdir -p "corpus/$t"
  log="target/fuzz-smoke-$t.log"
  mkdir -p target
  if cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
      -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^Done' "$log" | tr '\n' ' ' | sed 's/^/      /'; echo
  else
    echo "fuzz: $t FAILED, last lines of $log:" >&2
    tail -40 "$log" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran without a crash"
