// The pipeline's own metrics as a dispatcher observer: each stage's latency histogram
// (Stage::latency(), byteps_worker_stage_seconds) gets the time from a task's start there to its
// successful completion. A failed completion is not a latency. DispatchLoop installs one always,
// beside the timeline's recorder when tracing (observer_fanout.h).
// Threading: as Observer (the dispatcher thread).
#pragma once

#include "worker/pipeline/observer.h"

namespace byteps::worker::pipeline {

class StageMetricsObserver final : public Observer {
 public:
  void OperationSubmitted(const Operation&) override {}
  void TaskQueued(const PartitionTask&, size_t) override {}
  void TaskStarted(const PartitionTask&, size_t) override {}
  void TaskCompleted(const PartitionTask& task, size_t stage, const Status& status) override;
  void OperationFinished(const Operation&) override {}
};

}  // namespace byteps::worker::pipeline
