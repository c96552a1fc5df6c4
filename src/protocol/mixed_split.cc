#include "protocol/mixed_split.h"

#include <fmt/format.h>

#include <algorithm>

namespace byteps::protocol {

StatusOr<MixedSplit> OptimalSplit(int n, int k, double cpu_rate, double worker_rate) {
  if (n < 1) return InvalidArgument(fmt::format("mixed split: {} worker machines (at least 1)", n));
  if (k < 0) return InvalidArgument(fmt::format("mixed split: {} CPU server machines (0 or more)", k));
  if (!(cpu_rate > 0) || !(worker_rate > 0)) {
    return InvalidArgument(fmt::format("mixed split: NIC rates must be positive (CPU machines {}, worker machines {})",
                                       cpu_rate, worker_rate));
  }
  MixedSplit s;
  if (n == 1) {  // nothing crosses the network: the colocated server keeps it all
    s.colocated_share = 1;
    return s;
  }
  if (k == 0) {  // colocated only: all-reduce's split
    s.colocated_share = 1.0 / n;
    s.time = (1 + (n - 2) * s.colocated_share) / worker_rate;
    return s;
  }
  double x = 0, y = 0;  // per CPU server, per colocated server
  if (n == 2) {
    // A worker machine moves M whatever its server takes: the CPU servers take what fits in that
    // time (each moves n x M at its rate: n x / Bc <= 1 / Bw).
    x = std::min(1.0 / k, cpu_rate / (n * worker_rate));
    y = (1 - k * x) / n;
  } else {
    // n x / Bc = (1 + (n-2) y) / Bw and k x + n y = 1.
    const double t = (2.0 * n - 2) / (n - 2) / (k * cpu_rate / n + n * worker_rate / (n - 2));
    x = t * cpu_rate / n;
    y = (t * worker_rate - 1) / (n - 2);
    if (y < 0) {  // CPU servers fast enough to take it all
      y = 0;
      x = 1.0 / k;
    } else if (k * x > 1) {
      x = 1.0 / k;
      y = 0;
    }
  }
  s.cpu_share = x;
  s.colocated_share = y;
  s.time = std::max(n * x / cpu_rate, (1 + (n - 2) * y) / worker_rate);
  return s;
}

double RingTime(int n, double rate) { return n <= 1 ? 0.0 : 2.0 * (n - 1) / (n * rate); }

double CpuOnlyTime(int n, int k, double rate, double worker_rate) {
  return std::max(1.0 / (worker_rate > 0 ? worker_rate : rate), static_cast<double>(n) / (k * rate));
}

StatusOr<std::vector<double>> ServerShares(int n, const std::vector<bool>& colocated, double cpu_rate,
                                           double worker_rate) {
  const int servers = static_cast<int>(colocated.size());
  const int on_workers = static_cast<int>(std::count(colocated.begin(), colocated.end(), true));
  if (servers == 0) return InvalidArgument("mixed split: no servers");
  if (on_workers == 0 || on_workers == servers) return std::vector<double>(servers, 1.0 / servers);
  if (on_workers != n) {
    return InvalidArgument(fmt::format(
        "a mixed placement needs one server on each of the {} worker machines, but {} of the {} servers run on "
        "worker machines: start one server per worker machine, or none (BYTEPS_ENABLE_MIXED_MODE=0 keeps an equal "
        "split)",
        n, on_workers, servers));
  }
  BYTEPS_ASSIGN_OR_RETURN(MixedSplit s, OptimalSplit(n, servers - on_workers, cpu_rate, worker_rate));
  std::vector<double> shares(servers);
  for (int i = 0; i < servers; ++i) shares[i] = colocated[i] ? s.colocated_share : s.cpu_share;
  return shares;
}

}  // namespace byteps::protocol
