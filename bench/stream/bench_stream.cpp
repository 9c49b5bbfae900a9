// bench_stream: large traces on disk for the streaming benchmark (bench/stream/run.sh).
//
//   bench_stream generate --events N --out PATH [--devices D] [--ranks R] [--version 1|2]
//                         [--template TRACE | --pattern executor|window [window options]
//                          | --pattern program --csv FILE]
//       Writes N records to PATH (with --ranks R: R files PATH.rankK.mtrace of N records each, one
//       device each, as `moeprof run --gpus R` would), in format version 2 (default) or 1. The
//       pattern: `executor` (default), the synthetic prefill of bench/common/synthetic_trace.h (61
//       layers of MLA + MoE tensors, sliding-window lifetimes, addresses recycled per size); with
//       --template, a trace of the executor itself (e.g. `moeprof run --backend meta`) repeated as
//       successive requests: its persistent allocations (never freed) once, everything else again
//       and again, timestamps shifted and sequence numbers renewed, on D devices; `window`, the
//       shapes of shaped_trace.h: --live K (live allocations per device, 64), --names N (10; 0
//       unnamed), --layers L (61: L x 3 scopes; 0 unscoped), --stacks S (call stacks, version 2;
//       0), --uses (use records), --traced (as the CUPTI tracer: no categories, kernels, backend
//       cupti in the metadata), --seed S; `program`, the buffers of an arena instance from a real
//       program (--csv: a MiniMalloc CSV, e.g. bench/arena/torch/instances/llama-generate.csv)
//       again and again on D devices in lockstep, each with a write use, and a read use when it
//       lives two steps or more (program_trace.h); the window options do not apply.
//   bench_stream read PATH
//       Reads PATH frame by frame on one thread (TraceReader: checksum + decode) and reports MB/s.
//   bench_stream analyze [--serial] [--no-handoffs] [--window N] PATH...
//       planner::analyze_stream over the inputs (merged as ranks when several) with plan's options
//       (--no-handoffs: without the hand-off search); time, records/s and the peak figures. (End-to-end figures with peak RSS come from `moeprof plan` in run.sh.)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bench/common/synthetic_trace.h"
#include "bench/stream/program_trace.h"
#include "bench/stream/shaped_trace.h"
#include "core/trace_io.h"
#include "planner/arena_csv.h"
#include "planner/stream.h"

using namespace moeprof;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_stream: %s\n", msg.c_str());
  std::exit(2);
}

// Repeats a template trace as requests on `devices` devices; emits `target` records.
template <class Intern, class Emit>
void repeat_template(const Trace& tmpl, size_t target, int devices, Intern&& intern, Emit&& emit) {
  // Allocations never freed in the template (weights, caches): emitted once per device.
  std::unordered_set<uint64_t> open;  // (device << 48) ^ address of open allocations
  std::vector<char> persistent(tmpl.records.size(), 0);
  {
    std::vector<std::pair<uint64_t, size_t>> opened;
    std::unordered_map<uint64_t, size_t> at;
    for (size_t i = 0; i < tmpl.records.size(); ++i) {
      const TraceRecord& r = tmpl.records[i];
      const uint64_t key = (uint64_t{r.device} << 48) ^ r.address;
      if (r.kind == EventKind::kAlloc) at[key] = i;
      if (r.kind == EventKind::kFree) at.erase(key);
    }
    for (const auto& [key, i] : at) persistent[i] = 1;
  }
  std::vector<StrId> strs;
  for (const std::string& s : tmpl.strings.all()) strs.push_back(intern(s));
  uint16_t tdev = 0;
  for (const TraceRecord& r : tmpl.records) tdev = std::max<uint16_t>(tdev, static_cast<uint16_t>(r.device + 1));
  uint64_t t_first = UINT64_MAX, t_last = 0;
  for (const TraceRecord& r : tmpl.records) {
    t_first = std::min(t_first, r.timestamp_ns);
    t_last = std::max(t_last, r.timestamp_ns);
  }
  const uint64_t span = t_last - t_first + 1000;
  size_t emitted = 0;
  uint64_t seq = 1;
  auto out = [&](const TraceRecord& src, uint64_t shift, int copy) {
    if (emitted >= target) return;
    TraceRecord r = src;
    r.timestamp_ns = src.timestamp_ns - t_first + 1000 + shift;
    r.seq = seq++;
    r.device = static_cast<uint16_t>(src.device + copy * tdev);
    r.name_id = strs[index_of(src.name_id)];
    r.scope_id = strs[index_of(src.scope_id)];
    r.shape_id = strs[index_of(src.shape_id)];
    r.stack_id = StackId::kNone;
    emit(static_cast<const TraceRecord&>(r));
    ++emitted;
  };
  for (size_t i = 0; i < tmpl.records.size(); ++i)
    if (persistent[i])
      for (int c = 0; c < devices; ++c) out(tmpl.records[i], 0, c);
  for (uint64_t rep = 0; emitted < target; ++rep) {
    const size_t before = emitted;
    for (size_t i = 0; i < tmpl.records.size() && emitted < target; ++i) {
      const TraceRecord& r = tmpl.records[i];
      if (persistent[i] || r.kind == EventKind::kPoolReserve) continue;
      for (int c = 0; c < devices; ++c) out(r, rep * span, c);
    }
    if (emitted == before) die("the template has nothing to repeat");
  }
}

