#include "worker/server_links/server_links.h"

#include <atomic>

#include <fmt/format.h>

#include <algorithm>

#include "common/logging.h"
#include "protocol/error_frame.h"
#include "protocol/key_layout.h"

namespace byteps::worker::server_links {

using protocol::Header;
using protocol::Opcode;

ServerLinks::ServerLinks(transport::Transport* transport, std::vector<protocol::NodeInfo> servers,
                         const LinkOptions& options, std::function<void(const Status&)> on_failure,
                         std::function<void(const Status&)> on_job_failure)
    : transport_(transport),
      options_(options),
      on_failure_(std::move(on_failure)),
      on_job_failure_(std::move(on_job_failure)),
      per_server_(std::max(1, options.connections_per_server)) {
  for (auto& node : servers) links_.push_back(Link{std::move(node), {}, {}, {}});
  metrics::Registry& m = metrics::Global();
  for (size_t s = 0; s < links_.size(); ++s) {
    const std::string label = metrics::Label("server", std::to_string(s));
    metrics_.push_back({m.AddCounter("byteps_worker_pushed_bytes_total", "payload bytes sent to each server", label),
                        m.AddCounter("byteps_worker_pulled_bytes_total", "payload bytes received from each server",
                                     label),
                        m.AddCounter("byteps_worker_reconnects_total", "connections to each server re-established",
                                     label)});
  }
}

ServerLinks::~ServerLinks() { Shutdown(); }

Status ServerLinks::OpenUpTo(int per_server) {
  for (size_t s = 0; s < links_.size(); ++s) {
    int closed_at_once = 0;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (static_cast<int>(links_[s].conns.size()) >= per_server) break;
      }
      BYTEPS_ASSIGN_OR_RETURN(auto c, OpenAtStart(static_cast<int>(s)));
      const auto now = Clock::now();
      std::lock_guard<std::mutex> lock(mu_);
      if (c->closed()) {
        // Closed between its Hello and here (the server refused a duplicated handshake frame):
        // its OnClose found no installed connection and let it go, so installing it would leave
        // a dead link nobody reconnects (the closed flag is set before OnClose looks).
        if (++closed_at_once >= kStartAttempts) {
          return Unavailable(fmt::format("{} closed {} new connections at once",
                                         protocol::Describe(links_[s].node), closed_at_once));
        }
        BYTEPS_LOG(Warning, "{} closed the new connection at once; connecting again",
                   protocol::Describe(links_[s].node));
        continue;
      }
      links_[s].conns.push_back(c);
      links_[s].connected_at.push_back(now);
      links_[s].down_since.push_back(now);
    }
  }
  return Status::Ok();
}

Status ServerLinks::Connect() {
  BYTEPS_RETURN_IF_ERROR(OpenUpTo(per_server_.load()));
  reconnect_thread_ = std::thread([this] { ReconnectLoop(); });
  connections_gauge_->Set(per_server_.load());
  BYTEPS_LOG(Info, "connected to {} servers ({} connections each)", links_.size(), per_server_.load());
  return Status::Ok();
}

Status ServerLinks::Widen(int per_server) {
  if (per_server <= per_server_.load()) return Status::Ok();
  BYTEPS_RETURN_IF_ERROR(OpenUpTo(per_server));
  per_server_.store(per_server, std::memory_order_release);
  connections_gauge_->Set(per_server);
  BYTEPS_LOG(Info, "now {} connections to each of {} servers", per_server, links_.size());
  return Status::Ok();
}

StatusOr<std::shared_ptr<transport::Connection>> ServerLinks::OpenAtStart(int server) {
  // A connection can be closed by the server right after its handshake (e.g. a duplicated
  // handshake frame from a broken middlebox: the server refuses the second challenge), so that
  // the Hello finds it closed. That is a network problem like any drop: connect again, within the
  // start deadline, as the reconnect does later in the job.
  const auto deadline = Clock::now() + std::chrono::duration<double>(options_.connect_timeout_s);
  for (int attempt = 1;; ++attempt) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    auto c = Open(server, std::max(0.0, left));
    if (c.ok() || c.status().code() != StatusCode::kUnavailable || attempt >= kStartAttempts ||
        Clock::now() >= deadline) {
      return c;
    }
    BYTEPS_LOG(Warning, "{} (attempt {} of {}); connecting again", c.status().message(), attempt, kStartAttempts);
  }
}

StatusOr<std::shared_ptr<transport::Connection>> ServerLinks::Open(int server, double timeout_s) {
  const protocol::NodeInfo& node = links_[server].node;  // immutable
  auto conn = transport_->Connect(node.host, node.port, this, timeout_s);
  if (!conn.ok()) return conn.status().WithContext(fmt::format("connecting to {}", protocol::Describe(node)));
  auto c = conn.value();
  c->tag = server;
  c->set_peer_name(protocol::Describe(node));
  Header h;
  h.opcode = Opcode::kHello;
  h.sender = static_cast<uint32_t>(options_.host_rank);
  // Which connection this is, counting every one this process opened: a server lets a resend
  // re-point a waiting reply only at a newer connection (sum_engine.h, PushTask::generation).
  static std::atomic<uint64_t> opened{0};
  h.request_id = ++opened;
  BYTEPS_RETURN_IF_ERROR(c->SendCopy(h, ""));
  return c;
}

