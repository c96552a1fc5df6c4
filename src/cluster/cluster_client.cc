#include "cluster/cluster_client.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "cluster/clock_offset.h"
#include "common/logging.h"
#include "protocol/error_frame.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;

namespace {
constexpr double kVerdictGraceS = 5.0;
// Registrations that end in a ProtocolError before Join gives up (a damaged frame is worth
// another try; a port that never speaks byteps is not).
constexpr int kRegisterAttempts = 3;

std::string NewInstanceToken() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}
}  // namespace

ClusterClient::ClusterClient(transport::Transport& transport, const ClientOptions& options,
                             FailureCallback on_failure)
    : transport_(&transport),
      options_(options),
      clock_(options.clock != nullptr ? *options.clock : Clock::Steady()),
      on_failure_(std::move(on_failure)),
      instance_(NewInstanceToken()),
      last_heard_(clock_.Now()) {}

protocol::RegisterRequest ClusterClient::MakeRegisterRequest(bool rejoin) const {
  protocol::RegisterRequest req;
  req.role = options_.role;
  req.requested_rank = rejoin ? rank_ : options_.requested_rank;
  req.host = options_.host;
  req.port = options_.port;
  req.pid = static_cast<int>(getpid());
  req.num_workers = options_.num_workers;
  req.num_servers = options_.num_servers;
  req.rejoin = rejoin;
  req.instance = instance_;
  req.nic_rate = options_.nic_rate;
  return req;
}

std::shared_ptr<transport::Connection> ClusterClient::Conn() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conn_;
}

StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Join(transport::Transport& transport,
                                                              const ClientOptions& options,
                                                              FailureCallback on_failure) {
  std::unique_ptr<ClusterClient> c(new ClusterClient(transport, options, std::move(on_failure)));
  auto t0 = std::chrono::steady_clock::now();
  ClusterClient* raw = c.get();
  Status st;
  int refused = 0;  // connections closed for bytes that are no byteps frames (ProtocolError)
  for (;;) {
    double connect_left = options.start_timeout_s -
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto conn = transport.Connect(options.root_uri, options.root_port, c.get(), std::max(connect_left, 0.1));
    if (!conn.ok()) {
      return Unavailable(fmt::format("cannot reach the scheduler at {}:{} (DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT): {}",
                                     options.root_uri, options.root_port, conn.status().message()));
    }
    conn.value()->set_peer_name(fmt::format("scheduler ({}:{})", options.root_uri, options.root_port));
    {
      std::lock_guard<std::mutex> lock(c->mu_);
      c->conn_ = conn.value();
      c->join_lost_ = Status::Ok();
      if (c->early_close_.first.lock() == c->conn_) {  // it closed before it became conn_
        const Status& reason = c->early_close_.second;
        c->join_lost_ = transport::IsRefusal(reason) ? reason : Unavailable(reason.message());
      }
      c->early_close_ = {};
      c->register_sent_us_ = SystemNowUs();
    }
    Header h;
    h.opcode = Opcode::kRegister;
    (void)conn.value()->SendCopy(h, protocol::Encode(c->MakeRegisterRequest(false)));
    // The scheduler enforces BYTEPS_START_TIMEOUT and then tells everyone what is missing; wait a
    // little longer than that so its verdict (which names the missing nodes) arrives first.
    double left = options.start_timeout_s + kVerdictGraceS -
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st = c->WaitFor([raw] { return raw->registered_ || !raw->refusal_.empty() || !raw->join_lost_.ok(); },
                    std::max(left, 0.1), "registration with the scheduler");
    Status lost;
    {
      std::lock_guard<std::mutex> lock(c->mu_);
      if (!c->registered_ && c->refusal_.empty()) lost = c->join_lost_;
    }
    if (!st.ok() || lost.ok()) break;
    // The connection dropped before the scheduler answered. A setting that differs from the
    // job's (no secret here, another wire version) fails at once: no retry can fix it. Bytes
    // the scheduler's port sent that are no byteps frames fail after a few tries (a damaged frame
    // is worth another try; another service on that port is not). Anything else (a reset on the
    // way) registers again, within the start deadline.
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string where = fmt::format("registration with the scheduler at {}:{} (DMLC_PS_ROOT_URI/"
                                          "DMLC_PS_ROOT_PORT)", options.root_uri, options.root_port);
    if (lost.code() == StatusCode::kInvalidArgument) return lost.WithContext(where);
    if (lost.code() == StatusCode::kProtocol && ++refused >= kRegisterAttempts) {
      return lost.WithContext(fmt::format("{} failed {} times", where, refused));
    }
    if (elapsed >= options.start_timeout_s) {
      return DeadlineExceeded(fmt::format("{} did not complete within BYTEPS_START_TIMEOUT={:.0f} s; the last "
                                          "connection dropped: {}",
                                          where, options.start_timeout_s, lost.message()));
    }
    BYTEPS_LOG(Warning, "the connection to the scheduler dropped during registration ({}); registering again",
               lost.message());
    std::unique_lock<std::mutex> lock(c->mu_);  // brief pause before registering again
    c->cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return c->stopping_; });
  }
  bool told;  // the scheduler's verdict (e.g. its own start timeout, naming what is missing) arrived
  {
    std::lock_guard<std::mutex> lock(c->mu_);
    told = !c->failure_.ok();
  }
  if (st.code() == StatusCode::kDeadlineExceeded && !told) {
    return DeadlineExceeded(fmt::format("the scheduler at {}:{} did not complete the rendezvous within "
                                        "BYTEPS_START_TIMEOUT={:.0f} s (and gave no reason)",
                                        options.root_uri, options.root_port, options.start_timeout_s));
  }
  if (!st.ok()) return st;
  {
    std::lock_guard<std::mutex> lock(c->mu_);
    if (!c->refusal_.empty()) return Aborted("the scheduler refused this " + options.role + ": " + c->refusal_);
  }
  if (options.heartbeat_interval_s > 0) {
    c->heartbeat_ = std::thread([raw] { raw->HeartbeatLoop(); });
  }
  return c;
}

