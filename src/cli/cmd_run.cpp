// moeprof run: executes the DeepSeek-V2-family model in one or more memory modes (baseline, reuse,
// fixes), records one trace per mode, analyses them, predicts the reuse and fixes runs from the
// baseline trace with the shipped what-if rules, and writes DIR/report.json (+ .md, .html).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/builtin_rules.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/op_times.h"
#include "cli/run_analysis.h"
#include "cli/run_output.h"
#include "cli/run_routing.h"
#include "cli/run_serving.h"
#include "core/checked.h"
#include "core/trace_io.h"
#include "core/version.h"
#include "executor/backends.h"
#include "executor/deepseek_model.h"
#include "executor/launch.h"
#include "executor/recorder.h"
#include "executor/run.h"
#include "executor/serving.h"
#include "executor/workload.h"
#include "executor/tp_run.h"
#include "model/config.h"
#include "planner/analysis.h"
#include "planner/budget.h"
#include "planner/whatif.h"
#include "reports/whatif_report.h"
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
  bool model_given = false;
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
  // Tensor parallelism as SGLang runs it (docs/executor.md, "Ranks in processes, symmetric memory").
  std::string symm_mem = "off";
  uint64_t symm_pool_mb = 0;
  std::vector<int64_t> symm_outside;
  std::string launch = "threads";
  int rank = -1, world = 0, device = -1;
  std::string nccl_id;
  double nccl_timeout = 300;
  bool rank_only = false;  // a rank started by --launch processes: the parent merges and reports
  bool op_times = false;   // per-op-family times of the forward (cli/op_times.h)
  double peak_tflops = 0, peak_gbps = 0;
  std::string gpu_memory;  // --gpu-memory: the meta backend as a device of this size (bytes or a GPU name)
  ServingArgs serving;     // --workload and its options (cli/run_serving.h)
  RoutingArgs routing;     // --routing, --moe-rows (cli/run_routing.h)
};

// The first of these environment variables that is set, as an int (launchers: torchrun, Open MPI,
// PMI, Slurm); -1 when none is.
int env_int(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v != nullptr && *v != '\0') {
      try {
        return std::stoi(v);
      } catch (...) {
        return -2;
      }
    }
  return -1;
}

std::string mb(uint64_t b) { return reports::format_bytes(b); }

std::string seconds(double s) { return fmt::format("{:.2f} s", s); }

// The what-if rules that predict a mode from the baseline trace ("" = none).
std::string rules_for_mode(const std::string& mode) {
  const std::string stem = mode == "reuse" ? "sglang-pr-25379" : mode == "fixes" ? "beyond-seed" : "";
  for (const auto& [name, text] : builtin_rules())
    if (name == stem) return text;
  return "";
}

// SIGINT and SIGTERM: blocked in every thread of the run (threads inherit the mask: trace
// writers, backends) and taken by one thread, which closes the open traces with extra.error =
// "interrupted by SIG..." (they read as complete and failed), drops a report that may be partial,
// publishes what the run wrote (run_output.h; `out` is null for a rank started by a launcher,
// which writes into --out directly), says so in one line and exits 128 + the signal. sigwait()
// runs in a normal thread, so closing the traces needs no async-signal-safe code.
// block_interrupts() runs first, before any thread exists; handle_interrupts() starts the thread
// once the run's output is set up (a signal in between waits for it).
sigset_t& interrupt_set() {
  static sigset_t set = [] {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    return s;
  }();
  return set;
}

bool block_interrupts() { return pthread_sigmask(SIG_BLOCK, &interrupt_set(), nullptr) == 0; }

void handle_interrupts(RunOutput* out, const std::string& report_dir) {
  std::thread([out, report_dir] {
    int sig = 0;
    if (sigwait(&interrupt_set(), &sig) != 0) return;
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    const auto paths = TraceWriter::close_all_open(std::string("interrupted by ") + name);
    std::error_code ec;
    if (!report_dir.empty())
      for (const char* n : {"report.json", "report.md", "report.html"}) std::filesystem::remove(std::filesystem::path(report_dir) / n, ec);
    if (out != nullptr) (void)out->publish("nccl-id");
    std::string closed;
    for (const auto& p : paths) closed += (closed.empty() ? "" : ", ") + (out != nullptr ? out->final_path(p) : p);
    std::fflush(stdout);
    std::fprintf(stderr, "\nmoeprof run: error: interrupted by %s%s\n", name,
                 closed.empty() ? "" : ("; trace(s) closed and marked failed: " + closed).c_str());
    std::fflush(stderr);
    _exit(128 + sig);
  }).detach();
}

