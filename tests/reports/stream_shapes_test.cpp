// Streaming on the shapes of real traces (issue 35): every allocation named, scoped and (format 2)
// given a call stack, uses, sizes that repeat and sizes that do not, in format versions 1 and 2. The
// streamed figures equal the in-memory ones, hand-offs included; the replay's tables grow with the
// distinct names, scopes and what is live, not with the events; the streamed hand-off search waits
// while a candidate may be used again, and stops past its bound (auto then reads in memory).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <thread>
#include <tuple>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "planner/arena_csv.h"
#include "planner/stream.h"
#include "reports/json_report.h"
#include "reports/run_loader.h"

using namespace moeprof;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

// The test's files (up to 17 MB each) live in one directory, removed when the process ends.
struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("moeprof_stream_shapes_test_" + std::to_string(::getpid()));
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
const TempDir kTemp;

std::string tmp_path(const std::string& name) {
  fs::create_directories(kTemp.dir);
  return (kTemp.dir / name).string();
}

struct Shape {
  int devices = 3, live = 24, names = 12, layers = 9, stacks = 40;
  uint32_t version = 2;
  uint64_t seed = 1;
};

// Writes `events` records of the shape with frames of 61 records (tables arrive between frames):
// weights first, then per step an allocation on a random device (sizes from 20 odd sizes that
// repeat, or random multiples of 256 B up to 8 MiB), a write use, a read use of a random live
// allocation, and the free of a random one once the device holds more than `live`. Addresses are
// recycled per power-of-two size class. Version 1 has no stacks; its stack slot holds a pid.
void write_shape(const std::string& path, const Shape& s, size_t events) {
  std::mt19937_64 rng(s.seed);
  RunMeta meta;
  meta.name = "shape";
  meta.mode = "baseline";
  meta.tp_size = s.devices;
  TraceWriterOptions wo;
  wo.records_per_frame = 61;
  wo.flush_interval_ms = 0;
  wo.version = s.version;
  auto w = TraceWriter::open(path, meta, wo);
  REQUIRE(w.is_ok());
  TraceWriter& tw = **w;
  std::vector<StrId> names, scopes;
  for (int i = 0; i < s.names; ++i) names.push_back(tw.intern("t" + std::to_string(i * 7 + 3)));
  for (int l = 0; l < s.layers; ++l)
    for (const char* sc : {"attn", "moe", "moe/experts"}) scopes.push_back(tw.intern("layer." + std::to_string(l) + "/" + sc));
  std::vector<StackId> stacks;
  if (s.version >= 2)
    for (int k = 0; k < s.stacks; ++k) {
      std::vector<uint32_t> frames;
      for (int f = 0; f <= k % 4; ++f)
        frames.push_back(tw.intern_frame(StackFrame{tw.intern("fn" + std::to_string((k + f) % 13)), tw.intern("model.py"),
                                                    static_cast<uint32_t>(10 + 3 * k + f), FrameKind::kPython}));
      stacks.push_back(tw.intern_stack(frames));
    }
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 20; ++i) sizes.push_back(257 + 4099 * static_cast<uint64_t>(i * i + 1));
  struct Dev {
    std::vector<std::pair<uint64_t, uint64_t>> live;  // (address, bytes)
    std::vector<std::vector<uint64_t>> free_by_class = std::vector<std::vector<uint64_t>>(32);
    uint64_t bump = 0x10000000;
  };
  std::vector<Dev> devs(static_cast<size_t>(s.devices));
  uint64_t ts = 1000, seq = 1;
  size_t n = 0;
  auto emit = [&](TraceRecord r) {
    if (n >= events) return;
    ts += 1 + rng() % 40;
    r.timestamp_ns = ts;
    r.seq = seq++;
    r.mem_kind = MemKind::kDevice;
    if (s.version < 2) r.stack_id = static_cast<StackId>(777);
    REQUIRE(tw.append(r).is_ok());
    ++n;
  };
  auto cls = [](uint64_t b) {
    int c = 0;
    while ((uint64_t{256} << c) < b) ++c;
    return c;
  };
  auto address = [&](Dev& d, uint64_t bytes) {
    auto& fl = d.free_by_class[static_cast<size_t>(cls(bytes))];
    if (!fl.empty()) {
      const uint64_t a = fl.back();
      fl.pop_back();
      return a;
    }
    const uint64_t a = d.bump;
    d.bump += uint64_t{256} << cls(bytes);
    return a;
  };
  for (uint16_t d = 0; d < s.devices; ++d)
    for (int k = 0; k < 3; ++k) {
      TraceRecord r;
      r.kind = EventKind::kAlloc;
      r.device = d;
      r.bytes = (uint64_t{1} << 24) + 4096 * static_cast<uint64_t>(k);
      r.address = address(devs[d], r.bytes);
      r.category = Category::kWeights;
      r.name_id = names[static_cast<size_t>(k) % names.size()];
      emit(r);
    }
  while (n < events) {
    const auto d = static_cast<uint16_t>(rng() % static_cast<uint64_t>(s.devices));
    Dev& dv = devs[d];
    TraceRecord a;
    a.kind = EventKind::kAlloc;
    a.device = d;
    a.bytes = rng() % 3 ? sizes[rng() % sizes.size()] : 256 * (1 + rng() % 32768);
    a.address = address(dv, a.bytes);
    a.category = rng() % 5 ? Category::kActivation : Category::kWorkspace;
    a.dtype = DType::kBF16;
    a.name_id = names[rng() % names.size()];
    a.scope_id = scopes[rng() % scopes.size()];
    const uint64_t stack_pick = rng();  // drawn in both versions: the same records otherwise
    if (!stacks.empty()) a.stack_id = stacks[stack_pick % stacks.size()];
    emit(a);
    dv.live.emplace_back(a.address, a.bytes);
    TraceRecord u;
    u.kind = EventKind::kUse;
    u.device = d;
    u.address = a.address;
    u.flags = kUseWrite;
    u.name_id = a.name_id;
    emit(u);
    u.address = dv.live[rng() % dv.live.size()].first;
    u.flags = kUseRead;
    emit(u);
    if (dv.live.size() > static_cast<size_t>(s.live)) {
      const size_t v = rng() % dv.live.size();
      TraceRecord f;
      f.kind = EventKind::kFree;
      f.device = d;
      f.address = dv.live[v].first;
      emit(f);
      dv.free_by_class[static_cast<size_t>(cls(dv.live[v].second))].push_back(dv.live[v].first);
      dv.live[v] = dv.live.back();
      dv.live.pop_back();
    }
  }
  REQUIRE(tw.close().is_ok());
}

