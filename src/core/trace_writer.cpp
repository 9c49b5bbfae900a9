// TraceWriter, RunMeta <-> JSON, write_trace.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/trace_format.h"
#include "core/trace_io.h"
#include "core/version.h"

namespace moeprof {

using namespace trace_format;

// ---------------------------------------------------------------------------------------------
// RunMeta JSON

std::string run_meta_to_json(const RunMeta& m) {
  nlohmann::ordered_json j;
  j["name"] = m.name;
  j["model"] = m.model;
  j["mode"] = m.mode;
  j["backend"] = m.backend;
  j["device_name"] = m.device_name;
  j["moeprof_version"] = m.moeprof_version;
  j["tokens"] = m.tokens;
  j["layers"] = m.layers;
  j["tp_rank"] = m.tp_rank;
  j["tp_size"] = m.tp_size;
  if (m.pid) j["pid"] = m.pid;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& [k, v] : m.extra) extra[k] = v;
  j["extra"] = extra;
  // Names can come from file names and command lines: bytes that are not UTF-8 become U+FFFD
  // instead of an exception (core/utf8.h).
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status run_meta_from_json(std::string_view text, RunMeta* m) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::bad_input("run metadata is not a JSON object");
  auto str = [&](const char* k, std::string* out) {
    if (j.contains(k) && j[k].is_string()) *out = j[k].get<std::string>();
  };
  // Integers must be present as integers within range; anything else is corrupt metadata.
  auto integer = [&](const char* k, int64_t lo, int64_t hi, auto* out) -> Status {
    if (!j.contains(k)) return Status::ok();
    const auto& v = j[k];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      return Status::bad_input(std::string("run metadata: '") + k + "' must be an integer in [" + std::to_string(lo) +
                               ", " + std::to_string(hi) + "]");
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(v.get<int64_t>());
    return Status::ok();
  };
  str("name", &m->name);
  str("model", &m->model);
  str("mode", &m->mode);
  str("backend", &m->backend);
  str("device_name", &m->device_name);
  str("moeprof_version", &m->moeprof_version);
  MOEPROF_RETURN_IF_ERROR(integer("tokens", 0, int64_t{1} << 40, &m->tokens));
  MOEPROF_RETURN_IF_ERROR(integer("layers", 0, 1 << 20, &m->layers));
  MOEPROF_RETURN_IF_ERROR(integer("tp_size", 1, 1 << 20, &m->tp_size));
  MOEPROF_RETURN_IF_ERROR(integer("tp_rank", 0, (1 << 20) - 1, &m->tp_rank));
  MOEPROF_RETURN_IF_ERROR(integer("pid", 0, 0xFFFFFFFFll, &m->pid));
  if (j.contains("extra")) {
    if (!j["extra"].is_object()) return Status::bad_input("run metadata: 'extra' must be an object");
    for (auto& [k, v] : j["extra"].items()) {
      if (v.is_string()) m->extra[k] = v.get<std::string>();
      else if (v.is_number() || v.is_boolean()) m->extra[k] = v.dump();
      else return Status::bad_input("run metadata: extra value '" + k + "' must be a string, number or boolean");
    }
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {
uint64_t coarse_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}
}  // namespace

namespace {
// The writers open in this process (close_all_open). Lock order: this registry, then a writer's
// mutex; close() takes them one after the other, never nested.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<TraceWriter*>& registry() {
  static std::vector<TraceWriter*> r;
  return r;
}
void unregister_writer(TraceWriter* w) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), w), r.end());
}
}  // namespace

Result<std::unique_ptr<TraceWriter>> TraceWriter::open(const std::string& path, const RunMeta& meta,
                                                       const TraceWriterOptions& opt) {
  if (opt.version < kOldestTraceFormatVersion || opt.version > kTraceFormatVersion)
    return Status::bad_input("cannot write trace format version " + std::to_string(opt.version) + " (versions " +
                             std::to_string(kOldestTraceFormatVersion) + " to " + std::to_string(kTraceFormatVersion) + ")");
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::bad_input("cannot create trace " + path + ": " + std::strerror(errno));
  std::unique_ptr<TraceWriter> w(new TraceWriter());
  w->fd_ = fd;
  w->path_ = path;
  w->opt_ = opt;
  if (w->opt_.records_per_frame == 0) w->opt_.records_per_frame = 1;
  w->pending_.reserve(w->opt_.records_per_frame);
  FileHeader h{};
  std::memcpy(h.magic, kTraceMagic, 8);
  h.version = opt.version;
  h.header_size = sizeof(FileHeader);
  h.record_size = sizeof(TraceRecord);
  MOEPROF_RETURN_IF_ERROR(w->write_all(&h, sizeof(h)));
  MOEPROF_RETURN_IF_ERROR(w->set_meta(meta));
  {
    std::lock_guard<std::mutex> lk(registry_mutex());
    registry().push_back(w.get());
  }
  if (w->opt_.background_flush && w->opt_.flush_interval_ms > 0) w->flusher_ = std::thread([p = w.get()] { p->flusher_loop(); });
  return w;
}

