// CpuBackend MoE ops: router top-k, NVFP4 quantization, expert permutation, the FP4 expert
// GEMMs (gemm1 with fused SiLU-and-mul and FP4 re-quantization, gemm2) and the weighted combine.
// docs/nvfp4.md describes the number format and the rounding rules implemented here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/fp_formats.h"
#include "executor/cpu_backend.h"

namespace moeprof {

using cpu_detail::row_ptr;
using cpu_detail::vec_index;

namespace {

inline float bf(uint16_t h) { return kern::bf16_to_f32(h); }

// NVFP4-quantizes n values (n % 16 == 0) with global scale gs into n/2 code bytes and n/16
// e4m3 block scales: s = e4m3(amax / (6 gs)), q = e2m1(x / (s_f32 * gs)), each a single fp32
// division by an fp32 product. A block whose scale is 0 (all zeros, or an amax so small that the
// scale underflows e4m3) gets codes 0: the division by 0 would otherwise produce inf/NaN codes.
void quantize_nvfp4_row(const float* x, int64_t n, float gs, uint8_t* codes, uint8_t* scales) {
  const float six_gs = 6.0f * gs;
  for (int64_t b = 0; b < n / 16; ++b) {
    const float* xb = x + 16 * b;
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const uint8_t s = kern::f32_to_e4m3(amax / six_gs);
    scales[b] = s;
    const float sf = kern::e4m3_to_f32(s);
    uint8_t* cb = codes + 8 * b;
    if (sf == 0.0f) {
      std::memset(cb, 0, 8);
      continue;
    }
    const float denom = sf * gs;
    for (int i = 0; i < 8; ++i)
      cb[i] = kern::pack_e2m1(kern::f32_to_e2m1(xb[2 * i] / denom), kern::f32_to_e2m1(xb[2 * i + 1] / denom));
  }
}

// Decoded e2m1 and e4m3 values, indexed by code (the same functions, tabulated for speed).
struct DecodeTables {
  float e2m1[16];
  float e4m3[256];
  DecodeTables() {
    for (int c = 0; c < 16; ++c) e2m1[c] = kern::e2m1_to_f32(static_cast<uint8_t>(c));
    for (int c = 0; c < 256; ++c) e4m3[c] = kern::e4m3_to_f32(static_cast<uint8_t>(c));
  }
};
const DecodeTables& tables() {
  static const DecodeTables t;
  return t;
}

// v[i] = e2m1(code_i) * e4m3(scale_{i/16}) for n values (each product is exact in fp32).
void dequantize_nvfp4_row(const uint8_t* codes, const uint8_t* scales, int64_t n, float* v) {
  const DecodeTables& tb = tables();
  for (int64_t b = 0; b < n / 16; ++b) {
    const float s = tb.e4m3[scales[b]];
    float block[16];  // the 16 possible values of this block
    for (int c = 0; c < 16; ++c) block[c] = tb.e2m1[c] * s;
    for (int i = 0; i < 8; ++i) {
      const uint8_t byte = codes[8 * b + i];
      v[16 * b + 2 * i] = block[byte & 0xF];
      v[16 * b + 2 * i + 1] = block[byte >> 4];
    }
  }
}

// Selects the `k` largest crit[e] among allowed experts: ties to the lower index, returned in
// descending order of crit.
void top_k(const std::vector<float>& crit, const std::vector<char>& allowed, int k, std::vector<int>& picked) {
  picked.clear();
  std::vector<char> taken(crit.size(), 0);
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (size_t e = 0; e < crit.size(); ++e) {
      if (!allowed[e] || taken[e]) continue;
      if (best < 0 || crit[e] > crit[static_cast<size_t>(best)]) best = static_cast<int>(e);
    }
    if (best < 0) return;
    taken[static_cast<size_t>(best)] = 1;
    picked.push_back(best);
  }
}

// Reads offsets[0..E] and checks they describe E padded expert ranges inside P rows (values:
// checked here, where they are read on the host; the contract has checked the shape).
Status read_offsets(const Tensor& offsets, int64_t P, const char* op, std::vector<int64_t>& off) {
  const int64_t n = offsets.numel();
  off.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) off[static_cast<size_t>(i)] = offsets.data<int32_t>()[vec_index(offsets, i)];
  for (int64_t i = 0; i + 1 < n; ++i)
    if (off[static_cast<size_t>(i)] > off[static_cast<size_t>(i + 1)])
      return Status::bad_input(std::string(op) + ": offsets must be non-decreasing (got offsets[" + std::to_string(i) +
                               "] = " + std::to_string(off[static_cast<size_t>(i)]) + " > offsets[" +
                               std::to_string(i + 1) + "] = " + std::to_string(off[static_cast<size_t>(i + 1)]) + ")");
  if (off[0] != 0 || off.back() > P)
    return Status::bad_input(std::string(op) + ": offsets must start at 0 and end within the " + std::to_string(P) +
                             " rows (got " + std::to_string(off[0]) + " .. " + std::to_string(off.back()) + ")");
  return Status::ok();
}

