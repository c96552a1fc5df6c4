// TCP backend of transport.h: N event loops, connections spread round-robin over them.
#include <fmt/format.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "transport/tcp/connection.h"
#include "transport/tcp/event_loop.h"
#include "transport/tcp/socket_util.h"

namespace byteps::transport::tcp {
namespace {

constexpr int kHandshakeAttempts = 3;  // per Connect: connections whose handshake failed

class TcpTransport : public Transport {
 public:
  explicit TcpTransport(const TransportOptions& o) : options_(o) {
    int n = std::max(1, o.io_threads);
    for (int i = 0; i < n; ++i) {
      loops_.push_back(std::make_unique<EventLoop>(fmt::format("{}-io{}", o.name, i)));
    }
  }
  ~TcpTransport() override { Shutdown(); }

  StatusOr<int> Listen(const std::string& host, int port, Handler* handler) override {
    int bound = 0;
    BYTEPS_ASSIGN_OR_RETURN(int fd, ListenSocket(host, port, &bound));
    return AddListener(fd, bound, fmt::format("{}:{}", host, bound), handler);
  }

  StatusOr<int> ListenLocal(const std::string& name, Handler* handler) override {
    BYTEPS_ASSIGN_OR_RETURN(int fd, ListenUnixSocket(name));
    return AddListener(fd, 0, "local socket " + name, handler);
  }

  StatusOr<std::shared_ptr<Connection>> ConnectLocal(const std::string& name, Handler* handler,
                                                     double timeout_s) override {
    return ConnectWithRetry([&](double) { return ConnectUnixOnce(name); }, "local socket " + name, handler,
                            timeout_s);
  }

  StatusOr<std::shared_ptr<Connection>> Connect(const std::string& host, int port, Handler* handler,
                                                double timeout_s) override {
    return ConnectWithRetry([&](double left) { return ConnectOnce(host, port, left); },
                            fmt::format("{}:{}", host, port), handler, timeout_s);
  }

 private:
  StatusOr<int> AddListener(int fd, int bound, const std::string& what, Handler* handler) {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) {  // the loops are stopped: nothing would ever accept on this socket
      ::close(fd);
      return Aborted("transport is shutting down");
    }
    EventLoop* loop = loops_[0].get();
    if (!loop->Add(fd, EPOLLIN, [this, fd, handler](uint32_t) { AcceptAll(fd, handler); })) {
      ::close(fd);
      return Internal(fmt::format("cannot register the listener on {} with the event loop", what));
    }
    listen_fds_.push_back(fd);
    // Accepted connections must authenticate (or speak) in time: a thread drops those that don't.
    if (!reaper_.joinable()) reaper_ = std::thread([this] { Reap(); });
    return bound;
  }

  Status Cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancel_;
  }

  StatusOr<std::shared_ptr<Connection>> ConnectWithRetry(const std::function<StatusOr<int>(double)>& once,
                                                         const std::string& what, Handler* handler,
                                                         double timeout_s) {
    using Clock = std::chrono::steady_clock;
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    Status last;
    auto backoff = std::chrono::milliseconds(10);
    int handshake_failures = 0;
    Status telling;  // the handshake failure that says most: a protocol error (e.g. a wrong proof)
    for (;;) {
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0) break;
      if (Status cancelled = Cancelled(); !cancelled.ok()) return cancelled;
      auto fd = once(left);
      if (fd.ok()) {
        auto adopted = Adopt(fd.value(), handler, /*accepted=*/false);
        if (!adopted.ok() && adopted.status().code() != StatusCode::kUnavailable) return adopted.status();
        if (adopted.ok() && options_.secret.empty()) return std::shared_ptr<Connection>(adopted.value());
        Status st = adopted.status();
        if (adopted.ok()) {
          double auth_left = std::max(0.05, std::chrono::duration<double>(deadline - Clock::now()).count());
          st = adopted.value()->WaitAuthenticated(auth_left);
          if (st.ok()) return std::shared_ptr<Connection>(adopted.value());
          adopted.value()->Close(st);
        }
        last = st.WithContext(fmt::format("authentication with {} failed", what));
        // A setting that differs (no secret here, another wire version): no retry can fix it.
        if (st.code() == StatusCode::kInvalidArgument) return last;
        if (st.code() == StatusCode::kProtocol && telling.ok()) telling = last;
        // A frame damaged or a connection reset during the handshake is worth another try; a
        // wrong secret fails every time, so it is reported after a few quick attempts.
        if (st.code() == StatusCode::kDeadlineExceeded || ++handshake_failures >= kHandshakeAttempts) {
          return telling.ok() ? last : telling;
        }
        BYTEPS_LOG(Warning, "{}; trying again ({} of {})", last.message(), handshake_failures + 1, kHandshakeAttempts);
      } else {
        last = fd.status();
        if (last.code() == StatusCode::kDeadlineExceeded) break;
      }
      // The peer may not be listening yet (start-up order is free): wait and retry. This waits on
      // the transport's own condition so Shutdown() can interrupt it.
      std::unique_lock<std::mutex> lock(mu_);
      if (shutdown_) return Aborted("transport is shutting down");
      // Never sleep past the deadline: the caller's timeout is a promise. CancelConnects wakes it.
      cv_.wait_for(lock, std::min<std::chrono::duration<double>>(backoff, std::chrono::duration<double>(left)),
                   [&] { return shutdown_ || !cancel_.ok(); });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    return DeadlineExceeded(fmt::format("could not connect to {} within {:.1f} s (last error: {})", what,
                                        timeout_s, last.message()));
  }

