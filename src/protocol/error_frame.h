// Errors on the wire (Opcode::kError and Opcode::kJobError): the StatusCode travels in
// Header::arg and the message as the UTF-8 payload, so a peer's error keeps its kind (a bad
// declaration stays InvalidArgument, a dead node stays Unavailable) across processes.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "protocol/frame.h"

namespace byteps::protocol {

// The header of an error frame carrying `code` (payload_len is left for the sender to set).
Header ErrorHeader(Opcode opcode, StatusCode code, uint64_t key = 0, uint64_t request_id = 0);

// The code an error frame's `arg` carries. OK, "in progress" and unknown values are still errors:
// they read as kInternal.
StatusCode StatusCodeFromWire(uint32_t arg);

// The Status an error frame describes: its code, and `message` (the payload).
Status StatusFromErrorFrame(const Header& h, std::string message);

}  // namespace byteps::protocol
