// Exact arithmetic for the size laws (planner/fit.h): rationals over 128-bit integers with every
// operation checked for overflow, monomials of degree <= 2 in up to three variables, and the exact
// solution of a small linear system by Gaussian elimination over those rationals. No floating
// point anywhere: a law either reproduces every byte it was fitted on or it is not a law.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace moeprof::planner::exact {

using i128 = __int128;

// num / den in lowest terms, den > 0. Operations return false on overflow (the result is then
// unspecified): the caller treats the law as not computable, never as a wrong number.
struct Q {
  i128 num = 0;
  i128 den = 1;
  bool is_zero() const { return num == 0; }
  bool is_integer() const { return den == 1; }
  bool operator==(const Q& o) const { return num == o.num && den == o.den; }
};

bool checked_add(i128 a, i128 b, i128* out);
bool checked_mul(i128 a, i128 b, i128* out);
i128 gcd(i128 a, i128 b);  // >= 0
bool make_q(i128 num, i128 den, Q* out);  // den != 0; reduces
bool add(const Q& a, const Q& b, Q* out);
bool sub(const Q& a, const Q& b, Q* out);
bool mul(const Q& a, const Q& b, Q* out);
bool div(const Q& a, const Q& b, Q* out);  // b != 0
int sign(const Q& q);
// Floor and ceiling of num / den.
i128 floor_div(i128 num, i128 den);
i128 ceil_div(i128 num, i128 den);

// Decimal text of a 128-bit integer; with_commas inserts thousands separators ("14,336").
std::string to_string(i128 v, bool with_commas = false);
// "14,336", "-3", "7/2" (separators in both parts when with_commas).
std::string to_string(const Q& q, bool with_commas = false);

inline constexpr int kMaxVars = 3;

// x_0^e0 * x_1^e1 * x_2^e2.
struct Monomial {
  std::array<uint8_t, kMaxVars> exp{};
  int degree() const { return exp[0] + exp[1] + exp[2]; }
  bool uses(int var) const { return exp[static_cast<size_t>(var)] > 0; }
  bool operator==(const Monomial& o) const { return exp == o.exp; }
};

// Every monomial of degree <= max_degree in `vars` variables, by degree, then with the earlier
// variables' powers first: 1, a, b, a^2, ab, b^2.
std::vector<Monomial> monomials(int vars, int max_degree);
// The monomial's value at an integer point; false on overflow.
bool eval(const Monomial& m, const std::vector<int64_t>& x, i128* out);

enum class SolveStatus { kSolved, kInconsistent, kUnderdetermined, kOverflow };

// Solves sum_j c_j * a[i][j] = y[i] for every row i exactly (n rows, m columns, any n). kSolved:
// one solution satisfies every row; kInconsistent: none does; kUnderdetermined: the rows do not
// determine the coefficients (e.g. a variable with one value only).
SolveStatus solve(const std::vector<std::vector<i128>>& a, const std::vector<i128>& y, std::vector<Q>* c);

}  // namespace moeprof::planner::exact
