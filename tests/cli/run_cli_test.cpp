// `moeprof run` through the binary: the default CPU job, its files and figures, and the exit codes
// of bad input (2) and of a CUDA backend request without a usable GPU (3).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/trace_format.h"
#include "core/trace_io.h"
#include "executor/backends.h"
#include "model/config.h"
#include "tests/cli/cli_util.h"
#include "tests/gpu_skip.h"

namespace fs = std::filesystem;

namespace {

moeprof::testing::CliResult run_moeprof(const std::string& args) { return moeprof::testing::run_cli(args); }
size_t lines(const std::string& s) { return moeprof::testing::count_lines(s); }

// The metadata of a trace's first frame, which must be its META frame: what the writer knew when
// the trace opened. `plan A B` reads a rank's identity from the frames before the first records
// (read_trace_meta), and a run longer than the writer's flush interval writes records before its
// final META, so the identity must already be in the first one.
moeprof::RunMeta first_meta(const fs::path& path) {
  namespace tf = moeprof::trace_format;
  std::ifstream in(path, std::ios::binary);
  tf::FileHeader h{};
  in.read(reinterpret_cast<char*>(&h), sizeof(h));
  REQUIRE(in.good());
  in.seekg(h.header_size);
  tf::FrameHeader fh{};
  in.read(reinterpret_cast<char*>(&fh), sizeof(fh));
  REQUIRE(in.good());
  REQUIRE(fh.type == tf::kFrameMeta);
  std::string text(fh.bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  REQUIRE(in.good());
  moeprof::RunMeta m;
  REQUIRE(moeprof::run_meta_from_json(text, &m).is_ok());
  return m;
}

}  // namespace

TEST_CASE("moeprof run on the CPU writes both traces and a report with the exact saving", "[cli][run]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_tiny");
  auto r = run_moeprof("run --backend cpu --model tiny --tokens 37 --quiet --out '" + dir.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("outputs bitwise identical: yes") != std::string::npos);
  for (const char* f : {"baseline.mtrace", "reuse.mtrace", "report.json", "report.md", "report.html"})
    CHECK(fs::exists(dir / f));
  std::ifstream in(dir / "report.json");
  auto j = nlohmann::json::parse(in);
  REQUIRE(j["runs"].size() == 2);
  CHECK(j["runs"][0]["mode"] == "baseline");
  CHECK(j["runs"][1]["mode"] == "reuse");
  CHECK(j["runs"][0]["tokens"] == 37);
  auto cfg = moeprof::resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  const int64_t saving = 37 * (2 * cfg->hidden_size + cfg->latent_dim()) * 2;
  CHECK(j["comparison"]["peak_activation_delta_bytes"].get<int64_t>() == -saving);
}

TEST_CASE("moeprof run: bad input exits 2 with one line naming the problem", "[cli][run]") {
  auto unknown = run_moeprof("run --backend cpu --model gpt-17");
  CHECK(unknown.rc == 2);
  CHECK(lines(unknown.err) == 1);
  CHECK(unknown.err.find("unknown model 'gpt-17'") != std::string::npos);

  const fs::path bad = moeprof::testing::temp_dir("run_cli_cfg") / "config.json";
  std::ofstream(bad) << R"({"model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 2})";
  auto malformed = run_moeprof("run --backend cpu --model '" + bad.string() + "'");
  CHECK(malformed.rc == 2);
  CHECK(lines(malformed.err) == 1);
  CHECK(malformed.err.find("num_attention_heads") != std::string::npos);

  auto mode = run_moeprof("run --backend cpu --mode sideways");
  CHECK(mode.rc == 2);
  CHECK(lines(mode.err) == 1);
  auto zero = run_moeprof("run --backend cpu --tokens 0");
  CHECK(zero.rc == 2);
  CHECK(lines(zero.err) == 1);
  CHECK(zero.err.find("--tokens") != std::string::npos);
  auto tp = run_moeprof("run --backend cpu --model tiny --tp 3 --quiet");
  CHECK(tp.rc == 2);
  CHECK(tp.err.find("num_attention_heads") != std::string::npos);
}

