// CpuBackend: memory, data movement, deterministic init and the dense ops. See backend.h for the
// numeric contract of each op; the comments here only note how the contract is met.
#include "executor/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/common/fp_formats.h"
#include "kernels/common/random.h"
#include "executor/backends.h"

namespace moeprof {

using cpu_detail::row_ptr;
using cpu_detail::vec_index;

namespace cpu_detail {

void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (threads <= 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const int workers = static_cast<int>(std::min<int64_t>(threads, n));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

PackedRows pack_rows(int64_t rows, int64_t K, const std::function<void(int64_t, float*)>& fill) {
  PackedRows p;
  p.rows = rows;
  p.K = K;
  const int64_t tiles = (rows + kRowTile - 1) / kRowTile;
  p.data.assign(static_cast<size_t>(tiles * K * kRowTile), 0.0f);
  std::vector<float> buf(static_cast<size_t>(K));
  for (int64_t j = 0; j < rows; ++j) {
    fill(j, buf.data());
    float* tile = p.data.data() + (j / kRowTile) * K * kRowTile;
    const int64_t jj = j % kRowTile;
    for (int64_t k = 0; k < K; ++k) tile[k * kRowTile + jj] = buf[static_cast<size_t>(k)];
  }
  return p;
}

// acc[jj] = sum_k tile[k][jj] * w[k] for the kRowTile rows of one tile: each acc[jj] is one dot
// product accumulated in increasing k (separate multiply and add); the rows only run side by side.
#if defined(__GNUC__)
// GCC/Clang vector extension: four lanes per register, lane-wise identical to the plain loop.
// G groups of 4 rows are computed (the tile's valid rows rounded up to 4).
typedef float Float4 __attribute__((vector_size(16)));
static_assert(kRowTile == 16, "tile_dot keeps at most four 4-lane accumulators");
template <int G>
static void tile_dot_groups(const float* tile, const float* w, int64_t K, float* acc) {
  Float4 a[G];
  for (int g = 0; g < G; ++g) a[g] = Float4{0, 0, 0, 0};
  for (int64_t k = 0; k < K; ++k) {
    const float wk = w[k];
    const Float4 wv = {wk, wk, wk, wk};
    for (int g = 0; g < G; ++g) {
      Float4 x;
      std::memcpy(&x, tile + k * kRowTile + 4 * g, 16);
      a[g] += x * wv;
    }
  }
  for (int g = 0; g < G; ++g) std::memcpy(acc + 4 * g, &a[g], 16);
}
static void tile_dot(const float* tile, const float* w, int64_t K, int64_t rows, float* acc) {
  switch ((rows + 3) / 4) {
    case 1: return tile_dot_groups<1>(tile, w, K, acc);
    case 2: return tile_dot_groups<2>(tile, w, K, acc);
    case 3: return tile_dot_groups<3>(tile, w, K, acc);
    default: return tile_dot_groups<4>(tile, w, K, acc);
  }
}
#else
static void tile_dot(const float* tile, const float* w, int64_t K, int64_t rows, float* acc) {
  for (int64_t jj = 0; jj < rows; ++jj) acc[jj] = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float wk = w[k];
    for (int64_t jj = 0; jj < rows; ++jj) acc[jj] += tile[k * kRowTile + jj] * wk;
  }
}
#endif

void gemm_packed(const PackedRows& a, int64_t n0, int64_t n1, const std::function<void(int64_t, float*)>& wrow,
                 const std::function<void(int64_t, int64_t, float)>& store) {
  const int64_t K = a.K;
  const int64_t tiles = (a.rows + kRowTile - 1) / kRowTile;
  std::vector<float> w(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    wrow(n, w.data());
    for (int64_t c = 0; c < tiles; ++c) {
      const float* tile = a.data.data() + c * K * kRowTile;
      const int64_t valid = std::min(kRowTile, a.rows - c * kRowTile);
      float acc[kRowTile];
      tile_dot(tile, w.data(), K, valid, acc);
      for (int64_t jj = 0; jj < valid; ++jj) store(c * kRowTile + jj, n, acc[jj]);
    }
  }
}

}  // namespace cpu_detail

namespace {

inline float bf(uint16_t h) { return kern::bf16_to_f32(h); }
inline uint16_t to_bf(float f) { return kern::f32_to_bf16(f); }

int default_threads() {
  if (const char* env = std::getenv("MOEPROF_CPU_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(std::min(hc, 64u));
}

// Runs fn(r) for rows [0, rows) in parallel when the total work (rows * work_per_row) is large
// enough to pay for starting threads.
void for_rows(int64_t rows, int64_t work_per_row, int threads, const std::function<void(int64_t)>& fn) {
  const bool big = rows > 1 && rows * std::max<int64_t>(work_per_row, 1) >= (int64_t{1} << 18);
  cpu_detail::parallel_for(rows, big ? threads : 1, fn);
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

CpuBackend::CpuBackend(int num_threads) : num_threads_(num_threads > 0 ? num_threads : default_threads()) {}

// ---- memory --------------------------------------------------------------------------------

Result<void*> CpuBackend::do_allocate(size_t bytes, MemKind /*kind*/, const AllocTag& tag) {
  // aligned_alloc needs a size that is a multiple of the alignment; a zero-byte request still
  // gets its own 64-byte block so every allocation has a distinct, non-null address.
  const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p)
    return Status::run_failure("host allocation of " + std::to_string(bytes) + " bytes failed for " + tag.scope +
                               "/" + tag.name);
  std::memset(p, 0xFF, rounded);  // poison: NaN for bf16/f32, -1 for i32
  return p;
}

void CpuBackend::do_free(void* ptr, size_t /*bytes*/, MemKind /*kind*/) { std::free(ptr); }

// ---- data movement -------------------------------------------------------------------------
// Views with a row stride are copied row by row (the interface only needs contiguous tensors).

Status CpuBackend::do_copy_from_host(Tensor& dst, const void* src) {
  const size_t row_bytes = static_cast<size_t>(dst.cols()) * dtype_size(dst.dtype());
  const char* s = static_cast<const char*>(src);
  if (dst.contiguous()) {
    if (dst.bytes() > 0) std::memcpy(dst.raw(), s, dst.bytes());
    return Status::ok();
  }
  for (int64_t r = 0; r < dst.rows(); ++r)
    std::memcpy(static_cast<char*>(dst.raw()) + r * dst.ld() * static_cast<int64_t>(dtype_size(dst.dtype())),
                s + r * static_cast<int64_t>(row_bytes), row_bytes);
  return Status::ok();
}

Status CpuBackend::do_copy_to_host(const Tensor& src, void* dst) {
  const size_t row_bytes = static_cast<size_t>(src.cols()) * dtype_size(src.dtype());
  char* d = static_cast<char*>(dst);
  if (src.contiguous()) {
    if (src.bytes() > 0) std::memcpy(d, src.raw(), src.bytes());
    return Status::ok();
  }
  for (int64_t r = 0; r < src.rows(); ++r)
    std::memcpy(d + r * static_cast<int64_t>(row_bytes),
                static_cast<const char*>(src.raw()) + r * src.ld() * static_cast<int64_t>(dtype_size(src.dtype())),
                row_bytes);
  return Status::ok();
}

// ---- deterministic initialization ----------------------------------------------------------
// The element index i = row * cols + col is the logical index, independent of the row stride.

Status CpuBackend::do_init_uniform(Tensor& t, uint64_t seed, float scale) {
  const bool is_bf16 = t.dtype() == DType::kBF16;
  for_rows(t.rows(), t.cols(), num_threads_, [&](int64_t r) {
    for (int64_t c = 0; c < t.cols(); ++c) {
      const uint64_t i = static_cast<uint64_t>(r * t.cols() + c);
      const float u = kern::hash_unit(seed, i);
      const float v = scale * (2.0f * u - 1.0f);  // 2u - 1 is exact
      if (is_bf16)
        row_ptr<uint16_t>(t, r)[c] = to_bf(v);
      else
        row_ptr<float>(t, r)[c] = v;
    }
  });
  return Status::ok();
}

Status CpuBackend::do_init_e4m3(Tensor& t, uint64_t seed, float lo, float hi) {
  const float span = hi - lo;
  for_rows(t.rows(), t.cols(), num_threads_, [&](int64_t r) {
    for (int64_t c = 0; c < t.cols(); ++c) {
      const float u = kern::hash_unit(seed, static_cast<uint64_t>(r * t.cols() + c));
      const float prod = span * u;  // no FMA: product rounded, then the sum
      const float v = lo + prod;
      row_ptr<uint8_t>(t, r)[c] = kern::f32_to_e4m3(v);
    }
  });
  return Status::ok();
}

Status CpuBackend::do_init_bytes(Tensor& t, uint64_t seed) {
  for_rows(t.rows(), t.cols(), num_threads_, [&](int64_t r) {
    for (int64_t c = 0; c < t.cols(); ++c)
      row_ptr<uint8_t>(t, r)[c] = static_cast<uint8_t>(kern::hash64(seed, static_cast<uint64_t>(r * t.cols() + c)) & 0xFF);
  });
  return Status::ok();
}

Status CpuBackend::do_init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi) {
  for (int64_t r = 0; r < t.rows(); ++r)
    for (int64_t c = 0; c < t.cols(); ++c) row_ptr<int32_t>(t, r)[c] = kern::hash_int(seed, static_cast<uint64_t>(r * t.cols() + c), lo, hi);
  return Status::ok();
}

Status CpuBackend::do_iota(Tensor& t, int32_t start) {
  for (int64_t r = 0; r < t.rows(); ++r)
    for (int64_t c = 0; c < t.cols(); ++c) row_ptr<int32_t>(t, r)[c] = static_cast<int32_t>(start + r * t.cols() + c);
  return Status::ok();
}

// ---- dense ops -----------------------------------------------------------------------------

Status CpuBackend::do_embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const int64_t H = out.cols();
  for (int64_t t = 0; t < out.rows(); ++t) {
    const int64_t id = ids.data<int32_t>()[vec_index(ids, t)];
    uint16_t* o = row_ptr<uint16_t>(out, t);
    const int64_t local = id - vocab_start;
    if (local >= 0 && local < table.rows())
      std::memcpy(o, row_ptr<uint16_t>(table, local), static_cast<size_t>(H) * 2);
    else
      std::fill(o, o + H, uint16_t{0});
  }
  return Status::ok();
}

namespace {
// out = bf16(x * inv_rms * w) for one row of already bf16-valued fp32 inputs.
float inv_rms(const float* x, int64_t H, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < H; ++i) ss += x[i] * x[i];
  const float mean = ss / static_cast<float>(H);
  return 1.0f / std::sqrt(mean + eps);
}
}  // namespace

Status CpuBackend::do_rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const int64_t H = x.cols();
  std::vector<float> wf(static_cast<size_t>(H));
  for (int64_t i = 0; i < H; ++i) wf[static_cast<size_t>(i)] = bf(w.data<uint16_t>()[vec_index(w, i)]);
  for_rows(x.rows(), H, num_threads_, [&](int64_t t) {
    std::vector<float> xf(static_cast<size_t>(H));
    const uint16_t* xr = row_ptr<uint16_t>(x, t);
    for (int64_t i = 0; i < H; ++i) xf[static_cast<size_t>(i)] = bf(xr[i]);
    const float r = inv_rms(xf.data(), H, eps);
    uint16_t* o = row_ptr<uint16_t>(out, t);  // may alias x: x was read into xf first
    for (int64_t i = 0; i < H; ++i) o[i] = to_bf(xf[static_cast<size_t>(i)] * r * wf[static_cast<size_t>(i)]);
  });
  return Status::ok();
}

