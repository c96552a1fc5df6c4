// The scheduler's rendezvous: registration (and the refusals), rank assignment, the address
// table, and rejoining after a dropped connection. See scheduler.h.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "cluster/clock_offset.h"
#include "cluster/scheduler.h"
#include "common/logging.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;

namespace {
std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

void Scheduler::StampClock(protocol::RegisterReply& reply, std::chrono::steady_clock::time_point since) const {
  reply.job = job_id_;
  reply.clock_us = SystemNowUs();
  reply.held_us = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - since).count());
}

void Scheduler::HandleRegister(transport::Connection& c, const std::string& payload, Outbox* out) {
  auto conn = c.shared_from_this();
  auto reject = [&](const std::string& why) {
    BYTEPS_LOG(Error, "refused registration from {}: {}", c.peer_name(), why);
    protocol::RegisterReply r;
    r.error = why;
    r.job = job_id_;
    Header h;
    h.opcode = Opcode::kRegisterReply;
    out->push_back({conn, {h, protocol::Encode(r)}});
  };
  // A node whose settings contradict the job's (its size, a rank another node holds): the job as
  // configured can never form, so everyone hears why now instead of at the start deadline. A
  // running job is left alone (the stray node is refused, nothing more).
  auto reject_job = [&](const std::string& why) {
    reject(why);
    if (rendezvous_done_ || job_over_) return;
    FailJobLocked(InvalidArgument(fmt::format("the job cannot start: {}", why)), nullptr, out);
  };
  auto req = protocol::DecodeRegisterRequest(payload);
  if (!req.ok()) {
    reject(req.status().message());
    return;
  }
  const auto& r = req.value();
  if (r.rejoin) {
    HandleRejoin(c, r, out);
    return;
  }
  if (r.role != "worker" && r.role != "server") {
    reject(fmt::format("unknown role '{}'", r.role));
    return;
  }
  if (r.num_workers != options_.num_workers || r.num_servers != options_.num_servers) {
    reject_job(fmt::format("{} at {} (pid {}) believes the job has DMLC_NUM_WORKER={} DMLC_NUM_SERVER={}, but the "
                           "scheduler was started with {} and {}",
                           r.role, r.host, r.pid, r.num_workers, r.num_servers, options_.num_workers,
                           options_.num_servers));
    return;
  }
  if (job_over_) {
    reject(fmt::format("the job has already ended: {}", result_.ok() ? "it finished" : result_.message()));
    return;
  }
  if (rendezvous_done_) {
    reject(fmt::format("the job already has all {} workers and {} servers; a {} from {} (pid {}) is one "
                       "too many (check DMLC_NUM_WORKER / DMLC_NUM_SERVER)",
                       options_.num_workers, options_.num_servers, r.role, r.host, r.pid));
    return;
  }
  // The same process registering again before its old connection was seen closing (a reset
  // during registration): the old entry is stale; its OnClose is then ignored.
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
    if (!r.instance.empty() && it->second.req.instance == r.instance && it->second.req.role == r.role) {
      BYTEPS_LOG(Warning, "{} registered again on a new connection; dropping the old one",
                 protocol::Describe(it->second.info));
      nodes_.erase(it);
      break;
    }
  }
  int have = 0;
  for (auto& [_, n] : nodes_) {
    if (n.req.role != r.role) continue;
    ++have;
    if (r.requested_rank >= 0 && n.req.requested_rank == r.requested_rank) {
      reject_job(fmt::format("{} rank {} is already taken by pid {} at {}; pid {} at {} asked for it too (duplicate "
                             "DMLC_WORKER_ID?)",
                             r.role, r.requested_rank, n.req.pid, n.req.host, r.pid, r.host));
      return;
    }
  }
  int limit = r.role == "worker" ? options_.num_workers : options_.num_servers;
  if (r.requested_rank >= limit) {
    reject_job(fmt::format("{} at {} (pid {}) asked for rank {}, out of range for a job of {} {}s (DMLC_WORKER_ID "
                           "must be below DMLC_NUM_WORKER)",
                           r.role, r.host, r.pid, r.requested_rank, limit, r.role));
    return;
  }
  if (have >= limit) {
    reject(fmt::format("the job expects {} {}s and all have registered; this one (pid {} at {}) is one too "
                       "many (check DMLC_NUM_{})",
                       limit, r.role, r.pid, r.host, r.role == "worker" ? "WORKER" : "SERVER"));
    return;
  }
  // The same process registering again (its connection dropped during registration), or a
  // replacement for the same requested rank: the node is no longer missing.
  std::erase_if(lost_, [&](const LostNode& l) {
    return l.node.req.role == r.role && ((!r.instance.empty() && l.node.req.instance == r.instance) ||
                                         (r.requested_rank >= 0 && l.node.req.requested_rank == r.requested_rank));
  });
  Node n;
  n.conn = conn;
  n.req = r;
  n.info.role = r.role;
  n.info.host = r.host;
  n.info.port = r.port;
  n.info.pid = r.pid;
  n.arrival = next_arrival_++;
  n.last_seen = clock_.Now();
  n.registered_at = std::chrono::steady_clock::now();
  nodes_[&c] = n;
  c.set_peer_name(fmt::format("{} pid {} at {}", r.role, r.pid, c.peer_name()));
  BYTEPS_LOG(Info, "registered {} (pid {}, {}:{}); {} of {} nodes", r.role, r.pid, r.host, r.port,
             nodes_.size(), options_.num_workers + options_.num_servers);
  MaybeCompleteRendezvousLocked(out);
}

