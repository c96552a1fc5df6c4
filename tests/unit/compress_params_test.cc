// Compression parameters: parsing, the canonical form, named errors, k's rule, dtypes.
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

TEST(CompressParams, ParsesTheOriginalKeysAndAliases) {
  auto a = ParseParams({{"compressor", "TopK"}, {"k", "0.01"}, {"ef", "vanilla"}, {"cast", "fp16"}}, "t");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->compressor, Compressor::kTopk);
  EXPECT_DOUBLE_EQ(a->k, 0.01);
  EXPECT_TRUE(a->error_feedback);
  EXPECT_EQ(a->cast, WireCast::kFloat16);
  auto b = ParseParams({{"cast", "float16"}, {"ef_type", "vanilla"}, {"compressor_k", "0.01"},
                        {"compressor_type", "topk"}}, "t");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a.value(), b.value());
  EXPECT_EQ(a->ToString(), "compressor=topk,k=0.01,ef=vanilla,cast=fp16");
  EXPECT_EQ(a->ToString(), b->ToString());

  auto d = ParseParams({{"compressor", "dithering"}, {"k", "4"}, {"dithering_partition", "1"},
                        {"dithering_normalize", "1"}, {"seed", "7"}, {"momentum", "nesterov"}, {"mu", "0.9"}}, "t");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->ToString(), "compressor=dithering,k=4,seed=7,partition=natural,normalize=l2,momentum=nesterov,mu=0.9");
  auto o = ParseParams({{"compressor", "onebit"}, {"scaling", "true"}}, "t");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->ToString(), "compressor=onebit,scaling=true");
  EXPECT_NE(o->ToString(), ParseParams({{"compressor", "onebit"}}, "t")->ToString());
}

void ExpectError(const KV& kv, const std::string& key) {
  auto p = ParseParams(kv, "layer1.w");
  ASSERT_FALSE(p.ok()) << "accepted: " << p->ToString();
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("'layer1.w'"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("'" + key + "'"), std::string::npos) << p.status().message();
}

TEST(CompressParams, EveryErrorNamesTheTensorAndTheKey) {
  ExpectError({{"compressor", "twobit"}}, "compressor");
  ExpectError({{"compressor", "topk"}}, "k");
  ExpectError({{"compressor", "topk"}, {"k", "0"}}, "k");
  ExpectError({{"compressor", "topk"}, {"k", "-0.1"}}, "k");
  ExpectError({{"compressor", "topk"}, {"k", "1.5"}}, "k");
  ExpectError({{"compressor", "topk"}, {"k", "nan"}}, "k");
  ExpectError({{"compressor", "randomk"}, {"k", "abc"}}, "k");
  ExpectError({{"compressor", "dithering"}, {"k", "0.5"}}, "k");
  ExpectError({{"compressor", "dithering"}, {"k", "32"}, {"partition", "natural"}}, "k");
  ExpectError({{"compressor", "dithering"}, {"k", "4"}, {"normalize", "l1"}}, "normalize");
  ExpectError({{"compressor", "onebit"}, {"scaling", "yes"}}, "scaling");
  ExpectError({{"compressor", "topk"}, {"k", "0.1"}, {"scaling", "true"}}, "scaling");
  ExpectError({{"compressor", "onebit"}, {"cast", "fp16"}}, "cast");
  ExpectError({{"compressor", "onebit"}, {"ef", "fancy"}}, "ef");
  ExpectError({{"compressor", "onebit"}, {"momentum", "nesterov"}}, "mu");
  ExpectError({{"compressor", "onebit"}, {"mu", "0.9"}}, "mu");
  ExpectError({{"compressor", "onebit"}, {"momentum", "nesterov"}, {"mu", "1.5"}}, "mu");
  ExpectError({{"compressor", "onebit"}, {"colour", "red"}}, "colour");
  ExpectError({{"compressor", "onebit"}, {"compressor_type", "onebit"}}, "compressor");
  ExpectError({{"ef", "vanilla"}}, "ef");
}

TEST(CompressParams, IntegerTensorsAreRefusedByName) {
  auto p = ParseParams({{"compressor", "onebit"}}, "t");
  for (DataType t : {DataType::kInt32, DataType::kInt64, DataType::kUint8, DataType::kBool}) {
    auto c = MakeCodec(p.value(), t, "emb.idx");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("'emb.idx'"), std::string::npos);
    EXPECT_NE(c.status().message().find(DataTypeName(t)), std::string::npos) << c.status().message();
  }
  EXPECT_FALSE(MakeCodec(Params{}, DataType::kFloat32, "t").ok());
  Params bad;  // built by hand, not through ParseParams
  bad.compressor = Compressor::kDithering;
  bad.k = 0;
  auto c = MakeCodec(bad, DataType::kFloat32, "t");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("out of range"), std::string::npos);
  bad.compressor = Compressor::kTopk;
  EXPECT_FALSE(MakeCodec(bad, DataType::kFloat32, "t").ok());
}

TEST(CompressParams, KIsAFractionBelowOneAndACountAbove) {
  EXPECT_EQ(ResolveK(0.01, 7), 1u);
  EXPECT_EQ(ResolveK(0.5, 7), 3u);
  EXPECT_EQ(ResolveK(0.01, 100000), 1000u);
  EXPECT_EQ(ResolveK(10, 7), 7u);
  EXPECT_EQ(ResolveK(10, 70), 10u);
  EXPECT_EQ(ResolveK(0.5, 0), 0u);
}

}  // namespace
}  // namespace byteps::compress
