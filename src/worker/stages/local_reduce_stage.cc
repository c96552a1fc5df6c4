#include "worker/stages/local_reduce_stage.h"

#include "worker/stages/local_part.h"

namespace byteps::worker::stages {

void LocalReduceStage::Start(pipeline::PartitionTask* t) {
  if (!reducer_->is_root()) {
    sink()->Complete(t, reducer_->Contribute(LocalPartOf(*t), t->src));
    return;
  }
  Status st = reducer_->Gather(LocalPartOf(*t), t->src, t->dst, [this, t](const Status& st) {
    if (st.ok()) t->src = t->dst;
    sink()->Complete(t, st);
  });
  if (!st.ok()) sink()->Complete(t, st);
}

}  // namespace byteps::worker::stages
