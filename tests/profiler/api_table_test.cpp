// The table of runtime/driver API callback ids (profiler/api_table.h), CPU only: one test per id
// (its CUPTI parameter struct built in memory, decoded, every field checked), a check that every
// id of the table has such a test, and the classification pinned id by id.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include <cuda.h>
#include <cupti.h>

#include "profiler/api_table.h"

using namespace moeprof::profiler;

namespace {

// The ids that have a decode test below (registered before main runs).
std::set<std::pair<ApiDomain, uint32_t>>& tested_ids() {
  static std::set<std::pair<ApiDomain, uint32_t>> ids;
  return ids;
}
struct TestedId {
  TestedId(ApiDomain d, uint32_t cbid) { tested_ids().insert({d, cbid}); }
};

#define MOEPROF_CAT2(a, b) a##b
#define MOEPROF_CAT(a, b) MOEPROF_CAT2(a, b)
#define RUNTIME_ID_TEST(ID)                                                                             \
  static const TestedId MOEPROF_CAT(tested_, __LINE__){ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_##ID}; \
  TEST_CASE("api table decodes runtime " #ID, "[profiler][api]")
#define DRIVER_ID_TEST(ID)                                                                             \
  static const TestedId MOEPROF_CAT(tested_, __LINE__){ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_##ID}; \
  TEST_CASE("api table decodes driver " #ID, "[profiler][api]")

// Values no decoder could produce by accident: pointers and sizes above 4 GiB for 64-bit APIs,
// 32-bit ones for the v1 APIs.
constexpr uint64_t kPtr = 0x7f12'3456'7800ull;
constexpr uint64_t kBytes = 0x1'2345'6789ull;
constexpr uint32_t kPtr32 = 0xdead'be00u;
constexpr uint32_t kBytes32 = 0x1234'5678u;
constexpr uint64_t kStream = 0x5a5a'0000ull;
constexpr uint64_t kPool = 0x9900'1100ull;

template <class T>
T handle(uint64_t v) {
  return reinterpret_cast<T>(static_cast<uintptr_t>(v));
}

// Looks the id up, checks its kind and name, decodes `params` (and a null struct: false).
ApiArgs decode(ApiDomain domain, uint32_t cbid, const char* name, ApiKind kind, const void* params) {
  const ApiEntry* e = find_api(domain, cbid);
  REQUIRE(e != nullptr);
  CHECK(e->domain == domain);
  CHECK(e->cbid == cbid);
  CHECK(std::string(e->name) == name);
  CHECK(e->kind == kind);
  REQUIRE(e->decode != nullptr);
  ApiArgs none;
  CHECK_FALSE(e->decode(nullptr, &none));
  ApiArgs a;
  REQUIRE(e->decode(params, &a));
  return a;
}
ApiArgs decode_runtime(uint32_t cbid, const char* name, ApiKind kind, const void* params) {
  return decode(ApiDomain::kRuntime, cbid, name, kind, params);
}
ApiArgs decode_driver(uint32_t cbid, const char* name, ApiKind kind, const void* params) {
  return decode(ApiDomain::kDriver, cbid, name, kind, params);
}

// Every field of `a` against the expected values (launch fields must stay empty unless given).
void check_args(const ApiArgs& a, uint64_t address, uint64_t bytes, uint64_t stream = 0, uint64_t pool = 0) {
  CHECK(a.address == address);
  CHECK(a.bytes == bytes);
  CHECK(a.stream == stream);
  CHECK(a.pool == pool);
  CHECK(a.function == nullptr);
  CHECK(a.kernel_params == nullptr);
  CHECK(a.extra == nullptr);
}

}  // namespace

// ---- runtime API --------------------------------------------------------------------------------

RUNTIME_ID_TEST(cudaMalloc_v3020) {
  void* out = handle<void*>(kPtr);
  cudaMalloc_v3020_params p{&out, kBytes};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc_v3020", ApiKind::kDeviceAlloc, &p),
             kPtr, kBytes);
  p.devPtr = nullptr;  // no out-pointer: no address
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc_v3020", ApiKind::kDeviceAlloc, &p),
             0, kBytes);
}

RUNTIME_ID_TEST(cudaMallocPitch_v3020) {
  void* out = handle<void*>(kPtr);
  size_t pitch = 0x1200;
  cudaMallocPitch_v3020_params p{&out, &pitch, 0x1100, 0x345};
  const auto id = CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020;
  check_args(decode_runtime(id, "cudaMallocPitch_v3020", ApiKind::kDeviceAlloc, &p), kPtr, 0x1200ull * 0x345);
  p.pitch = nullptr;  // no pitch written: the requested width
  check_args(decode_runtime(id, "cudaMallocPitch_v3020", ApiKind::kDeviceAlloc, &p), kPtr, 0x1100ull * 0x345);
}

RUNTIME_ID_TEST(cudaMalloc3D_v3020) {
  cudaPitchedPtr pp{};
  pp.ptr = handle<void*>(kPtr);
  pp.pitch = 0x2400;
  pp.xsize = 0x2300;
  pp.ysize = 0x31;
  cudaMalloc3D_v3020_params p{&pp, cudaExtent{0x2300, 0x31, 0x7}};
  const auto id = CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020;
  check_args(decode_runtime(id, "cudaMalloc3D_v3020", ApiKind::kDeviceAlloc, &p), kPtr, 0x2400ull * 0x31 * 0x7);
  p.pitchedDevPtr = nullptr;
  check_args(decode_runtime(id, "cudaMalloc3D_v3020", ApiKind::kDeviceAlloc, &p), 0, 0);
}

RUNTIME_ID_TEST(cudaMallocManaged_v6000) {
  void* out = handle<void*>(kPtr);
  cudaMallocManaged_v6000_params p{&out, kBytes, cudaMemAttachGlobal};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, "cudaMallocManaged_v6000",
                            ApiKind::kManagedAlloc, &p),
             kPtr, kBytes);
}

