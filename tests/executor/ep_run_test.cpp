// Expert parallelism emulated on one device (`moeprof run --ep N`, RunPlan::ep; deepseek_ep.cpp):
// the outputs equal one rank's on the CPU reference, each rank's dispatch buffers hold the rows the
// routing of the whole batch sends it (counted here independently from the drawn routing), the
// worst-case buffers take T * min(top_k, E/N) rows, the meta backend allocates what the CPU does,
// and a skewed routing gives the ranks different peaks. Real ranks (`--ep N --gpus N` on the CPU
// reference: threads exchanging rows through host memory) give the same outputs, and each rank's
// allocations and peaks are the emulated rank's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/trace_io.h"
#include "executor/backends.h"
#include "executor/deepseek_model.h"
#include "executor/run.h"
#include "executor/tp_run.h"
#include "model/config.h"
#include "model/expert_parallel.h"
#include "model/routing.h"
#include "planner/analysis.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

// The tiny model: 8 routed experts, top-2, hidden 256, MoE layers 1 to 3.
constexpr int64_t kE = 8, kK = 2, kH = 256;
const std::vector<int64_t> kMoeLayers = {1, 2, 3};

std::string out_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("moeprof_ep_" + std::to_string(::getpid())) / name;
  fs::create_directories(d);
  return d.string();
}

RunPlan plan_of(const std::string& name, const char* routing, int ep, int rank, int64_t tokens,
                EpBuffers buffers = EpBuffers::kExact) {
  RunPlan plan;
  plan.model = "tiny";
  plan.tokens = tokens;
  plan.out_dir = out_dir(name);
  plan.modes = {MemoryMode::kBaseline, MemoryMode::kReuse};
  auto spec = parse_routing(routing);
  REQUIRE(spec.is_ok());
  plan.routing = *spec;
  plan.ep = ep;
  plan.ep_rank = rank;
  plan.ep_buffers = buffers;
  return plan;
}

// Allocations and frees in order: kind, name, scope, shape, bytes, category.
std::string sequence(const std::string& path) {
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  std::ostringstream os;
  for (const TraceRecord& rec : t->records) {
    if (rec.kind != EventKind::kFree && rec.kind != EventKind::kAlloc) continue;
    os << int(rec.kind) << ' ' << t->str(rec.name_id) << ' ' << t->str(rec.scope_id) << ' ' << t->str(rec.shape_id) << ' '
       << rec.bytes << ' ' << int(rec.category) << '\n';
  }
  return os.str();
}

// Bytes and category of every allocation named `name`, in order.
std::vector<std::pair<uint64_t, int>> allocations(const std::string& path, const std::string& name) {
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  std::vector<std::pair<uint64_t, int>> out;
  for (const TraceRecord& rec : t->records)
    if (rec.kind == EventKind::kAlloc && t->str(rec.name_id) == name) out.emplace_back(rec.bytes, int(rec.category));
  return out;
}

// How many allocations named `name` the trace marks data-dependent (kFlagDataDependent), of how many.
std::pair<size_t, size_t> marked(const std::string& path, const std::string& name) {
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  std::pair<size_t, size_t> n{0, 0};
  for (const TraceRecord& rec : t->records)
    if (rec.kind == EventKind::kAlloc && t->str(rec.name_id) == name) {
      n.first += (rec.flags & kFlagDataDependent) != 0 ? 1 : 0;
      ++n.second;
    }
  return n;
}

// Rows rank r receives in each MoE layer for a drawn routing of T tokens, counted from the draw.
std::vector<int64_t> rows_received(const char* routing, int64_t T, int ep, int r) {
  auto spec = parse_routing(routing);
  REQUIRE(spec.is_ok());
  auto d = RoutingDraw::create(*spec, kE, kK, RunPlan{}.seed ^ 0x4F07E5D4A11ull);  // the model's draw seed
  REQUIRE(d.is_ok());
  std::vector<uint64_t> keys(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) keys[static_cast<size_t>(t)] = routing_key(0, static_cast<uint64_t>(t));
  std::vector<int64_t> rows;
  std::vector<int32_t> ids(static_cast<size_t>(T * kK));
  for (int64_t l : kMoeLayers) {
    d->draw(l, keys, ids.data());
    const int64_t per = kE / ep;
    rows.push_back(std::count_if(ids.begin(), ids.end(), [&](int32_t e) { return e / per == r; }));
  }
  return rows;
}

}  // namespace

