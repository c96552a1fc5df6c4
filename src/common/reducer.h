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

}  // namespace byteps
