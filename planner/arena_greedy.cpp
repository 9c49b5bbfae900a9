// Components in compressed time and the greedy placements of the arena solver (arena_engine.h).
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "planner/arena_engine.h"

namespace moeprof::planner::detail {

namespace {

// Calls on_arrive(i, active) for every buffer in section order (within a section: the members'
// order), after the buffers that ended at or before its lower left `active`.
template <typename F>
void sweep(const Problem& p, F&& on_arrive) {
  const uint32_t S = p.sections;
  std::vector<uint32_t> start_off(S + 2, 0), end_off(S + 2, 0);
  for (size_t i = 0; i < p.n(); ++i) {
    ++start_off[p.lo[i] + 1];
    ++end_off[p.hi[i] + 1];
  }
  for (uint32_t s = 0; s <= S; ++s) {
    start_off[s + 1] += start_off[s];
    end_off[s + 1] += end_off[s];
  }
  std::vector<uint32_t> starts(p.n()), ends(p.n());
  {
    std::vector<uint32_t> fs(start_off.begin(), start_off.end() - 1), fe(end_off.begin(), end_off.end() - 1);
    for (uint32_t i = 0; i < p.n(); ++i) {
      starts[fs[p.lo[i]]++] = i;
      ends[fe[p.hi[i]]++] = i;
    }
  }
  std::vector<uint32_t> active, pos(p.n(), 0);
  for (uint32_t s = 0; s <= S; ++s) {
    for (uint32_t k = end_off[s]; k < end_off[s + 1]; ++k) {
      const uint32_t i = ends[k];
      const uint32_t at = pos[i];
      active[at] = active.back();
      pos[active[at]] = at;
      active.pop_back();
    }
    for (uint32_t k = start_off[s]; k < start_off[s + 1]; ++k) {
      const uint32_t i = starts[k];
      on_arrive(i, active);
      pos[i] = static_cast<uint32_t>(active.size());
      active.push_back(i);
    }
  }
}

}  // namespace

Problem make_problem(const std::vector<Buffer>& all, const std::vector<uint32_t>& members, uint64_t alignment,
                     size_t max_adjacency) {
  Problem p;
  const size_t n = members.size();
  p.orig = members;
  p.size.resize(n);
  p.align.resize(n);
  p.tlo.resize(n);
  p.thi.resize(n);
  p.lo.resize(n);
  p.hi.resize(n);
  std::vector<uint64_t> times;
  times.reserve(2 * n);
  for (size_t k = 0; k < n; ++k) {
    const Buffer& b = all[members[k]];
    p.size[k] = align_up(b.size, alignment);
    p.align[k] = offset_alignment(b, alignment);
    p.tlo[k] = b.lower;
    p.thi[k] = b.upper;
    times.push_back(b.lower);
    times.push_back(b.upper);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  p.sections = times.empty() ? 0 : static_cast<uint32_t>(times.size() - 1);
  auto sec = [&](uint64_t t) { return static_cast<uint32_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin()); };
  for (size_t k = 0; k < n; ++k) {
    p.lo[k] = sec(p.tlo[k]);
    p.hi[k] = sec(p.thi[k]);
  }
  // LOAD by sections: add at lo, remove at hi (unsigned arithmetic wraps back correctly).
  std::vector<uint64_t> add(p.sections + 1, 0), sub(p.sections + 1, 0);
  for (size_t k = 0; k < n; ++k) {
    add[p.lo[k]] += p.size[k];
    sub[p.hi[k]] += p.size[k];
  }
  uint64_t cur = 0;
  for (uint32_t s = 0; s < p.sections; ++s) {
    cur = cur + add[s] - sub[s];
    p.load = std::max(p.load, cur);
  }
  if (count_overlaps(p) <= max_adjacency) {
    std::vector<uint64_t> deg(n + 1, 0);
    sweep(p, [&](uint32_t i, const std::vector<uint32_t>& active) {
      deg[i] += active.size();
      for (uint32_t j : active) ++deg[j];
    });
    p.adj_off.assign(n + 1, 0);
    for (size_t i = 0; i < n; ++i) p.adj_off[i + 1] = p.adj_off[i] + deg[i];
    p.adj.resize(p.adj_off[n]);
    std::vector<uint64_t> fill(p.adj_off.begin(), p.adj_off.end() - 1);
    sweep(p, [&](uint32_t i, const std::vector<uint32_t>& active) {
      for (uint32_t j : active) {
        p.adj[fill[i]++] = j;
        p.adj[fill[j]++] = i;
      }
    });
    p.has_adjacency = true;
  }
  return p;
}

Problem make_window_problem(const Problem& p, const std::vector<uint32_t>& inner, const std::vector<uint32_t>& outer,
                            const std::vector<uint64_t>& off, uint32_t a, uint32_t b, size_t max_adjacency) {
  // Sections of p serve as times: the window's own sections are the distinct cut ends.
  std::vector<Buffer> bs;
  std::vector<uint32_t> members;
  bs.reserve(inner.size() + outer.size());
  for (const auto* list : {&inner, &outer})
    for (uint32_t j : *list) {
      Buffer b_;
      b_.size = p.size[j];
      b_.alignment = p.align[j];
      b_.lower = std::max(p.lo[j], a);
      b_.upper = std::min(p.hi[j], b);
      members.push_back(static_cast<uint32_t>(bs.size()));
      bs.push_back(b_);
    }
  Problem q = make_problem(bs, members, 1, max_adjacency);
  for (size_t k = 0; k < q.n(); ++k) q.orig[k] = k < inner.size() ? inner[k] : outer[k - inner.size()];
  // The duration orders look at the whole lifetime, not the cut one.
  for (size_t k = 0; k < q.n(); ++k) {
    q.tlo[k] = p.tlo[q.orig[k]];
    q.thi[k] = p.thi[q.orig[k]];
  }
  q.fixed.assign(q.n(), Problem::kFree);
  for (size_t k = inner.size(); k < q.n(); ++k) q.fixed[k] = off[q.orig[k]];
  return q;
}

Problem permute_problem(const Problem& p, const std::vector<uint32_t>& perm) {
  Problem q;
  const size_t n = p.n();
  std::vector<uint32_t> inv(n);
  for (uint32_t k = 0; k < n; ++k) inv[perm[k]] = k;
  auto pick = [&](const auto& v) {
    std::remove_const_t<std::remove_reference_t<decltype(v)>> out(n);
    for (size_t k = 0; k < n; ++k) out[k] = v[perm[k]];
    return out;
  };
  q.size = pick(p.size);
  q.align = pick(p.align);
  q.tlo = pick(p.tlo);
  q.thi = pick(p.thi);
  q.lo = pick(p.lo);
  q.hi = pick(p.hi);
  q.orig = pick(p.orig);
  q.sections = p.sections;
  q.load = p.load;
  q.has_adjacency = p.has_adjacency;
  if (!p.fixed.empty()) q.fixed = pick(p.fixed);
  if (p.has_adjacency) {
    q.adj_off.assign(n + 1, 0);
    for (size_t k = 0; k < n; ++k) q.adj_off[k + 1] = q.adj_off[k] + (p.adj_off[perm[k] + 1] - p.adj_off[perm[k]]);
    q.adj.resize(p.adj.size());
    for (size_t k = 0; k < n; ++k) {
      uint64_t w = q.adj_off[k];
      for (uint64_t e = p.adj_off[perm[k]]; e < p.adj_off[perm[k] + 1]; ++e) q.adj[w++] = inv[p.adj[e]];
    }
  }
  return q;
}

uint64_t count_overlaps(const Problem& p) {
  uint64_t pairs = 0;
  sweep(p, [&](uint32_t, const std::vector<uint32_t>& active) { pairs += active.size(); });
  return pairs;
}

std::vector<uint64_t> sweep_best_fit(const Problem& p, uint64_t* arena) {
  // Arrivals by lower, ties by size descending (as ArenaOrder::kLowerAsc); departures by upper.
  std::vector<uint32_t> arrive(p.n()), depart(p.n());
  std::iota(arrive.begin(), arrive.end(), 0u);
  std::iota(depart.begin(), depart.end(), 0u);
  std::stable_sort(arrive.begin(), arrive.end(), [&](uint32_t a, uint32_t b) {
    if (p.lo[a] != p.lo[b]) return p.lo[a] < p.lo[b];
    return p.size[a] > p.size[b];
  });
  std::stable_sort(depart.begin(), depart.end(), [&](uint32_t a, uint32_t b) { return p.hi[a] < p.hi[b]; });

  std::vector<uint64_t> off(p.n(), 0);
  std::map<uint64_t, uint64_t> occ;              // offset -> end, of the live buffers
  std::set<std::pair<uint64_t, uint64_t>> gaps;  // (length, start) of the free space between them
  uint64_t top = 0;
  auto gap_before = [&](std::map<uint64_t, uint64_t>::iterator it) {  // [previous end or 0, it->first)
    const uint64_t from = it == occ.begin() ? 0 : std::prev(it)->second;
    return std::pair<uint64_t, uint64_t>{it->first - from, from};
  };
  size_t d = 0;
  for (uint32_t i : arrive) {
    for (; d < depart.size() && p.hi[depart[d]] <= p.lo[i]; ++d) {
      auto it = occ.find(off[depart[d]]);
      auto next = std::next(it);
      if (auto g = gap_before(it); g.first > 0) gaps.erase(g);
      if (next != occ.end() && next->first > it->second) gaps.erase({next->first - it->second, it->second});
      occ.erase(it);
      if (next != occ.end())
        if (auto g = gap_before(next); g.first > 0) gaps.insert(g);
    }
    const uint64_t sz = p.size[i], al = p.align[i];
    uint64_t o = UINT64_MAX;
    int tries = 0;  // with odd alignments a gap may not fit after all: look at a few more
    for (auto g = gaps.lower_bound({sz, 0}); g != gaps.end() && tries < 64; ++g, ++tries) {
      const uint64_t start = align_up(g->second, al);
      if (start + sz <= g->second + g->first) {
        o = start;
        break;
      }
    }
    if (o == UINT64_MAX) o = align_up(occ.empty() ? 0 : std::prev(occ.end())->second, al);
    auto next = occ.lower_bound(o);  // insert [o, o + sz): split the free space it lands in
    const uint64_t from = next == occ.begin() ? 0 : std::prev(next)->second;
    if (next != occ.end() && next->first > from) gaps.erase({next->first - from, from});
    if (o > from) gaps.insert({o - from, from});
    if (next != occ.end() && next->first > o + sz) gaps.insert({next->first - (o + sz), o + sz});
    occ.emplace(o, o + sz);
    off[i] = o;
    top = std::max(top, o + sz);
  }
  *arena = top;
  return off;
}

}  // namespace moeprof::planner::detail