int run_command(const RunArgs& a) {
  // Backend choice. "auto": the CUDA backend when a usable GPU is present, else the CPU reference.
  std::unique_ptr<Backend> backend;
  std::string backend_note;
  RunArgs args = a;
  // Ranks in processes: --rank/--world given, or one of them and a launcher's environment.
  const bool rank_mode = args.rank >= 0 || args.world > 0;
  if (rank_mode) {
    if (args.rank < 0) args.rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"});
    if (args.world <= 0) args.world = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
    if (args.device < 0) args.device = env_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"});
  }
  // Every option is checked before anything is written or removed (run_output.h): a mistyped
  // command never touches the results of an earlier run. The process that writes the report owns
  // --out: not a rank started by --launch processes, and of ranks in processes only rank 0.
  const bool owns_out = !args.rank_only && (!rank_mode || args.rank == 0);
  const bool interrupts_blocked = block_interrupts();  // before any thread (the CUDA backend's) exists
  if (rank_mode) {
    if (args.rank < 0 || args.world < 2)
      return fail("run", Status::bad_input(fmt::format(
                             "--rank/--world: rank {} of world {} (give both, or set RANK and WORLD_SIZE as torchrun does)", args.rank,
                             args.world)));
    if (args.gpus > 1) return fail("run", Status::bad_input("--rank runs one rank in this process: drop --gpus"));
    if (args.nccl_id.empty()) return fail("run", Status::bad_input("--rank needs --nccl-id FILE (rank 0 writes it, the others read it)"));
  }
  auto serving = serving_options(a.serving);
  if (!serving) return fail("run", serving.status());
  if (*serving && a.tokens > 0) return fail("run", Status::bad_input("--tokens sets one prefill: with --workload the requests set the tokens"));
  if (*serving && (args.gpus > 1 || rank_mode))
    return fail("run", Status::bad_input("--workload runs on one device: drop --gpus/--rank (--tp N runs one rank's shapes)"));
  const bool processes = args.launch == "processes";
  if (processes && args.gpus < 2) return fail("run", Status::bad_input("--launch processes needs --gpus N with N >= 2"));
  if (args.symm_mem == "on" && args.gpus < 2 && !rank_mode && !args.quiet)
    note("run", "--symm-mem on with one device: symmetric memory is emulated (tensors tagged symmetric, no NCCL window)");
  const bool multi_gpu = args.gpus > 1 || rank_mode;
  if (a.routing.ep > 1 && (rank_mode || processes))
    return fail("run", Status::bad_input("--ep over real ranks runs them as threads of this process: drop --rank/--launch processes"));
  if (a.routing.ep > 1 && args.gpus > 1 && args.gpus != a.routing.ep)
    return fail("run", Status::bad_input(fmt::format("--ep {} over real ranks needs --gpus {} (one EP rank per device; got --gpus {})",
                                                     a.routing.ep, a.routing.ep, args.gpus)));
  if (a.routing.dp > 1 && a.routing.dp == a.routing.ep && args.gpus <= 1 && a.routing.routing == "router")
    return fail("run", Status::bad_input("--dp on one device needs a drawn routing (--routing uniform, zipf:S, hot:N or worst): the other "
                                         "ranks' routers run on their own requests"));
  if (a.routing.ep > 1 && args.gpus > 1 && a.routing.ep_rank >= 0)
    return fail("run", Status::bad_input("--ep-rank picks the rank to emulate on one device: drop it with --gpus"));
  if (args.op_times && multi_gpu)
    return fail("run", Status::bad_input("--op-times times the ops of one device: drop --gpus/--rank (--tp N runs one rank's shapes)"));
  // --backend cpu --gpus N: N CPU reference ranks as threads of this process (real collectives
  // through host memory, tp_run.h); ranks in processes need GPUs.
  const bool cpu_ranks = args.gpus > 1 && a.backend == "cpu";
  if (multi_gpu && (a.backend == "meta" || (a.backend == "cpu" && (rank_mode || processes))))
    return fail("run", Status::bad_input(fmt::format("--gpus {} needs the CUDA backend (got --backend {}){}", a.gpus, a.backend,
                                                     a.backend == "cpu" ? " for ranks in processes; --backend cpu runs them as threads" : "")));
  if (a.model_given && a.model.empty()) return fail("run", Status::bad_input("--model is empty (give a built-in name or a config.json path)"));
  if (rank_mode || processes) {
    // Every rank binds its own GPU; no probe on GPU 0 (it would put a context there from every rank).
  } else if (a.backend == "cuda" || a.backend == "auto") {
    auto cb = make_cuda_backend(0);
    if (cb.is_ok()) {
      backend = std::move(cb).value();
    } else if (a.backend == "cuda" || multi_gpu) {
      return fail("run", cb.status());
    } else {
      backend_note = cb.status().message();
    }
  }
  uint64_t gpu_memory = 0;
  if (!a.gpu_memory.empty()) {
    if (a.backend != "meta")
      return fail("run", Status::bad_input("--gpu-memory makes the meta backend a device of that size: add --backend meta (a GPU has its own size)"));
    auto g = planner::parse_gpu_memory(a.gpu_memory);
    if (!g) return fail("run", g.status());
    gpu_memory = *g;
  }
  if (!backend && !(rank_mode || processes)) backend = a.backend == "meta" ? make_meta_backend_of(gpu_memory) : make_cpu_backend();
  const bool on_gpu = backend ? backend->name() == "cuda" : true;
  const bool computes = backend ? backend->name() != "meta" : true;
  const std::string backend_name = backend ? backend->name() : "cuda";
  const std::string device_name = backend ? backend->device_name() : (rank_mode ? fmt::format("rank {} of {}", args.rank, args.world)
                                                                                 : fmt::format("{} GPUs", args.gpus));

  // Defaults: the seed case on a GPU, the tiny model on the CPU.
  RunPlan plan;
  plan.model = a.model.empty() ? (on_gpu ? "kimi-k2.5" : "tiny") : a.model;
  std::string builtin = plan.model;  // built-in names are case-insensitive
  std::transform(builtin.begin(), builtin.end(), builtin.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  plan.tokens = a.tokens > 0 ? a.tokens : (on_gpu ? 16384 : (builtin == "tiny" ? 100 : 64));
  plan.tp = a.tp > 0 ? a.tp : a.routing.ep > 1 ? 1 : (rank_mode ? args.world : (multi_gpu ? a.gpus : (on_gpu && a.model.empty() ? 4 : 1)));
  plan.symm_mem = args.symm_mem == "on";
  plan.symm_pool_bytes = args.symm_pool_mb << 20;
  plan.symm_outside_layers = args.symm_outside;
  plan.layers = a.layers;
  plan.seed = a.seed;
  if (a.mode == "both") plan.modes = {MemoryMode::kBaseline, MemoryMode::kReuse};
  else if (a.mode == "all") plan.modes = {MemoryMode::kBaseline, MemoryMode::kReuse, MemoryMode::kFixes};
  else if (a.mode == "baseline") plan.modes = {MemoryMode::kBaseline};
  else if (a.mode == "fixes") plan.modes = {MemoryMode::kFixes};
  else plan.modes = {MemoryMode::kReuse};
  plan.weights = weights_mode_from_name(a.weights);
  plan.progress = !a.quiet && ::isatty(STDERR_FILENO) && !args.rank_only;
  plan.op_times = args.op_times;
  plan.log = a.quiet ? nullptr : stderr;
  plan.serving = *serving;

  // The header, before any work: what runs where. The model and its shapes are checked first.
  {
    auto cfg = resolve_model_config(plan.model);
    if (!cfg) return fail("run", cfg.status());
    auto shape = make_rank_shape(*cfg, plan.tokens, plan.tp, 0, plan.layers);
    if (!shape) return fail("run", shape.status());
    // Weights beyond what any device holds (a config at its fields' limits) are refused here, not
    // found by the planner in the trace after the run.
    size_t free_b = 0, total_b = 0;
    const bool memory_known = backend ? backend->memory_info(&free_b, &total_b) : true;  // ranks in processes: their GPUs
    const bool shared = plan.weights == WeightsMode::kShared || (plan.weights == WeightsMode::kAuto && backend && memory_known);
    const WeightBytes wb = estimate_weight_bytes(*cfg, *shape);
    if ((shared ? wb.shared : wb.per_layer) > kMaxBytes)
      return fail("run", Status::bad_input(fmt::format("{}: the weights of one rank need more than 2^63-1 bytes ({} layers, TP={}): "
                                                       "not a model a device holds",
                                                       cfg->name, shape->layers, plan.tp)));
    if (!a.quiet)
      for (const auto& n : cfg->notes) note("run", "{}: {}", cfg->name, n);
    for (int64_t l : a.symm_outside) {
      if (!plan.symm_mem) return fail("run", Status::bad_input("--symm-outside-layer needs --symm-mem on (it places outputs outside the symmetric pool)"));
      if (l >= shape->layers)
        return fail("run", Status::bad_input(fmt::format("--symm-outside-layer {}: the run has layers 0 to {}", l, shape->layers - 1)));
    }
    if (!*serving && plan.tokens > cfg->max_position_embeddings && !a.quiet)
      note("run", "{} tokens are more than {}'s context length ({}, max_position_embeddings): a server would refuse the prompt",
           plan.tokens, cfg->name, cfg->max_position_embeddings);
    if (Status st = apply_routing_options(a.routing, *cfg, backend_name, &plan); !st) return fail("run", st);
    if (plan.serving) {
      // What the serving run would refuse before its first step, before anything is written.
      auto w = load_workload(plan.serving->workload);
      if (!w) return fail("run", w.status());
      // A pool from --mem-fraction-static is at most what the device's free memory less the
      // weights' estimate (at most what they take) leaves: refused now if that has no page.
      DeviceMemory est;
      est.known = backend && memory_known;
      est.total = total_b;
      est.free_before_weights = free_b;
      // The weights the run will load: --weights auto aliases one layer's experts where the
      // per-layer weights' estimate is above 85% of the free memory (DeepseekModel::create).
      const bool aliased = plan.weights == WeightsMode::kShared ||
                           (plan.weights == WeightsMode::kAuto && wb.per_layer > static_cast<uint64_t>(0.85 * double(free_b)));
      // Plus the rope table over the context (rope_cos_sin, f32); the linear workspace is left out.
      const uint64_t rope_table = static_cast<uint64_t>(serving_context_len(*plan.serving, *cfg)) *
                                  static_cast<uint64_t>(cfg->qk_rope_head_dim) * 4;
      const uint64_t wbytes = (aliased ? wb.shared : wb.per_layer) + rope_table;
      est.free_after_weights = free_b - std::min<uint64_t>(free_b, wbytes);
      est.weights_estimated = true;
      if (Status st = check_serving_plan(*plan.serving, *w, *cfg, memory_known, &est, shape->layers); !st) return fail("run", st);
    }
    const std::string header = fmt::format(
        "moeprof run: {}, {}, TP={}{}, {} layers, modes {}, backend {} ({})\n", cfg->name,
        plan.serving ? "workload " + plan.serving->workload : std::to_string(plan.tokens) + " tokens", plan.tp,
        rank_mode ? fmt::format(" (rank {} of {} in this process, NCCL all-reduce{})", args.rank, args.world,
                                plan.symm_mem ? ", symmetric memory" : "")
        : cpu_ranks ? fmt::format("{} ({} CPU ranks, one thread per rank, collectives through host memory)",
                                  plan.ep > 1 ? fmt::format(", EP={}", plan.ep) : "", a.gpus)
        : multi_gpu ? fmt::format("{} (one rank per GPU on {} GPUs, {}, NCCL {}{})", plan.ep > 1 ? fmt::format(", EP={}", plan.ep) : "",
                                  a.gpus, processes ? "one process per rank" : "one thread per rank",
                                  plan.ep > 1 ? "all-to-all" : "all-reduce", plan.symm_mem ? ", symmetric memory" : "")
                    : (plan.tp > 1 ? fmt::format(" (TP emulated on one device{})", plan.symm_mem ? ", symmetric memory emulated" : "") : ""),
        plan.layers > 0 ? std::min<int64_t>(plan.layers, cfg->num_hidden_layers) : cfg->num_hidden_layers, a.mode,
        backend_name, device_name);
    if (a.json) {
      if (!a.quiet) std::fputs(header.c_str(), stderr);
    } else if (Status st = write_stdout(header); !st) {
      return fail("run", st);
    }
    if (!backend_note.empty() && !a.quiet) note("run", "no GPU backend: {}", backend_note);
    if (!computes && !a.quiet) note("run", "meta backend: allocations only, outputs are not computed");
  }

  // Everything is checked: from here the run writes. One process that owns --out stages its files
  // and publishes them when it ends, however it ends (run_output.h). A rank started by an outside
  // launcher writes into --out itself, since rank 0 merges the other ranks' traces from there: its
  // rank 0 removes the earlier run's outputs now, once its options are checked.
  std::unique_ptr<RunOutput> output;
  std::string out_dir = a.out;
  if (!rank_mode) {
    auto o = RunOutput::begin(a.out);
    if (!o) return fail("run", o.status());
    output = std::move(o).value();
    out_dir = output->stage();
    for (const auto& orphan : output->orphaned_stages())
      if (!a.quiet) note("run", "{} holds the files of an earlier run whose process was killed; they are kept there", orphan);
  } else if (owns_out) {
    std::error_code ec;
    std::filesystem::create_directories(a.out, ec);
    if (ec) return fail("run", Status::bad_input("cannot create output directory " + a.out + ": " + ec.message()));
    if (size_t n = remove_run_outputs(a.out); n > 0 && !a.quiet) note("run", "removed {} output(s) of an earlier run from {}", n, a.out);
  }
  plan.out_dir = out_dir;
  if (interrupts_blocked) handle_interrupts(output.get(), owns_out ? out_dir : "");
  // A failure after this point: what the run wrote is published first, and the message names the
  // published paths.
  auto failed = [&output](const Status& st) {
    if (!output) return fail("run", st);
    (void)output->publish("nccl-id");
    return fail("run", Status(st.code(), output->final_path(st.message())));
  };

#ifdef MOEPROF_HAVE_CUDA
  // On the GPU, the run also traces itself with the CUPTI recorder (DIR/<mode>.cupti.mtrace).
  auto tracer = std::make_shared<std::unique_ptr<profiler::CuptiTracer>>();
  std::vector<std::string> cupti_paths;
  if (on_gpu && a.cupti && multi_gpu && !rank_mode && !processes && !a.quiet)
    note("run", "--gpus {}: the in-process CUPTI trace is skipped for multi-GPU runs (the executor's own traces are written "
                "per rank and merged)", a.gpus);
  if (on_gpu && a.cupti && !multi_gpu) {
    plan.before_mode = [&, tracer](const std::string& mode, const RunMeta& meta) -> Status {
      RunMeta m = meta;
      m.name = mode + "-cupti";
      m.backend = "cupti";
      std::string path = (std::filesystem::path(out_dir) / (mode + ".cupti.mtrace")).string();
      auto t = profiler::CuptiTracer::start(path, m);
      if (!t.is_ok()) return t.status();
      *tracer = std::move(t).value();
      cupti_paths.push_back(path);
      return Status::ok();
    };
    plan.after_mode = [tracer](const std::string&, const RunMeta& meta) -> Status {
      if (!*tracer) return Status::ok();
      (*tracer)->add_meta_extra(meta.extra);  // the run's own keys (serving pool, routing) for budget and fit
      Status st = (*tracer)->stop();
      tracer->reset();
      return st;
    };
  }
#endif
  // Multi-GPU: execute_tp_run_plan makes its own backend per GPU; the probe on GPU 0 goes first.
  if (multi_gpu) backend.reset();
  const auto t_start = std::chrono::steady_clock::now();
  Result<RunPlanResult> res = Status::run_failure("not run");
  std::vector<std::string> rank_cupti_paths;
  if (processes) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) return failed(Status::bad_input("cannot create output directory " + out_dir + ": " + ec.message()));
    const std::string id_file = (fs::path(out_dir) / "nccl-id").string();
    fs::remove(id_file, ec);
    std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
    if (ec) exe = "moeprof";
    std::vector<RankProcess> ranks;
    for (int rk = 0; rk < a.gpus; ++rk) {
      RankProcess rp;
      rp.argv = {exe, "run", "--backend", "cuda", "--model", plan.model, "--tokens", std::to_string(plan.tokens), "--mode", a.mode,
                 "--weights", a.weights, "--seed", std::to_string(a.seed), "--out", out_dir, "--rank", std::to_string(rk), "--world",
                 std::to_string(a.gpus), "--device", std::to_string(rk), "--nccl-id", id_file, "--nccl-timeout",
                 fmt::format("{}", a.nccl_timeout), "--symm-mem", a.symm_mem, "--rank-only"};
      if (a.layers > 0) rp.argv.insert(rp.argv.end(), {"--layers", std::to_string(a.layers)});
      if (plan.routing.forced() || plan.moe_rows != MoeRows::kBound)
        rp.argv.insert(rp.argv.end(), {"--routing", a.routing.routing, "--moe-rows", a.routing.moe_rows});
      if (a.symm_pool_mb > 0) rp.argv.insert(rp.argv.end(), {"--symm-pool-mb", std::to_string(a.symm_pool_mb)});
      for (int64_t l : a.symm_outside) rp.argv.insert(rp.argv.end(), {"--symm-outside-layer", std::to_string(l)});
      if (!a.cupti) rp.argv.push_back("--no-cupti");
      rp.log_path = (fs::path(out_dir) / fmt::format("rank{}.log", rk)).string();
      ranks.push_back(std::move(rp));
    }
    if (!a.quiet) note("run", "starting {} rank processes (logs: {}/rank<r>.log, moved into {} when the run ends)", a.gpus, out_dir, a.out);
    if (Status st = run_rank_processes(ranks); !st) return failed(st);
    res = collect_rank_traces(plan, a.gpus);
    for (int rk = 0; rk < a.gpus; ++rk) {
      const std::string cp = (fs::path(out_dir) / fmt::format("rank{}.cupti.mtrace", rk)).string();
      if (fs::exists(cp, ec)) rank_cupti_paths.push_back(cp);
    }
  } else if (rank_mode) {
    RankLaunch launch;
    launch.rank = args.rank;
    launch.world = args.world;
    launch.device = args.device;
    launch.id_file = args.nccl_id;
    launch.timeout_seconds = args.nccl_timeout;
#ifdef MOEPROF_HAVE_CUDA
    // One CUPTI trace of this rank's whole process: what NCCL allocates (its buffers, the symmetric
    // pool's backing) besides the executor's tensors (docs/executor.md).
    std::unique_ptr<profiler::CuptiTracer> process_tracer;
    if (a.cupti) {
      launch.on_device_bound = [&]() -> Status {
        RunMeta m;
        m.name = fmt::format("rank{}-cupti", args.rank);
        m.mode = "process";
        m.backend = "cupti";
        m.model = plan.model;
        m.tokens = plan.tokens;
        m.tp_rank = args.rank;
        m.tp_size = args.world;
        profiler::TracerOptions to;
        to.stacks = profiler::StackMode::kNative;
        const std::string cp = (std::filesystem::path(out_dir) / fmt::format("rank{}.cupti.mtrace", args.rank)).string();
        auto t = profiler::CuptiTracer::start(cp, m, to);
        if (t.is_ok()) process_tracer = std::move(t).value();
        else if (!a.quiet) note("run", "rank {}: no CUPTI trace: {}", args.rank, t.status().message());
        return Status::ok();
      };
    }
#endif
    res = execute_tp_rank(plan, launch);
#ifdef MOEPROF_HAVE_CUDA
    if (process_tracer) {
      Status st = process_tracer->stop();
      if (!st && !a.quiet) note("run", "rank {}: CUPTI trace: {}", args.rank, st.message());
    }
#endif
    if (!res.is_ok()) return failed(res.status());
    if (args.rank_only || args.rank != 0) {
      std::string out = fmt::format("rank {} of {}: done;", args.rank, args.world);
      for (const auto& m : res->modes)
        out += fmt::format(" {} peak activation {} ({});", m.mode, mb(m.accounting.peak_activation),
                           reports::format_exact_bytes(m.accounting.peak_activation));
      out += " traces in " + out_dir + "\n";
      if (Status st = write_stdout(out); !st) return failed(st);
      return res->outputs_identical || !computes || res->modes.size() < 2 ? kExitOk : kExitRunFailure;
    }
    // Rank 0 of an outside launcher: merge when the other ranks' traces are here (one machine or a
    // shared folder); otherwise say how to merge them.
    res = collect_rank_traces(plan, args.world);
    if (!res.is_ok()) {
      note("run", "rank 0: cannot merge the ranks' traces here ({}); copy every DIR/<mode>.rank<r>.mtrace into one folder "
                  "and run: moeprof report --ranks <mode>.rank0.mtrace ... <mode>.rank{}.mtrace",
           res.status().message(), args.world - 1);
      return kExitOk;
    }
  } else {
    res = multi_gpu ? execute_tp_run_plan(plan, a.gpus, cpu_ranks ? "cpu" : "cuda") : execute_run_plan(*backend, plan);
  }
  if (!res.is_ok()) return failed(res.status());
  const RunPlanResult& r = res.value();

  // Analyse the traces as written (read back from disk), check them against the executor's own
  // accounting, predict the modes from the baseline, and write the report.
  if (plan.progress) std::fprintf(stderr, "\r\033[K[report] analysing %zu trace(s)", r.modes.size());
  auto analysed = analyse_run_traces(r);
  if (!analysed.is_ok()) return failed(analysed.status());
  std::vector<planner::RunAnalysis> analyses = std::move(analysed).value();
  // Predictions: each non-baseline mode from the baseline trace and its rules; the ranked fixes of
  // the baseline beyond the seed's change go into the report.
  std::vector<std::optional<uint64_t>> predicted(r.modes.size());
  std::optional<planner::WhatIfResult> baseline_fixes;
  // (The shipped rules' scopes match a prefill's layers and a serving run's steps alike.)
  if (!r.modes.empty() && r.modes.front().mode == "baseline") {
    for (size_t i = 1; i < r.modes.size(); ++i) {
      auto rules = planner::parse_rules(rules_for_mode(r.modes[i].mode), r.modes[i].mode + ".rules");
      if (!rules || rules->empty()) continue;
      auto w = planner::what_if(analyses[0], *rules, planner::WhatIfOptions{0, 0, 0});
      if (w) predicted[i] = w->predicted_peak_activation_bytes;
    }
    auto seed = planner::parse_rules(rules_for_mode("reuse"), "sglang-pr-25379.rules");
    if (seed) {
      planner::WhatIfOptions wo;
      wo.fixes = 5;
      wo.timeline_points = 500;
      auto w = planner::what_if(analyses[0], *seed, wo);
      if (w) baseline_fixes = std::move(w).value();
    }
  }
