// The unified architecture's split (protocol/mixed_split.h) and the name planner placing
// partitions by it: the closed forms, the limits (all-reduce at k = 0, non-colocated PS at
// k = n), the paper's n = 4, k = 2 figures, unequal NIC rates, and for n, k up to 16 each server's
// bytes within one partition of its share; a tensor pinned to one server (the start-up probe's),
// and the probe's fields on the wire.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/dtype.h"
#include "protocol/mixed_split.h"
#include "protocol/name_planner.h"

namespace byteps::protocol {
namespace {

TEST(MixedSplit, MatchesTheClosedFormsAndTheirLimits) {
  for (int n = 1; n <= 16; ++n) {
    for (int k = 0; k <= n; ++k) {
      auto s = OptimalSplit(n, k);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_NEAR(k * s->cpu_share + n * s->colocated_share, 1.0, 1e-12) << n << " " << k;
      if (n == 1) continue;
      const double d = static_cast<double>(n) * n + k * n - 2 * k;
      if (k > 0) EXPECT_NEAR(s->cpu_share, 2.0 * (n - 1) / d, 1e-12) << n << " " << k;
      EXPECT_NEAR(s->colocated_share, (n - k) / d, 1e-12) << n << " " << k;
      EXPECT_NEAR(s->time, 2.0 * n * (n - 1) / d, 1e-12) << n << " " << k;
      if (k == 0) EXPECT_NEAR(s->time, RingTime(n), 1e-12);
      if (k == n) EXPECT_NEAR(s->time, CpuOnlyTime(n, k), 1e-12);
    }
  }
  // n = 4 worker machines and 2 CPU machines: 1.25x ring all-reduce, 1.67x PS on the 2 CPU machines.
  auto s = OptimalSplit(4, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(RingTime(4) / s->time, 1.25, 1e-12);
  EXPECT_NEAR(CpuOnlyTime(4, 2) / s->time, 5.0 / 3, 1e-12);
  // CPU machines twice as fast: the workers' own NICs bound the CPU-only job.
  EXPECT_NEAR(CpuOnlyTime(4, 2, 2, 1), 1.0, 1e-12);
  EXPECT_NEAR(CpuOnlyTime(4, 2, 0.5, 1), 4.0, 1e-12);
}

TEST(MixedSplit, FasterMachinesTakeMore) {
  auto equal = OptimalSplit(4, 2);
  auto fast_cpu = OptimalSplit(4, 2, /*cpu_rate=*/2, /*worker_rate=*/1);
  auto slow_cpu = OptimalSplit(4, 2, 0.5, 1);
  ASSERT_TRUE(equal.ok() && fast_cpu.ok() && slow_cpu.ok());
  EXPECT_GT(fast_cpu->cpu_share, equal->cpu_share);
  EXPECT_LT(slow_cpu->cpu_share, equal->cpu_share);
  EXPECT_LT(fast_cpu->time, equal->time);
  for (double rate : {2.0, 0.5}) {
    auto s = OptimalSplit(4, 2, rate, 1);
    ASSERT_TRUE(s.ok());
    EXPECT_NEAR(2 * s->cpu_share + 4 * s->colocated_share, 1.0, 1e-12);
    // Every machine's NIC finishes together: n x / B_cpu = 1 + (n - 2) y.
    EXPECT_NEAR(4 * s->cpu_share / rate, 1 + 2 * s->colocated_share, 1e-12) << rate;
  }
  // CPU machines fast enough to take everything: the colocated servers get nothing.
  auto very_fast = OptimalSplit(4, 4, 100, 1);
  ASSERT_TRUE(very_fast.ok());
  EXPECT_EQ(very_fast->colocated_share, 0);
  EXPECT_NEAR(very_fast->cpu_share, 0.25, 1e-12);
  // n = 2: a worker machine moves M whatever the split, so the CPU servers take what they move in
  // that time: a CPU machine twice as fast takes everything, one half as fast a quarter.
  for (auto [rate, share] : {std::pair{2.0, 1.0}, std::pair{1.0, 0.5}, std::pair{0.5, 0.25}}) {
    auto two = OptimalSplit(2, 1, rate, 1);
    ASSERT_TRUE(two.ok());
    EXPECT_NEAR(two->cpu_share, share, 1e-12) << rate;
    EXPECT_NEAR(two->cpu_share + 2 * two->colocated_share, 1.0, 1e-12) << rate;
    EXPECT_NEAR(two->time, 1.0, 1e-12) << rate;
  }
}

TEST(MixedSplit, BadInputIsNamed) {
  EXPECT_NE(OptimalSplit(0, 1).status().message().find("0 worker machines"), std::string::npos);
  EXPECT_NE(OptimalSplit(2, -1).status().message().find("-1 CPU server machines"), std::string::npos);
  EXPECT_NE(OptimalSplit(2, 1, 0, 1).status().message().find("NIC rates must be positive"), std::string::npos);
  auto shares = ServerShares(4, {true, true, false});  // 2 of 4 worker machines have a server
  EXPECT_FALSE(shares.ok());
  EXPECT_NE(shares.status().message().find("one server on each of the 4 worker machines"), std::string::npos);
}

TEST(MixedSplit, ThePlannerPlacesEachServersShareWithinOnePartition) {
  constexpr uint64_t kPart = 64 << 10;
  constexpr uint64_t kBytes = uint64_t{256} << 20;
  for (int n = 1; n <= 16; ++n) {
    for (int k = 0; k <= 16; ++k) {
      std::vector<bool> colocated(n + k, false);
      for (int i = 0; i < n; ++i) colocated[i] = true;
      auto shares = ServerShares(n, colocated);
      ASSERT_TRUE(shares.ok()) << shares.status().ToString();
      NamePlanner planner(n + k, *shares);
      NameRequest r;
      r.name = "grads";
      r.sized = true;
      r.bytes = kBytes;
      r.dtype = static_cast<int>(DataType::kFloat32);
      r.partition_bytes = kPart;
      auto plan = planner.Plan(r);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      std::vector<uint64_t> bytes(n + k, 0);
      for (const NamePartition& p : plan->partitions) bytes[p.server] += p.length;
      double total = 0;
      for (double s : *shares) total += s;
      for (int i = 0; i < n + k; ++i) {
        const double want = (*shares)[i] / total * kBytes;
        EXPECT_LE(std::abs(static_cast<double>(bytes[i]) - want), kPart) << "n=" << n << " k=" << k << " server " << i;
      }
    }
  }
}

TEST(MixedSplit, EqualSharesKeepTheByteBalancedPlacement) {
  NamePlanner equal(3), given(3, {1, 1, 1}), none(3, {0, 0, 0});
  NameRequest r;
  r.name = "t";
  r.sized = true;
  r.bytes = 10 * 1000;
  r.dtype = static_cast<int>(DataType::kFloat32);
  r.partition_bytes = 1000;
  auto a = equal.Plan(r), b = given.Plan(r), c = none.Plan(r);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a, *c);
}

TEST(MixedSplit, APinnedTensorGoesWhollyToItsServerAndMovesNoLoad) {
  NamePlanner planner(3);
  NameRequest r;
  r.name = "__byteps.tune.at2";
  r.sized = true;
  r.bytes = 10000;
  r.dtype = static_cast<int>(DataType::kFloat32);
  r.partition_bytes = 1000;
  r.server = 2;
  auto pinned = planner.Plan(r);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  ASSERT_EQ(pinned->partitions.size(), 10u);
  for (const NamePartition& p : pinned->partitions) EXPECT_EQ(p.server, 2);
  // The next tensor is placed as if the pinned one had not been: byte-balanced from server 0.
  NameRequest next = r;
  next.name = "grads";
  next.server = -1;
  next.bytes = 3000;
  auto plan = planner.Plan(next);
  ASSERT_TRUE(plan.ok());
  std::vector<int> servers;
  for (const NamePartition& p : plan->partitions) servers.push_back(p.server);
  EXPECT_EQ(servers, (std::vector<int>{0, 1, 2}));
  // A server the job does not have, or no rank at all, is named.
  r.name = "far";
  r.server = 3;
  auto far = planner.Plan(r);
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("tensor 'far': its attribute 'server' must be a server rank from 0 to 2, not 3"),
            std::string::npos)
      << far.status().message();
  r.server = -2;
  EXPECT_FALSE(planner.Plan(r).ok());
  // On the wire: absent is -1, and the probe's fields travel.
  NameRequest probe;
  probe.probe_seconds = {0.25, 0.5};
  probe.probe_bytes = 2 << 20;
  auto back = DecodeNameRequest(Encode(probe));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->server, -1);
  EXPECT_EQ(back->probe_seconds, probe.probe_seconds);
  EXPECT_EQ(back->probe_bytes, probe.probe_bytes);
  auto pinned_back = DecodeNameRequest(Encode(r));
  ASSERT_TRUE(pinned_back.ok());
  EXPECT_EQ(pinned_back->server, -2);
  NameReply reply;
  reply.shares = {0.25, 0.75};
  reply.placement = "mixed placement: ...";
  auto reply_back = DecodeNameReply(Encode(reply));
  ASSERT_TRUE(reply_back.ok()) << reply_back.status().ToString();
  EXPECT_EQ(reply_back->shares, reply.shares);
  EXPECT_EQ(reply_back->placement, reply.placement);
}

}  // namespace
}  // namespace byteps::protocol