 public:

  void CancelConnects(const Status& why) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancel_.ok()) cancel_ = why.ok() ? Aborted("connecting was cancelled") : why;
    }
    cv_.notify_all();
  }

  void Shutdown() override {
    std::vector<std::shared_ptr<TcpConnection>> conns;
    std::vector<int> fds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return;
      shutdown_ = true;
      for (auto& w : conns_)
        if (auto c = w.lock()) conns.push_back(c);
      conns_.clear();
      fds.swap(listen_fds_);
    }
    cv_.notify_all();
    if (reaper_.joinable()) reaper_.join();
    // On the loop thread, so no AcceptAll is running on a listener while it closes.
    loops_[0]->RunSync([&] {
      for (int fd : fds) {
        loops_[0]->Remove(fd);
        ::close(fd);
      }
    });
    for (auto& c : conns) c->Close(Aborted("transport shut down"));
    for (auto& l : loops_) l->Stop();
  }

 private:
  // Takes ownership of fd: on every path it ends up owned by a connection (which closes it).
  StatusOr<std::shared_ptr<TcpConnection>> Adopt(int fd, Handler* handler, bool accepted) {
    TuneSocket(fd, options_.socket_buffer_bytes);
    EventLoop* loop = loops_[next_loop_.fetch_add(1) % loops_.size()].get();
    ConnectionOptions co;
    co.max_payload = options_.max_payload_bytes;
    co.secret = options_.secret;
    co.checksum = options_.checksum;
    co.accepted = accepted;
    auto conn = std::make_shared<TcpConnection>(fd, loop, handler, std::move(co), PeerAddress(fd));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return Aborted("transport is shutting down");
      // Drop expired entries so a long job with many reconnects does not grow this list.
      std::erase_if(conns_, [](const std::weak_ptr<TcpConnection>& w) { return w.expired(); });
      conns_.push_back(conn);
    }
    if (!conn->Start()) {
      if (conn->closed()) {
        return Unavailable(fmt::format("{} closed the connection at once (before the handshake got that far: a "
                                       "network problem, not the secret)", conn->peer_name()));
      }
      return Internal("cannot register connection with the event loop");
    }
    return conn;
  }

  int OpenAcceptedLocked() {
    int n = 0;
    for (auto& w : conns_) {
      auto c = w.lock();
      if (c && c->accepted() && !c->closed()) ++n;
    }
    return n;
  }

  void AcceptAll(int listen_fd, Handler* handler) {
    for (;;) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or an error the next readiness event will show again
      int open;
      {
        std::lock_guard<std::mutex> lock(mu_);
        std::erase_if(conns_, [](const std::weak_ptr<TcpConnection>& w) { return w.expired(); });
        open = OpenAcceptedLocked();
      }
      if (open >= options_.max_connections) {
        // Refuse (reset) rather than queue: a flood must not grow memory. Logged sparsely.
        if (refused_++ % 100 == 0) {
          BYTEPS_LOG(Warning, "refused a connection from {}: {} connections open (BYTEPS_MAX_CONNECTIONS={}); "
                     "{} refused so far", PeerAddress(fd), open, options_.max_connections, refused_);
        }
        linger lg{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        ::close(fd);
        continue;
      }
      (void)Adopt(fd, handler, /*accepted=*/true);  // on failure the connection object already closed fd
    }
  }

  // Drops accepted connections that have not authenticated (with a secret) or delivered a first
  // frame (without one) within auth_timeout_s: silent or slow peers cannot pile up.
  void Reap() {
    pthread_setname_np(pthread_self(), (options_.name.substr(0, 9) + "-reap").c_str());
    const auto limit = std::chrono::duration<double>(options_.auth_timeout_s);
    std::unique_lock<std::mutex> lock(mu_);
    while (!shutdown_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (shutdown_) break;
      auto now = std::chrono::steady_clock::now();
      std::vector<std::shared_ptr<TcpConnection>> stale;
      for (auto& w : conns_) {
        auto c = w.lock();
        if (!c || !c->accepted() || c->closed() || now - c->created() < limit) continue;
        bool pending = options_.secret.empty() ? !c->delivered_frame() : !c->authenticated();
        if (pending) stale.push_back(c);
      }
      if (stale.empty()) continue;
      lock.unlock();
      for (auto& c : stale) {
        c->Close(ProtocolError(fmt::format("{} did not {} within {:.1f} s (BYTEPS_AUTH_TIMEOUT)", c->peer_name(),
                                           options_.secret.empty() ? "send a first frame" : "authenticate",
                                           options_.auth_timeout_s)));
      }
      lock.lock();
    }
  }

  TransportOptions options_;
  std::vector<std::unique_ptr<EventLoop>> loops_;
  std::atomic<size_t> next_loop_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ = false;                              // guarded by mu_
  Status cancel_;                                      // guarded by mu_; not OK: CancelConnects
  std::vector<int> listen_fds_;                        // guarded by mu_
  std::vector<std::weak_ptr<TcpConnection>> conns_;    // guarded by mu_
  std::thread reaper_;
  std::atomic<uint64_t> refused_{0};
};

}  // namespace
}  // namespace byteps::transport::tcp

namespace byteps::transport {
std::unique_ptr<Transport> CreateTcpTransport(const TransportOptions& options) {
  return std::make_unique<tcp::TcpTransport>(options);
}
}  // namespace byteps::transport
