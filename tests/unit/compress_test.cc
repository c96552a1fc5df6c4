// The codecs (src/compress) against hand-computed or brute-force references, and statistical
// bounds for the random ones (unbiasedness, variance), at sizes 1, 7, 4097 and across a partition.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/half.h"
#include "compress/codec.h"
#include "compress/params.h"
#include "compress_test_util.h"

namespace byteps::compress {
namespace {

using namespace byteps::compress::test;

TEST(CastCodec, Float16AndBFloat16MatchTheScalarConversions) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{4097}}) {
    std::vector<float> x = Random(n, 1);
    x[0] = 65520.0f;  // rounds to inf in float16
    auto h = Make({{"cast", "fp16"}});
    auto p = Encode(*h, x);
    EXPECT_EQ(p.size(), 16 + 2 * n);
    auto y = Decode(*h, p, n);
    auto b = Make({{"cast", "bf16"}});
    auto z = Decode(*b, Encode(*b, x), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(y[i], HalfToFloat(FloatToHalf(x[i]))) << i;
      ASSERT_EQ(z[i], BFloat16ToFloat(FloatToBFloat16(x[i]))) << i;
    }
    std::vector<float> acc(n, 1.0f);
    ASSERT_TRUE(h->DecompressAdd(p.data(), p.size(), n, acc.data()).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 1.0f + y[i]) << i;
  }
}

TEST(CastCodec, OtherFloatDtypesConvertThroughFloat32) {
  std::vector<uint16_t> h = {FloatToHalf(1.5f), FloatToHalf(-2.0f), FloatToHalf(0.25f)};
  auto c = Make({{"cast", "fp16"}}, DataType::kFloat16);
  std::vector<uint8_t> out(c->MaxCompressedBytes(3));
  auto len = c->Compress(h.data(), 3, 0, 0, out.data(), out.size());
  ASSERT_TRUE(len.ok());
  std::vector<uint16_t> back(3);
  ASSERT_TRUE(c->Decompress(out.data(), len.value(), 3, back.data()).ok());
  EXPECT_EQ(back, h);

  std::vector<double> d = {0.5, -3.0, 8.0, 0.0};
  auto t = Make({{"compressor", "topk"}, {"k", "2"}}, DataType::kFloat64);
  out.assign(t->MaxCompressedBytes(4), 0);
  len = t->Compress(d.data(), 4, 0, 0, out.data(), out.size());
  ASSERT_TRUE(len.ok());
  std::vector<double> dd(4, 9.0);
  ASSERT_TRUE(t->Decompress(out.data(), len.value(), 4, dd.data()).ok());
  EXPECT_EQ(dd, (std::vector<double>{0, -3.0, 8.0, 0}));
}

// Parts of one tensor are compressed on their own (a key each); the pieces put back together
// equal the whole tensor's conversion, across the partition boundary.
TEST(CastCodec, PartitionBoundaryInsideATensor) {
  std::vector<float> x = Random(4097, 2);
  auto c = Make({{"cast", "bf16"}});
  std::vector<float> whole = Decode(*c, Encode(*c, x), x.size());
  std::vector<float> a(x.begin(), x.begin() + 4096), b(x.begin() + 4096, x.end());
  std::vector<float> joined = Decode(*c, Encode(*c, a, 0), a.size());
  std::vector<float> tail = Decode(*c, Encode(*c, b, 1), b.size());
  joined.insert(joined.end(), tail.begin(), tail.end());
  EXPECT_EQ(joined, whole);
}

// ---- onebit ----

