#include "model/routing.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "model/config.h"

namespace moeprof {

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t hash4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = mix64(seed ^ 0x9E3779B97F4A7C15ull);
  h = mix64(h ^ a);
  h = mix64(h ^ (b * 0xD6E8FEB86659FD93ull));
  return mix64(h ^ (c + 0x632BE59BD9B4E019ull));
}

// Uniform in [0, n), n >= 1.
uint64_t below(uint64_t h, uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * n) >> 64); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A Fenwick tree of integer weights: exact removal and restoration.
class Fenwick {
 public:
  explicit Fenwick(const std::vector<uint64_t>& w) : n_(w.size()), t_(w.size() + 1, 0) {
    for (size_t i = 0; i < n_; ++i) add(i, static_cast<int64_t>(w[i]));
  }
  void add(size_t i, int64_t d) {
    for (size_t x = i + 1; x <= n_; x += x & (~x + 1)) t_[x] = static_cast<uint64_t>(static_cast<int64_t>(t_[x]) + d);
  }
  // The smallest index whose prefix sum (inclusive) exceeds u, u < total.
  size_t find(uint64_t u) const {
    size_t pos = 0, step = 1;
    while (step * 2 <= n_) step *= 2;
    for (; step > 0; step /= 2)
      if (pos + step <= n_ && t_[pos + step] <= u) {
        pos += step;
        u -= t_[pos];
      }
    return pos;
  }

 private:
  size_t n_;
  std::vector<uint64_t> t_;
};

}  // namespace

std::string RoutingSpec::text() const {
  switch (kind) {
    case RoutingKind::kRouter: return "router";
    case RoutingKind::kUniform: return "uniform";
    case RoutingKind::kZipf: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "zipf:%g", zipf_s);
      return buf;
    }
    case RoutingKind::kHot: return "hot:" + std::to_string(hot);
    case RoutingKind::kWorst: return "worst";
  }
  return "router";
}

Result<RoutingSpec> parse_routing(std::string_view text) {
  const std::string t(text);
  const auto bad = [&](const std::string& why) {
    return Status::bad_input("--routing " + t + ": " + why + " (router, uniform, zipf:S, hot:N or worst)");
  };
  RoutingSpec s;
  if (t == "router") return s;
  if (t == "uniform") {
    s.kind = RoutingKind::kUniform;
    return s;
  }
  if (t == "worst") {
    s.kind = RoutingKind::kWorst;
    return s;
  }
  if (t.rfind("zipf:", 0) == 0) {
    const std::string v = t.substr(5);
    char* end = nullptr;
    const double x = v.empty() ? 0 : std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x <= 0 || x > 64)
      return bad("the exponent S must be a number in (0, 64]");
    s.kind = RoutingKind::kZipf;
    s.zipf_s = x;
    return s;
  }
  if (t.rfind("hot:", 0) == 0) {
    const std::string v = t.substr(4);
    int64_t n = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 1 || n > (int64_t{1} << 20))
      return bad("N must be a whole number of hot experts, at least 1");
    s.kind = RoutingKind::kHot;
    s.hot = n;
    return s;
  }
  return bad("unknown routing");
}

std::string_view moe_rows_name(MoeRows r) { return r == MoeRows::kRouted ? "routed" : "bound"; }

Result<MoeRows> parse_moe_rows(std::string_view text) {
  if (text == "bound") return MoeRows::kBound;
  if (text == "routed") return MoeRows::kRouted;
  return Status::bad_input("--moe-rows " + std::string(text) + ": must be bound or routed");
}

int64_t moe_bound_rows(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile) {
  return tokens * top_k + experts * (tile - 1);
}

int64_t moe_routed_rows(const std::vector<int64_t>& counts, int64_t tile) {
  int64_t rows = 0;
  for (int64_t c : counts) rows += ceil_div(c, tile) * tile;
  return rows;
}

// Each expert's first tile costs one token and every further tile `tile` tokens, up to
// ceil(T / tile) tiles (an expert receives each token at most once): the most tiles open the first
// tile of as many experts as there are routed rows, then add whole tiles.
int64_t moe_worst_rows(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile) {
  const int64_t n = tokens * top_k, m = std::min(experts, n), q = ceil_div(tokens, tile);
  const int64_t extra = std::min((n - m) / tile, m * (q - 1));
  return (m + extra) * tile;
}

