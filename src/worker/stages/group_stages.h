// Stages "group-reduce" and "group-broadcast": the local reduce of device tensors over a device
// group of the host's processes (NCCL for CUDA; the fake device's groups in tests), instead of
// copying every process's tensor to the host and summing on the CPU.
//
//   root:      group-reduce -> copy-in -> [push-pull] [average] -> copy-out -> group-broadcast
//   non-root:  group-reduce -> group-broadcast
//
// Every rank of a group must queue the same collectives in the same order, so the local root
// decides the order: a non-root's group-reduce registers its task and tells the root it is ready
// (LocalReducer::Contribute of an on-device part); once everyone is, the root sends each non-root
// Go(reduce) and queues its own Reduce (into its output), under one lock; its group-broadcast sends
// Go(broadcast) and queues its Broadcast the same way. A non-root queues each collective when its
// Go arrives (the local socket's one I/O thread: the root's order), from the registered task. A
// root that fails a round before its broadcast sends Go(failed) instead (Skip), so the non-roots
// fail it too and queue nothing. Every Reduce first waits, on the device, for the operation's
// ready event; the framework's stream waits for the group stream after each Broadcast.
//
// Forming (group_formation.cc), at the first device tensor (PipelineSet::For, bounded by the start
// timeout): every process tells the host's local root which device it uses (kLocalGroup over the
// host-wide circle); the root decides for the whole host and tells everyone, so all take the same
// pipelines: device groups, unless two processes share a device (NCCL refuses a group with one
// GPU twice), in which case the host's device tensors take the CPU local reduce through pinned
// staging, and the root logs why once. With groups, each circle's root makes its group's id and
// sends it to the circle; everyone joins.
//
// Failures, as CUDA and NCCL have them: a stage never waits for a host function alone. Each queued
// collective is watched (device::Completions: an event, polled, with BYTEPS_TIMEOUT as deadline;
// the host function only queues a ticket), and its callback runs on the completions thread. A
// collective that fails or passes its deadline fails the group: it is aborted (ncclCommAbort ends
// what is stuck), every round in it fails naming the device and the local rank, and later device
// tensors fail with the cause. So does a job failure (FailAll) with collectives in flight. At
// shutdown the group's stream is drained (bounded); the group is destroyed only when idle,
// aborted otherwise.
// Threading: Ensure and Admit on framework threads; Start / Skip / FailAll per Stage; frames on the
// local sockets' I/O threads; completions on the completions thread. One mutex orders it all; no
// one holds it inside a host function.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "device/completions.h"
#include "device/group.h"
#include "worker/local_reduce/local_reducer.h"
#include "worker/pipeline/stage.h"
#include "worker/stages/device_staging.h"

namespace byteps::worker::stages {

// The device group of this process's circle, and the rounds in flight through it.
class DeviceGroups {
 public:
  // `all`: every process of the host (where the host-wide decision is made); `circle`: the
  // processes this one forms its group with (its PCIe switch's; `all` with one switch). Borrowed
  // for this object's life. `op_timeout_s` bounds each collective (BYTEPS_TIMEOUT).
  DeviceGroups(local_reduce::LocalReducer* all, local_reduce::LocalReducer* circle, DeviceStaging* staging,
               double start_timeout_s, double op_timeout_s);
  ~DeviceGroups();
  bool is_root() const { return local_->is_root(); }

  // Whether this host's device tensors reduce over device groups: decided with every local process
  // at the first call (blocking, bounded), and the group formed when they do; later calls return
  // at once. The first failure sticks (every later call returns it).
  StatusOr<bool> Ensure(const TensorDevice& device);
  Status failure() const;
  bool aborted() const;  // the group was aborted after a failure

  DeviceStaging* staging() const { return staging_; }
  // group-reduce of `t` (sink: where it completes).
  void StartReduce(pipeline::PartitionTask* t, pipeline::StageSink* sink);
  // group-broadcast of `t`.
  void StartBroadcast(pipeline::PartitionTask* t, pipeline::StageSink* sink);
  // Root: `t` failed before its broadcast: the non-roots fail it too.
  void SkipBroadcast(pipeline::PartitionTask* t, const Status& failure);
  void FailAll(const Status& failure);

  // For tests: holds the lock the stages' work takes, to show that no completion waits for it.
  std::unique_lock<std::mutex> LockForTest() { return std::unique_lock<std::mutex>(mu_); }

