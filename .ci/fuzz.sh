#!/usr/bin/env bash
# Build every cargo-fuzz target and run each for FUZZ_SECONDS (default 60) on its seeded
# corpus. Fails on the first crash (the reproducer is left in fuzz/artifacts/<target>/).
# Prints one timing line per target with the executions libFuzzer reported.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH=${FUZZ_SECONDS:-60}
# cargo-fuzz needs nightly flags; the stable toolchain allows them with this.
export RUSTC_BOOTSTRAP=1
# The targets are safe Rust, so what they can find is a panic, an abort, a hang or runaway
# memory; AddressSanitizer would only slow the build and each execution (FUZZ_SANITIZER=address
# to have it anyway).
FLAGS=(--sanitizer "${FUZZ_SANITIZER:-none}")

if ! cargo fuzz --help >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
  exit 1
fi

./seed.sh >/dev/null
start=$(date +%s)
cargo fuzz build "${FLAGS[@]}"
echo "::: timing fuzz-build $(( $(date +%s) - start ))s"

status=0
for target in $(cargo fuzz list); do
  mkdir -p "corpus/$target" "artifacts/$target"
  log=$(mktemp)
  start=$(date +%s)
  if cargo fuzz run "${FLAGS[@]}" "$target" "corpus/$target" -- \
      -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
    status=1
    tail -n 60 "$log" >&2
  fi
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  echo "::: fuzz ${target} ${result} $(( $(date +%s) - start ))s execs=${execs}"
  rm -f "$log"
done
exit $status
