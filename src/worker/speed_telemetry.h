// BytePS's push_pull speed samples (get_pushpull_speed): the bytes of the push_pulls that
// completed within a window of at least `window_s` seconds, per second, one sample per window,
// at most 1024 kept and read oldest first; BYTEPS_TELEMETRY_ON=0 turns sampling off.
// Threading: thread-safe (the dispatcher adds, any thread reads).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace byteps::worker {

struct SpeedSample {
  int64_t ms_since_epoch = 0;  // when the window closed
  double mb_per_s = -5.0;      // 1e6 bytes per second; -5.0 with ms 0: no sample (as in BytePS)
};

class SpeedTelemetry {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxSamples = 1024;

  SpeedTelemetry(bool enabled, double window_s);
  // A push_pull of `bytes` input bytes completed at `now`.
  void Add(size_t bytes, Clock::time_point now = Clock::now());
  // The oldest unread sample, or the "none" sample.
  SpeedSample Next();

 private:
  const bool enabled_;
  const std::chrono::duration<double> window_;
  std::mutex mu_;
  Clock::time_point start_;     // guarded by mu_
  uint64_t bytes_ = 0;          // guarded by mu_
  std::deque<SpeedSample> samples_;  // guarded by mu_
};

}  // namespace byteps::worker
