// Stage "local-broadcast": the host's result goes back to every local process. The local root
// publishes the partition's result through shared memory; a non-root copies it into its
// destination once the root published it. A partition that failed on the root before reaching
// this stage is published as that failure, so the non-roots raise the same error instead of
// waiting.
// Threading: Start/Skip on the dispatcher thread; a non-root's completion comes from the local
// transport's I/O thread (LocalDone) or from inside Start.
#pragma once

#include <string>

#include "worker/local_reduce/local_reducer.h"
#include "worker/pipeline/stage.h"

namespace byteps::worker::stages {

class LocalBroadcastStage : public pipeline::Stage {
 public:
  LocalBroadcastStage(pipeline::StageSink* sink, local_reduce::LocalReducer* reducer,
                      std::string name = "local-broadcast")
      : pipeline::Stage(std::move(name), sink), reducer_(reducer) {}
  void Start(pipeline::PartitionTask* task) override;
  void Skip(pipeline::PartitionTask* task, const Status& failure) override;
  void FailAll(const Status& failure) override { reducer_->FailAll(failure); }

 private:
  local_reduce::LocalReducer* reducer_;  // borrowed; outlives the stage
};

}  // namespace byteps::worker::stages