ClusterClient::~ClusterClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (rejoin_.joinable()) rejoin_.join();
  if (auto c = Conn()) c->Close(Aborted("cluster client closed"));
}

std::vector<protocol::NodeInfo> ClusterClient::NodesOf(const std::string& role) const {
  std::vector<protocol::NodeInfo> out;
  for (const auto& n : nodes_)
    if (n.role == role) out.push_back(n);
  return out;
}

Status ClusterClient::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

Status ClusterClient::WaitFor(const std::function<bool()>& done, double timeout_s, const std::string& what) {
  std::unique_lock<std::mutex> lock(mu_);
  bool ok = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                         [&] { return done() || !failure_.ok(); });
  if (done()) return Status::Ok();
  if (!failure_.ok()) return failure_.WithContext(what);
  if (!ok) return DeadlineExceeded(fmt::format("{} did not complete within {:.0f} s", what, timeout_s));
  return Status::Ok();
}

Header ClusterClient::BarrierHeader(uint64_t id, bool all_nodes) {
  Header h;
  h.opcode = Opcode::kBarrier;
  h.key = id;
  h.flags = all_nodes ? 1 : 0;
  return h;
}

Header ClusterClient::FinishHeader(uint32_t arg) {
  Header h;
  h.opcode = Opcode::kFinish;
  h.arg = arg;
  return h;
}

Status ClusterClient::Barrier(uint64_t id, bool all_nodes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_barriers_[id] = all_nodes;
  }
  (void)Conn()->SendCopy(BarrierHeader(id, all_nodes), "");  // if the connection dropped, the rejoin asks again
  return WaitFor([&] { return released_barriers_.count(id) > 0; }, options_.op_timeout_s,
                 fmt::format("barrier {}", id));
}

