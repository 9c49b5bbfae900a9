// A newcomer's afternoon with the CLI (issue 40): the commands a new user types, mistyped or
// misunderstood, through the built binary. Data safety first: no mistyped `run` touches the
// results of an earlier run.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/gpu_probe.h"
#include "core/trace_io.h"
#include "executor/backends.h"
#include "tests/cli/cli_util.h"
#include "tests/gpu_skip.h"

namespace fs = std::filesystem;
using moeprof::testing::count_lines;
using moeprof::testing::run_cli;
using moeprof::testing::slurp;

namespace {

// Every file under `dir` (hidden ones included) with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = slurp(e.path().string());
  return files;
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// The one line `run --backend cuda` gives where it cannot run: the build's reason in a build
// without the CUDA backend (the cpu and asan presets), else the GPU probe's.
std::string no_gpu_line() {
  if (!moeprof::cuda_backend_compiled()) return "moeprof run: error: this moeprof was built without the CUDA backend (MOEPROF_ENABLE_CUDA=OFF)";
  return "moeprof run: error: no usable GPU: " + moeprof::probe_gpus().problem;
}
}  // namespace

TEST_CASE("newcomer: a mistyped run leaves the earlier results byte for byte", "[cli][newcomer]") {
  const auto dir = moeprof::testing::temp_dir("newcomer_keep");
  const fs::path keep = dir / "keep";
  auto first = run_cli("run --backend cpu --model tiny --tokens 37 --mode all --quiet -o " + q(keep));
  REQUIRE(first.rc == 0);
  const auto before = snapshot(keep);
  REQUIRE(before.count("report.json") == 1);
  REQUIRE(before.count("fixes.mtrace") == 1);
  struct Typo {
    std::string args;
    int rc;
    std::string line;
  };
  std::vector<Typo> typos = {
      {"run --backend cpu --model kimi-k25", 2,
       "moeprof run: error: unknown model 'kimi-k25'; did you mean 'kimi-k2.5'? (built-in: deepseek-v2-lite, deepseek-v2, "
       "deepseek-v3, kimi-k2.5, tiny; or a path to a config.json)"},
      {"run --backend cpu --model tiny --tp 3", 2, "moeprof run: error: tiny: --tp 3 does not divide num_attention_heads (4)"},
      {"run --backend cpu --model tiny --layers 99", 2, "moeprof run: error: tiny: --layers 99 exceeds num_hidden_layers (4)"},
      {"run --backend cpu --model tiny --tokens 0", 2,
       "moeprof run: error: --tokens: must be an integer from 1 to 1,099,511,627,776 (got 0) (see moeprof run --help)"},
  };
  // Serving inputs the run would refuse at its first step are refused before it writes.
  const std::string bad_ids = (dir / "bad-ids.jsonl").string(), long_prompt = (dir / "long.jsonl").string();
  moeprof::testing::spit(bad_ids, "{\"prompt_tokens\": [5, 17, 999999], \"output_tokens\": 3}\n");
  moeprof::testing::spit(long_prompt, "{\"prompt_tokens\": 12, \"output_tokens\": 2}\n{\"prompt_tokens\": 500, \"output_tokens\": 3}\n");
  typos.push_back({"run --backend cpu --model tiny --workload " + q(bad_ids), 2,
                   "moeprof run: error: " + bad_ids + " line 1: token id 999999 is outside the vocabulary (1000)"});
  typos.push_back({"run --backend cpu --model tiny --workload " + q(long_prompt) + " --kv-tokens 100", 2,
                   "moeprof run: error: request 1 (line 2) needs 502 KV tokens, more than the whole pool (100 tokens): it could never run"});
  typos.push_back({"run --backend cpu --model tiny --workload " + q(long_prompt) + " --context-length 100", 2,
                   "moeprof run: error: request 1 (line 2) needs 502 positions (prompt + output - 1), more than the context length 100"});
  typos.push_back({"run --backend meta --model tiny --workload " + q(long_prompt) + " --mem-fraction-static 0.8", 2,
                   "moeprof run: error: --mem-fraction-static needs the device's memory, which this backend does not report (the meta "
                   "backend: give --gpu-memory BYTES; or set the pool with --kv-tokens N)"});
  typos.push_back({"run --backend meta --model tiny --workload " + q(long_prompt) + " --gpu-memory H100 --mem-fraction-static nan", 2,
                   "moeprof run: error: --mem-fraction-static: must be a number from 0.000001 to 1 (got nan) (see moeprof run --help)"});
  // A pool from --mem-fraction-static: on the meta backend the weights are known before the run.
  typos.push_back({"run --backend meta --model tiny --workload " + q(long_prompt) + " --gpu-memory 100000000 --mem-fraction-static 0.01",
                   2,
                   "moeprof run: error: Not enough memory for the KV pool: --mem-fraction-static 0.01 of the 100,000,000 B free gives "
                   "1,000,000 B, the weights take at least 4,662,816 B: -3,662,816 B are left, less than one page (1 token(s) x 384 B). "
                   "Increase --mem-fraction-static or give --kv-tokens N"});
  typos.push_back({"run --backend meta --model tiny --workload " + q(long_prompt) + " --gpu-memory 100000000 --mem-fraction-static 0.0468",
                   2, "moeprof run: error: request 1 (line 2) needs 502 KV tokens, more than the whole pool (44 tokens): it could never run "
                   "(--mem-fraction-static 0.0468 gives a pool of at most 44 tokens on this device)"});
  typos.push_back({"run --backend cpu --model tiny --seed -1", 2,
                   "moeprof run: error: --seed: must be an integer from 0 to 18,446,744,073,709,551,615 (got -1) (see moeprof run --help)"});
  typos.push_back({"run --backend cpu --model tiny --symm-outside-layer 2", 2,
                   "moeprof run: error: --symm-outside-layer needs --symm-mem on (it places outputs outside the symmetric pool)"});
  typos.push_back({"run -q --backend cpu --model tiny --tp 2 --symm-mem on --symm-outside-layer 4", 2,
                   "moeprof run: error: --symm-outside-layer 4: the run has layers 0 to 3"});
  typos.push_back({"run --backend cpu --model tiny --workload synthetic:2,3,4 --cuda-graph-bs ''", 2,
                   "moeprof run: error: --cuda-graph-bs: item 1 of '' must be an integer from 1 to 65,536 (got '')"});
  // An empty item is a typo, not a size to skip (it had been dropped without a word).
  typos.push_back({"run --backend cpu --model tiny --workload synthetic:2,3,4 --cuda-graph-bs 1,,2", 2,
                   "moeprof run: error: --cuda-graph-bs: item 2 of '1,,2' must be an integer from 1 to 65,536 (got '')"});
  typos.push_back({"run --backend cpu --model tiny --workload synthetic:2,3,4 --cuda-graph-bs 4,65537", 2,
                   "moeprof run: error: --cuda-graph-bs: item 2 of '4,65537' must be an integer from 1 to 65,536 (got '65537')"});
  typos.push_back({"run --backend cpu --model tiny --workload ''", 2,
                   "moeprof run: error: --workload is empty (a JSONL file, or synthetic:N,PROMPT,OUTPUT[,SEED])"});
  if (moeprof::probe_gpus().usable().empty() || !moeprof::cuda_backend_compiled())
    typos.push_back({"run --backend cuda", 3, no_gpu_line()});
  for (const auto& t : typos) {
    INFO("moeprof " << t.args);
    auto r = run_cli(t.args + " -o " + q(keep));
    CHECK(r.rc == t.rc);
    CHECK(r.err == t.line + "\n");
    CHECK(snapshot(keep) == before);  // nothing removed, nothing added, not even a staging folder
  }
}

