// Every hostile input of issue 14 through the moeprof binary: its exit code and its one line.
// The rows are the table of docs/robustness.md: with MOEPROF_ROBUSTNESS_TABLE=FILE set, the test
// writes the table (input, command, exit code, the line moeprof prints) to FILE as Markdown.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/utf8.h"
#include "tests/cli/cli_util.h"

namespace fs = std::filesystem;
using moeprof::testing::count_lines;
using moeprof::testing::run_cli;

namespace {

std::string seed(const std::string& harness, const std::string& name) {
  return "'" + std::string(MOEPROF_SOURCE_DIR) + "/tests/fuzz/corpus/" + harness + "/seed-" + name + "'";
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

struct Row {
  std::string input;    // what is hostile about it
  std::string args;     // moeprof's arguments (shell words)
  int rc;               // the documented exit code
  std::string expect;   // a substring of the line that says it (stderr; stdout for warnings)
  bool on_stdout = false;
  std::string stdout_to;  // stdout goes here instead of being captured (shown as "> FILE")
  std::string shown;    // the line, for the table
};

// Never destroyed: the table is written by a static object's destructor at exit, which runs after
// the destruction of a function-local static constructed later.
std::vector<Row>& table() {
  static auto* rows = new std::vector<Row>;
  return *rows;
}

// Runs one row: exit code, a one-line message, the expected text; records it for the table.
void check_row(Row row) {
  INFO(row.input << ": moeprof " << row.args);
  auto r = run_cli(row.args, row.stdout_to);
  CHECK(r.rc == row.rc);
  const std::string& where = row.on_stdout ? r.out : r.err;
  if (!row.on_stdout && row.rc != 0 && row.rc != 1) CHECK(count_lines(r.err) == 1);
  CHECK(where.find(row.expect) != std::string::npos);
  // The first line, or for a JSON document on stdout the line that holds the expected text.
  const std::string& said = row.on_stdout ? r.out : (r.err.empty() ? r.out : r.err);
  row.shown = first_line(said);
  if (row.shown == "{" && said.find(row.expect) != std::string::npos) {
    const size_t at = said.rfind('\n', said.find(row.expect)) + 1;
    row.shown = "... " + said.substr(said.find_first_not_of(' ', at), said.find('\n', at) - said.find_first_not_of(' ', at));
  }
  table().push_back(row);
}

struct TableWriter {
  ~TableWriter() {
    const char* path = std::getenv("MOEPROF_ROBUSTNESS_TABLE");
    if (!path || table().empty()) return;
    std::ofstream out(path);
    out << "| input (before) | command | exit | what moeprof says (first line) |\n|---|---|---:|---|\n";
    auto cell = [](const std::string& s) {
      std::string o;
      for (char c : moeprof::valid_utf8(s)) o += c == '|' ? std::string("\\|") : std::string(1, c);
      return o;
    };
    // Paths relative to the source tree (corpus/ = tests/fuzz/corpus/), temporary folders as $TMP.
    auto shorten = [](std::string text) {
      auto replace_all = [&](const std::string& from, const std::string& to) {
        for (size_t p = 0; (p = text.find(from, p)) != std::string::npos; p += to.size()) text.replace(p, from.size(), to);
      };
      replace_all(std::string(MOEPROF_SOURCE_DIR) + "/tests/fuzz/corpus/", "corpus/");
      replace_all(std::string(MOEPROF_SOURCE_DIR) + "/", "");
      const std::string tmp = fs::temp_directory_path().string() + "/moeprof_";
      for (size_t p = 0; (p = text.find(tmp, p)) != std::string::npos;) {
        const size_t end = text.find('/', p + tmp.size());
        text.replace(p, (end == std::string::npos ? text.size() : end) - p, "$TMP");
        p += 4;
      }
      return text;
    };
    for (const auto& r : table()) {
      const std::string args = shorten(r.args + (r.stdout_to.empty() ? "" : " >" + r.stdout_to));
      out << "| " << cell(r.input) << " | `moeprof " << cell(args) << "` | " << r.rc << " | " << cell(shorten(r.shown)) << " |\n";
    }
  }
} g_table_writer;

}  // namespace

TEST_CASE("hostile configs: each bad field exits 2 with one line naming it", "[cli][hostile]") {
  const auto out = moeprof::testing::temp_dir("hostile_cfg");
  const std::string run = "run --backend cpu --quiet --out '" + (out / "o").string() + "' --model ";
  check_row({"config: vocab_size 2^62 (crashed in Backend::empty)", run + seed("config", "vocab-2p62.json"), 2,
             "field 'vocab_size' must be an integer in [1, 16777216] (got 4611686018427387904)"});
  check_row({"config: n_shared_experts 2^62 (exited 0 with wrong shapes)", run + seed("config", "shared-2p62.json"), 2,
             "field 'n_shared_experts' must be an integer in [0, 1024] (got 4611686018427387904)"});
  check_row({"config: vocab_size 1e300 (cast before its range check)", run + seed("config", "vocab-1e300.json"), 2,
             "field 'vocab_size' must be an integer in [1, 16777216] (got 1e+300)"});
  check_row({"config: rms_norm_eps -1", run + seed("config", "eps-negative.json"), 2,
             "field 'rms_norm_eps' must be a finite number > 0 and <= 1 (got -1)"});
  check_row({"config: rope_theta 0", run + seed("config", "theta-zero.json"), 2,
             "field 'rope_theta' must be a finite number > 0 and <= 1e+12 (got 0)"});
  check_row({"config: every field at its limit (weights past 2^63 B, found in the trace after the run)", run + seed("config", "max-all.json"), 2,
             "seed-max-all: the weights of one rank need more than 2^63-1 bytes (16384 layers, TP=1): not a model a device holds"});
  check_row({"config: n_routed_experts 2^40", run + seed("config", "experts-2p40.json"), 2,
             "field 'n_routed_experts' must be an integer in [0, 16384] (got 1099511627776)"});
  check_row({"config: num_hidden_layers 2^64-1", run + seed("config", "uint64-max.json"), 2,
             "field 'num_hidden_layers' must be an integer in [1, 16384] (got 18446744073709551615)"});
  check_row({"config: hidden_size 256.5", run + seed("config", "hidden-fraction.json"), 2,
             "field 'hidden_size' must be an integer (got 256.5)"});
  check_row({"--tokens 2^40 + 1", "run --backend cpu --quiet --tokens 1099511627777", 2,
             "moeprof run: error: --tokens: must be an integer from 1 to 1,099,511,627,776 (got 1099511627777) (see moeprof run --help)"});
  check_row({"--model \"\" (ran the default model)", "run --backend cpu --quiet --model ''", 2, "--model is empty"});
}

TEST_CASE("hostile traces: limits, corruption and truncation", "[cli][hostile]") {
  check_row({"trace: an allocation of 2^63 bytes", "plan " + seed("trace", "alloc-2p63.mtrace"), 2,
             "corrupt record: 9223372036854775808 bytes exceed the limit of 2^63-1 bytes"});
  check_row({"trace: two allocations summing past 2^63-1 (churn wrapped to 0)", "report --json " + seed("trace", "two-allocs-2p62.mtrace"), 2,
             "the allocations add up to more than 2^63-1 bytes (at replay position 1): not a recording of real memory"});
  check_row({"trace: an allocation of 2^63-1 bytes, compared with a small trace", "compare " + seed("trace", "valid.mtrace") + " " + seed("trace", "max-bytes.mtrace"), 0,
             "+9,223,372,036,854.8 MB", true});
  check_row({"trace: a RECS frame whose length field is damaged (read as a truncation, plan said 0 B)", "plan " + seed("trace", "corrupt-length.mtrace"), 2,
             "corrupt record frame: size does not match count"});
  check_row({"trace: a string repeated byte for byte", "plan " + seed("trace", "repeated-string.mtrace"), 2,
             "corrupt string table: string 2 repeats string 1"});
  check_row({"trace: an empty string (repeats string 0)", "plan " + seed("trace", "empty-string.mtrace"), 2,
             "corrupt string table: string 1 repeats string 0"});
  check_row({"trace: metadata with tokens 1e400", "plan " + seed("trace", "bad-meta.mtrace"), 2,
             "seed-bad-meta.mtrace: byte offset 48: corrupt metadata: run metadata is not a JSON object"});
  check_row({"trace: strings that are not UTF-8 (two of them read as U+FFFD)", "report --json " + seed("trace", "not-utf8-names.mtrace"), 0,
             "\"name\": \"\xEF\xBF\xBD #3\"", true});
  check_row({"trace: out-of-order timestamps (0, 5, 2^63, 2^64-1)", "plan " + seed("trace", "out-of-order.mtrace"), 0, "peak total", true});
  check_row({"trace: an empty records frame", "plan " + seed("trace", "empty-records.mtrace"), 0,
             "warning: run seed: no allocations recorded", true});
  check_row({"trace: no END frame (the recorder was killed)", "plan " + seed("trace", "no-end.mtrace"), 0,
             "warning: run seed: the trace is incomplete at byte offset", true});
  check_row({"trace: two traces joined (read as the first alone)", "plan " + seed("trace", "joined.mtrace"), 2,
             "bytes after the end frame (two files joined?)"});
  check_row({"trace: a directory (called an empty file)", "plan '" + std::string(MOEPROF_SOURCE_DIR) + "/tests/fuzz/corpus/trace'", 2,
             "corpus/trace: not a moeprof trace: it is a directory"});
  check_row({"trace: compare of a truncated trace (said nothing)", "compare " + seed("trace", "no-end.mtrace") + " " + seed("trace", "valid.mtrace"), 0,
             "warning: baseline run seed: the trace is incomplete at byte offset", true});
  check_row({"trace: a failed run's trace (plan said \"anomalies: none\")", "plan " + seed("trace", "failed-run.mtrace"), 0,
             "warning: run seed failed: layer 1 moe: out of memory: the figures cover only what ran before the failure", true});
  check_row({"trace: a scope of 3,000 components", "plan " + seed("trace", "deep-scope.mtrace"), 0,
             "  peak total       8 B\n", true});
  // The whole scope is kept: the live allocation's row ends with its 3,000th component.
  CHECK(run_cli("plan " + seed("trace", "deep-scope.mtrace")).out.find("/c2998/c2999\n") != std::string::npos);
  // The streamed analysis (planner/stream.h) keeps the same rules.
  check_row({"trace: no END frame, streamed", "plan --stream on " + seed("trace", "no-end.mtrace"), 0,
             "warning: run seed: the trace is incomplete at byte offset", true});
  check_row({"trace: compare of a truncated trace, streamed", "compare --stream on " + seed("trace", "no-end.mtrace") + " " + seed("trace", "valid.mtrace"), 0,
             "warning: baseline run seed: the trace is incomplete at byte offset", true});
  check_row({"trace: two allocations summing past 2^63-1, streamed", "plan --stream on " + seed("trace", "two-allocs-2p62.mtrace"), 2,
             "the allocations add up to more than 2^63-1 bytes (at replay position 1): not a recording of real memory"});
  check_row({"trace: a failed run's trace, streamed", "plan --stream on " + seed("trace", "failed-run.mtrace"), 0,
             "warning: run seed failed: layer 1 moe: out of memory: the figures cover only what ran before the failure", true});
  check_row({"trace: an empty records frame, streamed", "plan --stream on " + seed("trace", "empty-records.mtrace"), 0,
             "warning: run seed: no allocations recorded", true});
  check_row({"trace: a RECS frame whose length field is damaged, streamed", "plan --stream on " + seed("trace", "corrupt-length.mtrace"), 2,
             "corrupt record frame: size does not match count"});

  // The first line of plan is the warning, and no figure headlines 0 B.
  auto empty = run_cli("plan " + seed("trace", "empty-records.mtrace"));
  CHECK(empty.out.rfind("warning: ", 0) == 0);
  CHECK(empty.out.find("  peak activation  none recorded") != std::string::npos);
  CHECK(empty.out.find(" 0 B  (0 B)") == std::string::npos);
  // The same in report's Markdown and HTML, and in compare's tables.
  auto md = run_cli("report --out-md - " + seed("trace", "empty-records.mtrace"));
  CHECK(md.rc == 0);
  CHECK(md.out.find("| none recorded | none recorded | none recorded | 0 |") != std::string::npos);
  CHECK(md.out.find("No allocation recorded: nothing was live.") != std::string::npos);
  CHECK(md.out.find("0 B of activation memory live") == std::string::npos);
  auto html = run_cli("report --out-html - " + seed("trace", "empty-records.mtrace"));
  CHECK(html.out.find("<td class=\"n peak-act\">none recorded</td>") != std::string::npos);
  auto cmp_text = run_cli("compare " + seed("trace", "empty-records.mtrace") + " " + seed("trace", "valid.mtrace"));
  CHECK(cmp_text.rc == 0);
  CHECK(cmp_text.out.find("  peak activation ") != std::string::npos);
  CHECK(cmp_text.out.find("none recorded") != std::string::npos);
  auto cmp_md = run_cli("compare --out-md - " + seed("trace", "empty-records.mtrace") + " " + seed("trace", "valid.mtrace"));
  CHECK(cmp_md.out.find("| peak activation | none recorded |") != std::string::npos);
  auto cmp = run_cli("compare --json " + seed("trace", "no-end.mtrace") + " " + seed("trace", "valid.mtrace"));
  CHECK(cmp.rc == 0);
  CHECK(cmp.out.find("\"warnings\": [\n    \"baseline run seed: the trace is incomplete at byte offset") != std::string::npos);
}

TEST_CASE("hostile reports and gate options", "[cli][hostile]") {
  const std::string valid = seed("report", "valid.json");
  check_row({"report: a figure written 1e400 (exit 3, nlohmann out_of_range)", "gate --baseline " + valid + " --current " + seed("report", "number-1e400.json"), 2,
             "seed-number-1e400.json: not a valid report: a number out of range ("});
  check_row({"report: a figure of 2^64-1 bytes", "gate --baseline " + valid + " --current " + seed("report", "over-limit.json"), 2,
             "churn_bytes 18446744073709551615 exceeds the limit of 2^63-1 bytes"});
  check_row({"report: 20,000 nested arrays", "gate --baseline " + valid + " --current " + seed("report", "deep-nesting.json"), 2,
             "not valid JSON"});
  check_row({"--abs-tol 2^64 (saturated and passed)", "gate --abs-tol 18446744073709551616 --baseline " + valid + " --current " + valid, 2,
             "--abs-tol 18446744073709551616: must be a whole number of bytes in [0, 2^63-1]"});
  check_row({"--rel-tol 2", "gate --rel-tol 2 --baseline " + valid + " --current " + valid, 2, "--rel-tol 2: must be a decimal fraction of the baseline from 0 to 1 with at most 18 decimal places"});
  const std::string single = seed("report", "single.json");
  check_row({"gate: the current run failed, its figures equal the baseline's (passed)", "gate --baseline " + single + " --current " +
             seed("report", "failed-run.json"), 1, "moeprof gate: FAIL: 1 failed run", true});
  check_row({"gate: the current trace was truncated", "gate --baseline " + single + " --current " + seed("report", "truncated.json"), 1,
             "moeprof gate: FAIL: 1 run with an incomplete trace", true});
}

TEST_CASE("gate: a failed run and another workload fail, --allow-config-change passes the latter", "[cli][hostile]") {
  const auto dir = moeprof::testing::temp_dir("hostile_gate");
  const std::string base = moeprof::testing::slurp(std::string(MOEPROF_SOURCE_DIR) + "/tests/fuzz/corpus/report/seed-valid.json");
  std::string other = base;
  for (size_t p; (p = other.find("\"tokens\": 100")) != std::string::npos;) other.replace(p, 13, "\"tokens\": 200");
  moeprof::testing::spit((dir / "b.json").string(), base);
  moeprof::testing::spit((dir / "c.json").string(), other);
  const std::string args = "gate --baseline '" + (dir / "b.json").string() + "' --current '" + (dir / "c.json").string() + "'";
  check_row({"gate: another token count (was a note)", args, 1, "moeprof gate: FAIL: 2 workload differences", true});
  check_row({"gate: another token count, --allow-config-change", args + " --allow-config-change", 0, "moeprof gate: PASS", true});
}

TEST_CASE("output lost to a full disk exits 3 in every subcommand", "[cli][hostile]") {
  const auto dir = moeprof::testing::temp_dir("hostile_full");
  const std::string g = "'" + moeprof::testing::golden_dir();
  const std::string valid = seed("report", "valid.json");
  const std::vector<std::pair<std::string, std::string>> cmds = {
      {"plan", "plan " + g + "/baseline.mtrace'"},
      {"plan", "plan --json " + g + "/baseline.mtrace'"},
      {"compare", "compare " + g + "/baseline.mtrace' " + g + "/reuse.mtrace'"},
      {"compare", "compare --json " + g + "/baseline.mtrace' " + g + "/reuse.mtrace'"},
      {"gate", "gate --baseline " + valid + " --current " + valid},
      {"report", "report " + g + "/baseline.mtrace'"},
      {"report", "report --json " + g + "/baseline.mtrace'"},
      {"export", "export --out-jsonl - " + g + "/baseline.mtrace'"},
      {"arena", "arena " + seed("arena_csv", "header.csv")},
      {"import", "import " + g + "/torch/two_devices.pickle' --out '" + (dir / "t.mtrace").string() + "'"},
      {"devices", "devices"},
      {"run", "run --backend cpu --quiet --out '" + (dir / "run").string() + "'"},
  };
  for (const auto& [sub, args] : cmds) {
    INFO(args);
    auto r = run_cli(args, "/dev/full");
    CHECK(r.rc == 3);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.find("moeprof " + sub + ": error: writing to standard output failed") != std::string::npos);
  }
  check_row({"stdout is /dev/full (every subcommand exited 0)", "plan " + g + "/baseline.mtrace'", 3,
             "moeprof plan: error: writing to standard output failed: No space left on device", false, "/dev/full"});
}

