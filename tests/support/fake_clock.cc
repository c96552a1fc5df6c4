#include "tests/support/fake_clock.h"

#include <algorithm>

namespace byteps::testing {

Clock::TimePoint FakeClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  last_read_[std::this_thread::get_id()] = now_;
  return now_;
}

void FakeClock::WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                          TimePoint deadline) const {
  const auto me = std::this_thread::get_id();
  {
    std::lock_guard<std::mutex> g(mu_);
    if (now_ >= deadline) return;
    waiters_.push_back({&cv, me});
  }
  changed_.notify_all();
  cv.wait_for(lock, std::chrono::milliseconds(20));
  std::lock_guard<std::mutex> g(mu_);
  std::erase_if(waiters_, [&](const Waiter& w) { return w.cv == &cv && w.thread == me; });
}

void FakeClock::Advance(Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ += d;
  for (const Waiter& w : waiters_) w.cv->notify_all();
}

bool FakeClock::Settle(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] {
    return std::any_of(waiters_.begin(), waiters_.end(), [&](const Waiter& w) {
      auto it = last_read_.find(w.thread);
      return it != last_read_.end() && it->second == now_;
    });
  });
}

}  // namespace byteps::testing
