#include "planner/stream.h"
#include "planner/counters.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <queue>
#include <thread>
#include <tuple>
#include <type_traits>

#include "core/trace_io.h"
#include "core/trace_merge.h"
#include "core/utf8.h"
#include "planner/categories.h"
#include "planner/replayer.h"

namespace moeprof::planner {

namespace {

// One frame of records from an input, with the table entries that arrived before it.
struct Batch {
  std::vector<TraceRecord> records;
  std::vector<std::string> strings;
  std::vector<StackFrame> frames;              // local string ids
  std::vector<std::vector<uint32_t>> stacks;   // local frame ids
  bool end = false;
  Status error;
};

// The run-wide tables every input's ids are mapped into.
struct Globals {
  StringTable strings;
  StackTable stacks;
};

// An input: a TraceReader (in a thread of its own when parallel) and the remapping of its ids.
class Input {
 public:
  Input(std::string path, bool parallel) : path_(std::move(path)), parallel_(parallel) {}
  ~Input() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Status open() {
    auto r = TraceReader::open(path_);
    if (!r) return r.status();
    reader_ = std::move(r).value();
    // The first frame is read here: its devices decide the device numbers of merged inputs.
    first_ = read_one();
    have_first_ = true;
    if (!first_.error.is_ok()) return first_.error;
    for (const TraceRecord& rec : first_.records) {
      if (std::find(devices_.begin(), devices_.end(), rec.device) == devices_.end()) devices_.push_back(rec.device);
    }
    std::sort(devices_.begin(), devices_.end());
    if (parallel_ && !first_.end) thread_ = std::thread([this] { produce(); });
    return Status::ok();
  }
  // The devices the first frame records, sorted.
  const std::vector<uint16_t>& first_devices() const { return devices_; }
  // Merged inputs: records go to device + offset; a device outside [lo, hi] is an error (it could
  // collide with another input's).
  void set_device_offset(uint16_t offset, uint16_t lo, uint16_t hi) {
    base_ = offset;
    lo_ = lo;
    hi_ = hi;
    check_devices_ = true;
  }

  // The next batch of records, remapped into `g`; false at the end of the input.
  Result<bool> next(Globals& g, std::vector<TraceRecord>* out) {
    Batch b;
    if (have_first_) {
      b = std::move(first_);
      have_first_ = false;
    } else {
      b = parallel_ ? take() : read_one();
    }
    if (!b.error.is_ok()) return b.error;
    for (std::string& s : b.strings) str_.push_back(g.strings.intern(s));
    for (const StackFrame& f : b.frames) {
      StackFrame m = f;
      m.function = map(f.function);
      m.file = map(f.file);
      frame_.push_back(g.stacks.intern_frame(m));
    }
    for (const auto& st : b.stacks) {
      std::vector<uint32_t> frames;
      for (uint32_t f : st) frames.push_back(frame_.at(f));
      stack_.push_back(g.stacks.intern_stack(frames));
    }
    if (b.end) {
      out->clear();
      return false;
    }
    for (TraceRecord& r : b.records) {
      r.name_id = map(r.name_id);
      r.scope_id = map(r.scope_id);
      r.shape_id = map(r.shape_id);
      r.stack_id = index_of(r.stack_id) < stack_.size() ? stack_[index_of(r.stack_id)] : StackId::kNone;
      if (check_devices_ && (r.device < lo_ || r.device > hi_))
        return Status::bad_input(path_ + ": records device " + std::to_string(r.device) + " after its first frame recorded only devices " +
                                 std::to_string(lo_) + ".." + std::to_string(hi_) +
                                 ": merged streaming needs each input's devices in its first frame (analyse it with --stream off)");
      r.device = static_cast<uint16_t>(r.device + base_);
    }
    out->swap(b.records);
    recycle(std::move(b.records));  // the caller's previous frame: its memory is reused
    return true;
  }

  // After the end: the reader's final metadata and status (the thread has finished with it).
  const TraceReader& reader() const { return *reader_; }

