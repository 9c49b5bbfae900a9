// The grouped FP4 GEMMs (kernels/moe_gemm_fp4.cuh): the kernels, in the parts included below, and
// their host side: argument checks, path choice and fallbacks, launches, the gemm2 TMA output map
// and the weight packing for the tiled layouts. The parts are included in the order of their
// definitions, as one translation unit, so that nvcc compiles each kernel to the same machine code
// as the single file they come from (docs/kernels.md, "SASS of the parts").
#include "kernels/moe_gemm_fp4.cuh"

#include "kernels/common/fp4_tiled.h"
#include "kernels/fp4_quant.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#include "kernels/moe_gemm_fp4_ref.cuh"      // kLegacy: moe_gemm_fp4_kernel; silu_f32
#include "kernels/moe_gemm_fp4_device.cuh"   // v2: tile constants, Args, device helpers
#include "kernels/moe_gemm_fp4_ws.cuh"       // v2: the warp-specialized pipeline (sm_90a)
#include "kernels/moe_gemm_fp4_tiled.cuh"    // v2: tiled_kernel (variants 0-6, 9)
#include "kernels/moe_gemm_fp4_persist.cuh"  // v2: persist_kernel, persist_rs_kernel
#include "kernels/moe_gemm_fp4_small.cuh"    // v2: small_kernel (kSmallM)

namespace moeprof::kern {
namespace {

namespace v2 {

bool aligned(const void* ptr, int64_t ld, int a) {
  return (reinterpret_cast<uintptr_t>(ptr) % a == 0) && (ld % a == 0);
}

// Preconditions of the tiled kernel (else the legacy kernel runs).
bool supported(const Args& p) {
  return p.K % BK == 0 && p.K > 0 && aligned(p.a, p.ld_a, 8) && aligned(p.w, p.ld_w, 8) && aligned(p.a_sc, p.ld_a_sc, 4) &&
         aligned(p.w_sc, p.ld_w_sc, 4) && p.P < (int64_t{1} << 31);
}

// Opts the kernel into its 150 KiB of dynamic shared memory; false (error cleared) where the device
// cannot give that much. Called before every launch (cheap, host side; the attribute is per context).
template <bool kGemm1, int kVar>
bool smem_ok() {
  if (cudaFuncSetAttribute(tiled_kernel<kGemm1, kVar>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem_bytes<kGemm1, kVar>()) == cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}

template <bool kGemm1, int kVar>
cudaError_t launch(Args p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  constexpr int kCols = kGemm1 ? kCols1 : kCols2;
  constexpr int kNPer = n_per<kGemm1, kVar>();
  const int64_t nt = (p.N + kCols - 1) / kCols;
  const int64_t grid_m = (p.P + BM - 1) / BM + p.E;
  const int64_t n_groups = (nt + kNPer - 1) / kNPer;
  if (grid_m * n_groups >= (int64_t{1} << 31)) return cudaErrorInvalidConfiguration;
  p.grid_m = static_cast<int>(grid_m);
  p.n_groups = static_cast<int>(n_groups);
  tiled_kernel<kGemm1, kVar><<<static_cast<unsigned>(grid_m * n_groups), kVar >= 4 ? kThreads + kProducers : kThreads,
                               smem_bytes<kGemm1, kVar>(), stream>>>(p);
  return last_launch_error();
}

// kWgmmaPersist's gemm2 output as a TMA tensor map: bf16 [P][N] (row stride ld_out), 16 x 64-element
// boxes with the 128-byte swizzle (store_out_tile_tma_k). False (the kernel then stores with
// st.global as the other paths do) where the driver lacks cuTensorMapEncodeTiled or the output is
// not 16-byte aligned with 16-byte row strides.
bool make_out_map(const Args& p, CUtensorMap& m) {
  using Encode = PFN_cuTensorMapEncodeTiled_v12000;
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return Encode{nullptr};
    }
    return reinterpret_cast<Encode>(fn);
  }();
  if (encode == nullptr || !p.vec16_out || p.P >= (int64_t{1} << 31)) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.N), static_cast<cuuint64_t>(p.P)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.ld_out) * 2};
  const cuuint32_t box[2] = {64, 16}, ones[2] = {1, 1};
  return encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.out, dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// kWgmmaPersist (variant 7) / kWgmmaPersistRA (variant 8, kResA): one CTA per SM, each walking its
