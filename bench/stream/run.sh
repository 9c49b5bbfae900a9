#!/usr/bin/env bash
# The streaming benchmark of docs/performance.md ("Traces of 100 million events"): generates a
# 1e8-event trace (6.4 GB, 4 devices) and 8 rank traces of 1e7 events each, then times the
# commands a user runs with /usr/bin/time -v (wall time, peak RSS): plan, plan --json, report,
# export --out-jsonl, and the merged plan over the 8 ranks; plus the raw reader's MB/s.
#   usage: bench/stream/run.sh [BUILD_DIR] [WORK_DIR] [EVENTS]
#          (defaults: build, /tmp/moeprof-stream-bench, 100000000; the files are removed at the end)
set -euo pipefail
B=${1:-build}
W=${2:-/tmp/moeprof-stream-bench}
N=${3:-100000000}
M="$B/src/cli/moeprof"
G="$B/bench/stream/bench_stream"
mkdir -p "$W"
row() { printf '%-44s %10s %10s\n' "$1" "$2" "$3"; }
timed() {  # label cmd...: prints wall seconds and peak RSS (MB)
  local label=$1; shift
  /usr/bin/time -v "$@" > "$W/out.txt" 2> "$W/time.txt" || { echo "FAILED: $label"; tail -5 "$W/time.txt"; return 1; }
  local wall rss
  wall=$(grep 'Elapsed (wall clock)' "$W/time.txt" | awk '{print $NF}')
  rss=$(grep 'Maximum resident set size' "$W/time.txt" | awk '{printf "%.0f", $NF/1024}')
  row "$label" "$wall" "${rss} MB"
}
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GB RAM; $(date -u +%F)"
[ -f "$W/big.mtrace" ] || "$G" generate --events "$N" --devices 4 --out "$W/big.mtrace"
[ -f "$W/r.rank7.mtrace" ] || "$G" generate --events 10000000 --ranks 8 --out "$W/r"
echo "trace: $(du -h "$W/big.mtrace" | cut -f1) ($N records); ranks: 8 x $(du -h "$W/r.rank0.mtrace" | cut -f1)"
row "command" "wall" "peak RSS"
timed "bench_stream read (one core, checksum+decode)" "$G" read "$W/big.mtrace"
grep -E 'MB/s' "$W/out.txt" || true
timed "moeprof plan (1e8 events)" "$M" plan "$W/big.mtrace"
timed "moeprof plan --json (1e8 events)" "$M" plan "$W/big.mtrace" --json
timed "moeprof report --out-json (1e8 events)" "$M" report "$W/big.mtrace" --out-json "$W/report.json"
timed "moeprof plan, 8 ranks x 1e7 events (merged)" "$M" plan "$W"/r.rank{0,1,2,3,4,5,6,7}.mtrace
timed "moeprof export --out-jsonl (8 x 1e7: rank 0)" "$M" export "$W/r.rank0.mtrace" --out-jsonl "$W/r0.jsonl" --stream on
rm -f "$W/r0.jsonl"
[ "${KEEP:-0}" = 1 ] || rm -rf "$W"
