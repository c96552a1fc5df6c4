// Small POSIX socket helpers for the TCP backend. Errors name the address.
#pragma once

#include <string>

#include "common/status.h"

namespace byteps::transport::tcp {

// Creates a non-blocking listening socket bound to host:port. Returns the fd; *bound_port gets
// the actual port (useful with port 0).
StatusOr<int> ListenSocket(const std::string& host, int port, int* bound_port);
// One non-blocking connect attempt, waiting up to timeout_s for completion. Returns the fd.
StatusOr<int> ConnectOnce(const std::string& host, int port, double timeout_s);
// TCP_NODELAY, buffer sizes (0 = leave as is), non-blocking, close-on-exec.
void TuneSocket(int fd, size_t buffer_bytes);
// Unix stream sockets in the abstract namespace (nothing on the file system to clean up).
StatusOr<int> ListenUnixSocket(const std::string& name);
StatusOr<int> ConnectUnixOnce(const std::string& name);
std::string PeerAddress(int fd);

}  // namespace byteps::transport::tcp
