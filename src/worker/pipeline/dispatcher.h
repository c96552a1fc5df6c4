// The dispatcher: moves partition tasks through their pipelines. It owns the credit (once), the
// round sequencing, and the stall guard; it knows stages only through the Stage interface, so a
// new stage never changes it. Pure logic without threads or clocks of its own: DispatchLoop runs
// it on the dispatcher thread; tests drive it directly with a fake clock.
//
// Rules:
//  - An operation's partitions enter its pipeline at stage 0 when their tensor's previous round has
//    left the pipeline (RoundSequencer). A task that completes a stage OK goes to the next stage's
//    queue; past the last stage it is finished. A task that fails is finished with its error after
//    every stage it has not reached was told (Stage::Skip).
//  - Run starts queued tasks, each stage's queue in priority order, while the stage's credit need
//    (Stage::CreditFor) fits the credit; a stage whose head does not fit waits (no overtaking).
//    After starting a batch in a stage it calls the stage's Flush (batched system calls).
//  - Stall guard: when tasks wait for credit and nothing has started or completed for a stall
//    period, the tasks holding credit are waiting for other workers, not the network (only possible
//    when workers push in different orders): their credit is taken back so the queue moves.
// Threading: not thread-safe; one thread (the dispatcher thread) calls everything, including the
// re-entrant Complete from inside a stage's Start.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <unordered_set>
#include <vector>

#include "worker/pipeline/credit.h"
#include "worker/pipeline/observer.h"
#include "worker/pipeline/partition_task.h"
#include "worker/pipeline/pipeline.h"
#include "worker/pipeline/round_sequencer.h"

namespace byteps::worker::pipeline {

class Dispatcher {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    size_t credit_bytes = 0;  // 0 = no cap
    Clock::duration stall_period = std::chrono::milliseconds(50);
  };
  // A task left the pipeline: done (OK) or failed. The callback may release the task's
  // operation; the dispatcher does not touch the task afterwards.
  using Finished = std::function<void(PartitionTask*, const Status&)>;

  Dispatcher(const Options& options, Finished on_finished);

  // Reports every task's queueing, start and completion and every submission to `observer`
  // (borrowed; must outlive the dispatcher or be unset first). Null: nothing is reported.
  void SetObserver(Observer* observer) { observer_ = observer; }
  Observer* observer() const { return observer_; }
  // Every stage any pipeline uses, before the first Submit.
  void AddStage(Stage* stage) { stages_.push_back(stage); }
  // An operation's partitions enter the pipeline (or wait behind their earlier round).
  void Submit(Operation* op);
  // The task's current stage is done with it.
  void Complete(PartitionTask* task, const Status& status, Clock::time_point now);
  // The job failed: every queued or waiting task fails now, every stage fails what it holds
  // (those complete through Complete), and later tasks fail as they arrive.
  void FailAll(const Status& failure);
  // Starts what may start. Returns when Run wants to be called again even if nothing happens
  // (the stall guard's deadline), or nullopt.
  std::optional<Clock::time_point> Run(Clock::time_point now);

  size_t credit_in_flight() const { return credit_.in_flight(); }
  size_t credit_limit() const { return credit_.limit(); }
  // A new credit (0 = no cap) for the tasks started from now on (the autotuner).
  void SetCredit(size_t bytes) { credit_.set_limit(bytes); }
  size_t waiting_for_round() const { return rounds_.waiting(); }

 private:
  void Enter(PartitionTask* task);
  void Fail(PartitionTask* task, size_t first_unreached_stage, const Status& failure);
  void Finish(PartitionTask* task, const Status& status);
  bool CreditBlocked();
  void TakeBackCredit();

  Options options_;
  Finished on_finished_;
  Credit credit_;
  RoundSequencer rounds_;
  std::vector<Stage*> stages_;
  std::unordered_set<PartitionTask*> holding_credit_;
  Clock::time_point last_progress_{};
  Status failure_;
  Observer* observer_ = nullptr;
};

}  // namespace byteps::worker::pipeline
