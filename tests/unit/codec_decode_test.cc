// Decoding damaged or foreign payloads: every check is a named error and nothing is written.
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

void ExpectDecodeError(Codec& c, std::vector<uint8_t> p, size_t n, const std::string& words) {
  std::vector<float> acc(n, 7.0f);
  Status st = c.DecompressAdd(p.data(), p.size(), n, acc.data());
  ASSERT_FALSE(st.ok()) << words;
  EXPECT_EQ(st.code(), StatusCode::kProtocol);
  EXPECT_NE(st.message().find("tensor 't'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  EXPECT_EQ(acc, std::vector<float>(n, 7.0f)) << "the accumulator was touched: " << words;
  std::vector<float> out(n, 7.0f);
  EXPECT_FALSE(c.Decompress(p.data(), p.size(), n, out.data()).ok());
}

TEST(CodecDecode, EveryDamageIsANamedErrorAndTouchesNothing) {
  const size_t n = 4097;
  std::vector<float> x = Random(n, 12);
  const std::vector<KV> all = {{{"cast", "fp16"}},
                               {{"compressor", "onebit"}, {"scaling", "true"}},
                               {{"compressor", "topk"}, {"k", "0.01"}},
                               {{"compressor", "randomk"}, {"k", "0.01"}},
                               {{"compressor", "dithering"}, {"k", "4"}}};
  for (const auto& kv : all) {
    auto c = Make(kv);
    auto good = Encode(*c, x);
    std::vector<float> acc(n, 0.0f);
    ASSERT_TRUE(c->DecompressAdd(good.data(), good.size(), n, acc.data()).ok());

    ExpectDecodeError(*c, std::vector<uint8_t>(good.begin(), good.begin() + 10), n, "shorter than its 16-byte header");
    ExpectDecodeError(*c, std::vector<uint8_t>(good.begin(), good.end() - 1), n, "expected");
    auto longer = good;
    longer.push_back(0);
    ExpectDecodeError(*c, longer, n, "expected");
    auto version = good;
    version[0] = 2;
    ExpectDecodeError(*c, version, n, "format version 2");
    auto id = good;
    id[1] = 9;
    ExpectDecodeError(*c, id, n, "unknown codec id 9");
    auto flags = good;
    flags[3] ^= 0x80;
    ExpectDecodeError(*c, flags, n, "differ from this codec's");
    ExpectDecodeError(*c, good, n - 1, "elements");
    // Another codec's payload.
    auto other = Make(kv[0].second == "onebit" ? KV{{"cast", "bf16"}} : KV{{"compressor", "onebit"}});
    ExpectDecodeError(*c, Encode(*other, x), n, "written by codec");
  }
}

TEST(CodecDecode, IndicesLevelsAndPaddingAreChecked) {
  std::vector<float> x = Random(4097, 13);
  auto t = Make({{"compressor", "topk"}, {"k", "0.01"}});
  auto p = Encode(*t, x);
  auto bad = p;
  const uint32_t out_of_range = 4097;
  std::memcpy(&bad[16 + 4 * 39], &out_of_range, 4);
  ExpectDecodeError(*t, bad, 4097, "index 4097 (pair 39) out of range");
  bad = p;
  std::memcpy(&bad[16 + 4], &bad[16], 4);  // a repeated index
  ExpectDecodeError(*t, bad, 4097, "not increasing");

  auto r = Make({{"compressor", "randomk"}, {"k", "0.01"}});
  p = Encode(*r, x);
  std::memcpy(&p[16], &out_of_range, 4);
  ExpectDecodeError(*r, p, 4097, "index 4097 (pair 0) out of range");

  auto d = Make({{"compressor", "dithering"}, {"k", "4"}});
  p = Encode(*d, x);
  p[20] = (p[20] & 0xf0) | 0x5;  // level 5 of 4
  ExpectDecodeError(*d, p, 4097, "level 5");
  p = Encode(*d, x);
  p.back() |= 0x80;  // 4097 codes of 4 bits: the last byte's high half is padding
  ExpectDecodeError(*d, p, 4097, "bits set past the element count");
  p = Encode(*d, x);
  const float inf = INFINITY;
  std::memcpy(&p[12], &inf, 4);
  ExpectDecodeError(*d, p, 4097, "norm inf");

  auto o = Make({{"compressor", "onebit"}});
  p = Encode(*o, x);
  p.back() |= 0x80;
  ExpectDecodeError(*o, p, 4097, "bits set past the element count");
}

}  // namespace
}  // namespace byteps::compress
