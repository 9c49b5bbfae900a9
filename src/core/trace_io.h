// The .mtrace file format: versioned, streamed while recording, readable up to a cut.
//
//   file    := header frame*
//   header  := "MOEPTRC\0" u32 version u32 header_size(32) u32 record_size(64) u32 flags u64 0
//   frame   := u32 type u32 payload_bytes u32 checksum(payload) u32 count payload
//   types   := STRG (count x {u32 id, u32 len, bytes}) | RECS (count x 64-byte TraceRecord)
//            | FRMS (count x {u32 id, u32 function, u32 file, u32 line, u32 kind})   (v2)
//            | STCK (count x {u32 id, u32 n, n x u32 frame id})                     (v2)
//            | META (JSON object, RunMeta) | STAT (JSON object: dropped_records, ...) | END (empty)
// Version 2 (written now): CRC-32C checksums (hardware-accelerated where the CPU has SSE4.2),
// call stacks, and the record's former pid field holds the stack id (the pid moved to META).
// Version 1 (CRC-32, no stacks) is still read. Strings, frames and stacks are always written
// before the first record frame that references them. A writer holds at most one frame of records
// in memory and flushes at least once per flush interval. A file without END was not closed (the
// recording process died); a frame cut short is a truncation; a checksum mismatch is corruption.
// Readers report the byte offset of either. Full description: docs/trace-format.md.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "core/trace.h"

namespace moeprof {

inline constexpr uint32_t kTraceFormatVersion = 2;    // what writers write
inline constexpr uint32_t kOldestTraceFormatVersion = 1;
inline constexpr char kTraceMagic[8] = {'M', 'O', 'E', 'P', 'T', 'R', 'C', '\0'};

uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);   // IEEE 802.3 (format v1)
uint32_t crc32_tables(const void* data, size_t n, uint32_t crc = 0);  // the same without carry-less multiplication
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);  // Castagnoli (format v2)

struct TraceWriterOptions {
  size_t records_per_frame = 4096;
  // A pending frame older than this is written at the next append (0 = only by count). A killed
  // process then loses at most this much of its recording.
  uint64_t flush_interval_ms = 1000;
  // Also flush from a thread of the writer every flush_interval_ms, so records reach the file
  // while the recording process computes without recording anything (a long op): a process
  // killed then loses at most one interval. Needs flush_interval_ms > 0.
  bool background_flush = false;
  // The format version written: 2 (the default), or 1 for readers and benchmarks of old files
  // (CRC-32, no call stacks: the record's stack slot is the writer's to fill, as version 1 kept the
  // process id there; intern_frame/intern_stack make flush fail).
  uint32_t version = kTraceFormatVersion;
};

class TraceWriter {
 public:
  // Opens `path` for writing (truncates) and writes the header and the run metadata.
  static Result<std::unique_ptr<TraceWriter>> open(const std::string& path, const RunMeta& meta,
                                                   const TraceWriterOptions& opt = {});
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Every member is serialized by the writer's own mutex (the background flush and
  // close_all_open() run on other threads); recorders that need an order across threads still
  // serialize their appends themselves (the CUPTI tracer does).
  StrId intern(std::string_view s);
  uint32_t intern_frame(const StackFrame& f);
  StackId intern_stack(const std::vector<uint32_t>& frame_ids);
  // Appends a record; writes a frame when the pending batch is full or old. Returns the first
  // write error (sticky) so hot paths can ignore it and check at flush/close.
  Status append(const TraceRecord& r);
  Status set_meta(const RunMeta& meta);    // writes a META frame (later frames override earlier)
  void add_dropped(uint64_t n) { dropped_ += n; }
  Status flush();                          // pending strings, stacks and records to the OS
  Status close();                          // flush, STAT, END; idempotent
  uint64_t records_written() const;
  const std::string& path() const { return path_; }

  // Closes every trace still open in this process, for a process that is being interrupted (a
  // signal): each gets a META frame with extra["error"] = `error`, then its pending records, STAT
  // and END, so it reads as complete and failed. Returns their paths. Thread-safe, not
  // async-signal-safe: call it from a thread that waits for the signal (sigwait), not from a
  // signal handler. Appends after it fail ("trace ... is closed").
  static std::vector<std::string> close_all_open(const std::string& error);

 private:
  TraceWriter() = default;
  Status write_frame(uint32_t type, const void* payload, size_t bytes, uint32_t count);
  Status write_all(const void* p, size_t n);
  Status set_meta_locked(const RunMeta& meta);
  Status flush_locked();
  Status close_locked();
  void flusher_loop();
  void stop_flusher();

