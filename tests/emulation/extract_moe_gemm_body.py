#!/usr/bin/env python3
"""Extracts the host-compilable part of the tiled FP4 grouped GEMMs for the emulator.

Writes the NVFP4 quantizer of kernels/fp4_quant.cuh and the `v2` namespaces of the tiled kernel's
parts of kernels/moe_gemm_fp4.cu (kernels/moe_gemm_fp4_device.cuh without its PTX helpers,
moe_gemm_fp4_ws.cuh, moe_gemm_fp4_tiled.cuh, moe_gemm_fp4_small.cuh without its cp.async wrapper;
shared arrays turned into the emulator's per-CTA buffers) to one file that tests/emulation/moe_gemm_fp4_emu.cpp includes.
  usage: extract_moe_gemm_body.py KERNELS_DIR OUT   (KERNELS_DIR: the kernels/ folder)
"""
import os
import sys


def v2_part(path, end=None):
    s = open(path).read()
    i = s.index('namespace v2 {')
    j = s.index(end) if end else s.index('}  // namespace v2')
    return s[i:j] + '}  // namespace v2\n'


def main(kdir, out):
    gemm_cu = os.path.join(kdir, 'moe_gemm_fp4_tiled.cuh')
    quant_cuh = os.path.join(kdir, 'fp4_quant.cuh')
    body = (v2_part(os.path.join(kdir, 'moe_gemm_fp4_device.cuh')) + v2_part(os.path.join(kdir, 'moe_gemm_fp4_ws.cuh')) +
            v2_part(gemm_cu))
    small = v2_part(os.path.join(kdir, 'moe_gemm_fp4_small.cuh'))
    c = small.index('__device__ __forceinline__ void cp_async16')
    d = small.index('template <bool kGemm1, bool kTW>')
    body += small[:c] + small[d:]
    a = body.index('__device__ __forceinline__ uint32_t smem_u32')
    b = body.index('// fp16 with the value')
    body = body[:a] + body[b:]
    subs = [('extern __shared__ __align__(128) unsigned char smem_raw[];', 'unsigned char* smem_raw = emu::cta_smem;'),
            ('__shared__ int32_t row_src[BM];', 'int32_t* row_src = emu::row_src;'),
            ('__shared__ int32_t warp_tot[kNT / 32];', 'int32_t* warp_tot = emu::warp_tot;'),
            ('__shared__ __align__(8) uint64_t mbar[2 * kWsStages];', 'uint64_t* mbar = nullptr;'),
            ('__shared__ int64_t info[3];', 'int64_t* info = emu::info;')]
    for o, n in subs:
        if o not in body:
            sys.exit(f'extract_moe_gemm_body.py: "{o}" not found in {gemm_cu}')
        body = body.replace(o, n)
    q = open(quant_cuh).read()
    k = q.index('__device__ __forceinline__ uint8_t nvfp4_quantize16')
    l = q.index('#endif', k)
    with open(out, 'w') as f:
        f.write(q[k:l] + body)


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    main(*sys.argv[1:])
