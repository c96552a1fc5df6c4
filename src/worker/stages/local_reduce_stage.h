// Stage "local-reduce": the processes of one host (BYTEPS_LOCAL_SIZE > 1) sum a partition through
// shared memory before it goes to the servers. On the local root the partition's destination
// becomes its own bytes plus every other local rank's; on a non-root the partition is handed to
// the root (its result comes back in the local broadcast stage).
// Threading: Start on the dispatcher thread; the root's completion comes from the local transport's
// I/O thread (the last LocalReady) or from inside Start.
#pragma once

#include <string>

#include "worker/local_reduce/local_reducer.h"
#include "worker/pipeline/stage.h"

namespace byteps::worker::stages {

class LocalReduceStage : public pipeline::Stage {
 public:
  LocalReduceStage(pipeline::StageSink* sink, local_reduce::LocalReducer* reducer, std::string name = "local-reduce")
      : pipeline::Stage(std::move(name), sink), reducer_(reducer) {}
  void Start(pipeline::PartitionTask* task) override;
  void FailAll(const Status& failure) override { reducer_->FailAll(failure); }

 private:
  local_reduce::LocalReducer* reducer_;  // borrowed; outlives the stage
};

}  // namespace byteps::worker::stages
