#include "profiler/kernel_args.h"

#include <cstring>
#include <iterator>

namespace moeprof::profiler {

void LiveAllocationMap::insert(uint64_t base, uint64_t size, uint16_t device) {
  if (base == 0 || size == 0) return;
  const uint64_t end = base + size < base ? UINT64_MAX : base + size;
  // A range starting before `base` that reaches into it.
  auto it = ranges_.lower_bound(base);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > base) ranges_.erase(prev);
  }
  // Ranges starting inside [base, end).
  while (it != ranges_.end() && it->first < end) it = ranges_.erase(it);
  ranges_.emplace(base, LiveRange{base, size, device});
}

bool LiveAllocationMap::erase(uint64_t base) { return ranges_.erase(base) > 0; }

const LiveRange* LiveAllocationMap::find(uint64_t addr) const {
  auto it = ranges_.upper_bound(addr);  // first base > addr
  if (it == ranges_.begin()) return nullptr;
  --it;
  const LiveRange& r = it->second;
  return addr - r.base < r.size ? &r : nullptr;
}

void collect_param_words(void* const* params, const ParamSlot* layout, size_t n, std::vector<uint64_t>* out) {
  if (params == nullptr || layout == nullptr) return;
  for (size_t i = 0; i < n; ++i) {
    const auto* p = static_cast<const unsigned char*>(params[i]);
    if (p == nullptr) continue;
    const size_t off = layout[i].offset, sz = layout[i].size;
    for (size_t k = (8 - off % 8) % 8; k + 8 <= sz; k += 8) {
      uint64_t w;
      std::memcpy(&w, p + k, 8);
      if (w != 0) out->push_back(w);
    }
  }
}

void collect_buffer_words(const void* buffer, size_t size, std::vector<uint64_t>* out) {
  if (buffer == nullptr) return;
  const auto* p = static_cast<const unsigned char*>(buffer);
  for (size_t k = 0; k + 8 <= size; k += 8) {
    uint64_t w;
    std::memcpy(&w, p + k, 8);
    if (w != 0) out->push_back(w);
  }
}

bool find_packed_buffer(void* const* extra, const void** buffer, size_t* size) {
  if (extra == nullptr) return false;
  const void* buf = nullptr;
  const size_t* sz = nullptr;
  for (int i = 0; i < 64; i += 2) {
    auto key = reinterpret_cast<uintptr_t>(extra[i]);
    if (key == kLaunchParamEnd) break;
    if (key == kLaunchParamBufferPointer) buf = extra[i + 1];
    else if (key == kLaunchParamBufferSize) sz = static_cast<const size_t*>(extra[i + 1]);
    else break;  // unknown key: stop rather than misread
  }
  if (buf == nullptr || sz == nullptr) return false;
  *buffer = buf;
  *size = *sz;
  return true;
}

size_t match_words(const LiveAllocationMap& live, const std::vector<uint64_t>& words, std::vector<LiveRange>* hits) {
  size_t added = 0;
  for (uint64_t w : words) {
    const LiveRange* r = live.find(w);
    if (r == nullptr) continue;
    bool seen = false;
    for (const LiveRange& h : *hits) seen = seen || h.base == r->base;
    if (seen) continue;
    hits->push_back(*r);
    ++added;
  }
  return added;
}

}  // namespace moeprof::profiler
