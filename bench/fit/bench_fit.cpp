// bench_fit: times `moeprof fit`'s work on three traces of one program at different sizes, each
// with about 1M allocations (and a use per allocation): write the .mtrace files, read and analyse
// them, fit the laws, predict the peak at a size never run and solve a budget. It then builds the
// program at the predicted size and checks that the prediction equals its analysed peak.
//
// The program is shaped like the executor's prefill, repeated: 61 layers of 13 tensors, sizes
// linear in T (two with a constant term, one quadratic), a weight per layer allocated up front;
// forwards are repeated until the allocation count is reached.
//
//   bench_fit [--allocations N] [--sizes T1,T2,T3] [--at T] [--dir DIR] [--keep]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/trace.h"
#include "core/trace_io.h"
#include "planner/analysis.h"
#include "planner/fit.h"

using namespace moeprof;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of this process (user + system, all threads): what the work costs whatever else the
// machine runs.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Tensor {
  const char* name;
  const char* scope;
  uint64_t a, b, q;  // bytes = q T^2 + a T + b
  int live_for;      // freed after this many later allocations of the layer
};

const Tensor kLayer[] = {
    {"post_norm", "attn", 14336, 0, 0, 3},     {"qkv_a", "attn", 4224, 0, 0, 3},        {"q", "attn/mla", 6144, 0, 0, 2},
    {"kv", "attn/mla", 8192, 0, 0, 2},         {"scores", "attn/mla", 0, 0, 2, 1},      {"o_proj", "attn", 14336, 0, 0, 2},
    {"router_logits", "moe/router", 1536, 0, 0, 1}, {"topk", "moe/router", 64, 0, 0, 4}, {"hs_fp4", "moe/experts", 3584, 0, 0, 2},
    {"gemm1_out", "moe/experts", 2048, 6193152, 0, 1}, {"gemm2_out", "moe/experts", 114688, 346816512, 0, 1},
    {"expert_offsets", "moe/experts", 0, 1540, 0, 1}, {"moe_out", "moe", 14336, 0, 0, 1},
};
constexpr int kLayers = 61;

