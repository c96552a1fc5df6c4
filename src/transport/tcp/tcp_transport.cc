// TCP backend of transport.h: N event loops, connections spread round-robin over them.
#include <fmt/format.h>
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
    return bound;
  }

  StatusOr<std::shared_ptr<Connection>> ConnectWithRetry(const std::function<StatusOr<int>(double)>& once,
                                                         const std::string& what, Handler* handler,
                                                         double timeout_s) {
    using Clock = std::chrono::steady_clock;
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    Status last;
    auto backoff = std::chrono::milliseconds(10);
    for (;;) {
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0) break;
      auto fd = once(left);
      if (fd.ok()) return Adopt(fd.value(), handler);
      last = fd.status();
      if (last.code() == StatusCode::kDeadlineExceeded) break;
      // The peer may not be listening yet (start-up order is free): wait and retry. This waits on
      // the transport's own condition so Shutdown() can interrupt it.
      std::unique_lock<std::mutex> lock(mu_);
      if (shutdown_) return Aborted("transport is shutting down");
      // Never sleep past the deadline: the caller's timeout is a promise.
      cv_.wait_for(lock, std::min<std::chrono::duration<double>>(backoff, std::chrono::duration<double>(left)));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    return DeadlineExceeded(fmt::format("could not connect to {} within {:.1f} s (last error: {})", what,
                                        timeout_s, last.message()));
  }

 public:

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
  StatusOr<std::shared_ptr<Connection>> Adopt(int fd, Handler* handler) {
    TuneSocket(fd, options_.socket_buffer_bytes);
    EventLoop* loop = loops_[next_loop_.fetch_add(1) % loops_.size()].get();
    auto conn = std::make_shared<TcpConnection>(fd, loop, handler, options_.max_payload_bytes,
                                                PeerAddress(fd));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return Aborted("transport is shutting down");
      // Drop expired entries so a long job with many reconnects does not grow this list.
      std::erase_if(conns_, [](const std::weak_ptr<TcpConnection>& w) { return w.expired(); });
      conns_.push_back(conn);
    }
    if (!conn->Start()) return Internal("cannot register connection with the event loop");
    return std::shared_ptr<Connection>(conn);
  }

  void AcceptAll(int listen_fd, Handler* handler) {
    for (;;) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or an error the next readiness event will show again
      (void)Adopt(fd, handler);  // on failure the connection object already closed fd
    }
  }

  TransportOptions options_;
  std::vector<std::unique_ptr<EventLoop>> loops_;
  std::atomic<size_t> next_loop_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ = false;                              // guarded by mu_
  std::vector<int> listen_fds_;                        // guarded by mu_
  std::vector<std::weak_ptr<TcpConnection>> conns_;    // guarded by mu_
};

}  // namespace
}  // namespace byteps::transport::tcp

namespace byteps::transport {
std::unique_ptr<Transport> CreateTcpTransport(const TransportOptions& options) {
  return std::make_unique<tcp::TcpTransport>(options);
}
}  // namespace byteps::transport
