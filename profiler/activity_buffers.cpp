// CUPTI activity buffers: a process-wide free list of equally sized buffers handed to CUPTI (never
// returned to the OS), and the completion callback that decodes each buffer into the session's
// assembler (profiler/activity_decode.h) under the writer mutex.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "profiler/activity_decode.h"
#include "profiler/tracer_state.h"

namespace moeprof::profiler::detail {
namespace {

struct BufferPool {
  std::mutex mu;
  std::vector<uint8_t*> free_list;
  size_t allocated = 0;
  size_t bytes = 0;
};
BufferPool& buffer_pool() {
  static auto* p = new BufferPool;
  return *p;
}

uint8_t* new_buffer(size_t bytes) {
  // CUPTI requires ACTIVITY_RECORD_ALIGNMENT (8); malloc gives 16.
  return static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
}

void release_buffer(uint8_t* b) {
  if (b == nullptr) return;
  BufferPool& p = buffer_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.free_list.push_back(b);
}

// MOEPROF_CUPTI_DUMP_DIR=DIR writes the valid bytes of the first 16 completed buffers to
// DIR/buf<N>.cuptibuf, for the CPU-only decoding tests (tests/golden/cupti). Off by default.
void dump_buffer(const uint8_t* buffer, size_t valid) {
  static const char* dir = std::getenv("MOEPROF_CUPTI_DUMP_DIR");
  static std::atomic<int> n{0};
  if (dir == nullptr || valid == 0) return;
  const int i = n.fetch_add(1);
  if (i >= 16) return;
  const std::string path = std::string(dir) + "/buf" + std::to_string(i) + ".cuptibuf";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(buffer, 1, valid, f);
    std::fclose(f);
  }
}

}  // namespace

void preallocate_buffers(size_t bytes, size_t n) {
  BufferPool& p = buffer_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.bytes == 0) p.bytes = bytes;
  while (p.free_list.size() < n) {
    uint8_t* b = new_buffer(p.bytes);
    if (b == nullptr) break;
    p.free_list.push_back(b);
    ++p.allocated;
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;  // as many as fit
  *buffer = nullptr;
  *size = 0;
  Session* s = g_session.load(std::memory_order_acquire);
  size_t max_buffers = s != nullptr ? s->opt.max_buffers : 64;
  BufferPool& p = buffer_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.bytes == 0) p.bytes = size_t{8} << 20;
  uint8_t* b = nullptr;
  if (!p.free_list.empty()) {
    b = p.free_list.back();
    p.free_list.pop_back();
  } else if (p.allocated < max_buffers) {
    b = new_buffer(p.bytes);
    if (b != nullptr) ++p.allocated;
  }
  if (b == nullptr) {
    // CUPTI drops the records it cannot store and counts them (cuptiActivityGetNumDroppedRecords).
    if (s != nullptr) s->buffers_denied.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  *buffer = b;
  *size = p.bytes;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid) {
  dump_buffer(buffer, valid);
  Session* s = g_session.load(std::memory_order_acquire);
  if (s != nullptr && !g_forked_child.load(std::memory_order_relaxed)) {
    try {
      if (valid > 0) {
        std::lock_guard<std::mutex> lock(s->writer_mu);
        if (!s->closed && s->assembler) {
          DecodeStats st;
          decode_activity_buffer(buffer, valid, *s->assembler, &st);
          if (st.error) s->decode_errors.fetch_add(1, std::memory_order_relaxed);
        }
      }
    } catch (...) {
      s->decode_errors.fetch_add(1, std::memory_order_relaxed);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped > 0)
      s->dropped.fetch_add(dropped, std::memory_order_relaxed);
    s->buffers_completed.fetch_add(1, std::memory_order_relaxed);
  }
  release_buffer(buffer);
}

}  // namespace moeprof::profiler::detail
