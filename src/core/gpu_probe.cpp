#include "core/gpu_probe.h"

#include <dlfcn.h>

namespace moeprof {

std::vector<GpuInfo> GpuProbe::usable(int min_major) const {
  std::vector<GpuInfo> out;
  for (const GpuInfo& g : devices)
    if (g.cc_major >= min_major) out.push_back(g);
  return out;
}

GpuProbe probe_gpus() {
  GpuProbe p;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    p.problem = "no CUDA driver (libcuda.so.1 not found)";
    return p;
  }
  // Driver API entry points by name; CUresult is an int, CUdevice an int.
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  using AttrFn = int (*)(int*, int, int);
  using MemFn = int (*)(size_t*, int);
  auto init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(h, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(dlsym(h, "cuDeviceGet"));
  auto name = reinterpret_cast<NameFn>(dlsym(h, "cuDeviceGetName"));
  auto attr = reinterpret_cast<AttrFn>(dlsym(h, "cuDeviceGetAttribute"));
  auto mem = reinterpret_cast<MemFn>(dlsym(h, "cuDeviceTotalMem_v2"));
  if (!init || !count || !get || !name || !attr || !mem) {
    p.problem = "the CUDA driver lacks the device query entry points";
    return p;  // the library stays loaded: unloading a driver is not worth the risk
  }
  if (int rc = init(0); rc != 0) {
    p.problem = "cuInit failed with CUDA error " + std::to_string(rc) + (rc == 100 ? " (no CUDA-capable device)" : "");
    return p;
  }
  int n = 0;
  if (int rc = count(&n); rc != 0 || n == 0) {
    p.problem = rc != 0 ? "cuDeviceGetCount failed with CUDA error " + std::to_string(rc) : "the CUDA driver lists no device";
    return p;
  }
  constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
  for (int i = 0; i < n; ++i) {
    int dev = 0;
    if (get(&dev, i) != 0) continue;
    GpuInfo g;
    g.index = i;
    char buf[256] = {0};
    if (name(buf, sizeof(buf) - 1, dev) == 0) g.name = buf;
    attr(&g.cc_major, kMajor, dev);
    attr(&g.cc_minor, kMinor, dev);
    size_t bytes = 0;
    if (mem(&bytes, dev) == 0) g.memory_bytes = bytes;
    p.devices.push_back(g);
  }
  if (p.usable().empty())
    p.problem = p.devices.empty() ? "no device could be queried"
                                  : "no device of compute capability 9.0 or newer (moeprof's kernels are built for sm_90)";
  return p;
}

}  // namespace moeprof
