// The metrics endpoint: one thread ("bps-metrics") that answers HTTP GET /metrics (and /) with
// a Registry's exposition text, one connection at a time, each within a deadline. Started only
// when BYTEPS_METRICS_PORT is set: without it there is no socket and no thread.
// Threading: Start/Stop from the owner; the thread reads the registry (thread-safe).
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/metrics.h"
#include "common/status.h"

namespace byteps::metrics {

class HttpEndpoint {
 public:
  // Listens on host:port (port 0: ephemeral). An error names the address and the reason (e.g.
  // the port in use).
  static StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& host, int port, const Registry* registry);
  ~HttpEndpoint();  // stops the thread, closes the socket
  int port() const { return port_; }

 private:
  HttpEndpoint(int listen_fd, int port, int stop_fd_read, int stop_fd_write, const Registry* registry);
  void Run();
  void Serve(int fd);

  int listen_fd_;
  int port_;
  int stop_read_;
  int stop_write_;
  const Registry* registry_;
  std::thread thread_;
};

}  // namespace byteps::metrics
