// Counter-based hash for deterministic weight generation, identical on host and device.
#pragma once
#include <cstdint>

#include "hostdev.h"

namespace moeprof::kern {

// splitmix64 finalizer of (seed + (i + 1) * golden ratio).
MOEPROF_HD uint64_t hash64(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits: exactly representable in fp32.
MOEPROF_HD float hash_unit(uint64_t seed, uint64_t i) {
  return static_cast<float>(hash64(seed, i) >> 40) * (1.0f / 16777216.0f);
}

// Integer in [lo, hi) (hi > lo): init_ints' element i on every backend.
MOEPROF_HD int32_t hash_int(uint64_t seed, uint64_t i, int32_t lo, int32_t hi) {
  const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(hi) - static_cast<int64_t>(lo));
  return static_cast<int32_t>(static_cast<int64_t>(lo) + static_cast<int64_t>(hash64(seed, i) % range));
}

}  // namespace moeprof::kern
