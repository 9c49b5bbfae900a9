// Element types of tensors, as recorded in traces and used by the executor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moeprof {

enum class DType : uint8_t {
  kUnknown = 0,
  kF32 = 1,
  kBF16 = 2,
  kF16 = 3,
  kE4M3 = 4,     // FP8 e4m3 (NVFP4 block scales)
  kFP4x2 = 5,    // two FP4 e2m1 values per byte, element 0 in the low nibble
  kU8 = 6,
  kI32 = 7,
  kI64 = 8,
};
inline constexpr int kNumDTypes = 9;

// Bytes per stored element (for kFP4x2 one stored element is one byte holding two values).
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kE4M3: case DType::kFP4x2: case DType::kU8: return 1;
    case DType::kI64: return 8;
    default: return 0;
  }
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kE4M3: return "e4m3";
    case DType::kFP4x2: return "fp4x2";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    default: return "unknown";
  }
}

}  // namespace moeprof
