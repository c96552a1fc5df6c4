#include "server/server_config.h"

#include "transport/transport_config.h"

namespace byteps::server {

ServerOptions ServerOptionsFor(const config::Config& c) {
  ServerOptions o;
  o.num_workers = c.num_workers;
  o.engine_threads = c.server_engine_threads;
  o.transport = transport::TransportOptionsFor(c, "server");
  return o;
}

}  // namespace byteps::server
