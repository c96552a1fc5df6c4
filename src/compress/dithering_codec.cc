// dithering: stochastic quantisation of |x| / norm to s levels, unbiased. norm = max |x| or the
// L2 norm (header's scale). Linear partition: levels q = 0..s, value q * norm / s. Natural: q in
// {0, 1, 2, 4, .., 2^(s-1)} (level code c: 0, or q = 2^(c-1)), value q * norm / 2^(s-1). Each
// element rounds up with probability equal to its distance from the level below (divided by the
// gap), using draw i of the stream (seed, key, round).
//
// Body: one code of w bits per element, w = 2, 4, 8 or 16 (the smallest that holds the sign and
// the level s): code = sign << (w - 1) | level, sign 1 = negative. Codes are packed least
// significant first, 8 / w to a byte (w = 16: u16); the bits past the count are 0.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "compress/codec_impls.h"
#include "compress/counter_rng.h"

namespace byteps::compress {
namespace {

uint32_t CodeBits(uint32_t levels) {
  const uint32_t need = static_cast<uint32_t>(std::bit_width(levels)) + 1;
  return need <= 2 ? 2 : need <= 4 ? 4 : need <= 8 ? 8 : 16;
}

class DitheringCodec : public Codec {
 public:
  DitheringCodec(uint32_t levels, Partition partition, Normalize normalize, uint64_t seed, DataType dtype,
                 std::string tensor)
      : Codec(CodecId::kDithering, dtype, std::move(tensor)),
        s_(levels),
        natural_(partition == Partition::kNatural),
        l2_(normalize == Normalize::kL2),
        seed_(seed),
        w_(CodeBits(levels)),
        top_(natural_ ? static_cast<float>(uint32_t{1} << (levels - 1)) : static_cast<float>(levels)) {}

  size_t MaxCompressedBytes(size_t n) const override { return kPayloadHeaderSize + BodyBytes(n); }

 protected:
  StatusOr<size_t> CompressBody(const float* in, size_t n, uint64_t key, uint64_t round, PayloadHeader* h,
                                uint8_t* body) override {
    uint32_t max_key = 0;
    double sq = 0;
    for (size_t b = 0; b < n; b += 4096) {
      const size_t e = std::min(n, b + 4096);
      float lane = 0;
      for (size_t i = b; i < e; ++i) {
        max_key = std::max(max_key, std::bit_cast<uint32_t>(in[i]) & 0x7fffffffu);
        if (l2_) lane += in[i] * in[i];
      }
      sq += lane;
    }
    if (max_key >= 0x7f800000u) {
      return InvalidArgument(fmt::format("compressing tensor '{}' (dithering): it holds inf or NaN, which "
                                         "cannot be quantised",
                                         tensor()));
    }
    const float norm = l2_ ? static_cast<float>(std::sqrt(sq)) : std::bit_cast<float>(max_key);
    h->flags = Flags();
    h->param = s_;
    h->scale = norm;
    const size_t bytes = BodyBytes(n);
    std::memset(body, 0, bytes);
    if (norm == 0 || !std::isfinite(norm)) {
      if (!std::isfinite(norm)) {
        return InvalidArgument(fmt::format("compressing tensor '{}' (dithering): its norm overflows float32",
                                           tensor()));
      }
      return bytes;
    }
    const float inv = static_cast<float>(static_cast<double>(top_) / norm);
    const uint64_t base = StreamBase(seed_, key, round);
    const uint32_t sign_bit = 1u << (w_ - 1);
    for (size_t i = 0; i < n; ++i) {
      const float a = std::min(std::fabs(in[i]) * inv, top_);
      const float u = UniformFloat(SplitMix64(base + i));
      uint32_t level;
      if (!natural_) {
        const float fl = std::floor(a);
        level = static_cast<uint32_t>(fl) + (u < a - fl ? 1u : 0u);
      } else if (a < 1.0f) {
        level = u < a ? 1u : 0u;
      } else {
        const uint32_t e = (std::bit_cast<uint32_t>(a) >> 23) - 127;  // a >= 1: normal, floor(log2 a)
        const float f = std::bit_cast<float>((e + 127) << 23);
        level = e + 1 + (u < (a - f) / f ? 1u : 0u);
      }
      const uint32_t code = level | (in[i] < 0.0f ? sign_bit : 0u);
      if (w_ == 16) {
        const uint16_t c16 = static_cast<uint16_t>(code);
        std::memcpy(body + 2 * i, &c16, 2);
      } else {
        body[i * w_ / 8] |= static_cast<uint8_t>(code << ((i * w_) % 8));
      }
    }
    return bytes;
  }

