#include "compress/values.h"

#include <bit>
#include <cstring>

#include "common/half.h"
#include "common/reducer.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define BYTEPS_TARGET_F16C __attribute__((target("avx2,f16c")))
#endif

static_assert(std::endian::native == std::endian::little, "the wire is little-endian; values are memcpy'd");

namespace byteps::compress {
namespace {

inline uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void Store16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The same rounding as common/half.h's FloatToBFloat16, written so the compiler vectorises it.
inline uint16_t ToBFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan ? ((x >> 16) | 0x40u) : rounded);
}
inline float FromBFloat16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

#if defined(__x86_64__)
// The reducers' AVX2 path needs AVX2, F16C and FMA, checked the way both gcc and clang can.
bool HaveF16c() {
  static const bool have = ReducerImplAvailable(ReducerImpl::kAvx2);
  return have;
}

BYTEPS_TARGET_F16C void StoreHalfF16c(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  for (; i < n; ++i) Store16(out + 2 * i, FloatToHalf(in[i]));
}

BYTEPS_TARGET_F16C void LoadHalfF16c(const uint8_t* in, size_t n, float* out, bool add) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    if (add) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i) out[i] = (add ? out[i] : 0.0f) + HalfToFloat(Load16(in + 2 * i));
}
#endif

}  // namespace

void StoreValues(ValueType t, const float* in, size_t n, uint8_t* out) {
  if (n == 0) return;  // in/out may be null (an empty vector's data())
  switch (t) {
    case ValueType::kFloat32: std::memcpy(out, in, n * 4); return;
    case ValueType::kFloat16:
#if defined(__x86_64__)
      if (HaveF16c()) return StoreHalfF16c(in, n, out);
#endif
      for (size_t i = 0; i < n; ++i) Store16(out + 2 * i, FloatToHalf(in[i]));
      return;
    case ValueType::kBFloat16:
      for (size_t i = 0; i < n; ++i) Store16(out + 2 * i, ToBFloat16(in[i]));
      return;
  }
}

void LoadValues(ValueType t, const uint8_t* in, size_t n, float* out) {
  if (n == 0) return;
  switch (t) {
    case ValueType::kFloat32: std::memcpy(out, in, n * 4); return;
    case ValueType::kFloat16:
#if defined(__x86_64__)
      if (HaveF16c()) return LoadHalfF16c(in, n, out, false);
#endif
      for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(Load16(in + 2 * i));
      return;
    case ValueType::kBFloat16:
      for (size_t i = 0; i < n; ++i) out[i] = FromBFloat16(Load16(in + 2 * i));
      return;
  }
}

void AddValues(ValueType t, const uint8_t* in, size_t n, float* acc) {
  switch (t) {
    case ValueType::kFloat32:
      for (size_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, in + 4 * i, 4);
        acc[i] += v;
      }
      return;
    case ValueType::kFloat16:
#if defined(__x86_64__)
      if (HaveF16c()) return LoadHalfF16c(in, n, acc, true);
#endif
      for (size_t i = 0; i < n; ++i) acc[i] += HalfToFloat(Load16(in + 2 * i));
      return;
    case ValueType::kBFloat16:
      for (size_t i = 0; i < n; ++i) acc[i] += FromBFloat16(Load16(in + 2 * i));
      return;
  }
}

float LoadValue(ValueType t, const uint8_t* in, size_t j) {
  switch (t) {
    case ValueType::kFloat32: {
      float v;
      std::memcpy(&v, in + 4 * j, 4);
      return v;
    }
    case ValueType::kFloat16: return HalfToFloat(Load16(in + 2 * j));
    case ValueType::kBFloat16: return FromBFloat16(Load16(in + 2 * j));
  }
  return 0;
}

uint32_t LoadIndex(const uint8_t* pairs, uint32_t j) {
  uint32_t i;
  std::memcpy(&i, pairs + 4 * size_t{j}, 4);
  return i;
}

void AddPairs(ValueType t, const uint8_t* pairs, uint32_t k, float* acc) {
  const uint8_t* values = pairs + size_t{k} * 4;
  for (uint32_t j = 0; j < k; ++j) acc[LoadIndex(pairs, j)] += LoadValue(t, values, j);
}

}  // namespace byteps::compress