// Writes the program at size T with about `allocations` allocations; returns the count written.
uint64_t write_program(const std::string& path, int64_t T, uint64_t allocations) {
  RunMeta meta;
  meta.name = "bench";
  meta.model = "bench-program";
  meta.mode = "baseline";
  meta.tokens = T;
  auto w = TraceWriter::open(path, meta);
  if (!w) {
    std::fprintf(stderr, "bench_fit: %s\n", w.status().message().c_str());
    std::exit(2);
  }
  auto& wr = *w.value();
  std::vector<StrId> names, scopes;
  for (int l = 0; l < kLayers; ++l)
    for (const auto& t : kLayer) {
      names.push_back(wr.intern(t.name));
      scopes.push_back(wr.intern("layer." + std::to_string(l) + "/" + t.scope));
    }
  const StrId op = wr.intern("op");
  uint64_t ts = 1, seq = 1, addr = 0x7f0000000000ull, count = 0;
  auto rec = [&](EventKind k, uint64_t a, uint64_t bytes, StrId name, StrId scope, Category c) {
    TraceRecord r;
    r.kind = k;
    r.timestamp_ns = ts++;
    r.seq = seq++;
    r.address = a;
    r.bytes = bytes;
    r.name_id = name;
    r.scope_id = scope;
    r.category = c;
    r.flags = k == EventKind::kUse ? kUseRead : 0;
    (void)wr.append(r);
  };
  const StrId wname = wr.intern("weight"), wscope = wr.intern("model");
  std::vector<uint64_t> weights;
  for (int l = 0; l < kLayers; ++l) {
    addr += 0x10000000;
    rec(EventKind::kAlloc, addr, 1'409'286'144, wname, wscope, Category::kWeights);
    weights.push_back(addr);
    ++count;
  }
  std::vector<std::pair<uint64_t, int>> pending;
  while (count < allocations) {
    for (int l = 0; l < kLayers && count < allocations; ++l)
      for (size_t k = 0; k < std::size(kLayer) && count < allocations; ++k) {
        const Tensor& t = kLayer[k];
        const uint64_t bytes = t.q * static_cast<uint64_t>(T) * static_cast<uint64_t>(T) + t.a * static_cast<uint64_t>(T) + t.b;
        addr += 0x10000000;
        const size_t id = static_cast<size_t>(l) * std::size(kLayer) + k;
        rec(EventKind::kAlloc, addr, bytes, names[id], scopes[id], Category::kActivation);
        rec(EventKind::kUse, addr, 0, op, scopes[id], Category::kActivation);
        ++count;
        for (auto& p : pending) --p.second;
        for (size_t i = 0; i < pending.size();)
          if (pending[i].second < 0) {
            rec(EventKind::kFree, pending[i].first, 0, StrId::kNone, StrId::kNone, Category::kActivation);
            pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
          } else {
            ++i;
          }
        pending.emplace_back(addr, t.live_for);
      }
  }
  for (auto& p : pending) rec(EventKind::kFree, p.first, 0, StrId::kNone, StrId::kNone, Category::kActivation);
  for (uint64_t a : weights) rec(EventKind::kFree, a, 0, StrId::kNone, StrId::kNone, Category::kWeights);
  if (Status st = wr.close(); !st) {
    std::fprintf(stderr, "bench_fit: %s\n", st.message().c_str());
    std::exit(2);
  }
  return count;
}

planner::RunAnalysis load(const std::string& path) {
  auto t = read_trace(path);
  if (!t) {
    std::fprintf(stderr, "bench_fit: %s\n", t.status().message().c_str());
    std::exit(2);
  }
  planner::AnalyzeOptions o;
  o.keep_lifetimes = true;
  o.findings = false;
  o.timeline_points = 0;
  return planner::analyze(t.value(), o);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t allocations = 1'000'000;
  std::vector<int64_t> sizes = {1024, 2048, 4096};
  int64_t at = 16384;
  bool keep = false;  // leave the traces in --dir (to time `moeprof fit` on them)
  std::string dir = (std::filesystem::temp_directory_path() / "bench_fit").string();
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_fit: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--allocations")) allocations = std::stoull(next());
    else if (!std::strcmp(argv[i], "--at")) at = std::stoll(next());
    else if (!std::strcmp(argv[i], "--dir")) dir = next();
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else if (!std::strcmp(argv[i], "--sizes")) {
      sizes.clear();
      std::string s = next();
      for (size_t p = 0; p <= s.size();) {
        const size_t c = s.find(',', p);
        sizes.push_back(std::stoll(s.substr(p, c - p)));
        p = c == std::string::npos ? s.size() + 1 : c + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_fit [--allocations N] [--sizes T1,T2,T3] [--at T] [--dir DIR] [--keep]\n");
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  auto t0 = std::chrono::steady_clock::now();
  uint64_t written = 0;
  for (int64_t T : sizes) {
    paths.push_back(dir + "/t" + std::to_string(T) + ".mtrace");
    written = write_program(paths.back(), T, allocations);
  }
  const double t_write = since(t0);
  std::printf("traces: %zu of %llu allocations each (+ a use and a free each), sizes", paths.size(), static_cast<unsigned long long>(written));
  for (int64_t T : sizes) std::printf(" %lld", static_cast<long long>(T));
  std::printf("; written in %.3f s (not part of fit)\n", t_write);

  t0 = std::chrono::steady_clock::now();
  double c0 = cpu_seconds();
  // As `moeprof fit` reads them: a trace per worker, on every core, straight from the file.
  std::vector<planner::SizeTrace> runs(paths.size());
  {
    auto read = [&](size_t i) {
      bool full = false;
      auto st = planner::read_size_trace(paths[i], &full);
      if (!st || full) {
        std::fprintf(stderr, "bench_fit: %s: not read straight\n", paths[i].c_str());
        std::exit(2);
      }
      runs[i] = std::move(st).value();
    };
    std::vector<std::thread> pool;
    for (size_t i = 1; i < paths.size(); ++i) pool.emplace_back(read, i);
    read(0);
    for (auto& t : pool) t.join();
  }
  const double t_load = since(t0), c_load = cpu_seconds() - c0;
  t0 = std::chrono::steady_clock::now();
  c0 = cpu_seconds();
  std::vector<const planner::SizeTrace*> ptrs;
  for (const auto& r : runs) ptrs.push_back(&r);
  auto fit = planner::fit_size_laws(ptrs, {{"tokens", "", sizes}});
  if (!fit) {
    std::fprintf(stderr, "bench_fit: %s\n", fit.status().message().c_str());
    return 2;
  }
  const double t_fit = since(t0), c_fit = cpu_seconds() - c0;
  t0 = std::chrono::steady_clock::now();
  c0 = cpu_seconds();
  auto pred = planner::predict_peak(*fit, {at});
  auto solve = planner::solve_budget(*fit, 80'000'000'000ull, 0, {0});
  const double t_pred = since(t0), c_pred = cpu_seconds() - c0;
  if (!pred || !solve) {
    std::fprintf(stderr, "bench_fit: prediction failed\n");
    return 2;
  }
  std::printf("step                          wall      CPU\n");
  std::printf("read the traces           %8.3f s %8.3f s\n", t_load, c_load);
  std::printf("fit (sites, laws, events) %8.3f s %8.3f s  (%zu sites, %zu distinct laws, %zu confirmed; %zu peak positions, %zu kept)\n",
              t_fit, c_fit, fit->sites.size(), fit->laws.size(), fit->confirmed_sites, fit->candidate_positions,
              fit->activation_candidates.size());
  std::printf("predict + budget solve    %8.3f s %8.3f s\n", t_pred, c_pred);
  std::printf("total                     %8.3f s %8.3f s  (target: under 5 s)\n", t_load + t_fit + t_pred, c_load + c_fit + c_pred);
  // The check: the program built at the predicted size.
  const std::string check = dir + "/t" + std::to_string(at) + ".mtrace";
  write_program(check, at, allocations);
  const auto actual = load(check);
  std::printf("T = %lld: predicted peak activation %llu B, measured %llu B: %s; largest T within 80 GB: %lld\n", static_cast<long long>(at),
              static_cast<unsigned long long>(pred->peak_activation_bytes), static_cast<unsigned long long>(actual.peak_activation_bytes),
              pred->peak_activation_bytes == actual.peak_activation_bytes ? "equal" : "DIFFERENT", static_cast<long long>(solve->largest));
  if (!keep) {
    for (const auto& p : paths) std::filesystem::remove(p);
    std::filesystem::remove(check);
  }
  return pred->peak_activation_bytes == actual.peak_activation_bytes ? 0 : 1;
}
