// Scheduler: its report on kill -USR1 (the nodes, when each was last heard from, who is missing,
// open barriers).
#include <fmt/format.h>

#include <chrono>

#include "cluster/scheduler.h"

namespace byteps::cluster {

std::string Scheduler::Report() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = clock_.Now();
  std::string out = fmt::format("job: {} of {} workers and {} of {} servers registered; {}; {} worker(s) finished\n",
                                CountLocked("worker"), options_.num_workers, CountLocked("server"), options_.num_servers,
                                rendezvous_done_ ? "started" : "not started", finished_workers_);
  if (!rendezvous_done_) out += fmt::format("missing: {}\n", MissingLocked());
  for (const auto& [conn, node] : nodes_) {
    out += fmt::format("  {}: last heard {:.1f} s ago{}\n", protocol::Describe(node.info),
                       std::chrono::duration<double>(now - node.last_seen).count(), node.finished ? ", finished" : "");
  }
  for (const auto& [id, in] : barriers_) {
    out += fmt::format("  barrier {}: {} node(s) in\n", id, in.size());
  }
  return out;
}

int Scheduler::CountLocked(const char* role) const {
  int n = 0;
  for (const auto& [conn, node] : nodes_) n += node.req.role == role;
  return n;
}

}  // namespace byteps::cluster
