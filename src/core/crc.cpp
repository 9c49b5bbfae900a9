// CRC-32 (format v1) and CRC-32C (format v2) checksums of .mtrace frames.
#include <array>
#include <cstring>

#include "core/trace_io.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace moeprof {

namespace {

std::array<uint32_t, 8 * 256> make_crc_tables(uint32_t poly) {
  std::array<uint32_t, 8 * 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? poly ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s * 256 + i] = (t[(s - 1) * 256 + i] >> 8) ^ t[t[(s - 1) * 256 + i] & 0xFF];
  }
  return t;
}
const std::array<uint32_t, 8 * 256> kCrc = make_crc_tables(0xEDB88320u);   // IEEE 802.3, reflected
const std::array<uint32_t, 8 * 256> kCrcC = make_crc_tables(0x82F63B78u);  // Castagnoli, reflected

// Slicing-by-8 over a reflected table set.
uint32_t crc_sliced(const std::array<uint32_t, 8 * 256>& T, const uint8_t* p, size_t n, uint32_t crc) {
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = T[7 * 256 + (lo & 0xFF)] ^ T[6 * 256 + ((lo >> 8) & 0xFF)] ^ T[5 * 256 + ((lo >> 16) & 0xFF)] ^
          T[4 * 256 + (lo >> 24)] ^ T[3 * 256 + (hi & 0xFF)] ^ T[2 * 256 + ((hi >> 8) & 0xFF)] ^
          T[1 * 256 + ((hi >> 16) & 0xFF)] ^ T[0 * 256 + (hi >> 24)];
    p += 8;
    n -= 8;
  }
  while (n--) crc = T[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes CRC-32C. Three independent streams hide its 3-cycle latency;
// they are combined by shifting the partial CRCs over the bytes that follow them (a shift by N
// zero bytes is a linear map, applied here with the software tables, once per block).
__attribute__((target("sse4.2"))) uint32_t crc32c_hw_serial(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t crc = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    crc = _mm_crc32_u64(crc, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(crc);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

// Multiplies a CRC state by x^(8*len) mod P (advances it over `len` zero bytes) with a matrix
// built once per block length.
struct CrcShift {
  uint32_t table[4][256];
  explicit CrcShift(size_t len) {
    // Column i = the state after shifting the single bit i over len zero bytes.
    uint32_t col[32];
    for (int i = 0; i < 32; ++i) {
      uint32_t v = 1u << i;
      for (size_t k = 0; k < len; ++k) v = kCrcC[v & 0xFF] ^ (v >> 8);
      col[i] = v;
    }
    for (int b = 0; b < 4; ++b)
      for (uint32_t x = 0; x < 256; ++x) {
        uint32_t r = 0;
        for (int i = 0; i < 8; ++i)
          if (x & (1u << i)) r ^= col[b * 8 + i];
        table[b][x] = r;
      }
  }
  uint32_t apply(uint32_t v) const {
    return table[0][v & 0xFF] ^ table[1][(v >> 8) & 0xFF] ^ table[2][(v >> 16) & 0xFF] ^ table[3][v >> 24];
  }
};

constexpr size_t kCrcBlock = 8192;  // bytes per stream per round
const CrcShift& crc_shift_block() {
  static const CrcShift s(kCrcBlock);
  return s;
}

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const uint8_t* p, size_t n, uint32_t crc) {
  crc = ~crc;
  const CrcShift& shift = crc_shift_block();
  while (n >= 3 * kCrcBlock) {
    uint64_t a = crc, b = 0, c = 0;
    const uint8_t* pa = p;
    const uint8_t* pb = p + kCrcBlock;
    const uint8_t* pc = p + 2 * kCrcBlock;
    for (size_t i = 0; i < kCrcBlock; i += 8) {
      uint64_t va, vb, vc;
      std::memcpy(&va, pa + i, 8);
      std::memcpy(&vb, pb + i, 8);
      std::memcpy(&vc, pc + i, 8);
      a = _mm_crc32_u64(a, va);
      b = _mm_crc32_u64(b, vb);
      c = _mm_crc32_u64(c, vc);
    }
    // crc(A||B||C) = shift(shift(a) ^ b) ^ c for raw (non-inverted) states starting at 0 for B, C.
    uint32_t s = shift.apply(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    crc = shift.apply(s) ^ static_cast<uint32_t>(c);
    p += 3 * kCrcBlock;
    n -= 3 * kCrcBlock;
  }
  return ~crc32c_hw_serial(p, n, crc);
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace


// CRC-32 (IEEE 802.3, reflected), slicing-by-8: the checksum of format version 1.
uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  return crc_sliced(kCrc, static_cast<const uint8_t*>(data), n, crc);
}

// CRC-32C (Castagnoli): the checksum of format version 2.
uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (kHaveSse42) return crc32c_hw(static_cast<const uint8_t*>(data), n, crc);
#endif
  return crc_sliced(kCrcC, static_cast<const uint8_t*>(data), n, crc);
}
}  // namespace moeprof