TEST_CASE("moeprof run --backend cuda without a usable GPU exits 3 with one line", "[cli][run]") {
  if (moeprof::make_cuda_backend(0).is_ok()) {
    WARN("a GPU is usable here: the no-GPU exit path is not exercised");
    return;
  }
  auto r = run_moeprof("run --backend cuda --model tiny --quiet");
  CHECK(r.rc == 3);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("moeprof run:") == 0);
}

// Progress (docs/cli.md): the header line before any work, then on a terminal one progress line per
// step (weights and forward of each mode, report writing), and a table with forward and total time.
// The terminal is script(1)'s pseudo-terminal; without one the run prints no progress.
TEST_CASE("moeprof run: header first, progress on a terminal, forward and total time", "[cli][run]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_progress");
  const std::string out = (dir / "out").string();
  const std::string moeprof = std::string(MOEPROF_BINARY_DIR) + "/src/cli/moeprof";
  if (std::system("command -v script >/dev/null 2>&1") != 0) MOEPROF_SKIP("script(1) is not installed: no pseudo-terminal to test with");
  const std::string typescript = (dir / "tty.txt").string();
  const std::string cmd = "script -qec \"'" + moeprof + "' run --backend cpu --model tiny --tokens 23 --mode all --out '" + out +
                          "'\" /dev/null > '" + typescript + "' 2>&1 </dev/null";
  const int st = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  const std::string tty = moeprof::testing::slurp(typescript);
  INFO(tty);
  const size_t header = tty.find("moeprof run: tiny, 23 tokens");
  REQUIRE(header != std::string::npos);
  // Every step in order, each after the header.
  size_t at = header;
  for (const char* mode : {"baseline", "reuse", "fixes"}) {
    for (const char* step : {"] weights: layer 1 of ", "] forward: layer 1 of "}) {
      const size_t p = tty.find("[" + std::string(mode) + step, at);
      CHECK(p != std::string::npos);
      if (p != std::string::npos) at = p;
    }
  }
  const size_t writing = tty.find("[report] writing ", at);
  CHECK(writing != std::string::npos);
  // The table after the progress, with the forward pass and the whole mode timed.
  const size_t table = tty.find("mode ", writing == std::string::npos ? at : writing);
  REQUIRE(table != std::string::npos);
  const std::string head = tty.substr(table, tty.find('\n', table) - table);
  CHECK(head.find("forward") != std::string::npos);
  CHECK(head.find("total") != std::string::npos);
  for (const char* mode : {"baseline", "reuse", "fixes"}) {
    const size_t row = tty.find("\n" + std::string(mode) + " ", table);
    REQUIRE(row != std::string::npos);
    const std::string line = tty.substr(row + 1, tty.find('\n', row + 1) - row - 1);
    size_t seconds = 0;
    for (size_t p = line.find(" s"); p != std::string::npos; p = line.find(" s", p + 1)) ++seconds;
    CHECK(seconds == 2);  // "0.05 s" forward, "0.07 s" total
  }

  // Not a terminal: the same run prints the header on stdout and no progress at all.
  auto plain = run_moeprof("run --backend cpu --model tiny --tokens 23 --mode all --out '" + out + "'");
  REQUIRE(plain.rc == 0);
  CHECK(plain.out.rfind("moeprof run: tiny, 23 tokens", 0) == 0);
  CHECK(plain.err.find("] weights: layer") == std::string::npos);
  CHECK(plain.err.find("\r") == std::string::npos);
}

