#include "cluster/role_main.h"

#include "cluster/host_address.h"
#include "cluster/scheduler.h"
#include "common/logging.h"

namespace byteps::cluster {

ClientOptions ClientOptionsFor(const config::Config& c, const std::string& role, int port) {
  ClientOptions co;
  co.role = role;
  co.requested_rank = role == "worker" ? c.worker_id : -1;
  co.host = AdvertisedHost(c.node_host, c.interface, c.root_uri);
  co.port = c.advertise_port > 0 ? c.advertise_port : port;  // e.g. behind a proxy or NAT
  co.root_uri = c.root_uri;
  co.root_port = c.root_port;
  co.num_workers = c.num_workers;
  co.num_servers = c.num_servers;
  co.start_timeout_s = c.start_timeout_s;
  co.heartbeat_interval_s = c.heartbeat_interval_s;
  co.heartbeat_timeout_s = c.heartbeat_timeout_s;
  co.op_timeout_s = c.op_timeout_s;
  co.reconnect_timeout_s = c.reconnect_timeout_s;
  return co;
}

transport::TransportOptions TransportOptionsFor(const config::Config& c, const std::string& name) {
  transport::TransportOptions t;
  t.name = name;
  t.io_threads = c.io_threads;
  t.socket_buffer_bytes = c.socket_buffer_bytes;
  t.max_payload_bytes = c.max_message_bytes;
  t.secret = c.job_secret;
  t.checksum = c.checksum;
  t.auth_timeout_s = c.auth_timeout_s;
  t.max_connections = c.max_connections;
  return t;
}

SchedulerOptions SchedulerOptionsFor(const config::Config& c) {
  SchedulerOptions o;
  o.host = c.node_host.empty() ? "0.0.0.0" : c.node_host;
  o.port = c.root_port;
  o.num_workers = c.num_workers;
  o.num_servers = c.num_servers;
  o.start_timeout_s = c.start_timeout_s;
  o.heartbeat_timeout_s = c.heartbeat_interval_s > 0 ? c.heartbeat_timeout_s : 0;
  o.reconnect_timeout_s = c.reconnect_timeout_s;
  o.transport = TransportOptionsFor(c, "sched");
  o.transport.io_threads = 1;
  o.transport.max_payload_bytes = 1 << 20;  // control frames only
  return o;
}

Status RunScheduler(const config::Config& c) {
  auto s = Scheduler::Start(SchedulerOptionsFor(c));
  if (!s.ok()) return s.status();
  Status st = s.value()->Wait();
  s.value()->WaitDisconnect(2.0);
  return st;
}

}  // namespace byteps::cluster
