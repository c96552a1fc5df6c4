#include "worker/planning/key_assigner.h"

#include <fmt/format.h>

#include <algorithm>

namespace byteps::worker::planning {

KeyAssigner::KeyAssigner(int num_servers, size_t partition_bytes) : num_servers_(std::max(1, num_servers)) {
  gens_.push_back(Generation{partition_bytes, {}, std::vector<uint64_t>(num_servers_, 0)});
}

StatusOr<uint32_t> KeyAssigner::Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size) {
  auto it = keys_.find(name);
  uint32_t index;
  if (it != keys_.end()) {
    index = it->second;
  } else {
    if (tensors_.size() >= kMaxTensors) {
      return InvalidArgument(fmt::format("cannot declare '{}': at most {} tensors per job", name, kMaxTensors));
    }
    index = static_cast<uint32_t>(tensors_.size());
    keys_.emplace(name, index);
    tensors_.push_back(Tensor{name});
  }
  if (size && !tensors_[index].sized) {
    Tensor& t = tensors_[index];
    t.sized = t.balanced = true;
    t.bytes = size->first;
    t.dtype = size->second;
    if (auto p = PlanInCurrent(index); !p.ok()) {
      t.sized = t.balanced = false;
      return p.status();
    }
    known_bytes_ += t.bytes;
  } else if (size) {
    BYTEPS_ASSIGN_OR_RETURN(const TensorPlan* p, Plan(name, size->first, size->second));
    (void)p;
  }
  return index;
}

StatusOr<const TensorPlan*> KeyAssigner::Plan(const std::string& name, size_t bytes, DataType dtype) {
  BYTEPS_ASSIGN_OR_RETURN(uint32_t index, Declare(name));
  Tensor& t = tensors_[index];
  if (!t.sized) {
    t.sized = true;
    t.bytes = bytes;
    t.dtype = dtype;
    auto p = PlanInCurrent(index);
    if (!p.ok()) t.sized = false;
    else known_bytes_ += bytes;
    return p;
  }
  if (t.bytes != bytes || t.dtype != dtype) {
    return InvalidArgument(fmt::format(
        "tensor '{}' was first used with {} bytes of {} and now with {} bytes of {}; a name must keep its "
        "size and dtype",
        name, t.bytes, DataTypeName(t.dtype), bytes, DataTypeName(dtype)));
  }
  return PlanInCurrent(index);
}

StatusOr<const TensorPlan*> KeyAssigner::PlanInCurrent(uint32_t index) {
  Generation& gen = gens_[current_];
  if (gen.plans.size() <= index) gen.plans.resize(index + 1);
  if (!gen.plans[index]) {
    BYTEPS_ASSIGN_OR_RETURN(TensorPlan p, MakePlan(gen, current_, index, tensors_[index].balanced, &gen.loads));
    gen.plans[index] = std::move(p);
  }
  return static_cast<const TensorPlan*>(&*gen.plans[index]);
}

Status KeyAssigner::UseGeneration(uint32_t g, size_t partition_bytes) {
  if (g >= kMaxGenerations) {
    return InvalidArgument(fmt::format("partition generation {} (at most {})", g, kMaxGenerations));
  }
  if (g < gens_.size()) {
    if (gens_[g].partition_bytes != partition_bytes) {
      return InvalidArgument(fmt::format("partition generation {} has {} byte partitions, not {}", g,
                                         gens_[g].partition_bytes, partition_bytes));
    }
    current_ = g;
    return Status::Ok();
  }
  if (g != gens_.size()) {
    return InvalidArgument(fmt::format("partition generation {} follows generation {}", g, gens_.size() - 1));
  }
  Generation gen{partition_bytes, {}, std::vector<uint64_t>(num_servers_, 0)};
  for (uint32_t i = 0; i < tensors_.size(); ++i) {
    gen.plans.emplace_back();
    if (!tensors_[i].sized) continue;
    auto p = MakePlan(gen, g, i, tensors_[i].balanced, &gen.loads);
    if (!p.ok()) return p.status();
    gen.plans[i] = std::move(p.value());
  }
  gens_.push_back(std::move(gen));
  current_ = g;
  return Status::Ok();
}

StatusOr<TensorPlan> KeyAssigner::MakePlan(const Generation& gen, uint32_t g, uint32_t index, bool balanced,
                                           std::vector<uint64_t>* loads) const {
  const Tensor& t = tensors_[index];
  auto ranges = SplitIntoPartitions(t.bytes, gen.partition_bytes, DataTypeSize(t.dtype));
  if (ranges.size() > kMaxPartitionsPerTensor) {
    return InvalidArgument(fmt::format("tensor '{}' of {} bytes needs {} partitions of {} bytes (max {}); raise "
                                       "BYTEPS_PARTITION_BYTES",
                                       t.name, t.bytes, ranges.size(), gen.partition_bytes, kMaxPartitionsPerTensor));
  }
  TensorPlan p;
  p.name = t.name;
  p.index = index;
  p.declared_key = (g << 16) | index;
  p.bytes = t.bytes;
  p.dtype = t.dtype;
  const size_t start = protocol::PlaceKey(protocol::MakeKey(p.declared_key, 0), num_servers_);
  for (size_t i = 0; i < ranges.size(); ++i) {
    PartitionPlan pp;
    pp.key = protocol::MakeKey(p.declared_key, static_cast<uint32_t>(i));
    pp.range = ranges[i];
    if (balanced) {
      pp.server = static_cast<int>(std::min_element(loads->begin(), loads->end()) - loads->begin());
      // Count at least one byte so that empty partitions still rotate over servers.
      (*loads)[pp.server] += std::max<size_t>(pp.range.length, 1);
    } else {
      pp.server = static_cast<int>((start + i) % num_servers_);
    }
    p.partitions.push_back(pp);
  }
  return p;
}

}  // namespace byteps::worker::planning
