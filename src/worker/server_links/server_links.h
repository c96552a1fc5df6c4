// The worker's connections to the servers: BYTEPS_CONNECTIONS_PER_PEER to each (more once the
// start-up tuning asks for them, Widen), the frames of a key always on the same one (protocol::PlaceKey: a tensor's partitions alternate), and reconnect-and-resend: a dropped connection
// (not a dead server) is re-established by the reconnect thread within BYTEPS_RECONNECT_TIMEOUT,
// and what the push-pull stage had in flight on it is sent again (the server ignores duplicate
// (worker, key, round) pushes, so results stay exact). A connection that keeps dropping right
// after reconnecting is not retried forever: the timeout counts from the start of the episode.
// Replies go to the DataClient (the push-pull stage).
// Threading: Send and ConnIndex are thread-safe; the transport::Handler methods run on I/O
// threads; the reconnect thread ("bps-reconnect") runs from Connect to Shutdown.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "protocol/control.h"
#include "transport/transport.h"
#include "worker/server_links/data_plane.h"

namespace byteps::worker::server_links {

struct LinkOptions {
  int connections_per_server = 1;
  double connect_timeout_s = 60;    // the first connections (BYTEPS_START_TIMEOUT)
  double reconnect_timeout_s = 10;  // BYTEPS_RECONNECT_TIMEOUT
  int host_rank = 0;                // sender of the Hello frames
};

class ServerLinks : public DataPlane, public transport::Handler {
 public:
  // `transport` is borrowed and must outlive this object's Shutdown. `on_failure` runs (on the
  // reconnect thread) when a link cannot be re-established: the job cannot go on.
  // `on_job_failure` runs (on an I/O thread) when a server answers with a job-fatal error (a
  // round that can never complete: protocol::kFlagJobFatal), before the push-pull stage gets it.
  ServerLinks(transport::Transport* transport, std::vector<protocol::NodeInfo> servers, const LinkOptions& options,
              std::function<void(const Status&)> on_failure,
              std::function<void(const Status&)> on_job_failure = nullptr);
  ~ServerLinks() override;

  // Replies and connection losses go to `client` from now on (set once, before Connect).
  void set_client(DataClient* client) { client_ = client; }
  // Opens every connection, then starts the reconnect thread.
  Status Connect();
  // Opens connections to every server until each has `per_server`. Only while nothing is in
  // flight (the key-to-connection placement changes): the engine calls it during start-up
  // tuning. Never closes any. Errors: a connection that cannot be opened (the start deadline).
  Status Widen(int per_server);
  int connections_per_server() const { return per_server_.load(std::memory_order_acquire); }
  // This worker is leaving the job (nothing in flight; Finish follows): tells every server
  // (Leave: a round this worker has not pushed can never complete), and from now on servers
  // hanging up once nothing is in flight is expected. A worker that failed does not tell the
  // servers (tell_servers false): its end is the job's failure, which the scheduler announces,
  // not an uneven end of the data that the others would be told of first.
  void SetLeaving(bool tell_servers = true);
  // The job failed: stop reconnecting.
  void Fail(const Status& failure);
  // Stops reconnecting and joins the reconnect thread (the transport is shut down by its owner).
  void Shutdown();

  size_t ConnIndex(int server, uint64_t key) const override;
  // Dispatcher thread only: Send corks each connection it uses until Flush (one system call
  // carries many small frames).
  Status Send(int server, const OutFrame& frame) override;
  void Flush() override;

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Link {
    protocol::NodeInfo node;
    std::vector<std::shared_ptr<transport::Connection>> conns;
    // Per connection: when it came up, and since when it has been down in the current episode.
    std::vector<Clock::time_point> connected_at, down_since;
  };
  struct Lost {
    int server;
    size_t index;
    Status reason;
  };
  StatusOr<std::shared_ptr<transport::Connection>> Open(int server, double timeout_s);
  // Open, again up to kStartAttempts times while the connection is found closed (Unavailable).
  StatusOr<std::shared_ptr<transport::Connection>> OpenAtStart(int server);
  // Opens connections until every server has `per_server`.
  Status OpenUpTo(int per_server);
  static constexpr int kStartAttempts = 3;
  std::shared_ptr<transport::Connection> ConnFor(int server, uint64_t key) const;
  void ReconnectLoop();
  Status Reconnect(const Lost& lost);
  // Pauses up to `ms` (cut short by Shutdown or Fail); false when the job is ending.
  bool Pause(int ms);
  bool Ending() const;  // under mu_

  transport::Transport* transport_;
  const LinkOptions options_;
  std::function<void(const Status&)> on_failure_;
  std::function<void(const Status&)> on_job_failure_;
  DataClient* client_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Link> links_;  // the vector is fixed after construction; conns etc. guarded by mu_
  std::deque<Lost> lost_;    // guarded by mu_
  Status failure_;           // guarded by mu_
  bool leaving_ = false;     // guarded by mu_
  bool shut_down_ = false;   // guarded by mu_
  std::atomic<int> per_server_;  // grows only, while nothing is in flight (Widen)
  std::thread reconnect_thread_;
  std::vector<std::shared_ptr<transport::Connection>> corked_;  // dispatcher thread only
  // Per server (metrics::Global(), fixed after construction): payload bytes sent and received,
  // reconnects.
  struct ServerMetrics {
    metrics::Counter* pushed;
    metrics::Counter* pulled;
    metrics::Counter* reconnects;
  };
  std::vector<ServerMetrics> metrics_;
  metrics::Gauge* const connections_gauge_ = metrics::Global().AddGauge(
      "byteps_worker_connections_per_server", "data connections to each server (the tuner's choice)");
};

}  // namespace byteps::worker::server_links
