// get_pushpull_speed's sampler (src/worker/speed_telemetry.h) on synthetic completion times.
#include "worker/speed_telemetry.h"

#include <gtest/gtest.h>

#include <chrono>

namespace byteps::worker {
namespace {

using std::chrono::milliseconds;

TEST(SpeedTelemetryTest, OneSamplePerWindowOfCompletedBytesOldestFirst) {
  SpeedTelemetry t(true, 10.0);
  const auto t0 = SpeedTelemetry::Clock::now();
  EXPECT_EQ(t.Next().ms_since_epoch, 0);  // nothing yet: (0, -5.0), as in BytePS
  EXPECT_EQ(t.Next().mb_per_s, -5.0);
  t.Add(30'000'000, t0 + milliseconds(4000));
  t.Add(30'000'000, t0 + milliseconds(9000));
  EXPECT_EQ(t.Next().mb_per_s, -5.0);          // the window is still open
  t.Add(40'000'000, t0 + milliseconds(10000));  // closes it: 100 MB in 10 s
  t.Add(50'000'000, t0 + milliseconds(30000));  // the next window: 50 MB in 20 s
  const SpeedSample a = t.Next();
  EXPECT_GT(a.ms_since_epoch, 1'600'000'000'000);  // wall-clock ms
  EXPECT_NEAR(a.mb_per_s, 10.0, 1e-3);  // the window opened when the sampler was made, just before t0
  EXPECT_DOUBLE_EQ(t.Next().mb_per_s, 2.5);
  EXPECT_EQ(t.Next().ms_since_epoch, 0);  // consumed
}

TEST(SpeedTelemetryTest, OffMeansNoSamplesAndTheQueueIsBounded) {
  SpeedTelemetry off(false, 0.001);
  const auto t0 = SpeedTelemetry::Clock::now();
  off.Add(1'000'000, t0 + milliseconds(10));
  EXPECT_EQ(off.Next().mb_per_s, -5.0);
  SpeedTelemetry t(true, 0.001);
  for (int i = 1; i <= 1100; ++i) t.Add(1'000'000, t0 + milliseconds(i));
  int n = 0;
  while (t.Next().ms_since_epoch != 0) ++n;
  EXPECT_EQ(n, static_cast<int>(SpeedTelemetry::kMaxSamples));
}

}  // namespace
}  // namespace byteps::worker
