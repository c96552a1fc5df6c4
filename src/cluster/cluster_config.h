// How the cluster layer is configured from a process's Config: the options a worker or server
// joins the job with, and the scheduler's. Threading: pure functions.
#pragma once

#include <memory>
#include <string>

#include "cluster/cluster_client.h"
#include "cluster/scheduler.h"
#include "common/metrics_http.h"
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

// The metrics endpoint of a `role` process (common/metrics_http.h) on BYTEPS_METRICS_PORT at
// ListenHostFor; null when the port is 0. An error (the port in use) names the variable, the
// address and the role; the process must not start without it.
StatusOr<std::unique_ptr<metrics::HttpEndpoint>> StartMetrics(const config::Config& config, const std::string& role);

}  // namespace byteps::cluster
