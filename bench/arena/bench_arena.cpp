// bench_arena: the arena solver (planner/arena_solver.h) on
//   - MiniMalloc's "challenging" instances (a directory of MiniMalloc CSV files);
//   - generated instances: a serving engine's forward steps made of the executor's Kimi-K2.5
//     layer (generate_forward below), one stream (forward-*) or two-batch overlap (tbo-*), 10k
//     and 100k buffers by default, 256-byte alignment;
//   - the activation buffers of .mtrace files given on the command line (the device with the
//     largest activation peak, 256-byte alignment, as `moeprof plan --arena`).
// Every plan is checked by validate_plan(); the row says "INVALID" if one fails.
//
//   bench_arena [--dir DIR] [--time-limit S] [--gen-time-limit S] [--gen N,N,...] [--seed S]
//               [--only NAME,...] [--dump-generated DIR] [TRACE.mtrace ...]
#include <algorithm>
#include <array>
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

// Forward steps of a serving engine, back to back, each with its own token count T (1k..16k).
// A step runs 61 layers of the executor's DeepSeek-V3/Kimi-K2.5 layer (baseline mode, TP=4
// rank shapes): the allocations and frees below are the order `moeprof run` records on
// Kimi-K2.5, with sizes in bytes per token (or per padded MoE row, P = 8T + 384 * 63). Every
// buffer of a step is freed when it ends, so steps are independent components. With `overlap`
// (two-batch overlap), a step's tokens are split in two microbatches whose events alternate.
// Time = event index.
struct LayerEvent {
  bool alloc;
  int tensor;     // index into kTensors
  int layer_back;  // frees: 0 = this layer's tensor, 1 = the previous layer's
};
struct TensorSpec {
  uint64_t per_token, per_row, fixed;  // bytes = per_token * T + per_row * P + fixed
};
enum : int { kPostNorm, kQkvA, kQaNormed, kQ, kKvaNormed, kKv, kK, kAttnOut, kOProj, kGateUp, kAct, kShared, kLogits,
             kTopkIds, kTopkW, kMoeOut, kHsFp4, kHsScales, kOffsets, kPermToTok, kExpToPerm, kG1, kG1Scales, kG2, kNumTensors };
constexpr TensorSpec kTensors[kNumTensors] = {
    {14336, 0, 0}, {4224, 0, 0}, {3072, 0, 0}, {6144, 0, 0},  {1024, 0, 0},  {8192, 0, 0}, {6144, 0, 0},    {4096, 0, 0},
    {14336, 0, 0}, {2048, 0, 0}, {1024, 0, 0}, {14336, 0, 0}, {1536, 0, 0},  {32, 0, 0},   {32, 0, 0},      {14336, 0, 0},
    {3584, 0, 0},  {448, 0, 0},  {0, 0, 1540}, {0, 4, 0},     {32, 0, 0},    {0, 256, 0},  {0, 32, 0},      {0, 14336, 0}};
constexpr LayerEvent kLayer[] = {
    {true, kPostNorm, 0},   {false, kQkvA, 1},      {false, kPostNorm, 1},  {true, kQkvA, 0},       {true, kQaNormed, 0},
    {true, kQ, 0},          {false, kQaNormed, 0},  {true, kKvaNormed, 0},  {true, kKv, 0},         {false, kKvaNormed, 0},
    {true, kK, 0},          {true, kAttnOut, 0},    {false, kQ, 0},         {false, kK, 0},         {false, kKv, 0},
    {true, kOProj, 0},      {false, kAttnOut, 0},   {true, kGateUp, 0},     {true, kAct, 0},        {false, kGateUp, 0},
    {true, kShared, 0},     {false, kAct, 0},       {true, kLogits, 0},     {true, kTopkIds, 0},    {true, kTopkW, 0},
    {true, kMoeOut, 0},     {true, kHsFp4, 0},      {true, kHsScales, 0},   {true, kOffsets, 0},    {true, kPermToTok, 0},
    {true, kExpToPerm, 0},  {true, kG1, 0},         {true, kG1Scales, 0},   {true, kG2, 0},         {false, kG2, 0},
    {false, kG1Scales, 0},  {false, kG1, 0},        {false, kExpToPerm, 0}, {false, kPermToTok, 0}, {false, kOffsets, 0},
    {false, kHsScales, 0},  {false, kHsFp4, 0},     {false, kTopkW, 0},     {false, kTopkIds, 0},   {false, kLogits, 0},
    {false, kShared, 0},    {false, kOProj, 0},     {false, kMoeOut, 1}};

std::vector<Buffer> generate_forward(size_t target, uint64_t seed, bool overlap, uint64_t fixed_tokens);

