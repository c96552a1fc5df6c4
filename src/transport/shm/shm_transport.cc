#include "transport/shm/shm_transport.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "common/logging.h"
#include "transport/shm/shm_connection.h"

namespace byteps::transport::shm {

using protocol::Header;
using protocol::Opcode;

namespace {

constexpr uint64_t kRingBytes = 4u << 20;  // per direction: records only (large payloads stay with their sender)
constexpr size_t kMaxControlPayload = 4096;

std::string SocketName(int port) { return fmt::format("byteps-shm-{}", port); }

// Whether we can read `pid`'s memory at `addr` and find `nonce` there (the peer is who it says,
// and the kernel lets us copy from it: same user, no ptrace restriction).
Status ProbePeer(int pid, uint64_t addr, uint64_t nonce) {
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(addr), sizeof got};
  ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n != static_cast<ssize_t>(sizeof got)) {
    return Unavailable(fmt::format("cannot read the memory of pid {} (process_vm_readv: {}); shared memory needs both "
                                   "processes under one user without ptrace restrictions",
                                   pid, n < 0 ? std::strerror(errno) : "short read"));
  }
  if (got != nonce) return Unavailable(fmt::format("pid {} is not the process that offered the connection", pid));
  return Status::Ok();
}

class ShmTransportImpl;

// The handler of the control (Unix socket) connections: one per listener (`user` set: it
// accepts) and one for the connections this process makes (`user` null).
class ControlHandler : public Handler {
 public:
  ControlHandler(ShmTransportImpl* t, Handler* user) : t_(t), user_(user) {}
  StatusOr<RecvBuffer> OnHeader(Connection& c, const Header& h) override;
  void OnFrame(Connection& c, const Header& h, RecvBuffer b) override;
  void OnClose(Connection& c, const Status& reason) override;

 private:
  ShmTransportImpl* t_;
  Handler* user_;
};

class ShmTransportImpl final : public ShmTransport {
 public:
  explicit ShmTransportImpl(const TransportOptions& o) : options_(o), connector_(this, nullptr) {
    TransportOptions c = o;
    c.name = o.name + "-shm";
    c.socket_buffer_bytes = 0;
    c.max_payload_bytes = kMaxControlPayload;
    c.checksum = false;  // bells carry nothing; the rings check their payloads themselves
    control_ = CreateTcpTransport(c);
    std::random_device rd;
    nonce_ = (static_cast<uint64_t>(rd()) << 32) | rd();
    probe_ = std::make_unique<uint64_t>(nonce_);
    int stale = RemoveStaleSegments();
    if (stale > 0) BYTEPS_LOG(Info, "removed {} shared-memory connection segment(s) of dead processes", stale);
  }
  ~ShmTransportImpl() override { Shutdown(); }

