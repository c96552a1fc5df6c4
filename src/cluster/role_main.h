// Runs the scheduler role of a process from its Config until the job ends (what
// `byteps scheduler` does). Returns OK when every worker finished.
#pragma once

#include <string>

#include "cluster/cluster_client.h"
#include "cluster/scheduler.h"
#include "common/status.h"
#include "config/config.h"

namespace byteps::cluster {

// How a worker or server joins the job described by `config`: the scheduler's address, the job's
// size, the deadlines, and the address it announces (cluster::AdvertisedHost). `port` is the data
// port others connect to (servers; 0 for workers).
ClientOptions ClientOptionsFor(const config::Config& config, const std::string& role, int port);

// The transport settings of `config` (threads, buffers, limits, job secret, checksum) for a
// transport whose threads are called `name`.
transport::TransportOptions TransportOptionsFor(const config::Config& config, const std::string& name);

// The scheduler of the job described by `config`: it listens on DMLC_PS_ROOT_PORT.
SchedulerOptions SchedulerOptionsFor(const config::Config& config);

Status RunScheduler(const config::Config& config);

}  // namespace byteps::cluster