planner::AnalyzeOptions mem_opts() {
  planner::AnalyzeOptions o;
  o.keep_lifetimes = false;
  o.timeline_points = 0;
  o.alloc_groups = false;  // as `moeprof plan`
  return o;
}

planner::StreamOptions stream_opts(bool parallel) {
  planner::StreamOptions o;
  o.analyze = mem_opts();
  o.parallel = parallel;
  return o;
}

ordered_json report_of(const planner::RunAnalysis& run) {
  reports::ReportOptions o;
  o.top_entries = 1u << 20;
  o.top_scopes = 1u << 20;
  o.list_limit = 1u << 20;
  o.include_timeline = false;
  ordered_json j = reports::make_run_json(run, "run", o);
  j.erase("streamed");
  return j;
}

uint64_t handoffs(const planner::RunAnalysis& r) {
  uint64_t n = 0;
  for (const auto& d : r.devices) n += d.handoff_count;
  return n;
}

}  // namespace

TEST_CASE("stream shapes: named, scoped and stacked traces of versions 1 and 2 equal the in-memory analysis", "[stream]") {
  planner::RunAnalysis first;
  for (uint32_t version : {1u, 2u}) {
    Shape s;
    s.version = version;
    s.seed = 41;
    const std::string p = tmp_path("shape_v" + std::to_string(version) + ".mtrace");
    write_shape(p, s, 30011);
    auto back = read_trace(p);
    REQUIRE(back.is_ok());
    REQUIRE(back->records.size() == 30011);
    CHECK(back->stacks.stack_count() == (version >= 2 ? 41u : 1u));
    if (version < 2) CHECK(back->meta.pid == 777);
    const planner::RunAnalysis mem = planner::analyze(*back, mem_opts());
    // Not vacuous: hand-offs, held-after-last-use bytes, scopes and a live set on every device.
    CHECK(handoffs(mem) > 100);
    REQUIRE(mem.devices.size() == 3);
    for (const auto& d : mem.devices) {
      CHECK(d.held_after_last_use_bytes > 0);
      CHECK(d.scopes.size() > 30);
      CHECK_FALSE(d.live_set_at_activation_peak.empty());
      for (const auto& h : d.handoffs) CHECK(h.bytes > 0);
    }
    // The hand-off search decided where the replay runs (these tables fit the caches), and in a
    // thread of its own from the first batch on (handoff_thread_slots 0).
    for (size_t thread_slots : {size_t{12288}, size_t{0}})
      for (bool parallel : {false, true}) {
        CAPTURE(thread_slots, parallel);
        planner::StreamOptions so = stream_opts(parallel);
        so.analyze.handoff_thread_slots = thread_slots;
        planner::StreamStats st;
        auto sr = planner::analyze_stream({p}, so, &st);
        REQUIRE(sr.is_ok());
        CHECK(st.records == 30011);
        CHECK(st.restarts == 0);
        CHECK(sr->handoffs_computed);
        CHECK(sr->tables.handoff_thread == (thread_slots == 0 && std::thread::hardware_concurrency() >= 2));
        CHECK(handoffs(*sr) == handoffs(mem));
        CHECK(report_of(*sr) == report_of(mem));
      }
    // The two versions hold the same records but for the stacks: the same figures.
    if (version == 1) {
      first = mem;
    } else {
      CHECK(mem.peak_activation_bytes == first.peak_activation_bytes);
      CHECK(handoffs(mem) == handoffs(first));
      for (size_t i = 0; i < mem.devices.size(); ++i) {
        CHECK(mem.devices[i].handoff_bytes_at_activation_peak == first.devices[i].handoff_bytes_at_activation_peak);
        CHECK(mem.devices[i].held_after_last_use_bytes == first.devices[i].held_after_last_use_bytes);
      }
    }
  }
}

