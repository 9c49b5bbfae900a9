#!/usr/bin/env bash
# Builds and runs the host emulation of the tiled FP4 grouped GEMMs (moe_gemm_fp4_emu.cpp) on edge
# shapes. No GPU needed; about a minute per variant on two cores; VARIANTS="1 2" picks variants. CTest
# runs the selftest and one shape per variant (tests/emulation/CMakeLists.txt, GCC builds only).
#   usage: tests/emulation/run_moe_gemm_fp4_emu.sh [WORKDIR]   (default /tmp/moeprof-gemm-emu)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-/tmp/moeprof-gemm-emu}"
mkdir -p "$work"
python3 "$root/tests/emulation/extract_moe_gemm_body.py" "$root/kernels" "$work/v2_body.inc"
g++ -std=c++20 -O2 -ffp-contract=off -pthread -w -I"$work" -I"$root" "$root/tests/emulation/moe_gemm_fp4_emu.cpp" -o "$work/moe_gemm_fp4_emu"
rc=0
# Tiled variants to run (argv 8 of the emulator): 0 kTiled, 1 kTiledSkip, 2 kTiledStaged. The wgmma
# paths (kWgmma, kWgmmaWs, kWgmmaWs2) are not emulated (their sm_90a code is compiled out here).
variants="${VARIANTS:-0 1 2}"
# T k E E_used H I tile
"$work/moe_gemm_fp4_emu" selftest || rc=1
for v in $variants; do
"$work/moe_gemm_fp4_emu" 37 2 5 4 128 80 16 $v || rc=1      # empty expert, moe tile 16, I % 128 != 0
"$work/moe_gemm_fp4_emu" 129 4 16 13 192 64 8 $v || rc=1    # tile 8: many short segments, K = 3 steps
"$work/moe_gemm_fp4_emu" 200 3 6 6 64 272 64 $v || rc=1     # K = 64 (one step), I = 272 (gemm2 N tail)
"$work/moe_gemm_fp4_emu" 300 2 3 2 256 576 64 $v || rc=1    # segments > 128 rows, 9 K steps
"$work/moe_gemm_fp4_emu" 90 2 4 3 1088 128 64 $v || rc=1   # gemm2: 5 column tiles, 4 per CTA, the last partial
"$work/moe_gemm_fp4_emu" 60 2 3 3 1040 64 64 $v || rc=1    # gemm2 only: last column tile 16 wide (partial warp tile)
done
# kSmallM (VARIANTS_SMALL, default "11 12": row-major and tiled weights); its shapes need gemm1
# I % 128 == 0 and gemm2 H % 256 == 0 (a GEMM of another shape is skipped).
for v in ${VARIANTS_SMALL:-11 12}; do
"$work/moe_gemm_fp4_emu" 37 3 9 3 256 128 8 $v || rc=1      # segments of 40 rows: 16 + 16 + 8
"$work/moe_gemm_fp4_emu" 64 8 24 24 256 256 8 $v || rc=1    # a decode batch: 1-2 live rows per expert
"$work/moe_gemm_fp4_emu" 300 2 3 2 256 256 64 $v || rc=1    # long segments (19 passes), 4 K steps
"$work/moe_gemm_fp4_emu" 9 1 30 30 256 128 8 $v || rc=1     # most experts empty, rows past offsets[E]
"$work/moe_gemm_fp4_emu" 20 2 4 4 768 384 8 $v || rc=1      # 3 column tiles, 12 K steps
done
exit $rc
