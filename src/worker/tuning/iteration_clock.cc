#include "worker/tuning/iteration_clock.h"

namespace byteps::worker::tuning {

std::optional<IterationClock::Iteration> IterationClock::OnPushPull(uint32_t tensor, size_t bytes,
                                                                    Clock::time_point now) {
  if (tensor >= seen_in_.size()) seen_in_.resize(static_cast<size_t>(tensor) + 1, 0);
  std::optional<Iteration> closed;
  if (start_ && seen_in_[tensor] == iteration_) {
    closed = Iteration{std::chrono::duration<double>(now - *start_).count(), bytes_};
    ++iteration_;
    bytes_ = 0;
  }
  if (!start_ || closed) start_ = now;
  seen_in_[tensor] = iteration_;
  bytes_ += bytes;
  return closed;
}

}  // namespace byteps::worker::tuning