RUNTIME_ID_TEST(cudaMallocHost_v3020) {
  void* out = handle<void*>(kPtr);
  cudaMallocHost_v3020_params p{&out, kBytes};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, "cudaMallocHost_v3020", ApiKind::kHostAlloc, &p),
             kPtr, kBytes);
}

RUNTIME_ID_TEST(cudaHostAlloc_v3020) {
  void* out = handle<void*>(kPtr);
  cudaHostAlloc_v3020_params p{&out, kBytes, cudaHostAllocPortable};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, "cudaHostAlloc_v3020", ApiKind::kHostAlloc, &p),
             kPtr, kBytes);
}

RUNTIME_ID_TEST(cudaMallocAsync_v11020) {
  void* out = handle<void*>(kPtr);
  cudaMallocAsync_v11020_params p{&out, kBytes, handle<cudaStream_t>(kStream)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, "cudaMallocAsync_v11020",
                            ApiKind::kAsyncAlloc, &p),
             kPtr, kBytes, kStream);
}

RUNTIME_ID_TEST(cudaMallocAsync_ptsz_v11020) {
  void* out = handle<void*>(kPtr);
  cudaMallocAsync_ptsz_v11020_params p{&out, kBytes, handle<cudaStream_t>(kStream)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020, "cudaMallocAsync_ptsz_v11020",
                            ApiKind::kAsyncAlloc, &p),
             kPtr, kBytes, kStream);
}

RUNTIME_ID_TEST(cudaMallocFromPoolAsync_v11020) {
  void* out = handle<void*>(kPtr);
  cudaMallocFromPoolAsync_v11020_params p{&out, kBytes, handle<cudaMemPool_t>(kPool), handle<cudaStream_t>(kStream)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020, "cudaMallocFromPoolAsync_v11020",
                            ApiKind::kPoolAlloc, &p),
             kPtr, kBytes, kStream, kPool);
}

RUNTIME_ID_TEST(cudaMallocFromPoolAsync_ptsz_v11020) {
  void* out = handle<void*>(kPtr);
  cudaMallocFromPoolAsync_ptsz_v11020_params p{&out, kBytes, handle<cudaMemPool_t>(kPool),
                                               handle<cudaStream_t>(kStream)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
                            "cudaMallocFromPoolAsync_ptsz_v11020", ApiKind::kPoolAlloc, &p),
             kPtr, kBytes, kStream, kPool);
}

RUNTIME_ID_TEST(cudaFree_v3020) {
  cudaFree_v3020_params p{handle<void*>(kPtr)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, "cudaFree_v3020", ApiKind::kDeviceFree, &p), kPtr, 0);
}

RUNTIME_ID_TEST(cudaFreeHost_v3020) {
  cudaFreeHost_v3020_params p{handle<void*>(kPtr)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, "cudaFreeHost_v3020", ApiKind::kHostFree, &p),
             kPtr, 0);
}

RUNTIME_ID_TEST(cudaFreeAsync_v11020) {
  cudaFreeAsync_v11020_params p{handle<void*>(kPtr), handle<cudaStream_t>(kStream)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, "cudaFreeAsync_v11020", ApiKind::kAsyncFree, &p),
             kPtr, 0, kStream);
}

