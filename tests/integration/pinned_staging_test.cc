// Pinned staging memory of device tensors through a whole job while the online tuner explores the
// partition size (a second key generation: every partition key new) and settles on one: the
// workers' pinned bytes stay within 1.25 x the largest working set (never one buffer per key of
// both generations), the generation left behind gives its buffers back, and every sum is exact
// while buffers move between keys. Prints the figure (docs/benchmarks.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "device/fake_device.h"
#include "tests/integration/cluster_harness.h"

namespace byteps::testing {
namespace {

// Per iteration 18 MiB and a bit in 4 tensors: more than 4 x the largest partition candidate
// (4 MiB), so the tuner counts every iteration.
constexpr size_t kCounts[] = {(10u << 20) / 4, (5u << 20) / 4, (3u << 20) / 4, 1000};
constexpr int kMaxIterations = 40;  // the partition phase settles after 10 counted ones
constexpr int kAfterSettling = 4;   // iterations in the chosen generation
// The steady state starts at the second iteration in the chosen generation: the generation left
// behind frees its buffers lazily, at the next lease after its last round came back, and under load
// that round can come back during the first iteration in the chosen one.
constexpr int kSettledFrom = 2;
constexpr size_t kIterationBytes = 4 * ((10u << 20) / 4 + (5u << 20) / 4 + (3u << 20) / 4 + 1000);

float Value(int w, size_t i, int it) { return static_cast<float>((w + 1) * (i % 11) + it); }

struct Outcome {
  int iterations = 0;
  int after_settling = 0;
  std::string report;
  worker::StagingStats settled;  // after kSettledFrom iterations in the chosen generation
  worker::StagingStats stats;    // at the end
};

// Worker `w`'s iterations on fake device `fake`: every tensor enqueued, then every result checked.
Outcome Train(worker::Engine& e, int w, int n, int fake) {
  Outcome out;
  std::vector<std::vector<float>> data(std::size(kCounts));
  for (int it = 0; it < kMaxIterations && out.after_settling < kAfterSettling; ++it) {
    std::vector<worker::HandleId> hs;
    for (size_t k = 0; k < data.size(); ++k) {
      data[k].resize(kCounts[k]);
      for (size_t i = 0; i < kCounts[k]; ++i) data[k][i] = Value(w, i, it);
      worker::TensorRequest r;
      r.name = fmt::format("grad.{}", k);
      r.input = r.output = data[k].data();
      r.bytes = kCounts[k] * 4;
      r.device = {device::Kind::kFake, fake, nullptr};
      auto h = e.Enqueue(r);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      if (!h.ok()) return out;
      hs.push_back(*h);
    }
    for (size_t k = 0; k < hs.size(); ++k) {
      Status st = e.Wait(hs[k], 30);
      EXPECT_TRUE(st.ok()) << "worker " << w << " iteration " << it << ": " << st.ToString();
      e.Release(hs[k]);
      if (!st.ok()) return out;
      for (size_t i = 0; i < kCounts[k]; ++i) {
        float want = 0;
        for (int v = 0; v < n; ++v) want += Value(v, i, it);
        if (data[k][i] != want) {
          ADD_FAILURE() << "worker " << w << " iteration " << it << " grad." << k << "[" << i << "] = " << data[k][i]
                        << ", want " << want;
          return out;
        }
      }
    }
    out.iterations = it + 1;
    out.report = e.settings_report();
    if (out.report.find("; online: partition") != std::string::npos && ++out.after_settling == kSettledFrom) {
      out.settled = e.staging_stats();
    }
  }
  out.stats = e.staging_stats();
  return out;
}

// The generation the tuner settled on: 0 (the start-up choice) or 1, from the engine's report
// ("... explores partitions of A and B bytes ...; online: partition C bytes, ..."); 2 if unreadable.
uint32_t ChosenGeneration(const std::string& report) {
  size_t a = 0, b = 0, c = 0;
  const size_t explores = report.find("explores partitions of "), online = report.find("; online: partition ");
  if (explores == std::string::npos || online == std::string::npos) return 2;
  if (std::sscanf(report.c_str() + explores, "explores partitions of %zu and %zu", &a, &b) != 2) return 2;
  if (std::sscanf(report.c_str() + online, "; online: partition %zu", &c) != 1) return 2;
  return c == a ? 0 : c == b ? 1 : 2;
}

// "A and B" from the report's "explores partitions of A and B bytes".
std::string Explored(const std::string& report) {
  const size_t from = report.find("explores partitions of ");
  if (from == std::string::npos) return "?";
  const size_t start = from + 23;
  return report.substr(start, report.find(" bytes", start) - start);
}

TEST(PinnedStagingTest, PeakPinnedStaysWithinTheWorkingSetWhileTheTunerSwitchesGenerations) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<std::future<Outcome>> fs;
  for (int w = 0; w < 2; ++w) {
    fs.push_back(std::async(std::launch::async, [&, w] { return Train(h.worker(w), w, 2, 400 + w); }));
  }
  for (int w = 0; w < 2; ++w) {
    const Outcome out = fs[w].get();
    const worker::StagingStats& s = out.stats;
    ASSERT_EQ(out.after_settling, kAfterSettling)
        << "worker " << w << ": the partition size did not settle in " << out.iterations
        << " iterations: " << out.report;
    ASSERT_NE(out.report.find("the online tuner explores partitions of"), std::string::npos) << out.report;
    const size_t online = out.report.find("; online: partition ") + 20;
    std::printf("[ staging  ] worker %d, %d iterations of %zu bytes, partitions of %s bytes explored, settled on "
                "generation %u (%zu bytes): peak pinned %zu bytes, peak working set %zu (x%.3f), budget %zu; "
                "%llu allocated, %llu reused, %llu freed; now %zu pinned in %zu buffers\n",
                w, out.iterations, kIterationBytes, Explored(out.report).c_str(), ChosenGeneration(out.report),
                static_cast<size_t>(std::strtoull(out.report.c_str() + online, nullptr, 10)), s.peak_pinned_bytes,
                s.peak_working_set_bytes,
                static_cast<double>(s.peak_pinned_bytes) / static_cast<double>(s.peak_working_set_bytes),
                s.budget_bytes,
                static_cast<unsigned long long>(s.allocated), static_cast<unsigned long long>(s.reused),
                static_cast<unsigned long long>(s.freed), s.pinned_bytes, s.buffers);
    // The working set: partitions between copy-in and copy-out's end, at most one iteration.
    EXPECT_GT(s.peak_working_set_bytes, 0u);
    EXPECT_LE(s.peak_working_set_bytes, kIterationBytes);
    EXPECT_LE(s.peak_pinned_bytes, s.budget_bytes) << "worker " << w;
    EXPECT_LE(s.budget_bytes, s.peak_working_set_bytes + s.peak_working_set_bytes / 4) << "worker " << w;
    // One buffer per key would have held both generations' keys: twice an iteration.
    EXPECT_LT(s.peak_pinned_bytes, kIterationBytes + kIterationBytes / 4 + 1) << "worker " << w;
    // The generation left behind gave its buffers back: every buffer pinned now is the chosen
    // generation's.
    const uint32_t chosen = ChosenGeneration(out.report);
    ASSERT_LT(chosen, 2u) << out.report;
    EXPECT_EQ(s.retired_bytes, 0u) << "worker " << w;
    ASSERT_EQ(s.pinned_bytes_by_generation.size(), 1u) << "worker " << w << ": more than the chosen generation's";
    EXPECT_EQ(s.pinned_bytes_by_generation.begin()->first, chosen) << "worker " << w;
    EXPECT_GT(s.freed, 0u) << "worker " << w;
    EXPECT_EQ(s.working_set_bytes, 0u) << "worker " << w;
    EXPECT_LE(s.pinned_bytes, s.budget_bytes) << "worker " << w;
    EXPECT_GT(s.reused, s.allocated) << "worker " << w;
    // Once settled, rounds mostly reuse what the last one gave back, but not always: partitions of
    // different size classes overlap differently from one iteration to the next (much more so under
    // a sanitizer on a loaded machine: 8 of 14 leases allocated in two settled iterations once, before
    // oversized leases), so a round may still allocate within the budget; one that would go over
    // leases an idle buffer of a larger class rather than free it (staging_pool.h; the churn itself:
    // unit/staging_churn_test.cc). Asserted: never a free without an allocation, and over the whole
    // job more reuse than allocation (above). The settled window's counts are printed.
    const uint64_t allocated = s.allocated - out.settled.allocated, reused = s.reused - out.settled.reused,
                   freed = s.freed - out.settled.freed;
    std::printf("[ staging  ] worker %d, settled iterations %d..%d: %llu allocated, %llu reused, %llu freed\n", w,
                kSettledFrom, kAfterSettling, static_cast<unsigned long long>(allocated),
                static_cast<unsigned long long>(reused), static_cast<unsigned long long>(freed));
    if (allocated == 0) {
      EXPECT_EQ(freed, 0u) << "worker " << w << ": a settled round freed without allocating";
    }
  }
  EXPECT_TRUE(h.ShutdownAll().ok());
}

}  // namespace
}  // namespace byteps::testing
