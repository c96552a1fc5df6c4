// What the address table says about where the servers run, for the tuning's choices
// (engine_tuning.cc): whether they share the workers' machines, and whether the split between
// colocated and CPU-machine servers can use measured rates.
// Threading: pure functions.
#pragma once

#include <vector>

#include "protocol/control.h"

namespace byteps::worker::planning {

// Colocated placement: the job spans several hosts and every worker's host runs a server too, so
// a worker's pushes and its host's server's replies share one NIC (hosts as the nodes advertise
// them to their peers).
bool ServersShareTheWorkersHosts(const std::vector<protocol::NodeInfo>& workers,
                                 const std::vector<protocol::NodeInfo>& servers);

// Servers on worker machines and on CPU machines both, on hosts that are not all loopback
// addresses (an emulation on one machine has no NIC to measure: the formula's split stands).
bool ServersOnBothKindsOfMachine(const std::vector<protocol::NodeInfo>& workers,
                                 const std::vector<protocol::NodeInfo>& servers);

}  // namespace byteps::worker::planning
