// The one table of the CUDA runtime and driver API callback ids the tracer handles: for each id
// its domain, its name, what kind of call it is (allocation, release, kernel launch, ...) and the
// decoder that reads the call's CUPTI parameter struct (generated_cuda_runtime_api_meta.h /
// generated_cuda_meta.h). Enabling the callbacks, classifying a callback (attribution, the live
// map of --uses, launches) and decoding its parameters all read this table, so they cannot drift.
// Each id is tested on CPU (tests/profiler/api_table_test.cpp): a parameter struct built in
// memory, decoded, every field checked.
//
// Decoders only read the parameter struct. They do not know when the values are valid: an
// allocation's pointer exists at the successful EXIT of the call, a freed pointer is read at the
// ENTER of the free, a launch's arguments at its ENTER; the caller picks the site. The device is
// not a parameter of any of these calls: the caller takes it from the callback's context.
#pragma once

#include <cstdint>
#include <span>

namespace moeprof::profiler {

enum class ApiDomain : uint8_t { kRuntime, kDriver };  // CUPTI_CB_DOMAIN_RUNTIME_API / DRIVER_API

enum class ApiKind : uint8_t {
  kDeviceAlloc,   // synchronous device memory: cudaMalloc, cudaMallocPitch, cudaMalloc3D,
                  // cuMemAlloc, cuMemAlloc_v2, cuMemAllocPitch, cuMemAllocPitch_v2
  kManagedAlloc,  // cudaMallocManaged, cuMemAllocManaged
  kHostAlloc,     // pinned host memory: cudaMallocHost, cudaHostAlloc, cuMemAllocHost(_v2),
                  // cuMemHostAlloc(_v2)
  kAsyncAlloc,    // stream-ordered, from the device's current pool: cudaMallocAsync, cuMemAllocAsync
  kPoolAlloc,     // stream-ordered, from a given pool: cudaMallocFromPoolAsync, cuMemAllocFromPoolAsync
  kDeviceFree,    // cudaFree, cuMemFree, cuMemFree_v2
  kHostFree,      // cudaFreeHost, cuMemFreeHost
  kAsyncFree,     // cudaFreeAsync, cuMemFreeAsync
  kLaunch,        // cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel (and _ptsz)
};

// Allocation kinds consume a pending tag and carry a scope (attribution); release kinds carry the
// thread only.
constexpr bool is_allocation(ApiKind k) {
  return k == ApiKind::kDeviceAlloc || k == ApiKind::kManagedAlloc || k == ApiKind::kHostAlloc ||
         k == ApiKind::kAsyncAlloc || k == ApiKind::kPoolAlloc;
}
constexpr bool is_release(ApiKind k) {
  return k == ApiKind::kDeviceFree || k == ApiKind::kHostFree || k == ApiKind::kAsyncFree;
}
// Device memory (what the live-allocation map of TracerOptions::uses keeps): every allocation and
// release kind except pinned host memory.
constexpr bool is_device_memory(ApiKind k) {
  return (is_allocation(k) || is_release(k)) && k != ApiKind::kHostAlloc && k != ApiKind::kHostFree;
}

// What a decoder reads from a parameter struct. Fields a call does not have stay 0 / nullptr.
struct ApiArgs {
  uint64_t address = 0;  // allocations: the pointer the call wrote (0 if the out-pointer is null);
                         // releases: the pointer freed
  uint64_t bytes = 0;    // allocations: the size (pitch x height [x depth] for pitched ones)
  uint64_t stream = 0;   // the stream handle (async allocations and frees, launches; 0 otherwise)
  uint64_t pool = 0;     // the pool handle (kPoolAlloc)
  const void* function = nullptr;  // launches: the CUfunction or CUkernel
  void** kernel_params = nullptr;  // launches: kernelParams
  void** extra = nullptr;          // launches: extra (cuLaunchCooperativeKernel has none)
};

// Reads `params` (the callback's functionParams). False when params is null.
using ApiDecoder = bool (*)(const void* params, ApiArgs* out);

struct ApiEntry {
  ApiDomain domain;
  uint32_t cbid;     // CUpti_runtime_api_trace_cbid / CUpti_driver_api_trace_cbid
  const char* name;  // the CUPTI id's suffix, e.g. "cuMemAlloc_v2"
  ApiKind kind;
  ApiDecoder decode;
};

// Every id, runtime ones first (the table's order). Ids are unique per domain (checked at compile
// time).
std::span<const ApiEntry> api_table();
// The entry for an id, or nullptr when the tracer does not handle it. Constant time.
const ApiEntry* find_api(ApiDomain domain, uint32_t cbid);

}  // namespace moeprof::profiler
