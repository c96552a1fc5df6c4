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

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/metrics_http.h"
#include "common/status.h"
#include "compress/params.h"
#include "config/config.h"
#include "worker/speed_telemetry.h"
#include "worker/staging_stats.h"
#include "worker/tensor_request.h"

namespace byteps::cluster {
class ClusterClient;
class NameClient;
}
namespace byteps::protocol {
struct NameRequest;
struct NamePlan;
}
namespace byteps::transport {
class Transport;
}

namespace byteps::worker {

class PipelineSet;
class StandInRunner;
namespace local_reduce {
class LocalCircles;
}
namespace pipeline {
class DispatchLoop;
class HandleTable;
}
namespace planning {
class KeyAssigner;
struct Placement;
struct Retired;
}
namespace server_links {
class ServerLinks;
}
namespace trace {
class TraceRecorder;
}
namespace tuning {
class OnlineTuner;
class PartitionSchedule;
class Worker0Agreement;
struct StartupOutcome;
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
  // Each server's share of the gradient bytes by server rank, as the scheduler placed them
  // (protocol/server_placement.h), and its account of why; empty in a process with no line to
  // the scheduler (single-process, or a host's non-root process).
  std::vector<double> server_shares() const;
  std::string placement_report() const;
  // The most iterations the online tuning takes (those pushing at least the credit): the
  // partition size's phase, where every worker explores it, then the credit's.
  static constexpr int kOnlineSettleIterations = 20;
  // The partition size is explored online only for models of at most this many bytes per server
  // (the servers keep each explored generation's last sums).
  static constexpr uint64_t kMaxExploredBytesPerServer = uint64_t{512} << 20;
  // True once nothing will change the settings any more (no online tuning, or it settled).
  bool settings_settled() const;
  // The device tensors' pinned staging memory (staging_stats.h); zeros after Shutdown (not
  // concurrently with it).
  StagingStats staging_stats() const;

  // Declares `name` (in any order: the scheduler's name service agrees on its key). With a size,
  // places its partitions now (byte-balanced over servers).
  StatusOr<uint32_t> Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size = std::nullopt);
  StatusOr<HandleId> Enqueue(const TensorRequest& request);
  // True when finished successfully, false while running; the operation's error once it failed.
  StatusOr<bool> Poll(HandleId h);
  // Waits up to timeout_s (< 0: BYTEPS_TIMEOUT). The operation's error, or DeadlineExceeded; at
  // BYTEPS_TIMEOUT (not a caller's own timeout) it writes the stall report and names it.
  Status Wait(HandleId h, double timeout_s = -1);
  void Release(HandleId h);
  // get_pushpull_speed: the oldest unread sample of completed push_pull bytes per second (the
  // job's own tensors, not the tuning's).
  SpeedSample NextSpeedSample() { return telemetry_.Next(); }
  // Horovod's join() (engine_join.cc): this worker ran out of data. Waits for its operations in
  // flight (BYTEPS_TIMEOUT), then for every worker to join (BYTEPS_TIMEOUT from this call; a
  // timeout ends the job, whose servers still count this worker as joined). Meanwhile the servers
  // count this worker's share of the others' reductions as zeros. Returns the rank of the last
  // worker to join, the same on every worker. Afterwards every use of a tensor counts as past the
  // online tuner's partition phase (the workers' use counts differ by the rounds some sat out).
  // With several processes per host each process joins alike; the host joins the servers' join
  // once all of them did, and its root runs the rounds the others still start meanwhile.
  StatusOr<int> Join();
  // Waits for outstanding work, tells the scheduler we are done, waits for the job's end.
  Status Shutdown();

