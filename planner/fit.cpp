// Size laws across traces: sites matched, laws fitted once per distinct bytes vector, the event
// sequences compared, the positions that can hold the peak kept as polynomials, predictions and
// the budget solve evaluated exactly (planner/fit.h).
#include "planner/fit.h"

#include <algorithm>
#include <bit>
#include <unordered_map>
#include <unordered_set>

#include "planner/fit_internal.h"

namespace moeprof::planner {

using exact::i128;
using exact::Q;

namespace {

std::string commas(int64_t v) { return exact::to_string(static_cast<i128>(v), true); }

struct VecHash {
  size_t operator()(const std::vector<uint64_t>& v) const {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uint64_t x : v) h = (h ^ x) * 0x100000001B3ull + (h >> 29);
    return static_cast<size_t>(h);
  }
};

struct CoefHash {
  size_t operator()(const std::vector<i128>& v) const {
    uint64_t h = 0xCBF29CE484222325ull;
    for (i128 x : v) {
      h = (h ^ static_cast<uint64_t>(x)) * 0x100000001B3ull;
      h = (h ^ static_cast<uint64_t>(x >> 64)) * 0x100000001B3ull;
    }
    return static_cast<size_t>(h);
  }
};

// The key of an allocation: (device, name, scope) as ids of strings shared by every trace.
struct SiteKeys {
  std::unordered_map<std::string, uint32_t> strings;
  std::unordered_map<uint64_t, uint32_t> keys;  // (name id, scope id, device) packed -> key id
  std::vector<uint64_t> key_parts;              // key id -> (name id << 32 | scope id)
  std::vector<uint16_t> key_device;
  std::vector<const std::string*> text;         // string id -> its text

  uint32_t str(const std::string& s) {
    auto [it, fresh] = strings.emplace(s, static_cast<uint32_t>(text.size()));
    if (fresh) text.push_back(&it->first);
    return it->second;
  }
  uint32_t key(uint32_t name, uint32_t scope, uint16_t device) {
    // Ids stay below 2^24 in any trace the planner replays (< 2^32 records, strings interned):
    // checked by the caller.
    const uint64_t packed = (uint64_t{device} << 48) | (uint64_t{name} << 24) | scope;
    if (auto it = keys.find(packed); it != keys.end()) return it->second;
    keys.emplace(packed, static_cast<uint32_t>(key_parts.size()));
    key_parts.push_back((uint64_t{name} << 32) | scope);
    key_device.push_back(device);
    return static_cast<uint32_t>(key_parts.size() - 1);
  }
};

struct TraceSites {
  std::vector<uint32_t> key, ordinal;  // per lifetime
};

uint64_t low_bit(uint64_t v) { return v == 0 ? 0 : (v & (~v + 1)); }

// max over kept candidates of the value at the monomial values `mv`; exact, scaled by D.
struct Best {
  i128 value = -1;
  size_t index = 0;
};

bool eval_candidate(const PeakCandidate& c, const std::vector<i128>& mv, i128* out) {
  i128 s = 0;
  for (size_t j = 0; j < mv.size(); ++j) {
    if (c.coef[j] == 0) continue;
    i128 t;
    if (!exact::checked_mul(c.coef[j], mv[j], &t) || !exact::checked_add(s, t, &s)) return false;
  }
  *out = s;
  return true;
}

Result<Best> best_of(const std::vector<PeakCandidate>& cands, const std::vector<i128>& mv) {
  Best b;
  for (size_t i = 0; i < cands.size(); ++i) {
    i128 v;
    if (!eval_candidate(cands[i], mv, &v)) return Status::bad_input("the predicted live bytes overflow 128-bit arithmetic at these sizes");
    if (v > b.value) {
      b.value = v;
      b.index = i;
    }
  }
  return b;
}

// Positions that can hold a peak, duplicates merged as they come (a repeated layer or step gives
// the same polynomial many times).
struct CandidateSet {
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_hash;
  std::vector<PeakCandidate> list;
  void add(uint16_t device, uint32_t site, const std::vector<i128>& coef, uint32_t unc, uint32_t bnd) {
    auto& bucket = by_hash[CoefHash()(coef)];
    for (uint32_t i : bucket)
      if (list[i].coef == coef) {
        list[i].unconfirmed_sites = std::max(list[i].unconfirmed_sites, unc);
        list[i].bounded_sites = std::max(list[i].bounded_sites, bnd);
        return;
      }
    bucket.push_back(static_cast<uint32_t>(list.size()));
    list.push_back(PeakCandidate{device, site, coef, unc, bnd});
  }
};

// Duplicates merged; then, in descending lexicographic order (highest degree first), a position
// bounded coefficient by coefficient by a kept one is dropped (sizes are >= 0, so every monomial
// is too). A dominator sorts first, so one pass suffices.
std::vector<PeakCandidate> prune(std::vector<PeakCandidate> c) {
  std::unordered_map<std::vector<i128>, size_t, CoefHash> seen;
  std::vector<PeakCandidate> uniq;
  for (auto& x : c) {
    auto [it, fresh] = seen.emplace(x.coef, uniq.size());
    if (fresh) {
      uniq.push_back(std::move(x));
    } else {
      auto& k = uniq[it->second];
      k.unconfirmed_sites = std::max(k.unconfirmed_sites, x.unconfirmed_sites);
      k.bounded_sites = std::max(k.bounded_sites, x.bounded_sites);
    }
  }
  std::vector<size_t> order(uniq.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = uniq[a].coef, &y = uniq[b].coef;
    for (size_t j = x.size(); j-- > 0;)
      if (x[j] != y[j]) return x[j] > y[j];
    return false;
  });
  constexpr size_t kMaxKeptCompared = 20000;
  std::vector<PeakCandidate> kept;
  for (size_t i : order) {
    bool dominated = false;
    if (kept.size() <= kMaxKeptCompared)
      for (const auto& k : kept) {
        bool all = true;
        for (size_t j = 0; j < k.coef.size() && all; ++j) all = k.coef[j] >= uniq[i].coef[j];
        if (all) {
          dominated = true;
          break;
        }
      }
    if (!dominated) kept.push_back(std::move(uniq[i]));
  }
  return kept;
}

}  // namespace

