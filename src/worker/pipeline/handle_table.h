// The handles of push_pull calls: an id per Operation, completion as its partitions leave the
// pipeline, and poll / wait with a deadline / the first error (with the tensor's name).
// Threading: all methods are thread-safe. PartDone is called by the dispatcher thread; Poll, Wait
// and Release by the framework's threads.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/metrics.h"
#include "common/status.h"
#include "worker/pipeline/partition_task.h"

namespace byteps::worker::pipeline {

class HandleTable {
 public:
  // Registers `op` (parts filled in), gives it its id, and returns it. An operation without
  // partitions would never complete: it must have at least one.
  HandleId Add(std::shared_ptr<Operation> op);
  // Partition `part` of `op` left the pipeline with `status`. Returns true when that completed the
  // operation (the first error is the operation's error, with the tensor's name). `on_complete`
  // runs then, before any waiter wakes (what a waiter may read next, like the speed samples, is
  // in place when Wait returns); it runs under the table's lock and must not call back into it.
  bool PartDone(Operation& op, size_t part, const Status& status,
                const std::function<void(const Operation&)>& on_complete = nullptr);
  // True when finished successfully, false while running; the operation's error once it failed.
  StatusOr<bool> Poll(HandleId id) const;
  // Waits up to timeout_s. The operation's error, or DeadlineExceeded naming the tensor and where
  // its partitions are outstanding.
  Status Wait(HandleId id, double timeout_s) const;
  // Forgets the handle (the operation itself lives on until its partitions are done).
  void Release(HandleId id);
  // Waits until no operation is running (or timeout_s passed). True when none is.
  bool WaitIdle(double timeout_s) const;
  size_t running() const;

 private:
  static std::string Outstanding(const Operation& op);

  // From submission to the last partition, of push_pulls that succeeded (metrics::Global()).
  metrics::Histogram* const latency_ = metrics::Global().AddHistogram(
      "byteps_worker_push_pull_seconds", "time from a push_pull's call to its completion", "", metrics::LatencyBounds());
  // The slowest of them since the last heartbeat, with its tensor (`byteps top`).
  metrics::WindowMax* const slowest_ = metrics::Global().AddWindowMax("byteps_worker_slowest_push_pull");
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  HandleId next_ = 1;
  size_t running_ = 0;
  std::unordered_map<HandleId, std::shared_ptr<Operation>> handles_;
};

}  // namespace byteps::worker::pipeline
