#include "worker/tuning/startup_agreement.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace byteps::worker::tuning {

namespace {

constexpr int64_t kVersion = 1;
using Vector = std::array<int64_t, 4>;

// Worker 0 contributes `mine`, everyone else zeros; everyone gets worker 0's values back.
StatusOr<Vector> Share(Collective& c, const std::string& name, bool is_rank0, const Vector& mine) {
  Vector v{};
  if (is_rank0) v = mine;
  BYTEPS_RETURN_IF_ERROR(c.PushPull(name, v.data(), sizeof(v), DataType::kInt64));
  if (v[0] != kVersion) {
    return Precondition(fmt::format(
        "start-up settings ('{}'): expected version {} from worker 0, the sum says {}: {}", name, kVersion, v[0],
        v[0] == 0 ? "no worker acts as worker 0 (check DMLC_WORKER_ID / BYTEPS_GLOBAL_RANK)"
        : v[0] > kVersion
            ? "several workers act as worker 0 (check DMLC_WORKER_ID / BYTEPS_GLOBAL_RANK)"
            : "the workers run different byteps versions"));
  }
  return v;
}

StatusOr<double> TimedPushPull(Collective& c, const std::string& name, std::vector<float>& buffer) {
  const auto t0 = std::chrono::steady_clock::now();
  BYTEPS_RETURN_IF_ERROR(c.PushPull(name, buffer.data(), buffer.size() * sizeof(float), DataType::kFloat32));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The probe: every worker makes the same push_pulls; the times are this worker's.
StatusOr<LinkEstimate> Probe(Collective& c) {
  c.SetPartitionBytes(kProbePartitionBytes);
  LinkEstimate link;
  double rtt = 1e9;
  for (int i = 0; i < 4; ++i) {
    int64_t x = 0;
    const auto t0 = std::chrono::steady_clock::now();
    BYTEPS_RETURN_IF_ERROR(c.PushPull("__byteps.tune.rtt", &x, sizeof(x), DataType::kInt64));
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) rtt = std::min(rtt, t);  // the first also absorbs the workers' skew at start
  }
  link.rtt_s = rtt;
  std::vector<float> small(kProbeSmallBytes / sizeof(float)), large(kProbeLargeBytes / sizeof(float));
  BYTEPS_RETURN_IF_ERROR(TimedPushPull(c, "__byteps.tune.bw.small", small).status());  // warms buffers up
  BYTEPS_ASSIGN_OR_RETURN(double t_small, TimedPushPull(c, "__byteps.tune.bw.small", small));
  BYTEPS_ASSIGN_OR_RETURN(double t_large, TimedPushPull(c, "__byteps.tune.bw.large", large));
  // The difference cancels what both pay (round trip, pipeline fill and tail).
  const double extra = static_cast<double>(kProbeLargeBytes - kProbeSmallBytes);
  link.goodput_Bps = t_large > t_small ? extra / (t_large - t_small) : kProbeLargeBytes / t_large;
  return link;
}

}  // namespace

StatusOr<StartupOutcome> AgreeOnSettings(Collective& c, const StartupOptions& o) {
  const bool probe = o.autotune && !(o.partition_pinned && o.credit_pinned);
  BYTEPS_ASSIGN_OR_RETURN(
      Vector plan,
      Share(c, "__byteps.tune.plan", o.is_rank0, {kVersion, probe ? 1 : 0, static_cast<int64_t>(o.partition_bytes), 0}));
  StartupOutcome out;
  out.partition_bytes = {static_cast<size_t>(plan[2]), "worker 0's configured value"};
  const auto configured_credit = [&](size_t partition, const char* why) {
    return Choice{static_cast<size_t>(o.credit_partitions) * partition,
                  fmt::format("{} ({} partitions)", why, o.credit_partitions)};
  };
  out.credit_bytes = configured_credit(out.partition_bytes.value,
                                       o.credit_pinned ? "set by BYTEPS_SCHEDULING_CREDIT" : "the default");
  if (plan[1] != 0) {
    out.probed = true;
    BYTEPS_ASSIGN_OR_RETURN(LinkEstimate mine, Probe(c));
    Vector decision{};
    DerivedSettings derived;
    if (o.is_rank0) {
      derived = Derive(mine, o.model);
      if (o.partition_pinned) derived.partition_bytes = {o.partition_bytes, "set by BYTEPS_PARTITION_BYTES"};
      decision = {kVersion, static_cast<int64_t>(derived.partition_bytes.value),
                  static_cast<int64_t>(derived.credit_bytes.value), static_cast<int64_t>(mine.goodput_Bps)};
    }
    BYTEPS_ASSIGN_OR_RETURN(Vector agreed, Share(c, "__byteps.tune.settings", o.is_rank0, decision));
    out.link = {static_cast<double>(agreed[3]), o.is_rank0 ? mine.rtt_s : 0};
    out.partition_bytes = o.is_rank0 ? derived.partition_bytes
                                     : Choice{static_cast<size_t>(agreed[1]), "worker 0's start-up probe"};
    if (o.credit_pinned) {
      out.credit_bytes = configured_credit(out.partition_bytes.value, "set by BYTEPS_SCHEDULING_CREDIT");
    } else if (o.is_rank0) {
      out.credit_bytes = derived.credit_bytes;
    } else {
      out.credit_bytes = {static_cast<size_t>(agreed[2]), "worker 0's start-up probe"};
    }
  }
  if (o.partition_pinned && out.partition_bytes.value != o.partition_bytes) {
    return Precondition(fmt::format(
        "BYTEPS_PARTITION_BYTES={} here but worker 0 partitions tensors into {} bytes: every worker must use the "
        "same partition size (set the same value everywhere, or unset it to let worker 0 choose)",
        o.partition_bytes, out.partition_bytes.value));
  }
  c.SetPartitionBytes(out.partition_bytes.value);
  return out;
}

}  // namespace byteps::worker::tuning
