// How the cluster layer is configured from a process's Config: the options a worker or server
// joins the job with, and the scheduler's. Threading: pure functions.
#pragma once

#include <string>

#include "cluster/cluster_client.h"
#include "cluster/scheduler.h"
#include "config/config.h"

namespace byteps::cluster {

// How a worker or server joins the job described by `config`: the scheduler's address, the job's
// size, the deadlines, and the address it announces (cluster::AdvertisedHost). `port` is the data
// port others connect to (servers; 0 for workers).
ClientOptions ClientOptionsFor(const config::Config& config, const std::string& role, int port);

// The scheduler of the job described by `config`: it listens on DMLC_PS_ROOT_PORT.
SchedulerOptions SchedulerOptionsFor(const config::Config& config);

// The address a node's listener binds: DMLC_NODE_HOST when set, else every interface.
std::string ListenHostFor(const config::Config& config);

}  // namespace byteps::cluster
