#include "worker/pipeline/stage_metrics_observer.h"

#include <chrono>

#include "common/metrics.h"
#include "worker/pipeline/pipeline.h"
#include "worker/pipeline/stage.h"

namespace byteps::worker::pipeline {

void StageMetricsObserver::TaskCompleted(const PartitionTask& task, size_t stage, const Status& status) {
  if (!status.ok()) return;
  // started_at is the dispatcher's (steady) clock at the start; the completion is now.
  const auto spent = std::chrono::steady_clock::now() - task.started_at;
  task.op->pipeline->at(stage)->latency()->Observe(std::chrono::duration<double>(spent).count());
}

}  // namespace byteps::worker::pipeline
