// Rounds of a tensor, in order. Every push_pull of a tensor is its next round (1, 2, ...), the
// same numbering in every process of the job, since each process pushes its tensors in the same
// order. A partition's round r+1 enters the pipeline only once its round r has left it: the
// server sums rounds in order, and the local processes reuse one shared-memory slot per tensor.
// Threading: not thread-safe; only the dispatcher thread touches it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <utility>

#include "worker/pipeline/partition_task.h"

namespace byteps::worker::pipeline {

class RoundSequencer {
 public:
  // The next round of the tensor with this declared key.
  uint32_t NextRound(uint32_t declared_key) { return ++rounds_[declared_key]; }
  // True when `task` may enter the pipeline now; otherwise it waits behind its partition's
  // earlier round and Leave hands it out later.
  bool Enter(PartitionTask* task);
  // `task` left the pipeline (done or failed): returns the next round of the same partition that
  // may enter now, or nullptr.
  PartitionTask* Leave(PartitionTask* task);
  // Tasks waiting behind an earlier round (all partitions).
  size_t waiting() const { return waiting_count_; }
  // Removes and returns every waiting task (the job failed).
  std::deque<PartitionTask*> TakeAllWaiting();

 private:
  struct Slot {
    bool busy = false;
    std::deque<PartitionTask*> waiting;
  };
  std::unordered_map<uint32_t, uint32_t> rounds_;  // declared key -> last round handed out
  std::map<uint64_t, Slot> slots_;                 // by partition key
  size_t waiting_count_ = 0;
};

}  // namespace byteps::worker::pipeline
