// UcxTransportImpl: Listen/Connect over the TCP backend, the UCX handshake on each new TCP
// connection and the link between a UCX connection and the TCP one beside it (ucx_transport.h).
// The handshake's payloads and the thread that closes TCP connections are in ucx_control.h.
#include "transport/ucx/ucx_transport.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/logging.h"
#include "transport/shm/shm_transport.h"
#include "transport/ucx/ucx_control.h"
#include "transport/ucx/ucx_connection.h"
#include "transport/ucx/ucx_worker.h"

namespace byteps::transport::ucx {

using protocol::Header;
using protocol::Opcode;

namespace {

class UcxTransportImpl;

// The handler of the TCP connections: per listener (`user` set) and for this process's own
// connects (`user` null). An accepted connection whose first frame is not a UcxHello is a plain
// TCP peer's: its frames go to `user` as they are.
class ControlHandler : public Handler {
 public:
  ControlHandler(UcxTransportImpl* t, Handler* user) : t_(t), user_(user) {}
  StatusOr<RecvBuffer> OnHeader(Connection& c, const Header& h) override;
  void OnFrame(Connection& c, const Header& h, RecvBuffer b) override;
  void OnClose(Connection& c, const Status& reason) override;

 private:
  UcxTransportImpl* t_;
  Handler* user_;
};

enum class Kind { kUnknown, kPlain, kHandshake, kLinked };

class UcxTransportImpl final : public Transport {
 public:
  explicit UcxTransportImpl(const TransportOptions& o)
      : options_(o), connector_(this, nullptr), reaper_(std::make_shared<ControlReaper>()) {
    TransportOptions c = o;
    c.name = o.name + "-tcp";
    c.io_threads = 1;
    control_ = CreateTcpTransport(c);
    auto ctx = UcxContext::Create();
    if (!ctx.ok()) {
      init_ = ctx.status();
      return;
    }
    context_ = *ctx;
    for (int i = 0; i < std::max(1, o.io_threads); ++i) {
      auto w = UcxWorker::Create(*ctx, fmt::format("{}-ucx{}", o.name, i));
      if (!w.ok()) {
        init_ = w.status();
        return;
      }
      workers_.push_back(*w);
    }
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) | rd());
  }
  ~UcxTransportImpl() override { Shutdown(); }

  StatusOr<int> Listen(const std::string& host, int port, Handler* handler) override {
    BYTEPS_RETURN_IF_ERROR(init_);
    auto h = std::make_unique<ControlHandler>(this, handler);
    BYTEPS_ASSIGN_OR_RETURN(int bound, control_->Listen(host, port, h.get()));
    std::lock_guard<std::mutex> lock(mu_);
    listeners_.push_back(std::move(h));
    return bound;
  }

