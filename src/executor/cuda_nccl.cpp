#include "executor/cuda_nccl.h"

#include <dlfcn.h>

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "executor/cuda_check.h"
#include "executor/cuda_dl.h"

namespace moeprof {
namespace {

// The few NCCL types moeprof needs, declared here so that no nccl.h is needed to build. Values
// as in nccl.h (stable since NCCL 2.10); checked against it when the header is there.
using NcclResult = int;      // ncclResult_t
using NcclComm = void*;      // ncclComm_t (pointer to an opaque struct)
constexpr NcclResult kNcclSuccess = 0;
constexpr int kNcclSum = 0;        // ncclSum
constexpr int kNcclFloat32 = 7;    // ncclFloat32
constexpr int kNcclBfloat16 = 9;   // ncclBfloat16
constexpr int kNcclUint8 = 1;      // ncclUint8
constexpr int kNcclWinCollSymmetric = 1;  // NCCL_WIN_COLL_SYMMETRIC
// ncclUniqueId is passed by value: a struct of 128 chars.
struct NcclUniqueId128 {
  char internal[128];
};

// NVTX range around an NCCL call: a CUPTI trace of the process attributes the driver allocations
// NCCL makes inside it to scope "nccl", name `what`, category communication.
struct NcclRange {
  explicit NcclRange(const char* what) {
    std::string r = std::string("moeprof.tensor:nccl/") + what + "|communication";
    nvtxRangePushA(r.c_str());
  }
  ~NcclRange() { nvtxRangePop(); }
};

}  // namespace
}  // namespace moeprof

#if __has_include(<nccl.h>)
#include <nccl.h>
static_assert(static_cast<int>(ncclSuccess) == moeprof::kNcclSuccess);
static_assert(static_cast<int>(ncclSum) == moeprof::kNcclSum);
static_assert(static_cast<int>(ncclFloat32) == moeprof::kNcclFloat32);
static_assert(static_cast<int>(ncclBfloat16) == moeprof::kNcclBfloat16);
static_assert(static_cast<int>(ncclUint8) == moeprof::kNcclUint8);
static_assert(sizeof(ncclComm_t) == sizeof(void*));
static_assert(sizeof(ncclUniqueId) == 128);
static_assert(NCCL_WIN_COLL_SYMMETRIC == 1);
#endif

