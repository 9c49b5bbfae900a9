// A reader for the data subset of Python's pickle format: enough to load the memory snapshots that
// torch.cuda.memory._dump_snapshot() writes (pickle.dump of plain dicts, lists, tuples, strings,
// ints, floats, bools and None; protocol 4 on Python 3.8-3.13, 5 on 3.14), without Python.
//
// Safety: nothing is executed. The opcodes that construct Python objects (GLOBAL, STACK_GLOBAL,
// REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID) are refused, and so
// are sets, out-of-band buffers and the text opcodes of protocol 0. Every read is bounds-checked
// before anything is allocated, so a length field larger than the rest of the file is an error,
// not an allocation. Integers are 64-bit signed (LONG1/LONG4 up to 8 bytes), strings shorter than
// 4 GiB. Open MARKs, values on
// the stack and the nesting depth of the result are limited (PickleLimits); a structure that
// contains itself is refused. Errors are Status::bad_input, "pickle offset N: ...", where N is the
// byte offset of the opcode at fault (the file size when the file ends too early).
//
// The result is a PickleDoc: it owns the input bytes (strings are views into them) and every
// container; PyValue is a small handle. Shared references (the memo: BINGET of an object pickled
// before) are the same container, as in Python.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace moeprof::importer {

enum class PyKind : uint8_t { kNone, kBool, kInt, kFloat, kStr, kBytes, kList, kTuple, kDict };
std::string_view py_kind_name(PyKind k);  // Python's type names: "NoneType", "int", "str", ...

struct PyContainer;

// A value, 16 bytes. Scalars are held inline; str/bytes point into the document's input;
// list/tuple/dict point to a container the document owns. A default PyValue is None. Read i for
// int and bool (0/1), f for float, s() for str (UTF-8 as written, not validated) and bytes,
// container() for list/tuple/dict: the union member that matches `kind`.
struct PyValue {
  PyKind kind = PyKind::kNone;
  uint32_t n = 0;  // str/bytes length
  union {
    int64_t i = 0;
    double f;
    const char* p;   // str/bytes data
    PyContainer* c;  // list/tuple/dict
  };

  bool is(PyKind k) const { return kind == k; }
  bool is_container() const { return kind == PyKind::kList || kind == PyKind::kTuple || kind == PyKind::kDict; }
  PyContainer* container() const { return is_container() ? c : nullptr; }
  std::string_view s() const {
    return kind == PyKind::kStr || kind == PyKind::kBytes ? std::string_view(p, n) : std::string_view();
  }
  // list/tuple items; dict entries alternate key, value. Empty for scalars.
  const std::vector<PyValue>& items() const;
  // Number of list/tuple items or dict entries; 0 for scalars.
  size_t size() const;
  // Dict lookup by str key (the last entry wins, as in Python); nullptr if absent or not a dict.
  const PyValue* get(std::string_view key) const;
};
static_assert(sizeof(PyValue) == 16, "a snapshot holds millions of values: keep them small");

struct PyContainer {
  PyKind kind = PyKind::kList;
  uint64_t offset = 0;          // byte offset of the opcode that created it
  std::vector<PyValue> items;   // dict: key, value, key, value, ...
  uint8_t visit = 0;            // depth check state (parse_pickle's)
  uint32_t height = 0;
};

struct PickleLimits {
  size_t max_depth = 100;         // nesting of containers in the result (a snapshot needs 6)
  size_t max_marks = 1000;        // MARKs open at once
  size_t max_stack = 1u << 26;    // values on the stack at once
};

class PickleDoc {
 public:
  PickleDoc() = default;
  PickleDoc(PickleDoc&&) = default;
  PickleDoc& operator=(PickleDoc&&) = default;

  const PyValue& root() const { return root_; }
  int protocol() const { return protocol_; }          // from PROTO; 0 when the file has none
  uint64_t stop_offset() const { return stop_offset_; }  // where STOP was; bytes after it are ignored
  size_t containers() const { return containers_ ? containers_->size() : 0; }

 private:
  friend class PickleParser;
  std::unique_ptr<std::string> data_;  // the input; str/bytes values view it
  std::unique_ptr<std::vector<std::unique_ptr<PyContainer>>> containers_;
  PyValue root_;
  int protocol_ = 0;
  uint64_t stop_offset_ = 0;
};

// Parses a whole pickle (up to its STOP opcode). Takes the bytes by value: the document keeps them.
Result<PickleDoc> parse_pickle(std::string data, const PickleLimits& limits = {});

// Reads a file and parses it; read errors are kBadInput naming the path.
Result<PickleDoc> read_pickle_file(const std::string& path, const PickleLimits& limits = {});

// A short Python-like rendering for messages and tests: {'a': [1, 2.5, None]}. Containers deeper
// than `max_depth` print as "..." and long containers are cut after `max_items`.
std::string py_repr(const PyValue& v, size_t max_depth = 8, size_t max_items = 16);

}  // namespace moeprof::importer
