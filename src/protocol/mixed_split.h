// The unified architecture's split of the gradient bytes between summation servers (BytePS,
// OSDI'20, "A Unified Architecture for Accelerating Distributed DNN Training in Heterogeneous
// GPU/CPU Clusters"): n worker machines each run a colocated server, k CPU-only machines run one
// each, and the bytes M are split so that every machine's NIC finishes at the same time. With
// equal NIC rates B (each direction):
//   each CPU server       M_cpu = 2(n-1) / (n^2 + kn - 2k) * M
//   each colocated server M_gpu = (n-k)   / (n^2 + kn - 2k) * M
//   communication time    t     = 2n(n-1) M / ((n^2 + kn - 2k) B)
// which is ring all-reduce's time at k = 0 and non-colocated PS's at k = n. With unequal rates the
// same balance: a CPU machine moves n M_cpu each way, a worker machine M + (n-2) M_gpu (its own
// gradient out and the sums back, plus its colocated server's traffic with the other n-1 workers),
// so n x / B_cpu = (M + (n-2) y) / B_gpu with k x + n y = M, x and y clamped at 0.
// Threading: pure functions.
#pragma once

#include <vector>

#include "common/status.h"

namespace byteps::protocol {

struct MixedSplit {
  double cpu_share = 0;        // of M, per CPU server
  double colocated_share = 0;  // of M, per colocated server
  double time = 0;             // the communication time for M = 1 byte (seconds per byte of gradient)
};

// n >= 1 worker machines, 0 <= k CPU server machines, NIC rates in bytes per second (> 0).
// InvalidArgument naming the bad value otherwise.
StatusOr<MixedSplit> OptimalSplit(int n, int k, double cpu_rate = 1, double worker_rate = 1);

// Ring all-reduce's communication time for M = 1 byte at rate B: 2(n-1) / (n B); 0 for n = 1.
double RingTime(int n, double rate = 1);
// Servers on k CPU machines only (non-colocated PS): max(1 / B_worker, n / (k B)) per byte, the
// workers' NICs at `worker_rate` (0: the same B).
double CpuOnlyTime(int n, int k, double rate = 1, double worker_rate = 0);

// Each server's share of the bytes, in server order, given which servers run on worker machines
// (colocated[i]) for n worker machines. All colocated or none: equal shares. Mixed: OptimalSplit,
// which needs exactly one colocated server per worker machine (else InvalidArgument saying what
// to change).
StatusOr<std::vector<double>> ServerShares(int n, const std::vector<bool>& colocated, double cpu_rate = 1,
                                           double worker_rate = 1);

}  // namespace byteps::protocol
