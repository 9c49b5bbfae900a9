// The pickle reader: a stack machine over the data opcodes (see pickle.h for what is refused).
#include "import/pickle.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <unordered_map>

#include "core/file_kind.h"

namespace moeprof::importer {

std::string_view py_kind_name(PyKind k) {
  switch (k) {
    case PyKind::kNone: return "NoneType";
    case PyKind::kBool: return "bool";
    case PyKind::kInt: return "int";
    case PyKind::kFloat: return "float";
    case PyKind::kStr: return "str";
    case PyKind::kBytes: return "bytes";
    case PyKind::kList: return "list";
    case PyKind::kTuple: return "tuple";
    case PyKind::kDict: return "dict";
  }
  return "?";
}

const std::vector<PyValue>& PyValue::items() const {
  static const std::vector<PyValue> kEmpty;
  const PyContainer* pc = container();
  return pc ? pc->items : kEmpty;
}

size_t PyValue::size() const {
  const PyContainer* pc = container();
  if (!pc) return 0;
  return kind == PyKind::kDict ? pc->items.size() / 2 : pc->items.size();
}

const PyValue* PyValue::get(std::string_view key) const {
  if (kind != PyKind::kDict) return nullptr;
  const auto& it = c->items;
  for (size_t k = it.size(); k >= 2; k -= 2) {
    const PyValue& kv = it[k - 2];
    if (kv.kind == PyKind::kStr && kv.s() == key) return &it[k - 1];
  }
  return nullptr;
}

namespace {

// Opcodes (Python's Lib/pickletools.py lists them with their protocols).
enum Op : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kFloat = 'F', kInt = 'I',
  kBinInt = 'J', kBinInt1 = 'K', kLong = 'L', kBinInt2 = 'M', kNone = 'N', kPersId = 'P',
  kBinPersId = 'Q', kReduce = 'R', kString = 'S', kBinString = 'T', kShortBinString = 'U',
  kUnicode = 'V', kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobal = 'c', kDict = 'd',
  kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h', kInst = 'i', kLongBinGet = 'j',
  kList = 'l', kEmptyList = ']', kObj = 'o', kPut = 'p', kBinPut = 'q', kLongBinPut = 'r',
  kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G',
  kBinBytes = 'B', kShortBinBytes = 'C',
  kProto = 0x80, kNewObj = 0x81, kExt1 = 0x82, kExt2 = 0x83, kExt4 = 0x84, kTuple1 = 0x85,
  kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a, kLong4 = 0x8b,
  kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e, kEmptySet = 0x8f,
  kAddItems = 0x90, kFrozenSet = 0x91, kNewObjEx = 0x92, kStackGlobal = 0x93, kMemoize = 0x94,
  kFrame = 0x95, kByteArray8 = 0x96, kNextBuffer = 0x97, kReadonlyBuffer = 0x98,
};

const char* op_name(uint8_t op) {
  switch (op) {
    case kMark: return "MARK";
    case kStop: return "STOP";
    case kPop: return "POP";
    case kPopMark: return "POP_MARK";
    case kDup: return "DUP";
    case kFloat: return "FLOAT";
    case kInt: return "INT";
    case kBinInt: return "BININT";
    case kBinInt1: return "BININT1";
    case kLong: return "LONG";
    case kBinInt2: return "BININT2";
    case kNone: return "NONE";
    case kPersId: return "PERSID";
    case kBinPersId: return "BINPERSID";
    case kReduce: return "REDUCE";
    case kString: return "STRING";
    case kBinString: return "BINSTRING";
    case kShortBinString: return "SHORT_BINSTRING";
    case kUnicode: return "UNICODE";
    case kBinUnicode: return "BINUNICODE";
    case kAppend: return "APPEND";
    case kBuild: return "BUILD";
    case kGlobal: return "GLOBAL";
    case kDict: return "DICT";
    case kEmptyDict: return "EMPTY_DICT";
    case kAppends: return "APPENDS";
    case kGet: return "GET";
    case kBinGet: return "BINGET";
    case kInst: return "INST";
    case kLongBinGet: return "LONG_BINGET";
    case kList: return "LIST";
    case kEmptyList: return "EMPTY_LIST";
    case kObj: return "OBJ";
    case kPut: return "PUT";
    case kBinPut: return "BINPUT";
    case kLongBinPut: return "LONG_BINPUT";
    case kSetItem: return "SETITEM";
    case kTuple: return "TUPLE";
    case kEmptyTuple: return "EMPTY_TUPLE";
    case kSetItems: return "SETITEMS";
    case kBinFloat: return "BINFLOAT";
    case kBinBytes: return "BINBYTES";
    case kShortBinBytes: return "SHORT_BINBYTES";
    case kProto: return "PROTO";
    case kNewObj: return "NEWOBJ";
    case kExt1: return "EXT1";
    case kExt2: return "EXT2";
    case kExt4: return "EXT4";
    case kTuple1: return "TUPLE1";
    case kTuple2: return "TUPLE2";
    case kTuple3: return "TUPLE3";
    case kNewTrue: return "NEWTRUE";
    case kNewFalse: return "NEWFALSE";
    case kLong1: return "LONG1";
    case kLong4: return "LONG4";
    case kShortBinUnicode: return "SHORT_BINUNICODE";
    case kBinUnicode8: return "BINUNICODE8";
    case kBinBytes8: return "BINBYTES8";
    case kEmptySet: return "EMPTY_SET";
    case kAddItems: return "ADDITEMS";
    case kFrozenSet: return "FROZENSET";
    case kNewObjEx: return "NEWOBJ_EX";
    case kStackGlobal: return "STACK_GLOBAL";
    case kMemoize: return "MEMOIZE";
    case kFrame: return "FRAME";
    case kByteArray8: return "BYTEARRAY8";
    case kNextBuffer: return "NEXT_BUFFER";
    case kReadonlyBuffer: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

// The opcodes that would import or call Python code.
bool constructs_objects(uint8_t op) {
  switch (op) {
    case kGlobal: case kStackGlobal: case kReduce: case kBuild: case kInst: case kObj:
    case kNewObj: case kNewObjEx: case kExt1: case kExt2: case kExt4: case kPersId: case kBinPersId:
      return true;
    default:
      return false;
  }
}

std::string hex2(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

}  // namespace

class PickleParser {
 public:
  PickleParser(std::string data, const PickleLimits& limits) : limits_(limits) {
    doc_.data_ = std::make_unique<std::string>(std::move(data));
    doc_.containers_ = std::make_unique<std::vector<std::unique_ptr<PyContainer>>>();
    d_ = doc_.data_->data();
    n_ = doc_.data_->size();
  }

  Result<PickleDoc> run() {
    Status st = loop();
    if (!st) return st;
    st = check_depth();
    if (!st) return st;
    return std::move(doc_);
  }

 private:
  Status fail(uint64_t off, const std::string& what) const {
    return Status::bad_input("pickle offset " + std::to_string(off) + ": " + what);
  }

  // The argument bytes of the opcode at op_off_; `what` names them in the message.
  Status need(uint64_t bytes, const char* what = "argument") const {
    if (bytes <= n_ - pos_) return Status::ok();
    return fail(op_off_, std::string("truncated: ") + op_name(op_) + " needs " + std::to_string(bytes) + " bytes of " +
                             what + ", only " + std::to_string(n_ - pos_) + " left");
  }
  uint64_t read_le(size_t bytes) {  // caller checked need()
    uint64_t v = 0;
    for (size_t k = 0; k < bytes; ++k) v |= uint64_t{static_cast<uint8_t>(d_[pos_ + k])} << (8 * k);
    pos_ += bytes;
    return v;
  }

  size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t above_mark() const { return stack_.size() - base(); }

  Status push(PyValue v) {
    if (stack_.size() >= limits_.max_stack)
      return fail(op_off_, "more than " + std::to_string(limits_.max_stack) + " values on the stack");
    stack_.push_back(v);
    return Status::ok();
  }
  Status underflow(size_t wanted) const {
    return fail(op_off_, std::string("stack underflow: ") + op_name(op_) + " needs " + std::to_string(wanted) +
                             (wanted == 1 ? " value" : " values") + " above the last MARK, the stack has " +
                             std::to_string(above_mark()));
  }
  Status no_mark() const { return fail(op_off_, std::string(op_name(op_)) + " without a MARK"); }

  PyValue new_container(PyKind kind) {
    auto c = std::make_unique<PyContainer>();
    c->kind = kind;
    c->offset = op_off_;
    PyValue v;
    v.kind = kind;
    v.c = c.get();
    doc_.containers_->push_back(std::move(c));
    return v;
  }

  Status push_int(int64_t v) {
    PyValue x;
    x.kind = PyKind::kInt;
    x.i = v;
    return push(x);
  }

  Status read_long(uint64_t nbytes) {
    if (nbytes > 8)
      return fail(op_off_, std::string(op_name(op_)) + " integer of " + std::to_string(nbytes) +
                               " bytes does not fit in 64 bits");
    MOEPROF_RETURN_IF_ERROR(need(nbytes, "integer"));
    uint64_t u = read_le(static_cast<size_t>(nbytes));
    if (nbytes > 0 && nbytes < 8 && (u >> (8 * nbytes - 1)) & 1) u |= ~uint64_t{0} << (8 * nbytes);  // sign-extend
    return push_int(static_cast<int64_t>(u));
  }

  Status read_text(size_t len_bytes, PyKind kind) {
    MOEPROF_RETURN_IF_ERROR(need(len_bytes, "length"));
    const uint64_t len = read_le(len_bytes);
    MOEPROF_RETURN_IF_ERROR(need(len, "data"));
    if (len > UINT32_MAX)
      return fail(op_off_, std::string(op_name(op_)) + " of " + std::to_string(len) + " bytes: longer than this reader's 4 GiB limit");
    PyValue v;
    v.kind = kind;
    v.p = d_ + pos_;
    v.n = static_cast<uint32_t>(len);
    pos_ += static_cast<size_t>(len);
    return push(v);
  }

  // The memo: MEMOIZE stores under the count of entries so far (dense, a vector); BINPUT and
  // LONG_BINPUT may name any slot (far ones go to a map, so a huge slot number costs nothing).
  Status memo_put(uint64_t key) {
    if (above_mark() == 0) return underflow(1);
    if (key < memo_.size() + 4096) {
      if (key >= memo_.size()) {
        memo_.resize(static_cast<size_t>(key) + 1);
        memo_set_.resize(static_cast<size_t>(key) + 1, 0);
      }
      memo_count_ += memo_set_[key] == 0;
      memo_set_[key] = 1;
      memo_[key] = stack_.back();
    } else {
      memo_count_ += far_memo_.count(key) == 0;
      far_memo_[key] = stack_.back();
    }
    return Status::ok();
  }
  Status memo_get(uint64_t key) {
    if (key < memo_.size() && memo_set_[key]) return push(memo_[key]);
    auto it = far_memo_.find(key);
    if (it == far_memo_.end())
      return fail(op_off_, std::string(op_name(op_)) + " of memo entry " + std::to_string(key) + ", which was never stored");
    return push(it->second);
  }

  // Items above the last MARK become `kind`'s container (LIST, DICT, TUPLE).
  Status collect(PyKind kind) {
    if (marks_.empty()) return no_mark();
    const size_t b = marks_.back();
    if (kind == PyKind::kDict && (stack_.size() - b) % 2 != 0)
      return fail(op_off_, "DICT: odd number of items (" + std::to_string(stack_.size() - b) + ") after MARK");
    PyValue v = new_container(kind);
    v.c->items.assign(stack_.begin() + static_cast<ptrdiff_t>(b), stack_.end());
    if (kind == PyKind::kDict) MOEPROF_RETURN_IF_ERROR(check_keys(v.c->items, 0));
    stack_.resize(b);
    marks_.pop_back();
    return push(v);
  }

  Status check_keys(const std::vector<PyValue>& kv, size_t from) const {
    for (size_t k = from; k < kv.size(); k += 2) {
      if (kv[k].kind == PyKind::kList || kv[k].kind == PyKind::kDict)
        return fail(op_off_, std::string(op_name(op_)) + ": unhashable dict key of type " + std::string(py_kind_name(kv[k].kind)));
    }
    return Status::ok();
  }

  Status target(size_t at, PyKind want, PyContainer** out) const {
    const PyValue& t = stack_[at];
    if (t.kind != want)
      return fail(op_off_, std::string(op_name(op_)) + " onto a " + std::string(py_kind_name(t.kind)) + ", not a " +
                               std::string(py_kind_name(want)));
    *out = t.c;
    return Status::ok();
  }

  // APPENDS / SETITEMS: the items above the last MARK go into the container just below it.
  Status extend(PyKind want) {
    if (marks_.empty()) return no_mark();
    const size_t b = marks_.back();
    const size_t outer = marks_.size() >= 2 ? marks_[marks_.size() - 2] : 0;
    if (b == outer) return fail(op_off_, std::string(op_name(op_)) + " with no " + std::string(py_kind_name(want)) + " below its MARK");
    PyContainer* c = nullptr;
    MOEPROF_RETURN_IF_ERROR(target(b - 1, want, &c));
    if (want == PyKind::kDict && (stack_.size() - b) % 2 != 0)
      return fail(op_off_, "SETITEMS: odd number of items (" + std::to_string(stack_.size() - b) + ") after MARK");
    const size_t first = c->items.size();
    c->items.insert(c->items.end(), stack_.begin() + static_cast<ptrdiff_t>(b), stack_.end());
    if (want == PyKind::kDict) MOEPROF_RETURN_IF_ERROR(check_keys(c->items, first));
    stack_.resize(b);
    marks_.pop_back();
    return Status::ok();
  }

  Status tuple_of(size_t count) {
    if (above_mark() < count) return underflow(count);
    PyValue v = new_container(PyKind::kTuple);
    v.c->items.assign(stack_.end() - static_cast<ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return push(v);
  }

  Status step() {
    switch (op_) {
      case kProto: {
        MOEPROF_RETURN_IF_ERROR(need(1));
        const int p = static_cast<uint8_t>(d_[pos_++]);
        if (p > 5) return fail(op_off_, "unsupported pickle protocol " + std::to_string(p) + " (this reader knows 0-5)");
        doc_.protocol_ = p;
        return Status::ok();
      }
      case kFrame: {  // a hint for buffered readers: the next N bytes hold whole opcodes
        MOEPROF_RETURN_IF_ERROR(need(8));
        const uint64_t len = read_le(8);
        if (len > n_ - pos_)
          return fail(op_off_, "truncated: FRAME of " + std::to_string(len) + " bytes, only " + std::to_string(n_ - pos_) + " left");
        return Status::ok();
      }
      case kNone: return push(PyValue{});
      case kNewTrue:
      case kNewFalse: {
        PyValue v;
        v.kind = PyKind::kBool;
        v.i = op_ == kNewTrue ? 1 : 0;
        return push(v);
      }
      case kBinInt: {
        MOEPROF_RETURN_IF_ERROR(need(4));
        return push_int(static_cast<int32_t>(static_cast<uint32_t>(read_le(4))));
      }
      case kBinInt1:
        MOEPROF_RETURN_IF_ERROR(need(1));
        return push_int(static_cast<int64_t>(read_le(1)));
      case kBinInt2:
        MOEPROF_RETURN_IF_ERROR(need(2));
        return push_int(static_cast<int64_t>(read_le(2)));
      case kLong1: {
        MOEPROF_RETURN_IF_ERROR(need(1, "length"));
        return read_long(read_le(1));
      }
      case kLong4: {
        MOEPROF_RETURN_IF_ERROR(need(4, "length"));
        const int32_t len = static_cast<int32_t>(static_cast<uint32_t>(read_le(4)));
        if (len < 0) return fail(op_off_, "LONG4 with a negative length");
        return read_long(static_cast<uint64_t>(len));
      }
      case kBinFloat: {
        MOEPROF_RETURN_IF_ERROR(need(8));
        uint64_t u = 0;
        for (size_t k = 0; k < 8; ++k) u = (u << 8) | static_cast<uint8_t>(d_[pos_ + k]);  // big-endian
        pos_ += 8;
        PyValue v;
        v.kind = PyKind::kFloat;
        std::memcpy(&v.f, &u, sizeof u);
        return push(v);
      }
      case kShortBinUnicode: return read_text(1, PyKind::kStr);
      case kBinUnicode: return read_text(4, PyKind::kStr);
      case kBinUnicode8: return read_text(8, PyKind::kStr);
      case kShortBinBytes: return read_text(1, PyKind::kBytes);
      case kBinBytes: return read_text(4, PyKind::kBytes);
      case kBinBytes8: return read_text(8, PyKind::kBytes);
      case kEmptyList: return push(new_container(PyKind::kList));
      case kEmptyDict: return push(new_container(PyKind::kDict));
      case kEmptyTuple: return push(new_container(PyKind::kTuple));
      case kTuple1: return tuple_of(1);
      case kTuple2: return tuple_of(2);
      case kTuple3: return tuple_of(3);
      case kTuple: return collect(PyKind::kTuple);
      case kList: return collect(PyKind::kList);
      case kDict: return collect(PyKind::kDict);
      case kAppend: {
        if (above_mark() < 2) return underflow(2);
        PyContainer* c = nullptr;
        MOEPROF_RETURN_IF_ERROR(target(stack_.size() - 2, PyKind::kList, &c));
        c->items.push_back(stack_.back());
        stack_.pop_back();
        return Status::ok();
      }
      case kAppends: return extend(PyKind::kList);
      case kSetItem: {
        if (above_mark() < 3) return underflow(3);
        PyContainer* c = nullptr;
        MOEPROF_RETURN_IF_ERROR(target(stack_.size() - 3, PyKind::kDict, &c));
        const size_t first = c->items.size();
        c->items.push_back(stack_[stack_.size() - 2]);
        c->items.push_back(stack_.back());
        MOEPROF_RETURN_IF_ERROR(check_keys(c->items, first));
        stack_.resize(stack_.size() - 2);
        return Status::ok();
      }
      case kSetItems: return extend(PyKind::kDict);
      case kMark:
        if (marks_.size() >= limits_.max_marks)
          return fail(op_off_, "more than " + std::to_string(limits_.max_marks) + " MARKs open at once");
        marks_.push_back(stack_.size());
        return Status::ok();
      case kPop:
        if (above_mark() > 0) {
          stack_.pop_back();
        } else if (!marks_.empty()) {
          marks_.pop_back();  // Python's POP discards an empty MARK frame
        } else {
          return underflow(1);
        }
        return Status::ok();
      case kPopMark:
        if (marks_.empty()) return no_mark();
        stack_.resize(marks_.back());
        marks_.pop_back();
        return Status::ok();
      case kDup:
        if (above_mark() == 0) return underflow(1);
        return push(stack_.back());
      case kMemoize: return memo_put(memo_count_);
      case kBinPut:
        MOEPROF_RETURN_IF_ERROR(need(1));
        return memo_put(read_le(1));
      case kLongBinPut:
        MOEPROF_RETURN_IF_ERROR(need(4));
        return memo_put(read_le(4));
      case kBinGet:
        MOEPROF_RETURN_IF_ERROR(need(1));
        return memo_get(read_le(1));
      case kLongBinGet:
        MOEPROF_RETURN_IF_ERROR(need(4));
        return memo_get(read_le(4));
      default: break;
    }
    const char* name = op_name(op_);
    if (name == nullptr) return fail(op_off_, "unknown opcode " + hex2(op_));
    if (constructs_objects(op_))
      return fail(op_off_, std::string("unsupported opcode ") + name + " (" + hex2(op_) +
                               "): the pickle constructs Python objects, which moeprof does not run");
    return fail(op_off_, std::string("unsupported opcode ") + name + " (" + hex2(op_) + ")");
  }

  Status loop() {
    while (true) {
      if (pos_ >= n_) {
        if (n_ == 0) return fail(0, "empty file");
        return fail(n_, "truncated: the file ends before the STOP opcode");
      }
      op_off_ = pos_;
      op_ = static_cast<uint8_t>(d_[pos_++]);
      if (op_ == kStop) {
        if (!marks_.empty()) return fail(op_off_, "STOP with " + std::to_string(marks_.size()) + " MARK(s) still open");
        if (stack_.size() != 1)
          return fail(op_off_, "STOP with " + std::to_string(stack_.size()) + " values on the stack (expected 1)");
        doc_.root_ = stack_.back();
        doc_.stop_offset_ = op_off_;
        return Status::ok();
      }
      MOEPROF_RETURN_IF_ERROR(step());
    }
  }

  // Containers may be shared (the memo) and a hostile pickle can make one contain itself: a
  // depth-first walk with memoized heights rejects cycles and nesting beyond max_depth. The
  // recursion depth is bounded by max_depth.
  enum : uint8_t { kUnvisited = 0, kOnPath = 1, kDone = 2 };
  Status height(PyContainer* c, size_t depth) {
    if (c->visit == kDone) {
      if (depth + c->height - 1 > limits_.max_depth) return too_deep(c);
      return Status::ok();
    }
    if (c->visit == kOnPath)
      return fail(c->offset, "the " + std::string(py_kind_name(c->kind)) + " created here contains itself (recursive structures are not supported)");
    if (depth > limits_.max_depth) return too_deep(c);
    c->visit = kOnPath;
    uint32_t h = 0;
    for (const PyValue& v : c->items) {
      if (!v.is_container()) continue;
      MOEPROF_RETURN_IF_ERROR(height(v.c, depth + 1));
      h = std::max(h, v.c->height);
    }
    c->visit = kDone;
    c->height = h + 1;
    return Status::ok();
  }
  Status too_deep(const PyContainer* c) const {
    return fail(c->offset, "containers nested deeper than " + std::to_string(limits_.max_depth) + " levels");
  }
  Status check_depth() {
    if (!doc_.root_.is_container()) return Status::ok();
    return height(doc_.root_.c, 1);
  }

  PickleLimits limits_;
  PickleDoc doc_;
  const char* d_ = nullptr;
  size_t n_ = 0, pos_ = 0;
  uint64_t op_off_ = 0;
  uint8_t op_ = 0;
  std::vector<PyValue> stack_;
  std::vector<size_t> marks_;
  std::vector<PyValue> memo_;
  std::vector<uint8_t> memo_set_;
  std::unordered_map<uint64_t, PyValue> far_memo_;
  uint64_t memo_count_ = 0;  // distinct slots stored: where MEMOIZE stores next
};

Result<PickleDoc> parse_pickle(std::string data, const PickleLimits& limits) {
  try {
    PickleParser p(std::move(data), limits);
    return p.run();
  } catch (const std::bad_alloc&) {
    return Status::run_failure("out of memory while reading the pickle");
  }
}

Result<PickleDoc> read_pickle_file(const std::string& path, const PickleLimits& limits) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::bad_input("cannot open " + path + ": " + std::strerror(errno));
  std::string data;
  try {
    char buf[1 << 16];
    size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, got);
  } catch (const std::bad_alloc&) {
    std::fclose(f);
    return Status::run_failure("out of memory reading " + path);
  }
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err) return Status::bad_input("cannot read " + path);
  // Another of moeprof's files (a trace, a report) or an archive: say what it is, not which
  // opcode the pickle reader stumbled on. Unknown content is left to the reader.
  if (const FileKind k = file_kind(std::string_view(data).substr(0, 512)); k != FileKind::kPickle && k != FileKind::kUnknown) {
    const std::string advice = file_kind_advice(k, path);
    return Status::bad_input(path + ": not a pickle: it is " + describe_file_kind(k) + (advice.empty() ? "" : "; " + advice));
  }
  auto doc = parse_pickle(std::move(data), limits);
  if (!doc) return doc.status().with_context(path);
  return doc;
}

namespace {

void repr_into(const PyValue& v, size_t depth, size_t max_depth, size_t max_items, std::string* out) {
  switch (v.kind) {
    case PyKind::kNone: *out += "None"; return;
    case PyKind::kBool: *out += v.i ? "True" : "False"; return;
    case PyKind::kInt: *out += std::to_string(v.i); return;
    case PyKind::kFloat: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.f);
      *out += buf;
      if (std::isfinite(v.f) && !std::strpbrk(buf, ".e")) *out += ".0";
      return;
    }
    case PyKind::kStr:
    case PyKind::kBytes: {
      if (v.kind == PyKind::kBytes) *out += 'b';
      *out += '\'';
      for (char ch : v.s()) {
        const auto u = static_cast<unsigned char>(ch);
        if (ch == '\'' || ch == '\\') {
          *out += '\\';
          *out += ch;
        } else if (u < 0x20 || u == 0x7f || (v.kind == PyKind::kBytes && u >= 0x80)) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", u);
          *out += buf;
        } else {
          *out += ch;
        }
      }
      *out += '\'';
      return;
    }
    case PyKind::kList:
    case PyKind::kTuple:
    case PyKind::kDict: break;
  }
  const char* open = v.kind == PyKind::kList ? "[" : v.kind == PyKind::kTuple ? "(" : "{";
  const char* close = v.kind == PyKind::kList ? "]" : v.kind == PyKind::kTuple ? ")" : "}";
  *out += open;
  if (depth >= max_depth) {
    *out += "...";
    *out += close;
    return;
  }
  const auto& it = v.items();
  const bool dict = v.kind == PyKind::kDict;
  const size_t step = dict ? 2 : 1;
  size_t shown = 0;
  for (size_t k = 0; k + step <= it.size(); k += step, ++shown) {
    if (shown == max_items) {
      *out += ", ...";
      break;
    }
    if (k) *out += ", ";
    repr_into(it[k], depth + 1, max_depth, max_items, out);
    if (dict) {
      *out += ": ";
      repr_into(it[k + 1], depth + 1, max_depth, max_items, out);
    }
  }
  if (v.kind == PyKind::kTuple && it.size() == 1) *out += ",";
  *out += close;
}

}  // namespace

std::string py_repr(const PyValue& v, size_t max_depth, size_t max_items) {
  std::string out;
  repr_into(v, 0, max_depth, max_items, &out);
  return out;
}

}  // namespace moeprof::importer
