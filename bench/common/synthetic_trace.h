// A synthetic trace shaped like the executor's prefill, for the benchmarks: several devices (TP
// ranks), 61 layers per forward pass, per-layer tensors allocated, used and freed in a sliding
// window, addresses recycled per size like a caching allocator, weights allocated up front.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/trace.h"

namespace moeprof::bench {

struct TensorSpec {
  const char* name;
  const char* scope;  // under "layer.N/"
  uint64_t bytes;
  int live_for;       // freed after this many later allocations in the layer (-1: at the next layer's end)
  Category category;
};

// Generates the records one by one: intern(std::string) -> StrId for names and scopes,
// emit(const TraceRecord&) for each record, `target_events` records in all (the last layer may
// be cut). State is per device and per live tensor only, so traces of any length stream out.
template <class Intern, class Emit>
void generate_trace(size_t target_events, int devices, Intern&& intern, Emit&& emit) {
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

  // Interned ids per (layer, tensor).
  std::vector<StrId> name_ids, scope_ids;
  for (int l = 0; l < kLayers; ++l) {
    for (const auto& s : layer) {
      name_ids.push_back(intern(std::string(s.name)));
      scope_ids.push_back(intern("layer." + std::to_string(l) + "/" + s.scope));
    }
  }
  const StrId w_name = intern(std::string("weights"));

  struct Dev {
    uint64_t bump = 0x7f0000000000ULL;
    std::map<uint64_t, std::vector<uint64_t>> free_by_size;
    std::vector<std::pair<uint64_t, int>> pending;  // (address, allocations left before free)
    uint64_t prev_out = 0;
  };
  std::vector<Dev> devs(static_cast<size_t>(devices));
  uint64_t ts = 1000, seq = 1;
  size_t emitted = 0;
  auto push = [&](EventKind k, uint16_t d, uint64_t addr, uint64_t bytes, auto&& fill) {
    if (emitted >= target_events) return;
    ts += 1 + (seq * 2654435761u) % 97;
    TraceRecord r;
    r.kind = k;
    r.timestamp_ns = ts;
    r.address = addr;
    r.bytes = bytes;
    r.seq = seq++;
    r.device = d;
    r.mem_kind = MemKind::kDevice;
    fill(r);
    emit(static_cast<const TraceRecord&>(r));
    ++emitted;
  };
  auto nothing = [](TraceRecord&) {};
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
  std::vector<std::map<uint64_t, uint64_t>> sizes(static_cast<size_t>(devices));
  auto release = [&](uint16_t d, uint64_t addr) {
    push(EventKind::kFree, d, addr, 0, nothing);
    devs[d].free_by_size[sizes[d][addr]].push_back(addr);
  };
  for (uint16_t d = 0; d < devices; ++d) {
    for (int l = 0; l < kLayers; ++l) {
      push(EventKind::kAlloc, d, get_addr(devs[d], 1ull << 30), 1ull << 30, [&](TraceRecord& r) {
        r.category = Category::kWeights;
        r.name_id = w_name;
        r.scope_id = scope_ids[static_cast<size_t>(l) * layer.size()];
      });
    }
  }
  while (emitted < target_events) {
    for (int l = 0; l < kLayers && emitted < target_events; ++l) {
      for (uint16_t d = 0; d < devices; ++d) {
        Dev& dv = devs[d];
        uint64_t out_addr = 0;
        for (size_t i = 0; i < layer.size(); ++i) {
          const TensorSpec& s = layer[i];
          const uint64_t a = get_addr(dv, s.bytes);
          sizes[d][a] = s.bytes;
          const size_t id = static_cast<size_t>(l) * layer.size() + i;
          push(EventKind::kAlloc, d, a, s.bytes, [&](TraceRecord& r) {
            r.category = s.category;
            r.name_id = name_ids[id];
            r.scope_id = scope_ids[id];
            r.dtype = DType::kBF16;
            r.stream = 7;
          });
          push(EventKind::kUse, d, a, 0, [](TraceRecord& r) { r.flags = kUseWrite; });
          if (i > 0 && !dv.pending.empty())
            push(EventKind::kUse, d, dv.pending.back().first, 0, [](TraceRecord& r) { r.flags = kUseRead; });
          // Sliding-window frees.
          for (auto& p : dv.pending) --p.second;
          for (size_t k = 0; k < dv.pending.size();) {
            if (dv.pending[k].second <= 0) {
              release(d, dv.pending[k].first);
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
        if (dv.prev_out != 0) release(d, dv.prev_out);
        dv.prev_out = out_addr;
      }
    }
  }
}

// The whole synthetic trace in memory.
inline Trace make_trace(size_t target_events, int devices) {
  Trace tr;
  tr.meta.name = "bench";
  tr.meta.mode = "baseline";
  tr.meta.tp_size = devices;
  tr.records.reserve(target_events);
  generate_trace(
      target_events, devices, [&](const std::string& s) { return tr.strings.intern(s); },
      [&](const TraceRecord& r) { tr.records.push_back(r); });
  return tr;
}

}  // namespace moeprof::bench