std::vector<int64_t> moe_worst_counts(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile) {
  const int64_t n = tokens * top_k, m = std::min(experts, n), q = ceil_div(tokens, tile);
  int64_t extra = std::min((n - m) / tile, m * (q - 1));
  std::vector<int64_t> tiles(static_cast<size_t>(experts), 0), counts(static_cast<size_t>(experts), 0);
  int64_t used = 0;
  for (int64_t e = 0; e < m; ++e) {
    const int64_t add = std::min(q - 1, extra);
    extra -= add;
    tiles[static_cast<size_t>(e)] = 1 + add;
    counts[static_cast<size_t>(e)] = add * tile + 1;
    used += counts[static_cast<size_t>(e)];
  }
  // The tokens left fill the open tiles without opening more (there is room: see moe_worst_rows).
  int64_t left = n - used;
  for (int64_t e = 0; e < m && left > 0; ++e) {
    int64_t& c = counts[static_cast<size_t>(e)];
    const int64_t room = std::min(tiles[static_cast<size_t>(e)] * tile, tokens) - c;
    const int64_t take = std::min(room, left);
    c += take;
    left -= take;
  }
  return counts;
}

std::vector<int64_t> expert_counts(const int32_t* ids, int64_t n, int64_t experts) {
  std::vector<int64_t> c(static_cast<size_t>(experts), 0);
  for (int64_t i = 0; i < n; ++i) ++c[static_cast<size_t>(ids[i])];
  return c;
}

Result<RoutingDraw> RoutingDraw::create(const RoutingSpec& spec, int64_t experts, int64_t top_k, uint64_t seed) {
  if (!spec.forced()) return Status::bad_input("routing: the router's own top-k is not drawn");
  if (top_k < 1 || top_k > experts) return Status::bad_input("routing: top-k must be 1 to the number of experts");
  if (spec.kind == RoutingKind::kHot && spec.hot > experts)
    return Status::bad_input("--routing " + spec.text() + ": the model has only " + std::to_string(experts) + " routed experts");
  RoutingDraw d;
  d.spec_ = spec;
  d.E_ = experts;
  d.k_ = top_k;
  d.seed_ = seed;
  if (spec.kind == RoutingKind::kZipf && spec.zipf_s * std::log2(static_cast<double>(experts)) > 30) {
    // w_r / w_0 below 2^-30: integer weights of 2^40 would round the tail to one flat weight, and
    // the draws after the first few would no longer follow 1 / r^S.
    d.zipf_log_weights_.resize(static_cast<size_t>(experts));
    for (int64_t r = 0; r < experts; ++r) d.zipf_log_weights_[static_cast<size_t>(r)] = -spec.zipf_s * std::log(static_cast<double>(r + 1));
  } else if (spec.kind == RoutingKind::kZipf) {
    d.zipf_weights_.resize(static_cast<size_t>(experts));
    for (int64_t r = 0; r < experts; ++r) {
      const double w = std::ldexp(std::pow(static_cast<double>(r + 1), -spec.zipf_s), 40);
      d.zipf_weights_[static_cast<size_t>(r)] = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(w)));
    }
  }
  return d;
}

