// The moeprof binary: version/help, exit codes, and the plan/compare/report/gate/export commands on
// the golden traces (tests/golden/).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <map>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "planner/stacks.h"
#include "reports/format.h"
#include "reports/report_file.h"
#include "tests/cli/cli_util.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using moeprof::testing::count_lines;
using moeprof::testing::run_cli;

std::string golden(const char* f) { return "'" + moeprof::testing::golden_dir() + "/" + f + "'"; }

// A program traced without names (as CUPTI records one that uses no NVTX ranges): timestamps on
// the recording process's clock, allocations known by their call stacks only. Weights 2,000,000 B
// at the start; `forward` allocates 400,000 B at +5 ms (left out with `with_forward` false); an
// allocation with no stack, 1,000 B, at +6 ms: the activation peak.
constexpr uint64_t kTracedStart = 1'796'049'446'477'081'364ull;
moeprof::Trace traced_program(bool with_forward) {
  using namespace moeprof;
  Trace t;
  t.meta.name = with_forward ? "traced" : "traced-fixed";
  t.meta.backend = "cupti";
  auto frame = [&](const char* fn, const char* file, uint32_t line) {
    return t.stacks.intern_frame(StackFrame{t.strings.intern(fn), t.strings.intern(file), line, FrameKind::kPython});
  };
  const StackId load = t.stacks.intern_stack({frame("load_weights", "model.py", 10)});
  const StackId fwd = t.stacks.intern_stack({frame("forward", "model.py", 42), frame("main", "infer.py", 7)});
  uint64_t seq = 1;
  auto add = [&](EventKind k, uint64_t dt, uint64_t addr, uint64_t bytes, Category c, StackId st) {
    TraceRecord& r = t.add(k, kTracedStart + dt, addr, bytes);
    r.category = c;
    r.stack_id = st;
    r.seq = seq++;
  };
  add(EventKind::kAlloc, 0, 0x100000, 2'000'000, Category::kWeights, load);
  if (with_forward) add(EventKind::kAlloc, 5'000'000, 0x400000, 400'000, Category::kActivation, fwd);
  add(EventKind::kAlloc, 6'000'000, 0x500000, 1'000, Category::kActivation, StackId::kNone);
  add(EventKind::kFree, 20'000'000, 0x500000, 0, Category::kActivation, StackId::kNone);
  if (with_forward) add(EventKind::kFree, 21'000'000, 0x400000, 0, Category::kActivation, StackId::kNone);
  return t;
}

// The line of `text` that contains `what` ("" when none).
std::string line_with(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  if (at == std::string::npos) return "";
  const size_t b = text.rfind('\n', at), e = text.find('\n', at);
  return text.substr(b == std::string::npos ? 0 : b + 1, e == std::string::npos ? std::string::npos : e - (b == std::string::npos ? 0 : b + 1));
}


}  // namespace

TEST_CASE("cli: --version and --help", "[cli]") {
  auto v = run_cli("--version");
  CHECK(v.rc == 0);
  CHECK(v.out.rfind("moeprof ", 0) == 0);
  auto h = run_cli("--help");
  CHECK(h.rc == 0);
  for (const char* sub : {"plan", "compare", "report", "gate", "export"}) CHECK(h.out.find(sub) != std::string::npos);
  auto gh = run_cli("gate --help");
  CHECK(gh.rc == 0);
  CHECK(gh.out.find("--allow-improvement") != std::string::npos);
}

TEST_CASE("cli: bad input exits 2 with a one-line error", "[cli]") {
  auto missing = run_cli("plan /nonexistent/moeprof/x.mtrace");
  CHECK(missing.rc == 2);
  CHECK(count_lines(missing.err) == 1);
  CHECK(missing.err.find("/nonexistent/moeprof/x.mtrace") != std::string::npos);

  // A copy of the golden trace with one byte flipped inside a frame payload: checksum mismatch.
  auto dir = moeprof::testing::temp_dir("cli_corrupt");
  std::string bytes = moeprof::testing::slurp(moeprof::testing::golden_dir() + "/baseline.mtrace");
  REQUIRE(bytes.size() > 200);
  std::mt19937 rng(4242);
  size_t pos = 64 + rng() % (bytes.size() - 100);
  bytes[pos] = static_cast<char>(bytes[pos] ^ 0x5a);
  std::string corrupt = (dir / "corrupt.mtrace").string();
  moeprof::testing::spit(corrupt, bytes);
  auto bad = run_cli("plan '" + corrupt + "'");
  CHECK(bad.rc == 2);
  CHECK(count_lines(bad.err) == 1);
  CHECK(bad.err.find(corrupt + ": byte offset ") != std::string::npos);
  CHECK(bad.out.empty());

  auto top = run_cli("plan " + golden("baseline.mtrace") + " --top -3");
  CHECK(top.rc == 2);
  auto metric = run_cli("gate --baseline a.json --current b.json --metrics peak_bytes");
  CHECK(metric.rc == 2);
  CHECK(metric.err == "moeprof gate: error: --metrics peak_bytes: unknown metric 'peak_bytes' (peak_activation_bytes, peak_total_bytes, "
                      "churn_bytes)\n");
  // An empty list names itself, not the option after it.
  for (const char* comma : {"--metrics , --baseline a.json --current b.json", "--metrics=, --baseline a.json --current b.json"}) {
    auto empty = run_cli(std::string("gate ") + comma);
    CHECK(empty.rc == 2);
    CHECK(empty.err == "moeprof gate: error: --metrics ,: an empty metric name (peak_activation_bytes, peak_total_bytes, churn_bytes)\n");
  }
  auto nothing = run_cli("export " + golden("baseline.mtrace"));
  CHECK(nothing.rc == 2);
  auto names = run_cli("report " + golden("baseline.mtrace") + " " + golden("reuse.mtrace") + " --name only-one");
  CHECK(names.rc == 2);
}

TEST_CASE("cli: plan --json on the golden trace", "[cli]") {
  auto r = run_cli("plan --json " + golden("baseline.mtrace"));
  REQUIRE(r.rc == 0);
  json j = json::parse(r.out);
  CHECK(j["name"] == "baseline");
  CHECK(j["peak_activation_bytes"] == 2296);
  CHECK(j["peak_total_bytes"] == 13796);
  CHECK(j["churn_bytes"] == 15753);
  CHECK(j["allocations"] == 10);
  CHECK(j["live_at_peak"]["top"].size() == 4);
  auto top2 = run_cli("plan --json --top 2 " + golden("baseline.mtrace"));
  REQUIRE(top2.rc == 0);
  json j2 = json::parse(top2.out);
  CHECK(j2["live_at_peak"]["top"].size() == 2);
  CHECK(j2["live_at_peak"]["omitted_entries"] == 2);
  CHECK(j2["live_at_peak"]["omitted_bytes"] == 672 + 280);
  auto text = run_cli("plan " + golden("reuse.mtrace"));
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("1,957 B") != std::string::npos);
  CHECK(text.out.find("1 unknown_frees") != std::string::npos);
  CHECK(text.out.find("3 dropped records") != std::string::npos);
}

