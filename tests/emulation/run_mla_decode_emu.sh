#!/usr/bin/env bash
# Builds and runs the host emulation of the tensor-core paged MLA decode attention
# (mla_decode_emu.cpp) on odd sizes: tile edges of the 32-position tiles, head counts that leave a
# partial 16-head group, the family's D = 576 / kvl = 512 and tiny's 48 / 32. No GPU needed; about
# 10 s on two cores. CTest builds the same emulator (mla_decode_emu) and runs
# these cases as emulation:mla_decode:*.
#   usage: tests/emulation/run_mla_decode_emu.sh [WORKDIR]   (default /tmp/moeprof-mlad-emu)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${1:-/tmp/moeprof-mlad-emu}"
mkdir -p "$work"
python3 "$root/tests/emulation/extract_mlad_body.py" "$root/kernels/mla_decode.cu" "$work/mlad_body.inc"
g++ -std=c++20 -O1 -pthread -w -I"$work" -I"$root" -I/usr/local/cuda/include \
  "$root/tests/emulation/mla_decode_emu.cpp" -o "$work/mla_decode_emu"
rc=0
# N heads kvl rope C seed
for args in "3 4 32 16 33 1" "2 20 128 16 64 2" "2 16 512 64 65 3" "2 16 512 64 31 4" "1 17 64 16 1 5" "2 3 32 16 97 6"; do
  "$work/mla_decode_emu" $args || rc=1
done
exit $rc
