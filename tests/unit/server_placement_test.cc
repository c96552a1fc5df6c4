// Which servers are colocated, and their shares, from the registered hosts
// (protocol/server_placement.h): equal unless both kinds are there, the optimal split when they
// are, BYTEPS_ENABLE_MIXED_MODE's three settings, and the named errors.
#include "protocol/server_placement.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "protocol/mixed_split.h"

namespace byteps::protocol {
namespace {

using Hosts = std::vector<std::string>;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// n worker machines 10.0.0.i, each with its server, plus k CPU machines 10.0.1.j.
Hosts Workers(int n) {
  Hosts h;
  for (int i = 0; i < n; ++i) h.push_back("10.0.0." + std::to_string(i + 1));
  return h;
}
Hosts Servers(int n, int k) {
  Hosts h = Workers(n);
  for (int j = 0; j < k; ++j) h.push_back("10.0.1." + std::to_string(j + 1));
  return h;
}

TEST(ServerPlacementTest, OneMachineOrOnlyOneKindGivesEqualShares) {
  for (auto [workers, servers] : {std::pair{Hosts(3, "127.0.0.1"), Hosts(2, "127.0.0.1")},  // a one-machine job
                                  std::pair{Workers(4), Servers(0, 3)},                     // CPU servers only
                                  std::pair{Workers(4), Servers(4, 0)}}) {                  // colocated only
    for (MixedMode mode : {MixedMode::kAuto, MixedMode::kOff}) {
      auto p = PlaceServers(workers, servers, mode);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_FALSE(p->mixed);
      EXPECT_TRUE(p->warning.empty()) << p->warning;
      ASSERT_EQ(p->shares.size(), servers.size());
      for (double s : p->shares) EXPECT_DOUBLE_EQ(s, 1.0 / servers.size());
    }
  }
}

TEST(ServerPlacementTest, BothKindsGetTheOptimalSplitByDefault) {
  for (int n = 2; n <= 16; ++n) {
    for (int k = 1; k <= 16; ++k) {
      auto p = PlaceServers(Workers(n), Servers(n, k), MixedMode::kAuto);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      ASSERT_TRUE(p->mixed) << "n " << n << " k " << k;
      const double d = n * n + k * n - 2.0 * k;
      for (int s = 0; s < n + k; ++s) {
        EXPECT_EQ(p->colocated[s], s < n);
        if (k <= n) EXPECT_NEAR(p->shares[s], s < n ? (n - k) / d : 2.0 * (n - 1) / d, 1e-12) << n << " " << k << " " << s;
      }
      EXPECT_NEAR(std::accumulate(p->shares.begin(), p->shares.end(), 0.0), 1.0, 1e-9);
    }
  }
  auto p = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kOn);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->shares[0], 0.1, 1e-12);
  EXPECT_NEAR(p->shares[4], 0.3, 1e-12);
  EXPECT_TRUE(Has(p->summary, "1.250x ring all-reduce")) << p->summary;
  EXPECT_TRUE(Has(p->summary, "1.667x the CPU servers alone")) << p->summary;
}

TEST(ServerPlacementTest, ServerOrderDoesNotMatterOnlyWhereEachRuns) {
  const Hosts servers = {"10.0.1.1", "10.0.0.2", "10.0.0.1", "10.0.1.2", "10.0.0.3", "10.0.0.4"};
  auto p = PlaceServers(Workers(4), servers, MixedMode::kAuto);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->colocated, (std::vector<bool>{false, true, true, false, true, true}));
  EXPECT_NEAR(p->shares[0], 0.3, 1e-12);
  EXPECT_NEAR(p->shares[1], 0.1, 1e-12);
}

TEST(ServerPlacementTest, FasterCpuMachinesTakeMore) {
  auto equal = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kAuto);
  auto fast = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kAuto, /*cpu_rate=*/2, /*worker_rate=*/1);
  auto slow = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kAuto, /*cpu_rate=*/0.5, /*worker_rate=*/1);
  ASSERT_TRUE(equal.ok() && fast.ok() && slow.ok());
  EXPECT_GT(fast->shares[4], equal->shares[4]);
  EXPECT_LT(slow->shares[4], equal->shares[4]);
  EXPECT_TRUE(Has(fast->summary, "NIC rates")) << fast->summary;
}

TEST(ServerPlacementTest, ZeroKeepsEqualShares) {
  auto p = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kOff);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->mixed);
  for (double s : p->shares) EXPECT_DOUBLE_EQ(s, 1.0 / 6);
  EXPECT_TRUE(Has(p->summary, "BYTEPS_ENABLE_MIXED_MODE=0")) << p->summary;
}

TEST(ServerPlacementTest, ALayoutThatCannotBeMixedFallsBackWithAWarningOrFailsWhenAskedFor) {
  // Servers on 2 of the 4 worker machines, plus one CPU server.
  const Hosts servers = {"10.0.0.1", "10.0.0.2", "10.0.1.1"};
  auto p = PlaceServers(Workers(4), servers, MixedMode::kAuto);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->mixed);
  EXPECT_TRUE(Has(p->warning, "one server on each of the 4 worker machines")) << p->warning;
  EXPECT_TRUE(Has(p->warning, "BYTEPS_ENABLE_MIXED_MODE=0")) << p->warning;
  auto on = PlaceServers(Workers(4), servers, MixedMode::kOn);
  ASSERT_FALSE(on.ok());
  EXPECT_TRUE(Has(on.status().message(), "BYTEPS_ENABLE_MIXED_MODE=1")) << on.status().message();
  EXPECT_TRUE(Has(on.status().message(), "start one server per worker machine")) << on.status().message();
  // Two servers on one worker machine are not one per machine either.
  auto twice = PlaceServers(Workers(2), Hosts{"10.0.0.1", "10.0.0.1", "10.0.1.1"}, MixedMode::kOn);
  EXPECT_FALSE(twice.ok());
}

TEST(ServerPlacementTest, MixedModeOnNamesWhatToChange) {
  auto none = PlaceServers(Workers(2), Servers(0, 2), MixedMode::kOn);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Has(none.status().message(), "no server runs on a worker machine")) << none.status().message();
  EXPECT_TRUE(Has(none.status().message(), "10.0.1.1")) << none.status().message();
  auto all = PlaceServers(Workers(2), Servers(2, 0), MixedMode::kOn);
  ASSERT_FALSE(all.ok());
  EXPECT_TRUE(Has(all.status().message(), "add servers on CPU machines")) << all.status().message();
}

}  // namespace
}  // namespace byteps::protocol
