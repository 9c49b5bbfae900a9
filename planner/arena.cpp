// Greedy best-fit arena planner (see arena.h). Placing one buffer scans the already-placed
// buffers for time overlap: O(n^2) in all, fine for the thousands of activation buffers of a
// forward pass; an interval tree would make it O(n log n) if traces ever need it.
#include "planner/arena.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>

namespace moeprof::planner {

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return a <= 1 ? v : (v + a - 1) / a * a; }

bool occupies(const Buffer& b) { return b.size > 0 && b.lower < b.upper; }

bool time_overlap(const Buffer& a, const Buffer& b) { return a.lower < b.upper && b.lower < a.upper; }

std::vector<size_t> placement_order(const std::vector<Buffer>& bs, ArenaOrder order) {
  std::vector<size_t> idx(bs.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  auto dur = [&](size_t i) { return bs[i].upper - bs[i].lower; };
  auto area = [&](size_t i) { return static_cast<unsigned __int128>(bs[i].size) * dur(i); };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const Buffer& x = bs[a];
    const Buffer& y = bs[b];
    switch (order) {
      case ArenaOrder::kSizeDesc:
        if (x.size != y.size) return x.size > y.size;
        if (dur(a) != dur(b)) return dur(a) > dur(b);
        return x.lower < y.lower;
      case ArenaOrder::kDurationDesc:
        if (dur(a) != dur(b)) return dur(a) > dur(b);
        if (x.size != y.size) return x.size > y.size;
        return x.lower < y.lower;
      case ArenaOrder::kAreaDesc:
        if (area(a) != area(b)) return area(a) > area(b);
        if (x.size != y.size) return x.size > y.size;
        return x.lower < y.lower;
      case ArenaOrder::kLowerAsc:
        if (x.lower != y.lower) return x.lower < y.lower;
        return x.size > y.size;
    }
    return false;
  });
  return idx;
}

}  // namespace

std::string_view arena_order_name(ArenaOrder o) {
  switch (o) {
    case ArenaOrder::kSizeDesc: return "size_desc";
    case ArenaOrder::kDurationDesc: return "duration_desc";
    case ArenaOrder::kAreaDesc: return "area_desc";
    case ArenaOrder::kLowerAsc: return "lower_asc";
  }
  return "invalid";
}

uint64_t arena_load(const std::vector<Buffer>& buffers, uint64_t alignment) {
  // (time, delta sign, size): at equal times ends (-) come before starts (+), as [lower, upper).
  std::vector<std::tuple<uint64_t, int, uint64_t>> ev;
  ev.reserve(buffers.size() * 2);
  for (const Buffer& b : buffers) {
    if (!occupies(b)) continue;
    const uint64_t s = align_up(b.size, alignment);
    ev.emplace_back(b.lower, 1, s);
    ev.emplace_back(b.upper, 0, s);
  }
  std::sort(ev.begin(), ev.end());
  uint64_t live = 0, load = 0;
  for (const auto& [t, start, s] : ev) {
    if (start) {
      live += s;
      load = std::max(load, live);
    } else {
      live -= s;
    }
  }
  return load;
}

ArenaPlan plan_arena(const std::vector<Buffer>& buffers, ArenaOrder order, const ArenaOptions& opt) {
  const uint64_t al = std::max<uint64_t>(opt.alignment, 1);
  ArenaPlan plan;
  plan.order = order;
  plan.offsets.assign(buffers.size(), 0);
  plan.load = arena_load(buffers, al);

  std::vector<size_t> placed;
  placed.reserve(buffers.size());
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // [offset, end) of time-overlapping placed buffers
  for (size_t i : placement_order(buffers, order)) {
    const Buffer& b = buffers[i];
    if (!occupies(b)) continue;
    const uint64_t size = align_up(b.size, al);
    busy.clear();
    for (size_t j : placed) {
      if (time_overlap(b, buffers[j])) busy.emplace_back(plan.offsets[j], plan.offsets[j] + align_up(buffers[j].size, al));
    }
    std::sort(busy.begin(), busy.end());
    uint64_t cur = 0;
    uint64_t best_off = 0, best_gap = UINT64_MAX;
    bool found = false;
    for (const auto& [off, end] : busy) {
      const uint64_t start = align_up(cur, al);
      if (off > start && off - start >= size && off - start < best_gap) {
        best_gap = off - start;
        best_off = start;
        found = true;
      }
      cur = std::max(cur, end);
    }
    plan.offsets[i] = found ? best_off : align_up(cur, al);
    plan.arena_size = std::max(plan.arena_size, plan.offsets[i] + size);
    placed.push_back(i);
  }
  plan.fragmentation_bytes = plan.arena_size - plan.load;
  plan.gap_pct = plan.load == 0 ? 0.0 : 100.0 * static_cast<double>(plan.fragmentation_bytes) / static_cast<double>(plan.load);
  return plan;
}