namespace moeprof {
namespace {

struct NcclApi {
  NcclResult (*get_version)(int*) = nullptr;
  NcclResult (*comm_init_all)(NcclComm*, int, const int*) = nullptr;
  NcclResult (*comm_destroy)(NcclComm) = nullptr;
  NcclResult (*comm_abort)(NcclComm) = nullptr;
  NcclResult (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, void*) = nullptr;
  // Point-to-point (expert parallelism's all-to-all and all-gather of rows, NCCL >= 2.7).
  NcclResult (*send)(const void*, size_t, int, int, NcclComm, void*) = nullptr;
  NcclResult (*recv)(void*, size_t, int, int, NcclComm, void*) = nullptr;
  NcclResult (*group_start)() = nullptr;
  NcclResult (*group_end)() = nullptr;
  const char* (*get_error_string)(NcclResult) = nullptr;
  NcclResult (*get_unique_id)(void*) = nullptr;                       // ncclUniqueId*
  NcclResult (*comm_init_rank)(NcclComm*, int, NcclUniqueId128, int) = nullptr;
  // Since NCCL 2.27 (symmetric memory); optional: --symm-mem on needs them.
  NcclResult (*mem_alloc)(void**, size_t) = nullptr;
  NcclResult (*mem_free)(void*) = nullptr;
  NcclResult (*window_register)(NcclComm, void*, size_t, void**, int) = nullptr;
  NcclResult (*window_deregister)(NcclComm, void*) = nullptr;
  int version = 0;
};

std::mutex g_load_mu;
NcclApi g_api;
bool g_loaded = false;
std::string g_load_error;

// Guards against using a communicator while (or after) it is aborted: all_reduce holds it shared,
// abort() exclusively.
std::shared_mutex g_comm_mu;
std::unordered_set<void*> g_aborted;

using cuda_detail::resolve;

}  // namespace

std::string nccl_result_string(int result) {
  const char* s = g_api.get_error_string ? g_api.get_error_string(result) : nullptr;
  return "ncclResult " + std::to_string(result) + (s ? std::string(" (") + s + ")" : std::string());
}

Status nccl_load() {
  std::lock_guard<std::mutex> lock(g_load_mu);
  if (g_loaded) return Status::ok();
  if (!g_load_error.empty()) return Status::run_failure(g_load_error);
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    g_load_error = std::string("cannot load libnccl.so.2 (") + (e ? e : "unknown dlopen error") + ")";
    return Status::run_failure(g_load_error);
  }
  NcclApi api;
  std::string missing;
  const bool ok = resolve(lib, "ncclGetVersion", &api.get_version, &missing) &&
                  resolve(lib, "ncclCommInitAll", &api.comm_init_all, &missing) &&
                  resolve(lib, "ncclCommDestroy", &api.comm_destroy, &missing) &&
                  resolve(lib, "ncclCommAbort", &api.comm_abort, &missing) &&
                  resolve(lib, "ncclAllReduce", &api.all_reduce, &missing) &&
                  resolve(lib, "ncclSend", &api.send, &missing) && resolve(lib, "ncclRecv", &api.recv, &missing) &&
                  resolve(lib, "ncclGroupStart", &api.group_start, &missing) &&
                  resolve(lib, "ncclGroupEnd", &api.group_end, &missing) &&
                  resolve(lib, "ncclGetErrorString", &api.get_error_string, &missing);
  const bool ok_rank = ok && resolve(lib, "ncclGetUniqueId", &api.get_unique_id, &missing) &&
                       resolve(lib, "ncclCommInitRank", &api.comm_init_rank, &missing);
  if (ok && !ok_rank) {
    dlclose(lib);
    g_load_error = "cannot load libnccl.so.2 (missing symbol " + missing + ")";
    return Status::run_failure(g_load_error);
  }
  if (ok) {
    std::string ignored;
    const bool symm = resolve(lib, "ncclMemAlloc", &api.mem_alloc, &ignored) && resolve(lib, "ncclMemFree", &api.mem_free, &ignored) &&
                      resolve(lib, "ncclCommWindowRegister", &api.window_register, &ignored) &&
                      resolve(lib, "ncclCommWindowDeregister", &api.window_deregister, &ignored);
    if (!symm) api.mem_alloc = nullptr;
  }
  if (!ok) {
    dlclose(lib);
    g_load_error = "cannot load libnccl.so.2 (missing symbol " + missing + ")";
    return Status::run_failure(g_load_error);
  }
  if (api.get_version(&api.version) != kNcclSuccess) api.version = 0;
  g_api = api;  // the library stays loaded for the life of the process
  g_loaded = true;
  return Status::ok();
}

std::string nccl_version() {
  std::lock_guard<std::mutex> lock(g_load_mu);
  if (!g_loaded || g_api.version <= 0) return "";
  const int v = g_api.version;  // major*10000 + minor*100 + patch since NCCL 2.9
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

Result<std::unique_ptr<NcclCommunicators>> NcclCommunicators::create(const std::vector<int>& devices) {
  if (devices.empty()) return Status::bad_input("NCCL: no devices");
  // Never NVLink multicast (NVLS): NCCL reads its environment at its first initialization.
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::strcmp(nvls, "0") != 0) ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  MOEPROF_RETURN_IF_ERROR(nccl_load());
  std::unique_ptr<NcclCommunicators> c(new NcclCommunicators());
  std::vector<NcclComm> comms(devices.size(), nullptr);
  const int n = static_cast<int>(devices.size());
  {
    NcclRange range("comm_init");
    MOEPROF_NCCL_CHECK("init over " + std::to_string(n) + " devices", g_api.comm_init_all(comms.data(), n, devices.data()));
  }
  c->comms_.assign(comms.begin(), comms.end());
  return c;
}

Result<NcclUniqueId> nccl_unique_id() {
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::strcmp(nvls, "0") != 0) ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  MOEPROF_RETURN_IF_ERROR(nccl_load());
  NcclUniqueId id{};
  MOEPROF_NCCL_CHECK("unique id", g_api.get_unique_id(id.data()));
  return id;
}

