// CpuBackend: the paged MLA ops of serving (backend.h, "paged MLA"): the KV pool's scatter, W_UK
// absorbed into the query, attention over the paged latent cache and W_UV after it. fp32
// accumulation in a fixed order, one rounding to bf16 per output element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "executor/cpu_backend.h"
#include "kernels/common/fp_formats.h"
#include "kernels/common/mla_split.h"

namespace moeprof {

using cpu_detail::row_ptr;
using cpu_detail::vec_index;

namespace {
inline float bf(uint16_t h) { return kern::bf16_to_f32(h); }
inline uint16_t to_bf(float f) { return kern::f32_to_bf16(f); }
inline int32_t idx(const Tensor& t, int64_t i) { return t.data<int32_t>()[vec_index(t, i)]; }
}  // namespace

Status CpuBackend::do_kv_cache_store(const Tensor& latent, const Tensor& k_pe, Tensor& cache, const Tensor& slots) {
  const int64_t N = latent.rows(), L = latent.cols(), R = k_pe.cols();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t s = idx(slots, n);
    if (s < 0 || s >= cache.rows())
      return Status::bad_input("kv_cache_store: slots[" + std::to_string(n) + "] must be in [0, " +
                               std::to_string(cache.rows()) + ") (the rows of cache) (got " + std::to_string(s) + ")");
  }
  for (int64_t n = 0; n < N; ++n) {
    uint16_t* c = row_ptr<uint16_t>(cache, idx(slots, n));
    std::memcpy(c, row_ptr<uint16_t>(latent, n), static_cast<size_t>(L) * 2);
    std::memcpy(c + L, row_ptr<uint16_t>(k_pe, n), static_cast<size_t>(R) * 2);
  }
  return Status::ok();
}

Status CpuBackend::do_mla_q_absorb(const Tensor& q, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t rope,
                                   int64_t v_dim, Tensor& q_abs) {
  const int64_t N = q.rows(), kvl = kv_b.cols(), qk = nope + rope, out_head = kvl + rope;
  cpu_detail::parallel_for(n_heads, num_threads(), [&](int64_t h) {
    std::vector<float> acc(static_cast<size_t>(kvl));
    for (int64_t n = 0; n < N; ++n) {
      const uint16_t* qr = row_ptr<uint16_t>(q, n) + h * qk;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = 0; i < nope; ++i) {  // increasing i: acc[c] += q[i] * W_UK[i, c]
        const float qi = bf(qr[i]);
        const uint16_t* w = row_ptr<uint16_t>(kv_b, h * (nope + v_dim) + i);
        for (int64_t c = 0; c < kvl; ++c) acc[static_cast<size_t>(c)] += qi * bf(w[c]);
      }
      uint16_t* o = row_ptr<uint16_t>(q_abs, n) + h * out_head;
      for (int64_t c = 0; c < kvl; ++c) o[c] = to_bf(acc[static_cast<size_t>(c)]);
      std::memcpy(o + kvl, qr + nope, static_cast<size_t>(rope) * 2);
    }
  });
  return Status::ok();
}

namespace {

// The split form of the attention (kernels/common/mla_split.h): each of the row's position ranges
// leaves its unnormalized partial output o_s, running max m_s and sum l_s in the workspace (layout
// of the CUDA kernel's), then out = sum_s w_s o_s / sum_s w_s l_s, w_s = exp(m_s - max m).
Status paged_attention_split(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token, const Tensor& row_req,
                             const Tensor& row_pos, int64_t n_heads, float scale, int64_t splits, float* ws, Tensor& out,
                             int threads) {
  const int64_t N = q_abs.rows(), D = cache.cols(), kvl = out.cols() / n_heads, C = req_to_token.cols();
  float* ml = ws + splits * N * n_heads * kvl;
  cpu_detail::parallel_for(N, threads, [&](int64_t n) {
    const int64_t r = idx(row_req, n), L = idx(row_pos, n) + 1;
    const int32_t* slots = req_to_token.data<int32_t>() + r * C;
    std::vector<float> qf(static_cast<size_t>(D)), sc, w;
    for (int64_t h = 0; h < n_heads; ++h) {
      const uint16_t* qr = row_ptr<uint16_t>(q_abs, n) + h * D;
      for (int64_t d = 0; d < D; ++d) qf[static_cast<size_t>(d)] = bf(qr[d]);
      for (int64_t sp = 0; sp < splits; ++sp) {
        int64_t b = 0, e = 0;
        kern::mla_decode_split_range(L, splits, sp, &b, &e);
        const int64_t cell = (sp * N + n) * n_heads + h;
        float* o = ws + cell * kvl;
        std::fill(o, o + kvl, 0.0f);
        float m = -INFINITY, sum = 0.0f;
        sc.assign(static_cast<size_t>(e - b), 0.0f);
        for (int64_t j = b; j < e; ++j) {
          const uint16_t* kr = row_ptr<uint16_t>(cache, slots[j]);
          float dot = 0.0f;
          for (int64_t d = 0; d < D; ++d) dot += qf[static_cast<size_t>(d)] * bf(kr[d]);
          sc[static_cast<size_t>(j - b)] = scale * dot;
          m = std::max(m, sc[static_cast<size_t>(j - b)]);
        }
        for (int64_t j = b; j < e; ++j) {
          const float w = std::exp(sc[static_cast<size_t>(j - b)] - m);
          sum += w;
          const uint16_t* vr = row_ptr<uint16_t>(cache, slots[j]);
          for (int64_t c = 0; c < kvl; ++c) o[c] += w * bf(vr[c]);
        }
        ml[2 * cell] = m;
        ml[2 * cell + 1] = sum;
      }
      float m = -INFINITY, denom = 0.0f;
      for (int64_t sp = 0; sp < splits; ++sp) m = std::max(m, ml[2 * ((sp * N + n) * n_heads + h)]);
      w.assign(static_cast<size_t>(splits), 0.0f);  // exp(m_s - m), 0 for an empty range
      for (int64_t sp = 0; sp < splits; ++sp) {
        const float* p = ml + 2 * ((sp * N + n) * n_heads + h);
        if (p[0] != -INFINITY) w[static_cast<size_t>(sp)] = std::exp(p[0] - m);
        denom += w[static_cast<size_t>(sp)] * p[1];
      }
      uint16_t* orow = row_ptr<uint16_t>(out, n) + h * kvl;
      for (int64_t c = 0; c < kvl; ++c) {
        float acc = 0.0f;
        for (int64_t sp = 0; sp < splits; ++sp)
          if (w[static_cast<size_t>(sp)] != 0.0f) acc += w[static_cast<size_t>(sp)] * ws[((sp * N + n) * n_heads + h) * kvl + c];
        orow[c] = to_bf(acc / denom);
      }
    }
  });
  return Status::ok();
}

}  // namespace

