// moeprof run: executes the DeepSeek-V2-family model in baseline and/or reuse mode, records one
// trace per mode, analyses them and writes DIR/report.json (+ .md, .html).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/trace_io.h"
#include "core/version.h"
#include "executor/backends.h"
#include "executor/recorder.h"
#include "executor/run.h"
#include "executor/tp_run.h"
#include "model/config.h"
#include "planner/analysis.h"
#include "reports/format.h"
#include "reports/json_report.h"
#include "reports/html_report.h"
#include "reports/markdown_report.h"
#ifdef MOEPROF_HAVE_CUDA
#include "profiler/cupti_tracer.h"
#endif

namespace moeprof::cli {

namespace {

struct RunArgs {
  std::string model;
  std::string backend = "auto";
  std::string mode = "both";
  int64_t tokens = 0;
  int64_t layers = 0;
  int tp = 0;
  int gpus = 1;  // > 1: real TP over NCCL, one rank per GPU (executor/tp_run.h)
  std::string weights = "auto";
  std::string out = "moeprof-out";
  uint64_t seed = 0x5EED;
  bool quiet = false;
  bool json = false;
  bool cupti = true;
};

#ifdef MOEPROF_HAVE_CUDA
// Compares the CUPTI view of a run with the executor's own accounting, category by category
// (each category's high-water mark and the bytes allocated). Returns "" when they agree.
std::string cupti_disagreement(const planner::RunAnalysis& c, const CategoryCounters& acc) {
  std::string diff;
  const auto& d = c.devices.at(0);
  for (int i = 0; i < kNumCategories; ++i) {
    const auto cat = static_cast<Category>(i);
    if (d.peak_by_category[cat] != acc.peak[i] || d.churn_by_category[cat] != acc.allocated[i])
      diff += fmt::format(" {}: CUPTI peak {} churn {} vs executor peak {} churn {};", category_name(cat),
                          d.peak_by_category[cat], d.churn_by_category[cat], acc.peak[i], acc.allocated[i]);
  }
  return diff;
}
#endif

std::string mb(uint64_t b) { return reports::format_bytes(b); }

int run_command(const RunArgs& a) {
  // Backend choice. "auto": the CUDA backend when a usable GPU is present, else the CPU reference.
  std::unique_ptr<Backend> backend;
  std::string backend_note;
  const bool multi_gpu = a.gpus > 1;
  if (multi_gpu && a.backend == "cpu") {
    std::fprintf(stderr, "moeprof run: --gpus %d needs the CUDA backend (got --backend cpu)\n", a.gpus);
    return kExitBadInput;
  }
  if (a.backend == "cuda" || a.backend == "auto") {
    auto cb = make_cuda_backend(0);
    if (cb.is_ok()) {
      backend = std::move(cb).value();
    } else if (a.backend == "cuda" || multi_gpu) {
      std::fprintf(stderr, "moeprof run: %s\n", cb.status().message().c_str());
      return kExitRunFailure;
    } else {
      backend_note = cb.status().message();
    }
  }
  if (!backend) backend = make_cpu_backend();
  const bool on_gpu = backend->name() == "cuda";

  // Defaults: the seed case on a GPU, the tiny model on the CPU.
  RunPlan plan;
  plan.model = a.model.empty() ? (on_gpu ? "kimi-k2.5" : "tiny") : a.model;
  plan.tokens = a.tokens > 0 ? a.tokens : (on_gpu ? 16384 : (plan.model == "tiny" ? 100 : 64));
  plan.tp = a.tp > 0 ? a.tp : (multi_gpu ? a.gpus : (on_gpu && a.model.empty() ? 4 : 1));
  plan.layers = a.layers;
  plan.seed = a.seed;
  plan.out_dir = a.out;
  if (a.mode == "both") plan.modes = {MemoryMode::kBaseline, MemoryMode::kReuse};
  else if (a.mode == "baseline") plan.modes = {MemoryMode::kBaseline};
  else plan.modes = {MemoryMode::kReuse};
  plan.weights = a.weights == "shared" ? WeightsMode::kShared
                                       : (a.weights == "per-layer" ? WeightsMode::kPerLayer : WeightsMode::kAuto);
  plan.progress = !a.quiet && ::isatty(STDERR_FILENO);
  plan.log = a.quiet ? nullptr : stderr;

#ifdef MOEPROF_HAVE_CUDA
  // On the GPU, the run also traces itself with the CUPTI recorder (DIR/<mode>.cupti.mtrace).
  auto tracer = std::make_shared<std::unique_ptr<profiler::CuptiTracer>>();
  std::vector<std::string> cupti_paths;
  if (on_gpu && a.cupti && multi_gpu && !a.quiet)
    std::fprintf(stderr, "moeprof: --gpus %d: the in-process CUPTI trace is skipped for multi-GPU runs "
                         "(the executor's own traces are written per rank and merged)\n", a.gpus);
  if (on_gpu && a.cupti && !multi_gpu) {
    plan.before_mode = [&, tracer](const std::string& mode, const RunMeta& meta) -> Status {
      RunMeta m = meta;
      m.name = mode + "-cupti";
      m.backend = "cupti";
      std::string path = (std::filesystem::path(a.out) / (mode + ".cupti.mtrace")).string();
      auto t = profiler::CuptiTracer::start(path, m);
      if (!t.is_ok()) return t.status();
      *tracer = std::move(t).value();
      cupti_paths.push_back(path);
      return Status::ok();
    };
    plan.after_mode = [tracer](const std::string&) -> Status {
      if (!*tracer) return Status::ok();
      Status st = (*tracer)->stop();
      tracer->reset();
      return st;
    };
  }
#endif
  // Multi-GPU: execute_tp_run_plan makes its own backend per GPU; the probe on GPU 0 goes first.
  const std::string backend_name = backend->name();
  const std::string device_name = backend->device_name();
  if (multi_gpu) backend.reset();
  auto res = multi_gpu ? execute_tp_run_plan(plan, a.gpus) : execute_run_plan(*backend, plan);
  if (!res.is_ok()) {
    std::fprintf(stderr, "moeprof run: %s\n", res.status().message().c_str());
    return res.status().exit_code();
  }
  const RunPlanResult& r = res.value();

  // Analyse the traces as written (read back from disk), check them against the executor's own
  // accounting, and write the report.
  std::vector<planner::RunAnalysis> analyses;
  for (const auto& m : r.modes) {
    auto tr = read_trace(m.trace_path);
    if (!tr.is_ok()) {
      std::fprintf(stderr, "moeprof run: %s\n", tr.status().message().c_str());
      return kExitRunFailure;
    }
    analyses.push_back(planner::analyze(tr.value()));
    const auto& an = analyses.back();
    if (an.peak_total_bytes != m.accounting.peak_total || an.peak_activation_bytes != m.accounting.peak_activation) {
      std::fprintf(stderr,
                   "moeprof run: %s trace disagrees with the executor's accounting (peak total %llu vs %llu, "
                   "activation %llu vs %llu)\n",
                   m.mode.c_str(), static_cast<unsigned long long>(an.peak_total_bytes),
                   static_cast<unsigned long long>(m.accounting.peak_total),
                   static_cast<unsigned long long>(an.peak_activation_bytes),
                   static_cast<unsigned long long>(m.accounting.peak_activation));
      return kExitRunFailure;
    }
  }
#ifdef MOEPROF_HAVE_CUDA
  bool cupti_agrees = true;
  for (size_t i = 0; i < cupti_paths.size() && i < r.modes.size(); ++i) {
    auto tr = read_trace(cupti_paths[i]);
    if (!tr.is_ok()) {
      std::fprintf(stderr, "moeprof run: %s\n", tr.status().message().c_str());
      return kExitRunFailure;
    }
    // Allocations with no API call of the program behind them (correlation id 0, no tag): the
    // driver's own, e.g. modules' static __device__ memory loaded lazily at a kernel's first
    // launch. They are reported, and left out of the comparison with the executor's accounting.
    Trace& t = tr.value();
    uint64_t driver_allocs = 0, driver_bytes = 0;
    std::erase_if(t.records, [&](const TraceRecord& rec) {
      const bool driver = rec.kind == EventKind::kAlloc && rec.seq == 0 && rec.name_id == StrId::kNone &&
                          rec.category == Category::kUnknown;
      if (driver) {
        ++driver_allocs;
        driver_bytes += rec.bytes;
      }
      return driver;
    });
    if (driver_allocs > 0)
      std::fprintf(stderr, "moeprof run: %s: CUPTI also saw %llu driver-internal allocations (%llu B, no API call behind them, e.g. module static memory)\n",
                   r.modes[i].mode.c_str(), static_cast<unsigned long long>(driver_allocs),
                   static_cast<unsigned long long>(driver_bytes));
    planner::RunAnalysis c = planner::analyze(t);
    std::string diff = c.devices.empty() ? std::string(" no allocations recorded") : cupti_disagreement(c, r.modes[i].accounting);
    if (!diff.empty()) {
      cupti_agrees = false;
      std::fprintf(stderr, "moeprof run: %s: CUPTI trace disagrees with the executor's accounting:%s\n",
                   r.modes[i].mode.c_str(), diff.c_str());
    }
  }
#endif
  const std::string report_path = (std::filesystem::path(a.out) / "report.json").string();
  {
    Status st = reports::write_json_report(report_path, analyses);
    if (!st.is_ok()) {
      std::fprintf(stderr, "moeprof run: %s\n", st.message().c_str());
      return kExitRunFailure;
    }
    auto doc = reports::make_report(analyses);
    if (doc.is_ok()) {
      std::ofstream(std::filesystem::path(a.out) / "report.md") << reports::report_markdown(doc.value());
      std::ofstream(std::filesystem::path(a.out) / "report.html") << reports::report_html(doc.value());
    }
  }

  // Checks that fail the run, whatever is printed.
  int verdict = kExitOk;
  if (r.modes.size() == 2 && !r.outputs_identical) verdict = kExitRunFailure;
#ifdef MOEPROF_HAVE_CUDA
  if (!cupti_agrees) verdict = kExitRunFailure;
#endif
  if (a.json) {
    std::ifstream in(report_path);
    std::printf("%s", std::string(std::istreambuf_iterator<char>(in), {}).c_str());
    if (r.modes.size() == 2 && !r.outputs_identical)
      std::fprintf(stderr, "moeprof run: baseline and reuse outputs differ: the reused buffer was not dead\n");
    return verdict;
  }
  std::printf("moeprof run: %s, %lld tokens, TP=%d%s, %lld layers, backend %s (%s)\n", r.model.c_str(),
              static_cast<long long>(r.tokens), r.tp,
              r.gpus > 1 ? fmt::format(" (one rank per GPU on {} GPUs, NCCL all-reduce)", r.gpus).c_str()
                         : (r.tp_emulated ? " (TP emulated on one device)" : ""),
              static_cast<long long>(r.layers), backend_name.c_str(), device_name.c_str());
  if (!backend_note.empty() && !a.quiet) std::printf("  (no GPU backend: %s)\n", backend_note.c_str());
  if (!r.weights_note.empty()) std::printf("  weights: %s\n", r.weights_note.c_str());
  std::printf("\n%-9s %16s %16s %16s %12s %10s\n", "mode", "peak activation", "peak total", "churn", "allocations",
              "wall");
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const auto& m = r.modes[i];
    const auto& an = analyses[i];
    std::printf("%-9s %16s %16s %16s %12llu %9.2fs\n", m.mode.c_str(), mb(an.peak_activation_bytes).c_str(),
                mb(an.peak_total_bytes).c_str(), mb(an.churn_bytes).c_str(),
                static_cast<unsigned long long>(an.allocations), m.forward_seconds);
  }
  if (r.modes.size() == 2) {
    const auto& b = analyses[0];
    const auto& c = analyses[1];
    const bool down = c.peak_activation_bytes < b.peak_activation_bytes;
    const uint64_t mag = down ? b.peak_activation_bytes - c.peak_activation_bytes : c.peak_activation_bytes - b.peak_activation_bytes;
    std::printf("\npeak activation delta (reuse - baseline): %s (%s%s, %s)\n",
                reports::format_change_bytes(b.peak_activation_bytes, c.peak_activation_bytes).c_str(), down ? "-" : (mag ? "+" : ""),
                reports::format_exact_bytes(mag).c_str(),
                reports::format_percent(down ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag), b.peak_activation_bytes).c_str());
    std::printf("churn delta: %s\n", reports::format_change_bytes(b.churn_bytes, c.churn_bytes).c_str());
    std::printf("outputs bitwise identical: %s%s\n", r.outputs_identical ? "yes" : "NO",
                r.gpus > 1 ? " (every rank)" : "");
  }
  if (r.gpus > 1) {
    // Per rank (= device of the merged trace); the table above shows the maximum over ranks.
    for (size_t i = 0; i < r.modes.size(); ++i)
      for (const auto& d : analyses[i].devices)
        std::printf("  %-9s rank %u: peak activation %s (%s), peak total %s\n", r.modes[i].mode.c_str(),
                    static_cast<unsigned>(d.device), mb(d.peak_activation_bytes).c_str(),
                    reports::format_exact_bytes(d.peak_activation_bytes).c_str(), mb(d.peak_total_bytes).c_str());
  }
  for (const auto& m : r.modes) {
    std::string line;
    for (int c = 0; c < kNumCategories; ++c)
      if (m.accounting.allocations[c] > 0)
        line += fmt::format(" {} {}", category_name(static_cast<Category>(c)), reports::format_bytes(m.accounting.peak[c]));
    std::printf("executor accounting, peak per category (%s):%s\n", m.mode.c_str(), line.c_str());
  }
  for (const auto& m : r.modes)
    std::printf("MoE output buffers (%s): %lld reused, %lld fresh, %lld fallback\n", m.mode.c_str(),
                static_cast<long long>(m.moe.reused), static_cast<long long>(m.moe.fresh),
                static_cast<long long>(m.moe.fallback));
#ifdef MOEPROF_HAVE_CUDA
  if (!cupti_paths.empty())
    std::printf("CUPTI traces agree with the executor's accounting in every category: %s\n",
                cupti_agrees ? "yes" : "NO");
#endif
  std::printf("\ntraces: ");
  for (const auto& m : r.modes) std::printf("%s ", m.trace_path.c_str());
  std::printf("\nreport: %s (+ report.md, report.html)\n", report_path.c_str());
#ifdef MOEPROF_HAVE_CUDA
  for (const auto& p : cupti_paths) std::printf("CUPTI trace: %s\n", p.c_str());
#endif
  if (r.modes.size() == 2 && !r.outputs_identical)
    std::fprintf(stderr, "moeprof run: baseline and reuse outputs differ: the reused buffer was not dead\n");
  return verdict;
}

}  // namespace

