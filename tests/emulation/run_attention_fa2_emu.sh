#!/usr/bin/env bash
# Builds and runs the host emulation of the FA2 attention kernels (attention_fa2_emu.cpp) on tile-edge
# sizes, for every variant. No GPU needed; a few minutes on two cores. Not part of ctest.
#   usage: tests/emulation/run_attention_fa2_emu.sh [WORKDIR]   (default /tmp/moeprof-fa2-emu)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-/tmp/moeprof-fa2-emu}"
mkdir -p "$work"
python3 - "$root/kernels/mla_attention.cu" "$work/fa2_body.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
i = s.index('namespace fa2 {'); j = s.index('}  // namespace fa2') + len('}  // namespace fa2')
body = s[i:j]
# The PTX helpers (cp.async, ldmatrix, exp2, bf16x2) live in kernels/attention_ptx.cuh, which is not
# included here: the emulator defines them.
assert 'smem_u32(const void' not in body
old = 'extern __shared__ __align__(16) unsigned char smem_raw[];'
assert old in body
open(sys.argv[2], 'w').write(body.replace(old, 'unsigned char* smem_raw = emu::cta_smem;'))
PY
cuda_inc=/usr/local/cuda/include
g++ -std=c++20 -O1 -pthread -w -I"$work" -I"$root" -I"$root/kernels" -I"$cuda_inc" \
  "$root/tests/emulation/attention_fa2_emu.cpp" -o "$work/attention_fa2_emu"
rc=0
for T in 1 2 37 48 63 64 129 255 256 257 300; do
  for v in 2 3 4 5; do "$work/attention_fa2_emu" "$T" 2 "$v" || rc=1; done
done
"$work/attention_fa2_emu" 520 1 4 192 320 || rc=1   # cuda_ops_test's layout: v at qk_dim within a 320-wide head
exit $rc
