// Scalar float16 / bfloat16 conversions (round to nearest even, NaN preserved).
// Used by the reducers' scalar fallback and by tests as the reference.
#pragma once

#include <cstdint>

namespace byteps {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace byteps
