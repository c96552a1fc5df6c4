// The worker's timeline (BYTEPS_TRACE_ON; docs/tracing.md): a dispatcher Observer that records,
// for the push_pulls of each tensor within the step window, the time every partition spent in
// each stage of its pipeline (and waiting for credit before the push-pull stage), and each call
// from submission to completion. Once every tensor that recorded has finished its end step, the
// records go to a writer thread that writes <dir>/<local_rank>/comm.json; nothing is recorded
// after that. Close writes what was recorded if that never happened (a job that ended early).
//
// Steps: a tensor's step is its 1-based count of push_pulls submitted (the core's own "__byteps."
// tensors and stand-ins for other local processes are not counted nor recorded); steps
// start_step..end_step, both included, are recorded: the same calls as BytePS's rule.
//
// Cost: one steady-clock read and a hash lookup per event of a traced operation; records live in
// fixed chunks (trace_data.h), so recording allocates per operation at most, never per event.
//
// Threading: the Observer methods run on the dispatcher thread only (pipeline/observer.h).
// SetClock is thread-safe. Close (and the destructor, which calls it) run after the dispatcher
// thread has stopped; they wait for the writer thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/pipeline/observer.h"
#include "worker/trace/trace_data.h"

namespace byteps::worker::pipeline {
class Stage;
}

namespace byteps::worker::trace {

struct TraceOptions {
  std::string dir;  // BYTEPS_TRACE_DIR: the file goes to <dir>/<local_rank>/comm.json
  int rank = 0;     // the worker's global rank
  int local_rank = 0;
  int start_step = 10;  // BYTEPS_TRACE_START_STEP (>= 1)
  int end_step = 20;    // BYTEPS_TRACE_END_STEP (> start_step)
};

class TraceRecorder : public pipeline::Observer {
 public:
  // Creates <dir>/<local_rank>/ (with its parents) and checks a file can be written there. An
  // error (InvalidArgument) names BYTEPS_TRACE_DIR, the directory and the system's reason.
  static StatusOr<std::unique_ptr<TraceRecorder>> Create(const TraceOptions& options);
  ~TraceRecorder() override;

  // The worker's global rank once the scheduler assigned it; before the dispatcher starts.
  void SetRank(int rank);
  // The job's id and this node's clock offset to the scheduler's, for `byteps trace merge`.
  void SetClock(std::string job, int64_t offset_us);
  // Writes the timeline now unless it was handed to the writer already, if anything was recorded;
  // waits for the writer. Idempotent.
  void Close();
  const std::string& path() const { return path_; }

  void OperationSubmitted(const pipeline::Operation& op) override;
  void TaskQueued(const pipeline::PartitionTask& task, size_t stage) override;
  void TaskStarted(const pipeline::PartitionTask& task, size_t stage) override;
  void TaskCompleted(const pipeline::PartitionTask& task, size_t stage, const Status& status) override;
  void OperationFinished(const pipeline::Operation& op) override;

 private:
  TraceRecorder(const TraceOptions& options, std::string path);

  struct Tensor {
    uint32_t index = 0;     // into data_->tensors
    uint32_t submitted = 0; // push_pulls so far (the step of the latest)
    bool recording = false;
  };
  // A traced operation in flight: its spans are [first, first + parts x stages).
  struct Live {
    size_t first_span = 0;
    size_t stages = 0;
    size_t total = 0;
    Tensor* tensor = nullptr;
    uint32_t step = 0;
  };
  Span* SpanOf(const pipeline::PartitionTask& task, size_t stage);
  uint16_t StageIndex(const pipeline::Stage* stage);
  void HandOff();
  void Write(const TraceData& data);

  TraceOptions options_;  // rank: set before the dispatcher starts
  const std::string path_;
  // Dispatcher thread only (until handed off / Close).
  std::unique_ptr<TraceData> data_;
  std::unordered_map<std::string, Tensor> tensors_;
  std::unordered_map<const pipeline::Operation*, Live> live_;
  std::vector<std::pair<const pipeline::Stage*, uint16_t>> stage_ids_;
  size_t recording_ = 0;   // tensors that recorded
  size_t finished_ = 0;    // of those, how many finished their end step
  bool handed_off_ = false;

  std::mutex mu_;
  std::string job_;              // guarded by mu_
  int64_t clock_offset_us_ = 0;  // guarded by mu_
  std::thread writer_;
};

}  // namespace byteps::worker::trace
