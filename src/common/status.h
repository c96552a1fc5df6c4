// Status / StatusOr: errors are values in the core (CONVENTIONS.md §3).
// A Status is cheap to copy when OK; an error carries a code and a message that names the tensor,
// node or variable involved. Threading: immutable values, safe to share.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace byteps {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   // the caller passed something wrong (bad env value, dtype, size)
  kPrecondition = 2,      // called in the wrong state (push_pull before init)
  kUnavailable = 3,       // a peer cannot be reached / connection lost
  kDeadlineExceeded = 4,  // a wait ran past its deadline
  kAborted = 5,           // the job is being torn down (node failure, shutdown)
  kProtocol = 6,          // malformed bytes from a peer
  kInternal = 7,          // our own invariant broke
  kMismatch = 8,          // the workers disagree on a tensor (size, dtype, op, attributes): every one of
                          // them gets this error alike, from the servers
  kInProgress = 9,        // a handle's work is not finished yet (never on the wire or the C ABI)
};

const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (same code).
  // "<context>: <message>" (unchanged if the message already starts with that context).
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status Precondition(std::string m) { return {StatusCode::kPrecondition, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status ProtocolError(std::string m) { return {StatusCode::kProtocol, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }

// Holds either a value or a non-OK Status.
template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}             // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {}      // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace byteps

#define BYTEPS_RETURN_IF_ERROR(expr)         \
  do {                                       \
    ::byteps::Status _st = (expr);           \
    if (!_st.ok()) return _st;               \
  } while (0)

#define BYTEPS_CONCAT_INNER(a, b) a##b
#define BYTEPS_CONCAT(a, b) BYTEPS_CONCAT_INNER(a, b)
#define BYTEPS_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto BYTEPS_CONCAT(_so_, __LINE__) = (expr);                          \
  if (!BYTEPS_CONCAT(_so_, __LINE__).ok()) return BYTEPS_CONCAT(_so_, __LINE__).status(); \
  lhs = std::move(BYTEPS_CONCAT(_so_, __LINE__)).value()