TEST(OnebitCodec, HandComputedPayload) {
  std::vector<float> x = {1, -2, 0, -0.5f, 3, -1, 2};
  auto c = Make({{"compressor", "onebit"}, {"scaling", "true"}});
  auto p = Encode(*c, x);
  ASSERT_EQ(p.size(), 17u);
  EXPECT_EQ(p[0], 1);      // version
  EXPECT_EQ(p[1], 2);      // onebit
  EXPECT_EQ(p[3], 1);      // scaled
  EXPECT_EQ(p[4], 7);      // count
  EXPECT_EQ(p[16], 0x2a);  // negatives at 1, 3, 5
  const float s = static_cast<float>(9.5 / 7);
  float scale;
  std::memcpy(&scale, &p[12], 4);
  EXPECT_FLOAT_EQ(scale, s);
  EXPECT_EQ(Decode(*c, p, 7), (std::vector<float>{scale, -scale, scale, -scale, scale, -scale, scale}));

  auto u = Make({{"compressor", "onebit"}});
  EXPECT_EQ(Decode(*u, Encode(*u, x), 7), (std::vector<float>{1, -1, 1, -1, 1, -1, 1}));
}

TEST(OnebitCodec, SignsSurviveAtEverySize) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{4097}}) {
    std::vector<float> x = Random(n, 3);
    auto c = Make({{"compressor", "onebit"}});
    auto p = Encode(*c, x);
    EXPECT_EQ(p.size(), 16 + (n + 7) / 8);
    auto y = Decode(*c, p, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i] < 0 ? -1.0f : 1.0f) << i;
  }
}

// ---- topk ----

TEST(TopkCodec, HandComputedSelectionWithATie) {
  std::vector<float> x = {0.1f, -5, 3, 0.2f, -3, 7, 0};
  auto c = Make({{"compressor", "topk"}, {"k", "3"}});
  auto p = Encode(*c, x);
  ASSERT_EQ(p.size(), 16u + 3 * 8);
  uint32_t idx[3];
  std::memcpy(idx, &p[16], 12);
  EXPECT_EQ(std::vector<uint32_t>(idx, idx + 3), (std::vector<uint32_t>{1, 2, 5}));  // 3 beats -3: lower index
  EXPECT_EQ(Decode(*c, p, 7), (std::vector<float>{0, -5, 3, 0, 0, 7, 0}));
}

// Brute force: sort by (|x| desc, index asc), keep k.
std::vector<float> TopkReference(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  std::vector<float> y(x.size(), 0.0f);
  for (size_t j = 0; j < k; ++j) y[order[j]] = x[order[j]];
  return y;
}

TEST(TopkCodec, ExactAgainstBruteForceIncludingHardInputs) {
  std::vector<std::vector<float>> inputs = {Random(1, 4), Random(7, 4), Random(4097, 4), Random(100000, 5)};
  std::vector<float> sorted(100000);
  std::iota(sorted.begin(), sorted.end(), 0.0f);  // the sample misses the top: fallback path
  inputs.push_back(sorted);
  inputs.push_back(std::vector<float>(50000, 2.5f));  // all ties: the lowest indices
  std::vector<float> spikes(60000, 0.0f);
  for (size_t i = 0; i < spikes.size(); i += 997) spikes[i] = static_cast<float>(i);
  inputs.push_back(spikes);
  for (const auto& x : inputs) {
    for (double k : {0.01, 0.3, 5.0}) {
      auto c = Make({{"compressor", "topk"}, {"k", fmt::format("{}", k)}});
      auto y = Decode(*c, Encode(*c, x), x.size());
      ASSERT_EQ(y, TopkReference(x, ResolveK(k, x.size()))) << "n=" << x.size() << " k=" << k;
    }
  }
}

TEST(TopkCodec, ValuesCastToFloat16) {
  std::vector<float> x = Random(4097, 6);
  auto c = Make({{"compressor", "topk"}, {"k", "0.01"}, {"cast", "fp16"}});
  auto p = Encode(*c, x);
  EXPECT_EQ(p.size(), 16u + 40 * 6);
  auto y = Decode(*c, p, x.size());
  auto ref = TopkReference(x, 40);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], HalfToFloat(FloatToHalf(ref[i]))) << i;
}

// ---- randomk ----

std::vector<uint32_t> Indices(const std::vector<uint8_t>& p) {
  uint32_t k;
  std::memcpy(&k, &p[8], 4);
  std::vector<uint32_t> idx(k);
  std::memcpy(idx.data(), &p[16], 4 * k);
  return idx;
}

