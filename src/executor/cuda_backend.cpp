// CudaBackend: construction, memory (tagged allocations, the stream-ordered pool), copies,
// deterministic init, the small dense ops and the all-reduce. Each do_<op> adapts Tensors to a
// framework-free launcher in kernels/; the arguments were checked by Backend (backend_checks.cpp).
#include "executor/cuda_backend.h"

#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "core/gpu_probe.h"
#include "executor/backends.h"
#include "executor/cuda_check.h"
#include "executor/cuda_nccl.h"
#include "kernels/activation.cuh"
#include "kernels/embedding.cuh"
#include "kernels/init.cuh"
#include "kernels/kv_cache.cuh"
#include "kernels/mla_attention.cuh"
#include "kernels/moe_gemm_fp4.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"

namespace moeprof {

using cuda_detail::bf16p;
using cuda_detail::f32p;
using cuda_detail::i32p;
using cuda_detail::u8p;

// ---- construction -------------------------------------------------------------------------------
bool cuda_backend_compiled() { return true; }

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  // The driver is asked first, as `moeprof devices` asks it (core/gpu_probe.h): both then give the
  // same reason, rather than the runtime's "driver version is insufficient" for a missing driver.
  if (const GpuProbe probe = probe_gpus(); probe.devices.empty()) return Status::run_failure("no usable GPU: " + probe.problem);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::run_failure(std::string("no usable GPU: the CUDA runtime says ") + cudaGetErrorString(e));
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
  return init_cublaslt();
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  destroy_cublaslt();
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
  if (kind == MemKind::kSymmetric && symm_pool_ != nullptr) {
    auto r = symm_pool_->allocate(bytes);
    nvtxRangePop();
    if (!r.is_ok()) return r.status().with_context(tag.scope + "/" + tag.name);
    return r;
  }
  cudaError_t e;
  switch (kind) {
    case MemKind::kSymmetric:  // emulated (no pool attached): from the activations' pool
    case MemKind::kStreamOrdered: e = cudaMallocAsync(&p, bytes, stream_); break;
    case MemKind::kManaged: e = cudaMallocManaged(&p, bytes); break;
    case MemKind::kPinned: case MemKind::kHost: e = cudaMallocHost(&p, bytes); break;
    default: e = cudaMalloc(&p, bytes); break;
  }
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (e == cudaErrorMemoryAllocation && cudaStreamIsCapturing(stream_, &capturing) == cudaSuccess &&
      capturing == cudaStreamCaptureStatusNone) {
    // The stream-ordered pool keeps freed activations reserved (release threshold raised). A plain
    // cudaMalloc cannot use that memory, and the pool itself cannot place a request larger than
    // its free ranges (its reserve is fragmented by what it served before): give the unused
    // reserve back to the device and retry once, as a caching allocator empties its cache before
    // it reports out of memory. Never while a graph is being captured (no synchronization then).
    cudaGetLastError();
    cudaMemPool_t pool = nullptr;
    if (cudaStreamSynchronize(stream_) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess &&
        cudaMemPoolTrimTo(pool, 0) == cudaSuccess) {
      ++pool_trims_;
      switch (kind) {
        case MemKind::kSymmetric:
        case MemKind::kStreamOrdered: e = cudaMallocAsync(&p, bytes, stream_); break;
        case MemKind::kManaged: e = cudaMallocManaged(&p, bytes); break;
        case MemKind::kPinned: case MemKind::kHost: e = cudaMallocHost(&p, bytes); break;
        default: e = cudaMalloc(&p, bytes); break;
      }
    }
  }
  // The stream-ordered pool's reserve (what it holds beyond its tensors is the budget's
  // allocator_rest): a kPoolReserve record whenever it changes.
  if (e == cudaSuccess && (kind == MemKind::kStreamOrdered || kind == MemKind::kSymmetric)) {
    // Where the pool grew for this tensor, where it placed it depended on how far the device lagged
    // behind the frees queued before it (the same command gave reserves 768 MiB apart on an H100).
    // Let the stream catch up, give back what the pool holds unused (the new range among it), and
    // place the tensor again, so the reserve (the trace's kPoolReserve records, the budget's
    // allocator_rest) is what the allocation sequence needs, not an accident of timing. A CUPTI
    // trace sees the first placement too: its bytes are counted per category (run_extras), and the
    // CLI's comparison of CUPTI with the executor's accounting adds them. Only while a trace is
    // recorded (announce_pools), never during a graph capture.
    cudaMemPool_t pool = nullptr;
    uint64_t reserved = 0;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (announced_pool_reserve_ != UINT64_MAX && cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess &&
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess &&
        reserved > announced_pool_reserve_ && cudaStreamIsCapturing(stream_, &cap) == cudaSuccess &&
        cap == cudaStreamCaptureStatusNone && cudaFreeAsync(p, stream_) == cudaSuccess) {
      ++pool_settles_;
      settle_bytes_[static_cast<size_t>(tag.category)] += bytes;
      if (cudaStreamSynchronize(stream_) == cudaSuccess) (void)cudaMemPoolTrimTo(pool, 0);
      p = nullptr;
      e = cudaMallocAsync(&p, bytes, stream_);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      e = cudaErrorMemoryAllocation;  // reported below
    } else {
      note_activation_pool();
    }
  }
  nvtxRangePop();  // after the second placement too: CUPTI attributes both to the tensor
  if (e == cudaSuccess && (kind == MemKind::kDevice || kind == MemKind::kManaged)) device_live_bytes_ += bytes;
  if (e == cudaSuccess && unrecorded()) unrecorded_bytes_[static_cast<size_t>(tag.category)] += bytes;
  if (e == cudaSuccess) sample_untraced();
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Status::run_failure("out of GPU memory allocating " + std::to_string(bytes) + " bytes for " + tag.scope +
                               "/" + tag.name + " (free " + std::to_string(free_b) + " of total " +
                               std::to_string(total_b) + ", pool reserve " + std::to_string(pool_reserved_unused()) +
                               " unused after " + std::to_string(pool_trims_) + " trims)");
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::run_failure("cuda allocate " + tag.scope + "/" + tag.name + " (" + std::to_string(bytes) +
                               " bytes): " + cudaGetErrorString(e));
  }
  return p;
}

