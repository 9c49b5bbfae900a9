// Op timing (`moeprof run --op-times`, executor/op_profile.h): which calls are charged, the exact
// FLOPs and bytes each family is charged with, the floors under given peaks, and a whole forward
// of the tiny model whose attention and expert-GEMM work is recomputed here from its config.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "executor/backends.h"
#include "executor/run.h"
#include "model/config.h"
#include "tests/executor/reference.h"

using namespace moeprof;
using namespace moeprof::testref;

namespace {

const OpFamilyStats* family(const OpProfile& p, const std::string& op) {
  for (const auto& f : p.families)
    if (f.op == op) return &f;
  return nullptr;
}

Tensor random_bf16(Backend& b, int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = empty(b, DType::kBF16, rows, cols);
  REQUIRE(b.init_uniform(t, seed, 1.0f).is_ok());
  return t;
}

}  // namespace

TEST_CASE("op timing charges each op once with its exact FLOPs and bytes", "[cpu][op_times]") {
  auto b = make_cpu_backend();
  const int64_t T = 37, N = 29, K = 53;
  Tensor x = random_bf16(*b, T, K, 11), w = random_bf16(*b, N, K, 12);
  Tensor out = empty(*b, DType::kBF16, T, N);
  Tensor none;
  // Attention: 3 heads, qk 24, v 16 (v from its own columns), T = 19 (odd).
  const int64_t AT = 19, H = 3, QK = 24, V = 16;
  Tensor q = random_bf16(*b, AT, H * QK, 13), k = random_bf16(*b, AT, H * QK, 14), v = random_bf16(*b, AT, H * V + 5, 15);
  Tensor ao = empty(*b, DType::kBF16, AT, H * V);
  Tensor y = random_bf16(*b, T, 2 * N, 16), h = empty(*b, DType::kBF16, T, N);
  // Before start_op_profile nothing is charged.
  REQUIRE(b->linear(x, w, out, none).is_ok());
  CHECK_FALSE(b->op_profiling());
  b->start_op_profile();
  CHECK(b->op_profiling());
  REQUIRE(b->linear(x, w, out, none).is_ok());
  REQUIRE(b->linear(x, w, out, none).is_ok());
  // A call the contract refuses is not charged: the timer starts after the checks.
  Tensor wrong = empty(*b, DType::kBF16, T, N + 1);
  CHECK_FALSE(b->linear(x, w, wrong, none).is_ok());

  REQUIRE(b->causal_attention(q, k, v, H, QK, V, 5, V, 0.125f, ao).is_ok());
  REQUIRE(b->silu_and_mul(y, h).is_ok());

  auto p = b->take_op_profile();
  REQUIRE(p.is_ok());
  CHECK_FALSE(b->op_profiling());
  CHECK(p->clock == "host steady_clock");
  CHECK(p->calls == 4);
  REQUIRE(p->families.size() == 3);
  const OpFamilyStats* lin = family(*p, "linear");
  REQUIRE(lin != nullptr);
  CHECK(lin->calls == 2);
  CHECK(lin->flops == 2.0 * 2 * T * N * K);
  CHECK(lin->bytes == 2.0 * 2 * (T * K + N * K + T * N));
  // Its parts: one shape, M x N x K.
  REQUIRE(lin->parts.size() == 1);
  CHECK(lin->parts[0].op == "37 x 29 x 53");
  CHECK(lin->parts[0].calls == 2);
  CHECK(lin->parts[0].flops == lin->flops);
  CHECK(lin->parts[0].seconds == lin->seconds);
  const OpFamilyStats* att = family(*p, "causal_attention");
  REQUIRE(att != nullptr);
  CHECK(att->calls == 1);
  // sum over queries t of (t + 1) keys, (qk + v) multiply-adds each, 2 FLOPs per multiply-add
  double att_flops = 0;
  for (int64_t t = 0; t < AT; ++t) att_flops += 2.0 * H * (t + 1) * (QK + V);
  CHECK(att->flops == att_flops);
  CHECK(att->bytes == 2.0 * AT * H * (2 * QK + 2 * V));
  const OpFamilyStats* sm = family(*p, "silu_and_mul");
  REQUIRE(sm != nullptr);
  CHECK(sm->flops == 0);
  CHECK(sm->bytes == 2.0 * (T * 2 * N + T * N));
  double sum = 0;
  for (const auto& f : p->families) {
    CHECK(f.seconds > 0);
    sum += f.seconds;
  }
  CHECK(p->op_seconds == Approx(sum).epsilon(1e-12));
  for (size_t i = 1; i < p->families.size(); ++i) CHECK(p->families[i - 1].seconds >= p->families[i].seconds);
  // Profiling is off again; asking twice is an error.
  CHECK_FALSE(b->take_op_profile().is_ok());
}

