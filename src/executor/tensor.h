// Tensor: a typed view of backend storage. Storage is reference counted: it is released (and the
// release recorded in the trace) when the last Tensor referring to it goes away, so tensor
// lifetimes follow the code exactly like reference counting in a Python engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/trace.h"

namespace moeprof {

class Backend;
class GraphPool;

// What an allocation is, for the trace: name ("post_norm"), scope ("layer.3/attn"), category.
// worst_bytes: for a tensor whose size follows the routing (the MoE runner's padded rows with
// --moe-rows routed), the bytes it takes under the worst routing of the router's capacity; 0 when
// its size cannot change. The executor's accounting keeps the activation peak under that routing
// beside the measured one (recorder.h); the trace holds the bytes allocated.
// data_dependent: its size was set by the data of this run (a drawn routing or the router's own,
// counted on the host), not by the sizes alone; the trace marks it (kFlagDataDependent) so that
// `moeprof fit` never fits it a law by chance. A routing-sized tensor under the deterministic
// `--routing worst`, or inside a CUDA graph (sized at the worst case), is not data-dependent.
// worst_only: an allocation of no bytes that stands for its worst_bytes (an expert-parallel rank
// that received no row: its exact buffers have none, a worst routing would fill them). Only the
// observers that account the worst routing see it (AllocationObserver::wants_worst_only); the
// trace holds nothing, and no op records a use of it.
struct AllocTag {
  std::string name;
  std::string scope;
  Category category = Category::kActivation;
  uint64_t worst_bytes = 0;
  bool data_dependent = false;
  bool worst_only = false;
};

// One allocation from a backend. Destroying it returns the memory to the backend.
class Storage {
 public:
  Storage(Backend* backend, void* ptr, size_t bytes, uint64_t id, Category category, MemKind mem_kind)
      : backend_(backend), ptr_(ptr), bytes_(bytes), id_(id), category_(category), mem_kind_(mem_kind) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  uint64_t id() const { return id_; }
  Category category() const { return category_; }
  MemKind mem_kind() const { return mem_kind_; }
  Backend* backend() const { return backend_; }
  // Carved from a CUDA-graph pool (Backend::set_graph_pool): released back to it, not recorded.
  GraphPool* graph_pool() const { return graph_pool_; }
  void set_graph_pool(GraphPool* p) { graph_pool_ = p; }
  // False for an allocation no observer was told of (Backend::set_unrecorded): its release is
  // not told either.
  bool recorded() const { return recorded_; }
  void set_recorded(bool r) { recorded_ = r; }
  // AllocTag::worst_only: only the worst-routing observers were told (and are told its release).
  bool worst_only() const { return worst_only_; }
  void set_worst_only(bool w) { worst_only_ = w; }

 private:
  Backend* backend_;
  void* ptr_;
  size_t bytes_;
  uint64_t id_;
  Category category_;
  MemKind mem_kind_;
  GraphPool* graph_pool_ = nullptr;
  bool recorded_ = true;
  bool worst_only_ = false;
};

// A 1-D or 2-D (rows x cols) view; 2-D views may have a row stride larger than cols (column
// slices of a wider buffer). Higher-rank shapes are expressed by the ops' own parameters
// (e.g. heads x head_dim inside a row).
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, DType dtype, int64_t rows, int64_t cols)
      : storage_(std::move(storage)), dtype_(dtype), rows_(rows), cols_(cols), ld_(cols) {}

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t ld() const { return ld_; }  // elements between consecutive rows
  int64_t numel() const { return rows_ * cols_; }
  bool contiguous() const { return ld_ == cols_; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Number of Tensors sharing the storage (for tests and ownership checks).
  long use_count() const { return storage_.use_count(); }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T>
  T* data() const { return static_cast<T*>(raw()); }

  // Columns [c0, c0+n) of every row (shares storage; ld unchanged).
  Tensor cols_view(int64_t c0, int64_t n) const;
  // Rows [r0, r0+n) (shares storage).
  Tensor rows_view(int64_t r0, int64_t n) const;
  // Same storage reinterpreted as a contiguous rows x cols tensor (must be contiguous and fit).
  Tensor reshaped(int64_t rows, int64_t cols) const;
  std::string shape_string() const;  // "16384x7168"
  void reset() { storage_.reset(); }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  DType dtype_ = DType::kUnknown;
  int64_t rows_ = 0, cols_ = 0, ld_ = 0;
};

}  // namespace moeprof