  StatusOr<std::shared_ptr<Connection>> Connect(const std::string& host, int port, Handler* handler,
                                                double timeout_s) override {
    BYTEPS_RETURN_IF_ERROR(init_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    BYTEPS_ASSIGN_OR_RETURN(std::shared_ptr<Connection> control,
                            control_->Connect(host, port, &connector_, timeout_s));
    const std::string peer = fmt::format("{}:{} (UCX)", host, port);
    control->set_peer_name(peer);
    std::shared_ptr<UcxWorker> worker;
    uint64_t token;
    {
      std::lock_guard<std::mutex> lock(mu_);
      worker = workers_[next_worker_++ % workers_.size()];
      token = rng_();
    }
    auto conn = NewConnection(worker, handler, peer, token, shm::IsLocalHost(host));
    conn->Attach(control);
    worker->RunSync([&] { conn->Bind(worker->Register(conn)); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      kinds_[control.get()] = Kind::kHandshake;
      Pending& p = pending_[control.get()];
      if (control->closed()) {
        p.done = true;
        p.status = Unavailable(fmt::format("{} closed the connection", peer));
      }
    }
    Header h;
    h.opcode = Opcode::kUcxHello;
    Status st = control->SendCopy(h, EncodeOffer({conn->id(), token, worker->address()}));
    Pending got;
    {
      std::unique_lock<std::mutex> lock(mu_);
      Pending& p = pending_[control.get()];
      if (st.ok() && !cv_.wait_until(lock, deadline, [&] { return p.done; })) {
        st = DeadlineExceeded(fmt::format("{} did not answer the UCX handshake within {:.1f} s", peer, timeout_s));
      }
      if (st.ok()) st = p.status;
      got = p;
      pending_.erase(control.get());
    }
    if (st.ok()) {
      worker->RunSync([&] {
        auto ep = worker->CreateEndpoint(got.address, conn, conn->local_peer());
        if (!ep.ok()) {
          st = ep.status().WithContext(fmt::format("UCX to {}", peer));
          return;
        }
        conn->Start(*ep, got.remote_id);
      });
    }
    if (!st.ok()) {
      worker->RunSync([&] { worker->Unregister(conn->id()); });
      control->Close(st);
      return st;
    }
    Link(control.get(), conn);
    return std::shared_ptr<Connection>(conn);
  }

  StatusOr<int> ListenLocal(const std::string& name, Handler* handler) override {
    return control_->ListenLocal(name, handler);
  }
  StatusOr<std::shared_ptr<Connection>> ConnectLocal(const std::string& name, Handler* handler,
                                                     double timeout_s) override {
    return control_->ConnectLocal(name, handler, timeout_s);
  }

  void CancelConnects(const Status& why) override { control_->CancelConnects(why); }

  void Shutdown() override {
    control_->Shutdown();  // every TCP connection closes: the UCX ones beside them close too
    for (auto& w : workers_) w->Stop(Unavailable("the UCX transport shut down"));
    reaper_->Stop();
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }

  // --- The TCP connections' frames (ControlHandler, on the TCP loop) -------------------------
  Kind KindOf(Connection& c) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kinds_.find(&c);
    return it == kinds_.end() ? Kind::kUnknown : it->second;
  }
  void SetKind(Connection& c, Kind k) {
    std::lock_guard<std::mutex> lock(mu_);
    kinds_[&c] = k;
  }

  // An accepted connection offers UCX: answered from a worker's loop (the TCP loop never waits
  // for a UCX one).
  void OnHello(Connection& c, Handler* user, const std::string& payload) {
    auto control = c.shared_from_this();
    std::optional<UcxOffer> offer = ParseOffer(payload);
    if (!offer) {
      return Refuse(control, ProtocolError(fmt::format("a malformed UCX offer from {}", c.peer_name())));
    }
    std::shared_ptr<UcxWorker> worker;
    {
      std::lock_guard<std::mutex> lock(mu_);
      worker = workers_[next_worker_++ % workers_.size()];
    }
    const std::string peer = fmt::format("{} (UCX)", c.peer_name());
    const bool local = shm::IsLocalHost(c.peer_name().substr(0, c.peer_name().rfind(':')));
    worker->Post([this, worker, control, user, offer = std::move(*offer), peer, local] {
      auto conn = NewConnection(worker, user, peer, offer.token, local);
      conn->Attach(control);
      conn->Bind(worker->Register(conn));
      auto ep = worker->CreateEndpoint(offer.address, conn, local);
      if (!ep.ok()) {
        worker->Unregister(conn->id());
        return Refuse(control, ep.status());
      }
      conn->Start(*ep, offer.conn_id);
      Link(control.get(), conn);
      Header h;
      h.opcode = Opcode::kUcxReady;
      (void)control->SendCopy(h, EncodeAnswer({conn->id(), worker->address()}));
    });
  }

  void OnReady(Connection& c, const Header& h, const std::string& payload) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(&c);
    if (it == pending_.end() || it->second.done) return;
    Pending& p = it->second;
    if (h.arg != 0) {
      p.status = Unavailable(fmt::format("{} refused the UCX connection: {}", c.peer_name(), payload));
    } else if (std::optional<UcxAnswer> answer = ParseAnswer(payload); !answer) {
      p.status = ProtocolError(fmt::format("a malformed UCX answer from {}", c.peer_name()));
    } else {
      p.remote_id = answer->conn_id;
      p.address = std::move(answer->address);
    }
    p.done = true;
    cv_.notify_all();
  }