TEST(RandomkCodec, SameSeedKeyAndRoundSameIndicesOnEveryWorker) {
  std::vector<float> x = Random(4097, 7), other = Random(4097, 8);
  auto w0 = Make({{"compressor", "randomk"}, {"k", "0.01"}, {"seed", "42"}});
  auto w1 = Make({{"compressor", "randomk"}, {"k", "0.01"}, {"seed", "42"}});
  auto i0 = Indices(Encode(*w0, x, 3, 9));
  EXPECT_EQ(i0.size(), 40u);
  EXPECT_EQ(i0, Indices(Encode(*w1, other, 3, 9)));   // another worker's data, same draws
  EXPECT_NE(i0, Indices(Encode(*w0, x, 3, 10)));      // next round
  EXPECT_NE(i0, Indices(Encode(*w0, x, 4, 9)));       // another partition
  auto s = Make({{"compressor", "randomk"}, {"k", "0.01"}, {"seed", "43"}});
  EXPECT_NE(i0, Indices(Encode(*s, x, 3, 9)));
  for (size_t n : {size_t{1}, size_t{7}}) {
    std::vector<float> v = Random(n, 9);
    auto y = Decode(*w0, Encode(*w0, v), n);  // k = 1 of n, scaled by n
    EXPECT_EQ(std::count_if(y.begin(), y.end(), [](float f) { return f != 0; }), 1);
  }
}

TEST(RandomkCodec, UnbiasedWithinFiveSigma) {
  const size_t n = 64, k = 8, rounds = 50000;
  std::vector<float> x = Random(n, 10);
  auto c = Make({{"compressor", "randomk"}, {"k", "8"}, {"seed", "1"}});
  std::vector<double> sum(n, 0.0);
  std::vector<float> acc(n);
  for (size_t r = 0; r < rounds; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    auto p = Encode(*c, x, 0, r);
    ASSERT_TRUE(c->DecompressAdd(p.data(), p.size(), n, acc.data()).ok());
    for (size_t i = 0; i < n; ++i) sum[i] += acc[i];
  }
  for (size_t i = 0; i < n; ++i) {
    const double sigma = std::fabs(x[i]) * std::sqrt(double(n) / k / rounds);
    EXPECT_NEAR(sum[i] / rounds, x[i], 5 * sigma + 1e-6) << i;
  }
  // With error feedback the values travel unscaled (the original's behaviour).
  auto e = Make({{"compressor", "randomk"}, {"k", "1"}, {"ef", "vanilla"}});
  auto y = Decode(*e, Encode(*e, x), n);
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(y[i] == 0 || y[i] == x[i]);
}

// ---- dithering ----

TEST(DitheringCodec, ValuesOnTheLevelsAreExact) {
  std::vector<float> x = {1, -0.5f, 0, 0.25f};
  auto lin = Make({{"compressor", "dithering"}, {"k", "4"}});
  auto p = Encode(*lin, x);
  EXPECT_EQ(p.size(), 16u + 2);  // 4-bit codes
  EXPECT_EQ(p[16], 0x4 | (0x2 | 0x8) << 4);  // levels 4, -2
  EXPECT_EQ(p[17], 0x0 | 0x1 << 4);          // levels 0, 1
  EXPECT_EQ(Decode(*lin, p, 4), x);
  auto nat = Make({{"compressor", "dithering"}, {"k", "3"}, {"partition", "natural"}});
  p = Encode(*nat, x);  // L = 4: a = 4, 2, 0, 1 -> codes 3, 2, 0, 1
  EXPECT_EQ(p[16], 0x3 | (0x2 | 0x8) << 4);
  EXPECT_EQ(Decode(*nat, p, 4), x);
  auto zero = Decode(*lin, Encode(*lin, std::vector<float>(7, 0.0f)), 7);
  EXPECT_EQ(zero, std::vector<float>(7, 0.0f));
}

