// The settings model (src/worker/tuning/settings_model.h) on synthetic link measurements.
#include "worker/tuning/settings_model.h"

#include <gtest/gtest.h>

namespace byteps::worker::tuning {
namespace {

constexpr double kGbit = 1e9 / 8 * 0.956;  // TCP goodput of a 1 Gbit/s link, bytes/s

DerivedSettings At(double goodput, double rtt_s, int n = 4, int k = 4) {
  ModelInputs in;
  in.num_workers = n;
  in.num_servers = k;
  return Derive({goodput, rtt_s}, in);
}

TEST(SettingsModelTest, ASlowLinkPicksSmallPartitions) {
  EXPECT_EQ(At(0.1 * kGbit, 1e-4).partition_bytes.value, 64u << 10);  // clamped at the floor
  EXPECT_EQ(At(kGbit, 1e-4).partition_bytes.value, 128u << 10);
  EXPECT_EQ(At(2.5 * kGbit, 1e-4).partition_bytes.value, 256u << 10);
  EXPECT_EQ(At(100 * kGbit, 1e-5).partition_bytes.value, 2u << 20);
  EXPECT_EQ(At(1000 * kGbit, 1e-5).partition_bytes.value, 4u << 20);  // clamped at the ceiling
}

TEST(SettingsModelTest, PartitionGrowsWithBandwidth) {
  size_t last = 0;
  for (double g = 1e6; g < 1e12; g *= 1.7) {
    const size_t p = At(g, 1e-4).partition_bytes.value;
    EXPECT_GE(p, last) << g;
    EXPECT_EQ(p & (p - 1), 0u) << "a power of two: " << p;
    last = p;
  }
}

TEST(SettingsModelTest, AHighBandwidthDelayProductPicksALargeCredit) {
  const DerivedSettings lan = At(kGbit, 1e-4);
  const DerivedSettings wan = At(kGbit, 50e-3);  // 50 ms: BDP 2 * 120 MB/s * 50 ms = 11.9 MB
  EXPECT_GE(wan.credit_bytes.value, static_cast<size_t>(2 * kGbit * 50e-3));
  EXPECT_GT(wan.credit_bytes.value, 4 * lan.credit_bytes.value);
  EXPECT_NE(wan.credit_bytes.reason.find("2 B R"), std::string::npos) << wan.credit_bytes.reason;
}

TEST(SettingsModelTest, CreditCoversEveryServerAndWorkerTwiceOver) {
  const DerivedSettings four = At(kGbit, 1e-4, 4, 4);
  const DerivedSettings eight = At(kGbit, 1e-4, 8, 8);
  EXPECT_EQ(four.credit_bytes.value, 4 * 4 * four.partition_bytes.value);
  EXPECT_EQ(eight.credit_bytes.value, 4 * 8 * eight.partition_bytes.value);
  EXPECT_EQ(At(kGbit, 1e-4, 8, 2).credit_bytes.value, eight.credit_bytes.value);  // max(n, k)
  EXPECT_EQ(At(kGbit, 0, 1, 1).credit_bytes.value, 8 * At(kGbit, 0, 1, 1).partition_bytes.value);  // floor
}

TEST(SettingsModelTest, NothingMeasuredKeepsTheFixedDefaultsShape) {
  const DerivedSettings d = At(0, 0);
  EXPECT_EQ(d.partition_bytes.value, 4u << 20);
  EXPECT_EQ(d.credit_bytes.value, 0u);
}

TEST(SettingsModelTest, TheCeilingFollowsTheLargestMessage) {
  ModelInputs in;
  in.max_partition_bytes = 1u << 20;
  EXPECT_EQ(Derive({1000 * kGbit, 1e-5}, in).partition_bytes.value, 1u << 20);
}

TEST(SettingsModelTest, ReasonsNameTheInputs) {
  const DerivedSettings d = At(kGbit, 2e-3);
  EXPECT_NE(d.partition_bytes.reason.find("956 Mbit/s"), std::string::npos) << d.partition_bytes.reason;
  EXPECT_NE(d.credit_bytes.reason.find("2.00 ms"), std::string::npos) << d.credit_bytes.reason;
}

TEST(SettingsModelTest, RoundPartitionRoundsInLogTerms) {
  EXPECT_EQ(RoundPartition(180e3, 1, 1u << 30), 128u << 10);  // 180 KB is nearer 128 KiB than 256 KiB in log terms
  EXPECT_EQ(RoundPartition(190e3, 1, 1u << 30), 256u << 10);
  EXPECT_EQ(RoundPartition(10, 4096, 1u << 20), 4096u);
  EXPECT_EQ(RoundPartition(1e12, 4096, 1u << 20), 1u << 20);
  EXPECT_EQ(RoundPartition(-1, 4096, 1u << 20), 1u << 20);
}

}  // namespace
}  // namespace byteps::worker::tuning
