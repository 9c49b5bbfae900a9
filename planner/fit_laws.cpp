// One site's law from its bytes at each size: the monomial subsets in order (degree, then number
// of coefficients), every size first, then the regimes (the smallest sizes dropped), then the
// unconfirmed candidates, else no law (planner/fit.h has the rules).
#include <algorithm>
#include <bit>
#include <numeric>

#include "planner/fit_internal.h"

namespace moeprof::planner {

using exact::i128;
using exact::Q;

std::string variable_symbol(const std::string& name) {
  if (name == "tokens") return "T";
  if (name == "chunk") return "C";
  if (name == "context") return "L";
  if (name == "batch") return "N";
  return name;
}

std::string_view law_state_name(LawState s) {
  switch (s) {
    case LawState::kConfirmed: return "confirmed";
    case LawState::kUnconfirmed: return "unconfirmed";
    case LawState::kNone: return "none";
  }
  return "none";
}

bool SizeLaw::uses(int var) const {
  for (const auto& t : terms)
    if (t.monomial.uses(var)) return true;
  return state == LawState::kNone && var == 0;
}

namespace {

std::string monomial_text(const exact::Monomial& m, const std::vector<FitVariable>& vars) {
  std::string out;
  for (size_t v = 0; v < vars.size() && v < static_cast<size_t>(exact::kMaxVars); ++v) {
    if (m.exp[v] == 0) continue;
    if (!out.empty()) out += " * ";
    out += vars[v].symbol;
    if (m.exp[v] > 1) out += "^" + std::to_string(m.exp[v]);
  }
  return out;
}

}  // namespace

std::string law_formula(const SizeLaw& law, const std::vector<FitVariable>& vars) {
  if (law.state == LawState::kNone)
    return "<= " + exact::to_string(law.bound_per_unit, true) + " * " + (vars.empty() ? "x" : vars[0].symbol);
  std::string out;
  for (const auto& t : law.terms) {
    Q c = t.coefficient;
    const bool neg = c.num < 0;
    if (neg) c.num = -c.num;
    if (out.empty()) out += neg ? "-" : "";
    else out += neg ? " - " : " + ";
    const std::string mono = monomial_text(t.monomial, vars);
    const std::string coef = c.den == 1 ? exact::to_string(c.num, true) : "(" + exact::to_string(c, true) + ")";
    if (mono.empty()) out += coef;
    else if (c.num == 1 && c.den == 1) out += mono;
    else out += coef + " * " + mono;
  }
  return out.empty() ? "0" : out;
}

bool law_value(const SizeLaw& law, const std::vector<int64_t>& at, Q* out) {
  if (law.state == LawState::kNone) {
    i128 v;
    if (at.empty() || !exact::checked_mul(law.bound_per_unit, at[0], &v)) return false;
    *out = Q{v, 1};
    return true;
  }
  Q sum;
  for (const auto& t : law.terms) {
    i128 m;
    Q term;
    if (!exact::eval(t.monomial, at, &m) || !exact::mul(t.coefficient, Q{m, 1}, &term) || !exact::add(sum, term, &sum)) return false;
  }
  *out = sum;
  return true;
}

int64_t law_exceeds_at(const SizeLaw& law, std::vector<int64_t> at, int var, uint64_t budget) {
  auto over = [&](int64_t v) {
    at[static_cast<size_t>(var)] = v;
    Q q;
    if (!law_value(law, at, &q)) return true;  // beyond 128-bit arithmetic: far past any budget
    return q.num > static_cast<i128>(budget) * q.den;
  };
  if (over(1)) return 1;
  int64_t good = 1, bad = 0;
  for (int64_t step = 1; step <= (int64_t{1} << 61); step *= 2) {
    if (over(1 + step)) {
      bad = 1 + step;
      break;
    }
    good = 1 + step;
  }
  if (bad == 0) return 0;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (over(mid) ? bad : good) = mid;
  }
  return bad;
}

