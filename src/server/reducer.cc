// Summation kernels. Layout: a portable scalar kernel per dtype (also the reference and the tail
// handler), an AVX2 kernel per dtype built from one streaming driver, and a per-impl table indexed
// by the DataType code.
//
// The AVX2 functions carry __attribute__((target(...))) so that this file builds for baseline
// x86-64 and only runs them after CPUID says yes. Large arrays take the same path: a single
// streaming pass of unaligned-safe 32-byte loads, 4 vectors per iteration, dst aligned to 32 bytes
// by a short scalar prologue so stores never split cache lines. One core's loop already runs at
// the memory bandwidth one core can draw; parallelism comes from the server's engine threads.
#include "server/reducer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/half.h"
#include "common/logging.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define BYTEPS_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
#endif

namespace byteps::server {
namespace {

// dst/src are byte pointers: elements may be unaligned, so every scalar access goes through memcpy
// (compiled to a plain mov), which is well-defined at any address.
using SumFn = void (*)(char* dst, const char* src, size_t count);

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// ---------------------------------------------------------------------------------------------
// Scalar kernels.

// Integers add in the unsigned type: wrap-around is defined there and equals two's complement.
template <typename T, bool = std::is_integral_v<T>>
struct AddType {
  using type = T;
};
template <typename T>
struct AddType<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <typename T>
void SumScalar(char* d, const char* s, size_t n) {
  using U = typename AddType<T>::type;
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * sizeof(U);
    Store<U>(d + off, static_cast<U>(Load<U>(d + off) + Load<U>(s + off)));
  }
}

void SumHalfScalar(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * 2;
    const float sum = HalfToFloat(Load<uint16_t>(d + off)) + HalfToFloat(Load<uint16_t>(s + off));
    Store<uint16_t>(d + off, FloatToHalf(sum));
  }
}

void SumBFloat16Scalar(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * 2;
    const float sum =
        BFloat16ToFloat(Load<uint16_t>(d + off)) + BFloat16ToFloat(Load<uint16_t>(s + off));
    Store<uint16_t>(d + off, FloatToBFloat16(sum));
  }
}

// Indexed by the DataType code (see common/dtype.h).
constexpr SumFn kScalarKernels[kNumDataTypes] = {
    SumScalar<float>,   SumScalar<double>, SumHalfScalar,    SumScalar<uint8_t>,
    SumScalar<int32_t>, SumScalar<int8_t>, SumScalar<int64_t>, SumBFloat16Scalar,
};

// ---------------------------------------------------------------------------------------------
// AVX2 kernels. Each Op sums one 32-byte block of dst (Step) and hands odd leftovers to the
// scalar kernel, which produces the same bits.

#if defined(__x86_64__)

template <typename T>
struct PlainOp {
  static constexpr size_t kSize = sizeof(T);
  static void Scalar(char* d, const char* s, size_t n) { SumScalar<T>(d, s, n); }

  BYTEPS_TARGET_AVX2 static inline void Step(char* d, const char* s) {
    if constexpr (std::is_same_v<T, float>) {
      _mm256_storeu_ps(reinterpret_cast<float*>(d),
                       _mm256_add_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(d)),
                                     _mm256_loadu_ps(reinterpret_cast<const float*>(s))));
    } else if constexpr (std::is_same_v<T, double>) {
      _mm256_storeu_pd(reinterpret_cast<double*>(d),
                       _mm256_add_pd(_mm256_loadu_pd(reinterpret_cast<const double*>(d)),
                                     _mm256_loadu_pd(reinterpret_cast<const double*>(s))));
    } else {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
      __m256i r;
      if constexpr (sizeof(T) == 1) {
        r = _mm256_add_epi8(a, b);
      } else if constexpr (sizeof(T) == 4) {
        r = _mm256_add_epi32(a, b);
      } else {
        static_assert(sizeof(T) == 8);
        r = _mm256_add_epi64(a, b);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), r);
    }
  }
};

struct HalfOp {
  static constexpr size_t kSize = 2;
  static void Scalar(char* d, const char* s, size_t n) { SumHalfScalar(d, s, n); }

  // 8 halves -> 8 floats, add, round once back with round-to-nearest-even (not MXCSR's mode).
  BYTEPS_TARGET_AVX2 static inline void Step8(char* d, const char* s) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d),
                     _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  BYTEPS_TARGET_AVX2 static inline void Step(char* d, const char* s) {
    Step8(d, s);
    Step8(d + 16, s + 16);
  }
};

struct BFloat16Op {
  static constexpr size_t kSize = 2;
  static void Scalar(char* d, const char* s, size_t n) { SumBFloat16Scalar(d, s, n); }

