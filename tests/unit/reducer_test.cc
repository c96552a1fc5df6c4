// SumInto for every dtype x every available implementation, against references computed here:
// integer sums in 64-bit with explicit wrap, float sums in long double / double, and float16 /
// bfloat16 sums rounded by searching the table of representable values (independent of half.cc).
#include "common/reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/half.h"

namespace byteps {
namespace {

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                  DataType::kUint8,   DataType::kInt32,   DataType::kInt8,
                                  DataType::kInt64,   DataType::kBFloat16, DataType::kInt16,
                                  DataType::kBool};
constexpr ReducerImpl kAllImpls[] = {ReducerImpl::kAuto, ReducerImpl::kScalar, ReducerImpl::kAvx2};
constexpr size_t kLengths[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 4097};

// ---- independent references ---------------------------------------------------------------

// Exact value of a non-NaN float16 (man_bits 10, bias 15) or bfloat16 (7, 127) pattern.
double Decode16(uint16_t h, int man_bits, int bias) {
  const int e = (h & 0x7fff) >> man_bits, m = h & ((1 << man_bits) - 1);
  const double v = e == 0 ? std::ldexp(m, 1 - bias - man_bits)
                          : std::ldexp(m + (1 << man_bits), e - bias - man_bits);
  return (h & 0x8000) ? -v : v;
}

// Round x to the format: nearest, ties to the even pattern, overflow (at 2^(emax+1)) to inf.
uint16_t Round16(double x, DataType t) {
  const bool half = t == DataType::kFloat16;
  const uint16_t inf = half ? 0x7c00 : 0x7f80;
  static std::vector<double> tables[2];
  std::vector<double>& table = tables[half ? 0 : 1];
  if (table.empty()) {
    for (uint32_t h = 0; h < inf; ++h)
      table.push_back(Decode16(static_cast<uint16_t>(h), half ? 10 : 7, half ? 15 : 127));
    table.push_back(half ? 65536.0 : std::ldexp(1.0, 128));
  }
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  auto it = std::lower_bound(table.begin(), table.end(), a);
  if (it == table.end()) return sign | inf;
  const auto hi = static_cast<uint16_t>(it - table.begin());
  if (*it == a || hi == 0) return sign | hi;
  const uint16_t lo = hi - 1;
  const double dlo = a - table[lo], dhi = table[hi] - a;
  if (dlo != dhi) return sign | (dlo < dhi ? lo : hi);
  return sign | (lo % 2 == 0 ? lo : hi);
}

bool IsNaN16(uint16_t h, DataType t) {
  return (h & 0x7fff) > (t == DataType::kFloat16 ? 0x7c00 : 0x7f80);
}

template <typename T>
T Get(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// Checks out[i] == a[i] + b[i] for all i; returns the first mismatch description or "".
std::string Verify(DataType t, const uint8_t* a, const uint8_t* b, const uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
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
        const bool half = t == DataType::kFloat16;
        if (IsNaN16(x, t) || IsNaN16(y, t)) {
          ok = IsNaN16(r, t);
          break;
        }
        const auto val = [&](uint16_t h) {
          if ((h & 0x7fff) == (half ? 0x7c00 : 0x7f80))
            return (h & 0x8000) ? -INFINITY : INFINITY;
          return static_cast<float>(Decode16(h, half ? 10 : 7, half ? 15 : 127));
        };
        const double s = static_cast<double>(val(x)) + val(y);  // exact for halves
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
    if (!ok) return "mismatch at element " + std::to_string(i);
  }
  return "";
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

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, AlignedFree>;
Buffer Allocate(size_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
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
  constexpr size_t kGuard = 64;  // canary bytes around dst
  for (size_t n : kLengths) {
    for (size_t dst_off : {0, 1}) {
      for (size_t src_off : {0, 1}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " dst_off=" + std::to_string(dst_off) +
                     " src_off=" + std::to_string(src_off));
        const size_t bytes = n * es;
        Buffer dst_buf = Allocate(bytes + 2 * kGuard), src_buf = Allocate(bytes + kGuard);
        std::memset(dst_buf.get(), 0xa5, bytes + 2 * kGuard);
        uint8_t* dst = dst_buf.get() + kGuard + dst_off * es;
        uint8_t* src = src_buf.get() + src_off * es;
        Fill(dtype(), dst, n, rng);
        Fill(dtype(), src, n, rng);
        const std::vector<uint8_t> before(dst, dst + bytes), src_copy(src, src + bytes);

        SumInto(dst, src, n, dtype(), impl());

        ASSERT_EQ(Verify(dtype(), before.data(), src, dst, n), "");
        ASSERT_TRUE(std::equal(src, src + bytes, src_copy.begin())) << "src modified";
        for (uint8_t* p = dst_buf.get(); p < dst; ++p) ASSERT_EQ(*p, 0xa5) << "underrun";
        for (uint8_t* p = dst + bytes; p < dst_buf.get() + bytes + 2 * kGuard; ++p)
          ASSERT_EQ(*p, 0xa5) << "overrun";
      }
    }
  }
}

TEST_P(ReducerTest, DstEqualsSrcDoubles) {
  const size_t es = DataTypeSize(dtype());
  std::mt19937_64 rng(99);
  for (size_t n : kLengths) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Buffer buf = Allocate(n * es + es);
    uint8_t* p = buf.get() + es;
    Fill(dtype(), p, n, rng);
    const std::vector<uint8_t> before(p, p + n * es);
    SumInto(p, p, n, dtype(), impl());
    ASSERT_EQ(Verify(dtype(), before.data(), before.data(), p, n), "");
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