// Pipelined steps: a new step (its own token count) starts every half forward, so two steps of
// different sizes are always in flight, one op each in turn: one component for the whole run.
std::vector<Buffer> generate_pipelined(size_t target, uint64_t seed) {
  constexpr int kLayers = 61;
  constexpr int kEvents = static_cast<int>(sizeof(kLayer) / sizeof(kLayer[0]));
  std::mt19937_64 rng(seed);
  std::vector<Buffer> out;
  uint64_t now = 0;
  struct Step {
    uint64_t tokens = 0;
    int pos = 0;  // next event: layer * kEvents + event
    std::array<std::array<size_t, kNumTensors>, 2> live{};
    std::vector<size_t> mine;
  };
  auto fresh = [&]() {
    Step s;
    s.tokens = 64 * (16 + rng() % 241);
    return s;
  };
  Step steps[2] = {fresh(), fresh()};
  steps[1].pos = -kLayers / 2 * kEvents;  // starts half a forward later
  for (size_t turn = 0; out.size() < target; ++turn) {
    Step& s = steps[turn % 2];
    if (s.pos < 0) {
      ++s.pos;
      continue;
    }
    const int layer = s.pos / kEvents;
    const LayerEvent& e = kLayer[s.pos % kEvents];
    if (e.alloc) {
      const TensorSpec& t = kTensors[e.tensor];
      const uint64_t P = 8 * s.tokens + 384 * 63;
      Buffer b;
      b.id = out.size();
      b.size = t.per_token * s.tokens + t.per_row * P + t.fixed;
      b.lower = now++;
      b.upper = UINT64_MAX;
      s.live[static_cast<size_t>(layer % 2)][static_cast<size_t>(e.tensor)] = out.size();
      s.mine.push_back(out.size());
      out.push_back(b);
    } else if (layer >= e.layer_back) {
      out[s.live[static_cast<size_t>((layer - e.layer_back) % 2)][static_cast<size_t>(e.tensor)]].upper = now++;
    }
    if (++s.pos == kLayers * kEvents) {
      for (size_t i : s.mine)
        if (out[i].upper == UINT64_MAX) out[i].upper = now++;
      s = fresh();
    }
  }
  for (Buffer& b : out)
    if (b.upper == UINT64_MAX) b.upper = now++;
  return out;
}

std::vector<Buffer> generate_forward(size_t target, uint64_t seed, bool overlap, uint64_t fixed_tokens = 0) {
  constexpr int kLayers = 61;
  std::mt19937_64 rng(seed);
  std::vector<Buffer> out;
  uint64_t now = 0;
  while (out.size() < target) {
    const uint64_t tokens = fixed_tokens != 0 ? fixed_tokens : 64 * (16 + rng() % 241);
    const int streams = overlap ? 2 : 1;
    const uint64_t mb_tokens[2] = {overlap ? tokens / 128 * 64 : tokens, overlap ? tokens - tokens / 128 * 64 : 0};
    // live[m][layer % 2][tensor]: buffer index of microbatch m's tensor, this and the previous layer.
    std::vector<std::array<std::array<size_t, kNumTensors>, 2>> live(static_cast<size_t>(streams));
    std::vector<size_t> pending;  // buffers still live at the end of the step
    for (int layer = 0; layer < kLayers; ++layer) {
      for (const LayerEvent& e : kLayer) {
        for (int m = 0; m < streams; ++m) {
          auto& mine = live[static_cast<size_t>(m)];
          if (e.alloc) {
            const TensorSpec& t = kTensors[e.tensor];
            const uint64_t T = mb_tokens[m], P = 8 * T + 384 * 63;
            Buffer b;
            b.id = out.size();
            b.size = t.per_token * T + t.per_row * P + t.fixed;
            b.lower = now++;
            b.upper = UINT64_MAX;
            mine[static_cast<size_t>(layer % 2)][static_cast<size_t>(e.tensor)] = out.size();
            out.push_back(b);
          } else if (layer >= e.layer_back) {
            Buffer& b = out[mine[static_cast<size_t>((layer - e.layer_back) % 2)][static_cast<size_t>(e.tensor)]];
            b.upper = now++;
          }
        }
      }
    }
    for (Buffer& b : out)
      if (b.upper == UINT64_MAX) b.upper = now++;
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
  // The seed case's shape: one 16,384-token forward of the executor's Kimi-K2.5 layer.
  if (!gen.empty() && wanted("kimi16k-model")) print_row(solve("kimi16k-model", generate_forward(1, seed, false, 16384), 256, gen_limit, seed));
  for (size_t n : gen)
    for (int kind = 0; kind < 3; ++kind) {
    static const char* kKinds[3] = {"forward-", "tbo-", "pipelined-"};
    const std::string name = kKinds[kind] + std::to_string(n / 1000) + "k";
    if (!wanted(name)) continue;
    const std::vector<Buffer> bs =
        kind == 2 ? generate_pipelined(n, seed + n + 2) : generate_forward(n, seed + n + static_cast<uint64_t>(kind), kind == 1, 0);
    if (!dump_dir.empty()) {  // the instance as a MiniMalloc CSV, for other solvers
      std::string text = "id,lower,upper,size\n";
      for (const Buffer& b : bs)
        text += std::to_string(b.id) + "," + std::to_string(b.lower) + "," + std::to_string(b.upper) + "," +
                std::to_string(b.size) + "\n";
      if (FILE* f = std::fopen((dump_dir + "/" + name + ".csv").c_str(), "w")) {
        std::fwrite(text.data(), 1, text.size(), f);
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
