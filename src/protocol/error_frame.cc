#include "protocol/error_frame.h"

namespace byteps::protocol {

Header ErrorHeader(Opcode opcode, StatusCode code, uint64_t key, uint64_t request_id) {
  Header h;
  h.opcode = opcode;
  h.key = key;
  h.request_id = request_id;
  h.arg = static_cast<uint32_t>(code);
  return h;
}

StatusCode StatusCodeFromWire(uint32_t arg) {
  auto code = static_cast<StatusCode>(arg);
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kPrecondition:
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:
    case StatusCode::kProtocol:
    case StatusCode::kInternal:
    case StatusCode::kMismatch:
      return code;
    case StatusCode::kOk:
    case StatusCode::kInProgress:
      break;
  }
  return StatusCode::kInternal;
}

Status StatusFromErrorFrame(const Header& h, std::string message) {
  return Status(StatusCodeFromWire(h.arg), std::move(message));
}

}  // namespace byteps::protocol