namespace fit_detail {

SubsetOrder::SubsetOrder(const std::vector<exact::Monomial>& basis, int max_degree) {
  const size_t m = basis.size();
  for (uint32_t mask = 1; mask < (1u << m); ++mask) {
    int deg = 0;
    for (size_t j = 0; j < m; ++j)
      if (mask & (1u << j)) deg = std::max(deg, basis[j].degree());
    if (deg <= max_degree) subsets.push_back({mask, deg, std::popcount(mask)});
  }
  std::stable_sort(subsets.begin(), subsets.end(), [](const Subset& a, const Subset& b) {
    if (a.degree != b.degree) return a.degree < b.degree;
    return a.size < b.size;
  });
}

namespace {

struct Attempt {
  bool solved = false;
  std::vector<Q> coef;  // per basis monomial (zero outside the subset)
};

// Fits the subset's monomials to the points (trace indices) exactly.
Attempt try_subset(const LawInput& in, uint32_t mask, const std::vector<size_t>& points) {
  Attempt at;
  std::vector<size_t> cols;
  for (size_t j = 0; j < in.basis->size(); ++j)
    if (mask & (1u << j)) cols.push_back(j);
  if (points.size() < cols.size()) return at;
  std::vector<std::vector<i128>> a(points.size(), std::vector<i128>(cols.size()));
  std::vector<i128> y(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    for (size_t k = 0; k < cols.size(); ++k) a[i][k] = (*in.monomial_values)[points[i]][cols[k]];
    y[i] = static_cast<i128>((*in.values)[points[i]]);
  }
  std::vector<Q> c;
  if (exact::solve(a, y, &c) != exact::SolveStatus::kSolved) return at;
  at.solved = true;
  at.coef.assign(in.basis->size(), Q{});
  for (size_t k = 0; k < cols.size(); ++k) at.coef[cols[k]] = c[k];
  return at;
}

// The top-degree part never negative for positive sizes (copositive for the quadratic part:
// squares >= 0, and a negative cross term at most 2 sqrt(a c), checked as b^2 <= 4 a c).
bool admissible(const std::vector<exact::Monomial>& basis, const std::vector<Q>& coef) {
  int deg = -1;
  for (size_t j = 0; j < basis.size(); ++j)
    if (!coef[j].is_zero()) deg = std::max(deg, basis[j].degree());
  if (deg < 0) return true;
  auto coef_of = [&](int e0, int e1, int e2) -> Q {
    for (size_t j = 0; j < basis.size(); ++j)
      if (basis[j].exp[0] == e0 && basis[j].exp[1] == e1 && basis[j].exp[2] == e2) return coef[j];
    return Q{};
  };
  for (size_t j = 0; j < basis.size(); ++j) {
    if (basis[j].degree() != deg || exact::sign(coef[j]) >= 0) continue;
    if (deg < 2) return false;
    // A negative term of degree 2: a square is never allowed; a cross term x_v x_w needs
    // b^2 <= 4 a_vv a_ww.
    int v = -1, w = -1;
    for (int k = 0; k < exact::kMaxVars; ++k)
      for (int e = 0; e < basis[j].exp[static_cast<size_t>(k)]; ++e) (v < 0 ? v : w) = k;
    if (w < 0 || v == w) return false;
    std::array<int, 3> ev{}, ew{};
    ev[static_cast<size_t>(v)] = 2;
    ew[static_cast<size_t>(w)] = 2;
    const Q a = coef_of(ev[0], ev[1], ev[2]), c = coef_of(ew[0], ew[1], ew[2]);
    Q b2, ac, four_ac;
    if (exact::sign(a) <= 0 || exact::sign(c) <= 0) return false;
    if (!exact::mul(coef[j], coef[j], &b2) || !exact::mul(a, c, &ac) || !exact::mul(ac, Q{4, 1}, &four_ac)) return false;
    Q diff;
    if (!exact::sub(four_ac, b2, &diff) || exact::sign(diff) < 0) return false;
  }
  return true;
}

void set_terms(SizeLaw* law, const std::vector<exact::Monomial>& basis, const std::vector<Q>& coef, int size) {
  law->terms.clear();
  law->degree = 0;
  law->coefficients = static_cast<size_t>(size);
  for (size_t j = basis.size(); j-- > 0;) {
    if (coef[j].is_zero()) continue;
    law->terms.push_back({basis[j], coef[j]});
    law->degree = std::max(law->degree, basis[j].degree());
  }
  // Highest degree first; within a degree, the basis order (a^2 before ab before b^2).
  std::stable_sort(law->terms.begin(), law->terms.end(),
                   [](const SizeLaw::Term& a, const SizeLaw::Term& b) { return a.monomial.degree() > b.monomial.degree(); });
  std::vector<SizeLaw::Term> ordered;
  for (int d = law->degree; d >= 0; --d)
    for (size_t j = 0; j < basis.size(); ++j)
      if (basis[j].degree() == d && !coef[j].is_zero()) ordered.push_back({basis[j], coef[j]});
  law->terms = std::move(ordered);
}

std::string commas(int64_t v) { return exact::to_string(static_cast<i128>(v), true); }

}  // namespace

SizeLaw fit_law(const LawInput& in) {
  const auto& vals = *in.values;
  const size_t n = vals.size();
  SizeLaw law;
  law.values = vals;
  law.min_bytes = *std::min_element(vals.begin(), vals.end());
  law.max_bytes = *std::max_element(vals.begin(), vals.end());
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  const std::string sym0 = in.vars->empty() ? "x" : (*in.vars)[0].symbol;
  // No law: the range and the bound per unit of the first variable.
  auto no_law = [&](const std::string& why) {
    law.state = LawState::kNone;
    const auto& x0 = (*in.vars)[0].values;
    i128 per = 0;
    for (size_t t = 0; t < n; ++t)
      if (x0[t] > 0) per = std::max(per, exact::ceil_div(static_cast<i128>(vals[t]), x0[t]));
    law.bound_per_unit = per;
    law.note = why + " (data-dependent): measured " + commas(static_cast<int64_t>(law.min_bytes)) + " to " +
               commas(static_cast<int64_t>(law.max_bytes)) + " B; bound " + exact::to_string(per, true) + " B per unit of " + sym0 +
               " (the largest measured), assumed beyond the measured sizes";
    return law;
  };
  if (in.data_dependent)
    return no_law("sized by the run's data (the trace marks it: the routing), no law tried on its " + std::to_string(n) + " sizes");

  // 1. Every size: the first subset confirmed by more sizes than it has coefficients.
  Attempt unconfirmed_all;
  int unconfirmed_all_size = 0;
  bool rejected_negative = false;
  for (const auto& s : in.order->subsets) {
    if (static_cast<size_t>(s.size) > n) continue;
    Attempt at = try_subset(in, s.mask, all);
    if (!at.solved) continue;
    if (static_cast<size_t>(s.size) < n) {
      law.state = LawState::kConfirmed;
      set_terms(&law, *in.basis, at.coef, s.size);
      law.sizes_used = n;
      return law;
    }
    if (!unconfirmed_all.solved) {
      if (admissible(*in.basis, at.coef)) {
        unconfirmed_all = std::move(at);
        unconfirmed_all_size = s.size;
      } else {
        rejected_negative = true;
      }
    }
  }

  // 2. Regimes of one variable: drop the smallest sizes; a law confirmed on the rest.
  Attempt unconfirmed_regime;
  int unconfirmed_regime_size = 0;
  std::vector<size_t> regime_points;
  int64_t regime_min = 0;
  if (in.regimes && in.vars->size() == 1) {
    std::vector<size_t> by_x = all;
    const auto& x = (*in.vars)[0].values;
    std::stable_sort(by_x.begin(), by_x.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
    for (size_t drop = 1; drop + 2 <= n; ++drop) {
      // Sizes equal to the smallest kept one stay together.
      if (x[by_x[drop]] == x[by_x[drop - 1]]) continue;
      std::vector<size_t> pts(by_x.begin() + static_cast<ptrdiff_t>(drop), by_x.end());
      for (const auto& s : in.order->subsets) {
        if (static_cast<size_t>(s.size) > pts.size()) continue;
        Attempt at = try_subset(in, s.mask, pts);
        if (!at.solved) continue;
        if (static_cast<size_t>(s.size) < pts.size()) {
          law.state = LawState::kConfirmed;
          set_terms(&law, *in.basis, at.coef, s.size);
          law.sizes_used = pts.size();
          law.regime_var = 0;
          law.regime_min = x[pts.front()];
          law.off_law.assign(by_x.begin(), by_x.begin() + static_cast<ptrdiff_t>(drop));
          std::string off;
          for (size_t t : law.off_law)
            off += (off.empty() ? "" : ", ") + sym0 + " = " + commas(x[t]) + ": " + commas(static_cast<int64_t>(vals[t])) + " B";
          law.note = "holds for " + sym0 + " >= " + commas(law.regime_min) + " (confirmed on " + std::to_string(pts.size()) +
                     " sizes); off the law below: " + off;
          return law;
        }
        // Unconfirmed regime: one size dropped, none left over to confirm it.
        if (drop == 1 && !unconfirmed_regime.solved && static_cast<size_t>(s.size) + 1 == n && admissible(*in.basis, at.coef)) {
          unconfirmed_regime = std::move(at);
          unconfirmed_regime_size = s.size;
          regime_points = pts;
          regime_min = x[pts.front()];
        }
      }
    }
  }

  // 3. Unconfirmed: every size, else the regime.
  const std::string one_more = "a run at one more size confirms or refutes it";
  if (unconfirmed_all.solved) {
    law.state = LawState::kUnconfirmed;
    set_terms(&law, *in.basis, unconfirmed_all.coef, unconfirmed_all_size);
    law.sizes_used = n;
    law.note = "from " + std::to_string(n) + " sizes for " + std::to_string(unconfirmed_all_size) + " coefficients: unconfirmed; " +
               one_more;
    return law;
  }
  if (unconfirmed_regime.solved) {
    const auto& x = (*in.vars)[0].values;
    law.state = LawState::kUnconfirmed;
    set_terms(&law, *in.basis, unconfirmed_regime.coef, unconfirmed_regime_size);
    law.sizes_used = regime_points.size();
    law.regime_var = 0;
    law.regime_min = regime_min;
    for (size_t t : all)
      if (x[t] < regime_min) law.off_law.push_back(t);
    std::string off;
    for (size_t t : law.off_law) off += (off.empty() ? "" : ", ") + sym0 + " = " + commas(x[t]) + ": " + commas(static_cast<int64_t>(vals[t])) + " B";
    const int64_t xmax = x[regime_points.back()];
    law.note = "holds for " + sym0 + " >= " + commas(regime_min) + " from " + std::to_string(regime_points.size()) + " sizes for " +
               std::to_string(unconfirmed_regime_size) + " coefficients: unconfirmed (off the law: " + off + "; no law of degree <= " +
               std::to_string(in.max_degree) + " fits all " + std::to_string(n) + " sizes" +
               (rejected_negative ? ", and the one through all of them goes negative as " + sym0 + " grows" : "") +
               "); a run at one more size " + sym0 + " >= " + commas(regime_min) + " (e.g. " + sym0 + " = " + commas(2 * xmax) +
               ") confirms or refutes it";
    return law;
  }

  // 4. No law.
  return no_law("no law of degree <= " + std::to_string(in.max_degree) + " fits the " + std::to_string(n) + " sizes");
}

}  // namespace fit_detail

}  // namespace moeprof::planner
