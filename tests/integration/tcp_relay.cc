#include "tests/integration/tcp_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <vector>

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

TcpRelay::TcpRelay(int upstream_port, std::chrono::milliseconds delay) : upstream_port_(upstream_port), delay_(delay) {
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
  using Clock = std::chrono::steady_clock;
  struct Chunk {
    Clock::time_point due;
    std::vector<char> bytes;
  };
  std::deque<Chunk> held[2];  // per direction: received, not yet due
  const auto send_all = [](int to, const char* data, size_t n) {
    for (size_t off = 0; off < n;) {
      ssize_t w = ::send(to, data + off, n - off, MSG_NOSIGNAL);
      if (w <= 0) return false;
      off += static_cast<size_t>(w);
    }
    return true;
  };
  char buf[64 * 1024];
  for (bool stop = false; !stop;) {
    // Due chunks go out first; the poll waits at most until the next one is due.
    int wait_ms = 1000;
    const auto now = Clock::now();
    for (int i = 0; i < 2 && !stop; ++i) {
      while (!held[i].empty() && held[i].front().due <= now) {
        if (!send_all(i == 0 ? p->b : p->a, held[i].front().bytes.data(), held[i].front().bytes.size())) stop = true;
        held[i].pop_front();
      }
      if (!held[i].empty()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(held[i].front().due - now).count();
        wait_ms = std::min<int>(wait_ms, static_cast<int>(std::max<int64_t>(1, left)));
      }
    }
    if (stop) break;
    pollfd fds[2] = {{p->a, POLLIN, 0}, {p->b, POLLIN, 0}};
    if (::poll(fds, 2, wait_ms) < 0) break;
    for (int i = 0; i < 2 && !stop; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::recv(fds[i].fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        stop = true;
      } else if (delay_.count() == 0) {
        stop = !send_all(i == 0 ? p->b : p->a, buf, static_cast<size_t>(n));
      } else {
        held[i].push_back({Clock::now() + delay_, std::vector<char>(buf, buf + n)});
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);  // ResetAll never touches a closed fd
  p->done = true;
  Abort(p->a);  // whatever ended one side ends the other
  Abort(p->b);
  ::close(p->a);
  ::close(p->b);
}

}  // namespace byteps::testing