TEST_CASE("moeprof run --op-times prints and writes each mode's ops by family", "[cli][run][op_times]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_op_times");
  auto r = run_moeprof("run --backend cpu --model tiny --tokens 23 --quiet --op-times --peak-tflops 2 --peak-gbps 50 --out '" +
                       dir.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("op times (baseline,") != std::string::npos);
  CHECK(r.out.find("op times (reuse,") != std::string::npos);
  CHECK(r.out.find("peaks: 2.0 TFLOP/s bf16 dense, 50 GB/s (given on the command line)") != std::string::npos);
  for (const char* mode : {"baseline", "reuse"}) {
    std::ifstream in(dir / (std::string(mode) + ".ops.json"));
    REQUIRE(in.good());
    auto j = nlohmann::json::parse(in);
    CHECK(j["mode"] == mode);
    CHECK(j["clock"] == "host steady_clock");
    CHECK(j["peak_flops_per_s"].get<double>() == 2e12);
    double sum = 0, floors = 0;
    bool has_attention = false;
    for (const auto& f : j["families"]) {
      sum += f["seconds"].get<double>();
      floors += std::max(f["flop_floor_seconds"].get<double>(), f["byte_floor_seconds"].get<double>());
      has_attention = has_attention || f["op"] == "causal_attention";
    }
    CHECK(has_attention);
    CHECK(sum == Approx(j["op_seconds"].get<double>()).epsilon(1e-9));
    CHECK(floors == Approx(j["floor_seconds"].get<double>()).epsilon(1e-9));
    CHECK(j["op_seconds"].get<double>() <= j["forward_seconds"].get<double>());
  }
  // A second run into the same folder without --op-times removes the stale files.
  auto again = run_moeprof("run --backend cpu --model tiny --tokens 23 --quiet --out '" + dir.string() + "'");
  REQUIRE(again.rc == 0);
  CHECK_FALSE(fs::exists(dir / "baseline.ops.json"));
  auto multi = run_moeprof("run --backend cpu --op-times --gpus 2 --quiet --out '" + dir.string() + "'");
  CHECK(multi.rc == 2);
  CHECK(multi.err.find("--op-times") != std::string::npos);
}

TEST_CASE("moeprof run --workload: a serving run, its printed summary and its report", "[cli][run][serving]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_serving");
  const fs::path wl = dir / "w.jsonl";
  std::ofstream(wl) << "{\"prompt_tokens\": 40, \"output_tokens\": 5}\n{\"prompt_tokens\": [1, 2, 3, 4, 5], \"output_tokens\": 3, "
                       "\"arrival_step\": 2}\n\n{\"prompt_tokens\": 9, \"output_tokens\": 4}\n";
  auto r = run_moeprof("run --backend cpu --model tiny --workload '" + wl.string() +
                       "' --chunked-prefill-size 16 --kv-tokens 64 --page-size 4 --max-running-requests 2 --cuda-graph-bs 1,2 --quiet --out '" +
                       (dir / "out").string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("moeprof run: tiny, workload " + wl.string()) != std::string::npos);
  CHECK(r.out.find("serving (baseline): 3 requests, 12 tokens generated") != std::string::npos);
  CHECK(r.out.find("KV pool: 64 tokens (page 4, sized by kv-tokens)") != std::string::npos);
  CHECK(r.out.find("CUDA graphs: batch sizes 1,2") != std::string::npos);
  CHECK(r.out.find("outputs bitwise identical: yes") != std::string::npos);
  std::ifstream in(dir / "out" / "report.json");
  auto j = nlohmann::json::parse(in);
  for (const auto& run : j["runs"]) {
    REQUIRE(run.contains("serving"));
    CHECK(run["serving"]["kv_pool_tokens"] == 64);
    CHECK(run["serving"]["kv_pool_bytes"] == 68 * 4 * (32 + 16) * 2);  // (64 + a page) rows x 4 layers x 48 bf16
    CHECK(run["serving"]["steps"]["prefill"].get<int>() >= 3);        // 40 tokens in chunks of 16
    CHECK(run["serving"]["output_tokens"] == 12);
    CHECK(!run["extra"].contains("serving"));
  }
}

