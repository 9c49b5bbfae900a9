// Size laws: the traces of one program run at different sizes (tokens, chunk, context, batch)
// turned into exact laws per allocation site, and the peak at sizes never run. CPU only; knows
// only the trace model (through RunAnalysis, analysed with keep_lifetimes). docs/budget.md.
//
// - A site is an allocation of the program: (device, name, scope, the occurrence ordinal of that
//   name in that scope); an unnamed allocation with a call stack (a traced program) is named by
//   its user frames. Sites are matched across the traces by that key.
// - Each site's bytes are fitted exactly (rationals over 128-bit integers, fit_math.h) as a
//   polynomial of degree <= 2 in the variables, over subsets of the monomials ordered by degree,
//   then by the number of coefficients: the lowest degree that reproduces every size wins. A law
//   is *confirmed* when more sizes than it has coefficients agree with it, *unconfirmed* with
//   exactly as many. An unconfirmed law must be admissible: it never goes negative as the sizes
//   grow (its top-degree part is >= 0 for positive sizes).
// - Regimes (one variable): where no law fits every size, the smallest sizes are dropped one by
//   one, and a law confirmed on the remaining sizes holds "for T >= the smallest of them" (an
//   executor's clamp or tile at small sizes). A regime law that rests on as many sizes as it has
//   coefficients is offered unconfirmed only when it drops a single size and no size is left over
//   to confirm it.
// - No law: the site is data-dependent. It gets its measured range and a bound: the largest
//   bytes per unit of the first variable measured, times that variable (it holds at every
//   measured size; beyond them it is the stated assumption that the site grows no faster).
// - The peak: the traces must make the same events in the same order (per device: allocations
//   and frees of the same sites). Then at every position the live bytes are a sum of site laws,
//   a polynomial; the predicted peak is its maximum over the positions that can hold a maximum
//   (the last allocation before a free), after removing duplicates and positions whose
//   polynomial another one bounds coefficient by coefficient. Evaluated exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "planner/analysis.h"
#include "planner/fit_math.h"

namespace moeprof::planner {

struct FitVariable {
  std::string name;             // tokens, chunk, context, batch, or any name given
  std::string symbol;           // as laws print it: T, C, L, N, else the name
  std::vector<int64_t> values;  // one per trace, in the order of the traces
};
// The symbol of a variable name: tokens T, chunk C, context L, batch N, else the name itself.
std::string variable_symbol(const std::string& name);

enum class LawState : uint8_t { kConfirmed, kUnconfirmed, kNone };
std::string_view law_state_name(LawState s);

struct SizeLaw {
  LawState state = LawState::kNone;
  struct Term {
    exact::Monomial monomial;
    exact::Q coefficient;
  };
  std::vector<Term> terms;       // non-zero terms, highest degree first
  int degree = 0;                // of the law (0 for a constant)
  size_t coefficients = 0;       // in the monomial set fitted (zero ones included)
  size_t sizes_used = 0;         // sizes (traces) the law was fitted and checked on
  // A regime: the law holds for variable `regime_var` >= regime_min only; the sizes below it
  // (`off_law`, trace indices) are not on it. -1 = every size is on the law.
  int regime_var = -1;
  int64_t regime_min = 0;
  std::vector<size_t> off_law;
  std::string note;              // why unconfirmed, what confirms it, why no law
  std::vector<uint64_t> values;  // the bytes at each trace's size
  // kNone: the measured range, and the bound `bound_per_unit` x variable 0 (ceiling).
  uint64_t min_bytes = 0, max_bytes = 0;
  exact::i128 bound_per_unit = 0;

