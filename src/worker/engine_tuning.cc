// Engine::TuneAtStart: the start-up probe and agreement (tuning/startup_agreement.h) run on the
// engine's own push_pull, before Start returns, so no user tensor is planned before the partition
// size is agreed. Engine::TuneOnline: the online tuner (tuning/online_tuner.h) sees every user
// push_pull until it settles, and moves the credit at iteration boundaries.
#include <fmt/format.h>

#include <algorithm>

#include "common/logging.h"
#include "worker/dispatch_loop.h"
#include "worker/engine.h"
#include "worker/job_files.h"
#include "worker/key_assigner.h"
#include "worker/tuning/online_tuner.h"
#include "worker/tuning/startup_agreement.h"

namespace byteps::worker {

static_assert(Engine::kOnlineSettleIterations == tuning::kOnlineSettleIterations);

namespace {

class EngineCollective : public tuning::Collective {
 public:
  EngineCollective(Engine* engine, std::mutex* plan_mu, KeyAssigner* assigner)
      : engine_(engine), plan_mu_(plan_mu), assigner_(assigner) {}

  Status PushPull(const std::string& name, void* data, size_t bytes, DataType dtype) override {
    TensorRequest r;
    r.name = name;
    r.input = data;
    r.output = data;
    r.bytes = bytes;
    r.dtype = dtype;
    BYTEPS_ASSIGN_OR_RETURN(HandleId h, engine_->Enqueue(r));
    Status st = engine_->Wait(h);
    engine_->Release(h);
    return st;
  }

  void SetPartitionBytes(size_t bytes) override {
    std::lock_guard<std::mutex> lock(*plan_mu_);
    assigner_->set_partition_bytes(bytes);
  }

 private:
  Engine* engine_;
  std::mutex* plan_mu_;
  KeyAssigner* assigner_;
};

}  // namespace

Status Engine::TuneAtStart() {
  tuning::StartupOptions o;
  o.is_rank0 = rank_ == 0;
  o.autotune = config_.autotune;
  o.partition_bytes = config_.partition_bytes;
  o.partition_pinned = config_.partition_bytes_pinned;
  o.credit_partitions = config_.scheduling_credit;
  o.credit_pinned = config_.scheduling_credit_pinned;
  o.model.num_workers = config_.num_workers;
  o.model.num_servers = config_.num_servers;
  o.model.max_partition_bytes = std::min<size_t>(o.model.max_partition_bytes, config_.max_message_bytes / 2);
  // BYTEPS_MAX_MESSAGE_BYTES below the largest candidate: the probe's candidates must fit too.
  if (o.model.max_partition_bytes < tuning::kProbeCandidates.back()) o.autotune = false;
  EngineCollective collective(this, &plan_mu_, assigner_.get());
  auto outcome = tuning::AgreeOnSettings(collective, o);
  if (!outcome.ok()) return outcome.status().WithContext("start-up tuning");
  const tuning::StartupOutcome& t = outcome.value();
  loop_->SetCredit(t.credit_bytes.value);
  // Online tuning of the credit: on by BYTEPS_AUTOTUNE, off for a pinned credit, and only where
  // this process has links of its own to the servers (a host's local root).
  std::string online;
  if (config_.autotune && !config_.scheduling_credit_pinned && links_ && t.credit_bytes.value > 0) {
    tuning::OnlineTunerOptions oo;
    oo.model_credit = t.credit_bytes.value;
    oo.min_credit = t.partition_bytes.value;  // less than one partition in flight idles the links
    oo.min_iteration_bytes = t.credit_bytes.value;
    auto tuner = std::make_unique<tuning::OnlineTuner>(oo);
    if (!tuner->settled()) {
      online = fmt::format("; the online tuner explores the credit over the first {} iterations",
                           tuner->settle_iterations());
      std::lock_guard<std::mutex> lock(plan_mu_);
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
               : "") + online;
  BYTEPS_LOG(Info, "settings: {}", settings_report_);
  RecordSettings(t.partition_bytes.value);
  return Status::Ok();
}

void Engine::RecordSettings(size_t partition_bytes) {
  SettingsRecord r;
  r.rank = rank_;
  r.partition_bytes = partition_bytes;
  r.credit_bytes = credit_bytes_;
  r.report = settings_report_;
  WriteSettingsRecord(config_, r);
}

std::optional<size_t> Engine::TuneOnline(uint32_t declared_key, size_t bytes) {
  std::optional<size_t> credit = online_->OnPushPull(declared_key, bytes, tuning::IterationClock::Clock::now());
  if (!online_->settled()) return credit;
  const size_t settled = online_->current();
  const std::string verdict = online_->report();
  online_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  credit_bytes_ = settled;
  settings_report_ += fmt::format("; online: credit {} bytes: {}", settled, verdict);
  BYTEPS_LOG(Info, "settings settled: credit {} bytes: {}", settled, verdict);
  RecordSettings(assigner_->partition_bytes());
  return credit;
}

std::string Engine::settings_report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_report_;
}

size_t Engine::partition_bytes() const {
  std::lock_guard<std::mutex> lock(plan_mu_);
  return assigner_->partition_bytes();
}

size_t Engine::credit_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return credit_bytes_;
}

bool Engine::settings_settled() const {
  std::lock_guard<std::mutex> lock(plan_mu_);
  return online_ == nullptr;
}

}  // namespace byteps::worker