TEST_CASE("moeprof run --workload: bad serving input exits 2 with one line", "[cli][run][serving]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_serving_bad");
  const fs::path wl = dir / "bad.jsonl";
  std::ofstream(wl) << "{\"prompt_tokens\": 4, \"output_tokens\": 2}\n{\"prompt_tokens\": 4, \"output_tokens\": 0}\n";
  // Every one refused before the run starts (no trace kept): the whole line.
  auto expect = [](const std::string& args, const std::string& message) {
    auto r = run_moeprof(args);
    INFO(args << "\n" << r.err);
    CHECK(r.rc == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err == "moeprof run: error: " + message + "\n");
  };
  expect("run --backend cpu --model tiny -q --workload '" + wl.string() + "'",
         wl.string() + " line 2: output_tokens must be an integer in [1, 2^30]");
  expect("run --backend cpu --model tiny -q --page-size 4", "--page-size needs --workload (a serving run)");
  expect("run --backend cpu --model tiny -q --tokens 8 --workload synthetic:2,4,2",
         "--tokens sets one prefill: with --workload the requests set the tokens");
  expect("run --backend cpu --model tiny -q --workload synthetic:2,4-1,2",
         "workload synthetic:2,4-1,2: PROMPT must be L or LO-HI with 1 <= LO <= HI <= 2^30 (got \"4-1\")");
  expect("run --backend cpu --model tiny -q --workload synthetic:2,40,30 --kv-tokens 64",
         "request 0 needs 69 KV tokens, more than the whole pool (64 tokens): it could never run");
  expect("run --backend cpu --model tiny -q --gpu-memory 1000000000 --workload synthetic:2,4,2",
         "--gpu-memory makes the meta backend a device of that size: add --backend meta (a GPU has its own size)");
  expect("run --backend meta --model tiny -q --workload synthetic:2,4,2 --mem-fraction-static 0.5",
         "--mem-fraction-static needs the device's memory, which this backend does not report (the meta backend: "
         "give --gpu-memory BYTES; or set the pool with --kv-tokens N)");
  auto both = run_moeprof("run --backend cpu --model tiny -q --workload synthetic:2,4,2 --kv-tokens 64 --mem-fraction-static 0.5");
  CHECK(both.rc >= 100);  // CLI11: options that exclude each other
  CHECK(lines(both.err) == 1);
}

TEST_CASE("moeprof run --routing --moe-rows: the routing in the summary and the report, bad specs exit 2 naming them", "[cli][run][routing]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_routing");
  auto r = run_moeprof("run --backend meta --model tiny --tokens 37 --mode baseline --routing hot:1 --moe-rows routed --quiet --out '" +
                       dir.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  // Tiny at 37 tokens: tile 16, the bound 194 rows per MoE call, the worst routing 192; hot:1 puts
  // every token on one expert (3 tiles) and spreads 37 rows over the other 7.
  CHECK(r.out.find("MoE routing (baseline): hot:1, rows routed: ") != std::string::npos);
  CHECK(r.out.find("over 3 MoE calls (bound 582, worst routing 576); busiest expert 37 of 37 tokens") != std::string::npos);
  std::ifstream in(dir / "report.json");
  auto j = nlohmann::json::parse(in);
  const auto& extra = j["runs"][0]["extra"];
  CHECK(extra["routing"] == "hot:1");
  CHECK(extra["moe_rows"] == "routed");
  CHECK(extra["routing.rows_worst"] == "576");
  CHECK(std::stoull(extra["routing.peak_activation_worst_bytes"].get<std::string>()) >
        std::stoull(extra["accounting.peak_activation_bytes"].get<std::string>()));
  // The defaults print no routing line.
  auto plain = run_moeprof("run --backend meta --model tiny --tokens 37 --mode baseline --quiet --out '" + dir.string() + "'");
  REQUIRE(plain.rc == 0);
  CHECK(plain.out.find("MoE routing") == std::string::npos);
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--routing zipf:0", "--routing zipf:0: the exponent S must be a number in (0, 64]"},
           {"--routing hot:x", "--routing hot:x: N must be a whole number"},
           {"--routing skewed", "--routing skewed: unknown routing"},
           {"--routing hot:9", "--routing hot:9: the model has only 8 routed experts"},
           {"--moe-rows padded", "--moe-rows padded: must be bound or routed"},
           {"--moe-rows routed", "--moe-rows routed on the meta backend needs a drawn routing"}}) {
    auto e = run_moeprof("run --backend meta --model tiny --quiet --out '" + (dir / "bad").string() + "' " + args);
    INFO(args << "\n" << e.err);
    CHECK(e.rc == 2);
    CHECK(lines(e.err) == 1);
    CHECK(e.err.rfind("moeprof run: error: ", 0) == 0);
    CHECK(e.err.find(says) != std::string::npos);
    CHECK(!fs::exists(dir / "bad"));
  }
}