  StatusOr<int> Listen(const std::string& host, int port, Handler* handler) override {
    // The port is the listener's name: hold it as a bound TCP socket so no one else takes it.
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Unavailable(fmt::format("socket: {}", std::strerror(errno)));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.empty() ? "0.0.0.0" : host.c_str(), &a.sin_addr) != 1 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      int e = errno;
      ::close(fd);
      return Unavailable(fmt::format("cannot reserve port {} on {} for shared-memory connections: {}", port, host,
                                     std::strerror(e)));
    }
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const int bound = ntohs(a.sin_port);
    {
      std::lock_guard<std::mutex> lock(mu_);
      reserved_.push_back(fd);
    }
    BYTEPS_RETURN_IF_ERROR(ListenOnPort(bound, handler).status());
    return bound;
  }

  StatusOr<int> ListenOnPort(int port, Handler* handler) override {
    auto h = std::make_unique<ControlHandler>(this, handler);
    BYTEPS_RETURN_IF_ERROR(control_->ListenLocal(SocketName(port), h.get()).status());
    std::lock_guard<std::mutex> lock(mu_);
    listeners_.push_back(std::move(h));
    return port;
  }

  StatusOr<std::shared_ptr<Connection>> Connect(const std::string& host, int port, Handler* handler,
                                                double timeout_s) override {
    if (!IsLocalHost(host)) {
      return InvalidArgument(fmt::format("{}:{} is not on this host: shared memory reaches only processes of this host "
                                         "(BYTEPS_TRANSPORT=auto uses TCP for it)",
                                         host, port));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    auto c = control_->ConnectLocal(SocketName(port), &connector_, timeout_s);
    if (!c.ok()) return c.status().WithContext(fmt::format("no shared-memory listener for {}:{}", host, port));
    std::shared_ptr<Connection> control = c.value();
    control->set_peer_name(fmt::format("{}:{} (shared memory)", host, port));
    auto seg = Segment::Create(NewSegmentName(), kRingBytes);
    if (!seg.ok()) {
      control->Close(seg.status());
      return seg.status();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      Pending& p = pending_[control.get()];
      p.handler = handler;
      p.segment = *seg;
      p.peer = fmt::format("{}:{} (shared memory)", host, port);
      // Closed before it was registered (the peer died right away): its close found nothing to fail.
      if (control->closed()) {
        p.done = true;
        p.status = Unavailable(fmt::format("{}:{} closed the connection", host, port));
      }
    }
    Header h;
    h.opcode = Opcode::kShmHello;
    Status st = control->SendCopy(h, fmt::format("{} {} {} {}", (*seg)->name(), getpid(),
                                                 reinterpret_cast<uint64_t>(probe_.get()), nonce_));
    std::shared_ptr<ShmConnection> conn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      Pending& p = pending_[control.get()];
      if (st.ok() && !cv_.wait_until(lock, deadline, [&] { return p.done; })) {
        st = DeadlineExceeded(fmt::format("{}:{} did not take the shared-memory connection within {:.1f} s", host,
                                          port, timeout_s));
      }
      if (st.ok()) st = p.status;
      conn = p.conn;
      pending_.erase(control.get());
    }
    (*seg)->Unlink();  // mapped by both (or given up): no name left behind
    if (!st.ok()) {
      control->Close(st);
      return st;
    }
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
    control_->Shutdown();  // closes every control connection: their shared-memory ones close with them
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : reserved_) ::close(fd);
    reserved_.clear();
    cv_.notify_all();
  }

  // Control frames (ControlHandler, on the control connection's I/O thread).
  void OnHello(Connection& c, Handler* user, const std::string& payload) {
    char name[256] = {};
    int pid = 0;
    unsigned long long addr = 0, nonce = 0;
    Status st;
    std::shared_ptr<Segment> seg;
    if (std::sscanf(payload.c_str(), "%255s %d %llu %llu", name, &pid, &addr, &nonce) != 4 || pid <= 0) {
      st = ProtocolError(fmt::format("a malformed shared-memory offer from {}", c.peer_name()));
    } else {
      auto s = Segment::Open(name);
      st = s.status();
      if (st.ok()) seg = *s;
      if (st.ok()) st = ProbePeer(pid, addr, nonce);
    }
    Header h;
    h.opcode = Opcode::kShmReady;
    if (!st.ok()) {
      BYTEPS_LOG(Info, "refusing a shared-memory connection from {}: {}", c.peer_name(), st.message());
      h.arg = 1;
      (void)c.SendCopy(h, st.message());
      return;
    }
    c.set_peer_name(fmt::format("pid {} (shared memory)", pid));
    auto conn = std::make_shared<ShmConnection>(seg, /*acceptor=*/true, pid, user, ConnOptions(),
                                                fmt::format("pid {} (shared memory)", pid));
    conn->Attach(c.shared_from_this());
    {
      std::lock_guard<std::mutex> lock(mu_);
      links_[&c] = conn;
    }
    (void)c.SendCopy(h, fmt::format("{} {} {}", getpid(), reinterpret_cast<uint64_t>(probe_.get()), nonce_));
  }

  void OnReady(Connection& c, const Header& h, const std::string& payload) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(&c);
    if (it == pending_.end() || it->second.done) return;
    Pending& p = it->second;
    int pid = 0;
    unsigned long long addr = 0, nonce = 0;
    if (h.arg != 0) {
      p.status = Unavailable(fmt::format("{} refused the shared-memory connection: {}", p.peer, payload));
    } else if (std::sscanf(payload.c_str(), "%d %llu %llu", &pid, &addr, &nonce) != 3 || pid <= 0) {
      p.status = ProtocolError(fmt::format("a malformed shared-memory answer from {}", p.peer));
    } else {
      p.status = ProbePeer(pid, addr, nonce);
    }
    if (p.status.ok()) {
      p.conn = std::make_shared<ShmConnection>(p.segment, /*acceptor=*/false, pid, p.handler, ConnOptions(),
                                               fmt::format("{} pid {}", p.peer, pid));
      p.conn->Attach(c.shared_from_this());
      links_[&c] = p.conn;
    }
    p.done = true;
    cv_.notify_all();
  }

  std::shared_ptr<ShmConnection> LinkOf(Connection& c) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(&c);
    return it == links_.end() ? nullptr : it->second;
  }

  void OnControlClose(Connection& c, const Status& reason) {
    std::shared_ptr<ShmConnection> conn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = links_.find(&c);
      if (it != links_.end()) {
        conn = it->second;
        links_.erase(it);
      }
      auto p = pending_.find(&c);
      if (p != pending_.end() && !p->second.done) {
        p->second.status = reason.WithContext("the shared-memory handshake failed");
        p->second.done = true;
        cv_.notify_all();
      }
    }
    if (conn) conn->OnControlClosed(reason);
  }

 private:
  ShmConnectionOptions ConnOptions() const {
    ShmConnectionOptions o;
    o.max_payload = options_.max_payload_bytes;
    o.checksum = options_.checksum;
    return o;
  }

  struct Pending {
    Handler* handler = nullptr;
    std::shared_ptr<Segment> segment;
    std::string peer;
    bool done = false;
    Status status;
    std::shared_ptr<ShmConnection> conn;
  };

  const TransportOptions options_;
  std::unique_ptr<Transport> control_;
  ControlHandler connector_;
  uint64_t nonce_ = 0;
  std::unique_ptr<uint64_t> probe_;  // holds nonce_: a peer proves it can read our memory
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<ControlHandler>> listeners_;
  std::vector<int> reserved_;
  std::map<Connection*, Pending> pending_;
  std::map<Connection*, std::shared_ptr<ShmConnection>> links_;
};