namespace {
// residual = bf16(x + residual); out = rmsnorm(residual) per row (out may be x).
void add_rmsnorm_rows(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out, int threads) {
  const int64_t H = x.cols();
  std::vector<float> wf(static_cast<size_t>(H));
  for (int64_t i = 0; i < H; ++i) wf[static_cast<size_t>(i)] = bf(w.data<uint16_t>()[vec_index(w, i)]);
  for_rows(x.rows(), H, threads, [&](int64_t t) {
    std::vector<float> rf(static_cast<size_t>(H));
    const uint16_t* xr = row_ptr<uint16_t>(x, t);
    uint16_t* rr = row_ptr<uint16_t>(residual, t);
    for (int64_t i = 0; i < H; ++i) {
      const uint16_t s = to_bf(bf(xr[i]) + bf(rr[i]));
      rr[i] = s;
      rf[static_cast<size_t>(i)] = bf(s);  // the norm sees the stored (bf16) residual
    }
    const float r = inv_rms(rf.data(), H, eps);
    uint16_t* o = row_ptr<uint16_t>(out, t);
    for (int64_t i = 0; i < H; ++i) o[i] = to_bf(rf[static_cast<size_t>(i)] * r * wf[static_cast<size_t>(i)]);
  });
}
}  // namespace