TEST_CASE("moeprof run --ep N --gpus N on the CPU: real ranks as threads, per-rank figures, bad rank counts exit 2", "[cli][run][ep]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_ep_real");
  auto r = run_moeprof("run --backend cpu --model tiny --tokens 45 --mode baseline --ep 2 --gpus 2 --routing zipf:1.2 --json --out '" +
                       dir.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.find("EP=2 (2 CPU ranks, one thread per rank, collectives through host memory)") != std::string::npos);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["runs"].size() == 1);
  const auto& run = j["runs"][0];
  CHECK(run["ep"]["emulated"] == false);
  CHECK(run["ep"]["size"] == 2);
  REQUIRE(run["ranks"].size() == 2);
  CHECK(run["devices"].size() == 2);  // the merged trace: one device per rank
  // The same figures as the emulated ranks on the meta backend (the same drawn routing).
  auto m = run_moeprof("run --backend meta --model tiny --tokens 45 --mode baseline --ep 2 --routing zipf:1.2 --json --quiet --out '" +
                       (dir / "meta").string() + "'");
  REQUIRE(m.rc == 0);
  auto mj = nlohmann::json::parse(m.out);
  const auto& mr = mj["runs"][0]["ranks"];
  REQUIRE(mr.size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    INFO("rank " << k);
    CHECK(run["ranks"][k]["rank"] == mr[k]["rank"]);
    CHECK(run["ranks"][k]["peak_activation_bytes"] == mr[k]["peak_activation_bytes"]);
    CHECK(run["ranks"][k]["peak_activation_worst_routing_bytes"] == mr[k]["peak_activation_worst_routing_bytes"]);
    CHECK(run["ranks"][k]["rows_received"] == mr[k]["rows_received"]);
    CHECK(fs::exists(dir / run["ranks"][k]["trace"].get<std::string>()));
    // Each rank's identity is in its trace's first META frame, however long the run takes.
    const auto head = first_meta(dir / run["ranks"][k]["trace"].get<std::string>());
    CHECK((head.extra.count("ep_size") == 1 && head.extra.at("ep_size") == "2"));
    CHECK((head.extra.count("ep_rank") == 1 && head.extra.at("ep_rank") == std::to_string(k)));
    CHECK((head.extra.count("ep_emulated") == 1 && head.extra.at("ep_emulated") == "false"));
    CHECK(head.mode == "baseline");
    CHECK(head.tokens == 45);
  }
  CHECK(mj["runs"][0]["ep"]["emulated"] == true);
  CHECK(run["ep"]["dp_attention"] == false);
  {
    // The rank traces are the ranks of one run, as real TP's are: plan merges them into the run's
    // figures; one rank twice is refused.
    const std::string r0 = (dir / run["ranks"][0]["trace"].get<std::string>()).string(),
                      r1 = (dir / run["ranks"][1]["trace"].get<std::string>()).string();
    auto p = run_moeprof("plan --json '" + r0 + "' '" + r1 + "'");
    INFO(p.err);
    REQUIRE(p.rc == 0);
    auto pj = nlohmann::json::parse(p.out);
    CHECK(pj["peak_activation_bytes"] == run["peak_activation_bytes"]);
    CHECK(pj["devices"].size() == 2);
    fs::copy_file(r1, dir / "copy.mtrace");
    auto twice = run_moeprof("plan '" + r1 + "' '" + (dir / "copy.mtrace").string() + "'");
    CHECK(twice.rc == 2);
    CHECK(twice.err.find("both are EP rank 1 of 2") != std::string::npos);
  }
  // DP attention over real ranks: each rank's trace holds its own request.
  auto dp = run_moeprof("run --backend cpu --model tiny --tokens 45 --mode baseline --ep 2 --dp 2 --gpus 2 --json --quiet --out '" +
                        (dir / "dp").string() + "'");
  INFO(dp.err);
  REQUIRE(dp.rc == 0);
  auto dj = nlohmann::json::parse(dp.out);
  CHECK(dj["runs"][0]["ep"]["dp_attention"] == true);
  REQUIRE(dj["runs"][0]["ranks"].size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    const auto head = first_meta(dir / "dp" / dj["runs"][0]["ranks"][k]["trace"].get<std::string>());
    CHECK((head.extra.count("dp_attention") == 1 && head.extra.at("dp_attention") == "true"));
    CHECK((head.extra.count("batch_tokens") == 1 && head.extra.at("batch_tokens") == "45"));
    CHECK((head.extra.count("ep_rank") == 1 && head.extra.at("ep_rank") == std::to_string(k)));
  }
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--ep 4 --gpus 2", "--ep 4 over real ranks needs --gpus 4 (one EP rank per device; got --gpus 2)"},
           {"--ep 2 --gpus 2 --ep-rank 1", "--ep-rank picks the rank to emulate on one device: drop it with --gpus"},
           {"--ep 4 --ep-rank -1", "--ep-rank: must be an integer from 0"},
           {"--gpus 2 --launch processes", "for ranks in processes; --backend cpu runs them as threads"},
           {"--dp 2", "--dp 2 runs DP attention over the EP ranks: it needs --ep 2"},
           {"--ep 2 --dp 2", "--dp on one device needs a drawn routing"}}) {
    auto e = run_moeprof("run --backend cpu --model tiny --quiet --out '" + (dir / "bad").string() + "' " + args);
    INFO(args << "\n" << e.err);
    CHECK(e.rc == 2);
    CHECK(lines(e.err) == 1);
    CHECK(e.err.find(says) != std::string::npos);
    CHECK(!fs::exists(dir / "bad"));
  }
}