std::vector<int64_t> RoutingDraw::layer_order(int64_t layer) const {
  std::vector<int64_t> order(static_cast<size_t>(E_));
  for (int64_t e = 0; e < E_; ++e) order[static_cast<size_t>(e)] = e;
  for (int64_t i = E_ - 1; i > 0; --i) {
    const uint64_t j = below(hash4(seed_, static_cast<uint64_t>(layer), 0x0D3Eull, static_cast<uint64_t>(i)), static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

void RoutingDraw::draw(int64_t layer, const std::vector<uint64_t>& keys, int32_t* ids) const {
  const int64_t rows = static_cast<int64_t>(keys.size()), k = k_;
  const uint64_t L = static_cast<uint64_t>(layer);
  if (spec_.kind == RoutingKind::kWorst) {
    const int64_t tile = moe_tile_rows(rows, k, E_);
    const std::vector<int64_t> counts = moe_worst_counts(rows, k, E_, tile);
    // Expert e's count_e <= rows entries are consecutive in slot-major order (slot j of row r at
    // j * rows + r), so they fall on distinct rows.
    int64_t e = 0, left = counts.empty() ? 0 : counts[0];
    for (int64_t p = 0; p < rows * k; ++p) {
      while (left == 0) left = counts[static_cast<size_t>(++e)];
      ids[(p % rows) * k + p / rows] = static_cast<int32_t>(e);
      --left;
    }
    return;
  }
  // k distinct picks among pool[0, n) by a partial Fisher-Yates shuffle, undone afterwards.
  std::vector<std::pair<int64_t, int64_t>> swaps;
  auto pick_uniform = [&](std::vector<int64_t>& pool, int64_t n, int64_t picks, uint64_t key, uint64_t salt, int32_t* out) {
    swaps.clear();
    for (int64_t j = 0; j < picks; ++j) {
      const int64_t i = j + static_cast<int64_t>(below(hash4(seed_, L, key, salt + static_cast<uint64_t>(j)), static_cast<uint64_t>(n - j)));
      std::swap(pool[static_cast<size_t>(j)], pool[static_cast<size_t>(i)]);
      swaps.emplace_back(j, i);
      out[j] = static_cast<int32_t>(pool[static_cast<size_t>(j)]);
    }
    for (auto it = swaps.rbegin(); it != swaps.rend(); ++it) std::swap(pool[static_cast<size_t>(it->first)], pool[static_cast<size_t>(it->second)]);
  };
  if (spec_.kind == RoutingKind::kUniform) {
    std::vector<int64_t> pool(static_cast<size_t>(E_));
    for (int64_t e = 0; e < E_; ++e) pool[static_cast<size_t>(e)] = e;
    for (int64_t r = 0; r < rows; ++r) pick_uniform(pool, E_, k, keys[static_cast<size_t>(r)], 0, ids + r * k);
    return;
  }
  const std::vector<int64_t> order = layer_order(layer);
  if (spec_.kind == RoutingKind::kHot) {
    const int64_t N = spec_.hot;
    std::vector<int64_t> hot(order.begin(), order.begin() + N), cold(order.begin() + N, order.end());
    for (int64_t r = 0; r < rows; ++r) {
      int32_t* out = ids + r * k;
      if (N >= k) {
        pick_uniform(hot, N, k, keys[static_cast<size_t>(r)], 0, out);
      } else {
        for (int64_t j = 0; j < N; ++j) out[j] = static_cast<int32_t>(hot[static_cast<size_t>(j)]);
        pick_uniform(cold, E_ - N, k - N, keys[static_cast<size_t>(r)], 0, out + N);
      }
    }
    return;
  }
  if (!zipf_log_weights_.empty()) {
    // Zipf of a steep S: each rank's clock E_r / w_r with E_r ~ Exp(1), in logs; the k earliest
    // clocks in order are k draws without replacement (Plackett-Luce). ln E_r >= ln(2^-53), so
    // once that bound over w_r passes the k-th earliest clock, no later rank can come before it.
    constexpr double kMinLogClock = -37.5;  // below ln(-ln(1 - 2^-53)) = -36.7
    std::vector<std::pair<double, int64_t>> best;  // a max-heap of the k earliest clocks (log, rank)
    for (int64_t r = 0; r < rows; ++r) {
      best.clear();
      for (int64_t rank = 0; rank < E_; ++rank) {
        const double lw = zipf_log_weights_[static_cast<size_t>(rank)];
        if (static_cast<int64_t>(best.size()) == k && kMinLogClock - lw > best.front().first) break;
        const uint64_t h = hash4(seed_, L, keys[static_cast<size_t>(r)], 0x21FFull << 32 | static_cast<uint64_t>(rank));
        const double u = (static_cast<double>(h >> 12) + 0.5) * 0x1p-52;  // in [2^-53, 1 - 2^-53], exact
        const double clock = std::log(-std::log(u)) - lw;
        if (static_cast<int64_t>(best.size()) < k) {
          best.emplace_back(clock, rank);
          std::push_heap(best.begin(), best.end());
        } else if (clock < best.front().first) {
          std::pop_heap(best.begin(), best.end());
          best.back() = {clock, rank};
          std::push_heap(best.begin(), best.end());
        }
      }
      std::sort_heap(best.begin(), best.end());
      for (int64_t j = 0; j < k; ++j) ids[r * k + j] = static_cast<int32_t>(order[static_cast<size_t>(best[static_cast<size_t>(j)].second)]);
    }
    return;
  }
  // Zipf: sequential draws without replacement (Plackett-Luce) over integer weights by rank.
  Fenwick fw(zipf_weights_);
  uint64_t total = 0;
  for (uint64_t w : zipf_weights_) total += w;
  std::vector<size_t> taken(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t left = total;
    for (int64_t j = 0; j < k; ++j) {
      const size_t rank = fw.find(below(hash4(seed_, L, keys[static_cast<size_t>(r)], static_cast<uint64_t>(j)), left));
      taken[static_cast<size_t>(j)] = rank;
      fw.add(rank, -static_cast<int64_t>(zipf_weights_[rank]));
      left -= zipf_weights_[rank];
      ids[r * k + j] = static_cast<int32_t>(order[rank]);
    }
    for (int64_t j = 0; j < k; ++j) fw.add(taken[static_cast<size_t>(j)], static_cast<int64_t>(zipf_weights_[taken[static_cast<size_t>(j)]]));
  }
}

}  // namespace moeprof
