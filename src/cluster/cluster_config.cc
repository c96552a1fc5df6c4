#include "cluster/cluster_config.h"

#include <fmt/format.h>

#include "common/logging.h"

#include "cluster/host_address.h"
#include "cluster/node_summary.h"
#include "transport/transport_config.h"

namespace byteps::cluster {

ClientOptions ClientOptionsFor(const config::Config& c, const std::string& role, int port) {
  ClientOptions co;
  co.role = role;
  co.requested_rank = role == "worker" ? c.worker_id : -1;
  co.host = AdvertisedHost(c.node_host, c.interface, c.root_uri);
  co.port = c.advertise_port > 0 ? c.advertise_port : port;  // e.g. behind a proxy or NAT
  co.nic_rate = NicRate(co.host, c.nic_gbps);
  co.root_uri = c.root_uri;
  co.root_port = c.root_port;
  co.num_workers = c.num_workers;
  co.num_servers = c.num_servers;
  co.start_timeout_s = c.start_timeout_s;
  co.heartbeat_interval_s = c.heartbeat_interval_s;
  co.heartbeat_timeout_s = c.heartbeat_timeout_s;
  co.op_timeout_s = c.op_timeout_s;
  co.reconnect_timeout_s = c.reconnect_timeout_s;
  co.summary = [role] { return NodeSummary(metrics::Global(), role); };
  return co;
}

SchedulerOptions SchedulerOptionsFor(const config::Config& c) {
  SchedulerOptions o;
  o.host = ListenHostFor(c);
  o.port = c.root_port;
  o.num_workers = c.num_workers;
  o.num_servers = c.num_servers;
  o.start_timeout_s = c.start_timeout_s;
  o.heartbeat_timeout_s = c.heartbeat_interval_s > 0 ? c.heartbeat_timeout_s : 0;
  o.reconnect_timeout_s = c.reconnect_timeout_s;
  o.mixed_mode = c.mixed_mode < 0 ? protocol::MixedMode::kAuto : c.mixed_mode ? protocol::MixedMode::kOn
                                                                                : protocol::MixedMode::kOff;
  o.transport = transport::ControlTransportOptionsFor(c, "sched");
  return o;
}

std::string ListenHostFor(const config::Config& c) { return c.node_host.empty() ? "0.0.0.0" : c.node_host; }

StatusOr<std::unique_ptr<metrics::HttpEndpoint>> StartMetrics(const config::Config& c, const std::string& role) {
  if (c.metrics_port == 0) return std::unique_ptr<metrics::HttpEndpoint>();
  auto e = metrics::HttpEndpoint::Start(ListenHostFor(c), c.metrics_port, &metrics::Global());
  if (!e.ok()) return e.status().WithContext(fmt::format("the {}'s metrics", role));
  BYTEPS_LOG(Info, "metrics on http://{}:{}/metrics", ListenHostFor(c), e.value()->port());
  return e;
}

}  // namespace byteps::cluster
