// The on-disk layout of .mtrace files shared by the writer and the reader (internal to core;
// docs/trace-format.md describes it).
#pragma once

#include <cstdint>

namespace moeprof::trace_format {

constexpr uint32_t fourcc(char a, char b, char c, char d) {
  return static_cast<uint32_t>(static_cast<uint8_t>(a)) | (static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8) |
         (static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16) | (static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24);
}
constexpr uint32_t kFrameStrings = fourcc('S', 'T', 'R', 'G');
constexpr uint32_t kFrameRecords = fourcc('R', 'E', 'C', 'S');
constexpr uint32_t kFrameMeta = fourcc('M', 'E', 'T', 'A');
constexpr uint32_t kFrameStats = fourcc('S', 'T', 'A', 'T');
constexpr uint32_t kFrameEnd = fourcc('E', 'N', 'D', ' ');
constexpr uint32_t kFrameFrames = fourcc('F', 'R', 'M', 'S');
constexpr uint32_t kFrameStacks = fourcc('S', 'T', 'C', 'K');

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint32_t record_size;
  uint32_t flags;
  uint64_t reserved;
};
static_assert(sizeof(FileHeader) == 32);

struct FrameHeader {
  uint32_t type;
  uint32_t bytes;
  uint32_t crc;
  uint32_t count;
};
static_assert(sizeof(FrameHeader) == 16);

constexpr uint32_t kMaxFrameBytes = 1u << 30;

}  // namespace moeprof::trace_format