TEST_CASE("ep runs - EP 2 and 4 give one rank's outputs on the CPU reference, bit for bit", "[executor][ep]") {
  auto be = make_cpu_backend();
  const int64_t T = 37;
  for (const char* routing : {"router", "zipf:1.2"}) {
    INFO(routing);
    auto one = execute_run_plan(*be, plan_of(std::string("one_") + routing, routing, 1, -1, T));
    REQUIRE(one.is_ok());
    REQUIRE(one->outputs_identical);
    for (int ep : {2, 4}) {
      for (int rank : {0, ep - 1}) {
        INFO("EP " << ep << " rank " << rank);
        auto a = execute_run_plan(*be, plan_of("ep" + std::to_string(ep) + "_" + std::to_string(rank) + routing, routing, ep, rank, T));
        INFO((a.is_ok() ? std::string() : a.status().message()));
  REQUIRE(a.is_ok());
        REQUIRE(a->ep_ranks == std::vector<int>{rank});
        CHECK(a->outputs_identical);
        // Same greedy token (argmax of the last logits) and the same final hidden states: the
        // stated tolerance is zero, every row goes through the same per-row ops in the same order.
        const auto& lo = one->modes[0].output.logits;
        const auto& le = a->modes[0].output.logits;
        REQUIRE(lo.size() == le.size());
        CHECK(std::max_element(lo.begin(), lo.end()) - lo.begin() == std::max_element(le.begin(), le.end()) - le.begin());
        CHECK(a->modes[0].output.hidden_hash == one->modes[0].output.hidden_hash);
        CHECK(a->modes[0].output.hidden_tail == one->modes[0].output.hidden_tail);
        CHECK(a->modes[0].output.logits_hash == one->modes[0].output.logits_hash);
      }
    }
  }
}

