#include "protocol/name_planner.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/dtype.h"
#include "protocol/partitioner.h"

namespace byteps::protocol {

NamePlanner::NamePlanner(int num_servers, std::vector<double> shares) : num_servers_(std::max(1, num_servers)) {
  SetShares(std::move(shares));
}

void NamePlanner::SetShares(std::vector<double> shares) {
  shares_ = std::move(shares);
  if (static_cast<int>(shares_.size()) != num_servers_ ||
      std::none_of(shares_.begin(), shares_.end(), [](double s) { return s > 0; })) {
    shares_.assign(num_servers_, 1.0);  // equal: byte-balanced
  }
}

int NamePlanner::LeastLoaded(const std::vector<uint64_t>& loads, uint64_t length) const {
  // Tijdeman's chairman assignment (1980), in bytes: among the servers at least a margin below
  // their quota of the bytes placed so far (this partition included), the one whose quota would
  // run furthest ahead of it soonest (the earliest deadline). Each server then stays within one
  // partition of its share; with equal shares this is the least loaded by bytes. Ties: lowest
  // rank. A server with no share takes nothing.
  double placed = static_cast<double>(length), total_share = 0;
  int positive = 0;
  for (int s = 0; s < num_servers_; ++s) {
    placed += static_cast<double>(loads[s]);
    total_share += shares_[s];
    if (shares_[s] > 0) ++positive;
  }
  const double len = static_cast<double>(length);
  const double margin = positive > 1 ? len / (2.0 * positive - 2) : 0;
  int best = -1, fallback = -1;
  double best_deadline = 0, best_deficit = 0;
  for (int s = 0; s < num_servers_; ++s) {
    if (!(shares_[s] > 0)) continue;
    const double share = shares_[s] / total_share;
    const double deficit = share * placed - static_cast<double>(loads[s]);
    if (fallback < 0 || deficit > best_deficit) {
      fallback = s;
      best_deficit = deficit;
    }
    if (deficit < margin) continue;
    const double deadline = (static_cast<double>(loads[s]) + len - margin) / share;
    if (best < 0 || deadline < best_deadline) {
      best = s;
      best_deadline = deadline;
    }
  }
  return best >= 0 ? best : fallback;  // none eligible (unequal partition sizes): the largest deficit
}

StatusOr<NamePlan> NamePlanner::Plan(const NameRequest& r) {
  if (r.generation >= kMaxGenerations) {
    return InvalidArgument(fmt::format("tensor '{}': partition generation {} (at most {})", r.name, r.generation,
                                       kMaxGenerations));
  }
  auto found = indices_.find({r.name, r.incarnation});
  uint32_t index;
  if (found != indices_.end()) {
    index = found->second;
  } else {
    if (indices_.size() >= kMaxTensors) {
      return InvalidArgument(fmt::format("cannot declare '{}' (incarnation {}): at most {} tensors per job (each "
                                         "size a name is used at counts once)",
                                         r.name, r.incarnation, kMaxTensors));
    }
    index = static_cast<uint32_t>(indices_.size());
    indices_.emplace(NameInc{r.name, r.incarnation}, index);
  }
  if (!r.sized) {
    NamePlan p;
    p.name = r.name;
    p.incarnation = r.incarnation;
    p.generation = r.generation;
    p.index = index;
    p.declared_key = MakeDeclaredKey(r.generation, index);
    return p;
  }
  auto key = std::make_tuple(r.name, r.incarnation, r.generation);
  if (auto it = plans_.find(key); it != plans_.end()) {
    const NamePlan& first = it->second;
    if (first.bytes == r.bytes && first.dtype == r.dtype) return first;
    // The workers disagree: this one gets its own size under the same keys (the servers fail the
    // tensor on every worker, naming both declarations); the loads stay as the first plan left them.
    NameRequest same = r;
    same.partition_bytes = std::max<uint64_t>(r.partition_bytes, 1);
    return MakePlan(same, index, nullptr);
  }
  std::vector<uint64_t>& loads = loads_[r.generation];
  if (loads.empty()) loads.assign(num_servers_, 0);
  std::vector<uint64_t> tentative = loads;  // applied only when the plan is valid
  BYTEPS_ASSIGN_OR_RETURN(NamePlan p, MakePlan(r, index, &tentative));
  if (!r.name.starts_with(kUncountedPrefix)) loads = std::move(tentative);
  return plans_.emplace(std::move(key), std::move(p)).first->second;
}

StatusOr<NamePlan> NamePlanner::MakePlan(const NameRequest& r, uint32_t index, std::vector<uint64_t>* loads) const {
  auto dtype = DataTypeFromCode(r.dtype);
  if (!dtype || DataTypeSize(*dtype) == 0) {
    return InvalidArgument(fmt::format("tensor '{}': unknown dtype code {}", r.name, r.dtype));
  }
  const size_t elem = DataTypeSize(*dtype);
  if (r.bytes % elem != 0) {
    return InvalidArgument(fmt::format("tensor '{}': {} bytes is not a whole number of {} elements", r.name, r.bytes,
                                       DataTypeName(*dtype)));
  }
  if (r.spread && (r.bytes == 0 || r.bytes % (elem * num_servers_) != 0)) {
    return InvalidArgument(fmt::format("tensor '{}': {} bytes cannot be spread as one partition per server over {} "
                                       "servers in whole {} elements",
                                       r.name, r.bytes, num_servers_, DataTypeName(*dtype)));
  }
  if (r.server >= num_servers_ || r.server < -1) {
    return InvalidArgument(fmt::format("tensor '{}': its attribute '{}' must be a server rank from 0 to {}{}", r.name,
                                       kAttrServer, num_servers_ - 1,
                                       r.server < -1 ? "" : fmt::format(", not {}", r.server)));
  }
  // A whole tensor is one partition (a 0-byte tensor too: SplitIntoPartitions gives it one); a
  // spread one is one partition per server.
  const uint64_t split_at = r.spread  ? r.bytes / num_servers_
                            : r.whole ? std::max<uint64_t>(r.bytes, elem)
                                      : r.partition_bytes;
  auto ranges = SplitIntoPartitions(r.bytes, split_at, elem);
  if (ranges.size() > kMaxPartitionsPerTensor) {
    return InvalidArgument(fmt::format("tensor '{}' of {} bytes needs {} partitions of {} bytes (max {}); raise "
                                       "BYTEPS_PARTITION_BYTES",
                                       r.name, r.bytes, ranges.size(), r.partition_bytes, kMaxPartitionsPerTensor));
  }
  NamePlan p;
  p.name = r.name;
  p.incarnation = r.incarnation;
  p.generation = r.generation;
  p.index = index;
  p.declared_key = MakeDeclaredKey(r.generation, index);
  p.sized = true;
  p.bytes = r.bytes;
  p.dtype = r.dtype;
  const size_t start = PlaceKey(MakeKey(p.declared_key, 0), num_servers_);
  for (size_t i = 0; i < ranges.size(); ++i) {
    NamePartition pp;
    pp.key = MakeKey(p.declared_key, static_cast<uint32_t>(i));
    pp.offset = ranges[i].offset;
    pp.length = ranges[i].length;
    if (r.server >= 0) {
      pp.server = r.server;  // a probe of one server's links; the loads stay
    } else if (r.spread) {
      pp.server = static_cast<int>(i);  // every server gets its own partition; the loads stay
    } else if (loads != nullptr) {
      // Count at least one byte so that empty partitions still rotate over servers.
      pp.server = LeastLoaded(*loads, std::max<uint64_t>(pp.length, 1));
      (*loads)[pp.server] += std::max<uint64_t>(pp.length, 1);
    } else {
      pp.server = static_cast<int>((start + i) % num_servers_);
    }
    p.partitions.push_back(pp);
  }
  return p;
}

}  // namespace byteps::protocol