TEST_CASE("newcomer: a run replaces the earlier run's outputs only once it has its own", "[cli][newcomer]") {
  const auto dir = moeprof::testing::temp_dir("newcomer_replace");
  const fs::path out = dir / "o";
  fs::create_directories(out);
  moeprof::testing::spit((out / "notes.txt").string(), "the user's own file\n");
  REQUIRE(run_cli("run --backend cpu --model tiny --tokens 37 --mode all --quiet -o " + q(out)).rc == 0);
  REQUIRE(fs::exists(out / "fixes.mtrace"));
  // A second run of two modes: the earlier run's third trace is not left beside this run's report.
  auto second = run_cli("run --backend cpu --model tiny --tokens 41 --mode both -o " + q(out));
  REQUIRE(second.rc == 0);
  CHECK(second.err.find("moeprof run: replaced 6 output(s) of an earlier run in " + out.string() + "\n") != std::string::npos);
  const auto files = snapshot(out);
  CHECK(files.size() == 6);  // baseline, reuse, report.json/md/html, notes.txt
  CHECK(files.count("fixes.mtrace") == 0);
  CHECK(files.at("notes.txt") == "the user's own file\n");
  auto t = moeprof::read_trace((out / "baseline.mtrace").string());
  REQUIRE(t.is_ok());
  CHECK(t->meta.tokens == 41);
  // The paths printed are the published ones.
  CHECK(second.out.find("traces: " + (out / "baseline.mtrace").string() + " " + (out / "reuse.mtrace").string() + "\n") !=
        std::string::npos);
  CHECK(second.out.find(".moeprof-run.") == std::string::npos);
}

