#!/usr/bin/env bash
# GPU check: run from the repo root on the GPU machine, with the build tree (built elsewhere,
# -DMOEPROF_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90) in ./build-gpu.
# Runs the [gpu] op tests (CUDA vs CPU reference), then the two benchmarks. Full logs go to
# $OUT (if set) or ./gpu-check-logs. Prints a summary table last. Exit status: 0 if the tests
# passed and both benchmarks ran, 1 otherwise.
set -u
BUILD=${BUILD:-build-gpu}
LOGDIR=${OUT:-gpu-check-logs}
mkdir -p "$LOGDIR"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "== devices"
nvidia-smi -L 2>&1 | tee "$LOGDIR/nvidia-smi.txt" || true

status_tests="not run"; status_gemm="not run"; status_attn="not run"
rc=0

run_step() {  # name log timeout cmd...
  local name=$1 log=$2 to=$3; shift 3
  echo "== $name: $*"
  local t0=$(date +%s)
  timeout "$to" "$@" >"$log" 2>&1
  local r=$?
  local t1=$(date +%s)
  tail -n 40 "$log"
  echo "-- $name exit $r in $((t1 - t0)) s (full log: $log)"
  return $r
}

TEST_BIN="$BUILD/tests/gpu/cuda_ops_test"
if [[ -x "$TEST_BIN" ]]; then
  if run_step "cuda_ops_test" "$LOGDIR/cuda_ops_test.log" 900 "$TEST_BIN" '[gpu]' -r compact -d yes; then
    status_tests="PASS"
  else
    status_tests="FAIL"; rc=1
  fi
  if grep -q "skipping: no usable GPU" "$LOGDIR/cuda_ops_test.log"; then status_tests="SKIPPED (no GPU)"; rc=1; fi
else
  status_tests="missing $TEST_BIN"; rc=1
fi

BG="$BUILD/bench/gpu/bench_moe_gemm"
if [[ -x "$BG" ]]; then
  if run_step "bench_moe_gemm" "$LOGDIR/bench_moe_gemm.log" 600 "$BG"; then status_gemm="ran"; else status_gemm="FAIL"; rc=1; fi
else
  status_gemm="missing $BG"; rc=1
fi
BA="$BUILD/bench/gpu/bench_attention"
if [[ -x "$BA" ]]; then
  if run_step "bench_attention" "$LOGDIR/bench_attention.log" 300 "$BA"; then status_attn="ran"; else status_attn="FAIL"; rc=1; fi
else
  status_attn="missing $BA"; rc=1
fi

{
  echo
  echo "================ gpu_check summary ================"
  printf "%-34s %s\n" "device" "$(nvidia-smi -L 2>/dev/null | head -n1 || echo '?')"
  printf "%-34s %s\n" "cuda_ops_test [gpu]" "$status_tests"
  if [[ -f "$LOGDIR/cuda_ops_test.log" ]]; then
    printf "%-34s %s\n" "  catch2 totals" "$(grep -E 'Passed|Failed|test cases' "$LOGDIR/cuda_ops_test.log" | tail -n1)"
    grep -E "^.*(FAILED|failed)" "$LOGDIR/cuda_ops_test.log" | head -n 10 | sed 's/^/  /'
  fi
  printf "%-34s %s\n" "bench_moe_gemm" "$status_gemm"
  printf "%-34s %s\n" "bench_attention" "$status_attn"
  for f in "$LOGDIR/bench_moe_gemm.log" "$LOGDIR/bench_attention.log"; do
    [[ -f "$f" ]] && grep '^RESULT' "$f" | sed 's/^RESULT /  /' | awk '{printf "  %-44s %s %s\n", $1, $2, $3}'
  done
  echo "logs: $LOGDIR"
} | tee "$LOGDIR/summary.txt"
exit $rc
