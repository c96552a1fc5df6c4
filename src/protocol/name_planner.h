// The name service's planner: tensor names -> keys, and partitions -> servers, for the whole job.
// In a distributed job the scheduler runs the one NamePlanner and every worker process asks it on
// the first use of a (name, incarnation, generation) (kNameRequest / kNameReply); without a
// scheduler the worker runs its own. Whoever asks first decides, so the answers never depend on
// the order in which each worker uses its tensors:
//  - a (name, incarnation) gets the next dense index on its first request (first come, first
//    served); a name used at another size or dtype is a new incarnation, hence a new index;
//  - the declared key of a tensor in generation g is MakeDeclaredKey(g, index) (key_layout.h), so
//    each generation's partitions have keys of their own on the servers;
//  - a sized request plans the partitions: split at the request's partition size (a `whole`
//    request, an Adasum tensor, is never split: one partition of the whole tensor; a `spread`
//    request, the join key, is one partition per server, partition i on server i; a request pinned to
//    a `server`, the start-up probe's, has every partition there), each other partition
//    on the least-loaded server by bytes so far in its generation relative to the server's share
//    (equal shares unless given: mixed_split.h's for a mixed placement; ties: lowest rank), in the
//    order the requests arrive. The first plan of a (name, incarnation, generation) is everyone's: later
//    requests get it back whatever partition size they carry.
//  - the start-up tuning's probe tensors (names starting with kUncountedPrefix) are placed like the
//    others but leave the loads as they were: one-off pushes must not skew where the model's
//    tensors go (with them counted, a small model's tensors could all land on one server);
//  - a request whose size or dtype differs from that first plan (the workers disagree) gets a plan
//    of its own size under the same keys, placed without touching the loads (PlaceKey): the servers
//    then see both declarations and fail the tensor on every worker alike, naming both.
// Threading: not thread-safe; the owner serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "protocol/control.h"
#include "protocol/key_layout.h"

namespace byteps::protocol {

// Tensors whose bytes the planner does not count (the worker's start-up and online tuning
// probes and agreements, worker/tuning/startup_agreement.h).
inline constexpr const char* kUncountedPrefix = "__byteps.tune.";

class NamePlanner {
 public:
  // `shares`: each server's share of the bytes (any scale; a server with 0 takes none); empty, or
  // not one per server, or none positive: equal.
  explicit NamePlanner(int num_servers, std::vector<double> shares = {});
  // New shares (as above) for what is placed from now on; plans made so far stay everyone's.
  void SetShares(std::vector<double> shares);

  // The plan of r's (name, incarnation, generation); the same answer for every request of it
  // (see above). Errors (InvalidArgument, naming the tensor): too many tensors, a generation past
  // kMaxGenerations, a tensor that would need more than kMaxPartitionsPerTensor partitions.
  StatusOr<NamePlan> Plan(const NameRequest& r);
  // Indices handed out so far.
  size_t tensors() const { return indices_.size(); }

 private:
  using NameInc = std::pair<std::string, uint32_t>;
  StatusOr<NamePlan> MakePlan(const NameRequest& r, uint32_t index, std::vector<uint64_t>* loads) const;
  // The server for a partition of `length` bytes given the loads so far (see above).
  int LeastLoaded(const std::vector<uint64_t>& loads, uint64_t length) const;

  int num_servers_;
  std::vector<double> shares_;  // per server
  std::map<NameInc, uint32_t> indices_;
  std::map<std::tuple<std::string, uint32_t, uint32_t>, NamePlan> plans_;  // sized plans
  std::unordered_map<uint32_t, std::vector<uint64_t>> loads_;  // by generation: bytes per server
};

}  // namespace byteps::protocol