namespace {

// A tiny run's two traces, written once per test binary.
const fs::path& tiny_run() {
  static const fs::path dir = [] {
    const auto d = moeprof::testing::temp_dir("newcomer_tiny") / "t";
    REQUIRE(run_cli("run --backend cpu --model tiny --quiet -o " + q(d)).rc == 0);
    return d;
  }();
  return dir;
}

const fs::path& kimi_run() {
  static const fs::path dir = [] {
    const auto d = moeprof::testing::temp_dir("newcomer_kimi") / "k";
    REQUIRE(run_cli("run --backend meta --model kimi-k2.5 --tokens 128 --mode baseline --quiet -o " + q(d)).rc == 0);
    return d;
  }();
  return dir;
}

void check_error(const std::string& args, int rc, const std::string& line) {
  INFO("moeprof " << args);
  auto r = run_cli(args);
  CHECK(r.rc == rc);
  CHECK(r.err == line + "\n");
  CHECK(r.out.empty());
}

}  // namespace

TEST_CASE("newcomer: plan of unrelated traces refuses to merge them as ranks", "[cli][newcomer]") {
  const std::string t = (tiny_run() / "baseline.mtrace").string(), r = (tiny_run() / "reuse.mtrace").string();
  const std::string k = (kimi_run() / "baseline.mtrace").string();
  check_error("plan " + q(t) + " " + q(k), 2,
              "moeprof plan: error: " + t + " and " + k + " are not ranks of one run: models tiny and kimi-k2.5; to compare two runs: moeprof compare " +
                  t + " " + k);
  check_error("plan " + q(t) + " " + q(t), 2, "moeprof plan: error: " + t + " is given twice; to compare two runs: moeprof compare " + t + " " + t);
  check_error("plan " + q(t) + " " + q(r), 2,
              "moeprof plan: error: " + t + " and " + r + " are not ranks of one run: modes baseline and reuse; to compare two runs: moeprof compare " +
                  t + " " + r);
  // Streamed, the same refusal; and report's comma form.
  check_error("plan --stream on " + q(t) + " " + q(k), 2,
              "moeprof plan: error: " + t + " and " + k + " are not ranks of one run: models tiny and kimi-k2.5; to compare two runs: moeprof compare " +
                  t + " " + k);
  auto rep = run_cli("report " + q(t + "," + k) + " --out-json /dev/null");
  CHECK(rep.rc == 2);
  CHECK(rep.err.find("are not ranks of one run: models tiny and kimi-k2.5") != std::string::npos);
  // Two single-device runs of one workload are not ranks either.
  const auto other = moeprof::testing::temp_dir("newcomer_other") / "o";
  REQUIRE(run_cli("run --backend cpu --model tiny --mode baseline --quiet -o " + q(other)).rc == 0);
  const std::string t2 = (other / "baseline.mtrace").string();
  check_error("plan " + q(t) + " " + q(t2), 2,
              "moeprof plan: error: " + t + " and " + t2 + " are not ranks of one run: each is a run of one device (TP and EP size 1); to compare two "
              "runs: moeprof compare " + t + " " + t2);
}