 private:
  StrId map(StrId id) const { return index_of(id) < str_.size() ? str_[index_of(id)] : StrId::kNone; }

  // Frames of records are reused: a fresh vector per frame would have its pages faulted in and
  // zeroed by the kernel every time (most of the time of a streamed replay).
  void recycle(std::vector<TraceRecord>&& v) {
    if (v.capacity() == 0) return;
    std::lock_guard<std::mutex> lock(spare_mu_);
    if (spare_.size() < 8) spare_.push_back(std::move(v));
  }
  std::vector<TraceRecord> spare() {
    std::lock_guard<std::mutex> lock(spare_mu_);
    if (spare_.empty()) return {};
    std::vector<TraceRecord> v = std::move(spare_.back());
    spare_.pop_back();
    return v;
  }

  Batch read_one() {
    Batch b;
    b.records = spare();
    auto more = reader_->next(&b.records);
    if (!more) {
      b.error = more.status();
      return b;
    }
    // Tables that grew while this frame was read.
    const auto& all = reader_->strings().all();
    for (size_t i = sent_strings_; i < all.size(); ++i) b.strings.push_back(all[i]);
    sent_strings_ = all.size();
    const StackTable& st = reader_->stacks();
    for (size_t i = sent_frames_; i < st.frame_count(); ++i) b.frames.push_back(st.frame(static_cast<uint32_t>(i)));
    sent_frames_ = st.frame_count();
    for (size_t i = sent_stacks_; i < st.stack_count(); ++i) b.stacks.push_back(st.stack(static_cast<StackId>(i)));
    sent_stacks_ = st.stack_count();
    b.end = !*more;
    return b;
  }

  void produce() {
    for (;;) {
      Batch b = read_one();
      const bool last = b.end || !b.error.is_ok();
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || queue_.size() < 4; });
      if (stop_) return;
      queue_.push_back(std::move(b));
      cv_.notify_all();
      if (last) return;
    }
  }

  Batch take() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return b;
  }

  std::string path_;
  bool parallel_;
  uint16_t base_ = 0, lo_ = 0, hi_ = 0;
  bool check_devices_ = false;
  Batch first_;
  bool have_first_ = false;
  std::vector<uint16_t> devices_;
  std::unique_ptr<TraceReader> reader_;
  size_t sent_strings_ = 1, sent_frames_ = 0, sent_stacks_ = 1;  // id 0 of strings and stacks exist everywhere
  std::vector<StrId> str_{StrId::kNone};
  std::vector<uint32_t> frame_;
  std::vector<StackId> stack_{StackId::kNone};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false;
  std::mutex spare_mu_;
  std::vector<std::vector<TraceRecord>> spare_;
};

struct Key {
  uint64_t ts, seq, n;
  bool operator<(const Key& o) const { return std::tie(ts, seq, n) < std::tie(o.ts, o.seq, o.n); }
  bool operator>(const Key& o) const { return o < *this; }
};

