#include "cluster/role_main.h"

#include <fmt/format.h>
#include <unistd.h>

#include "cluster/cluster_config.h"
#include "cluster/scheduler.h"
#include "common/logging.h"
#include "common/report_file.h"
#include "common/report_signal.h"

namespace byteps::cluster {

Status RunScheduler(const config::Config& c) {
  auto metrics = StartMetrics(c, "scheduler");
  if (!metrics.ok()) return metrics.status();
  auto s = Scheduler::Start(SchedulerOptionsFor(c));
  if (!s.ok()) return s.status();
  Scheduler* sched = s.value().get();
  const int report = report_signal::Add([sched, &c] {
    const std::string text = fmt::format("byteps report of the scheduler (pid {})\nreason: asked for with kill -USR1\n{}",
                                          getpid(), sched->Report());
    auto path = report_file::Write(report_file::Folder(c.trace_on, c.trace_dir, c.tmp_dir), "scheduler", text);
    if (path.ok()) BYTEPS_LOG(Warning, "report (kill -USR1) written to {}", path.value());
    else BYTEPS_LOG(Warning, "{}", path.status().message());
  });
  Status st = s.value()->Wait();
  report_signal::Remove(report);
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