  bool uses(int var) const;
};

// The law's formula in a person's form, without units: "14,336 * T", "4 * T^2 + 2 * T + 256",
// "(7/2) * T * L"; "0" for no term. Bound form for kNone: "<= 1,234 * T".
std::string law_formula(const SizeLaw& law, const std::vector<FitVariable>& vars);

// The law's value at `at` (one value per variable); kNone laws give their bound. False on overflow.
bool law_value(const SizeLaw& law, const std::vector<int64_t>& at, exact::Q* out);
// The smallest value of variable `var` (the others as in `at`) at which the law alone exceeds
// `budget` bytes; 0 when it never does up to 2^61 (the law does not grow with it).
int64_t law_exceeds_at(const SizeLaw& law, std::vector<int64_t> at, int var, uint64_t budget);

struct FitSite {
  uint32_t name = 0, scope = 0;  // ids into FitResult::strings; an unnamed traced allocation's
                                 // name is its innermost user frames
  uint32_t ordinal = 0;          // occurrence of (name, scope) on its device, from 0
  uint16_t device = 0;
  Category category = Category::kUnknown;
  uint32_t law = 0;              // index into FitResult::laws
};

// An allocation site found in some of the traces only.
struct PartialSite {
  std::string name, scope;
  uint32_t ordinal = 0;
  uint16_t device = 0;
  std::vector<size_t> traces;    // the traces that have it
};

// One position that can hold the peak: the live bytes there as a polynomial over the basis
// (coefficients scaled by FitResult::denominator), with counts of the laws it rests on.
struct PeakCandidate {
  uint16_t device = 0;
  uint32_t site = 0;             // the allocation made there (FitResult::sites index)
  std::vector<exact::i128> coef;
  uint32_t unconfirmed_sites = 0, bounded_sites = 0;
};

struct FitResult {
  std::vector<std::string> strings;     // names and scopes of the sites
  const std::string& name_of(const FitSite& s) const { return strings[s.name]; }
  const std::string& scope_of(const FitSite& s) const { return strings[s.scope]; }
  std::vector<FitVariable> variables;
  std::vector<exact::Monomial> basis;   // every monomial of degree <= 2 in the variables
  exact::i128 denominator = 1;          // common denominator of every law's coefficients
  std::vector<SizeLaw> laws;            // distinct laws (sites with the same bytes share one)
  std::vector<FitSite> sites;           // the sites every trace has, in the first trace's order
  std::vector<PartialSite> partial;
  size_t confirmed_sites = 0, unconfirmed_sites = 0, none_sites = 0;
  // The event sequences: equal per device in every trace, or the first difference.
  bool same_sequence = false;
  std::string sequence_note;
  uint64_t events_per_trace = 0;        // allocations + frees (of the first trace)
  // The allocator's rounding as the traces show it: the largest power of two dividing every
  // allocation's bytes, and every allocation's address.
  uint64_t size_granularity = 0, address_alignment = 0;
  // Positions that can hold the activation peak and the total peak (kept after pruning), and how
  // many there were before it.
  std::vector<PeakCandidate> activation_candidates, total_candidates;
  size_t candidate_positions = 0;
  // The largest regime floor per variable (predictions need every variable >= its floor).
  std::vector<int64_t> regime_floor;
  std::vector<uint64_t> measured_peak_activation, measured_peak_total;  // per trace
};

struct FitOptions {
  int max_degree = 2;
  bool regimes = true;
};

// One trace as the laws need it: its allocations in replay order (name, scope and device: the
// site's key; bytes; category) and the replay order of allocations and frees.
struct SizeTrace {
  RunMeta meta;
  std::vector<std::string> strings;  // the names and scopes the allocations refer to
  struct Alloc {
    uint32_t name = 0, scope = 0;    // into strings; an unnamed allocation with a call stack is
                                     // named by its innermost user frames
    uint16_t device = 0;
    Category category = Category::kUnknown;
    uint64_t bytes = 0, address = 0;
    bool data_dependent = false;     // the record's kFlagDataDependent: its size is the run's data
  };
  std::vector<Alloc> allocs;
  std::vector<uint64_t> events;      // allocation index << 1, with | 1 for its free
  uint64_t peak_activation_bytes = 0, peak_total_bytes = 0;  // the maximum over devices
};
// From an analysis with lifetimes (analyze() with keep_lifetimes).
Result<SizeTrace> size_trace(const RunAnalysis& run);
// Straight from the file, frame by frame, keeping no record: what `moeprof fit` reads. For a
// trace whose records are in replay order and whose allocations all carry a category and a name
// (the executor's); otherwise *needs_analysis is set (and nothing is returned): read it with
// read_trace + analyze (+ category inference) and use size_trace. Replay as analyze() does it:
// an allocation over a live address ends the old one first; frees of unknown addresses, of null
// and of freed ones are ignored.
Result<SizeTrace> read_size_trace(const std::string& path, bool* needs_analysis);

// Fits the laws of traces whose sizes are `vars` (one value per trace, 1 to 3 variables, at least
// two traces). kBadInput when they cannot be fitted (bad variables, too large); traces of
// different programs give a result with same_sequence false.
Result<FitResult> fit_size_laws(const std::vector<const SizeTrace*>& traces, std::vector<FitVariable> vars,
                                const FitOptions& opt = {});
// The same from analyses (size_trace of each).
Result<FitResult> fit_size_laws(const std::vector<const RunAnalysis*>& runs, std::vector<FitVariable> vars,
                                const FitOptions& opt = {});

struct SizePrediction {
  std::vector<int64_t> at;             // one value per variable
  uint64_t peak_activation_bytes = 0, peak_total_bytes = 0;
  uint16_t peak_device = 0;
  std::string peak_site;               // "scope/name" of the allocation that makes the activation peak
  // The maximum is taken over positions where sites with unconfirmed laws are live (conservative:
  // any kept position), or where data-dependent sites count at their bound.
  bool unconfirmed = false, bounded = false;
  size_t unconfirmed_sites_at_peak = 0, bounded_sites_at_peak = 0;
  // The same for the peak total: every category (weights, KV cache, graph pool) counts, so a
  // request table's unconfirmed law makes the total unconfirmed though the activations are not.
  bool total_unconfirmed = false, total_bounded = false;
  size_t total_unconfirmed_sites_at_peak = 0, total_bounded_sites_at_peak = 0;
  bool fractional = false;             // a law gave a fraction of a byte there (rounded up)
};

// The peaks at `at`; kBadInput when the traces' event sequences differ, a value is below a
// regime's floor, or the arithmetic would overflow.
Result<SizePrediction> predict_peak(const FitResult& fit, const std::vector<int64_t>& at);

// The largest value of variable `var` (the others as in `fixed`) whose predicted activation peak
// is at most `budget` bytes.
struct BudgetSolution {
  int var = 0;
  bool unbounded = false;              // the peak does not grow with the variable
  bool none_fits = false;              // not even the smallest value allowed (1 or the regime floor)
  int64_t largest = 0;
  SizePrediction at_largest, above;    // the peak at `largest` and at `largest + 1`
};
Result<BudgetSolution> solve_budget(const FitResult& fit, uint64_t budget, int var, const std::vector<int64_t>& fixed);

}  // namespace moeprof::planner
