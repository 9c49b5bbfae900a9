#!/usr/bin/env bash
# Builds and runs the host emulation of the tiled FP4 grouped GEMMs (moe_gemm_fp4_emu.cpp) on edge
# shapes. No GPU needed; about a minute per variant on two cores; VARIANTS="1 2" picks variants. Not part of ctest.
#   usage: tests/emulation/run_moe_gemm_fp4_emu.sh [WORKDIR]   (default /tmp/moeprof-gemm-emu)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-/tmp/moeprof-gemm-emu}"
mkdir -p "$work"
python3 - "$root/kernels/moe_gemm_fp4.cu" "$root/kernels/fp4_quant.cuh" "$work/v2_body.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
i = s.index('namespace v2 {'); j = s.index('bool aligned(const void* ptr, int64_t ld, int a)')
body = s[i:j] + '}  // namespace v2\n'
a = body.index('__device__ __forceinline__ uint32_t smem_u32'); b = body.index('// fp16 with the value')
body = body[:a] + body[b:]
subs = [('extern __shared__ __align__(128) unsigned char smem_raw[];', 'unsigned char* smem_raw = emu::cta_smem;'),
        ('__shared__ int32_t row_src[BM];', 'int32_t* row_src = emu::row_src;'),
        ('__shared__ int32_t warp_tot[kNT / 32];', 'int32_t* warp_tot = emu::warp_tot;'),
        ('__shared__ __align__(8) uint64_t mbar[2 * kWsStages];', 'uint64_t* mbar = nullptr;'),
        ('__shared__ int64_t info[3];', 'int64_t* info = emu::info;')]
for o, n in subs:
    assert o in body, o
    body = body.replace(o, n)
q = open(sys.argv[2]).read()
k = q.index('__device__ __forceinline__ uint8_t nvfp4_quantize16'); l = q.index('#endif', k)
open(sys.argv[3], 'w').write(q[k:l] + body)
PY
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
exit $rc
