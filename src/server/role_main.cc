#include "server/role_main.h"

#include <fmt/format.h>

#include "cluster/cluster_client.h"
#include "cluster/role_main.h"
#include "common/logging.h"
#include "server/server.h"

namespace byteps::server {

Status RunServer(const config::Config& c) {
  ServerOptions o;
  o.num_workers = c.num_workers;
  o.engine_threads = c.server_engine_threads;
  o.transport = cluster::TransportOptionsFor(c, "server");
  Server server(o);
  auto port = server.Listen(c.node_host.empty() ? "0.0.0.0" : c.node_host, c.port);
  if (!port.ok()) return port.status();

  // The scheduler connection uses its own small transport so control never queues behind data.
  transport::TransportOptions to = cluster::TransportOptionsFor(c, "srv-ctl");
  to.io_threads = 1;
  to.max_payload_bytes = 1 << 20;
  auto control = transport::CreateTcpTransport(to);
  cluster::ClientOptions co = cluster::ClientOptionsFor(c, "server", port.value());
  auto client = cluster::ClusterClient::Join(*control, co, nullptr);
  if (!client.ok()) return client.status();
  log::SetIdentity(fmt::format("server:{}", client.value()->rank()));
  BYTEPS_LOG(Info, "serving on {}:{} for {} workers with {} engine threads", co.host, port.value(), c.num_workers,
             c.server_engine_threads);
  Status st = client.value()->WaitTerminate();
  server.Shutdown();
  client.value().reset();
  control->Shutdown();
  return st;
}

}  // namespace byteps::server
