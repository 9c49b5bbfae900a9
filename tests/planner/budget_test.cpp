// The memory budget (planner/budget.h) on a hand-computed trace: every component, the exact KV
// capacity with and without pages and margins, a device too small, the engine settings checked
// against the engines' formulas, the worst step of a trace with step scopes, device names.
#include <catch2/catch.hpp>

#include "planner/analysis.h"
#include "planner/budget.h"
#include "tests/planner/trace_builder.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::TraceBuilder;

namespace {

// Positions: weights, two KV layers of 50 tokens x 37 B, a pool of 50,000 B reserved, a graph
// pool, a workspace, then activations; the activation peak is at the allocation of `b`.
Trace serving_like() {
  TraceBuilder t("run");
  t.trace.meta.tokens = 50;
  t.alloc(1, 0x10000, 1'000'003, Category::kWeights, "model", "weights");
  t.alloc(2, 0x20000, 1850, Category::kKvCache, "layer.0/attn", "kv_cache");
  t.alloc(3, 0x30000, 1850, Category::kKvCache, "layer.1/attn", "kv_cache");
  TraceRecord& pool = t.trace.add(EventKind::kPoolReserve, 4, 0x900000, 50'000);
  pool.seq = 100;
  pool.mem_kind = MemKind::kSymmetric;  // as the recorder writes the NCCL symmetric pool
  t.alloc(5, 0x40000, 77'777, Category::kGraph, "graphs", "graph_pool");
  t.alloc(6, 0x50000, 12'345, Category::kWorkspace, "model", "cublas_workspace");
  t.alloc(7, 0x60000, 10'001, Category::kActivation, "layer.0", "a");
  t.alloc(8, 0x900000, 20'000, Category::kCommunication, "layer.0", "allreduce_buf").mem_kind = MemKind::kSymmetric;
  t.alloc(9, 0x70000, 30'013, Category::kActivation, "layer.0/moe", "b");
  t.free(10, 0x70000);
  t.free(11, 0x60000);
  t.alloc(12, 0x80000, 5'000, Category::kActivation, "layer.1", "c");
  for (uint64_t a : {0x80000ull, 0x900000ull, 0x50000ull, 0x40000ull, 0x30000ull, 0x20000ull, 0x10000ull}) t.free(20 + a / 0x10000, a);
  return t.trace;
}

RunAnalysis analyzed(const Trace& t) {
  AnalyzeOptions o;
  o.keep_lifetimes = true;
  return analyze(t, o);
}

int64_t component(const BudgetResult& b, const std::string& name) {
  for (const auto& c : b.components)
    if (c.name == name) return c.bytes;
  FAIL("no component " << name);
  return 0;
}

int64_t sum(const BudgetResult& b) {
  int64_t s = 0;
  for (const auto& c : b.components) s += c.bytes;
  return s;
}

// A decimal string as num / 10^k.
std::pair<__int128, __int128> decimal(const std::string& s) {
  __int128 num = 0, den = 1;
  bool frac = false;
  for (char c : s) {
    if (c == '.') {
      frac = true;
      continue;
    }
    num = num * 10 + (c - '0');
    if (frac) den *= 10;
  }
  return {num, den};
}

// SGLang: rest = f G - weights (SGLang's int() of it), tokens = rest // cell, down to the page size.
uint64_t sglang_tokens(const std::string& f, const BudgetResult& b) {
  auto [num, den] = decimal(f);
  const __int128 rest = num * b.gpu_memory_bytes / den - b.weights_bytes;
  return rest <= 0 ? 0 : static_cast<uint64_t>(rest / b.kv_bytes_per_token) / b.page_size * b.page_size;
}

}  // namespace

TEST_CASE("budget - every component of a hand-computed trace, summing to the device", "[planner][budget]") {
  const RunAnalysis run = analyzed(serving_like());
  BudgetOptions o;
  o.gpu_memory_bytes = 10'000'019;
  auto b = memory_budget(run, o);
  REQUIRE(b.is_ok());
  CHECK(component(*b, "weights") == 1'000'003);
  CHECK(component(*b, "activation_peak") == 10'001 + 30'013);
  CHECK(component(*b, "workspaces") == 12'345 + 20'000);
  CHECK(component(*b, "graph_pool") == 77'777);
  CHECK(component(*b, "allocator_rest") == 50'000 - 20'000);  // the pool beyond the symmetric tensor in it
  CHECK(component(*b, "margin") == 0);
  CHECK(b->kv_bytes_per_token == 74);  // 3,700 B of KV cache / 50 tokens
  CHECK(b->trace_kv_cache_bytes == 3'700);
  // 10,000,019 - 1,180,139 = 8,819,880 B = 119,187 slots of 74 B; one is SGLang's padding row.
  CHECK(b->available_for_kv_bytes == 8'819'880);
  CHECK(b->kv_tokens == 119'186);
  CHECK(component(*b, "kv_pool") == 119'187 * 74);
  CHECK(component(*b, "free") == 42);
  CHECK(sum(*b) == 10'000'019);
  CHECK(b->fits);
  CHECK(b->request_tokens == 50);
  CHECK(b->requests == 119'186 / 50);
  CHECK(b->worst_step == "prefill");
  CHECK(b->activation_peak_bytes == 72'359);
  REQUIRE_FALSE(b->live_at_peak.empty());
  CHECK(b->live_at_peak[0].name == "b");
}

TEST_CASE("budget - pages, margins, an allocator's rounding and a device too small", "[planner][budget]") {
  const RunAnalysis run = analyzed(serving_like());
  BudgetOptions o;
  o.gpu_memory_bytes = 10'000'019;
  o.page_size = 16;
  auto paged = memory_budget(run, o);
  REQUIRE(paged.is_ok());
  CHECK(paged->kv_tokens == 119'168);  // (119,187 - 16) // 16 x 16
  CHECK(component(*paged, "kv_pool") == (119'168 + 16) * 74);
  CHECK(component(*paged, "free") == 264);
  CHECK(sum(*paged) == 10'000'019);
  o.page_size = 1;
  o.margin_bytes = 1'000'000;
  auto margin = memory_budget(run, o);
  REQUIRE(margin.is_ok());
  CHECK(component(*margin, "margin") == 1'000'000);
  CHECK(margin->kv_tokens == 105'673);
  CHECK(sum(*margin) == 10'000'019);
  o.margin_bytes = 0;
  o.granularity = 512;  // 445 + 47 + 455 + 239 + 480 + 195 B of rounding at the peak (the KV cache is replaced)
  auto rounded = memory_budget(run, o);
  REQUIRE(rounded.is_ok());
  CHECK(component(*rounded, "allocator_rest") == 30'000 + 1'861);
  CHECK(sum(*rounded) == 10'000'019);
  // One slot only: no page with its padding row fits.
  o.granularity = 1;
  o.gpu_memory_bytes = 1'180'139 + 74;
  auto one = memory_budget(run, o);
  REQUIRE(one.is_ok());
  CHECK_FALSE(one->fits);
  CHECK(one->kv_tokens == 0);
  CHECK(one->shortfall_bytes == 74);
  CHECK(sum(*one) == static_cast<int64_t>(o.gpu_memory_bytes));
  o.gpu_memory_bytes = 1'000'000;
  auto small = memory_budget(run, o);
  REQUIRE(small.is_ok());
  CHECK_FALSE(small->fits);
  CHECK(component(*small, "free") == -180'139);
  CHECK(small->shortfall_bytes == 180'139 + 148);
  CHECK(sum(*small) == 1'000'000);
}

TEST_CASE("budget - the engine settings give exactly the capacity, and what a smaller peak buys", "[planner][budget]") {
  const RunAnalysis run = analyzed(serving_like());
  for (uint64_t page : {uint64_t{1}, uint64_t{16}}) {
    BudgetOptions o;
    o.gpu_memory_bytes = 10'000'019;
    o.page_size = page;
    auto b = memory_budget(run, o);
    REQUIRE(b.is_ok());
    const EngineSettings e = engine_settings(*b);
    REQUIRE_FALSE(e.mem_fraction_static.empty());
    CHECK(sglang_tokens(e.mem_fraction_static, *b) == b->kv_tokens);
    // One unit less in its last digit gives fewer tokens: the value is the shortest that works.
    auto [num, den] = decimal(e.mem_fraction_static);
    const __int128 below = (num - 1) * b->gpu_memory_bytes / den - b->weights_bytes;
    CHECK(static_cast<uint64_t>(below / b->kv_bytes_per_token) / page * page < b->kv_tokens);
    CHECK(sglang_tokens(e.mem_fraction_rounded, *b) == e.rounded_kv_tokens);
    CHECK(e.rounded_kv_tokens <= b->kv_tokens);
    // vLLM: u G - non-KV holds the tokens and less than 16 more.
    auto [un, ud] = decimal(e.gpu_memory_utilization);
    const __int128 kv = un * b->gpu_memory_bytes / ud - (10'000'019 - component(*b, "kv_pool") - component(*b, "free"));
    CHECK(kv >= static_cast<__int128>(b->kv_tokens) * 74);
    CHECK(kv < static_cast<__int128>(b->kv_tokens + 16) * 74);
  }
  BudgetOptions o;
  o.gpu_memory_bytes = 10'000'019;
  auto b = memory_budget(run, o);
  REQUIRE(b.is_ok());
  CHECK(kv_tokens_with_peak(*b, b->activation_peak_bytes) == b->kv_tokens);
  CHECK(kv_tokens_with_peak(*b, b->activation_peak_bytes - 74 * 9) == b->kv_tokens + 9);
  CHECK(kv_tokens_with_peak(*b, 20'000'000) == 0);
  CHECK(requests_for(*b, 149) == 2);
  CHECK(shortest_decimal(1, 2, 3) == "0.4");
  CHECK(shortest_decimal(98, 99, 100) == "0.98");
  CHECK(shortest_decimal(2, 3, 2) == "1");
  CHECK(shortest_decimal(5, 5, 9).empty());
}

TEST_CASE("budget - a run whose MoE rows follow the routing reserves the worst routing's peak", "[planner][budget][routing]") {
  Trace t = serving_like();
  BudgetOptions o;
  o.gpu_memory_bytes = 10'000'019;
  // The padded rows at the bound (or a trace that does not say): no reserve, no component.
  t.meta.extra["routing"] = "zipf:1.2";
  t.meta.extra["moe_rows"] = "bound";
  t.meta.extra["routing.peak_activation_worst_bytes"] = "72359";
  auto bound = memory_budget(analyzed(t), o);
  REQUIRE(bound.is_ok());
  for (const auto& c : bound->components) CHECK(c.name != "routing_worst");
  CHECK(bound->kv_tokens == 119'186);
  // Routed rows: the worst routing's activation peak, 9,999 B above the 72,359 B measured, is its
  // own component; the pool shrinks by it.
  t.meta.extra["moe_rows"] = "routed";
  t.meta.extra["routing.peak_activation_worst_bytes"] = "82358";
  auto b = memory_budget(analyzed(t), o);
  REQUIRE(b.is_ok());
  CHECK(component(*b, "activation_peak") == 10'001 + 30'013);
  CHECK(component(*b, "routing_worst") == 9'999);
  CHECK(b->routing_reserve_bytes == 9'999);
  CHECK(b->worst_routing_peak_bytes == 82'358);
  CHECK(b->routing == "zipf:1.2");
  // 8,819,880 - 9,999 = 8,809,881 B = 119,052 slots of 74 B (33 B left), one of them padding.
  CHECK(b->available_for_kv_bytes == 8'809'881);
  CHECK(b->kv_tokens == 119'051);
  CHECK(component(*b, "free") == 33);
  CHECK(sum(*b) == 10'000'019);
  CHECK(kv_tokens_with_peak(*b, b->activation_peak_bytes) == b->kv_tokens);
  // vLLM's non-KV memory holds the reserve too.
  const EngineSettings e = engine_settings(*b);
  auto [un, ud] = decimal(e.gpu_memory_utilization);
  const __int128 kv = un * b->gpu_memory_bytes / ud - (10'000'019 - component(*b, "kv_pool") - component(*b, "free"));
  CHECK(kv >= static_cast<__int128>(b->kv_tokens) * 74);
  CHECK(kv < static_cast<__int128>(b->kv_tokens + 16) * 74);
  // The worst routing's peak at or below the measured one (the run met the worst): nothing more.
  t.meta.extra["routing.peak_activation_worst_bytes"] = "72359";
  auto met = memory_budget(analyzed(t), o);
  REQUIRE(met.is_ok());
  CHECK(component(*met, "routing_worst") == 0);
  CHECK(met->kv_tokens == 119'186);
  // Routed rows without the worst peak, or with one that is not a byte count: bad input.
  for (const char* v : {"", "12x", "-5", "99999999999999999999"}) {
    INFO(v);
    if (*v == 0) t.meta.extra.erase("routing.peak_activation_worst_bytes");
    else t.meta.extra["routing.peak_activation_worst_bytes"] = v;
    auto bad = memory_budget(analyzed(t), o);
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.status().message().find("routing.peak_activation_worst_bytes") != std::string::npos);
  }
}

TEST_CASE("budget - the worst step of a trace with step scopes, and what cannot be budgeted", "[planner][budget]") {
  TraceBuilder t("serve");
  t.alloc(1, 0x1000, 4'096, Category::kWeights, "model", "w");
  t.alloc(2, 0x2000, 7'000, Category::kKvCache, "kv_pool", "kv");
  t.alloc(3, 0x3000, 300, Category::kActivation, "step.0/prefill/layer.0", "x");
  t.alloc(4, 0x4000, 200, Category::kActivation, "step.0/prefill/layer.0", "y");
  t.free(5, 0x3000);
  t.free(6, 0x4000);
  t.alloc(7, 0x5000, 333, Category::kActivation, "step.1/decode/layer.0", "x");
  t.alloc(8, 0x6000, 401, Category::kActivation, "step.1/decode/layer.0", "z");
  t.free(9, 0x5000);
  t.free(10, 0x6000);
  const RunAnalysis run = analyzed(t.trace);
  BudgetOptions o;
  o.gpu_memory_bytes = 100'000;
  o.kv_bytes_per_token = 70;
  auto b = memory_budget(run, o);
  REQUIRE(b.is_ok());
  CHECK(b->worst_step == "step.1/decode");
  CHECK(b->activation_peak_bytes == 734);
  REQUIRE(b->steps.size() == 2);
  CHECK(b->steps[0] == std::make_pair(std::string("step.1"), uint64_t{734}));
  CHECK(b->steps[1] == std::make_pair(std::string("step.0"), uint64_t{500}));
  CHECK(b->kv_tokens == (100'000 - 4'096 - 734) / 70 - 1);
  // Without a token count the per-token cost cannot be derived; a cost that does not divide is refused.
  o.kv_bytes_per_token = 0;
  auto none = memory_budget(run, o);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().message().find("--kv-bytes-per-token") != std::string::npos);
  t.trace.meta.tokens = 3;
  auto odd = memory_budget(analyzed(t.trace), o);
  REQUIRE_FALSE(odd.is_ok());
  CHECK(odd.status().message().find("not a whole number") != std::string::npos);
  t.trace.meta.tokens = 100;
  auto ok = memory_budget(analyzed(t.trace), o);
  REQUIRE(ok.is_ok());
  CHECK(ok->kv_bytes_per_token == 70);
}

TEST_CASE("budget - device sizes by name or in bytes", "[planner][budget]") {
  CHECK(*parse_gpu_memory("H200") == 150'754'820'096ull);
  CHECK(*parse_gpu_memory("h100") == 85'520'809'984ull);
  CHECK(*parse_gpu_memory("A100") == 85'100'068'864ull);
  CHECK(*parse_gpu_memory("b200") == 192'265'846'784ull);
  CHECK(*parse_gpu_memory("80,000,000,000") == 80'000'000'000ull);
  CHECK(*parse_gpu_memory("1_000") == 1000);
  for (const char* bad : {"0", "", "H300", "12x", "99999999999999999999"}) {
    auto r = parse_gpu_memory(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
  }
  CHECK(parse_gpu_memory("H300").status().message().find("H200") != std::string::npos);
}

TEST_CASE("budget - of several ranks, the one with the largest fixed needs", "[planner][budget]") {
  TraceBuilder t("ranks");
  t.trace.meta.tokens = 10;
  for (uint16_t dev : {0, 1}) {
    t.alloc(1 + dev * 10, 0x1000, 5'000 + dev * 3'001, Category::kWeights, "model", "w", dev);
    t.alloc(2 + dev * 10, 0x2000, 10 * 90, Category::kKvCache, "layer.0", "kv", dev);
    t.alloc(3 + dev * 10, 0x3000, 777 - dev * 100, Category::kActivation, "layer.0", "x", dev);
    t.free(4 + dev * 10, 0x3000, dev);
  }
  BudgetOptions o;
  o.gpu_memory_bytes = 20'000;
  auto b = memory_budget(analyzed(t.trace), o);
  REQUIRE(b.is_ok());
  CHECK(b->device == 1);
  CHECK(b->weights_bytes == 8'001);
  CHECK(b->activation_bytes == 677);
  CHECK(b->kv_bytes_per_token == 90);
  CHECK(b->kv_tokens == (20'000 - 8'001 - 677) / 90 - 1);
  CHECK(sum(*b) == 20'000);
}

// Each kind of pool holds its own kind of tensors: a cudaMallocAsync pool's reserve (the CUDA
// backend's activation pool, CUPTI's pool records) beyond the stream-ordered tensors live at the
// peak is allocator_rest, and so is a caching allocator's (a PyTorch snapshot's kOther segments)
// beyond its tensors; emulated symmetric tensors (no symmetric pool) live in the stream pool.
TEST_CASE("budget - the reserve of each kind of pool beyond its own tensors", "[planner][budget]") {
  auto pool = [](TraceBuilder& t, uint64_t ts, uint64_t address, uint64_t bytes, MemKind k) {
    TraceRecord& r = t.trace.add(EventKind::kPoolReserve, ts, address, bytes);
    r.mem_kind = k;
  };
  TraceBuilder t("run");
  t.trace.meta.tokens = 10;
  t.alloc(1, 0x10000, 999'983, Category::kWeights, "model", "weights").mem_kind = MemKind::kDevice;
  t.alloc(2, 0x20000, 10 * 61, Category::kKvCache, "layer.0/attn", "kv_cache").mem_kind = MemKind::kDevice;
  pool(t, 3, 0xA0000000, 2'097'152, MemKind::kStreamOrdered);
  t.alloc(4, 0x30000, 40'009, Category::kActivation, "layer.0", "a").mem_kind = MemKind::kStreamOrdered;
  t.alloc(5, 0x40000, 7'001, Category::kCommunication, "layer.0", "emulated_symm").mem_kind = MemKind::kSymmetric;
  pool(t, 6, 0xA0000000, 6'291'456, MemKind::kStreamOrdered);  // grows for b; never shrinks
  t.alloc(7, 0x50000, 3'000'017, Category::kActivation, "layer.0/moe", "b").mem_kind = MemKind::kStreamOrdered;
  t.free(8, 0x50000);
  t.free(9, 0x40000);
  t.free(10, 0x30000);
  t.free(11, 0x20000);
  t.free(12, 0x10000);
  const RunAnalysis run = analyzed(t.trace);
  REQUIRE(run.devices.size() == 1);
  CHECK(run.devices[0].pool_reserved_peak_by_kind[static_cast<size_t>(MemKind::kStreamOrdered)] == 6'291'456);
  CHECK(run.devices[0].pool_reserved_peak_by_kind[static_cast<size_t>(MemKind::kSymmetric)] == 0);
  BudgetOptions o;
  o.gpu_memory_bytes = 50'000'000;
  auto b = memory_budget(run, o);
  REQUIRE(b.is_ok());
  CHECK(component(*b, "activation_peak") == 40'009 + 3'000'017);
  CHECK(component(*b, "workspaces") == 7'001);
  CHECK(component(*b, "allocator_rest") == 6'291'456 - (40'009 + 7'001 + 3'000'017));
  CHECK(sum(*b) == 50'000'000);
  // A caching allocator's segments (kOther) hold every tensor of that kind, weights included.
  TraceBuilder c("snapshot");
  c.trace.meta.tokens = 10;
  pool(c, 1, 0, 4'194'304, MemKind::kOther);
  c.alloc(2, 0x10000, 1'000'003, Category::kWeights, "model", "weights").mem_kind = MemKind::kOther;
  c.alloc(3, 0x20000, 610, Category::kKvCache, "layer.0/attn", "kv_cache").mem_kind = MemKind::kOther;
  c.alloc(4, 0x30000, 2'000'029, Category::kActivation, "layer.0", "a").mem_kind = MemKind::kOther;
  c.free(5, 0x30000);
  const RunAnalysis snap = analyzed(c.trace);
  auto bs = memory_budget(snap, o);
  REQUIRE(bs.is_ok());
  CHECK(component(*bs, "allocator_rest") == 4'194'304 - (1'000'003 + 610 + 2'000'029));
  CHECK(sum(*bs) == 50'000'000);
}

// The keys a run writes for the budget: a CUDA run's untraced memory becomes its own component and
// takes its bytes from the pool; a serving trace's pool and request table must agree with its KV
// category, and bad keys are refused in one line.
TEST_CASE("budget - a run's metadata: the untraced memory, a serving pool and its request table", "[planner][budget]") {
  Trace t = serving_like();
  BudgetOptions o;
  o.gpu_memory_bytes = 10'000'019;
  auto plain = memory_budget(analyzed(t), o);
  REQUIRE(plain.is_ok());
  CHECK(component(*plain, "untraced") == 0);
  CHECK_FALSE(plain->untraced_measured);
  t.meta.extra["cuda.untraced_peak_bytes"] = "740001";
  auto measured = memory_budget(analyzed(t), o);
  REQUIRE(measured.is_ok());
  CHECK(measured->untraced_measured);
  CHECK(component(*measured, "untraced") == 740'001);
  CHECK(measured->kv_tokens == (8'819'880 - 740'001) / 74 - 1);  // the slots left, less SGLang's padding row
  CHECK(sum(*measured) == 10'000'019);
  t.meta.extra["cuda.untraced_peak_bytes"] = "12x";
  auto bad = memory_budget(analyzed(t), o);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("cuda.untraced_peak_bytes") != std::string::npos);
  t.meta.extra.erase("cuda.untraced_peak_bytes");

  // A serving trace: the KV category (3,700 B) is a pool of 40 tokens + 10 padding rows at 37 B...
  t.meta.extra["kv_pool_tokens"] = "40";
  t.meta.extra["kv_pool_bytes"] = "1850";
  t.meta.extra["kv_page_size"] = "10";
  t.meta.extra["req_to_token_bytes"] = "1850";
  t.meta.extra["req_to_token_row_bytes"] = "185";
  t.meta.extra["context_len"] = "42";
  t.meta.extra["max_running_requests_rule"] = "given";
  auto s = memory_budget(analyzed(t), o);
  REQUIRE(s.is_ok());
  CHECK(s->kv_bytes_per_token == 37);
  CHECK(s->page_size == 10);
  CHECK(component(*s, "request_table") == 1'850);
  // (K + 10) x 37 + 1,850 <= 10,000,019 - 1,180,139, K a multiple of 10.
  CHECK(s->kv_tokens == (8'819'880 - 1'850) / 37 / 10 * 10 - 10);
  CHECK(sum(*s) == 10'000'019);
  // ... and a table that is not the rest of the KV category, or a rule nobody wrote, is refused.
  t.meta.extra["req_to_token_bytes"] = "1851";
  auto off = memory_budget(analyzed(t), o);
  REQUIRE_FALSE(off.is_ok());
  CHECK(off.status().message().find("request table") != std::string::npos);
  t.meta.extra["req_to_token_bytes"] = "1850";
  t.meta.extra["max_running_requests_rule"] = "guess";
  auto rule = memory_budget(analyzed(t), o);
  REQUIRE_FALSE(rule.is_ok());
  CHECK(rule.status().message().find("max_running_requests_rule") != std::string::npos);
}

TEST_CASE("budget - concurrent requests stop at the request table's limit", "[planner][budget]") {
  planner::BudgetResult b;
  b.page_size = 1;
  b.request_tokens = 255;
  // SGLang's rule: clamp(int(kv / context x 512), 2048, 4096) rows for requests.
  b.table_context_len = 163840;
  b.table_row_bytes = 655376;
  CHECK(planner::request_limit_at(b, 1332968) == 4096);  // 4,165 by the rule, clamped
  CHECK(planner::requests_for(b, 1332968) == 4096);      // the pool alone holds 5,227
  CHECK(planner::request_limit_at(b, 700000) == 2187);   // 700,000 / 163,840 x 512 = 2,187.5
  CHECK(planner::requests_for(b, 700000) == 2187);       // the pool alone: 2,745
  CHECK(planner::request_limit_at(b, 100000) == 2048);
  CHECK(planner::requests_for(b, 100000) == 392);        // the pool is the limit: 100,000 / 255
  // The run's own --max-running-requests 7: 8 rows of the table.
  b.table_context_len = 0;
  b.table_fixed_rows = 8;
  b.page_size = 64;
  CHECK(planner::requests_for(b, 826 * 256) == 7);
  CHECK(planner::requests_for(b, 3 * 256) == 3);
  // One prefill (no table): the pool alone.
  b.table_fixed_rows = 0;
  CHECK(planner::request_limit_at(b, 826 * 256) == 0);
  CHECK(planner::requests_for(b, 826 * 256) == 826);
}

TEST_CASE("budget - the pool stops at the int32 slots a request table addresses", "[planner][budget]") {
  planner::BudgetResult b;
  b.kv_bytes_per_token = 384;
  for (uint64_t p : {1ull, 64ull, 1000ull}) {
    b.page_size = p;
    const uint64_t most = ((uint64_t{1} << 31) - p) / p * p;
    CHECK(planner::kv_tokens_for_bytes(b, static_cast<uint64_t>(4) << 40) == most);  // 4 TiB: more than the slots address
    CHECK(planner::kv_tokens_for_bytes(b, (most + p) * 384) == most);
    CHECK(planner::kv_tokens_for_bytes(b, (most + p) * 384 - 1) == most - p);
  }
}
