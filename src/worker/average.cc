#include "worker/average.h"

#include <cstdint>
#include <cstring>

#include "common/half.h"

namespace byteps::worker {
namespace {

template <typename T>
void DivFloat(void* data, size_t n, int d) {
  T* p = static_cast<T*>(data);
  // Divide (not multiply by 1/d): 1/d is inexact for most d, and users compare with x / n.
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / static_cast<T>(d);
}

template <typename T>
void DivInt(void* data, size_t n, int d) {
  T* p = static_cast<T*>(data);
  // Divide in 64 bits: the divisor need not fit T (256 workers averaging uint8 would divide by 0).
  const int64_t dd = d;
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = static_cast<int64_t>(p[i]);
    int64_t q = x / dd;
    if ((x % dd != 0) && ((x < 0) != (dd < 0))) --q;  // floor, not truncate
    p[i] = static_cast<T>(q);
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void DivHalf(void* data, size_t n, int d) {
  uint16_t* p = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = FromF(ToF(p[i]) / static_cast<float>(d));
}

}  // namespace

void DivideInPlace(void* data, size_t count, DataType dtype, int divisor) {
  if (divisor == 1 || count == 0) return;
  switch (dtype) {
    case DataType::kFloat32: DivFloat<float>(data, count, divisor); break;
    case DataType::kFloat64: DivFloat<double>(data, count, divisor); break;
    case DataType::kFloat16: DivHalf<HalfToFloat, FloatToHalf>(data, count, divisor); break;
    case DataType::kBFloat16: DivHalf<BFloat16ToFloat, FloatToBFloat16>(data, count, divisor); break;
    case DataType::kInt32: DivInt<int32_t>(data, count, divisor); break;
    case DataType::kInt64: DivInt<int64_t>(data, count, divisor); break;
    case DataType::kInt8: DivInt<int8_t>(data, count, divisor); break;
    case DataType::kUint8: DivInt<uint8_t>(data, count, divisor); break;
    case DataType::kInt16: DivInt<int16_t>(data, count, divisor); break;
    case DataType::kBool: break;  // never: the engine refuses to sum (so to average) bools
  }
}

}  // namespace byteps::worker