TEST_CASE("ep runs - dispatch buffers hold the rows the routing sends, worst-case ones T min(k, E/N)", "[executor][ep]") {
  auto meta = make_meta_backend();
  const int64_t T = 53;
  for (int ep : {2, 4, 8}) {
    auto exact = execute_run_plan(*meta, plan_of("bytes_exact" + std::to_string(ep), "uniform", ep, -1, T));
    INFO((exact.is_ok() ? std::string() : exact.status().message()));
  REQUIRE(exact.is_ok());
    auto worst = execute_run_plan(*meta, plan_of("bytes_worst" + std::to_string(ep), "uniform", ep, -1, T, EpBuffers::kWorstCase));
    INFO((worst.is_ok() ? std::string() : worst.status().message()));
  REQUIRE(worst.is_ok());
    REQUIRE(exact->ep_ranks.size() == static_cast<size_t>(ep));
    const int64_t W = T * std::min<int64_t>(kK, kE / ep);
    CHECK(exact->ep_worst_rows == W);
    int64_t total = 0;
    for (int r = 0; r < ep; ++r) {
      INFO("EP " << ep << " rank " << r);
      const std::vector<int64_t> rows = rows_received("uniform", T, ep, r);
      const auto recv = allocations(exact->ep_rank_modes[r][0].trace_path, "dispatch_recv");
      std::vector<std::pair<uint64_t, int>> want;
      for (int64_t R : rows)
        if (R > 0) want.emplace_back(static_cast<uint64_t>(R * kH * 2), int(Category::kCommunication));
      CHECK(recv == want);
      for (int64_t R : rows) total += R;
      CHECK(exact->ep_rank_modes[r][0].moe.ep_rows_received == rows[0] + rows[1] + rows[2]);
      // Worst case: the same fixed size in every layer, whatever the rank received.
      const auto wrecv = allocations(worst->ep_rank_modes[r][0].trace_path, "dispatch_recv");
      CHECK(wrecv == std::vector<std::pair<uint64_t, int>>(3, {static_cast<uint64_t>(W * kH * 2), int(Category::kCommunication)}));
      // The send buffer: the rank's own token slice, k rows each, whatever the routing.
      const EpSlice s = ep_token_slice(T, ep, r);
      CHECK(allocations(exact->ep_rank_modes[r][0].trace_path, "dispatch_send") ==
            std::vector<std::pair<uint64_t, int>>(3, {static_cast<uint64_t>(s.size() * kK * kH * 2), int(Category::kCommunication)}));
      CHECK(allocations(exact->ep_rank_modes[r][0].trace_path, "combine_recv") ==
            std::vector<std::pair<uint64_t, int>>(3, {static_cast<uint64_t>(s.size() * kK * kH * 2), int(Category::kCommunication)}));
      // Exact buffers are sized by the routing's data, and the trace says so (fit gives them no
      // law); worst-case buffers and the send buffer of the token slice are not.
      for (const char* name : {"dispatch_recv", "hs_fp4", "gemm2_out", "combine_send"}) {
        INFO(name);
        const auto m = marked(exact->ep_rank_modes[r][0].trace_path, name);
        CHECK(m.first == m.second);
        CHECK(marked(worst->ep_rank_modes[r][0].trace_path, name) == std::pair<size_t, size_t>{0, 3});
      }
      CHECK(marked(exact->ep_rank_modes[r][0].trace_path, "dispatch_send") == std::pair<size_t, size_t>{0, 3});
      // Exact buffers stay within the worst case; worst-case ones are the same on every rank.
      CHECK(exact->ep_rank_modes[r][0].accounting.peak_activation <= worst->ep_rank_modes[r][0].accounting.peak_activation);
      CHECK(exact->ep_rank_modes[r][0].accounting.peak_activation_worst >= exact->ep_rank_modes[r][0].accounting.peak_activation);
      // Worst-case buffers cannot grow with the routing; an exact rank at its worst routing holds
      // what the worst-case one does.
      CHECK(worst->ep_rank_modes[r][0].accounting.peak_activation_worst == worst->ep_rank_modes[r][0].accounting.peak_activation);
      CHECK(exact->ep_rank_modes[r][0].accounting.peak_activation_worst == worst->ep_rank_modes[r][0].accounting.peak_activation);
      // (ranks whose token slices are as long: a slice's send and combine buffers follow its length).
      if (s.size() == ep_token_slice(T, ep, 0).size())
        CHECK(worst->ep_rank_modes[r][0].accounting.peak_activation == worst->ep_rank_modes[0][0].accounting.peak_activation);
    }
    CHECK(total == 3 * T * kK);  // every pair received once
  }
}