void CudaBackend::do_free(void* ptr, size_t bytes, MemKind kind) {
  if (ptr == nullptr) return;
  tiled_weights_.erase(ptr);
  if (kind == MemKind::kSymmetric && symm_pool_ != nullptr && symm_pool_->free(ptr)) return;  // stream order keeps it safe
  cudaError_t e;
  switch (kind) {
    case MemKind::kSymmetric:
    case MemKind::kStreamOrdered: e = cudaFreeAsync(ptr, stream_); break;
    case MemKind::kPinned: case MemKind::kHost: e = cudaFreeHost(ptr); break;
    default: e = cudaFree(ptr); break;
  }
  if (e == cudaSuccess && (kind == MemKind::kDevice || kind == MemKind::kManaged))
    device_live_bytes_ -= std::min<uint64_t>(device_live_bytes_, bytes);
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
Status CudaBackend::do_copy_from_host(Tensor& dst, const void* src) {
  if (dst.numel() == 0) return Status::ok();
  const size_t es = dtype_size(dst.dtype());
  MOEPROF_CUDA_CHECK("copy_from_host", cudaMemcpy2DAsync(dst.raw(), dst.ld() * es, src, dst.cols() * es, dst.cols() * es,
                                                         dst.rows(), cudaMemcpyHostToDevice, stream_));
  MOEPROF_CUDA_CHECK("copy_from_host", cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaBackend::do_copy_to_host(const Tensor& src, void* dst) {
  if (src.numel() == 0) return Status::ok();
  const size_t es = dtype_size(src.dtype());
  MOEPROF_CUDA_CHECK("copy_to_host", cudaMemcpy2DAsync(dst, src.cols() * es, src.raw(), src.ld() * es, src.cols() * es,
                                                       src.rows(), cudaMemcpyDeviceToHost, stream_));
  MOEPROF_CUDA_CHECK("copy_to_host", cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaBackend::synchronize() {
  MOEPROF_CUDA_CHECK("synchronize", cudaStreamSynchronize(stream_));
  sample_untraced();
  return Status::ok();
}

// ---- init ---------------------------------------------------------------------------------------
Status CudaBackend::do_init_uniform(Tensor& t, uint64_t seed, float scale) {
  MOEPROF_CUDA_CHECK("init_uniform", kern::launch_init_uniform(t.raw(), t.dtype() == DType::kBF16, t.rows(), t.cols(),
                                                               t.ld(), seed, scale, stream_));
  return Status::ok();
}

Status CudaBackend::do_init_e4m3(Tensor& t, uint64_t seed, float lo, float hi) {
  MOEPROF_CUDA_CHECK("init_e4m3", kern::launch_init_e4m3(u8p(t), t.rows(), t.cols(), t.ld(), seed, lo, hi, stream_));
  return Status::ok();
}

Status CudaBackend::do_init_bytes(Tensor& t, uint64_t seed) {
  MOEPROF_CUDA_CHECK("init_bytes", kern::launch_init_bytes(u8p(t), t.rows(), t.cols(), t.ld(), seed, stream_));
  return Status::ok();
}

Status CudaBackend::do_init_moe_w13(Tensor& w13, Tensor& w13_scales, int64_t num_experts, uint64_t seed_codes,
                                    uint64_t seed_scales, float lo, float hi) {
  return init_moe_weights("init_moe_w13", 1, w13, w13_scales, num_experts, seed_codes, seed_scales, lo, hi);
}

Status CudaBackend::do_init_moe_w2(Tensor& w2, Tensor& w2_scales, int64_t num_experts, uint64_t seed_codes,
                                   uint64_t seed_scales, float lo, float hi) {
  return init_moe_weights("init_moe_w2", 2, w2, w2_scales, num_experts, seed_codes, seed_scales, lo, hi);
}

Status CudaBackend::init_moe_weights(const char* op, int gemm, Tensor& w, Tensor& w_scales, int64_t num_experts,
                                     uint64_t seed_codes, uint64_t seed_scales, float lo, float hi) {
  // The GEMM's K and N: gemm1 w13 [E*2I, H/2] (K = H, N = I), gemm2 w2 [E*H, I/2] (K = I, N = H).
  const int64_t K = 2 * w.cols(), N = w.rows() / (num_experts * (gemm == 1 ? 2 : 1));
  const bool aligned = reinterpret_cast<uintptr_t>(w.raw()) % 16 == 0 && reinterpret_cast<uintptr_t>(w_scales.raw()) % 8 == 0;
  if (!aligned || !(gemm == 1 ? kern::gemm1_tiled_supported(K, N) : kern::gemm2_tiled_supported(K, N))) {
    tiled_weights_.erase(w.raw());
    MOEPROF_RETURN_IF_ERROR(do_init_bytes(w, seed_codes));  // row-major, as the CPU backend stores them
    return do_init_e4m3(w_scales, seed_scales, lo, hi);
  }
  MOEPROF_CUDA_CHECK(op, kern::launch_init_moe_tiled(gemm, u8p(w), u8p(w_scales), num_experts, K, N, seed_codes,
                                                     seed_scales, lo, hi, stream_));
  tiled_weights_[w.raw()] = TiledWeights{w_scales.raw(), w.rows(), gemm};
  return Status::ok();
}

Status CudaBackend::do_init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi) {
  MOEPROF_CUDA_CHECK("init_ints", kern::launch_init_ints(i32p(t), t.rows(), t.cols(), t.ld(), seed, lo, hi, stream_));
  return Status::ok();
}

Status CudaBackend::do_iota(Tensor& t, int32_t start) {
  MOEPROF_CUDA_CHECK("iota", kern::launch_iota(i32p(t), t.rows(), t.cols(), t.ld(), start, stream_));
  return Status::ok();
}

// ---- dense ops ----------------------------------------------------------------------------------
Status CudaBackend::do_embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  MOEPROF_CUDA_CHECK("embedding", kern::launch_embedding(i32p(ids), ids.numel(), bf16p(table), table.rows(), table.ld(),
                                                         vocab_start, table.cols(), bf16p(out), out.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  MOEPROF_CUDA_CHECK("rmsnorm", kern::launch_rmsnorm(bf16p(x), x.ld(), bf16p(w), x.rows(), x.cols(), eps, bf16p(out),
                                                     out.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  MOEPROF_CUDA_CHECK("fused_add_rmsnorm", kern::launch_fused_add_rmsnorm(bf16p(x), x.ld(), bf16p(residual), residual.ld(),
                                                                         bf16p(w), x.rows(), x.cols(), eps, stream_));
  return Status::ok();
}

Status CudaBackend::do_add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) {
  MOEPROF_CUDA_CHECK("add_rmsnorm", kern::launch_add_rmsnorm(bf16p(x), x.ld(), bf16p(residual), residual.ld(), bf16p(w),
                                                             x.rows(), x.cols(), eps, bf16p(out), out.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_rope(Tensor& x, int64_t n_heads, int64_t head_stride, int64_t rot_offset, int64_t rot_dim,
                            const Tensor& positions, const Tensor& cos_sin) {
  // positions are not range-checked on the device: the kernel reads cos_sin row positions[t].
  MOEPROF_CUDA_CHECK("rope", kern::launch_rope(bf16p(x), x.ld(), x.rows(), n_heads, head_stride, rot_offset, rot_dim,
                                               i32p(positions), f32p(cos_sin), cos_sin.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_mla_build_k(const Tensor& kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                                   const Tensor& k_pe, Tensor& k) {
  MOEPROF_CUDA_CHECK("mla_build_k", kern::launch_mla_build_k(bf16p(kv), kv.ld(), n_heads, kv_head_stride, nope,
                                                             bf16p(k_pe), k_pe.ld(), k_pe.cols(), k.rows(), bf16p(k),
                                                             k.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_kv_cache_write(const Tensor& latent, const Tensor& k_pe, Tensor& cache, int64_t slot0) {
  MOEPROF_CUDA_CHECK("kv_cache_write", kern::launch_kv_cache_write(bf16p(latent), latent.ld(), latent.cols(), bf16p(k_pe),
                                                                   k_pe.ld(), k_pe.cols(), latent.rows(), bf16p(cache),
                                                                   cache.ld(), slot0, stream_));
  return Status::ok();
}

Status CudaBackend::do_causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_heads,
                                        int64_t qk_dim, int64_t v_dim, int64_t v_offset, int64_t v_head_stride,
                                        float scale, Tensor& out) {
  const int64_t T = q.rows();
  const int64_t qk_stride = qk_dim;  // q/k heads packed at qk_dim columns (same as the CPU reference)
  kern::AttentionArgs a{};
  a.q = bf16p(q); a.ld_q = q.ld();
  a.k = bf16p(k); a.ld_k = k.ld();
  a.v = bf16p(v); a.ld_v = v.ld();
  a.out = bf16p(out); a.ld_out = out.ld();
  a.T = T; a.n_heads = n_heads; a.qk_dim = qk_dim; a.v_dim = v_dim;
  a.qk_head_stride = qk_stride; a.v_offset = v_offset; a.v_head_stride = v_head_stride;
  a.scale = scale;
  MOEPROF_CUDA_CHECK("causal_attention", kern::launch_causal_attention(a, stream_));
  return Status::ok();
}

Status CudaBackend::do_silu_and_mul(const Tensor& x, Tensor& out) {
  MOEPROF_CUDA_CHECK("silu_and_mul", kern::launch_silu_and_mul(bf16p(x), x.ld(), x.rows(), out.cols(), bf16p(out),
                                                               out.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_add_inplace(Tensor& dst, const Tensor& src) {
  MOEPROF_CUDA_CHECK("add_inplace", kern::launch_add_inplace(bf16p(dst), dst.ld(), bf16p(src), src.ld(), dst.rows(),
                                                             dst.cols(), stream_));
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

namespace {

// One event per mark, created as needed and destroyed with the clock.
class CudaOpClock final : public OpClock {
 public:
  CudaOpClock(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaOpClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  std::string name() const override { return "cuda events"; }
  Result<int64_t> mark() override {
    const char* op = "op timing";
    MOEPROF_CUDA_CHECK(op, cudaSetDevice(device_));
    cudaEvent_t e = nullptr;
    MOEPROF_CUDA_CHECK(op, cudaEventCreate(&e));
    events_.push_back(e);
    MOEPROF_CUDA_CHECK(op, cudaEventRecord(e, stream_));
    return static_cast<int64_t>(events_.size()) - 1;
  }
  Result<double> seconds(int64_t a, int64_t b) override {
    const char* op = "op timing";
    if (a < 0 || b <= a || b >= static_cast<int64_t>(events_.size()))
      return Status::run_failure("op timing: marks " + std::to_string(a) + ", " + std::to_string(b) + " out of range");
    float ms = 0;
    MOEPROF_CUDA_CHECK(op, cudaEventElapsedTime(&ms, events_[a], events_[b]));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  int device_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<OpClock> CudaBackend::make_op_clock() { return std::make_unique<CudaOpClock>(device_, stream_); }

void CudaBackend::announce_pools() {
  if (symm_pool_ != nullptr) notify_pool(symm_pool_->base(), symm_pool_->capacity(), MemKind::kSymmetric, "nccl_symmetric_pool");
  // The activation pool starts each trace with only what its live tensors need (a mode run
  // before this one leaves its reserve behind), so its reserve in the trace is this run's own.
  cudaMemPool_t pool = nullptr;
  if (cudaStreamSynchronize(stream_) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, device_) != cudaSuccess ||
      cudaMemPoolTrimTo(pool, 0) != cudaSuccess)
    cudaGetLastError();
  announced_pool_reserve_ = UINT64_MAX;
  note_activation_pool();
  untraced_samples_ = 0;
  untraced_start_ = untraced_peak_ = 0;
  pool_settles_ = 0;
  settle_bytes_.fill(0);
  unrecorded_bytes_.fill(0);
  sample_untraced();
}

void CudaBackend::sample_untraced() {
  size_t f = 0, t = 0;
  cudaMemPool_t pool = nullptr;
  uint64_t reserved = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, device_) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  const uint64_t used = t - f, ours = device_live_bytes_ + reserved;
  const uint64_t untraced = used > ours ? used - ours : 0;
  if (untraced_samples_++ == 0) untraced_start_ = untraced;
  untraced_peak_ = std::max(untraced_peak_, untraced);
}

std::vector<std::pair<std::string, std::string>> CudaBackend::run_extras() {
  sample_untraced();
  if (untraced_samples_ == 0) return {};
  std::vector<std::pair<std::string, std::string>> x = {{"cuda.untraced_start_bytes", std::to_string(untraced_start_)},
                                                        {"cuda.untraced_peak_bytes", std::to_string(untraced_peak_)},
                                                        {"cuda.untraced_samples", std::to_string(untraced_samples_)},
                                                        {"cuda.pool_settles", std::to_string(pool_settles_)}};
  for (int c = 0; c < kNumCategories; ++c)
    if (settle_bytes_[static_cast<size_t>(c)] > 0)
      x.emplace_back("cuda.pool_settle_bytes." + std::string(category_name(static_cast<Category>(c))),
                     std::to_string(settle_bytes_[static_cast<size_t>(c)]));
  for (int c = 0; c < kNumCategories; ++c)
    if (unrecorded_bytes_[static_cast<size_t>(c)] > 0)
      x.emplace_back("cuda.unrecorded_bytes." + std::string(category_name(static_cast<Category>(c))),
                     std::to_string(unrecorded_bytes_[static_cast<size_t>(c)]));
  return x;
}

void CudaBackend::note_activation_pool() {
  cudaMemPool_t pool = nullptr;
  uint64_t reserved = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, device_) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (reserved == announced_pool_reserve_) return;
  announced_pool_reserve_ = reserved;
  notify_pool(reinterpret_cast<uint64_t>(pool), reserved, MemKind::kStreamOrdered, "activation_pool");
}

// A no-op for one rank or emulated TP (no communicator attached).
Status CudaBackend::do_all_reduce(Tensor& t) {
  if (nccl_comm_ == nullptr || nccl_size_ == 1 || t.numel() == 0) return Status::ok();
  return nccl_all_reduce(nccl_comm_, t.raw(), static_cast<size_t>(t.numel()), t.dtype(), stream_);
}

// Expert parallelism over real ranks: grouped ncclSend/ncclRecv (cuda_nccl.h).
Status CudaBackend::do_all_to_all_bytes(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                        const std::vector<size_t>& recv_bytes) {
  if (!collectives_real()) {  // one rank: its rows to itself
    if (send_bytes[0] > 0)
      MOEPROF_CUDA_CHECK("all_to_all_rows", cudaMemcpyAsync(recv, send, send_bytes[0], cudaMemcpyDeviceToDevice, stream_));
    return Status::ok();
  }
  return nccl_all_to_all_bytes(nccl_comm_, send, send_bytes, recv, recv_bytes, stream_);
}

Status CudaBackend::do_all_gather_bytes(void* data, const std::vector<size_t>& bytes) {
  if (!collectives_real()) return Status::ok();  // one rank: its slice is all there is
  return nccl_all_gather_bytes(nccl_comm_, nccl_rank_, data, bytes, stream_);
}

}  // namespace moeprof
