// Greedy placement of the arena solver at any size (arena_engine.h): the time index that finds
// the buffers overlapping a lifetime without the pair list, the placement orders and the
// best-fit / first-fit rule.
#include <algorithm>
#include <bit>
#include <numeric>

#include "planner/arena_engine.h"

namespace moeprof::planner::detail {

TimeIndex::TimeIndex(const Problem& p, bool all) : lo_(p.lo.data()), hi_(p.hi.data()), sections_(p.sections) {
  while (leaves_ < sections_) leaves_ <<= 1;
  const size_t n = p.n(), nodes = 2 * static_cast<size_t>(leaves_);
  cover_off_.assign(nodes + 1, 0);
  start_off_.assign(nodes + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    cover(p.lo[i], p.hi[i], [&](uint32_t node) { ++cover_off_[node + 1]; });
    for (uint32_t node = leaves_ + p.lo[i]; node >= 1; node >>= 1) ++start_off_[node + 1];
  }
  for (size_t k = 1; k <= nodes; ++k) {
    cover_off_[k] += cover_off_[k - 1];
    start_off_[k] += start_off_[k - 1];
  }
  cover_items_.resize(cover_off_.back());
  start_items_.resize(start_off_.back());
  cover_fill_.assign(nodes, 0);
  start_fill_.assign(nodes, 0);
  added_.assign(n, 0);
  if (all)
    for (uint32_t i = 0; i < n; ++i) add(i);
}

void TimeIndex::add(uint32_t i) {
  added_[i] = 1;
  cover(lo_[i], hi_[i], [&](uint32_t node) { cover_items_[cover_off_[node] + cover_fill_[node]++] = i; });
  for (uint32_t node = leaves_ + lo_[i]; node >= 1; node >>= 1) start_items_[start_off_[node] + start_fill_[node]++] = i;
}

std::string_view key_name(Key k) {
  switch (k) {
    case Key::kSize: return "size_desc";
    case Key::kDuration: return "duration_desc";
    case Key::kArea: return "area_desc";
    case Key::kLower: return "lower_asc";
    case Key::kPressure: return "pressure_desc";
    case Key::kConflict: return "conflict_desc";
    case Key::kSizeStart: return "size_desc_by_start";
  }
  return "invalid";
}

std::vector<uint32_t> placement_order(const Problem& p, Key key) {
  const size_t n = p.n();
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  auto dur = [&](uint32_t i) { return p.thi[i] - p.tlo[i]; };
  auto area = [&](uint32_t i) { return static_cast<unsigned __int128>(p.size[i]) * dur(i); };
  auto size_then_lower = [&](uint32_t a, uint32_t b) {
    if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
    return p.tlo[a] < p.tlo[b];
  };
  std::vector<uint64_t> w;  // the key of kPressure / kConflict
  if (key == Key::kPressure || key == Key::kConflict) {
    w.assign(n, 0);
    const uint32_t S = p.sections;
    std::vector<uint64_t> starts(S + 1, 0), ends(S + 1, 0);
    for (size_t i = 0; i < n; ++i) {
      starts[p.lo[i]] += p.size[i];
      ends[p.hi[i]] += p.size[i];
    }
    if (key == Key::kConflict) {
      // Bytes of the buffers j with lo_j < hi_i, minus those with hi_j <= lo_i, minus i itself.
      std::vector<uint64_t> started(S + 1, 0), ended(S + 1, 0);
      for (uint32_t s = 0; s < S; ++s) started[s + 1] = started[s] + starts[s];
      for (uint32_t s = 0; s < S; ++s) ended[s + 1] = ended[s] + ends[s + 1];
      for (size_t i = 0; i < n; ++i) w[i] = started[p.hi[i]] - (p.lo[i] == 0 ? 0 : ended[p.lo[i]]) - p.size[i];
    } else {
      // Section loads, then a range maximum over each lifetime (an iterative segment tree).
      uint32_t leaves = 1;
      while (leaves < S) leaves <<= 1;
      std::vector<uint64_t> tree(2 * static_cast<size_t>(leaves), 0);
      uint64_t cur = 0;
      for (uint32_t s = 0; s < S; ++s) tree[leaves + s] = cur = cur + starts[s] - ends[s];
      for (uint32_t k = leaves; k-- > 1;) tree[k] = std::max(tree[2 * k], tree[2 * k + 1]);
      for (size_t i = 0; i < n; ++i) {
        uint64_t m = 0;
        for (uint32_t l = p.lo[i] + leaves, r = p.hi[i] + leaves; l < r; l >>= 1, r >>= 1) {
          if (l & 1) m = std::max(m, tree[l++]);
          if (r & 1) m = std::max(m, tree[--r]);
        }
        w[i] = m;
      }
    }
  }
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    switch (key) {
      case Key::kSize:
        if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
        if (dur(a) != dur(b)) return dur(a) > dur(b);
        return p.tlo[a] < p.tlo[b];
      case Key::kSizeStart:
        if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
        if (p.tlo[a] != p.tlo[b]) return p.tlo[a] < p.tlo[b];
        return dur(a) > dur(b);
      case Key::kDuration:
        if (dur(a) != dur(b)) return dur(a) > dur(b);
        if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
        return p.tlo[a] < p.tlo[b];
      case Key::kArea:
        if (area(a) != area(b)) return area(a) > area(b);
        return size_then_lower(a, b);
      case Key::kLower:
        if (p.tlo[a] != p.tlo[b]) return p.tlo[a] < p.tlo[b];
        return p.size[a] > p.size[b];
      case Key::kPressure:
      case Key::kConflict:
        if (w[a] != w[b]) return w[a] > w[b];
        return size_then_lower(a, b);
    }
    return false;
  });
  return idx;
}

