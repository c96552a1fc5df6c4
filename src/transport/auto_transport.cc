// CreateTransport (transport.h): the backend a process's settings name, and "auto", which puts
// the shared-memory backend in front of TCP for the peers of this host.
#include <fmt/format.h>

#include <chrono>

#include "common/logging.h"
#include "transport/shm/shm_transport.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

namespace byteps::transport {
namespace {

class AutoTransport final : public Transport {
 public:
  // strict: a peer of this host that offers shared memory is reached through it or not at all
  // (BYTEPS_TRANSPORT=shm), so a setup problem shows instead of a slower job.
  AutoTransport(const TransportOptions& o, bool strict)
      : strict_(strict), tcp_(CreateTcpTransport(o)), shm_(shm::CreateShmTransport(o)) {}
  ~AutoTransport() override { Shutdown(); }

  StatusOr<int> Listen(const std::string& host, int port, Handler* handler) override {
    BYTEPS_ASSIGN_OR_RETURN(int bound, tcp_->Listen(host, port, handler));
    if (auto s = shm_->ListenOnPort(bound, handler); !s.ok()) {
      BYTEPS_LOG(Warning, "no shared-memory listener next to {}:{} (processes of this host use TCP): {}", host, bound,
                 s.status().message());
    }
    return bound;
  }

  StatusOr<std::shared_ptr<Connection>> Connect(const std::string& host, int port, Handler* handler,
                                                double timeout_s) override {
    if (shm::ShmListening(port) && shm::IsLocalHost(host)) {
      const auto start = std::chrono::steady_clock::now();
      auto c = shm_->Connect(host, port, handler, timeout_s);
      if (c.ok() || strict_) return c;
      // The deadline is the caller's, for both tries: a peer that let the time run out (one that
      // is going away, say) is not given it again over TCP.
      const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (c.status().code() == StatusCode::kDeadlineExceeded || left <= 0) return c;
      BYTEPS_LOG(Info, "shared memory to {}:{} is not possible, using TCP: {}", host, port, c.status().message());
      return tcp_->Connect(host, port, handler, left);
    }
    return tcp_->Connect(host, port, handler, timeout_s);
  }

  StatusOr<int> ListenLocal(const std::string& name, Handler* handler) override {
    return tcp_->ListenLocal(name, handler);
  }
  StatusOr<std::shared_ptr<Connection>> ConnectLocal(const std::string& name, Handler* handler,
                                                     double timeout_s) override {
    return tcp_->ConnectLocal(name, handler, timeout_s);
  }
  void Shutdown() override {
    shm_->Shutdown();
    tcp_->Shutdown();
  }
  void CancelConnects(const Status& why) override {
    shm_->CancelConnects(why);
    tcp_->CancelConnects(why);
  }

 private:
  const bool strict_;
  std::unique_ptr<Transport> tcp_;
  std::unique_ptr<shm::ShmTransport> shm_;
};

}  // namespace

std::unique_ptr<Transport> CreateTransport(const TransportOptions& options) {
  switch (options.kind) {
    case TransportKind::kTcp:
      return CreateTcpTransport(options);
    case TransportKind::kShm:
      return std::make_unique<AutoTransport>(options, /*strict=*/true);
    case TransportKind::kUcx:
      return ucx::CreateUcxTransport(options);
    case TransportKind::kAuto:
      break;
  }
  return std::make_unique<AutoTransport>(options, /*strict=*/false);
}

bool TransportBuilt(TransportKind kind) { return kind != TransportKind::kUcx || ucx::UcxBuilt(); }

const char* TransportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto:
      return "auto";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kUcx:
      return "ucx";
  }
  return "unknown";
}

}  // namespace byteps::transport
