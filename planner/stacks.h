// Call stacks in analyses: the frames a person reads first. Library-internal frames (the Python
// interpreter, torch's own package, CUDA and PyTorch shared libraries, moeprof's injection library)
// are folded, so what remains is the user's code: the model, its libraries such as transformers,
// the user's own program. docs/tracing.md ("Call stacks") lists the rules.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/trace.h"
#include "planner/analysis.h"

namespace moeprof::planner {

// True when a frame belongs to a library whose frames are folded.
bool is_library_frame(std::string_view function, std::string_view file, FrameKind kind);

// Up to `max` frames of user code, innermost first, as "function (file:line)". Falls back to the
// innermost frames when every frame is library-internal.
std::vector<std::string> user_frames(const RunAnalysis& run, StackId id, size_t max = 3);

// Every frame, innermost first.
std::vector<std::string> all_frames(const RunAnalysis& run, StackId id);

}  // namespace moeprof::planner
