// The .mtrace file format: versioned, streamed while recording, readable up to a cut.
//
//   file    := header frame*
//   header  := "MOEPTRC\0" u32 version u32 header_size(32) u32 record_size(64) u32 flags u64 0
//   frame   := u32 type u32 payload_bytes u32 crc32(payload) u32 count payload
//   types   := STRG (count x {u32 id, u32 len, bytes}) | RECS (count x 64-byte TraceRecord)
//            | META (JSON object, RunMeta) | STAT (JSON object: dropped_records, ...) | END (empty)
// Strings are always written before the first record frame that references them. A writer holds
// at most one frame of records in memory. A file without END was not closed (the recording
// process died); a frame cut short is a truncation; a checksum mismatch is corruption. Readers
// report the byte offset of either. Full description: docs/trace-format.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/trace.h"

namespace moeprof {

inline constexpr uint32_t kTraceFormatVersion = 1;
inline constexpr char kTraceMagic[8] = {'M', 'O', 'E', 'P', 'T', 'R', 'C', '\0'};

uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

class TraceWriter {
 public:
  // Opens `path` for writing (truncates) and writes the header and the run metadata.
  static Result<std::unique_ptr<TraceWriter>> open(const std::string& path, const RunMeta& meta,
                                                   size_t records_per_frame = 4096);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Not thread-safe: callers that record from several threads serialize (the CUPTI tracer does).
  uint32_t intern(std::string_view s);
  // Appends a record; writes a frame when the pending batch is full. Returns the first write
  // error (sticky) so hot paths can ignore it and check at flush/close.
  Status append(const TraceRecord& r);
  Status set_meta(const RunMeta& meta);    // writes a META frame (later frames override earlier)
  void add_dropped(uint64_t n) { dropped_ += n; }
  Status flush();                          // pending strings + records to the OS
  Status close();                          // flush, STAT, END; idempotent
  uint64_t records_written() const { return records_total_; }
  const std::string& path() const { return path_; }

 private:
  TraceWriter() = default;
  Status write_frame(uint32_t type, const void* payload, size_t bytes, uint32_t count);
  Status write_all(const void* p, size_t n);

  int fd_ = -1;
  std::string path_;
  size_t records_per_frame_ = 4096;
  StringTable strings_;
  uint32_t strings_written_ = 1;  // ids below this are on disk
  std::vector<TraceRecord> pending_;
  uint64_t records_total_ = 0;
  uint64_t dropped_ = 0;
  Status error_;
  bool closed_ = false;
};

// Reads a whole trace. Truncated files (cut mid-frame or missing END) load up to the cut with
// Trace::truncated set; bad magic, unsupported version, checksum mismatch or an invalid record is
// a kBadInput error naming the byte offset.
Result<Trace> read_trace(const std::string& path);

// Writes a complete trace (header, meta, strings, records, stats, END) in one go.
Status write_trace(const std::string& path, const Trace& trace);

// One JSON object per line: first {"meta":...}, then one per record with strings resolved.
void write_jsonl(const Trace& trace, std::ostream& os);

// RunMeta <-> JSON text (used by META frames and reports).
std::string run_meta_to_json(const RunMeta& m);
Status run_meta_from_json(std::string_view text, RunMeta* m);

}  // namespace moeprof
