#include "cluster/scheduler.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <optional>

#include "common/logging.h"
#include "protocol/error_frame.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;
using Clock = std::chrono::steady_clock;

namespace {
constexpr uint64_t kMaxControlPayload = 1 << 20;  // control frames are small; refuse floods

Clock::time_point Deadline(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Start(const SchedulerOptions& options) {
  std::unique_ptr<Scheduler> s(new Scheduler(options));
  auto port = s->transport_->Listen(options.host, options.port, s.get());
  if (!port.ok()) return port.status().WithContext("scheduler");
  s->port_ = port.value();
  s->start_time_ = Clock::now();
  s->watchdog_ = std::thread([p = s.get()] { p->Watchdog(); });
  BYTEPS_LOG(Info, "scheduler listening on {}:{} for {} workers and {} servers", options.host,
             s->port_, options.num_workers, options.num_servers);
  return s;
}

Scheduler::Scheduler(const SchedulerOptions& options) : options_(options) {
  options_.transport.name = "sched";
  transport_ = transport::CreateTcpTransport(options_.transport);
}

Scheduler::~Scheduler() {
  Stop(Aborted("scheduler destroyed"));
  if (watchdog_.joinable()) watchdog_.join();
  transport_->Shutdown();
}

void Scheduler::Flush(Outbox* out) {
  for (auto& [conn, msg] : *out) {
    if (conn) (void)conn->SendCopy(msg.first, msg.second);
  }
  out->clear();
}

StatusOr<transport::RecvBuffer> Scheduler::OnHeader(transport::Connection& c, const Header& h) {
  if (h.payload_len > kMaxControlPayload) {
    return ProtocolError(fmt::format("{} sent a {}-byte {} frame to the scheduler (limit {})",
                                     c.peer_name(), h.payload_len, protocol::OpcodeName(h.opcode),
                                     kMaxControlPayload));
  }
  switch (h.opcode) {
    case Opcode::kRegister:
    case Opcode::kBarrier:
    case Opcode::kHeartbeat:
    case Opcode::kFinish:
      return transport::RecvBuffer{};
    default:
      return ProtocolError(fmt::format("{} sent {} to the scheduler, which only takes control frames",
                                       c.peer_name(), protocol::OpcodeName(h.opcode)));
  }
}

void Scheduler::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  Outbox out;
  bool refuse = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string payload(reinterpret_cast<const char*>(b.data), b.size);
    if (h.opcode == Opcode::kRegister) {
      HandleRegister(c, payload, &out);
    } else {
      auto it = nodes_.find(&c);
      if (it == nodes_.end()) {
        BYTEPS_LOG(Warning, "{} sent {} before registering; closing it", c.peer_name(),
                   protocol::OpcodeName(h.opcode));
        refuse = true;
      }
    }
    if (!refuse && h.opcode != Opcode::kRegister) {
      auto it = nodes_.find(&c);
      Node& node = it->second;
      node.last_seen = Clock::now();
      if (h.opcode == Opcode::kHeartbeat) {
        Header echo;  // lets the node notice a scheduler it can no longer hear (link down)
        echo.opcode = Opcode::kHeartbeat;
        out.push_back({node.conn, {echo, ""}});
      }
      if (h.opcode == Opcode::kBarrier && rendezvous_done_ && released_barriers_.count(h.key)) {
        Header r;  // asked again after a rejoin: the release it missed
        r.opcode = Opcode::kBarrierRelease;
        r.key = h.key;
        out.push_back({node.conn, {r, ""}});
      } else if (h.opcode == Opcode::kBarrier && rendezvous_done_) {
        auto& members = barriers_[h.key];
        members.insert(&c);
        // All nodes of the job, including any away for a rejoin: they are part of the barrier.
        size_t expected = static_cast<size_t>(options_.num_workers) + ((h.flags & 1) ? options_.num_servers : 0);
        if (members.size() == expected) {
          for (auto* m : members) {
            Header r;
            r.opcode = Opcode::kBarrierRelease;
            r.key = h.key;
            out.push_back({nodes_[m].conn, {r, ""}});
          }
          barriers_.erase(h.key);
          released_barriers_.insert(h.key);
        }
      } else if (h.opcode == Opcode::kFinish && !node.finished && !job_over_ && h.arg != 0) {
        protocol::NodeInfo info = node.info;
        node.finished = true;  // it leaves on its own; its disconnect is not a second failure
        FailJobLocked(Aborted(fmt::format("{} failed: {}", protocol::Describe(info), payload)), nullptr, &out);
      } else if (h.opcode == Opcode::kFinish && !node.finished && !job_over_) {
        node.finished = true;
        if (node.info.role == "worker" && ++finished_workers_ == options_.num_workers) {
          BYTEPS_LOG(Info, "all {} workers finished; terminating the job", options_.num_workers);
          TerminateLocked(0, &out);
        }
      }
    }
  }
  if (refuse) c.Close(ProtocolError("frame before registration"));
  Flush(&out);
}

