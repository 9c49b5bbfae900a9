#include "executor/meta_backend.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace moeprof {

Result<void*> MetaBackend::do_allocate(size_t bytes, MemKind /*kind*/, const AllocTag& tag) {
  if (device_bytes_ != 0 && enforce_ && bytes > device_bytes_ - std::min(live_bytes_, device_bytes_))
    return Status::run_failure("out of GPU memory allocating " + std::to_string(bytes) + " bytes for " + tag.scope + "/" + tag.name +
                               " (free " + std::to_string(device_bytes_ - std::min(live_bytes_, device_bytes_)) + " of total " +
                               std::to_string(device_bytes_) + ", the meta device's --gpu-memory)");
  // Distinct, aligned, never reused: a trace of a meta run has no address collisions.
  void* p = reinterpret_cast<void*>(next_);
  const uint64_t rounded = (static_cast<uint64_t>(bytes) + 255) / 256 * 256;
  next_ += rounded == 0 ? 256 : rounded;
  live_bytes_ += bytes;
  return p;
}

Status MetaBackend::do_copy_to_host(const Tensor& src, void* dst) {
  std::memset(dst, 0, static_cast<size_t>(src.rows()) * static_cast<size_t>(src.cols()) * dtype_size(src.dtype()));
  return Status::ok();
}

}  // namespace moeprof
