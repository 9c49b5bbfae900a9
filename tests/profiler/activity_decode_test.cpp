// CPU-only: CUPTI activity buffers built in memory with the CUDA 13 record layouts
// (CUpti_ActivityMemory4, CUpti_ActivityMemoryPool3, CUpti_ActivityKernel10), walked with
// cuptiActivityGetNextRecord (works without a GPU), joined and written as a .mtrace.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <cupti.h>

#include "core/trace_io.h"
#include "profiler/activity_decode.h"
#include "planner/analysis.h"
#include "profiler/attribution.h"

using namespace moeprof;
using namespace moeprof::profiler;

namespace {

// Appends records back to back, as CUPTI lays them out.
struct BufferBuilder {
  std::vector<uint8_t> bytes;
  template <typename T>
  void add(const T& rec) {
    size_t off = bytes.size();
    bytes.resize(off + sizeof(T));
    std::memcpy(bytes.data() + off, &rec, sizeof(T));
  }
};

CUpti_ActivityMemory4 mem(CUpti_ActivityMemoryOperationType op, uint64_t addr, uint64_t bytes, uint64_t ts,
                          uint32_t corr, uint32_t device = 0, bool async = false, uint64_t pool = 0,
                          uint64_t pool_size = 0) {
  CUpti_ActivityMemory4 m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = op;
  m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.correlationId = corr;
  m.address = addr;
  m.bytes = bytes;
  m.timestamp = ts;
  m.processId = 4242;
  m.deviceId = device;
  m.contextId = 1;
  m.streamId = async ? 13 : CUPTI_INVALID_STREAM_ID;
  m.isAsync = async ? 1 : 0;
  if (pool != 0) {
    m.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
    m.memoryPoolConfig.address = pool;
    m.memoryPoolConfig.pool.size = pool_size;
  }
  return m;
}

constexpr auto kAllocOp = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
constexpr auto kReleaseOp = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;

struct Collect : RecordSink {
  std::vector<DecodedRecord> recs;
  void on_record(const DecodedRecord& r) override { recs.push_back(r); }
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("moeprof_prof_" + name)).string();
}

}  // namespace

TEST_CASE("record layouts are the CUDA 13 ones", "[profiler][decode]") {
  // If these change, the header moved to a new record version: update activity_decode.cpp.
  CHECK(sizeof(CUpti_ActivityMemory4) == 128);
  CHECK(sizeof(CUpti_ActivityMemoryPool3) == 80);
  CHECK(sizeof(CUpti_ActivityKernel10) == 216);
  uint32_t v = 0;
  REQUIRE(cuptiGetVersion(&v) == CUPTI_SUCCESS);
  CHECK(v >= CUPTI_API_VERSION);
}

TEST_CASE("memory records convert to alloc/free TraceRecords", "[profiler][decode]") {
  DecodedRecord d;
  auto m = mem(kAllocOp, 0x7f0000001000, 3 * 1024 * 1024 + 512, 1000, 77, 1);
  REQUIRE(convert_memory_record(m, &d));
  CHECK(static_cast<EventKind>(d.record.kind) == EventKind::kAlloc);
  CHECK(d.record.address == 0x7f0000001000);
  CHECK(d.record.bytes == 3 * 1024 * 1024 + 512);
  CHECK(d.record.timestamp_ns == 1000);
  CHECK(d.record.seq == 77);
  CHECK(d.correlation_id == 77);
  CHECK(d.record.device == 1);
  CHECK(d.record.stream == 0);  // CUPTI_INVALID_STREAM_ID -> 0
  CHECK(static_cast<MemKind>(d.record.mem_kind) == MemKind::kDevice);
  CHECK(d.pool_address == 0);

  auto a = mem(kAllocOp, 0x1000, 4096, 5, 9, 0, true, 0xabc000, 32 << 20);
  REQUIRE(convert_memory_record(a, &d));
  CHECK(static_cast<MemKind>(d.record.mem_kind) == MemKind::kStreamOrdered);
  CHECK(d.record.stream == 13);
  CHECK(d.pool_address == 0xabc000);
  CHECK(d.pool_size == (32u << 20));

  auto f = mem(kReleaseOp, 0x1000, 4096, 6, 10);
  REQUIRE(convert_memory_record(f, &d));
  CHECK(static_cast<EventKind>(d.record.kind) == EventKind::kFree);

  auto bad = mem(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID, 1, 1, 1, 1);
  CHECK_FALSE(convert_memory_record(bad, &d));

  CHECK(mem_kind_from_cupti(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, false) == MemKind::kManaged);
  CHECK(mem_kind_from_cupti(CUPTI_ACTIVITY_MEMORY_KIND_PINNED, false) == MemKind::kPinned);
  CHECK(mem_kind_from_cupti(CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE, false) == MemKind::kOther);
}

