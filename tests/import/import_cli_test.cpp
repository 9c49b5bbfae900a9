// moeprof import: exit codes, one-line errors, the JSON summary, and a trace the other commands read.
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/trace_io.h"
#include "tests/cli/cli_util.h"

using namespace moeprof;
using moeprof::testing::count_lines;
using moeprof::testing::golden_dir;
using moeprof::testing::run_cli;
using moeprof::testing::slurp;
using moeprof::testing::temp_dir;
using nlohmann::json;

namespace {
std::string q(const std::string& s) { return "'" + s + "'"; }
}  // namespace

TEST_CASE("import cli: converts a snapshot, prints the replay, and plan reads the trace") {
  const auto dir = temp_dir("import_cli");
  const std::string in = golden_dir() + "/torch/two_devices.pickle";
  const std::string out = (dir / "snap.mtrace").string();
  auto r = run_cli("import " + q(in) + " --out " + q(out) + " --json");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  const json j = json::parse(r.out);
  const json exp = json::parse(slurp(golden_dir() + "/torch/two_devices.expected.json"))["policies"]["completed"];
  CHECK(j["free_on"] == "completed");
  CHECK(j["pickle_protocol"] == 4);
  CHECK(j["entries"] == 46);
  CHECK(j["synthesized_allocs"] == 4);
  CHECK(j["skipped_actions"] == json{{"annotate", 1}});
  REQUIRE(j["devices"].size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    const json& d = j["devices"][k];
    CHECK(d["device"] == exp[k]["device"]);
    CHECK(d["peak_bytes"] == exp[k]["peak_bytes"]);
    CHECK(d["peak_entry"] == exp[k]["peak_entry"]);
    CHECK(d["reserved_peak_bytes"] == exp[k]["reserved_peak_bytes"]);
    CHECK(d["end_live_bytes"] == exp[k]["end_live_bytes"]);
    // The top entries are the fixture's live set at the peak, largest first.
    const json& live = exp[k]["live_at_peak"];
    REQUIRE(d["top"].size() == std::min<size_t>(10, live.size()));
    for (size_t i = 0; i < d["top"].size(); ++i) {
      CHECK(d["top"][i]["address"] == live[i][0]);
      CHECK(d["top"][i]["bytes"] == live[i][1]);
      CHECK(d["top"][i]["label"] == live[i][2]);
    }
  }
  CHECK(j["anomalies"]["unknown_frees"] == 0);
  auto trace = read_trace(out);
  REQUIRE(trace.is_ok());
  CHECK(trace->meta.backend == "torch-snapshot");

  auto text = run_cli("import " + q(in) + " --out " + q(out) + " --free-on requested --top 2");
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("frees on free_requested") != std::string::npos);
  CHECK(text.out.find("replayed peak          13.7 MB  (13,708,378 B)") != std::string::npos);
  CHECK(text.out.find("schätzen_bad\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdname (übung.py:12)") != std::string::npos);
  CHECK(text.out.find("anomalies in the replay: none") != std::string::npos);

  auto plan = run_cli("plan " + q(out) + " --json");
  REQUIRE(plan.rc == 0);
  CHECK(json::parse(plan.out)["peak_total_bytes"] == 13'708'378);
  std::filesystem::remove_all(dir);
}

TEST_CASE("import cli: malformed or unsupported pickles exit 2 with one line, writing nothing") {
  const auto dir = temp_dir("import_cli_bad");
  const std::string out = (dir / "x.mtrace").string();
  const json expected = json::parse(slurp(golden_dir() + "/torch/hostile/expected.json"));
  for (const char* name : {"global.pickle", "truncated_frame.pickle", "deep_nesting.pickle", "wrong_size_type.pickle",
                           "no_keys.pickle", "huge_length.pickle"}) {
    INFO(name);
    const std::string in = golden_dir() + "/torch/hostile/" + name;
    auto r = run_cli("import " + q(in) + " --out " + q(out));
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err == "moeprof import: error: " + in + ": " + expected[name].get<std::string>() + "\n");
    CHECK_FALSE(std::filesystem::exists(out));
  }
  auto missing = run_cli("import " + q((dir / "absent.pickle").string()) + " --out " + q(out));
  CHECK(missing.rc == 2);
  CHECK(count_lines(missing.err) == 1);
  auto bad_opt = run_cli("import " + q(golden_dir() + "/torch/empty.pickle") + " --out " + q(out) + " --free-on sometimes");
  CHECK(bad_opt.rc == 2);
  CHECK(count_lines(bad_opt.err) == 1);
  auto no_out = run_cli("import " + q(golden_dir() + "/torch/empty.pickle"));
  CHECK(no_out.rc != 0);
  CHECK(count_lines(no_out.err) == 1);
  auto unwritable = run_cli("import " + q(golden_dir() + "/torch/empty.pickle") + " --out " + q((dir / "no/such/dir/x.mtrace").string()));
  CHECK(unwritable.rc == 2);
  CHECK(unwritable.err.rfind("moeprof import: error: cannot create trace ", 0) == 0);
  // `-` is not stdout for a trace (it had written a file named '-'), and a name must be UTF-8.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  auto dash = run_cli("import " + q(golden_dir() + "/torch/two_devices.pickle") + " --out - --json");
  std::filesystem::current_path(cwd);
  CHECK(dash.rc == 2);
  CHECK(dash.out.empty());
  CHECK(dash.err == "moeprof import: error: --out: a trace is written to a file, not to stdout ('-')\n");
  CHECK_FALSE(std::filesystem::exists(dir / "-"));
  auto bad_name = run_cli("import " + q(golden_dir() + "/torch/two_devices.pickle") + " --out " + q(out) + " --name \"$(printf 'a\\377b')\"");
  CHECK(bad_name.rc == 2);
  CHECK(bad_name.err == "moeprof import: error: run name 'a\uFFFDb' is not valid UTF-8\n");
  CHECK_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

// A peak that no kept entry reached: no entry is named, in JSON (null) or in text.
TEST_CASE("import cli: a peak from before the kept history names no entry") {
  const auto dir = temp_dir("import_cli_before");
  const std::string in = golden_dir() + "/torch/peak_before_history.pickle";
  const std::string out = (dir / "b.mtrace").string();
  const json exp = json::parse(slurp(golden_dir() + "/torch/peak_before_history.expected.json"))["policies"]["completed"];
  auto r = run_cli("import " + q(in) + " --out " + q(out) + " --json");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["devices"].size() == 1);
  const json& d = j["devices"][0];
  CHECK(d["peak_bytes"] == exp[0]["peak_bytes"]);
  CHECK(d["peak_entry"].is_null());
  CHECK(exp[0]["peak_entry"].is_null());
  REQUIRE(d["top"].size() == 2);
  for (const json& t : d["top"]) CHECK(t["entry"].is_null());  // both synthesized: allocated before the history
  CHECK(d["end_state_mismatches"] == 0);
  auto text = run_cli("import " + q(in) + " --out " + q(out));
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("live before the first entry (allocations made before the history began)") != std::string::npos);
  CHECK(text.out.find("reached at entry") == std::string::npos);
  std::filesystem::remove_all(dir);
}
