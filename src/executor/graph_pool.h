// The memory pool every captured CUDA graph of a serving run shares, as SGLang's and vLLM's decode
// graphs share one private pool of PyTorch's caching allocator: the backend's own allocator over
// graph-owned segments (Backend::set_graph_pool routes a capture's tensors here).
//
// The pool's memory is a list of segments. Each is an ordinary allocation of the backend: plain
// device memory (MemKind::kDevice: cudaMalloc, which a relaxed stream capture allows), category
// `graph`, name `graph_pool_segment`, scope the capture that needed it ("graph.bs64"). So the
// executor's trace and a CUPTI trace of the run both see the pool, segment by segment, with the
// same tags. Tensors are carved from the segments best-fit at 512-byte granularity (the smallest
// free block that holds the request; ties to the earlier segment, then the lower offset), and a
// released block coalesces with its free neighbours. A request no free block holds adds a segment,
// sized as PyTorch's caching allocator sizes them: 2 MiB for requests up to 1 MiB, 20 MiB up to
// 10 MiB, larger ones rounded up to 2 MiB. Segments are kept until the pool is destroyed: the
// graphs' memory stays reserved while they exist, and a graph's outputs stay live in it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "executor/tensor.h"

namespace moeprof {

class Backend;
struct AllocTag;

class GraphPool {
 public:
  static constexpr uint64_t kGranule = 512;
  explicit GraphPool(Backend& backend) : be_(backend) {}
  // Releases the segments (recorded frees). Every tensor carved from the pool must be gone.
  ~GraphPool();
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  // The scope new segments are tagged with ("graph.bs64": the capture being recorded). Also starts
  // that capture's live peak (live_peak_since_scope) afresh.
  void set_scope(std::string scope);
  // The highest live bytes since set_scope, and the blocks live then (name, scope, bytes; the
  // tensors a captured forward writes, and the outputs of the graphs captured before).
  uint64_t scope_live_peak_bytes() const { return scope_peak_; }
  struct LiveBlock {
    std::string name, scope;
    uint64_t bytes = 0;
  };
  const std::vector<LiveBlock>& scope_live_at_peak() const { return scope_peak_set_; }
  // Every block carved since set_scope, the largest per (scope, name), in that order: what each
  // tensor of the capture took, live at its peak or not.
  std::vector<LiveBlock> scope_blocks() const;
  // A block of at least `bytes` (Backend::empty calls this while the pool is set).
  Result<void*> allocate(size_t bytes, const AllocTag& tag);
  void release(void* p);

  uint64_t reserved_bytes() const { return reserved_; }     // the segments' bytes
  uint64_t live_bytes() const { return live_; }             // carved blocks in use
  uint64_t live_peak_bytes() const { return live_peak_; }
  size_t segment_count() const { return segs_.size(); }
  // Bytes of segments added under each scope, in the order the scopes first grew the pool.
  const std::vector<std::pair<std::string, uint64_t>>& growth() const { return growth_; }
  // PyTorch's segment size for a request of `rounded` bytes (a multiple of kGranule).
  static uint64_t segment_bytes(uint64_t rounded);

 private:
  struct Segment {
    Tensor mem;
    uint64_t base = 0, size = 0;
    std::map<uint64_t, uint64_t> free;  // offset -> bytes
  };
  struct Block {
    size_t seg;
    uint64_t offset, size;
    std::string name, scope;
  };
  Backend& be_;
  std::string scope_ = "graph";
  std::vector<Segment> segs_;
  std::unordered_map<uint64_t, Block> live_blocks_;  // address -> block
  uint64_t reserved_ = 0, live_ = 0, live_peak_ = 0, scope_peak_ = 0;
  std::vector<LiveBlock> scope_peak_set_;
  std::map<std::pair<std::string, std::string>, uint64_t> scope_blocks_;  // (scope, name) -> largest block
  std::vector<std::pair<std::string, uint64_t>> growth_;
};

}  // namespace moeprof