Result<std::unique_ptr<NcclCommunicators>> NcclCommunicators::create_rank(const NcclUniqueId& id, int world, int rank) {
  if (world < 1 || rank < 0 || rank >= world)
    return Status::bad_input("NCCL: rank " + std::to_string(rank) + " of " + std::to_string(world));
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::strcmp(nvls, "0") != 0) ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  MOEPROF_RETURN_IF_ERROR(nccl_load());
  std::unique_ptr<NcclCommunicators> c(new NcclCommunicators());
  NcclComm comm = nullptr;
  NcclUniqueId128 uid;
  std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
  {
    NcclRange range("comm_init");
    MOEPROF_NCCL_CHECK("init rank " + std::to_string(rank) + " of " + std::to_string(world),
                       g_api.comm_init_rank(&comm, world, uid, rank));
  }
  c->comms_.push_back(comm);
  return c;
}

// ---- symmetric memory ------------------------------------------------------------------------

Result<std::unique_ptr<SymmetricPool>> SymmetricPool::create(void* comm, size_t bytes) {
  MOEPROF_RETURN_IF_ERROR(nccl_load());
  if (g_api.mem_alloc == nullptr)
    return Status::run_failure("--symm-mem on needs NCCL 2.27 or later (ncclMemAlloc, ncclCommWindowRegister); loaded " +
                               nccl_version());
  if (comm == nullptr) return Status::bad_input("symmetric memory needs an NCCL communicator");
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) return Status::bad_input("symmetric pool of 0 bytes");
  std::unique_ptr<SymmetricPool> p(new SymmetricPool());
  p->comm_ = comm;
  {
    NcclRange range("symmetric_pool");
    MOEPROF_NCCL_CHECK("ncclMemAlloc of " + std::to_string(bytes) + " bytes", g_api.mem_alloc(&p->base_, bytes));
  }
  {
    NcclRange range("window_register");
    std::shared_lock<std::shared_mutex> lock(g_comm_mu);
    const int r = g_api.window_register(static_cast<NcclComm>(comm), p->base_, bytes, &p->window_, kNcclWinCollSymmetric);
    if (r != kNcclSuccess) {
      g_api.mem_free(p->base_);
      p->base_ = nullptr;
      return Status::run_failure("nccl window register (" + std::to_string(bytes) + " bytes, NCCL_WIN_COLL_SYMMETRIC): " +
                                 nccl_result_string(r));
    }
  }
  p->capacity_ = bytes;
  p->free_[0] = bytes;
  return p;
}

SymmetricPool::~SymmetricPool() {
  std::shared_lock<std::shared_mutex> lock(g_comm_mu);
  if (window_ != nullptr && g_aborted.count(comm_) == 0) g_api.window_deregister(static_cast<NcclComm>(comm_), window_);
  if (base_ != nullptr) g_api.mem_free(base_);
}

Result<void*> SymmetricPool::allocate(size_t bytes) {
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > need) free_[off + need] = len - need;
    live_[off] = need;
    used_ += need;
    high_water_ = std::max(high_water_, used_);
    return static_cast<void*>(static_cast<char*>(base_) + off);
  }
  return Status::run_failure("the symmetric memory pool (" + std::to_string(capacity_) + " bytes, " + std::to_string(used_) +
                             " in use) has no free range of " + std::to_string(need) + " bytes: raise --symm-pool-mb");
}

bool SymmetricPool::contains(const void* p) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= base() && a < base() + capacity_;
}

bool SymmetricPool::free(void* ptr) {
  if (!contains(ptr)) return false;
  const size_t off = static_cast<size_t>(reinterpret_cast<uintptr_t>(ptr) - base());
  auto it = live_.find(off);
  if (it == live_.end()) return false;
  size_t start = off, len = it->second;
  used_ -= len;
  live_.erase(it);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
  return true;
}

void NcclCommunicators::abort() {
  std::unique_lock<std::shared_mutex> lock(g_comm_mu);
  if (aborted_) return;
  aborted_ = true;
  for (void* cm : comms_) g_aborted.insert(cm);
  for (void* cm : comms_) g_api.comm_abort(static_cast<NcclComm>(cm));
}

NcclCommunicators::~NcclCommunicators() {
  std::unique_lock<std::shared_mutex> lock(g_comm_mu);
  for (void* cm : comms_) {
    if (aborted_) {
      g_aborted.erase(cm);  // freed by ncclCommAbort; the address may be reused
    } else {
      g_api.comm_destroy(static_cast<NcclComm>(cm));
    }
  }
}

