// libFuzzer target: the frame header codec and every control-payload decoder on arbitrary bytes.
// Beyond "does not crash", it checks the properties a peer relies on:
//  - a decoded header has a known opcode and payload_len <= the limit it was decoded with;
//  - decoding is monotonic in the limit (accepted under a limit => accepted under a larger one);
//  - EncodeHeader(decoded) reproduces the input bytes (the reserved byte aside, and the pad, which
//    is 0 or the header checksum) and decodes to the same fields;
//  - fewer than kHeaderSize bytes never decode;
//  - a control payload that decodes re-encodes to JSON that decodes to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/logging.h"
#include "protocol/control.h"
#include "protocol/frame.h"

namespace {

using namespace byteps;
using protocol::Header;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_frame invariant violated: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(cond)        \
  do {                          \
    if (!(cond)) Fail(#cond);   \
  } while (0)

bool SameFields(const Header& a, const Header& b) {
  return a.opcode == b.opcode && a.dtype == b.dtype && a.flags == b.flags && a.sender == b.sender &&
         a.round == b.round && a.key == b.key && a.request_id == b.request_id &&
         a.payload_len == b.payload_len && a.arg == b.arg;
}

// Offsets of the reserved byte (ignored) and the pad (0, or the header checksum when flags has
// kFlagChecksum); docs/wire-format.md.
constexpr size_t kOffReserved = 7, kOffPad = 18;

// Returns whether the input starts with a header that decodes under some limit.
bool CheckHeader(const uint8_t* data, size_t size) {
  constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();
  auto widest = protocol::DecodeHeader(data, size, kNoLimit);
  if (!widest.ok()) {
    // Refused without a limit: refused with every limit (checking one keeps this path cheap).
    // Another release's header is InvalidArgument (no retry fixes it); anything else ProtocolError.
    FUZZ_CHECK(widest.status().code() == StatusCode::kProtocol ||
               (widest.status().code() == StatusCode::kInvalidArgument && protocol::IsWireVersionMismatch(data, size)));
    FUZZ_CHECK(!widest.status().message().empty());
    FUZZ_CHECK(!protocol::DecodeHeader(data, size, 0).ok());
    return false;
  }
  FUZZ_CHECK(size >= protocol::kHeaderSize);
  // Small limits first: once a limit accepts the header, every larger one must too.
  static constexpr uint64_t kLimits[] = {0, 48, 64 * 1024, 1ull << 30, kNoLimit};
  bool accepted_before = false;
  for (uint64_t limit : kLimits) {
    auto h = protocol::DecodeHeader(data, size, limit);
    if (!h.ok()) {
      FUZZ_CHECK(!accepted_before);
      FUZZ_CHECK(h.status().code() == StatusCode::kProtocol);
      FUZZ_CHECK(widest->payload_len > limit);  // the limit is the only reason left
      continue;
    }
    accepted_before = true;
    const Header& d = h.value();
    FUZZ_CHECK(SameFields(d, widest.value()));
    FUZZ_CHECK(d.payload_len <= limit);
    FUZZ_CHECK(protocol::IsKnownOpcode(static_cast<uint8_t>(d.opcode)));
    FUZZ_CHECK(std::strcmp(protocol::OpcodeName(d.opcode), "Unknown") != 0);
    FUZZ_CHECK(!protocol::DescribeHeader(d).empty());

    uint8_t wire[protocol::kHeaderSize];
    protocol::EncodeHeader(d, wire);
    const bool checksummed = (d.flags & protocol::kFlagChecksum) != 0;
    for (size_t i = 0; i < protocol::kHeaderSize; ++i) {
      if (i == kOffReserved) {
        FUZZ_CHECK(wire[i] == 0);
      } else if (i == kOffPad || i == kOffPad + 1) {
        // The pad carries the header checksum when flagged; it covers the reserved byte too, so
        // it is reproduced only when the input's reserved byte was the encoder's 0.
        if (!checksummed) FUZZ_CHECK(wire[i] == 0);
        else if (data[kOffReserved] == 0) FUZZ_CHECK(wire[i] == data[i]);
      } else {
        FUZZ_CHECK(wire[i] == data[i]);
      }
    }
    auto again = protocol::DecodeHeader(wire, sizeof(wire), limit);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(SameFields(d, again.value()));
    // A truncated copy never decodes, whatever the limit.
    FUZZ_CHECK(!protocol::DecodeHeader(wire, protocol::kHeaderSize - 1, limit).ok());
  }
  FUZZ_CHECK(accepted_before);
  return true;
}

// Decode -> Encode -> Decode must give the same value (what a relaying node would do).
template <typename T, typename Eq>
void RoundTrip(StatusOr<T> (*decode)(const std::string&), const std::string& input, Eq eq) {
  auto m = decode(input);
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == StatusCode::kProtocol);
    return;
  }
  std::string encoded = protocol::Encode(m.value());
  auto again = decode(encoded);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(eq(m.value(), again.value()));
  // Encoding is a function of the value: the second encoding is byte-identical.
  FUZZ_CHECK(protocol::Encode(again.value()) == encoded);
}

void CheckControl(const std::string& s) {
  RoundTrip(&protocol::DecodeRegisterRequest, s,
            [](const protocol::RegisterRequest& a, const protocol::RegisterRequest& b) {
              return a.role == b.role && a.requested_rank == b.requested_rank && a.host == b.host &&
                     a.port == b.port && a.pid == b.pid && a.num_workers == b.num_workers &&
                     a.num_servers == b.num_servers && a.job_secret_hash == b.job_secret_hash &&
                     a.rejoin == b.rejoin;
            });
  RoundTrip(&protocol::DecodeRegisterReply, s,
            [](const protocol::RegisterReply& a, const protocol::RegisterReply& b) {
              return a.error == b.error && a.rank == b.rank && a.nodes == b.nodes;
            });
  RoundTrip(&protocol::DecodeNodeFailedNotice, s,
            [](const protocol::NodeFailedNotice& a, const protocol::NodeFailedNotice& b) {
              if (!(a.node == b.node) || a.reason != b.reason) return false;
              return !protocol::Describe(a.node).empty();
            });
  RoundTrip(&protocol::DecodeKeyInit, s, [](const protocol::KeyInit& a, const protocol::KeyInit& b) {
    return a.name == b.name && a.bytes == b.bytes && a.dtype == b.dtype && a.tensor_bytes == b.tensor_bytes;
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  byteps::log::SetLevel(byteps::log::Level::kFatal);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool framed = CheckHeader(data, size);
  // The decoders see the whole input and, after a header that decodes, its payload.
  CheckControl(std::string(reinterpret_cast<const char*>(data), size));
  if (framed && size > protocol::kHeaderSize) {
    CheckControl(std::string(reinterpret_cast<const char*>(data) + protocol::kHeaderSize,
                             size - protocol::kHeaderSize));
  }
  return 0;
}
