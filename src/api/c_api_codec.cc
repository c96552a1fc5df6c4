// The C API's gradient codecs (byteps_codec_*): one tensor part compressed and decoded with the
// parameters a tensor would be declared with (src/compress/), outside any job; the codecs' NumPy
// reference tests run through them (tests/python/test_codec_reference.py).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "byteps/c_api.h"
#include "common/dtype.h"
#include "compress/codec.h"
#include "protocol/control.h"
#include "api/c_api_state.h"

namespace byteps::api {
namespace {

StatusOr<std::unique_ptr<compress::Codec>> CodecFor(const char* params, const char* tensor, int dtype) {
  const std::string name = tensor != nullptr ? tensor : "";
  if (params == nullptr) return InvalidArgument(fmt::format("codec of tensor '{}': params is NULL", name));
  auto type = DataTypeFromCode(dtype);
  if (!type) return InvalidArgument(fmt::format("codec of tensor '{}': unknown dtype code {}", name, dtype));
  BYTEPS_ASSIGN_OR_RETURN(compress::Params p, compress::ParseParams(protocol::ParseAttrs(params), name));
  return compress::MakeCodec(p, *type, name);
}

}  // namespace
}  // namespace byteps::api

using byteps::api::CodecFor;
using byteps::api::SetError;

extern "C" {

int64_t byteps_codec_max_bytes(const char* params, const char* tensor, int dtype, size_t count) {
  auto codec = CodecFor(params, tensor, dtype);
  if (!codec.ok()) return SetError(codec.status());
  byteps::api::ClearError();
  return static_cast<int64_t>(codec.value()->MaxCompressedBytes(count));
}

int64_t byteps_codec_compress(const char* params, const char* tensor, int dtype, const void* in, size_t count,
                              uint64_t key, uint64_t round, void* out, size_t cap) {
  auto codec = CodecFor(params, tensor, dtype);
  if (!codec.ok()) return SetError(codec.status());
  if ((in == nullptr && count > 0) || out == nullptr) {
    return SetError(byteps::InvalidArgument("byteps_codec_compress: a NULL buffer"));
  }
  auto n = codec.value()->Compress(in, count, key, round, static_cast<uint8_t*>(out), cap);
  if (!n.ok()) return SetError(n.status());
  byteps::api::ClearError();
  return static_cast<int64_t>(n.value());
}

int byteps_codec_decompress(const char* params, const char* tensor, int dtype, const void* payload, size_t len,
                            size_t count, void* out, int add) {
  auto codec = CodecFor(params, tensor, dtype);
  if (!codec.ok()) return SetError(codec.status());
  if (payload == nullptr || (out == nullptr && count > 0)) {
    return SetError(byteps::InvalidArgument("byteps_codec_decompress: a NULL buffer"));
  }
  const auto* p = static_cast<const uint8_t*>(payload);
  const byteps::Status st = add != 0 ? codec.value()->DecompressAdd(p, len, count, static_cast<float*>(out))
                                     : codec.value()->Decompress(p, len, count, out);
  if (!st.ok()) return SetError(st);
  byteps::api::ClearError();
  return 0;
}

}  // extern "C"