#ifdef MOEPROF_HAVE_CUDA
  bool cupti_agrees = true;
  for (size_t i = 0; i < cupti_paths.size() && i < r.modes.size(); ++i) {
    auto tr = read_trace(cupti_paths[i]);
    if (!tr.is_ok()) return failed(Status::run_failure(tr.status().message()));
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
    if (driver_allocs > 0 && !a.quiet)
      note("run", "{}: CUPTI also saw {} driver-internal allocations ({}, no API call behind them, e.g. module static memory)",
           r.modes[i].mode, driver_allocs, reports::format_exact_bytes(driver_bytes));
    planner::RunAnalysis c = planner::analyze(t);
    std::string diff = c.devices.empty() ? std::string(" no allocations recorded") : cupti_disagreement(c, r.modes[i].accounting);
    if (!diff.empty()) {
      cupti_agrees = false;
      note("run", "{}: CUPTI trace disagrees with the executor's accounting:{}", r.modes[i].mode, diff);
    }
  }
#endif
  const std::string report_path = (std::filesystem::path(out_dir) / "report.json").string();
  // Checks that fail the run, whatever is printed: the report written below carries them as the
  // runs' extra.error, so the gate never passes on it.
  const bool outputs_differ = computes && r.modes.size() > 1 && !r.outputs_identical;
  {
    reports::ReportOptions ro;
    if (analyses.size() > 2) ro.compare_baseline = analyses.front().meta.name;
    auto doc = reports::make_report(analyses, ro);
    if (!doc) return failed(doc.status());
    for (size_t i = 1; outputs_differ && i < r.modes.size(); ++i)
      (*doc)["runs"][i]["extra"]["error"] = "the outputs differ from the " + r.modes.front().mode + " run's";
#ifdef MOEPROF_HAVE_CUDA
    for (size_t i = 0; !cupti_agrees && i < r.modes.size(); ++i)
      (*doc)["runs"][i]["extra"]["error"] = "the CUPTI trace disagrees with the executor's accounting";
#endif
    for (size_t i = 0; r.ep > 1 && i < r.modes.size(); ++i) {
      (*doc)["runs"][i]["ranks"] = ep_ranks_json(r, i);
      (*doc)["runs"][i]["ep"] = ep_run_json(r, i);
    }
    if (baseline_fixes) (*doc)["runs"][0]["what_if"] = reports::what_if_json(*baseline_fixes, analyses[0]);
    for (size_t i = 1; i < r.modes.size(); ++i)
      if (predicted[i]) {
        auto& run = (*doc)["runs"][i];
        run["predicted_from_baseline"] = {{"rules", r.modes[i].mode == "reuse" ? "examples/what-if/sglang-pr-25379.rules"
                                                                                 : "examples/what-if/beyond-seed.rules"},
                                          {"predicted_peak_activation_bytes", *predicted[i]}};
      }
    if (plan.progress) std::fprintf(stderr, "\r\033[K[report] writing %s (+ report.md, report.html)", report_path.c_str());
    for (const auto& [name, text] : {std::pair<std::string, std::string>{"report.json", reports::report_text(*doc)},
                                     {"report.md", reports::report_markdown(*doc)},
                                     {"report.html", reports::report_html(*doc)}}) {
      Status st = reports::write_text_file((std::filesystem::path(out_dir) / name).string(), text);
      if (!st) return failed(st);
    }
    if (plan.progress) std::fprintf(stderr, "\r\033[K");
  }
  std::string op_tables;
  if (plan.op_times) {
    const DevicePeaks peaks = resolve_peaks(device_name, a.peak_tflops, a.peak_gbps);
    for (const auto& m : r.modes) {
      if (!m.ops) continue;
      op_tables += op_times_table(m.mode, *m.ops, peaks, m.forward_seconds);
      const std::string path = (std::filesystem::path(out_dir) / (m.mode + ".ops.json")).string();
      Status st = reports::write_text_file(path, op_times_json(m.mode, device_name, *m.ops, peaks, m.forward_seconds).dump(2) + "\n");
      if (!st) return failed(st);
      op_tables += "  written to " + (output ? output->final_path(path) : path) + "\n";
    }
  }
  const double total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  // Every result is written: it replaces the earlier run's in --out. Paths below are the final ones.
  auto shown = [&output](const std::string& p) { return output ? output->final_path(p) : p; };
  if (output) {
    if (Status st = output->publish("nccl-id"); !st) return fail("run", st);
    if (output->replaced() > 0 && !a.quiet) note("run", "replaced {} output(s) of an earlier run in {}", output->replaced(), a.out);
  }

  int verdict = outputs_differ ? kExitRunFailure : kExitOk;
