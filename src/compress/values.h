// Arrays of plain values on the wire: float32, float16 or bfloat16, little-endian, unaligned.
// float16 uses F16C where the CPU has it (same rounding as common/half.h: nearest even).
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/payload_header.h"

namespace byteps::compress {

// out[0..n*size) = in[0..n) as type t.
void StoreValues(ValueType t, const float* in, size_t n, uint8_t* out);
// out[i] = value i of in.
void LoadValues(ValueType t, const uint8_t* in, size_t n, float* out);
// acc[i] += value i of in.
void AddValues(ValueType t, const uint8_t* in, size_t n, float* acc);
// Value j of in.
float LoadValue(ValueType t, const uint8_t* in, size_t j);

// topk's and randomk's body: k u32 indices, then k values of type t.
inline size_t PairsBytes(ValueType t, uint32_t k) { return size_t{k} * (4 + ValueTypeSize(t)); }
uint32_t LoadIndex(const uint8_t* pairs, uint32_t j);
// acc[index j] += value j, for j < k (indices already checked).
void AddPairs(ValueType t, const uint8_t* pairs, uint32_t k, float* acc);

}  // namespace byteps::compress
