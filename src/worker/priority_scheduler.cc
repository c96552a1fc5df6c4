#include "worker/priority_scheduler.h"

namespace byteps::worker {

void PriorityScheduler::Push(ScheduledItem item) {
  item.seq = next_seq_++;
  heap_.push(item);
}

std::optional<ScheduledItem> PriorityScheduler::Pop() {
  if (heap_.empty()) return std::nullopt;
  const ScheduledItem& top = heap_.top();
  if (credit_ > 0 && in_flight_ > 0 && in_flight_ + top.bytes > credit_) return std::nullopt;
  ScheduledItem item = top;
  heap_.pop();
  in_flight_ += item.bytes;
  return item;
}

void PriorityScheduler::Release(size_t bytes) { in_flight_ -= bytes <= in_flight_ ? bytes : in_flight_; }

}  // namespace byteps::worker
