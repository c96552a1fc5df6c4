// The unit that moves through the worker pipeline: one partition of one push_pull call
// (an Operation), and the Operation itself.
//
// A task's bytes move as the stages run: `src` is where the partition's data is now, `dst` where
// a stage that produces or moves data writes it (the output tensor for CPU tensors). A stage that
// wrote `dst` sets src = dst. The last stage leaves the result in the output tensor.
//
// Threading: a task belongs to exactly one party at a time: the dispatcher thread while it is
// queued, the stage it was started in until that stage completes it. The Operation's completion
// fields are guarded by the HandleTable.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/planning/key_assigner.h"
#include "worker/tensor_request.h"

namespace byteps::worker::pipeline {

class Pipeline;
struct Operation;

struct PartitionTask {
  uint64_t id = 0;  // unique in this process; the request id of its push-pull frame
  Operation* op = nullptr;
  size_t part = 0;   // index in op->plan->partitions
  uint64_t key = 0;  // partition key (protocol/key_layout.h)
  int server = 0;
  uint32_t round = 0;  // the tensor's round (1-based), assigned when the operation is submitted
  size_t offset = 0;   // bytes from the tensor start
  size_t len = 0;
  // What this worker pushes: len bytes at src for a sum; for a concatenation its part of the
  // partition (push_len bytes at src, possibly none) and where in the partition they go.
  size_t push_len = 0;
  size_t push_offset = 0;
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  // The local reduce counted a joined local process's share as zeros (join() with several
  // processes per host): the push says so (protocol::kFlagJoinedShare).
  bool joined_share = false;
  // A compressed tensor's partition (the compress stage sets it; all false / null otherwise): the
  // push is a codec's payload (push_len bytes at src, protocol::kFlagCompressed) and the server's
  // compressed reply lands in reply[0..reply_cap), reply_len bytes, for the decompress stage. The
  // buffers belong to the compress stage's state of this key.
  struct Wire {
    bool compressed = false;
    uint8_t* reply = nullptr;
    size_t reply_cap = 0;
    size_t reply_len = 0;
  } wire;
  // Dispatcher bookkeeping (dispatcher thread only).
  enum class Where : uint8_t { kWaitingRound, kQueued, kRunning, kFinished };
  Where where = Where::kWaitingRound;  // in its current stage: for the stall report
  std::chrono::steady_clock::time_point started_at{};  // when its current stage started it
  size_t stage = 0;          // index of the current stage in the pipeline
  size_t credit_bytes = 0;   // credit held while in a credit-using stage (0 = none)
  uint64_t seq = 0;          // FIFO tie-break in stage queues
};

// One push_pull call: the request, its tensor's plan, the pipeline its partitions take, and the
// partitions themselves (created once; their addresses are stable for the operation's life).
struct Operation {
  HandleId id = 0;
  TensorRequest request;
  const planning::TensorPlan* plan = nullptr;
  const Pipeline* pipeline = nullptr;
  std::vector<PartitionTask> parts;
  // When the framework's call submitted it (set before submission; read by the stall report).
  std::chrono::steady_clock::time_point submitted_at{};
  // A reducescatter (attribute "scatter"): each reply is this worker's slice of the partition.
  bool sliced_replies = false;
  // A device tensor: the event recorded on the framework's stream when the call was made (the
  // copy-in stage's; destroyed with the operation).
  std::shared_ptr<void> ready_event;
  // Completion, guarded by the HandleTable's mutex.
  size_t remaining = 0;
  std::vector<bool> part_done;
  bool done = false;
  Status status;
};

// The operation of `request` over `plan` through `pipeline`: one task per partition, pointing into
// the request's input and output; task ids are taken from *next_task_id on.
std::shared_ptr<Operation> MakeOperation(const TensorRequest& request, const planning::TensorPlan& plan,
                                         const Pipeline* pipeline, uint64_t* next_task_id);

}  // namespace byteps::worker::pipeline