Status CpuBackend::do_fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  add_rmsnorm_rows(x, residual, w, eps, x, num_threads_);
  return Status::ok();
}

Status CpuBackend::do_add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) {
  add_rmsnorm_rows(x, residual, w, eps, out, num_threads_);
  return Status::ok();
}

Status CpuBackend::do_linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& /*workspace*/) {
  const int64_t T = x.rows(), K = x.cols(), N = w.rows();
  const auto a = cpu_detail::pack_rows(T, K, [&](int64_t t, float* dst) {
    const uint16_t* xr = row_ptr<uint16_t>(x, t);
    for (int64_t k = 0; k < K; ++k) dst[k] = bf(xr[k]);
  });
  const bool out_bf16 = out.dtype() == DType::kBF16;
  constexpr int64_t kColChunk = 32;
  const int64_t chunks = (N + kColChunk - 1) / kColChunk;
  const bool big = T * N * K >= (int64_t{1} << 20);
  cpu_detail::parallel_for(chunks, big ? num_threads_ : 1, [&](int64_t c) {
    cpu_detail::gemm_packed(
        a, c * kColChunk, std::min(N, (c + 1) * kColChunk),
        [&](int64_t n, float* dst) {
          const uint16_t* wr = row_ptr<uint16_t>(w, n);
          for (int64_t k = 0; k < K; ++k) dst[k] = bf(wr[k]);
        },
        [&](int64_t t, int64_t n, float acc) {
          if (out_bf16)
            row_ptr<uint16_t>(out, t)[n] = to_bf(acc);
          else
            row_ptr<float>(out, t)[n] = acc;
        });
  });
  return Status::ok();
}

