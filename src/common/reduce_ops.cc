// The reductions other than the sum (common/reducer.h): element-wise min, max and product for
// every dtype, and ReduceInto, which sends kSum to the summation kernels (reducer.cc).
//
// One portable kernel per (kind, dtype), on purpose without hand-written SIMD: these ops are rare
// next to gradient sums (Horovod's Min/Max/Product reduce metrics and masks), and a scalar loop the
// compiler may vectorize is easier to keep bit-exact (NaN propagation, ties, wrap-around) than an
// intrinsic per dtype.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/dtype_dispatch.h"
#include "common/logging.h"
#include "common/reducer.h"

namespace byteps {
namespace {

// The three reductions on values of one arithmetic type. Integers multiply in unsigned 64 bits
// (wrap-around is defined there and, truncated, equals two's complement; a narrower unsigned
// type would promote to int and could overflow it).
struct MinOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return b < a ? b : a;
  }
};

struct MaxOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return a < b ? b : a;
  }
};

struct ProductOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    } else {
      return a * b;
    }
  }
};

template <class Op, typename T>
void Plain(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * sizeof(T);
    StoreUnaligned<T>(d + off, Op::template Apply<T>(LoadUnaligned<T>(d + off), LoadUnaligned<T>(s + off)));
  }
}

// float16 / bfloat16: computed in float32. Min and max pick one input's bits (no rounding, and a
// NaN keeps its payload); the product is rounded once back.
template <class Op, class H>
void Half(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const size_t off = i * 2;
    const uint16_t a = LoadUnaligned<uint16_t>(d + off), b = LoadUnaligned<uint16_t>(s + off);
    const float fa = H::ToFloat(a), fb = H::ToFloat(b);
    uint16_t out;
    if constexpr (std::is_same_v<Op, ProductOp>) {
      out = H::FromFloat(fa * fb);
    } else {
      const bool b_wins = std::is_same_v<Op, MinOp> ? fb < fa : fa < fb;
      out = !std::isnan(fa) && (std::isnan(fb) || b_wins) ? b : a;
    }
    StoreUnaligned<uint16_t>(d + off, out);
  }
}

// bool: min and product are and, max is or.
template <class Op>
void Bool(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const bool a = d[i] != 0, b = s[i] != 0;
    d[i] = static_cast<char>(std::is_same_v<Op, MaxOp> ? (a || b) : (a && b));
  }
}

// The kernels of one reduction, per element type (common/dtype_dispatch.h builds the table).
template <class Op>
struct OpKernels {
  template <typename E>
  static constexpr ElementwiseFn For() {
    if constexpr (std::is_same_v<E, BoolElement>) {
      return Bool<Op>;
    } else if constexpr (kIsHalfElement<E>) {
      return Half<Op, E>;
    } else {
      return Plain<Op, E>;
    }
  }
};

template <class Op>
constexpr auto kKernels = MakeKernelTable<OpKernels<Op>>();

}  // namespace

const char* ReduceKindName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kProduct: return "product";
  }
  return "unknown";
}

void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceKind kind, ReducerImpl impl) {
  if (kind == ReduceKind::kSum) return SumInto(dst, src, count, dtype, impl);
  const auto code = static_cast<size_t>(dtype);
  BYTEPS_CHECK(code < static_cast<size_t>(kNumDataTypes));
  BYTEPS_CHECK(ReducerImplAvailable(impl));
  if (count == 0) return;
  const ElementwiseFn* kernels = kind == ReduceKind::kMin   ? kKernels<MinOp>.data()
                                  : kind == ReduceKind::kMax ? kKernels<MaxOp>.data()
                                                             : kKernels<ProductOp>.data();
  BYTEPS_CHECK(kind == ReduceKind::kMin || kind == ReduceKind::kMax || kind == ReduceKind::kProduct);
  kernels[code](static_cast<char*>(dst), static_cast<const char*>(src), count);
}

void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceKind kind) {
  ReduceInto(dst, src, count, dtype, kind, ReducerImpl::kAuto);
}

}  // namespace byteps
