#include "protocol/frame.h"

#include <fmt/format.h>

#include <cstring>

#include "common/crc32c.h"
#include "common/little_endian.h"

namespace byteps::protocol {
namespace {

// Layout (byte offsets). Keep docs/wire-format.md in step.
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffOpcode = 5, kOffDtype = 6, kOffReserved = 7,
                 kOffFlags = 8, kOffSender = 10, kOffRound = 14, kOffPad = 18, kOffKey = 20,
                 kOffRequest = 28, kOffPayload = 36, kOffArg = 44;
// arg is 4 bytes on the wire; the remaining fields fill exactly 48 bytes.
static_assert(kOffArg + 4 == kHeaderSize, "header layout must fill kHeaderSize bytes");

// Low 16 bits of the CRC-32C of the header with its checksum field (the pad) zero.
uint16_t HeaderCrc(const uint8_t* header) {
  uint8_t copy[kHeaderSize];
  std::memcpy(copy, header, kHeaderSize);
  copy[kOffPad] = copy[kOffPad + 1] = 0;
  return static_cast<uint16_t>(Crc32c(0, copy, kHeaderSize));
}

}  // namespace

bool IsKnownOpcode(uint8_t op) {
  return (op >= 1 && op <= 11) || (op >= 16 && op <= 35);
}

Status WireVersionMismatch(uint8_t peer_version) {
  return InvalidArgument(fmt::format("unsupported wire version {} (this build speaks {}): the peer runs another "
                                     "byteps release; install the same byteps on every node of the job",
                                     peer_version, kWireVersion));
}

bool IsWireVersionMismatch(const uint8_t* data, size_t len) {
  return len >= kHeaderSize && LoadLe32(data + kOffMagic) == kMagic && data[kOffVersion] != kWireVersion;
}

const char* OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kRegister: return "Register";
    case Opcode::kRegisterReply: return "RegisterReply";
    case Opcode::kBarrier: return "Barrier";
    case Opcode::kBarrierRelease: return "BarrierRelease";
    case Opcode::kHeartbeat: return "Heartbeat";
    case Opcode::kNodeFailed: return "NodeFailed";
    case Opcode::kFinish: return "Finish";
    case Opcode::kTerminate: return "Terminate";
    case Opcode::kJobError: return "JobError";
    case Opcode::kNameRequest: return "NameRequest";
    case Opcode::kNameReply: return "NameReply";
    case Opcode::kHello: return "Hello";
    case Opcode::kInitKey: return "InitKey";
    case Opcode::kPushPull: return "PushPull";
    case Opcode::kPushPullReply: return "PushPullReply";
    case Opcode::kError: return "Error";
    case Opcode::kLocalReady: return "LocalReady";
    case Opcode::kLocalDone: return "LocalDone";
    case Opcode::kAuthChallenge: return "AuthChallenge";
    case Opcode::kAuthResponse: return "AuthResponse";
    case Opcode::kLocalGroup: return "LocalGroup";
    case Opcode::kLocalGo: return "LocalGo";
    case Opcode::kShmHello: return "ShmHello";
    case Opcode::kShmReady: return "ShmReady";
    case Opcode::kShmBell: return "ShmBell";
    case Opcode::kUcxHello: return "UcxHello";
    case Opcode::kUcxReady: return "UcxReady";
    case Opcode::kLeave: return "Leave";
    case Opcode::kRelease: return "Release";
    case Opcode::kTopRequest: return "TopRequest";
    case Opcode::kTopReply: return "TopReply";
  }
  return "Unknown";
}

void EncodeHeader(const Header& h, uint8_t* out) {
  StoreLe32(out + kOffMagic, kMagic);
  out[kOffVersion] = kWireVersion;
  out[kOffOpcode] = static_cast<uint8_t>(h.opcode);
  out[kOffDtype] = h.dtype;
  out[kOffReserved] = 0;
  StoreLe16(out + kOffFlags, h.flags);
  StoreLe32(out + kOffSender, h.sender);
  StoreLe32(out + kOffRound, h.round);
  StoreLe16(out + kOffPad, 0);
  StoreLe64(out + kOffKey, h.key);
  StoreLe64(out + kOffRequest, h.request_id);
  StoreLe64(out + kOffPayload, h.payload_len);
  StoreLe32(out + kOffArg, static_cast<uint32_t>(h.arg));
  if (h.flags & kFlagChecksum) StoreLe16(out + kOffPad, HeaderCrc(out));
}

StatusOr<Header> DecodeHeader(const uint8_t* data, size_t len, uint64_t max_payload) {
  if (len < kHeaderSize) {
    return ProtocolError(fmt::format("truncated header: {} of {} bytes", len, kHeaderSize));
  }
  uint32_t magic = LoadLe32(data + kOffMagic);
  if (magic != kMagic) {
    return ProtocolError(fmt::format("bad magic 0x{:08x} (expected 0x{:08x}): not a byteps peer",
                                     magic, kMagic));
  }
  // The checksum before the version: a version byte damaged on the way reads as damage (worth a
  // new connection), not as another release (which no retry can fix).
  if ((LoadLe16(data + kOffFlags) & kFlagChecksum) && LoadLe16(data + kOffPad) != HeaderCrc(data)) {
    return ProtocolError(fmt::format("corrupt frame header (checksum 0x{:04x}, computed 0x{:04x})",
                                     LoadLe16(data + kOffPad), HeaderCrc(data)));
  }
  if (data[kOffVersion] != kWireVersion) return WireVersionMismatch(data[kOffVersion]);
  if (!IsKnownOpcode(data[kOffOpcode])) {
    return ProtocolError(fmt::format("unknown opcode {}", data[kOffOpcode]));
  }
  Header h;
  h.opcode = static_cast<Opcode>(data[kOffOpcode]);
  h.dtype = data[kOffDtype];
  h.flags = LoadLe16(data + kOffFlags);
  h.sender = LoadLe32(data + kOffSender);
  h.round = LoadLe32(data + kOffRound);
  h.key = LoadLe64(data + kOffKey);
  h.request_id = LoadLe64(data + kOffRequest);
  h.payload_len = LoadLe64(data + kOffPayload);
  h.arg = LoadLe32(data + kOffArg);
  if (h.payload_len > max_payload) {
    return ProtocolError(fmt::format(
        "{} frame with a payload of {} bytes exceeds the limit of {} (BYTEPS_MAX_MESSAGE_BYTES)",
        OpcodeName(h.opcode), h.payload_len, max_payload));
  }
  return h;
}

std::string DescribeHeader(const Header& h) {
  return fmt::format("{}(key={}, round={}, req={}, sender={}, len={})", OpcodeName(h.opcode), h.key,
                     h.round, h.request_id, h.sender, h.payload_len);
}

bool IsTransportOpcode(Opcode op) {
  switch (op) {
    case Opcode::kAuthChallenge:
    case Opcode::kAuthResponse:
    case Opcode::kShmHello:
    case Opcode::kShmReady:
    case Opcode::kShmBell:
    case Opcode::kUcxHello:
    case Opcode::kUcxReady:
      return true;
    default:
      return false;
  }
}

}  // namespace byteps::protocol
