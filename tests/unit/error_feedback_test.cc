// Error feedback (the sum of what was sent follows the gradients' sum; the learning-rate ratio)
// and Nesterov momentum.
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
#include "compress/error_feedback.h"
#include "compress/momentum.h"
#include "compress_test_util.h"

namespace byteps::compress {
namespace {

using namespace byteps::compress::test;

TEST(ErrorFeedback, SumOfWhatWasSentFollowsTheSumOfTheGradients) {
  const size_t n = 200, rounds = 300;
  for (const KV& kv : {KV{{"compressor", "topk"}, {"k", "0.05"}, {"ef", "vanilla"}},
                       KV{{"compressor", "onebit"}, {"scaling", "true"}, {"ef", "vanilla"}},
                       KV{{"compressor", "randomk"}, {"k", "0.1"}, {"ef", "vanilla"}},
                       KV{{"compressor", "dithering"}, {"k", "2"}, {"ef", "vanilla"}}}) {
    auto c = Make(kv);
    ErrorFeedback ef(n);
    std::vector<double> sent(n, 0.0), truth(n, 0.0);
    std::vector<uint8_t> out(c->MaxCompressedBytes(n));
    std::vector<float> acc(n);
    for (size_t r = 0; r < rounds; ++r) {
      std::vector<float> g = Random(n, 100 + r, 0.1f);
      auto len = ef.Compress(*c, g.data(), n, 0, r, out.data(), out.size());
      ASSERT_TRUE(len.ok()) << len.status().ToString();
      std::fill(acc.begin(), acc.end(), 0.0f);
      ASSERT_TRUE(c->DecompressAdd(out.data(), len.value(), n, acc.data()).ok());
      for (size_t i = 0; i < n; ++i) {
        sent[i] += acc[i];
        truth[i] += g[i];
      }
    }
    // Telescoping: sum(sent) = sum(g) - final residual, and the residual stays bounded.
    double diff = 0, total = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(sent[i], truth[i] - ef.residual()[i], 1e-2 * (1 + std::fabs(truth[i]))) << kv[0].second << " " << i;
      diff += (sent[i] - truth[i]) * (sent[i] - truth[i]);
      total += truth[i] * truth[i];
    }
    EXPECT_LT(std::sqrt(diff / total), 0.1) << kv[0].second;
  }
}

TEST(ErrorFeedback, LearningRateChangeScalesTheResidual) {
  auto c = Make({{"compressor", "onebit"}, {"ef", "vanilla"}});
  ErrorFeedback ef(1);
  std::vector<uint8_t> out(c->MaxCompressedBytes(1));
  float g = 0.25f;
  ASSERT_TRUE(ef.Compress(*c, &g, 1, 0, 0, out.data(), out.size()).ok());
  EXPECT_FLOAT_EQ(ef.residual()[0], -0.75f);  // sent +1
  ef.SetLearningRate(0.1);
  ef.SetLearningRate(0.05);  // lr halved: the residual counts twice
  g = 0;
  ASSERT_TRUE(ef.Compress(*c, &g, 1, 0, 1, out.data(), out.size()).ok());
  EXPECT_FLOAT_EQ(ef.residual()[0], -0.5f);  // p = -1.5, sent -1
  auto f16 = Make({{"cast", "fp16"}}, DataType::kFloat16);
  EXPECT_FALSE(ef.Compress(*f16, &g, 1, 0, 0, out.data(), out.size()).ok());
}

TEST(NesterovMomentum, AsTheOriginalApplies) {
  NesterovMomentum m(2, 0.9);
  std::vector<float> g = {1, -2};
  m.Apply(g.data(), 2);
  EXPECT_FLOAT_EQ(g[0], 1.9f);
  EXPECT_FLOAT_EQ(g[1], -3.8f);
  g = {1, 0};
  m.Apply(g.data(), 2);
  EXPECT_FLOAT_EQ(m.momentum()[0], 1.9f);
  EXPECT_FLOAT_EQ(g[0], 1 + 0.9f * 1.9f);
  EXPECT_FLOAT_EQ(g[1], 0.9f * -1.8f);
}

}  // namespace
}  // namespace byteps::compress
