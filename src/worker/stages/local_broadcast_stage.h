// Stage "local-broadcast": the host's result goes back to every local process. The local root
// publishes the partition's result through shared memory; a non-root copies it into its
// destination once the root published it. A partition that failed on the root before reaching
// this stage is published as that failure, so the non-roots raise the same error instead of
// waiting.
// Threading: Start/Skip on the dispatcher thread; a non-root's completion comes from the local
// transport's I/O thread (LocalDone) or from inside Start.
#pragma once

#include <string>

#include "worker/local_reducer.h"
#include "worker/stage.h"

namespace byteps::worker::stages {

class LocalBroadcastStage : public Stage {
 public:
  LocalBroadcastStage(StageSink* sink, LocalReducer* reducer, std::string name = "local-broadcast")
      : Stage(std::move(name), sink), reducer_(reducer) {}
  void Start(PartitionTask* task) override;
  void Skip(PartitionTask* task, const Status& failure) override;
  void FailAll(const Status& failure) override { reducer_->FailAll(failure); }

 private:
  LocalReducer* reducer_;  // borrowed; outlives the stage
};

}  // namespace byteps::worker::stages