// The valid rows of expert e: (row r, token permuted_to_token[r]) with token >= 0.
struct ExpertRows {
  std::vector<int64_t> rows;
  std::vector<int64_t> tokens;
};

Status collect_rows(const std::vector<int64_t>& off, const Tensor& p2t, int64_t num_tokens, const char* op,
                    std::vector<ExpertRows>& out) {
  const size_t E = off.size() - 1;
  out.assign(E, {});
  for (size_t e = 0; e < E; ++e)
    for (int64_t r = off[e]; r < off[e + 1]; ++r) {
      const int64_t t = p2t.data<int32_t>()[vec_index(p2t, r)];
      if (t < 0) continue;
      if (t >= num_tokens)
        return Status::bad_input(std::string(op) + ": permuted_to_token[" + std::to_string(r) +
                                 "] must be -1 or a token index below " + std::to_string(num_tokens) + " (got " +
                                 std::to_string(t) + ")");
      out[e].rows.push_back(r);
      out[e].tokens.push_back(t);
    }
  return Status::ok();
}

}  // namespace

// ---- router ----------------------------------------------------------------------------------

Status CpuBackend::do_router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                               Tensor& topk_weights) {
  const int64_t T = logits.rows(), E = logits.cols();
  const int k = p.top_k;
  const bool grouped = p.method != TopkMethod::kGreedy;
  const int64_t groups = grouped ? p.n_group : 1;
  const int64_t group_size = E / groups;

  std::vector<float> score(static_cast<size_t>(E)), crit(static_cast<size_t>(E)), gscore(static_cast<size_t>(groups));
  std::vector<char> allowed(static_cast<size_t>(E)), all_groups(static_cast<size_t>(groups), 1);
  std::vector<int> picked, kept_groups, top2;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = row_ptr<float>(logits, t);
    if (p.scoring == ScoringFunc::kSoftmax) {
      float m = -INFINITY;
      for (int64_t e = 0; e < E; ++e) m = std::max(m, l[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < E; ++e) {
        score[static_cast<size_t>(e)] = std::exp(l[e] - m);
        sum += score[static_cast<size_t>(e)];
      }
      for (auto& s : score) s = s / sum;
    } else {
      for (int64_t e = 0; e < E; ++e) score[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-l[e]));
    }
    for (int64_t e = 0; e < E; ++e)
      crit[static_cast<size_t>(e)] = p.method == TopkMethod::kNoauxTc
                                         ? score[static_cast<size_t>(e)] + bias.data<float>()[vec_index(bias, e)]
                                         : score[static_cast<size_t>(e)];
    std::fill(allowed.begin(), allowed.end(), 1);
    if (grouped) {
      for (int64_t g = 0; g < groups; ++g) {
        const std::vector<float> members(crit.begin() + g * group_size, crit.begin() + (g + 1) * group_size);
        if (p.method == TopkMethod::kGroupLimitedGreedy) {
          gscore[static_cast<size_t>(g)] = *std::max_element(members.begin(), members.end());
        } else {  // noaux_tc: sum of the two best biased scores of the group
          top_k(members, std::vector<char>(members.size(), 1), std::min<int>(2, static_cast<int>(group_size)), top2);
          float s = 0.0f;
          for (int m : top2) s += members[static_cast<size_t>(m)];
          gscore[static_cast<size_t>(g)] = s;
        }
      }
      top_k(gscore, all_groups, p.topk_group, kept_groups);
      std::fill(allowed.begin(), allowed.end(), 0);
      for (int g : kept_groups)
        std::fill(allowed.begin() + g * group_size, allowed.begin() + (g + 1) * group_size, 1);
    }
    top_k(crit, allowed, k, picked);
    int32_t* ids = row_ptr<int32_t>(topk_ids, t);
    float* w = row_ptr<float>(topk_weights, t);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      ids[j] = picked[static_cast<size_t>(j)];
      w[j] = score[static_cast<size_t>(picked[static_cast<size_t>(j)])];
      sum += w[j];
    }
    for (int j = 0; j < k; ++j) {
      if (p.norm_topk_prob) w[j] = w[j] / sum;
      w[j] = w[j] * p.routed_scaling_factor;
    }
  }
  return Status::ok();
}

