#include "profiler/stack_capture.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <cstdlib>
#include <cstring>

namespace moeprof::profiler {

bool parse_stack_mode(const std::string& s, StackMode* out) {
  if (s == "none") *out = StackMode::kNone;
  else if (s == "python") *out = StackMode::kPython;
  else if (s == "native") *out = StackMode::kNative;
  else if (s == "both") *out = StackMode::kBoth;
  else return false;
  return true;
}

const char* stack_mode_name(StackMode m) {
  switch (m) {
    case StackMode::kNone: return "none";
    case StackMode::kPython: return "python";
    case StackMode::kNative: return "native";
    case StackMode::kBoth: return "both";
  }
  return "none";
}

namespace {

// The CPython C API, found in the process at run time. Everything is an opaque pointer.
struct PyApi {
  int (*IsInitialized)() = nullptr;
  int (*IsFinalizing)() = nullptr;
  void* (*GetThisThreadState)() = nullptr;
  int (*GILEnsure)() = nullptr;
  void (*GILRelease)(int) = nullptr;
  void* (*GetFrame)() = nullptr;           // PyEval_GetFrame: borrowed
  void* (*FrameGetCode)(void*) = nullptr;  // new reference
  void* (*FrameGetBack)(void*) = nullptr;  // new reference
  int (*FrameGetLine)(void*) = nullptr;
  int (*FrameGetLasti)(void*) = nullptr;      // 3.11+: the last instruction's offset in bytes
  int (*CodeAddr2Line)(void*, int) = nullptr;  // that offset's line (what PyFrame_GetLineNumber computes)
  void* (*GetAttr)(void*, const char*) = nullptr;  // new reference
  const char* (*AsUTF8)(void*) = nullptr;
  void (*IncRef)(void*) = nullptr;
  void (*DecRef)(void*) = nullptr;
  void (*ErrClear)() = nullptr;
  bool ok = false;
};

const PyApi& py_api() {
  static const PyApi api = [] {
    PyApi a;
    auto sym = [](const char* n) { return dlsym(RTLD_DEFAULT, n); };
    a.IsInitialized = reinterpret_cast<int (*)()>(sym("Py_IsInitialized"));
    a.IsFinalizing = reinterpret_cast<int (*)()>(sym("Py_IsFinalizing"));  // 3.13
    if (a.IsFinalizing == nullptr) a.IsFinalizing = reinterpret_cast<int (*)()>(sym("_Py_IsFinalizing"));
    a.GetThisThreadState = reinterpret_cast<void* (*)()>(sym("PyGILState_GetThisThreadState"));
    a.GILEnsure = reinterpret_cast<int (*)()>(sym("PyGILState_Ensure"));
    a.GILRelease = reinterpret_cast<void (*)(int)>(sym("PyGILState_Release"));
    a.GetFrame = reinterpret_cast<void* (*)()>(sym("PyEval_GetFrame"));
    a.FrameGetCode = reinterpret_cast<void* (*)(void*)>(sym("PyFrame_GetCode"));
    a.FrameGetBack = reinterpret_cast<void* (*)(void*)>(sym("PyFrame_GetBack"));
    a.FrameGetLine = reinterpret_cast<int (*)(void*)>(sym("PyFrame_GetLineNumber"));
    a.FrameGetLasti = reinterpret_cast<int (*)(void*)>(sym("PyFrame_GetLasti"));
    a.CodeAddr2Line = reinterpret_cast<int (*)(void*, int)>(sym("PyCode_Addr2Line"));
    if (a.FrameGetLasti == nullptr || a.CodeAddr2Line == nullptr) a.FrameGetLasti = nullptr, a.CodeAddr2Line = nullptr;
    a.GetAttr = reinterpret_cast<void* (*)(void*, const char*)>(sym("PyObject_GetAttrString"));
    a.AsUTF8 = reinterpret_cast<const char* (*)(void*)>(sym("PyUnicode_AsUTF8"));
    a.IncRef = reinterpret_cast<void (*)(void*)>(sym("Py_IncRef"));
    a.DecRef = reinterpret_cast<void (*)(void*)>(sym("Py_DecRef"));
    a.ErrClear = reinterpret_cast<void (*)()>(sym("PyErr_Clear"));
    a.ok = a.IsInitialized && a.GetThisThreadState && a.GILEnsure && a.GILRelease && a.GetFrame && a.FrameGetCode &&
           a.FrameGetBack && a.FrameGetLine && a.GetAttr && a.AsUTF8 && a.IncRef && a.DecRef && a.ErrClear;
    return a;
  }();
  return api;
}

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

std::string basename_of(const char* path) {
  if (path == nullptr) return "";
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

StackCollector::StackCollector(StackMode mode, size_t max_frames) : mode_(mode), max_frames_(max_frames) {
  if (mode_ == StackMode::kNative || mode_ == StackMode::kBoth) {
    void* warm[4];
    (void)backtrace(warm, 4);  // loads the unwinder now, not inside the first allocation callback
  }
}

// The walk holds the GIL but not mu_: reading frames can allocate Python objects (a frame object
// for each caller), so a garbage collection can run finalizers that free or allocate memory on
// this thread, and the tracer's callback would then capture again. Only work that runs no Python
// code (table lookups, PyCode_Addr2Line) is done under mu_.
//
// Where the interpreter has PyFrame_GetLasti (3.11+), a frame is its code object and the offset
// of its instruction; the line is computed once per (code, offset) and cached, since decoding the
// line table was most of the cost of a walk (bench/stacks). Older interpreters give the line.
void StackCollector::python_frames(std::vector<Raw>* out) {
  const PyApi& py = py_api();
  if (!py.ok || !py.IsInitialized() || (py.IsFinalizing && py.IsFinalizing())) return;
  if (py.GetThisThreadState() == nullptr) return;  // this thread never ran Python
  const int g = py.GILEnsure();
  thread_local std::vector<PyFrameKey> scratch;  // reused by the thread's captures
  std::vector<PyFrameKey>& frames = scratch;
  const size_t base = frames.size();  // a capture nested in this one (from a finalizer) keeps ours
  void* f = py.GetFrame();
  if (f) py.IncRef(f);
  while (f && frames.size() - base < max_frames_) {
    void* code = py.FrameGetCode(f);  // a new reference, dropped at the end
    frames.push_back(PyFrameKey{code, py.FrameGetLasti ? py.FrameGetLasti(f) : py.FrameGetLine(f)});
    void* back = py.FrameGetBack(f);
    py.DecRef(f);
    f = back;
  }
  if (f) py.DecRef(f);
  const size_t first = out->size();
  // One lookup per frame where every (code, offset) was seen before: the common case.
  bool missed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t k = base; k < frames.size() && !missed; ++k) {
      if (!frames[k].code) continue;
      auto it = py_frames_.find(frames[k]);
      if (it == py_frames_.end()) missed = true;
      else out->push_back(it->second);
    }
  }
  if (missed) {
    out->resize(first);
    // Names of code objects seen for the first time, read while the GIL is held.
    std::vector<std::pair<void*, std::pair<std::string, std::string>>> fresh;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t k = base; k < frames.size(); ++k)
        if (frames[k].code && !code_index_.count(frames[k].code)) fresh.emplace_back(frames[k].code, std::pair<std::string, std::string>{});
    }
    for (auto& [code, names] : fresh) {
      for (int k = 0; k < 2; ++k) {
        void* s = py.GetAttr(code, k == 0 ? "co_filename" : "co_qualname");
        if (s == nullptr && k == 1) {
          py.ErrClear();
          s = py.GetAttr(code, "co_name");  // before 3.11
        }
        const char* text = s ? py.AsUTF8(s) : nullptr;
        (k == 0 ? names.first : names.second) = text ? text : "?";
        if (!text) py.ErrClear();
        if (s) py.DecRef(s);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [code, names] : fresh) {
      if (code_index_.count(code)) continue;
      code_index_.emplace(code, static_cast<uint32_t>(py_code_.size()));
      py_code_.push_back(std::move(names));
      py.IncRef(code);  // keeps the code object (and so its address, names and lines) alive
    }
    for (size_t k = base; k < frames.size(); ++k) {
      const auto [code, at] = frames[k];
      if (!code) continue;
      auto it = py_frames_.find(frames[k]);
      if (it == py_frames_.end()) {
        // PyCode_Addr2Line runs no Python code: safe under mu_.
        const int line = py.FrameGetLasti ? py.CodeAddr2Line(code, at) : at;
        it = py_frames_.emplace(frames[k], Raw{code_index_.at(code), static_cast<uint32_t>(line < 0 ? 0 : line), 1}).first;
      }
      out->push_back(it->second);
    }
  }
  for (size_t k = base; k < frames.size(); ++k)
    if (frames[k].code) py.DecRef(frames[k].code);
  frames.resize(base);
  py.GILRelease(g);
}