  // float32 lanes -> bfloat16 in the low 16 bits of each 32-bit lane, exactly as FloatToBFloat16:
  // round to nearest even by adding 0x7fff + lsb; NaN -> top half with the quiet bit set.
  BYTEPS_TARGET_AVX2 static inline __m256i Round(__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    const __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(rounded, nan, is_nan);
  }

  // 16 bf16 per block. Interleaving zeros below each element (unpacklo/hi, per 128-bit lane) gives
  // the float32 bit patterns; packus (also per lane) puts the results back in the original order.
  BYTEPS_TARGET_AVX2 static inline void Step(char* d, const char* s) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256 lo = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, a)),
                                    _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, b)));
    const __m256 hi = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, a)),
                                    _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, b)));
    // Each 32-bit lane holds 0..0xffff, so the unsigned saturation of packus never triggers.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_packus_epi32(Round(lo), Round(hi)));
  }
};

// The streaming driver: scalar prologue to align dst, 4 blocks (128 bytes) per iteration, single
// blocks, then a scalar tail. Blocks are independent (element i reads only element i), so dst ==
// src is fine.
template <class Op>
BYTEPS_TARGET_AVX2 void SumAvx2(char* d, const char* s, size_t n) {
  constexpr size_t kBlock = 32;
  const size_t misalign = reinterpret_cast<uintptr_t>(d) % kBlock;
  if (misalign != 0 && misalign % Op::kSize == 0) {
    const size_t head = std::min(n, (kBlock - misalign) / Op::kSize);
    Op::Scalar(d, s, head);
    d += head * Op::kSize;
    s += head * Op::kSize;
    n -= head;
  }
  const size_t bytes = n * Op::kSize;
  size_t i = 0;
  for (; i + 4 * kBlock <= bytes; i += 4 * kBlock) {
    Op::Step(d + i, s + i);
    Op::Step(d + i + kBlock, s + i + kBlock);
    Op::Step(d + i + 2 * kBlock, s + i + 2 * kBlock);
    Op::Step(d + i + 3 * kBlock, s + i + 3 * kBlock);
  }
  for (; i + kBlock <= bytes; i += kBlock) Op::Step(d + i, s + i);
  Op::Scalar(d + i, s + i, (bytes - i) / Op::kSize);
}

constexpr SumFn kAvx2Kernels[kNumDataTypes] = {
    SumAvx2<PlainOp<float>>,   SumAvx2<PlainOp<double>>, SumAvx2<HalfOp>,
    SumAvx2<PlainOp<uint8_t>>, SumAvx2<PlainOp<int32_t>>, SumAvx2<PlainOp<int8_t>>,
    SumAvx2<PlainOp<int64_t>>, SumAvx2<BFloat16Op>,
};

bool CpuHasAvx2() {
  // libgcc's check includes the OS-enabled YMM state (XGETBV), not just the CPUID bits.
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
                          __builtin_cpu_supports("fma");
  return has;
}

#else  // !__x86_64__

bool CpuHasAvx2() { return false; }

#endif

const SumFn* Kernels(ReducerImpl impl) {
  switch (impl) {
    case ReducerImpl::kScalar:
      return kScalarKernels;
    case ReducerImpl::kAvx2:
#if defined(__x86_64__)
      if (CpuHasAvx2()) return kAvx2Kernels;
#endif
      return nullptr;
    case ReducerImpl::kAuto: {
      static const SumFn* const best =
          ReducerImplAvailable(ReducerImpl::kAvx2) ? Kernels(ReducerImpl::kAvx2) : kScalarKernels;
      return best;
    }
  }
  return nullptr;
}

}  // namespace

bool ReducerImplAvailable(ReducerImpl impl) {
  switch (impl) {
    case ReducerImpl::kAuto:
    case ReducerImpl::kScalar:
      return true;
    case ReducerImpl::kAvx2:
      return CpuHasAvx2();
  }
  return false;
}

const char* ReducerImplName(ReducerImpl impl) {
  switch (impl) {
    case ReducerImpl::kAuto: return "auto";
    case ReducerImpl::kScalar: return "scalar";
    case ReducerImpl::kAvx2: return "avx2";
  }
  return "unknown";
}

void SumInto(void* dst, const void* src, size_t count, DataType dtype, ReducerImpl impl) {
  const auto code = static_cast<size_t>(dtype);
  BYTEPS_CHECK(code < static_cast<size_t>(kNumDataTypes));
  const SumFn* kernels = Kernels(impl);
  BYTEPS_CHECK(kernels != nullptr);
  if (count == 0) return;
  kernels[code](static_cast<char*>(dst), static_cast<const char*>(src), count);
}

void SumInto(void* dst, const void* src, size_t count, DataType dtype) {
  SumInto(dst, src, count, dtype, ReducerImpl::kAuto);
}

}  // namespace byteps::server
