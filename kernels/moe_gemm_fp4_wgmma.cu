// The wgmma paths of the grouped FP4 GEMMs (sm_90a): tiled_kernel variants 3 (kWgmma), 4 (kWgmmaWs),
// 5 (kWgmmaWs2), 6 (kWgmmaWsRs) for gemm1 and gemm2, and 9 (kWgmmaWsRs on kGemm1Tiled weights) for
// gemm1 (the kernel template: moe_gemm_fp4_tiled.cuh; its warp-specialized pipeline:
// moe_gemm_fp4_ws.cuh).
#include "kernels/moe_gemm_fp4_tiled.cuh"

namespace moeprof::kern::fp4gemm {

template bool tiled_smem_ok<true, 3>();
template cudaError_t tiled_launch<true, 3>(const Params&, cudaStream_t);
template bool tiled_smem_ok<true, 4>();
template cudaError_t tiled_launch<true, 4>(const Params&, cudaStream_t);
template bool tiled_smem_ok<true, 5>();
template cudaError_t tiled_launch<true, 5>(const Params&, cudaStream_t);
template bool tiled_smem_ok<true, 6>();
template cudaError_t tiled_launch<true, 6>(const Params&, cudaStream_t);
template bool tiled_smem_ok<true, 9>();
template cudaError_t tiled_launch<true, 9>(const Params&, cudaStream_t);
template bool tiled_smem_ok<false, 3>();
template cudaError_t tiled_launch<false, 3>(const Params&, cudaStream_t);
template bool tiled_smem_ok<false, 4>();
template cudaError_t tiled_launch<false, 4>(const Params&, cudaStream_t);
template bool tiled_smem_ok<false, 5>();
template cudaError_t tiled_launch<false, 5>(const Params&, cudaStream_t);
template bool tiled_smem_ok<false, 6>();
template cudaError_t tiled_launch<false, 6>(const Params&, cudaStream_t);

}  // namespace moeprof::kern::fp4gemm
