// Adasum: the adaptive summation of gradients (Maleki et al., "Scaling Distributed Training with
// Adaptive Summation"), as Horovod defines it. Two vectors a, b combine as
//   adasum(a, b) = (1 - d/(2A))·a + (1 - d/(2B))·b,  d = a·b, A = |a|², B = |b|²,
// with d, A and B accumulated in float64, and a coefficient forced to 1 when its vector's norm²
// is below sqrt(DBL_MIN) (a zero vector adds itself, not NaN). Orthogonal vectors add, parallel
// ones average, and scaling every input by c scales the result by c.
// n vectors g_0..g_{n-1} combine in Horovod's tree order:
//   R(lo, hi) = g_lo if hi - lo == 1 else adasum(R(lo, mid), R(mid, hi)),  mid = (lo + hi) / 2,
// result R(0, n). For a power of two this is Horovod's recursive halving/doubling order; byteps
// takes any n (Horovod requires a power of two on CPU), with the same formula.
// Element types: float16 (read into float64, each pair's result rounded once to float16),
// float32 and float64; the rest is computed in float64 and rounded once to the element type.
// Thread-safety: pure functions; concurrent calls must not share a buffer they write.
#pragma once

#include <cstddef>
#include <vector>

#include "common/dtype.h"

namespace byteps {

// float16, float32 and float64.
bool AdasumSupports(DataType dtype);

// a = adasum(a, b) for `count` elements of dtype. a and b must not overlap.
// Precondition (checked, abort on violation): AdasumSupports(dtype).
void AdasumInto(void* a, const void* b, size_t count, DataType dtype);

// R(0, n) of parts[0..n) (n >= 1, each `count` elements of dtype, pairwise distinct buffers) in
// the tree order above. The result lands in parts[0]; the other buffers are overwritten with
// intermediate results. Precondition (checked): AdasumSupports(dtype), n >= 1.
void AdasumTree(const std::vector<void*>& parts, size_t count, DataType dtype);

}  // namespace byteps
