// A gradient codec: compresses a tensor's float values into a self-describing payload (a
// versioned header, payload_header.h, then the codec's body; docs/wire-format.md) and decodes it,
// either into a tensor or added onto a float32 accumulator (the server's sum path).
//
// Input dtypes: float32, and float16/bfloat16/float64 through a conversion to float32 (a scratch
// buffer of the codec). Decoding validates the whole payload before writing anything: a damaged
// or foreign payload is a ProtocolError naming the tensor, never an out-of-bounds read, and leaves
// the output (or the accumulator) untouched.
//
// Threading: one instance is used by one thread at a time (it owns scratch buffers); distinct
// instances are independent. MakeCodec is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "compress/params.h"
#include "compress/payload_header.h"

namespace byteps::compress {

class Codec {
 public:
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  CodecId id() const { return id_; }
  DataType dtype() const { return dtype_; }
  const std::string& tensor() const { return tensor_; }

  // The most bytes Compress writes for n elements (header included).
  virtual size_t MaxCompressedBytes(size_t n) const = 0;

  // Compresses the n elements of dtype() at `in` into out[0..cap); returns the bytes written.
  // key and round select the random stream of randomk and dithering (same seed, key and round:
  // the same draws on every worker). `in` is not modified. Errors (InvalidArgument, naming the
  // tensor): cap < MaxCompressedBytes(n), n >= 2^32, a non-finite value where the codec needs
  // finite ones (dithering).
  StatusOr<size_t> Compress(const void* in, size_t n, uint64_t key, uint64_t round, uint8_t* out, size_t cap);

  // Decodes the payload in[0..len) of a tensor part of n elements into out (n elements of dtype()).
  Status Decompress(const uint8_t* in, size_t len, size_t n, void* out);
  // acc[i] += decoded element i, for i < n.
  Status DecompressAdd(const uint8_t* in, size_t len, size_t n, float* acc);

 protected:
  Codec(CodecId id, DataType dtype, std::string tensor) : id_(id), dtype_(dtype), tensor_(std::move(tensor)) {}

  // Compresses n float32 values: fills the header's codec fields (value_type, flags, param, scale)
  // and writes the body at `body` (room for MaxCompressedBytes(n) - kPayloadHeaderSize bytes).
  // Returns the body's size, or an error.
  virtual StatusOr<size_t> CompressBody(const float* in, size_t n, uint64_t key, uint64_t round, PayloadHeader* h,
                                        uint8_t* body) = 0;
  // Checks that a header of this codec (id and count already checked) and its body are exactly
  // what this codec writes: flags, param, value type, body length, every index and level.
  virtual Status CheckBody(const PayloadHeader& h, const uint8_t* body, size_t body_len) const = 0;
  // acc[i] += decoded element i (after CheckBody passed).
  virtual void AddBody(const PayloadHeader& h, const uint8_t* body, float* acc) const = 0;
  // out[i] = decoded element i (after CheckBody passed). Default: zero, then AddBody.
  virtual void DecodeBody(const PayloadHeader& h, const uint8_t* body, size_t n, float* out) const;

  // ProtocolError "compressed payload of tensor '<tensor>' (<codec>): <why>".
  Status DecodeError(const std::string& why) const;
  // The header's value type, flags, param (and scale, when this codec fixes it) against this
  // codec's configuration, and the body's length against the one they imply.
  Status CheckFields(const PayloadHeader& h, ValueType type, uint8_t flags, uint32_t param,
                     std::optional<float> scale, size_t body_len, size_t want_len) const;

 private:
  StatusOr<PayloadHeader> CheckPayload(const uint8_t* in, size_t len, size_t n) const;

  CodecId id_;
  DataType dtype_;
  std::string tensor_;
  std::vector<float> scratch_;  // float32 copies of other dtypes
};

// The number of elements topk/randomk keep of n: k < 1 is a fraction (at least 1), k >= 1 a count
// (at most n). 0 for n = 0.
uint32_t ResolveK(double k, size_t n);

// Builds the codec for a tensor's parameters. Errors (InvalidArgument, naming the tensor):
// nothing configured, a dtype the codec cannot take (integers, bool).
StatusOr<std::unique_ptr<Codec>> MakeCodec(const Params& params, DataType dtype, const std::string& tensor);

}  // namespace byteps::compress
