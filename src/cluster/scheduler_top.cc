// Scheduler: the answer to `byteps top` (kTopRequest): every node of the job, when it was last
// heard from, and what its last two heartbeats said (cluster/node_summary.h).
#include <algorithm>
#include <chrono>
#include <tuple>

#include "cluster/scheduler.h"

namespace byteps::cluster {

std::string Scheduler::TopReplyLocked() const {
  const auto now = clock_.Now();
  protocol::TopReply r;
  r.job = job_id_;
  r.num_workers = options_.num_workers;
  r.num_servers = options_.num_servers;
  r.started = rendezvous_done_;
  r.uptime_s = std::chrono::duration<double>(now - start_time_).count();
  r.placement = placement_.summary;
  std::vector<std::pair<uint64_t, protocol::TopNode>> nodes;
  auto add = [&](const Node& n, bool away) {
    protocol::TopNode t;
    t.node = n.info;
    t.heard_s = std::chrono::duration<double>(now - n.last_seen).count();
    t.finished = n.finished;
    t.away = away;
    t.summary = n.summary;
    t.previous = n.previous;
    nodes.emplace_back(n.arrival, std::move(t));
  };
  for (const auto& [conn, node] : nodes_) add(node, false);
  for (const LostNode& lost : lost_) add(lost.node, true);
  // Workers before servers, by rank, then (before the rendezvous, no ranks yet) by arrival.
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.second.node.role != "worker", a.second.node.rank, a.first) <
           std::make_tuple(b.second.node.role != "worker", b.second.node.rank, b.first);
  });
  for (auto& [arrival, n] : nodes) r.nodes.push_back(std::move(n));
  return protocol::Encode(r);
}

}  // namespace byteps::cluster
