// MiniMalloc CSV reader/writer: column order from the header, extra columns, alignment, CRLF,
// blank lines, and every error naming its line.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "planner/arena_csv.h"

using namespace moeprof;
using namespace moeprof::planner;

namespace {

std::string error_of(const std::string& text) {
  auto r = parse_arena_csv(text, "x.csv");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == ErrorCode::kBadInput);
  return r.status().message();
}

}  // namespace

TEST_CASE("csv: the MiniMalloc format, in any column order, with extra columns", "[planner][arena][csv]") {
  auto r = parse_arena_csv("id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\n", "x.csv");
  REQUIRE(r.is_ok());
  REQUIRE(r->buffers.size() == 2);
  CHECK(r->ids == std::vector<std::string>{"b1", "b2"});
  CHECK(r->buffers[1].lower == 3);
  CHECK(r->buffers[1].upper == 9);
  CHECK(r->buffers[1].size == 4);
  CHECK(r->buffers[1].alignment == 1);
  CHECK(r->buffers[1].id == 1);
  CHECK_FALSE(r->has_alignment);

  // Columns permuted, an unknown column, an alignment column, CRLF, blank lines, spaces, a BOM.
  const std::string text =
      "\xEF\xBB\xBFsize , Upper,gaps,id,lower,alignment\r\n"
      "\r\n"
      "1000,18446744073709551615,,a,18446744073709551614,64\r\n"
      "   \r\n"
      "7,5,1-2,b,0,1\r\n";
  auto q = parse_arena_csv(text, "x.csv");
  REQUIRE(q.is_ok());
  REQUIRE(q->buffers.size() == 2);
  CHECK(q->buffers[0].size == 1000);
  CHECK(q->buffers[0].upper == UINT64_MAX);
  CHECK(q->buffers[0].lower == UINT64_MAX - 1);
  CHECK(q->buffers[0].alignment == 64);
  CHECK(q->buffers[1].lower == 0);
  CHECK(q->buffers[1].upper == 5);
  CHECK(q->has_alignment);
  CHECK(q->ignored == std::vector<std::string>{"gaps"});

  // The writer keeps every input column (the unknown one too) and appends the offsets.
  CHECK(arena_csv_with_offsets(*q, {128, 3}) ==
        "size,Upper,gaps,id,lower,alignment,offset\n"
        "1000,18446744073709551615,,a,18446744073709551614,64,128\n"
        "7,5,1-2,b,0,1,3\n");
}

// Found by fuzz_arena_csv: an id the reader unquoted ("#x") was written back bare and read as a
// comment line, so the buffer vanished. Fields that would not read back as themselves are quoted.
TEST_CASE("csv: ids and columns that need quotes survive the round trip", "[planner][arena][csv]") {
  const std::string text = "\"#h\",id,lower,upper,size,\" g \"\r\nu,\"#x\",1,2,3,\r\n\" v \",\"\"\"q\"\"\",2,3,4, y\r\nw,b,0,1,5,z\r\n";
  auto q = parse_arena_csv(text, "x.csv");
  REQUIRE(q.is_ok());
  REQUIRE(q->ids == std::vector<std::string>{"#x", "\"\"q\"\"", "b"});
  const std::string out = arena_csv_with_offsets(*q, {7, 8, 9});
  CHECK(out == "\"#h\",id,lower,upper,size,\" g \",offset\nu,\"#x\",1,2,3,,7\n\" v \",\"\"\"q\"\"\",2,3,4,y,8\nw,b,0,1,5,z,9\n");
  auto back = parse_arena_csv(out, "back.csv");
  REQUIRE(back.is_ok());
  CHECK(back->ids == q->ids);
  CHECK(back->columns == q->columns);
  REQUIRE(back->buffers.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back->buffers[i].lower == q->buffers[i].lower);
    CHECK(back->buffers[i].size == q->buffers[i].size);
  }
}

// Found by fuzz_arena_csv: a quoted first column name that starts with a UTF-8 BOM ("\xEF\xBB\xBF#h")
// was written back bare; the reader then dropped the BOM at the start of the file and took the
// header for a comment line. Fields that start with a BOM are quoted too.
TEST_CASE("csv: a column name that starts with a BOM survives the round trip", "[planner][arena][csv]") {
  const std::string text = "\"\xEF\xBB\xBF#h\",id,lower,upper,size,2 g \"\r\nu,\"#x\",1,2,3,\r\n\" v \",\"\"\"q\"\"\",2,3,4, y'\r\n";
  auto q = parse_arena_csv(text, "x.csv");
  REQUIRE(q.is_ok());
  REQUIRE(q->columns.size() == 6);
  CHECK(q->columns[0] == "\xEF\xBB\xBF#h");
  const std::string out = arena_csv_with_offsets(*q, {7, 8});
  CHECK(out.rfind("\"\xEF\xBB\xBF#h\",id,", 0) == 0);
  auto back = parse_arena_csv(out, "back.csv");
  INFO(out);
  REQUIRE(back.is_ok());
  CHECK(back->columns == q->columns);
  CHECK(back->ids == q->ids);
  REQUIRE(back->buffers.size() == 2);
  // A bare BOM at the start of a file is still dropped.
  auto bare = parse_arena_csv("\xEF\xBB\xBFid,lower,upper,size\nx,1,2,3\n", "bom.csv");
  REQUIRE(bare.is_ok());
  CHECK(bare->columns[0] == "id");
}

