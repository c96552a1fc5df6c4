#include "cluster/name_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "common/logging.h"

namespace byteps::cluster {

using protocol::Header;
using protocol::Opcode;

namespace {
using SteadyClock = std::chrono::steady_clock;
double SecondsLeft(SteadyClock::time_point deadline) {
  return std::chrono::duration<double>(deadline - SteadyClock::now()).count();
}
}  // namespace

NameClient::NameClient(transport::Transport* transport, const NameClientOptions& options)
    : transport_(transport), options_(options) {}

NameClient::~NameClient() {
  std::shared_ptr<transport::Connection> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    c = std::move(conn_);
  }
  cv_.notify_all();
  if (c) c->Close(Aborted("name client closed"));
}

void NameClient::Abort(const Status& why) {
  // Only wakes the waiters: closing the connection here could wait for the transport's I/O thread,
  // which may itself be delivering the job's failure to the caller (who holds its own lock). The
  // connection closes with the client.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    failure_ = why.ok() ? Aborted("the job failed") : why;
  }
  cv_.notify_all();
}

StatusOr<std::shared_ptr<transport::Connection>> NameClient::OpenConnection(double timeout_s) {
  std::lock_guard<std::mutex> connecting(connect_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return Aborted("byteps is shutting down");
    if (!failure_.ok()) return failure_;
    if (conn_ && !conn_->closed()) return conn_;
  }
  // Short attempts (Resolve tries again until its deadline), so that an Abort is seen within one.
  auto c = transport_->Connect(options_.root_uri, options_.root_port, this, std::clamp(timeout_s, 0.1, 1.0));
  if (!c.ok()) {
    return Unavailable(fmt::format("cannot reach the scheduler's name service at {}:{}: {}", options_.root_uri,
                                   options_.root_port, c.status().message()));
  }
  c.value()->set_peer_name(fmt::format("scheduler ({}:{})", options_.root_uri, options_.root_port));
  std::lock_guard<std::mutex> lock(mu_);
  conn_ = c.value();
  return conn_;
}

StatusOr<protocol::NamePlan> NameClient::Resolve(const protocol::NameRequest& r) {
  BYTEPS_ASSIGN_OR_RETURN(
      protocol::NameReply reply,
      Ask(r, fmt::format("the name service's plan of tensor '{}' (incarnation {}, generation {})", r.name,
                         r.incarnation, r.generation)));
  return std::move(reply.plan);
}

StatusOr<protocol::NameReply> NameClient::ReportServerProbe(const std::vector<double>& seconds, size_t bytes) {
  protocol::NameRequest r;
  r.probe_seconds = seconds;
  r.probe_bytes = bytes;
  return Ask(r, "the scheduler's placement after the start-up probe of the servers");
}

StatusOr<protocol::NameReply> NameClient::Ask(const protocol::NameRequest& r, const std::string& what) {
  const auto deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                                 std::chrono::duration<double>(options_.timeout_s));
  const std::string payload = protocol::Encode(r);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    pending_[id];
  }
  Status last;
  for (;;) {
    auto c = OpenConnection(SecondsLeft(deadline));
    if (c.ok()) {
      Header h;
      h.opcode = Opcode::kNameRequest;
      h.request_id = id;
      last = (*c)->SendCopy(h, payload);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, deadline,
                     [&] { return pending_[id].has_value() || conn_ != *c || closing_ || !failure_.ok(); });
      if (pending_[id]) {
        protocol::NameReply reply = std::move(*pending_[id]);
        pending_.erase(id);
        if (reply.error.empty()) return reply;
        const auto code = static_cast<StatusCode>(reply.error_code);
        return Status(code == StatusCode::kOk ? StatusCode::kInternal : code, reply.error).WithContext(what);
      }
      if (closing_) {
        pending_.erase(id);
        return Aborted(fmt::format("{}: byteps is shutting down", what));
      }
      if (!failure_.ok()) {
        pending_.erase(id);
        return failure_.WithContext(what);
      }
      if (conn_ != *c && !last_close_.ok()) last = last_close_;
    } else {
      last = c.status();
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok()) {
        pending_.erase(id);
        return failure_.WithContext(what);
      }
    }
    if (SecondsLeft(deadline) <= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.erase(id);
      return DeadlineExceeded(fmt::format("{} did not arrive within BYTEPS_TIMEOUT={:.0f} s{}", what,
                                          options_.timeout_s, last.ok() ? "" : "; last: " + last.message()));
    }
    BYTEPS_LOG(Warning, "{}: the connection to the scheduler dropped ({}); asking again", what, last.message());
    std::unique_lock<std::mutex> lock(mu_);  // a brief pause before reconnecting
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return closing_; });
  }
}

StatusOr<transport::RecvBuffer> NameClient::OnHeader(transport::Connection& c, const Header& h) {
  if (h.opcode != Opcode::kNameReply || h.payload_len > (16u << 20)) {
    return ProtocolError(fmt::format("{} sent {} ({} bytes) on the name service's connection", c.peer_name(),
                                     protocol::OpcodeName(h.opcode), h.payload_len));
  }
  return transport::RecvBuffer{};
}

void NameClient::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  auto reply = protocol::DecodeNameReply(std::string(reinterpret_cast<const char*>(b.data), b.size));
  if (!reply.ok()) {
    c.Close(reply.status());  // the waiters ask again on a new connection
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(h.request_id);
    if (it == pending_.end() || it->second) return;  // a repeat's answer, or one given up on
    it->second = std::move(reply.value());
  }
  cv_.notify_all();
}

void NameClient::OnClose(transport::Connection& c, const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (conn_.get() != &c) return;
    conn_.reset();
    last_close_ = reason;
  }
  cv_.notify_all();
}

}  // namespace byteps::cluster