StatusOr<RecvBuffer> ControlHandler::OnHeader(Connection& c, const Header& h) {
  if (h.payload_len > kMaxControlPayload) {
    return ProtocolError(fmt::format("oversized shared-memory control frame from {}", c.peer_name()));
  }
  return RecvBuffer{};
}

void ControlHandler::OnFrame(Connection& c, const Header& h, RecvBuffer b) {
  const std::string payload(reinterpret_cast<const char*>(b.data), b.size);
  switch (h.opcode) {
    case Opcode::kShmBell:
      if (auto conn = t_->LinkOf(c)) return conn->OnBell(h.arg);
      break;
    case Opcode::kShmHello:
      if (user_ && !t_->LinkOf(c)) return t_->OnHello(c, user_, payload);
      break;
    case Opcode::kShmReady:
      if (!user_) return t_->OnReady(c, h, payload);
      break;
    default:
      break;
  }
  c.Close(ProtocolError(fmt::format("{} from {}: not a shared-memory control frame here", protocol::DescribeHeader(h),
                                    c.peer_name())));
}

void ControlHandler::OnClose(Connection& c, const Status& reason) { t_->OnControlClose(c, reason); }

}  // namespace

std::unique_ptr<ShmTransport> CreateShmTransport(const TransportOptions& options) {
  return std::make_unique<ShmTransportImpl>(options);
}

bool IsLocalHost(const std::string& host) {
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
    a = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  if ((ntohl(a.s_addr) >> 24) == 127) return true;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool local = false;
  for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.s_addr) {
      local = true;
    }
  }
  freeifaddrs(ifs);
  return local;
}

bool ShmListening(int port) {
  std::ifstream f("/proc/net/unix");
  const std::string want = "@" + SocketName(port);
  std::string line;
  while (std::getline(f, line)) {
    if (line.size() >= want.size() && line.compare(line.size() - want.size(), want.size(), want) == 0) return true;
  }
  return false;
}

}  // namespace byteps::transport::shm
