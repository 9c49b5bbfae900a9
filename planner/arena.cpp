// Greedy best-fit arena planner (see arena.h). Placing one buffer scans the already-placed
// buffers for time overlap: O(n^2) in all, fine for the thousands of activation buffers of a
// forward pass; an interval tree would make it O(n log n) if traces ever need it.
#include "planner/arena.h"

#include "core/checked.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>

namespace moeprof::planner {

namespace {

// Saturates instead of wrapping: a size that cannot be rounded up reads as UINT64_MAX, which every
// sum check then refuses (solve_arena: sizes must sum to less than 2^63).
uint64_t align_up(uint64_t v, uint64_t a) { return checked_align_up(v, a).value_or(UINT64_MAX); }

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

uint64_t offset_alignment(const Buffer& b, uint64_t global_alignment) {
  const uint64_t g = std::max<uint64_t>(global_alignment, 1), a = std::max<uint64_t>(b.alignment, 1);
  const uint64_t d = std::gcd(g, a);
  const unsigned __int128 l = static_cast<unsigned __int128>(g / d) * a;
  return l > UINT64_MAX ? 0 : static_cast<uint64_t>(l);
}

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
      live = checked_add(live, s).value_or(UINT64_MAX);  // saturates: solve_arena refuses such inputs
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
    const uint64_t oal = std::max<uint64_t>(offset_alignment(b, al), 1);
    busy.clear();
    for (size_t j : placed) {
      if (time_overlap(b, buffers[j])) busy.emplace_back(plan.offsets[j], plan.offsets[j] + align_up(buffers[j].size, al));
    }
    std::sort(busy.begin(), busy.end());
    uint64_t cur = 0;
    uint64_t best_off = 0, best_gap = UINT64_MAX;
    bool found = false;
    for (const auto& [off, end] : busy) {
      const uint64_t start = align_up(cur, oal);
      if (off > start && off - start >= size && off - start < best_gap) {
        best_gap = off - start;
        best_off = start;
        found = true;
      }
      cur = std::max(cur, end);
    }
    plan.offsets[i] = found ? best_off : align_up(cur, oal);
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
    const uint64_t oal = offset_alignment(buffers[i], al);
    if (oal == 0 || off % oal != 0) {
      return Status::bad_input("buffer " + std::to_string(i) + " offset " + std::to_string(off) + " is not a multiple of " +
                               std::to_string(oal));
    }
    if (off > UINT64_MAX - align_up(buffers[i].size, al)) {
      return Status::bad_input("buffer " + std::to_string(i) + " offset " + std::to_string(off) + " overflows");
    }
    if (off + align_up(buffers[i].size, al) > plan.arena_size) {
      return Status::bad_input("buffer " + std::to_string(i) + " ends past the arena size " + std::to_string(plan.arena_size));
    }
    idx.push_back(i);
  }
  if (opt.capacity != 0 && plan.arena_size > opt.capacity) {
    return Status::bad_input("arena size " + std::to_string(plan.arena_size) + " exceeds the capacity " +
                             std::to_string(opt.capacity));
  }
  // Sweep over time. The address intervals of the buffers live at one instant are pairwise
  // disjoint (checked as each one arrives), so a new buffer can only collide with its neighbours
  // in address order: O(n log n). At equal times, buffers that end leave before new ones arrive.
  std::vector<std::pair<uint64_t, size_t>> ev;  // (time, 2*i + arriving)
  ev.reserve(2 * idx.size());
  for (size_t i : idx) {
    ev.emplace_back(buffers[i].lower, 2 * i + 1);
    ev.emplace_back(buffers[i].upper, 2 * i);
  }
  std::sort(ev.begin(), ev.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    if ((a.second & 1) != (b.second & 1)) return (a.second & 1) < (b.second & 1);
    return a.second < b.second;
  });
  std::map<uint64_t, size_t> live;  // offset -> buffer
  auto end_of = [&](size_t i) { return plan.offsets[i] + align_up(buffers[i].size, al); };
  auto conflict = [&](size_t j, size_t i) {
    const uint64_t lo = std::max(plan.offsets[i], plan.offsets[j]), hi = std::min(end_of(i), end_of(j));
    return Status::bad_input("buffers " + std::to_string(std::min(i, j)) + " and " + std::to_string(std::max(i, j)) +
                             " are live together and overlap in [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  };
  for (const auto& [t, code] : ev) {
    const size_t i = code / 2;
    if ((code & 1) == 0) {
      live.erase(plan.offsets[i]);
      continue;
    }
    auto next = live.lower_bound(plan.offsets[i]);
    if (next != live.end() && next->first < end_of(i)) return conflict(next->second, i);
    if (next != live.begin()) {
      auto prev = std::prev(next);
      if (end_of(prev->second) > plan.offsets[i]) return conflict(prev->second, i);
    }
    live.emplace(plan.offsets[i], i);
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