// share of the work items.
template <bool kGemm1, bool kResA, bool kTW = false>
bool persist_smem_ok() {
  if (cudaFuncSetAttribute(persist_kernel<kGemm1, kResA, kTW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           persist_smem_bytes()) == cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}
template <bool kGemm1, bool kResA, bool kTW = false>
cudaError_t persist_launch(Args p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  constexpr int kCols = kGemm1 ? kCols1 : kCols2;
  constexpr int kNPer = n_per<kGemm1, 5>();
  const int64_t nt = (p.N + kCols - 1) / kCols;
  p.n_groups = static_cast<int>((nt + kNPer - 1) / kNPer);
  p.grid_m = 0;  // (unused: the kernel counts the row tiles)
  if (((p.P + BM - 1) / BM + p.E) * p.n_groups >= (int64_t{1} << 31)) return cudaErrorInvalidConfiguration;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();
    return cudaErrorInvalidDevice;
  }
  CUtensorMap out_map{};
  p.tma_out = !kGemm1 && make_out_map(p, out_map);
  persist_kernel<kGemm1, kResA, kTW>
      <<<static_cast<unsigned>(sms), kThreads + kProducers, persist_smem_bytes(), stream>>>(p, out_map);
  return last_launch_error();
}

// Variant 13 (persist_rs_kernel): one CTA per SM, like persist_launch.
bool persist_rs_smem_ok() {
  if (cudaFuncSetAttribute(persist_rs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, persist_rs_smem_bytes()) ==
      cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}
cudaError_t persist_rs_launch(Args p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  const int64_t nt = p.N / kCols1;
  p.n_groups = static_cast<int>(nt);
  p.grid_m = 0;  // (unused: the kernel counts the row tiles)
  if (((p.P + BM - 1) / BM + p.E) * nt >= (int64_t{1} << 31)) return cudaErrorInvalidConfiguration;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();
    return cudaErrorInvalidDevice;
  }
  persist_rs_kernel<<<static_cast<unsigned>(sms), kThreads + kProducers, persist_rs_smem_bytes(), stream>>>(p);
  return last_launch_error();
}