// ---- NVFP4 quantization --------------------------------------------------------------------

Status CpuBackend::do_fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales) {
  const int64_t K = x.cols();
  cpu_detail::parallel_for(x.rows(), x.rows() * K >= (1 << 18) ? num_threads() : 1, [&](int64_t t) {
    std::vector<float> v(static_cast<size_t>(K));
    const uint16_t* xr = row_ptr<uint16_t>(x, t);
    for (int64_t i = 0; i < K; ++i) v[static_cast<size_t>(i)] = bf(xr[i]);
    quantize_nvfp4_row(v.data(), K, global_scale, row_ptr<uint8_t>(out, t), row_ptr<uint8_t>(scales, t));
  });
  return Status::ok();
}

// ---- permutation -----------------------------------------------------------------------------

Status CpuBackend::do_moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile, Tensor& offsets,
                               Tensor& permuted_to_token, Tensor& expanded_to_permuted, const Tensor& /*workspace*/) {
  const int64_t T = topk_ids.rows(), k = topk_ids.cols(), E = num_experts;
  const int64_t P = permuted_to_token.numel();

  std::vector<int64_t> ids(static_cast<size_t>(T * k)), count(static_cast<size_t>(E), 0);
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t e = topk_ids.data<int32_t>()[vec_index(topk_ids, i)];
    if (e < 0 || e >= E)  // data: checked here (the CUDA kernel maps such ids to no row, e2p = -1)
      return Status::bad_input("moe_permute: topk_ids[" + std::to_string(i) + "] must be an expert id in [0, " +
                               std::to_string(E) + ") (got " + std::to_string(e) + ")");
    ids[static_cast<size_t>(i)] = e;
    ++count[static_cast<size_t>(e)];
  }
  std::vector<int64_t> off(static_cast<size_t>(E + 1), 0);
  for (int64_t e = 0; e < E; ++e)
    off[static_cast<size_t>(e + 1)] = off[static_cast<size_t>(e)] + (count[static_cast<size_t>(e)] + tile - 1) / tile * tile;
  // With the bound, off.back() <= T*k + E*(tile-1) <= P (the contract checked P); a P sized by the
  // routed counts must hold this routing's rows.
  if (off.back() > P)
    return Status::bad_input("moe_permute: permuted_to_token must hold this routing's " + std::to_string(off.back()) +
                             " padded rows (got " + std::to_string(P) + ")");
  for (int64_t e = 0; e <= E; ++e) offsets.data<int32_t>()[vec_index(offsets, e)] = static_cast<int32_t>(off[static_cast<size_t>(e)]);
  for (int64_t r = 0; r < P; ++r) permuted_to_token.data<int32_t>()[vec_index(permuted_to_token, r)] = -1;
  std::vector<int64_t> cursor(off.begin(), off.end() - 1);
  for (int64_t i = 0; i < T * k; ++i) {  // increasing flat index: stable within each expert
    const int64_t r = cursor[static_cast<size_t>(ids[static_cast<size_t>(i)])]++;
    permuted_to_token.data<int32_t>()[vec_index(permuted_to_token, r)] = static_cast<int32_t>(i / k);
    expanded_to_permuted.data<int32_t>()[vec_index(expanded_to_permuted, i)] = static_cast<int32_t>(r);
  }
  return Status::ok();
}

