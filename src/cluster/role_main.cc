#include "cluster/role_main.h"

#include "cluster/cluster_config.h"
#include "cluster/scheduler.h"

namespace byteps::cluster {

Status RunScheduler(const config::Config& c) {
  auto s = Scheduler::Start(SchedulerOptionsFor(c));
  if (!s.ok()) return s.status();
  Status st = s.value()->Wait();
  // A job that could not start because a node contradicted it (InvalidArgument: its size, a
  // duplicate rank): stay up to a second, or until every node has been answered, so that a node
  // still starting is refused with the reason instead of finding nobody there (it would wait out
  // its own start deadline). After the start deadline itself there is nobody left to tell.
  if (st.code() == StatusCode::kInvalidArgument && !s.value()->rendezvous_done()) {
    s.value()->WaitEveryRegistrationAnswered(1.0);
  }
  s.value()->WaitDisconnect(2.0);
  return st;
}

}  // namespace byteps::cluster
