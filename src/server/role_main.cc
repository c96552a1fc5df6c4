#include "server/role_main.h"

#include <fmt/format.h>

#include "cluster/cluster_client.h"
#include "cluster/cluster_config.h"
#include "common/logging.h"
#include "server/server.h"
#include "server/server_config.h"
#include "transport/transport_config.h"

namespace byteps::server {

Status RunServer(const config::Config& c) {
  Server server(ServerOptionsFor(c));
  auto port = server.Listen(cluster::ListenHostFor(c), c.port);
  if (!port.ok()) return port.status();

  // The scheduler connection uses its own small transport so control never queues behind data.
  auto control = transport::CreateTcpTransport(transport::ControlTransportOptionsFor(c, "srv-ctl"));
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
