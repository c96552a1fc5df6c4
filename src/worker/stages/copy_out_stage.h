// Stage "copy-out": moves the partition's result to the output tensor. For CPU tensors only a
// job with no other data stage needs it (one process, not distributed, out of place): every other
// stage already writes into the output.
// Threading: Start on the dispatcher thread; completes inside Start.
#pragma once

#include "worker/stage.h"

namespace byteps::worker::stages {

class CopyOutStage : public Stage {
 public:
  explicit CopyOutStage(StageSink* sink) : Stage("copy-out", sink) {}
  void Start(PartitionTask* task) override;
};

}  // namespace byteps::worker::stages
