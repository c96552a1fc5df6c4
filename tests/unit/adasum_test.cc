// Adasum (common/adasum.h) against a float64 reference written here from the rule's definition:
// the closed forms (orthogonal inputs add, parallel ones average), scale invariance, the tiny-norm
// rule, float16, and the tree order for n = 1..5 (n = 3 and 5 are checked to differ from the other
// obvious orders, so a wrong order fails).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/adasum.h"
#include "common/half.h"

namespace byteps {
namespace {

using Vec = std::vector<double>;

Vec Ref(const Vec& a, const Vec& b) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double ca = na < std::sqrt(DBL_MIN) ? 1.0 : 1.0 - d / (2 * na);
  const double cb = nb < std::sqrt(DBL_MIN) ? 1.0 : 1.0 - d / (2 * nb);
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Runs AdasumTree on float64 copies of gs.
Vec Tree(std::vector<Vec> gs) {
  std::vector<void*> parts;
  for (Vec& g : gs) parts.push_back(g.data());
  AdasumTree(parts, gs[0].size(), DataType::kFloat64);
  return gs[0];
}

Vec Pair(Vec a, const Vec& b) {
  AdasumInto(a.data(), b.data(), a.size(), DataType::kFloat64);
  return a;
}

Vec Random(std::mt19937& rng, size_t n) {
  std::normal_distribution<double> d(0, 1);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

void ExpectNear(const Vec& got, const Vec& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
}

double MaxDiff(const Vec& a, const Vec& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(AdasumTest, SupportsOnlyFloatTypes) {
  EXPECT_TRUE(AdasumSupports(DataType::kFloat16));
  EXPECT_TRUE(AdasumSupports(DataType::kFloat32));
  EXPECT_TRUE(AdasumSupports(DataType::kFloat64));
  for (DataType t : {DataType::kBFloat16, DataType::kInt32, DataType::kInt64, DataType::kUint8, DataType::kBool})
    EXPECT_FALSE(AdasumSupports(t)) << DataTypeName(t);
}

TEST(AdasumTest, OrthogonalInputsAdd) {
  EXPECT_EQ(Pair({3, 0, 0, 1}, {0, -2, 5, 0}), (Vec{3, -2, 5, 1}));
}

TEST(AdasumTest, ParallelInputsAverage) {
  const Vec a = {1, -2, 3, 0.5};
  Vec b = a;
  for (double& x : b) x *= 3;
  Vec want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = (a[i] + b[i]) / 2;
  ExpectNear(Pair(a, b), want, 1e-15);
  ExpectNear(Pair(a, a), a, 1e-15);  // identical gradients: no double counting
}

TEST(AdasumTest, MatchesTheReferenceAndIsSymmetricAndScaleInvariant) {
  std::mt19937 rng(7);
  const Vec a = Random(rng, 101), b = Random(rng, 101);
  const Vec r = Pair(a, b);
  ExpectNear(r, Ref(a, b), 1e-14);
  ExpectNear(Pair(b, a), r, 1e-14);
  for (double c : {1e-3, 7.0, 1e6}) {
    Vec ca = a, cb = b, cr = r;
    for (size_t i = 0; i < a.size(); ++i) ca[i] *= c, cb[i] *= c, cr[i] *= c;
    ExpectNear(Pair(ca, cb), cr, 1e-13);
  }
}

TEST(AdasumTest, ATinyNormKeepsItsCoefficientAtOne) {
  // |a|^2 = 4e-160 < sqrt(DBL_MIN) ~ 1.5e-154: a's coefficient is 1 (without the rule it would be
  // 1 - d/(2|a|^2), about -5e79, and the result would be huge).
  const Vec a = {1e-80, 1e-80, 1e-80, 1e-80}, b = {1, 2, 3, 4};
  const Vec r = Pair(a, b);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(r[i], a[i] + b[i]);
  // A zero vector adds itself (nothing), never NaN: on either side, and both at once.
  EXPECT_EQ(Pair({0, 0, 0, 0}, b), b);
  EXPECT_EQ(Pair(b, {0, 0, 0, 0}), b);
  EXPECT_EQ(Pair({0, 0}, {0, 0}), (Vec{0, 0}));
}

TEST(AdasumTest, TreeOrderForTwoToFiveInputs) {
  std::mt19937 rng(11);
  std::vector<Vec> g;
  // Correlated inputs (a shared component), so that different orders give different results.
  const Vec common = Random(rng, 33);
  for (int i = 0; i < 5; ++i) {
    Vec v = Random(rng, 33);
    for (size_t k = 0; k < v.size(); ++k) v[k] += (i + 1) * common[k];
    g.push_back(v);
  }
  EXPECT_EQ(Tree({g[0]}), g[0]);
  ExpectNear(Tree({g[0], g[1]}), Ref(g[0], g[1]), 1e-14);
  // n = 3: mid = 1, so g0 joins the pair (g1, g2).
  const Vec three = Ref(g[0], Ref(g[1], g[2]));
  ExpectNear(Tree({g[0], g[1], g[2]}), three, 1e-13);
  EXPECT_GT(MaxDiff(three, Ref(Ref(g[0], g[1]), g[2])), 1e-3) << "inputs too weak to tell the orders apart";
  // n = 4: pairs at distance 1, then their results (Horovod's halving/doubling order).
  ExpectNear(Tree({g[0], g[1], g[2], g[3]}), Ref(Ref(g[0], g[1]), Ref(g[2], g[3])), 1e-13);
  // n = 5: R(0,2) with R(2,5) = (g2, (g3, g4)).
  const Vec five = Ref(Ref(g[0], g[1]), Ref(g[2], Ref(g[3], g[4])));
  ExpectNear(Tree(g), five, 1e-13);
  EXPECT_GT(MaxDiff(five, Ref(Ref(Ref(g[0], g[1]), Ref(g[2], g[3])), g[4])), 1e-3);
}

TEST(AdasumTest, Float32AndFloat16FollowTheFloat64Reference) {
  std::mt19937 rng(5);
  const size_t n = 257;
  std::vector<Vec> g;
  for (int i = 0; i < 4; ++i) g.push_back(Random(rng, n));
  // float32: inputs rounded to float, computed in float64, each pair rounded once.
  {
    std::vector<std::vector<float>> f(4, std::vector<float>(n));
    std::vector<Vec> exact(4, Vec(n));
    std::vector<void*> parts;
    for (int i = 0; i < 4; ++i) {
      for (size_t k = 0; k < n; ++k) exact[i][k] = f[i][k] = static_cast<float>(g[i][k]);
      parts.push_back(f[i].data());
    }
    AdasumTree(parts, n, DataType::kFloat32);
    const Vec want = Ref(Ref(exact[0], exact[1]), Ref(exact[2], exact[3]));
    for (size_t k = 0; k < n; ++k) EXPECT_NEAR(f[0][k], want[k], 1e-6 * (1 + std::fabs(want[k]))) << k;
  }
  // float16: the same within half precision (three roundings to half on the way).
  {
    std::vector<std::vector<uint16_t>> h(4, std::vector<uint16_t>(n));
    std::vector<Vec> exact(4, Vec(n));
    std::vector<void*> parts;
    for (int i = 0; i < 4; ++i) {
      for (size_t k = 0; k < n; ++k) {
        h[i][k] = FloatToHalf(static_cast<float>(g[i][k]));
        exact[i][k] = HalfToFloat(h[i][k]);
      }
      parts.push_back(h[i].data());
    }
    AdasumTree(parts, n, DataType::kFloat16);
    const Vec want = Ref(Ref(exact[0], exact[1]), Ref(exact[2], exact[3]));
    for (size_t k = 0; k < n; ++k) EXPECT_NEAR(HalfToFloat(h[0][k]), want[k], 4e-3 * (1 + std::fabs(want[k]))) << k;
    // One pair: the float64 result rounded once (off by at most one half ulp).
    std::vector<uint16_t> a = {FloatToHalf(1.5f), FloatToHalf(-0.25f), FloatToHalf(2.0f)};
    const std::vector<uint16_t> b = {FloatToHalf(0.5f), FloatToHalf(1.0f), FloatToHalf(-3.0f)};
    const Vec r = Ref({1.5, -0.25, 2.0}, {0.5, 1.0, -3.0});
    AdasumInto(a.data(), b.data(), 3, DataType::kFloat16);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(a[k], FloatToHalf(static_cast<float>(r[k]))) << k;
  }
}

}  // namespace
}  // namespace byteps
