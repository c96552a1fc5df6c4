// The dispatcher thread ("bps-dispatch"): the one thread that runs the Dispatcher. Framework
// threads submit operations, stages complete tasks from their own threads (I/O threads, the
// local reducer's thread), failures arrive from the cluster client: each lands in an inbox, and
// the dispatcher thread takes the whole inbox at once, applies it, and runs the dispatcher. It
// blocks on a condition variable while there is nothing to do, waking for the stall guard's
// deadline when tasks wait for credit (so the guard never depends on anyone calling Wait).
// Threading: Submit, Complete and FailAll are thread-safe; a Complete made on the dispatcher
// thread itself (a stage finishing inside Start) is applied at once. The Finished callback runs
// on the dispatcher thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "common/owner_query.h"
#include "worker/pipeline/dispatcher.h"
#include "worker/pipeline/in_flight.h"
#include "worker/pipeline/observer_fanout.h"
#include "worker/pipeline/stage.h"
#include "worker/pipeline/stage_metrics_observer.h"

namespace byteps::worker::pipeline {

class DispatchLoop : public StageSink {
 public:
  DispatchLoop(const Dispatcher::Options& options, Dispatcher::Finished on_finished);
  ~DispatchLoop() override;

  // Before Start: every stage of every pipeline.
  void AddStage(Stage* stage) { core_.AddStage(stage); }
  // Before Start: one more observer of the dispatcher (observer.h), also told when an operation's
  // last partition left; the stage metrics (stage_metrics_observer.h) are always the first.
  // Borrowed: must outlive the loop's thread (Stop).
  void AddObserver(Observer* observer);
  void Start();
  // Applies what is in the inbox, then stops the thread. Completions arriving later are dropped.
  void Stop();

  // `op` (parts filled, registered in the handle table) enters the pipeline; kept alive until its
  // last partition is finished.
  void Submit(std::shared_ptr<Operation> op);
  void Complete(PartitionTask* task, const Status& status) override;
  void FailAll(const Status& failure);
  // A new credit (bytes in flight; 0 = no cap), applied on the dispatcher thread before its next
  // pass: tasks already started keep theirs.
  void SetCredit(size_t bytes);
  // Every partition in the pipeline, taken on the dispatcher thread between two passes (for the
  // stall report). Unavailable when the thread does not answer within timeout_s (it is stuck
  // or stopped).
  StatusOr<InFlight> Snapshot(double timeout_s);

 private:
  void Loop();
  InFlight TakeSnapshot() const;
  void Finished(PartitionTask* task, const Status& status);

  Dispatcher::Finished on_finished_;
  Dispatcher core_;  // dispatcher thread only
  // The dispatcher's observer: the stage metrics alone (one virtual call per event), or the
  // fan-out of them and what AddObserver added. Set before Start.
  StageMetricsObserver stage_metrics_;
  ObserverFanout observers_;
  // Operations in the pipeline and how many of their partitions are still in it (dispatcher thread).
  std::unordered_map<Operation*, std::pair<size_t, std::shared_ptr<Operation>>> live_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Operation>> submitted_;            // guarded by mu_
  std::vector<std::pair<PartitionTask*, Status>> completed_;     // guarded by mu_
  std::vector<Status> failures_;                                 // guarded by mu_
  std::optional<size_t> credit_;                                 // guarded by mu_
  std::vector<owner_query::Reply<InFlight>> snapshots_;           // guarded by mu_
  bool stop_ = false;                                            // guarded by mu_
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};  // set before the thread runs anything
  // Set after each pass (metrics::Global()): partitions in the pipeline, credit in flight and cap.
  size_t tasks_live_ = 0;  // dispatcher thread
  metrics::Gauge* const tasks_gauge_ = metrics::Global().AddGauge(
      "byteps_worker_partitions_in_flight", "partitions submitted and not yet finished");
  metrics::Gauge* const credit_gauge_ = metrics::Global().AddGauge(
      "byteps_worker_credit_in_flight_bytes", "bytes of partitions holding the credit (in the network stage)");
  metrics::Gauge* const credit_limit_gauge_ = metrics::Global().AddGauge(
      "byteps_worker_credit_bytes", "the credit: bytes allowed in flight (0: no cap); the tuner's choice");
};

}  // namespace byteps::worker::pipeline
