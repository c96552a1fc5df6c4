// The settings model: the partition size and the credit (bytes in flight) from what a start-up
// probe measured on the network. Pure arithmetic, written out in docs/performance.md so anyone
// can check a choice by hand:
//
//   partition P = sqrt(M c B / 2), rounded to a power of two (in log terms) in [256 KiB, 4 MiB]
//     A push_pull of M bytes in partitions of P costs about M/B (the wire) + 2P/B (the last
//     partition is pushed, then pulled, with nothing overlapping) + (M/P) c (a fixed cost per
//     partition), smallest at the P above. M = 16 MiB (a large gradient bucket), c = 100 us (the
//     per-partition cost measured on these machines, docs/performance.md); B is measured.
//   credit C = max(2 B R, 8 max(n, k) P, 16 P)
//     One partition's round trip is the RTT R plus the time its server takes to receive every
//     worker's copy and send the sum back (about 2 n P / B when k = n), so a worker keeps that
//     much in flight, four times over for the workers' skew (measured: n = 8 needed it), and
//     never fewer than 16 partitions (with one or two peers a handful in flight leaves loopback's
//     pipeline idle). More only queues bytes in front of the next iteration's urgent partitions.
//   shared links (every worker's host runs a server too, on several hosts: colocated placement):
//   partition P = sqrt(M c B / (2 (n - 1))), rounded likewise in [128 KiB, 4 MiB]
//     The last partition crosses each NIC n - 1 times each way (the other workers' pushes into
//     its server, its sums out to them), so the tail term is 2 (n - 1) P / B.
//   credit C = max(2 B R, 4 max(n, k) P, 16 P)
//     The round trip twice, not four times: a worker's pushes and its host's server's replies
//     leave through one NIC, so every byte a worker queues beyond what covers the round trip
//     waits in front of its own server's sums, and the server with the longest queue of them is
//     the iteration's tail (measured at n = 4 on 1 Gbit/s: 2 MiB in flight ran 16 MiB 4 % faster
//     than 8 MiB; docs/benchmarks.md).
//   connections per server K = max(2, ceil(B R / W)), at most 16
//     One TCP connection moves at most its window W per round trip (W: BYTEPS_SOCKET_BUFFER_BYTES,
//     or half the kernel's tcp_rmem maximum when that is 0), so filling B at round trip R takes
//     B R / W of them; never fewer than 2 (the sweep measured 2 as fast as or faster than 1 in
//     every case: a large partition on one connection does not hold up the next one's frames).
//
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <string>

namespace byteps::worker::tuning {

// What the probe measured, as seen by worker 0.
struct LinkEstimate {
  double goodput_Bps = 0;  // push_pull bytes per second one worker gets (0: unknown)
  double rtt_s = 0;        // a tiny push_pull's round trip
};

inline constexpr size_t kReferenceTensorBytes = 16u << 20;  // M
inline constexpr double kPartitionCostS = 100e-6;           // c
inline constexpr size_t kMinPartitionBytes = 256u << 10;  // below it the per-partition cost dominated every measurement
// With shared links (colocated placement) 128 KiB partitions measured 1-3 % faster than 256 KiB
// at 16-100 MiB on the n = 4 emulated cluster (docs/benchmarks.md).
inline constexpr size_t kMinSharedPartitionBytes = 128u << 10;

struct ModelInputs {
  int num_workers = 1;  // hosts (local roots) taking part in push_pull
  int num_servers = 1;
  size_t max_partition_bytes = 4u << 20;  // the largest message the transport takes, halved
  bool shared_links = false;  // every worker host runs a server too, and there are several hosts
};

struct Choice {
  size_t value = 0;
  std::string reason;  // one line: the inputs and the rule, for the log
};

struct DerivedSettings {
  Choice partition_bytes;
  Choice credit_bytes;
};

inline constexpr int kMinConnections = 2;
inline constexpr int kMaxConnections = 16;  // BYTEPS_CONNECTIONS_PER_PEER's own limit

// Connections per server for a link of `link` when each connection's window is `window_bytes`.
// With nothing measured (or no window known) it keeps kMinConnections.
Choice DeriveConnections(const LinkEstimate& link, size_t window_bytes);

// The model's choice. With nothing measured it keeps the largest partition and leaves the credit
// uncapped (0), the behaviour of the fixed defaults.
DerivedSettings Derive(const LinkEstimate& link, const ModelInputs& in);

// The partition size the online tuner tries against `chosen`: 4x, else 1/4, else 2x, else 1/2
// of it, the first within [lo, hi]; 0 when none is.
size_t PartitionAlternative(size_t chosen, size_t lo, size_t hi);

// The credit that goes with partitions of `partition` when the model chose `credit` for
// partitions of `chosen`: `credit` itself for the chosen size; for another, the same bytes in
// flight, scaled down with smaller partitions, and never fewer than 16 partitions (the sweep:
// 1 MiB partitions ran best with 16 in flight where the model gave 8 MiB for 256 KiB ones;
// 8 max(n, k) of them queued too much). 0 (no cap) stays 0.
size_t CreditForPartition(size_t credit, size_t chosen, size_t partition);

// A size rounded to the nearest power of two (in log terms) within [lo, hi].
size_t RoundPartition(double bytes, size_t lo, size_t hi);

}  // namespace byteps::worker::tuning
