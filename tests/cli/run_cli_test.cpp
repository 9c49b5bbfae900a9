// `moeprof run` through the binary: the default CPU job, its files and figures, and the exit codes
// of bad input (2) and of a CUDA backend request without a usable GPU (3).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "executor/backends.h"
#include "model/config.h"
#include "tests/cli/cli_util.h"

namespace fs = std::filesystem;

namespace {

moeprof::testing::CliResult run_moeprof(const std::string& args) { return moeprof::testing::run_cli(args); }
size_t lines(const std::string& s) { return moeprof::testing::count_lines(s); }

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
