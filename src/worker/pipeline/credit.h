// The credit: a cap on the bytes the worker has in flight on the network. A small credit lets a
// late, urgent partition overtake a backlog; a large one fills the links' bandwidth-delay
// product. Owned by the dispatcher, once.
// Threading: not thread-safe; only the dispatcher thread touches it.
#pragma once

#include <cstddef>

namespace byteps::worker::pipeline {

class Credit {
 public:
  // limit_bytes == 0: no cap.
  explicit Credit(size_t limit_bytes) : limit_(limit_bytes) {}

  // Takes `bytes` if the cap allows. A task bigger than the whole credit still goes when nothing
  // else is in flight (otherwise it would starve).
  bool TryAcquire(size_t bytes);
  void Release(size_t bytes);

  size_t in_flight() const { return in_flight_; }
  size_t limit() const { return limit_; }
  // A new cap for later acquisitions; what is in flight stays (it is released as usual).
  void set_limit(size_t limit_bytes) { limit_ = limit_bytes; }

 private:
  size_t limit_;
  size_t in_flight_ = 0;
};

}  // namespace byteps::worker::pipeline
