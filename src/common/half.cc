// Scalar IEEE binary16 and bfloat16 conversions. Integer-only (no dependence on the FPU rounding
// mode or on FTZ/DAZ), so the results are the same on every platform; the vectorised reducers are
// tested bit-for-bit against these.
#include "common/half.h"

#include <cstring>

namespace byteps {
namespace {

uint32_t FloatBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

float BitsToFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) {  // inf, or NaN with its payload kept in the top mantissa bits
    return BitsToFloat(sign | 0x7f800000u | (man << 13));
  }
  if (exp == 0) {
    if (man == 0) return BitsToFloat(sign);
    // Subnormal half = man * 2^-24; every one is a normal float. Normalise the mantissa.
    uint32_t fexp = 113;  // float biased exponent of 2^-14
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --fexp;
    }
    return BitsToFloat(sign | (fexp << 23) | ((man & 0x3ffu) << 13));
  }
  return BitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {
    if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // NaN: set the quiet bit and keep the top payload bits, as x86 F16C does.
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 = halfway between 65504 (max half) and 65536; the tie goes to the even side, i.e. inf.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs >= 0x38800000u) {  // >= 2^-14: normal half
    uint32_t m = abs - (112u << 23);             // rebias the exponent from 127 to 15
    m += 0xfffu + ((m >> 13) & 1u);              // round to nearest, ties to even
    return static_cast<uint16_t>(sign | (m >> 13));  // a carry into the exponent is correct
  }
  const uint32_t fexp = abs >> 23;
  if (fexp < 102) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to zero
  // Subnormal half: result = mantissa (with implicit 1) * 2^(fexp - 126), rounded to an integer
  // count of 2^-24; the shift is 14..24. Rounding up to 0x400 yields the smallest normal, correctly.
  const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - fexp;
  uint32_t r = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

float BFloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN; never rounds into inf
  }
  // Round to nearest even on the dropped 16 bits; overflow carries into inf as it should.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace byteps