#ifdef MOEPROF_HAVE_CUDA
  if (!cupti_agrees) verdict = kExitRunFailure;
#endif
  auto differ_note = [&] {
    if (outputs_differ) fail("run", Status::run_failure("the modes' outputs differ: a buffer was reused or freed while still needed"));
  };
  if (a.json) {
    std::ifstream in(shown(report_path));
    if (Status st = write_stdout(std::string(std::istreambuf_iterator<char>(in), {})); !st) return failed(st);
    differ_note();
    return verdict;
  }
  std::string out;
  if (!r.weights_note.empty()) out += "  weights: " + r.weights_note + "\n";
  out += fmt::format("\n{:<9} {:>16} {:>22} {:>16} {:>16} {:>12} {:>10} {:>10}\n", "mode", "peak activation",
                     "predicted (baseline)", "peak total", "churn", "allocations", "forward", "total");
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const auto& m = r.modes[i];
    const auto& an = analyses[i];
    out += fmt::format("{:<9} {:>16} {:>22} {:>16} {:>16} {:>12} {:>10} {:>10}\n", m.mode, mb(an.peak_activation_bytes),
                       predicted[i] ? (*predicted[i] == an.peak_activation_bytes ? "= " : "") + mb(*predicted[i]) : "",
                       mb(an.peak_total_bytes), mb(an.churn_bytes), reports::with_commas_u(an.allocations),
                       seconds(m.forward_seconds), seconds(m.total_seconds));
  }
  for (size_t i = 1; i < r.modes.size() && r.modes.front().mode == "baseline"; ++i) {
    const auto& b = analyses[0];
    const auto& c = analyses[i];
    const bool down = c.peak_activation_bytes < b.peak_activation_bytes;
    const uint64_t mag = down ? b.peak_activation_bytes - c.peak_activation_bytes : c.peak_activation_bytes - b.peak_activation_bytes;
    out += fmt::format("{}peak activation delta ({} - baseline): {} ({}{}, {}); churn {}\n", i == 1 ? "\n" : "", r.modes[i].mode,
                       reports::format_change_bytes(b.peak_activation_bytes, c.peak_activation_bytes), down ? "-" : (mag ? "+" : ""),
                       reports::format_exact_bytes(mag),
                       reports::format_percent(down ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag), b.peak_activation_bytes),
                       reports::format_change_bytes(b.churn_bytes, c.churn_bytes));
    if (predicted[i])
      out += fmt::format("  predicted from the baseline trace by {}.rules: {} ({})\n",
                         r.modes[i].mode == "reuse" ? "sglang-pr-25379" : "beyond-seed", reports::format_exact_bytes(*predicted[i]),
                         *predicted[i] == c.peak_activation_bytes ? "equal to the measured peak"
                                                                  : "measured " + reports::format_exact_bytes(c.peak_activation_bytes));
  }
  if (r.modes.size() > 1)
    out += fmt::format("outputs bitwise identical: {}\n", !computes ? "not computed (meta backend)"
                                                                    : (r.outputs_identical ? (r.gpus > 1 ? "yes (every rank)" : "yes") : "NO"));
  if (r.gpus > 1) {
    // Per rank (= device of the merged trace); the table above shows the maximum over ranks.
    for (size_t i = 0; i < r.modes.size(); ++i)
      for (const auto& d : analyses[i].devices)
        out += fmt::format("  {:<9} rank {}: peak activation {} ({}), peak total {}\n", r.modes[i].mode, d.device,
                           mb(d.peak_activation_bytes), reports::format_exact_bytes(d.peak_activation_bytes), mb(d.peak_total_bytes));
  }
  for (const auto& m : r.modes) {
    std::string line;
    for (int c = 0; c < kNumCategories; ++c)
      if (m.accounting.allocations[c] > 0)
        line += fmt::format(" {} {}", category_name(static_cast<Category>(c)), mb(m.accounting.peak[c]));
    out += fmt::format("executor accounting, peak per category ({}):{}\n", m.mode, line);
  }
  for (const auto& m : r.modes) {
    std::string layers;
    for (int64_t l : m.moe.fallback_layers) layers += (layers.empty() ? " (layers " : ", ") + std::to_string(l);
    if (!layers.empty()) layers += ")";
    out += fmt::format("MoE output buffers ({}{}): {} reused, {} fresh, {} fallback{}{}\n", m.mode, r.gpus > 1 ? ", rank 0" : "",
                       m.moe.reused, m.moe.fresh, m.moe.fallback, layers,
                       plan.symm_mem && m.mode != "baseline" ? "; the reused buffer must lie in the symmetric pool" : "");
  }
  // What NCCL itself allocated on each rank, from the ranks' CUPTI traces (communication category).
  for (size_t i = 0; i < rank_cupti_paths.size(); ++i) {
    auto tr = read_trace(rank_cupti_paths[i]);
    if (!tr.is_ok()) continue;
    // NCCL's own allocations inside its calls carry the NVTX range "moeprof.tensor:nccl/..."
    // (communication); driver allocations with no API call behind them (the symmetric window's
    // physical memory and its mappings, made through the VMM API) have no name: both are counted.
    uint64_t nccl_bytes = 0, nccl_n = 0, driver_bytes = 0, driver_n = 0;
    for (const TraceRecord& rec : tr->records) {
      if (rec.kind != EventKind::kAlloc) continue;
      if (rec.category == Category::kCommunication) {
        nccl_bytes += rec.bytes;
        ++nccl_n;
      } else if (rec.name_id == StrId::kNone && rec.category == Category::kUnknown) {
        driver_bytes += rec.bytes;
        ++driver_n;
      }
    }
    const planner::RunAnalysis c = planner::analyze(tr.value());
    for (const auto& d : c.devices)
      out += fmt::format("  rank {}, GPU {} (CUPTI, whole process): NCCL's own allocations {} in {}; unnamed driver allocations {} in {} "
                         "(no API call of the program behind them: the symmetric window's memory and its mapping, kernels' module memory); device memory peak {}\n",
                         tr->meta.tp_rank, d.device, mb(nccl_bytes), nccl_n, mb(driver_bytes), driver_n, mb(d.peak_total_bytes));
  }