TEST_CASE("stream shapes: a live set past the caches moves the hand-off search to its own thread mid-run, with the same figures", "[stream]") {
  // 3 devices x 12,000 live allocations: the search's slot table passes 12,288 slots while the
  // window fills, so the first batches are decided beside the replay and the rest in the thread.
  Shape s;
  s.live = 12000;
  s.seed = 5;
  s.version = 1;
  const std::string p = tmp_path("wide.mtrace");
  write_shape(p, s, 150001);
  auto back = read_trace(p);
  REQUIRE(back.is_ok());
  const planner::RunAnalysis mem = planner::analyze(*back, mem_opts());
  CHECK(handoffs(mem) > 1000);
  CHECK(mem.tables.lifetime_slots > 3 * 12288);
  auto sr = planner::analyze_stream({p}, stream_opts(true));
  REQUIRE(sr.is_ok());
  CHECK(sr->tables.lifetime_slots > 2 * 12288);  // past the threshold, and the first batch decided below it
  CHECK(sr->tables.handoff_thread == (std::thread::hardware_concurrency() >= 2));
  CHECK(sr->handoffs_computed);
  CHECK(handoffs(*sr) == handoffs(mem));
  CHECK(report_of(*sr) == report_of(mem));
  // Never in a thread: the same report.
  planner::StreamOptions inline_opts = stream_opts(true);
  inline_opts.analyze.handoff_thread_slots = SIZE_MAX;
  auto si = planner::analyze_stream({p}, inline_opts);
  REQUIRE(si.is_ok());
  CHECK_FALSE(si->tables.handoff_thread);
  CHECK(report_of(*si) == report_of(mem));
}