TEST_CASE("names that are not UTF-8: rejected as --name, replaced in file names", "[cli][hostile]") {
  check_row({"--name $'\\xff' (exit 3, JSON type error)", "report --json --name \"$(printf '\\377')\" " + seed("trace", "valid.mtrace"), 2,
             "moeprof report: error: run name '\xEF\xBF\xBD' is not valid UTF-8"});
  // A trace without a run name is named after its file: a stem that is not UTF-8 is replaced.
  const auto dir = moeprof::testing::temp_dir("hostile_utf8");
  const fs::path odd = dir / "\xff.mtrace";
  fs::copy_file(std::string(MOEPROF_SOURCE_DIR) + "/tests/fuzz/corpus/trace/seed-unnamed.mtrace", odd, fs::copy_options::overwrite_existing);
  check_row({"a trace file named $'\\xff.mtrace' whose run has no name", "report --json '" + odd.string() + "'", 0,
             "\"name\": \"\xEF\xBF\xBD\"", true});
}

TEST_CASE("a run refused before it starts leaves the earlier results in its --out untouched", "[cli][hostile]") {
  // The earlier run's files stay as they were (src/cli/run_output.h); a run that fails after it
  // wrote its traces replaces them (tests/cli/run_signal_test.cpp).
  const auto dir = moeprof::testing::temp_dir("hostile_stale");
  const std::string out = (dir / "o").string();
  auto ok = run_cli("run --backend cpu --quiet --out '" + out + "'");
  REQUIRE(ok.rc == 0);
  const std::string report = moeprof::testing::slurp(out + "/report.json");
  REQUIRE_FALSE(report.empty());
  auto bad = run_cli("run --backend cpu --quiet --out '" + out + "' --model " + seed("config", "vocab-2p62.json"));
  CHECK(bad.rc == 2);
  CHECK(moeprof::testing::slurp(out + "/report.json") == report);
  CHECK(fs::exists(out + "/baseline.mtrace"));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(out)) ++entries;
  CHECK(entries == 5);  // two traces, three reports: no staging folder left behind
}
