// Server summation throughput: SumInto per dtype x implementation against a memcpy baseline.
//
// bytes_per_second counts the bytes of dst produced (the "useful" bytes, same for memcpy) so the
// figures compare directly; mem_bytes_per_second counts the memory traffic the loop needs: 3x for a
// sum (read dst, read src, write dst) and 2x for memcpy (read src, write dst).
//
//   reducer_bench --benchmark_min_time=0.2 [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/half.h"
#include "common/reducer.h"

namespace byteps {
namespace {

constexpr size_t kSizes[] = {size_t{4} << 10, size_t{256} << 10, size_t{4} << 20, size_t{64} << 20};
constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                               DataType::kFloat64, DataType::kInt32};
constexpr ReducerImpl kImpls[] = {ReducerImpl::kScalar, ReducerImpl::kAvx2, ReducerImpl::kAuto};

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, Free>;

Buffer Allocate(size_t bytes) {
  return Buffer(static_cast<char*>(std::aligned_alloc(64, bytes)));
}

// Small normal values: the sums never reach inf/NaN or subnormals (no slow paths), and every
// page is touched before timing starts.
void FillValues(char* p, size_t bytes, DataType t, double v) {
  const size_t es = DataTypeSize(t);
  for (size_t off = 0; off + es <= bytes; off += es) {
    switch (t) {
      case DataType::kFloat32: { const float f = static_cast<float>(v); std::memcpy(p + off, &f, 4); break; }
      case DataType::kFloat64: std::memcpy(p + off, &v, 8); break;
      case DataType::kFloat16: { const uint16_t h = FloatToHalf(static_cast<float>(v)); std::memcpy(p + off, &h, 2); break; }
      case DataType::kBFloat16: { const uint16_t h = FloatToBFloat16(static_cast<float>(v)); std::memcpy(p + off, &h, 2); break; }
      default: { const int64_t i = static_cast<int64_t>(v * 1000); std::memcpy(p + off, &i, es); break; }
    }
  }
}

void SetCounters(benchmark::State& state, size_t bytes, int traffic_multiple) {
  const auto done = static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes);
  state.SetBytesProcessed(done);
  state.counters["mem_bytes_per_second"] = benchmark::Counter(
      static_cast<double>(done) * traffic_multiple, benchmark::Counter::kIsRate,
      benchmark::Counter::OneK::kIs1024);
}

void BM_Memcpy(benchmark::State& state, size_t bytes) {
  Buffer dst = Allocate(bytes), src = Allocate(bytes);
  std::memset(dst.get(), 0, bytes);
  std::memset(src.get(), 1, bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  SetCounters(state, bytes, 2);
}

void BM_SumInto(benchmark::State& state, DataType t, ReducerImpl impl, size_t bytes) {
  if (!ReducerImplAvailable(impl)) {
    state.SkipWithError("implementation not available on this CPU");
    return;
  }
  const size_t count = bytes / DataTypeSize(t);
  Buffer dst = Allocate(bytes), src = Allocate(bytes);
  FillValues(dst.get(), bytes, t, 1.0);
  FillValues(src.get(), bytes, t, 0.001);
  for (auto _ : state) {
    SumInto(dst.get(), src.get(), count, t, impl);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  SetCounters(state, bytes, 3);
}

std::string SizeName(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + "MiB"
                                    : std::to_string(bytes >> 10) + "KiB";
}

// Registered before main runs (BENCHMARK_MAIN); names read "SumInto/float16/avx2/4MiB".
const bool kRegistered = [] {
  for (size_t bytes : kSizes) {
    benchmark::RegisterBenchmark(("Memcpy/" + SizeName(bytes)).c_str(), BM_Memcpy, bytes)
        ->UseRealTime();
  }
  for (DataType t : kTypes) {
    for (ReducerImpl impl : kImpls) {
      for (size_t bytes : kSizes) {
        const std::string name = std::string("SumInto/") + DataTypeName(t) + "/" +
                                 ReducerImplName(impl) + "/" + SizeName(bytes);
        benchmark::RegisterBenchmark(name.c_str(), BM_SumInto, t, impl, bytes)->UseRealTime();
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace byteps

BENCHMARK_MAIN();
