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

// The probe's times for n worker machines with a colocated server each and k CPU machines whose
// NICs move `worker_rate` and `cpu_rate` bytes/s: server s's machine moves (n - c) * bytes.
ProbeTimes Probe(int n, int k, double worker_rate, double cpu_rate, double bytes = 2 << 20) {
  ProbeTimes p;
  p.bytes = bytes;
  for (int s = 0; s < n + k; ++s) p.seconds.push_back(s < n ? (n - 1) * bytes / worker_rate : n * bytes / cpu_rate);
  return p;
}

TEST(ServerPlacementTest, MeasuredRatesWithinTheToleranceKeepTheFormula) {
  const auto formula = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kAuto);
  ASSERT_TRUE(formula.ok());
  // CPU machines 20 % faster: noise as far as the split is concerned.
  auto p = PlaceFromProbe(Workers(4), Servers(4, 2), MixedMode::kAuto, Probe(4, 2, 1e8, 1.2e8));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->shares, formula->shares);
  EXPECT_TRUE(Has(p->summary, "measured NIC rates: CPU machines 0.12 GB/s, worker machines 0.1 GB/s")) << p->summary;
  EXPECT_TRUE(Has(p->summary, "the formula's equal rates")) << p->summary;
}

TEST(ServerPlacementTest, MeasuredFasterCpuMachinesTakeMore) {
  // CPU machines twice as fast (read from the times): the split for those rates, not the formula's.
  auto p = PlaceFromProbe(Workers(4), Servers(4, 2), MixedMode::kAuto, Probe(4, 2, 1e8, 2e8));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto want = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kAuto, 2e8, 1e8);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(p->shares.size(), 6u);
  for (int s = 0; s < 6; ++s) EXPECT_NEAR(p->shares[s], want->shares[s], 1e-9) << s;
  EXPECT_GT(p->shares[4], 0.3);  // the formula's 30 %
  EXPECT_LT(p->shares[0], 0.1);  // and 10 %
  EXPECT_TRUE(Has(p->summary, "measured NIC rates: CPU machines 0.2 GB/s, worker machines 0.1 GB/s")) << p->summary;
  EXPECT_FALSE(Has(p->summary, "; NIC rates")) << p->summary;
  // Slower CPU machines take less; the slowest machine of a kind sets its pace.
  ProbeTimes slow = Probe(4, 2, 1e8, 0.5e8);
  slow.seconds[5] *= 2;  // one CPU machine at half of that again
  auto q = PlaceFromProbe(Workers(4), Servers(4, 2), MixedMode::kAuto, slow);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  const auto want_slow = PlaceServers(Workers(4), Servers(4, 2), MixedMode::kAuto, 0.25e8, 1e8);
  ASSERT_TRUE(want_slow.ok());
  for (int s = 0; s < 6; ++s) EXPECT_NEAR(q->shares[s], want_slow->shares[s], 1e-9) << s;
}

TEST(ServerPlacementTest, AProbeOfALayoutThatIsNotMixedChangesNothing) {
  ProbeTimes p{{0.1, 0.1, 0.1}, 1 << 20};
  auto cpu_only = PlaceFromProbe(Workers(2), Servers(0, 3), MixedMode::kAuto, p);
  ASSERT_TRUE(cpu_only.ok());
  EXPECT_FALSE(cpu_only->mixed);
  for (double s : cpu_only->shares) EXPECT_DOUBLE_EQ(s, 1.0 / 3);
  auto off = PlaceFromProbe(Workers(2), Servers(2, 1), MixedMode::kOff, Probe(2, 1, 1e8, 4e8));
  ASSERT_TRUE(off.ok());
  for (double s : off->shares) EXPECT_DOUBLE_EQ(s, 1.0 / 3);
}

TEST(ServerPlacementTest, AProbeThatDoesNotFitTheJobIsNamed) {
  auto few = PlaceFromProbe(Workers(2), Servers(2, 1), MixedMode::kAuto, ProbeTimes{{0.1, 0.1}, 1 << 20});
  ASSERT_FALSE(few.ok());
  EXPECT_TRUE(Has(few.status().message(), "reported 2 times of 1048576 bytes for 3 servers")) << few.status().message();
  auto zero = PlaceFromProbe(Workers(2), Servers(2, 1), MixedMode::kAuto, ProbeTimes{{0.1, 0, 0.1}, 1 << 20});
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Has(zero.status().message(), "probe of server 1 reported a wire time of 0 s")) << zero.status().message();
  EXPECT_FALSE(PlaceFromProbe(Workers(2), Servers(2, 1), MixedMode::kAuto, ProbeTimes{{0.1, 0.1, 0.1}, 0}).ok());
}

}  // namespace
}  // namespace byteps::protocol
