// Lets small scalar helpers compile for both the host (CPU reference backend) and the device.
#pragma once
#if defined(__CUDACC__)
#define MOEPROF_HD __host__ __device__ __forceinline__
#else
#define MOEPROF_HD inline
#endif
