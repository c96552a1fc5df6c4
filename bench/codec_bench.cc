// Codec throughput on one core: compress and decompress-add of 16 MiB of float32 for each codec,
// against a memcpy of the same bytes in the same run.
//
// bytes_per_second counts the float32 input (compress) or the float32 tensor produced
// (decompress-add), 16 MiB per iteration in both, so every figure compares with memcpy's.
//
//   codec_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/params.h"

namespace byteps::compress {
namespace {

constexpr size_t kBytes = size_t{16} << 20;
constexpr size_t kCount = kBytes / 4;

using KV = std::vector<std::pair<std::string, std::string>>;

struct Case {
  const char* name;
  KV kv;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"onebit", {{"compressor", "onebit"}, {"scaling", "true"}}},
      {"fp16", {{"cast", "fp16"}}},
      {"bf16", {{"cast", "bf16"}}},
      {"topk_1pct", {{"compressor", "topk"}, {"k", "0.01"}}},
      {"randomk_1pct", {{"compressor", "randomk"}, {"k", "0.01"}}},
      {"dithering_s4", {{"compressor", "dithering"}, {"k", "4"}}},
      {"dithering_s2_natural", {{"compressor", "dithering"}, {"k", "2"}, {"partition", "natural"}}},
  };
  return cases;
}

std::vector<float> Gradient() {
  std::vector<float> x(kCount);
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& v : x) v = d(g);
  return x;
}

std::unique_ptr<Codec> Build(const KV& kv) {
  return std::move(MakeCodec(ParseParams(kv, "bench").value(), DataType::kFloat32, "bench")).value();
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<float> src = Gradient(), dst(kCount);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
}

void BM_Compress(benchmark::State& state, const Case* c) {
  auto codec = Build(c->kv);
  std::vector<float> x = Gradient();
  std::vector<uint8_t> out(codec->MaxCompressedBytes(kCount));
  size_t len = 0;
  uint64_t round = 0;
  for (auto _ : state) {
    auto r = codec->Compress(x.data(), kCount, 0, round++, out.data(), out.size());
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    len = r.value();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
  state.counters["ratio"] = static_cast<double>(kBytes) / static_cast<double>(len);
}

void BM_DecompressAdd(benchmark::State& state, const Case* c) {
  auto codec = Build(c->kv);
  std::vector<float> x = Gradient(), acc(kCount, 0.0f);
  std::vector<uint8_t> out(codec->MaxCompressedBytes(kCount));
  const size_t len = codec->Compress(x.data(), kCount, 0, 0, out.data(), out.size()).value();
  for (auto _ : state) {
    Status st = codec->DecompressAdd(out.data(), len, kCount, acc.data());
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
}

const bool kRegistered = [] {
  benchmark::RegisterBenchmark("Memcpy/16MiB", BM_Memcpy)->UseRealTime();
  for (const Case& c : Cases()) {
    benchmark::RegisterBenchmark((std::string("Compress/") + c.name + "/16MiB").c_str(), BM_Compress, &c)
        ->UseRealTime();
  }
  for (const Case& c : Cases()) {
    benchmark::RegisterBenchmark((std::string("DecompressAdd/") + c.name + "/16MiB").c_str(), BM_DecompressAdd, &c)
        ->UseRealTime();
  }
  return true;
}();

}  // namespace
}  // namespace byteps::compress

BENCHMARK_MAIN();
