// ReduceInto's min / max / product for every dtype x every implementation, against references
// computed here: integers in 64 (or 128) bits with explicit wrap, float32 products in double
// (exact) then rounded, float16 / bfloat16 values decoded exactly and products rounded by searching
// the table of representable values (independent of half.cc). NaN inputs give NaN. The parts
// shared with reducer_test.cc (half decoding and rounding, the guarded run) are in reduce_reference.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/half.h"
#include "common/reducer.h"
#include "reduce_reference.h"

namespace byteps {
namespace {

using reduce_reference::FirstMismatch;
using reduce_reference::Get;
using reduce_reference::kAllImpls;
using reduce_reference::kAllTypes;
using reduce_reference::Round16;
using reduce_reference::RunAliased;
using reduce_reference::RunGuarded;
using reduce_reference::Value16;

constexpr ReduceKind kKinds[] = {ReduceKind::kMin, ReduceKind::kMax, ReduceKind::kProduct};
constexpr size_t kLengths[] = {0, 1, 3, 16, 33, 1000};

// The expected bits of kind(a, b) for floating a, b given as doubles (exact values) and their
// patterns; `product` is the rounding of the exact product.
template <typename Bits, typename Round>
bool CheckFloat(ReduceKind kind, double a, double b, Bits abits, Bits bbits, Bits out, bool out_nan, Round round) {
  if (std::isnan(a) || std::isnan(b)) return out_nan;
  if (kind == ReduceKind::kProduct) {
    const double p = a * b;  // exact for the formats it is used with (or IEEE double's definition)
    if (std::isnan(p)) return out_nan;
    return out == round(p);
  }
  const bool b_wins = kind == ReduceKind::kMin ? b < a : a < b;
  return out == (b_wins ? bbits : abits);
}

std::string Verify(ReduceKind kind, DataType t, const uint8_t* a, const uint8_t* b, const uint8_t* out, size_t n) {
  return FirstMismatch(n, ReduceKindName(kind), [&](size_t i) {
    bool ok = true;
    const auto ints = [&](auto tag) {
      using T = decltype(tag);
      const T x = Get<T>(a, i), y = Get<T>(b, i), r = Get<T>(out, i);
      if (kind == ReduceKind::kMin) return r == std::min(x, y);
      if (kind == ReduceKind::kMax) return r == std::max(x, y);
      const __int128 p = static_cast<__int128>(x) * static_cast<__int128>(y);
      return r == static_cast<T>(static_cast<unsigned __int128>(p));  // wrap: the low bits
    };
    switch (t) {
      case DataType::kFloat32: {
        const float x = Get<float>(a, i), y = Get<float>(b, i), r = Get<float>(out, i);
        uint32_t xb, yb, rb;
        std::memcpy(&xb, &x, 4), std::memcpy(&yb, &y, 4), std::memcpy(&rb, &r, 4);
        ok = CheckFloat<uint32_t>(kind, x, y, xb, yb, rb, std::isnan(r), [](double p) {
          const float f = static_cast<float>(p);  // double holds the exact product: one rounding
          uint32_t bits;
          std::memcpy(&bits, &f, 4);
          return bits;
        });
        break;
      }
      case DataType::kFloat64: {
        const double x = Get<double>(a, i), y = Get<double>(b, i), r = Get<double>(out, i);
        uint64_t xb, yb, rb;
        std::memcpy(&xb, &x, 8), std::memcpy(&yb, &y, 8), std::memcpy(&rb, &r, 8);
        ok = CheckFloat<uint64_t>(kind, x, y, xb, yb, rb, std::isnan(r), [](double p) {
          uint64_t bits;
          std::memcpy(&bits, &p, 8);
          return bits;
        });
        break;
      }
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        const uint16_t x = Get<uint16_t>(a, i), y = Get<uint16_t>(b, i), r = Get<uint16_t>(out, i);
        ok = CheckFloat<uint16_t>(kind, Value16(x, t), Value16(y, t), x, y, r, std::isnan(Value16(r, t)),
                                  [t](double p) { return Round16(p, t); });
        break;
      }
      case DataType::kUint8: ok = ints(uint8_t{}); break;
      case DataType::kInt8: ok = ints(int8_t{}); break;
      case DataType::kInt16: ok = ints(int16_t{}); break;
      case DataType::kInt32: ok = ints(int32_t{}); break;
      case DataType::kInt64: ok = ints(int64_t{}); break;
      case DataType::kBool: {
        const bool x = a[i] != 0, y = b[i] != 0;
        ok = out[i] == (kind == ReduceKind::kMax ? (x || y) : (x && y));
        break;
      }
    }
    return ok;
  });
}

// Float types mix values of similar magnitude (ties and rounding), small integers (equal values,
// +0/-0) and raw bit patterns (inf, NaN, subnormals); integers are raw bits; bool bytes are 0, 1
// or any other byte (true).
void Fill(DataType t, uint8_t* p, size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> val(-300.0, 300.0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    const int mode = static_cast<int>(bits & 3);
    const double v = mode == 1 ? static_cast<double>(static_cast<int>((bits >> 8) % 5) - 2) : val(rng);
    switch (t) {
      case DataType::kFloat32: {
        const float f = static_cast<float>(v);
        std::memcpy(p + 4 * i, mode == 0 ? static_cast<const void*>(&bits) : &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p + 8 * i, mode == 0 ? static_cast<const void*>(&bits) : &v, 8);
        break;
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        const float f = static_cast<float>(v);
        const uint16_t h = mode == 0 ? static_cast<uint16_t>(bits >> 8)
                                     : (t == DataType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f));
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      case DataType::kBool:
        p[i] = mode == 0 ? static_cast<uint8_t>(bits >> 8) : static_cast<uint8_t>(mode & 1);
        break;
      default:
        std::memcpy(p + DataTypeSize(t) * i, &bits, DataTypeSize(t));
    }
  }
}

class ReduceOpsTest : public ::testing::TestWithParam<std::tuple<ReduceKind, DataType, ReducerImpl>> {
 protected:
  void SetUp() override {
    if (!ReducerImplAvailable(impl())) GTEST_SKIP() << ReducerImplName(impl()) << " is not available on this CPU";
  }
  ReduceKind kind() const { return std::get<0>(GetParam()); }
  DataType dtype() const { return std::get<1>(GetParam()); }
  ReducerImpl impl() const { return std::get<2>(GetParam()); }
};

TEST_P(ReduceOpsTest, MatchesReferenceUnalignedWithGuards) {
  std::mt19937_64 rng(77 + static_cast<int>(dtype()) * 4 + static_cast<int>(kind()));
  for (size_t n : kLengths) {
    for (size_t off : {0, 1}) {  // in bytes: 1 misaligns every dtype wider than a byte
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      ASSERT_EQ(RunGuarded(
                    dtype(), n, off, off, rng, Fill,
                    [&](uint8_t* dst, const uint8_t* src) { ReduceInto(dst, src, n, dtype(), kind(), impl()); },
                    [&](const uint8_t* before, const uint8_t* src, const uint8_t* out) {
                      return Verify(kind(), dtype(), before, src, out, n);
                    }),
                "");
    }
  }
}

TEST_P(ReduceOpsTest, DstEqualsSrc) {
  const size_t n = 257;
  std::mt19937_64 rng(5);
  ASSERT_EQ(RunAliased(
                dtype(), n, 0, rng, Fill,
                [&](uint8_t* dst, const uint8_t* src) { ReduceInto(dst, src, n, dtype(), kind(), impl()); },
                [&](const uint8_t* before, const uint8_t* src, const uint8_t* out) {
                  return Verify(kind(), dtype(), before, src, out, n);
                }),
            "");
}

INSTANTIATE_TEST_SUITE_P(AllKindsTypesImpls, ReduceOpsTest,
                         ::testing::Combine(::testing::ValuesIn(kKinds), ::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllImpls)),
                         [](const auto& info) {
                           return std::string(ReduceKindName(std::get<0>(info.param))) + "_" +
                                  DataTypeName(std::get<1>(info.param)) + "_" +
                                  ReducerImplName(std::get<2>(info.param));
                         });

