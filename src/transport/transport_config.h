// The transport settings of a process's Config: what every transport of a worker, server or
// scheduler is built with (threads, buffers, limits, job secret, checksum, deadlines).
// Threading: pure functions.
#pragma once

#include <string>

#include "config/config.h"
#include "transport/transport.h"

namespace byteps::transport {

// The data-plane transport of `config` whose threads are called "<name>-io<i>".
TransportOptions TransportOptionsFor(const config::Config& config, const std::string& name);

// A control-plane transport (scheduler traffic): the same secret, checksum and deadlines, one I/O
// thread, and frames of at most 1 MiB (control payloads are small; refuse floods).
TransportOptions ControlTransportOptionsFor(const config::Config& config, const std::string& name);

}  // namespace byteps::transport