RUNTIME_ID_TEST(cudaFreeAsync_ptsz_v11020) {
  cudaFreeAsync_ptsz_v11020_params p{handle<void*>(kPtr), handle<cudaStream_t>(kStream)};
  check_args(decode_runtime(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020, "cudaFreeAsync_ptsz_v11020",
                            ApiKind::kAsyncFree, &p),
             kPtr, 0, kStream);
}

// ---- driver API: allocations ---------------------------------------------------------------------

DRIVER_ID_TEST(cuMemAlloc) {  // v1: a 32-bit pointer and a 32-bit size
  CUdeviceptr_v1 out = kPtr32;
  cuMemAlloc_params p{&out, kBytes32};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc, "cuMemAlloc", ApiKind::kDeviceAlloc, &p), kPtr32, kBytes32);
  p.dptr = nullptr;
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc, "cuMemAlloc", ApiKind::kDeviceAlloc, &p), 0, kBytes32);
}

DRIVER_ID_TEST(cuMemAlloc_v2) {
  CUdeviceptr out = kPtr;
  cuMemAlloc_v2_params p{&out, kBytes};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", ApiKind::kDeviceAlloc, &p), kPtr, kBytes);
  p.dptr = nullptr;
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", ApiKind::kDeviceAlloc, &p), 0, kBytes);
}

DRIVER_ID_TEST(cuMemAllocPitch) {  // v1: 32-bit pointer, pitch, width and height
  CUdeviceptr_v1 out = kPtr32;
  unsigned int pitch = 0x1200;
  cuMemAllocPitch_params p{&out, &pitch, 0x1100, 0x345, 4};
  const auto id = CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch;
  check_args(decode_driver(id, "cuMemAllocPitch", ApiKind::kDeviceAlloc, &p), kPtr32, 0x1200ull * 0x345);
  p.pPitch = nullptr;
  check_args(decode_driver(id, "cuMemAllocPitch", ApiKind::kDeviceAlloc, &p), kPtr32, 0x1100ull * 0x345);
  // The product is computed in 64 bits: 0x10000 x 0x10000 does not wrap to 0.
  pitch = 0x10000;
  p.pPitch = &pitch;
  p.Height = 0x10000;
  check_args(decode_driver(id, "cuMemAllocPitch", ApiKind::kDeviceAlloc, &p), kPtr32, 0x1'0000'0000ull);
}

DRIVER_ID_TEST(cuMemAllocPitch_v2) {
  CUdeviceptr out = kPtr;
  size_t pitch = 0x1200;
  cuMemAllocPitch_v2_params p{&out, &pitch, 0x1100, 0x345, 4};
  const auto id = CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2;
  check_args(decode_driver(id, "cuMemAllocPitch_v2", ApiKind::kDeviceAlloc, &p), kPtr, 0x1200ull * 0x345);
  p.pPitch = nullptr;
  check_args(decode_driver(id, "cuMemAllocPitch_v2", ApiKind::kDeviceAlloc, &p), kPtr, 0x1100ull * 0x345);
}

DRIVER_ID_TEST(cuMemAllocManaged) {
  CUdeviceptr out = kPtr;
  cuMemAllocManaged_params p{&out, kBytes, CU_MEM_ATTACH_GLOBAL};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, "cuMemAllocManaged", ApiKind::kManagedAlloc, &p),
             kPtr, kBytes);
}

DRIVER_ID_TEST(cuMemAllocHost) {  // v1: a 32-bit size
  void* out = handle<void*>(kPtr);
  cuMemAllocHost_params p{&out, kBytes32};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost, "cuMemAllocHost", ApiKind::kHostAlloc, &p), kPtr,
             kBytes32);
}

DRIVER_ID_TEST(cuMemAllocHost_v2) {
  void* out = handle<void*>(kPtr);
  cuMemAllocHost_v2_params p{&out, kBytes};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, "cuMemAllocHost_v2", ApiKind::kHostAlloc, &p), kPtr,
             kBytes);
}

DRIVER_ID_TEST(cuMemHostAlloc) {
  void* out = handle<void*>(kPtr);
  cuMemHostAlloc_params p{&out, kBytes, CU_MEMHOSTALLOC_PORTABLE};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, "cuMemHostAlloc", ApiKind::kHostAlloc, &p), kPtr,
             kBytes);
}

DRIVER_ID_TEST(cuMemHostAlloc_v2) {  // no struct of its own in the headers: cuMemHostAlloc's layout
  void* out = handle<void*>(kPtr);
  cuMemHostAlloc_params p{&out, kBytes, CU_MEMHOSTALLOC_PORTABLE};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc_v2, "cuMemHostAlloc_v2", ApiKind::kHostAlloc, &p), kPtr,
             kBytes);
}