TEST_CASE("ep runs - a rank that receives nothing still counts the worst case under the worst routing", "[executor][ep]") {
  // One token, top-2 of 8 experts on 8 ranks: at most 2 ranks receive a row in each layer, the
  // others none. Their exact buffers have no rows, and carry their size at the worst case, so the
  // peak under the worst routing is the worst-case buffers' peak on every rank, received or not.
  auto meta = make_meta_backend();
  const int64_t T = 1;
  const int ep = 8;
  auto exact = execute_run_plan(*meta, plan_of("none_exact", "uniform", ep, -1, T));
  auto worst = execute_run_plan(*meta, plan_of("none_worst", "uniform", ep, -1, T, EpBuffers::kWorstCase));
  INFO((exact.is_ok() ? std::string() : exact.status().message()));
  REQUIRE(exact.is_ok());
  INFO((worst.is_ok() ? std::string() : worst.status().message()));
  REQUIRE(worst.is_ok());
  int idle = 0;
  for (int r = 0; r < ep; ++r) {
    INFO("rank " << r);
    const std::vector<int64_t> rows = rows_received("uniform", T, ep, r);
    const auto& e = exact->ep_rank_modes[r][0];
    CHECK(e.accounting.peak_activation_worst == worst->ep_rank_modes[r][0].accounting.peak_activation);
    CHECK(e.accounting.peak_activation <= worst->ep_rank_modes[r][0].accounting.peak_activation);
    // A dispatch buffer in each MoE layer whose call sent the rank rows; none, and no allocation of
    // 0 bytes (an anomaly to the planner), where none came: the worst case is the accounting's.
    std::vector<std::pair<uint64_t, int>> want;
    for (int64_t R : rows)
      if (R > 0) want.emplace_back(static_cast<uint64_t>(R * kH * 2), int(Category::kCommunication));
    CHECK(allocations(e.trace_path, "dispatch_recv") == want);
    auto t = read_trace(e.trace_path);
    REQUIRE(t.is_ok());
    for (const TraceRecord& rec : t->records) CHECK_FALSE((rec.kind == EventKind::kAlloc && rec.bytes == 0));
    const planner::RunAnalysis an = planner::analyze(*t);
    CHECK(an.anomalies.total() == 0);
    CHECK(an.anomalies.unknown_uses == 0);
    if (rows[0] + rows[1] + rows[2] == 0) {
      ++idle;
      CHECK(e.moe.rows_allocated == 0);
      CHECK(e.accounting.peak_activation < e.accounting.peak_activation_worst);
    }
  }
  CHECK(idle > 0);
  // Every rank's worst is the same, so the measured peak picks the rank that sets the budget.
  CHECK(exact->modes[0].accounting.peak_activation_worst == worst->modes[0].accounting.peak_activation);
}

TEST_CASE("ep runs - the meta backend allocates what the CPU reference does for each rank", "[executor][ep]") {
  auto cpu = make_cpu_backend();
  auto meta = make_meta_backend();
  const int64_t T = 29;
  for (EpBuffers b : {EpBuffers::kExact, EpBuffers::kWorstCase}) {
    for (int rank : {0, 1, 3}) {
      INFO("rank " << rank << " " << ep_buffers_name(b));
      const std::string tag = std::to_string(rank) + std::string(ep_buffers_name(b));
      auto c = execute_run_plan(*cpu, plan_of("seq_cpu" + tag, "zipf:1.5", 4, rank, T, b));
      auto m = execute_run_plan(*meta, plan_of("seq_meta" + tag, "zipf:1.5", 4, rank, T, b));
      INFO((c.is_ok() ? std::string() : c.status().message()));
  REQUIRE(c.is_ok());
      INFO((m.is_ok() ? std::string() : m.status().message()));
  REQUIRE(m.is_ok());
      for (size_t mode = 0; mode < 2; ++mode) {
        CHECK(sequence(c->modes[mode].trace_path) == sequence(m->modes[mode].trace_path));
        CHECK(c->modes[mode].accounting.peak_activation == m->modes[mode].accounting.peak_activation);
      }
    }
  }
}

