// Internal to the grouped FP4 GEMMs (kernels/moe_gemm_fp4*.cu): the arguments and entry points by
// which the launcher (moe_gemm_fp4.cu) reaches the kernels of each path's translation unit.
//   moe_gemm_fp4_ref.cu      kLegacy: the reference kernel (moe_gemm_fp4_kernel, bf16 mma.sync)
//   moe_gemm_fp4_tiled.cu    the mma.sync tiled path: tiled_kernel variants 0-2 (kTiled, kTiledSkip,
//                            kTiledStaged)
//   moe_gemm_fp4_wgmma.cu    the wgmma paths: tiled_kernel variants 3-6 and 9 (kWgmma, kWgmmaWs,
//                            kWgmmaWs2, kWgmmaWsRs, kWgmmaWsRs on kGemm1Tiled weights)
//   moe_gemm_fp4_persist.cu  the persistent paths and their epilogue: persist_kernel (kWgmmaPersist,
//                            kWgmmaPersistRA, on kGemm2Tiled weights too), persist_rs_kernel
// Each kernel is instantiated (and launched) only in its own file; the kernels and their helpers
// stay in an anonymous namespace there, so their names are what they always were. Params and
// LegacyParams hold the fields of the kernels' argument structs (v2::Args, GemmArgs, which derive
// from them with nothing added: the same bytes) for the calls between files.
#pragma once
#include "kernels/moe_gemm_fp4.cuh"

namespace moeprof::kern::fp4gemm {

// v2::Args (moe_gemm_fp4_device.cuh): the tiled, wgmma and persistent kernels' argument.
struct Params {
  const uint8_t* a; int64_t ld_a; const uint8_t* a_sc; int64_t ld_a_sc; float a_gs;
  const uint8_t* w; int64_t ld_w; const uint8_t* w_sc; int64_t ld_w_sc; const float* w_gs;
  const int32_t* offsets; const int32_t* p2t; int64_t P; int E;
  int K, N;
  int grid_m, n_groups;
  float out_gs; uint8_t* out_q; int64_t ld_out_q; uint8_t* out_sc; int64_t ld_out_sc; bool q_vec;  // gemm1
  uint16_t* out; int64_t ld_out; bool vec_out; bool vec16_out;                                   // gemm2
  bool tma_out;  // kWgmmaPersist's gemm2: the output tensor map (persist_kernel's out_map) is valid
};

// GemmArgs (moe_gemm_fp4_ref.cu): the reference kernel's argument.
struct LegacyParams {
  const uint8_t* a; int64_t ld_a; const uint8_t* a_sc; int64_t ld_a_sc; float a_gs;
  const uint8_t* w; int64_t ld_w; const uint8_t* w_sc; int64_t ld_w_sc; const float* w_gs;
  const int32_t* offsets; const int32_t* p2t; int64_t P; int E;
  int K;        // reduction length (elements)
  int N;        // gemm1: I (output columns; 2I weight rows per expert); gemm2: H
  float out_gs; uint8_t* out_q; int64_t ld_out_q; uint8_t* out_sc; int64_t ld_out_sc;  // gemm1
  uint16_t* out; int64_t ld_out; bool vec_out;                                         // gemm2
};

// moe_gemm_fp4_ref.cu: launches moe_gemm_fp4_kernel<kGemm1> (kGemm1 = true, false).
template <bool kGemm1>
cudaError_t legacy_launch(const LegacyParams& p, cudaStream_t stream);

// moe_gemm_fp4_tiled.cu (kVar 0-2) and moe_gemm_fp4_wgmma.cu (kVar 3-6; 9 with kGemm1 only):
// tiled_kernel<kGemm1, kVar>. tiled_smem_ok opts it into its dynamic shared memory (false, error
// cleared, where the device cannot give that much); tiled_launch sizes the grid and launches it.
template <bool kGemm1, int kVar>
bool tiled_smem_ok();
template <bool kGemm1, int kVar>
cudaError_t tiled_launch(const Params& p, cudaStream_t stream);

// moe_gemm_fp4_persist.cu: persist_kernel<kGemm1, kResA, kTW> (instantiated: <true, false, false>,
// <false, false, false>, <false, true, false>, <false, false, true>, <false, true, true>) and
// persist_rs_kernel, one CTA per SM.
template <bool kGemm1, bool kResA, bool kTW = false>
bool persist_smem_ok();
template <bool kGemm1, bool kResA, bool kTW = false>
cudaError_t persist_launch(const Params& p, cudaStream_t stream);
bool persist_rs_smem_ok();
cudaError_t persist_rs_launch(const Params& p, cudaStream_t stream);

}  // namespace moeprof::kern::fp4gemm