Status nccl_all_reduce(void* comm, void* data, size_t count, DType dtype, void* stream) {
  int nccl_type = 0;
  if (dtype == DType::kBF16) nccl_type = kNcclBfloat16;
  else if (dtype == DType::kF32) nccl_type = kNcclFloat32;
  else return Status::bad_input(std::string("all_reduce: unsupported dtype ") + std::string(dtype_name(dtype)));
  std::shared_lock<std::shared_mutex> lock(g_comm_mu);
  if (!g_loaded) return Status::run_failure("all_reduce: NCCL is not loaded");
  if (g_aborted.count(comm) != 0)
    return Status::run_failure("all_reduce: the NCCL communicator was aborted (another rank failed)");
  NcclRange range("all_reduce");
  MOEPROF_NCCL_CHECK("all_reduce",
                     g_api.all_reduce(data, data, count, nccl_type, kNcclSum, static_cast<NcclComm>(comm), stream));
  return Status::ok();
}

namespace {
// One group of point-to-point calls: parts[p] = (send offset, send bytes, recv offset, recv bytes)
// with rank p. ncclGroupEnd launches them together (no rank waits on another's order).
struct P2pPart {
  size_t send_off, send_bytes, recv_off, recv_bytes;
};
Status nccl_p2p_group(const char* what, void* comm, const void* send, void* recv, const std::vector<P2pPart>& parts, void* stream) {
  std::shared_lock<std::shared_mutex> lock(g_comm_mu);
  if (!g_loaded) return Status::run_failure(std::string(what) + ": NCCL is not loaded");
  if (g_aborted.count(comm) != 0)
    return Status::run_failure(std::string(what) + ": the NCCL communicator was aborted (another rank failed)");
  NcclRange range(what);
  MOEPROF_NCCL_CHECK(what, g_api.group_start());
  Status st;
  for (size_t p = 0; p < parts.size() && st.is_ok(); ++p) {
    const P2pPart& x = parts[p];
    const int peer = static_cast<int>(p);
    if (x.send_bytes > 0) {
      const int r = g_api.send(static_cast<const uint8_t*>(send) + x.send_off, x.send_bytes, kNcclUint8, peer,
                               static_cast<NcclComm>(comm), stream);
      if (r != kNcclSuccess) st = Status::run_failure(std::string(what) + ": ncclSend to rank " + std::to_string(peer) + ": " + nccl_result_string(r));
    }
    if (st.is_ok() && x.recv_bytes > 0) {
      const int r = g_api.recv(static_cast<uint8_t*>(recv) + x.recv_off, x.recv_bytes, kNcclUint8, peer,
                               static_cast<NcclComm>(comm), stream);
      if (r != kNcclSuccess) st = Status::run_failure(std::string(what) + ": ncclRecv from rank " + std::to_string(peer) + ": " + nccl_result_string(r));
    }
  }
  const int end = g_api.group_end();  // always closes the group, also after a failed call
  if (!st.is_ok()) return st;
  if (end != kNcclSuccess) return Status::run_failure(std::string(what) + ": ncclGroupEnd: " + nccl_result_string(end));
  return Status::ok();
}
}  // namespace

Status nccl_all_to_all_bytes(void* comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                             const std::vector<size_t>& recv_bytes, void* stream) {
  std::vector<P2pPart> parts(send_bytes.size());
  size_t so = 0, ro = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    parts[p] = P2pPart{so, send_bytes[p], ro, recv_bytes[p]};
    so += send_bytes[p];
    ro += recv_bytes[p];
  }
  return nccl_p2p_group("all_to_all", comm, send, recv, parts, stream);
}

Status nccl_all_gather_bytes(void* comm, int rank, void* data, const std::vector<size_t>& bytes, void* stream) {
  std::vector<size_t> off(bytes.size(), 0);
  for (size_t p = 1; p < bytes.size(); ++p) off[p] = off[p - 1] + bytes[p - 1];
  const size_t me = static_cast<size_t>(rank);
  std::vector<P2pPart> parts(bytes.size());
  for (size_t p = 0; p < parts.size(); ++p)
    parts[p] = p == me ? P2pPart{0, 0, 0, 0} : P2pPart{off[me], bytes[me], off[p], bytes[p]};
  return nccl_p2p_group("all_gather", comm, data, data, parts, stream);
}

}  // namespace moeprof
