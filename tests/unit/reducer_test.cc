// SumInto for every dtype x every available implementation, against references computed here:
// integer sums in 64-bit with explicit wrap, float sums in long double / double, and float16 /
// bfloat16 sums rounded by searching the table of representable values (independent of half.cc).
// The parts shared with reduce_ops_test.cc are in reduce_reference.h.
#include "common/reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/half.h"
#include "reduce_reference.h"

namespace byteps {
namespace {

using reduce_reference::FirstMismatch;
using reduce_reference::Get;
using reduce_reference::IsNaN16;
using reduce_reference::kAllImpls;
using reduce_reference::kAllTypes;
using reduce_reference::Round16;
using reduce_reference::RunAliased;
using reduce_reference::RunGuarded;
using reduce_reference::Value16;

constexpr size_t kLengths[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 4097};

// ---- the sum's reference (the shared parts: reduce_reference.h) ---------------------------

// Checks out[i] == a[i] + b[i] for all i; returns the first mismatch description or "".
std::string Verify(DataType t, const uint8_t* a, const uint8_t* b, const uint8_t* out, size_t n) {
  return FirstMismatch(n, "sum", [&](size_t i) {
    bool ok = true;
    switch (t) {
      case DataType::kFloat32: {
        const long double s = static_cast<long double>(Get<float>(a, i)) + Get<float>(b, i);
        const float r = Get<float>(out, i);
        // long double (64-bit mantissa) then float: double rounding is harmless for 24 bits.
        ok = std::isnan(s) ? std::isnan(r) : (r == static_cast<float>(s) &&
                                              std::signbit(r) == std::signbit(static_cast<float>(s)));
        break;
      }
      case DataType::kFloat64: {
        // long double would double-round for 53 bits; IEEE double addition is the definition.
        const double s = Get<double>(a, i) + Get<double>(b, i);
        const double r = Get<double>(out, i);
        ok = std::isnan(s) ? std::isnan(r) : std::memcmp(&r, &s, 8) == 0;
        break;
      }
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        const uint16_t x = Get<uint16_t>(a, i), y = Get<uint16_t>(b, i), r = Get<uint16_t>(out, i);
        if (IsNaN16(x, t) || IsNaN16(y, t)) {
          ok = IsNaN16(r, t);
          break;
        }
        const auto val = [t](uint16_t h) { return Value16(h, t); };  // exact, inf as such
        const double s = val(x) + val(y);  // exact for halves
        if (std::isnan(s)) {
          ok = IsNaN16(r, t);
        } else if (s == 0 && std::signbit(val(x)) != std::signbit(val(y))) {
          ok = r == 0;  // x + (-x) is +0 in round-to-nearest
        } else {
          ok = r == Round16(s, t);
        }
        break;
      }
      case DataType::kUint8:
        ok = Get<uint8_t>(out, i) == static_cast<uint8_t>(Get<uint8_t>(a, i) + Get<uint8_t>(b, i));
        break;
      case DataType::kInt8:
        ok = Get<int8_t>(out, i) ==
             static_cast<int8_t>(static_cast<int64_t>(Get<int8_t>(a, i)) + Get<int8_t>(b, i));
        break;
      case DataType::kInt32:
        ok = Get<int32_t>(out, i) ==
             static_cast<int32_t>(static_cast<int64_t>(Get<int32_t>(a, i)) + Get<int32_t>(b, i));
        break;
      case DataType::kInt64:
        ok = Get<int64_t>(out, i) == static_cast<int64_t>(static_cast<uint64_t>(Get<int64_t>(a, i)) +
                                                          static_cast<uint64_t>(Get<int64_t>(b, i)));
        break;
      case DataType::kInt16:
        ok = Get<int16_t>(out, i) ==
             static_cast<int16_t>(static_cast<int64_t>(Get<int16_t>(a, i)) + Get<int16_t>(b, i));
        break;
      case DataType::kBool:  // a logical or, written as 0/1
        ok = Get<uint8_t>(out, i) == ((Get<uint8_t>(a, i) != 0 || Get<uint8_t>(b, i) != 0) ? 1 : 0);
        break;
    }
    return ok;
  });
}

// Random contents: float types mix values of similar magnitude (so rounding matters) with raw bit
// patterns (inf, NaN, subnormals, overflow); integers are raw bits (wrap-around happens often).
void Fill(DataType t, uint8_t* p, size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> val(-1000.0, 1000.0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    const bool raw = (bits & 3) == 0;
    switch (t) {
      case DataType::kFloat32: {
        const float v = static_cast<float>(val(rng));
        std::memcpy(p + 4 * i, raw ? static_cast<const void*>(&bits) : &v, 4);
        break;
      }
      case DataType::kFloat64: {
        const double v = val(rng);
        std::memcpy(p + 8 * i, raw ? static_cast<const void*>(&bits) : &v, 8);
        break;
      }
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        const float v = static_cast<float>(val(rng));
        const uint16_t h = raw ? static_cast<uint16_t>(bits >> 8)
                               : (t == DataType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v));
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      default:
        std::memcpy(p + DataTypeSize(t) * i, &bits, DataTypeSize(t));
    }
  }
}

