// Private to src/common: the one map from a DataType code to the element type a reduction kernel
// works on, and the builder of the per-dtype kernel tables that reducer.cc (sum) and reduce_ops.cc
// (min, max, product) index by that code. A new dtype is added here once (the table builder fails
// to compile until it is), not in every kernel file.
//
// Elements may be unaligned in the buffers these kernels see, so every scalar access goes through
// LoadUnaligned / StoreUnaligned (memcpy, compiled to a plain mov).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "common/dtype.h"
#include "common/half.h"

namespace byteps {

// A kernel: dst[i] = op(dst[i], src[i]) for i < count elements (count > 0; same aliasing rules as
// SumInto).
using ElementwiseFn = void (*)(char* dst, const char* src, size_t count);

template <typename T>
T LoadUnaligned(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void StoreUnaligned(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// The 16-bit floating formats: stored as uint16_t, computed in float32.
struct Float16Element {
  static float ToFloat(uint16_t h) { return HalfToFloat(h); }
  static uint16_t FromFloat(float f) { return FloatToHalf(f); }
};
struct BFloat16Element {
  static float ToFloat(uint16_t h) { return BFloat16ToFloat(h); }
  static uint16_t FromFloat(float f) { return FloatToBFloat16(f); }
};
template <typename E>
inline constexpr bool kIsHalfElement =
    std::is_same_v<E, Float16Element> || std::is_same_v<E, BFloat16Element>;
// One byte read as false (0) or true (anything else).
struct BoolElement {};

// ElementOf<dtype>: the C++ arithmetic type for plain dtypes, one of the tags above otherwise.
template <DataType D>
struct ElementOfCode;
template <> struct ElementOfCode<DataType::kFloat32> { using type = float; };
template <> struct ElementOfCode<DataType::kFloat64> { using type = double; };
template <> struct ElementOfCode<DataType::kFloat16> { using type = Float16Element; };
template <> struct ElementOfCode<DataType::kUint8> { using type = uint8_t; };
template <> struct ElementOfCode<DataType::kInt32> { using type = int32_t; };
template <> struct ElementOfCode<DataType::kInt8> { using type = int8_t; };
template <> struct ElementOfCode<DataType::kInt64> { using type = int64_t; };
template <> struct ElementOfCode<DataType::kBFloat16> { using type = BFloat16Element; };
template <> struct ElementOfCode<DataType::kInt16> { using type = int16_t; };
template <> struct ElementOfCode<DataType::kBool> { using type = BoolElement; };
template <DataType D>
using ElementOf = typename ElementOfCode<D>::type;

// The kernel table of one family, indexed by the DataType code. Family names its kernel for each
// element type: `template <typename E> static constexpr ElementwiseFn For()`. The table holds
// those functions themselves (no wrapper in between, so an AVX2 kernel is called directly).
template <class Family>
constexpr std::array<ElementwiseFn, kNumDataTypes> MakeKernelTable() {
  return []<size_t... kCodes>(std::index_sequence<kCodes...>) {
    return std::array<ElementwiseFn, kNumDataTypes>{
        Family::template For<ElementOf<static_cast<DataType>(kCodes)>>()...};
  }(std::make_index_sequence<kNumDataTypes>{});
}

}  // namespace byteps
