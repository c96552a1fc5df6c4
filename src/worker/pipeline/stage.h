// One step of the worker pipeline (copy-in, local reduce, compress, push-pull, decompress, local
// broadcast, copy-out). Each stage is a small class behind this interface: the dispatcher queues a
// partition task in the stage's own priority queue, starts it when the stage (and, for stages that
// use it, the credit) allows, and the stage completes it asynchronously with a Status, exactly
// once, through the StageSink. A new capability is a new Stage; the dispatcher does not change.
//
// Threading: Admit runs on the framework thread that calls push_pull, before the operation is
// submitted; Start, Flush, Skip and CreditFor run on the dispatcher thread. None may block.
// The completion (sink->Complete) may come from any thread, also from inside Start. FailAll may
// run on any thread.
#pragma once

#include <cstddef>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "worker/pipeline/partition_task.h"
#include "worker/pipeline/stage_queue.h"

namespace byteps::worker::pipeline {

class StageSink {
 public:
  virtual ~StageSink() = default;
  // The stage is done with `task` (OK: on to the next stage; an error: the partition failed).
  virtual void Complete(PartitionTask* task, const Status& status) = 0;
};

class Stage {
 public:
  Stage(std::string name, StageSink* sink) : name_(std::move(name)), sink_(sink) {}
  virtual ~Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  const std::string& name() const { return name_; }
  // The tasks waiting to start here, in priority order (dispatcher thread only).
  StageQueue& queue() { return queue_; }
  // Time from start to completion of the tasks this stage completed OK (StageMetricsObserver records it).
  metrics::Histogram* latency() const { return latency_; }

  // Bytes of the dispatcher's credit `task` holds while in this stage; 0 = this stage does not use
  // the credit (only the network stage does: the credit caps bytes in flight).
  virtual size_t CreditFor(const PartitionTask& task) const { return 0; }
  // `op` enters a pipeline this stage is in, on the caller's thread (e.g. the copy-in stage records
  // the moment on the framework's stream). An error refuses the call; nothing was submitted.
  virtual Status Admit(Operation& op) { return Status::Ok(); }
  // Starts `task`; completes it later (or right away) through sink()->Complete. A stage may hold
  // back what Start produced (frames to send) until Flush.
  virtual void Start(PartitionTask* task) = 0;
  // The dispatcher started a batch of tasks here (one Run pass): write out what Start held back,
  // so that many small partitions share system calls.
  virtual void Flush() {}
  // `task` failed before reaching this stage. Stages that others wait on (the local broadcast:
  // the other processes of the host) pass the failure on; the rest do nothing.
  virtual void Skip(PartitionTask* task, const Status& failure) {}
  // The job failed: complete every task started here and not yet completed with `failure`.
  virtual void FailAll(const Status& failure) {}

 protected:
  StageSink* sink() const { return sink_; }

 private:
  std::string name_;
  StageSink* sink_;
  StageQueue queue_;
  metrics::Histogram* latency_ = metrics::Global().AddHistogram(
      "byteps_worker_stage_seconds", "time a partition spends in each pipeline stage, from its start there",
      metrics::Label("stage", name_), metrics::LatencyBounds());
};

}  // namespace byteps::worker::pipeline