TEST_CASE("cli: compare --json on the golden traces", "[cli]") {
  auto r = run_cli("compare --json " + golden("baseline.mtrace") + " " + golden("reuse.mtrace"));
  REQUIRE(r.rc == 0);
  json j = json::parse(r.out);
  CHECK(j["baseline"] == "baseline");
  CHECK(j["candidate"] == "reuse");
  CHECK(j["peak_activation_delta_bytes"] == -339);
  CHECK(j["churn_delta_bytes"] == -672);
  CHECK(j["only_in_baseline"][0]["name"] == "moe_output");
  auto text = run_cli("compare " + golden("baseline.mtrace") + " " + golden("reuse.mtrace"));
  REQUIRE(text.rc == 0);
  // The candidate's trace dropped records: that is said first, then A and B.
  CHECK(text.out.rfind("warning: candidate run reuse: 3 dropped records: the figures are lower bounds\nA: run baseline (", 0) == 0);
  CHECK(text.out.find("B: run reuse (") != std::string::npos);
}

TEST_CASE("cli: report, then gate against it", "[cli]") {
  auto dir = moeprof::testing::temp_dir("cli_gate");
  std::string base = (dir / "base.json").string(), html = (dir / "r.html").string(), md = (dir / "r.md").string(),
              pf = (dir / "r.perfetto.json").string();
  auto r = run_cli("report " + golden("baseline.mtrace") + " " + golden("reuse.mtrace") + " --out-json '" + base + "' --out-html '" +
                   html + "' --out-md '" + md + "' --out-perfetto '" + pf + "'");
  REQUIRE(r.rc == 0);
  json doc = json::parse(moeprof::testing::slurp(base));
  CHECK(doc["schema_version"] == 1);
  CHECK(doc["comparison"]["peak_activation_delta_bytes"] == -339);
  CHECK(moeprof::testing::slurp(html).find("id=\"moeprof-data\"") != std::string::npos);
  CHECK(moeprof::testing::slurp(md).find("## Comparison: B = reuse against A = baseline") != std::string::npos);
  CHECK(json::parse(moeprof::testing::slurp(pf))["traceEvents"].size() > 20);

  // Renamed runs in the report.
  auto named = run_cli("report " + golden("baseline.mtrace") + " " + golden("reuse.mtrace") + " --name A --name B --json");
  REQUIRE(named.rc == 0);
  CHECK(json::parse(named.out)["comparison"]["candidate"] == "B");
  // The names before the traces: each --name takes one value, the traces stay traces.
  auto first = run_cli("report --name A --name B " + golden("baseline.mtrace") + " " + golden("reuse.mtrace") + " --json");
  INFO(first.err);
  REQUIRE(first.rc == 0);
  CHECK(json::parse(first.out)["runs"][0]["name"] == "A");
  CHECK(json::parse(first.out)["comparison"]["candidate"] == "B");

  // The golden reuse run lost 3 records: its figures are lower bounds, which fails by default.
  auto incomplete = run_cli("gate --baseline '" + base + "' --current '" + base + "'");
  CHECK(incomplete.rc == 1);
  CHECK(incomplete.out.rfind("moeprof gate: FAIL: 1 run with an incomplete trace", 0) == 0);
  CHECK(incomplete.out.find("run reuse: trace incomplete (not truncated, 3 dropped records)") != std::string::npos);
  auto same = run_cli("gate --baseline '" + base + "' --current '" + base + "' --allow-incomplete");
  CHECK(same.rc == 0);
  CHECK(same.out.rfind("moeprof gate: PASS (6 checks, 2 runs;", 0) == 0);

  // Current = baseline with the reuse run's activation peak grown by 1 byte, the churn shrunk.
  json cur = doc;
  cur["runs"][1]["peak_activation_bytes"] = 1958;
  cur["runs"][0]["churn_bytes"] = 15000;
  std::string curp = (dir / "cur.json").string(), junit = (dir / "gate.xml").string(), prop = (dir / "proposed.json").string(),
              gmd = (dir / "gate.md").string();
  moeprof::testing::spit(curp, cur.dump(2));
  auto reg = run_cli("gate --baseline '" + base + "' --current '" + curp + "' --out-junit '" + junit + "' --out-baseline '" + prop +
                     "' --out-md '" + gmd + "'");
  CHECK(reg.rc == 1);
  CHECK(reg.out.rfind("moeprof gate: FAIL: 1 regression, 1 unexpected improvement", 0) == 0);
  CHECK(reg.out.find("| reuse | peak_activation_bytes | 1,957 B | 1,958 B | +1 B | +0.1% | 0 B | ❌ regression |") != std::string::npos);
  CHECK(moeprof::testing::slurp(gmd).find("| baseline | churn_bytes | 15,753 B | 15,000 B | -753 B |") != std::string::npos);
  // 6 checks (2 fail) and the reuse run's incomplete trace, a failing testcase of its own.
  CHECK(moeprof::testing::slurp(junit).find("tests=\"7\" failures=\"3\"") != std::string::npos);
  auto allowed = run_cli("gate --baseline '" + base + "' --current '" + curp + "' --allow-improvement --allow-incomplete --metrics churn_bytes");
  CHECK(allowed.rc == 0);
  auto tol = run_cli("gate --baseline '" + base + "' --current '" + curp + "' --abs-tol 1 --allow-incomplete --metrics peak_activation_bytes");
  CHECK(tol.rc == 0);
  // churn -753 of 15,753 is -4.78%: outside 4% (630 B allowed), inside 5% (787 B); +1 B is inside both.
  CHECK(run_cli("gate --baseline '" + base + "' --current '" + curp + "' --rel-tol 0.04").rc == 1);
  CHECK(run_cli("gate --baseline '" + base + "' --current '" + curp + "' --rel-tol 0.05 --allow-incomplete").rc == 0);
  // The reuse run's trace is incomplete: no baseline is proposed from it unless that is allowed,
  // and the hint says to run it again rather than to accept it.
  CHECK_FALSE(fs::exists(prop));
  CHECK(reg.err.find("not writing " + prop + ": current run reuse's trace is incomplete") != std::string::npos);
  CHECK(reg.out.find("The current run reuse's trace is incomplete: run it again") != std::string::npos);
  CHECK(reg.out.find("If the change is intended") == std::string::npos);
  REQUIRE(run_cli("gate --baseline '" + base + "' --current '" + curp + "' --allow-incomplete --out-baseline '" + prop + "'").rc == 1);
  // The proposed baseline passes against the current report.
  auto again = run_cli("gate --baseline '" + prop + "' --current '" + curp + "' --allow-incomplete");
  CHECK(again.rc == 0);

  // Missing, corrupt and schema-mismatched baselines are bad input, never a pass.
  auto missing = run_cli("gate --baseline '" + (dir / "nope.json").string() + "' --current '" + curp + "'");
  CHECK(missing.rc == 2);
  CHECK(count_lines(missing.err) == 1);
  std::string corrupt = (dir / "corrupt.json").string();
  std::string text = moeprof::testing::slurp(base);
  moeprof::testing::spit(corrupt, text.substr(0, text.size() / 3));
  auto bad = run_cli("gate --baseline '" + corrupt + "' --current '" + curp + "'");
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("byte offset") != std::string::npos);
  json v2 = doc;
  v2["schema_version"] = 2;
  std::string v2p = (dir / "v2.json").string();
  moeprof::testing::spit(v2p, v2.dump());
  auto mismatch = run_cli("gate --baseline '" + v2p + "' --current '" + curp + "'");
  CHECK(mismatch.rc == 2);
  CHECK(mismatch.err.find("schema version 2") != std::string::npos);
  auto bad_current = run_cli("gate --baseline '" + base + "' --current '" + v2p + "'");
  CHECK(bad_current.rc == 2);
}

