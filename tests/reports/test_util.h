// Helpers shared by the report tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

namespace moeprof::testing {

inline std::string golden_dir() { return std::string(MOEPROF_SOURCE_DIR) + "/tests/golden"; }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A fresh empty directory under the system temp dir.
inline std::filesystem::path temp_dir(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() /
           ("moeprof_" + tag + "_" + std::to_string(std::hash<std::string>{}(tag + std::to_string(::getpid()))));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace moeprof::testing
