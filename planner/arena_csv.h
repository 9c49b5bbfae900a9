// Arena-planning instances in the MiniMalloc CSV format (github google/minimalloc): one buffer per
// line, header `id,lower,upper,size`, the buffer live on the half-open interval [lower, upper).
// The reader takes the column order from the header, ignores columns it does not know (MiniMalloc's
// `gaps`; an input `offset` column is kept only to be replaced on output), honours an optional
// per-buffer `alignment` column, skips blank lines and accepts CRLF line ends. A file without a
// header (first line all numbers) is read as id,lower,upper,size. Every error is
// Status::bad_input naming the file and the 1-based line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "planner/arena.h"

namespace moeprof::planner {

struct ArenaCsv {
  std::vector<Buffer> buffers;          // Buffer::id = the row's index (0-based, in file order)
  std::vector<std::string> ids;         // the `id` column, as written
  bool has_alignment = false;           // an `alignment` column was present
  std::vector<std::string> columns;     // header names as written (without an input `offset` column)
  std::vector<std::string> ignored;     // header names the reader did not use (kept on output)
  std::vector<std::vector<std::string>> rows;  // every row's fields in `columns` order, for output
};

// Parses CSV text; `name` prefixes error messages ("A.csv line 7: ...").
Result<ArenaCsv> parse_arena_csv(std::string_view text, std::string_view name);
// Reads and parses a file.
Result<ArenaCsv> read_arena_csv(const std::string& path);

// The input's columns plus `offset` (replacing an input offset column), one row per buffer in
// input order. offsets.size() must equal csv.buffers.size().
std::string arena_csv_with_offsets(const ArenaCsv& csv, const std::vector<uint64_t>& offsets);
// Writes arena_csv_with_offsets() to `path` ("-" is stdout).
Status write_arena_csv(const std::string& path, const ArenaCsv& csv, const std::vector<uint64_t>& offsets);

}  // namespace moeprof::planner
