// The pinned staging pool (stages/staging_pool.h) once the partition sizes settled: partitions of
// three size classes that overlap differently from round to round. The first round fixes the
// budget; after the second, every round is served by the buffers already pinned (an idle buffer
// above a partition's Fit is leased rather than freed to allocate another), and pinned bytes never
// exceed the budget (checked after every Acquire and Release). Then the rules that keep that bound.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "device/fake_device.h"
#include "worker/stages/staging_pool.h"

namespace byteps::worker {
namespace {

using stages::StagingPool;

constexpr size_t kS = 64u << 10, kM = 96u << 10, kL = 160u << 10;  // three classes, none within another's Fit

TEST(StagingChurnTest, SettledRoundsOfOverlappingSizeClassesAllocateNothingAndStayWithinTheBudget) {
  static_assert(kS < kM && kM < kL);
  ASSERT_GT(kM, StagingPool::Fit(kS));
  ASSERT_GT(kL, StagingPool::Fit(kM));
  auto dev = device::FakeDevice::Get(590);
  StagingPool pool;
  // Each round's partitions hold their buffers at once (acquired in this order), then go back in an
  // order that changes from round to round. Round 0 is the largest sum of Fits: the budget.
  const std::vector<std::vector<size_t>> rounds = {
      {kL, kM, kS}, {kS, kS, kS}, {kM, kM, kS}, {kL, kS, kS}, {kS, kM, kS}, {kS, kS, kS},
      {kL, kM, kS}, {kM, kS, kM}, {kS, kL, kS}, {kS, kS, kM}, {kM, kM, kS}, {kS, kS, kS}};
  size_t budget = 0;
  uint64_t lease = 0;
  std::vector<uint64_t> allocated_in(rounds.size()), freed_in(rounds.size());
  auto check = [&](const char* what, size_t round) {
    const StagingStats s = pool.stats();
    ASSERT_LE(s.pinned_bytes, s.budget_bytes) << what << " in round " << round;
    if (round > 0) {
      ASSERT_EQ(s.budget_bytes, budget) << what << " in round " << round << ": the budget moved";
    }
  };
  for (size_t r = 0; r < rounds.size(); ++r) {
    const StagingStats before = pool.stats();
    std::vector<uint64_t> held;
    for (size_t bytes : rounds[r]) {
      auto p = pool.Acquire(dev.get(), ++lease, 0, bytes);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      std::memset(*p, static_cast<int>(r), bytes);  // (ASan: really that long)
      held.push_back(lease);
      check("an Acquire", r);
    }
    if (r == 0) budget = pool.stats().budget_bytes;
    for (size_t i = 0; i < held.size(); ++i) {
      pool.Release(held[(i + r) % held.size()]);  // rotated: the idle buffers' LRU order changes
      check("a Release", r);
    }
    const StagingStats after = pool.stats();
    allocated_in[r] = after.allocated - before.allocated;
    freed_in[r] = after.freed - before.freed;
  }
  for (size_t r = 2; r < rounds.size(); ++r) {
    EXPECT_EQ(allocated_in[r], 0u) << "round " << r << " allocated: the pool churns under its budget";
    EXPECT_EQ(freed_in[r], 0u) << "round " << r << " freed";
  }
  const StagingStats s = pool.stats();
  EXPECT_EQ(s.budget_bytes, StagingPool::Fit(kL) + StagingPool::Fit(kM) + StagingPool::Fit(kS));
  EXPECT_LE(s.peak_pinned_bytes, s.budget_bytes);
  EXPECT_LE(s.budget_bytes, s.peak_working_set_bytes + s.peak_working_set_bytes / 4);
  EXPECT_GT(s.oversized, 0u);
  EXPECT_EQ(s.working_set_bytes, 0u);
  EXPECT_EQ(s.pinned_bytes, s.idle_bytes);
  std::printf("[ churn    ] %zu rounds: %llu allocated, %llu reused (%llu oversized), %llu freed; peak pinned %zu, "
              "budget %zu\n",
              rounds.size(), static_cast<unsigned long long>(s.allocated), static_cast<unsigned long long>(s.reused),
              static_cast<unsigned long long>(s.oversized), static_cast<unsigned long long>(s.freed),
              s.peak_pinned_bytes, s.budget_bytes);
  EXPECT_EQ(pool.FreeAll({}), 0u);
}


// An oversized lease is charged its buffer's size, and taken only while the charges fit the budget:
// here a round of five small partitions (their Fits exactly the budget) gets one oversized lease,
// then frees the large idle buffer rather than lease it too (that charge would exceed the budget),
// and the budget holds. Leasing both would leave nothing idle to free for the fifth partition,
// whose allocation would then go over the budget.
TEST(StagingChurnTest, AnOversizedLeaseIsChargedItsBufferSoPinnedBytesStayWithinTheBudget) {
  auto dev = device::FakeDevice::Get(591);
  StagingPool pool;
  uint64_t lease = 0;
  const size_t budget = StagingPool::Fit(kL) + StagingPool::Fit(kM) + StagingPool::Fit(kS);
  auto round = [&](const std::vector<size_t>& sizes) {
    std::vector<uint64_t> held;
    for (size_t bytes : sizes) {
      ASSERT_TRUE(pool.Acquire(dev.get(), ++lease, 0, bytes).ok());
      held.push_back(lease);
      const StagingStats s = pool.stats();
      ASSERT_LE(s.pinned_bytes, s.budget_bytes) << "lease " << lease;
      if (lease > 3) {
        ASSERT_EQ(s.budget_bytes, budget) << "lease " << lease << ": the budget moved";
      }
    }
    for (uint64_t l : held) {
      pool.Release(l);
      ASSERT_LE(pool.stats().pinned_bytes, pool.stats().budget_bytes) << "lease " << l;
    }
  };
  round({kL, kM, kS});
  round({kS, kS, kS});  // the third takes the idle 96 KiB buffer: pinned L + M + S + S
  StagingStats s = pool.stats();
  ASSERT_EQ(s.budget_bytes, budget);
  ASSERT_EQ(s.pinned_bytes, kL + kM + 2 * kS);
  ASSERT_EQ(5 * StagingPool::Fit(kS), budget);  // five small partitions' Fits: the budget exactly
  const uint64_t oversized = s.oversized, allocated = s.allocated, freed = s.freed;
  round({kS, kS, kS, kS, kS});
  s = pool.stats();
  EXPECT_EQ(s.oversized - oversized, 1u);  // the 96 KiB buffer; not the 160 KiB one
  EXPECT_EQ(s.freed - freed, 1u);          // the 160 KiB buffer
  EXPECT_EQ(s.allocated - allocated, 2u);
  EXPECT_EQ(s.budget_bytes, budget);
  EXPECT_LE(s.peak_pinned_bytes, budget);
  EXPECT_EQ(pool.FreeAll({}), 0u);
}

// Only the partition's own key generation's idle buffers are leased oversized: another generation's
// are what a new partition size replaces (freed to allocate, as before).
TEST(StagingChurnTest, AnotherGenerationsIdleBufferIsFreedNotLeasedOversized) {
  for (uint32_t generation : {0u, 1u}) {
    auto dev = device::FakeDevice::Get(592 + static_cast<int>(generation));
    StagingPool pool;
    ASSERT_TRUE(pool.Acquire(dev.get(), 1, 0, kL).ok());  // the budget: Fit(kL)
    pool.Release(1);
    auto p = pool.Acquire(dev.get(), 2, generation, kS);  // kL + kS > Fit(kL): over the budget
    ASSERT_TRUE(p.ok());
    const StagingStats s = pool.stats();
    EXPECT_EQ(s.oversized, generation == 0 ? 1u : 0u) << "generation " << generation;
    EXPECT_EQ(s.freed, generation == 0 ? 0u : 1u) << "generation " << generation;
    EXPECT_EQ(s.pinned_bytes, generation == 0 ? kL : kS) << "generation " << generation;
    EXPECT_LE(s.pinned_bytes, s.budget_bytes);
    EXPECT_EQ(s.budget_bytes, StagingPool::Fit(kL));
    pool.Release(2);
    EXPECT_EQ(pool.FreeAll({}), 0u);
  }
}

}  // namespace
}  // namespace byteps::worker
