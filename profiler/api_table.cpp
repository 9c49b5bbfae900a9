// The table of runtime/driver API callback ids (api_table.h) and one decoder per parameter struct.
// Each decoder reads its own id's struct from the CUPTI headers (a _ptsz twin has its own struct,
// of the same layout); a 32-bit v1 API (cuMemAlloc, cuMemAllocPitch, cuMemAllocHost, cuMemFree)
// reads its 32-bit fields.
#include "profiler/api_table.h"

#include <array>
#include <cstddef>

#include <cuda.h>
#include <cupti.h>  // the CBID enums and the parameter structs (generated_cuda*_meta.h)

namespace moeprof::profiler {
namespace {

// The value an allocation wrote through its out-pointer (0 when the out-pointer is null).
uint64_t written(void* const* pp) { return pp != nullptr ? reinterpret_cast<uintptr_t>(*pp) : 0; }
uint64_t written(const CUdeviceptr* pp) { return pp != nullptr ? static_cast<uint64_t>(*pp) : 0; }
uint64_t written(const CUdeviceptr_v1* pp) { return pp != nullptr ? static_cast<uint64_t>(*pp) : 0; }
uint64_t handle(const void* h) { return reinterpret_cast<uintptr_t>(h); }

// The size of a pitched allocation: the pitch the call wrote (else the requested width) x height.
template <class Size>
uint64_t pitched(const Size* pitch, uint64_t width, uint64_t height) {
  return (pitch != nullptr ? static_cast<uint64_t>(*pitch) : width) * height;
}

// ---- runtime API ------------------------------------------------------------------------------
bool cuda_malloc(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaMalloc_v3020_params*>(p);
  if (a == nullptr) return false;
  o->address = written(a->devPtr), o->bytes = a->size;
  return true;
}
bool cuda_malloc_pitch(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaMallocPitch_v3020_params*>(p);
  if (a == nullptr) return false;
  o->address = written(a->devPtr), o->bytes = pitched(a->pitch, a->width, a->height);
  return true;
}
bool cuda_malloc_3d(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaMalloc3D_v3020_params*>(p);
  if (a == nullptr) return false;
  if (a->pitchedDevPtr == nullptr) return true;  // nothing written: address and bytes stay 0
  o->address = handle(a->pitchedDevPtr->ptr);
  o->bytes = uint64_t{a->pitchedDevPtr->pitch} * a->extent.height * a->extent.depth;
  return true;
}
bool cuda_malloc_managed(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaMallocManaged_v6000_params*>(p);
  if (a == nullptr) return false;
  o->address = written(a->devPtr), o->bytes = a->size;
  return true;
}
bool cuda_malloc_host(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaMallocHost_v3020_params*>(p);
  if (a == nullptr) return false;
  o->address = written(a->ptr), o->bytes = a->size;
  return true;
}
bool cuda_host_alloc(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaHostAlloc_v3020_params*>(p);
  if (a == nullptr) return false;
  o->address = written(a->pHost), o->bytes = a->size;
  return true;
}
template <class P>  // cudaMallocAsync_v11020_params and its _ptsz twin
bool cuda_malloc_async(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = written(a->devPtr), o->bytes = a->size, o->stream = handle(a->hStream);
  return true;
}
template <class P>  // cudaMallocFromPoolAsync_v11020_params and its _ptsz twin
bool cuda_malloc_from_pool_async(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = written(a->ptr), o->bytes = a->size, o->stream = handle(a->stream), o->pool = handle(a->memPool);
  return true;
}
bool cuda_free(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaFree_v3020_params*>(p);
  if (a == nullptr) return false;
  o->address = handle(a->devPtr);
  return true;
}
bool cuda_free_host(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cudaFreeHost_v3020_params*>(p);
  if (a == nullptr) return false;
  o->address = handle(a->ptr);
  return true;
}
template <class P>  // cudaFreeAsync_v11020_params and its _ptsz twin
bool cuda_free_async(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = handle(a->devPtr), o->stream = handle(a->hStream);
  return true;
}

// ---- driver API -------------------------------------------------------------------------------
template <class P>  // cuMemAlloc_params (32-bit pointer and size), cuMemAlloc_v2_params, cuMemAllocManaged_params
bool cu_mem_alloc(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = written(a->dptr), o->bytes = a->bytesize;
  return true;
}
template <class P>  // cuMemAllocPitch_params (32-bit fields) and cuMemAllocPitch_v2_params
bool cu_mem_alloc_pitch(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = written(a->dptr), o->bytes = pitched(a->pPitch, a->WidthInBytes, a->Height);
  return true;
}
template <class P>  // cuMemAllocHost_params (32-bit size), cuMemAllocHost_v2_params, cuMemHostAlloc_params
bool cu_mem_host_alloc(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = written(a->pp), o->bytes = a->bytesize;
  return true;
}
template <class P>  // cuMemAllocAsync_params and its _ptsz twin
bool cu_mem_alloc_async(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = written(a->dptr), o->bytes = a->bytesize, o->stream = handle(a->hStream);
  return true;
}
template <class P>  // cuMemAllocFromPoolAsync_params and its _ptsz twin
bool cu_mem_alloc_from_pool_async(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = written(a->dptr), o->bytes = a->bytesize, o->stream = handle(a->hStream), o->pool = handle(a->pool);
  return true;
}
template <class P>  // cuMemFree_params (32-bit pointer) and cuMemFree_v2_params
bool cu_mem_free(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = static_cast<uint64_t>(a->dptr);
  return true;
}
bool cu_mem_free_host(const void* p, ApiArgs* o) {
  auto* a = static_cast<const cuMemFreeHost_params*>(p);
  if (a == nullptr) return false;
  o->address = handle(a->p);
  return true;
}
template <class P>  // cuMemFreeAsync_params and its _ptsz twin
bool cu_mem_free_async(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->address = static_cast<uint64_t>(a->dptr), o->stream = handle(a->hStream);
  return true;
}
template <class P>  // cuLaunchKernel_params and its _ptsz twin
bool cu_launch_kernel(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->function = a->f, o->kernel_params = a->kernelParams, o->extra = a->extra, o->stream = handle(a->hStream);
  return true;
}
template <class P>  // cuLaunchKernelEx_params and its _ptsz twin: the stream is in the launch config
bool cu_launch_kernel_ex(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->function = a->f, o->kernel_params = a->kernelParams, o->extra = a->extra;
  o->stream = a->config != nullptr ? handle(a->config->hStream) : 0;
  return true;
}
template <class P>  // cuLaunchCooperativeKernel_params and its _ptsz twin (no `extra`)
bool cu_launch_cooperative_kernel(const void* p, ApiArgs* o) {
  auto* a = static_cast<const P*>(p);
  if (a == nullptr) return false;
  o->function = a->f, o->kernel_params = a->kernelParams, o->stream = handle(a->hStream);
  return true;
}

// ---- the table --------------------------------------------------------------------------------
#define MOEPROF_RT(ID) ApiDomain::kRuntime, CUPTI_RUNTIME_TRACE_CBID_##ID, #ID
#define MOEPROF_DRV(ID) ApiDomain::kDriver, CUPTI_DRIVER_TRACE_CBID_##ID, #ID

constexpr ApiEntry kApis[] = {
    {MOEPROF_RT(cudaMalloc_v3020), ApiKind::kDeviceAlloc, cuda_malloc},
    {MOEPROF_RT(cudaMallocPitch_v3020), ApiKind::kDeviceAlloc, cuda_malloc_pitch},
    {MOEPROF_RT(cudaMalloc3D_v3020), ApiKind::kDeviceAlloc, cuda_malloc_3d},
    {MOEPROF_RT(cudaMallocManaged_v6000), ApiKind::kManagedAlloc, cuda_malloc_managed},
    {MOEPROF_RT(cudaMallocHost_v3020), ApiKind::kHostAlloc, cuda_malloc_host},
    {MOEPROF_RT(cudaHostAlloc_v3020), ApiKind::kHostAlloc, cuda_host_alloc},
    {MOEPROF_RT(cudaMallocAsync_v11020), ApiKind::kAsyncAlloc, cuda_malloc_async<cudaMallocAsync_v11020_params>},
    {MOEPROF_RT(cudaMallocAsync_ptsz_v11020), ApiKind::kAsyncAlloc,
     cuda_malloc_async<cudaMallocAsync_ptsz_v11020_params>},
    {MOEPROF_RT(cudaMallocFromPoolAsync_v11020), ApiKind::kPoolAlloc,
     cuda_malloc_from_pool_async<cudaMallocFromPoolAsync_v11020_params>},
    {MOEPROF_RT(cudaMallocFromPoolAsync_ptsz_v11020), ApiKind::kPoolAlloc,
     cuda_malloc_from_pool_async<cudaMallocFromPoolAsync_ptsz_v11020_params>},
    {MOEPROF_RT(cudaFree_v3020), ApiKind::kDeviceFree, cuda_free},
    {MOEPROF_RT(cudaFreeHost_v3020), ApiKind::kHostFree, cuda_free_host},
    {MOEPROF_RT(cudaFreeAsync_v11020), ApiKind::kAsyncFree, cuda_free_async<cudaFreeAsync_v11020_params>},
    {MOEPROF_RT(cudaFreeAsync_ptsz_v11020), ApiKind::kAsyncFree, cuda_free_async<cudaFreeAsync_ptsz_v11020_params>},

    {MOEPROF_DRV(cuMemAlloc), ApiKind::kDeviceAlloc, cu_mem_alloc<cuMemAlloc_params>},
    {MOEPROF_DRV(cuMemAlloc_v2), ApiKind::kDeviceAlloc, cu_mem_alloc<cuMemAlloc_v2_params>},
    {MOEPROF_DRV(cuMemAllocPitch), ApiKind::kDeviceAlloc, cu_mem_alloc_pitch<cuMemAllocPitch_params>},
    {MOEPROF_DRV(cuMemAllocPitch_v2), ApiKind::kDeviceAlloc, cu_mem_alloc_pitch<cuMemAllocPitch_v2_params>},
    {MOEPROF_DRV(cuMemAllocManaged), ApiKind::kManagedAlloc, cu_mem_alloc<cuMemAllocManaged_params>},
    {MOEPROF_DRV(cuMemAllocHost), ApiKind::kHostAlloc, cu_mem_host_alloc<cuMemAllocHost_params>},
    {MOEPROF_DRV(cuMemAllocHost_v2), ApiKind::kHostAlloc, cu_mem_host_alloc<cuMemAllocHost_v2_params>},
    {MOEPROF_DRV(cuMemHostAlloc), ApiKind::kHostAlloc, cu_mem_host_alloc<cuMemHostAlloc_params>},
    // The CUPTI headers define no cuMemHostAlloc_v2_params: the one cuMemHostAlloc signature
    // (void**, size_t, unsigned int) is read.
    {MOEPROF_DRV(cuMemHostAlloc_v2), ApiKind::kHostAlloc, cu_mem_host_alloc<cuMemHostAlloc_params>},
    {MOEPROF_DRV(cuMemAllocAsync), ApiKind::kAsyncAlloc, cu_mem_alloc_async<cuMemAllocAsync_params>},
    {MOEPROF_DRV(cuMemAllocAsync_ptsz), ApiKind::kAsyncAlloc, cu_mem_alloc_async<cuMemAllocAsync_ptsz_params>},
    {MOEPROF_DRV(cuMemAllocFromPoolAsync), ApiKind::kPoolAlloc,
     cu_mem_alloc_from_pool_async<cuMemAllocFromPoolAsync_params>},
    {MOEPROF_DRV(cuMemAllocFromPoolAsync_ptsz), ApiKind::kPoolAlloc,
     cu_mem_alloc_from_pool_async<cuMemAllocFromPoolAsync_ptsz_params>},
    {MOEPROF_DRV(cuMemFree), ApiKind::kDeviceFree, cu_mem_free<cuMemFree_params>},
    {MOEPROF_DRV(cuMemFree_v2), ApiKind::kDeviceFree, cu_mem_free<cuMemFree_v2_params>},
    {MOEPROF_DRV(cuMemFreeHost), ApiKind::kHostFree, cu_mem_free_host},
    {MOEPROF_DRV(cuMemFreeAsync), ApiKind::kAsyncFree, cu_mem_free_async<cuMemFreeAsync_params>},
    {MOEPROF_DRV(cuMemFreeAsync_ptsz), ApiKind::kAsyncFree, cu_mem_free_async<cuMemFreeAsync_ptsz_params>},

    {MOEPROF_DRV(cuLaunchKernel), ApiKind::kLaunch, cu_launch_kernel<cuLaunchKernel_params>},
    {MOEPROF_DRV(cuLaunchKernel_ptsz), ApiKind::kLaunch, cu_launch_kernel<cuLaunchKernel_ptsz_params>},
    {MOEPROF_DRV(cuLaunchKernelEx), ApiKind::kLaunch, cu_launch_kernel_ex<cuLaunchKernelEx_params>},
    {MOEPROF_DRV(cuLaunchKernelEx_ptsz), ApiKind::kLaunch, cu_launch_kernel_ex<cuLaunchKernelEx_ptsz_params>},
    {MOEPROF_DRV(cuLaunchCooperativeKernel), ApiKind::kLaunch,
     cu_launch_cooperative_kernel<cuLaunchCooperativeKernel_params>},
    {MOEPROF_DRV(cuLaunchCooperativeKernel_ptsz), ApiKind::kLaunch,
     cu_launch_cooperative_kernel<cuLaunchCooperativeKernel_ptsz_params>},
};

#undef MOEPROF_RT
#undef MOEPROF_DRV

constexpr size_t kRuntimeIds = CUPTI_RUNTIME_TRACE_CBID_SIZE;
constexpr size_t kDriverIds = CUPTI_DRIVER_TRACE_CBID_SIZE;

// Every id inside its domain's range, none twice, every entry with a decoder.
constexpr bool table_is_well_formed() {
  for (size_t i = 0; i < std::size(kApis); ++i) {
    const ApiEntry& e = kApis[i];
    if (e.decode == nullptr || e.name == nullptr) return false;
    if (e.cbid == 0 || e.cbid >= (e.domain == ApiDomain::kRuntime ? kRuntimeIds : kDriverIds)) return false;
    for (size_t j = 0; j < i; ++j)
      if (kApis[j].domain == e.domain && kApis[j].cbid == e.cbid) return false;
  }
  return std::size(kApis) < 0x7fff;
}
static_assert(table_is_well_formed(), "api_table: an id is out of range, listed twice or has no decoder");

// Id -> index in kApis (-1: not handled), built at compile time.
template <size_t N>
constexpr std::array<int16_t, N> make_index(ApiDomain domain) {
  std::array<int16_t, N> index{};
  index.fill(-1);
  for (size_t i = 0; i < std::size(kApis); ++i)
    if (kApis[i].domain == domain) index[kApis[i].cbid] = static_cast<int16_t>(i);
  return index;
}
constexpr std::array<int16_t, kRuntimeIds> kRuntimeIndex = make_index<kRuntimeIds>(ApiDomain::kRuntime);
constexpr std::array<int16_t, kDriverIds> kDriverIndex = make_index<kDriverIds>(ApiDomain::kDriver);

}  // namespace

std::span<const ApiEntry> api_table() { return kApis; }

const ApiEntry* find_api(ApiDomain domain, uint32_t cbid) {
  int16_t i = -1;
  if (domain == ApiDomain::kRuntime) {
    if (cbid < kRuntimeIds) i = kRuntimeIndex[cbid];
  } else {
    if (cbid < kDriverIds) i = kDriverIndex[cbid];
  }
  return i >= 0 ? &kApis[i] : nullptr;
}

}  // namespace moeprof::profiler
