// `moeprof budget` and `moeprof run --gpu-memory` through the binary: the seed case's saving in KV
// tokens from meta runs, components that sum to the device, the budget's edge checked by running
// the meta backend as a device of that size (one byte less fails with exit 3 and a readable
// trace), the output files, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "tests/cli/cli_util.h"

namespace fs = std::filesystem;
using moeprof::testing::count_lines;
using moeprof::testing::run_cli;

namespace {

int64_t sum_components(const nlohmann::json& j) {
  int64_t s = 0;
  for (const auto& c : j["components"]) s += c["bytes"].get<int64_t>();
  return s;
}

int64_t component(const nlohmann::json& j, const std::string& name) {
  for (const auto& c : j["components"])
    if (c["name"] == name) return c["bytes"];
  FAIL("no component " << name);
  return 0;
}

// `moeprof budget` of tiny at 37 tokens on the meta backend, on a device of 80,000,000 B, as JSON.
nlohmann::json tiny_budget(const std::string& opts) {
  auto r = run_cli("budget --backend meta --model tiny --tokens 37 --mode baseline --gpu-memory 80,000,000 --json " + opts);
  INFO(opts << "\n" << r.err);
  REQUIRE(r.rc == 0);
  return nlohmann::json::parse(r.out);
}

// A budget's component by name ({} when it has none; component() above: its bytes, which must be
// there), and its bytes, -1 when it has none.
nlohmann::json find_component(const nlohmann::json& j, const std::string& name) {
  for (const auto& c : j["components"])
    if (c["name"] == name) return c;
  return {};
}
int64_t component_bytes(const nlohmann::json& j, const std::string& name) {
  const auto c = find_component(j, name);
  return c.is_null() ? -1 : c["bytes"].get<int64_t>();
}

}  // namespace

