// Engine::Join: Horovod's join() on the servers' "join" key policy (server/sum_engine.h). The
// join tensor holds one int32 per server, planned one partition per server (NameRequest::spread),
// so that every server learns that this worker joined; each server answers once every worker
// pushed, with the last pusher's rank.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/logging.h"
#include "worker/engine.h"
#include "worker/local_reduce/local_circles.h"
#include "worker/pipeline/handle_table.h"
#include "worker/tuning/partition_schedule.h"

namespace byteps::worker {

namespace {
constexpr const char* kJoinName = "__byteps.join";
}

StatusOr<int> Engine::Join() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return Precondition("join(): byteps has been shut down; call init() again");
    if (!failure_.ok()) return failure_.WithContext("join()");
  }
  if (!distributed() && !local_) return rank_;  // the only worker is the last to join
  // Horovod's join comes after every operation this worker started: those finish first (the
  // others' rounds they wait for need only the others' pushes, or this worker's zeros).
  if (!handles_->WaitIdle(config_.op_timeout_s)) {
    return DeadlineExceeded(fmt::format("join(): this worker's {} operation(s) in flight did not finish within "
                                        "BYTEPS_TIMEOUT={} s",
                                        handles_->running(), config_.op_timeout_s));
  }
  // With several processes per host the join tensor goes through the local reduce, whose join
  // round completes once every local process joined (the last one's rank goes on); the host's
  // root then pushes it. Until then the root stands in for the rounds the others still run.
  const int servers = distributed() ? std::max(1, config_.num_servers) : 1;
  std::vector<int32_t> mine(servers, rank_), last(servers, -1);
  TensorRequest r;
  r.name = kJoinName;
  r.input = mine.data();
  r.output = last.data();
  r.bytes = mine.size() * sizeof(int32_t);
  r.dtype = DataType::kInt32;
  r.op = ReduceOp::kJoin;
  if (local_ && local_->all()->is_root()) local_->all()->RootJoins();  // stand-ins from now on
  BYTEPS_ASSIGN_OR_RETURN(HandleId h, Enqueue(r));
  BYTEPS_LOG(Info, "join(): worker {} joined; its share of the others' reductions counts as zeros until every "
                   "worker joined",
             rank_);
  Status st = Wait(h);
  Release(h);
  if (st.code() == StatusCode::kDeadlineExceeded) {
    // The servers still count this worker as joined: the job cannot go on consistently.
    Status fail = DeadlineExceeded(fmt::format(
        "join(): worker {} waited BYTEPS_TIMEOUT={} s for every other worker to join (a worker still has more "
        "steps than that, or stopped without calling join()); raise BYTEPS_TIMEOUT for longer uneven tails",
        rank_, config_.op_timeout_s));
    FailJob(fail);
    return fail;
  }
  if (!st.ok()) return st.WithContext("join()");
  if (schedule_) use_floor_.store(schedule_->verdict_from(), std::memory_order_release);
  BYTEPS_LOG(Info, "join(): every worker joined; worker {} was the last", last[0]);
  return last[0];
}

}  // namespace byteps::worker
