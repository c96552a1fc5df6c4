#include "protocol/server_placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "protocol/mixed_split.h"

namespace byteps::protocol {
namespace {

std::string Percent(double share) { return fmt::format("{:.1f}%", 100 * share); }

ServerPlacement Equal(const std::vector<bool>& colocated, const std::string& why) {
  ServerPlacement p;
  p.colocated = colocated;
  p.shares.assign(colocated.size(), colocated.empty() ? 0.0 : 1.0 / colocated.size());
  p.summary = fmt::format("{} servers, equal shares ({} each): {}", colocated.size(),
                          colocated.empty() ? "-" : Percent(p.shares[0]), why);
  return p;
}

}  // namespace

StatusOr<ServerPlacement> PlaceServers(const std::vector<std::string>& worker_hosts,
                                       const std::vector<std::string>& server_hosts, MixedMode mode,
                                       double cpu_rate, double worker_rate, std::string_view rates_name) {
  const std::set<std::string> machines(worker_hosts.begin(), worker_hosts.end());
  std::vector<bool> colocated;
  std::set<std::string> colocated_hosts;
  std::vector<std::string> cpu_hosts;
  for (const std::string& h : server_hosts) {
    colocated.push_back(machines.count(h) != 0);
    if (colocated.back()) colocated_hosts.insert(h);
    else cpu_hosts.push_back(h);
  }
  const int n = static_cast<int>(machines.size());
  const int on_workers = static_cast<int>(server_hosts.size() - cpu_hosts.size());
  const int k = static_cast<int>(cpu_hosts.size());
  if (mode == MixedMode::kOff) return Equal(colocated, "BYTEPS_ENABLE_MIXED_MODE=0");
  // Why this layout cannot be mixed ("" when it can).
  std::string cannot;
  if (on_workers == 0) {
    cannot = fmt::format("no server runs on a worker machine (workers on {}; servers on {}): start one server on "
                         "each worker machine (DMLC_NODE_HOST = the worker's address)",
                         fmt::join(machines, ", "), fmt::join(server_hosts, ", "));
  } else if (k == 0) {
    cannot = fmt::format("every server runs on a worker machine ({}): add servers on CPU machines of their own",
                         fmt::join(colocated_hosts, ", "));
  } else if (on_workers != n || static_cast<int>(colocated_hosts.size()) != n) {
    cannot = fmt::format("a mixed placement needs exactly one server on each of the {} worker machines, but {} of "
                         "the {} servers run on {} of them: start one server per worker machine",
                         n, on_workers, server_hosts.size(), colocated_hosts.size());
  }
  if (!cannot.empty()) {
    if (mode == MixedMode::kOn) {
      return InvalidArgument(fmt::format("BYTEPS_ENABLE_MIXED_MODE=1, but {} (or unset BYTEPS_ENABLE_MIXED_MODE)",
                                         cannot));
    }
    ServerPlacement p = Equal(colocated, on_workers == 0 ? "every server on a CPU machine"
                                         : k == 0        ? "every server on a worker machine"
                                                         : "the layout cannot be mixed");
    if (on_workers != 0 && k != 0) {
      p.warning = fmt::format("servers on worker machines and on CPU machines, but {}; until then every server gets "
                              "an equal share (BYTEPS_ENABLE_MIXED_MODE=0 says this is intended)",
                              cannot);
    }
    return p;
  }
  BYTEPS_ASSIGN_OR_RETURN(MixedSplit split, OptimalSplit(n, k, cpu_rate, worker_rate));
  ServerPlacement p;
  p.colocated = colocated;
  p.mixed = true;
  for (bool c : colocated) p.shares.push_back(c ? split.colocated_share : split.cpu_share);
  const std::string predicted =
      split.time > 0 ? fmt::format("; predicted {:.3f}x ring all-reduce, {:.3f}x the CPU servers alone",
                                   RingTime(n, worker_rate) / split.time, CpuOnlyTime(n, k, cpu_rate, worker_rate) / split.time)
                     : "";
  const std::string rates = cpu_rate == worker_rate ? ""
                            : fmt::format("; {}: CPU machines {:.3g} GB/s, worker machines {:.3g} GB/s", rates_name,
                                          cpu_rate / 1e9, worker_rate / 1e9);
  p.summary = fmt::format(
      "mixed placement: the {} servers on the {} worker machines take {} of the bytes each, the {} on CPU machines {} "
      "each (the optimal split{}{})",
      on_workers, n, Percent(split.colocated_share), k, Percent(split.cpu_share), predicted, rates);
  return p;
}

StatusOr<ServerPlacement> PlaceFromProbe(const std::vector<std::string>& worker_hosts,
                                         const std::vector<std::string>& server_hosts, MixedMode mode,
                                         const ProbeTimes& probe) {
  if (probe.seconds.size() != server_hosts.size() || !(probe.bytes > 0)) {
    return InvalidArgument(fmt::format("the start-up probe reported {} times of {} bytes for {} servers: expected one "
                                       "time per server and bytes > 0",
                                       probe.seconds.size(), probe.bytes, server_hosts.size()));
  }
  BYTEPS_ASSIGN_OR_RETURN(ServerPlacement formula, PlaceServers(worker_hosts, server_hosts, mode));
  if (!formula.mixed) return formula;
  const int n = static_cast<int>(std::set<std::string>(worker_hosts.begin(), worker_hosts.end()).size());
  double cpu_rate = 0, worker_rate = 0;
  for (size_t s = 0; s < server_hosts.size(); ++s) {
    const double wire = probe.seconds[s];
    if (!(wire > 0)) {
      return InvalidArgument(fmt::format("the start-up probe of server {} reported a wire time of {} s: no rate can "
                                         "be read from it",
                                         s, wire));
    }
    const double rate = (n - (formula.colocated[s] ? 1 : 0)) * probe.bytes / wire;
    double& kind = formula.colocated[s] ? worker_rate : cpu_rate;
    kind = kind == 0 ? rate : std::min(kind, rate);
  }
  const std::string measured = fmt::format("measured NIC rates: CPU machines {:.3g} GB/s, worker machines {:.3g} GB/s",
                                           cpu_rate / 1e9, worker_rate / 1e9);
  if (std::max(cpu_rate, worker_rate) <= kMeasuredRateTolerance * std::min(cpu_rate, worker_rate)) {
    formula.summary += fmt::format(" ({}: within {:g}x of each other, so the formula's equal rates)", measured,
                                   kMeasuredRateTolerance);
    return formula;
  }
  return PlaceServers(worker_hosts, server_hosts, mode, cpu_rate, worker_rate, "measured NIC rates");
}

}  // namespace byteps::protocol