TEST_CASE("op family figures: rates, shares and both floors under given peaks", "[cpu][op_times]") {
  OpProfile p;
  p.op_seconds = 4.0;
  OpFamilyStats gemm{"linear", 3, 1.0, 500e12, 2e12};  // 500 TFLOP in 1 s
  OpFamilyStats norm{"rmsnorm", 7, 3.0, 0, 6e12};      // 6 TB in 3 s
  DevicePeaks peaks{1000e12, 4e12, "test"};
  auto g = op_family_figures(gemm, p, peaks);
  CHECK(g.tflops == Approx(500.0));
  CHECK(g.gbps == Approx(2000.0));
  CHECK(g.share == Approx(0.25));
  CHECK(g.flop_floor_s == Approx(0.5));
  CHECK(g.byte_floor_s == Approx(0.5 * 1.0));  // 2e12 B / 4e12 B/s
  CHECK(std::string(g.bound) == "compute");   // ties go to compute
  CHECK(g.of_floor == Approx(2.0));
  auto n = op_family_figures(norm, p, peaks);
  CHECK(n.flop_floor_s == 0);
  CHECK(n.byte_floor_s == Approx(1.5));
  CHECK(std::string(n.bound) == "memory");
  CHECK(n.of_floor == Approx(2.0));
  auto unknown = op_family_figures(norm, p, DevicePeaks{});
  CHECK(unknown.floor_s == 0);
  CHECK(std::string(unknown.bound).empty());
  CHECK(known_device_peaks("NVIDIA H200").flops_per_s == Approx(989.4e12));
  CHECK(known_device_peaks("NVIDIA H200").bytes_per_s == Approx(4.8e12));
  CHECK(known_device_peaks("CPU reference").flops_per_s == 0);
}