// ---- FP4 expert GEMMs ------------------------------------------------------------------------

Status CpuBackend::do_moe_gemm1_fp4(const Tensor& a, const Tensor& a_scales, float a_gs, const Tensor& w13,
                                 const Tensor& w13_scales, const Tensor& w13_gs, const Tensor& offsets,
                                 const Tensor& permuted_to_token, float out_gs, Tensor& out, Tensor& out_scales) {
  const char* op = "moe_gemm1_fp4";
  const int64_t T = a.rows(), H = 2 * a.cols(), P = out.rows(), I = 2 * out.cols(), E = offsets.numel() - 1;
  std::vector<int64_t> off;
  MOEPROF_RETURN_IF_ERROR(read_offsets(offsets, P, op, off));
  std::vector<ExpertRows> experts;
  MOEPROF_RETURN_IF_ERROR(collect_rows(off, permuted_to_token, T, op, experts));

  // Every row first gets codes 0 and scales 0; the valid rows are overwritten below.
  for (int64_t r = 0; r < P; ++r) {
    std::memset(row_ptr<uint8_t>(out, r), 0, static_cast<size_t>(I / 2));
    std::memset(row_ptr<uint8_t>(out_scales, r), 0, static_cast<size_t>(I / 16));
  }
  cpu_detail::parallel_for(E, num_threads(), [&](int64_t e) {
    const ExpertRows& ex = experts[static_cast<size_t>(e)];
    const int64_t R = static_cast<int64_t>(ex.rows.size());
    if (R == 0) return;
    const auto act = cpu_detail::pack_rows(R, H, [&](int64_t j, float* dst) {
      const int64_t t = ex.tokens[static_cast<size_t>(j)];
      dequantize_nvfp4_row(row_ptr<uint8_t>(a, t), row_ptr<uint8_t>(a_scales, t), H, dst);
    });
    std::vector<float> acc(static_cast<size_t>(R * 2 * I));
    cpu_detail::gemm_packed(
        act, 0, 2 * I,
        [&](int64_t n, float* dst) {
          dequantize_nvfp4_row(row_ptr<uint8_t>(w13, e * 2 * I + n), row_ptr<uint8_t>(w13_scales, e * 2 * I + n), H, dst);
        },
        [&](int64_t j, int64_t n, float v) { acc[static_cast<size_t>(j * 2 * I + n)] = v; });
    const float gs = a_gs * w13_gs.data<float>()[vec_index(w13_gs, e)];
    std::vector<float> h(static_cast<size_t>(I));
    for (int64_t j = 0; j < R; ++j) {
      const float* aj = acc.data() + j * 2 * I;
      for (int64_t n = 0; n < I; ++n) {
        const float gate = aj[n] * gs, up = aj[I + n] * gs;
        h[static_cast<size_t>(n)] = kern::round_bf16(gate / (1.0f + std::exp(-gate)) * up);
      }
      const int64_t r = ex.rows[static_cast<size_t>(j)];
      quantize_nvfp4_row(h.data(), I, out_gs, row_ptr<uint8_t>(out, r), row_ptr<uint8_t>(out_scales, r));
    }
  });
  return Status::ok();
}