// A program nobody here wrote: the activation buffers of a 16-layer Llama generating 64 tokens
// for 4 prompts under PyTorch, traced on one H100 (bench/arena/torch, committed as a MiniMalloc
// CSV: 68,007 buffers, up to 19,857 live at once, sizes that repeat). Each buffer becomes an
// allocation at its start with a write use, a read use halfway through its life (when it lives
// two steps or more: the CSV has no uses; a last use before the end is what makes a buffer a
// candidate for a hand-off) and a free at its end; at each step the frees come first, then the
// allocations and their writes, then the reads. The live set passes the hand-off search's thread
// threshold (12,288 slots) part way: the streamed report equals the in-memory one.
TEST_CASE("stream shapes: a traced PyTorch program past the caches equals the in-memory analysis", "[stream]") {
  auto csv = planner::read_arena_csv(std::string(MOEPROF_SOURCE_DIR) + "/bench/arena/torch/instances/llama-generate.csv");
  REQUIRE(csv.is_ok());
  const std::vector<planner::Buffer>& bufs = csv->buffers;
  REQUIRE(bufs.size() == 68007);
  struct Ev {
    uint64_t t;
    int order;  // 0 free, 1 allocation + write, 2 read
    size_t b;
  };
  std::vector<Ev> evs;
  for (size_t i = 0; i < bufs.size(); ++i) {
    evs.push_back({bufs[i].lower, 1, i});
    if (bufs[i].upper >= bufs[i].lower + 2) evs.push_back({bufs[i].lower + (bufs[i].upper - bufs[i].lower) / 2, 2, i});
    evs.push_back({bufs[i].upper, 0, i});
  }
  std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return std::tie(a.t, a.order, a.b) < std::tie(b.t, b.order, b.b); });
  const std::string p = tmp_path("llama_generate.mtrace");
  {
    RunMeta meta;
    meta.name = "llama-generate";
    meta.mode = "baseline";
    TraceWriterOptions wo;
    wo.flush_interval_ms = 0;
    auto w = TraceWriter::open(p, meta, wo);
    REQUIRE(w.is_ok());
    uint64_t seq = 1;
    auto emit = [&](TraceRecord r) {
      r.timestamp_ns = 1000 + 3 * seq;
      r.seq = seq++;
      r.mem_kind = MemKind::kDevice;
      REQUIRE((*w)->append(r).is_ok());
    };
    for (const Ev& e : evs) {
      TraceRecord r;
      r.device = 0;
      r.address = 0x7f0000000000ULL + (uint64_t{e.b} << 28);  // one address per buffer
      r.bytes = bufs[e.b].size;
      r.category = Category::kActivation;
      if (e.order == 0) {
        r.kind = EventKind::kFree;
        emit(r);
      } else if (e.order == 1) {
        r.kind = EventKind::kAlloc;
        emit(r);
        r.kind = EventKind::kUse;
        r.flags = kUseWrite;
        emit(r);
      } else {
        r.kind = EventKind::kUse;
        r.flags = kUseRead;
        emit(r);
      }
    }
    REQUIRE((*w)->close().is_ok());
  }
  auto back = read_trace(p);
  REQUIRE(back.is_ok());
  const planner::RunAnalysis mem = planner::analyze(*back, mem_opts());
  CHECK(handoffs(mem) > 1000);
  CHECK(mem.tables.lifetime_slots >= 19857);
  auto sr = planner::analyze_stream({p}, stream_opts(true));
  REQUIRE(sr.is_ok());
  CHECK(sr->tables.lifetime_slots > 12288);
  CHECK(sr->tables.handoff_thread == (std::thread::hardware_concurrency() >= 2));
  CHECK(sr->handoffs_computed);
  CHECK(handoffs(*sr) == handoffs(mem));
  CHECK(report_of(*sr) == report_of(mem));
}