#ifdef MOEPROF_HAVE_CUDA
  if (!cupti_paths.empty())
    out += fmt::format("CUPTI traces agree with the executor's accounting in every category: {}\n", cupti_agrees ? "yes" : "NO");
#endif
  out += routing_summary(plan, r);
  out += serving_summary(r);
  out += op_tables;
  out += "\ntraces:";
  for (const auto& m : r.modes) out += " " + shown(m.trace_path);
  if (r.ep_ranks.size() > 1) {  // every rank's traces are written too
    size_t n = 0;
    for (const auto& rm : r.ep_rank_modes) n += rm.size();
    if (r.ep_emulated)
      out += fmt::format(" (each mode's budget rank; all {} ranks' {} traces: MODE.epR.mtrace beside them)", r.ep_ranks.size(), n);
    else  // real ranks: the mode's trace merges them (as for real TP)
      out += fmt::format(" (each mode's {} ranks merged; the {} traces of the ranks: MODE.rankR.mtrace beside them)", r.ep_ranks.size(), n);
  }
  out += fmt::format("\nreport: {} (+ report.md, report.html); {} in all\n", shown(report_path), seconds(total_seconds));
#ifdef MOEPROF_HAVE_CUDA
  for (const auto& p : cupti_paths) out += "CUPTI trace: " + shown(p) + "\n";