TEST_CASE("pool and kernel records convert", "[profiler][decode]") {
  CUpti_ActivityMemoryPool3 p;
  std::memset(&p, 0, sizeof(p));
  p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED;
  p.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  p.address = 0xabc000;
  p.size = 64 << 20;
  p.timestamp = 50;
  p.deviceId = 2;
  DecodedRecord d;
  REQUIRE(convert_memory_pool_record(p, &d));
  CHECK(static_cast<EventKind>(d.record.kind) == EventKind::kPoolReserve);
  CHECK(d.record.bytes == (64u << 20));
  CHECK(d.record.address == 0xabc000);
  CHECK(d.record.device == 2);
  p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED;
  REQUIRE(convert_memory_pool_record(p, &d));
  CHECK(d.record.bytes == 0);

  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 100;
  k.end = 350;
  k.correlationId = 5;
  k.streamId = 7;
  k.deviceId = 1;
  k.name = "touch_kernel";
  REQUIRE(convert_kernel_record(k, &d));
  CHECK(static_cast<EventKind>(d.record.kind) == EventKind::kKernel);
  CHECK(d.record.timestamp_ns == 100);
  CHECK(d.record.bytes == 250);
  CHECK(std::string(d.kernel_name) == "touch_kernel");
}

TEST_CASE("decode_activity_buffer walks a mixed buffer", "[profiler][decode]") {
  BufferBuilder b;
  b.add(mem(kAllocOp, 0x1000, 100, 10, 1));
  CUpti_ActivityMemoryPool3 p;
  std::memset(&p, 0, sizeof(p));
  p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED;
  p.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  p.size = 1 << 20;
  b.add(p);
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "k";
  b.add(k);
  b.add(mem(kReleaseOp, 0x1000, 100, 20, 2));
  Collect sink;
  DecodeStats st;
  size_t n = decode_activity_buffer(b.bytes.data(), b.bytes.size(), sink, &st);
  CHECK(n == 4);
  CHECK(st.records == 4);
  CHECK_FALSE(st.error);
  REQUIRE(sink.recs.size() == 4);
  CHECK(static_cast<EventKind>(sink.recs[0].record.kind) == EventKind::kAlloc);
  CHECK(static_cast<EventKind>(sink.recs[1].record.kind) == EventKind::kPoolReserve);
  CHECK(static_cast<EventKind>(sink.recs[2].record.kind) == EventKind::kKernel);
  CHECK(static_cast<EventKind>(sink.recs[3].record.kind) == EventKind::kFree);

  Collect empty;
  CHECK(decode_activity_buffer(b.bytes.data(), 0, empty) == 0);
  CHECK(decode_activity_buffer(nullptr, 10, empty) == 0);
}

TEST_CASE("pool tracker emits a reserve record when a pool's size changes", "[profiler][decode]") {
  PoolTracker t;
  DecodedRecord d;
  TraceRecord out;
  REQUIRE(convert_memory_record(mem(kAllocOp, 1, 10, 1, 1, 0, true, 0x100, 2 << 20), &d));
  REQUIRE(t.observe(d, &out));
  CHECK(static_cast<EventKind>(out.kind) == EventKind::kPoolReserve);
  CHECK(out.bytes == (2u << 20));
  CHECK(out.address == 0x100);
  CHECK_FALSE(t.observe(d, &out));  // unchanged
  REQUIRE(convert_memory_record(mem(kAllocOp, 2, 10, 2, 2, 0, true, 0x100, 4 << 20), &d));
  CHECK(t.observe(d, &out));
  REQUIRE(convert_memory_record(mem(kAllocOp, 3, 10, 3, 3, 1, true, 0x100, 4 << 20), &d));
  CHECK(t.observe(d, &out));  // same address, other device
}

