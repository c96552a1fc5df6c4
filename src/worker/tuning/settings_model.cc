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
  if (!(bytes > 0)) return hi;
  const double exponent = std::round(std::log2(bytes));
  const double rounded = std::ldexp(1.0, static_cast<int>(std::clamp(exponent, 0.0, 62.0)));
  return std::clamp(static_cast<size_t>(rounded), lo, std::max(lo, hi));
}

DerivedSettings Derive(const LinkEstimate& link, const ModelInputs& in) {
  DerivedSettings out;
  const size_t hi = std::max(in.min_partition_bytes, in.max_partition_bytes);
  if (!(link.goodput_Bps > 0)) {
    out.partition_bytes = {hi, "no bandwidth measured: the largest partition"};
    out.credit_bytes = {0, "no bandwidth measured: no cap"};
    return out;
  }
  const double B = link.goodput_Bps;
  const double ideal = std::sqrt(static_cast<double>(in.reference_tensor_bytes) * in.partition_cost_s * B / 2);
  const size_t P = RoundPartition(ideal, in.min_partition_bytes, hi);
  out.partition_bytes = {
      P, fmt::format("sqrt(M {} MiB * c {:.0f} us * B {} / 2) = {:.0f} KiB, rounded to a power of two in [{}, {}]",
                     in.reference_tensor_bytes >> 20, in.partition_cost_s * 1e6, Mbps(B), ideal / 1024.0,
                     KiB(in.min_partition_bytes), KiB(hi))};

  const int fan = std::max({in.num_workers, in.num_servers, 1});
  const double bdp = 2 * B * std::max(0.0, link.rtt_s);
  const size_t pipeline = 4 * static_cast<size_t>(fan) * P;
  const size_t C = std::max({static_cast<size_t>(bdp), pipeline, 8 * P});
  out.credit_bytes = {C, fmt::format("max(2 B R = 2 * {} * {:.2f} ms = {}, 4 max(n, k) P = 4 * {} * {} = {}, 8 P) "
                                     "= {} ({} partitions)",
                                     Mbps(B), link.rtt_s * 1e3, KiB(static_cast<size_t>(bdp)), fan, KiB(P),
                                     KiB(pipeline), KiB(C), C / P)};
  return out;
}

}  // namespace byteps::worker::tuning