// A ring of records in replay order; holds `limit` records before the oldest must go. Its storage
// grows by doubling as records are held and is never zeroed first: a window that holds a few
// records costs a few pages, not the whole limit's.
class Window {
 public:
  struct Held {
    TraceRecord r;
    uint64_t n;  // position in the merged input (the last sort key)
  };
  explicit Window(size_t limit) : limit_(limit) { grow(16); }
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ > limit_; }
  Key back_key() const {
    const Held& h = at(size_ - 1);
    return Key{h.r.timestamp_ns, h.r.seq, h.n};
  }
  const Held& front() const { return buf_.get()[head_]; }
  size_t size() const { return size_; }
  const Held& at(size_t i) const { return buf_.get()[(head_ + i) & mask_]; }
  void pop_front() {
    head_ = (head_ + 1) & mask_;
    --size_;
  }
  void push_back(const TraceRecord& r, uint64_t n) {
    if (size_ == mask_ + 1) grow(2 * (mask_ + 1));
    Held& h = buf_.get()[(head_ + size_) & mask_];
    h.r = r;
    h.n = n;
    ++size_;
  }
  // Inserts at its place in the order; returns how many held records it went before.
  size_t insert_sorted(const TraceRecord& r, uint64_t n) {
    if (size_ == mask_ + 1) grow(2 * (mask_ + 1));
    const Key k{r.timestamp_ns, r.seq, n};
    size_t lo = 0, hi = size_;  // first held record with a larger key
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      const Held& h = at(mid);
      if (k < Key{h.r.timestamp_ns, h.r.seq, h.n}) hi = mid;
      else lo = mid + 1;
    }
    Held* b = buf_.get();
    for (size_t i = size_; i > lo; --i) b[(head_ + i) & mask_] = b[(head_ + i - 1) & mask_];
    Held& h = b[(head_ + lo) & mask_];
    h.r = r;
    h.n = n;
    ++size_;
    return size_ - 1 - lo;
  }

 private:
  struct Free {
    void operator()(Held* p) const { std::free(p); }
  };
  void grow(size_t cap) {
    // Held is trivially copyable: raw storage, written before it is read.
    std::unique_ptr<Held, Free> nb(static_cast<Held*>(std::malloc(cap * sizeof(Held))));
    if (!nb) throw std::bad_alloc();
    advise_huge(nb.get(), cap * sizeof(Held));
    for (size_t i = 0; i < size_; ++i) nb.get()[i] = at(i);
    buf_ = std::move(nb);
    mask_ = cap - 1;
    head_ = 0;
  }
  static_assert(std::is_trivially_copyable_v<Held>);
  std::unique_ptr<Held, Free> buf_;
  size_t limit_, mask_ = 0, head_ = 0, size_ = 0;
};

// Merges the inputs by (timestamp, seq, input index), each input in its own order.
class Merger {
 public:
  Merger(std::vector<std::unique_ptr<Input>>& inputs, Globals& g) : in_(inputs), g_(g), buf_(inputs.size()), at_(inputs.size(), 0), done_(inputs.size(), false) {}

  // The next records in merged order (one input: its next frame as it is); false at the end.
  Result<bool> next_batch(std::vector<TraceRecord>* out) {
    if (in_.size() == 1) {
      for (;;) {
        if (done_[0]) return false;
        auto more = in_[0]->next(g_, out);
        if (!more) return more.status();
        if (!*more) {
          done_[0] = true;
          return false;
        }
        if (!out->empty()) return true;
      }
    }
    out->clear();
    TraceRecord r;
    while (out->size() < 4096) {
      MOEPROF_ASSIGN_OR_RETURN(bool more, next(&r));
      if (!more) break;
      out->push_back(r);
    }
    return !out->empty();
  }

  // The next record in merged order; false at the end.
  Result<bool> next(TraceRecord* out) {
    size_t best = in_.size();
    for (size_t i = 0; i < in_.size(); ++i) {
      if (!fill(i)) {
        if (!error_.is_ok()) return error_;
        continue;
      }
      if (best == in_.size()) {
        best = i;
        continue;
      }
      const TraceRecord& a = buf_[i][at_[i]];
      const TraceRecord& b = buf_[best][at_[best]];
      if (a.timestamp_ns < b.timestamp_ns || (a.timestamp_ns == b.timestamp_ns && a.seq < b.seq)) best = i;
    }
    if (best == in_.size()) return false;
    *out = buf_[best][at_[best]++];
    return true;
  }

 private:
  bool fill(size_t i) {
    while (!done_[i] && at_[i] >= buf_[i].size()) {
      at_[i] = 0;
      auto more = in_[i]->next(g_, &buf_[i]);
      if (!more) {
        error_ = more.status();
        done_[i] = true;
        return false;
      }
      if (!*more) done_[i] = true;
    }
    return !done_[i] || at_[i] < buf_[i].size();
  }
  std::vector<std::unique_ptr<Input>>& in_;
  Globals& g_;
  std::vector<std::vector<TraceRecord>> buf_;
  std::vector<size_t> at_;
  std::vector<bool> done_;
  Status error_;
};

