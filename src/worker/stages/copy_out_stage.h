// Stage "copy-out": moves the partition's result to the output tensor. For CPU tensors only a
// job with no other data stage needs it (one process, not distributed, out of place): every other
// stage already writes into the output.
// Threading: Start on the dispatcher thread; completes inside Start.
#pragma once

#include "worker/pipeline/stage.h"

namespace byteps::worker::stages {

class CopyOutStage : public pipeline::Stage {
 public:
  explicit CopyOutStage(pipeline::StageSink* sink) : pipeline::Stage("copy-out", sink) {}
  void Start(pipeline::PartitionTask* task) override;
};

}  // namespace byteps::worker::stages