struct GenerateArgs {
  size_t events = 0;
  int devices = 4, ranks = 0;
  uint32_t version = 2;
  std::string out, tmpl, pattern = "executor", csv;
  bench::TraceShape shape;
};

int generate(const GenerateArgs& a) {
  const size_t events = a.events;
  const int devices = a.devices, ranks = a.ranks;
  const std::string& tmpl_path = a.tmpl;
  const std::string& out = a.out;
  Trace tmpl;
  if (!tmpl_path.empty()) {
    auto t = read_trace(tmpl_path);
    if (!t) die(t.status().message());
    tmpl = std::move(t).value();
  }
  std::vector<planner::Buffer> program;
  if (a.pattern == "program") {
    auto c = planner::read_arena_csv(a.csv);
    if (!c) die(c.status().message());
    program = std::move(c->buffers);
    if (program.empty()) die(a.csv + ": no buffers");
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  for (int k = 0; k < std::max(ranks, 1); ++k) {
    const std::string path = ranks > 0 ? out + ".rank" + std::to_string(k) + ".mtrace" : out;
    RunMeta meta = tmpl_path.empty() ? RunMeta{} : tmpl.meta;
    meta.name = tmpl_path.empty() ? "bench" : meta.name;
    meta.mode = meta.mode.empty() ? "baseline" : meta.mode;
    meta.tp_size = ranks > 0 ? ranks : devices;
    meta.tp_rank = ranks > 0 ? k : 0;
    TraceWriterOptions wo{16384, 0};
    wo.version = a.version;
    if (a.version < 2) meta.pid = 4242;
    if (a.pattern == "window" && a.shape.traced) {
      meta.backend = "cupti";
      meta.mode = "traced";
    }
    auto w = TraceWriter::open(path, meta, wo);
    if (!w) die(w.status().message());
    TraceWriter& tw = **w;
    auto intern = [&](const std::string& s) { return tw.intern(s); };
    Status err;
    auto emit = [&](const TraceRecord& r) {
      if (Status st = tw.append(r); !st && err.is_ok()) err = st;
    };
    const int devs = ranks > 0 ? 1 : devices;
    auto emit_v1 = [&](const TraceRecord& r) {  // version 1: the stack slot holds the process id
      TraceRecord c = r;
      c.stack_id = static_cast<StackId>(4242);
      emit(c);
    };
    if (a.pattern == "window") {
      bench::TraceShape shape = a.shape;
      shape.devices = devs;
      shape.version = a.version;
      auto intern_stack = [&](const std::vector<StackFrame>& frames) {
        std::vector<uint32_t> ids;
        for (const StackFrame& f : frames) ids.push_back(tw.intern_frame(f));
        return tw.intern_stack(ids);
      };
      bench::generate_shaped(events, shape, intern, intern_stack, emit);
    } else if (a.pattern == "program") {
      if (a.version < 2) bench::generate_program(program, events, devs, emit_v1);
      else bench::generate_program(program, events, devs, emit);
    } else if (tmpl_path.empty()) {
      if (a.version < 2) bench::generate_trace(events, devs, intern, emit_v1);
      else bench::generate_trace(events, devs, intern, emit);
    } else if (a.version < 2) {
      repeat_template(tmpl, events, devs, intern, emit_v1);
    } else {
      repeat_template(tmpl, events, devs, intern, emit);
    }
    if (Status st = tw.close(); !st && err.is_ok()) err = st;
    if (!err.is_ok()) die(err.message());
    bytes += std::filesystem::file_size(path);
    std::printf("wrote %s: %llu records\n", path.c_str(), static_cast<unsigned long long>(tw.records_written()));
  }
  const double s = seconds_since(t0);
  std::printf("generated %.1f MB in %.2f s\n", static_cast<double>(bytes) / 1e6, s);
  return 0;
}

int read_bench(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = TraceReader::open(path);
  if (!r) die(r.status().message());
  std::vector<TraceRecord> recs;
  uint64_t n = 0, checksum = 0;
  for (;;) {
    auto more = (*r)->next(&recs);
    if (!more) die(more.status().message());
    if (!*more) break;
    n += recs.size();
    for (const TraceRecord& x : recs) checksum += x.bytes;
  }
  const double s = seconds_since(t0);
  const double mb = static_cast<double>((*r)->file_bytes()) / 1e6;
  std::printf("read %llu records, %.1f MB in %.3f s: %.0f MB/s, %.1f M records/s (sum %llu)\n",
              static_cast<unsigned long long>(n), mb, s, mb / s, static_cast<double>(n) / s / 1e6,
              static_cast<unsigned long long>(checksum));
  return 0;
}

int analyze_bench(const std::vector<std::string>& paths, bool serial, size_t window, bool handoffs) {
  planner::StreamOptions o;
  o.parallel = !serial;
  o.analyze.alloc_groups = false;  // as `moeprof plan`
  o.analyze.findings = handoffs;
  if (window > 0) o.reorder_window = window;
  planner::StreamStats st;
  const auto t0 = std::chrono::steady_clock::now();
  auto run = planner::analyze_stream(paths, o, &st);
  const double s = seconds_since(t0);
  if (!run) die(run.status().message());
  std::printf("analyze_stream: %llu records, %.1f MB in %.3f s: %.1f M records/s, %.0f MB/s; peak activation %llu B "
              "(device %u), peak total %llu B, %zu devices, external sort %d, max lateness %llu\n",
              static_cast<unsigned long long>(st.records), static_cast<double>(st.bytes_read) / 1e6, s,
              static_cast<double>(st.records) / s / 1e6, static_cast<double>(st.bytes_read) / 1e6 / s,
              static_cast<unsigned long long>(run->peak_activation_bytes),
              run->devices.empty() ? 0u : static_cast<unsigned>(run->devices[run->peak_device].device),
              static_cast<unsigned long long>(run->peak_total_bytes), run->devices.size(), st.external_sort ? 1 : 0,
              static_cast<unsigned long long>(st.max_lateness));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: bench_stream generate --events N --out PATH [options] | read PATH | analyze PATH... (see the head of bench_stream.cpp)");
  const std::string cmd = argv[1];
  if (cmd == "read") {
    if (argc != 3) die("usage: bench_stream read PATH");
    return read_bench(argv[2]);
  }
  if (cmd == "analyze") {
    std::vector<std::string> paths;
    bool serial = false, handoffs = true;
    size_t window = 0;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--serial") serial = true;
      else if (a == "--no-handoffs") handoffs = false;
      else if (a == "--window" && i + 1 < argc) window = std::strtoull(argv[++i], nullptr, 10);
      else paths.push_back(a);
    }
    if (paths.empty()) die("usage: bench_stream analyze [--serial] [--no-handoffs] [--window N] PATH...");
    return analyze_bench(paths, serial, window, handoffs);
  }
  if (cmd != "generate") die("unknown command " + cmd);
  GenerateArgs g;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--uses" || a == "--traced") {
      (a == "--uses" ? g.shape.uses : g.shape.traced) = true;
      continue;
    }
    if (i + 1 >= argc) die(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--events") g.events = std::strtoull(v, nullptr, 10);
    else if (a == "--devices") g.devices = std::atoi(v);
    else if (a == "--ranks") g.ranks = std::atoi(v);
    else if (a == "--out") g.out = v;
    else if (a == "--template") g.tmpl = v;
    else if (a == "--version") g.version = static_cast<uint32_t>(std::atoi(v));
    else if (a == "--pattern") g.pattern = v;
    else if (a == "--csv") g.csv = v;
    else if (a == "--live") g.shape.live = std::atoi(v);
    else if (a == "--names") g.shape.names = std::atoi(v);
    else if (a == "--layers") g.shape.layers = std::atoi(v);
    else if (a == "--stacks") g.shape.stacks = std::atoi(v);
    else if (a == "--seed") g.shape.seed = std::strtoull(v, nullptr, 10);
    else die("unknown option " + a);
  }
  if (g.events == 0 || g.out.empty() || g.devices < 1 || g.devices > 64 || g.ranks < 0 || g.ranks > 64)
    die("generate needs --events N > 0, --out PATH, --devices 1..64, --ranks 0..64");
  if (g.version < 1 || g.version > 2) die("--version is 1 or 2");
  if (g.pattern != "executor" && g.pattern != "window" && g.pattern != "program") die("--pattern is executor, window or program");
  if (g.pattern != "executor" && !g.tmpl.empty()) die("--template goes with --pattern executor");
  if ((g.pattern == "program") != !g.csv.empty()) die("--pattern program goes with --csv FILE, and only it");
  if (g.shape.live < 1 || g.shape.names < 0 || g.shape.layers < 0 || g.shape.stacks < 0)
    die("--live must be at least 1; --names, --layers and --stacks at least 0");
  if (g.shape.stacks > 0 && g.version < 2) die("--stacks needs --version 2 (version 1 has no call stacks)");
  return generate(g);
}