Status open_inputs(const std::vector<std::string>& paths, bool parallel, std::vector<std::unique_ptr<Input>>* out) {
  out->clear();
  for (size_t i = 0; i < paths.size(); ++i) {
    out->push_back(std::make_unique<Input>(paths[i], parallel));
    MOEPROF_RETURN_IF_ERROR(out->back()->open());
  }
  if (out->size() < 2) return Status::ok();
  std::vector<std::vector<uint16_t>> devs;
  for (const auto& in : *out) devs.push_back(in->first_devices());
  MOEPROF_ASSIGN_OR_RETURN(std::vector<uint16_t> off, rank_device_offsets(devs));
  for (size_t i = 0; i < out->size(); ++i) {
    const auto& d = devs[i];
    // Offsets 0 (each input names its one device): only that device; else any up to the largest.
    const bool keep = off == std::vector<uint16_t>(off.size(), 0);
    (*out)[i]->set_device_offset(off[i], keep && !d.empty() ? d.front() : 0, d.empty() ? 0 : d.back());
  }
  return Status::ok();
}

// Run metadata of the merged inputs (as merge_traces writes them) and the trace-level notes.
void finish_meta(const std::vector<std::unique_ptr<Input>>& inputs, RunAnalysis* run) {
  run->meta = inputs.front()->reader().meta();
  if (inputs.size() > 1) {
    run->meta.tp_rank = 0;
    run->meta.extra["ranks"] = std::to_string(inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TraceReader& r = inputs[i]->reader();
    run->dropped_records += r.dropped_records();
    if (r.truncated()) {
      run->truncated = true;
      if (!run->truncation_note.empty()) run->truncation_note += "; ";
      run->truncation_note += inputs.size() > 1 ? "input " + std::to_string(i) + ": " + r.truncation_note() : r.truncation_note();
    }
  }
  // A file name need not be UTF-8; the report's run name must be (U+FFFD replaces bad bytes).
  if (run->meta.name.empty()) run->meta.name = valid_utf8(std::filesystem::path(inputs.front()->reader().path()).stem().string());
}

// One pass over the inputs: sink.any(r) for every record as it arrives, sink.replay(r, n) for the
// replayed records in replay order (n: the record's index in the merged input).
struct PassResult {
  bool reordered = false;
  bool too_late = false;  // a record came later than the window allows: redo with external = true
};

// The external sort: every replayed record into sorted runs of `window` records in temporary
// files, then a k-way merge of the runs.
template <class Sink>
Result<PassResult> external_pass(Merger& m, const StreamOptions& opt, Sink& sink) {
  struct Item {
    Key key;
    TraceRecord r;
  };
  const std::filesystem::path dir = opt.temp_dir.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(opt.temp_dir);
  static std::atomic<uint64_t> run_counter{0};
  std::vector<std::string> runs;
  struct Cleanup {
    std::vector<std::string>* runs;
    ~Cleanup() {
      for (const auto& p : *runs) std::remove(p.c_str());
    }
  } cleanup{&runs};
  std::vector<Item> chunk;
  const size_t limit = std::max<size_t>(opt.reorder_window, 1);
  chunk.reserve(std::min<size_t>(limit, size_t{1} << 22));
  auto flush_chunk = [&]() -> Status {
    if (chunk.empty()) return Status::ok();
    std::sort(chunk.begin(), chunk.end(), [](const Item& a, const Item& b) { return a.key < b.key; });
    const std::string p = (dir / ("moeprof-sort-" + std::to_string(::getpid()) + "-" + std::to_string(run_counter++) + ".run")).string();
    std::FILE* f = std::fopen(p.c_str(), "wb");
    if (!f) return Status::run_failure("cannot create the external-sort run " + p + ": " + std::strerror(errno));
    runs.push_back(p);
    const size_t w = std::fwrite(chunk.data(), sizeof(Item), chunk.size(), f);
    const bool ok = std::fclose(f) == 0 && w == chunk.size();
    chunk.clear();
    return ok ? Status::ok() : Status::run_failure("writing the external-sort run " + p + " failed (disk full?)");
  };
  uint64_t n = 0;
  std::vector<TraceRecord> batch;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, m.next_batch(&batch));
    if (!more) break;
    for (const TraceRecord& r : batch) {
      const uint64_t idx = n++;
      sink.any(r);
      if (!is_replayed(r.kind)) continue;
      chunk.push_back(Item{Key{r.timestamp_ns, r.seq, idx}, r});
      if (chunk.size() >= limit) MOEPROF_RETURN_IF_ERROR(flush_chunk());
    }
  }
  MOEPROF_RETURN_IF_ERROR(flush_chunk());
  struct RunFile {
    std::FILE* f;
    Item cur;
  };
  std::vector<RunFile> files;
  struct Closer {
    std::vector<RunFile>* f;
    ~Closer() {
      for (auto& x : *f) std::fclose(x.f);
    }
  } closer{&files};
  for (const auto& p : runs) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) return Status::run_failure("cannot read the external-sort run " + p);
    std::setvbuf(f, nullptr, _IOFBF, 1 << 16);
    files.push_back(RunFile{f, {}});
  }
  auto cmp = [&](size_t a, size_t b) { return files[b].cur.key < files[a].cur.key; };
  std::priority_queue<size_t, std::vector<size_t>, decltype(cmp)> heap(cmp);
  for (size_t i = 0; i < files.size(); ++i)
    if (std::fread(&files[i].cur, sizeof(Item), 1, files[i].f) == 1) heap.push(i);
  while (!heap.empty()) {
    const size_t i = heap.top();
    heap.pop();
    sink.replay(files[i].cur.r, files[i].cur.key.n);
    if (std::fread(&files[i].cur, sizeof(Item), 1, files[i].f) == 1) heap.push(i);
  }
  PassResult out;
  out.reordered = true;
  return out;
}