void Scheduler::HandleRejoin(transport::Connection& c, const protocol::RegisterRequest& r, Outbox* out) {
  auto conn = c.shared_from_this();
  Header h;
  h.opcode = Opcode::kRegisterReply;
  protocol::RegisterReply reply;
  auto same = [&](const Node& n) {
    return n.info.role == r.role && n.info.rank == r.requested_rank && n.info.pid == r.pid;
  };
  std::optional<Node> node;
  if (job_over_) {
    // It missed the end of the job: tell it how it ended.
    Header t;
    t.opcode = Opcode::kTerminate;
    t.arg = result_.ok() ? 0 : 1;
    out->push_back({conn, {t, ""}});
    return;
  }
  if (!rendezvous_done_) {
    reply.error = "cannot rejoin before the job started";
  } else if (auto it = std::find_if(lost_.begin(), lost_.end(), [&](const LostNode& l) { return same(l.node); });
             it != lost_.end()) {
    node = it->node;
    lost_.erase(it);
  } else if (auto nt = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& e) { return same(e.second); });
             nt != nodes_.end()) {
    // Its old connection has not been seen closing yet: forget it (its OnClose is then ignored).
    node = nt->second;
    for (auto& [_, members] : barriers_) members.erase(nt->first);
    nodes_.erase(nt);
  } else {
    reply.error = fmt::format("{} {} (pid {}) is not a live node of this job; it cannot rejoin", r.role,
                              r.requested_rank, r.pid);
  }
  if (!node) {
    BYTEPS_LOG(Error, "refused rejoin from {}: {}", c.peer_name(), reply.error);
    out->push_back({conn, {h, protocol::Encode(reply)}});
    return;
  }
  node->conn = conn;
  node->last_seen = clock_.Now();
  nodes_[&c] = *node;
  c.set_peer_name(protocol::Describe(node->info));
  reply.rank = node->info.rank;
  reply.nodes = table_;
  StampClock(reply, std::chrono::steady_clock::now());
  BYTEPS_LOG(Warning, "{} rejoined after its connection dropped", protocol::Describe(node->info));
  out->push_back({conn, {h, protocol::Encode(reply)}});
}

void Scheduler::MaybeCompleteRendezvousLocked(Outbox* out) {
  if (nodes_.size() != static_cast<size_t>(options_.num_workers + options_.num_servers)) return;
  // Ranks: requested ones first, then the free ranks in registration order (map order is by
  // pointer, so sort by arrival for determinism).
  std::vector<Node*> order;
  for (auto& [_, n] : nodes_) order.push_back(&n);
  std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->arrival < b->arrival; });
  for (const char* role : {"worker", "server"}) {
    int limit = std::string(role) == "worker" ? options_.num_workers : options_.num_servers;
    std::vector<bool> used(limit, false);
    for (Node* n : order)
      if (n->info.role == role && n->req.requested_rank >= 0) {
        n->info.rank = n->req.requested_rank;
        used[n->info.rank] = true;
      }
    int next = 0;
    for (Node* n : order) {
      if (n->info.role != role || n->req.requested_rank >= 0) continue;
      while (used[next]) ++next;
      n->info.rank = next;
      used[next] = true;
    }
  }
  auto placement = PlaceServersLocked(order);
  if (!placement.ok()) {
    FailJobLocked(placement.status(), nullptr, out);
    return;
  }
  placement_ = std::move(placement.value());
  names_.SetShares(placement_.shares);  // a name planned before (equal shares) keeps its plan
  if (!placement_.warning.empty()) BYTEPS_LOG(Warning, "{}", placement_.warning);
  BYTEPS_LOG(Info, "{}", placement_.summary);
  protocol::RegisterReply reply;
  for (const char* role : {"worker", "server"})
    for (int rank = 0;; ++rank) {
      auto it = std::find_if(order.begin(), order.end(),
                             [&](Node* n) { return n->info.role == role && n->info.rank == rank; });
      if (it == order.end()) break;
      reply.nodes.push_back((*it)->info);
    }
  reply.shares = placement_.shares;
  reply.placement = placement_.summary;
  for (Node* n : order) {
    n->conn->set_peer_name(protocol::Describe(n->info));
    reply.rank = n->info.rank;
    StampClock(reply, n->registered_at);
    Header h;
    h.opcode = Opcode::kRegisterReply;
    out->push_back({n->conn, {h, protocol::Encode(reply)}});
  }
  table_ = reply.nodes;
  rendezvous_done_ = true;
  // Nodes start heart-beating once the rendezvous is complete: the silence clock starts now, not
  // at registration (an early node may wait far longer than PS_HEARTBEAT_TIMEOUT for the last).
  const auto now = clock_.Now();
  for (Node* n : order) n->last_seen = now;
  lost_.clear();  // nodes that left during registration and were replaced
  BYTEPS_LOG(Info, "rendezvous complete: {} workers, {} servers (job {})", options_.num_workers,
             options_.num_servers, job_id_);
}