TEST_CASE("assembler joins attribution by correlation id and writes a readable trace", "[profiler][decode]") {
  const std::string path = temp_path("assembler.mtrace");
  RunMeta meta;
  meta.name = "assembler-test";
  auto w = TraceWriter::open(path, meta, TraceWriterOptions{3, 0});  // small frames: several RECS frames
  REQUIRE(w.is_ok());
  AttributionTable table;
  // cudaMalloc (runtime corr 10) nesting cuMemAlloc (driver corr 11): the record may carry either.
  Attribution a;
  a.tid = 111;
  a.scope = table.intern("prefill/layer.0");
  a.flags = kFlagInferredScope;
  table.put(10, 11, a);
  Attribution tagged;
  tagged.tid = 222;
  tagged.scope = table.intern("layer.0/attn");
  tagged.name = table.intern("q_proj");
  tagged.category = Category::kWeights;
  table.put(20, 0, tagged);
  Attribution freer;
  freer.tid = 111;
  table.put(30, 0, freer);

  TraceAssembler asmb(w->get(), &table);
  BufferBuilder b;
  b.add(mem(kAllocOp, 0x1000, 1000, 100, 11));               // joined through the partner id
  b.add(mem(kAllocOp, 0x2000, 2000, 110, 20, 0, true, 0x9000, 8 << 20));
  b.add(mem(kAllocOp, 0x3000, 4000, 120, 25));               // no attribution
  b.add(mem(kReleaseOp, 0x1000, 1000, 130, 30));
  b.add(mem(kReleaseOp, 0x2000, 2000, 140, 31));
  b.add(mem(kReleaseOp, 0x3000, 4000, 150, 32));
  decode_activity_buffer(b.bytes.data(), b.bytes.size(), asmb);
  CHECK(table.pending() == 0);  // 10 left with its partner 11
  CHECK(asmb.stats().allocs == 3);
  CHECK(asmb.stats().allocs_joined == 2);
  CHECK(asmb.stats().allocs_tagged == 1);
  CHECK(asmb.stats().frees_joined == 1);
  (*w)->add_dropped(5);
  REQUIRE((*w)->close().is_ok());

  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  const Trace& tr = *t;
  CHECK_FALSE(tr.truncated);
  CHECK(tr.dropped_records == 5);
  REQUIRE(tr.records.size() == 7);  // 3 allocs, 3 frees, 1 pool reserve
  const TraceRecord& r0 = tr.records[0];
  CHECK(r0.tid == 111);
  CHECK(tr.str(r0.scope_id) == "prefill/layer.0");
  CHECK((r0.flags & kFlagInferredScope) != 0);
  const TraceRecord& r1 = tr.records[1];
  CHECK(tr.str(r1.scope_id) == "layer.0/attn");
  CHECK(tr.str(r1.name_id) == "q_proj");
  CHECK(static_cast<Category>(r1.category) == Category::kWeights);
  CHECK((r1.flags & kFlagInferredScope) == 0);
  CHECK(static_cast<EventKind>(tr.records[2].kind) == EventKind::kPoolReserve);
  CHECK(tr.records[2].bytes == (8u << 20));
  CHECK(tr.records[3].tid == 0);
  CHECK(tr.records[3].scope_id == StrId::kNone);

  // The trace replays with the planner (the analysis every front end uses).
  planner::RunAnalysis run = planner::analyze(tr);
  REQUIRE(run.devices.size() == 1);
  const planner::DeviceAnalysis& d = run.devices[0];
  CHECK(d.allocations == 3);
  CHECK(d.frees == 3);
  CHECK(d.peak_total_bytes == 7000);
  CHECK(run.peak_total_bytes == 7000);
  CHECK(d.peak_activation_bytes == 5000);  // the two unattributed (category unknown) allocations
  CHECK(d.peak_by_category[Category::kWeights] == 2000);
  CHECK(d.churn_bytes == 7000);
  CHECK(run.anomalies.total() == 0);
  CHECK(run.anomalies.null_frees == 0);
  CHECK(run.anomalies.never_freed == 0);  // nothing live at the end
  CHECK(d.pool_reserved_peak_bytes == (8u << 20));
  const planner::ScopeStat* scope = nullptr;
  for (const auto& st : d.scopes)
    if (st.scope == "prefill/layer.0") scope = &st;
  REQUIRE(scope != nullptr);
  CHECK(scope->allocated_bytes == 1000);
  CHECK(scope->allocations == 1);
  size_t with_tid = 0;
  for (const TraceRecord& r : tr.records) with_tid += r.kind == EventKind::kAlloc && r.tid != 0;
  CHECK(with_tid == 2);
  std::filesystem::remove(path);
}

