// MiniMalloc CSV reader and writer (see arena_csv.h).
#include "planner/arena_csv.h"

#include "core/checked.h"
#include "core/utf8.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unordered_map>

namespace moeprof::planner {

namespace {

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A field's text: outer blanks, then one pair of outer quotes, removed.
std::string_view trim(std::string_view s) {
  s = trim_blanks(s);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

bool is_uint(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Parses a decimal uint64; false on anything else (sign, fraction, overflow).
bool parse_u64(std::string_view s, uint64_t* v) {
  if (!is_uint(s) || s.size() > 20) return false;
  uint64_t r = 0;
  for (char c : s) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (r > (UINT64_MAX - d) / 10) return false;
    r = r * 10 + d;
  }
  *v = r;
  return true;
}

std::string lower_case(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return r;
}

enum Col : int { kId = 0, kLower, kUpper, kSize, kAlign, kNumCols };

// The column a header name stands for; -1 for one the reader ignores, -2 for `offset`.
int column_of(const std::string& name) {
  if (name == "id" || name == "buffer" || name == "name") return kId;
  if (name == "lower" || name == "begin" || name == "start") return kLower;
  if (name == "upper" || name == "end") return kUpper;
  if (name == "size" || name == "bytes") return kSize;
  if (name == "alignment" || name == "align") return kAlign;
  if (name == "offset") return -2;
  return -1;
}

}  // namespace

Result<ArenaCsv> parse_arena_csv(std::string_view text, std::string_view name) {
  ArenaCsv csv;
  int col[kNumCols] = {-1, -1, -1, -1, -1};
  int offset_col = -1;
  size_t expected_fields = 0;
  bool header_done = false;
  std::unordered_map<std::string, size_t> seen_ids;  // id -> line
  auto err = [&](size_t line, const std::string& what) {
    return Status::bad_input(std::string(name) + " line " + std::to_string(line) + ": " + what);
  };

  // Lines end in LF, CRLF or a lone CR (old Mac files and some spreadsheet exports).
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find_first_of("\r\n", pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + (nl + 1 < text.size() && text[nl] == '\r' && text[nl + 1] == '\n' ? 2 : 1);
    ++line_no;
    if (line_no == 1 && line.size() >= 3 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // UTF-8 BOM
    // Blank lines and comments ('#' first, after blanks only: a quoted "#..." field is data).
    if (trim_blanks(line).empty() || trim_blanks(line).front() == '#') continue;
    std::vector<std::string_view> f = split(line);

    if (!header_done) {
      header_done = true;
      bool numeric = true;
      for (auto v : f) numeric = numeric && is_uint(v);
      if (!numeric) {
        for (size_t i = 0; i < f.size(); ++i) {
          const std::string n = lower_case(f[i]);
          if (n.empty()) return err(line_no, "empty column name in the header (column " + std::to_string(i + 1) + ")");
          const int c = column_of(n);
          if (c == -2) {
            if (offset_col >= 0) return err(line_no, "column 'offset' appears twice");
            offset_col = static_cast<int>(i);
            continue;
          }
          if (c >= 0) {
            if (col[c] >= 0) return err(line_no, "column '" + printable(f[i]) + "' appears twice");
            col[c] = static_cast<int>(i);
          } else {
            csv.ignored.emplace_back(f[i]);
          }
          csv.columns.emplace_back(f[i]);
        }
        expected_fields = f.size();
        for (auto [c, cname] : {std::pair{kId, "id"}, {kLower, "lower"}, {kUpper, "upper"}, {kSize, "size"}}) {
          if (col[c] < 0) return err(line_no, std::string("the header has no '") + cname + "' column (need id,lower,upper,size)");
        }
        csv.has_alignment = col[kAlign] >= 0;
        continue;
      }
      // No header: id,lower,upper,size[,alignment].
      if (f.size() != 4 && f.size() != 5) {
        return err(line_no, "expected a header or 4 fields id,lower,upper,size, found " + std::to_string(f.size()) + " fields");
      }
      for (int c = 0; c < static_cast<int>(f.size()); ++c) col[c] = c;
      csv.columns = {"id", "lower", "upper", "size"};
      if (f.size() == 5) csv.columns.emplace_back("alignment");
      csv.has_alignment = f.size() == 5;
      expected_fields = f.size();
    }

    if (f.size() != expected_fields) {
      return err(line_no, "expected " + std::to_string(expected_fields) + " fields, found " + std::to_string(f.size()));
    }
    uint64_t v[kNumCols] = {0, 0, 0, 0, 1};
    for (int c = kLower; c < kNumCols; ++c) {
      if (col[c] < 0) continue;
      const std::string_view s = f[static_cast<size_t>(col[c])];
      static const char* kNames[kNumCols] = {"id", "lower", "upper", "size", "alignment"};
      if (!parse_u64(s, &v[c])) {
        return err(line_no, std::string(kNames[c]) + " '" + printable(s) +
                                "' is not an unsigned 64-bit integer");
      }
    }
    const std::string_view id = f[static_cast<size_t>(col[kId])];
    if (id.empty()) return err(line_no, "empty id");
    if (v[kLower] >= v[kUpper]) {
      return err(line_no, "lower " + std::to_string(v[kLower]) + " is not below upper " + std::to_string(v[kUpper]) +
                              " (a buffer lives on [lower, upper))");
    }
    if (v[kSize] == 0) return err(line_no, "size is 0");
    if (v[kSize] > kMaxBytes) return err(line_no, "size " + std::to_string(v[kSize]) + " exceeds the limit of 2^63-1 bytes");
    if (v[kAlign] == 0) return err(line_no, "alignment is 0");
    auto [it, fresh] = seen_ids.emplace(std::string(id), line_no);
    if (!fresh) return err(line_no, "duplicate id '" + printable(id) + "' (first on line " + std::to_string(it->second) + ")");

    Buffer b;
    b.id = csv.buffers.size();
    b.lower = v[kLower];
    b.upper = v[kUpper];
    b.size = v[kSize];
    b.alignment = v[kAlign];
    csv.buffers.push_back(b);
    csv.ids.emplace_back(id);
    std::vector<std::string> row;
    row.reserve(csv.columns.size());
    for (size_t i = 0; i < f.size(); ++i)
      if (static_cast<int>(i) != offset_col) row.emplace_back(f[i]);
    csv.rows.push_back(std::move(row));
  }
  if (!header_done) return Status::bad_input(std::string(name) + ": no header and no buffers");
  return csv;
}

Result<ArenaCsv> read_arena_csv(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::bad_input(path + ": is a directory, not a CSV file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::bad_input(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::bad_input(path + ": read error");
  return parse_arena_csv(ss.str(), path);
}

namespace {

// A field as the reader gets it back: quoted when it would start a comment line ('#'), lose
// something to trim() (outer blanks, outer quotes), or begin with a UTF-8 BOM (the reader drops a
// bare one at the start of the file, after which "\xEF\xBB\xBF#h" would read as a comment).
std::string field_text(const std::string& f) {
  if ((!f.empty() && f.front() == '#') || trim(f) != f || f.rfind("\xEF\xBB\xBF", 0) == 0) return '"' + f + '"';
  return f;
}

}  // namespace

std::string arena_csv_with_offsets(const ArenaCsv& csv, const std::vector<uint64_t>& offsets) {
  std::string out;
  out.reserve(csv.rows.size() * 40 + 64);
  for (const auto& c : csv.columns) out += field_text(c) + ",";
  out += "offset\n";
  for (size_t i = 0; i < csv.rows.size(); ++i) {
    for (const auto& f : csv.rows[i]) out += field_text(f) + ",";
    out += std::to_string(i < offsets.size() ? offsets[i] : 0);
    out += '\n';
  }
  return out;
}

Status write_arena_csv(const std::string& path, const ArenaCsv& csv, const std::vector<uint64_t>& offsets) {
  if (offsets.size() != csv.buffers.size()) {
    return Status::bad_input("write_arena_csv: " + std::to_string(offsets.size()) + " offsets for " +
                             std::to_string(csv.buffers.size()) + " buffers");
  }
  const std::string text = arena_csv_with_offsets(csv, offsets);
  if (path == "-") {
    std::cout << text;
    std::cout.flush();
    return std::cout ? Status::ok() : Status::run_failure("cannot write to stdout");
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::bad_input(path + ": cannot open for writing");
  out << text;
  out.close();
  if (!out) return Status::run_failure(path + ": write error");
  return Status::ok();
}

}  // namespace moeprof::planner
