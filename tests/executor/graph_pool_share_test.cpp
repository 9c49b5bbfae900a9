// One CUDA-graph pool shared by the decode graphs (executor/graph_runner.h, shared_pool_need): a
// capture's live peak is its own blocks plus the outputs of the larger graphs captured before it,
// and the need of any subset of sizes, computed from one run's captures, is what a run capturing
// only that subset measures, on the CPU reference and the meta backend alike.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <optional>

#include "executor/backends.h"
#include "executor/graph_runner.h"
#include "executor/run.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

// A baseline serving run of tiny: the workload of these tests, unless `so` is given.
ServingResult serve(Backend& be, const std::string& name, std::vector<int64_t> sizes, std::optional<ServingOptions> given = {}) {
  RunPlan plan;
  plan.model = "tiny";
  plan.out_dir = (fs::temp_directory_path() / ("moeprof_graph_share_" + std::to_string(::getpid())) / name).string();
  fs::create_directories(plan.out_dir);
  plan.modes = {MemoryMode::kBaseline};
  ServingOptions so;
  so.workload = "synthetic:9,3-30,2-9,7";
  so.chunked_prefill_size = 24;
  so.page_size = 4;
  so.max_running_requests = 8;
  so.kv_tokens = 300;
  if (given) so = *given;
  so.cuda_graph_bs = std::move(sizes);
  plan.serving = so;
  auto r = execute_run_plan(be, plan);
  REQUIRE(r.is_ok());
  REQUIRE(r->modes[0].serving);
  return *r->modes[0].serving;
}

uint64_t max_live_peak(const ServingResult& s) {
  uint64_t m = 0;
  for (const GraphCapture& c : s.graph_captures) m = std::max(m, c.live_peak_bytes);
  return m;
}

const GraphCapture& capture(const ServingResult& s, int64_t bs) {
  for (const GraphCapture& c : s.graph_captures)
    if (c.bs == bs) return c;
  FAIL("no capture of batch " << bs);
  return s.graph_captures.front();
}

}  // namespace

TEST_CASE("graph pool - a capture's peak is its own blocks plus the larger graphs' outputs, not the sum of the graphs", "[executor][graphs]") {
  auto be = make_cpu_backend();
  const ServingResult all = serve(*be, "all", {1, 3, 5, 8});
  REQUIRE(all.graph_captures.size() == 4);
  // Captured largest first: only the outputs (logits [bs, vocab] f32, in 512-byte blocks) of the
  // larger graphs stay live into a smaller one's capture.
  uint64_t outputs = 0;
  for (auto it = all.graph_captures.rbegin(); it != all.graph_captures.rend(); ++it) {
    INFO("bs " << it->bs);
    CHECK(it->output_bytes == static_cast<uint64_t>(it->bs) * 1000 * 4);
    CHECK(it->output_block_bytes == (it->output_bytes + 511) / 512 * 512);
    CHECK(it->own_peak_bytes > 0);
    CHECK(it->live_peak_bytes == it->own_peak_bytes + outputs);
    outputs += it->output_block_bytes;
  }
  auto need = shared_pool_need(all.graph_captures, {8, 5, 3, 1});
  REQUIRE(need.is_ok());
  CHECK(need->need_bytes == max_live_peak(all));
  uint64_t sum = 0;
  for (const GraphCapture& c : all.graph_captures) sum += c.own_peak_bytes;
  CHECK(need->separate_bytes == sum);
  CHECK(need->need_bytes < need->separate_bytes);  // one pool needs less than one per graph
  CHECK(all.graph_pool_bytes >= need->need_bytes);  // the segments hold it
  CHECK(!shared_pool_need(all.graph_captures, {1, 4}).is_ok());
}

TEST_CASE("graph pool - the need of a subset of sizes, from one run's captures, is what a run of that subset measures", "[executor][graphs]") {
  auto cpu = make_cpu_backend();
  auto meta = make_meta_backend();
  const ServingResult all = serve(*cpu, "all_cpu", {1, 3, 5, 8});
  const ServingResult all_meta = serve(*meta, "all_meta", {1, 3, 5, 8});
  for (size_t i = 0; i < all.graph_captures.size(); ++i) {
    CHECK(all.graph_captures[i].own_peak_bytes == all_meta.graph_captures[i].own_peak_bytes);
    CHECK(all.graph_captures[i].live_peak_bytes == all_meta.graph_captures[i].live_peak_bytes);
  }
  for (const std::vector<int64_t>& subset : {std::vector<int64_t>{1, 5}, {3, 8}, {1, 3, 5}, {5}}) {
    std::string name = "sub";
    for (int64_t b : subset) name += "_" + std::to_string(b);
    INFO(name);
    const ServingResult part = serve(*cpu, name, subset);
    auto predicted = shared_pool_need(all.graph_captures, subset);
    REQUIRE(predicted.is_ok());
    CHECK(max_live_peak(part) == predicted->need_bytes);
    for (int64_t bs : subset) CHECK(capture(part, bs).own_peak_bytes == capture(all, bs).own_peak_bytes);
    CHECK(part.graph_pool_bytes >= predicted->need_bytes);
    if (subset.size() == 1) CHECK(predicted->need_bytes == predicted->separate_bytes);
  }
}

// SGLang's get_batch_sizes_to_capture: a list that goes past --max-running-requests gets that size
// too, so the largest batch that can run replays a graph (the list had only been cut: a decode
// batch of 3 under a limit of 3 ran eagerly, and `--cuda-graph-bs 4096` captured nothing).
TEST_CASE("graph sizes - the request limit is captured when the list goes past it", "[executor][graphs]") {
  CHECK(graph_capture_sizes({1, 2, 4, 8}, 0, 3) == std::vector<int64_t>{1, 2, 3});
  CHECK(graph_capture_sizes({4096}, 0, 4) == std::vector<int64_t>{4});
  CHECK(graph_capture_sizes({1, 2, 4, 8}, 0, 8) == std::vector<int64_t>{1, 2, 4, 8});  // not past it: as given
  CHECK(graph_capture_sizes({1, 2, 4, 8}, 2, 3) == std::vector<int64_t>{1, 2});        // --cuda-graph-max-bs still cuts
  CHECK(graph_capture_sizes({8, 2, 2, 4}, 0, 100) == std::vector<int64_t>{2, 4, 8});   // ascending, each once
  const std::vector<int64_t> d = default_graph_sizes(uint64_t{150} << 30, 0, 37);
  CHECK(d == std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 37});
  // A run: every decode batch of 3 requests under a limit of 3 replays the graph of 3.
  auto be = make_cpu_backend();
  ServingOptions so;
  so.workload = "synthetic:3,3,3";
  so.max_running_requests = 3;
  so.kv_tokens = 64;
  const ServingResult s = serve(*be, "limit", {}, so);  // the default list
  CHECK(s.graph_sizes == std::vector<int64_t>{1, 2, 3});
}
