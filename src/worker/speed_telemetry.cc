#include "worker/speed_telemetry.h"

namespace byteps::worker {

SpeedTelemetry::SpeedTelemetry(bool enabled, double window_s)
    : enabled_(enabled), window_(window_s), start_(Clock::now()) {}

void SpeedTelemetry::Add(size_t bytes, Clock::time_point now) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  bytes_ += bytes;
  const std::chrono::duration<double> elapsed = now - start_;
  if (elapsed < window_ || elapsed.count() <= 0) return;
  const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  samples_.push_back({wall.count(), static_cast<double>(bytes_) / 1e6 / elapsed.count()});
  if (samples_.size() > kMaxSamples) samples_.pop_front();
  start_ = now;
  bytes_ = 0;
}

SpeedSample SpeedTelemetry::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (samples_.empty()) return {};
  SpeedSample s = samples_.front();
  samples_.pop_front();
  return s;
}

}  // namespace byteps::worker
