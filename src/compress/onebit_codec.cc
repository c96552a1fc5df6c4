// onebit (signSGD): one bit per element, 1 = negative (x < 0), element i in bit i % 8 of body byte
// i / 8 (least significant first); the bits past the count are 0. Decoded: +scale or -scale, where
// scale (in the header) is mean |x| with scaling, else 1.
#include <bit>
#include <cmath>

#include "compress/codec_impls.h"

namespace byteps::compress {
namespace {

class OnebitCodec : public Codec {
 public:
  OnebitCodec(bool scaling, DataType dtype, std::string tensor)
      : Codec(CodecId::kOnebit, dtype, std::move(tensor)), scaling_(scaling) {}

  size_t MaxCompressedBytes(size_t n) const override { return kPayloadHeaderSize + (n + 7) / 8; }

 protected:
  StatusOr<size_t> CompressBody(const float* in, size_t n, uint64_t, uint64_t, PayloadHeader* h,
                                uint8_t* body) override {
    const size_t full = n / 8;
    // Eight float lanes summed per block of 8, the blocks' sums in double: vectorisable, and exact
    // enough (each lane sums at most n/8 magnitudes before it is flushed every 4096 elements).
    double total = 0;
    constexpr size_t kFlush = 4096 / 8;
    for (size_t b0 = 0; b0 < full; b0 += kFlush) {
      const size_t b1 = std::min(full, b0 + kFlush);
      float lanes[8] = {};
      for (size_t b = b0; b < b1; ++b) {
        const float* x = in + 8 * b;
        uint8_t bits = 0;
        for (int j = 0; j < 8; ++j) {
          bits |= static_cast<uint8_t>((x[j] < 0.0f) << j);
          lanes[j] += std::fabs(x[j]);
        }
        body[b] = bits;
      }
      for (float l : lanes) total += l;
    }
    if (n % 8 != 0) {
      uint8_t bits = 0;
      for (size_t i = 8 * full; i < n; ++i) {
        bits |= static_cast<uint8_t>((in[i] < 0.0f) << (i % 8));
        total += std::fabs(in[i]);
      }
      body[full] = bits;
    }
    h->flags = scaling_ ? kFlagOnebitScaled : 0;
    h->scale = scaling_ ? (n == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(n))) : 1.0f;
    return (n + 7) / 8;
  }

  Status CheckBody(const PayloadHeader& h, const uint8_t* body, size_t body_len) const override {
    const size_t want = (size_t{h.count} + 7) / 8;
    BYTEPS_RETURN_IF_ERROR(CheckFields(h, ValueType::kFloat32, scaling_ ? kFlagOnebitScaled : 0, 0,
                                       scaling_ ? std::nullopt : std::optional<float>(1.0f), body_len, want));
    if (h.count % 8 != 0 && (body[want - 1] >> (h.count % 8)) != 0) {
      return DecodeError("bits set past the element count");
    }
    return Status::Ok();
  }

  void AddBody(const PayloadHeader& h, const uint8_t* body, float* acc) const override {
    const float s = h.scale;
    const size_t n = h.count;
    const size_t full = n / 8;
    for (size_t b = 0; b < full; ++b) {
      const uint32_t bits = body[b];
      float* a = acc + 8 * b;
      for (int j = 0; j < 8; ++j) {
        // The sign bit of the float moved into place: +s or -s without a branch.
        a[j] += std::bit_cast<float>(std::bit_cast<uint32_t>(s) ^ (((bits >> j) & 1u) << 31));
      }
    }
    for (size_t i = 8 * full; i < n; ++i) acc[i] += ((body[full] >> (i % 8)) & 1) ? -s : s;
  }

 private:
  bool scaling_;
};

}  // namespace

std::unique_ptr<Codec> NewOnebitCodec(bool scaling, DataType dtype, std::string tensor) {
  return std::make_unique<OnebitCodec>(scaling, dtype, std::move(tensor));
}

}  // namespace byteps::compress