Status CpuBackend::do_mla_paged_attention(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token,
                                          const Tensor& row_req, const Tensor& row_pos, int64_t n_heads, float scale,
                                          Tensor& out, const Tensor& workspace) {
  const int64_t N = q_abs.rows(), D = cache.cols(), kvl = out.cols() / n_heads;
  const int64_t R = req_to_token.rows(), C = req_to_token.cols();
  // The index data, checked where it is read (the CUDA kernel trusts it).
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = idx(row_req, n), p = idx(row_pos, n);
    if (r < 0 || r >= R)
      return Status::bad_input("mla_paged_attention: row_req[" + std::to_string(n) + "] must be in [0, " + std::to_string(R) +
                               ") (the rows of req_to_token) (got " + std::to_string(r) + ")");
    if (p < 0 || p >= C)
      return Status::bad_input("mla_paged_attention: row_pos[" + std::to_string(n) + "] must be in [0, " + std::to_string(C) +
                               ") (the columns of req_to_token) (got " + std::to_string(p) + ")");
    const int32_t* slots = req_to_token.data<int32_t>() + r * C;
    for (int64_t j = 0; j <= p; ++j)
      if (slots[j] < 0 || slots[j] >= cache.rows())
        return Status::bad_input("mla_paged_attention: req_to_token[" + std::to_string(r) + ", " + std::to_string(j) +
                                 "] must be in [0, " + std::to_string(cache.rows()) + ") (the rows of cache) (got " +
                                 std::to_string(slots[j]) + ")");
  }
  const int64_t splits = workspace.defined() ? kern::mla_decode_splits(N, n_heads, D, kvl) : 1;
  if (splits > 1) return paged_attention_split(q_abs, cache, req_to_token, row_req, row_pos, n_heads, scale, splits,
                                               workspace.data<float>(), out, num_threads());
  cpu_detail::parallel_for(N, num_threads(), [&](int64_t n) {
    const int64_t r = idx(row_req, n), p = idx(row_pos, n);
    const int32_t* slots = req_to_token.data<int32_t>() + r * C;
    std::vector<float> qf(static_cast<size_t>(D)), s(static_cast<size_t>(p + 1)), o(static_cast<size_t>(kvl));
    for (int64_t h = 0; h < n_heads; ++h) {
      const uint16_t* qr = row_ptr<uint16_t>(q_abs, n) + h * D;
      for (int64_t d = 0; d < D; ++d) qf[static_cast<size_t>(d)] = bf(qr[d]);
      float m = -INFINITY;
      for (int64_t j = 0; j <= p; ++j) {
        const uint16_t* kr = row_ptr<uint16_t>(cache, slots[j]);
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += qf[static_cast<size_t>(d)] * bf(kr[d]);
        s[static_cast<size_t>(j)] = scale * dot;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      float sum = 0.0f;
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t j = 0; j <= p; ++j) {
        const float e = std::exp(s[static_cast<size_t>(j)] - m);
        sum += e;
        const uint16_t* vr = row_ptr<uint16_t>(cache, slots[j]);
        for (int64_t c = 0; c < kvl; ++c) o[static_cast<size_t>(c)] += e * bf(vr[c]);
      }
      uint16_t* orow = row_ptr<uint16_t>(out, n) + h * kvl;
      for (int64_t c = 0; c < kvl; ++c) orow[c] = to_bf(o[static_cast<size_t>(c)] / sum);
    }
  });
  return Status::ok();
}

Status CpuBackend::do_mla_v_up(const Tensor& lat, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t v_dim,
                               Tensor& out) {
  const int64_t N = lat.rows(), kvl = kv_b.cols();
  cpu_detail::parallel_for(n_heads, num_threads(), [&](int64_t h) {
    for (int64_t n = 0; n < N; ++n) {
      const uint16_t* x = row_ptr<uint16_t>(lat, n) + h * kvl;
      uint16_t* o = row_ptr<uint16_t>(out, n) + h * v_dim;
      for (int64_t j = 0; j < v_dim; ++j) {
        const uint16_t* w = row_ptr<uint16_t>(kv_b, h * (nope + v_dim) + nope + j);
        float acc = 0.0f;
        for (int64_t c = 0; c < kvl; ++c) acc += bf(x[c]) * bf(w[c]);
        o[j] = to_bf(acc);
      }
    }
  });
  return Status::ok();
}

}  // namespace moeprof
