// The header every compressed payload starts with (docs/wire-format.md, "Compressed payloads"):
// 16 bytes, little-endian.
//
//   0  u8  format version (kPayloadVersion)     1  u8  codec id (CodecId)
//   2  u8  value type (ValueType)               3  u8  flags (codec's own; unused bits 0)
//   4  u32 element count of the tensor part     8  u32 param: topk/randomk pairs, dithering levels s
//   12 f32 scale: onebit's magnitude, dithering's norm (0 for the other codecs)
//
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace byteps::compress {

inline constexpr uint8_t kPayloadVersion = 1;
inline constexpr size_t kPayloadHeaderSize = 16;

enum class CodecId : uint8_t { kCast = 1, kOnebit = 2, kTopk = 3, kRandomk = 4, kDithering = 5 };
// How plain values travel (the cast codec's elements, topk/randomk's values).
enum class ValueType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Flags.
inline constexpr uint8_t kFlagOnebitScaled = 1;    // onebit: scale is mean |x| (else 1)
inline constexpr uint8_t kFlagNatural = 1;         // dithering: natural (power of 2) partition
inline constexpr uint8_t kFlagL2 = 2;              // dithering: l2 normalisation (else max)
inline constexpr uint8_t kFlagUnbiased = 1;        // randomk: values were scaled by n/k

struct PayloadHeader {
  uint8_t version = kPayloadVersion;
  CodecId codec = CodecId::kCast;
  ValueType value_type = ValueType::kFloat32;
  uint8_t flags = 0;
  uint32_t count = 0;
  uint32_t param = 0;
  float scale = 0;
};

const char* CodecIdName(CodecId id);
size_t ValueTypeSize(ValueType t);

void EncodePayloadHeader(const PayloadHeader& h, uint8_t* out);
// Reads the header of a payload of `len` bytes; errors (ProtocolError, naming `tensor`): shorter
// than the header, another format version, an unknown codec id or value type.
StatusOr<PayloadHeader> DecodePayloadHeader(const uint8_t* in, size_t len, const std::string& tensor);

}  // namespace byteps::compress
