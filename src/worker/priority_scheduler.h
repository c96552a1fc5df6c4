// Decides which ready partition goes out next: highest priority first, then lowest key (earlier
// declared = needed earlier by the next forward pass), with a credit capping the bytes in flight
// so that a late urgent partition can overtake a backlog. Pure logic, no I/O.
// Threading: not thread-safe; the engine guards it with its dispatch mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace byteps::worker {

struct ScheduledItem {
  int priority = 0;
  uint64_t key = 0;
  uint64_t seq = 0;  // FIFO among equal (priority, key): rounds of the same key in order
  size_t bytes = 0;
  uint64_t id = 0;   // the engine's task id
};

class PriorityScheduler {
 public:
  // credit_bytes == 0: no cap (everything ready goes out, still in priority order).
  explicit PriorityScheduler(size_t credit_bytes) : credit_(credit_bytes) {}

  void Push(ScheduledItem item);
  // The next item if the credit allows it. An item bigger than the whole credit still goes out
  // when nothing else is in flight (otherwise it would starve).
  std::optional<ScheduledItem> Pop();
  void Release(size_t bytes);

  size_t in_flight() const { return in_flight_; }
  size_t pending() const { return heap_.size(); }

 private:
  struct Order {
    bool operator()(const ScheduledItem& a, const ScheduledItem& b) const {
      if (a.priority != b.priority) return a.priority < b.priority;
      if (a.key != b.key) return a.key > b.key;
      return a.seq > b.seq;
    }
  };
  size_t credit_;
  size_t in_flight_ = 0;
  uint64_t next_seq_ = 0;
  std::priority_queue<ScheduledItem, std::vector<ScheduledItem>, Order> heap_;
};

}  // namespace byteps::worker
