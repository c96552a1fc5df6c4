// float16 / bfloat16 conversions against an independent reference: formats decoded with ldexp from
// their bit fields, and rounding done by searching the sorted table of representable values.
#include "common/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace byteps {
namespace {

struct Format {
  int man_bits;            // 10 for binary16, 7 for bfloat16
  int bias;                // 15, 127
  uint16_t inf;            // 0x7c00, 0x7f80 (= largest finite pattern + 1)
  uint16_t (*from_float)(float);
  float (*to_float)(uint16_t);
};

const Format kHalf{10, 15, 0x7c00, FloatToHalf, HalfToFloat};
const Format kBf16{7, 127, 0x7f80, FloatToBFloat16, BFloat16ToFloat};

bool IsNaNBits(const Format& f, uint16_t h) {
  return (h & 0x7fff) > f.inf;
}

// Value of a non-NaN pattern, straight from the definition of the format.
double Decode(const Format& f, uint16_t h) {
  const int e = (h & 0x7fff) >> f.man_bits;
  const int m = h & ((1 << f.man_bits) - 1);
  double v;
  if ((h & 0x7fff) == f.inf) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(m, 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(m + (1 << f.man_bits), e - f.bias - f.man_bits);
  }
  return (h & 0x8000) ? -v : v;
}

// Nearest pattern to x (round to nearest, ties to the even pattern; beyond the largest finite
// value, the tie point is taken against 2^(emax+1), which maps to inf).
uint16_t Nearest(const Format& f, double x) {
  static std::vector<double> half_table, bf16_table;
  std::vector<double>& table = (&f == &kHalf) ? half_table : bf16_table;
  if (table.empty()) {
    for (uint32_t h = 0; h < f.inf; ++h) table.push_back(Decode(f, static_cast<uint16_t>(h)));
    const int max_exp = (f.inf >> f.man_bits) - f.bias;  // exponent of inf's field = emax + 1
    table.push_back(std::ldexp(1.0, max_exp));
  }
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  auto it = std::lower_bound(table.begin(), table.end(), a);
  if (it == table.end()) return sign | f.inf;
  auto hi = static_cast<uint16_t>(it - table.begin());
  if (*it == a || hi == 0) return sign | hi;
  const uint16_t lo = hi - 1;
  const double dlo = a - table[lo], dhi = table[hi] - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo % 2 == 0) ? lo : hi);
}

float BitsFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

class HalfFormatTest : public ::testing::TestWithParam<const Format*> {};

TEST_P(HalfFormatTest, ToFloatExhaustive) {
  const Format& f = *GetParam();
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float v = f.to_float(h);
    if (IsNaNBits(f, h)) {
      EXPECT_TRUE(std::isnan(v)) << std::hex << i;
    } else {
      EXPECT_EQ(static_cast<double>(v), Decode(f, h)) << std::hex << i;
      EXPECT_EQ(std::signbit(v), (h & 0x8000) != 0) << std::hex << i;
    }
  }
}

TEST_P(HalfFormatTest, RoundTripExhaustive) {
  const Format& f = *GetParam();
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = f.from_float(f.to_float(h));
    if (IsNaNBits(f, h)) {
      EXPECT_TRUE(IsNaNBits(f, back)) << std::hex << i;
    } else {
      EXPECT_EQ(back, h) << std::hex << i;
    }
  }
}

// Every midpoint between neighbours (exact in float) goes to the even one; one float ulp either
// side goes to the nearer one. Covers subnormals, the normal/subnormal boundary and overflow.
TEST_P(HalfFormatTest, TiesToEvenExhaustive) {
  const Format& f = *GetParam();
  for (uint32_t lo = 0; lo < f.inf; ++lo) {
    const double vlo = Decode(f, static_cast<uint16_t>(lo));
    const double vhi = lo + 1 == f.inf ? std::ldexp(2.0, (f.inf >> f.man_bits) - f.bias - 1)
                                       : Decode(f, static_cast<uint16_t>(lo + 1));
    const auto mid = static_cast<float>((vlo + vhi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (vlo + vhi) / 2);
    const uint16_t even = (lo % 2 == 0) ? lo : lo + 1;
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(f.from_float(s * mid), sign | even) << std::hex << lo;
      EXPECT_EQ(f.from_float(s * std::nextafter(mid, 0.0f)), sign | lo) << std::hex << lo;
      EXPECT_EQ(f.from_float(s * std::nextafter(mid, INFINITY)), sign | (lo + 1)) << std::hex << lo;
    }
  }
}

// A stride through the whole float bit space against the table search.
TEST_P(HalfFormatTest, FromFloatSampled) {
  const Format& f = *GetParam();
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) {
    const float x = BitsFloat(static_cast<uint32_t>(bits));
    const uint16_t h = f.from_float(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(IsNaNBits(f, h)) << std::hex << bits;
    } else {
      ASSERT_EQ(h, Nearest(f, x)) << std::hex << bits;
    }
  }
}

TEST_P(HalfFormatTest, NaNStaysQuietNaN) {
  const Format& f = *GetParam();
  // Signalling NaNs with payload only in the low bits would truncate to inf if not quieted.
  for (uint32_t bits : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu, 0x7fbfffffu}) {
    const uint16_t h = f.from_float(BitsFloat(bits));
    EXPECT_TRUE(IsNaNBits(f, h)) << std::hex << bits;
    EXPECT_NE(h & (1u << (f.man_bits - 1)), 0u) << "quiet bit " << std::hex << bits;
    EXPECT_EQ(h & 0x8000, (bits >> 16) & 0x8000);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfFormatTest, ::testing::Values(&kHalf, &kBf16),
                         [](const auto& info) { return info.param == &kHalf ? "float16" : "bfloat16"; });

TEST(HalfTest, KnownFloat16Values) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);          // max finite
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);        // just below the tie
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);          // tie rounds to even = inf
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // min normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // min subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0 -> even 0
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie 1|2 -> 2
  EXPECT_EQ(FloatToHalf(std::ldexp(5.0f, -25)), 0x0002);  // tie 2|3 -> 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -126)), 0x0000);        // float subnormal range
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(HalfToFloat(0xfc00)));
}

TEST(HalfTest, KnownBFloat16Values) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16(BitsFloat(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(FloatToBFloat16(BitsFloat(0x7f7f8000)), 0x7f80);  // tie at the top -> inf
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-INFINITY), 0xff80);
  EXPECT_EQ(FloatToBFloat16(BitsFloat(0x00008000)), 0x0000);  // subnormal tie -> even 0
  EXPECT_EQ(FloatToBFloat16(BitsFloat(0x00018000)), 0x0002);  // subnormal tie -> even 2
  EXPECT_EQ(BFloat16ToFloat(0x4049), 3.140625f);
}

}  // namespace
}  // namespace byteps
