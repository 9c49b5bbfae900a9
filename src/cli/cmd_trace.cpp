// moeprof trace [--out FILE] [--report] [--report-json FILE] [--torch-async] [--kernels] [--uses] -- CMD ARGS...
//
// Runs an unmodified program with libmoeprof_inject.so injected (CUDA_INJECTION64_PATH and
// NVTX_INJECTION64_PATH): every process of the command that initializes CUDA writes its own trace,
// the command's own process to FILE, any other to <FILE stem>.<pid>.mtrace. The library is looked
// up, in order: --inject-lib, $MOEPROF_INJECT_LIB, next to the moeprof binary, ../lib relative to
// it. SIGINT/SIGTERM sent to moeprof are forwarded to the child (a terminal's Ctrl-C already
// reaches it through the process group). Exit code: the child's (128+signal when killed).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/status.h"
#include "core/trace_io.h"
#include "planner/analysis.h"
#include "profiler/trace_paths.h"

namespace moeprof::cli {

namespace {

namespace fs = std::filesystem;

struct TraceOptions {
  std::string out = "moeprof.mtrace";
  std::string inject_lib;
  std::string report_json;
  bool report = false;
  bool torch_async = false;
  bool kernels = false;
  bool uses = false;
  std::vector<std::string> command;
};

std::atomic<pid_t> g_child{0};

void forward_signal(int sig, siginfo_t* info, void*) {
  // Ctrl-C from the terminal (si_code SI_KERNEL) already went to the whole foreground process
  // group, child included: forwarding it would deliver it twice.
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  pid_t c = g_child.load();
  if (c > 0) kill(c, sig);
}

std::string find_inject_lib(const std::string& explicit_path, std::string* tried) {
  std::vector<fs::path> candidates;
  if (!explicit_path.empty()) candidates.emplace_back(explicit_path);
  if (const char* e = std::getenv("MOEPROF_INJECT_LIB"); e != nullptr && e[0] != 0) candidates.emplace_back(e);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "libmoeprof_inject.so");
    candidates.push_back(exe.parent_path() / ".." / "lib" / "libmoeprof_inject.so");
  }
  for (const fs::path& p : candidates) {
    if (!tried->empty()) *tried += ", ";
    *tried += p.string();
    if (fs::exists(p, ec)) return fs::canonical(p, ec).string();
  }
  return {};
}

std::string torch_alloc_conf(const char* current) {
  const std::string want = "backend:cudaMallocAsync";
  std::string conf = current != nullptr ? current : "";
  if (conf.find(want) != std::string::npos) return conf;
  // Drop any other backend:... entry, keep the rest.
  std::string kept;
  size_t pos = 0;
  while (pos <= conf.size()) {
    size_t comma = conf.find(',', pos);
    std::string item = conf.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty() && item.rfind("backend:", 0) != 0) kept += (kept.empty() ? "" : ",") + item;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return kept.empty() ? want : kept + "," + want;
}

// Traces written by this run: FILE and <stem>.<pid>.mtrace modified since `start`.
std::vector<std::string> written_traces(const std::string& out, fs::file_time_type start,
                                        std::vector<std::string>* errors) {
  std::vector<std::string> found;
  std::error_code ec;
  if (fs::exists(out, ec)) found.push_back(out);
  fs::path stem = profiler::trace_stem(out);
  fs::path dir = stem.parent_path().empty() ? fs::path(".") : stem.parent_path();
  std::string prefix = stem.filename().string() + ".";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::string rest = name.substr(prefix.size());
    bool is_trace = rest.size() > 7 && rest.compare(rest.size() - 7, 7, ".mtrace") == 0;
    bool is_error = rest.size() > 6 && rest.compare(rest.size() - 6, 6, ".error") == 0;
    if (!is_trace && !is_error) continue;
    std::string digits = rest.substr(0, rest.find('.'));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (e.last_write_time(ec) < start) continue;
    (is_trace ? found : *errors).push_back(e.path().string());
  }
  if (fs::exists(out + ".error", ec) && fs::last_write_time(out + ".error", ec) >= start)
    errors->push_back(out + ".error");
  return found;
}

