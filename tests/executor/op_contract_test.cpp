// The op contract (src/executor/backend_checks.cpp) through the CPU backend: every op with one bad
// argument at a time returns kBadInput with the exact one-line message and writes nothing; the
// valid call reaches the implementation (writes its outputs). The cases live in
// op_contract_cases.h so that tests/gpu/cuda_ops_test.cpp can expect the same messages from the
// CUDA backend. The rules are the union of what the backends need, so the CPU backend now also
// rejects what only the CUDA kernels could not run (top_k > 32, more than 64 groups, strided index
// vectors, u8 codes, misaligned FP4 rows).
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "executor/backends.h"
#include "tests/executor/op_contract_cases.h"

using namespace moeprof;
using namespace moeprof::testref;

namespace {

using Bytes = std::vector<std::vector<uint8_t>>;

void check_rejected(const Status& st, const std::string& message) {
  CHECK(st.code() == ErrorCode::kBadInput);
  CHECK(st.message() == message);
  CHECK(st.message().find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("op contract: every op of Backend has cases", "[cpu][contract]") {
  std::set<std::string> have;
  for (const ContractOp& op : contract_ops()) {
    CHECK(have.insert(op.op).second);
    CHECK(!op.bad.empty());
  }
  // copy_from_host / copy_to_host take host pointers: tested below.
  const std::set<std::string> want = {"init_uniform",   "init_e4m3",        "init_bytes",     "init_moe_w13",   "init_moe_w2",    "init_ints",
                                      "iota",           "embedding",        "rmsnorm",        "fused_add_rmsnorm", "add_rmsnorm",
                                      "linear",         "rope",             "mla_build_k",    "kv_cache_write",
                                      "causal_attention", "silu_and_mul",   "add_inplace",    "all_reduce",     "all_to_all_rows", "all_gather_rows",
                                      "router_topk",    "fp4_quantize",     "moe_permute",    "moe_gemm1_fp4",
                                      "moe_gemm2_fp4",  "moe_combine",     "kv_cache_store", "mla_q_absorb",
                                      "mla_paged_attention", "mla_v_up"};
  CHECK(have == want);
}

TEST_CASE("op contract: one bad argument is rejected with one exact line, before any write", "[cpu][contract]") {
  auto b = make_cpu_backend();
  for (const ContractOp& op : contract_ops()) {
    for (size_t i = 0; i < op.bad.size(); ++i) {
      INFO(op.op << " with a bad " << op.bad[i].what);
      Bytes before, after;
      const Status st = op.run(*b, static_cast<int>(i), &before, &after);
      check_rejected(st, op.bad[i].message);
      CHECK(after == before);
    }
  }
}

TEST_CASE("op contract: the valid call reaches the implementation", "[cpu][contract]") {
  auto b = make_cpu_backend();
  for (const ContractOp& op : contract_ops()) {
    INFO(op.op);
    Bytes before, after;
    const Status st = op.run(*b, -1, &before, &after);
    INFO(st.message());
    REQUIRE(st.is_ok());
    if (op.op == "all_reduce" || op.op == "all_gather_rows") continue;  // one rank: nothing to write
    REQUIRE(!before.empty());
    CHECK(after != before);
  }
}

TEST_CASE("op contract: copies check the tensor and the host pointer", "[cpu][contract]") {
  auto b = make_cpu_backend();
  const Mk m{*b};
  Tensor t = m.t(DType::kI32, 2, 3), none;
  std::vector<int32_t> host = {1, 2, 3, 4, 5, 6}, back(6, 0);
  check_rejected(b->copy_from_host(none, host.data()), "copy_from_host: dst must be defined");
  check_rejected(b->copy_from_host(t, nullptr), "copy_from_host: src must be a host pointer (got null)");
  check_rejected(b->copy_to_host(none, back.data()), "copy_to_host: src must be defined");
  check_rejected(b->copy_to_host(t, nullptr), "copy_to_host: dst must be a host pointer (got null)");
  REQUIRE(b->copy_from_host(t, host.data()).is_ok());
  REQUIRE(b->copy_to_host(t, back.data()).is_ok());
  CHECK(back == host);
  Tensor empty_t = m.t(DType::kI32, 0, 3);  // nothing to copy: no pointer needed
  CHECK(b->copy_from_host(empty_t, nullptr).is_ok());
  CHECK(b->copy_to_host(empty_t, nullptr).is_ok());
}

// Values of index tensors cannot be checked by the contract without reading device memory; the
// CPU reference reads them on the host and checks them there, in the same message form, before
// writing anything.
TEST_CASE("cpu backend: index values read on the host are checked before any write", "[cpu][contract]") {
  auto b = make_cpu_backend();
  const Mk m{*b};
  using D = DType;
  SECTION("rope positions") {
    Tensor x = m.uniform(D::kBF16, 4, 48, 1), cs = m.uniform(D::kF32, 16, 16, 2);
    Tensor pos = m.ints(1, 4, {0, 15, 16, 7});
    const auto x0 = bytes_of(*b, x);
    check_rejected(b->rope(x, 2, 24, 8, 16, pos, cs),
                   "rope: positions[2] must be in [0, 16) (the rows of cos_sin) (got 16)");
    CHECK(bytes_of(*b, x) == x0);
  }
  SECTION("moe_permute expert ids") {
    Tensor ids = m.ints(4, 2, {0, 3, 1, 3, 3, 2, -1, 1});
    Tensor off = m.t(D::kI32, 1, 5), p2t = m.t(D::kI32, 1, 20), e2p = m.t(D::kI32, 1, 8);
    check_rejected(b->moe_permute(ids, 4, 4, off, p2t, e2p, Tensor()),
                   "moe_permute: topk_ids[6] must be an expert id in [0, 4) (got -1)");
    CHECK(bytes_of(*b, off) == std::vector<uint8_t>(20, 0xFF));
  }
  SECTION("FP4 GEMM offsets and rows") {
    const int64_t T = kT, H = kH, I = kI, E = kE, P = 8;
    Tensor a = m.bytes(D::kFP4x2, T, H / 2, 3), a_sc = m.scales(T, H / 16, 4);
    Tensor w13 = m.bytes(D::kFP4x2, E * 2 * I, H / 2, 5), w13_sc = m.scales(E * 2 * I, H / 16, 6);
    Tensor gs = m.floats(1, E, {0.5f, 0.25f});
    Tensor out = m.t(D::kFP4x2, P, I / 2), out_sc = m.t(D::kE4M3, P, I / 16);
    Tensor p2t = m.ints(1, P, {0, 1, 2, 3, 0, 1, -1, -1});
    auto gemm1 = [&](const Tensor& offsets, const Tensor& rows) {
      return b->moe_gemm1_fp4(a, a_sc, 0.5f, w13, w13_sc, gs, offsets, rows, 0.05f, out, out_sc);
    };
    check_rejected(gemm1(m.ints(1, 3, {0, 5, 4}), p2t),
                   "moe_gemm1_fp4: offsets must be non-decreasing (got offsets[1] = 5 > offsets[2] = 4)");
    check_rejected(gemm1(m.ints(1, 3, {0, 4, 9}), p2t),
                   "moe_gemm1_fp4: offsets must start at 0 and end within the 8 rows (got 0 .. 9)");
    check_rejected(gemm1(m.ints(1, 3, {0, 4, 8}), m.ints(1, P, {0, 1, 2, 3, 0, 4, -1, -1})),
                   "moe_gemm1_fp4: permuted_to_token[5] must be -1 or a token index below 4 (got 4)");
    CHECK(bytes_of(*b, out) == std::vector<uint8_t>(static_cast<size_t>(P * I / 2), 0xFF));

    Tensor h = m.bytes(D::kFP4x2, P, I / 2, 7), h_sc = m.scales(P, I / 16, 8);
    Tensor w2 = m.bytes(D::kFP4x2, E * H, I / 2, 9), w2_sc = m.scales(E * H, I / 16, 10);
    Tensor g2 = m.t(D::kBF16, P, H);
    check_rejected(b->moe_gemm2_fp4(h, h_sc, 0.05f, w2, w2_sc, gs, m.ints(1, 3, {1, 4, 8}), p2t, g2),
                   "moe_gemm2_fp4: offsets must start at 0 and end within the 8 rows (got 1 .. 8)");
  }
  SECTION("moe_combine rows") {
    Tensor g2 = m.uniform(D::kBF16, 8, kH, 11), w = m.uniform(D::kF32, kT, kK, 12), out = m.t(D::kBF16, kT, kH);
    Tensor e2p = m.ints(1, kT * kK, {0, 4, 1, 5, 2, 8, 3, 7});
    check_rejected(b->moe_combine(g2, e2p, w, Tensor(), out),
                   "moe_combine: expanded_to_permuted[5] must be a row of gemm2_out in [0, 8) (got 8)");
    CHECK(bytes_of(*b, out) == std::vector<uint8_t>(static_cast<size_t>(kT * kH * 2), 0xFF));
  }
}

TEST_CASE("op contract: prepare_linear checks its shape and output dtype", "[cpu][contract]") {
  for (auto make : {make_cpu_backend, make_meta_backend}) {
    auto b = make();
    check_rejected(b->prepare_linear(-1, 7, 5, DType::kBF16, 0), "prepare_linear: rows must be non-negative (got -1)");
    check_rejected(b->prepare_linear(3, -7, 5, DType::kBF16, 0), "prepare_linear: n must be non-negative (got -7)");
    check_rejected(b->prepare_linear(3, 7, -5, DType::kF32, 0), "prepare_linear: k must be non-negative (got -5)");
    check_rejected(b->prepare_linear(3, 7, 5, DType::kI32, 0), "prepare_linear: out_dtype must be bf16 or f32 (got i32)");
    // Valid: nothing to choose on these backends, nothing allocated.
    const uint64_t before = b->allocation_count();
    CHECK(b->prepare_linear(3, 7, 5, DType::kF32, 1 << 20).is_ok());
    CHECK(b->allocation_count() == before);
  }
}
