// "Did you mean": the candidates nearest to a mistyped name (a model, a subcommand, an option, a
// what-if selector's name), for one-line error messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moeprof {

// Case-insensitive optimal-string-alignment distance (insertions, deletions, substitutions and
// transpositions of adjacent characters each cost 1).
size_t edit_distance(std::string_view a, std::string_view b);

// Up to `max_results` candidates within a distance that grows with the query's length (1 for
// short names, about a third of the length for long ones), nearest first (ties in the candidates'
// order). A candidate that equals the query ignoring case, or that starts with it (at least 3
// characters typed), always qualifies.
std::vector<std::string> nearest_names(std::string_view query, const std::vector<std::string>& candidates,
                                       size_t max_results = 3);

// "; did you mean 'a' or 'b'?" for nearest_names, or "" when none is near.
std::string did_you_mean(std::string_view query, const std::vector<std::string>& candidates, size_t max_results = 3);

}  // namespace moeprof
