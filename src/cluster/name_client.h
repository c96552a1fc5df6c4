// A worker process's line to the scheduler's name service (protocol/name_planner.h): Resolve
// sends a NameRequest and blocks until the NameReply (or the deadline). It keeps a connection of
// its own to the scheduler, opened on the first request, so a host's non-root processes (which
// do not register with the scheduler) ask just like its root. The service is idempotent: a
// request whose connection dropped is sent again on a new one, within the same deadline.
// Threading: Resolve is thread-safe; concurrent requests share the connection and wait each for
// its own reply (request_id). Handler callbacks run on the transport's I/O threads, never block.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/control.h"
#include "transport/transport.h"

namespace byteps::cluster {

struct NameClientOptions {
  std::string root_uri = "127.0.0.1";  // the scheduler (DMLC_PS_ROOT_URI / DMLC_PS_ROOT_PORT)
  int root_port = 0;
  double timeout_s = 300;  // per request, reconnects included (BYTEPS_TIMEOUT)
};

class NameClient : public transport::Handler {
 public:
  // `transport` is borrowed and must outlive the client.
  NameClient(transport::Transport* transport, const NameClientOptions& options);
  ~NameClient() override;

  // The scheduler's plan for `r`. Errors name the tensor: the scheduler's refusal (its code), or
  // Unavailable / DeadlineExceeded when no answer came within timeout_s.
  StatusOr<protocol::NamePlan> Resolve(const protocol::NameRequest& r);
  // The start-up probe's wire time per server (NameRequest::probe_seconds); the answer carries the
  // servers' shares from now on and the scheduler's account of them. Errors as Resolve's.
  StatusOr<protocol::NameReply> ReportServerProbe(const std::vector<double>& seconds, size_t bytes);
  // The job failed (e.g. the scheduler is gone for good): every waiting and later Resolve fails
  // at once with `why` instead of waiting for its deadline. Never blocks (callable under locks,
  // from any thread, the transport's I/O threads included).
  void Abort(const Status& why);

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  // Sends `r`, waits for its reply (see Resolve); `what` prefixes the errors.
  StatusOr<protocol::NameReply> Ask(const protocol::NameRequest& r, const std::string& what);
  // The connection, opened if there is none (under connect_mu_, not mu_).
  StatusOr<std::shared_ptr<transport::Connection>> OpenConnection(double timeout_s);

  transport::Transport* const transport_;
  const NameClientOptions options_;
  std::mutex connect_mu_;  // one connect at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<transport::Connection> conn_;                    // guarded by mu_
  Status last_close_;                                              // guarded by mu_
  uint64_t next_id_ = 1;                                           // guarded by mu_
  std::map<uint64_t, std::optional<protocol::NameReply>> pending_;  // guarded by mu_
  bool closing_ = false;                                           // guarded by mu_
  Status failure_;                                                 // guarded by mu_ (Abort)
};

}  // namespace byteps::cluster
