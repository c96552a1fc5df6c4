// Stage "average": divides the partition by the number of contributors. Only in pipelines where no
// network stage does it on the fly (a host of several processes in a non-distributed job); the
// push-pull stage averages as each partition arrives.
// Threading: Start on the dispatcher thread; completes inside Start.
#pragma once

#include "worker/pipeline/stage.h"

namespace byteps::worker::stages {

class AverageStage : public pipeline::Stage {
 public:
  AverageStage(pipeline::StageSink* sink, int divisor) : pipeline::Stage("average", sink), divisor_(divisor) {}
  void Start(pipeline::PartitionTask* task) override;

 private:
  const int divisor_;
};

}  // namespace byteps::worker::stages
