#include "transport/tcp/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace byteps::transport::tcp {
namespace {

StatusOr<sockaddr_in> Resolve(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Unavailable(fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

}  // namespace

namespace {
StatusOr<sockaddr_un> UnixAddress(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(a.sun_path)) return InvalidArgument("unix socket name too long: " + name);
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}
}  // namespace

StatusOr<int> ListenUnixSocket(const std::string& name) {
  socklen_t len = 0;
  BYTEPS_ASSIGN_OR_RETURN(sockaddr_un a, UnixAddress(name, &len));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("socket(AF_UNIX): {}", std::strerror(errno)));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 128) != 0) {
    int e = errno;
    ::close(fd);
    if (e == EADDRINUSE) {
      return Unavailable(fmt::format("local socket '{}' is already in use: another process of this host "
                                     "has the same BYTEPS_LOCAL_RANK in the same job", name));
    }
    return Unavailable(fmt::format("cannot listen on local socket '{}': {}", name, std::strerror(e)));
  }
  return fd;
}

StatusOr<int> ConnectUnixOnce(const std::string& name) {
  socklen_t len = 0;
  BYTEPS_ASSIGN_OR_RETURN(sockaddr_un a, UnixAddress(name, &len));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("socket(AF_UNIX): {}", std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    int e = errno;
    ::close(fd);
    return Unavailable(fmt::format("connect to local socket '{}': {}", name, std::strerror(e)));
  }
  return fd;
}

void TuneSocket(int fd, size_t buffer_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // harmless failure on AF_UNIX
  if (buffer_bytes > 0) {
    int b = static_cast<int>(buffer_bytes);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
  }
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

std::string PeerAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return fmt::format("{}:{}", buf, ntohs(addr.sin_port));
}

StatusOr<int> ListenSocket(const std::string& host, int port, int* bound_port) {
  BYTEPS_ASSIGN_OR_RETURN(sockaddr_in addr, Resolve(host, port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("socket(): {}", std::strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    ::close(fd);
    if (e == EADDRINUSE) {
      return Unavailable(fmt::format("cannot listen on {}:{}: the port is already in use", host, port));
    }
    return Unavailable(fmt::format("cannot listen on {}:{}: {}", host, port, std::strerror(e)));
  }
  if (::listen(fd, 1024) != 0) {
    int e = errno;
    ::close(fd);
    return Unavailable(fmt::format("listen on {}:{}: {}", host, port, std::strerror(e)));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  *bound_port = ntohs(bound.sin_port);
  return fd;
}

StatusOr<int> ConnectOnce(const std::string& host, int port, double timeout_s) {
  BYTEPS_ASSIGN_OR_RETURN(sockaddr_in addr, Resolve(host, port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("socket(): {}", std::strerror(errno)));
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc != 0 && errno != EINPROGRESS) {
    int e = errno;
    ::close(fd);
    return Unavailable(fmt::format("connect to {}:{}: {}", host, port, std::strerror(e)));
  }
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    int ms = static_cast<int>(timeout_s * 1000);
    int pr = ::poll(&p, 1, ms < 1 ? 1 : ms);
    if (pr <= 0) {
      ::close(fd);
      return DeadlineExceeded(fmt::format("connect to {}:{}: no answer within {:.1f} s", host, port, timeout_s));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      return Unavailable(fmt::format("connect to {}:{}: {}", host, port, std::strerror(err)));
    }
  }
  return fd;
}

}  // namespace byteps::transport::tcp
