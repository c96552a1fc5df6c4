// randomk: k elements drawn uniformly with replacement from the stream (seed, key, round): the
// same indices on every worker for a tensor part and round. Body: k u32 indices (in draw order,
// repeats possible), then the k values. Decoding adds each pair, so a repeated index counts once
// per draw. Unbiased (flag 1): each value is x * n / k, so the decoded tensor's expectation is the
// input; without (error feedback on, as the original) the values are x itself.
#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <vector>

#include "compress/codec_impls.h"
#include "compress/counter_rng.h"
#include "compress/values.h"

namespace byteps::compress {
namespace {

class RandomkCodec : public Codec {
 public:
  RandomkCodec(double k, uint64_t seed, bool unbiased, ValueType type, DataType dtype, std::string tensor)
      : Codec(CodecId::kRandomk, dtype, std::move(tensor)), k_(k), seed_(seed), unbiased_(unbiased), type_(type) {}

  size_t MaxCompressedBytes(size_t n) const override {
    return kPayloadHeaderSize + PairsBytes(type_, ResolveK(k_, n));
  }

 protected:
  StatusOr<size_t> CompressBody(const float* in, size_t n, uint64_t key, uint64_t round, PayloadHeader* h,
                                uint8_t* body) override {
    const uint32_t k = ResolveK(k_, n);
    h->value_type = type_;
    h->param = k;
    h->flags = unbiased_ ? kFlagUnbiased : 0;
    const float scale = unbiased_ && k > 0 ? static_cast<float>(static_cast<double>(n) / k) : 1.0f;
    const uint64_t base = StreamBase(seed_, key, round);
    vals_.resize(k);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = UniformBelow(SplitMix64(base + j), static_cast<uint32_t>(n));
      std::memcpy(body + 4 * size_t{j}, &i, 4);
      vals_[j] = in[i] * scale;
    }
    StoreValues(type_, vals_.data(), k, body + size_t{k} * 4);
    return PairsBytes(type_, k);
  }

  Status CheckBody(const PayloadHeader& h, const uint8_t* body, size_t body_len) const override {
    const uint32_t k = ResolveK(k_, h.count);
    BYTEPS_RETURN_IF_ERROR(
        CheckFields(h, type_, unbiased_ ? kFlagUnbiased : 0, k, 0.0f, body_len, PairsBytes(type_, k)));
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = LoadIndex(body, j);
      if (i >= h.count) return DecodeError(fmt::format("index {} (pair {}) out of range", i, j));
    }
    return Status::Ok();
  }

  void AddBody(const PayloadHeader& h, const uint8_t* body, float* acc) const override {
    AddPairs(type_, body, h.param, acc);
  }

 private:
  double k_;
  uint64_t seed_;
  bool unbiased_;
  ValueType type_;
  std::vector<float> vals_;
};

}  // namespace

std::unique_ptr<Codec> NewRandomkCodec(double k, uint64_t seed, bool unbiased, ValueType type, DataType dtype,
                                       std::string tensor) {
  return std::make_unique<RandomkCodec>(k, seed, unbiased, type, dtype, std::move(tensor));
}

}  // namespace byteps::compress
