// Advice for large tables (header only): 2-MiB pages where the kernel has them.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace moeprof {

// Asks for 2-MiB pages on the 2-MiB-aligned part of [p, p + bytes), for a table about to be
// filled (advice only: without it, or where the kernel has none to give, 4-KiB pages). The first
// touch of each 4-KiB page is a page fault; on the 2-core CPU machine (a virtual machine) one
// costs 9 to 12 us (docs/performance.md, "Page faults"). A range with no aligned 2 MiB in it is
// left as it is.
inline void advise_huge(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (p == nullptr || bytes < kHuge) return;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace moeprof