// kWgmma (variant 3) runs only where the kernels were built for sm_90a (MOEPROF_HAVE_SM90A, set by
// kernels/CMakeLists.txt) and the current device is compute capability 9.0 exactly (sm_90a code
// runs nowhere else).
bool wgmma_ok() {
#if defined(MOEPROF_HAVE_SM90A)
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

// Runs tiled variant `var` (0..3) when its preconditions hold and the shared memory is grantable.
// Returns false (nothing launched) otherwise.
template <bool kGemm1>
bool try_launch(const Args& p, int var, cudaStream_t stream, cudaError_t& err) {
  if (!supported(p)) return false;
  switch (var) {
    case 0: if (!smem_ok<kGemm1, 0>()) return false; err = launch<kGemm1, 0>(p, stream); return true;
    case 1: if (!smem_ok<kGemm1, 1>()) return false; err = launch<kGemm1, 1>(p, stream); return true;
    case 2: if (!smem_ok<kGemm1, 2>()) return false; err = launch<kGemm1, 2>(p, stream); return true;
    case 3: if (!wgmma_ok() || !smem_ok<kGemm1, 3>()) return false; err = launch<kGemm1, 3>(p, stream); return true;
    case 4: if (!wgmma_ok() || !smem_ok<kGemm1, 4>()) return false; err = launch<kGemm1, 4>(p, stream); return true;
    case 5: if (!wgmma_ok() || !smem_ok<kGemm1, 5>()) return false; err = launch<kGemm1, 5>(p, stream); return true;
    case 6:  // the consumers' 16-byte A code loads
      if (!wgmma_ok() || !aligned(p.a, p.ld_a, 16) || !smem_ok<kGemm1, 6>()) return false;
      err = launch<kGemm1, 6>(p, stream);
      return true;
    case 7: if (!wgmma_ok() || !persist_smem_ok<kGemm1, false>()) return false; err = persist_launch<kGemm1, false>(p, stream); return true;
    case 9:  // kWgmmaWsRs on tiled weights (gemm1 only): 16-byte code / 8-byte scale loads of the blocks
      if constexpr (kGemm1) {
        if (!wgmma_ok() || !aligned(p.a, p.ld_a, 16) || !gemm1_tiled_ok(p.K, p.N) || !aligned(p.w, 16, 16) ||
            !aligned(p.w_sc, 8, 8) || !smem_ok<true, 9>())
          return false;
        err = launch<true, 9>(p, stream);
        return true;
      }
      return false;
    case 13:  // variant 9 as a persistent kernel (gemm1 only, tiled weights)
      if constexpr (kGemm1) {
        if (!wgmma_ok() || !aligned(p.a, p.ld_a, 16) || !gemm1_tiled_ok(p.K, p.N) || !aligned(p.w, 16, 16) ||
            !aligned(p.w_sc, 8, 8) || !persist_rs_smem_ok())
          return false;
        err = persist_rs_launch(p, stream);
        return true;
      }
      return false;
    case 10:  // kWgmmaPersist on kGemm2Tiled weights (gemm2 only)
    case 11:  // kWgmmaPersistRA on kGemm2Tiled weights (gemm2 only; kWgmmaPersist's layout where K > kRaMaxK)
      if constexpr (!kGemm1) {
        if (!wgmma_ok() || !gemm2_tiled_ok(p.K, p.N) || !aligned(p.w, 16, 16) || !aligned(p.w_sc, 8, 8)) return false;
        if (var == 11 && p.K <= kRaMaxK) {
          if (!persist_smem_ok<false, true, true>()) return false;
          err = persist_launch<false, true, true>(p, stream);
          return true;
        }
        if (!persist_smem_ok<false, false, true>()) return false;
        err = persist_launch<false, false, true>(p, stream);
        return true;
      }
      return false;
    default:
      // Resident A tiles: gemm2 with K <= kRaMaxK; elsewhere (gemm1, larger K) the kWgmmaPersist layout.
      if constexpr (!kGemm1) {
        if (p.K <= kRaMaxK) {
          if (!wgmma_ok() || !persist_smem_ok<false, true>()) return false;
          err = persist_launch<false, true>(p, stream);
          return true;
        }
      }
      if (!wgmma_ok() || !persist_smem_ok<kGemm1, false>()) return false;
      err = persist_launch<kGemm1, false>(p, stream);
      return true;
  }
}

// kSmallM (small_kernel): its preconditions (kernels/moe_gemm_fp4.cuh), and the choice of kAuto.
bool small_supported(const Args& p, bool gemm1, bool tiled_w) {
  if (p.K <= 0 || p.K % BK != 0 || p.N <= 0 || p.N % (gemm1 ? kCols1 : kCols2) != 0 || p.E <= 0 ||
      p.P >= (int64_t{1} << 31))
    return false;
  if (!aligned(p.a, p.ld_a, 8) || !aligned(p.a_sc, p.ld_a_sc, 4)) return false;
  if (tiled_w) return aligned(p.w, 16, 16) && aligned(p.w_sc, 8, 8);
  return aligned(p.w, p.ld_w, 8);
}
bool small_preferred(const Args& p) { return p.P <= kSmAutoRowsPerExpert * p.E; }

template <bool kGemm1, bool kTW>
bool small_smem_ok() {
  if (cudaFuncSetAttribute(small_kernel<kGemm1, kTW>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmSmemBytes) ==
      cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}

// Runs small_kernel where its preconditions hold; false (nothing launched) otherwise.
template <bool kGemm1>
bool try_small(const Args& p, bool tiled_w, cudaStream_t stream, cudaError_t& err) {
  if (!small_supported(p, kGemm1, tiled_w)) return false;
  if (tiled_w ? !small_smem_ok<kGemm1, true>() : !small_smem_ok<kGemm1, false>()) return false;
  if (p.P <= 0) {
    err = cudaSuccess;
    return true;
  }
  const int64_t grid = static_cast<int64_t>(p.E) * (p.N / (kGemm1 ? kCols1 : kCols2));
  if (grid >= (int64_t{1} << 31)) {
    err = cudaErrorInvalidConfiguration;
    return true;
  }
  if (tiled_w)
    small_kernel<kGemm1, true><<<static_cast<unsigned>(grid), kSmThreads, kSmSmemBytes, stream>>>(p);
  else
    small_kernel<kGemm1, false><<<static_cast<unsigned>(grid), kSmThreads, kSmSmemBytes, stream>>>(p);
  err = last_launch_error();
  return true;
}

// kAuto's gemm1 on kGemm1Tiled weights: 9 (tiled_kernel<true, 9>) or 13 (persist_rs_kernel). 13:
// 1.8-2.3% faster at the bench shape, 4.4% at H = 3584, 6.5% at H = 1792 (interleaved A/B,
// docs/performance.md, eleventh session): it saves a fixed time per tile.
constexpr int kDefaultGemm1TiledVariant = 13;

// Path -> variant; kAuto takes kDefaultPath (change it there after measuring).
int variant_of(Fp4GemmPath path, bool gemm1) {
  if (path == Fp4GemmPath::kAuto) path = gemm1 ? kDefaultGemm1Path : kDefaultGemm2Path;
  switch (path) {
    case Fp4GemmPath::kTiled: return 0;
    case Fp4GemmPath::kTiledSkip: return 1;
    case Fp4GemmPath::kWgmma: return 3;
    case Fp4GemmPath::kWgmmaWs: return 4;
    case Fp4GemmPath::kWgmmaWs2: return 5;
    case Fp4GemmPath::kWgmmaWsRs: return 6;
    case Fp4GemmPath::kWgmmaPersist: return 7;
    case Fp4GemmPath::kWgmmaPersistRA: return 8;
    default: return 2;
  }
}

}  // namespace v2

bool aligned8(const void* ptr, int64_t ld) { return (reinterpret_cast<uintptr_t>(ptr) % 8 == 0) && (ld % 8 == 0); }

template <bool kGemm1>
cudaError_t launch(const GemmArgs& p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  const int n_per_block = kGemm1 ? kBN / 2 : kBN;
  const dim3 grid(ceil_div_u(p.P, kBM), ceil_div_u(p.N, n_per_block));
  if (grid.y > 65535) return cudaErrorInvalidConfiguration;
  moe_gemm_fp4_kernel<kGemm1><<<grid, kThreads, 0, stream>>>(p);
  return last_launch_error();
}

}  // namespace