TEST_CASE("op timing of a whole tiny forward matches the work implied by the config", "[cpu][op_times]") {
  auto b = make_cpu_backend();
  RunPlan plan;
  plan.model = "tiny";
  plan.tokens = 41;
  const auto dir = std::filesystem::temp_directory_path() / ("moeprof_op_times_" + std::to_string(::getpid()));
  plan.out_dir = dir.string();
  plan.modes = {MemoryMode::kBaseline};
  plan.op_times = true;
  auto r = execute_run_plan(*b, plan);
  REQUIRE(r.is_ok());
  REQUIRE(r->modes.size() == 1);
  REQUIRE(r->modes[0].ops.has_value());
  const OpProfile& p = *r->modes[0].ops;
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  auto shape = make_rank_shape(*cfg, plan.tokens, 1, 0, 0);
  REQUIRE(shape.is_ok());
  const int64_t T = plan.tokens, L = shape->layers;
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < L; ++l) moe_layers += cfg->is_moe_layer(l) ? 1 : 0;
  REQUIRE(moe_layers > 0);

  const OpFamilyStats* att = family(p, "causal_attention");
  REQUIRE(att != nullptr);
  CHECK(att->calls == L);
  CHECK(att->flops == static_cast<double>(L) * shape->heads * (cfg->qk_head_dim() + cfg->v_head_dim) * T * (T + 1));

  const OpFamilyStats* g1 = family(p, "moe_gemm1_fp4");
  const OpFamilyStats* g2 = family(p, "moe_gemm2_fp4");
  REQUIRE(g1 != nullptr);
  REQUIRE(g2 != nullptr);
  CHECK(g1->calls == moe_layers);
  CHECK(g2->calls == moe_layers);
  const double routed = static_cast<double>(T) * cfg->num_experts_per_tok;  // FLOPs on routed rows, not padding
  CHECK(g1->flops == moe_layers * 2.0 * routed * (2 * shape->moe_inter) * cfg->hidden_size);
  CHECK(g2->flops == moe_layers * 2.0 * routed * cfg->hidden_size * shape->moe_inter);
  CHECK(family(p, "moe_permute")->calls == moe_layers);
  // Emulated TP / one rank: the all-reduces are no-ops and are charged no bytes.
  if (const OpFamilyStats* ar = family(p, "all_reduce")) CHECK(ar->bytes == 0);
  // Every op of the forward is a Backend op: their times sum to (almost) the forward's wall time
  // and never exceed it.
  CHECK(p.op_seconds <= r->modes[0].forward_seconds);
  CHECK(p.op_seconds > 0.5 * r->modes[0].forward_seconds);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("op timing charges the expert GEMMs only the weights of the experts the routing hits", "[cpu][op_times]") {
  auto b = make_cpu_backend();
  // 9 tokens, top-2 of 13 experts, the ids drawn among experts {1, 4, 6, 11} (two distinct per token);
  // H = 64, I = 32 (odd counts of everything else), tile 8.
  const int64_t T = 9, k = 2, E = 13, H = 64, I = 32, tile = 8, P = T * k + E * (tile - 1);
  const int32_t used[4] = {1, 4, 6, 11};
  std::vector<int32_t> ids(T * k);
  for (int64_t t = 0; t < T; ++t) {
    ids[t * k] = used[t % 4];
    ids[t * k + 1] = used[(t + 1 + t / 4) % 4];
  }
  Tensor topk = empty(*b, DType::kI32, T, k);
  REQUIRE(b->copy_from_host(topk, ids.data()).is_ok());
  Tensor offsets = empty(*b, DType::kI32, 1, E + 1), p2t = empty(*b, DType::kI32, 1, P), e2p = empty(*b, DType::kI32, 1, T * k);
  Tensor ws;
  if (size_t wb = b->moe_permute_workspace_bytes(T, k, E); wb > 0) ws = empty(*b, DType::kU8, 1, static_cast<int64_t>(wb));
  Tensor a = empty(*b, DType::kFP4x2, T, H / 2), as = empty(*b, DType::kE4M3, T, H / 16);
  Tensor w13 = empty(*b, DType::kFP4x2, E * 2 * I, H / 2), w13s = empty(*b, DType::kE4M3, E * 2 * I, H / 16);
  Tensor w2 = empty(*b, DType::kFP4x2, E * H, I / 2), w2s = empty(*b, DType::kE4M3, E * H, I / 16);
  Tensor gs1 = empty(*b, DType::kF32, 1, E), gs2 = empty(*b, DType::kF32, 1, E);
  REQUIRE(b->init_bytes(a, 21).is_ok());
  REQUIRE(b->init_e4m3(as, 22, 0.05f, 1.0f).is_ok());
  REQUIRE(b->init_bytes(w13, 23).is_ok());
  REQUIRE(b->init_e4m3(w13s, 24, 0.05f, 1.0f).is_ok());
  REQUIRE(b->init_bytes(w2, 25).is_ok());
  REQUIRE(b->init_e4m3(w2s, 26, 0.05f, 1.0f).is_ok());
  REQUIRE(b->init_uniform(gs1, 27, 0.1f).is_ok());
  REQUIRE(b->init_uniform(gs2, 28, 0.1f).is_ok());
  Tensor h = empty(*b, DType::kFP4x2, P, I / 2), hs = empty(*b, DType::kE4M3, P, I / 16), out = empty(*b, DType::kBF16, P, H);
  b->start_op_profile();
  REQUIRE(b->moe_permute(topk, E, tile, offsets, p2t, e2p, ws).is_ok());
  REQUIRE(b->moe_gemm1_fp4(a, as, 0.05f, w13, w13s, gs1, offsets, p2t, 0.02f, h, hs).is_ok());
  REQUIRE(b->moe_gemm2_fp4(h, hs, 0.02f, w2, w2s, gs2, offsets, p2t, out).is_ok());
  auto p = b->take_op_profile();
  REQUIRE(p.is_ok());
  const OpFamilyStats* g1 = family(*p, "moe_gemm1_fp4");
  const OpFamilyStats* g2 = family(*p, "moe_gemm2_fp4");
  REQUIRE(g1 != nullptr);
  REQUIRE(g2 != nullptr);
  const double R = static_cast<double>(T * k), share = 4.0 / 13.0;
  CHECK(g1->bytes == Approx(R * (H / 2 + H / 16) + share * E * 2 * I * (H / 2 + H / 16) + P * (I / 2 + I / 16)).epsilon(1e-12));
  CHECK(g2->bytes == Approx(R * (I / 2 + I / 16) + share * E * H * (I / 2 + I / 16) + P * H * 2).epsilon(1e-12));
  CHECK(g1->flops == 2.0 * R * 2 * I * H);
  // A permutation run while op times are off is not counted: every expert's weights.
  REQUIRE(b->moe_permute(topk, E, tile, offsets, p2t, e2p, ws).is_ok());
  b->start_op_profile();
  REQUIRE(b->moe_gemm2_fp4(h, hs, 0.02f, w2, w2s, gs2, offsets, p2t, out).is_ok());
  auto q = b->take_op_profile();
  REQUIRE(q.is_ok());
  CHECK(family(*q, "moe_gemm2_fp4")->bytes == Approx(R * (I / 2 + I / 16) + 1.0 * E * H * (I / 2 + I / 16) + P * H * 2).epsilon(1e-12));
}
