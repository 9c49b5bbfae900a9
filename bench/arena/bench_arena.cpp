// bench_arena: the arena solver (planner/arena_solver.h) on
//   - MiniMalloc's "challenging" instances (a directory of MiniMalloc CSV files);
//   - generated training programs (arena_gen.h): GPT, MoE, U-Net and DenseNet training steps as
//     a framework's allocation log (-fw) or a compiler's tensor schedule (-cc), one component
//     each, long and short lifetimes mixed, hard for a time-ordered sweep;
//   - generated serving instances (serving_gen.h) from the executor's Kimi-K2.5 layer;
//   - the activation buffers of .mtrace files, and instances in .csv files, given on the command
//     line (traces: the device with the largest activation peak, 256-byte alignment, as `moeprof
//     plan --arena`).
// Per instance: buffers, LOAD, a time-ordered sweep (best fit in start order, as an allocator
// that sees the program in time order would do), greedy by size (largest first, the best of
// best fit and first fit with ties to the longer or the earlier start), the solver's arena and its gap over LOAD, and the time. Every plan is checked by
// validate_plan(); the row says "INVALID" if one fails.
//
//   bench_arena [--dir DIR] [--time-limit S] [--gen-time-limit S] [--programs NAME,...]
//               [--serving N,...] [--seed S] [--only NAME,...] [--dump-generated DIR]
//               [--history] [TRACE.mtrace | INSTANCE.csv ...]
// A program name is FAMILY-TIME-SIZE: gpt|moe|unet|densenet, fw|cc, a buffer count with an
// optional k (e.g. unet-cc-20k).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "arena_gen.h"
#include "core/trace_io.h"
#include "planner/analysis.h"
#include "planner/arena_csv.h"
#include "planner/arena_engine.h"
#include "planner/arena_solver.h"
#include "serving_gen.h"

using namespace moeprof;
using namespace moeprof::planner;
namespace fs = std::filesystem;

