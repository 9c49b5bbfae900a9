#!/usr/bin/env bash
# Everything that needs the GPU, in one call on the device machine (10-minute limit per call):
# op tests, the tiny-model GPU test, the seed case (Kimi-K2.5, 16K tokens, TP=4 shapes, both
# modes, CUPTI-traced), the tracer checks, the kernel benchmarks and the seed case untraced.
# Binaries come prebuilt in ./build-gpu. Logs are packed into $OUT/logs.tgz; the summary table
# is printed last and saved as $OUT/summary.txt.
#   usage: OUT=dir scripts/device_all.sh [steps...]
#          (steps: ops model seed trace bench seed-nocupti ncu models oom hf snapshot sanitizer gemm-sanitizer
#           tp2 symm serving decode-profile moe-decode sizelaw routing ep budget-edge)
set -u
B=${B:-build-gpu}
OUT=${OUT:-$PWD/device-logs}
L=/tmp/moeprof-device-logs
rm -rf "$L"; mkdir -p "$L" "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
STEPS=${*:-ops model seed trace models hf snapshot oom sanitizer gemm-sanitizer}  # add tp2 on a 2-GPU machine
START=$(date +%s)
BUDGET=${BUDGET:-560}
ROWS=()
row() { ROWS+=("$(printf '%-22s %-6s %s' "$1" "$2" "$3")"); echo "== $1: $2 $3"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
step() {  # name max_seconds cmd... ; runs with min(max, time left), logs to $L/name.log
  local name=$1 max=$2; shift 2
  local t=$(left); [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt 20 ]; then row "$name" SKIP "no time left"; return 99; fi
  local t0=$(date +%s)
  timeout "$t" "$@" > "$L/$name.log" 2>&1
  local rc=$?
  echo "-- $name: exit $rc in $(( $(date +%s) - t0 )) s"; tail -n 25 "$L/$name.log"
  return $rc
}
{ nvidia-smi; nvidia-smi -L; } > "$L/nvidia-smi.txt" 2>&1
echo "device: $(nvidia-smi -L | head -n1)"

for s in $STEPS; do
  case $s in
    ops)
      step cuda_ops_test 200 "$B/tests/gpu/cuda_ops_test" '[gpu]' -r compact -d yes
      rc=$?; row cuda_ops_test "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E 'test cases|passed|failed' "$L/cuda_ops_test.log" | tail -n1)" ;;
    model)
      step model_gpu_test 150 "$B/tests/gpu/model_gpu_test" '[gpu]' -s -r compact
      rc=$?; row model_gpu_test "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -oE 'relative L2 error[^)]*' "$L/model_gpu_test.log" | tr '\n' ';' | head -c 200)" ;;
    seed)
      mkdir -p "$L/cupti-bufs"
      # The seed case in all three modes, CUPTI-traced; reuse and fixes predicted from the baseline.
      step seed 300 "$B/src/cli/moeprof" run --mode all --out "$L/seed"
      rc=$?
      res=$(python3 - "$L/seed/report.json" <<'PY' 2>&1
import json, sys
r = json.load(open(sys.argv[1]))
runs = {x["name"]: x for x in r["runs"]}
b = runs["baseline"]["peak_activation_bytes"]
parts, ok = [f"baseline {b}"], True
for m in ("reuse", "fixes"):
    got = runs[m]["peak_activation_bytes"]; pred = runs[m].get("predicted_from_baseline", {}).get("predicted_peak_activation_bytes")
    ok = ok and pred == got
    parts.append(f"{m} {got} (predicted {pred}, delta {got - b})")
print(("PASS " if ok else "FAIL ") + "; ".join(parts))
PY
)
      [ $rc -ne 0 ] && res="FAIL exit $rc"
      row seed "${res%% *}" "${res#* }"
      # The outputs' hashes (equal across modes; unchanged by kernel changes that keep the bits).
      for m in baseline reuse fixes; do
        row "seed_hash_$m" INFO "$(strings "$L/seed/$m.mtrace" 2>/dev/null | grep -o 'output\.[a-z]*_hash":"[0-9]*' | sort -u | tr '\n' ' ')"
      done ;;
    trace)
      OUT="$L/trace" step trace_check 200 bash scripts/gpu_trace_check.sh "$B"
      rc=$?; row trace_check "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "see trace_check.log" ;;
    bench)
      step bench_moe_gemm 150 "$B/bench/gpu/bench_moe_gemm"; row bench_moe_gemm "rc=$?" "$(tail -n 3 "$L/bench_moe_gemm.log" | tr '\n' ' ' | head -c 160)"
      step bench_attention 60 "$B/bench/gpu/bench_attention"; row bench_attention "rc=$?" "$(tail -n 2 "$L/bench_attention.log" | tr '\n' ' ' | head -c 160)"
      # The references in the same call: PyTorch SDPA (cuDNN) and torch._grouped_mm at the same shapes.
      step torch_reference 90 python3 bench/gpu/torch_reference.py; row torch_reference "rc=$?" "$(grep -E '^RESULT' "$L/torch_reference.log" | tr -s ' ' | tr '\n' ';' | head -c 200)" ;;
    seed-nocupti)
      # The seed case untraced, with the per-op-family times (docs/performance.md, "Where the
      # prefill's time goes").
      step seed_nocupti 200 "$B/src/cli/moeprof" run --no-cupti --op-times --out "$L/seed-nocupti"
      rc=$?; row seed_nocupti "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E '^(baseline|reuse) ' "$L/seed_nocupti.log" | tr -s ' ' | tr '\n' ';')" ;;
    models)
      # The other shipped configs on the GPU. Where the peak falls in a MoE layer's expert runner
      # the saving is T*(2H + latent)*2 (the spec's 4th field is 2H); DeepSeek-V2-Lite at TP=1
      # peaks in the dense layer 0's MLP (intermediate 10944), where only the attention inputs
      # are saved: T*(H + latent)*2.
      for spec in "deepseek-v3 8192 8 14336 2112" "deepseek-v2 8192 8 10240 2112" "deepseek-v2-lite 8192 1 2048 576"; do
        set -- $spec
        step "model_$1" 120 "$B/src/cli/moeprof" run --model "$1" --tokens "$2" --tp "$3" --mode all --no-cupti --quiet --out "$L/$1"
        rc=$?
        res=$(python3 -c "
import json,sys; r=json.load(open('$L/$1/report.json')); runs={x['name']: x for x in r['runs']}
b=runs['baseline']['peak_activation_bytes']; c=runs['reuse']['peak_activation_bytes']; f=runs['fixes']['peak_activation_bytes']
pc=runs['reuse']['predicted_from_baseline']['predicted_peak_activation_bytes']; pf=runs['fixes']['predicted_from_baseline']['predicted_peak_activation_bytes']
d=c-b; want=-$2*($4+$5)*2
ok=d==want and pc==c and pf==f
print(('PASS' if ok else 'FAIL'), f'baseline {b} reuse {c} (pred {pc}) fixes {f} (pred {pf}) delta {d} formula {want}')" 2>&1)
        [ $rc -ne 0 ] && res="FAIL exit $rc"
        row "model_$1" "${res%% *}" "${res#* }"
      done ;;
    tp2)
      # Real TP=2 over NCCL on two GPUs (needs the nvidia-h200-x2 kind).
      step tp_gpu_test 240 "$B/tests/gpu/tp_gpu_test" '[gpu]' -r compact
      rc=$?; row tp_gpu_test "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -oE 'TP=2 on 2 GPUs[^)]*\)' "$L/tp_gpu_test.log" | tr '\n' ';' | head -c 200)"
      step tp2_run 240 "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --layers 4 --tokens 2048 --tp 2 --gpus 2 --out "$L/tp2"
      rc=$?; row tp2_run "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E 'rank [01]:' "$L/tp2_run.log" | tr -s ' ' | tr '\n' ';' | head -c 200)" ;;
    symm)
      # Issue 13 on 2 GPUs: Kimi-K2.5 16K TP=2 with NCCL symmetric memory, ranks as processes and
      # as threads, the emulated TP=2 run, the all-reduce on the window vs an ordinary buffer, the
      # GPU tests (forced fallback included), and a forced fallback through the CLI.
      step symm_processes 200 "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --tokens 16384 --gpus 2 \
        --launch processes --symm-mem on --out "$L/symm-proc"
      cp "$L"/symm-proc/rank*.log "$L/" 2>/dev/null
      step symm_threads 200 "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --tokens 16384 --gpus 2 \
        --symm-mem on --out "$L/symm-thr"
      step symm_emulated 200 "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --tokens 16384 --tp 2 --no-cupti \
        --out "$L/symm-emu"
      res=$(python3 scripts/symm_check.py "$L/symm-thr" "$L/symm-proc" "$L/symm-emu" "$L/symm_threads.log" "$L/symm_processes.log" 2>&1)
      echo "$res" > "$L/symm_check.txt"; echo "$res"
      row symm_kimi_tp2 "$(echo "$res" | tail -n1)" "$(echo "$res" | grep -E '^reuse' | head -c 180)"
      step allreduce 90 "$B/bench/nccl/bench_allreduce" --gpus 2 --tokens 16384 --hidden 7168 --iters 20
      row allreduce "$([ $? -eq 0 ] && echo DONE || echo FAIL)" "$(grep -E 'busbw' "$L/allreduce.log" | tr -s ' ' | tr '\n' ';' | head -c 200)"
      step symm_forced 120 "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --layers 4 --tokens 2048 --gpus 2 \
        --launch processes --symm-mem on --symm-outside-layer 0 --mode reuse --no-cupti --out "$L/symm-forced"
      row symm_forced "$(grep -q 'fallback (layers 1)' "$L/symm_forced.log" && echo PASS || echo FAIL)" "$(grep -E 'MoE output' "$L/symm_forced.log" | head -c 160)"
      step tp_gpu_test 240 "$B/tests/gpu/tp_gpu_test" '[gpu]' -r compact
      rc=$?; row tp_gpu_test "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -oE '(TP=2 on 2 GPUs|symm-mem on)[^)]*' "$L/tp_gpu_test.log" | tr '\n' ';' | head -c 200)" ;;
    hf)
      # An unmodified transformers MoE model traced with Python stacks: the traced peak equals
      # max_memory_allocated, the largest transient allocations name transformers lines, weights
      # are inferred persistent, the ranked fixes name source lines.
      if python3 -c "import transformers" 2>/dev/null; then
        step hf_trace 240 "$B/src/cli/moeprof" trace --torch-async --uses --stacks python --report \
          --out-json "$L/hf_report.json" --out "$L/hf.mtrace" -- python3 tests/profiler/hf_moe_prefill.py 3001
        rc=$?
        "$B/src/cli/moeprof" plan "$L/hf.mtrace" --json --fixes 5 --top 40 > "$L/hf_plan.json" 2> "$L/hf_plan.err"
        "$B/src/cli/moeprof" plan "$L/hf.mtrace" --fixes 5 --top 12 > "$L/hf_plan.txt" 2>&1
        res=$(python3 scripts/hf_stack_check.py "$L/hf_trace.log" "$L/hf_report.json" "$L/hf_plan.json" 2>&1)
        [ $rc -ne 0 ] && res="FAIL trace exit $rc"
        row hf_stacks "${res%% *}" "${res#* }"
        # Overhead: the same prefill untraced, traced without stacks, traced with Python stacks.
        for v in ${HF_ORDER:-none plain stacks plain stacks none plain stacks plain stacks}; do
          t0=$(date +%s%N)
          case $v in
            none) PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 tests/profiler/hf_moe_prefill.py 3001 > "$L/hf_t_$v.log" 2>&1 ;;
            plain) "$B/src/cli/moeprof" trace --torch-async --out "$L/hf_t.mtrace" -- python3 tests/profiler/hf_moe_prefill.py 3001 > "$L/hf_t_$v.log" 2>&1 ;;
            stacks) "$B/src/cli/moeprof" trace --torch-async --stacks python --out "$L/hf_t.mtrace" -- python3 tests/profiler/hf_moe_prefill.py 3001 > "$L/hf_t_$v.log" 2>&1 ;;
          esac
          echo "$v: process $(( ($(date +%s%N) - t0) / 1000000 )) ms, prefill $(grep -o '"prefill_seconds": [0-9.e-]*' "$L/hf_t_$v.log" | cut -d' ' -f2) s;" >> "$L/hf_overhead.txt"
        done
        row hf_overhead INFO "$(python3 - "$L/hf_overhead.txt" <<'PY'
