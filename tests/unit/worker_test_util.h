// Shared pieces of the worker pipeline tests: hand-made tensor plans and operations, a sink that
// records completions (and lets a test wait for one with a deadline), and a stage the test
// completes by hand.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/key_layout.h"
#include "worker/pipeline/pipeline.h"
#include "worker/pipeline/stage.h"

namespace byteps::worker::testing {

// A plan of `parts` partitions of `part_bytes` each (declared key `dk`, all on server `server`).
inline std::unique_ptr<planning::TensorPlan> MakePlan(const std::string& name, uint32_t dk, size_t parts,
                                                      size_t part_bytes, DataType dtype = DataType::kFloat32,
                                                      int server = 0) {
  auto p = std::make_unique<planning::TensorPlan>();
  p->name = name;
  p->declared_key = dk;
  p->bytes = parts * part_bytes;
  p->dtype = dtype;
  for (size_t i = 0; i < parts; ++i) {
    planning::PartitionPlan pp;
    pp.key = protocol::MakeKey(dk, static_cast<uint32_t>(i));
    pp.server = server;
    pp.range = {i * part_bytes, part_bytes};
    p->partitions.push_back(pp);
  }
  return p;
}

// An operation over `plan` from `in` to `out`, through `pipeline`, with task ids from `next_id`.
inline std::shared_ptr<pipeline::Operation> MakeOp(const planning::TensorPlan& plan, const pipeline::Pipeline& pipeline,
                                                   const void* in, void* out, int priority = 0, bool average = false) {
  static std::mutex id_mu;  // tests make operations from several threads
  static uint64_t next_id = 1;
  TensorRequest r;
  r.name = plan.name;
  r.input = in;
  r.output = out;
  r.bytes = plan.bytes;
  r.dtype = plan.dtype;
  r.priority = priority;
  r.average = average;
  std::shared_ptr<pipeline::Operation> op;
  {
    std::lock_guard<std::mutex> lock(id_mu);
    op = pipeline::MakeOperation(r, plan, &pipeline, &next_id);
  }
  op->remaining = op->parts.size();
  op->part_done.assign(op->parts.size(), false);
  return op;
}

// Records every completion; a test waits for a task's with a deadline (completions may come from
// other threads).
class RecordingSink : public pipeline::StageSink {
 public:
  void Complete(pipeline::PartitionTask* task, const Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_[task] = status;
    ++count_;
    cv_.notify_all();
  }
  // The task's status once completed; DeadlineExceeded if it is not within 5 s.
  Status WaitFor(pipeline::PartitionTask* task) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(5), [&] { return done_.count(task) > 0; })) {
      return DeadlineExceeded("task " + std::to_string(task->id) + " was not completed");
    }
    return done_[task];
  }
  bool completed(pipeline::PartitionTask* task) {
    std::lock_guard<std::mutex> lock(mu_);
    return done_.count(task) > 0;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<pipeline::PartitionTask*, Status> done_;
  size_t count_ = 0;
};

// A stage that only records: the test completes its tasks. With `credit`, it uses the credit
// (CreditFor = the partition's bytes), like the network stage.
class ManualStage : public pipeline::Stage {
 public:
  ManualStage(std::string name, pipeline::StageSink* sink, bool credit = false)
      : pipeline::Stage(std::move(name), sink), credit_(credit) {}
  size_t CreditFor(const pipeline::PartitionTask& t) const override { return credit_ ? t.len : 0; }
  void Start(pipeline::PartitionTask* t) override { started.push_back(t); }
  void Flush() override { flushed_after.push_back(started.size()); }
  void Skip(pipeline::PartitionTask* t, const Status& failure) override { skipped.push_back({t, failure}); }
  void FailAll(const Status& failure) override { fail_all.push_back(failure); }
  void Finish(pipeline::PartitionTask* t, const Status& st = Status::Ok()) { sink()->Complete(t, st); }

  std::vector<pipeline::PartitionTask*> started;
  std::vector<size_t> flushed_after;  // started.size() at each Flush
  std::vector<std::pair<pipeline::PartitionTask*, Status>> skipped;
  std::vector<Status> fail_all;

 private:
  bool credit_;
};

}  // namespace byteps::worker::testing