void register_run(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run the DeepSeek-V2-family executor (baseline and/or reuse mode), trace it, write a report");
  cmd->add_option("--model", args->model,
                  "Built-in model (tiny, deepseek-v2-lite, deepseek-v2, deepseek-v3, kimi-k2.5) or a config.json path "
                  "[default: kimi-k2.5 on a GPU, tiny on the CPU]");
  cmd->add_option("--backend", args->backend, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--mode", args->mode, "baseline | reuse | both")->check(CLI::IsMember({"baseline", "reuse", "both"}));
  cmd->add_option("--tokens", args->tokens, "Prefill tokens [default: 16384 on a GPU, 100 for tiny, 64 otherwise]")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--layers", args->layers, "Run only the first N layers")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--tp", args->tp, "Tensor-parallel size (one rank's shapes; emulated on one device)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gpus", args->gpus,
                  "GPUs to run on: 1 (default) emulates TP on one device; N > 1 runs TP=N for real, rank r on "
                  "GPU r with NCCL all-reduces (needs libnccl.so.2 at run time; --tp defaults to N)")
      ->check(CLI::Range(1, 1 << 10));
  cmd->add_option("--weights", args->weights, "auto | per-layer | shared")
      ->check(CLI::IsMember({"auto", "per-layer", "shared"}));
  cmd->add_option("--out", args->out, "Output directory [default: moeprof-out]");
  cmd->add_option("--seed", args->seed, "Seed of the deterministic weights and inputs");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress or notes on stderr");
  cmd->add_flag("--json", args->json, "Print the JSON report instead of the table");
  cmd->add_flag("!--no-cupti", args->cupti, "On the GPU, do not also trace the run with CUPTI");
  cmd->callback([args, exit_code]() { *exit_code = run_command(*args); });
}

}  // namespace moeprof::cli