// ---- parameterised over dtype x impl -------------------------------------------------------

class ReducerTest : public ::testing::TestWithParam<std::tuple<DataType, ReducerImpl>> {
 protected:
  void SetUp() override {
    if (!ReducerImplAvailable(impl())) GTEST_SKIP() << ReducerImplName(impl()) << " unavailable";
  }
  DataType dtype() const { return std::get<0>(GetParam()); }
  ReducerImpl impl() const { return std::get<1>(GetParam()); }
};

TEST_P(ReducerTest, MatchesReferenceAllLengthsAndOffsets) {
  const size_t es = DataTypeSize(dtype());
  std::mt19937_64 rng(1234 + static_cast<int>(dtype()));
  for (size_t n : kLengths) {
    for (size_t dst_off : {0, 1}) {
      for (size_t src_off : {0, 1}) {  // in elements: 0 is 64-byte aligned
        SCOPED_TRACE("n=" + std::to_string(n) + " dst_off=" + std::to_string(dst_off) +
                     " src_off=" + std::to_string(src_off));
        ASSERT_EQ(RunGuarded(
                      dtype(), n, dst_off * es, src_off * es, rng, Fill,
                      [&](uint8_t* dst, const uint8_t* src) { SumInto(dst, src, n, dtype(), impl()); },
                      [&](const uint8_t* before, const uint8_t* src, const uint8_t* out) {
                        return Verify(dtype(), before, src, out, n);
                      }),
                  "");
      }
    }
  }
}

TEST_P(ReducerTest, DstEqualsSrcDoubles) {
  std::mt19937_64 rng(99);
  for (size_t n : kLengths) {
    SCOPED_TRACE("n=" + std::to_string(n));
    ASSERT_EQ(RunAliased(
                  dtype(), n, DataTypeSize(dtype()), rng, Fill,
                  [&](uint8_t* dst, const uint8_t* src) { SumInto(dst, src, n, dtype(), impl()); },
                  [&](const uint8_t* before, const uint8_t* src, const uint8_t* out) {
                    return Verify(dtype(), before, src, out, n);
                  }),
              "");
  }
}

TEST_P(ReducerTest, ZeroCountTouchesNothing) {
  SumInto(nullptr, nullptr, 0, dtype(), impl());
}

INSTANTIATE_TEST_SUITE_P(AllTypesAllImpls, ReducerTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllImpls)),
                         [](const auto& info) {
                           return std::string(DataTypeName(std::get<0>(info.param))) + "_" +
                                  ReducerImplName(std::get<1>(info.param));
                         });

// ---- specific cases ------------------------------------------------------------------------

template <typename T>
void ExpectWrap(T a, T b, T expected) {
  for (ReducerImpl impl : kAllImpls) {
    if (!ReducerImplAvailable(impl)) continue;
    for (size_t n : {1, 37, 100}) {  // scalar tail and vector body
      std::vector<T> dst(n, a), src(n, b);
      DataType t = DataType::kInt8;
      if constexpr (std::is_same_v<T, uint8_t>) t = DataType::kUint8;
      if constexpr (std::is_same_v<T, int32_t>) t = DataType::kInt32;
      if constexpr (std::is_same_v<T, int64_t>) t = DataType::kInt64;
      if constexpr (std::is_same_v<T, int16_t>) t = DataType::kInt16;
      SumInto(dst.data(), src.data(), n, t, impl);
      for (T v : dst) ASSERT_EQ(v, expected) << ReducerImplName(impl) << " n=" << n;
    }
  }
}

