// Helpers shared by the compress tests (one gtest binary, compress_test).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compress/codec.h"
#include "compress/params.h"

namespace byteps::compress::test {

using KV = std::vector<std::pair<std::string, std::string>>;

inline std::unique_ptr<Codec> Make(const KV& kv, DataType dtype = DataType::kFloat32) {
  auto p = ParseParams(kv, "t");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  auto c = MakeCodec(p.value(), dtype, "t");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

inline std::vector<uint8_t> Encode(Codec& c, const std::vector<float>& x, uint64_t key = 0, uint64_t round = 0) {
  std::vector<uint8_t> out(c.MaxCompressedBytes(x.size()));
  auto len = c.Compress(x.data(), x.size(), key, round, out.data(), out.size());
  EXPECT_TRUE(len.ok()) << len.status().ToString();
  out.resize(len.value());
  return out;
}

inline std::vector<float> Decode(Codec& c, const std::vector<uint8_t>& p, size_t n) {
  std::vector<float> out(n, 123.0f);
  Status st = c.Decompress(p.data(), p.size(), n, out.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

inline std::vector<float> Random(size_t n, uint32_t seed, float mean = 0) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(mean, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(g);
  return x;
}
}  // namespace byteps::compress::test
