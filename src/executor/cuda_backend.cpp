#include "executor/cuda_backend.h"

#include <cublasLt.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <cstdio>
#include <limits>

#include "executor/backends.h"
#include "executor/cuda_nccl.h"
#include "kernels/activation.cuh"
#include "kernels/embedding.cuh"
#include "kernels/fp4_quant.cuh"
#include "kernels/init.cuh"
#include "kernels/kv_cache.cuh"
#include "kernels/mla_attention.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_gemm_fp4.cuh"
#include "kernels/moe_permute.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"

namespace moeprof {
// Kernel faults surface at the next CUDA call, which may belong to a later op: say so.
inline std::string async_error_hint(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction: case cudaErrorHardwareStackError: case cudaErrorAssert:
      return "; an asynchronous kernel fault may come from an earlier op (CUDA_LAUNCH_BLOCKING=1 pins it down)";
    default:
      return "";
  }
}
}  // namespace moeprof

// Records the failed CUDA statement with the op name and returns Status::run_failure (never aborts).
#define MOEPROF_CUDA_CHECK(op, expr)                                                                     \
  do {                                                                                                   \
    const cudaError_t _moeprof_ce = (expr);                                                              \
    if (_moeprof_ce != cudaSuccess)                                                                      \
      return ::moeprof::Status::run_failure(std::string("cuda ") + (op) + ": " + #expr + " failed: " +     \
                                            cudaGetErrorName(_moeprof_ce) + " (" +                        \
                                            cudaGetErrorString(_moeprof_ce) + ") at " + __FILE__ + ":" +  \
                                            std::to_string(__LINE__) + ::moeprof::async_error_hint(_moeprof_ce)); \
  } while (0)

#define MOEPROF_CUBLAS_CHECK(op, expr)                                                                   \
  do {                                                                                                   \
    const cublasStatus_t _moeprof_bs = (expr);                                                           \
    if (_moeprof_bs != CUBLAS_STATUS_SUCCESS)                                                            \
      return ::moeprof::Status::run_failure(std::string("cuda ") + (op) + ": " + #expr +                  \
                                            " failed: cublas status " + std::to_string(int(_moeprof_bs)) + \
                                            " at " + __FILE__ + ":" + std::to_string(__LINE__));         \
  } while (0)

// Shape/dtype validation: returns Status::bad_input naming the op.
#define MOEPROF_REQUIRE(op, cond, msg)                                                   \
  do {                                                                                   \
    if (!(cond)) return ::moeprof::Status::bad_input(std::string("cuda ") + (op) + ": " + (msg)); \
  } while (0)

namespace moeprof {
namespace {

const uint16_t* bf16p(const Tensor& t) { return static_cast<const uint16_t*>(t.raw()); }
uint16_t* bf16p(Tensor& t) { return static_cast<uint16_t*>(t.raw()); }
const uint8_t* u8p(const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); }
uint8_t* u8p(Tensor& t) { return static_cast<uint8_t*>(t.raw()); }
const int32_t* i32p(const Tensor& t) { return static_cast<const int32_t*>(t.raw()); }
int32_t* i32p(Tensor& t) { return static_cast<int32_t*>(t.raw()); }
const float* f32p(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* f32p(Tensor& t) { return static_cast<float*>(t.raw()); }

bool is_codes(DType d) { return d == DType::kFP4x2 || d == DType::kU8; }
bool is_scales(DType d) { return d == DType::kE4M3 || d == DType::kU8; }
std::string shape(const Tensor& t) { return std::string(dtype_name(t.dtype())) + "[" + t.shape_string() + "]"; }

uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

}  // namespace

// ---- construction -------------------------------------------------------------------------------
bool cuda_backend_compiled() { return true; }

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::run_failure(std::string("no usable CUDA driver or device: ") + cudaGetErrorString(e));
  }
  if (count == 0) return Status::run_failure("no CUDA device found");
  if (device < 0 || device >= count)
    return Status::run_failure("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                               " device(s) found)");
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return Status::run_failure("cannot query CUDA device " + std::to_string(device));
  if (prop.major < 9)
    return Status::run_failure("moeprof's CUDA kernels need sm_90 (Hopper); found sm_" + std::to_string(prop.major) +
                               std::to_string(prop.minor) + " " + prop.name);
  auto b = std::make_unique<CudaBackend>(device);
  MOEPROF_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

struct CudaBackend::LinearPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~LinearPlan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

CudaBackend::CudaBackend(int device) : device_(device) {}