void Scheduler::HandleRegister(transport::Connection& c, const std::string& payload, Outbox* out) {
  auto conn = c.shared_from_this();
  auto reject = [&](const std::string& why) {
    BYTEPS_LOG(Error, "refused registration from {}: {}", c.peer_name(), why);
    protocol::RegisterReply r;
    r.error = why;
    Header h;
    h.opcode = Opcode::kRegisterReply;
    out->push_back({conn, {h, protocol::Encode(r)}});
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
    reject(fmt::format("{} at {} believes the job has DMLC_NUM_WORKER={} DMLC_NUM_SERVER={}, but the "
                       "scheduler was started with {} and {}",
                       r.role, r.host, r.num_workers, r.num_servers, options_.num_workers,
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
      reject(fmt::format("{} rank {} is already taken by pid {} at {} (duplicate DMLC_WORKER_ID?)",
                         r.role, r.requested_rank, n.req.pid, n.req.host));
      return;
    }
  }
  int limit = r.role == "worker" ? options_.num_workers : options_.num_servers;
  if (r.requested_rank >= limit) {
    reject(fmt::format("requested {} rank {} is out of range for a job of {}", r.role, r.requested_rank, limit));
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
  n.last_seen = Clock::now();
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
  node->last_seen = Clock::now();
  nodes_[&c] = *node;
  c.set_peer_name(protocol::Describe(node->info));
  reply.rank = node->info.rank;
  reply.nodes = table_;
  BYTEPS_LOG(Warning, "{} rejoined after its connection dropped", protocol::Describe(node->info));
  out->push_back({conn, {h, protocol::Encode(reply)}});
}

void Scheduler::MaybeCompleteRendezvousLocked(Outbox* out) {
  if (nodes_.size() != static_cast<size_t>(options_.num_workers + options_.num_servers)) return;
  // Ranks: requested ones first, then the free ranks in registration order (map order is by
  // pointer, so sort by arrival time for determinism).
  std::vector<Node*> order;
  for (auto& [_, n] : nodes_) order.push_back(&n);
  std::stable_sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->last_seen < b->last_seen; });
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
  protocol::RegisterReply reply;
  for (const char* role : {"worker", "server"})
    for (int rank = 0;; ++rank) {
      auto it = std::find_if(order.begin(), order.end(),
                             [&](Node* n) { return n->info.role == role && n->info.rank == rank; });
      if (it == order.end()) break;
      reply.nodes.push_back((*it)->info);
    }
  for (Node* n : order) {
    n->conn->set_peer_name(protocol::Describe(n->info));
    reply.rank = n->info.rank;
    Header h;
    h.opcode = Opcode::kRegisterReply;
    out->push_back({n->conn, {h, protocol::Encode(reply)}});
  }
  table_ = reply.nodes;
  rendezvous_done_ = true;
  // Nodes start heart-beating once the rendezvous is complete: the silence clock starts now, not
  // at registration (an early node may wait far longer than PS_HEARTBEAT_TIMEOUT for the last).
  const auto now = Clock::now();
  for (Node* n : order) n->last_seen = now;
  lost_.clear();  // nodes that left during registration and were replaced
  BYTEPS_LOG(Info, "rendezvous complete: {} workers, {} servers", options_.num_workers, options_.num_servers);
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

void Scheduler::FailJobLocked(const Status& reason, const protocol::NodeInfo* dead, Outbox* out) {
  if (job_over_) return;
  BYTEPS_LOG(Error, "job failed: {}", reason.message());
  for (auto& [ptr, n] : nodes_) {
    if (dead) {
      protocol::NodeFailedNotice notice{*dead, reason.message()};
      Header h;
      h.opcode = Opcode::kNodeFailed;
      out->push_back({n.conn, {h, protocol::Encode(notice)}});
    } else {
      out->push_back({n.conn, {protocol::ErrorHeader(Opcode::kJobError, reason.code()), reason.message()}});
    }
  }
  result_ = reason;
  TerminateLocked(1, out);
}

void Scheduler::TerminateLocked(uint64_t code, Outbox* out) {
  for (auto& [ptr, n] : nodes_) {
    Header h;
    h.opcode = Opcode::kTerminate;
    h.arg = code;
    out->push_back({n.conn, {h, ""}});
  }
  job_over_ = true;
  cv_.notify_all();
}

void Scheduler::OnClose(transport::Connection& c, const Status& reason) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(&c);
    if (it == nodes_.end()) return;  // never registered (a refused peer is logged by the transport)
    Node node = it->second;
    nodes_.erase(it);
    cv_.notify_all();
    for (auto& [_, members] : barriers_) members.erase(&c);
    if (job_over_) return;
    // A dropped connection is not yet a death: the node may rejoin (after the rendezvous) or
    // register again (before it: its slot is free meanwhile); the Watchdog enforces the deadline.
    const char* when = rendezvous_done_ ? "" : " before the job started";
    if (options_.reconnect_timeout_s > 0 || node.finished) {
      BYTEPS_LOG(Warning, "lost the connection to {}{}: {}; it has {:g} s to {} (BYTEPS_RECONNECT_TIMEOUT)",
                 protocol::Describe(node.info), when, reason.message(), options_.reconnect_timeout_s,
                 rendezvous_done_ ? "rejoin" : "register again");
      lost_.push_back({node, reason.message(), Deadline(options_.reconnect_timeout_s)});
      return;
    }
    FailJobLocked(Unavailable(fmt::format("{} died{}: connection lost ({})", protocol::Describe(node.info), when,
                                          reason.message())),
                  &node.info, &out);
  }
  Flush(&out);
}

