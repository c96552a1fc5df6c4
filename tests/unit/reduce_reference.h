// What reducer_test.cc (SumInto) and reduce_ops_test.cc (ReduceInto) share: the dtype and
// implementation lists, exact float16/bfloat16 decoding and rounding computed here (independent of
// common/half.cc, so the references do not share a bug with the code under test), the per-element
// check loop, and the guarded run that catches overruns, underruns and writes to src.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "common/dtype.h"
#include "common/reducer.h"

namespace byteps::reduce_reference {

inline constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                         DataType::kUint8,   DataType::kInt32,   DataType::kInt8,
                                         DataType::kInt64,   DataType::kBFloat16, DataType::kInt16,
                                         DataType::kBool};
inline constexpr ReducerImpl kAllImpls[] = {ReducerImpl::kAuto, ReducerImpl::kScalar, ReducerImpl::kAvx2};

// Element i of an array of T at p (any alignment).
template <typename T>
T Get(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// Exact value of a float16 (t == kFloat16) or bfloat16 pattern; inf and NaN as such.
double Value16(uint16_t h, DataType t);

bool IsNaN16(uint16_t h, DataType t);

// Rounds a non-NaN x to the format of t: nearest, ties to the even pattern, overflow to inf. Found
// by searching the table of representable values.
uint16_t Round16(double x, DataType t);

// Calls ok(i) for i < n; returns "<what> mismatch at element <i>" for the first false, else "".
std::string FirstMismatch(size_t n, const std::string& what, const std::function<bool(size_t)>& ok);

// Fills n elements of dtype t at p with test values.
using FillFn = std::function<void(DataType t, uint8_t* p, size_t n, std::mt19937_64& rng)>;
// The operation under test, dst op= src over the run's n elements.
using RunFn = std::function<void(uint8_t* dst, const uint8_t* src)>;
// "" if out (dst after the run) is right for before (dst before) and src, else what is wrong.
using VerifyFn = std::function<std::string(const uint8_t* before, const uint8_t* src, const uint8_t* out)>;

// One run over n elements of t: dst at byte offset dst_off after guard bytes in a 64-byte aligned
// buffer, src at byte offset src_off in another; dst then src filled by fill. Returns verify's
// message, or "src modified", "underrun at guard byte k", "overrun at guard byte k", or "".
std::string RunGuarded(DataType t, size_t n, size_t dst_off, size_t src_off, std::mt19937_64& rng,
                       const FillFn& fill, const RunFn& run, const VerifyFn& verify);

// One run with dst == src (n elements at byte offset off); verify sees the same array as before
// and src.
std::string RunAliased(DataType t, size_t n, size_t off, std::mt19937_64& rng, const FillFn& fill,
                       const RunFn& run, const VerifyFn& verify);

}  // namespace byteps::reduce_reference