Status CudaBackend::init() {
  MOEPROF_CUDA_CHECK("init", cudaSetDevice(device_));
  cudaDeviceProp prop{};
  MOEPROF_CUDA_CHECK("init", cudaGetDeviceProperties(&prop, device_));
  device_name_ = prop.name;
  MOEPROF_CUDA_CHECK("init", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cudaMemPool_t pool = nullptr;
  MOEPROF_CUDA_CHECK("init", cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  MOEPROF_CUDA_CHECK("init", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  cublasLtHandle_t h = nullptr;
  MOEPROF_CUBLAS_CHECK("init", cublasLtCreate(&h));
  lt_handle_ = h;
  return Status::ok();
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  linear_plans_.clear();
  if (lt_handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_handle_));
  if (stream_) cudaStreamDestroy(stream_);
}

MemKind CudaBackend::default_mem_kind(Category c) const {
  return (c == Category::kWeights || c == Category::kKvCache) ? MemKind::kDevice : MemKind::kStreamOrdered;
}

// ---- memory -------------------------------------------------------------------------------------
Result<void*> CudaBackend::do_allocate(size_t bytes, MemKind kind, const AllocTag& tag) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  const std::string range =
      "moeprof.tensor:" + tag.scope + "/" + tag.name + "|" + std::string(category_name(tag.category));
  void* p = nullptr;
  nvtxRangePushA(range.c_str());
  cudaError_t e;
  switch (kind) {
    case MemKind::kStreamOrdered: e = cudaMallocAsync(&p, bytes, stream_); break;
    case MemKind::kManaged: e = cudaMallocManaged(&p, bytes); break;
    case MemKind::kPinned: case MemKind::kHost: e = cudaMallocHost(&p, bytes); break;
    default: e = cudaMalloc(&p, bytes); break;
  }
  if (e == cudaErrorMemoryAllocation && kind != MemKind::kStreamOrdered) {
    // The stream-ordered pool keeps freed activations reserved (release threshold raised), and a
    // plain cudaMalloc cannot use that memory: give it back to the device and retry once.
    cudaGetLastError();
    cudaMemPool_t pool = nullptr;
    if (cudaStreamSynchronize(stream_) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess &&
        cudaMemPoolTrimTo(pool, 0) == cudaSuccess) {
      e = kind == MemKind::kManaged ? cudaMallocManaged(&p, bytes)
          : (kind == MemKind::kPinned || kind == MemKind::kHost) ? cudaMallocHost(&p, bytes)
                                                                  : cudaMalloc(&p, bytes);
    }
  }
  nvtxRangePop();
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Status::run_failure("out of GPU memory allocating " + std::to_string(bytes) + " bytes for " + tag.scope +
                               "/" + tag.name + " (free " + std::to_string(free_b) + " of total " +
                               std::to_string(total_b) + ", pool reserve " + std::to_string(pool_reserved_unused()) +
                               " unused)");
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::run_failure("cuda allocate " + tag.scope + "/" + tag.name + " (" + std::to_string(bytes) +
                               " bytes): " + cudaGetErrorString(e));
  }
  return p;
}

void CudaBackend::do_free(void* ptr, size_t /*bytes*/, MemKind kind) {
  if (ptr == nullptr) return;
  cudaError_t e;
  switch (kind) {
    case MemKind::kStreamOrdered: e = cudaFreeAsync(ptr, stream_); break;
    case MemKind::kPinned: case MemKind::kHost: e = cudaFreeHost(ptr); break;
    default: e = cudaFree(ptr); break;
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (!free_failure_reported_) {
      free_failure_reported_ = true;
      std::fprintf(stderr, "moeprof: cuda free failed: %s (further free failures not shown)\n", cudaGetErrorString(e));
    }
  }
}

size_t CudaBackend::pool_reserved_unused() const {
  cudaMemPool_t pool = nullptr;
  uint64_t reserved = 0, used = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, device_) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return reserved > used ? static_cast<size_t>(reserved - used) : 0;
}

bool CudaBackend::memory_info(size_t* free_bytes, size_t* total_bytes) const {
  size_t f = 0, t = 0;
  if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Memory the activation pool holds but does not use is available again (it is trimmed on demand).
  *free_bytes = f + pool_reserved_unused();
  *total_bytes = t;
  return true;
}

