#include "server/role_main.h"

#include <fmt/format.h>

#include "cluster/cluster_client.h"
#include "cluster/host_address.h"
#include "common/logging.h"
#include "server/server.h"

namespace byteps::server {

Status RunServer(const config::Config& c) {
  ServerOptions o;
  o.num_workers = c.num_workers;
  o.engine_threads = c.server_engine_threads;
  o.transport.io_threads = c.io_threads;
  o.transport.socket_buffer_bytes = c.socket_buffer_bytes;
  o.transport.max_payload_bytes = c.max_message_bytes;
  Server server(o);
  std::string host = cluster::AdvertisedHost(c.node_host, c.interface, c.root_uri);
  auto port = server.Listen(c.node_host.empty() ? "0.0.0.0" : c.node_host, c.port);
  if (!port.ok()) return port.status();

  // The scheduler connection uses its own small transport so control never queues behind data.
  transport::TransportOptions to;
  to.io_threads = 1;
  to.name = "srv-ctl";
  auto control = transport::CreateTcpTransport(to);
  cluster::ClientOptions co;
  co.role = "server";
  co.host = host;
  co.port = port.value();
  co.root_uri = c.root_uri;
  co.root_port = c.root_port;
  co.num_workers = c.num_workers;
  co.num_servers = c.num_servers;
  co.start_timeout_s = c.start_timeout_s;
  co.heartbeat_interval_s = c.heartbeat_interval_s;
  co.op_timeout_s = c.op_timeout_s;
  auto client = cluster::ClusterClient::Join(*control, co, nullptr);
  if (!client.ok()) return client.status();
  log::SetIdentity(fmt::format("server:{}", client.value()->rank()));
  BYTEPS_LOG(Info, "serving on {}:{} for {} workers with {} engine threads", host, port.value(), c.num_workers,
             c.server_engine_threads);
  Status st = client.value()->WaitTerminate();
  server.Shutdown();
  client.value().reset();
  control->Shutdown();
  return st;
}

}  // namespace byteps::server