  // Compression (engine_compression.cc). The learning rate of the coming step (> 0), which error
  // feedback (ef=vanilla) scales its residual by (byteps_set_learning_rate); any thread.
  void SetLearningRate(double lr);
  // The compression parameters of every later push_pull of `name` whose attrs carry no compression
  // keys (byteps_declare_tensor_params; keys may start with "byteps_"). Errors (InvalidArgument,
  // naming the tensor): a key or value compress::ParseParams refuses. Any thread.
  Status DeclareParams(const std::string& name, const std::vector<std::pair<std::string, std::string>>& kv);
  // DeclareParams's check alone.
  static Status CheckParams(const std::string& name, const std::vector<std::pair<std::string, std::string>>& kv);
  // What Enqueue makes of a request's compression: parameters from its attrs' compression keys,
  // else `declared` (may be null); refused (naming the tensor) for an op other than a plain sum or
  // a dtype the codec cannot take; dropped for a tensor under min_compress_bytes; else attrs =
  // the other attributes, in order, then Params::ToAttrs(), and r.compression set. A request
  // without compression keys and without declared parameters is left exactly as it is.
  static Status NormalizeCompression(TensorRequest& r, const compress::Params* declared, size_t min_compress_bytes);

 private:
  explicit Engine(const config::Config& config);
  Status StartLocal();
  Status Connect();
  // The name service: the scheduler's in a distributed job (a connection of this process's own,
  // opened on first use), else this process's own planner.
  void StartNames();
  StatusOr<protocol::NamePlan> Resolve(const protocol::NameRequest& r);
  // Tells the servers this worker is done with these plans' keys (planning/key_assigner.h).
  void ReleaseRetired(const std::vector<planning::Retired>& retired);
  void StartPipeline();
  // A concatenation's own rules (its slice, no average, one process per host).
  Status CheckConcat(const TensorRequest& r) const;
  // A reduction's dtype, average and route allow its op (bool is not summed; only sums average).
  Status CheckReduction(const TensorRequest& r) const;
  // kAdasum: a float dtype, a host tensor when several processes share the host, and the whole
  // tensor within one message.
  Status CheckAdasum(const TensorRequest& r) const;
  Status TuneAtStart();  // engine_tuning.cc
  // Connections per server from the start-up probe (unless pinned), opened now; the report's part.
  StatusOr<std::string> WidenLinks(const tuning::StartupOutcome& t);
  // The online tuner's hook for one user push_pull of the tensor with index `index` (under
  // plan_mu_): its measurements, and a new credit to apply before it (at a local iteration
  // boundary: the credit is this worker's own).
  struct OnlineStep {
    std::optional<size_t> credit;
  };
  OnlineStep TuneOnline(uint32_t index, size_t bytes);  // engine_tuning.cc
  // The partition phase (tuning/partition_schedule.h): the generation of use `use` of `name`,
  // waiting (no lock held, BYTEPS_TIMEOUT) for an agreement it needs. The KeyAssigner's scheduler.
  StatusOr<planning::Placement> PlaceUse(const std::string& name, uint32_t use);
  // Worker 0's word, once learnt (each applies once, under plan_mu_): the partition is explored or
  // not; the verdict (a generation). The credit phase starts then.
  void ApplyExplore(const std::array<int64_t, 5>& agreed);
  StatusOr<uint32_t> ApplyVerdict(const std::array<int64_t, 5>& agreed);
  // The credit tuner's start (under plan_mu_); null when the credit is pinned or cannot move.
  // per_visit / passes 0: the tuner's defaults.
  std::unique_ptr<tuning::OnlineTuner> MakeCreditTuner(size_t credit, size_t partition, int warmup, int per_visit = 0,
                                                       int passes = 0);
  void RecordSettings(size_t partition_bytes);  // for `byteps info` (job_files.h); under mu_
  // The partition size in use: the online verdict's once applied, else the assigner's (plan_mu_).
  size_t PartitionInUseLocked() const;
  void FailAll(const Status& st);
  // engine_report.cc: the metrics endpoint (BYTEPS_METRICS_PORT) and, when tracing, the timeline's
  // recorder; before anything else starts (after rank_), so that a port in use or an unwritable
  // BYTEPS_TRACE_DIR stops this worker before it joins anything.
  Status StartObservers();
  // The dispatcher's observers, before it starts (the recorder, with the rank the cluster gave).
  void Observe(pipeline::DispatchLoop& loop);
  // The stall report (engine_report.cc): written on a Wait's deadline and on kill -USR1; returns
  // its path ("" when it could not be written: logged). A report younger than a second is reused.
  void StartReports();
  void StopReports();
  std::string StallReport(const std::string& reason);
  // A failure the job cannot go on after (a round that can never complete, a start-up that failed
  // after the rendezvous): FailAll, and tell the scheduler now, which ends the job on every node
  // naming it (instead of the others waiting for BYTEPS_TIMEOUT or this process's disconnect).
  void FailJob(const Status& st);