TEST_CASE("csv: an input offset column is replaced, a file without header is id,lower,upper,size", "[planner][arena][csv]") {
  auto r = parse_arena_csv("id,lower,upper,size,offset\nx,1,2,3,99\n", "x.csv");
  REQUIRE(r.is_ok());
  CHECK(arena_csv_with_offsets(*r, {5}) == "id,lower,upper,size,offset\nx,1,2,3,5\n");
  auto h = parse_arena_csv("0,10,20,30\n1,15,25,35,8\n", "x.csv");
  REQUIRE_FALSE(h.is_ok());  // 4 fields on the first line fix the layout
  CHECK(h.status().message() == "x.csv line 2: expected 4 fields, found 5");
  auto n = parse_arena_csv("0,10,20,30\n1,15,25,35\n", "x.csv");
  REQUIRE(n.is_ok());
  CHECK(n->buffers.size() == 2);
  CHECK(n->buffers[1].size == 35);
  CHECK(arena_csv_with_offsets(*n, {0, 30}) == "id,lower,upper,size,offset\n0,10,20,30,0\n1,15,25,35,30\n");
}

TEST_CASE("csv: errors name the line", "[planner][arena][csv]") {
  const std::string h = "id,lower,upper,size\n";
  CHECK(error_of(h + "a,1,2,3\nb,1,x,3\n") == "x.csv line 3: upper 'x' is not an unsigned 64-bit integer");
  CHECK(error_of(h + "a,-1,2,3\n") == "x.csv line 2: lower '-1' is not an unsigned 64-bit integer");
  CHECK(error_of(h + "a,0,18446744073709551616,3\n") ==
        "x.csv line 2: upper '18446744073709551616' is not an unsigned 64-bit integer");
  CHECK(error_of(h + "a,1.5,2,3\n") == "x.csv line 2: lower '1.5' is not an unsigned 64-bit integer");
  CHECK(error_of(h + "a,5,5,3\n") == "x.csv line 2: lower 5 is not below upper 5 (a buffer lives on [lower, upper))");
  CHECK(error_of(h + "a,6,5,3\n").find("line 2: lower 6 is not below upper 5") != std::string::npos);
  CHECK(error_of(h + "a,1,2,0\n") == "x.csv line 2: size is 0");
  CHECK(error_of(h + "\n\na,1,2,3\n\nb,1,2,3\na,3,4,5\n") == "x.csv line 7: duplicate id 'a' (first on line 4)");
  CHECK(error_of(h + "a,1,2\n") == "x.csv line 2: expected 4 fields, found 3");
  CHECK(error_of(h + ",1,2,3\n") == "x.csv line 2: empty id");
  CHECK(error_of("id,lower,upper,size,alignment\na,1,2,3,0\n") == "x.csv line 2: alignment is 0");
  CHECK(error_of("id,begin,size\na,1,2\n") == "x.csv line 1: the header has no 'upper' column (need id,lower,upper,size)");
  CHECK(error_of("id,lower,upper,size,Lower\n") == "x.csv line 1: column 'Lower' appears twice");
  CHECK(error_of("") == "x.csv: no header and no buffers");
  CHECK(error_of("\r\n  \n") == "x.csv: no header and no buffers");
  CHECK(error_of("1,2,3\n") == "x.csv line 1: expected a header or 4 fields id,lower,upper,size, found 3 fields");
  auto missing = read_arena_csv("/nonexistent/moeprof/a.csv");
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.status().message() == "/nonexistent/moeprof/a.csv: cannot open");
}

TEST_CASE("csv: random instances survive a write and a read", "[planner][arena][csv]") {
  std::mt19937_64 rng(77);
  for (int iter = 0; iter < 50; ++iter) {
    ArenaCsv csv;
    csv.columns = {"id", "lower", "upper", "size", "alignment"};
    const size_t n = 1 + rng() % 40;
    std::vector<uint64_t> offsets;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t lo = rng() >> (rng() % 64), len = 1 + (rng() >> (1 + rng() % 63));
      const uint64_t up = lo + std::min(len, UINT64_MAX - lo);
      if (up <= lo) continue;
      csv.rows.push_back({"b" + std::to_string(i), std::to_string(lo), std::to_string(up), std::to_string(1 + rng() % 100000),
                          std::to_string(1u << (rng() % 8))});
      offsets.push_back(rng());
    }
    const std::string text = arena_csv_with_offsets(csv, offsets);
    auto back = parse_arena_csv(text, "rt.csv");
    REQUIRE(back.is_ok());
    REQUIRE(back->buffers.size() == csv.rows.size());
    for (size_t i = 0; i < back->buffers.size(); ++i) {
      CHECK(std::to_string(back->buffers[i].lower) == csv.rows[i][1]);
      CHECK(std::to_string(back->buffers[i].upper) == csv.rows[i][2]);
      CHECK(std::to_string(back->buffers[i].size) == csv.rows[i][3]);
      CHECK(std::to_string(back->buffers[i].alignment) == csv.rows[i][4]);
    }
    // The offsets column read back replaces itself.
    CHECK(arena_csv_with_offsets(*back, offsets) == text);
  }
}