TEST_CASE("CUDA-graph memory (an allocation at address 0) is category graph, apart from the program's peak",
          "[profiler][decode]") {
  // The driver's graph-memory record: address 0, no API call behind it (correlation id 0).
  Trace tr;
  for (const auto& m : {mem(kAllocOp, 0x1000, 1 << 20, 10, 1), mem(kAllocOp, 0, 32 << 20, 20, 0),
                        mem(kAllocOp, 0x2000, 2 << 20, 30, 2), mem(kReleaseOp, 0x1000, 1 << 20, 40, 3),
                        mem(kReleaseOp, 0x2000, 2 << 20, 50, 4)}) {
    DecodedRecord d;
    REQUIRE(convert_memory_record(m, &d));
    tr.records.push_back(d.record);
  }
  CHECK(static_cast<Category>(tr.records[1].category) == Category::kGraph);
  CHECK(static_cast<Category>(tr.records[0].category) == Category::kUnknown);
  CHECK(static_cast<Category>(tr.records[2].category) == Category::kUnknown);

  planner::RunAnalysis all = planner::analyze(tr);
  CHECK(all.devices[0].peak_total_bytes == (35u << 20));
  CHECK(all.devices[0].peak_by_category[Category::kGraph] == (32u << 20));
  CHECK(all.devices[0].peak_activation_bytes == (3u << 20));  // graph memory is not activation memory
  CHECK(all.anomalies.never_freed == 1);

  planner::AnalyzeOptions opt;
  opt.category_mask = planner::all_categories_except(Category::kGraph);
  planner::RunAnalysis program = planner::analyze(tr, opt);
  CHECK(program.devices[0].peak_total_bytes == (3u << 20));
  CHECK(program.devices[0].allocations == 2);
  CHECK(program.anomalies.never_freed == 0);
  CHECK(program.anomalies.total() == 0);
}

TEST_CASE("checked-in CUPTI buffers decode without errors", "[profiler][decode][golden]") {
  // tests/golden/cupti/*.cuptibuf: raw activity buffers (see the README there). Each must walk to
  // the end without a CUPTI error and yield at least one kept record.
  std::filesystem::path dir = std::filesystem::path(MOEPROF_SOURCE_DIR) / "tests/golden/cupti";
  size_t files = 0;
  REQUIRE(std::filesystem::is_directory(dir));
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".cuptibuf") continue;
    ++files;
    std::vector<uint8_t> buf(std::filesystem::file_size(e.path()));
    FILE* f = std::fopen(e.path().c_str(), "rb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fread(buf.data(), 1, buf.size(), f) == buf.size());
    std::fclose(f);
    Collect sink;
    DecodeStats st;
    decode_activity_buffer(buf.data(), buf.size(), sink, &st);
    INFO(e.path().string());
    CHECK_FALSE(st.error);
    CHECK(st.kept > 0);
  }
  // The checked-in buffers are the seed case's baseline and reuse runs: both must be there.
  CHECK(files >= 2);
}