  void OnControlClose(Connection& c, Handler* user, const Status& reason) {
    std::shared_ptr<UcxConnection> conn;
    Kind kind;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto k = kinds_.find(&c);
      kind = k == kinds_.end() ? Kind::kUnknown : k->second;
      if (k != kinds_.end()) kinds_.erase(k);
      auto l = links_.find(&c);
      if (l != links_.end()) {
        conn = l->second;
        links_.erase(l);
      }
      auto p = pending_.find(&c);
      if (p != pending_.end() && !p->second.done) {
        p->second.status = reason.WithContext(fmt::format(
            "{} closed the connection during the UCX handshake (does every process of the job run with "
            "BYTEPS_TRANSPORT=ucx, or DMLC_ENABLE_RDMA / DMLC_ENABLE_UCX?)",
            c.peer_name()));
        p->second.done = true;
        cv_.notify_all();
      }
    }
    if (conn) return conn->OnControlClosed(reason);
    if (user && (kind == Kind::kPlain || kind == Kind::kUnknown)) user->OnClose(c, reason);
  }

 private:
  struct Pending {
    bool done = false;
    Status status;
    uint64_t remote_id = 0;
    std::string address;
  };

  std::shared_ptr<UcxConnection> NewConnection(std::shared_ptr<UcxWorker> worker, Handler* handler,
                                               const std::string& peer, uint64_t token, bool local_peer) {
    UcxConnectionOptions o;
    o.max_payload = options_.max_payload_bytes;
    o.checksum = options_.checksum;
    o.large_eager = !local_peer && !context_->rdma();
    o.local_peer = local_peer;
    std::shared_ptr<ControlReaper> reaper = reaper_;
    return std::make_shared<UcxConnection>(std::move(worker), handler, o, peer, token,
                                           [reaper](std::shared_ptr<Connection> c, Status s) {
                                             reaper->Close(std::move(c), std::move(s));
                                           });
  }

  // From now on the TCP connection's close closes `conn`; if it closed already, now.
  void Link(Connection* control, const std::shared_ptr<UcxConnection>& conn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kinds_[control] = Kind::kLinked;
      links_[control] = conn;
    }
    if (control->closed()) conn->OnControlClosed(Unavailable(fmt::format("{} closed the connection", conn->peer_name())));
  }

  void Refuse(const std::shared_ptr<Connection>& control, const Status& why) {
    BYTEPS_LOG(Info, "refusing a UCX connection from {}: {}", control->peer_name(), why.message());
    Header h;
    h.opcode = Opcode::kUcxReady;
    h.arg = 1;
    (void)control->SendCopy(h, why.message());
  }

  const TransportOptions options_;
  Status init_;
  std::unique_ptr<Transport> control_;
  ControlHandler connector_;
  std::shared_ptr<ControlReaper> reaper_;
  std::shared_ptr<UcxContext> context_;
  std::vector<std::shared_ptr<UcxWorker>> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::mt19937_64 rng_;                                                // guarded by mu_
  size_t next_worker_ = 0;                                             // guarded by mu_
  std::vector<std::unique_ptr<ControlHandler>> listeners_;             // guarded by mu_
  std::map<Connection*, Kind> kinds_;                                  // guarded by mu_
  std::map<Connection*, Pending> pending_;                             // guarded by mu_
  std::map<Connection*, std::shared_ptr<UcxConnection>> links_;        // guarded by mu_
};

StatusOr<RecvBuffer> ControlHandler::OnHeader(Connection& c, const Header& h) {
  Kind k = t_->KindOf(c);
  if (user_ && (k == Kind::kPlain || (k == Kind::kUnknown && h.opcode != Opcode::kUcxHello))) {
    if (k == Kind::kUnknown) t_->SetKind(c, Kind::kPlain);
    return user_->OnHeader(c, h);
  }
  const bool expected = user_ ? (k == Kind::kUnknown && h.opcode == Opcode::kUcxHello)
                              : (k == Kind::kHandshake && h.opcode == Opcode::kUcxReady);
  if (!expected) {
    return ProtocolError(fmt::format("{} from {}: not expected on the TCP connection of a UCX one",
                                     protocol::DescribeHeader(h), c.peer_name()));
  }
  if (h.payload_len > kMaxHandshakePayload) {
    return ProtocolError(fmt::format("oversized UCX handshake frame from {}", c.peer_name()));
  }
  if (user_) t_->SetKind(c, Kind::kHandshake);
  return RecvBuffer{};
}

void ControlHandler::OnFrame(Connection& c, const Header& h, RecvBuffer b) {
  if (user_ && t_->KindOf(c) == Kind::kPlain) return user_->OnFrame(c, h, std::move(b));
  const std::string payload(reinterpret_cast<const char*>(b.data), b.size);
  if (user_) return t_->OnHello(c, user_, payload);
  t_->OnReady(c, h, payload);
}

void ControlHandler::OnClose(Connection& c, const Status& reason) { t_->OnControlClose(c, user_, reason); }

}  // namespace

std::unique_ptr<Transport> CreateUcxTransport(const TransportOptions& options) {
  return std::make_unique<UcxTransportImpl>(options);
}
bool UcxBuilt() { return true; }

}  // namespace byteps::transport::ucx
