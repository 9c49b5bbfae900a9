#include "profiler/activity_decode.h"

#include <cupti.h>

namespace moeprof::profiler {

MemKind mem_kind_from_cupti(CUpti_ActivityMemoryKind kind, bool stream_ordered) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
      return stream_ordered ? MemKind::kStreamOrdered : MemKind::kDevice;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return MemKind::kManaged;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return MemKind::kPinned;
    default:
      return MemKind::kOther;
  }
}

static uint32_t stream_or_zero(uint32_t stream_id) {
  // Synchronous operations carry CUPTI_INVALID_STREAM_ID; moeprof writes 0 ("no stream").
  return stream_id == CUPTI_INVALID_STREAM_ID ? 0u : stream_id;
}

bool convert_memory_record(const CUpti_ActivityMemory4& m, DecodedRecord* out) {
  *out = DecodedRecord{};
  TraceRecord& r = out->record;
  if (m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) {
    r.kind = EventKind::kAlloc;
  } else if (m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
    r.kind = EventKind::kFree;
  } else {
    return false;
  }
  const bool pooled = m.memoryPoolConfig.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID;
  const bool stream_ordered = m.isAsync != 0 || pooled;
  r.timestamp_ns = m.timestamp;
  r.address = m.address;
  r.bytes = m.bytes;
  r.seq = m.correlationId;
  r.stream = stream_or_zero(m.streamId);
  r.device = static_cast<uint16_t>(m.deviceId);
  r.mem_kind = mem_kind_from_cupti(m.memoryKind, stream_ordered);
  r.category = Category::kUnknown;
  // The driver reports the memory it reserves for CUDA-graph allocation nodes as one allocation at
  // address 0 with no API call behind it (seen on the H200: one 32 MiB record at graph
  // instantiation, equal to cudaGraphMemAttrUsedMemHigh). No real allocation has address 0.
  if (r.kind == EventKind::kAlloc && m.address == 0 && m.bytes > 0)
    r.category = Category::kGraph;
  out->correlation_id = m.correlationId;
  if (pooled) {
    out->pool_address = m.memoryPoolConfig.address;
    if (m.memoryPoolConfig.memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL)
      out->pool_size = m.memoryPoolConfig.pool.size;  // for IMPORTED pools the union holds a pid
  }
  return true;
}

bool convert_memory_pool_record(const CUpti_ActivityMemoryPool3& p, DecodedRecord* out) {
  *out = DecodedRecord{};
  TraceRecord& r = out->record;
  r.kind = EventKind::kPoolReserve;
  switch (p.memoryPoolOperationType) {
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
      r.bytes = p.memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL ? p.size : 0;
      break;
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
      r.bytes = 0;
      break;
    default:
      return false;
  }
  r.timestamp_ns = p.timestamp;
  r.address = p.address;
  r.seq = p.correlationId;
  r.device = static_cast<uint16_t>(p.deviceId);
  r.mem_kind = MemKind::kStreamOrdered;
  out->correlation_id = p.correlationId;
  out->pool_address = p.address;
  out->pool_size = r.bytes;
  return true;
}

bool convert_kernel_record(const CUpti_ActivityKernel10& k, DecodedRecord* out) {
  *out = DecodedRecord{};
  TraceRecord& r = out->record;
  r.kind = EventKind::kKernel;
  r.timestamp_ns = k.start;
  r.bytes = k.end > k.start ? k.end - k.start : 0;  // duration in ns
  r.seq = k.correlationId;
  r.stream = k.streamId;
  r.device = static_cast<uint16_t>(k.deviceId);
  out->correlation_id = k.correlationId;
  out->kernel_name = k.name;
  return true;
}

size_t decode_activity_buffer(const uint8_t* buf, size_t valid, RecordSink& sink, DecodeStats* stats) {
  DecodeStats local;
  DecodeStats& st = stats ? *stats : local;
  st = DecodeStats{};
  if (buf == nullptr || valid == 0) {
    st.last_result = CUPTI_ERROR_MAX_LIMIT_REACHED;
    return 0;
  }
  CUpti_Activity* rec = nullptr;
  // cuptiActivityGetNextRecord takes a non-const buffer but does not write it.
  auto* b = const_cast<uint8_t*>(buf);
  for (;;) {
    CUptiResult res = cuptiActivityGetNextRecord(b, valid, &rec);
    if (res != CUPTI_SUCCESS) {
      st.last_result = res;
      st.error = res != CUPTI_ERROR_MAX_LIMIT_REACHED;
      break;
    }
    ++st.records;
    DecodedRecord d;
    bool keep = false;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_MEMORY2:
        keep = convert_memory_record(*reinterpret_cast<const CUpti_ActivityMemory4*>(rec), &d);
        break;
      case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
        keep = convert_memory_pool_record(*reinterpret_cast<const CUpti_ActivityMemoryPool3*>(rec), &d);
        break;
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        keep = convert_kernel_record(*reinterpret_cast<const CUpti_ActivityKernel10*>(rec), &d);
        break;
      default:
        break;
    }
    if (keep) {
      ++st.kept;
      sink.on_record(d);
    } else {
      ++st.skipped;
    }
  }
  return st.kept;
}

bool PoolTracker::observe(const DecodedRecord& r, TraceRecord* out) {
  if (r.pool_address == 0 || r.pool_size == 0) return false;
  Key key{r.record.device, r.pool_address};
  auto it = sizes_.find(key);
  if (it != sizes_.end() && it->second == r.pool_size) return false;
  sizes_[key] = r.pool_size;
  *out = TraceRecord{};
  out->kind = EventKind::kPoolReserve;
  out->timestamp_ns = r.record.timestamp_ns;
  out->address = r.pool_address;
  out->bytes = r.pool_size;
  out->seq = r.record.seq;
  out->device = r.record.device;
  out->mem_kind = MemKind::kStreamOrdered;
  return true;
}

void PoolTracker::set(uint16_t device, uint64_t pool_address, uint64_t size) {
  sizes_[Key{device, pool_address}] = size;
}

}  // namespace moeprof::profiler
