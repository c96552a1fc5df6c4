#include "worker/stages/local_reduce_stage.h"

#include <fmt/format.h>

#include "protocol/control.h"
#include "worker/stages/local_part.h"

namespace byteps::worker::stages {

namespace {
bool JoinFails(const std::string& attrs) {
  for (const auto& [k, v] : protocol::ParseAttrs(attrs))
    if (k == protocol::kAttrJoin && v == protocol::kJoinFails) return true;
  return false;
}
}  // namespace

void LocalReduceStage::Start(pipeline::PartitionTask* t) {
  if (!reducer_->is_root()) {
    sink()->Complete(t, reducer_->Contribute(LocalPartOf(*t), t->src));
    return;
  }
  Status st = reducer_->Gather(LocalPartOf(*t), t->src, t->dst, [this, t](Status st, bool joined_share) {
    if (st.ok() && joined_share) {
      t->joined_share = servers_;
      if (!servers_ && JoinFails(t->op->request.attrs)) {
        st = Mismatch(fmt::format("tensor '{}' ran while a process on this host had joined (join()): an "
                                  "allgather, broadcast, alltoall or reducescatter needs every process's data, so "
                                  "it fails while any process has joined, as in Horovod. Only allreduces go on with "
                                  "joined processes counted as zeros; for sparse gradients use "
                                  "DistributedOptimizer(sparse_as_dense=True)",
                                  t->op->plan->name));
      }
    }
    if (st.ok()) t->src = t->dst;
    sink()->Complete(t, st);
  });
  if (!st.ok()) sink()->Complete(t, st);
}

}  // namespace byteps::worker::stages