TEST_CASE("ep runs - a hot expert puts its rank above the others, the worst case above all", "[executor][ep]") {
  auto meta = make_meta_backend();
  const int64_t T = 400;
  auto hot = execute_run_plan(*meta, plan_of("skew_hot", "hot:1", 4, -1, T));
  auto uni = execute_run_plan(*meta, plan_of("skew_uniform", "uniform", 4, -1, T));
  auto worst = execute_run_plan(*meta, plan_of("skew_worst", "uniform", 4, -1, T, EpBuffers::kWorstCase));
  INFO((hot.is_ok() ? std::string() : hot.status().message()));
  REQUIRE(hot.is_ok());
  INFO((uni.is_ok() ? std::string() : uni.status().message()));
  REQUIRE(uni.is_ok());
  INFO((worst.is_ok() ? std::string() : worst.status().message()));
  REQUIRE(worst.is_ok());
  // The hot expert of each layer takes every token: its rank receives T rows from it alone.
  std::vector<uint64_t> peaks;
  for (size_t i = 0; i < 4; ++i) peaks.push_back(hot->ep_rank_modes[i][0].accounting.peak_activation);
  const auto top = std::max_element(peaks.begin(), peaks.end());
  CHECK(*std::min_element(peaks.begin(), peaks.end()) < *top);
  CHECK(hot->budget_ranks[0] == static_cast<int>(top - peaks.begin()));
  CHECK(hot->modes[0].accounting.peak_activation == *top);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(hot->ep_rank_modes[i][0].accounting.peak_activation <= worst->ep_rank_modes[i][0].accounting.peak_activation);
    CHECK(uni->ep_rank_modes[i][0].accounting.peak_activation <= worst->ep_rank_modes[i][0].accounting.peak_activation);
  }
  CHECK(*top > uni->modes[0].accounting.peak_activation);
}

TEST_CASE("ep runs - bad EP options are refused with one line", "[executor][ep]") {
  auto meta = make_meta_backend();
  auto three = execute_run_plan(*meta, plan_of("bad3", "uniform", 3, -1, 16));
  REQUIRE_FALSE(three.is_ok());
  CHECK(three.status().message() == "--ep 3 does not divide tiny's 8 routed experts");
  auto rank = execute_run_plan(*meta, plan_of("badrank", "uniform", 2, 2, 16));
  REQUIRE_FALSE(rank.is_ok());
  CHECK(rank.status().message() == "--ep-rank 2 is not below --ep 2");
}

TEST_CASE("ep runs - real CPU ranks exchange the rows: EP=1's outputs, each rank's allocations the emulated rank's", "[executor][ep]") {
  auto cpu = make_cpu_backend();
  auto meta = make_meta_backend();
  const int64_t T = 41;  // slices of 20+21 (EP 2) and 10,10,10,11 (EP 4) tokens
  int case_no = 0;
  for (const char* routing : {"router", "zipf:1.2"}) {
    auto one = execute_run_plan(*cpu, plan_of(std::string("real_one") + std::to_string(case_no), routing, 1, -1, T));
    REQUIRE(one.is_ok());
    for (int ep : {2, 4}) {
      for (EpBuffers b : {EpBuffers::kExact, EpBuffers::kWorstCase}) {
        INFO(routing << " EP " << ep << " " << ep_buffers_name(b));
        const std::string tag = std::to_string(++case_no);
        RunPlan plan = plan_of("real" + tag, routing, ep, -1, T, b);
        auto real = execute_tp_run_plan(plan, ep, "cpu");
        INFO((real.is_ok() ? std::string() : real.status().message()));
        REQUIRE(real.is_ok());
        CHECK_FALSE(real->ep_emulated);
        REQUIRE(real->ep == ep);
        REQUIRE(real->rank_modes.size() == static_cast<size_t>(ep));
        REQUIRE(real->ep_ranks.size() == static_cast<size_t>(ep));
        CHECK(real->outputs_identical);  // every rank and mode: the same all-gathered output
        for (int r = 0; r < ep; ++r) {
          INFO("rank " << r);
          // The model's output, as with one rank: stated tolerance zero (every row goes through
          // the same per-row ops, summed in the same order). A rank's result comes back from its
          // trace, which holds the hashes of every final hidden state and of the logits (so the
          // same greedy token).
          const ForwardOutput& o = real->rank_modes[static_cast<size_t>(r)][0].output;
          CHECK(o.hidden_hash == one->modes[0].output.hidden_hash);
          CHECK(o.logits_hash == one->modes[0].output.logits_hash);
          // The emulated rank on the meta backend (a drawn routing) or the CPU reference (the
          // router's): the same allocations in the same order, the same peaks.
          RunPlan e = plan_of("emu" + tag + "_" + std::to_string(r), routing, ep, r, T, b);
          Backend& eb = std::string(routing) == "router" ? *cpu : *meta;
          auto emu = execute_run_plan(eb, e);
          REQUIRE(emu.is_ok());
          for (size_t m = 0; m < 2; ++m) {
            const ModeResult& rm = real->rank_modes[static_cast<size_t>(r)][m];
            CHECK(sequence(rm.trace_path) == sequence(emu->modes[m].trace_path));
            CHECK(rm.accounting.peak_activation == emu->modes[m].accounting.peak_activation);
            CHECK(rm.accounting.peak_activation_worst == emu->modes[m].accounting.peak_activation_worst);
            CHECK(rm.moe.ep_rows_received == emu->modes[m].moe.ep_rows_received);
            CHECK(real->ep_rank_modes[static_cast<size_t>(r)][m].accounting.peak_activation == rm.accounting.peak_activation);
          }
        }
        // The budget rank is the one with the largest peak.
        for (size_t m = 0; m < 2; ++m) {
          uint64_t top = 0;
          for (int r = 0; r < ep; ++r) top = std::max(top, real->rank_modes[static_cast<size_t>(r)][m].accounting.peak_activation);
          CHECK(real->rank_modes[static_cast<size_t>(real->budget_ranks[m])][m].accounting.peak_activation == top);
        }
      }
    }
  }
}

