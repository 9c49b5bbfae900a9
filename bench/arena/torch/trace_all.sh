#!/usr/bin/env bash
# On a GPU machine: trace each program of programs.py and write its arena instance.
#   bench/arena/torch/trace_all.sh MOEPROF OUTDIR
# Writes OUTDIR/NAME.mtrace, OUTDIR/NAME.csv (the activation buffers of the peak device, as
# `moeprof plan --arena --arena-out-csv` writes them) and OUTDIR/NAME.plan.json.
set -u
M=$1; O=$2; mkdir -p "$O"
D=$(cd "$(dirname "$0")" && pwd)
for p in gpt-train unet-train llama-generate; do
  t0=$(date +%s)
  timeout 100 "$M" trace --torch-async -o "$O/$p.mtrace" -- python3 "$D/programs.py" "$p" > "$O/$p.trace.log" 2>&1
  rc=$?
  "$M" plan "$O/$p.mtrace" --json --arena --arena-time-limit 0 --arena-out-csv "$O/$p.csv" > "$O/$p.plan.json" 2> "$O/$p.plan.log"
  echo "$p: trace exit $rc, plan exit $?, $(( $(date +%s) - t0 )) s, $(($(wc -l < "$O/$p.csv") - 1)) buffers"
done
