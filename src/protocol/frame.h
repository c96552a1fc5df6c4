// The byteps wire format: a fixed 48-byte little-endian header followed by `payload_len` bytes.
// Fields are encoded one by one (no struct is memcpy'd onto the wire) and every decode is bounds-
// checked. Documented in docs/wire-format.md; every change bumps kWireVersion.
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace byteps::protocol {

inline constexpr uint32_t kMagic = 0x31535042;  // "BPS1" read as little-endian bytes
inline constexpr uint8_t kWireVersion = 15;
inline constexpr size_t kHeaderSize = 48;

enum class Opcode : uint8_t {
  // Control plane (scheduler <-> node); payloads are JSON objects (control.h).
  kRegister = 1,        // node -> scheduler: who I am, where I listen
  kRegisterReply = 2,   // scheduler -> node: assigned rank + address table, or an error
  kBarrier = 3,         // node -> scheduler: entered barrier `key`
  kBarrierRelease = 4,  // scheduler -> node: barrier `key` complete
  kHeartbeat = 5,       // node -> scheduler
  kNodeFailed = 6,      // scheduler -> node: a node died; payload names it
  kFinish = 7,          // worker -> scheduler: this worker is done
  kTerminate = 8,       // scheduler -> node: job over (arg = 0 clean, else failure)
  kJobError = 9,        // scheduler -> node: rendezvous failed; payload says why
  kNameRequest = 10,    // worker process -> scheduler: the plan of a (name, incarnation, generation)? (JSON
                        // NameRequest; request_id is echoed); any connection, registered or not
  kNameReply = 11,      // scheduler -> worker process: the plan (JSON NameReply) for request_id
  // Data plane (worker <-> server).
  kHello = 16,          // worker -> server: first frame on a data connection (sender = worker rank)
  kInitKey = 17,        // worker -> server: declare a partition (payload JSON: name, bytes, dtype)
  kPushPull = 18,       // worker -> server: data to sum for (key, round); reply = the round's sum
  kPushPullReply = 19,  // server -> worker: the sum (payload) for request_id
  kError = 20,          // either way: request_id failed; payload = UTF-8 message
  // Same-host local reduce (Unix socket between a non-root and its local root).
  kLocalReady = 21,     // non-root -> root: my slot of (key, round) is written; payload KeyInit JSON
  kLocalDone = 22,      // root -> non-root: the result of (key, round) is in the result segment
  // Connection authentication (BYTEPS_JOB_SECRET set): the first frames both ways (auth.h).
  kAuthChallenge = 23,  // payload: kAuthNonceBytes random bytes
  kAuthResponse = 24,   // payload: HMAC-SHA256 proof over the peer's challenge (kAuthProofBytes)
  // Same-host device groups (the GPU local reduce over a device group, e.g. NCCL).
  kLocalGroup = 25,     // forming device groups, both ways; request_id = what (group_formation.cc), arg = device
                        // kind, key = device index, sender = the sender's place
  kLocalGo = 26,        // root -> non-root: queue the collective of (key, round) now; arg = 0 reduce, 1 broadcast,
                        // 2 failed (request_id = the error's code, payload = its message)
  // Shared-memory connections (transport/shm/): the control frames on their Unix socket.
  kShmHello = 27,       // connector -> acceptor: map segment <payload JSON>; the frames travel there
  kShmReady = 28,       // acceptor -> connector: mapped (arg 0) or refused (arg 1, payload = why)
  kShmBell = 29,        // either way: arg 1 = records published for you, 2 = space freed / frames read
  kUcxHello = 30,       // connector -> acceptor (the TCP connection a UCX one starts on): my id, token, worker address
  kUcxReady = 31,       // acceptor -> connector: arg 0 = my id + worker address; arg 1 = refused, payload = why
  kLeave = 32,          // worker -> server: this worker has shut down and pushes nothing more (sender = its rank)
  kRelease = 33,        // worker -> server: this worker is done with `key` after round `round` (its last push);
                        // the server frees the key once every worker released it or left
  // `byteps top` (any connection to the scheduler, registered or not; request_id is echoed).
  kTopRequest = 34,     // -> scheduler: what every node's last heartbeat summary said (no payload)
  kTopReply = 35,       // scheduler ->: the job's nodes with their summaries (JSON TopReply)
};

// Header flag bit of kError (bits 0..14 belong to the opcode): the request can never complete,
// whoever retries; the job cannot go on (e.g. a round that needs a worker that has left).
inline constexpr uint16_t kFlagJobFatal = 0x0001;
// Header flag bit of kPushPull: a process behind this push has joined (join() with several
// processes per host) and its share is zeros: a concatenation's or a "join=fail" key's round fails
// (kMismatch), as while a worker has joined.
inline constexpr uint16_t kFlagJoinedShare = 0x0002;
// Header flag bit of kPushPull and kPushPullReply: the payload is a compressed partition (a codec's
// payload, docs/wire-format.md "Compressed payloads"; the key was declared with compression
// attributes, compress::Params::ToAttrs), not its raw bytes: payload_len is the payload's length.
inline constexpr uint16_t kFlagCompressed = 0x0004;

// Header flag bit owned by the transport (upper layers use the other 15 bits of `flags`; the
// transport sets or clears this one on every frame it sends): the header's bytes 18..19 hold the low 16 bits of the CRC-32C of the header (with
// those bytes zero), and the payload is followed by a 4-byte little-endian CRC-32C of the payload
// (a trailer not counted in payload_len). Set by senders with BYTEPS_CHECKSUM=1.
inline constexpr uint16_t kFlagChecksum = 0x8000;
inline constexpr size_t kTrailerSize = 4;

bool IsKnownOpcode(uint8_t op);
const char* OpcodeName(Opcode op);

struct Header {
  Opcode opcode = Opcode::kHeartbeat;
  uint8_t dtype = 0;        // DataType code for data frames
  uint16_t flags = 0;
  uint32_t sender = 0;      // sender's rank within its role (worker rank for data frames)
  uint32_t round = 0;       // per-key round (1-based) for kPushPull / kPushPullReply
  uint64_t key = 0;         // partition key
  uint64_t request_id = 0;  // echoed in replies
  uint64_t payload_len = 0;
  uint32_t arg = 0;         // opcode-specific (e.g. kTerminate exit status); 4 bytes on the wire
};

// Writes exactly kHeaderSize bytes into out (with the header checksum when h.flags has
// kFlagChecksum).
void EncodeHeader(const Header& h, uint8_t* out);

// Decodes and validates magic, the header checksum (when flagged), version, opcode and
// payload_len <= max_payload.
// Errors name the field: "bad magic 0x...", "unsupported wire version 7 (this build speaks 1)"
// (InvalidArgument: another release, which no retry fixes; the rest are ProtocolError),
// "unknown opcode 200", "payload of 5000000000 bytes exceeds the limit of 1073741824 (BYTEPS_MAX_MESSAGE_BYTES)".
StatusOr<Header> DecodeHeader(const uint8_t* data, size_t len, uint64_t max_payload);

std::string DescribeHeader(const Header& h);

// The error for a peer speaking `peer_version` (InvalidArgument; names both versions).
Status WireVersionMismatch(uint8_t peer_version);
// Whether `data` starts with a byteps header of another wire version (len >= kHeaderSize).
bool IsWireVersionMismatch(const uint8_t* data, size_t len);

// Opcodes a transport uses for its connections themselves (authentication, the shared-memory and
// UCX handshakes): never a frame for the layers above.
bool IsTransportOpcode(Opcode op);

}  // namespace byteps::protocol
