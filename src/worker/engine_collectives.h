// The engine as the tuning's collectives (tuning/startup_agreement.h, worker0_agreement.h): the
// start-up agreement's blocking push_pulls (optionally pinned to one server) and its report of the
// server probe to the scheduler, and the asynchronous ones of worker 0's agreements.
// Threading: as the engine's Enqueue / Wait / Release; SetPartitionBytes under the engine's plan lock.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "worker/engine.h"
#include "worker/planning/key_assigner.h"
#include "worker/tuning/startup_agreement.h"
#include "worker/tuning/worker0_agreement.h"

namespace byteps::worker {

class EngineCollective : public tuning::Collective {
 public:
  // `report` sends the server probe to the scheduler (empty: this collective cannot).
  using Reporter = std::function<StatusOr<Placement>(const std::vector<double>&, size_t)>;
  EngineCollective(Engine* engine, std::mutex* plan_mu, planning::KeyAssigner* assigner, Reporter report)
      : engine_(engine), plan_mu_(plan_mu), assigner_(assigner), report_(std::move(report)) {}

  Status PushPull(const std::string& name, void* data, size_t bytes, DataType dtype) override;
  Status PushPullOnServer(const std::string& name, void* data, size_t bytes, DataType dtype, int server) override;
  StatusOr<Placement> ReportServerProbe(const std::vector<double>& seconds, size_t bytes) override;
  void SetPartitionBytes(size_t bytes) override;

 private:
  Status Run(const std::string& name, void* data, size_t bytes, DataType dtype, std::string attrs);

  Engine* engine_;
  std::mutex* plan_mu_;
  planning::KeyAssigner* assigner_;
  Reporter report_;
};

class EngineAsyncCollective : public tuning::AsyncCollective {
 public:
  explicit EngineAsyncCollective(Engine* engine) : engine_(engine) {}

  StatusOr<int64_t> Start(const std::string& name, void* data, size_t bytes, DataType dtype) override;
  Status Wait(int64_t handle, double timeout_s) override { return engine_->Wait(handle, timeout_s); }
  void Release(int64_t handle) override { engine_->Release(handle); }

 private:
  Engine* engine_;
};

}  // namespace byteps::worker
