#include "common/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace byteps::metrics {
namespace {

constexpr int kRequestDeadlineMs = 2000;  // a scraper that does not send its request in time is dropped
constexpr size_t kMaxRequest = 8192;

bool WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& host, int port,
                                                            const Registry* registry) {
  const std::string where = fmt::format("{}:{}", host, port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    return InvalidArgument(fmt::format("BYTEPS_METRICS_PORT: cannot resolve {}: {}", where, gai_strerror(rc)));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return Unavailable(fmt::format("BYTEPS_METRICS_PORT: socket: {}", std::strerror(errno)));
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const int rc = bind(fd, res->ai_addr, res->ai_addrlen);
  const int bind_errno = errno;
  freeaddrinfo(res);
  if (rc != 0 || listen(fd, 16) != 0) {
    const int e = rc != 0 ? bind_errno : errno;
    close(fd);
    return InvalidArgument(fmt::format("BYTEPS_METRICS_PORT: cannot serve metrics on {}: {}{}", where, std::strerror(e),
                                       e == EADDRINUSE ? " (another process, or another byteps process of this "
                                                         "host, has it: see docs/metrics.md for the ports each "
                                                         "role takes)"
                                                       : ""));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(fd);
    return Unavailable(fmt::format("BYTEPS_METRICS_PORT: pipe2: {}", std::strerror(errno)));
  }
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint(fd, ntohs(bound.sin_port), pipe_fds[0], pipe_fds[1], registry));
  e->thread_ = std::thread([raw = e.get()] { raw->Run(); });
  return e;
}

HttpEndpoint::HttpEndpoint(int listen_fd, int port, int stop_read, int stop_write, const Registry* registry)
    : listen_fd_(listen_fd), port_(port), stop_read_(stop_read), stop_write_(stop_write), registry_(registry) {}

HttpEndpoint::~HttpEndpoint() {
  const char c = 's';
  while (write(stop_write_, &c, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(stop_read_);
  close(stop_write_);
}

void HttpEndpoint::Run() {
  pthread_setname_np(pthread_self(), "bps-metrics");
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void HttpEndpoint::Serve(int fd) {
  // Read the request head (up to the blank line), within the deadline.
  std::string req;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestDeadlineMs);
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos && req.size() < kMaxRequest) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    char buf[2048];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  const size_t sp1 = req.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : req.find(' ', sp1 + 1);
  const std::string method = req.substr(0, sp1);
  const std::string path = sp2 == std::string::npos ? "" : req.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (method != "GET" && method != "HEAD") {
    status = "405 Method Not Allowed";
    type = "text/plain";
    body = "only GET\n";
  } else if (path != "/metrics" && path != "/" && path.rfind("/metrics?", 0) != 0) {
    status = "404 Not Found";
    type = "text/plain";
    body = "byteps serves its metrics at /metrics\n";
  } else {
    body = registry_->Expose();
  }
  std::string head = fmt::format("HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                 status, type, body.size());
  (void)WriteAll(fd, method == "HEAD" ? head : head + body);
}

}  // namespace byteps::metrics
