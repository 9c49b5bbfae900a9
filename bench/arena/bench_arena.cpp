// bench_arena: the arena solver (planner/arena_solver.h) on
//   - MiniMalloc's "challenging" instances (a directory of MiniMalloc CSV files);
//   - generated instances shaped like inference forwards (layers of short-lived activations, a
//     residual stream that crosses layers, microbatches overlapping two at a time, token counts
//     varying per microbatch, 256-byte alignment), 10k and 100k buffers by default;
//   - the activation buffers of .mtrace files given on the command line (the device with the
//     largest activation peak, 256-byte alignment, as `moeprof plan --arena`).
// Every plan is checked by validate_plan(); the row says "INVALID" if one fails.
//
//   bench_arena [--dir DIR] [--time-limit S] [--gen-time-limit S] [--gen N,N,...] [--seed S]
//               [--only NAME,...] [TRACE.mtrace ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "planner/arena_csv.h"
#include "planner/arena_solver.h"

using namespace moeprof;
using namespace moeprof::planner;
namespace fs = std::filesystem;

namespace {

// A forward pass per microbatch: `layers` layers of `per_layer` tensors. Tensor k of a layer is
// read by the next 1..3 tensors and freed after its last reader; the layer's last tensor (the
// hidden state) lives until the end of the next layer. Two microbatches run interleaved (one op
// each in turn), so lifetimes of different sizes overlap. Time = event index.
std::vector<Buffer> generate_forward(size_t target, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t per_layer = 20, layers = 61;
  // Bytes per token of each tensor of a layer (bf16 activations of a DeepSeek-like layer, TP=4).
  const uint64_t width[per_layer] = {14336, 4224, 6144, 8192, 4096, 2048, 14336, 14336, 768, 64,
                                     3584,  16384, 16384, 8192, 14336, 14336, 2048, 14336, 7168, 14336};
  std::vector<Buffer> out;
  struct Live {
    size_t buffer;
    uint64_t free_at_op;  // op index of the stream after which it is freed
  };
  struct Stream {
    uint64_t tokens = 0;
    size_t op = 0;  // next op (layer * per_layer + k)
    std::vector<Live> live;
  };
  uint64_t now = 0;
  auto new_stream = [&]() {
    Stream s;
    s.tokens = 64 * (16 + rng() % 240);  // 1k..16k tokens
    return s;
  };
  Stream st[2] = {new_stream(), new_stream()};
  size_t turn = 0;
  while (out.size() < target) {
    Stream& s = st[turn];
    turn ^= 1;
    const size_t layer = s.op / per_layer, k = s.op % per_layer;
    Buffer b;
    b.id = out.size();
    b.size = s.tokens * width[k] + (rng() % 4) * 512;  // a little jitter, then 256-byte alignment
    b.lower = now++;
    b.upper = 0;
    out.push_back(b);
    const uint64_t life = k == per_layer - 1 ? 2 * per_layer : 1 + rng() % 3;
    s.live.push_back({out.size() - 1, s.op + life});
    // Free what this op was the last reader of.
    for (size_t j = 0; j < s.live.size();) {
      if (s.live[j].free_at_op <= s.op) {
        out[s.live[j].buffer].upper = now++;
        s.live[j] = s.live.back();
        s.live.pop_back();
      } else {
        ++j;
      }
    }
    ++s.op;
    if (layer + 1 == layers && k + 1 == per_layer) {  // forward done: release, next microbatch
      for (const Live& l : s.live) out[l.buffer].upper = now++;
      s = new_stream();
    }
  }
  for (auto* s : {&st[0], &st[1]})
    for (const Live& l : s->live) out[l.buffer].upper = now++;
  return out;
}

struct Row {
  std::string name;
  size_t buffers = 0;
  ArenaSolution sol;
  bool valid = false;
  std::string error;
};

Row solve(const std::string& name, const std::vector<Buffer>& bs, uint64_t alignment, double limit, uint64_t seed) {
  Row r;
  r.name = name;
  ArenaSolveOptions opt;
  opt.alignment = alignment;
  opt.time_limit_s = limit;
  opt.seed = seed;
  auto sol = solve_arena(bs, opt);
  if (!sol) {
    r.error = sol.status().message();
    return r;
  }
  r.sol = *sol;
  r.buffers = sol->buffers;
  ArenaOptions vo;
  vo.alignment = alignment;
  const Status st = validate_plan(bs, to_arena_plan(*sol), vo);
  r.valid = st.is_ok();
  if (!st.is_ok()) r.error = st.message();
  return r;
}

std::string commas(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

void print_header() {
  std::printf("| instance | buffers | LOAD | lower bound | arena | gap | proven | first answer | seconds | algorithm |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---|---:|---:|---|\n");
}

void print_row(const Row& r) {
  if (!r.error.empty() && r.buffers == 0) {
    std::printf("| %s | error: %s |\n", r.name.c_str(), r.error.c_str());
    std::fflush(stdout);
    return;
  }
  const ArenaSolution& s = r.sol;
  std::printf("| %s | %zu | %s | %s | %s | %.2f%% | %s | %.1f ms | %.3f | %s%s |\n", r.name.c_str(), r.buffers,
              commas(s.load_bytes).c_str(), commas(s.lower_bound_bytes).c_str(), commas(s.arena_bytes).c_str(), s.gap_pct(),
              s.proven_optimal ? "yes" : "no", 1e3 * s.first_answer_seconds, s.seconds, s.algorithm.c_str(),
              r.valid ? "" : (", INVALID: " + r.error).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "../shared/data/arena/minimalloc-challenging";
  double limit = 60, gen_limit = 10;
  std::vector<size_t> gen = {10000, 100000};
  std::vector<std::string> traces, only;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_arena: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto list = [](const std::string& v) {
      std::vector<std::string> out;
      size_t start = 0;
      while (start <= v.size()) {
        const size_t c = v.find(',', start);
        const std::string item = v.substr(start, c == std::string::npos ? std::string::npos : c - start);
        if (!item.empty()) out.push_back(item);
        if (c == std::string::npos) break;
        start = c + 1;
      }
      return out;
    };
    if (a == "--dir") dir = next();
    else if (a == "--time-limit") limit = std::atof(next().c_str());
    else if (a == "--gen-time-limit") gen_limit = std::atof(next().c_str());
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--only") only = list(next());
    else if (a == "--gen") {
      gen.clear();
      for (const auto& v : list(next())) gen.push_back(std::strtoull(v.c_str(), nullptr, 10));
    } else if (a == "--help" || a == "-h") {
      std::printf("bench_arena [--dir DIR] [--time-limit S] [--gen-time-limit S] [--gen N,...] [--seed S] [--only NAME,...] "
                  "[TRACE.mtrace ...]\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "bench_arena: unknown option %s\n", a.c_str());
      return 2;
    } else {
      traces.push_back(a);
    }
  }
  auto wanted = [&](const std::string& name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };

  std::printf("arena solver: challenging instances with --time-limit %g s, generated and traces with %g s\n\n", limit,
              gen_limit);
  print_header();
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".csv") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) std::fprintf(stderr, "bench_arena: no .csv files in %s\n", dir.c_str());
  for (const auto& f : files) {
    const std::string name = f.stem().stem().string();  // "A.1048576.csv" -> "A"
    if (!wanted(name)) continue;
    auto csv = read_arena_csv(f.string());
    if (!csv) {
      Row r;
      r.name = name;
      r.error = csv.status().message();
      print_row(r);
      continue;
    }
    print_row(solve(name, csv->buffers, 1, limit, seed));
  }
  for (size_t n : gen) {
    const std::string name = "forward-" + std::to_string(n / 1000) + "k";
    if (!wanted(name)) continue;
    print_row(solve(name, generate_forward(n, seed + n), 256, gen_limit, seed));
  }
  for (const auto& path : traces) {
    const std::string name = fs::path(path).filename().string();
    if (!wanted(name)) continue;
    auto t = read_trace(path);
    if (!t) {
      Row r;
      r.name = name;
      r.error = t.status().message();
      print_row(r);
      continue;
    }
    AnalyzeOptions aopt;
    aopt.keep_lifetimes = true;
    aopt.timeline_points = 0;
    const RunAnalysis run = analyze(*t, aopt);
    if (run.devices.empty()) continue;
    const DeviceAnalysis* dev = &run.devices[0];
    for (const auto& d : run.devices)
      if (d.peak_activation_bytes > dev->peak_activation_bytes) dev = &d;
    print_row(solve(name, buffers_from_lifetimes(run, dev->device, true), 256, gen_limit, seed));
  }
  return 0;
}
