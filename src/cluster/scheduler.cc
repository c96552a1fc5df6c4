#include "cluster/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "common/logging.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;

namespace {
constexpr uint64_t kMaxControlPayload = 1 << 20;  // control frames are small; refuse floods
}  // namespace

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Start(const SchedulerOptions& options) {
  transport::TransportOptions to = options.transport;
  to.name = "sched";
  return Start(options, transport::CreateTcpTransport(to));
}

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Start(const SchedulerOptions& options,
                                                      std::unique_ptr<transport::Transport> transport) {
  std::unique_ptr<Scheduler> s(new Scheduler(options, std::move(transport)));
  auto port = s->transport_->Listen(options.host, options.port, s.get());
  if (!port.ok()) return port.status();  // the caller names the role (byteps scheduler: ...)
  s->port_ = port.value();
  s->start_time_ = s->clock_.Now();
  s->watchdog_ = std::thread([p = s.get()] { p->Watchdog(); });
  BYTEPS_LOG(Info, "scheduler listening on {}:{} for {} workers and {} servers (job {})", options.host,
             s->port_, options.num_workers, options.num_servers, s->job_id_);
  return s;
}

Scheduler::Scheduler(const SchedulerOptions& options, std::unique_ptr<transport::Transport> transport)
    : options_(options),
      clock_(options.clock != nullptr ? *options.clock : Clock::Steady()),
      transport_(std::move(transport)),
      names_(options.num_servers),
      job_id_(NewJobId()) {}

std::string Scheduler::NewJobId() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
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
    case Opcode::kNameRequest:
    case Opcode::kTopRequest:
      return transport::RecvBuffer{};
    default:
      return ProtocolError(fmt::format("{} sent {} to the scheduler, which only takes control frames",
                                       c.peer_name(), protocol::OpcodeName(h.opcode)));
  }
}

void Scheduler::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  // Any connection: a host's non-roots ask for names without registering, and so does `byteps top`.
  if (h.opcode == Opcode::kNameRequest || h.opcode == Opcode::kTopRequest) {
    std::string reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reply = h.opcode == Opcode::kTopRequest
                  ? TopReplyLocked()
                  : HandleNameRequestLocked(std::string(reinterpret_cast<const char*>(b.data), b.size));
    }
    Header r;
    r.opcode = h.opcode == Opcode::kTopRequest ? Opcode::kTopReply : Opcode::kNameReply;
    r.request_id = h.request_id;
    (void)c.SendCopy(r, reply);
    return;
  }
  Outbox out;
  bool refuse = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string payload(reinterpret_cast<const char*>(b.data), b.size);
    if (h.opcode == Opcode::kRegister) {
      HandleRegister(c, payload, &out);
    } else if (auto it = nodes_.find(&c); it == nodes_.end()) {
      BYTEPS_LOG(Warning, "{} sent {} before registering; closing it", c.peer_name(),
                 protocol::OpcodeName(h.opcode));
      refuse = true;
    } else {
      Node& node = it->second;
      node.last_seen = clock_.Now();
      if (h.opcode == Opcode::kHeartbeat) {
        if (!payload.empty()) {  // a summary for `byteps top`
          node.previous = std::move(node.summary);
          node.summary = std::move(payload);
        }
        Header echo;  // lets the node notice a scheduler it can no longer hear (link down)
        echo.opcode = Opcode::kHeartbeat;
        out.push_back({node.conn, {echo, ""}});
      } else if (h.opcode == Opcode::kBarrier && rendezvous_done_) {
        HandleBarrierLocked(c, node, h, &out);
      } else if (h.opcode == Opcode::kFinish && !node.finished && !job_over_) {
        HandleFinishLocked(node, h, payload, &out);
      }
    }
  }
  if (refuse) c.Close(ProtocolError("frame before registration"));
  Flush(&out);
  if (h.opcode == Opcode::kRegister) {
    NoteRegistrationAnswered(std::string(reinterpret_cast<const char*>(b.data), b.size));
  }
}

void Scheduler::NoteRegistrationAnswered(const std::string& payload) {
  auto r = protocol::DecodeRegisterRequest(payload);
  if (!r.ok() || r->rejoin) return;  // a malformed one names nobody; a rejoin was counted before
  std::lock_guard<std::mutex> lock(mu_);
  answered_.insert(r->instance.empty() ? fmt::format("{} pid {} at {}", r->role, r->pid, r->host) : r->instance);
  largest_claimed_size_ = std::max(largest_claimed_size_, r->num_workers + r->num_servers);
  cv_.notify_all();
}

void Scheduler::HandleBarrierLocked(transport::Connection& c, const Node& node, const Header& h, Outbox* out) {
  auto release = [&](const std::shared_ptr<transport::Connection>& to) {
    Header r;
    r.opcode = Opcode::kBarrierRelease;
    r.key = h.key;
    out->push_back({to, {r, ""}});
  };
  if (released_barriers_.count(h.key)) {
    release(node.conn);  // asked again after a rejoin: the release it missed
    return;
  }
  auto& members = barriers_[h.key];
  members.insert(&c);
  // All nodes of the job, including any away for a rejoin: they are part of the barrier.
  size_t expected = static_cast<size_t>(options_.num_workers) + ((h.flags & 1) ? options_.num_servers : 0);
  if (members.size() != expected) return;
  for (auto* m : members) release(nodes_[m].conn);
  barriers_.erase(h.key);
  released_barriers_.insert(h.key);
}

void Scheduler::HandleFinishLocked(Node& node, const Header& h, const std::string& payload, Outbox* out) {
  node.finished = true;  // it leaves on its own; its disconnect is not a second failure
  if (h.arg != 0) {
    protocol::NodeInfo info = node.info;
    FailJobLocked(Aborted(fmt::format("{} failed: {}", protocol::Describe(info), payload)), nullptr, out);
    return;
  }
  if (node.info.role == "worker" && ++finished_workers_ == options_.num_workers) {
    BYTEPS_LOG(Info, "all {} workers finished; terminating the job", options_.num_workers);
    TerminateLocked(0, out);
  }
}

std::string Scheduler::HandleNameRequestLocked(const std::string& payload) {
  protocol::NameReply reply;
  auto req = protocol::DecodeNameRequest(payload);
  if (!req.ok()) {
    reply.error = req.status().message();
    reply.error_code = static_cast<uint64_t>(req.status().code());
    return protocol::Encode(reply);
  }
  if (!req->probe_seconds.empty()) {
    auto placed = PlaceFromProbeLocked(*req);
    if (placed.ok()) {
      reply.shares = placement_.shares;
      reply.placement = placement_.summary;
    } else {
      reply.error = placed.message();
      reply.error_code = static_cast<uint64_t>(placed.code());
    }
    return protocol::Encode(reply);
  }
  auto plan = names_.Plan(*req);
  if (plan.ok()) {
    reply.plan = std::move(plan.value());
  } else {
    reply.error = plan.status().message();
    reply.error_code = static_cast<uint64_t>(plan.status().code());
  }
  return protocol::Encode(reply);
}

Status Scheduler::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return job_over_; });
  return result_;
}

bool Scheduler::rendezvous_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rendezvous_done_;
}

void Scheduler::WaitEveryRegistrationAnswered(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    const int expected = std::max(options_.num_workers + options_.num_servers, largest_claimed_size_);
    return static_cast<int>(answered_.size()) >= expected;
  });
}

void Scheduler::WaitDisconnect(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return nodes_.empty(); });
}

}  // namespace byteps::cluster
