// The settings model (src/worker/tuning/settings_model.h) and the probe's pick, on synthetic
// measurements.
#include "worker/tuning/settings_model.h"

#include <gtest/gtest.h>

#include "worker/tuning/startup_agreement.h"

namespace byteps::worker::tuning {
namespace {

constexpr double kGbit = 1e9 / 8 * 0.956;  // TCP goodput of a 1 Gbit/s link, bytes/s
constexpr size_t kKiB = 1u << 10;
constexpr size_t kMiB = 1u << 20;

DerivedSettings At(double goodput, double rtt_s, int n = 4, int k = 4) {
  ModelInputs in;
  in.num_workers = n;
  in.num_servers = k;
  return Derive({goodput, rtt_s}, in);
}

TEST(SettingsModelTest, ASlowLinkPicksSmallPartitionsAFastOneLargeOnes) {
  // sqrt(16 MiB * 100 us * B / 2)
  EXPECT_EQ(At(0.1 * kGbit, 1e-4).partition_bytes.value, 256 * kKiB);  // 100 KB, below the floor
  EXPECT_EQ(At(0.6 * kGbit, 1e-4).partition_bytes.value, 256 * kKiB);  // what 4 x 4 on 1 Gbit/s measures: 245 KB
  EXPECT_EQ(At(kGbit, 1e-4).partition_bytes.value, 256 * kKiB);        // 316 KB
  EXPECT_EQ(At(8 * kGbit, 1e-4).partition_bytes.value, 1 * kMiB);      // loopback, 1 worker + 1 server: 895 KB
  EXPECT_EQ(At(100 * kGbit, 1e-5).partition_bytes.value, 4 * kMiB);    // RDMA: 3.2 MB, BytePS's 4096000
  EXPECT_EQ(At(0.001 * kGbit, 1e-4).partition_bytes.value, 256 * kKiB);  // the floor
  size_t last = 0;
  for (double g = 1e6; g < 1e12; g *= 1.3) {
    const size_t p = At(g, 1e-4).partition_bytes.value;
    EXPECT_GE(p, last) << g;
    EXPECT_EQ(p & (p - 1), 0u) << "a power of two: " << p;
    last = p;
  }
}

TEST(SettingsModelTest, GoodputIsTheBestLowerBoundOfTheProbesRuns) {
  // 4 MiB in 256 KiB partitions in 40 ms after a 1 ms round trip: (4 MiB + 256 KiB) / 39 ms.
  const double b = GoodputFromProbe({0.040, 0.075, 0.110}, 0.001);
  EXPECT_NEAR(b, (4.25 * kMiB) / 0.039, 1);
  // Loopback: one 4 MiB partition (push, then pull) in 3.4 ms is the best bound.
  EXPECT_NEAR(GoodputFromProbe({0.0049, 0.0026, 0.0034}, 0.0001), (8.0 * kMiB) / 0.0033, 1);
  // A round trip as long as a run: each run still counts half its time as wire.
  EXPECT_NEAR(GoodputFromProbe({0.010, 0.010, 0.010}, 0.010), (8.0 * kMiB) / 0.005, 1);
}

TEST(SettingsModelTest, AHighBandwidthDelayProductPicksALargeCredit) {
  const DerivedSettings lan = At(kGbit, 1e-4);   // 8 * 4 * 256 KiB = 8 MiB
  const DerivedSettings wan = At(kGbit, 50e-3);  // 2 * 120 MB/s * 50 ms = 11.9 MB
  EXPECT_EQ(lan.credit_bytes.value, 8 * kMiB);
  const DerivedSettings far = At(kGbit, 200e-3);  // 200 ms: 47.8 MB
  EXPECT_EQ(far.credit_bytes.value, static_cast<size_t>(2 * kGbit * 200e-3));
  EXPECT_GT(wan.credit_bytes.value, lan.credit_bytes.value);
  EXPECT_NE(far.credit_bytes.reason.find("2 B R"), std::string::npos) << far.credit_bytes.reason;
}

TEST(SettingsModelTest, ConnectionsCoverTheBandwidthDelayProductOfTheirWindows) {
  const size_t W = 4 * kMiB;  // the socket buffer byteps sets by default
  // A LAN: B R = 120 MB/s * 0.1 ms = 12 KB, far under one window: the floor of 2.
  EXPECT_EQ(DeriveConnections({kGbit, 1e-4}, W).value, 2u);
  // Loopback at 8 Gbit/s: still 2.
  EXPECT_EQ(DeriveConnections({8 * kGbit, 1e-4}, W).value, 2u);
  // A 200 ms WAN at 1 Gbit/s: 23.9 MB over 4 MiB windows = 5.7, so 6.
  const Choice wan = DeriveConnections({kGbit, 200e-3}, W);
  EXPECT_EQ(wan.value, 6u);
  EXPECT_NE(wan.reason.find("ceil(B R / W)"), std::string::npos) << wan.reason;
  EXPECT_NE(wan.reason.find("200.00 ms"), std::string::npos) << wan.reason;
  // 10 Gbit/s at 30 ms: 35.9 MB / 4 MiB = 8.6, so 9; the same link with 1 MiB windows: capped at 16.
  EXPECT_EQ(DeriveConnections({10 * kGbit, 30e-3}, W).value, 9u);
  EXPECT_EQ(DeriveConnections({10 * kGbit, 30e-3}, 1 * kMiB).value, static_cast<size_t>(kMaxConnections));
  // Small windows on a fast loopback: 8 Gbit/s * 0.1 ms = 95.6 KB over 16 KiB windows: 6.
  EXPECT_EQ(DeriveConnections({8 * kGbit, 1e-4}, 16 * kKiB).value, 6u);
  // Nothing measured, or no window known: the floor.
  EXPECT_EQ(DeriveConnections({0, 1e-4}, W).value, 2u);
  EXPECT_EQ(DeriveConnections({kGbit, 0}, W).value, 2u);
  EXPECT_EQ(DeriveConnections({kGbit, 200e-3}, 0).value, 2u);
  // Never fewer as the round trip grows.
  size_t last = 0;
  for (double r = 1e-5; r < 1; r *= 1.5) {
    const size_t k = DeriveConnections({kGbit, r}, W).value;
    EXPECT_GE(k, last) << r;
    last = k;
  }
}

TEST(SettingsModelTest, CreditCoversEveryServerAndWorkerTwiceOver) {
  EXPECT_EQ(At(kGbit, 1e-4, 8, 8).credit_bytes.value, 16 * kMiB);  // 8 * 8 * 256 KiB
  EXPECT_EQ(At(kGbit, 1e-4, 8, 2).credit_bytes.value, 16 * kMiB);  // max(n, k)
  EXPECT_EQ(At(kGbit, 1e-4, 2, 8).credit_bytes.value, 16 * kMiB);
  EXPECT_EQ(At(8 * kGbit, 1e-4, 1, 1).credit_bytes.value, 16 * kMiB);  // never fewer than 16 partitions
}

TEST(SettingsModelTest, ServersOnTheWorkersHostsKeepTwoRoundTripsInFlightInSmallerPartitions) {
  ModelInputs in;
  in.num_workers = in.num_servers = 4;
  in.shared_links = true;
  const DerivedSettings d = Derive({kGbit, 1e-4}, in);
  // sqrt(16 MiB * 100 us * B / (2 * 3)) = 179 KiB -> 128 KiB (256 KiB for separate servers)
  EXPECT_EQ(d.partition_bytes.value, 128 * kKiB) << d.partition_bytes.reason;
  EXPECT_EQ(At(kGbit, 1e-4).partition_bytes.value, 256 * kKiB);
  EXPECT_NE(d.partition_bytes.reason.find("/ (2 (n - 1) = 6)"), std::string::npos) << d.partition_bytes.reason;
  EXPECT_EQ(d.credit_bytes.value, 2 * kMiB);  // 4 * 4 * 128 KiB, a quarter of the separate placement's
  EXPECT_NE(d.credit_bytes.reason.find("servers share the workers' hosts"), std::string::npos) << d.credit_bytes.reason;
  EXPECT_NE(d.credit_bytes.reason.find("4 max(n, k) P = 4 * 4 * 128 KiB"), std::string::npos) << d.credit_bytes.reason;
  in.num_workers = in.num_servers = 2;  // n - 1 = 1: the separate placement's partition
  EXPECT_EQ(Derive({kGbit, 1e-4}, in).partition_bytes.value, At(kGbit, 1e-4, 2, 2).partition_bytes.value);
  EXPECT_EQ(Derive({kGbit, 1e-4}, in).credit_bytes.value, 4 * kMiB);  // never fewer than 16 partitions
  EXPECT_EQ(Derive({kGbit, 200e-3}, in).credit_bytes.value, At(kGbit, 200e-3, 2, 2).credit_bytes.value);  // 2 B R
  in.num_workers = in.num_servers = 16;  // never under 128 KiB
  EXPECT_EQ(Derive({kGbit, 1e-4}, in).partition_bytes.value, 128 * kKiB);
}

TEST(SettingsModelTest, NothingMeasuredKeepsTheFixedDefaultsShape) {
  const DerivedSettings d = Derive({}, ModelInputs{});
  EXPECT_EQ(d.partition_bytes.value, 4 * kMiB);
  EXPECT_EQ(d.credit_bytes.value, 0u);
}

TEST(SettingsModelTest, TheLargestMessageCapsThePartition) {
  ModelInputs in;
  in.max_partition_bytes = 1 * kMiB;
  EXPECT_EQ(Derive({100 * kGbit, 1e-4}, in).partition_bytes.value, 1 * kMiB);
}

TEST(SettingsModelTest, TheOnlineAlternativeIsFourTimesOrAQuarterWithinTheBounds) {
  constexpr size_t K = 1024;
  EXPECT_EQ(PartitionAlternative(256 * K, 256 * K, 4096 * K), 1024 * K);
  EXPECT_EQ(PartitionAlternative(1024 * K, 256 * K, 4096 * K), 4096 * K);
  EXPECT_EQ(PartitionAlternative(4096 * K, 256 * K, 4096 * K), 1024 * K);
  EXPECT_EQ(PartitionAlternative(512 * K, 256 * K, 1024 * K), 1024 * K);  // neither 4x nor 1/4 fits: 2x
  EXPECT_EQ(PartitionAlternative(256 * K, 256 * K, 256 * K), 0u);
}

TEST(SettingsModelTest, TheAlternativePartitionKeepsTheBytesInFlightAndAtLeast16) {
  constexpr size_t K = 1024;
  EXPECT_EQ(CreditForPartition(8192 * K, 256 * K, 1024 * K), 16384 * K);  // 16 partitions of 1 MiB
  EXPECT_EQ(CreditForPartition(65536 * K, 256 * K, 1024 * K), 65536 * K);  // the same bytes in flight
  EXPECT_EQ(CreditForPartition(131072 * K, 4096 * K, 1024 * K), 32768 * K);  // scaled down with the size
  EXPECT_EQ(CreditForPartition(65536 * K, 4096 * K, 1024 * K), 16384 * K);   // but 16 partitions at least
  EXPECT_EQ(CreditForPartition(0, 256 * K, 1024 * K), 0u);                   // no cap stays no cap
  EXPECT_EQ(CreditForPartition(2048 * K, 256 * K, 256 * K), 2048 * K);       // the chosen size keeps its credit
}

TEST(SettingsModelTest, ReasonsNameTheInputs) {
  const DerivedSettings d = At(kGbit, 2e-3);
  EXPECT_NE(d.partition_bytes.reason.find("956 Mbit/s"), std::string::npos) << d.partition_bytes.reason;
  EXPECT_NE(d.credit_bytes.reason.find("2.00 ms"), std::string::npos) << d.credit_bytes.reason;
  EXPECT_NE(d.credit_bytes.reason.find("956 Mbit/s"), std::string::npos) << d.credit_bytes.reason;
}

}  // namespace
}  // namespace byteps::worker::tuning
