#!/usr/bin/env bash
# Build every cargo-fuzz target and run each for FUZZ_SECONDS (default 45) on its seeded
# corpus. Fails on the first crash (the reproducer is left in fuzz/artifacts/<target>/).
# Prints one timing line per target with the executions libFuzzer reported.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH=${FUZZ_SECONDS:-45}
# cargo-fuzz needs nightly flags (-Zsanitizer); the stable toolchain allows them with this.
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --help >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
  exit 1
fi

./seed.sh >/dev/null
start=$(date +%s)
cargo fuzz build
echo "::: timing fuzz-build $(( $(date +%s) - start ))s"

status=0
for target in $(cargo fuzz list); do
  mkdir -p "corpus/$target" "artifacts/$target"
  log=$(mktemp)
  start=$(date +%s)
  if cargo fuzz run "$target" "corpus/$target" -- \
      -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
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
