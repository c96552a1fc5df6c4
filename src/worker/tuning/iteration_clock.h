// Finds training-iteration boundaries in the stream of push_pull calls, for the online tuner. A
// training step pushes each gradient once, in the same order every step, so an iteration ends
// when a tensor already pushed since the last boundary is pushed again: the iteration is the time
// between the two starts and the bytes pushed in between. A loop that pushes one tensor counts
// each push; a start-up that broadcasts the parameters once folds them into the first iteration.
// Threading: not thread-safe; the engine calls it under its planning lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace byteps::worker::tuning {

class IterationClock {
 public:
  using Clock = std::chrono::steady_clock;
  struct Iteration {
    double seconds = 0;
    uint64_t bytes = 0;
  };

  // One push_pull of the tensor with declared key `tensor` (the KeyAssigner's: small and dense)
  // starting at `now`; the iteration it closes, if it closes one. No allocation once every
  // tensor has been seen.
  std::optional<Iteration> OnPushPull(uint32_t tensor, size_t bytes, Clock::time_point now);

 private:
  std::vector<uint64_t> seen_in_;  // by declared key: the iteration it was last pushed in (+1)
  uint64_t iteration_ = 1;
  std::optional<Clock::time_point> start_;
  uint64_t bytes_ = 0;
};

}  // namespace byteps::worker::tuning
