#include "compress/codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/half.h"
#include "compress/codec_impls.h"
#include "compress/values.h"

namespace byteps::compress {

StatusOr<size_t> Codec::Compress(const void* in, size_t n, uint64_t key, uint64_t round, uint8_t* out,
                                 size_t cap) {
  if (n > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgument(fmt::format("compressing tensor '{}': {} elements in one part, at most 2^32-1", tensor_, n));
  }
  const size_t need = MaxCompressedBytes(n);
  if (cap < need) {
    return InvalidArgument(fmt::format("compressing tensor '{}' ({}): output buffer of {} bytes, {} needed", tensor_,
                                       CodecIdName(id_), cap, need));
  }
  const float* values = static_cast<const float*>(in);
  if (dtype_ != DataType::kFloat32) {
    scratch_.resize(n);
    if (dtype_ == DataType::kFloat64) {
      const double* d = static_cast<const double*>(in);
      for (size_t i = 0; i < n; ++i) scratch_[i] = static_cast<float>(d[i]);
    } else {
      LoadValues(dtype_ == DataType::kFloat16 ? ValueType::kFloat16 : ValueType::kBFloat16,
                 static_cast<const uint8_t*>(in), n, scratch_.data());
    }
    values = scratch_.data();
  }
  PayloadHeader h;
  h.codec = id_;
  h.count = static_cast<uint32_t>(n);
  BYTEPS_ASSIGN_OR_RETURN(size_t body, CompressBody(values, n, key, round, &h, out + kPayloadHeaderSize));
  EncodePayloadHeader(h, out);
  return kPayloadHeaderSize + body;
}

Status Codec::DecodeError(const std::string& why) const {
  return ProtocolError(fmt::format("compressed payload of tensor '{}' ({}): {}", tensor_, CodecIdName(id_), why));
}

Status Codec::CheckFields(const PayloadHeader& h, ValueType type, uint8_t flags, uint32_t param,
                          std::optional<float> scale, size_t body_len, size_t want_len) const {
  if (h.value_type != type || h.flags != flags || h.param != param ||
      (scale && std::bit_cast<uint32_t>(h.scale) != std::bit_cast<uint32_t>(*scale))) {
    return DecodeError(fmt::format("header fields (value type {}, flags {}, param {}) differ from this codec's",
                                   static_cast<int>(h.value_type), h.flags, h.param));
  }
  if (body_len != want_len) return DecodeError(fmt::format("body of {} bytes, {} expected", body_len, want_len));
  return Status::Ok();
}

StatusOr<PayloadHeader> Codec::CheckPayload(const uint8_t* in, size_t len, size_t n) const {
  BYTEPS_ASSIGN_OR_RETURN(PayloadHeader h, DecodePayloadHeader(in, len, tensor_));
  if (h.codec != id_) return DecodeError(fmt::format("written by codec {}", CodecIdName(h.codec)));
  if (h.count != n) return DecodeError(fmt::format("holds {} elements, {} expected", h.count, n));
  BYTEPS_RETURN_IF_ERROR(CheckBody(h, in + kPayloadHeaderSize, len - kPayloadHeaderSize));
  return h;
}

void Codec::DecodeBody(const PayloadHeader& h, const uint8_t* body, size_t n, float* out) const {
  std::fill(out, out + n, 0.0f);
  AddBody(h, body, out);
}

Status Codec::Decompress(const uint8_t* in, size_t len, size_t n, void* out) {
  BYTEPS_ASSIGN_OR_RETURN(PayloadHeader h, CheckPayload(in, len, n));
  const uint8_t* body = in + kPayloadHeaderSize;
  if (dtype_ == DataType::kFloat32) {
    DecodeBody(h, body, n, static_cast<float*>(out));
    return Status::Ok();
  }
  scratch_.resize(n);
  DecodeBody(h, body, n, scratch_.data());
  if (dtype_ == DataType::kFloat64) {
    double* d = static_cast<double*>(out);
    for (size_t i = 0; i < n; ++i) d[i] = scratch_[i];
  } else {
    StoreValues(dtype_ == DataType::kFloat16 ? ValueType::kFloat16 : ValueType::kBFloat16, scratch_.data(), n,
                static_cast<uint8_t*>(out));
  }
  return Status::Ok();
}

Status Codec::DecompressAdd(const uint8_t* in, size_t len, size_t n, float* acc) {
  BYTEPS_ASSIGN_OR_RETURN(PayloadHeader h, CheckPayload(in, len, n));
  AddBody(h, in + kPayloadHeaderSize, acc);
  return Status::Ok();
}

uint32_t ResolveK(double k, size_t n) {
  if (n == 0) return 0;
  if (k < 1) return static_cast<uint32_t>(std::max<double>(1, std::floor(k * static_cast<double>(n))));
  return static_cast<uint32_t>(std::min<double>(k, static_cast<double>(n)));
}

StatusOr<std::unique_ptr<Codec>> MakeCodec(const Params& p, DataType dtype, const std::string& tensor) {
  if (!p.enabled()) {
    return InvalidArgument(fmt::format("tensor '{}': no compressor or cast configured", tensor));
  }
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat16 && dtype != DataType::kBFloat16 &&
      dtype != DataType::kFloat64) {
    return InvalidArgument(fmt::format("tensor '{}': compressor '{}' takes floating-point tensors, not {}", tensor,
                                       p.compressor == Compressor::kNone ? "cast" : CompressorName(p.compressor),
                                       DataTypeName(dtype)));
  }
  // Params from ParseParams are valid; one built by hand is checked here (levels and k divide).
  const bool k_ok = p.compressor == Compressor::kDithering
                        ? p.k >= 1 && p.k == std::floor(p.k) && p.k <= (p.partition == Partition::kNatural ? 31 : 32767)
                        : !(p.k <= 0) && std::isfinite(p.k);
  if (!k_ok && (p.compressor == Compressor::kTopk || p.compressor == Compressor::kRandomk ||
                p.compressor == Compressor::kDithering)) {
    return InvalidArgument(fmt::format("tensor '{}': compression parameters '{}' are out of range", tensor, p.ToString()));
  }
  const ValueType values = p.cast == WireCast::kFloat16    ? ValueType::kFloat16
                           : p.cast == WireCast::kBFloat16 ? ValueType::kBFloat16
                                                           : ValueType::kFloat32;
  switch (p.compressor) {
    case Compressor::kNone: return NewCastCodec(values, dtype, tensor);
    case Compressor::kOnebit: return NewOnebitCodec(p.scaling, dtype, tensor);
    case Compressor::kTopk: return NewTopkCodec(p.k, values, dtype, tensor);
    case Compressor::kRandomk: return NewRandomkCodec(p.k, p.seed, !p.error_feedback, values, dtype, tensor);
    case Compressor::kDithering:
      return NewDitheringCodec(static_cast<uint32_t>(p.k), p.partition, p.normalize, p.seed, dtype, tensor);
  }
  return Internal(fmt::format("tensor '{}': unknown compressor", tensor));
}

}  // namespace byteps::compress
