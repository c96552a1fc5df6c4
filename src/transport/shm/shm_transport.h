// The shared-memory backend of transport.h (shm_connection.h): connections between processes of
// one host. A listener on port P is the abstract Unix socket "byteps-shm-P" (per network
// namespace, as the TCP port is, so an emulated host sees only its own); a connection is made over
// that socket (authenticated by the TCP backend), then moves its frames into a segment the
// connector creates and unlinks as soon as the acceptor mapped it (a kill -9 leaves at most a name
// whose creator is dead, removed at the next start; names are never reused).
// Threading: as transport.h.
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"

namespace byteps::transport::shm {

class ShmTransport : public Transport {
 public:
  // Listens on the shared-memory socket of `port`, a TCP port this process owns (the auto
  // transport's listener); Listen() reserves one itself.
  virtual StatusOr<int> ListenOnPort(int port, Handler* handler) = 0;
};

std::unique_ptr<ShmTransport> CreateShmTransport(const TransportOptions& options);

// Whether `host` is an address of this host (a loopback address or one of its interfaces').
bool IsLocalHost(const std::string& host);
// Whether some process of this host listens for shared-memory connections on `port`.
bool ShmListening(int port);

}  // namespace byteps::transport::shm
