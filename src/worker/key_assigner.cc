#include "worker/key_assigner.h"

#include <fmt/format.h>

#include <algorithm>

namespace byteps::worker {

KeyAssigner::KeyAssigner(int num_servers, size_t partition_bytes)
    : num_servers_(std::max(1, num_servers)), partition_bytes_(partition_bytes), loads_(num_servers_, 0) {}

StatusOr<uint32_t> KeyAssigner::Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size) {
  auto it = keys_.find(name);
  uint32_t key;
  if (it != keys_.end()) {
    key = it->second;
  } else {
    if (plans_.size() >= kMaxTensors) {
      return InvalidArgument(fmt::format("cannot declare '{}': at most {} tensors per job", name, kMaxTensors));
    }
    key = static_cast<uint32_t>(plans_.size());
    keys_.emplace(name, key);
    plans_.emplace_back();
  }
  if (size && !plans_[key]) {
    BYTEPS_ASSIGN_OR_RETURN(TensorPlan * p, MakePlan(key, name, size->first, size->second, /*balanced=*/true));
    (void)p;
  } else if (size) {
    BYTEPS_ASSIGN_OR_RETURN(const TensorPlan* p, Plan(name, size->first, size->second));
    (void)p;
  }
  return key;
}

StatusOr<const TensorPlan*> KeyAssigner::Plan(const std::string& name, size_t bytes, DataType dtype) {
  BYTEPS_ASSIGN_OR_RETURN(uint32_t key, Declare(name));
  auto& plan = plans_[key];
  if (!plan) {
    BYTEPS_ASSIGN_OR_RETURN(TensorPlan * p, MakePlan(key, name, bytes, dtype, /*balanced=*/false));
    return static_cast<const TensorPlan*>(p);
  }
  if (plan->bytes != bytes || plan->dtype != dtype) {
    return InvalidArgument(fmt::format(
        "tensor '{}' was first used with {} bytes of {} and now with {} bytes of {}; a name must keep its "
        "size and dtype",
        name, plan->bytes, DataTypeName(plan->dtype), bytes, DataTypeName(dtype)));
  }
  return static_cast<const TensorPlan*>(&*plan);
}

StatusOr<TensorPlan*> KeyAssigner::MakePlan(uint32_t declared_key, const std::string& name, size_t bytes,
                                            DataType dtype, bool balanced) {
  auto ranges = SplitIntoPartitions(bytes, partition_bytes_, DataTypeSize(dtype));
  if (ranges.size() > kMaxPartitionsPerTensor) {
    return InvalidArgument(fmt::format("tensor '{}' of {} bytes needs {} partitions (max {}); raise "
                                       "BYTEPS_PARTITION_BYTES",
                                       name, bytes, ranges.size(), kMaxPartitionsPerTensor));
  }
  TensorPlan p;
  p.name = name;
  p.declared_key = declared_key;
  p.bytes = bytes;
  p.dtype = dtype;
  const size_t start = protocol::PlaceKey(protocol::MakeKey(declared_key, 0), num_servers_);
  for (size_t i = 0; i < ranges.size(); ++i) {
    PartitionPlan pp;
    pp.key = protocol::MakeKey(declared_key, static_cast<uint32_t>(i));
    pp.range = ranges[i];
    if (balanced) {
      pp.server = static_cast<int>(std::min_element(loads_.begin(), loads_.end()) - loads_.begin());
      // Count at least one byte so that empty partitions still rotate over servers.
      loads_[pp.server] += std::max<size_t>(pp.range.length, 1);
    } else {
      pp.server = static_cast<int>((start + i) % num_servers_);
    }
    p.partitions.push_back(pp);
  }
  plans_[declared_key] = std::move(p);
  return &*plans_[declared_key];
}

}  // namespace byteps::worker