// ---- data movement ------------------------------------------------------------------------------
Status CudaBackend::copy_from_host(Tensor& dst, const void* src) {
  if (dst.numel() == 0) return Status::ok();
  const size_t es = dtype_size(dst.dtype());
  MOEPROF_CUDA_CHECK("copy_from_host", cudaMemcpy2DAsync(dst.raw(), dst.ld() * es, src, dst.cols() * es, dst.cols() * es,
                                                         dst.rows(), cudaMemcpyHostToDevice, stream_));
  MOEPROF_CUDA_CHECK("copy_from_host", cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaBackend::copy_to_host(const Tensor& src, void* dst) {
  if (src.numel() == 0) return Status::ok();
  const size_t es = dtype_size(src.dtype());
  MOEPROF_CUDA_CHECK("copy_to_host", cudaMemcpy2DAsync(dst, src.cols() * es, src.raw(), src.ld() * es, src.cols() * es,
                                                       src.rows(), cudaMemcpyDeviceToHost, stream_));
  MOEPROF_CUDA_CHECK("copy_to_host", cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaBackend::synchronize() {
  MOEPROF_CUDA_CHECK("synchronize", cudaStreamSynchronize(stream_));
  return Status::ok();
}

// ---- init ---------------------------------------------------------------------------------------
Status CudaBackend::init_uniform(Tensor& t, uint64_t seed, float scale) {
  MOEPROF_REQUIRE("init_uniform", t.dtype() == DType::kBF16 || t.dtype() == DType::kF32,
                  "needs bf16 or f32, got " + shape(t));
  MOEPROF_CUDA_CHECK("init_uniform", kern::launch_init_uniform(t.raw(), t.dtype() == DType::kBF16, t.rows(), t.cols(),
                                                               t.ld(), seed, scale, stream_));
  return Status::ok();
}

Status CudaBackend::init_e4m3(Tensor& t, uint64_t seed, float lo, float hi) {
  MOEPROF_REQUIRE("init_e4m3", is_scales(t.dtype()), "needs e4m3, got " + shape(t));
  MOEPROF_CUDA_CHECK("init_e4m3", kern::launch_init_e4m3(u8p(t), t.rows(), t.cols(), t.ld(), seed, lo, hi, stream_));
  return Status::ok();
}

Status CudaBackend::init_bytes(Tensor& t, uint64_t seed) {
  MOEPROF_REQUIRE("init_bytes", dtype_size(t.dtype()) == 1, "needs a 1-byte dtype, got " + shape(t));
  MOEPROF_CUDA_CHECK("init_bytes", kern::launch_init_bytes(u8p(t), t.rows(), t.cols(), t.ld(), seed, stream_));
  return Status::ok();
}

Status CudaBackend::init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi) {
  MOEPROF_REQUIRE("init_ints", t.dtype() == DType::kI32, "needs i32, got " + shape(t));
  MOEPROF_REQUIRE("init_ints", hi > lo, "empty range [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  MOEPROF_CUDA_CHECK("init_ints", kern::launch_init_ints(i32p(t), t.rows(), t.cols(), t.ld(), seed, lo, hi, stream_));
  return Status::ok();
}

Status CudaBackend::iota(Tensor& t, int32_t start) {
  MOEPROF_REQUIRE("iota", t.dtype() == DType::kI32, "needs i32, got " + shape(t));
  MOEPROF_CUDA_CHECK("iota", kern::launch_iota(i32p(t), t.rows(), t.cols(), t.ld(), start, stream_));
  return Status::ok();
}

// ---- dense ops ----------------------------------------------------------------------------------
Status CudaBackend::embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const char* op = "embedding";
  MOEPROF_REQUIRE(op, ids.dtype() == DType::kI32 && ids.contiguous(), "ids must be contiguous i32, got " + shape(ids));
  MOEPROF_REQUIRE(op, table.dtype() == DType::kBF16 && out.dtype() == DType::kBF16, "table and out must be bf16");
  MOEPROF_REQUIRE(op, out.rows() == ids.numel() && out.cols() == table.cols(),
                  "out " + shape(out) + " must be [" + std::to_string(ids.numel()) + "x" + std::to_string(table.cols()) + "]");
  MOEPROF_CUDA_CHECK(op, kern::launch_embedding(i32p(ids), ids.numel(), bf16p(table), table.rows(), table.ld(),
                                                vocab_start, table.cols(), bf16p(out), out.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const char* op = "rmsnorm";
  MOEPROF_REQUIRE(op, x.dtype() == DType::kBF16 && w.dtype() == DType::kBF16 && out.dtype() == DType::kBF16,
                  "x, w, out must be bf16");
  MOEPROF_REQUIRE(op, w.numel() == x.cols() && w.contiguous(), "w " + shape(w) + " must have x.cols elements");
  MOEPROF_REQUIRE(op, out.rows() == x.rows() && out.cols() == x.cols(), "out " + shape(out) + " != x " + shape(x));
  MOEPROF_CUDA_CHECK(op, kern::launch_rmsnorm(bf16p(x), x.ld(), bf16p(w), x.rows(), x.cols(), eps, bf16p(out), out.ld(),
                                              stream_));
  return Status::ok();
}

Status CudaBackend::fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  const char* op = "fused_add_rmsnorm";
  MOEPROF_REQUIRE(op, x.dtype() == DType::kBF16 && residual.dtype() == DType::kBF16 && w.dtype() == DType::kBF16,
                  "x, residual, w must be bf16");
  MOEPROF_REQUIRE(op, residual.rows() == x.rows() && residual.cols() == x.cols(),
                  "residual " + shape(residual) + " != x " + shape(x));
  MOEPROF_REQUIRE(op, w.numel() == x.cols() && w.contiguous(), "w " + shape(w) + " must have x.cols elements");
  MOEPROF_CUDA_CHECK(op, kern::launch_fused_add_rmsnorm(bf16p(x), x.ld(), bf16p(residual), residual.ld(), bf16p(w),
                                                        x.rows(), x.cols(), eps, stream_));
  return Status::ok();
}

size_t CudaBackend::linear_workspace_bytes(int64_t, int64_t, int64_t) const { return 32u << 20; }

Result<CudaBackend::LinearPlan*> CudaBackend::linear_plan(const Tensor& x, const Tensor& w, const Tensor& out,
                                                          size_t ws_bytes) {
  const char* op = "linear";
  const int64_t T = x.rows(), K = x.cols(), N = w.rows();
  const uint32_t al_a = alignment_of(w.raw()), al_b = alignment_of(x.raw()), al_c = alignment_of(out.raw());
  const bool f32_out = out.dtype() == DType::kF32;
  const std::string key = std::to_string(T) + "," + std::to_string(N) + "," + std::to_string(K) + "," +
                          std::to_string(x.ld()) + "," + std::to_string(w.ld()) + "," + std::to_string(out.ld()) + "," +
                          (f32_out ? "f" : "b") + "," + std::to_string(al_a) + "," + std::to_string(al_b) + "," +
                          std::to_string(al_c) + "," + std::to_string(ws_bytes);
  auto it = linear_plans_.find(key);
  if (it != linear_plans_.end()) return it->second.get();

  auto plan = std::make_unique<LinearPlan>();
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major view: out^T [N, T] = (w [K, N] col-major)^T * (x [K, T] col-major).
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, K, N, w.ld()));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, K, T, x.ld()));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatrixLayoutCreate(&plan->c, f32_out ? CUDA_R_32F : CUDA_R_16BF, N, T, out.ld()));
  cublasLtMatmulPreference_t pref = nullptr;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  uint64_t ws = ws_bytes;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(lt_handle_), plan->desc,
                                                           plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    return Status::run_failure("cuda linear: no cuBLASLt algorithm for x " + shape(x) + " w " + shape(w) + " out " +
                               shape(out) + " (status " + std::to_string(int(hs)) + ")");
  plan->algo = result.algo;
  LinearPlan* raw = plan.get();
  linear_plans_.emplace(key, std::move(plan));
  return raw;
}

