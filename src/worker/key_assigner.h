// Tensor names -> keys, and partitions -> servers. Every worker must reach the same answers, so
// everything here depends only on the sequence of Declare calls (which the plugins make in the same
// order on every worker):
//  - declared key = index in declaration order; partition key = protocol::MakeKey(declared, partition);
//  - when a tensor is declared with its size, its partitions go to the least-loaded servers by
//    bytes so far (ties: lowest rank) — byte-balanced, deterministic;
//  - a tensor first seen without a size goes round-robin over the servers from the one
//    protocol::PlaceKey picks for its first partition (does not change the byte loads).
// Threading: not thread-safe; the engine serialises calls.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "protocol/key_layout.h"
#include "worker/partitioner.h"

namespace byteps::worker {

struct PartitionPlan {
  uint64_t key = 0;
  int server = 0;
  PartitionRange range;
};

struct TensorPlan {
  std::string name;
  uint32_t declared_key = 0;
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  std::vector<PartitionPlan> partitions;
};

using protocol::kMaxPartitionsPerTensor;
using protocol::kMaxTensors;

class KeyAssigner {
 public:
  KeyAssigner(int num_servers, size_t partition_bytes);

  // Returns the declared key of `name`, declaring it if new. With a size, also plans it now.
  StatusOr<uint32_t> Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size = std::nullopt);
  // The plan for `name` with this size/dtype; plans it on first use. An existing plan with a
  // different size or dtype is an InvalidArgument error naming the tensor.
  StatusOr<const TensorPlan*> Plan(const std::string& name, size_t bytes, DataType dtype);
  const std::vector<uint64_t>& server_loads() const { return loads_; }
  // The partition size of tensors planned from now on (plans made already keep theirs).
  void set_partition_bytes(size_t bytes) { partition_bytes_ = bytes; }
  size_t partition_bytes() const { return partition_bytes_; }

 private:
  StatusOr<TensorPlan*> MakePlan(uint32_t declared_key, const std::string& name, size_t bytes, DataType dtype,
                                 bool balanced);

  int num_servers_;
  size_t partition_bytes_;
  std::unordered_map<std::string, uint32_t> keys_;
  // By declared key. A deque: Plan() hands out pointers that must survive later declarations.
  std::deque<std::optional<TensorPlan>> plans_;
  std::vector<uint64_t> loads_;                   // bytes per server from balanced plans
};

}  // namespace byteps::worker
