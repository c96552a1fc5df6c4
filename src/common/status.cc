#include "common/status.h"

namespace byteps {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kPrecondition: return "PRECONDITION";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kProtocol: return "PROTOCOL";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kMismatch: return "MISMATCH";
    case StatusCode::kInProgress: return "IN_PROGRESS";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  std::string prefix = context + ": ";
  if (message_.starts_with(prefix)) return *this;  // the same context added twice on the way up
  return Status(code_, prefix + message_);
}

}  // namespace byteps