Result<FitResult> fit_size_laws(const std::vector<const RunAnalysis*>& runs, std::vector<FitVariable> vars, const FitOptions& opt) {
  std::vector<SizeTrace> traces;
  for (const RunAnalysis* r : runs) {
    MOEPROF_ASSIGN_OR_RETURN(SizeTrace st, size_trace(*r));
    traces.push_back(std::move(st));
  }
  std::vector<const SizeTrace*> ptrs;
  for (const auto& t : traces) ptrs.push_back(&t);
  return fit_size_laws(ptrs, std::move(vars), opt);
}

Result<FitResult> fit_size_laws(const std::vector<const SizeTrace*>& runs, std::vector<FitVariable> vars, const FitOptions& opt) {
  const size_t n = runs.size();
  if (n < 2) return Status::bad_input("fit needs at least two traces of the program at different sizes");
  if (vars.empty() || vars.size() > static_cast<size_t>(exact::kMaxVars))
    return Status::bad_input("fit takes 1 to " + std::to_string(exact::kMaxVars) + " variables (got " + std::to_string(vars.size()) + ")");
  for (auto& v : vars) {
    if (v.values.size() != n)
      return Status::bad_input("variable " + v.name + " has " + std::to_string(v.values.size()) + " values for " + std::to_string(n) +
                               " traces (one per trace, in order)");
    for (int64_t x : v.values)
      if (x < 0) return Status::bad_input("variable " + v.name + " has a negative value (" + std::to_string(x) + ")");
    if (std::all_of(v.values.begin(), v.values.end(), [&](int64_t x) { return x == v.values[0]; }))
      return Status::bad_input("variable " + v.name + " is " + std::to_string(v.values[0]) + " in every trace: nothing to fit it on");
    if (v.symbol.empty()) v.symbol = variable_symbol(v.name);
  }
  // Two sizes may not repeat with different values of the others only when every variable is
  // equal: the same size twice is allowed (it confirms), as long as the bytes agree.
  FitResult res;
  res.variables = vars;
  res.basis = exact::monomials(static_cast<int>(vars.size()), opt.max_degree);

  // 1. Site keys per trace: (device, name, scope) and the ordinal within it.
  SiteKeys keys;
  std::vector<TraceSites> ts(n);
  uint64_t or_bytes = 0, or_addr = 0;
  for (size_t t = 0; t < n; ++t) {
    const SizeTrace& run = *runs[t];
    std::vector<uint32_t> smap(run.strings.size(), UINT32_MAX);
    auto gstr = [&](uint32_t id) {
      if (id >= smap.size()) id = 0;
      uint32_t& g = smap[id];
      if (g == UINT32_MAX) g = keys.str(run.strings.empty() ? std::string() : run.strings[id]);
      return g;
    };
    std::vector<uint32_t> counter;
    ts[t].key.resize(run.allocs.size());
    ts[t].ordinal.resize(run.allocs.size());
    for (size_t i = 0; i < run.allocs.size(); ++i) {
      const SizeTrace::Alloc& l = run.allocs[i];
      const uint32_t name = gstr(l.name), scope = gstr(l.scope);
      if (name >= (1u << 24) || scope >= (1u << 24)) return Status::bad_input("fit: more than 2^24 distinct names and scopes");
      const uint32_t k = keys.key(name, scope, l.device);
      if (counter.size() <= k) counter.resize(k + 1, 0);
      ts[t].key[i] = k;
      ts[t].ordinal[i] = counter[k]++;
      or_bytes |= l.bytes;
      or_addr |= l.address;
    }
  }
  res.size_granularity = low_bit(or_bytes);
  res.address_alignment = low_bit(or_addr);

  // 2. Matching: trace t's allocation i is site site_of[t][i] (an index of trace 0's
  // allocations), or UINT32_MAX when trace 0 has no such site.
  const size_t n0 = runs[0]->allocs.size();
  std::vector<std::vector<uint32_t>> site_of(n);
  std::vector<uint32_t> present(n0, 1);  // how many traces have each of trace 0's sites
  std::unordered_map<uint64_t, uint32_t> by_key;
  auto pack = [](uint32_t k, uint32_t o) { return (uint64_t{k} << 32) | o; };
  for (size_t t = 0; t < n; ++t) {
    auto& so = site_of[t];
    if (t == 0 || (ts[t].key == ts[0].key && ts[t].ordinal == ts[0].ordinal)) {
      so.resize(ts[t].key.size());
      for (uint32_t i = 0; i < so.size(); ++i) so[i] = i;
      if (t > 0)
        for (auto& p : present) ++p;
      continue;
    }
    if (by_key.empty())
      for (uint32_t i = 0; i < n0; ++i) by_key.emplace(pack(ts[0].key[i], ts[0].ordinal[i]), i);
    so.assign(ts[t].key.size(), UINT32_MAX);
    for (size_t i = 0; i < so.size(); ++i) {
      auto it = by_key.find(pack(ts[t].key[i], ts[t].ordinal[i]));
      if (it == by_key.end()) continue;
      so[i] = it->second;
      ++present[it->second];
    }
  }
  // Partial sites: trace 0's missing elsewhere, and the others' missing in trace 0 (one entry per key and ordinal).
  auto describe = [&](uint32_t key, uint32_t ord, std::vector<size_t> traces) {
    PartialSite p;
    p.name = *keys.text[static_cast<uint32_t>(keys.key_parts[key] >> 32)];
    p.scope = *keys.text[static_cast<uint32_t>(keys.key_parts[key] & 0xFFFFFFFFu)];
    p.device = keys.key_device[key];
    p.ordinal = ord;
    p.traces = std::move(traces);
    return p;
  };
  std::vector<PartialSite> partial_raw;
  std::vector<std::pair<uint32_t, uint32_t>> partial_keys;
  for (uint32_t i = 0; i < n0; ++i)
    if (present[i] != n) partial_keys.emplace_back(ts[0].key[i], ts[0].ordinal[i]);
  std::unordered_set<uint64_t> extra_seen;
  for (size_t t = 1; t < n; ++t)
    for (size_t i = 0; i < site_of[t].size(); ++i)
      if (site_of[t][i] == UINT32_MAX && extra_seen.insert(pack(ts[t].key[i], ts[t].ordinal[i])).second)
        partial_keys.emplace_back(ts[t].key[i], ts[t].ordinal[i]);
  constexpr size_t kPartialListed = 1000;
  for (size_t k = 0; k < partial_keys.size() && k < kPartialListed; ++k) {
    std::vector<size_t> has;
    for (size_t t = 0; t < n; ++t) {
      bool found = false;
      for (size_t i = 0; i < ts[t].key.size() && !found; ++i) found = ts[t].key[i] == partial_keys[k].first && ts[t].ordinal[i] == partial_keys[k].second;
      if (found) has.push_back(t);
    }
    res.partial.push_back(describe(partial_keys[k].first, partial_keys[k].second, std::move(has)));
  }
  const size_t partial_count = partial_keys.size();

  // 3. Laws, one per distinct bytes vector.
  std::vector<std::vector<i128>> mv(n, std::vector<i128>(res.basis.size()));
  for (size_t t = 0; t < n; ++t) {
    std::vector<int64_t> x;
    for (const auto& v : vars) x.push_back(v.values[t]);
    for (size_t j = 0; j < res.basis.size(); ++j)
      if (!exact::eval(res.basis[j], x, &mv[t][j])) return Status::bad_input("the variables' values overflow 128-bit arithmetic");
  }
  const fit_detail::SubsetOrder order(res.basis, opt.max_degree);
  std::vector<uint64_t> ybuf(n0 * n, 0);
  std::vector<uint8_t> data_dependent(n0, 0);  // a site any trace marks kFlagDataDependent
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < site_of[t].size(); ++i)
      if (site_of[t][i] != UINT32_MAX) {
        ybuf[size_t{site_of[t][i]} * n + t] = runs[t]->allocs[i].bytes;
        data_dependent[site_of[t][i]] |= runs[t]->allocs[i].data_dependent ? 1 : 0;
      }
  std::unordered_map<std::vector<uint64_t>, uint32_t, VecHash> law_of;
  std::vector<uint32_t> fit_index(n0, UINT32_MAX);
  std::vector<uint64_t> y(n + 1);  // the bytes per trace, then whether the site is data-dependent
  for (uint32_t i = 0; i < n0; ++i) {
    if (present[i] != n) continue;
    std::copy(ybuf.begin() + static_cast<ptrdiff_t>(size_t{i} * n), ybuf.begin() + static_cast<ptrdiff_t>(size_t{i} * n + n), y.begin());
    y[n] = data_dependent[i];
    auto it = law_of.find(y);
    if (it == law_of.end()) {
      it = law_of.emplace(y, static_cast<uint32_t>(res.laws.size())).first;
      const std::vector<uint64_t> values(y.begin(), y.begin() + static_cast<ptrdiff_t>(n));
      fit_detail::LawInput in;
      in.values = &values;
      in.data_dependent = y[n] != 0;
      in.monomial_values = &mv;
      in.basis = &res.basis;
      in.vars = &res.variables;
      in.order = &order;
      in.max_degree = opt.max_degree;
      in.regimes = opt.regimes;
      res.laws.push_back(fit_detail::fit_law(in));
    }
    const SizeTrace::Alloc& l = runs[0]->allocs[i];
    FitSite s;
    s.name = static_cast<uint32_t>(keys.key_parts[ts[0].key[i]] >> 32);
    s.scope = static_cast<uint32_t>(keys.key_parts[ts[0].key[i]] & 0xFFFFFFFFu);
    s.ordinal = ts[0].ordinal[i];
    s.device = l.device;
    s.category = l.category;
    s.law = it->second;
    fit_index[i] = static_cast<uint32_t>(res.sites.size());
    res.sites.push_back(std::move(s));
    switch (res.laws[it->second].state) {
      case LawState::kConfirmed: ++res.confirmed_sites; break;
      case LawState::kUnconfirmed: ++res.unconfirmed_sites; break;
      case LawState::kNone: ++res.none_sites; break;
    }
  }
  res.strings.reserve(keys.text.size());
  for (const std::string* t : keys.text) res.strings.push_back(*t);
  res.regime_floor.assign(vars.size(), INT64_MIN);
  for (const auto& law : res.laws)
    if (law.regime_var >= 0)
      res.regime_floor[static_cast<size_t>(law.regime_var)] = std::max(res.regime_floor[static_cast<size_t>(law.regime_var)], law.regime_min);
  // The common denominator of every coefficient.
  for (const auto& law : res.laws)
    for (const auto& term : law.terms) {
      const i128 g = exact::gcd(res.denominator, term.coefficient.den);
      if (!exact::checked_mul(res.denominator / g, term.coefficient.den, &res.denominator))
        return Status::bad_input("the laws' common denominator overflows 128-bit arithmetic");
    }
  for (size_t t = 0; t < n; ++t) {
    res.measured_peak_activation.push_back(runs[t]->peak_activation_bytes);
    res.measured_peak_total.push_back(runs[t]->peak_total_bytes);
  }

  // 4. The event sequences, per device, must be equal.
  const std::vector<uint64_t>& ev0 = runs[0]->events;
  res.events_per_trace = ev0.size();
  res.same_sequence = partial_count == 0;
  if (!res.same_sequence)
    res.sequence_note = std::to_string(partial_count) + " allocation site(s) are in some traces only";
  // Per device, in order: (site << 1 | free).
  auto per_device = [&](size_t t, const std::vector<uint64_t>& ev) {
    std::vector<std::pair<uint16_t, std::vector<uint64_t>>> out;
    for (uint64_t e : ev) {
      const uint16_t dev = runs[t]->allocs[e >> 1].device;
      size_t k = 0;
      while (k < out.size() && out[k].first != dev) ++k;
      if (k == out.size()) out.emplace_back(dev, std::vector<uint64_t>{});
      out[k].second.push_back((uint64_t{site_of[t][e >> 1]} << 1) | (e & 1));
    }
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    return out;
  };
  const auto a = res.same_sequence ? per_device(0, ev0) : decltype(per_device(0, ev0)){};
  for (size_t t = 1; t < n && res.same_sequence; ++t) {
    const auto b = per_device(t, runs[t]->events);
    if (b.size() != a.size()) {
      res.same_sequence = false;
      res.sequence_note = "trace " + std::to_string(t + 1) + " has allocations on other devices than the first";
      break;
    }
    for (size_t dv = 0; dv < a.size() && res.same_sequence; ++dv) {
      const auto& seq = a[dv].second;
      const auto& other = b[dv].second;
      if (a[dv].first == b[dv].first && seq == other) continue;
      size_t k = 0;
      while (k < seq.size() && k < other.size() && seq[k] == other[k]) ++k;
      auto what = [&](const std::vector<uint64_t>& s) -> std::string {
        if (k >= s.size()) return "ends";
        const FitSite& site = res.sites[fit_index[s[k] >> 1]];
        return std::string(s[k] & 1 ? "frees " : "allocates ") + res.scope_of(site) + "/" + res.name_of(site);
      };
      res.same_sequence = false;
      res.sequence_note = "device " + std::to_string(a[dv].first) + ", event " + commas(static_cast<int64_t>(k)) + ": the first trace " +
                          what(seq) + ", trace " + std::to_string(t + 1) + " " +
                          (k < other.size() ? ((other[k] & 1) ? "frees" : "allocates") : "ends") + " something else";
    }
  }
  if (!res.same_sequence) return res;

  // 5. Positions that can hold a peak: the last allocation before a free, per device.
  const size_t B = res.basis.size();
  std::vector<std::vector<i128>> scaled(res.laws.size(), std::vector<i128>(B, 0));
  size_t x0_index = B;
  for (size_t j = 0; j < B; ++j)
    if (res.basis[j].degree() == 1 && res.basis[j].exp[0] == 1) x0_index = j;
  for (size_t k = 0; k < res.laws.size(); ++k) {
    const SizeLaw& law = res.laws[k];
    if (law.state == LawState::kNone) {
      if (x0_index == B || !exact::checked_mul(law.bound_per_unit, res.denominator, &scaled[k][x0_index]))
        return Status::bad_input("a bound overflows 128-bit arithmetic");
      continue;
    }
    for (const auto& term : law.terms) {
      size_t j = 0;
      while (!(res.basis[j] == term.monomial)) ++j;
      if (!exact::checked_mul(term.coefficient.num, res.denominator / term.coefficient.den, &scaled[k][j]))
        return Status::bad_input("a law overflows 128-bit arithmetic");
    }
  }
  struct Running {
    std::vector<i128> act, tot;
    uint32_t unc_act = 0, bnd_act = 0, unc_tot = 0, bnd_tot = 0;
  };
  std::unordered_map<uint16_t, Running> run_state;
  CandidateSet act_c, tot_c;
  std::vector<int> next_is_free_or_end(ev0.size(), 1);
  {
    // For each event, whether the next event of the same device is a free (or none follows).
    std::unordered_map<uint16_t, size_t> last;
    for (size_t k = 0; k < ev0.size(); ++k) {
      const uint16_t dev = runs[0]->allocs[ev0[k] >> 1].device;
      auto it = last.find(dev);
      if (it != last.end()) next_is_free_or_end[it->second] = (ev0[k] & 1) ? 1 : 0;
      last[dev] = k;
    }
  }
  for (size_t k = 0; k < ev0.size(); ++k) {
    const uint32_t li = static_cast<uint32_t>(ev0[k] >> 1);
    const bool is_free = ev0[k] & 1;
    const FitSite& site = res.sites[fit_index[li]];
    const SizeLaw& law = res.laws[site.law];
    Running& r = run_state[site.device];
    if (r.act.empty()) r.act.assign(B, 0), r.tot.assign(B, 0);
    const bool act = counts_as_activation(site.category);
    const auto& sv = scaled[site.law];
    const int sign = is_free ? -1 : 1;
    for (size_t j = 0; j < B; ++j) {
      if (sv[j] == 0) continue;
      if (!exact::checked_add(r.tot[j], sign * sv[j], &r.tot[j]) || (act && !exact::checked_add(r.act[j], sign * sv[j], &r.act[j])))
        return Status::bad_input("the live bytes overflow 128-bit arithmetic");
    }
    auto count = [&](uint32_t& c, bool on) {
      if (on) c = is_free ? c - 1 : c + 1;
    };
    count(r.unc_tot, law.state == LawState::kUnconfirmed);
    count(r.bnd_tot, law.state == LawState::kNone);
    count(r.unc_act, act && law.state == LawState::kUnconfirmed);
    count(r.bnd_act, act && law.state == LawState::kNone);
    if (is_free || !next_is_free_or_end[k]) continue;
    ++res.candidate_positions;
    act_c.add(site.device, fit_index[li], r.act, r.unc_act, r.bnd_act);
    tot_c.add(site.device, fit_index[li], r.tot, r.unc_tot, r.bnd_tot);
  }
  res.activation_candidates = prune(std::move(act_c.list));
  res.total_candidates = prune(std::move(tot_c.list));
  return res;
}

