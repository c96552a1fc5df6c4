#include "worker/tuning/startup_agreement.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace byteps::worker::tuning {

namespace {

using Vector = SharedVector;
constexpr int64_t kVersion = kSettingsVersion;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Status CheckSharedFromWorker0(const std::string& name, const SharedVector& v) {
  if (v[0] == kSettingsVersion) return Status::Ok();
  return Precondition(fmt::format(
      "settings ('{}'): expected version {} from worker 0, the sum says {}: {}", name, kSettingsVersion, v[0],
      v[0] == 0                ? "no worker acts as worker 0 (check DMLC_WORKER_ID / BYTEPS_GLOBAL_RANK)"
      : v[0] > kSettingsVersion ? "several workers act as worker 0 (check DMLC_WORKER_ID / BYTEPS_GLOBAL_RANK)"
                                : "the workers run different byteps versions"));
}

StatusOr<SharedVector> ShareFromWorker0(Collective& c, const std::string& name, bool is_rank0,
                                        const SharedVector& mine) {
  SharedVector v{};
  if (is_rank0) v = mine;
  v[0] = is_rank0 ? kSettingsVersion : 0;
  BYTEPS_RETURN_IF_ERROR(c.PushPull(name, v.data(), sizeof(v), DataType::kInt64));
  BYTEPS_RETURN_IF_ERROR(CheckSharedFromWorker0(name, v));
  return v;
}

namespace {

Status PushPullZeros(Collective& c, const std::string& name, std::vector<float>& buffer) {
  return c.PushPull(name, buffer.data(), buffer.size() * sizeof(float), DataType::kFloat32);
}

// The probe: every worker makes the same push_pulls; the times are this worker's.
StatusOr<LinkEstimate> Probe(Collective& c, std::string* times) {
  LinkEstimate link;
  c.SetPartitionBytes(kProbeCandidates[0]);
  double rtt = 1e9;
  for (int i = 0; i < 4; ++i) {
    int64_t x = 0;
    const auto t0 = Clock::now();
    BYTEPS_RETURN_IF_ERROR(c.PushPull("__byteps.tune.rtt", &x, sizeof(x), DataType::kInt64));
    if (i > 0) rtt = std::min(rtt, Since(t0));  // the first also absorbs the workers' skew at start
  }
  link.rtt_s = rtt;
  std::vector<float> warm(kProbeWarmBytes / sizeof(float)), probe(kProbeBytes / sizeof(float));
  BYTEPS_RETURN_IF_ERROR(PushPullZeros(c, "__byteps.tune.warm", warm));
  // Each candidate kProbeRuns times, interleaved; noise only ever adds time, so each keeps its faster run.
  std::array<double, kProbeCandidates.size()> best;
  best.fill(1e9);
  for (int run = 0; run < kProbeRuns; ++run) {
    for (size_t i = 0; i < kProbeCandidates.size(); ++i) {
      c.SetPartitionBytes(kProbeCandidates[i]);
      const auto t0 = Clock::now();
      BYTEPS_RETURN_IF_ERROR(PushPullZeros(c, fmt::format("__byteps.tune.p{}", kProbeCandidates[i] >> 10), probe));
      best[i] = std::min(best[i], Since(t0));
    }
  }
  for (size_t i = 0; i < best.size(); ++i) {
    *times += fmt::format("{}{} KiB {:.2f} ms", i ? ", " : "", kProbeCandidates[i] >> 10, best[i] * 1e3);
  }
  link.goodput_Bps = GoodputFromProbe(best, rtt);
  return link;
}

// Each server alone: every worker push_pulls kServerProbeBytes pinned to it; the wire time is the
// fastest run less the fastest of the later round trips (the first absorbs the workers' skew).
StatusOr<std::vector<double>> ProbeServers(Collective& c, int num_servers, std::string* times) {
  std::vector<double> wire;
  std::vector<float> probe(kServerProbeBytes / sizeof(float));
  for (int s = 0; s < num_servers; ++s) {
    double rtt = 1e9, best = 1e9;
    for (int i = 0; i < 3; ++i) {
      int64_t x = 0;
      const auto t0 = Clock::now();
      BYTEPS_RETURN_IF_ERROR(c.PushPullOnServer(fmt::format("__byteps.tune.at{}.rtt", s), &x, sizeof(x),
                                                DataType::kInt64, s));
      if (i > 0) rtt = std::min(rtt, Since(t0));
    }
    for (int run = 0; run < kServerProbeRuns; ++run) {
      const auto t0 = Clock::now();
      BYTEPS_RETURN_IF_ERROR(c.PushPullOnServer(fmt::format("__byteps.tune.at{}", s), probe.data(),
                                                kServerProbeBytes, DataType::kFloat32, s));
      best = std::min(best, Since(t0));
    }
    wire.push_back(std::max(best - rtt, best / 2));
    *times += fmt::format("{}server {} {:.2f} ms", s ? ", " : "", s, wire.back() * 1e3);
  }
  return wire;
}

}  // namespace

Status Collective::PushPullOnServer(const std::string& name, void*, size_t, DataType, int server) {
  return Precondition(fmt::format("'{}': this collective cannot pin a push_pull to server {}", name, server));
}

StatusOr<Collective::Placement> Collective::ReportServerProbe(const std::vector<double>&, size_t) {
  return Precondition("this collective has no scheduler to report the server probe to");
}

double GoodputFromProbe(const std::array<double, kProbeCandidates.size()>& seconds, double rtt_s) {
  double b = 0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const double wire = std::max(seconds[i] - rtt_s, seconds[i] / 2);
    if (wire > 0) b = std::max(b, static_cast<double>(kProbeBytes + kProbeCandidates[i]) / wire);
  }
  return b;
}

