#include "tests/integration/cluster_harness.h"

#include <algorithm>
#include <future>

#include "cluster/cluster_config.h"
#include "server/server_config.h"
#include "transport/transport_config.h"

namespace byteps::testing {

ClusterHarness::ClusterHarness(const HarnessOptions& o) : options_(o) {
  // JobConfig's root port is 0 until the scheduler listens: it takes an ephemeral one.
  auto s = cluster::Scheduler::Start(cluster::SchedulerOptionsFor(JobConfig()));
  BYTEPS_CHECK(s.ok());
  scheduler_ = std::move(s.value());
  port_ = scheduler_->port();
  root_port_ = port_;
  if (o.relay_scheduler) {
    scheduler_relay_ = std::make_unique<TcpRelay>(port_);
    root_port_ = scheduler_relay_->port();
  }
  servers_.resize(o.num_servers);
  std::vector<std::future<void>> joins;
  for (int i = 0; i < o.num_servers; ++i) {
    ServerNode& n = servers_[i];
    const config::Config c = ServerConfig();
    n.server = std::make_unique<server::Server>(server::ServerOptionsFor(c));
    auto port = n.server->Listen(cluster::ListenHostFor(c), c.port);
    BYTEPS_CHECK(port.ok());
    n.control = transport::CreateTcpTransport(transport::ControlTransportOptionsFor(c, "srv-ctl"));
    cluster::ClientOptions co = cluster::ClientOptionsFor(c, "server", port.value());
    if (o.relay_data) {
      relays_.push_back(std::make_unique<TcpRelay>(port.value(), std::chrono::milliseconds{o.relay_delay_ms}));
      co.port = relays_.back()->port();  // workers dial the relay
    }
    // Join blocks until the workers are in too, so servers join on their own threads.
    server_joiners_.emplace_back([&n, co] {
      auto c = cluster::ClusterClient::Join(*n.control, co, nullptr);
      if (c.ok()) n.client = std::move(c.value());
    });
  }
}

config::Config ClusterHarness::JobConfig() const {
  config::Config c;
  c.node_host = "127.0.0.1";
  c.root_uri = "127.0.0.1";
  c.root_port = root_port_;  // 0 until the scheduler listens
  c.num_workers = options_.num_workers;
  c.num_servers = options_.num_servers;
  c.start_timeout_s = options_.timeout_s;
  c.op_timeout_s = options_.timeout_s;
  c.heartbeat_interval_s = options_.heartbeat_interval_s;
  c.heartbeat_timeout_s = options_.heartbeat_timeout_s;
  c.reconnect_timeout_s = options_.reconnect_timeout_s;
  return c;
}

config::Config ClusterHarness::ServerConfig() const {
  config::Config c = JobConfig();
  c.role = config::Role::kServer;
  c.server_engine_threads = options_.engine_threads;
  c.io_threads = 1;
  return c;
}

config::Config ClusterHarness::WorkerConfig(int rank, int local_rank) const {
  config::Config c = JobConfig();
  c.role = config::Role::kWorker;
  c.worker_id = rank;
  c.local_size = options_.local_size;
  c.local_rank = local_rank;
  c.pcie_switch_size = options_.pcie_switch_size;
  c.force_distributed = true;
  c.partition_bytes = options_.partition_bytes;
  c.scheduling_credit = options_.scheduling_credit;
  c.connections_per_peer = options_.connections_per_peer;
  c.socket_buffer_bytes = options_.socket_buffer_bytes;
  c.io_threads = 1;
  return c;
}

Status ClusterHarness::StartWorkers() {
  std::vector<std::future<StatusOr<std::unique_ptr<worker::Engine>>>> fs;
  const int per_host = std::max(1, options_.local_size);
  for (int i = 0; i < options_.num_workers * per_host; ++i) {
    fs.push_back(std::async(std::launch::async,
                            [this, i, per_host] { return worker::Engine::Start(WorkerConfig(i / per_host, i % per_host)); }));
  }
  Status first;
  for (auto& f : fs) {
    auto e = f.get();
    if (!e.ok() && first.ok()) first = e.status();
    workers_.push_back(e.ok() ? std::move(e.value()) : nullptr);
  }
  for (auto& t : server_joiners_) t.join();
  server_joiners_.clear();
  return first;
}

void ClusterHarness::KillWorker(int i) { workers_[i].reset(); }

Status ClusterHarness::ShutdownAll() {
  std::vector<std::future<Status>> fs;
  for (auto& w : workers_) {
    if (!w) continue;
    worker::Engine* e = w.get();
    fs.push_back(std::async(std::launch::async, [e] { return e->Shutdown(); }));
  }
  Status first;
  for (auto& f : fs) {
    Status st = f.get();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

ClusterHarness::~ClusterHarness() {
  for (auto& t : server_joiners_)
    if (t.joinable()) t.join();
  workers_.clear();
  scheduler_->Stop(Aborted("test over"));
  for (auto& n : servers_) {
    if (n.server) n.server->Shutdown();
    n.client.reset();
    if (n.control) n.control->Shutdown();
  }
  scheduler_.reset();
  relays_.clear();
  scheduler_relay_.reset();
}

}  // namespace byteps::testing
