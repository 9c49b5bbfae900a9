// Float64 references of the paged MLA ops of serving (backend.h, "paged MLA"), and a random case
// of them, shared by the CPU op tests (tests/executor/mla_ops_test.cpp) and the CUDA kernel tests
// (tests/gpu/cuda_mla_test.cpp). Inputs are bf16 values; the references compute in float64 from
// those values and do not round.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/executor/reference.h"

namespace moeprof::testref {

// A paged pool of `slots` rows, R request rows of C positions, N query rows.
struct MlaCase {
  int64_t N = 0, h = 0, nope = 0, rope = 0, vd = 0, kvl = 0, slots = 0, R = 0, C = 0;
  float scale = 0;
  std::vector<uint16_t> q;       // [N, h*(nope+rope)]
  std::vector<uint16_t> kv_b;    // [h*(nope+vd), kvl]
  std::vector<uint16_t> cache;   // [slots, kvl+rope]
  std::vector<int32_t> r2t;      // [R, C]
  std::vector<int32_t> row_req, row_pos;  // [N]
  int64_t D() const { return kvl + rope; }
};

// Request r holds len[r] positions in distinct random slots; query row n is request n % R at a
// random position (or its last one when `last`).
inline MlaCase make_mla_case(uint64_t seed, int64_t N, int64_t h, int64_t nope, int64_t rope, int64_t vd, int64_t kvl,
                             int64_t R, int64_t C, bool last = false) {
  std::mt19937_64 rng(seed);
  MlaCase c;
  c.N = N, c.h = h, c.nope = nope, c.rope = rope, c.vd = vd, c.kvl = kvl, c.R = R, c.C = C;
  c.slots = R * C + 3;
  c.scale = static_cast<float>(1.0 / std::sqrt(double(nope + rope)));
  c.q = random_bf16(rng, static_cast<size_t>(N * h * (nope + rope)), 1.0);
  c.kv_b = random_bf16(rng, static_cast<size_t>(h * (nope + vd) * kvl), 1.0 / std::sqrt(double(kvl)) * 1.7);
  c.cache = random_bf16(rng, static_cast<size_t>(c.slots * c.D()), 1.0);
  std::vector<int32_t> perm(static_cast<size_t>(c.slots));
  for (int64_t i = 0; i < c.slots; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.r2t.assign(static_cast<size_t>(R * C), 0);
  for (int64_t i = 0; i < R * C; ++i) c.r2t[static_cast<size_t>(i)] = perm[static_cast<size_t>(i)];
  std::vector<int64_t> len(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) len[static_cast<size_t>(r)] = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(C));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = n % R;
    c.row_req.push_back(static_cast<int32_t>(r));
    const int64_t L = len[static_cast<size_t>(r)];
    c.row_pos.push_back(static_cast<int32_t>(last ? L - 1 : static_cast<int64_t>(rng() % static_cast<uint64_t>(L))));
  }
  return c;
}

// q_abs [N, h*(kvl+rope)].
inline std::vector<double> q_absorb_ref(const MlaCase& c) {
  const int64_t qk = c.nope + c.rope;
  std::vector<double> out(static_cast<size_t>(c.N * c.h * c.D()));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t h = 0; h < c.h; ++h) {
      double* o = out.data() + (n * c.h + h) * c.D();
      for (int64_t k = 0; k < c.kvl; ++k) {
        double acc = 0;
        for (int64_t i = 0; i < c.nope; ++i)
          acc += bf16_value(c.q[static_cast<size_t>(n * c.h * qk + h * qk + i)]) *
                 bf16_value(c.kv_b[static_cast<size_t>((h * (c.nope + c.vd) + i) * c.kvl + k)]);
        o[k] = acc;
      }
      for (int64_t j = 0; j < c.rope; ++j) o[c.kvl + j] = bf16_value(c.q[static_cast<size_t>(n * c.h * qk + h * qk + c.nope + j)]);
    }
  return out;
}