  mutable std::mutex mu_;
  std::thread flusher_;
  std::condition_variable flusher_cv_;
  bool flusher_stop_ = false;
  RunMeta meta_;  // the latest META written
  int fd_ = -1;
  std::string path_;
  TraceWriterOptions opt_;
  StringTable strings_;
  StackTable stacks_;
  uint32_t strings_written_ = 1;  // ids below these are on disk
  uint32_t frames_written_ = 0;
  uint32_t stacks_written_ = 1;
  std::vector<TraceRecord> pending_;
  uint64_t pending_since_ns_ = 0;
  uint64_t records_total_ = 0;
  uint64_t dropped_ = 0;
  Status error_;
  bool closed_ = false;
};

// Reads a trace frame by frame, holding one frame of records at a time: strings, stacks and
// metadata accumulate as their frames arrive. Truncated files (cut mid-frame or missing END) read
// up to the cut and then report truncated(); bad magic, an unsupported version, a checksum
// mismatch or an invalid record is a kBadInput error naming the byte offset.
class TraceReader {
 public:
  static Result<std::unique_ptr<TraceReader>> open(const std::string& path);
  // The same over bytes in memory (`name` stands for the path in messages): the fuzz harnesses.
  static Result<std::unique_ptr<TraceReader>> open_memory(std::string bytes, const std::string& name);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // Replaces *out with the next frame's records. Returns false (and leaves *out empty) at the end
  // of the trace, a truncation included.
  Result<bool> next(std::vector<TraceRecord>* out);
  const StringTable& strings() const { return strings_; }
  const StackTable& stacks() const { return stacks_; }
  const RunMeta& meta() const { return meta_; }
  uint32_t version() const { return version_; }
  bool truncated() const { return truncated_; }
  const std::string& truncation_note() const { return truncation_note_; }
  uint64_t dropped_records() const { return dropped_; }
  uint64_t file_bytes() const { return file_size_; }
  const std::string& path() const { return path_; }
  // Hands the accumulated tables over (after the last next()).
  StringTable take_strings() { return std::move(strings_); }
  StackTable take_stacks() { return std::move(stacks_); }

 private:
  TraceReader() = default;
  Status read_header();
  Result<bool> next_frame(std::vector<TraceRecord>* out);
  Status read_frame_payload(uint32_t bytes, uint64_t off);
  Status handle_table_frame(uint32_t type, uint32_t count, uint64_t poff);
  Status check_frame_header(uint32_t type, uint32_t bytes, uint32_t count) const;
  Status add_string(std::string_view raw, uint32_t id, uint64_t at);
  void mark_truncated(std::string note);

  std::FILE* f_ = nullptr;
  std::string memory_;  // open_memory's bytes (f_ reads them)
  std::string path_;
  uint64_t file_size_ = 0;
  uint64_t off_ = 0;
  uint32_t version_ = 0;
  bool done_ = false, saw_end_ = false, truncated_ = false;
  std::string truncation_note_;
  uint64_t dropped_ = 0;
  uint64_t records_read_ = 0;  // records of the RECS frames read so far (checked against STAT and END)
  uint32_t pid_ = 0;
  RunMeta meta_;
  StringTable strings_;
  StackTable stacks_;
  std::vector<char> payload_;
  std::unordered_map<std::string, uint32_t> altered_raw_;  // raw bytes -> id of strings stored altered (add_string)
  std::unordered_set<uint32_t> altered_ids_;
};

// The metadata a trace starts with (the frames up to its first records), without its records.
Result<RunMeta> read_trace_meta(const std::string& path);

// Reads a whole trace (TraceReader over every frame).
Result<Trace> read_trace(const std::string& path);
Result<Trace> read_trace_memory(std::string bytes, const std::string& name);

// Writes a complete trace (header, meta, strings, stacks, records, stats, END) in one go.
Status write_trace(const std::string& path, const Trace& trace);

// One JSON object per line: first {"meta":...}, then one per record with strings resolved.
void write_jsonl(const Trace& trace, std::ostream& os);
// The same lines from a trace file, read frame by frame (twice: the head line needs the whole
// file's drops and truncation) in memory that does not grow with the trace; returns the records and
// (when `meta` is given) the run metadata of the head line.
Result<uint64_t> write_jsonl_stream(const std::string& path, std::ostream& os, RunMeta* meta = nullptr);

// A stack as text lines, innermost first ("function (file:line)").
std::vector<std::string> format_stack(const Trace& trace, StackId id);
std::string format_frame(const StringTable& strings, const StackFrame& f);

// RunMeta <-> JSON text (used by META frames and reports).
std::string run_meta_to_json(const RunMeta& m);
Status run_meta_from_json(std::string_view text, RunMeta* m);

}  // namespace moeprof