namespace {

// A placed neighbour's address interval.
struct Busy {
  uint64_t start, end;
};

// Sorts intervals by start: a bucket sort on the starts' range (the starts of the buffers that
// overlap one lifetime are spread over the arena), each bucket finished by insertion sort, or by
// std::sort when it is large. About 3x faster than std::sort on the neighbour lists of 1000+.
void sort_by_start(std::vector<Busy>* v, std::vector<Busy>* tmp, std::vector<uint32_t>* count) {
  auto less = [](const Busy& x, const Busy& y) { return x.start < y.start; };
  const size_t k = v->size();
  if (k < 64) {
    std::sort(v->begin(), v->end(), less);
    return;
  }
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& x : *v) {
    lo = std::min(lo, x.start);
    hi = std::max(hi, x.start);
  }
  const size_t buckets = std::bit_ceil(k / 4);
  unsigned shift = 0;
  while (((hi - lo) >> shift) >= buckets) ++shift;
  count->assign(buckets + 1, 0);
  for (const auto& x : *v) ++(*count)[((x.start - lo) >> shift) + 1];
  for (size_t b = 1; b <= buckets; ++b) (*count)[b] += (*count)[b - 1];
  tmp->resize(k);
  for (const auto& x : *v) (*tmp)[(*count)[(x.start - lo) >> shift]++] = x;
  // (*count)[b] is now the end of bucket b.
  size_t begin = 0;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t end = (*count)[b];
    if (end - begin > 24) {
      std::sort(tmp->begin() + static_cast<std::ptrdiff_t>(begin), tmp->begin() + static_cast<std::ptrdiff_t>(end), less);
    } else {
      for (size_t i = begin + 1; i < end; ++i) {
        const Busy x = (*tmp)[i];
        size_t j = i;
        for (; j > begin && (*tmp)[j - 1].start > x.start; --j) (*tmp)[j] = (*tmp)[j - 1];
        (*tmp)[j] = x;
      }
    }
    begin = end;
  }
  v->swap(*tmp);
}

}  // namespace

uint64_t place_greedy(const Problem& p, TimeIndex* idx, const std::vector<uint32_t>& order, Fit fit,
                      std::vector<uint64_t>* off, std::vector<char>* placed, uint64_t cap) {
  std::vector<Busy> busy, tmp;
  std::vector<uint32_t> count;
  std::vector<uint64_t>& o = *off;
  std::vector<char>& pl = *placed;
  uint64_t top = 0;
  for (uint32_t i : order) {
    busy.clear();
    idx->for_each_overlap(i, [&](uint32_t j) {
      if (pl[j]) busy.push_back({o[j], o[j] + p.size[j]});
    });
    sort_by_start(&busy, &tmp, &count);
    const uint64_t sz = p.size[i], al = p.align[i];
    // Gaps between the busy intervals, then the open space above them: kBest keeps the smallest
    // gap that fits, kFirst the lowest; positions above cap come last (the lowest of them).
    uint64_t best_off = UINT64_MAX, best_gap = UINT64_MAX, lowest = UINT64_MAX;
    auto consider = [&](uint64_t at, uint64_t gap) {
      if (lowest == UINT64_MAX) lowest = at;
      if (at + sz > cap || (best_off != UINT64_MAX && (fit == Fit::kFirst || gap >= best_gap))) return;
      best_off = at;
      best_gap = gap;
    };
    uint64_t cur = 0;
    for (const Busy& x : busy) {
      const uint64_t start = align_up(cur, al);
      if (x.start > start && x.start - start >= sz) consider(start, x.start - start);
      cur = std::max(cur, x.end);
    }
    consider(align_up(cur, al), UINT64_MAX);
    o[i] = best_off != UINT64_MAX ? best_off : lowest;
    pl[i] = 1;
    if (!idx->has(i)) idx->add(i);
    top = std::max(top, o[i] + sz);
  }
  return top;
}

std::vector<uint64_t> greedy_best_fit(const Problem& p, ArenaOrder order, uint64_t* arena) {
  TimeIndex idx(p, false);
  std::vector<uint64_t> off(p.n(), 0);
  std::vector<char> placed(p.n(), 0);
  *arena = place_greedy(p, &idx, placement_order(p, static_cast<Key>(order)), Fit::kBest, &off, &placed);
  return off;
}

}  // namespace moeprof::planner::detail