cudaError_t launch_moe_gemm1_fp4(const uint8_t* a, int64_t ld_a, const uint8_t* a_scales, int64_t ld_a_scales,
                                 float a_gs, const uint8_t* w13, int64_t ld_w, const uint8_t* w13_scales,
                                 int64_t ld_w_scales, const float* w13_gs, const int32_t* offsets,
                                 const int32_t* permuted_to_token, int64_t P, int64_t E, int64_t H, int64_t I,
                                 float out_gs, uint8_t* out, int64_t ld_out, uint8_t* out_scales,
                                 int64_t ld_out_scales, cudaStream_t stream, Fp4GemmPath path,
                                 Fp4WeightLayout w_layout) {
  if (H % 16 != 0 || I % 16 != 0 || H <= 0 || I <= 0 || E <= 0) return cudaErrorInvalidValue;
  if (w_layout == Fp4WeightLayout::kGemm2Tiled) return cudaErrorInvalidValue;  // (gemm2's layout)
  const bool tiled = w_layout == Fp4WeightLayout::kGemm1Tiled;
  if (tiled) {  // (row strides of the tiled weights are implied: H / 2 and H / 16)
    ld_w = H / 2;
    ld_w_scales = H / 16;
  }
  if (!aligned8(a, ld_a) || !aligned8(w13, ld_w)) return cudaErrorMisalignedAddress;
  v2::Args t{};
  t.a = a; t.ld_a = ld_a; t.a_sc = a_scales; t.ld_a_sc = ld_a_scales; t.a_gs = a_gs;
  t.w = w13; t.ld_w = ld_w; t.w_sc = w13_scales; t.ld_w_sc = ld_w_scales; t.w_gs = w13_gs;
  t.offsets = offsets; t.p2t = permuted_to_token; t.P = P; t.E = static_cast<int>(E);
  t.K = static_cast<int>(H); t.N = static_cast<int>(I);
  t.out_gs = out_gs; t.out_q = out; t.ld_out_q = ld_out; t.out_sc = out_scales; t.ld_out_sc = ld_out_scales;
  t.q_vec = v2::aligned(out, ld_out, 8);
  cudaError_t err = cudaSuccess;
  if (path == Fp4GemmPath::kSmallM)
    return v2::try_small<true>(t, tiled, stream, err) ? err : cudaErrorInvalidValue;
  if (path == Fp4GemmPath::kAuto && v2::small_preferred(t) && v2::try_small<true>(t, tiled, stream, err)) return err;
  if (tiled) {
    // Only kWgmmaWsRs (variant 9), its persistent form (kWgmmaPersist: variant 13) and kSmallM read
    // the tiled layout: no fallback (the row-major paths would misread it).
    int var = -1;
    if (path == Fp4GemmPath::kAuto) var = v2::kDefaultGemm1TiledVariant;
    if (path == Fp4GemmPath::kWgmmaWsRs) var = 9;
    if (path == Fp4GemmPath::kWgmmaPersist) var = 13;
    if (var >= 0 && v2::try_launch<true>(t, var, stream, err)) return err;
    // kAuto: the other of the two where the default cannot run (its shared memory not grantable).
    if (path == Fp4GemmPath::kAuto && v2::try_launch<true>(t, var == 13 ? 9 : 13, stream, err)) return err;
    return cudaErrorInvalidValue;
  }
  if (path != Fp4GemmPath::kLegacy) {
    if (v2::try_launch<true>(t, v2::variant_of(path, true), stream, err)) return err;
    if (path != Fp4GemmPath::kAuto) return cudaErrorInvalidValue;
    // kAuto: a default that cannot run here (no sm_90a, too little shared memory) falls back to
    // kWgmmaWs2, kTiledStaged, then kTiled.
    if (v2::try_launch<true>(t, 5, stream, err)) return err;
    if (v2::try_launch<true>(t, 2, stream, err)) return err;
    if (v2::try_launch<true>(t, 0, stream, err)) return err;
  }
  GemmArgs p{};
  p.a = a; p.ld_a = ld_a; p.a_sc = a_scales; p.ld_a_sc = ld_a_scales; p.a_gs = a_gs;
  p.w = w13; p.ld_w = ld_w; p.w_sc = w13_scales; p.ld_w_sc = ld_w_scales; p.w_gs = w13_gs;
  p.offsets = offsets; p.p2t = permuted_to_token; p.P = P; p.E = static_cast<int>(E);
  p.K = static_cast<int>(H); p.N = static_cast<int>(I);
  p.out_gs = out_gs; p.out_q = out; p.ld_out_q = ld_out; p.out_sc = out_scales; p.ld_out_sc = ld_out_scales;
  return launch<true>(p, stream);
}

