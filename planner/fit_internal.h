// Internals of the size laws shared by fit.cpp and fit_laws.cpp (not part of the planner's API).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/fit.h"

namespace moeprof::planner::fit_detail {

// The monomial subsets of the basis, in the order laws are tried: degree, then the number of
// coefficients, then the basis order.
struct SubsetOrder {
  struct Subset {
    uint32_t mask;
    int degree, size;
  };
  std::vector<Subset> subsets;
  SubsetOrder(const std::vector<exact::Monomial>& basis, int max_degree);
};

struct LawInput {
  const std::vector<uint64_t>* values = nullptr;                      // bytes per trace
  const std::vector<std::vector<exact::i128>>* monomial_values = nullptr;  // [trace][basis index]
  const std::vector<exact::Monomial>* basis = nullptr;
  const std::vector<FitVariable>* vars = nullptr;
  const SubsetOrder* order = nullptr;
  int max_degree = 2;
  bool regimes = true;
  bool data_dependent = false;  // the traces mark the site's size as data-dependent: no law is tried
};

SizeLaw fit_law(const LawInput& in);

}  // namespace moeprof::planner::fit_detail
