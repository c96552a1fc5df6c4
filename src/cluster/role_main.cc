#include "cluster/role_main.h"

#include "cluster/cluster_config.h"
#include "cluster/scheduler.h"

namespace byteps::cluster {

Status RunScheduler(const config::Config& c) {
  auto s = Scheduler::Start(SchedulerOptionsFor(c));
  if (!s.ok()) return s.status();
  Status st = s.value()->Wait();
  s.value()->WaitDisconnect(2.0);
  return st;
}

}  // namespace byteps::cluster