ArenaPlan plan_arena_best(const std::vector<Buffer>& buffers, const ArenaOptions& opt) {
  ArenaPlan best;
  for (int o = 0; o < kNumArenaOrders; ++o) {
    ArenaPlan p = plan_arena(buffers, static_cast<ArenaOrder>(o), opt);
    if (o == 0 || p.arena_size < best.arena_size) best = std::move(p);
    if (best.arena_size == best.load) break;  // cannot do better than LOAD
  }
  return best;
}

Status validate_plan(const std::vector<Buffer>& buffers, const ArenaPlan& plan, const ArenaOptions& opt) {
  const uint64_t al = std::max<uint64_t>(opt.alignment, 1);
  if (plan.offsets.size() != buffers.size()) {
    return Status::bad_input("arena plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                             std::to_string(buffers.size()) + " buffers");
  }
  std::vector<size_t> idx;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!occupies(buffers[i])) continue;
    const uint64_t off = plan.offsets[i];
    if (off % al != 0) return Status::bad_input("buffer " + std::to_string(i) + " offset " + std::to_string(off) + " is not aligned");
    if (off + align_up(buffers[i].size, al) > plan.arena_size) {
      return Status::bad_input("buffer " + std::to_string(i) + " ends past the arena size " + std::to_string(plan.arena_size));
    }
    idx.push_back(i);
  }
  // Sweep by lower; check each buffer against the still-live earlier ones.
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return buffers[a].lower < buffers[b].lower; });
  std::vector<size_t> active;
  for (size_t i : idx) {
    const Buffer& b = buffers[i];
    active.erase(std::remove_if(active.begin(), active.end(), [&](size_t j) { return buffers[j].upper <= b.lower; }),
                 active.end());
    const uint64_t lo = plan.offsets[i], hi = lo + align_up(b.size, al);
    for (size_t j : active) {
      const uint64_t lo2 = plan.offsets[j], hi2 = lo2 + align_up(buffers[j].size, al);
      if (lo < hi2 && lo2 < hi) {
        return Status::bad_input("buffers " + std::to_string(j) + " and " + std::to_string(i) +
                                 " are live together and overlap in [" + std::to_string(std::max(lo, lo2)) + ", " +
                                 std::to_string(std::min(hi, hi2)) + ")");
      }
    }
    active.push_back(i);
  }
  return Status::ok();
}

std::vector<Buffer> buffers_from_lifetimes(const RunAnalysis& run, uint16_t device, bool activation_only) {
  std::vector<Buffer> out;
  for (size_t i = 0; i < run.lifetimes.size(); ++i) {
    const Lifetime& l = run.lifetimes[i];
    if (l.device != device || l.bytes == 0) continue;
    if (activation_only && !counts_as_activation(l.category)) continue;
    const uint64_t upper = l.free_index == UINT32_MAX ? std::max<uint64_t>(run.replayed_events, l.alloc_index + 1)
                                                       : l.free_index;
    if (upper <= l.alloc_index) continue;
    out.push_back(Buffer{i, l.bytes, l.alloc_index, upper});
  }
  return out;
}

}  // namespace moeprof::planner