cudaError_t launch_moe_gemm2_fp4(const uint8_t* h, int64_t ld_h, const uint8_t* h_scales, int64_t ld_h_scales,
                                 float h_gs, const uint8_t* w2, int64_t ld_w, const uint8_t* w2_scales,
                                 int64_t ld_w_scales, const float* w2_gs, const int32_t* offsets,
                                 const int32_t* permuted_to_token, int64_t P, int64_t E, int64_t I, int64_t H,
                                 uint16_t* out, int64_t ld_out, cudaStream_t stream, Fp4GemmPath path,
                                 Fp4WeightLayout w_layout) {
  if (I % 16 != 0 || I <= 0 || H <= 0 || E <= 0) return cudaErrorInvalidValue;
  if (w_layout == Fp4WeightLayout::kGemm1Tiled) return cudaErrorInvalidValue;  // (gemm1's layout)
  const bool tiled = w_layout == Fp4WeightLayout::kGemm2Tiled;
  if (tiled) {  // (row strides of the tiled weights are implied: I / 2 and I / 16)
    ld_w = I / 2;
    ld_w_scales = I / 16;
    // Only the persistent kernels and kSmallM read the tiled layout: no fallback (the others would
    // misread it).
    if (path != Fp4GemmPath::kAuto && path != Fp4GemmPath::kWgmmaPersist && path != Fp4GemmPath::kWgmmaPersistRA &&
        path != Fp4GemmPath::kSmallM)
      return cudaErrorInvalidValue;
  }
  if (!aligned8(h, ld_h) || !aligned8(w2, ld_w)) return cudaErrorMisalignedAddress;
  if (path != Fp4GemmPath::kLegacy) {
    v2::Args t{};
    t.a = h; t.ld_a = ld_h; t.a_sc = h_scales; t.ld_a_sc = ld_h_scales; t.a_gs = h_gs;
    t.w = w2; t.ld_w = ld_w; t.w_sc = w2_scales; t.ld_w_sc = ld_w_scales; t.w_gs = w2_gs;
    t.offsets = offsets; t.p2t = permuted_to_token; t.P = P; t.E = static_cast<int>(E);
    t.K = static_cast<int>(I); t.N = static_cast<int>(H);
    t.out = out; t.ld_out = ld_out;
    t.vec_out = v2::aligned(out, ld_out, 2) && reinterpret_cast<uintptr_t>(out) % 4 == 0;
    t.vec16_out = reinterpret_cast<uintptr_t>(out) % 16 == 0 && ld_out % 8 == 0;
    cudaError_t err = cudaSuccess;
    if (path == Fp4GemmPath::kSmallM)
      return v2::try_small<false>(t, tiled, stream, err) ? err : cudaErrorInvalidValue;
    if (path == Fp4GemmPath::kAuto && v2::small_preferred(t) && v2::try_small<false>(t, tiled, stream, err)) return err;
    if (tiled) return v2::try_launch<false>(t, path == Fp4GemmPath::kWgmmaPersist ? 10 : 11, stream, err) ? err
                                                                                                       : cudaErrorInvalidValue;
    if (v2::try_launch<false>(t, v2::variant_of(path, false), stream, err)) return err;
    if (path != Fp4GemmPath::kAuto) return cudaErrorInvalidValue;
    // kAuto: a default that cannot run here (no sm_90a, too little shared memory) falls back to
    // kWgmmaWs2, kTiledStaged, then kTiled.
    if (v2::try_launch<false>(t, 5, stream, err)) return err;
    if (v2::try_launch<false>(t, 2, stream, err)) return err;
    if (v2::try_launch<false>(t, 0, stream, err)) return err;
  }
  GemmArgs p{};
  p.a = h; p.ld_a = ld_h; p.a_sc = h_scales; p.ld_a_sc = ld_h_scales; p.a_gs = h_gs;
  p.w = w2; p.ld_w = ld_w; p.w_sc = w2_scales; p.ld_w_sc = ld_w_scales; p.w_gs = w2_gs;
  p.offsets = offsets; p.p2t = permuted_to_token; p.P = P; p.E = static_cast<int>(E);
  p.K = static_cast<int>(I); p.N = static_cast<int>(H);
  p.out = out; p.ld_out = ld_out;
  p.vec_out = reinterpret_cast<uintptr_t>(out) % 16 == 0 && ld_out % 8 == 0;
  return launch<false>(p, stream);
}