TraceWriter::~TraceWriter() { (void)close(); }

void TraceWriter::flusher_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  const auto interval = std::chrono::milliseconds(opt_.flush_interval_ms);
  while (!flusher_stop_) {
    flusher_cv_.wait_for(lk, interval, [this] { return flusher_stop_; });
    if (flusher_stop_ || closed_) break;
    if (!pending_.empty() || strings_written_ < strings_.size()) (void)flush_locked();
  }
}

void TraceWriter::stop_flusher() {
  if (!flusher_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    flusher_stop_ = true;
  }
  flusher_cv_.notify_all();
  flusher_.join();
}

uint64_t TraceWriter::records_written() const {
  std::lock_guard<std::mutex> lk(mu_);
  return records_total_;
}

std::vector<std::string> TraceWriter::close_all_open(const std::string& error) {
  std::vector<std::string> paths;
  std::lock_guard<std::mutex> rk(registry_mutex());
  for (TraceWriter* w : registry()) {
    std::lock_guard<std::mutex> lk(w->mu_);
    if (w->closed_) continue;
    RunMeta m = w->meta_;
    m.extra["error"] = error;
    (void)w->set_meta_locked(m);
    (void)w->close_locked();
    paths.push_back(w->path_);
  }
  return paths;
}

Status TraceWriter::write_all(const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::write(fd_, c, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return Status::run_failure("writing trace " + path_ + ": " + std::strerror(errno));
    }
    c += k;
    n -= static_cast<size_t>(k);
  }
  return Status::ok();
}

Status TraceWriter::write_frame(uint32_t type, const void* payload, size_t bytes, uint32_t count) {
  if (!error_.is_ok()) return error_;
  if (fd_ < 0) return error_ = Status::run_failure("trace " + path_ + " is closed");
  const uint32_t sum = opt_.version >= 2 ? crc32c(payload, bytes) : crc32(payload, bytes);
  FrameHeader fh{type, static_cast<uint32_t>(bytes), sum, count};
  // One buffer per frame so the frame reaches the OS in a single write where possible.
  std::vector<char> buf(sizeof(fh) + bytes);
  std::memcpy(buf.data(), &fh, sizeof(fh));
  if (bytes) std::memcpy(buf.data() + sizeof(fh), payload, bytes);
  Status st = write_all(buf.data(), buf.size());
  if (!st.is_ok()) error_ = st;
  return st;
}

StrId TraceWriter::intern(std::string_view s) {
  std::lock_guard<std::mutex> lk(mu_);
  return strings_.intern(s);
}

uint32_t TraceWriter::intern_frame(const StackFrame& f) {
  std::lock_guard<std::mutex> lk(mu_);
  return stacks_.intern_frame(f);
}

StackId TraceWriter::intern_stack(const std::vector<uint32_t>& frame_ids) {
  std::lock_guard<std::mutex> lk(mu_);
  return stacks_.intern_stack(frame_ids);
}

Status TraceWriter::append(const TraceRecord& r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return error_.is_ok() ? Status::run_failure("trace " + path_ + " is closed") : error_;
  if (pending_.empty() && opt_.flush_interval_ms) pending_since_ns_ = coarse_now_ns();
  pending_.push_back(r);
  ++records_total_;
  if (pending_.size() >= opt_.records_per_frame) return flush_locked();
  if (opt_.flush_interval_ms && coarse_now_ns() - pending_since_ns_ >= opt_.flush_interval_ms * 1000000ull)
    return flush_locked();
  return error_;
}

Status TraceWriter::set_meta(const RunMeta& meta) {
  std::lock_guard<std::mutex> lk(mu_);
  return set_meta_locked(meta);
}

Status TraceWriter::set_meta_locked(const RunMeta& meta) {
  if (closed_) return error_.is_ok() ? Status::run_failure("trace " + path_ + " is closed") : error_;
  meta_ = meta;
  std::string text = run_meta_to_json(meta);
  return write_frame(kFrameMeta, text.data(), text.size(), 0);
}