namespace {

Result<std::vector<i128>> monomial_values(const FitResult& fit, const std::vector<int64_t>& at) {
  if (at.size() != fit.variables.size())
    return Status::bad_input("a prediction needs a value for each of the " + std::to_string(fit.variables.size()) + " variables");
  for (size_t v = 0; v < at.size(); ++v) {
    if (at[v] < 0) return Status::bad_input(fit.variables[v].name + " must not be negative");
    if (at[v] < fit.regime_floor[v])
      return Status::bad_input(fit.variables[v].symbol + " = " + commas(at[v]) + " is below the regime of some laws (" +
                               fit.variables[v].symbol + " >= " + commas(fit.regime_floor[v]) + "): run that size instead");
  }
  std::vector<i128> mv(fit.basis.size());
  for (size_t j = 0; j < fit.basis.size(); ++j)
    if (!exact::eval(fit.basis[j], at, &mv[j])) return Status::bad_input("the sizes overflow 128-bit arithmetic");
  return mv;
}

}  // namespace

Result<SizePrediction> predict_peak(const FitResult& fit, const std::vector<int64_t>& at) {
  if (!fit.same_sequence)
    return Status::bad_input("the traces are not one program at different sizes (" + fit.sequence_note + "): no peak can be predicted");
  MOEPROF_ASSIGN_OR_RETURN(std::vector<i128> mv, monomial_values(fit, at));
  SizePrediction p;
  p.at = at;
  auto to_bytes = [&](i128 v, uint64_t* out) -> Status {
    if (v < 0) return Status::bad_input("the laws give negative live bytes at these sizes");
    const i128 b = exact::ceil_div(v, fit.denominator);
    if (v % fit.denominator != 0) p.fractional = true;
    if (b > static_cast<i128>(INT64_MAX)) return Status::bad_input("the predicted peak exceeds 2^63-1 bytes");
    *out = static_cast<uint64_t>(b);
    return Status::ok();
  };
  if (!fit.activation_candidates.empty()) {
    MOEPROF_ASSIGN_OR_RETURN(Best a, best_of(fit.activation_candidates, mv));
    MOEPROF_RETURN_IF_ERROR(to_bytes(a.value, &p.peak_activation_bytes));
    const PeakCandidate& c = fit.activation_candidates[a.index];
    p.peak_device = c.device;
    p.peak_site = fit.scope_of(fit.sites[c.site]) + "/" + fit.name_of(fit.sites[c.site]);
    p.unconfirmed_sites_at_peak = c.unconfirmed_sites;
    p.bounded_sites_at_peak = c.bounded_sites;
  }
  if (!fit.total_candidates.empty()) {
    MOEPROF_ASSIGN_OR_RETURN(Best t, best_of(fit.total_candidates, mv));
    MOEPROF_RETURN_IF_ERROR(to_bytes(t.value, &p.peak_total_bytes));
    p.total_unconfirmed_sites_at_peak = fit.total_candidates[t.index].unconfirmed_sites;
    p.total_bounded_sites_at_peak = fit.total_candidates[t.index].bounded_sites;
  }
  for (const auto& s : fit.sites) {
    const LawState st = fit.laws[s.law].state;
    p.total_unconfirmed |= st == LawState::kUnconfirmed;
    p.total_bounded |= st == LawState::kNone;
    if (!counts_as_activation(s.category)) continue;
    p.unconfirmed |= st == LawState::kUnconfirmed;
    p.bounded |= st == LawState::kNone;
  }
  return p;
}

