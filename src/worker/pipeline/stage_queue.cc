#include "worker/pipeline/stage_queue.h"

namespace byteps::worker::pipeline {

bool StageQueue::Later::operator()(const PartitionTask* a, const PartitionTask* b) const {
  const int pa = a->op->request.priority, pb = b->op->request.priority;
  if (pa != pb) return pa < pb;
  if (a->key != b->key) return a->key > b->key;
  return a->seq > b->seq;
}

void StageQueue::Push(PartitionTask* task) {
  task->seq = next_seq_++;
  heap_.push(task);
}

PartitionTask* StageQueue::Pop() {
  if (heap_.empty()) return nullptr;
  PartitionTask* t = heap_.top();
  heap_.pop();
  return t;
}

}  // namespace byteps::worker::pipeline
