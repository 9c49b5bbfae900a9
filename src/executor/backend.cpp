#include "executor/backend.h"

#include "core/checked.h"
#include "executor/graph_pool.h"

#include <unistd.h>

#include <algorithm>

namespace moeprof {

Storage::~Storage() {
  if (backend_) backend_->release(*this);
}

Tensor Tensor::cols_view(int64_t c0, int64_t n) const {
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(c0) * dtype_size(dtype_);
  t.cols_ = n;
  return t;
}

Tensor Tensor::rows_view(int64_t r0, int64_t n) const {
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(r0 * ld_) * dtype_size(dtype_);
  t.rows_ = n;
  return t;
}

Tensor Tensor::reshaped(int64_t rows, int64_t cols) const {
  Tensor t = *this;
  t.rows_ = rows;
  t.cols_ = cols;
  t.ld_ = cols;
  return t;
}

std::string Tensor::shape_string() const { return std::to_string(rows_) + "x" + std::to_string(cols_); }

Result<Tensor> Backend::empty(DType dtype, int64_t rows, int64_t cols, const AllocTag& tag) {
  return empty(dtype, rows, cols, tag, default_mem_kind(tag.category));
}

Result<Tensor> Backend::empty(DType dtype, int64_t rows, int64_t cols, const AllocTag& tag, MemKind mem_kind) {
  if (rows < 0 || cols < 0) return Status::bad_input("negative tensor shape for " + tag.scope + "/" + tag.name);
  // rows * cols * element size, checked: a shape from a hostile config must fail here, not wrap
  // into a small buffer that the op then overruns.
  const auto checked = checked_product({rows, cols, static_cast<int64_t>(dtype_size(dtype))}, static_cast<int64_t>(kMaxBytes));
  if (!checked)
    return Status::bad_input("tensor " + tag.scope + "/" + tag.name + " of " + std::to_string(rows) + " x " +
                             std::to_string(cols) + " elements needs more than 2^63-1 bytes");
  const auto bytes = static_cast<size_t>(*checked);
  if (tag.worst_only && bytes != 0)
    return Status::run_failure("worst-only tensor " + tag.scope + "/" + tag.name + " of " + std::to_string(bytes) + " bytes: it has none");
  if (graph_pool_ != nullptr && counts_as_activation(tag.category)) {
    // Inside a graph capture: carved from the graph pool (its segments are the recorded memory).
    auto p = graph_pool_->allocate(bytes, tag);
    if (!p.is_ok())
      return p.status().with_context("allocating " + tag.scope + "/" + tag.name + " (" + std::to_string(bytes) +
                                     " bytes) in the CUDA-graph pool");
    auto storage = std::make_shared<Storage>(this, p.value(), bytes, next_id_++, tag.category, mem_kind);
    storage->set_graph_pool(graph_pool_);
    storage->set_recorded(false);
    return Tensor(storage, dtype, rows, cols);
  }
  auto p = do_allocate(bytes, mem_kind, tag);
  if (!p.is_ok())
    return p.status().with_context("allocating " + tag.scope + "/" + tag.name + " (" + std::to_string(bytes) + " bytes)");
  auto storage = std::make_shared<Storage>(this, p.value(), bytes, next_id_++, tag.category, mem_kind);
  Tensor t(storage, dtype, rows, cols);
  if (unrecorded_) {
    storage->set_recorded(false);
    return t;
  }
  if (tag.worst_only) {
    storage->set_recorded(false);
    storage->set_worst_only(true);
    const std::string shape = t.shape_string();
    for (auto* o : observers_)
      if (o->wants_worst_only()) o->on_alloc(*storage, tag, dtype, shape);
    return t;
  }
  const std::string shape = t.shape_string();
  for (auto* o : observers_) o->on_alloc(*storage, tag, dtype, shape);
  return t;
}

void Backend::release(Storage& s) {
  if (s.graph_pool() != nullptr) {
    s.graph_pool()->release(s.data());
    return;
  }
  if (s.recorded()) {
    for (auto* o : observers_) o->on_free(s);
  } else if (s.worst_only()) {
    for (auto* o : observers_)
      if (o->wants_worst_only()) o->on_free(s);
  }
  do_free(s.data(), s.bytes(), s.mem_kind());
}

void Backend::remove_observer(AllocationObserver* o) {
  observers_.erase(std::remove(observers_.begin(), observers_.end(), o), observers_.end());
}

void Backend::note_use(const std::string& op, std::initializer_list<const Tensor*> reads,
                       std::initializer_list<const Tensor*> writes) {
  if (observers_.empty()) return;
  // Tensors no observer saw allocated (graph pool, unrecorded) get no use records either.
  for (const Tensor* t : reads)
    if (t && t->defined() && t->storage()->recorded())
      for (auto* o : observers_) o->on_use(*t->storage(), op, false);
  for (const Tensor* t : writes)
    if (t && t->defined() && t->storage()->recorded())
      for (auto* o : observers_) o->on_use(*t->storage(), op, true);
}

bool Backend::memory_info(size_t* free_bytes, size_t* total_bytes) const {
  long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return false;
  *total_bytes = static_cast<size_t>(pages) * static_cast<size_t>(page);
  *free_bytes = static_cast<size_t>(avail > 0 ? avail : 0) * static_cast<size_t>(page);
  return true;
}

void Backend::marker(const std::string& name, bool begin) {
  for (auto* o : observers_) o->on_marker(name, begin);
}

void Backend::counter(const std::string& name, uint64_t value, uint64_t step) {
  for (auto* o : observers_) o->on_counter(name, value, step);
}

}  // namespace moeprof
