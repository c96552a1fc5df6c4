#include "worker/tuning/iteration_clock.h"

namespace byteps::worker::tuning {

std::optional<IterationClock::Iteration> IterationClock::OnPushPull(const std::string& name, size_t bytes,
                                                                    Clock::time_point now) {
  std::optional<Iteration> closed;
  if (start_ && seen_.count(name) != 0) {
    closed = Iteration{std::chrono::duration<double>(now - *start_).count(), bytes_};
    seen_.clear();
    bytes_ = 0;
  }
  if (!start_ || closed) start_ = now;
  seen_.insert(name);
  bytes_ += bytes;
  return closed;
}

}  // namespace byteps::worker::tuning