TEST_CASE("newcomer: a file of another kind is named, with the command that reads it", "[cli][newcomer]") {
  const std::string report = (tiny_run() / "report.json").string(), trace = (tiny_run() / "baseline.mtrace").string();
  const auto dir = moeprof::testing::temp_dir("newcomer_kinds");
  const std::string pickle = (dir / "snap.pickle").string();
  moeprof::testing::spit(pickle, std::string("\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94.", 14));
  const std::string empty = (dir / "empty.mtrace").string();
  moeprof::testing::spit(empty, "");
  check_error("plan " + q(report), 2,
              "moeprof plan: error: " + report + ": not a moeprof trace: it is a moeprof JSON report; moeprof gate reads reports: moeprof gate "
              "--baseline BASE.json --current " + report);
  check_error("plan " + q(pickle), 2,
              "moeprof plan: error: " + pickle + ": not a moeprof trace: it is a Python pickle (a PyTorch memory snapshot?); convert a "
              "torch.cuda.memory._dump_snapshot pickle with moeprof import " + pickle + " --out " + pickle + ".mtrace");
  check_error("import " + q(trace) + " --out " + q(dir / "x.mtrace"), 2,
              "moeprof import: error: " + trace + ": not a pickle: it is a moeprof trace (.mtrace); plan, compare, report and export read "
              "traces: moeprof plan " + trace);
  check_error("compare " + q(empty) + " " + q(trace), 2, "moeprof compare: error: " + empty + ": not a moeprof trace: it is an empty file");
  CHECK_FALSE(fs::exists(dir / "x.mtrace"));
}

TEST_CASE("newcomer: a what-if rule that matches nothing says which part and the nearest names", "[cli][newcomer]") {
  const auto dir = moeprof::testing::temp_dir("newcomer_rules");
  const std::string rules = (dir / "typo.rules").string();
  moeprof::testing::spit(rules, "free name=moe_outptu after op=x\nfree scope=layer.*/atn after op=x\n");
  auto r = run_cli("plan " + q(tiny_run() / "baseline.mtrace") + " --what-if " + q(rules));
  CHECK(r.rc == 0);
  CHECK(r.out.find("  warning: the rule at " + rules + ":1 matched nothing: no allocation is named 'moe_outptu'; did you mean 'moe_output'?\n") !=
        std::string::npos);
  CHECK(r.out.find("  warning: the rule at " + rules + ":2 matched nothing: no allocation has the scope 'layer.*/atn'; did you mean "
                   "'layer.*/attn' or 'layer.*/mlp'?\n") != std::string::npos);
  auto j = run_cli("plan " + q(tiny_run() / "baseline.mtrace") + " --what-if " + q(rules) + " --json");
  CHECK(j.rc == 0);
  CHECK(j.out.find("\"unmatched\": \"no allocation is named 'moe_outptu'; did you mean 'moe_output'?\"") != std::string::npos);
}

TEST_CASE("newcomer: range errors name the real range in one short line", "[cli][newcomer]") {
  const std::string t = q(tiny_run() / "baseline.mtrace");
  check_error("plan " + t + " --top 0", 2, "moeprof plan: error: --top: must be an integer from 1 to 1,000,000 (got 0) (see moeprof plan --help)");
  check_error("plan " + t + " --fixes 0", 2, "moeprof plan: error: --fixes: must be an integer from 1 to 1,000 (got 0) (see moeprof plan --help)");
  check_error("plan " + t + " --arena-time-limit -2", 2,
              "moeprof plan: error: --arena-time-limit: must be a number of seconds from 0 to 86,400 (got -2) (see moeprof plan --help)");
  check_error("arena x.csv --time-limit -1", 2,
              "moeprof arena: error: --time-limit: must be a number of seconds from 0 to 86,400 (got -1) (see moeprof arena --help)");
  check_error("run --tp abc", 2, "moeprof run: error: --tp: must be an integer from 1 to 1,048,576 (got abc) (see moeprof run --help)");
  check_error("run --peak-tflops -1", 2, "moeprof run: error: --peak-tflops: must be a number greater than 0 (got -1) (see moeprof run --help)");
  // --fixes without N ranks up to 10: the tiny run's fixes are listed.
  auto f = run_cli("plan " + t + " --fixes");
  CHECK(f.rc == 0);
  CHECK(f.out.find("ranked fixes") != std::string::npos);
}