namespace {
// One thread per 8 code bytes (a 16-element item) of a weight row: the item's codes and its scale
// byte go to their tiled places (kernels/common/fp4_tiled.h). K: the row's elements; gemm1: K = H,
// N = I; gemm2: K = I, N = H.
template <bool kGemm1>
__global__ void pack_tiled_kernel(const uint8_t* w, int64_t ld_w, const uint8_t* w_sc, int64_t ld_w_sc, int64_t rows,
                                  int64_t K, int64_t N, uint8_t* out, uint8_t* out_sc) {
  const int64_t items = K / 16;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows * items;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / items, kblk = idx % items;
    const uint2 c = *reinterpret_cast<const uint2*>(w + row * ld_w + kblk * 8);
    *reinterpret_cast<uint2*>(out + tiled_code_offset(kGemm1 ? 1 : 2, row, kblk * 8, K, N)) = c;
    out_sc[tiled_scale_offset(kGemm1 ? 1 : 2, row, kblk, K, N)] = w_sc[row * ld_w_sc + kblk];
  }
}
template <bool kGemm1>
cudaError_t pack_tiled(const uint8_t* w, int64_t ld_w, const uint8_t* w_sc, int64_t ld_w_sc, int64_t rows, int64_t K,
                       int64_t N, uint8_t* out, uint8_t* out_sc, cudaStream_t stream) {
  if (!aligned8(w, ld_w) || reinterpret_cast<uintptr_t>(out) % 8 != 0) return cudaErrorMisalignedAddress;
  const int64_t n = rows * (K / 16);
  const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 65536 ? n / 256 + 1 : 65536);
  pack_tiled_kernel<kGemm1><<<blocks, 256, 0, stream>>>(w, ld_w, w_sc, ld_w_sc, rows, K, N, out, out_sc);
  return last_launch_error();
}
}  // namespace

