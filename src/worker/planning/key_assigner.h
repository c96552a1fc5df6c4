// Tensor names -> keys, and partitions -> servers. Every worker must reach the same answers, so
// everything here depends only on the sequence of Declare calls (which the plugins make in the same
// order on every worker) and on the generation switches (which every worker makes at the same
// iteration boundary):
//  - a tensor's index = its place in declaration order (stable for the job);
//  - a generation is one partition size; the declared key of a tensor in generation g is
//    (g << 16) | index, so each generation's partitions have keys of their own on the servers
//    (fresh state, rounds from 1) and no key ever changes its size; generation 0 is the start-up
//    partition size, the online tuner adds others (engine_tuning.cc);
//  - partition key = protocol::MakeKey(declared key, partition);
//  - when a tensor is declared with its size, its partitions go to the least-loaded servers by
//    bytes so far in its generation (ties: lowest rank) — byte-balanced, deterministic;
//  - a tensor first seen without a size goes round-robin over the servers from the one
//    protocol::PlaceKey picks for its first partition (does not change the byte loads).
// Switching to a new generation plans every tensor known so far in it, in declaration order, so
// the balanced placement is the same on every worker. Plans never move: an operation in flight
// keeps the plan of the generation it started in.
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
#include "worker/planning/partitioner.h"

namespace byteps::worker::planning {

struct PartitionPlan {
  uint64_t key = 0;
  int server = 0;
  PartitionRange range;
};

struct TensorPlan {
  std::string name;
  uint32_t index = 0;         // declaration order: the same in every generation
  uint32_t declared_key = 0;  // (generation << 16) | index: the keys' high bits
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  std::vector<PartitionPlan> partitions;
};

using protocol::kMaxPartitionsPerTensor;
using protocol::kMaxTensors;
inline constexpr uint32_t kMaxGenerations = 16;
// The generation of a declared key ((generation << 16) | index).
inline constexpr uint32_t GenerationOf(uint32_t declared_key) { return declared_key >> 16; }

class KeyAssigner {
 public:
  KeyAssigner(int num_servers, size_t partition_bytes);

  // Returns the index of `name`, declaring it if new. With a size, also plans it now.
  StatusOr<uint32_t> Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size = std::nullopt);
  // The plan for `name` with this size/dtype in the current generation; plans it on first use. A
  // tensor first used with a different size or dtype is an InvalidArgument error naming it.
  StatusOr<const TensorPlan*> Plan(const std::string& name, size_t bytes, DataType dtype);
  // Bytes per server from the balanced plans of the current generation.
  const std::vector<uint64_t>& server_loads() const { return gens_[current_].loads; }
  // The partition size of the current generation (before any plan exists: sets it).
  void set_partition_bytes(size_t bytes) { gens_[current_].partition_bytes = bytes; }
  size_t partition_bytes() const { return gens_[current_].partition_bytes; }
  // Makes generation `g` current, with partitions of `partition_bytes` if it is new (then every
  // tensor known so far is planned in it, in declaration order). An existing generation keeps its
  // size. Errors: g >= kMaxGenerations, a size that does not match the existing generation, or a
  // tensor that would need too many partitions (nothing changes then).
  Status UseGeneration(uint32_t g, size_t partition_bytes);
  uint32_t generation() const { return current_; }
  // The bytes of every tensor whose size is known (one generation's share of the servers' memory).
  uint64_t known_bytes() const { return known_bytes_; }

 private:
  struct Tensor {
    std::string name;
    bool sized = false;     // size and dtype known (planned in some generation)
    bool balanced = false;  // declared with its size: byte-balanced placement
    size_t bytes = 0;
    DataType dtype = DataType::kFloat32;
  };
  struct Generation {
    size_t partition_bytes = 0;
    std::deque<std::optional<TensorPlan>> plans;  // by index; a deque: plans never move
    std::vector<uint64_t> loads;                  // bytes per server from balanced plans
  };
  StatusOr<TensorPlan> MakePlan(const Generation& gen, uint32_t g, uint32_t index, bool balanced,
                                std::vector<uint64_t>* loads) const;
  StatusOr<const TensorPlan*> PlanInCurrent(uint32_t index);

  int num_servers_;
  std::unordered_map<std::string, uint32_t> keys_;
  std::vector<Tensor> tensors_;  // by index
  std::deque<Generation> gens_;  // a deque: adding one never moves the others (or their plans)
  uint32_t current_ = 0;
  uint64_t known_bytes_ = 0;
};

}  // namespace byteps::worker::planning
