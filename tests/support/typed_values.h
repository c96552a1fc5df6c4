// Tensors of any byteps dtype built from, and read back as, doubles: tests write small integers
// (exact in every dtype) and compare sums without a switch over dtypes of their own.
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"

namespace byteps::testing {

// Writes v as element i of a `dt` tensor at `data` (rounded as the dtype rounds).
void StoreValue(void* data, DataType dt, size_t i, double v);
// Element i of a `dt` tensor at `data`.
double LoadValue(const void* data, DataType dt, size_t i);

// The bytes of a `dt` tensor holding `values`.
std::vector<uint8_t> Encode(DataType dt, const std::vector<double>& values);

}  // namespace byteps::testing
