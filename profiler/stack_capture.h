// Call stacks at allocation (moeprof trace --stacks python|native|both). No CUDA, no CUPTI: the
// collector is called from the allocation-API callback of the allocating thread and joined to the
// allocation record later, like the rest of the attribution (attribution.h).
//  * native: the return addresses of the calling thread (glibc's backtrace, i.e. the unwinder of
//    libgcc), symbolized once per address when a stack is first resolved (dladdr: the module and
//    the nearest exported symbol, demangled);
//  * Python: the calling thread's CPython frames, read through the interpreter's own C API found
//    at run time in the traced process (dlsym; no link to libpython; CPython 3.9 to 3.13). The
//    thread takes the GIL for the walk (PyGILState_Ensure), as PyTorch's own snapshot recorder
//    does: frameworks release it around their kernels and allocations. Threads that never ran
//    Python, a process without an interpreter and an interpreter shutting down give no frames.
// Code objects are kept alive (one reference each) so their file and function names stay valid.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/trace.h"

namespace moeprof::profiler {

enum class StackMode : uint8_t { kNone = 0, kPython = 1, kNative = 2, kBoth = 3 };
// "python" | "native" | "both" | "none" -> mode; false when unknown.
bool parse_stack_mode(const std::string& s, StackMode* out);
const char* stack_mode_name(StackMode m);

struct ResolvedFrame {
  std::string function, file;
  uint32_t line = 0;
  FrameKind kind = FrameKind::kNative;
};

class StackCollector {
 public:
  explicit StackCollector(StackMode mode, size_t max_frames = 48);
  StackMode mode() const { return mode_; }
  // The calling thread's stack, Python frames (innermost first) then native ones; 0 when nothing
  // was captured. Thread-safe; never throws.
  uint32_t capture();
  // The frames of a captured stack, innermost first; native addresses are symbolized here.
  std::vector<ResolvedFrame> resolve(uint32_t id);
  uint64_t captured() const { return captured_; }
  uint64_t python_captured() const { return python_captured_; }

 private:
  struct Raw {
    uint64_t value;  // native: return address; Python: index into py_code_
    uint32_t line;
    uint8_t python;
    bool operator==(const Raw& o) const { return value == o.value && line == o.line && python == o.python; }
  };
  struct RawHash {
    size_t operator()(const std::vector<Raw>& v) const {
      uint64_t h = 0x9e3779b97f4a7c15ull ^ v.size();
      for (const Raw& r : v) h = (h ^ (r.value * 0xff51afd7ed558ccdull) ^ (uint64_t{r.line} << 1 | r.python)) * 0xc4ceb9fe1a85ec53ull;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  // A Python frame as read: its code object and its instruction offset (3.11+; the line before).
  struct PyFrameKey {
    void* code;
    int at;
    bool operator==(const PyFrameKey& o) const { return code == o.code && at == o.at; }
  };
  struct PyFrameKeyHash {
    size_t operator()(const PyFrameKey& k) const {
      return static_cast<size_t>((reinterpret_cast<uintptr_t>(k.code) >> 4) * 0x9e3779b97f4a7c15ull ^ static_cast<uint32_t>(k.at));
    }
  };
  void python_frames(std::vector<Raw>* out);
  const ResolvedFrame& symbolize(uint64_t pc);

  StackMode mode_;
  size_t max_frames_;
  std::mutex mu_;  // guards everything below
  std::unordered_map<std::vector<Raw>, uint32_t, RawHash> index_;
  std::vector<std::vector<Raw>> stacks_{{}};
  std::unordered_map<const void*, uint32_t> code_index_;  // code object -> index into py_code_
  std::vector<std::pair<std::string, std::string>> py_code_;  // (file, function)
  // (code, offset) -> the frame (code index, line), for code objects in code_index_ (kept alive).
  std::unordered_map<PyFrameKey, Raw, PyFrameKeyHash> py_frames_;
  std::unordered_map<uint64_t, ResolvedFrame> symbols_;
  uint64_t captured_ = 0, python_captured_ = 0;
};

}  // namespace moeprof::profiler