// The records the replay will reach a few events from now, hinted to the sink in stages
// (Replayer::prefetch) once its tables outgrow the caches: the hash entries 48 events ahead, the
// lifetimes they name 32 ahead (the hand-off search hints its own state, planner/handoff_stream.h).
// The window holds those records already. (live65536-v1 of bench/stream at 1e7 events, paired runs on the 2-core
// machine: a quarter to a third less time; shapes whose tables fit in the caches ran 5-8% slower
// with them, so they get none.)
template <class Sink>
bool ahead(const Window& w, Sink& sink) {
  if (!sink.prefetching()) return false;
  constexpr size_t kStage0 = 48, kStage1 = 32;
  const size_t n = w.size();
  if (n > kStage0) sink.prefetch(w.at(kStage0).r, 0);
  if (n > kStage1) sink.prefetch(w.at(kStage1).r, 1);
  return true;
}

// The windowed pass (see analyze_stream); too_late when the window cannot place a record.
template <class Sink>
Result<PassResult> window_pass(Merger& m, size_t window_limit, StreamStats* stats, Sink& sink) {
  // The reordering window: the last `reorder_window` records in replay order, oldest first. A
  // record in order is appended (O(1)); one that is late is inserted at its place (cost in
  // proportion to how late it is); the oldest is replayed when the window is full. A record later
  // than everything the window still holds cannot be placed: the input goes through the external sort.
  Window window(std::max<size_t>(window_limit, 1));
  Key last{0, 0, 0};
  bool any = false;
  PassResult out;
  uint64_t n = 0;
  std::vector<TraceRecord> batch;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, m.next_batch(&batch));
    if (!more) break;
    stats->records += batch.size();
    for (const TraceRecord& r : batch) {
      const uint64_t idx = n++;
      sink.any(r);
      if (!is_replayed(r.kind)) continue;
      const Key k{r.timestamp_ns, r.seq, idx};
      if (window.empty() || !(k < window.back_key())) {
        window.push_back(r, idx);
      } else {
        out.reordered = true;
        if (any && k < last) {
          out.too_late = true;
          return out;
        }
        stats->max_lateness = std::max<uint64_t>(stats->max_lateness, window.insert_sorted(r, idx));
      }
      if (window.full()) {
        const Window::Held& h = window.front();
        last = Key{h.r.timestamp_ns, h.r.seq, h.n};
        any = true;
        stats->prefetched += ahead(window, sink);
        sink.replay(h.r, h.n);
        window.pop_front();
      }
    }
  }
  while (!window.empty()) {
    const Window::Held& h = window.front();
    stats->prefetched += ahead(window, sink);
    sink.replay(h.r, h.n);
    window.pop_front();
  }
  return out;
}