Status CpuBackend::do_rope(Tensor& x, int64_t n_heads, int64_t head_stride, int64_t rot_offset, int64_t rot_dim,
                        const Tensor& positions, const Tensor& cos_sin) {
  const int64_t half = rot_dim / 2;
  // Positions are data: checked here, where they are read (the CUDA kernel trusts them).
  for (int64_t t = 0; t < x.rows(); ++t) {
    const int64_t pos = positions.data<int32_t>()[vec_index(positions, t)];
    if (pos < 0 || pos >= cos_sin.rows())
      return Status::bad_input("rope: positions[" + std::to_string(t) + "] must be in [0, " +
                               std::to_string(cos_sin.rows()) + ") (the rows of cos_sin) (got " + std::to_string(pos) +
                               ")");
  }
  for (int64_t t = 0; t < x.rows(); ++t) {
    const int64_t pos = positions.data<int32_t>()[vec_index(positions, t)];
    const float* cs = row_ptr<float>(cos_sin, pos);
    uint16_t* xr = row_ptr<uint16_t>(x, t);
    for (int64_t h = 0; h < n_heads; ++h) {
      uint16_t* p = xr + h * head_stride + rot_offset;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[i], s = cs[half + i];
        const float x0 = bf(p[2 * i]), x1 = bf(p[2 * i + 1]);
        p[2 * i] = to_bf(x0 * c - x1 * s);
        p[2 * i + 1] = to_bf(x0 * s + x1 * c);
      }
    }
  }
  return Status::ok();
}

Status CpuBackend::do_mla_build_k(const Tensor& kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                               const Tensor& k_pe, Tensor& k) {
  const int64_t T = k.rows(), rope_dim = k_pe.cols(), head = nope + rope_dim;
  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* kvr = row_ptr<uint16_t>(kv, t);
    const uint16_t* per = row_ptr<uint16_t>(k_pe, t);
    uint16_t* kr = row_ptr<uint16_t>(k, t);
    for (int64_t h = 0; h < n_heads; ++h) {
      std::memcpy(kr + h * head, kvr + h * kv_head_stride, static_cast<size_t>(nope) * 2);
      std::memcpy(kr + h * head + nope, per, static_cast<size_t>(rope_dim) * 2);
    }
  }
  return Status::ok();
}

Status CpuBackend::do_kv_cache_write(const Tensor& latent, const Tensor& k_pe, Tensor& cache, int64_t slot0) {
  const int64_t T = latent.rows(), L = latent.cols(), R = k_pe.cols();
  for (int64_t t = 0; t < T; ++t) {
    uint16_t* c = row_ptr<uint16_t>(cache, slot0 + t);
    std::memcpy(c, row_ptr<uint16_t>(latent, t), static_cast<size_t>(L) * 2);
    std::memcpy(c + L, row_ptr<uint16_t>(k_pe, t), static_cast<size_t>(R) * 2);
  }
  return Status::ok();
}

