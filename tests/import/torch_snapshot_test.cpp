// Importing PyTorch memory snapshots: the fixtures of tests/golden/torch (written by
// tests/import/make_fixtures.py from a simulation that knows the whole history) must replay to
// their ground truth under both free policies: peak, the entry that reached it, the live set there,
// the end state, the reserved bytes, what had to be synthesized, the stacks.
#include <catch2/catch.hpp>

#include "tests/gpu_skip.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/trace_io.h"
#include "import/torch_snapshot.h"
#include "planner/analysis.h"
#include "tests/reports/test_util.h"

using namespace moeprof;
using namespace moeprof::importer;
using moeprof::testing::golden_dir;
using moeprof::testing::slurp;
using nlohmann::json;

namespace {

std::string torch_dir() { return golden_dir() + "/torch/"; }

TorchImportResult import_ok(const std::string& file, FreeOn free_on = FreeOn::kCompleted) {
  TorchImportOptions opt;
  opt.free_on = free_on;
  auto r = import_torch_snapshot_file(torch_dir() + file, opt);
  INFO(r.status().message());
  REQUIRE(r.is_ok());
  return std::move(r).value();
}

using LiveRow = std::tuple<uint64_t, uint64_t, std::string>;  // address, bytes, name

// The live set at a device's replayed peak, ordered like the fixtures: bytes desc, then address.
std::vector<LiveRow> live_at_peak(const planner::RunAnalysis& run, const planner::DeviceAnalysis& d) {
  std::vector<LiveRow> rows;
  for (const auto& l : run.lifetimes) {
    if (l.device == d.device && l.alloc_index <= d.peak_total_index && d.peak_total_index < l.free_index && l.bytes > 0)
      rows.emplace_back(l.address, l.bytes, run.str(l.name_id));
  }
  std::sort(rows.begin(), rows.end(), [](const LiveRow& a, const LiveRow& b) {
    return std::get<1>(a) != std::get<1>(b) ? std::get<1>(a) > std::get<1>(b) : std::get<0>(a) < std::get<0>(b);
  });
  return rows;
}

// The entry whose allocation first reached the peak; null when an allocation synthesized before
// the first entry did (they are the device's first `synthesized` lifetimes) or there is no peak.
json peak_entry(const planner::RunAnalysis& run, const planner::DeviceAnalysis& d, uint64_t synthesized) {
  uint64_t ordinal = 0;
  for (const auto& l : run.lifetimes) {
    if (l.device != d.device) continue;
    if (l.alloc_index == d.peak_total_index && d.peak_total_bytes > 0) return ordinal < synthesized ? json() : json(l.seq);
    ++ordinal;
  }
  return json();
}

// Checks one fixture under one policy against its ground truth.
void check_fixture(const std::string& name, FreeOn policy) {
  const json exp = json::parse(slurp(torch_dir() + name + ".expected.json"));
  const json& devs = exp["policies"][std::string(free_on_name(policy))];
  const TorchImportResult res = import_ok(name + ".pickle", policy);
  const planner::RunAnalysis run = planner::analyze(res.trace);
  REQUIRE(res.devices.size() == devs.size());
  REQUIRE(run.devices.size() == devs.size());
  uint64_t synthesized = 0;
  for (size_t k = 0; k < devs.size(); ++k) {
    const json& e = devs[k];
    const TorchDeviceSummary& s = res.devices[k];
    const planner::DeviceAnalysis& d = run.devices[k];
    INFO(name << " device " << e["device"] << " free_on " << free_on_name(policy));
    REQUIRE(s.device == e["device"].get<uint16_t>());
    REQUIRE(d.device == s.device);
    CHECK(s.entries == e["entries"].get<uint64_t>());
    CHECK(s.allocs == e["allocs"].get<uint64_t>());
    CHECK(s.frees == e["frees"].get<uint64_t>());
    CHECK(s.synthesized_from_frees == e["synthesized_from_frees"].get<uint64_t>());
    CHECK(s.synthesized_from_segments == e["synthesized_from_segments"].get<uint64_t>());
    CHECK(s.segment_events == e["segment_events"].get<uint64_t>());
    CHECK(s.oom_events == e["oom_events"].get<uint64_t>());
    CHECK(s.skipped_entries == e["skipped_entries"].get<uint64_t>());
    CHECK(s.has_segments == e["has_segments"].get<bool>());
    CHECK(s.initial_reserved_bytes == e["initial_reserved_bytes"].get<uint64_t>());
    CHECK(s.end_reserved_bytes == e["end_reserved_bytes"].get<uint64_t>());
    CHECK(s.end_live_bytes == e["end_live_bytes"].get<uint64_t>());
    CHECK(s.snapshot_live_bytes == s.end_live_bytes);
    CHECK(s.end_state_mismatches == 0);
    synthesized += s.synthesized();
    // The replay: peak, where it was first reached, the live set there, the reserved peak.
    CHECK(d.peak_total_bytes == e["peak_bytes"].get<uint64_t>());
    CHECK(peak_entry(run, d, s.synthesized()) == e["peak_entry"]);
    CHECK(d.pool_reserved_peak_bytes == e["reserved_peak_bytes"].get<uint64_t>());
    CHECK(d.allocations == s.allocs + s.synthesized());
    CHECK(d.frees == s.frees);
    std::vector<LiveRow> want;
    for (const auto& row : e["live_at_peak"]) want.emplace_back(row[0].get<uint64_t>(), row[1].get<uint64_t>(), row[2].get<std::string>());
    CHECK(live_at_peak(run, d) == want);
  }
  CHECK(res.synthesized_allocs == synthesized);
  // A consistent snapshot replays without anomalies: every free finds its allocation.
  CHECK(run.anomalies.total() == 0);
  CHECK(run.anomalies.unknown_frees == 0);
  CHECK(run.anomalies.double_frees == 0);
}

// The frames of every alloc entry, innermost first, as the fixture lists them.
void check_stacks(const std::string& name) {
  const json exp = json::parse(slurp(torch_dir() + name + ".expected.json"));
  const TorchImportResult res = import_ok(name + ".pickle");
  const Trace& t = res.trace;
  size_t checked = 0;
  for (const auto& s : res.devices) {
    const json& per = exp["stacks"][std::to_string(s.device)];
    size_t seen = 0;
    for (const auto& r : t.records) {
      if (r.device != s.device || r.kind != EventKind::kAlloc) continue;
      if (seen++ < s.synthesized()) continue;  // the synthesized allocations come first
      INFO(name << " device " << s.device << " entry " << r.seq);
      REQUIRE(per.contains(std::to_string(r.seq)));
      json got = json::array();
      for (uint32_t fid : t.stacks.stack(r.stack_id)) {
        const StackFrame& f = t.stacks.frame(fid);
        got.push_back({t.str(f.function), t.str(f.file), f.line, f.kind == FrameKind::kPython ? "python" : "native"});
      }
      CHECK(got == per[std::to_string(r.seq)]);
      CHECK(t.str(r.name_id) == python_frame_label(t, r.stack_id));
      ++checked;
    }
    CHECK(seen - s.synthesized() == per.size());
  }
  CHECK(checked > 0);
}

}  // namespace