bool gemm1_tiled_supported(int64_t H, int64_t I) {
  return gemm1_tiled_ok(H, I) && v2::wgmma_ok() && (v2::persist_rs_smem_ok() || v2::smem_ok<true, 9>());
}

bool gemm2_tiled_supported(int64_t I, int64_t H) {
  return gemm2_tiled_ok(I, H) && v2::wgmma_ok() && v2::persist_smem_ok<false, false, true>() &&
         (I > v2::kRaMaxK || v2::persist_smem_ok<false, true, true>());
}

cudaError_t launch_pack_gemm1_weights_tiled(const uint8_t* w13, int64_t ld_w, const uint8_t* w13_scales,
                                            int64_t ld_w_scales, int64_t E, int64_t H, int64_t I, uint8_t* out,
                                            uint8_t* out_scales, cudaStream_t stream) {
  if (E <= 0 || !gemm1_tiled_ok(H, I)) return cudaErrorInvalidValue;
  return pack_tiled<true>(w13, ld_w, w13_scales, ld_w_scales, E * 2 * I, H, I, out, out_scales, stream);
}

cudaError_t launch_pack_gemm2_weights_tiled(const uint8_t* w2, int64_t ld_w, const uint8_t* w2_scales,
                                            int64_t ld_w_scales, int64_t E, int64_t I, int64_t H, uint8_t* out,
                                            uint8_t* out_scales, cudaStream_t stream) {
  if (E <= 0 || !gemm2_tiled_ok(I, H)) return cudaErrorInvalidValue;
  return pack_tiled<false>(w2, ld_w, w2_scales, ld_w_scales, E * H, I, H, out, out_scales, stream);
}

}  // namespace moeprof::kern
