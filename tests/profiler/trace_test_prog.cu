// GPU test program with known allocations, traced either in-process (--inprocess PATH, with
// CuptiTracer) or by injection (`moeprof trace -- moeprof_trace_test_prog`). Prints what a correct
// trace must contain as one line "EXPECT {json}" on stdout; tests/profiler/cupti_tracer_gpu_test.cpp
// and scripts/gpu_trace_check.sh compare it with the trace.
//
//   main thread  "setup"                          cudaMalloc A   3 MiB + 512
//                tag layer.0/attn/q_proj|weights  cudaMalloc B   2 MiB
//                tag layer.0/moe/w13|weights      cudaMalloc C   1 MiB  (side channel in-process,
//                                                                        NVTX tag when injected)
//   2 threads    "worker<t>/step", own stream     cudaMallocAsync X_t (5+t) MiB + 1024(t+1),
//                                                 Y_t 256 KiB (t+1); barrier; free Y_t, X_t
//   main         kernel touch(A); free A; "phase2" cudaMalloc D 4 MiB; free B, C, D
//   main         tags uses/u_ptr, uses/u_s0, uses/u_s1, uses/u_off (activation), cudaMalloc each;
//                kernel use_args(u_ptr, {u_s0, u_s1} by value, u_off + 1000 floats, n, garbage);
//                free them. With --uses (TracerOptions::uses) the trace must hold exactly one kUse
//                per (kernel, allocation): touch -> A, use_args -> each u_* ("expected_uses").
//   device 1     "dev1" cudaMalloc E 7 MiB + 4096 (only with >= 2 GPUs)
//   graph        a captured cudaMallocAsync/cudaFreeAsync of 8 MiB, instantiated and launched
//                (graph memory, reported by the driver attribute, not by allocation records)
// Peak on device 0 = A+B+C+X0+Y0+X1+Y1 (the barrier orders every thread allocation before every
// thread free).
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "profiler/cupti_tracer.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

#define CHECK(expr)                                                                        \
  do {                                                                                     \
    cudaError_t _e = (expr);                                                               \
    if (_e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,            \
                   cudaGetErrorString(_e));                                                \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void touch(unsigned char* p, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = static_cast<unsigned char>(i);
}

// Kernel uses: a pointer, two pointers inside a by-value struct, a pointer with an offset into an
// allocation, and two non-pointer arguments (garbage points into nothing).
struct TwoPtrs {
  const float* in;
  float* out;
};
__global__ void use_args(const float* p, TwoPtrs s, float* off, int n, unsigned long long garbage) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    s.out[i] = p[i] + s.in[i] + static_cast<float>(garbage & 1u);
    off[i] = 1.0f;
  }
}

struct Barrier {
  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0, generation = 0, count;
  explicit Barrier(int n) : count(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    int gen = generation;
    if (++waiting == count) {
      waiting = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return gen != generation; });
    }
  }
};

struct Expect {
  std::string scope, name, category;
  size_t bytes;
  int device;
  bool inferred;
};