// out [N, h*kvl] from q_abs (bf16 bits, as the op read them).
inline std::vector<double> paged_attention_ref(const MlaCase& c, const std::vector<uint16_t>& q_abs) {
  std::vector<double> out(static_cast<size_t>(c.N * c.h * c.kvl), 0.0);
  const int64_t D = c.D();
  for (int64_t n = 0; n < c.N; ++n) {
    const int64_t r = c.row_req[static_cast<size_t>(n)], p = c.row_pos[static_cast<size_t>(n)];
    for (int64_t h = 0; h < c.h; ++h) {
      std::vector<double> s(static_cast<size_t>(p + 1));
      double m = -INFINITY;
      for (int64_t j = 0; j <= p; ++j) {
        const int64_t slot = c.r2t[static_cast<size_t>(r * c.C + j)];
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += bf16_value(q_abs[static_cast<size_t>((n * c.h + h) * D + d)]) * bf16_value(c.cache[static_cast<size_t>(slot * D + d)]);
        s[static_cast<size_t>(j)] = double(c.scale) * dot;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      for (int64_t j = 0; j <= p; ++j) {
        const int64_t slot = c.r2t[static_cast<size_t>(r * c.C + j)];
        for (int64_t k = 0; k < c.kvl; ++k)
          out[static_cast<size_t>((n * c.h + h) * c.kvl + k)] += s[static_cast<size_t>(j)] / sum * bf16_value(c.cache[static_cast<size_t>(slot * D + k)]);
      }
    }
  }
  return out;
}

// out [N, h*vd] from lat (bf16 bits).
inline std::vector<double> v_up_ref(const MlaCase& c, const std::vector<uint16_t>& lat) {
  std::vector<double> out(static_cast<size_t>(c.N * c.h * c.vd));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t j = 0; j < c.vd; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < c.kvl; ++k)
          acc += bf16_value(lat[static_cast<size_t>((n * c.h + h) * c.kvl + k)]) *
                 bf16_value(c.kv_b[static_cast<size_t>((h * (c.nope + c.vd) + c.nope + j) * c.kvl + k)]);
        out[static_cast<size_t>((n * c.h + h) * c.vd + j)] = acc;
      }
  return out;
}

// The three ops of the absorbed decode on a backend: q_abs, the attention's latent and the output
// (bf16 bits each).
struct AbsorbedOut {
  std::vector<uint16_t> q_abs, lat, out;
  bool ok = false;
};
// split: the attention gets a workspace (Backend::mla_paged_attention_workspace_bytes), so it runs
// the split form where the shapes split (kernels/common/mla_split.h).
inline AbsorbedOut run_absorbed(Backend& b, const MlaCase& c, bool split = false) {
  AbsorbedOut r;
  Tensor q = upload(b, DType::kBF16, c.N, c.h * (c.nope + c.rope), c.q);
  Tensor kv_b = upload(b, DType::kBF16, c.h * (c.nope + c.vd), c.kvl, c.kv_b);
  Tensor cache = upload(b, DType::kBF16, c.slots, c.D(), c.cache);
  Tensor r2t = upload(b, DType::kI32, c.R, c.C, c.r2t);
  Tensor rows = upload(b, DType::kI32, 1, c.N, c.row_req), pos = upload(b, DType::kI32, 1, c.N, c.row_pos);
  Tensor q_abs = empty(b, DType::kBF16, c.N, c.h * c.D()), lat = empty(b, DType::kBF16, c.N, c.h * c.kvl),
         out = empty(b, DType::kBF16, c.N, c.h * c.vd);
  if (!b.mla_q_absorb(q, kv_b, c.h, c.nope, c.rope, c.vd, q_abs).is_ok()) return r;
  Tensor ws;
  if (const size_t bytes = b.mla_paged_attention_workspace_bytes(c.N, c.h, c.D(), c.kvl); split && bytes > 0) {
    ws = empty(b, DType::kF32, 1, static_cast<int64_t>(bytes / 4));
    if (!fill_bytes(b, ws, 0xFF)) return r;  // NaN garbage: every value read must have been written
  }
  if (!b.mla_paged_attention(q_abs, cache, r2t, rows, pos, c.h, c.scale, lat, ws).is_ok()) return r;
  if (!b.mla_v_up(lat, kv_b, c.h, c.nope, c.vd, out).is_ok()) return r;
  r.q_abs = download<uint16_t>(b, q_abs);
  r.lat = download<uint16_t>(b, lat);
  r.out = download<uint16_t>(b, out);
  r.ok = true;
  return r;
}

}  // namespace moeprof::testref