// The summary names the rank traces as they are written: MODE.rankR for real ranks (it had said
// MODE.epR, the emulated ranks' names), MODE.epR for emulated ones.
TEST_CASE("moeprof run --ep: the summary names the rank traces that exist, and the built-in tiny gets its default tokens in any case", "[cli][run][ep]") {
  const fs::path dir = moeprof::testing::temp_dir("run_cli_ep_names");
  auto real = run_moeprof("run --backend cpu --model tiny --tokens 29 --ep 2 --gpus 2 --routing uniform --quiet --out '" + (dir / "real").string() + "'");
  INFO(real.out << real.err);
  REQUIRE(real.rc == 0);
  CHECK(real.out.find("(each mode's 2 ranks merged; the 4 traces of the ranks: MODE.rankR.mtrace beside them)") != std::string::npos);
  for (const char* f : {"baseline.rank0.mtrace", "baseline.rank1.mtrace", "reuse.rank0.mtrace", "reuse.rank1.mtrace"}) CHECK(fs::exists(dir / "real" / f));
  auto emu = run_moeprof("run --backend meta --model tiny --tokens 29 --ep 2 --routing uniform --quiet --out '" + (dir / "emu").string() + "'");
  INFO(emu.out << emu.err);
  REQUIRE(emu.rc == 0);
  CHECK(emu.out.find("(each mode's budget rank; all 2 ranks' 4 traces: MODE.epR.mtrace beside them)") != std::string::npos);
  for (const char* f : {"baseline.ep0.mtrace", "baseline.ep1.mtrace", "reuse.ep0.mtrace", "reuse.ep1.mtrace"}) CHECK(fs::exists(dir / "emu" / f));
  for (const char* model : {"tiny", "TINY", "Tiny"}) {
    auto t = run_moeprof(std::string("run --backend meta --model ") + model + " --mode baseline --json --quiet --out '" + (dir / model).string() + "'");
    REQUIRE(t.rc == 0);
    CHECK(nlohmann::json::parse(t.out)["runs"][0]["tokens"] == 100);
  }
  auto cfg = run_moeprof("run --backend meta --model '" + std::string(MOEPROF_SOURCE_DIR) + "/examples/configs/tiny.json' --mode baseline --json --quiet --out '" +
                         (dir / "cfg").string() + "'");
  REQUIRE(cfg.rc == 0);
  CHECK(nlohmann::json::parse(cfg.out)["runs"][0]["tokens"] == 64);
}