  config::Config config_;
  int rank_ = 0;
  int host_rank_ = 0;  // this host's worker rank (the scheduler's)
  std::unique_ptr<transport::Transport> transport_;          // data: to the servers
  std::unique_ptr<transport::Transport> control_transport_;  // TCP: to the scheduler
  std::unique_ptr<cluster::ClusterClient> cluster_;
  std::unique_ptr<transport::Transport> names_transport_;  // a local non-root's line to the scheduler
  std::unique_ptr<cluster::NameClient> names_;             // distributed; set before any use
  std::function<StatusOr<protocol::NamePlan>(const protocol::NameRequest&)> local_names_;
  std::unique_ptr<local_reduce::LocalCircles> local_;  // BYTEPS_LOCAL_SIZE > 1
  std::unique_ptr<StandInRunner> stand_ins_;           // a host's local root (stand_ins.h)
  std::unique_ptr<server_links::ServerLinks> links_;   // when this process talks to the servers
  std::unique_ptr<pipeline::HandleTable> handles_;
  SpeedTelemetry telemetry_;
  // BYTEPS_TRACE_ON: the timeline (the dispatcher's observer; null when off). Outlives loop_.
  std::unique_ptr<trace::TraceRecorder> recorder_;
  std::unique_ptr<pipeline::DispatchLoop> loop_;
  std::unique_ptr<PipelineSet> pipelines_;

  mutable std::mutex plan_mu_;
  std::unique_ptr<planning::KeyAssigner> assigner_;  // thread-safe itself
  uint64_t next_task_ = 1;                           // guarded by plan_mu_
  std::unique_ptr<tuning::OnlineTuner> online_;      // guarded by plan_mu_; null once settled
  bool online_partition_ = false;                    // guarded by plan_mu_: online_ tunes the partition
  // The placement the scheduler answered the start-up server probe with (startup_agreement.h);
  // empty: the registration's stands. A lock of its own: the reports read it under plan_mu_.
  mutable std::mutex placement_mu_;
  std::vector<double> probed_shares_;                // guarded by placement_mu_
  std::string probed_placement_;                     // guarded by placement_mu_
  std::vector<size_t> partition_candidates_;         // generation g uses [g]
  std::vector<size_t> partition_credits_;            // the credit with each
  // The partition phase, set before the first user push_pull when the partition is explored.
  std::unique_ptr<tuning::PartitionSchedule> schedule_;
  std::unique_ptr<tuning::Worker0Agreement> explore_;  // worker 0: may the model sit there twice?
  std::unique_ptr<tuning::Worker0Agreement> verdict_;  // worker 0: which generation stays
  bool explore_applied_ = false;                       // guarded by plan_mu_
  std::optional<uint32_t> verdict_applied_;            // guarded by plan_mu_
  // Uses below this count as this (Join: past the partition phase, on every worker alike).
  std::atomic<uint32_t> use_floor_{0};
  // The credit tuner that a verdict started waits for the next Enqueue to open its first
  // iteration and apply its credit (guarded by plan_mu_).
  std::optional<size_t> credit_switch_;

  std::atomic<double> learning_rate_{0};  // 0: none set (PipelineContext::learning_rate)
  mutable std::mutex declared_mu_;
  std::unordered_map<std::string, compress::Params> declared_params_;  // guarded by declared_mu_
  std::atomic<bool> any_declared_params_{false};  // declared_params_ is not empty (read without the lock)

  std::unique_ptr<metrics::HttpEndpoint> metrics_endpoint_;  // BYTEPS_METRICS_PORT; null: off
  int report_signal_ = 0;  // report_signal.h id; 0: none
  std::mutex report_mu_;
  std::chrono::steady_clock::time_point last_report_at_{};  // guarded by report_mu_
  std::string last_report_path_;                            // guarded by report_mu_

  mutable std::mutex mu_;
  Status failure_;          // guarded by mu_
  bool shut_down_ = false;  // guarded by mu_
  std::string settings_report_;  // guarded by mu_
  size_t credit_bytes_ = 0;      // guarded by mu_
};

}  // namespace byteps::worker
