// In-process cluster: a scheduler, k servers and n worker engines as threads of one process on
// ephemeral loopback ports. Real sockets, real protocol; only the process boundary is missing.
// Every role is configured the way the product configures it (the *OptionsFor adapters).
// Threading: used from the test's thread; StartWorkers and ShutdownAll run each node's blocking
// call on a thread of its own, and servers join the job on theirs.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "cluster/cluster_client.h"
#include "cluster/scheduler.h"
#include "config/config.h"
#include "server/server.h"
#include "tests/integration/tcp_relay.h"
#include "worker/engine.h"

namespace byteps::testing {

struct HarnessOptions {
  int num_workers = 2;
  int num_servers = 2;
  size_t partition_bytes = 4096000;
  int scheduling_credit = 0;
  int engine_threads = 2;
  int connections_per_peer = 2;
  double timeout_s = 20;
  double heartbeat_interval_s = 0.2;
  double heartbeat_timeout_s = 3;
  double reconnect_timeout_s = 5;
  // Route worker->server data connections / every scheduler connection through a TcpRelay, so a
  // test can reset them (relay(i) for server i, scheduler_relay()).
  bool relay_data = false;
  bool relay_scheduler = false;
  int relay_delay_ms = 0;  // the data relays hold bytes back this long each way (a long link)
  size_t socket_buffer_bytes = 4u << 20;  // the workers' BYTEPS_SOCKET_BUFFER_BYTES
  // Processes per worker host (BYTEPS_LOCAL_SIZE): StartWorkers starts num_workers * local_size
  // engines, worker(host * local_size + local rank).
  int local_size = 1;
  int pcie_switch_size = 0;  // BYTEPS_PCIE_SWITCH_SIZE of every worker process
};

class ClusterHarness {
 public:
  explicit ClusterHarness(const HarnessOptions& o);
  ~ClusterHarness();

  // Starts scheduler and servers; then StartWorkers() joins n engines (in parallel: Join blocks
  // until all have registered).
  Status StartWorkers();
  worker::Engine& worker(int i) { return *workers_[i]; }
  server::Server& server(int i) { return *servers_[i].server; }
  int num_workers() const { return options_.num_workers; }
  // The job's settings (addresses, sizes, deadlines) as every role of the harness sees them.
  config::Config JobConfig() const;
  config::Config ServerConfig() const;
  config::Config WorkerConfig(int rank, int local_rank = 0) const;
  // Drops worker i without a clean shutdown (as if its process died).
  void KillWorker(int i);
  TcpRelay& relay(int server) { return *relays_[server]; }
  TcpRelay& scheduler_relay() { return *scheduler_relay_; }
  Status ShutdownAll();

 private:
  struct ServerNode {
    std::unique_ptr<server::Server> server;
    std::unique_ptr<transport::Transport> control;
    std::unique_ptr<cluster::ClusterClient> client;
  };

  HarnessOptions options_;
  std::unique_ptr<cluster::Scheduler> scheduler_;
  int port_ = 0;
  std::vector<ServerNode> servers_;
  std::vector<std::thread> server_joiners_;
  std::vector<std::unique_ptr<worker::Engine>> workers_;
  std::vector<std::unique_ptr<TcpRelay>> relays_;
  std::unique_ptr<TcpRelay> scheduler_relay_;
  int root_port_ = 0;  // what nodes dial: the scheduler or its relay
};

}  // namespace byteps::testing
