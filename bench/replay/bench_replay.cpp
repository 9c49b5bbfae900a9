// bench_replay: times planner::analyze() on a synthetic trace built in memory (default 10M
// events): several devices (TP ranks), many layers per forward pass, per-layer tensors allocated,
// used and freed in a sliding window, addresses recycled per size like a caching allocator.
// Optionally times the .mtrace write + read round trip.
//
//   bench_replay [--events N] [--devices D] [--repeat R] [--roundtrip PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "core/trace.h"
#include "core/trace_io.h"
#include "planner/analysis.h"

using namespace moeprof;

namespace {

struct TensorSpec {
  const char* name;
  const char* scope;  // under "layer.N/"
  uint64_t bytes;
  int live_for;       // freed after this many later allocations in the layer (-1: at the next layer's end)
  Category category;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Trace make_trace(size_t target_events, int devices) {
  const uint64_t T = 4096, H = 7168;
  const std::vector<TensorSpec> layer = {
      {"post_norm", "attn", T * H * 2, 3, Category::kActivation},
      {"qkv_a", "attn", T * 2112 * 2, 3, Category::kActivation},
      {"q", "attn/mla", T * 16 * 192 * 2, 2, Category::kActivation},
      {"kv", "attn/mla", T * 16 * 256 * 2, 2, Category::kActivation},
      {"attn_out", "attn/mla", T * 16 * 128 * 2, 1, Category::kActivation},
      {"o_proj", "attn", T * H * 2, 2, Category::kCommunication},
      {"moe_in", "moe", T * H * 2, 6, Category::kActivation},
      {"router_logits", "moe/router", T * 384 * 4, 1, Category::kActivation},
      {"topk", "moe/router", T * 8 * 8, 4, Category::kActivation},
      {"hs_fp4", "moe/experts", T * H / 2, 2, Category::kActivation},
      {"gemm1_out", "moe/experts", T * 8 * 1024, 1, Category::kWorkspace},
      {"gemm2_out", "moe/experts", T * 8 * H * 2, 1, Category::kWorkspace},
      {"moe_out", "moe", T * H * 2, -1, Category::kCommunication},
  };
  const int kLayers = 61;

  Trace tr;
  tr.meta.name = "bench";
  tr.meta.mode = "baseline";
  tr.meta.tp_size = devices;
  tr.records.reserve(target_events + 64);
  // Interned ids per (layer, tensor).
  std::vector<StrId> name_ids, scope_ids;
  for (int l = 0; l < kLayers; ++l) {
    for (const auto& s : layer) {
      name_ids.push_back(tr.strings.intern(s.name));
      scope_ids.push_back(tr.strings.intern("layer." + std::to_string(l) + "/" + s.scope));
    }
  }
  const StrId w_name = tr.strings.intern("weights");

  struct Dev {
    uint64_t bump = 0x7f0000000000ULL;
    std::map<uint64_t, std::vector<uint64_t>> free_by_size;
    std::vector<std::pair<uint64_t, int>> pending;  // (address, allocations left before free)
    uint64_t prev_out = 0;
  };
  std::vector<Dev> devs(static_cast<size_t>(devices));
  uint64_t ts = 1000, seq = 1;
  auto push = [&](EventKind k, uint16_t d, uint64_t addr, uint64_t bytes) -> TraceRecord& {
    ts += 1 + (seq * 2654435761u) % 97;
    TraceRecord& r = tr.records.emplace_back();
    r.kind = k;
    r.timestamp_ns = ts;
    r.address = addr;
    r.bytes = bytes;
    r.seq = seq++;
    r.device = d;
    r.mem_kind = MemKind::kDevice;
    return r;
  };
  auto get_addr = [&](Dev& dv, uint64_t bytes) {
    auto& fl = dv.free_by_size[bytes];
    if (!fl.empty()) {
      uint64_t a = fl.back();
      fl.pop_back();
      return a;
    }
    uint64_t a = dv.bump;
    dv.bump += (bytes + 511) / 512 * 512;
    return a;
  };
  auto release = [&](uint16_t d, uint64_t addr, uint64_t bytes) {
    push(EventKind::kFree, d, addr, 0);
    devs[d].free_by_size[bytes].push_back(addr);
  };
  std::vector<std::map<uint64_t, uint64_t>> sizes(static_cast<size_t>(devices));
  for (uint16_t d = 0; d < devices; ++d) {
    for (int l = 0; l < kLayers; ++l) {
      TraceRecord& r = push(EventKind::kAlloc, d, get_addr(devs[d], 1ull << 30), 1ull << 30);
      r.category = Category::kWeights;
      r.name_id = w_name;
      r.scope_id = scope_ids[static_cast<size_t>(l) * layer.size()];
    }
  }
  while (tr.records.size() < target_events) {
    for (int l = 0; l < kLayers && tr.records.size() < target_events; ++l) {
      for (uint16_t d = 0; d < devices; ++d) {
        Dev& dv = devs[d];
        uint64_t out_addr = 0;
        for (size_t i = 0; i < layer.size(); ++i) {
          const TensorSpec& s = layer[i];
          const uint64_t a = get_addr(dv, s.bytes);
          sizes[d][a] = s.bytes;
          TraceRecord& r = push(EventKind::kAlloc, d, a, s.bytes);
          r.category = s.category;
          r.name_id = name_ids[static_cast<size_t>(l) * layer.size() + i];
          r.scope_id = scope_ids[static_cast<size_t>(l) * layer.size() + i];
          r.dtype = DType::kBF16;
          r.stream = 7;
          push(EventKind::kUse, d, a, 0).flags = kUseWrite;
          if (i > 0 && !dv.pending.empty()) push(EventKind::kUse, d, dv.pending.back().first, 0).flags = kUseRead;
          // Sliding-window frees.
          for (auto& p : dv.pending) --p.second;
          for (size_t k = 0; k < dv.pending.size();) {
            if (dv.pending[k].second <= 0) {
              release(d, dv.pending[k].first, sizes[d][dv.pending[k].first]);
              dv.pending[k] = dv.pending.back();
              dv.pending.pop_back();
            } else {
              ++k;
            }
          }
          if (s.live_for >= 0) {
            dv.pending.emplace_back(a, s.live_for);
          } else {
            out_addr = a;
          }
        }
        // The previous layer's output dies at the end of this layer.
        if (dv.prev_out != 0) release(d, dv.prev_out, sizes[d][dv.prev_out]);
        dv.prev_out = out_addr;
      }
    }
  }
  tr.records.resize(target_events);
  return tr;
}

}  // namespace

int main(int argc, char** argv) {
  size_t events = 10'000'000;
  int devices = 4, repeat = 3;
  std::string roundtrip;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_replay: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--events") {
      events = std::strtoull(next(), nullptr, 10);
    } else if (a == "--devices") {
      devices = std::atoi(next());
    } else if (a == "--repeat") {
      repeat = std::max(1, std::atoi(next()));
    } else if (a == "--roundtrip") {
      roundtrip = next();
    } else {
      std::fprintf(stderr, "usage: bench_replay [--events N] [--devices D] [--repeat R] [--roundtrip PATH]\n");
      return 2;
    }
  }
  if (devices < 1 || devices > 64 || events == 0) {
    std::fprintf(stderr, "bench_replay: --devices must be 1..64 and --events > 0\n");
    return 2;
  }

  auto t0 = std::chrono::steady_clock::now();
  Trace tr = make_trace(events, devices);
  std::printf("generated %zu events (%d devices) in %.2f s\n", tr.records.size(), devices, seconds_since(t0));

  auto bench = [&](const char* label, const Trace& t, const planner::AnalyzeOptions& opt) {
    // Wall time and process CPU time (the latter is less disturbed by other jobs on a shared host).
    double best = 1e30, best_cpu = 1e30;
    planner::RunAnalysis r;
    for (int k = 0; k < repeat; ++k) {
      r = planner::RunAnalysis();
      auto s = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      r = planner::analyze(t, opt);
      best_cpu = std::min(best_cpu, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
      best = std::min(best, seconds_since(s));
    }
    std::printf("%-32s best of %d: %.3f s wall (%.3f s cpu)  %.1f M events/s  (peak act %.1f MB, allocs/dev %llu, handoffs %llu, reordered %d)\n",
                label, repeat, best, best_cpu, static_cast<double>(t.records.size()) / best / 1e6,
                static_cast<double>(r.peak_activation_bytes) / 1e6, static_cast<unsigned long long>(r.allocations),
                static_cast<unsigned long long>(r.devices.empty() ? 0 : r.devices[0].handoff_count), r.reordered ? 1 : 0);
  };
  planner::AnalyzeOptions def;
  bench("analyze (default options)", tr, def);
  planner::AnalyzeOptions lean;
  lean.keep_lifetimes = false;
  bench("analyze (keep_lifetimes=false)", tr, lean);
  {
    // Unordered input: swap every 7th record with its successor, forcing the sort.
    Trace un = tr;
    for (size_t i = 0; i + 1 < un.records.size(); i += 7) std::swap(un.records[i], un.records[i + 1]);
    bench("analyze (unordered input)", un, def);
  }

  if (!roundtrip.empty()) {
    auto s = std::chrono::steady_clock::now();
    Status st = write_trace(roundtrip, tr);
    const double w = seconds_since(s);
    if (!st.is_ok()) {
      std::fprintf(stderr, "bench_replay: write failed: %s\n", st.message().c_str());
      return 3;
    }
    s = std::chrono::steady_clock::now();
    Result<Trace> back = read_trace(roundtrip);
    const double rd = seconds_since(s);
    if (!back.is_ok()) {
      std::fprintf(stderr, "bench_replay: read failed: %s\n", back.status().message().c_str());
      return 3;
    }
    const double mb = static_cast<double>(tr.records.size()) * sizeof(TraceRecord) / 1e6;
    std::printf("mtrace write: %.3f s (%.1f M events/s, %.0f MB/s); read: %.3f s (%.1f M events/s, %.0f MB/s); records back %zu\n",
                w, static_cast<double>(tr.records.size()) / w / 1e6, mb / w, rd,
                static_cast<double>(back->records.size()) / rd / 1e6, mb / rd, back->records.size());
    std::remove(roundtrip.c_str());
  }
  return 0;
}