std::string human(uint64_t b) {
  char buf[64];
  if (b >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(uint64_t{1} << 30));
  else if (b >= (uint64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(uint64_t{1} << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

// --report / --report-json: each trace replayed by planner::analyze (docs/metrics.md) in four
// views, i.e. four sets of allocations taking part (AnalyzeOptions masks). The driver reports the
// memory it reserves for CUDA graphs as one allocation at address 0 (category graph,
// profiler/activity_decode.cpp); the program's own allocations are every other category.
struct ReportView {
  const char* key;  // JSON key
  uint32_t category_mask, mem_kind_mask;
};
constexpr uint32_t kNotGraph = planner::all_categories_except(Category::kGraph);
constexpr ReportView kReportViews[] = {
    {"all", ~0u, ~0u},                                                              // everything
    {"program", kNotGraph, ~0u},                                                    // the program's own
    {"stream_ordered", kNotGraph, planner::mem_kind_bit(MemKind::kStreamOrdered)},  // cudaMallocAsync/pools
    {"device_sync", kNotGraph, planner::mem_kind_bit(MemKind::kDevice)},            // cudaMalloc/cuMemAlloc
};
constexpr size_t kNumReportViews = sizeof(kReportViews) / sizeof(kReportViews[0]);

planner::RunAnalysis analyze_view(const Trace& t, const ReportView& v) {
  planner::AnalyzeOptions opt;
  opt.timeline_points = 0;
  opt.live_set_limit = 1;
  opt.handoff_limit = 0;
  opt.keep_lifetimes = true;  // bytes live at the end, scoped allocations
  opt.category_mask = v.category_mask;
  opt.mem_kind_mask = v.mem_kind_mask;
  return planner::analyze(t, opt);
}

uint64_t live_end_bytes(const planner::RunAnalysis& a, uint16_t device) {
  uint64_t b = 0;
  for (const planner::Lifetime& l : a.lifetimes)
    if (l.device == device && !l.freed()) b += l.bytes;
  return b;
}

// uses: kUse records of the trace (`moeprof trace --uses`); the use figures are written only when > 0.
nlohmann::json view_json(const planner::RunAnalysis& a, uint64_t kernels, uint64_t uses) {
  uint64_t allocs = 0, frees = 0, alloc_bytes = 0, scoped = 0;
  for (const auto& d : a.devices) {
    allocs += d.allocations;
    frees += d.frees;
    alloc_bytes += d.churn_bytes;
  }
  for (const planner::Lifetime& l : a.lifetimes)
    if (l.scope_id != StrId::kNone || l.name_id != StrId::kNone) ++scoped;
  nlohmann::json j;
  j["allocs"] = allocs;
  j["frees"] = frees;
  j["alloc_bytes"] = alloc_bytes;
  j["kernels"] = kernels;
  if (uses > 0) j["uses"] = uses;
  j["allocs_with_scope"] = scoped;
  j["peak_bytes"] = a.peak_total_bytes;
  j["peak_activation_bytes"] = a.peak_activation_bytes;
  const planner::Anomalies& an = a.anomalies;
  j["anomalies"] = {{"unknown_frees", an.unknown_frees},       {"double_frees", an.double_frees},
                    {"null_frees", an.null_frees},             {"never_freed", an.never_freed},
                    {"never_freed_bytes", an.never_freed_bytes}, {"zero_size_allocs", an.zero_size_allocs},
                    {"alloc_over_live", an.alloc_over_live},   {"free_size_mismatches", an.free_size_mismatches}};
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : a.devices) {
    nlohmann::json cats = nlohmann::json::object();
    for (int c = 0; c < kNumCategories; ++c)
      if (d.peak_by_category.bytes[static_cast<size_t>(c)] > 0)
        cats[std::string(category_name(static_cast<Category>(c)))] = d.peak_by_category.bytes[static_cast<size_t>(c)];
    nlohmann::json scopes = nlohmann::json::object();
    for (const auto& s : d.scopes)
      scopes[s.scope.empty() ? "(none)" : s.scope] = {
          {"high_water_bytes", s.high_water_bytes}, {"alloc_bytes", s.allocated_bytes}, {"allocs", s.allocations}};
    devs.push_back({{"device", d.device},
                    {"peak_bytes", d.peak_total_bytes},
                    {"peak_ts", d.peak_total_ts},
                    {"peak_activation_bytes", d.peak_activation_bytes},
                    {"peak_by_category", cats},
                    {"allocs", d.allocations},
                    {"frees", d.frees},
                    {"alloc_bytes", d.churn_bytes},
                    {"live_end_bytes", live_end_bytes(a, d.device)},
                    {"pool_reserved_peak_bytes", d.pool_reserved_peak_bytes},
                    {"graph_mem_peak_bytes", d.graph_mem_peak_bytes},
                    {"scopes", scopes}});
    if (uses > 0) {
      nlohmann::json& dj = devs.back();
      dj["has_uses"] = d.has_uses;
      dj["held_after_last_use_bytes"] = d.held_after_last_use_bytes;
      dj["never_used_at_peak_bytes"] = d.never_used_at_peak_bytes;
      dj["handoff_count"] = d.handoff_count;
      dj["handoff_bytes"] = d.handoff_bytes;
    }
  }
  j["devices"] = devs;
  return j;
}

// One trace's entry of --report-json.
nlohmann::json trace_report_json(const std::string& path, const Trace& t,
                                 const planner::RunAnalysis (&views)[kNumReportViews]) {
  uint64_t kernels = 0;
  uint64_t uses = 0;
  for (const TraceRecord& r : t.records) {
    kernels += r.kind == EventKind::kKernel;
    uses += r.kind == EventKind::kUse;
  }
  nlohmann::json j;
  j["path"] = path;
  j["name"] = t.meta.name;
  j["pid"] = t.meta.extra.count("pid") ? t.meta.extra.at("pid") : "";
  j["records"] = t.records.size();
  j["dropped_records"] = t.dropped_records;
  j["truncated"] = t.truncated;
  for (size_t i = 0; i < kNumReportViews; ++i) j[kReportViews[i].key] = view_json(views[i], kernels, uses);
  j["extra"] = t.meta.extra;
  return j;
}

uint64_t device_peak(const planner::RunAnalysis& a, uint16_t device) {
  const planner::DeviceAnalysis* d = a.device(device);
  return d != nullptr ? d->peak_total_bytes : 0;
}

void print_summary(const nlohmann::json& j, const Trace& t, const planner::RunAnalysis (&views)[kNumReportViews]) {
  const nlohmann::json& all = j["all"];
  const std::string pid = j["pid"].get<std::string>();
  std::fprintf(stderr, "  %s: %s (pid %s)%s\n", j["path"].get<std::string>().c_str(), t.meta.name.c_str(),
               pid.empty() ? "?" : pid.c_str(), t.truncated ? "  [TRUNCATED]" : "");
  std::fprintf(stderr, "    records %zu, allocs %llu, frees %llu, kernels %llu, dropped %llu, attributed %llu/%llu\n",
               t.records.size(), (unsigned long long)all["allocs"].get<uint64_t>(),
               (unsigned long long)all["frees"].get<uint64_t>(), (unsigned long long)all["kernels"].get<uint64_t>(),
               (unsigned long long)t.dropped_records, (unsigned long long)all["allocs_with_scope"].get<uint64_t>(),
               (unsigned long long)all["allocs"].get<uint64_t>());
  const planner::Anomalies& an = views[0].anomalies;
  if (an.total() + an.null_frees > 0)
    std::fprintf(stderr, "    anomalies: unknown frees %llu, double frees %llu, null frees %llu, alloc over live %llu\n",
                 (unsigned long long)an.unknown_frees, (unsigned long long)an.double_frees,
                 (unsigned long long)an.null_frees, (unsigned long long)an.alloc_over_live);
  for (const auto& d : views[0].devices) {
    std::fprintf(stderr,
                 "    device %u: peak %s (program %s: stream-ordered alone %s, cudaMalloc alone %s), live at end %s, "
                 "pool reserved peak %s, graph memory %s (allocation) / %s (attribute)\n",
                 d.device, human(d.peak_total_bytes).c_str(), human(device_peak(views[1], d.device)).c_str(),
                 human(device_peak(views[2], d.device)).c_str(), human(device_peak(views[3], d.device)).c_str(),
                 human(live_end_bytes(views[0], d.device)).c_str(), human(d.pool_reserved_peak_bytes).c_str(),
                 human(d.peak_by_category[Category::kGraph]).c_str(), human(d.graph_mem_peak_bytes).c_str());
  }
  if (j["all"].contains("uses")) {
    std::fprintf(stderr, "    uses: %llu kernel-use events\n", (unsigned long long)j["all"]["uses"].get<uint64_t>());
    for (const auto& d : views[1].devices)  // the program's own allocations
      std::fprintf(stderr, "    device %u at the activation peak (%s): %s held after its last use, %s never used; "
                   "%llu hand-offs (%s)\n",
                   d.device, human(d.peak_activation_bytes).c_str(), human(d.held_after_last_use_bytes).c_str(),
                   human(d.never_used_at_peak_bytes).c_str(), (unsigned long long)d.handoff_count,
                   human(d.handoff_bytes).c_str());
  }
  auto note = t.meta.extra.find("allocator_note");
  if (note != t.meta.extra.end()) std::fprintf(stderr, "    note: %s\n", note->second.c_str());
}

int run_trace(TraceOptions o) {
  if (o.command.empty()) {
    std::fprintf(stderr, "moeprof trace: no command given (usage: moeprof trace [options] -- CMD ARGS...)\n");
    return kExitBadInput;
  }
  std::string tried;
  std::string lib = find_inject_lib(o.inject_lib, &tried);
  if (lib.empty()) {
    std::fprintf(stderr, "moeprof trace: libmoeprof_inject.so not found (tried %s); pass --inject-lib or set "
                 "MOEPROF_INJECT_LIB\n", tried.c_str());
    return kExitRunFailure;
  }
  std::error_code ec;
  std::string out = fs::absolute(o.out, ec).lexically_normal().string();
  if (!fs::path(out).parent_path().empty()) fs::create_directories(fs::path(out).parent_path(), ec);
  fs::remove(out, ec);
  fs::remove(out + ".error", ec);
  if (const char* prev = std::getenv("CUDA_INJECTION64_PATH"); prev != nullptr && prev[0] != 0)
    std::fprintf(stderr, "moeprof trace: replacing CUDA_INJECTION64_PATH=%s\n", prev);
  // File times have coarse granularity on some file systems: start a little early.
  auto start = fs::file_time_type::clock::now() - std::chrono::seconds(2);

  std::vector<char*> argv;
  for (std::string& a : o.command) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string conf = o.torch_async ? torch_alloc_conf(std::getenv("PYTORCH_CUDA_ALLOC_CONF")) : "";

  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "moeprof trace: fork failed: %s\n", std::strerror(errno));
    return kExitRunFailure;
  }
  if (child == 0) {
    setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
    setenv("NVTX_INJECTION64_PATH", lib.c_str(), 1);
    setenv(profiler::kEnvTraceOut, out.c_str(), 1);
    setenv(profiler::kEnvTraceRootPid, std::to_string(getpid()).c_str(), 1);
    setenv(profiler::kEnvTraceKernels, o.kernels ? "1" : "0", 1);
    if (o.uses) setenv(profiler::kEnvTraceUses, "1", 1);
    else unsetenv(profiler::kEnvTraceUses);
    if (o.torch_async) {
      setenv("PYTORCH_CUDA_ALLOC_CONF", conf.c_str(), 1);
      setenv(profiler::kEnvTorchAsync, "1", 1);
    }
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "moeprof trace: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child.store(child);
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      status = -1;
      break;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  g_child.store(0);
  int rc = kExitRunFailure;
  if (status == -1) rc = kExitRunFailure;
  else if (WIFEXITED(status)) rc = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);

  std::vector<std::string> errors;
  std::vector<std::string> traces = written_traces(out, start, &errors);
  for (const std::string& e : errors) {
    std::ifstream f(e);
    std::string line;
    std::getline(f, line);
    std::fprintf(stderr, "moeprof trace: %s: %s\n", e.c_str(), line.c_str());
  }
  if (traces.empty()) {
    std::fprintf(stderr, "moeprof trace: no trace written (command exit %d). Did the program initialize CUDA? "
                 "Check that %s loads (LD_LIBRARY_PATH must reach libcupti.so).\n", rc, lib.c_str());
    return rc;
  }
  std::fprintf(stderr, "moeprof trace: command exited with %d; %zu trace(s):\n", rc, traces.size());
  nlohmann::json report = nlohmann::json::array();
  for (const std::string& p : traces) {
    auto t = read_trace(p);
    if (!t.is_ok()) {
      std::fprintf(stderr, "  %s: unreadable: %s\n", p.c_str(), t.status().message().c_str());
      continue;
    }
    if (!o.report && o.report_json.empty()) {
      std::fprintf(stderr, "  %s (%zu records%s)\n", p.c_str(), t->records.size(), t->truncated ? ", truncated" : "");
      continue;
    }
    planner::RunAnalysis views[kNumReportViews];
    for (size_t i = 0; i < kNumReportViews; ++i) views[i] = analyze_view(*t, kReportViews[i]);
    nlohmann::json j = trace_report_json(p, *t, views);
    if (o.report) print_summary(j, *t, views);
    report.push_back(std::move(j));
  }
  if (!o.report_json.empty()) {
    std::ofstream f(o.report_json);
    f << report.dump(2) << "\n";
    if (!f) std::fprintf(stderr, "moeprof trace: cannot write %s\n", o.report_json.c_str());
  }
  return rc;
}

}  // namespace