 private:
  using RoundKey = std::pair<uint64_t, uint32_t>;
  struct Pending {  // a non-root's registered round
    pipeline::PartitionTask* task = nullptr;
    pipeline::StageSink* reduce_sink = nullptr;
    pipeline::StageSink* bcast_sink = nullptr;  // set once group-broadcast started
    bool reduce_queued = false, bcast_queued = false, bcast_done = false;
    Status bcast_status;
  };
  struct Report {  // a local process's device (the local root's view, by local rank)
    device::Kind kind = device::Kind::kCpu;
    int index = 0;
    std::string hardware_id;
  };

  // Forming (group_formation.cc).
  StatusOr<bool> DecideForHost(const TensorDevice& d, const device::Device& dev);  // the host-wide verdict
  Status Form(const TensorDevice& d, DeviceStaging::Slot* slot);                   // this circle's group
  void OnFormationFrame(const protocol::Header& h, const std::string& payload);   // under mu_
  std::string Members() const;

  // Rounds (group_stages.cc).
  void OnFrame(const protocol::Header& h, const std::string& payload);
  void QueueReduceLocked(pipeline::PartitionTask* t, pipeline::StageSink* sink);  // under mu_
  void QueueBroadcastLocked(const RoundKey& rk);                                  // non-root, under mu_
  // Watches what was just queued on the group's stream; `done` runs on the completions thread.
  Status WatchLocked(const char* what, device::Completions::Done done);
  // `t`'s stage completes from its queued collective (root: both stages; non-root: its reduce).
  void OnQueuedDone(pipeline::PartitionTask* t, const Status& st, uint8_t* out);
  void OnNonRootBroadcastDone(const RoundKey& rk, const Status& st);
  // A collective failed or is stuck: the group is aborted and every round in it fails.
  void FailGroup(const Status& failure);
  // Takes every round this object still has to complete (under mu_), for `failure`.
  std::vector<std::pair<pipeline::PartitionTask*, pipeline::StageSink*>> TakeAllLocked();
  void Finish(pipeline::StageSink* sink, pipeline::PartitionTask* t, const Status& st);
  uint8_t* OutputOf(const pipeline::PartitionTask& t) const;

  local_reduce::LocalReducer* all_;
  local_reduce::LocalReducer* local_;  // the circle
  DeviceStaging* staging_;
  const double start_timeout_s_, op_timeout_s_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Forming.
  std::optional<bool> verdict_;              // the host's verdict (groups or not), once known
  std::optional<bool> decided_;              // Ensure's answer, once the verdict is in and the group formed
  std::map<int, Report> reports_;            // the local root: the others' devices, by local rank
  std::string id_;                           // non-root: the id its circle's root sent
  std::unique_ptr<device::Group> group_;
  std::shared_ptr<device::Device> device_;
  device::StreamHandle stream_ = nullptr;    // the group's collectives
  Status failure_;
  std::map<RoundKey, Pending> pending_;
  // Tasks whose stage completes from a queued collective's callback, with that stage's sink.
  std::map<pipeline::PartitionTask*, pipeline::StageSink*> queued_;
  std::mutex form_mu_;  // one formation at a time
  std::unique_ptr<device::Completions> completions_ = std::make_unique<device::Completions>();
};

class GroupReduceStage : public pipeline::Stage {
 public:
  GroupReduceStage(pipeline::StageSink* sink, DeviceGroups* groups)
      : pipeline::Stage("group-reduce", sink), groups_(groups) {}
  Status Admit(pipeline::Operation& op) override;
  void Start(pipeline::PartitionTask* task) override { groups_->StartReduce(task, sink()); }
  void FailAll(const Status& failure) override { groups_->FailAll(failure); }

 private:
  DeviceGroups* groups_;
};

class GroupBroadcastStage : public pipeline::Stage {
 public:
  GroupBroadcastStage(pipeline::StageSink* sink, DeviceGroups* groups)
      : pipeline::Stage("group-broadcast", sink), groups_(groups) {}
  void Start(pipeline::PartitionTask* task) override { groups_->StartBroadcast(task, sink()); }
  void Skip(pipeline::PartitionTask* task, const Status& failure) override { groups_->SkipBroadcast(task, failure); }

 private:
  DeviceGroups* groups_;
};

}  // namespace byteps::worker::stages
