// Engine::TuneAtStart: the start-up probe and agreement (tuning/startup_agreement.h) run on the
// engine's own push_pull, before Start returns, so no user tensor is planned before the partition
// size is agreed. Engine::TuneOnline: the online tuner (tuning/online_tuner.h) sees every user
// push_pull until it settles, and moves the credit at iteration boundaries. Engine::PlaceUse: the
// partition generation of each use of a tensor (tuning/partition_schedule.h), from its use count
// and worker 0's word, learnt through agreements that never hold a lock while they wait.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cluster/cluster_client.h"
#include "cluster/name_client.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "worker/engine.h"
#include "worker/engine_collectives.h"
#include "worker/job_files.h"
#include "worker/pipeline/dispatch_loop.h"
#include "worker/pipeline_set.h"
#include "worker/planning/key_assigner.h"
#include "worker/planning/server_layout.h"
#include "worker/server_links/server_links.h"
#include "worker/tuning/online_tuner.h"
#include "worker/tuning/partition_schedule.h"
#include "worker/tuning/startup_agreement.h"
#include "worker/tuning/worker0_agreement.h"

namespace byteps::worker {

static_assert(Engine::kOnlineSettleIterations == tuning::kPartitionSettleIterations + tuning::kPartitionVerdictLag +
                                                     tuning::kOnlineSettleIterationsAfterPartition);

namespace {

// The most one connection moves per round trip: the socket buffer byteps sets
// (BYTEPS_SOCKET_BUFFER_BYTES; the kernel doubles it and keeps about half for its own use), or
// with 0, half the kernel's autotuning limit (the third value of net.ipv4.tcp_rmem); 0 if unknown.
size_t ConnectionWindowBytes(size_t socket_buffer_bytes) {
  if (socket_buffer_bytes > 0) return socket_buffer_bytes;
  std::ifstream f("/proc/sys/net/ipv4/tcp_rmem");
  size_t lo = 0, def = 0, hi = 0;
  return f >> lo >> def >> hi ? hi / 2 : 0;
}

}  // namespace

Status Engine::TuneAtStart() {
  tuning::StartupOptions o;
  o.is_rank0 = rank_ == 0;
  o.autotune = config_.autotune;
  o.partition_bytes = config_.partition_bytes;
  o.partition_pinned = config_.partition_bytes_pinned;
  o.credit_partitions = config_.scheduling_credit;
  o.credit_pinned = config_.scheduling_credit_pinned;
  // Partition generations are the key layout of the whole job: a host with local processes
  // (their shared-memory local reduce follows the partitions too) keeps the start-up size.
  o.explore_partition = config_.autotune && !config_.partition_bytes_pinned && config_.local_size == 1 && links_;
  o.model.num_workers = config_.num_workers;
  o.model.num_servers = config_.num_servers;
  o.model.shared_links = cluster_ && planning::ServersShareTheWorkersHosts(cluster_->workers(), cluster_->servers());
  o.model.max_partition_bytes = std::min<size_t>(o.model.max_partition_bytes, config_.max_message_bytes / 2);
  // BYTEPS_MAX_MESSAGE_BYTES below the largest candidate: the probe's candidates must fit too.
  if (o.model.max_partition_bytes < tuning::kProbeCandidates.back()) o.autotune = false;
  // The split's rates measured (startup_agreement.h): unless BYTEPS_NIC_GBPS gives this worker's
  // rate or BYTEPS_ENABLE_MIXED_MODE=0 keeps equal shares.
  o.probe_servers = cluster_ && names_ && config_.nic_gbps <= 0 && config_.mixed_mode != 0 &&
                    planning::ServersOnBothKindsOfMachine(cluster_->workers(), cluster_->servers());
  o.num_servers = config_.num_servers;
  EngineCollective collective(this, &plan_mu_, assigner_.get(),
                              [this](const std::vector<double>& seconds,
                                     size_t bytes) -> StatusOr<tuning::Collective::Placement> {
                                if (!names_) return tuning::Collective::Placement{};
                                BYTEPS_ASSIGN_OR_RETURN(protocol::NameReply r,
                                                        names_->ReportServerProbe(seconds, bytes));
                                return tuning::Collective::Placement{r.shares, r.placement};
                              });
  auto outcome = tuning::AgreeOnSettings(collective, o);
  if (!outcome.ok()) return outcome.status().WithContext("start-up tuning");
  const tuning::StartupOutcome& t = outcome.value();
  if (!t.placement.shares.empty()) {
    BYTEPS_LOG(Info, "server probe (wire time of {} bytes from every worker): {}; {}", tuning::kServerProbeBytes,
               t.server_probe_times, t.placement.summary);
    std::lock_guard<std::mutex> lock(placement_mu_);
    probed_shares_ = t.placement.shares;
    probed_placement_ = t.placement.summary;
  }
  loop_->SetCredit(t.credit_bytes.value);
  BYTEPS_ASSIGN_OR_RETURN(std::string connections, WidenLinks(t));
  // Online tuning: the partition size first where every process explores it, then the credit,
  // which is each worker's own: on by BYTEPS_AUTOTUNE, off for a pinned credit, and only where
  // this process has links of its own to the servers (a host's local root).
  std::string online;
  {
    std::lock_guard<std::mutex> lock(plan_mu_);
    if (t.partition_candidates.size() > 1) {
      partition_candidates_ = t.partition_candidates;
      for (size_t p : partition_candidates_) {
        partition_credits_.push_back(config_.scheduling_credit_pinned
                                         ? static_cast<size_t>(config_.scheduling_credit) * p
                                         : tuning::CreditForPartition(t.credit_bytes.value, t.partition_bytes.value, p));
      }
      tuning::OnlineTunerOptions po;
      po.what = "partition";
      po.values = partition_candidates_;
      po.warmup = tuning::kPartitionWarmup;
      po.per_visit = tuning::kPartitionPerVisit;
      po.passes = tuning::kPartitionPasses;
      po.fastest_half = true;
      // An iteration of fewer than 4 of the larger partitions hardly depends on their size.
      po.min_iteration_bytes = 4 * *std::max_element(partition_candidates_.begin(), partition_candidates_.end());
      online_ = std::make_unique<tuning::OnlineTuner>(po);
      online_partition_ = true;
      for (uint32_t g = 1; g < partition_candidates_.size(); ++g) {
        BYTEPS_RETURN_IF_ERROR(assigner_->AddGeneration(g, partition_candidates_[g]));
      }
      schedule_ = std::make_unique<tuning::PartitionSchedule>(tuning::kPartitionWarmup, tuning::kPartitionPerVisit,
                                                              tuning::kPartitionVerdictLag);
      // Worker 0 joined (join()) before deciding: no exploring; the start-up size stays.
      explore_ = std::make_unique<tuning::Worker0Agreement>("__byteps.tune.online.explore", rank_ == 0,
                                                            config_.op_timeout_s, tuning::SharedVector{});
      verdict_ = std::make_unique<tuning::Worker0Agreement>(
          "__byteps.tune.partition", rank_ == 0, config_.op_timeout_s,
          tuning::SharedVector{0, 0, static_cast<int64_t>(partition_candidates_[0]), 0, 0});
      assigner_->set_scheduler([this](const std::string& name, uint32_t use) { return PlaceUse(name, use); });
      online = fmt::format("; the online tuner explores partitions of {} and {} bytes over {} iterations, then the "
                           "credit over {}",
                           partition_candidates_[0], partition_candidates_[1], schedule_->verdict_from(),
                           tuning::kOnlineSettleIterationsAfterPartition);
    } else if (auto tuner = MakeCreditTuner(t.credit_bytes.value, t.partition_bytes.value, 2)) {
      online = fmt::format("; the online tuner explores the credit over the first {} iterations",
                           tuner->settle_iterations());
      online_ = std::move(tuner);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  credit_bytes_ = t.credit_bytes.value;
  settings_report_ = fmt::format(
      "partition {} bytes: {}; credit {} bytes{}: {}{}", t.partition_bytes.value, t.partition_bytes.reason,
      t.credit_bytes.value, t.credit_bytes.value == 0 ? " (no cap)" : "", t.credit_bytes.reason,
      t.probed ? fmt::format("; probe by worker 0: B {:.0f} Mbit/s{}", t.link.goodput_Bps * 8 / 1e6,
                             t.probe_times.empty() ? "" : fmt::format(", R {:.2f} ms, 4 MiB in partitions of {}",
                                                                      t.link.rtt_s * 1e3, t.probe_times))
               : "") + connections + online;
  BYTEPS_LOG(Info, "settings: {}", settings_report_);
  RecordSettings(t.partition_bytes.value);
  return Status::Ok();
}

StatusOr<std::string> Engine::WidenLinks(const tuning::StartupOutcome& t) {
  if (!links_) return std::string();  // a host's non-root process: its root talks to the servers
  if (config_.connections_per_peer_pinned || !config_.autotune || !t.probed) {
    return fmt::format("; connections per server {}: {}", links_->connections_per_server(),
                       config_.connections_per_peer_pinned ? "set by BYTEPS_CONNECTIONS_PER_PEER" : "the default");
  }
  const tuning::Choice k = tuning::DeriveConnections(t.link, ConnectionWindowBytes(config_.socket_buffer_bytes));
  // Nothing is in flight: every push_pull of the start-up tuning has returned.
  if (Status st = links_->Widen(static_cast<int>(k.value)); !st.ok()) return st.WithContext("start-up tuning");
  return fmt::format("; connections per server {}: {}", links_->connections_per_server(), k.reason);
}

void Engine::RecordSettings(size_t partition_bytes) {
  metrics::Global()
      .AddGauge("byteps_worker_partition_bytes", "the partition size in use (the tuner's choice or BYTEPS_PARTITION_BYTES)")
      ->Set(static_cast<double>(partition_bytes));
  SettingsRecord r;
  r.rank = rank_;
  r.partition_bytes = partition_bytes;
  r.credit_bytes = credit_bytes_;
  r.report = settings_report_;
  r.placement = placement_report();
  WriteSettingsRecord(config_, r);
}

std::unique_ptr<tuning::OnlineTuner> Engine::MakeCreditTuner(size_t credit, size_t partition, int warmup,
                                                             int per_visit, int passes) {
  if (!config_.autotune || config_.scheduling_credit_pinned || !links_ || credit == 0) return nullptr;
  tuning::OnlineTunerOptions oo;
  oo.model_credit = credit;
  oo.min_credit = partition;  // less than one partition in flight idles the links
  oo.min_iteration_bytes = credit;
  oo.warmup = warmup;
  if (per_visit > 0) oo.per_visit = per_visit;
  if (passes > 0) oo.passes = passes;
  auto tuner = std::make_unique<tuning::OnlineTuner>(oo);
  if (tuner->settled()) return nullptr;
  return tuner;
}

Engine::OnlineStep Engine::TuneOnline(uint32_t index, size_t bytes) {
  OnlineStep step;
  std::optional<size_t> value = online_->OnPushPull(index, bytes, tuning::IterationClock::Clock::now());
  if (online_partition_) {
    // The keys follow each tensor's own uses (PlaceUse); the credit follows this worker's
    // iterations, so that each candidate runs with its own bytes in flight. Settled: worker 0's
    // measurement waits for the verdict's agreement.
    if (value && !online_->settled()) {
      const auto g = static_cast<size_t>(
          std::find(partition_candidates_.begin(), partition_candidates_.end(), *value) - partition_candidates_.begin());
      if (g < partition_credits_.size()) step.credit = partition_credits_[g];
    }
    return step;
  }
  step.credit = value;
  if (!online_->settled()) return step;
  const size_t settled = online_->current();
  const std::string verdict = online_->report();
  online_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  credit_bytes_ = settled;
  settings_report_ += fmt::format("; online: credit {} bytes: {}", settled, verdict);
  BYTEPS_LOG(Info, "settings settled: credit {} bytes: {}", settled, verdict);
  RecordSettings(PartitionInUseLocked());
  return step;
}

StatusOr<planning::Placement> Engine::PlaceUse(const std::string& name, uint32_t use) {
  using Needs = tuning::PartitionSchedule::Needs;
  if (name.rfind(kInternalPrefix, 0) == 0) return planning::Placement{};
  // After a join() every use counts as past the partition phase (Join: the workers' use counts
  // of a name differ by the rounds some sat out).
  use = std::max(use, use_floor_.load(std::memory_order_acquire));
  EngineAsyncCollective c(this);
  const Needs needs = schedule_->NeedsAt(use);
  if (use >= schedule_->explore_issue()) {
    // Worker 0's word: both generations' keys may sit on the servers while the candidate is
    // measured, unless the model is too large for that (its declarations so far: for a training
    // loop, every gradient by its second iteration).
    explore_->Issue(c, [this] {
      const uint64_t limit = kMaxExploredBytesPerServer * static_cast<uint64_t>(std::max(1, config_.num_servers));
      const uint64_t known = assigner_->known_bytes();
      return tuning::SharedVector{0, known <= limit ? 1 : 0, static_cast<int64_t>(known >> 20),
                                  static_cast<int64_t>(limit >> 20), 0};
    });
  }
  if (needs == Needs::kNothing) return planning::Placement{};
  BYTEPS_ASSIGN_OR_RETURN(tuning::SharedVector explore, explore_->Get(c, name));
  ApplyExplore(explore);
  if (explore[1] == 0) return planning::Placement{};
  if (use >= schedule_->verdict_issue()) verdict_->Issue(c, [this] {
    // Worker 0's measurement: for a regular training stream its iteration clock closed the
    // candidate's last block just now (iteration k is every tensor's use k). A stream whose
    // iterations do not line up with the uses has not filled them: it keeps the start-up size.
    std::lock_guard<std::mutex> lock(plan_mu_);
    tuning::SharedVector v{0, 0, static_cast<int64_t>(partition_candidates_[0]), 0, 0};
    if (online_ && online_partition_ && online_->settled()) {
      v[1] = std::find(partition_candidates_.begin(), partition_candidates_.end(), online_->current()) -
             partition_candidates_.begin();
      v[2] = static_cast<int64_t>(online_->current());
      v[3] = 1;
    }
    return v;
  });
  if (needs == Needs::kExplore) return planning::Placement{1, false};
  BYTEPS_ASSIGN_OR_RETURN(tuning::SharedVector verdict, verdict_->Get(c, name));
  BYTEPS_ASSIGN_OR_RETURN(uint32_t g, ApplyVerdict(verdict));
  return planning::Placement{g, true};
}

void Engine::ApplyExplore(const tuning::SharedVector& agreed) {
  std::lock_guard<std::mutex> lock(plan_mu_);
  if (explore_applied_) return;
  explore_applied_ = true;
  if (agreed[1] != 0) return;
  // The partition phase ends here: every use stays in generation 0, and the credit is explored.
  const std::string why = agreed[0] == 0 ? std::string("not explored online: worker 0 had joined (join()) before "
                                                       "deciding")
                                         : fmt::format("not explored online: the model's {} MiB would stay on the servers a second "
                                      "time (more than {} MiB; worker 0's declarations)",
                                      agreed[2], agreed[3]);
  BYTEPS_LOG(Info, "the partition size is {}", why);
  online_partition_ = false;
  online_ = MakeCreditTuner(partition_credits_[0], partition_candidates_[0], 0, tuning::kCreditAfterPartitionPerVisit,
                            tuning::kCreditAfterPartitionPasses);
  credit_switch_ = partition_credits_[0];
  std::lock_guard<std::mutex> report(mu_);
  credit_bytes_ = partition_credits_[0];
  settings_report_ += fmt::format("; online: partition {} bytes: {}", partition_candidates_[0], why);
}

StatusOr<uint32_t> Engine::ApplyVerdict(const tuning::SharedVector& v) {
  if (v[1] < 0 || static_cast<size_t>(v[1]) >= partition_candidates_.size() ||
      partition_candidates_[static_cast<size_t>(v[1])] != static_cast<size_t>(v[2])) {
    return Precondition(fmt::format("online tuning of the partition size: worker 0 chose candidate {} ({} bytes), "
                                    "which is not one of this worker's ({} and {} bytes)",
                                    v[1], v[2], partition_candidates_[0], partition_candidates_[1]));
  }
  const auto g = static_cast<uint32_t>(v[1]);
  const size_t partition = partition_candidates_[g];
  const size_t credit = partition_credits_[g];
  std::string report, next;
  {
    std::lock_guard<std::mutex> lock(plan_mu_);
    if (verdict_applied_) return *verdict_applied_;
    verdict_applied_ = g;
    report = v[3] != 0 && online_ && online_partition_ && online_->settled()
                 ? online_->report()
                 : "its iterations did not fill the blocks of uses (an irregular stream)";
    online_partition_ = false;
    online_ = MakeCreditTuner(credit, partition, 0, tuning::kCreditAfterPartitionPerVisit,
                              tuning::kCreditAfterPartitionPasses);
    credit_switch_ = credit;
    if (online_) next = fmt::format("; the credit is explored over the next {} iterations", online_->settle_iterations());
  }
  // The other candidates' generations get no new rounds once each tensor reaches the verdict: the
  // pipelines' buffers for them (device tensors' pinned staging) go once their last rounds are
  // done; each tensor's keys there retire as it moves (planning/key_assigner.h), and the servers
  // free them once every worker released them.
  for (uint32_t other = 0; other < partition_candidates_.size(); ++other) {
    if (other != g) pipelines_->RetireGeneration(other);
  }
  const std::string verdict = fmt::format(
      "{} (worker 0's measurement: {}){}", g == 0 ? "kept the start-up choice" : "measured faster than the start-up choice",
      rank_ != 0 ? "shared through the servers" : report, next);
  std::lock_guard<std::mutex> lock(mu_);
  credit_bytes_ = credit;
  settings_report_ += fmt::format("; online: partition {} bytes, credit {} bytes: {}", partition, credit, verdict);
  BYTEPS_LOG(Info, "partition settled: {} bytes, credit {} bytes: {}", partition, credit, verdict);
  RecordSettings(partition);
  return g;
}

std::string Engine::settings_report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_report_;
}

size_t Engine::partition_bytes() const {
  std::lock_guard<std::mutex> lock(plan_mu_);
  return PartitionInUseLocked();
}

size_t Engine::PartitionInUseLocked() const {
  // The online verdict's generation is used per tensor (PlaceUse), not the assigner's current one.
  if (verdict_applied_ && *verdict_applied_ < partition_candidates_.size()) return partition_candidates_[*verdict_applied_];
  return assigner_->partition_bytes();
}

size_t Engine::credit_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return credit_bytes_;
}

StagingStats Engine::staging_stats() const { return pipelines_ ? pipelines_->staging_stats() : StagingStats{}; }

bool Engine::settings_settled() const {
  std::lock_guard<std::mutex> lock(plan_mu_);
  return online_ == nullptr;
}

}  // namespace byteps::worker
