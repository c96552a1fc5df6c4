// Tensor names -> keys and plans, on a worker process: a cache over the name service
// (protocol/name_planner.h). Every worker must reach the same answers whatever order it uses its
// tensors in, so nothing here is planned locally: the first use of a (name, incarnation,
// generation) asks the resolver (the scheduler in a distributed job, a local NamePlanner without
// one), which answers every worker alike; later uses hit the cache (no round trip).
//
// Names are scoped to the operations in flight. Per name the worker keeps its current incarnation
// and that incarnation's signature (bytes, dtype, op, attrs). A use with another signature
//  - while no operation of the name is in flight moves the name to incarnation + 1: a new key,
//    fresh server state; the old incarnation's keys are retired (the caller releases them on the
//    servers, with this worker's last round of each);
//  - while one is in flight is an InvalidArgument naming the tensor and both signatures.
// After an operation of the name fails in a way every worker sees alike (IsAgreedFailure), its
// next use moves to a new incarnation too, so one failed operation never poisons a name.
//
// Generations: a generation is one partition size; the online tuner adds them (engine_tuning.cc).
// A tensor's plan in a generation is agreed through the resolver on its first use there. Plans
// never move or go away: an operation in flight keeps the plan it started with. Which generation
// an operation uses is the scheduler's answer for its use number (counted per name and
// incarnation from 0, the same on every worker), or without a scheduler the current generation; a
// process set's tensor (attribute "members") always generation 0, without asking the scheduler
// (its agreements are the whole job's, which a worker outside the set would never reach).
// Once the scheduler calls a use final, the name's plans in other generations retire as soon as
// every earlier use has its round counted (Begun::retired).
//
// Threading: all methods are thread-safe. The resolver is called without the lock held (several
// threads may resolve unrelated names at once) and may block (bounded by its own deadline).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "protocol/control.h"
#include "protocol/key_layout.h"
#include "protocol/partitioner.h"

namespace byteps::worker::planning {

using protocol::PartitionRange;

struct PartitionPlan {
  uint64_t key = 0;
  int server = 0;
  PartitionRange range;
};

struct TensorPlan {
  std::string name;
  uint32_t index = 0;         // the name service's index of (name, incarnation)
  uint32_t declared_key = 0;  // MakeDeclaredKey(generation, index): the keys' high bits
  uint32_t incarnation = 0;
  uint32_t generation = 0;    // its partition generation
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  std::vector<PartitionPlan> partitions;
};

using protocol::kMaxGenerations;
using protocol::kMaxPartitionsPerTensor;
using protocol::kMaxTensors;
using protocol::GenerationOf;

// What a name keeps while it stays in one incarnation.
struct Signature {
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  std::string op = protocol::kOpSum;  // the KeyInit op: sum, min, max, prod, concat, adasum
  std::string attrs;                   // further declaration attributes (compared, not interpreted)
  bool operator==(const Signature&) const = default;
  std::string Describe() const;  // "400 bytes of float32 (sum)"
};

// Whether an operation's failure is one every worker sees alike (the servers refused the
// tensor's declaration: a size, dtype or attribute mismatch between workers), after which every
// worker moves the name to a new incarnation. The one place that decides it.
bool IsAgreedFailure(const Status& st);

// A retired plan and this worker's last round of it (0: none), for the servers' release.
struct Retired {
  const TensorPlan* plan = nullptr;
  uint32_t last_round = 0;
};

// Where one use of a name goes.
struct Placement {
  uint32_t generation = 0;
  // From this use on, the name's current incarnation uses only this generation.
  bool final = false;
};

class KeyAssigner {
 public:
  using Resolver = std::function<StatusOr<protocol::NamePlan>(const protocol::NameRequest&)>;
  // Places use `use` of `name` (an online tuner's schedule): called for every operation without
  // the lock held; it may block (bounded by its own deadline). Its errors fail that Begin.
  using Scheduler = std::function<StatusOr<Placement>(const std::string& name, uint32_t use)>;
  // `resolve` answers the name service's requests; `partition_bytes` is generation 0's size.
  KeyAssigner(Resolver resolve, size_t partition_bytes);
  // A resolver over a NamePlanner of this process's own (no scheduler).
  static Resolver LocalResolver(int num_servers);

