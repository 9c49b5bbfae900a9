// Status and Result<T>: library code reports failures by value (never aborts), so a profiler can
// still flush its trace. The CLI maps ErrorCode to process exit codes (see README "Exit codes").
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace moeprof {

enum class ErrorCode : int {
  kOk = 0,
  kBadInput = 2,     // unreadable or malformed file, bad option value, unknown model
  kRunFailure = 3,   // profiling / execution failure (CUDA error, OOM, no GPU, CUPTI conflict)
};

// Process exit codes, documented in the README.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRegression = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitRunFailure = 3;

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status bad_input(std::string msg) { return Status(ErrorCode::kBadInput, std::move(msg)); }
  static Status run_failure(std::string msg) { return Status(ErrorCode::kRunFailure, std::move(msg)); }
  Status(ErrorCode code, std::string msg) : code_(code), message_(std::move(msg)) {}

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  int exit_code() const { return static_cast<int>(code_); }
  // Prefixes context ("layer 3 moe: ") to the message; keeps the code.
  Status with_context(const std::string& ctx) const {
    if (is_ok()) return *this;
    return Status(code_, ctx + ": " + message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status st) : v_(std::move(st)) {}   // NOLINT(google-explicit-constructor)
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace moeprof

#define MOEPROF_CONCAT_INNER(a, b) a##b
#define MOEPROF_CONCAT(a, b) MOEPROF_CONCAT_INNER(a, b)

#define MOEPROF_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::moeprof::Status _moeprof_st = (expr);           \
    if (!_moeprof_st.is_ok()) return _moeprof_st;     \
  } while (0)

#define MOEPROF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define MOEPROF_ASSIGN_OR_RETURN(lhs, expr) \
  MOEPROF_ASSIGN_OR_RETURN_IMPL(MOEPROF_CONCAT(_moeprof_res_, __LINE__), lhs, expr)
