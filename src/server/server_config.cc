#include "server/server_config.h"

#include "transport/transport_config.h"

namespace byteps::server {

ServerOptions ServerOptionsFor(const config::Config& c) {
  ServerOptions o;
  o.num_workers = c.num_workers;
  o.engine_threads = c.server_engine_threads;
  o.transport = transport::TransportOptionsFor(c, "server");
  o.trace_on = c.trace_on;
  o.trace_dir = c.trace_dir;
  o.trace_start_step = c.trace_start_step;
  o.trace_end_step = c.trace_end_step;
  return o;
}

}  // namespace byteps::server
