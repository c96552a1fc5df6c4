// Stage "local-reduce": the processes of one host (BYTEPS_LOCAL_SIZE > 1) sum a partition through
// shared memory before it goes to the servers. On the local root the partition's destination
// becomes its own bytes plus every other local rank's; on a non-root the partition is handed to
// the root (its result comes back in the local broadcast stage). While a local process has joined
// (join()), its share counts as zeros: the push tells the servers (PartitionTask::joined_share),
// which fail an allgather's or a reducescatter's round then, as Horovod does.
// Threading: Start on the dispatcher thread; the root's completion comes from the local transport's
// I/O thread (the last LocalReady) or from inside Start.
#pragma once

#include <string>

#include "worker/local_reduce/local_reducer.h"
#include "worker/pipeline/stage.h"

namespace byteps::worker::stages {

class LocalReduceStage : public pipeline::Stage {
 public:
  // `servers`: the root pushes the result to the servers next (a round with a joined local process
  // is then flagged to them; without servers a join=fail round fails here).
  LocalReduceStage(pipeline::StageSink* sink, local_reduce::LocalReducer* reducer, bool servers,
                   std::string name = "local-reduce")
      : pipeline::Stage(std::move(name), sink), reducer_(reducer), servers_(servers) {}
  void Start(pipeline::PartitionTask* task) override;
  void FailAll(const Status& failure) override { reducer_->FailAll(failure); }

 private:
  local_reduce::LocalReducer* reducer_;  // borrowed; outlives the stage
  bool servers_;
};

}  // namespace byteps::worker::stages