// ---- specific cases ------------------------------------------------------------------------

TEST(ReduceOpsCases, IntegerProductsWrapAndMinMaxAreSigned) {
  std::vector<int16_t> a = {300, -32768, 7, -5}, b = {300, -1, -3, 2};
  auto p = a;
  ReduceInto(p.data(), b.data(), p.size(), DataType::kInt16, ReduceKind::kProduct);
  EXPECT_EQ(p, (std::vector<int16_t>{static_cast<int16_t>(90000 - 65536), -32768, -21, -10}));
  auto mn = a;
  ReduceInto(mn.data(), b.data(), mn.size(), DataType::kInt16, ReduceKind::kMin);
  EXPECT_EQ(mn, (std::vector<int16_t>{300, -32768, -3, -5}));
  std::vector<uint8_t> u = {200, 3}, v = {100, 250};
  ReduceInto(u.data(), v.data(), u.size(), DataType::kUint8, ReduceKind::kMax);
  EXPECT_EQ(u, (std::vector<uint8_t>{200, 250}));  // unsigned: 200 > 100
  std::vector<int64_t> x = {INT64_MAX, 3}, y = {2, -4};
  ReduceInto(x.data(), y.data(), x.size(), DataType::kInt64, ReduceKind::kProduct);
  EXPECT_EQ(x, (std::vector<int64_t>{-2, -12}));  // 2 * (2^63 - 1) wraps to -2
}

