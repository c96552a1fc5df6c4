#include "worker/pipeline/partition_task.h"

#include <algorithm>

#include "protocol/control.h"

namespace byteps::worker::pipeline {

std::shared_ptr<Operation> MakeOperation(const TensorRequest& request, const planning::TensorPlan& plan,
                                         const Pipeline* pipeline, uint64_t* next_task_id) {
  auto op = std::make_shared<Operation>();
  op->request = request;
  op->plan = &plan;
  op->pipeline = pipeline;
  op->submitted_at = std::chrono::steady_clock::now();
  op->parts.resize(plan.partitions.size());
  op->sliced_replies = request.attrs.find(protocol::kAttrScatter) != std::string::npos;
  for (size_t i = 0; i < op->parts.size(); ++i) {
    const planning::PartitionPlan& pp = plan.partitions[i];
    PartitionTask& t = op->parts[i];
    t.id = (*next_task_id)++;
    t.op = op.get();
    t.part = i;
    t.key = pp.key;
    t.server = pp.server;
    t.offset = pp.range.offset;
    t.len = pp.range.length;
    t.dst = static_cast<uint8_t*>(request.output) + pp.range.offset;
    if (request.op != ReduceOp::kConcat) {  // a reduction: every worker pushes the whole partition
      t.src = static_cast<const uint8_t*>(request.input) + pp.range.offset;
      t.push_len = t.len;
      continue;
    }
    // A concatenation: this worker's slice [slice_offset, +slice_bytes) within this partition.
    const size_t lo = std::max(t.offset, request.slice_offset);
    const size_t hi = std::min(t.offset + t.len, request.slice_offset + request.slice_bytes);
    if (lo < hi) {
      t.src = static_cast<const uint8_t*>(request.input) + (lo - request.slice_offset);
      t.push_len = hi - lo;
      t.push_offset = lo - t.offset;
    }
  }
  return op;
}

}  // namespace byteps::worker::pipeline
