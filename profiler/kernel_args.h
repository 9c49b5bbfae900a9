// Kernel-argument scanning for kUse records (TracerOptions::uses). Pure C++, no CUDA: the tracer
// keeps a map of live device allocations from the allocation API callbacks and, at each kernel
// launch, reads every aligned 8-byte word of every kernel parameter (its layout from
// cuFuncGetParamInfo / cuKernelGetParamInfo) and looks it up in the map. A word that falls inside
// a live allocation [base, base + size) is a use of that allocation. Tested on a CPU-only machine
// (tests/profiler/kernel_args_test.cpp).
//
// A scanned argument says only that the kernel could reach the allocation, not whether it reads or
// writes it: the tracer sets both kUseRead and kUseWrite. A word that happens to equal an address
// inside a live allocation (an integer argument, say) is a false use; a pointer the kernel reaches
// only indirectly (through device memory, a pointer table) is a missed one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace moeprof::profiler {

struct LiveRange {
  uint64_t base = 0;
  uint64_t size = 0;
  uint16_t device = 0;
};

// Live allocations by base address. Not thread-safe (the tracer guards it with a mutex).
// Device addresses are unique within a process under unified addressing, so one map serves every
// device and context; each range remembers its device.
class LiveAllocationMap {
 public:
  // Adds [base, base + size). Ranges overlapping it are stale (their free was not seen) and are
  // removed first. size 0 or base 0 is ignored.
  void insert(uint64_t base, uint64_t size, uint16_t device);
  // Removes the allocation starting at `base`; false if there is none.
  bool erase(uint64_t base);
  // The allocation with base <= addr < base + size, or nullptr.
  const LiveRange* find(uint64_t addr) const;
  size_t size() const { return ranges_.size(); }
  void clear() { ranges_.clear(); }

 private:
  std::map<uint64_t, LiveRange> ranges_;
};

// One kernel parameter: its offset in the parameter buffer and its size (cu*GetParamInfo).
struct ParamSlot {
  size_t offset = 0;
  size_t size = 0;
};

// Appends every 8-byte word of every parameter that is 8-byte aligned in the parameter buffer
// (offset + k a multiple of 8, the word wholly inside the parameter) to `out`, skipping zeros.
// `params[i]` points to the value of parameter i (cuLaunchKernel's kernelParams).
void collect_param_words(void* const* params, const ParamSlot* layout, size_t n, std::vector<uint64_t>* out);
// The same for a packed parameter buffer (cuLaunchKernel's extra, CU_LAUNCH_PARAM_BUFFER_POINTER):
// every aligned 8-byte word of its first `size` bytes.
void collect_buffer_words(const void* buffer, size_t size, std::vector<uint64_t>* out);

// Finds the packed parameter buffer in a cuLaunchKernel `extra` array (pairs of
// CU_LAUNCH_PARAM_BUFFER_POINTER / CU_LAUNCH_PARAM_BUFFER_SIZE and a value, ended by
// CU_LAUNCH_PARAM_END). Reads at most 64 entries. False if there is none.
bool find_packed_buffer(void* const* extra, const void** buffer, size_t* size);
// cuda.h's values (checked against cuda.h in launch_uses.cpp).
inline constexpr uintptr_t kLaunchParamEnd = 0, kLaunchParamBufferPointer = 1, kLaunchParamBufferSize = 2;

// Looks every word up in `live` and appends each allocation hit to `hits` once (first-hit order;
// allocations already in `hits` are not added again). Returns the number added.
size_t match_words(const LiveAllocationMap& live, const std::vector<uint64_t>& words, std::vector<LiveRange>* hits);

}  // namespace moeprof::profiler
