// Summation kernels. Layout: a portable scalar kernel per dtype (also the reference and the tail
// handler), an AVX2 kernel per dtype built from one streaming driver, and a per-impl table indexed
// by the DataType code.
//
// The AVX2 functions carry __attribute__((target(...))) so that this file builds for baseline
// x86-64 and only runs them after CPUID says yes. Large arrays take the same path: one streaming
// pass of unaligned-safe 32-byte loads, 4 vectors per iteration, software prefetch ahead, dst
// aligned to 32 bytes by a short scalar prologue so stores never split cache lines. No threads:
// parallelism comes from the server's engine threads, each summing its own keys.
#include "common/reducer.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/dtype_dispatch.h"
#include "common/logging.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define BYTEPS_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
#endif

namespace byteps {
namespace {

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
    StoreUnaligned<U>(d + off, static_cast<U>(LoadUnaligned<U>(d + off) + LoadUnaligned<U>(s + off)));
  }
}

// float16 / bfloat16: summed in float32, rounded once back.
template <class H>
void SumHalfScalar(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * 2;
    const float sum = H::ToFloat(LoadUnaligned<uint16_t>(d + off)) + H::ToFloat(LoadUnaligned<uint16_t>(s + off));
    StoreUnaligned<uint16_t>(d + off, H::FromFloat(sum));
  }
}

// bool: a logical or (0/1 in, 0/1 out). The plugins refuse to sum bools (torch would count
// them), but an allgather on a host with several processes reduces zero-padded outputs, and
// there the or is the concatenation.
void SumBoolScalar(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<char>((d[i] != 0) | (s[i] != 0));
}

// The scalar kernel of each dtype; common/dtype_dispatch.h lays them out by DataType code.
struct ScalarSum {
  template <typename E>
  static constexpr ElementwiseFn For() {
    if constexpr (std::is_same_v<E, BoolElement>) {
      return SumBoolScalar;
    } else if constexpr (kIsHalfElement<E>) {
      return SumHalfScalar<E>;
    } else {
      return SumScalar<E>;
    }
  }
};

constexpr auto kScalarKernels = MakeKernelTable<ScalarSum>();

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
      } else if constexpr (sizeof(T) == 2) {
        r = _mm256_add_epi16(a, b);
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
  static void Scalar(char* d, const char* s, size_t n) { SumHalfScalar<Float16Element>(d, s, n); }

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
  static void Scalar(char* d, const char* s, size_t n) { SumHalfScalar<BFloat16Element>(d, s, n); }

  // Rounds float32 lanes to bfloat16 in the high 16 bits, exactly as FloatToBFloat16: add 0x7fff
  // plus the lsb of the kept half (ties to even; overflow carries into inf).
  //
  // No NaN special case, on purpose: x86 returns a quieted input NaN or the default NaN
  // 0xffc00000, so a NaN sum of two bfloat16 values has its low 16 bits zero; adding at most 0x8000
  // then changes nothing, and the top half already equals FloatToBFloat16's (x >> 16) | 0x40. The
  // compare + blend would cost ~40% of in-cache throughput. The exhaustive bit-exactness test
  // (every pattern, NaNs included) guards this.
  BYTEPS_TARGET_AVX2 static inline __m256i RoundHigh(__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
  }

  // 16 bf16 per block, no shuffles: in each 32-bit lane the even element becomes a float by a
  // left shift and the odd element by masking off the low half; the results merge back the same
  // way.
  BYTEPS_TARGET_AVX2 static inline void Step(char* d, const char* s) {
    const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256 even = _mm256_add_ps(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)),
                                      _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)));
    const __m256 odd = _mm256_add_ps(_mm256_castsi256_ps(_mm256_and_si256(a, hi_mask)),
                                     _mm256_castsi256_ps(_mm256_and_si256(b, hi_mask)));
    const __m256i r = _mm256_or_si256(_mm256_srli_epi32(RoundHigh(even), 16),
                                      _mm256_and_si256(RoundHigh(odd), hi_mask));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), r);
  }
};