DRIVER_ID_TEST(cuMemAllocAsync) {
  CUdeviceptr out = kPtr;
  cuMemAllocAsync_params p{&out, kBytes, handle<CUstream>(kStream)};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, "cuMemAllocAsync", ApiKind::kAsyncAlloc, &p), kPtr,
             kBytes, kStream);
}

DRIVER_ID_TEST(cuMemAllocAsync_ptsz) {
  CUdeviceptr out = kPtr;
  cuMemAllocAsync_ptsz_params p{&out, kBytes, handle<CUstream>(kStream)};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, "cuMemAllocAsync_ptsz", ApiKind::kAsyncAlloc, &p),
             kPtr, kBytes, kStream);
}

DRIVER_ID_TEST(cuMemAllocFromPoolAsync) {
  CUdeviceptr out = kPtr;
  cuMemAllocFromPoolAsync_params p{&out, kBytes, handle<CUmemoryPool>(kPool), handle<CUstream>(kStream)};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync",
                           ApiKind::kPoolAlloc, &p),
             kPtr, kBytes, kStream, kPool);
}

DRIVER_ID_TEST(cuMemAllocFromPoolAsync_ptsz) {
  CUdeviceptr out = kPtr;
  cuMemAllocFromPoolAsync_ptsz_params p{&out, kBytes, handle<CUmemoryPool>(kPool), handle<CUstream>(kStream)};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync_ptsz",
                           ApiKind::kPoolAlloc, &p),
             kPtr, kBytes, kStream, kPool);
}

// ---- driver API: releases ------------------------------------------------------------------------

DRIVER_ID_TEST(cuMemFree) {  // v1: a 32-bit pointer
  cuMemFree_params p{kPtr32};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemFree, "cuMemFree", ApiKind::kDeviceFree, &p), kPtr32, 0);
}

DRIVER_ID_TEST(cuMemFree_v2) {
  cuMemFree_v2_params p{kPtr};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", ApiKind::kDeviceFree, &p), kPtr, 0);
}

DRIVER_ID_TEST(cuMemFreeHost) {
  cuMemFreeHost_params p{handle<void*>(kPtr)};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, "cuMemFreeHost", ApiKind::kHostFree, &p), kPtr, 0);
}

DRIVER_ID_TEST(cuMemFreeAsync) {
  cuMemFreeAsync_params p{kPtr, handle<CUstream>(kStream)};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, "cuMemFreeAsync", ApiKind::kAsyncFree, &p), kPtr, 0,
             kStream);
}

DRIVER_ID_TEST(cuMemFreeAsync_ptsz) {
  cuMemFreeAsync_ptsz_params p{kPtr, handle<CUstream>(kStream)};
  check_args(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, "cuMemFreeAsync_ptsz", ApiKind::kAsyncFree, &p),
             kPtr, 0, kStream);
}

// ---- driver API: kernel launches -----------------------------------------------------------------

namespace {
void* g_args[2] = {handle<void*>(0x11), handle<void*>(0x22)};
void* g_extra[1] = {nullptr};
const CUfunction kFunction = handle<CUfunction>(0xf00d'0000ull);

void check_launch(const ApiArgs& a, uint64_t stream, bool has_extra) {
  CHECK(a.function == static_cast<const void*>(kFunction));
  CHECK(a.kernel_params == g_args);
  CHECK(a.extra == (has_extra ? g_extra : nullptr));
  CHECK(a.stream == stream);
  CHECK(a.address == 0);
  CHECK(a.bytes == 0);
  CHECK(a.pool == 0);
}

template <class P>
P launch_params() {
  P p{};
  p.f = kFunction;
  p.gridDimX = 7;
  p.blockDimX = 128;
  p.hStream = handle<CUstream>(kStream);
  p.kernelParams = g_args;
  return p;
}
}  // namespace

DRIVER_ID_TEST(cuLaunchKernel) {
  auto p = launch_params<cuLaunchKernel_params>();
  p.extra = g_extra;
  check_launch(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel", ApiKind::kLaunch, &p), kStream, true);
}

DRIVER_ID_TEST(cuLaunchKernel_ptsz) {
  auto p = launch_params<cuLaunchKernel_ptsz_params>();
  p.extra = g_extra;
  check_launch(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, "cuLaunchKernel_ptsz", ApiKind::kLaunch, &p),
               kStream, true);
}

DRIVER_ID_TEST(cuLaunchKernelEx) {
  CUlaunchConfig config{};
  config.hStream = handle<CUstream>(kStream);
  cuLaunchKernelEx_params p{&config, kFunction, g_args, g_extra};
  const auto id = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx;
  check_launch(decode_driver(id, "cuLaunchKernelEx", ApiKind::kLaunch, &p), kStream, true);
  p.config = nullptr;  // no config: no stream
  check_launch(decode_driver(id, "cuLaunchKernelEx", ApiKind::kLaunch, &p), 0, true);
}

DRIVER_ID_TEST(cuLaunchKernelEx_ptsz) {
  CUlaunchConfig config{};
  config.hStream = handle<CUstream>(kStream);
  cuLaunchKernelEx_ptsz_params p{&config, kFunction, g_args, g_extra};
  check_launch(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, "cuLaunchKernelEx_ptsz", ApiKind::kLaunch, &p),
               kStream, true);
}

