#!/usr/bin/env bash
# Runs every libFuzzer harness (tests/fuzz/, docs/robustness.md) for SECONDS each, with its seed
# corpus and dictionary, and prints one line per harness: executions, corpus size, coverage.
# New inputs go to build-asan/fuzz-corpus/<harness>/ (the committed corpus is only read); a crash
# stops the script with exit 1 and leaves the input as build-asan/fuzz-artifacts/<harness>/crash-*.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]       default 25 s, every harness
#   MOEPROF_FUZZ_TABLE=FILE scripts/fuzz.sh 600  also writes the figures as a Markdown table
#
# Builds the asan preset's fuzz_<harness> targets first (clang, ASan + UBSan, no recovery).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-25}
shift || true
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(trace config report rules category_rules arena_csv pickle)
BUILD=build-asan
JOBS=${MOEPROF_JOBS:-$(nproc)}

[ -f "$BUILD/build.ninja" ] || cmake --preset asan >/dev/null
cmake --build --preset asan -j "$JOBS" --target "${HARNESSES[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
table=${MOEPROF_FUZZ_TABLE:-}
[ -z "$table" ] || printf '| harness | seconds | executions | exec/s | corpus (files) | coverage (edges) |\n|---|---:|---:|---:|---:|---:|\n' >"$table"
status=0
for h in "${HARNESSES[@]}"; do
  seeds=tests/fuzz/corpus/$h
  work=$BUILD/fuzz-corpus/$h
  art=$BUILD/fuzz-artifacts/$h
  mkdir -p "$work" "$art"
  log=$BUILD/fuzz-$h.log
  # -rss_limit_mb: a harness that allocates without bound fails; -max_len: inputs up to 64 KB.
  if ! "$BUILD/tests/fuzz/fuzz_$h" "$work" "$seeds" -dict="tests/fuzz/$h.dict" -max_total_time="$SECONDS_EACH" \
      -max_len=65536 -rss_limit_mb=2048 -timeout=20 -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1; then
    echo "moeprof fuzz: $h FAILED (see $log; inputs in $art/)"
    tail -n 30 "$log"
    status=1
    continue
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  files=$(find "$work" "$seeds" -type f | wc -l)
  echo "moeprof fuzz: $h: ${SECONDS_EACH} s, ${execs:-?} executions (${rate:-?}/s), corpus $files files, coverage ${cov:-?} edges"
  [ -z "$table" ] || echo "| $h | $SECONDS_EACH | ${execs:-?} | ${rate:-?} | $files | ${cov:-?} |" >>"$table"
done
exit $status
