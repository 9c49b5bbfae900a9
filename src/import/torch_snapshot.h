// PyTorch CUDA memory snapshots -> moeprof traces.
//
// Input: the dict that torch.cuda.memory._snapshot() returns and _dump_snapshot() pickles:
//   segments: [{device, address, total_size, stream, blocks: [{size, requested_size, state,
//               frames, (address)}], ...}]          the allocator's state when the snapshot was taken
//   device_traces: [[{action, addr, size, stream, time_us, frames, (user_metadata)}, ...], ...]
//               the history ring buffer of each device (_record_memory_history), oldest first
//   allocator_settings: {...}                        summarised into the run metadata
// frames are [{filename, line, name}], innermost first. `size` in trace entries and
// `requested_size` in blocks are the sizes the caller asked for, before the allocator rounds them.
//
// Mapping (docs/tracing.md, "Importing a PyTorch memory snapshot"):
// - device_traces[i] -> device i. alloc -> kAlloc (address, bytes = size, stream, timestamp =
//   time_us * 1000 made non-decreasing, seq = the entry's index). The free policy picks which of
//   free_requested / free_completed becomes the kFree; the other is not recorded.
// - FreeOn::kCompleted (default): an allocation lives until free_completed, when the caching
//   allocator can reuse the block. This is PyTorch's own view: the memory_viz timeline and the
//   requested_bytes / active statistics. FreeOn::kRequested: until free_requested, when the
//   tensor was released (memory_allocated() drops then); the two differ only for blocks that were
//   used on another stream (record_stream).
// - Allocations live before the recorded history began are synthesized at the start of the
//   device's trace (timestamp of its first entry, seq 0): a free (of the policy's kind) of an
//   address the trace never allocated, with the free's size; and every block the snapshot's
//   segments hold live (active_allocated, plus active_pending_free under kCompleted) that the
//   trace does not leave live, with its requested_size and its frames.
// - segment_alloc / segment_free / segment_map / segment_unmap -> kPoolReserve with address 0 and
//   bytes = the device's reserved bytes after the event. The reserved bytes before the first
//   entry (one kPoolReserve at the start) are the segments' total at the end minus the net
//   change the entries make.
// - oom -> a zero-length marker named "oom: ..." (begin and end records). snapshot entries are
//   dropped; other actions (annotate, ...) are skipped and counted.
// - Records carry Category::kUnknown and MemKind::kOther (the blocks are sub-allocations of the
//   allocator's cudaMalloc segments). The stack is the entry's frames; a frame is Python when its
//   file ends in ".py" or starts with '<', native otherwise. name = "function (file.py:line)" of
//   the innermost Python frame outside torch's own package (else the innermost Python frame);
//   scope = the entry's user_metadata (torch.cuda.memory._set_memory_metadata) when present.
//   Streams are numbered 0 (the default stream), 1, 2, ... in order of first appearance.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/trace.h"
#include "import/pickle.h"

namespace moeprof::importer {

enum class FreeOn : uint8_t { kCompleted, kRequested };
std::string_view free_on_name(FreeOn f);            // "completed" | "requested"
bool parse_free_on(std::string_view s, FreeOn* out);

struct TorchImportOptions {
  FreeOn free_on = FreeOn::kCompleted;
  std::string run_name;  // RunMeta::name; import_torch_snapshot_file defaults it to the file stem
};

// What the import saw on one device (a device with neither entries nor segments is not listed).
struct TorchDeviceSummary {
  uint16_t device = 0;
  uint64_t entries = 0;                     // length of device_traces[device]
  uint64_t allocs = 0, frees = 0;           // kAlloc records from alloc entries, kFree records
  uint64_t synthesized_from_frees = 0;      // allocations synthesized at the start (see above)
  uint64_t synthesized_from_segments = 0;
  uint64_t segment_events = 0, oom_events = 0, skipped_entries = 0;
  bool has_segments = false;                // the snapshot lists segments of this device
  // The snapshot has a `segments` list: it covers every device (one absent from it held nothing
  // at the end), so the end state is checked on each, has_segments or not.
  bool end_state_checked = false;
  uint64_t initial_reserved_bytes = 0;      // reserved before the first entry
  uint64_t end_reserved_bytes = 0;          // the segments' total_size (0 without segments)
  uint64_t end_live_bytes = 0;              // live at the end of the imported trace
  uint64_t snapshot_live_bytes = 0;         // requested_size of the blocks the policy counts live
  // Addresses where the end of the trace and the segments disagree (live in one and not in the
  // other, or sizes differ); 0 for a consistent snapshot. Meaningful when end_state_checked.
  uint64_t end_state_mismatches = 0;
  uint64_t synthesized() const { return synthesized_from_frees + synthesized_from_segments; }
};

struct TorchImportResult {
  Trace trace;
  std::vector<TorchDeviceSummary> devices;   // by device id
  uint64_t entries = 0;                      // over all devices
  uint64_t synthesized_allocs = 0;
  std::map<std::string, uint64_t> skipped_actions;  // unknown actions and how often they appear
  // Block states other than active_allocated, active_pending_free and inactive, and how often they
  // appear: such a block is not counted live (nor synthesized).
  std::map<std::string, uint64_t> unknown_block_states;
};

// Converts a parsed snapshot. Errors (kBadInput) name the offending field, for example
// "device_traces[0][17].size: expected int, got str".
Result<TorchImportResult> import_torch_snapshot(const PyValue& root, const TorchImportOptions& opt = {});

// Reads and parses the pickle, then imports it; errors are prefixed with the path.
Result<TorchImportResult> import_torch_snapshot_file(const std::string& path, TorchImportOptions opt = {});

// The label the import gives a stack (see above); "" when it has no Python frame.
std::string python_frame_label(const Trace& trace, StackId id);

// Replaces invalid UTF-8 (lone surrogates that Python writes with surrogatepass included) by U+FFFD.
std::string sanitize_utf8(std::string_view s);

}  // namespace moeprof::importer
