// A stage's queue of partition tasks waiting to start: highest priority first, then lowest key
// (declared earlier = needed earlier by the next forward pass), then first come first served, so
// that a late urgent partition overtakes a backlog. Pure logic, no I/O.
// Threading: not thread-safe; only the dispatcher thread touches it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <queue>
#include <vector>

#include "worker/pipeline/partition_task.h"

namespace byteps::worker::pipeline {

class StageQueue {
 public:
  void Push(PartitionTask* task);
  PartitionTask* Top() const { return heap_.empty() ? nullptr : heap_.top(); }
  PartitionTask* Pop();
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }

 private:
  struct Later {  // true when a goes after b
    bool operator()(const PartitionTask* a, const PartitionTask* b) const;
  };
  uint64_t next_seq_ = 0;
  std::priority_queue<PartitionTask*, std::vector<PartitionTask*>, Later> heap_;
};

}  // namespace byteps::worker::pipeline
