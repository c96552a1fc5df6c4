#include "tests/integration/tcp_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/logging.h"

namespace byteps::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

void Abort(int fd) {  // reset instead of an orderly close
  linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  ::shutdown(fd, SHUT_RDWR);
}

}  // namespace

TcpRelay::TcpRelay(int upstream_port) : upstream_port_(upstream_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = Loopback(0);
  socklen_t len = sizeof(a);
  BYTEPS_CHECK(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  BYTEPS_CHECK(::listen(listen_fd_, 64) == 0);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  BYTEPS_CHECK(::pipe(wake_) == 0);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TcpRelay::~TcpRelay() {
  stop_ = true;
  (void)!::write(wake_[1], "x", 1);
  acceptor_.join();
  ResetAll();
  // Joined without mu_: a forwarder takes it on its way out.
  std::vector<std::unique_ptr<Pair>> pairs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pairs.swap(pairs_);
  }
  for (auto& p : pairs) p->thread.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpRelay::ResetAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : pairs_) {
    if (p->done) continue;
    Abort(p->a);
    Abort(p->b);
    ++resets_;
  }
}

void TcpRelay::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (stop_) return;
    int a = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (a < 0) continue;
    if (refuse_) {
      Abort(a);
      ::close(a);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++refused_;
      }
      cv_.notify_all();
      continue;
    }
    int b = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in up = Loopback(upstream_port_);
    if (::connect(b, reinterpret_cast<sockaddr*>(&up), sizeof(up)) != 0) {
      Abort(a);
      ::close(a);
      ::close(b);
      continue;
    }
    auto p = std::make_unique<Pair>();
    p->a = a;
    p->b = b;
    Pair* raw = p.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      p->thread = std::thread([this, raw] { Forward(raw); });
      pairs_.push_back(std::move(p));
      ++accepted_;
    }
    cv_.notify_all();
  }
}

int TcpRelay::accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_;
}

int TcpRelay::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

bool TcpRelay::WaitAccepted(int n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return accepted_ >= n; });
}

bool TcpRelay::WaitRefused(int n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return refused_ >= n; });
}

void TcpRelay::Forward(Pair* p) {
  char buf[64 * 1024];
  for (;;) {
    pollfd fds[2] = {{p->a, POLLIN, 0}, {p->b, POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0) break;
    bool stop = false;
    for (int i = 0; i < 2 && !stop; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::recv(fds[i].fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        stop = true;
        break;
      }
      int to = i == 0 ? p->b : p->a;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
        if (w <= 0) {
          stop = true;
          break;
        }
        off += w;
      }
    }
    if (stop) break;
  }
  std::lock_guard<std::mutex> lock(mu_);  // ResetAll never touches a closed fd
  p->done = true;
  Abort(p->a);  // whatever ended one side ends the other
  Abort(p->b);
  ::close(p->a);
  ::close(p->b);
}

}  // namespace byteps::testing