uint32_t StackCollector::capture() {
  if (mode_ == StackMode::kNone) return 0;
  thread_local std::vector<Raw> scratch;  // copied only for a stack not seen before
  std::vector<Raw>& raw = scratch;
  raw.clear();
  try {
    if (mode_ == StackMode::kPython || mode_ == StackMode::kBoth) python_frames(&raw);
    if (mode_ == StackMode::kNative || mode_ == StackMode::kBoth) {
      void* pcs[96];
      const int n = backtrace(pcs, static_cast<int>(std::min<size_t>(96, max_frames_ + 4)));
      // Return addresses point after the call: the call is one byte earlier (for symbolization).
      for (int i = 0; i < n; ++i) raw.push_back(Raw{reinterpret_cast<uint64_t>(pcs[i]) - 1, 0, 0});
    }
  } catch (...) {
    return 0;
  }
  if (raw.empty()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  ++captured_;
  if (raw.front().python) ++python_captured_;
  auto it = index_.find(raw);
  if (it != index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(stacks_.size());
  stacks_.push_back(raw);
  index_.emplace(raw, id);
  return id;
}

const ResolvedFrame& StackCollector::symbolize(uint64_t pc) {
  auto it = symbols_.find(pc);
  if (it != symbols_.end()) return it->second;
  ResolvedFrame f;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(pc), &info) != 0) {
    f.file = basename_of(info.dli_fname);
    if (info.dli_sname) f.function = demangle(info.dli_sname);
    else f.function = "0x" + [&] {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(pc - reinterpret_cast<uint64_t>(info.dli_fbase)));
      return std::string(buf);
    }();
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(pc));
    f.function = buf;
  }
  return symbols_.emplace(pc, std::move(f)).first->second;
}

std::vector<ResolvedFrame> StackCollector::resolve(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ResolvedFrame> out;
  if (id == 0 || id >= stacks_.size()) return out;
  for (const Raw& r : stacks_[id]) {
    if (r.python) {
      const auto& [file, fn] = py_code_[r.value];
      out.push_back(ResolvedFrame{fn, file, r.line, FrameKind::kPython});
    } else {
      out.push_back(symbolize(r.value));
    }
  }
  return out;
}

}  // namespace moeprof::profiler