namespace {
void put_u32(std::vector<char>& b, uint32_t v) {
  size_t at = b.size();
  b.resize(at + 4);
  std::memcpy(b.data() + at, &v, 4);
}
}  // namespace

Status TraceWriter::flush() {
  std::lock_guard<std::mutex> lk(mu_);
  return flush_locked();
}

Status TraceWriter::flush_locked() {
  if (closed_) return error_;
  if (strings_written_ < strings_.size()) {
    std::vector<char> payload;
    uint32_t n = 0;
    for (uint32_t id = strings_written_; id < strings_.size(); ++id, ++n) {
      const std::string& s = strings_.get(static_cast<StrId>(id));
      put_u32(payload, id);
      put_u32(payload, static_cast<uint32_t>(s.size()));
      payload.insert(payload.end(), s.begin(), s.end());
    }
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameStrings, payload.data(), payload.size(), n));
    strings_written_ = static_cast<uint32_t>(strings_.size());
  }
  if (opt_.version < 2 && (stacks_.frame_count() > 0 || stacks_.stack_count() > 1))
    return error_ = Status::run_failure("trace " + path_ + ": format version 1 has no call stacks");
  if (frames_written_ < stacks_.frame_count()) {
    std::vector<char> payload;
    uint32_t n = 0;
    for (uint32_t id = frames_written_; id < stacks_.frame_count(); ++id, ++n) {
      const StackFrame& f = stacks_.frame(id);
      for (uint32_t v : {id, index_of(f.function), index_of(f.file), f.line, uint32_t(f.kind)}) put_u32(payload, v);
    }
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameFrames, payload.data(), payload.size(), n));
    frames_written_ = static_cast<uint32_t>(stacks_.frame_count());
  }
  if (stacks_written_ < stacks_.stack_count()) {
    std::vector<char> payload;
    uint32_t n = 0;
    for (uint32_t id = stacks_written_; id < stacks_.stack_count(); ++id, ++n) {
      const auto& st = stacks_.stack(static_cast<StackId>(id));
      put_u32(payload, id);
      put_u32(payload, static_cast<uint32_t>(st.size()));
      for (uint32_t fid : st) put_u32(payload, fid);
    }
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameStacks, payload.data(), payload.size(), n));
    stacks_written_ = static_cast<uint32_t>(stacks_.stack_count());
  }
  if (!pending_.empty()) {
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameRecords, pending_.data(), pending_.size() * sizeof(TraceRecord),
                                        static_cast<uint32_t>(pending_.size())));
    pending_.clear();
  }
  return error_;
}

Status TraceWriter::close() {
  stop_flusher();
  unregister_writer(this);
  std::lock_guard<std::mutex> lk(mu_);
  return close_locked();
}

Status TraceWriter::close_locked() {
  if (closed_) return error_;
  Status st = flush_locked();
  if (st.is_ok()) {
    nlohmann::ordered_json j;
    j["dropped_records"] = dropped_;
    j["records"] = records_total_;
    std::string text = j.dump();
    st = write_frame(kFrameStats, text.data(), text.size(), 0);
  }
  if (st.is_ok()) st = write_frame(kFrameEnd, nullptr, 0, static_cast<uint32_t>(records_total_ & 0xFFFFFFFFu));
  closed_ = true;
  if (fd_ >= 0) {
    if (::close(fd_) != 0 && st.is_ok()) st = Status::run_failure("closing trace " + path_ + ": " + std::strerror(errno));
    fd_ = -1;
  }
  if (!st.is_ok() && error_.is_ok()) error_ = st;
  return error_;
}

Status write_trace(const std::string& path, const Trace& trace) {
  MOEPROF_ASSIGN_OR_RETURN(auto w, TraceWriter::open(path, trace.meta, TraceWriterOptions{4096, 0}));
  for (uint32_t id = 1; id < trace.strings.size(); ++id) w->intern(trace.strings.get(static_cast<StrId>(id)));
  for (uint32_t id = 0; id < trace.stacks.frame_count(); ++id) w->intern_frame(trace.stacks.frame(id));
  for (uint32_t id = 1; id < trace.stacks.stack_count(); ++id) w->intern_stack(trace.stacks.stack(static_cast<StackId>(id)));
  for (const auto& r : trace.records) MOEPROF_RETURN_IF_ERROR(w->append(r));
  w->add_dropped(trace.dropped_records);
  return w->close();
}

}  // namespace moeprof
