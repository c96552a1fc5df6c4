// The time source of the deadlines a test needs to move (the scheduler's watchdog, the cluster
// client's heartbeat): the process's steady clock in production; tests pass a fake one through the
// component's options and advance it instead of sleeping.
// Threading: implementations are thread-safe; Steady() lives for the whole process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace byteps {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // Blocks on `cv`, whose mutex the caller holds through `lock`, until Now() >= deadline or a
  // notify (or spuriously): the caller re-checks its state and the time, as with any cv wait.
  virtual void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         TimePoint deadline) const = 0;

  // std::chrono::steady_clock.
  static const Clock& Steady();
};

// A (possibly fractional) number of seconds as a clock duration.
inline Clock::Duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double>(s));
}

}  // namespace byteps
