#!/usr/bin/env bash
# The streaming benchmark of docs/performance.md ("Traces of 100 million events"): for each event
# count, generates a trace of each shape (bench_stream generate), times `moeprof plan --json` on it
# with /usr/bin/time -v (wall, CPU, peak RSS; the default path, whatever --stream auto chooses: the
# JSON's "streamed" says which), checks the path taken, and deletes the trace before the next one.
# At the last count it also times the in-memory path (--stream off) of the first shape at the first
# count, a report, 8 rank traces merged, and an export to JSON lines.
#   usage: bench/stream/run.sh [BUILD_DIR] [WORK_DIR] [EVENTS...]
#          (defaults: build, /tmp/moeprof-stream-bench, 10000000 100000000; SHAPES=name,name to choose)
set -euo pipefail
B=${1:-build}
W=${2:-/tmp/moeprof-stream-bench}
shift 2 2>/dev/null || shift $#
COUNTS=("$@")
[ ${#COUNTS[@]} -gt 0 ] || COUNTS=(10000000 100000000)
M="$B/src/cli/moeprof"
G="$B/bench/stream/bench_stream"
mkdir -p "$W"
# name | generator options
SHAPE_LIST=(
  "executor-v2|--pattern executor"
  "named-v1|--pattern window --live 64 --names 10 --layers 61 --version 1"
  "stacks-uses-v2|--pattern window --live 64 --names 10 --layers 61 --stacks 64 --uses"
  "live4096-v2|--pattern window --live 4096 --names 10 --layers 61 --uses"
  "traced-v2|--pattern window --live 256 --names 0 --layers 0 --stacks 256 --uses --traced"
  "live16384-v1|--pattern window --live 16384 --names 10 --layers 61 --uses --version 1"
  "live32768-v1|--pattern window --live 32768 --names 10 --layers 61 --uses --version 1"
  "live65536-v1|--pattern window --live 65536 --names 10 --layers 61 --uses --version 1"
  "llama-gen-v2|--pattern program --csv $(dirname "$0")/../arena/torch/instances/llama-generate.csv"
)
row() { printf '%-16s %11s %9s %9s %9s %10s %9s %9s\n' "$@"; }
measure() {  # label events file cmd...: wall, CPU (user+sys), peak RSS, streamed, hand-offs
  local label=$1 n=$2 size=$3; shift 3
  /usr/bin/time -v "$@" > "$W/out.json" 2> "$W/time.txt" || { echo "FAILED: $label"; tail -5 "$W/time.txt"; return 1; }
  local wall cpu rss streamed hand
  wall=$(grep 'Elapsed (wall clock)' "$W/time.txt" | awk '{print $NF}')
  cpu=$(awk -F': ' '/User time/{u=$2} /System time/{s=$2} END{printf "%.2f", u+s}' "$W/time.txt")
  rss=$(grep 'Maximum resident set size' "$W/time.txt" | awk '{printf "%.0f MB", $NF/1024}')
  streamed=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j.get("streamed","-"))' "$W/out.json" 2>/dev/null || echo -)
  hand=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["reuse"]; print(r["handoff_count"] if r and r["handoffs_computed"] else "n/a")' "$W/out.json" 2>/dev/null || echo -)
  row "$label" "$n" "$size" "$wall" "$cpu" "$rss" "$streamed" "$hand"
}
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GB RAM, load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%F)"
row "shape" "events" "file" "wall" "CPU s" "peak RSS" "streamed" "hand-offs"
for n in "${COUNTS[@]}"; do
  for entry in "${SHAPE_LIST[@]}"; do
    name=${entry%%|*}
    opts=${entry#*|}
    if [ -n "${SHAPES:-}" ] && [[ ",$SHAPES," != *",$name,"* ]]; then continue; fi
    # shellcheck disable=SC2086
    "$G" generate --events "$n" --devices 4 $opts --out "$W/t.mtrace" > /dev/null
    sync  # the trace's write-back done before the timing (it ran beside the first shapes' plans)
    size=$(du -h "$W/t.mtrace" | cut -f1)
    measure "$name" "$n" "$size" "$M" plan "$W/t.mtrace" --json
    if [ "$n" = "${COUNTS[0]}" ] && [ "$name" = "executor-v2" ]; then
      measure "  --stream off" "$n" "$size" "$M" plan "$W/t.mtrace" --json --stream off
    fi
    if [ "$n" = "${COUNTS[-1]}" ] && [ "$name" = "executor-v2" ]; then
      measure "  report" "$n" "$size" "$M" report "$W/t.mtrace" --out-json "$W/report.json"
      "$G" read "$W/t.mtrace"
      rm -f "$W/report.json"
    fi
    rm -f "$W/t.mtrace"
  done
done
# The ranks of one run: 8 traces of 1e7 records each, one device each, merged.
"$G" generate --events 10000000 --ranks 8 --out "$W/r" > /dev/null
measure "8 ranks merged" "8x1e7" "$(du -ch "$W"/r.rank*.mtrace | tail -1 | cut -f1)" "$M" plan "$W"/r.rank{0,1,2,3,4,5,6,7}.mtrace --json
measure "export jsonl" "1e7" "$(du -h "$W/r.rank0.mtrace" | cut -f1)" "$M" export "$W/r.rank0.mtrace" --out-jsonl "$W/r0.jsonl" --json
rm -f "$W/r0.jsonl"
[ "${KEEP:-0}" = 1 ] || rm -rf "$W"