#endif
  if (Status st = write_stdout(out); !st) return failed(st);
  differ_note();
  return verdict;
}

}  // namespace

void register_run(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run the DeepSeek-V2-family executor in one or more memory modes, trace it, predict, write a report");
  cmd->footer("Example: moeprof run --backend meta --model kimi-k2.5 --tokens 16384 --tp 4 --mode all --out kimi\n"
              "Serving: moeprof run --backend meta --model kimi-k2.5 --tp 4 --gpu-memory 150754820096 --workload synthetic:64,2048,256 "
              "--chunked-prefill-size 16384 --mem-fraction-static 0.88 --cuda-graph-max-bs 64\n"
              "Default: the seed case on a GPU (kimi-k2.5, 16384 tokens, TP=4, both modes), the tiny model on the CPU "
              "otherwise. --backend meta runs any size in seconds (allocations only).");
  cmd->add_option("--model", args->model,
                  "built-in model (tiny, deepseek-v2-lite, deepseek-v2, deepseek-v3, kimi-k2.5) or a config.json path "
                  "[default: kimi-k2.5 on a GPU, tiny on the CPU]")
      ->type_name("NAME|PATH");
  cmd->add_option("--backend", args->backend, "cuda on a usable GPU, else cpu (auto); meta: allocations only, no memory, no compute")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "meta"}))
      ->capture_default_str();
  cmd->add_option("--mode", args->mode, "memory modes to run: both = baseline and reuse, all = baseline, reuse and fixes")
      ->check(CLI::IsMember({"baseline", "reuse", "fixes", "both", "all"}))
      ->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "prefill tokens, 1 to 2^40 [default: 16384 on a GPU, 100 for the built-in tiny, 64 otherwise]")
      ->check(integer_range(1, int64_t{1} << 40))
      ->type_name("N");
  cmd->add_option("--layers", args->layers, "run only the first N layers [default: all of the model's]")
      ->check(integer_range(1, int64_t{1} << 20))
      ->type_name("N");
  cmd->add_option("--tp", args->tp, "tensor-parallel size: one rank's shapes, emulated on one device [default: 4 for the seed case, else 1]")
      ->check(integer_range(1, int64_t{1} << 20))
      ->type_name("N");
  cmd->add_option("--gpus", args->gpus,
                  "GPUs: 1 emulates TP on one device; N > 1 runs TP=N (or with --ep N, EP=N) for real, rank r on GPU r, "
                  "with NCCL collectives (libnccl.so.2 at run time; --tp defaults to N); with --backend cpu, N CPU ranks as "
                  "threads whose collectives go through host memory")
      ->check(integer_range(1, int64_t{1} << 10))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_option("--weights", args->weights, "shared: every MoE layer aliases one layer's expert weights; auto picks shared when per-layer would not fit")
      ->check(CLI::IsMember({"auto", "per-layer", "shared"}))
      ->capture_default_str();
  cmd->add_option("--out,-o", args->out, "output folder: one trace per mode, report.json, report.md, report.html")
      ->type_name("DIR")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the deterministic weights and inputs")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            // An unsigned 64-bit integer as written: no sign, no wrap (CLI11 read -1 and 2^64 as 2^64-1).
            bool ok = !v.empty() && v.size() <= 20;
            for (char c : v) ok = ok && c >= '0' && c <= '9';
            errno = 0;
            if (ok) (void)std::strtoull(v.c_str(), nullptr, 10);
            if (!ok || errno == ERANGE) return "must be an integer from 0 to 18,446,744,073,709,551,615 (got " + v.substr(0, 40) + ")";
            return "";
          },
          ""))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_flag("--quiet,-q", args->quiet, "no progress or notes on stderr");
  cmd->add_flag("--json", args->json, "print the JSON report on stdout instead of the table");
  cmd->add_flag("!--no-cupti", args->cupti, "on a GPU, do not also trace the run with CUPTI");
  cmd->add_flag("--op-times", args->op_times,
                "time every op of each forward by family (CUDA events on a GPU): time, share, TFLOP/s, GB/s, floors; "
                "also written to OUT/<mode>.ops.json");
  cmd->add_option("--gpu-memory", args->gpu_memory,
                  "with --backend meta: behave as a device of this size (bytes, or H200, H100, A100, B200): an allocation past it "
                  "fails out of memory (exit 3), the trace kept")
      ->type_name("BYTES|GPU");
  cmd->add_option("--peak-tflops", args->peak_tflops, "with --op-times: the device's bf16 dense peak for the floors [default: published figure of a known GPU]")
      ->type_name("X")
      ->check(positive_number());
  cmd->add_option("--peak-gbps", args->peak_gbps, "with --op-times: the device's memory bandwidth in GB/s [default: published figure of a known GPU]")
      ->type_name("X")
      ->check(positive_number());
  cmd->add_option("--symm-mem", args->symm_mem,
                  "on: the tensors SGLang all-reduces (MoE, dense MLP and o_proj outputs) come from an NCCL symmetric "
                  "window (ncclMemAlloc + ncclCommWindowRegister) per rank, and the reuse mode takes the previous layer's "
                  "buffer only when it lies there; emulated on one device")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--symm-pool-mb", args->symm_pool_mb, "size of each rank's symmetric pool in MiB [default: 4 x tokens x hidden x 2 B]")
      ->check(integer_range(1, int64_t{1} << 24))
      ->type_name("MIB");
  cmd->add_option("--symm-outside-layer", args->symm_outside,
                  "testing: the outputs this layer allocates (o_proj, dense MLP, a fresh MoE output) go outside the symmetric pool, so the "
                  "next MoE layer falls back "
                  "(repeatable)")
      ->check(integer_range(0, int64_t{1} << 20))
      ->type_name("LAYER");
  cmd->add_option("--launch", args->launch, "with --gpus N: the ranks as threads of this process, or as N processes (one per GPU)")
      ->check(CLI::IsMember({"threads", "processes"}))
      ->capture_default_str();
  cmd->add_option("--rank", args->rank,
                  "run only this TP rank in this process, started by a launcher (mpirun, a scheduler, torchrun: RANK, "
                  "WORLD_SIZE, LOCAL_RANK are read when --rank/--world/--device are not given)")
      ->check(integer_range(0, int64_t{1} << 20))
      ->type_name("R");
  cmd->add_option("--world", args->world, "with --rank: the number of ranks (= TP size)")
      ->check(integer_range(2, int64_t{1} << 20))
      ->type_name("N");
  cmd->add_option("--nccl-id", args->nccl_id,
                  "with --rank: rank 0 writes NCCL's unique id to this file (it must not exist), the others wait for it "
                  "(a folder every rank sees)")
      ->type_name("FILE");
  cmd->add_option("--device", args->device, "with --rank: the CUDA device [default: LOCAL_RANK, else rank modulo the devices]")
      ->check(integer_range(0, int64_t{1} << 10))
      ->type_name("D");
  cmd->add_option("--nccl-timeout", args->nccl_timeout, "with --rank: seconds a rank waits for the --nccl-id file")
      ->check(seconds_range(1, 86400))
      ->type_name("SECONDS")
      ->capture_default_str();
  cmd->add_flag("--rank-only", args->rank_only, "with --rank: write this rank's traces only (--launch processes merges them)")
      ->group("");
  add_routing_options(cmd, &args->routing);
  add_serving_options(cmd, &args->serving);
  cmd->callback([args, exit_code, cmd]() {
    args->model_given = cmd->count("--model") > 0;
    note_serving_options(cmd, &args->serving);
    *exit_code = run_command(*args);
  });
}

}  // namespace moeprof::cli
