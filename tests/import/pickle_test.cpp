// The pickle reader: every data opcode, the memo, limits, and the hostile files of
// tests/golden/torch/hostile (expected messages written by tests/import/make_fixtures.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "import/pickle.h"
#include "tests/reports/test_util.h"

using namespace moeprof;
using namespace moeprof::importer;
using moeprof::testing::golden_dir;
using moeprof::testing::slurp;

namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

PickleDoc parse_ok(const std::string& data, const PickleLimits& lim = {}) {
  auto r = parse_pickle(data, lim);
  INFO(r.status().message());
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

std::string parse_err(const std::string& data, const PickleLimits& lim = {}) {
  auto r = parse_pickle(data, lim);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == ErrorCode::kBadInput);
  return r.status().message();
}

}  // namespace

TEST_CASE("pickle: integers of every width, little-endian, sign-extended") {
  // [BININT1 255, BININT2 0xBEEF, BININT -2, LONG1 2^40+3 (6 bytes), LONG1 -129 (2 bytes),
  //  LONG1 0 (0 bytes), LONG1 INT64_MIN (8 bytes), LONG4 2^63-1 (8 bytes)] as written by Python.
  std::string p = bytes({0x80, 0x04, ']', '(', 'K', 0xff, 'M', 0xef, 0xbe, 'J', 0xfe, 0xff, 0xff, 0xff});
  p += bytes({0x8a, 0x06, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  p += bytes({0x8a, 0x02, 0x7f, 0xff});
  p += bytes({0x8a, 0x00});
  p += bytes({0x8a, 0x08, 0, 0, 0, 0, 0, 0, 0, 0x80});
  p += bytes({0x8b, 0x08, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f});
  p += "e.";
  PickleDoc doc = parse_ok(p);
  CHECK(doc.protocol() == 4);
  const auto& it = doc.root().items();
  REQUIRE(it.size() == 8);
  for (const auto& v : it) CHECK(v.kind == PyKind::kInt);
  CHECK(it[0].i == 255);
  CHECK(it[1].i == 0xBEEF);
  CHECK(it[2].i == -2);
  CHECK(it[3].i == (int64_t{1} << 40) + 3);
  CHECK(it[4].i == -129);
  CHECK(it[5].i == 0);
  CHECK(it[6].i == std::numeric_limits<int64_t>::min());
  CHECK(it[7].i == std::numeric_limits<int64_t>::max());
  CHECK(py_repr(doc.root()) == "[255, 48879, -2, 1099511627779, -129, 0, -9223372036854775808, 9223372036854775807]");
}

TEST_CASE("pickle: floats, strings, bytes, bools, None, tuples, nested dicts") {
  // {'a': (1.5, True, None), 'b\xc3\xa9': [b'\x00x', False, ()], 'c': (-0.1,)}, built by hand with
  // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, BINBYTES, TUPLE3, TUPLE1, EMPTY_TUPLE, SETITEM.
  std::string p = bytes({0x80, 0x04, '}', '('});
  p += bytes({0x8c, 1, 'a', 'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x88, 'N', 0x87});  // 'a': (1.5, True, None)
  p += bytes({'X', 3, 0, 0, 0, 'b', 0xc3, 0xa9, ']', '(', 'B', 2, 0, 0, 0, 0x00, 'x', 0x89, ')', 'e'});
  p += "u";
  p += bytes({0x8d, 1, 0, 0, 0, 0, 0, 0, 0, 'c', 'G', 0xbf, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a, 0x85, 's'});
  p += ".";
  PickleDoc doc = parse_ok(p);
  const PyValue& r = doc.root();
  REQUIRE(r.kind == PyKind::kDict);
  CHECK(r.size() == 3);
  const PyValue* a = r.get("a");
  REQUIRE(a);
  REQUIRE(a->kind == PyKind::kTuple);
  CHECK(a->items()[0].f == 1.5);
  CHECK(a->items()[1].kind == PyKind::kBool);
  CHECK(a->items()[1].i == 1);
  CHECK(a->items()[2].kind == PyKind::kNone);
  const PyValue* b = r.get("b\xc3\xa9");
  REQUIRE(b);
  CHECK(b->items()[0].kind == PyKind::kBytes);
  CHECK(b->items()[0].s() == std::string("\0x", 2));
  CHECK(r.get("c")->items()[0].f == -0.1);
  CHECK(r.get("missing") == nullptr);
  CHECK(py_repr(r) == "{'a': (1.5, True, None), 'b\xc3\xa9': [b'\\x00x', False, ()], 'c': (-0.10000000000000001,)}");
}

TEST_CASE("pickle: the memo shares containers, later SETITEM keys win") {
  // d = {'x': L, 'y': L} with L = [7] pickled once (MEMOIZE) and fetched again (BINGET); LONG_BINPUT,
  // LONG_BINGET and BINPUT with explicit slots; then a duplicate key 'x' (the last entry wins).
  std::string p = bytes({0x80, 0x04, '}', 0x94, '('});
  p += bytes({0x8c, 1, 'x', ']', 0x94, 'K', 7, 'a'});
  p += bytes({0x8c, 1, 'y', 'h', 1});
  p += bytes({0x8c, 1, 'z', 'K', 42, 'r', 0x10, 0x27, 0, 0, 'j', 0x10, 0x27, 0, 0, 0x86});  // (42, 42) via slot 10000
  p += bytes({'u', 0x8c, 1, 'x', 'N', 's', '.'});
  PickleDoc doc = parse_ok(p);
  const PyValue& r = doc.root();
  CHECK(r.size() == 4);  // x, y, z, x: a dict entry list, the last 'x' wins on lookup
  const PyValue* y = r.get("y");
  REQUIRE(y);
  CHECK(r.items()[1].container() == y->container());  // the same list object
  CHECK(r.get("x")->kind == PyKind::kNone);
  CHECK(py_repr(*r.get("z")) == "(42, 42)");
  CHECK(doc.containers() == 3);   // the dict, the list, the tuple
}

TEST_CASE("pickle: POP, POP_MARK, DUP, LIST, DICT, TUPLE, APPENDS on protocol-1 style streams") {
  // No PROTO: ( K1 K2 LIST -> [1, 2]; DUP; POP; ( K3 POP_MARK (drops 3 and the mark);
  // ( 'k' K9 DICT -> {'k': 9}; then TUPLE, which needs a MARK: none is open.
  std::string p = bytes({'(', 'K', 1, 'K', 2, 'l', '2', '0', '(', 'K', 3, '1'});
  p += bytes({'(', 0x8c, 1, 'k', 'K', 9, 'd', 't'});
  CHECK(parse_err(p + ".") == "pickle offset 19: TUPLE without a MARK");
  // With an outer MARK the same stream gives ([1, 2], {'k': 9}).
  std::string q = bytes({'(', '(', 'K', 1, 'K', 2, 'l', '2', '0', '(', 'K', 3, '1', '(', 0x8c, 1, 'k', 'K', 9, 'd', 't', '.'});
  PickleDoc doc = parse_ok(q);
  CHECK(doc.protocol() == 0);
  CHECK(py_repr(doc.root()) == "([1, 2], {'k': 9})");
}

TEST_CASE("pickle: FRAME is checked against the file, STOP ends the stream, trailing bytes are ignored") {
  std::string p = bytes({0x80, 0x04, 0x95, 3, 0, 0, 0, 0, 0, 0, 0, 'K', 5, '.'});
  PickleDoc doc = parse_ok(p + "garbage after STOP");
  CHECK(doc.root().i == 5);
  CHECK(doc.stop_offset() == 13);
  CHECK(parse_err(bytes({0x80, 0x05, 'N'})) == "pickle offset 3: truncated: the file ends before the STOP opcode");
  CHECK(parse_err(bytes({0x80})) == "pickle offset 0: truncated: PROTO needs 1 bytes of argument, only 0 left");
  CHECK(parse_err(bytes({'J', 1, 2})) == "pickle offset 0: truncated: BININT needs 4 bytes of argument, only 2 left");
  CHECK(parse_err(bytes({0x8a, 5, 1, 2})) == "pickle offset 0: truncated: LONG1 needs 5 bytes of integer, only 2 left");
  CHECK(parse_err(bytes({0x8b, 0xff, 0xff, 0xff, 0xff})) == "pickle offset 0: LONG4 with a negative length");
  CHECK(parse_err(bytes({0x8b, 9, 0, 0, 0})) == "pickle offset 0: LONG4 integer of 9 bytes does not fit in 64 bits");
  CHECK(parse_err(bytes({'(', '.'})) == "pickle offset 1: STOP with 1 MARK(s) still open");
  CHECK(parse_err(bytes({'.'})) == "pickle offset 0: STOP with 0 values on the stack (expected 1)");
  CHECK(parse_err(bytes({'K', 1, 'h', 0, '.'})) == "pickle offset 2: BINGET of memo entry 0, which was never stored");
  CHECK(parse_err(bytes({0x94})) == "pickle offset 0: stack underflow: MEMOIZE needs 1 value above the last MARK, the stack has 0");
  CHECK(parse_err(bytes({'}', '(', 'K', 1, 'e'})) == "pickle offset 4: APPENDS onto a dict, not a list");
  CHECK(parse_err(bytes({'(', 'K', 1, 'e'})) == "pickle offset 3: APPENDS with no list below its MARK");
  CHECK(parse_err(bytes({'I'})) == "pickle offset 0: unsupported opcode INT (0x49)");
  CHECK(parse_err(bytes({0x81})) ==
        "pickle offset 0: unsupported opcode NEWOBJ (0x81): the pickle constructs Python objects, which moeprof does not run");
}

TEST_CASE("pickle: limits on marks, stack and depth are configurable") {
  PickleLimits lim;
  lim.max_depth = 3;
  lim.max_marks = 2;
  lim.max_stack = 4;
  // [[[]]] is 3 deep: fine; [[[[]]]] is not (the 4th list, at offset 3, is one too many).
  CHECK(py_repr(parse_ok(bytes({']', ']', ']', 'a', 'a', '.'}), lim).root()) == "[[[]]]");
  CHECK(parse_err(bytes({']', ']', ']', ']', 'a', 'a', 'a', '.'}), lim) == "pickle offset 3: containers nested deeper than 3 levels");
  CHECK(parse_err(bytes({'(', '(', '('}), lim) == "pickle offset 2: more than 2 MARKs open at once");
  CHECK(parse_err(bytes({'N', 'N', 'N', 'N', 'N'}), lim) == "pickle offset 4: more than 4 values on the stack");
  // A list shared at two depths: the shared node's height counts from its deepest use.
  // L = [[]] (2 deep); root = [L, [L]] puts L at depth 3 -> 4 levels > 3.
  const std::string shared = bytes({']', '(', ']', ']', 'a', 0x94, ']', 'h', 0, 'a', 'e', '.'});
  CHECK(py_repr(parse_ok(shared).root()) == "[[[]], [[[]]]]");
  CHECK(parse_err(shared, lim) == "pickle offset 2: containers nested deeper than 3 levels");
}

TEST_CASE("pickle: a list that contains itself through another container is refused") {
  // a = []; b = [a]; a.append(b): EMPTY_LIST MEMOIZE EMPTY_LIST BINGET 0 APPEND APPEND
  CHECK(parse_err(bytes({']', 0x94, ']', 'h', 0, 'a', 'a', '.'})) ==
        "pickle offset 0: the list created here contains itself (recursive structures are not supported)");
  // Sharing without a cycle is fine: [x, x] with x = [].
  CHECK(py_repr(parse_ok(bytes({']', '(', ']', 0x94, 'h', 0, 'e', '.'})).root()) == "[[], []]");
}

TEST_CASE("pickle: the hostile files fail with the expected one-line messages") {
  const std::string dir = golden_dir() + "/torch/hostile/";
  const auto expected = nlohmann::json::parse(slurp(dir + "expected.json"));
  size_t pickle_errors = 0;
  for (const auto& [name, message] : expected.items()) {
    INFO(name);
    auto r = parse_pickle(slurp(dir + name));
    if (r.is_ok()) continue;  // well-formed pickles that are not snapshots: torch_snapshot_test
    ++pickle_errors;
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().message() == message.get<std::string>());
    CHECK(r.status().message().find('\n') == std::string::npos);
  }
  CHECK(pickle_errors == 23);
  // Through the file reader the path leads the message.
  auto f = read_pickle_file(dir + "global.pickle");
  REQUIRE_FALSE(f.is_ok());
  CHECK(f.status().message() == dir + "global.pickle: " + expected["global.pickle"].get<std::string>());
  auto missing = read_pickle_file(dir + "absent.pickle");
  CHECK(missing.status().message() == "cannot open " + dir + "absent.pickle: No such file or directory");
}

TEST_CASE("pickle: every prefix of a real snapshot fails cleanly, and so does every flipped byte") {
  const std::string data = slurp(golden_dir() + "/torch/two_devices.p2.pickle");  // no FRAME: cuts land anywhere
  REQUIRE(data.size() > 1000);
  REQUIRE(parse_pickle(data).is_ok());
  for (size_t n = 0; n < data.size(); ++n) {
    auto r = parse_pickle(data.substr(0, n));
    if (r.is_ok()) FAIL("prefix of " << n << " bytes parsed");
    CHECK(r.status().message().rfind("pickle offset ", 0) == 0);
  }
  // Flipping bytes may yield another valid pickle or an error, never a crash or an exception.
  size_t errors = 0;
  for (size_t k = 0; k < data.size(); k += 3) {
    std::string bad = data;
    bad[k] = static_cast<char>(bad[k] ^ 0x5a);
    errors += !parse_pickle(bad).is_ok();
  }
  CHECK(errors > 0);
}