// Every process says whether it can explore the partition size online and with which second
// candidate (in KiB); the sums show whether all can and all name the same one (sum of squares
// times n equals the square of the sum only when every value is equal).
static Status AgreeOnExploration(Collective& c, const StartupOptions& o, StartupOutcome& out) {
  const size_t alt = out.probed && o.explore_partition
                         ? PartitionAlternative(out.partition_bytes.value, kMinPartitionBytes, o.model.max_partition_bytes)
                         : 0;
  const int64_t kib = static_cast<int64_t>(alt >> 10);
  Vector v{alt ? 1 : 0, 1, kib, kib * kib};
  BYTEPS_RETURN_IF_ERROR(c.PushPull("__byteps.tune.explore", v.data(), sizeof(v), DataType::kInt64));
  if (alt != 0 && v[0] == v[1] && v[2] * v[2] == v[1] * v[3] && v[2] == v[1] * kib) {
    out.partition_candidates = {out.partition_bytes.value, alt};
  }
  return Status::Ok();
}

StatusOr<StartupOutcome> AgreeOnSettings(Collective& c, const StartupOptions& o) {
  const bool probe = o.autotune && !(o.partition_pinned && o.credit_pinned);
  BYTEPS_ASSIGN_OR_RETURN(
      Vector plan,
      ShareFromWorker0(c, "__byteps.tune.plan", o.is_rank0,
                       {kVersion, probe ? 1 : 0, static_cast<int64_t>(o.partition_bytes),
                        o.autotune && o.probe_servers ? o.num_servers : 0, 0}));
  StartupOutcome out;
  out.partition_bytes = {static_cast<size_t>(plan[2]), o.partition_pinned && o.is_rank0 ? "set by BYTEPS_PARTITION_BYTES"
                                                       : o.is_rank0                     ? "the default"
                                                                                        : "worker 0's"};
  const auto configured_credit = [&](size_t partition, const char* why) {
    return Choice{static_cast<size_t>(o.credit_partitions) * partition,
                  fmt::format("{} ({} partitions)", why, o.credit_partitions)};
  };
  out.credit_bytes = configured_credit(out.partition_bytes.value,
                                       o.credit_pinned ? "set by BYTEPS_SCHEDULING_CREDIT" : "the default");
  if (plan[1] != 0) {
    out.probed = true;
    BYTEPS_ASSIGN_OR_RETURN(LinkEstimate mine, Probe(c, &out.probe_times));
    if (!o.is_rank0) out.probe_times.clear();  // only worker 0's times decide
    Vector decision{};
    DerivedSettings derived;
    if (o.is_rank0) {
      derived = Derive(mine, o.model);
      if (o.partition_pinned) derived.partition_bytes = {o.partition_bytes, "set by BYTEPS_PARTITION_BYTES"};
      decision = {kVersion, static_cast<int64_t>(derived.partition_bytes.value),
                  static_cast<int64_t>(derived.credit_bytes.value), static_cast<int64_t>(mine.goodput_Bps),
                  static_cast<int64_t>(mine.rtt_s * 1e9)};
    }
    BYTEPS_ASSIGN_OR_RETURN(Vector agreed, ShareFromWorker0(c, "__byteps.tune.settings", o.is_rank0, decision));
    out.link = o.is_rank0 ? mine : LinkEstimate{static_cast<double>(agreed[3]), static_cast<double>(agreed[4]) / 1e9};
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
  if (plan[3] != 0) {  // after the partition size is set: the probe's tensors are split as the job's
    if (plan[3] != o.num_servers) {
      return Precondition(fmt::format("worker 0 probes {} servers, this worker knows {}: the workers disagree on "
                                      "DMLC_NUM_SERVER",
                                      plan[3], o.num_servers));
    }
    c.SetPartitionBytes(out.partition_bytes.value);
    BYTEPS_ASSIGN_OR_RETURN(std::vector<double> wire, ProbeServers(c, o.num_servers, &out.server_probe_times));
    BYTEPS_ASSIGN_OR_RETURN(out.placement, c.ReportServerProbe(wire, kServerProbeBytes));
  }
  // Before the check below: a worker that fails it leaves the job, and the others learn that
  // from the job, not by waiting for it in a push_pull it skipped.
  BYTEPS_RETURN_IF_ERROR(AgreeOnExploration(c, o, out));
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