TEST_CASE("stream shapes: a record later than the first window restarts with the full one, then sorts externally", "[stream]") {
  Shape s;
  s.seed = 19;
  const std::string in_order = tmp_path("order.mtrace"), late = tmp_path("late.mtrace");
  write_shape(in_order, s, 12007);
  auto t = read_trace(in_order);
  REQUIRE(t.is_ok());
  // 3000 records from the middle moved 1500 records later: later than 256 allow, not than 8192.
  std::vector<TraceRecord> moved(t->records.begin() + 5000, t->records.begin() + 8000);
  t->records.erase(t->records.begin() + 5000, t->records.begin() + 8000);
  t->records.insert(t->records.begin() + 6500, moved.begin(), moved.end());
  REQUIRE(write_trace(late, *t).is_ok());
  auto back = read_trace(late);
  REQUIRE(back.is_ok());
  const planner::RunAnalysis mem = planner::analyze(*back, mem_opts());
  CHECK(mem.reordered);
  CHECK(handoffs(mem) > 0);
  for (const auto& [first, full, restarts, external] :
       {std::tuple<size_t, size_t, uint32_t, bool>{256, 8192, 1, false}, {256, 512, 2, true}, {8192, 8192, 0, false}}) {
    planner::StreamOptions so = stream_opts(true);
    so.initial_window = first;
    so.reorder_window = full;
    so.temp_dir = fs::path(late).parent_path().string();
    planner::StreamStats st;
    auto r = planner::analyze_stream({late}, so, &st);
    REQUIRE(r.is_ok());
    INFO("windows " << first << " then " << full);
    CHECK(st.restarts == restarts);
    CHECK(st.external_sort == external);
    CHECK(st.window == (external ? 0 : full));
    CHECK(r->reordered);
    CHECK(report_of(*r) == report_of(mem));
  }
}

TEST_CASE("stream shapes: the replay's tables grow with names, scopes and what is live, not with events", "[stream]") {
  Shape s;
  s.seed = 7;
  const std::string small = tmp_path("small.mtrace"), large = tmp_path("large.mtrace");
  write_shape(small, s, 40000);
  write_shape(large, s, 200000);  // the same shape, 5x the events
  auto a = planner::analyze_stream({small}, stream_opts(true));
  auto b = planner::analyze_stream({large}, stream_opts(true));
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  const auto& ta = a->tables;
  const auto& tb = b->tables;
  // Every name and scope occurs in both: the per-name and per-scope tables are the same size.
  const uint64_t nodes = 1 + static_cast<uint64_t>(s.layers) * 4;  // "", layer.L, .../attn, .../moe, .../moe/experts
  CHECK(ta.scope_nodes == nodes);
  CHECK(tb.scope_nodes == nodes);
  CHECK(tb.scope_counters == ta.scope_counters);
  CHECK(tb.scope_counters <= static_cast<uint64_t>(s.devices) * nodes);
  CHECK(tb.scope_chains == ta.scope_chains);
  CHECK(tb.scope_chains <= static_cast<uint64_t>(s.devices) * (1 + 3 * static_cast<uint64_t>(s.layers)));
  CHECK(tb.growth_groups == ta.growth_groups);
  CHECK(tb.growth_groups <= static_cast<uint64_t>(s.names) * 4);  // scope families: "", layer.*/{attn,moe,moe/experts}
  CHECK(tb.alloc_groups == 0);
  // What is live: open lifetimes (weights plus each device's window), addresses recycled per size
  // class, and the hand-off search's waiting allocations.
  const uint64_t live = static_cast<uint64_t>(s.devices) * (3 + s.live + 1);
  CHECK(ta.lifetime_slots <= live);
  CHECK(tb.lifetime_slots <= live);
  CHECK(tb.addresses <= static_cast<uint64_t>(s.devices) * 20 * (s.live + 4));
  CHECK(tb.handoff_held <= 4 * live);
  CHECK(ta.handoff_held > 0);  // the search did hold allocations that waited
  // The in-memory replay has the same per-name and per-scope tables (and keeps every lifetime).
  auto mb = read_trace(large);
  REQUIRE(mb.is_ok());
  const planner::RunAnalysis m = planner::analyze(*mb, mem_opts());
  CHECK(m.tables.scope_counters == tb.scope_counters);
  CHECK(m.tables.growth_groups == tb.growth_groups);
  CHECK(m.tables.lifetime_slots == m.devices[0].allocations + m.devices[1].allocations + m.devices[2].allocations);
  // compare()'s groups are the one table keyed by size: with sizes that do not repeat it grows
  // with the allocations, which is why plan leaves it off.
  planner::StreamOptions with_groups = stream_opts(true);
  with_groups.analyze.alloc_groups = true;
  auto g = planner::analyze_stream({large}, with_groups);
  REQUIRE(g.is_ok());
  CHECK(g->tables.alloc_groups > 10 * tb.scope_chains);
}