TEST_CASE("newcomer: compare of two workloads says so, and large figures keep their columns apart", "[cli][newcomer]") {
  const std::string t = (tiny_run() / "baseline.mtrace").string(), k = (kimi_run() / "baseline.mtrace").string();
  auto r = run_cli("compare " + q(t) + " " + q(k));
  REQUIRE(r.rc == 0);
  CHECK(r.out.rfind("warning: A and B run different workloads (model tiny vs kimi-k2.5, tokens 100 vs 128, layers 4 vs 61): the changes "
                    "below are the workloads' difference, not a change of memory behaviour\n", 0) == 0);
  // The headline table's columns are aligned: every row as long as the header (before, a figure
  // wider than its column pushed the rest of its row out of line).
  const size_t head = r.out.find("\n\n") + 2;
  const size_t header_len = r.out.find('\n', head) - head;
  for (const char* label : {"  peak activation ", "  peak total ", "  churn ", "  allocations ", "  live at the activation peak: weights "}) {
    INFO(label);
    const size_t at = r.out.find(label, head);
    REQUIRE(at != std::string::npos);
    CHECK(r.out.find('\n', at) - at == header_len);
  }
  // The same workload: no such warning.
  auto same = run_cli("compare " + q(tiny_run() / "baseline.mtrace") + " " + q(tiny_run() / "reuse.mtrace"));
  CHECK(same.rc == 0);
  CHECK(same.out.find("different workloads") == std::string::npos);
}

TEST_CASE("newcomer: plain moeprof prints help, mistyped names get the nearest ones", "[cli][newcomer]") {
  auto help = run_cli("");
  CHECK(help.rc == 0);
  CHECK(help.out.rfind("moeprof: memory profiler and buffer planner for large-model inference\n", 0) == 0);
  CHECK(help.err.empty());
  auto sub = run_cli("plna x");
  CHECK(sub.rc == 2);
  CHECK(sub.err.rfind("moeprof: error: unknown subcommand 'plna'; did you mean 'plan'? (subcommands: run, ", 0) == 0);
  CHECK(count_lines(sub.err) == 1);
  check_error("run --tokns 5", 109, "moeprof run: error: unknown option '--tokns'; did you mean '--tokens'? (see moeprof run --help)");
  // Model names are case-insensitive, as the README spells them.
  auto kimi = run_cli("run --backend meta --model Kimi-K2.5 --tokens 64 --mode baseline --quiet -o " +
                      q(moeprof::testing::temp_dir("newcomer_case") / "o"));
  CHECK(kimi.rc == 0);
  CHECK(kimi.out.rfind("moeprof run: kimi-k2.5, 64 tokens", 0) == 0);
}

TEST_CASE("newcomer: run and devices give one reason for no GPU", "[cli][newcomer]") {
  const moeprof::GpuProbe probe = moeprof::probe_gpus();
  if (!probe.devices.empty()) MOEPROF_SKIP("a GPU is present: the no-GPU messages cannot be compared here");
  auto dev = run_cli("devices");
  CHECK(dev.rc == 3);
  CHECK(dev.out == "no usable GPU: " + probe.problem + "\n");
  check_error("run --backend cuda -o " + q(moeprof::testing::temp_dir("newcomer_nogpu") / "o"), 3, no_gpu_line());
}