TEST(ReducerWrapTest, IntegersWrapLikeTwosComplement) {
  ExpectWrap<int8_t>(127, 1, -128);
  ExpectWrap<int8_t>(-128, -1, 127);
  ExpectWrap<uint8_t>(255, 1, 0);
  ExpectWrap<uint8_t>(200, 100, 44);
  ExpectWrap<int32_t>(std::numeric_limits<int32_t>::max(), 1, std::numeric_limits<int32_t>::min());
  ExpectWrap<int64_t>(std::numeric_limits<int64_t>::min(), -1, std::numeric_limits<int64_t>::max());
  ExpectWrap<int16_t>(32767, 1, -32768);
  ExpectWrap<int16_t>(-30000, -10000, 25536);
}

// Every float16 / bfloat16 pattern as dst against a set of src values (specials included): the
// AVX2 result must equal the scalar one bit for bit (NaN: both NaN).
class HalfBitExactTest : public ::testing::TestWithParam<DataType> {};

TEST_P(HalfBitExactTest, Avx2MatchesScalarBitForBit) {
  if (!ReducerImplAvailable(ReducerImpl::kAvx2)) GTEST_SKIP() << "no AVX2";
  const DataType t = GetParam();
  std::mt19937_64 rng(7);
  std::vector<uint16_t> others = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00,
                                  0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x7f7f, 0xff7f,
                                  0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0080, 0x007f, 0x3f80};
  while (others.size() < 64) others.push_back(static_cast<uint16_t>(rng()));
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (uint16_t other : others) {
    std::vector<uint16_t> src(all.size(), other), scalar = all, avx2 = all;
    // Same-exponent random neighbours make ties common in the 1-2 ulp region.
    for (size_t i = 0; i < src.size(); i += 3) src[i] = static_cast<uint16_t>(all[i] ^ (rng() & 0x7));
    SumInto(scalar.data(), src.data(), src.size(), t, ReducerImpl::kScalar);
    SumInto(avx2.data(), src.data(), src.size(), t, ReducerImpl::kAvx2);
    for (size_t i = 0; i < all.size(); ++i) {
      if (IsNaN16(scalar[i], t)) {
        ASSERT_TRUE(IsNaN16(avx2[i], t)) << std::hex << all[i] << " + " << src[i];
      } else {
        ASSERT_EQ(avx2[i], scalar[i]) << std::hex << all[i] << " + " << src[i];
      }
    }
    ASSERT_EQ(Verify(t, reinterpret_cast<const uint8_t*>(all.data()),
                     reinterpret_cast<const uint8_t*>(src.data()),
                     reinterpret_cast<const uint8_t*>(avx2.data()), all.size()),
              "");
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, HalfBitExactTest,
                         ::testing::Values(DataType::kFloat16, DataType::kBFloat16),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(ReducerTest, NamesAndAvailability) {
  EXPECT_STREQ(ReducerImplName(ReducerImpl::kAuto), "auto");
  EXPECT_STREQ(ReducerImplName(ReducerImpl::kScalar), "scalar");
  EXPECT_STREQ(ReducerImplName(ReducerImpl::kAvx2), "avx2");
  EXPECT_TRUE(ReducerImplAvailable(ReducerImpl::kAuto));
  EXPECT_TRUE(ReducerImplAvailable(ReducerImpl::kScalar));
#if !defined(__x86_64__)
  EXPECT_FALSE(ReducerImplAvailable(ReducerImpl::kAvx2));
#endif
}

TEST(ReducerTest, DefaultOverloadSums) {
  std::vector<float> dst = {1.5f, -2.0f, 3.0f}, src = {0.5f, 2.0f, 1e30f};
  SumInto(dst.data(), src.data(), dst.size(), DataType::kFloat32);
  EXPECT_EQ(dst, (std::vector<float>{2.0f, 0.0f, 1e30f}));
}

TEST(ReducerDeathTest, InvalidDataTypeAborts) {
  float x = 0;
  EXPECT_DEATH(SumInto(&x, &x, 1, static_cast<DataType>(99)), "check failed");
}

}  // namespace
}  // namespace byteps
