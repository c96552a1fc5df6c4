// How the server layer is configured from a process's Config. Threading: pure functions.
#pragma once

#include "config/config.h"
#include "server/server.h"

namespace byteps::server {

// The summation service of `config`: the job's worker count, BYTEPS_SERVER_ENGINE_THREAD shards,
// and the data-plane transport settings (threads "server-io<i>").
ServerOptions ServerOptionsFor(const config::Config& config);

}  // namespace byteps::server