namespace {

const char* const kDefaultPrograms =
    "gpt-fw-20k,gpt-cc-20k,moe-fw-20k,moe-cc-20k,unet-fw-20k,unet-cc-20k,densenet-fw-20k,densenet-cc-20k,"
    "unet-cc-60k,densenet-cc-60k,densenet-fw-100k,unet-cc-100k";

struct Row {
  std::string name;
  uint64_t sweep = 0;  // best fit in start order: the plan of an allocator that sees time in order
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
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < bs.size(); ++i)
    if (bs[i].size > 0 && bs[i].lower < bs[i].upper) live.push_back(i);
  std::stable_sort(live.begin(), live.end(), [&](uint32_t a, uint32_t b) { return bs[a].lower < bs[b].lower; });
  detail::sweep_best_fit(detail::make_problem(bs, live, alignment, 0), &r.sweep);
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

double pct(uint64_t a, uint64_t load) { return load == 0 ? 0.0 : 100.0 * (static_cast<double>(a) - static_cast<double>(load)) / static_cast<double>(load); }

void print_header() {
  std::printf("| instance | buffers | LOAD | time-ordered sweep | greedy by size | arena | gap | lower bound | proven | first answer "
              "| seconds | algorithm | search nodes | LNS moves |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|\n");
}

void print_row(const Row& r, bool history) {
  if (!r.error.empty() && r.sol.buffers == 0) {
    std::printf("| %s | error: %s |\n", r.name.c_str(), r.error.c_str());
    std::fflush(stdout);
    return;
  }
  const ArenaSolution& s = r.sol;
  std::printf("| %s | %zu | %s | %+.2f%% | %s (%+.3f%%) | %s | %+.3f%% | %s | %s | %.1f ms | %.2f | %s%s | %s | %s |\n",
              r.name.c_str(), s.buffers, commas(s.load_bytes).c_str(), pct(r.sweep, s.load_bytes), commas(s.greedy_by_size_bytes).c_str(),
              pct(s.greedy_by_size_bytes, s.load_bytes), commas(s.arena_bytes).c_str(), s.gap_pct(),
              commas(s.lower_bound_bytes).c_str(), s.proven_optimal ? "yes" : "no", 1e3 * s.first_answer_seconds, s.seconds,
              s.algorithm.c_str(), r.valid ? "" : (", INVALID: " + r.error).c_str(), commas(s.search_nodes).c_str(),
              commas(s.lns_moves).c_str());
  if (history)
    for (const ArenaImprovement& i : s.improvements)
      std::printf("|   %.3f s | | | | | %s | %+.3f%% | | | | | %s | | |\n", i.seconds, commas(i.arena_bytes).c_str(),
                  pct(i.arena_bytes, s.load_bytes), i.algorithm.c_str());
  std::fflush(stdout);
}

std::vector<std::string> split(const std::string& v) {
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
}

// "unet-cc-20k" -> spec; false if the name does not parse.
bool parse_program(const std::string& name, uint64_t seed, bench::GenSpec* spec) {
  const auto parts = [&] {
    std::vector<std::string> p;
    size_t s = 0;
    for (size_t d; (d = name.find('-', s)) != std::string::npos; s = d + 1) p.push_back(name.substr(s, d - s));
    p.push_back(name.substr(s));
    return p;
  }();
  if (parts.size() != 3) return false;
  bool known = false;
  for (bench::Family f : {bench::Family::kGpt, bench::Family::kMoe, bench::Family::kUnet, bench::Family::kDenseNet})
    if (bench::family_name(f) == parts[0]) {
      spec->family = f;
      known = true;
    }
  if (!known || (parts[1] != "fw" && parts[1] != "cc")) return false;
  spec->time = parts[1] == "fw" ? bench::TimeModel::kFramework : bench::TimeModel::kCompiler;
  std::string size = parts[2];
  uint64_t mult = 1;
  if (!size.empty() && size.back() == 'k') {
    mult = 1000;
    size.pop_back();
  }
  if (size.empty() || size.find_first_not_of("0123456789") != std::string::npos) return false;
  spec->target_buffers = std::strtoull(size.c_str(), nullptr, 10) * mult;
  spec->seed = seed;
  return true;
}

// The instance as the benchmark solves it, so `moeprof arena FILE` plans the same one: with an
// alignment, sizes rounded up to it and the alignment as a column (as `plan --arena-out-csv`
// writes them; the solver rounds sizes to its global alignment, `arena` reads the column as an
// offset alignment only).
void dump_csv(const std::string& dir, const std::string& name, const std::vector<Buffer>& bs, uint64_t alignment) {
  if (dir.empty()) return;
  const std::string al = alignment > 1 ? "," + std::to_string(alignment) : "";
  std::string text = alignment > 1 ? "id,lower,upper,size,alignment\n" : "id,lower,upper,size\n";
  for (const Buffer& b : bs) {
    const uint64_t size = alignment > 1 ? (b.size + alignment - 1) / alignment * alignment : b.size;
    text += std::to_string(b.id) + "," + std::to_string(b.lower) + "," + std::to_string(b.upper) + "," + std::to_string(size) + al + "\n";
  }
  if (FILE* f = std::fopen((dir + "/" + name + ".csv").c_str(), "w")) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "../shared/data/arena/minimalloc-challenging";
  double limit = 60, gen_limit = 60;
  std::vector<size_t> serving = {10000, 100000};
  std::vector<std::string> inputs, only, programs = split(kDefaultPrograms);
  std::string dump_dir;
  uint64_t seed = 1;
  bool history = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_arena: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dir") dir = next();
    else if (a == "--time-limit") limit = std::atof(next().c_str());
    else if (a == "--gen-time-limit") gen_limit = std::atof(next().c_str());
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--only") only = split(next());
    else if (a == "--dump-generated") dump_dir = next();
    else if (a == "--programs") programs = split(next());
    else if (a == "--history") history = true;
    else if (a == "--serving") {
      serving.clear();
      for (const auto& v : split(next())) serving.push_back(std::strtoull(v.c_str(), nullptr, 10));
    } else if (a == "--help" || a == "-h") {
      std::printf("bench_arena [--dir DIR] [--time-limit S] [--gen-time-limit S] [--programs NAME,...] [--serving N,...] "
                  "[--seed S] [--only NAME,...] [--dump-generated DIR] [--history] [TRACE.mtrace | INSTANCE.csv ...]\n"
                  "programs: FAMILY-TIME-SIZE, FAMILY gpt|moe|unet|densenet, TIME fw|cc, e.g. unet-cc-20k (default: %s)\n",
                  kDefaultPrograms);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "bench_arena: unknown option %s\n", a.c_str());
      return 2;
    } else {
      inputs.push_back(a);
    }
  }
  auto wanted = [&](const std::string& name) { return only.empty() || std::find(only.begin(), only.end(), name) != only.end(); };

  std::printf("arena solver: challenging instances with --time-limit %g s, the others with %g s\n\n", limit, gen_limit);
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
      print_row(r, history);
      continue;
    }
    print_row(solve(name, csv->buffers, 1, limit, seed), history);
  }
  for (const std::string& name : programs) {
    bench::GenSpec spec;
    if (!parse_program(name, seed, &spec)) {
      std::fprintf(stderr, "bench_arena: bad program name %s (FAMILY-TIME-SIZE, e.g. unet-cc-20k)\n", name.c_str());
      return 2;
    }
    if (!wanted(name)) continue;
    const std::vector<Buffer> bs = bench::generate_program(spec);
    dump_csv(dump_dir, name, bs, 1);
    print_row(solve(name, bs, 1, gen_limit, seed), history);
  }
  // The seed case's shape: one 16,384-token forward of the executor's Kimi-K2.5 layer.
  if (!serving.empty() && wanted("kimi16k-model"))
    print_row(solve("kimi16k-model", bench::generate_forward(1, seed, false, 16384), 256, gen_limit, seed), history);
  for (size_t n : serving)
    for (int kind = 0; kind < 3; ++kind) {
      static const char* kKinds[3] = {"forward-", "tbo-", "pipelined-"};
      const std::string name = kKinds[kind] + std::to_string(n / 1000) + "k";
      if (!wanted(name)) continue;
      const std::vector<Buffer> bs = kind == 2 ? bench::generate_pipelined(n, seed + n + 2)
                                               : bench::generate_forward(n, seed + n + static_cast<uint64_t>(kind), kind == 1, 0);
      dump_csv(dump_dir, name, bs, 256);
      print_row(solve(name, bs, 256, gen_limit, seed), history);
    }
  for (const auto& path : inputs) {
    // The file and its folder: a run's traces share their names (baseline.mtrace).
    const fs::path fp(path);
    const std::string name = (fp.parent_path().filename() / fp.filename()).string();
    if (!wanted(name)) continue;
    if (fs::path(path).extension() == ".csv") {
      auto csv = read_arena_csv(path);
      Row r;
      r.name = name;
      if (!csv) {
        r.error = csv.status().message();
        print_row(r, history);
      } else {
        print_row(solve(name, csv->buffers, 1, gen_limit, seed), history);
      }
      continue;
    }
    auto t = read_trace(path);
    if (!t) {
      Row r;
      r.name = name;
      r.error = t.status().message();
      print_row(r, history);
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
    print_row(solve(name, buffers_from_lifetimes(run, dev->device, true), 256, gen_limit, seed), history);
  }
  return 0;
}