TEST_CASE("ep runs - real CPU ranks: a wrong rank count is refused with one line", "[executor][ep]") {
  RunPlan plan = plan_of("real_bad", "uniform", 4, -1, 16);
  auto r = execute_tp_run_plan(plan, 2, "cpu");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() == "--ep 4 over real ranks runs one EP rank per device: --gpus must be 4 (got 2)");
}

TEST_CASE("ep runs - DP attention: each real rank's request gives what it gives alone, emulated ranks allocate the same", "[executor][ep]") {
  auto cpu = make_cpu_backend();
  auto meta = make_meta_backend();
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  const int64_t T = 43;  // requests of 21+22 (EP 2), 10,11,11,11 (EP 4) tokens
  int case_no = 0;
  for (int ep : {2, 4}) {
    // The router's routing: rank r's request through the EP ranks equals the request run alone
    // on one device with every expert (the same prompt: tokens [r T/N, (r+1) T/N) of the batch's).
    RunPlan plan = plan_of("dp_real" + std::to_string(ep), "router", ep, -1, T);
    plan.dp_attention = true;
    auto real = execute_tp_run_plan(plan, ep, "cpu");
    INFO((real.is_ok() ? std::string() : real.status().message()));
    REQUIRE(real.is_ok());
    CHECK(real->dp_attention);
    CHECK(real->outputs_identical);  // every rank: its modes agree
    for (int r = 0; r < ep; ++r) {
      INFO("EP " << ep << " rank " << r);
      const EpSlice sl = ep_token_slice(T, ep, r);
      auto shape = make_rank_shape(*cfg, sl.size(), 1, 0, 0);
      REQUIRE(shape.is_ok());
      shape->token_offset = sl.begin;  // its prompt, alone: no EP, no DP
      RunPlan alone = plan_of("dp_alone" + std::to_string(ep) + "_" + std::to_string(r), "router", 1, -1, sl.size());
      RankModeOptions opt;
      opt.trace_path = alone.out_dir + "/baseline.mtrace";
      auto ref = run_rank_mode(*cpu, *cfg, *shape, alone, MemoryMode::kBaseline, opt);
      REQUIRE(ref.is_ok());
      const ForwardOutput& o = real->rank_modes[static_cast<size_t>(r)][0].output;
      CHECK(o.hidden_hash == ref->output.hidden_hash);
      CHECK(o.logits_hash == ref->output.logits_hash);
      // Its trace holds its own request.
      auto t = read_trace(real->rank_modes[static_cast<size_t>(r)][0].trace_path);
      REQUIRE(t.is_ok());
      CHECK(t->meta.tokens == static_cast<uint64_t>(sl.size()));
      CHECK(t->meta.extra.at("dp_attention") == "true");
    }
    // Different requests on different ranks: their outputs differ.
    CHECK(real->rank_modes[0][0].output.hidden_hash != real->rank_modes[1][0].output.hidden_hash);
    // A drawn routing: each real rank allocates what the meta backend's emulated rank does.
    for (EpBuffers b : {EpBuffers::kExact, EpBuffers::kWorstCase}) {
      INFO("EP " << ep << " " << ep_buffers_name(b));
      const std::string tag = std::to_string(++case_no);
      RunPlan drawn = plan_of("dp_drawn" + tag, "zipf:1.2", ep, -1, T, b);
      drawn.dp_attention = true;
      auto rr = execute_tp_run_plan(drawn, ep, "cpu");
      REQUIRE(rr.is_ok());
      RunPlan emu_plan = plan_of("dp_emu" + tag, "zipf:1.2", ep, -1, T, b);
      emu_plan.dp_attention = true;
      auto emu = execute_run_plan(*meta, emu_plan);
      REQUIRE(emu.is_ok());
      REQUIRE(emu->ep_ranks.size() == static_cast<size_t>(ep));
      for (int r = 0; r < ep; ++r)
        for (size_t m = 0; m < 2; ++m) {
          INFO("rank " << r << " mode " << m);
          const ModeResult& a = rr->rank_modes[static_cast<size_t>(r)][m];
          const ModeResult& e = emu->ep_rank_modes[static_cast<size_t>(r)][m];
          CHECK(sequence(a.trace_path) == sequence(e.trace_path));
          CHECK(a.accounting.peak_activation == e.accounting.peak_activation);
          CHECK(a.moe.ep_rows_received == e.moe.ep_rows_received);
        }
    }
  }
  // On one device the other ranks' routers cannot run: a drawn routing is needed.
  RunPlan bad = plan_of("dp_bad", "router", 2, 0, T);
  bad.dp_attention = true;
  auto no = execute_run_plan(*cpu, bad);
  REQUIRE_FALSE(no.is_ok());
  CHECK(no.status().message().find("--dp on one device needs a drawn routing") != std::string::npos);
}