TEST(ReduceOpsCases, HalfProductRoundsOnceToNearestEven) {
  // 1.0009765625 (1 + 2^-10, the next half after 1) squared = 1 + 2^-9 + 2^-20: rounds to 1 + 2^-9.
  const uint16_t one_ulp = 0x3c01;
  std::vector<uint16_t> d = {one_ulp, FloatToHalf(2.0f), FloatToHalf(65504.0f)};
  const std::vector<uint16_t> s = {one_ulp, FloatToHalf(-0.5f), FloatToHalf(2.0f)};
  ReduceInto(d.data(), s.data(), d.size(), DataType::kFloat16, ReduceKind::kProduct);
  EXPECT_EQ(d[0], 0x3c02);
  EXPECT_EQ(HalfToFloat(d[1]), -1.0f);
  EXPECT_EQ(d[2], 0x7c00);  // overflow to inf
  // bfloat16: 1.0078125 (1 + 2^-7) * 3 = 3.0234375 lies between 3.0 and 3.03125, nearer 3.03125.
  std::vector<uint16_t> bd = {FloatToBFloat16(1.0078125f)};
  const std::vector<uint16_t> bs = {FloatToBFloat16(3.0f)};
  ReduceInto(bd.data(), bs.data(), 1, DataType::kBFloat16, ReduceKind::kProduct);
  EXPECT_EQ(BFloat16ToFloat(bd[0]), 3.03125f);
}

TEST(ReduceOpsCases, FloatMinMaxPropagateNaN) {
  std::vector<float> d = {NAN, 1.0f, -2.0f}, s = {1.0f, NAN, -3.0f};
  auto mx = d;
  ReduceInto(mx.data(), s.data(), 3, DataType::kFloat32, ReduceKind::kMax);
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]));
  EXPECT_EQ(mx[2], -2.0f);
  ReduceInto(d.data(), s.data(), 3, DataType::kFloat32, ReduceKind::kMin);
  EXPECT_TRUE(std::isnan(d[0]) && std::isnan(d[1]));
  EXPECT_EQ(d[2], -3.0f);
}

TEST(ReduceOpsCases, BoolIsAndOrAndWritesZeroOrOne) {
  const std::vector<uint8_t> a = {0, 0, 1, 1, 7}, b = {0, 1, 0, 1, 9};
  auto mn = a, mx = a, pr = a;
  ReduceInto(mn.data(), b.data(), 5, DataType::kBool, ReduceKind::kMin);
  ReduceInto(mx.data(), b.data(), 5, DataType::kBool, ReduceKind::kMax);
  ReduceInto(pr.data(), b.data(), 5, DataType::kBool, ReduceKind::kProduct);
  EXPECT_EQ(mn, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(mx, (std::vector<uint8_t>{0, 1, 1, 1, 1}));
  EXPECT_EQ(pr, mn);
}

TEST(ReduceOpsCases, SumKindIsSumInto) {
  std::vector<int32_t> d = {1, 2, 3}, s = {10, 20, 30};
  ReduceInto(d.data(), s.data(), 3, DataType::kInt32, ReduceKind::kSum);
  EXPECT_EQ(d, (std::vector<int32_t>{11, 22, 33}));
  EXPECT_STREQ(ReduceKindName(ReduceKind::kSum), "sum");
  EXPECT_STREQ(ReduceKindName(ReduceKind::kMin), "min");
  EXPECT_STREQ(ReduceKindName(ReduceKind::kMax), "max");
  EXPECT_STREQ(ReduceKindName(ReduceKind::kProduct), "product");
}

TEST(ReduceOpsCases, NewDtypesHaveNamesSizesAndParse) {
  EXPECT_EQ(DataTypeSize(DataType::kInt16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kBool), 1u);
  EXPECT_STREQ(DataTypeName(DataType::kInt16), "int16");
  EXPECT_STREQ(DataTypeName(DataType::kBool), "bool");
  EXPECT_EQ(DataTypeFromName("int16"), DataType::kInt16);
  EXPECT_EQ(DataTypeFromName("short"), DataType::kInt16);
  EXPECT_EQ(DataTypeFromName("bool"), DataType::kBool);
  EXPECT_EQ(DataTypeFromCode(8), DataType::kInt16);
  EXPECT_EQ(DataTypeFromCode(9), DataType::kBool);
  EXPECT_FALSE(DataTypeFromCode(10).has_value());
  EXPECT_FALSE(IsFloating(DataType::kInt16) || IsFloating(DataType::kBool));
}

}  // namespace
}  // namespace byteps