DRIVER_ID_TEST(cuLaunchCooperativeKernel) {  // no `extra`
  auto p = launch_params<cuLaunchCooperativeKernel_params>();
  check_launch(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel",
                             ApiKind::kLaunch, &p),
               kStream, false);
}

DRIVER_ID_TEST(cuLaunchCooperativeKernel_ptsz) {
  auto p = launch_params<cuLaunchCooperativeKernel_ptsz_params>();
  check_launch(decode_driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel_ptsz",
                             ApiKind::kLaunch, &p),
               kStream, false);
}

// ---- the table as a whole ------------------------------------------------------------------------

TEST_CASE("every id of the api table has a decoder and a decode test", "[profiler][api]") {
  const auto table = api_table();
  REQUIRE(!table.empty());
  std::set<std::pair<ApiDomain, uint32_t>> in_table;
  for (const ApiEntry& e : table) {
    INFO(e.name);
    CHECK(e.decode != nullptr);
    CHECK(find_api(e.domain, e.cbid) == &e);
    CHECK(in_table.insert({e.domain, e.cbid}).second);  // listed once
    CHECK(tested_ids().count({e.domain, e.cbid}) == 1);  // a RUNTIME_ID_TEST / DRIVER_ID_TEST above
    ApiArgs a;
    CHECK_FALSE(e.decode(nullptr, &a));
  }
  CHECK(tested_ids() == in_table);  // and no test of an id the table lacks
}

TEST_CASE("api table lookups miss ids the tracer does not handle", "[profiler][api]") {
  CHECK(find_api(ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020) == nullptr);
  CHECK(find_api(ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemcpy) == nullptr);
  CHECK(find_api(ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemCreate) == nullptr);  // VMM: not traced
  CHECK(find_api(ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_INVALID) == nullptr);
  CHECK(find_api(ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_INVALID) == nullptr);
  CHECK(find_api(ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_SIZE) == nullptr);
  CHECK(find_api(ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_SIZE) == nullptr);
  CHECK(find_api(ApiDomain::kDriver, 0xffff'ffffu) == nullptr);
  // The domains are apart: a driver id's number in the runtime domain is not that driver call.
  const ApiEntry* e = find_api(ApiDomain::kRuntime, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
  CHECK((e == nullptr || e->domain == ApiDomain::kRuntime));
}

TEST_CASE("api table classification: allocations, releases, device memory, launches", "[profiler][api]") {
  // The ids the tracer handled before the table, with the role each had: allocation (1) or
  // release (2) for attribution, and whether the live map of uses tracked it. cuMemAlloc,
  // cuMemAllocPitch and cuMemFree (v1) were classified but never decoded; the table decodes them.
  struct Expect {
    ApiDomain domain;
    uint32_t cbid;
    int role;  // 1 allocation, 2 release, 3 launch
    bool device;
  };
  const Expect expect[] = {
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, 1, false},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, 1, false},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020, 1, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, 2, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, 2, false},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, 2, true},
      {ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020, 2, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost, 1, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, 1, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, 1, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc_v2, 1, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, 1, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFree, 2, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, 2, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, 2, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, 2, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, 2, true},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 3, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, 3, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, 3, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, 3, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, 3, false},
      {ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, 3, false},
  };
  CHECK(api_table().size() == std::size(expect));
  for (const Expect& x : expect) {
    const ApiEntry* e = find_api(x.domain, x.cbid);
    REQUIRE(e != nullptr);
    INFO(e->name);
    CHECK(is_allocation(e->kind) == (x.role == 1));
    CHECK(is_release(e->kind) == (x.role == 2));
    CHECK((e->kind == ApiKind::kLaunch) == (x.role == 3));
    CHECK(is_device_memory(e->kind) == x.device);
  }
}
