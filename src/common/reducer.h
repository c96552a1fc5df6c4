// Element-wise summation of pushed gradients into the server's accumulation buffer.
//
// This is the server's hot loop, so it runs near memory bandwidth: an AVX2 (+F16C) path chosen once
// per process by CPUID, and a portable scalar path that is also the reference for tests. All work
// happens on the calling thread (no OpenMP, no thread pool): the server already pins each key to one
// engine thread, and several engine threads sum concurrently.
//
// Thread-safety: all functions are thread-safe; concurrent calls must not share a dst buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace byteps {

enum class ReducerImpl {
  kAuto,    // best available on this CPU, chosen once at first use
  kScalar,  // portable reference
  kAvx2,    // AVX2 (+F16C for float16); x86-64 only, and only if the CPU has it
};

// dst[i] = dst[i] + src[i] for i < count elements of dtype. dst/src may be unaligned; they must not
// overlap, except dst == src which is allowed (doubles dst). Integer types wrap (two's complement)
// like torch; float16/bfloat16 are summed in float32 and rounded once (to nearest even) back, which
// for a sum of two halves equals the correctly rounded result. NaN inputs give NaN.
// Preconditions (checked, abort on violation): dtype is a valid DataType.
void SumInto(void* dst, const void* src, size_t count, DataType dtype);

// Same with an explicit implementation, for tests and benchmarks. Precondition (checked):
// ReducerImplAvailable(impl). All implementations give bit-identical results (NaN payloads aside).
void SumInto(void* dst, const void* src, size_t count, DataType dtype, ReducerImpl impl);

// kAuto and kScalar are always available; kAvx2 only on x86-64 CPUs with AVX2, F16C and FMA.
bool ReducerImplAvailable(ReducerImpl impl);

// "auto", "scalar", "avx2".
const char* ReducerImplName(ReducerImpl impl);

// What a reduction does with the elements of two arrays (a server key's policy, the local reduce).
enum class ReduceKind : uint8_t {
  kSum = 0,      // SumInto
  kMin = 1,      // the smaller; bool: and
  kMax = 2,      // the larger; bool: or
  kProduct = 3,  // integers wrap like the sum; bool: and
};

// "sum", "min", "max", "product".
const char* ReduceKindName(ReduceKind kind);

// dst[i] = kind(dst[i], src[i]) for i < count elements of dtype (same aliasing rules as SumInto;
// kSum is SumInto). float16/bfloat16 are computed in float32 and rounded once to nearest even
// (min/max return one of the inputs bit for bit; a product of two halves is exact in float32, so
// its one rounding is the correctly rounded product). Floating min/max propagate NaN like
// torch.minimum/maximum (either input NaN: NaN); on equal values (+0 and -0) dst is kept.
// bool bytes are read as false (0) or true (anything else) and written as 0 or 1.
// Precondition (checked): dtype is a valid DataType.
void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceKind kind);

// Same with an explicit implementation, for tests and benchmarks (min/max/product have one
// portable implementation: every impl runs it). Precondition (checked): ReducerImplAvailable(impl).
void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceKind kind, ReducerImpl impl);

}  // namespace byteps
