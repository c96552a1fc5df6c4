#include "worker/pipeline/round_sequencer.h"

namespace byteps::worker::pipeline {

bool RoundSequencer::Enter(PartitionTask* task) {
  Slot& s = slots_[task->key];
  if (!s.busy) {
    s.busy = true;
    return true;
  }
  s.waiting.push_back(task);
  ++waiting_count_;
  return false;
}

PartitionTask* RoundSequencer::Leave(PartitionTask* task) {
  auto it = slots_.find(task->key);
  if (it == slots_.end()) return nullptr;
  Slot& s = it->second;
  if (s.waiting.empty()) {
    slots_.erase(it);
    return nullptr;
  }
  PartitionTask* next = s.waiting.front();
  s.waiting.pop_front();
  --waiting_count_;
  return next;
}

std::deque<PartitionTask*> RoundSequencer::TakeAllWaiting() {
  std::deque<PartitionTask*> all;
  for (auto& [key, s] : slots_) {
    for (PartitionTask* t : s.waiting) all.push_back(t);
    s.waiting.clear();
  }
  waiting_count_ = 0;
  return all;
}

}  // namespace byteps::worker::pipeline
