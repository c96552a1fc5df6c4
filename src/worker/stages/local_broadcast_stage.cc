#include "worker/stages/local_broadcast_stage.h"

#include "worker/stages/local_part.h"

namespace byteps::worker::stages {

void LocalBroadcastStage::Start(pipeline::PartitionTask* t) {
  if (reducer_->is_root()) {
    sink()->Complete(t, reducer_->Publish(LocalPartOf(*t), t->src));
    return;
  }
  reducer_->AwaitResult(LocalPartOf(*t), t->dst, [this, t](const Status& st) {
    if (st.ok()) t->src = t->dst;
    sink()->Complete(t, st);
  });
}

void LocalBroadcastStage::Skip(pipeline::PartitionTask* t, const Status& failure) {
  if (reducer_->is_root()) reducer_->PublishError(LocalPartOf(*t), failure);
}

}  // namespace byteps::worker::stages
