#include "compress/payload_header.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "common/little_endian.h"

namespace byteps::compress {

const char* CodecIdName(CodecId id) {
  switch (id) {
    case CodecId::kCast: return "cast";
    case CodecId::kOnebit: return "onebit";
    case CodecId::kTopk: return "topk";
    case CodecId::kRandomk: return "randomk";
    case CodecId::kDithering: return "dithering";
  }
  return "unknown";
}

size_t ValueTypeSize(ValueType t) { return t == ValueType::kFloat32 ? 4 : 2; }

void EncodePayloadHeader(const PayloadHeader& h, uint8_t* out) {
  out[0] = h.version;
  out[1] = static_cast<uint8_t>(h.codec);
  out[2] = static_cast<uint8_t>(h.value_type);
  out[3] = h.flags;
  StoreLe32(out + 4, h.count);
  StoreLe32(out + 8, h.param);
  StoreLe32(out + 12, std::bit_cast<uint32_t>(h.scale));
}

StatusOr<PayloadHeader> DecodePayloadHeader(const uint8_t* in, size_t len, const std::string& tensor) {
  if (len < kPayloadHeaderSize) {
    return ProtocolError(fmt::format("compressed payload of tensor '{}': {} bytes, shorter than its {}-byte header",
                                     tensor, len, kPayloadHeaderSize));
  }
  PayloadHeader h;
  h.version = in[0];
  if (h.version != kPayloadVersion) {
    return ProtocolError(fmt::format("compressed payload of tensor '{}': format version {}, this build reads {}",
                                     tensor, h.version, kPayloadVersion));
  }
  if (in[1] < 1 || in[1] > 5 || in[2] > 2) {
    return ProtocolError(fmt::format("compressed payload of tensor '{}': unknown codec id {} or value type {}",
                                     tensor, in[1], in[2]));
  }
  h.codec = static_cast<CodecId>(in[1]);
  h.value_type = static_cast<ValueType>(in[2]);
  h.flags = in[3];
  h.count = LoadLe32(in + 4);
  h.param = LoadLe32(in + 8);
  h.scale = std::bit_cast<float>(LoadLe32(in + 12));
  return h;
}

}  // namespace byteps::compress
