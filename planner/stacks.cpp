#include "planner/stacks.h"

#include <array>

namespace moeprof::planner {

namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

std::string frame_text(const RunAnalysis& run, const StackFrame& f) {
  std::string s = run.str(f.function);
  if (s.empty()) s = "??";
  const std::string& file = run.str(f.file);
  if (!file.empty()) {
    s += " (" + file;
    if (f.line) s += ":" + std::to_string(f.line);
    s += ")";
  }
  return s;
}

}  // namespace

bool is_library_frame(std::string_view function, std::string_view file, FrameKind kind) {
  if (kind == FrameKind::kPython) {
    // The interpreter's own machinery and torch's package (its Python wrappers of the allocator,
    // module call plumbing); transformers and other model code stay.
    // torch's package is matched as a package directory ("site-packages/torch/"), not as any
    // path component named torch: environments live in places such as /opt/torch/.venv.
    static constexpr std::array<std::string_view, 7> kPy = {"<frozen ", "-packages/torch/", "\\torch\\",
                                                            "importlib", "/runpy.py", "/threading.py", "<string>"};
    for (std::string_view p : kPy)
      if (contains(file, p)) return true;
    return false;
  }
  static constexpr std::array<std::string_view, 14> kNative = {
      "libcuda.so", "libcudart", "libcublas", "libcudnn", "libnccl", "libcupti", "libtorch", "libc10",
      "libpython", "libmoeprof_inject", "libc.so", "libstdc++", "ld-linux", "libnvrtc"};
  for (std::string_view p : kNative)
    if (contains(file, p)) return true;
  // Demangled names of PyTorch's dispatcher and allocator, and of the CPython evaluation loop.
  static constexpr std::array<std::string_view, 6> kFn = {"c10::", "at::", "torch::", "_PyEval", "PyObject_", "cuda"};
  for (std::string_view p : kFn)
    if (function.rfind(p, 0) == 0) return true;
  return false;
}

std::vector<std::string> user_frames(const RunAnalysis& run, StackId id, size_t max) {
  std::vector<std::string> out;
  const auto& frames = run.stacks.stack(id);
  for (uint32_t fid : frames) {
    if (out.size() >= max) break;
    const StackFrame& f = run.stacks.frame(fid);
    if (!is_library_frame(run.str(f.function), run.str(f.file), f.kind)) out.push_back(frame_text(run, f));
  }
  if (out.empty())
    for (uint32_t fid : frames) {
      if (out.size() >= max) break;
      out.push_back(frame_text(run, run.stacks.frame(fid)));
    }
  return out;
}

std::vector<std::string> all_frames(const RunAnalysis& run, StackId id) {
  std::vector<std::string> out;
  for (uint32_t fid : run.stacks.stack(id)) out.push_back(frame_text(run, run.stacks.frame(fid)));
  return out;
}

}  // namespace moeprof::planner
