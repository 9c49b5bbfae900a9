#!/usr/bin/env python3
"""Cuts the tensor-core paged MLA decode kernel (namespace mlad) out of kernels/mla_decode.cu for the
host emulator (mla_decode_emu.cpp): its dynamic shared memory becomes the emulator's block buffer.
usage: extract_mlad_body.py kernels/mla_decode.cu OUT.inc"""
import sys

s = open(sys.argv[1]).read()
i = s.index('namespace mlad {')
j = s.index('}  // namespace mlad') + len('}  // namespace mlad')
body = s[i:j]
old = 'extern __shared__ __align__(16) unsigned char smem_raw[];'
assert old in body, 'the kernel no longer declares its shared memory as the emulator expects'
open(sys.argv[2], 'w').write(body.replace(old, 'unsigned char* smem_raw = emu::cta_smem;'))
