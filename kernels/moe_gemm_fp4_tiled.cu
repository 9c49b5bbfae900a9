// The mma.sync tiled path of the grouped FP4 GEMMs: tiled_kernel variants 0 (kTiled), 1 (kTiledSkip)
// and 2 (kTiledStaged), gemm1 and gemm2 (the kernel template: moe_gemm_fp4_tiled.cuh).
#include "kernels/moe_gemm_fp4_tiled.cuh"

namespace moeprof::kern::fp4gemm {

template bool tiled_smem_ok<true, 0>();
template cudaError_t tiled_launch<true, 0>(const Params&, cudaStream_t);
template bool tiled_smem_ok<true, 1>();
template cudaError_t tiled_launch<true, 1>(const Params&, cudaStream_t);
template bool tiled_smem_ok<true, 2>();
template cudaError_t tiled_launch<true, 2>(const Params&, cudaStream_t);
template bool tiled_smem_ok<false, 0>();
template cudaError_t tiled_launch<false, 0>(const Params&, cudaStream_t);
template bool tiled_smem_ok<false, 1>();
template cudaError_t tiled_launch<false, 1>(const Params&, cudaStream_t);
template bool tiled_smem_ok<false, 2>();
template cudaError_t tiled_launch<false, 2>(const Params&, cudaStream_t);

}  // namespace moeprof::kern::fp4gemm