Status CpuBackend::do_causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_heads, int64_t qk_dim,
                                    int64_t v_dim, int64_t v_offset, int64_t v_head_stride, float scale, Tensor& out) {
  const int64_t T = q.rows();
  // q/k heads are packed at a stride of qk_dim columns (the interface has no separate q/k stride).
  for_rows(T, T * n_heads * (qk_dim + v_dim) / 2 + 1, num_threads_, [&](int64_t t) {
    std::vector<float> qf(static_cast<size_t>(qk_dim)), p(static_cast<size_t>(t + 1)), o(static_cast<size_t>(v_dim));
    for (int64_t h = 0; h < n_heads; ++h) {
      const uint16_t* qr = row_ptr<uint16_t>(q, t) + h * qk_dim;
      for (int64_t d = 0; d < qk_dim; ++d) qf[static_cast<size_t>(d)] = bf(qr[d]);
      float m = -INFINITY;
      for (int64_t s = 0; s <= t; ++s) {
        const uint16_t* kr = row_ptr<uint16_t>(k, s) + h * qk_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < qk_dim; ++d) dot += qf[static_cast<size_t>(d)] * bf(kr[d]);
        p[static_cast<size_t>(s)] = scale * dot;
        m = std::max(m, p[static_cast<size_t>(s)]);
      }
      float sum = 0.0f;
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t s = 0; s <= t; ++s) {
        const float e = std::exp(p[static_cast<size_t>(s)] - m);
        sum += e;
        const uint16_t* vr = row_ptr<uint16_t>(v, s) + v_offset + h * v_head_stride;
        for (int64_t d = 0; d < v_dim; ++d) o[static_cast<size_t>(d)] += e * bf(vr[d]);
      }
      uint16_t* orow = row_ptr<uint16_t>(out, t) + h * v_dim;
      for (int64_t d = 0; d < v_dim; ++d) orow[d] = to_bf(o[static_cast<size_t>(d)] / sum);
    }
  });
  return Status::ok();
}

Status CpuBackend::do_silu_and_mul(const Tensor& x, Tensor& out) {
  const int64_t I = out.cols();
  for_rows(x.rows(), I, num_threads_, [&](int64_t t) {
    const uint16_t* xr = row_ptr<uint16_t>(x, t);
    uint16_t* o = row_ptr<uint16_t>(out, t);
    for (int64_t i = 0; i < I; ++i) {
      const float g = bf(xr[i]), u = bf(xr[I + i]);
      o[i] = to_bf(g / (1.0f + std::exp(-g)) * u);
    }
  });
  return Status::ok();
}

Status CpuBackend::do_add_inplace(Tensor& dst, const Tensor& src) {
  for_rows(dst.rows(), dst.cols(), num_threads_, [&](int64_t t) {
    uint16_t* d = row_ptr<uint16_t>(dst, t);
    const uint16_t* s = row_ptr<uint16_t>(src, t);
    for (int64_t i = 0; i < dst.cols(); ++i) d[i] = to_bf(bf(d[i]) + bf(s[i]));
  });
  return Status::ok();
}

// Real ranks (host_group.h); without a group of several ranks all_reduce is a no-op (one rank,
// emulated TP), all_to_all_rows copies the rows to this rank itself, all_gather_rows does nothing.
Status CpuBackend::do_all_reduce(Tensor& t) {
  if (!collectives_real() || t.numel() == 0) return Status::ok();
  return group_->all_reduce(group_rank_, t.raw(), static_cast<size_t>(t.numel()), t.dtype());
}

Status CpuBackend::do_all_to_all_bytes(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                       const std::vector<size_t>& recv_bytes) {
  if (!collectives_real()) {  // one rank: its rows to itself
    if (send_bytes[0] > 0) std::memcpy(recv, send, send_bytes[0]);
    return Status::ok();
  }
  return group_->all_to_all(group_rank_, send, send_bytes, recv, recv_bytes);
}

Status CpuBackend::do_all_gather_bytes(void* data, const std::vector<size_t>& bytes) {
  if (!collectives_real()) return Status::ok();  // one rank: its slice is all there is
  return group_->all_gather(group_rank_, data, bytes);
}

}  // namespace moeprof