TEST_CASE("torch import: two devices, ring buffer cut, pending frees, OOM, expandable segments") {
  check_fixture("two_devices", FreeOn::kCompleted);
  check_fixture("two_devices", FreeOn::kRequested);
  check_stacks("two_devices");
}

TEST_CASE("torch import: the policies differ only by the frees still pending on another stream") {
  const auto c = import_ok("two_devices.pickle", FreeOn::kCompleted);
  const auto r = import_ok("two_devices.pickle", FreeOn::kRequested);
  const auto pc = planner::analyze(c.trace), pr = planner::analyze(r.trace);
  // Device 0: a 65536 B allocation is made while a 123457 B block waits for its side stream.
  CHECK(pc.devices[0].peak_total_bytes == 13'773'914);
  CHECK(pr.devices[0].peak_total_bytes == 13'773'914 - 65'536);
  CHECK(pc.devices[1].peak_total_bytes == pr.devices[1].peak_total_bytes);
  CHECK(c.devices[0].synthesized_from_frees == 2);  // 3000 B, and the 70001 B block requested before the window
  CHECK(r.devices[0].synthesized_from_frees == 1);
  CHECK(c.trace.meta.extra.at("free_on") == "completed");
  CHECK(r.trace.meta.extra.at("free_on") == "requested");
}

TEST_CASE("torch import: a long random history cut by a 600-entry ring buffer") {
  check_fixture("random", FreeOn::kCompleted);
  check_fixture("random", FreeOn::kRequested);
  check_stacks("random");
}

// Before, the summary named entry 0 (a free) as the one that reached the peak.
TEST_CASE("torch import: a peak from before the kept history is reached by no entry") {
  check_fixture("peak_before_history", FreeOn::kCompleted);
  check_fixture("peak_before_history", FreeOn::kRequested);
}

TEST_CASE("torch import: segments only (no history): every live block is synthesized") {
  check_fixture("segments_only", FreeOn::kCompleted);
  check_fixture("segments_only", FreeOn::kRequested);
  const auto res = import_ok("segments_only.pickle");
  // Synthesized blocks keep the frames their segments recorded.
  const Trace& t = res.trace;
  std::vector<std::string> names;
  for (const auto& r : t.records)
    if (r.kind == EventKind::kAlloc) names.emplace_back(t.str(r.name_id));
  CHECK(names == std::vector<std::string>{"forward (mlp.py:42)", "(allocated before the trace)", "forward (mlp.py:43)"});
  CHECK(res.trace.meta.extra.at("devices") == "0");
}

TEST_CASE("torch import: protocols 2, 4 and 5 give the same trace, which survives write and read") {
  const auto p4 = import_ok("two_devices.pickle");
  for (const char* other : {"two_devices.p2.pickle", "two_devices.p5.pickle"}) {
    INFO(other);
    const auto o = import_ok(other);
    REQUIRE(o.trace.records.size() == p4.trace.records.size());
    CHECK(std::memcmp(o.trace.records.data(), p4.trace.records.data(), p4.trace.records.size() * sizeof(TraceRecord)) == 0);
    CHECK(o.trace.strings.all() == p4.trace.strings.all());
    CHECK(o.trace.stacks.stack_count() == p4.trace.stacks.stack_count());
  }
  CHECK(import_ok("two_devices.p2.pickle").trace.meta.extra.at("pickle_protocol") == "2");
  CHECK(import_ok("two_devices.p5.pickle").trace.meta.extra.at("pickle_protocol") == "5");

  const std::string path = (std::filesystem::temp_directory_path() / "moeprof_import_roundtrip.mtrace").string();
  REQUIRE(write_trace(path, p4.trace).is_ok());
  auto back = read_trace(path);
  REQUIRE(back.is_ok());
  REQUIRE(back->records.size() == p4.trace.records.size());
  CHECK(std::memcmp(back->records.data(), p4.trace.records.data(), p4.trace.records.size() * sizeof(TraceRecord)) == 0);
  CHECK(back->meta.extra == p4.trace.meta.extra);
  CHECK(back->meta.name == "two_devices");
  CHECK(back->stacks.frame_count() == p4.trace.stacks.frame_count());
  std::filesystem::remove(path);
}

TEST_CASE("torch import: run metadata, streams, scopes, OOM markers, mem kind, timestamps") {
  const json exp = json::parse(slurp(torch_dir() + "two_devices.expected.json"));
  const auto res = import_ok("two_devices.pickle");
  const Trace& t = res.trace;
  const RunMeta& m = t.meta;
  CHECK(m.name == "two_devices");
  CHECK(m.backend == "torch-snapshot");
  CHECK(m.mode == "imported");
  CHECK(m.extra.at("devices") == "3");  // the third device trace is empty and has no segments
  CHECK(m.extra.at("entries") == "46");
  CHECK(m.extra.at("synthesized_allocs") == "4");
  CHECK(m.extra.at("oom_events") == "1");
  CHECK(m.extra.at("skipped_actions") == "annotate x1");
  CHECK(m.extra.at("streams") == "1=0x55982a3b4c10");
  CHECK(m.extra.at("allocator_settings") ==
        "PYTORCH_CUDA_ALLOC_CONF=; max_split_size=-1; garbage_collection_threshold=0.0; expandable_segments=False; "
        "pinned_num_register_threads=1; release_lock_on_cudamalloc=False; pinned_use_cuda_host_register=False; "
        "roundup_power2_divisions={'1': 0, '2': 0, '4': 0, '8': 0, '16': 0, '32': 0, '64': 0, '128': 0, '256': 0, "
        "'512': 0, '1024': 0, '2048': 0, '4096': 0, '8192': 0, '16384': 0, '32768': 0}");
  CHECK(res.entries == 46);
  CHECK(res.skipped_actions == std::map<std::string, uint64_t>{{"annotate", 1}});

  size_t markers = 0, scoped = 0;
  std::map<uint16_t, uint64_t> last_ts, first_ts;
  for (const auto& r : t.records) {
    CHECK(r.category == Category::kUnknown);
    CHECK(r.mem_kind == MemKind::kOther);
    CHECK(r.timestamp_ns >= last_ts[r.device]);  // non-decreasing per device, in record order
    last_ts[r.device] = r.timestamp_ns;
    first_ts.emplace(r.device, r.timestamp_ns);
    if (r.kind == EventKind::kMarkerBegin || r.kind == EventKind::kMarkerEnd) {
      ++markers;
      CHECK(r.device == 0);
      CHECK(r.bytes == (uint64_t{1} << 30));
      CHECK(t.str(r.name_id) == "oom: 1073741824 B requested, 1048576 B free on the device");
    }
    if (r.scope_id != StrId::kNone) {
      ++scoped;
      CHECK(t.str(r.scope_id) == (r.bytes == 4 * 1024 * 1024 ? "layer.0" : "tmp"));
    }
    if (r.kind == EventKind::kAlloc && r.bytes == 2000) CHECK(r.stream == 1);  // the side stream
    if (r.kind == EventKind::kAlloc && r.bytes == 7) CHECK(r.stream == 0);
  }
  CHECK(markers == 2);
  CHECK(scoped == 2);
  for (const auto& [dev, t0] : exp["first_time_us"].items()) CHECK(first_ts.at(static_cast<uint16_t>(std::stoi(dev))) == t0.get<uint64_t>() * 1000);
}

TEST_CASE("torch import: timestamps that go backwards or are missing keep the entries' order") {
  const auto res = import_ok("unordered_time.pickle");
  std::vector<std::pair<EventKind, uint64_t>> got;
  for (const auto& r : res.trace.records) got.emplace_back(r.kind, r.timestamp_ns);
  CHECK(got == std::vector<std::pair<EventKind, uint64_t>>{
                   {EventKind::kAlloc, 1'000'000}, {EventKind::kAlloc, 1'000'000}, {EventKind::kFree, 1'000'000},
                   {EventKind::kFree, 2'000'000}});
  const auto run = planner::analyze(res.trace);
  CHECK(run.devices.at(0).peak_total_bytes == 30);
  CHECK(run.anomalies.total() == 0);
}

// Found by a user's own snapshots: each of these had read as consistent or made a figure up.
TEST_CASE("torch import: a device absent from the segments, an oom without device_free, an unknown block state") {
  const auto res = import_ok("odd_states.pickle");
  REQUIRE(res.devices.size() == 2);
  CHECK(res.devices[0].end_state_checked);
  CHECK(res.devices[0].end_state_mismatches == 0);
  CHECK(res.devices[1].end_state_checked);
  CHECK_FALSE(res.devices[1].has_segments);
  CHECK(res.devices[1].end_live_bytes == 777);
  CHECK(res.devices[1].end_state_mismatches == 1);  // live in the trace, not in the snapshot's (empty) blocks
  CHECK(res.unknown_block_states == std::map<std::string, uint64_t>{{"zombie", 1}});
  CHECK(res.trace.meta.extra.at("unknown_block_states") == "zombie x1");
  CHECK(res.devices[0].snapshot_live_bytes == 1000);  // the zombie block is not counted live
  std::vector<std::string> markers;
  for (const auto& r : res.trace.records)
    if (r.kind == EventKind::kMarkerBegin) markers.emplace_back(res.trace.str(r.name_id));
  CHECK(markers == std::vector<std::string>{"oom: 3145728 B requested, the device's free bytes not recorded"});
  // Without a segments list nothing is compared.
  const auto none = import_ok("unordered_time.pickle");
  REQUIRE(none.devices.size() == 1);
  CHECK_FALSE(none.devices[0].end_state_checked);
}

TEST_CASE("torch import: an empty snapshot imports to an empty trace") {
  const auto res = import_ok("empty.pickle");
  CHECK(res.devices.empty());
  CHECK(res.trace.records.empty());
  CHECK(res.entries == 0);
  CHECK(res.trace.meta.extra.at("devices") == "1");
}

TEST_CASE("torch import: well-formed pickles that are not snapshots fail with one line naming the field") {
  const std::string dir = torch_dir() + "hostile/";
  const json expected = json::parse(slurp(dir + "expected.json"));
  size_t shape_errors = 0;
  for (const auto& [name, message] : expected.items()) {
    auto doc = parse_pickle(slurp(dir + name));
    if (!doc.is_ok()) continue;  // pickle-level errors: pickle_test
    INFO(name);
    ++shape_errors;
    auto r = import_torch_snapshot(doc->root());
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().message() == message.get<std::string>());
    auto f = import_torch_snapshot_file(dir + name);
    CHECK(f.status().message() == dir + name + ": " + message.get<std::string>());
  }
  CHECK(shape_errors == 10);
}