Status CudaBackend::linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& workspace) {
  const char* op = "linear";
  MOEPROF_REQUIRE(op, x.dtype() == DType::kBF16 && w.dtype() == DType::kBF16, "x and w must be bf16, got x " + shape(x) +
                                                                                  " w " + shape(w));
  MOEPROF_REQUIRE(op, out.dtype() == DType::kBF16 || out.dtype() == DType::kF32, "out must be bf16 or f32");
  MOEPROF_REQUIRE(op, w.cols() == x.cols(), "w " + shape(w) + " does not match x " + shape(x) + " along K");
  MOEPROF_REQUIRE(op, out.rows() == x.rows() && out.cols() == w.rows(),
                  "out " + shape(out) + " must be [" + std::to_string(x.rows()) + "x" + std::to_string(w.rows()) + "]");
  if (x.rows() == 0 || w.rows() == 0) return Status::ok();
  const size_t ws_bytes = workspace.defined() ? workspace.bytes() : 0;
  MOEPROF_ASSIGN_OR_RETURN(LinearPlan * plan, linear_plan(x, w, out, ws_bytes));
  const float alpha = 1.0f, beta = 0.0f;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmul(static_cast<cublasLtHandle_t>(lt_handle_), plan->desc, &alpha, w.raw(),
                                          plan->a, x.raw(), plan->b, &beta, out.raw(), plan->c, out.raw(), plan->c,
                                          &plan->algo, ws_bytes ? workspace.raw() : nullptr, ws_bytes, stream_));
  return Status::ok();
}

