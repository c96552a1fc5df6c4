// topk: the k elements of largest magnitude. Body: k u32 indices, strictly increasing, then their
// k values (value type of the header). Ties in magnitude go to the lower index, so the selection
// is exact and the same on every run. NaN counts as larger than every number (it is kept, and
// the sum shows it, as an uncompressed push would).
//
// Speed: a sample of the magnitudes gives a threshold that about 1.5 k elements pass; one pass
// collects those candidates and nth_element finds the k-th largest among them. A threshold that
// lets fewer than k through (an unlucky sample) falls back to every element.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <vector>

#include "compress/codec_impls.h"
#include "compress/values.h"

namespace byteps::compress {
namespace {

constexpr size_t kSample = 8192;
constexpr size_t kBlock = 4096;

// The magnitude's bits: integers order as the magnitudes do (NaN above inf).
inline uint32_t MagnitudeKey(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }

class TopkCodec : public Codec {
 public:
  TopkCodec(double k, ValueType type, DataType dtype, std::string tensor)
      : Codec(CodecId::kTopk, dtype, std::move(tensor)), k_(k), type_(type) {}

  size_t MaxCompressedBytes(size_t n) const override {
    return kPayloadHeaderSize + PairsBytes(type_, ResolveK(k_, n));
  }

 protected:
  StatusOr<size_t> CompressBody(const float* in, size_t n, uint64_t, uint64_t, PayloadHeader* h,
                                uint8_t* body) override {
    const uint32_t k = ResolveK(k_, n);
    h->value_type = type_;
    h->param = k;
    idx_.resize(k);
    if (k == n) {
      for (uint32_t i = 0; i < k; ++i) idx_[i] = i;
    } else {
      Collect(in, n, k < n / 8 && n > 2 * kSample ? Threshold(in, n, k) : 0);
      if (cands_.size() < k) Collect(in, n, 0);
      // The k-th largest candidate is the cut; candidates are unique and in index order, so one
      // more pass keeps exactly k, already sorted by index (no sort of the k indices).
      order_.assign(cands_.begin(), cands_.end());
      std::nth_element(order_.begin(), order_.begin() + (k - 1), order_.end(), std::greater<uint64_t>());
      const uint64_t cut = order_[k - 1];
      uint32_t j = 0;
      for (uint64_t c : cands_) {
        if (c >= cut) idx_[j++] = 0xffffffffu - static_cast<uint32_t>(c);
      }
    }
    vals_.resize(k);
    for (uint32_t j = 0; j < k; ++j) vals_[j] = in[idx_[j]];
    if (k > 0) std::memcpy(body, idx_.data(), size_t{k} * 4);
    StoreValues(type_, vals_.data(), k, body + size_t{k} * 4);
    return PairsBytes(type_, k);
  }

  Status CheckBody(const PayloadHeader& h, const uint8_t* body, size_t body_len) const override {
    const uint32_t k = ResolveK(k_, h.count);
    BYTEPS_RETURN_IF_ERROR(CheckFields(h, type_, 0, k, 0.0f, body_len, PairsBytes(type_, k)));
    int64_t prev = -1;
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = LoadIndex(body, j);
      if (i >= h.count || static_cast<int64_t>(i) <= prev) {
        return DecodeError(fmt::format("index {} (pair {}) out of range or not increasing", i, j));
      }
      prev = i;
    }
    return Status::Ok();
  }

  void AddBody(const PayloadHeader& h, const uint8_t* body, float* acc) const override {
    AddPairs(type_, body, h.param, acc);
  }

 private:
  // A magnitude key about 1.5 k + 16 of the sampled elements (scaled to n) reach.
  uint32_t Threshold(const float* in, size_t n, uint32_t k) {
    sample_.resize(kSample);
    const size_t step = n / kSample;
    for (size_t j = 0; j < kSample; ++j) sample_[j] = MagnitudeKey(in[j * step]);
    size_t want = static_cast<size_t>(1.5 * static_cast<double>(k) * kSample / static_cast<double>(n)) + 16;
    if (want >= kSample) return 0;
    std::nth_element(sample_.begin(), sample_.begin() + want, sample_.end(), std::greater<uint32_t>());
    return sample_[want];
  }

  // cands_ = (key << 32 | ~index) of every element whose key >= threshold: sorting these
  // descending orders by magnitude, then by lower index.
  void Collect(const float* in, size_t n, uint32_t threshold) {
    if (cands_.size() < std::min(n, kBlock * 4)) cands_.resize(std::min(n, kBlock * 4));
    size_t c = 0;
    for (size_t b = 0; b < n; b += kBlock) {
      const size_t e = std::min(n, b + kBlock);
      if (cands_.size() < c + (e - b)) cands_.resize(std::max(cands_.size() * 2, c + (e - b)));
      uint64_t* out = cands_.data();
      for (size_t i = b; i < e; ++i) {
        const uint32_t key = MagnitudeKey(in[i]);
        out[c] = (uint64_t{key} << 32) | (0xffffffffu - static_cast<uint32_t>(i));
        c += key >= threshold;
      }
    }
    cands_.resize(c);
  }

  double k_;
  ValueType type_;
  std::vector<uint32_t> sample_;
  std::vector<uint64_t> cands_;
  std::vector<uint64_t> order_;  // a copy of cands_ for nth_element
  std::vector<uint32_t> idx_;
  std::vector<float> vals_;
};

}  // namespace

std::unique_ptr<Codec> NewTopkCodec(double k, ValueType type, DataType dtype, std::string tensor) {
  return std::make_unique<TopkCodec>(k, type, dtype, std::move(tensor));
}

}  // namespace byteps::compress