void Scheduler::Watchdog() {
  pthread_setname_np(pthread_self(), "sched-watchdog");
  std::unique_lock<std::mutex> lock(mu_);
  auto start_deadline = start_time_ + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(options_.start_timeout_s));
  while (!job_over_) {
    auto next = Clock::now() + std::chrono::milliseconds(250);
    if (!rendezvous_done_) next = std::min(next, start_deadline);
    cv_.wait_until(lock, next);
    if (job_over_) break;
    Outbox out;
    auto now = Clock::now();
    if (!rendezvous_done_ && now >= start_deadline) {
      FailJobLocked(DeadlineExceeded(fmt::format("rendezvous did not complete within {:.0f} s "
                                                 "(BYTEPS_START_TIMEOUT): {}",
                                                 options_.start_timeout_s, MissingLocked())),
                    nullptr, &out);
    } else if (!lost_.empty() && now >= std::min_element(lost_.begin(), lost_.end(), [](auto& a, auto& b) {
                                            return a.deadline < b.deadline;
                                          })->deadline) {
      auto it = std::min_element(lost_.begin(), lost_.end(), [](auto& a, auto& b) { return a.deadline < b.deadline; });
      protocol::NodeInfo info = it->node.info;
      bool finished = it->node.finished;
      std::string why = it->reason;
      lost_.erase(it);
      if (!finished)  // a finished worker that went away early is no failure
        FailJobLocked(Unavailable(fmt::format("{} died{}: connection lost ({}) and not re-established within {:g} s "
                                              "(BYTEPS_RECONNECT_TIMEOUT)",
                                              protocol::Describe(info), rendezvous_done_ ? "" : " before the job started",
                                              why, options_.reconnect_timeout_s)),
                      &info, &out);
    } else if (rendezvous_done_ && options_.heartbeat_timeout_s > 0) {
      for (auto& [ptr, n] : nodes_) {
        double silent = std::chrono::duration<double>(now - n.last_seen).count();
        if (!n.finished && silent > options_.heartbeat_timeout_s) {
          protocol::NodeInfo info = n.info;
          FailJobLocked(Unavailable(fmt::format("{} died: no heartbeat for {:.1f} s (PS_HEARTBEAT_TIMEOUT)",
                                                protocol::Describe(info), silent)),
                        &info, &out);
          break;
        }
      }
    }
    if (!out.empty()) {
      lock.unlock();
      Flush(&out);
      lock.lock();
    }
  }
}

Status Scheduler::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return job_over_; });
  return result_;
}

void Scheduler::WaitDisconnect(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return nodes_.empty(); });
}

void Scheduler::Stop(const Status& reason) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job_over_) FailJobLocked(reason, nullptr, &out);
  }
  Flush(&out);
}

}  // namespace byteps::cluster