struct ExpectUse {
  std::string kernel;  // substring of the kernel name
  std::string name;    // the allocation's name ("" = unnamed)
  size_t bytes;        // the allocation's size (unique in the program)
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string inprocess_path;
  bool init_first = false, kernels = false, uses = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--inprocess") == 0 && i + 1 < argc) inprocess_path = argv[++i];
    else if (std::strcmp(argv[i], "--init-cuda-first") == 0) init_first = true;
    else if (std::strcmp(argv[i], "--kernels") == 0) kernels = true;
    else if (std::strcmp(argv[i], "--uses") == 0) uses = true;
    else {
      std::fprintf(stderr, "usage: %s [--inprocess TRACE] [--init-cuda-first] [--kernels] [--uses]\n", argv[0]);
      return 2;
    }
  }
  const bool inprocess = !inprocess_path.empty();
  if (init_first) CHECK(cudaFree(nullptr));

  std::unique_ptr<moeprof::profiler::CuptiTracer> tracer;
  if (inprocess) {
    moeprof::RunMeta meta;
    meta.name = "trace_test_prog";
    moeprof::profiler::TracerOptions opt;
    opt.kernels = kernels;
    opt.uses = uses;
    auto t = moeprof::profiler::CuptiTracer::start(inprocess_path, meta, opt);
    if (!t.is_ok()) {
      std::printf("TRACER_START_ERROR: %s\n", t.status().message().c_str());
      std::fflush(stdout);
      return 3;
    }
    tracer = std::move(t).value();
  }

  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // context
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  std::vector<Expect> expect;
  std::vector<ExpectUse> expect_uses;

  const size_t a_bytes = 3 * kMiB + 512, b_bytes = 2 * kMiB, c_bytes = 1 * kMiB, d_bytes = 4 * kMiB;
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  nvtxRangePushA("setup");
  CHECK(cudaMalloc(&a, a_bytes));
  nvtxRangePop();
  expect.push_back({"setup", "", "unknown", a_bytes, 0, true});

  nvtxRangePushA("moeprof.tensor:layer.0/attn/q_proj|weights");
  CHECK(cudaMalloc(&b, b_bytes));
  nvtxRangePop();
  expect.push_back({"layer.0/attn", "q_proj", "weights", b_bytes, 0, false});

  if (inprocess) {
    moeprof::profiler::CuptiTracer::tag_next_allocation("layer.0/moe", "w13", moeprof::Category::kWeights);
    CHECK(cudaMalloc(&c, c_bytes));
  } else {
    nvtxRangePushA("moeprof.tensor:layer.0/moe/w13|weights");
    CHECK(cudaMalloc(&c, c_bytes));
    nvtxRangePop();
  }
  expect.push_back({"layer.0/moe", "w13", "weights", c_bytes, 0, false});

  size_t thread_bytes = 0;
  Barrier barrier(2);
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    size_t x_bytes = (5 + t) * kMiB + 1024 * (t + 1), y_bytes = 256 * 1024 * (t + 1);
    thread_bytes += x_bytes + y_bytes;
    std::string scope = "worker" + std::to_string(t) + "/step";
    expect.push_back({scope, "", "unknown", x_bytes, 0, true});
    expect.push_back({scope, "", "unknown", y_bytes, 0, true});
    workers.emplace_back([t, x_bytes, y_bytes, &barrier] {
      CHECK(cudaSetDevice(0));
      cudaStream_t s;
      CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      std::string name = "worker" + std::to_string(t);
      nvtxRangePushA(name.c_str());
      nvtxRangePushA("step");
      void *x = nullptr, *y = nullptr;
      CHECK(cudaMallocAsync(&x, x_bytes, s));
      CHECK(cudaMallocAsync(&y, y_bytes, s));
      CHECK(cudaMemsetAsync(x, 1, x_bytes, s));
      CHECK(cudaStreamSynchronize(s));
      barrier.wait();
      CHECK(cudaFreeAsync(y, s));
      CHECK(cudaFreeAsync(x, s));
      CHECK(cudaStreamSynchronize(s));
      nvtxRangePop();
      nvtxRangePop();
      CHECK(cudaStreamDestroy(s));
    });
  }
  for (auto& w : workers) w.join();
  const size_t peak0 = a_bytes + b_bytes + c_bytes + thread_bytes;

  touch<<<static_cast<unsigned>((a_bytes + 255) / 256), 256>>>(static_cast<unsigned char*>(a), a_bytes);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  expect_uses.push_back({"touch", "", a_bytes});
  CHECK(cudaFree(a));
  nvtxRangePushA("phase2");
  CHECK(cudaMalloc(&d, d_bytes));
  nvtxRangePop();
  expect.push_back({"phase2", "", "unknown", d_bytes, 0, true});
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  CHECK(cudaFree(d));

  // Kernel uses: four tagged allocations (sizes unique in the program), one launch.
  {
    const char* names[4] = {"u_ptr", "u_s0", "u_s1", "u_off"};
    const size_t sizes[4] = {64 * 1024 + 16, 96 * 1024 + 32, 128 * 1024 + 48, 160 * 1024 + 64};
    float* u[4] = {};
    for (int i = 0; i < 4; ++i) {
      std::string tag = std::string("moeprof.tensor:uses/") + names[i] + "|activation";
      nvtxRangePushA(tag.c_str());
      CHECK(cudaMalloc(reinterpret_cast<void**>(&u[i]), sizes[i]));
      nvtxRangePop();
      expect.push_back({"uses", names[i], "activation", sizes[i], 0, false});
      expect_uses.push_back({"use_args", names[i], sizes[i]});
    }
    const int n = 256;  // every buffer holds 1000 + 256 floats
    use_args<<<1, n>>>(u[0], TwoPtrs{u[1], u[2]}, u[3] + 1000, n, 0x1234ull);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    for (int i = 3; i >= 0; --i) CHECK(cudaFree(u[i]));
  }

  size_t peak1 = 0;
  if (devices >= 2) {
    const size_t e_bytes = 7 * kMiB + 4096;
    CHECK(cudaSetDevice(1));
    void* e = nullptr;
    nvtxRangePushA("dev1");
    CHECK(cudaMalloc(&e, e_bytes));
    nvtxRangePop();
    CHECK(cudaFree(e));
    expect.push_back({"dev1", "", "unknown", e_bytes, 1, true});
    peak1 = e_bytes;
    CHECK(cudaSetDevice(0));
  }

  // CUDA-graph memory: a graph that allocates and frees 8 MiB inside itself.
  cudaStream_t gs;
  CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeThreadLocal));
  void* g = nullptr;
  CHECK(cudaMallocAsync(&g, 8 * kMiB, gs));
  CHECK(cudaMemsetAsync(g, 0, 8 * kMiB, gs));
  CHECK(cudaFreeAsync(g, gs));
  CHECK(cudaStreamEndCapture(gs, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, gs));
  CHECK(cudaStreamSynchronize(gs));
  unsigned long long graph_high = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &graph_high));

  // Expected values (before the tracer stops, so a failing stop still prints them).
  std::printf("EXPECT {\"pid\":%d,\"devices\":%d,\"inprocess\":%s,\"kernels\":%s,\"uses\":%s,"
              "\"peak_bytes\":{\"0\":%zu%s},\"graph_mem_high\":%llu,\"expected_uses\":[",
              static_cast<int>(getpid()), devices, inprocess ? "true" : "false", kernels ? "true" : "false",
              uses ? "true" : "false", peak0, devices >= 2 ? (",\"1\":" + std::to_string(peak1)).c_str() : "",
              graph_high);
  for (size_t i = 0; i < expect_uses.size(); ++i)
    std::printf("%s{\"kernel\":\"%s\",\"name\":\"%s\",\"bytes\":%zu}", i ? "," : "",
                json_escape(expect_uses[i].kernel).c_str(), json_escape(expect_uses[i].name).c_str(),
                expect_uses[i].bytes);
  std::printf("],\"allocs\":[");
  for (size_t i = 0; i < expect.size(); ++i) {
    const Expect& e = expect[i];
    std::printf("%s{\"scope\":\"%s\",\"name\":\"%s\",\"category\":\"%s\",\"bytes\":%zu,\"device\":%d,"
                "\"inferred\":%s}",
                i ? "," : "", json_escape(e.scope).c_str(), json_escape(e.name).c_str(), e.category.c_str(),
                e.bytes, e.device, e.inferred ? "true" : "false");
  }
  std::printf("]}\n");
  std::fflush(stdout);

  if (tracer) {
    moeprof::Status st = tracer->stop();  // graph exec still alive: graph memory is in use
    if (!st.is_ok()) {
      std::fprintf(stderr, "tracer stop: %s\n", st.message().c_str());
      return 4;
    }
    auto stats = tracer->stats();
    std::printf("TRACER_STATS allocs=%llu frees=%llu joined=%llu scoped=%llu tagged=%llu dropped=%llu\n",
                (unsigned long long)stats.allocs, (unsigned long long)stats.frees,
                (unsigned long long)stats.allocs_joined, (unsigned long long)stats.allocs_scoped,
                (unsigned long long)stats.allocs_tagged, (unsigned long long)stats.dropped_records);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(gs));
  return 0;
}