TEST_CASE("cli: export --out-jsonl and --out-perfetto", "[cli]") {
  auto dir = moeprof::testing::temp_dir("cli_export");
  std::string jl = (dir / "t.jsonl").string(), pf = (dir / "t.json").string();
  auto r = run_cli("export " + golden("reuse.mtrace") + " --out-jsonl '" + jl + "' --out-perfetto '" + pf + "' --max-slices 2");
  REQUIRE(r.rc == 0);
  std::string lines = moeprof::testing::slurp(jl);
  CHECK(json::parse(lines.substr(0, lines.find('\n')))["dropped_records"] == 3);
  json doc = json::parse(moeprof::testing::slurp(pf));
  size_t alloc_slices = 0;
  for (const auto& e : doc["traceEvents"]) alloc_slices += e["ph"] == "X" && e["cat"] != "kernel";
  CHECK(alloc_slices == 2);
}

TEST_CASE("cli: plan --arena places the activation buffers and reports LOAD exactly", "[cli]") {
  const std::string path = std::string(MOEPROF_SOURCE_DIR) + "/examples/traces/tiny-baseline.mtrace";
  auto r = run_cli("plan '" + path + "' --arena --json");
  REQUIRE(r.rc == 0);
  json a = json::parse(r.out)["arena"];
  // Independent LOAD: replay the activation allocations in file order with 256-byte aligned sizes.
  auto t = moeprof::read_trace(path);
  REQUIRE(t.is_ok());
  std::map<uint64_t, uint64_t> live;
  uint64_t cur = 0, load = 0, buffers = 0;
  for (const auto& rec : t->records) {
    const auto cat = rec.category;
    if (rec.kind == moeprof::EventKind::kAlloc && moeprof::counts_as_activation(cat)) {
      const uint64_t sz = (rec.bytes + 255) / 256 * 256;
      live[rec.address] = sz;
      cur += sz;
      load = std::max(load, cur);
      ++buffers;
    } else if (rec.kind == moeprof::EventKind::kFree) {
      if (auto it = live.find(rec.address); it != live.end()) {
        cur -= it->second;
        live.erase(it);
      }
    }
  }
  CHECK(a["buffers"].get<uint64_t>() == buffers);
  CHECK(a["load_bytes"].get<uint64_t>() == load);
  CHECK(a["arena_bytes"].get<uint64_t>() >= load);
  CHECK(a["fragmentation_bytes"].get<uint64_t>() == a["arena_bytes"].get<uint64_t>() - load);
  CHECK(a["valid"].get<bool>());
  auto text = run_cli("plan '" + path + "' --arena");
  CHECK(text.out.find("LOAD (lower bound)") != std::string::npos);
}

