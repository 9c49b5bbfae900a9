// CRC-32 (format v1) and CRC-32C (format v2) checksums of .mtrace frames.
#include <array>
#include <cstring>

#include "core/trace_io.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#include <wmmintrin.h>
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

// CRC-32 (IEEE) by folding with carry-less multiplication (PCLMULQDQ), derived here from the
// polynomial arithmetic. A 16-byte register R loaded little-endian holds the polynomial F of those
// 128 message bits in the reflected order (bit j = the coefficient of x^(127-j)); its low qword is
// F's first 64 bits F_hi, its high qword the last 64, F_lo. For 64-bit reflected operands,
// clmul(rev(A), rev(B)) = rev128(A*B*x): one x more than the product. Advancing F over D more
// message bits, F*x^D = F_hi*x^(D+64) + F_lo*x^D (mod P), is then
//   clmul(R.lo, rev(x^(D+63) mod P)) ^ clmul(R.hi, rev(x^(D-1) mod P)),
// a polynomial of degree < 96 onto which the message's next D bits are added. Four registers fold
// 64 bytes apart (D = 512), are joined 16 bytes apart (D = 128), and the last register is reduced
// as 16 bytes of message by the table code (its state then equals the state before the fold).
struct ClmulConstants {
  __m128i fold512, fold128;  // low qword: for R.lo (x^(D+63)), high qword: for R.hi (x^(D-1))
  static uint64_t reflected_power(unsigned e) {  // rev64(x^e mod P), P = x^32 + 0x04C11DB7
    uint64_t r = 1;  // normal orientation, degree < 32
    for (unsigned i = 0; i < e; ++i) {
      r <<= 1;
      if (r & (uint64_t{1} << 32)) r ^= 0x104C11DB7ULL;
    }
    uint64_t out = 0;
    for (int d = 0; d < 32; ++d)
      if (r & (uint64_t{1} << d)) out |= uint64_t{1} << (63 - d);
    return out;
  }
  ClmulConstants() {
    fold512 = _mm_set_epi64x(static_cast<long long>(reflected_power(511)), static_cast<long long>(reflected_power(575)));
    fold128 = _mm_set_epi64x(static_cast<long long>(reflected_power(127)), static_cast<long long>(reflected_power(191)));
  }
};

__attribute__((target("pclmul,sse2"))) inline __m128i fold(__m128i r, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(r, k, 0x00), _mm_clmulepi64_si128(r, k, 0x11)), next);
}

__attribute__((target("pclmul,sse2"))) uint32_t crc32_clmul(const uint8_t* p, size_t n, uint32_t crc) {
  if (n < 64) return crc_sliced(kCrc, p, n, crc);
  static const ClmulConstants k;
  auto load = [](const uint8_t* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
  uint32_t state = ~crc;  // the state is added to the message's first 32 bits
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
  p += 64;
  n -= 64;
  while (n >= 64) {
    x0 = fold(x0, k.fold512, load(p));
    x1 = fold(x1, k.fold512, load(p + 16));
    x2 = fold(x2, k.fold512, load(p + 32));
    x3 = fold(x3, k.fold512, load(p + 48));
    p += 64;
    n -= 64;
  }
  __m128i x = fold(fold(fold(x0, k.fold128, x1), k.fold128, x2), k.fold128, x3);
  while (n >= 16) {
    x = fold(x, k.fold128, load(p));
    p += 16;
    n -= 16;
  }
  uint8_t last[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(last), x);
  // crc_sliced inverts its state on the way in and out: ~0 in gives the raw state 0.
  state = ~crc_sliced(kCrc, last, 16, ~0u);
  return crc_sliced(kCrc, p, n, ~state);
}

const bool kHavePclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
#endif

}  // namespace


// CRC-32 (IEEE 802.3, reflected): the checksum of format version 1. Carry-less multiplication where
// the CPU has it, slicing-by-8 otherwise.
uint32_t crc32(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (kHavePclmul) return crc32_clmul(static_cast<const uint8_t*>(data), n, crc);
#endif
  return crc_sliced(kCrc, static_cast<const uint8_t*>(data), n, crc);
}

// The table code alone (tests compare the two).
uint32_t crc32_tables(const void* data, size_t n, uint32_t crc) {
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