TEST_CASE("moeprof budget: the seed's saving is 538,968,064 B = 7,669 KV tokens per rank", "[cli][budget]") {
  auto r = run_cli("budget --backend meta --model kimi-k2.5 --tp 4 --tokens 16384 --mode both --gpu-memory B200 --fixes 0 --json");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["gpu_memory_bytes"] == 192'265'846'784ull);
  CHECK(j["gpu_name"] == "B200");
  CHECK(sum_components(j) == 192'265'846'784ll);
  CHECK(j["components_sum_bytes"] == 192'265'846'784ll);
  CHECK(j["kv_bytes_per_token"] == 70'272);  // (512 + 64) x 61 x 2
  CHECK(j["kv_check"].get<std::string>().find("agrees") != std::string::npos);
  REQUIRE(j["modes"].size() == 2);
  const auto& reuse = j["modes"][1];
  CHECK(reuse["name"] == "reuse");
  CHECK(reuse["saved_bytes"] == 538'968'064);
  CHECK(reuse["saved_tokens"] == 7'669);
  // The capacities themselves: the pool is what is left after the fixed needs, 70,272 B a token,
  // one padding row.
  for (const auto& m : j["modes"]) {
    const int64_t avail = 192'265'846'784ll - component(j, "weights") - m["activation_peak_bytes"].get<int64_t>() -
                          component(j, "graph_pool") - component(j, "allocator_rest") - component(j, "margin");
    CHECK(m["kv_tokens"].get<int64_t>() == avail / 70'272 - 1);
  }
  CHECK(reuse["kv_tokens_gained"].get<int64_t>() == reuse["kv_tokens"].get<int64_t>() - j["modes"][0]["kv_tokens"].get<int64_t>());
  CHECK(j["worst_step"]["step"] == "prefill");
  CHECK(j["requests"].get<uint64_t>() == j["kv_tokens"].get<uint64_t>() / 16384);
  REQUIRE(j["mem_fraction_static"].is_number());
  CHECK(j["mem_fraction_static"].get<double>() == std::stod(j["mem_fraction_static_detail"]["value"].get<std::string>()));
  CHECK(j["mem_fraction_static"].get<double>() > 0.97);
  CHECK(j["mem_fraction_static"].get<double>() < 1.0);
}

TEST_CASE("moeprof run --gpu-memory: the run's own total completes, one byte less fails with exit 3 and a readable trace", "[cli][budget]") {
  const fs::path dir = moeprof::testing::temp_dir("budget_cli_edge");
  auto base = run_cli("run --backend meta --model tiny --tokens 64 --mode baseline --quiet --out '" + (dir / "free").string() + "'");
  REQUIRE(base.rc == 0);
  auto tr = moeprof::read_trace((dir / "free" / "baseline.mtrace").string());
  REQUIRE(tr.is_ok());
  const uint64_t total = moeprof::planner::analyze(tr.value()).peak_total_bytes;
  REQUIRE(total > 0);
  auto at = run_cli("run --backend meta --model tiny --tokens 64 --mode baseline --weights per-layer --quiet --gpu-memory " + std::to_string(total) + " --out '" +
                    (dir / "at").string() + "'");
  INFO(at.err);
  CHECK(at.rc == 0);
  auto below = run_cli("run --backend meta --model tiny --tokens 64 --mode baseline --weights per-layer --quiet --gpu-memory " + std::to_string(total - 1) +
                       " --out '" + (dir / "below").string() + "'");
  CHECK(below.rc == 3);
  CHECK(count_lines(below.err) == 1);
  CHECK(below.err.find("out of GPU memory") != std::string::npos);
  CHECK(below.err.find("layer.") != std::string::npos);  // the scope of the allocation that failed
  CHECK(below.err.find("trace kept") != std::string::npos);
  auto kept = moeprof::read_trace((dir / "below" / "baseline.mtrace").string());
  REQUIRE(kept.is_ok());
  CHECK_FALSE(kept->truncated);
  CHECK(kept->meta.extra.count("error") == 1);
  CHECK(moeprof::planner::analyze(kept.value()).peak_total_bytes <= total - 1);
  // The budget at the run's total: the trace's 64 tokens of KV, less SGLang's padding row; one
  // byte less and the last slot is gone.
  const std::string trace = (dir / "free" / "baseline.mtrace").string();
  auto b = run_cli("budget '" + trace + "' --gpu-memory " + std::to_string(total) + " --json");
  INFO(b.err);
  REQUIRE(b.rc == 0);
  auto j = nlohmann::json::parse(b.out);
  CHECK(j["kv_tokens"] == 63);
  CHECK(component(j, "free") == 0);
  CHECK(sum_components(j) == static_cast<int64_t>(total));
  auto b1 = run_cli("budget '" + trace + "' --gpu-memory " + std::to_string(total - 1) + " --json");
  REQUIRE(b1.rc == 0);
  CHECK(nlohmann::json::parse(b1.out)["kv_tokens"] == 62);
  // --gpu-memory needs the meta backend.
  auto cpu = run_cli("run --backend cpu --model tiny --gpu-memory H200 --quiet");
  CHECK(cpu.rc == 2);
  CHECK(count_lines(cpu.err) == 1);
}

TEST_CASE("moeprof budget writes JSON, Markdown and HTML with the same figures, and refuses bad input in one line", "[cli][budget]") {
  const fs::path dir = moeprof::testing::temp_dir("budget_cli_files");
  auto r = run_cli("budget --backend meta --model tiny --tokens 100 --gpu-memory 80,000,000 --request-tokens 333 --page-size 16 --out '" +
                   (dir / "runs").string() + "' --out-json '" + (dir / "b.json").string() + "' --out-md '" + (dir / "b.md").string() +
                   "' --out-html '" + (dir / "b.html").string() + "'");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(fs::exists(dir / "runs" / "baseline.mtrace"));
  CHECK(fs::exists(dir / "runs" / "fixes.mtrace"));
  std::ifstream in(dir / "b.json");
  const auto j = nlohmann::json::parse(in);
  CHECK(sum_components(j) == 80'000'000);
  CHECK(j["page_size"] == 16);
  CHECK(j["kv_tokens"].get<uint64_t>() % 16 == 0);
  CHECK(j["request_tokens"] == 333);
  CHECK(j["requests"].get<uint64_t>() == j["kv_tokens"].get<uint64_t>() / 336);  // 333 tokens take 21 pages
  CHECK(j["modes"].size() == 3);
  CHECK_FALSE(j["fixes"].empty());
  const std::string kv = std::to_string(j["kv_tokens"].get<uint64_t>());
  auto slurp = [](const fs::path& p) { return moeprof::testing::slurp(p.string()); };
  const std::string md = slurp(dir / "b.md"), html = slurp(dir / "b.html");
  CHECK(md.find("| weights |") != std::string::npos);
  CHECK(html.find("id=\"budget-table\"") != std::string::npos);
  CHECK(html.find("80,000,000 B") != std::string::npos);
  CHECK(r.out.find("KV capacity") != std::string::npos);
  for (const std::string& bad : {std::string("budget --backend meta --model tiny --tokens 100 --gpu-memory H300"),
                                 std::string("budget --gpu-memory H200"), std::string("budget /nonexistent.mtrace --gpu-memory H200"),
                                 std::string("budget --backend meta --model gpt-17 --tokens 5 --gpu-memory H200")}) {
    auto e = run_cli(bad);
    INFO(bad << "\n" << e.err);
    CHECK(e.rc == 2);
    CHECK(count_lines(e.err) == 1);
    CHECK(e.err.rfind("moeprof budget: error: ", 0) == 0);
  }
}

TEST_CASE("moeprof budget: a run with routed rows reserves the worst routing's activation peak", "[cli][budget][routing]") {
  const auto plain = tiny_budget(""), uniform = tiny_budget("--routing uniform --moe-rows routed"),
             worst = tiny_budget("--routing worst --moe-rows routed");
  const auto comp = component_bytes;
  CHECK(comp(plain, "routing_worst") == -1);  // the bound: nothing follows the routing
  for (const auto* j : {&plain, &uniform, &worst}) CHECK(sum_components(*j) == 80'000'000);
  // Uniform pads fewer rows than the worst routing: the budget reserves the difference, so the
  // activation peak plus the reserve is the worst routing's peak, which the worst run measures.
  const int64_t reserve = comp(uniform, "routing_worst");
  CHECK(reserve > 0);
  CHECK(comp(worst, "routing_worst") == 0);
  CHECK(uniform["worst_step"]["activation_peak_bytes"].get<int64_t>() + reserve == worst["worst_step"]["activation_peak_bytes"].get<int64_t>());
  CHECK(uniform["worst_step"]["worst_routing_peak_bytes"] == worst["worst_step"]["activation_peak_bytes"]);
  CHECK(uniform["worst_step"]["routing"] == "uniform");
  CHECK(uniform["kv_tokens"] == worst["kv_tokens"]);
  // The bound is never below the worst routing's rows: it leaves no more KV.
  CHECK(uniform["kv_tokens"].get<uint64_t>() >= plain["kv_tokens"].get<uint64_t>());
  auto e = run_cli("budget /nonexistent.mtrace --gpu-memory H200 --routing uniform");
  CHECK(e.rc == 2);
  CHECK(count_lines(e.err) == 1);
}

TEST_CASE("moeprof budget: a run with shared expert weights is budgeted with every layer's", "[cli][budget]") {
  // --weights shared (or auto where per-layer weights do not fit the device that runs it) aliases
  // one MoE layer's experts into every MoE layer; a deployment holds them all, so the budget
  // counts the aliased bytes: the same weights and KV capacity as a per-layer run, to the byte.
  const auto shared = tiny_budget("--weights shared"), per_layer = tiny_budget("--weights per-layer");
  const auto comp = find_component;
  CHECK(comp(shared, "weights")["bytes"] == comp(per_layer, "weights")["bytes"]);
  CHECK(comp(shared, "weights")["detail"].get<std::string>().find("aliased (--weights shared)") != std::string::npos);
  CHECK(comp(per_layer, "weights")["detail"] == "the weights category's high-water mark");
  CHECK(shared["kv_tokens"] == per_layer["kv_tokens"]);
}

TEST_CASE("moeprof budget: expert parallelism with exact buffers reserves the worst routing, as worst-case buffers allocate it", "[cli][budget][ep]") {
  const auto exact = tiny_budget("--ep 4 --routing uniform"), fixed = tiny_budget("--ep 4 --routing uniform --ep-buffers worst-case");
  const auto comp = component_bytes;
  const int64_t reserve = comp(exact, "routing_worst");
  CHECK(reserve > 0);  // uniform routing sends a rank fewer rows than its worst case
  CHECK(comp(fixed, "routing_worst") == -1);  // worst-case buffers do not follow the routing
  CHECK(exact["worst_step"]["activation_peak_bytes"].get<int64_t>() + reserve == fixed["worst_step"]["activation_peak_bytes"].get<int64_t>());
  CHECK(exact["kv_tokens"] == fixed["kv_tokens"]);
  for (const auto* j : {&exact, &fixed}) CHECK(sum_components(*j) == 80'000'000);
  // A trace says its own run: the meta run's options beside one are refused, not ignored.
  const fs::path dir = moeprof::testing::temp_dir("budget_cli_ep");
  REQUIRE(run_cli("run --backend meta --model tiny --tokens 37 --ep 4 --ep-rank 1 --routing uniform --mode baseline --quiet -o '" +
                  dir.string() + "'").rc == 0);
  for (const char* opt : {"--ep 4", "--ep-buffers worst-case", "--dp 4", "--tp 2", "--layers 2", "--tokens 9"}) {
    auto e = run_cli("budget '" + (dir / "baseline.mtrace").string() + "' --gpu-memory 80,000,000 " + opt);
    INFO(opt << ": " << e.err);
    CHECK(e.rc == 2);
    CHECK(count_lines(e.err) == 1);
    CHECK(e.err.find("is an option of the meta run (--backend meta)") != std::string::npos);
  }
}

namespace {

nlohmann::json serving_of(const fs::path& report) {
  std::ifstream in(report);
  return nlohmann::json::parse(in)["runs"][0]["serving"];
}

}  // namespace

// A serving run's trace: the pool's bytes per token come from the pool (not the KV category, which
// also holds the request table), the request table is its own component, and the capacity is
// checked by running the meta backend as the device: the pool at kv_tokens completes, one page
// more fails with exit 3, and the --mem-fraction-static the budget prints gives kv_tokens.
TEST_CASE("moeprof budget of a serving trace: the capacity runs, one page more fails, the printed fraction gives it", "[cli][budget][serving]") {
  const fs::path dir = moeprof::testing::temp_dir("budget_cli_serving");
  struct Case {
    std::string name, options;
    uint64_t page;
    int64_t want_tokens;  // the capacity the device is built for
  };
  // SGLang's rule sizes the request table from the pool: with a 256-token context, 1,501 tokens
  // give clamp(1,501 / 256 x 512, 2048, 4096) + 1 = 3,003 rows, so the table grows with the pool.
  // With --max-running-requests the table is fixed; page 4 makes the pool whole pages.
  for (const Case& c : {Case{"sglang_rule", "--context-length 256", 1, 1501},
                        Case{"given_rows", "--context-length 300 --max-running-requests 5 --page-size 4", 4, 1204}}) {
    INFO(c.name);
    const std::string common = "--backend meta --model tiny --workload synthetic:7,37,9,11 --chunked-prefill-size 61 --cuda-graph-bs 1,2,4 "
                               "--mode baseline " + c.options;
    auto r0 = run_cli("run " + common + " --quiet --kv-tokens 300 --out '" + (dir / (c.name + "0")).string() + "'");
    INFO(r0.err);
    REQUIRE(r0.rc == 0);
    const auto s0 = serving_of(dir / (c.name + "0") / "report.json");
    const uint64_t cell = s0["kv_cell_bytes"], pool0 = s0["kv_pool_bytes"], table0 = s0["req_to_token_bytes"];
    const uint64_t ctx = s0["context_len"], row = (ctx + 4) * 4;
    REQUIRE(pool0 == (300 + c.page) * cell);
    auto tr = moeprof::read_trace((dir / (c.name + "0") / "baseline.mtrace").string());
    REQUIRE(tr.is_ok());
    const uint64_t total0 = moeprof::planner::analyze(tr.value()).peak_total_bytes;
    // The device: everything the run holds but the pool and the table, then the pool and the table
    // at want_tokens, then less than what one more page needs.
    const uint64_t K = static_cast<uint64_t>(c.want_tokens);
    auto table_at = [&](uint64_t k) {
      if (c.name != "sglang_rule") return table0;
      const uint64_t rows = std::clamp<uint64_t>(k * 512 / ctx, 2048, 4096) + 1;
      return rows * row;
    };
    const uint64_t need = (K + c.page) * cell + table_at(K), need_next = (K + 2 * c.page) * cell + table_at(K + c.page);
    REQUIRE(need_next > need + 1);
    const uint64_t G = total0 - pool0 - table0 + need + (need_next - need) / 2;
    auto b = run_cli("budget '" + (dir / (c.name + "0") / "baseline.mtrace").string() + "' --gpu-memory " + std::to_string(G) + " --fixes 0 --json");
    INFO(b.err);
    REQUIRE(b.rc == 0);
    const auto j = nlohmann::json::parse(b.out);
    CHECK(sum_components(j) == static_cast<int64_t>(G));
    CHECK(j["kv_bytes_per_token"] == cell);
    CHECK(j["page_size"] == c.page);
    CHECK(j["kv_tokens"] == K);
    CHECK(component(j, "kv_pool") == static_cast<int64_t>((K + c.page) * cell));
    CHECK(component(j, "request_table") == static_cast<int64_t>(table_at(K)));
    CHECK(j["request_tokens"] == 37 + 9 - 1);  // the workload's largest request
    CHECK(j["run"]["workload"] == "synthetic:7,37,9,11");
    // The device of that size runs the pool at the capacity, and not one page more.
    const std::string dev = common + " --quiet --gpu-memory " + std::to_string(G);
    auto at = run_cli("run " + dev + " --kv-tokens " + std::to_string(K) + " --out '" + (dir / (c.name + "_at")).string() + "'");
    INFO(at.err);
    CHECK(at.rc == 0);
    CHECK(serving_of(dir / (c.name + "_at") / "report.json")["req_to_token_bytes"] == table_at(K));
    auto over = run_cli("run " + dev + " --kv-tokens " + std::to_string(K + c.page) + " --out '" + (dir / (c.name + "_over")).string() + "'");
    CHECK(over.rc == 3);
    CHECK(count_lines(over.err) == 1);
    CHECK(over.err.find("out of GPU memory") != std::string::npos);
    // SGLang's setting, as printed, sizes the same pool.
    const std::string f = j["mem_fraction_static_detail"]["value"];
    auto frac = run_cli("run " + dev + " --mem-fraction-static " + f + " --out '" + (dir / (c.name + "_f")).string() + "'");
    INFO(frac.err);
    REQUIRE(frac.rc == 0);
    CHECK(serving_of(dir / (c.name + "_f") / "report.json")["kv_pool_tokens"] == K);
    // The budget's own meta run of the same workload gives the same capacity.
    auto own = run_cli("budget " + common + " --kv-tokens 300 --gpu-memory " + std::to_string(G) + " --fixes 0 --json");
    INFO(own.err);
    REQUIRE(own.rc == 0);
    CHECK(nlohmann::json::parse(own.out)["kv_tokens"] == K);
  }
  // Serving options belong to a meta run: with traces they are refused in one line.
  auto bad = run_cli("budget '" + (dir / "sglang_rule0" / "baseline.mtrace").string() + "' --gpu-memory H100 --kv-tokens 5");
  CHECK(bad.rc == 2);
  CHECK(count_lines(bad.err) == 1);
}

TEST_CASE("moeprof budget: traces of other runs are not modes, EP refuses a workload, requests stop at the table's limit", "[cli][budget]") {
  const fs::path dir = moeprof::testing::temp_dir("budget_cli_modes");
  const std::string a = (dir / "a").string(), b = (dir / "b").string();
  REQUIRE(run_cli("run -q --backend meta --model tiny --workload synthetic:5,61,7 --mode all -o '" + a + "'").rc == 0);
  REQUIRE(run_cli("run -q --backend meta --model tiny --tokens 97 --mode all -o '" + b + "'").rc == 0);
  struct Bad {
    std::string args, line;
  };
  const std::vector<Bad> bad = {
      {"budget '" + a + "/baseline.mtrace' '" + b + "/reuse.mtrace' --gpu-memory H100",
       "moeprof budget: error: " + a + "/baseline.mtrace and " + b +
           "/reuse.mtrace are not the modes of one run (tokens 305 vs 97): give one run's traces, one per memory mode"},
      {"budget '" + a + "/baseline.mtrace' '" + a + "/baseline.mtrace' --gpu-memory H100",
       "moeprof budget: error: " + a + "/baseline.mtrace and " + a + "/baseline.mtrace are both mode baseline: give one trace per memory mode"},
      {"budget --backend meta --model tiny --ep 2 --routing uniform --workload synthetic:4,10,2 --gpu-memory H100",
       "moeprof budget: error: --ep runs one prefill: drop --workload"},
  };
  for (const auto& x : bad) {
    INFO(x.args);
    auto r = run_cli(x.args);
    CHECK(r.rc == 2);
    CHECK(r.err == x.line + "\n");
  }
  // Requests are at most the request table's rows: SGLang's 4,096 at the largest pools.
  auto r = run_cli("budget --json '" + a + "/baseline.mtrace' '" + a + "/reuse.mtrace' --gpu-memory H100");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["request_limit"] == 4096);
  CHECK(j["requests"] == 4096);
  CHECK(j["kv_tokens"].get<uint64_t>() / j["request_tokens"].get<uint64_t>() > 4096);
  for (const auto& m : j["modes"]) CHECK(m["requests"].get<uint64_t>() <= 4096);
  // vLLM's gpu_memory_utilization leaves the margin free: 5 GB of 40 GB is 0.125 less.
  double u[2];
  for (int i = 0; i < 2; ++i) {
    auto m = run_cli("budget --json '" + a + "/baseline.mtrace' --gpu-memory 40000000000 --margin " + (i ? "5000000000" : "0"));
    REQUIRE(m.rc == 0);
    u[i] = std::stod(nlohmann::json::parse(m.out)["gpu_memory_utilization_detail"]["value"].get<std::string>());
  }
  CHECK(u[0] - u[1] == Approx(0.125).margin(1e-6));
}

// Found by a user: the trace's pool held requests back, so its schedule ran one prompt per prefill
// step; at the budget's far larger pool all of them share one step and the run ran out of memory.
// The budget now says the worst step there is not measured.
TEST_CASE("moeprof budget: a schedule held back by the run's own pool is not confirmed at a larger pool", "[cli][budget][serving]") {
  const fs::path dir = moeprof::testing::temp_dir("budget_cli_held");
  const std::string common = "run --backend meta --model tiny --mode baseline --workload synthetic:8,20,5 --disable-cuda-graph "
                             "--max-running-requests 8 --gpu-memory 100000000 --quiet ";
  auto held = run_cli(common + "--kv-tokens 24 -o '" + (dir / "held").string() + "'");
  INFO(held.err);
  REQUIRE(held.rc == 0);
  auto b = run_cli("budget '" + (dir / "held" / "baseline.mtrace").string() + "' --gpu-memory 100000000 --json");
  INFO(b.err);
  REQUIRE(b.rc == 0);
  const auto j = nlohmann::json::parse(b.out);
  CHECK(j["schedule"]["pool_held_requests"] == 7);
  CHECK(j["schedule"]["trace_pool_tokens"] == 24);
  CHECK(j["schedule"]["unconfirmed"] == true);
  const uint64_t k = j["kv_tokens"].get<uint64_t>();
  REQUIRE(k > 24);
  auto text = run_cli("budget '" + (dir / "held" / "baseline.mtrace").string() + "' --gpu-memory 100000000");
  CHECK(text.out.find("NOT CONFIRMED: the run's pool of 24 tokens held 7 request(s) back") != std::string::npos);
  CHECK(text.out.find("--kv-tokens " + std::to_string(k) + " and budget that trace") != std::string::npos);
  // What the note warns of: at that pool the eight prompts share a step, which does not fit.
  auto at_k = run_cli(common + "--kv-tokens " + std::to_string(k) + " -o '" + (dir / "at_k").string() + "'");
  CHECK(at_k.rc == 3);
  // A pool that held nothing back (the workload's whole need) is confirmed.
  auto whole = run_cli(common + "-o '" + (dir / "whole").string() + "'");
  REQUIRE(whole.rc == 0);
  auto bw = run_cli("budget '" + (dir / "whole" / "baseline.mtrace").string() + "' --gpu-memory 100000000 --json");
  REQUIRE(bw.rc == 0);
  const auto jw = nlohmann::json::parse(bw.out);
  CHECK(jw["schedule"]["pool_held_requests"] == 0);
  CHECK(jw["schedule"]["unconfirmed"] == false);
}
