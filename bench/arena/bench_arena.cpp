// bench_arena: the arena solver (planner/arena_solver.h) on
//   - MiniMalloc's "challenging" instances (a directory of MiniMalloc CSV files);
//   - generated instances shaped like a serving engine's forward steps (generate_forward below),
//     one stream (forward-*) or two-batch overlap (tbo-*), 10k and 100k buffers by default,
//     256-byte alignment;
//   - the activation buffers of .mtrace files given on the command line (the device with the
//     largest activation peak, 256-byte alignment, as `moeprof plan --arena`).
// Every plan is checked by validate_plan(); the row says "INVALID" if one fails.
//
//   bench_arena [--dir DIR] [--time-limit S] [--gen-time-limit S] [--gen N,N,...] [--seed S]
//               [--only NAME,...] [--dump-generated DIR] [TRACE.mtrace ...]
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

// Forward steps of a serving engine, back to back: each step has its own token count (1k..16k)
// and runs `layers` layers of `per_layer` tensors. Tensor k of a layer is read by the next 1..3
// ops and freed after its last reader; the layer's last tensor (the hidden state) lives until the
// end of the next layer; everything of a step is freed when it ends. With `overlap` (two-batch
// overlap), the step's tokens are split into two microbatches whose ops alternate, so lifetimes
// of two similar sizes interleave. Time = event index.
std::vector<Buffer> generate_forward(size_t target, uint64_t seed, bool overlap) {
  std::mt19937_64 rng(seed);
  constexpr size_t kPerLayer = 20, kLayers = 61;
  // Bytes per token of each tensor of a layer (bf16 activations of a DeepSeek-like layer, TP=4).
  const uint64_t width[kPerLayer] = {14336, 4224, 6144, 8192, 4096, 2048, 14336, 14336, 768, 64,
                                     3584,  16384, 16384, 8192, 14336, 14336, 2048, 14336, 7168, 14336};
  struct Live {
    size_t buffer;
    size_t free_after_op;
  };
  std::vector<Buffer> out;
  uint64_t now = 0;
  while (out.size() < target) {
    const uint64_t tokens = 64 * (16 + rng() % 241);
    const int streams = overlap ? 2 : 1;
    uint64_t mb_tokens[2] = {tokens, 0};
    if (overlap) {
      mb_tokens[0] = tokens / 128 * 64;
      mb_tokens[1] = tokens - mb_tokens[0];
    }
    std::vector<Live> live[2];
    for (size_t op = 0; op < kLayers * kPerLayer && out.size() < target; ++op) {
      for (int m = 0; m < streams && out.size() < target; ++m) {
        const size_t k = op % kPerLayer;
        Buffer b;
        b.id = out.size();
        b.size = mb_tokens[m] * width[k] + (rng() % 4) * 512;  // a little jitter (workspace padding)
        b.lower = now++;
        out.push_back(b);
        live[m].push_back({out.size() - 1, op + (k == kPerLayer - 1 ? 2 * kPerLayer : 1 + rng() % 3)});
        for (size_t j = 0; j < live[m].size();) {
          if (live[m][j].free_after_op <= op) {
            out[live[m][j].buffer].upper = now++;
            live[m][j] = live[m].back();
            live[m].pop_back();
          } else {
            ++j;
          }
        }
      }
    }
    for (auto& l : live)
      for (const Live& e : l) out[e.buffer].upper = now++;
  }
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
  std::string dump_dir;
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
    else if (a == "--dump-generated") dump_dir = next();
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
  for (size_t n : gen)
    for (bool overlap : {false, true}) {
    const std::string name = std::string(overlap ? "tbo-" : "forward-") + std::to_string(n / 1000) + "k";
    if (!wanted(name)) continue;
    const std::vector<Buffer> bs = generate_forward(n, seed + n + overlap, overlap);
    if (!dump_dir.empty()) {  // the instance as a MiniMalloc CSV (without offsets)
      ArenaCsv csv;
      csv.columns = {"id", "lower", "upper", "size"};
      for (const Buffer& b : bs) {
        csv.buffers.push_back(b);
        csv.rows.push_back({std::to_string(b.id), std::to_string(b.lower), std::to_string(b.upper), std::to_string(b.size)});
      }
      std::string text = arena_csv_with_offsets(csv, std::vector<uint64_t>(bs.size(), 0));
      // Drop the offset column: cut ",<offset>" at each line end.
      std::string out;
      for (size_t pos = 0; pos < text.size();) {
        const size_t nl = text.find('\n', pos);
        const std::string line = text.substr(pos, nl - pos);
        out += line.substr(0, line.rfind(',')) + "\n";
        pos = nl + 1;
      }
      FILE* f = std::fopen((dump_dir + "/" + name + ".csv").c_str(), "w");
      if (f) {
        std::fwrite(out.data(), 1, out.size(), f);
        std::fclose(f);
      }
    }
    print_row(solve(name, bs, 256, gen_limit, seed));
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
