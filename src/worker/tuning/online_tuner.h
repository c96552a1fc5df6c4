// Online tuning during the first iterations of training (BYTEPS_AUTOTUNE): one tuner per
// setting explored, the partition size first (when every worker explores it), then the credit.
//
// The start-up model picks the credit from one probe; the online tuner checks it against the
// job's own iterations. After `warmup` iterations (the first one carries declarations, buffer
// growth and the parameters' broadcast), it visits the candidates model x {1, 2, 1/2} in turn,
// `per_visit` iterations each, `passes` times (interleaved, so a drift in the job's speed hits
// every candidate alike), then keeps the candidate with the best median throughput (bytes pushed
// per second of iteration). The model's own value stays unless another beats it by `keep_margin`,
// so noise does not move it. With the defaults it settles after 2 + 2 x 3 x 2 = 14 iterations.
// An iteration that pushes less than `min_iteration_bytes` (the model's credit: fewer bytes than
// that never meet the cap, so every candidate would run it alike) is not counted at all; after
// settle_iterations() of them in a row the tuner settles on the model's value.
//
// A new value applies from the next iteration's first push_pull, never in the middle of one.
// The credit is each worker's own (a cap on its bytes in flight): each keeps its own verdict, on
// its own iteration boundaries. The partition size fixes the key layout on the servers, and
// iteration boundaries differ between workers whose threads push in other orders: its candidates
// are given explicitly (`values`), the keys follow each tensor's own use count instead
// (partition_schedule.h), and this tuner only measures worker 0's iterations for the verdict that
// everyone applies (engine_tuning.cc).
// Threading: not thread-safe; the engine calls it under its planning lock.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "worker/tuning/iteration_clock.h"

namespace byteps::worker::tuning {

struct OnlineTunerOptions {
  std::string what = "credit";  // the setting, for the report
  size_t model_credit = 0;  // bytes, > 0 (the start-up choice)
  size_t min_credit = 0;    // candidates are clamped into [min, max]
  size_t max_credit = size_t{1} << 30;
  // Explicit candidates ([0]: the start-up choice), used instead of model_credit x factors.
  std::vector<size_t> values;
  uint64_t min_iteration_bytes = 0;
  std::vector<double> factors = {1.0, 2.0, 0.5};  // the first is the model's own value
  // How a candidate's iterations are summarised: their median, or the mean of their fastest
  // half (for candidates whose first visits carry a warm-up that only adds time).
  bool fastest_half = false;
  int warmup = 2;
  int per_visit = 2;
  int passes = 2;
  double keep_margin = 0.03;
};

// settle_iterations() of the credit tuner with the default options.
inline constexpr int kOnlineSettleIterations = 14;
// The partition-size phase that runs before it when the partition is explored: 2 warm-up
// iterations, then each candidate for a block of 4 iterations, summarised by the mean of its 2
// fastest: a new generation's first iterations also initialise its keys on the servers and grow
// buffers for the new size, which only adds time (measured on the testbed, 1 MiB partitions after
// 256 KiB ones: 1.65, 0.82, 0.72, 0.72 s). Blocks rather than alternation: switching sizes every
// iteration kept both sizes from warming up (1 MiB: 1.40, 0.96, 0.73, 0.72 s on four visits, while
// 256 KiB slowed from 0.85 to 0.93 s).
inline constexpr int kPartitionWarmup = 2;
inline constexpr int kPartitionPerVisit = 4;
inline constexpr int kPartitionPasses = 1;
inline constexpr int kPartitionSettleIterations = kPartitionWarmup + 2 * kPartitionPerVisit * kPartitionPasses;
// Uses of each tensor that stay in the candidate's size while worker 0's verdict travel
// (partition_schedule.h): the partition phase takes kPartitionSettleIterations + this many.
inline constexpr int kPartitionVerdictLag = 1;
// The credit phase after a partition phase: no warm-up of its own, one iteration per visit, three
// passes over the three candidates (the partition phase's samples matter more: its candidates
// differ by more).
inline constexpr int kCreditAfterPartitionPerVisit = 1;
inline constexpr int kCreditAfterPartitionPasses = 3;
inline constexpr int kOnlineSettleIterationsAfterPartition = 3 * kCreditAfterPartitionPerVisit * kCreditAfterPartitionPasses;

class OnlineTuner {
 public:
  explicit OnlineTuner(const OnlineTunerOptions& options);

  // A push_pull starting now (the engine's hook): returns a new value to apply before it, at
  // an iteration boundary only.
  std::optional<size_t> OnPushPull(uint32_t tensor, size_t bytes, IterationClock::Clock::time_point now);
  // One finished iteration, run entirely with current(); returns a new credit for the next one.
  // A small one (below min_iteration_bytes) is ignored.
  std::optional<size_t> OnIteration(const IterationClock::Iteration& it);

  size_t current() const { return current_; }
  bool settled() const { return settled_; }
  int iterations() const { return iterations_; }
  // How many iterations the whole exploration takes.
  int settle_iterations() const;
  // Once settled: the verdict and each candidate's median throughput.
  const std::string& report() const { return report_; }

 private:
  struct Candidate {
    size_t credit = 0;
    std::vector<double> throughput;  // bytes/s, one per measured iteration
  };
  // The candidate iteration `i` (counted from the first after the warm-up) runs with.
  size_t CandidateAt(int i) const;
  void Settle();

  OnlineTunerOptions options_;
  IterationClock clock_;
  std::vector<Candidate> candidates_;  // [0]: the model's
  size_t current_ = 0;
  int iterations_ = 0;
  int small_in_a_row_ = 0;  // iterations below min_iteration_bytes since the last counted one
  bool settled_ = false;
  std::string report_;
};

}  // namespace byteps::worker::tuning
