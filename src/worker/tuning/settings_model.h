// The settings model: partition size and credit (bytes in flight) derived from what a start-up
// probe measured on the network. Pure arithmetic, written out in docs/performance.md so anyone
// can check a choice by hand:
//
//   partition P = sqrt(M_ref * c * B / 2), rounded to a power of two in [64 KiB, 4 MiB]
//     A push_pull of M bytes over a pipeline of partitions costs about M/B (the wire) + 2P/B
//     (the last partition is pushed, then pulled, with nothing overlapping) + (M/P) c (a fixed
//     cost c per partition that the wire does not hide). The sum is smallest at the P above; M_ref
//     is the tensor size it is tuned for (16 MiB: a large gradient bucket).
//   credit C = max(2 B R, 4 max(n, k) P, 8 P)
//     One partition's round trip is the RTT R plus the time its server takes to receive every
//     worker's copy and send the sum back (about 2 n P / B when k = n), so a worker keeps that
//     much in flight, twice over for the workers' skew. More than that only queues bytes in front
//     of the next iteration's urgent partitions.
//
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <string>

namespace byteps::worker::tuning {

// What the probe measured, as seen by one worker.
struct LinkEstimate {
  double goodput_Bps = 0;  // push_pull bytes per second one worker gets (0: unknown)
  double rtt_s = 0;        // a tiny push_pull's round trip (0: unknown)
};

struct ModelInputs {
  int num_workers = 1;  // hosts (local roots) taking part in push_pull
  int num_servers = 1;
  double partition_cost_s = 25e-6;        // fixed cost per partition, both ends (docs/performance.md)
  size_t reference_tensor_bytes = 16u << 20;
  size_t max_partition_bytes = 4u << 20;  // also capped by the largest message the transport takes
  size_t min_partition_bytes = 64u << 10;
};

struct Choice {
  size_t value = 0;
  std::string reason;  // one line: the inputs and the rule, for the log and `byteps info`
};

struct DerivedSettings {
  Choice partition_bytes;
  Choice credit_bytes;
};

// The model's choice. With an unknown goodput (a probe that could not measure it) it keeps the
// largest partition and leaves the credit uncapped (0), the behaviour of the fixed defaults.
DerivedSettings Derive(const LinkEstimate& link, const ModelInputs& in);

// A partition size rounded to the nearest power of two (in log terms) within [lo, hi].
size_t RoundPartition(double bytes, size_t lo, size_t hi);

}  // namespace byteps::worker::tuning
