// What the dispatcher reports as partitions move through their pipelines, for the stage metrics
// (stage_metrics_observer.h), a timeline (worker/trace/trace_recorder.h) or any other watcher;
// several at once through one ObserverFanout (observer_fanout.h). The dispatcher stays free of clocks and
// I/O: an observer takes its own timestamps. With no observer set the dispatcher's only cost is a
// null check per event.
// Threading: every call comes on the dispatcher thread (DispatchLoop), in the order the events
// happened; an observer must not block nor call back into the dispatcher. The task and operation
// passed are borrowed for the call only.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "worker/pipeline/partition_task.h"

namespace byteps::worker::pipeline {

class Observer {
 public:
  virtual ~Observer() = default;
  // `op` entered the dispatcher (its partitions enter their pipeline now or behind their earlier
  // round). Comes before any of its tasks' events.
  virtual void OperationSubmitted(const Operation& op) = 0;
  // `task` joined the queue of stage `stage` (an index into its operation's pipeline).
  virtual void TaskQueued(const PartitionTask& task, size_t stage) = 0;
  // Stage `stage` started `task`; task.credit_bytes is the credit it holds there (0: none).
  virtual void TaskStarted(const PartitionTask& task, size_t stage) = 0;
  // Stage `stage` completed `task` with `status`.
  virtual void TaskCompleted(const PartitionTask& task, size_t stage, const Status& status) = 0;
  // The last partition of `op` left the dispatcher (done or failed; op.status holds the first
  // error once the handle table recorded it).
  virtual void OperationFinished(const Operation& op) = 0;
};

}  // namespace byteps::worker::pipeline
