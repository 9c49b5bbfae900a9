// The op contract as data, for any backend: for every Backend op, a builder of valid arguments,
// the call, the tensors it writes, and bad calls that each change exactly one argument of the
// valid call, with the exact one-line message the contract (src/executor/backend_checks.cpp)
// must return. tests/executor/op_contract_test.cpp runs them on the CPU backend;
// tests/gpu/cuda_ops_test.cpp runs them on the CUDA backend and expects the same messages.
//
// Valid arguments are filled through backend ops (init_*, copy_from_host), never by writing
// memory directly, so they work on every backend; outputs start as 0xFF bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/backend.h"
#include "tests/executor/reference.h"

namespace moeprof::testref {

// One op of the contract, type-erased (the argument struct stays inside the closures).
struct ContractOp {
  struct Bad {
    std::string what;     // the changed argument, for test output
    std::string message;  // the exact expected message
  };
  std::string op;
  std::vector<Bad> bad;
  // Builds fresh valid arguments, applies bad mutation `i` (or none for i < 0), snapshots the
  // tensors the op writes into *written_before, calls the op and returns its status;
  // *written_after gets the same tensors' bytes after the call.
  std::function<Status(Backend&, int, std::vector<std::vector<uint8_t>>*, std::vector<std::vector<uint8_t>>*)> run;
};

// Tensor factory on one backend.
struct Mk {
  Backend& b;
  // rows x cols of dtype, every byte 0xFF.
  Tensor t(DType d, int64_t r, int64_t c) const {
    Tensor x = testref::empty(b, d, r, c);
    if (x.defined() && x.bytes() > 0) (void)fill_bytes(b, x, 0xFF);
    return x;
  }
  // Columns [c0, c0 + n) of a fresh rows x cols tensor (a strided view when n < cols).
  Tensor view(DType d, int64_t r, int64_t c, int64_t c0, int64_t n) const { return t(d, r, c).cols_view(c0, n); }
  Tensor uniform(DType d, int64_t r, int64_t c, uint64_t seed, float scale = 1.0f) const {
    Tensor x = t(d, r, c);
    (void)b.init_uniform(x, seed, scale);
    return x;
  }
  Tensor bytes(DType d, int64_t r, int64_t c, uint64_t seed) const {  // fp4x2 / u8 codes
    Tensor x = t(d, r, c);
    (void)b.init_bytes(x, seed);
    return x;
  }
  Tensor scales(int64_t r, int64_t c, uint64_t seed) const {  // e4m3 block scales
    Tensor x = t(DType::kE4M3, r, c);
    (void)b.init_e4m3(x, seed, 0.05f, 1.5f);
    return x;
  }
  Tensor ints(int64_t r, int64_t c, const std::vector<int32_t>& v) const { return upload(b, DType::kI32, r, c, v); }
  Tensor floats(int64_t r, int64_t c, const std::vector<float>& v) const { return upload(b, DType::kF32, r, c, v); }
};

template <typename Args>
ContractOp contract_op(std::string op, std::function<Args(const Mk&)> valid, std::function<Status(Backend&, Args&)> call,
                       std::function<std::vector<Tensor*>(Args&)> writes,
                       std::vector<std::tuple<std::string, std::string, std::function<void(const Mk&, Args&)>>> bad) {
  ContractOp o;
  o.op = std::move(op);
  auto muts = std::make_shared<std::vector<std::function<void(const Mk&, Args&)>>>();
  for (auto& [what, msg, fn] : bad) {
    o.bad.push_back({what, msg});
    muts->push_back(fn);
  }
  o.run = [valid, call, writes, muts](Backend& b, int i, std::vector<std::vector<uint8_t>>* before,
                                      std::vector<std::vector<uint8_t>>* after) {
    const Mk mk{b};
    Args a = valid(mk);
    if (i >= 0) (*muts)[static_cast<size_t>(i)](mk, a);
    std::vector<Tensor*> outs;
    for (Tensor* t : writes(a))
      if (t->defined()) outs.push_back(t);
    before->clear();
    after->clear();
    for (Tensor* t : outs) before->push_back(bytes_of(b, *t));
    Status st = call(b, a);
    (void)b.synchronize();
    for (Tensor* t : outs) after->push_back(bytes_of(b, *t));
    return st;
  };
  return o;
}

// Sizes shared by the cases: T tokens, H hidden, E experts, k per token, I intermediate.
inline constexpr int64_t kT = 4, kH = 32, kE = 2, kK = 2, kI = 16;

}  // namespace moeprof::testref
#include "tests/executor/op_contract_mla_cases.h"
namespace moeprof::testref {

inline std::vector<ContractOp> contract_ops() {
  using D = DType;
  std::vector<ContractOp> ops;

  // ---- init -------------------------------------------------------------------------------------
  struct One { Tensor t; };
  auto one = [](D d) { return std::function<One(const Mk&)>([d](const Mk& m) { return One{m.t(d, 2, 3)}; }); };
  auto writes_t = [](One& a) { return std::vector<Tensor*>{&a.t}; };
  ops.push_back(contract_op<One>(
      "init_uniform", one(D::kBF16), [](Backend& b, One& a) { return b.init_uniform(a.t, 1, 0.5f); }, writes_t,
      {{"t", "init_uniform: t must be defined", [](const Mk&, One& a) { a.t = Tensor(); }},
       {"t", "init_uniform: t must be bf16 or f32 (got i32 2x3)", [](const Mk& m, One& a) { a.t = m.t(D::kI32, 2, 3); }}}));
  ops.push_back(contract_op<One>(
      "init_e4m3", one(D::kE4M3), [](Backend& b, One& a) { return b.init_e4m3(a.t, 1, 0.1f, 2.0f); }, writes_t,
      {{"t", "init_e4m3: t must be e4m3 (got u8 2x3)", [](const Mk& m, One& a) { a.t = m.t(D::kU8, 2, 3); }}}));
  ops.push_back(contract_op<One>(
      "init_bytes", one(D::kFP4x2), [](Backend& b, One& a) { return b.init_bytes(a.t, 1); }, writes_t,
      {{"t", "init_bytes: t must be u8 or fp4x2 (got e4m3 2x3)", [](const Mk& m, One& a) { a.t = m.t(D::kE4M3, 2, 3); }}}));
  struct W13 { Tensor w, s; int64_t e = kE; };
  ops.push_back(contract_op<W13>(
      "init_moe_w13",
      [](const Mk& m) { return W13{m.t(D::kFP4x2, kE * 2 * kI, kH / 2), m.t(D::kE4M3, kE * 2 * kI, kH / 16)}; },
      [](Backend& b, W13& a) { return b.init_moe_w13(a.w, a.s, a.e, 3, 4, 16.0f, 64.0f); },
      [](W13& a) { return std::vector<Tensor*>{&a.w, &a.s}; },
      {{"num_experts", "init_moe_w13: num_experts must be >= 1 (got 0)", [](const Mk&, W13& a) { a.e = 0; }},
       {"w13", "init_moe_w13: w13 must be fp4x2 (got e4m3 64x16)",
        [](const Mk& m, W13& a) { a.w = m.t(D::kE4M3, kE * 2 * kI, kH / 2); }},
       {"w13", "init_moe_w13: w13 must have E*2I rows for E = 2 (got fp4x2 62x16)",
        [](const Mk& m, W13& a) { a.w = m.t(D::kFP4x2, kE * 2 * kI - 2, kH / 2); }},
       {"w13", "init_moe_w13: w13 must be contiguous (got fp4x2 64x16 with row stride 24)",
        [](const Mk& m, W13& a) { a.w = m.view(D::kFP4x2, kE * 2 * kI, kH / 2 + 8, 0, kH / 2); }},
       {"w13_scales", "init_moe_w13: w13_scales must be e4m3 64x2 (got e4m3 64x3)",
        [](const Mk& m, W13& a) { a.s = m.t(D::kE4M3, kE * 2 * kI, 3); }}}));
  ops.push_back(contract_op<W13>(
      "init_moe_w2",
      [](const Mk& m) { return W13{m.t(D::kFP4x2, kE * kH, kI / 2), m.t(D::kE4M3, kE * kH, kI / 16)}; },
      [](Backend& b, W13& a) { return b.init_moe_w2(a.w, a.s, a.e, 3, 4, 16.0f, 64.0f); },
      [](W13& a) { return std::vector<Tensor*>{&a.w, &a.s}; },
      {{"num_experts", "init_moe_w2: num_experts must be >= 1 (got -1)", [](const Mk&, W13& a) { a.e = -1; }},
       {"w2", "init_moe_w2: w2 must be fp4x2 (got u8 64x8)", [](const Mk& m, W13& a) { a.w = m.t(D::kU8, kE * kH, kI / 2); }},
       {"w2", "init_moe_w2: w2 must have E*H rows for E = 2 (got fp4x2 63x8)",
        [](const Mk& m, W13& a) { a.w = m.t(D::kFP4x2, kE * kH - 1, kI / 2); }},
       {"w2", "init_moe_w2: w2 must be contiguous (got fp4x2 64x8 with row stride 16)",
        [](const Mk& m, W13& a) { a.w = m.view(D::kFP4x2, kE * kH, kI / 2 + 8, 0, kI / 2); }},
       {"w2_scales", "init_moe_w2: w2_scales must be e4m3 64x1 (got e4m3 32x1)",
        [](const Mk& m, W13& a) { a.s = m.t(D::kE4M3, kE * kH / 2, 1); }}}));
  struct Ints { Tensor t; int32_t lo = -5, hi = 17; };
  ops.push_back(contract_op<Ints>(
      "init_ints", [](const Mk& m) { return Ints{m.t(D::kI32, 2, 3)}; },
      [](Backend& b, Ints& a) { return b.init_ints(a.t, 1, a.lo, a.hi); }, [](Ints& a) { return std::vector<Tensor*>{&a.t}; },
      {{"t", "init_ints: t must be i32 (got f32 2x3)", [](const Mk& m, Ints& a) { a.t = m.t(D::kF32, 2, 3); }},
       {"hi", "init_ints: hi must be greater than lo (got [-5, -5))", [](const Mk&, Ints& a) { a.hi = -5; }}}));
  ops.push_back(contract_op<One>(
      "iota", one(D::kI32), [](Backend& b, One& a) { return b.iota(a.t, 7); }, writes_t,
      {{"t", "iota: t must be i32 (got f32 2x3)", [](const Mk& m, One& a) { a.t = m.t(D::kF32, 2, 3); }}}));

  // ---- dense ------------------------------------------------------------------------------------
  struct Emb { Tensor ids, table, out; };
  ops.push_back(contract_op<Emb>(
      "embedding",
      [](const Mk& m) { return Emb{m.ints(1, kT, {3, 12, 0, 9}), m.uniform(D::kBF16, 10, kH, 1), m.t(D::kBF16, kT, kH)}; },
      [](Backend& b, Emb& a) { return b.embedding(a.ids, a.table, 2, a.out); },
      [](Emb& a) { return std::vector<Tensor*>{&a.out}; },
      {{"ids", "embedding: ids must be defined", [](const Mk&, Emb& a) { a.ids = Tensor(); }},
       {"ids", "embedding: ids must be i32 (got f32 1x4)", [](const Mk& m, Emb& a) { a.ids = m.t(D::kF32, 1, kT); }},
       {"ids", "embedding: ids must be contiguous (got i32 2x2 with row stride 4)",
        [](const Mk& m, Emb& a) { a.ids = m.view(D::kI32, 2, 4, 0, 2); }},
       {"table", "embedding: table must be bf16 (got f32 10x32)", [](const Mk& m, Emb& a) { a.table = m.t(D::kF32, 10, kH); }},
       {"out", "embedding: out must be bf16 4x32 (got bf16 4x16)", [](const Mk& m, Emb& a) { a.out = m.t(D::kBF16, kT, 16); }},
       {"out", "embedding: out must be bf16 (got f32 4x32)", [](const Mk& m, Emb& a) { a.out = m.t(D::kF32, kT, kH); }}}));

  struct Norm { Tensor x, w, out; };
  ops.push_back(contract_op<Norm>(
      "rmsnorm",
      [](const Mk& m) { return Norm{m.uniform(D::kBF16, kT, kH, 2), m.uniform(D::kBF16, 1, kH, 3), m.t(D::kBF16, kT, kH)}; },
      [](Backend& b, Norm& a) { return b.rmsnorm(a.x, a.w, 1e-6f, a.out); },
      [](Norm& a) { return std::vector<Tensor*>{&a.out}; },
      {{"x", "rmsnorm: x must be defined", [](const Mk&, Norm& a) { a.x = Tensor(); }},
       {"x", "rmsnorm: x must be bf16 (got f32 4x32)", [](const Mk& m, Norm& a) { a.x = m.t(D::kF32, kT, kH); }},
       {"w", "rmsnorm: w must be bf16 (got f32 1x32)", [](const Mk& m, Norm& a) { a.w = m.t(D::kF32, 1, kH); }},
       {"w", "rmsnorm: w must have 32 elements (got bf16 1x16)", [](const Mk& m, Norm& a) { a.w = m.t(D::kBF16, 1, 16); }},
       {"w", "rmsnorm: w must be contiguous (got bf16 2x16 with row stride 32)",
        [](const Mk& m, Norm& a) { a.w = m.view(D::kBF16, 2, 32, 0, 16); }},
       {"out", "rmsnorm: out must be bf16 4x32 (got bf16 4x31)", [](const Mk& m, Norm& a) { a.out = m.t(D::kBF16, kT, 31); }}}));

  struct Fused { Tensor x, residual, w; };
  ops.push_back(contract_op<Fused>(
      "fused_add_rmsnorm",
      [](const Mk& m) {
        return Fused{m.uniform(D::kBF16, kT, kH, 4), m.uniform(D::kBF16, kT, kH, 5), m.uniform(D::kBF16, 1, kH, 6)};
      },
      [](Backend& b, Fused& a) { return b.fused_add_rmsnorm(a.x, a.residual, a.w, 1e-6f); },
      [](Fused& a) { return std::vector<Tensor*>{&a.x, &a.residual}; },
      {{"residual", "fused_add_rmsnorm: residual must be bf16 4x32 (got bf16 3x32)",
        [](const Mk& m, Fused& a) { a.residual = m.t(D::kBF16, 3, kH); }},
       {"w", "fused_add_rmsnorm: w must be defined", [](const Mk&, Fused& a) { a.w = Tensor(); }},
       {"w", "fused_add_rmsnorm: w must be contiguous (got bf16 2x16 with row stride 32)",
        [](const Mk& m, Fused& a) { a.w = m.view(D::kBF16, 2, 32, 0, 16); }}}));

  struct AddNorm { Tensor x, residual, w, out; };
  ops.push_back(contract_op<AddNorm>(
      "add_rmsnorm",
      [](const Mk& m) {
        return AddNorm{m.uniform(D::kBF16, kT, kH, 41), m.uniform(D::kBF16, kT, kH, 42), m.uniform(D::kBF16, 1, kH, 43),
                       m.t(D::kBF16, kT, kH)};
      },
      [](Backend& b, AddNorm& a) { return b.add_rmsnorm(a.x, a.residual, a.w, 1e-6f, a.out); },
      [](AddNorm& a) { return std::vector<Tensor*>{&a.residual, &a.out}; },
      {{"x", "add_rmsnorm: x must be bf16 (got f32 4x32)", [](const Mk& m, AddNorm& a) { a.x = m.t(D::kF32, kT, kH); }},
       {"residual", "add_rmsnorm: residual must be bf16 4x32 (got bf16 4x31)",
        [](const Mk& m, AddNorm& a) { a.residual = m.t(D::kBF16, kT, 31); }},
       {"w", "add_rmsnorm: w must have 32 elements (got bf16 1x16)", [](const Mk& m, AddNorm& a) { a.w = m.t(D::kBF16, 1, 16); }},
       {"out", "add_rmsnorm: out must be bf16 (got f32 4x32)", [](const Mk& m, AddNorm& a) { a.out = m.t(D::kF32, kT, kH); }}}));

  struct Lin { Tensor x, w, out, ws; };
  ops.push_back(contract_op<Lin>(
      "linear",
      [](const Mk& m) {
        Lin a{m.uniform(D::kBF16, kT, kH, 7), m.uniform(D::kBF16, 8, kH, 8), m.t(D::kF32, kT, 8), Tensor()};
        if (size_t n = m.b.linear_workspace_bytes(kT, 8, kH)) a.ws = m.t(D::kU8, 1, static_cast<int64_t>(n));
        return a;
      },
      [](Backend& b, Lin& a) { return b.linear(a.x, a.w, a.out, a.ws); }, [](Lin& a) { return std::vector<Tensor*>{&a.out}; },
      {{"x", "linear: x must be bf16 (got f32 4x32)", [](const Mk& m, Lin& a) { a.x = m.t(D::kF32, kT, kH); }},
       {"w", "linear: w must be defined", [](const Mk&, Lin& a) { a.w = Tensor(); }},
       {"w", "linear: w must have K = 32 columns, like x (got bf16 8x16)", [](const Mk& m, Lin& a) { a.w = m.t(D::kBF16, 8, 16); }},
       {"out", "linear: out must be bf16 or f32 (got i32 4x8)", [](const Mk& m, Lin& a) { a.out = m.t(D::kI32, kT, 8); }},
       {"out", "linear: out must be 4x8 (got f32 4x9)", [](const Mk& m, Lin& a) { a.out = m.t(D::kF32, kT, 9); }}}));

  // Two heads of 24 columns, rotary on [8, 24) of each; 16 positions.
  struct Rope { Tensor x; int64_t n_heads = 2, head_stride = 24, rot_offset = 8, rot_dim = 16; Tensor positions, cos_sin; };
  ops.push_back(contract_op<Rope>(
      "rope",
      [](const Mk& m) {
        Rope a;
        a.x = m.uniform(D::kBF16, kT, 48, 9);
        a.positions = m.ints(1, kT, {0, 15, 3, 7});
        a.cos_sin = m.uniform(D::kF32, 16, 16, 10);
        return a;
      },
      [](Backend& b, Rope& a) { return b.rope(a.x, a.n_heads, a.head_stride, a.rot_offset, a.rot_dim, a.positions, a.cos_sin); },
      [](Rope& a) { return std::vector<Tensor*>{&a.x}; },
      {{"x", "rope: x must be bf16 (got f32 4x48)", [](const Mk& m, Rope& a) { a.x = m.t(D::kF32, kT, 48); }},
       {"n_heads", "rope: n_heads must be positive (got 0)", [](const Mk&, Rope& a) { a.n_heads = 0; }},
       {"rot_dim", "rope: rot_dim must be positive and even (got 15)", [](const Mk&, Rope& a) { a.rot_dim = 15; }},
       {"rot_offset", "rope: rot_offset must be non-negative (got -1)", [](const Mk&, Rope& a) { a.rot_offset = -1; }},
       {"head_stride",
        "rope: head_stride must be at least rot_offset + rot_dim = 24 (rotary columns of different heads must not "
        "overlap) (got 20)",
        [](const Mk&, Rope& a) { a.head_stride = 20; }},
       {"x", "rope: x must have at least (n_heads - 1) * head_stride + rot_offset + rot_dim = 48 columns (got bf16 4x40)",
        [](const Mk& m, Rope& a) { a.x = m.t(D::kBF16, kT, 40); }},
       {"positions", "rope: positions must have 4 elements (got i32 1x3)",
        [](const Mk& m, Rope& a) { a.positions = m.t(D::kI32, 1, 3); }},
       {"positions", "rope: positions must be contiguous (got i32 4x1 with row stride 2)",
        [](const Mk& m, Rope& a) { a.positions = m.view(D::kI32, kT, 2, 0, 1); }},
       {"cos_sin", "rope: cos_sin must be f32 (got bf16 16x16)", [](const Mk& m, Rope& a) { a.cos_sin = m.t(D::kBF16, 16, 16); }},
       {"cos_sin", "rope: cos_sin must have rot_dim = 16 columns (got f32 16x8)",
        [](const Mk& m, Rope& a) { a.cos_sin = m.t(D::kF32, 16, 8); }}}));

  // Two heads: k[t, h] = kv[t, 24h : +16] ++ k_pe[t, :8].
  struct BuildK { Tensor kv; int64_t n_heads = 2, stride = 24, nope = 16; Tensor k_pe, k; };
  ops.push_back(contract_op<BuildK>(
      "mla_build_k",
      [](const Mk& m) {
        BuildK a;
        a.kv = m.uniform(D::kBF16, kT, 48, 11);
        a.k_pe = m.uniform(D::kBF16, kT, 8, 12);
        a.k = m.t(D::kBF16, kT, 48);
        return a;
      },
      [](Backend& b, BuildK& a) { return b.mla_build_k(a.kv, a.n_heads, a.stride, a.nope, a.k_pe, a.k); },
      [](BuildK& a) { return std::vector<Tensor*>{&a.k}; },
      {{"kv", "mla_build_k: kv must be bf16 (got f32 4x48)", [](const Mk& m, BuildK& a) { a.kv = m.t(D::kF32, kT, 48); }},
       {"n_heads", "mla_build_k: n_heads must be positive (got -1)", [](const Mk&, BuildK& a) { a.n_heads = -1; }},
       {"kv_head_stride", "mla_build_k: kv_head_stride must be non-negative (got -24)",
        [](const Mk&, BuildK& a) { a.stride = -24; }},
       {"nope", "mla_build_k: nope must be non-negative (got -1)", [](const Mk&, BuildK& a) { a.nope = -1; }},
       {"kv", "mla_build_k: kv must have at least (n_heads - 1) * kv_head_stride + nope = 40 columns (got bf16 4x32)",
        [](const Mk& m, BuildK& a) { a.kv = m.t(D::kBF16, kT, 32); }},
       {"k_pe", "mla_build_k: k_pe must have kv's 4 rows (got bf16 3x8)", [](const Mk& m, BuildK& a) { a.k_pe = m.t(D::kBF16, 3, 8); }},
       {"k", "mla_build_k: k must be bf16 4x48 (got bf16 4x46)", [](const Mk& m, BuildK& a) { a.k = m.t(D::kBF16, kT, 46); }}}));

  struct KvWrite { Tensor latent, k_pe, cache; int64_t slot0 = 6; };
  ops.push_back(contract_op<KvWrite>(
      "kv_cache_write",
      [](const Mk& m) {
        return KvWrite{m.uniform(D::kBF16, kT, 16, 13), m.uniform(D::kBF16, kT, 8, 14), m.t(D::kBF16, 10, 24)};
      },
      [](Backend& b, KvWrite& a) { return b.kv_cache_write(a.latent, a.k_pe, a.cache, a.slot0); },
      [](KvWrite& a) { return std::vector<Tensor*>{&a.cache}; },
      {{"latent", "kv_cache_write: latent must be defined", [](const Mk&, KvWrite& a) { a.latent = Tensor(); }},
       {"k_pe", "kv_cache_write: k_pe must have latent's 4 rows (got bf16 5x8)",
        [](const Mk& m, KvWrite& a) { a.k_pe = m.t(D::kBF16, 5, 8); }},
       {"cache", "kv_cache_write: cache must have latent + k_pe = 24 columns (got bf16 10x20)",
        [](const Mk& m, KvWrite& a) { a.cache = m.t(D::kBF16, 10, 20); }},
       {"slot0", "kv_cache_write: slot0 must be in [0, 6] so that 4 rows fit the cache's 10 (got 7)",
        [](const Mk&, KvWrite& a) { a.slot0 = 7; }},
       {"slot0", "kv_cache_write: slot0 must be in [0, 6] so that 4 rows fit the cache's 10 (got -1)",
        [](const Mk&, KvWrite& a) { a.slot0 = -1; }}}));

  // Two heads, qk 16, v 8 at column 16 + 24h of v.
  struct Attn { Tensor q, k, v; int64_t n_heads = 2, qk_dim = 16, v_dim = 8, v_offset = 16, v_stride = 24; Tensor out; };
  ops.push_back(contract_op<Attn>(
      "causal_attention",
      [](const Mk& m) {
        Attn a;
        a.q = m.uniform(D::kBF16, kT, 32, 15);
        a.k = m.uniform(D::kBF16, kT, 32, 16);
        a.v = m.uniform(D::kBF16, kT, 48, 17);
        a.out = m.t(D::kBF16, kT, 16);
        return a;
      },
      [](Backend& b, Attn& a) {
        return b.causal_attention(a.q, a.k, a.v, a.n_heads, a.qk_dim, a.v_dim, a.v_offset, a.v_stride, 0.25f, a.out);
      },
      [](Attn& a) { return std::vector<Tensor*>{&a.out}; },
      {{"q", "causal_attention: q must be bf16 (got f32 4x32)", [](const Mk& m, Attn& a) { a.q = m.t(D::kF32, kT, 32); }},
       {"qk_dim", "causal_attention: qk_dim must be positive (got 0)", [](const Mk&, Attn& a) { a.qk_dim = 0; }},
       {"v_dim", "causal_attention: v_dim must be positive (got 0)", [](const Mk&, Attn& a) { a.v_dim = 0; }},
       {"v_head_stride", "causal_attention: v_head_stride must be non-negative (got -1)",
        [](const Mk&, Attn& a) { a.v_stride = -1; }},
       {"q", "causal_attention: q must have at least n_heads * qk_dim = 32 columns (got bf16 4x30)",
        [](const Mk& m, Attn& a) { a.q = m.t(D::kBF16, kT, 30); }},
       {"k", "causal_attention: k must have q's 4 rows and at least n_heads * qk_dim = 32 columns (got bf16 3x32)",
        [](const Mk& m, Attn& a) { a.k = m.t(D::kBF16, 3, 32); }},
       {"v_offset",
        "causal_attention: v must have q's 4 rows and at least v_offset + (n_heads - 1) * v_head_stride + v_dim = 49 "
        "columns (got bf16 4x48)",
        [](const Mk&, Attn& a) { a.v_offset = 17; }},
       {"out", "causal_attention: out must be bf16 4x16 (got bf16 4x17)", [](const Mk& m, Attn& a) { a.out = m.t(D::kBF16, kT, 17); }}}));

  struct Silu { Tensor x, out; };
  ops.push_back(contract_op<Silu>(
      "silu_and_mul", [](const Mk& m) { return Silu{m.uniform(D::kBF16, kT, 32, 18), m.t(D::kBF16, kT, 16)}; },
      [](Backend& b, Silu& a) { return b.silu_and_mul(a.x, a.out); }, [](Silu& a) { return std::vector<Tensor*>{&a.out}; },
      {{"x", "silu_and_mul: x must have an even number of columns [gate | up] (got bf16 4x31)",
        [](const Mk& m, Silu& a) { a.x = m.t(D::kBF16, kT, 31); }},
       {"out", "silu_and_mul: out must be bf16 4x16 (got bf16 4x32)", [](const Mk& m, Silu& a) { a.out = m.t(D::kBF16, kT, 32); }}}));

  struct Add { Tensor dst, src; };
  ops.push_back(contract_op<Add>(
      "add_inplace", [](const Mk& m) { return Add{m.uniform(D::kBF16, kT, kH, 19), m.uniform(D::kBF16, kT, kH, 20)}; },
      [](Backend& b, Add& a) { return b.add_inplace(a.dst, a.src); }, [](Add& a) { return std::vector<Tensor*>{&a.dst}; },
      {{"dst", "add_inplace: dst must be defined", [](const Mk&, Add& a) { a.dst = Tensor(); }},
       {"src", "add_inplace: src must be bf16 4x32 (got bf16 4x16)", [](const Mk& m, Add& a) { a.src = m.t(D::kBF16, kT, 16); }}}));

  // all_reduce writes nothing on one rank (no tensor listed).
  ops.push_back(contract_op<One>(
      "all_reduce", [](const Mk& m) { return One{m.uniform(D::kBF16, kT, kH, 21)}; },
      [](Backend& b, One& a) { return b.all_reduce(a.t); }, [](One&) { return std::vector<Tensor*>{}; },
      {{"t", "all_reduce: t must be bf16 or f32 (got i32 4x32)", [](const Mk& m, One& a) { a.t = m.t(D::kI32, kT, kH); }},
       {"t", "all_reduce: t must be contiguous (got bf16 4x16 with row stride 32)",
        [](const Mk& m, One& a) { a.t = m.view(D::kBF16, kT, 32, 0, 16); }}}));

  // The row collectives of expert parallelism, on one rank: its rows to itself; the all-gather
  // of one slice writes nothing (no tensor listed).
  struct A2a { Tensor send; std::vector<int64_t> sr{3}; Tensor recv; std::vector<int64_t> rr{3}; };
  ops.push_back(contract_op<A2a>(
      "all_to_all_rows", [](const Mk& m) { return A2a{m.uniform(D::kBF16, 3, kH, 22), {3}, m.t(D::kBF16, kT, kH), {3}}; },
      [](Backend& b, A2a& a) { return b.all_to_all_rows(a.send, a.sr, a.recv, a.rr); }, [](A2a& a) { return std::vector<Tensor*>{&a.recv}; },
      {{"send_rows", "all_to_all_rows: send_rows has 2 counts for 1 ranks", [](const Mk&, A2a& a) { a.sr = {3, 0}; }},
       {"recv_rows", "all_to_all_rows: recv_rows has a negative count -1", [](const Mk&, A2a& a) { a.rr = {-1}; }},
       {"send_rows", "all_to_all_rows: 4 rows to send, send has 3", [](const Mk&, A2a& a) { a.sr = {4}; }},
       {"recv", "all_to_all_rows: 3 rows to receive, recv has 2", [](const Mk& m, A2a& a) { a.recv = m.t(D::kBF16, 2, kH); }},
       {"recv", "all_to_all_rows: send and recv differ in dtype or columns", [](const Mk& m, A2a& a) { a.recv = m.t(D::kBF16, kT, 16); }},
       {"send", "all_to_all_rows: send must be contiguous (got bf16 3x16 with row stride 32)",
        [](const Mk& m, A2a& a) { a.send = m.view(D::kBF16, 3, 32, 0, 16); }},
       {"recv_rows", "all_to_all_rows: one rank sends itself 3 rows and expects 2", [](const Mk&, A2a& a) { a.rr = {2}; }}}));
  struct Gather { Tensor t; std::vector<int64_t> rows{kT}; };
  ops.push_back(contract_op<Gather>(
      "all_gather_rows", [](const Mk& m) { return Gather{m.uniform(D::kBF16, kT, kH, 23), {kT}}; },
      [](Backend& b, Gather& a) { return b.all_gather_rows(a.t, a.rows); }, [](Gather&) { return std::vector<Tensor*>{}; },
      {{"rows", "all_gather_rows: slices of 5 rows in a tensor of 4", [](const Mk&, Gather& a) { a.rows = {5}; }},
       {"rows", "all_gather_rows: rows has 0 counts for 1 ranks", [](const Mk&, Gather& a) { a.rows = {}; }},
       {"t", "all_gather_rows: t must be contiguous (got bf16 4x16 with row stride 32)",
        [](const Mk& m, Gather& a) { a.t = m.view(D::kBF16, kT, 32, 0, 16); }}}));

  // ---- MoE --------------------------------------------------------------------------------------
  // DeepSeek-V3-style routing over 64 experts in 8 groups, 4 kept.
  struct Router { Tensor logits, bias; RouterParams p; Tensor ids, weights; };
  ops.push_back(contract_op<Router>(
      "router_topk",
      [](const Mk& m) {
        Router a;
        a.logits = m.uniform(D::kF32, kT, 64, 22, 4.0f);
        a.bias = m.uniform(D::kF32, 1, 64, 23, 0.5f);
        a.p.top_k = 6;
        a.p.n_group = 8;
        a.p.topk_group = 4;
        a.p.method = TopkMethod::kNoauxTc;
        a.p.scoring = ScoringFunc::kSigmoid;
        a.p.norm_topk_prob = true;
        a.ids = m.t(D::kI32, kT, 6);
        a.weights = m.t(D::kF32, kT, 6);
        return a;
      },
      [](Backend& b, Router& a) { return b.router_topk(a.logits, a.bias, a.p, a.ids, a.weights); },
      [](Router& a) { return std::vector<Tensor*>{&a.ids, &a.weights}; },
      {{"logits", "router_topk: logits must be f32 (got bf16 4x64)", [](const Mk& m, Router& a) { a.logits = m.t(D::kBF16, kT, 64); }},
       {"top_k", "router_topk: top_k must be in [1, min(32, E = 64)] (got 0)", [](const Mk&, Router& a) { a.p.top_k = 0; }},
       // 33 <= E and (greedy) nothing else limits it: the CUDA kernel's limit is the contract.
       {"top_k", "router_topk: top_k must be in [1, min(32, E = 64)] (got 33)",
        [](const Mk&, Router& a) { a.p.top_k = 33; a.p.method = TopkMethod::kGreedy; }},
       {"n_group", "router_topk: n_group must be in [1, 64] and divide E = 64 (got 5)", [](const Mk&, Router& a) { a.p.n_group = 5; }},
       {"n_group", "router_topk: n_group must be in [1, 64] and divide E = 128 (got 128)",
        [](const Mk& m, Router& a) { a.logits = m.t(D::kF32, kT, 128); a.p.n_group = 128; }},
       // Checked for greedy too (the CUDA kernel always needed it).
       {"n_group", "router_topk: n_group must be in [1, 64] and divide E = 64 (got 0)",
        [](const Mk&, Router& a) { a.p.n_group = 0; a.p.method = TopkMethod::kGreedy; }},
       {"topk_group", "router_topk: topk_group must be in [1, n_group = 8] (got 9)", [](const Mk&, Router& a) { a.p.topk_group = 9; }},
       {"top_k", "router_topk: top_k must be at most topk_group * E / n_group = 8 (the experts of the kept groups) (got 9)",
        [](const Mk&, Router& a) { a.p.topk_group = 1; a.p.top_k = 9; }},
       {"bias", "router_topk: bias must be defined", [](const Mk&, Router& a) { a.bias = Tensor(); }},
       {"bias", "router_topk: bias must have 64 elements (got f32 1x63)", [](const Mk& m, Router& a) { a.bias = m.t(D::kF32, 1, 63); }},
       {"bias", "router_topk: bias must be contiguous (got f32 2x32 with row stride 64)",
        [](const Mk& m, Router& a) { a.bias = m.view(D::kF32, 2, 64, 0, 32); }},
       {"topk_ids", "router_topk: topk_ids must be i32 4x6 (got i32 4x5)", [](const Mk& m, Router& a) { a.ids = m.t(D::kI32, kT, 5); }},
       {"topk_weights", "router_topk: topk_weights must be f32 (got bf16 4x6)",
        [](const Mk& m, Router& a) { a.weights = m.t(D::kBF16, kT, 6); }}}));

  struct Quant { Tensor x, out, scales; };
  ops.push_back(contract_op<Quant>(
      "fp4_quantize",
      [](const Mk& m) { return Quant{m.uniform(D::kBF16, kT, kH, 24, 3.0f), m.t(D::kFP4x2, kT, kH / 2), m.t(D::kE4M3, kT, kH / 16)}; },
      [](Backend& b, Quant& a) { return b.fp4_quantize(a.x, 0.01f, a.out, a.scales); },
      [](Quant& a) { return std::vector<Tensor*>{&a.out, &a.scales}; },
      {{"x", "fp4_quantize: x must have K columns with K a multiple of 16 (got bf16 4x24)",
        [](const Mk& m, Quant& a) { a.x = m.t(D::kBF16, kT, 24); }},
       {"out", "fp4_quantize: out must be fp4x2 (got u8 4x16)", [](const Mk& m, Quant& a) { a.out = m.t(D::kU8, kT, 16); }},
       {"out", "fp4_quantize: out must be fp4x2 4x16 (got fp4x2 4x8)", [](const Mk& m, Quant& a) { a.out = m.t(D::kFP4x2, kT, 8); }},
       {"scales", "fp4_quantize: scales must be e4m3 4x2 (got e4m3 4x3)",
        [](const Mk& m, Quant& a) { a.scales = m.t(D::kE4M3, kT, 3); }}}));

  // T = 4 tokens, k = 2, E = 4 experts, tile 4: P = 8 + 4 * 3 = 20.
  struct Permute { Tensor ids; int64_t E = 4, tile = 4; Tensor offsets, p2t, e2p, ws; };
  ops.push_back(contract_op<Permute>(
      "moe_permute",
      [](const Mk& m) {
        Permute a;
        a.ids = m.ints(kT, 2, {0, 3, 1, 3, 3, 2, 0, 1});
        a.offsets = m.t(D::kI32, 1, 5);
        a.p2t = m.t(D::kI32, 1, 20);
        a.e2p = m.t(D::kI32, 1, 8);
        if (size_t n = m.b.moe_permute_workspace_bytes(kT, 2, 4)) a.ws = m.t(D::kU8, 1, static_cast<int64_t>(n));
        return a;
      },
      [](Backend& b, Permute& a) { return b.moe_permute(a.ids, a.E, a.tile, a.offsets, a.p2t, a.e2p, a.ws); },
      [](Permute& a) { return std::vector<Tensor*>{&a.offsets, &a.p2t, &a.e2p}; },
      {{"topk_ids", "moe_permute: topk_ids must be i32 (got f32 4x2)", [](const Mk& m, Permute& a) { a.ids = m.t(D::kF32, kT, 2); }},
       {"topk_ids", "moe_permute: topk_ids must be contiguous (got i32 4x2 with row stride 4)",
        [](const Mk& m, Permute& a) { a.ids = m.view(D::kI32, kT, 4, 0, 2); }},
       {"num_experts", "moe_permute: num_experts must be positive (got 0)", [](const Mk&, Permute& a) { a.E = 0; }},
       {"tile", "moe_permute: tile must be positive (got 0)", [](const Mk&, Permute& a) { a.tile = 0; }},
       {"offsets", "moe_permute: offsets must have 5 elements (got i32 1x4)", [](const Mk& m, Permute& a) { a.offsets = m.t(D::kI32, 1, 4); }},
       {"offsets", "moe_permute: offsets must be contiguous (got i32 5x1 with row stride 2)",
        [](const Mk& m, Permute& a) { a.offsets = m.view(D::kI32, 5, 2, 0, 1); }},
       {"permuted_to_token",
        "moe_permute: permuted_to_token must have at least T*k + E*(tile-1) = 20 elements, or a multiple of tile = 4 of at least "
        "T*k = 8 (the routed rows) (got i32 1x19)",
        [](const Mk& m, Permute& a) { a.p2t = m.t(D::kI32, 1, 19); }},
       {"permuted_to_token",
        "moe_permute: permuted_to_token must have at least T*k + E*(tile-1) = 20 elements, or a multiple of tile = 4 of at least "
        "T*k = 8 (the routed rows) (got i32 1x4)",
        [](const Mk& m, Permute& a) { a.p2t = m.t(D::kI32, 1, 4); }},
       {"permuted_to_token", "moe_permute: permuted_to_token must be contiguous (got i32 2x10 with row stride 11)",
        [](const Mk& m, Permute& a) { a.p2t = m.view(D::kI32, 2, 11, 0, 10); }},
       {"expanded_to_permuted", "moe_permute: expanded_to_permuted must have 8 elements (got i32 1x7)",
        [](const Mk& m, Permute& a) { a.e2p = m.t(D::kI32, 1, 7); }}}));

  // E = 2 experts, P = 8 rows: expert 0 rows 0..3 (tokens 0..3), expert 1 rows 4..5 (tokens 0, 1),
  // rows 6, 7 padding. a [T, H/2], w13 [E*2I, H/2], out [P, I/2].
  auto offsets = [](const Mk& m) { return m.ints(1, kE + 1, {0, 4, 8}); };
  auto p2t = [](const Mk& m) { return m.ints(1, 8, {0, 1, 2, 3, 0, 1, -1, -1}); };
  struct Gemm1 { Tensor a, a_sc, w13, w13_sc, w13_gs, offsets, p2t, out, out_sc; };
  ops.push_back(contract_op<Gemm1>(
      "moe_gemm1_fp4",
      [offsets, p2t](const Mk& m) {
        Gemm1 g;
        g.a = m.bytes(D::kFP4x2, kT, kH / 2, 25);
        g.a_sc = m.scales(kT, kH / 16, 26);
        g.w13 = m.bytes(D::kFP4x2, kE * 2 * kI, kH / 2, 27);
        g.w13_sc = m.scales(kE * 2 * kI, kH / 16, 28);
        g.w13_gs = m.floats(1, kE, {0.5f, 0.25f});
        g.offsets = offsets(m);
        g.p2t = p2t(m);
        g.out = m.t(D::kFP4x2, 8, kI / 2);
        g.out_sc = m.t(D::kE4M3, 8, kI / 16);
        return g;
      },
      [](Backend& b, Gemm1& g) {
        return b.moe_gemm1_fp4(g.a, g.a_sc, 0.5f, g.w13, g.w13_sc, g.w13_gs, g.offsets, g.p2t, 0.05f, g.out, g.out_sc);
      },
      [](Gemm1& g) { return std::vector<Tensor*>{&g.out, &g.out_sc}; },
      {{"a", "moe_gemm1_fp4: a must have H/2 columns with H a positive multiple of 16 (got fp4x2 4x12)",
        [](const Mk& m, Gemm1& g) { g.a = m.t(D::kFP4x2, kT, 12); }},
       {"a", "moe_gemm1_fp4: a must be fp4x2 (got u8 4x16)", [](const Mk& m, Gemm1& g) { g.a = m.t(D::kU8, kT, 16); }},
       {"a_scales", "moe_gemm1_fp4: a_scales must be e4m3 4x2 (got e4m3 4x3)", [](const Mk& m, Gemm1& g) { g.a_sc = m.t(D::kE4M3, kT, 3); }},
       {"out", "moe_gemm1_fp4: out must have I/2 columns with I a positive multiple of 16 (got fp4x2 8x4)",
        [](const Mk& m, Gemm1& g) { g.out = m.t(D::kFP4x2, 8, 4); }},
       {"out_scales", "moe_gemm1_fp4: out_scales must be e4m3 8x1 (got e4m3 8x2)",
        [](const Mk& m, Gemm1& g) { g.out_sc = m.t(D::kE4M3, 8, 2); }},
       {"offsets", "moe_gemm1_fp4: offsets must have E + 1 elements with E >= 1 (got i32 1x1)",
        [](const Mk& m, Gemm1& g) { g.offsets = m.t(D::kI32, 1, 1); }},
       {"offsets", "moe_gemm1_fp4: offsets must be contiguous (got i32 3x1 with row stride 2)",
        [](const Mk& m, Gemm1& g) { g.offsets = m.view(D::kI32, 3, 2, 0, 1); }},
       {"permuted_to_token", "moe_gemm1_fp4: permuted_to_token must have 8 elements (got i32 1x7)",
        [](const Mk& m, Gemm1& g) { g.p2t = m.t(D::kI32, 1, 7); }},
       {"w13", "moe_gemm1_fp4: w13 must be fp4x2 64x16 (got fp4x2 63x16)", [](const Mk& m, Gemm1& g) { g.w13 = m.t(D::kFP4x2, 63, 16); }},
       {"w13_scales", "moe_gemm1_fp4: w13_scales must be e4m3 64x2 (got e4m3 64x1)",
        [](const Mk& m, Gemm1& g) { g.w13_sc = m.t(D::kE4M3, 64, 1); }},
       {"w13_gs", "moe_gemm1_fp4: w13_gs must have 2 elements (got f32 1x3)", [](const Mk& m, Gemm1& g) { g.w13_gs = m.t(D::kF32, 1, 3); }},
       {"w13_gs", "moe_gemm1_fp4: w13_gs must be contiguous (got f32 2x1 with row stride 2)",
        [](const Mk& m, Gemm1& g) { g.w13_gs = m.view(D::kF32, 2, 2, 0, 1); }},
       // The CUDA kernel loads code rows 8 bytes at a time.
       {"a", "moe_gemm1_fp4: a must have 8-byte aligned rows (got fp4x2 4x16 at address % 8 = 0 with row stride 20)",
        [](const Mk& m, Gemm1& g) { g.a = m.view(D::kFP4x2, kT, 20, 0, 16); }},
       {"w13", "moe_gemm1_fp4: w13 must have 8-byte aligned rows (got fp4x2 64x16 at address % 8 = 4 with row stride 24)",
        [](const Mk& m, Gemm1& g) { g.w13 = m.view(D::kFP4x2, 64, 24, 4, 16); }}}));

  struct Gemm2 { Tensor h, h_sc, w2, w2_sc, w2_gs, offsets, p2t, out; };
  ops.push_back(contract_op<Gemm2>(
      "moe_gemm2_fp4",
      [offsets, p2t](const Mk& m) {
        Gemm2 g;
        g.h = m.bytes(D::kFP4x2, 8, kI / 2, 29);
        g.h_sc = m.scales(8, kI / 16, 30);
        g.w2 = m.bytes(D::kFP4x2, kE * kH, kI / 2, 31);
        g.w2_sc = m.scales(kE * kH, kI / 16, 32);
        g.w2_gs = m.floats(1, kE, {0.5f, 0.25f});
        g.offsets = offsets(m);
        g.p2t = p2t(m);
        g.out = m.t(D::kBF16, 8, kH);
        return g;
      },
      [](Backend& b, Gemm2& g) { return b.moe_gemm2_fp4(g.h, g.h_sc, 0.05f, g.w2, g.w2_sc, g.w2_gs, g.offsets, g.p2t, g.out); },
      [](Gemm2& g) { return std::vector<Tensor*>{&g.out}; },
      {{"h", "moe_gemm2_fp4: h must have I/2 columns with I a positive multiple of 16 (got fp4x2 8x4)",
        [](const Mk& m, Gemm2& g) { g.h = m.t(D::kFP4x2, 8, 4); }},
       {"h_scales", "moe_gemm2_fp4: h_scales must be e4m3 (got u8 8x1)", [](const Mk& m, Gemm2& g) { g.h_sc = m.t(D::kU8, 8, 1); }},
       {"out", "moe_gemm2_fp4: out must be bf16 (got f32 8x32)", [](const Mk& m, Gemm2& g) { g.out = m.t(D::kF32, 8, kH); }},
       {"out", "moe_gemm2_fp4: out must have h's 8 rows and at least one column (got bf16 7x32)",
        [](const Mk& m, Gemm2& g) { g.out = m.t(D::kBF16, 7, kH); }},
       {"offsets", "moe_gemm2_fp4: offsets must be i32 (got f32 1x3)", [](const Mk& m, Gemm2& g) { g.offsets = m.t(D::kF32, 1, 3); }},
       {"permuted_to_token", "moe_gemm2_fp4: permuted_to_token must be contiguous (got i32 2x4 with row stride 5)",
        [](const Mk& m, Gemm2& g) { g.p2t = m.view(D::kI32, 2, 5, 0, 4); }},
       {"w2", "moe_gemm2_fp4: w2 must be fp4x2 64x8 (got fp4x2 64x4)", [](const Mk& m, Gemm2& g) { g.w2 = m.t(D::kFP4x2, 64, 4); }},
       {"w2_scales", "moe_gemm2_fp4: w2_scales must be e4m3 64x1 (got e4m3 32x1)",
        [](const Mk& m, Gemm2& g) { g.w2_sc = m.t(D::kE4M3, 32, 1); }},
       {"w2_gs", "moe_gemm2_fp4: w2_gs must be f32 (got bf16 1x2)", [](const Mk& m, Gemm2& g) { g.w2_gs = m.t(D::kBF16, 1, 2); }},
       {"h", "moe_gemm2_fp4: h must have 8-byte aligned rows (got fp4x2 8x8 at address % 8 = 1 with row stride 16)",
        [](const Mk& m, Gemm2& g) { g.h = m.view(D::kFP4x2, 8, 16, 1, 8); }}}));

  // gemm2_out [P = 8, H]; token t takes rows e2p[2t], e2p[2t + 1].
  struct Combine { Tensor g2, e2p, w, shared, out; };
  ops.push_back(contract_op<Combine>(
      "moe_combine",
      [](const Mk& m) {
        return Combine{m.uniform(D::kBF16, 8, kH, 33), m.ints(1, kT * kK, {0, 4, 1, 5, 2, 6, 3, 7}),
                       m.uniform(D::kF32, kT, kK, 34), m.uniform(D::kBF16, kT, kH, 35), m.t(D::kBF16, kT, kH)};
      },
      [](Backend& b, Combine& a) { return b.moe_combine(a.g2, a.e2p, a.w, a.shared, a.out); },
      [](Combine& a) { return std::vector<Tensor*>{&a.out}; },
      {{"out", "moe_combine: out must be bf16 (got f32 4x32)", [](const Mk& m, Combine& a) { a.out = m.t(D::kF32, kT, kH); }},
       {"gemm2_out", "moe_combine: gemm2_out must have out's 32 columns (got bf16 8x16)",
        [](const Mk& m, Combine& a) { a.g2 = m.t(D::kBF16, 8, 16); }},
       {"topk_weights", "moe_combine: topk_weights must have out's 4 rows and k in [1, 32] columns (got f32 3x2)",
        [](const Mk& m, Combine& a) { a.w = m.t(D::kF32, 3, kK); }},
       {"topk_weights", "moe_combine: topk_weights must have out's 4 rows and k in [1, 32] columns (got f32 4x33)",
        [](const Mk& m, Combine& a) { a.w = m.t(D::kF32, kT, 33); }},
       {"expanded_to_permuted", "moe_combine: expanded_to_permuted must have 8 elements (got i32 1x7)",
        [](const Mk& m, Combine& a) { a.e2p = m.t(D::kI32, 1, 7); }},
       {"expanded_to_permuted", "moe_combine: expanded_to_permuted must be contiguous (got i32 4x2 with row stride 3)",
        [](const Mk& m, Combine& a) { a.e2p = m.view(D::kI32, kT, 3, 0, 2); }},
       {"shared", "moe_combine: shared must be bf16 4x32 (got bf16 4x16)", [](const Mk& m, Combine& a) { a.shared = m.t(D::kBF16, kT, 16); }}}));

  add_mla_contract_ops(ops);
  return ops;
}

}  // namespace moeprof::testref
