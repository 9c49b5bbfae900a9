#!/usr/bin/env bash
# GPU check of the CUPTI tracer. Run on the GPU machine from the repository root:
#   OUT=/path/to/logs scripts/gpu_trace_check.sh [BUILD_DIR]        (BUILD_DIR default: build-gpu)
# Needs the binaries built with -DMOEPROF_ENABLE_CUDA=ON in BUILD_DIR (tests/profiler/*,
# src/cli/moeprof, src/cli/libmoeprof_inject.so, bench/trace/bench_alloc_trace), python3 with
# PyTorch for the PyTorch check. Every step logs under $OUT; a short table comes last.
# Exit code: 0 if no step FAILed (SKIPs allowed).
set -u
B=${1:-build-gpu}
OUT=${OUT:-$PWD/gpu-trace-logs}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MOEPROF="$B/src/cli/moeprof"
PROG="$B/tests/profiler/moeprof_trace_test_prog"
ROWS=()
FAILED=0
row() {  # name status detail
  ROWS+=("$(printf '%-28s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && FAILED=1
  echo "== $1: $2 $3"
}
have() { [ -e "$1" ] || { row "$2" SKIP "missing $1"; return 1; }; }

{ nvidia-smi -L; ldd "$B/src/cli/libmoeprof_inject.so"; } > "$OUT/env.txt" 2>&1

# 1. CPU decoding tests.
if have "$B/tests/profiler/profiler_test" cpu-decode-tests; then
  if "$B/tests/profiler/profiler_test" > "$OUT/profiler_test.log" 2>&1; then
    row cpu-decode-tests PASS "$(tail -n 2 "$OUT/profiler_test.log" | tr '\n' ' ')"
  else row cpu-decode-tests FAIL "see profiler_test.log"; fi
fi

# 2. GPU tests (in-process tracer, injection, second subscriber), one row each.
if have "$B/tests/profiler/profiler_gpu_test" gpu-tests; then
  i=0
  while IFS= read -r name; do
    [ -z "$name" ] && continue
    i=$((i + 1))
    if timeout 300 "$B/tests/profiler/profiler_gpu_test" "$name" > "$OUT/gpu_test_$i.log" 2>&1; then
      row "gpu-test-$i" PASS "$name"
    else row "gpu-test-$i" FAIL "$name (gpu_test_$i.log)"; fi
  done < <("$B/tests/profiler/profiler_gpu_test" --list-test-names-only "[gpu]" 2>/dev/null | grep -v '^$' | grep -v 'test case')
fi

# 3. Injection, compared here too (peak per device of the program's own allocations from the report,
#    i.e. without the driver's CUDA-graph memory, vs the program's EXPECT line; the graph memory
#    allocation, when reported, vs the program's cudaGraphMemAttrUsedMemHigh).
if have "$MOEPROF" injection && have "$PROG" injection; then
  timeout 300 "$MOEPROF" trace --kernels --report --out-json "$OUT/inject_report.json" --out "$OUT/inject.mtrace" \
    -- "$PROG" --kernels > "$OUT/inject_stdout.txt" 2> "$OUT/inject_stderr.txt"
  rc=$?
  res=$(python3 - "$OUT/inject_stdout.txt" "$OUT/inject_report.json" <<'PY'
import json, sys
exp = next(json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("EXPECT "))
rep = json.load(open(sys.argv[2]))
t = [r for r in rep["traces"] if r["path"].endswith("inject.mtrace")][0]
got = {str(d["device"]): d["peak_bytes"] for d in t["program"]["devices"]}
bad = [f"dev{d}: trace {got.get(d)} != expected {p}" for d, p in exp["peak_bytes"].items() if got.get(d) != p]
graph = {str(d["device"]): d["peak_by_category"].get("graph", 0) for d in t["all"]["devices"]}
g0, high = graph.get("0", 0), exp["graph_mem_high"]
if g0 and g0 != high:
    bad.append(f"graph memory allocation {g0} != graph_mem_high {high}")
a = t["program"]
print(("FAIL " + "; ".join(bad)) if bad else
      f"PASS program peak {exp['peak_bytes']} exact; graph memory {g0 or 'not reported'} (high {high}); "
      f"allocs {a['allocs']} scoped {a['allocs_with_scope']} kernels {a['kernels']} dropped {t['dropped_records']}")
PY
  )
  [ $rc -ne 0 ] && res="FAIL command exit $rc"
  row injection "${res%% *}" "${res#* }"
fi

# 4. Several processes: the root (bash) never initializes CUDA; two children each write <stem>.<pid>.mtrace.
if have "$MOEPROF" multi-process && have "$PROG" multi-process; then
  rm -f "$OUT"/mp.*.mtrace
  timeout 300 "$MOEPROF" trace --out "$OUT/mp.mtrace" -- bash -c "'$PROG' >/dev/null && '$PROG' >/dev/null" \
    > "$OUT/multiprocess.log" 2>&1
  n=$(ls "$OUT"/mp.*.mtrace 2>/dev/null | wc -l)
  if [ "$n" -eq 2 ]; then row multi-process PASS "2 per-process traces"; else row multi-process FAIL "$n traces (multiprocess.log)"; fi
fi

# 5. SIGTERM: the traced process is killed; its trace must still be closed and readable.
if have "$MOEPROF" sigterm && python3 -c "import torch" 2>/dev/null; then
  rm -f "$OUT/sigterm.mtrace"
  "$MOEPROF" trace --report --out "$OUT/sigterm.mtrace" -- python3 -c \
    "import torch,time; x=torch.empty(1<<20,device='cuda'); torch.cuda.synchronize(); print('ready',flush=True); time.sleep(60)" \
    > "$OUT/sigterm_stdout.txt" 2> "$OUT/sigterm_stderr.txt" &
  mp=$!
  for _ in $(seq 1 120); do grep -q ready "$OUT/sigterm_stdout.txt" 2>/dev/null && break; sleep 0.5; done
  kill -TERM "$mp"  # moeprof forwards it to python
  wait "$mp"; rc=$?
  if grep -q "trace incomplete" "$OUT/sigterm_stderr.txt"; then row sigterm FAIL "trace truncated (rc $rc)"
  elif [ -s "$OUT/sigterm.mtrace" ] && [ $rc -eq 143 ]; then row sigterm PASS "rc 143, trace closed"
  else row sigterm FAIL "rc $rc, see sigterm_stderr.txt"; fi
else
  row sigterm SKIP "no moeprof or no PyTorch"
fi

# 6. PyTorch: replayed peak of stream-ordered allocations vs torch.cuda.max_memory_allocated().
if have "$MOEPROF" pytorch && python3 -c "import torch" 2>/dev/null; then
  timeout 600 "$MOEPROF" trace --torch-async --report --out-json "$OUT/torch_report.json" --out "$OUT/torch.mtrace" \
    -- python3 tests/profiler/torch_alloc_check.py > "$OUT/torch_stdout.txt" 2> "$OUT/torch_stderr.txt"
  rc=$?
  res=$(python3 - "$OUT/torch_stdout.txt" "$OUT/torch_report.json" <<'PY'
import json, sys
t = next(json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("TORCH "))
rep = json.load(open(sys.argv[2]))
r = [x for x in rep["traces"] if x["path"].endswith("torch.mtrace")][0]
so = {d["device"]: d for d in r["stream_ordered"]["devices"]}
sync = {d["device"]: d for d in r["device_sync"]["devices"]}
peak = so.get(0, {}).get("peak_bytes", 0)
want = t["max_memory_allocated"]
diff = peak - want
other = f"non-PyTorch (cudaMalloc) peak {sync.get(0, {}).get('peak_bytes', 0)} B in {sync.get(0, {}).get('allocs', 0)} allocs"
scoped = f"scoped {r['stream_ordered']['allocs_with_scope']}/{r['stream_ordered']['allocs']}"
status = "PASS" if diff == 0 else ("WARN" if abs(diff) <= max(1 << 20, want // 50) else "FAIL")
print(f"{status} traced peak {peak} vs max_memory_allocated {want} (diff {diff}, backend {t['backend']}); {scoped}; {other}")
PY
  )
  [ $rc -ne 0 ] && res="FAIL command exit $rc (torch_stderr.txt)"
  row pytorch "${res%% *}" "${res#* }"
else
  row pytorch SKIP "no moeprof or no PyTorch"
fi

# 6b. Kernel uses (--uses) on the same PyTorch workload: use events (kernel-argument scan) and the
#     planner's bytes held after their last use at the activation peak. PASS if any use was recorded.
if have "$MOEPROF" pytorch-uses && python3 -c "import torch" 2>/dev/null; then
  timeout 600 "$MOEPROF" trace --uses --torch-async --report --out-json "$OUT/uses_report.json" \
    --out "$OUT/uses.mtrace" -- python3 tests/profiler/torch_alloc_check.py > "$OUT/uses_stdout.txt" 2> "$OUT/uses_stderr.txt"
  rc=$?
  res=$(python3 - "$OUT/uses_report.json" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
r = [x for x in rep["traces"] if x["path"].endswith("uses.mtrace")][0]
uses = r["all"].get("uses", 0)
x = r["extra"]
dev = {d["device"]: d for d in r["program"]["devices"]}.get(0, {})
print(f"{'PASS' if uses > 0 else 'FAIL'} {uses} use events over {x.get('tracer.uses_launches_scanned', '?')} launches "
      f"scanned ({x.get('tracer.uses_scan_failures', '?')} unscannable); device 0 at the activation peak "
      f"{dev.get('peak_activation_bytes', 0)} B: held after last use {dev.get('held_after_last_use_bytes', 0)} B, "
      f"never used {dev.get('never_used_at_peak_bytes', 0)} B, hand-offs {dev.get('handoff_count', 0)}")
PY
  )
  [ $rc -ne 0 ] && res="FAIL command exit $rc (uses_stderr.txt)"
  [ -z "$res" ] && res="FAIL no report (uses_stderr.txt)"
  row pytorch-uses "${res%% *}" "${res#* }"
else
  row pytorch-uses SKIP "no moeprof or no PyTorch"
fi

# 7. Overhead benchmark.
if have "$B/bench/trace/bench_alloc_trace" bench; then
  if timeout 600 "$B/bench/trace/bench_alloc_trace" --pairs 200000 --out "$OUT" > "$OUT/bench.log" 2>&1; then
    row bench PASS "$(grep -v BENCH "$OUT/bench.log" | tail -n 3 | sed 's/  */ /g' | tr '\n' '|')"
  else row bench FAIL "see bench.log"; fi
fi

echo
echo "================ moeprof tracer GPU check ($(date -u +%FT%TZ)) ================" | tee "$OUT/summary.txt"
printf '%s\n' "${ROWS[@]}" | tee -a "$OUT/summary.txt"
exit $FAILED
