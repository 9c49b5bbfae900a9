// Fuzz harness: the category-rule reader (planner::parse_category_rules) and the inference over a
// fixed trace. Invariants: a rejected file is bad input in one line; accepted rules written back
// as "<category> <selector>" parse to the same rules (round trip); the inference gives every
// record a category in range.
#include "planner/categories.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/sample_trace.h"

using namespace moeprof;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto rules = planner::parse_category_rules(fuzz::as_text(data, size), "fuzz.categories");
  if (!rules.is_ok()) {
    fuzz::check_reader_error(rules.status(), "parse_category_rules");
    return 0;
  }
  std::string canonical;
  for (const auto& r : rules.value()) canonical += std::string(category_name(r.category)) + " " + r.selector.text() + "\n";
  auto again = planner::parse_category_rules(canonical, "canonical.categories");
  FUZZ_CHECK(again.is_ok(), "canonical text does not parse: %s\n%s", again.status().message().c_str(), canonical.c_str());
  FUZZ_CHECK(again->size() == rules->size(), "rule count changed");
  for (size_t i = 0; i < again->size(); ++i)
    FUZZ_CHECK((*again)[i].category == (*rules)[i].category && (*again)[i].selector.text() == (*rules)[i].selector.text(),
               "rule %zu changed", i);
  static const Trace trace = fuzz::sample_trace();
  const auto inferred = planner::infer_categories(trace, *rules);
  FUZZ_CHECK(inferred.by_record.size() == trace.records.size(), "one category per record");
  for (Category c : inferred.by_record) FUZZ_CHECK(static_cast<int>(c) < kNumCategories, "category out of range");
  return 0;
}