// Opens the inputs and runs the windowed pass: with the small first window, then (when a record
// came later than it allows) again with the whole reorder window, then through the external sort
// (make_sink() gives each attempt a fresh sink). Returns the sink that saw the whole input.
template <class MakeSink>
auto run_pass(const std::vector<std::string>& paths, const StreamOptions& opt, StreamStats* stats, MakeSink&& make_sink)
    -> Result<decltype(make_sink(std::declval<Globals&>(), std::declval<std::vector<std::unique_ptr<Input>>&>()))> {
  const size_t full = std::max<size_t>(opt.reorder_window, 1);
  const size_t first = std::clamp<size_t>(opt.initial_window, 1, full);
  std::vector<size_t> windows{first};
  if (full > first) windows.push_back(full);
  windows.push_back(0);  // the external sort
  uint32_t restarts = 0;
  for (size_t w : windows) {
    std::vector<std::unique_ptr<Input>> inputs;
    MOEPROF_RETURN_IF_ERROR(open_inputs(paths, opt.parallel, &inputs));
    auto g = std::make_unique<Globals>();
    Merger m(inputs, *g);
    auto sink = make_sink(*g, inputs);
    *stats = StreamStats{};
    const bool external = w == 0;
    MOEPROF_ASSIGN_OR_RETURN(PassResult res, external ? external_pass(m, opt, *sink) : window_pass(m, w, stats, *sink));
    if (res.too_late) {
      ++restarts;
      continue;
    }
    stats->external_sort = external;
    stats->window = w;
    stats->restarts = restarts;
    for (const auto& in : inputs) stats->bytes_read += in->reader().file_bytes();
    sink->done(std::move(g), inputs, res);
    return sink;
  }
  return Status::run_failure("the external sort did not finish");  // not reached
}

// Pass 1 of the category inference.
struct ScanSink {
  PersistenceScan scan;
  std::unique_ptr<Globals> globals;
  RunMeta meta;
  void any(const TraceRecord& r) { scan.work(r); }
  void replay(const TraceRecord& r, uint64_t n) { scan.replayed(r, n); }
  bool prefetching() const { return false; }
  void prefetch(const TraceRecord&, int) {}
  void done(std::unique_ptr<Globals> g, const std::vector<std::unique_ptr<Input>>& inputs, const PassResult&) {
    globals = std::move(g);
    meta = inputs.front()->reader().meta();
  }
};

// The replay (pass 2 when categories are inferred).
struct ReplaySink {
  ReplaySink(Globals& g, const AnalyzeOptions& ao)
      : opts(ao), rp(g.strings.all(), opts, 0, UINT64_MAX, 0, &g.stacks, HandoffSearch::kAsItGoes) {}
  AnalyzeOptions opts;
  Replayer rp;
  uint32_t pos = 0;
  // Category inference: the persistent allocations (sorted indices), the tables of pass 1.
  const std::vector<uint64_t>* persistent = nullptr;
  const RunAnalysis* shell = nullptr;
  const std::vector<CategoryRule>* rules = nullptr;
  bool cupti = false;
  CategoryInference mode = CategoryInference::kAuto;
  InferredCategories counts;
  RunAnalysis run;

  uint64_t first_ts = UINT64_MAX;
  bool too_long = false;  // more replayed events than 32-bit replay positions hold (analyze refuses the same)

