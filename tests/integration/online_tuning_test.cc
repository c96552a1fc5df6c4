// The online tuner's partition phase under threads whose push_pull streams differ between the
// workers: every use of a tensor runs in the generation its own use count says (the same on every
// worker), worker 0's words are agreed without serialising anyone, every sum is exact, and the
// generation left behind is freed on the servers tensor by tensor.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "protocol/partitioner.h"
#include "tests/integration/cluster_harness.h"


namespace byteps::testing {
namespace {

constexpr int kThreads = 4;
// Past the whole partition phase (2 warm-up uses, a block of 4 in each size, one more while the
// verdict travels, then the verdict from use 11 on).
constexpr int kUses = 11 + 3;

size_t Floats(int mine) { return 200000 + 70000 * static_cast<size_t>(mine); }

// "A and B" of the report's "explores partitions of A and B bytes", and C of "; online: partition C".
bool ReadReport(const std::string& report, size_t* a, size_t* b, size_t* chosen) {
  const size_t explores = report.find("explores partitions of "), online = report.find("; online: partition ");
  return explores != std::string::npos && online != std::string::npos &&
         std::sscanf(report.c_str() + explores, "explores partitions of %zu and %zu", a, b) == 2 &&
         std::sscanf(report.c_str() + online, "; online: partition %zu", chosen) == 1;
}

TEST(OnlineTuningTest, ThreadsWhoseStreamsDifferCrossThePartitionPhaseWithExactSums) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<std::future<void>> fs;
  for (int w = 0; w < 2; ++w) {
    for (int t = 0; t < kThreads; ++t) {
      fs.push_back(std::async(std::launch::async, [&, w, t] {
        const int mine = w == 0 ? t : kThreads - 1 - t;  // the other order on worker 1
        std::mt19937 rng(static_cast<unsigned>(17 * w + t));
        std::uniform_int_distribution<int> pause_us(0, 3000);
        worker::Engine& e = h.worker(w);
        const size_t n = Floats(mine);
        std::vector<float> buf(n);
        for (int u = 0; u < kUses; ++u) {
          // Each thread at its own pace, differently on each worker: the workers' streams (and
          // their iteration boundaries) differ, the uses of each tensor do not.
          std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
          for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>((w + 1) * (mine + u) + i % 7);
          worker::TensorRequest req{"stream." + std::to_string(mine), buf.data(), buf.data(), n * 4,
                                    DataType::kFloat32, false, 0};
          auto hd = e.Enqueue(req);
          ASSERT_TRUE(hd.ok()) << hd.status().ToString();
          Status st = e.Wait(hd.value(), 30);
          e.Release(hd.value());
          ASSERT_TRUE(st.ok()) << "worker " << w << " use " << u << " of " << req.name << ": " << st.ToString();
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(buf[i], static_cast<float>(3 * (mine + u) + 2 * (i % 7)))
                << "worker " << w << " use " << u << " of " << req.name << " [" << i << "]";
          }
        }
      }));
    }
  }
  for (auto& f : fs) f.get();
  if (::testing::Test::HasFatalFailure()) return;
  size_t a = 0, b = 0, chosen = 0;
  const std::string report = h.worker(0).settings_report();
  ASSERT_TRUE(ReadReport(report, &a, &b, &chosen)) << "the partition phase did not end: " << report;
  size_t a1 = 0, b1 = 0, chosen1 = 0;
  ASSERT_TRUE(ReadReport(h.worker(1).settings_report(), &a1, &b1, &chosen1)) << h.worker(1).settings_report();
  EXPECT_EQ(std::make_pair(a, b), std::make_pair(a1, b1));
  EXPECT_EQ(chosen, chosen1);
  ASSERT_TRUE(chosen == a || chosen == b) << report;
  // Each tensor's partitions of the size left behind are freed once both workers released them
  // (at their use 11; the release goes out with the next push).
  const size_t loser = chosen == a ? b : a;
  size_t expected = 0;
  for (int t = 0; t < kThreads; ++t) expected += protocol::SplitIntoPartitions(Floats(t) * 4, loser, 4).size();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (h.server(0).keys_freed() + h.server(1).keys_freed() < expected &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(h.server(0).keys_freed() + h.server(1).keys_freed(), expected) << report;
  std::printf("[ online   ] partitions of %zu and %zu bytes explored by %d threads per worker, settled on %zu: %s\n",
              a, b, kThreads, chosen, report.c_str());
  EXPECT_TRUE(h.ShutdownAll().ok());
}

}  // namespace
}  // namespace byteps::testing
