// The op contract of the paged MLA ops of serving (kv_cache_store, mla_q_absorb,
// mla_paged_attention, mla_v_up), in the form of op_contract_cases.h, which appends them.
// Shapes: 4 rows, 2 heads, nope 8, rope 4, v_dim 6, kv_lora 16 (cache rows of 20 columns).
#pragma once

#include <vector>

namespace moeprof::testref {

inline void add_mla_contract_ops(std::vector<ContractOp>& ops) {
  using D = DType;
  constexpr int64_t N = 4, h = 2, nope = 8, rope = 4, vd = 6, kvl = 16, D_ = kvl + rope, S = 10;

  struct Store { Tensor latent, k_pe, cache, slots; };
  ops.push_back(contract_op<Store>(
      "kv_cache_store",
      [](const Mk& m) {
        return Store{m.uniform(D::kBF16, N, kvl, 31), m.uniform(D::kBF16, N, rope, 32), m.t(D::kBF16, S, D_), m.ints(1, N, {3, 0, 9, 5})};
      },
      [](Backend& b, Store& a) { return b.kv_cache_store(a.latent, a.k_pe, a.cache, a.slots); },
      [](Store& a) { return std::vector<Tensor*>{&a.cache}; },
      {{"latent", "kv_cache_store: latent must be defined", [](const Mk&, Store& a) { a.latent = Tensor(); }},
       {"k_pe", "kv_cache_store: k_pe must have latent's 4 rows (got bf16 5x4)", [](const Mk& m, Store& a) { a.k_pe = m.t(D::kBF16, 5, rope); }},
       {"cache", "kv_cache_store: cache must have latent + k_pe = 20 columns (got bf16 10x18)",
        [](const Mk& m, Store& a) { a.cache = m.t(D::kBF16, S, 18); }},
       {"cache", "kv_cache_store: cache must be contiguous (got bf16 10x20 with row stride 24)",
        [](const Mk& m, Store& a) { a.cache = m.view(D::kBF16, S, 24, 0, D_); }},
       {"slots", "kv_cache_store: slots must have 4 elements (got i32 1x3)", [](const Mk& m, Store& a) { a.slots = m.ints(1, 3, {0, 1, 2}); }},
       {"slots", "kv_cache_store: slots must be i32 (got f32 1x4)",
        [](const Mk& m, Store& a) { a.slots = m.floats(1, N, {0, 1, 2, 3}); }}}));

  struct Absorb { Tensor q, kv_b; int64_t heads = h, nope_ = nope, rope_ = rope, v = vd; Tensor q_abs; };
  ops.push_back(contract_op<Absorb>(
      "mla_q_absorb",
      [](const Mk& m) {
        Absorb a;
        a.q = m.uniform(D::kBF16, N, h * (nope + rope), 33);
        a.kv_b = m.uniform(D::kBF16, h * (nope + vd), kvl, 34);
        a.q_abs = m.t(D::kBF16, N, h * D_);
        return a;
      },
      [](Backend& b, Absorb& a) { return b.mla_q_absorb(a.q, a.kv_b, a.heads, a.nope_, a.rope_, a.v, a.q_abs); },
      [](Absorb& a) { return std::vector<Tensor*>{&a.q_abs}; },
      {{"n_heads", "mla_q_absorb: n_heads must be positive (got 0)", [](const Mk&, Absorb& a) { a.heads = 0; }},
       {"rope", "mla_q_absorb: rope must be non-negative (got -1)", [](const Mk&, Absorb& a) { a.rope_ = -1; }},
       {"q", "mla_q_absorb: q must have at least n_heads * (nope + rope) = 24 columns (got bf16 4x20)",
        [](const Mk& m, Absorb& a) { a.q = m.t(D::kBF16, N, 20); }},
       {"kv_b", "mla_q_absorb: kv_b must have n_heads * (nope + v_dim) = 28 rows (got bf16 27x16)",
        [](const Mk& m, Absorb& a) { a.kv_b = m.t(D::kBF16, 27, kvl); }},
       {"q_abs", "mla_q_absorb: q_abs must be bf16 4x40 (got bf16 4x36)", [](const Mk& m, Absorb& a) { a.q_abs = m.t(D::kBF16, N, 36); }}}));

  struct Paged { Tensor q_abs, cache, r2t, row_req, row_pos; int64_t heads = h; Tensor out; };
  ops.push_back(contract_op<Paged>(
      "mla_paged_attention",
      [](const Mk& m) {
        Paged a;
        a.q_abs = m.uniform(D::kBF16, N, h * D_, 35, 0.5f);
        a.cache = m.uniform(D::kBF16, S, D_, 36);
        a.r2t = m.ints(3, 6, {0, 0, 0, 0, 0, 0, 4, 1, 7, 7, 7, 7, 9, 2, 6, 8, 3, 5});
        a.row_req = m.ints(1, N, {1, 2, 1, 0});
        a.row_pos = m.ints(1, N, {0, 3, 2, 5});
        a.out = m.t(D::kBF16, N, h * kvl);
        return a;
      },
      [](Backend& b, Paged& a) { return b.mla_paged_attention(a.q_abs, a.cache, a.r2t, a.row_req, a.row_pos, a.heads, 0.3f, a.out); },
      [](Paged& a) { return std::vector<Tensor*>{&a.out}; },
      {{"n_heads", "mla_paged_attention: n_heads must be positive (got 0)", [](const Mk&, Paged& a) { a.heads = 0; }},
       {"cache", "mla_paged_attention: cache must be contiguous (got bf16 10x20 with row stride 24)",
        [](const Mk& m, Paged& a) { a.cache = m.view(D::kBF16, S, 24, 0, D_); }},
       {"q_abs", "mla_paged_attention: q_abs must have n_heads * cols(cache) = 40 columns (got bf16 4x38)",
        [](const Mk& m, Paged& a) { a.q_abs = m.t(D::kBF16, N, 38); }},
       {"req_to_token", "mla_paged_attention: req_to_token must be i32 (got f32 3x6)",
        [](const Mk& m, Paged& a) { a.r2t = m.t(D::kF32, 3, 6); }},
       {"row_req", "mla_paged_attention: row_req must have 4 elements (got i32 1x3)",
        [](const Mk& m, Paged& a) { a.row_req = m.ints(1, 3, {0, 1, 2}); }},
       {"row_pos", "mla_paged_attention: row_pos must be i32 (got f32 1x4)",
        [](const Mk& m, Paged& a) { a.row_pos = m.floats(1, N, {0, 1, 2, 3}); }},
       {"out", "mla_paged_attention: out must have q_abs's 4 rows and n_heads * kvl columns with 0 < kvl <= cols(cache) = 20 (got bf16 4x42)",
        [](const Mk& m, Paged& a) { a.out = m.t(D::kBF16, N, 42); }}}));

  struct Up { Tensor lat, kv_b; int64_t heads = h, nope_ = nope, v = vd; Tensor out; };
  ops.push_back(contract_op<Up>(
      "mla_v_up",
      [](const Mk& m) {
        Up a;
        a.lat = m.uniform(D::kBF16, N, h * kvl, 37);
        a.kv_b = m.uniform(D::kBF16, h * (nope + vd), kvl, 38);
        a.out = m.t(D::kBF16, N, h * vd);
        return a;
      },
      [](Backend& b, Up& a) { return b.mla_v_up(a.lat, a.kv_b, a.heads, a.nope_, a.v, a.out); },
      [](Up& a) { return std::vector<Tensor*>{&a.out}; },
      {{"v_dim", "mla_v_up: v_dim must be positive (got 0)", [](const Mk&, Up& a) { a.v = 0; }},
       {"kv_b", "mla_v_up: kv_b must have n_heads * (nope + v_dim) = 28 rows (got bf16 26x16)",
        [](const Mk& m, Up& a) { a.kv_b = m.t(D::kBF16, 26, kvl); }},
       {"lat", "mla_v_up: lat must have n_heads * cols(kv_b) = 32 columns (got bf16 4x30)", [](const Mk& m, Up& a) { a.lat = m.t(D::kBF16, N, 30); }},
       {"out", "mla_v_up: out must be bf16 4x12 (got bf16 4x10)", [](const Mk& m, Up& a) { a.out = m.t(D::kBF16, N, 10); }}}));
}

}  // namespace moeprof::testref
