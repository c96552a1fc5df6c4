// Which kind of machine each server runs on, and so each server's share of the gradient bytes: the
// unified architecture's mixed placement (mixed_split.h) decided from the hosts the nodes
// registered. A server whose host is also a worker's host is colocated (it shares that machine's
// NIC with the worker); the others run on CPU machines. Both kinds present, with one colocated
// server per worker machine: the optimal split. Otherwise: equal shares.
// BYTEPS_ENABLE_MIXED_MODE chooses: unset (kAuto) mixes whenever the layout allows it and falls
// back to equal shares with a warning when both kinds are there but the layout cannot be mixed;
// 0 (kOff) always keeps equal shares; 1 (kOn) requires a layout that can be mixed (else a named
// error that says what to change).
// Threading: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace byteps::protocol {

enum class MixedMode { kAuto, kOff, kOn };

struct ServerPlacement {
  std::vector<double> shares;   // per server rank, summing to 1
  std::vector<bool> colocated;  // per server rank
  bool mixed = false;           // the shares follow the optimal split
  std::string summary;          // one line for the logs and `byteps info`
  std::string warning;          // kAuto's fallback to equal shares, else empty
};

// `worker_hosts` by worker rank (one registered worker per machine; equal hosts count as one
// machine), `server_hosts` by server rank; NIC rates in bytes/s of the CPU and worker machines
// (equal by default: the formula's assumption; unequal ones are named in the summary as
// `rates_name`). InvalidArgument under kOn for a layout that cannot be mixed, naming the hosts and
// what to change.
StatusOr<ServerPlacement> PlaceServers(const std::vector<std::string>& worker_hosts,
                                       const std::vector<std::string>& server_hosts, MixedMode mode,
                                       double cpu_rate = 1, double worker_rate = 1,
                                       std::string_view rates_name = "NIC rates");

// The start-up probe's measurement (tuning/startup_agreement.h): every worker machine pushed and
// pulled `bytes` to server s alone, the fastest run's wire time (less the server's round trip)
// being seconds[s].
struct ProbeTimes {
  std::vector<double> seconds;  // by server rank
  double bytes = 0;
};

// Measured rates count only where the two kinds of machine differ by more than this factor: within
// it the formula's equal rates stand (the probe's noise must not move the split).
inline constexpr double kMeasuredRateTolerance = 1.25;

// The placement from measured NIC rates, for the same layout as PlaceServers. Server s's machine
// moved (n - c) * bytes each way in seconds[s] (c = 1 for a colocated server: its own worker's
// push stays on the machine), so its rate is (n - c) * bytes / seconds[s]; the
// slowest machine of each kind sets its kind's pace (a rate above n times a worker machine's reads
// as that: the workers could not feed it faster). Rates within kMeasuredRateTolerance of each other:
// the formula's split; otherwise the split for the measured rates, the summary saying so. A layout
// that is not mixed: PlaceServers' answer as it stands. InvalidArgument for a probe that does not
// fit the layout (a positive time per server, bytes > 0).
StatusOr<ServerPlacement> PlaceFromProbe(const std::vector<std::string>& worker_hosts,
                                         const std::vector<std::string>& server_hosts, MixedMode mode,
                                         const ProbeTimes& probe);

}  // namespace byteps::protocol
