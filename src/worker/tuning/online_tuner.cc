#include "worker/tuning/online_tuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/logging.h"

namespace byteps::worker::tuning {

namespace {
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
// Throughputs: the mean of the larger half (the fastest iterations).
double FastestHalfMean(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end(), std::greater<>());
  const size_t k = (v.size() + 1) / 2;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += v[i];
  return sum / static_cast<double>(k);
}
}  // namespace

OnlineTuner::OnlineTuner(const OnlineTunerOptions& options) : options_(options) {
  options_.per_visit = std::max(1, options_.per_visit);
  options_.passes = std::max(1, options_.passes);
  options_.warmup = std::max(0, options_.warmup);
  std::vector<size_t> values = options_.values;
  if (values.empty()) {
    for (double f : options_.factors) {
      double want = std::round(static_cast<double>(options_.model_credit) * f);
      values.push_back(std::clamp(static_cast<size_t>(std::max(want, 1.0)), std::max<size_t>(options_.min_credit, 1),
                                  std::max(options_.max_credit, options_.min_credit)));
    }
  } else {
    options_.model_credit = values[0];
  }
  for (size_t c : values) {
    bool dup = std::any_of(candidates_.begin(), candidates_.end(), [&](const Candidate& k) { return k.credit == c; });
    if (!dup) candidates_.push_back(Candidate{c, {}});
  }
  current_ = options_.model_credit;
  // Nothing to compare (no credit, or every factor clamps to one value): settled from the start.
  if (options_.model_credit == 0 || candidates_.size() < 2) {
    settled_ = true;
    report_ = "kept: no other candidate within the allowed range";
  }
}

int OnlineTuner::settle_iterations() const {
  return options_.warmup + options_.passes * options_.per_visit * static_cast<int>(candidates_.size());
}

size_t OnlineTuner::CandidateAt(int i) const {
  return static_cast<size_t>(i / options_.per_visit) % candidates_.size();
}

std::optional<size_t> OnlineTuner::OnPushPull(uint32_t tensor, size_t bytes, IterationClock::Clock::time_point now) {
  if (settled_) return std::nullopt;
  auto it = clock_.OnPushPull(tensor, bytes, now);
  if (!it) return std::nullopt;
  return OnIteration(*it);
}

std::optional<size_t> OnlineTuner::OnIteration(const IterationClock::Iteration& it) {
  if (settled_) return std::nullopt;
  if (it.bytes < options_.min_iteration_bytes) {
    // A job whose iterations never reach the threshold: the setting cannot matter, stop watching.
    if (++small_in_a_row_ < settle_iterations()) return std::nullopt;
    const size_t before = current_;
    settled_ = true;
    current_ = candidates_[0].credit;
    report_ = fmt::format("kept the model's value: {} iterations in a row pushed fewer than {} bytes, too few for "
                          "the {} to matter",
                          small_in_a_row_, options_.min_iteration_bytes, options_.what);
    if (current_ == before) return std::nullopt;
    return current_;
  }
  small_in_a_row_ = 0;
  const int i = iterations_++ - options_.warmup;  // the iteration that just finished
  if (i >= 0 && it.seconds > 0) {
    candidates_[CandidateAt(i)].throughput.push_back(static_cast<double>(it.bytes) / it.seconds);
  }
  BYTEPS_LOG(Debug, "online tuner ({}): iteration {} with {} bytes: {} bytes in {:.1f} ms{}", options_.what, iterations_,
             current_, it.bytes, it.seconds * 1e3, i < 0 ? " (warm-up)" : "");
  const size_t before = current_;
  if (iterations_ >= settle_iterations()) {
    Settle();
  } else {
    current_ = candidates_[CandidateAt(std::max(0, iterations_ - options_.warmup))].credit;
  }
  if (current_ == before) return std::nullopt;
  return current_;
}

void OnlineTuner::Settle() {
  settled_ = true;
  std::vector<double> med;
  for (const Candidate& c : candidates_) {
    med.push_back(options_.fastest_half ? FastestHalfMean(c.throughput) : Median(c.throughput));
  }
  size_t best = 0;
  for (size_t k = 1; k < candidates_.size(); ++k) {
    if (med[k] > med[best]) best = k;
  }
  if (best != 0 && med[best] < med[0] * (1 + options_.keep_margin)) best = 0;
  current_ = candidates_[best].credit;
  std::string table;
  for (size_t k = 0; k < candidates_.size(); ++k) {
    table += fmt::format("{}{} bytes {:.0f} MB/s", k == 0 ? "" : ", ", candidates_[k].credit, med[k] / 1e6);
  }
  report_ = fmt::format("{} after {} iterations ({} iteration throughput: {}; the model's value stays "
                        "unless another is {:.0f}% faster)",
                        best == 0 ? "kept the model's value" : "measured faster than the model's",
                        iterations_, options_.fastest_half ? "fastest-half mean" : "median", table,
                        options_.keep_margin * 100);
}

}  // namespace byteps::worker::tuning
