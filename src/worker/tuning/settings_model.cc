#include "worker/tuning/settings_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace byteps::worker::tuning {

namespace {
std::string Mbps(double bytes_per_s) { return fmt::format("{:.0f} Mbit/s", bytes_per_s * 8 / 1e6); }
std::string KiB(size_t bytes) { return fmt::format("{} KiB", bytes >> 10); }
}  // namespace

size_t RoundPartition(double bytes, size_t lo, size_t hi) {
  hi = std::max(lo, hi);
  if (!(bytes > 0)) return hi;
  const double exponent = std::clamp(std::round(std::log2(bytes)), 0.0, 62.0);
  return std::clamp(static_cast<size_t>(std::ldexp(1.0, static_cast<int>(exponent))), lo, hi);
}

size_t PartitionAlternative(size_t chosen, size_t lo, size_t hi) {
  if (chosen == 0) return 0;
  for (size_t c : {chosen * 4, chosen / 4, chosen * 2, chosen / 2}) {
    if (c >= lo && c <= hi && c != chosen) return c;
  }
  return 0;
}

size_t CreditForPartition(size_t credit, size_t chosen, size_t partition) {
  if (credit == 0 || chosen == 0 || partition == chosen) return credit;
  const double scaled = static_cast<double>(credit) * static_cast<double>(partition) / static_cast<double>(chosen);
  return std::max(16 * partition, std::min(credit, static_cast<size_t>(scaled)));
}

DerivedSettings Derive(const LinkEstimate& link, const ModelInputs& in) {
  DerivedSettings out;
  const size_t hi = std::max<size_t>(in.max_partition_bytes, 4096);
  if (!(link.goodput_Bps > 0)) {
    out.partition_bytes = {hi, "nothing measured: the largest partition"};
    out.credit_bytes = {0, "nothing measured: no cap"};
    return out;
  }
  // With shared links the last partition crosses each NIC n - 1 times each way (the pushes of the
  // other workers into its server, the sums out to them), so the tail term is 2 (n - 1) P / B.
  const int fan = std::max({in.num_workers, in.num_servers, 1});
  const int legs = in.shared_links ? std::max(1, fan - 1) : 1;
  const size_t lo = in.shared_links ? kMinSharedPartitionBytes : kMinPartitionBytes;
  const double ideal =
      std::sqrt(static_cast<double>(kReferenceTensorBytes) * kPartitionCostS * link.goodput_Bps / (2.0 * legs));
  const size_t P = RoundPartition(ideal, lo, hi);
  out.partition_bytes = {P, fmt::format("sqrt(M {} MiB * c {:.0f} us * B {} / {}) = {:.0f} KiB, rounded to a power "
                                        "of two in [{}, {}]",
                                        kReferenceTensorBytes >> 20, kPartitionCostS * 1e6, Mbps(link.goodput_Bps),
                                        in.shared_links ? fmt::format("(2 (n - 1) = {})", 2 * legs) : "2",
                                        ideal / 1024, KiB(lo), KiB(hi))};
  const double bdp = 2 * link.goodput_Bps * std::max(0.0, link.rtt_s);
  // Partitions kept in flight per server and worker (see the header): 4 or 2 round trips' worth.
  const size_t trips = in.shared_links ? 4 : 8;
  const size_t pipeline = trips * static_cast<size_t>(fan) * P;
  const size_t C = std::max({static_cast<size_t>(bdp), pipeline, 16 * P});
  out.credit_bytes = {C, fmt::format("{}max(2 B R = 2 * {} * {:.2f} ms = {}, {} max(n, k) P = {} * {} * {} = {}, 16 P = {})",
                                     in.shared_links ? "servers share the workers' hosts: " : "",
                                     Mbps(link.goodput_Bps), link.rtt_s * 1e3, KiB(static_cast<size_t>(bdp)), trips,
                                     trips, fan, KiB(P), KiB(pipeline), KiB(16 * P))};
  return out;
}

Choice DeriveConnections(const LinkEstimate& link, size_t window_bytes) {
  if (!(link.goodput_Bps > 0) || !(link.rtt_s > 0) || window_bytes == 0) {
    return {kMinConnections, fmt::format("nothing measured: {}", kMinConnections)};
  }
  const double bdp = link.goodput_Bps * link.rtt_s;
  const double needed = std::ceil(bdp / static_cast<double>(window_bytes));
  const int K = static_cast<int>(std::clamp(needed, static_cast<double>(kMinConnections), double{kMaxConnections}));
  return {static_cast<size_t>(K),
          fmt::format("max({}, ceil(B R / W) = ceil({} * {:.2f} ms / {}) = {}), at most {}", kMinConnections,
                      Mbps(link.goodput_Bps), link.rtt_s * 1e3, KiB(window_bytes), needed, kMaxConnections)};
}

}  // namespace byteps::worker::tuning
