// The what-if rule files of examples/what-if/, compiled in (cmake/EmbedFiles.cmake): `moeprof run`
// predicts its reuse and fixes runs from the baseline trace with them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace moeprof {

// {file stem, contents}: "sglang-pr-25379", "beyond-seed".
const std::vector<std::pair<std::string, std::string>>& builtin_rules();

}  // namespace moeprof