namespace {

// Device 0: A (96 B) allocated and used; B (96 B) allocated while A is live and past its use; then
// `then` happens to A; C (5 B) is live throughout so that the peak is at B's allocation.
std::string waiting_trace(const std::string& name, const std::string& then) {
  Trace t;
  t.meta.name = name;
  uint64_t ts = 10;
  auto add = [&](EventKind k, uint64_t addr, uint64_t bytes) -> TraceRecord& {
    TraceRecord& r = t.add(k, ts += 10, addr, bytes);
    r.seq = ts;
    r.category = Category::kActivation;
    r.name_id = t.strings.intern(addr == 0xA0 ? "A" : addr == 0xB0 ? "B" : "C");
    return r;
  };
  add(EventKind::kAlloc, 0xC0, 5);
  add(EventKind::kAlloc, 0xA0, 96);
  add(EventKind::kUse, 0xA0, 0);
  add(EventKind::kAlloc, 0xB0, 96);  // the activation peak: A + B + C
  add(EventKind::kUse, 0xB0, 0);
  if (then == "used again") add(EventKind::kUse, 0xA0, 0);
  if (then != "held to the end") add(EventKind::kFree, 0xA0, 0);
  add(EventKind::kFree, 0xB0, 0);
  const std::string p = tmp_path(name + ".mtrace");
  REQUIRE(write_trace(p, t).is_ok());
  return p;
}

}  // namespace

TEST_CASE("stream shapes: an allocation waits while its candidate may be used again", "[stream]") {
  // freed: B takes A (dead since its use, live until after B): one hand-off at the peak.
  // used again: A was not dead when B came: none. held to the end: A never used again: one.
  for (const auto& [then, expected] : {std::pair<std::string, uint64_t>{"freed", 1}, {"used again", 0}, {"held to the end", 1}}) {
    const std::string p = waiting_trace("w" + std::to_string(then.size()), then);
    auto t = read_trace(p);
    REQUIRE(t.is_ok());
    const planner::RunAnalysis mem = planner::analyze(*t, mem_opts());
    auto s = planner::analyze_stream({p}, stream_opts(false));
    REQUIRE(s.is_ok());
    INFO(then);
    REQUIRE(mem.devices.size() == 1);
    REQUIRE(s->devices.size() == 1);
    CHECK(mem.devices[0].handoff_count == expected);
    CHECK(s->devices[0].handoff_count == expected);
    CHECK(s->devices[0].handoff_bytes == 96 * expected);
    CHECK(s->devices[0].handoff_bytes_at_activation_peak == 96 * expected);
    CHECK(report_of(*s) == report_of(mem));
    if (expected == 1) {
      REQUIRE(s->devices[0].handoffs.size() == 1);
      CHECK(s->devices[0].handoffs[0].alloc_name == "B");
      CHECK(s->devices[0].handoffs[0].dead_name == "A");
      CHECK(s->devices[0].handoffs[0].alloc_lifetime == 2);
      CHECK(s->devices[0].handoffs[0].dead_lifetime == 1);
      CHECK(s->devices[0].handoffs[0].at_activation_peak);
    }
  }
}

