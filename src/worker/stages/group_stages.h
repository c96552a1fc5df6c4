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
// Go arrives (the local socket's one I/O thread: the root's order), from the registered task, and
// its stages complete on the group stream's callback. A root that fails a round before its
// broadcast sends Go(failed) instead (Skip), so the non-roots fail it too and queue nothing.
// Every Reduce first waits, on the device, for the operation's ready event; the framework's stream
// waits for the group stream after each Broadcast.
//
// The group is formed at the first device tensor's Admit (bounded by the start timeout): the root
// makes the id and sends it to the non-roots, everyone joins.
// Threading: Admit on framework threads; Start / Skip / FailAll per Stage; Go frames on the local
// socket's I/O thread; completions on the device's callback threads. One mutex orders it all.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "device/group.h"
#include "worker/local_reduce/local_reducer.h"
#include "worker/pipeline/stage.h"
#include "worker/stages/device_staging.h"

namespace byteps::worker::stages {

// The device group of this host's processes, and the rounds in flight through it.
class DeviceGroups {
 public:
  DeviceGroups(local_reduce::LocalReducer* local, DeviceStaging* staging, double start_timeout_s);
  ~DeviceGroups();
  bool is_root() const { return local_->is_root(); }

  // Forms the group for `device` on first use (blocking, bounded); later calls return at once.
  Status Ensure(const TensorDevice& device);

  DeviceStaging* staging() const { return staging_; }
  // group-reduce of `t` (sink: where it completes).
  void StartReduce(pipeline::PartitionTask* t, pipeline::StageSink* sink);
  // group-broadcast of `t`.
  void StartBroadcast(pipeline::PartitionTask* t, pipeline::StageSink* sink);
  // Root: `t` failed before its broadcast: the non-roots fail it too.
  void SkipBroadcast(pipeline::PartitionTask* t, const Status& failure);
  void FailAll(const Status& failure);

 private:
  using RoundKey = std::pair<uint64_t, uint32_t>;
  struct Pending {  // a non-root's registered round (or the root's, until its collectives are queued)
    pipeline::PartitionTask* task = nullptr;
    pipeline::StageSink* reduce_sink = nullptr;
    pipeline::StageSink* bcast_sink = nullptr;  // set once group-broadcast started
    bool reduce_queued = false, bcast_queued = false, bcast_done = false;
    Status bcast_status;
  };
  void OnFrame(const protocol::Header& h, const std::string& payload);            // non-root
  void QueueReduceLocked(pipeline::PartitionTask* t, pipeline::StageSink* sink);  // under mu_
  void QueueBroadcastLocked(const RoundKey& rk);                                  // non-root, under mu_
  void Finish(pipeline::StageSink* sink, pipeline::PartitionTask* t, const Status& st);
  uint8_t* OutputOf(const pipeline::PartitionTask& t) const;

  local_reduce::LocalReducer* local_;
  DeviceStaging* staging_;
  const double start_timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string id_;  // non-root: the id the root sent
  std::unique_ptr<device::Group> group_;
  std::shared_ptr<device::Device> device_;
  device::StreamHandle stream_ = nullptr;  // the group's collectives
  Status failure_;
  std::map<RoundKey, Pending> pending_;
  std::mutex form_mu_;  // one formation at a time
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
