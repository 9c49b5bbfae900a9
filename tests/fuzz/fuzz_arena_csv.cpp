// Fuzz harness: the MiniMalloc CSV reader (planner::parse_arena_csv) and the arena solver on what
// it accepts. Invariants: a rejected file is bad input naming the line, in one line; an accepted
// one written back with offsets parses to the same buffers (round trip); the solver's plan (greedy
// only, to stay fast) passes the independent checker and is no smaller than LOAD, or the solver
// refuses the input as bad input (sizes that sum past 2^63, alignments that overflow).
#include "core/checked.h"
#include "planner/arena.h"
#include "planner/arena_csv.h"
#include "planner/arena_solver.h"
#include "tests/fuzz/fuzz_util.h"

using namespace moeprof;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto csv = planner::parse_arena_csv(fuzz::as_text(data, size), "fuzz.csv");
  if (!csv.is_ok()) {
    fuzz::check_reader_error(csv.status(), "parse_arena_csv");
    return 0;
  }
  const auto& bs = csv->buffers;
  for (const auto& b : bs) FUZZ_CHECK(b.size >= 1 && b.size <= kMaxBytes && b.lower < b.upper && b.alignment >= 1, "buffer out of range");
  planner::ArenaSolveOptions opt;
  opt.time_limit_s = 0;  // greedy only
  opt.alignment = 1 + size % 512;
  auto sol = planner::solve_arena(bs, opt);
  std::vector<uint64_t> offsets(bs.size(), 0);
  if (sol.is_ok()) {
    planner::ArenaOptions check;
    check.alignment = opt.alignment;
    Status valid = planner::validate_plan(bs, planner::to_arena_plan(*sol), check);
    FUZZ_CHECK(valid.is_ok(), "the solver's plan fails the checker: %s", valid.message().c_str());
    FUZZ_CHECK(sol->arena_bytes >= sol->load_bytes && sol->lower_bound_bytes >= sol->load_bytes, "arena below LOAD");
    offsets = sol->offsets;
  } else {
    fuzz::check_reader_error(sol.status(), "solve_arena");
  }
  auto back = planner::parse_arena_csv(planner::arena_csv_with_offsets(*csv, offsets), "offsets.csv");
  FUZZ_CHECK(back.is_ok(), "written CSV does not parse: %s", back.status().message().c_str());
  FUZZ_CHECK(back->buffers.size() == bs.size() && back->ids == csv->ids, "buffers changed");
  for (size_t i = 0; i < bs.size(); ++i) {
    const auto &a = bs[i], &b = back->buffers[i];
    FUZZ_CHECK(a.size == b.size && a.lower == b.lower && a.upper == b.upper && a.alignment == b.alignment, "buffer %zu changed", i);
  }
  return 0;
}