  CounterCollector counters;
  void any(const TraceRecord& r) { counters.add(r); }
  bool prefetching() const { return rp.prefetching(); }
  void prefetch(const TraceRecord& r, int stage) { rp.prefetch(r, stage); }
  void replay(const TraceRecord& r, uint64_t n) {
    first_ts = std::min(first_ts, r.timestamp_ns);
    if (pos >= kNoIndex - 1) {
      too_long = true;
      return;
    }
    if (persistent != nullptr && r.kind == EventKind::kAlloc && (decides_category(r, mode) || !rules->empty())) {
      TraceRecord c = r;
      c.category = decides_category(r, mode)
                       ? decide_category(r, cupti, std::binary_search(persistent->begin(), persistent->end(), n), *rules, *shell, &counts)
                       : rule_category(r, *rules, *shell, &counts);
      if (rp.event(c, pos, 0)) ++pos;
      return;
    }
    if (rp.event(r, pos, 0)) ++pos;
  }
  void done(std::unique_ptr<Globals> g, const std::vector<std::unique_ptr<Input>>& inputs, const PassResult& res) {
    finish_meta(inputs, &run);
    run.strings = g->strings.all();
    run.stacks = g->stacks;
    run.counters = counters.finish(run.strings);
    run.reordered = res.reordered;
    run.replayed_events = pos;
    rp.finish(&run, pos);
    run.streamed = true;
    run.start_ts = first_ts == UINT64_MAX ? 0 : first_ts;
    if (too_long && run.limit_error.empty())
      run.limit_error = "the trace has more than " + std::to_string(kNoIndex - 1) + " replayed events; the planner replays at most that many";
  }
};

}  // namespace

Result<RunAnalysis> analyze_stream(const std::vector<std::string>& paths, const StreamOptions& opt, StreamStats* stats) {
  if (paths.empty()) return Status::bad_input("no trace to analyse");
  if (paths.size() > 65535) return Status::bad_input("too many traces to merge (at most 65535)");
  StreamStats local;
  if (stats == nullptr) stats = &local;
  AnalyzeOptions ao = opt.analyze;
  ao.keep_lifetimes = ao.keep_event_index = false;
  ao.record_categories = nullptr;

  // Pass 1 (category inference): only when the metadata can call for it.
  std::unique_ptr<ScanSink> scan;
  if (opt.categories != CategoryInference::kKeep) {
    auto r = TraceReader::open(paths.front());
    if (!r) return r.status();
    std::vector<TraceRecord> first;
    if (auto more = (*r)->next(&first); !more) return more.status();  // the metadata precedes the first records
    const bool rules = !opt.category_rules.empty();
    if (should_infer_categories((*r)->meta(), true, opt.categories, rules)) {
      MOEPROF_ASSIGN_OR_RETURN(scan, run_pass(paths, opt, stats, [](Globals&, std::vector<std::unique_ptr<Input>>&) {
                                 return std::make_unique<ScanSink>();
                               }));
      if (!should_infer_categories(scan->meta, scan->scan.any_unknown(), opt.categories, rules)) scan.reset();
    }
  }
  std::vector<uint64_t> persistent;
  RunAnalysis shell;
  if (scan) {
    persistent = scan->scan.persistent();
    shell.strings = scan->globals->strings.all();
    shell.stacks = scan->globals->stacks;
  }
  MOEPROF_ASSIGN_OR_RETURN(auto sink, run_pass(paths, opt, stats, [&](Globals& g, std::vector<std::unique_ptr<Input>>&) {
                             auto s = std::make_unique<ReplaySink>(g, ao);
                             if (scan) {
                               s->persistent = &persistent;
                               s->shell = &shell;
                               s->rules = &opt.category_rules;
                               s->cupti = scan->meta.backend == "cupti";
                               s->mode = opt.categories;
                             }
                             return s;
                           }));
  RunAnalysis run = std::move(sink->run);
  if (scan) run.categories_note = categories_note(sink->counts);
  return run;
}

}  // namespace moeprof::planner