void register_trace(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TraceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace", "Trace the device-memory allocations of an unmodified CUDA program (CUPTI injection)");
  cmd->footer(
      "Example: moeprof trace --torch-async --report --out run.mtrace -- python3 infer.py\n"
      "Each process that initializes CUDA writes a trace: the command's to --out, others to "
      "<out stem>.<pid>.mtrace.");
  cmd->add_option("--out,-o", opts->out, "trace file of the command's own process")->capture_default_str();
  cmd->add_flag("--report", opts->report, "print a peak summary of each trace written");
  cmd->add_option("--report-json", opts->report_json, "write the summaries as JSON to this file");
  cmd->add_flag("--torch-async", opts->torch_async,
                "set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync so every PyTorch tensor is one "
                "allocation record (without it only caching-allocator segments are visible)");
  cmd->add_flag("--kernels", opts->kernels, "also record kernels (name, start, duration)");
  cmd->add_flag("--uses", opts->uses,
                "also record kernel uses: at each kernel launch, one use event per live device "
                "allocation that a kernel argument points into (first/last use, memory held after "
                "its last use; docs/tracing.md)");
  cmd->add_option("--inject-lib", opts->inject_lib, "path of libmoeprof_inject.so (default: next to moeprof)");
  cmd->add_option("command", opts->command, "the command to trace and its arguments, after --")->required();
  cmd->callback([opts, exit_code] { *exit_code = run_trace(*opts); });
}

}  // namespace moeprof::cli