TEST_CASE("newcomer: the gate's table is in exact bytes, and a failure says how to accept the change", "[cli][newcomer]") {
  const std::string base = std::string(MOEPROF_SOURCE_DIR) + "/examples/ci/tiny-memory-baseline.json";
  const auto dir = moeprof::testing::temp_dir("newcomer_gate") / "o";
  REQUIRE(run_cli("run --backend cpu --model tiny --tokens 120 --quiet -o " + q(dir)).rc == 0);
  const std::string cur = (dir / "report.json").string();
  auto g = run_cli("gate --baseline " + q(base) + " --current " + q(cur));
  CHECK(g.rc == 1);
  CHECK(g.out.find("| baseline | peak_activation_bytes | 613,460 B | ") != std::string::npos);
  CHECK(g.out.find(" | 0 B | ❌ regression |") != std::string::npos);
  CHECK(g.out.find("\nIf the change is intended, make the current figures the baseline and commit it:\n  moeprof gate --baseline " + base +
                   " --current " + cur + " --out-baseline " + base + " --allow-config-change\n") != std::string::npos);
  auto pass = run_cli("gate --baseline " + q(base) + " --current " + q(tiny_run() / "report.json"));
  CHECK(pass.rc == 0);
  CHECK(pass.out.find("If the change is intended") == std::string::npos);
}

TEST_CASE("newcomer: an imported snapshot shows what it has, and an empty one how to record one", "[cli][newcomer]") {
  const std::string golden = std::string(MOEPROF_SOURCE_DIR) + "/tests/golden/torch/";
  const auto dir = moeprof::testing::temp_dir("newcomer_import");
  REQUIRE(run_cli("import " + q(golden + "two_devices.pickle") + " --out " + q(dir / "two.mtrace")).rc == 0);
  auto p = run_cli("plan " + q(dir / "two.mtrace"));
  CHECK(p.rc == 0);
  CHECK(p.out.find("run two_devices: mode imported, backend torch-snapshot\n") != std::string::npos);
  CHECK(p.out.find("  reserved peak    31.5 MB (31,457,280 B) (the allocator's segments, device 0)\n") != std::string::npos);
  CHECK(p.out.find("TP 0/1") == std::string::npos);
  auto md = run_cli("report " + q(dir / "two.mtrace") + " --out-md -");
  CHECK(md.out.find("| two_devices | imported | - | - | - | torch-snapshot |") != std::string::npos);
  auto e = run_cli("import " + q(golden + "empty.pickle") + " --out " + q(dir / "empty.mtrace"));
  CHECK(e.rc == 0);
  CHECK(e.err.find("moeprof import: note: " + golden + "empty.pickle has no allocations (the snapshot holds no allocation history: call "
                   "torch.cuda.memory._record_memory_history() before the code to profile, then torch.cuda.memory._dump_snapshot(FILE))\n") !=
        std::string::npos);
  auto ep = run_cli("plan " + q(dir / "empty.mtrace"));
  CHECK(ep.out.rfind("warning: run empty: no allocations recorded (the snapshot holds no allocation history: call "
                     "torch.cuda.memory._record_memory_history()", 0) == 0);
}

