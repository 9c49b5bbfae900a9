#include "planner/fit_math.h"

#include <algorithm>
#include <utility>

namespace moeprof::planner::exact {

bool checked_add(i128 a, i128 b, i128* out) { return !__builtin_add_overflow(a, b, out); }
bool checked_mul(i128 a, i128 b, i128* out) { return !__builtin_mul_overflow(a, b, out); }

i128 gcd(i128 a, i128 b) {
  // Magnitudes as unsigned: |INT128_MIN| does not fit in i128.
  using u128 = unsigned __int128;
  u128 x = a < 0 ? u128(0) - u128(a) : u128(a), y = b < 0 ? u128(0) - u128(b) : u128(b);
  while (y != 0) {
    const u128 t = x % y;
    x = y;
    y = t;
  }
  return static_cast<i128>(x);  // callers never pass two INT128_MIN
}

bool make_q(i128 num, i128 den, Q* out) {
  if (den == 0) return false;
  const i128 g = gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  if (den < 0) {
    if (num == -num && num != 0) return false;  // INT128_MIN
    num = -num;
    den = -den;
  }
  out->num = num;
  out->den = den;
  return true;
}

bool add(const Q& a, const Q& b, Q* out) {
  const i128 g = gcd(a.den, b.den);
  i128 l, r, d;
  if (!checked_mul(a.num, b.den / g, &l) || !checked_mul(b.num, a.den / g, &r) || !checked_add(l, r, &l) ||
      !checked_mul(a.den / g, b.den, &d))
    return false;
  return make_q(l, d, out);
}

bool sub(const Q& a, const Q& b, Q* out) {
  if (b.num == -b.num && b.num != 0) return false;
  return add(a, Q{-b.num, b.den}, out);
}

bool mul(const Q& a, const Q& b, Q* out) {
  // Cross-reduce first: smaller intermediates.
  const i128 g1 = gcd(a.num, b.den), g2 = gcd(b.num, a.den);
  const i128 an = g1 > 1 ? a.num / g1 : a.num, bd = g1 > 1 ? b.den / g1 : b.den;
  const i128 bn = g2 > 1 ? b.num / g2 : b.num, ad = g2 > 1 ? a.den / g2 : a.den;
  i128 n, d;
  if (!checked_mul(an, bn, &n) || !checked_mul(ad, bd, &d)) return false;
  return make_q(n, d, out);
}

bool div(const Q& a, const Q& b, Q* out) {
  if (b.num == 0) return false;
  Q inv;
  if (!make_q(b.den, b.num, &inv)) return false;
  return mul(a, inv, out);
}

int sign(const Q& q) { return q.num > 0 ? 1 : q.num < 0 ? -1 : 0; }

i128 floor_div(i128 num, i128 den) {
  i128 q = num / den;
  if ((num % den != 0) && ((num < 0) != (den < 0))) --q;
  return q;
}

i128 ceil_div(i128 num, i128 den) {
  i128 q = num / den;
  if ((num % den != 0) && ((num < 0) == (den < 0))) ++q;
  return q;
}

std::string to_string(i128 v, bool with_commas) {
  using u128 = unsigned __int128;
  const bool neg = v < 0;
  u128 m = neg ? u128(0) - u128(v) : u128(v);
  std::string digits;
  do {
    digits.push_back(static_cast<char>('0' + static_cast<int>(m % 10)));
    m /= 10;
  } while (m != 0);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (with_commas && i > 0 && i % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  if (neg) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out;
}

std::string to_string(const Q& q, bool with_commas) {
  if (q.den == 1) return to_string(q.num, with_commas);
  return to_string(q.num, with_commas) + "/" + to_string(q.den, with_commas);
}

std::vector<Monomial> monomials(int vars, int max_degree) {
  std::vector<Monomial> out;
  vars = std::clamp(vars, 0, kMaxVars);
  for (int d = 0; d <= max_degree; ++d)
    for (int e0 = d; e0 >= 0; --e0)
      for (int e1 = d - e0; e1 >= 0; --e1) {
        const int e2 = d - e0 - e1;
        if ((vars < 1 && e0 > 0) || (vars < 2 && e1 > 0) || (vars < 3 && e2 > 0)) continue;
        Monomial m;
        m.exp = {static_cast<uint8_t>(e0), static_cast<uint8_t>(e1), static_cast<uint8_t>(e2)};
        out.push_back(m);
      }
  return out;
}

bool eval(const Monomial& m, const std::vector<int64_t>& x, i128* out) {
  i128 v = 1;
  for (size_t k = 0; k < x.size() && k < static_cast<size_t>(kMaxVars); ++k)
    for (int e = 0; e < m.exp[k]; ++e)
      if (!checked_mul(v, x[k], &v)) return false;
  *out = v;
  return true;
}

SolveStatus solve(const std::vector<std::vector<i128>>& a, const std::vector<i128>& y, std::vector<Q>* c) {
  const size_t n = a.size(), m = n ? a[0].size() : 0;
  // Augmented matrix of rationals.
  std::vector<std::vector<Q>> r(n, std::vector<Q>(m + 1));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < m; ++j) r[i][j] = Q{a[i][j], 1};
    r[i][m] = Q{y[i], 1};
  }
  size_t row = 0;
  std::vector<size_t> pivot_col;
  for (size_t col = 0; col < m; ++col) {
    size_t p = row;
    while (p < n && r[p][col].is_zero()) ++p;
    if (p == n) return SolveStatus::kUnderdetermined;
    std::swap(r[p], r[row]);
    const Q piv = r[row][col];
    for (size_t j = col; j <= m; ++j)
      if (!div(r[row][j], piv, &r[row][j])) return SolveStatus::kOverflow;
    for (size_t i = 0; i < n; ++i) {
      if (i == row || r[i][col].is_zero()) continue;
      const Q f = r[i][col];
      for (size_t j = col; j <= m; ++j) {
        Q t;
        if (!mul(f, r[row][j], &t) || !sub(r[i][j], t, &r[i][j])) return SolveStatus::kOverflow;
      }
    }
    pivot_col.push_back(col);
    ++row;
  }
  // Rows beyond the m pivots must read 0 = 0.
  for (size_t i = row; i < n; ++i)
    if (!r[i][m].is_zero()) return SolveStatus::kInconsistent;
  c->assign(m, Q{});
  for (size_t k = 0; k < pivot_col.size(); ++k) (*c)[pivot_col[k]] = r[k][m];
  return SolveStatus::kSolved;
}

}  // namespace moeprof::planner::exact
