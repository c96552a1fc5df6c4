#include "transport/transport_config.h"

namespace byteps::transport {

TransportOptions TransportOptionsFor(const config::Config& c, const std::string& name) {
  TransportOptions t;
  t.name = name;
  t.io_threads = c.io_threads;
  t.socket_buffer_bytes = c.socket_buffer_bytes;
  t.max_payload_bytes = c.max_message_bytes;
  t.secret = c.job_secret;
  t.checksum = c.checksum;
  t.auth_timeout_s = c.auth_timeout_s;
  t.max_connections = c.max_connections;
  t.kind = c.transport == "tcp"   ? TransportKind::kTcp
           : c.transport == "shm" ? TransportKind::kShm
           : c.transport == "ucx" ? TransportKind::kUcx
                                  : TransportKind::kAuto;
  return t;
}

TransportOptions ControlTransportOptionsFor(const config::Config& c, const std::string& name) {
  TransportOptions t = TransportOptionsFor(c, name);
  t.io_threads = 1;
  t.max_payload_bytes = 1 << 20;
  t.kind = TransportKind::kTcp;  // the scheduler's traffic is small; it stays on TCP
  return t;
}

}  // namespace byteps::transport
