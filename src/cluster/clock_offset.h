// A node's clock offset to the scheduler's, estimated from its registration: the scheduler writes
// its system clock into the RegisterReply (protocol::RegisterReply::clock_us) with how long it held
// the request (held_us: a registration waits for the whole job to register), and the node timed the
// exchange on its own system clock. The traces shift every node's times by its offset so that one
// merged timeline reads on the scheduler's clock (python/byteps/trace_merge.py).
// Threading: pure functions.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace byteps::cluster {

// What to add to this node's system time (µs since the epoch) to read the scheduler's.
// sent_us / received_us: this node's system clock when it sent Register and when the reply came;
// scheduler_us: the scheduler's clock when it wrote the reply; held_us: how long it had held the
// request by then. NTP's estimate with one sample: the request and the reply are taken to spend
// equally long on the wire, so the error is at most half of the round trip less the hold. A hold
// outside [0, the round trip] (clocks that stepped) is clamped into it.
inline int64_t ClockOffsetUs(int64_t sent_us, int64_t received_us, int64_t scheduler_us, int64_t held_us) {
  const int64_t elapsed = std::max<int64_t>(received_us - sent_us, 0);
  const int64_t wire = elapsed - std::clamp<int64_t>(held_us, 0, elapsed);  // both ways together
  return scheduler_us - (received_us - wire / 2);  // the reply left the scheduler half the wire time ago
}

// This process's system clock in µs since the epoch (the clock the traces and the offset use).
inline int64_t SystemNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace byteps::cluster
