#include "common/adasum.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/half.h"
#include "common/logging.h"

namespace byteps {
namespace {

// Element access in float64 for the three supported types.
template <typename T>
struct Elem {
  static double Get(const char* p, size_t i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return static_cast<double>(v);
  }
  static void Set(char* p, size_t i, double v) {
    const T t = static_cast<T>(v);
    std::memcpy(p + i * sizeof(T), &t, sizeof(T));
  }
};

struct HalfElem {
  static double Get(const char* p, size_t i) {
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    return static_cast<double>(HalfToFloat(h));
  }
  static void Set(char* p, size_t i, double v) {
    // Through float (half.h converts from float): the extra rounding step can move a value that
    // lies within a float ulp of a half midpoint by one half ulp; Adasum's own error is far larger.
    const uint16_t h = FloatToHalf(static_cast<float>(v));
    std::memcpy(p + i * 2, &h, 2);
  }
};

template <typename E>
void Pair(char* a, const char* b, size_t count) {
  double dot = 0, anorm = 0, bnorm = 0;
  for (size_t i = 0; i < count; ++i) {
    const double x = E::Get(a, i), y = E::Get(b, i);
    dot += x * y;
    anorm += x * x;
    bnorm += y * y;
  }
  // Horovod's guard: a (near) zero vector keeps coefficient 1 for both sides' sake (no 0/0).
  const double tiny = std::sqrt(DBL_MIN);
  const double acoeff = anorm >= tiny ? 1.0 - dot / anorm * 0.5 : 1.0;
  const double bcoeff = bnorm >= tiny ? 1.0 - dot / bnorm * 0.5 : 1.0;
  for (size_t i = 0; i < count; ++i) E::Set(a, i, acoeff * E::Get(a, i) + bcoeff * E::Get(b, i));
}

void Tree(const std::vector<void*>& parts, size_t lo, size_t hi, size_t count, DataType dtype) {
  if (hi - lo <= 1) return;
  const size_t mid = (lo + hi) / 2;
  Tree(parts, lo, mid, count, dtype);
  Tree(parts, mid, hi, count, dtype);
  AdasumInto(parts[lo], parts[mid], count, dtype);
}

}  // namespace

bool AdasumSupports(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

void AdasumInto(void* a, const void* b, size_t count, DataType dtype) {
  char* x = static_cast<char*>(a);
  const char* y = static_cast<const char*>(b);
  switch (dtype) {
    case DataType::kFloat16: return Pair<HalfElem>(x, y, count);
    case DataType::kFloat32: return Pair<Elem<float>>(x, y, count);
    case DataType::kFloat64: return Pair<Elem<double>>(x, y, count);
    default: break;
  }
  BYTEPS_CHECK(false && "AdasumInto: dtype must be float16, float32 or float64");
}

void AdasumTree(const std::vector<void*>& parts, size_t count, DataType dtype) {
  BYTEPS_CHECK(!parts.empty());
  BYTEPS_CHECK(AdasumSupports(dtype));
  Tree(parts, 0, parts.size(), count, dtype);
}

}  // namespace byteps
