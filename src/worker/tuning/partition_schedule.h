// The online tuner's partition phase as a function of each tensor's own use count, so that every
// worker sends the same use of a tensor to the same keys whatever order its threads push in.
//
// A partition size is a generation of the key layout (planning/key_assigner.h). Which generation
// use u of a tensor (counted per name and incarnation: every worker makes the same operations of
// each name, so u is the same everywhere) runs in depends only on u and on two values agreed once
// through worker 0 (engine_tuning.cc):
//   uses [0, W)        generation 0 (warm-up)
//   uses [W, W+P)      generation 0, measured
//   uses [W+P, W+2P)   generation 1 (the candidate), measured -- if exploring was agreed
//   uses [W+2P, W+2P+L) generation 1 still (L: the verdict's lag, not measured)
//   uses >= W+2P+L     the agreed verdict (0 or 1)
// "Exploring" is worker 0's word on whether the model is small enough to sit on the servers in two
// generations at once; a worker issues that agreement when its first tensor reaches use W and the
// first use that needs it (W+P) waits for it. The verdict is worker 0's measurement; a worker issues
// it when its first tensor reaches use W+2P, and the uses from W+2P+L on wait for it. The lag lets
// the agreement's round trip overlap an iteration (with L = 0 every worker would stop at its first
// use W+2P until every other got there), and lets a thread that issued it go on to push tensors
// that the other workers may need before they reach use W+2P themselves. Without exploring every
// use stays in generation 0. For a regular training stream use k of every tensor is iteration k,
// so worker 0's iteration clock measures exactly these blocks.
// Threading: a value type; const methods only.
#pragma once

#include <cstdint>

namespace byteps::worker::tuning {

class PartitionSchedule {
 public:
  // What a use needs agreed before its generation is known.
  enum class Needs { kNothing, kExplore, kVerdict };

  PartitionSchedule(uint32_t warmup, uint32_t per_visit, uint32_t lag)
      : warmup_(warmup), per_visit_(per_visit < 1 ? 1 : per_visit), lag_(lag) {}

  // The first use at which a worker issues the explore agreement (its first tensor to get there).
  uint32_t explore_issue() const { return warmup_; }
  uint32_t candidate_from() const { return warmup_ + per_visit_; }
  // The first use at which a worker issues the verdict agreement (its first tensor to get there).
  uint32_t verdict_issue() const { return warmup_ + 2 * per_visit_; }
  // The first use that runs in the verdict's generation.
  uint32_t verdict_from() const { return verdict_issue() + lag_; }

  Needs NeedsAt(uint32_t use) const {
    if (use < candidate_from()) return Needs::kNothing;
    if (use < verdict_from()) return Needs::kExplore;
    return Needs::kVerdict;
  }
  // The generation of `use`; `explore` is read from candidate_from() on, `verdict` from
  // verdict_from() on (and only when exploring).
  uint32_t GenerationAt(uint32_t use, bool explore, uint32_t verdict) const {
    if (use < candidate_from() || !explore) return 0;
    return use < verdict_from() ? 1 : verdict;
  }

 private:
  uint32_t warmup_;
  uint32_t per_visit_;
  uint32_t lag_;
};

}  // namespace byteps::worker::tuning