TEST_CASE("torch import: UTF-8 is kept, and what Python wrote with surrogatepass is replaced") {
  CHECK(sanitize_utf8("plain") == "plain");
  CHECK(sanitize_utf8("\xc3\xbc" "bung \xe2\x82\xac \xf0\x9f\x98\x80") == "\xc3\xbc" "bung \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(sanitize_utf8("a\xed\xb2\x80z") == "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz");  // a lone surrogate
  CHECK(sanitize_utf8("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");                   // overlong
  CHECK(sanitize_utf8("\xe2\x82") == "\xef\xbf\xbd\xef\xbf\xbd");                   // cut short
  FreeOn f{};
  CHECK(parse_free_on("requested", &f));
  CHECK(f == FreeOn::kRequested);
  CHECK_FALSE(parse_free_on("sometimes", &f));
}

// A snapshot taken on a GPU by scripts/torch_snapshot_fixture.py, with torch's own figures beside
// it, is checked in under tests/golden/torch/real/; without one this test reports Skipped.
TEST_CASE("torch import: real snapshots match torch's own figures") {
  const std::filesystem::path dir = torch_dir() + "real";
  size_t checked = 0;
  if (std::filesystem::is_directory(dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".pickle") continue;
      std::filesystem::path figures = entry.path();
      figures.replace_extension(".json");
      if (!std::filesystem::exists(figures)) continue;
      INFO(entry.path().string());
      const json fig = json::parse(slurp(figures.string()));
      auto res = import_torch_snapshot_file(entry.path().string());
      REQUIRE(res.is_ok());
      const auto run = planner::analyze(res->trace);
      const int dev = fig["device"].get<int>();
      const planner::DeviceAnalysis* d = run.device(static_cast<uint16_t>(dev));
      REQUIRE(d != nullptr);
      const TorchDeviceSummary* s = nullptr;
      for (const auto& x : res->devices)
        if (x.device == dev) s = &x;
      REQUIRE(s != nullptr);
      // PyTorch's own view of the recorded history (the memory_viz rule, replayed by the script).
      CHECK(d->peak_total_bytes == fig["viz_replay"]["peak_bytes"].get<uint64_t>());
      CHECK(s->end_live_bytes == fig["viz_replay"]["end_bytes"].get<uint64_t>());
      // The allocator's statistics: requested_bytes moves exactly with alloc / free_completed.
      // They cover the whole run only when the ring buffer did not wrap and nothing was live
      // before recording began that the trace could not see (the snapshot's segments show it).
      CHECK(s->end_live_bytes == fig["torch"]["requested_bytes_current"].get<uint64_t>());
      if (fig["trace_complete"].get<bool>())
        CHECK(d->peak_total_bytes == fig["torch"]["requested_bytes_peak"].get<uint64_t>());
      // memory_allocated() counts rounded block sizes, never less than the requested bytes (the
      // script's program frees on one stream, so both free policies give the same replay).
      CHECK(d->peak_total_bytes <= fig["torch"]["max_memory_allocated"].get<uint64_t>());
      CHECK(s->end_state_mismatches == 0);
      CHECK(run.anomalies.total() == 0);
      std::vector<uint64_t> ours;
      for (const auto& row : live_at_peak(run, *d)) ours.push_back(std::get<1>(row));
      const auto viz_top = fig["viz_replay"]["live_at_peak_sizes"].get<std::vector<uint64_t>>();
      CHECK(std::vector<uint64_t>(ours.begin(), ours.begin() + static_cast<long>(std::min(ours.size(), viz_top.size()))) == viz_top);
      if (fig.contains("torch_live_at_peak") && !fig["torch_live_at_peak"].is_null()) {
        std::vector<uint64_t> theirs = fig["torch_live_at_peak"]["requested_sizes"].get<std::vector<uint64_t>>();
        const size_t n = std::min<size_t>(10, theirs.size());
        REQUIRE(ours.size() >= n);
        CHECK(std::vector<uint64_t>(ours.begin(), ours.begin() + static_cast<long>(n)) ==
              std::vector<uint64_t>(theirs.begin(), theirs.begin() + static_cast<long>(n)));
        CHECK(d->peak_total_bytes == fig["torch_live_at_peak"]["total_requested"].get<uint64_t>());
      }
      ++checked;
    }
  }
  if (checked == 0) MOEPROF_SKIP("no real snapshot under tests/golden/torch/real (scripts/torch_snapshot_fixture.py makes one on a GPU)");
}