struct DitherCase {
  KV kv;
  bool linear;
};

TEST(DitheringCodec, UnbiasedWithBoundedVarianceAtEverySize) {
  const std::vector<DitherCase> cases = {
      {{{"compressor", "dithering"}, {"k", "4"}}, true},
      {{{"compressor", "dithering"}, {"k", "2"}, {"normalize", "l2"}}, true},
      {{{"compressor", "dithering"}, {"k", "300"}}, true},  // 16-bit codes
      {{{"compressor", "dithering"}, {"k", "4"}, {"partition", "natural"}}, false},
      {{{"compressor", "dithering"}, {"k", "3"}, {"partition", "natural"}, {"normalize", "l2"}}, false}};
  for (const auto& dc : cases) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{257}}) {
      std::vector<float> x = Random(n, 11);
      KV kv = dc.kv;
      kv.push_back({"seed", "5"});
      auto c = Make(kv);
      const size_t rounds = 2000;
      std::vector<double> sum(n, 0.0), sq(n, 0.0);
      for (size_t r = 0; r < rounds; ++r) {
        auto y = Decode(*c, Encode(*c, x, 1, r), n);
        for (size_t i = 0; i < n; ++i) {
          sum[i] += y[i];
          sq[i] += (y[i] - x[i]) * double(y[i] - x[i]);
        }
      }
      double norm = 0;
      for (float v : x) norm = std::max(norm, double(std::fabs(v)));
      double l2 = 0;
      for (float v : x) l2 += double(v) * v;
      const bool is_l2 = std::find(kv.begin(), kv.end(), std::make_pair(std::string("normalize"), std::string("l2"))) != kv.end();
      const double scale = is_l2 ? std::sqrt(l2) : norm;
      const double s = std::stod(kv[1].second);
      // The widest gap between neighbouring levels: scale / s (linear), scale / 2 (natural).
      const double gap = dc.linear ? scale / s : scale / 2;
      for (size_t i = 0; i < n; ++i) {
        const double var = sq[i] / rounds;
        ASSERT_LE(var, gap * gap / 4 * 1.1 + 1e-9) << dc.kv[1].second << " n=" << n << " i=" << i;
        const double sigma = gap / 2 / std::sqrt(double(rounds));
        ASSERT_NEAR(sum[i] / rounds, x[i], 5 * sigma + 1e-6) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(DitheringCodec, NonFiniteInputIsANamedError) {
  auto c = Make({{"compressor", "dithering"}, {"k", "4"}});
  std::vector<float> x = {1, NAN, 2};
  std::vector<uint8_t> out(c->MaxCompressedBytes(3));
  auto len = c->Compress(x.data(), 3, 0, 0, out.data(), out.size());
  ASSERT_FALSE(len.ok());
  EXPECT_NE(len.status().message().find("'t'"), std::string::npos);
  auto small = c->Compress(x.data(), 3, 0, 0, out.data(), out.size() - 1);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("output buffer"), std::string::npos);
}

TEST(CodecDecode, AnEmptyPartRoundTrips) {
  for (const KV& kv : {KV{{"cast", "fp16"}}, KV{{"compressor", "onebit"}, {"scaling", "true"}},
                       KV{{"compressor", "topk"}, {"k", "0.01"}}, KV{{"compressor", "randomk"}, {"k", "3"}},
                       KV{{"compressor", "dithering"}, {"k", "4"}, {"normalize", "l2"}}}) {
    auto c = Make(kv);
    std::vector<uint8_t> out(c->MaxCompressedBytes(0));
    auto len = c->Compress(nullptr, 0, 0, 0, out.data(), out.size());
    ASSERT_TRUE(len.ok()) << len.status().ToString();
    EXPECT_EQ(len.value(), 16u);
    EXPECT_TRUE(c->Decompress(out.data(), 16, 0, nullptr).ok());
    EXPECT_TRUE(c->DecompressAdd(out.data(), 16, 0, nullptr).ok());
  }
}

}  // namespace
}  // namespace byteps::compress