TEST_CASE("newcomer: an output that is an input is refused, and a failed export keeps the earlier file", "[cli][newcomer]") {
  const auto dir = moeprof::testing::temp_dir("newcomer_outputs");
  const fs::path trace = dir / "a b.mtrace", link = dir / "link.mtrace", out = dir / "out.jsonl";
  fs::copy_file(fs::path(MOEPROF_SOURCE_DIR) / "examples/traces/tiny-baseline.mtrace", trace, fs::copy_options::overwrite_existing);
  fs::remove(link);
  fs::create_symlink(trace, link);
  const std::string bytes = slurp(trace.string());
  struct Case {
    std::string args, line;
  };
  const std::vector<Case> cases = {
      {"export " + q(trace) + " --out-jsonl " + q(trace),
       "moeprof export: error: --out-jsonl " + trace.string() + " is the input " + trace.string() + ": it would be replaced; write elsewhere"},
      {"export " + q(link) + " --stream off --out-perfetto " + q(trace),
       "moeprof export: error: --out-perfetto " + trace.string() + " is the input " + link.string() + ": it would be replaced; write elsewhere"},
      {"report " + q(link) + " --out-html " + q(trace),
       "moeprof report: error: --out-html " + trace.string() + " is the input " + link.string() + ": it would be replaced; write elsewhere"},
      {"compare " + q(trace) + " " + q(trace) + " --out-md " + q(link),
       "moeprof compare: error: --out-md " + link.string() + " is the input " + trace.string() + ": it would be replaced; write elsewhere"},
      {"plan " + q(trace) + " --arena --arena-out-csv " + q(trace),
       "moeprof plan: error: --arena-out-csv " + trace.string() + " is the input " + trace.string() + ": it would be replaced; write elsewhere"},
      {"report " + q(trace) + " --out-json - --out-md -",
       "moeprof report: error: more than one --out-* option is \"-\": stdout takes one; give the others a file"},
      {"export " + q(trace) + " --out-jsonl - --out-perfetto -",
       "moeprof export: error: --out-jsonl and --out-perfetto both \"-\": give one of them a file"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    auto r = run_cli(c.args);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(r.err == c.line + "\n");
    CHECK(slurp(trace.string()) == bytes);
  }
  // report with several outputs, one of which cannot be written: none is written.
  const fs::path ok = dir / "ok.json";
  fs::remove(ok);
  auto partial = run_cli("report " + q(trace) + " --out-json " + q(ok) + " --out-md " + q(dir / "missing-folder" / "x.md"));
  CHECK(partial.rc == 2);
  CHECK(partial.err == "moeprof report: error: cannot create " + (dir / "missing-folder" / "x.md").string() + ": No such file or directory\n");
  CHECK_FALSE(fs::exists(ok));
  auto folder = run_cli("report " + q(trace) + " --out-json " + q(ok) + " --out-html " + q(dir));
  CHECK(folder.err == "moeprof report: error: --out-html " + dir.string() + " is a directory\n");
  CHECK_FALSE(fs::exists(ok));
  // A streamed export that fails (a missing trace, or one corrupt in its middle) leaves the earlier output byte for
  // byte: it is written beside and renamed only once complete.
  auto first = run_cli("export " + q(trace) + " --out-jsonl " + q(out));
  REQUIRE(first.rc == 0);
  const std::string jsonl = slurp(out.string());
  REQUIRE(count_lines(jsonl) > 10);
  const fs::path bad = dir / "bad.mtrace";
  {
    std::string b = bytes;
    b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0xff);
    std::ofstream(bad, std::ios::binary) << b;
  }
  for (const fs::path& in : {dir / "missing.mtrace", bad}) {
    INFO(in);
    auto r = run_cli("export " + q(in) + " --out-jsonl " + q(out));
    CHECK(r.rc == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK(slurp(out.string()) == jsonl);
  }
  // Through a link: the file it names is replaced, the link stays, the permissions too.
  const fs::path target = dir / "target.jsonl", via = dir / "via.jsonl";
  fs::remove(via);
  moeprof::testing::spit(target.string(), "old\n");
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  fs::create_symlink(target, via);
  REQUIRE(run_cli("export " + q(trace) + " --out-jsonl " + q(via)).rc == 0);
  CHECK(fs::is_symlink(via));
  CHECK(slurp(target.string()) == jsonl);
  CHECK(fs::status(target).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  // budget, fit and gate refuse an output over an input too; gate's --out-baseline may replace --baseline.
  const fs::path rep = dir / "r.json", rep2 = dir / "r2.json";
  REQUIRE(run_cli("report " + q(trace) + " --out-json " + q(rep)).rc == 0);
  fs::copy_file(rep, rep2, fs::copy_options::overwrite_existing);
  CHECK(run_cli("budget " + q(trace) + " --gpu-memory H200 --out-json " + q(trace)).rc == 2);
  CHECK(run_cli("gate --baseline " + q(rep) + " --current " + q(rep2) + " --out-md " + q(rep2)).rc == 2);
  CHECK(run_cli("gate --baseline " + q(rep) + " --current " + q(rep2) + " --out-baseline " + q(rep)).rc == 0);
  CHECK(slurp(trace.string()) == bytes);
  size_t left = 0;
  for (const auto& e : fs::directory_iterator(dir)) left += e.path().filename().string().find(".tmp") != std::string::npos;
  CHECK(left == 0);  // no temporary left behind
}

TEST_CASE("newcomer: gate keeps stdout to one document and never proposes a failed run as the baseline", "[cli][newcomer]") {
  const auto dir = moeprof::testing::temp_dir("newcomer_gate");
  const std::string valid = std::string(MOEPROF_SOURCE_DIR) + "/tests/fuzz/corpus/report/seed-valid.json",
                    failed = std::string(MOEPROF_SOURCE_DIR) + "/tests/fuzz/corpus/report/seed-failed-run.json";
  for (const char* out : {"--out-md -", "--out-junit -", "--out-baseline -"}) {
    INFO(out);
    auto r = run_cli("gate --json --baseline " + q(valid) + " --current " + q(valid) + " " + out);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "moeprof gate: error: --json prints on stdout: give the --out-* options a file, not \"-\"\n");
  }
  auto two = run_cli("gate --baseline " + q(valid) + " --current " + q(valid) + " --out-md - --out-junit -");
  CHECK(two.rc == 2);
  // One --out-* on stdout: stdout is that document alone, the verdict goes to stderr.
  auto md = run_cli("gate --baseline " + q(valid) + " --current " + q(valid) + " --out-baseline -");
  CHECK(md.rc == 0);
  CHECK(nlohmann::json::parse(md.out)["schema_version"] == 1);
  CHECK(md.err.find("moeprof gate: PASS") != std::string::npos);
  // A failed current run: no baseline written, and the hint says to run it again.
  const fs::path prop = dir / "proposed.json";
  fs::remove(prop);
  auto f = run_cli("gate --baseline " + q(valid) + " --current " + q(failed) + " --out-baseline " + q(prop));
  CHECK(f.rc == 1);
  CHECK_FALSE(fs::exists(prop));
  CHECK(f.err.find("moeprof gate: not writing " + prop.string() + ": current run ") != std::string::npos);
  CHECK(f.out.find("run it again") != std::string::npos);
  CHECK(f.out.find("If the change is intended") == std::string::npos);
  // A folder or an empty file is named as such.
  const fs::path empty = dir / "empty.json";
  moeprof::testing::spit(empty.string(), "");
  auto d = run_cli("gate --baseline " + q(valid) + " --current " + q(dir));
  CHECK(d.rc == 2);
  CHECK(d.err == "moeprof gate: error: current: cannot read report " + dir.string() + ": it is a directory\n");
  auto e = run_cli("gate --baseline " + q(empty) + " --current " + q(valid));
  CHECK(e.rc == 2);
  CHECK(e.err == "moeprof gate: error: baseline: report " + empty.string() + " is an empty file\n");
}

TEST_CASE("newcomer: the serving pre-check's pool is the run's own on the meta backend, so a pool that fits runs", "[cli][newcomer]") {
  // DeepSeek-V2-Lite, 2 layers (greedy routing: no score bias): weights W = 1,374,722,560 B; at
  // G = 2 (W + 4,708) and fraction 0.5, 4,708 B are left: 2 tokens of 2,304 B, what the request needs.
  const auto dir = moeprof::testing::temp_dir("newcomer_precheck");
  const std::string base = "run -q --backend meta --model deepseek-v2-lite --layers 2 --workload synthetic:1,1,2 --context-length 64 "
                           "--disable-cuda-graph --mem-fraction-static 0.5 --json -o " + q(dir / "out") + " --gpu-memory ";
  auto ok = run_cli(base + "2749454536");
  INFO(ok.err);
  REQUIRE(ok.rc == 0);
  const auto j = nlohmann::json::parse(ok.out);
  CHECK(j["runs"][0]["serving"]["kv_pool_tokens"] == 2);
  CHECK(j["runs"][0]["serving"]["memory"]["weights_bytes"] == 1374722560);
  // 202 B less: 4,607 B are left, 1 token, refused before the run.
  auto short_by_two = run_cli(base + "2749454334");
  CHECK(short_by_two.rc == 2);
  CHECK(short_by_two.err.find("more than the whole pool (1 token)") != std::string::npos);
}