Status CpuBackend::do_moe_gemm2_fp4(const Tensor& h, const Tensor& h_scales, float h_gs, const Tensor& w2,
                                 const Tensor& w2_scales, const Tensor& w2_gs, const Tensor& offsets,
                                 const Tensor& permuted_to_token, Tensor& out) {
  const char* op = "moe_gemm2_fp4";
  const int64_t P = h.rows(), I = 2 * h.cols(), H = out.cols(), E = offsets.numel() - 1;
  std::vector<int64_t> off;
  MOEPROF_RETURN_IF_ERROR(read_offsets(offsets, P, op, off));
  std::vector<ExpertRows> experts;
  // gemm2 reads h by permuted row; the token index only marks validity (any value >= 0).
  MOEPROF_RETURN_IF_ERROR(collect_rows(off, permuted_to_token, INT32_MAX, op, experts));

  for (int64_t r = 0; r < P; ++r) std::fill(row_ptr<uint16_t>(out, r), row_ptr<uint16_t>(out, r) + H, uint16_t{0});
  cpu_detail::parallel_for(E, num_threads(), [&](int64_t e) {
    const ExpertRows& ex = experts[static_cast<size_t>(e)];
    const int64_t R = static_cast<int64_t>(ex.rows.size());
    if (R == 0) return;
    const auto act = cpu_detail::pack_rows(R, I, [&](int64_t j, float* dst) {
      const int64_t r = ex.rows[static_cast<size_t>(j)];
      dequantize_nvfp4_row(row_ptr<uint8_t>(h, r), row_ptr<uint8_t>(h_scales, r), I, dst);
    });
    const float gs = h_gs * w2_gs.data<float>()[vec_index(w2_gs, e)];
    cpu_detail::gemm_packed(
        act, 0, H,
        [&](int64_t n, float* dst) {
          dequantize_nvfp4_row(row_ptr<uint8_t>(w2, e * H + n), row_ptr<uint8_t>(w2_scales, e * H + n), I, dst);
        },
        [&](int64_t j, int64_t n, float v) {
          row_ptr<uint16_t>(out, ex.rows[static_cast<size_t>(j)])[n] = kern::f32_to_bf16(v * gs);
        });
  });
  return Status::ok();
}

// ---- combine ---------------------------------------------------------------------------------

Status CpuBackend::do_moe_combine(const Tensor& gemm2_out, const Tensor& expanded_to_permuted, const Tensor& topk_weights,
                               const Tensor& shared, Tensor& out) {
  const int64_t T = out.rows(), H = out.cols(), k = topk_weights.cols();
  // The rows are data: checked here, where they are read (the CUDA kernel skips rows < 0).
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t r = expanded_to_permuted.data<int32_t>()[vec_index(expanded_to_permuted, i)];
    if (r < 0 || r >= gemm2_out.rows())
      return Status::bad_input("moe_combine: expanded_to_permuted[" + std::to_string(i) + "] must be a row of gemm2_out in [0, " +
                               std::to_string(gemm2_out.rows()) + ") (got " + std::to_string(r) + ")");
  }
  cpu_detail::parallel_for(T, T * H * k >= (1 << 18) ? num_threads() : 1, [&](int64_t t) {
    const float* w = row_ptr<float>(topk_weights, t);
    uint16_t* o = row_ptr<uint16_t>(out, t);
    for (int64_t n = 0; n < H; ++n) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = expanded_to_permuted.data<int32_t>()[vec_index(expanded_to_permuted, t * k + j)];
        const float prod = w[j] * bf(row_ptr<uint16_t>(gemm2_out, r)[n]);  // rounded product, then the add
        acc = acc + prod;
      }
      const float s = shared.defined() ? bf(row_ptr<uint16_t>(shared, t)[n]) : 0.0f;
      o[n] = kern::f32_to_bf16(acc + s);
    }
  });
  return Status::ok();
}

}  // namespace moeprof
