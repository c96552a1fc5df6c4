#include "reduce_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

namespace byteps::reduce_reference {
namespace {

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, AlignedFree>;

Buffer Allocate(size_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64)));
}

constexpr uint8_t kCanary = 0xa5;
constexpr size_t kGuard = 64;  // canary bytes on each side of dst

}  // namespace

double Value16(uint16_t h, DataType t) {
  const bool half = t == DataType::kFloat16;
  const int man_bits = half ? 10 : 7, bias = half ? 15 : 127;
  const int emax = half ? 31 : 255;
  const int e = (h & 0x7fff) >> man_bits, m = h & ((1 << man_bits) - 1);
  double v;
  if (e == emax) {
    v = m == 0 ? INFINITY : NAN;
  } else {
    v = e == 0 ? std::ldexp(m, 1 - bias - man_bits) : std::ldexp(m + (1 << man_bits), e - bias - man_bits);
  }
  return (h & 0x8000) ? -v : v;
}

bool IsNaN16(uint16_t h, DataType t) { return (h & 0x7fff) > (t == DataType::kFloat16 ? 0x7c00 : 0x7f80); }

uint16_t Round16(double x, DataType t) {
  const bool half = t == DataType::kFloat16;
  const uint16_t inf = half ? 0x7c00 : 0x7f80;
  // Built on first use per format; gtest runs a binary's tests on one thread.
  static std::vector<double> tables[2];
  std::vector<double>& table = tables[half ? 0 : 1];
  if (table.empty()) {
    for (uint32_t h = 0; h < inf; ++h) table.push_back(Value16(static_cast<uint16_t>(h), t));
    table.push_back(half ? 65536.0 : std::ldexp(1.0, 128));  // 2^(emax+1): the overflow threshold
  }
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  auto it = std::lower_bound(table.begin(), table.end(), a);
  if (it == table.end()) return sign | inf;
  const auto hi = static_cast<uint16_t>(it - table.begin());
  if (*it == a || hi == 0) return sign | hi;
  const uint16_t lo = hi - 1;
  const double dlo = a - table[lo], dhi = table[hi] - a;
  if (dlo != dhi) return sign | (dlo < dhi ? lo : hi);
  return sign | (lo % 2 == 0 ? lo : hi);
}

std::string FirstMismatch(size_t n, const std::string& what, const std::function<bool(size_t)>& ok) {
  for (size_t i = 0; i < n; ++i) {
    if (!ok(i)) return what + " mismatch at element " + std::to_string(i);
  }
  return "";
}

std::string RunGuarded(DataType t, size_t n, size_t dst_off, size_t src_off, std::mt19937_64& rng,
                       const FillFn& fill, const RunFn& run, const VerifyFn& verify) {
  const size_t bytes = n * DataTypeSize(t);
  const size_t dst_total = kGuard + dst_off + bytes + kGuard;
  Buffer dst_buf = Allocate(dst_total), src_buf = Allocate(src_off + bytes);
  std::memset(dst_buf.get(), kCanary, dst_total);
  uint8_t* dst = dst_buf.get() + kGuard + dst_off;
  uint8_t* src = src_buf.get() + src_off;
  fill(t, dst, n, rng);
  fill(t, src, n, rng);
  const std::vector<uint8_t> before(dst, dst + bytes), src_copy(src, src + bytes);

  run(dst, src);

  if (std::string error = verify(before.data(), src, dst); !error.empty()) return error;
  if (!std::equal(src, src + bytes, src_copy.begin())) return "src modified";
  for (size_t k = 0; k < kGuard + dst_off; ++k) {
    if (dst_buf.get()[k] != kCanary) return "underrun at guard byte " + std::to_string(k);
  }
  for (size_t k = kGuard + dst_off + bytes; k < dst_total; ++k) {
    if (dst_buf.get()[k] != kCanary) return "overrun at guard byte " + std::to_string(k);
  }
  return "";
}

std::string RunAliased(DataType t, size_t n, size_t off, std::mt19937_64& rng, const FillFn& fill,
                       const RunFn& run, const VerifyFn& verify) {
  const size_t bytes = n * DataTypeSize(t);
  Buffer buf = Allocate(off + bytes);
  uint8_t* p = buf.get() + off;
  fill(t, p, n, rng);
  const std::vector<uint8_t> before(p, p + bytes);
  run(p, p);
  return verify(before.data(), before.data(), p);
}

}  // namespace byteps::reduce_reference
