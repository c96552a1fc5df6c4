#include "worker/stages/average_stage.h"

#include <cstring>

#include "worker/average.h"

namespace byteps::worker::stages {

void AverageStage::Start(pipeline::PartitionTask* t) {
  const DataType dtype = t->op->request.dtype;
  if (t->src != t->dst && t->len > 0) std::memmove(t->dst, t->src, t->len);
  t->src = t->dst;
  DivideInPlace(t->dst, t->len / DataTypeSize(dtype), dtype, divisor_);
  sink()->Complete(t, Status::Ok());
}

}  // namespace byteps::worker::stages
