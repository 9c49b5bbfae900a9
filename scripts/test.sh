#!/usr/bin/env bash
# Set up, build and run moeprof's tests. Whether a usable GPU exists is asked of the CUDA driver
# (`moeprof devices`), not of nvidia-smi. With one, every test runs. Without one, the CPU tests
# run, then the gpu-labelled tests, which report Skipped (CTest's skip code), never passed.
# The browser tests (label `browser`) run with the CPU tests; set-up installs chromium and
# playwright-core for them, and MOEPROF_REQUIRE_BROWSER=1 makes a missing browser a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
export MOEPROF_REQUIRE_BROWSER=1
cmake --build --preset release -j "${MOEPROF_JOBS:-$(nproc)}"
log=build/Testing/moeprof-test.log
mkdir -p build/Testing
if build/src/cli/moeprof devices >/dev/null 2>&1; then
  echo "moeprof test: usable GPU found ($(build/src/cli/moeprof devices | head -1)): running all tests"
  ctest --preset test-all 2>&1 | tee "$log"
else
  echo "moeprof test: no usable GPU ($(build/src/cli/moeprof devices 2>&1 | tail -1)): CPU tests, then the gpu label (skipped)"
  if ! ctest --preset test 2>&1 | tee "$log"; then
    # The failing tests once more, with their whole output, last: a CI log keeps its tail.
    echo "moeprof test: CPU tests failed; memory, disk, then the failing ones again with their output:"
    free -m || true
    df -h . "${TMPDIR:-/tmp}" || true
    ctest --test-dir build --rerun-failed --output-on-failure 2>&1 | tail -n 200 || true
    echo "moeprof test: failed:"
    sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ' || true
    exit 8
  fi
  ctest --test-dir build -L gpu 2>&1 | tee -a "$log" | tail -n 4
fi
passed=$(grep -cE 'Test +#[0-9]+: .*[ *]Passed +[0-9.]+ sec' "$log" || true)
skipped=$(grep -cE 'Test +#[0-9]+: .*[ *]Skipped +[0-9.]+ sec' "$log" || true)
echo "moeprof test: ${passed} passed, ${skipped} skipped, 0 failed"