Status ClusterClient::Finish(const Status& local_failure) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
  }
  Header h = FinishHeader(local_failure.ok() ? 0 : 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    finish_sent_ = true;
    finish_arg_ = h.arg;
    finish_message_ = local_failure.message();
  }
  (void)Conn()->SendCopy(h, local_failure.message());  // if the connection dropped, the rejoin repeats it
  if (!local_failure.ok()) return local_failure;
  BYTEPS_RETURN_IF_ERROR(WaitFor([&] { return terminated_; }, options_.op_timeout_s,
                                 "shutdown (waiting for the other workers to finish)"));
  std::lock_guard<std::mutex> lock(mu_);
  return terminate_code_ == 0 ? Status::Ok() : failure_;
}

Status ClusterClient::WaitTerminate() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return terminated_ || !failure_.ok(); });
  if (terminated_ && terminate_code_ == 0) return Status::Ok();
  return failure_.ok() ? Aborted("the job was terminated after a failure") : failure_;
}

void ClusterClient::Fail(const Status& st) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    failure_ = st;
  }
  cv_.notify_all();
  BYTEPS_LOG(Error, "{}", st.message());
  if (on_failure_) on_failure_(st);
}

StatusOr<transport::RecvBuffer> ClusterClient::OnHeader(transport::Connection& c, const Header& h) {
  if (h.payload_len > (16u << 20)) {
    return ProtocolError(fmt::format("oversized {} frame from the scheduler", protocol::OpcodeName(h.opcode)));
  }
  return transport::RecvBuffer{};
}

void ClusterClient::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  const int64_t received_us = SystemNowUs();  // first: the clock offset's end of the exchange
  std::string payload(reinterpret_cast<const char*>(b.data), b.size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_heard_ = clock_.Now();
  }
  switch (h.opcode) {
    case Opcode::kHeartbeat:
      break;  // the scheduler's echo: it can hear us and we can hear it
    case Opcode::kRegisterReply: {
      auto r = protocol::DecodeRegisterReply(payload);
      std::lock_guard<std::mutex> lock(mu_);
      if (&c != conn_.get()) break;  // an earlier attempt's connection: its answer is stale
      if (!r.ok()) {
        refusal_ = r.status().message();
      } else if (!r->error.empty()) {
        refusal_ = r->error;
      } else if (rejoining_) {
        rejoined_ = true;  // same rank and table as before
      } else {
        rank_ = r->rank;
        nodes_ = r->nodes;
        shares_ = r->shares;
        placement_ = r->placement;
        job_id_ = r->job;
        if (r->clock_us != 0) {
          clock_offset_us_ = ClockOffsetUs(register_sent_us_, received_us, r->clock_us, r->held_us);
        }
        registered_ = true;
      }
      cv_.notify_all();
      break;
    }
    case Opcode::kBarrierRelease: {
      std::lock_guard<std::mutex> lock(mu_);
      released_barriers_.insert(h.key);
      pending_barriers_.erase(h.key);
      cv_.notify_all();
      break;
    }
    case Opcode::kNodeFailed: {
      auto n = protocol::DecodeNodeFailedNotice(payload);
      Fail(n.ok() ? Unavailable(n->reason) : n.status());
      break;
    }
    case Opcode::kJobError:
      Fail(protocol::StatusFromErrorFrame(h, fmt::format("the scheduler ended the job: {}", payload)));
      break;
    case Opcode::kTerminate: {
      if (h.arg != 0) Fail(Aborted("the scheduler terminated the job after a failure"));
      std::lock_guard<std::mutex> lock(mu_);
      terminated_ = true;
      if (terminate_code_ == 0) terminate_code_ = h.arg;  // a failure is never undone
      cv_.notify_all();
      break;
    }
    default:
      BYTEPS_LOG(Warning, "unexpected {} from the scheduler; ignored", protocol::OpcodeName(h.opcode));
  }
}

}  // namespace byteps::cluster