  Status CheckBody(const PayloadHeader& h, const uint8_t* body, size_t body_len) const override {
    const size_t want = BodyBytes(h.count);
    BYTEPS_RETURN_IF_ERROR(CheckFields(h, ValueType::kFloat32, Flags(), s_, std::nullopt, body_len, want));
    if (!std::isfinite(h.scale) || h.scale < 0) return DecodeError(fmt::format("norm {} is not a finite number >= 0", h.scale));
    const uint32_t level_mask = (1u << (w_ - 1)) - 1;
    for (size_t i = 0; i < h.count; ++i) {
      if ((Code(body, i) & level_mask) > s_) {
        return DecodeError(fmt::format("element {} has level {}, above the {} levels", i, Code(body, i) & level_mask, s_));
      }
    }
    if (w_ < 8 && (size_t{h.count} * w_) % 8 != 0 &&
        (body[want - 1] >> ((size_t{h.count} * w_) % 8)) != 0) {
      return DecodeError("bits set past the element count");
    }
    return Status::Ok();
  }

  void AddBody(const PayloadHeader& h, const uint8_t* body, float* acc) const override {
    const float unit = h.scale / top_;
    const size_t n = h.count;
    if (w_ == 16) {
      for (size_t i = 0; i < n; ++i) acc[i] += Value(Code(body, i), unit);
      return;
    }
    float table[256];
    for (uint32_t c = 0; c < (1u << w_); ++c) table[c] = Value(c, unit);
    const uint32_t per = 8 / w_, mask = (1u << w_) - 1;
    const size_t full = n / per;
    for (size_t b = 0; b < full; ++b) {
      const uint32_t byte = body[b];
      for (uint32_t j = 0; j < per; ++j) acc[b * per + j] += table[(byte >> (j * w_)) & mask];
    }
    for (size_t i = full * per; i < n; ++i) acc[i] += table[Code(body, i)];
  }

 private:
  size_t BodyBytes(size_t n) const { return (n * w_ + 7) / 8; }
  uint8_t Flags() const { return static_cast<uint8_t>((natural_ ? kFlagNatural : 0) | (l2_ ? kFlagL2 : 0)); }

  uint32_t Code(const uint8_t* body, size_t i) const {
    if (w_ == 16) {
      uint16_t c;
      std::memcpy(&c, body + 2 * i, 2);
      return c;
    }
    return (body[i * w_ / 8] >> ((i * w_) % 8)) & ((1u << w_) - 1);
  }

  // A checked code's value (levels above s_ only in the table's unused entries).
  float Value(uint32_t code, float unit) const {
    const uint32_t level = code & ((1u << (w_ - 1)) - 1);
    float q = static_cast<float>(level);
    if (natural_) q = level == 0 ? 0.0f : std::ldexp(1.0f, static_cast<int>(std::min<uint32_t>(level, 64)) - 1);
    const float v = q * unit;
    return (code >> (w_ - 1)) ? -v : v;
  }

  uint32_t s_;
  bool natural_;
  bool l2_;
  uint64_t seed_;
  uint32_t w_;
  float top_;
};

}  // namespace

std::unique_ptr<Codec> NewDitheringCodec(uint32_t levels, Partition partition, Normalize normalize, uint64_t seed,
                                         DataType dtype, std::string tensor) {
  return std::make_unique<DitheringCodec>(levels, partition, normalize, seed, dtype, std::move(tensor));
}

}  // namespace byteps::compress