namespace {

// Every line on stderr is a note or an error of this subcommand: "moeprof <cmd>: ...".
bool stderr_lines_are(const std::string& err, const std::string& cmd) {
  size_t start = 0;
  while (start < err.size()) {
    size_t end = err.find('\n', start);
    if (end == std::string::npos) end = err.size();
    if (err.compare(start, cmd.size() + 10, "moeprof " + cmd + ": ") != 0) return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

TEST_CASE("cli: --json prints one JSON document on stdout in every subcommand", "[cli][json]") {
  auto dir = moeprof::testing::temp_dir("cli_json");
  const std::string b = golden("baseline.mtrace"), c = golden("reuse.mtrace");
  // plan: the run object.
  auto plan = run_cli("plan --json " + b);
  REQUIRE(plan.rc == 0);
  CHECK(json::parse(plan.out)["peak_activation_bytes"] == 2296);
  // compare: the comparison object, with the live-at-peak diff.
  auto cmp = run_cli("compare --json " + b + " " + c);
  REQUIRE(cmp.rc == 0);
  json jc = json::parse(cmp.out);
  CHECK(jc["live_at_peak_diff"]["delta_bytes"] == -339);
  CHECK(jc["baseline_churn_bytes"] == 15753);
  // report: the JSON report on stdout; a file too, with --out-json; notes on stderr only.
  const std::string rj = (dir / "r.json").string();
  auto rep = run_cli("report --json " + b + " " + c + " --out-json '" + rj + "'");
  REQUIRE(rep.rc == 0);
  json jr = json::parse(rep.out);
  CHECK(jr == json::parse(moeprof::testing::slurp(rj)));
  CHECK(jr["comparison"]["peak_activation_delta_bytes"] == -339);
  CHECK(stderr_lines_are(rep.err, "report"));
  CHECK(run_cli("report --json " + b + " --out-md -").rc == 2);  // both on stdout: refused
  // gate: the verdict and every check.
  auto gate = run_cli("gate --json --allow-incomplete --baseline '" + rj + "' --current '" + rj + "'");
  REQUIRE(gate.rc == 0);
  json jg = json::parse(gate.out);
  CHECK(jg["passed"] == true);
  CHECK(jg["checks"].size() == 6);
  CHECK(jg["checks"][0]["run"] == "baseline");
  CHECK(jg["checks"][0]["metric"] == "peak_activation_bytes");
  CHECK(jg["checks"][0]["baseline"] == 2296);
  CHECK(jg["checks"][0]["delta"] == 0);
  auto failing = run_cli("gate --json --baseline '" + rj + "' --current '" + rj + "'");
  CHECK(failing.rc == 1);
  CHECK(json::parse(failing.out)["incomplete_runs"] == 1);
  // export: what was written.
  const std::string pf = (dir / "e.json").string();
  auto ex = run_cli("export --json " + c + " --out-perfetto '" + pf + "'");
  REQUIRE(ex.rc == 0);
  json je = json::parse(ex.out);
  CHECK(je["run"] == "reuse");
  CHECK(je["written"][0]["format"] == "perfetto");
  CHECK(je["written"][0]["bytes"] == std::filesystem::file_size(pf));
  // devices: the list (exit 3 without a usable GPU, the JSON all the same).
  auto dev = run_cli("devices --json");
  CHECK((dev.rc == 0 || dev.rc == 3));
  CHECK(json::parse(dev.out).contains("devices"));
  // import: the summary.
  auto im = run_cli("import --json '" + moeprof::testing::golden_dir() + "/torch/random.pickle' -o '" + (dir / "t.mtrace").string() + "'");
  REQUIRE(im.rc == 0);
  CHECK(json::parse(im.out)["devices"][0]["peak_bytes"] == 1127559550);
  // run: the report (the meta backend: a two-layer Kimi in well under a second).
  auto run = run_cli("run --json --quiet --backend meta --model kimi-k2.5 --layers 2 --tokens 64 --out '" + (dir / "run").string() + "'");
  REQUIRE(run.rc == 0);
  json jrun = json::parse(run.out);
  CHECK(jrun["runs"].size() == 2);
  CHECK(jrun["runs"][0]["memory_timeline"]["axis"]["unit"] == "layer");
  CHECK(run.err.empty());
}

TEST_CASE("cli: every error is one line, 'moeprof <cmd>: error: ...'", "[cli]") {
  const std::string b = golden("baseline.mtrace");
  struct Case {
    std::string args, cmd;
  };
  for (const Case& k : {Case{"plan /nonexistent/x.mtrace", "plan"}, Case{"plan " + b + " --no-such-option", "plan"},
                        Case{"compare " + b, "compare"}, Case{"report " + b + " --name a --name b", "report"},
                        Case{"gate --baseline /nonexistent/a.json --current /nonexistent/b.json", "gate"},
                        Case{"export " + b, "export"}, Case{"import /nonexistent/s.pickle -o /tmp/x.mtrace", "import"},
                        Case{"run --backend meta --model no-such-model", "run"}, Case{"run --tokens 0", "run"}}) {
    auto r = run_cli(k.args);
    INFO(k.args << " -> " << r.err);
    CHECK(r.rc != 0);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.rfind("moeprof " + k.cmd + ": error: ", 0) == 0);
    CHECK(r.out.empty());
  }
  // Plain `moeprof` is not an error: it prints the help.
  auto none = run_cli("");
  CHECK(none.rc == 0);
  CHECK(none.out.rfind("moeprof: memory profiler and buffer planner for large-model inference\n", 0) == 0);
  CHECK(none.err.empty());
}

TEST_CASE("cli: plan on a truncated trace warns first and prints no null", "[cli]") {
  auto dir = moeprof::testing::temp_dir("cli_truncated");
  const std::string bytes = moeprof::testing::slurp(moeprof::testing::golden_dir() + "/baseline.mtrace");
  for (size_t keep : {size_t{120}, bytes.size() - 40}) {
    const std::string path = (dir / ("cut" + std::to_string(keep) + ".mtrace")).string();
    moeprof::testing::spit(path, bytes.substr(0, keep));
    auto r = run_cli("plan '" + path + "'");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    // Cut inside the metadata the run is named after its file, else it keeps its name.
    const std::string name = keep == 120 ? "cut120" : "baseline";
    CHECK(r.out.rfind("warning: run " + name + ": the trace is truncated at byte offset ", 0) == 0);
    CHECK(r.out.find("null") == std::string::npos);
  }
}

TEST_CASE("cli: help shows value names and defaults, not CLI11's validators", "[cli]") {
  std::vector<std::string> subs = {"run", "plan", "arena", "compare", "report", "gate", "export", "devices", "import"};
  if (run_cli("--help").out.find("\n  trace ") != std::string::npos) subs.push_back("trace");  // CUDA builds
  for (const std::string& sub : subs) {
    auto h = run_cli(sub + " --help");
    INFO(sub);
    REQUIRE(h.rc == 0);
    CHECK(h.out.find("Example: moeprof " + sub) != std::string::npos);
    CHECK(h.out.find(" in [") == std::string::npos);    // "INT in [1 - 1099511627776]"
    CHECK(h.out.find("{false}") == std::string::npos);  // "--no-cupti{false}"
    CHECK(h.out.find("TEXT:") == std::string::npos);
  }
  CHECK(run_cli("run --help").out.find("--out DIR") != std::string::npos);
  CHECK(run_cli("run --help").out.find("[default: moeprof-out]") != std::string::npos);
}

// Streaming (docs/planner.md, "Streaming"): the streamed figures equal the in-memory ones, hand-offs
// included; plan streams by default (auto), and commands that need the whole trace refuse --stream on.
TEST_CASE("cli: --stream on gives the in-memory figures, ranks merge, export streams the same JSON lines", "[cli][stream]") {
  const std::string base = golden("baseline.mtrace"), reuse = golden("reuse.mtrace");
  auto s = run_cli("plan " + base + " --json --stream on");
  auto m = run_cli("plan " + base + " --json --stream off");
  auto d = run_cli("plan " + base + " --json");
  REQUIRE(s.rc == 0);
  REQUIRE(m.rc == 0);
  REQUIRE(d.rc == 0);
  json js = json::parse(s.out), jm = json::parse(m.out), jd = json::parse(d.out);
  CHECK(js["reuse"]["handoffs_computed"] == true);
  CHECK(jm["reuse"]["handoffs_computed"] == true);
  CHECK(jm["reuse"]["handoff_count"].get<int>() > 0);  // so the hand-off search is not vacuous
  CHECK(js["streamed"] == true);
  CHECK(jm["streamed"] == false);
  CHECK(jd["streamed"] == true);  // auto: plan needs no lifetime in memory, whatever the size
  CHECK(jd == js);
  // With --fixes it does: auto reads the trace into memory.
  auto f = run_cli("plan " + base + " --json --fixes 1");
  REQUIRE(f.rc == 0);
  CHECK(json::parse(f.out)["streamed"] == false);
  for (json* j : {&js, &jm}) j->erase("streamed");
  CHECK(js == jm);

  // Two traces are the ranks of one run when their metadata says so (ranks 0 and 1 of TP=2, one
  // mode): each recorded device 0, so they become devices 0 and 1, and a comma-joined argument is
  // the same as two arguments. Rank 0 holds the golden baseline's records, rank 1 the reuse run's.
  auto rank_dir = moeprof::testing::temp_dir("cli_stream_ranks");
  std::string rank_paths[2];
  for (int r = 0; r < 2; ++r) {
    auto t = moeprof::read_trace(moeprof::testing::golden_dir() + (r == 0 ? "/baseline.mtrace" : "/reuse.mtrace"));
    REQUIRE(t.is_ok());
    t->meta.mode = "baseline";
    t->meta.tp_size = 2;
    t->meta.tp_rank = r;
    rank_paths[r] = (rank_dir / ("baseline.rank" + std::to_string(r) + ".mtrace")).string();
    REQUIRE(moeprof::write_trace(rank_paths[r], t.value()).is_ok());
  }
  auto r2 = run_cli("plan '" + rank_paths[0] + "' '" + rank_paths[1] + "' --json --stream on");
  auto r2m = run_cli("plan '" + rank_paths[0] + "," + rank_paths[1] + "' --json --stream off");
  REQUIRE(r2.rc == 0);
  REQUIRE(r2m.rc == 0);
  json a = json::parse(r2.out), b = json::parse(r2m.out);
  REQUIRE(a["devices"].size() == 2);
  CHECK(a["devices"][0]["peak_activation_bytes"] == jm["peak_activation_bytes"]);
  json one = json::parse(run_cli("plan " + reuse + " --json").out);
  CHECK(a["devices"][1]["peak_activation_bytes"] == one["peak_activation_bytes"]);
  CHECK(a["devices"][0]["allocations"] == jm["allocations"]);
  CHECK(a["devices"][1]["allocations"] == one["allocations"]);
  // Run-level figures are the largest rank's (docs/planner.md).
  CHECK(a["allocations"].get<uint64_t>() == std::max(jm["allocations"].get<uint64_t>(), one["allocations"].get<uint64_t>()));
  CHECK(a["streamed"] == true);
  CHECK(b["streamed"] == false);
  for (json* j : {&a, &b}) j->erase("streamed");
  CHECK(a == b);

  auto fixes = run_cli("plan " + base + " --stream on --fixes");
  CHECK(fixes.rc == 2);
  CHECK(fixes.err.find("--fixes needs the whole trace in memory") != std::string::npos);

  auto dir = moeprof::testing::temp_dir("cli_stream_export");
  const std::string f1 = (dir / "s.jsonl").string(), f2 = (dir / "m.jsonl").string();
  auto e1 = run_cli("export " + base + " --out-jsonl '" + f1 + "' --stream on --json");
  auto e2 = run_cli("export " + base + " --out-jsonl '" + f2 + "' --stream off");
  REQUIRE(e1.rc == 0);
  REQUIRE(e2.rc == 0);
  CHECK(json::parse(e1.out)["records"] == count_lines(moeprof::testing::slurp(f2)) - 1);  // one header line
  CHECK(moeprof::testing::slurp(f1) == moeprof::testing::slurp(f2));
  // By default JSON lines stream too, and name the run as the in-memory path does.
  const std::string f3 = (dir / "d.jsonl").string(), f4 = (dir / "o.jsonl").string();
  auto e3 = run_cli("export " + base + " --out-jsonl '" + f3 + "' --json");
  auto e4 = run_cli("export " + base + " --out-jsonl '" + f4 + "' --json --stream off");
  REQUIRE(e3.rc == 0);
  REQUIRE(e4.rc == 0);
  CHECK(json::parse(e3.out)["run"] == json::parse(e4.out)["run"]);
  CHECK_FALSE(json::parse(e3.out)["run"].get<std::string>().empty());
  CHECK(moeprof::testing::slurp(f3) == moeprof::testing::slurp(f2));
}

// A traced program's trace: times since its start, not the recording clock; allocations without a
// name shown by their innermost user frame, in every command and rendering; a streamed report says
// what it lacks instead of printing null.
TEST_CASE("cli: traces of unmodified programs: relative times, unnamed allocations by their frame", "[cli]") {
  auto dir = moeprof::testing::temp_dir("cli_traced");
  const std::string a = (dir / "traced.mtrace").string(), b = (dir / "fixed.mtrace").string();
  const moeprof::Trace ta = traced_program(true);
  REQUIRE(moeprof::write_trace(a, ta).is_ok());
  REQUIRE(moeprof::write_trace(b, traced_program(false)).is_ok());
  // What the planner calls the frame of `forward`, and the time of the peak, +6 ms.
  const moeprof::planner::RunAnalysis an = moeprof::planner::analyze(ta);
  const std::string fwd = moeprof::planner::user_frames(an, an.lifetimes.at(1).stack_id, 1).at(0);
  REQUIRE(fwd.find("forward") != std::string::npos);
  const std::string at_peak = moeprof::reports::format_duration_ns(6'000'000);
  const uint64_t peak_ts = kTracedStart + 6'000'000;

  auto plan = run_cli("plan --categories keep '" + a + "'");
  INFO(plan.out);
  REQUIRE(plan.rc == 0);
  CHECK(plan.out.find("(device 0, " + at_peak + " after the start of the trace)") != std::string::npos);
  CHECK(plan.out.find(std::to_string(peak_ts)) == std::string::npos);
  CHECK(plan.out.find(moeprof::reports::with_commas_u(peak_ts)) == std::string::npos);
  const std::string fwd_line = line_with(plan.out, moeprof::reports::format_bytes(400'000) + "  activation");
  CHECK(fwd_line.find(fwd) != std::string::npos);
  CHECK(line_with(plan.out, moeprof::reports::format_bytes(1'000) + "  activation").find("(unnamed)") != std::string::npos);
  json pj = json::parse(run_cli("plan --json --categories keep '" + a + "'").out);
  CHECK(pj["start_timestamp_ns"] == kTracedStart);
  CHECK(pj["live_at_peak"]["timestamp_ns"] == peak_ts);
  CHECK(pj["live_at_peak"]["time_ns"] == 6'000'000);
  CHECK(pj["live_at_peak"]["activation_bytes"] == 401'000);

  // compare: the diff row of the tensor B no longer holds is named by its frame, in text and Markdown.
  const std::string md = (dir / "diff.md").string();
  auto cmp = run_cli("compare --categories keep '" + a + "' '" + b + "' --out-md '" + md + "'");
  REQUIRE(cmp.rc == 0);
  const std::string row = line_with(cmp.out, "not allocated");
  CHECK(row.find(fwd) != std::string::npos);
  CHECK(row.find(moeprof::reports::format_bytes(400'000)) != std::string::npos);
  CHECK(line_with(moeprof::testing::slurp(md), "not allocated").find(fwd) != std::string::npos);
  json cj = json::parse(run_cli("compare --json --categories keep '" + a + "' '" + b + "'").out);
  REQUIRE(cj["live_at_peak_diff"]["rows"].size() == 1);
  CHECK(cj["live_at_peak_diff"]["rows"][0]["name"] == "");
  CHECK(cj["live_at_peak_diff"]["rows"][0]["stack"][0] == fwd);
  CHECK(cj["live_at_peak_diff"]["delta_bytes"] == -400'000);

  // report: Markdown, the page and the Perfetto slices name it the same way.
  const std::string rmd = (dir / "r.md").string(), html = (dir / "r.html").string(), pf = (dir / "r.perfetto.json").string();
  auto rep = run_cli("report --categories keep '" + a + "' '" + b + "' --out-md '" + rmd + "' --out-html '" + html + "' --out-perfetto '" + pf + "'");
  REQUIRE(rep.rc == 0);
  CHECK(line_with(moeprof::testing::slurp(rmd), moeprof::reports::format_bytes(400'000)).find(fwd) != std::string::npos);
  CHECK(moeprof::testing::slurp(html).find("<td>" + moeprof::reports::xml_escape(fwd)) != std::string::npos);
  std::map<std::string, uint64_t> slices;
  const json perfetto = json::parse(moeprof::testing::slurp(pf));
  for (const auto& e : perfetto["traceEvents"])
    if (e["ph"] == "X" && e["cat"] != "kernel") slices[e["name"].get<std::string>()] = e["args"]["bytes"].get<uint64_t>();
  CHECK(slices[fwd] == 400'000);
  CHECK(slices["activation " + moeprof::reports::format_bytes(1'000)] == 1'000);
  CHECK(slices.count("") == 0);

  // Streamed: no per-allocation timeline, said in words, never null; the hand-off search runs.
  auto sj = run_cli("report --json --stream on --categories keep '" + a + "' '" + b + "'");
  REQUIRE(sj.rc == 0);
  json sdoc = json::parse(sj.out);
  for (const auto& r : sdoc["runs"]) {
    CHECK(r["streamed"] == true);
    CHECK_FALSE(r.contains("memory_timeline"));
    CHECK(r["reuse"]["handoffs_computed"] == true);
    CHECK(r["start_timestamp_ns"] == kTracedStart);
  }
  auto smd = run_cli("report --stream on --categories keep '" + a + "' '" + b + "'");
  REQUIRE(smd.rc == 0);
  CHECK(smd.out.find(moeprof::reports::streamed_note()) != std::string::npos);
  CHECK(smd.out.find("null") == std::string::npos);
  const std::string shtml = (dir / "s.html").string();
  REQUIRE(run_cli("report --stream on --categories keep '" + a + "' '" + b + "' --out-html '" + shtml + "'").rc == 0);
  CHECK(moeprof::testing::slurp(shtml).find("class=\"note streamed\"") != std::string::npos);
  // The in-memory report has the timeline and does not carry the note.
  json mdoc = json::parse(run_cli("report --json --categories keep '" + a + "'").out);
  CHECK(mdoc["runs"][0]["streamed"] == false);
  CHECK(mdoc["runs"][0]["memory_timeline"]["peak"]["time_ns"] == 6'000'000);
}