// The streaming driver: scalar prologue to align dst, 4 blocks (128 bytes) per iteration, single
// blocks, then a scalar tail. Blocks are independent (element i reads only element i), so dst ==
// src is fine.
//
// Large arrays: the body prefetches kPrefetchDistance bytes ahead in both arrays. The hardware
// prefetcher alone keeps too few misses in flight once a kernel does real work per byte; on the
// development VM (Xeon, 64 MiB arrays) this took float16 from ~5.7 to ~7.8 and bfloat16 from ~3.0
// to ~7 GB/s of dst, and is neutral for the plain types. The loop stops prefetching
// kPrefetchDistance before the end, so nothing past the arrays is touched and small sums do not
// pay for it.
constexpr size_t kPrefetchDistance = 2048;

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
  for (; i + kPrefetchDistance + 4 * kBlock <= bytes; i += 4 * kBlock) {
    _mm_prefetch(d + i + kPrefetchDistance, _MM_HINT_T0);
    _mm_prefetch(d + i + kPrefetchDistance + 64, _MM_HINT_T0);
    _mm_prefetch(s + i + kPrefetchDistance, _MM_HINT_T0);
    _mm_prefetch(s + i + kPrefetchDistance + 64, _MM_HINT_T0);
    Op::Step(d + i, s + i);
    Op::Step(d + i + kBlock, s + i + kBlock);
    Op::Step(d + i + 2 * kBlock, s + i + 2 * kBlock);
    Op::Step(d + i + 3 * kBlock, s + i + 3 * kBlock);
  }
  for (; i + 4 * kBlock <= bytes; i += 4 * kBlock) {
    Op::Step(d + i, s + i);
    Op::Step(d + i + kBlock, s + i + kBlock);
    Op::Step(d + i + 2 * kBlock, s + i + 2 * kBlock);
    Op::Step(d + i + 3 * kBlock, s + i + 3 * kBlock);
  }
  for (; i + kBlock <= bytes; i += kBlock) Op::Step(d + i, s + i);
  Op::Scalar(d + i, s + i, (bytes - i) / Op::kSize);
}

// The AVX2 kernel of each dtype, laid out the same way.
struct Avx2Sum {
  template <typename E>
  static constexpr ElementwiseFn For() {
    if constexpr (std::is_same_v<E, BoolElement>) {
      return SumBoolScalar;  // rare (zero-padded allgathers of bools): the scalar or is enough
    } else if constexpr (std::is_same_v<E, Float16Element>) {
      return SumAvx2<HalfOp>;
    } else if constexpr (std::is_same_v<E, BFloat16Element>) {
      return SumAvx2<BFloat16Op>;
    } else {
      return SumAvx2<PlainOp<E>>;
    }
  }
};

constexpr auto kAvx2Kernels = MakeKernelTable<Avx2Sum>();

bool CpuHasAvx2() {
  // __builtin_cpu_supports checks the OS-enabled YMM state (XGETBV), not just the CPUID bits.
  // F16C is read from CPUID.1:ECX directly: clang's __builtin_cpu_supports lacks "f16c", and with
  // AVX2 usable its (YMM) state is known to be enabled.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

#else  // !__x86_64__

bool CpuHasAvx2() { return false; }

#endif

const ElementwiseFn* Kernels(ReducerImpl impl) {
  switch (impl) {
    case ReducerImpl::kScalar:
      return kScalarKernels.data();
    case ReducerImpl::kAvx2:
#if defined(__x86_64__)
      if (CpuHasAvx2()) return kAvx2Kernels.data();
#endif
      return nullptr;
    case ReducerImpl::kAuto: {
      static const ElementwiseFn* const best =
          ReducerImplAvailable(ReducerImpl::kAvx2) ? Kernels(ReducerImpl::kAvx2) : kScalarKernels.data();
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
  const ElementwiseFn* kernels = Kernels(impl);
  BYTEPS_CHECK(kernels != nullptr);
  if (count == 0) return;
  kernels[code](static_cast<char*>(dst), static_cast<const char*>(src), count);
}

void SumInto(void* dst, const void* src, size_t count, DataType dtype) {
  SumInto(dst, src, count, dtype, ReducerImpl::kAuto);
}

}  // namespace byteps
