#include "executor/host_group.h"

#include <cstring>
#include <string>

#include "kernels/common/fp_formats.h"

namespace moeprof {

HostRankGroup::HostRankGroup(int size) : size_(size < 1 ? 1 : size), posts_(static_cast<size_t>(size_)) {}

void HostRankGroup::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

bool HostRankGroup::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

Status HostRankGroup::check_rank(int rank, const char* what) const {
  if (rank < 0 || rank >= size_)
    return Status::bad_input(std::string(what) + ": rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size_) + ")");
  return Status::ok();
}

Status HostRankGroup::barrier(std::unique_lock<std::mutex>& lock) {
  if (aborted_) return Status::run_failure("the rank group was aborted (another rank failed)");
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return Status::ok();
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) return Status::run_failure("the rank group was aborted (another rank failed)");
  return Status::ok();
}

Status HostRankGroup::all_reduce(int rank, void* data, size_t count, DType dtype) {
  MOEPROF_RETURN_IF_ERROR(check_rank(rank, "all_reduce"));
  if (dtype != DType::kBF16 && dtype != DType::kF32)
    return Status::bad_input(std::string("all_reduce: unsupported dtype ") + std::string(dtype_name(dtype)));
  std::unique_lock<std::mutex> lock(mu_);
  posts_[static_cast<size_t>(rank)] = Post{nullptr, data, nullptr, nullptr, count, dtype};
  MOEPROF_RETURN_IF_ERROR(barrier(lock));
  Status mismatch;
  for (int p = 0; p < size_ && mismatch.is_ok(); ++p) {
    const Post& q = posts_[static_cast<size_t>(p)];
    if (q.count != count || q.dtype != dtype)
      mismatch = Status::run_failure("all_reduce: rank " + std::to_string(p) + " reduces " + std::to_string(q.count) + " elements of " +
                                     std::string(dtype_name(q.dtype)) + ", rank " + std::to_string(rank) + " " + std::to_string(count) +
                                     " of " + std::string(dtype_name(dtype)));
  }
  // Every rank reads all inputs (no rank writes before the second barrier), sums in rank order.
  std::vector<float> sum(mismatch.is_ok() ? count : 0, 0.0f);
  lock.unlock();
  for (int p = 0; p < size_ && mismatch.is_ok(); ++p) {
    const void* src = posts_[static_cast<size_t>(p)].data;
    if (dtype == DType::kF32) {
      const float* f = static_cast<const float*>(src);
      for (size_t i = 0; i < count; ++i) sum[i] += f[i];
    } else {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) sum[i] += kern::bf16_to_f32(h[i]);
    }
  }
  lock.lock();
  MOEPROF_RETURN_IF_ERROR(barrier(lock));
  lock.unlock();
  if (!mismatch.is_ok()) return mismatch;
  if (dtype == DType::kF32) {
    std::memcpy(data, sum.data(), count * sizeof(float));
  } else {
    uint16_t* h = static_cast<uint16_t*>(data);
    for (size_t i = 0; i < count; ++i) h[i] = kern::f32_to_bf16(sum[i]);
  }
  return Status::ok();
}

Status HostRankGroup::all_to_all(int rank, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                 const std::vector<size_t>& recv_bytes) {
  MOEPROF_RETURN_IF_ERROR(check_rank(rank, "all_to_all"));
  if (send_bytes.size() != static_cast<size_t>(size_) || recv_bytes.size() != static_cast<size_t>(size_))
    return Status::bad_input("all_to_all: " + std::to_string(send_bytes.size()) + " send and " + std::to_string(recv_bytes.size()) +
                             " receive counts for " + std::to_string(size_) + " ranks");
  std::unique_lock<std::mutex> lock(mu_);
  posts_[static_cast<size_t>(rank)] = Post{send, recv, &send_bytes, &recv_bytes, 0, DType::kU8};
  MOEPROF_RETURN_IF_ERROR(barrier(lock));
  // Every rank checks every pair, so that all fail alike on a mismatch (and none copies).
  Status mismatch;
  for (int p = 0; p < size_ && mismatch.is_ok(); ++p)
    for (int q = 0; q < size_; ++q) {
      const size_t sent = (*posts_[static_cast<size_t>(p)].send_bytes)[static_cast<size_t>(q)];
      const size_t expected = (*posts_[static_cast<size_t>(q)].recv_bytes)[static_cast<size_t>(p)];
      if (sent != expected) {
        mismatch = Status::run_failure("all_to_all: rank " + std::to_string(p) + " sends " + std::to_string(sent) + " bytes to rank " +
                                       std::to_string(q) + ", which expects " + std::to_string(expected));
        break;
      }
    }
  if (mismatch.is_ok()) {
    lock.unlock();
    size_t at = 0;
    for (int p = 0; p < size_; ++p) {
      const Post& q = posts_[static_cast<size_t>(p)];
      size_t off = 0;  // where rank p's part for this rank starts in its send buffer
      for (int d = 0; d < rank; ++d) off += (*q.send_bytes)[static_cast<size_t>(d)];
      const size_t n = recv_bytes[static_cast<size_t>(p)];
      if (n > 0) std::memcpy(static_cast<uint8_t*>(recv) + at, static_cast<const uint8_t*>(q.send) + off, n);
      at += n;
    }
    lock.lock();
  }
  // No rank returns (and reuses its send buffer) before every rank has copied.
  MOEPROF_RETURN_IF_ERROR(barrier(lock));
  return mismatch;
}

Status HostRankGroup::all_gather(int rank, void* data, const std::vector<size_t>& bytes) {
  MOEPROF_RETURN_IF_ERROR(check_rank(rank, "all_gather"));
  if (bytes.size() != static_cast<size_t>(size_))
    return Status::bad_input("all_gather: " + std::to_string(bytes.size()) + " counts for " + std::to_string(size_) + " ranks");
  std::unique_lock<std::mutex> lock(mu_);
  posts_[static_cast<size_t>(rank)] = Post{nullptr, data, &bytes, nullptr, 0, DType::kU8};
  MOEPROF_RETURN_IF_ERROR(barrier(lock));
  Status mismatch;
  for (int p = 0; p < size_; ++p)
    if (*posts_[static_cast<size_t>(p)].send_bytes != bytes) {
      mismatch = Status::run_failure("all_gather: rank " + std::to_string(p) + " and rank " + std::to_string(rank) +
                                     " give different slice sizes");
      break;
    }
  if (mismatch.is_ok()) {
    lock.unlock();
    // Each rank reads only the other ranks' own parts, which no rank writes.
    size_t off = 0;
    for (int p = 0; p < size_; ++p) {
      const size_t n = bytes[static_cast<size_t>(p)];
      if (p != rank && n > 0)
        std::memcpy(static_cast<uint8_t*>(data) + off, static_cast<const uint8_t*>(posts_[static_cast<size_t>(p)].data) + off, n);
      off += n;
    }
    lock.lock();
  }
  MOEPROF_RETURN_IF_ERROR(barrier(lock));
  return mismatch;
}

}  // namespace moeprof
