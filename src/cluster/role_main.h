// Runs the scheduler role of a process from its Config until the job ends (what
// `byteps scheduler` does). Returns OK when every worker finished.
#pragma once

#include "common/status.h"
#include "config/config.h"

namespace byteps::cluster {

Status RunScheduler(const config::Config& config);

}  // namespace byteps::cluster
