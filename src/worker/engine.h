// The worker engine: what push_pull runs on. Enqueue never blocks on the network: it plans the
// tensor's partitions (KeyAssigner), registers a handle (HandleTable) and submits the partitions to
// the dispatcher thread (DispatchLoop), which moves each through the stages of its pipeline
// (PipelineSet: local reduce, push-pull over the server links, local broadcast, ...). A handle
// completes when all partitions are through (or with the first error, which names the tensor and
// the peer). docs/architecture.md walks one tensor through it, file by file.
//
// Non-distributed mode (DMLC_NUM_WORKER=1, no BYTEPS_FORCE_DISTRIBUTED): no network at all; the
// result is the input (summed over the host's processes when BYTEPS_LOCAL_SIZE > 1).
//
// Threading: all public methods are thread-safe. Dispatch runs on the dispatcher thread
// ("bps-dispatch"); replies arrive on transport I/O threads; see each part's header.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/dtype.h"
#include "common/status.h"
#include "config/config.h"
#include "worker/tensor_request.h"

namespace byteps::cluster {
class ClusterClient;
}
namespace byteps::transport {
class Transport;
}

namespace byteps::worker {

class DispatchLoop;
class HandleTable;
class KeyAssigner;
class LocalReducer;
class PipelineSet;
class ServerLinks;
namespace tuning {
class OnlineTuner;
}

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Start(const config::Config& config);
  ~Engine();

  int rank() const { return rank_; }
  int size() const { return config_.size(); }
  int local_rank() const { return config_.local_rank; }
  int local_size() const { return config_.local_size; }
  bool distributed() const { return config_.distributed(); }
  const config::Config& config() const { return config_; }
  // The partition size and credit in use, each with why ("" before a distributed start); the
  // online tuner's verdict joins it once it settles.
  std::string settings_report() const;
  // What push_pull uses (the configured values, or what the tuning chose so far).
  size_t partition_bytes() const;
  size_t credit_bytes() const;  // 0: no cap
  // The most iterations the online tuner of the credit takes (those pushing at least the credit).
  static constexpr int kOnlineSettleIterations = 14;
  // True once nothing will change the settings any more (no online tuning, or it settled).
  bool settings_settled() const;

  // Declares `name` (same order on every worker). With a size, places its partitions now
  // (byte-balanced over servers).
  StatusOr<uint32_t> Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size = std::nullopt);
  StatusOr<HandleId> Enqueue(const TensorRequest& request);
  // True when finished successfully, false while running; the operation's error once it failed.
  StatusOr<bool> Poll(HandleId h);
  // Waits up to timeout_s (< 0: BYTEPS_TIMEOUT). The operation's error, or DeadlineExceeded.
  Status Wait(HandleId h, double timeout_s = -1);
  void Release(HandleId h);
  // Waits for outstanding work, tells the scheduler we are done, waits for the job's end.
  Status Shutdown();

 private:
  explicit Engine(const config::Config& config);
  Status StartLocal();
  Status Connect();
  void StartPipeline();
  Status TuneAtStart();  // engine_tuning.cc
  // The online tuner's hook for one push_pull (under plan_mu_): a new credit to apply before it.
  std::optional<size_t> TuneOnline(uint32_t declared_key, size_t bytes);  // engine_tuning.cc
  void RecordSettings(size_t partition_bytes);  // for `byteps info` (job_files.h); under mu_
  void FailAll(const Status& st);

  config::Config config_;
  int rank_ = 0;
  int host_rank_ = 0;  // this host's worker rank (the scheduler's)
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<cluster::ClusterClient> cluster_;
  std::unique_ptr<LocalReducer> local_;  // BYTEPS_LOCAL_SIZE > 1
  std::unique_ptr<ServerLinks> links_;   // when this process talks to the servers
  std::unique_ptr<HandleTable> handles_;
  std::unique_ptr<DispatchLoop> loop_;
  std::unique_ptr<PipelineSet> pipelines_;

  mutable std::mutex plan_mu_;
  std::unique_ptr<KeyAssigner> assigner_;        // guarded by plan_mu_
  uint64_t next_task_ = 1;                       // guarded by plan_mu_
  std::unique_ptr<tuning::OnlineTuner> online_;  // guarded by plan_mu_; null once settled

  mutable std::mutex mu_;
  Status failure_;          // guarded by mu_
  bool shut_down_ = false;  // guarded by mu_
  std::string settings_report_;  // guarded by mu_
  size_t credit_bytes_ = 0;      // guarded by mu_
};

}  // namespace byteps::worker
