// A Clock that moves only when the test says so. Components waiting on it (the scheduler's
// watchdog, the cluster client's heartbeat) wake when it is advanced; Settle then tells the test
// that a waiter has looked at the new time and gone back to waiting, i.e. that whatever that time
// was going to trigger has happened.
// Threading: thread-safe. Settle relies on the waiter reading Now() once per pass, before its
// WaitUntil, as the watchdog and the heartbeat loop do.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace byteps::testing {

class FakeClock : public Clock {
 public:
  TimePoint Now() const override;
  // Returns at once when deadline has passed; else waits for an Advance. (Also returns after a
  // few real milliseconds, so a notify that raced the start of the wait is never lost for long.)
  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) const override;

  // Moves the time forward and wakes every waiter.
  void Advance(Duration d);
  void Advance(double seconds) { Advance(Seconds(seconds)); }
  // Waits (real time, up to `timeout`) until some thread is waiting on this clock again having
  // read the current time. False if none did (e.g. the waiter ended instead).
  bool Settle(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  struct Waiter {
    std::condition_variable* cv;
    std::thread::id thread;
  };

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  TimePoint now_{std::chrono::hours(1)};                    // guarded by mu_
  mutable std::map<std::thread::id, TimePoint> last_read_;  // guarded by mu_
  mutable std::vector<Waiter> waiters_;                     // guarded by mu_
};

}  // namespace byteps::testing