import re, statistics, sys
v = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+): process (\d+) ms, prefill ([0-9.e-]+) s", line)
    if m: v.setdefault(m[1], []).append(float(m[3]) * 1e3)
med = {k: statistics.median(x) for k, x in v.items()}
out = [f"{k} prefill median {med[k]:.2f} ms of {len(v[k])} ({', '.join(f'{t:.2f}' for t in v[k])})" for k in v]
if "plain" in med and "stacks" in med: out.append(f"stacks/plain {med['stacks'] / med['plain']:.3f}")
if "none" in med and "plain" in med: out.append(f"plain/none {med['plain'] / med['none']:.3f}")
print("; ".join(out))
PY
)"
      else
        row hf_stacks SKIP "no transformers"
      fi ;;
    ncu)
      # Nsight Compute on the two expert GEMMs (bench shape, one launch each) and on the
      # memory-bound ops of a 4-layer seed run: speed of light, warp stalls, and per-SASS-line stall
      # samples (source page). Clocks are left alone (--clock-control none).
      NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -n1)
      SEC="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis"
      export MOEPROF_BENCH_PROFILE=1
      # (The regex leaves out bench_moe_gemm's pack_tiled_kernel launches: "_tiled_kernel" does not match.)
      step ncu_gemm 150 "$NCU" --clock-control none $SEC -k regex:"(^|:)(tiled|persist|persist_rs)_kernel" -c 2 -f -o "$L/ncu_gemm" "$B/bench/gpu/bench_moe_gemm"
      rc=$?; unset MOEPROF_BENCH_PROFILE
      row ncu_gemm "rc=$rc" "$(grep -cE '==PROF==' "$L/ncu_gemm.log") prof lines"
      step ncu_ops 150 "$NCU" --clock-control none $SEC -k regex:'fp4_quantize|rmsnorm|moe_combine|router|rope|silu|kv_cache|mla_build_k' --launch-skip 10 -c 12 -f -o "$L/ncu_ops" \
        "$B/src/cli/moeprof" run --no-cupti --layers 4 --mode baseline --quiet --out "$L/ncu-run"
      row ncu_ops "rc=$?" ""
      for r in ncu_gemm ncu_ops; do
        [ -f "$L/$r.ncu-rep" ] || continue
        "$NCU" -i "$L/$r.ncu-rep" --page details --print-details all > "$L/$r.details.txt" 2>&1
        "$NCU" -i "$L/$r.ncu-rep" --page source --csv --print-source sass > "$L/$r.source.csv" 2>&1 || \
          "$NCU" -i "$L/$r.ncu-rep" --page source --csv > "$L/$r.source.csv" 2>&1
        cp "$L/$r.ncu-rep" "$L/$r.details.txt" "$L/$r.source.csv" "$OUT/" 2>/dev/null
      done ;;
    snapshot)
      # Real PyTorch memory snapshots for tests/golden/torch/real (the import test's fixtures).
      if python3 -c "import torch" 2>/dev/null; then
        step snapshot 120 python3 scripts/torch_snapshot_fixture.py --out "$L/torch-real"
        rc=$?
        for f in "$L"/torch-real/*.pickle; do
          [ -e "$f" ] && "$B/src/cli/moeprof" import "$f" --out "${f%.pickle}.mtrace" >> "$L/snapshot_import.log" 2>&1
        done
        tar czf "$OUT/torch-real.tgz" -C "$L" torch-real 2>/dev/null
        row snapshot "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(ls "$L"/torch-real 2>/dev/null | tr '\n' ' ')"
      fi ;;
    sanitizer)
      # compute-sanitizer on the tiny model (all modes, no CUPTI: the sanitizer holds the slot).
      for tool in memcheck racecheck initcheck; do
        step "cs_$tool" 90 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/src/cli/moeprof" run --backend cuda \
          --model tiny --tokens 100 --mode all --no-cupti --quiet --out "$L/cs-$tool"
        rc=$?
        row "cs_$tool" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E 'ERROR SUMMARY' "$L/cs_$tool.log" | tail -n1)"
      done
      # The op tests include a deliberate out-of-memory case: API errors are not reported.
      step cs_ops 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$B/tests/gpu/cuda_ops_test" '[gpu]' -r compact
      rc=$?; row cs_ops_memcheck "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E 'ERROR SUMMARY' "$L/cs_ops.log" | tail -n1)" ;;
    gemm-sanitizer)
      # synccheck / racecheck on the warp-specialized GEMMs' barrier protocols (mbarriers, named
      # barriers, the resident A tiles' a_free barriers, the weight-only ring of the RS form): the
      # e4m3 scale sweep, kWgmmaPersist (8), kWgmmaPersistRA (9), kWgmmaWsRs (10, also on tiled w13)
      # and gemm2 on tiled w2 (11: kAuto's resident-A kernel, 12: kWgmmaPersist) against kWgmma,
      # all three shapes.
      for tool in synccheck racecheck; do
        step "cs_sweep_$tool" 300 env MOEPROF_SWEEP_PATHS=8,9,10,11,12,13 compute-sanitizer --tool "$tool" --error-exitcode 9 \
          "$B/tests/gpu/cuda_ops_test" '*every e4m3 scale byte*' -r compact
        rc=$?
        row "cs_sweep_$tool" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/cs_sweep_$tool.log" | tail -n1)"
      done ;;
    serving)
      # Issue 36 on the GPU: the serving GPU tests (paged MLA kernels against the CPU reference,
      # graph replay vs eager, tokens across modes and backends, CUPTI's graph pool vs the
      # executor's), the absorbed decode kernels' bandwidth, and the issue's H200 workload.
      # serving_gpu_test finds moeprof under the build tree it was configured in.
      want=${MOEPROF_CONFIGURED_BUILD:-/work/main/build}
      if [ -n "$want" ] && [ ! -e "$want/src/cli/moeprof" ]; then mkdir -p "$(dirname "$want")"; ln -sfn "$PWD/$B" "$want"; fi
      step serving_gpu_test 240 "$B/tests/gpu/serving_gpu_test" '[gpu]' -r compact -d yes
      rc=$?; row serving_gpu_test "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E 'test cases|passed|failed' "$L/serving_gpu_test.log" | tail -n1)"
      step bench_mla_decode 90 "$B/bench/gpu/bench_mla_decode" 64 2048 8192 16384 32768
      rc=$?; row bench_mla_decode "rc=$rc" "$(grep -E 'GB/s' "$L/bench_mla_decode.log" | tail -n 4 | tr -s ' ' | tr '\n' ';' | head -c 300)"
      python3 -c "import json; print(json.dumps({'prompt_tokens': 65536, 'output_tokens': 1})); [print(json.dumps({'prompt_tokens': 2048, 'output_tokens': 256, 'arrival_step': 4})) for _ in range(64)]" > "$L/h200.jsonl"
      # Each run: name, then its extra options (the router's routing, traced by CUPTI; a drawn
      # uniform routing untraced, whose decode steps report the bytes they read at least).
      while read -r name extra; do
        [ -z "$name" ] && continue
        step "serving_$name" "${SERVING_MAX:-240}" "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --tp 4 --workload "$L/h200.jsonl" \
          --chunked-prefill-size 16384 --mem-fraction-static 0.88 --cuda-graph-max-bs 64 $extra --out "$L/serving-$name"
        rc=$?; row "serving_$name" "rc=$rc" "$(grep -E '^  (prefill|decode) |reads at least' "$L/serving_$name.log" | tr -s ' ' | tr '\n' ';' | head -c 600)"
        cp "$L/serving-$name/report.json" "$OUT/serving-$name-report.json" 2>/dev/null
        cp "$L/serving_$name.log" "$OUT/" 2>/dev/null
      done <<< "${SERVING_RUNS:-baseline --mode baseline
uniform --mode baseline --routing uniform --no-cupti}"
      ;;
    moe-decode)
      # The expert GEMMs at decode batches (Kimi-K2.5 TP=4 rank shapes): kSmallM against the
      # 128-row-tile paths and the byte floor, with its checks (bench/gpu/bench_moe_decode.cpp).
      step bench_moe_decode 150 "$B/bench/gpu/bench_moe_decode"
      rc=$?; row bench_moe_decode "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E '^ +(1|64|256|512) ' "$L/bench_moe_decode.log" | tr -s ' ' | tr '\n' ';' | head -c 400)"
      cp "$L/bench_moe_decode.log" "$OUT/" 2>/dev/null ;;
    decode-profile)
      # Where a decode step's time goes: 64 requests of 16 + 64 tokens (one small prefill, then 63
      # decode steps at batch 64), eager (no graphs) so --op-times can time each op family; then
      # the same with graphs under nsys (kernel times inside the replays) where nsys exists.
      DP_ARGS="--backend cuda --model kimi-k2.5 --tp 4 --workload synthetic:64,16,64 --kv-tokens 65536 --routing uniform --no-cupti --mode baseline"
      step decode_ops 200 "$B/src/cli/moeprof" run $DP_ARGS --disable-cuda-graph --op-times --out "$L/decode-ops"
      rc=$?; row decode_ops "rc=$rc" "$(grep -E '^  (prefill|decode) ' "$L/decode_ops.log" | tr -s ' ' | tr '\n' ';' | head -c 300)"
      cp "$L"/decode-ops/*.ops.json "$L"/decode-ops/report.json "$OUT/" 2>/dev/null
      NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n1)
      if [ -n "$NSYS" ]; then
        step decode_nsys 200 "$NSYS" profile --cuda-graph-trace=node -f true -o "$L/decode" "$B/src/cli/moeprof" run $DP_ARGS --out "$L/decode-graphs"
        step decode_nsys_stats 120 "$NSYS" stats -r cuda_gpu_kern_sum -f csv -o "$L/decode" "$L/decode.nsys-rep"
        cp "$L"/decode*.csv "$OUT/" 2>/dev/null
        row decode_nsys "rc=$?" "$(ls "$L"/decode*.csv 2>/dev/null | head -n1)"
      else
        row decode_nsys SKIP "no nsys"
      fi
      ;;
    routing)
      # --routing on the GPU: the CUDA backend allocates what the meta backend does for the same
      # drawn routing with routed rows (Kimi-K2.5, 4 layers, 2,053 tokens, TP=4 shapes).
      for be in cuda meta; do
        step "routing_$be" 120 "$B/src/cli/moeprof" run --backend "$be" --model kimi-k2.5 --tp 4 --layers 4 --tokens 2053 \
          --routing zipf:1.2 --moe-rows routed --mode all --no-cupti --quiet --out "$L/routing-$be"
      done
      res=$(python3 - "$L/routing-cuda/report.json" "$L/routing-meta/report.json" <<'PY' 2>&1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
# The CUDA backend also holds cuBLASLt's workspace (category workspace), which cpu and meta do
# not allocate: the peaks compare without the workspace live at the CUDA peak.
ra = {r["name"]: r["peak_activation_bytes"] - r["live_at_peak"]["by_category"]["workspace"] for r in a["runs"]}
rb = {r["name"]: r["peak_activation_bytes"] for r in b["runs"]}
print(("PASS" if ra == rb else "FAIL"), "cuda less its workspace", ra, "meta", rb)
PY
)
      row routing_gpu "${res%% *}" "${res#* }" ;;
    ep)
      # --ep on the GPU: each emulated rank of the CUDA backend allocates what the meta backend's
      # rank does for the same drawn routing (Kimi-K2.5, EP=2, 4 layers, 2,053 tokens, zipf:1.2).
      for r in 0 1; do
        step "ep_cuda_$r" 120 "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --ep 2 --ep-rank "$r" --layers 4 --tokens 2053 \
          --routing zipf:1.2 --mode baseline --no-cupti --quiet --out "$L/ep-cuda-$r"
      done
      step ep_meta 60 "$B/src/cli/moeprof" run --backend meta --model kimi-k2.5 --ep 2 --layers 4 --tokens 2053 \
        --routing zipf:1.2 --mode baseline --quiet --out "$L/ep-meta"
      res=$(python3 - "$L/ep-meta/report.json" "$L/ep-cuda-0/report.json" "$L/ep-cuda-1/report.json" <<'PY' 2>&1
import json, sys
m = json.load(open(sys.argv[1]))["runs"][0]["ranks"]
meta = {r["rank"]: r["peak_activation_bytes"] for r in m}
cuda = {}
for p in sys.argv[2:]:
    run = json.load(open(p))["runs"][0]
    ws = run["live_at_peak"]["by_category"]["workspace"]  # cuBLASLt's, which meta does not allocate
    for r in run["ranks"]:
        cuda[r["rank"]] = r["peak_activation_bytes"] - ws
ok = all(meta.get(k) == v for k, v in cuda.items()) and len(cuda) == 2
print(("PASS" if ok else "FAIL"), "cuda less its workspace", cuda, "meta", meta)
PY
)
      row ep_gpu "${res%% *}" "${res#* }"
      # Real EP=2 over NCCL (2 GPUs): per-rank peaks against the emulated ranks above, the
      # all-to-all's wall time; tp_gpu_test's [ep] case checks allocations rank by rank.
      if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
        for rt in uniform zipf:1.2; do
          step "ep_real_${rt%%:*}" 150 "$B/src/cli/moeprof" run --backend cuda --model kimi-k2.5 --ep 2 --gpus 2 --layers 4 --tokens 2053 \
            --routing "$rt" --mode baseline --no-cupti --quiet --json --out "$L/ep-real-${rt%%:*}" > "$L/ep-real-${rt%%:*}.json"
        done
        res=$(python3 - "$L/ep-real-zipf.json" "$L/ep-meta/report.json" <<'PY' 2>&1
import json, sys
real = {r["rank"]: r["peak_activation_bytes"] for r in json.load(open(sys.argv[1]))["runs"][0]["ranks"]}
meta = {r["rank"]: r["peak_activation_bytes"] for r in json.load(open(sys.argv[2]))["runs"][0]["ranks"]}
print("INFO", "real EP=2 zipf:1.2 peaks", real, "meta", meta, "(real includes cuBLASLt's workspace)")
PY
)
        row ep_real "${res%% *}" "${res#* }"
        step bench_alltoall 120 "$B/bench/nccl/bench_alltoall" --gpus 2 --tokens 16384 --hidden 7168 --topk 8
        row bench_alltoall "$([ $? -eq 0 ] && echo INFO || echo FAIL)" "$(grep -E 'ms' "$L/bench_alltoall.log" | tr -s ' ' | tr '\n' ';' | head -c 200)"
        step tp_gpu_test_ep 300 "$B/tests/gpu/tp_gpu_test" '[ep]' -r compact
        rc=$?; row tp_gpu_test_ep "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -oE 'EP=2 on 2 GPUs[^;]*' "$L/tp_gpu_test_ep.log" | tr '\n' ';' | head -c 200)"
      fi ;;
    sizelaw)
      # Issue 37 on the GPU: an unmodified PyTorch program (tests/profiler/hf_moe_prefill.py, small
      # random config) traced at four prompt lengths; moeprof fit predicts the traced peak of a
      # longer prompt, which is then traced. Target: within 1%.
      # The dense variant of the script by default (SIZELAW_MODEL="" for the MoE one), at sizes of one
      # regime of its allocation sequence (from 2,003 tokens on; docs/budget.md "On a GPU").
      if python3 -c "import transformers" 2>/dev/null; then
        SIZES=${SIZELAW_SIZES:-2003 2503 3001 3499}; AT=${SIZELAW_AT:-4001}
        traces=()
        for n in $SIZES $AT; do
          step "sizelaw_$n" 90 "$B/src/cli/moeprof" trace --torch-async --out "$L/sizelaw_$n.mtrace" -- python3 tests/profiler/hf_moe_prefill.py "$n" ${SIZELAW_MODEL-llama}
          cp "$L/sizelaw_$n.mtrace" "$OUT/" 2>/dev/null
          [ "$n" != "$AT" ] && traces+=("$L/sizelaw_$n.mtrace")
        done
        "$B/src/cli/moeprof" fit "${traces[@]}" --var tokens="$(echo $SIZES | tr ' ' ',')" --at tokens="$AT" --json > "$L/sizelaw_fit.json" 2> "$L/sizelaw_fit.err"
        "$B/src/cli/moeprof" fit "${traces[@]}" --var tokens="$(echo $SIZES | tr ' ' ',')" --at tokens="$AT" > "$L/sizelaw_fit.txt" 2>&1
        "$B/src/cli/moeprof" plan "$L/sizelaw_$AT.mtrace" --json > "$L/sizelaw_plan.json" 2> "$L/sizelaw_plan.err"
        res=$(python3 - "$L/sizelaw_fit.json" "$L/sizelaw_plan.json" <<'PY' 2>&1
import json, sys
f = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))
pred = f["predictions"][0]
def find(d, key):
    if isinstance(d, dict):
        for k, v in d.items():
            if k == key and isinstance(v, int): return v
            r = find(v, key)
            if r is not None: return r
    if isinstance(d, list):
        for v in d:
            r = find(v, key)
            if r is not None: return r
got_a, got_t = find(p, "peak_activation_bytes"), find(p, "peak_total_bytes")
ea = (pred["peak_activation_bytes"] - got_a) / got_a * 100
et = (pred["peak_total_bytes"] - got_t) / got_t * 100
ok = abs(ea) <= 1 and abs(et) <= 1
print(("PASS" if ok else "FAIL"), f"activation predicted {pred['peak_activation_bytes']} traced {got_a} ({ea:+.3f}%); total predicted {pred['peak_total_bytes']} traced {got_t} ({et:+.3f}%)")
PY
)
        row sizelaw "${res%% *}" "${res#* }"
        cp "$L/sizelaw_fit.txt" "$L/sizelaw_fit.json" "$OUT/" 2>/dev/null
      else
        row sizelaw SKIP "no transformers"
      fi ;;
    budget-edge)
      # Issue 37: the budget's edge on this GPU. A CUPTI-traced serving run (Kimi-K2.5 TP=4 rank
      # shapes, the weights the device holds, a small pool) gives the trace; moeprof budget sizes the
      # pool for this device (--gpu-memory: the driver's total; the trace's own measurement of the
      # memory beyond its allocations, the CUDA context among it, is its `untraced` component).
      # Untraced runs then take the pool at the capacity K (must complete) and at K x 1.01 (must
      # fail with exit 3); K x 0.99 runs only if K fails.
      BE="--backend cuda --model kimi-k2.5 --tp 4 --workload synthetic:16,512,32,7 --chunked-prefill-size 4096 --cuda-graph-max-bs 16 --mode baseline --quiet"
      step be_trace 300 "$B/src/cli/moeprof" run $BE --kv-tokens 65536 --out "$L/be0"
      rc=$?
      read -r total margin < <(python3 -c "
import json,sys; s=json.load(open('$L/be0/report.json'))['runs'][0]['serving']
print(s['memory']['device_bytes'], s['memory']['device_bytes'] - s['pool_sizing']['free_before_weights_bytes'])" 2>/dev/null)
      if [ $rc -ne 0 ] || [ -z "${total:-}" ]; then row budget_edge FAIL "the traced run: exit $rc"; continue; fi
      "$B/src/cli/moeprof" budget "$L/be0/baseline.mtrace" --gpu-memory "$total" --fixes 0 --json > "$L/be_budget.json" 2> "$L/be_budget.err"
      "$B/src/cli/moeprof" budget "$L/be0/baseline.mtrace" --gpu-memory "$total" --fixes 0 > "$L/be_budget.txt" 2>&1
      cp "$L/be_budget.json" "$L/be_budget.txt" "$L/be_trace.log" "$OUT/" 2>/dev/null
      K=$(python3 -c "import json; print(json.load(open('$L/be_budget.json'))['kv_tokens'])" 2>/dev/null)
      if [ -z "$K" ]; then row budget_edge FAIL "budget: $(head -c 200 "$L/be_budget.err")"; continue; fi
      # The same budget from CUPTI's trace of that run (its pool records, the driver's sizes).
      "$B/src/cli/moeprof" budget "$L/be0/baseline.cupti.mtrace" --gpu-memory "$total" --fixes 0 --json > "$L/be_budget_cupti.json" 2> "$L/be_budget_cupti.err"
      cp "$L/be_budget_cupti.json" "$L/be_budget_cupti.err" "$OUT/" 2>/dev/null
      Kc=$(python3 -c "import json; print(json.load(open('$L/be_budget_cupti.json'))['kv_tokens'])" 2>/dev/null)
      rest=$(python3 -c "import json; c={c['name']: c['bytes'] for c in json.load(open('$L/be_budget.json'))['components']}; print(c['allocator_rest'], 'B, untraced', c['untraced'])" 2>/dev/null)
      K101=$(( K + (K + 99) / 100 )); K99=$(( K - K / 100 ))
      step be_at 300 "$B/src/cli/moeprof" run $BE --no-cupti --kv-tokens "$K" --out "$L/be_at"; rat=$?
      step be_over 300 "$B/src/cli/moeprof" run $BE --no-cupti --kv-tokens "$K101" --out "$L/be_over"; rover=$?
      r99=-
      if [ $rat -ne 0 ]; then step be_under 300 "$B/src/cli/moeprof" run $BE --no-cupti --kv-tokens "$K99" --out "$L/be_under"; r99=$?; fi
      cp "$L/be_at.log" "$L/be_over.log" "$L/be_under.log" "$OUT/" 2>/dev/null
      cp "$L/be_at/report.json" "$OUT/be_at-report.json" 2>/dev/null
      # The failed run's trace must read back (written up to the failure, closed).
      "$B/src/cli/moeprof" plan "$L/be_over/baseline.mtrace" > "$L/be_over_plan.log" 2>&1; rplan=$?
      ok=FAIL; [ $rat -eq 0 ] && [ $rover -eq 3 ] && [ $rplan -eq 0 ] && ok=PASS
      row budget_edge "$ok" "device $total B (in use before the run $margin B), allocator_rest $rest B, K=$K (CUPTI trace: ${Kc:-?}): exit $rat; K+1% ($K101): exit $rover, its trace reads (plan exit $rplan); K-1%: $r99; $(grep -m1 -o 'out of GPU memory[^)]*)' "$L/be_over.log" | head -c 160)"
      ;;
    oom)
      # Per-layer Kimi-K2.5 weights need ~150 GB: the run must fail with exit 3 and one line, and
      # the trace written up to the failure must still read back.
      step oom 120 bash -c "\"$B/src/cli/moeprof\" run --weights per-layer --mode baseline --quiet --out \"$L/oom\" 2> \"$L/oom.err\""
      rc=$?
      "$B/src/cli/moeprof" plan "$L/oom/baseline.mtrace" > "$L/oom_plan.log" 2>&1
      prc=$?
      n=$(wc -l < "$L/oom.err")
      if [ $rc -eq 3 ] && [ "$n" -eq 1 ] && grep -q "out of GPU memory" "$L/oom.err" && [ $prc -eq 0 ]; then
        row oom PASS "exit 3, one line; trace readable: $(grep -m1 'peak total' "$L/oom_plan.log" | tr -s ' ')"
      else
        row oom FAIL "exit $rc, $n lines on stderr, plan exit $prc: $(head -c 200 "$L/oom.err")"
      fi ;;
  esac
done

rm -f "$L"/seed*/*.mtrace.tmp
tar czf "$OUT/logs.tgz" -C /tmp moeprof-device-logs 2>/dev/null
for f in seed/report.json seed/report.md; do [ -f "$L/$f" ] && cp "$L/$f" "$OUT/seed-$(basename "$f")"; done
{
  echo
  echo "================ device_all summary ($(nvidia-smi -L | head -n1)) ================"
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo "total $(( $(date +%s) - START )) s"
} | tee "$OUT/summary.txt"