  // Returns the index of `name`'s current incarnation, asking for it if new. With a size, also
  // plans it now in the current generation (a size other than the current one's, with nothing
  // in flight, moves the name to a new incarnation; the retired plans go to *retired).
  StatusOr<uint32_t> Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size,
                             std::vector<Retired>* retired);
  // A small dense number per name in this process (first use order), for the iteration clock.
  uint32_t LocalIndex(const std::string& name);

  struct Begun {
    const TensorPlan* plan = nullptr;
    std::vector<Retired> retired;  // the name moved to a new incarnation: release these
  };
  // One operation of `name` with `sig` starts: picks the incarnation (rules above) and the
  // generation (the scheduler's, else the current one), resolves its plan on first use there, and
  // counts the operation in flight and its round. Errors name the tensor. Every Begin is followed
  // by End, or Abandon if not submitted.
  StatusOr<Begun> Begin(const std::string& name, const Signature& sig);
  void Abandon(const TensorPlan& plan);
  // The operation completed with `st` (its last partition is done).
  void End(const TensorPlan& plan, const Status& st);
  // The online tuner left generation `g` behind: its plans with this worker's last rounds.
  std::vector<Retired> RetireGeneration(uint32_t g);

  // The partition size of the current generation (before any plan exists: sets it).
  void set_partition_bytes(size_t bytes);
  size_t partition_bytes() const;
  // Makes generation `g` current, with partitions of `partition_bytes` if it is new. An existing
  // generation keeps its size. Errors: g >= kMaxGenerations, a size that does not match the
  // existing generation, or a generation that skips one (nothing changes then).
  Status UseGeneration(uint32_t g, size_t partition_bytes);
  // Defines generation `g` (same rules) without making it current: for a scheduler's placements.
  Status AddGeneration(uint32_t g, size_t partition_bytes);
  // Set before the first operation; operations then take their generation from it.
  void set_scheduler(Scheduler scheduler);
  uint32_t generation() const;
  // The bytes of every name's current signature (one generation's share of the servers' memory).
  uint64_t known_bytes() const;

 private:
  struct Name {
    uint32_t local_index = 0;
    uint32_t incarnation = 0;
    std::optional<Signature> sig;  // none: declared without a size and not used yet
    int in_flight = 0;
    bool move_next = false;                        // an agreed failure: the next use moves on
    std::optional<uint32_t> index;                 // the current incarnation's index, once known
    std::map<uint32_t, const TensorPlan*> plans;   // the current incarnation's, by generation
    uint32_t uses = 0;                             // the current incarnation's operations begun
    int placing = 0;                               // of those, still waiting for placement or plan
    std::optional<uint32_t> final;                 // the generation a final placement settled on
  };
  StatusOr<Begun> Acquire(const std::string& name, const Signature& sig, bool op);
  // The rest of Acquire once the generation is known.
  StatusOr<Begun> Place(const std::string& name, const Signature& sig, bool op, uint32_t g, bool final, Begun out);
  // An operation's plan is known (under mu_): counts its round; retires the other generations once final.
  void Placed(Name& n, const TensorPlan& plan, bool final, std::vector<Retired>* retired);
  Status DefineLocked(uint32_t g, size_t partition_bytes);
  Name& NameLocked(const std::string& name);
  std::vector<Retired> RetireLocked(Name& n);

  const Resolver resolve_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Name> names_;      // references stay valid as it grows
  std::deque<TensorPlan> plans_;                     // never shrinks: operations point at plans
  std::unordered_map<uint32_t, uint32_t> rounds_;    // by declared key: operations begun
  std::vector<size_t> gens_;                         // partition bytes by generation
  uint32_t current_ = 0;
  Scheduler scheduler_;
  uint64_t known_bytes_ = 0;
};

}  // namespace byteps::worker::planning