StatusOr<protocol::ServerPlacement> Scheduler::PlaceServersLocked(const std::vector<Node*>& order) const {
  std::vector<std::string> worker_hosts(options_.num_workers), server_hosts(options_.num_servers);
  std::vector<double> worker_rates(options_.num_workers), server_rates(options_.num_servers);
  for (const Node* n : order) {
    const bool worker = n->info.role == "worker";
    (worker ? worker_hosts : server_hosts)[n->info.rank] = n->info.host;
    (worker ? worker_rates : server_rates)[n->info.rank] = n->req.nic_rate;
  }
  // NIC rates: the slowest machine of each kind sets its kind's pace; the formula's equal rates
  // unless every machine reported one.
  const std::set<std::string> machines(worker_hosts.begin(), worker_hosts.end());
  double worker_rate = 0, cpu_rate = 0;
  bool known = true;
  for (double r : worker_rates) {
    known = known && r > 0;
    worker_rate = worker_rate == 0 ? r : std::min(worker_rate, r);
  }
  for (int s = 0; s < options_.num_servers; ++s) {
    if (machines.count(server_hosts[s]) != 0) continue;  // a colocated server shares its worker's NIC
    known = known && server_rates[s] > 0;
    cpu_rate = cpu_rate == 0 ? server_rates[s] : std::min(cpu_rate, server_rates[s]);
  }
  if (!known || worker_rate <= 0 || cpu_rate <= 0) worker_rate = cpu_rate = 1;
  return protocol::PlaceServers(worker_hosts, server_hosts, options_.mixed_mode, cpu_rate, worker_rate);
}

Status Scheduler::PlaceFromProbeLocked(const protocol::NameRequest& r) {
  if (!rendezvous_done_) {
    return Precondition("a start-up probe's report reached the scheduler before the rendezvous completed");
  }
  if (probed_) return Status::Ok();  // the first report decided; everyone gets its answer
  std::vector<std::string> worker_hosts, server_hosts;
  for (const protocol::NodeInfo& n : table_) (n.role == "worker" ? worker_hosts : server_hosts).push_back(n.host);
  protocol::ProbeTimes probe{r.probe_seconds, static_cast<double>(r.probe_bytes)};
  BYTEPS_ASSIGN_OR_RETURN(protocol::ServerPlacement placed,
                          protocol::PlaceFromProbe(worker_hosts, server_hosts, options_.mixed_mode, probe));
  probed_ = true;
  if (placed.shares != placement_.shares) names_.SetShares(placed.shares);  // what is placed from now on
  placement_ = std::move(placed);
  BYTEPS_LOG(Info, "after the start-up probe: {}", placement_.summary);
  return Status::Ok();
}

std::string Scheduler::MissingLocked() const {
  std::string out;
  for (const char* role : {"worker", "server"}) {
    int limit = std::string(role) == "worker" ? options_.num_workers : options_.num_servers;
    int have = 0;
    std::vector<bool> taken(limit, false);
    for (auto& [_, n] : nodes_)
      if (n.info.role == role) {
        ++have;
        if (n.req.requested_rank >= 0) taken[n.req.requested_rank] = true;
      }
    if (have == limit) continue;
    std::vector<int> missing;
    for (int i = 0; i < limit; ++i)
      if (!taken[i]) missing.push_back(i);
    if (!out.empty()) out += "; ";
    out += fmt::format("{} of {} {}s registered", have, limit, role);
    if (role == std::string("worker") && static_cast<int>(missing.size()) == limit - have) {
      out += fmt::format(" (ranks {} missing)", JoinInts(missing));
    }
  }
  return out;
}

}  // namespace byteps::cluster