Status CudaBackend::rope(Tensor& x, int64_t n_heads, int64_t head_stride, int64_t rot_offset, int64_t rot_dim,
                         const Tensor& positions, const Tensor& cos_sin) {
  const char* op = "rope";
  MOEPROF_REQUIRE(op, x.dtype() == DType::kBF16, "x must be bf16, got " + shape(x));
  MOEPROF_REQUIRE(op, positions.dtype() == DType::kI32 && positions.contiguous() && positions.numel() == x.rows(),
                  "positions must be contiguous i32 with one entry per row of x");
  MOEPROF_REQUIRE(op, cos_sin.dtype() == DType::kF32 && cos_sin.cols() >= rot_dim, "cos_sin must be f32 [max_pos, rot_dim]");
  MOEPROF_REQUIRE(op, n_heads == 1 || head_stride >= rot_offset + rot_dim, "rotary columns of different heads overlap");
  MOEPROF_REQUIRE(op, rot_dim > 0 && rot_dim % 2 == 0 && rot_offset >= 0 && n_heads > 0 &&
                          (n_heads - 1) * head_stride + rot_offset + rot_dim <= x.cols(),
                  "heads " + std::to_string(n_heads) + " x stride " + std::to_string(head_stride) + " rot [" +
                      std::to_string(rot_offset) + ", +" + std::to_string(rot_dim) + ") do not fit x " + shape(x));
  MOEPROF_CUDA_CHECK(op, kern::launch_rope(bf16p(x), x.ld(), x.rows(), n_heads, head_stride, rot_offset, rot_dim,
                                           i32p(positions), f32p(cos_sin), cos_sin.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::mla_build_k(const Tensor& kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                                const Tensor& k_pe, Tensor& k) {
  const char* op = "mla_build_k";
  MOEPROF_REQUIRE(op, kv.dtype() == DType::kBF16 && k_pe.dtype() == DType::kBF16 && k.dtype() == DType::kBF16,
                  "kv, k_pe, k must be bf16");
  MOEPROF_REQUIRE(op, kv.rows() == k.rows() && k_pe.rows() == k.rows(), "row counts differ");
  MOEPROF_REQUIRE(op, n_heads > 0 && nope >= 0 && (n_heads - 1) * kv_head_stride + nope <= kv.cols(),
                  "kv " + shape(kv) + " too narrow");
  MOEPROF_REQUIRE(op, k.cols() == n_heads * (nope + k_pe.cols()),
                  "k " + shape(k) + " must have n_heads * (nope + rope) columns");
  MOEPROF_CUDA_CHECK(op, kern::launch_mla_build_k(bf16p(kv), kv.ld(), n_heads, kv_head_stride, nope, bf16p(k_pe),
                                                  k_pe.ld(), k_pe.cols(), k.rows(), bf16p(k), k.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::kv_cache_write(const Tensor& latent, const Tensor& k_pe, Tensor& cache, int64_t slot0) {
  const char* op = "kv_cache_write";
  MOEPROF_REQUIRE(op, latent.dtype() == DType::kBF16 && k_pe.dtype() == DType::kBF16 && cache.dtype() == DType::kBF16,
                  "latent, k_pe, cache must be bf16");
  MOEPROF_REQUIRE(op, latent.rows() == k_pe.rows(), "latent and k_pe row counts differ");
  MOEPROF_REQUIRE(op, cache.cols() == latent.cols() + k_pe.cols(), "cache " + shape(cache) + " must be latent+rope wide");
  MOEPROF_REQUIRE(op, slot0 >= 0 && slot0 + latent.rows() <= cache.rows(),
                  "slots [" + std::to_string(slot0) + ", +" + std::to_string(latent.rows()) + ") exceed cache " + shape(cache));
  MOEPROF_CUDA_CHECK(op, kern::launch_kv_cache_write(bf16p(latent), latent.ld(), latent.cols(), bf16p(k_pe), k_pe.ld(),
                                                     k_pe.cols(), latent.rows(), bf16p(cache), cache.ld(), slot0,
                                                     stream_));
  return Status::ok();
}

Status CudaBackend::causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_heads, int64_t qk_dim,
                                     int64_t v_dim, int64_t v_offset, int64_t v_head_stride, float scale, Tensor& out) {
  const char* op = "causal_attention";
  MOEPROF_REQUIRE(op, q.dtype() == DType::kBF16 && k.dtype() == DType::kBF16 && v.dtype() == DType::kBF16 &&
                          out.dtype() == DType::kBF16,
                  "q, k, v, out must be bf16");
  const int64_t T = q.rows();
  MOEPROF_REQUIRE(op, k.rows() == T && v.rows() == T && out.rows() == T, "q, k, v, out row counts differ");
  MOEPROF_REQUIRE(op, n_heads > 0 && qk_dim > 0 && v_dim > 0, "n_heads, qk_dim, v_dim must be positive");
  const int64_t qk_stride = qk_dim;  // q/k heads packed at qk_dim columns (same as the CPU reference)
  MOEPROF_REQUIRE(op, q.cols() >= n_heads * qk_dim && k.cols() >= n_heads * qk_dim,
                  "q " + shape(q) + " / k " + shape(k) + " do not hold " + std::to_string(n_heads) + " heads of " +
                      std::to_string(qk_dim));
  MOEPROF_REQUIRE(op, v_offset >= 0 && v_offset + (n_heads - 1) * v_head_stride + v_dim <= v.cols(),
                  "v " + shape(v) + " too narrow for the heads");
  MOEPROF_REQUIRE(op, out.cols() >= n_heads * v_dim, "out " + shape(out) + " narrower than n_heads * v_dim");
  kern::AttentionArgs a{};
  a.q = bf16p(q); a.ld_q = q.ld();
  a.k = bf16p(k); a.ld_k = k.ld();
  a.v = bf16p(v); a.ld_v = v.ld();
  a.out = bf16p(out); a.ld_out = out.ld();
  a.T = T; a.n_heads = n_heads; a.qk_dim = qk_dim; a.v_dim = v_dim;
  a.qk_head_stride = qk_stride; a.v_offset = v_offset; a.v_head_stride = v_head_stride;
  a.scale = scale;
  MOEPROF_CUDA_CHECK(op, kern::launch_causal_attention(a, stream_));
  return Status::ok();
}

Status CudaBackend::silu_and_mul(const Tensor& x, Tensor& out) {
  const char* op = "silu_and_mul";
  MOEPROF_REQUIRE(op, x.dtype() == DType::kBF16 && out.dtype() == DType::kBF16, "x and out must be bf16");
  MOEPROF_REQUIRE(op, x.cols() == 2 * out.cols() && x.rows() == out.rows(),
                  "x " + shape(x) + " must be [T, 2I] for out " + shape(out));
  MOEPROF_CUDA_CHECK(op, kern::launch_silu_and_mul(bf16p(x), x.ld(), x.rows(), out.cols(), bf16p(out), out.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::add_inplace(Tensor& dst, const Tensor& src) {
  const char* op = "add_inplace";
  MOEPROF_REQUIRE(op, dst.dtype() == DType::kBF16 && src.dtype() == DType::kBF16, "dst and src must be bf16");
  MOEPROF_REQUIRE(op, dst.rows() == src.rows() && dst.cols() == src.cols(), "dst " + shape(dst) + " != src " + shape(src));
  MOEPROF_CUDA_CHECK(op, kern::launch_add_inplace(bf16p(dst), dst.ld(), bf16p(src), src.ld(), dst.rows(), dst.cols(),
                                                  stream_));
  return Status::ok();
}

// ---- tensor parallelism (real TP over NCCL; see attach_nccl) -----------------------------------
Status CudaBackend::attach_nccl(void* comm, int rank, int size) {
  if (comm == nullptr) {
    nccl_comm_ = nullptr;
    nccl_rank_ = 0;
    nccl_size_ = 1;
    return Status::ok();
  }
  if (size < 1 || rank < 0 || rank >= size)
    return Status::bad_input("attach_nccl: rank " + std::to_string(rank) + " of " + std::to_string(size));
  nccl_comm_ = comm;
  nccl_rank_ = rank;
  nccl_size_ = size;
  return Status::ok();
}

// A no-op for one rank or emulated TP (no communicator attached).
Status CudaBackend::all_reduce(Tensor& t) {
  if (nccl_comm_ == nullptr || nccl_size_ == 1 || t.numel() == 0) return Status::ok();
  const char* op = "all_reduce";
  MOEPROF_REQUIRE(op, t.dtype() == DType::kBF16 || t.dtype() == DType::kF32, "tensor must be bf16 or f32, got " + shape(t));
  MOEPROF_REQUIRE(op, t.contiguous(), "tensor must be contiguous, got " + shape(t) + " ld " + std::to_string(t.ld()));
  return nccl_all_reduce(nccl_comm_, t.raw(), static_cast<size_t>(t.numel()), t.dtype(), stream_);
}

// ---- MoE ----------------------------------------------------------------------------------------
Status CudaBackend::router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                                Tensor& topk_weights) {
  const char* op = "router_topk";
  MOEPROF_REQUIRE(op, logits.dtype() == DType::kF32, "logits must be f32, got " + shape(logits));
  const int64_t T = logits.rows(), E = logits.cols();
  MOEPROF_REQUIRE(op, topk_ids.dtype() == DType::kI32 && topk_weights.dtype() == DType::kF32,
                  "topk_ids must be i32 and topk_weights f32");
  MOEPROF_REQUIRE(op, topk_ids.rows() == T && topk_ids.cols() == p.top_k && topk_weights.rows() == T &&
                          topk_weights.cols() == p.top_k,
                  "topk outputs must be [T, top_k]");
  MOEPROF_REQUIRE(op, p.top_k >= 1 && p.top_k <= 32 && p.top_k <= E, "top_k must be in [1, min(32, E)]");
  MOEPROF_REQUIRE(op, p.n_group >= 1 && p.n_group <= 64 && E % p.n_group == 0 && p.topk_group >= 1 &&
                          p.topk_group <= p.n_group,
                  "n_group must divide E (<= 64 groups) and topk_group be in [1, n_group]");
  if (p.method != TopkMethod::kGreedy)
    MOEPROF_REQUIRE(op, p.top_k <= p.topk_group * (E / p.n_group),
                    "top_k " + std::to_string(p.top_k) + " exceeds the experts of topk_group groups");
  MOEPROF_REQUIRE(op, p.method != TopkMethod::kNoauxTc || bias.defined(), "noaux_tc needs the correction bias");
  const bool use_bias = p.method == TopkMethod::kNoauxTc;
  if (use_bias)
    MOEPROF_REQUIRE(op, bias.dtype() == DType::kF32 && bias.numel() == E && bias.contiguous(), "bias must be f32 [E]");
  kern::RouterConfig c;
  c.top_k = p.top_k;
  c.n_group = p.n_group;
  c.topk_group = p.topk_group;
  c.method = p.method == TopkMethod::kGreedy ? 0 : (p.method == TopkMethod::kGroupLimitedGreedy ? 1 : 2);
  c.scoring = p.scoring == ScoringFunc::kSoftmax ? 0 : 1;
  c.norm_topk_prob = p.norm_topk_prob;
  c.routed_scaling_factor = p.routed_scaling_factor;
  MOEPROF_CUDA_CHECK(op, kern::launch_router_topk(f32p(logits), logits.ld(), use_bias ? f32p(bias) : nullptr, T, E, c,
                                                  i32p(topk_ids), topk_ids.ld(), f32p(topk_weights), topk_weights.ld(),
                                                  stream_));
  return Status::ok();
}

Status CudaBackend::fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales) {
  const char* op = "fp4_quantize";
  MOEPROF_REQUIRE(op, x.dtype() == DType::kBF16 && x.cols() % 16 == 0, "x must be bf16 [T, K] with K % 16 == 0, got " + shape(x));
  MOEPROF_REQUIRE(op, is_codes(out.dtype()) && out.rows() == x.rows() && out.cols() == x.cols() / 2,
                  "out must be fp4x2 [T, K/2], got " + shape(out));
  MOEPROF_REQUIRE(op, is_scales(scales.dtype()) && scales.rows() == x.rows() && scales.cols() == x.cols() / 16,
                  "scales must be e4m3 [T, K/16], got " + shape(scales));
  MOEPROF_CUDA_CHECK(op, kern::launch_fp4_quantize(bf16p(x), x.ld(), x.rows(), x.cols(), global_scale, u8p(out), out.ld(),
                                                   u8p(scales), scales.ld(), stream_));
  return Status::ok();
}

size_t CudaBackend::moe_permute_workspace_bytes(int64_t T, int64_t k, int64_t E) const {
  size_t bytes = 0;
  if (kern::moe_permute_workspace_bytes(T * k, E, &bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;  // moe_permute reports the failure
  }
  return bytes;
}

Status CudaBackend::moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile, Tensor& offsets,
                                Tensor& permuted_to_token, Tensor& expanded_to_permuted, const Tensor& workspace) {
  const char* op = "moe_permute";
  MOEPROF_REQUIRE(op, topk_ids.dtype() == DType::kI32 && topk_ids.contiguous(), "topk_ids must be contiguous i32");
  MOEPROF_REQUIRE(op, offsets.dtype() == DType::kI32 && offsets.contiguous() && offsets.numel() >= num_experts + 1,
                  "offsets must be contiguous i32 with E+1 entries");
  MOEPROF_REQUIRE(op, permuted_to_token.dtype() == DType::kI32 && permuted_to_token.contiguous(),
                  "permuted_to_token must be contiguous i32");
  MOEPROF_REQUIRE(op, expanded_to_permuted.dtype() == DType::kI32 && expanded_to_permuted.contiguous() &&
                          expanded_to_permuted.numel() == topk_ids.numel(),
                  "expanded_to_permuted must be contiguous i32 [T*k]");
  MOEPROF_REQUIRE(op, num_experts > 0 && tile > 0, "num_experts and tile must be positive");
  const int64_t N = topk_ids.numel(), k = topk_ids.cols() > 0 ? topk_ids.cols() : 1;
  MOEPROF_REQUIRE(op, permuted_to_token.numel() >= N + num_experts * (tile - 1),
                  "permuted_to_token has " + std::to_string(permuted_to_token.numel()) + " rows, needs T*k + E*(tile-1) = " +
                      std::to_string(N + num_experts * (tile - 1)));
  size_t need = 0;
  MOEPROF_CUDA_CHECK(op, kern::moe_permute_workspace_bytes(N, num_experts, &need));
  const size_t have = workspace.defined() ? workspace.bytes() : 0;
  MOEPROF_REQUIRE(op, have >= need, "workspace has " + std::to_string(have) + " bytes, needs " + std::to_string(need) +
                                        " (moe_permute_workspace_bytes)");
  MOEPROF_REQUIRE(op, !have || reinterpret_cast<uintptr_t>(workspace.raw()) % 256 == 0,
                  "workspace must be 256-byte aligned");
  MOEPROF_CUDA_CHECK(op, kern::launch_moe_permute(i32p(topk_ids), N, k, num_experts, tile, i32p(offsets),
                                                  i32p(permuted_to_token), permuted_to_token.numel(),
                                                  i32p(expanded_to_permuted), have ? workspace.raw() : nullptr, have,
                                                  stream_));
  return Status::ok();
}

Status CudaBackend::moe_gemm1_fp4(const Tensor& a, const Tensor& a_scales, float a_gs, const Tensor& w13,
                                  const Tensor& w13_scales, const Tensor& w13_gs, const Tensor& offsets,
                                  const Tensor& permuted_to_token, float out_gs, Tensor& out, Tensor& out_scales) {
  const char* op = "moe_gemm1_fp4";
  MOEPROF_REQUIRE(op, is_codes(a.dtype()) && is_scales(a_scales.dtype()) && is_codes(w13.dtype()) &&
                          is_scales(w13_scales.dtype()) && is_codes(out.dtype()) && is_scales(out_scales.dtype()),
                  "codes must be fp4x2 and scales e4m3");
  MOEPROF_REQUIRE(op, w13_gs.dtype() == DType::kF32 && w13_gs.contiguous(), "w13_gs must be contiguous f32 [E]");
  const int64_t E = w13_gs.numel(), H = a.cols() * 2, I = out.cols() * 2, P = out.rows();
  MOEPROF_REQUIRE(op, E > 0 && H % 16 == 0 && I % 16 == 0, "H and I must be multiples of 16");
  MOEPROF_REQUIRE(op, a_scales.rows() == a.rows() && a_scales.cols() == H / 16, "a_scales must be [T, H/16]");
  MOEPROF_REQUIRE(op, w13.rows() == E * 2 * I && w13.cols() == H / 2,
                  "w13 " + shape(w13) + " must be [E*2I, H/2] = [" + std::to_string(E * 2 * I) + "x" + std::to_string(H / 2) + "]");
  MOEPROF_REQUIRE(op, w13_scales.rows() == w13.rows() && w13_scales.cols() == H / 16, "w13_scales must be [E*2I, H/16]");
  MOEPROF_REQUIRE(op, out_scales.rows() == P && out_scales.cols() == I / 16, "out_scales must be [P, I/16]");
  MOEPROF_REQUIRE(op, offsets.dtype() == DType::kI32 && offsets.numel() >= E + 1, "offsets must be i32 [E+1]");
  MOEPROF_REQUIRE(op, permuted_to_token.dtype() == DType::kI32 && permuted_to_token.numel() == P,
                  "permuted_to_token must be i32 [P]");
  MOEPROF_REQUIRE(op, alignment_of(a.raw()) >= 8 && a.ld() % 8 == 0 && alignment_of(w13.raw()) >= 8 && w13.ld() % 8 == 0,
                  "a and w13 code rows must be 8-byte aligned");
  MOEPROF_CUDA_CHECK(op, kern::launch_moe_gemm1_fp4(u8p(a), a.ld(), u8p(a_scales), a_scales.ld(), a_gs, u8p(w13),
                                                    w13.ld(), u8p(w13_scales), w13_scales.ld(), f32p(w13_gs),
                                                    i32p(offsets), i32p(permuted_to_token), P, E, H, I, out_gs,
                                                    u8p(out), out.ld(), u8p(out_scales), out_scales.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::moe_gemm2_fp4(const Tensor& h, const Tensor& h_scales, float h_gs, const Tensor& w2,
                                  const Tensor& w2_scales, const Tensor& w2_gs, const Tensor& offsets,
                                  const Tensor& permuted_to_token, Tensor& out) {
  const char* op = "moe_gemm2_fp4";
  MOEPROF_REQUIRE(op, is_codes(h.dtype()) && is_scales(h_scales.dtype()) && is_codes(w2.dtype()) &&
                          is_scales(w2_scales.dtype()),
                  "codes must be fp4x2 and scales e4m3");
  MOEPROF_REQUIRE(op, out.dtype() == DType::kBF16, "out must be bf16");
  MOEPROF_REQUIRE(op, w2_gs.dtype() == DType::kF32 && w2_gs.contiguous(), "w2_gs must be contiguous f32 [E]");
  const int64_t E = w2_gs.numel(), I = h.cols() * 2, H = out.cols(), P = out.rows();
  MOEPROF_REQUIRE(op, E > 0 && I % 16 == 0, "I must be a multiple of 16");
  MOEPROF_REQUIRE(op, h.rows() == P && h_scales.rows() == P && h_scales.cols() == I / 16,
                  "h must be [P, I/2] and h_scales [P, I/16]");
  MOEPROF_REQUIRE(op, w2.rows() == E * H && w2.cols() == I / 2,
                  "w2 " + shape(w2) + " must be [E*H, I/2] = [" + std::to_string(E * H) + "x" + std::to_string(I / 2) + "]");
  MOEPROF_REQUIRE(op, w2_scales.rows() == w2.rows() && w2_scales.cols() == I / 16, "w2_scales must be [E*H, I/16]");
  MOEPROF_REQUIRE(op, offsets.dtype() == DType::kI32 && offsets.numel() >= E + 1, "offsets must be i32 [E+1]");
  MOEPROF_REQUIRE(op, permuted_to_token.dtype() == DType::kI32 && permuted_to_token.numel() == P,
                  "permuted_to_token must be i32 [P]");
  MOEPROF_REQUIRE(op, alignment_of(h.raw()) >= 8 && h.ld() % 8 == 0 && alignment_of(w2.raw()) >= 8 && w2.ld() % 8 == 0,
                  "h and w2 code rows must be 8-byte aligned");
  MOEPROF_CUDA_CHECK(op, kern::launch_moe_gemm2_fp4(u8p(h), h.ld(), u8p(h_scales), h_scales.ld(), h_gs, u8p(w2), w2.ld(),
                                                    u8p(w2_scales), w2_scales.ld(), f32p(w2_gs), i32p(offsets),
                                                    i32p(permuted_to_token), P, E, I, H, bf16p(out), out.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::moe_combine(const Tensor& gemm2_out, const Tensor& expanded_to_permuted, const Tensor& topk_weights,
                                const Tensor& shared, Tensor& out) {
  const char* op = "moe_combine";
  MOEPROF_REQUIRE(op, gemm2_out.dtype() == DType::kBF16 && out.dtype() == DType::kBF16, "gemm2_out and out must be bf16");
  MOEPROF_REQUIRE(op, topk_weights.dtype() == DType::kF32 && topk_weights.rows() == out.rows(),
                  "topk_weights must be f32 [T, k]");
  const int64_t T = out.rows(), k = topk_weights.cols(), H = out.cols();
  MOEPROF_REQUIRE(op, k >= 1 && k <= 32, "k must be in [1, 32]");
  MOEPROF_REQUIRE(op, expanded_to_permuted.dtype() == DType::kI32 && expanded_to_permuted.contiguous() &&
                          expanded_to_permuted.numel() == T * k,
                  "expanded_to_permuted must be contiguous i32 [T*k]");
  MOEPROF_REQUIRE(op, gemm2_out.cols() == H, "gemm2_out " + shape(gemm2_out) + " and out " + shape(out) + " widths differ");
  if (shared.defined())
    MOEPROF_REQUIRE(op, shared.dtype() == DType::kBF16 && shared.rows() == T && shared.cols() == H,
                    "shared must be bf16 [T, H]");
  MOEPROF_CUDA_CHECK(op, kern::launch_moe_combine(bf16p(gemm2_out), gemm2_out.ld(), i32p(expanded_to_permuted),
                                                  f32p(topk_weights), topk_weights.ld(),
                                                  shared.defined() ? bf16p(shared) : nullptr,
                                                  shared.defined() ? shared.ld() : 0, T, k, H, bf16p(out), out.ld(),
                                                  stream_));
  return Status::ok();
}

}  // namespace moeprof