// An emulated rank that computes only its own experts (the CUDA and meta backends; here the CPU
// reference with ep_compute_all off) leaves the other slices' MoE output rows uncomputed. They are
// zeros: they had held whatever the buffer held (a fresh block in the baseline, the previous
// layer's hidden states in the reuse mode), and the modes' outputs differed on an H100.
TEST_CASE("ep runs - an emulated rank without the others' experts gives the same outputs in every mode", "[executor][ep]") {
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  auto be = make_cpu_backend();
  auto spec = parse_routing("uniform");
  REQUIRE(spec.is_ok());
  for (int rank : {0, 1}) {
    std::vector<uint64_t> hidden, logits;
    for (MemoryMode mode : {MemoryMode::kBaseline, MemoryMode::kReuse, MemoryMode::kFixes}) {
      auto shape = make_rank_shape(*cfg, 45, 1, 0, 0);
      REQUIRE(shape.is_ok());
      shape->ep_size = 2;
      shape->ep_rank = rank;
      ModelOptions mo;
      mo.routing = *spec;
      mo.ep_compute_all = false;
      auto model = DeepseekModel::create(*be, *cfg, *shape, mode, mo);
      REQUIRE(model.is_ok());
      auto out = model.value()->forward();
      REQUIRE(out.is_ok());
      hidden.push_back(out->hidden_hash);
      logits.push_back(out->logits_hash);
    }
    INFO("rank " << rank);
    CHECK(hidden[1] == hidden[0]);
    CHECK(hidden[2] == hidden[0]);
    CHECK(logits[1] == logits[0]);
    CHECK(logits[2] == logits[0]);
  }
}