void ServerLinks::SetLeaving(bool tell_servers) {
  std::vector<std::shared_ptr<transport::Connection>> first;  // one connection to each server
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leaving_) return;
    leaving_ = true;
    for (const Link& link : links_)
      if (tell_servers && !link.conns.empty()) first.push_back(link.conns.front());
  }
  Header h;
  h.opcode = Opcode::kLeave;
  h.sender = static_cast<uint32_t>(options_.host_rank);
  // A connection that is down cannot carry it: that server then learns of the end from the
  // scheduler, as before.
  for (auto& c : first) (void)c->SendCopy(h, "");
}

void ServerLinks::Fail(const Status& failure) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = failure;
  }
  cv_.notify_all();
}

void ServerLinks::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
  }
  cv_.notify_all();
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
}

bool ServerLinks::Ending() const { return shut_down_ || !failure_.ok(); }

size_t ServerLinks::ConnIndex(int server, uint64_t key) const {
  // The count only changes while nothing is in flight (Widen).
  return protocol::PlaceKey(key, static_cast<size_t>(per_server_.load(std::memory_order_acquire)));
}

std::shared_ptr<transport::Connection> ServerLinks::ConnFor(int server, uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& conns = links_[server].conns;
  size_t i = ConnIndex(server, key);
  return i < conns.size() ? conns[i] : nullptr;
}

Status ServerLinks::Send(int server, const OutFrame& f) {
  if (server < 0 || server >= static_cast<int>(links_.size())) {
    return Internal(fmt::format("no server {} (the job has {})", server, links_.size()));
  }
  auto c = ConnFor(server, f.header.key);
  if (!c) return Unavailable(fmt::format("not connected to {}", protocol::Describe(links_[server].node)));
  if (std::find(corked_.begin(), corked_.end(), c) == corked_.end()) {
    c->Cork();
    corked_.push_back(c);
  }
  metrics_[server].pushed->Add(f.data == nullptr ? f.owned.size() : f.len);
  if (f.data == nullptr) return c->SendCopy(f.header, f.owned);
  std::vector<iovec> iov;
  if (f.len > 0) iov.push_back({const_cast<uint8_t*>(f.data), f.len});
  return c->Send(f.header, iov, nullptr);
}

void ServerLinks::Flush() {
  for (auto& c : corked_) c->Uncork();
  corked_.clear();
}

StatusOr<transport::RecvBuffer> ServerLinks::OnHeader(transport::Connection& c, const Header& h) {
  if (h.opcode != Opcode::kError && h.opcode != Opcode::kPushPullReply) {
    return ProtocolError(fmt::format("unexpected {} from {}", protocol::OpcodeName(h.opcode), c.peer_name()));
  }
  return client_->OnReplyHeader(c, h);
}

void ServerLinks::OnFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  if (h.opcode == Opcode::kError && (h.flags & protocol::kFlagJobFatal) && on_job_failure_) {
    // Before the stage completes the request: by the time the caller sees this error, the engine
    // has failed and told the scheduler, so a shutdown() right after it cannot leave "cleanly".
    on_job_failure_(protocol::StatusFromErrorFrame(h, std::string(reinterpret_cast<const char*>(b.data), b.size)));
  }
  const int server = static_cast<int>(c.tag);
  if (server >= 0 && server < static_cast<int>(metrics_.size())) metrics_[server].pulled->Add(b.size);
  client_->OnReplyFrame(c, h, std::move(b));
}

void ServerLinks::OnClose(transport::Connection& c, const Status& reason) {
  const int server = static_cast<int>(c.tag);
  if (client_) client_->OnConnectionLost(c);
  bool shutting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting = shut_down_ || (leaving_ && (!client_ || client_->idle()));
  }
  if (shutting || server < 0 || server >= static_cast<int>(links_.size())) {
    if (client_) client_->FailServer(server, Aborted("byteps was shut down"));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.ok()) return;  // the job is already failing; nothing to save
  Link& link = links_[server];
  auto it = std::find_if(link.conns.begin(), link.conns.end(), [&](const auto& p) { return p.get() == &c; });
  if (it == link.conns.end()) return;  // an older connection, already replaced
  const size_t index = static_cast<size_t>(it - link.conns.begin());
  // A new episode of drops unless the connection dropped again within the reconnect window.
  const auto now = Clock::now();
  if (now - link.connected_at[index] > std::chrono::duration<double>(options_.reconnect_timeout_s)) {
    link.down_since[index] = now;
  }
  lost_.push_back({server, index, reason});
  cv_.notify_all();
}

}  // namespace byteps::worker::server_links
