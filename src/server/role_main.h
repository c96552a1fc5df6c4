// Runs the server role of a process from its Config until the scheduler ends the job (what
// `byteps server` does): listen, register, sum, exit.
#pragma once

#include "common/status.h"
#include "config/config.h"

namespace byteps::server {

Status RunServer(const config::Config& config);

}  // namespace byteps::server