TEST_CASE("stream shapes: a hand-off search that would grow with the trace stops, and auto reads in memory", "[stream]") {
  // A buffer used once and held to the end; 300 allocations of its size come after it (each freed
  // at once): every one waits on it until the end.
  Trace t;
  t.meta.name = "held";
  uint64_t ts = 0;
  Trace* into = &t;
  auto add = [&](EventKind k, uint64_t addr, uint64_t bytes) -> TraceRecord& {
    TraceRecord& r = into->add(k, ts += 7, addr, bytes);
    r.seq = ts;
    r.category = Category::kActivation;
    return r;
  };
  add(EventKind::kAlloc, 0x1000, 4097);
  add(EventKind::kUse, 0x1000, 0);
  for (uint64_t i = 0; i < 300; ++i) {
    add(EventKind::kAlloc, 0x8000 + 0x2000 * i, 4097);
    add(EventKind::kFree, 0x8000 + 0x2000 * i, 0);
  }
  const std::string p = tmp_path("held.mtrace");
  REQUIRE(write_trace(p, t).is_ok());
  const planner::RunAnalysis mem = planner::analyze(t, mem_opts());
  REQUIRE(mem.devices.size() == 1);
  CHECK(mem.devices[0].handoff_count == 1);  // the first takes it; the others find it taken

  // Streamed, the search decided beside the replay or in a thread (thread_slots 0), on this trace
  // and on the same shape 6,000 allocations long (12,002 events: two batches, so the search stops
  // in the thread during the first while the replay goes on sending the second). Whole, it agrees
  // with the in-memory analysis; held to 50 waiting allocations, it stops.
  Trace longer = t;
  into = &longer;
  for (uint64_t i = 300; i < 6000; ++i) {
    add(EventKind::kAlloc, 0x8000 + 0x2000 * i, 4097);
    add(EventKind::kFree, 0x8000 + 0x2000 * i, 0);
  }
  const std::string lp = tmp_path("held_long.mtrace");
  REQUIRE(write_trace(lp, longer).is_ok());
  for (auto [path, trace, held, thread_slots] : {std::tuple{p, &t, 300, size_t{12288}}, std::tuple{p, &t, 300, size_t{0}},
                                                 std::tuple{lp, &longer, 6000, size_t{0}}}) {
    CAPTURE(path, thread_slots);
    const planner::RunAnalysis in_memory = planner::analyze(*trace, mem_opts());
    CHECK(in_memory.devices[0].handoff_count == 1);
    planner::StreamOptions o = stream_opts(true);
    o.analyze.handoff_thread_slots = thread_slots;
    auto whole = planner::analyze_stream({path}, o);
    REQUIRE(whole.is_ok());
    CHECK(whole->handoffs_computed);
    CHECK(whole->tables.handoff_held == static_cast<uint64_t>(held));
    CHECK(report_of(*whole) == report_of(in_memory));
    o.analyze.handoff_max_waiting = 50;
    auto stopped = planner::analyze_stream({path}, o);
    REQUIRE(stopped.is_ok());
    CHECK_FALSE(stopped->handoffs_computed);
    CHECK(stopped->handoffs_note.find("stopped") != std::string::npos);
    CHECK(stopped->devices[0].handoff_count == 0);
    CHECK(stopped->tables.handoff_held == 51);
    CHECK(stopped->tables.handoff_thread == (thread_slots == 0 && std::thread::hardware_concurrency() >= 2));
    CHECK(stopped->peak_activation_bytes == in_memory.peak_activation_bytes);
  }
  planner::StreamOptions so = stream_opts(true);
  so.analyze.handoff_max_waiting = 50;

  // load_run: auto reads such an input (smaller than auto_bytes) in memory; --stream on does not.
  reports::LoadOptions lo;
  lo.analyze = so.analyze;
  auto autorun = reports::load_run({p}, lo);
  REQUIRE(autorun.is_ok());
  CHECK_FALSE(autorun->streamed);
  CHECK(autorun->analysis.handoffs_computed);
  CHECK(autorun->analysis.devices[0].handoff_count == 1);
  lo.stream = reports::StreamMode::kOn;
  auto on = reports::load_run({p}, lo);
  REQUIRE(on.is_ok());
  CHECK(on->streamed);
  CHECK_FALSE(on->analysis.handoffs_computed);
  // And without the stop, auto streams (plan's path): the same figures as in memory.
  lo.stream = reports::StreamMode::kAuto;
  lo.analyze.handoff_max_waiting = size_t{1} << 21;
  auto streamed = reports::load_run({p}, lo);
  REQUIRE(streamed.is_ok());
  CHECK(streamed->streamed);
  CHECK(report_of(streamed->analysis) == report_of(mem));
  // A command that shows every lifetime (the report's timeline) reads small inputs in memory.
  lo.prefers_memory = "the per-allocation timeline";
  auto preferring = reports::load_run({p}, lo);
  REQUIRE(preferring.is_ok());
  CHECK_FALSE(preferring->streamed);
  lo.auto_bytes = 1000;  // "large": streamed
  auto large = reports::load_run({p}, lo);
  REQUIRE(large.is_ok());
  CHECK(large->streamed);
}
