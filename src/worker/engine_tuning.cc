// Engine::TuneAtStart: the start-up probe and agreement (tuning/startup_agreement.h) run on the
// engine's own push_pull, before Start returns, so no user tensor is planned before the partition
// size is agreed.
#include <fmt/format.h>

#include <algorithm>

#include "common/logging.h"
#include "worker/dispatch_loop.h"
#include "worker/engine.h"
#include "worker/key_assigner.h"
#include "worker/tuning/startup_agreement.h"

namespace byteps::worker {

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
  partition_bytes_ = t.partition_bytes.value;
  credit_bytes_ = t.credit_bytes.value;
  settings_report_ = fmt::format(
      "partition {} bytes: {}; credit {} bytes{}: {}{}", t.partition_bytes.value, t.partition_bytes.reason,
      t.credit_bytes.value, t.credit_bytes.value == 0 ? " (no cap)" : "", t.credit_bytes.reason,
      t.probed ? fmt::format("; probe by worker 0: B {:.0f} Mbit/s{}", t.link.goodput_Bps * 8 / 1e6,
                             t.probe_times.empty() ? "" : fmt::format(", R {:.2f} ms, 4 MiB in partitions of {}",
                                                                      t.link.rtt_s * 1e3, t.probe_times))
               : "");
  BYTEPS_LOG(Info, "settings: {}", settings_report_);
  return Status::Ok();
}

}  // namespace byteps::worker
