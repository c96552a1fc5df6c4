// The local reducer's view of a partition task (shared by the local reduce and broadcast stages).
// Threading: pure function.
#pragma once

#include "worker/local_reduce/local_reducer.h"
#include "worker/pipeline/partition_task.h"

namespace byteps::worker::stages {

inline local_reduce::LocalReducer::Part LocalPartOf(const pipeline::PartitionTask& t) {
  local_reduce::LocalReducer::Part p;
  p.key = t.key;
  p.round = t.round;
  p.name = t.op->plan->name;
  p.offset = t.offset;
  p.bytes = t.len;
  p.tensor_bytes = t.op->plan->bytes;
  p.dtype = t.op->request.dtype;
  p.kind = ReduceKindOf(t.op->request.op);
  p.adasum = t.op->request.op == ReduceOp::kAdasum;
  p.join = t.op->request.op == ReduceOp::kJoin;
  p.average = t.op->request.average;
  p.attrs = t.op->request.attrs;
  return p;
}

}  // namespace byteps::worker::stages
