#!/usr/bin/env bash
# The sanitizer job (CI runs it after the README's test command; docs/robustness.md):
#  1. set-up with clang 14 and its sanitizer runtimes (scripts/setup.sh --sanitizers);
#  2. the `asan` preset: the CPU parts (no CUDA, no benchmarks) built with clang 14, ASan + UBSan,
#     no recovery, and the libFuzzer harnesses; its CPU tests run (`ctest --preset asan`: a
#     sanitizer report fails the test; the corpora of tests/fuzz run as tests too);
#  3. every libFuzzer harness for a short budget (scripts/fuzz.sh, FUZZ_SECONDS each, 20 by default).
# Prints the time of each step.
#   usage: scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${MOEPROF_JOBS:-$(nproc)}
step() { echo "moeprof sanitize: $1: $(( $(date +%s) - t0 )) s"; t0=$(date +%s); }
t0=$(date +%s)
bash scripts/setup.sh --sanitizers --no-build
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$JOBS"
step "asan build"
mkdir -p build-asan/Testing
if ! ctest --preset asan > build-asan/Testing/moeprof-asan.log 2>&1; then
  # The summary, then the failing tests once more with their output: a CI log keeps its tail.
  tail -n 15 build-asan/Testing/moeprof-asan.log
  echo "moeprof sanitize: asan CPU tests failed; the failing ones again, with their output:"
  ctest --test-dir build-asan --rerun-failed --output-on-failure 2>&1 | tail -n 200 || true
  sed -n '/The following tests FAILED/,$p' build-asan/Testing/moeprof-asan.log | grep -E '^[[:space:]]+[0-9]+ - ' || true
  exit 8
fi
tail -n 15 build-asan/Testing/moeprof-asan.log
step "asan CPU tests"
bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
step "fuzzing"