Result<BudgetSolution> solve_budget(const FitResult& fit, uint64_t budget, int var, const std::vector<int64_t>& fixed) {
  if (var < 0 || static_cast<size_t>(var) >= fit.variables.size()) return Status::bad_input("no such variable to solve for");
  if (fixed.size() != fit.variables.size()) return Status::bad_input("solve: one value per variable is needed");
  BudgetSolution sol;
  sol.var = var;
  std::vector<int64_t> at = fixed;
  const int64_t lo = std::max<int64_t>(1, fit.regime_floor[static_cast<size_t>(var)]);
  auto peak = [&](int64_t v) -> Result<SizePrediction> {
    at[static_cast<size_t>(var)] = v;
    return predict_peak(fit, at);
  };
  // The peak must not decrease with the variable: every kept position's polynomial in it (the
  // others fixed) is a v^2 + b v + c with a >= 0 and a (2 lo + 1) + b >= 0.
  bool grows = false;
  for (const auto& c : fit.activation_candidates) {
    i128 a = 0, b = 0;
    for (size_t j = 0; j < fit.basis.size(); ++j) {
      const auto& m = fit.basis[j];
      const int e = m.exp[static_cast<size_t>(var)];
      if (e == 0 || c.coef[j] == 0) continue;
      exact::Monomial rest = m;
      rest.exp[static_cast<size_t>(var)] = 0;
      i128 r;
      if (!exact::eval(rest, fixed, &r) || !exact::checked_mul(r, c.coef[j], &r)) return Status::bad_input("solve: overflow");
      if (!exact::checked_add(e == 2 ? a : b, r, e == 2 ? &a : &b)) return Status::bad_input("solve: overflow");
    }
    i128 slope;
    if (!exact::checked_mul(a, 2 * static_cast<i128>(lo) + 1, &slope) || !exact::checked_add(slope, b, &slope))
      return Status::bad_input("solve: overflow");
    if (a < 0 || slope < 0)
      return Status::bad_input("the predicted peak decreases as " + fit.variables[static_cast<size_t>(var)].name +
                               " grows at some positions: no single largest size fits the budget");
    grows |= a > 0 || b > 0;
  }
  MOEPROF_ASSIGN_OR_RETURN(SizePrediction first, peak(lo));
  if (first.peak_activation_bytes > budget) {
    sol.none_fits = true;
    sol.largest = lo - 1;
    sol.above = first;
    return sol;
  }
  if (!grows) {
    sol.unbounded = true;
    sol.largest = lo;
    sol.at_largest = first;
    return sol;
  }
  int64_t good = lo, bad = lo;
  SizePrediction good_p = first, bad_p;
  for (int64_t step = 1;; step *= 2) {
    const int64_t cand = lo + step;
    if (step > (int64_t{1} << 61)) return Status::bad_input("solve: the budget holds beyond 2^61");
    auto pr = peak(cand);
    if (!pr) return pr.status();
    if (pr->peak_activation_bytes > budget) {
      bad = cand;
      bad_p = *pr;
      break;
    }
    good = cand;
    good_p = *pr;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    MOEPROF_ASSIGN_OR_RETURN(SizePrediction pm, peak(mid));
    if (pm.peak_activation_bytes > budget) {
      bad = mid;
      bad_p = pm;
    } else {
      good = mid;
      good_p = pm;
    }
  }
  sol.largest = good;
  sol.at_largest = good_p;
  sol.above = bad_p;
  return sol;
}

}  // namespace moeprof::planner
